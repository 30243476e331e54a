/* Horizontal fusion (docs/FUSION.md, "Plan search", step 2): independent
 * memory-bound groups become one kernel with a part each, and the kernel
 * splits the parts' concatenated elements evenly over the threads
 * (codegen/c_codegen.c, emit_phase_split). Checked on AdamW over many
 * parameters of odd sizes (one element, a prime-length vector, ragged
 * matrices, one large enough to run on every thread) and on independent
 * element-wise chains: in loop and stitch mode each is one kernel with a
 * part per tensor; so are independent column sums (their parts are cut
 * at tiles, not rows); in every fusion mode the results match the
 * reference executor; and any thread count gives the bits of one thread,
 * since the rows and tiles a thread gets depend on the thread count.
 * Chains that wait on different communication are never merged. */
#include "common.h"

#include "fusion/fusion.h"
#include "ir/graph.h"
#include "perf/machine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

#define MAX_IO 64

/* AdamW over tensors of these shapes (rank 0 ends the list). */
typedef struct shape {
  int32_t rank;
  int64_t d[3];
} shape;

static const shape adam_shapes[] = {
    {2, {37, 19}}, {1, {5}},      {2, {301, 7}}, {1, {1}},       {3, {2, 3, 11}},
    {2, {97, 61}}, {1, {127}},    {2, {1, 13}},  {2, {129, 3}},  {1, {4099}},
    {2, {3, 1}},   {2, {61, 67}}, {0, {0}},
};

static void put_type(char *buf, size_t n, const shape *s) {
  size_t at = (size_t)snprintf(buf, n, "f32[");
  for (int32_t i = 0; i < s->rank && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)s->d[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

/* The text IR of one AdamW step over adam_shapes; n_parts gets their count. */
static char *adam_text(int32_t *n_parts) {
  size_t cap = 16384, at = 0;
  char *t = malloc(cap);
  if (!t) return NULL;
  at += (size_t)snprintf(t + at, cap - at, "input %%step : f32[]\n");
  int32_t n = 0;
  for (; adam_shapes[n].rank > 0; n++) {
    char ty[96];
    put_type(ty, sizeof ty, &adam_shapes[n]);
    static const char *const what[4] = {"p", "g", "m", "v"};
    for (int k = 0; k < 4; k++)
      at += (size_t)snprintf(t + at, cap - at, "param %%%s%d : %s\n", what[k], n, ty);
  }
  for (int32_t i = 0; i < n; i++) {
    char ty[96];
    put_type(ty, sizeof ty, &adam_shapes[i]);
    at += (size_t)snprintf(t + at, cap - at,
                           "%%np%d : %s, %%nm%d : %s, %%nv%d : %s = adamw(%%p%d, %%g%d, %%m%d, "
                           "%%v%d, %%step, lr=0.01, weight_decay=%s)\n",
                           i, ty, i, ty, i, ty, i, i, i, i, i % 2 ? "0" : "0.1");
  }
  for (int32_t i = 0; i < n; i++)
    at += (size_t)snprintf(t + at, cap - at, "output np%d = %%np%d\noutput nm%d = %%nm%d\n"
                                             "output nv%d = %%nv%d\n", i, i, i, i, i, i);
  *n_parts = n;
  return t;
}

/* Independent element-wise chains of different ops and odd sizes. */
static const char chains_text[] =
    "param %a : f32[33, 17]\n"
    "param %b : f32[33, 17]\n"
    "param %c : f32[7]\n"
    "param %d : f32[211, 29]\n"
    "param %e : f32[211, 29]\n"
    "param %f : f32[3, 5, 2]\n"
    "%t1 : f32[33, 17] = tanh(%a)\n"
    "%y1 : f32[33, 17] = mul(%t1, %b)\n"
    "%y2 : f32[7] = exp(%c)\n"
    "%s3 : f32[211, 29] = sub(%d, %e)\n"
    "%y3 : f32[211, 29] = mul(%s3, %s3)\n"
    "%y4 : f32[3, 5, 2] = sigmoid(%f)\n"
    "output y1 = %y1\n"
    "output y2 = %y2\n"
    "output y3 = %y3\n"
    "output y4 = %y4\n";

/* Independent groups with column sums: their parts are cut at tiles,
 * whose partials are combined in tile order whichever thread ran them. */
static const char colsum_text[] =
    "param %a : f32[4099, 19]\n"
    "param %b : f32[1031, 41]\n"
    "%s : f32[19] = reduce_sum(%a, axes=[0])\n"
    "%t : f32[1031, 41] = tanh(%b)\n"
    "%u : f32[41] = reduce_sum(%b, axes=[0])\n"
    "output s = %s\n"
    "output t = %t\n"
    "output u = %u\n";

/* A part over an empty axis still writes its rows (sums of nothing). */
static const char empty_text[] =
    "param %a : f32[37, 0]\n"
    "param %b : f32[53, 7]\n"
    "%s : f32[37] = reduce_sum(%a, axes=[1])\n"
    "%t : f32[53, 7] = tanh(%b)\n"
    "output s = %s\n"
    "output t = %t\n";

/* Independent chains after different comm ops (a pipeline stage's
 * receives; gradient all-reduces): each waits on its own, so they stay
 * two kernels (plan_merge.c, group_wait). */
static const char *const comm_texts[] = {
    "%ra : f32[64, 32] = transfer(src=0, dst=1, member=1, seq=0, shape=[64, 32])\n"
    "%rb : f32[64, 32] = transfer(src=0, dst=1, member=1, seq=1, shape=[64, 32])\n"
    "%ya : f32[64, 32] = tanh(%ra)\n"
    "%yb : f32[64, 32] = exp(%rb)\n"
    "output ya = %ya\n"
    "output yb = %yb\n",
    "param %ga : f32[64, 32]\n"
    "param %gb : f32[64, 32]\n"
    "%ra : f32[64, 32] = all_reduce(%ga, size=2, member=0, seq=0)\n"
    "%rb : f32[64, 32] = all_reduce(%gb, size=2, member=0, seq=1)\n"
    "%ya : f32[64, 32] = tanh(%ra)\n"
    "%yb : f32[64, 32] = exp(%rb)\n"
    "output ya = %ya\n"
    "output yb = %yb\n",
};

/* Plans the decomposed graph in mode m with the default machine: the
 * number of kernels, and the parts of the largest. */
static void plan_shape(const loom_graph *g, loom_fusion_mode m, int32_t *kernels, int32_t *parts) {
  *kernels = *parts = -1;
  loom_graph *d = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (!d) return;
  loom_machine mc;
  loom_machine_default(&mc);
  loom_fusion_options fo = {.mode = m, .machine = &mc};
  loom_program p;
  CHECK_OK(ctx, loom_fusion_compile(ctx, d, &fo, &p));
  *kernels = p.n_kernels;
  *parts = 0;
  for (int32_t k = 0; k < p.n_kernels; k++)
    if (p.kernels[k].n_parts > *parts) *parts = p.kernels[k].n_parts;
  loom_program_clear(&p);
  loom_graph_free(d);
}

static bool run(const loom_graph *g, const char *backend, loom_fusion_mode fusion, int32_t threads,
                loom_tensor **in, loom_tensor **out) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  CHECK_OK(ctx, loom_ctx_set_threads(ctx, threads));
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  if (!s) return false;
  for (int32_t i = 0; i < g->n_outputs; i++) out[i] = NULL;
  loom_status st =
      loom_session_run(s, g->n_inputs, (const loom_tensor *const *)in, g->n_outputs, out);
  CHECK_OK(ctx, st);
  loom_session_free(s);
  loom_ctx_set_threads(ctx, 0);
  return st == LOOM_STATUS_OK;
}

static void free_all(loom_tensor **t, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    loom_tensor_free(t[i]);
    t[i] = NULL;
  }
}

static void check_graph(const char *name, const char *text, int32_t want_parts) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return;
  CHECK(g->n_inputs <= MAX_IO && g->n_outputs <= MAX_IO);
  if (g->n_inputs > MAX_IO || g->n_outputs > MAX_IO) {
    loom_graph_free(g);
    return;
  }
  /* loop and stitch: one kernel, a part per independent group */
  static const loom_fusion_mode fused[] = {LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  for (int m = 0; m < 2; m++) {
    int32_t kernels, parts;
    plan_shape(g, fused[m], &kernels, &parts);
    CHECK(kernels == 1 && parts == want_parts);
    if (kernels != 1 || parts != want_parts)
      fprintf(stderr, "  %s (%s): %d kernels, largest %d parts; expected 1 kernel of %d\n", name,
              loom_fusion_mode_name(fused[m]), kernels, parts, want_parts);
  }
  /* data: moments v positive, the step a count */
  loom_test_rng rng = {0xada + (uint64_t)strlen(name)};
  loom_tensor *in[MAX_IO] = {0}, *ref[MAX_IO] = {0};
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_value_info *v = &g->values[g->inputs[i]];
    CHECK_OK(ctx, loom_tensor_new(ctx, v->type.dtype, v->type.rank, v->type.shape, &in[i]));
    if (!in[i]) goto done;
    float *d = loom_tensor_data(in[i]);
    bool positive = v->name && v->name[0] == 'v';
    for (int64_t k = 0; k < loom_tensor_numel(in[i]); k++)
      d[k] = strcmp(v->name, "step") == 0 ? 3.0f
             : positive                    ? (float)loom_test_uniform(&rng, 0.01, 1)
                                           : (float)loom_test_uniform(&rng, -1, 1);
  }
  if (!run(g, "ref", LOOM_FUSION_STITCH, 0, in, ref)) goto done;
  static const loom_fusion_mode modes[] = {LOOM_FUSION_NONE, LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  for (int m = 0; m < 3; m++) {
    loom_tensor *one[MAX_IO] = {0};
    if (!run(g, "cpu", modes[m], 1, in, one)) continue;
    double worst = 0;
    for (int32_t o = 0; o < g->n_outputs; o++) {
      const float *a = loom_tensor_data(one[o]), *b = loom_tensor_data(ref[o]);
      for (int64_t i = 0; i < loom_tensor_numel(ref[o]); i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (1e-3 + fabs((double)b[i]));
        worst = e > worst || isnan(e) ? e : worst;
      }
    }
    CHECK(worst <= 1e-5);
    if (!(worst <= 1e-5))
      fprintf(stderr, "  %s (%s): relative error %g against the reference\n", name,
              loom_fusion_mode_name(modes[m]), worst);
    /* every thread count splits the rows differently: the same bits */
    static const int32_t threads[] = {2, 3, 5};
    for (int t = 0; t < 3; t++) {
      loom_tensor *many[MAX_IO] = {0};
      if (!run(g, "cpu", modes[m], threads[t], in, many)) continue;
      bool same = true;
      for (int32_t o = 0; o < g->n_outputs; o++)
        same &= memcmp(loom_tensor_data(many[o]), loom_tensor_data(one[o]),
                       (size_t)loom_tensor_numel(one[o]) * sizeof(float)) == 0;
      CHECK(same);
      if (!same)
        fprintf(stderr, "  %s (%s): %d threads differ from one\n", name,
                loom_fusion_mode_name(modes[m]), threads[t]);
      free_all(many, g->n_outputs);
    }
    free_all(one, g->n_outputs);
  }
done:
  free_all(ref, g->n_outputs);
  free_all(in, g->n_inputs);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  int32_t n = 0;
  char *adam = adam_text(&n);
  CHECK(adam != NULL);
  if (adam) check_graph("adamw", adam, n);
  free(adam);
  check_graph("element-wise chains", chains_text, 4);
  check_graph("column sums", colsum_text, 2);
  check_graph("an empty axis", empty_text, 2);
  for (size_t t = 0; t < sizeof comm_texts / sizeof *comm_texts; t++) {
    loom_graph *cg = NULL;
    CHECK_OK(ctx, loom_graph_parse(ctx, comm_texts[t], &cg));
    for (int m = 0; cg && m < 2; m++) {
      int32_t kernels, parts;
      plan_shape(cg, m ? LOOM_FUSION_STITCH : LOOM_FUSION_LOOP, &kernels, &parts);
      CHECK(kernels == 2 && parts == 1);
      if (kernels != 2 || parts != 1)
        fprintf(stderr, "  chains after two comm ops (%zu): %d kernels (largest %d parts), "
                "expected 2 of 1\n", t, kernels, parts);
    }
    loom_graph_free(cg);
  }
  loom_ctx_free(ctx);
  return loom_test_finish("test_horizontal");
}

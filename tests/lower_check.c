/* The lowering harness (lower_check.h). */
#include "lower_check.h"

#include "ir/build.h"
#include "ir/dtype.h"
#include "kernel/interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool verbose(void) {
  const char *v = getenv("LOOM_TEST_VERBOSE");
  return v && v[0] == '1';
}

/* Runs g (composites allowed) through the reference and through one
 * stitched kernel; compares every output. */
void loom_test_lower_check(loom_ctx *ctx, loom_graph *g0, const loom_lower_case *tc) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g0, &g));
  if (!g) return;
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  int32_t non_fusible = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    gon[n] = loom_fusion_node_fusible(g, n) ? 7 : -1;
    non_fusible += gon[n] < 0;
  }
  CHECK(non_fusible == 0);
  loom_group_info info;
  bool ok = loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_STITCH, &info);
  CHECK(ok);
  if (!ok) {
    loom_kernel k;
    loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, NULL, "k", &k);
    fprintf(stderr, "%s: stitch refused: %s\n", tc->name, loom_ctx_error(ctx));
  }
  if (verbose()) {
    char *text = NULL;
    if (loom_graph_print(g, &text) == LOOM_STATUS_OK) fputs(text, stdout);
    loom_free(text);
  }
  if (tc->loop_ok >= 0) {
    bool lo = loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_LOOP, NULL);
    CHECK(lo == (tc->loop_ok == 1));
    if (lo != (tc->loop_ok == 1)) fprintf(stderr, "%s: loop mode says %d\n", tc->name, lo);
  }
  if (g->n_nodes > 1) CHECK(!loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_NONE, NULL));
  loom_kernel k = {0};
  loom_kschedule sched = {.rows_per_tile = 2, .vector_width = 4};
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, &sched, "k_test", &k));
  if (k.n_parts > 0) {
    if (tc->want_parts) CHECK(k.n_parts == tc->want_parts);
    if (tc->want_phases) CHECK(k.parts[k.n_parts - 1].phase + 1 == tc->want_phases);
    CHECK(info.n_parts == k.n_parts);
    printf("%-28s nodes %3d  parts %d  phases %d  stages %2d  row/col reduce %d/%d  scratch %d  "
           "read %lld B  written %lld B  recompute %lld/%lld\n",
           tc->name, g->n_nodes, k.n_parts, k.parts[k.n_parts - 1].phase + 1, info.n_stages,
           info.n_row_reduce, info.n_col_reduce, info.n_scratch, (long long)info.bytes_read,
           (long long)info.bytes_written, (long long)info.recompute_ops, (long long)info.elem_ops);
    if (verbose()) {
      char *text = NULL;
      if (loom_kernel_print(ctx, &k, &text) == LOOM_STATUS_OK) fputs(text, stdout);
      free(text);
    }
  }

  /* inputs */
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_tensor **in = calloc((size_t)ni, sizeof(loom_tensor *));
  loom_tensor **ref = calloc((size_t)no, sizeof(loom_tensor *));
  void **mine = calloc((size_t)no, sizeof(void *));
  loom_test_rng rng = {0x1234 + (uint64_t)strlen(tc->name)};
  for (int32_t i = 0; i < ni; i++) {
    const loom_type *t = loom_value_type(g, loom_graph_input_value(g, i));
    CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
    void *d = loom_tensor_data(in[i]);
    int64_t n = loom_type_numel(t);
    for (int64_t e = 0; e < n; e++) {
      if (loom_dtype_is_int(t->dtype)) {
        int64_t v = tc->ilo + (int64_t)loom_test_uniform(&rng, 0, (double)(tc->ihi - tc->ilo + 1));
        loom_store(t->dtype, d, e, (double)LOOM_MIN(v, tc->ihi));
      } else {
        loom_store(t->dtype, d, e, loom_test_uniform(&rng, tc->lo, tc->hi));
      }
    }
  }
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(ctx, loom_session_new(ctx, g, &opts, &s));
  if (s) CHECK_OK(ctx, loom_session_run(s, ni, (const loom_tensor *const *)in, no, ref));
  loom_session_free(s);

  /* the kernel's arguments: graph inputs and outputs */
  void **args = calloc((size_t)(k.n_args > 0 ? k.n_args : 1), sizeof(void *));
  for (int32_t o = 0; o < no; o++) {
    const loom_type *t = loom_value_type(g, loom_graph_output_value(g, o));
    mine[o] = calloc((size_t)(loom_type_numel(t) + 1), loom_dtype_size(t->dtype));
  }
  for (int32_t a = 0; a < k.n_args; a++) {
    int32_t v = k.args[a].value;
    for (int32_t i = 0; i < ni; i++)
      if (loom_graph_input_value(g, i) == v) args[a] = loom_tensor_data(in[i]);
    for (int32_t o = 0; o < no; o++)
      if (loom_graph_output_value(g, o) == v) args[a] = mine[o];
    CHECK(args[a] != NULL || k.args[a].temp);
  }
  if (k.n_parts > 0) CHECK_OK(ctx, loom_kernel_interpret(ctx, &k, args));
  for (int32_t o = 0; o < no && ref[o]; o++) {
    const loom_type *t = loom_value_type(g, loom_graph_output_value(g, o));
    int64_t n = loom_type_numel(t), bad = 0;
    double maxabs = 0, worst = 0;
    for (int64_t e = 0; e < n; e++)
      maxabs = fmax(maxabs, fabs(loom_load(t->dtype, loom_tensor_data(ref[o]), e)));
    for (int64_t e = 0; e < n; e++) {
      double want = loom_load(t->dtype, loom_tensor_data(ref[o]), e);
      double got = loom_load(t->dtype, mine[o], e);
      if ((want != want && got != got) || want == got) continue; /* NaNs, infinities */
      double err = fabs(got - want) / fmax(fabs(want), 1e-3 * fmax(maxabs, 1e-30));
      /* f32 exp/tanh/sigmoid are Loom's own (kernel/kmath.h, within 2 ulp of
       * the reference's libm in double), and cancellation in random DAGs
       * can amplify an ulp to a few 1e-5 */
      if (!(err <= 1e-4)) bad++;
      if (err > worst || err != err) worst = err;
    }
    CHECK(bad == 0);
    if (bad)
      fprintf(stderr, "%s: output %d (%s): %lld of %lld differ, worst relative %g\n", tc->name, o,
              loom_graph_output_name(g, o), (long long)bad, (long long)n, worst);
  }
  for (int32_t i = 0; i < ni; i++)
    loom_tensor_free(in[i]);
  for (int32_t o = 0; o < no; o++) {
    loom_tensor_free(ref[o]);
    free(mine[o]);
  }
  free(in);
  free(ref);
  free(mine);
  free(args);
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

/* ---- graph builders ------------------------------------------------------ */

int32_t loom_test_lower_input(loom_graph *g, const char *name, loom_dtype dt, int32_t rank,
                              const int64_t *shape) {
  loom_value v = -1;
  loom_graph_input(g, name, dt, rank, shape, &v);
  return v;
}

int32_t loom_test_lower_op(loom_graph *g, loom_op op, int32_t n, const int32_t *in, int32_t n_attr,
                           const loom_attr *attrs) {
  loom_value out = -1;
  loom_graph_op(g, op, n, in, n_attr, attrs, &out);
  return out;
}

int32_t loom_test_lower_loss(loom_graph *g, int32_t y, int32_t rank, const int64_t *shape) {
  int32_t w = loom_test_lower_input(g, "w_loss", LOOM_DTYPE_F32, rank, shape);
  return lb_sum(g, lb_mul(g, y, w), 0, NULL, false);
}

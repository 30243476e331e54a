/* GEMM epilogues (fusion/epilogue.c): graphs where a kernel reads a
 * matmul's product row by row — bias + GELU, bias + residual + LayerNorm,
 * a batched attention score with softmax — run with the kernel fused
 * into the GEMM in loop and stitch modes (element-wise epilogues only in
 * loop mode; a kernel with a column reduction is never one), and the same
 * after a convolution (its cpu kernel's blocks of rows), and match
 * the reference; the stats say how many kernels became epilogues. Also the generated rows
 * entry itself: any split of the rows into ranges gives the whole
 * kernel's results bit for bit. */
#include "common.h"

#include "codegen/c_codegen.h"
#include "fusion/fusion.h"
#include "ir/graph.h"
#include "perf/machine.h"
#include "runtime/jit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

typedef struct workload {
  const char *name;
  const char *text;
  int32_t epilogues_stitch, epilogues_loop; /* kernels fused into GEMMs */
} workload;

static const workload workloads[] = {
    {"bias+gelu",
     "input %x : f32[96, 64]\n"
     "param %w : f32[64, 80]\n"
     "param %b : f32[80]\n"
     "%h : f32[96, 80] = matmul(%x, %w)\n"
     "%hb : f32[96, 80] = add(%h, %b)\n"
     "%y : f32[96, 80] = gelu(%hb)\n"
     "output y = %y\n",
     1, 1},
    {"bias+residual+layernorm",
     "input %x : f32[4, 40, 48]\n"
     "param %w : f32[48, 48]\n"
     "param %b : f32[48]\n"
     "param %g : f32[48]\n"
     "param %beta : f32[48]\n"
     "%h : f32[4, 40, 48] = matmul(%x, %w)\n"
     "%hb : f32[4, 40, 48] = add(%h, %b)\n"
     "%r : f32[4, 40, 48] = add(%hb, %x)\n"
     "%y : f32[4, 40, 48] = layer_norm(%r, %g, %beta, axis=-1)\n"
     "output y = %y\n",
     1, 0},
    {"scores+softmax",
     "input %q : f32[3, 2, 33, 16]\n"
     "input %k : f32[3, 2, 33, 16]\n"
     "%s : f32[3, 2, 33, 33] = matmul(%q, %k, trans_b=true)\n"
     "%p : f32[3, 2, 33, 33] = softmax(%s, axis=-1)\n"
     "output p = %p\n",
     1, 0},
    /* big enough to run on every thread (tests the blocks' determinism) */
    {"bias+gelu, threaded",
     "input %x : f32[256, 128]\n"
     "param %w : f32[128, 192]\n"
     "param %b : f32[192]\n"
     "%h : f32[256, 192] = matmul(%x, %w)\n"
     "%hb : f32[256, 192] = add(%h, %b)\n"
     "%y : f32[256, 192] = gelu(%hb)\n"
     "output y = %y\n",
     1, 1},
    /* a constant that a GEMM reads (a step outside kernels) stays out of
     * the bias + GELU kernel: as a second part there it would cost the
     * kernel its place in the GEMM (plan_merge.c, epilogue_lost) */
    {"bias+gelu beside a constant a GEMM reads",
     "input %x : f32[256, 128]\n"
     "param %w : f32[128, 192]\n"
     "param %b : f32[192]\n"
     "input %u : f32[64, 32]\n"
     "%h : f32[256, 192] = matmul(%x, %w)\n"
     "%hb : f32[256, 192] = add(%h, %b)\n"
     "%y : f32[256, 192] = gelu(%hb)\n"
     "%c0 : f32[] = constant(value=0.25)\n"
     "%c : f32[32, 16] = broadcast_to(%c0, shape=[32, 16])\n"
     "%v : f32[64, 16] = matmul(%u, %c)\n"
     "output y = %y\n"
     "output v = %v\n",
     1, 1},
    /* a convolution (cpu_conv.c) with BatchNormalization's per-channel
     * scale and shift and a ReLU after it, run on each image's blocks of
     * output channels */
    {"conv+batchnorm+relu",
     "input %x : f32[2, 8, 20, 20]\n"
     "param %w : f32[32, 8, 3, 3]\n"
     "param %s : f32[32, 1, 1]\n"
     "param %t : f32[32, 1, 1]\n"
     "%c : f32[2, 32, 20, 20] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m : f32[2, 32, 20, 20] = mul(%c, %s)\n"
     "%a : f32[2, 32, 20, 20] = add(%m, %t)\n"
     "%y : f32[2, 32, 20, 20] = relu(%a)\n"
     "output y = %y\n",
     1, 1},
    {"conv+batchnorm+relu, blocks of channels",
     "input %x : f32[1, 16, 40, 40]\n"
     "param %w : f32[128, 16, 3, 3]\n"
     "param %s : f32[128, 1, 1]\n"
     "param %b : f32[128, 1, 1]\n"
     "%c : f32[1, 128, 20, 20] = conv(%x, %w, strides=[2, 2], pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m : f32[1, 128, 20, 20] = mul(%c, %s)\n"
     "%a : f32[1, 128, 20, 20] = add(%m, %b)\n"
     "%y : f32[1, 128, 20, 20] = relu(%a)\n"
     "output y = %y\n",
     1, 1},
    /* one kernel with a column reduction (per-tile partials): not an
     * epilogue, rows are not independent */
    {"column reduction and element-wise",
     "input %x : f32[64, 32]\n"
     "param %w : f32[32, 24]\n"
     "%h : f32[64, 24] = matmul(%x, %w)\n"
     "%s : f32[24] = reduce_sum(%h, axes=[0])\n"
     "%t : f32[64, 24] = tanh(%h)\n"
     "output s = %s\n"
     "output t = %t\n",
     0, 0},
};

static loom_tensor *random_tensor(loom_dtype dt, int32_t rank, const int64_t *shape,
                                  loom_test_rng *rng) {
  loom_tensor *t = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, dt, rank, shape, &t));
  if (!t) return NULL;
  float *d = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) d[i] = (float)loom_test_uniform(rng, -1, 1);
  return t;
}

/* Runs g on backend/fusion with the given inputs; outputs into out[]; on
 * the cpu backend again on one thread, which must give the same bits (the
 * blocks, like every tile, depend on the shapes only). */
static bool run(const loom_graph *g, const char *backend, loom_fusion_mode fusion, loom_tensor **in,
                int32_t n_in, loom_tensor **out, int32_t n_out, loom_session_stats *stats) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  if (!s) return false;
  if (stats) CHECK_OK(ctx, loom_session_get_stats(s, stats));
  for (int32_t i = 0; i < n_out; i++) out[i] = NULL;
  loom_status st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  CHECK_OK(ctx, st);
  if (!st && strcmp(backend, "cpu") == 0) {
    loom_tensor *one[4] = {0};
    CHECK_OK(ctx, loom_ctx_set_threads(ctx, 1));
    CHECK_OK(ctx, loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, one));
    loom_ctx_set_threads(ctx, 0);
    for (int32_t o = 0; o < n_out && o < 4; o++) {
      CHECK(one[o] && memcmp(loom_tensor_data(one[o]), loom_tensor_data(out[o]),
                             (size_t)loom_tensor_numel(out[o]) * sizeof(float)) == 0);
      loom_tensor_free(one[o]);
    }
  }
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

static void test_workload(const workload *w) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, w->text, &g));
  if (!g) return;
  loom_test_rng rng = {0x5eed + (uint64_t)strlen(w->name)};
  int32_t n_in = g->n_inputs;
  loom_tensor *in[8] = {0};
  for (int32_t i = 0; i < n_in && i < 8; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    in[i] = random_tensor(t->dtype, t->rank, t->shape, &rng);
  }
  loom_tensor *ref[4] = {0};
  int32_t n_out = g->n_outputs;
  bool ok = run(g, "ref", LOOM_FUSION_STITCH, in, n_in, ref, n_out, NULL);
  static const loom_fusion_mode modes[] = {LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  for (int m = 0; ok && m < 2; m++) {
    loom_tensor *out[4] = {0};
    loom_session_stats stats;
    memset(&stats, 0, sizeof stats);
    if (!run(g, "cpu", modes[m], in, n_in, out, n_out, &stats)) continue;
    int32_t want = m ? w->epilogues_stitch : w->epilogues_loop;
    CHECK(stats.n_epilogues == want);
    if (stats.n_epilogues != want)
      fprintf(stderr, "  %s (%s): %d epilogues, expected %d\n", w->name,
              loom_fusion_mode_name(modes[m]), stats.n_epilogues, want);
    double worst = 0;
    for (int32_t o = 0; o < n_out; o++) {
      const float *a = loom_tensor_data(out[o]), *b = loom_tensor_data(ref[o]);
      for (int64_t i = 0; i < loom_tensor_numel(ref[o]); i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        worst = e > worst || isnan(e) ? e : worst;
      }
      loom_tensor_free(out[o]);
    }
    /* f32 GEMM in a different tile order than the reference's doubles */
    CHECK(worst <= 2e-5);
    if (!(worst <= 2e-5))
      fprintf(stderr, "  %s (%s): error %g\n", w->name, loom_fusion_mode_name(modes[m]), worst);
  }
  for (int32_t o = 0; o < n_out; o++) loom_tensor_free(ref[o]);
  for (int32_t i = 0; i < n_in; i++) loom_tensor_free(in[i]);
  loom_graph_free(g);
}

/* The rows entry of every kernel with one, over ragged row ranges on two
 * "threads", against the kernel function: bitwise. */
static void test_rows_entry(void) {
  loom_graph *g = NULL, *d = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, workloads[1].text, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  loom_graph_free(g);
  if (!d) return;
  loom_machine mc;
  loom_machine_default(&mc);
  loom_fusion_options fo = {.mode = LOOM_FUSION_STITCH, .machine = &mc};
  loom_program p;
  CHECK_OK(ctx, loom_fusion_compile(ctx, d, &fo, &p));
  char *src = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, p.kernels, p.n_kernels, &src));
  loom_jit_module *mod = NULL;
  if (src) CHECK_OK(ctx, loom_jit_load(ctx, src, &mod, NULL));
  int32_t tested = 0;
  loom_test_rng rng = {7};
  for (int32_t ki = 0; mod && ki < p.n_kernels; ki++) {
    const loom_kernel *k = &p.kernels[ki];
    if (!loom_kernel_has_rows_entry(k)) continue;
    char name[64];
    snprintf(name, sizeof name, "%s_rows", k->name);
    void *sym_full = loom_jit_symbol(mod, k->name), *sym_rows = loom_jit_symbol(mod, name);
    CHECK(sym_full && sym_rows);
    if (!sym_full || !sym_rows) continue;
    loom_kernel_fn full;
    loom_kernel_rows_fn rows;
    memcpy(&full, &sym_full, sizeof full);
    memcpy(&rows, &sym_rows, sizeof rows);
    void *args[16] = {0}, *args2[16] = {0};
    int64_t bytes[16] = {0};
    for (int32_t a = 0; a < k->n_args && a < 16; a++) {
      bytes[a] = k->args[a].numel * 4;
      args[a] = calloc((size_t)k->args[a].numel + 1, 4);
      args2[a] = k->args[a].is_output ? calloc((size_t)k->args[a].numel + 1, 4) : args[a];
      if (!k->args[a].is_output)
        for (int64_t i = 0; i < k->args[a].numel; i++)
          ((float *)args[a])[i] = (float)loom_test_uniform(&rng, -2, 2);
    }
    int64_t wsb = loom_kernel_workspace_bytes(k, 2);
    void *ws = aligned_alloc(64, (size_t)(wsb + 63) / 64 * 64 + 64);
    full(args, ws, 2);
    int64_t n_rows = loom_kpart_rows(&k->parts[0]);
    for (int64_t r = 0; r < n_rows;) {
      int64_t len = 1 + (int64_t)loom_test_uniform(&rng, 0, 17);
      int64_t end = r + len < n_rows ? r + len : n_rows;
      rows(args2, ws, (int32_t)(r & 1), r, end);
      r = end;
    }
    bool same = true;
    for (int32_t a = 0; a < k->n_args && a < 16; a++)
      if (k->args[a].is_output) same = same && memcmp(args[a], args2[a], (size_t)bytes[a]) == 0;
    CHECK(same);
    tested++;
    for (int32_t a = 0; a < k->n_args && a < 16; a++) {
      if (args2[a] != args[a]) free(args2[a]);
      free(args[a]);
    }
    free(ws);
  }
  CHECK(tested >= 1);
  loom_jit_free(mod);
  free(src);
  loom_program_clear(&p);
  loom_graph_free(d);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) test_workload(&workloads[i]);
  test_rows_entry();
  loom_ctx_free(ctx);
  return loom_test_finish("test_epilogue");
}

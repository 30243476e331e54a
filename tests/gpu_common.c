/* The GPU backends' shared checks (gpu_common.h). */
#include "gpu_common.h"

#include "ir/graph.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool loom_test_gpu_run(loom_ctx *ctx, loom_graph *g, const char *backend, loom_fusion_mode fusion,
                       loom_gemm_precision gemm, int32_t n_in, loom_tensor **in, int32_t n_out,
                       loom_tensor **out) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion, .gemm = gemm);
  loom_status st = loom_session_new(ctx, g, &o, &s);
  if (!st) st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  if (st)
    fprintf(stderr, "%s/%s: %s\n", backend, loom_fusion_mode_name(fusion), loom_ctx_error(ctx));
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

void loom_test_gpu_fill(loom_tensor *t, uint64_t seed) {
  loom_test_rng rng = {seed};
  int64_t n = loom_tensor_numel(t);
  if (loom_tensor_dtype(t) == LOOM_DTYPE_F64) {
    double *p = loom_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
      p[i] = loom_test_uniform(&rng, -2, 2);
  } else {
    float *p = loom_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
      p[i] = (float)loom_test_uniform(&rng, -2, 2);
  }
}

double loom_test_gpu_worst_rel(const loom_tensor *a, const loom_tensor *b, double floor) {
  double worst = 0;
  int64_t n = loom_tensor_numel(a);
  bool f64 = loom_tensor_dtype(a) == LOOM_DTYPE_F64;
  for (int64_t i = 0; i < n; i++) {
    double x =
        f64 ? ((const double *)loom_tensor_data(a))[i] : ((const float *)loom_tensor_data(a))[i];
    double y =
        f64 ? ((const double *)loom_tensor_data(b))[i] : ((const float *)loom_tensor_data(b))[i];
    worst = fmax(worst, fabs(x - y) / fmax(floor, fabs(x)));
  }
  return worst;
}

void loom_test_gpu_dropout(loom_ctx *ctx, const char *backend, loom_fusion_mode fusion) {
  const int64_t shape[2] = {61, 257};
  const uint64_t seed = 0x1234abcdULL;
  const int64_t offset = 1000;
  const double p = 0.3;
  loom_graph *g = NULL;
  loom_value x, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, shape, &x));
  loom_attr at[3] = {{.name = "p", .kind = LOOM_ATTR_FLOAT, .f = p},
                     {.name = "seed", .kind = LOOM_ATTR_INT, .i = (int64_t)seed},
                     {.name = "offset", .kind = LOOM_ATTR_INT, .i = offset}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_DROPOUT, 1, &x, 3, at, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_tensor *in = NULL, *cpu = NULL, *gpu = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, shape, &in));
  loom_test_gpu_fill(in, 5);
  bool ok = loom_test_gpu_run(ctx, g, "cpu", fusion, LOOM_GEMM_F32, 1, &in, 1, &cpu) &&
            loom_test_gpu_run(ctx, g, backend, fusion, LOOM_GEMM_F32, 1, &in, 1, &gpu);
  CHECK(ok);
  if (ok) {
    const float *xv = loom_tensor_data(in), *gv = loom_tensor_data(gpu);
    uint64_t thr = loom_dropout_threshold(p);
    int64_t n = loom_tensor_numel(in), kept = 0, wrong = 0;
    for (int64_t i = 0; i < n; i++) {
      bool keep = loom_dropout_keep(seed, (uint64_t)(i + offset), thr);
      kept += keep;
      float want = keep ? (float)((double)xv[i] / (1.0 - p)) : 0.0f;
      wrong += memcmp(&want, &gv[i], 4) != 0;
    }
    CHECK(wrong == 0);
    CHECK(kept > n / 2 && kept < n - n / 5); /* about 70% kept */
    CHECK(memcmp(loom_tensor_data(cpu), gv, (size_t)n * 4) == 0);
    printf("dropout (%s): %lld of %lld kept, mask and values bit for bit the cpu's\n",
           loom_fusion_mode_name(fusion), (long long)kept, (long long)n);
  }
  loom_tensor_free(in);
  loom_tensor_free(cpu);
  loom_tensor_free(gpu);
  loom_graph_free(g);
}

void loom_test_gpu_softmax_matmul(loom_ctx *ctx, const char *backend, const char *const *marks,
                                  int n_marks) {
  const int64_t sa[2] = {37, 45}, sb[2] = {45, 131};
  loom_graph *g = NULL;
  loom_value a, b, c, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "a", LOOM_DTYPE_F32, 2, sa, &a));
  CHECK_OK(ctx, loom_graph_input(g, "b", LOOM_DTYPE_F32, 2, sb, &b));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 0, NULL, &c));
  loom_attr ax = {.name = "axis", .kind = LOOM_ATTR_INT, .i = -1};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SOFTMAX, 1, &c, 1, &ax, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "c", c));
  loom_tensor *in[2] = {NULL, NULL}, *cpu[2] = {NULL, NULL}, *gpu[2] = {NULL, NULL},
              *again[2] = {NULL, NULL};
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sa, &in[0]));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sb, &in[1]));
  loom_test_gpu_fill(in[0], 1);
  loom_test_gpu_fill(in[1], 2);
  const loom_fusion_mode stitch = LOOM_FUSION_STITCH;
  bool ok = loom_test_gpu_run(ctx, g, "cpu", stitch, LOOM_GEMM_F32, 2, in, 2, cpu) &&
            loom_test_gpu_run(ctx, g, backend, stitch, LOOM_GEMM_F32, 2, in, 2, gpu) &&
            loom_test_gpu_run(ctx, g, backend, stitch, LOOM_GEMM_F32, 2, in, 2, again);
  CHECK(ok);
  for (int32_t o = 0; ok && o < 2; o++) {
    /* c's entries sum 45 products of U(-2, 2) terms: summed in another
     * order (another GEMM kernel) one differs by about 1e-6, which an
     * entry near 0 turns into any relative error; it is judged against
     * the terms' scale, 1 */
    double worst = loom_test_gpu_worst_rel(cpu[o], gpu[o], o == 1 ? 1.0 : 1e-3);
    CHECK(worst < 1e-5);
    CHECK(memcmp(loom_tensor_data(gpu[o]), loom_tensor_data(again[o]),
                 (size_t)loom_tensor_numel(cpu[o]) * 4) == 0);
    printf("softmax(matmul) output %d: worst relative difference from cpu %.2g\n", o, worst);
  }
  loom_session *s = NULL;
  loom_session_options opt = LOOM_SESSION_OPTIONS(.backend = backend);
  char *text = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &opt, &s));
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  loom_session_stats stats = {0};
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &stats));
  CHECK(stats.n_gemm == 1 && stats.n_fallback == 0 && stats.n_kernels >= 1); /* all on the device */
  CHECK(text != NULL);
  for (int i = 0; text && i < n_marks; i++) {
    bool has = strstr(text, marks[i]) != NULL;
    if (!has) fprintf(stderr, "%s source: no %s\n", backend, marks[i]);
    CHECK(has);
  }
  loom_free(text);
  loom_session_free(s);
  for (int32_t o = 0; o < 2; o++) {
    loom_tensor_free(in[o]);
    loom_tensor_free(cpu[o]);
    loom_tensor_free(gpu[o]);
    loom_tensor_free(again[o]);
  }
  loom_graph_free(g);
}

/* Independent groups of every kind: an element-wise chain, a softmax whose
 * row fits shared memory, one whose row does not (scratch in the
 * workspace), column sums, an odd tiny one. */
static const char horizontal_text[] =
    "param %a : f32[33, 17]\n"
    "param %b : f32[37, 129]\n"
    "param %c : f32[5, 5003]\n"
    "param %d : f32[1031, 41]\n"
    "param %e : f32[7]\n"
    "%ta : f32[33, 17] = tanh(%a)\n"
    "%ya : f32[33, 17] = mul(%ta, %a)\n"
    "%yb : f32[37, 129] = softmax(%b, axis=-1)\n"
    "%yc : f32[5, 5003] = softmax(%c, axis=-1)\n"
    "%yd : f32[41] = reduce_sum(%d, axes=[0])\n"
    "%ye : f32[7] = exp(%e)\n"
    "output ya = %ya\n"
    "output yb = %yb\n"
    "output yc = %yc\n"
    "output yd = %yd\n"
    "output ye = %ye\n";

void loom_test_gpu_horizontal(loom_ctx *ctx, const char *backend) {
  enum { N = 5 };
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, horizontal_text, &g));
  if (!g) return;
  loom_tensor *in[N] = {0}, *cpu[N] = {0}, *gpu[N] = {0}, *again[N] = {0};
  bool ok = true;
  for (int32_t i = 0; i < N; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    ok &= loom_tensor_new(ctx, LOOM_DTYPE_F32, t->rank, t->shape, &in[i]) == LOOM_STATUS_OK;
    if (in[i]) loom_test_gpu_fill(in[i], 40 + (uint64_t)i);
  }
  const loom_fusion_mode stitch = LOOM_FUSION_STITCH;
  ok = ok && loom_test_gpu_run(ctx, g, "cpu", stitch, LOOM_GEMM_F32, N, in, N, cpu) &&
       loom_test_gpu_run(ctx, g, backend, stitch, LOOM_GEMM_F32, N, in, N, gpu) &&
       loom_test_gpu_run(ctx, g, backend, stitch, LOOM_GEMM_F32, N, in, N, again);
  CHECK(ok);
  for (int32_t o = 0; ok && o < N; o++) {
    /* c's entries sum 45 products of U(-2, 2) terms: summed in another
     * order (another GEMM kernel) one differs by about 1e-6, which an
     * entry near 0 turns into any relative error; it is judged against
     * the terms' scale, 1 */
    double worst = loom_test_gpu_worst_rel(cpu[o], gpu[o], o == 1 ? 1.0 : 1e-3);
    CHECK(worst < 1e-5);
    CHECK(memcmp(loom_tensor_data(gpu[o]), loom_tensor_data(again[o]),
                 (size_t)loom_tensor_numel(cpu[o]) * 4) == 0);
    printf("horizontal output %s: worst relative difference from cpu %.2g\n",
           g->values[g->outputs[o]].name, worst);
  }
  /* the groups are one kernel's parts, run as one launch */
  loom_session *s = NULL;
  loom_session_options opt = LOOM_SESSION_OPTIONS(.backend = backend);
  char *text = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &opt, &s));
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  const char *mark = text ? strstr(text, "phase 0: parts 0..") : NULL;
  CHECK(mark && atoi(mark + strlen("phase 0: parts 0..")) >= 1);
  loom_free(text);
  loom_session_free(s);
  for (int32_t i = 0; i < N; i++) {
    loom_tensor_free(in[i]);
    loom_tensor_free(cpu[i]);
    loom_tensor_free(gpu[i]);
    loom_tensor_free(again[i]);
  }
  loom_graph_free(g);
}

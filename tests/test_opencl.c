/*
 * The opencl backend against the cpu backend and the rng spec: dropout
 * masks bit for bit (rng/philox.h's loom_dropout_keep, and the cpu
 * backend's output bytes), a softmax of a matmul (the GEMM kernel and a
 * stitched row reduction) within tolerance and bitwise the same on every
 * run, and the describe hook's OpenCL C. Skips, saying why, where there is
 * no OpenCL device (exit status 0: nothing here can run).
 */
#include "common.h"
#include "rng/philox.h"
#include "runtime/backend.h"
#include "runtime/opencl/ocl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

/* Runs g on `backend` with one input tensor; the outputs into out[]. */
static bool run(loom_graph *g, const char *backend, loom_fusion_mode fusion, int32_t n_in,
                loom_tensor **in, int32_t n_out, loom_tensor **out) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  loom_status st = loom_session_new(ctx, g, &o, &s);
  if (!st) st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  if (st) fprintf(stderr, "%s/%s: %s\n", backend, loom_fusion_mode_name(fusion), loom_ctx_error(ctx));
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

static void fill(loom_tensor *t, uint64_t seed) {
  loom_test_rng rng = {seed};
  float *p = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) p[i] = (float)loom_test_uniform(&rng, -2, 2);
}

/* dropout(x) with p = 0.3 on [61, 257]: the kept elements are exactly
 * those loom_dropout_keep keeps, and the bytes equal the cpu backend's. */
static void test_dropout(loom_fusion_mode fusion) {
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
  fill(in, 5);
  bool ok = run(g, "cpu", fusion, 1, &in, 1, &cpu) && run(g, "opencl", fusion, 1, &in, 1, &gpu);
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

/* softmax(a @ b) with a [37, 45], b [45, 131]: close to the cpu backend,
 * and the same bytes on a second run. */
static void test_softmax_matmul(void) {
  printf("GEMM: %s\n", loom_ocl_have_clblast() ? "CLBlast" : "Loom's lm_sgemm");
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
  fill(in[0], 1);
  fill(in[1], 2);
  bool ok = run(g, "cpu", LOOM_FUSION_STITCH, 2, in, 2, cpu) &&
            run(g, "opencl", LOOM_FUSION_STITCH, 2, in, 2, gpu) &&
            run(g, "opencl", LOOM_FUSION_STITCH, 2, in, 2, again);
  CHECK(ok);
  for (int32_t o = 0; ok && o < 2; o++) {
    const float *w = loom_tensor_data(cpu[o]), *v = loom_tensor_data(gpu[o]);
    double worst = 0;
    for (int64_t i = 0; i < loom_tensor_numel(cpu[o]); i++)
      worst = fmax(worst, fabs((double)w[i] - v[i]) / fmax(1e-3, fabs((double)w[i])));
    CHECK(worst < 1e-5);
    CHECK(memcmp(v, loom_tensor_data(again[o]), (size_t)loom_tensor_numel(cpu[o]) * 4) == 0);
    printf("softmax(matmul) output %d: worst relative difference from cpu %.2g\n", o, worst);
  }
  /* the generated source is OpenCL C */
  loom_session *s = NULL;
  loom_session_options opt = LOOM_SESSION_OPTIONS(.backend = "opencl");
  char *text = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &opt, &s));
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  loom_session_stats stats = {0};
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &stats));
  CHECK(stats.n_gemm == 1 && stats.n_fallback == 0 && stats.n_kernels >= 1); /* all on the device */
  CHECK(text && strstr(text, "__kernel") && strstr(text, "barrier(") && strstr(text, "__local"));
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

/* [3, 0] @ [0, 4] is zeros (an empty sum: CLBlast refuses k = 0). */
static void test_empty_k(void) {
  const int64_t sa[2] = {3, 0}, sb[2] = {0, 4};
  loom_graph *g = NULL;
  loom_value a, b, c;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "a", LOOM_DTYPE_F32, 2, sa, &a));
  CHECK_OK(ctx, loom_graph_input(g, "b", LOOM_DTYPE_F32, 2, sb, &b));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 0, NULL, &c));
  CHECK_OK(ctx, loom_graph_output(g, "c", c));
  loom_tensor *in[2] = {NULL, NULL}, *out = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sa, &in[0]));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sb, &in[1]));
  CHECK(run(g, "opencl", LOOM_FUSION_STITCH, 2, in, 1, &out));
  if (out) {
    const float *v = loom_tensor_data(out);
    for (int64_t i = 0; i < loom_tensor_numel(out); i++) CHECK(v[i] == 0.0f);
    CHECK(loom_tensor_numel(out) == 12);
  }
  loom_tensor_free(in[0]);
  loom_tensor_free(in[1]);
  loom_tensor_free(out);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  loom_backend *b = NULL;
  if (loom_backend_new(ctx, "opencl", &b) != LOOM_STATUS_OK) {
    printf("test_opencl: skipped: %s\n", loom_ctx_error(ctx));
    loom_ctx_free(ctx);
    return 0;
  }
  loom_backend_free(b);
  test_dropout(LOOM_FUSION_STITCH);
  test_dropout(LOOM_FUSION_EAGER);
  test_softmax_matmul(); /* on CLBlast where installed */
  test_empty_k();
  setenv("LOOM_OPENCL_NO_CLBLAST", "1", 1);
  test_softmax_matmul(); /* on Loom's own GEMM kernel */
  test_empty_k();
  loom_ctx_free(ctx);
  return loom_test_finish("test_opencl");
}

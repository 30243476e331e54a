/*
 * The opencl backend against the cpu backend and the rng spec: dropout
 * masks bit for bit (rng/philox.h's loom_dropout_keep, and the cpu
 * backend's output bytes), a softmax of a matmul (the GEMM kernel and a
 * stitched row reduction) within tolerance and bitwise the same on every
 * run, and the describe hook's OpenCL C. Skips, saying why, where there is
 * no OpenCL device (exit status 0: nothing here can run).
 */
#include "gpu_common.h"
#include "runtime/backend.h"
#include "runtime/opencl/ocl.h"

#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

/* softmax(a @ b) on the GEMM in use; the source is OpenCL C. */
static void test_softmax_matmul(void) {
  printf("GEMM: %s\n", loom_ocl_have_clblast() ? "CLBlast" : "Loom's lm_sgemm");
  const char *marks[] = {"__kernel", "barrier(", "__local"};
  loom_test_gpu_softmax_matmul(ctx, "opencl", marks, 3);
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
  CHECK(loom_test_gpu_run(ctx, g, "opencl", LOOM_FUSION_STITCH, LOOM_GEMM_F32, 2, in, 1, &out));
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
  loom_test_gpu_dropout(ctx, "opencl", LOOM_FUSION_STITCH);
  loom_test_gpu_dropout(ctx, "opencl", LOOM_FUSION_EAGER);
  loom_test_gpu_horizontal(ctx, "opencl");
  test_softmax_matmul(); /* on CLBlast where installed */
  test_empty_k();
  setenv("LOOM_OPENCL_NO_CLBLAST", "1", 1);
  test_softmax_matmul(); /* on Loom's own GEMM kernel */
  test_empty_k();
  loom_ctx_free(ctx);
  return loom_test_finish("test_opencl");
}

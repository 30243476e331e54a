/*
 * The opencl backend against the cpu backend and the rng spec: dropout
 * masks bit for bit (rng/philox.h's loom_dropout_keep, and the cpu
 * backend's output bytes), a softmax of a matmul (the GEMM kernel and a
 * stitched row reduction) within tolerance and bitwise the same on every
 * run, small reductions side by side that stay right run after run, and
 * the describe hook's OpenCL C. Skips, saying why, where there is
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

/* Many small row and column reductions, one horizontally fused launch
 * whose parts each stage rows in the group's __local memory. Work-groups
 * that run at once must not see each other's: PoCL gave a kernel-scope
 * __local array handed to a helper function one copy for groups on
 * different threads (sums then took another part's elements, now and
 * then), so the phase function takes its buffers as arguments. Run in
 * one session again and again: every run equals the cpu backend's. */
static const char reductions_text[] =
    "param %a : f32[3, 5]\n"
    "param %b : f32[3, 5]\n"
    "param %c : f32[3, 5]\n"
    "param %d : f32[2, 3, 4]\n"
    "param %e : f32[2, 3, 4]\n"
    "param %f : f32[2, 3, 4]\n"
    "%ya : f32[3] = reduce_sum(%a, axes=[1])\n"
    "%yb : f32[5] = reduce_sum(%b, axes=[0])\n"
    "%yc : f32[] = reduce_sum(%c)\n"
    "%yd : f32[3] = reduce_sum(%d, axes=[0, 2])\n"
    "%ye : f32[2, 3] = reduce_max(%e, axes=[-1])\n"
    "%yf : f32[3] = reduce_min(%f, axes=[0, 2])\n"
    "output ya = %ya\n"
    "output yb = %yb\n"
    "output yc = %yc\n"
    "output yd = %yd\n"
    "output ye = %ye\n"
    "output yf = %yf\n";

static void test_group_shared_memory(void) {
  enum { N = 6, RUNS = 60 };
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, reductions_text, &g));
  if (!g) return;
  loom_tensor *in[N] = {0}, *cpu[N] = {0}, *got[N] = {0};
  for (int32_t i = 0; i < N; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, t->rank, t->shape, &in[i]));
    if (in[i]) loom_test_gpu_fill(in[i], 70 + (uint64_t)i);
  }
  CHECK(loom_test_gpu_run(ctx, g, "cpu", LOOM_FUSION_STITCH, LOOM_GEMM_F32, N, in, N, cpu));
  loom_session *s = NULL;
  loom_session_options opt = LOOM_SESSION_OPTIONS(.backend = "opencl");
  CHECK_OK(ctx, loom_session_new(ctx, g, &opt, &s));
  char *text = NULL;
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  CHECK(text && strstr(text, "__local float *restrict lm_red") && !strstr(text, "__local float lm_red["));
  loom_free(text);
  int32_t bad_runs = 0;
  for (int32_t r = 0; s && r < RUNS; r++) {
    bool same = loom_session_run(s, N, (const loom_tensor *const *)in, N, got) == LOOM_STATUS_OK;
    for (int32_t o = 0; o < N; o++) {
      same = same && got[o] && loom_test_gpu_worst_rel(cpu[o], got[o], 1.0) < 1e-5;
      loom_tensor_free(got[o]);
      got[o] = NULL;
    }
    bad_runs += !same;
  }
  if (bad_runs) fprintf(stderr, "small reductions: %d of %d runs differ from cpu\n", bad_runs, RUNS);
  CHECK(bad_runs == 0);
  loom_session_free(s);
  for (int32_t i = 0; i < N; i++) {
    loom_tensor_free(in[i]);
    loom_tensor_free(cpu[i]);
  }
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
  test_group_shared_memory();
  test_softmax_matmul(); /* on CLBlast where installed */
  test_empty_k();
  setenv("LOOM_OPENCL_NO_CLBLAST", "1", 1);
  test_softmax_matmul(); /* on Loom's own GEMM kernel */
  test_empty_k();
  loom_ctx_free(ctx);
  return loom_test_finish("test_opencl");
}

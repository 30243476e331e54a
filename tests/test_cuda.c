/*
 * The cuda backend. Everywhere: the dlopen'd tables are complete (every
 * symbol of cuBLAS and NCCL resolved from the installed libraries, the
 * driver's from libcuda.so.1 or, without a driver, from the toolkit's stub
 * library), the backend's absence is a clear UNSUPPORTED ("no CUDA driver:
 * ..."), and the gemm option is checked. With a GPU: dropout bit for bit
 * against the cpu backend and the rng spec; softmax of a matmul close to
 * the cpu backend and bitwise stable across runs; matmuls (transposed,
 * batched evenly and unevenly, f64, k = 0, tf32 and bf16 within their
 * rounding) against the ref backend; a host fallback node between device
 * kernels; outputs computed into the caller's tensors. Without one those
 * say why they are skipped. The flash-attention kernels compile with NVRTC
 * for sm_90 (test_opencl_attention runs them on a GPU).
 */
#include "gpu_common.h"
#include "comm/comm.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"

#include "core/clock.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

/* Every entry of a table of n function pointers is set. */
static bool table_full(const void *table, int n) {
  void *slots[64];
  if (n > 64) return false;
  memcpy(slots, table, sizeof(void *) * (size_t)n);
  for (int i = 0; i < n; i++)
    if (!slots[i]) return false;
  return true;
}

static void test_symbol_tables(void) {
  int n = 0;
  const loom_cublas_api *blas = NULL;
  const char *const *names = loom_cublas_symbols(&n);
  CHECK(n >= 8 && strcmp(names[0], "cublasCreate_v2") == 0);
  if (loom_cublas_get(ctx, &blas) == LOOM_STATUS_OK) {
    CHECK(table_full(blas, n));
    printf("cuBLAS: all %d symbols resolved\n", n);
  } else {
    CHECK(strstr(loom_ctx_error(ctx), "no cuBLAS: ") == loom_ctx_error(ctx));
    printf("cuBLAS symbols skipped: %s\n", loom_ctx_error(ctx));
  }
  const loom_nccl_api *nccl = NULL;
  names = loom_nccl_symbols(&n);
  CHECK(n >= 8 && strcmp(names[0], "ncclGetVersion") == 0);
  if (loom_nccl_get(ctx, &nccl) == LOOM_STATUS_OK) {
    CHECK(table_full(nccl, n));
    int v = 0;
    CHECK(nccl->ncclGetVersion(&v) == LOOM_NCCL_SUCCESS && v > 0);
    printf("NCCL %d: all %d symbols resolved\n", v, n);
  } else {
    CHECK(strstr(loom_ctx_error(ctx), "no NCCL: ") == loom_ctx_error(ctx));
    printf("NCCL symbols skipped: %s\n", loom_ctx_error(ctx));
  }
}

/* The driver's table (from the stub without a driver) and what creating
 * the backend says. True if a device is there to test on. */
static bool test_driver(void) {
  void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  bool stub = false;
#ifdef LOOM_CUDA_STUB
  if (!real) {
    setenv("LOOM_CUDA_DRIVER_LIB", LOOM_CUDA_STUB, 1); /* before the table loads */
    stub = true;
  }
#endif
  if (real) dlclose(real);
  int n = 0;
  loom_cu_driver_symbols(&n);
  const loom_cu_driver_api *api = NULL;
  loom_status st = loom_cu_driver_get(ctx, &api);
  if (real || stub) {
    CHECK_OK(ctx, st);
    if (api) CHECK(table_full(api, n));
    printf("CUDA driver%s: all %d symbols resolved\n", stub ? " (the toolkit's stub)" : "", n);
  } else {
    CHECK(st == LOOM_STATUS_UNSUPPORTED);
    printf("CUDA driver symbols skipped: %s\n", loom_ctx_error(ctx));
  }
  loom_backend *b = NULL;
  st = loom_backend_new(ctx, "cuda", &b);
  if (st == LOOM_STATUS_OK) {
    loom_backend_free(b);
    return true;
  }
  const char *e = loom_ctx_error(ctx);
  CHECK(st == LOOM_STATUS_UNSUPPORTED);
  CHECK(strstr(e, "backend cuda: no CUDA driver: ") == e ||
        strstr(e, "backend cuda: no CUDA device: ") == e);
  if (stub) CHECK(strstr(e, "CUDA_ERROR_STUB_LIBRARY") != NULL);
  if (!real && !stub) CHECK(strstr(e, "libcuda.so.1 not found") != NULL);
  /* the second attempt says the same, without trying again */
  char first[512];
  snprintf(first, sizeof first, "%s", e);
  CHECK(loom_backend_new(ctx, "cuda", &b) == LOOM_STATUS_UNSUPPORTED);
  CHECK(strcmp(first, loom_ctx_error(ctx)) == 0);
  printf("test_cuda: GPU checks skipped: %s\n", first);
  return false;
}

static void test_gemm_option(void) {
  loom_gemm_precision p;
  CHECK_OK(ctx, loom_gemm_precision_from_name("tf32", &p));
  CHECK(p == LOOM_GEMM_TF32 && strcmp(loom_gemm_precision_name(LOOM_GEMM_BF16), "bf16") == 0);
  CHECK(loom_gemm_precision_from_name("fp8", &p) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_session_options o;
  loom_session_options_init(&o);
  CHECK(o.gemm == LOOM_GEMM_F32);
  o.gemm = (loom_gemm_precision)9;
  loom_graph *g = NULL;
  loom_value x, y;
  const int64_t shape[1] = {4};
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 1, shape, &x));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_EXP, 1, &x, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_session *s = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, &o, &s));
  CHECK(strstr(loom_ctx_error(ctx), "unknown gemm precision 9 (known: f32, tf32, bf16)"));
  CHECK(loom_cuda_gemm_compute_f32(LOOM_GEMM_F32) == LOOM_CUBLAS_COMPUTE_32F);
  CHECK(loom_cuda_gemm_compute_f32(LOOM_GEMM_TF32) == LOOM_CUBLAS_COMPUTE_32F_FAST_TF32);
  CHECK(loom_cuda_gemm_compute_f32(LOOM_GEMM_BF16) == LOOM_CUBLAS_COMPUTE_32F_FAST_16BF);
  loom_graph_free(g);
}

/* ---- on a GPU --------------------------------------------------------------- */

/* matmul of a [sa] and b [sb] (dtype dt, trans_b) on cuda with `gemm`
 * against ref: within tol. */
static void check_matmul(const char *label, loom_dtype dt, int32_t ra, const int64_t *sa,
                         int32_t rb, const int64_t *sb, bool trans_b, loom_gemm_precision gemm,
                         double tol) {
  loom_graph *g = NULL;
  loom_value a, b, c;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "a", dt, ra, sa, &a));
  CHECK_OK(ctx, loom_graph_input(g, "b", dt, rb, sb, &b));
  loom_attr tb = {.name = "trans_b", .kind = LOOM_ATTR_INT, .i = trans_b};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 1, &tb, &c));
  CHECK_OK(ctx, loom_graph_output(g, "c", c));
  loom_tensor *in[2] = {NULL, NULL}, *want = NULL, *got = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, dt, ra, sa, &in[0]));
  CHECK_OK(ctx, loom_tensor_new(ctx, dt, rb, sb, &in[1]));
  loom_test_gpu_fill(in[0], 3);
  loom_test_gpu_fill(in[1], 4);
  bool ok = loom_test_gpu_run(ctx, g, "ref", LOOM_FUSION_STITCH, LOOM_GEMM_F32, 2, in, 1, &want) &&
            loom_test_gpu_run(ctx, g, "cuda", LOOM_FUSION_STITCH, gemm, 2, in, 1, &got);
  CHECK(ok);
  if (ok) {
    double worst = loom_test_gpu_worst_rel(want, got, 1.0);
    if (!(worst <= tol)) fprintf(stderr, "matmul %s: worst %.3g > %.3g\n", label, worst, tol);
    CHECK(worst <= tol);
    printf("matmul %s (%s): worst difference from ref %.2g (tolerance %.2g)\n", label,
           loom_gemm_precision_name(gemm), worst, tol);
  }
  loom_tensor_free(in[0]);
  loom_tensor_free(in[1]);
  loom_tensor_free(want);
  loom_tensor_free(got);
  loom_graph_free(g);
}

static void test_matmuls(void) {
  const int64_t a2[2] = {65, 70}, b2[2] = {70, 33}, bt[2] = {33, 70};
  check_matmul("65x70 @ 70x33", LOOM_DTYPE_F32, 2, a2, 2, b2, false, LOOM_GEMM_F32, 1e-5);
  check_matmul("65x70 @ (33x70)^T", LOOM_DTYPE_F32, 2, a2, 2, bt, true, LOOM_GEMM_F32, 1e-5);
  /* tf32: 10-bit mantissas, bf16: 7-bit; 70 terms of size up to 4 */
  check_matmul("65x70 @ 70x33", LOOM_DTYPE_F32, 2, a2, 2, b2, false, LOOM_GEMM_TF32, 0.2);
  check_matmul("65x70 @ 70x33", LOOM_DTYPE_F32, 2, a2, 2, b2, false, LOOM_GEMM_BF16, 1.5);
  check_matmul("65x70 @ 70x33 f64", LOOM_DTYPE_F64, 2, a2, 2, b2, false, LOOM_GEMM_F32, 1e-12);
  const int64_t a4[4] = {2, 3, 9, 12}, b3[3] = {3, 12, 5}, b4[4] = {2, 3, 12, 5}, b2s[2] = {12, 5};
  check_matmul("[2,3,9,12] @ [2,3,12,5] (strided)", LOOM_DTYPE_F32, 4, a4, 4, b4, false,
               LOOM_GEMM_F32, 1e-5);
  check_matmul("[2,3,9,12] @ [3,12,5] (pointer arrays)", LOOM_DTYPE_F32, 4, a4, 3, b3, false,
               LOOM_GEMM_F32, 1e-5);
  check_matmul("[2,3,9,12] @ [12,5] (folded into M)", LOOM_DTYPE_F32, 4, a4, 2, b2s, false,
               LOOM_GEMM_F32, 1e-5);
  const int64_t ek[2] = {3, 0}, ekb[2] = {0, 4};
  check_matmul("3x0 @ 0x4", LOOM_DTYPE_F32, 2, ek, 2, ekb, false, LOOM_GEMM_F32, 0);
}

/* exp(x) gathered by idx (a node run on the host between device kernels),
 * then + 1, into a caller-given output tensor; against ref exactly. */
static void test_fallback_and_bound_output(void) {
  const int64_t sx[2] = {50, 40}, si[1] = {7};
  loom_graph *g = NULL;
  loom_value x, idx, e, gth, one, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, sx, &x));
  CHECK_OK(ctx, loom_graph_input(g, "idx", LOOM_DTYPE_I32, 1, si, &idx));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_EXP, 1, &x, 0, NULL, &e));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){e, idx}, 0, NULL, &gth));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ABS, 1, &gth, 0, NULL, &one));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){one, gth}, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_tensor *in[2] = {NULL, NULL}, *want = NULL, *got = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sx, &in[0]));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I32, 1, si, &in[1]));
  loom_test_gpu_fill(in[0], 7);
  int32_t *iv = loom_tensor_data(in[1]);
  for (int i = 0; i < 7; i++)
    iv[i] = (i * 13) % 50;
  const int64_t sy[2] = {7, 40};
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sy, &got)); /* computed in place */
  bool ok = loom_test_gpu_run(ctx, g, "ref", LOOM_FUSION_STITCH, LOOM_GEMM_F32, 2, in, 1, &want) &&
            loom_test_gpu_run(ctx, g, "cuda", LOOM_FUSION_STITCH, LOOM_GEMM_F32, 2, in, 1, &got);
  CHECK(ok);
  if (ok) {
    double worst = loom_test_gpu_worst_rel(want, got, 1e-3);
    CHECK(worst < 1e-6);
    printf("gather on the host between device kernels, output in place: worst %.2g\n", worst);
  }
  loom_tensor_free(in[0]);
  loom_tensor_free(in[1]);
  loom_tensor_free(want);
  loom_tensor_free(got);
  loom_graph_free(g);
}

/* Without a GPU the NCCL communicator says why; with one (and
 * LOOM_TEST_NCCL=1, under mpirun -np 1 where Loom has MPI: scripts/gpu-check.sh) one rank
 * sends itself a message through NCCL and gets the same bytes back. */
static void test_nccl(bool have_gpu) {
  loom_comm *c = NULL;
  if (!have_gpu) {
    CHECK(loom_comm_nccl_new(ctx, &c) == LOOM_STATUS_UNSUPPORTED && !c);
    printf("NCCL communicator without a GPU: %s\n", loom_ctx_error(ctx));
    return;
  }
  const char *want = getenv("LOOM_TEST_NCCL");
  if (!want || strcmp(want, "1") != 0) {
    printf("NCCL communicator skipped: set LOOM_TEST_NCCL=1 (under mpirun -np 1 with MPI)\n");
    return;
  }
  CHECK_OK(ctx, loom_comm_nccl_new(ctx, &c));
  if (!c) return;
  CHECK(c->rank == 0 && c->size == 1 && strcmp(c->iface->name, "nccl") == 0);
  uint8_t out[1000], back[1000];
  for (int i = 0; i < 1000; i++)
    out[i] = (uint8_t)(i * 7 + 3);
  memset(back, 0, sizeof back);
  loom_comm_request *rs = NULL, *rr = NULL;
  CHECK_OK(ctx, c->iface->isend(c->context, ctx, out, sizeof out, 0, 5, c->stream, &rs));
  CHECK_OK(ctx, c->iface->irecv(c->context, ctx, back, sizeof back, 0, 5, c->stream, &rr));
  bool timed_out = false;
  if (rs) CHECK_OK(ctx, c->iface->wait(c->context, ctx, rs, loom_now_s() + 30, &timed_out));
  if (rr) CHECK_OK(ctx, c->iface->wait(c->context, ctx, rr, loom_now_s() + 30, &timed_out));
  CHECK(!timed_out && memcmp(out, back, sizeof out) == 0);
  float x[3] = {1, 2, 3};
  CHECK_OK(ctx, loom_comm_all_reduce(c, ctx, x, 3, LOOM_DTYPE_F32, LOOM_COMM_SUM));
  CHECK(x[0] == 1 && x[2] == 3);
  printf("NCCL communicator: 1 rank, a message to itself came back intact\n");
  loom_comm_free(c);
}

/* The flash-attention and mask kernels (codegen/gpu_attention.h) as CUDA
 * C compile with NVRTC for sm_90, every function of head dims 32, 64, 80
 * and 128 (Llama-2-7B's) in each dropout mode; without NVRTC, a skip. */
static void test_attention_nvrtc(void) {
  char ver[32];
  if (loom_nvrtc_version(ctx, ver, sizeof ver)) {
    printf("attention kernels: NVRTC skipped: %s\n", loom_ctx_error(ctx));
    return;
  }
  const int32_t d[] = {32, 64, 80, 128, 64, 128}, rng[] = {0, 1, 2, 1, 0, 2};
  char *src = NULL, *ptx = NULL;
  CHECK_OK(ctx, loom_codegen_gpu_attention_dims(ctx, LOOM_GPU_CUDA, 6, d, d, rng, &src));
  if (src) CHECK_OK(ctx, loom_nvrtc_compile(ctx, src, 90, &ptx));
  int found = 0;
  for (int i = 0; ptx && i < 6; i++)
    for (int k = 0; k < 3; k++) {
      static const char *const kinds[] = {"fwd", "dkdv", "dq"};
      char entry[96];
      snprintf(entry, sizeof entry, ".entry lm_fa_%s_d%d_v%d_m%d(", kinds[k], (int)d[i], (int)d[i],
               (int)rng[i]);
      found += strstr(ptx, entry) != NULL;
    }
  CHECK(found == 18);
  CHECK(ptx && strstr(ptx, ".entry lm_fa_di(") && strstr(ptx, ".entry lm_dropout_bits("));
  /* no float atomics: the backward sums in a fixed order */
  CHECK(ptx && !strstr(ptx, "atom."));
  printf("attention kernels: %d functions compiled with NVRTC %s for sm_90\n", found + 2, ver);
  /* bad dims are an error, not a kernel */
  const int32_t big[] = {300};
  char *none = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_codegen_gpu_attention_dims(ctx, LOOM_GPU_CUDA, 1, big, big, rng, &none));
  CHECK(none == NULL);
  free(src);
  free(ptx);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  test_attention_nvrtc();
  test_symbol_tables();
  test_gemm_option();
  bool gpu = test_driver();
  test_nccl(gpu);
  if (gpu) {
    loom_test_gpu_dropout(ctx, "cuda", LOOM_FUSION_STITCH);
    loom_test_gpu_dropout(ctx, "cuda", LOOM_FUSION_EAGER);
    loom_test_gpu_softmax_matmul(ctx, "cuda", (const char *[]){"__global__", "__syncthreads()"}, 2);
    loom_test_gpu_horizontal(ctx, "cuda");
    test_matmuls();
    test_fallback_and_bound_output();
  }
  loom_ctx_free(ctx);
  return loom_test_finish("test_cuda");
}

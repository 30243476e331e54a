/*
 * Matmul on cuBLAS (cuda.h). Loom's tensors are row-major and cuBLAS's
 * column-major, so C = op(A) op(B) runs as C^T = op(B)^T op(A)^T: the
 * operands swap places and keep their own transpose flags. NumPy batch
 * broadcasting becomes per-product offsets: a strided batched GEMM when
 * they step evenly (a broadcast operand steps by 0), pointer arrays
 * otherwise; a shared right operand folds the batch into M.
 *
 * Precision: f64, f16 and bf16 operands compute as their type says (f16
 * and bf16 accumulate in f32); f32 operands by the session's gemm option:
 * f32 (CUBLAS_COMPUTE_32F), tf32 or bf16 (the operands rounded, f32
 * accumulation).
 */
#include "runtime/cuda/cuda.h"

#include "ir/dtype.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "runtime/matmul_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cuBLAS data type of a Loom dtype (-100 if none). */
static int data_type(loom_dtype dt) {
  switch (dt) {
  case LOOM_DTYPE_F32: return LOOM_CUDA_R_32F;
  case LOOM_DTYPE_F64: return LOOM_CUDA_R_64F;
  case LOOM_DTYPE_F16: return LOOM_CUDA_R_16F;
  case LOOM_DTYPE_BF16: return LOOM_CUDA_R_16BF;
  default: return -100;
  }
}

bool loom_cuda_gemm_supported(const loom_graph *g, const loom_node *n) {
  if (n->op != LOOM_OP_MATMUL) return false;
  const loom_type *o = &g->values[n->out[0]].type;
  if (data_type(o->dtype) == -100) return false;
  for (int32_t i = 0; i < 3; i++) {
    const loom_type *t = i < 2 ? &g->values[n->in[i]].type : o;
    if (t->dtype != o->dtype || t->rank < 2) return false;
    for (int32_t d = 0; d < t->rank; d++) /* cuBLAS sizes are ints */
      if (t->shape[d] >= ((int64_t)1 << 31) - 1) return false;
  }
  return true;
}

int loom_cuda_gemm_compute_f32(loom_gemm_precision p) {
  return p == LOOM_GEMM_TF32   ? LOOM_CUBLAS_COMPUTE_32F_FAST_TF32
         : p == LOOM_GEMM_BF16 ? LOOM_CUBLAS_COMPUTE_32F_FAST_16BF
                               : LOOM_CUBLAS_COMPUTE_32F;
}

static loom_status blas_check(loom_ctx *ctx, const loom_cublas_api *b, loom_cublas_status s,
                              const char *what) {
  if (s == LOOM_CUBLAS_STATUS_SUCCESS) return LOOM_STATUS_OK;
  const char *name = b->cublasGetStatusString(s);
  return loom_error(ctx, LOOM_STATUS_INTERNAL, "cuBLAS: %s: %s (%d)", what, name ? name : "?",
                    (int)s);
}

/* The handle on the main stream, made on first use. */
static loom_status get_handle(loom_ctx *ctx, loom_cu *cu, const loom_cublas_api *b,
                              loom_cublas_handle *h) {
  if (*h) return LOOM_STATUS_OK;
  LOOM_TRY(blas_check(ctx, b, b->cublasCreate_v2(h), "creating a handle"));
  loom_status st = blas_check(ctx, b, b->cublasSetStream_v2(*h, cu->stream), "setting its stream");
  if (!st) st = blas_check(ctx, b, b->cublasSetMathMode(*h, LOOM_CUBLAS_DEFAULT_MATH), "math mode");
  if (st) {
    b->cublasDestroy_v2(*h);
    *h = NULL;
  }
  return st;
}

/* True if off[0..n) steps evenly; *step is the step. */
static bool even_steps(const int64_t *off, int64_t n, int64_t *step) {
  *step = n > 1 ? off[1] - off[0] : 0;
  for (int64_t i = 1; i < n; i++)
    if (off[i] - off[i - 1] != *step) return false;
  return true;
}

loom_status loom_cuda_matmul(loom_ctx *ctx, loom_cu *cu, loom_cublas_handle *blas, int compute_f32,
                             const loom_node *n, const loom_view *in,
                             const loom_cu_deviceptr *in_dev, const loom_view *out,
                             loom_cu_deviceptr out_dev) {
  const loom_cublas_api *b;
  LOOM_TRY(loom_cublas_get(ctx, &b));
  LOOM_TRY(get_handle(ctx, cu, b, blas));
  const loom_view *o = out;
  loom_dtype dt = o->dtype;
  size_t es = loom_dtype_size(dt);
  int32_t br = o->rank - 2, ra = in[0].rank, rb = in[1].rank;
  bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  int64_t m = o->shape[br], nn = o->shape[br + 1], k = in[0].shape[ra - (ta ? 2 : 1)];
  int64_t lda = in[0].shape[ra - 1], ldb = in[1].shape[rb - 1];
  int64_t batch = 1, a_batch = 1, b_batch = 1;
  for (int32_t d = 0; d < br; d++)
    batch *= o->shape[d];
  for (int32_t d = 0; d < ra - 2; d++)
    a_batch *= in[0].shape[d];
  for (int32_t d = 0; d < rb - 2; d++)
    b_batch *= in[1].shape[d];
  if (m * nn * batch == 0) return LOOM_STATUS_OK;
  if (k == 0) return loom_cu_zero(ctx, cu, out_dev, (size_t)(m * nn * batch) * es);
  if (batch == 1 || (b_batch == 1 && !ta && a_batch == batch)) {
    m *= batch; /* A's batch rows stack into M over one B */
    batch = 1;
  }
  if (m >= ((int64_t)1 << 31) || batch >= ((int64_t)1 << 31))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "cuBLAS matmul: %lld x %lld rows is too many",
                      (long long)batch, (long long)m);
  int compute = dt == LOOM_DTYPE_F32   ? compute_f32
                : dt == LOOM_DTYPE_F64 ? LOOM_CUBLAS_COMPUTE_64F
                                       : LOOM_CUBLAS_COMPUTE_32F;
  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.0f, zero32 = 0.0f;
  const void *alpha = dt == LOOM_DTYPE_F64 ? (const void *)&one64 : (const void *)&one32;
  const void *beta = dt == LOOM_DTYPE_F64 ? (const void *)&zero64 : (const void *)&zero32;
  int type = data_type(dt);
  int op_a = ta ? LOOM_CUBLAS_OP_T : LOOM_CUBLAS_OP_N,
      op_b = tb ? LOOM_CUBLAS_OP_T : LOOM_CUBLAS_OP_N;
  const void *A = (const void *)(uintptr_t)in_dev[0], *B = (const void *)(uintptr_t)in_dev[1];
  void *C = (void *)(uintptr_t)out_dev;
  if (batch == 1)
    return blas_check(ctx, b,
                      b->cublasGemmEx(*blas, op_b, op_a, (int)nn, (int)m, (int)k, alpha, B, type,
                                      (int)ldb, A, type, (int)lda, beta, C, type, (int)nn, compute,
                                      LOOM_CUBLAS_GEMM_DEFAULT),
                      "gemm");
  int64_t *off = NULL;
  LOOM_TRY(loom_matmul_batch_offsets(ctx, &in[0], &in[1], o, batch, &off));
  int64_t sa, sb;
  loom_status st;
  if (off[0] == 0 && off[batch] == 0 && even_steps(off, batch, &sa) &&
      even_steps(off + batch, batch, &sb)) {
    st = blas_check(ctx, b,
                    b->cublasGemmStridedBatchedEx(*blas, op_b, op_a, (int)nn, (int)m, (int)k, alpha,
                                                  B, type, (int)ldb, sb, A, type, (int)lda, sa,
                                                  beta, C, type, (int)nn, m * nn, (int)batch,
                                                  compute, LOOM_CUBLAS_GEMM_DEFAULT),
                    "strided batched gemm");
    free(off);
    return st;
  }
  /* uneven steps: arrays of device pointers, on the device for the call */
  uint64_t *ptrs = loom_malloc(ctx, sizeof *ptrs * 3 * (size_t)batch);
  loom_cu_deviceptr arrays = 0;
  st = ptrs ? loom_cu_alloc(ctx, cu, sizeof *ptrs * 3 * (size_t)batch, &arrays)
            : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    for (int64_t i = 0; i < batch; i++) {
      ptrs[i] = in_dev[1] + (uint64_t)off[batch + i] * es;
      ptrs[batch + i] = in_dev[0] + (uint64_t)off[i] * es;
      ptrs[2 * batch + i] = out_dev + (uint64_t)(i * m * nn) * es;
    }
    st = loom_cu_to_device(ctx, cu, arrays, ptrs, sizeof *ptrs * 3 * (size_t)batch);
  }
  if (!st) {
    const void *const *pb = (const void *const *)(uintptr_t)arrays;
    const void *const *pa = (const void *const *)(uintptr_t)(arrays + sizeof *ptrs * (size_t)batch);
    void *const *pc = (void *const *)(uintptr_t)(arrays + 2 * sizeof *ptrs * (size_t)batch);
    st = blas_check(ctx, b,
                    b->cublasGemmBatchedEx(*blas, op_b, op_a, (int)nn, (int)m, (int)k, alpha, pb,
                                           type, (int)ldb, pa, type, (int)lda, beta, pc, type,
                                           (int)nn, (int)batch, compute, LOOM_CUBLAS_GEMM_DEFAULT),
                    "batched gemm");
  }
  /* the host array and the device arrays must outlive the queued copy and call */
  if (arrays) {
    loom_status ss = loom_cu_sync(ctx, cu);
    if (!st) st = ss;
    loom_cu_free(cu, arrays);
  }
  free(ptrs);
  free(off);
  return st;
}

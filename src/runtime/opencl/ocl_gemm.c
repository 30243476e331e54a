/*
 * f32 matmul on the OpenCL device: Loom's own tiled kernel (16 x 16
 * output tiles, the K panel staged in local memory, each output summed in
 * increasing k: the result does not depend on the launch), or CLBlast
 * where it is installed: 4-5x faster on PoCL here (docs/GPU.md). NumPy
 * batch broadcasting becomes per-batch offsets, as on the cpu backend; a
 * shared right operand folds the batch into M.
 */
#include "runtime/opencl/opencl.h"

#include "ops/attrs.h"
#include "ops/op.h"
#include "runtime/matmul_batch.h"

#include <stdlib.h>
#include <string.h>

const char loom_ocl_gemm_source[] =
    "/* Loom's OpenCL GEMM (runtime/opencl/ocl_gemm.c) */\n"
    "#define TS 16\n"
    "__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))\n"
    "void lm_sgemm(__global const float *restrict A, __global const float *restrict B,\n"
    "              __global float *restrict C, __global const long *restrict off,\n"
    "              int M, int N, int K, int lda, int ldb, int ta, int tb, int batch) {\n"
    "  const int tx = get_local_id(0), ty = get_local_id(1);\n"
    "  const int col = get_group_id(0) * TS + tx;\n"
    "  const int mt = (M + TS - 1) / TS, gy = get_group_id(1);\n"
    "  const int bi = gy / mt, row = (gy % mt) * TS + ty;\n"
    "  __local float As[TS][TS + 1], Bs[TS][TS + 1];\n"
    "  A += off[bi];\n"
    "  B += off[batch + bi];\n"
    "  float acc = 0.0f;\n"
    "  for (int k0 = 0; k0 < K; k0 += TS) {\n"
    "    const int ka = k0 + tx, kb = k0 + ty;\n"
    "    As[ty][tx] = row < M && ka < K ? (ta ? A[(long)ka * lda + row] : A[(long)row * lda + ka]) : 0.0f;\n"
    "    Bs[ty][tx] = kb < K && col < N ? (tb ? B[(long)col * ldb + kb] : B[(long)kb * ldb + col]) : 0.0f;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (int k = 0; k < TS; k++) acc = fma(As[ty][k], Bs[k][tx], acc);\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  if (row < M && col < N) C[(long)bi * M * N + (long)row * N + col] = acc;\n"
    "}\n";

bool loom_ocl_gemm_supported(const loom_graph *g, const loom_node *n) {
  if (n->op != LOOM_OP_MATMUL) return false;
  for (int32_t i = 0; i < 2; i++) {
    const loom_type *t = &g->values[n->in[i]].type;
    if (t->dtype != LOOM_DTYPE_F32 || t->rank < 2) return false;
  }
  const loom_type *o = &g->values[n->out[0]].type;
  if (o->dtype != LOOM_DTYPE_F32) return false;
  /* the kernel's sizes are ints */
  for (int32_t i = 0; i < 3; i++) {
    const loom_type *t = i < 2 ? &g->values[n->in[i]].type : o;
    for (int32_t d = 0; d < t->rank; d++)
      if (t->shape[d] >= ((int64_t)1 << 30)) return false;
  }
  return true;
}

loom_status loom_ocl_matmul(loom_ctx *ctx, loom_ocl *dev, loom_ocl_module *gemm,
                            const loom_node *n, const loom_view *in, const loom_view *out) {
  const loom_view *o = &out[0];
  int32_t br = o->rank - 2, ra = in[0].rank, rb = in[1].rank;
  int32_t ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  int64_t m = o->shape[br], nn = o->shape[br + 1], k = in[0].shape[ra - (ta ? 2 : 1)];
  int64_t batch = 1, a_batch = 1, b_batch = 1;
  for (int32_t d = 0; d < br; d++) batch *= o->shape[d];
  for (int32_t d = 0; d < ra - 2; d++) a_batch *= in[0].shape[d];
  for (int32_t d = 0; d < rb - 2; d++) b_batch *= in[1].shape[d];
  if (m * nn * batch == 0) return LOOM_STATUS_OK;
  if (k == 0) { /* an empty sum (CLBlast refuses k = 0) */
    memset(o->data, 0, (size_t)(m * nn * batch) * sizeof(float));
    return LOOM_STATUS_OK;
  }
  int64_t *off = NULL;
  if (batch == 1 || (b_batch == 1 && !ta && a_batch == batch)) {
    m *= batch; /* one GEMM: A's batch rows stack into M over a shared B */
    batch = 1;
    off = loom_calloc(ctx, 2, sizeof *off);
    if (!off) return LOOM_STATUS_OUT_OF_MEMORY;
  } else {
    LOOM_TRY(loom_matmul_batch_offsets(ctx, &in[0], &in[1], o, batch, &off));
  }
  if ((m + 15) / 16 * batch >= ((int64_t)1 << 31) || m * batch >= ((int64_t)1 << 31)) {
    free(off);
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "OpenCL matmul: %lld x %lld rows is too many",
                      (long long)batch, (long long)m);
  }
  if (!gemm) { /* CLBlast */
    loom_ocl_gemm_args ga = {.trans_a = ta, .trans_b = tb, .m = m, .n = nn, .k = k,
                             .lda = in[0].shape[ra - 1], .ldb = in[1].shape[rb - 1],
                             .batch = batch, .a = in[0].data, .b = in[1].data, .c = o->data,
                             .a_bytes = (size_t)loom_view_numel(&in[0]) * 4,
                             .b_bytes = (size_t)loom_view_numel(&in[1]) * 4,
                             .c_bytes = (size_t)loom_view_numel(o) * 4,
                             .a_off = off, .b_off = off + batch};
    loom_status st = loom_ocl_clblast_sgemm(ctx, dev, &ga);
    free(off);
    return st;
  }
  void *bufs[4] = {in[0].data, in[1].data, o->data, off};
  size_t bytes[4] = {(size_t)loom_view_numel(&in[0]) * 4, (size_t)loom_view_numel(&in[1]) * 4,
                     (size_t)loom_view_numel(o) * 4, sizeof(int64_t) * 2 * (size_t)batch};
  bool written[4] = {false, false, true, false};
  int32_t sc[8] = {(int32_t)m, (int32_t)nn, (int32_t)k, (int32_t)in[0].shape[ra - 1],
                   (int32_t)in[1].shape[rb - 1], ta, tb, (int32_t)batch};
  size_t global[2] = {(size_t)((nn + 15) / 16 * 16), (size_t)((m + 15) / 16 * batch * 16)};
  size_t local[2] = {16, 16};
  loom_status st = loom_ocl_launch(ctx, gemm, "lm_sgemm", 4, bufs, bytes, written, 8, sc, global,
                                   local);
  free(off);
  return st;
}

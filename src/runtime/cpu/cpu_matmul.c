/*
 * matmul on the cpu backend (f32): NumPy batch broadcasting resolved into
 * per-batch offsets; a shared right operand folds the batch into M (one
 * tall GEMM, the linear-layer case).
 */
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/matmul_batch.h"

#include "ops/attrs.h"

#include <stdlib.h>

loom_status loom_cpu_matmul(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out, const loom_gemm_epilogue *epi) {
  const loom_view *o = &out[0];
  int32_t br = o->rank - 2, ra = in[0].rank, rb = in[1].rank;
  bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  loom_gemm p = {
      .trans_a = ta,
      .trans_b = tb,
      .m = o->shape[br],
      .n = o->shape[br + 1],
      .k = in[0].shape[ra - (ta ? 2 : 1)],
      .batch = 1,
      .a = in[0].data,
      .lda = in[0].shape[ra - 1],
      .b = in[1].data,
      .ldb = in[1].shape[rb - 1],
      .c = o->data,
      .ldc = o->shape[br + 1],
      .c_stride = o->shape[br] * o->shape[br + 1],
  };
  if (epi) p.epilogue = *epi;
  int64_t a_batch = 1, b_batch = 1;
  for (int32_t d = 0; d < br; d++)
    p.batch *= o->shape[d];
  for (int32_t d = 0; d < ra - 2; d++)
    a_batch *= in[0].shape[d];
  for (int32_t d = 0; d < rb - 2; d++)
    b_batch *= in[1].shape[d];
  if (p.batch == 1 || (b_batch == 1 && !ta && a_batch == p.batch)) {
    /* one GEMM: A's batch rows stack into M over a shared B */
    p.m *= p.batch;
    p.batch = 1;
    return loom_gemm_f32(c->ctx, c->nt, &p);
  }
  int64_t *off = NULL;
  LOOM_TRY(loom_matmul_batch_offsets(c->ctx, &in[0], &in[1], o, p.batch, &off));
  p.a_off = off;
  p.b_off = off + p.batch;
  loom_status st = loom_gemm_f32(c->ctx, c->nt, &p);
  free(off);
  return st;
}

static loom_status k_matmul(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  return loom_cpu_matmul(c, n, in, out, NULL);
}

loom_cpu_kernel loom_cpu_matmul_kernel(const loom_graph *g, const loom_node *n) {
  if (n->op != LOOM_OP_MATMUL) return NULL;
  for (int32_t i = 0; i < 2; i++) {
    const loom_type *t = &g->values[n->in[i]].type;
    if (t->dtype != LOOM_DTYPE_F32 || t->rank < 2) return NULL;
  }
  return g->values[n->out[0]].type.dtype == LOOM_DTYPE_F32 ? k_matmul : NULL;
}

/* Batched matmul's per-product operand offsets (matmul_batch.h). */
#include "runtime/matmul_batch.h"

#include "core/ctx.h"

loom_status loom_matmul_batch_offsets(loom_ctx *ctx, const loom_view *a, const loom_view *b,
                                      const loom_view *out, int64_t batch, int64_t **off) {
  int32_t br = out->rank - 2;
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < br; d++)
    shape[d] = out->shape[d];
  shape[br] = a->shape[a->rank - 2];
  shape[br + 1] = a->shape[a->rank - 1];
  loom_view av = loom_view_broadcast(a, br + 2, shape);
  shape[br] = b->shape[b->rank - 2];
  shape[br + 1] = b->shape[b->rank - 1];
  loom_view bv = loom_view_broadcast(b, br + 2, shape);
  int64_t *o = *off = loom_malloc(ctx, sizeof(int64_t) * 2 * (size_t)batch);
  if (!o) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t oa = 0, ob = 0, rest = bi;
    for (int32_t d = br - 1; d >= 0; d--) {
      int64_t i = rest % out->shape[d];
      rest /= out->shape[d];
      oa += i * av.stride[d];
      ob += i * bv.stride[d];
    }
    o[bi] = oa;
    o[batch + bi] = ob;
  }
  return LOOM_STATUS_OK;
}

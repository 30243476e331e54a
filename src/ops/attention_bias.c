/* The attention ops' additive bias (attention_bias.h). */
#include "ops/attention_bias.h"

#include "ops/op.h"

int32_t loom_attention_bias_input(const loom_node *n) {
  return LOOM_ATTR_I(n, attention, bias) ? n->n_in - 1 : -1;
}

int32_t loom_attention_core_inputs(const loom_node *n) {
  return LOOM_ATTR_I(n, attention, bias) ? n->n_in - 1 : n->n_in;
}

loom_status loom_attention_check_bias(loom_ctx *ctx, const loom_type *bias, loom_dtype dt,
                                      int32_t rank, const int64_t *shape) {
  char a[128];
  if (bias->dtype != dt)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "bias must have q's dtype %s, got %s",
                      loom_dtype_name(dt), loom_type_str(bias, a, sizeof a));
  if (bias->rank > rank)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "bias %s has more dims than the scores (rank %d)",
                      loom_type_str(bias, a, sizeof a), (int)rank);
  for (int32_t d = 0; d < bias->rank; d++) {
    int64_t b = bias->shape[d], s = shape[rank - bias->rank + d];
    if (b != s && b != 1)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "bias %s does not broadcast to the scores: its dim %d is %lld, the "
                        "scores' is %lld (it must be equal or 1)",
                        loom_type_str(bias, a, sizeof a), (int)d, (long long)b, (long long)s);
  }
  return LOOM_STATUS_OK;
}

void loom_attention_bias_strides(const loom_type *bias, int32_t rank, const int64_t *shape,
                                 int64_t *stride) {
  int64_t step = 1;
  for (int32_t d = rank - 1; d >= 0; d--) {
    int32_t bd = d - (rank - bias->rank);
    int64_t size = bd >= 0 ? bias->shape[bd] : 1;
    stride[d] = size == shape[d] && size != 1 ? step : 0;
    step *= size;
  }
}

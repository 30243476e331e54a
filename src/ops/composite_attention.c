/* Composite scaled dot-product attention:
 * attention(q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], [base], [bias]),
 * bias (the `bias` attribute; ops/attention_bias.h) added to the scaled
 * scores before the causal mask.
 * Dropout (p > 0) acts on the probabilities [..., Sq, Sk]: element i uses
 * counter position base + offset + its logical flat index (whole/at place
 * them in a logical tensor, rng/piece.h), so a fused kernel reproduces the
 * mask exactly. With causal and Sq > Sk, the first
 * Sq - Sk query rows see no key and come out NaN (0/0), as in most
 * frameworks. */
#include "ir/build.h"
#include "ops/attention_bias.h"
#include "ops/composite_util.h"
#include "ops/rng_piece.h"

#include <math.h>

static loom_status attention_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                   loom_type *out) {
  int32_t n_core = loom_attention_core_inputs(n), bias = loom_attention_bias_input(n);
  if (n_core < 3 || n_core > 4)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "attention takes q, k, v, [base], and a bias only with 'bias' set");
  LOOM_TRY(loom_composite_check_attention(ctx, n, in, n_core > 3 ? &in[3] : NULL));
  int32_t rank;
  int64_t probs[LOOM_MAX_RANK];
  loom_attention_probs_shape(&in[0], &in[1], &rank, probs);
  if (bias >= 0) LOOM_TRY(loom_attention_check_bias(ctx, &in[bias], in[0].dtype, rank, probs));
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(ctx, n, rank, probs, &piece));
  const loom_type *q = &in[0], *v = &in[2];
  int32_t r = q->rank;
  out[0] = *q;
  out[0].shape[r - 1] = v->shape[r - 1];
  return LOOM_STATUS_OK;
}

static void attention_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                int32_t *out) {
  loom_type qt = *loom_value_type(g, in[0]);
  int32_t r = qt.rank;
  int64_t sq = qt.shape[r - 2], d = qt.shape[r - 1];
  int64_t sk = loom_value_type(g, in[1])->shape[r - 2];
  double scale = LOOM_ATTR_F(n, attention, scale);
  if (scale == 0.0) scale = d > 0 ? 1.0 / sqrt((double)d) : 1.0;

  int32_t s = lb_matmul(g, in[0], in[1], false, true); /* [..., Sq, Sk] */
  s = lb_mul(g, s, lb_scalar(g, qt.dtype, scale));
  if (loom_attention_bias_input(n) >= 0) s = lb_add(g, s, in[loom_attention_bias_input(n)]);
  if (LOOM_ATTR_I(n, attention, causal)) {
    /* query i sees keys j <= i + (Sk - Sq): the queries are the last Sq
     * positions of the Sk-long sequence */
    int64_t sshape[LOOM_MAX_RANK], mshape[2] = {sq, sk};
    for (int32_t k = 0; k < r - 2; k++)
      sshape[k] = qt.shape[k];
    sshape[r - 2] = sq;
    sshape[r - 1] = sk;
    int32_t row = lb_iota(g, LOOM_DTYPE_I64, 2, mshape, 0);
    int32_t col = lb_iota(g, LOOM_DTYPE_I64, 2, mshape, 1);
    int32_t limit = lb_add(g, row, lb_scalar(g, LOOM_DTYPE_I64, (double)(sk - sq)));
    int32_t masked = lb_broadcast_to(g, lb_binary(g, LOOM_OP_GT, col, limit), r, sshape);
    int32_t ninf = lb_broadcast_to(g, lb_scalar(g, qt.dtype, -INFINITY), r, sshape);
    s = lb_select(g, masked, ninf, s);
  }
  int32_t probs = loom_composite_softmax(g, s, r - 1, false);
  double p = LOOM_ATTR_F(n, attention, p);
  if (p > 0.0) {
    int32_t base = loom_attention_core_inputs(n) > 3 ? in[3] : -1; /* i64 or i32 */
    loom_ints whole = LOOM_ATTR_INTS(n, attention, whole), at = LOOM_ATTR_INTS(n, attention, at);
    probs = lb_dropout_piece(g, probs, p, LOOM_ATTR_I(n, attention, seed),
                             LOOM_ATTR_I(n, attention, offset), base, &whole, &at);
  }
  out[0] = lb_matmul(g, probs, in[2], false, false);
}

const loom_op_def loom_opdef_attention = {
    .name = "attention",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 3,
    .max_in = 5,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(attention),
    .attrs = LOOM_ATTR_SPECS(attention),
    .infer = attention_infer,
    .decompose = attention_decompose,
    .partition = loom_partition_attention,
    .sub_attrs = loom_sub_attrs_attention,
};

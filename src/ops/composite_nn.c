/* Composite activations and losses: softmax, log_softmax, gelu, silu,
 * cross_entropy, linear. */
#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/composite_util.h"
#include "ops/ops_util.h"

#define SQRT_2_OVER_PI 0.79788456080286535588 /* sqrt(2/pi) */
#define SQRT_HALF 0.70710678118654752440      /* 1/sqrt(2) */

/* ---- softmax(x), log_softmax(x): axis ------------------------------------ */

static loom_status softmax_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 loom_type *out) {
  LOOM_TRY(loom_composite_need_float(ctx, "the input", &in[0]));
  int32_t axis;
  LOOM_TRY(loom_composite_trailing_axis(ctx, LOOM_ATTR_I(n, softmax, axis), in[0].rank, &axis));
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

static void softmax_common(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out,
                           bool log) {
  int32_t axis = 0;
  loom_norm_axis(LOOM_ATTR_I(n, softmax, axis), loom_value_type(g, in[0])->rank, &axis);
  out[0] = loom_composite_softmax(g, in[0], axis, log);
}

static void softmax_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  softmax_common(g, n, in, out, false);
}

static void log_softmax_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                  int32_t *out) {
  softmax_common(g, n, in, out, true);
}

/* Every dim but the axis splits (a row of the axis is one softmax). */
static void softmax_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                              loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  int32_t axis = -1;
  loom_norm_axis(LOOM_ATTR_I(n, softmax, axis), in[0].rank, &axis);
  for (int32_t d = 0; d < in[0].rank; d++)
    p->in[0][d] = p->out[0][d] =
        (int8_t)(d == axis ? -1 : loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD));
}

const loom_op_def loom_opdef_softmax = {
    .name = "softmax",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(softmax),
    .attrs = LOOM_ATTR_SPECS(softmax),
    .infer = softmax_infer,
    .decompose = softmax_decompose,
    .partition = softmax_partition,
};

const loom_op_def loom_opdef_log_softmax = {
    .name = "log_softmax",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(log_softmax),
    .attrs = LOOM_ATTR_SPECS(log_softmax),
    .infer = softmax_infer,
    .decompose = log_softmax_decompose,
    .partition = softmax_partition,
};

/* ---- gelu(x): approximate; silu(x) --------------------------------------- */

static loom_status float_unary_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     loom_type *out) {
  (void)n;
  LOOM_TRY(loom_composite_need_float(ctx, "the input", &in[0]));
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

/* GELU is x c(x), c the normal CDF: the erf form's 0.5 (1 + erf(x / sqrt
 * 2)), or the tanh form's 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715
 * x^3), computed as sigmoid(2u) (the same value: one exp and a division,
 * where tanh also evaluates a polynomial for small arguments, and no 1 + t
 * cancelling for negative x). Built the same way by the decomposition and
 * the gradient rule, so the session's CSE merges the backward's copy of c
 * with the forward's own. */
static int32_t gelu_cdf(loom_graph *g, int32_t x, bool approximate) {
  if (!approximate) {
    int32_t e = lb_unary(g, LOOM_OP_ERF, lb_mul(g, x, lb_scalar_like(g, x, SQRT_HALF)));
    return lb_mul(g, lb_add(g, e, lb_scalar_like(g, x, 1.0)), lb_scalar_like(g, x, 0.5));
  }
  int32_t x3 = lb_mul(g, lb_mul(g, x, x), x);
  int32_t inner = lb_add(g, x, lb_mul(g, x3, lb_scalar_like(g, x, 0.044715)));
  inner = lb_mul(g, inner, lb_scalar_like(g, x, 2.0 * SQRT_2_OVER_PI));
  return lb_unary(g, LOOM_OP_SIGMOID, inner);
}

static void gelu_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  out[0] = lb_mul(g, in[0], gelu_cdf(g, in[0], LOOM_ATTR_I(n, gelu, approximate)));
}

/*
 * d gelu / dx = c + x c', from the forward's c: tanh form, c' = c (1 - c)
 * 2 sqrt(2/pi) (1 + 3 0.044715 x^2); erf form, c' = exp(-x^2 / 2) /
 * sqrt(2 pi). Differentiating the decomposition op by op instead builds
 * d(x^3) as x^2 + x x + x x and the product rule's partial sums: about
 * twice the element-wise work, which makes this kernel of a training step
 * compute-bound (docs/PERFORMANCE.md).
 */
static void gelu_grad(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din) {
  if (dout[0] < 0) return;
  int32_t x = n->in[0];
  bool approximate = LOOM_ATTR_I(n, gelu, approximate);
  int32_t c = gelu_cdf(g, x, approximate), x2 = lb_mul(g, x, x), dc;
  if (approximate) {
    int32_t slope = lb_add(g, lb_mul(g, x2, lb_scalar_like(g, x, 6.0 * 0.044715 * SQRT_2_OVER_PI)),
                           lb_scalar_like(g, x, 2.0 * SQRT_2_OVER_PI));
    dc = lb_mul(g, lb_mul(g, c, lb_sub(g, lb_scalar_like(g, x, 1.0), c)), slope);
  } else {
    dc = lb_mul(g, lb_unary(g, LOOM_OP_EXP, lb_mul(g, x2, lb_scalar_like(g, x, -0.5))),
                lb_scalar_like(g, x, 0.5 * SQRT_2_OVER_PI));
  }
  din[0] = lb_mul(g, dout[0], lb_add(g, c, lb_mul(g, x, dc)));
}

const loom_op_def loom_opdef_gelu = {
    .name = "gelu",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(gelu),
    .attrs = LOOM_ATTR_SPECS(gelu),
    .infer = float_unary_infer,
    .decompose = gelu_decompose,
    .grad = gelu_grad,
    .partition = loom_partition_elementwise,
};

static void silu_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  (void)n;
  out[0] = lb_mul(g, in[0], lb_unary(g, LOOM_OP_SIGMOID, in[0]));
}

const loom_op_def loom_opdef_silu = {
    .name = "silu",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = 0,
    .infer = float_unary_infer,
    .decompose = silu_decompose,
    .partition = loom_partition_elementwise,
};

/* ---- cross_entropy(logits [..., C], labels [...]) -> scalar mean --------- */

static loom_status cross_entropy_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                       loom_type *out) {
  (void)n;
  LOOM_TRY(loom_composite_need_float(ctx, "logits", &in[0]));
  if (in[1].dtype != LOOM_DTYPE_I32 && in[1].dtype != LOOM_DTYPE_I64) {
    const char *dn = loom_dtype_name(in[1].dtype);
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "labels must be i32 or i64, got %s",
                      dn ? dn : "an invalid dtype");
  }
  if (in[0].rank < 1)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "logits need a class dimension (rank >= 1), got rank 0");
  if (in[0].shape[in[0].rank - 1] < 1)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "logits have no classes (C = 0)");
  /* labels index every logits row: labels.shape == logits.shape[:-1] */
  LOOM_TRY(loom_composite_need_shape(ctx, "labels", &in[1], in[0].rank - 1, in[0].shape));
  out[0].dtype = in[0].dtype;
  out[0].rank = 0;
  return LOOM_STATUS_OK;
}

/* mean_i (logsumexp(logits_i) - logits_i[label_i]). The picked logit comes
 * from a one-hot (iota == label, select, sum) rather than gather, so autodiff
 * gives softmax - onehot. A label outside [0, C) matches no class: its row
 * contributes logsumexp only (not checked at graph level). */
static void cross_entropy_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                    int32_t *out) {
  (void)n;
  int32_t logits = in[0], labels = in[1];
  loom_type t = *loom_value_type(g, logits); /* a copy: adds move g->values */
  loom_dtype ldt = loom_value_type(g, labels)->dtype;
  int32_t r = t.rank;
  int64_t last = r - 1;
  /* logsumexp = m + log(sum(exp(x - m))) with m the row max: exp stays <= 1 */
  int32_t m = lb_reduce(g, LOOM_OP_REDUCE_MAX, logits, 1, &last, true);
  int32_t sh = lb_sub(g, logits, m);
  int32_t lse = lb_unary(g, LOOM_OP_LOG, lb_sum(g, lb_unary(g, LOOM_OP_EXP, sh), 1, &last, false));
  lse = lb_add(g, lse, lb_reshape(g, m, r - 1, t.shape));
  int32_t cls = lb_iota(g, ldt, r, t.shape, r - 1);
  int64_t lshape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r - 1; d++)
    lshape[d] = t.shape[d];
  lshape[r - 1] = 1;
  int32_t lab = lb_broadcast_to(g, lb_reshape(g, labels, r, lshape), r, t.shape);
  int32_t hot = lb_binary(g, LOOM_OP_EQ, cls, lab);
  int32_t zero = lb_broadcast_to(g, lb_scalar(g, t.dtype, 0.0), r, t.shape);
  int32_t picked = lb_sum(g, lb_select(g, hot, logits, zero), 1, &last, false);
  int32_t loss = lb_sub(g, lse, picked);
  int64_t axes[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r - 1; d++)
    axes[d] = d;
  out[0] = loom_composite_mean(g, loss, r - 1, axes, false);
}

const loom_op_def loom_opdef_cross_entropy = {
    .name = "cross_entropy",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = 0,
    .infer = cross_entropy_infer,
    .decompose = cross_entropy_decompose,
};

/* ---- linear(x [..., in], w [in, out], [b [out]]) ------------------------- */

static loom_status linear_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                loom_type *out) {
  LOOM_TRY(loom_composite_need_float(ctx, "x", &in[0]));
  LOOM_TRY(loom_composite_same_dtype(ctx, "w", &in[1], "x", &in[0]));
  if (in[0].rank < 1)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "x must have rank >= 1, got rank 0");
  char xs[128], ws[128];
  if (in[1].rank != 2 || in[1].shape[0] != in[0].shape[in[0].rank - 1])
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "w must be [in, out] with in = x's last dim: x %s, w %s",
                      loom_type_str(&in[0], xs, sizeof xs), loom_type_str(&in[1], ws, sizeof ws));
  if (n->n_in > 2) {
    LOOM_TRY(loom_composite_same_dtype(ctx, "b", &in[2], "x", &in[0]));
    LOOM_TRY(loom_composite_need_shape(ctx, "b", &in[2], 1, &in[1].shape[1]));
  }
  out[0] = in[0];
  out[0].shape[out[0].rank - 1] = in[1].shape[1];
  return LOOM_STATUS_OK;
}

static void linear_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  loom_type xt = *loom_value_type(g, in[0]);
  int64_t n_out = loom_value_type(g, in[1])->shape[1];
  int64_t flat[2] = {1, xt.shape[xt.rank - 1]};
  for (int32_t d = 0; d < xt.rank - 1; d++)
    flat[0] *= xt.shape[d];
  /* matmul on [rows, in] x [in, out], then back to [..., out] */
  int32_t y = lb_matmul(g, lb_reshape(g, in[0], 2, flat), in[1], false, false);
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < xt.rank - 1; d++)
    shape[d] = xt.shape[d];
  shape[xt.rank - 1] = n_out;
  y = lb_reshape(g, y, xt.rank, shape);
  if (n->n_in > 2) y = lb_add(g, y, in[2]);
  out[0] = y;
}

/* x's leading dims and the output features split; the contracted dim
 * gives partial sums only without a bias (each part would add it). */
static void linear_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                             loom_partition *p) {
  (void)out;
  loom_partition_init(p, n->n_in, 1);
  int32_t r = in[0].rank;
  for (int32_t d = 0; d < r - 1; d++)
    p->in[0][d] = p->out[0][d] =
        (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  int8_t k = (int8_t)(n->n_in > 2 ? -1
                                  : loom_partition_new_label(p, LOOM_SPLIT_PARTIAL, LOOM_OP_ADD));
  int8_t f = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  p->in[0][r - 1] = p->in[1][0] = k;
  p->in[1][1] = p->out[0][r - 1] = f;
  if (n->n_in > 2) p->in[2][0] = f;
}

const loom_op_def loom_opdef_linear = {
    .name = "linear",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 2,
    .max_in = 3,
    .n_out = 1,
    .n_attrs = 0,
    .infer = linear_infer,
    .decompose = linear_decompose,
    .partition = linear_partition,
};

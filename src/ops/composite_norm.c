/* Composite reductions and normalisations: reduce_mean, layer_norm, rms_norm. */
#include "ir/build.h"
#include "ops/composite_util.h"
#include "ops/ops_util.h"

#include <math.h>

/* ---- reduce_mean(x): axes (empty = all), keepdims ------------------------ */

/* The axes to reduce as a sorted list (empty attribute = every axis). */
static bool mean_axes(const loom_node *n, int32_t rank, int32_t *n_axes, int64_t *axes) {
  uint32_t mask = 0;
  if (!loom_axes_mask(&LOOM_ATTR_INTS(n, reduce_mean, axes), rank, &mask)) return false;
  if (LOOM_ATTR_INTS(n, reduce_mean, axes).n == 0) mask = rank ? (1u << rank) - 1u : 0u;
  *n_axes = 0;
  for (int32_t d = 0; d < rank; d++)
    if (mask & (1u << d)) axes[(*n_axes)++] = d;
  return true;
}

static loom_status reduce_mean_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     loom_type *out) {
  LOOM_TRY(loom_composite_need_float(ctx, "the input", &in[0]));
  int32_t n_axes;
  int64_t axes[LOOM_MAX_RANK];
  if (!mean_axes(n, in[0].rank, &n_axes, axes))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "axes are out of range or repeated for rank %d", in[0].rank);
  bool keep = LOOM_ATTR_I(n, reduce_mean, keepdims) != 0;
  out[0].dtype = in[0].dtype;
  out[0].rank = 0;
  for (int32_t d = 0, k = 0; d < in[0].rank; d++) {
    bool reduced = k < n_axes && axes[k] == d;
    if (reduced) k++;
    if (!reduced)
      out[0].shape[out[0].rank++] = in[0].shape[d];
    else if (keep)
      out[0].shape[out[0].rank++] = 1;
  }
  return LOOM_STATUS_OK;
}

static void reduce_mean_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                  int32_t *out) {
  int32_t n_axes = 0;
  int64_t axes[LOOM_MAX_RANK];
  mean_axes(n, loom_value_type(g, in[0])->rank, &n_axes, axes);
  out[0] = loom_composite_mean(g, in[0], n_axes, axes, LOOM_ATTR_I(n, reduce_mean, keepdims) != 0);
}

/* Kept dims split; reduced dims stay whole (means of parts do not add). */
static void reduce_mean_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                                  loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  int32_t n_axes = 0;
  int64_t axes[LOOM_MAX_RANK];
  if (!mean_axes(n, in[0].rank, &n_axes, axes)) n_axes = 0;
  bool keep = LOOM_ATTR_I(n, reduce_mean, keepdims) != 0;
  for (int32_t d = 0, k = 0, od = 0; d < in[0].rank; d++) {
    bool reduced = k < n_axes && axes[k] == d;
    if (reduced) {
      k++;
      p->in[0][d] = -1;
      if (keep) p->out[0][od++] = -1;
    } else {
      p->in[0][d] = p->out[0][od++] =
          (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    }
  }
}

const loom_op_def loom_opdef_reduce_mean = {
    .name = "reduce_mean",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(reduce_mean),
    .attrs = LOOM_ATTR_SPECS(reduce_mean),
    .infer = reduce_mean_infer,
    .decompose = reduce_mean_decompose,
    .partition = reduce_mean_partition,
};

/* ---- layer_norm(x, [gamma], [beta]) and rms_norm(x, [gamma]) ------------- */

static loom_status norm_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              loom_type *out) {
  static const char *const what[3] = {"x", "gamma", "beta"};
  LOOM_TRY(loom_composite_need_float(ctx, "x", &in[0]));
  int32_t axis;
  LOOM_TRY(loom_composite_trailing_axis(ctx, LOOM_ATTR_I(n, layer_norm, axis), in[0].rank, &axis));
  double eps = LOOM_ATTR_F(n, layer_norm, eps);
  if (!(eps >= 0.0) || isinf(eps))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "eps must be finite and >= 0, got %g",
                      eps);
  for (int32_t i = 1; i < n->n_in; i++) {
    LOOM_TRY(loom_composite_same_dtype(ctx, what[i], &in[i], "x", &in[0]));
    /* gamma and beta cover exactly the normalised dims x.shape[axis:] */
    LOOM_TRY(
        loom_composite_need_shape(ctx, what[i], &in[i], in[0].rank - axis, in[0].shape + axis));
  }
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

/* The trailing axes axis..rank-1 of x. */
static int32_t norm_axes(loom_graph *g, const loom_node *n, int32_t x, int64_t *axes) {
  int32_t rank = loom_value_type(g, x)->rank, axis = rank - 1;
  loom_norm_axis(LOOM_ATTR_I(n, layer_norm, axis), rank, &axis);
  for (int32_t d = axis; d < rank; d++)
    axes[d - axis] = d;
  return rank - axis;
}

static void layer_norm_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                 int32_t *out) {
  int64_t axes[LOOM_MAX_RANK];
  int32_t x = in[0], na = norm_axes(g, n, x, axes);
  /* Two passes (mean, then the mean of squared deviations): stable where
   * E[x^2] - E[x]^2 would cancel. */
  int32_t mean = loom_composite_mean(g, x, na, axes, true);
  int32_t d = lb_sub(g, x, mean);
  int32_t var = loom_composite_mean(g, lb_mul(g, d, d), na, axes, true);
  int32_t r = lb_unary(g, LOOM_OP_RSQRT,
                       lb_add(g, var, lb_scalar_like(g, x, LOOM_ATTR_F(n, layer_norm, eps))));
  int32_t y = lb_mul(g, d, r);
  if (n->n_in > 1) y = lb_mul(g, y, in[1]);
  if (n->n_in > 2) y = lb_add(g, y, in[2]);
  out[0] = y;
}

static void rms_norm_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  int64_t axes[LOOM_MAX_RANK];
  int32_t x = in[0], na = norm_axes(g, n, x, axes);
  int32_t ms = loom_composite_mean(g, lb_mul(g, x, x), na, axes, true);
  int32_t r = lb_unary(g, LOOM_OP_RSQRT,
                       lb_add(g, ms, lb_scalar_like(g, x, LOOM_ATTR_F(n, layer_norm, eps))));
  int32_t y = lb_mul(g, x, r);
  if (n->n_in > 1) y = lb_mul(g, y, in[1]);
  out[0] = y;
}

/* The rows (dims before axis) split; the normalised dims, gamma and beta
 * stay whole. */
static void norm_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                           loom_partition *p) {
  (void)out;
  loom_partition_init(p, n->n_in, 1);
  int32_t axis = in[0].rank;
  loom_norm_axis(LOOM_ATTR_I(n, layer_norm, axis), in[0].rank, &axis);
  for (int32_t d = 0; d < in[0].rank; d++)
    p->in[0][d] = p->out[0][d] =
        (int8_t)(d >= axis ? -1 : loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD));
  for (int32_t i = 1; i < n->n_in; i++)
    for (int32_t d = 0; d < in[i].rank; d++) p->in[i][d] = -1;
}

const loom_op_def loom_opdef_layer_norm = {
    .name = "layer_norm",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 3,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(layer_norm),
    .attrs = LOOM_ATTR_SPECS(layer_norm),
    .infer = norm_infer,
    .decompose = layer_norm_decompose,
    .partition = norm_partition,
};

const loom_op_def loom_opdef_rms_norm = {
    .name = "rms_norm",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 1,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(rms_norm),
    .attrs = LOOM_ATTR_SPECS(rms_norm),
    .infer = norm_infer,
    .decompose = rms_norm_decompose,
    .partition = norm_partition,
};

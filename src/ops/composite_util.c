#include "ops/composite_util.h"

#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/ops_util.h"

#include <math.h>

loom_status loom_composite_need_float(loom_ctx *ctx, const char *what, const loom_type *t) {
  if (loom_dtype_is_float(t->dtype)) return LOOM_STATUS_OK;
  const char *dn = loom_dtype_name(t->dtype);
  return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "%s must be a float tensor, got %s", what,
                    dn ? dn : "an invalid dtype");
}

loom_status loom_composite_same_dtype(loom_ctx *ctx, const char *what_a, const loom_type *a,
                                      const char *what_b, const loom_type *b) {
  if (a->dtype == b->dtype) return LOOM_STATUS_OK;
  const char *da = loom_dtype_name(a->dtype), *db = loom_dtype_name(b->dtype);
  return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "%s (%s) and %s (%s) must have the same dtype",
                    what_a, da ? da : "?", what_b, db ? db : "?");
}

loom_status loom_composite_need_shape(loom_ctx *ctx, const char *what, const loom_type *t,
                                      int32_t rank, const int64_t *shape) {
  bool ok = t->rank == rank;
  for (int32_t d = 0; ok && d < rank; d++)
    ok = t->shape[d] == shape[d];
  if (ok) return LOOM_STATUS_OK;
  loom_type want = {.dtype = t->dtype, .rank = rank};
  for (int32_t d = 0; d < rank; d++)
    want.shape[d] = shape[d];
  char got_s[128], want_s[128];
  return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "%s has type %s, expected shape %s", what,
                    loom_type_str(t, got_s, sizeof got_s),
                    loom_type_str(&want, want_s, sizeof want_s));
}

loom_status loom_composite_trailing_axis(loom_ctx *ctx, int64_t axis, int32_t rank, int32_t *out) {
  if (loom_norm_axis(axis, rank, out)) return LOOM_STATUS_OK;
  return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "axis %lld is out of range for rank %d",
                    (long long)axis, rank);
}

int32_t loom_composite_mean(loom_graph *g, int32_t x, int32_t n_axes, const int64_t *axes,
                            bool keepdims) {
  if (g->err || x < 0) return -1;
  if (n_axes == 0) return x;
  const loom_type *t = loom_value_type(g, x);
  int64_t count = 1;
  for (int32_t k = 0; k < n_axes; k++)
    count *= t->shape[axes[k]];
  int32_t s = lb_sum(g, x, n_axes, axes, keepdims);
  /* count 0: the mean of nothing is NaN (0 * inf), as in NumPy. */
  double inv = count ? 1.0 / (double)count : (double)INFINITY;
  return lb_mul(g, s, lb_scalar_like(g, x, inv));
}

int32_t loom_composite_softmax(loom_graph *g, int32_t x, int32_t axis, bool log) {
  if (g->err || x < 0) return -1;
  int64_t ax = axis;
  /* exp never sees a positive argument, so it cannot overflow. */
  int32_t m = lb_reduce(g, LOOM_OP_REDUCE_MAX, x, 1, &ax, true);
  int32_t sh = lb_sub(g, x, m);
  int32_t e = lb_unary(g, LOOM_OP_EXP, sh);
  int32_t s = lb_sum(g, e, 1, &ax, true);
  if (log) return lb_sub(g, sh, lb_unary(g, LOOM_OP_LOG, s));
  return lb_div(g, e, s);
}

loom_status loom_composite_check_attention(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                           const loom_type *base) {
  /* in: q, k, v */
  static const char *const what[3] = {"q", "k", "v"};
  for (int32_t i = 0; i < 3; i++) {
    LOOM_TRY(loom_composite_need_float(ctx, what[i], &in[i]));
    if (i) LOOM_TRY(loom_composite_same_dtype(ctx, what[i], &in[i], "q", &in[0]));
  }
  const loom_type *q = &in[0], *k = &in[1], *v = &in[2];
  int32_t r = q->rank;
  char qs[128], ks[128], vs[128];
  bool ok = r >= 2 && k->rank == r && v->rank == r;
  for (int32_t d = 0; ok && d < r - 2; d++)
    ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
  /* q·k contracts D; probabilities · v contracts Sk */
  if (ok) ok = k->shape[r - 1] == q->shape[r - 1] && v->shape[r - 2] == k->shape[r - 2];
  if (!ok)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "expected q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv] with equal "
                      "leading dims, got q %s, k %s, v %s",
                      loom_type_str(q, qs, sizeof qs), loom_type_str(k, ks, sizeof ks),
                      loom_type_str(v, vs, sizeof vs));
  if (base) {
    const loom_type *b = base;
    if (b->dtype != LOOM_DTYPE_I64 && b->dtype != LOOM_DTYPE_I32)
      return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                        "base (the dropout counter) must be i64 or i32");
    if (b->rank != 0)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "base (the dropout counter) must be a scalar, got rank %d", b->rank);
  }
  double p = LOOM_ATTR_F(n, attention, p), scale = LOOM_ATTR_F(n, attention, scale);
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "dropout p must be in [0, 1), got %g", p);
  if (!isfinite(scale))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "scale must be finite, got %g", scale);
  return LOOM_STATUS_OK;
}

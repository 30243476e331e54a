/*
 * Reductions: reduce_sum, reduce_max, reduce_min over a set of axes
 * (attribute `axes`, empty = all axes), optionally keeping reduced dims as
 * size 1 (`keepdims`).
 *
 * Reference semantics: sums accumulate in double; max/min of floats compare
 * in double and propagate NaN; max/min of integers compare exactly in int64.
 * An empty reduction gives 0 for sum and -inf/+inf for max/min, which the
 * store saturates to the dtype's lowest/highest value for integers.
 */
#include "ir/dtype.h"
#include "ops/grad.h"
#include "ops/ops_util.h"

#include <math.h>

/* The mask of reduced axes (empty list: all of them). */
static loom_status reduce_mask(loom_ctx *ctx, const loom_node *n, int32_t rank, uint32_t *mask) {
  const loom_ints *axes = &LOOM_ATTR_INTS(n, reduce_sum, axes);
  if (axes->n == 0) {
    *mask = rank ? (uint32_t)((UINT64_C(1) << rank) - 1) : 0;
    return LOOM_STATUS_OK;
  }
  if (axes->n < 0 || axes->n > LOOM_MAX_RANK || !loom_axes_mask(axes, rank, mask))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "'axes' must name distinct axes in [%d, %d)", -rank, rank);
  return LOOM_STATUS_OK;
}

static loom_status infer_reduce(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                loom_type *out) {
  if (!loom_dtype_valid(in[0].dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "invalid dtype %d", (int)in[0].dtype);
  uint32_t mask;
  LOOM_TRY(reduce_mask(ctx, n, in[0].rank, &mask));
  bool keep = LOOM_ATTR_I(n, reduce_sum, keepdims) != 0;
  loom_type t = {.dtype = in[0].dtype};
  for (int32_t d = 0; d < in[0].rank; d++) {
    if (!(mask & (1u << d)))
      t.shape[t.rank++] = in[0].shape[d];
    else if (keep)
      t.shape[t.rank++] = 1;
  }
  out[0] = t;
  return LOOM_STATUS_OK;
}

/* Walks the kept dims (one output element each) and, inside, the reduced
 * dims; no scratch memory, strided input views welcome. */
static loom_status ref_reduce(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  const loom_view *x = &in[0];
  uint32_t mask;
  LOOM_TRY(reduce_mask(ctx, n, x->rank, &mask));
  int32_t kept[LOOM_MAX_RANK], red[LOOM_MAX_RANK], nk = 0, nr = 0;
  int64_t n_out = 1, n_red = 1;
  for (int32_t d = 0; d < x->rank; d++) {
    if (mask & (1u << d)) {
      red[nr++] = d;
      n_red *= x->shape[d];
    } else {
      kept[nk++] = d;
      n_out *= x->shape[d];
    }
  }
  bool exact = loom_dtype_is_int(x->dtype) && n->op != LOOM_OP_REDUCE_SUM;
  bool is_max = n->op == LOOM_OP_REDUCE_MAX;
  for (int64_t o = 0; o < n_out; o++) {
    int64_t base = 0, rest = o;
    for (int32_t k = nk - 1; k >= 0; k--) {
      int64_t s = x->shape[kept[k]];
      base += (rest % s) * x->stride[kept[k]];
      rest /= s;
    }
    double acc = n->op == LOOM_OP_REDUCE_SUM ? 0.0 : is_max ? -INFINITY : INFINITY;
    int64_t iacc = 0;
    for (int64_t r = 0; r < n_red; r++) {
      int64_t off = base;
      rest = r;
      for (int32_t k = nr - 1; k >= 0; k--) {
        int64_t s = x->shape[red[k]];
        off += (rest % s) * x->stride[red[k]];
        rest /= s;
      }
      if (exact) {
        int64_t v = loom_load_i64(x->dtype, x->data, off);
        if (r == 0 || (is_max ? v > iacc : v < iacc)) iacc = v;
        continue;
      }
      double v = loom_load(x->dtype, x->data, off);
      if (n->op == LOOM_OP_REDUCE_SUM)
        acc += v;
      else if (v != v || (is_max ? v > acc : v < acc)) /* NaN sticks */
        acc = v;
    }
    int64_t dst = loom_view_offset(&out[0], o);
    if (exact && n_red > 0) {
      /* loom_store is exact for every int dtype except i64 */
      if (out[0].dtype == LOOM_DTYPE_I64)
        ((int64_t *)out[0].data)[dst] = iacc;
      else
        loom_store(out[0].dtype, out[0].data, dst, (double)iacc);
    } else {
      loom_store(out[0].dtype, out[0].data, dst, acc);
    }
  }
  return LOOM_STATUS_OK;
}

loom_op loom_reduce_combine(loom_op reduce) {
  return reduce == LOOM_OP_REDUCE_SUM   ? LOOM_OP_ADD
         : reduce == LOOM_OP_REDUCE_MAX ? LOOM_OP_MAXIMUM
                                        : LOOM_OP_MINIMUM;
}

/* Kept dims are SPATIAL (shared with the output); reduced dims are PARTIAL,
 * joined by the reduction itself. */
static void partition_reduce(const loom_node *n, const loom_type *in, const loom_type *out,
                             loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  uint32_t mask = 0;
  const loom_ints *axes = &LOOM_ATTR_INTS(n, reduce_sum, axes);
  if (axes->n == 0)
    mask = in[0].rank ? (uint32_t)((UINT64_C(1) << in[0].rank) - 1) : 0;
  else if (!loom_axes_mask(axes, in[0].rank, &mask)) {
    p->n_in = p->n_out = 0; /* cannot happen after infer; replicate */
    return;
  }
  loom_op combine = loom_reduce_combine(n->op);
  bool keep = LOOM_ATTR_I(n, reduce_sum, keepdims) != 0;
  int32_t od = 0;
  for (int32_t d = 0; d < in[0].rank; d++) {
    if (mask & (1u << d)) {
      p->in[0][d] = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_PARTIAL, combine);
      if (keep) p->out[0][od++] = -1;
    } else {
      int32_t l = loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
      p->in[0][d] = (int8_t)l;
      p->out[0][od++] = (int8_t)l;
    }
  }
}

#define LOOM_REDUCE_DEF(nm)                                                                        \
  const loom_op_def loom_opdef_##nm = {                                                            \
      .name = #nm,                                                                                 \
      .cls = LOOM_OPCLASS_REDUCE,                                                                  \
      .min_in = 1,                                                                                 \
      .max_in = 1,                                                                                 \
      .n_out = 1,                                                                                  \
      .n_attrs = LOOM_ATTR_COUNT(nm),                                                              \
      .attrs = LOOM_ATTR_SPECS(nm),                                                                \
      .infer = infer_reduce,                                                                       \
      .ref = ref_reduce,                                                                           \
      .grad = loom_grad_##nm,                                                                      \
      .partition = partition_reduce,                                                               \
  };

LOOM_REDUCE_DEF(reduce_sum)
LOOM_REDUCE_DEF(reduce_max)
LOOM_REDUCE_DEF(reduce_min)

#include "ir/build.h"

#include "ops/op.h"

#include <string.h>

loom_status loom_build_status(loom_graph *g) {
  loom_status st = g->err;
  g->err = LOOM_STATUS_OK;
  return st;
}

int32_t lb_op_multi(loom_graph *g, loom_op op, int32_t n_in, const int32_t *in,
                    const loom_attr_value *attrs, int32_t n_out, int32_t *out) {
  if (g->err) return -1;
  for (int32_t i = 0; i < n_in; i++)
    if (in[i] < 0) {
      g->err = loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                          "builder: %s input %d is missing", loom_op_name(op), i);
      return -1;
    }
  loom_status st = loom_graph_add(g, op, n_in, in, attrs, n_out, out);
  if (st) {
    g->err = st;
    return -1;
  }
  return out[0];
}

int32_t lb_op(loom_graph *g, loom_op op, int32_t n_in, const int32_t *in,
              const loom_attr_value *attrs) {
  int32_t out = -1;
  return lb_op_multi(g, op, n_in, in, attrs, 1, &out);
}

int32_t lb_unary(loom_graph *g, loom_op op, int32_t x) {
  return lb_op(g, op, 1, &x, NULL);
}

int32_t lb_binary(loom_graph *g, loom_op op, int32_t a, int32_t b) {
  int32_t in[2] = {a, b};
  return lb_op(g, op, 2, in, NULL);
}

int32_t lb_add(loom_graph *g, int32_t a, int32_t b) { return lb_binary(g, LOOM_OP_ADD, a, b); }
int32_t lb_sub(loom_graph *g, int32_t a, int32_t b) { return lb_binary(g, LOOM_OP_SUB, a, b); }
int32_t lb_mul(loom_graph *g, int32_t a, int32_t b) { return lb_binary(g, LOOM_OP_MUL, a, b); }
int32_t lb_div(loom_graph *g, int32_t a, int32_t b) { return lb_binary(g, LOOM_OP_DIV, a, b); }
int32_t lb_neg(loom_graph *g, int32_t x) { return lb_unary(g, LOOM_OP_NEG, x); }

int32_t lb_select(loom_graph *g, int32_t cond, int32_t a, int32_t b) {
  int32_t in[3] = {cond, a, b};
  return lb_op(g, LOOM_OP_SELECT, 3, in, NULL);
}

/* Sets an INTS attribute value from n integers. */
static void set_ints(loom_ints *dst, int32_t n, const int64_t *v) {
  dst->n = n;
  for (int32_t k = 0; k < n && k < LOOM_MAX_RANK; k++) dst->v[k] = v[k];
}

int32_t lb_cast(loom_graph *g, int32_t x, loom_dtype dt) {
  if (g->err) return -1;
  if (g->values[x].type.dtype == dt) return x;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_CAST, a);
  LOOM_ATTRV_I(a, cast, dtype) = dt;
  return lb_op(g, LOOM_OP_CAST, 1, &x, a);
}

int32_t lb_const(loom_graph *g, loom_dtype dt, int32_t rank,
                 const int64_t *shape, double value) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_CONSTANT, a);
  LOOM_ATTRV_I(a, constant, dtype) = dt;
  set_ints(&LOOM_ATTRV_INTS(a, constant, shape), rank, shape);
  LOOM_ATTRV_F(a, constant, value) = value;
  return lb_op(g, LOOM_OP_CONSTANT, 0, NULL, a);
}

int32_t lb_scalar(loom_graph *g, loom_dtype dt, double value) {
  return lb_const(g, dt, 0, NULL, value);
}

int32_t lb_scalar_like(loom_graph *g, int32_t x, double value) {
  if (g->err || x < 0) return -1;
  return lb_scalar(g, g->values[x].type.dtype, value);
}

int32_t lb_zeros_like(loom_graph *g, int32_t x) {
  if (g->err || x < 0) return -1;
  const loom_type *t = &g->values[x].type;
  return lb_const(g, t->dtype, t->rank, t->shape, 0.0);
}

int32_t lb_iota(loom_graph *g, loom_dtype dt, int32_t rank,
                const int64_t *shape, int32_t axis) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_IOTA, a);
  LOOM_ATTRV_I(a, iota, dtype) = dt;
  set_ints(&LOOM_ATTRV_INTS(a, iota, shape), rank, shape);
  LOOM_ATTRV_I(a, iota, axis) = axis;
  return lb_op(g, LOOM_OP_IOTA, 0, NULL, a);
}

int32_t lb_reduce(loom_graph *g, loom_op op, int32_t x, int32_t n_axes,
                  const int64_t *axes, bool keepdims) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(op, a);
  /* every reduction has reduce_sum's attribute list (ops/attrs.h) */
  set_ints(&LOOM_ATTRV_INTS(a, reduce_sum, axes), n_axes, axes);
  LOOM_ATTRV_I(a, reduce_sum, keepdims) = keepdims;
  return lb_op(g, op, 1, &x, a);
}

int32_t lb_sum(loom_graph *g, int32_t x, int32_t n_axes, const int64_t *axes,
               bool keepdims) {
  return lb_reduce(g, LOOM_OP_REDUCE_SUM, x, n_axes, axes, keepdims);
}

int32_t lb_reshape(loom_graph *g, int32_t x, int32_t rank, const int64_t *shape) {
  if (g->err || x < 0) return -1;
  const loom_type *t = &g->values[x].type;
  if (t->rank == rank && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)rank) == 0)
    return x;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_RESHAPE, a);
  set_ints(&LOOM_ATTRV_INTS(a, reshape, shape), rank, shape);
  return lb_op(g, LOOM_OP_RESHAPE, 1, &x, a);
}

int32_t lb_transpose(loom_graph *g, int32_t x, const int64_t *perm) {
  if (g->err || x < 0) return -1;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_TRANSPOSE, a);
  set_ints(&LOOM_ATTRV_INTS(a, transpose, perm), g->values[x].type.rank, perm);
  return lb_op(g, LOOM_OP_TRANSPOSE, 1, &x, a);
}

int32_t lb_transpose_last2(loom_graph *g, int32_t x) {
  if (g->err || x < 0) return -1;
  int32_t r = g->values[x].type.rank;
  int64_t perm[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r; d++) perm[d] = d;
  if (r >= 2) {
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
  }
  return lb_transpose(g, x, perm);
}

int32_t lb_broadcast_to(loom_graph *g, int32_t x, int32_t rank,
                        const int64_t *shape) {
  if (g->err || x < 0) return -1;
  const loom_type *t = &g->values[x].type;
  if (t->rank == rank && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)rank) == 0)
    return x;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_BROADCAST_TO, a);
  set_ints(&LOOM_ATTRV_INTS(a, broadcast_to, shape), rank, shape);
  return lb_op(g, LOOM_OP_BROADCAST_TO, 1, &x, a);
}

int32_t lb_broadcast_like(loom_graph *g, int32_t x, int32_t like) {
  if (g->err || like < 0) return -1;
  const loom_type *t = &g->values[like].type;
  return lb_broadcast_to(g, x, t->rank, t->shape);
}

int32_t lb_slice(loom_graph *g, int32_t x, const int64_t *starts,
                 const int64_t *ends) {
  if (g->err || x < 0) return -1;
  int32_t r = g->values[x].type.rank;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SLICE, a);
  set_ints(&LOOM_ATTRV_INTS(a, slice, starts), r, starts);
  set_ints(&LOOM_ATTRV_INTS(a, slice, ends), r, ends);
  return lb_op(g, LOOM_OP_SLICE, 1, &x, a);
}

int32_t lb_concat(loom_graph *g, int32_t n, const int32_t *xs, int32_t axis) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_CONCAT, a);
  LOOM_ATTRV_I(a, concat, axis) = axis;
  return lb_op(g, LOOM_OP_CONCAT, n, xs, a);
}

int32_t lb_pad(loom_graph *g, int32_t x, const int64_t *lo, const int64_t *hi,
               double value) {
  if (g->err || x < 0) return -1;
  int32_t r = g->values[x].type.rank;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_PAD, a);
  set_ints(&LOOM_ATTRV_INTS(a, pad, lo), r, lo);
  set_ints(&LOOM_ATTRV_INTS(a, pad, hi), r, hi);
  LOOM_ATTRV_F(a, pad, value) = value;
  return lb_op(g, LOOM_OP_PAD, 1, &x, a);
}

int32_t lb_gather(loom_graph *g, int32_t data, int32_t idx, int32_t axis) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GATHER, a);
  LOOM_ATTRV_I(a, gather, axis) = axis;
  int32_t in[2] = {data, idx};
  return lb_op(g, LOOM_OP_GATHER, 2, in, a);
}

int32_t lb_scatter_add(loom_graph *g, int32_t idx, int32_t updates,
                       int32_t rank, const int64_t *shape, int32_t axis) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SCATTER_ADD, a);
  LOOM_ATTRV_I(a, scatter_add, axis) = axis;
  set_ints(&LOOM_ATTRV_INTS(a, scatter_add, shape), rank, shape);
  int32_t in[2] = {idx, updates};
  return lb_op(g, LOOM_OP_SCATTER_ADD, 2, in, a);
}

int32_t lb_matmul(loom_graph *g, int32_t a_, int32_t b_, bool trans_a,
                  bool trans_b) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_MATMUL, a);
  LOOM_ATTRV_I(a, matmul, trans_a) = trans_a;
  LOOM_ATTRV_I(a, matmul, trans_b) = trans_b;
  int32_t in[2] = {a_, b_};
  return lb_op(g, LOOM_OP_MATMUL, 2, in, a);
}

int32_t lb_dropout(loom_graph *g, int32_t x, double p, int64_t seed,
                   int64_t offset, int32_t base) {
  return lb_dropout_piece(g, x, p, seed, offset, base, NULL, NULL);
}

int32_t lb_dropout_piece(loom_graph *g, int32_t x, double p, int64_t seed, int64_t offset,
                         int32_t base, const loom_ints *whole, const loom_ints *at) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_DROPOUT, a);
  LOOM_ATTRV_F(a, dropout, p) = p;
  LOOM_ATTRV_I(a, dropout, seed) = seed;
  LOOM_ATTRV_I(a, dropout, offset) = offset;
  if (whole) LOOM_ATTRV_INTS(a, dropout, whole) = *whole;
  if (at) LOOM_ATTRV_INTS(a, dropout, at) = *at;
  int32_t in[2] = {x, base};
  return lb_op(g, LOOM_OP_DROPOUT, base >= 0 ? 2 : 1, in, a);
}

int32_t lb_unbroadcast(loom_graph *g, int32_t grad, const loom_type *target) {
  if (g->err || grad < 0) return -1;
  const loom_type *t = &g->values[grad].type;
  int64_t axes[LOOM_MAX_RANK];
  int32_t n = 0, lead = t->rank - target->rank;
  for (int32_t d = 0; d < t->rank; d++) {
    int32_t td = d - lead;
    if (td < 0 || (target->shape[td] == 1 && t->shape[d] != 1)) axes[n++] = d;
  }
  int32_t r = n ? lb_sum(g, grad, n, axes, false) : grad;
  return lb_reshape(g, r, target->rank, target->shape);
}

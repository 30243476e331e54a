/*
 * Gradient rules of gather / scatter_add (each other's adjoint), matmul and
 * dropout. Integer inputs (indices, dropout's base) get no gradient.
 */
#include "ops/grad.h"

#include "ir/build.h"

/* gather(data, idx): each gathered element's gradient is added back at the
 * position it was read from (of the same table piece). */
void loom_grad_gather(loom_graph *g, const loom_node *n, const int32_t *dout,
                      int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_type t = g->values[n->in[0]].type;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SCATTER_ADD, a);
  LOOM_ATTRV_I(a, scatter_add, axis) = LOOM_ATTR_I(n, gather, axis);
  LOOM_ATTRV_I(a, scatter_add, base) = LOOM_ATTR_I(n, gather, base);
  LOOM_ATTRV_I(a, scatter_add, range) = LOOM_ATTR_I(n, gather, range);
  loom_ints *shape = &LOOM_ATTRV_INTS(a, scatter_add, shape);
  shape->n = t.rank;
  for (int32_t d = 0; d < t.rank; d++) shape->v[d] = t.shape[d];
  int32_t in[2] = {n->in[1], dout[0]};
  din[0] = lb_op(g, LOOM_OP_SCATTER_ADD, 2, in, a);
}

/* scatter_add(idx, updates): an update's gradient is read where it went. */
void loom_grad_scatter_add(loom_graph *g, const loom_node *n,
                           const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GATHER, a);
  LOOM_ATTRV_I(a, gather, axis) = LOOM_ATTR_I(n, scatter_add, axis);
  LOOM_ATTRV_I(a, gather, base) = LOOM_ATTR_I(n, scatter_add, base);
  LOOM_ATTRV_I(a, gather, range) = LOOM_ATTR_I(n, scatter_add, range);
  int32_t in[2] = {dout[0], n->in[0]};
  din[1] = lb_op(g, LOOM_OP_GATHER, 2, in, a);
}

/*
 * C = op(A) op(B) with op = transpose when trans_*. With dC:
 *   dA = dC op(B)^T          (A not transposed)
 *   dA = op(B) dC^T          (A transposed: dA = (dC op(B)^T)^T)
 *   dB = op(A)^T dC          (B not transposed)
 *   dB = dC^T op(A)          (B transposed)
 * expressed through matmul's own trans flags, then summed over the batch
 * dims that were broadcast.
 */
void loom_grad_matmul(loom_graph *g, const loom_node *n, const int32_t *dout,
                      int32_t *din) {
  int64_t ta = LOOM_ATTR_I(n, matmul, trans_a), tb = LOOM_ATTR_I(n, matmul, trans_b);
  if (dout[0] < 0 || g->err) return;
  int32_t a = n->in[0], b = n->in[1], d = dout[0];
  int32_t da = ta ? lb_matmul(g, b, d, tb != 0, true) : lb_matmul(g, d, b, false, tb == 0);
  int32_t db = tb ? lb_matmul(g, d, a, true, ta != 0) : lb_matmul(g, a, d, ta == 0, false);
  if (g->err) return;
  loom_type at = g->values[a].type, bt = g->values[b].type;
  din[0] = lb_unbroadcast(g, da, &at);
  din[1] = lb_unbroadcast(g, db, &bt);
}

/* The same mask (same seed, offset, p, base, whole and at) scaled the
 * same way. */
void loom_grad_dropout(loom_graph *g, const loom_node *n, const int32_t *dout,
                       int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  int64_t seed = LOOM_ATTR_I(n, dropout, seed), offset = LOOM_ATTR_I(n, dropout, offset);
  int32_t base = n->n_in > 1 ? n->in[1] : -1;
  /* copied: adding to g may move n */
  loom_ints whole = LOOM_ATTR_INTS(n, dropout, whole), at = LOOM_ATTR_INTS(n, dropout, at);
  din[0] = lb_dropout_piece(g, dout[0], LOOM_ATTR_F(n, dropout, p), seed, offset, base, &whole,
                            &at);
}

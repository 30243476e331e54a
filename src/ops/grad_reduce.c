/*
 * Gradient rules of the reductions. The output gradient is first reshaped to
 * the keepdims shape (the input's shape with reduced dims set to 1) so it
 * broadcasts against the input.
 */
#include "ops/grad.h"

#include "ir/build.h"
#include "ops/ops_util.h"

/* The input's shape with the reduced axes of n set to 1 (axes empty: all). */
static bool keep_shape(const loom_graph *g, const loom_node *n, loom_type *kt) {
  const loom_type *x = &g->values[n->in[0]].type;
  uint32_t mask = 0;
  const loom_ints *axes = &LOOM_ATTR_INTS(n, reduce_sum, axes); /* sum, max, min */
  if (axes->n == 0)
    mask = x->rank ? (uint32_t)((UINT64_C(1) << x->rank) - 1) : 0;
  else if (!loom_axes_mask(axes, x->rank, &mask))
    return false;
  *kt = *x;
  for (int32_t d = 0; d < x->rank; d++)
    if (mask & (1u << d)) kt->shape[d] = 1;
  return true;
}

/* v (shaped like the output) reshaped to keepdims form and broadcast to x. */
static int32_t expand(loom_graph *g, const loom_node *n, int32_t v) {
  loom_type kt;
  if (g->err || v < 0) return -1;
  if (!keep_shape(g, n, &kt)) {
    g->err = loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                        "grad of %s: bad axes", loom_op_name(n->op));
    return -1;
  }
  int32_t k = lb_reshape(g, v, kt.rank, kt.shape);
  return lb_broadcast_like(g, k, n->in[0]);
}

void loom_grad_reduce_sum(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = expand(g, n, dout[0]);
}

/*
 * reduce_max/min: the gradient goes to the elements equal to the result,
 * divided by the number of ties, so the gradients of a reduced group still
 * sum to the output gradient.
 */
static void grad_extremum(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_type kt;
  if (!keep_shape(g, n, &kt)) {
    g->err = loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                        "grad of %s: bad axes", loom_op_name(n->op));
    return;
  }
  int32_t x = n->in[0];
  int32_t hit = lb_binary(g, LOOM_OP_EQ, x, expand(g, n, n->out[0]));
  int32_t one = lb_scalar_like(g, x, 1.0), zero = lb_scalar_like(g, x, 0.0);
  int32_t ind = lb_select(g, hit, one, zero);
  /* count of ties per group, in keepdims form */
  int64_t axes[LOOM_MAX_RANK];
  int32_t na = 0;
  for (int32_t d = 0; d < kt.rank; d++)
    if (kt.shape[d] == 1 && g->values[x].type.shape[d] != 1) axes[na++] = d;
  int32_t count = na ? lb_sum(g, ind, na, axes, true) : ind;
  int32_t share = lb_div(g, lb_reshape(g, dout[0], kt.rank, kt.shape), count);
  din[0] = lb_mul(g, ind, share);
}

void loom_grad_reduce_max(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din) {
  grad_extremum(g, n, dout, din);
}

void loom_grad_reduce_min(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din) {
  grad_extremum(g, n, dout, din);
}

/*
 * Gradient rules of the layout ops: each is the adjoint data movement
 * (reshape back, inverse permutation, sum over broadcast dims, pad for slice,
 * slice for pad and concat).
 */
#include "ops/grad.h"

#include "ir/build.h"
#include "ops/ops_util.h"

void loom_grad_reshape(loom_graph *g, const loom_node *n, const int32_t *dout,
                       int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_type t = g->values[n->in[0]].type;
  din[0] = lb_reshape(g, dout[0], t.rank, t.shape);
}

/* out dim d = in dim perm[d], so in dim perm[d] = out dim d. */
void loom_grad_transpose(loom_graph *g, const loom_node *n, const int32_t *dout,
                         int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  int64_t inv[LOOM_MAX_RANK];
  for (int32_t d = 0; d < perm->n; d++)
    inv[perm->v[d]] = d;
  din[0] = lb_transpose(g, dout[0], inv);
}

void loom_grad_broadcast_to(loom_graph *g, const loom_node *n,
                            const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_type t = g->values[n->in[0]].type;
  din[0] = lb_unbroadcast(g, dout[0], &t);
}

/* The slice's window goes back in place; the rest of the input gets zeros. */
void loom_grad_slice(loom_graph *g, const loom_node *n, const int32_t *dout,
                     int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  const loom_ints *s = &LOOM_ATTR_INTS(n, slice, starts);
  const loom_type *x = &g->values[n->in[0]].type;
  const loom_type *y = &g->values[n->out[0]].type;
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  for (int32_t d = 0; d < x->rank; d++) {
    lo[d] = s->v[d] < 0 ? s->v[d] + x->shape[d] : s->v[d];
    hi[d] = x->shape[d] - lo[d] - y->shape[d];
  }
  din[0] = lb_pad(g, dout[0], lo, hi, 0.0);
}

/* Pads are never negative, so the input is the window [lo, lo + extent). */
void loom_grad_pad(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo);
  const loom_type *x = &g->values[n->in[0]].type;
  int64_t s[LOOM_MAX_RANK], e[LOOM_MAX_RANK];
  for (int32_t d = 0; d < x->rank; d++) {
    s[d] = lo->v[d];
    e[d] = s[d] + x->shape[d];
  }
  din[0] = lb_slice(g, dout[0], s, e);
}

/* Each input gets its window of the output gradient along the axis. */
void loom_grad_concat(loom_graph *g, const loom_node *n, const int32_t *dout,
                      int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  int64_t a = LOOM_ATTR_I(n, concat, axis);
  loom_type y = g->values[n->out[0]].type;
  int32_t axis;
  if (!loom_norm_axis(a, y.rank, &axis)) {
    g->err =
        loom_error(g->ctx, LOOM_STATUS_INTERNAL, "grad of concat: bad axis %lld", (long long)a);
    return;
  }
  int64_t s[LOOM_MAX_RANK] = {0}, e[LOOM_MAX_RANK];
  for (int32_t d = 0; d < y.rank; d++) e[d] = y.shape[d];
  int64_t at = 0;
  for (int32_t i = 0; i < n->n_in; i++) {
    int64_t len = g->values[n->in[i]].type.shape[axis];
    s[axis] = at;
    e[axis] = at + len;
    at += len;
    din[i] = lb_slice(g, dout[0], s, e);
  }
}

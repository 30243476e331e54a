/*
 * short_reduce: why a short middle axis is summed as slices.
 *
 * The fusion lowering reduces an axis that is not the last as a column
 * reduction: every tile of rows accumulates partials of the whole output
 * and the tiles' partials are combined after. That is cheap when the
 * output is short (a bias gradient: one row), and ruinous when the axis
 * is short and the output long: the sum of grouped-query attention's key
 * gradients over the 4 query heads of each key head, [4, 256, 2, 4, 64]
 * -> [4, 256, 2, 64], gave each of 16 tiles a 1 MiB partial to zero and
 * combine, 1.5 ms for 2.6 MB of data. Written as adds of the axis's
 * slices it is element-wise work over the output, which stitches into
 * one kernel with the slices as index arithmetic: one read of the input,
 * one write of the output. The order of the sum is the axis's index
 * order, the same on every thread count.
 */
#include "passes/short_reduce.h"

#include "ir/build.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "ops/ops_util.h"

#include <stdlib.h>
#include <string.h>

/* The axis node n reduces when it is one short axis that is not the
 * last, else -1. */
static int32_t short_axis(const loom_graph *g, const loom_node *n) {
  if ((n->op != LOOM_OP_REDUCE_SUM && n->op != LOOM_OP_REDUCE_MAX &&
       n->op != LOOM_OP_REDUCE_MIN) ||
      n->copy)
    return -1;
  const loom_type *x = loom_value_type(g, n->in[0]);
  uint32_t mask = 0;
  const loom_ints *axes = &LOOM_ATTR_INTS(n, reduce_sum, axes);
  if (axes->n == 0 || !loom_axes_mask(axes, x->rank, &mask)) return -1;
  int32_t a = 0;
  while (a < x->rank && !(mask & (1u << a))) a++;
  if (a >= x->rank - 1 || mask != 1u << a) return -1;
  int64_t len = x->shape[a];
  return len >= 2 && len <= LOOM_SHORT_REDUCE_MAX ? a : -1;
}

/* n's result in dst from its input x (mapped): the chain over the slices. */
static int32_t unroll(loom_graph *dst, const loom_graph *g, const loom_node *n, int32_t x,
                      int32_t a) {
  const loom_type *t = loom_value_type(g, n->in[0]);
  loom_op combine = loom_reduce_combine(n->op);
  int64_t starts[LOOM_MAX_RANK] = {0}, ends[LOOM_MAX_RANK];
  memcpy(ends, t->shape, sizeof(int64_t) * (size_t)t->rank);
  int32_t acc = -1;
  for (int64_t i = 0; i < t->shape[a]; i++) {
    starts[a] = i;
    ends[a] = i + 1;
    int32_t s = lb_slice(dst, x, starts, ends);
    acc = acc < 0 ? s : lb_binary(dst, combine, acc, s);
  }
  const loom_type *o = loom_value_type(g, n->out[0]);
  return o->rank == t->rank ? acc : lb_reshape(dst, acc, o->rank, o->shape);
}

loom_status loom_graph_unroll_short_reductions(const loom_graph *g, loom_graph **out,
                                               int32_t *n_unrolled) {
  *out = NULL;
  *n_unrolled = 0;
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  loom_status st = loom_graph_begin_copy(g, &dst, &map);
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const loom_node *n = &g->nodes[i];
    int32_t a = short_axis(g, n);
    if (a < 0) {
      st = loom_graph_copy_node(dst, g, n, map);
      continue;
    }
    int32_t y = unroll(dst, g, n, map[n->in[0]], a);
    st = loom_build_status(dst);
    if (!st) map[n->out[0]] = y, ++*n_unrolled;
  }
  if (!st) st = loom_graph_finish_copy(dst, g, map);
  free(map);
  if (st) {
    loom_graph_free(dst);
    return st;
  }
  *out = dst;
  return LOOM_STATUS_OK;
}

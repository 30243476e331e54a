/*
 * Reverse-mode autodiff as a graph-to-graph pass: loom_graph_grad appends to
 * g the nodes computing d(loss)/d(wrt[i]), built from primitive ops by the
 * per-op gradient rules (src/ops/grad_*.c).
 *
 * - A value is "forward-reachable" if it is a float value that depends on a
 *   wrt; only those carry gradients (integer and bool values never do).
 * - Nodes are visited in reverse order (node order is topological). A node is
 *   differentiated when one of its outputs received a gradient (so it is on
 *   a path to the loss) and one of its inputs is forward-reachable (on a path
 *   from a wrt). Contributions to a value are summed with add.
 * - A composite node is differentiated through its decomposition: the
 *   decomposition is appended to g and that subgraph is differentiated in
 *   its place (recursively, for composites made of composites) — unless
 *   the composite has a gradient rule of its own, for an identity cheaper
 *   than the chain rule through its primitives (gelu).
 * - A wrt that does not reach the loss (or is an integer value) gets a
 *   zero constant of its own type.
 * - Finally, appended nodes that no gradient uses are removed again (rules
 *   build gradients for every input; decompositions recompute values), and
 *   on failure every appended node is removed, so g is left as it was.
 */
#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* Composites nest only a few levels; deeper means a decomposition loop. */
#define AD_MAX_DEPTH 16

typedef struct ad_state {
  loom_graph *g;
  int32_t *acc;  /* per value: its gradient so far, -1 = none (zero) */
  uint8_t *fwd;  /* per value: float and depends on a wrt */
  int32_t cap;
} ad_state;

/* Makes the per-value arrays cover every value of g. */
static loom_status ad_grow(ad_state *s) {
  int32_t n = s->g->n_values;
  if (n <= s->cap) return LOOM_STATUS_OK;
  int32_t cap = LOOM_MAX(n, s->cap * 2);
  int32_t *acc = loom_realloc(s->g->ctx, s->acc, sizeof(int32_t) * (size_t)cap);
  if (!acc) return LOOM_STATUS_OUT_OF_MEMORY;
  s->acc = acc;
  uint8_t *fwd = loom_realloc(s->g->ctx, s->fwd, (size_t)cap);
  if (!fwd) return LOOM_STATUS_OUT_OF_MEMORY;
  s->fwd = fwd;
  for (int32_t v = s->cap; v < cap; v++) {
    s->acc[v] = -1;
    s->fwd[v] = 0;
  }
  s->cap = cap;
  return LOOM_STATUS_OK;
}

static bool is_float_value(const loom_graph *g, int32_t v) {
  return loom_dtype_is_float(g->values[v].type.dtype);
}

/* Marks the outputs of nodes [lo, hi) that depend on a forward-reachable
 * input (values already marked stay marked: a wrt may be an op output). */
static void ad_mark_forward(ad_state *s, int32_t lo, int32_t hi) {
  const loom_graph *g = s->g;
  for (int32_t i = lo; i < hi; i++) {
    const loom_node *n = &g->nodes[i];
    bool any = false;
    for (int32_t j = 0; j < n->n_in && !any; j++) any = s->fwd[n->in[j]];
    if (!any) continue;
    for (int32_t k = 0; k < n->n_out; k++)
      if (is_float_value(g, n->out[k])) s->fwd[n->out[k]] = 1;
  }
}

/* Adds grad to the gradient of v, after checking it has v's exact type. */
static loom_status ad_accumulate(ad_state *s, int32_t v, int32_t grad,
                                 loom_op op, int32_t j) {
  loom_graph *g = s->g;
  if (!loom_value_valid(g, grad))
    return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                      "autodiff: the gradient rule of %s gave no value for input %d",
                      loom_op_name(op), j);
  if (!loom_type_equal(&g->values[grad].type, &g->values[v].type)) {
    char a[128], b[128];
    return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                      "autodiff: the gradient rule of %s gave %s for input %d of type %s",
                      loom_op_name(op), loom_type_str(&g->values[grad].type, a, sizeof a), j,
                      loom_type_str(&g->values[v].type, b, sizeof b));
  }
  s->acc[v] = s->acc[v] < 0 ? grad : lb_add(g, s->acc[v], grad);
  LOOM_TRY(loom_build_status(g));
  return ad_grow(s);
}

static loom_status ad_backward(ad_state *s, int32_t lo, int32_t hi, int depth);

/* Differentiates composite node n (a copy) through its decomposition. */
static loom_status ad_composite(ad_state *s, const loom_node *n,
                                const int32_t *dout, int depth) {
  loom_graph *g = s->g;
  const loom_op_def *d = loom_op_get(n->op);
  if (!d->decompose)
    return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                      "autodiff: composite %s has no decomposition", d->name);
  if (depth >= AD_MAX_DEPTH)
    return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                      "autodiff: composites nest deeper than %d at %s (a decomposition loop?)",
                      AD_MAX_DEPTH, d->name);
  int32_t outs[LOOM_PART_MAX_IO];
  for (int32_t k = 0; k < LOOM_PART_MAX_IO; k++) outs[k] = -1;
  int32_t first = g->n_nodes;
  d->decompose(g, n, n->in, outs);
  loom_status st = loom_build_status(g);
  if (st) {
    loom_error_prefix(g->ctx, "autodiff: decomposing %s", d->name);
    return st;
  }
  LOOM_TRY(ad_grow(s));
  int32_t last = g->n_nodes;
  ad_mark_forward(s, first, last);
  for (int32_t k = 0; k < n->n_out; k++) {
    if (!loom_value_valid(g, outs[k]) ||
        !loom_type_equal(&g->values[outs[k]].type, &g->values[n->out[k]].type))
      return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                        "autodiff: the decomposition of %s gave a bad output %d",
                        d->name, k);
    /* an output that does not depend on a wrt passes nothing back */
    if (dout[k] >= 0 && s->fwd[outs[k]])
      LOOM_TRY(ad_accumulate(s, outs[k], dout[k], n->op, k));
  }
  return ad_backward(s, first, last, depth + 1);
}

/* Differentiates one node (a copy: building may move g->nodes). */
static loom_status ad_node(ad_state *s, const loom_node *n, int depth) {
  loom_graph *g = s->g;
  int32_t dout[LOOM_PART_MAX_IO];
  bool any_out = false, any_in = false;
  /* no gradient rule (comparisons, comm ops): zero, whatever its outputs */
  if (!loom_op_is_composite(n->op) && !loom_op_get(n->op)->grad) return LOOM_STATUS_OK;
  if (n->n_out > LOOM_PART_MAX_IO)
    return loom_error(g->ctx, LOOM_STATUS_INTERNAL, "autodiff: %s has too many outputs",
                      loom_op_name(n->op));
  for (int32_t k = 0; k < n->n_out; k++) {
    dout[k] = s->acc[n->out[k]];
    any_out |= dout[k] >= 0;
  }
  for (int32_t j = 0; j < n->n_in && !any_in; j++) any_in = s->fwd[n->in[j]];
  if (!any_out || !any_in) return LOOM_STATUS_OK;
  const loom_op_def *d = loom_op_get(n->op);
  if (loom_op_is_composite(n->op) && !d->grad) return ad_composite(s, n, dout, depth);
  if (!d->grad) return LOOM_STATUS_OK; /* comparisons, sign, ...: zero */
  int32_t stack_din[16], *din = stack_din;
  if (n->n_in > 16) {
    din = loom_malloc(g->ctx, sizeof(int32_t) * (size_t)n->n_in);
    if (!din) return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t j = 0; j < n->n_in; j++) din[j] = -1;
  d->grad(g, n, dout, din);
  loom_status st = loom_build_status(g);
  if (st) loom_error_prefix(g->ctx, "autodiff: gradient of %s", d->name);
  if (!st) st = ad_grow(s);
  for (int32_t j = 0; j < n->n_in && !st; j++)
    if (din[j] >= 0 && s->fwd[n->in[j]]) st = ad_accumulate(s, n->in[j], din[j], n->op, j);
  if (din != stack_din) free(din);
  return st;
}

static loom_status ad_backward(ad_state *s, int32_t lo, int32_t hi, int depth) {
  for (int32_t i = hi - 1; i >= lo; i--) {
    loom_node n = s->g->nodes[i];
    LOOM_TRY(ad_node(s, &n, depth));
  }
  return LOOM_STATUS_OK;
}

/*
 * Removes the nodes appended since (n_nodes0, n_values0) whose outputs are
 * not needed for keep[0..n_keep) and renumbers the remaining appended values
 * (updating keep). Old values keep their ids. Only an optimization: without
 * memory for its scratch arrays it leaves g as it is.
 */
static void ad_prune(loom_graph *g, int32_t n_nodes0, int32_t n_values0,
                            int32_t n_keep, int32_t *keep) {
  int32_t n_new = g->n_values - n_values0;
  if (n_new <= 0) return;
  int32_t *vmap = malloc(sizeof(int32_t) * (size_t)n_new);
  uint8_t *live = calloc((size_t)n_new, 1);
  if (!vmap || !live) {
    free(vmap);
    free(live);
    return;
  }
  for (int32_t i = 0; i < n_keep; i++)
    if (keep[i] >= n_values0) live[keep[i] - n_values0] = 1;
  for (int32_t i = g->n_nodes - 1; i >= n_nodes0; i--) {
    const loom_node *n = &g->nodes[i];
    bool used = false;
    for (int32_t k = 0; k < n->n_out && !used; k++) used = live[n->out[k] - n_values0];
    if (!used) continue;
    for (int32_t j = 0; j < n->n_in; j++)
      if (n->in[j] >= n_values0) live[n->in[j] - n_values0] = 1;
  }
  int32_t ni = n_nodes0, nv = n_values0;
  for (int32_t i = n_nodes0; i < g->n_nodes; i++) {
    loom_node n = g->nodes[i];
    bool used = false;
    for (int32_t k = 0; k < n.n_out && !used; k++) used = live[n.out[k] - n_values0];
    if (!used) {
      for (int32_t k = 0; k < n.n_out; k++) free(g->values[n.out[k]].name);
      free(n.in);
      free(n.out);
      continue;
    }
    for (int32_t j = 0; j < n.n_in; j++)
      if (n.in[j] >= n_values0) n.in[j] = vmap[n.in[j] - n_values0];
    /* values move down in order, so a copy never overwrites a live one */
    for (int32_t k = 0; k < n.n_out; k++) {
      int32_t old = n.out[k];
      vmap[old - n_values0] = nv;
      g->values[nv] = g->values[old];
      g->values[nv].node = ni;
      n.out[k] = nv++;
    }
    g->nodes[ni++] = n;
  }
  g->n_nodes = ni;
  g->n_values = nv;
  for (int32_t i = 0; i < n_keep; i++)
    if (keep[i] >= n_values0) keep[i] = vmap[keep[i] - n_values0];
  free(vmap);
  free(live);
}

static loom_status ad_run(ad_state *s, loom_value loss, int32_t n_wrt,
                          const loom_value *wrt, loom_value *grads) {
  loom_graph *g = s->g;
  LOOM_TRY(ad_grow(s));
  for (int32_t i = 0; i < n_wrt; i++)
    if (is_float_value(g, wrt[i])) s->fwd[wrt[i]] = 1;
  int32_t n_nodes0 = g->n_nodes;
  ad_mark_forward(s, 0, n_nodes0);
  if (s->fwd[loss]) {
    loom_type t = g->values[loss].type;
    s->acc[loss] = lb_const(g, t.dtype, t.rank, t.shape, 1.0);
    LOOM_TRY(loom_build_status(g));
    LOOM_TRY(ad_grow(s));
    LOOM_TRY(ad_backward(s, 0, n_nodes0, 0));
  }
  for (int32_t i = 0; i < n_wrt; i++) {
    grads[i] = s->acc[wrt[i]];
    if (grads[i] < 0) grads[i] = lb_zeros_like(g, wrt[i]); /* does not reach */
  }
  return loom_build_status(g);
}

loom_status loom_graph_grad(loom_graph *g, loom_value loss, int32_t n_wrt,
                            const loom_value *wrt, loom_value *grads) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_ctx *ctx = g->ctx;
  if (n_wrt < 0 || (n_wrt > 0 && (!wrt || !grads)))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "graph_grad: bad wrt list (n_wrt %d)", n_wrt);
  if (!loom_value_valid(g, loss))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "graph_grad: the loss %d is not a value of this graph", loss);
  const loom_type *lt = &g->values[loss].type;
  char buf[128];
  if (!loom_dtype_is_float(lt->dtype) || loom_type_numel(lt) != 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "graph_grad: the loss must be a float value with one element, got %s",
                      loom_type_str(lt, buf, sizeof buf));
  for (int32_t i = 0; i < n_wrt; i++) {
    if (!loom_value_valid(g, wrt[i]))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "graph_grad: wrt[%d] = %d is not a value of this graph", i, wrt[i]);
    grads[i] = LOOM_VALUE_NONE;
  }
  (void)loom_build_status(g); /* start from a clean sticky status */
  int32_t n_nodes0 = g->n_nodes, n_values0 = g->n_values;
  ad_state s = {.g = g};
  loom_status st = ad_run(&s, loss, n_wrt, wrt, grads);
  free(s.acc);
  free(s.fwd);
  if (st) {
    /* leave g as it was: drop everything appended */
    (void)loom_build_status(g);
    ad_prune(g, n_nodes0, n_values0, 0, NULL);
    for (int32_t i = 0; i < n_wrt; i++) grads[i] = LOOM_VALUE_NONE;
    return st;
  }
  ad_prune(g, n_nodes0, n_values0, n_wrt, grads);
  return LOOM_STATUS_OK;
}

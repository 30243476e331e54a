/* The decompose pass: composite ops lowered to primitives. Each round copies
 * the graph and replaces every composite node by what its definition's
 * decompose function emits (which may hold composites again), until none is
 * left (or, for autodiff, none without a gradient rule of its own). */
#include "passes/decompose.h"

#include "ir/build.h"
#include "ops/op.h"

#include <stdlib.h>

/* Composites expand into composites at most this deep. */
#define DECOMPOSE_MAX_ROUNDS 16

/* A composite this pass lowers: every one, or (keep_grad) those that autodiff
 * could only differentiate through their primitives. */
static bool lowered(loom_op op, bool keep_grad) {
  return loom_op_is_composite(op) && !(keep_grad && loom_op_get(op)->grad);
}

static bool has_composite(const loom_graph *g, bool keep_grad) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (lowered(g->nodes[i].op, keep_grad)) return true;
  return false;
}

/* Adds the lowering of composite node n of src to dst and maps its outputs. */
static loom_status lower_node(loom_graph *dst, const loom_graph *src, const loom_node *n,
                              int32_t *map) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d->decompose)
    return loom_error(src->ctx, LOOM_STATUS_INTERNAL, "composite %s has no decomposition", d->name);
  int32_t stack_in[16], *in = stack_in;
  if (n->n_in > 16) {
    in = loom_malloc(src->ctx, sizeof(int32_t) * (size_t)n->n_in);
    if (!in) return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n->n_in; i++)
    in[i] = map[n->in[i]];
  int32_t out[LOOM_PART_MAX_IO];
  for (int32_t o = 0; o < n->n_out; o++)
    out[o] = -1;
  (void)loom_build_status(dst); /* start clean: the rule's errors are its own */
  d->decompose(dst, n, in, out);
  if (in != stack_in) free(in);
  loom_status st = loom_build_status(dst);
  if (st) {
    loom_error_prefix(src->ctx, "decomposing %s", d->name);
    return st;
  }
  for (int32_t o = 0; o < n->n_out; o++) {
    const loom_value_info *sv = &src->values[n->out[o]];
    if (!loom_value_valid(dst, out[o]))
      return loom_error(src->ctx, LOOM_STATUS_INTERNAL,
                        "decomposing %s: output %d was not produced", d->name, o);
    if (!loom_type_equal(&sv->type, loom_value_type(dst, out[o]))) {
      char a[128], b[128];
      return loom_error(src->ctx, LOOM_STATUS_INTERNAL,
                        "decomposing %s: output %d has type %s, the op promised %s", d->name, o,
                        loom_type_str(loom_value_type(dst, out[o]), b, sizeof b),
                        loom_type_str(&sv->type, a, sizeof a));
    }
    map[n->out[o]] = out[o];
    /* keep a named value's name where its replacement has none */
    if (sv->name && !dst->values[out[o]].name && loom_graph_find_value(dst, sv->name) < 0)
      LOOM_TRY(loom_value_set_name(dst, out[o], sv->name));
  }
  return LOOM_STATUS_OK;
}

/* One round: a copy of src with every composite node lowered once. */
static loom_status decompose_once(const loom_graph *src, bool keep_grad, loom_graph **out) {
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  *out = NULL;
  LOOM_TRY(loom_graph_begin_copy(src, &dst, &map));
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < src->n_nodes && !st; i++) {
    const loom_node *n = &src->nodes[i];
    int32_t first = dst->n_nodes;
    st = lowered(n->op, keep_grad) ? lower_node(dst, src, n, map)
                                   : loom_graph_copy_node(dst, src, n, map);
    if (!st && n->copy) loom_graph_mark_copy(dst, first, n->copy); /* its parts are copies too */
  }
  if (!st) st = loom_graph_finish_copy(dst, src, map);
  free(map);
  if (st) {
    loom_graph_free(dst);
    return st;
  }
  *out = dst;
  return LOOM_STATUS_OK;
}

static loom_status decompose(const loom_graph *g, bool keep_grad, loom_graph **out) {
  if (!out)
    return g ? loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_decompose: out is NULL")
             : LOOM_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_graph *cur = NULL;
  /* Always at least one round, so the caller owns a fresh graph. */
  for (int32_t round = 0; round < DECOMPOSE_MAX_ROUNDS; round++) {
    loom_graph *next = NULL;
    loom_status st = decompose_once(cur ? cur : g, keep_grad, &next);
    loom_graph_free(cur);
    if (st) return st;
    cur = next;
    if (!has_composite(cur, keep_grad)) {
      *out = cur;
      return LOOM_STATUS_OK;
    }
  }
  loom_graph_free(cur);
  return loom_error(g->ctx, LOOM_STATUS_INTERNAL,
                    "decompose: composites remain after %d rounds (a cycle of lowerings?)",
                    DECOMPOSE_MAX_ROUNDS);
}

loom_status loom_graph_decompose(const loom_graph *g, loom_graph **out) {
  return decompose(g, false, out);
}

loom_status loom_graph_decompose_for_grad(const loom_graph *g, loom_graph **out) {
  return decompose(g, true, out);
}

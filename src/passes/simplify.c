/*
 * simplify: dead-code elimination, common-subexpression elimination and
 * the exact identity x * 1 = x.
 *
 * Autodiff differentiates composites through their decomposition, which
 * recomputes forward values (softmax's max, exp and sum) next to the
 * originals; decomposition can also leave values nothing reads. Both cost
 * kernels and memory traffic, so the session runs this pass before fusion.
 * Every op is a pure function of its inputs and attributes — dropout too,
 * whose mask depends only on (seed, offset, base) — so identical nodes
 * compute identical values and may be merged. Comm ops are the exception:
 * a peer waits for each one, so every comm node is kept (live even when
 * nothing reads it) and never merged with an equal one. So is a node
 * marked as a recomputation (loom_node.copy, a plan's +recompute): its
 * mark is part of its identity, so it stays apart from the original it
 * repeats, and the original's result can die before the copy runs.
 *
 * Autodiff seeds a loss's gradient with a constant 1, which its first
 * rules broadcast and multiply in (a sum's gradient times the factor
 * beside it): a full-size copy of the factor. Multiplying by 1 (or
 * dividing by it) is exact in IEEE arithmetic, NaN and -0 included, so
 * such a product is replaced by its other operand when that already has
 * the product's type.
 *
 * The same seeds leave element-wise ops over constants (the negated
 * 1 / N of a label-smoothed loss's gradient, broadcast over the rows):
 * folded into one constant of the op's shape where the fold is exact
 * (f32 or f64 arithmetic that double evaluation rounds the same way:
 * neg, abs, add, sub, mul, div, maximum, minimum, over finite values), so
 * no kernel is planned, and no cost weighed, for what the compiler knows.
 */
#include "passes/simplify.h"

#include "ir/build.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Hash of a node of dst with inputs already mapped into dst. */
static uint64_t node_hash(const loom_node *n, const int32_t *in) {
  uint64_t h = 0;
  for (int32_t i = 0; i < n->n_in; i++) h = loom_hash_mix(h, (uint64_t)in[i]);
  return loom_node_hash(h, n);
}

/* True if dst node m computes what src node n would with inputs `in`. */
static bool same_node(const loom_node *m, const loom_node *n, const int32_t *in) {
  if (!loom_node_same_kind(m, n)) return false;
  for (int32_t i = 0; i < n->n_in; i++)
    if (m->in[i] != in[i]) return false;
  return true;
}

/* Marks the nodes some graph output depends on. */
static bool *live_nodes(const loom_graph *g) {
  bool *live = loom_calloc(g->ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *live);
  bool *needed = loom_calloc(g->ctx, (size_t)(g->n_values ? g->n_values : 1), sizeof *needed);
  if (!live || !needed) {
    free(live);
    free(needed);
    return NULL;
  }
  for (int32_t o = 0; o < g->n_outputs; o++) needed[g->outputs[o]] = true;
  for (int32_t k = g->n_nodes - 1; k >= 0; k--) {
    const loom_node *n = &g->nodes[k];
    live[k] = loom_op_is_comm(n->op);
    for (int32_t o = 0; o < n->n_out && !live[k]; o++) live[k] = needed[n->out[o]];
    if (live[k])
      for (int32_t i = 0; i < n->n_in; i++) needed[n->in[i]] = true;
  }
  free(needed);
  return live;
}

/* True if value v of g holds one value everywhere (a constant, or a
 * reshape or broadcast of one); sets *c to it. */
static bool uniform_const(const loom_graph *g, int32_t v, double *c) {
  for (;;) {
    int32_t k = g->values[v].node;
    if (k < 0) return false;
    const loom_node *n = &g->nodes[k];
    if (n->op == LOOM_OP_CONSTANT) {
      *c = LOOM_ATTR_F(n, constant, value);
      return true;
    }
    if (n->op != LOOM_OP_RESHAPE && n->op != LOOM_OP_BROADCAST_TO) return false;
    v = n->in[0];
  }
}

static bool uniform_value(const loom_graph *g, int32_t v, double c) {
  double u;
  return uniform_const(g, v, &u) && u == c;
}

/* True if g's value v is a graph output (it keeps a node of its own). */
static bool is_output(const loom_graph *g, int32_t v) {
  for (int32_t o = 0; o < g->n_outputs; o++)
    if (g->outputs[o] == v) return true;
  return false;
}

/* The constant of dst that node n (inputs `in`, mapped) folds into, or -1
 * (see the top of the file for which folds are exact). */
static int32_t folded_constant(loom_graph *dst, const loom_graph *g, const loom_node *n,
                               const int32_t *in) {
  /* (the op itself is judged by the switch below: an operand's walk stops
   * at the first node that is not a constant, reshape or broadcast) */
  const loom_type *t = &g->values[n->out[0]].type;
  if (n->copy || n->n_in < 1 || n->n_in > 2) return -1;
  if (t->dtype != LOOM_DTYPE_F32 && t->dtype != LOOM_DTYPE_F64) return -1;
  double a = 0, b = 0, r;
  for (int32_t i = 0; i < n->n_in; i++)
    if (dst->values[in[i]].type.dtype != t->dtype || !uniform_const(dst, in[i], i ? &b : &a))
      return -1;
  if (is_output(g, n->out[0])) return -1;
  if (t->dtype == LOOM_DTYPE_F32) a = (float)a, b = (float)b; /* the constants' values */
  /* max / min of +0 and -0: which zero is the kernels' business */
  if ((n->op == LOOM_OP_MAXIMUM || n->op == LOOM_OP_MINIMUM) && a == 0 && b == 0) return -1;
  switch (n->op) {
  case LOOM_OP_NEG: r = -a; break;
  case LOOM_OP_ABS: r = fabs(a); break;
  case LOOM_OP_ADD: r = a + b; break;
  case LOOM_OP_SUB: r = a - b; break;
  case LOOM_OP_MUL: r = a * b; break;
  case LOOM_OP_DIV: r = a / b; break;
  case LOOM_OP_MAXIMUM: r = a > b ? a : b; break;
  case LOOM_OP_MINIMUM: r = a < b ? a : b; break;
  default: return -1;
  }
  if (t->dtype == LOOM_DTYPE_F32) r = (float)r;
  if (!isfinite(a) || !isfinite(b) || !isfinite(r)) return -1;
  return lb_const(dst, t->dtype, t->rank, t->shape, r);
}

/* The value of dst that node n (inputs `in`, mapped) equals by x * 1 = x
 * or x / 1 = x, or -1. Not for a graph output, which keeps a value of
 * its own, nor for a recomputation, whose operand is meant to die. */
static int32_t identity_operand(const loom_graph *dst, const loom_graph *g, const loom_node *n,
                                const int32_t *in) {
  if ((n->op != LOOM_OP_MUL && n->op != LOOM_OP_DIV) || n->n_in != 2 || n->copy) return -1;
  if (is_output(g, n->out[0])) return -1;
  const loom_type *t = &g->values[n->out[0]].type;
  for (int32_t i = n->op == LOOM_OP_DIV ? 1 : 0; i < 2; i++) {
    int32_t x = in[1 - i];
    if (uniform_value(dst, in[i], 1.0) && loom_type_equal(&dst->values[x].type, t)) return x;
  }
  return -1;
}

loom_status loom_graph_simplify(const loom_graph *g, loom_graph **out) {
  if (!g || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  loom_ctx *ctx = g->ctx;
  bool *live = live_nodes(g);
  if (!live) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_graph *dst = NULL;
  int32_t *map = NULL;
  loom_status st = loom_graph_begin_copy(g, &dst, &map);
  /* open-addressing table of dst node ids, at most half full */
  int32_t cap = 64;
  while (cap < 2 * g->n_nodes + 2) cap *= 2;
  int32_t *table = st ? NULL : loom_malloc(ctx, sizeof(int32_t) * (size_t)cap);
  int32_t *in = st ? NULL : loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_values + 1));
  if (!st && (!table || !in)) st = LOOM_STATUS_OUT_OF_MEMORY;
  if (table) memset(table, -1, sizeof(int32_t) * (size_t)cap);
  int32_t replaced = 0;

  for (int32_t k = 0; k < g->n_nodes && !st; k++) {
    if (!live[k]) continue;
    const loom_node *n = &g->nodes[k];
    if (loom_op_is_comm(n->op)) {
      st = loom_graph_copy_node(dst, g, n, map);
      continue;
    }
    for (int32_t i = 0; i < n->n_in; i++) in[i] = map[n->in[i]];
    int32_t same = identity_operand(dst, g, n, in);
    if (same < 0) same = folded_constant(dst, g, n, in);
    if (same < 0 && (st = loom_build_status(dst))) break;
    if (same >= 0) {
      map[n->out[0]] = same, replaced++;
      continue;
    }
    uint32_t slot = (uint32_t)node_hash(n, in) & (uint32_t)(cap - 1);
    int32_t found = -1;
    for (; table[slot] >= 0; slot = (slot + 1) & (uint32_t)(cap - 1))
      if (same_node(&dst->nodes[table[slot]], n, in)) {
        found = table[slot];
        break;
      }
    if (found >= 0) {
      for (int32_t o = 0; o < n->n_out; o++) map[n->out[o]] = dst->nodes[found].out[o];
      continue;
    }
    st = loom_graph_copy_node(dst, g, n, map);
    if (!st) table[slot] = dst->n_nodes - 1;
  }
  if (!st) st = loom_graph_finish_copy(dst, g, map);
  free(table);
  free(in);
  free(map);
  free(live);
  if (st) {
    loom_graph_free(dst);
    return st;
  }
  if (replaced == 0) {
    *out = dst;
    return LOOM_STATUS_OK;
  }
  /* the constants an identity or a fold read may be dead now: once more
   * (each round that replaces something has fewer non-constant nodes, so
   * this ends) */
  st = loom_graph_simplify(dst, out);
  loom_graph_free(dst);
  return st;
}

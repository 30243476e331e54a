/*
 * simplify: dead-code elimination and common-subexpression elimination.
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
 */
#include "passes/simplify.h"

#include "ops/op.h"

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

  for (int32_t k = 0; k < g->n_nodes && !st; k++) {
    if (!live[k]) continue;
    const loom_node *n = &g->nodes[k];
    if (loom_op_is_comm(n->op)) {
      st = loom_graph_copy_node(dst, g, n, map);
      continue;
    }
    for (int32_t i = 0; i < n->n_in; i++) in[i] = map[n->in[i]];
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
  *out = dst;
  return LOOM_STATUS_OK;
}

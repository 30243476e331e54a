/*
 * Merged nodes (simulate_merge.h): each device's order walked as the
 * simplify pass walks a device graph, values mapped to the first node
 * that computes them, then the nodes nothing reads dropped.
 */
#include "parallel/simulate_merge.h"

#include "ops/op.h"
#include "parallel/lower_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t node_key(const loom_node *n, const int32_t *canon) {
  uint64_t h = 0;
  for (int32_t i = 0; i < n->n_in; i++) h = loom_hash_mix(h, (uint64_t)canon[n->in[i]]);
  return loom_node_hash(h, n);
}

/* Whether node m computes what n does, inputs compared after merging. */
static bool same(const loom_node *m, const loom_node *n, const int32_t *canon) {
  if (!loom_node_same_kind(m, n)) return false;
  for (int32_t i = 0; i < n->n_in; i++)
    if (canon[m->in[i]] != canon[n->in[i]]) return false;
  return true;
}

/* Then dead-code elimination, as simplify's: a compute node none of whose
 * results a running node of its device reads (after merging) nor the
 * device outputs does not run either (a +recompute copy the backward
 * does not read). Comm ops always run. */
static loom_status dead_nodes(const loom_plan_program *pp, bool *merged, const int32_t *canon) {
  const loom_graph *G = pp->global;
  bool *needed = loom_calloc(pp->ctx, (size_t)G->n_values + 1, sizeof *needed);
  if (!needed) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t k = 0; k < pp->n_outs; k++) needed[canon[pp->outs[k].value]] = true;
  for (int32_t d = 0; d < pp->n_devices; d++)
    for (int32_t i = pp->order_start[d + 1] - 1; i >= pp->order_start[d]; i--) {
      int32_t node = pp->order_nodes[i];
      const loom_node *n = &G->nodes[node];
      if (merged[node]) continue;
      bool live = loom_op_is_comm(n->op) || pp->node_subop[node] == LOWER_FEED;
      for (int32_t o = 0; o < n->n_out && !live; o++) live = needed[canon[n->out[o]]];
      if (!live) {
        merged[node] = true;
        continue;
      }
      for (int32_t k = 0; k < n->n_in; k++) needed[canon[n->in[k]]] = true;
    }
  free(needed);
  return LOOM_STATUS_OK;
}

loom_status loom_sim_merged_nodes(const loom_plan_program *pp, bool *merged, int32_t *canon) {
  const loom_graph *G = pp->global;
  int32_t nv = G->n_values, longest = 0;
  for (int32_t d = 0; d < pp->n_devices; d++)
    longest = LOOM_MAX(longest, pp->order_start[d + 1] - pp->order_start[d]);
  int32_t cap = 64;
  while (cap < 2 * longest + 2) cap *= 2;
  int32_t *table = loom_malloc(pp->ctx, sizeof *table * (size_t)cap);
  if (!table) return LOOM_STATUS_OUT_OF_MEMORY;
  memset(merged, 0, sizeof *merged * (size_t)G->n_nodes);
  for (int32_t v = 0; v < nv; v++) canon[v] = v;
  for (int32_t d = 0; d < pp->n_devices; d++) {
    memset(table, -1, sizeof *table * (size_t)cap);
    for (int32_t i = pp->order_start[d]; i < pp->order_start[d + 1]; i++) {
      int32_t node = pp->order_nodes[i];
      const loom_node *n = &G->nodes[node];
      if (loom_op_is_comm(n->op) || pp->node_subop[node] == LOWER_FEED) continue;
      uint32_t slot = (uint32_t)node_key(n, canon) & (uint32_t)(cap - 1);
      for (; table[slot] >= 0; slot = (slot + 1) & (uint32_t)(cap - 1)) {
        const loom_node *m = &G->nodes[table[slot]];
        if (!same(m, n, canon)) continue;
        merged[node] = true;
        for (int32_t o = 0; o < n->n_out; o++) canon[n->out[o]] = canon[m->out[o]];
        break;
      }
      if (!merged[node]) table[slot] = node;
    }
  }
  free(table);
  return dead_nodes(pp, merged, canon);
}

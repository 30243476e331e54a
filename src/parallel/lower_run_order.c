/*
 * The order each device's program runs in (lower_internal.h,
 * lower_run_order). The session compiles a device's program with the
 * fusion plan's execution order (fusion/plan_merge.c, unit_key): comm ops
 * stay where the plan put them and nothing crosses one, but between two
 * comm ops whatever reads a collective's output (not a transfer's) waits
 * until nothing else is ready, so the collective overlaps the compute that
 * does not need it. The lowering writes each device's order that way
 * itself, so the program it prints, its peak memory and the simulator's
 * timeline are of the order that runs (the runtime's sort then leaves it
 * as it is). Each stretch between two comm ops is sorted topologically,
 * ready nodes by position, those that read a collective's output after
 * every ready one that does not.
 */
#include "parallel/lower_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

typedef struct scratch {
  int32_t *at; /* per node: its position in the stretch being sorted, else -1 */
  bool *late;  /* per position */
  int32_t *indeg, *cons_off, *cons, *fill; /* per position; cons per edge */
  lower_entry *heap;                       /* per position */
} scratch;

/* Sorts one stretch of n nodes into out. */
static void sort_stretch(const loom_graph *G, const int32_t *nodes, int32_t n, scratch *w,
                         int32_t *out) {
  for (int32_t i = 0; i < n; i++)
    w->at[nodes[i]] = i;
  memset(w->cons_off, 0, sizeof *w->cons_off * (size_t)(n + 1));
  for (int32_t i = 0; i < n; i++) {
    const loom_node *nd = &G->nodes[nodes[i]];
    w->late[i] = false, w->indeg[i] = 0;
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t p = G->values[nd->in[k]].node;
      if (p < 0) continue;
      w->late[i] |= loom_op_is_collective(G->nodes[p].op);
      if (w->at[p] >= 0 && w->at[p] < i) w->indeg[i]++, w->cons_off[w->at[p] + 1]++;
    }
  }
  for (int32_t i = 0; i < n; i++)
    w->cons_off[i + 1] += w->cons_off[i];
  int32_t *fill = w->fill;
  for (int32_t i = 0; i < n; i++)
    fill[i] = w->cons_off[i];
  for (int32_t i = 0; i < n; i++) {
    const loom_node *nd = &G->nodes[nodes[i]];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t p = G->values[nd->in[k]].node;
      if (p >= 0 && w->at[p] >= 0 && w->at[p] < i) w->cons[fill[w->at[p]]++] = i;
    }
  }
  /* ready nodes by (late, position) */
  lower_heap h = {w->heap, 0};
  int32_t k = 0;
  for (int32_t i = 0; i < n; i++)
    if (w->indeg[i] == 0) lower_heap_push(&h, (lower_entry){w->late[i], 0, i, 0, 0});
  while (h.n > 0) {
    int32_t i = lower_heap_pop(&h).node;
    out[k++] = nodes[i];
    for (int32_t e = w->cons_off[i]; e < w->cons_off[i + 1]; e++) {
      int32_t c = w->cons[e];
      if (--w->indeg[c] == 0) lower_heap_push(&h, (lower_entry){w->late[c], 0, c, 0, 0});
    }
  }
  for (int32_t i = 0; i < n; i++)
    w->at[nodes[i]] = -1;
}

loom_status lower_run_order(loom_plan_program *pp) {
  const loom_graph *G = pp->global;
  int32_t total = pp->order_start[pp->n_devices];
  int64_t edges = 0;
  for (int32_t i = 0; i < total; i++)
    edges += G->nodes[pp->order_nodes[i]].n_in;
  size_t np = (size_t)total + 1;
  int32_t *order = loom_malloc(pp->ctx, sizeof *order * np);
  scratch w = {loom_malloc(pp->ctx, sizeof *w.at * (size_t)(G->n_nodes ? G->n_nodes : 1)),
               loom_malloc(pp->ctx, sizeof *w.late * np),
               loom_malloc(pp->ctx, sizeof *w.indeg * np),
               loom_malloc(pp->ctx, sizeof *w.cons_off * (np + 1)),
               loom_malloc(pp->ctx, sizeof *w.cons * (size_t)(edges + 1)),
               loom_malloc(pp->ctx, sizeof *w.fill * np),
               loom_malloc(pp->ctx, sizeof *w.heap * np)};
  loom_status st = order && w.at && w.late && w.indeg && w.cons_off && w.cons && w.fill && w.heap
                       ? LOOM_STATUS_OK
                       : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    for (int32_t n = 0; n < G->n_nodes; n++)
      w.at[n] = -1;
    for (int32_t d = 0; d < pp->n_devices; d++) {
      int32_t a = pp->order_start[d];
      for (int32_t i = a; i <= pp->order_start[d + 1]; i++) {
        bool end = i == pp->order_start[d + 1];
        if (!end && !loom_op_is_comm(G->nodes[pp->order_nodes[i]].op)) continue;
        sort_stretch(G, pp->order_nodes + a, i - a, &w, order + a);
        if (!end) order[i] = pp->order_nodes[i];
        a = i + 1;
      }
    }
    memcpy(pp->order_nodes, order, sizeof *order * (size_t)total);
  }
  free(order), free(w.at), free(w.late), free(w.indeg), free(w.cons_off), free(w.cons);
  free(w.fill), free(w.heap);
  return st;
}

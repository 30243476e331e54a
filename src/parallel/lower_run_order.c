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

typedef struct stretch {
  const int32_t *nodes; /* the stretch's nodes, in the plan's order */
  int32_t n;
  const bool *late; /* per position in the stretch */
} stretch;

static int32_t key(const stretch *s, int32_t i) { return s->late[i] ? s->n + i : i; }

static void heap_push(const stretch *s, int32_t *h, int32_t *n, int32_t x) {
  int32_t i = (*n)++;
  for (; i > 0 && key(s, h[(i - 1) / 2]) > key(s, x); i = (i - 1) / 2)
    h[i] = h[(i - 1) / 2];
  h[i] = x;
}

static int32_t heap_pop(const stretch *s, int32_t *h, int32_t *n) {
  int32_t top = h[0], x = h[--(*n)], i = 0;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && key(s, h[c + 1]) < key(s, h[c])) c++;
    if (key(s, h[c]) >= key(s, x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = x;
  return top;
}

typedef struct scratch {
  int32_t *at; /* per node: its position in the stretch being sorted, else -1 */
  bool *late;  /* per position */
  int32_t *indeg, *cons_off, *cons, *heap; /* per position; cons per edge */
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
      loom_op op = G->nodes[p].op;
      w->late[i] |= loom_op_is_comm(op) && op != LOOM_OP_TRANSFER;
      if (w->at[p] >= 0 && w->at[p] < i) w->indeg[i]++, w->cons_off[w->at[p] + 1]++;
    }
  }
  for (int32_t i = 0; i < n; i++)
    w->cons_off[i + 1] += w->cons_off[i];
  int32_t *fill = w->heap; /* free until the sort starts */
  for (int32_t i = 0; i < n; i++)
    fill[i] = w->cons_off[i];
  for (int32_t i = 0; i < n; i++) {
    const loom_node *nd = &G->nodes[nodes[i]];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t p = G->values[nd->in[k]].node;
      if (p >= 0 && w->at[p] >= 0 && w->at[p] < i) w->cons[fill[w->at[p]]++] = i;
    }
  }
  stretch s = {nodes, n, w->late};
  int32_t nh = 0, k = 0;
  for (int32_t i = 0; i < n; i++)
    if (w->indeg[i] == 0) heap_push(&s, w->heap, &nh, i);
  while (nh > 0) {
    int32_t i = heap_pop(&s, w->heap, &nh);
    out[k++] = nodes[i];
    for (int32_t e = w->cons_off[i]; e < w->cons_off[i + 1]; e++)
      if (--w->indeg[w->cons[e]] == 0) heap_push(&s, w->heap, &nh, w->cons[e]);
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
               loom_malloc(pp->ctx, sizeof *w.heap * np)};
  loom_status st = order && w.at && w.late && w.indeg && w.cons_off && w.cons && w.heap
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
  free(order), free(w.at), free(w.late), free(w.indeg), free(w.cons_off), free(w.cons),
      free(w.heap);
  return st;
}

/*
 * The execution order's list schedule (lower_internal.h, lower_schedule):
 * Kahn's sort, taking next the ready node that could start first on a
 * rough clock of every device's compute lane and comm lane.
 *
 * A device runs its compute nodes in order on one lane and its comm ops,
 * first in first out, on another (the runtime's comm stream); a comm op
 * starts when its inputs exist and every member's comm lane is free.
 * Among a device's compute nodes whose inputs exist when its lane frees,
 * the lowest id (the walk's emission order) goes first, as in a plain
 * topological sort; a comm op goes before compute that could start at the
 * same moment, so that its messages are in flight while that compute
 * runs (docs/PARALLEL.md, "Overlapping communication").
 *
 * Why a clock: the order is one sequence for all devices, and each
 * device's comm ops run in that sequence. Sorted by emission alone, a
 * device's comm ops took their places as the walk emitted the work
 * around them, not as the devices would reach them: in tp2xpp2 the last
 * stage's receive of the second micro-batch came before the first micro-
 * batch's tensor-parallel collectives, so its comm stream held them until
 * the first stage had run both forwards and the stages never overlapped;
 * pp4's stages waited the same way (docs/PARALLEL.md, "Execution order").
 *
 * Per device, ready compute nodes wait in `pend` (by the time their
 * inputs exist) until the lane's clock passes it, then in `avail` (by
 * id); the device offers one candidate to the global heap, which also
 * holds the ready comm ops and host nodes. A candidate is stale once its
 * device's version moves on; a comm op whose members' lanes moved on is
 * put back with its later start. Each step is O(log n).
 */
#include "parallel/lower_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* The clock's nominal rates; only their ratios matter. */
#define ORDER_FLOPS_PER_S 1e11
#define ORDER_BYTES_PER_S 2e10
#define ORDER_COMM_BYTES_PER_S 5e9
#define ORDER_COMM_LATENCY_S 1e-5

enum { ON_HOST = -2, ON_COMM = -1 }; /* lower_entry.dev for what no one device runs */

static bool before(lower_entry a, lower_entry b) {
  if (a.t != b.t) return a.t < b.t;
  if (a.tie != b.tie) return a.tie < b.tie;
  return a.node < b.node;
}

void lower_heap_push(lower_heap *h, lower_entry x) {
  int32_t i = h->n++;
  for (; i > 0 && before(x, h->v[(i - 1) / 2]); i = (i - 1) / 2)
    h->v[i] = h->v[(i - 1) / 2];
  h->v[i] = x;
}

lower_entry lower_heap_pop(lower_heap *h) {
  lower_entry top = h->v[0], x = h->v[--h->n];
  int32_t i = 0;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && before(h->v[c + 1], h->v[c])) c++;
    if (!before(h->v[c], x)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n > 0) h->v[i] = x;
  return top;
}

typedef struct sched {
  const loom_plan_program *pp;
  double *lane, *comm_lane; /* per device: when its compute / comm lane is free */
  double *ready_at;         /* per node: when its inputs (and order edges) are done */
  lower_heap *pend, *avail; /* per device */
  int32_t *version;         /* per device: of its candidate in `all` */
  lower_heap all;
} sched;

/* The device a compute node runs on, ON_COMM or ON_HOST. */
static int32_t node_dev(const loom_plan_program *pp, int32_t x) {
  if (loom_op_is_comm(pp->global->nodes[x].op)) return ON_COMM;
  return pp->node_device[x] >= 0 ? pp->node_device[x] : ON_HOST;
}

/* The members of the comm op at node x: *n of them. */
static const int32_t *comm_members(const loom_plan_program *pp, int32_t x, int32_t *n) {
  int32_t c = lower_comm_index(pp, x);
  if (c < 0) return *n = 0, NULL;
  return lower_comm_members(pp, c, n);
}

/* Seconds node x takes on the clock. */
static double cost(const loom_plan_program *pp, int32_t x) {
  const loom_graph *G = pp->global;
  const loom_node *n = &G->nodes[x];
  if (loom_op_is_comm(n->op)) {
    int32_t c = lower_comm_index(pp, x);
    double bytes = c >= 0 && pp->comms[c].bytes > 0 ? (double)pp->comms[c].bytes : 0;
    return ORDER_COMM_LATENCY_S + bytes / ORDER_COMM_BYTES_PER_S;
  }
  double bytes = 0;
  for (int32_t k = 0; k < n->n_in; k++)
    bytes += (double)lower_value_bytes(G, n->in[k]);
  for (int32_t o = 0; o < n->n_out; o++)
    bytes += (double)lower_value_bytes(G, n->out[o]);
  return loom_plan_node_flops(G, n) / ORDER_FLOPS_PER_S + bytes / ORDER_BYTES_PER_S;
}

static double comm_start(const sched *s, int32_t x) {
  int32_t nm;
  const int32_t *m = comm_members(s->pp, x, &nm);
  double t = s->ready_at[x];
  for (int32_t j = 0; j < nm; j++)
    t = t > s->comm_lane[m[j]] ? t : s->comm_lane[m[j]];
  return t;
}

/* Device d's next candidate into `all` (the one before it goes stale). */
static void offer(sched *s, int32_t d) {
  lower_heap *pend = &s->pend[d], *avail = &s->avail[d];
  while (pend->n && pend->v[0].t <= s->lane[d])
    lower_heap_push(avail, (lower_entry){0, 1, lower_heap_pop(pend).node, d, 0});
  double t = s->lane[d];
  if (!avail->n) {
    if (!pend->n) return;
    t = pend->v[0].t;
    while (pend->n && pend->v[0].t <= t)
      lower_heap_push(avail, (lower_entry){0, 1, lower_heap_pop(pend).node, d, 0});
  }
  lower_heap_push(&s->all, (lower_entry){t, 1, avail->v[0].node, d, ++s->version[d]});
}

/* Node x's inputs are all done: it joins its device's queue or `all`. */
static void make_ready(sched *s, int32_t x) {
  int32_t d = node_dev(s->pp, x);
  if (d == ON_COMM)
    lower_heap_push(&s->all, (lower_entry){comm_start(s, x), 0, x, ON_COMM, 0});
  else if (d == ON_HOST)
    lower_heap_push(&s->all, (lower_entry){s->ready_at[x], 1, x, ON_HOST, 0});
  else {
    lower_heap_push(&s->pend[d], (lower_entry){s->ready_at[x], 1, x, d, 0});
    offer(s, d);
  }
}

int32_t lower_schedule(const loom_plan_program *pp, const int32_t *succ_start, const int32_t *succ,
                       int32_t *indeg, int32_t *sorted) {
  const loom_graph *G = pp->global;
  int32_t nn = G->n_nodes, nd = pp->n_devices > 0 ? pp->n_devices : 1, n_sorted = 0;
  size_t nodes = (size_t)(nn ? nn : 1), devs = (size_t)nd;
  sched s = {.pp = pp,
             .lane = calloc(devs, sizeof(double)),
             .comm_lane = calloc(devs, sizeof(double)),
             .ready_at = calloc(nodes, sizeof(double)),
             .pend = calloc(devs, sizeof(lower_heap)),
             .avail = calloc(devs, sizeof(lower_heap)),
             .version = calloc(devs, sizeof(int32_t)),
             .all = {malloc(sizeof(lower_entry) * (3 * nodes + devs)), 0}};
  /* `all` holds each node once and each offer (two a compute node at
   * most) until popped; the device queues share two arrays, sliced by
   * each device's nodes */
  int32_t *count = calloc(devs + 1, sizeof *count);
  lower_entry *pend_v = malloc(sizeof(lower_entry) * nodes),
              *avail_v = malloc(sizeof(lower_entry) * nodes);
  bool ok = s.lane && s.comm_lane && s.ready_at && s.pend && s.avail && s.version && s.all.v &&
            count && pend_v && avail_v;
  if (ok) {
    for (int32_t x = 0; x < nn; x++)
      if (node_dev(pp, x) >= 0) count[node_dev(pp, x) + 1]++;
    for (int32_t d = 0; d < nd; d++) {
      count[d + 1] += count[d];
      s.pend[d].v = pend_v + count[d], s.avail[d].v = avail_v + count[d];
    }
    for (int32_t x = 0; x < nn; x++)
      if (!indeg[x]) make_ready(&s, x);
    while (s.all.n) {
      lower_entry e = lower_heap_pop(&s.all);
      if (e.dev >= 0 && e.version != s.version[e.dev]) continue; /* stale */
      if (e.dev == ON_COMM) {
        double t = comm_start(&s, e.node);
        if (t > e.t) { /* a member's lane moved on since: back in line */
          e.t = t;
          lower_heap_push(&s.all, e);
          continue;
        }
      }
      int32_t x = e.dev >= 0 ? lower_heap_pop(&s.avail[e.dev]).node : e.node;
      double end = e.t + cost(pp, x);
      sorted[n_sorted++] = x;
      if (e.dev >= 0) s.lane[e.dev] = end;
      if (e.dev == ON_COMM) {
        int32_t nm;
        const int32_t *m = comm_members(pp, x, &nm);
        for (int32_t j = 0; j < nm; j++)
          s.comm_lane[m[j]] = end;
      }
      for (int32_t k = succ_start[x]; k < succ_start[x + 1]; k++) {
        int32_t y = succ[k];
        if (s.ready_at[y] < end) s.ready_at[y] = end;
        if (--indeg[y] == 0) make_ready(&s, y);
      }
      if (e.dev >= 0) offer(&s, e.dev);
    }
  }
  free(s.lane), free(s.comm_lane), free(s.ready_at), free(s.pend), free(s.avail);
  free(s.version), free(s.all.v), free(count), free(pend_v), free(avail_v);
  return ok ? n_sorted : -1;
}

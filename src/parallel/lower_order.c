/*
 * After the walk: one execution order for all devices (the data edges and
 * the plan's op_order edges, sorted topologically as a list schedule:
 * lower_schedule.c), which is also the deadlock check — a comm op is in
 * the order of each of its members, so members meet every collective in
 * the same order, and an order that cannot be met is a cycle found here.
 * Then each device's counts: FLOPs, bytes sent per comm op, peak memory.
 */
#include "parallel/lower_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t lower_comm_index(const loom_plan_program *pp, int32_t node) {
  int32_t lo = 0, hi = pp->n_comms - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    if (pp->comms[mid].node == node) return mid;
    if (pp->comms[mid].node < node) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

const int32_t *lower_comm_members(const loom_plan_program *pp, int32_t c, int32_t *n) {
  int32_t g = pp->comms[c].group;
  *n = pp->group_start[g + 1] - pp->group_start[g];
  return pp->group_ranks + pp->group_start[g];
}

/* The devices a global node runs on: its own, or its comm group. */
static int32_t node_members(const loom_plan_program *pp, int32_t node, const int32_t **members,
                            int32_t *one) {
  if (pp->node_subop[node] == LOWER_HOST) return 0;
  if (pp->node_device[node] >= 0) {
    *one = pp->node_device[node];
    *members = one;
    return 1;
  }
  int32_t c = lower_comm_index(pp, node), n = 0;
  if (c >= 0) *members = lower_comm_members(pp, c, &n);
  return n;
}

double loom_plan_node_flops(const loom_graph *g, const loom_node *n) {
  if (n->n_out < 1) return 0;
  const loom_type *o = loom_value_type(g, n->out[0]);
  double numel = (double)loom_type_numel(o);
  if (n->op == LOOM_OP_MATMUL) {
    const loom_type *a = loom_value_type(g, n->in[0]);
    int64_t k = LOOM_ATTR_I(n, matmul, trans_a) ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    return 2.0 * numel * (double)k;
  }
  if (n->op == LOOM_OP_FLASH_ATTENTION || n->op == LOOM_OP_FLASH_ATTENTION_GRAD) {
    /* q [B, H, T, dh]: QK^T and PV, twice that backward */
    const loom_type *q = loom_value_type(g, n->in[0]);
    double t = (double)q->shape[q->rank - 2];
    double f = 4.0 * (double)loom_type_numel(q) * t;
    return n->op == LOOM_OP_FLASH_ATTENTION ? f : 2.0 * f;
  }
  const loom_op_def *d = loom_op_get(n->op);
  return d->cls == LOOM_OPCLASS_COMM || d->cls == LOOM_OPCLASS_LAYOUT ? 0.0 : numel;
}

int64_t lower_value_bytes(const loom_graph *g, int32_t v) {
  const loom_type *t = loom_value_type(g, v);
  return loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
}

/* Peak bytes of device d's values over its order: a value lives from its
 * node to its last use on d; pieces of inputs and outputs for the whole
 * step. */
static int64_t device_peak(const loom_plan_program *pp, int32_t d, int32_t *last, int64_t *base) {
  const loom_graph *G = pp->global;
  int32_t a = pp->order_start[d], b = pp->order_start[d + 1];
  for (int32_t i = a; i < b; i++) {
    const loom_node *n = &G->nodes[pp->order_nodes[i]];
    for (int32_t k = 0; k < n->n_in; k++) last[n->in[k]] = i;
  }
  bool *is_out = calloc((size_t)G->n_values, sizeof *is_out);
  if (!is_out) return -1;
  for (int32_t k = 0; k < pp->n_outs; k++)
    if (pp->outs[k].device == d) is_out[pp->outs[k].value] = true;
  int64_t live = 0, peak = 0, held = 0;
  for (int32_t i = a; i < b; i++) {
    int32_t node = pp->order_nodes[i];
    const loom_node *n = &G->nodes[node];
    for (int32_t o = 0; o < n->n_out; o++) {
      int32_t v = n->out[o];
      if (pp->value_device[v] != d) continue;
      int64_t bytes = lower_value_bytes(G, v);
      if (pp->node_subop[node] == LOWER_FEED || is_out[v]) held += bytes;
      else live += bytes;
    }
    if (held + live > peak) peak = held + live;
    for (int32_t k = 0; k < n->n_in; k++) {
      int32_t v = n->in[k];
      bool first = true;
      for (int32_t j = 0; j < k; j++) first &= n->in[j] != v;
      if (!first || last[v] != i || pp->value_device[v] != d) continue;
      bool feed_or_out = is_out[v];
      int32_t prod = G->values[v].node;
      if (prod >= 0 && pp->node_subop[prod] == LOWER_FEED) feed_or_out = true;
      if (!feed_or_out) live -= lower_value_bytes(G, v);
    }
  }
  free(is_out);
  *base = held;
  return peak;
}

/* Numbers the comm ops in execution order (they were numbered as they
 * were emitted): every member runs its comm ops in seq order, which the
 * matching check and the tags (comm.h, loom_comm_seq_tag) rely on. */
static void renumber_comms(loom_plan_program *pp, const int32_t *sorted) {
  loom_graph *G = pp->global;
  int32_t seq = 0;
  for (int32_t i = 0; i < G->n_nodes; i++) {
    loom_node *n = &G->nodes[sorted[i]];
    int32_t c = loom_op_is_comm(n->op) ? lower_comm_index(pp, sorted[i]) : -1;
    if (c < 0) continue;
    pp->comms[c].seq = seq;
    loom_comm_op_set_seq(n->op, n->attr, seq++);
  }
}

loom_status lower_sort(lower_walk *w, int32_t **sorted_out, int32_t **succ_start,
                       int32_t **succ) {
  loom_plan_program *pp = w->pp;
  const loom_plan *p = w->p;
  const loom_graph *G = pp->global;
  int32_t nn = G->n_nodes;
  *sorted_out = NULL;
  if (succ_start) *succ_start = *succ = NULL;
  /* edges: data (producer -> consumer) and op_order (sub-op nodes) */
  int32_t n_edges = 0;
  for (int32_t i = 0; i < nn; i++) n_edges += G->nodes[i].n_in;
  n_edges += p->n_orders;
  int32_t *start = loom_calloc(w->ctx, (size_t)nn + 1, sizeof *start);
  int32_t *to = loom_malloc(w->ctx, sizeof *to * (size_t)(n_edges ? n_edges : 1));
  int32_t *indeg = loom_calloc(w->ctx, (size_t)(nn ? nn : 1), sizeof *indeg);
  int32_t *of_subop = loom_malloc(w->ctx, sizeof *of_subop * (size_t)(p->n_subops ? p->n_subops : 1));
  int32_t *sorted = loom_malloc(w->ctx, sizeof *sorted * (size_t)(nn ? nn : 1));
  loom_status st = LOOM_STATUS_OK;
  if (!start || !to || !indeg || !of_subop || !sorted) st = LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    for (int32_t s = 0; s < p->n_subops; s++) of_subop[s] = -1;
    for (int32_t i = 0; i < nn; i++)
      if (pp->node_subop[i] >= 0) of_subop[pp->node_subop[i]] = i;
    /* count, then fill (CSR by source) */
    for (int32_t i = 0; i < nn; i++)
      for (int32_t k = 0; k < G->nodes[i].n_in; k++) {
        int32_t src = G->values[G->nodes[i].in[k]].node;
        if (src >= 0) start[src + 1]++;
      }
    for (int32_t e = 0; e < p->n_orders; e++) {
      int32_t a = of_subop[p->orders[e].before];
      if (a >= 0 && of_subop[p->orders[e].after] >= 0) start[a + 1]++;
    }
    for (int32_t i = 0; i < nn; i++) start[i + 1] += start[i];
    int32_t *fill = loom_calloc(w->ctx, (size_t)(nn ? nn : 1), sizeof *fill);
    if (!fill) st = LOOM_STATUS_OUT_OF_MEMORY;
    for (int32_t i = 0; !st && i < nn; i++)
      for (int32_t k = 0; k < G->nodes[i].n_in; k++) {
        int32_t src = G->values[G->nodes[i].in[k]].node;
        if (src < 0) continue;
        to[start[src] + fill[src]++] = i;
        indeg[i]++;
      }
    for (int32_t e = 0; !st && e < p->n_orders; e++) {
      int32_t a = of_subop[p->orders[e].before], b = of_subop[p->orders[e].after];
      if (a < 0 || b < 0) continue;
      to[start[a] + fill[a]++] = b;
      indeg[b]++;
    }
    free(fill);
  }
  int32_t n_sorted = 0;
  if (!st) {
    n_sorted = lower_schedule(pp, start, to, indeg, sorted);
    if (n_sorted < 0) st = LOOM_STATUS_OUT_OF_MEMORY;
    if (!st && n_sorted < nn) {
      /* an op_order edge whose ends never ran: it closes the cycle */
      for (int32_t e = 0; e < p->n_orders; e++) {
        int32_t a = of_subop[p->orders[e].before], b = of_subop[p->orders[e].after];
        if (a < 0 || b < 0 || indeg[b] == 0) continue;
        char na[96], nb[96];
        st = loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: op_order(%s, %s) on device %d deadlocks: %s needs, through its "
                        "data dependencies, what %s computes after it",
                        loom_subop_name(p, p->orders[e].before, na, sizeof na),
                        loom_subop_name(p, p->orders[e].after, nb, sizeof nb),
                        p->subops[p->orders[e].before].device, na, nb);
        break;
      }
      if (!st)
        st = loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: the orders and the data dependencies form a cycle (a deadlock)");
    }
  }
  free(indeg);
  free(of_subop);
  if (!st && succ_start) {
    *succ_start = start;
    *succ = to;
  } else {
    free(start);
    free(to);
  }
  if (st) free(sorted);
  else *sorted_out = sorted;
  return st;
}

static loom_status order_and_check(lower_walk *w) {
  loom_plan_program *pp = w->pp;
  int32_t nn = pp->global->n_nodes;
  int32_t *sorted = NULL;
  loom_status st = lower_sort(w, &sorted, NULL, NULL);
  if (!st) renumber_comms(pp, sorted);
  /* per-device lists */
  if (!st) {
    pp->order_start = loom_calloc(w->ctx, (size_t)pp->n_devices + 1, sizeof *pp->order_start);
    if (!pp->order_start) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t total = 0;
  for (int32_t i = 0; !st && i < nn; i++) {
    const int32_t *m;
    int32_t one, k = node_members(pp, sorted[i], &m, &one);
    for (int32_t j = 0; j < k; j++) pp->order_start[m[j] + 1]++;
    total += k;
  }
  if (!st) {
    for (int32_t d = 0; d < pp->n_devices; d++) pp->order_start[d + 1] += pp->order_start[d];
    pp->order_nodes = loom_malloc(w->ctx, sizeof *pp->order_nodes * (size_t)(total ? total : 1));
    if (!pp->order_nodes) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  if (!st) {
    int32_t *fill = loom_calloc(w->ctx, (size_t)pp->n_devices, sizeof *fill);
    if (!fill) st = LOOM_STATUS_OUT_OF_MEMORY;
    for (int32_t i = 0; !st && i < nn; i++) {
      const int32_t *m;
      int32_t one, k = node_members(pp, sorted[i], &m, &one);
      for (int32_t j = 0; j < k; j++) pp->order_nodes[pp->order_start[m[j]] + fill[m[j]]++] = sorted[i];
    }
    free(fill);
  }
  free(sorted);
  return st ? st : lower_run_order(pp);
}

static loom_status count(lower_walk *w) {
  loom_plan_program *pp = w->pp;
  const loom_graph *G = pp->global;
  pp->stats = loom_calloc(w->ctx, (size_t)pp->n_devices, sizeof *pp->stats);
  int32_t *last = loom_malloc(w->ctx, sizeof *last * (size_t)(G->n_values ? G->n_values : 1));
  if (!pp->stats || !last) {
    free(last);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t d = 0; d < pp->n_devices; d++) {
    loom_plan_device_stats *s = &pp->stats[d];
    for (int32_t i = pp->order_start[d]; i < pp->order_start[d + 1]; i++) {
      int32_t node = pp->order_nodes[i];
      if (pp->node_device[node] >= 0) {
        s->n_nodes++;
        s->flops += loom_plan_node_flops(G, &G->nodes[node]);
      }
    }
    int64_t held = 0;
    s->peak_bytes = device_peak(pp, d, last, &held);
    for (int32_t k = 0; k < pp->n_ins; k++)
      if (pp->ins[k].device == d) s->input_bytes += lower_value_bytes(G, pp->ins[k].value);
  }
  free(last);
  for (int32_t c = 0; c < pp->n_comms; c++) {
    const loom_plan_comm *cm = &pp->comms[c];
    const int32_t *m = pp->group_ranks + pp->group_start[cm->group];
    int32_t n = pp->group_start[cm->group + 1] - pp->group_start[cm->group];
    for (int32_t j = 0; j < n; j++) {
      pp->stats[m[j]].n_comms++;
      /* a transfer and a broadcast: only the source sends */
      bool sends = (cm->op != LOOM_OP_TRANSFER && cm->op != LOOM_OP_BROADCAST) || j == 0;
      if (sends) pp->stats[m[j]].comm_bytes[cm->op] += cm->bytes;
    }
  }
  if (w->o.memory_limit > 0)
    for (int32_t d = 0; d < pp->n_devices; d++)
      if (pp->stats[d].peak_bytes > w->o.memory_limit)
        return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY,
                          "plan: device %d needs %.2f MiB at its peak (%.2f MiB of it inputs it "
                          "holds), more than the memory limit of %.2f MiB",
                          d, (double)pp->stats[d].peak_bytes / 1048576.0,
                          (double)pp->stats[d].input_bytes / 1048576.0,
                          (double)w->o.memory_limit / 1048576.0);
  return LOOM_STATUS_OK;
}

loom_status lower_finish(lower_walk *w) {
  LOOM_TRY(order_and_check(w));
  return count(w);
}

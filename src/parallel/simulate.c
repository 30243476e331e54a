/*
 * The simulator (simulate.h): every device's program walked in order, a
 * comm op timed once all its members have reached it.
 */
#include "parallel/simulate.h"

#include "comm/comm.h"
#include "fusion/fusion.h"
#include "ir/dtype.h"
#include "ops/op.h"
#include "parallel/lower_internal.h"
#include "parallel/simulate_merge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_GEMM_EFFICIENCY 0.75
#define DEFAULT_MEMORY_EFFICIENCY 0.8
/* A GEMM's efficiency falls with its smallest dim s as s / (s + H): by
 * default half the rate at 32 (a matrix-vector product is memory-bound
 * anyway); a cluster file may give H as gemm.half_dim. */
#define DEFAULT_HALF_DIM 32.0

typedef struct sim {
  const loom_plan_program *pp;
  const loom_sim_options *o;
  const loom_cluster *c;
  double gemm_eff, mem_eff, rate;
  double half_dim; /* a GEMM whose smallest dim is s runs at s / (s + half_dim) */
  double attn_eff; /* fused attention's fraction of the rate (0: as a GEMM) */
  const struct fusion_view *fusion; /* NULL: every node its own kernel */
  /* per device (loom_plan_simulate): its last compute position in
   * order_nodes and the seconds it then spends copying out its updated
   * state (NULL: none) */
  const int32_t *last_compute;
  const double *copy_out_s;
  const bool *merged; /* per node: the runtime's simplify merges it (NULL: none) */
} sim;

static double elem_bytes(const sim *s, const loom_type *t) {
  return s->o->element_bytes > 0 ? s->o->element_bytes : (double)loom_dtype_size(t->dtype);
}

static double value_bytes(const sim *s, const loom_graph *G, int32_t v) {
  const loom_type *t = loom_value_type(G, v);
  return (double)loom_type_numel(t) * elem_bytes(s, t);
}

/* Stitching as the simulator sees it: on each device, fusible nodes that
 * a value joins, with no GEMM, attention, comm op or eager node between
 * them in the device's order, are one kernel; only the values that cross
 * a kernel's edge move through memory, and a kernel pays one launch. */
typedef struct fusion_view {
  const int32_t *canon; /* per value: the value it is after merging (NULL: itself) */
  int32_t *root;     /* per node: its kernel's representative, -1 if not fused */
  bool *spills;      /* per value: read outside its kernel, or a graph output */
  bool *launches;    /* per node: the first of its kernel in order */
} fusion_view;

static void fusion_view_free(fusion_view *f) {
  free(f->root);
  free(f->spills);
  free(f->launches);
}

/* The node that makes value v, after merging (-1: an input). */
static int32_t producer(const fusion_view *f, const loom_graph *G, int32_t v) {
  return G->values[f && f->canon ? f->canon[v] : v].node;
}

static int32_t find_root(int32_t *root, int32_t n) {
  while (root[n] != n) n = root[n] = root[root[n]];
  return n;
}

/* orders: n_orders lists of nodes (order_nodes[order_start[d] ..
 * order_start[d + 1]]), each one device's execution order; skip[node]
 * (may be NULL) marks nodes that are not kernels (a device's pieces of
 * the inputs); merged[node] (may be NULL) those the runtime merges into
 * an earlier node (simulate_merge.h), which neither join a kernel nor
 * end one, their values read as f->canon's. */
static loom_status fusion_view_build(loom_ctx *ctx, const loom_graph *G, int32_t n_orders,
                                     const int32_t *order_start, const int32_t *order_nodes,
                                     const bool *skip, const bool *merged, fusion_view *f) {
  int32_t nn = G->n_nodes, nv = G->n_values;
  f->root = loom_malloc(ctx, sizeof *f->root * (size_t)(nn ? nn : 1));
  f->spills = loom_calloc(ctx, (size_t)(nv ? nv : 1), sizeof *f->spills);
  f->launches = loom_calloc(ctx, (size_t)(nn ? nn : 1), sizeof *f->launches);
  int32_t *phase = loom_malloc(ctx, sizeof *phase * (size_t)(nn ? nn : 1));
  int32_t *device = loom_malloc(ctx, sizeof *device * (size_t)(nn ? nn : 1));
  bool *seen = loom_calloc(ctx, (size_t)(nn ? nn : 1), sizeof *seen);
  if (!f->root || !f->spills || !f->launches || !phase || !device || !seen) {
    free(phase);
    free(device);
    free(seen);
    fusion_view_free(f);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t n = 0; n < nn; n++) f->root[n] = -1, device[n] = -1;
  for (int32_t d = 0; d < n_orders; d++) {
    int32_t at = 0;
    for (int32_t i = order_start[d]; i < order_start[d + 1]; i++) {
      int32_t n = order_nodes[i];
      device[n] = d;
      if (merged && merged[n]) {
        phase[n] = at; /* no kernel: its values are an earlier node's */
        continue;
      }
      bool fused = !(skip && skip[n]) && loom_fusion_node_fusible(G, n);
      f->root[n] = fused ? n : -1;
      phase[n] = fused ? at : ++at;
    }
  }
  for (int32_t n = 0; n < nn; n++) {
    if (f->root[n] < 0) continue;
    for (int32_t i = 0; i < G->nodes[n].n_in; i++) {
      int32_t p = producer(f, G, G->nodes[n].in[i]);
      if (p >= 0 && f->root[p] >= 0 && device[p] == device[n] && phase[p] == phase[n])
        f->root[find_root(f->root, n)] = find_root(f->root, p);
    }
  }
  for (int32_t n = 0; n < nn; n++)
    if (f->root[n] >= 0) f->root[n] = find_root(f->root, n);
  for (int32_t n = 0; n < nn; n++) {
    if (merged && merged[n]) continue;
    for (int32_t i = 0; i < G->nodes[n].n_in; i++) {
      int32_t v = G->nodes[n].in[i], p = producer(f, G, v);
      if (p >= 0 && (f->root[n] < 0 || f->root[p] != f->root[n]))
        f->spills[f->canon ? f->canon[v] : v] = true;
    }
  }
  for (int32_t i = 0; i < G->n_outputs; i++)
    f->spills[f->canon ? f->canon[G->outputs[i]] : G->outputs[i]] = true;
  /* the first member of each kernel in its device's order pays the launch */
  for (int32_t i = 0; i < order_start[n_orders]; i++) {
    int32_t n = order_nodes[i], r = f->root[n];
    if (r >= 0 && !seen[r]) seen[r] = f->launches[n] = true;
  }
  free(seen);
  free(phase);
  free(device);
  return LOOM_STATUS_OK;
}

static double skinny_rate(const sim *s, double eff, double least) {
  return s->rate * eff * least / (least + s->half_dim);
}

/* Seconds node n of G takes on one device. */
static double node_time(const sim *s, const loom_graph *G, const loom_node *n) {
  if (n->n_out < 1 || n->op == LOOM_OP_RESHAPE) return 0; /* a view */
  double launch = s->c->kernel_launch_s, flops = loom_plan_node_flops(G, n);
  if (n->op == LOOM_OP_MATMUL) {
    const loom_type *a = loom_value_type(G, n->in[0]), *o = loom_value_type(G, n->out[0]);
    int64_t k = LOOM_ATTR_I(n, matmul, trans_a) ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    double least = (double)LOOM_MIN(k, LOOM_MIN(o->shape[o->rank - 2], o->shape[o->rank - 1]));
    return launch + flops / skinny_rate(s, s->gemm_eff, least);
  }
  if (n->op == LOOM_OP_FLASH_ATTENTION || n->op == LOOM_OP_FLASH_ATTENTION_GRAD) {
    const loom_type *q = loom_value_type(G, n->in[0]); /* [B, H, T, dh] */
    double least = (double)LOOM_MIN(q->shape[q->rank - 2], q->shape[q->rank - 1]);
    /* a measured attn.efficiency is the kernels' own, shape and all */
    double rate = s->attn_eff > 0 ? s->rate * s->attn_eff : skinny_rate(s, s->gemm_eff, least);
    return launch + flops / rate;
  }
  /* fused: only what crosses its kernel's edge, one launch per kernel */
  const fusion_view *f = s->fusion;
  int32_t self = (int32_t)(n - G->nodes), r = f ? f->root[self] : -1;
  if (r >= 0 && !f->launches[self]) launch = 0;
  double bytes = 0;
  for (int32_t i = 0; i < n->n_in; i++) {
    int32_t p = r >= 0 ? producer(f, G, n->in[i]) : -1;
    if (p < 0 || f->root[p] != r) bytes += value_bytes(s, G, n->in[i]);
  }
  for (int32_t o = 0; o < n->n_out; o++)
    if (r < 0 || f->spills[n->out[o]]) bytes += value_bytes(s, G, n->out[o]);
  double t_mem = bytes / (s->c->memory_bandwidth_Bps * s->mem_eff);
  double t_flop = flops / s->c->flops[LOOM_PRECISION_f32];
  return launch + (t_mem > t_flop ? t_mem : t_flop);
}

/* An option, else the cluster's figure, else the default. */
static double pick(double option, double cluster, double fallback) {
  return option > 0 ? option : cluster > 0 ? cluster : fallback;
}

static sim sim_make(const loom_plan_program *pp, const loom_sim_options *o) {
  const loom_cluster *c = o->cluster;
  return (sim){.pp = pp,
               .o = o,
               .c = c,
               .gemm_eff = pick(o->gemm_efficiency, c->gemm_efficiency, DEFAULT_GEMM_EFFICIENCY),
               .mem_eff = pick(o->memory_efficiency, c->memory_efficiency, DEFAULT_MEMORY_EFFICIENCY),
               .rate = c->flops[o->precision],
               .half_dim = pick(0, c->gemm_half_dim, DEFAULT_HALF_DIM),
               .attn_eff = c->attention_efficiency};
}

double loom_sim_node_seconds(const loom_graph *g, const loom_node *n, const loom_sim_options *o) {
  if (!g || !n || !o || !o->cluster) return 0;
  sim s = sim_make(NULL, o);
  return node_time(&s, g, n);
}

loom_status loom_sim_graph_seconds(loom_ctx *ctx, const loom_graph *g, const loom_sim_options *o,
                                   double *node_s) {
  if (!g || !o || !o->cluster || !node_s)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "simulate: NULL graph, options or times");
  int32_t nn = g->n_nodes, start[2] = {0, nn};
  int32_t *order = loom_malloc(ctx, sizeof *order * (size_t)(nn ? nn : 1));
  if (!order) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t n = 0; n < nn; n++) order[n] = n;
  fusion_view fv = {0};
  loom_status st = fusion_view_build(ctx, g, 1, start, order, NULL, NULL, &fv);
  free(order);
  LOOM_TRY(st);
  sim s = sim_make(NULL, o);
  s.fusion = &fv;
  for (int32_t n = 0; n < nn; n++) node_s[n] = node_time(&s, g, &g->nodes[n]);
  fusion_view_free(&fv);
  return LOOM_STATUS_OK;
}

/* Seconds a compute node of the plan takes on its device. */
static double compute_time(const sim *s, int32_t node) {
  if (s->pp->node_subop[node] == LOWER_FEED) return 0; /* pieces held */
  if (s->merged && s->merged[node]) return 0;         /* computed once already */
  return node_time(s, s->pp->global, &s->pp->global->nodes[node]);
}

/* Ring steps of a collective over n members. */
static int32_t ring_steps(loom_op op, int32_t n) {
  switch (op) {
  case LOOM_OP_ALL_REDUCE: return 2 * (n - 1);
  case LOOM_OP_TRANSFER: return 1;
  default: return n - 1;
  }
}

static double ceil_log2(int32_t n) { return ceil(log2((double)(n > 1 ? n : 1))); }

/* Bytes one member's CPU moves through memory around Loom's own
 * collectives (comm/comm.c and the device comm ops of ops/comm_ops.c),
 * besides what MPI copies: `full` is the whole tensor (an all-reduce's,
 * an all-gather's output, a reduce-scatter's input), n the members.
 * Copies count a read and a write, a reduction two reads and a write.
 *   all-reduce:     the input into the output (2), this member's block
 *                   into the parts and out of them (2/n + 2/n), the n-1
 *                   others folded in (3 (n-1)/n), this member's block into
 *                   the all-gather (2/n);
 *   all-gather:     the piece into a send buffer and into the received
 *                   blocks (2/n + 2/n), the blocks into the output (2);
 *   reduce-scatter: the input packed by member (2), then as the
 *                   all-reduce's first phase (4/n + 3 (n-1)/n);
 *   all-to-all:     packed (2), this member's block kept (2/n), the
 *                   blocks into the output (2);
 *   broadcast:      the input into the output (2);
 *   transfer:       none (sent from and received into place). */
static double local_copy_bytes(loom_op op, int32_t n, double full) {
  double k = n > 1 ? n : 1;
  switch (op) {
  case LOOM_OP_ALL_REDUCE: return full * (2 + 6 / k + 3 * (k - 1) / k);
  case LOOM_OP_ALL_GATHER: return full * (2 + 4 / k);
  case LOOM_OP_REDUCE_SCATTER: return full * (2 + 4 / k + 3 * (k - 1) / k);
  case LOOM_OP_ALL_TO_ALL: return full * (4 + 2 / k);
  case LOOM_OP_BROADCAST: return 2 * full;
  default: return 0;
  }
}

/* Seconds comm k takes once every member has reached it, by the algorithm
 * the cluster's collectives use (docs/SIMULATOR.md): `direct`, Loom's own
 * over MPI (comm/comm.c: each member sends to every other at once, an
 * all-reduce in two such phases); `nccl`, rings or, for an all-reduce,
 * a tree when it is faster, and across nodes NCCL's hierarchy (inside
 * each node, then between them over the NICs, then inside again). */
static double comm_time(const sim *s, int32_t k) {
  const loom_plan_program *pp = s->pp;
  const loom_cluster *c = s->c;
  const loom_plan_comm *cm = &pp->comms[k];
  const int32_t *m = pp->group_ranks + pp->group_start[cm->group];
  int32_t n = pp->group_start[cm->group + 1] - pp->group_start[cm->group];
  int32_t per_node = c->devices_per_node;
  /* nodes the group spans, and the most members on one of them */
  int32_t nodes = 0, most = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t here = 0;
    bool first = true;
    for (int32_t j = 0; j < n; j++) {
      here += m[j] / per_node == m[i] / per_node;
      first &= !(j < i && m[j] / per_node == m[i] / per_node);
    }
    nodes += first;
    most = here > most ? here : most;
  }
  double bw = c->intra.bandwidth_Bps, lat = c->intra.latency_s;
  double share = c->inter.bandwidth_Bps * c->inter.nics / per_node; /* a device's NIC share */
  if (nodes > 1) bw = share < bw ? share : bw, lat = c->inter.latency_s;
  const loom_type *t = loom_value_type(pp->global, pp->global->nodes[cm->node].out[0]);
  double sent = (double)cm->bytes * elem_bytes(s, t) / (double)loom_dtype_size(t->dtype);
  if (strcmp(c->collectives, "direct") == 0) {
    /* the CPU's own copies and reductions around the messages, at the
     * measured rate of a collective's copies, else the memory rate */
    double full = value_bytes(s, pp->global, pp->global->nodes[cm->node].out[0]);
    if (cm->op == LOOM_OP_REDUCE_SCATTER) full *= n;
    double copy = c->comm_copy_Bps > 0 ? c->comm_copy_Bps : c->memory_bandwidth_Bps * s->mem_eff;
    double local = local_copy_bytes(cm->op, n, full) / copy;
    return (cm->op == LOOM_OP_ALL_REDUCE ? 2 : 1) * lat + sent / bw + local;
  }
  if (cm->op == LOOM_OP_BROADCAST) /* a pipelined chain: each forwards the data once */
    return (n - 1) * lat + sent / (n > 1 ? n - 1 : 1) / bw;
  double ring = ring_steps(cm->op, n) * lat + sent / bw;
  if (cm->op != LOOM_OP_ALL_REDUCE || n < 2) return ring;
  double size = sent * n / (2.0 * (n - 1)); /* the tensor: sent = 2 (n-1)/n of it */
  /* NCCL's double binary tree: log steps, each member sending about twice the tensor */
  double tree = 2 * ceil_log2(n) * lat + 2 * size / bw;
  double best = tree < ring ? tree : ring;
  if (nodes > 1 && most > 1 && n == nodes * most) {
    /* reduce-scatter inside the node, all-reduce of a 1/most share across
     * nodes (each device over its NIC share), all-gather inside */
    double bi = c->intra.bandwidth_Bps, li = c->intra.latency_s, ge = share < bi ? share : bi;
    double inside = (most - 1) * li + size * (most - 1) / most / bi;
    double across = 2 * (nodes - 1) * c->inter.latency_s +
                    2.0 * (nodes - 1) / nodes * (size / most) / ge;
    double hier = 2 * inside + across;
    best = hier < best ? hier : best;
  }
  return best;
}

/* Roles of a device's memory (loom_sim_memory): the pieces it holds, and
 * what the runtime's arena holds. */
typedef enum role {
  ROLE_PARAMS, ROLE_OPTIMIZER, ROLE_INPUTS, /* held */
  ROLE_UPDATES, ROLE_GRADS, ROLE_COMM, ROLE_ACTIVATIONS, /* arena */
  ROLE_COUNT
} role;

/* The role of a piece of graph input `input` (held for the step). */
static role held_role(const loom_graph *G, int32_t input) {
  const loom_value_info *x = &G->values[G->inputs[input]];
  if (x->name && strncmp(x->name, "adam.", 5) == 0) return ROLE_OPTIMIZER;
  return x->kind == LOOM_VALUE_PARAM ? ROLE_PARAMS : ROLE_INPUTS;
}

/* The role of value v, made by a node of the device's program, in the
 * arena. */
static role arena_role(const loom_graph *G, int32_t v, const bool *grad) {
  const loom_node *n = &G->nodes[G->values[v].node];
  if (n->op == LOOM_OP_ADAMW) return ROLE_UPDATES;
  if (grad[v]) return ROLE_GRADS;
  return loom_op_is_comm(n->op) ? ROLE_COMM : ROLE_ACTIVATIONS;
}

/* Device d's memory by role at the moment its arena peaks. Held: its
 * pieces of the graph's inputs (pp->ins), for the whole step, counted
 * from the list of pieces rather than from the feed nodes that read them,
 * so a piece is held whether the program reads them through a node or not.
 * The arena, walked as the lowering's peak is (lower_order.c), but over
 * the program that runs: a node the runtime merges into an earlier one
 * (merged, canon: simulate_merge.h) allocates and reads nothing, and
 * the value it would make is the earlier node's, alive to the last use
 * of either; a value lives from its node to its last use on d, the
 * device's outputs to the end of the step. */
static void memory_at_peak(const loom_plan_program *pp, int32_t d, const bool *merged,
                           const int32_t *canon, int32_t *last, const bool *grad,
                           const bool *is_out, loom_sim_memory *out) {
  const loom_graph *G = pp->global;
  int64_t held[ROLE_COUNT] = {0}, live[ROLE_COUNT] = {0}, best[ROLE_COUNT] = {0};
  for (int32_t k = 0; k < pp->n_ins; k++)
    if (pp->ins[k].device == d)
      held[held_role(G, pp->ins[k].index)] += lower_value_bytes(G, pp->ins[k].value);
  int32_t a = pp->order_start[d], b = pp->order_start[d + 1];
  for (int32_t i = a; i < b; i++) {
    const loom_node *n = &G->nodes[pp->order_nodes[i]];
    for (int32_t k = 0; k < n->n_in && !merged[pp->order_nodes[i]]; k++) last[canon[n->in[k]]] = i;
  }
  int64_t peak = 0;
  for (int32_t i = a; i < b; i++) {
    int32_t node = pp->order_nodes[i];
    /* a held piece; a node that does not run, whose reads are none */
    if (pp->node_subop[node] == LOWER_FEED || merged[node]) continue;
    const loom_node *n = &G->nodes[node];
    for (int32_t o = 0; o < n->n_out; o++) {
      int32_t v = n->out[o];
      if (pp->value_device[v] == d) live[arena_role(G, v, grad)] += lower_value_bytes(G, v);
    }
    int64_t now = 0;
    for (int32_t r = ROLE_UPDATES; r < ROLE_COUNT; r++) now += live[r];
    if (now > peak) peak = now, memcpy(best, live, sizeof best);
    for (int32_t k = 0; k < n->n_in; k++) {
      int32_t v = canon[n->in[k]], prod = G->values[v].node;
      bool first = true;
      for (int32_t j = 0; j < k; j++) first &= canon[n->in[j]] != v;
      if (!first || last[v] != i || pp->value_device[v] != d || is_out[v]) continue;
      if (prod < 0 || pp->node_subop[prod] == LOWER_FEED) continue;
      live[arena_role(G, v, grad)] -= lower_value_bytes(G, v);
    }
  }
  *out = (loom_sim_memory){held[ROLE_PARAMS],  held[ROLE_OPTIMIZER], held[ROLE_INPUTS],
                           best[ROLE_UPDATES], best[ROLE_GRADS],     best[ROLE_COMM],
                           best[ROLE_ACTIVATIONS]};
}

static int64_t memory_total(const loom_sim_memory *m) {
  return m->params + m->optimizer + m->inputs + m->updates + m->grads + m->comm_buffers +
         m->activations;
}

static loom_status memory_roles(const loom_plan_program *pp, const bool *merged,
                                const int32_t *canon, loom_sim_result *r) {
  const loom_graph *G = pp->global;
  size_t nv = (size_t)(G->n_values ? G->n_values : 1);
  int32_t *last = loom_malloc(pp->ctx, sizeof *last * nv);
  bool *grad = loom_calloc(pp->ctx, nv, sizeof *grad), *is_out = loom_calloc(pp->ctx, nv, sizeof *is_out);
  loom_status st = last && grad && is_out ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t n = 0; !st && n < G->n_nodes; n++)
    if (G->nodes[n].op == LOOM_OP_ADAMW) grad[G->nodes[n].in[1]] = true;
  for (int32_t d = 0; !st && d < pp->n_devices; d++) {
    memset(is_out, 0, nv * sizeof *is_out);
    for (int32_t k = 0; k < pp->n_outs; k++)
      if (pp->outs[k].device == d) is_out[canon[pp->outs[k].value]] = true;
    memory_at_peak(pp, d, merged, canon, last, grad, is_out, &r->devices[d].at_peak);
    r->devices[d].peak_bytes = memory_total(&r->devices[d].at_peak);
  }
  free(last);
  free(grad);
  free(is_out);
  return st;
}

static loom_status check_options(loom_ctx *ctx, const loom_plan_program *pp,
                                 const loom_sim_options *o) {
  if (!o || !o->cluster)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "simulate: no cluster description");
  const loom_cluster *c = o->cluster;
  if (o->precision < 0 || o->precision >= LOOM_PRECISION_COUNT || c->flops[o->precision] <= 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "simulate: cluster %s gives no %s rate (flops.%s)", c->name,
                      loom_precision_name(o->precision), loom_precision_name(o->precision));
  int64_t nodes = (pp->n_devices + c->devices_per_node - 1) / c->devices_per_node;
  if (c->max_nodes > 0 && nodes > c->max_nodes)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "simulate: %d devices need %lld nodes of %d, and cluster %s has %d",
                      (int)pp->n_devices, (long long)nodes, (int)c->devices_per_node, c->name,
                      (int)c->max_nodes);
  if (nodes > 1 && !c->inter.kind[0])
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "simulate: %d devices span %lld nodes, and cluster %s has no network",
                      (int)pp->n_devices, (long long)nodes, c->name);
  return LOOM_STATUS_OK;
}

void loom_sim_result_free(loom_sim_result *r) {
  if (!r) return;
  free(r->devices);
  free(r->event_start);
  free(r->events);
  memset(r, 0, sizeof *r);
}

/* The timeline (docs/SIMULATOR.md): each device has a compute lane that
 * runs its program in order and a comm lane that runs the comm ops it
 * reaches, first in first out (Loom's comm stream; without overlap the
 * compute lane waits for each). Time advances from one end of a task to
 * the next. When ranks share cores, every running task (a compute node, a
 * comm op's member moving bytes) needs a core and a comm lane waiting for
 * its peers polls at wait_share of one; all tasks then progress at
 * min(1, cores / demand) of their dedicated speed. */
typedef enum lane { LANE_FREE, LANE_RUN, LANE_BLOCKED, LANE_DONE } lane;

typedef struct timeline {
  lane *compute;       /* per device */
  double *compute_left; /* dedicated seconds left of the running node */
  double *started;      /* when the running compute node started */
  int32_t *pos;         /* next program position of each compute lane */
  int32_t *fifo, *head, *tail; /* issued comm positions: fifo[order_start[d] + i] */
  bool *comm_run;
  double *comm_left, *comm_started;
  double *wait_since; /* when the comm lane's head op began waiting for its peers */
  double *ready; /* per value: when it exists (INFINITY: not yet) */
  double *pool_demand, *pool_rate; /* per core pool (core_pool) */
  double *pool_busy; /* per pool: its demand less the pollers' shares */
  double *comm_rate; /* per device: its running comm op's pace */
  double *comm_hold; /* per device: wall seconds its running comm op waits before moving bytes */
} timeline;

/* Ends device d's running compute node at `now`. */
static void timeline_end_compute(const loom_plan_program *pp, timeline *t, int32_t d, double now,
                                 loom_sim_result *out, int32_t *done) {
  int32_t node = pp->order_nodes[t->pos[d]];
  const loom_node *n = &pp->global->nodes[node];
  for (int32_t o = 0; o < n->n_out; o++) t->ready[n->out[o]] = now;
  out->events[t->pos[d]++] = (loom_sim_event){node, t->started[d], now, false};
  out->devices[d].compute_s += now - t->started[d];
  t->compute[d] = LANE_FREE, (*done)++;
}

static bool comm_inputs_ready(const loom_plan_program *pp, const timeline *t, int32_t node,
                              int32_t d, double now) {
  const loom_node *n = &pp->global->nodes[node];
  for (int32_t i = 0; i < n->n_in; i++)
    if (pp->value_device[n->in[i]] == d && t->ready[n->in[i]] > now) return false;
  return true;
}

/* How long device d's comm lane spins for the op at its head. */
static double waiting_spin_s(const loom_plan_program *pp, const timeline *t, int32_t d) {
  int32_t node = pp->order_nodes[t->fifo[pp->order_start[d] + t->head[d]]];
  int64_t bytes = pp->comms[lower_comm_index(pp, node)].bytes;
  return loom_comm_spin_seconds((size_t)(bytes > 0 ? bytes : 0));
}

/* Whether device d's comm lane, waiting for its peers, still spins at
 * `now` (comm_mpi.c), holding a core, rather than polling with pauses. */
static bool lane_spins(const sim *s, const timeline *t, int32_t d, double now) {
  return now < t->wait_since[d] + waiting_spin_s(s->pp, t, d);
}

/* How long comm op k waits, once its last member has reached it at `now`,
 * before its bytes move, for ranks that poll MPI on time-shared cores
 * (o->cores; docs/SIMULATOR.md, "Turns"): a member past its spin sleeps
 * between tests and notices on average half a pause (wait.period) late;
 * and where more ranks than cores share them, a member is on a core
 * C / D of the time (D: the cores the pool's running tasks want, each
 * member one; a poller holds no time slice and yields at once), so
 * of its n members n (1 - C / D) wait for a turn (wait.turn) in each of
 * the op's phases: those that come straight from the op before on their
 * comm lane too, since with more threads wanting cores than there are
 * they were not all on one when it ended. The longer of the two. */
static double comm_hold_s(const sim *s, const timeline *t, int32_t k, double now) {
  const loom_plan_program *pp = s->pp;
  if (s->o->cores <= 0) return 0;
  int32_t nm, nd = pp->n_devices;
  const int32_t *m = lower_comm_members(pp, k, &nm);
  double notice = 0;
  for (int32_t j = 0; j < nm; j++)
    if (now > t->wait_since[m[j]] + waiting_spin_s(pp, t, m[j])) notice = s->c->wait_period_s / 2;
  if (nd <= s->o->cores || !(s->c->wait_turn_s > 0)) return notice;
  double demand = nm;
  for (int32_t d = 0; d < nd; d++) {
    bool member = false;
    for (int32_t j = 0; j < nm && !member; j++) member = m[j] == d;
    demand += t->compute[d] == LANE_RUN;
    if (member) continue;
    if (t->comm_run[d]) demand += !(t->comm_hold[d] > 0);
    else if (t->head[d] < t->tail[d]) demand += lane_spins(s, t, d, now);
  }
  double off = nm * fmax(0, 1 - s->o->cores / demand);
  double phases = pp->comms[k].op == LOOM_OP_ALL_REDUCE ? 2 : 1;
  return fmax(notice, phases * off * s->c->wait_turn_s);
}

/* Starts what can start at `now`; true when anything changed. */
static bool timeline_settle(const sim *s, timeline *t, double now, loom_sim_result *out,
                            int32_t *done) {
  const loom_plan_program *pp = s->pp;
  const loom_graph *G = pp->global;
  bool changed = false;
  for (int32_t d = 0; d < pp->n_devices; d++) {
    while (t->compute[d] == LANE_FREE) {
      if (t->pos[d] == pp->order_start[d + 1]) {
        t->compute[d] = LANE_DONE;
        break;
      }
      int32_t node = pp->order_nodes[t->pos[d]];
      const loom_node *n = &G->nodes[node];
      if (lower_comm_index(pp, node) >= 0) { /* issue it; blocking comm waits */
        if (t->head[d] == t->tail[d] && !t->comm_run[d]) t->wait_since[d] = now;
        t->fifo[pp->order_start[d] + t->tail[d]++] = t->pos[d];
        if (s->o->overlap) t->pos[d]++;
        else t->compute[d] = LANE_BLOCKED;
        changed = true;
        continue;
      }
      bool ready = true;
      for (int32_t i = 0; i < n->n_in && ready; i++) ready = t->ready[n->in[i]] <= now;
      if (!ready) break;
      t->compute_left[d] = compute_time(s, node), t->started[d] = now;
      if (s->last_compute && t->pos[d] == s->last_compute[d]) t->compute_left[d] += s->copy_out_s[d];
      t->compute[d] = LANE_RUN;
      changed = true;
      if (t->compute_left[d] > 0) break;
      timeline_end_compute(pp, t, d, now, out, done);
    }
  }
  for (int32_t d = 0; d < pp->n_devices; d++) {
    if (t->comm_run[d] || t->head[d] == t->tail[d]) continue;
    int32_t node = pp->order_nodes[t->fifo[pp->order_start[d] + t->head[d]]];
    int32_t k = lower_comm_index(pp, node), nm;
    const int32_t *m = lower_comm_members(pp, k, &nm);
    bool all = true;
    for (int32_t j = 0; j < nm && all; j++) {
      int32_t e = m[j];
      all = !t->comm_run[e] && t->head[e] < t->tail[e] &&
            pp->order_nodes[t->fifo[pp->order_start[e] + t->head[e]]] == node &&
            comm_inputs_ready(pp, t, node, e, now);
    }
    if (!all) continue;
    double left = comm_time(s, k), hold = comm_hold_s(s, t, k, now);
    for (int32_t j = 0; j < nm; j++)
      t->comm_run[m[j]] = true, t->comm_left[m[j]] = left, t->comm_started[m[j]] = now,
      t->comm_hold[m[j]] = hold;
    changed = true;
  }
  return changed;
}

/* Ends device d's running comm at `now` on every member. */
static void timeline_end_comm(const sim *s, timeline *t, int32_t d, double now,
                              loom_sim_result *out, int32_t *done) {
  const loom_plan_program *pp = s->pp;
  int32_t node = pp->order_nodes[t->fifo[pp->order_start[d] + t->head[d]]];
  int32_t nm;
  const int32_t *m = lower_comm_members(pp, lower_comm_index(pp, node), &nm);
  const loom_node *n = &pp->global->nodes[node];
  for (int32_t o = 0; o < n->n_out; o++) t->ready[n->out[o]] = now;
  for (int32_t j = 0; j < nm; j++) {
    int32_t e = m[j], at = t->fifo[pp->order_start[e] + t->head[e]++];
    out->events[at] = (loom_sim_event){node, t->comm_started[e], now, true};
    out->devices[e].comm_s += now - t->comm_started[e];
    t->comm_run[e] = false, (*done)++;
    t->wait_since[e] = now; /* the next op, if any, waits from now */
    if (t->compute[e] == LANE_BLOCKED && t->pos[e] == at) t->compute[e] = LANE_FREE, t->pos[e]++;
  }
}

/* Where the ranks run when they share cores (mpirun's placement): as
 * many ranks as cores or fewer are bound one to a core, so a rank's
 * threads (compute and comm stream) share that core alone; more ranks
 * than cores are left unbound, and all share all the cores. Pool of
 * device d, and the cores of a pool. */
static int32_t core_pool(const sim *s, int32_t d) {
  return s->o->cores > 0 && s->pp->n_devices <= s->o->cores ? d : 0;
}
static double pool_cores(const sim *s) {
  if (s->o->cores <= 0) return INFINITY;
  return s->pp->n_devices <= s->o->cores ? 1.0 : (double)s->o->cores;
}

/* The speed of each task in a pool of `cores` whose tasks want `demand`
 * cores: a fair share, cores / demand, of which processes taking turns
 * on a core get the cluster's shared.efficiency at two a core (measured:
 * loom cluster --this-machine), 1 when they fit, in proportion between.
 * Only `busy` tasks take turns: a poller's cost to the task it wakes
 * beside, switches included, is its wait.share (measured so), already in
 * `demand`. */
static double shared_rate(const sim *s, double demand, double busy, double cores) {
  if (!(demand > cores)) return 1;
  double e = s->c->shared_efficiency > 0 ? s->c->shared_efficiency : 1;
  double crowd = fmin(1, fmax(0, busy - cores) / cores);
  return cores / demand * (1 - (1 - e) * crowd);
}

/* The pace of the comm op running on device d: the slowest of its
 * members' cores (t->pool_rate). */
static double comm_pace(const sim *s, const timeline *t, int32_t d) {
  const loom_plan_program *pp = s->pp;
  int32_t node = pp->order_nodes[t->fifo[pp->order_start[d] + t->head[d]]], nm;
  const int32_t *m = lower_comm_members(pp, lower_comm_index(pp, node), &nm);
  double pace = 1;
  for (int32_t j = 0; j < nm; j++) pace = fmin(pace, t->pool_rate[core_pool(s, m[j])]);
  return pace;
}

static loom_status timeline_run(const sim *s, timeline *t, int32_t total, loom_sim_result *out) {
  const loom_plan_program *pp = s->pp;
  int32_t nd = pp->n_devices, done = 0;
  double now = 0, cores = pool_cores(s);
  double wait_share = s->c->wait_share;
  double *demand = t->pool_demand, *rate = t->pool_rate, *busy = t->pool_busy;
  while (done < total) {
    while (timeline_settle(s, t, now, out, &done)) {}
    if (done == total) break;
    double dt = INFINITY;
    for (int32_t d = 0; d < nd; d++) demand[d] = busy[d] = 0;
    for (int32_t d = 0; d < nd; d++) {
      int32_t pool = core_pool(s, d);
      /* a compute node and a comm op moving bytes want a core; a comm op
       * held for a turn waits as a poller */
      double runs = (t->compute[d] == LANE_RUN) + (t->comm_run[d] && !(t->comm_hold[d] > 0));
      double polls = t->comm_run[d] && t->comm_hold[d] > 0 ? wait_share : 0;
      /* a lane waiting for its peers spins on its core first (comm_mpi.c),
       * then polls at wait_share of one */
      if (!t->comm_run[d] && t->head[d] < t->tail[d]) {
        double spin_end = t->wait_since[d] + waiting_spin_s(pp, t, d);
        if (now < spin_end) runs += 1, dt = fmin(dt, spin_end - now);
        else polls += wait_share;
      }
      demand[pool] += runs + polls, busy[pool] += runs;
    }
    for (int32_t d = 0; d < nd; d++) rate[d] = shared_rate(s, demand[d], busy[d], cores);
    /* a collective moves at its slowest member's pace (all at 1 on
     * dedicated cores, which large clusters are: no walk of the members) */
    for (int32_t d = 0; d < nd; d++)
      t->comm_rate[d] = t->comm_run[d] && cores != INFINITY ? comm_pace(s, t, d) : 1;
    if (cores == INFINITY) dt = INFINITY; /* dedicated cores: spinning takes nothing */
    for (int32_t d = 0; d < nd; d++) {
      if (t->compute[d] == LANE_RUN) dt = fmin(dt, t->compute_left[d] / rate[core_pool(s, d)]);
      if (t->comm_run[d])
        dt = fmin(dt, t->comm_hold[d] > 0 ? t->comm_hold[d] : t->comm_left[d] / t->comm_rate[d]);
    }
    if (dt == INFINITY)
      return loom_error(pp->ctx, LOOM_STATUS_INTERNAL,
                        "simulate: the devices' programs stop with %d of %d nodes run (the "
                        "validated order should never deadlock)",
                        (int)done, (int)total);
    now += dt;
    /* a task within a rounding of its end ends now */
    double eps = 1e-12 * fmax(now, 1e-9);
    for (int32_t d = 0; d < nd; d++) {
      if (t->compute[d] == LANE_RUN && (t->compute_left[d] -= dt * rate[core_pool(s, d)]) <= eps)
        timeline_end_compute(pp, t, d, now, out, &done);
      if (!t->comm_run[d]) continue;
      if (t->comm_hold[d] > 0) t->comm_hold[d] = t->comm_hold[d] - dt <= eps ? 0 : t->comm_hold[d] - dt;
      else t->comm_left[d] -= dt * t->comm_rate[d];
    }
    for (int32_t d = 0; d < nd; d++)
      if (t->comm_run[d] && t->comm_left[d] <= eps) timeline_end_comm(s, t, d, now, out, &done);
  }
  for (int32_t d = 0; d < nd; d++) {
    double end = 0;
    for (int32_t i = pp->order_start[d]; i < pp->order_start[d + 1]; i++)
      end = fmax(end, out->events[i].end_s);
    out->devices[d].end_s = end;
  }
  return LOOM_STATUS_OK;
}

/* The runtime computes an output that updates an input in place (the new
 * parameters and optimizer state: pp->output_tied) in its arena and
 * copies it over the input after the run (runtime/session.c), a read and a
 * write of each piece at the end of the device's step: charged to its
 * last compute node. */
static void state_copy_out(const sim *s, int32_t *last_compute, double *copy_out) {
  const loom_plan_program *pp = s->pp;
  for (int32_t d = 0; d < pp->n_devices; d++) {
    last_compute[d] = -1;
    for (int32_t i = pp->order_start[d + 1] - 1; i >= pp->order_start[d]; i--)
      if (lower_comm_index(pp, pp->order_nodes[i]) < 0) {
        last_compute[d] = i;
        break;
      }
  }
  double rate = s->c->memory_bandwidth_Bps * s->mem_eff;
  for (int32_t k = 0; k < pp->n_outs; k++) {
    const loom_plan_io *io = &pp->outs[k];
    if (pp->output_tied && pp->output_tied[io->index] >= 0 && io->device >= 0 &&
        io->device < pp->n_devices)
      copy_out[io->device] += 2.0 * value_bytes(s, pp->global, io->value) / rate;
  }
}

static void timeline_free(timeline *t) {
  free(t->compute), free(t->compute_left), free(t->started), free(t->pos);
  free(t->fifo), free(t->head), free(t->tail);
  free(t->comm_run), free(t->comm_left), free(t->comm_started), free(t->ready);
  free(t->wait_since), free(t->pool_demand), free(t->pool_rate), free(t->pool_busy);
  free(t->comm_rate), free(t->comm_hold);
}

loom_status loom_plan_simulate(const loom_plan_program *pp, const loom_sim_options *o,
                               loom_sim_result *out) {
  if (!pp || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  loom_ctx *ctx = pp->ctx;
  /* ranks sharing cores are all on the one node */
  loom_sim_options shared;
  loom_cluster one_node;
  if (o && o->cluster && o->cores > 0) {
    one_node = *o->cluster, shared = *o;
    one_node.devices_per_node = LOOM_MAX(one_node.devices_per_node, pp->n_devices);
    shared.cluster = &one_node, o = &shared;
  }
  LOOM_TRY(check_options(ctx, pp, o));
  const loom_graph *G = pp->global;
  int32_t nd = pp->n_devices, total = pp->order_start[nd];
  sim s = sim_make(pp, o);
  fusion_view fv = {0};
  /* the nodes that are no kernel: pieces held, and what the runtime's
   * simplify merges into an earlier node */
  size_t n_nodes = (size_t)(G->n_nodes ? G->n_nodes : 1), n_val = (size_t)(G->n_values ? G->n_values : 1);
  bool *merged = loom_malloc(ctx, sizeof *merged * n_nodes);
  bool *skip = loom_calloc(ctx, n_nodes, sizeof *skip);
  int32_t *canon = loom_malloc(ctx, sizeof *canon * n_val);
  loom_status vst = merged && skip && canon ? loom_sim_merged_nodes(pp, merged, canon)
                                            : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t n = 0; !vst && n < G->n_nodes; n++) skip[n] = pp->node_subop[n] == LOWER_FEED;
  fv.canon = canon;
  if (!vst) vst = fusion_view_build(ctx, G, nd, pp->order_start, pp->order_nodes, skip, merged, &fv);
  free(skip);
  if (vst) free(merged), free(canon);
  LOOM_TRY(vst);
  s.fusion = &fv;
  s.merged = merged;
  size_t n_dev = (size_t)nd;
  int32_t *last_compute = loom_malloc(ctx, sizeof *last_compute * n_dev);
  double *copy_out = loom_calloc(ctx, n_dev, sizeof *copy_out);
  if (!last_compute || !copy_out) {
    free(last_compute), free(copy_out), free(merged), free(canon), fusion_view_free(&fv);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  state_copy_out(&s, last_compute, copy_out);
  s.last_compute = last_compute, s.copy_out_s = copy_out;
  size_t n_pos = (size_t)(total ? total : 1);
  timeline t = {
      loom_calloc(ctx, n_dev, sizeof *t.compute),  loom_calloc(ctx, n_dev, sizeof(double)),
      loom_calloc(ctx, n_dev, sizeof(double)),     loom_calloc(ctx, n_dev, sizeof(int32_t)),
      loom_calloc(ctx, n_pos, sizeof(int32_t)),    loom_calloc(ctx, n_dev, sizeof(int32_t)),
      loom_calloc(ctx, n_dev, sizeof(int32_t)),    loom_calloc(ctx, n_dev, sizeof(bool)),
      loom_calloc(ctx, n_dev, sizeof(double)),     loom_calloc(ctx, n_dev, sizeof(double)),
      loom_calloc(ctx, n_dev, sizeof(double)),     loom_calloc(ctx, n_val, sizeof(double)),
      loom_calloc(ctx, n_dev, sizeof(double)),     loom_calloc(ctx, n_dev, sizeof(double)),
      loom_calloc(ctx, n_dev, sizeof(double)),     loom_calloc(ctx, n_dev, sizeof(double)),
      loom_calloc(ctx, n_dev, sizeof(double))};
  out->devices = loom_calloc(ctx, n_dev, sizeof *out->devices);
  out->event_start = loom_malloc(ctx, sizeof *out->event_start * (size_t)(nd + 1));
  out->events = loom_calloc(ctx, n_pos, sizeof *out->events);
  loom_status st = LOOM_STATUS_OK;
  if (!t.compute || !t.compute_left || !t.started || !t.pos || !t.fifo || !t.head || !t.tail ||
      !t.comm_run || !t.comm_left || !t.comm_started || !t.wait_since || !t.ready ||
      !t.pool_demand || !t.pool_rate || !t.comm_rate || !t.comm_hold || !t.pool_busy ||
      !out->devices ||
      !out->event_start || !out->events)
    st = LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    out->n_devices = nd;
    for (int32_t d = 0; d <= nd; d++) out->event_start[d] = pp->order_start[d];
    for (int32_t d = 0; d < nd; d++) t.pos[d] = pp->order_start[d];
    /* what a program's node makes exists once it has run; the rest (the
     * step's inputs) from the start */
    for (int32_t i = 0; i < total; i++) {
      const loom_node *n = &G->nodes[pp->order_nodes[i]];
      for (int32_t k = 0; k < n->n_out; k++) t.ready[n->out[k]] = INFINITY;
    }
    st = timeline_run(&s, &t, total, out);
  }
  if (!st) {
    for (int32_t d = 0; d < nd; d++) out->step_s = fmax(out->step_s, out->devices[d].end_s);
    st = memory_roles(pp, merged, canon, out);
  }
  if (!st) {
    double idle = 0;
    for (int32_t d = 0; d < nd; d++) {
      loom_sim_device *dv = &out->devices[d];
      dv->idle_s = fmax(0.0, out->step_s - dv->compute_s - (o->overlap ? 0.0 : dv->comm_s));
      idle += out->step_s > 0 ? dv->idle_s / out->step_s : 0;
    }
    out->bubble = nd ? idle / nd : 0;
  }
  timeline_free(&t);
  fusion_view_free(&fv);
  free(last_compute);
  free(copy_out);
  free(merged);
  free(canon);
  if (st) loom_sim_result_free(out);
  return st;
}

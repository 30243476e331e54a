/*
 * Composed estimates (estimate.h): a layer's times from Loom's per-node
 * model on a real GPT graph at the tensor-parallel shard's shapes, the
 * collectives Megatron adds, an event simulation of the pipeline schedule,
 * a hierarchical ring for the data-parallel gradients and the memory of
 * the busiest device. docs/SIMULATOR.md, "Composed estimates".
 */
#include "parallel/estimate.h"

#include "loom.h"
#include "ops/op.h"
#include "parallel/builtin.h"
#include "parallel/lower.h"
#include "parallel/lower_internal.h"
#include "parallel/simulate.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fraction of a link's bandwidth a collective achieves (NCCL's bus
 * bandwidth stays below the link's): an assumption of this model, the
 * same for NVLink and the NICs, not fitted (docs/SIMULATOR.md). */
#define COMM_EFFICIENCY 0.8
/* AdamW state bytes per parameter: f32 master, m and v in mixed precision
 * (ZeRO paper: 2 + 2 + 12 = 16 bytes with the f16 params and grads); m and
 * v only in f32 (4 + 4 + 8). */
#define OPT_BYTES_MIXED 12.0
#define OPT_BYTES_F32 8.0

/* ---- one layer's times from the graph -------------------------------------- */

typedef struct pass_times {
  double fwd, bwd, opt; /* seconds on one device, one micro-batch (opt: once) */
} pass_times;

typedef struct graph_times {
  pass_times layer; /* one transformer block */
  pass_times rest;  /* embeddings, final norm, tied head, loss */
} graph_times;

/* What a cached timing depends on; zeroed before filling so memcmp works. */
typedef struct timing_key {
  int32_t vocab, d_model, n_head, d_ff, seq, micro_batch, tp;
  int32_t kv_heads, norm, mlp, position, no_bias, untied; /* the architecture */
  double rope_theta;
  loom_precision precision;
  double rate, f32_rate, mem_bw, launch, element_bytes, gemm_eff, mem_eff;
  double cluster_gemm_eff, cluster_mem_eff, attention_eff; /* the cluster's own */
  int32_t half_dim;
  bool composite_attention;
} timing_key;

#define CACHE_SLOTS 64
typedef struct cache_slot {
  bool used;
  timing_key key;
  graph_times t;
} cache_slot;
/* per thread: the planner may call from several */
static _Thread_local cache_slot cache[CACHE_SLOTS];
static _Thread_local int32_t cache_next;

/* Per logical node: 0 forward (an ancestor of the loss), 1 backward,
 * 2 optimizer (reads the AdamW state, step or lr, directly or not). */
static loom_status classify(loom_ctx *ctx, const loom_graph *g, uint8_t **out) {
  uint8_t *cls = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  bool *fwd = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *fwd);
  bool *opt_v = loom_calloc(ctx, (size_t)(g->n_values ? g->n_values : 1), sizeof *opt_v);
  if (!cls || !fwd || !opt_v) {
    free(cls), free(fwd), free(opt_v);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  if (g->n_outputs > 0 && g->values[g->outputs[0]].node >= 0) {
    fwd[g->values[g->outputs[0]].node] = true;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
      if (!fwd[i]) continue;
      for (int32_t k = 0; k < g->nodes[i].n_in; k++) {
        int32_t p = g->values[g->nodes[i].in[k]].node;
        if (p >= 0) fwd[p] = true;
      }
    }
  }
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const char *nm = g->values[g->inputs[i]].name;
    if (i == LOOM_GPT_IN_STEP || i == LOOM_GPT_IN_LR || (nm && !strncmp(nm, "adam.", 5)))
      opt_v[g->inputs[i]] = true;
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    bool opt = false;
    for (int32_t k = 0; k < n->n_in; k++) opt |= opt_v[n->in[k]];
    for (int32_t o = 0; o < n->n_out; o++) opt_v[n->out[o]] = opt;
    cls[i] = fwd[i] ? 0 : opt ? 2 : 1;
  }
  free(fwd);
  free(opt_v);
  *out = cls;
  return LOOM_STATUS_OK;
}

static void add_time(pass_times *t, uint8_t cls, double s) {
  if (cls == 0) t->fwd += s;
  else if (cls == 1) t->bwd += s;
  else t->opt += s;
}

/* Memory-bound ops a fusing backend runs inside one kernel with their
 * element-wise neighbours (Loom's loop fusion; Megatron's fused bias-GeLU
 * and bias-dropout-add kernels): element-wise, layout, sources and
 * dropout. Reductions (LayerNorm's, softmax's) stay kernels of their own
 * that read their input from memory. */
static bool fusible(loom_op op) {
  const loom_op_def *d = loom_op_get(op);
  if (!d || loom_op_is_comm(op)) return false;
  switch (d->cls) {
  case LOOM_OPCLASS_ELEMENTWISE:
  case LOOM_OPCLASS_LAYOUT:
  case LOOM_OPCLASS_SOURCE: return true;
  case LOOM_OPCLASS_RNG: return true;
  default: return false;
  }
}

/* Per value of G: true when it must live in memory between kernels: a
 * graph output, or read by a node that is not fused with its producer. */
static loom_status memory_values(loom_ctx *ctx, const loom_graph *G, bool **out) {
  bool *mem = loom_calloc(ctx, (size_t)(G->n_values ? G->n_values : 1), sizeof *mem);
  if (!mem) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t o = 0; o < G->n_outputs; o++) mem[G->outputs[o]] = true;
  for (int32_t i = 0; i < G->n_nodes; i++) {
    const loom_node *n = &G->nodes[i];
    bool f = fusible(n->op);
    for (int32_t k = 0; k < n->n_in; k++) {
      int32_t v = n->in[k], p = G->values[v].node;
      if (!f || p < 0 || !fusible(G->nodes[p].op)) mem[v] = true;
    }
  }
  *out = mem;
  return LOOM_STATUS_OK;
}

static double value_bytes(const loom_graph *G, int32_t v) {
  return (double)loom_type_numel(loom_value_type(G, v));
}

/* The per-node model's seconds for node n of G, a fused node's scaled to
 * the bytes that cross its kernel's boundary (its inputs from memory, its
 * outputs to memory): the rest stays in registers. */
static double fused_node_seconds(const loom_graph *G, const loom_node *n, const bool *mem,
                                 const loom_sim_options *so) {
  double t = loom_sim_node_seconds(G, n, so);
  if (!fusible(n->op) || t <= 0) return t;
  double all = 0, moved = 0;
  for (int32_t k = 0; k < n->n_in; k++) {
    int32_t v = n->in[k], p = G->values[v].node;
    double b = value_bytes(G, v);
    all += b;
    if (p < 0 || !fusible(G->nodes[p].op)) moved += b;
  }
  for (int32_t o = 0; o < n->n_out; o++) {
    double b = value_bytes(G, n->out[o]);
    all += b;
    if (mem[n->out[o]]) moved += b;
  }
  return all > 0 ? t * moved / all : t;
}

/* Device 0's compute nodes of the training step of m at n_layer layers,
 * micro_batch sequences, cut tp ways by the built-in tpN plan (Megatron's
 * form), timed by the per-node model with memory-bound chains fused. */
static loom_status time_graph(loom_ctx *ctx, const loom_gpt_config *m, int32_t n_layer,
                              int32_t micro_batch, int32_t tp, bool composite_attention,
                              const loom_sim_options *so, pass_times *out) {
  loom_gpt_config c = *m;
  c.n_layer = n_layer;
  loom_session_options sess = LOOM_SESSION_OPTIONS(.backend = LOOM_BACKEND_DEFAULT,
                                                   .attention = LOOM_ATTENTION_FLASH,
                                                   .rng = LOOM_RNG_FUSED);
  /* no session: attention stays a composite of its primitives */
  loom_gpt_optim o = {0.9, 0.95, 1e-8, 0.1, 0, composite_attention ? NULL : &sess};
  loom_graph *g = NULL;
  int64_t rng_per_step = 0;
  LOOM_TRY(loom_gpt_build_train(ctx, &c, micro_batch, c.context, &o, &g, &rng_per_step));
  uint8_t *cls = NULL;
  bool *mem = NULL;
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  loom_status st = classify(ctx, g, &cls);
  memset(out, 0, sizeof *out);
  if (!st && tp == 1) {
    st = memory_values(ctx, g, &mem);
    for (int32_t i = 0; !st && i < g->n_nodes; i++)
      add_time(out, cls[i], fused_node_seconds(g, &g->nodes[i], mem, so));
  } else if (!st) {
    char spec[32];
    snprintf(spec, sizeof spec, "tp%d", (int)tp);
    st = loom_plan_builtin(ctx, g, spec, tp, &p);
    if (!st) st = loom_plan_lower(p, NULL, &pp);
    if (!st) st = memory_values(ctx, pp->global, &mem);
    if (!st) {
      const loom_graph *G = pp->global;
      for (int32_t k = pp->order_start[0]; k < pp->order_start[1]; k++) {
        int32_t node = pp->order_nodes[k], sub = pp->node_subop[node];
        if (loom_op_is_comm(G->nodes[node].op) || sub < 0) continue; /* comm, feeds */
        add_time(out, cls[p->subops[sub].node], fused_node_seconds(G, &G->nodes[node], mem, so));
      }
    }
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  free(mem);
  free(cls);
  loom_graph_free(g);
  return st;
}

static loom_status layer_times(loom_ctx *ctx, const loom_gpt_config *m, int32_t micro_batch,
                               int32_t tp, bool composite_attention, const loom_sim_options *so,
                               graph_times *out) {
  timing_key k;
  memset(&k, 0, sizeof k);
  k.vocab = m->vocab, k.d_model = m->d_model, k.n_head = m->n_head, k.d_ff = m->d_ff;
  k.seq = m->context, k.micro_batch = micro_batch, k.tp = tp, k.precision = so->precision;
  k.kv_heads = loom_gpt_kv_heads(m), k.norm = m->norm, k.mlp = m->mlp, k.position = m->position;
  k.no_bias = m->no_bias, k.untied = m->untied, k.rope_theta = loom_gpt_rope_theta(m);
  k.rate = so->cluster->flops[so->precision];
  k.f32_rate = so->cluster->flops[LOOM_PRECISION_f32];
  k.mem_bw = so->cluster->memory_bandwidth_Bps, k.launch = so->cluster->kernel_launch_s;
  k.element_bytes = so->element_bytes, k.gemm_eff = so->gemm_efficiency;
  k.mem_eff = so->memory_efficiency, k.composite_attention = composite_attention;
  k.cluster_gemm_eff = so->cluster->gemm_efficiency, k.half_dim = so->cluster->gemm_half_dim;
  k.cluster_mem_eff = so->cluster->memory_efficiency;
  k.attention_eff = so->cluster->attention_efficiency;
  for (int32_t i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].used && !memcmp(&cache[i].key, &k, sizeof k)) {
      *out = cache[i].t;
      return LOOM_STATUS_OK;
    }
  pass_times one, two;
  LOOM_TRY(time_graph(ctx, m, 1, micro_batch, tp, composite_attention, so, &one));
  LOOM_TRY(time_graph(ctx, m, 2, micro_batch, tp, composite_attention, so, &two));
  graph_times t;
  t.layer = (pass_times){two.fwd - one.fwd, two.bwd - one.bwd, two.opt - one.opt};
  t.rest = (pass_times){fmax(0, one.fwd - t.layer.fwd), fmax(0, one.bwd - t.layer.bwd),
                        fmax(0, one.opt - t.layer.opt)};
  cache_slot *s = &cache[cache_next];
  cache_next = (cache_next + 1) % CACHE_SLOTS;
  *s = (cache_slot){true, k, t};
  *out = t;
  return LOOM_STATUS_OK;
}

/* ---- collectives ------------------------------------------------------------ */

typedef struct link {
  double bw, lat;
} link;

static link intra_link(const loom_cluster *c) {
  return (link){c->intra.bandwidth_Bps * COMM_EFFICIENCY, c->intra.latency_s};
}

/* Each device's share of its node's NICs (every device of a node talks
 * across nodes at once), or the intra link if slower. */
static link inter_link(const loom_cluster *c) {
  double share = c->inter.bandwidth_Bps * (c->inter.nics > 0 ? c->inter.nics : 1) /
                 (c->devices_per_node > 0 ? c->devices_per_node : 1);
  if (share > c->intra.bandwidth_Bps) share = c->intra.bandwidth_Bps;
  return (link){share * COMM_EFFICIENCY, c->inter.latency_s};
}

/* Ring all-reduce of `bytes` over n members: 2(n-1) steps, each member
 * sends 2(n-1)/n of the buffer. */
static double all_reduce_s(double bytes, int32_t n, link l) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) * l.lat + 2.0 * (n - 1) / n * bytes / l.bw;
}

/* Reduce-scatter or all-gather: half an all-reduce. */
static double half_ring_s(double bytes, int32_t n, link l) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * l.lat + (double)(n - 1) / n * bytes / l.bw;
}

/* The dp group of a device: members inside its node and nodes it spans.
 * Megatron's rank order (tp fastest, then dp, then pp) puts node.devices /
 * tp dp members in a node; with tp across nodes the dp members are the
 * adjacent devices (the spec's "tpTxdpD" order). */
static void dp_layout(const loom_mesh_plan *p, const loom_cluster *c, int32_t *in_node,
                      int32_t *nodes) {
  int32_t per = c->devices_per_node > 0 ? c->devices_per_node : 1;
  int32_t k = p->tp_across_nodes ? per : p->tp < per ? per / p->tp : 1;
  if (k > p->dp) k = p->dp;
  while (k > 1 && p->dp % k) k--;
  *in_node = k;
  *nodes = p->dp / k;
}

/* A hierarchical ring over the dp group: `inner` (reduce-scatter or
 * all-gather, or both for an all-reduce) inside the node, and the node's
 * NICs across nodes on each member's 1/in_node share. kind: 0 all-reduce,
 * 1 reduce-scatter or all-gather. */
static double dp_collective_s(double bytes, int kind, const loom_mesh_plan *p,
                              const loom_cluster *c) {
  int32_t in_node, nodes;
  dp_layout(p, c, &in_node, &nodes);
  double t = 0, rest = bytes / in_node;
  if (kind == 0) {
    t += 2 * half_ring_s(bytes, in_node, intra_link(c)); /* reduce-scatter + all-gather */
    t += all_reduce_s(rest, nodes, inter_link(c));
  } else {
    t += half_ring_s(bytes, in_node, intra_link(c));
    t += half_ring_s(rest, nodes, inter_link(c));
  }
  return t;
}

/* ---- the pipeline ----------------------------------------------------------- */

typedef struct pipe_op {
  bool fwd;
  int32_t mb, chunk;
} pipe_op;

/* Device d's schedule of m micro-batches over v chunks. */
static int32_t schedule(const loom_mesh_plan *p, int32_t m, int32_t d, pipe_op *ops) {
  int32_t S = p->pp, v = p->schedule == LOOM_PIPE_INTERLEAVED ? p->chunks : 1;
  int32_t total = m * v, n = 0;
  if (p->schedule == LOOM_PIPE_GPIPE) {
    for (int32_t k = 0; k < m; k++) ops[n++] = (pipe_op){true, k, 0};
    for (int32_t k = 0; k < m; k++) ops[n++] = (pipe_op){false, k, 0};
    return n;
  }
  int32_t warm = p->schedule == LOOM_PIPE_INTERLEAVED ? (S - d - 1) * 2 + (v - 1) * S : S - d - 1;
  if (warm > total) warm = total;
  /* Megatron's micro-step k: micro-batch (k / (S v)) S + k % S, chunk (k / S) % v
   * forward, reversed backward (v = 1: micro-batch k) */
#define MB(k) (((k) / (S * v)) * S + (k) % S)
#define CH(k) (((k) / S) % v)
  int32_t f = 0, b = 0;
  for (; f < warm; f++) ops[n++] = (pipe_op){true, MB(f), CH(f)};
  for (; f < total; f++, b++) {
    ops[n++] = (pipe_op){true, MB(f), CH(f)};
    ops[n++] = (pipe_op){false, MB(b), v - 1 - CH(b)};
  }
  for (; b < total; b++) ops[n++] = (pipe_op){false, MB(b), v - 1 - CH(b)};
#undef MB
#undef CH
  return n;
}

typedef struct pipe_result {
  double end_s;          /* the last device's end */
  int32_t busiest;       /* the device with the most busy time */
  double busy_s;         /* its busy time */
} pipe_result;

/* Event simulation: every device runs its schedule in order; a forward of
 * virtual stage vs needs vs-1's forward of the micro-batch (plus the
 * transfer), a backward vs+1's backward (the last stage: its own forward).
 * fwd_s[vs], bwd_s[vs]: durations; xfer_s[vs]: vs -> vs+1 transfer. */
static loom_status simulate_pipe(loom_ctx *ctx, const loom_mesh_plan *p, int32_t m,
                                 const double *fwd_s, const double *bwd_s, const double *xfer_s,
                                 pipe_result *out) {
  int32_t S = p->pp, v = p->schedule == LOOM_PIPE_INTERLEAVED ? p->chunks : 1, V = S * v;
  int32_t per_dev = 2 * m * v;
  pipe_op *ops = loom_malloc(ctx, sizeof *ops * (size_t)per_dev * (size_t)S);
  int32_t *pos = loom_calloc(ctx, (size_t)S, sizeof *pos);
  double *clock = loom_calloc(ctx, (size_t)S, sizeof *clock);
  double *busy = loom_calloc(ctx, (size_t)S, sizeof *busy);
  double *fdone = loom_malloc(ctx, sizeof *fdone * (size_t)V * (size_t)m);
  double *bdone = loom_malloc(ctx, sizeof *bdone * (size_t)V * (size_t)m);
  loom_status st = LOOM_STATUS_OK;
  if (!ops || !pos || !clock || !busy || !fdone || !bdone) st = LOOM_STATUS_OUT_OF_MEMORY;
  for (int64_t i = 0; !st && i < (int64_t)V * m; i++) fdone[i] = bdone[i] = -1;
  for (int32_t d = 0; !st && d < S; d++) schedule(p, m, d, ops + (size_t)d * per_dev);
  int64_t done = 0, total = (int64_t)per_dev * S;
  for (bool progress = true; !st && progress && done < total;) {
    progress = false;
    for (int32_t d = 0; d < S; d++) {
      while (pos[d] < per_dev) {
        pipe_op op = ops[(size_t)d * per_dev + pos[d]];
        int32_t vs = op.chunk * S + d;
        double ready;
        if (op.fwd) {
          if (vs == 0) ready = 0;
          else if (fdone[(size_t)(vs - 1) * m + op.mb] < 0) break;
          else ready = fdone[(size_t)(vs - 1) * m + op.mb] + xfer_s[vs - 1];
        } else if (vs == V - 1) {
          if (fdone[(size_t)vs * m + op.mb] < 0) break;
          ready = fdone[(size_t)vs * m + op.mb];
        } else {
          if (bdone[(size_t)(vs + 1) * m + op.mb] < 0) break;
          ready = bdone[(size_t)(vs + 1) * m + op.mb] + xfer_s[vs];
        }
        double dur = op.fwd ? fwd_s[vs] : bwd_s[vs];
        double start = fmax(ready, clock[d]);
        clock[d] = start + dur;
        busy[d] += dur;
        (op.fwd ? fdone : bdone)[(size_t)vs * m + op.mb] = clock[d];
        pos[d]++, done++, progress = true;
      }
    }
  }
  if (!st && done < total)
    st = loom_error(ctx, LOOM_STATUS_INTERNAL,
                    "estimate: the pipeline schedule stops with %lld of %lld steps run",
                    (long long)done, (long long)total);
  if (!st) {
    *out = (pipe_result){0, 0, 0};
    for (int32_t d = 0; d < S; d++) {
      out->end_s = fmax(out->end_s, clock[d]);
      if (busy[d] > out->busy_s) out->busy_s = busy[d], out->busiest = d;
    }
  }
  free(ops), free(pos), free(clock), free(busy), free(fdone), free(bdone);
  return st;
}

/* ---- the plan --------------------------------------------------------------- */

static int32_t chunks_of(const loom_mesh_plan *p) {
  return p->schedule == LOOM_PIPE_INTERLEAVED ? p->chunks : 1;
}

loom_status loom_mesh_plan_check(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                                 const loom_mesh_plan *p, int32_t devices_per_node) {
  if (!m || !p) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "estimate: NULL argument");
  LOOM_TRY(loom_gpt_config_check(ctx, m));
  if (p->dp < 1 || p->tp < 1 || p->pp < 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: degrees dp %d, tp %d, pp %d must be at least 1", (int)p->dp,
                      (int)p->tp, (int)p->pp);
  if (p->micro_batch < 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: micro-batch %d must be at least 1", (int)p->micro_batch);
  if (p->zero < 0 || p->zero > 3)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "estimate: ZeRO stage %d is not 0..3",
                      (int)p->zero);
  if (p->schedule < LOOM_PIPE_1F1B || p->schedule > LOOM_PIPE_INTERLEAVED)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "estimate: unknown schedule %d",
                      (int)p->schedule);
  int32_t v = chunks_of(p);
  if (p->schedule == LOOM_PIPE_INTERLEAVED && p->chunks < 2)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: the interleaved schedule needs at least 2 chunks, not %d",
                      (int)p->chunks);
  if (p->schedule != LOOM_PIPE_INTERLEAVED && p->chunks > 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: %d chunks per device need the interleaved schedule",
                      (int)p->chunks);
  if (m->n_head % p->tp)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: tp %d does not divide the %d heads", (int)p->tp, (int)m->n_head);
  if (loom_gpt_kv_heads(m) % p->tp)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: tp %d does not divide the %d key/value heads", (int)p->tp,
                      (int)loom_gpt_kv_heads(m));
  int32_t ff = m->d_ff > 0 ? m->d_ff : 4 * m->d_model;
  if (ff % p->tp)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: tp %d does not divide d_ff %d", (int)p->tp, (int)ff);
  if (m->vocab % p->tp)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: tp %d does not divide the vocabulary %d", (int)p->tp,
                      (int)m->vocab);
  if (m->n_layer % ((int64_t)p->pp * v))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: pp %d x %d chunks does not divide the %d layers", (int)p->pp,
                      (int)v, (int)m->n_layer);
  if (global_batch < 1 || global_batch % ((int64_t)p->dp * p->micro_batch))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: dp %d x micro-batch %d does not divide the batch %lld",
                      (int)p->dp, (int)p->micro_batch, (long long)global_batch);
  int64_t mbs = global_batch / ((int64_t)p->dp * p->micro_batch);
  if (mbs > (1 << 20))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: %lld micro-batches per step are too many", (long long)mbs);
  if (p->schedule == LOOM_PIPE_INTERLEAVED && mbs % p->pp)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: the interleaved schedule runs micro-batches in groups of pp "
                      "%d, and %lld micro-batches do not divide into them",
                      (int)p->pp, (long long)mbs);
  if (devices_per_node > 0 && !p->tp_across_nodes &&
      (p->tp > devices_per_node || devices_per_node % p->tp))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: a tp group of %d inside a node of %d devices does not divide "
                      "it (set tp_across_nodes)",
                      (int)p->tp, (int)devices_per_node);
  return LOOM_STATUS_OK;
}

bool loom_mesh_plan_spec(const loom_mesh_plan *p, int64_t global_batch, char *buf, size_t n) {
  if (!p || !buf || n == 0) return false;
  buf[0] = '\0';
  if (p->dp < 1 || p->tp < 1 || p->pp < 1 || p->micro_batch < 1) return false;
  if (global_batch % ((int64_t)p->dp * p->micro_batch)) return false;
  int64_t mbs = global_batch / ((int64_t)p->dp * p->micro_batch);
  if (p->schedule == LOOM_PIPE_INTERLEAVED && p->pp < 2) return false;
  if (mbs > 4096) return false;
  /* axes with degree 1 left out; the pipeline axis written last (the
   * built-ins compose pp after the others); tp before dp when its groups
   * span nodes (row-major: the last axis written is the adjacent one) */
  char axes[96] = "";
  size_t len = 0;
  int32_t pp = p->pp > 1 || mbs > 1 ? p->pp : 0; /* pp1 carries +mbM */
  const char *names[3] = {"dp", "tp", "pp"};
  int32_t deg[3] = {p->dp, p->tp, pp};
  int order[3] = {0, 1, 2};
  if (p->tp_across_nodes) order[0] = 1, order[1] = 0;
  for (int i = 0; i < 3; i++) {
    int a = order[i];
    if (deg[a] < 1 || (deg[a] == 1 && a != 2)) continue;
    len += (size_t)snprintf(axes + len, sizeof axes - len, "%s%s%d", len ? "x" : "", names[a],
                            (int)deg[a]);
  }
  if (!len) snprintf(axes, sizeof axes, "dp1");
  char opts[96] = "";
  size_t ol = 0;
  if (pp && p->pp > 1 && p->schedule == LOOM_PIPE_GPIPE)
    ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+gpipe");
  if (p->schedule == LOOM_PIPE_INTERLEAVED && p->chunks == 2)
    ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+interleaved");
  else if (p->schedule == LOOM_PIPE_INTERLEAVED)
    ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+interleaved%d", (int)p->chunks);
  if (pp && mbs != p->pp) ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+mb%lld", (long long)mbs);
  if (p->zero > 0 && p->dp > 1) ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+zero%d", (int)p->zero);
  if (p->recompute) ol += (size_t)snprintf(opts + ol, sizeof opts - ol, "+recompute");
  int w = snprintf(buf, n, "%s%s", axes, opts);
  if (w < 0 || (size_t)w >= n) {
    buf[0] = '\0';
    return false;
  }
  return true;
}

/* ---- memory ----------------------------------------------------------------- */

typedef struct model_dims {
  double V, h, a, ff, s, L, b;
  double kv;      /* the K/V width: K/V heads x head width (h with multi-head attention) */
  double fc;      /* the first MLP matrix's columns: ff, or 2 ff for SwiGLU's gate and up */
  double biases;  /* 1 with biases, 0 without */
  double norm_p;  /* a norm's parameters: 2h (LayerNorm with bias) or h */
  bool wpe, untied;
} model_dims;

static model_dims dims_of(const loom_gpt_config *m, int32_t micro_batch) {
  model_dims d = {.V = m->vocab, .h = m->d_model, .a = m->n_head,
                  .ff = m->d_ff > 0 ? m->d_ff : 4.0 * m->d_model, .s = m->context,
                  .L = m->n_layer, .b = micro_batch};
  d.kv = (double)loom_gpt_kv_heads(m) * (m->d_model / m->n_head);
  d.fc = m->mlp == LOOM_GPT_MLP_SWIGLU ? 2 * d.ff : d.ff;
  d.biases = m->no_bias ? 0 : 1;
  d.norm_p = m->norm == LOOM_GPT_NORM_LAYERNORM && !m->no_bias ? 2 * d.h : d.h;
  d.wpe = m->position == LOOM_GPT_POS_LEARNED;
  d.untied = m->untied;
  return d;
}

/* Parameters of one block on one tp rank: QKV and fc split by columns
 * (their biases too), proj and mlp by rows (biases whole), the norms
 * whole. GPT: 12h^2/t + 13h; K/V heads narrow QKV, SwiGLU widens fc. */
static double layer_params(const model_dims *d, int32_t tp) {
  double h = d->h, qkv = h + 2 * d->kv, bb = d->biases;
  return (h * qkv + bb * qkv) / tp + h * h / tp + bb * h + (h * d->fc + bb * d->fc) / tp +
         d->ff * h / tp + bb * h + 2 * d->norm_p;
}

/* Activation bytes one block keeps for its backward, one micro-batch
 * (Korthikanti et al. 2022, eq. 2 without sequence parallelism: s b h
 * (10 + 24/t + 5 a s / (h t)) at 2-byte activations, scaled by
 * element_bytes / 2); flash attention keeps its log-sum-exp (f32,
 * a s b / t) in place of the 5 a s^2 b / t of the score matrices. The 24
 * of 24/t is q, k, v (6, at 2 bytes each), the projection's input (2) and
 * the MLP's two ff-wide values (2 x 8 at ff = 4h); in general
 * 2(h + 2 kv) + 2h + 4 ff for GELU, and 6 ff for SwiGLU (gate and up as
 * the fused kernel keeps them, and the product). The 10 s b h kept whole
 * (norm inputs, the QKV and MLP inputs, the two dropout masks) stay. */
static double layer_activation_bytes(const model_dims *d, int32_t tp, double e, bool composite) {
  double sb = d->s * d->b, h = d->h;
  double split = 2 * (h + 2 * d->kv) + 2 * h + (d->fc > d->ff ? 6 : 4) * d->ff;
  double attn = composite ? 5.0 * d->a * d->s * d->s * d->b / tp * e / 2.0
                          : 4.0 * d->a * d->s * d->b / tp;
  return sb * (10.0 * h + split / tp) * e / 2.0 + attn;
}

double loom_estimate_block_activation_bytes(const loom_gpt_config *m, int32_t micro_batch,
                                            int32_t tp, double element_bytes, bool composite) {
  model_dims d = dims_of(m, micro_batch);
  return layer_activation_bytes(&d, tp, element_bytes, composite);
}

/* ---- the estimate ----------------------------------------------------------- */

loom_status loom_estimate_gpt(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                              const loom_mesh_plan *p, const loom_estimate_options *o,
                              loom_estimate *out) {
  if (!out || !o || !o->cluster)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "estimate: no cluster description");
  memset(out, 0, sizeof *out);
  const loom_cluster *c = o->cluster;
  LOOM_TRY(loom_mesh_plan_check(ctx, m, global_batch, p, c->devices_per_node));
  if (o->precision < 0 || o->precision >= LOOM_PRECISION_COUNT || c->flops[o->precision] <= 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: cluster %s gives no %s rate", c->name,
                      loom_precision_name(o->precision));
  int64_t devices = (int64_t)p->dp * p->tp * p->pp;
  int32_t per = c->devices_per_node > 0 ? c->devices_per_node : 1;
  int64_t nodes = (devices + per - 1) / per;
  if (c->max_nodes > 0 && nodes > c->max_nodes)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: %lld devices need %lld nodes of %d, and cluster %s has %d",
                      (long long)devices, (long long)nodes, (int)per, c->name, (int)c->max_nodes);
  if (nodes > 1 && !c->inter.kind[0])
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "estimate: %lld devices span %lld nodes, and cluster %s has no network",
                      (long long)devices, (long long)nodes, c->name);
  /* 16-bit activations below tf32 (tf32 computes on f32 storage) */
  double e = o->element_bytes > 0 ? o->element_bytes : o->precision >= LOOM_PRECISION_bf16 ? 2 : 4;
  loom_sim_options so = {.cluster = c, .precision = o->precision, .gemm_efficiency = o->gemm_efficiency,
                        .memory_efficiency = o->memory_efficiency, .element_bytes = e};
  graph_times gt;
  LOOM_TRY(layer_times(ctx, m, p->micro_batch, p->tp, o->composite_attention, &so, &gt));

  model_dims d = dims_of(m, p->micro_batch);
  int32_t v = chunks_of(p), S = p->pp, VS = S * v;
  int32_t mbs = (int32_t)(global_batch / ((int64_t)p->dp * p->micro_batch));
  double lc = d.L / VS; /* layers per chunk */
  double act_bytes = d.b * d.s * d.h * e;  /* one [b, s, h] activation */

  /* tp: Megatron's 2 all-reduces of [b, s, h] per block forward, 2 backward
   * (and 2 more in the recomputed forward); the vocabulary-parallel
   * embedding one forward, the head's input gradient one backward */
  link tl = p->tp_across_nodes ? inter_link(c) : intra_link(c);
  double ar = all_reduce_s(act_bytes, p->tp, tl);
  double f_layer = gt.layer.fwd, b_layer = gt.layer.bwd + (p->recompute ? gt.layer.fwd : 0);
  double tp_f_layer = 2 * ar, tp_b_layer = (p->recompute ? 4 : 2) * ar;

  /* pp: Megatron's scatter-gather sends 1/tp of [b, s, h] per tp rank
   * between stages over whatever link joins them (ranks tp*dp apart) */
  int64_t stride = (int64_t)p->tp * p->dp;
  double *fwd_s = loom_calloc(ctx, (size_t)VS, sizeof(double));
  double *bwd_s = loom_calloc(ctx, (size_t)VS, sizeof(double));
  double *xfer_s = loom_calloc(ctx, (size_t)VS, sizeof(double));
  double *zero_s = loom_calloc(ctx, (size_t)VS, sizeof(double));
  if (!fwd_s || !bwd_s || !xfer_s || !zero_s) {
    free(fwd_s), free(bwd_s), free(xfer_s), free(zero_s);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t vs = 0; vs < VS; vs++) {
    fwd_s[vs] = lc * (f_layer + tp_f_layer);
    bwd_s[vs] = lc * (b_layer + tp_b_layer);
    if (vs == 0) fwd_s[vs] += ar; /* the embedding's all-reduce */
    if (vs == VS - 1) {
      fwd_s[vs] += gt.rest.fwd; /* embeddings, head and loss: on the last stage */
      bwd_s[vs] += gt.rest.bwd + ar;
    }
    int64_t a = (int64_t)(vs % S) * stride, b2 = (int64_t)((vs + 1) % S) * stride;
    link l = a / per == b2 / per ? intra_link(c) : inter_link(c);
    xfer_s[vs] = l.lat + act_bytes / p->tp / l.bw;
  }
  pipe_result with, without;
  loom_status st = simulate_pipe(ctx, p, mbs, fwd_s, bwd_s, xfer_s, &with);
  if (!st) st = simulate_pipe(ctx, p, mbs, fwd_s, bwd_s, zero_s, &without);
  free(fwd_s), free(bwd_s), free(xfer_s), free(zero_s);
  if (st) return st;

  /* the busiest device's split of its busy time */
  int32_t dev = without.busiest;
  double n_chunk_layers = v * lc * mbs;
  double rest_f = 0, rest_b = 0, emb_ar = 0;
  for (int32_t ch = 0; ch < v; ch++) {
    int32_t vs = ch * S + dev;
    if (vs == 0) emb_ar += ar * mbs;
    if (vs == VS - 1) rest_f += gt.rest.fwd * mbs, rest_b += (gt.rest.bwd) * mbs, emb_ar += ar * mbs;
  }
  out->compute_s = n_chunk_layers * (f_layer + b_layer) + rest_f + rest_b;
  out->tp_comm_s = n_chunk_layers * (tp_f_layer + tp_b_layer) + emb_ar;
  out->bubble_s = fmax(0, without.end_s - without.busy_s);
  out->pp_comm_s = fmax(0, with.end_s - without.end_s);

  /* parameters per device: the first stage holds the embeddings, the last
   * the head (the tied one's copy of wte, or its own) and the final norm */
  double p_layers = d.L / S * layer_params(&d, p->tp);
  double p_wte = d.V * d.h / p->tp, p_wpe = d.wpe ? d.s * d.h : 0;
  double p_head = d.untied ? p_wte : 0; /* on one device with wte when S = 1 */
  double p_first = p_layers + p_wte + p_wpe + (S == 1 ? d.norm_p + p_head : 0);
  double p_last = p_layers + (S > 1 ? p_wte + d.norm_p : 0);
  double p_dev = fmax(p_first, p_last);

  /* dp: the gradients of each device's parameters, reduced across dp (a
   * hierarchical ring); ZeRO 1/2 reduce-scatter them and all-gather the new
   * parameters (the same bytes), ZeRO-3 also gathers the parameters for the
   * forward and again for the backward */
  double g_bytes = p_dev * e, dp_s = 0;
  if (p->dp > 1) {
    if (p->zero == 0) dp_s = dp_collective_s(g_bytes, 0, p, c);
    else dp_s = 2 * dp_collective_s(g_bytes, 1, p, c);
    if (p->zero >= 3) dp_s += 2 * dp_collective_s(g_bytes, 1, p, c);
  }
  /* overlapped: the reduction of a layer's gradients starts once its last
   * micro-batch's backward is done, so it hides under the rest of that
   * last backward, all but the last layer's share */
  double exposed = dp_s;
  if (o->overlap && dp_s > 0) {
    double window = v * lc * (b_layer + tp_b_layer);
    double layers_here = d.L / S;
    exposed = fmax(dp_s - window, dp_s / layers_here);
  }
  out->dp_comm_s = exposed;
  /* the tied embedding's gradient summed between the first and last stage */
  if (S > 1 && !d.untied) out->pp_comm_s += all_reduce_s(p_wte * e, 2, inter_link(c));

  double opt_shard = p->zero >= 1 ? p->dp : 1;
  out->optimizer_s = (d.L / S * gt.layer.opt + gt.rest.opt) / opt_shard;

  out->step_s = without.end_s + out->pp_comm_s + out->dp_comm_s + out->optimizer_s;
  out->bubble_fraction = out->step_s > 0 ? out->bubble_s / out->step_s : 0;

  /* Megatron's count: per block forward 2 b s (4 h^2 + 2 h ff) + 4 b s^2 h
   * (24 b s h^2 (1 + s / 6h) at ff = 4h), times 3 passes (4 with
   * recomputation), plus the head's 6 b s h V; in general 2 b s times the
   * block's matrix weights (narrower K/V, SwiGLU's third matrix) */
  double B = (double)global_batch;
  double block_fwd = 2 * B * d.s * loom_gpt_block_matrix_params(m) + 4 * B * d.s * d.s * d.h;
  out->model_flops = (p->recompute ? 4 : 3) * d.L * block_fwd + 6 * B * d.s * d.h * d.V;
  out->flops_per_device_s = out->step_s > 0 ? out->model_flops / out->step_s / (double)devices : 0;

  /* memory of the busier of the first and the last device */
  double opt_bytes = e < 4 ? OPT_BYTES_MIXED : OPT_BYTES_F32;
  double z1 = p->zero >= 1 ? p->dp : 1, z2 = p->zero >= 2 ? p->dp : 1, z3 = p->zero >= 3 ? p->dp : 1;
  double layer_act = layer_activation_bytes(&d, p->tp, e, o->composite_attention);
  double best = -1;
  for (int side = 0; side < (S > 1 ? 2 : 1); side++) { /* one device holds all at S = 1 */
    int32_t dv = side == 0 ? 0 : S - 1;
    double params = side == 0 ? p_first : p_last;
    double inflight; /* micro-batches (chunk-micro-batches) alive at the peak */
    if (p->schedule == LOOM_PIPE_GPIPE) inflight = mbs * 1.0;
    else if (p->schedule == LOOM_PIPE_INTERLEAVED)
      inflight = fmin((S - dv - 1) * 2.0 + (v - 1.0) * S + 1, (double)mbs * v);
    else inflight = fmin(S - dv, mbs);
    double per_chunk = p->recompute ? lc * act_bytes : lc * layer_act;
    double acts = inflight * per_chunk;
    if (p->recompute) acts += layer_act; /* one block recomputed at a time */
    if (dv == S - 1) {
      double held = p->schedule == LOOM_PIPE_GPIPE ? mbs : 1;
      acts += held * d.b * d.s * (d.V / p->tp) * (e + 4); /* logits, f32 softmax */
    }
    loom_estimate_memory mem;
    mem.params = params * e / z3;
    mem.grads = params * e / z2;
    mem.optimizer = params * opt_bytes / z1;
    mem.activations = acts;
    mem.comm_buffers = (p->tp > 1 ? 2 * act_bytes : 0) + (S > 1 ? 2 * act_bytes / p->tp : 0) +
                       (p->zero >= 3 ? 2 * layer_params(&d, p->tp) * e : 0);
    mem.total = mem.params + mem.grads + mem.optimizer + mem.activations + mem.comm_buffers;
    if (mem.total > best) best = mem.total, out->memory = mem;
  }
  out->fits = out->memory.total <= c->memory_bytes;
  return LOOM_STATUS_OK;
}

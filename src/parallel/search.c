/*
 * The automatic planner (search.h): a branch and bound over mesh plans,
 * each rated by the composed estimate (estimate.h), and the exact
 * re-ranking of the best by lowering and simulating their built-ins.
 */
#include "parallel/search.h"

#include "core/clock.h"
#include "parallel/builtin.h"
#include "parallel/lower.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The simulator's rate for a large GEMM (simulate.c): no GEMM runs faster,
 * so FLOPs at this rate bound a step from below. */
#define BOUND_GEMM_EFFICIENCY 0.75
#define DEFAULT_TOP 5
#define MAX_TOP 1000
#define MAX_CONFIGS 1024
/* The estimate's AdamW state per parameter (estimate.c): f32 master, m and
 * v with 16-bit parameters, m and v alone with f32 ones. */
#define OPT_BYTES_MIXED 12.0
#define OPT_BYTES_F32 8.0

const char *loom_search_loss_name(loom_search_loss l) {
  static const char *const names[] = {"-",       "bubble",    "tp comm", "pp comm",  "dp comm",
                                      "compute", "optimizer", "memory",  "simulated", "sync points"};
  return (unsigned)l < sizeof names / sizeof names[0] ? names[l] : "?";
}

void loom_mesh_plan_describe(const loom_mesh_plan *p, char *buf, size_t n) {
  static const char *const sched[] = {"1f1b", "gpipe", "interleaved"};
  char chunks[16] = "";
  if (p->schedule == LOOM_PIPE_INTERLEAVED) snprintf(chunks, sizeof chunks, "x%d", p->chunks);
  snprintf(buf, n, "dp%d tp%d pp%d micro-batch %d %s%s zero%d%s%s", p->dp, p->tp, p->pp, p->micro_batch,
           (unsigned)p->schedule < 3 ? sched[p->schedule] : "?", chunks, p->zero,
           p->recompute ? " recompute" : "", p->tp > 1 ? (p->tp_across_nodes ? " tp-across-nodes"
                                                                             : " tp-in-node")
                                                       : "");
}

typedef struct mesh {
  int32_t dp, tp, pp;
  double bound; /* the least step bound of any of its plans */
} mesh;

typedef struct search {
  loom_ctx *ctx;
  const loom_gpt_config *m;
  int64_t batch;
  int32_t devices;
  const loom_search_options *o;
  loom_estimate_options eo;
  int32_t K;
  double limit;
  double layers_fwd_s; /* the weight GEMMs of every layer's forward, whole batch, one device */
  double elem;         /* bytes per parameter element */
  loom_search_result *r;
  int32_t unfit_cap;
} search;

/* ---- bounds ------------------------------------------------------------- */

/* The least step of a plan with m micro-batches: every device computes its
 * share of the layers' weight GEMMs (forward, twice that backward, once
 * more with recomputation) at the largest GEMM rate, and waits at least
 * for the pipeline's fill: with 1F1B or GPipe, the last stage's first
 * forward waits for pp - 1 stages' forwards and the first stage's last
 * backward for pp - 1 backwards, so the step is at least (m + pp - 1) / m
 * of the work; interleaved, the last device waits at least for pp - 1
 * chunks' forwards. */
static double step_bound(const search *S, const loom_mesh_plan *p) {
  double fwd = S->layers_fwd_s / S->devices;
  double work = fwd * (p->recompute ? 4.0 : 3.0);
  if (p->pp == 1) return work;
  double m = (double)S->batch / p->dp / p->micro_batch;
  if (p->schedule == LOOM_PIPE_INTERLEAVED) return work + (p->pp - 1) * fwd / (p->chunks * m);
  return work * (m + p->pp - 1) / m;
}

/* The least memory of a plan as the estimate counts it: its layers'
 * weight matrices (the stage's share, the tp shard) and the vocabulary's
 * rows, held as parameters, gradients and AdamW state, each sharded over
 * dp as its ZeRO stage says; and one micro-batch's activations of the
 * stage's layers (only their inputs with recomputation, else Korthikanti
 * et al.'s s b h (10 + 24 / tp) at 2-byte elements). */
static double memory_bound(const search *S, const loom_mesh_plan *p) {
  const loom_gpt_config *m = S->m;
  double h = m->d_model, e = S->elem, per_layer = loom_gpt_block_matrix_params(m);
  double stage_layers = (double)m->n_layer / p->pp;
  double params = per_layer * stage_layers / p->tp + (double)m->vocab * h / p->tp;
  double dp = p->dp, opt = e < 4 ? OPT_BYTES_MIXED : OPT_BYTES_F32;
  double state = params * e / (p->zero >= 3 ? dp : 1)   /* parameters */
                 + params * e / (p->zero >= 2 ? dp : 1) /* gradients */
                 + params * opt / (p->zero >= 1 ? dp : 1); /* AdamW */
  double sbh = (double)m->context * p->micro_batch * h;
  double acts = stage_layers * (p->recompute ? sbh * e
                                             : loom_estimate_block_activation_bytes(
                                                   m, p->micro_batch, p->tp, e, S->o->composite_attention));
  return state + acts;
}

/* ---- ranking -------------------------------------------------------------- */

static int plan_cmp(const loom_mesh_plan *a, const loom_mesh_plan *b) {
  const int32_t ka[] = {a->dp, a->tp, a->pp, a->micro_batch, (int32_t)a->schedule, a->chunks,
                        a->zero, a->recompute, a->tp_across_nodes};
  const int32_t kb[] = {b->dp, b->tp, b->pp, b->micro_batch, (int32_t)b->schedule, b->chunks,
                        b->zero, b->recompute, b->tp_across_nodes};
  for (size_t i = 0; i < sizeof ka / sizeof ka[0]; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

/* Faster first; ties by less memory, then by the plan's fields, so that
 * any visiting order ranks alike. */
static int cand_cmp(const loom_search_candidate *a, const loom_search_candidate *b) {
  if (a->est.step_s != b->est.step_s) return a->est.step_s < b->est.step_s ? -1 : 1;
  if (a->est.memory.total != b->est.memory.total)
    return a->est.memory.total < b->est.memory.total ? -1 : 1;
  return plan_cmp(&a->plan, &b->plan);
}

/* Inserts c into the sorted list of at most cap. */
static void keep(loom_search_candidate *list, int32_t *n, int32_t cap,
                 const loom_search_candidate *c) {
  int32_t at = *n;
  while (at > 0 && cand_cmp(c, &list[at - 1]) < 0) at--;
  if (at >= cap) return;
  int32_t last = *n < cap ? *n : cap - 1;
  memmove(&list[at + 1], &list[at], (size_t)(last - at) * sizeof *list);
  list[at] = *c;
  if (*n < cap) (*n)++;
}

static double kth_step(const search *S) {
  return S->r->n_best < S->K ? INFINITY : S->r->best[S->K - 1].est.step_s;
}

static void note_need(search *S, const loom_mesh_plan *p, double need) {
  if (need < S->r->least_need_bytes) {
    S->r->least_need_bytes = need;
    S->r->least_need_plan = *p;
  }
}

/* Rates one plan that passed the bounds; returns whether it fits. */
static loom_status rate(search *S, const loom_mesh_plan *p, double bound, bool *fits) {
  loom_search_result *r = S->r;
  loom_search_candidate c = {.plan = *p};
  LOOM_TRY(loom_estimate_gpt(S->ctx, S->m, S->batch, p, &S->eo, &c.est));
  r->estimated++;
  if (c.est.step_s < bound * (1 - 1e-9) || c.est.memory.total < memory_bound(S, p) * (1 - 1e-9))
    r->bound_violations++;
  note_need(S, p, c.est.memory.total);
  *fits = c.est.memory.total <= S->limit;
  if (!loom_mesh_plan_spec(p, S->batch, c.spec, sizeof c.spec)) c.spec[0] = '\0';
  if (!*fits) {
    r->unfit_count++;
    c.lost_by = LOOM_LOSS_MEMORY;
    keep(r->unfit, &r->n_unfit, S->unfit_cap, &c);
    return LOOM_STATUS_OK;
  }
  if (S->o->require_spec && !c.spec[0]) {
    r->no_spec++;
    if (!r->have_inexpressible || cand_cmp(&c, &r->inexpressible) < 0) r->inexpressible = c;
    r->have_inexpressible = true;
    return LOOM_STATUS_OK;
  }
  keep(r->best, &r->n_best, S->K, &c);
  return LOOM_STATUS_OK;
}

/* ---- enumeration ---------------------------------------------------------- */

typedef struct config {
  loom_pipe_schedule schedule;
  int32_t chunks, zero;
  bool recompute, across;
} config;

/* The schedule, ZeRO, recompute and placement choices of a mesh. */
static int32_t mesh_configs(const search *S, const mesh *me, config *out, int32_t cap) {
  int32_t n = 0;
  loom_pipe_schedule scheds[64];
  int32_t chunks[64], ns = 0;
  scheds[ns] = LOOM_PIPE_1F1B, chunks[ns++] = 1;
  if (me->pp > 1) {
    scheds[ns] = LOOM_PIPE_GPIPE, chunks[ns++] = 1;
    int32_t per_stage = S->m->n_layer / me->pp;
    for (int32_t v = 2; v <= per_stage && ns < 64; v++)
      if (per_stage % v == 0) scheds[ns] = LOOM_PIPE_INTERLEAVED, chunks[ns++] = v;
  }
  int32_t node = S->o->cluster->devices_per_node;
  for (int32_t s = 0; s < ns; s++)
    for (int32_t z = 0; z <= (me->dp > 1 ? 3 : 0); z++)
      for (int32_t rc = 0; rc < 2; rc++)
        for (int32_t across = 0; across < 2; across++) {
          if (across && me->tp == 1) continue;            /* no tp group to place */
          if (!across && node > 0 && me->tp > node) continue; /* cannot fit in a node */
          if (n < cap) out[n++] = (config){scheds[s], chunks[s], z, rc, across};
        }
  return n;
}

static loom_mesh_plan make_plan(const mesh *me, const config *c, int32_t mb) {
  return (loom_mesh_plan){.dp = me->dp, .tp = me->tp, .pp = me->pp, .micro_batch = mb,
                          .schedule = c->schedule, .chunks = c->chunks, .zero = c->zero,
                          .recompute = c->recompute, .tp_across_nodes = c->across};
}

static bool valid(search *S, const loom_mesh_plan *p) {
  return loom_mesh_plan_check(S->ctx, S->m, S->batch, p, S->o->cluster->devices_per_node) ==
         LOOM_STATUS_OK;
}

/* Every plan of one mesh; cut: the mesh's bound is past the K-th best, so
 * its plans are only counted. Micro-batch sizes go outermost and
 * ascending: plans of one size share the estimate's cached layer times,
 * and for each choice of the rest the step bound and the memory only grow
 * with the size, so a choice stops at the first size a bound cuts. */
static loom_status search_mesh(search *S, const mesh *me, bool cut) {
  loom_search_result *r = S->r;
  int64_t per_replica = S->batch / me->dp;
  enum { GO, STOP_TIME, STOP_MEMORY };
  config configs[MAX_CONFIGS];
  uint8_t stop[MAX_CONFIGS];
  int32_t nc = mesh_configs(S, me, configs, MAX_CONFIGS);
  memset(stop, cut ? STOP_TIME : GO, sizeof stop);
  for (int64_t mb = 1; mb <= per_replica; mb++) {
    if (per_replica % mb) continue;
    for (int32_t ci = 0; ci < nc; ci++) {
      loom_mesh_plan p = make_plan(me, &configs[ci], (int32_t)mb);
      if (!valid(S, &p)) continue;
      r->visited++;
      if (stop[ci] == STOP_TIME) {
        r->pruned_time++;
        continue;
      }
      if (stop[ci] == STOP_MEMORY) {
        r->pruned_memory++;
        continue;
      }
      double need = memory_bound(S, &p), bound = step_bound(S, &p);
      if (!S->o->exhaustive && need > S->limit) {
        note_need(S, &p, need);
        r->pruned_memory++;
        stop[ci] = STOP_MEMORY;
        continue;
      }
      if (!S->o->exhaustive && bound > kth_step(S)) {
        r->pruned_time++;
        stop[ci] = STOP_TIME;
        continue;
      }
      bool fits = false;
      LOOM_TRY(rate(S, &p, bound, &fits));
      if (!fits && !S->o->exhaustive) stop[ci] = STOP_MEMORY;
    }
  }
  return LOOM_STATUS_OK;
}

/* The least step bound of any plan of the mesh (without recomputation,
 * which only adds): every valid micro-batch size is tried, since a size
 * the interleaved schedule rejects may leave its least bound at a larger
 * one. */
static double mesh_bound(search *S, const mesh *me) {
  config configs[MAX_CONFIGS];
  int32_t nc = mesh_configs(S, me, configs, MAX_CONFIGS);
  int64_t per_replica = S->batch / me->dp;
  double best = INFINITY;
  for (int32_t ci = 0; ci < nc; ci++) {
    if (configs[ci].recompute) continue;
    for (int64_t mb = 1; mb <= per_replica; mb++) {
      if (per_replica % mb) continue;
      loom_mesh_plan p = make_plan(me, &configs[ci], (int32_t)mb);
      if (!valid(S, &p)) continue;
      best = fmin(best, step_bound(S, &p));
      break; /* the least valid size has the least bound */
    }
  }
  return best;
}

static int mesh_cmp(const void *a, const void *b) {
  const mesh *x = a, *y = b;
  if (x->bound != y->bound) return x->bound < y->bound ? -1 : 1;
  if (x->dp != y->dp) return x->dp > y->dp ? -1 : 1;
  return x->tp < y->tp ? -1 : x->tp > y->tp;
}

/* The meshes dp x tp x pp = devices that some plan can use. */
static loom_status find_meshes(search *S, mesh **out, int32_t *n) {
  *out = NULL;
  *n = 0;
  int32_t N = S->devices, cap = 0;
  mesh *list = NULL;
  for (int32_t tp = 1; tp <= N; tp++) {
    if (N % tp || S->m->n_head % tp || loom_gpt_kv_heads(S->m) % tp || S->m->d_ff % tp) continue;
    for (int32_t pp = 1; pp <= N / tp; pp++) {
      if ((N / tp) % pp || S->m->n_layer % pp) continue;
      int32_t dp = N / tp / pp;
      if (S->batch % dp) continue;
      mesh me = {dp, tp, pp, 0};
      me.bound = mesh_bound(S, &me);
      if (!isfinite(me.bound)) continue; /* no plan of it passes the check */
      if (*n == cap) {
        cap = cap ? 2 * cap : 16;
        mesh *grown = realloc(list, (size_t)cap * sizeof *list);
        if (!grown) {
          free(list);
          return loom_error(S->ctx, LOOM_STATUS_OUT_OF_MEMORY, "search: out of memory");
        }
        list = grown;
      }
      list[(*n)++] = me;
    }
  }
  *out = list;
  return LOOM_STATUS_OK;
}

/* ---- the search ------------------------------------------------------------- */

/* What each alternative lost by: the part of its step most over the
 * winner's. */
static void attribute(loom_search_candidate *c, const loom_search_candidate *w) {
  if (c == w) {
    c->lost_by = LOOM_LOSS_NONE;
    c->lost_s = 0;
    return;
  }
  if (c->lost_by == LOOM_LOSS_MEMORY) {
    c->lost_s = c->est.memory.total - w->est.memory.total;
    return;
  }
  const loom_estimate *a = &c->est, *b = &w->est;
  const double diff[] = {a->bubble_s - b->bubble_s,     a->tp_comm_s - b->tp_comm_s,
                         a->pp_comm_s - b->pp_comm_s,   a->dp_comm_s - b->dp_comm_s,
                         a->compute_s - b->compute_s,   a->optimizer_s - b->optimizer_s};
  const loom_search_loss why[] = {LOOM_LOSS_BUBBLE,  LOOM_LOSS_TP_COMM, LOOM_LOSS_PP_COMM,
                                  LOOM_LOSS_DP_COMM, LOOM_LOSS_COMPUTE, LOOM_LOSS_OPTIMIZER};
  c->lost_by = LOOM_LOSS_COMPUTE;
  c->lost_s = a->step_s - b->step_s;
  double most = 0;
  for (int i = 0; i < 6; i++)
    if (diff[i] > most) {
      most = diff[i];
      c->lost_by = why[i];
      c->lost_s = diff[i];
    }
}

static void attribute_all(loom_search_result *r) {
  if (!r->n_best) return;
  for (int32_t i = 0; i < r->n_best; i++) attribute(&r->best[i], &r->best[0]);
  /* only the plans that would have won matter: faster than the winner */
  int32_t kept = 0;
  for (int32_t i = 0; i < r->n_unfit; i++)
    if (r->unfit[i].est.step_s < r->best[0].est.step_s) r->unfit[kept++] = r->unfit[i];
  r->n_unfit = kept;
  for (int32_t i = 0; i < r->n_unfit; i++) attribute(&r->unfit[i], &r->best[0]);
  if (r->have_inexpressible && r->inexpressible.est.step_s >= r->best[0].est.step_s)
    r->have_inexpressible = false;
}

loom_status loom_plan_search(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                             int32_t devices, const loom_search_options *o,
                             loom_search_result *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "search: NULL result");
  memset(out, 0, sizeof *out);
  out->least_need_bytes = INFINITY;
  if (!m || !o || !o->cluster)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "search: a model and a cluster are needed");
  LOOM_TRY(loom_gpt_config_check(ctx, m));
  if (devices < 1 || global_batch < 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "search: %d devices and a batch of %lld: both must be at least 1",
                      (int)devices, (long long)global_batch);
  const loom_cluster *c = o->cluster;
  if (!(c->flops[o->precision] > 0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "search: %s gives no %s rate", c->name,
                      loom_precision_name(o->precision));
  double t0 = loom_now_s();
  search S = {.ctx = ctx, .m = m, .batch = global_batch, .devices = devices, .o = o, .r = out};
  S.eo = (loom_estimate_options){.cluster = c, .precision = o->precision,
                                 .element_bytes = o->element_bytes, .overlap = o->overlap,
                                 .composite_attention = o->composite_attention};
  S.K = o->top > 0 ? (o->top < MAX_TOP ? o->top : MAX_TOP) : DEFAULT_TOP;
  S.unfit_cap = S.K;
  S.limit = o->memory_limit > 0 ? o->memory_limit : c->memory_bytes;
  out->memory_limit = S.limit;
  out->global_batch = global_batch;
  /* as the estimate: 16-bit elements at bf16 and fp8 (tf32 computes on f32 storage) */
  S.elem = o->element_bytes > 0 ? o->element_bytes : o->precision >= LOOM_PRECISION_bf16 ? 2 : 4;
  double tokens = (double)global_batch * m->context;
  S.layers_fwd_s = tokens * 2.0 * loom_gpt_block_matrix_params(m) * m->n_layer /
                   (c->flops[o->precision] * BOUND_GEMM_EFFICIENCY);
  out->best = calloc((size_t)S.K, sizeof *out->best);
  out->unfit = calloc((size_t)S.unfit_cap, sizeof *out->unfit);
  if (!out->best || !out->unfit) {
    loom_search_result_free(out);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "search: out of memory");
  }
  mesh *meshes = NULL;
  int32_t n = 0;
  LOOM_TRY(find_meshes(&S, &meshes, &n));
  out->meshes = n;
  if (!n)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "search: no dp x tp x pp = %d devices fits the model: tp must divide the "
                      "%d heads (%d key/value heads) and d_ff %d, pp the %d layers, dp the batch "
                      "of %lld",
                      (int)devices, (int)m->n_head, (int)loom_gpt_kv_heads(m), (int)m->d_ff,
                      (int)m->n_layer,
                      (long long)global_batch);
  /* the meshes by bound: once one is past the K-th best, so is every later one */
  qsort(meshes, (size_t)n, sizeof *meshes, mesh_cmp);
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; !st && i < n; i++) {
    bool cut = !o->exhaustive && meshes[i].bound > kth_step(&S);
    out->meshes_pruned += cut;
    st = search_mesh(&S, &meshes[i], cut);
  }
  free(meshes);
  out->seconds = loom_now_s() - t0;
  if (st) return st;
  attribute_all(out);
  if (!out->n_best) {
    char what[128] = "";
    if (isfinite(out->least_need_bytes))
      loom_mesh_plan_describe(&out->least_need_plan, what, sizeof what);
    if (o->require_spec && out->no_spec)
      return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                        "search: no plan that Loom's built-in plans express fits in %.3g GB per "
                        "device (%lld that fit have no built-in spec)",
                        S.limit / 1e9, (long long)out->no_spec);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "search: no plan fits in %.3g GB per device; the smallest need found is "
                      "%.3g GB (%s)",
                      S.limit / 1e9, out->least_need_bytes / 1e9, what);
  }
  return LOOM_STATUS_OK;
}

/* ---- exact re-ranking ---------------------------------------------------------- */

static bool spec_listed(const loom_search_candidate *list, int32_t n, const char *spec) {
  for (int32_t i = 0; i < n; i++)
    if (!strcmp(list[i].spec, spec)) return true;
  return false;
}

/* Builds, lowers and simulates c's spec over g; false if any step fails. */
static bool simulate_spec(loom_ctx *ctx, const loom_graph *g, int32_t devices,
                          const loom_search_options *o, const loom_plan_lower_options *lo,
                          loom_search_candidate *c) {
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  loom_sim_result sr = {0};
  bool ok = loom_plan_builtin(ctx, g, c->spec, devices, &p) == LOOM_STATUS_OK &&
            loom_plan_lower(p, lo, &pp) == LOOM_STATUS_OK;
  /* elements as the estimate counts them, so that the two compare */
  double e = o->element_bytes > 0 ? o->element_bytes : o->precision >= LOOM_PRECISION_bf16 ? 2 : 4;
  loom_sim_options so = {.cluster = o->shared ? o->shared : o->cluster, .precision = o->precision,
                         .overlap = o->overlap, .element_bytes = e,
                         .cores = o->shared ? o->cores : 0};
  ok = ok && loom_plan_simulate(pp, &so, &sr) == LOOM_STATUS_OK;
  if (ok) {
    c->simulated = true;
    c->sim_step_s = sr.step_s;
    c->sim_comms = pp->n_comms;
    c->sim_peak_bytes = 0;
    for (int32_t d = 0; d < sr.n_devices; d++)
      if ((double)sr.devices[d].peak_bytes > c->sim_peak_bytes)
        c->sim_peak_bytes = (double)sr.devices[d].peak_bytes;
  }
  loom_sim_result_free(&sr);
  loom_plan_program_free(pp);
  loom_plan_free(p);
  return ok;
}

static int sim_cmp(const void *x, const void *y) {
  const loom_search_candidate *a = x, *b = y;
  if (a->sim_step_s != b->sim_step_s) return a->sim_step_s < b->sim_step_s ? -1 : 1;
  return strcmp(a->spec, b->spec);
}

loom_status loom_plan_search_rerank(loom_ctx *ctx, const loom_graph *g, int32_t devices,
                                    const loom_search_options *o,
                                    const loom_plan_lower_options *lo, loom_search_result *r) {
  if (!g || !o || !o->cluster || !r)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "search: rerank: NULL argument");
  if (!r->n_best) return LOOM_STATUS_OK;
  /* the best with a spec, and each pipelined one's interlaced variant */
  int32_t cap = 2 * r->n_best, n = 0;
  loom_search_candidate *list = calloc((size_t)cap, sizeof *list);
  if (!list) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "search: out of memory");
  for (int32_t i = 0; i < r->n_best; i++) {
    const loom_search_candidate *c = &r->best[i];
    if (!c->spec[0]) continue;
    list[n++] = *c;
    if (c->plan.pp < 2 || c->plan.schedule == LOOM_PIPE_INTERLEAVED) continue;
    loom_search_candidate v = *c;
    v.plan.schedule = LOOM_PIPE_GPIPE; /* the interlaced pipeline runs the GPipe order */
    if (!loom_mesh_plan_spec(&v.plan, r->global_batch, v.spec, sizeof v.spec - 16)) continue;
    size_t len = strlen(v.spec);
    snprintf(v.spec + len, sizeof v.spec - len, "+interlaced");
    v.est.step_s = NAN; /* the estimate has no model of it */
    if (!spec_listed(list, n, v.spec)) list[n++] = v;
  }
  double limit = r->memory_limit;
  int32_t fit = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!simulate_spec(ctx, g, devices, o, lo, &list[i])) {
      r->n_sim_failed++;
      continue;
    }
    r->n_simulated++;
    if (list[i].sim_peak_bytes <= limit) list[fit++] = list[i];
  }
  if (!fit) { /* nothing simulated fits: the estimate's ranking stands */
    free(list);
    return LOOM_STATUS_OK;
  }
  qsort(list, (size_t)fit, sizeof *list, sim_cmp);
  /* within the tie, the fewest comm ops win (the list stays sorted after) */
  int32_t win = 0;
  for (int32_t i = 1; i < fit && list[i].sim_step_s <= list[0].sim_step_s * (1 + LOOM_SEARCH_TIE);
       i++)
    if (list[i].sim_comms < list[win].sim_comms) win = i;
  loom_search_candidate w = list[win];
  memmove(list + 1, list, (size_t)win * sizeof *list);
  list[0] = w;
  if (fit > r->n_best) fit = r->n_best; /* best has room for n_best */
  memcpy(r->best, list, (size_t)fit * sizeof *list);
  r->n_best = fit;
  free(list);
  /* what each lost by: its extra comm ops where the tie decided, the
   * estimate's parts where the estimate agrees it is slower, else the
   * simulation alone */
  const loom_search_candidate *wp = &r->best[0];
  for (int32_t i = 0; i < r->n_best; i++) {
    loom_search_candidate *c = &r->best[i];
    bool agrees = isfinite(c->est.step_s) && isfinite(wp->est.step_s) &&
                  c->est.step_s >= wp->est.step_s;
    if (i > 0 && c->sim_step_s < wp->sim_step_s) {
      c->lost_by = LOOM_LOSS_SYNC;
      c->lost_s = c->sim_comms - wp->sim_comms;
    } else if (i == 0 || agrees) {
      c->lost_by = LOOM_LOSS_NONE;
      attribute(c, wp);
    } else {
      c->lost_by = LOOM_LOSS_SIMULATED;
      c->lost_s = c->sim_step_s - wp->sim_step_s;
    }
  }
  return LOOM_STATUS_OK;
}

void loom_search_result_free(loom_search_result *r) {
  if (!r) return;
  free(r->best);
  free(r->unfit);
  r->best = r->unfit = NULL;
  r->n_best = r->n_unfit = 0;
}

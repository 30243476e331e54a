/*
 * The automatic planner (parallel/search.h) against brute force: every
 * plan of the space enumerated here and rated by loom_estimate_gpt
 * directly. The winner is never slower than any fitting plan; the pruned
 * search prunes and still finds the brute-force winner; a memory limit
 * between the least need of the dp-only plans and of the others forces
 * tp or pp; the exact re-ranking agrees with lowering and simulating the
 * winner's spec by hand; and the errors.
 */
#include "common.h"

#include "parallel/builtin.h"
#include "parallel/search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

/* A made-up device: 100 TFLOP/s bf16, 1 TB/s memory, four to a node. */
static loom_cluster cluster(double memory) {
  return (loom_cluster){.name = "test", .device = "dev",
                        .flops = {[LOOM_PRECISION_f32] = 25e12, [LOOM_PRECISION_bf16] = 100e12},
                        .memory_bandwidth_Bps = 1e12, .memory_bytes = memory, .devices_per_node = 4,
                        .intra = {.kind = "link", .bandwidth_Bps = 100e9, .latency_s = 2e-6},
                        .inter = {.kind = "net", .bandwidth_Bps = 50e9, .latency_s = 5e-6, .nics = 1}};
}

static loom_gpt_config model(int32_t layers, int32_t width, int32_t heads, int32_t context,
                             int32_t vocab) {
  loom_gpt_config m;
  loom_gpt_config_default(&m);
  m.n_layer = layers, m.d_model = width, m.n_head = heads, m.context = context;
  m.d_ff = 4 * width, m.vocab = vocab, m.dropout = 0;
  return m;
}

/* Brute force over the space search.h states: what it found. */
typedef struct brute {
  int64_t valid;
  double best_step;        /* fastest fitting */
  loom_mesh_plan best;
  double least_need;       /* least memory of any plan */
  double least_dp_only, least_other; /* least memory: tp = pp = 1, and the rest */
  double slowest_fit;
} brute;

static brute brute_force(const loom_gpt_config *m, int64_t batch, int32_t N,
                         const loom_cluster *c, double limit) {
  brute b = {0, INFINITY, {0}, INFINITY, INFINITY, INFINITY, 0};
  loom_estimate_options eo = {.cluster = c, .precision = LOOM_PRECISION_bf16};
  for (int32_t tp = 1; tp <= N; tp++)
    for (int32_t pp = 1; pp * tp <= N; pp++) {
      if (N % (tp * pp)) continue;
      int32_t dp = N / (tp * pp);
      for (int32_t mb = 1; mb <= batch; mb++)
        for (int32_t s = 0; s < 3; s++)
          for (int32_t v = 1; v <= m->n_layer; v++)
            for (int32_t z = 0; z <= 3; z++)
              for (int32_t rc = 0; rc < 2; rc++)
                for (int32_t across = 0; across < 2; across++) {
                  if ((s == 2) != (v > 1) || (s > 0 && pp == 1) || (z && dp == 1) ||
                      (across && tp == 1))
                    continue;
                  loom_mesh_plan p = {dp, tp, pp, mb, (loom_pipe_schedule)s, v, z, rc, across};
                  if (loom_mesh_plan_check(ctx, m, batch, &p, c->devices_per_node)) continue;
                  loom_estimate e;
                  CHECK_OK(ctx, loom_estimate_gpt(ctx, m, batch, &p, &eo, &e));
                  b.valid++;
                  double need = e.memory.total;
                  b.least_need = fmin(b.least_need, need);
                  if (tp == 1 && pp == 1) b.least_dp_only = fmin(b.least_dp_only, need);
                  else b.least_other = fmin(b.least_other, need);
                  if (need > limit) continue;
                  b.slowest_fit = fmax(b.slowest_fit, e.step_s);
                  if (e.step_s < b.best_step) b.best_step = e.step_s, b.best = p;
                }
    }
  return b;
}

static bool same_plan(const loom_mesh_plan *a, const loom_mesh_plan *b) {
  return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->micro_batch == b->micro_batch &&
         a->schedule == b->schedule && a->chunks == b->chunks && a->zero == b->zero &&
         a->recompute == b->recompute && a->tp_across_nodes == b->tp_across_nodes;
}

/* A model whose GEMMs dominate, on 8 devices of two nodes, no memory limit
 * worth the name: the bounds prune, the winner is brute force's. */
static void test_against_brute_force(void) {
  loom_cluster c = cluster(1e15);
  loom_gpt_config m = model(4, 2048, 16, 512, 512);
  int64_t batch = 16;
  brute b = brute_force(&m, batch, 8, &c, 1e15);
  CHECK(b.valid > 100 && isfinite(b.best_step));

  loom_search_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16, .top = 3};
  loom_search_result r, ex;
  CHECK_OK(ctx, loom_plan_search(ctx, &m, batch, 8, &o, &r));
  o.exhaustive = true;
  CHECK_OK(ctx, loom_plan_search(ctx, &m, batch, 8, &o, &ex));
  /* the whole space is reached either way; only the pruned search skips */
  CHECK(r.visited == b.valid && ex.visited == b.valid);
  CHECK(ex.estimated == b.valid && ex.pruned_time == 0 && ex.pruned_memory == 0);
  CHECK(r.pruned_time > 0 && r.estimated < b.valid);
  CHECK(r.estimated + r.pruned_time + r.pruned_memory == r.visited);
  CHECK(r.bound_violations == 0 && ex.bound_violations == 0);
  /* the winner: brute force's, never slower than any fitting plan */
  CHECK(r.n_best == 3 && ex.n_best == 3);
  CHECK(r.best[0].est.step_s == b.best_step && ex.best[0].est.step_s == b.best_step);
  CHECK(same_plan(&r.best[0].plan, &ex.best[0].plan));
  CHECK(r.best[0].est.step_s <= b.slowest_fit);
  /* the top 3 alike, in order, each losing by a part of its step */
  for (int32_t i = 0; i < 3; i++) {
    CHECK(same_plan(&r.best[i].plan, &ex.best[i].plan));
    if (i) CHECK(r.best[i].est.step_s >= r.best[i - 1].est.step_s);
    CHECK((i == 0) == (r.best[i].lost_by == LOOM_LOSS_NONE));
    if (i) CHECK(r.best[i].lost_s >= 0 && r.best[i].lost_by != LOOM_LOSS_MEMORY);
  }
  loom_search_result_free(&r);
  loom_search_result_free(&ex);
}

/* A vocabulary large next to the width: dp alone holds every logit of a
 * sequence, tp a slice. A limit between the least need of the dp-only
 * plans and of the rest leaves only tp or pp. */
static void test_memory_forces_tp_or_pp(void) {
  loom_cluster c = cluster(1e15);
  loom_gpt_config m = model(2, 64, 4, 256, 16384);
  int64_t batch = 8;
  brute all = brute_force(&m, batch, 4, &c, 1e15);
  CHECK(all.least_other < all.least_dp_only);
  double limit = 0.5 * (all.least_other + all.least_dp_only);
  brute b = brute_force(&m, batch, 4, &c, limit);
  loom_search_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16, .memory_limit = limit};
  loom_search_result r;
  CHECK_OK(ctx, loom_plan_search(ctx, &m, batch, 4, &o, &r));
  CHECK(r.n_best >= 1);
  if (r.n_best) {
    CHECK(r.best[0].plan.tp > 1 || r.best[0].plan.pp > 1);
    CHECK(r.best[0].est.memory.total <= limit);
    CHECK(r.best[0].est.step_s == b.best_step); /* ties may differ in the plan */
  }
  CHECK(r.pruned_memory + r.unfit_count > 0);
  /* any plan listed as faster but unfit is over the limit */
  for (int32_t i = 0; i < r.n_unfit; i++)
    CHECK(r.unfit[i].lost_by == LOOM_LOSS_MEMORY && r.unfit[i].est.memory.total > limit &&
          r.unfit[i].est.step_s < r.best[0].est.step_s);
  loom_search_result_free(&r);
}

/* The exact re-ranking: each simulated plan's step is what lowering and
 * simulating its spec gives, the best sorted by it; the pipelined plans
 * bring their interlaced variant. */
static void test_rerank(void) {
  loom_cluster c = cluster(1e15);
  loom_gpt_config m = model(2, 64, 4, 32, 256);
  int64_t batch = 4;
  loom_search_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16, .top = 40,
                           .require_spec = true};
  loom_search_result r;
  CHECK_OK(ctx, loom_plan_search(ctx, &m, batch, 2, &o, &r));
  int32_t with_pp = 0;
  for (int32_t i = 0; i < r.n_best; i++) {
    CHECK(r.best[i].spec[0] != '\0');
    with_pp += r.best[i].plan.pp > 1 && r.best[i].plan.schedule != LOOM_PIPE_INTERLEAVED;
  }
  CHECK(with_pp > 0);
  int32_t before = r.n_best;
  loom_graph *g = NULL;
  loom_gpt_optim opt = {0.9, 0.95, 1e-8, 0.1, 0, NULL};
  int64_t rng = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &m, (int32_t)batch, m.context, &opt, &g, &rng));
  CHECK_OK(ctx, loom_plan_search_rerank(ctx, g, 2, &o, NULL, &r));
  CHECK(r.n_simulated > before / 2 && r.n_best >= 1);
  bool interlaced = false;
  double fastest = INFINITY;
  for (int32_t i = 0; i < r.n_best; i++) {
    CHECK(r.best[i].simulated && r.best[i].sim_comms > 0);
    if (i > 1) CHECK(r.best[i].sim_step_s >= r.best[i - 1].sim_step_s);
    interlaced |= strstr(r.best[i].spec, "+interlaced") != NULL;
    fastest = fmin(fastest, r.best[i].sim_step_s);
  }
  CHECK(interlaced);
  /* the tie: the winner is within it of the fastest, and no plan within
   * it meets fewer times; a faster loser lost by its extra comm ops */
  const loom_search_candidate *w = &r.best[0];
  CHECK(w->sim_step_s <= fastest * (1 + LOOM_SEARCH_TIE));
  for (int32_t i = 1; i < r.n_best; i++) {
    const loom_search_candidate *c = &r.best[i];
    if (c->sim_step_s <= fastest * (1 + LOOM_SEARCH_TIE)) CHECK(c->sim_comms >= w->sim_comms);
    if (c->sim_step_s < w->sim_step_s)
      CHECK(c->lost_by == LOOM_LOSS_SYNC && c->lost_s == c->sim_comms - w->sim_comms &&
            c->lost_s > 0);
  }
  /* the winner's step by hand: its spec built, lowered and simulated */
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_builtin(ctx, g, r.best[0].spec, 2, &p));
  CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  loom_sim_options so = {.cluster = &c, .precision = LOOM_PRECISION_bf16, .element_bytes = 2};
  loom_sim_result sr;
  CHECK_OK(ctx, loom_plan_simulate(pp, &so, &sr));
  CHECK(sr.step_s == r.best[0].sim_step_s);
  loom_sim_result_free(&sr);
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
  loom_search_result_free(&r);
}

static void test_errors(void) {
  loom_cluster c = cluster(1e15);
  loom_gpt_config m = model(2, 64, 4, 32, 256);
  loom_search_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_search_result r;
  /* 7 devices: tp 7 divides no 4 heads, pp 7 no 2 layers, dp 7 no batch of 16 */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_search(ctx, &m, 16, 7, &o, &r));
  CHECK(strstr(loom_ctx_error(ctx), "no dp x tp x pp = 7") != NULL);
  loom_search_result_free(&r);
  /* 1 kB per device: nothing fits; the least need is brute force's (every
   * plan estimated) */
  o.memory_limit = 1000;
  o.exhaustive = true;
  brute b = brute_force(&m, 16, 4, &c, 1000);
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_plan_search(ctx, &m, 16, 4, &o, &r));
  CHECK(strstr(loom_ctx_error(ctx), "smallest need") != NULL);
  CHECK(r.n_best == 0 && r.least_need_bytes == b.least_need);
  loom_search_result_free(&r);
  /* pruned: the least need reported is a bound at most the true one */
  o.exhaustive = false;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_plan_search(ctx, &m, 16, 4, &o, &r));
  CHECK(r.least_need_bytes > 1000 && r.least_need_bytes <= b.least_need);
  loom_search_result_free(&r);
  o.cluster = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_search(ctx, &m, 16, 4, &o, &r));
  loom_search_result_free(&r);
  o.cluster = &c;
  o.precision = LOOM_PRECISION_fp8; /* the cluster gives no fp8 rate */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_search(ctx, &m, 16, 4, &o, &r));
  loom_search_result_free(&r);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_against_brute_force();
  test_memory_forces_tp_or_pp();
  test_rerank();
  test_errors();
  loom_ctx_free(ctx);
  return loom_test_finish("test_search");
}

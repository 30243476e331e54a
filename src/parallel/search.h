/*
 * The automatic planner: the fastest mesh plan (estimate.h) for a GPT
 * (model/gpt.h) and a global batch on a cluster. The space is every
 * dp x tp x pp = N (tp dividing the heads and d_ff, pp the layers), every
 * micro-batch size dividing the replica's batch, the schedule (1F1B,
 * GPipe, interleaved with chunks dividing the stage's layers), ZeRO 0-3
 * (with dp > 1), recomputation on or off, and tp inside or across nodes.
 * Each candidate is rated by loom_estimate_gpt; a branch and bound keeps
 * that cheap:
 *
 *   - a lower bound on the step of each (dp, tp, pp): the weight GEMMs'
 *     FLOPs (the least any plan does) over N devices at the largest rate
 *     the simulator gives a GEMM, stretched by the least bubble the
 *     schedule allows; the meshes run in bound order, so once one's bound
 *     passes the K-th best step found, it and every later one are pruned;
 *   - the same bound per candidate, with its own micro-batch count and
 *     recomputation, before it is estimated; it grows with the micro-batch
 *     size, so the micro-batch loop stops at the first one it prunes;
 *   - a lower bound on memory (parameters, gradients and AdamW moments as
 *     ZeRO shards them) before estimating, and the micro-batch loop stops
 *     at the first size that does not fit (activations grow with it).
 *
 * docs/PLANNER.md describes the space, the bounds and the output.
 */
#ifndef LOOM_PARALLEL_SEARCH_H
#define LOOM_PARALLEL_SEARCH_H

#include "parallel/estimate.h"
#include "parallel/simulate.h"

#define LOOM_SEARCH_SPEC_MAX 96

typedef struct loom_search_options {
  const loom_cluster *cluster;
  loom_precision precision;
  double element_bytes;   /* as loom_estimate_options */
  bool overlap;
  double memory_limit;    /* bytes per device; 0: the cluster's capacity */
  int32_t top;            /* the best K kept; 0: 5 */
  bool exhaustive;        /* estimate every candidate: no bound prunes (brute force) */
  bool require_spec;      /* rank only plans a built-in spec expresses (they can run) */
  bool composite_attention; /* as loom_estimate_options */
  /* the exact re-ranking's devices, where they differ from `cluster`:
   * ranks time-sharing `cores` cores of `shared` (loom_sim_options.cores),
   * which the composed estimates can only rate as a fixed share of a core
   * each (loom_cluster_time_shared); NULL: cluster */
  const loom_cluster *shared;
  int32_t cores;
} loom_search_options;

/* What an alternative lost by against the winner: the part of the step
 * (estimate.h) with the largest excess over the winner's. */
typedef enum loom_search_loss {
  LOOM_LOSS_NONE = 0,    /* the winner */
  LOOM_LOSS_BUBBLE,
  LOOM_LOSS_TP_COMM,
  LOOM_LOSS_PP_COMM,
  LOOM_LOSS_DP_COMM,
  LOOM_LOSS_COMPUTE,     /* slower GEMMs (skinny shapes) or recomputation */
  LOOM_LOSS_OPTIMIZER,
  LOOM_LOSS_MEMORY,      /* faster, but does not fit */
  LOOM_LOSS_SIMULATED,   /* re-ranked: the exact simulation says slower */
  LOOM_LOSS_SYNC,        /* re-ranked: as fast within LOOM_SEARCH_TIE, more comm ops */
} loom_search_loss;
const char *loom_search_loss_name(loom_search_loss l);

typedef struct loom_search_candidate {
  loom_mesh_plan plan;
  loom_estimate est;
  char spec[LOOM_SEARCH_SPEC_MAX]; /* "" when no built-in spec expresses it */
  loom_search_loss lost_by;
  double lost_s;            /* that part's excess over the winner's (seconds; for
                               LOOM_LOSS_SYNC the comm ops a step more) */
  /* exact re-ranking (loom_plan_search_rerank), when done: */
  bool simulated;
  double sim_step_s;
  double sim_peak_bytes;    /* the busiest device's peak */
  int32_t sim_comms;        /* comm ops a step (each a point where the ranks meet) */
} loom_search_candidate;

typedef struct loom_search_result {
  int32_t n_best;               /* fitting plans, fastest first: best[0] wins */
  loom_search_candidate *best;
  int32_t n_unfit;              /* faster than the winner but over the limit, fastest first */
  loom_search_candidate *unfit;
  bool have_inexpressible;      /* require_spec: the fastest fitting plan no spec expresses, */
  loom_search_candidate inexpressible; /* if faster than the winner */
  double memory_limit;          /* the limit applied */
  int64_t global_batch;
  double least_need_bytes;      /* the smallest memory need seen (estimated or bound) */
  loom_mesh_plan least_need_plan;
  int32_t meshes;               /* valid (dp, tp, pp) */
  int32_t meshes_pruned;        /* whole meshes cut by their bound */
  int64_t visited;              /* valid candidates reached (estimated or pruned) */
  int64_t estimated;            /* rated by loom_estimate_gpt */
  int64_t pruned_time;          /* cut by the step bound, unestimated */
  int64_t pruned_memory;        /* cut by the memory bound or the micro-batch stop */
  int64_t unfit_count;          /* estimated, over the limit */
  int64_t no_spec;              /* estimated, fitting, but no built-in spec (require_spec) */
  int64_t bound_violations;     /* estimates below their own bound: 0 unless a bound is wrong */
  double seconds;               /* the search's wall time */
  /* re-ranking */
  int32_t n_simulated;
  int32_t n_sim_failed;
} loom_search_result;

/* Searches the plans of model m at global_batch sequences of m->context
 * tokens on `devices` devices of o->cluster. Errors: no factorization of
 * devices fits the model and batch (INVALID_ARGUMENT, naming what divides
 * what); no plan fits in memory (OUT_OF_MEMORY, naming the smallest need
 * found; *out still holds the counts and least_need_*). out is released
 * with loom_search_result_free either way. */
loom_status loom_plan_search(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                             int32_t devices, const loom_search_options *o,
                             loom_search_result *out);

/* The exact re-ranking, for device counts where lowering is affordable:
 * g is the model's training graph at the global batch (loom_gpt_build_train);
 * each of r's best plans with a spec is built (loom_plan_builtin), lowered
 * and simulated (loom_plan_simulate), and so is each pipelined one with
 * "+interlaced" (a family only the built-ins have). The fitting ones
 * (simulated peak within the limit) are re-sorted by simulated step, and
 * the winner is the one with the fewest comm ops a step among those
 * within LOOM_SEARCH_TIE of the fastest (each op is a point where every
 * member waits for the slowest, which the simulator rates only on
 * average: docs/PLANNER.md, "Ties"); a plan that fails to build or lower
 * is dropped and counted. lo: the lowering's options (NULL: defaults). */
#define LOOM_SEARCH_TIE 0.02
loom_status loom_plan_search_rerank(loom_ctx *ctx, const loom_graph *g, int32_t devices,
                                    const loom_search_options *o,
                                    const loom_plan_lower_options *lo, loom_search_result *r);

void loom_search_result_free(loom_search_result *r);

/* "dp2 tp4 pp8 micro-batch 2 1f1b zero1 recompute tp-in-node": the plan in
 * words (the micro-batch in sequences; interleaved: "interleavedx4", 4 chunks). */
void loom_mesh_plan_describe(const loom_mesh_plan *p, char *buf, size_t n);

#endif

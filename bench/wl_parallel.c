/*
 * `loom bench parallel`: issue 9's targets, measured side by side in one
 * run, medians of --runs.
 *
 *   - Data-parallel scaling: `loom train` on a compute-dominated GPT
 *     (d_model 256, batch 32, 1 thread) as 1 process, and as
 *     `mpirun -np 2 loom train --plan dp2` (1 thread each), alternating;
 *     the ratio of their training tokens/s (setup and compile excluded:
 *     the trainer's own figure).
 *   - Comm overlap: the same dp2 (and pp2) runs with --comm-overlap on and
 *     off, alternating, and the ratio of their tokens/s.
 *   - Gradient buckets: dp2 with gradients in 1 MiB buckets and with one
 *     all-reduce per gradient (the default), alternating.
 *   - Planning: applying a built-in plan, validating and lowering it and
 *     cutting every device's program out, for a 48-layer GPT on 64
 *     virtual devices.
 */
#include "harness.h"

#include "core/clock.h"
#include "model/gpt.h"
#include "parallel/builtin.h"
#include "parallel/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The `loom train` flags both figures use, for `steps` steps. */
static void train_flags(char *flags, size_t size, int32_t steps) {
  snprintf(flags, size,
           "train --d-model 256 --heads 8 --layers 2 --batch 32 --context 64 --steps %d "
           "--threads 1 --log-every 100000",
           steps);
}

/* Runs commands a and b alternately `runs` times (at most 64), medians of
 * their tokens/s into *ma and *mb; the command that failed, or NULL. */
static const char *alternate(const char *a, const char *b, int32_t runs, bool quiet,
                             const char *what, double *ma, double *mb) {
  double ta[64], tb[64];
  int32_t k = 0;
  for (; k < runs && k < 64; k++) {
    if (!quiet) fprintf(stderr, "bench: %s, run %d of %d\n", what, k + 1, runs);
    ta[k] = loom_bench_train_tok_s(a);
    tb[k] = loom_bench_train_tok_s(b);
    if (ta[k] <= 0 || tb[k] <= 0) return ta[k] <= 0 ? a : b;
  }
  *ma = loom_median(ta, k);
  *mb = loom_median(tb, k);
  return NULL;
}

static void dp_scaling(FILE *f, bool json, const loom_bench_opts *o) {
  char exe[4096];
  if (!loom_bench_mpi_exe(exe, sizeof exe)) {
    fprintf(f, json ? "{\"bench\":\"dp_scaling\",\"skipped\":\"no mpirun\"}\n"
                    : "dp scaling: skipped (no mpirun)\n");
    return;
  }
  int32_t steps = o->small ? 8 : 40, runs = o->runs < 1 ? 1 : o->runs;
  char flags[256], one[5000], two[5000];
  train_flags(flags, sizeof flags, steps);
  snprintf(one, sizeof one, "OMP_NUM_THREADS=1 '%s' %s 2>&1", exe, flags);
  loom_bench_mpirun_cmd(two, sizeof two, 2, exe, flags, "dp2", "");
  double ma = 0, mb = 0;
  const char *failed = alternate(one, two, runs, o->quiet, "dp scaling", &ma, &mb);
  if (failed) {
    fprintf(f, json ? "{\"bench\":\"dp_scaling\",\"error\":\"a run failed\"}\n"
                    : "dp scaling: a run failed (%s)\n",
            failed);
    return;
  }
  int32_t k = runs < 64 ? runs : 64;
  if (json)
    fprintf(f,
            "{\"bench\":\"dp_scaling\",\"steps\":%d,\"runs\":%d,\"one_tok_s\":%.0f,"
            "\"dp2_tok_s\":%.0f,\"ratio\":%.3f}\n",
            steps, k, ma, mb, mb / ma);
  else
    fprintf(f,
            "dp scaling (GPT d_model 256, batch 32, %d steps, 1 thread per process, median of "
            "%d):\n  1 process %8.0f tok/s\n  dp2       %8.0f tok/s  = %.2fx  (target >= 1.7x: "
            "%s)\n",
            steps, k, ma, mb, mb / ma, mb / ma >= 1.7 ? "met" : "not met");
}

/* The same plan run two ways (extra flags a, b), alternating: medians and
 * their ratio as a row named `bench`. */
static void two_ways(FILE *f, bool json, const loom_bench_opts *o, const char *bench,
                     const char *plan, const char *a, const char *b, const char *na,
                     const char *nb) {
  char exe[4096];
  if (!loom_bench_mpi_exe(exe, sizeof exe)) {
    fprintf(f, json ? "{\"bench\":\"%s\",\"skipped\":\"no mpirun\"}\n" : "%s: skipped (no mpirun)\n",
            bench);
    return;
  }
  int32_t steps = o->small ? 8 : 40, runs = o->runs < 1 ? 1 : o->runs;
  char flags[256], ca[5000], cb[5000], what[96];
  train_flags(flags, sizeof flags, steps);
  loom_bench_mpirun_cmd(ca, sizeof ca, 2, exe, flags, plan, a);
  loom_bench_mpirun_cmd(cb, sizeof cb, 2, exe, flags, plan, b);
  snprintf(what, sizeof what, "%s %s", bench, plan);
  double ma = 0, mb = 0;
  const char *failed = alternate(ca, cb, runs, o->quiet, what, &ma, &mb);
  if (failed) {
    fprintf(f, json ? "{\"bench\":\"%s\",\"error\":\"a run failed\"}\n" : "%s: a run failed (%s)\n",
            bench, failed);
    return;
  }
  int32_t k = runs < 64 ? runs : 64;
  if (json)
    fprintf(f,
            "{\"bench\":\"%s\",\"plan\":\"%s\",\"steps\":%d,\"runs\":%d,\"%s_tok_s\":%.0f,"
            "\"%s_tok_s\":%.0f,\"ratio\":%.3f}\n",
            bench, plan, steps, k, na, ma, nb, mb, ma / mb);
  else
    fprintf(f, "%s %s (same model, %d steps, median of %d): %s %8.0f tok/s, %s %8.0f tok/s = %.3fx\n",
            bench, plan, steps, k, na, ma, nb, mb, ma / mb);
  fflush(f);
}

/* dp2 and pp2 with comm ops overlapping compute and blocking, alternating. */
static void comm_overlap(FILE *f, bool json, const loom_bench_opts *o) {
  static const char *const plans[] = {"dp2", "pp2"};
  for (size_t p = 0; p < sizeof plans / sizeof plans[0]; p++)
    two_ways(f, json, o, "comm_overlap", plans[p], "--comm-overlap on", "--comm-overlap off", "on",
             "off");
}

static void plan_time(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = o->small ? 8 : 48;
  c.d_model = 256;
  c.n_head = 8;
  c.d_ff = 1024;
  /* as `loom train --plan` builds it: attention dropout inside the kernels */
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = "cpu", .rng = LOOM_RNG_FUSED);
  loom_gpt_optim opt = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                        .seed = 1, .session = &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  if (loom_gpt_build_train(ctx, &c, 64, 64, &opt, &g, &per_step)) {
    fprintf(f, "plan time: %s\n", loom_ctx_error(ctx));
    return;
  }
  static const char *const specs[] = {"dp4xtp4xpp4", "dp8xtp8", "dp64"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    double tot[16], lower_s[16];
    int32_t runs = o->runs < 1 ? 1 : (o->runs > 16 ? 16 : o->runs), k = 0;
    int32_t nodes = 0, comms = 0;
    for (; k < runs; k++) {
      double t0 = loom_now_s(), t1 = 0;
      loom_plan *p = NULL;
      loom_plan_program *pp = NULL;
      loom_status st = loom_plan_builtin(ctx, g, specs[s], 64, &p);
      if (!st) st = loom_plan_lower(p, NULL, &pp);
      t1 = loom_now_s();
      for (int32_t d = 0; !st && d < 64; d++) {
        loom_graph *dg = NULL;
        st = loom_plan_device_graph(pp, d, &dg, NULL, NULL);
        loom_graph_free(dg);
      }
      double t2 = loom_now_s();
      if (pp) {
        nodes = pp->global->n_nodes;
        comms = pp->n_comms;
      }
      loom_plan_program_free(pp);
      loom_plan_free(p);
      if (st) {
        fprintf(f, "plan time %s: %s\n", specs[s], loom_ctx_error(ctx));
        break;
      }
      tot[k] = t2 - t0;
      lower_s[k] = t1 - t0;
    }
    if (k < runs) continue;
    double mt = loom_median(tot, k), ml = loom_median(lower_s, k);
    if (json)
      fprintf(f,
              "{\"bench\":\"plan_time\",\"plan\":\"%s\",\"layers\":%d,\"devices\":64,"
              "\"global_nodes\":%d,\"comms\":%d,\"plan_lower_s\":%.3f,\"total_s\":%.3f}\n",
              specs[s], c.n_layer, nodes, comms, ml, mt);
    else
      fprintf(f,
              "plan time %-12s %d-layer GPT (%d nodes) on 64 devices: %d global nodes, %d comm "
              "ops; plan+validate+lower %.2fs, + 64 device programs %.2fs (target <= 10 s: %s)\n",
              specs[s], c.n_layer, g->n_nodes, nodes, comms, ml, mt, mt <= 10.0 ? "met" : "not met");
  }
  loom_graph_free(g);
}

bool loom_bench_run_parallel(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o) {
  plan_time(ctx, f, json, o);
  fflush(f);
  dp_scaling(f, json, o);
  fflush(f);
  two_ways(f, json, o, "gradient_buckets", "dp2", "--bucket-bytes 1048576", "", "buckets",
           "one_each");
  comm_overlap(f, json, o);
  return true;
}

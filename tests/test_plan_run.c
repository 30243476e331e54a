/*
 * Plans run for real: each device's program in its own thread, as a cpu
 * session (stitched kernels), its comm ops through the in-process
 * communicator. Two steps of the GPT training step (dropout on) under each
 * built-in plan: the loss and every weight and AdamW moment, gathered,
 * match the single-device cpu run; and a state piece the first step wrote
 * is what the second read (the second step's loss matches too).
 *
 * Comm ops overlap computation by default (each device's comm stream);
 * for dp2, tp2, pp2 and dp2+zero2 the plan runs again with overlap off,
 * and every gathered output of every step is bit-identical.
 * LOOM_TEST_PLAN_MPI=1 leaves the plans the MPI tests also train to them
 * (see main).
 */
#include "common.h"

#include "model/gpt.h"
#include "parallel/builtin.h"
#include "runtime/plan_runner.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, T = 8, STEPS = 2 };

static loom_gpt_config config(void) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 4;
  c.context = 8;
  c.d_ff = 64;
  c.dropout = 0.1;
  return c;
}

static loom_session_options session_options(void) {
  return LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_STITCH, .rng = LOOM_RNG_FUSED);
}

typedef struct shared {
  const loom_plan_program *pp;
  loom_comm **comms;
  loom_tensor **in;       /* whole inputs, step inputs updated by step */
  int32_t n_in, n_out;
  loom_tensor **got[STEPS]; /* per step: whole outputs, gathered (rank 0's) */
  bool overlap;
  int64_t comm_tasks;   /* rank 0's comm ops run on its stream */
  int32_t n_async_comm; /* rank 0's comm steps joined after later compute */
  bool failed;
} shared;

typedef struct job {
  shared *sh;
  int32_t rank;
} job;

static void set_step(loom_tensor **in, int32_t k) {
  *(float *)loom_tensor_data(in[LOOM_GPT_IN_STEP]) = (float)(k + 1);
  *(float *)loom_tensor_data(in[LOOM_GPT_IN_LR]) = 1e-2f;
  *(int64_t *)loom_tensor_data(in[LOOM_GPT_IN_RNG_BASE]) = 1000 * k;
}

static void *device_main(void *arg) {
  job *j = arg;
  shared *sh = j->sh;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return NULL;
  loom_ctx_set_threads(ctx, 1);
  loom_session_options so = session_options();
  loom_plan_runner *r = NULL;
  loom_status st = loom_plan_runner_new(ctx, sh->pp, sh->comms[j->rank], &so, &r);
  if (!st) loom_plan_runner_set_comm_overlap(r, sh->overlap);
  if (!st) st = loom_plan_runner_load(r, (const loom_tensor *const *)sh->in);
  for (int32_t k = 0; !st && k < STEPS; k++) {
    /* the step inputs are the same on every rank: rank 0's copy is read-only here */
    st = loom_plan_runner_step(r, (const loom_tensor *const *)sh->in);
    for (int32_t o = 0; !st && o < sh->n_out; o++) {
      loom_tensor *whole = NULL;
      const loom_type *t = loom_value_type(sh->pp->global, sh->pp->global->outputs[o]);
      st = loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &whole);
      if (!st) st = loom_plan_runner_gather_output(r, o, whole);
      if (j->rank == 0 && !st) sh->got[k][o] = whole;
      else loom_tensor_free(whole);
    }
    /* everyone has set the step inputs for k + 1 only after all gathered */
    if (!st) st = loom_comm_barrier(sh->comms[j->rank], ctx);
    if (!st && j->rank == 0 && k + 1 < STEPS) set_step(sh->in, k + 1);
    if (!st) st = loom_comm_barrier(sh->comms[j->rank], ctx);
  }
  if (!st && j->rank == 0) {
    loom_session_stats stats;
    st = loom_session_get_stats(loom_plan_runner_session(r), &stats);
    sh->n_async_comm = stats.n_async_comm;
    sh->comm_tasks = loom_plan_runner_comm_tasks(r);
  }
  if (st) {
    fprintf(stderr, "rank %d: %s\n", j->rank, loom_ctx_error(ctx));
    sh->failed = true;
    loom_comm_abort(sh->comms[j->rank], loom_ctx_error(ctx));
  }
  loom_plan_runner_free(r);
  loom_ctx_free(ctx);
  return NULL;
}

static loom_tensor **clone_all(loom_ctx *ctx, loom_tensor **in, int32_t n) {
  loom_tensor **c = calloc((size_t)n + 1, sizeof *c);
  for (int32_t i = 0; i < n; i++) {
    int64_t shape[LOOM_MAX_RANK];
    for (int32_t d = 0; d < loom_tensor_rank(in[i]); d++) shape[d] = loom_tensor_dim(in[i], d);
    CHECK_OK(ctx, loom_tensor_new(ctx, loom_tensor_dtype(in[i]), loom_tensor_rank(in[i]), shape, &c[i]));
    memcpy(loom_tensor_data(c[i]), loom_tensor_data(in[i]),
           (size_t)loom_tensor_numel(in[i]) * (loom_tensor_dtype(in[i]) == LOOM_DTYPE_I64 ? 8 : 4));
  }
  return c;
}

/* The single-device reference: STEPS steps of the cpu session, in place. */
static loom_tensor **single_device(loom_ctx *ctx, const loom_graph *g, loom_tensor **in,
                                   loom_tensor ***before_last) {
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_session *s = NULL;
  loom_session_options so = session_options();
  CHECK_OK(ctx, loom_session_new(ctx, g, &so, &s));
  loom_tensor **out = calloc((size_t)no + 1, sizeof *out);
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &out[0]));
  for (int32_t o = 1; o < no; o++) out[o] = in[LOOM_GPT_IN_PARAMS + o - 1];
  for (int32_t k = 0; s && k < STEPS; k++) {
    set_step(in, k);
    if (k == STEPS - 1) *before_last = clone_all(ctx, in, ni);
    CHECK_OK(ctx, loom_session_run(s, ni, (const loom_tensor *const *)in, no, out));
  }
  loom_session_free(s);
  loom_tensor **res = clone_all(ctx, out, no);
  loom_tensor_free(out[0]);
  free(out);
  return res;
}

/* Runs pp on n threads for STEPS steps from inputs in0 into *sh (whose
 * got[] the caller frees). */
static void run_plan(loom_ctx *ctx, const loom_plan_program *pp, loom_tensor **in0, int32_t n,
                     bool overlap, shared *sh) {
  *sh = (shared){.pp = pp, .n_in = loom_graph_num_inputs(pp->global),
                 .n_out = loom_graph_num_outputs(pp->global), .overlap = overlap};
  sh->in = clone_all(ctx, in0, sh->n_in);
  set_step(sh->in, 0);
  for (int32_t k = 0; k < STEPS; k++) sh->got[k] = calloc((size_t)sh->n_out + 1, sizeof *sh->got[k]);
  sh->comms = calloc((size_t)n, sizeof *sh->comms);
  CHECK_OK(ctx, loom_comm_inproc_new(ctx, n, sh->comms));
  pthread_t th[8];
  job jobs[8];
  for (int32_t r = 0; r < n; r++) {
    jobs[r] = (job){sh, r};
    pthread_create(&th[r], NULL, device_main, &jobs[r]);
  }
  for (int32_t r = 0; r < n; r++) pthread_join(th[r], NULL);
  CHECK(!sh->failed);
  for (int32_t r = 0; r < n; r++) loom_comm_free(sh->comms[r]);
  free(sh->comms);
  loom_test_free_tensors(sh->in, sh->n_in);
}

static void free_got(shared *sh) {
  for (int32_t k = 0; k < STEPS; k++) loom_test_free_tensors(sh->got[k], sh->n_out);
}

/* True if every output of every step has the same bits in a and b. */
static bool same_bits(const shared *a, const shared *b) {
  bool same = !a->failed && !b->failed;
  for (int32_t k = 0; same && k < STEPS; k++)
    for (int32_t o = 0; same && o < a->n_out; o++) {
      const loom_tensor *x = a->got[k][o], *y = b->got[k][o];
      same = x && y && loom_tensor_numel(x) == loom_tensor_numel(y) &&
             memcmp(loom_tensor_data(x), loom_tensor_data(y),
                    (size_t)loom_tensor_numel(x) * loom_dtype_size(loom_tensor_dtype(x))) == 0;
    }
  return same;
}

/* dp2's gradients in buckets of at most this many bytes: several, so
 * that some overlap the backward */
#define SMALL_BUCKETS 16384

static void check_plan(loom_ctx *ctx, const loom_graph *g, loom_tensor **in0, loom_tensor **want,
                       loom_tensor **before_last, const char *spec, int32_t n, bool both) {
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  bool dp2 = strcmp(spec, "dp2") == 0;
  loom_plan_lower_options lo = {.comm = loom_comm_model_default(),
                                .bucket_bytes = dp2 ? SMALL_BUCKETS : 0};
  CHECK_OK(ctx, loom_plan_builtin(ctx, g, spec, n, &p));
  if (p) CHECK_OK(ctx, loom_plan_lower(p, &lo, &pp));
  if (!pp) {
    loom_plan_free(p);
    return;
  }
  shared sh;
  run_plan(ctx, pp, in0, n, true, &sh);
  double worst = 0;
  for (int32_t o = 0; !sh.failed && o < sh.n_out; o++) {
    const loom_tensor *base = o ? before_last[LOOM_GPT_IN_PARAMS + o - 1] : NULL;
    double e = loom_test_update_error(want[o], sh.got[STEPS - 1][o], base);
    if (!(e <= 2e-3)) fprintf(stderr, "%s: output %d off by %g\n", spec, o, e);
    CHECK(e <= 2e-3);
    worst = fmax(worst, e);
  }
  /* every comm op of rank 0 went through its stream */
  CHECK(sh.comm_tasks > 0 && sh.comm_tasks % STEPS == 0);
  /* the gradient all-reduces run while the backward of earlier layers
   * does: all but the last bucket's (its readers come after the compute
   * that does not wait on it: fusion/plan_merge.c, unit_key; 2 of 7 in
   * the graph's own order) */
  if (dp2) CHECK(sh.n_async_comm > 0 && sh.n_async_comm + 1 >= sh.comm_tasks / STEPS);
  printf("%-10s on %d threads: worst error %.1e of an update's rms; %lld comm ops on the stream, "
         "%d overlapping compute\n",
         spec, n, worst, (long long)sh.comm_tasks / STEPS, sh.n_async_comm);
  if (both) {
    shared off;
    run_plan(ctx, pp, in0, n, false, &off);
    CHECK(off.comm_tasks == 0);
    bool same = same_bits(&sh, &off);
    CHECK(same);
    printf("%-10s overlap off: %s\n", spec, same ? "bit-identical" : "DIFFERENT");
    free_got(&off);
  }
  if (dp2) {
    /* an all-reduce of a bucket sums each element in the same order as
     * one per gradient: the same bits, in fewer collectives */
    loom_plan_program *apart = NULL;
    lo.bucket_bytes = 0;
    CHECK_OK(ctx, loom_plan_lower(p, &lo, &apart));
    if (apart) {
      CHECK(apart->n_comms > pp->n_comms && pp->n_comms > 1);
      for (int32_t d = 0; d < n; d++)
        CHECK(apart->stats[d].comm_bytes[LOOM_OP_ALL_REDUCE] ==
              pp->stats[d].comm_bytes[LOOM_OP_ALL_REDUCE]);
      shared one_each;
      run_plan(ctx, apart, in0, n, true, &one_each);
      bool same = same_bits(&sh, &one_each);
      CHECK(same);
      printf("%-10s %d buckets of <= %d bytes against %d all-reduces: %s\n", spec, pp->n_comms,
             SMALL_BUCKETS, apart->n_comms, same ? "bit-identical" : "DIFFERENT");
      free_got(&one_each);
    }
    loom_plan_program_free(apart);
  }
  free_got(&sh);
  loom_plan_program_free(pp);
  loom_plan_free(p);
}

/* What a device runs: device 0's program of spec, compiled as the plan
 * runner compiles it (GEMM calls, their flops, the arena). */
static loom_session_stats compiled(loom_ctx *ctx, const loom_graph *g, const char *spec, int32_t n) {
  loom_session_stats stats = {0};
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  loom_graph *dg = NULL;
  loom_session *s = NULL;
  loom_session_options so = session_options();
  CHECK_OK(ctx, loom_plan_builtin(ctx, g, spec, n, &p));
  if (p) CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  if (pp) CHECK_OK(ctx, loom_plan_device_graph(pp, 0, &dg, NULL, NULL));
  if (dg) CHECK_OK(ctx, loom_session_new(ctx, dg, &so, &s));
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &stats));
  loom_session_free(s);
  loom_graph_free(dg);
  loom_plan_program_free(pp);
  loom_plan_free(p);
  return stats;
}

/* +recompute really recomputes: on a step whose activations outweigh its
 * state (4 layers, 32 sequences of 64 tokens), the compiled program of
 * the recomputing plan calls more GEMMs (the layers' forward again, in
 * the backward: its copies survive common-subexpression elimination) and
 * its arena is smaller, the layers' activations dying with the forward. */
static void test_recompute_compiled(loom_ctx *ctx) {
  loom_gpt_config c = config();
  c.n_layer = 4;
  c.context = 64;
  c.dropout = 0;
  loom_session_options so = session_options();
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5,
                      .session = &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, 32, 64, &o, &g, &per_step));
  static const char *const specs[][2] = {{"dp2", "dp2+recompute"}, {"pp2", "pp2+recompute"}};
  for (int32_t k = 0; g && k < (int32_t)(sizeof specs / sizeof specs[0]); k++) {
    loom_session_stats a = compiled(ctx, g, specs[k][0], 2), b = compiled(ctx, g, specs[k][1], 2);
    printf("%s: %d GEMMs, %.1f MFLOP, arena %.2f MiB; %s: %d GEMMs, %.1f MFLOP, arena %.2f MiB\n",
           specs[k][0], a.n_gemm, a.gemm_flops * 1e-6, a.peak_bytes / 1048576.0, specs[k][1],
           b.n_gemm, b.gemm_flops * 1e-6, b.peak_bytes / 1048576.0);
    CHECK(b.n_gemm > a.n_gemm && b.gemm_flops > 1.15 * a.gemm_flops);
    CHECK(b.peak_bytes < 0.75 * a.peak_bytes);
  }
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_ctx_set_threads(ctx, 1);
  loom_gpt_config c = config();
  loom_session_options so = session_options();
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5,
                      .session = &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, B, T, &o, &g, &per_step));
  if (!g) return loom_test_finish("test_plan_run");
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_tensor **in = loom_test_gpt_inputs(ctx, g, 3);
  set_step(in, 0);
  loom_tensor **work = clone_all(ctx, in, ni), **before = NULL;
  loom_tensor **want = single_device(ctx, g, work, &before);
  /* mpi: the suite's MPI tests (test_plan_mpi_*, tests/CMakeLists.txt)
   * also train this plan, as processes on a 4-layer GPT for 3 steps */
  static const struct {
    const char *spec;
    int32_t n;
    bool both; /* also with overlap off */
    bool mpi;
  } plans[] = {{"dp2", 2, true, true},           {"tp2", 2, true, true},
               {"dp2xtp2", 4, false, true},      {"dp2+zero2", 2, true, true},
               {"dp4+zero3", 4, false, true},    {"pp2", 2, true, true},
               {"pp2+gpipe+mb4", 2, false, false}, {"dp2xpp2", 4, false, false},
               {"tp2xpp2", 4, false, true},      {"pp2+interlaced", 2, false, true},
               {"tp2+recompute", 2, false, false}, {"dp2+recompute", 2, false, true},
               {"pp2+recompute", 2, false, false}};
  /* LOOM_TEST_QUICK (the sanitizer build): the plans of two devices that
   * are also run with overlap off, once each. LOOM_TEST_PLAN_MPI=1 (set by
   * ctest where MPI runs the test_plan_mpi_* tests): the plans those run
   * are left to them, but for the ones checked with overlap off too. Every
   * device program is a compile of its own (about 3.5 s of CPU each):
   * this leaves out 14 of the 33, and the in-process groups of four
   * devices are still run by dp2xpp2. */
  bool quick = getenv("LOOM_TEST_QUICK") && atoi(getenv("LOOM_TEST_QUICK")) != 0;
  bool by_mpi = getenv("LOOM_TEST_PLAN_MPI") && atoi(getenv("LOOM_TEST_PLAN_MPI")) != 0;
  for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
    if ((quick || by_mpi) && !plans[i].both && (quick || plans[i].mpi)) {
      printf("%-10s left to %s\n", plans[i].spec,
             quick ? "the full suite (LOOM_TEST_QUICK)" : "test_plan_mpi (LOOM_TEST_PLAN_MPI)");
      continue;
    }
    check_plan(ctx, g, in, want, before, plans[i].spec, plans[i].n, plans[i].both && !quick);
  }
  loom_test_free_tensors(in, ni);
  loom_test_free_tensors(work, ni);
  loom_test_free_tensors(before, ni);
  loom_test_free_tensors(want, no);
  loom_graph_free(g);
  test_recompute_compiled(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_plan_run");
}

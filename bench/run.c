/*
 * Running one workload in every mode. Each mode gets one session, reused
 * for all its runs: a warm-up run first (its outputs are checked against
 * the first mode that ran), then --runs timed runs, of which the median
 * is reported. The cpu modes run interleaved, one run of each mode per
 * round, so that noise from other processes on a shared machine falls on
 * every mode alike and their ratios stay fair. The reference mode (the
 * oracle, slow) runs on its own first, with at most 3 timed runs.
 *
 * Inputs are deterministic pseudo-random data (a fixed generator seeded by
 * each input's name); outputs go to tensors allocated once per workload,
 * except that an output named "new.X" (the next value of input X: training
 * state, docs/PARALLEL.md "ties") is input X's own tensor, updated in place
 * run after run as the trainer and the peers' optimizers update theirs.
 * Each mode's checked warm-up run starts from the initial inputs.
 *
 * The rng workload is not a graph: its runner is at the end of this file.
 */
#include "harness.h"
#include "core/clock.h"

#include "ir/dtype.h"
#include "perf/rng_rate.h"
#include "runtime/trace.h"
#include "rng/philox_fast.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REFERENCE_MAX_RUNS 3
/* A mode whose outputs differ more than this from the baseline's is flagged. */
#define ERR_WARN 1e-3

/* The cpu modes are fusion modes, named by loom.h's list. */
static const loom_fusion_mode mode_fusion[LOOM_BENCH_MODE_COUNT] = {
    [LOOM_BENCH_EAGER] = LOOM_FUSION_EAGER,
    [LOOM_BENCH_NONE] = LOOM_FUSION_NONE,
    [LOOM_BENCH_LOOP] = LOOM_FUSION_LOOP,
    [LOOM_BENCH_STITCH] = LOOM_FUSION_STITCH,
    [LOOM_BENCH_FROZEN] = LOOM_FUSION_STITCH};

const char *loom_bench_mode_name(loom_bench_mode m) {
  if (m == LOOM_BENCH_REFERENCE) return "reference";
  if (m == LOOM_BENCH_FROZEN) return "frozen";
  return m > 0 && m < LOOM_BENCH_MODE_COUNT ? loom_fusion_mode_name(mode_fusion[m]) : "?";
}

/* ---- inputs -------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits: exact in f32. */
static float unit(uint64_t *s) { return (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f); }

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; s && *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

loom_status loom_bench_make_inputs(loom_ctx *ctx, const loom_bench_graph *b, loom_tensor **in) {
  const loom_graph *g = b->g;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    LOOM_TRY(loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
    if (b->given && i < b->n_given && b->given[i]) { /* checked against t when given */
      memcpy(loom_tensor_data(in[i]), loom_tensor_data(b->given[i]),
             (size_t)loom_tensor_numel(in[i]) * loom_dtype_size(t->dtype));
      continue;
    }
    uint64_t seed = name_hash(g->values[g->inputs[i]].name);
    int64_t n = loom_type_numel(t);
    void *p = loom_tensor_data(in[i]);
    loom_bench_fill fill = i < b->n_fill ? b->fill[i] : LOOM_BENCH_FILL_UNIFORM;
    if (fill == LOOM_BENCH_FILL_LABELS) {
      uint64_t classes = (uint64_t)(b->classes > 0 ? b->classes : 1);
      for (int64_t k = 0; k < n; k++)
        loom_store(t->dtype, p, k, (double)(splitmix64(&seed) % classes));
      continue;
    }
    if (t->dtype != LOOM_DTYPE_F32) continue; /* zeros (tensor_new) */
    float *f = p;
    for (int64_t k = 0; k < n; k++) {
      switch (fill) {
      case LOOM_BENCH_FILL_UNIFORM: f[k] = 2.0f * unit(&seed) - 1.0f; break;
      case LOOM_BENCH_FILL_POSITIVE: f[k] = unit(&seed); break;
      case LOOM_BENCH_FILL_GAIN: f[k] = 1.0f + 0.2f * unit(&seed) - 0.1f; break;
      case LOOM_BENCH_FILL_SMALL: f[k] = 0.02f * (2.0f * unit(&seed) - 1.0f); break;
      case LOOM_BENCH_FILL_STEP: f[k] = 10.0f; break;
      case LOOM_BENCH_FILL_LABELS: break;
      }
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- one workload -------------------------------------------------------- */

typedef struct wl_state {
  loom_ctx *ctx;
  const loom_bench_opts *o;
  const loom_bench_workload *w;
  loom_bench_graph b;
  int32_t n_in, n_out;
  loom_tensor **in, **out;
  const loom_tensor **in_frozen; /* in with NULL for the params (the frozen mode's) */
  int32_t *tie; /* per output: the input it updates in place, or -1 */
  void **init;  /* per input: its first values, if an output updates it */
  void **base; /* the baseline mode's outputs (copies) */
  bool have_base;
  loom_bench_mode base_mode;
  loom_session *ses[LOOM_BENCH_MODE_COUNT];
  double *t[LOOM_BENCH_MODE_COUNT]; /* timed runs */
  double *tg[LOOM_BENCH_MODE_COUNT]; /* their time in GEMM steps */
} wl_state;

static void wl_free(wl_state *s) {
  for (int32_t m = 0; m < LOOM_BENCH_MODE_COUNT; m++) {
    loom_session_free(s->ses[m]);
    free(s->t[m]);
    free(s->tg[m]);
  }
  for (int32_t i = 0; s->in && i < s->n_in; i++)
    loom_tensor_free(s->in[i]);
  for (int32_t i = 0; s->out && i < s->n_out; i++)
    if (!s->tie || s->tie[i] < 0) loom_tensor_free(s->out[i]);
  for (int32_t i = 0; s->init && i < s->n_in; i++)
    free(s->init[i]);
  free(s->tie);
  free(s->init);
  for (int32_t i = 0; s->base && i < s->n_out; i++)
    free(s->base[i]);
  free(s->in);
  free(s->in_frozen);
  free(s->out);
  free(s->base);
  loom_bench_graph_clear(&s->b);
}

/* The input output i updates in place: X for an output named "new.X" of
 * X's type; -1 for any other. */
static int32_t tied_input(const loom_graph *g, int32_t i) {
  const char *nm = g->output_names[i];
  if (!nm || strncmp(nm, "new.", 4) != 0) return -1;
  const loom_type *t = loom_value_type(g, g->outputs[i]);
  for (int32_t k = 0; k < g->n_inputs; k++) {
    const loom_value_info *v = &g->values[g->inputs[k]];
    if (!v->name || strcmp(v->name, nm + 4) != 0) continue;
    bool same = v->type.dtype == t->dtype && v->type.rank == t->rank;
    for (int32_t d = 0; same && d < t->rank; d++) same = v->type.shape[d] == t->shape[d];
    return same ? k : -1;
  }
  return -1;
}

static loom_status wl_setup(wl_state *s) {
  loom_ctx *ctx = s->ctx;
  const loom_graph *g = s->b.g;
  s->n_in = g->n_inputs;
  s->n_out = g->n_outputs;
  s->in = loom_calloc(ctx, (size_t)(s->n_in ? s->n_in : 1), sizeof *s->in);
  s->out = loom_calloc(ctx, (size_t)(s->n_out ? s->n_out : 1), sizeof *s->out);
  s->base = loom_calloc(ctx, (size_t)(s->n_out ? s->n_out : 1), sizeof *s->base);
  if (!s->in || !s->out || !s->base) return LOOM_STATUS_OUT_OF_MEMORY;
  s->tie = loom_calloc(ctx, (size_t)(s->n_out ? s->n_out : 1), sizeof *s->tie);
  s->init = loom_calloc(ctx, (size_t)(s->n_in ? s->n_in : 1), sizeof *s->init);
  if (!s->tie || !s->init) return LOOM_STATUS_OUT_OF_MEMORY;
  LOOM_TRY(loom_bench_make_inputs(ctx, &s->b, s->in));
  s->in_frozen = loom_calloc(ctx, (size_t)(s->n_in ? s->n_in : 1), sizeof *s->in_frozen);
  if (!s->in_frozen) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < s->n_in; i++)
    s->in_frozen[i] = loom_graph_input_is_param(g, i) ? NULL : s->in[i];
  for (int32_t i = 0; i < s->n_out; i++) {
    const loom_type *t = loom_value_type(g, g->outputs[i]);
    s->tie[i] = tied_input(g, i);
    int32_t k = s->tie[i];
    if (k < 0 || s->init[k]) {
      s->tie[i] = -1;
      LOOM_TRY(loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &s->out[i]));
      continue;
    }
    size_t nb = (size_t)loom_tensor_numel(s->in[k]) * loom_dtype_size(t->dtype);
    s->init[k] = loom_malloc(ctx, nb ? nb : 1);
    if (!s->init[k]) return LOOM_STATUS_OUT_OF_MEMORY;
    memcpy(s->init[k], loom_tensor_data(s->in[k]), nb);
    s->out[i] = s->in[k];
  }
  return LOOM_STATUS_OK;
}

/* Puts the inputs that outputs update back to their first values. */
static void restore_inputs(wl_state *s) {
  for (int32_t k = 0; k < s->n_in; k++)
    if (s->init[k])
      memcpy(loom_tensor_data(s->in[k]), s->init[k],
             (size_t)loom_tensor_numel(s->in[k]) * loom_dtype_size(loom_tensor_dtype(s->in[k])));
}

static size_t tensor_bytes(const loom_tensor *t) {
  return (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
}

/* Saves the outputs as the baseline, or compares them with it. */
static loom_status check_outputs(wl_state *s, loom_bench_result *r) {
  if (!s->have_base) {
    for (int32_t i = 0; i < s->n_out; i++) {
      size_t nb = tensor_bytes(s->out[i]);
      s->base[i] = loom_malloc(s->ctx, nb ? nb : 1);
      if (!s->base[i]) return LOOM_STATUS_OUT_OF_MEMORY;
      memcpy(s->base[i], loom_tensor_data(s->out[i]), nb);
    }
    s->have_base = true;
    s->base_mode = r->mode;
    return LOOM_STATUS_OK;
  }
  double err = 0.0;
  for (int32_t i = 0; i < s->n_out; i++) {
    loom_dtype dt = loom_tensor_dtype(s->out[i]);
    int64_t n = loom_tensor_numel(s->out[i]);
    const void *got = loom_tensor_data(s->out[i]);
    double scale = 1.0, diff = 0.0;
    for (int64_t k = 0; k < n; k++) {
      double w = fabs(loom_load(dt, s->base[i], k));
      if (w > scale) scale = w;
    }
    for (int64_t k = 0; k < n; k++) {
      double d = fabs(loom_load(dt, got, k) - loom_load(dt, s->base[i], k));
      if (!(d <= diff)) diff = d; /* NaN counts as the largest */
    }
    if (!(diff / scale <= err)) err = diff / scale;
  }
  r->checked = true;
  r->baseline = s->base_mode;
  r->max_err = err;
  return LOOM_STATUS_OK;
}

static void progress(const wl_state *s, const char *what, const char *mode) {
  if (s->o->quiet) return;
  fprintf(stderr, "bench: %s: %s%s%s\n", s->w->name, what, mode ? " " : "", mode ? mode : "");
  fflush(stderr);
}

static void fail(wl_state *s, loom_bench_result *r) {
  r->outcome = LOOM_BENCH_FAILED;
  snprintf(r->note, sizeof r->note, "%s", loom_ctx_error(s->ctx));
  loom_session_free(s->ses[r->mode]);
  s->ses[r->mode] = NULL;
  if (!s->o->quiet)
    fprintf(stderr, "bench: %s: %s failed: %s\n", s->w->name, loom_bench_mode_name(r->mode),
            r->note);
}

/* One run of mode m; with gemm_seconds, also its time in GEMM steps, from
 * the context's trace (the --trace one, or one recorded for this run). */
static loom_status run_once(wl_state *s, loom_bench_mode m, double *seconds,
                            double *gemm_seconds) {
  bool own = gemm_seconds && !s->ctx->trace && loom_ctx_trace_begin(s->ctx) == LOOM_STATUS_OK;
  double g0 = gemm_seconds ? loom_trace_seconds(s->ctx->trace, "gemm") : 0.0;
  double t0 = loom_now_s();
  const loom_tensor *const *in =
      m == LOOM_BENCH_FROZEN ? s->in_frozen : (const loom_tensor *const *)s->in;
  loom_status st = loom_session_run(s->ses[m], s->n_in, in, s->n_out, s->out);
  if (seconds) *seconds = loom_now_s() - t0;
  if (gemm_seconds) *gemm_seconds = loom_trace_seconds(s->ctx->trace, "gemm") - g0;
  if (own) {
    s->ctx->trace_free(s->ctx->trace);
    s->ctx->trace = NULL;
  }
  return st;
}

/* Prepares mode m: a session, the warm-up run (compiles where a backend
 * compiles lazily, touches memory) and the output check. */
static bool prepare_mode(wl_state *s, loom_bench_mode m, loom_bench_result *r, int32_t runs) {
  progress(s, "preparing", loom_bench_mode_name(m));
  loom_session_options so =
      LOOM_SESSION_OPTIONS(.backend = m == LOOM_BENCH_REFERENCE ? "ref"
                                      : s->o->backend            ? s->o->backend
                                                                 : "cpu",
                           .fusion = mode_fusion[m], .gemm = s->o->gemm,
                           .attention = s->o->attention);
  loom_status st = loom_session_new(s->ctx, s->b.g, &so, &s->ses[m]);
  for (int32_t i = 0; !st && m == LOOM_BENCH_FROZEN && i < s->n_in; i++)
    if (!s->in_frozen[i]) st = loom_session_freeze_input(s->ses[m], i, s->in[i]);
  if (!st) st = loom_session_get_stats(s->ses[m], &r->stats);
  if (!st && m >= LOOM_BENCH_NONE) {
    /* the same graph again: what compiling costs with the kernel cache warm */
    loom_session *again = NULL;
    loom_session_stats st2;
    st = loom_session_new(s->ctx, s->b.g, &so, &again);
    if (!st) st = loom_session_get_stats(again, &st2);
    if (!st) {
      r->have_warm = true;
      r->warm_compile_s = st2.compile_seconds;
      r->warm_cache_hit = st2.cache_hit;
    }
    loom_session_free(again);
  }
  if (!st) {
    /* the warm-up stays out of --trace: a process's first GEMM and the
     * first touch of memory would read as a slow step */
    struct loom_trace *trace = s->ctx->trace;
    s->ctx->trace = NULL;
    restore_inputs(s); /* every mode's checked run starts from the same state */
    st = run_once(s, m, NULL, NULL);
    s->ctx->trace = trace;
  }
  /* what the first run packed */
  if (!st && m == LOOM_BENCH_FROZEN) st = loom_session_get_stats(s->ses[m], &r->stats);
  if (!st) st = check_outputs(s, r);
  if (!st) {
    s->t[m] = loom_calloc(s->ctx, (size_t)runs, sizeof *s->t[m]);
    s->tg[m] = loom_calloc(s->ctx, (size_t)runs, sizeof *s->tg[m]);
    if (!s->t[m] || !s->tg[m]) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  if (st) {
    fail(s, r);
    return false;
  }
  if (r->checked && !(r->max_err <= ERR_WARN) && !s->o->quiet)
    fprintf(stderr, "bench: warning: %s: %s differs from %s by %.3g (relative)\n", s->w->name,
            loom_bench_mode_name(m), loom_bench_mode_name(r->baseline), r->max_err);
  return true;
}

static void finish_mode(wl_state *s, loom_bench_result *r, int32_t runs) {
  double *t = s->t[r->mode];
  r->runs = runs;
  r->median_s = loom_median(t, runs); /* sorts t */
  r->min_s = t[0];
  r->gemm_s = s->b.gemm_flops > 0 ? loom_median(s->tg[r->mode], runs) : 0.0;
  r->outcome = LOOM_BENCH_RAN;
  loom_session_free(s->ses[r->mode]);
  s->ses[r->mode] = NULL;
}

/* Run k of mode m; a failure marks the mode failed and no longer live. */
static bool timed_run(wl_state *s, loom_bench_row *row, bool *live, int32_t m, int32_t k) {
  double *tg = s->b.gemm_flops > 0 ? &s->tg[m][k] : NULL;
  if (run_once(s, (loom_bench_mode)m, &s->t[m][k], tg) == LOOM_STATUS_OK) return true;
  fail(s, &row->r[m]);
  live[m] = false;
  return false;
}

/* Runs the wanted modes into row; false if one failed. */
static bool run_modes(wl_state *s, loom_bench_row *row) {
  const loom_bench_opts *o = s->o;
  bool ok = true;
  loom_bench_result *ref = &row->r[LOOM_BENCH_REFERENCE];
  if (row->wanted[LOOM_BENCH_REFERENCE]) {
    int32_t runs = o->runs < REFERENCE_MAX_RUNS ? o->runs : REFERENCE_MAX_RUNS;
    if (!o->small && !o->with_reference) {
      ref->outcome = LOOM_BENCH_SKIPPED;
      snprintf(ref->note, sizeof ref->note,
               "too slow at full size (--with-reference runs it; --size small runs it quickly)");
    } else if (prepare_mode(s, LOOM_BENCH_REFERENCE, ref, runs)) {
      progress(s, "timing", "reference");
      loom_status st = LOOM_STATUS_OK;
      for (int32_t k = 0; !st && k < runs; k++)
        st = run_once(s, LOOM_BENCH_REFERENCE, &s->t[LOOM_BENCH_REFERENCE][k], NULL);
      if (st)
        fail(s, ref);
      else
        finish_mode(s, ref, runs);
    }
    ok = ref->outcome != LOOM_BENCH_FAILED;
  }
  bool live[LOOM_BENCH_MODE_COUNT] = {false};
  for (int32_t m = LOOM_BENCH_EAGER; m < LOOM_BENCH_MODE_COUNT; m++)
    if (row->wanted[m]) {
      live[m] = prepare_mode(s, (loom_bench_mode)m, &row->r[m], o->runs);
      ok = ok && live[m];
    }
  /* The memory roof at this workload's footprint, one run of each variant
   * per round (roof.c): the same noise, and the same cache state, as the
   * modes' runs. */
  loom_bench_roof_run roof;
  bool have_roof = false;
  if (o->roof_kit && s->w->memory_bound && row->min_bytes > 0) {
    progress(s, "preparing", "roof");
    if (loom_bench_roof_begin(s->ctx, o->roof_kit, o->threads, row->min_bytes, o->runs, &roof)) {
      ok = false;
      fprintf(stderr, "bench: %s: measuring the roof: %s\n", s->w->name, loom_ctx_error(s->ctx));
    } else {
      have_roof = true;
    }
  }
  progress(s, "timing", NULL);
  /* Interleaved, round k runs every mode once, then the roof: the modes
   * share the machine's noise, and each run starts from the caches the
   * others left. Back to back, each mode runs all its runs in a row, as
   * the peer scripts time theirs, and the roof's rounds come after. */
  if (o->back_to_back) {
    for (int32_t m = LOOM_BENCH_EAGER; m < LOOM_BENCH_MODE_COUNT; m++)
      for (int32_t k = 0; live[m] && k < o->runs; k++) ok = timed_run(s, row, live, m, k) && ok;
    for (int32_t k = 0; have_roof && k < o->runs; k++) loom_bench_roof_round(&roof, k);
  } else {
    for (int32_t k = 0; k < o->runs; k++) {
      for (int32_t m = LOOM_BENCH_EAGER; m < LOOM_BENCH_MODE_COUNT; m++)
        if (live[m]) ok = timed_run(s, row, live, m, k) && ok;
      if (have_roof) loom_bench_roof_round(&roof, k);
    }
  }
  if (have_roof) {
    loom_bench_roof_end(&roof, &row->roof);
    row->have_roof = true;
  }
  for (int32_t m = LOOM_BENCH_EAGER; m < LOOM_BENCH_MODE_COUNT; m++)
    if (live[m]) finish_mode(s, &row->r[m], o->runs);
  return ok;
}

bool loom_bench_run_workload(loom_ctx *ctx, const loom_bench_opts *o,
                             const loom_bench_workload *w, loom_bench_row *row) {
  memset(row, 0, sizeof *row);
  row->w = w;
  for (int32_t m = 0; m < LOOM_BENCH_MODE_COUNT; m++) {
    row->wanted[m] = o->modes[m];
    row->r[m].mode = (loom_bench_mode)m;
  }
  /* --attention decomposed also keeps the backward a builder makes
   * decomposed (loom_bench_make_backward rewrites before autodiff) */
  wl_state s = {.ctx = ctx, .o = o, .w = w, .b = {.attention = o->attention}};
  progress(&s, "building the graph", NULL);
  loom_status st = w->build(ctx, w, o->small, &s.b);
  if (!st) st = wl_setup(&s);
  if (st) {
    for (int32_t m = 0; m < LOOM_BENCH_MODE_COUNT; m++) {
      row->r[m].outcome = LOOM_BENCH_FAILED;
      snprintf(row->r[m].note, sizeof row->r[m].note, "building the workload: %s",
               loom_ctx_error(ctx));
    }
    if (!o->quiet) fprintf(stderr, "bench: %s: %s\n", w->name, row->r[0].note);
    wl_free(&s);
    return false;
  }
  /* frozen params matter where GEMMs read them, and mean nothing where
   * the workload updates them (a training step) */
  bool params = false;
  for (int32_t i = 0; i < s.n_in; i++) params |= s.in_frozen[i] == NULL;
  for (int32_t i = 0; i < s.n_out; i++)
    params &= s.tie[i] < 0 || s.in_frozen[s.tie[i]] != NULL;
  row->wanted[LOOM_BENCH_FROZEN] &= params && s.b.gemm_flops > 0;
  snprintf(row->shape, sizeof row->shape, "%s", s.b.shape);
  row->min_bytes = s.b.min_bytes;
  row->gemm_flops = s.b.gemm_flops;
  bool ok = run_modes(&s, row);
  /* speedups between modes: time(b) / time(a) on a's line */
  for (int32_t a = 0; a < LOOM_BENCH_MODE_COUNT; a++)
    for (int32_t b = 0; b < LOOM_BENCH_MODE_COUNT; b++)
      if (a != b && row->r[a].outcome == LOOM_BENCH_RAN && row->r[b].outcome == LOOM_BENCH_RAN &&
          row->wanted[a] && row->wanted[b] && row->r[a].median_s > 0)
        row->r[a].vs[b] = row->r[b].median_s / row->r[a].median_s;
  wl_free(&s);
  return ok;
}

/* ---- `loom bench rng` ------------------------------------------------------
 * The random bytes per second of every Philox4x32 path (rng/philox_fast.h),
 * measured by loom_philox_bench (perf/rng_rate.h) on one thread (per core)
 * and on all threads (in total), each next to the scalar reference path at
 * the same rounds and thread count. Issue 4, point 1; docs/PERFORMANCE.md
 * ("RNG") describes the output. */

/* The rounds measured when --rounds is not given: the standard 10 and
 * FlashAttention's 7. */
static const int32_t default_rounds[] = {10, 7};

/* issue 4's target: vectorised Philox >= 4x the scalar reference per core
 * on AVX-512. */
#define TARGET_SPEEDUP 4.0

/* A finite number or 0: JSON has no NaN or infinity. */
static double rng_fin(double x) { return isfinite(x) ? x : 0.0; }

/* Why path cannot run here. */
static const char *skip_reason(int path) {
  if (!LOOM_PHILOX_HAVE_X86) return "not compiled in (x86 only)";
  if (path == LOOM_PHILOX_PATH_AVX2) return "this CPU lacks AVX2 or FMA";
  if (path == LOOM_PHILOX_PATH_AVX512) return "this CPU lacks AVX-512F";
  return "not supported here";
}

/* One measured figure: bytes/s of path at rounds on threads threads. */
typedef struct rng_point {
  double bytes_per_s; /* < 0: failed */
  double vs_ref;      /* bytes_per_s / the ref path's (0: n/a) */
} rng_point;

static void json_point(FILE *f, int path, int32_t rounds, int32_t threads, const rng_point *p,
                       const loom_bench_rng_opts *o, double loadavg) {
  fprintf(f, "{\"workload\": \"rng\", \"path\": \"%s\", \"rounds\": %d",
          loom_philox_path_name(path), (int)rounds);
  if (p->bytes_per_s < 0) {
    fprintf(f, ", \"threads\": %d, \"error\": \"loom_philox_bench failed\"}\n", (int)threads);
    return;
  }
  fprintf(f,
          ", \"bytes_per_s\": %.6g, \"threads\": %d, \"per_core_bytes_per_s\": %.6g, "
          "\"vs_ref\": %.4g, \"best\": %s, \"seconds\": %.3g, \"loadavg_1m\": %.3g}\n",
          rng_fin(p->bytes_per_s), (int)threads, rng_fin(p->bytes_per_s / threads),
          rng_fin(p->vs_ref), path == loom_philox_best_path() ? "true" : "false", o->seconds,
          rng_fin(loadavg));
}

static void json_skipped(FILE *f, int path, int32_t rounds) {
  fprintf(f, "{\"workload\": \"rng\", \"path\": \"%s\", \"rounds\": %d, \"skipped\": \"%s\"}\n",
          loom_philox_path_name(path), (int)rounds, skip_reason(path));
}

/* "12.34" GB/s or "FAILED". */
static const char *gbps(char *buf, size_t n, double bytes_per_s) {
  if (bytes_per_s < 0)
    snprintf(buf, n, "FAILED");
  else
    snprintf(buf, n, "%.2f", bytes_per_s / 1e9);
  return buf;
}

static const char *times(char *buf, size_t n, double x) {
  if (x > 0)
    snprintf(buf, n, "x%.2f", x);
  else
    snprintf(buf, n, "-");
  return buf;
}

bool loom_bench_run_rng(FILE *f, bool json, const loom_bench_rng_opts *o) {
  int32_t rounds_list[2], n_rounds = 0;
  if (o->rounds >= 0) {
    rounds_list[n_rounds++] = o->rounds;
  } else {
    for (size_t k = 0; k < sizeof default_rounds / sizeof default_rounds[0]; k++)
      rounds_list[n_rounds++] = default_rounds[k];
  }
  /* Per core: one thread. In total: every thread, unless that is one. */
  int32_t thread_counts[2] = {1, o->threads}, n_threads = o->threads > 1 ? 2 : 1;
  int n_paths = loom_philox_path_count();
  double loadavg = loom_bench_loadavg();
  bool ok = true;
  double ref_avx512_vs = 0.0; /* the target: avx512 vs ref, 1 thread, 10 rounds */
  bool have_target = false;

  if (!json) {
    fprintf(f,
            "\nrng: Philox4x32 random bytes per second (GB/s = 1e9 bytes/s), each path on 1\n"
            "thread (per core) and on %d threads (in total); vs ref = rate / the scalar\n"
            "reference's at the same rounds and threads; ~%.2g s per figure, median of 5\n"
            "windows; load average %.2f at the start. Best path here: %s.\n",
            (int)o->threads, o->seconds, loadavg, loom_philox_path_name(loom_philox_best_path()));
  }
  for (int32_t ri = 0; ri < n_rounds; ri++) {
    int32_t rounds = rounds_list[ri];
    rng_point pt[LOOM_PHILOX_PATH_COUNT][2];
    memset(pt, 0, sizeof pt);
    if (!json) {
      fprintf(f, "\n  rounds %-3d %10s %8s", (int)rounds, "1 thr GB/s", "vs ref");
      if (n_threads > 1) {
        char head[32];
        snprintf(head, sizeof head, "%d thr GB/s", (int)o->threads);
        fprintf(f, " %13s %8s %12s %8s", head, "vs ref", "per core", "scaling");
      }
      fputc('\n', f);
    }
    for (int path = 0; path < n_paths && path < LOOM_PHILOX_PATH_COUNT; path++) {
      const char *name = loom_philox_path_name(path);
      if (!loom_philox_path_supported(path)) {
        if (json)
          json_skipped(f, path, rounds);
        else
          fprintf(f, "  %-10s skipped: %s\n", name, skip_reason(path));
        fflush(f);
        continue;
      }
      for (int32_t t = 0; t < n_threads; t++) {
        if (!o->quiet)
          fprintf(stderr, "bench: rng %s, %d rounds, %d thread%s\n", name, (int)rounds,
                  (int)thread_counts[t], thread_counts[t] == 1 ? "" : "s");
        rng_point *p = &pt[path][t];
        p->bytes_per_s = loom_philox_bench(path, rounds, thread_counts[t], o->seconds);
        if (p->bytes_per_s < 0) ok = false;
        /* ref is path 0, measured first */
        double ref = pt[LOOM_PHILOX_PATH_REF][t].bytes_per_s;
        p->vs_ref = ref > 0 && p->bytes_per_s > 0 ? p->bytes_per_s / ref : 0.0;
        if (json) {
          json_point(f, path, rounds, thread_counts[t], p, o, loadavg);
          fflush(f);
        }
      }
      if (path == LOOM_PHILOX_PATH_AVX512 && rounds == 10 && pt[path][0].vs_ref > 0) {
        ref_avx512_vs = pt[path][0].vs_ref;
        have_target = true;
      }
      if (!json) {
        char a[24], b[16], c[24], d[16], e[24], s[16];
        fprintf(f, "  %-10s %10s %8s", name, gbps(a, sizeof a, pt[path][0].bytes_per_s),
                times(b, sizeof b, pt[path][0].vs_ref));
        if (n_threads > 1) {
          double tot = pt[path][1].bytes_per_s, one = pt[path][0].bytes_per_s;
          fprintf(f, " %13s %8s %12s %8s", gbps(c, sizeof c, tot),
                  times(d, sizeof d, pt[path][1].vs_ref),
                  gbps(e, sizeof e, tot < 0 ? tot : tot / o->threads),
                  times(s, sizeof s, tot > 0 && one > 0 ? tot / one : 0.0));
        }
        fputc('\n', f);
        fflush(f);
      }
    }
  }
  if (!json) {
    fprintf(f,
            "\n  target (issue 4): vectorised Philox >= %.0fx the scalar reference per core"
            " on AVX-512: ",
            TARGET_SPEEDUP);
    if (have_target)
      fprintf(f, "avx512 x%.2f at 10 rounds, 1 thread: %s\n", ref_avx512_vs,
              ref_avx512_vs >= TARGET_SPEEDUP ? "met" : "not met");
    else
      fprintf(f, "not measured (%s)\n",
              loom_philox_path_supported(LOOM_PHILOX_PATH_AVX512) ? "10 rounds not run"
                                                                  : "no AVX-512 here");
  }
  return ok;
}

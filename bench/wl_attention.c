/*
 * `loom bench attention` (issue 4, point 5): where the dropout random
 * numbers of flash attention should come from, measured against the RNG
 * performance model (perf/rng_model.h, docs/DROPOUT.md).
 *
 * Per point of the sweep (sequence length x head dim) one pre-LN GPT block
 * (wl_model.c: batch 1, 4 heads, causal, attention dropout 0.1, no
 * residual dropout) is built four times: the attention pass
 * (the default backend's graph rewrite, loom_backend_rewrite) runs on the
 * forward graph before autodiff, as the GPT training step does, with each placement (fused, sequential,
 * overlap), and once more on the same block without dropout ("none").
 * Each graph gets a session with the default options; after a warm-up run
 * (whose outputs must agree bit for bit between the three placements), the
 * runs are interleaved, one of each placement per round, so that noise
 * from other processes falls on all of them alike; the median is reported.
 *
 * The prediction is the model's alone: the attention op's time per
 * placement (loom_rng_model_predict, rates from loom_backend_rng_model) plus
 * the rest of the block, priced the same way the model prices work: the
 * GEMM flops of the block's matmuls (forward and backward) at the model's
 * GEMM rate, the memory traffic the fusion cost model predicts for the
 * block's kernels (loom_session_stats.modeled_bytes) at the triad
 * bandwidth measured in this run, and the machine's launch cost per
 * kernel or GEMM call. docs/PERFORMANCE.md ("Attention dropout: RNG
 * placements") has the figures and what they show.
 *
 * With `--attention auto` it checks the other choice the cost model makes
 * instead: flash or decomposed attention (no dropout), per point of a
 * sweep over batch x heads, sequence length, head dim, causal or not,
 * forward or forward + backward. Each point is one attention composite
 * over inputs q, k, v, built twice (the flash rewrite before autodiff, as
 * the training step does, or left to decomposition), run in stitch mode
 * alternately; the table puts loom_attention_predict's two times (the
 * rates the cpu backend keeps in the machine profile) beside the measured
 * medians, and says whether the pass's pick was the faster one.
 */
#include "harness.h"
#include "core/clock.h"

#include "ir/build.h"
#include "ops/op.h"
#include "passes/attention.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ATTN_HEADS 4
#define ATTN_P 0.1
/* Issue 4's targets. */
#define TARGET_OVERHEAD 0.15 /* picked placement vs none at seq 512, head dim 64 */
#define TARGET_SEQ 512
#define TARGET_D 64
#define TARGET_PICKS 0.80 /* fraction of points where pick == measured best */
#define TARGET_ERR 0.20   /* |predicted / measured - 1| */

static const int64_t full_seqs[] = {128, 256, 512, 1024, 2048, 4096};
static const int64_t full_dims[] = {64, 128};
static const int64_t small_seqs[] = {128, 256};
static const int64_t small_dims[] = {64};

/* The four variants of a point, in run and report order. */
enum { V_NONE = 0, V_FUSED, V_SEQUENTIAL, V_OVERLAP, N_V };
static const char *const v_name[N_V] = {"none", "fused", "sequential", "overlap"};
static const loom_rng_placement v_placement[N_V] = {LOOM_RNG_FUSED, LOOM_RNG_FUSED,
                                                    LOOM_RNG_SEQUENTIAL, LOOM_RNG_OVERLAP};

static int v_of(loom_rng_placement p) {
  for (int v = V_FUSED; v < N_V; v++)
    if (v_placement[v] == p) return v;
  return -1;
}

/* A finite number or 0: JSON has no NaN or infinity. */
static double fin(double x) { return isfinite(x) ? x : 0.0; }

typedef struct attn_point {
  int64_t seq, d;
  bool ran[N_V];
  char err[N_V][256];
  double measured[N_V], min_s[N_V];
  double predicted[N_V], pred_attn[N_V]; /* block; the attention op alone */
  double base_s;                         /* the predicted rest of the block */
  double gemm_flops;                     /* the block's matmul flops */
  int64_t modeled_bytes;                 /* of the "none" session */
  int32_t launches;                      /* its kernels and GEMM calls */
  int64_t peak_bytes[N_V];
  double compile_s[N_V];
  int picked;         /* V_FUSED..V_OVERLAP: the model's pick */
  int best;           /* the measured fastest of them; -1 if none ran */
  bool identical;     /* the three placements' outputs agree bit for bit */
  bool compared;
} attn_point;

/* One variant's graph, session and outputs. */
typedef struct variant {
  loom_bench_graph b;
  loom_session *s;
  loom_tensor **out;
  int32_t n_out;
  double *t;
} variant;

static void variant_free(variant *v) {
  loom_session_free(v->s);
  for (int32_t i = 0; v->out && i < v->n_out; i++)
    loom_tensor_free(v->out[i]);
  free(v->out);
  free(v->t);
  loom_bench_graph_clear(&v->b);
  memset(v, 0, sizeof *v);
}

/* The block with attention pass placement, then its gradient: x and every
 * parameter (loom_bench_make_backward), flops counted. */
static loom_status build_variant(loom_ctx *ctx, int64_t seq, int64_t d, double p,
                                 loom_rng_placement placement, variant *v) {
  LOOM_TRY(loom_bench_build_attn_block(ctx, seq, ATTN_HEADS, d, p, &v->b));
  /* the default backend's rewrite makes flash attention with this placement */
  loom_graph *flash = NULL;
  int32_t n = 0;
  loom_session_options so = LOOM_SESSION_OPTIONS(.rng = placement);
  LOOM_TRY(loom_backend_rewrite(ctx, &so, v->b.g, &flash, &n));
  if (flash) {
    loom_graph_free(v->b.g);
    v->b.g = flash;
  }
  if (n != 1)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: the attention pass replaced %d ops, not 1",
                      (int)n);
  int32_t wrt[LOOM_BENCH_ATTN_BLOCK_WRT];
  for (int32_t i = 0; i < LOOM_BENCH_ATTN_BLOCK_WRT; i++)
    wrt[i] = i;
  LOOM_TRY(loom_bench_make_backward(&v->b, LOOM_BENCH_ATTN_BLOCK_WRT, wrt));
  LOOM_TRY(loom_bench_count_flops(&v->b));
  const loom_graph *g = v->b.g;
  v->n_out = g->n_outputs;
  v->out = loom_calloc(ctx, (size_t)(v->n_out ? v->n_out : 1), sizeof *v->out);
  if (!v->out) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < v->n_out; i++) {
    const loom_type *t = loom_value_type(g, g->outputs[i]);
    LOOM_TRY(loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &v->out[i]));
  }
  return LOOM_STATUS_OK;
}

static loom_status run_variant(variant *v, int32_t n_in, loom_tensor **in, double *seconds) {
  double t0 = loom_now_s();
  loom_status st =
      loom_session_run(v->s, n_in, (const loom_tensor *const *)in, v->n_out, v->out);
  if (seconds) *seconds = loom_now_s() - t0;
  return st;
}

static bool same_outputs(const variant *a, const variant *b) {
  if (a->n_out != b->n_out) return false;
  for (int32_t i = 0; i < a->n_out; i++) {
    size_t n = (size_t)loom_tensor_numel(a->out[i]) * loom_dtype_size(loom_tensor_dtype(a->out[i]));
    if ((size_t)loom_tensor_numel(b->out[i]) * loom_dtype_size(loom_tensor_dtype(b->out[i])) != n ||
        memcmp(loom_tensor_data(a->out[i]), loom_tensor_data(b->out[i]), n) != 0)
      return false;
  }
  return true;
}

static void progress(const loom_bench_opts *o, const attn_point *pt, const char *what) {
  if (o->quiet) return;
  fprintf(stderr, "bench: attention seq %lld head dim %lld: %s\n", (long long)pt->seq,
          (long long)pt->d, what);
  fflush(stderr);
}

static void fail_variant(loom_ctx *ctx, const loom_bench_opts *o, attn_point *pt, variant *vs,
                         int k) {
  pt->ran[k] = false;
  snprintf(pt->err[k], sizeof pt->err[k], "%s", loom_ctx_error(ctx));
  loom_session_free(vs[k].s);
  vs[k].s = NULL;
  if (!o->quiet)
    fprintf(stderr, "bench: attention seq %lld head dim %lld: %s failed: %s\n",
            (long long)pt->seq, (long long)pt->d, v_name[k], pt->err[k]);
}

/* Measures one point; false if a variant failed (pt says why). */
static bool measure_point(loom_ctx *ctx, const loom_bench_opts *o, attn_point *pt) {
  variant vs[N_V];
  memset(vs, 0, sizeof vs);
  loom_tensor **in = NULL;
  int32_t n_in = 0;
  bool live[N_V] = {false};
  progress(o, pt, "building and compiling");
  for (int k = 0; k < N_V; k++) {
    loom_status st =
        build_variant(ctx, pt->seq, pt->d, k == V_NONE ? 0.0 : ATTN_P, v_placement[k], &vs[k]);
    if (!st && !in) { /* every variant has the same inputs */
      n_in = vs[k].b.g->n_inputs;
      in = loom_calloc(ctx, (size_t)(n_in ? n_in : 1), sizeof *in);
      st = in ? loom_bench_make_inputs(ctx, &vs[k].b, in) : LOOM_STATUS_OUT_OF_MEMORY;
    }
    if (!st) st = loom_session_new(ctx, vs[k].b.g, NULL, &vs[k].s);
    loom_session_stats ss;
    if (!st) st = loom_session_get_stats(vs[k].s, &ss);
    if (!st) {
      pt->peak_bytes[k] = ss.peak_bytes;
      pt->compile_s[k] = ss.compile_seconds;
      if (k == V_NONE) {
        pt->modeled_bytes = ss.modeled_bytes;
        pt->launches = ss.n_kernels - ss.n_epilogues + ss.n_gemm;
        pt->gemm_flops = vs[k].b.gemm_flops;
      }
      vs[k].t = loom_calloc(ctx, (size_t)o->runs, sizeof *vs[k].t);
      if (!vs[k].t) st = LOOM_STATUS_OUT_OF_MEMORY;
    }
    if (!st) st = run_variant(&vs[k], n_in, in, NULL); /* the warm-up */
    if (st)
      fail_variant(ctx, o, pt, vs, k);
    else
      live[k] = true;
  }
  /* every placement gives the same masks, so the same results bit for bit */
  pt->identical = true;
  for (int k = V_FUSED + 1; k < N_V; k++)
    if (live[V_FUSED] && live[k]) {
      pt->compared = true;
      if (!same_outputs(&vs[V_FUSED], &vs[k])) pt->identical = false;
    }
  if (pt->compared && !pt->identical && !o->quiet)
    fprintf(stderr,
            "bench: warning: attention seq %lld head dim %lld: the placements' results differ\n",
            (long long)pt->seq, (long long)pt->d);
  progress(o, pt, "timing");
  for (int32_t r = 0; r < o->runs; r++)
    for (int k = 0; k < N_V; k++) {
      if (!live[k]) continue;
      if (run_variant(&vs[k], n_in, in, &vs[k].t[r]) != LOOM_STATUS_OK) {
        fail_variant(ctx, o, pt, vs, k);
        live[k] = false;
      }
    }
  bool ok = true;
  for (int k = 0; k < N_V; k++) {
    if (live[k]) {
      pt->measured[k] = loom_median(vs[k].t, o->runs); /* sorts */
      pt->min_s[k] = vs[k].t[0];
      pt->ran[k] = true;
    } else {
      ok = false;
    }
    variant_free(&vs[k]);
  }
  for (int32_t i = 0; in && i < n_in; i++)
    loom_tensor_free(in[i]);
  free(in);
  pt->best = -1;
  for (int k = V_FUSED; k < N_V; k++)
    if (pt->ran[k] && (pt->best < 0 || pt->measured[k] < pt->measured[pt->best])) pt->best = k;
  return ok;
}

/* The model's figures for pt: the attention op per variant, the pick, and
 * the block (that plus the base). */
static void predict_point(const loom_rng_model *m, double launch_s, attn_point *pt) {
  int64_t h = ATTN_HEADS * pt->d;
  loom_rng_attn a = {.bh = ATTN_HEADS, .sq = pt->seq, .sk = pt->seq, .d = pt->d, .dv = pt->d,
                     .causal = true, .backward = true,
                     /* the QKV projection, as the attention pass counts it */
                     .gemm_before_flops = 2.0 * (double)pt->seq * (double)(3 * h) * (double)h};
  double t[LOOM_RNG_COUNT], none = 0.0;
  loom_rng_placement pick = loom_rng_model_predict(m, &a, &none, t);
  pt->picked = v_of(pick);
  pt->pred_attn[V_NONE] = none;
  for (int k = V_FUSED; k < N_V; k++)
    pt->pred_attn[k] = t[v_placement[k]];
  pt->base_s = (m->gemm_flops > 0 ? pt->gemm_flops / m->gemm_flops : 0.0) +
               (m->bandwidth > 0 ? (double)pt->modeled_bytes / m->bandwidth : 0.0) +
               pt->launches * launch_s;
  for (int k = 0; k < N_V; k++)
    pt->predicted[k] = pt->base_s + pt->pred_attn[k];
}

/* ---- reports --------------------------------------------------------------- */

/* Not a pure prediction: the measured time without dropout plus the
 * model's predicted dropout cost of placement k (0 for none). */
static double from_none(const attn_point *pt, int k) {
  if (!pt->ran[V_NONE]) return 0.0;
  return pt->measured[V_NONE] + pt->pred_attn[k] - pt->pred_attn[V_NONE];
}

static const char *pname(int k) { return k >= 0 && k < N_V ? v_name[k] : "?"; }

static void json_point(FILE *f, const attn_point *pt, int32_t runs) {
  for (int k = 0; k < N_V; k++) {
    fprintf(f, "{\"workload\": \"attention\", \"seq\": %lld, \"head_dim\": %lld, "
               "\"placement\": \"%s\"",
            (long long)pt->seq, (long long)pt->d, v_name[k]);
    if (!pt->ran[k]) {
      fputs(", \"error\": \"", f);
      for (const char *c = pt->err[k]; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u == '"' || u == '\\')
          fprintf(f, "\\%c", u);
        else if (u < 0x20)
          fprintf(f, "\\u%04x", u);
        else
          fputc(u, f);
      }
      fputs("\"}\n", f);
      continue;
    }
    fprintf(f,
            ", \"predicted_s\": %.6g, \"measured_s\": %.6g, \"picked\": \"%s\", \"best\": \"%s\", "
            "\"heads\": %d, \"batch\": 1, \"p\": %.2g, \"predicted_attention_s\": %.6g, "
            "\"predicted_rest_s\": %.6g, \"min_s\": %.6g, \"runs\": %d, \"peak_bytes\": %lld, "
            "\"compile_s\": %.4g, \"gemm_flops\": %.6g, \"modeled_bytes\": %lld, "
            "\"predicted_from_none_s\": %.6g",
            fin(pt->predicted[k]), fin(pt->measured[k]), pname(pt->picked), pname(pt->best),
            ATTN_HEADS, k == V_NONE ? 0.0 : ATTN_P, fin(pt->pred_attn[k]), fin(pt->base_s),
            fin(pt->min_s[k]), (int)runs, (long long)pt->peak_bytes[k], fin(pt->compile_s[k]),
            pt->gemm_flops, (long long)pt->modeled_bytes, fin(from_none(pt, k)));
    if (k != V_NONE && pt->ran[V_NONE] && pt->measured[V_NONE] > 0)
      fprintf(f, ", \"overhead_vs_none\": %.4g", fin(pt->measured[k] / pt->measured[V_NONE] - 1));
    if (k != V_NONE && pt->compared)
      fprintf(f, ", \"same_results\": %s", pt->identical ? "true" : "false");
    fputs("}\n", f);
  }
}

static void table_head(FILE *f, const loom_rng_model *m, double launch_s,
                       const loom_bench_opts *o) {
  fprintf(f,
          "\nattention: one pre-LN GPT block, forward + backward: batch 1, %d heads, d_model =\n"
          "%d x head dim, MLP 4 x d_model, causal, dropout %.1f on the attention probabilities\n"
          "(none: the same block without dropout). Flash attention; each placement applied\n"
          "before autodiff. ms: median of %d runs after a warm-up, the placements interleaved.\n"
          "pred: predicted = the model's attention op (perf/rng_model.c) + the rest of the\n"
          "block: its GEMM flops at %.1f GFLOP/s (the 384^3 rate the model measured), the\n"
          "fusion cost model's bytes at the triad's %.1f GB/s, %.0f us per kernel or GEMM\n"
          "call. Model rates: Philox %.2f Gwords/s per core, flash attention %.1f GFLOP/s\n"
          "forward, %.1f backward, %d cores, fused RNG penalty %.2f.\n"
          "overhead: the picked placement's measured time over none's.\n\n",
          ATTN_HEADS, ATTN_HEADS, ATTN_P, (int)o->runs, m->gemm_flops / 1e9, m->bandwidth / 1e9,
          launch_s * 1e6, m->rng_words_core / 1e9, m->attn_fwd_flops / 1e9,
          m->attn_bwd_flops / 1e9, (int)m->cores, m->fused_rng_penalty);
  fprintf(f, "  %5s %4s |", "seq", "d");
  for (int k = 0; k < N_V; k++)
    fprintf(f, " %10s %7s |", k == V_NONE ? "none ms" : v_name[k], "pred");
  fprintf(f, " %-10s %-10s %8s\n", "picked", "best", "overhead");
}

static void table_row(FILE *f, const attn_point *pt) {
  fprintf(f, "  %5lld %4lld |", (long long)pt->seq, (long long)pt->d);
  for (int k = 0; k < N_V; k++) {
    if (pt->ran[k])
      fprintf(f, " %10.2f %7.2f |", pt->measured[k] * 1e3, pt->predicted[k] * 1e3);
    else
      fprintf(f, " %10s %7.2f |", "FAILED", pt->predicted[k] * 1e3);
  }
  char ov[24] = "-";
  if (pt->ran[V_NONE] && pt->ran[pt->picked] && pt->measured[V_NONE] > 0)
    snprintf(ov, sizeof ov, "%+.1f%%", 100.0 * (pt->measured[pt->picked] / pt->measured[V_NONE] - 1));
  fprintf(f, " %-10s %-10s %8s%s\n", pname(pt->picked), pname(pt->best), ov,
          pt->compared && !pt->identical ? "  results DIFFER" : "");
  for (int k = 0; k < N_V; k++)
    if (!pt->ran[k]) fprintf(f, "        %s: %s\n", v_name[k], pt->err[k]);
}

static const char *verdict(bool met) { return met ? "met" : "NOT met"; }

static void table_targets(FILE *f, const attn_point *pts, int32_t n, bool small, int32_t runs) {
  fprintf(f, "\nTargets (issue 4, point 5; medians of %d runs%s):\n", (int)runs,
          small ? "; stated for the full sweep, so with --size small only indicative" : "");
  const attn_point *tp = NULL;
  for (int32_t i = 0; i < n; i++)
    if (pts[i].seq == TARGET_SEQ && pts[i].d == TARGET_D) tp = &pts[i];
  if (tp && tp->ran[V_NONE] && tp->ran[tp->picked]) {
    double ov = tp->measured[tp->picked] / tp->measured[V_NONE] - 1;
    fprintf(f,
            "  dropout overhead with the picked placement (%s) at seq %d, head dim %d:\n"
            "    %.2f ms vs %.2f ms without dropout, %+.1f%% (target <= %.0f%%): %s\n",
            pname(tp->picked), TARGET_SEQ, TARGET_D, tp->measured[tp->picked] * 1e3,
            tp->measured[V_NONE] * 1e3, 100.0 * ov, 100.0 * TARGET_OVERHEAD,
            verdict(ov <= TARGET_OVERHEAD));
  } else {
    fprintf(f, "  dropout overhead at seq %d, head dim %d: not measured%s\n", TARGET_SEQ,
            TARGET_D, small ? " (not in the small sweep)" : "");
  }
  int32_t judged = 0, hits = 0, close = 0, n_err = 0, n_err2 = 0;
  double sum_err = 0.0, max_err = -1.0, sum_err2 = 0.0, max_err2 = 0.0;
  const attn_point *worst = NULL;
  int worst_k = 0;
  for (int32_t i = 0; i < n; i++) {
    const attn_point *pt = &pts[i];
    if (pt->best >= 0 && pt->ran[pt->picked]) {
      judged++;
      if (pt->picked == pt->best) hits++;
      if (pt->measured[pt->picked] <= 1.03 * pt->measured[pt->best]) close++;
    }
    for (int k = 0; k < N_V; k++) {
      if (!pt->ran[k] || !(pt->measured[k] > 0)) continue;
      double e = fabs(pt->predicted[k] / pt->measured[k] - 1);
      sum_err += e;
      n_err++;
      if (e > max_err) {
        max_err = e;
        worst = pt;
        worst_k = k;
      }
      if (k != V_NONE && pt->ran[V_NONE]) {
        double e2 = fabs(from_none(pt, k) / pt->measured[k] - 1);
        sum_err2 += e2;
        max_err2 = e2 > max_err2 ? e2 : max_err2;
        n_err2++;
      }
    }
  }
  if (judged)
    fprintf(f,
            "  the model picks the measured-best placement in %d of %d points, %.0f%% (target\n"
            "    >= %.0f%%): %s; the pick is within 3%% of the best in %d of %d\n",
            (int)hits, (int)judged, 100.0 * hits / judged, 100.0 * TARGET_PICKS,
            verdict(hits >= TARGET_PICKS * judged), (int)close, (int)judged);
  if (n_err && worst)
    fprintf(f,
            "  predictions vs measured times (%d figures, \"none\" too): mean |pred/meas - 1|\n"
            "    %.1f%%, max %.1f%% (seq %lld, head dim %lld, %s) (target <= %.0f%% each): %s\n",
            (int)n_err, 100.0 * sum_err / n_err, 100.0 * max_err, (long long)worst->seq,
            (long long)worst->d, v_name[worst_k], 100.0 * TARGET_ERR,
            verdict(max_err <= TARGET_ERR));
  if (n_err2)
    fprintf(f,
            "  (not a prediction, for the dropout cost alone: measured none + the model's\n"
            "    predicted dropout overhead is within mean %.1f%%, max %.1f%% of the %d\n"
            "    placements' measured times)\n",
            100.0 * sum_err2 / n_err2, 100.0 * max_err2, (int)n_err2);
}

/* The same model with a GPU's published rates (perf/rng_model.c) on one
 * Llama2-7B block (d 4096, 32 heads of 128, SwiGLU FFN 11008, sequence
 * 4096, batch 1, causal), forward and backward: the paper behind this
 * reports 1.14x for overlap over fused on such a block (GH100, FP8). The
 * linear layers are 3 x 2 T (4 d^2 + 3 d ff) flops at the model's GEMM
 * rate; the mask hides behind the layer's QKV projection, or behind the
 * previous layer's MLP. Nothing is measured. */
static void gpu_regime(FILE *f, bool json) {
  const double t = 4096, d = 4096, ff = 11008;
  const double linear = 3 * 2 * t * (4 * d * d + 3 * d * ff);
  const double behind[2] = {2 * t * d * 3 * d, 2 * t * 3 * d * ff};
  static const char *const behind_name[2] = {"qkv", "mlp"};
  if (!json)
    fprintf(f, "\nGPU regime (the model with published rates, nothing measured): one Llama2-7B\n"
               "block, seq 4096, forward+backward, predicted ms\n"
               "  %-28s %-7s %8s %8s %10s %8s %-9s %s\n",
            "machine", "mask by", "none", "fused", "sequential", "overlap", "pick",
            "overlap vs fused");
  for (int gpu = 0; gpu < 2; gpu++) {
    loom_rng_model m;
    if (gpu == 0)
      loom_rng_model_h100(&m);
    else
      loom_rng_model_h200(&m);
    for (int b = 0; b < 2; b++) {
      loom_rng_attn a = {.bh = 32, .sq = 4096, .sk = 4096, .d = 128, .dv = 128, .causal = true,
                         .backward = true, .gemm_before_flops = behind[b]};
      double none, tp[LOOM_RNG_COUNT], g = linear / m.gemm_flops;
      loom_rng_placement pick = loom_rng_model_predict(&m, &a, &none, tp);
      double speedup = (g + tp[LOOM_RNG_FUSED]) / (g + tp[LOOM_RNG_OVERLAP]);
      if (json)
        fprintf(f,
                "{\"workload\": \"attention_gpu_model\", \"machine\": \"%s\", \"block\": "
                "\"llama2-7b seq 4096\", \"mask_behind\": \"%s\", \"none_s\": %.6g, "
                "\"fused_s\": %.6g, \"sequential_s\": %.6g, \"overlap_s\": %.6g, \"picked\": "
                "\"%s\", \"overlap_vs_fused\": %.4g}\n",
                m.machine, behind_name[b], g + none, g + tp[LOOM_RNG_FUSED],
                g + tp[LOOM_RNG_SEQUENTIAL], g + tp[LOOM_RNG_OVERLAP],
                loom_rng_placement_name(pick), speedup);
      else
        fprintf(f, "  %-28s %-7s %8.2f %8.2f %10.2f %8.2f %-9s x%.3f\n", m.machine,
                behind_name[b], (g + none) * 1e3, (g + tp[LOOM_RNG_FUSED]) * 1e3,
                (g + tp[LOOM_RNG_SEQUENTIAL]) * 1e3, (g + tp[LOOM_RNG_OVERLAP]) * 1e3,
                loom_rng_placement_name(pick), speedup);
    }
  }
  if (!json)
    fprintf(f, "  (the paper reports x1.14 for overlap over fused on a Llama2 block, GH100, FP8)\n");
}

/* ---- flash or decomposed ----------------------------------------------------- */

typedef struct choice_point {
  int64_t batch, heads, seq, d;
  bool causal, backward;
  const char *like; /* the workload with this attention, or "" */
} choice_point;

static const choice_point full_choices[] = {
    {8, 12, 128, 64, false, false, "bert_layer"}, {4, 12, 256, 64, true, true, "gpt2_block"},
    {32, 4, 32, 32, true, true, "train_step"},    {32, 4, 32, 32, true, false, ""},
    {8, 4, 64, 64, false, false, ""},             {8, 12, 128, 64, false, true, ""},
    {4, 8, 128, 128, true, true, ""},             {2, 8, 512, 64, true, false, ""},
    {2, 8, 512, 64, true, true, ""},              {1, 8, 1024, 128, false, true, ""}};
static const choice_point small_choices[] = {{2, 4, 64, 32, false, false, ""},
                                             {4, 4, 32, 32, true, true, ""}};

/* q, k, v [batch, heads, seq, d] and one attention; backward: the
 * gradients of sum(o * dy) with respect to q, k and v. flash: the cpu
 * backend's attention pass rewrites it first (before autodiff). */
static loom_status build_choice(loom_ctx *ctx, const choice_point *c, bool flash, variant *v) {
  LOOM_TRY(loom_graph_new(ctx, &v->b.g));
  loom_graph *g = v->b.g;
  int64_t sh[4] = {c->batch, c->heads, c->seq, c->d};
  static const char *const names[3] = {"q", "k", "v"};
  int32_t in[3];
  for (int32_t i = 0; i < 3; i++)
    in[i] = loom_bench_input(&v->b, names[i], LOOM_DTYPE_F32, 4, sh, LOOM_BENCH_FILL_UNIFORM, true);
  int32_t dy = c->backward ? loom_bench_input(&v->b, "dy", LOOM_DTYPE_F32, 4, sh,
                                              LOOM_BENCH_FILL_UNIFORM, false)
                           : -1;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_ATTENTION, a);
  LOOM_ATTRV_I(a, attention, causal) = c->causal ? 1 : 0;
  int32_t y = lb_op(g, LOOM_OP_ATTENTION, 3, in, a);
  if (c->backward) y = loom_bench_vjp_loss(g, y, dy);
  LOOM_TRY(loom_build_status(g));
  LOOM_TRY(loom_graph_output(g, c->backward ? "objective" : "o", y));
  if (flash) {
    loom_graph *fg = NULL;
    int32_t n = 0;
    LOOM_TRY(loom_backend_rewrite(ctx, &LOOM_SESSION_OPTIONS(.attention = LOOM_ATTENTION_FLASH),
                                  g, &fg, &n));
    if (fg) {
      loom_graph_free(v->b.g);
      v->b.g = fg;
    }
    if (n != 1)
      return loom_error(ctx, LOOM_STATUS_INTERNAL,
                        "bench: the attention pass replaced %d ops, not 1", (int)n);
  }
  if (c->backward) {
    int32_t wrt[3] = {0, 1, 2};
    v->b.attention = flash ? LOOM_ATTENTION_FLASH : LOOM_ATTENTION_DECOMPOSED;
    LOOM_TRY(loom_bench_make_backward(&v->b, 3, wrt));
  }
  g = v->b.g;
  v->n_out = g->n_outputs;
  v->out = loom_calloc(ctx, (size_t)(v->n_out ? v->n_out : 1), sizeof *v->out);
  if (!v->out) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < v->n_out; i++) {
    const loom_type *t = loom_value_type(g, g->outputs[i]);
    LOOM_TRY(loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &v->out[i]));
  }
  return LOOM_STATUS_OK;
}

/* CPU seconds of the process: with one thread, the time the run would
 * take on a core of its own, however loaded the machine is. */
static double process_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Measured medians of c flash ([0]) and decomposed ([1]) in ms, wall
 * clock and process CPU time, runs alternating; false (the error on
 * stderr) if either failed. */
static bool measure_choice(loom_ctx *ctx, const loom_bench_opts *o, const choice_point *c,
                           double ms[2], double cpu_ms[2]) {
  double *cpu[2] = {NULL, NULL};
  variant vs[2];
  memset(vs, 0, sizeof vs);
  loom_tensor **in = NULL;
  int32_t n_in = 0;
  loom_status st = LOOM_STATUS_OK;
  /* the graphs are rewritten already: the sessions leave attention alone */
  const loom_session_options so =
      LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_STITCH, .attention = LOOM_ATTENTION_DECOMPOSED);
  for (int k = 0; k < 2 && !st; k++) {
    st = build_choice(ctx, c, k == 0, &vs[k]);
    if (!st && !in) {
      n_in = vs[k].b.g->n_inputs;
      in = loom_calloc(ctx, (size_t)(n_in ? n_in : 1), sizeof *in);
      st = in ? loom_bench_make_inputs(ctx, &vs[k].b, in) : LOOM_STATUS_OUT_OF_MEMORY;
    }
    if (!st) st = loom_session_new(ctx, vs[k].b.g, &so, &vs[k].s);
    if (!st) {
      vs[k].t = loom_calloc(ctx, (size_t)o->runs, sizeof *vs[k].t);
      cpu[k] = loom_calloc(ctx, (size_t)o->runs, sizeof *cpu[k]);
      if (!vs[k].t || !cpu[k]) st = LOOM_STATUS_OUT_OF_MEMORY;
    }
    if (!st) st = run_variant(&vs[k], n_in, in, NULL); /* the warm-up */
  }
  for (int32_t r = 0; r < o->runs && !st; r++)
    for (int k = 0; k < 2 && !st; k++) {
      double c0 = process_cpu_s();
      st = run_variant(&vs[k], n_in, in, &vs[k].t[r]);
      cpu[k][r] = process_cpu_s() - c0;
    }
  if (st)
    fprintf(stderr, "loom: bench attention: flash or decomposed: %s\n", loom_ctx_error(ctx));
  for (int k = 0; k < 2; k++) {
    if (!st) {
      ms[k] = 1e3 * loom_median(vs[k].t, o->runs);
      cpu_ms[k] = 1e3 * loom_median(cpu[k], o->runs);
    }
    free(cpu[k]);
    variant_free(&vs[k]);
  }
  for (int32_t i = 0; in && i < n_in; i++)
    loom_tensor_free(in[i]);
  free(in);
  return !st;
}

static bool run_choices(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o) {
  const choice_point *pts = o->small ? small_choices : full_choices;
  int32_t n = o->small ? LOOM_ARRAY_LEN(small_choices) : LOOM_ARRAY_LEN(full_choices);
  loom_attention_costs costs;
  if (loom_backend_attention_costs(ctx, o->backend, &costs)) {
    fprintf(stderr, "bench: attention: %s\n", loom_ctx_error(ctx));
    return false;
  }
  /* the rates are the whole machine's: on fewer threads (--threads), the
   * compute rates of those threads, so that predictions compare with the
   * measurements (the pick does not change: both forms' compute scales) */
  const int32_t used = loom_ctx_resolved_threads(ctx);
  if (used > 0 && used < costs.rates.cores) {
    const double share = (double)used / costs.rates.cores;
    costs.rates.attn_fwd_flops *= share;
    costs.rates.attn_bwd_flops *= share;
    costs.rates.gemm_flops *= share;
    costs.softmax_s /= share; /* per core, spread over the cores */
    costs.softmax_grad_s /= share;
  }
  const loom_rng_model *m = &costs.rates;
  /* the per-score softmax figures as measured (one core) */
  const double share_1e9 =
      1e9 * (used > 0 && used < costs.rates.cores ? (double)used / costs.rates.cores : 1.0);
  if (!json)
    fprintf(f,
            "Flash or decomposed attention (no dropout, stitch mode, %d thread(s), %d "
            "alternating runs, medians; ms)\n"
            "rates (machine profile): flash fwd %.1f GFLOP/s, bwd %.1f, s0 %.0f; GEMM %.1f "
            "GFLOP/s; softmax %.2f ns, its gradient %.2f ns per score and core; bandwidth "
            "%.1f GB/s; launch %.1f us\n"
            "  %-5s %-5s %-5s %-4s %-6s %-8s %10s %9s %10s %9s %9s %8s %-10s %-10s %s\n",
            (int)used, (int)o->runs, m->attn_fwd_flops / 1e9, m->attn_bwd_flops / 1e9, m->attn_s0,
            m->gemm_flops / 1e9, costs.softmax_s * share_1e9, costs.softmax_grad_s * share_1e9,
            m->bandwidth / 1e9, costs.launch_s * 1e6, "batch", "heads",
            "seq", "dim", "causal", "pass", "pred flash", "pred dec", "meas flash", "meas dec",
            "cpu flash", "cpu dec", "pick", "faster", "like");
  bool ok = true;
  int32_t agree = 0, ran = 0;
  for (int32_t i = 0; i < n; i++) {
    const choice_point *c = &pts[i];
    loom_rng_attn a = {.bh = c->batch * c->heads, .sq = c->seq, .sk = c->seq, .d = c->d,
                       .dv = c->d, .causal = c->causal, .backward = c->backward};
    double pf = 0, pd = 0, ms[2] = {0, 0}, cms[2] = {0, 0};
    loom_attention_predict(&costs, &a, &pf, &pd);
    if (!o->quiet) {
      fprintf(stderr, "bench: attention choice %lld x %lld heads, seq %lld, dim %lld\n",
              (long long)c->batch, (long long)c->heads, (long long)c->seq, (long long)c->d);
      fflush(stderr);
    }
    bool measured = measure_choice(ctx, o, c, ms, cms);
    ok = ok && measured;
    const char *pick = pd < pf ? "decomposed" : "flash";
    /* one thread: by CPU time, which the load does not stretch */
    const double *by = used == 1 ? cms : ms;
    const char *faster = !measured ? "?" : by[1] < by[0] ? "decomposed" : "flash";
    if (measured) {
      ran++;
      agree += strcmp(pick, faster) == 0;
    }
    if (json)
      fprintf(f,
              "{\"workload\": \"attention_choice\", \"batch\": %lld, \"heads\": %lld, \"seq\": "
              "%lld, \"head_dim\": %lld, \"causal\": %s, \"backward\": %s, "
              "\"predicted_flash_s\": %.6g, \"predicted_decomposed_s\": %.6g, "
              "\"measured_flash_s\": %.6g, \"measured_decomposed_s\": %.6g, "
              "\"cpu_flash_s\": %.6g, \"cpu_decomposed_s\": %.6g, \"picked\": \"%s\", "
              "\"faster\": \"%s\"}\n",
              (long long)c->batch, (long long)c->heads, (long long)c->seq, (long long)c->d,
              c->causal ? "true" : "false", c->backward ? "true" : "false", fin(pf), fin(pd),
              ms[0] / 1e3, ms[1] / 1e3, cms[0] / 1e3, cms[1] / 1e3, pick, faster);
    else
      fprintf(f,
              "  %-5lld %-5lld %-5lld %-4lld %-6s %-8s %10.3f %9.3f %10.3f %9.3f %9.3f %8.3f "
              "%-10s %-10s %s\n",
              (long long)c->batch, (long long)c->heads, (long long)c->seq, (long long)c->d,
              c->causal ? "yes" : "no", c->backward ? "fwd+bwd" : "fwd", pf * 1e3,
              isfinite(pd) ? pd * 1e3 : -1.0, ms[0], ms[1], cms[0], cms[1], pick, faster,
              c->like);
    fflush(f);
  }
  if (!json)
    fprintf(f, "the pick was the faster one (%s) at %d of %d points\n",
            used == 1 ? "CPU time, one thread" : "wall clock", (int)agree, (int)ran);
  return ok;
}

bool loom_bench_run_attention(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o,
                              const loom_bench_machine_info *mi) {
  if (o->attention == LOOM_ATTENTION_AUTO) return run_choices(ctx, f, json, o);
  const int64_t *seqs = o->small ? small_seqs : full_seqs;
  const int64_t *dims = o->small ? small_dims : full_dims;
  int32_t n_seq = o->small ? (int32_t)(sizeof small_seqs / sizeof *small_seqs)
                           : (int32_t)(sizeof full_seqs / sizeof *full_seqs);
  int32_t n_dim = o->small ? (int32_t)(sizeof small_dims / sizeof *small_dims)
                           : (int32_t)(sizeof full_dims / sizeof *full_dims);
  int32_t n = n_seq * n_dim;
  attn_point *pts = calloc((size_t)n, sizeof *pts);
  if (!pts) {
    fprintf(stderr, "loom: out of memory\n");
    return false;
  }
  if (!o->quiet) fprintf(stderr, "bench: attention: measuring the model's rates\n");
  loom_rng_model m;
  if (loom_backend_rng_model(ctx, NULL, loom_ctx_threads(ctx), &m) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: bench attention: %s\n", loom_ctx_error(ctx));
    free(pts);
    return false;
  }
  /* the model's bandwidth is a default unless told the triad measured here */
  if (mi && mi->m.triad_gbps > 0) m.bandwidth = mi->m.triad_gbps * 1e9;
  if (!json) table_head(f, &m, mi ? mi->m.kernel_launch_s : 0.0, o);
  fflush(f);
  bool ok = true;
  int32_t i = 0;
  for (int32_t di = 0; di < n_dim; di++)
    for (int32_t si = 0; si < n_seq; si++, i++) {
      attn_point *pt = &pts[i];
      pt->seq = seqs[si];
      pt->d = dims[di];
      if (!measure_point(ctx, o, pt)) ok = false;
      predict_point(&m, mi ? mi->m.kernel_launch_s : 0.0, pt);
      if (json)
        json_point(f, pt, o->runs);
      else
        table_row(f, pt);
      fflush(f);
    }
  if (!json) table_targets(f, pts, n, o->small, o->runs);
  gpu_regime(f, json);
  free(pts);
  return ok;
}

/*
 * The RNG placement model's rates for this machine (perf/rng_model.h),
 * measured with the kernels the cpu backend runs: the best Philox path on
 * one core, a GEMM, and the flash-attention kernels on a small causal block
 * without dropout, with words drawn inside (how much dearer they are there
 * than alone: the fused penalty) and with the mask read from bits (the
 * cost of a mask bit). All threads, best of three; about 0.1 s, once per
 * machine and thread count: the rates are kept in the machine profile
 * (perf/profile.h), so the placements auto picks, and what `loom compile`
 * prints, are the same from one run to the next. Memory bandwidth (for
 * writing a mask) is the machine's triad figure, measured by `loom bench`,
 * a default otherwise.
 */
#include "runtime/cpu/cpu.h"
#include "core/clock.h"
#include "runtime/cpu/flash_attention.h"
#include "runtime/cpu/gemm.h"

#include "kernel/kmath.h"
#include "passes/attention.h"
#include "perf/machine.h"
#include "perf/profile.h"
#include "perf/rng_rate.h"
#include "rng/philox.h"
#include "rng/philox_fast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The flash rates are taken at two lengths, RATE_S and RATE_S2 (one head),
 * to fit the efficiency curve Sk / (Sk + s0). */
enum { RATE_BH = 4, RATE_S = 256, RATE_S2 = 1024, RATE_D = 64, RATE_GEMM = 384, RATE_REPS = 3 };

/* Best-of-RATE_REPS seconds of the flash forward and backward on a. */
static bool time_flash(loom_ctx *ctx, int32_t threads, const loom_flash_attn *a, float *o,
                       float *lse, const float *d_o, float *dq, double *fwd, double *bwd) {
  *fwd = *bwd = 1e30;
  for (int r = 0; r < RATE_REPS; r++) {
    double t0 = loom_now_s();
    loom_status s1 = loom_flash_attn_fwd(ctx, threads, a, o, lse);
    double t1 = loom_now_s();
    /* rates only: the three gradients may share one buffer */
    loom_status s2 = loom_flash_attn_bwd(ctx, threads, a, o, lse, d_o, dq, dq, dq);
    double t2 = loom_now_s();
    if (s1 || s2) {
      loom_error_clear(ctx);
      return false;
    }
    *fwd = t1 - t0 < *fwd ? t1 - t0 : *fwd;
    *bwd = t2 - t1 < *bwd ? t2 - t1 : *bwd;
  }
  return true;
}

/* Measures the rates into m (estimates from the machine first); false if
 * a measurement failed, the estimates kept. */
static bool measure_rng_model(loom_ctx *ctx, int32_t threads, loom_rng_model *m) {
  loom_machine mc;
  loom_machine_detect(ctx, &mc);
  *m = (loom_rng_model){.machine = "this CPU (measured rates)",
                        .cores = mc.cores > 0 ? mc.cores : 1,
                        .gemm_flops = mc.sgemm_gflops * 1e9,
                        .attn_fwd_flops = mc.sgemm_gflops * 1e9 / 4,
                        .attn_bwd_flops = mc.sgemm_gflops * 1e9 / 6,
                        .bandwidth = mc.triad_gbps * 1e9,
                        .mask_read_bit_s = 1.0 / (8.0 * mc.triad_gbps * 1e9),
                        .fused_rng_penalty = 1.0,
                        .overlap_cores = 1};
  double bytes = loom_philox_bench(loom_philox_best_path(), 10, 1, 0.03);
  m->rng_words_core = bytes > 0 ? bytes / 4.0 : 1e8;
  const int64_t qn = (int64_t)RATE_S2 * RATE_D, gn = (int64_t)RATE_GEMM * RATE_GEMM;
  const int64_t n = (int64_t)RATE_BH * RATE_S * RATE_S;
  float *buf = calloc((size_t)(6 * qn + 3 * gn + RATE_S2), sizeof *buf);
  uint8_t *bits = calloc((size_t)(n + 7) / 8, 1);
  if (!buf || !bits) { /* keep the estimates */
    free(buf);
    free(bits);
    return false;
  }
  for (int64_t i = 0; i < 6 * qn + 3 * gn; i++) buf[i] = (float)((i * 37 % 101) - 50) / 100.0f;
  float *q = buf, *k = q + qn, *v = k + qn, *o = v + qn, *d_o = o + qn, *dq = d_o + qn;
  float *ga = buf + 6 * qn, *gb = ga + gn, *gc = gb + gn, *lse = gc + gn;
  loom_gemm gm = {.m = RATE_GEMM, .n = RATE_GEMM, .k = RATE_GEMM, .batch = 1, .a = ga,
                  .lda = RATE_GEMM, .b = gb, .ldb = RATE_GEMM, .c = gc, .ldc = RATE_GEMM,
                  .c_stride = gn};
  double g_best = 1e30;
  for (int r = 0; r < RATE_REPS; r++) {
    double t0 = loom_now_s();
    if (loom_gemm_f32(ctx, threads, &gm)) {
      loom_error_clear(ctx);
      break;
    }
    g_best = LOOM_MIN(g_best, loom_now_s() - t0);
  }
  bool gemm_ok = g_best < 1e30;
  if (gemm_ok) m->gemm_flops = 2.0 * (double)RATE_GEMM * RATE_GEMM * RATE_GEMM / g_best;
  /* a causal block three ways: no dropout, words drawn in the kernel (the
   * fused penalty), the mask read from bits (the cost of reading it) */
  loom_flash_attn a = {.bh = RATE_BH, .sq = RATE_S, .sk = RATE_S, .d = RATE_D, .dv = RATE_D,
                       .q = q, .k = k, .v = v, .scale = 0.125, .causal = true};
  double f0, b0, f1, b1, f2, b2, fl, bl;
  loom_flash_attn along = a;
  along.bh = 1;
  along.sq = along.sk = RATE_S2;
  bool ok = time_flash(ctx, threads, &along, o, lse, d_o, dq, &fl, &bl);
  ok = ok && time_flash(ctx, threads, &a, o, lse, d_o, dq, &f0, &b0);
  a.p = 0.1;
  a.seed = 1;
  ok = ok && time_flash(ctx, threads, &a, o, lse, d_o, dq, &f1, &b1);
  loom_dropout_mask_bits(1, 0, n, loom_dropout_threshold(0.1), bits);
  a.mask_bits = bits;
  ok = ok && time_flash(ctx, threads, &a, o, lse, d_o, dq, &f2, &b2);
  free(buf);
  free(bits);
  if (!ok) return false;
  /* causal: half the scores; rate(S) = R S / (S + s0) through both points */
  double flops = 0.5 * 4.0 * (double)n * RATE_D, flops_l = 0.5 * 4.0 * RATE_S2 * RATE_S2 * RATE_D;
  double r1 = (flops / f0 + 2.5 * flops / b0) / 2, r2 = (flops_l / fl + 2.5 * flops_l / bl) / 2;
  double den = r2 / RATE_S2 - r1 / RATE_S;
  m->attn_s0 = den < 0 ? LOOM_MAX(0.0, (r1 - r2) / den) : 0.0;
  double lift = (RATE_S + m->attn_s0) / RATE_S; /* from S to long rows */
  m->attn_fwd_flops = flops / f0 * lift;
  m->attn_bwd_flops = 2.5 * flops / b0 * lift;
  double drawn = 2.0 * (0.5 * (double)n) / (m->rng_words_core * m->cores); /* twice, visible */
  m->fused_rng_penalty = LOOM_MAX(0.25, ((f1 + b1) - (f0 + b0)) / drawn);
  m->mask_read_bit_s = LOOM_MAX(0.0, ((f2 + b2) - (f0 + b0)) / (2.0 * (double)n));
  return gemm_ok;
}

/* The measured rates' profile keys, "KEY_<threads>t", in the order of
 * rng_fields: a placement that flipped with timer noise would change what
 * `loom compile` prints and the program a session runs, so they are
 * measured once per machine and thread count. */
static const char *const rng_keys[] = {"rng_words_core",    "rng_gemm_flops", "rng_attn_fwd_flops",
                                       "rng_attn_bwd_flops", "rng_attn_s0",    "rng_fused_penalty",
                                       "rng_mask_read_bit_s"};
enum { N_RNG_KEYS = LOOM_ARRAY_LEN(rng_keys) };

/* The rates of one profile table: kept values where every key has one
 * (>= 0), else measured by measure(arg, v) and kept when it succeeds;
 * false when neither (v keeps its estimates). Both tables go through it. */
static bool kept_or_measured(const char *const *keys, int n, const char *suffix, double *v,
                             bool (*measure)(void *arg, double *v), void *arg) {
  double got[16];
  bool kept = n <= 16 && loom_profile_get_all(keys, n, suffix, got);
  for (int i = 0; kept && i < n; i++) kept = got[i] >= 0;
  if (kept) {
    memcpy(v, got, (size_t)n * sizeof *v);
    return true;
  }
  if (!measure(arg, v)) return false;
  loom_profile_put_all(keys, n, suffix, v);
  return true;
}

typedef struct rng_job {
  loom_ctx *ctx;
  int32_t threads;
  loom_rng_model *m;
} rng_job;

static void rng_fields(loom_rng_model *m, double *f[N_RNG_KEYS]) {
  double *all[N_RNG_KEYS] = {&m->rng_words_core, &m->gemm_flops,     &m->attn_fwd_flops,
                             &m->attn_bwd_flops, &m->attn_s0,        &m->fused_rng_penalty,
                             &m->mask_read_bit_s};
  memcpy(f, all, sizeof all);
}

static bool measure_rng(void *arg, double *v) {
  rng_job *j = arg;
  if (!measure_rng_model(j->ctx, j->threads, j->m)) return false;
  double *f[N_RNG_KEYS];
  rng_fields(j->m, f);
  for (int i = 0; i < N_RNG_KEYS; i++) v[i] = *f[i];
  return true;
}

void loom_cpu_rng_model(loom_ctx *ctx, int32_t threads, loom_rng_model *m) {
  loom_machine mc;
  loom_machine_detect(ctx, &mc);
  char suffix[16];
  snprintf(suffix, sizeof suffix, "_%dt", (int)threads);
  rng_job j = {ctx, threads, m};
  double v[N_RNG_KEYS];
  /* a failed measurement leaves measure_rng_model's estimates in *m */
  if (!kept_or_measured(rng_keys, N_RNG_KEYS, suffix, v, measure_rng, &j)) return;
  *m = (loom_rng_model){.machine = "this CPU (measured rates)",
                        .cores = mc.cores > 0 ? mc.cores : 1,
                        .bandwidth = mc.triad_gbps * 1e9,
                        .overlap_cores = 1};
  double *f[N_RNG_KEYS];
  rng_fields(m, f);
  for (int i = 0; i < N_RNG_KEYS; i++) *f[i] = v[i];
}

/* Profile keys of the attention choice's rates, in the order read (the
 * kernels and the method they were measured with are the profile's
 * version, perf/profile.h). */
static const char *const attention_keys[] = {"attn_fwd_flops", "attn_bwd_flops",
                                             "attn_s0",        "attn_gemm_flops",
                                             "attn_softmax_s", "attn_softmax_grad_s"};
enum { N_ATTN_KEYS = LOOM_ARRAY_LEN(attention_keys) };

/* The choice's shapes: flash forward and backward at a short and a long
 * length (d 64, not causal, about the same flops), and the decomposed
 * form's score GEMM and softmax at CH_S (batched [S, d] x [d, S]). The
 * short flash length is the shortest the choice is asked about (the main
 * job's 32), where the per-row and per-head work that the rate curve's s0
 * stands for weighs most. */
enum { CH_BH = 8, CH_S = 128, CH_S2 = 1024, CH_D = 64, CH_REPS = 3 };
enum { CH_FS = 32, CH_FBH = CH_BH * (CH_S / CH_FS) * (CH_S / CH_FS) };

/* Best-of-CH_REPS CPU seconds of flash forward and backward on a, one
 * thread, after a warm-up; false on an error. */
static bool flash_cpu(loom_ctx *ctx, const loom_flash_attn *a, float *o, float *lse,
                      const float *d_o, float *g, double *fwd, double *bwd) {
  *fwd = *bwd = 1e30;
  for (int r = 0; r <= CH_REPS; r++) {
    double t0 = loom_thread_cpu_s();
    loom_status s1 = loom_flash_attn_fwd(ctx, 1, a, o, lse);
    double t1 = loom_thread_cpu_s();
    loom_status s2 = loom_flash_attn_bwd(ctx, 1, a, o, lse, d_o, g, g, g); /* rates only */
    double t2 = loom_thread_cpu_s();
    if (s1 || s2) {
      loom_error_clear(ctx);
      return false;
    }
    if (r == 0) continue; /* the warm-up */
    *fwd = LOOM_MIN(*fwd, t1 - t0);
    *bwd = LOOM_MIN(*bwd, t2 - t1);
  }
  return true;
}

/* The decomposed form's softmax as the stitched kernels compute it (their
 * lm_expf, in rows held in memory): max, exp and sum, scale; and its
 * gradient dS = P (dP - rowsum(P dP)); sums and max in 8 lanes, as
 * vectorised kernels take them. Built for the widest of AVX-512, AVX2 +
 * FMA and the baseline the CPU has, as the generated code is
 * (-march=native). */

#define SOFTMAX_ROWS(name, attr)                                                                  \
  attr static void name(float *s, float *dp, int64_t rows, int64_t n, bool grad) {                \
    for (int64_t r = 0; r < rows; r++) {                                                          \
      float *x = s + r * n, *g = dp + r * n, acc[8] = {0}, mx[8];                                 \
      const int64_t n8 = n & ~(int64_t)7;                                                         \
      if (grad) {                                                                                 \
        for (int64_t j = 0; j < n8; j += 8)                                                       \
          for (int l = 0; l < 8; l++)                                                             \
            acc[l] += x[j + l] * g[j + l];                                                        \
        float t = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];          \
        for (int64_t j = n8; j < n; j++)                                                          \
          t += x[j] * g[j];                                                                       \
        for (int64_t j = 0; j < n; j++)                                                           \
          g[j] = x[j] * (g[j] - t);                                                               \
        continue;                                                                                 \
      }                                                                                           \
      for (int l = 0; l < 8; l++)                                                                 \
        mx[l] = x[0];                                                                             \
      for (int64_t j = 0; j < n8; j += 8)                                                         \
        for (int l = 0; l < 8; l++)                                                               \
          mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];                                            \
      float m = x[0];                                                                             \
      for (int l = 0; l < 8; l++)                                                                 \
        m = mx[l] > m ? mx[l] : m;                                                                \
      for (int64_t j = n8; j < n; j++)                                                            \
        m = x[j] > m ? x[j] : m;                                                                  \
      for (int64_t j = 0; j < n; j++)                                                             \
        x[j] = lm_expf(x[j] - m);                                                                 \
      for (int64_t j = 0; j < n8; j += 8)                                                         \
        for (int l = 0; l < 8; l++)                                                               \
          acc[l] += x[j + l];                                                                     \
      float sum = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];          \
      for (int64_t j = n8; j < n; j++)                                                            \
        sum += x[j];                                                                              \
      const float inv = 1.0f / sum;                                                               \
      for (int64_t j = 0; j < n; j++)                                                             \
        x[j] *= inv;                                                                              \
    }                                                                                             \
  }

SOFTMAX_ROWS(softmax_rows_base, )
#if LOOM_PHILOX_HAVE_X86
SOFTMAX_ROWS(softmax_rows_avx2, __attribute__((target("avx2,fma"))))
SOFTMAX_ROWS(softmax_rows_avx512,
             __attribute__((target("avx2,fma,avx512f,avx512vl,avx512dq,avx512bw"))))
#endif

/* Best-of-CH_REPS CPU seconds per score of the softmax (grad: its
 * gradient) over rows x n scores. */
static double softmax_cpu(float *s, float *dp, int64_t rows, int64_t n, bool grad) {
  void (*fn)(float *, float *, int64_t, int64_t, bool) = softmax_rows_base;
#if LOOM_PHILOX_HAVE_X86
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) fn = softmax_rows_avx2;
  if (fn == softmax_rows_avx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw"))
    fn = softmax_rows_avx512; /* lm_expf vectorises only with AVX-512 (measured, gcc 12) */
#endif
  double best = 1e30;
  for (int r = 0; r <= CH_REPS; r++) {
    for (int64_t i = 0; i < rows * n; i++) /* scores of a softmax's range */
      s[i] = (float)(i * 37 % 101) / 25.0f;
    double t0 = loom_thread_cpu_s();
    fn(s, dp, rows, n, grad);
    if (r > 0) best = LOOM_MIN(best, loom_thread_cpu_s() - t0);
  }
  return best / (double)(rows * n);
}

/* Measures the rates into v (attention_keys' order): one core's CPU time
 * times the cores, so that the figures do not depend on the load at the
 * moment (the kernels are compute-bound and scale with the cores); about
 * 0.1 s of CPU. False: keep the estimates. */
static bool measure_attention_rates(loom_ctx *ctx, int32_t cores, double v[N_ATTN_KEYS]) {
  const int64_t n1 = (int64_t)CH_FBH * CH_FS * CH_D, n2 = (int64_t)CH_S2 * CH_D;
  const int64_t n = LOOM_MAX(n1, n2), ns = (int64_t)CH_BH * CH_S * CH_S;
  float *buf = calloc((size_t)(6 * n + ns + LOOM_MAX(CH_BH * CH_S2, CH_FBH * CH_FS)), sizeof *buf);
  if (!buf) return false;
  for (int64_t i = 0; i < 6 * n; i++) buf[i] = (float)((i * 37 % 101) - 50) / 100.0f;
  float *q = buf, *k = q + n, *val = k + n, *o = val + n, *d_o = o + n, *g = d_o + n;
  float *sc = g + n, *lse = sc + ns;
  loom_flash_attn a = {.bh = CH_FBH, .sq = CH_FS, .sk = CH_FS, .d = CH_D, .dv = CH_D,
                       .q = q, .k = k, .v = val, .scale = 0.125};
  loom_flash_attn along = a;
  along.bh = 1;
  along.sq = along.sk = CH_S2;
  double f1, b1, f2, b2, gs = 1e30;
  bool ok = flash_cpu(ctx, &a, o, lse, d_o, g, &f1, &b1) &&
            flash_cpu(ctx, &along, o, lse, d_o, g, &f2, &b2);
  int64_t off[CH_BH];
  for (int64_t i = 0; i < CH_BH; i++) off[i] = i * CH_S * CH_D;
  loom_gemm gm = {.trans_b = true, .m = CH_S, .n = CH_S, .k = CH_D, .batch = CH_BH, .a = q,
                  .lda = CH_D, .a_off = off, .b = k, .ldb = CH_D, .b_off = off, .c = sc,
                  .ldc = CH_S, .c_stride = CH_S * CH_S};
  for (int r = 0; ok && r <= CH_REPS; r++) {
    double t0 = loom_thread_cpu_s();
    if (loom_gemm_f32(ctx, 1, &gm)) {
      loom_error_clear(ctx);
      ok = false;
    }
    if (r > 0) gs = LOOM_MIN(gs, loom_thread_cpu_s() - t0);
  }
  if (ok) {
    v[4] = softmax_cpu(sc, g, CH_BH * CH_S, CH_S, false);
    v[5] = softmax_cpu(sc, g, CH_BH * CH_S, CH_S, true);
  }
  free(buf);
  if (!ok || f1 <= 0 || b1 <= 0 || f2 <= 0 || b2 <= 0 || gs <= 0) return false;
  /* rate(S) = R S / (S + s0) through both lengths (forward and backward
   * together), then R per pass from the short point */
  const double fl1 = 4.0 * (double)CH_FBH * CH_FS * CH_FS * CH_D, fl2 = 4.0 * CH_S2 * CH_S2 * CH_D;
  double r1 = (fl1 / f1 + 2.5 * fl1 / b1) / 2, r2 = (fl2 / f2 + 2.5 * fl2 / b2) / 2;
  /* s0 = (r1 - r2) / den > 0 when the long length runs faster (r2 > r1,
   * so den < 0); the guard was den > 0 before, which never held with
   * r2 > r1, so s0 was always 0 */
  double den = r2 / CH_S2 - r1 / CH_FS;
  double s0 = den < 0 && r2 > r1 ? (r1 - r2) / den : 0.0;
  double lift = (CH_FS + s0) / CH_FS;
  v[0] = fl1 / f1 * lift * cores;
  v[1] = 2.5 * fl1 / b1 * lift * cores;
  v[2] = s0;
  v[3] = 2.0 * (double)CH_BH * CH_S * CH_S * CH_D / gs * cores;
  return true;
}

typedef struct attention_job {
  loom_ctx *ctx;
  int32_t cores;
} attention_job;

static bool measure_attention(void *arg, double *v) {
  attention_job *j = arg;
  return measure_attention_rates(j->ctx, j->cores, v);
}

void loom_cpu_attention_costs(loom_ctx *ctx, loom_attention_costs *c) {
  loom_machine mc;
  loom_machine_detect(ctx, &mc);
  memset(c, 0, sizeof *c);
  c->launch_s = mc.kernel_launch_s;
  c->cache_bytes = mc.llc_bytes;
  const int32_t cores = mc.cores > 0 ? mc.cores : 1;
  /* estimates until measured: the GEMM at the machine's sgemm rate, flash
   * at half of it */
  double v[N_ATTN_KEYS] = {mc.sgemm_gflops * 0.5e9, mc.sgemm_gflops * 0.5e9, 0.0,
                           mc.sgemm_gflops * 1e9, 0.0, 0.0};
  attention_job j = {ctx, cores};
  kept_or_measured(attention_keys, N_ATTN_KEYS, "", v, measure_attention, &j);
  c->softmax_s = v[4];
  c->softmax_grad_s = v[5];
  c->rates = (loom_rng_model){.cores = cores, .attn_fwd_flops = v[0], .attn_bwd_flops = v[1],
                              .attn_s0 = v[2], .gemm_flops = v[3],
                              .bandwidth = mc.triad_gbps * 1e9, .rng_words_core = 1e8,
                              .fused_rng_penalty = 1.0, .overlap_cores = 1};
}

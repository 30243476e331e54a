/*
 * The machine's limits, measured: STREAM-like triad bandwidth and the
 * sgemm rate of a GEMM the caller passes in.
 */
#include "perf/measure.h"
#include "core/clock.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRIAD_SCALAR 3.0f
#define DEFAULT_TRIAD_TRIALS 7
#define DEFAULT_GEMM_N 2048
#define DEFAULT_GEMM_TRIALS 5
/* Never let the triad take more than this share of physical memory. */
#define TRIAD_MEM_SHARE 4


static float *alloc_f32(loom_ctx *ctx, int64_t n) {
  void *p = NULL;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
  if (posix_memalign(&p, 64, bytes) != 0) {
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "measure: cannot allocate %zu bytes", bytes);
    return NULL;
  }
  return p;
}

/* One pass; static schedule so each thread touches the pages it first
 * touched during initialisation. */
static void triad_pass(float *restrict a, const float *restrict b, const float *restrict c,
                       int64_t n, int32_t threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; i++)
    a[i] = b[i] + TRIAD_SCALAR * c[i];
}

loom_status loom_measure_triad(loom_ctx *ctx, int32_t threads, int64_t n, int32_t trials,
                               loom_triad_result *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "measure: out is NULL");
  memset(out, 0, sizeof *out);
  if (threads < 1) threads = 1;
  if (trials < 1) trials = DEFAULT_TRIAD_TRIALS;
  if (n < 1024)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "measure: triad needs at least 1024 elements, got %lld", (long long)n);
  float *a = alloc_f32(ctx, n), *b = alloc_f32(ctx, n), *c = alloc_f32(ctx, n);
  double *t = loom_calloc(ctx, (size_t)trials, sizeof *t);
  loom_status st = a && b && c && t ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
      a[i] = 0.0f;
      b[i] = 1.0f;
      c[i] = 2.0f;
    }
    triad_pass(a, b, c, n, threads); /* warm-up: page tables, thread pool */
    for (int32_t r = 0; r < trials; r++) {
      double t0 = loom_now_s();
      triad_pass(a, b, c, n, threads);
      t[r] = loom_now_s() - t0;
    }
    /* Check the result so the passes cannot be optimised away. */
    const float want = 1.0f + TRIAD_SCALAR * 2.0f;
    if (a[0] != want || a[n / 2] != want || a[n - 1] != want)
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "measure: triad computed a wrong value");
  }
  if (!st) {
    out->n = n;
    out->bytes = 3 * (int64_t)sizeof(float) * n;
    out->median_s = loom_median(t, trials);
    out->gbps = out->median_s > 0 ? (double)out->bytes / out->median_s / 1e9 : 0.0;
  }
  free(a);
  free(b);
  free(c);
  free(t);
  return st;
}

loom_status loom_measure_sgemm(loom_ctx *ctx, loom_sgemm_fn fn, int32_t threads, int64_t n,
                               int32_t trials, double *gflops) {
  if (!gflops || !fn)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "measure: NULL argument");
  *gflops = 0.0;
  if (threads < 1) threads = 1;
  if (trials < 1) trials = DEFAULT_GEMM_TRIALS;
  if (n < 16 || n > 65536)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "measure: sgemm size %lld is outside [16, 65536]", (long long)n);
  int64_t nn = n * n;
  /* the operands placed as tensors are (loom_tensor_new: calloc): on an
   * AVX2 host 64-byte-aligned ones (posix_memalign) ran this GEMM at
   * 42-45 GFLOP/s a core against 76-77 (docs/PERFORMANCE.md, fourteenth
   * session; the fifteenth found the cause, B's 8 KiB rows on a 32-byte
   * boundary, which gemm_restride.h now handles either way) */
  float *a = loom_calloc(ctx, (size_t)nn, sizeof *a), *b = loom_calloc(ctx, (size_t)nn, sizeof *b);
  float *c = loom_calloc(ctx, (size_t)nn, sizeof *c);
  double *t = loom_calloc(ctx, (size_t)trials, sizeof *t);
  loom_status st = a && b && c && t ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    /* Small exact values: any wrong tile would show in the check below. */
    for (int64_t i = 0; i < nn; i++) {
      a[i] = (float)((i % 7) - 3) * 0.25f;
      b[i] = (float)((i % 5) - 2) * 0.5f;
    }
    memset(c, 0, (size_t)nn * sizeof *c);
    st = fn(ctx, threads, n, n, n, a, b, c); /* warm-up */
    for (int32_t r = 0; !st && r < trials; r++) {
      double t0 = loom_now_s();
      st = fn(ctx, threads, n, n, n, a, b, c);
      t[r] = loom_now_s() - t0;
    }
    if (!st) {
      /* Spot check one element against a double-precision dot product. */
      int64_t i = n / 3, j = n / 2;
      double want = 0.0;
      for (int64_t k = 0; k < n; k++)
        want += (double)a[i * n + k] * (double)b[k * n + j];
      double got = c[i * n + j], err = got - want;
      if (err < 0) err = -err;
      if (err > 1e-3 * (double)n)
        st = loom_error(ctx, LOOM_STATUS_INTERNAL, "measure: sgemm computed %g, expected %g", got,
                        want);
    }
  }
  if (!st) {
    double s = loom_median(t, trials);
    *gflops = s > 0 ? 2.0 * (double)n * (double)n * (double)n / s / 1e9 : 0.0;
  }
  free(a);
  free(b);
  free(c);
  free(t);
  return st;
}

/* Physical memory in bytes, or 0 if unknown. */
static int64_t phys_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

loom_status loom_machine_measure(loom_ctx *ctx, const loom_measure_options *opts,
                                 loom_machine *m, loom_triad_result *triad) {
  if (!m) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "measure: machine is NULL");
  loom_measure_options o = {0};
  if (opts) o = *opts;
  loom_machine_detect(ctx, m);
  int64_t bytes = o.triad_bytes > 0 ? o.triad_bytes : 4 * m->llc_bytes;
  int64_t mem = phys_bytes();
  if (mem > 0 && bytes > mem / TRIAD_MEM_SHARE) bytes = mem / TRIAD_MEM_SHARE;
  int64_t n = bytes / (3 * (int64_t)sizeof(float));
  n -= n % 1024;
  if (n < 1024) n = 1024;
  loom_triad_result tr;
  LOOM_TRY(loom_measure_triad(ctx, m->threads, n, o.triad_trials, &tr));
  m->triad_gbps = tr.gbps;
  if (triad) *triad = tr;
  if (o.sgemm) {
    double gf = 0.0;
    LOOM_TRY(loom_measure_sgemm(ctx, o.sgemm, m->threads,
                                o.gemm_n > 0 ? o.gemm_n : DEFAULT_GEMM_N, o.gemm_trials, &gf));
    m->sgemm_gflops = gf;
  }
  m->measured = true;
  /* What a session's plans read: the best this machine has shown; a
   * triad that fits in the LLC, or a rate left at its default, is not. */
  loom_machine best = *m;
  if (!o.sgemm) best.sgemm_gflops = 0;
  if (bytes < 2 * m->llc_bytes) best.triad_gbps = 0;
  loom_machine_keep_best(&best, loom_machine_measure_launch(m));
  return LOOM_STATUS_OK;
}

/* A quick first measurement (tens of ms): a triad over twice the LLC, a
 * 512^3 sgemm (below the large rate; a later `loom bench` raises it). */
#define ONCE_GEMM_N 512
#define ONCE_TRIALS 3

loom_status loom_machine_measure_once(loom_ctx *ctx, loom_sgemm_fn sgemm, loom_machine *m) {
  if (m->measured || !sgemm) return LOOM_STATUS_OK;
  loom_machine q = *m;
  q.threads = q.cores; /* the machine's rates, whatever this run's threads */
  int64_t n = 2 * q.llc_bytes / (3 * (int64_t)sizeof(float));
  n = n < 1024 ? 1024 : n - n % 1024;
  loom_triad_result tr;
  LOOM_TRY(loom_measure_triad(ctx, q.threads, n, ONCE_TRIALS, &tr));
  LOOM_TRY(loom_measure_sgemm(ctx, sgemm, q.threads, ONCE_GEMM_N, ONCE_TRIALS, &q.sgemm_gflops));
  q.triad_gbps = tr.gbps;
  q.measured = true;
  loom_machine_keep_best(&q, 0);
  m->triad_gbps = q.triad_gbps;
  m->sgemm_gflops = q.sgemm_gflops;
  m->measured = true;
  return LOOM_STATUS_OK;
}

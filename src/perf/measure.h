/*
 * Measured machine limits, taken in the same run as the benchmarks that
 * are compared against them (DESIGN.md: "Measured, not assumed"):
 *
 *   triad  a[i] = b[i] + s * c[i] over f32 arrays much larger than the
 *          last-level cache, OpenMP over all threads. Bytes are counted
 *          as STREAM does: 3 arrays x 4 bytes per element per pass (the
 *          write-allocate read of a[] is not counted).
 *   sgemm  C = A B at n x n x n (2048 by default): 2 n^3 flops per call,
 *          through a GEMM the caller passes in (perf is below the runtime,
 *          so it cannot name the cpu backend's loom_gemm_f32 itself;
 *          `loom bench` passes that one, and oneDNN's own threaded sgemm
 *          for comparison).
 *
 * Each figure is the median of several timed trials after a warm-up.
 */
#ifndef LOOM_PERF_MEASURE_H
#define LOOM_PERF_MEASURE_H

#include "perf/machine.h"

/* C[m, n] = A[m, k] B[k, n], row-major f32, dense, with `threads` threads. */
typedef loom_status (*loom_sgemm_fn)(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n,
                                     int64_t k, const float *a, const float *b, float *c);

typedef struct loom_measure_options {
  int64_t triad_bytes;  /* all three arrays together; 0: 4 x the LLC */
  int32_t triad_trials; /* 0: 7 */
  int64_t gemm_n;       /* 0: 2048 */
  int32_t gemm_trials;  /* 0: 5 */
  loom_sgemm_fn sgemm;  /* NULL: the sgemm rate keeps its default */
} loom_measure_options;

/* Details of one triad measurement. */
typedef struct loom_triad_result {
  int64_t n;          /* elements per array */
  int64_t bytes;      /* counted per pass: 3 * 4 * n */
  double median_s;    /* one pass */
  double gbps;        /* bytes / median_s / 1e9 */
} loom_triad_result;

/* The STREAM-like triad over n f32 elements per array, median of trials. */
loom_status loom_measure_triad(loom_ctx *ctx, int32_t threads, int64_t n, int32_t trials,
                               loom_triad_result *out);
/* The rate (GFLOP/s) of an n^3 product through fn, median of trials;
 * one element of the result is checked. */
loom_status loom_measure_sgemm(loom_ctx *ctx, loom_sgemm_fn fn, int32_t threads, int64_t n,
                               int32_t trials, double *gflops);
/* loom_machine_detect, then measures the triad and (with opts->sgemm) the
 * sgemm rate into m (opts may be NULL: triad only, defaults);
 * m->measured becomes true, and the profile keeps the best rates and
 * launch cost seen (loom_machine_keep_best). triad (may be NULL) gets the
 * triad's details. */
loom_status loom_machine_measure(loom_ctx *ctx, const loom_measure_options *opts,
                                 loom_machine *m, loom_triad_result *triad);

/* When m's rates are defaults (nothing kept in the profile), measures
 * them quickly (tens of ms: a triad over twice the LLC, a 512^3 sgemm
 * through `sgemm`, with all cores) and keeps them (loom_machine_keep_best),
 * so every later plan on this machine reads measured rates. */
loom_status loom_machine_measure_once(loom_ctx *ctx, loom_sgemm_fn sgemm, loom_machine *m);

/* How ranks that poll for their peers as Loom's MPI waits do
 * (loom_comm_poll_pause) see each other (perf/measure_turns.c):
 *   poll_period_s  one pause of a polling wait, timed alone (the sleep
 *                  and the wake-up: a message that completes during it is
 *                  noticed on average half a period late);
 *   turn_s         what one hop of a ping-pong between two such waiters
 *                  costs more when `ranks` processes time-share `cores`
 *                  (the others busy, none bound, as mpirun leaves more
 *                  ranks than cores) than when the two have the cores to
 *                  themselves: the wait for a peer that is off a core to
 *                  get one. 0 when ranks <= cores.
 * Forks ranks processes for about a second in all. */
#define LOOM_MEASURE_TURNS_MAX_RANKS 64
typedef struct loom_turn_result {
  double poll_period_s, turn_s;
} loom_turn_result;
loom_status loom_measure_turns(loom_ctx *ctx, int32_t cores, int32_t ranks,
                               loom_turn_result *out);

#endif

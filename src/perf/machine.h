/*
 * Measured machine facts, in one place: what the cost models read.
 * Cache sizes come from the system; rates are measured (perf/measure.c)
 * or defaulted when not measured yet.
 */
#ifndef LOOM_PERF_MACHINE_H
#define LOOM_PERF_MACHINE_H

#include "core/ctx.h"
#include "perf/comm_model.h"

/* Row blocks of the GEMM curve: 16, 32, 64, 128, 256 rows. */
#define LOOM_GEMM_ROWS_MIN 16
#define LOOM_GEMM_ROWS_POINTS 5

typedef struct loom_machine {
  int32_t threads; /* threads a run uses (the context's setting) */
  /* Online cores: a fixed property of the machine. The cost models use it,
   * never `threads`, so plans and schedules (and with them every result's
   * rounding) do not change with the thread count of a run. */
  int32_t cores;
  int64_t l1d_bytes, l2_bytes, llc_bytes; /* per core for l1/l2; llc total */
  double triad_gbps;                      /* STREAM-like triad bandwidth, all threads */
  double sgemm_gflops;                    /* large sgemm rate, all threads */
  double kernel_launch_s;                 /* fixed cost of one kernel launch (fork/join) */
  /* The GEMM's rate on blocks of whole rows of C (a GEMM with an
   * epilogue runs so), as a fraction of its rate on its own tiles:
   * gemm_rows_eff[i] for blocks of LOOM_GEMM_ROWS_MIN << i rows. Thin
   * blocks re-pack the whole of B per block and run short panels. Measured
   * once per machine by the cpu backend (gemm.h) and kept in the profile;
   * defaults otherwise. */
  double gemm_rows_eff[LOOM_GEMM_ROWS_POINTS];
  /* Messages between MPI ranks (parallel plans): the model the machine
   * profile keeps (measured by the first parallel run, perf/comm_model.h),
   * else the shared-memory defaults. */
  loom_comm_model comm;
  bool measured;                          /* false: rates are defaults */
} loom_machine;

/* Reads cache sizes and thread count; the triad and sgemm rates the
 * profile keeps (perf/profile.h; measured = true), else conservative
 * defaults; the launch cost the profile keeps, else measures it (at most
 * ~20 ms) and keeps it, unless the environment variable
 * LOOM_KERNEL_LAUNCH_US pins it (in microseconds). */
void loom_machine_detect(loom_ctx *ctx, loom_machine *m);
/* A fixed, unmeasured machine (2 cores, 32 KiB L1d, 1 MiB L2, 8 MiB LLC,
 * default rates): for reproducible plans in tests and tools. */
void loom_machine_default(loom_machine *m);
/* A fresh measurement of the launch cost (~20 ms at most), rounded as
 * loom_machine_detect keeps it. */
double loom_machine_measure_launch(const loom_machine *m);
/* Keeps the best of what the profile has and what was measured: the
 * higher triad and sgemm rates of m (when m->measured and m was measured
 * with all its cores) and the lower launch cost (launch_s; 0: none). A
 * busy machine measures low rates and high costs; the best seen is the
 * machine's, and plans read it (loom_machine_detect). */
void loom_machine_keep_best(const loom_machine *m, double launch_s);
/* The GEMM's rate on blocks of `rows` whole rows of C relative to its
 * rate on its own tiles (gemm_rows_eff, interpolated in log2(rows);
 * the first point below 16 rows, the last above 256). */
double loom_machine_gemm_rows_eff(const loom_machine *m, int64_t rows);

#endif

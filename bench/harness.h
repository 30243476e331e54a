/* Internals of `loom bench` shared by the runner (bench.c) and the
 * reports (report.c). */
#ifndef LOOM_BENCH_HARNESS_H
#define LOOM_BENCH_HARNESS_H

#include "perf/measure.h"
#include "workloads.h"

#include <stdio.h>

/* Execution modes, in the order they run and are reported. */
typedef enum loom_bench_mode {
  LOOM_BENCH_REFERENCE = 0, /* backend "ref": the oracle */
  LOOM_BENCH_EAGER,         /* backend "cpu", fusion "eager": one C loop per op */
  LOOM_BENCH_NONE,          /* generated code, one kernel per primitive */
  LOOM_BENCH_LOOP,          /* XLA-style loop fusion */
  LOOM_BENCH_STITCH,        /* stitching fusion */
  LOOM_BENCH_FROZEN,        /* stitch with the params frozen (loom_session_freeze_input):
                             * GEMM operands packed once; only workloads whose GEMMs
                             * read params */
  LOOM_BENCH_MODE_COUNT
} loom_bench_mode;

const char *loom_bench_mode_name(loom_bench_mode m);

typedef enum loom_bench_outcome {
  LOOM_BENCH_RAN = 0,
  LOOM_BENCH_SKIPPED,
  LOOM_BENCH_FAILED
} loom_bench_outcome;

/* One workload in one mode. */
typedef struct loom_bench_result {
  loom_bench_mode mode;
  loom_bench_outcome outcome;
  char note[512];             /* why skipped / the error */
  loom_session_stats stats;
  bool have_warm;             /* a second session of the same graph was made */
  double warm_compile_s;      /* its compile time (the kernel cache warm) */
  bool warm_cache_hit;
  double median_s, min_s;
  double gemm_s;              /* median time in GEMM steps per run (the trace's
                               * "gemm" events, epilogues included); 0: none */
  int32_t runs;
  bool checked;               /* compared against the baseline mode */
  loom_bench_mode baseline;
  double max_err;             /* max |x - x_base| / max(1, max |x_base|) */
  double vs[LOOM_BENCH_MODE_COUNT]; /* time(other) / time(this); 0: n/a */
} loom_bench_result;

/* ---- the memory roof (roof.c) ------------------------------------------- */

/* Variants: triad (a = b + 3 c) and copy (a = b), ordinary stores and
 * streaming stores, in this order. */
#define LOOM_ROOF_VARIANTS 4
const char *loom_bench_roof_variant_name(int32_t v);

/* The roof's kernels, JIT-compiled like generated code (once per run). */
typedef struct loom_bench_roof_kit loom_bench_roof_kit;
loom_status loom_bench_roof_load(loom_ctx *ctx, loom_bench_roof_kit **out);
void loom_bench_roof_free(loom_bench_roof_kit *kit);

/* The roof at one footprint: every variant's arrays together are
 * `footprint` bytes (counted: each array once, no write-allocate). */
typedef struct loom_bench_roof {
  int64_t footprint;
  int32_t runs;                           /* timed runs per variant */
  int32_t best;                           /* the variant with the largest gbps (-1: none) */
  double roof_gbps;                       /* gbps[best]: what fractions are taken against */
  double gbps[LOOM_ROOF_VARIANTS];        /* counted bytes / best_s */
  double moved_gbps[LOOM_ROOF_VARIANTS];  /* with the write-allocate of ordinary stores */
  double best_s[LOOM_ROOF_VARIANTS];      /* the best run */
} loom_bench_roof;

/* A roof measured in rounds (one run of each variant per round), so that
 * its runs can be interleaved with a workload's. */
typedef struct loom_bench_roof_run {
  const loom_bench_roof_kit *kit;
  int32_t threads, runs, done;
  int64_t footprint, n_max;
  float *a, *b, *c;
  double *t; /* [variant][run] */
} loom_bench_roof_run;

/* Allocates and fills the arrays, runs and checks every variant once. */
loom_status loom_bench_roof_begin(loom_ctx *ctx, const loom_bench_roof_kit *kit, int32_t threads,
                                  int64_t footprint, int32_t runs, loom_bench_roof_run *r);
/* Timed run k (0 .. runs-1) of every variant. */
void loom_bench_roof_round(loom_bench_roof_run *r, int32_t k);
/* The result (out may be NULL) and frees the arrays. */
void loom_bench_roof_end(loom_bench_roof_run *r, loom_bench_roof *out);
/* begin, `runs` rounds, end. */
loom_status loom_bench_roof_measure(loom_ctx *ctx, const loom_bench_roof_kit *kit, int32_t threads,
                                    int64_t footprint, int32_t runs, loom_bench_roof *out);

/* A workload's results over all modes. */
typedef struct loom_bench_row {
  const loom_bench_workload *w;
  char shape[96];
  int64_t min_bytes;
  double gemm_flops;
  loom_bench_result r[LOOM_BENCH_MODE_COUNT];
  bool wanted[LOOM_BENCH_MODE_COUNT];
  bool have_roof;      /* measured at this workload's footprint (min_bytes) */
  loom_bench_roof roof;
} loom_bench_row;

/* How workloads run. */
typedef struct loom_bench_opts {
  bool small;          /* --size small */
  bool with_reference; /* the reference mode at full size too */
  bool quiet;          /* no progress on stderr */
  bool back_to_back;   /* each mode's runs in a row (warm caches, as the peer
                          scripts time theirs), not interleaved by round */
  int32_t runs;        /* timed runs per mode */
  bool modes[LOOM_BENCH_MODE_COUNT];
  /* The roof's kernels: with them, memory-bound workloads measure the roof
   * at their own footprint, interleaved with their runs (NULL: not). */
  const loom_bench_roof_kit *roof_kit;
  int32_t threads;     /* for the roof's kernels */
  const char *backend; /* --backend: runs the fused and eager modes (NULL: cpu) */
  loom_gemm_precision gemm; /* --gemm: f32 products on a GPU backend (default f32) */
  loom_attention_mode attention; /* --attention (0: flash) */
} loom_bench_opts;

/* Runs workload w in every wanted mode into row (run.c); false if a mode
 * (or building the workload) failed: row says why. */
bool loom_bench_run_workload(loom_ctx *ctx, const loom_bench_opts *o,
                             const loom_bench_workload *w, loom_bench_row *row);

typedef struct loom_bench_machine_info {
  loom_machine m;        /* sgemm_gflops: through Loom's GEMM (gemm.h) */
  double sgemm_lib_gflops; /* oneDNN's own threaded sgemm, for comparison */
  int64_t triad_bytes;   /* the three arrays together */
  int64_t gemm_n;
  double measure_s;      /* time spent measuring */
  double loadavg;        /* 1-minute load average at the start (-1: unknown) */
  loom_bench_roof_kit *roof_kit; /* owned: freed by loom_bench_machine_info_clear */
  loom_bench_roof roof;  /* at triad_bytes: the machine's memory roof */
} loom_bench_machine_info;

void loom_bench_machine_info_clear(loom_bench_machine_info *mi);
/* The roof a workload's fraction is taken against: its own footprint's
 * when measured, else the machine's (GB/s; 0: none). */
double loom_bench_row_roof(const loom_bench_row *row, const loom_bench_machine_info *mi);

/* Measures triad and sgemm (machine.c); small: a smaller triad. */
loom_status loom_bench_measure_machine(loom_ctx *ctx, bool small, bool quiet,
                                       loom_bench_machine_info *mi);

/* The 1-minute load average from /proc/loadavg, or -1 (machine.c). */
double loom_bench_loadavg(void);

/* ---- `loom bench rng` (run.c) ------------------------------------------- */

/* The name that selects it on the command line; not a graph workload, and
 * not part of the default run (only when named). */
#define LOOM_BENCH_RNG_NAME "rng"
/* Seconds each figure is measured for when --seconds is not given. */
#define LOOM_BENCH_RNG_SECONDS 0.5

typedef struct loom_bench_rng_opts {
  int32_t rounds;  /* Philox rounds; -1: both 10 and 7 */
  double seconds;  /* measuring time per path, rounds and thread count */
  int32_t threads; /* the "in total" thread count (>= 1) */
  bool quiet;      /* no progress on stderr */
} loom_bench_rng_opts;

/* Measures every Philox path (unsupported ones reported as skipped) on
 * 1 thread and on o->threads, and prints a table or one JSON line per
 * path, rounds and thread count; false if a measurement failed. */
bool loom_bench_run_rng(FILE *f, bool json, const loom_bench_rng_opts *o);

/* ---- `loom bench attention` (wl_attention.c) ------------------------------ */

/* The name that selects it; like rng, it runs only when named. */
#define LOOM_BENCH_ATTENTION_NAME "attention"

/* Sweeps sequence lengths and head dims for one GPT block, forward and
 * backward, with attention dropout 0.1 under each RNG placement and
 * without dropout: measured (median of o->runs after a warm-up) against
 * the RNG performance model's prediction, the model's pick and the
 * measured best; a table with issue 4's targets, or one JSON line per
 * point and placement. mi: the machine measured in this run (its triad
 * and sgemm feed the prediction). false if a point failed. */
bool loom_bench_run_attention(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o,
                              const loom_bench_machine_info *mi);

/* ---- `loom bench parallel` (wl_parallel.c) -------------------------------- */

/* The name that selects it; like rng, it runs only when named. */
#define LOOM_BENCH_PARALLEL_NAME "parallel"

/* Issue 9's targets: data-parallel scaling on 2 processes (mpirun) against
 * 1, and the time to plan, lower and cut 64 devices' programs of a
 * 48-layer GPT; medians of o->runs. */
bool loom_bench_run_parallel(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o);

/* ---- `loom bench simulator` (wl_simulator.c) ------------------------------ */

#define LOOM_BENCH_SIMULATOR_NAME "simulator"

/* Issue 10, point 3: every built-in plan at 2 and 4 ranks, measured under
 * mpirun and predicted by the simulator on this machine measured in the
 * same run, side by side; medians of o->runs. */
bool loom_bench_run_simulator(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o);

/* ---- running `loom train` under mpirun (mpi_run.c) ------------------------ */

/* Runs a `loom train` command; its tokens/s in the steady state (the last
 * "step" line after step 1, which leaves out the first step's warm-up;
 * with --log-every above the steps, every step after the first), else of
 * its "final loss" line; -1 if it failed. */
double loom_bench_train_tok_s(const char *cmd);
/* This executable's path into exe; false if unknown or there is no mpirun. */
bool loom_bench_mpi_exe(char *exe, size_t size);
/* The MPI link as it is now (machine.c): two ranks of this executable
 * ping-pong (perf/comm_model.c, LOOM_COMM_REMEASURE=1) and keep the model
 * in the machine profile, where loom_bench_this_cluster reads it. A model
 * kept by whichever run came first may have been measured while the
 * machine was busy with other work (17 us and 1 GB/s where it measures
 * under 1 us and 4-9 GB/s otherwise). Three runs, their medians kept.
 * Without mpirun the kept one stays. */
void loom_bench_measure_mpi_link(void);
/* `mpirun -np NP EXE FLAGS --plan PLAN EXTRA`, one thread per rank. */
void loom_bench_mpirun_cmd(char *cmd, size_t size, int32_t np, const char *exe, const char *flags,
                           const char *plan, const char *extra);

/* ---- `loom bench megatron` (wl_megatron.c) -------------------------------- */

/* The name that selects it; like rng, it runs only when named. */
#define LOOM_BENCH_MEGATRON_NAME "megatron"

/* Composed estimates (parallel/estimate.h) of Megatron-LM's published
 * weak-scaling runs against their teraFLOP/s per GPU; nothing measured.
 * false if an estimate failed. */
bool loom_bench_run_megatron(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *bo);

/* Reports: a JSON object per line, or a table for people. */
void loom_bench_print_machine(FILE *f, bool json, const loom_bench_machine_info *mi);
void loom_bench_print_header(FILE *f, bool json);
void loom_bench_print_row(FILE *f, bool json, const loom_bench_row *row,
                          const loom_bench_machine_info *mi);
/* The table's closing section: issue 3's Targets, each with its figure
 * (targets.c); only for workloads and modes that ran. */
void loom_bench_print_targets(FILE *f, const loom_bench_row *rows, int32_t n,
                              const loom_bench_machine_info *mi, bool small);

#endif

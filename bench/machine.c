/*
 * The machine line of `loom bench`: triad bandwidth and the sgemm rate,
 * measured in the same run as the workloads. The sgemm rate the ratios
 * use is Loom's own GEMM path (runtime/cpu/gemm.h: fixed tiles, one
 * single-threaded oneDNN call each); oneDNN's own threaded sgemm is
 * measured beside it, so a gap between the two shows.
 */
#include "harness.h"
#include "core/clock.h"

#include "runtime/cpu/gemm.h"

#include <dnnl.h>
#include <omp.h>
#include <string.h>
#include <time.h>

#define GEMM_N 2048
/* A floor for the triad arrays (all three) when the LLC reads small. */
#define TRIAD_MIN_BYTES ((int64_t)48 << 20)
/* Timed runs of each roof variant at the machine's size. */
#define ROOF_RUNS 7

static loom_status via_loom_gemm(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                              const float *a, const float *b, float *c) {
  loom_gemm p = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k,
                 .b = b, .ldb = n, .c = c, .ldc = n, .c_stride = m * n};
  return loom_gemm_f32(ctx, threads, &p);
}

static loom_status onednn_sgemm(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                                const float *a, const float *b, float *c) {
  int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  dnnl_status_t st = dnnl_sgemm('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  omp_set_num_threads(prev);
  if (st != dnnl_success)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "dnnl_sgemm failed (status %d)", (int)st);
  return LOOM_STATUS_OK;
}

void loom_bench_machine_info_clear(loom_bench_machine_info *mi) {
  loom_bench_roof_free(mi->roof_kit);
  mi->roof_kit = NULL;
}

double loom_bench_row_roof(const loom_bench_row *row, const loom_bench_machine_info *mi) {
  if (row && row->have_roof && row->roof.roof_gbps > 0) return row->roof.roof_gbps;
  return mi->roof.roof_gbps > 0 ? mi->roof.roof_gbps : mi->m.triad_gbps;
}

/* Other processes' load: a shared machine's timings are only as good as
 * it is quiet, so the report says how busy it was. */
double loom_bench_loadavg(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  double x = -1.0;
  if (!f) return -1.0;
  if (fscanf(f, "%lf", &x) != 1) x = -1.0;
  fclose(f);
  return x;
}

loom_status loom_bench_measure_machine(loom_ctx *ctx, bool small, bool quiet,
                                       loom_bench_machine_info *mi) {
  memset(mi, 0, sizeof *mi);
  mi->loadavg = loom_bench_loadavg();
  loom_machine_detect(ctx, &mi->m);
  /* STREAM's rule is arrays several times the LLC; --size small settles
   * for one LLC's worth in all so quick runs stay quick. */
  loom_measure_options mo = {.gemm_n = GEMM_N, .sgemm = via_loom_gemm};
  mo.triad_bytes = (small ? 1 : 4) * mi->m.llc_bytes;
  if (mo.triad_bytes < TRIAD_MIN_BYTES) mo.triad_bytes = TRIAD_MIN_BYTES;
  if (!quiet)
    fprintf(stderr, "bench: measuring the machine (triad over %lld MiB, sgemm %d^3)\n",
            (long long)(mo.triad_bytes >> 20), GEMM_N);
  double t0 = loom_now_s();
  loom_triad_result tr;
  LOOM_TRY(loom_machine_measure(ctx, &mo, &mi->m, &tr));
  LOOM_TRY(loom_measure_sgemm(ctx, onednn_sgemm, mi->m.threads, GEMM_N, 0,
                              &mi->sgemm_lib_gflops));
  /* The roof over the same bytes as the triad, with the kernels built
   * like generated code (roof.c). */
  LOOM_TRY(loom_bench_roof_load(ctx, &mi->roof_kit));
  LOOM_TRY(loom_bench_roof_measure(ctx, mi->roof_kit, mi->m.threads, tr.bytes, ROOF_RUNS,
                                   &mi->roof));
  mi->measure_s = loom_now_s() - t0;
  mi->triad_bytes = tr.bytes;
  mi->gemm_n = GEMM_N;
  return LOOM_STATUS_OK;
}

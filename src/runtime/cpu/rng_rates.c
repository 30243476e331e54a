/*
 * The RNG placement model's rates for this machine (perf/rng_model.h),
 * measured with the kernels the cpu backend runs: the best Philox path on
 * one core, a GEMM and the flash-attention kernels on a small block, all
 * threads. About 0.1 s. Memory bandwidth is the machine's triad figure
 * (measured by `loom bench`, a default otherwise): the mask traffic it
 * prices is small next to the other terms.
 */
#include "runtime/cpu/cpu.h"
#include "core/clock.h"
#include "runtime/cpu/flash_attention.h"
#include "runtime/cpu/gemm.h"

#include "perf/machine.h"
#include "perf/rng_rate.h"
#include "rng/philox_fast.h"

#include <stdlib.h>

enum { RATE_BH = 4, RATE_S = 256, RATE_D = 64, RATE_GEMM = 384, RATE_REPS = 3 };

void loom_cpu_rng_model(loom_ctx *ctx, int32_t threads, loom_rng_model *m) {
  loom_machine mc;
  loom_machine_detect(ctx, &mc);
  *m = (loom_rng_model){.machine = "this CPU (measured rates)",
                        .cores = mc.cores > 0 ? mc.cores : 1,
                        .gemm_flops = mc.sgemm_gflops * 1e9,
                        .attn_fwd_flops = mc.sgemm_gflops * 1e9 / 4,
                        .attn_bwd_flops = mc.sgemm_gflops * 1e9 / 6,
                        .bandwidth = mc.triad_gbps * 1e9,
                        .fused_rng_penalty = 1.0,
                        .overlap_cores = 1};
  double bytes = loom_philox_bench(loom_philox_best_path(), 10, 1, 0.03);
  m->rng_words_core = bytes > 0 ? bytes / 4.0 : 1e8;
  int64_t qn = (int64_t)RATE_BH * RATE_S * RATE_D, gn = (int64_t)RATE_GEMM * RATE_GEMM;
  float *buf = calloc((size_t)(7 * qn + 3 * gn + RATE_BH * RATE_S), sizeof *buf);
  if (!buf) return; /* keep the estimates */
  for (int64_t i = 0; i < 7 * qn + 3 * gn; i++) buf[i] = (float)((i * 37 % 101) - 50) / 100.0f;
  float *q = buf, *k = q + qn, *v = k + qn, *o = v + qn, *d_o = o + qn, *dq = d_o + qn;
  float *ga = buf + 7 * qn, *gb = ga + gn, *gc = gb + gn, *lse = gc + gn;
  float *dk = dq, *dv = dq; /* rates only: outputs may overlap */
  loom_flash_attn a = {.bh = RATE_BH, .sq = RATE_S, .sk = RATE_S, .d = RATE_D, .dv = RATE_D,
                       .q = q, .k = k, .v = v, .scale = 0.125};
  loom_gemm gm = {.m = RATE_GEMM, .n = RATE_GEMM, .k = RATE_GEMM, .batch = 1, .a = ga,
                  .lda = RATE_GEMM, .b = gb, .ldb = RATE_GEMM, .c = gc, .ldc = RATE_GEMM,
                  .c_stride = gn};
  double best[3] = {1e30, 1e30, 1e30};
  for (int r = 0; r < RATE_REPS; r++) {
    double t0 = loom_now_s();
    loom_status s1 = loom_gemm_f32(ctx, threads, &gm);
    double t1 = loom_now_s();
    loom_status s2 = loom_flash_attn_fwd(ctx, threads, &a, o, lse);
    double t2 = loom_now_s();
    loom_status s3 = loom_flash_attn_bwd(ctx, threads, &a, o, lse, d_o, dq, dk, dv);
    double t3 = loom_now_s();
    if (s1 || s2 || s3) {
      loom_error_clear(ctx);
      break;
    }
    best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
    best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
    best[2] = t3 - t2 < best[2] ? t3 - t2 : best[2];
  }
  free(buf);
  double attn = 4.0 * RATE_BH * RATE_S * (double)RATE_S * RATE_D;
  if (best[0] < 1e30) m->gemm_flops = 2.0 * (double)RATE_GEMM * RATE_GEMM * RATE_GEMM / best[0];
  if (best[1] < 1e30) m->attn_fwd_flops = attn / best[1];
  if (best[2] < 1e30) m->attn_bwd_flops = 2.5 * attn / best[2];
}

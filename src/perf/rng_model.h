/*
 * The RNG placement performance model (docs/DROPOUT.md, "Choosing a
 * placement"): from rates measured on the machine — Philox words per
 * second per core, the GEMM rate, the flash-attention kernels' rates,
 * memory bandwidth, cores — it predicts the time an attention op with
 * dropout costs under each RNG placement, and picks the fastest. The same
 * formulas with a GPU's published rates predict the GPU regime.
 */
#ifndef LOOM_PERF_RNG_MODEL_H
#define LOOM_PERF_RNG_MODEL_H

#include "core/ctx.h"

/* The placements are loom_rng_placement (loom.h): AUTO (the model picks
 * per attention op), FUSED (inside the attention kernels), OVERLAP (a
 * bitmask made by a concurrent task during the GEMMs before), SEQUENTIAL
 * (a bitmask made just before attention). */

typedef struct loom_rng_model {
  const char *machine;      /* what the rates describe, for reports */
  int32_t cores;            /* CPU cores (GPU: SMs) */
  bool gpu;                 /* RNG in idle integer units while tensor cores run the GEMM */
  double rng_words_core;    /* Philox 32-bit words per second per core (SM) */
  double gemm_flops;        /* sgemm (GPU: tensor-core) FLOP/s, whole machine */
  /* Flash attention FLOP/s, whole machine, at long sequences; at Sk keys
   * the kernels reach attn_*_flops * Sk / (Sk + attn_s0) (short rows pay
   * per-tile and diagonal-tile costs). */
  double attn_fwd_flops, attn_bwd_flops;
  double attn_s0;
  double bandwidth;         /* bytes/s to memory (writing a mask) */
  double mask_read_bit_s;   /* seconds an attention kernel spends per mask bit it reads */
  double fused_rng_penalty; /* >= 1: how much slower words come inside the attention kernel */
  int32_t overlap_cores;    /* cores (SMs) a concurrent mask task takes from the GEMM */
} loom_rng_model;

/* One attention op and its surroundings. */
typedef struct loom_rng_attn {
  int64_t bh, sq, sk, d, dv;
  bool causal, backward;    /* backward: the training step runs the gradient too */
  double gemm_before_flops; /* the GEMMs an overlapped mask task runs beside */
} loom_rng_attn;

/* Predicted seconds of the attention op (forward, and backward if asked)
 * without dropout (t_none) and under each placement (t[FUSED..SEQUENTIAL];
 * t[AUTO] = the smallest), for dropout p > 0. Returns the pick. */
loom_rng_placement loom_rng_model_predict(const loom_rng_model *m, const loom_rng_attn *a,
                                          double *t_none, double t[LOOM_RNG_COUNT]);

/* (The rates of this machine are measured by the cpu backend, which owns
 * the kernels: loom_cpu_rng_model in runtime/cpu/cpu.h.) */
/* Published rates of an NVIDIA H100 SXM and H200 (same SMs and clocks; the
 * H200 has more, faster HBM). */
void loom_rng_model_h100(loom_rng_model *m);
void loom_rng_model_h200(loom_rng_model *m);

#endif

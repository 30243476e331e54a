/*
 * Composed estimates: one training step of a GPT (model/gpt.h) under a
 * mesh plan (data x tensor x pipeline parallel, micro-batches, schedule,
 * ZeRO, recomputation) on a cluster far too large to lower device by
 * device (3,072 or 16,384 devices). The parts come from the same models
 * as the simulator (simulate.h): a layer's forward and backward time is
 * the simulated time of one layer's nodes at the tensor-parallel shard's
 * shapes, with the tensor-parallel collectives the lowering inserts; the
 * pipeline is an event simulation of the schedule over stages and
 * micro-batches; the data-parallel gradient reduction a hierarchical ring
 * (inside nodes, then across them). docs/SIMULATOR.md, "Composed
 * estimates", gives the model and its constants.
 */
#ifndef LOOM_PARALLEL_ESTIMATE_H
#define LOOM_PARALLEL_ESTIMATE_H

#include "model/gpt.h"
#include "perf/cluster.h"

typedef enum loom_pipe_schedule {
  LOOM_PIPE_1F1B = 0,     /* PipeDream-flush: S-1-s warm-up forwards */
  LOOM_PIPE_GPIPE,        /* all forwards, then all backwards */
  LOOM_PIPE_INTERLEAVED,  /* Megatron's: `chunks` model chunks per device */
} loom_pipe_schedule;

typedef struct loom_mesh_plan {
  int32_t dp, tp, pp;     /* degrees; dp * tp * pp devices */
  int32_t micro_batch;    /* sequences per micro-batch (per dp replica) */
  loom_pipe_schedule schedule;
  int32_t chunks;         /* interleaved: chunks per device (>= 2); else 1 */
  int32_t zero;           /* 0..3: optimizer state / gradients / params sharded over dp */
  bool recompute;         /* full activation recomputation of every layer */
  bool tp_across_nodes;   /* false (Megatron's placement): a tp group inside one node */
} loom_mesh_plan;

typedef struct loom_estimate_options {
  const loom_cluster *cluster;
  loom_precision precision; /* GEMMs and attention; others at the f32 rate */
  double element_bytes;     /* activations and parameters; 0: 2 at bf16 or fp8, else 4 */
  bool overlap;             /* dp gradient reduction overlapped with the backward */
  double gemm_efficiency;   /* of the peak on large GEMMs; 0: the simulator's default */
  double memory_efficiency; /* of the memory bandwidth; 0: the simulator's default */
  bool composite_attention; /* attention as its primitives (QK^T, softmax, dropout, PV:
                               what Megatron-LM ran in 2021), not flash attention */
} loom_estimate_options;

typedef struct loom_estimate_memory { /* bytes on the busiest device */
  double params, grads, optimizer, activations, comm_buffers, total;
} loom_estimate_memory;

typedef struct loom_estimate {
  double step_s;
  double bubble_s;            /* pipeline fill and drain on the critical device */
  double bubble_fraction;     /* bubble_s / step_s */
  double compute_s;           /* busy computing, critical device (incl. recompute) */
  double tp_comm_s, pp_comm_s, dp_comm_s; /* exposed (not hidden) on the critical device */
  double optimizer_s;
  double model_flops;         /* per step, all devices: Megatron's count (eq. 3 of 2104.04473,
                                 recompute included when on) */
  double flops_per_device_s;  /* model_flops / step_s / devices */
  loom_estimate_memory memory;
  bool fits;                  /* memory.total <= cluster memory capacity */
} loom_estimate;

/* Checks the plan against the model and the batch (degrees divide heads,
 * d_ff, layers by pp * chunks, the global batch by dp * micro_batch, ...)
 * with an error naming what does not divide. */
loom_status loom_mesh_plan_check(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                                 const loom_mesh_plan *p, int32_t devices_per_node);

/* One step of model m at global_batch sequences of m->context tokens. */
loom_status loom_estimate_gpt(loom_ctx *ctx, const loom_gpt_config *m, int64_t global_batch,
                              const loom_mesh_plan *p, const loom_estimate_options *o,
                              loom_estimate *out);

/* The activation bytes one block keeps for its backward, one micro-batch of
 * micro_batch sequences on a tp shard (the estimate's memory model: Korthikanti
 * et al.'s count, generalised to K/V heads and SwiGLU; docs/SIMULATOR.md). */
double loom_estimate_block_activation_bytes(const loom_gpt_config *m, int32_t micro_batch,
                                            int32_t tp, double element_bytes, bool composite);

/* The built-in plan spec (builtin.h) that runs p, e.g. "dp2xtp2+mb4+zero1",
 * written into buf; false if Loom's built-in plans cannot express it
 * (e.g. recompute together with pp) or buf is too small. */
bool loom_mesh_plan_spec(const loom_mesh_plan *p, int64_t global_batch, char *buf, size_t n);

#endif

/*
 * Flash attention and the dropout bitmask on GPUs: the kernels of the
 * attention ops (ops/attention.c: flash_attention, flash_attention_grad,
 * dropout_mask) written once in the GPU renderer's dialect table
 * (gpu_dialect.c), so OpenCL C and CUDA C come from the same text, and
 * the launches that run one such node, described independently of the
 * backend (gpu_attention.c says how the kernels work).
 *
 * Semantics: the ops' own (runtime/cpu/flash_attention.h spells them out,
 * edge cases included); dropout keep bits come from the Philox counters of
 * docs/DROPOUT.md, generated in the kernels (placement `fused`) or read
 * from the bitmask a dropout_mask node wrote (`sequential`, `overlap`), so
 * every placement gives the same results bit for bit, and the masks are
 * the cpu backend's.
 */
#ifndef LOOM_CODEGEN_GPU_ATTENTION_H
#define LOOM_CODEGEN_GPU_ATTENTION_H

#include "codegen/gpu_codegen.h"
#include "ir/graph.h"
#include "perf/rng_model.h"

/* Where an argument of a launch comes from. */
enum {
  LOOM_GPU_ARG_BUF = 0, /* a buffer: buf >= 0 is the node's input buf, or output buf - n_in;
                         * LOOM_GPU_BUF_WORKSPACE the call's workspace; LOOM_GPU_BUF_NONE none */
  LOOM_GPU_ARG_I64 = 1, /* an 8-byte integer scalar, i */
  LOOM_GPU_ARG_F64 = 2, /* an 8-byte double scalar, f */
};
#define LOOM_GPU_BUF_NONE (-1)
#define LOOM_GPU_BUF_WORKSPACE (-2)
#define LOOM_GPU_CALL_MAX_ARGS 32
#define LOOM_GPU_ATTENTION_MAX_CALLS 4

typedef struct loom_gpu_arg {
  int32_t kind, buf;
  int64_t i;
  double f;
} loom_gpu_arg;

/* One launch: fn over `groups` groups of LOOM_GPU_LOCAL threads. */
typedef struct loom_gpu_call {
  char fn[64];
  int64_t groups;
  int32_t n_args;
  loom_gpu_arg args[LOOM_GPU_CALL_MAX_ARGS];
} loom_gpu_call;

/* The launches that run node n of g on a GPU, in order (at most
 * LOOM_GPU_ATTENTION_MAX_CALLS: the backward's Di, dK/dV, dQ and, when its
 * bias gradient is read, dbias), and
 * the workspace bytes they need; *n_calls 0 when the node is not one the
 * kernels take (not an attention op, not f32, a non-flat dropout piece,
 * head dims outside what fits the group's shared memory, empty sizes):
 * the backend runs its reference kernel then. */
loom_status loom_gpu_attention_calls(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                                     loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS],
                                     int32_t *n_calls, int64_t *workspace_bytes);

/* The source (prelude included) of every kernel the attention nodes of g
 * that loom_gpu_attention_calls takes need, in dialect d; *source NULL when
 * there are none. */
loom_status loom_codegen_gpu_attention(loom_ctx *ctx, loom_gpu_dialect d, const loom_graph *g,
                                       char **source);

/* The same for explicit head dims (tests: every kernel of these shapes;
 * rng 0 no dropout, 1 fused, 2 mask). */
loom_status loom_codegen_gpu_attention_dims(loom_ctx *ctx, loom_gpu_dialect d, int32_t n,
                                            const int32_t *dims, const int32_t *dvs,
                                            const int32_t *rngs, char **source);

/* The GPU backends' graph rewrite, the cpu backend's (passes/attention.h):
 * attention becomes flash attention with the placement opts->rng names
 * (auto: per attention op, what measure's model predicts fastest; measure
 * is called, with arg, only then), unless opts->attention is `decomposed` (`auto` is
 * flash here: no decomposed-attention cost model for GPUs yet). */
loom_status loom_gpu_attention_rewrite(loom_ctx *ctx, const loom_graph *g,
                                       const loom_session_options *opts,
                                       void (*measure)(void *arg, loom_ctx *ctx, loom_rng_model *m),
                                       void *arg, loom_graph **out, int32_t *n_rewritten);

#endif

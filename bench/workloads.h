/*
 * The workloads of `loom bench`: Loom graphs built with the internal
 * builder, each with its inputs' fill rule, the minimum bytes it must
 * move and its shape. Sizes follow issue 3 (point 8); --size small
 * shrinks every workload for quick runs.
 */
#ifndef LOOM_BENCH_WORKLOADS_H
#define LOOM_BENCH_WORKLOADS_H

#include "ir/graph.h"

/* How an input is filled (deterministic pseudo-random data). */
typedef enum loom_bench_fill {
  LOOM_BENCH_FILL_UNIFORM = 0, /* [-1, 1) */
  LOOM_BENCH_FILL_POSITIVE,    /* [0, 1): second moments */
  LOOM_BENCH_FILL_GAIN,        /* 1 + [-0.1, 0.1): norm gains */
  LOOM_BENCH_FILL_SMALL,       /* 0.02 x [-1, 1): weights */
  LOOM_BENCH_FILL_LABELS,      /* integers in [0, classes) */
  LOOM_BENCH_FILL_STEP         /* the optimiser step: 10 */
} loom_bench_fill;

/* A built workload. */
typedef struct loom_bench_graph {
  loom_graph *g;
  loom_bench_fill *fill; /* one per graph input */
  int32_t n_fill, cap_fill;
  int64_t classes;       /* LABELS range */
  int64_t min_bytes;     /* the least memory traffic the computation needs */
  double gemm_flops;     /* matmul flops per run (0 for memory-bound ones) */
  char shape[96];        /* e.g. "[32768, 1024]" */
  loom_tensor **given;   /* per graph input: the user's data (--input), or NULL: filled */
  int32_t n_given;
  loom_attention_mode attention; /* what the backward makes of attention (0: flash) */
} loom_bench_graph;

typedef struct loom_bench_workload loom_bench_workload;
struct loom_bench_workload {
  const char *name;
  const char *what;     /* one line for --list */
  const char *bytes_rule; /* how min_bytes is counted, e.g. "2*N*4" */
  bool memory_bound;    /* bw_fraction is meaningful */
  loom_status (*build)(loom_ctx *ctx, const loom_bench_workload *w, bool small,
                       loom_bench_graph *out);
  const void *arg;      /* the build's own data (a file workload's spec), or NULL */
};

/* Every workload, in report order. */
const loom_bench_workload *loom_bench_workloads(int32_t *n);
/* The workload called name, or NULL. */
const loom_bench_workload *loom_bench_find(const char *name);

/* The model workloads (wl_model.c). */
loom_status loom_bench_build_bert(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                  loom_bench_graph *b);
loom_status loom_bench_build_gpt2(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                  loom_bench_graph *b);

/* The training step of `loom train` with its defaults (wl_train.c); --size
 * small: batch 8. */
loom_status loom_bench_build_train_step(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                        loom_bench_graph *b);
/* The layer workloads (wl_layers.c). */
#define LOOM_BENCH_LAYER_BUILD(fn)                                                            \
  loom_status fn(loom_ctx *ctx, const loom_bench_workload *self, bool small, loom_bench_graph *b)
LOOM_BENCH_LAYER_BUILD(loom_bench_build_rmsnorm_fwd);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_rmsnorm_bwd);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_swiglu);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_rotary);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_groupnorm_silu);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_ls_ce);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_bce);
/* held-out graphs (wl_layers.c) */
LOOM_BENCH_LAYER_BUILD(loom_bench_build_instnorm_lrelu);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_instnorm_lrelu_bwd);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_t5_norm_residual);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_alibi_softmax);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_alibi_softmax_bwd);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_geglu_bwd);
LOOM_BENCH_LAYER_BUILD(loom_bench_build_layerscale_droppath);
/* held-out graphs in the text IR (wl_heldout.c): the workload's arg is one
 * of these templates */
LOOM_BENCH_LAYER_BUILD(loom_bench_build_heldout);
typedef struct loom_bench_heldout loom_bench_heldout;
extern const loom_bench_heldout loom_bench_heldout_rotary_bwd, loom_bench_heldout_focal,
    loom_bench_heldout_softcap, loom_bench_heldout_moe_top2, loom_bench_heldout_sqrelu,
    loom_bench_heldout_convnext, loom_bench_heldout_llama, loom_bench_heldout_relbias,
    loom_bench_heldout_lora, loom_bench_heldout_resnet, loom_bench_heldout_gqa,
    loom_bench_heldout_mixer;

/* One pre-LN GPT block's forward for `loom bench attention` (wl_model.c):
 * batch 1, seq tokens, heads heads of head_dim (d_model = heads *
 * head_dim, MLP 4 d_model), causal attention with dropout p on the
 * probabilities (the `attention` composite), no residual dropout; inputs
 * x, the block's parameters, dy; one output "objective" = sum(y * dy). */
loom_status loom_bench_build_attn_block(loom_ctx *ctx, int64_t seq, int64_t heads,
                                        int64_t head_dim, double p, loom_bench_graph *b);
/* The block's inputs x and parameters (the gradients' wrt). */
#define LOOM_BENCH_ATTN_BLOCK_WRT 13

/* A workload read from a file (wl_file.c): `loom bench FILE`, a graph
 * file or an ONNX model (FILE.onnx). */
typedef struct loom_bench_file_spec {
  const char *path;
  bool grad;                 /* forward + backward: d(loss)/d(params) */
  int32_t n_inputs;
  const char *const *inputs; /* "name=file.npy": data for those inputs */
  int32_t n_dims;
  const char *const *dims;   /* "name=N": an ONNX model's symbolic dims */
} loom_bench_file_spec;
/* Builds the workload whose arg is a loom_bench_file_spec. */
loom_status loom_bench_build_file(loom_ctx *ctx, const loom_bench_workload *w, bool small,
                                  loom_bench_graph *b);

/* Fills b's inputs with deterministic pseudo-random data per its fill
 * rules (run.c); in: one tensor slot per graph input. */
loom_status loom_bench_make_inputs(loom_ctx *ctx, const loom_bench_graph *b, loom_tensor **in);

/* Frees a built workload's graph and arrays (not b itself). */
void loom_bench_graph_clear(loom_bench_graph *b);

/* ---- helpers for the workload files ------------------------------------ */

/* Adds a graph input (param if is_param) with its fill rule; -1 on error
 * (the status is left on g->err, as the builder does). */
int32_t loom_bench_input(loom_bench_graph *b, const char *name, loom_dtype dt, int32_t rank,
                         const int64_t *shape, loom_bench_fill fill, bool is_param);
/* sum(y * dy) over every axis: the scalar whose gradient back-propagates
 * dy through y. */
int32_t loom_bench_vjp_loss(loom_graph *g, int32_t y, int32_t dy);
/*
 * Turns b->g (composites allowed; its outputs: the loss first, then any
 * forward values to keep) into the backward workload: decomposes it,
 * appends d(loss)/d(inputs wrt[0..n_wrt)) (indices into the graph's
 * inputs), and keeps only what the kept forward outputs and the gradients
 * need (the loss itself is dropped). Gradients are named "d" + input name.
 * Attention composites become what the default backend makes of them with
 * b->attention (`--attention`: flash attention on cpu unless it says
 * otherwise) before autodiff, as `loom train` builds its step.
 */
loom_status loom_bench_make_backward(loom_bench_graph *b, int32_t n_wrt, const int32_t *wrt);
/* The same with output `loss` as the loss (the others kept). */
loom_status loom_bench_make_backward_of(loom_bench_graph *b, int32_t loss, int32_t n_wrt,
                                        const int32_t *wrt);
/* Sums the matmul and convolution flops of b->g after decomposition into
 * b->gemm_flops. */
loom_status loom_bench_count_flops(loom_bench_graph *b);
/* Appends a fill rule per input of b->g: integer inputs get labels in
 * range, params small values like initialised weights, the rest uniform. */
loom_status loom_bench_fill_by_kind(loom_ctx *ctx, loom_bench_graph *b);
/* Bytes of every graph input plus every graph output. */
int64_t loom_bench_io_bytes(const loom_graph *g);

#endif

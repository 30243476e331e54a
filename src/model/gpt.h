/*
 * A GPT-style decoder (the model of `loom train`) built as Loom graphs:
 * byte tokens, learned position embeddings, pre-LayerNorm blocks of causal
 * multi-head attention and a GELU (tanh) MLP, dropout on the attention
 * probabilities and on both residual branches, a final LayerNorm, and an
 * output head tied to the token embedding (logits = h @ wte^T).
 *
 * The training-step graph takes the batch, the optimiser state and a few
 * scalars and returns the loss and the updated state, so one compiled
 * session runs every step (outputs may alias inputs: in-place updates).
 */
#ifndef LOOM_MODEL_GPT_H
#define LOOM_MODEL_GPT_H

#include "ir/graph.h"

typedef struct loom_gpt_config {
  int32_t vocab; /* 256: bytes */
  int32_t n_layer;
  int32_t d_model;
  int32_t n_head;  /* divides d_model */
  int32_t context; /* longest sequence (rows of wpe) */
  int32_t d_ff;    /* MLP hidden width, 4 * d_model by default */
  double dropout;  /* attention-probability and residual dropout, [0, 1) */
} loom_gpt_config;

/* The largest configuration loom_gpt_config_check accepts: beyond the
 * published models (Llama-3-405B: 126 layers, width 16384, d_ff 53248,
 * vocabulary 128256), so planning sees them at full size. Building a
 * graph allocates no parameters; training one that size needs the memory. */
#define LOOM_GPT_MAX_LAYERS 1024
#define LOOM_GPT_MAX_WIDTH 65536
#define LOOM_GPT_MAX_CONTEXT 65536
#define LOOM_GPT_MAX_VOCAB (1 << 20)
#define LOOM_GPT_MAX_FF (1 << 20)

/* vocab 256, 2 layers, d_model 128, 4 heads, context 64, d_ff 512, dropout 0.1. */
void loom_gpt_config_default(loom_gpt_config *c);
/* Checks ranges and that n_head divides d_model. */
loom_status loom_gpt_config_check(loom_ctx *ctx, const loom_gpt_config *c);

typedef enum loom_gpt_init {
  LOOM_GPT_INIT_NORMAL = 0, /* normal(0, 0.02) */
  LOOM_GPT_INIT_ONES,       /* LayerNorm gains */
  LOOM_GPT_INIT_ZEROS       /* biases */
} loom_gpt_init;

/* One parameter tensor: a stable name ("wte", "h0.ln1.g", ...). */
typedef struct loom_gpt_param {
  char name[32];
  int32_t rank;
  int64_t shape[2];
  loom_gpt_init init;
  bool decay; /* weight decay applies (matrices, not gains or biases) */
} loom_gpt_param;

/* The parameter list in its fixed order (the graphs' parameter order);
 * *out is malloc'ed, release with free(). */
loom_status loom_gpt_params(loom_ctx *ctx, const loom_gpt_config *c, loom_gpt_param **out,
                            int32_t *n);

/* AdamW settings and the dropout seed of the training graph. */
typedef struct loom_gpt_optim {
  double beta1, beta2, eps, weight_decay;
  uint64_t seed; /* dropout masks */
  /* The options of the session the step will run in, or NULL. Not NULL:
   * that backend's graph rewrite (loom_backend_rewrite) runs on the
   * forward graph before autodiff, so that what it makes brings its own
   * gradient (cpu: flash attention, with opts->attention and opts->rng).
   * NULL: attention stays a composite, differentiated through its
   * primitives. */
  const loom_session_options *session;
} loom_gpt_optim;

/*
 * Training-step graph layout. Inputs, in order: tokens [B, T] i64,
 * targets [B, T] i64, step f32[] (the AdamW step, from 1), lr f32[] (this
 * step's learning rate), rng_base i64[] (the dropout counter base of this
 * step: step index * rng_per_step), then the n parameters (graph params),
 * then n "adam.m.NAME", then n "adam.v.NAME". Outputs: "loss", then the n
 * new parameters, n new m, n new v (same order as the inputs).
 */
enum {
  LOOM_GPT_IN_TOKENS = 0,
  LOOM_GPT_IN_TARGETS,
  LOOM_GPT_IN_STEP,
  LOOM_GPT_IN_LR,
  LOOM_GPT_IN_RNG_BASE,
  LOOM_GPT_IN_PARAMS /* first parameter */
};

/* Builds the training step for batch b and sequence length t (<= context):
 * forward, loss, decomposition, gradients (autodiff), AdamW per parameter.
 * *rng_per_step is the number of dropout counter positions one step uses. */
loom_status loom_gpt_build_train(loom_ctx *ctx, const loom_gpt_config *c, int32_t b, int32_t t,
                                 const loom_gpt_optim *o, loom_graph **out, int64_t *rng_per_step);

/*
 * Inference graph (no dropout). Inputs: tokens [B, T] i64, rows [B] i64
 * (row r of batch element i is i * T + position: the position whose next
 * token is wanted), then the n parameters. Output: "logits" [B, vocab].
 */
loom_status loom_gpt_build_infer(loom_ctx *ctx, const loom_gpt_config *c, int32_t b, int32_t t,
                                 loom_graph **out);

#endif

/*
 * A GPT-style decoder (the model of `loom train`) built as Loom graphs:
 * byte tokens, learned position embeddings, pre-LayerNorm blocks of causal
 * multi-head attention and a GELU (tanh) MLP, dropout on the attention
 * probabilities and on both residual branches, a final LayerNorm, and an
 * output head tied to the token embedding (logits = h @ wte^T).
 *
 * The same builder makes the Llama family by options of the config: RMSNorm
 * for LayerNorm, a SwiGLU MLP (silu(x W_gate) * (x W_up), then W_down;
 * gate and up are one matrix "mlp.fc.w" [d, 2 d_ff], columns interleaved),
 * rotary position embeddings (RoPE) on q and k instead of learned ones,
 * grouped-query attention (n_kv_head K/V heads, each shared by n_head /
 * n_kv_head query heads), no biases and an output head of its own. The
 * zeroed new fields are today's GPT, parameter for parameter and bit for bit.
 *
 * The training-step graph takes the batch, the optimiser state and a few
 * scalars and returns the loss and the updated state, so one compiled
 * session runs every step (outputs may alias inputs: in-place updates).
 */
#ifndef LOOM_MODEL_GPT_H
#define LOOM_MODEL_GPT_H

#include "ir/graph.h"

typedef enum loom_gpt_norm {
  LOOM_GPT_NORM_LAYERNORM = 0, /* gain and bias (the bias only with biases on) */
  LOOM_GPT_NORM_RMSNORM        /* gain only */
} loom_gpt_norm;

typedef enum loom_gpt_mlp {
  LOOM_GPT_MLP_GELU = 0, /* gelu(x W_fc) W_proj */
  LOOM_GPT_MLP_SWIGLU    /* (silu(x W_gate) * x W_up) W_proj: three matrices' weights */
} loom_gpt_mlp;

typedef enum loom_gpt_position {
  LOOM_GPT_POS_LEARNED = 0, /* wpe [context, d_model] added to the embedding */
  LOOM_GPT_POS_ROPE         /* q and k rotated by position (rope_theta) */
} loom_gpt_position;

typedef struct loom_gpt_config {
  int32_t vocab; /* 256: bytes */
  int32_t n_layer;
  int32_t d_model;
  int32_t n_head;  /* divides d_model */
  int32_t context; /* longest sequence (rows of wpe) */
  int32_t d_ff;    /* MLP hidden width, 4 * d_model by default */
  double dropout;  /* attention-probability and residual dropout, [0, 1) */
  /* Architecture options; all zero is GPT-2's block. */
  loom_gpt_norm norm;
  loom_gpt_mlp mlp;
  loom_gpt_position position;
  double rope_theta; /* RoPE's base; 0: 10000 */
  int32_t n_kv_head; /* K/V heads, dividing n_head; 0: n_head (multi-head attention) */
  bool no_bias;      /* no biases in the linear layers and norms */
  bool untied;       /* the head has its own matrix "head.w" [vocab, d_model] */
} loom_gpt_config;

/* The architectures `loom train --arch` names. */
typedef enum loom_gpt_arch {
  LOOM_GPT_ARCH_GPT = 0, /* all options zero */
  LOOM_GPT_ARCH_LLAMA,   /* rmsnorm + swiglu + rope + no bias + untied */
  LOOM_GPT_ARCH_CUSTOM   /* any other mix */
} loom_gpt_arch;

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
/* Checks ranges, that n_head divides d_model and n_kv_head n_head, and
 * that RoPE has an even head width. */
loom_status loom_gpt_config_check(loom_ctx *ctx, const loom_gpt_config *c);

/* Sets the options of architecture a (GPT or LLAMA) on c, shapes kept. */
void loom_gpt_config_set_arch(loom_gpt_config *c, loom_gpt_arch a);
/* Which architecture c's options are. */
loom_gpt_arch loom_gpt_config_arch(const loom_gpt_config *c);
/* "gpt", "llama" or "custom"; and back (false: unknown name). */
const char *loom_gpt_arch_name(loom_gpt_arch a);
bool loom_gpt_arch_from_name(const char *name, loom_gpt_arch *out);

/* The number of K/V heads (n_kv_head, or n_head when 0). */
int32_t loom_gpt_kv_heads(const loom_gpt_config *c);
/* RoPE's base (rope_theta, or 10000 when 0). */
double loom_gpt_rope_theta(const loom_gpt_config *c);
/* The weights of one block's matrices: QKV (K and V with the K/V heads),
 * the attention projection and the MLP's two or three matrices. */
double loom_gpt_block_matrix_params(const loom_gpt_config *c);
/* Every parameter of the model (computed, nothing allocated). */
double loom_gpt_param_count(const loom_gpt_config *c);

/* Named full-size configurations, for planning without weights:
 * "gpt3-175b", "llama2-70b", "llama3-405b". Sets *c (dropout 0) and the
 * published global batch in sequences; false for an unknown name. */
bool loom_gpt_config_named(const char *name, loom_gpt_config *c, int32_t *batch);
/* The names, comma-separated, for messages. */
const char *loom_gpt_config_names(void);

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

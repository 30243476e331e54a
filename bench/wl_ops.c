/*
 * The memory-bound workloads: norms, softmax, activations, a loss and an
 * optimiser step, each a small graph of composites (decomposed by the
 * session, or before autodiff for the backward ones).
 *
 * Minimum bytes (issue 3, Targets; N elements, f32): 2*N*4 when the
 * workload reads one tensor and writes one, 3*N*4 when it reads two and
 * writes one, 7*P*4 for AdamW. Vectors ([C] gains, biases) are not counted.
 */
#include "workloads.h"

#include "ir/build.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

#define LN_EPS 1e-5
#define DROPOUT_P 0.1
#define DROPOUT_SEED 1234

/* Rows x columns of the [R, C] workloads. */
static void rc(bool small, int64_t *r, int64_t *c) {
  *r = small ? 2048 : 32768;
  *c = small ? 256 : 1024;
}

static loom_status begin(loom_ctx *ctx, loom_bench_graph *b) { return loom_graph_new(ctx, &b->g); }

static void shape_str(loom_bench_graph *b, const char *prefix, int64_t r, int64_t c) {
  snprintf(b->shape, sizeof b->shape, "%s[%lld, %lld]", prefix, (long long)r, (long long)c);
}

static int32_t layer_norm(loom_graph *g, int32_t x, int32_t gain, int32_t bias) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_LAYER_NORM, a);
  LOOM_ATTRV_I(a, layer_norm, axis) = -1;
  LOOM_ATTRV_F(a, layer_norm, eps) = LN_EPS;
  int32_t in[3] = {x, gain, bias};
  return lb_op(g, LOOM_OP_LAYER_NORM, 3, in, a);
}

static int32_t softmax(loom_graph *g, int32_t x) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SOFTMAX, a);
  LOOM_ATTRV_I(a, softmax, axis) = -1;
  return lb_op(g, LOOM_OP_SOFTMAX, 1, &x, a);
}

/* Finishes a forward workload: y is its one output. */
static loom_status finish(loom_bench_graph *b, const char *name, int32_t y) {
  LOOM_TRY(loom_build_status(b->g));
  return loom_graph_output(b->g, name, y);
}

/* Finishes a backward workload: loss = sum(y * dy), gradients wrt the
 * first n_wrt inputs. */
static loom_status finish_backward(loom_bench_graph *b, int32_t y, int32_t dy, int32_t n_wrt) {
  int32_t loss = loom_bench_vjp_loss(b->g, y, dy);
  LOOM_TRY(finish(b, "objective", loss));
  int32_t wrt[8];
  for (int32_t i = 0; i < n_wrt; i++)
    wrt[i] = i;
  return loom_bench_make_backward(b, n_wrt, wrt);
}

/* ---- layernorm ----------------------------------------------------------- */

static loom_status build_ln_fwd(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gain = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_GAIN, true);
  int32_t bias = loom_bench_input(b, "beta", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  shape_str(b, "", r, c);
  b->min_bytes = 2 * r * c * 4;
  return finish(b, "y", layer_norm(b->g, x, gain, bias));
}

static loom_status build_ln_bwd(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gain = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_GAIN, true);
  int32_t bias = loom_bench_input(b, "beta", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  shape_str(b, "", r, c);
  b->min_bytes = 3 * r * c * 4; /* x, dy in; dx out */
  return finish_backward(b, layer_norm(b->g, x, gain, bias), dy, 3);
}

/* ---- softmax ------------------------------------------------------------- */

static loom_status build_sm_fwd(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  shape_str(b, "", r, c);
  b->min_bytes = 2 * r * c * 4;
  return finish(b, "y", softmax(b->g, x));
}

static loom_status build_sm_bwd(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  shape_str(b, "", r, c);
  b->min_bytes = 3 * r * c * 4; /* x, dy in; dx out */
  return finish_backward(b, softmax(b->g, x), dy, 1);
}

/* ---- bias + gelu --------------------------------------------------------- */

static loom_status build_bias_gelu(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                   loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t bias = loom_bench_input(b, "bias", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  shape_str(b, "", r, c);
  b->min_bytes = 2 * r * c * 4;
  loom_graph *g = b->g;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GELU, a);
  LOOM_ATTRV_I(a, gelu, approximate) = 1; /* tanh, as Megatron's */
  int32_t h = lb_add(g, x, bias);
  return finish(b, "y", lb_op(g, LOOM_OP_GELU, 1, &h, a));
}

/* ---- bias + dropout + residual + layernorm ------------------------------- */

static loom_status build_bdrln(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                               loom_bench_graph *b) {
  (void)self;
  int64_t r, c;
  rc(small, &r, &c);
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t bias = loom_bench_input(b, "bias", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  int32_t res =
      loom_bench_input(b, "residual", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gain = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_GAIN, true);
  int32_t beta = loom_bench_input(b, "beta", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  shape_str(b, "", r, c);
  b->min_bytes = 3 * r * c * 4; /* x, residual in; y out */
  loom_graph *g = b->g;
  int32_t h = lb_dropout(g, lb_add(g, x, bias), DROPOUT_P, DROPOUT_SEED, 0, -1);
  h = lb_add(g, h, res);
  return finish(b, "y", layer_norm(g, h, gain, beta));
}

/* ---- cross-entropy forward + backward ------------------------------------ */

static loom_status build_ce(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                            loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 256 : 4096, c = small ? 1024 : 8192;
  LOOM_TRY(begin(ctx, b));
  int64_t xs[2] = {r, c};
  int32_t logits =
      loom_bench_input(b, "logits", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t labels =
      loom_bench_input(b, "labels", LOOM_DTYPE_I64, 1, &r, LOOM_BENCH_FILL_LABELS, false);
  b->classes = c;
  shape_str(b, "logits ", r, c);
  b->min_bytes = 2 * r * c * 4; /* logits in, their gradient out */
  loom_graph *g = b->g;
  int32_t in[2] = {logits, labels};
  int32_t loss = lb_op(g, LOOM_OP_CROSS_ENTROPY, 2, in, NULL);
  LOOM_TRY(finish(b, "objective", loss));
  LOOM_TRY(loom_graph_output(g, "loss", loss)); /* kept: the forward's result */
  int32_t wrt[1] = {0};
  return loom_bench_make_backward(b, 1, wrt);
}

/* ---- AdamW step ---------------------------------------------------------- */

/* GPT-2-small shapes: a token embedding, the position embedding and one
 * transformer block (about 10.0M parameters at full size). */
static loom_status build_adamw(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                               loom_bench_graph *b) {
  (void)self;
  int64_t h = small ? 128 : 768, vocab = small ? 512 : 2776, ctxlen = small ? 256 : 1024;
  const struct {
    const char *name;
    int32_t rank;
    int64_t d0, d1;
  } ts[] = {
      {"wte", 2, vocab, h},        {"wpe", 2, ctxlen, h},       {"ln1.g", 1, h, 0},
      {"ln1.b", 1, h, 0},          {"attn.qkv.w", 2, h, 3 * h}, {"attn.qkv.b", 1, 3 * h, 0},
      {"attn.proj.w", 2, h, h},    {"attn.proj.b", 1, h, 0},    {"ln2.g", 1, h, 0},
      {"ln2.b", 1, h, 0},          {"mlp.fc.w", 2, h, 4 * h},   {"mlp.fc.b", 1, 4 * h, 0},
      {"mlp.proj.w", 2, 4 * h, h}, {"mlp.proj.b", 1, h, 0},
  };
  enum { NT = sizeof ts / sizeof ts[0] };
  LOOM_TRY(begin(ctx, b));
  loom_graph *g = b->g;
  int32_t p[NT], gr[NT], m[NT], v[NT];
  int64_t total = 0;
  char nm[64];
  for (int32_t i = 0; i < NT; i++) {
    int64_t s[2] = {ts[i].d0, ts[i].d1};
    p[i] =
        loom_bench_input(b, ts[i].name, LOOM_DTYPE_F32, ts[i].rank, s, LOOM_BENCH_FILL_SMALL, true);
    snprintf(nm, sizeof nm, "grad.%s", ts[i].name);
    gr[i] = loom_bench_input(b, nm, LOOM_DTYPE_F32, ts[i].rank, s, LOOM_BENCH_FILL_UNIFORM, false);
    snprintf(nm, sizeof nm, "m.%s", ts[i].name);
    m[i] = loom_bench_input(b, nm, LOOM_DTYPE_F32, ts[i].rank, s, LOOM_BENCH_FILL_SMALL, false);
    snprintf(nm, sizeof nm, "v.%s", ts[i].name);
    v[i] = loom_bench_input(b, nm, LOOM_DTYPE_F32, ts[i].rank, s, LOOM_BENCH_FILL_POSITIVE, false);
    total += ts[i].rank == 1 ? ts[i].d0 : ts[i].d0 * ts[i].d1;
  }
  int32_t step = loom_bench_input(b, "step", LOOM_DTYPE_F32, 0, NULL, LOOM_BENCH_FILL_STEP, false);
  for (int32_t i = 0; i < NT && !g->err; i++) {
    loom_attr_value a[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_ADAMW, a);
    LOOM_ATTRV_F(a, adamw, lr) = 1e-3;
    LOOM_ATTRV_F(a, adamw, weight_decay) = ts[i].rank == 2 ? 0.01 : 0.0;
    int32_t in[5] = {p[i], gr[i], m[i], v[i], step}, out[3] = {-1, -1, -1};
    lb_op_multi(g, LOOM_OP_ADAMW, 5, in, a, 3, out);
    if (g->err) break;
    static const char *const kind[3] = {"new.", "new.m.", "new.v."};
    for (int32_t k = 0; k < 3; k++) {
      snprintf(nm, sizeof nm, "%s%s", kind[k], ts[i].name);
      LOOM_TRY(loom_graph_output(g, nm, out[k]));
    }
  }
  LOOM_TRY(loom_build_status(g));
  snprintf(b->shape, sizeof b->shape, "P=%lld in %d tensors", (long long)total, (int)NT);
  b->min_bytes = 7 * total * 4;
  return LOOM_STATUS_OK;
}

/* ---- the registry -------------------------------------------------------- */

static const loom_bench_workload workloads[] = {
    {"layernorm_fwd", "LayerNorm forward over the last axis", "2*N*4", true, build_ln_fwd, NULL},
    {"layernorm_bwd", "LayerNorm backward: dx, dgamma, dbeta", "3*N*4", true, build_ln_bwd, NULL},
    {"softmax_fwd", "softmax forward over the last axis", "2*N*4", true, build_sm_fwd, NULL},
    {"softmax_bwd", "softmax backward (recomputes the forward)", "3*N*4", true, build_sm_bwd, NULL},
    {"bias_gelu", "bias add + GELU (tanh)", "2*N*4", true, build_bias_gelu, NULL},
    {"bias_dropout_residual_ln", "bias + dropout(0.1) + residual + LayerNorm", "3*N*4", true,
     build_bdrln, NULL},
    {"cross_entropy", "cross-entropy forward + backward, integer labels", "2*N*4", true, build_ce,
     NULL},
    {"adamw", "AdamW step over GPT-2-small-shaped parameters", "7*P*4", true, build_adamw, NULL},
    {"rmsnorm_fwd", "RMSNorm forward over the last axis", "2*N*4", true,
     loom_bench_build_rmsnorm_fwd, NULL},
    {"rmsnorm_bwd", "RMSNorm backward: dx, dgamma", "3*N*4", true, loom_bench_build_rmsnorm_bwd,
     NULL},
    {"swiglu", "SwiGLU gate: silu(u[:, :C]) * u[:, C:] (slices of one projection)", "3*N*4", true,
     loom_bench_build_swiglu, NULL},
    {"rotary", "rotary embedding: x*cos + concat(-x2, x1)*sin", "2*N*4+cos,sin", true,
     loom_bench_build_rotary, NULL},
    {"groupnorm_silu", "GroupNorm (32 groups, reshapes) + SiLU over NCHW", "2*N*4", true,
     loom_bench_build_groupnorm_silu, NULL},
    {"ls_cross_entropy", "label-smoothed (0.1) cross-entropy fwd + bwd, one-hot from iota == label",
     "2*N*4", true, loom_bench_build_ls_ce, NULL},
    {"bce_logits", "binary cross-entropy with logits fwd + bwd", "3*N*4", true,
     loom_bench_build_bce, NULL},
    {"instnorm_lrelu", "InstanceNorm + per-channel affine + LeakyReLU(0.2) over NCHW", "2*N*4",
     true, loom_bench_build_instnorm_lrelu, NULL},
    {"instnorm_lrelu_bwd", "InstanceNorm + affine + LeakyReLU backward: dx, dgamma, dbeta",
     "3*N*4", true, loom_bench_build_instnorm_lrelu_bwd, NULL},
    {"t5_norm_residual", "T5 norm on a residual: h = x + r, y = h * rsqrt(mean(h^2)) * w",
     "4*N*4", true, loom_bench_build_t5_norm_residual, NULL},
    {"alibi_softmax", "attention scores: softmax(s * scale + ALiBi bias + mask), causal", "2*N*4",
     true, loom_bench_build_alibi_softmax, NULL},
    {"alibi_softmax_bwd", "the ALiBi masked softmax's backward to the scores", "3*N*4", true,
     loom_bench_build_alibi_softmax_bwd, NULL},
    {"geglu_bwd", "GeGLU gelu(u[:, :C]) * u[:, C:] forward + backward: du", "5*N*4", true,
     loom_bench_build_geglu_bwd, NULL},
    {"layerscale_droppath", "x + f * gamma * per-sample keep / p fwd + bwd: df, dgamma", "3*N*4",
     true, loom_bench_build_layerscale_droppath, NULL},
    {"rotary_bwd", "held-out, text IR: rotary embedding backward (rotate_half of dy * sin)",
     "inputs+outputs", true, loom_bench_build_heldout, &loom_bench_heldout_rotary_bwd},
    {"focal_loss", "held-out, text IR: focal loss (gamma 2) fwd + bwd, one-hot from iota == label",
     "inputs+outputs", true, loom_bench_build_heldout, &loom_bench_heldout_focal},
    {"softcap_zloss", "held-out, text IR: logit soft-cap 30 tanh(z/30) + cross-entropy + z-loss, fwd + bwd",
     "inputs+outputs", true, loom_bench_build_heldout, &loom_bench_heldout_softcap},
    {"moe_top2_lb", "held-out, text IR: top-2 of 8 experts, renormalised gates + load-balancing loss, fwd + bwd",
     "inputs+outputs", true, loom_bench_build_heldout, &loom_bench_heldout_moe_top2},
    {"sqrelu_mlp", "held-out, text IR: squared-ReLU MLP relu(x W1)^2 W2, fwd + bwd", "inputs+outputs",
     false, loom_bench_build_heldout, &loom_bench_heldout_sqrelu},
    {"lora_mlp", "held-out, text IR: LoRA rank 16 beside a frozen [1024, 1024] weight, fwd + bwd (thin dA, dB)",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_lora},
    {"convnext_tail", "held-out, text IR: ConvNeXt block tail x + gamma (GELU(LN(x) W1 + b1) W2 + b2)",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_convnext},
    {"resnet_block", "held-out, text IR: ResNet basic block (3x3 conv, batch-statistics BN, ReLU, twice; residual), fwd + bwd",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_resnet},
    {"llama_block", "held-out, text IR: Llama-style block (RMSNorm, rotary from slice/neg/concat, causal attention, SwiGLU), fwd + bwd",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_llama},
    {"gqa_attention", "held-out, text IR: grouped-query attention, 8 query heads on 2 key/value heads, causal, fwd + bwd",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_gqa},
    {"mixer_block", "held-out, text IR: MLP-Mixer block (token MLP across patches between transposes, channel MLP), fwd + bwd",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_mixer},
    {"relbias_attention", "held-out, text IR: T5-style attention with a learned [H, T, T] position bias, fwd + bwd",
     "inputs+outputs", false, loom_bench_build_heldout, &loom_bench_heldout_relbias},
    {"bert_layer", "BERT-base encoder layer forward (post-LN, GELU erf)", "inputs+outputs", false,
     loom_bench_build_bert, NULL},
    {"gpt2_block", "GPT-2-small block forward + backward (pre-LN, causal, GELU tanh, dropout 0.1)",
     "inputs+outputs", false, loom_bench_build_gpt2, NULL},
    {"train_step", "the main job's training step: loom train's default GPT, forward + backward + AdamW",
     "inputs+outputs", false, loom_bench_build_train_step, NULL},
};

const loom_bench_workload *loom_bench_workloads(int32_t *n) {
  *n = (int32_t)(sizeof workloads / sizeof workloads[0]);
  return workloads;
}

const loom_bench_workload *loom_bench_find(const char *name) {
  for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
    if (strcmp(workloads[i].name, name) == 0) return &workloads[i];
  return NULL;
}

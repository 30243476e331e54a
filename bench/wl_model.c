/*
 * The model workloads: a BERT-base encoder layer (forward) and a
 * GPT-2-small block (forward + backward), built from composites the way
 * src/model/gpt.c builds its blocks. Their minimum bytes are the bytes of
 * every input, parameter and output (each read or written once); their
 * matmul flops are counted from the decomposed graph.
 */
#include "workloads.h"

#include "ir/build.h"
#include "ops/op.h"

#include <stdio.h>

#define LN_EPS_BERT 1e-12
#define LN_EPS_GPT 1e-5
#define GPT_DROPOUT 0.1
#define GPT_SEED 4321

typedef struct tcfg {
  int64_t b, s, h, heads, ff;
} tcfg;

static int32_t layer_norm(loom_graph *g, int32_t x, int32_t gain, int32_t bias, double eps) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_LAYER_NORM, a);
  LOOM_ATTRV_I(a, layer_norm, axis) = -1;
  LOOM_ATTRV_F(a, layer_norm, eps) = eps;
  int32_t in[3] = {x, gain, bias};
  return lb_op(g, LOOM_OP_LAYER_NORM, 3, in, a);
}

static int32_t linear(loom_graph *g, int32_t x, int32_t w, int32_t bias) {
  int32_t in[3] = {x, w, bias};
  return lb_op(g, LOOM_OP_LINEAR, 3, in, NULL);
}

static int32_t gelu(loom_graph *g, int32_t x, bool tanh_approx) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GELU, a);
  LOOM_ATTRV_I(a, gelu, approximate) = tanh_approx ? 1 : 0;
  return lb_op(g, LOOM_OP_GELU, 1, &x, a);
}

/* Multi-head attention on a fused qkv [B, S, 3H]: heads split, attention,
 * heads merged back to [B, S, H]. p > 0 adds dropout on the probabilities
 * with counters from *offset on. */
static int32_t mha(loom_graph *g, const tcfg *c, int32_t qkv, bool causal, double p,
                   int64_t *offset) {
  int64_t dh = c->h / c->heads;
  int64_t s5[5] = {c->b, c->s, 3, c->heads, dh}, perm5[5] = {2, 0, 3, 1, 4};
  qkv = lb_transpose(g, lb_reshape(g, qkv, 5, s5), perm5); /* [3, B, NH, S, Dh] */
  int32_t part[3];
  int64_t hs[4] = {c->b, c->heads, c->s, dh};
  for (int32_t i = 0; i < 3; i++) {
    int64_t lo[5] = {i, 0, 0, 0, 0}, hi[5] = {i + 1, c->b, c->heads, c->s, dh};
    part[i] = lb_reshape(g, lb_slice(g, qkv, lo, hi), 4, hs);
  }
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_ATTENTION, a);
  LOOM_ATTRV_I(a, attention, causal) = causal ? 1 : 0;
  LOOM_ATTRV_F(a, attention, p) = p;
  LOOM_ATTRV_I(a, attention, seed) = GPT_SEED;
  LOOM_ATTRV_I(a, attention, offset) = *offset;
  if (p > 0.0) *offset += c->b * c->heads * c->s * c->s;
  int32_t y = lb_op(g, LOOM_OP_ATTENTION, 3, part, a);
  int64_t perm4[4] = {0, 2, 1, 3}, s3[3] = {c->b, c->s, c->h};
  return lb_reshape(g, lb_transpose(g, y, perm4), 3, s3);
}

/* The per-layer parameters, declared in this order. */
enum {
  W_QKV = 0,
  B_QKV,
  W_PROJ,
  B_PROJ,
  LN1_G,
  LN1_B,
  W_FC,
  B_FC,
  W_OUT,
  B_OUT,
  LN2_G,
  LN2_B,
  N_W
};

static void declare_params(loom_bench_graph *b, const tcfg *c, int32_t *w) {
  int64_t h = c->h, f = c->ff;
  const struct {
    const char *name;
    int32_t rank;
    int64_t d0, d1;
    loom_bench_fill fill;
  } ps[N_W] = {
      {"attn.qkv.w", 2, h, 3 * h, LOOM_BENCH_FILL_SMALL},
      {"attn.qkv.b", 1, 3 * h, 0, LOOM_BENCH_FILL_SMALL},
      {"attn.proj.w", 2, h, h, LOOM_BENCH_FILL_SMALL},
      {"attn.proj.b", 1, h, 0, LOOM_BENCH_FILL_SMALL},
      {"ln1.g", 1, h, 0, LOOM_BENCH_FILL_GAIN},
      {"ln1.b", 1, h, 0, LOOM_BENCH_FILL_SMALL},
      {"mlp.fc.w", 2, h, f, LOOM_BENCH_FILL_SMALL},
      {"mlp.fc.b", 1, f, 0, LOOM_BENCH_FILL_SMALL},
      {"mlp.proj.w", 2, f, h, LOOM_BENCH_FILL_SMALL},
      {"mlp.proj.b", 1, h, 0, LOOM_BENCH_FILL_SMALL},
      {"ln2.g", 1, h, 0, LOOM_BENCH_FILL_GAIN},
      {"ln2.b", 1, h, 0, LOOM_BENCH_FILL_SMALL},
  };
  for (int32_t i = 0; i < N_W; i++) {
    int64_t s[2] = {ps[i].d0, ps[i].d1};
    w[i] = loom_bench_input(b, ps[i].name, LOOM_DTYPE_F32, ps[i].rank, s, ps[i].fill, true);
  }
}

static void model_shape(loom_bench_graph *b, const tcfg *c) {
  snprintf(b->shape, sizeof b->shape, "b%lld s%lld h%lld nh%lld ff%lld", (long long)c->b,
           (long long)c->s, (long long)c->h, (long long)c->heads, (long long)c->ff);
}

/* ---- BERT-base encoder layer, forward ------------------------------------ */

loom_status loom_bench_build_bert(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                  loom_bench_graph *b) {
  (void)self;
  tcfg c = small ? (tcfg){2, 32, 128, 4, 512} : (tcfg){8, 128, 768, 12, 3072};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int64_t xs[3] = {c.b, c.s, c.h};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t w[N_W];
  declare_params(b, &c, w);
  int64_t offset = 0;
  /* post-LN: x1 = LN(x + attn(x)), y = LN(x1 + ffn(x1)) */
  int32_t a = mha(g, &c, linear(g, x, w[W_QKV], w[B_QKV]), false, 0.0, &offset);
  a = linear(g, a, w[W_PROJ], w[B_PROJ]);
  int32_t x1 = layer_norm(g, lb_add(g, x, a), w[LN1_G], w[LN1_B], LN_EPS_BERT);
  int32_t f = gelu(g, linear(g, x1, w[W_FC], w[B_FC]), false);
  f = linear(g, f, w[W_OUT], w[B_OUT]);
  int32_t y = layer_norm(g, lb_add(g, x1, f), w[LN2_G], w[LN2_B], LN_EPS_BERT);
  LOOM_TRY(loom_build_status(g));
  LOOM_TRY(loom_graph_output(g, "y", y));
  model_shape(b, &c);
  b->min_bytes = loom_bench_io_bytes(b->g);
  return loom_bench_count_flops(b);
}

/* ---- GPT-2-small block, forward + backward ------------------------------- */

loom_status loom_bench_build_gpt2(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                  loom_bench_graph *b) {
  (void)self;
  tcfg c = small ? (tcfg){2, 32, 128, 4, 512} : (tcfg){4, 256, 768, 12, 3072};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int64_t xs[3] = {c.b, c.s, c.h};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t w[N_W];
  declare_params(b, &c, w);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int64_t offset = 0, n = c.b * c.s * c.h;
  /* pre-LN: x1 = x + drop(attn(LN(x))), y = x1 + drop(mlp(LN(x1))) */
  int32_t a = layer_norm(g, x, w[LN1_G], w[LN1_B], LN_EPS_GPT);
  a = mha(g, &c, linear(g, a, w[W_QKV], w[B_QKV]), true, GPT_DROPOUT, &offset);
  a = lb_dropout(g, linear(g, a, w[W_PROJ], w[B_PROJ]), GPT_DROPOUT, GPT_SEED, offset, -1);
  offset += n;
  int32_t x1 = lb_add(g, x, a);
  int32_t m = layer_norm(g, x1, w[LN2_G], w[LN2_B], LN_EPS_GPT);
  m = gelu(g, linear(g, m, w[W_FC], w[B_FC]), true);
  m = lb_dropout(g, linear(g, m, w[W_OUT], w[B_OUT]), GPT_DROPOUT, GPT_SEED, offset, -1);
  int32_t y = lb_add(g, x1, m);
  int32_t loss = loom_bench_vjp_loss(g, y, dy);
  LOOM_TRY(loom_build_status(g));
  LOOM_TRY(loom_graph_output(g, "objective", loss));
  LOOM_TRY(loom_graph_output(g, "y", y));
  /* gradients for x and every parameter (inputs 0 .. N_W) */
  int32_t wrt[1 + N_W];
  for (int32_t i = 0; i <= N_W; i++)
    wrt[i] = i;
  LOOM_TRY(loom_bench_make_backward(b, 1 + N_W, wrt));
  model_shape(b, &c);
  b->min_bytes = loom_bench_io_bytes(b->g);
  return loom_bench_count_flops(b);
}

/* ---- one GPT block for `loom bench attention` ---------------------------- */

_Static_assert(LOOM_BENCH_ATTN_BLOCK_WRT == 1 + N_W, "x and the parameters");

loom_status loom_bench_build_attn_block(loom_ctx *ctx, int64_t seq, int64_t heads, int64_t head_dim,
                                        double p, loom_bench_graph *b) {
  tcfg c = {1, seq, heads * head_dim, heads, 4 * heads * head_dim};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int64_t xs[3] = {c.b, c.s, c.h};
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t w[N_W];
  declare_params(b, &c, w);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int64_t offset = 0;
  /* pre-LN: x1 = x + attn(LN(x)), y = x1 + mlp(LN(x1)) */
  int32_t a = layer_norm(g, x, w[LN1_G], w[LN1_B], LN_EPS_GPT);
  a = mha(g, &c, linear(g, a, w[W_QKV], w[B_QKV]), true, p, &offset);
  int32_t x1 = lb_add(g, x, linear(g, a, w[W_PROJ], w[B_PROJ]));
  int32_t m = layer_norm(g, x1, w[LN2_G], w[LN2_B], LN_EPS_GPT);
  m = linear(g, gelu(g, linear(g, m, w[W_FC], w[B_FC]), true), w[W_OUT], w[B_OUT]);
  int32_t y = lb_add(g, x1, m);
  int32_t loss = loom_bench_vjp_loss(g, y, dy);
  LOOM_TRY(loom_build_status(g));
  LOOM_TRY(loom_graph_output(g, "objective", loss));
  model_shape(b, &c);
  return LOOM_STATUS_OK;
}

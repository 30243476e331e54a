/*
 * One transformer block of the GPT builder (gpt.h), in each architecture
 * the config's options make: LayerNorm or RMSNorm, multi-head or
 * grouped-query attention with learned or rotary positions, a GELU or a
 * SwiGLU MLP (gate and up in one matrix, columns interleaved), with or
 * without biases. Everything is made of table ops, so
 * every partition annotation applies: the fused QKV columns are grouped by
 * K/V head, so a tensor-parallel column cut of w_qkv into n_kv_head-aligned
 * pieces gives each device whole groups (its query heads with their K and
 * V), and RoPE only slices, negates and concatenates along the head width,
 * which no plan cuts.
 */
#include "model/gpt_internal.h"

#include "ir/build.h"
#include "ops/op.h"

#include <math.h>

int32_t gpt_norm(gpt_fwd *f, int32_t x, int32_t gain, int32_t bias) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  if (f->c->norm == LOOM_GPT_NORM_RMSNORM) {
    loom_attrs_default(LOOM_OP_RMS_NORM, a);
    LOOM_ATTRV_I(a, rms_norm, axis) = -1;
    LOOM_ATTRV_F(a, rms_norm, eps) = 1e-5; /* Llama's */
    int32_t in[2] = {x, gain};
    return lb_op(f->g, LOOM_OP_RMS_NORM, 2, in, a);
  }
  loom_attrs_default(LOOM_OP_LAYER_NORM, a);
  LOOM_ATTRV_I(a, layer_norm, axis) = -1;
  LOOM_ATTRV_F(a, layer_norm, eps) = 1e-5;
  int32_t in[3] = {x, gain, bias};
  return lb_op(f->g, LOOM_OP_LAYER_NORM, bias >= 0 ? 3 : 2, in, a);
}

static int32_t gelu(gpt_fwd *f, int32_t x) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GELU, a);
  LOOM_ATTRV_I(a, gelu, approximate) = 1; /* tanh, as GPT-2 */
  return lb_op(f->g, LOOM_OP_GELU, 1, &x, a);
}

/* x @ w (+ b when the layer has a bias). */
static int32_t linear(gpt_fwd *f, int32_t x, int32_t w, int32_t b) {
  int32_t in[3] = {x, w, b};
  return lb_op(f->g, LOOM_OP_LINEAR, b >= 0 ? 3 : 2, in, NULL);
}

/* Residual dropout with the next counter range of this step. */
static int32_t dropout(gpt_fwd *f, int32_t x) {
  if (!f->train || f->c->dropout == 0.0 || x < 0) return x;
  int64_t n = loom_type_numel(loom_value_type(f->g, x));
  int32_t y = lb_dropout(f->g, x, f->c->dropout, (int64_t)f->seed, f->offset, f->base);
  f->offset += n;
  return y;
}

static int32_t attention(gpt_fwd *f, int32_t q, int32_t k, int32_t v) {
  loom_graph *g = f->g;
  double p = f->train ? f->c->dropout : 0.0;
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_ATTENTION, a);
  LOOM_ATTRV_I(a, attention, causal) = 1;
  LOOM_ATTRV_F(a, attention, p) = p;
  LOOM_ATTRV_I(a, attention, seed) = (int64_t)f->seed;
  LOOM_ATTRV_I(a, attention, offset) = f->offset;
  int32_t in[4] = {q, k, v, f->base};
  int32_t y = lb_op(g, LOOM_OP_ATTENTION, p > 0.0 ? 4 : 3, in, a);
  /* the probabilities [B, H, T, T] take the next counter range */
  if (p > 0.0) f->offset += f->b * f->c->n_head * f->t * f->t;
  return y;
}

/* RoPE's tables for positions [0, T): cos and sin of pos * theta^(-2i/dh)
 * for i < dh/2, each half of the head width repeated ([T, dh]), as the
 * "rotate half" form pairs element i with element i + dh/2. Built per
 * layer from iota, so a pipeline stage makes its own (no transfer). */
static void rope_tables(gpt_fwd *f, int32_t *cos_t, int32_t *sin_t) {
  loom_graph *g = f->g;
  int64_t dh = f->c->d_model / f->c->n_head, half = dh / 2, th[2] = {f->t, half};
  int32_t pos = lb_iota(g, LOOM_DTYPE_F32, 2, th, 0);
  int32_t idx = lb_iota(g, LOOM_DTYPE_F32, 2, th, 1);
  double k = -2.0 * log(loom_gpt_rope_theta(f->c)) / (double)dh;
  int32_t inv = lb_unary(g, LOOM_OP_EXP, lb_mul(g, idx, lb_scalar(g, LOOM_DTYPE_F32, k)));
  int32_t ang = lb_mul(g, pos, inv);
  int32_t both[2] = {ang, ang};
  int32_t full = lb_concat(g, 2, both, 1);
  *cos_t = lb_unary(g, LOOM_OP_COS, full);
  *sin_t = lb_unary(g, LOOM_OP_SIN, full);
}

/* x [B, N, T, dh] rotated: x cos + rotate_half(x) sin, where
 * rotate_half(x) = concat(-x[..., dh/2:], x[..., :dh/2]). */
static int32_t rope(gpt_fwd *f, int32_t x, int32_t cos_t, int32_t sin_t) {
  loom_graph *g = f->g;
  const loom_type *t = loom_value_type(g, x);
  if (!t) return -1;
  int64_t dh = t->shape[3], half = dh / 2;
  int64_t lo1[4] = {0, 0, 0, 0}, hi1[4] = {t->shape[0], t->shape[1], t->shape[2], half};
  int64_t lo2[4] = {0, 0, 0, half}, hi2[4] = {t->shape[0], t->shape[1], t->shape[2], dh};
  int32_t x1 = lb_slice(g, x, lo1, hi1), x2 = lb_slice(g, x, lo2, hi2);
  int32_t parts[2] = {lb_neg(g, x2), x1};
  int32_t rot = lb_concat(g, 2, parts, 3);
  return lb_add(g, lb_mul(g, x, cos_t), lb_mul(g, rot, sin_t));
}

/* GPT-2's heads: qkv [B, T, 3D] -> [B, T, H, 3, Dh] -> [3, B, H, T, Dh].
 * The fused QKV columns are head-major, as in Megatron: head i's q, k and
 * v are columns [3*Dh*i, 3*Dh*(i+1)), so a column split of w_qkv into
 * head groups is one contiguous box (the reshape's annotation carries the
 * split from 3D to H). */
static void heads_mha(gpt_fwd *f, int32_t qkv, int32_t *out) {
  loom_graph *g = f->g;
  int64_t b = f->b, t = f->t, h = f->c->n_head, dh = f->c->d_model / h;
  int64_t s5[5] = {b, t, h, 3, dh}, perm5[5] = {3, 0, 2, 1, 4};
  qkv = lb_transpose(g, lb_reshape(g, qkv, 5, s5), perm5);
  int64_t hs[4] = {b, h, t, dh};
  for (int32_t i = 0; i < 3; i++) {
    int64_t lo[5] = {i, 0, 0, 0, 0}, hi[5] = {i + 1, b, h, t, dh};
    out[i] = lb_reshape(g, lb_slice(g, qkv, lo, hi), 4, hs);
  }
}

/* Grouped heads: the QKV columns are K/V-head-major, group j holding its
 * r = H / KV query heads, then its k, then its v ([B, T, KV, r + 2, Dh]),
 * so a column cut into whole groups is one box, as above. q comes out
 * [B, H, T, Dh] (query head j*r + i), k and v [B, KV, T, Dh]. */
static void heads_grouped(gpt_fwd *f, int32_t qkv, int32_t *out) {
  loom_graph *g = f->g;
  int64_t b = f->b, t = f->t, h = f->c->n_head, dh = f->c->d_model / h;
  int64_t kv = loom_gpt_kv_heads(f->c), r = h / kv;
  int64_t s5[5] = {b, t, kv, r + 2, dh}, perm5[5] = {0, 2, 3, 1, 4};
  qkv = lb_transpose(g, lb_reshape(g, qkv, 5, s5), perm5); /* [B, KV, r + 2, T, Dh] */
  int64_t lo[5] = {0, 0, 0, 0, 0}, hi[5] = {b, kv, r, t, dh};
  int64_t qs[4] = {b, h, t, dh}, ks[4] = {b, kv, t, dh};
  out[0] = lb_reshape(g, lb_slice(g, qkv, lo, hi), 4, qs);
  for (int32_t i = 1; i < 3; i++) {
    lo[2] = r + i - 1, hi[2] = r + i;
    out[i] = lb_reshape(g, lb_slice(g, qkv, lo, hi), 4, ks);
  }
}

/* k or v [B, KV, T, Dh] shared by the r query heads of its group:
 * [B, KV, 1, T, Dh] broadcast to [B, KV, r, T, Dh], then [B, H, T, Dh]. */
static int32_t share_kv(gpt_fwd *f, int32_t x) {
  loom_graph *g = f->g;
  int64_t b = f->b, t = f->t, h = f->c->n_head, dh = f->c->d_model / h;
  int64_t kv = loom_gpt_kv_heads(f->c), r = h / kv;
  if (r == 1) return x;
  int64_t s1[5] = {b, kv, 1, t, dh}, sr[5] = {b, kv, r, t, dh}, hs[4] = {b, h, t, dh};
  return lb_reshape(g, lb_broadcast_to(g, lb_reshape(g, x, 5, s1), 5, sr), 4, hs);
}

int32_t gpt_block(gpt_fwd *f, int32_t x, int32_t l) {
  loom_graph *g = f->g;
  const loom_gpt_config *c = f->c;
  const gpt_layout *L = &f->lay;
  const int32_t *p = f->pv + L->first_layer + (int64_t)L->per_layer * l;
#define P(k) (L->k >= 0 ? p[L->k] : -1)
  int64_t b = f->b, t = f->t, d = c->d_model;
  bool gpt2_heads = loom_gpt_kv_heads(c) == c->n_head && c->position == LOOM_GPT_POS_LEARNED;
  int32_t a = gpt_norm(f, x, P(ln1_g), P(ln1_b));
  int32_t qkv = linear(f, a, P(qkv_w), P(qkv_b)), h3[3];
  if (gpt2_heads) heads_mha(f, qkv, h3);
  else heads_grouped(f, qkv, h3);
  if (c->position == LOOM_GPT_POS_ROPE) {
    int32_t cos_t, sin_t;
    rope_tables(f, &cos_t, &sin_t);
    h3[0] = rope(f, h3[0], cos_t, sin_t);
    h3[1] = rope(f, h3[1], cos_t, sin_t); /* on the K/V heads, before sharing */
  }
  if (!gpt2_heads) h3[1] = share_kv(f, h3[1]), h3[2] = share_kv(f, h3[2]);
  int32_t y = attention(f, h3[0], h3[1], h3[2]);
  int64_t perm4[4] = {0, 2, 1, 3}, s3[3] = {b, t, d};
  y = lb_reshape(g, lb_transpose(g, y, perm4), 3, s3);
  y = dropout(f, linear(f, y, P(proj_w), P(proj_b)));
  x = lb_add(g, x, y);
  /* MLP */
  int32_t m = gpt_norm(f, x, P(ln2_g), P(ln2_b));
  if (c->mlp == LOOM_GPT_MLP_SWIGLU) {
    /* one matrix, gate and up columns interleaved: [B, T, 2F] -> [B, T, F, 2] */
    int64_t ff = c->d_ff, s4[4] = {b, t, ff, 2}, lo[4] = {0, 0, 0, 0}, hi[4] = {b, t, ff, 1};
    int64_t s3f[3] = {b, t, ff};
    int32_t gu = lb_reshape(g, linear(f, m, P(fc_w), P(fc_b)), 4, s4);
    int32_t gate = lb_reshape(g, lb_slice(g, gu, lo, hi), 3, s3f);
    lo[3] = 1, hi[3] = 2;
    int32_t up = lb_reshape(g, lb_slice(g, gu, lo, hi), 3, s3f);
    m = lb_mul(g, lb_op(g, LOOM_OP_SILU, 1, &gate, NULL), up);
  } else {
    m = gelu(f, linear(f, m, P(fc_w), P(fc_b)));
  }
  m = dropout(f, linear(f, m, P(mlp_w), P(mlp_b)));
#undef P
  return lb_add(g, x, m);
}

#include "model/gpt.h"

#include "ir/build.h"
#include "ops/op.h"
#include "runtime/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_gpt_config_default(loom_gpt_config *c) {
  c->vocab = 256;
  c->n_layer = 2;
  c->d_model = 128;
  c->n_head = 4;
  c->context = 64;
  c->d_ff = 4 * 128;
  c->dropout = 0.1;
}

loom_status loom_gpt_config_check(loom_ctx *ctx, const loom_gpt_config *c) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: config is NULL");
  if (c->vocab < 2 || c->vocab > LOOM_GPT_MAX_VOCAB)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: vocab %d is outside [2, %d]",
                      c->vocab, LOOM_GPT_MAX_VOCAB);
  if (c->n_layer < 1 || c->n_layer > LOOM_GPT_MAX_LAYERS)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: layers %d is outside [1, %d]",
                      c->n_layer, LOOM_GPT_MAX_LAYERS);
  if (c->d_model < 1 || c->d_model > LOOM_GPT_MAX_WIDTH)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: d_model %d is outside [1, %d]",
                      c->d_model, LOOM_GPT_MAX_WIDTH);
  if (c->n_head < 1 || c->n_head > c->d_model || c->d_model % c->n_head)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: heads %d must divide d_model %d",
                      c->n_head, c->d_model);
  if (c->context < 2 || c->context > LOOM_GPT_MAX_CONTEXT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: context %d is outside [2, %d]",
                      c->context, LOOM_GPT_MAX_CONTEXT);
  if (c->d_ff < 1 || c->d_ff > LOOM_GPT_MAX_FF)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: d_ff %d is outside [1, %d]",
                      c->d_ff, LOOM_GPT_MAX_FF);
  if (!(c->dropout >= 0.0 && c->dropout < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: dropout %g is outside [0, 1)",
                      c->dropout);
  return LOOM_STATUS_OK;
}

/* ---- parameters --------------------------------------------------------- */

static void add_param(loom_gpt_param *ps, int32_t *n, const char *name, int32_t rank, int64_t d0,
                      int64_t d1, loom_gpt_init init) {
  loom_gpt_param *p = &ps[(*n)++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->rank = rank;
  p->shape[0] = d0;
  p->shape[1] = d1;
  p->init = init;
  p->decay = rank == 2;
}

/* Per-layer parameters, in this order (the builders rely on it). */
enum {
  P_LN1_G = 0,
  P_LN1_B,
  P_QKV_W,
  P_QKV_B,
  P_PROJ_W,
  P_PROJ_B,
  P_LN2_G,
  P_LN2_B,
  P_FC_W,
  P_FC_B,
  P_MLP_W,
  P_MLP_B,
  P_PER_LAYER
};
/* Global ones: wte, wpe first; lnf.g, lnf.b last. */
enum { P_WTE = 0, P_WPE = 1, P_FIRST_LAYER = 2 };

loom_status loom_gpt_params(loom_ctx *ctx, const loom_gpt_config *c, loom_gpt_param **out,
                            int32_t *n_out) {
  LOOM_TRY(loom_gpt_config_check(ctx, c));
  int32_t total = P_FIRST_LAYER + P_PER_LAYER * c->n_layer + 2, n = 0;
  loom_gpt_param *ps = loom_calloc(ctx, (size_t)total, sizeof *ps);
  if (!ps) return LOOM_STATUS_OUT_OF_MEMORY;
  int64_t d = c->d_model, f = c->d_ff;
  add_param(ps, &n, "wte", 2, c->vocab, d, LOOM_GPT_INIT_NORMAL);
  add_param(ps, &n, "wpe", 2, c->context, d, LOOM_GPT_INIT_NORMAL);
  for (int32_t l = 0; l < c->n_layer; l++) {
    char nm[32];
#define P(suffix, rank, d0, d1, init)                                                              \
  snprintf(nm, sizeof nm, "h%d." suffix, (int)l);                                                  \
  add_param(ps, &n, nm, rank, d0, d1, init)
    P("ln1.g", 1, d, 0, LOOM_GPT_INIT_ONES);
    P("ln1.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P("attn.qkv.w", 2, d, 3 * d, LOOM_GPT_INIT_NORMAL);
    P("attn.qkv.b", 1, 3 * d, 0, LOOM_GPT_INIT_ZEROS);
    P("attn.proj.w", 2, d, d, LOOM_GPT_INIT_NORMAL);
    P("attn.proj.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P("ln2.g", 1, d, 0, LOOM_GPT_INIT_ONES);
    P("ln2.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P("mlp.fc.w", 2, d, f, LOOM_GPT_INIT_NORMAL);
    P("mlp.fc.b", 1, f, 0, LOOM_GPT_INIT_ZEROS);
    P("mlp.proj.w", 2, f, d, LOOM_GPT_INIT_NORMAL);
    P("mlp.proj.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
#undef P
  }
  add_param(ps, &n, "lnf.g", 1, d, 0, LOOM_GPT_INIT_ONES);
  add_param(ps, &n, "lnf.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
  *out = ps;
  *n_out = n;
  return LOOM_STATUS_OK;
}

/* Declares the parameters as graph params; ids into pv. */
static loom_status declare_params(loom_graph *g, const loom_gpt_param *ps, int32_t n, int32_t *pv) {
  for (int32_t i = 0; i < n; i++)
    LOOM_TRY(loom_graph_param(g, ps[i].name, LOOM_DTYPE_F32, ps[i].rank, ps[i].shape, &pv[i]));
  return LOOM_STATUS_OK;
}

/* ---- forward ------------------------------------------------------------ */

typedef struct fwd {
  loom_graph *g;
  const loom_gpt_config *c;
  int64_t b, t;
  const int32_t *pv;
  bool train;
  uint64_t seed;
  int32_t base;   /* rng_base input, train only */
  int64_t offset; /* running dropout counter offset within a step */
} fwd;

static int32_t layer_norm(fwd *f, int32_t x, int32_t gain, int32_t bias) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_LAYER_NORM, a);
  LOOM_ATTRV_I(a, layer_norm, axis) = -1;
  LOOM_ATTRV_F(a, layer_norm, eps) = 1e-5;
  int32_t in[3] = {x, gain, bias};
  return lb_op(f->g, LOOM_OP_LAYER_NORM, 3, in, a);
}

static int32_t gelu(fwd *f, int32_t x) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GELU, a);
  LOOM_ATTRV_I(a, gelu, approximate) = 1; /* tanh, as GPT-2 */
  return lb_op(f->g, LOOM_OP_GELU, 1, &x, a);
}

static int32_t linear(fwd *f, int32_t x, int32_t w, int32_t b) {
  int32_t in[3] = {x, w, b};
  return lb_op(f->g, LOOM_OP_LINEAR, 3, in, NULL);
}

/* Residual dropout with the next counter range of this step. */
static int32_t dropout(fwd *f, int32_t x) {
  if (!f->train || f->c->dropout == 0.0 || x < 0) return x;
  int64_t n = loom_type_numel(loom_value_type(f->g, x));
  int32_t y = lb_dropout(f->g, x, f->c->dropout, (int64_t)f->seed, f->offset, f->base);
  f->offset += n;
  return y;
}

static int32_t attention(fwd *f, int32_t q, int32_t k, int32_t v) {
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

/* The backend's graph rewrite on *g (replaced when it rewrote). */
static loom_status backend_rewrite(loom_ctx *ctx, const loom_session_options *opts,
                                   loom_graph **g) {
  loom_graph *r = NULL;
  LOOM_TRY(loom_backend_rewrite(ctx, opts, *g, &r, NULL));
  if (r) {
    loom_graph_free(*g);
    *g = r;
  }
  return LOOM_STATUS_OK;
}

static int32_t block(fwd *f, int32_t x, const int32_t *p) {
  loom_graph *g = f->g;
  int64_t b = f->b, t = f->t, d = f->c->d_model, h = f->c->n_head, dh = d / h;
  /* attention: qkv [B, T, 3D] -> [B, T, H, 3, Dh] -> [3, B, H, T, Dh].
   * The fused QKV columns are head-major, as in Megatron: head i's q, k
   * and v are columns [3*Dh*i, 3*Dh*(i+1)), so a column split of w_qkv
   * into head groups is one contiguous box (the reshape's annotation
   * carries the split from 3D to H). */
  int32_t a = layer_norm(f, x, p[P_LN1_G], p[P_LN1_B]);
  int32_t qkv = linear(f, a, p[P_QKV_W], p[P_QKV_B]);
  int64_t s5[5] = {b, t, h, 3, dh}, perm5[5] = {3, 0, 2, 1, 4};
  qkv = lb_transpose(g, lb_reshape(g, qkv, 5, s5), perm5);
  int32_t qkv_i[3];
  int64_t hs[4] = {b, h, t, dh};
  for (int32_t i = 0; i < 3; i++) {
    int64_t lo[5] = {i, 0, 0, 0, 0}, hi[5] = {i + 1, b, h, t, dh};
    qkv_i[i] = lb_reshape(g, lb_slice(g, qkv, lo, hi), 4, hs);
  }
  int32_t y = attention(f, qkv_i[0], qkv_i[1], qkv_i[2]);
  int64_t perm4[4] = {0, 2, 1, 3}, s3[3] = {b, t, d};
  y = lb_reshape(g, lb_transpose(g, y, perm4), 3, s3);
  y = dropout(f, linear(f, y, p[P_PROJ_W], p[P_PROJ_B]));
  x = lb_add(g, x, y);
  /* MLP */
  int32_t m = layer_norm(f, x, p[P_LN2_G], p[P_LN2_B]);
  m = linear(f, m, p[P_FC_W], p[P_FC_B]);
  m = gelu(f, m);
  m = dropout(f, linear(f, m, p[P_MLP_W], p[P_MLP_B]));
  return lb_add(g, x, m);
}

/* Embeddings and the blocks: the final hidden state [B, T, D] (before lnf). */
static int32_t trunk(fwd *f, int32_t tokens) {
  loom_graph *g = f->g;
  const int32_t *pv = f->pv;
  int64_t d = f->c->d_model;
  int32_t x = lb_gather(g, pv[P_WTE], tokens, 0); /* [B, T, D] */
  int32_t pos = pv[P_WPE];
  if (f->t < f->c->context) {
    int64_t lo[2] = {0, 0}, hi[2] = {f->t, d};
    pos = lb_slice(g, pos, lo, hi);
  }
  x = lb_add(g, x, pos); /* [T, D] broadcasts over B */
  for (int32_t l = 0; l < f->c->n_layer; l++)
    x = block(f, x, pv + P_FIRST_LAYER + P_PER_LAYER * l);
  return x;
}

/* Final LayerNorm and the tied head: [rows, D] -> [rows, V]. */
static int32_t head(fwd *f, int32_t x2) {
  int32_t n_params = P_FIRST_LAYER + P_PER_LAYER * f->c->n_layer;
  int32_t h = layer_norm(f, x2, f->pv[n_params], f->pv[n_params + 1]);
  return lb_matmul(f->g, h, f->pv[P_WTE], false, true);
}

static loom_status check_bt(loom_ctx *ctx, const loom_gpt_config *c, int32_t b, int32_t t) {
  LOOM_TRY(loom_gpt_config_check(ctx, c));
  if (b < 1 || b > 1 << 16)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: batch %d is out of range", b);
  if (t < 1 || t > c->context)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "gpt: sequence length %d is outside [1, context %d]", t, c->context);
  return LOOM_STATUS_OK;
}

/* ---- inference ---------------------------------------------------------- */

loom_status loom_gpt_build_infer(loom_ctx *ctx, const loom_gpt_config *c, int32_t b, int32_t t,
                                 loom_graph **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: out is NULL");
  *out = NULL;
  LOOM_TRY(check_bt(ctx, c, b, t));
  loom_gpt_param *ps = NULL;
  int32_t n = 0;
  LOOM_TRY(loom_gpt_params(ctx, c, &ps, &n));
  int32_t *pv = loom_calloc(ctx, (size_t)n, sizeof *pv);
  loom_graph *g = NULL;
  loom_status s = pv ? loom_graph_new(ctx, &g) : LOOM_STATUS_OUT_OF_MEMORY;
  int32_t tokens = -1, rows = -1;
  int64_t bt[2] = {b, t}, bb[1] = {b};
  if (!s) s = loom_graph_input(g, "tokens", LOOM_DTYPE_I64, 2, bt, &tokens);
  if (!s) s = loom_graph_input(g, "rows", LOOM_DTYPE_I64, 1, bb, &rows);
  if (!s) s = declare_params(g, ps, n, pv);
  if (!s) {
    fwd f = {.g = g, .c = c, .b = b, .t = t, .pv = pv, .train = false, .base = -1};
    int32_t x = trunk(&f, tokens);
    int64_t flat[2] = {(int64_t)b * t, c->d_model};
    /* only the wanted rows go through lnf and the head */
    x = lb_gather(g, lb_reshape(g, x, 2, flat), rows, 0);
    int32_t logits = head(&f, x);
    s = loom_build_status(g);
    if (!s) s = loom_graph_output(g, "logits", logits);
  }
  free(pv);
  free(ps);
  if (s) {
    loom_error_prefix(ctx, "gpt inference graph");
    loom_graph_free(g);
    return s;
  }
  *out = g;
  return LOOM_STATUS_OK;
}

/* ---- training step ------------------------------------------------------ */

/* Declares the training inputs; writes the parameter ids into pv. */
static loom_status declare_train_inputs(loom_graph *g, const loom_gpt_param *ps, int32_t n,
                                        int32_t b, int32_t t, int32_t *pv, int32_t *tokens,
                                        int32_t *targets, int32_t *base) {
  int64_t bt[2] = {b, t};
  LOOM_TRY(loom_graph_input(g, "tokens", LOOM_DTYPE_I64, 2, bt, tokens));
  LOOM_TRY(loom_graph_input(g, "targets", LOOM_DTYPE_I64, 2, bt, targets));
  LOOM_TRY(loom_graph_input(g, "step", LOOM_DTYPE_F32, 0, NULL, NULL));
  LOOM_TRY(loom_graph_input(g, "lr", LOOM_DTYPE_F32, 0, NULL, NULL));
  LOOM_TRY(loom_graph_input(g, "rng_base", LOOM_DTYPE_I64, 0, NULL, base));
  LOOM_TRY(declare_params(g, ps, n, pv));
  char nm[48];
  for (int32_t k = 0; k < 2; k++)
    for (int32_t i = 0; i < n; i++) {
      snprintf(nm, sizeof nm, "adam.%c.%s", k ? 'v' : 'm', ps[i].name);
      LOOM_TRY(loom_graph_input(g, nm, LOOM_DTYPE_F32, ps[i].rank, ps[i].shape, NULL));
    }
  return LOOM_STATUS_OK;
}

/* The AdamW updates, on the decomposed graph dg, and the outputs. The
 * learning rate is a runtime input: adamw runs with lr 1 and the step is
 * scaled, p + lr * (adamw(p) - p) = p - lr * (update + wd * p). */
static loom_status add_updates(loom_graph *dg, const loom_gpt_param *ps, int32_t n,
                               const loom_gpt_optim *o) {
  int32_t *pv = loom_calloc(dg->ctx, (size_t)n, sizeof *pv);
  int32_t *gr = loom_calloc(dg->ctx, (size_t)n, sizeof *gr);
  int32_t *res = loom_calloc(dg->ctx, (size_t)n * 3, sizeof *res);
  loom_status s = pv && gr && res ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; !s && i < n; i++)
    pv[i] = dg->inputs[LOOM_GPT_IN_PARAMS + i];
  if (!s) s = loom_graph_grad(dg, dg->outputs[0], n, pv, gr);
  int32_t step = dg->inputs[LOOM_GPT_IN_STEP], lr = dg->inputs[LOOM_GPT_IN_LR];
  for (int32_t i = 0; !s && i < n; i++) {
    int32_t m = dg->inputs[LOOM_GPT_IN_PARAMS + n + i];
    int32_t v = dg->inputs[LOOM_GPT_IN_PARAMS + 2 * n + i];
    int32_t grad = gr[i] >= 0 ? gr[i] : lb_zeros_like(dg, pv[i]);
    loom_attr_value a[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_ADAMW, a);
    LOOM_ATTRV_F(a, adamw, lr) = 1.0;
    LOOM_ATTRV_F(a, adamw, beta1) = o->beta1;
    LOOM_ATTRV_F(a, adamw, beta2) = o->beta2;
    LOOM_ATTRV_F(a, adamw, eps) = o->eps;
    LOOM_ATTRV_F(a, adamw, weight_decay) = ps[i].decay ? o->weight_decay : 0.0;
    int32_t in[5] = {pv[i], grad, m, v, step}, outs[3] = {-1, -1, -1};
    lb_op_multi(dg, LOOM_OP_ADAMW, 5, in, a, 3, outs);
    int32_t delta = lb_sub(dg, outs[0], pv[i]);
    res[i] = lb_add(dg, pv[i], lb_mul(dg, delta, lr));
    res[n + i] = outs[1];
    res[2 * n + i] = outs[2];
    s = loom_build_status(dg);
  }
  char nm[48];
  for (int32_t k = 0; !s && k < 3 * n; k++) {
    const char *kind = k < n ? "" : k < 2 * n ? "adam.m." : "adam.v.";
    snprintf(nm, sizeof nm, "new.%s%s", kind, ps[k % n].name);
    s = loom_graph_output(dg, nm, res[k]);
  }
  free(pv);
  free(gr);
  free(res);
  return s;
}

loom_status loom_gpt_build_train(loom_ctx *ctx, const loom_gpt_config *c, int32_t b, int32_t t,
                                 const loom_gpt_optim *o, loom_graph **out, int64_t *rng_per_step) {
  if (!out || !o || !rng_per_step)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: NULL argument");
  *out = NULL;
  LOOM_TRY(check_bt(ctx, c, b, t));
  loom_gpt_param *ps = NULL;
  int32_t n = 0;
  LOOM_TRY(loom_gpt_params(ctx, c, &ps, &n));
  int32_t *pv = loom_calloc(ctx, (size_t)n, sizeof *pv);
  loom_graph *g = NULL, *dg = NULL;
  loom_status s = pv ? loom_graph_new(ctx, &g) : LOOM_STATUS_OUT_OF_MEMORY;
  int32_t tokens = -1, targets = -1, base = -1;
  if (!s) s = declare_train_inputs(g, ps, n, b, t, pv, &tokens, &targets, &base);
  fwd f = {.g = g, .c = c, .b = b, .t = t, .pv = pv, .train = true, .seed = o->seed, .base = base};
  if (!s) {
    int32_t x = trunk(&f, tokens);
    int64_t flat[2] = {(int64_t)b * t, c->d_model}, nt[1] = {(int64_t)b * t};
    int32_t logits = head(&f, lb_reshape(g, x, 2, flat));
    int32_t in[2] = {logits, lb_reshape(g, targets, 1, nt)};
    int32_t loss = lb_op(g, LOOM_OP_CROSS_ENTROPY, 2, in, NULL);
    s = loom_build_status(g);
    if (!s) s = loom_graph_output(g, "loss", loss);
  }
  if (!s && o->session) s = backend_rewrite(ctx, o->session, &g);
  /* differentiate the primitives, so nothing is recomputed per composite */
  if (!s) s = loom_graph_decompose(g, &dg);
  if (!s) s = add_updates(dg, ps, n, o);
  free(pv);
  free(ps);
  loom_graph_free(g);
  if (s) {
    loom_error_prefix(ctx, "gpt training graph");
    loom_graph_free(dg);
    return s;
  }
  *out = dg;
  *rng_per_step = f.offset;
  return LOOM_STATUS_OK;
}

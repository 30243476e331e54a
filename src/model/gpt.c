#include "model/gpt_internal.h"

#include "ir/build.h"
#include "ops/op.h"
#include "passes/decompose.h"
#include "runtime/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_gpt_config_default(loom_gpt_config *c) {
  memset(c, 0, sizeof *c); /* the architecture options: GPT-2's */
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
  if ((unsigned)c->norm > LOOM_GPT_NORM_RMSNORM || (unsigned)c->mlp > LOOM_GPT_MLP_SWIGLU ||
      (unsigned)c->position > LOOM_GPT_POS_ROPE)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gpt: unknown norm, mlp or position");
  int32_t kv = loom_gpt_kv_heads(c);
  if (kv < 1 || kv > c->n_head || c->n_head % kv)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "gpt: %d key/value heads must divide the %d heads", kv, c->n_head);
  if (c->position == LOOM_GPT_POS_ROPE && (c->d_model / c->n_head) % 2)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "gpt: RoPE rotates pairs of a head's dims, and the head width %d is odd",
                      c->d_model / c->n_head);
  if (!(c->rope_theta >= 0.0 && c->rope_theta < 1e12))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "gpt: rope_theta %g is outside [0 (default 10000), 1e12)", c->rope_theta);
  return LOOM_STATUS_OK;
}

/* ---- architecture ------------------------------------------------------ */

void loom_gpt_config_set_arch(loom_gpt_config *c, loom_gpt_arch a) {
  bool llama = a == LOOM_GPT_ARCH_LLAMA;
  c->norm = llama ? LOOM_GPT_NORM_RMSNORM : LOOM_GPT_NORM_LAYERNORM;
  c->mlp = llama ? LOOM_GPT_MLP_SWIGLU : LOOM_GPT_MLP_GELU;
  c->position = llama ? LOOM_GPT_POS_ROPE : LOOM_GPT_POS_LEARNED;
  c->no_bias = llama;
  c->untied = llama;
}

loom_gpt_arch loom_gpt_config_arch(const loom_gpt_config *c) {
  for (int a = LOOM_GPT_ARCH_GPT; a <= LOOM_GPT_ARCH_LLAMA; a++) {
    loom_gpt_config k = *c;
    loom_gpt_config_set_arch(&k, (loom_gpt_arch)a);
    if (k.norm == c->norm && k.mlp == c->mlp && k.position == c->position &&
        k.no_bias == c->no_bias && k.untied == c->untied)
      return (loom_gpt_arch)a;
  }
  return LOOM_GPT_ARCH_CUSTOM;
}

const char *loom_gpt_arch_name(loom_gpt_arch a) {
  return a == LOOM_GPT_ARCH_GPT ? "gpt" : a == LOOM_GPT_ARCH_LLAMA ? "llama" : "custom";
}

bool loom_gpt_arch_from_name(const char *name, loom_gpt_arch *out) {
  if (!name) return false;
  if (!strcmp(name, "gpt")) *out = LOOM_GPT_ARCH_GPT;
  else if (!strcmp(name, "llama")) *out = LOOM_GPT_ARCH_LLAMA;
  else return false;
  return true;
}

int32_t loom_gpt_kv_heads(const loom_gpt_config *c) {
  return c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
}

double loom_gpt_rope_theta(const loom_gpt_config *c) {
  return c->rope_theta > 0 ? c->rope_theta : 10000.0;
}

double loom_gpt_block_matrix_params(const loom_gpt_config *c) {
  double h = c->d_model, kv = (double)loom_gpt_kv_heads(c) * (c->d_model / c->n_head);
  double ff = c->d_ff > 0 ? c->d_ff : 4.0 * h;
  return h * (h + 2 * kv) + h * h + (c->mlp == LOOM_GPT_MLP_SWIGLU ? 3 : 2) * h * ff;
}

double loom_gpt_param_count(const loom_gpt_config *c) {
  gpt_layout l;
  gpt_layout_of(c, &l);
  double h = c->d_model, kv = (double)loom_gpt_kv_heads(c) * (c->d_model / c->n_head);
  double ff = c->d_ff > 0 ? c->d_ff : 4.0 * h, nb = c->no_bias ? 0 : 1;
  double norms = c->norm == LOOM_GPT_NORM_RMSNORM ? h : h * (1 + nb);
  double biases = nb * ((h + 2 * kv) + h + (c->mlp == LOOM_GPT_MLP_SWIGLU ? 2 : 1) * ff + h);
  double layer = loom_gpt_block_matrix_params(c) + biases + 2 * norms;
  double emb = (double)c->vocab * h * (c->untied ? 2 : 1);
  if (c->position == LOOM_GPT_POS_LEARNED) emb += (double)c->context * h;
  return emb + c->n_layer * layer + norms;
}

/* ---- named configurations ------------------------------------------------ */

typedef struct named_config {
  const char *name;
  int32_t layers, d_model, heads, kv_heads, d_ff, vocab, context, batch;
  loom_gpt_arch arch;
  double rope_theta;
} named_config;

/* The published shapes: GPT-3 175B (Brown et al. 2020, Table 2.1; batch
 * 3.2M tokens), Llama 2 70B (Touvron et al. 2023; 4M tokens a batch) and
 * Llama 3.1 405B (Llama Team 2024, Table 3; 16M tokens at sequence 8192). */
static const named_config named[] = {
    {"gpt3-175b", 96, 12288, 96, 0, 4 * 12288, 51200, 2048, 1536, LOOM_GPT_ARCH_GPT, 0},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 1024, LOOM_GPT_ARCH_LLAMA, 10000},
    {"llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 2048, LOOM_GPT_ARCH_LLAMA, 500000},
};

bool loom_gpt_config_named(const char *name, loom_gpt_config *c, int32_t *batch) {
  for (size_t i = 0; name && i < sizeof named / sizeof named[0]; i++) {
    const named_config *n = &named[i];
    if (strcmp(name, n->name)) continue;
    loom_gpt_config_default(c);
    c->n_layer = n->layers, c->d_model = n->d_model, c->n_head = n->heads;
    c->n_kv_head = n->kv_heads, c->d_ff = n->d_ff, c->vocab = n->vocab, c->context = n->context;
    c->dropout = 0.0;
    loom_gpt_config_set_arch(c, n->arch);
    c->rope_theta = n->rope_theta;
    if (batch) *batch = n->batch;
    return true;
  }
  return false;
}

const char *loom_gpt_config_names(void) { return "gpt3-175b, llama2-70b, llama3-405b"; }

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

/* The parameter list's order: wte, wpe (learned positions); per layer
 * ln1.g, ln1.b, attn.qkv.w, .b, attn.proj.w, .b, ln2.g, ln2.b, mlp.fc.w,
 * .b, mlp.proj.w, .b, each present or not as the architecture says (GPT:
 * all, as always); lnf.g, lnf.b, and head.w (untied). SwiGLU's gate and up
 * matrices are one mlp.fc.w [d, 2 d_ff] with their columns interleaved
 * (gate i at 2i, up i at 2i + 1), so that a tensor-parallel column cut
 * gives each device matching gate and up columns and the backward's input
 * gradient is one partial sum (one all-reduce, as Megatron). */
void gpt_layout_of(const loom_gpt_config *c, gpt_layout *l) {
  bool bias = !c->no_bias, ln_bias = bias && c->norm == LOOM_GPT_NORM_LAYERNORM;
  int32_t n = 0;
  l->wte = n++;
  l->wpe = c->position == LOOM_GPT_POS_LEARNED ? n++ : -1;
  l->first_layer = n;
  int32_t k = 0;
#define AT(field, present) l->field = (present) ? k++ : -1
  AT(ln1_g, true);
  AT(ln1_b, ln_bias);
  AT(qkv_w, true);
  AT(qkv_b, bias);
  AT(proj_w, true);
  AT(proj_b, bias);
  AT(ln2_g, true);
  AT(ln2_b, ln_bias);
  AT(fc_w, true);
  AT(fc_b, bias);
  AT(mlp_w, true);
  AT(mlp_b, bias);
#undef AT
  l->per_layer = k;
  n += k * c->n_layer;
  l->lnf_g = n++;
  l->lnf_b = ln_bias ? n++ : -1;
  l->head = c->untied ? n++ : -1;
  l->total = n;
}

loom_status loom_gpt_params(loom_ctx *ctx, const loom_gpt_config *c, loom_gpt_param **out,
                            int32_t *n_out) {
  LOOM_TRY(loom_gpt_config_check(ctx, c));
  gpt_layout L;
  gpt_layout_of(c, &L);
  loom_gpt_param *ps = loom_calloc(ctx, (size_t)L.total, sizeof *ps);
  if (!ps) return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t n = 0;
  int64_t d = c->d_model, f = c->d_ff, f_in = c->mlp == LOOM_GPT_MLP_SWIGLU ? 2 * f : f;
  int64_t qkv = d + 2 * (int64_t)loom_gpt_kv_heads(c) * (d / c->n_head); /* 3d with MHA */
  add_param(ps, &n, "wte", 2, c->vocab, d, LOOM_GPT_INIT_NORMAL);
  if (L.wpe >= 0) add_param(ps, &n, "wpe", 2, c->context, d, LOOM_GPT_INIT_NORMAL);
  for (int32_t l = 0; l < c->n_layer; l++) {
    char nm[32];
#define P(present, suffix, rank, d0, d1, init)                                                     \
  if (present) {                                                                                   \
    snprintf(nm, sizeof nm, "h%d." suffix, (int)l);                                                \
    add_param(ps, &n, nm, rank, d0, d1, init);                                                     \
  }
    P(true, "ln1.g", 1, d, 0, LOOM_GPT_INIT_ONES);
    P(L.ln1_b >= 0, "ln1.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P(true, "attn.qkv.w", 2, d, qkv, LOOM_GPT_INIT_NORMAL);
    P(L.qkv_b >= 0, "attn.qkv.b", 1, qkv, 0, LOOM_GPT_INIT_ZEROS);
    P(true, "attn.proj.w", 2, d, d, LOOM_GPT_INIT_NORMAL);
    P(L.proj_b >= 0, "attn.proj.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P(true, "ln2.g", 1, d, 0, LOOM_GPT_INIT_ONES);
    P(L.ln2_b >= 0, "ln2.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
    P(true, "mlp.fc.w", 2, d, f_in, LOOM_GPT_INIT_NORMAL);
    P(L.fc_b >= 0, "mlp.fc.b", 1, f_in, 0, LOOM_GPT_INIT_ZEROS);
    P(true, "mlp.proj.w", 2, f, d, LOOM_GPT_INIT_NORMAL);
    P(L.mlp_b >= 0, "mlp.proj.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
#undef P
  }
  add_param(ps, &n, "lnf.g", 1, d, 0, LOOM_GPT_INIT_ONES);
  if (L.lnf_b >= 0) add_param(ps, &n, "lnf.b", 1, d, 0, LOOM_GPT_INIT_ZEROS);
  if (L.head >= 0) add_param(ps, &n, "head.w", 2, c->vocab, d, LOOM_GPT_INIT_NORMAL);
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

/* Embeddings and the blocks: the final hidden state [B, T, D] (before lnf). */
static int32_t trunk(gpt_fwd *f, int32_t tokens) {
  loom_graph *g = f->g;
  const int32_t *pv = f->pv;
  int64_t d = f->c->d_model;
  int32_t x = lb_gather(g, pv[f->lay.wte], tokens, 0); /* [B, T, D] */
  if (f->lay.wpe >= 0) {
    int32_t pos = pv[f->lay.wpe];
    if (f->t < f->c->context) {
      int64_t lo[2] = {0, 0}, hi[2] = {f->t, d};
      pos = lb_slice(g, pos, lo, hi);
    }
    x = lb_add(g, x, pos); /* [T, D] broadcasts over B */
  }
  for (int32_t l = 0; l < f->c->n_layer; l++) x = gpt_block(f, x, l);
  return x;
}

/* Final norm and the head (tied: wte): [rows, D] -> [rows, V]. */
static int32_t head(gpt_fwd *f, int32_t x2) {
  const gpt_layout *L = &f->lay;
  int32_t h = gpt_norm(f, x2, f->pv[L->lnf_g], L->lnf_b >= 0 ? f->pv[L->lnf_b] : -1);
  return lb_matmul(f->g, h, f->pv[L->head >= 0 ? L->head : L->wte], false, true);
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
    gpt_fwd f = {.g = g, .c = c, .b = b, .t = t, .pv = pv, .train = false, .base = -1};
    gpt_layout_of(c, &f.lay);
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
  gpt_fwd f = {.g = g, .c = c, .b = b, .t = t, .pv = pv, .train = true, .seed = o->seed,
               .base = base};
  gpt_layout_of(c, &f.lay);
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
  /* differentiate the primitives, so nothing is recomputed per composite
   * (but gelu, whose own gradient rule is cheaper than its primitives') */
  if (!s) s = loom_graph_decompose_for_grad(g, &dg);
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

/*
 * An epilogue kernel as oneDNN post-ops (cpu_conv_post.h). The kernel IR
 * (kernel/kernel.h) is read, not pattern-matched on graph ops: every
 * expression is classed as
 *   U  uniform: a value per output channel (constants, loads whose map
 *      moves only with the channel, ops of those; evaluated per run);
 *   M  main: a function of the conv's output C (the in-order load of C
 *      and ops applied to it);
 *   T  a tensor of C's shape loaded in C's order (a residual);
 * and the stored expression, an M, is walked from C outwards into a
 * chain of post-ops. Anything the chain cannot say leaves the kernel to
 * run on C's rows as before.
 */
#include "runtime/cpu/cpu_conv_post.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <dnnl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CLS_X = 0, CLS_U, CLS_M, CLS_T };

/* A post-op before runs of affine ops are collapsed: CHANNEL ops name
 * their uniform expression (or, expr < 0, the constant value). */
typedef struct raw_op {
  int32_t kind, alg, expr;
  float alpha, beta, value;
  const float *tensor;
  int32_t arg; /* TENSOR: the kernel argument it loads */
} raw_op;

#define RAW_MAX 32

typedef struct translator {
  const loom_kernel *k;
  void *const *args;
  int32_t c_arg, rank;
  int64_t batch, ch, plane, total;
  int64_t size[2 * LOOM_MAX_RANK], stride[2 * LOOM_MAX_RANK]; /* domain dims, flat strides */
  int8_t *cls;
  int64_t *cstride; /* U loads: elements per channel */
  int32_t *reg_expr;
  bool *emitted; /* M exprs already in the chain */
  int32_t n;
  raw_op raw[RAW_MAX];
  double *val; /* evaluation of U exprs for one channel */
  bool *done;
  double *opv; /* per raw op with an operand, per channel: its value (args given) */
} translator;

/* The map's coefficient along domain dim d. */
static int64_t map_coef(const translator *t, const loom_kmap *m, int32_t d) {
  int32_t pr = t->k->parts[0].p_rank;
  return d < pr ? m->p[d] : m->r[d - pr];
}

/* True if m walks the domain in flat row-major order from 0. */
static bool in_order(const translator *t, const loom_kmap *m) {
  if (m->base != 0) return false;
  for (int32_t d = 0; d < t->rank; d++)
    if (t->size[d] != 1 && map_coef(t, m, d) != t->stride[d]) return false;
  return true;
}

/* True if m moves only with the channel of C's element: *cs elements per
 * channel (0 when there is one channel). */
static bool channel_map(const translator *t, const loom_kmap *m, int64_t *cs) {
  int64_t s = -1, cp = t->ch * t->plane;
  for (int32_t d = 0; d < t->rank; d++) {
    int64_t n = t->size[d], st = t->stride[d], coef = map_coef(t, m, d);
    if (n == 1) continue;
    if (t->plane % (st * n) == 0 || st % cp == 0) { /* inside a plane, or across images */
      if (coef != 0) return false;
    } else if (st % t->plane == 0 && cp % (st * n) == 0) { /* across channels */
      int64_t q = st / t->plane;
      if (coef % q != 0 || (s >= 0 && coef / q != s)) return false;
      s = coef / q;
    } else {
      return false;
    }
  }
  *cs = s < 0 ? 0 : s;
  return true;
}

/* Classes every expression (operands come first). */
static void classify(translator *t) {
  const loom_kernel *k = t->k;
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    int8_t c = CLS_X;
    if (x->kind == LOOM_KX_CONST) {
      c = CLS_U;
    } else if (x->kind == LOOM_KX_LOAD && x->n_a == 0 && x->dtype == LOOM_DTYPE_F32) {
      const loom_karg *a = &k->args[x->arg];
      int64_t cs;
      if (x->arg == t->c_arg)
        c = in_order(t, &x->map) ? CLS_M : CLS_X;
      else if (!a->is_output && !a->temp && a->numel == t->total && in_order(t, &x->map))
        c = CLS_T;
      else if (!a->is_output && !a->temp && channel_map(t, &x->map, &cs) && x->map.base >= 0 &&
               x->map.base + cs * (t->ch - 1) < a->numel) {
        c = CLS_U;
        t->cstride[e] = cs;
      }
    } else if (x->kind == LOOM_KX_REG && t->reg_expr[x->reg] >= 0) {
      c = t->cls[t->reg_expr[x->reg]] == CLS_U ? CLS_U : CLS_X;
    } else if (x->kind == LOOM_KX_OP && x->op != LOOM_OP_SELECT && x->op != LOOM_OP_CAST &&
               loom_op_get(x->op)->cls == LOOM_OPCLASS_ELEMENTWISE &&
               (x->dtype == LOOM_DTYPE_F32 || x->dtype == LOOM_DTYPE_F64)) {
      bool any_m = false, all_u = true, bad = false;
      for (int32_t i = 0; i < x->n_a; i++) {
        int8_t ci = t->cls[x->a[i]];
        bad |= ci == CLS_X;
        any_m |= ci == CLS_M;
        all_u &= ci == CLS_U;
      }
      c = bad ? CLS_X : all_u ? CLS_U : any_m ? CLS_M : CLS_X;
      if (c == CLS_M && x->dtype != LOOM_DTYPE_F32) c = CLS_X;
    }
    t->cls[e] = c;
  }
}

static bool push(translator *t, raw_op op) {
  if (t->n >= RAW_MAX) return false;
  t->raw[t->n++] = op;
  return true;
}

static bool push_eltwise(translator *t, int32_t alg, float alpha, float beta) {
  return push(t, (raw_op){.kind = LOOM_CONV_POST_ELTWISE, .alg = alg, .alpha = alpha, .beta = beta});
}

static bool push_channel(translator *t, int32_t alg, int32_t expr, float value) {
  return push(t, (raw_op){.kind = LOOM_CONV_POST_CHANNEL, .alg = alg, .expr = expr, .value = value});
}

static bool is_const(const translator *t, int32_t e, double v) {
  const loom_kexpr *x = &t->k->exprs[e];
  return x->kind == LOOM_KX_CONST && fabs(x->c - v) <= 1e-7 * fabs(v);
}

/* True if e is x * a + b with constants, for the a and b given. */
static bool affine_of(const translator *t, int32_t e, int32_t x, double a, double b) {
  if (e == x) return fabs(a - 1.0) <= 1e-6 && fabs(b) <= 1e-6;
  const loom_kexpr *y = &t->k->exprs[e];
  if (y->kind != LOOM_KX_OP || y->n_a != 2) return false;
  int32_t l = y->a[0], r = y->a[1];
  const loom_kexpr *rc = &t->k->exprs[r];
  if (rc->kind != LOOM_KX_CONST) return false;
  switch (y->op) {
  case LOOM_OP_ADD: return affine_of(t, l, x, a, b - rc->c);
  case LOOM_OP_SUB: return affine_of(t, l, x, a, b + rc->c);
  case LOOM_OP_MUL: return rc->c != 0 && affine_of(t, l, x, a / rc->c, b / rc->c);
  case LOOM_OP_DIV: return affine_of(t, l, x, a * rc->c, b * rc->c);
  default: return false;
  }
}

/* True if q is x * 1/6 + 1/2 clamped to [0, 1] (min then max, or max then
 * min): hardswish is x * q. */
static bool hard_sigmoid_of(const translator *t, int32_t q, int32_t x) {
  const loom_kexpr *o = &t->k->exprs[q];
  if (o->kind != LOOM_KX_OP || o->n_a != 2) return false;
  const loom_kexpr *in = &t->k->exprs[o->a[0]];
  if (in->kind != LOOM_KX_OP || in->n_a != 2) return false;
  bool max_min = o->op == LOOM_OP_MAXIMUM && is_const(t, o->a[1], 0) &&
                 in->op == LOOM_OP_MINIMUM && is_const(t, in->a[1], 1);
  bool min_max = o->op == LOOM_OP_MINIMUM && is_const(t, o->a[1], 1) &&
                 in->op == LOOM_OP_MAXIMUM && is_const(t, in->a[1], 0);
  return (max_min || min_max) && affine_of(t, in->a[0], x, 1.0 / 6.0, 0.5);
}

static int32_t binary_alg(loom_op op) {
  switch (op) {
  case LOOM_OP_ADD: return dnnl_binary_add;
  case LOOM_OP_SUB: return dnnl_binary_sub;
  case LOOM_OP_MUL: return dnnl_binary_mul;
  case LOOM_OP_DIV: return dnnl_binary_div;
  case LOOM_OP_MAXIMUM: return dnnl_binary_max;
  case LOOM_OP_MINIMUM: return dnnl_binary_min;
  default: return 0;
  }
}

static bool commutes(loom_op op) {
  return op == LOOM_OP_ADD || op == LOOM_OP_MUL || op == LOOM_OP_MAXIMUM || op == LOOM_OP_MINIMUM;
}

/* Appends the post-ops that compute M expression e from C. */
static bool emit(translator *t, int32_t e) {
  const loom_kexpr *x = &t->k->exprs[e];
  if (t->cls[e] != CLS_M) return false;
  if (t->emitted[e]) return false; /* reused past where the chain is: not a chain */
  t->emitted[e] = true;
  if (x->kind == LOOM_KX_LOAD) return true;
  if (x->kind != LOOM_KX_OP) return false;
  if (x->n_a == 1) {
    static const struct { loom_op op; int32_t alg; } unary[] = {
        {LOOM_OP_RELU, dnnl_eltwise_relu}, {LOOM_OP_SIGMOID, dnnl_eltwise_logistic},
        {LOOM_OP_TANH, dnnl_eltwise_tanh}, {LOOM_OP_EXP, dnnl_eltwise_exp},
        {LOOM_OP_ABS, dnnl_eltwise_abs},   {LOOM_OP_SQRT, dnnl_eltwise_sqrt},
        {LOOM_OP_LOG, dnnl_eltwise_log},
    };
    if (!emit(t, x->a[0])) return false;
    if (x->op == LOOM_OP_NEG) return push_channel(t, dnnl_binary_mul, -1, -1.0f);
    for (size_t i = 0; i < sizeof unary / sizeof *unary; i++)
      if (unary[i].op == x->op) return push_eltwise(t, unary[i].alg, 0.0f, 0.0f);
    return false;
  }
  if (x->n_a != 2) return false;
  int32_t a = x->a[0], b = x->a[1], alg = binary_alg(x->op);
  int8_t ca = t->cls[a], cb = t->cls[b];
  if (ca == CLS_M && cb == CLS_M) { /* x * f(x): activations oneDNN has whole */
    for (int32_t side = 0; side < 2; side++) {
      int32_t m = side ? b : a, q = side ? a : b;
      const loom_kexpr *qx = &t->k->exprs[q];
      if (x->op != LOOM_OP_MUL) break;
      if (hard_sigmoid_of(t, q, m))
        return emit(t, m) && push_eltwise(t, dnnl_eltwise_hardswish, 0.0f, 0.0f);
      if (qx->kind == LOOM_KX_OP && qx->op == LOOM_OP_SIGMOID && qx->a[0] == m)
        return emit(t, m) && push_eltwise(t, dnnl_eltwise_swish, 1.0f, 0.0f);
    }
    return false;
  }
  if (!alg) return false;
  int32_t m = ca == CLS_M ? a : b, other = ca == CLS_M ? b : a;
  bool m_left = ca == CLS_M, tensor = t->cls[other] == CLS_T;
  if (!emit(t, m)) return false;
  if (!m_left && !commutes(x->op)) { /* other - m, other / m */
    if (x->op != LOOM_OP_SUB || !push_channel(t, dnnl_binary_mul, -1, -1.0f)) return false;
    alg = dnnl_binary_add;
  }
  if (!tensor) return push_channel(t, alg, other, 0.0f);
  const loom_kexpr *ld = &t->k->exprs[other];
  return push(t, (raw_op){.kind = LOOM_CONV_POST_TENSOR, .alg = alg, .arg = ld->arg,
                          .tensor = t->args ? t->args[ld->arg] : NULL});
}

/* The value of U expression e for channel ch (f32 results rounded as the
 * kernel rounds them). */
static double eval_u(translator *t, int32_t e, int64_t ch) {
  if (t->done[e]) return t->val[e];
  const loom_kexpr *x = &t->k->exprs[e];
  double v = 0.0;
  if (x->kind == LOOM_KX_CONST) {
    v = x->c;
  } else if (x->kind == LOOM_KX_LOAD) {
    v = ((const float *)t->args[x->arg])[x->map.base + ch * t->cstride[e]];
  } else if (x->kind == LOOM_KX_REG) {
    v = eval_u(t, t->reg_expr[x->reg], ch);
  } else {
    const loom_op_def *d = loom_op_get(x->op);
    double a = eval_u(t, x->a[0], ch);
    v = x->n_a == 1 ? d->scalar1(a) : d->scalar2(a, eval_u(t, x->a[1], ch));
  }
  if (x->dtype == LOOM_DTYPE_F32) v = (float)v;
  t->done[e] = true;
  return t->val[e] = v;
}

/* Every raw op's operand for every channel into t->opv, each channel's
 * shared subexpressions evaluated once; without args, zeros (the
 * structure alone). */
static bool eval_operands(translator *t) {
  t->opv = calloc((size_t)(t->n * t->ch + 1), sizeof *t->opv);
  if (!t->opv) return false;
  for (int64_t c = 0; t->args && c < t->ch; c++) {
    memset(t->done, 0, sizeof *t->done * (size_t)t->k->n_exprs);
    for (int32_t i = 0; i < t->n; i++) {
      const raw_op *op = &t->raw[i];
      if (op->kind == LOOM_CONV_POST_CHANNEL)
        t->opv[i * t->ch + c] = op->expr < 0 ? op->value : eval_u(t, op->expr, c);
    }
  }
  return true;
}

static float *channel_values(translator *t, int32_t i) {
  float *v = malloc(sizeof(float) * (size_t)t->ch);
  for (int64_t c = 0; v && c < t->ch; c++) v[c] = (float)t->opv[i * t->ch + c];
  return v;
}

static bool is_affine(const raw_op *op) {
  return op->kind == LOOM_CONV_POST_CHANNEL &&
         (op->alg == dnnl_binary_add || op->alg == dnnl_binary_sub ||
          op->alg == dnnl_binary_mul || op->alg == dnnl_binary_div);
}

static bool add_op(loom_conv_post *post, loom_conv_post_op op) {
  if (post->n >= LOOM_CONV_POST_MAX) {
    free(op.chan);
    return false;
  }
  post->op[post->n++] = op;
  return true;
}

/* The raw chain into post: each run of affine ops becomes x * scale +
 * shift (the first, without a scale, the conv's bias). */
static bool collapse(translator *t, loom_conv_post *post) {
  for (int32_t i = 0; i < t->n;) {
    const raw_op *r = &t->raw[i];
    if (!is_affine(r)) {
      loom_conv_post_op op = {.kind = r->kind, .alg = r->alg, .alpha = r->alpha,
                              .beta = r->beta, .tensor = r->tensor, .arg = r->arg};
      if (r->kind == LOOM_CONV_POST_CHANNEL && !(op.chan = channel_values(t, i))) return false;
      if (!add_op(post, op)) return false;
      i++;
      continue;
    }
    int32_t j = i;
    bool scaled = false, shifted = false;
    while (j < t->n && is_affine(&t->raw[j])) {
      int32_t alg = t->raw[j++].alg;
      scaled |= alg == dnnl_binary_mul || alg == dnnl_binary_div;
      shifted |= alg == dnnl_binary_add || alg == dnnl_binary_sub;
    }
    float *scale = calloc((size_t)t->ch, sizeof(float));
    float *shift = calloc((size_t)t->ch, sizeof(float));
    if (!scale || !shift) {
      free(scale);
      free(shift);
      return false;
    }
    for (int64_t c = 0; t->args && c < t->ch; c++) {
      double a = 1.0, b = 0.0;
      for (int32_t q = i; q < j; q++) {
        const raw_op *op = &t->raw[q];
        double u = t->opv[q * t->ch + c];
        if (op->alg == dnnl_binary_add) b += u;
        if (op->alg == dnnl_binary_sub) b -= u;
        if (op->alg == dnnl_binary_mul) a *= u, b *= u;
        if (op->alg == dnnl_binary_div) a /= u, b /= u;
      }
      scale[c] = (float)a;
      shift[c] = (float)b;
    }
    bool ok = true;
    if (i == 0) { /* on the conv's own output: its weights' scale and its bias */
      if (scaled) post->scale = scale;
      if (shifted) post->bias = shift;
      scale = scaled ? NULL : scale;
      shift = shifted ? NULL : shift;
      scaled = shifted = false;
    }
    if (scaled)
      ok = add_op(post, (loom_conv_post_op){LOOM_CONV_POST_CHANNEL, dnnl_binary_mul, 0, 0, scale,
                                            NULL, -1});
    else
      free(scale);
    if (ok && shifted)
      ok = add_op(post, (loom_conv_post_op){LOOM_CONV_POST_CHANNEL, dnnl_binary_add, 0, 0, shift,
                                            NULL, -1});
    else
      free(shift);
    if (!ok) return false;
    i = j;
  }
  return true;
}

void loom_conv_post_free(loom_conv_post *post) {
  for (int32_t i = 0; i < post->n; i++)
    free(post->op[i].chan);
  free(post->scale);
  free(post->bias);
  memset(post, 0, sizeof *post);
}

/* The kernel's one store, if it is the only output besides registers of
 * scalar stages (no scratch rows, no reductions); -1 otherwise. */
static int32_t only_store(translator *t) {
  const loom_kpart *part = &t->k->parts[0];
  int32_t store = -1;
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *out = &part->stages[s].out[o];
      if (out->dst == LOOM_KDST_REG && part->stages[s].kind == LOOM_KSTAGE_SCALAR)
        t->reg_expr[out->target] = out->expr;
      else if (out->dst == LOOM_KDST_STORE && store < 0)
        store = s * 65536 + o;
      else
        return -1;
    }
  return store;
}

bool loom_conv_post_from_kernel(const loom_kernel *k, void *const *args, int32_t c,
                                int64_t batch, int64_t channels, int64_t plane,
                                loom_conv_post *post) {
  memset(post, 0, sizeof *post);
  if (k->n_parts != 1 || k->n_exprs <= 0) return false;
  const loom_kpart *part = &k->parts[0];
  translator t = {.k = k, .args = args, .c_arg = -1, .batch = batch, .ch = channels,
                  .plane = plane, .total = batch * channels * plane};
  for (int32_t a = 0; a < k->n_args; a++)
    if (!k->args[a].is_output && k->args[a].value == c) t.c_arg = a;
  if (t.c_arg < 0 || t.total <= 0 || plane <= 0) return false;
  /* the domain's dims, P then R, and their strides in flat order */
  t.rank = part->p_rank + part->r_rank;
  for (int32_t d = 0; d < part->p_rank; d++) t.size[d] = part->p_shape[d];
  for (int32_t d = 0; d < part->r_rank; d++) t.size[part->p_rank + d] = part->r_shape[d];
  int64_t st = 1;
  for (int32_t d = t.rank - 1; d >= 0; d--) {
    t.stride[d] = st;
    st *= t.size[d];
  }
  if (st != t.total) return false;
  size_t ne = (size_t)k->n_exprs;
  t.cls = calloc(ne, sizeof *t.cls);
  t.cstride = calloc(ne, sizeof *t.cstride);
  t.emitted = calloc(ne, sizeof *t.emitted);
  t.val = calloc(ne, sizeof *t.val);
  t.done = calloc(ne, sizeof *t.done);
  t.reg_expr = malloc(sizeof *t.reg_expr * (size_t)(part->n_regs > 0 ? part->n_regs : 1));
  bool ok = t.cls && t.cstride && t.emitted && t.val && t.done && t.reg_expr;
  for (int32_t r = 0; ok && r < part->n_regs; r++) t.reg_expr[r] = -1;
  int32_t store = ok ? only_store(&t) : -1;
  ok = store >= 0;
  if (ok) {
    const loom_kout *out = &part->stages[store / 65536].out[store % 65536];
    const loom_karg *arg = &k->args[out->target];
    classify(&t);
    ok = arg->dtype == LOOM_DTYPE_F32 && arg->numel == t.total && in_order(&t, &out->map) &&
         emit(&t, out->expr) && t.n > 0 && eval_operands(&t) && collapse(&t, post);
    post->out = args ? args[out->target] : NULL;
  }
  free(t.cls);
  free(t.cstride);
  free(t.emitted);
  free(t.val);
  free(t.done);
  free(t.opv);
  free(t.reg_expr);
  if (!ok) loom_conv_post_free(post);
  return ok;
}

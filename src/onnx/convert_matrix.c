/*
 * Matrices and normalization: MatMul, Gemm, Softmax, LogSoftmax and the
 * normalizations (Layer, Batch, Instance, Group), and the attention that
 * PyTorch exports for a causal mask, recognized at MatMul.
 */
#include "onnx/convert_util.h"

#include "ops/attention_bias.h"
#include "ops/attrs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The node producing v in g, or NULL (an input or a parameter). */
static const loom_node *producer(const loom_graph *g, int32_t v) {
  return v >= 0 && g->values[v].kind == LOOM_VALUE_NODE ? &g->nodes[g->values[v].node] : NULL;
}

/* The value of v when a constant node makes it (one value, any shape). */
static bool const_value(const loom_graph *g, int32_t v, double *out) {
  const loom_node *n = producer(g, v);
  if (!n || n->op != LOOM_OP_CONSTANT) return false;
  *out = LOOM_ATTR_F(n, constant, value);
  return true;
}

/* If v is a reshape keeping the last two dims (regrouping only the
 * leading ones), its input; else v. */
static int32_t under_reshape(const loom_graph *g, int32_t v) {
  const loom_node *n = producer(g, v);
  if (!n || n->op != LOOM_OP_RESHAPE) return v;
  const loom_type *t = &g->values[v].type, *x = &g->values[n->in[0]].type;
  bool keeps = t->rank >= 2 && x->rank >= 2 && t->shape[t->rank - 1] == x->shape[x->rank - 1] &&
               t->shape[t->rank - 2] == x->shape[x->rank - 2];
  return keeps ? n->in[0] : v;
}

/* If v is transpose(x) swapping only the last two dims, sets v = x; also
 * through reshapes that regroup only the leading dims around it, as
 * torch.export writes k.transpose(-1, -2) ([b, h, t, d] as [b h, t, d],
 * transposed, and back), when x then has v's leading dims. */
static bool swapped_last2(const loom_graph *g, int32_t *v) {
  const loom_node *n = producer(g, under_reshape(g, *v));
  if (!n || n->op != LOOM_OP_TRANSPOSE) return false;
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  int32_t r = perm->n;
  if (r < 2 || perm->v[r - 2] != r - 1 || perm->v[r - 1] != r - 2) return false;
  for (int32_t d = 0; d < r - 2; d++)
    if (perm->v[d] != d) return false;
  int32_t x = n->in[0];
  if (n != producer(g, *v)) { /* through reshapes: x must have v's leading dims */
    x = under_reshape(g, x);
    const loom_type *tx = &g->values[x].type, *tv = &g->values[*v].type;
    bool same = tx->rank == tv->rank;
    for (int32_t d = 0; same && d < tv->rank - 2; d++) same = tx->shape[d] == tv->shape[d];
    if (!same) return false;
  }
  *v = x;
  return true;
}

static bool same_shape(const loom_type *a, const loom_type *b) {
  bool same = a->rank == b->rank;
  for (int32_t d = 0; same && d < a->rank; d++) same = a->shape[d] == b->shape[d];
  return same;
}

/* If v = x * c, c * x or x / c with c a constant and x of v's shape:
 * sets v = x and multiplies *scale by c (or 1/c). */
static void strip_scale(const loom_graph *g, int32_t *v, double *scale) {
  const loom_node *n = producer(g, *v);
  double c;
  int32_t x;
  if (!n || (n->op != LOOM_OP_MUL && n->op != LOOM_OP_DIV)) return;
  if (const_value(g, n->in[1], &c))
    x = n->in[0];
  else if (n->op == LOOM_OP_MUL && const_value(g, n->in[0], &c))
    x = n->in[1];
  else
    return;
  if (!same_shape(&g->values[x].type, &g->values[*v].type)) return;
  *scale *= n->op == LOOM_OP_MUL ? c : 1.0 / c;
  *v = x;
}

/* What a mask known at load time (broadcast against scores [..., sq, sk])
 * does: a bool mask keeps where it is true, an additive one where it is 0
 * (and must be at most -1e9 elsewhere). MASK_ALL keeps every position,
 * MASK_CAUSAL exactly j <= i + sk - sq of every row (the attention op's
 * causal mask, docs/OPS.md), MASK_OTHER anything else. */
typedef enum { MASK_OTHER, MASK_ALL, MASK_CAUSAL } mask_kind;

static mask_kind classify_mask(const loom_tensor *mask, const loom_type *scores, bool additive) {
  int32_t r = loom_tensor_rank(mask), rs = scores->rank;
  loom_dtype dt = loom_tensor_dtype(mask);
  if ((additive ? !loom_dtype_is_float(dt) : dt != LOOM_DTYPE_BOOL) || r > rs) return MASK_OTHER;
  int64_t sq = scores->shape[rs - 2], sk = scores->shape[rs - 1];
  /* the mask's own dims, aligned right against the scores' (1: broadcast) */
  int64_t mq = r >= 2 ? loom_tensor_dim(mask, r - 2) : 1, mk = r >= 1 ? loom_tensor_dim(mask, r - 1) : 1;
  for (int32_t d = 0; d < r; d++) {
    int64_t m = loom_tensor_dim(mask, d);
    if (m != 1 && m != scores->shape[rs - r + d]) return MASK_OTHER;
  }
  bool all = true, causal = mq == sq && mk == sk;
  const void *data = loom_tensor_data(mask);
  for (int64_t e = 0, n = loom_tensor_numel(mask); e < n && (all || causal); e++) {
    int64_t j = e % mk, i = e / mk % mq;
    double m = loom_load(dt, data, e);
    bool keep = additive ? m == 0.0 : m != 0.0;
    if (additive && !keep && !(m <= -1e9)) return MASK_OTHER;
    all = all && keep;
    causal = causal && keep == (j <= i + sk - sq);
  }
  return all ? MASK_ALL : causal ? MASK_CAUSAL : MASK_OTHER;
}

/* The mask kind of value v: a tensor known at load time, or a constant
 * node (one value in every position). */
static mask_kind value_mask(const onnx_cv *cv, int32_t v, const loom_type *scores, bool additive) {
  const loom_tensor *t = cv_value_const(cv, v);
  if (t) return classify_mask(t, scores, additive);
  const loom_graph *g = cv->g;
  const loom_type *tv = &g->values[v].type;
  double c;
  if (!const_value(g, v, &c) || tv->rank > scores->rank) return MASK_OTHER;
  if (additive ? !loom_dtype_is_float(tv->dtype) : tv->dtype != LOOM_DTYPE_BOOL) return MASK_OTHER;
  for (int32_t d = 0; d < tv->rank; d++)
    if (tv->shape[d] != 1 && tv->shape[d] != scores->shape[scores->rank - tv->rank + d]) return MASK_OTHER;
  return (additive ? c == 0.0 : c != 0.0) ? MASK_ALL : MASK_OTHER;
}

/* If v is transpose(x, perm) and perm ends with two dims that, swapped,
 * make a transpose k of x whose last two dims are v's swapped (K for a
 * K^T that PyTorch exports as one transpose from [B, T, H, D] to [B, H,
 * D, T]): *perm_k gets that perm and *x the transposed value. */
static bool transposed_key(const loom_graph *g, int32_t v, int32_t *x, int64_t *perm_k) {
  const loom_node *n = producer(g, v);
  if (!n || n->op != LOOM_OP_TRANSPOSE) return false;
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  int32_t r = perm->n;
  if (r < 2) return false;
  for (int32_t d = 0; d < r; d++) perm_k[d] = perm->v[d];
  perm_k[r - 2] = perm->v[r - 1], perm_k[r - 1] = perm->v[r - 2];
  *x = n->in[0];
  return true;
}

/* True if s, its constant factors stripped (into *scale), is a matmul. */
static bool scores_side(const loom_graph *g, int32_t s, double *scale) {
  double sc = 1.0;
  strip_scale(g, &s, &sc);
  const loom_node *n = producer(g, s);
  if (!n || n->op != LOOM_OP_MATMUL) return false;
  *scale = sc;
  return true;
}

/* matmul(softmax(masked, -1), v) where masked is s itself, where(mask, s,
 * fill) or s + mask (0 kept, at most -1e9 masked), the mask known at load time and
 * either causal or keeping every position (PyTorch exports Trilu / Equal
 * / Where, a float mask, or BERT's (1 - ones) * min, folded at load
 * time), a Where's fill at most -1e9 where it drops anything, s =
 * matmul(q, k^T) with constant factors on s, q or k (divided or
 * multiplied; k^T given, read transposed, or one transpose from a layout
 * whose last two dims are K's): the attention op, causal or not, with the
 * factors' product as its scale (the session runs it as flash attention,
 * skipping a causal mask's masked half). The masked probabilities are
 * exactly 0 there, as they are here unless a row's kept scores all lie
 * within 88 of the fill (exp underflows to 0 below that). A mask known
 * only at run time (a padding mask from an input, a learned bias) becomes
 * the attention's additive bias: s + b as it is, where(mask, s, fill) as
 * s + where(mask, 0, fill). -1 when p is not such a softmax. */
static int32_t masked_attention(onnx_cv *cv, int32_t p, int32_t v) {
  const loom_graph *g = G;
  const loom_type *tp = &g->values[p].type;
  const loom_node *sm = producer(g, p), *m = sm ? producer(g, sm->in[0]) : NULL;
  if (!sm || sm->op != LOOM_OP_SOFTMAX || LOOM_ATTR_I(sm, softmax, axis) != tp->rank - 1 || !m)
    return -1;
  int32_t s = -1;
  mask_kind kind = MASK_OTHER;
  double fill = 0.0, scale = 1.0;
  if (m->op == LOOM_OP_SELECT) {
    /* the fill matters only where the mask drops something */
    kind = value_mask(cv, m->in[0], tp, false);
    if (kind == MASK_ALL || (kind == MASK_CAUSAL && const_value(g, m->in[2], &fill) && fill <= -1e9))
      s = m->in[1];
  } else if (m->op == LOOM_OP_ADD) {
    for (int32_t side = 0; side < 2 && s < 0; side++)
      if ((kind = value_mask(cv, m->in[side], tp, true))) s = m->in[1 - side];
  }
  int32_t bias = -1, cond = -1; /* a mask known at run time: s + bias */
  double unused;
  if (s < 0 && m->op == LOOM_OP_ADD) {
    for (int32_t side = 0; side < 2 && s < 0; side++)
      if (scores_side(g, m->in[side], &unused) &&
          !loom_attention_check_bias(NULL, &g->values[m->in[1 - side]].type, tp->dtype, tp->rank,
                                     tp->shape))
        s = m->in[side], bias = m->in[1 - side], kind = MASK_ALL;
  } else if (s < 0 && m->op == LOOM_OP_SELECT && const_value(g, m->in[2], &fill) && fill <= -1e9 &&
             scores_side(g, m->in[1], &unused) &&
             g->values[m->in[0]].type.dtype == LOOM_DTYPE_BOOL &&
             g->values[m->in[0]].type.rank <= tp->rank) {
    s = m->in[1], cond = m->in[0], kind = MASK_ALL;
  }
  if (s < 0) { /* no mask: the scores themselves, or nothing this takes */
    s = sm->in[0];
    kind = MASK_ALL;
  }
  strip_scale(g, &s, &scale);
  const loom_node *n = producer(g, s);
  if (!n || n->op != LOOM_OP_MATMUL || LOOM_ATTR_I(n, matmul, trans_a)) return -1;
  int32_t q = n->in[0], k = n->in[1], kx = -1;
  int64_t perm_k[LOOM_MAX_RANK];
  strip_scale(g, &q, &scale);
  strip_scale(g, &k, &scale);
  if (!LOOM_ATTR_I(n, matmul, trans_b) && !swapped_last2(g, &k) && !transposed_key(g, k, &kx, perm_k))
    return -1;
  if (!(scale != 0.0 && isfinite(scale))) return -1;
  /* q [..., sq, d], k [..., sk, d], v [..., sk, dv]: the same leading
   * dims, which the scores have too (no broadcasting anywhere) */
  const loom_type *tq = &g->values[q].type, *tv = &g->values[v].type, *tkt = &g->values[k].type;
  const loom_type *ts = &g->values[s].type;
  int32_t r = tq->rank;
  loom_type tk = *tkt;
  if (kx >= 0) { /* k is K^T here: K's type is it with the last two swapped */
    if (r < 2 || tk.rank != r) return -1;
    tk.shape[r - 2] = tkt->shape[r - 1], tk.shape[r - 1] = tkt->shape[r - 2];
  }
  bool ok = r >= 2 && tk.rank == r && tv->rank == r && tp->rank == r && same_shape(ts, tp) &&
            same_shape(&g->values[sm->in[0]].type, tp) && tq->dtype == tv->dtype &&
            tk.dtype == tv->dtype && tk.shape[r - 1] == tq->shape[r - 1];
  for (int32_t d = 0; ok && d < r - 2; d++)
    ok = tk.shape[d] == tq->shape[d] && tv->shape[d] == tq->shape[d];
  if (!ok || tv->shape[r - 2] != tk.shape[r - 2]) return -1;
  if (kx >= 0) k = lb_transpose(G, kx, perm_k);
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_ATTENTION, a);
  LOOM_ATTRV_I(a, attention, causal) = kind == MASK_CAUSAL;
  LOOM_ATTRV_F(a, attention, scale) = scale;
  if (cond >= 0) /* where(mask, s, fill) = s + where(mask, 0, fill): its shape is the mask's */
    bias = lb_select(G, cond, lb_scalar(G, tq->dtype, 0.0), lb_scalar(G, tq->dtype, fill));
  LOOM_ATTRV_I(a, attention, bias) = bias >= 0;
  if (bias >= 0) return lb_op(G, LOOM_OP_ATTENTION, 4, (int32_t[]){q, k, v, bias}, a);
  return lb_op(G, LOOM_OP_ATTENTION, 3, (int32_t[]){q, k, v}, a);
}

/* If v is transpose(x, perm) whose perm, its last two swapped, keeps x's
 * last dim last: sets v to that transpose of x (v with its last two dims
 * swapped, to be read transposed). */
static bool inner_transpose(onnx_cv *cv, int32_t *v) {
  int64_t perm[LOOM_MAX_RANK];
  int32_t x, r = G->values[*v].type.rank;
  if (!transposed_key(G, *v, &x, perm) || perm[r - 1] != r - 1) return false;
  *v = lb_transpose(G, x, perm);
  return *v >= 0;
}

loom_status onnx_cv_matmul(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t a = IN(0), b = IN(1);
  const loom_type *ta = TYPE(0), *tb = TYPE(1);
  if (ta->dtype != tb->dtype) return cv_invalid(cv, "inputs of different types");
  if (ta->rank == 0 || tb->rank == 0) return cv_invalid(cv, "MatMul of a scalar");
  /* NumPy's 1-D rules: a vector is a row on the left, a column on the
   * right, and that dim leaves the result */
  if (ta->rank == 1) a = lb_reshape(G, a, 2, (int64_t[]){1, ta->shape[0]});
  if (tb->rank == 1) b = lb_reshape(G, b, 2, (int64_t[]){tb->shape[0], 1});
  int32_t att = ta->rank > 1 && tb->rank > 1 ? masked_attention(cv, a, b) : -1;
  if (att >= 0) return done1(cv, att);
  /* an operand that is a transpose of its last two dims (K^T in
   * attention) is read transposed by the GEMM instead, and so is one whose
   * transpose, but for its last two dims, keeps the innermost dim in place
   * (K^T as one transpose from [b, t, h, d]): that transpose copies rows */
  bool trans_a = swapped_last2(G, &a) || inner_transpose(cv, &a);
  bool trans_b = swapped_last2(G, &b) || inner_transpose(cv, &b);
  /* [..., M, K] times a matrix is one GEMM of all the rows (as ONNX
   * Runtime runs it): its epilogue takes blocks of any of them */
  loom_type tan = G->values[a].type; /* a copy: adding nodes moves the values */
  int32_t y;
  if (tan.rank > 2 && G->values[b].type.rank == 2 && !trans_a) {
    int64_t rows = loom_type_numel(&tan) / tan.shape[tan.rank - 1];
    y = lb_matmul(G, lb_reshape(G, a, 2, (int64_t[]){rows, tan.shape[tan.rank - 1]}), b, false, trans_b);
    if (y >= 0) {
      tan.shape[tan.rank - 1] = G->values[y].type.shape[1];
      y = lb_reshape(G, y, tan.rank, tan.shape);
    }
  } else {
    y = lb_matmul(G, a, b, trans_a, trans_b);
  }
  if ((ta->rank == 1 || tb->rank == 1) && y >= 0) {
    loom_type t = G->values[y].type;
    int64_t shape[LOOM_MAX_RANK];
    int32_t r = 0;
    for (int32_t d = 0; d < t.rank; d++) {
      if (ta->rank == 1 && d == t.rank - 2) continue;
      if (tb->rank == 1 && d == t.rank - 1) continue;
      shape[r++] = t.shape[d];
    }
    y = lb_reshape(G, y, r, shape);
  }
  return done1(cv, y);
}

loom_status onnx_cv_gemm(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  if (TYPE(0)->rank != 2 || TYPE(1)->rank != 2) return cv_invalid(cv, "A and B must be matrices");
  double alpha = cv_attr_f(cv, "alpha", 1.0), beta = cv_attr_f(cv, "beta", 1.0);
  int32_t y = lb_matmul(G, IN(0), IN(1), cv_attr_i(cv, "transA", 0) != 0, cv_attr_i(cv, "transB", 0) != 0);
  if (alpha != 1.0) y = lb_mul(G, y, scalar(cv, y, alpha));
  if (cv_has(cv, 2) && beta != 0.0) {
    int32_t c = IN(2);
    if (beta != 1.0) c = lb_mul(G, c, scalar(cv, c, beta));
    y = lb_add(G, y, c);
  }
  return done1(cv, y);
}

/* Softmax and LogSoftmax: before opset 13 the input is seen as a matrix
 * [prod(dims < axis), prod(dims >= axis)] (default axis 1). */
static loom_status softmax(onnx_cv *cv, loom_op op) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  int32_t x = IN(0), axis;
  int64_t def = cv->opset < 13 ? 1 : -1;
  if (!onnx_axis(cv_attr_i(cv, "axis", def), t->rank ? t->rank : 1, &axis)) return cv_invalid(cv, "axis out of range");
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(op, a);
  if (cv->opset < 13) {
    int64_t rows = 1, cols = 1;
    for (int32_t d = 0; d < t->rank; d++) *(d < axis ? &rows : &cols) *= t->shape[d];
    int32_t x2 = lb_reshape(G, x, 2, (int64_t[]){rows, cols});
    LOOM_ATTRV_I(a, softmax, axis) = 1;
    int32_t y = lb_op(G, op, 1, &x2, a);
    return done1(cv, lb_reshape(G, y, t->rank, t->shape));
  }
  LOOM_ATTRV_I(a, softmax, axis) = axis;
  return done1(cv, lb_op(G, op, 1, &x, a));
}
loom_status onnx_cv_softmax(onnx_cv *cv) { return softmax(cv, LOOM_OP_SOFTMAX); }
loom_status onnx_cv_log_softmax(onnx_cv *cv) { return softmax(cv, LOOM_OP_LOG_SOFTMAX); }

loom_status onnx_cv_layer_norm(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  int32_t axis;
  if (!onnx_axis(cv_attr_i(cv, "axis", -1), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  int32_t in[3] = {IN(0), -1, -1}, n = 1;
  for (int32_t i = 1; i < 3; i++) {
    if (!cv_has(cv, i)) break;
    int32_t v = IN(i);
    if (TYPE(i)->dtype != t->dtype) return cv_invalid(cv, "input %d of another type", i);
    bool exact = TYPE(i)->rank == t->rank - axis;
    for (int32_t d = 0; exact && d < TYPE(i)->rank; d++) exact = TYPE(i)->shape[d] == t->shape[axis + d];
    if (!exact) v = lb_broadcast_to(G, v, t->rank - axis, t->shape + axis);
    in[n++] = v;
  }
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_LAYER_NORM, a);
  LOOM_ATTRV_I(a, layer_norm, axis) = axis;
  double eps = cv_attr_f(cv, "epsilon", 1e-5);
  LOOM_ATTRV_F(a, layer_norm, eps) = eps;
  cv_out(cv, 0, lb_op(G, LOOM_OP_LAYER_NORM, n, in, a));
  /* Mean and InvStdDev (kept dims), when asked for */
  bool more = (cv->n_out > 1 && cv->node->out[1][0]) || (cv->n_out > 2 && cv->node->out[2][0]);
  if (more) {
    int64_t axes[LOOM_MAX_RANK];
    int32_t na = 0;
    for (int32_t d = axis; d < t->rank; d++) axes[na++] = d;
    loom_attr_value r[LOOM_MAX_ATTRS];
    attrs_of(LOOM_OP_REDUCE_MEAN, r);
    set_ints(&LOOM_ATTRV_INTS(r, reduce_mean, axes), na, axes);
    LOOM_ATTRV_I(r, reduce_mean, keepdims) = 1;
    int32_t x = in[0];
    int32_t mean = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &x, r);
    int32_t xc = lb_sub(G, x, mean), sq = lb_mul(G, xc, xc);
    int32_t var = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &sq, r);
    cv_out(cv, 1, mean);
    cv_out(cv, 2, lb_unary(G, LOOM_OP_RSQRT, lb_add(G, var, scalar(cv, x, eps))));
  }
  return LOOM_STATUS_OK;
}

/* BatchNormalization's statistics as one scale and one shift per channel,
 * s = scale / sqrt(var + eps) and t = B - mean * s, computed at load time
 * (as ONNX Runtime does) when all four are constants of the model and not
 * graph inputs a caller could feed: *s and *t, shaped like the
 * statistics' reshape. False when they are not. */
static bool fold_batch_norm(onnx_cv *cv, double eps, int32_t rank, const int64_t *shape,
                            int32_t *s, int32_t *t) {
  const loom_tensor *p[4];
  int64_t c = shape[0];
  for (int32_t i = 0; i < 4; i++) {
    const onnx_graph *gr = cv->m->graph;
    for (int32_t k = 0; gr && k < gr->n_inputs; k++)
      if (strcmp(gr->inputs[k].name, cv->node->in[i + 1]) == 0) return false;
    p[i] = cv_const(cv, i + 1);
    if (!p[i] || loom_tensor_numel(p[i]) != c) return false;
  }
  double *v = malloc(sizeof(double) * (size_t)(2 * c + 1));
  if (!v) return false;
  loom_dtype dt = TYPE(0)->dtype;
  for (int64_t k = 0; k < c; k++) {
    double sc = loom_load(loom_tensor_dtype(p[0]), loom_tensor_data(p[0]), k);
    double b = loom_load(loom_tensor_dtype(p[1]), loom_tensor_data(p[1]), k);
    double mean = loom_load(loom_tensor_dtype(p[2]), loom_tensor_data(p[2]), k);
    double var = loom_load(loom_tensor_dtype(p[3]), loom_tensor_data(p[3]), k);
    double f = sc / sqrt(var + eps);
    /* exactly representable in the input's dtype (cv_const_values) */
    loom_store(dt, &v[2 * c], 0, f);
    v[k] = loom_load(dt, &v[2 * c], 0);
    loom_store(dt, &v[2 * c], 0, b - mean * v[k]);
    v[c + k] = loom_load(dt, &v[2 * c], 0);
  }
  *s = cv_const_values(cv, dt, rank, shape, v);
  *t = cv_const_values(cv, dt, rank, shape, v + c);
  free(v);
  return *s >= 0 && *t >= 0;
}

/* BatchNormalization at inference: (x - mean) / sqrt(var + eps) * scale + B,
 * per channel (dim 1); x * s + t with constant statistics. */
loom_status onnx_cv_batch_norm(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  if (cv_attr_i(cv, "training_mode", 0) != 0) return cv_unsupported(cv, "training_mode");
  if (cv_attr_i(cv, "spatial", 1) != 1) return cv_unsupported(cv, "spatial=0");
  if (cv_attr_has(cv, "consumed_inputs")) return cv_unsupported(cv, "consumed_inputs");
  for (int32_t o = 1; o < cv->n_out; o++)
    if (cv->node->out[o][0]) return cv_unsupported(cv, "the running statistics outputs");
  const loom_type *t = TYPE(0);
  if (t->rank < 2) return cv_invalid(cv, "input of rank %d", t->rank);
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < t->rank - 1; d++) shape[d] = d == 0 ? t->shape[1] : 1;
  double eps = cv_attr_f(cv, "epsilon", 1e-5);
  int32_t fs, ft;
  if (fold_batch_norm(cv, eps, t->rank - 1, shape, &fs, &ft))
    return done1(cv, lb_add(G, lb_mul(G, IN(0), fs), ft));
  int32_t p[4];
  for (int32_t i = 0; i < 4; i++) {
    if (TYPE(i + 1)->dtype != t->dtype) return cv_unsupported(cv, "parameters of another type than X");
    p[i] = lb_reshape(G, IN(i + 1), t->rank - 1, shape);
  }
  int32_t x = IN(0);
  int32_t inv = lb_unary(G, LOOM_OP_RSQRT, lb_add(G, p[3], scalar(cv, x, eps)));
  int32_t y = lb_mul(G, lb_sub(G, x, p[2]), lb_mul(G, inv, p[0]));
  return done1(cv, lb_add(G, y, p[1]));
}

loom_status onnx_cv_instance_norm(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  if (t->rank < 3) return cv_invalid(cv, "input of rank %d", t->rank);
  int64_t axes[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
  int32_t n = 0;
  for (int32_t d = 2; d < t->rank; d++) axes[n++] = d;
  for (int32_t d = 0; d < t->rank - 1; d++) shape[d] = d == 0 ? t->shape[1] : 1;
  int32_t x = IN(0);
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_REDUCE_MEAN, a);
  set_ints(&LOOM_ATTRV_INTS(a, reduce_mean, axes), n, axes);
  LOOM_ATTRV_I(a, reduce_mean, keepdims) = 1;
  int32_t m = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &x, a);
  int32_t xc = lb_sub(G, x, m);
  int32_t sq = lb_mul(G, xc, xc);
  int32_t var = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &sq, a);
  int32_t inv = lb_unary(G, LOOM_OP_RSQRT, lb_add(G, var, scalar(cv, x, cv_attr_f(cv, "epsilon", 1e-5))));
  int32_t sc = lb_reshape(G, IN(1), t->rank - 1, shape), b = lb_reshape(G, IN(2), t->rank - 1, shape);
  return done1(cv, lb_add(G, lb_mul(G, lb_mul(G, xc, inv), sc), b));
}


/* GroupNormalization: x [N, C, ...] seen as [N, G, rest], normalized over
 * rest; scale and bias per group (opset 18-20) or per channel (21+). */
loom_status onnx_cv_group_norm(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  int64_t g = cv_attr_i(cv, "num_groups", 0);
  if (t->rank < 2 || g <= 0 || t->shape[1] % g) return cv_invalid(cv, "num_groups %lld for %lld channels", (long long)g, (long long)(t->rank > 1 ? t->shape[1] : 0));
  int64_t n = t->shape[0], c = t->shape[1], rest = loom_type_numel(t) / LOOM_MAX(1, n * g);
  bool per_channel = cv->opset >= 21;
  int64_t want = per_channel ? c : g;
  if (loom_type_numel(TYPE(1)) != want || loom_type_numel(TYPE(2)) != want) return cv_invalid(cv, "scale and bias need %lld values", (long long)want);
  int32_t x = lb_reshape(G, IN(0), 3, (int64_t[]){n, g, rest});
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_REDUCE_MEAN, a);
  int64_t ax = 2;
  set_ints(&LOOM_ATTRV_INTS(a, reduce_mean, axes), 1, &ax);
  LOOM_ATTRV_I(a, reduce_mean, keepdims) = 1;
  int32_t m = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &x, a);
  int32_t xc = lb_sub(G, x, m), sq = lb_mul(G, xc, xc);
  int32_t var = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &sq, a);
  int32_t y = lb_mul(G, xc, lb_unary(G, LOOM_OP_RSQRT, lb_add(G, var, scalar(cv, x, cv_attr_f(cv, "epsilon", 1e-5)))));
  if (!per_channel) {
    y = lb_add(G, lb_mul(G, y, lb_reshape(G, IN(1), 2, (int64_t[]){g, 1})), lb_reshape(G, IN(2), 2, (int64_t[]){g, 1}));
    return done1(cv, lb_reshape(G, y, t->rank, t->shape));
  }
  y = lb_reshape(G, y, t->rank, t->shape);
  int64_t shape[LOOM_MAX_RANK];
  shape[0] = c;
  for (int32_t d = 2; d < t->rank; d++) shape[d - 1] = 1;
  return done1(cv, lb_add(G, lb_mul(G, y, lb_reshape(G, IN(1), t->rank - 1, shape)), lb_reshape(G, IN(2), t->rank - 1, shape)));
}


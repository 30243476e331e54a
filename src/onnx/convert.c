/*
 * The converters: one table row per ONNX op type and opset range, each a
 * function that adds Loom ops (from the op table, or a decomposition into
 * them) for one node. What a converter does not handle (an attribute
 * value, a dtype, an input that must be known at load time) it reports as
 * unsupported, naming the node: never a guess.
 */
#include "onnx/convert_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

/* A host tensor of dtype from doubles, as output o. */
static loom_status out_host(onnx_cv *cv, int32_t o, loom_dtype dt, int32_t rank, const int64_t *shape,
                            const double *v) {
  loom_tensor *t = NULL;
  LOOM_TRY(loom_tensor_new(cv->ctx, dt, rank, shape, &t));
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) loom_store(dt, loom_tensor_data(t), i, v[i]);
  cv_out_const(cv, o, t);
  return LOOM_STATUS_OK;
}

/* ---- element-wise ------------------------------------------------------------- */

static loom_status unary(onnx_cv *cv, loom_op op) { return done1(cv, lb_unary(G, op, IN(0))); }
static loom_status unary_float(onnx_cv *cv, loom_op op) {
  LOOM_TRY(need_float(cv, 0));
  return unary(cv, op);
}
#define UNARY(NAME, OP) static loom_status cv_##NAME(onnx_cv *cv) { return unary(cv, OP); }
#define UNARY_F(NAME, OP) static loom_status cv_##NAME(onnx_cv *cv) { return unary_float(cv, OP); }
UNARY(neg, LOOM_OP_NEG)
UNARY(abs, LOOM_OP_ABS)
UNARY(sign, LOOM_OP_SIGN)
UNARY(relu, LOOM_OP_RELU)
UNARY_F(exp, LOOM_OP_EXP)
UNARY_F(log, LOOM_OP_LOG)
UNARY_F(sqrt, LOOM_OP_SQRT)
UNARY_F(tanh, LOOM_OP_TANH)
UNARY_F(sigmoid, LOOM_OP_SIGMOID)
UNARY_F(erf, LOOM_OP_ERF)
UNARY_F(sin, LOOM_OP_SIN)
UNARY_F(cos, LOOM_OP_COS)
UNARY_F(reciprocal, LOOM_OP_RECIPROCAL)

static loom_status binary(onnx_cv *cv, loom_op op) {
  /* before opset 7: B broadcasts only with broadcast=1, aligned at axis;
   * aligned at the end that is NumPy's rule */
  if (cv_attr_has(cv, "consumed_inputs")) return cv_unsupported(cv, "consumed_inputs");
  if (cv_attr_i(cv, "broadcast", 0) == 0 && cv->opset < 7 && !loom_type_equal(TYPE(0), TYPE(1)))
    return cv_invalid(cv, "shapes differ without broadcast=1");
  if (cv_attr_has(cv, "axis") && cv_attr_i(cv, "axis", 0) != TYPE(0)->rank - TYPE(1)->rank &&
      cv_attr_i(cv, "axis", 0) != -TYPE(1)->rank)
    return cv_unsupported(cv, "legacy broadcasting along axis %lld", (long long)cv_attr_i(cv, "axis", 0));
  if (TYPE(0)->dtype != TYPE(1)->dtype)
    return cv_invalid(cv, "inputs of different types (%s, %s)", loom_dtype_name(TYPE(0)->dtype),
                      loom_dtype_name(TYPE(1)->dtype));
  int32_t y = lb_binary(G, op, IN(0), IN(1)), gelu = op == LOOM_OP_MUL ? onnx_gelu_of(G, y) : -1;
  return done1(cv, gelu >= 0 ? gelu : y);
}
#define BINARY(NAME, OP) static loom_status cv_##NAME(onnx_cv *cv) { return binary(cv, OP); }
BINARY(add, LOOM_OP_ADD)
BINARY(sub, LOOM_OP_SUB)
BINARY(mul, LOOM_OP_MUL)
BINARY(div, LOOM_OP_DIV)
BINARY(equal, LOOM_OP_EQ)
BINARY(less, LOOM_OP_LT)
BINARY(less_eq, LOOM_OP_LE)
BINARY(greater, LOOM_OP_GT)
BINARY(greater_eq, LOOM_OP_GE)

static loom_status bool_binary(onnx_cv *cv, loom_op op) {
  if (TYPE(0)->dtype != LOOM_DTYPE_BOOL || TYPE(1)->dtype != LOOM_DTYPE_BOOL)
    return cv_invalid(cv, "inputs must be bool");
  return done1(cv, lb_binary(G, op, IN(0), IN(1)));
}
static loom_status cv_and(onnx_cv *cv) { return bool_binary(cv, LOOM_OP_MINIMUM); }
static loom_status cv_or(onnx_cv *cv) { return bool_binary(cv, LOOM_OP_MAXIMUM); }
static loom_status cv_xor(onnx_cv *cv) { return bool_binary(cv, LOOM_OP_NE); }
static loom_status cv_not(onnx_cv *cv) {
  int32_t x = IN(0);
  return done1(cv, lb_binary(G, LOOM_OP_EQ, x, scalar(cv, x, 0)));
}

static loom_status cv_pow(onnx_cv *cv) {
  double e;
  /* a small whole or half exponent known at load time (GELU's x^3, x^2 in
   * norms): products or a square root, cheaper than pow and as exact */
  if (is_float(TYPE(0)) && cv_const(cv, 1) && cv_scalar(cv, 1, &e) && TYPE(1)->rank <= TYPE(0)->rank &&
      (e == 0.5 || e == 1 || e == 2 || e == 3)) {
    int32_t x = IN(0);
    if (e == 0.5) return done1(cv, lb_unary(G, LOOM_OP_SQRT, x));
    int32_t y = e == 1 ? x : lb_mul(G, x, x);
    if (e == 3) y = lb_mul(G, y, x);
    return done1(cv, y); /* one element of no higher rank: x's shape stays */
  }
  int32_t a = IN(0), b = IN(1);
  if (TYPE(0)->dtype != TYPE(1)->dtype) {
    if (!is_float(TYPE(0)) && is_float(TYPE(1)))
      return cv_unsupported(cv, "an integer base with a float exponent");
    b = lb_cast(G, b, TYPE(0)->dtype);
  }
  return done1(cv, lb_binary(G, LOOM_OP_POW, a, b));
}

/* Min, Max, Sum, Mean: any number of inputs, broadcast together. */
static loom_status variadic(onnx_cv *cv, loom_op op, bool mean) {
  int32_t acc = -1, n = 0;
  for (int32_t i = 0; i < cv->n_in; i++) {
    if (!cv_has(cv, i)) continue;
    if (acc >= 0 && TYPE(i)->dtype != G->values[acc].type.dtype) return cv_invalid(cv, "inputs of different types");
    acc = acc < 0 ? IN(i) : lb_binary(G, op, acc, IN(i));
    n++;
  }
  if (acc < 0) return cv_invalid(cv, "no inputs");
  if (mean) acc = lb_div(G, acc, scalar(cv, acc, (double)n));
  return done1(cv, acc);
}
static loom_status cv_min(onnx_cv *cv) { return variadic(cv, LOOM_OP_MINIMUM, false); }
static loom_status cv_max(onnx_cv *cv) { return variadic(cv, LOOM_OP_MAXIMUM, false); }
static loom_status cv_sum(onnx_cv *cv) { return variadic(cv, LOOM_OP_ADD, false); }
static loom_status cv_mean(onnx_cv *cv) { return variadic(cv, LOOM_OP_ADD, true); }

static loom_status cv_where(onnx_cv *cv) {
  if (TYPE(0)->dtype != LOOM_DTYPE_BOOL) return cv_invalid(cv, "condition must be bool");
  if (TYPE(1)->dtype != TYPE(2)->dtype) return cv_invalid(cv, "inputs of different types");
  return done1(cv, lb_select(G, IN(0), IN(1), IN(2)));
}

static bool dtype_attr(int64_t onnx_dt, loom_dtype *out) { return onnx_dtype_to_loom((int32_t)onnx_dt, out); }

static loom_status cv_cast(onnx_cv *cv) {
  loom_dtype to;
  int64_t want = cv_attr_i(cv, "to", 0);
  if (!dtype_attr(want, &to)) return cv_unsupported(cv, "cast to %s", onnx_dtype_name((int32_t)want));
  if (cv_attr_i(cv, "saturate", 1) != 1 && !loom_dtype_is_float(to)) return cv_unsupported(cv, "saturate=0");
  return done1(cv, lb_cast(G, IN(0), to));
}

static loom_status cv_cast_like(onnx_cv *cv) {
  return done1(cv, lb_cast(G, IN(0), TYPE(1)->dtype));
}

/* ---- activations (decomposed) ------------------------------------------------- */

static loom_status cv_leaky_relu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  double alpha = cv_attr_f(cv, "alpha", 0.01);
  return done1(cv, lb_select(G, lb_binary(G, LOOM_OP_LT, x, scalar(cv, x, 0)), lb_mul(G, x, scalar(cv, x, alpha)), x));
}

static loom_status cv_prelu(onnx_cv *cv) {
  int32_t x = IN(0), s = IN(1);
  const loom_type *t = TYPE(0), *ts = TYPE(1);
  /* before opset 7 a slope of one value per channel applies along dim 1 */
  if (cv->opset < 7 && ts->rank == 1 && t->rank >= 2 && ts->shape[0] == t->shape[1] && ts->shape[0] != 1) {
    int64_t shape[LOOM_MAX_RANK];
    shape[0] = ts->shape[0];
    for (int32_t d = 1; d < t->rank - 1; d++) shape[d] = 1;
    s = lb_reshape(G, s, t->rank - 1, shape);
  }
  return done1(cv, lb_select(G, lb_binary(G, LOOM_OP_LT, x, scalar(cv, x, 0)), lb_mul(G, x, s), x));
}

static loom_status cv_elu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  double alpha = cv_attr_f(cv, "alpha", 1.0);
  int32_t neg = lb_mul(G, lb_sub(G, lb_unary(G, LOOM_OP_EXP, x), scalar(cv, x, 1)), scalar(cv, x, alpha));
  return done1(cv, lb_select(G, lb_binary(G, LOOM_OP_LT, x, scalar(cv, x, 0)), neg, x));
}

static loom_status cv_selu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  double alpha = cv_attr_f(cv, "alpha", 1.67326319217681884765625);
  double gamma = cv_attr_f(cv, "gamma", 1.05070102214813232421875);
  int32_t neg = lb_sub(G, lb_mul(G, lb_unary(G, LOOM_OP_EXP, x), scalar(cv, x, alpha)), scalar(cv, x, alpha));
  int32_t y = lb_select(G, lb_binary(G, LOOM_OP_LE, x, scalar(cv, x, 0)), neg, x);
  return done1(cv, lb_mul(G, y, scalar(cv, x, gamma)));
}

static loom_status cv_celu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  double alpha = cv_attr_f(cv, "alpha", 1.0);
  int32_t e = lb_mul(G, lb_sub(G, lb_unary(G, LOOM_OP_EXP, lb_div(G, x, scalar(cv, x, alpha))), scalar(cv, x, 1)),
                     scalar(cv, x, alpha));
  return done1(cv, lb_add(G, lb_binary(G, LOOM_OP_MAXIMUM, x, scalar(cv, x, 0)),
                          lb_binary(G, LOOM_OP_MINIMUM, e, scalar(cv, x, 0))));
}

static int32_t hard_sigmoid(onnx_cv *cv, int32_t x, double alpha, double beta) {
  int32_t y = lb_add(G, lb_mul(G, x, scalar(cv, x, alpha)), scalar(cv, x, beta));
  return lb_binary(G, LOOM_OP_MAXIMUM, lb_binary(G, LOOM_OP_MINIMUM, y, scalar(cv, x, 1)), scalar(cv, x, 0));
}

static loom_status cv_hard_sigmoid(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  return done1(cv, hard_sigmoid(cv, IN(0), cv_attr_f(cv, "alpha", 0.2), cv_attr_f(cv, "beta", 0.5)));
}

static loom_status cv_hard_swish(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  return done1(cv, lb_mul(G, x, hard_sigmoid(cv, x, 1.0 / 6.0, 0.5)));
}

static int32_t softplus(onnx_cv *cv, int32_t x) {
  return lb_unary(G, LOOM_OP_LOG, lb_add(G, lb_unary(G, LOOM_OP_EXP, x), scalar(cv, x, 1)));
}
static loom_status cv_softplus(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  return done1(cv, softplus(cv, IN(0)));
}
static loom_status cv_mish(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  return done1(cv, lb_mul(G, x, lb_unary(G, LOOM_OP_TANH, softplus(cv, x))));
}
static loom_status cv_softsign(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  return done1(cv, lb_div(G, x, lb_add(G, lb_unary(G, LOOM_OP_ABS, x), scalar(cv, x, 1))));
}
static loom_status cv_thresholded_relu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  double alpha = cv_attr_f(cv, "alpha", 1.0);
  return done1(cv, lb_select(G, lb_binary(G, LOOM_OP_GT, x, scalar(cv, x, alpha)), x, scalar(cv, x, 0)));
}
static loom_status cv_shrink(onnx_cv *cv) {
  int32_t x = IN(0);
  double lambd = cv_attr_f(cv, "lambd", 0.5), bias = cv_attr_f(cv, "bias", 0.0);
  if (!is_float(TYPE(0)) && (lambd != floor(lambd) || bias != floor(bias)))
    return cv_unsupported(cv, "fractional lambd or bias on integers");
  int32_t lo = lb_binary(G, LOOM_OP_LT, x, scalar(cv, x, -lambd));
  int32_t hi = lb_binary(G, LOOM_OP_GT, x, scalar(cv, x, lambd));
  int32_t y = lb_select(G, hi, lb_sub(G, x, scalar(cv, x, bias)), scalar(cv, x, 0));
  return done1(cv, lb_select(G, lo, lb_add(G, x, scalar(cv, x, bias)), y));
}
static loom_status cv_isnan(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  return done1(cv, lb_binary(G, LOOM_OP_NE, x, x));
}
static loom_status cv_isinf(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  bool pos = cv_attr_i(cv, "detect_positive", 1) != 0, neg = cv_attr_i(cv, "detect_negative", 1) != 0;
  int32_t p = lb_binary(G, LOOM_OP_EQ, x, scalar(cv, x, INFINITY));
  int32_t n = lb_binary(G, LOOM_OP_EQ, x, scalar(cv, x, -INFINITY));
  if (pos && neg) return done1(cv, lb_binary(G, LOOM_OP_MAXIMUM, p, n));
  if (pos) return done1(cv, p);
  if (neg) return done1(cv, n);
  return done1(cv, lb_binary(G, LOOM_OP_LT, x, x)); /* all false */
}

static loom_status cv_gelu(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const char *ap = cv_attr_s(cv, "approximate", "none");
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_GELU, a);
  if (strcmp(ap, "tanh") == 0) LOOM_ATTRV_I(a, gelu, approximate) = 1;
  else if (strcmp(ap, "none") != 0) return cv_unsupported(cv, "approximate='%s'", ap);
  int32_t x = IN(0);
  return done1(cv, lb_op(G, LOOM_OP_GELU, 1, &x, a));
}

static loom_status cv_clip(onnx_cv *cv) {
  int32_t x = IN(0), y = x;
  if (cv->opset < 11) {
    if (cv_attr_has(cv, "min")) y = lb_binary(G, LOOM_OP_MAXIMUM, y, scalar(cv, x, cv_attr_f(cv, "min", 0)));
    if (cv_attr_has(cv, "max")) y = lb_binary(G, LOOM_OP_MINIMUM, y, scalar(cv, x, cv_attr_f(cv, "max", 0)));
  } else {
    if (cv_has(cv, 1)) y = lb_binary(G, LOOM_OP_MAXIMUM, y, IN(1));
    if (cv_has(cv, 2)) y = lb_binary(G, LOOM_OP_MINIMUM, y, IN(2));
  }
  return done1(cv, y);
}

static loom_status cv_identity(onnx_cv *cv) {
  return done1(cv, IN(0));
}

/* Dropout at inference: the identity; its mask (if asked for) all true. */
static loom_status cv_dropout(onnx_cv *cv) {
  double ratio = 0.5, training = 0;
  if (cv->opset >= 12) {
    if (cv_has(cv, 2) && !cv_scalar(cv, 2, &training))
      return cv_unsupported(cv, "training_mode not known at load time");
    if (cv_has(cv, 1) && !cv_scalar(cv, 1, &ratio)) return cv_unsupported(cv, "ratio not known at load time");
  } else {
    ratio = cv_attr_f(cv, "ratio", 0.5);
    if (cv->opset < 7 && cv_attr_i(cv, "is_test", 0) == 0) training = 1;
  }
  if (training != 0 && ratio != 0) return cv_unsupported(cv, "dropout in training mode (random)");
  int32_t x = IN(0);
  cv_out(cv, 0, x);
  if (cv->n_out > 1 && cv->node->out[1][0]) {
    const loom_type *t = TYPE(0);
    cv_out(cv, 1, lb_const(G, LOOM_DTYPE_BOOL, t->rank, t->shape, 1));
  }
  return LOOM_STATUS_OK;
}

/* ---- reductions -------------------------------------------------------------- */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP } red_kind;

static loom_status reduce(onnx_cv *cv, red_kind k) {
  const loom_type *t = TYPE(0);
  int64_t axes[LOOM_MAX_RANK];
  int32_t n = -1;
  bool axes_input = (k == R_SUM && cv->opset >= 13) || cv->opset >= 18;
  if (axes_input) {
    if (cv_has(cv, 1) && (n = cv_ints(cv, 1, axes, LOOM_MAX_RANK)) < 0) return cv->st;
  } else {
    n = cv_attr_ints(cv, "axes", axes, LOOM_MAX_RANK);
    if (cv->st) return cv->st;
  }
  bool keep = cv_attr_i(cv, "keepdims", 1) != 0;
  if (n <= 0 && cv_attr_i(cv, "noop_with_empty_axes", 0) != 0) return done1(cv, IN(0));
  if (n < 0) n = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t a;
    if (!onnx_axis(axes[i], t->rank, &a)) return cv_invalid(cv, "axis %lld out of range", (long long)axes[i]);
    axes[i] = a;
  }
  if (n == 0) /* every axis */
    for (int32_t d = 0; d < t->rank; d++) axes[n++] = d;
  if (k != R_SUM && k != R_MAX && k != R_MIN) LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0), y;
  loom_attr_value a[LOOM_MAX_ATTRS];
  switch (k) {
  case R_SUM: y = lb_reduce(G, LOOM_OP_REDUCE_SUM, x, n, axes, keep); break;
  case R_MAX: y = lb_reduce(G, LOOM_OP_REDUCE_MAX, x, n, axes, keep); break;
  case R_MIN: y = lb_reduce(G, LOOM_OP_REDUCE_MIN, x, n, axes, keep); break;
  case R_MEAN:
    attrs_of(LOOM_OP_REDUCE_MEAN, a);
    set_ints(&LOOM_ATTRV_INTS(a, reduce_mean, axes), n, axes);
    LOOM_ATTRV_I(a, reduce_mean, keepdims) = keep;
    y = lb_op(G, LOOM_OP_REDUCE_MEAN, 1, &x, a);
    break;
  case R_L1: y = lb_reduce(G, LOOM_OP_REDUCE_SUM, lb_unary(G, LOOM_OP_ABS, x), n, axes, keep); break;
  case R_L2: y = lb_unary(G, LOOM_OP_SQRT, lb_reduce(G, LOOM_OP_REDUCE_SUM, lb_mul(G, x, x), n, axes, keep)); break;
  case R_SUMSQ: y = lb_reduce(G, LOOM_OP_REDUCE_SUM, lb_mul(G, x, x), n, axes, keep); break;
  case R_LOGSUM: y = lb_unary(G, LOOM_OP_LOG, lb_reduce(G, LOOM_OP_REDUCE_SUM, x, n, axes, keep)); break;
  case R_LOGSUMEXP: {
    int32_t m = lb_reduce(G, LOOM_OP_REDUCE_MAX, x, n, axes, true);
    /* an all -inf row: subtract 0 instead, giving log(0) = -inf */
    m = lb_select(G, lb_binary(G, LOOM_OP_EQ, m, scalar(cv, x, -INFINITY)), scalar(cv, x, 0), m);
    int32_t s = lb_reduce(G, LOOM_OP_REDUCE_SUM, lb_unary(G, LOOM_OP_EXP, lb_sub(G, x, m)), n, axes, true);
    y = lb_add(G, lb_unary(G, LOOM_OP_LOG, s), m);
    if (!keep && y >= 0) {
      int64_t shape[LOOM_MAX_RANK];
      int32_t r = 0;
      for (int32_t d = 0; d < t->rank; d++) {
        bool red = false;
        for (int32_t i = 0; i < n; i++) red |= axes[i] == d;
        if (!red) shape[r++] = t->shape[d];
      }
      y = lb_reshape(G, y, r, shape);
    }
    break;
  }
  default: y = -1;
  }
  return done1(cv, y);
}
static loom_status cv_reduce_sum(onnx_cv *cv) { return reduce(cv, R_SUM); }
static loom_status cv_reduce_mean(onnx_cv *cv) { return reduce(cv, R_MEAN); }
static loom_status cv_reduce_max(onnx_cv *cv) { return reduce(cv, R_MAX); }
static loom_status cv_reduce_min(onnx_cv *cv) { return reduce(cv, R_MIN); }
static loom_status cv_reduce_l1(onnx_cv *cv) { return reduce(cv, R_L1); }
static loom_status cv_reduce_l2(onnx_cv *cv) { return reduce(cv, R_L2); }
static loom_status cv_reduce_sumsq(onnx_cv *cv) { return reduce(cv, R_SUMSQ); }
static loom_status cv_reduce_logsum(onnx_cv *cv) { return reduce(cv, R_LOGSUM); }
static loom_status cv_reduce_logsumexp(onnx_cv *cv) { return reduce(cv, R_LOGSUMEXP); }

/* ArgMax/ArgMin: the first (or last) index where the extreme is reached. */
static loom_status arg_extreme(onnx_cv *cv, bool max) {
  const loom_type *t = TYPE(0);
  int32_t axis;
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  bool keep = cv_attr_i(cv, "keepdims", 1) != 0, last = cv_attr_i(cv, "select_last_index", 0) != 0;
  int32_t x = IN(0);
  int64_t ax = axis;
  int32_t m = lb_reduce(G, max ? LOOM_OP_REDUCE_MAX : LOOM_OP_REDUCE_MIN, x, 1, &ax, true);
  int32_t hit = lb_binary(G, LOOM_OP_EQ, x, m);
  int32_t idx = lb_iota(G, LOOM_DTYPE_I64, t->rank, t->shape, axis);
  int32_t other = lb_scalar(G, LOOM_DTYPE_I64, last ? -1.0 : (double)t->shape[axis]);
  int32_t cand = lb_select(G, hit, idx, other);
  return done1(cv, lb_reduce(G, last ? LOOM_OP_REDUCE_MAX : LOOM_OP_REDUCE_MIN, cand, 1, &ax, keep));
}
static loom_status cv_argmax(onnx_cv *cv) { return arg_extreme(cv, true); }
static loom_status cv_argmin(onnx_cv *cv) { return arg_extreme(cv, false); }

/* ---- shapes and sources ------------------------------------------------------ */

static loom_status cv_shape(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t start = cv_attr_i(cv, "start", 0), end = cv_attr_i(cv, "end", t->rank);
  if (start < 0) start += t->rank;
  if (end < 0) end += t->rank;
  start = clamp64(start, 0, t->rank);
  end = clamp64(end, start, t->rank);
  double v[LOOM_MAX_RANK];
  for (int64_t d = start; d < end; d++) v[d - start] = (double)t->shape[d];
  int64_t n = end - start;
  return out_host(cv, 0, LOOM_DTYPE_I64, 1, &n, v);
}

static loom_status cv_size(onnx_cv *cv) {
  double v = (double)loom_type_numel(TYPE(0));
  return out_host(cv, 0, LOOM_DTYPE_I64, 0, NULL, &v);
}

static loom_status cv_constant(onnx_cv *cv) {
  loom_ctx *ctx = cv->ctx;
  const onnx_node *n = cv->node;
  if (n->n_attrs != 1) return cv_invalid(cv, "a Constant needs exactly one value attribute");
  const onnx_attr *a = &n->attrs[0];
  loom_tensor *t = NULL;
  if (strcmp(a->name, "value") == 0) {
    if (!a->t) return cv_invalid(cv, "value is not a tensor");
    loom_status st = onnx_tensor_to_loom(ctx, cv->m, a->t, &t);
    if (st) {
      loom_error_prefix(ctx, "ONNX node '%s' (Constant)", n->name);
      return st;
    }
    cv_out_const(cv, 0, t);
    return LOOM_STATUS_OK;
  }
  if (strcmp(a->name, "value_float") == 0) {
    double v = a->f;
    return out_host(cv, 0, LOOM_DTYPE_F32, 0, NULL, &v);
  }
  if (strcmp(a->name, "value_int") == 0) {
    LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_I64, 0, NULL, &t));
    *(int64_t *)loom_tensor_data(t) = a->i;
    cv_out_const(cv, 0, t);
    return LOOM_STATUS_OK;
  }
  if (strcmp(a->name, "value_floats") == 0 || strcmp(a->name, "value_ints") == 0) {
    bool f = a->name[6] == 'f';
    int64_t len = (int64_t)(f ? a->n_floats : a->n_ints);
    LOOM_TRY(loom_tensor_new(ctx, f ? LOOM_DTYPE_F32 : LOOM_DTYPE_I64, 1, &len, &t));
    for (int64_t i = 0; i < len; i++)
      if (f) ((float *)loom_tensor_data(t))[i] = a->floats[i];
      else ((int64_t *)loom_tensor_data(t))[i] = a->ints[i];
    cv_out_const(cv, 0, t);
    return LOOM_STATUS_OK;
  }
  return cv_unsupported(cv, "attribute '%s'", a->name);
}

static loom_status cv_constant_of_shape(onnx_cv *cv) {
  int64_t shape[LOOM_MAX_RANK];
  int32_t n = cv_ints(cv, 0, shape, LOOM_MAX_RANK);
  if (n < 0) return cv->st;
  loom_dtype dt = LOOM_DTYPE_F32;
  double v = 0;
  const onnx_attr *a = onnx_node_attr(cv->node, "value");
  if (a) {
    loom_tensor *t = NULL;
    if (!a->t) return cv_invalid(cv, "value is not a tensor");
    LOOM_TRY(onnx_tensor_to_loom(cv->ctx, cv->m, a->t, &t));
    dt = loom_tensor_dtype(t);
    bool one = loom_tensor_numel(t) == 1;
    if (one) v = loom_load(dt, loom_tensor_data(t), 0);
    if (one && dt == LOOM_DTYPE_I64 && (int64_t)v != *(int64_t *)loom_tensor_data(t)) one = false;
    loom_tensor_free(t);
    if (!one) return cv_unsupported(cv, "a value that is not one exact element");
  }
  LOOM_TRY(loom_shape_check(cv->ctx, n, shape, NULL));
  return done1(cv, lb_const(G, dt, n, shape, v));
}

static loom_status cv_range(onnx_cv *cv) {
  double s, l, d;
  if (!cv_scalar(cv, 0, &s) || !cv_scalar(cv, 1, &l) || !cv_scalar(cv, 2, &d))
    return cv_unsupported(cv, "start, limit and delta must be known at load time");
  if (d == 0) return cv_invalid(cv, "delta is 0");
  double cnt = ceil((l - s) / d);
  if (!(cnt >= 0)) cnt = 0;
  if (cnt > (double)((int64_t)1 << 26)) return cv_unsupported(cv, "a range of %g elements", cnt);
  int64_t n = (int64_t)cnt;
  loom_dtype dt = TYPE(0)->dtype;
  int32_t idx = lb_iota(G, dt, 1, &n, 0);
  int32_t y = lb_add(G, lb_mul(G, idx, lb_scalar(G, dt, d)), lb_scalar(G, dt, s));
  return done1(cv, y);
}



/* ReduceProd: the reduced axes moved last and flattened, then halved by
 * multiplying the two halves (a 1 appended to odd lengths). */
static loom_status cv_reduce_prod(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t axes[LOOM_MAX_RANK];
  int32_t n = cv->opset >= 18 ? (cv_has(cv, 1) ? cv_ints(cv, 1, axes, LOOM_MAX_RANK) : -1)
                              : cv_attr_ints(cv, "axes", axes, LOOM_MAX_RANK);
  if (cv->st) return cv->st;
  bool keep = cv_attr_i(cv, "keepdims", 1) != 0;
  if (n <= 0 && cv_attr_i(cv, "noop_with_empty_axes", 0) != 0) return done1(cv, IN(0));
  bool red[LOOM_MAX_RANK] = {false};
  if (n <= 0)
    for (int32_t d = 0; d < t->rank; d++) red[d] = true;
  for (int32_t i = 0; i < n; i++) {
    int32_t a;
    if (!onnx_axis(axes[i], t->rank, &a)) return cv_invalid(cv, "axis out of range");
    red[a] = true;
  }
  int64_t perm[LOOM_MAX_RANK], kept[LOOM_MAX_RANK], out[LOOM_MAX_RANK], rows = 1, len = 1;
  int32_t np = 0, nk = 0;
  for (int32_t d = 0; d < t->rank; d++)
    if (!red[d]) {
      perm[np++] = d;
      kept[nk++] = t->shape[d];
      rows *= t->shape[d];
    }
  for (int32_t d = 0; d < t->rank; d++)
    if (red[d]) {
      perm[np++] = d;
      len *= t->shape[d];
    }
  int32_t x = IN(0);
  if (t->rank) x = lb_transpose(G, x, perm);
  x = lb_reshape(G, x, 2, (int64_t[]){rows, len});
  if (len == 0) x = lb_const(G, t->dtype, 2, (int64_t[]){rows, 1}, 1.0);
  while (len > 1) {
    if (len % 2) {
      x = lb_pad(G, x, (int64_t[]){0, 0}, (int64_t[]){0, 1}, 1.0);
      len++;
    }
    x = lb_mul(G, lb_slice(G, x, (int64_t[]){0, 0}, (int64_t[]){rows, len / 2}),
               lb_slice(G, x, (int64_t[]){0, len / 2}, (int64_t[]){rows, len}));
    len /= 2;
  }
  for (int32_t d = 0, k = 0; d < t->rank; d++) out[d] = red[d] ? 1 : kept[k++];
  return done1(cv, keep ? lb_reshape(G, x, t->rank, out) : lb_reshape(G, x, nk, kept));
}

/* Mod: integers exactly (fmod=0: the divisor's sign, as Python's %;
 * fmod=1: the dividend's, as C's); floats as a - floor|trunc(a / b) * b. */
static loom_status cv_mod(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  if (t->dtype != TYPE(1)->dtype) return cv_invalid(cv, "inputs of different types");
  bool fmod_ = cv_attr_i(cv, "fmod", 0) != 0;
  int32_t a = IN(0), b = IN(1);
  if (!is_float(t)) {
    int32_t r = lb_sub(G, a, lb_mul(G, lb_div(G, a, b), b)); /* division truncates */
    if (fmod_) return done1(cv, r);
    int32_t zero = scalar(cv, a, 0);
    int32_t fix = lb_binary(G, LOOM_OP_MINIMUM, lb_binary(G, LOOM_OP_NE, r, zero),
                            lb_binary(G, LOOM_OP_NE, lb_binary(G, LOOM_OP_LT, r, zero), lb_binary(G, LOOM_OP_LT, b, zero)));
    return done1(cv, lb_select(G, fix, lb_add(G, r, b), r));
  }
  if (!fmod_) return cv_unsupported(cv, "fmod=0 on floats");
  int32_t q = lb_div(G, a, b);
  int32_t tq = lb_cast(G, lb_cast(G, q, LOOM_DTYPE_I64), t->dtype);
  int32_t big = lb_binary(G, LOOM_OP_GE, lb_unary(G, LOOM_OP_ABS, q), scalar(cv, q, 4503599627370496.0));
  tq = lb_select(G, big, q, tq);
  return done1(cv, lb_sub(G, a, lb_mul(G, tq, b)));
}

/* ---- more decompositions ----------------------------------------------------- */

/* Floor, Ceil, Round (half to even) from casts: exact, since a float of
 * magnitude 2^52 or more (or a NaN or infinity) is already whole and is
 * passed through. */
typedef enum { RND_FLOOR, RND_CEIL, RND_EVEN } round_kind;
static loom_status rounding(onnx_cv *cv, round_kind k) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  loom_dtype dt = TYPE(0)->dtype;
  int32_t t = lb_cast(G, lb_cast(G, x, LOOM_DTYPE_I64), dt); /* toward zero */
  int32_t y;
  if (k == RND_FLOOR) {
    y = lb_sub(G, t, lb_cast(G, lb_binary(G, LOOM_OP_GT, t, x), dt));
  } else if (k == RND_CEIL) {
    y = lb_add(G, t, lb_cast(G, lb_binary(G, LOOM_OP_LT, t, x), dt));
  } else {
    /* floor(x), then up when the rest is over a half, or exactly a half
     * and floor(x) is odd */
    int32_t f = lb_sub(G, t, lb_cast(G, lb_binary(G, LOOM_OP_GT, t, x), dt));
    int32_t rest = lb_sub(G, x, f), half = scalar(cv, x, 0.5);
    int32_t fi = lb_cast(G, f, LOOM_DTYPE_I64);
    int32_t two = lb_scalar(G, LOOM_DTYPE_I64, 2);
    int32_t odd = lb_binary(G, LOOM_OP_NE, lb_sub(G, fi, lb_mul(G, lb_div(G, fi, two), two)), lb_scalar(G, LOOM_DTYPE_I64, 0));
    int32_t up = lb_binary(G, LOOM_OP_MAXIMUM, lb_binary(G, LOOM_OP_GT, rest, half),
                           lb_binary(G, LOOM_OP_MINIMUM, lb_binary(G, LOOM_OP_EQ, rest, half), odd));
    y = lb_add(G, f, lb_cast(G, up, dt));
  }
  int32_t whole = lb_binary(G, LOOM_OP_GE, lb_unary(G, LOOM_OP_ABS, x), scalar(cv, x, 4503599627370496.0));
  int32_t keep = lb_binary(G, LOOM_OP_MAXIMUM, whole, lb_binary(G, LOOM_OP_NE, x, x));
  return done1(cv, lb_select(G, keep, x, y));
}
static loom_status cv_floor(onnx_cv *cv) { return rounding(cv, RND_FLOOR); }
static loom_status cv_ceil(onnx_cv *cv) { return rounding(cv, RND_CEIL); }
static loom_status cv_round(onnx_cv *cv) { return rounding(cv, RND_EVEN); }

static loom_status cv_tan(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  return done1(cv, lb_div(G, lb_unary(G, LOOM_OP_SIN, x), lb_unary(G, LOOM_OP_COS, x)));
}
static loom_status hyperbolic(onnx_cv *cv, bool sinh) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  int32_t e = lb_unary(G, LOOM_OP_EXP, x), f = lb_unary(G, LOOM_OP_EXP, lb_neg(G, x));
  return done1(cv, lb_mul(G, sinh ? lb_sub(G, e, f) : lb_add(G, e, f), scalar(cv, x, 0.5)));
}
static loom_status cv_sinh(onnx_cv *cv) { return hyperbolic(cv, true); }
static loom_status cv_cosh(onnx_cv *cv) { return hyperbolic(cv, false); }
static loom_status cv_asinh(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  int32_t r = lb_unary(G, LOOM_OP_SQRT, lb_add(G, lb_mul(G, x, x), scalar(cv, x, 1)));
  return done1(cv, lb_unary(G, LOOM_OP_LOG, lb_add(G, x, r)));
}
static loom_status cv_acosh(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0);
  int32_t r = lb_unary(G, LOOM_OP_SQRT, lb_sub(G, lb_mul(G, x, x), scalar(cv, x, 1)));
  return done1(cv, lb_unary(G, LOOM_OP_LOG, lb_add(G, x, r)));
}
static loom_status cv_atanh(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  int32_t x = IN(0), one = scalar(cv, x, 1);
  int32_t q = lb_div(G, lb_add(G, one, x), lb_sub(G, one, x));
  return done1(cv, lb_mul(G, lb_unary(G, LOOM_OP_LOG, q), scalar(cv, x, 0.5)));
}

/* Trilu: keep x[..., i, j] where j - i >= k (upper) or <= k (lower). */
static loom_status cv_trilu(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  if (t->rank < 2) return cv_invalid(cv, "input of rank %d", t->rank);
  double k = 0;
  if (cv_has(cv, 1) && !cv_scalar(cv, 1, &k)) return cv_unsupported(cv, "k not known at load time");
  bool upper = cv_attr_i(cv, "upper", 1) != 0;
  int64_t shape[2] = {t->shape[t->rank - 2], t->shape[t->rank - 1]};
  int32_t i = lb_iota(G, LOOM_DTYPE_I64, 2, shape, 0), j = lb_iota(G, LOOM_DTYPE_I64, 2, shape, 1);
  int32_t diff = lb_sub(G, j, i), kk = lb_scalar(G, LOOM_DTYPE_I64, k);
  int32_t keep = lb_binary(G, upper ? LOOM_OP_GE : LOOM_OP_LE, diff, kk);
  int32_t x = IN(0);
  return done1(cv, lb_select(G, keep, x, scalar(cv, x, 0)));
}

/* Hardmax: one at the first maximum along axis, zeros elsewhere (before
 * opset 13 over the flattened [rows, cols] at axis). */
static loom_status cv_hardmax(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  int32_t axis, x = IN(0);
  if (!onnx_axis(cv_attr_i(cv, "axis", cv->opset < 13 ? 1 : -1), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  loom_type w = *t;
  if (cv->opset < 13) {
    int64_t rows = 1, cols = 1;
    for (int32_t d = 0; d < t->rank; d++) *(d < axis ? &rows : &cols) *= t->shape[d];
    w.rank = 2;
    w.shape[0] = rows;
    w.shape[1] = cols;
    x = lb_reshape(G, x, 2, w.shape);
    axis = 1;
  }
  int64_t ax = axis;
  int32_t m = lb_reduce(G, LOOM_OP_REDUCE_MAX, x, 1, &ax, true);
  int32_t idx = lb_iota(G, LOOM_DTYPE_I64, w.rank, w.shape, axis);
  int32_t cand = lb_select(G, lb_binary(G, LOOM_OP_EQ, x, m), idx, lb_scalar(G, LOOM_DTYPE_I64, (double)w.shape[axis]));
  int32_t first = lb_reduce(G, LOOM_OP_REDUCE_MIN, cand, 1, &ax, true);
  int32_t y = lb_cast(G, lb_binary(G, LOOM_OP_EQ, idx, first), t->dtype);
  if (cv->opset < 13) y = lb_reshape(G, y, t->rank, t->shape);
  return done1(cv, y);
}

static loom_status cv_eye_like(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  if (t->rank != 2) return cv_invalid(cv, "input of rank %d", t->rank);
  loom_dtype dt = t->dtype;
  if (cv_attr_has(cv, "dtype") && !dtype_attr(cv_attr_i(cv, "dtype", 1), &dt)) return cv_unsupported(cv, "dtype");
  int64_t k = cv_attr_i(cv, "k", 0);
  int32_t i = lb_iota(G, LOOM_DTYPE_I64, 2, t->shape, 0), j = lb_iota(G, LOOM_DTYPE_I64, 2, t->shape, 1);
  int32_t on = lb_binary(G, LOOM_OP_EQ, lb_sub(G, j, i), lb_scalar(G, LOOM_DTYPE_I64, (double)k));
  return done1(cv, lb_cast(G, on, dt));
}

static loom_status cv_one_hot(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  double depth;
  if (!cv_scalar(cv, 1, &depth)) return cv_unsupported(cv, "depth not known at load time");
  if (!(depth >= 1 && depth < (double)(1 << 24))) return cv_invalid(cv, "depth %g", depth);
  int32_t r = t->rank + 1, axis;
  if (r > LOOM_MAX_RANK) return cv_unsupported(cv, "rank %d", r);
  if (!onnx_axis(cv_attr_i(cv, "axis", -1), r, &axis)) return cv_invalid(cv, "axis out of range");
  int64_t shape[LOOM_MAX_RANK], un[LOOM_MAX_RANK];
  for (int32_t d = 0, k = 0; d < r; d++) {
    shape[d] = d == axis ? (int64_t)depth : t->shape[k];
    un[d] = d == axis ? 1 : t->shape[k];
    if (d != axis) k++;
  }
  int64_t dep = (int64_t)depth;
  int32_t idx = lb_cast(G, IN(0), LOOM_DTYPE_I64);
  if (!loom_dtype_is_int(t->dtype)) /* float indices: toward zero */
    idx = lb_cast(G, IN(0), LOOM_DTYPE_I64);
  idx = lb_select(G, lb_binary(G, LOOM_OP_LT, idx, lb_scalar(G, LOOM_DTYPE_I64, 0)),
                  lb_add(G, idx, lb_scalar(G, LOOM_DTYPE_I64, (double)dep)), idx);
  idx = lb_reshape(G, idx, r, un);
  int32_t hit = lb_binary(G, LOOM_OP_EQ, lb_iota(G, LOOM_DTYPE_I64, r, shape, axis), idx);
  const loom_type *tv = TYPE(2);
  if (loom_type_numel(tv) != 2) return cv_invalid(cv, "values must hold two elements");
  int32_t v = IN(2);
  int32_t off = lb_reshape(G, lb_slice(G, v, (int64_t[]){0}, (int64_t[]){1}), 0, NULL);
  int32_t onv = lb_reshape(G, lb_slice(G, v, (int64_t[]){1}, (int64_t[]){2}), 0, NULL);
  return done1(cv, lb_select(G, hit, onv, off));
}

/* DepthToSpace (DCR or CRD) and SpaceToDepth: a reshape, a transpose, a
 * reshape. */
static loom_status cv_depth_to_space(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  if (t->rank != 4) return cv_invalid(cv, "input of rank %d", t->rank);
  int64_t b = cv_attr_i(cv, "blocksize", 0), n = t->shape[0], c = t->shape[1], h = t->shape[2], w = t->shape[3];
  if (b <= 0 || c % (b * b)) return cv_invalid(cv, "blocksize %lld", (long long)b);
  const char *mode = cv_attr_s(cv, "mode", "DCR");
  int32_t y;
  if (strcmp(mode, "DCR") == 0) {
    y = lb_reshape(G, IN(0), 6, (int64_t[]){n, b, b, c / (b * b), h, w});
    y = lb_transpose(G, y, (int64_t[]){0, 3, 4, 1, 5, 2});
  } else if (strcmp(mode, "CRD") == 0) {
    y = lb_reshape(G, IN(0), 6, (int64_t[]){n, c / (b * b), b, b, h, w});
    y = lb_transpose(G, y, (int64_t[]){0, 1, 4, 2, 5, 3});
  } else {
    return cv_unsupported(cv, "mode '%s'", mode);
  }
  return done1(cv, lb_reshape(G, y, 4, (int64_t[]){n, c / (b * b), h * b, w * b}));
}

static loom_status cv_space_to_depth(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  if (t->rank != 4) return cv_invalid(cv, "input of rank %d", t->rank);
  int64_t b = cv_attr_i(cv, "blocksize", 0), n = t->shape[0], c = t->shape[1], h = t->shape[2], w = t->shape[3];
  if (b <= 0 || h % b || w % b) return cv_invalid(cv, "blocksize %lld", (long long)b);
  int32_t y = lb_reshape(G, IN(0), 6, (int64_t[]){n, c, h / b, b, w / b, b});
  y = lb_transpose(G, y, (int64_t[]){0, 3, 5, 1, 2, 4});
  return done1(cv, lb_reshape(G, y, 4, (int64_t[]){n, c * b * b, h / b, w / b}));
}

/* convert_conv.c */
/* convert_layout.c */
loom_status onnx_cv_transpose(onnx_cv *cv);
loom_status onnx_cv_reshape(onnx_cv *cv);
loom_status onnx_cv_flatten(onnx_cv *cv);
loom_status onnx_cv_squeeze(onnx_cv *cv);
loom_status onnx_cv_unsqueeze(onnx_cv *cv);
loom_status onnx_cv_concat(onnx_cv *cv);
loom_status onnx_cv_split(onnx_cv *cv);
loom_status onnx_cv_slice(onnx_cv *cv);
loom_status onnx_cv_gather(onnx_cv *cv);
loom_status onnx_cv_gather_elements(onnx_cv *cv);
loom_status onnx_cv_nll_loss(onnx_cv *cv);
loom_status onnx_cv_softmax_ce_loss(onnx_cv *cv);
loom_status onnx_cv_expand(onnx_cv *cv);
loom_status onnx_cv_tile(onnx_cv *cv);
loom_status onnx_cv_pad(onnx_cv *cv);
/* convert_matrix.c */
loom_status onnx_cv_matmul(onnx_cv *cv);
loom_status onnx_cv_gemm(onnx_cv *cv);
loom_status onnx_cv_softmax(onnx_cv *cv);
loom_status onnx_cv_log_softmax(onnx_cv *cv);
loom_status onnx_cv_layer_norm(onnx_cv *cv);
loom_status onnx_cv_batch_norm(onnx_cv *cv);
loom_status onnx_cv_instance_norm(onnx_cv *cv);
loom_status onnx_cv_group_norm(onnx_cv *cv);
loom_status onnx_cv_conv(onnx_cv *cv);
loom_status onnx_cv_conv_transpose(onnx_cv *cv);
loom_status onnx_cv_max_pool(onnx_cv *cv);
loom_status onnx_cv_average_pool(onnx_cv *cv);
loom_status onnx_cv_global_average_pool(onnx_cv *cv);
loom_status onnx_cv_global_max_pool(onnx_cv *cv);
loom_status onnx_cv_resize(onnx_cv *cv); /* convert_resize.c */
/* convert_index.c */
loom_status onnx_cv_scatter_elements(onnx_cv *cv);
loom_status onnx_cv_scatter_nd(onnx_cv *cv);
loom_status onnx_cv_gather_nd(onnx_cv *cv);
loom_status onnx_cv_cumsum(onnx_cv *cv);
loom_status onnx_cv_top_k(onnx_cv *cv);
loom_status onnx_cv_einsum(onnx_cv *cv);
/* convert_rnn.c */
loom_status onnx_cv_rnn(onnx_cv *cv);
loom_status onnx_cv_gru(onnx_cv *cv);
loom_status onnx_cv_lstm(onnx_cv *cv);

/* ---- the table ---------------------------------------------------------------- */

static const onnx_converter converters[] = {
    {"Abs", 1, 0, cv_abs, ""},
    {"Neg", 1, 0, cv_neg, ""},
    {"Sign", 9, 0, cv_sign, ""},
    {"Relu", 1, 0, cv_relu, ""},
    {"Exp", 1, 0, cv_exp, ""},
    {"Log", 1, 0, cv_log, ""},
    {"Sqrt", 1, 0, cv_sqrt, ""},
    {"Tanh", 1, 0, cv_tanh, ""},
    {"Sigmoid", 1, 0, cv_sigmoid, ""},
    {"Erf", 9, 0, cv_erf, ""},
    {"Sin", 7, 0, cv_sin, ""},
    {"Cos", 7, 0, cv_cos, ""},
    {"Reciprocal", 1, 0, cv_reciprocal, ""},
    {"Add", 1, 0, cv_add, "broadcast,axis,consumed_inputs"},
    {"Sub", 1, 0, cv_sub, "broadcast,axis,consumed_inputs"},
    {"Mul", 1, 0, cv_mul, "broadcast,axis,consumed_inputs"},
    {"Div", 1, 0, cv_div, "broadcast,axis,consumed_inputs"},
    {"Pow", 7, 0, cv_pow, ""},
    {"Equal", 7, 0, cv_equal, ""},
    {"Less", 7, 0, cv_less, ""},
    {"LessOrEqual", 12, 0, cv_less_eq, ""},
    {"Greater", 7, 0, cv_greater, ""},
    {"GreaterOrEqual", 12, 0, cv_greater_eq, ""},
    {"And", 7, 0, cv_and, ""},
    {"Or", 7, 0, cv_or, ""},
    {"Xor", 7, 0, cv_xor, ""},
    {"Not", 1, 0, cv_not, ""},
    {"Min", 8, 0, cv_min, ""},
    {"Max", 8, 0, cv_max, ""},
    {"Sum", 8, 0, cv_sum, ""},
    {"Mean", 8, 0, cv_mean, ""},
    {"Where", 9, 0, cv_where, ""},
    {"Cast", 6, 0, cv_cast, "to,saturate"},
    {"CastLike", 15, 0, cv_cast_like, "saturate"},
    {"LeakyRelu", 6, 0, cv_leaky_relu, "alpha"},
    {"PRelu", 6, 0, cv_prelu, ""},
    {"Elu", 6, 0, cv_elu, "alpha"},
    {"Selu", 6, 0, cv_selu, "alpha,gamma"},
    {"Celu", 12, 0, cv_celu, "alpha"},
    {"HardSigmoid", 6, 0, cv_hard_sigmoid, "alpha,beta"},
    {"HardSwish", 14, 0, cv_hard_swish, ""},
    {"Softplus", 1, 0, cv_softplus, ""},
    {"Softsign", 1, 0, cv_softsign, ""},
    {"Mish", 18, 0, cv_mish, ""},
    {"ThresholdedRelu", 10, 0, cv_thresholded_relu, "alpha"},
    {"Shrink", 9, 0, cv_shrink, "lambd,bias"},
    {"IsNaN", 9, 0, cv_isnan, ""},
    {"IsInf", 10, 0, cv_isinf, "detect_positive,detect_negative"},
    {"Gelu", 20, 0, cv_gelu, "approximate"},
    {"Clip", 6, 0, cv_clip, "min,max"},
    {"Identity", 1, 0, cv_identity, ""},
    {"Dropout", 1, 0, cv_dropout, "ratio,is_test,seed"},
    {"MatMul", 1, 0, onnx_cv_matmul, ""},
    {"Gemm", 6, 0, onnx_cv_gemm, "alpha,beta,transA,transB,broadcast"},
    {"Softmax", 1, 0, onnx_cv_softmax, "axis"},
    {"LogSoftmax", 1, 0, onnx_cv_log_softmax, "axis"},
    {"LayerNormalization", 17, 0, onnx_cv_layer_norm, "axis,epsilon,stash_type"},
    {"BatchNormalization", 6, 0, onnx_cv_batch_norm, "epsilon,momentum,spatial,is_test,training_mode"},
    {"InstanceNormalization", 6, 0, onnx_cv_instance_norm, "epsilon"},
    {"GroupNormalization", 18, 0, onnx_cv_group_norm, "epsilon,num_groups,stash_type"},
    {"ReduceSum", 1, 0, cv_reduce_sum, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMean", 1, 0, cv_reduce_mean, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMax", 1, 0, cv_reduce_max, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceMin", 1, 0, cv_reduce_min, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceL1", 1, 0, cv_reduce_l1, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceL2", 1, 0, cv_reduce_l2, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceSumSquare", 1, 0, cv_reduce_sumsq, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceLogSum", 1, 0, cv_reduce_logsum, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceLogSumExp", 1, 0, cv_reduce_logsumexp, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceProd", 1, 0, cv_reduce_prod, "axes,keepdims,noop_with_empty_axes"},
    {"Mod", 10, 0, cv_mod, "fmod"},
    {"ArgMax", 1, 0, cv_argmax, "axis,keepdims,select_last_index"},
    {"ArgMin", 1, 0, cv_argmin, "axis,keepdims,select_last_index"},
    {"Transpose", 1, 0, onnx_cv_transpose, "perm"},
    {"Reshape", 1, 0, onnx_cv_reshape, "shape,allowzero"},
    {"Flatten", 1, 0, onnx_cv_flatten, "axis"},
    {"Squeeze", 1, 0, onnx_cv_squeeze, "axes"},
    {"Unsqueeze", 1, 0, onnx_cv_unsqueeze, "axes"},
    {"Concat", 4, 0, onnx_cv_concat, "axis"},
    {"Split", 2, 0, onnx_cv_split, "axis,split,num_outputs"},
    {"Slice", 1, 0, onnx_cv_slice, "starts,ends,axes"},
    {"Gather", 1, 0, onnx_cv_gather, "axis"},
    {"GatherElements", 11, 0, onnx_cv_gather_elements, "axis"},
    {"NegativeLogLikelihoodLoss", 12, 0, onnx_cv_nll_loss, "reduction,ignore_index"},
    {"SoftmaxCrossEntropyLoss", 12, 0, onnx_cv_softmax_ce_loss, "reduction,ignore_index"},
    {"Expand", 8, 0, onnx_cv_expand, ""},
    {"Tile", 6, 0, onnx_cv_tile, ""},
    {"Pad", 2, 0, onnx_cv_pad, "mode,pads,value"},
    {"Shape", 1, 0, cv_shape, "start,end"},
    {"Size", 1, 0, cv_size, ""},
    {"Constant", 1, 0, cv_constant, "value,value_float,value_floats,value_int,value_ints,value_string,value_strings,sparse_value"},
    {"ConstantOfShape", 9, 0, cv_constant_of_shape, "value"},
    {"Range", 11, 0, cv_range, ""},
    {"Floor", 6, 0, cv_floor, ""},
    {"Ceil", 6, 0, cv_ceil, ""},
    {"Round", 11, 0, cv_round, ""},
    {"Tan", 7, 0, cv_tan, ""},
    {"Sinh", 9, 0, cv_sinh, ""},
    {"Cosh", 9, 0, cv_cosh, ""},
    {"Asinh", 9, 0, cv_asinh, ""},
    {"Acosh", 9, 0, cv_acosh, ""},
    {"Atanh", 9, 0, cv_atanh, ""},
    {"Trilu", 14, 0, cv_trilu, "upper"},
    {"GlobalAveragePool", 1, 0, onnx_cv_global_average_pool, ""},
    {"GlobalMaxPool", 1, 0, onnx_cv_global_max_pool, ""},
    {"Hardmax", 1, 0, cv_hardmax, "axis"},
    {"EyeLike", 9, 0, cv_eye_like, "dtype,k"},
    {"OneHot", 9, 0, cv_one_hot, "axis"},
    {"DepthToSpace", 1, 0, cv_depth_to_space, "blocksize,mode"},
    {"SpaceToDepth", 1, 0, cv_space_to_depth, "blocksize"},
    {"ScatterElements", 11, 0, onnx_cv_scatter_elements, "axis,reduction"},
    {"Scatter", 9, 10, onnx_cv_scatter_elements, "axis"},
    {"ScatterND", 11, 0, onnx_cv_scatter_nd, "reduction"},
    {"GatherND", 11, 0, onnx_cv_gather_nd, "batch_dims"},
    {"CumSum", 11, 0, onnx_cv_cumsum, "exclusive,reverse"},
    {"TopK", 10, 0, onnx_cv_top_k, "axis,largest,sorted"},
    {"Einsum", 12, 0, onnx_cv_einsum, "equation"},
    {"RNN", 7, 0, onnx_cv_rnn, "activations,activation_alpha,activation_beta,clip,direction,hidden_size,layout"},
    {"GRU", 7, 0, onnx_cv_gru,
     "activations,activation_alpha,activation_beta,clip,direction,hidden_size,layout,linear_before_reset"},
    {"LSTM", 7, 0, onnx_cv_lstm,
     "activations,activation_alpha,activation_beta,clip,direction,hidden_size,layout,input_forget"},
    {"If", 1, 0, onnx_cv_if, "then_branch,else_branch"},
    {"Loop", 1, 0, onnx_cv_loop, "body"},
    {"Resize", 11, 0, onnx_cv_resize,
     "mode,coordinate_transformation_mode,nearest_mode,cubic_coeff_a,exclude_outside,extrapolation_value"},
    {"Conv", 1, 0, onnx_cv_conv, "auto_pad,dilations,group,kernel_shape,pads,strides"},
    {"ConvTranspose", 1, 0, onnx_cv_conv_transpose,
     "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides"},
    {"MaxPool", 1, 0, onnx_cv_max_pool, "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides"},
    {"AveragePool", 1, 0, onnx_cv_average_pool, "auto_pad,ceil_mode,count_include_pad,dilations,kernel_shape,pads,strides"},
};

const onnx_converter *onnx_find_converter(const char *op_type, int64_t opset) {
  for (size_t i = 0; i < sizeof converters / sizeof converters[0]; i++) {
    const onnx_converter *c = &converters[i];
    if (strcmp(c->op_type, op_type) == 0 && opset >= c->since && (c->until == 0 || opset <= c->until))
      return c;
  }
  return NULL;
}

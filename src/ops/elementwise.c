/*
 * Element-wise ops: unary math, binary arithmetic with NumPy broadcasting,
 * comparisons, select and cast.
 *
 * Semantics of the reference kernels:
 * - Float dtypes compute in double through the op's scalar1/scalar2 and round
 *   once on store.
 * - Integer dtypes (i32, i64, u8, bool) compute the exact mathematical result
 *   in int64 and convert it to the dtype as loom_store does: results outside
 *   the dtype's range saturate (so i32 and i64 overflow clamp rather than
 *   wrap). Integer div truncates toward zero, and an integer division by zero
 *   is defined to give 0 (no trap). Integer pow goes through double pow and
 *   then truncates toward zero (2 ** -1 == 0).
 */
#include "ir/dtype.h"
#include "ops/grad.h"
#include "ops/ops_util.h"

#include <math.h>
#include <stdio.h>

/* ---- scalar semantics (float) ------------------------------------------- */

static double s_neg(double x) { return -x; }
static double s_abs(double x) { return fabs(x); }
/* sign(0) = 0; NaN stays NaN. */
static double s_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
static double s_exp(double x) { return exp(x); }
static double s_log(double x) { return log(x); }
static double s_sqrt(double x) { return sqrt(x); }
static double s_rsqrt(double x) { return 1.0 / sqrt(x); }
static double s_reciprocal(double x) { return 1.0 / x; }
static double s_tanh(double x) { return tanh(x); }
/* Two branches so exp never overflows into inf/inf. */
static double s_sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
/* NaN propagates (x < 0 is false for NaN). */
static double s_relu(double x) { return x < 0 ? 0.0 : x; }
static double s_erf(double x) { return erf(x); }
static double s_sin(double x) { return sin(x); }
static double s_cos(double x) { return cos(x); }

static double s_add(double a, double b) { return a + b; }
static double s_sub(double a, double b) { return a - b; }
static double s_mul(double a, double b) { return a * b; }
/* Float division (IEEE: x/0 is +-inf or NaN); integers: see the top. */
static double s_div(double a, double b) { return a / b; }
static double s_pow(double a, double b) { return pow(a, b); }
/* NaN-propagating, like NumPy's maximum/minimum. */
static double s_maximum(double a, double b) { return a != a ? a : b != b ? b : a > b ? a : b; }
static double s_minimum(double a, double b) { return a != a ? a : b != b ? b : a < b ? a : b; }
static double s_eq(double a, double b) { return a == b ? 1.0 : 0.0; }
static double s_ne(double a, double b) { return a != b ? 1.0 : 0.0; }
static double s_lt(double a, double b) { return a < b ? 1.0 : 0.0; }
static double s_le(double a, double b) { return a <= b ? 1.0 : 0.0; }
static double s_gt(double a, double b) { return a > b ? 1.0 : 0.0; }
static double s_ge(double a, double b) { return a >= b ? 1.0 : 0.0; }

/* ---- exact integer helpers ---------------------------------------------- */

/* Stores an exact int64 into element i, saturating like loom_store. */
static void set_i64(const loom_view *v, int64_t i, int64_t x) {
  int64_t off = loom_view_offset(v, i);
  switch (v->dtype) {
  case LOOM_DTYPE_I64: ((int64_t *)v->data)[off] = x; break;
  case LOOM_DTYPE_I32:
    ((int32_t *)v->data)[off] = (int32_t)(x < INT32_MIN   ? INT32_MIN
                                          : x > INT32_MAX ? INT32_MAX
                                                          : x);
    break;
  case LOOM_DTYPE_U8: ((uint8_t *)v->data)[off] = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x); break;
  case LOOM_DTYPE_BOOL: ((uint8_t *)v->data)[off] = x != 0; break;
  default: loom_store(v->dtype, v->data, off, (double)x); break;
  }
}

static int64_t sat_neg(int64_t x) { return x == INT64_MIN ? INT64_MAX : -x; }

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return a >= 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return r;
}

/* Truncating division; x / 0 == 0 by definition; INT64_MIN / -1 saturates. */
static int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return sat_neg(a);
  return a / b;
}

static int64_t int_unary(loom_op op, int64_t x) {
  switch (op) {
  case LOOM_OP_NEG: return sat_neg(x);
  case LOOM_OP_ABS: return x < 0 ? sat_neg(x) : x;
  case LOOM_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
  case LOOM_OP_RELU: return x < 0 ? 0 : x;
  default: return 0; /* infer only lets these four through for integers */
  }
}

/* The exact integer result of a binary op (pow is handled apart). */
static int64_t int_binary(loom_op op, int64_t a, int64_t b) {
  switch (op) {
  case LOOM_OP_ADD: return sat_add(a, b);
  case LOOM_OP_SUB: return sat_sub(a, b);
  case LOOM_OP_MUL: return sat_mul(a, b);
  case LOOM_OP_DIV: return int_div(a, b);
  case LOOM_OP_MAXIMUM: return a > b ? a : b;
  case LOOM_OP_MINIMUM: return a < b ? a : b;
  case LOOM_OP_EQ: return a == b;
  case LOOM_OP_NE: return a != b;
  case LOOM_OP_LT: return a < b;
  case LOOM_OP_LE: return a <= b;
  case LOOM_OP_GT: return a > b;
  case LOOM_OP_GE: return a >= b;
  default: return 0;
  }
}

int64_t loom_int_elementwise(loom_op op, int64_t a, int64_t b) {
  const loom_op_def *d = loom_op_get(op);
  return d && d->min_in == 1 ? int_unary(op, a) : int_binary(op, a, b);
}

/* ---- shape inference ---------------------------------------------------- */

static loom_status check_dtype(loom_ctx *ctx, const loom_type *t) {
  if (!loom_dtype_valid(t->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "invalid dtype %d", (int)t->dtype);
  return LOOM_STATUS_OK;
}

/* neg, abs, sign, relu: any dtype. */
static loom_status infer_unary_any(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                   loom_type *out) {
  (void)n;
  LOOM_TRY(check_dtype(ctx, &in[0]));
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

/* Transcendental ops: float dtypes only. */
static loom_status infer_unary_float(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     loom_type *out) {
  (void)n;
  if (!loom_dtype_is_float(in[0].dtype)) {
    const char *dn = loom_dtype_name(in[0].dtype);
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "needs a float input (f32, f64, f16, bf16), got %s",
                      dn ? dn : "an invalid dtype");
  }
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

/* Same dtype on both sides, broadcast shapes; output dtype out_dt. */
static loom_status infer_binary_common(loom_ctx *ctx, const loom_type *in, loom_type *out,
                                       loom_dtype out_dt) {
  char ba[128], bb[128];
  LOOM_TRY(check_dtype(ctx, &in[0]));
  if (in[0].dtype != in[1].dtype)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "inputs have different dtypes: %s and %s",
                      loom_type_str(&in[0], ba, sizeof ba), loom_type_str(&in[1], bb, sizeof bb));
  loom_type t = {.dtype = out_dt};
  if (!loom_broadcast_shapes(in[0].rank, in[0].shape, in[1].rank, in[1].shape, &t.rank, t.shape))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "shapes %s and %s do not broadcast",
                      loom_type_str(&in[0], ba, sizeof ba), loom_type_str(&in[1], bb, sizeof bb));
  out[0] = t;
  return LOOM_STATUS_OK;
}

static loom_status infer_binary(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                loom_type *out) {
  (void)n;
  return infer_binary_common(ctx, in, out, in[0].dtype);
}

static loom_status infer_compare(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 loom_type *out) {
  (void)n;
  return infer_binary_common(ctx, in, out, LOOM_DTYPE_BOOL);
}

static loom_status infer_select(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                loom_type *out) {
  (void)n;
  char b0[128], b1[128], b2[128];
  if (in[0].dtype != LOOM_DTYPE_BOOL)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "the condition must be bool, got %s",
                      loom_type_str(&in[0], b0, sizeof b0));
  LOOM_TRY(check_dtype(ctx, &in[1]));
  if (in[1].dtype != in[2].dtype)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "the two branches have different dtypes: %s and %s",
                      loom_type_str(&in[1], b1, sizeof b1), loom_type_str(&in[2], b2, sizeof b2));
  loom_type t = {.dtype = in[1].dtype};
  int64_t ab[LOOM_MAX_RANK];
  int32_t rab;
  if (!loom_broadcast_shapes(in[1].rank, in[1].shape, in[2].rank, in[2].shape, &rab, ab) ||
      !loom_broadcast_shapes(in[0].rank, in[0].shape, rab, ab, &t.rank, t.shape))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "shapes %s, %s and %s do not broadcast",
                      loom_type_str(&in[0], b0, sizeof b0), loom_type_str(&in[1], b1, sizeof b1),
                      loom_type_str(&in[2], b2, sizeof b2));
  out[0] = t;
  return LOOM_STATUS_OK;
}

static loom_status infer_cast(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              loom_type *out) {
  LOOM_TRY(check_dtype(ctx, &in[0]));
  int64_t dt = LOOM_ATTR_I(n, cast, dtype);
  if (dt < 0 || dt >= LOOM_DTYPE_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'dtype' is not a valid dtype (%lld)",
                      (long long)dt);
  out[0] = in[0];
  out[0].dtype = (loom_dtype)dt;
  return LOOM_STATUS_OK;
}

/* ---- reference kernels -------------------------------------------------- */

static loom_status ref_unary(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                             const loom_view *out) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d || !d->scalar1)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "op %d has no scalar1", (int)n->op);
  loom_view x = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  int64_t numel = loom_view_numel(&out[0]);
  if (loom_dtype_is_int(out[0].dtype)) {
    for (int64_t i = 0; i < numel; i++)
      set_i64(&out[0], i, int_unary(n->op, loom_view_get_i64(&x, i)));
  } else {
    for (int64_t i = 0; i < numel; i++)
      loom_view_set(&out[0], i, d->scalar1(loom_view_get(&x, i)));
  }
  return LOOM_STATUS_OK;
}

/* Binary ops and comparisons: the inputs' dtype picks the path. */
static loom_status ref_binary(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d || !d->scalar2)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "op %d has no scalar2", (int)n->op);
  loom_view a = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  loom_view b = loom_view_broadcast(&in[1], out[0].rank, out[0].shape);
  int64_t numel = loom_view_numel(&out[0]);
  if (loom_dtype_is_int(a.dtype) && n->op != LOOM_OP_POW) {
    for (int64_t i = 0; i < numel; i++)
      set_i64(&out[0], i, int_binary(n->op, loom_view_get_i64(&a, i), loom_view_get_i64(&b, i)));
  } else {
    /* floats, and integer pow (double pow, then truncation on store) */
    for (int64_t i = 0; i < numel; i++)
      loom_view_set(&out[0], i, d->scalar2(loom_view_get(&a, i), loom_view_get(&b, i)));
  }
  return LOOM_STATUS_OK;
}

static loom_status ref_select(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  (void)ctx;
  (void)n;
  loom_view c = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  loom_view a = loom_view_broadcast(&in[1], out[0].rank, out[0].shape);
  loom_view b = loom_view_broadcast(&in[2], out[0].rank, out[0].shape);
  int64_t numel = loom_view_numel(&out[0]);
  /* i64 goes through int64 to stay exact; every other dtype fits a double */
  bool exact = out[0].dtype == LOOM_DTYPE_I64;
  for (int64_t i = 0; i < numel; i++) {
    const loom_view *src = loom_view_get_i64(&c, i) ? &a : &b;
    if (exact)
      set_i64(&out[0], i, loom_view_get_i64(src, i));
    else
      loom_view_set(&out[0], i, loom_view_get(src, i));
  }
  return LOOM_STATUS_OK;
}

/* float -> int truncates toward zero and saturates (NaN -> 0); -> bool is
 * x != 0: exactly loom_store's conversion. int -> int stays exact. */
static loom_status ref_cast(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  (void)ctx;
  (void)n;
  loom_view x = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  int64_t numel = loom_view_numel(&out[0]);
  if (loom_dtype_is_int(x.dtype) && loom_dtype_is_int(out[0].dtype)) {
    for (int64_t i = 0; i < numel; i++)
      set_i64(&out[0], i, loom_view_get_i64(&x, i));
  } else {
    for (int64_t i = 0; i < numel; i++)
      loom_view_set(&out[0], i, loom_view_get(&x, i));
  }
  return LOOM_STATUS_OK;
}

/* ---- the definitions ---------------------------------------------------- */

#define LOOM_EW_UNARY(nm, inferfn, gradfn)                                                         \
  const loom_op_def loom_opdef_##nm = {                                                            \
      .name = #nm,                                                                                 \
      .cls = LOOM_OPCLASS_ELEMENTWISE,                                                             \
      .min_in = 1,                                                                                 \
      .max_in = 1,                                                                                 \
      .n_out = 1,                                                                                  \
      .infer = inferfn,                                                                            \
      .ref = ref_unary,                                                                            \
      .grad = gradfn,                                                                              \
      .partition = loom_partition_elementwise,                                                     \
      .scalar1 = s_##nm,                                                                           \
  };

LOOM_EW_UNARY(neg, infer_unary_any, loom_grad_neg)
LOOM_EW_UNARY(abs, infer_unary_any, loom_grad_abs)
LOOM_EW_UNARY(sign, infer_unary_any, NULL)
LOOM_EW_UNARY(relu, infer_unary_any, loom_grad_relu)
LOOM_EW_UNARY(exp, infer_unary_float, loom_grad_exp)
LOOM_EW_UNARY(log, infer_unary_float, loom_grad_log)
LOOM_EW_UNARY(sqrt, infer_unary_float, loom_grad_sqrt)
LOOM_EW_UNARY(rsqrt, infer_unary_float, loom_grad_rsqrt)
LOOM_EW_UNARY(reciprocal, infer_unary_float, loom_grad_reciprocal)
LOOM_EW_UNARY(tanh, infer_unary_float, loom_grad_tanh)
LOOM_EW_UNARY(sigmoid, infer_unary_float, loom_grad_sigmoid)
LOOM_EW_UNARY(erf, infer_unary_float, loom_grad_erf)
LOOM_EW_UNARY(sin, infer_unary_float, loom_grad_sin)
LOOM_EW_UNARY(cos, infer_unary_float, loom_grad_cos)

#define LOOM_EW_BINARY(nm, inferfn, gradfn)                                                        \
  const loom_op_def loom_opdef_##nm = {                                                            \
      .name = #nm,                                                                                 \
      .cls = LOOM_OPCLASS_ELEMENTWISE,                                                             \
      .min_in = 2,                                                                                 \
      .max_in = 2,                                                                                 \
      .n_out = 1,                                                                                  \
      .infer = inferfn,                                                                            \
      .ref = ref_binary,                                                                           \
      .grad = gradfn,                                                                              \
      .partition = loom_partition_elementwise,                                                     \
      .scalar2 = s_##nm,                                                                           \
  };

LOOM_EW_BINARY(add, infer_binary, loom_grad_add)
LOOM_EW_BINARY(sub, infer_binary, loom_grad_sub)
LOOM_EW_BINARY(mul, infer_binary, loom_grad_mul)
LOOM_EW_BINARY(div, infer_binary, loom_grad_div)
LOOM_EW_BINARY(pow, infer_binary, loom_grad_pow)
LOOM_EW_BINARY(maximum, infer_binary, loom_grad_maximum)
LOOM_EW_BINARY(minimum, infer_binary, loom_grad_minimum)
LOOM_EW_BINARY(eq, infer_compare, NULL)
LOOM_EW_BINARY(ne, infer_compare, NULL)
LOOM_EW_BINARY(lt, infer_compare, NULL)
LOOM_EW_BINARY(le, infer_compare, NULL)
LOOM_EW_BINARY(gt, infer_compare, NULL)
LOOM_EW_BINARY(ge, infer_compare, NULL)

const loom_op_def loom_opdef_select = {
    .name = "select",
    .cls = LOOM_OPCLASS_ELEMENTWISE,
    .min_in = 3,
    .max_in = 3,
    .n_out = 1,
    .infer = infer_select,
    .ref = ref_select,
    .grad = loom_grad_select,
    .partition = loom_partition_elementwise,
};

const loom_op_def loom_opdef_cast = {
    .name = "cast",
    .cls = LOOM_OPCLASS_ELEMENTWISE,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(cast),
    .attrs = LOOM_ATTR_SPECS(cast),
    .infer = infer_cast,
    .ref = ref_cast,
    .grad = loom_grad_cast,
    .partition = loom_partition_elementwise,
};

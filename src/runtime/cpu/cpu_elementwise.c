/*
 * Element-wise kernels of the cpu backend: f32 unary and binary math,
 * comparisons (f32, i32, i64), select (any dtype) and cast (to or from a
 * float dtype), all with NumPy broadcasting through the n-d iterator.
 *
 * Results equal the reference kernels bit for bit except for tanh: the
 * reference computes in double and rounds once; +, -, *, /, sqrt, min/max
 * and comparisons give the same bits in float, and exp, pow, erf, ... are
 * computed here in double too. tanh uses a cheaper double formula (within
 * about 1e-7 relative, so at most an ulp apart after rounding).
 */
#include "runtime/cpu/cpu.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

/* ---- unary f32 ---------------------------------------------------------- */

#define UN(T, expr)                                                                                \
  if (sx == 1) {                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                              \
      T v = x[i];                                                                                  \
      o[i] = (float)(expr);                                                                        \
    }                                                                                              \
  } else {                                                                                         \
    for (int64_t i = 0; i < n; i++) {                                                              \
      T v = x[i * sx];                                                                             \
      o[i] = (float)(expr);                                                                        \
    }                                                                                              \
  }                                                                                                \
  break

static double sigmoid(double v) {
  if (v >= 0) return 1.0 / (1.0 + exp(-v));
  double e = exp(v);
  return e / (1.0 + e);
}

/* tanh through one exp (3x cheaper than libm's tanh); a Taylor series
 * near 0 where 1 - 2/(e+1) would cancel. */
static double fast_tanh(double v) {
  if (fabs(v) < 0.01) {
    double v2 = v * v;
    return v * (1.0 - v2 * (1.0 / 3.0 - v2 * (2.0 / 15.0 - v2 * (17.0 / 315.0))));
  }
  return 1.0 - 2.0 / (exp(2.0 * v) + 1.0);
}

static void unary_row(loom_op op, float *restrict o, const float *restrict x, int64_t sx,
                      int64_t n) {
  switch (op) {
  case LOOM_OP_NEG: UN(float, -v);
  case LOOM_OP_ABS: UN(float, fabsf(v));
  case LOOM_OP_SIGN: UN(float, v > 0 ? 1.0f : v < 0 ? -1.0f : v);
  case LOOM_OP_RELU: UN(float, v < 0 ? 0.0f : v);
  case LOOM_OP_SQRT: UN(float, sqrtf(v));
  case LOOM_OP_RECIPROCAL: UN(float, 1.0f / v);
  case LOOM_OP_EXP: UN(double, exp(v));
  case LOOM_OP_LOG: UN(double, log(v));
  case LOOM_OP_RSQRT: UN(double, 1.0 / sqrt(v));
  case LOOM_OP_TANH: UN(double, fast_tanh(v));
  case LOOM_OP_SIGMOID: UN(double, sigmoid(v));
  case LOOM_OP_ERF: UN(double, erf(v));
  case LOOM_OP_SIN: UN(double, sin(v));
  case LOOM_OP_COS: UN(double, cos(v));
  default: break;
  }
}

static loom_status k_unary(const loom_cpu *c, const loom_node *n, const loom_view *in,
                           const loom_view *out) {
  loom_view v[2] = {out[0], loom_view_broadcast(&in[0], out[0].rank, out[0].shape)};
  loom_cpu_iter it;
  loom_cpu_iter_init(&it, 2, v);
  float *o = out[0].data;
  const float *x = in[0].data;
  int64_t sx = it.stride[1][it.rank - 1];
  int64_t tasks = loom_cpu_iter_tasks(&it), total = loom_cpu_iter_numel(&it);
  loom_op op = n->op;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t off[2], len;
    loom_cpu_iter_task(&it, t, off, &len);
    unary_row(op, o + off[0], x + off[1], sx, len);
  }
  return LOOM_STATUS_OK;
}

/* ---- binary f32 and comparisons ----------------------------------------- */

/* Four loops per op so the common unit-stride and scalar cases vectorise. */
#define BIN(TI, expr)                                                                              \
  if (sa == 1 && sb == 1) {                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                              \
      TI a = A[i], b = B[i];                                                                       \
      o[i] = (expr);                                                                               \
    }                                                                                              \
  } else if (sa == 0 && sb == 1) {                                                                 \
    TI a = A[0];                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                              \
      TI b = B[i];                                                                                 \
      o[i] = (expr);                                                                               \
    }                                                                                              \
  } else if (sa == 1 && sb == 0) {                                                                 \
    TI b = B[0];                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                              \
      TI a = A[i];                                                                                 \
      o[i] = (expr);                                                                               \
    }                                                                                              \
  } else {                                                                                         \
    for (int64_t i = 0; i < n; i++) {                                                              \
      TI a = A[i * sa], b = B[i * sb];                                                             \
      o[i] = (expr);                                                                               \
    }                                                                                              \
  }                                                                                                \
  break

static void binary_row(loom_op op, float *restrict o, const float *restrict A, int64_t sa,
                       const float *restrict B, int64_t sb, int64_t n) {
  switch (op) {
  case LOOM_OP_ADD: BIN(float, a + b);
  case LOOM_OP_SUB: BIN(float, a - b);
  case LOOM_OP_MUL: BIN(float, a *b);
  case LOOM_OP_DIV: BIN(float, a / b);
  case LOOM_OP_POW: BIN(float, (float)pow((double)a, (double)b));
  /* NaN-propagating, like the reference */
  case LOOM_OP_MAXIMUM: BIN(float, a != a ? a : b != b ? b : a > b ? a : b);
  case LOOM_OP_MINIMUM: BIN(float, a != a ? a : b != b ? b : a < b ? a : b);
  default: break;
  }
}

#define COMPARE_ROW(T)                                                                             \
  static void compare_row_##T(loom_op op, uint8_t *restrict o, const T *restrict A, int64_t sa,    \
                              const T *restrict B, int64_t sb, int64_t n) {                        \
    switch (op) {                                                                                  \
    case LOOM_OP_EQ: BIN(T, a == b);                                                               \
    case LOOM_OP_NE: BIN(T, a != b);                                                               \
    case LOOM_OP_LT: BIN(T, a < b);                                                                \
    case LOOM_OP_LE: BIN(T, a <= b);                                                               \
    case LOOM_OP_GT: BIN(T, a > b);                                                                \
    case LOOM_OP_GE: BIN(T, a >= b);                                                               \
    default: break;                                                                                \
    }                                                                                              \
  }
COMPARE_ROW(float)
COMPARE_ROW(int32_t)
COMPARE_ROW(int64_t)

static loom_status k_binary(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  loom_view v[3] = {out[0], loom_view_broadcast(&in[0], out[0].rank, out[0].shape),
                    loom_view_broadcast(&in[1], out[0].rank, out[0].shape)};
  loom_cpu_iter it;
  loom_cpu_iter_init(&it, 3, v);
  int32_t L = it.rank - 1;
  int64_t sa = it.stride[1][L], sb = it.stride[2][L];
  int64_t tasks = loom_cpu_iter_tasks(&it), total = loom_cpu_iter_numel(&it);
  loom_op op = n->op;
  loom_dtype dt = in[0].dtype;
  bool cmp = out[0].dtype == LOOM_DTYPE_BOOL;
  char *o = out[0].data;
  const char *a = in[0].data, *b = in[1].data;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t off[3], len;
    loom_cpu_iter_task(&it, t, off, &len);
    if (!cmp) {
      binary_row(op, (float *)o + off[0], (const float *)a + off[1], sa, (const float *)b + off[2],
                 sb, len);
    } else if (dt == LOOM_DTYPE_F32) {
      compare_row_float(op, (uint8_t *)o + off[0], (const float *)a + off[1], sa,
                        (const float *)b + off[2], sb, len);
    } else if (dt == LOOM_DTYPE_I32) {
      compare_row_int32_t(op, (uint8_t *)o + off[0], (const int32_t *)a + off[1], sa,
                          (const int32_t *)b + off[2], sb, len);
    } else {
      compare_row_int64_t(op, (uint8_t *)o + off[0], (const int64_t *)a + off[1], sa,
                          (const int64_t *)b + off[2], sb, len);
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- select: bytes, any dtype ------------------------------------------- */

#define SELECT_LOOP(T)                                                                             \
  do {                                                                                             \
    T *o_ = (T *)op;                                                                               \
    const T *a_ = (const T *)ap, *b_ = (const T *)bp;                                              \
    for (int64_t i = 0; i < len; i++)                                                              \
      o_[i] = cp[i * sc] ? a_[i * sa] : b_[i * sb];                                                \
  } while (0)

static loom_status k_select(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  (void)n;
  loom_view v[4] = {out[0]};
  for (int32_t k = 0; k < 3; k++)
    v[k + 1] = loom_view_broadcast(&in[k], out[0].rank, out[0].shape);
  loom_cpu_iter it;
  loom_cpu_iter_init(&it, 4, v);
  int32_t L = it.rank - 1;
  int64_t sc = it.stride[1][L], sa = it.stride[2][L], sb = it.stride[3][L];
  int64_t tasks = loom_cpu_iter_tasks(&it), total = loom_cpu_iter_numel(&it);
  int64_t es = (int64_t)loom_dtype_size(out[0].dtype);
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t off[4], len;
    loom_cpu_iter_task(&it, t, off, &len);
    char *op = (char *)out[0].data + off[0] * es;
    const uint8_t *cp = (const uint8_t *)in[0].data + off[1];
    const char *ap = (const char *)in[1].data + off[2] * es;
    const char *bp = (const char *)in[2].data + off[3] * es;
    switch (es) {
    case 1: SELECT_LOOP(uint8_t); break;
    case 2: SELECT_LOOP(uint16_t); break;
    case 4: SELECT_LOOP(uint32_t); break;
    default: SELECT_LOOP(uint64_t); break;
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- cast ---------------------------------------------------------------- */

/* Through double with loom_load/loom_store: the reference's conversion. */
static loom_status k_cast(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out) {
  (void)n;
  int64_t total = loom_view_numel(&out[0]);
  loom_dtype sd = in[0].dtype, dd = out[0].dtype;
  const void *s = in[0].data;
  void *d = out[0].data;
  if (sd == LOOM_DTYPE_F32 && dd == LOOM_DTYPE_F32) {
    loom_cpu_copy(c, &out[0], &in[0]);
    return LOOM_STATUS_OK;
  }
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < total; i++)
    loom_store(dd, d, i, loom_load(sd, s, i));
  return LOOM_STATUS_OK;
}

/* ---- selection ----------------------------------------------------------- */

static loom_dtype vdt(const loom_graph *g, int32_t v) { return g->values[v].type.dtype; }

loom_cpu_kernel loom_cpu_elementwise_kernel(const loom_graph *g, const loom_node *n) {
  loom_dtype out = vdt(g, n->out[0]);
  switch (n->op) {
  case LOOM_OP_SELECT: {
    size_t es = loom_dtype_size(out);
    return vdt(g, n->in[0]) == LOOM_DTYPE_BOOL && vdt(g, n->in[1]) == out &&
                   vdt(g, n->in[2]) == out && (es == 1 || es == 2 || es == 4 || es == 8)
               ? k_select
               : NULL;
  }
  case LOOM_OP_CAST: {
    loom_dtype in = vdt(g, n->in[0]);
    /* int -> int stays exact only through int64: the reference's job */
    bool ok = loom_dtype_valid(in) && loom_dtype_valid(out) &&
              (loom_dtype_is_float(in) || loom_dtype_is_float(out));
    return ok ? k_cast : NULL;
  }
  case LOOM_OP_EQ:
  case LOOM_OP_NE:
  case LOOM_OP_LT:
  case LOOM_OP_LE:
  case LOOM_OP_GT:
  case LOOM_OP_GE: {
    loom_dtype in = vdt(g, n->in[0]);
    bool ok = out == LOOM_DTYPE_BOOL && vdt(g, n->in[1]) == in &&
              (in == LOOM_DTYPE_F32 || in == LOOM_DTYPE_I32 || in == LOOM_DTYPE_I64);
    return ok ? k_binary : NULL;
  }
  default: break;
  }
  if (out != LOOM_DTYPE_F32) return NULL;
  for (int32_t i = 0; i < n->n_in; i++)
    if (vdt(g, n->in[i]) != LOOM_DTYPE_F32) return NULL;
  switch (n->op) {
  case LOOM_OP_NEG:
  case LOOM_OP_ABS:
  case LOOM_OP_SIGN:
  case LOOM_OP_RELU:
  case LOOM_OP_SQRT:
  case LOOM_OP_RECIPROCAL:
  case LOOM_OP_EXP:
  case LOOM_OP_LOG:
  case LOOM_OP_RSQRT:
  case LOOM_OP_TANH:
  case LOOM_OP_SIGMOID:
  case LOOM_OP_ERF:
  case LOOM_OP_SIN:
  case LOOM_OP_COS: return n->n_in == 1 ? k_unary : NULL;
  case LOOM_OP_ADD:
  case LOOM_OP_SUB:
  case LOOM_OP_MUL:
  case LOOM_OP_DIV:
  case LOOM_OP_POW:
  case LOOM_OP_MAXIMUM:
  case LOOM_OP_MINIMUM: return n->n_in == 2 ? k_binary : NULL;
  default: return NULL;
  }
}

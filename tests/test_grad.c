/*
 * Autodiff: every gradient rule and every composite against central finite
 * differences, in f64 on the reference backend. Each case builds y = f(x...)
 * and loss = sum_k reduce_sum(y_k * w_k) with fixed random weights w_k (so
 * every output element matters), then compares d(loss)/dx from
 * loom_graph_grad with (loss(x + h) - loss(x - h)) / 2h per element.
 */
#include "common.h"

#include "ir/graph.h"
#include "passes/decompose.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN 12
#define MAX_Y 4
#define FD_H 1e-6
#define FD_ATOL 1e-6
#define FD_RTOL 1e-6

/* One test case: a graph, its inputs' values and which inputs are
 * differentiated. */
typedef struct tc {
  const char *name;
  loom_ctx *ctx;
  loom_graph *g;
  int32_t n;
  loom_value v[MAX_IN];
  loom_tensor *t[MAX_IN];
  bool diff[MAX_IN];
  loom_test_rng rng;
} tc;

#define A_INT(nm, val) ((loom_attr){.name = (nm), .kind = LOOM_ATTR_INT, .i = (val)})
#define A_F(nm, val) ((loom_attr){.name = (nm), .kind = LOOM_ATTR_FLOAT, .f = (val)})
#define A_INTS(nm, cnt, ...)                                                   \
  ((loom_attr){.name = (nm), .kind = LOOM_ATTR_INTS, .n_ints = (cnt),          \
               .ints = (const int64_t[]){__VA_ARGS__}})
#define SHAPE(...) (const int64_t[]){__VA_ARGS__}

static loom_ctx *g_ctx;
static int32_t g_case_seed = 1;

static void tc_begin(tc *c, const char *name) {
  memset(c, 0, sizeof *c);
  c->name = name;
  c->ctx = g_ctx;
  c->rng.s = 0x9E3779B97F4A7C15ull * (uint64_t)(g_case_seed++);
  CHECK_OK(c->ctx, loom_graph_new(c->ctx, &c->g));
}

static loom_value tc_add(tc *c, const char *nm, loom_dtype dt, int32_t rank,
                         const int64_t *shape, bool diff) {
  loom_value v = LOOM_VALUE_NONE;
  if (c->n >= MAX_IN) {
    fprintf(stderr, "%s: too many inputs\n", c->name);
    loom_test_failures++;
    return v;
  }
  CHECK_OK(c->ctx, loom_graph_input(c->g, nm, dt, rank, shape, &v));
  CHECK_OK(c->ctx, loom_tensor_new(c->ctx, dt, rank, shape, &c->t[c->n]));
  c->v[c->n] = v;
  c->diff[c->n] = diff;
  c->n++;
  return v;
}

/* An f64 input with values uniform in [lo, hi]; with away > 0, values are
 * pushed out of (-away, away) (kinks at 0). */
static loom_value tc_in(tc *c, const char *nm, int32_t rank, const int64_t *shape,
                        double lo, double hi, double away, bool diff) {
  loom_value v = tc_add(c, nm, LOOM_DTYPE_F64, rank, shape, diff);
  if (v < 0) return v;
  loom_tensor *t = c->t[c->n - 1];
  double *p = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) {
    double x = loom_test_uniform(&c->rng, lo, hi);
    if (away > 0 && fabs(x) < away) x = x < 0 ? x - away : x + away;
    p[i] = x;
  }
  return v;
}

/* An f64 input with the given values. */
static loom_value tc_in_vals(tc *c, const char *nm, int32_t rank,
                             const int64_t *shape, const double *vals, bool diff) {
  loom_value v = tc_add(c, nm, LOOM_DTYPE_F64, rank, shape, diff);
  if (v < 0) return v;
  loom_tensor *t = c->t[c->n - 1];
  memcpy(loom_tensor_data(t), vals, sizeof(double) * (size_t)loom_tensor_numel(t));
  return v;
}

/* An i64 input with the given values (indices, labels, counters). */
static loom_value tc_in_i64(tc *c, const char *nm, int32_t rank,
                            const int64_t *shape, const int64_t *vals) {
  loom_value v = tc_add(c, nm, LOOM_DTYPE_I64, rank, shape, false);
  if (v < 0) return v;
  loom_tensor *t = c->t[c->n - 1];
  memcpy(loom_tensor_data(t), vals, sizeof(int64_t) * (size_t)loom_tensor_numel(t));
  return v;
}

static loom_value op(tc *c, loom_op o, int32_t n_in, const loom_value *in,
                     int32_t n_attrs, const loom_attr *attrs) {
  loom_value y = LOOM_VALUE_NONE;
  CHECK_OK(c->ctx, loom_graph_op(c->g, o, n_in, in, n_attrs, attrs, &y));
  return y;
}

static loom_value op1(tc *c, loom_op o, loom_value a) { return op(c, o, 1, &a, 0, NULL); }
static loom_value op2(tc *c, loom_op o, loom_value a, loom_value b) {
  return op(c, o, 2, (loom_value[]){a, b}, 0, NULL);
}

static void free_case(tc *c) {
  for (int32_t i = 0; i < c->n; i++) loom_tensor_free(c->t[i]);
  loom_graph_free(c->g);
  c->g = NULL;
  c->n = 0;
}

/* The loss value sum_k reduce_sum(y_k * w_k), w_k new non-differentiated
 * inputs with fixed random values. */
static loom_value build_loss(tc *c, int32_t n_y, const loom_value *y) {
  loom_value loss = LOOM_VALUE_NONE;
  for (int32_t k = 0; k < n_y; k++) {
    loom_dtype dt;
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    CHECK_OK(c->ctx, loom_graph_value_type(c->g, y[k], &dt, &rank, shape));
    char nm[16];
    snprintf(nm, sizeof nm, "w%d", (int)k);
    loom_value w = tc_in(c, nm, rank, shape, -1.0, 1.0, 0.0, false);
    loom_value s = op1(c, LOOM_OP_REDUCE_SUM, op2(c, LOOM_OP_MUL, y[k], w));
    loss = k ? op2(c, LOOM_OP_ADD, loss, s) : s;
  }
  return loss;
}

/* A prepared case: session, output tensors (loss, then the gradients). */
typedef struct prepared {
  loom_session *s;
  int32_t n_wrt;
  int32_t wrt_input[MAX_IN]; /* index into c->t */
  loom_tensor *out[MAX_IN + 1];
} prepared;

static bool prepare(tc *c, loom_value loss, prepared *p) {
  memset(p, 0, sizeof *p);
  loom_value wrt[MAX_IN], grads[MAX_IN];
  for (int32_t i = 0; i < c->n; i++)
    if (c->diff[i]) {
      p->wrt_input[p->n_wrt] = i;
      wrt[p->n_wrt++] = c->v[i];
    }
  int before = loom_test_failures;
  CHECK_OK(c->ctx, loom_graph_grad(c->g, loss, p->n_wrt, wrt, grads));
  CHECK_OK(c->ctx, loom_graph_verify(c->g));
  CHECK_OK(c->ctx, loom_graph_output(c->g, "loss", loss));
  for (int32_t i = 0; i < p->n_wrt; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "grad%d", (int)i);
    CHECK_OK(c->ctx, loom_graph_output(c->g, nm, grads[i]));
  }
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c->ctx, loom_session_new(c->ctx, c->g, &opts, &p->s));
  if (loom_test_failures != before) {
    fprintf(stderr, "  (in case %s)\n", c->name);
    return false;
  }
  return true;
}

static bool run(tc *c, prepared *p) {
  loom_status st = loom_session_run(p->s, c->n, (const loom_tensor *const *)c->t,
                                    p->n_wrt + 1, p->out);
  if (st != LOOM_STATUS_OK) {
    loom_test_failures++;
    fprintf(stderr, "%s: run failed: %s\n", c->name, loom_ctx_error(c->ctx));
    return false;
  }
  return true;
}

static void unprepare(prepared *p) {
  for (int32_t i = 0; i <= p->n_wrt; i++) loom_tensor_free(p->out[i]);
  loom_session_free(p->s);
}

/* Analytic gradients against central differences, element by element. */
static void check_fd(tc *c, int32_t n_y, const loom_value *y) {
  loom_value loss = build_loss(c, n_y, y);
  prepared p;
  if (!prepare(c, loss, &p) || !run(c, &p)) {
    unprepare(&p);
    free_case(c);
    return;
  }
  /* keep the analytic gradients: later runs overwrite the outputs */
  double *ana[MAX_IN] = {NULL};
  for (int32_t k = 0; k < p.n_wrt; k++) {
    int64_t n = loom_tensor_numel(p.out[k + 1]);
    ana[k] = malloc(sizeof(double) * (size_t)(n ? n : 1));
    memcpy(ana[k], loom_tensor_data(p.out[k + 1]), sizeof(double) * (size_t)n);
  }
  int bad = 0;
  for (int32_t k = 0; k < p.n_wrt && bad < 5; k++) {
    loom_tensor *t = c->t[p.wrt_input[k]];
    double *x = loom_tensor_data(t);
    for (int64_t i = 0; i < loom_tensor_numel(t) && bad < 5; i++) {
      double x0 = x[i], lp, lm;
      x[i] = x0 + FD_H;
      if (!run(c, &p)) break;
      lp = *(double *)loom_tensor_data(p.out[0]);
      x[i] = x0 - FD_H;
      if (!run(c, &p)) break;
      lm = *(double *)loom_tensor_data(p.out[0]);
      x[i] = x0;
      double num = (lp - lm) / (2 * FD_H), an = ana[k][i];
      loom_test_checks++;
      if (!(fabs(an - num) <= FD_ATOL + FD_RTOL * fabs(num))) {
        loom_test_failures++;
        bad++;
        fprintf(stderr, "%s: d loss / d %s[%lld]: analytic %.10g, numeric %.10g\n",
                c->name, loom_graph_input_name(c->g, p.wrt_input[k]), (long long)i, an,
                num);
      }
    }
  }
  for (int32_t k = 0; k < p.n_wrt; k++) free(ana[k]);
  unprepare(&p);
  free_case(c);
}

static void check_fd1(tc *c, loom_value y) { check_fd(c, 1, &y); }

/* ---- element-wise -------------------------------------------------------- */

static void test_unary(void) {
  static const struct {
    loom_op op;
    double lo, hi, away;
  } cases[] = {
      {LOOM_OP_NEG, -2, 2, 0},          {LOOM_OP_ABS, -2, 2, 0.05},
      {LOOM_OP_EXP, -2, 2, 0},          {LOOM_OP_LOG, 0.2, 3, 0},
      {LOOM_OP_SQRT, 0.2, 3, 0},        {LOOM_OP_RSQRT, 0.2, 3, 0},
      {LOOM_OP_RECIPROCAL, 0.3, 3, 0},  {LOOM_OP_RECIPROCAL, -3, -0.3, 0},
      {LOOM_OP_TANH, -2, 2, 0},         {LOOM_OP_SIGMOID, -3, 3, 0},
      {LOOM_OP_RELU, -2, 2, 0.05},      {LOOM_OP_ERF, -2, 2, 0},
      {LOOM_OP_SIN, -3, 3, 0},          {LOOM_OP_COS, -3, 3, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tc c;
    tc_begin(&c, loom_op_name(cases[i].op));
    loom_value x = tc_in(&c, "x", 2, SHAPE(3, 5), cases[i].lo, cases[i].hi, cases[i].away, true);
    check_fd1(&c, op1(&c, cases[i].op, x));
  }
}

static void test_binary(void) {
  static const struct {
    loom_op op;
    double alo, ahi, blo, bhi;
  } cases[] = {
      {LOOM_OP_ADD, -2, 2, -2, 2},     {LOOM_OP_SUB, -2, 2, -2, 2},
      {LOOM_OP_MUL, -2, 2, -2, 2},     {LOOM_OP_DIV, -2, 2, 0.5, 2},
      {LOOM_OP_POW, 0.3, 2.5, -1.5, 2.5}, {LOOM_OP_MAXIMUM, -2, 2, -2, 2},
      {LOOM_OP_MINIMUM, -2, 2, -2, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_op o = cases[i].op;
    /* broadcasting both ways with size-1 dims: [2,1,5] with [3,1] */
    tc c;
    tc_begin(&c, loom_op_name(o));
    loom_value a = tc_in(&c, "a", 3, SHAPE(2, 1, 5), cases[i].alo, cases[i].ahi, 0, true);
    loom_value b = tc_in(&c, "b", 2, SHAPE(3, 1), cases[i].blo, cases[i].bhi, 0, true);
    check_fd1(&c, op2(&c, o, a, b));
    /* same shapes, and a rank-0 operand on the left */
    tc_begin(&c, loom_op_name(o));
    a = tc_in(&c, "a", 2, SHAPE(3, 4), cases[i].alo, cases[i].ahi, 0, true);
    b = tc_in(&c, "b", 2, SHAPE(3, 4), cases[i].blo, cases[i].bhi, 0, true);
    loom_value s = tc_in(&c, "s", 0, NULL, cases[i].alo, cases[i].ahi, 0, true);
    check_fd1(&c, op2(&c, o, s, op2(&c, o, a, b)));
  }
}

/* pow at a == 0 (b > 0): finite gradients, d/db = 0 there. */
static void test_pow_zero_base(void) {
  tc c;
  tc_begin(&c, "pow zero base");
  loom_value a = tc_in_vals(&c, "a", 1, SHAPE(3), (const double[]){0.0, 0.0, 2.0}, false);
  loom_value b = tc_in_vals(&c, "b", 1, SHAPE(3), (const double[]){2.0, 3.5, 2.0}, true);
  loom_value y = op2(&c, LOOM_OP_POW, a, b);
  loom_value loss = op1(&c, LOOM_OP_REDUCE_SUM, y);
  loom_value gb = LOOM_VALUE_NONE;
  CHECK_OK(c.ctx, loom_graph_grad(c.g, loss, 1, &b, &gb));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gb", gb));
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
  loom_tensor *out = NULL;
  CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 1, &out));
  if (out) {
    const double *v = loom_tensor_data(out);
    CHECK(v[0] == 0.0 && v[1] == 0.0);
    CHECK(fabs(v[2] - 4.0 * log(2.0)) < 1e-12);
  }
  loom_tensor_free(out);
  loom_session_free(s);
  free_case(&c);
}

static void test_select_cast(void) {
  tc c;
  /* select with a broadcast condition and branches; the condition comes
   * from a comparison of a differentiated value (no gradient through it) */
  tc_begin(&c, "select");
  loom_value a = tc_in(&c, "a", 3, SHAPE(2, 3, 4), -2, 2, 0, true);
  loom_value b = tc_in(&c, "b", 2, SHAPE(3, 1), -2, 2, 0, true);
  loom_value t = tc_in(&c, "t", 1, SHAPE(4), -2, 2, 0, false);
  loom_value cond = op2(&c, LOOM_OP_GT, t, b); /* [3,4] */
  check_fd1(&c, op(&c, LOOM_OP_SELECT, 3, (loom_value[]){cond, a, b}, 0, NULL));

  /* f64 -> f64 cast, and a path through an integer cast carries nothing:
   * y = x * float(int(x)) has dy/dx = float(int(x)) away from integers */
  tc_begin(&c, "cast");
  loom_value x = tc_in_vals(&c, "x", 2, SHAPE(2, 3),
                            (const double[]){0.3, 1.4, -2.6, 3.2, -0.7, 2.5}, true);
  loom_value same = op(&c, LOOM_OP_CAST, 1, &x, 1, (loom_attr[]){A_INT("dtype", LOOM_DTYPE_F64)});
  loom_value xi = op(&c, LOOM_OP_CAST, 1, &x, 1, (loom_attr[]){A_INT("dtype", LOOM_DTYPE_I64)});
  loom_value xf = op(&c, LOOM_OP_CAST, 1, &xi, 1, (loom_attr[]){A_INT("dtype", LOOM_DTYPE_F64)});
  check_fd1(&c, op2(&c, LOOM_OP_MUL, same, xf));
}

/* A cast to f32 and back: the gradient of x is the f32 weight, as f64. */
static void test_cast_f32(void) {
  tc c;
  tc_begin(&c, "cast f32");
  loom_value x = tc_in(&c, "x", 2, SHAPE(3, 4), -2, 2, 0, true);
  loom_value w = tc_add(&c, "w", LOOM_DTYPE_F32, 2, SHAPE(3, 4), false);
  float *wv = loom_tensor_data(c.t[c.n - 1]);
  for (int i = 0; i < 12; i++) wv[i] = (float)loom_test_uniform(&c.rng, -1, 1);
  loom_value y = op(&c, LOOM_OP_CAST, 1, &x, 1, (loom_attr[]){A_INT("dtype", LOOM_DTYPE_F32)});
  loom_value z = op2(&c, LOOM_OP_MUL, y, w);
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, z);
  l = op(&c, LOOM_OP_CAST, 1, &l, 1, (loom_attr[]){A_INT("dtype", LOOM_DTYPE_F64)});
  loom_value gx = LOOM_VALUE_NONE;
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 1, &x, &gx));
  loom_dtype dt = LOOM_DTYPE_COUNT;
  CHECK_OK(c.ctx, loom_graph_value_type(c.g, gx, &dt, NULL, NULL));
  CHECK(dt == LOOM_DTYPE_F64);
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gx", gx));
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
  loom_tensor *out = NULL;
  CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 1, &out));
  if (out) {
    const double *gv = loom_tensor_data(out);
    int ok = 0;
    for (int i = 0; i < 12; i++) ok += gv[i] == (double)wv[i];
    CHECK(ok == 12);
  }
  loom_tensor_free(out);
  loom_session_free(s);
  free_case(&c);
}

/* ---- reductions ---------------------------------------------------------- */

static void test_reduce(void) {
  static const loom_op ops[] = {LOOM_OP_REDUCE_SUM, LOOM_OP_REDUCE_MAX, LOOM_OP_REDUCE_MIN};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    tc c;
    tc_begin(&c, loom_op_name(ops[i]));
    loom_value x = tc_in(&c, "x", 3, SHAPE(3, 4, 5), -2, 2, 0, true);
    check_fd1(&c, op(&c, ops[i], 1, &x, 1, (loom_attr[]){A_INTS("axes", 1, 1)}));

    tc_begin(&c, loom_op_name(ops[i]));
    x = tc_in(&c, "x", 3, SHAPE(3, 1, 5), -2, 2, 0, true);
    check_fd1(&c, op(&c, ops[i], 1, &x, 2,
                     (loom_attr[]){A_INTS("axes", 2, 0, -1), A_INT("keepdims", 1)}));

    tc_begin(&c, loom_op_name(ops[i]));
    x = tc_in(&c, "x", 2, SHAPE(3, 7), -2, 2, 0, true);
    check_fd1(&c, op1(&c, ops[i], x)); /* all axes */

    tc_begin(&c, loom_op_name(ops[i]));
    x = tc_in(&c, "x", 2, SHAPE(2, 3), -2, 2, 0, true);
    check_fd1(&c, op(&c, ops[i], 1, &x, 1, (loom_attr[]){A_INTS("axes", 1, 1)}));
  }
}

/* Ties share the gradient equally: max of {1, 3, 3, 2} and min of {2, 0, 0, 0}. */
static void test_reduce_ties(void) {
  static const struct {
    loom_op op;
    double x[4], want[4];
  } cases[] = {
      {LOOM_OP_REDUCE_MAX, {1, 3, 3, 2}, {0, 0.5, 0.5, 0}},
      {LOOM_OP_REDUCE_MIN, {2, 0, 0, 0}, {0, 1.0 / 3, 1.0 / 3, 1.0 / 3}},
  };
  for (size_t k = 0; k < 2; k++) {
    tc c;
    tc_begin(&c, "reduce ties");
    loom_value x = tc_in_vals(&c, "x", 1, SHAPE(4), cases[k].x, true);
    loom_value l = op1(&c, cases[k].op, x);
    loom_value gx = LOOM_VALUE_NONE;
    CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 1, &x, &gx));
    CHECK_OK(c.ctx, loom_graph_output(c.g, "gx", gx));
    loom_session *s = NULL;
    loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
    CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
    loom_tensor *out = NULL;
    CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 1, &out));
    if (out) {
      const double *v = loom_tensor_data(out);
      for (int i = 0; i < 4; i++) CHECK(fabs(v[i] - cases[k].want[i]) < 1e-15);
    }
    loom_tensor_free(out);
    loom_session_free(s);
    free_case(&c);
  }
}

/* maximum/minimum ties split the gradient in half between the operands. */
static void test_extremum_ties(void) {
  static const loom_op ops[] = {LOOM_OP_MAXIMUM, LOOM_OP_MINIMUM};
  for (size_t k = 0; k < 2; k++) {
    tc c;
    tc_begin(&c, "maximum/minimum ties");
    loom_value a = tc_in_vals(&c, "a", 1, SHAPE(3), (const double[]){1, 2, 3}, true);
    loom_value b = tc_in_vals(&c, "b", 1, SHAPE(3), (const double[]){2, 2, 2}, true);
    loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, op2(&c, ops[k], a, b));
    loom_value gr[2] = {LOOM_VALUE_NONE, LOOM_VALUE_NONE};
    CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 2, (loom_value[]){a, b}, gr));
    CHECK_OK(c.ctx, loom_graph_output(c.g, "ga", gr[0]));
    CHECK_OK(c.ctx, loom_graph_output(c.g, "gb", gr[1]));
    loom_session *s = NULL;
    loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
    CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
    loom_tensor *out[2] = {NULL, NULL};
    CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 2, out));
    if (out[0] && out[1]) {
      const double *ga = loom_tensor_data(out[0]), *gb = loom_tensor_data(out[1]);
      double wa0 = k ? 1 : 0, wa2 = k ? 0 : 1; /* a wins at 3 (max) / 1 (min) */
      CHECK(ga[0] == wa0 && ga[1] == 0.5 && ga[2] == wa2);
      CHECK(gb[0] == 1 - wa0 && gb[1] == 0.5 && gb[2] == 1 - wa2);
    }
    for (int i = 0; i < 2; i++) loom_tensor_free(out[i]);
    loom_session_free(s);
    free_case(&c);
  }
}

/* ---- layout -------------------------------------------------------------- */

static void test_layout(void) {
  tc c;
  tc_begin(&c, "reshape");
  loom_value x = tc_in(&c, "x", 3, SHAPE(2, 3, 4), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_RESHAPE, 1, &x, 1, (loom_attr[]){A_INTS("shape", 4, 4, 1, 6, 1)}));

  tc_begin(&c, "transpose");
  x = tc_in(&c, "x", 3, SHAPE(2, 3, 5), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_TRANSPOSE, 1, &x, 1, (loom_attr[]){A_INTS("perm", 3, 2, 0, 1)}));

  tc_begin(&c, "broadcast_to");
  x = tc_in(&c, "x", 2, SHAPE(3, 1), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_BROADCAST_TO, 1, &x, 1,
                   (loom_attr[]){A_INTS("shape", 3, 2, 3, 4)}));

  tc_begin(&c, "slice");
  x = tc_in(&c, "x", 2, SHAPE(4, 5), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_SLICE, 1, &x, 2,
                   (loom_attr[]){A_INTS("starts", 2, 1, -3), A_INTS("ends", 2, 3, 5)}));

  tc_begin(&c, "concat");
  loom_value a = tc_in(&c, "a", 3, SHAPE(2, 1, 3), -2, 2, 0, true);
  loom_value b = tc_in(&c, "b", 3, SHAPE(2, 3, 3), -2, 2, 0, true);
  loom_value d = tc_in(&c, "d", 3, SHAPE(2, 2, 3), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONCAT, 3, (loom_value[]){a, b, d}, 1,
                   (loom_attr[]){A_INT("axis", -2)}));

  tc_begin(&c, "concat same input twice");
  a = tc_in(&c, "a", 2, SHAPE(2, 3), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONCAT, 2, (loom_value[]){a, a}, 1,
                   (loom_attr[]){A_INT("axis", 0)}));

  tc_begin(&c, "pad");
  x = tc_in(&c, "x", 2, SHAPE(2, 3), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_PAD, 1, &x, 3,
                   (loom_attr[]){A_INTS("lo", 2, 1, 0), A_INTS("hi", 2, 2, 1),
                                 A_F("value", 0.5)}));
}

/* ---- indexing ------------------------------------------------------------ */

static void test_index(void) {
  tc c;
  /* repeated indices accumulate */
  tc_begin(&c, "gather axis 0");
  loom_value data = tc_in(&c, "data", 2, SHAPE(4, 3), -2, 2, 0, true);
  loom_value idx = tc_in_i64(&c, "idx", 2, SHAPE(2, 3), (const int64_t[]){3, 0, 3, 1, 1, 3}), upd;
  check_fd1(&c, op(&c, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 1,
                   (loom_attr[]){A_INT("axis", 0)}));

  tc_begin(&c, "gather axis 1");
  data = tc_in(&c, "data", 3, SHAPE(2, 5, 3), -2, 2, 0, true);
  idx = tc_in_i64(&c, "idx", 1, SHAPE(4), (const int64_t[]){4, 0, 4, 2});
  check_fd1(&c, op(&c, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 1,
                   (loom_attr[]){A_INT("axis", 1)}));

  /* a table piece (rows [2, 6) of 8): rows read outside it get no gradient */
  tc_begin(&c, "gather of a table piece");
  data = tc_in(&c, "data", 2, SHAPE(4, 3), -2, 2, 0, true);
  idx = tc_in_i64(&c, "idx", 1, SHAPE(5), (const int64_t[]){7, 2, 5, 0, 2});
  check_fd1(&c, op(&c, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 2,
                   (loom_attr[]){A_INT("base", 2), A_INT("range", 8)}));

  tc_begin(&c, "scatter_add into a piece");
  idx = tc_in_i64(&c, "idx", 1, SHAPE(5), (const int64_t[]){2, 0, 3, 2, 1});
  upd = tc_in(&c, "upd", 2, SHAPE(5, 3), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 3,
                   (loom_attr[]){A_INTS("shape", 2, 2, 3), A_INT("base", 1), A_INT("range", 4)}));

  tc_begin(&c, "scatter_add");
  idx = tc_in_i64(&c, "idx", 1, SHAPE(5), (const int64_t[]){2, 0, 2, 2, 1});
  upd = tc_in(&c, "upd", 2, SHAPE(2, 5), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 2,
                   (loom_attr[]){A_INTS("shape", 2, 2, 3), A_INT("axis", 1)}));
}

/* ---- matmul -------------------------------------------------------------- */

static void test_matmul(void) {
  static const struct {
    const char *name;
    int32_t ra, rb;
    int64_t a[4], b[4];
    int ta, tb;
  } cases[] = {
      {"matmul", 2, 2, {3, 4}, {4, 5}, 0, 0},
      {"matmul ta", 2, 2, {4, 3}, {4, 5}, 1, 0},
      {"matmul tb", 2, 2, {3, 4}, {5, 4}, 0, 1},
      {"matmul ta tb", 2, 2, {4, 3}, {5, 4}, 1, 1},
      {"matmul batch broadcast", 4, 3, {2, 1, 3, 4}, {3, 4, 2}, 0, 0},
      {"matmul batch rhs 2d", 3, 2, {5, 1, 4}, {4, 2}, 0, 0},
      {"matmul batch ta tb", 3, 3, {1, 4, 3}, {2, 5, 4}, 1, 1},
      {"matmul batch lhs 2d tb", 2, 3, {3, 4}, {2, 1, 4}, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tc c;
    tc_begin(&c, cases[i].name);
    loom_value a = tc_in(&c, "a", cases[i].ra, cases[i].a, -2, 2, 0, true);
    loom_value b = tc_in(&c, "b", cases[i].rb, cases[i].b, -2, 2, 0, true);
    check_fd1(&c, op(&c, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 2,
                     (loom_attr[]){A_INT("trans_a", cases[i].ta), A_INT("trans_b", cases[i].tb)}));
  }
}

/* ---- convolutions and pools ---------------------------------------------- */

/* conv and conv_transpose wrt input and weights (whose gradients are
 * conv_transpose / conv and conv_grad_weight), the pools wrt their input:
 * 1-d and 2-d, strides, padding, dilation, groups, output_padding,
 * ceil_mode, both avg divisors. */
static void test_windows(void) {
  tc c;
  tc_begin(&c, "conv 1-d strided padded dilated, 2 groups");
  loom_value x = tc_in(&c, "x", 3, SHAPE(2, 4, 9), -2, 2, 0, true);
  loom_value w = tc_in(&c, "w", 3, SHAPE(6, 2, 3), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONV, 2, (loom_value[]){x, w}, 5,
                   (loom_attr[]){A_INTS("strides", 1, 2), A_INTS("pads_lo", 1, 1),
                                 A_INTS("pads_hi", 1, 2), A_INTS("dilations", 1, 2),
                                 A_INT("groups", 2)}));
  tc_begin(&c, "conv 2-d padded");
  x = tc_in(&c, "x", 4, SHAPE(2, 3, 5, 4), -2, 2, 0, true);
  w = tc_in(&c, "w", 4, SHAPE(2, 3, 3, 2), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONV, 2, (loom_value[]){x, w}, 3,
                   (loom_attr[]){A_INTS("strides", 2, 2, 1), A_INTS("pads_lo", 2, 1, 0),
                                 A_INTS("pads_hi", 2, 1, 1)}));
  tc_begin(&c, "conv_transpose 1-d output_padding, 2 groups");
  x = tc_in(&c, "x", 3, SHAPE(2, 4, 5), -2, 2, 0, true);
  w = tc_in(&c, "w", 3, SHAPE(4, 3, 3), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONV_TRANSPOSE, 2, (loom_value[]){x, w}, 5,
                   (loom_attr[]){A_INTS("strides", 1, 2), A_INTS("pads_lo", 1, 1),
                                 A_INTS("output_padding", 1, 1), A_INTS("dilations", 1, 2),
                                 A_INT("groups", 2)}));
  tc_begin(&c, "conv_transpose 2-d");
  x = tc_in(&c, "x", 4, SHAPE(1, 2, 3, 4), -2, 2, 0, true);
  w = tc_in(&c, "w", 4, SHAPE(2, 3, 2, 3), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_CONV_TRANSPOSE, 2, (loom_value[]){x, w}, 2,
                   (loom_attr[]){A_INTS("strides", 2, 2, 2), A_INTS("pads_hi", 2, 1, 0)}));
  static const struct {
    const char *name;
    loom_op op;
    int64_t ceil, include;
  } pools[] = {
      {"max_pool", LOOM_OP_MAX_POOL, 0, 0},
      {"max_pool ceil_mode", LOOM_OP_MAX_POOL, 1, 0},
      {"avg_pool", LOOM_OP_AVG_POOL, 0, 0},
      {"avg_pool count_include_pad", LOOM_OP_AVG_POOL, 0, 1},
      {"avg_pool ceil_mode count_include_pad", LOOM_OP_AVG_POOL, 1, 1},
  };
  for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
    tc_begin(&c, pools[i].name);
    x = tc_in(&c, "x", 4, SHAPE(2, 2, 6, 5), -2, 2, 0, true);
    check_fd1(&c, op(&c, pools[i].op, 1, &x, 6,
                     (loom_attr[]){A_INTS("kernel", 2, 3, 2), A_INTS("strides", 2, 2, 2),
                                   A_INTS("pads_lo", 2, 1, 0), A_INTS("pads_hi", 2, 1, 1),
                                   A_INT("ceil_mode", pools[i].ceil),
                                   A_INT("count_include_pad", pools[i].include)}));
  }
  tc_begin(&c, "max_pool 1-d dilated");
  x = tc_in(&c, "x", 3, SHAPE(2, 3, 10), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_MAX_POOL, 1, &x, 3,
                   (loom_attr[]){A_INTS("kernel", 1, 3), A_INTS("dilations", 1, 2),
                                 A_INTS("pads_lo", 1, 2)}));
}

/* ---- dropout ------------------------------------------------------------- */

static void test_dropout(void) {
  const double p = 0.3;
  const int64_t seed = 1234, offset = 5, base = 11;
  tc c;
  tc_begin(&c, "dropout");
  loom_value x = tc_in(&c, "x", 2, SHAPE(4, 6), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_DROPOUT, 1, &x, 3,
                   (loom_attr[]){A_F("p", p), A_INT("seed", seed), A_INT("offset", offset)}));

  /* with a runtime base: the gradient is w * mask / (1 - p), the mask of
   * rng/philox.h at counter base + offset + i */
  tc_begin(&c, "dropout mask");
  x = tc_in(&c, "x", 2, SHAPE(5, 7), -2, 2, 0, true);
  loom_value bv = tc_in_i64(&c, "base", 0, NULL, (const int64_t[]){base});
  loom_value w = tc_in(&c, "w", 2, SHAPE(5, 7), -1, 1, 0, false);
  loom_value y = op(&c, LOOM_OP_DROPOUT, 2, (loom_value[]){x, bv}, 3,
                    (loom_attr[]){A_F("p", p), A_INT("seed", seed), A_INT("offset", offset)});
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, op2(&c, LOOM_OP_MUL, y, w));
  loom_value gx = LOOM_VALUE_NONE;
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 1, &x, &gx));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gx", gx));
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
  loom_tensor *out = NULL;
  CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 1, &out));
  if (out) {
    const double *gv = loom_tensor_data(out), *wv = loom_tensor_data(c.t[2]);
    uint64_t thr = loom_dropout_threshold(p);
    int ok = 0, kept = 0;
    for (int64_t i = 0; i < 35; i++) {
      bool keep = loom_dropout_keep((uint64_t)seed, (uint64_t)(base + offset + i), thr);
      double want = keep ? wv[i] / (1.0 - p) : 0.0;
      ok += fabs(gv[i] - want) <= 1e-15;
      kept += keep;
    }
    CHECK(ok == 35);
    CHECK(kept > 0 && kept < 35); /* the mask really masks something */
  }
  loom_tensor_free(out);
  loom_session_free(s);
  free_case(&c);
}

/* ---- composites ---------------------------------------------------------- */

static void test_composites(void) {
  tc c;
  tc_begin(&c, "reduce_mean");
  loom_value x = tc_in(&c, "x", 3, SHAPE(2, 3, 5), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_REDUCE_MEAN, 1, &x, 2,
                   (loom_attr[]){A_INTS("axes", 2, 0, 2), A_INT("keepdims", 1)}));
  tc_begin(&c, "reduce_mean all");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -2, 2, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_REDUCE_MEAN, x));

  tc_begin(&c, "softmax");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -2, 2, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_SOFTMAX, x));
  tc_begin(&c, "softmax axis 1");
  x = tc_in(&c, "x", 3, SHAPE(2, 3, 4), -2, 2, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_SOFTMAX, 1, &x, 1, (loom_attr[]){A_INT("axis", 1)}));
  tc_begin(&c, "log_softmax");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -2, 2, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_LOG_SOFTMAX, x));

  tc_begin(&c, "layer_norm gamma beta");
  x = tc_in(&c, "x", 2, SHAPE(3, 6), -2, 2, 0, true);
  loom_value gm = tc_in(&c, "gamma", 1, SHAPE(6), 0.5, 1.5, 0, true);
  loom_value bt = tc_in(&c, "beta", 1, SHAPE(6), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_LAYER_NORM, 3, (loom_value[]){x, gm, bt}, 0, NULL));
  tc_begin(&c, "layer_norm plain");
  x = tc_in(&c, "x", 2, SHAPE(4, 5), -2, 2, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_LAYER_NORM, x));
  tc_begin(&c, "layer_norm axis -2 gamma");
  x = tc_in(&c, "x", 3, SHAPE(2, 3, 4), -2, 2, 0, true);
  gm = tc_in(&c, "gamma", 2, SHAPE(3, 4), 0.5, 1.5, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_LAYER_NORM, 2, (loom_value[]){x, gm}, 1,
                   (loom_attr[]){A_INT("axis", -2)}));

  tc_begin(&c, "rms_norm gamma");
  x = tc_in(&c, "x", 2, SHAPE(3, 6), -2, 2, 0, true);
  gm = tc_in(&c, "gamma", 1, SHAPE(6), 0.5, 1.5, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_RMS_NORM, 2, (loom_value[]){x, gm}, 0, NULL));
  tc_begin(&c, "rms_norm plain");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -2, 2, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_RMS_NORM, x));

  tc_begin(&c, "gelu erf");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -3, 3, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_GELU, x));
  tc_begin(&c, "gelu tanh");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -3, 3, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_GELU, 1, &x, 1, (loom_attr[]){A_INT("approximate", 1)}));
  tc_begin(&c, "silu");
  x = tc_in(&c, "x", 2, SHAPE(3, 5), -3, 3, 0, true);
  check_fd1(&c, op1(&c, LOOM_OP_SILU, x));

  tc_begin(&c, "cross_entropy");
  x = tc_in(&c, "logits", 2, SHAPE(4, 5), -2, 2, 0, true);
  loom_value lab = tc_in_i64(&c, "labels", 1, SHAPE(4), (const int64_t[]){1, 4, 0, 1});
  check_fd1(&c, op2(&c, LOOM_OP_CROSS_ENTROPY, x, lab));
  tc_begin(&c, "cross_entropy 3d");
  x = tc_in(&c, "logits", 3, SHAPE(2, 3, 3), -2, 2, 0, true);
  lab = tc_in_i64(&c, "labels", 2, SHAPE(2, 3), (const int64_t[]){2, 0, 1, 1, 2, 0});
  check_fd1(&c, op2(&c, LOOM_OP_CROSS_ENTROPY, x, lab));

  tc_begin(&c, "linear bias");
  x = tc_in(&c, "x", 3, SHAPE(2, 3, 4), -2, 2, 0, true);
  loom_value w = tc_in(&c, "w", 2, SHAPE(4, 5), -1, 1, 0, true);
  loom_value b = tc_in(&c, "b", 1, SHAPE(5), -1, 1, 0, true);
  check_fd1(&c, op(&c, LOOM_OP_LINEAR, 3, (loom_value[]){x, w, b}, 0, NULL));
  tc_begin(&c, "linear");
  x = tc_in(&c, "x", 2, SHAPE(3, 4), -2, 2, 0, true);
  w = tc_in(&c, "w", 2, SHAPE(4, 3), -1, 1, 0, true);
  check_fd1(&c, op2(&c, LOOM_OP_LINEAR, x, w));

  for (int causal = 0; causal < 2; causal++) {
    tc_begin(&c, causal ? "attention causal" : "attention");
    loom_value q = tc_in(&c, "q", 3, SHAPE(2, 3, 4), -1, 1, 0, true);
    loom_value k = tc_in(&c, "k", 3, SHAPE(2, 5, 4), -1, 1, 0, true);
    loom_value v = tc_in(&c, "v", 3, SHAPE(2, 5, 3), -1, 1, 0, true);
    check_fd1(&c, op(&c, LOOM_OP_ATTENTION, 3, (loom_value[]){q, k, v}, 2,
                     (loom_attr[]){A_INT("causal", causal), A_F("p", 0.0)}));
  }

  tc_begin(&c, "adamw");
  loom_value prm = tc_in(&c, "param", 2, SHAPE(2, 3), -1, 1, 0, true);
  loom_value grd = tc_in(&c, "grad", 2, SHAPE(2, 3), -1, 1, 0, true);
  loom_value m = tc_in(&c, "m", 2, SHAPE(2, 3), -0.1, 0.1, 0, false);
  loom_value vv = tc_in(&c, "v", 2, SHAPE(2, 3), 0.01, 0.1, 0, false);
  loom_value step = tc_in_vals(&c, "step", 0, NULL, (const double[]){3.0}, false);
  loom_value outs[3];
  CHECK_OK(c.ctx, loom_graph_op_multi(c.g, LOOM_OP_ADAMW, 5,
                                      (loom_value[]){prm, grd, m, vv, step}, 2,
                                      (loom_attr[]){A_F("lr", 0.1), A_F("eps", 1e-3)}, 3,
                                      outs));
  check_fd(&c, 3, outs);
}

/* Fan-out, chains and a wrt that is an op output. */
static void test_structure(void) {
  tc c;
  /* x used three times: contributions add */
  tc_begin(&c, "fan-out");
  loom_value x = tc_in(&c, "x", 2, SHAPE(3, 4), -2, 2, 0, true);
  loom_value y = op2(&c, LOOM_OP_MUL, x, x);
  y = op2(&c, LOOM_OP_ADD, y, op1(&c, LOOM_OP_SIN, x));
  check_fd1(&c, op1(&c, LOOM_OP_TANH, y));

  /* a composite inside a chain, fed by a composite */
  tc_begin(&c, "chain");
  x = tc_in(&c, "x", 2, SHAPE(3, 4), -2, 2, 0, true);
  loom_value w = tc_in(&c, "w", 2, SHAPE(4, 4), -1, 1, 0, true);
  y = op1(&c, LOOM_OP_SOFTMAX, op2(&c, LOOM_OP_LINEAR, op1(&c, LOOM_OP_GELU, x), w));
  check_fd1(&c, op2(&c, LOOM_OP_MUL, y, x));
}

/* The gradient w.r.t. an intermediate value, alongside its input. */
static void test_intermediate_wrt(void) {
  tc c;
  tc_begin(&c, "intermediate wrt");
  double xs[3] = {0.5, -1.0, 2.0};
  loom_value x = tc_in_vals(&c, "x", 1, SHAPE(3), xs, true);
  loom_value h = op1(&c, LOOM_OP_EXP, x);
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, op2(&c, LOOM_OP_MUL, h, h));
  loom_value grads[3];
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 3, (loom_value[]){h, x, l}, grads));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gh", grads[0]));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gx", grads[1]));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gl", grads[2]));
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
  loom_tensor *out[3] = {NULL, NULL, NULL};
  CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 3, out));
  if (out[0] && out[1] && out[2]) {
    const double *gh = loom_tensor_data(out[0]), *gx = loom_tensor_data(out[1]);
    for (int i = 0; i < 3; i++) {
      CHECK(fabs(gh[i] - 2 * exp(xs[i])) < 1e-12 * exp(xs[i]));
      CHECK(fabs(gx[i] - 2 * exp(2 * xs[i])) < 1e-12 * exp(2 * xs[i]));
    }
    CHECK(*(double *)loom_tensor_data(out[2]) == 1.0);
  }
  for (int i = 0; i < 3; i++) loom_tensor_free(out[i]);
  loom_session_free(s);
  free_case(&c);
}

/* ---- misuse -------------------------------------------------------------- */

static void test_misuse(void) {
  tc c;
  tc_begin(&c, "misuse");
  loom_value x = tc_in(&c, "x", 2, SHAPE(3, 4), -2, 2, 0, true);
  loom_value z = tc_in(&c, "z", 1, SHAPE(5), -2, 2, 0, true);
  loom_value n = tc_in_i64(&c, "n", 1, SHAPE(2), (const int64_t[]){1, 2});
  loom_value y = op1(&c, LOOM_OP_EXP, x);
  loom_value gr[3] = {LOOM_VALUE_NONE, LOOM_VALUE_NONE, LOOM_VALUE_NONE};

  /* non-scalar loss, integer loss, bad values: errors, graph untouched */
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_grad(c.g, y, 1, &x, gr));
  loom_value ni = op1(&c, LOOM_OP_REDUCE_SUM, n);
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_grad(c.g, ni, 1, &x, gr));
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_grad(c.g, 9999, 1, &x, gr));
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, y);
  int32_t nodes = c.g->n_nodes, values = c.g->n_values;
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_grad(c.g, l, 1, (loom_value[]){-5}, gr));
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_grad(c.g, l, 1, NULL, gr));
  CHECK_STATUS(c.ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_grad(c.g, l, -1, &x, gr));
  CHECK(loom_graph_grad(NULL, l, 1, &x, gr) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(c.g->n_nodes == nodes && c.g->n_values == values);

  /* a loss of shape [1, 1] is fine; z and the integer n do not reach: zeros */
  loom_value l11 = op(&c, LOOM_OP_RESHAPE, 1, &l, 1, (loom_attr[]){A_INTS("shape", 2, 1, 1)});
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l11, 3, (loom_value[]){x, z, n}, gr));
  loom_dtype dt = LOOM_DTYPE_COUNT;
  int32_t rank = -1;
  int64_t shape[LOOM_MAX_RANK];
  CHECK_OK(c.ctx, loom_graph_value_type(c.g, gr[2], &dt, &rank, shape));
  CHECK(dt == LOOM_DTYPE_I64 && rank == 1 && shape[0] == 2);
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gx", gr[0]));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gz", gr[1]));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "gn", gr[2]));
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(c.ctx, loom_session_new(c.ctx, c.g, &opts, &s));
  loom_tensor *out[3] = {NULL, NULL, NULL};
  CHECK_OK(c.ctx, loom_session_run(s, c.n, (const loom_tensor *const *)c.t, 3, out));
  if (out[0] && out[1] && out[2]) {
    const double *gx = loom_tensor_data(out[0]), *gz = loom_tensor_data(out[1]);
    const double *xv = loom_tensor_data(c.t[0]);
    int ok = 0;
    for (int i = 0; i < 12; i++) ok += fabs(gx[i] - exp(xv[i])) <= 1e-12 * exp(xv[i]);
    CHECK(ok == 12);
    ok = 0;
    for (int i = 0; i < 5; i++) ok += gz[i] == 0.0;
    CHECK(ok == 5);
    const int64_t *gn = loom_tensor_data(out[2]);
    CHECK(gn[0] == 0 && gn[1] == 0);
  }
  for (int i = 0; i < 3; i++) loom_tensor_free(out[i]);
  loom_session_free(s);

  /* no wrt at all is fine */
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 0, NULL, NULL));
  free_case(&c);
}

/* Gradients of unused inputs are not left in the graph. */
static void test_pruning(void) {
  tc c;
  tc_begin(&c, "pruning");
  loom_value a = tc_in(&c, "a", 1, SHAPE(4), 0.5, 2, 0, true);
  loom_value b = tc_in(&c, "b", 1, SHAPE(4), 0.5, 2, 0, true);
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, op2(&c, LOOM_OP_POW, a, b));
  int32_t before = c.g->n_nodes;
  loom_value ga = LOOM_VALUE_NONE;
  CHECK_OK(c.ctx, loom_graph_grad(c.g, l, 1, &a, &ga));
  /* da = dout * b * a^(b-1): broadcast of the seed, sub, pow, mul, mul
   * plus their scalar constants; never a log (only d/db needs one) */
  bool has_log = false;
  for (int32_t i = before; i < c.g->n_nodes; i++) has_log |= c.g->nodes[i].op == LOOM_OP_LOG;
  CHECK(!has_log);
  CHECK(c.g->n_nodes - before <= 9);
  CHECK_OK(c.ctx, loom_graph_verify(c.g));
  free_case(&c);
}

/* A composite with a gradient rule of its own (gelu) is differentiated by
 * it (one sigmoid, the forward's c recomputed for CSE to merge), and
 * loom_graph_decompose_for_grad keeps it (only it) for loom_graph_grad,
 * with the same gradients as the fully decomposed graph. */
static void test_composite_rule(void) {
  tc c;
  tc_begin(&c, "gelu rule");
  loom_value x = tc_in(&c, "x", 2, SHAPE(3, 5), -3, 3, 0, true);
  loom_value y = op(&c, LOOM_OP_GELU, 1, &x, 1, (loom_attr[]){A_INT("approximate", 1)});
  loom_value sm = op(&c, LOOM_OP_SOFTMAX, 1, &y, 0, NULL);
  loom_value l = op1(&c, LOOM_OP_REDUCE_SUM, op2(&c, LOOM_OP_MUL, sm, x));
  CHECK_OK(c.ctx, loom_graph_output(c.g, "l", l));
  loom_graph *dg = NULL, *full = NULL;
  CHECK_OK(c.ctx, loom_graph_decompose_for_grad(c.g, &dg));
  CHECK_OK(c.ctx, loom_graph_decompose(c.g, &full));
  if (!dg || !full) goto done;
  int32_t composites = 0, gelus = 0;
  for (int32_t i = 0; i < dg->n_nodes; i++) {
    composites += loom_op_is_composite(dg->nodes[i].op);
    gelus += dg->nodes[i].op == LOOM_OP_GELU;
  }
  CHECK(composites == 1 && gelus == 1);
  int32_t before = dg->n_nodes, cdfs = 0;
  loom_value gk = LOOM_VALUE_NONE, gf = LOOM_VALUE_NONE;
  CHECK_OK(c.ctx, loom_graph_grad(dg, dg->outputs[0], 1, &dg->inputs[0], &gk));
  for (int32_t i = before; i < dg->n_nodes; i++) cdfs += dg->nodes[i].op == LOOM_OP_SIGMOID;
  CHECK(cdfs == 1);
  CHECK_OK(c.ctx, loom_graph_grad(full, full->outputs[0], 1, &full->inputs[0], &gf));
  CHECK_OK(c.ctx, loom_graph_output(dg, "g", gk));
  CHECK_OK(c.ctx, loom_graph_output(full, "g", gf));
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  loom_tensor *ok[2] = {NULL}, *of[2] = {NULL};
  loom_session *sk = NULL, *sf = NULL;
  CHECK_OK(c.ctx, loom_session_new(c.ctx, dg, &opts, &sk));
  CHECK_OK(c.ctx, loom_session_new(c.ctx, full, &opts, &sf));
  if (sk && sf) {
    CHECK_OK(c.ctx, loom_session_run(sk, 1, (const loom_tensor *const *)c.t, 2, ok));
    CHECK_OK(c.ctx, loom_session_run(sf, 1, (const loom_tensor *const *)c.t, 2, of));
  }
  if (ok[1] && of[1]) {
    const double *a = loom_tensor_data(ok[1]), *b = loom_tensor_data(of[1]);
    double worst = 0.0;
    for (int64_t i = 0; i < loom_tensor_numel(ok[1]); i++)
      worst = fmax(worst, fabs(a[i] - b[i]) / (1.0 + fabs(b[i])));
    CHECK(worst < 1e-12);
  }
  for (int32_t i = 0; i < 2; i++) {
    loom_tensor_free(ok[i]);
    loom_tensor_free(of[i]);
  }
  loom_session_free(sk);
  loom_session_free(sf);
done:
  loom_graph_free(dg);
  loom_graph_free(full);
  free_case(&c);
}

int main(void) {
  if (loom_ctx_new(&g_ctx) != LOOM_STATUS_OK) return 1;
  test_unary();
  test_binary();
  test_pow_zero_base();
  test_select_cast();
  test_cast_f32();
  test_reduce();
  test_reduce_ties();
  test_extremum_ties();
  test_layout();
  test_index();
  test_matmul();
  test_windows();
  test_dropout();
  test_composites();
  test_structure();
  test_intermediate_wrt();
  test_misuse();
  test_pruning();
  test_composite_rule();
  loom_ctx_free(g_ctx);
  return loom_test_finish("test_grad");
}

/*
 * Composite ops: each is built in a graph, run through a "ref" session
 * (which decomposes it into primitives) and compared with a plain
 * double-precision loop written here. Also: no composite survives
 * loom_graph_decompose, and infer rejects bad shapes and dtypes.
 */
#include "common.h"

#include "ir/graph.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AI(n, v) ((loom_attr){.name = (n), .kind = LOOM_ATTR_INT, .i = (v)})
#define AF(n, v) ((loom_attr){.name = (n), .kind = LOOM_ATTR_FLOAT, .f = (v)})
#define AINTS(n, c, p)                                                                             \
  ((loom_attr){.name = (n), .kind = LOOM_ATTR_INTS, .n_ints = (c), .ints = (p)})

static loom_ctx *ctx;
static loom_test_rng rng = {12345};

/* ---- tensors ------------------------------------------------------------ */

static int64_t numel(int32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

/* A tensor holding vals (converted to dt); vals are rounded in place to what
 * the tensor holds, so references see exactly the stored inputs. */
static loom_tensor *tensor_of(loom_dtype dt, int32_t rank, const int64_t *shape, double *vals) {
  loom_tensor *t = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, dt, rank, shape, &t));
  if (!t) return NULL;
  int64_t n = numel(rank, shape);
  void *p = loom_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case LOOM_DTYPE_F32:
      ((float *)p)[i] = (float)vals[i];
      vals[i] = ((float *)p)[i];
      break;
    case LOOM_DTYPE_F64: ((double *)p)[i] = vals[i]; break;
    case LOOM_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)vals[i]; break;
    case LOOM_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)vals[i]; break;
    default: CHECK(!"unexpected dtype in test"); break;
    }
  }
  return t;
}

/* n uniform values in [lo, hi) (malloc'ed). */
static double *uniform(int64_t n, double lo, double hi) {
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++)
    v[i] = loom_test_uniform(&rng, lo, hi);
  return v;
}

static double get(const loom_tensor *t, int64_t i) {
  const void *p = loom_tensor_data(t);
  switch (loom_tensor_dtype(t)) {
  case LOOM_DTYPE_F32: return ((const float *)p)[i];
  case LOOM_DTYPE_F64: return ((const double *)p)[i];
  default: return NAN;
  }
}

/* Checks t against want elementwise: |got - want| <= tol (1 + |want|). */
static void check_close(const char *what, const loom_tensor *t, int32_t rank, const int64_t *shape,
                        const double *want, double tol) {
  CHECK(t != NULL);
  if (!t) return;
  bool shape_ok = loom_tensor_rank(t) == rank;
  for (int32_t d = 0; shape_ok && d < rank; d++)
    shape_ok = loom_tensor_dim(t, d) == shape[d];
  CHECK(shape_ok);
  if (!shape_ok) {
    fprintf(stderr, "  %s: wrong output shape\n", what);
    return;
  }
  int64_t n = numel(rank, shape), worst = -1;
  double worst_err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double got = get(t, i), err = fabs(got - want[i]) / (1.0 + fabs(want[i]));
    if (!(err <= worst_err)) { /* NaN counts as the worst */
      worst_err = isnan(err) ? INFINITY : err;
      worst = i;
    }
  }
  loom_test_checks++;
  if (!(worst_err <= tol)) {
    loom_test_failures++;
    fprintf(stderr, "  %s: element %lld is %.17g, expected %.17g (rel err %.3g > %.3g)\n", what,
            (long long)worst, get(t, worst), want[worst], worst_err, tol);
  }
}

/* ---- running one op ----------------------------------------------------- */

/* Builds a graph with one input per tensor and the op (n_out outputs), runs
 * it on the ref backend and returns the outputs in out (caller frees). */
static bool run_op_multi(loom_op op, int32_t n_in, loom_tensor *const *ins, int32_t n_attrs,
                         const loom_attr *attrs, int32_t n_out, loom_tensor **out) {
  loom_graph *g = NULL;
  loom_session *s = NULL;
  loom_value in_v[8], out_v[4];
  bool ok = false;
  for (int32_t o = 0; o < n_out; o++)
    out[o] = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  for (int32_t i = 0; i < n_in; i++) {
    char name[16];
    int64_t shape[LOOM_MAX_RANK];
    int32_t r = loom_tensor_rank(ins[i]);
    for (int32_t d = 0; d < r; d++)
      shape[d] = loom_tensor_dim(ins[i], d);
    snprintf(name, sizeof name, "in%d", i);
    CHECK_OK(ctx, loom_graph_input(g, name, loom_tensor_dtype(ins[i]), r, shape, &in_v[i]));
  }
  loom_status st = loom_graph_op_multi(g, op, n_in, in_v, n_attrs, attrs, n_out, out_v);
  CHECK_OK(ctx, st);
  if (st) goto done;
  for (int32_t o = 0; o < n_out; o++) {
    char name[16];
    snprintf(name, sizeof name, "out%d", o);
    CHECK_OK(ctx, loom_graph_output(g, name, out_v[o]));
  }
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  st = loom_session_new(ctx, g, &opts, &s);
  CHECK_OK(ctx, st);
  if (st) goto done;
  st = loom_session_run(s, n_in, (const loom_tensor *const *)ins, n_out, out);
  CHECK_OK(ctx, st);
  ok = st == LOOM_STATUS_OK;
done:
  loom_session_free(s);
  loom_graph_free(g);
  return ok;
}

static loom_tensor *run_op(loom_op op, int32_t n_in, loom_tensor *const *ins, int32_t n_attrs,
                           const loom_attr *attrs) {
  loom_tensor *out = NULL;
  run_op_multi(op, n_in, ins, n_attrs, attrs, 1, &out);
  return out;
}

static void free_all(int32_t n, loom_tensor **ts) {
  for (int32_t i = 0; i < n; i++)
    loom_tensor_free(ts[i]);
}

/* ---- reduce_mean -------------------------------------------------------- */

static void test_reduce_mean(void) {
  int64_t shape[3] = {3, 1, 5};
  double *x = uniform(15, -2, 2);
  loom_tensor *in = tensor_of(LOOM_DTYPE_F64, 3, shape, x);
  /* axes {0, 2}: one value, the mean of all 15 */
  double all = 0;
  for (int i = 0; i < 15; i++)
    all += x[i];
  all /= 15;
  int64_t ax02[2] = {0, -1};
  loom_attr a1[2] = {AINTS("axes", 2, ax02), AI("keepdims", 0)};
  loom_tensor *y = run_op(LOOM_OP_REDUCE_MEAN, 1, &in, 2, a1);
  check_close("reduce_mean axes {0,-1}", y, 1, (int64_t[]){1}, &all, 1e-13);
  loom_tensor_free(y);
  /* no axes = all, keepdims */
  loom_attr a2[1] = {AI("keepdims", 1)};
  y = run_op(LOOM_OP_REDUCE_MEAN, 1, &in, 1, a2);
  check_close("reduce_mean all keepdims", y, 3, (int64_t[]){1, 1, 1}, &all, 1e-13);
  loom_tensor_free(y);
  /* axes {0}: [1, 5] */
  double want[5] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      want[j] += x[i * 5 + j] / 3.0;
  int64_t ax0 = 0;
  loom_attr a3[1] = {AINTS("axes", 1, &ax0)};
  y = run_op(LOOM_OP_REDUCE_MEAN, 1, &in, 1, a3);
  check_close("reduce_mean axis 0", y, 2, (int64_t[]){1, 5}, want, 1e-13);
  loom_tensor_free(y);
  loom_tensor_free(in);
  free(x);
}

/* ---- softmax / log_softmax ---------------------------------------------- */

/* Reference softmax of x [outer, n, inner] along the middle dim. */
static void ref_softmax(const double *x, double *y, int64_t outer, int64_t n, int64_t inner,
                        bool log_form) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; k++)
        m = fmax(m, x[(o * n + k) * inner + i]);
      for (int64_t k = 0; k < n; k++)
        s += exp(x[(o * n + k) * inner + i] - m);
      for (int64_t k = 0; k < n; k++) {
        double v = x[(o * n + k) * inner + i] - m;
        y[(o * n + k) * inner + i] = log_form ? v - log(s) : exp(v) / s;
      }
    }
}

static void test_softmax(void) {
  int64_t shape[3] = {2, 3, 7};
  double *x = uniform(42, -4, 4);
  /* a large shift: without the max subtraction exp would overflow */
  for (int i = 21; i < 42; i++)
    x[i] += 800.0;
  double want[42];
  loom_tensor *in = tensor_of(LOOM_DTYPE_F64, 3, shape, x);
  for (int lg = 0; lg < 2; lg++) {
    loom_op op = lg ? LOOM_OP_LOG_SOFTMAX : LOOM_OP_SOFTMAX;
    loom_tensor *y = run_op(op, 1, &in, 0, NULL); /* axis -1 */
    ref_softmax(x, want, 6, 7, 1, lg);
    check_close(lg ? "log_softmax axis -1" : "softmax axis -1", y, 3, shape, want, 1e-12);
    loom_tensor_free(y);
    loom_attr ax = AI("axis", 1);
    y = run_op(op, 1, &in, 1, &ax);
    ref_softmax(x, want, 2, 3, 7, lg);
    check_close(lg ? "log_softmax axis 1" : "softmax axis 1", y, 3, shape, want, 1e-12);
    loom_tensor_free(y);
  }
  loom_tensor_free(in);
  /* f32 */
  in = tensor_of(LOOM_DTYPE_F32, 3, shape, x);
  loom_tensor *y = run_op(LOOM_OP_SOFTMAX, 1, &in, 0, NULL);
  ref_softmax(x, want, 6, 7, 1, false);
  check_close("softmax f32", y, 3, shape, want, 2e-6);
  loom_tensor_free(y);
  loom_tensor_free(in);
  free(x);
}

/* ---- layer_norm / rms_norm ---------------------------------------------- */

/* x as [rows, cols]; gamma, beta of cols entries (NULL: 1, 0). */
static void ref_norm(const double *x, const double *gamma, const double *beta, double *y,
                     int64_t rows, int64_t cols, double eps, bool rms) {
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t c = 0; c < cols; c++)
        mean += xr[c];
      mean /= (double)cols;
    }
    for (int64_t c = 0; c < cols; c++)
      var += (xr[c] - mean) * (xr[c] - mean);
    var /= (double)cols;
    for (int64_t c = 0; c < cols; c++)
      y[r * cols + c] =
          (xr[c] - mean) / sqrt(var + eps) * (gamma ? gamma[c] : 1.0) + (beta ? beta[c] : 0.0);
  }
}

static void test_norms(void) {
  int64_t shape[3] = {2, 3, 4}, gshape[2] = {3, 4};
  double *x = uniform(24, -3, 5), *gm = uniform(12, 0.5, 1.5), *bt = uniform(12, -1, 1);
  double want[24];
  loom_tensor *ins[3] = {tensor_of(LOOM_DTYPE_F64, 3, shape, x),
                         tensor_of(LOOM_DTYPE_F64, 2, gshape, gm),
                         tensor_of(LOOM_DTYPE_F64, 2, gshape, bt)};
  /* over the two trailing axes, with gamma and beta [3, 4] */
  loom_attr a[2] = {AI("axis", -2), AF("eps", 1e-3)};
  loom_tensor *y = run_op(LOOM_OP_LAYER_NORM, 3, ins, 2, a);
  ref_norm(x, gm, bt, want, 2, 12, 1e-3, false);
  check_close("layer_norm axis -2 gamma beta", y, 3, shape, want, 1e-12);
  loom_tensor_free(y);
  /* gamma only, axis 1 (the same dims) */
  loom_attr a1[1] = {AI("axis", 1)};
  y = run_op(LOOM_OP_LAYER_NORM, 2, ins, 1, a1);
  ref_norm(x, gm, NULL, want, 2, 12, 1e-5, false);
  check_close("layer_norm axis 1 gamma", y, 3, shape, want, 1e-12);
  loom_tensor_free(y);
  /* x only, last axis, default eps */
  y = run_op(LOOM_OP_LAYER_NORM, 1, ins, 0, NULL);
  ref_norm(x, NULL, NULL, want, 6, 4, 1e-5, false);
  check_close("layer_norm last axis", y, 3, shape, want, 1e-12);
  loom_tensor_free(y);
  /* rms_norm with gamma [4] over the last axis */
  loom_tensor *g4 = tensor_of(LOOM_DTYPE_F64, 1, (int64_t[]){4}, gm);
  loom_tensor *rin[2] = {ins[0], g4};
  y = run_op(LOOM_OP_RMS_NORM, 2, rin, 0, NULL);
  ref_norm(x, gm, NULL, want, 6, 4, 1e-6, true);
  check_close("rms_norm gamma", y, 3, shape, want, 1e-12);
  loom_tensor_free(y);
  /* rms_norm without gamma over the two trailing axes */
  y = run_op(LOOM_OP_RMS_NORM, 1, rin, 1, (loom_attr[]){AI("axis", -2)});
  ref_norm(x, NULL, NULL, want, 2, 12, 1e-6, true);
  check_close("rms_norm axis -2", y, 3, shape, want, 1e-12);
  loom_tensor_free(y);
  loom_tensor_free(g4);
  /* f32 layer_norm, odd row length */
  int64_t s2[2] = {5, 13};
  double *x2 = uniform(65, -10, 10), want2[65];
  loom_tensor *t2 = tensor_of(LOOM_DTYPE_F32, 2, s2, x2);
  y = run_op(LOOM_OP_LAYER_NORM, 1, &t2, 0, NULL);
  ref_norm(x2, NULL, NULL, want2, 5, 13, 1e-5, false);
  check_close("layer_norm f32", y, 2, s2, want2, 1e-5);
  loom_tensor_free(y);
  loom_tensor_free(t2);
  free(x2);
  free_all(3, ins);
  free(x);
  free(gm);
  free(bt);
}

/* ---- gelu / silu -------------------------------------------------------- */

static void test_activations(void) {
  int64_t shape[2] = {3, 17};
  double *x = uniform(51, -6, 6), want[51];
  x[0] = 0.0;
  loom_tensor *in = tensor_of(LOOM_DTYPE_F64, 2, shape, x);
  loom_tensor *y = run_op(LOOM_OP_GELU, 1, &in, 0, NULL);
  for (int i = 0; i < 51; i++)
    want[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
  check_close("gelu exact", y, 2, shape, want, 1e-13);
  loom_tensor_free(y);
  y = run_op(LOOM_OP_GELU, 1, &in, 1, (loom_attr[]){AI("approximate", 1)});
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < 51; i++)
    want[i] = 0.5 * x[i] * (1.0 + tanh(sqrt(2.0 / pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  check_close("gelu tanh", y, 2, shape, want, 1e-13);
  loom_tensor_free(y);
  y = run_op(LOOM_OP_SILU, 1, &in, 0, NULL);
  for (int i = 0; i < 51; i++)
    want[i] = x[i] / (1.0 + exp(-x[i]));
  check_close("silu", y, 2, shape, want, 1e-13);
  loom_tensor_free(y);
  loom_tensor_free(in);
  free(x);
}

/* ---- cross_entropy ------------------------------------------------------ */

static double ref_cross_entropy(const double *logits, const double *labels, int64_t rows,
                                int64_t c) {
  double total = 0;
  for (int64_t r = 0; r < rows; r++) {
    const double *l = logits + r * c;
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < c; k++)
      m = fmax(m, l[k]);
    for (int64_t k = 0; k < c; k++)
      s += exp(l[k] - m);
    double lse = m + log(s);
    int64_t lab = (int64_t)labels[r];
    total += lse - (lab >= 0 && lab < c ? l[lab] : 0.0);
  }
  return total / (double)rows;
}

static void test_cross_entropy(void) {
  /* rank-3 logits [2, 3, 5], i64 labels [2, 3] */
  int64_t shape[3] = {2, 3, 5};
  double *x = uniform(30, -3, 3), lab[6];
  for (int i = 0; i < 6; i++)
    lab[i] = (double)(int)loom_test_uniform(&rng, 0, 5);
  x[7] += 300.0; /* stability */
  loom_tensor *ins[2] = {tensor_of(LOOM_DTYPE_F64, 3, shape, x),
                         tensor_of(LOOM_DTYPE_I64, 2, shape, lab)};
  loom_tensor *y = run_op(LOOM_OP_CROSS_ENTROPY, 2, ins, 0, NULL);
  double want = ref_cross_entropy(x, lab, 6, 5);
  check_close("cross_entropy rank 3", y, 0, NULL, &want, 1e-12);
  loom_tensor_free(y);
  loom_tensor_free(ins[1]);
  /* labels outside [0, C) pick nothing: their rows add logsumexp only */
  lab[1] = -1;
  lab[4] = 5;
  ins[1] = tensor_of(LOOM_DTYPE_I64, 2, shape, lab);
  y = run_op(LOOM_OP_CROSS_ENTROPY, 2, ins, 0, NULL);
  want = ref_cross_entropy(x, lab, 6, 5);
  check_close("cross_entropy out-of-range labels", y, 0, NULL, &want, 1e-12);
  loom_tensor_free(y);
  free_all(2, ins);
  /* f32 logits [7, 11], i32 labels */
  int64_t s2[2] = {7, 11};
  double *x2 = uniform(77, -5, 5), lab2[7];
  for (int i = 0; i < 7; i++)
    lab2[i] = (double)(int)loom_test_uniform(&rng, 0, 11);
  ins[0] = tensor_of(LOOM_DTYPE_F32, 2, s2, x2);
  ins[1] = tensor_of(LOOM_DTYPE_I32, 1, s2, lab2);
  y = run_op(LOOM_OP_CROSS_ENTROPY, 2, ins, 0, NULL);
  want = ref_cross_entropy(x2, lab2, 7, 11);
  check_close("cross_entropy f32 i32", y, 0, NULL, &want, 2e-6);
  loom_tensor_free(y);
  free_all(2, ins);
  /* rank-1 logits: one row, a scalar label */
  double x3[4] = {0.5, -1.0, 2.0, 0.25}, lab3 = 2;
  ins[0] = tensor_of(LOOM_DTYPE_F64, 1, (int64_t[]){4}, x3);
  ins[1] = tensor_of(LOOM_DTYPE_I64, 0, NULL, &lab3);
  y = run_op(LOOM_OP_CROSS_ENTROPY, 2, ins, 0, NULL);
  want = ref_cross_entropy(x3, &lab3, 1, 4);
  check_close("cross_entropy rank 1", y, 0, NULL, &want, 1e-13);
  loom_tensor_free(y);
  free_all(2, ins);
  free(x);
  free(x2);
}

/* The gradient of the decomposed cross_entropy is (softmax - onehot) / rows. */
static void test_cross_entropy_grad(void) {
  int64_t shape[2] = {4, 6};
  double *x = uniform(24, -2, 2), lab[4] = {0, 5, 2, 2}, want[24];
  loom_graph *g = NULL, *d = NULL;
  loom_session *s = NULL;
  loom_value xv, lv, loss;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_param(g, "logits", LOOM_DTYPE_F64, 2, shape, &xv));
  CHECK_OK(ctx, loom_graph_input(g, "labels", LOOM_DTYPE_I32, 1, shape, &lv));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){xv, lv}, 0, NULL, &loss));
  CHECK_OK(ctx, loom_graph_output(g, "loss", loss));
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (!d) goto done;
  loom_value dx = LOOM_VALUE_NONE;
  loom_value dloss = loom_graph_output_value(d, 0);
  loom_status st = loom_graph_grad(d, dloss, 1, (loom_value[]){loom_graph_input_value(d, 0)}, &dx);
  CHECK_OK(ctx, st);
  if (st) goto done;
  CHECK_OK(ctx, loom_graph_output(d, "dlogits", dx));
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  st = loom_session_new(ctx, d, &opts, &s);
  CHECK_OK(ctx, st);
  if (st) goto done;
  loom_tensor *ins[2] = {tensor_of(LOOM_DTYPE_F64, 2, shape, x),
                         tensor_of(LOOM_DTYPE_I32, 1, shape, lab)};
  loom_tensor *outs[2] = {NULL, NULL};
  CHECK_OK(ctx, loom_session_run(s, 2, (const loom_tensor *const *)ins, 2, outs));
  ref_softmax(x, want, 4, 6, 1, false);
  for (int r = 0; r < 4; r++) {
    want[r * 6 + (int)lab[r]] -= 1.0;
    for (int c = 0; c < 6; c++)
      want[r * 6 + c] /= 4.0;
  }
  check_close("cross_entropy gradient", outs[1], 2, shape, want, 1e-12);
  free_all(2, ins);
  free_all(2, outs);
done:
  loom_session_free(s);
  loom_graph_free(d);
  loom_graph_free(g);
  free(x);
}

/* ---- linear ------------------------------------------------------------- */

static void test_linear(void) {
  int64_t xs[3] = {2, 3, 4}, ws[2] = {4, 5}, ys[3] = {2, 3, 5};
  double *x = uniform(24, -1, 1), *w = uniform(20, -1, 1), *b = uniform(5, -1, 1), want[30];
  loom_tensor *ins[3] = {tensor_of(LOOM_DTYPE_F64, 3, xs, x), tensor_of(LOOM_DTYPE_F64, 2, ws, w),
                         tensor_of(LOOM_DTYPE_F64, 1, (int64_t[]){5}, b)};
  for (int pass = 0; pass < 2; pass++) {
    for (int r = 0; r < 6; r++)
      for (int o = 0; o < 5; o++) {
        double acc = pass ? b[o] : 0.0;
        for (int k = 0; k < 4; k++)
          acc += x[r * 4 + k] * w[k * 5 + o];
        want[r * 5 + o] = acc;
      }
    loom_tensor *y = run_op(LOOM_OP_LINEAR, pass ? 3 : 2, ins, 0, NULL);
    check_close(pass ? "linear with bias" : "linear", y, 3, ys, want, 1e-13);
    loom_tensor_free(y);
  }
  /* rank-1 x */
  loom_tensor *x1 = tensor_of(LOOM_DTYPE_F64, 1, (int64_t[]){4}, x);
  loom_tensor *in1[3] = {x1, ins[1], ins[2]};
  loom_tensor *y = run_op(LOOM_OP_LINEAR, 3, in1, 0, NULL);
  for (int o = 0; o < 5; o++) {
    want[o] = b[o];
    for (int k = 0; k < 4; k++)
      want[o] += x[k] * w[k * 5 + o];
  }
  check_close("linear rank-1 x", y, 1, (int64_t[]){5}, want, 1e-13);
  loom_tensor_free(y);
  loom_tensor_free(x1);
  free_all(3, ins);
  free(x);
  free(w);
  free(b);
}

/* ---- attention ---------------------------------------------------------- */

typedef struct att_case {
  int64_t batch, sq, sk, d, dv;
  bool causal;
  double scale; /* 0: 1/sqrt(d) */
  double p;
  int64_t seed, offset, base; /* base < 0: no base input */
} att_case;

/* q [B, Sq, D], k [B, Sk, D], v [B, Sk, Dv] -> [B, Sq, Dv]. */
static void ref_attention(const att_case *c, const double *q, const double *k, const double *v,
                          double *out) {
  double scale = c->scale != 0.0 ? c->scale : 1.0 / sqrt((double)c->d);
  double *pr = malloc(sizeof(double) * (size_t)c->sk);
  uint64_t thr = loom_dropout_threshold(c->p);
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t i = 0; i < c->sq; i++) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < c->sk; j++) {
        double s = 0;
        for (int64_t t = 0; t < c->d; t++)
          s += q[(b * c->sq + i) * c->d + t] * k[(b * c->sk + j) * c->d + t];
        s *= scale;
        if (c->causal && j > i + (c->sk - c->sq)) s = -INFINITY;
        pr[j] = s;
        m = fmax(m, s);
      }
      for (int64_t j = 0; j < c->sk; j++)
        sum += (pr[j] = exp(pr[j] - m));
      for (int64_t j = 0; j < c->sk; j++) {
        pr[j] /= sum;
        if (c->p > 0) {
          uint64_t idx = (uint64_t)((b * c->sq + i) * c->sk + j);
          uint64_t pos = (uint64_t)(c->base > 0 ? c->base : 0) + (uint64_t)c->offset + idx;
          pr[j] = loom_dropout_keep((uint64_t)c->seed, pos, thr) ? pr[j] / (1.0 - c->p) : 0.0;
        }
      }
      for (int64_t e = 0; e < c->dv; e++) {
        double acc = 0;
        for (int64_t j = 0; j < c->sk; j++)
          acc += pr[j] * v[(b * c->sk + j) * c->dv + e];
        out[(b * c->sq + i) * c->dv + e] = acc;
      }
    }
  free(pr);
}

/* lead: the leading dims that multiply to c->batch (rank lead_rank). */
static void run_attention(const char *what, const att_case *c, int32_t lead_rank,
                          const int64_t *lead) {
  int32_t r = lead_rank + 2;
  int64_t qs[LOOM_MAX_RANK], ks[LOOM_MAX_RANK], vs[LOOM_MAX_RANK], os[LOOM_MAX_RANK];
  for (int32_t d = 0; d < lead_rank; d++)
    qs[d] = ks[d] = vs[d] = os[d] = lead[d];
  qs[r - 2] = os[r - 2] = c->sq;
  qs[r - 1] = ks[r - 1] = c->d;
  ks[r - 2] = vs[r - 2] = c->sk;
  vs[r - 1] = os[r - 1] = c->dv;
  double *q = uniform(c->batch * c->sq * c->d, -1.5, 1.5);
  double *k = uniform(c->batch * c->sk * c->d, -1.5, 1.5);
  double *v = uniform(c->batch * c->sk * c->dv, -1, 1);
  double *want = malloc(sizeof(double) * (size_t)(c->batch * c->sq * c->dv));
  double base = (double)c->base;
  loom_tensor *ins[4] = {tensor_of(LOOM_DTYPE_F64, r, qs, q), tensor_of(LOOM_DTYPE_F64, r, ks, k),
                         tensor_of(LOOM_DTYPE_F64, r, vs, v),
                         c->base >= 0 ? tensor_of(LOOM_DTYPE_I64, 0, NULL, &base) : NULL};
  loom_attr attrs[5] = {AI("causal", c->causal), AF("p", c->p), AI("seed", c->seed),
                        AI("offset", c->offset), AF("scale", c->scale)};
  loom_tensor *y = run_op(LOOM_OP_ATTENTION, c->base >= 0 ? 4 : 3, ins, 5, attrs);
  ref_attention(c, q, k, v, want);
  check_close(what, y, r, os, want, 1e-12);
  loom_tensor_free(y);
  free_all(4, ins);
  free(q);
  free(k);
  free(v);
  free(want);
}

static void test_attention(void) {
  att_case plain = {.batch = 2, .sq = 3, .sk = 3, .d = 4, .dv = 4, .base = -1};
  run_attention("attention plain", &plain, 1, (int64_t[]){2});
  att_case causal = {.batch = 2, .sq = 3, .sk = 5, .d = 4, .dv = 6, .causal = true, .base = -1};
  run_attention("attention causal Sq < Sk", &causal, 1, (int64_t[]){2});
  att_case square = {
      .batch = 6, .sq = 7, .sk = 7, .d = 5, .dv = 3, .causal = true, .scale = 0.3, .base = -1};
  run_attention("attention causal rank 4, scale", &square, 2, (int64_t[]){2, 3});
  att_case two_d = {.batch = 1, .sq = 4, .sk = 9, .d = 3, .dv = 2, .causal = true, .base = -1};
  run_attention("attention rank 2", &two_d, 0, NULL);
  att_case drop = {.batch = 2,
                   .sq = 5,
                   .sk = 6,
                   .d = 4,
                   .dv = 3,
                   .causal = true,
                   .p = 0.3,
                   .seed = 1234,
                   .offset = 7,
                   .base = -1};
  run_attention("attention dropout", &drop, 1, (int64_t[]){2});
  drop.base = 1000;
  drop.seed = 99;
  run_attention("attention dropout with base", &drop, 1, (int64_t[]){2});
}

/* ---- adamw -------------------------------------------------------------- */

static void test_adamw(void) {
  int64_t shape[2] = {3, 4};
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.1;
  double *p = uniform(12, -1, 1), m[12] = {0}, v[12] = {0};
  loom_attr attrs[5] = {AF("lr", lr), AF("beta1", b1), AF("beta2", b2), AF("eps", eps),
                        AF("weight_decay", wd)};
  for (int dt_i = 0; dt_i < 2; dt_i++) {
    loom_dtype dt = dt_i ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64;
    double tol = dt_i ? 2e-6 : 1e-13;
    double pw[12], mw[12], vw[12];
    memcpy(pw, p, sizeof pw);
    memset(mw, 0, sizeof mw);
    memset(vw, 0, sizeof vw);
    loom_tensor *pt = tensor_of(dt, 2, shape, pw), *mt = tensor_of(dt, 2, shape, m),
                *vt = tensor_of(dt, 2, shape, v);
    for (int step = 1; step <= 3; step++) {
      double *gr = uniform(12, -2, 2), st = step;
      loom_tensor *gt = tensor_of(dt, 2, shape, gr), *stt = tensor_of(dt, 0, NULL, &st);
      loom_tensor *ins[5] = {pt, gt, mt, vt, stt}, *outs[3];
      run_op_multi(LOOM_OP_ADAMW, 5, ins, 5, attrs, 3, outs);
      for (int i = 0; i < 12; i++) {
        mw[i] = b1 * mw[i] + (1 - b1) * gr[i];
        vw[i] = b2 * vw[i] + (1 - b2) * gr[i] * gr[i];
        double mh = mw[i] / (1 - pow(b1, step)), vh = vw[i] / (1 - pow(b2, step));
        pw[i] = pw[i] - lr * (mh / (sqrt(vh) + eps) + wd * pw[i]);
      }
      char what[64];
      snprintf(what, sizeof what, "adamw %s step %d param", dt_i ? "f32" : "f64", step);
      check_close(what, outs[0], 2, shape, pw, tol);
      snprintf(what, sizeof what, "adamw %s step %d m", dt_i ? "f32" : "f64", step);
      check_close(what, outs[1], 2, shape, mw, tol);
      snprintf(what, sizeof what, "adamw %s step %d v", dt_i ? "f32" : "f64", step);
      check_close(what, outs[2], 2, shape, vw, tol);
      /* the next step starts from what Loom computed */
      loom_tensor_free(pt);
      loom_tensor_free(mt);
      loom_tensor_free(vt);
      pt = outs[0];
      mt = outs[1];
      vt = outs[2];
      if (dt == LOOM_DTYPE_F32 && pt && mt && vt)
        for (int i = 0; i < 12; i++) {
          pw[i] = get(pt, i);
          mw[i] = get(mt, i);
          vw[i] = get(vt, i);
        }
      loom_tensor_free(gt);
      loom_tensor_free(stt);
      free(gr);
      if (!pt || !mt || !vt) break;
    }
    loom_tensor_free(pt);
    loom_tensor_free(mt);
    loom_tensor_free(vt);
  }
  free(p);
}

/* ---- gradients of the lowerings vs central differences ------------------ */

/* loss = sum(op(ins...) * wts); autodiff of the decomposed graph against
 * central differences for every float input (all f64). */
static void fd_check(const char *what, loom_op op, int32_t n_in, loom_tensor *const *ins,
                     int32_t n_attrs, const loom_attr *attrs) {
  loom_graph *g = NULL, *d = NULL;
  loom_session *s = NULL, *fwd = NULL;
  loom_value in_v[8], y, wv, prod, loss, grads[8];
  loom_tensor *all_in[9] = {NULL}, *outs[9] = {NULL}, *wts = NULL;
  int32_t n_wrt = 0, wrt_idx[8];
  loom_value wrt_v[8];
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  for (int32_t i = 0; i < n_in; i++) {
    char name[16];
    int64_t shape[LOOM_MAX_RANK];
    int32_t r = loom_tensor_rank(ins[i]);
    for (int32_t k = 0; k < r; k++)
      shape[k] = loom_tensor_dim(ins[i], k);
    snprintf(name, sizeof name, "in%d", i);
    CHECK_OK(ctx, loom_graph_input(g, name, loom_tensor_dtype(ins[i]), r, shape, &in_v[i]));
    all_in[i] = ins[i];
  }
  loom_status st = loom_graph_op(g, op, n_in, in_v, n_attrs, attrs, &y);
  CHECK_OK(ctx, st);
  if (st) goto done;
  loom_dtype ydt;
  int32_t yr;
  int64_t ys[LOOM_MAX_RANK];
  CHECK_OK(ctx, loom_graph_value_type(g, y, &ydt, &yr, ys));
  double *wvals = uniform(numel(yr, ys), -1, 1);
  wts = tensor_of(LOOM_DTYPE_F64, yr, ys, wvals);
  free(wvals);
  all_in[n_in] = wts;
  CHECK_OK(ctx, loom_graph_input(g, "wts", LOOM_DTYPE_F64, yr, ys, &wv));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){y, wv}, 0, NULL, &prod));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &prod, 0, NULL, &loss));
  CHECK_OK(ctx, loom_graph_output(g, "loss", loss));
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (!d) goto done;
  for (int32_t i = 0; i < n_in; i++)
    if (loom_tensor_dtype(ins[i]) == LOOM_DTYPE_F64) {
      wrt_idx[n_wrt] = i;
      wrt_v[n_wrt++] = loom_graph_input_value(d, i);
    }
  st = loom_graph_grad(d, loom_graph_output_value(d, 0), n_wrt, wrt_v, grads);
  CHECK_OK(ctx, st);
  if (st) goto done;
  for (int32_t k = 0; k < n_wrt; k++) {
    char name[16];
    snprintf(name, sizeof name, "grad%d", k);
    CHECK_OK(ctx, loom_graph_output(d, name, grads[k]));
  }
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  st = loom_session_new(ctx, d, &opts, &s);
  CHECK_OK(ctx, st);
  if (st) goto done;
  st = loom_session_run(s, n_in + 1, (const loom_tensor *const *)all_in, 1 + n_wrt, outs);
  CHECK_OK(ctx, st);
  if (st) goto done;
  /* the forward graph alone gives the loss for the differences */
  st = loom_session_new(ctx, g, &opts, &fwd);
  CHECK_OK(ctx, st);
  if (st) goto done;
  const double h = 1e-6;
  for (int32_t k = 0; k < n_wrt; k++) {
    loom_tensor *t = ins[wrt_idx[k]];
    double *data = loom_tensor_data(t);
    int64_t n = loom_tensor_numel(t);
    double *fd = malloc(sizeof(double) * (size_t)n);
    for (int64_t e = 0; e < n; e++) {
      double keep = data[e], lp = NAN, lm = NAN;
      for (int side = 0; side < 2; side++) {
        loom_tensor *o[1] = {NULL};
        data[e] = keep + (side ? -h : h);
        CHECK_OK(ctx, loom_session_run(fwd, n_in + 1, (const loom_tensor *const *)all_in, 1, o));
        if (o[0]) *(side ? &lm : &lp) = get(o[0], 0);
        loom_tensor_free(o[0]);
      }
      data[e] = keep;
      fd[e] = (lp - lm) / (2 * h);
    }
    int64_t shape[LOOM_MAX_RANK];
    int32_t r = loom_tensor_rank(t);
    for (int32_t dd = 0; dd < r; dd++)
      shape[dd] = loom_tensor_dim(t, dd);
    char msg[96];
    snprintf(msg, sizeof msg, "%s: d loss / d input %d", what, wrt_idx[k]);
    check_close(msg, outs[1 + k], r, shape, fd, 1e-6);
    free(fd);
  }
done:
  free_all(1 + n_wrt, outs);
  loom_tensor_free(wts);
  loom_session_free(fwd);
  loom_session_free(s);
  loom_graph_free(d);
  loom_graph_free(g);
}

static void test_gradients(void) {
  int64_t xs[3] = {2, 3, 4};
  double *x = uniform(24, -2, 2), *gm = uniform(12, 0.5, 1.5), *bt = uniform(12, -1, 1);
  loom_tensor *ins[3] = {tensor_of(LOOM_DTYPE_F64, 3, xs, x),
                         tensor_of(LOOM_DTYPE_F64, 2, xs + 1, gm),
                         tensor_of(LOOM_DTYPE_F64, 2, xs + 1, bt)};
  fd_check("layer_norm", LOOM_OP_LAYER_NORM, 3, ins, 1, (loom_attr[]){AI("axis", -2)});
  fd_check("log_softmax", LOOM_OP_LOG_SOFTMAX, 1, ins, 0, NULL);
  fd_check("gelu tanh", LOOM_OP_GELU, 1, ins, 1, (loom_attr[]){AI("approximate", 1)});
  fd_check("gelu", LOOM_OP_GELU, 1, ins, 0, NULL);
  fd_check("silu", LOOM_OP_SILU, 1, ins, 0, NULL);
  fd_check("reduce_mean", LOOM_OP_REDUCE_MEAN, 1, ins, 1,
           (loom_attr[]){AINTS("axes", 1, ((int64_t[]){1}))});
  loom_tensor_free(ins[1]);
  ins[1] = tensor_of(LOOM_DTYPE_F64, 1, xs + 2, gm);
  fd_check("rms_norm", LOOM_OP_RMS_NORM, 2, ins, 0, NULL);
  free_all(3, ins);
  /* causal attention, Sq < Sk */
  double *q = uniform(2 * 3 * 4, -1, 1), *k = uniform(2 * 5 * 4, -1, 1),
         *v = uniform(2 * 5 * 2, -1, 1);
  loom_tensor *att[3] = {tensor_of(LOOM_DTYPE_F64, 3, (int64_t[]){2, 3, 4}, q),
                         tensor_of(LOOM_DTYPE_F64, 3, (int64_t[]){2, 5, 4}, k),
                         tensor_of(LOOM_DTYPE_F64, 3, (int64_t[]){2, 5, 2}, v)};
  fd_check("attention causal", LOOM_OP_ATTENTION, 3, att, 1, (loom_attr[]){AI("causal", 1)});
  free_all(3, att);
  free(q);
  free(k);
  free(v);
  free(x);
  free(gm);
  free(bt);
}

/* ---- decompose leaves no composite -------------------------------------- */

static void test_decompose_all(void) {
  loom_graph *g = NULL, *d = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int64_t xs[3] = {2, 3, 4}, ws[2] = {4, 4}, one[1] = {4};
  loom_value x, w, b, lab, base, step, y[16];
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 3, xs, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, ws, &w));
  CHECK_OK(ctx, loom_graph_param(g, "b", LOOM_DTYPE_F32, 1, one, &b));
  CHECK_OK(ctx, loom_graph_input(g, "labels", LOOM_DTYPE_I64, 2, xs, &lab));
  CHECK_OK(ctx, loom_graph_input(g, "base", LOOM_DTYPE_I64, 0, NULL, &base));
  CHECK_OK(ctx, loom_graph_input(g, "step", LOOM_DTYPE_F32, 0, NULL, &step));
  int n = 0;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_MEAN, 1, &x, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SOFTMAX, 1, &x, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_LOG_SOFTMAX, 1, &x, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_LAYER_NORM, 3, (loom_value[]){x, b, b}, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RMS_NORM, 2, (loom_value[]){x, b}, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GELU, 1, &x, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SILU, 1, &x, 0, NULL, &y[n++]));
  CHECK_OK(ctx,
           loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){x, lab}, 0, NULL, &y[n++]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_LINEAR, 3, (loom_value[]){x, w, b}, 0, NULL, &y[n++]));
  loom_attr aa[2] = {AI("causal", 1), AF("p", 0.1)};
  CHECK_OK(ctx,
           loom_graph_op(g, LOOM_OP_ATTENTION, 4, (loom_value[]){x, x, x, base}, 2, aa, &y[n++]));
  /* a composite feeding composites */
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SOFTMAX, 1, &y[8], 0, NULL, &y[n]));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_MEAN, 1, &y[n], 0, NULL, &y[n + 1]));
  n += 2;
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){w, w, w, w, step}, 0, NULL,
                                    3, &y[n]));
  n += 3;
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "y%d", i);
    CHECK_OK(ctx, loom_graph_output(g, name, y[i]));
  }
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (d) {
    int composites = 0;
    for (int32_t i = 0; i < d->n_nodes; i++)
      composites += loom_op_is_composite(d->nodes[i].op);
    CHECK(composites == 0);
    CHECK(d->n_nodes > n);
    CHECK_OK(ctx, loom_graph_verify(d));
    CHECK(loom_graph_num_inputs(d) == loom_graph_num_inputs(g));
    CHECK(loom_graph_num_outputs(d) == n);
    for (int32_t i = 0; i < loom_graph_num_inputs(g); i++) {
      CHECK(strcmp(loom_graph_input_name(d, i), loom_graph_input_name(g, i)) == 0);
      CHECK(loom_graph_input_is_param(d, i) == loom_graph_input_is_param(g, i));
    }
    for (int32_t i = 0; i < n; i++) {
      loom_dtype da, db;
      int32_t ra, rb;
      int64_t sa[LOOM_MAX_RANK], sb[LOOM_MAX_RANK];
      CHECK(strcmp(loom_graph_output_name(d, i), loom_graph_output_name(g, i)) == 0);
      CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_output_value(g, i), &da, &ra, sa));
      CHECK_OK(ctx, loom_graph_value_type(d, loom_graph_output_value(d, i), &db, &rb, sb));
      CHECK(da == db && ra == rb && memcmp(sa, sb, sizeof(int64_t) * (size_t)ra) == 0);
    }
  }
  loom_graph_free(d);
  /* a graph with no composite decomposes to a copy */
  loom_graph *p = NULL, *pd = NULL;
  loom_value px, py;
  CHECK_OK(ctx, loom_graph_new(ctx, &p));
  CHECK_OK(ctx, loom_graph_input(p, "x", LOOM_DTYPE_F32, 1, one, &px));
  CHECK_OK(ctx, loom_graph_op(p, LOOM_OP_EXP, 1, &px, 0, NULL, &py));
  CHECK_OK(ctx, loom_graph_output(p, "y", py));
  CHECK_OK(ctx, loom_graph_decompose(p, &pd));
  CHECK(pd && pd != p && pd->n_nodes == 1);
  loom_graph_free(pd);
  loom_graph_free(p);
  CHECK(loom_graph_decompose(g, NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_graph_decompose(NULL, &pd) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_graph_free(g);
}

/* ---- errors ------------------------------------------------------------- */

static void test_errors(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int64_t xs[3] = {2, 3, 4};
  loom_value x, gbad, gok, lf, l2, li, q, k5, out, outs[3], s1, s_int, xi, w43, i1;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 3, xs, &x));
  CHECK_OK(ctx, loom_graph_input(g, "gbad", LOOM_DTYPE_F32, 1, (int64_t[]){3}, &gbad));
  CHECK_OK(ctx, loom_graph_input(g, "gok", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &gok));
  CHECK_OK(ctx, loom_graph_input(g, "lf", LOOM_DTYPE_F32, 2, xs, &lf));
  CHECK_OK(ctx, loom_graph_input(g, "l2", LOOM_DTYPE_I64, 2, (int64_t[]){2, 4}, &l2));
  CHECK_OK(ctx, loom_graph_input(g, "li", LOOM_DTYPE_I64, 2, xs, &li));
  CHECK_OK(ctx, loom_graph_input(g, "q", LOOM_DTYPE_F32, 3, (int64_t[]){2, 3, 5}, &q));
  CHECK_OK(ctx, loom_graph_input(g, "k5", LOOM_DTYPE_F32, 3, (int64_t[]){3, 3, 4}, &k5));
  CHECK_OK(ctx, loom_graph_input(g, "s1", LOOM_DTYPE_F32, 1, (int64_t[]){1}, &s1));
  CHECK_OK(ctx, loom_graph_input(g, "s_int", LOOM_DTYPE_I64, 0, NULL, &s_int));
  CHECK_OK(ctx, loom_graph_input(g, "xi", LOOM_DTYPE_I32, 3, xs, &xi));
  CHECK_OK(ctx, loom_graph_input(g, "i1", LOOM_DTYPE_I64, 1, (int64_t[]){1}, &i1));
  CHECK_OK(ctx, loom_graph_input(g, "w43", LOOM_DTYPE_F32, 2, (int64_t[]){4, 3}, &w43));

  /* layer_norm / rms_norm gamma must be x.shape[axis:] */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_LAYER_NORM, 2, (loom_value[]){x, gbad}, 0, NULL, &out));
  CHECK(strstr(loom_ctx_error(ctx), "layer_norm") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_LAYER_NORM, 2, (loom_value[]){x, gok}, 0, NULL, &out));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_LAYER_NORM, 3, (loom_value[]){x, gok, gok}, 1,
                              (loom_attr[]){AI("axis", 1)}, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_RMS_NORM, 2, (loom_value[]){x, gbad}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_LAYER_NORM, 1, &x, 1, (loom_attr[]){AI("axis", 3)}, &out));
  CHECK_STATUS(
      ctx, LOOM_STATUS_INVALID_ARGUMENT,
      loom_graph_op(g, LOOM_OP_LAYER_NORM, 1, &x, 1, (loom_attr[]){AF("eps", -1.0)}, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_LAYER_NORM, 1, &xi, 0, NULL, &out));
  /* cross_entropy labels: integer dtype and logits.shape[:-1] */
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){x, lf}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){x, l2}, 0, NULL, &out));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){x, li}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){x, xi}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){xi, l2}, 0, NULL, &out));
  /* softmax axis */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_SOFTMAX, 1, &x, 1, (loom_attr[]){AI("axis", -4)}, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_MEAN, 1, &x, 1,
                             (loom_attr[]){AINTS("axes", 2, ((int64_t[]){1, -2}))}, &out));
  /* linear: w [in, out] must match x's last dim */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_LINEAR, 2, (loom_value[]){x, gok}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_LINEAR, 3, (loom_value[]){x, w43, gok}, 0, NULL, &out));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_LINEAR, 3, (loom_value[]){x, w43, gbad}, 0, NULL, &out));
  /* attention: D must agree; leading dims must agree; base is a scalar int */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ATTENTION, 3, (loom_value[]){q, x, x}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ATTENTION, 3, (loom_value[]){x, k5, k5}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ATTENTION, 4, (loom_value[]){x, x, x, i1}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ATTENTION, 4, (loom_value[]){x, x, x, x}, 0, NULL, &out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_ATTENTION, 3, (loom_value[]){x, x, x}, 1,
                             (loom_attr[]){AF("p", 1.0)}, &out));
  CHECK_OK(ctx,
           loom_graph_op(g, LOOM_OP_ATTENTION, 4, (loom_value[]){x, x, x, s_int}, 0, NULL, &out));
  /* adamw: matching shapes, scalar float step, three outputs */
  CHECK_STATUS(
      ctx, LOOM_STATUS_SHAPE_MISMATCH,
      loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){x, x, x, gok, s1}, 0, NULL, 3, outs));
  CHECK_STATUS(
      ctx, LOOM_STATUS_SHAPE_MISMATCH,
      loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){x, x, x, x, s1}, 0, NULL, 3, outs));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){x, x, x, x, s_int}, 0, NULL,
                                   3, outs));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_ADAMW, 5, (loom_value[]){x, x, x, x, s1}, 0, NULL, &out));
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_reduce_mean();
  test_softmax();
  test_norms();
  test_activations();
  test_cross_entropy();
  test_cross_entropy_grad();
  test_linear();
  test_attention();
  test_adamw();
  test_gradients();
  test_decompose_all();
  test_errors();
  loom_ctx_free(ctx);
  return loom_test_finish("test_composite");
}

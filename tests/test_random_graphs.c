/*
 * Graphs nobody wrote by hand: a seeded generator writes random graphs of
 * memory-intensive ops in the text IR — element-wise chains, reductions over
 * random axes with and without keepdims, broadcasts back onto their source
 * (the softmax / norm shape), transposes, reshapes that merge, split and
 * regroup dims, slices, pads, concats, matmuls with their epilogues, composites
 * (softmax, layer_norm, rms_norm, gelu, silu) and dropout — over odd shapes
 * of rank 1 to 4, with some intermediates as extra outputs. Half of them
 * also get the gradient of sum(y * w) with respect to every f32 input
 * (loom_graph_grad), so the backward's fusion patterns are as random.
 *
 * Each graph runs on the cpu backend in every fusion mode (eager, none,
 * loop, stitch) and on opencl where present (stitch, every fourth graph:
 * PoCL compiles slowly), against the reference executor. Tolerance per
 * output: max |got - ref| <= TOL * max(rms(ref), 1e-3). The generator
 * keeps values bounded (exp only of a bounded value, log only of a
 * sigmoid, rsqrt only of mean(x^2) + eps) and, in graphs with a gradient,
 * leaves out the kinks (relu, abs, maximum, reduce_max) where a last-bit
 * difference could pick another branch; comparisons read inputs only.
 *
 * On a failure the graph's text IR is printed: save it as a .loom file and
 * `loom run` / `loom compile --fusion stitch` it to reproduce.
 * LOOM_RANDOM_GRAPHS=N runs N graphs (default 40, 16 with LOOM_TEST_QUICK);
 * LOOM_RANDOM_SEED=S starts at seed S (default 1), for longer hunts;
 * LOOM_RANDOM_PRINT=1 prints every graph.
 */
#include "common.h"

#include "runtime/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-4
#define MAX_VALUES 96
#define MAX_TEXT 32768

static loom_ctx *ctx;

/* ---- the generator ------------------------------------------------------------ */

typedef struct gval {
  int32_t rank;
  int64_t shape[4];
  bool bounded;    /* |x| <= about 1: exp may take it */
  bool positive;   /* > 0 and away from 0: log and rsqrt may take it */
  bool is_input;   /* an input as given: comparisons may read it */
  bool no_operand; /* a constant or a mask: not picked as an operand */
} gval;

typedef struct gen {
  loom_test_rng rng;
  char text[MAX_TEXT];
  size_t len;
  gval v[MAX_VALUES];
  int32_t n;       /* values %v0 .. %v(n-1) */
  int32_t n_in;    /* of which the first n_in are inputs */
  bool smooth;     /* a graph with a gradient: no kinks */
  int64_t dropout; /* dropout offsets used so far */
} gen;

static int64_t pick(gen *g, int64_t n) {
  int64_t k = (int64_t)loom_test_uniform(&g->rng, 0, (double)n);
  return k < n ? k : n - 1;
}

static bool chance(gen *g, double p) { return loom_test_uniform(&g->rng, 0, 1) < p; }

static void put(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(gen *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g->text + g->len, MAX_TEXT - g->len, fmt, ap);
  va_end(ap);
  if (n > 0) g->len = g->len + (size_t)n < MAX_TEXT ? g->len + (size_t)n : MAX_TEXT - 1;
}

static int64_t numel(const gval *v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v->rank; d++)
    n *= v->shape[d];
  return n;
}

static void put_shape(gen *g, int32_t rank, const int64_t *s) {
  put(g, "[");
  for (int32_t d = 0; d < rank; d++)
    put(g, "%s%lld", d ? ", " : "", (long long)s[d]);
  put(g, "]");
}

/* Starts the line of a new value of this shape; returns its index. */
static int32_t def(gen *g, int32_t rank, const int64_t *shape, bool bounded, bool positive) {
  int32_t k = g->n++;
  g->v[k] = (gval){.rank = rank, .bounded = bounded, .positive = positive};
  memcpy(g->v[k].shape, shape, sizeof *shape * (size_t)rank);
  put(g, "%%v%d : f32", k);
  put_shape(g, rank, shape);
  put(g, " = ");
  return k;
}

static const int64_t dims[] = {2, 3, 5, 7, 8, 13, 16, 17, 24, 33, 1};
#define N_DIMS ((int64_t)(sizeof dims / sizeof dims[0]))

static void random_shape(gen *g, int32_t *rank, int64_t *s) {
  *rank = 1 + (int32_t)pick(g, 4);
  int64_t total = 1;
  for (int32_t d = 0; d < *rank; d++) {
    s[d] = dims[pick(g, N_DIMS)];
    if (total * s[d] > 6000) s[d] = total * 2 > 6000 ? 1 : dims[pick(g, 3)];
    total *= s[d];
  }
}

static int32_t new_input(gen *g, int32_t rank, const int64_t *s) {
  int32_t k = g->n++;
  g->v[k] = (gval){.rank = rank, .bounded = true, .is_input = true};
  memcpy(g->v[k].shape, s, sizeof *s * (size_t)rank);
  put(g, "input %%v%d : f32", k);
  put_shape(g, rank, s);
  put(g, "\n");
  g->n_in++;
  return k;
}

/* A recent value, most often the newest; never a constant or a mask. */
static int32_t operand(gen *g) {
  int32_t back = (int32_t)pick(g, g->n < 4 ? g->n : 4);
  int32_t a = chance(g, 0.6) ? g->n - 1 : g->n - 1 - back;
  while (a > 0 && g->v[a].no_operand)
    a--;
  return a;
}

/* Another value of a's shape, or -1. */
static int32_t same_shape(gen *g, int32_t a) {
  for (int32_t tries = 0; tries < 8; tries++) {
    int32_t b = (int32_t)pick(g, g->n);
    if (b != a && !g->v[b].no_operand && g->v[b].rank == g->v[a].rank &&
        !memcmp(g->v[b].shape, g->v[a].shape, sizeof(int64_t) * (size_t)g->v[a].rank))
      return b;
  }
  return -1;
}

static void unary(gen *g, int32_t a) {
  const gval *x = &g->v[a];
  static const char *const always[] = {"neg", "tanh", "sigmoid", "sin", "cos", "erf"};
  int32_t k;
  if (x->bounded && chance(g, 0.25)) {
    k = def(g, x->rank, x->shape, false, true);
    put(g, "exp(%%v%d)\n", a);
  } else if (x->positive && chance(g, 0.3)) {
    k = def(g, x->rank, x->shape, false, false);
    put(g, "log(%%v%d)\n", a);
  } else if (!g->smooth && chance(g, 0.3)) {
    bool relu = chance(g, 0.5);
    k = def(g, x->rank, x->shape, x->bounded, false);
    put(g, "%s(%%v%d)\n", relu ? "relu" : "abs", a);
  } else {
    int32_t op = (int32_t)pick(g, 6);
    bool bounded = op != 0 || x->bounded;
    k = def(g, x->rank, x->shape, bounded, op == 2);
    put(g, "%s(%%v%d)\n", always[op], a);
  }
  (void)k;
}

static void binary(gen *g, int32_t a) {
  int32_t b = same_shape(g, a);
  const gval *x = &g->v[a];
  if (b < 0 || chance(g, 0.2)) { /* with a scalar constant */
    int32_t c = g->n++;
    g->v[c] = (gval){.rank = 0, .bounded = true, .positive = true, .no_operand = true};
    double val = 0.25 + 0.5 * loom_test_uniform(&g->rng, 0, 1);
    put(g, "%%v%d : f32[] = constant(value=%.3f)\n", c, val);
    bool mul = chance(g, 0.5);
    def(g, x->rank, x->shape, x->bounded, x->positive);
    put(g, "%s(%%v%d, %%v%d)\n", mul ? "mul" : "add", a, c);
    return;
  }
  const gval *y = &g->v[b];
  int32_t op = (int32_t)pick(g, g->smooth ? 3 : 5);
  static const char *const name[] = {"add", "sub", "mul", "maximum", "minimum"};
  bool bounded = x->bounded && y->bounded;
  bool positive = op == 0 && x->positive && y->positive;
  def(g, x->rank, x->shape, bounded && op != 0 && op != 1 ? true : false, positive);
  put(g, "%s(%%v%d, %%v%d)\n", name[op], a, b);
  /* a division by a positive value away from 0 */
  if (y->positive && y->bounded == false && chance(g, 0.3)) {
    def(g, x->rank, x->shape, false, false);
    put(g, "div(%%v%d, %%v%d)\n", a, b);
  }
}

/* Reduces a over one or two axes; keepdims, then often broadcast back and
 * combined with a (the softmax and norm shapes). */
static void reduce(gen *g, int32_t a) {
  const gval x = g->v[a];
  if (x.rank == 0) return unary(g, a);
  bool axes[4] = {false};
  int32_t n_axes = 1 + (x.rank > 1 && chance(g, 0.3));
  for (int32_t i = 0; i < n_axes; i++)
    axes[pick(g, x.rank)] = true;
  bool keep = chance(g, 0.6);
  int32_t op = (int32_t)pick(g, g->smooth ? 2 : 3);
  static const char *const name[] = {"reduce_sum", "reduce_mean", "reduce_max"};
  int64_t s[4];
  int32_t r = 0;
  for (int32_t d = 0; d < x.rank; d++) {
    if (!axes[d])
      s[r++] = x.shape[d];
    else if (keep)
      s[r++] = 1;
  }
  /* the rms-norm shape: x * rsqrt(mean(x * x) + eps) */
  bool norm = keep && op == 1 && chance(g, 0.5);
  int32_t src = a;
  if (norm) {
    src = def(g, x.rank, x.shape, false, false);
    put(g, "mul(%%v%d, %%v%d)\n", a, a);
  }
  int32_t red = def(g, r, s, x.bounded && op != 0, false);
  put(g, "%s(%%v%d, axes=[", name[op], src);
  bool first = true;
  for (int32_t d = 0; d < x.rank; d++)
    if (axes[d]) {
      put(g, "%s%d", first ? "" : ", ", d);
      first = false;
    }
  put(g, "], keepdims=%s)\n", keep ? "true" : "false");
  if (!keep || !chance(g, 0.7)) return;
  if (norm) {
    int32_t c = g->n++;
    g->v[c] = (gval){.rank = 0, .no_operand = true};
    put(g, "%%v%d : f32[] = constant(value=0.001)\n", c);
    int32_t e = def(g, r, s, false, true);
    put(g, "add(%%v%d, %%v%d)\n", red, c);
    red = def(g, r, s, false, true);
    put(g, "rsqrt(%%v%d)\n", e);
  }
  int32_t b = def(g, x.rank, x.shape, g->v[red].bounded, g->v[red].positive);
  put(g, "broadcast_to(%%v%d, shape=", red);
  put_shape(g, x.rank, x.shape);
  put(g, ")\n");
  def(g, x.rank, x.shape, false, false);
  put(g, "%s(%%v%d, %%v%d)\n", norm ? "mul" : "sub", a, b);
}

static void layout(gen *g, int32_t a) {
  const gval x = g->v[a];
  int64_t s[4];
  memcpy(s, x.shape, sizeof s);
  int32_t kind = (int32_t)pick(g, 5);
  if (x.rank == 0) kind = 4;
  if (kind == 0 && x.rank >= 2) { /* transpose */
    int64_t perm[4];
    for (int32_t d = 0; d < x.rank; d++)
      perm[d] = d;
    for (int32_t d = x.rank - 1; d > 0; d--) {
      int64_t j = pick(g, d + 1), t = perm[d];
      perm[d] = perm[j];
      perm[j] = t;
    }
    for (int32_t d = 0; d < x.rank; d++)
      s[d] = x.shape[perm[d]];
    def(g, x.rank, s, x.bounded, x.positive);
    put(g, "transpose(%%v%d, perm=", a);
    put_shape(g, x.rank, perm);
    put(g, ")\n");
  } else if (kind == 1) { /* reshape: merge two adjacent dims, split one, or
                             * move a factor from one to the next (GroupNorm's
                             * [N, C, HW] <-> [N, G, C/G*HW]) */
    int32_t r = x.rank;
    int32_t d0 = r >= 2 ? (int32_t)pick(g, r - 1) : 0;
    int64_t f0 = x.shape[d0] % 2 == 0 ? 2 : x.shape[d0] % 3 == 0 ? 3 : 1;
    if (r >= 2 && f0 > 1 && x.shape[d0 + 1] > 1 && chance(g, 0.3)) {
      s[d0] = x.shape[d0] / f0;
      s[d0 + 1] = x.shape[d0 + 1] * f0;
    } else if (r >= 2 && chance(g, 0.5)) {
      int32_t d = (int32_t)pick(g, r - 1);
      s[d] = x.shape[d] * x.shape[d + 1];
      for (int32_t e = d + 1; e < r - 1; e++)
        s[e] = x.shape[e + 1];
      r--;
    } else if (r < 4) {
      int32_t d = (int32_t)pick(g, r);
      int64_t f = x.shape[d] % 2 == 0 ? 2 : x.shape[d] % 3 == 0 ? 3 : 1;
      for (int32_t e = r; e > d + 1; e--)
        s[e] = x.shape[e - 1];
      s[d] = x.shape[d] / f;
      s[d + 1] = f;
      r++;
    }
    def(g, r, s, x.bounded, x.positive);
    put(g, "reshape(%%v%d, shape=", a);
    put_shape(g, r, s);
    put(g, ")\n");
  } else if (kind == 2) { /* slice along one axis */
    int32_t d = (int32_t)pick(g, x.rank);
    int64_t lo = pick(g, (x.shape[d] + 1) / 2),
            hi = x.shape[d] - pick(g, (x.shape[d] - lo) / 2 + 1);
    if (hi <= lo) hi = lo + 1;
    int64_t st[4] = {0}, en[4];
    memcpy(en, x.shape, sizeof en);
    st[d] = lo;
    en[d] = hi;
    s[d] = hi - lo;
    def(g, x.rank, s, x.bounded, x.positive);
    put(g, "slice(%%v%d, starts=", a);
    put_shape(g, x.rank, st);
    put(g, ", ends=");
    put_shape(g, x.rank, en);
    put(g, ")\n");
  } else if (kind == 3) { /* pad one axis */
    int32_t d = (int32_t)pick(g, x.rank);
    int64_t lo[4] = {0}, hi[4] = {0};
    lo[d] = pick(g, 3);
    hi[d] = pick(g, 3);
    s[d] += lo[d] + hi[d];
    def(g, x.rank, s, x.bounded, false);
    put(g, "pad(%%v%d, lo=", a);
    put_shape(g, x.rank, lo);
    put(g, ", hi=");
    put_shape(g, x.rank, hi);
    put(g, ", value=0.5)\n");
  } else { /* concat with a function of itself */
    if (x.rank == 0) return unary(g, a);
    int32_t d = (int32_t)pick(g, x.rank);
    int32_t t = def(g, x.rank, x.shape, true, false);
    put(g, "tanh(%%v%d)\n", a);
    s[d] *= 2;
    def(g, x.rank, s, x.bounded, false);
    if (chance(g, 0.5))
      put(g, "concat(%%v%d, %%v%d, axis=%d)\n", a, t, d);
    else
      put(g, "concat(%%v%d, %%v%d, axis=%d)\n", t, a, d);
  }
}

/* x @ W with a new input W, on the last axis of a rank-2 or rank-3 value
 * (trans_b at random), or softmax / norms / activations. */
static void heavy(gen *g, int32_t a) {
  const gval x = g->v[a];
  int32_t kind = (int32_t)pick(g, 4);
  if (x.rank == 0) return unary(g, a);
  if (kind == 0 && x.rank >= 2 && x.rank <= 3) {
    int64_t k = x.shape[x.rank - 1], n = dims[pick(g, N_DIMS - 1)];
    bool tb = chance(g, 0.5);
    int64_t ws[2] = {tb ? n : k, tb ? k : n};
    int32_t w = new_input(g, 2, ws);
    int64_t s[4];
    memcpy(s, x.shape, sizeof s);
    s[x.rank - 1] = n;
    if (x.rank == 3) { /* batched: W broadcast over the batch */
      int64_t bs[3] = {x.shape[0], ws[0], ws[1]};
      int32_t wb = def(g, 3, bs, true, false);
      put(g, "broadcast_to(%%v%d, shape=", w);
      put_shape(g, 3, bs);
      put(g, ")\n");
      w = wb;
    }
    def(g, x.rank, s, false, false);
    put(g, "matmul(%%v%d, %%v%d%s)\n", a, w, tb ? ", trans_b=true" : "");
  } else if (kind == 1) {
    int32_t axis = (int32_t)pick(g, x.rank);
    def(g, x.rank, x.shape, true, true);
    put(g, "softmax(%%v%d, axis=%d)\n", a, axis);
  } else if (kind == 2) {
    bool ln = chance(g, 0.5);
    def(g, x.rank, x.shape, false, false);
    put(g, "%s(%%v%d)\n", ln ? "layer_norm" : "rms_norm", a);
  } else {
    static const char *const act[] = {"gelu", "silu"};
    int32_t i = (int32_t)pick(g, 2);
    def(g, x.rank, x.shape, x.bounded, false);
    put(g, "%s(%%v%d%s)\n", act[i], a, i == 0 && chance(g, 0.5) ? ", approximate=true" : "");
  }
}

static void dropout(gen *g, int32_t a) {
  const gval x = g->v[a];
  def(g, x.rank, x.shape, false, false);
  put(g, "dropout(%%v%d, p=0.25, seed=%d, offset=%lld)\n", a, 11, (long long)g->dropout);
  g->dropout += numel(&x);
}

/* A comparison of two inputs selecting between two values of their shape. */
static void select_inputs(gen *g) {
  for (int32_t tries = 0; tries < 6; tries++) {
    int32_t a = (int32_t)pick(g, g->n);
    int32_t b = same_shape(g, a);
    if (b < 0 || !g->v[a].is_input || !g->v[b].is_input) continue;
    const gval x = g->v[a];
    int32_t m = g->n++;
    put(g, "%%v%d : bool", m);
    put_shape(g, x.rank, x.shape);
    put(g, " = gt(%%v%d, %%v%d)\n", a, b);
    g->v[m] = (gval){.rank = x.rank, .no_operand = true}; /* bool */
    def(g, x.rank, x.shape, true, false);
    put(g, "select(%%v%d, %%v%d, %%v%d)\n", m, a, b);
    return;
  }
}

/* Writes one random graph's text IR into g->text; with_grad: no kinks. */
static void generate(gen *g, uint64_t seed, bool with_grad) {
  memset(g, 0, sizeof *g);
  g->rng.s = seed * 0x9e3779b97f4a7c15ull + 1;
  g->smooth = with_grad;
  int32_t rank;
  int64_t s[4];
  random_shape(g, &rank, s);
  new_input(g, rank, s);
  if (chance(g, 0.5)) new_input(g, rank, s);
  if (!with_grad && chance(g, 0.3)) select_inputs(g);
  int32_t n_ops = 6 + (int32_t)pick(g, 12);
  for (int32_t i = 0; i < n_ops && g->n < MAX_VALUES - 12; i++) {
    int32_t a = operand(g);
    double r = loom_test_uniform(&g->rng, 0, 1);
    if (r < 0.25)
      unary(g, a);
    else if (r < 0.45)
      binary(g, a);
    else if (r < 0.62)
      reduce(g, a);
    else if (r < 0.82)
      layout(g, a);
    else if (r < 0.95)
      heavy(g, a);
    else
      dropout(g, a);
  }
  /* outputs: the last value and up to two others */
  put(g, "output y = %%v%d\n", g->n - 1);
  for (int32_t i = 0; i < 2; i++) {
    int32_t k = g->n_in + (int32_t)pick(g, g->n - g->n_in);
    if (k != g->n - 1 && !g->v[k].no_operand && !g->v[k].is_input && chance(g, 0.5))
      put(g, "output o%d = %%v%d\n", i, k);
  }
}

/* ---- running ------------------------------------------------------------------ */

/* Adds loss = sum(y * w) (w a new input) and the gradient of every f32
 * input as outputs. */
static bool add_gradient(loom_graph *gr) {
  loom_value y = loom_graph_output_value(gr, 0);
  loom_dtype dt;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  if (loom_graph_value_type(gr, y, &dt, &rank, shape)) return false;
  int32_t n_wrt = loom_graph_num_inputs(gr);
  loom_value wrt[MAX_VALUES];
  for (int32_t i = 0; i < n_wrt; i++)
    wrt[i] = loom_graph_input_value(gr, i);
  loom_value w, prod, loss, grads[MAX_VALUES];
  int64_t axes[LOOM_MAX_RANK];
  for (int32_t d = 0; d < rank; d++)
    axes[d] = d;
  loom_attr red[1] = {{.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = rank, .ints = axes}};
  if (loom_graph_input(gr, "w", LOOM_DTYPE_F32, rank, shape, &w) ||
      loom_graph_op(gr, LOOM_OP_MUL, 2, (loom_value[]){y, w}, 0, NULL, &prod) ||
      loom_graph_op(gr, LOOM_OP_REDUCE_SUM, 1, &prod, rank ? 1 : 0, red, &loss) ||
      loom_graph_grad(gr, loss, n_wrt, wrt, grads))
    return false;
  if (loom_graph_output(gr, "loss", loss)) return false;
  for (int32_t i = 0; i < n_wrt; i++) {
    char name[32];
    snprintf(name, sizeof name, "d_in%d", i);
    if (loom_graph_output(gr, name, grads[i])) return false;
  }
  return true;
}

/* max |got - want| / max(rms(want), 1e-3) */
static double rel_error(const loom_tensor *want, const loom_tensor *got) {
  if (!want || !got || loom_tensor_numel(want) != loom_tensor_numel(got)) return INFINITY;
  const float *a = loom_tensor_data(want), *b = loom_tensor_data(got);
  int64_t n = loom_tensor_numel(want);
  double sq = 0, worst = 0;
  for (int64_t e = 0; e < n; e++)
    sq += (double)a[e] * a[e];
  double scale = fmax(sqrt(sq / (double)(n ? n : 1)), 1e-3);
  for (int64_t e = 0; e < n; e++) {
    double d = fabs((double)a[e] - b[e]) / scale;
    if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

typedef struct mode {
  const char *backend;
  loom_fusion_mode fusion;
  int32_t every; /* runs on every `every`-th graph */
} mode;

static const mode modes[] = {
    {"cpu", LOOM_FUSION_EAGER, 1},  {"cpu", LOOM_FUSION_NONE, 1},      {"cpu", LOOM_FUSION_LOOP, 1},
    {"cpu", LOOM_FUSION_STITCH, 1}, {"opencl", LOOM_FUSION_STITCH, 4},
};
#define N_MODES ((int32_t)(sizeof modes / sizeof modes[0]))

static bool present(const char *backend) {
  static int opencl = 0; /* 0 not asked, 1 present, -1 absent */
  if (strcmp(backend, "opencl") != 0) return true;
  if (opencl == 0) {
    loom_backend *b = NULL;
    opencl =
        loom_test_backend_selected("opencl") && loom_backend_new(ctx, "opencl", &b) == 0 ? 1 : -1;
    if (opencl < 0) printf("test_random_graphs: opencl skipped\n");
    loom_backend_free(b);
  }
  return opencl > 0;
}

/* The failing graph for a reproducer: as generated, and with its gradient
 * as the text IR (`loom run` / `loom compile` take either). */
static void print_graph(const loom_graph *gr, const char *text, bool with_grad) {
  fprintf(stderr, "%s", text);
  char *full = NULL;
  if (with_grad && loom_graph_print(gr, &full) == LOOM_STATUS_OK)
    fprintf(stderr, "# with its gradient:\n%s", full);
  loom_free(full);
}

/* Runs graph number i (seed) in every mode against ref. */
static void check_graph(uint64_t seed, int32_t i, bool with_grad, int32_t *n_ops_total) {
  static gen g;
  generate(&g, seed, with_grad);
  loom_graph *gr = NULL;
  if (loom_graph_parse(ctx, g.text, &gr) != LOOM_STATUS_OK) {
    CHECK(false);
    fprintf(stderr, "seed %llu: the generator wrote a graph that does not parse: %s\n%s",
            (unsigned long long)seed, loom_ctx_error(ctx), g.text);
    return;
  }
  if (with_grad && !add_gradient(gr)) {
    CHECK(false);
    fprintf(stderr, "seed %llu: gradient: %s\n%s", (unsigned long long)seed, loom_ctx_error(ctx),
            g.text);
    loom_graph_free(gr);
    return;
  }
  *n_ops_total += g.n - g.n_in;
  if (getenv("LOOM_RANDOM_PRINT"))
    printf("# seed %llu%s\n%s\n", (unsigned long long)seed, with_grad ? " (with gradient)" : "",
           g.text);
  int32_t no = loom_graph_num_outputs(gr);
  loom_tensor **in = loom_test_uniform_inputs(ctx, gr, seed);
  loom_tensor **ref = loom_test_run(ctx, gr, &LOOM_SESSION_OPTIONS(.backend = "ref"), in);
  bool printed = false;
  for (int32_t m = 0; ref && m < N_MODES; m++) {
    if (i % modes[m].every != 0 || !present(modes[m].backend)) continue;
    loom_session_options o =
        LOOM_SESSION_OPTIONS(.backend = modes[m].backend, .fusion = modes[m].fusion);
    loom_tensor **got = loom_test_run(ctx, gr, &o, in);
    for (int32_t k = 0; got && k < no; k++) {
      double err = rel_error(ref[k], got[k]);
      bool ok = err <= TOL;
      CHECK(ok);
      if (!ok) {
        fprintf(stderr, "seed %llu%s: %s %s: output %s off by %.3g of its rms\n",
                (unsigned long long)seed, with_grad ? " (with gradient)" : "", modes[m].backend,
                loom_fusion_mode_name(modes[m].fusion), loom_graph_output_name(gr, k), err);
      }
      if (!ok && !printed) {
        print_graph(gr, g.text, with_grad);
        printed = true;
      }
    }
    if (!got && !printed) {
      fprintf(stderr, "seed %llu: %s %s failed on:\n", (unsigned long long)seed, modes[m].backend,
              loom_fusion_mode_name(modes[m].fusion));
      print_graph(gr, g.text, with_grad);
      printed = true;
    }
    loom_test_free_tensors(got, no);
  }
  loom_test_free_tensors(ref, no);
  loom_test_free_tensors(in, loom_graph_num_inputs(gr));
  loom_graph_free(gr);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  bool quick = getenv("LOOM_TEST_QUICK") != NULL;
  const char *ns = getenv("LOOM_RANDOM_GRAPHS"), *ss = getenv("LOOM_RANDOM_SEED");
  int32_t n = ns ? atoi(ns) : quick ? 16 : 40;
  uint64_t seed0 = ss ? strtoull(ss, NULL, 10) : 1;
  int32_t ops = 0;
  for (int32_t i = 0; i < n; i++)
    check_graph(seed0 + (uint64_t)i, i, (seed0 + (uint64_t)i) % 2 == 0, &ops);
  printf("test_random_graphs: %d graphs (seeds %llu..%llu, half with gradients), %d generated "
         "ops\n",
         n, (unsigned long long)seed0, (unsigned long long)(seed0 + (uint64_t)n - 1), ops);
  loom_ctx_free(ctx);
  return loom_test_finish("test_random_graphs");
}

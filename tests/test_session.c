/* Sessions end to end: an MLP against a hand computation in every backend
 * and fusion mode, ops on the eager cpu backend against the ref backend
 * (and across thread counts), misuse, in-place updates, the memory plan's
 * peak, session stats, and the fallbacks when the C compiler is missing or
 * fails. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include "ir/build.h"
#include "ir/view.h"
#include "passes/memplan.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static loom_tensor *rand_tensor(loom_ctx *ctx, loom_test_rng *r, int32_t rank,
                                const int64_t *shape) {
  loom_tensor *t = NULL;
  if (loom_tensor_new(ctx, LOOM_DTYPE_F32, rank, shape, &t)) return NULL;
  float *d = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    d[i] = (float)loom_test_uniform(r, -1, 1);
  return t;
}

/* ---- an MLP, computed by hand ------------------------------------------- */

static void test_mlp(loom_ctx *ctx) {
  enum { B = 4, I = 8, H = 16, O = 3 };
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x, w1, b1, w2, h, hb, a, z, y;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){B, I}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w1", LOOM_DTYPE_F32, 2, (int64_t[]){I, H}, &w1));
  CHECK_OK(ctx, loom_graph_param(g, "b1", LOOM_DTYPE_F32, 1, (int64_t[]){H}, &b1));
  CHECK_OK(ctx, loom_graph_param(g, "w2", LOOM_DTYPE_F32, 2, (int64_t[]){H, O}, &w2));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w1}, 0, NULL, &h));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){h, b1}, 0, NULL, &hb));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RELU, 1, &hb, 0, NULL, &a));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, w2}, 0, NULL, &z));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SOFTMAX, 1, &z, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "hidden", a));

  loom_test_rng r = {7};
  loom_tensor *in[4] = {
      rand_tensor(ctx, &r, 2, (int64_t[]){B, I}), rand_tensor(ctx, &r, 2, (int64_t[]){I, H}),
      rand_tensor(ctx, &r, 1, (int64_t[]){H}), rand_tensor(ctx, &r, 2, (int64_t[]){H, O})};
  const float *xv = loom_tensor_data(in[0]), *w1v = loom_tensor_data(in[1]),
              *b1v = loom_tensor_data(in[2]), *w2v = loom_tensor_data(in[3]);
  double want[B][O], hid[B][H];
  for (int b = 0; b < B; b++) {
    for (int j = 0; j < H; j++) {
      double s = b1v[j];
      for (int i = 0; i < I; i++)
        s += (double)xv[b * I + i] * w1v[i * H + j];
      hid[b][j] = s > 0 ? s : 0;
    }
    double zmax = -INFINITY, zs[O], sum = 0;
    for (int o = 0; o < O; o++) {
      zs[o] = 0;
      for (int j = 0; j < H; j++)
        zs[o] += hid[b][j] * w2v[j * O + o];
      zmax = fmax(zmax, zs[o]);
    }
    for (int o = 0; o < O; o++)
      sum += exp(zs[o] - zmax);
    for (int o = 0; o < O; o++)
      want[b][o] = exp(zs[o] - zmax) / sum;
  }
  const loom_session_options modes[] = {
      LOOM_SESSION_OPTIONS(.backend = "ref"),
      LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_EAGER),
      LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_NONE),
      LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_LOOP),
      LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_STITCH),
  };
  for (int k = 0; k < LOOM_ARRAY_LEN(modes); k++) {
    loom_session *s = NULL;
    loom_session_options o = modes[k];
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    loom_tensor *out[2] = {NULL, NULL};
    CHECK_OK(ctx, loom_session_run(s, 4, (const loom_tensor *const *)in, 2, out));
    if (out[0] && out[1]) {
      const float *yv = loom_tensor_data(out[0]), *hv = loom_tensor_data(out[1]);
      CHECK(loom_tensor_rank(out[0]) == 2 && loom_tensor_dim(out[0], 0) == B &&
            loom_tensor_dim(out[0], 1) == O);
      int bad = 0;
      for (int b = 0; b < B; b++) {
        for (int o2 = 0; o2 < O; o2++)
          if (fabs(yv[b * O + o2] - want[b][o2]) > 1e-5 * (fabs(want[b][o2]) + 1e-3)) bad++;
        for (int j = 0; j < H; j++)
          if (fabs(hv[b * H + j] - hid[b][j]) > 1e-5 * (fabs(hid[b][j]) + 1e-3)) bad++;
      }
      CHECK(bad == 0);
      /* a second run with the outputs given reuses them */
      float *keep = loom_tensor_data(out[0]);
      CHECK_OK(ctx, loom_session_run(s, 4, (const loom_tensor *const *)in, 2, out));
      CHECK(loom_tensor_data(out[0]) == keep);
      CHECK(fabs(yv[0] - want[0][0]) <= 1e-5 * (want[0][0] + 1e-3));
    }
    CHECK(loom_session_peak_bytes(s) > 0);
    loom_tensor_free(out[0]);
    loom_tensor_free(out[1]);
    loom_session_free(s);
  }

  /* an eager session's peak is the node plan of the decomposed graph */
  loom_graph *dg = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g, &dg));
  loom_memplan plan;
  CHECK_OK(ctx, loom_memplan_build(dg, &plan));
  loom_session *s = NULL;
  CHECK_OK(ctx,
           loom_session_new(
               ctx, g, &LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_EAGER), &s));
  CHECK(loom_session_peak_bytes(s) == plan.peak_bytes);
  CHECK(plan.peak_bytes >= (B * H + B * O) * 4);
  loom_memplan_free(&plan);
  loom_graph_free(dg);
  loom_session_free(s);
  for (int i = 0; i < 4; i++)
    loom_tensor_free(in[i]);
  loom_graph_free(g);
}

/* ---- misuse ------------------------------------------------------------- */

static void test_tensor_misuse(loom_ctx *ctx) {
  loom_tensor *t = (loom_tensor *)(uintptr_t)1;
  int64_t sh[2] = {2, 3}, neg[2] = {2, -1};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_new(ctx, LOOM_DTYPE_COUNT, 2, sh, &t));
  CHECK(t == NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_new(ctx, LOOM_DTYPE_F32, LOOM_MAX_RANK + 1, sh, &t));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_tensor_new(ctx, LOOM_DTYPE_F32, -1, sh, &t));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, neg, &t));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, NULL, &t));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sh, NULL));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, sh, NULL, &t));
  CHECK(loom_tensor_new(NULL, LOOM_DTYPE_F32, 2, sh, &t) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_tensor_data(NULL) == NULL && loom_tensor_rank(NULL) == 0 &&
        loom_tensor_numel(NULL) == 0 && loom_tensor_dim(NULL, 0) == 0);
  loom_tensor_free(NULL);

  /* zero-filled, shape as given; wrap does not copy */
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I64, 2, sh, &t));
  CHECK(loom_tensor_numel(t) == 6 && loom_tensor_dim(t, 1) == 3 && loom_tensor_dim(t, 2) == 0 &&
        loom_tensor_dtype(t) == LOOM_DTYPE_I64);
  int64_t zero = 0;
  for (int i = 0; i < 6; i++)
    zero |= ((int64_t *)loom_tensor_data(t))[i];
  CHECK(zero == 0);
  loom_tensor_free(t);
  float buf[6] = {1, 2, 3, 4, 5, 6};
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, sh, buf, &t));
  CHECK(loom_tensor_data(t) == buf);
  loom_tensor_free(t); /* must not free buf */
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){0, 5}, &t));
  CHECK(loom_tensor_numel(t) == 0 && loom_tensor_data(t) != NULL);
  loom_tensor_free(t);
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &t));
  CHECK(loom_tensor_numel(t) == 1);
  loom_tensor_free(t);
}

static void test_session_misuse(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x, w, y;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){2, 3}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &w));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));

  loom_session *s = (loom_session *)(uintptr_t)1;
  CHECK(loom_session_new(NULL, g, NULL, &s) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, NULL, NULL, &s));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, NULL, NULL));
  loom_session_options bad = LOOM_SESSION_OPTIONS(.backend = "tpu");
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, &bad, &s));
  CHECK(strstr(loom_ctx_error(ctx), "tpu") && strstr(loom_ctx_error(ctx), "cpu"));
  loom_backend *b = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_backend_new(ctx, "gpu", &b));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_backend_new(ctx, NULL, &b));
  CHECK(b == NULL);
  loom_backend_free(NULL);
  loom_session_free(NULL);
  CHECK(loom_session_peak_bytes(NULL) == 0);
  CHECK(loom_session_run(NULL, 0, NULL, 0, NULL) == LOOM_STATUS_INVALID_ARGUMENT);

  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  loom_test_rng r = {3};
  loom_tensor *xt = rand_tensor(ctx, &r, 2, (int64_t[]){2, 3});
  loom_tensor *wt = rand_tensor(ctx, &r, 2, (int64_t[]){3, 4});
  loom_tensor *wrong_shape = rand_tensor(ctx, &r, 2, (int64_t[]){3, 2});
  loom_tensor *wrong_rank = rand_tensor(ctx, &r, 1, (int64_t[]){6});
  loom_tensor *wrong_dtype = NULL, *yt = NULL, *ybad = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F64, 2, (int64_t[]){2, 3}, &wrong_dtype));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){2, 4}, &yt));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){4, 2}, &ybad));
  float *yd = loom_tensor_data(yt);
  for (int i = 0; i < 8; i++)
    yd[i] = 42.0f;
  const loom_tensor *in[2] = {xt, wt};
  loom_tensor *out[1] = {yt};

  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 1, in, 1, out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 3, in, 1, out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 2, in, 2, out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 2, NULL, 1, out));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 2, in, 1, NULL));
  const loom_tensor *in_null[2] = {xt, NULL};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, 2, in_null, 1, out));
  CHECK(strstr(loom_ctx_error(ctx), "'w'") != NULL);
  const loom_tensor *in_shape[2] = {xt, wrong_shape};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_session_run(s, 2, in_shape, 1, out));
  CHECK(strstr(loom_ctx_error(ctx), "'w'") != NULL);
  const loom_tensor *in_rank[2] = {wrong_rank, wt};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_session_run(s, 2, in_rank, 1, out));
  CHECK(strstr(loom_ctx_error(ctx), "'x'") != NULL);
  const loom_tensor *in_dtype[2] = {wrong_dtype, wt};
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH, loom_session_run(s, 2, in_dtype, 1, out));
  CHECK(strstr(loom_ctx_error(ctx), "'x'") != NULL);
  loom_tensor *out_bad[1] = {ybad};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_session_run(s, 2, in, 1, out_bad));
  CHECK(strstr(loom_ctx_error(ctx), "'y'") != NULL);
  out_bad[0] = wrong_dtype;
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH, loom_session_run(s, 2, in, 1, out_bad));
  /* failures left the output alone */
  int untouched = 0;
  for (int i = 0; i < 8; i++)
    untouched += yd[i] == 42.0f;
  CHECK(untouched == 8);
  CHECK_OK(ctx, loom_session_run(s, 2, in, 1, out));
  CHECK(out[0] == yt && yd[0] != 42.0f);
  loom_session_free(s);

  /* a run-time kernel error (gather index out of range) leaves outputs alone */
  loom_graph *g2 = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g2));
  loom_value tab, idx, gy;
  CHECK_OK(ctx, loom_graph_input(g2, "table", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &tab));
  CHECK_OK(ctx, loom_graph_input(g2, "idx", LOOM_DTYPE_I64, 1, (int64_t[]){2}, &idx));
  CHECK_OK(ctx, loom_graph_op(g2, LOOM_OP_GATHER, 2, (loom_value[]){tab, idx}, 0, NULL, &gy));
  CHECK_OK(ctx, loom_graph_output(g2, "rows", gy));
  for (int k = 0; k < 2; k++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = k ? "cpu" : "ref");
    CHECK_OK(ctx, loom_session_new(ctx, g2, &o, &s));
    loom_tensor *tt = rand_tensor(ctx, &r, 2, (int64_t[]){3, 4}), *it = NULL;
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I64, 1, (int64_t[]){2}, &it));
    ((int64_t *)loom_tensor_data(it))[1] = 3;
    loom_tensor *go[1] = {NULL};
    CHECK_STATUS(
        ctx, LOOM_STATUS_OUT_OF_RANGE,
        loom_session_run(s, 2, (const loom_tensor *const *)(loom_tensor *[]){tt, it}, 1, go));
    CHECK(go[0] == NULL);
    ((int64_t *)loom_tensor_data(it))[1] = 2;
    CHECK_OK(ctx,
             loom_session_run(s, 2, (const loom_tensor *const *)(loom_tensor *[]){tt, it}, 1, go));
    if (go[0]) CHECK(((float *)loom_tensor_data(go[0]))[5] == ((float *)loom_tensor_data(tt))[9]);
    loom_tensor_free(go[0]);
    loom_tensor_free(tt);
    loom_tensor_free(it);
    loom_session_free(s);
  }
  loom_graph_free(g2);

  loom_tensor_free(xt);
  loom_tensor_free(wt);
  loom_tensor_free(wrong_shape);
  loom_tensor_free(wrong_rank);
  loom_tensor_free(wrong_dtype);
  loom_tensor_free(yt);
  loom_tensor_free(ybad);
  loom_graph_free(g);
}

/* ---- outputs aliasing inputs -------------------------------------------- */

static void test_aliasing(loom_ctx *ctx) {
  /* w <- w - 0.5 * grad, written into w itself */
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t w, gr;
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 1, (int64_t[]){5}, &w));
  CHECK_OK(ctx, loom_graph_input(g, "grad", LOOM_DTYPE_F32, 1, (int64_t[]){5}, &gr));
  int32_t upd = lb_sub(g, w, lb_mul(g, gr, lb_scalar(g, LOOM_DTYPE_F32, 0.5)));
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "w_new", upd));
  /* swapped pass-through outputs: each one's source is the other's target */
  CHECK_OK(ctx, loom_graph_output(g, "first", gr));
  CHECK_OK(ctx, loom_graph_output(g, "second", w));
  for (int k = 0; k < 2; k++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = k ? "cpu" : "ref");
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    float wv[5] = {1, 2, 3, 4, 5}, gv[5] = {2, 2, 2, 2, -2}, w2[5], g2[5];
    loom_tensor *wt = NULL, *gt = NULL, *ct = NULL;
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 1, (int64_t[]){5}, wv, &wt));
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 1, (int64_t[]){5}, gv, &gt));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 1, (int64_t[]){5}, &ct));
    /* w_new -> w in place; first (= grad) -> a fresh tensor ct; second (= old w) -> grad */
    loom_tensor *out[3] = {wt, ct, gt};
    memcpy(w2, wv, sizeof wv);
    memcpy(g2, gv, sizeof gv);
    CHECK_OK(ctx,
             loom_session_run(s, 2, (const loom_tensor *const *)(loom_tensor *[]){wt, gt}, 3, out));
    const float *cv = loom_tensor_data(ct);
    int bad = 0;
    for (int i = 0; i < 5; i++) {
      bad += wv[i] != w2[i] - 0.5f * g2[i];
      bad += cv[i] != g2[i];
      bad += gv[i] != w2[i];
    }
    CHECK(bad == 0);
    loom_tensor_free(wt);
    loom_tensor_free(gt);
    loom_tensor_free(ct);
    loom_session_free(s);
  }
  loom_graph_free(g);
}

/* ---- every op: cpu against ref, and across thread counts ---------------- */

typedef struct diff_spec {
  const char *name;
  double lo, hi; /* f32 inputs uniform in [lo, hi) */
  int64_t ihi;   /* integer inputs uniform in [0, ihi) */
  bool native;   /* the cpu backend must run every node itself */
} diff_spec;

static int32_t in_(loom_graph *g, loom_dtype dt, int32_t rank, const int64_t *shape) {
  char name[16];
  snprintf(name, sizeof name, "in%d", g->n_inputs);
  loom_value v = -1;
  if (loom_graph_input(g, name, dt, rank, shape, &v)) g->err = LOOM_STATUS_INVALID_ARGUMENT;
  return v;
}
#define F32(...)                                                                                   \
  in_(g, LOOM_DTYPE_F32, LOOM_ARRAY_LEN(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})
#define I64(...)                                                                                   \
  in_(g, LOOM_DTYPE_I64, LOOM_ARRAY_LEN(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})
#define SHAPE(...)                                                                                 \
  LOOM_ARRAY_LEN(((int64_t[]){__VA_ARGS__})), (int64_t[]) { __VA_ARGS__ }
#define AXES(...)                                                                                  \
  LOOM_ARRAY_LEN(((int64_t[]){__VA_ARGS__})), (int64_t[]) { __VA_ARGS__ }

static int32_t attr_op(loom_graph *g, loom_op op, int32_t n_in, const int32_t *in, int32_t n_attrs,
                       const loom_attr *attrs) {
  loom_value out = -1;
  if (g->err) return -1;
  loom_status st = loom_graph_op(g, op, n_in, in, n_attrs, attrs, &out);
  if (st) g->err = st;
  return out;
}

static const loom_op unary_ops[] = {
    LOOM_OP_NEG,  LOOM_OP_ABS,   LOOM_OP_SIGN,       LOOM_OP_EXP,  LOOM_OP_LOG,
    LOOM_OP_SQRT, LOOM_OP_RSQRT, LOOM_OP_RECIPROCAL, LOOM_OP_TANH, LOOM_OP_SIGMOID,
    LOOM_OP_RELU, LOOM_OP_ERF,   LOOM_OP_SIN,        LOOM_OP_COS};
static const loom_op binary_ops[] = {LOOM_OP_ADD, LOOM_OP_SUB,     LOOM_OP_MUL,    LOOM_OP_DIV,
                                     LOOM_OP_POW, LOOM_OP_MAXIMUM, LOOM_OP_MINIMUM};
static const loom_op compare_ops[] = {LOOM_OP_EQ, LOOM_OP_NE, LOOM_OP_LT,
                                      LOOM_OP_LE, LOOM_OP_GT, LOOM_OP_GE};

/* Builds case k into g (outputs added); false when there is no case k. */
static bool build_case(int k, loom_graph *g, diff_spec *s) {
  *s = (diff_spec){"?", -2, 2, 10, true};
  int32_t y = -1, y2 = -1;
  const int nu = LOOM_ARRAY_LEN(unary_ops), nb = LOOM_ARRAY_LEN(binary_ops);
  if (k < nu) {
    s->name = loom_op_name(unary_ops[k]);
    loom_op op = unary_ops[k];
    if (op == LOOM_OP_LOG || op == LOOM_OP_SQRT || op == LOOM_OP_RSQRT) s->lo = 0.01;
    y = lb_unary(g, op, F32(37, 1029));
    y2 = lb_unary(g, op, F32(3, 5));
    goto done;
  }
  k -= nu;
  if (k < nb * 4) {
    loom_op op = binary_ops[k / 4];
    s->name = loom_op_name(op);
    if (op == LOOM_OP_POW) s->lo = 0.1;
    switch (k % 4) {
    case 0: y = lb_binary(g, op, F32(33, 700), F32(33, 700)); break;
    case 1: y = lb_binary(g, op, F32(33, 700), F32(700)); break;
    case 2: y = lb_binary(g, op, F32(33, 1), F32(1, 700)); break;
    default:
      y = lb_binary(g, op, F32(), F32(5, 1, 3000));
      y2 = lb_binary(g, op, F32(4, 1, 50), F32(3, 1));
    }
    goto done;
  }
  k -= nb * 4;
  switch (k) {
  case 0:
  case 1:
  case 2:
  case 3:
  case 4:
  case 5:
    s->name = loom_op_name(compare_ops[k]);
    s->lo = -2, s->hi = 2;
    {
      int32_t a = lb_cast(g, lb_cast(g, F32(40, 500), LOOM_DTYPE_I64), LOOM_DTYPE_F32);
      y = lb_cast(g, lb_binary(g, compare_ops[k], a, F32(500)), LOOM_DTYPE_F32);
      y2 = lb_binary(g, compare_ops[k], I64(40, 30), I64(30));
    }
    break;
  case 6:
    s->name = "select";
    y = lb_select(g, lb_binary(g, LOOM_OP_GT, F32(40, 1), F32(40, 300)), F32(300), F32(40, 300));
    y2 = lb_select(g, lb_binary(g, LOOM_OP_LT, I64(6), I64(5, 1)), I64(5, 6), I64(6));
    break;
  case 7:
    s->name = "cast";
    s->lo = -300, s->hi = 300;
    {
      int32_t x = F32(50, 400);
      y = lb_cast(g, lb_cast(g, x, LOOM_DTYPE_I32), LOOM_DTYPE_F32);
      y = lb_add(g, y, lb_cast(g, lb_cast(g, x, LOOM_DTYPE_BOOL), LOOM_DTYPE_F32));
      y = lb_add(g, y, lb_cast(g, lb_cast(g, x, LOOM_DTYPE_F16), LOOM_DTYPE_F32));
      y = lb_add(g, y, lb_cast(g, lb_cast(g, x, LOOM_DTYPE_U8), LOOM_DTYPE_F32));
      y2 = lb_cast(g, I64(7, 9), LOOM_DTYPE_F32);
    }
    break;
  case 8:
  case 9:
  case 10: {
    loom_op op = k == 8 ? LOOM_OP_REDUCE_SUM : k == 9 ? LOOM_OP_REDUCE_MAX : LOOM_OP_REDUCE_MIN;
    s->name = loom_op_name(op);
    int32_t x = F32(20, 3000), x4 = F32(4, 5, 6, 70);
    int32_t r1 = lb_reduce(g, op, x, AXES(1), false);
    int32_t r0 = lb_reduce(g, op, x, AXES(0), true);
    int32_t ra = lb_reduce(g, op, x, 0, NULL, false);
    int32_t rm = lb_reduce(g, op, x4, AXES(1, 2), false);
    int32_t rl = lb_reduce(g, op, x4, AXES(-1), true);
    int32_t rf = lb_reduce(g, op, x4, AXES(0, 2), false); /* not one block: ref */
    int32_t big = lb_reduce(g, op, F32(2, 150000), AXES(1), false);
    int32_t wide = lb_reduce(g, op, F32(3, 1, 2, 50000), AXES(0, 1, 2), false);
    s->native = false;
    loom_graph_output(g, "r1", r1);
    loom_graph_output(g, "r0", r0);
    loom_graph_output(g, "ra", ra);
    loom_graph_output(g, "rm", rm);
    loom_graph_output(g, "rl", rl);
    loom_graph_output(g, "rf", rf);
    loom_graph_output(g, "big", big);
    y = wide;
    break;
  }
  case 11:
    s->name = "transpose";
    {
      int32_t x = F32(2, 3, 40, 50);
      y = lb_transpose(g, x, (int64_t[]){0, 1, 3, 2});
      y2 = lb_transpose(g, x, (int64_t[]){0, 2, 1, 3});
      loom_graph_output(g, "rev", lb_transpose(g, x, (int64_t[]){3, 2, 1, 0}));
      loom_graph_output(g, "big", lb_transpose(g, F32(301, 203), (int64_t[]){1, 0}));
      loom_graph_output(g, "i64", lb_transpose(g, I64(7, 33, 5), (int64_t[]){2, 0, 1}));
    }
    break;
  case 12:
    s->name = "reshape/broadcast_to";
    y = lb_reshape(g, F32(6, 40, 5), SHAPE(30, 8, 5));
    y2 = lb_broadcast_to(g, F32(1, 500), SHAPE(40, 500));
    loom_graph_output(g, "col", lb_broadcast_to(g, F32(40, 1), SHAPE(3, 40, 500)));
    loom_graph_output(g, "scalar", lb_broadcast_to(g, F32(), SHAPE(7, 3)));
    break;
  case 13:
    s->name = "slice";
    y = lb_slice(g, F32(40, 500), (int64_t[]){3, -200}, (int64_t[]){30, -1});
    y2 = lb_slice(g, F32(4, 5, 6), (int64_t[]){1, 0, 2}, (int64_t[]){3, 5, 3});
    break;
  case 14:
    s->name = "concat";
    y = lb_concat(g, 3, (int32_t[]){F32(5, 300), F32(2, 300), F32(7, 300)}, 0);
    y2 = lb_concat(g, 2, (int32_t[]){F32(50, 3, 10), F32(50, 3, 1)}, -1);
    break;
  case 15:
    s->name = "pad";
    y = lb_pad(g, F32(40, 300), (int64_t[]){1, 5}, (int64_t[]){2, 0}, 1.5);
    y2 = lb_pad(g, F32(3, 4, 5), (int64_t[]){0, 1, 1}, (int64_t[]){1, 0, 3}, -2);
    break;
  case 16:
    s->name = "gather";
    s->ihi = 20;
    y = lb_gather(g, F32(20, 64), I64(8, 16), 0);
    y2 = lb_gather(g, F32(3, 20, 5), I64(7), 1);
    break;
  case 17:
    s->name = "scatter_add";
    s->ihi = 20;
    y = lb_scatter_add(g, I64(8, 16), F32(8, 16, 64), 2, (int64_t[]){20, 64}, 0);
    y2 = lb_scatter_add(g, I64(30), F32(3, 30, 5), 3, (int64_t[]){3, 20, 5}, 1);
    break;
  case 18:
    s->name = "matmul";
    y = lb_matmul(g, F32(64, 48), F32(48, 200), false, false);
    y2 = lb_matmul(g, F32(48, 64), F32(200, 48), true, true);
    loom_graph_output(g, "ta", lb_matmul(g, F32(300, 65), F32(300, 150), true, false));
    loom_graph_output(g, "tb", lb_matmul(g, F32(130, 30), F32(70, 30), false, true));
    loom_graph_output(g, "batched", lb_matmul(g, F32(3, 5, 7), F32(3, 7, 9), false, false));
    loom_graph_output(g, "bcast", lb_matmul(g, F32(2, 1, 5, 7), F32(4, 7, 9), false, false));
    loom_graph_output(g, "fold", lb_matmul(g, F32(4, 16, 32), F32(32, 24), false, false));
    loom_graph_output(g, "shared_a", lb_matmul(g, F32(16, 32), F32(4, 32, 24), false, false));
    loom_graph_output(g, "bta", lb_matmul(g, F32(3, 7, 5), F32(7, 9), true, false));
    loom_graph_output(g, "k0", lb_matmul(g, F32(3, 0), F32(0, 4), false, false));
    break;
  case 19:
    s->name = "dropout";
    {
      int32_t base =
          lb_cast(g, lb_reduce(g, LOOM_OP_REDUCE_MAX, I64(3), 0, NULL, false), LOOM_DTYPE_I64);
      y = lb_dropout(g, F32(1000, 33), 0.3, 5, 7, base);
      y2 = lb_dropout(g, F32(3, 4), 0.5, -1, 0, -1);
    }
    s->native = false; /* the i64 reduce_max of the base runs on ref */
    break;
  case 20:
    s->name = "iota/constant";
    y = lb_add(g, lb_iota(g, LOOM_DTYPE_F32, 3, (int64_t[]){4, 50, 300}, 1), F32(300));
    y2 = lb_iota(g, LOOM_DTYPE_I64, 2, (int64_t[]){7, 3}, -1);
    loom_graph_output(g, "c", lb_const(g, LOOM_DTYPE_F32, 2, (int64_t[]){100, 300}, 0.25));
    loom_graph_output(g, "ci", lb_const(g, LOOM_DTYPE_I32, 1, (int64_t[]){5}, -3));
    break;
  case 21:
    s->name = "softmax/layer_norm/gelu";
    {
      int32_t x = F32(16, 64, 128);
      y = attr_op(g, LOOM_OP_SOFTMAX, 1, &x, 0, NULL);
      int32_t ln_in[3] = {x, F32(128), F32(128)};
      y2 = attr_op(g, LOOM_OP_LAYER_NORM, 3, ln_in, 0, NULL);
      loom_graph_output(
          g, "gelu",
          attr_op(g, LOOM_OP_GELU, 1, &y2, 1, &(loom_attr){.name = "approximate", .i = 1}));
    }
    break;
  case 22:
    s->name = "cross_entropy";
    s->ihi = 65;
    {
      int32_t ce_in[2] = {F32(16, 64, 65), I64(16, 64)};
      y = attr_op(g, LOOM_OP_CROSS_ENTROPY, 2, ce_in, 0, NULL);
    }
    break;
  case 23:
    s->name = "empty tensors";
    {
      int32_t e = F32(0, 5);
      y = lb_unary(g, LOOM_OP_EXP, e);
      y2 = lb_reduce(g, LOOM_OP_REDUCE_SUM, e, AXES(0), false); /* zeros */
      loom_graph_output(g, "max0", lb_reduce(g, LOOM_OP_REDUCE_MAX, e, AXES(0), true));
      loom_graph_output(g, "mm", lb_matmul(g, e, F32(5, 3), false, false));
      loom_graph_output(g, "cat", lb_concat(g, 2, (int32_t[]){e, F32(2, 5)}, 0));
      loom_graph_output(g, "gat", lb_gather(g, F32(4, 5), I64(0), 0));
      loom_graph_output(g, "pad", lb_pad(g, e, (int64_t[]){1, 0}, (int64_t[]){1, 0}, 3));
    }
    break;
  case 24:
    s->name = "NaN propagation";
    s->lo = -1; /* log of a negative number is NaN */
    {
      int32_t l = lb_unary(g, LOOM_OP_LOG, F32(30, 40));
      y = lb_reduce(g, LOOM_OP_REDUCE_MAX, l, AXES(1), false);
      y2 = lb_reduce(g, LOOM_OP_REDUCE_MIN, l, AXES(0), false);
      loom_graph_output(g, "maximum", lb_binary(g, LOOM_OP_MAXIMUM, l, F32(40)));
      loom_graph_output(g, "minimum", lb_binary(g, LOOM_OP_MINIMUM, F32(30, 1), l));
      loom_graph_output(g, "sum", lb_sum(g, l, AXES(0), false));
      loom_graph_output(g, "gt", lb_cast(g, lb_binary(g, LOOM_OP_GT, l, F32(40)), LOOM_DTYPE_F32));
    }
    break;
  default: return false;
  }
done:
  if (y >= 0) loom_graph_output(g, "y", y);
  if (y2 >= 0) loom_graph_output(g, "y2", y2);
  return true;
}

static void fill_inputs(loom_test_rng *r, const loom_graph *g, const diff_spec *s,
                        loom_tensor **in) {
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_type *t = &g->values[g->inputs[i]].type;
    if (loom_tensor_new(g->ctx, t->dtype, t->rank, t->shape, &in[i])) continue;
    void *d = loom_tensor_data(in[i]);
    for (int64_t e = 0; e < loom_type_numel(t); e++) {
      if (t->dtype == LOOM_DTYPE_F32)
        ((float *)d)[e] = (float)loom_test_uniform(r, s->lo, s->hi);
      else if (t->dtype == LOOM_DTYPE_I64)
        ((int64_t *)d)[e] = (int64_t)loom_test_uniform(r, 0, (double)s->ihi);
    }
  }
}

static void test_ops_differential(loom_ctx *ctx) {
  loom_test_rng r = {99};
  loom_backend *cpu = NULL;
  CHECK_OK(ctx, loom_backend_new(ctx, "cpu", &cpu));
  int n_cases = 0;
  for (int k = 0;; k++) {
    loom_graph *g = NULL;
    CHECK_OK(ctx, loom_graph_new(ctx, &g));
    diff_spec s;
    bool more = build_case(k, g, &s);
    loom_status st = loom_build_status(g);
    if (!more) {
      loom_graph_free(g);
      break;
    }
    n_cases++;
    if (st) {
      fprintf(stderr, "case %d (%s) failed to build: %s\n", k, s.name, loom_ctx_error(ctx));
      CHECK(false);
      loom_graph_free(g);
      continue;
    }
    /* the cpu backend runs the nodes itself (no silent ref fallback) */
    loom_graph *dg = NULL;
    CHECK_OK(ctx, loom_graph_decompose(g, &dg));
    int unsupported = 0;
    for (int32_t j = 0; dg && j < dg->n_nodes; j++)
      if (!cpu->iface->supports_op(cpu->context, dg, &dg->nodes[j])) unsupported++;
    if (s.native && unsupported) {
      fprintf(stderr, "case %d (%s): %d node(s) not on the cpu backend\n", k, s.name, unsupported);
      CHECK(false);
    }
    loom_graph_free(dg);

    loom_tensor *in[32] = {NULL};
    CHECK(g->n_inputs <= 32 && g->n_outputs <= 16);
    fill_inputs(&r, g, &s, in);
    int32_t no = g->n_outputs;
    loom_tensor *ref_out[16] = {NULL}, *cpu_out[3][16] = {{NULL}};
    loom_session *sr = NULL, *sc = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), &sr));
    CHECK_OK(ctx, loom_session_new(
                      ctx, g, &LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_EAGER),
                      &sc));
    CHECK_OK(ctx, loom_session_run(sr, g->n_inputs, (const loom_tensor *const *)in, no, ref_out));
    const int threads[3] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
      CHECK_OK(ctx, loom_ctx_set_threads(ctx, threads[t]));
      CHECK_OK(ctx,
               loom_session_run(sc, g->n_inputs, (const loom_tensor *const *)in, no, cpu_out[t]));
    }
    CHECK_OK(ctx, loom_ctx_set_threads(ctx, 0));
    for (int32_t o = 0; o < no; o++) {
      if (!ref_out[o] || !cpu_out[0][o] || !cpu_out[1][o] || !cpu_out[2][o]) {
        CHECK(false);
        continue;
      }
      int64_t ne = loom_tensor_numel(ref_out[o]);
      loom_dtype dt = loom_tensor_dtype(ref_out[o]);
      size_t nb = (size_t)ne * loom_dtype_size(dt);
      bool same_threads =
          memcmp(loom_tensor_data(cpu_out[0][o]), loom_tensor_data(cpu_out[1][o]), nb) == 0 &&
          memcmp(loom_tensor_data(cpu_out[0][o]), loom_tensor_data(cpu_out[2][o]), nb) == 0;
      if (!same_threads)
        fprintf(stderr, "case %s output %s: differs across thread counts\n", s.name,
                g->output_names[o]);
      CHECK(same_threads);
      int64_t bad = 0, first = -1;
      double rms = 0;
      if (dt == LOOM_DTYPE_F32) {
        const float *a = loom_tensor_data(cpu_out[0][o]), *b = loom_tensor_data(ref_out[o]);
        for (int64_t e = 0; e < ne; e++)
          rms += (double)b[e] * b[e];
        rms = ne ? sqrt(rms / (double)ne) : 0;
        for (int64_t e = 0; e < ne; e++) {
          bool ok = a[e] == b[e] || (a[e] != a[e] && b[e] != b[e]) ||
                    fabs((double)a[e] - b[e]) <= 1e-5 * fmax(fabs(b[e]), rms);
          if (!ok && first < 0) first = e;
          bad += !ok;
        }
        if (bad)
          fprintf(stderr, "case %s output %s: %lld of %lld differ (first at %lld: %.9g vs %.9g)\n",
                  s.name, g->output_names[o], (long long)bad, (long long)ne, (long long)first,
                  a[first], b[first]);
      } else {
        bad = memcmp(loom_tensor_data(cpu_out[0][o]), loom_tensor_data(ref_out[o]), nb) != 0;
        if (bad) fprintf(stderr, "case %s output %s: bytes differ\n", s.name, g->output_names[o]);
      }
      CHECK(bad == 0);
    }
    for (int32_t o = 0; o < no; o++) {
      loom_tensor_free(ref_out[o]);
      for (int t = 0; t < 3; t++)
        loom_tensor_free(cpu_out[t][o]);
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
      loom_tensor_free(in[i]);
    loom_session_free(sr);
    loom_session_free(sc);
    loom_graph_free(g);
  }
  CHECK(n_cases > 60);
  printf("differential: %d cases, cpu vs ref\n", n_cases);
  loom_backend_free(cpu);
}

/* ---- fusion options, stats and compiler fallbacks ----------------------- */

/* y = softmax(relu(x @ w + b)) and its row sums: GEMM plus memory work. */
static loom_graph *small_graph(loom_ctx *ctx) {
  loom_graph *g = NULL;
  if (loom_graph_new(ctx, &g)) return NULL;
  int32_t x, w, b;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){6, 10}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){10, 12}, &w));
  CHECK_OK(ctx, loom_graph_param(g, "b", LOOM_DTYPE_F32, 1, (int64_t[]){12}, &b));
  int32_t h = lb_unary(g, LOOM_OP_RELU, lb_add(g, lb_matmul(g, x, w, false, false), b));
  int32_t y = lb_op(g, LOOM_OP_SOFTMAX, 1, &h, NULL);
  int32_t r = lb_sum(g, lb_mul(g, y, h), 1, (int64_t[]){1}, false);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "r", r));
  return g;
}

/* Runs g with opts on the inputs; max abs difference from want (NULL:
 * returns the outputs in got). */
static double run_small(loom_ctx *ctx, loom_session *s, loom_tensor **in, loom_tensor **want) {
  loom_tensor *out[2] = {NULL, NULL};
  double worst = INFINITY;
  if (loom_session_run(s, 3, (const loom_tensor *const *)in, 2, out) == LOOM_STATUS_OK) {
    worst = 0;
    for (int o = 0; o < 2; o++) {
      const float *a = loom_tensor_data(out[o]), *b = loom_tensor_data(want[o]);
      for (int64_t e = 0; e < loom_tensor_numel(out[o]); e++)
        worst = fmax(worst, fabs((double)a[e] - b[e]));
    }
  } else {
    fprintf(stderr, "run_small: %s\n", loom_ctx_error(ctx));
  }
  loom_tensor_free(out[0]);
  loom_tensor_free(out[1]);
  return worst;
}

static void test_fusion_stats(loom_ctx *ctx) {
  loom_graph *g = small_graph(ctx);
  loom_test_rng r = {5};
  loom_tensor *in[3] = {rand_tensor(ctx, &r, 2, (int64_t[]){6, 10}),
                        rand_tensor(ctx, &r, 2, (int64_t[]){10, 12}),
                        rand_tensor(ctx, &r, 1, (int64_t[]){12})};
  loom_tensor *want[2] = {NULL, NULL};
  loom_session *s = NULL;
  loom_session_stats st;

  /* unknown modes are refused, naming the known ones, on every backend */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.fusion = (loom_fusion_mode)9), &s));
  CHECK(strstr(loom_ctx_error(ctx), "fusion mode 9") &&
        strstr(loom_ctx_error(ctx), "(known: stitch, loop, none, eager)"));
  CHECK_STATUS(
      ctx, LOOM_STATUS_INVALID_ARGUMENT,
      loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref", .fusion = LOOM_FUSION_COUNT),
                       &s));
  CHECK(s == NULL);
  CHECK(loom_session_get_stats(NULL, &st) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(strcmp(loom_session_warning(NULL), "") == 0);

  /* ref ignores the mode: one node at a time */
  CHECK_OK(ctx,
           loom_session_new(
               ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref", .fusion = LOOM_FUSION_LOOP), &s));
  CHECK_OK(ctx, loom_session_run(s, 3, (const loom_tensor *const *)in, 2, want));
  CHECK(loom_session_get_stats(s, NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK_OK(ctx, loom_session_get_stats(s, &st));
  int32_t n_prim = st.n_primitive_ops;
  CHECK(n_prim > 8 && st.n_memory_ops == n_prim - 1 && st.n_kernels == 0 && st.n_eager == n_prim &&
        st.peak_bytes == loom_session_peak_bytes(s));
  CHECK(strcmp(loom_session_warning(s), "") == 0);
  loom_session_free(s);

  /* eager cpu: the matmul through the GEMM library, the rest node by node */
  CHECK_OK(ctx,
           loom_session_new(
               ctx, g, &LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_EAGER), &s));
  CHECK_OK(ctx, loom_session_get_stats(s, &st));
  CHECK(st.n_primitive_ops == n_prim && st.n_gemm == 1 && st.n_eager == n_prim - 1 &&
        st.n_kernels == 0 && !st.cache_hit && st.modeled_bytes == 0);
  CHECK(run_small(ctx, s, in, want) < 1e-5);
  loom_session_free(s);

  /* generated code: fewer kernels the more is fused, same numbers */
  static const loom_fusion_mode modes[] = {LOOM_FUSION_NONE, LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  int32_t kernels[3] = {0, 0, 0};
  for (int m = 0; m < 3; m++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = modes[m]);
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    if (!s) continue;
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    kernels[m] = st.n_kernels;
    CHECK(st.n_kernels >= 1 && st.n_gemm == 1 && st.modeled_bytes > 0 && st.compile_seconds >= 0 &&
          st.peak_bytes == loom_session_peak_bytes(s));
    CHECK(strcmp(loom_session_warning(s), "") == 0);
    double err = run_small(ctx, s, in, want);
    if (err >= 1e-5)
      fprintf(stderr, "fusion %s: max error %g\n", loom_fusion_mode_name(modes[m]), err);
    CHECK(err < 1e-5);
    loom_session_free(s);
    /* the same graph again comes from the kernel cache */
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.cache_hit);
    loom_session_free(s);
  }
  CHECK(kernels[0] >= kernels[1] && kernels[1] >= kernels[2]);
  printf("fusion stats: %d primitive ops; kernels none %d, loop %d, stitch %d\n", n_prim,
         kernels[0], kernels[1], kernels[2]);

  /* no compiler: eager instead, with a warning, and the same numbers */
  const char *old = getenv("LOOM_CC");
  char *saved = old ? strdup(old) : NULL;
  setenv("LOOM_CC", "/nonexistent/loom-test-cc", 1);
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (s) {
    CHECK(strstr(loom_session_warning(s), "eager") != NULL);
    CHECK(strstr(loom_session_warning(s), "loom-test-cc") != NULL);
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.n_kernels == 0 && st.n_gemm == 1 && st.n_eager == n_prim - 1);
    CHECK(run_small(ctx, s, in, want) < 1e-5);
    loom_session_free(s);
  }
  /* a compiler that fails: an error carrying its message */
  char dir[] = "/tmp/loom-test-cc-XXXXXX";
  if (mkdtemp(dir)) {
    char path[64];
    snprintf(path, sizeof path, "%s/cc", dir);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs("#!/bin/sh\n"
            "if [ \"$1\" = --version ]; then echo loom-fake-cc 1.0; exit 0; fi\n"
            "echo 'kernel.c:1:1: error: boom from the fake compiler' >&2\n"
            "exit 1\n",
            f);
      fclose(f);
      chmod(path, 0755);
      setenv("LOOM_CC", path, 1);
      loom_status rc = loom_session_new(ctx, g, NULL, &s);
      CHECK(rc == LOOM_STATUS_INTERNAL && s == NULL);
      CHECK(strstr(loom_ctx_error(ctx), "boom from the fake compiler") != NULL);
      remove(path);
    }
    rmdir(dir);
  }
  if (saved)
    setenv("LOOM_CC", saved, 1);
  else
    unsetenv("LOOM_CC");
  free(saved);

  loom_tensor_free(want[0]);
  loom_tensor_free(want[1]);
  for (int i = 0; i < 3; i++)
    loom_tensor_free(in[i]);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_mlp(ctx);
  test_tensor_misuse(ctx);
  test_session_misuse(ctx);
  test_aliasing(ctx);
  test_fusion_stats(ctx);
  test_ops_differential(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_session");
}

/* Known answers (computed by hand) for the element-wise, reduction, matmul
 * and cast reference kernels, their shape inference errors, and their
 * partition annotations. */
#include "common.h"

#include "ir/graph.h"
#include "ir/view.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

/* Infers op's output type from in_t, checks it against want (if given),
 * then runs the reference kernel on contiguous data. */
static loom_status run_op(loom_ctx *ctx, loom_op op, const loom_attr_value *attrs, int32_t n_in,
                          const loom_type *in_t, void *const *in_d, const loom_type *want,
                          void *out_d) {
  const loom_op_def *d = loom_op_get(op);
  loom_node node;
  memset(&node, 0, sizeof node);
  node.op = op;
  node.n_in = n_in;
  node.n_out = 1;
  if (attrs)
    memcpy(node.attr, attrs, sizeof node.attr);
  else
    loom_attrs_default(op, node.attr);
  loom_type out_t;
  memset(&out_t, 0, sizeof out_t);
  LOOM_TRY(d->infer(ctx, &node, in_t, &out_t));
  if (want && !loom_type_equal(&out_t, want)) {
    char a[128], b[128];
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "inferred %s, wanted %s",
                      loom_type_str(&out_t, a, sizeof a), loom_type_str(want, b, sizeof b));
  }
  loom_view in_v[4], out_v = loom_view_of(&out_t, out_d);
  for (int32_t i = 0; i < n_in; i++)
    in_v[i] = loom_view_of(&in_t[i], in_d[i]);
  return d->ref(ctx, &node, in_v, &out_v);
}

static int count_eq_f(const float *got, const float *want, int n) {
  int k = 0;
  for (int i = 0; i < n; i++)
    k += got[i] == want[i];
  return k;
}

static void test_add_broadcast(loom_ctx *ctx) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
  loom_type t[2] = {{LOOM_DTYPE_F32, 2, {2, 3}}, {LOOM_DTYPE_F32, 1, {3}}};
  loom_type want = {LOOM_DTYPE_F32, 2, {2, 3}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_ADD, NULL, 2, t, (void *[]){a, b}, &want, y));
  CHECK(count_eq_f(y, (float[]){11, 22, 33, 14, 25, 36}, 6) == 6);
  /* [2,1] - [3] -> [2,3] */
  float c[2] = {100, 200};
  loom_type t2[2] = {{LOOM_DTYPE_F32, 2, {2, 1}}, {LOOM_DTYPE_F32, 1, {3}}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_SUB, NULL, 2, t2, (void *[]){c, b}, &want, y));
  CHECK(count_eq_f(y, (float[]){90, 80, 70, 190, 180, 170}, 6) == 6);
}

static void test_unary(loom_ctx *ctx) {
  float x[5] = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f}, y[5];
  loom_type t = {LOOM_DTYPE_F32, 1, {5}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_SIGN, NULL, 1, &t, (void *[]){x}, &t, y));
  CHECK(count_eq_f(y, (float[]){-1, 0, 0, 1, 1}, 5) == 5);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_RELU, NULL, 1, &t, (void *[]){x}, &t, y));
  CHECK(count_eq_f(y, (float[]){0, 0, 0, 0.5f, 3}, 5) == 5);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_SIGMOID, NULL, 1, &t, (void *[]){x}, &t, y));
  CHECK(y[2] == 0.5f);
  CHECK(fabsf(y[0] - 0.11920292f) < 1e-7f); /* 1 / (1 + e^2) */
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_RSQRT, NULL, 1, &t, (void *[]){x}, &t, y));
  CHECK(fabsf(y[3] - 1.41421356f) < 1e-6f);
  CHECK(y[4] == (float)(1.0 / sqrt(3.0)));
  /* sigmoid(-1000) must be 0, not NaN */
  double big[2] = {-1000.0, 1000.0}, sb[2];
  loom_type td = {LOOM_DTYPE_F64, 1, {2}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_SIGMOID, NULL, 1, &td, (void *[]){big}, &td, sb));
  CHECK(sb[0] == 0.0 && sb[1] == 1.0);
  /* integer neg/abs are exact and saturate at the range ends */
  int64_t xi[3] = {INT64_MIN, -5, INT64_MAX}, yi[3];
  loom_type ti = {LOOM_DTYPE_I64, 1, {3}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_ABS, NULL, 1, &ti, (void *[]){xi}, &ti, yi));
  CHECK(yi[0] == INT64_MAX && yi[1] == 5 && yi[2] == INT64_MAX);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_NEG, NULL, 1, &ti, (void *[]){xi}, &ti, yi));
  CHECK(yi[0] == INT64_MAX && yi[1] == 5 && yi[2] == -INT64_MAX);
}

/* A transposed (strided) input view through the generic element-wise loop. */
static void test_strided_input(loom_ctx *ctx) {
  float a[6] = {1, 2, 3, 4, 5, 6}, y[6]; /* [2,3]; read as its [3,2] transpose */
  loom_type ta = {LOOM_DTYPE_F32, 2, {2, 3}}, to = {LOOM_DTYPE_F32, 2, {3, 2}};
  loom_view av = loom_view_of(&ta, a);
  loom_view in = loom_view_permute(&av, (int64_t[]){1, 0});
  loom_view out = loom_view_of(&to, y);
  loom_node node;
  memset(&node, 0, sizeof node);
  node.op = LOOM_OP_NEG;
  node.n_in = node.n_out = 1;
  CHECK_OK(ctx, loom_op_get(LOOM_OP_NEG)->ref(ctx, &node, &in, &out));
  CHECK(count_eq_f(y, (float[]){-1, -4, -2, -5, -3, -6}, 6) == 6);
}

static void test_int_div(loom_ctx *ctx) {
  int32_t a[5] = {7, -7, 5, INT32_MIN, 0}, b[5] = {2, 2, 0, -1, 0}, y[5];
  loom_type t = {LOOM_DTYPE_I32, 1, {5}};
  loom_type t2[2] = {t, t};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_DIV, NULL, 2, t2, (void *[]){a, b}, &t, y));
  /* truncation toward zero; x / 0 == 0; INT32_MIN / -1 saturates */
  CHECK(y[0] == 3 && y[1] == -3 && y[2] == 0 && y[3] == INT32_MAX && y[4] == 0);
  /* i64 stays exact beyond 2^53 */
  int64_t p[2] = {(INT64_C(1) << 60) + 3, INT64_MIN}, q[2] = {1, 0}, r[2];
  loom_type ti = {LOOM_DTYPE_I64, 1, {2}}, ti2[2] = {ti, ti};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_DIV, NULL, 2, ti2, (void *[]){p, q}, &ti, r));
  CHECK(r[0] == (INT64_C(1) << 60) + 3 && r[1] == 0);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_ADD, NULL, 2, ti2, (void *[]){p, q}, &ti, r));
  CHECK(r[0] == (INT64_C(1) << 60) + 4 && r[1] == INT64_MIN);
  /* i32 overflow saturates */
  int32_t m[2] = {INT32_MAX, 65536}, s[2];
  loom_type tm = {LOOM_DTYPE_I32, 1, {2}}, tm2[2] = {tm, tm};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_MUL, NULL, 2, tm2, (void *[]){m, m}, &tm, s));
  CHECK(s[0] == INT32_MAX && s[1] == INT32_MAX);
}

static void test_compare_select(loom_ctx *ctx) {
  float a[4] = {1, 2, 3, NAN}, b[1] = {2}, y[4];
  uint8_t c[4];
  loom_type t[2] = {{LOOM_DTYPE_F32, 1, {4}}, {LOOM_DTYPE_F32, 0, {0}}};
  loom_type tb = {LOOM_DTYPE_BOOL, 1, {4}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_LE, NULL, 2, t, (void *[]){a, b}, &tb, c));
  CHECK(c[0] == 1 && c[1] == 1 && c[2] == 0 && c[3] == 0);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_NE, NULL, 2, t, (void *[]){a, b}, &tb, c));
  CHECK(c[0] == 1 && c[1] == 0 && c[2] == 1 && c[3] == 1);
  /* select(a < 2, a, -1): [4] cond, [4] a, [] b */
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_LT, NULL, 2, t, (void *[]){a, b}, &tb, c));
  float minus1 = -1.0f;
  loom_type ts[3] = {tb, t[0], t[1]};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_SELECT, NULL, 3, ts, (void *[]){c, a, &minus1}, &t[0], y));
  CHECK(y[0] == 1 && y[1] == -1 && y[2] == -1 && y[3] == -1);
  /* maximum propagates NaN */
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_MAXIMUM, NULL, 2, t, (void *[]){a, b}, &t[0], y));
  CHECK(y[0] == 2 && y[1] == 2 && y[2] == 3 && isnan(y[3]));
}

static void test_cast(loom_ctx *ctx) {
  float x[5] = {-2.7f, 2.7f, 1e10f, -1e10f, NAN};
  int32_t y[5];
  loom_type tx = {LOOM_DTYPE_F32, 1, {5}}, ty = {LOOM_DTYPE_I32, 1, {5}};
  loom_attr_value at[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_CAST, at);
  LOOM_ATTRV_I(at, cast, dtype) = LOOM_DTYPE_I32;
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_CAST, at, 1, &tx, (void *[]){x}, &ty, y));
  CHECK(y[0] == -2 && y[1] == 2 && y[2] == INT32_MAX && y[3] == INT32_MIN && y[4] == 0);
  uint8_t bo[5];
  loom_type tbo = {LOOM_DTYPE_BOOL, 1, {5}};
  float z[5] = {0.0f, -0.5f, 3.0f, -0.0f, 1e-30f};
  LOOM_ATTRV_I(at, cast, dtype) = LOOM_DTYPE_BOOL;
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_CAST, at, 1, &tx, (void *[]){z}, &tbo, bo));
  CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 0 && bo[4] == 1);
  /* i64 -> i32 saturates; i64 -> i64 keeps every bit */
  int64_t w[2] = {INT64_C(1) << 40, (INT64_C(1) << 60) + 1}, w2[2];
  int32_t w3[2];
  loom_type tw = {LOOM_DTYPE_I64, 1, {2}}, tw3 = {LOOM_DTYPE_I32, 1, {2}};
  LOOM_ATTRV_I(at, cast, dtype) = LOOM_DTYPE_I32;
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_CAST, at, 1, &tw, (void *[]){w}, &tw3, w3));
  CHECK(w3[0] == INT32_MAX && w3[1] == INT32_MAX);
  LOOM_ATTRV_I(at, cast, dtype) = LOOM_DTYPE_I64;
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_CAST, at, 1, &tw, (void *[]){w}, &tw, w2));
  CHECK(w2[1] == (INT64_C(1) << 60) + 1);
}

static void test_reduce(loom_ctx *ctx) {
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
  loom_type t = {LOOM_DTYPE_F32, 2, {2, 3}};
  loom_attr_value at[LOOM_MAX_ATTRS];
  loom_ints *axes = &LOOM_ATTRV_INTS(at, reduce_sum, axes);
  int64_t *keepdims = &LOOM_ATTRV_I(at, reduce_sum, keepdims);
  loom_attrs_default(LOOM_OP_REDUCE_SUM, at);
  axes->n = 1;
  axes->v[0] = 1;
  *keepdims = 1;
  loom_type w21 = {LOOM_DTYPE_F32, 2, {2, 1}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_SUM, at, 1, &t, (void *[]){x}, &w21, y));
  CHECK(y[0] == 6 && y[1] == 15);
  /* axis -2 without keepdims: column sums */
  axes->v[0] = -2;
  *keepdims = 0;
  loom_type w3 = {LOOM_DTYPE_F32, 1, {3}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MAX, at, 1, &t, (void *[]){x}, &w3, y));
  CHECK(y[0] == 4 && y[1] == 5 && y[2] == 6);
  /* default axes: everything, to rank 0 */
  loom_type w0 = {LOOM_DTYPE_F32, 0, {0}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_SUM, NULL, 1, &t, (void *[]){x}, &w0, y));
  CHECK(y[0] == 21);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MIN, NULL, 1, &t, (void *[]){x}, &w0, y));
  CHECK(y[0] == 1);
  /* an empty reduced axis: sum 0, max -inf, min +inf (ints saturate) */
  loom_type te = {LOOM_DTYPE_F32, 2, {2, 0}}, we = {LOOM_DTYPE_F32, 1, {2}};
  axes->v[0] = 1;
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MAX, at, 1, &te, (void *[]){x}, &we, y));
  CHECK(y[0] == -INFINITY && y[1] == -INFINITY);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MIN, at, 1, &te, (void *[]){x}, &we, y));
  CHECK(y[0] == INFINITY && y[1] == INFINITY);
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_SUM, at, 1, &te, (void *[]){x}, &we, y));
  CHECK(y[0] == 0 && y[1] == 0);
  int32_t yi[2];
  loom_type tie = {LOOM_DTYPE_I32, 2, {2, 0}}, wie = {LOOM_DTYPE_I32, 1, {2}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MAX, at, 1, &tie, (void *[]){x}, &wie, yi));
  CHECK(yi[0] == INT32_MIN && yi[1] == INT32_MIN);
  /* exact i64 max beyond 2^53 */
  int64_t big[3] = {(INT64_C(1) << 60) + 1, (INT64_C(1) << 60) + 3, (INT64_C(1) << 60) + 2}, bm;
  loom_type tbig = {LOOM_DTYPE_I64, 1, {3}}, wbig = {LOOM_DTYPE_I64, 0, {0}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_REDUCE_MAX, NULL, 1, &tbig, (void *[]){big}, &wbig, &bm));
  CHECK(bm == (INT64_C(1) << 60) + 3);
}

static void test_matmul(loom_ctx *ctx) {
  float A[6] = {1, 2, 3, 4, 5, 6};     /* [2,3] */
  float At[6] = {1, 4, 2, 5, 3, 6};    /* A^T, [3,2] */
  float B[6] = {7, 8, 9, 10, 11, 12};  /* [3,2] */
  float Bt[6] = {7, 9, 11, 8, 10, 12}; /* B^T, [2,3] */
  float want[4] = {58, 64, 139, 154}, y[8];
  loom_type t23 = {LOOM_DTYPE_F32, 2, {2, 3}}, t32 = {LOOM_DTYPE_F32, 2, {3, 2}};
  loom_type t22 = {LOOM_DTYPE_F32, 2, {2, 2}};
  loom_attr_value at[LOOM_MAX_ATTRS];
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      loom_attrs_default(LOOM_OP_MATMUL, at);
      LOOM_ATTRV_I(at, matmul, trans_a) = ta;
      LOOM_ATTRV_I(at, matmul, trans_b) = tb;
      loom_type in[2] = {ta ? t32 : t23, tb ? t23 : t32};
      memset(y, 0, sizeof y);
      CHECK_OK(ctx, run_op(ctx, LOOM_OP_MATMUL, at, 2, in, (void *[]){ta ? At : A, tb ? Bt : B},
                           &t22, y));
      CHECK(count_eq_f(y, want, 4) == 4);
    }
  /* batch broadcast: a [2,2,3] (A, then -A) @ b [1,3,2] -> [2,2,2] */
  float A2[12] = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  loom_type in[2] = {{LOOM_DTYPE_F32, 3, {2, 2, 3}}, {LOOM_DTYPE_F32, 3, {1, 3, 2}}};
  loom_type w = {LOOM_DTYPE_F32, 3, {2, 2, 2}};
  CHECK_OK(ctx, run_op(ctx, LOOM_OP_MATMUL, NULL, 2, in, (void *[]){A2, B}, &w, y));
  CHECK(count_eq_f(y, (float[]){58, 64, 139, 154, -58, -64, -139, -154}, 8) == 8);
}

/* Shape inference errors through the public graph API. */
static void test_infer_errors(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  loom_value a, b, c, d, i, k, m, y;
  CHECK_OK(ctx, loom_graph_input(g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){2, 3}, &a));
  CHECK_OK(ctx, loom_graph_input(g, "b", LOOM_DTYPE_F32, 1, (int64_t[]){4}, &b));
  CHECK_OK(ctx, loom_graph_input(g, "c", LOOM_DTYPE_F64, 1, (int64_t[]){3}, &c));
  CHECK_OK(ctx, loom_graph_input(g, "d", LOOM_DTYPE_F32, 3, (int64_t[]){5, 3, 4}, &d));
  CHECK_OK(ctx, loom_graph_input(g, "i", LOOM_DTYPE_I32, 1, (int64_t[]){3}, &i));
  CHECK_OK(ctx, loom_graph_input(g, "k", LOOM_DTYPE_BOOL, 2, (int64_t[]){2, 3}, &k));
  CHECK_OK(ctx, loom_graph_input(g, "m", LOOM_DTYPE_F32, 2, (int64_t[]){3, 3}, &m));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){a, b}, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){a, c}, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH, loom_graph_op(g, LOOM_OP_EXP, 1, &i, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_SELECT, 3, (loom_value[]){a, a, a}, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_SELECT, 3, (loom_value[]){k, b, b}, 0, NULL, &y));
  /* matmul [2,3] @ [2,3]: K = 3 vs 2 */
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, a}, 0, NULL, &y));
  CHECK(strstr(loom_ctx_error(ctx), "[2, 3]") != NULL);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 0, NULL, &y));
  loom_attr bad_axes = {
      .name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = (int64_t[]){2}};
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &a, 1, &bad_axes, &y));
  loom_attr rep_axes = {
      .name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){0, -2}};
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_MAX, 1, &a, 1, &rep_axes, &y));
  loom_attr p1 = {.name = "p", .kind = LOOM_ATTR_FLOAT, .f = 1.0};
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_DROPOUT, 1, &a, 1, &p1, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_DROPOUT, 2, (loom_value[]){a, c}, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_CAST, 1, &a, 0, NULL, &y));

  /* successful inference: comparisons give bool */
  loom_dtype dt;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_GT, 2, (loom_value[]){a, m}, 0, NULL, &y));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_GE, 2, (loom_value[]){a, c}, 0, NULL, &y));
  loom_value a3;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GT, 2, (loom_value[]){a, a}, 0, NULL, &a3));
  CHECK_OK(ctx, loom_graph_value_type(g, a3, &dt, &rank, shape));
  CHECK(dt == LOOM_DTYPE_BOOL && rank == 2 && shape[0] == 2 && shape[1] == 3);
  /* trans_a reads d [5, 3, 4] as [5, M=4, K=3]; @ m [3, 3] -> [5, 4, 3] */
  loom_attr ta = {.name = "trans_a", .kind = LOOM_ATTR_INT, .i = 1};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){d, m}, 1, &ta, &y));
  CHECK_OK(ctx, loom_graph_value_type(g, y, &dt, &rank, shape));
  CHECK(dt == LOOM_DTYPE_F32 && rank == 3 && shape[0] == 5 && shape[1] == 4 && shape[2] == 3);
  loom_graph_free(g);
}

/* Partition strings of one node added to a fresh graph. */
static void check_partition(loom_ctx *ctx, loom_op op, int32_t n_in, const loom_type *in,
                            int32_t n_attrs, const loom_attr *attrs, const char *want) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  loom_value v[4], y;
  char name[16];
  for (int32_t i = 0; i < n_in; i++) {
    snprintf(name, sizeof name, "x%d", i);
    CHECK_OK(ctx, loom_graph_input(g, name, in[i].dtype, in[i].rank, in[i].shape, &v[i]));
  }
  CHECK_OK(ctx, loom_graph_op(g, op, n_in, v, n_attrs, attrs, &y));
  if (g->n_nodes == 1) {
    loom_type it[4], ot = *loom_value_type(g, y);
    for (int32_t i = 0; i < n_in; i++)
      it[i] = *loom_value_type(g, v[i]);
    loom_partition p;
    loom_op_get(op)->partition(&g->nodes[0], it, &ot, &p);
    char buf[256];
    loom_partition_str(&p, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0);
    if (strcmp(buf, want) != 0)
      fprintf(stderr, "  %s partition: got '%s' want '%s'\n", loom_op_name(op), buf, want);
  }
  loom_graph_free(g);
}

static void test_partitions(loom_ctx *ctx) {
  loom_type f23 = {LOOM_DTYPE_F32, 2, {2, 3}}, f32_ = {LOOM_DTYPE_F32, 2, {3, 2}};
  loom_type f3 = {LOOM_DTYPE_F32, 1, {3}};
  check_partition(ctx, LOOM_OP_MATMUL, 2, (loom_type[]){f23, f32_}, 0, NULL,
                  "a b, b c -> a c | b:add");
  loom_attr tb = {.name = "trans_b", .kind = LOOM_ATTR_INT, .i = 1};
  check_partition(ctx, LOOM_OP_MATMUL, 2, (loom_type[]){f23, f23}, 1, &tb,
                  "a b, c b -> a c | b:add");
  loom_attr ta = {.name = "trans_a", .kind = LOOM_ATTR_INT, .i = 1};
  check_partition(ctx, LOOM_OP_MATMUL, 2, (loom_type[]){f32_, f32_}, 1, &ta,
                  "b a, b c -> a c | b:add");
  loom_type b243 = {LOOM_DTYPE_F32, 3, {2, 4, 3}}, b132 = {LOOM_DTYPE_F32, 3, {1, 3, 2}};
  check_partition(ctx, LOOM_OP_MATMUL, 2, (loom_type[]){b243, b132}, 0, NULL,
                  "a b c, _ c d -> a b d | c:add");
  check_partition(ctx, LOOM_OP_MATMUL, 2, (loom_type[]){b243, f32_}, 0, NULL,
                  "a b c, c d -> a b d | c:add");
  loom_attr ax1 = {.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = (int64_t[]){1}};
  check_partition(ctx, LOOM_OP_REDUCE_SUM, 1, &f23, 1, &ax1, "a b -> a | b:add");
  loom_attr rk[2] = {ax1, {.name = "keepdims", .kind = LOOM_ATTR_INT, .i = 1}};
  check_partition(ctx, LOOM_OP_REDUCE_MAX, 1, &f23, 2, rk, "a b -> a _ | b:maximum");
  check_partition(ctx, LOOM_OP_REDUCE_MIN, 1, &f23, 0, NULL, "a b ->  | a:minimum | b:minimum");
  check_partition(ctx, LOOM_OP_ADD, 2, (loom_type[]){f23, f3}, 0, NULL, "a b, b -> a b");
  check_partition(ctx, LOOM_OP_DROPOUT, 1, &f23, 0, NULL, "a b -> a b");
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_add_broadcast(ctx);
  test_unary(ctx);
  test_strided_input(ctx);
  test_int_div(ctx);
  test_compare_select(ctx);
  test_cast(ctx);
  test_reduce(ctx);
  test_matmul(ctx);
  test_infer_errors(ctx);
  test_partitions(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_ops_ref_a");
}

/* simplify: dead code goes, identical nodes merge, x * 1 is x, element-wise
 * ops over constants fold, results do not change. */
#include "common.h"

#include "ir/build.h"
#include "passes/simplify.h"

#include <math.h>
#include <string.h>

static int32_t count_op(const loom_graph *g, loom_op op) {
  int32_t n = 0;
  for (int32_t k = 0; k < g->n_nodes; k++) n += g->nodes[k].op == op;
  return n;
}

/* Runs g on ref with x = 0.1 * (i + 1) and returns output 0's element 0..n */
static void run(loom_ctx *ctx, const loom_graph *g, float *y, int64_t n) {
  loom_session *s = NULL;
  loom_tensor *x = NULL, *out = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  if (x) {
    float *xv = loom_tensor_data(x);
    for (int i = 0; i < 12; i++) xv[i] = 0.1f * (float)(i + 1);
  }
  CHECK_OK(ctx, loom_session_run(s, 1, (const loom_tensor *const *)&x, 1, &out));
  for (int64_t i = 0; out && i < n; i++) y[i] = ((float *)loom_tensor_data(out))[i];
  loom_tensor_free(out);
  loom_tensor_free(x);
  loom_session_free(s);
}

/* g with output `name` = v, simplified and verified (NULL on failure). */
static loom_graph *simplified(loom_ctx *ctx, loom_graph *g, const char *name, int32_t v) {
  loom_graph *s = NULL;
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, name, v));
  CHECK_OK(ctx, loom_graph_simplify(g, &s));
  if (s) CHECK_OK(ctx, loom_graph_verify(s));
  return s;
}

/* A node marked as a recomputation (loom_node.copy, a plan's +recompute)
 * is not merged with the node it repeats; its decomposition's parts keep
 * the mark, so they are not either; an unmarked repeat still merges. */
static void test_copy_mark(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  loom_attr_value axis[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SOFTMAX, axis);
  int32_t s[3];
  for (int32_t k = 0; k < 3; k++) s[k] = lb_op(g, LOOM_OP_SOFTMAX, 1, &x, axis);
  CHECK_OK(ctx, loom_build_status(g));
  if (g->n_nodes == 3) g->nodes[2].copy = 1; /* s[2] recomputes s[0] */
  CHECK_OK(ctx, loom_graph_output(g, "y", lb_add(g, lb_add(g, s[0], s[1]), s[2])));
  loom_graph *m = NULL, *d = NULL, *dm = NULL;
  CHECK_OK(ctx, loom_graph_simplify(g, &m));
  CHECK(m && count_op(m, LOOM_OP_SOFTMAX) == 2);
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (d) CHECK_OK(ctx, loom_graph_simplify(d, &dm));
  int32_t marked = 0;
  for (int32_t k = 0; dm && k < dm->n_nodes; k++) marked += dm->nodes[k].copy == 1;
  CHECK(dm && count_op(dm, LOOM_OP_EXP) == 2 && marked > 2);
  float a[12] = {0}, b[12] = {0};
  run(ctx, g, a, 12);
  if (dm) run(ctx, dm, b, 12);
  for (int i = 0; i < 12; i++) CHECK(fabsf(a[i] - b[i]) <= 1e-6f && a[i] > 0);
  loom_graph_free(dm);
  loom_graph_free(d);
  loom_graph_free(m);
  loom_graph_free(g);
}

/* x * 1 and x / 1 become x, the broadcast 1 dies with them; a product
 * whose other operand is smaller (1 * a broadcast row), a division by 1
 * on the left, x * 2 and a graph output keep their node. */
static void test_identity(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  int32_t one = lb_broadcast_like(g, lb_scalar(g, LOOM_DTYPE_F32, 1.0), x);
  int32_t e = lb_unary(g, LOOM_OP_EXP, x);
  int32_t a = lb_mul(g, one, e);                                       /* e */
  int32_t b = lb_div(g, a, lb_scalar(g, LOOM_DTYPE_F32, 1.0));         /* e */
  int32_t row = lb_reshape(g, lb_sum(g, x, 1, (int64_t[]){0}, false), 2, (int64_t[]){1, 4});
  int32_t c = lb_mul(g, one, row);                                     /* kept: broadcasts */
  int32_t d = lb_div(g, lb_scalar(g, LOOM_DTYPE_F32, 1.0), lb_add(g, e, one)); /* kept */
  int32_t y = lb_add(g, lb_add(g, b, c), lb_mul(g, d, lb_scalar(g, LOOM_DTYPE_F32, 2.0)));
  loom_graph *s = simplified(ctx, g, "y", y);
  if (s) {
    CHECK(count_op(s, LOOM_OP_MUL) == 2); /* 1 * row, d * 2 */
    CHECK(count_op(s, LOOM_OP_DIV) == 1);
    CHECK(count_op(s, LOOM_OP_BROADCAST_TO) == 1); /* read by 1 * row and e + 1 */
    float r[12] = {0}, t[12] = {0};
    run(ctx, g, r, 12);
    run(ctx, s, t, 12);
    for (int i = 0; i < 12; i++) CHECK(r[i] == t[i] && r[i] > 1);
  }
  loom_graph_free(s);
  loom_graph_free(g);
  /* an output computed as x * 1 keeps its node */
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  s = simplified(ctx, g, "z", lb_mul(g, x, lb_scalar(g, LOOM_DTYPE_F32, 1.0)));
  CHECK(s && count_op(s, LOOM_OP_MUL) == 1);
  loom_graph_free(s);
  loom_graph_free(g);
}

/* Element-wise ops over constants (broadcast or not) fold into one
 * constant of their shape, bit for bit what the reference computes in
 * f32; a division by zero (inf), an integer op and an output do not. */
static void test_fold(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  int32_t third = lb_broadcast_like(g, lb_scalar(g, LOOM_DTYPE_F32, 1.0 / 3.0), x);
  int32_t a = lb_mul(g, lb_neg(g, third), lb_scalar(g, LOOM_DTYPE_F32, 3.0));
  int32_t b = lb_add(g, lb_scalar(g, LOOM_DTYPE_F32, 0.1), lb_scalar(g, LOOM_DTYPE_F32, 0.2));
  int32_t c = lb_binary(g, LOOM_OP_MAXIMUM, lb_sub(g, b, lb_scalar(g, LOOM_DTYPE_F32, 0.7)),
                        lb_scalar(g, LOOM_DTYPE_F32, -0.5));
  int32_t inf = lb_div(g, lb_scalar(g, LOOM_DTYPE_F32, 1.0), lb_scalar(g, LOOM_DTYPE_F32, 0.0));
  int32_t i = lb_add(g, lb_scalar(g, LOOM_DTYPE_I32, 2.0), lb_scalar(g, LOOM_DTYPE_I32, 3.0));
  int32_t y = lb_add(g, lb_mul(g, x, a), lb_add(g, b, c));
  y = lb_add(g, y, lb_binary(g, LOOM_OP_MINIMUM, inf, lb_cast(g, i, LOOM_DTYPE_F32)));
  loom_graph *s = simplified(ctx, g, "y", y);
  if (s) {
    CHECK(count_op(s, LOOM_OP_NEG) == 0 && count_op(s, LOOM_OP_MAXIMUM) == 0);
    CHECK(count_op(s, LOOM_OP_SUB) == 0);
    CHECK(count_op(s, LOOM_OP_DIV) == 1);      /* 1 / 0 stays */
    CHECK(count_op(s, LOOM_OP_MINIMUM) == 1);  /* its input is not folded */
    CHECK(count_op(s, LOOM_OP_MUL) == 1);      /* x * a */
    CHECK(count_op(s, LOOM_OP_ADD) == 3);      /* i32 2 + 3 and the two that read x */
    float r[12] = {0}, t[12] = {0};
    run(ctx, g, r, 12);
    run(ctx, s, t, 12);
    for (int k = 0; k < 12; k++) CHECK(r[k] == t[k] && r[k] > 3); /* 5 - 0.1 - x */
  }
  loom_graph_free(s);
  loom_graph_free(g);
  /* an output that is a sum of constants keeps its node */
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  s = simplified(ctx, g, "z",
                 lb_add(g, lb_scalar(g, LOOM_DTYPE_F32, 1.0), lb_scalar(g, LOOM_DTYPE_F32, 2.0)));
  CHECK(s && count_op(s, LOOM_OP_ADD) == 1);
  loom_graph_free(s);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &x));
  /* exp(x) twice, the same dropout twice, a dead branch, two equal constants */
  int32_t e1 = lb_unary(g, LOOM_OP_EXP, x), e2 = lb_unary(g, LOOM_OP_EXP, x);
  int32_t d1 = lb_dropout(g, e1, 0.5, 7, 0, -1), d2 = lb_dropout(g, e2, 0.5, 7, 0, -1);
  int32_t d3 = lb_dropout(g, e2, 0.5, 8, 0, -1); /* other seed: a different mask */
  int32_t two_a = lb_scalar(g, LOOM_DTYPE_F32, 2.0), two_b = lb_scalar(g, LOOM_DTYPE_F32, 2.0);
  int32_t y = lb_add(g, lb_mul(g, d1, two_a), lb_mul(g, d2, two_b));
  y = lb_add(g, y, d3);
  (void)lb_unary(g, LOOM_OP_LOG, y); /* dead */

  loom_graph *s = simplified(ctx, g, "y", y);
  if (s) {
    CHECK(count_op(s, LOOM_OP_EXP) == 1);
    CHECK(count_op(s, LOOM_OP_DROPOUT) == 2);
    CHECK(count_op(s, LOOM_OP_CONSTANT) == 1);
    CHECK(count_op(s, LOOM_OP_MUL) == 1);
    CHECK(count_op(s, LOOM_OP_LOG) == 0);
    CHECK(loom_graph_num_inputs(s) == 1 && loom_graph_num_outputs(s) == 1);
    CHECK(strcmp(loom_graph_output_name(s, 0), "y") == 0);
    float a[12] = {0}, b[12] = {0};
    run(ctx, g, a, 12);
    run(ctx, s, b, 12);
    for (int i = 0; i < 12; i++) CHECK(a[i] == b[i]);
    /* y = 4 * dropout_7(exp x) + dropout_8(exp x): some element differs from 4*... */
    bool nonzero = false;
    for (int i = 0; i < 12; i++) nonzero |= fabsf(a[i]) > 0;
    CHECK(nonzero);
  }
  loom_graph_free(s);
  loom_graph_free(g);
  test_copy_mark(ctx);
  test_identity(ctx);
  test_fold(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_simplify");
}

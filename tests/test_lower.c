/*
 * Lowering fused groups into kernels: whole graphs (decomposed, with
 * gradients where training needs them) put in one group, analysed in each
 * fusion mode, lowered, run by the kernel interpreter and compared with the
 * reference executor (session backend "ref"), output by output
 * (lower_check.h); layer-like cases, then random DAGs.
 */
#include "lower_check.h"

#include "codegen/c_codegen.h"
#include "ir/build.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool quick(void) {
  const char *q = getenv("LOOM_TEST_QUICK");
  return q && q[0] == '1';
}

static void case_layernorm(loom_ctx *ctx, int64_t n, int64_t h, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t gam = loom_test_lower_input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t bet = loom_test_lower_input(g, "beta", LOOM_DTYPE_F32, 1, &h);
  int32_t y = loom_test_lower_op(g, LOOM_OP_LAYER_NORM, 3, (int32_t[]){x, gam, bet}, 0, NULL);
  char name[64];
  if (!bwd) {
    loom_graph_output(g, "y", y);
    snprintf(name, sizeof name, "layernorm fwd [%lld,%lld]", (long long)n, (long long)h);
    loom_lower_case tc = {name, -2, 2, 0, 0, h > 1 ? 0 : 1, 1, 1};
    loom_test_lower_check(ctx, g, &tc);
  } else {
    int32_t loss = loom_test_lower_loss(g, y, 2, xs);
    loom_value grads[3];
    CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, gam, bet}, grads));
    loom_graph_output(g, "dx", grads[0]);
    loom_graph_output(g, "dgamma", grads[1]);
    loom_graph_output(g, "dbeta", grads[2]);
    snprintf(name, sizeof name, "layernorm bwd [%lld,%lld]", (long long)n, (long long)h);
    loom_lower_case tc = {name, -2, 2, 0, 0, -1, 0, 1};
    loom_test_lower_check(ctx, g, &tc);
  }
  loom_graph_free(g);
}

static void case_softmax(loom_ctx *ctx, int32_t rank, const int64_t *shape, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, rank, shape);
  int32_t y = loom_test_lower_op(g, LOOM_OP_SOFTMAX, 1, &x, 0, NULL);
  char name[64];
  snprintf(name, sizeof name, "softmax %s rank %d [..%lld]", bwd ? "bwd" : "fwd", rank,
           (long long)shape[rank - 1]);
  if (!bwd) {
    loom_graph_output(g, "y", y);
  } else {
    int32_t loss = loom_test_lower_loss(g, y, rank, shape);
    loom_value dx;
    CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &x, &dx));
    loom_graph_output(g, "dx", dx);
  }
  loom_lower_case tc = {name, -3, 3, 0, 0, shape[rank - 1] > 1 ? 0 : -1, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* y = layernorm(dropout(x + b) + residual) */
static void case_bdrln(loom_ctx *ctx, int64_t n, int64_t h) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 1, &h);
  int32_t res = loom_test_lower_input(g, "res", LOOM_DTYPE_F32, 2, xs);
  int32_t gam = loom_test_lower_input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t bet = loom_test_lower_input(g, "beta", LOOM_DTYPE_F32, 1, &h);
  int32_t d = lb_dropout(g, lb_add(g, x, b), 0.1, 1234, 77, -1);
  int32_t s = lb_add(g, d, res);
  int32_t y = loom_test_lower_op(g, LOOM_OP_LAYER_NORM, 3, (int32_t[]){s, gam, bet}, 0, NULL);
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "s", s); /* the residual stream, kept for later */
  char name[64];
  snprintf(name, sizeof name, "bias+dropout+res+ln [%lld,%lld]", (long long)n, (long long)h);
  loom_lower_case tc = {name, -2, 2, 0, 0, 0, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_xent(loom_ctx *ctx, int64_t n, int64_t c, loom_dtype ldt) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, c};
  int32_t x = loom_test_lower_input(g, "logits", LOOM_DTYPE_F32, 2, xs);
  int32_t lab = loom_test_lower_input(g, "labels", ldt, 1, &n);
  int32_t loss = loom_test_lower_op(g, LOOM_OP_CROSS_ENTROPY, 2, (int32_t[]){x, lab}, 0, NULL);
  loom_value dx;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &x, &dx));
  loom_graph_output(g, "loss", loss);
  loom_graph_output(g, "dlogits", dx);
  char name[64];
  snprintf(name, sizeof name, "cross-entropy f+b [%lld,%lld]", (long long)n, (long long)c);
  loom_lower_case tc = {name, -4, 4, 0, c - 1, 0, 0, 2};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_adamw(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s0[2] = {5, 7}, s1[1] = {33}, s2[3] = {2, 3, 4};
  const int64_t *shapes[3] = {s0, s1, s2};
  int32_t ranks[3] = {2, 1, 3};
  int32_t step = loom_test_lower_input(g, "step", LOOM_DTYPE_F32, 0, NULL);
  for (int i = 0; i < 3; i++) {
    char nm[4][16];
    snprintf(nm[0], 16, "p%d", i);
    snprintf(nm[1], 16, "g%d", i);
    snprintf(nm[2], 16, "m%d", i);
    snprintf(nm[3], 16, "v%d", i);
    int32_t p = loom_test_lower_input(g, nm[0], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t gr = loom_test_lower_input(g, nm[1], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t m = loom_test_lower_input(g, nm[2], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t v = loom_test_lower_input(g, nm[3], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    loom_value out[3];
    loom_attr lr = {.name = "lr", .kind = LOOM_ATTR_FLOAT, .f = 0.01};
    CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){p, gr, m, v, step}, 1,
                                      &lr, 3, out));
    for (int j = 0; j < 3; j++) {
      char on[32];
      snprintf(on, sizeof on, "o%d_%d", i, j);
      loom_graph_output(g, on, out[j]);
    }
  }
  loom_lower_case tc = {"adamw x3", 0.1, 3, 0, 0, 1, 3, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_bias_gelu(loom_ctx *ctx, int64_t n, int64_t h, bool approx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {2, n, h};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 3, xs);
  int32_t b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 1, &h);
  loom_attr ap = {.name = "approximate", .kind = LOOM_ATTR_INT, .i = approx};
  int32_t s = lb_add(g, x, b);
  int32_t y = loom_test_lower_op(g, LOOM_OP_GELU, 1, &s, 1, &ap);
  loom_graph_output(g, "y", y);
  char name[64];
  snprintf(name, sizeof name, "bias+gelu(%s) [2,%lld,%lld]", approx ? "tanh" : "erf",
           (long long)n, (long long)h);
  loom_lower_case tc = {name, -3, 3, 0, 0, 1, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* A flat element-wise chain over a huge 1-D tensor: split into rows. */
static void case_flat(loom_ctx *ctx, int64_t n) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 1, &n);
  int32_t y = lb_mul(g, lb_unary(g, LOOM_OP_SIGMOID, x), lb_scalar(g, LOOM_DTYPE_F32, 3.0));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "total", lb_sum(g, y, 0, NULL, false));
  char name[64];
  snprintf(name, sizeof name, "flat chain + total [%lld]", (long long)n);
  loom_lower_case tc = {name, -3, 3, 0, 0, 1, 0, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* A chain of n tanh (issue 8 bug 5): lowering, the kernel verifier and
 * interpreter, and C generation walk expressions 10k deep without
 * recursion (a recursive emitter overflowed the stack), and match the
 * reference. */
static void case_deep_chain(loom_ctx *ctx, int32_t n) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 1, (int64_t[]){16});
  for (int32_t i = 0; i < n; i++) x = lb_unary(g, i % 2 ? LOOM_OP_TANH : LOOM_OP_NEG, x);
  loom_graph_output(g, "y", x);
  char name[64];
  snprintf(name, sizeof name, "chain of %d neg/tanh", n);
  loom_lower_case tc = {name, -3, 3, 0, 0, 1, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  /* C for the same kernel (generated, not compiled) */
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  for (int32_t i = 0; i < g->n_nodes; i++) gon[i] = 0;
  loom_kernel k = {0};
  loom_kschedule sched = {.rows_per_tile = 2, .vector_width = 4};
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 0, LOOM_FUSION_STITCH, &sched, "k_deep", &k));
  char *src = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, &k, 1, &src));
  CHECK(src && strstr(src, "k_deep") != NULL);
  free(src);
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

/* Element-wise work over short rows keeps rows for the threads: [512, 128]
 * is not one row of 65536 (one tile), and [4096, 4] is not 4096 rows of 4. */
static void case_short_rows(loom_ctx *ctx, int64_t n, int64_t h) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 1, &h);
  int32_t t = lb_unary(g, LOOM_OP_TANH, lb_add(g, x, b));
  loom_graph_output(g, "y", lb_mul(g, t, lb_scalar(g, LOOM_DTYPE_F32, 0.5)));
  CHECK_OK(ctx, loom_build_status(g));
  char name[64];
  snprintf(name, sizeof name, "short rows [%lld,%lld]", (long long)n, (long long)h);
  loom_lower_case tc = {name, -3, 3, 0, 0, 1, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  for (int32_t i = 0; i < g->n_nodes; i++) gon[i] = 7;
  loom_group_info info;
  CHECK(loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_STITCH, &info));
  CHECK(info.rows >= 16 && info.rows * info.row_len == n * h);
  loom_kernel k;
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, NULL, "k", &k));
  CHECK(k.n_parts == 1);
  if (k.n_parts == 1) {
    int64_t rows = loom_kpart_rows(&k.parts[0]), len = loom_kpart_row_len(&k.parts[0]);
    CHECK(rows >= 16 && len >= 8 && rows * len == n * h);
    printf("%-28s rows %lld x row %lld\n", name, (long long)rows, (long long)len);
  }
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

static void case_batchnorm(loom_ctx *ctx, int64_t n, int64_t c) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, c};
  int64_t ax0 = 0;
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t inv = lb_scalar(g, LOOM_DTYPE_F32, 1.0 / (double)n);
  int32_t mean = lb_mul(g, lb_sum(g, x, 1, &ax0, true), inv);
  int32_t d = lb_sub(g, x, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, d, d), 1, &ax0, true), inv);
  int32_t y = lb_mul(g, d, lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, lb_scalar(g, LOOM_DTYPE_F32, 1e-5))));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "mean", mean); /* materialized, and loaded by later phases */
  loom_lower_case tc = {"batchnorm (column stats)", -2, 2, 0, 0, 0, 0, 3};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* Transposed and sliced inputs fold into loads; broadcast_to and size-1
 * reshapes of computed values share their loops. */
static void case_layout(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t as[2] = {7, 5}, bs[2] = {9, 7}, rs[3] = {5, 1, 7};
  int32_t a = loom_test_lower_input(g, "a", LOOM_DTYPE_F32, 2, as);
  int32_t b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 2, bs);
  int32_t at = lb_transpose(g, a, (int64_t[]){1, 0});              /* [5,7] */
  int32_t bsl = lb_slice(g, b, (int64_t[]){2, 0}, (int64_t[]){7, 7}); /* [5,7] */
  int32_t s = lb_add(g, at, bsl);
  int64_t ax = 1;
  int32_t mx = lb_reduce(g, LOOM_OP_REDUCE_MAX, s, 1, &ax, false); /* [5] */
  int32_t mr = lb_reshape(g, mx, 2, (int64_t[]){5, 1});
  int32_t e = lb_unary(g, LOOM_OP_EXP, lb_sub(g, s, lb_broadcast_to(g, mr, 2, (int64_t[]){5, 7})));
  loom_graph_output(g, "e", lb_reshape(g, e, 3, rs));
  loom_graph_output(g, "t", lb_transpose(g, e, (int64_t[]){1, 0}));
  loom_graph_output(g, "flat", lb_reshape(g, lb_unary(g, LOOM_OP_TANH, e), 1, (int64_t[]){35}));
  loom_lower_case tc = {"transpose/slice/reshape", -2, 2, 0, 0, 0, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* Concat, pad and slice inside one kernel: rotary embeddings (slices of
 * an input, neg, concat) and the shape of their backward (slices of a
 * gradient padded back), a softmax over a concat of three computed pieces,
 * a pad of a computed value, a slice of a computed value, and a concat
 * along rows reduced over rows. */
static void case_concat_pad(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {3, 4, 10}, cs[3] = {3, 1, 10};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 3, xs), d = loom_test_lower_input(g, "d", LOOM_DTYPE_F32, 3, xs);
  int32_t cs_ = loom_test_lower_input(g, "cos", LOOM_DTYPE_F32, 3, cs), sn = loom_test_lower_input(g, "sin", LOOM_DTYPE_F32, 3, cs);
  int32_t x1 = lb_slice(g, x, (int64_t[]){0, 0, 0}, (int64_t[]){3, 4, 5});
  int32_t x2 = lb_slice(g, x, (int64_t[]){0, 0, 5}, (int64_t[]){3, 4, 10});
  int32_t rot = lb_concat(g, 2, (int32_t[]){lb_neg(g, x2), x1}, -1);
  int32_t y = lb_add(g, lb_mul(g, x, cs_), lb_mul(g, rot, sn));
  loom_graph_output(g, "y", lb_unary(g, LOOM_OP_TANH, y));
  int32_t d1 = lb_slice(g, d, (int64_t[]){0, 0, 0}, (int64_t[]){3, 4, 5});
  int32_t d2 = lb_slice(g, d, (int64_t[]){0, 0, 5}, (int64_t[]){3, 4, 10});
  int32_t back = lb_add(g, lb_pad(g, lb_neg(g, d1), (int64_t[]){0, 0, 5}, (int64_t[]){0, 0, 0}, 0),
                        lb_pad(g, d2, (int64_t[]){0, 0, 0}, (int64_t[]){0, 0, 5}, 0));
  int32_t e = lb_unary(g, LOOM_OP_EXP, d);
  int32_t mid = lb_slice(g, e, (int64_t[]){0, 1, 2}, (int64_t[]){3, 3, 9}); /* [3, 2, 7] */
  int32_t mid_p = lb_pad(g, mid, (int64_t[]){0, 1, 2}, (int64_t[]){0, 1, 1}, 0.25);
  loom_graph_output(g, "back", lb_add(g, lb_mul(g, back, sn), mid_p));
  loom_lower_case tc = {"rotary, slices padded back", -2, 2, 0, 0, -1, 0, 0};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);

  loom_graph_new(ctx, &g);
  int32_t a = loom_test_lower_input(g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){4, 3});
  int32_t b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t c = loom_test_lower_input(g, "c", LOOM_DTYPE_F32, 2, (int64_t[]){4, 2});
  int32_t k = lb_concat(g, 3, (int32_t[]){lb_unary(g, LOOM_OP_TANH, a), b,
                                           lb_unary(g, LOOM_OP_EXP, c)}, 1); /* [4, 11] */
  loom_attr_value av[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SOFTMAX, av);
  LOOM_ATTRV_I(av, softmax, axis) = -1;
  loom_graph_output(g, "softmax", lb_op(g, LOOM_OP_SOFTMAX, 1, &k, av));
  int32_t b2 = loom_test_lower_input(g, "b2", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t p = lb_pad(g, lb_unary(g, LOOM_OP_EXP, b2), (int64_t[]){1, 2}, (int64_t[]){0, 3}, -0.5);
  int64_t ax = 1;
  loom_graph_output(g, "pad_sum", lb_sum(g, lb_mul(g, p, p), 1, &ax, false)); /* [5] */
  int32_t b3 = loom_test_lower_input(g, "b3", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t b4 = loom_test_lower_input(g, "b4", LOOM_DTYPE_F32, 2, (int64_t[]){3, 6});
  int32_t rows = lb_concat(g, 2, (int32_t[]){lb_neg(g, b3), lb_unary(g, LOOM_OP_EXP, b4)}, 0);
  int64_t ax0 = 0;
  loom_graph_output(g, "col_sum", lb_sum(g, rows, 1, &ax0, false)); /* [6] */
  loom_lower_case tc2 = {"softmax(concat), pad, row concat", -1, 1, 0, 0, -1, 0, 0};
  loom_test_lower_check(ctx, g, &tc2);
  loom_graph_free(g);

  /* one-element dims padded and concatenated wider (q, k and v sliced from
   * one projection, their gradients padded back and summed), transposed */
  loom_graph_new(ctx, &g);
  int64_t qs[3] = {1, 4, 6};
  int32_t q = loom_test_lower_input(g, "q", LOOM_DTYPE_F32, 3, qs), kq = loom_test_lower_input(g, "k", LOOM_DTYPE_F32, 3, qs);
  int32_t v = loom_test_lower_input(g, "v", LOOM_DTYPE_F32, 3, qs);
  int32_t sum3 = lb_add(
      g,
      lb_add(g, lb_pad(g, lb_unary(g, LOOM_OP_TANH, q), (int64_t[]){0, 0, 0}, (int64_t[]){2, 0, 0}, 0),
             lb_pad(g, kq, (int64_t[]){1, 0, 0}, (int64_t[]){1, 0, 0}, 0)),
      lb_pad(g, v, (int64_t[]){2, 0, 0}, (int64_t[]){0, 0, 0}, 0.5)); /* [3, 4, 6] */
  loom_graph_output(g, "qkv", lb_transpose(g, sum3, (int64_t[]){1, 0, 2}));
  loom_lower_case tc3 = {"one-element dims padded wider", -1, 1, 0, 0, -1, 1, 0};
  loom_test_lower_check(ctx, g, &tc3);
  loom_graph_free(g);
  loom_graph_new(ctx, &g);
  q = loom_test_lower_input(g, "q", LOOM_DTYPE_F32, 3, qs);
  v = loom_test_lower_input(g, "v", LOOM_DTYPE_F32, 3, qs);
  int32_t cat = lb_concat(g, 2, (int32_t[]){lb_neg(g, q), lb_unary(g, LOOM_OP_EXP, v)}, 0);
  loom_graph_output(g, "cat", lb_transpose(g, lb_add(g, cat, cat), (int64_t[]){2, 1, 0}));
  loom_lower_case tc4 = {"one-element dims concatenated", -1, 1, 0, 0, -1, 1, 0};
  loom_test_lower_check(ctx, g, &tc4);
  loom_graph_free(g);

  /* one computed value at two or three places of one loop: an instance
   * per place (lower_instance.c) — a concat of a value with itself,
   * rotate_half of a computed value, and the shape of a gated unit's
   * backward (both halves of one projection read by both pads) */
  loom_graph_new(ctx, &g);
  e = lb_unary(g, LOOM_OP_EXP, loom_test_lower_input(g, "e", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}));
  loom_graph_output(g, "twice", lb_concat(g, 3, (int32_t[]){e, lb_neg(g, e), e}, 1));
  int32_t t = lb_unary(g, LOOM_OP_TANH, loom_test_lower_input(g, "t", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}));
  int32_t t1 = lb_slice(g, t, (int64_t[]){0, 0}, (int64_t[]){4, 4});
  int32_t t2 = lb_slice(g, t, (int64_t[]){0, 4}, (int64_t[]){4, 8});
  loom_graph_output(g, "rotate_half", lb_add(g, lb_mul(g, t, t), lb_concat(g, 2, (int32_t[]){lb_neg(g, t2), t1}, 1)));
  loom_lower_case tc5 = {"one value at several offsets", -1, 1, 0, 0, 1, 0, 1};
  loom_test_lower_check(ctx, g, &tc5);
  loom_graph_free(g);
  /* ... and cut into a stage per segment of du's columns, [0, 32) and
   * [32, 64), in one part (a row's inputs are read once for both), where
   * each half computes only its own chain (the tanh and exp of the other
   * half are not evaluated there) */
  loom_graph_new(ctx, &g);
  int32_t u = loom_test_lower_input(g, "u", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64});
  int32_t dy = loom_test_lower_input(g, "dy", LOOM_DTYPE_F32, 2, (int64_t[]){64, 32});
  int32_t ua = lb_unary(g, LOOM_OP_TANH, lb_slice(g, u, (int64_t[]){0, 0}, (int64_t[]){64, 32}));
  int32_t ub = lb_slice(g, u, (int64_t[]){0, 32}, (int64_t[]){64, 64});
  int32_t dya = lb_mul(g, dy, ub), dyb = lb_mul(g, lb_unary(g, LOOM_OP_EXP, dy), ua);
  loom_graph_output(g, "du", lb_add(g, lb_pad(g, lb_mul(g, dya, ua), (int64_t[]){0, 0}, (int64_t[]){0, 32}, 0),
                                   lb_pad(g, dyb, (int64_t[]){0, 32}, (int64_t[]){0, 0}, 0)));
  loom_lower_case tc6 = {"gated unit bwd, segments", -1, 1, 0, 0, 1, 1, 1};
  loom_test_lower_check(ctx, g, &tc6);
  loom_graph_free(g);
  /* rotate_half of an input with no work in its pieces: a stage per half
   * head, each of plain loads (no guard: a guarded load keeps the loop
   * scalar), in one part */
  loom_graph_new(ctx, &g);
  int64_t rs[3] = {5, 3, 32}, rc[3] = {5, 1, 32};
  x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 3, rs);
  cs_ = loom_test_lower_input(g, "cos", LOOM_DTYPE_F32, 3, rc);
  sn = loom_test_lower_input(g, "sin", LOOM_DTYPE_F32, 3, rc);
  x1 = lb_slice(g, x, (int64_t[]){0, 0, 0}, (int64_t[]){5, 3, 16});
  x2 = lb_slice(g, x, (int64_t[]){0, 0, 16}, (int64_t[]){5, 3, 32});
  rot = lb_concat(g, 2, (int32_t[]){lb_neg(g, x2), x1}, -1);
  loom_graph_output(g, "y", lb_add(g, lb_mul(g, x, cs_), lb_mul(g, rot, sn)));
  {
    loom_graph *rg = NULL;
    CHECK_OK(ctx, loom_graph_decompose(g, &rg));
    int32_t *rgon = rg ? malloc(sizeof(int32_t) * (size_t)rg->n_nodes) : NULL;
    for (int32_t n = 0; rgon && n < rg->n_nodes; n++) rgon[n] = 7;
    loom_kernel rk = {0};
    loom_kschedule rsched = {.rows_per_tile = 2, .vector_width = 4};
    if (rgon)
      CHECK_OK(ctx, loom_fusion_group_lower(ctx, rg, rgon, 7, LOOM_FUSION_STITCH, &rsched, "k_rot", &rk));
    CHECK(rk.n_parts == 1 && rk.parts[0].n_stages == 2);
    int32_t guarded = 0;
    for (int32_t i = 0; i < rk.n_exprs; i++) guarded += rk.exprs[i].kind == LOOM_KX_LOAD && rk.exprs[i].n_a > 0;
    CHECK(guarded == 0);
    loom_kernel_clear(&rk);
    free(rgon);
    loom_graph_free(rg);
  }
  loom_lower_case tc7 = {"rotate_half of an input", -1, 1, 0, 0, -1, 1, 1};
  loom_test_lower_check(ctx, g, &tc7);
  loom_graph_free(g);
  /* a stored slice of a computed value: not one kernel (the slice's other
   * elements are not its own) */
  loom_graph *dg = NULL;
  int32_t *gon = NULL;
  loom_graph_new(ctx, &g);
  e = lb_unary(g, LOOM_OP_EXP, loom_test_lower_input(g, "e", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}));
  loom_graph_output(g, "e", e);
  loom_graph_output(g, "part", lb_slice(g, e, (int64_t[]){0, 1}, (int64_t[]){4, 4}));
  CHECK_OK(ctx, loom_graph_decompose(g, &dg));
  gon = dg ? malloc(sizeof(int32_t) * (size_t)dg->n_nodes) : NULL;
  for (int32_t n = 0; gon && n < dg->n_nodes; n++) gon[n] = 7;
  if (gon) CHECK(!loom_fusion_group_analyze(dg, gon, 7, LOOM_FUSION_STITCH, NULL));
  free(gon);
  loom_graph_free(dg);
  loom_graph_free(g);
}

/* Attention's memory-bound middle: scale, causal mask (iota compare),
 * softmax, dropout with a runtime counter base; forward and backward. */
static void case_attn_middle(loom_ctx *ctx, int64_t sq, int64_t sk) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t ss[4] = {2, 3, sq, sk}, ms[2] = {sq, sk};
  int32_t sc = loom_test_lower_input(g, "scores", LOOM_DTYPE_F32, 4, ss);
  int32_t base = loom_test_lower_input(g, "base", LOOM_DTYPE_I64, 0, NULL);
  int32_t s = lb_mul(g, sc, lb_scalar(g, LOOM_DTYPE_F32, 0.125));
  int32_t row = lb_iota(g, LOOM_DTYPE_I64, 2, ms, 0);
  int32_t col = lb_iota(g, LOOM_DTYPE_I64, 2, ms, 1);
  int32_t limit = lb_add(g, row, lb_scalar(g, LOOM_DTYPE_I64, (double)(sk - sq)));
  int32_t masked = lb_broadcast_to(g, lb_binary(g, LOOM_OP_GT, col, limit), 4, ss);
  int32_t ninf = lb_broadcast_to(g, lb_scalar(g, LOOM_DTYPE_F32, -INFINITY), 4, ss);
  s = lb_select(g, masked, ninf, s);
  loom_attr ax = {.name = "axis", .kind = LOOM_ATTR_INT, .i = -1};
  int32_t pr = loom_test_lower_op(g, LOOM_OP_SOFTMAX, 1, &s, 1, &ax);
  int32_t y = lb_dropout(g, pr, 0.2, 99, 5, base);
  int32_t loss = loom_test_lower_loss(g, y, 4, ss);
  loom_value d;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &sc, &d));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "dscores", d);
  char name[64];
  snprintf(name, sizeof name, "masked softmax+dropout f+b [2,3,%lld,%lld]", (long long)sq,
           (long long)sk);
  loom_lower_case tc = {name, -3, 3, 0, 1000, 0, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* Norms and activations nobody wrote a kernel for. */
static void case_rmsnorm_bwd(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {2, 5, 24}, h = 24;
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 3, xs);
  int32_t gam = loom_test_lower_input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t y = loom_test_lower_op(g, LOOM_OP_RMS_NORM, 2, (int32_t[]){x, gam}, 0, NULL);
  int32_t z = loom_test_lower_op(g, LOOM_OP_SILU, 1, &y, 0, NULL);
  loom_attr ax = {.name = "axis", .kind = LOOM_ATTR_INT, .i = -1};
  int32_t ls = loom_test_lower_op(g, LOOM_OP_LOG_SOFTMAX, 1, &z, 1, &ax);
  int32_t loss = loom_test_lower_loss(g, ls, 3, xs);
  loom_value grads[2];
  CHECK_OK(ctx, loom_graph_grad(g, loss, 2, (loom_value[]){x, gam}, grads));
  loom_graph_output(g, "ls", ls);
  loom_graph_output(g, "dx", grads[0]);
  loom_graph_output(g, "dgamma", grads[1]);
  loom_lower_case tc = {"rmsnorm+silu+logsoftmax f+b", -2, 2, 0, 0, 0, 1, 1};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* Empty tensors: loops of no iterations; reductions give their identity. */
static void case_empty(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {3, 0}, ys[2] = {0, 5};
  int64_t ax1 = 1, ax0 = 0;
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t y = loom_test_lower_input(g, "y", LOOM_DTYPE_F32, 2, ys);
  loom_graph_output(g, "rowsum", lb_sum(g, lb_unary(g, LOOM_OP_EXP, x), 1, &ax1, false));
  loom_graph_output(g, "rowmax", lb_reduce(g, LOOM_OP_REDUCE_MAX, x, 1, &ax1, true));
  loom_graph_output(g, "colsum", lb_sum(g, y, 1, &ax0, false));
  loom_graph_output(g, "ey", lb_unary(g, LOOM_OP_TANH, y));
  loom_lower_case tc = {"empty dims", -2, 2, 0, 0, 1, 0, 0};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* ---- random DAGs ----------------------------------------------------------- */

static void case_random(loom_ctx *ctx, uint64_t seed) {
  loom_test_rng r = {seed * 7919 + 13};
  for (int i = 0; i < 4; i++) loom_test_uniform(&r, 0, 1); /* small seeds start small */
  static const int64_t sizes[] = {1, 2, 3, 7, 33};
  int64_t A = sizes[(int)loom_test_uniform(&r, 0, 5)], B = sizes[(int)loom_test_uniform(&r, 0, 5)];
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s2[2] = {A, B}, sa[2] = {A, 1};
  int32_t pool[64], np = 0;
  pool[np++] = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, s2);
  pool[np++] = loom_test_lower_input(g, "y", LOOM_DTYPE_F32, 1, &B);
  pool[np++] = loom_test_lower_input(g, "z", LOOM_DTYPE_F32, 2, sa);
  int32_t n_ops = 6 + (int32_t)loom_test_uniform(&r, 0, 8);
  for (int32_t i = 0; i < n_ops && np < 60; i++) {
    int32_t a = pool[(int)loom_test_uniform(&r, 0, np)];
    int32_t b = pool[(int)loom_test_uniform(&r, 0, np)];
    int kind = (int)loom_test_uniform(&r, 0, 10);
    int32_t v;
    int64_t ax1 = -1, ax0 = 0;
    switch (kind) {
    case 0: v = lb_unary(g, LOOM_OP_TANH, a); break;
    case 1: v = lb_unary(g, LOOM_OP_SIGMOID, a); break;
    case 2: v = lb_add(g, a, b); break;
    case 3: v = lb_mul(g, a, b); break;
    case 4: v = lb_binary(g, LOOM_OP_MAXIMUM, a, b); break;
    case 5: v = lb_sub(g, a, b); break;
    case 6: /* row reduction, kept as a broadcastable column */
      v = loom_value_type(g, a)->rank == 2 ? lb_reduce(g, LOOM_OP_REDUCE_MAX, a, 1, &ax1, true)
                                          : lb_unary(g, LOOM_OP_NEG, a);
      break;
    case 7:
      v = loom_value_type(g, a)->rank == 2 ? lb_sum(g, a, 1, &ax1, true) : lb_unary(g, LOOM_OP_ABS, a);
      break;
    case 8: /* column reduction */
      v = loom_value_type(g, a)->rank == 2 ? lb_sum(g, a, 1, &ax0, true) : lb_unary(g, LOOM_OP_TANH, a);
      break;
    default: v = lb_unary(g, LOOM_OP_EXP, lb_unary(g, LOOM_OP_TANH, a)); break;
    }
    if (v < 0) break;
    pool[np++] = v;
  }
  CHECK_OK(ctx, loom_build_status(g));
  /* outputs: the last two values, and the first computed one */
  loom_graph_output(g, "o1", pool[np - 1]);
  if (np - 2 > 2 && pool[np - 2] != pool[np - 1]) loom_graph_output(g, "o2", pool[np - 2]);
  if (np - 1 > 3) loom_graph_output(g, "o3", pool[3]);
  char name[64];
  snprintf(name, sizeof name, "random %llu [%lld,%lld]", (unsigned long long)seed, (long long)A,
           (long long)B);
  loom_lower_case tc = {name, -2, 2, 0, 0, -1, 0, 0};
  loom_test_lower_check(ctx, g, &tc);
  loom_graph_free(g);
}

/* Reshapes of computed values that merge or split dims, read again in
 * the group (lower_split.c): GroupNorm with a per-channel affine and SiLU
 * ([N, C, H, W] -> [N, G, C/G*H*W] and back around the statistics),
 * forward and backward; and [4, 6] -> [8, 3] (loops 4 x 2 x 3), with an
 * iota along the merged dim, a column sum over it and a transpose. */
static void case_split_reshape(loom_ctx *ctx, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[4] = {2, 6, 3, 5}, gs[3] = {2, 3, 30}, ps[3] = {6, 1, 1}, last = -1;
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 4, xs);
  int32_t gam = loom_test_lower_input(g, "gamma", LOOM_DTYPE_F32, 3, ps);
  int32_t bet = loom_test_lower_input(g, "beta", LOOM_DTYPE_F32, 3, ps);
  int32_t xg = lb_reshape(g, lb_unary(g, LOOM_OP_TANH, x), 3, gs);
  int32_t inv = lb_scalar(g, LOOM_DTYPE_F32, 1.0 / 30);
  int32_t mean = lb_mul(g, lb_sum(g, xg, 1, &last, true), inv);
  int32_t xc = lb_sub(g, xg, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, xc, xc), 1, &last, true), inv);
  int32_t rstd = lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, lb_scalar(g, LOOM_DTYPE_F32, 1e-5)));
  int32_t xn = lb_reshape(g, lb_mul(g, xc, rstd), 4, xs);
  int32_t y = lb_unary(g, LOOM_OP_SILU, lb_add(g, lb_mul(g, xn, gam), bet));
  if (!bwd) {
    loom_graph_output(g, "y", y);
    int64_t as[2] = {4, 6}, bs[2] = {8, 3}, ax0 = 0;
    int32_t a = loom_test_lower_input(g, "a", LOOM_DTYPE_F32, 2, as);
    int32_t r = lb_reshape(g, lb_unary(g, LOOM_OP_EXP, a), 2, bs);
    int32_t row = lb_cast(g, lb_iota(g, LOOM_DTYPE_I64, 2, bs, 0), LOOM_DTYPE_F32);
    int32_t r2 = lb_add(g, r, row);
    loom_graph_output(g, "r", lb_unary(g, LOOM_OP_NEG, r2));
    loom_graph_output(g, "colsum", lb_sum(g, r2, 1, &ax0, false));
    loom_graph_output(g, "rt", lb_transpose(g, lb_unary(g, LOOM_OP_TANH, r2), (int64_t[]){1, 0}));
    loom_lower_case tc = {"split reshapes fwd", -2, 2, 0, 0, 0, 0, 0};
    loom_test_lower_check(ctx, g, &tc);
  } else {
    int32_t loss = loom_test_lower_loss(g, y, 4, xs);
    loom_value grads[3];
    CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, gam, bet}, grads));
    loom_graph_output(g, "dx", grads[0]);
    loom_graph_output(g, "dgamma", grads[1]);
    loom_graph_output(g, "dbeta", grads[2]);
    loom_lower_case tc = {"groupnorm+silu bwd", -2, 2, 0, 0, 0, 0, 0};
    loom_test_lower_check(ctx, g, &tc);
  }
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  bool q = quick();
  const char *only = getenv("LOOM_TEST_RANDOM"); /* debugging: one random case */
  if (only) {
    case_random(ctx, (uint64_t)atoll(only));
    loom_ctx_free(ctx);
    return loom_test_finish("test_lower");
  }
  const char *one = getenv("LOOM_TEST_CASE"); /* debugging: one named case */
  if (one) {
    if (!strcmp(one, "xent")) case_xent(ctx, 3, 7, LOOM_DTYPE_I64);
    if (!strcmp(one, "adamw")) case_adamw(ctx);
    if (!strcmp(one, "lnb")) case_layernorm(ctx, 6, 33, true);
    if (!strcmp(one, "ln")) case_layernorm(ctx, 4, 33, false);
    if (!strcmp(one, "smb")) case_softmax(ctx, 3, (int64_t[]){2, 3, 7}, true);
    if (!strcmp(one, "bdrln")) case_bdrln(ctx, 5, 33);
    if (!strcmp(one, "bn")) case_batchnorm(ctx, 9, 5);
    if (!strcmp(one, "flat")) case_flat(ctx, 8192);
    if (!strcmp(one, "deep")) case_deep_chain(ctx, 10000);
    if (!strcmp(one, "concat")) case_concat_pad(ctx);
    if (!strcmp(one, "split")) case_split_reshape(ctx, false);
    if (!strcmp(one, "splitb")) case_split_reshape(ctx, true);
    loom_ctx_free(ctx);
    return loom_test_finish("test_lower");
  }
  case_layernorm(ctx, 4, 33, false);
  case_layernorm(ctx, 3, 7, false);
  case_layernorm(ctx, 5, 1, false);
  case_layernorm(ctx, 1, 64, false);
  case_layernorm(ctx, 6, 33, true);
  case_layernorm(ctx, 3, 1, true);
  case_softmax(ctx, 2, (int64_t[]){5, 33}, false);
  case_softmax(ctx, 3, (int64_t[]){2, 3, 7}, true);
  case_softmax(ctx, 2, (int64_t[]){4, 1}, true);
  case_bdrln(ctx, 5, 33);
  case_xent(ctx, 6, 33, LOOM_DTYPE_I64);
  case_xent(ctx, 3, 7, LOOM_DTYPE_I32);
  case_adamw(ctx);
  case_bias_gelu(ctx, 3, 33, true);
  case_bias_gelu(ctx, 3, 7, false);
  case_flat(ctx, q ? 8192 : 3 * 8192);
  case_deep_chain(ctx, 10000);
  case_short_rows(ctx, 512, 128);
  case_short_rows(ctx, 4096, 4);
  case_short_rows(ctx, 64, 128);
  case_batchnorm(ctx, 9, 5);
  case_layout(ctx);
  case_concat_pad(ctx);
  case_attn_middle(ctx, 5, 5);
  case_attn_middle(ctx, 3, 7);
  case_rmsnorm_bwd(ctx);
  case_empty(ctx);
  case_split_reshape(ctx, false);
  case_split_reshape(ctx, true);
  for (uint64_t s = 1; s <= (q ? 30u : 300u); s++) case_random(ctx, s);
  loom_ctx_free(ctx);
  return loom_test_finish("test_lower");
}

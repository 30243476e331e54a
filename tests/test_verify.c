/* The verifier: valid graphs pass; graphs corrupted by hand fail with
 * LOOM_STATUS_INTERNAL and a message naming the broken node or value. */
#include "common.h"

#include "ir/graph.h"
#include "ops/attrs.h"

#include <stdlib.h>
#include <string.h>

/*
 * x: f32[4, 8], w: f32[8, 16] (param)
 * node 0: h = matmul(x, w)       f32[4, 16]   value 2
 * node 1: r = relu(h)            f32[4, 16]   value 3
 * node 2: s = reduce_sum(r)      f32[]        value 4
 * node 3: p, m, v = adamw(w, w, w, w, s)      values 5, 6, 7
 * outputs: loss = s, w_new = p
 */
static loom_graph *build(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_value x, w, h, r, s, pmv[3];
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &w));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &h));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RELU, 1, &h, 0, NULL, &r));
  loom_attr axes = {.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 2,
                    .ints = (int64_t[]){0, 1}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &r, 1, &axes, &s));
  loom_value step;
  CHECK_OK(ctx, loom_graph_input(g, "step", LOOM_DTYPE_F32, 0, NULL, &step));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){w, w, w, w, step}, 0,
                                    NULL, 3, pmv));
  CHECK_OK(ctx, loom_graph_output(g, "loss", s));
  CHECK_OK(ctx, loom_graph_output(g, "w_new", pmv[0]));
  CHECK(x == 0 && w == 1 && h == 2 && r == 3 && s == 4 && step == 5 && pmv[0] == 6);
  return g;
}

/* Verification must fail as INTERNAL with every `want` substring. */
static void expect_broken(loom_ctx *ctx, loom_graph *g, const char *what,
                          const char *want1, const char *want2) {
  loom_status st = loom_graph_verify(g);
  const char *msg = loom_ctx_error(ctx);
  loom_test_checks++;
  if (st != LOOM_STATUS_INTERNAL || !strstr(msg, want1) || (want2 && !strstr(msg, want2))) {
    loom_test_failures++;
    fprintf(stderr, "%s: verify -> %s '%s' (wanted internal with '%s'%s%s)\n", what,
            loom_status_name(st), msg, want1, want2 ? " and " : "", want2 ? want2 : "");
  }
}

/* Shape arithmetic on huge dims fails with a message naming the op, never
 * wraps (issue 8 bug 1); a zero dim does not excuse huge other dims,
 * whose strides would overflow. */
static void test_shape_overflow(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x, z, y;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 1, (int64_t[]){4}, &x));
  const int64_t big[] = {INT64_MAX};
  loom_attr pad[] = {{.name = "lo", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = big},
                     {.name = "hi", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = big}};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_graph_op(g, LOOM_OP_PAD, 1, &x, 2, pad, &y));
  CHECK(strstr(loom_ctx_error(ctx), "pad") && strstr(loom_ctx_error(ctx), "overflow"));
  CHECK(g->n_nodes == 0);
  const int64_t half[] = {INT64_C(1) << 47};
  loom_attr pad2[] = {{.name = "lo", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = half},
                      {.name = "hi", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = half}};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_graph_op(g, LOOM_OP_PAD, 1, &x, 2, pad2, &y));
  CHECK(strstr(loom_ctx_error(ctx), "pad output: shape has too many elements") != NULL);

  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "h", LOOM_DTYPE_F32, 3,
                                (int64_t[]){0, INT64_MAX, INT64_MAX}, &z));
  CHECK_OK(ctx, loom_graph_input(g, "z", LOOM_DTYPE_F32, 2,
                                 (int64_t[]){0, INT64_C(1) << 48}, &z));
  loom_value zz[3] = {z, z, z};
  loom_attr axis1 = {.name = "axis", .kind = LOOM_ATTR_INT, .i = 1};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CONCAT, 3, zz, 1, &axis1, &y));
  CHECK(strstr(loom_ctx_error(ctx), "concat") != NULL);
  loom_graph_free(g);

  loom_tensor *t = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_tensor_new(ctx, LOOM_DTYPE_F32, 3, (int64_t[]){0, INT64_MAX, INT64_MAX}, &t));
  CHECK(t == NULL);
}

int main(void) {
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  CHECK(loom_graph_verify(NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  test_shape_overflow(ctx);

  /* Valid graphs pass: an empty one and the one above. */
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_verify(g));
  loom_graph_free(g);
  g = build(ctx);
  CHECK_OK(ctx, loom_graph_verify(g));
  loom_graph_free(g);

  /* A node reading a value produced later (relu reads its own output's user). */
  g = build(ctx);
  g->nodes[1].in[0] = 4;
  expect_broken(ctx, g, "later input", "node 1 (relu)", "not earlier");
  loom_graph_free(g);

  /* A node reading its own output. */
  g = build(ctx);
  g->nodes[1].in[0] = 3;
  expect_broken(ctx, g, "self input", "node 1 (relu)", "topological");
  loom_graph_free(g);

  /* An input id outside the graph. */
  g = build(ctx);
  g->nodes[0].in[1] = 999;
  expect_broken(ctx, g, "out-of-range input", "node 0 (matmul): input 1", "999");
  loom_graph_free(g);
  g = build(ctx);
  g->nodes[0].in[0] = -7;
  expect_broken(ctx, g, "negative input", "node 0 (matmul)", "-7");
  loom_graph_free(g);

  /* A wrong stored shape, then a wrong stored dtype. */
  g = build(ctx);
  g->values[3].type.shape[1] = 17;
  expect_broken(ctx, g, "stored shape", "node 1 (relu)", "f32[4, 17]");
  loom_graph_free(g);
  g = build(ctx);
  g->values[4].type.dtype = LOOM_DTYPE_F64;
  expect_broken(ctx, g, "stored dtype", "node 2 (reduce_sum)", "f64[]");
  loom_graph_free(g);
  g = build(ctx);
  g->values[7].type.rank = 1;
  g->values[7].type.shape[0] = 8;
  expect_broken(ctx, g, "stored rank of output 1", "node 3 (adamw): output 1", "f32[8]");
  loom_graph_free(g);

  /* An input type change that inference rejects (matmul inner dims). */
  g = build(ctx);
  g->values[0].type.shape[1] = 9;
  expect_broken(ctx, g, "infer fails", "node 0 (matmul)", "inference");
  loom_graph_free(g);

  /* Invalid op and arity. */
  g = build(ctx);
  g->nodes[1].op = LOOM_OP_COUNT;
  expect_broken(ctx, g, "bad op", "node 1", "invalid op");
  loom_graph_free(g);
  g = build(ctx);
  g->nodes[1].n_in = 2; /* relu takes 1; the array is not read */
  expect_broken(ctx, g, "arity", "node 1 (relu)", "2 inputs");
  loom_graph_free(g);
  g = build(ctx);
  g->nodes[0].op = LOOM_OP_NEG; /* neg with matmul's 2 inputs */
  expect_broken(ctx, g, "arity after op change", "node 0 (neg)", "2 inputs");
  loom_graph_free(g);

  /* value -> node/index consistency. */
  g = build(ctx);
  g->values[6].index = 2;
  expect_broken(ctx, g, "value index", "value 6", "output 2 of node 3");
  loom_graph_free(g);
  g = build(ctx);
  g->values[3].node = 42;
  expect_broken(ctx, g, "value node", "value 3", "node 42");
  loom_graph_free(g);
  g = build(ctx);
  int32_t tmp = g->nodes[3].out[1];
  g->nodes[3].out[1] = g->nodes[3].out[2];
  g->nodes[3].out[2] = tmp;
  expect_broken(ctx, g, "swapped outputs", "value 7", "node 3");
  loom_graph_free(g);

  /* Attribute INTS count beyond LOOM_MAX_RANK. */
  g = build(ctx);
  LOOM_ATTR_INTS(&g->nodes[2], reduce_sum, axes).n = LOOM_MAX_RANK + 1;
  expect_broken(ctx, g, "ints count", "node 2 (reduce_sum): attribute 'axes'", "9 integers");
  loom_graph_free(g);

  /* Graph outputs. */
  g = build(ctx);
  g->outputs[1] = 1000;
  expect_broken(ctx, g, "output id", "graph output 1 ('w_new')", "1000");
  loom_graph_free(g);
  g = build(ctx);
  g->output_names[1][0] = 'l'; /* "w_new" -> "l_new": still unique */
  CHECK_OK(ctx, loom_graph_verify(g));
  free(g->output_names[1]);
  g->output_names[1] = strdup("loss");
  expect_broken(ctx, g, "output names", "share the name 'loss'", NULL);
  loom_graph_free(g);

  /* Value names unique. */
  g = build(ctx);
  g->values[3].name = strdup("x");
  expect_broken(ctx, g, "value names", "values 0 and 3", "'x'");
  loom_graph_free(g);

  /* Inputs: listed values must be inputs without a producer. */
  g = build(ctx);
  g->inputs[1] = 2;
  expect_broken(ctx, g, "input list", "graph input 1", "not an input");
  loom_graph_free(g);
  g = build(ctx);
  g->values[1].node = 0;
  expect_broken(ctx, g, "input producer", "value 1 ('w')", "producer node 0");
  loom_graph_free(g);
  g = build(ctx);
  g->inputs[1] = 0; /* x twice, w missing */
  expect_broken(ctx, g, "input twice", "listed twice", NULL);
  loom_graph_free(g);
  g = build(ctx);
  g->values[2].kind = LOOM_VALUE_PARAM;
  g->values[2].node = -1;
  expect_broken(ctx, g, "unnamed input", "value 2", "without a name");
  g->values[2].name = strdup("h");
  expect_broken(ctx, g, "unlisted input", "value 2", "missing from the graph's input list");
  loom_graph_free(g);

  loom_ctx_free(ctx);
  return loom_test_finish("test_verify");
}

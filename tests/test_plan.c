/*
 * Parallel plans on small graphs: the primitives (op_trans, op_assign,
 * op_order), the lowering's communication choices, and the oracle — the
 * global graph of a plan, run on the reference executor, computes what
 * the logical graph computes — plus one broken plan per kind of mistake,
 * each rejected with a message naming the sub-op, device or dependency.
 */
#include "common.h"

#include "ir/build.h"
#include "ops/op.h"
#include "parallel/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const loom_session_options ref_opts = LOOM_SESSION_OPTIONS(.backend = "ref");

/* ---- graphs ------------------------------------------------------------------- */

/* y = sum(relu(x @ w1 + b1) @ w2) with x [8, 16], w1 [16, 32], w2 [32, 4]. */
static loom_graph *mlp(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x, w1, b1, w2;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w1", LOOM_DTYPE_F32, 2, (int64_t[]){16, 32}, &w1));
  CHECK_OK(ctx, loom_graph_param(g, "b1", LOOM_DTYPE_F32, 1, (int64_t[]){32}, &b1));
  CHECK_OK(ctx, loom_graph_param(g, "w2", LOOM_DTYPE_F32, 2, (int64_t[]){32, 4}, &w2));
  int32_t h = lb_unary(g, LOOM_OP_RELU, lb_add(g, lb_matmul(g, x, w1, false, false), b1));
  int32_t y = lb_matmul(g, h, w2, false, false);
  int32_t s = lb_sum(g, y, 0, NULL, false);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "s", s));
  return g;
}

/* ---- running ---------------------------------------------------------------------- */

/* Lowers p, runs the global graph on the reference executor and compares
 * every output with the logical graph's; returns the program. */
static loom_plan_program *check_oracle(loom_ctx *ctx, const loom_plan *p, const char *what) {
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  if (!pp) {
    fprintf(stderr, "%s: lowering failed\n", what);
    return NULL;
  }
  const loom_graph *L = p->graph;
  loom_tensor **in = loom_test_uniform_inputs(ctx, L, 7);
  loom_tensor **want = loom_test_run(ctx, L, &ref_opts, in), **got = loom_test_run(ctx, pp->global, &ref_opts, in);
  for (int32_t o = 0; o < loom_graph_num_outputs(L); o++) {
    double e = loom_test_update_error(want[o], got[o], NULL);
    if (!(e <= 1e-5)) fprintf(stderr, "%s: output %d off by %g of its rms\n", what, o, e);
    CHECK(e <= 1e-5);
  }
  /* every device's program is a graph that verifies, and they match */
  loom_graph **dg = calloc((size_t)pp->n_devices, sizeof *dg);
  for (int32_t d = 0; d < pp->n_devices; d++) {
    CHECK_OK(ctx, loom_plan_device_graph(pp, d, &dg[d], NULL, NULL));
    if (dg[d]) CHECK_OK(ctx, loom_graph_verify(dg[d]));
  }
  CHECK_OK(ctx, loom_plan_check_matching(ctx, pp->n_devices, dg));
  for (int32_t d = 0; d < pp->n_devices; d++) loom_graph_free(dg[d]);
  free(dg);
  loom_test_free_tensors(in, loom_graph_num_inputs(L));
  loom_test_free_tensors(want, loom_graph_num_outputs(L));
  loom_test_free_tensors(got, loom_graph_num_outputs(L));
  return pp;
}

static int32_t count_comms(const loom_plan_program *pp, loom_op op) {
  int32_t n = 0;
  for (int32_t c = 0; c < pp->n_comms; c++) n += pp->comms[c].op == op;
  return n;
}

/* Splits node's label on (input or output, operand, dim) n ways onto devices 0..n-1. */
static void split(loom_ctx *ctx, loom_plan *p, int32_t node, bool out, int32_t operand, int32_t dim,
                  int32_t n) {
  int32_t l = loom_plan_label(p, node, out, operand, dim), first = -1;
  CHECK(l >= 0);
  CHECK_OK(ctx, loom_op_trans(p, node, (loom_algo){LOOM_ALGO_SPLIT, l}, n, &first));
  for (int32_t i = 0; i < n; i++) CHECK_OK(ctx, loom_op_assign(p, first + i, i));
}

static void replicate(loom_ctx *ctx, loom_plan *p, int32_t node, int32_t n) {
  int32_t first = -1;
  CHECK_OK(ctx, loom_op_trans(p, node, (loom_algo){LOOM_ALGO_REPLICATE, 0}, n, &first));
  for (int32_t i = 0; i < n; i++) CHECK_OK(ctx, loom_op_assign(p, first + i, i));
}

/* ---- plans -------------------------------------------------------------------------- */

/* Nodes of mlp(): 0 matmul, 1 add, 2 relu, 3 matmul, 4 reduce_sum. */
static void test_data_parallel(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 4; node++) split(ctx, p, node, true, 0, 0, 2);
  split(ctx, p, 4, false, 0, 0, 2); /* the sum's rows: partial sums */
  loom_plan_program *pp = check_oracle(ctx, p, "data parallel");
  /* rows stay on their devices; the sum's parts go to device 0 (one transfer) */
  if (pp) {
    CHECK(count_comms(pp, LOOM_OP_ALL_REDUCE) == 0);
    CHECK(count_comms(pp, LOOM_OP_TRANSFER) >= 1);
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* Megatron's MLP: w1's columns, w2's rows; y is partial, all-reduced when
 * both devices want it whole. */
static void test_tensor_parallel(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  split(ctx, p, 0, true, 0, 1, 2);  /* x @ w1: output columns */
  split(ctx, p, 1, true, 0, 1, 2);  /* + b1 */
  split(ctx, p, 2, true, 0, 1, 2);  /* relu */
  split(ctx, p, 3, false, 0, 1, 2); /* h @ w2: the reduction (partial sums) */
  replicate(ctx, p, 4, 2);          /* the sum on both */
  int32_t both[2] = {0, 1};
  loom_vlayout whole;
  loom_type ty = *loom_value_type(g, g->outputs[0]);
  CHECK_OK(ctx, loom_vlayout_parse(ctx, &ty, "R(2)", 4, 1, 1, &whole));
  CHECK_OK(ctx, loom_plan_set_output(p, 0, &whole, both));
  loom_plan_program *pp = check_oracle(ctx, p, "tensor parallel");
  if (pp) {
    CHECK(count_comms(pp, LOOM_OP_ALL_REDUCE) == 1);
    /* 2 (n - 1) / n of y's 8 x 4 floats per device */
    CHECK(pp->stats[0].comm_bytes[LOOM_OP_ALL_REDUCE] == 8 * 4 * 4);
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* Rows on 4 devices, then y gathered whole on all four. */
static void test_all_gather(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 4, &p));
  for (int32_t node = 0; node < 4; node++) split(ctx, p, node, true, 0, 0, 4);
  replicate(ctx, p, 4, 4); /* the sum of the whole y on each device */
  loom_plan_program *pp = check_oracle(ctx, p, "all-gather");
  if (pp) {
    CHECK(count_comms(pp, LOOM_OP_ALL_GATHER) == 1);
    CHECK(pp->stats[1].comm_bytes[LOOM_OP_ALL_GATHER] == 3 * 2 * 4 * 4);
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* Nested cuts, uneven placement, an unsplit node on device 1 only. */
static void test_nested(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 3, &p));
  int32_t l = loom_plan_label(p, 0, true, 0, 0), first = -1, f2 = -1;
  CHECK_OK(ctx, loom_op_trans(p, 0, (loom_algo){LOOM_ALGO_SPLIT, l}, 2, &first));
  int32_t k = loom_plan_label(p, 0, false, 0, 1);
  CHECK_OK(ctx, loom_op_trans(p, first + 1, (loom_algo){LOOM_ALGO_SPLIT, k}, 2, &f2));
  CHECK_OK(ctx, loom_op_assign(p, first, 0));
  CHECK_OK(ctx, loom_op_assign(p, f2, 1));
  CHECK_OK(ctx, loom_op_assign(p, f2 + 1, 2));
  for (int32_t node = 1; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 1));
  char name[64];
  CHECK(strcmp(loom_subop_name(p, f2 + 1, name, sizeof name), "matmul.0#1#1") == 0);
  CHECK(loom_plan_find_subop(p, "matmul.0#1#1") == f2 + 1);
  CHECK(loom_plan_find_subop(p, "add.0") < 0);
  loom_plan_program_free(check_oracle(ctx, p, "nested"));
  loom_plan_free(p);
  loom_graph_free(g);
}

/* ---- broken plans ------------------------------------------------------------------ */

static void expect_broken(loom_ctx *ctx, loom_plan *p, const char *needle) {
  loom_plan_program *pp = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_lower(p, NULL, &pp));
  CHECK(pp == NULL);
  if (!strstr(loom_ctx_error(ctx), needle))
    fprintf(stderr, "message '%s' lacks '%s'\n", loom_ctx_error(ctx), needle);
  CHECK(strstr(loom_ctx_error(ctx), needle) != NULL);
}

static void test_broken(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  /* a sub-op assigned nowhere */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  int32_t first = -1, l = loom_plan_label(p, 2, true, 0, 0);
  CHECK_OK(ctx, loom_op_trans(p, 2, (loom_algo){LOOM_ALGO_SPLIT, l}, 2, &first));
  p->subops[first + 1].device = -1;
  expect_broken(ctx, p, "relu.2#1 is assigned to no device");
  loom_plan_free(p);
  /* an order across devices */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, node == 3));
  CHECK_OK(ctx, loom_op_order(p, 0, 3));
  expect_broken(ctx, p, "op_order orders two sub-ops of one device");
  loom_plan_free(p);
  /* an order that deadlocks: relu before the matmul it reads */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  CHECK_OK(ctx, loom_op_order(p, 2, 0));
  expect_broken(ctx, p, "deadlocks");
  loom_plan_free(p);
  /* an order on a cut sub-op */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  split(ctx, p, 2, true, 0, 0, 2);
  CHECK_OK(ctx, loom_op_order(p, 2, 3));
  expect_broken(ctx, p, "is cut into 2 parts");
  loom_plan_free(p);
  /* mistakes the primitives refuse at once */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  l = loom_plan_label(p, 0, true, 0, 0);
  CHECK_OK(ctx, loom_op_trans(p, 0, (loom_algo){LOOM_ALGO_SPLIT, l}, 2, &first));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_op_trans(p, 0, (loom_algo){LOOM_ALGO_SPLIT, l}, 2, &first)); /* cut twice */
  CHECK(strstr(loom_ctx_error(ctx), "already cut") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_op_trans(p, 1, (loom_algo){LOOM_ALGO_SPLIT, 0}, 3, &first)); /* 8 rows / 3 */
  CHECK(strstr(loom_ctx_error(ctx), "does not split evenly") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_op_assign(p, 1, 2));
  CHECK(strstr(loom_ctx_error(ctx), "device 2 is outside [0, 2)") != NULL);
  CHECK(loom_plan_label(p, 4, true, 0, 0) < 0); /* a scalar has no dims */
  loom_plan_free(p);
  /* a piece produced twice: two parts computing the same rows */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  split(ctx, p, 2, true, 0, 0, 2);
  int32_t f2 = p->subops[2].first_child;
  p->subops[f2 + 1].r = p->subops[f2].r;
  expect_broken(ctx, p, "relu.2#0 and relu.2#1 compute the same part");
  loom_plan_free(p);
  /* a memory limit */
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  for (int32_t node = 0; node < 5; node++) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  loom_plan_lower_options o = {.comm = loom_comm_model_default(), .memory_limit = 1024};
  loom_plan_program *pp = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_plan_lower(p, &o, &pp));
  CHECK(strstr(loom_ctx_error(ctx), "device 0 needs") != NULL);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* Per-device programs checked against each other. */
static void test_matching(loom_ctx *ctx) {
  loom_graph *g = mlp(ctx);
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  split(ctx, p, 0, true, 0, 1, 2);
  split(ctx, p, 1, true, 0, 1, 2);
  split(ctx, p, 2, true, 0, 1, 2);
  split(ctx, p, 3, false, 0, 1, 2);
  replicate(ctx, p, 4, 2);
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  loom_graph *dg[2] = {NULL, NULL};
  for (int32_t d = 0; pp && d < 2; d++) CHECK_OK(ctx, loom_plan_device_graph(pp, d, &dg[d], NULL, NULL));
  if (dg[0] && dg[1]) {
    CHECK_OK(ctx, loom_plan_check_matching(ctx, 2, dg));
    /* device 1 names another group for the all-reduce */
    for (int32_t i = 0; i < dg[1]->n_nodes; i++)
      if (dg[1]->nodes[i].op == LOOM_OP_ALL_REDUCE) LOOM_ATTR_I(&dg[1]->nodes[i], all_reduce, group) = 7;
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_check_matching(ctx, 2, dg));
    CHECK(strstr(loom_ctx_error(ctx), "mismatched groups") != NULL);
    /* device 0 alone: the other never calls it */
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_check_matching(ctx, 1, dg));
    CHECK(strstr(loom_ctx_error(ctx), "the others never call it") != NULL);
  }
  loom_graph_free(dg[0]);
  loom_graph_free(dg[1]);
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* Dropout masks under any cut are the single-device mask bit for bit: y =
 * dropout(x) of ones, every dim cut, nested, on 2 and 3 devices. */
static void test_masks(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){6, 12}, &x));
  int32_t y = lb_dropout(g, x, 0.5, 77, 1000, -1);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_tensor *ones = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){6, 12}, &ones));
  for (int32_t e = 0; e < 72; e++) ((float *)loom_tensor_data(ones))[e] = 1.0f;
  loom_tensor **want = loom_test_run(ctx, g, &ref_opts, &ones);
  int32_t kept = 0;
  for (int32_t e = 0; want && e < 72; e++) kept += ((float *)loom_tensor_data(want[0]))[e] != 0;
  CHECK(kept > 10 && kept < 62); /* a real mask */
  static const struct {
    int32_t dim, parts, dim2, parts2, devices;
  } cuts[] = {{0, 2, -1, 0, 2}, {1, 3, -1, 0, 3}, {1, 2, 0, 3, 3}, {0, 3, 1, 4, 2}};
  for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
    loom_plan *p = NULL;
    CHECK_OK(ctx, loom_plan_new(ctx, g, cuts[c].devices, &p));
    int32_t first = -1, l = loom_plan_label(p, 0, true, 0, cuts[c].dim);
    CHECK_OK(ctx, loom_op_trans(p, 0, (loom_algo){LOOM_ALGO_SPLIT, l}, cuts[c].parts, &first));
    for (int32_t i = 0; i < cuts[c].parts; i++) {
      int32_t s = first + i, f2 = -1;
      if (cuts[c].dim2 >= 0) {
        int32_t l2 = loom_plan_label(p, 0, true, 0, cuts[c].dim2);
        CHECK_OK(ctx, loom_op_trans(p, s, (loom_algo){LOOM_ALGO_SPLIT, l2}, cuts[c].parts2, &f2));
        for (int32_t j = 0; j < cuts[c].parts2; j++)
          CHECK_OK(ctx, loom_op_assign(p, f2 + j, (i + j) % cuts[c].devices));
      } else {
        CHECK_OK(ctx, loom_op_assign(p, s, i % cuts[c].devices));
      }
    }
    loom_plan_program *pp = NULL;
    CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
    loom_tensor **got = pp ? loom_test_run(ctx, pp->global, &ref_opts, &ones) : NULL;
    CHECK(want && got && memcmp(loom_tensor_data(want[0]), loom_tensor_data(got[0]), 72 * 4) == 0);
    loom_test_free_tensors(got, 1);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  loom_test_free_tensors(want, 1);
  loom_tensor_free(ones);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_data_parallel(ctx);
  test_tensor_parallel(ctx);
  test_all_gather(ctx);
  test_nested(ctx);
  test_broken(ctx);
  test_matching(ctx);
  test_masks(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_plan");
}

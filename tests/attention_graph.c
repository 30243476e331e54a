/* The attention tests' shared graph (attention_graph.h). */
#include "attention_graph.h"

#include "passes/attention.h"

loom_graph *loom_test_attention_graph(loom_ctx *ctx, const loom_test_attention *a,
                                      const char *placement, const loom_rng_model *model) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return NULL;
  loom_value x, wq, q, k, v, base, w, y, prod, loss, grads[3];
  int64_t qs[4] = {a->b0, a->b1, a->sq, a->d}, ks[4] = {a->b0, a->b1, a->sk, a->d};
  CHECK_OK(ctx, loom_graph_input(g, a->project_q ? "x" : "q", LOOM_DTYPE_F32, 4, qs, &x));
  CHECK_OK(ctx, loom_graph_input(g, "k", LOOM_DTYPE_F32, 4, ks, &k));
  CHECK_OK(ctx, loom_graph_input(g, "v", LOOM_DTYPE_F32, 4, ks, &v));
  CHECK_OK(ctx, loom_graph_input(g, "base", LOOM_DTYPE_I64, 0, NULL, &base));
  CHECK_OK(ctx, loom_graph_input(g, "w", LOOM_DTYPE_F32, 4, qs, &w));
  q = x;
  if (a->project_q) {
    CHECK_OK(ctx, loom_graph_input(g, "wq", LOOM_DTYPE_F32, 2, (int64_t[]){a->d, a->d}, &wq));
    CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, wq}, 0, NULL, &q));
  }
  loom_attr attrs[] = {{.name = "causal", .kind = LOOM_ATTR_INT, .i = a->causal},
                       {.name = "p", .kind = LOOM_ATTR_FLOAT, .f = a->p},
                       {.name = "seed", .kind = LOOM_ATTR_INT, .i = a->seed},
                       {.name = "offset", .kind = LOOM_ATTR_INT, .i = a->offset}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ATTENTION, 4, (loom_value[]){q, k, v, base}, 4, attrs, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  if (placement) {
    loom_rng_placement pl = LOOM_RNG_FUSED;
    CHECK(loom_rng_placement_from_name(placement, &pl) == LOOM_STATUS_OK);
    loom_graph *f = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_graph_fuse_attention(g, pl, model, &f, &n));
    CHECK(n == 1);
    loom_graph_free(g);
    g = f;
    if (!g) return NULL;
    y = g->outputs[0];
    x = g->inputs[0], k = g->inputs[1], v = g->inputs[2], w = g->inputs[4];
  }
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){y, w}, 0, NULL, &prod));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &prod, 0, NULL, &loss));
  CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, k, v}, grads));
  CHECK_OK(ctx, loom_graph_output(g, a->project_q ? "dx" : "dq", grads[0]));
  CHECK_OK(ctx, loom_graph_output(g, "dk", grads[1]));
  CHECK_OK(ctx, loom_graph_output(g, "dv", grads[2]));
  return g;
}

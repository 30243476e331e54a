/* The graph the attention tests share (test_attention on the cpu backend,
 * test_opencl_attention on the GPU backends). */
#ifndef LOOM_TESTS_ATTENTION_GRAPH_H
#define LOOM_TESTS_ATTENTION_GRAPH_H

#include "common.h"

#include "ir/graph.h"
#include "perf/rng_model.h"

typedef struct loom_test_attention {
  int64_t b0, b1, sq, sk, d; /* q [b0, b1, sq, d], k and v [b0, b1, sk, d] */
  bool causal;
  double p;             /* dropout */
  int64_t seed, offset; /* the dropout stream */
  /* q = x wq, a GEMM just before attention (where the overlap placement
   * draws the mask beside it); else q is an input */
  bool project_q;
} loom_test_attention;

/* y = attention(q, k, v, base), loss = sum(y * w); the outputs y and the
 * gradients of loss for q (or x), k and v. Inputs: q (or x), k, v, base
 * (i64 scalar), w, and wq when project_q. With a placement (not NULL) the
 * attention pass runs before autodiff, as the training builders do, so the
 * backward is flash_attention_grad (model: what auto reads); without, the
 * gradient is the decomposition's (the reference). NULL on failure
 * (counted). */
loom_graph *loom_test_attention_graph(loom_ctx *ctx, const loom_test_attention *a,
                                      const char *placement, const loom_rng_model *model);

#endif

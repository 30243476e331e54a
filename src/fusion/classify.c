/*
 * Classification: which nodes the fuser owns. Matrix products are
 * compute-intensive and go to the GEMM library; every other primitive is
 * memory-intensive and belongs to the fuser when a kernel can express it
 * (loom_fusion_node_fusible); the rest (gather, scatter, dtypes the kernels
 * do not handle) runs eagerly, one node at a time.
 */
#include "fusion/group.h"

#include "ops/op.h"

#include <stdlib.h>

/* live[v] for every value an output depends on; false if out of memory
 * (then every node counts as live). */
static bool liveness(const loom_graph *g, bool *live_node) {
  bool *live = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *live);
  if (!live) return false;
  for (int32_t i = 0; i < g->n_outputs; i++)
    live[g->outputs[i]] = true;
  for (int32_t n = g->n_nodes - 1; n >= 0; n--) {
    const loom_node *nd = &g->nodes[n];
    live_node[n] = loom_op_is_comm(nd->op); /* a peer waits for it */
    for (int32_t o = 0; o < nd->n_out; o++)
      live_node[n] = live_node[n] || live[nd->out[o]];
    if (!live_node[n]) continue;
    for (int32_t i = 0; i < nd->n_in; i++)
      live[nd->in[i]] = true;
  }
  free(live);
  return true;
}

void loom_fusion_classify(const loom_graph *g, loom_node_class *cls) {
  bool *live = malloc(sizeof *live * (size_t)(g->n_nodes ? g->n_nodes : 1));
  bool have_live = live && liveness(g, live);
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const loom_node *nd = &g->nodes[n];
    if (have_live && !live[n]) {
      cls[n] = LOOM_NODE_DEAD;
    } else if (nd->op == LOOM_OP_MATMUL) {
      /* The GEMM library is f32; other dtypes run on the reference path. */
      bool f32 = true;
      for (int32_t i = 0; i < nd->n_in; i++)
        f32 = f32 && loom_value_type(g, nd->in[i])->dtype == LOOM_DTYPE_F32;
      cls[n] = f32 ? LOOM_NODE_GEMM : LOOM_NODE_EAGER;
    } else if (loom_fusion_node_fusible(g, n)) {
      cls[n] = LOOM_NODE_MEMORY;
    } else {
      cls[n] = LOOM_NODE_EAGER;
    }
  }
  free(live);
}

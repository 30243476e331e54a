/*
 * The reference backend: every primitive through its op's reference kernel,
 * one node at a time in graph order. Slow and obviously correct: the oracle
 * every other backend is tested against.
 */
#include "runtime/session.h"

static void ref_free(void *bctx) { (void)bctx; }

static bool ref_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  (void)g;
  return !loom_op_is_composite(n->op);
}

static loom_status ref_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g,
                                     loom_view *values) {
  (void)bctx;
  for (int32_t i = 0; i < g->n_nodes; i++)
    LOOM_TRY(loom_exec_node_ref(ctx, g, &g->nodes[i], values));
  return LOOM_STATUS_OK;
}

static const loom_backend_iface ref_iface = {
    .name = "ref",
    .free = ref_free,
    .supports_op = ref_supports_op,
    .buffer_alloc = loom_host_buffer_alloc,
    .buffer_free = loom_host_buffer_free,
    .graph_compute = ref_graph_compute,
};

loom_status loom_ref_backend_init(loom_ctx *ctx, loom_backend *b) {
  (void)ctx;
  b->iface = &ref_iface;
  b->context = NULL;
  return LOOM_STATUS_OK;
}

/*
 * The reference backend: every primitive through its op's reference kernel,
 * one node at a time in graph order. Slow and obviously correct: the oracle
 * every other backend is tested against. Fusion modes do not apply to it.
 */
#include "runtime/session.h"

static void ref_free(void *bctx) { (void)bctx; }

static bool ref_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  (void)g;
  return !loom_op_is_composite(n->op);
}

static loom_status ref_prepare(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_prepared *out) {
  (void)bctx;
  (void)ctx;
  (void)opts;
  out->handle = NULL;
  out->stats.n_eager = g->n_nodes;
  return loom_memplan_build(g, &out->plan);
}

static void ref_release(void *bctx, void *handle) {
  (void)bctx;
  (void)handle;
}

static loom_status ref_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                                     loom_view *values) {
  (void)bctx;
  (void)handle;
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
    .prepare = ref_prepare,
    .release = ref_release,
    .graph_compute = ref_graph_compute,
};

loom_status loom_ref_backend_init(loom_ctx *ctx, loom_backend *b) {
  (void)ctx;
  b->iface = &ref_iface;
  b->context = NULL;
  return LOOM_STATUS_OK;
}

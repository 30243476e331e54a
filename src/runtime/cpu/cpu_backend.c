/*
 * The cpu backend. With fusion "eager" it runs the graph node by node:
 * nodes with a cpu kernel (f32 compute, any-dtype data movement) run it;
 * every other node runs its reference kernel, so the backend is complete
 * for every primitive. With "stitch" (the default), "loop" or "none" it
 * runs a fused program of generated kernels (cpu_program.c), whose GEMM
 * and leftover nodes run here one at a time.
 */
#include "runtime/cpu/cpu.h"

#include "ops/op.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

int64_t loom_cpu_attr_i(const loom_node *n, const char *name) {
  int32_t i = loom_op_attr_index(n->op, name);
  return i >= 0 ? n->attr[i].i : 0;
}

double loom_cpu_attr_f(const loom_node *n, const char *name) {
  int32_t i = loom_op_attr_index(n->op, name);
  return i >= 0 ? n->attr[i].f : 0.0;
}

const loom_ints *loom_cpu_attr_ints(const loom_node *n, const char *name) {
  static const loom_ints none = {0, {0}};
  int32_t i = loom_op_attr_index(n->op, name);
  return i >= 0 ? &n->attr[i].ints : &none;
}

static loom_cpu_kernel select_kernel(const loom_graph *g, const loom_node *n) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d) return NULL;
  switch (d->cls) {
  case LOOM_OPCLASS_ELEMENTWISE: return loom_cpu_elementwise_kernel(g, n);
  case LOOM_OPCLASS_REDUCE: return loom_cpu_reduce_kernel(g, n);
  case LOOM_OPCLASS_LAYOUT: return loom_cpu_layout_kernel(g, n);
  case LOOM_OPCLASS_INDEX:
  case LOOM_OPCLASS_RNG: return n->op == LOOM_OP_DROPOUT_MASK ? loom_cpu_attention_kernel(g, n)
                                                             : loom_cpu_index_kernel(g, n);
  case LOOM_OPCLASS_ATTENTION: return loom_cpu_attention_kernel(g, n);
  case LOOM_OPCLASS_SOURCE: return loom_cpu_source_kernel(g, n);
  case LOOM_OPCLASS_GEMM: return loom_cpu_matmul_kernel(g, n);
  default: return NULL;
  }
}

static void cpu_free(void *bctx) { (void)bctx; }

static bool cpu_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  return select_kernel(g, n) != NULL;
}

bool loom_cpu_has_kernel(const loom_graph *g, const loom_node *n) {
  return select_kernel(g, n) != NULL;
}

static loom_status run_node(const loom_cpu *c, const loom_graph *g, const loom_node *n,
                            loom_cpu_kernel k, loom_view *values) {
  loom_view in_stack[8], out_stack[LOOM_PART_MAX_IO], *in = in_stack;
  if (n->n_out > LOOM_PART_MAX_IO)
    return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "too many outputs (%d)", n->n_out);
  if (n->n_in > LOOM_ARRAY_LEN(in_stack)) {
    in = loom_malloc(c->ctx, sizeof *in * (size_t)n->n_in);
    if (!in) return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n->n_in; i++)
    in[i] = values[n->in[i]];
  for (int32_t o = 0; o < n->n_out; o++)
    out_stack[o] = values[n->out[o]];
  loom_status st = k(c, n, in, out_stack);
  if (in != in_stack) free(in);
  if (st) loom_error_prefix(c->ctx, "%s (node %d)", loom_op_name(n->op), (int32_t)(n - g->nodes));
  return st;
}

loom_status loom_cpu_exec_node(const loom_cpu *c, const loom_graph *g, const loom_node *n,
                               loom_view *values) {
  loom_cpu_kernel k = select_kernel(g, n);
  if (k) return run_node(c, g, n, k, values);
  return loom_exec_node_ref(c->ctx, g, n, values);
}

loom_status loom_cpu_prepare_eager(const loom_graph *g, loom_prepared *out) {
  out->stats.n_kernels = 0;
  out->stats.n_gemm = out->stats.n_eager = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->op == LOOM_OP_MATMUL && select_kernel(g, n))
      out->stats.n_gemm++;
    else
      out->stats.n_eager++;
  }
  return loom_memplan_build(g, &out->plan);
}

static loom_status cpu_prepare(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_prepared *out) {
  (void)bctx;
  if (opts->fusion == LOOM_FUSION_EAGER) return loom_cpu_prepare_eager(g, out);
  return loom_cpu_program_prepare(ctx, g, opts->fusion, out);
}

static void cpu_release(void *bctx, void *handle) {
  (void)bctx;
  loom_cpu_program_free(handle);
}

static loom_status cpu_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                                     loom_view *values) {
  (void)bctx;
  loom_cpu c = {.ctx = ctx, .nt = loom_ctx_resolved_threads(ctx)};
  if (handle && !loom_cpu_program_is_eager(handle))
    return loom_cpu_program_run(handle, &c, g, values);
  for (int32_t i = 0; i < g->n_nodes; i++)
    LOOM_TRY(loom_cpu_exec_node(&c, g, &g->nodes[i], values));
  return LOOM_STATUS_OK;
}

static const loom_backend_iface cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .supports_op = cpu_supports_op,
    .buffer_alloc = loom_host_buffer_alloc,
    .buffer_free = loom_host_buffer_free,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .graph_compute = cpu_graph_compute,
};

loom_status loom_cpu_backend_init(loom_ctx *ctx, loom_backend *b) {
  (void)ctx;
  b->iface = &cpu_iface;
  b->context = NULL;
  return LOOM_STATUS_OK;
}

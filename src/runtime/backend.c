/* The backend registry, backend-neutral entry points and the one node executor. */
#include "runtime/backend.h"

#include "ops/op.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

typedef loom_status (*backend_init_fn)(loom_ctx *ctx, loom_backend *b);

#define LOOM_BACKEND_ENTRY(name) {#name, loom_##name##_backend_init},
static const struct {
  const char *name;
  backend_init_fn init;
} backends[] = {LOOM_BACKEND_LIST(LOOM_BACKEND_ENTRY)};
#undef LOOM_BACKEND_ENTRY

/* The names joined by ", "; the leading separator skipped. */
#define LOOM_BACKEND_NAME_STR(name) ", " #name
const char *loom_backend_names(void) { return &LOOM_BACKEND_LIST(LOOM_BACKEND_NAME_STR)[2]; }
#undef LOOM_BACKEND_NAME_STR

bool loom_backend_name_known(const char *name) {
  for (int32_t i = 0; name && i < LOOM_ARRAY_LEN(backends); i++)
    if (strcmp(backends[i].name, name) == 0) return true;
  return false;
}

loom_status loom_backend_new(loom_ctx *ctx, const char *name, loom_backend **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "backend_new: out is NULL");
  *out = NULL;
  if (!name)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "backend_new: the backend name is NULL (known: %s)", loom_backend_names());
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(backends); i++) {
    if (strcmp(backends[i].name, name) != 0) continue;
    loom_backend *b = loom_calloc(ctx, 1, sizeof *b);
    if (!b) return LOOM_STATUS_OUT_OF_MEMORY;
    loom_status st = backends[i].init(ctx, b);
    if (st) {
      free(b);
      return st;
    }
    *out = b;
    return LOOM_STATUS_OK;
  }
  return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "unknown backend '%s' (known: %s)", name,
                    loom_backend_names());
}

loom_status loom_backend_rng_model(loom_ctx *ctx, const loom_session_options *opts,
                                   int32_t threads, loom_rng_model *m) {
  loom_backend *b = NULL;
  LOOM_TRY(loom_backend_new(ctx, opts && opts->backend ? opts->backend : LOOM_BACKEND_DEFAULT, &b));
  loom_status st = LOOM_STATUS_OK;
  if (b->iface->rng_model)
    b->iface->rng_model(b->context, ctx, threads, m);
  else
    st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "backend %s has no RNG placement model",
                    b->iface->name);
  loom_backend_free(b);
  return st;
}

loom_status loom_backend_machine_rates(loom_ctx *ctx, const char *name, loom_machine *m) {
  loom_backend *b = NULL;
  LOOM_TRY(loom_backend_new(ctx, name ? name : LOOM_BACKEND_DEFAULT, &b));
  if (b->iface->machine_rates) b->iface->machine_rates(b->context, ctx, m);
  loom_backend_free(b);
  return LOOM_STATUS_OK;
}

loom_status loom_backend_attention_costs(loom_ctx *ctx, const char *name,
                                         struct loom_attention_costs *c) {
  loom_backend *b = NULL;
  LOOM_TRY(loom_backend_new(ctx, name ? name : LOOM_BACKEND_DEFAULT, &b));
  loom_status st = LOOM_STATUS_OK;
  if (b->iface->attention_costs)
    b->iface->attention_costs(b->context, ctx, c);
  else
    st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "backend %s does not choose how to run attention",
                    b->iface->name);
  loom_backend_free(b);
  return st;
}

void loom_backend_free(loom_backend *b) {
  if (!b) return;
  if (b->iface && b->iface->free) b->iface->free(b->context);
  free(b);
}

void *loom_host_buffer_alloc(void *bctx, size_t bytes) {
  (void)bctx;
  /* aligned_alloc needs a multiple of the alignment. */
  size_t n = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, n ? n : 64);
}

void loom_host_buffer_free(void *bctx, void *p) {
  (void)bctx;
  free(p);
}

void loom_count_ops(const loom_graph *g, int32_t *n_primitive, int32_t *n_memory, int32_t *n_gemm) {
  int32_t prim = 0, mem = 0, gemm = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_op_def *d = loom_op_get(g->nodes[i].op);
    if (!d || d->cls == LOOM_OPCLASS_COMPOSITE) continue;
    prim++;
    if (d->cls == LOOM_OPCLASS_GEMM || d->cls == LOOM_OPCLASS_ATTENTION)
      gemm++;
    else
      mem++;
  }
  if (n_primitive) *n_primitive = prim;
  if (n_memory) *n_memory = mem;
  if (n_gemm) *n_gemm = gemm;
}

/* The reference kernel as a node kernel (self: the context). */
static loom_status ref_kernel(const void *self, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  loom_ctx *ctx = (loom_ctx *)self;
  const loom_op_def *d = loom_op_get(n->op);
  if (d->cls == LOOM_OPCLASS_COMPOSITE || !d->ref)
    return loom_error(ctx, LOOM_STATUS_INTERNAL,
                      "no reference kernel (composites must be decomposed before execution)");
  return d->ref(ctx, n, in, out);
}

loom_status loom_exec_node(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                           loom_view *values, loom_node_kernel_fn kernel, const void *self) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d) return loom_error(ctx, LOOM_STATUS_INTERNAL, "unknown op %d", (int)n->op);
  if (!kernel) {
    kernel = ref_kernel;
    self = ctx;
  }
  /* a reshape planned in place (passes/memplan.h) has nothing to move */
  if (n->op == LOOM_OP_RESHAPE && n->n_in == 1 && values[n->in[0]].data == values[n->out[0]].data)
    return LOOM_STATUS_OK;
  /* a comm op's global form has one input and output per group member */
  loom_view in_stack[8], out_stack[LOOM_PART_MAX_IO];
  loom_view *in = in_stack, *out = out_stack;
  if (n->n_out > LOOM_MAX_NODE_IO || n->n_in > LOOM_MAX_NODE_IO)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "%s: too many inputs or outputs (%d, %d)",
                      d->name, n->n_in, n->n_out);
  if (n->n_in > LOOM_ARRAY_LEN(in_stack) && !(in = loom_malloc(ctx, sizeof *in * (size_t)n->n_in)))
    return LOOM_STATUS_OUT_OF_MEMORY;
  if (n->n_out > LOOM_ARRAY_LEN(out_stack) &&
      !(out = loom_malloc(ctx, sizeof *out * (size_t)n->n_out))) {
    if (in != in_stack) free(in);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n->n_in; i++)
    in[i] = values[n->in[i]];
  for (int32_t o = 0; o < n->n_out; o++)
    out[o] = values[n->out[o]];
  loom_status st = kernel(self, n, in, out);
  if (in != in_stack) free(in);
  if (out != out_stack) free(out);
  if (st) loom_error_prefix(ctx, "%s (node %d)", d->name, (int32_t)(n - g->nodes));
  return st;
}

loom_status loom_exec_node_ref(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                               loom_view *values) {
  return loom_exec_node(ctx, g, n, values, NULL, NULL);
}

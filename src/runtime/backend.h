/*
 * The backend interface: a small vtable (ggml-style iface + context).
 * A backend says which nodes it supports; the executor runs the rest on
 * the reference kernels. Buffers hold the values of one run.
 */
#ifndef LOOM_RUNTIME_BACKEND_H
#define LOOM_RUNTIME_BACKEND_H

#include "ir/view.h"

typedef struct loom_backend_iface {
  const char *name;
  /* Frees the backend's context. */
  void (*free)(void *bctx);
  /* True if the backend runs this node itself. */
  bool (*supports_op)(void *bctx, const loom_graph *g, const loom_node *n);
  /* Memory for the arena and for values (host memory for CPU backends). */
  void *(*buffer_alloc)(void *bctx, size_t bytes);
  void (*buffer_free)(void *bctx, void *p);
  /* Runs the whole graph. values[v] is a contiguous view of every value's
   * memory (inputs already filled); unsupported nodes fall back to the
   * reference kernels through loom_exec_node_ref. */
  loom_status (*graph_compute)(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               loom_view *values);
} loom_backend_iface;

typedef struct loom_backend {
  const loom_backend_iface *iface;
  void *context;
} loom_backend;

/* Creates a backend by name: "ref" or "cpu". */
loom_status loom_backend_new(loom_ctx *ctx, const char *name,
                             loom_backend **out);
void loom_backend_free(loom_backend *b);

/* Runs one node with its reference kernel (the oracle and the fallback). */
loom_status loom_exec_node_ref(loom_ctx *ctx, const loom_graph *g,
                               const loom_node *n, loom_view *values);

#endif

/*
 * The backend interface: a small vtable (ggml-style iface + context).
 * A backend says which nodes it supports; the executor runs the rest on
 * the reference kernels. Preparing a graph happens once per session
 * (fusion, code generation, the memory plan); computing happens per run.
 */
#ifndef LOOM_RUNTIME_BACKEND_H
#define LOOM_RUNTIME_BACKEND_H

#include "ir/view.h"
#include "passes/memplan.h"

#define LOOM_WARNING_MAX 512

/* What preparing a graph gives the session. */
typedef struct loom_prepared {
  /* Backend-owned state for graph_compute (NULL if none); freed by
   * release. */
  void *handle;
  /* Where every value lives: node-based (loom_memplan_build) or over the
   * steps of a fused program (loom_memplan_build_steps). */
  loom_memplan plan;
  /* Filled by the backend: kernels, GEMMs, eager nodes, modeled bytes,
   * compile time, cache hit. The session fills the op counts and peak. */
  loom_session_stats stats;
  /* A non-fatal problem worth telling the user ("" if none), e.g. no C
   * compiler: fell back to eager execution. */
  char warning[LOOM_WARNING_MAX];
} loom_prepared;

typedef struct loom_backend_iface {
  const char *name;
  /* Frees the backend's context. */
  void (*free)(void *bctx);
  /* True if the backend runs this node itself. */
  bool (*supports_op)(void *bctx, const loom_graph *g, const loom_node *n);
  /* Memory for the arena and for values (host memory for CPU backends). */
  void *(*buffer_alloc)(void *bctx, size_t bytes);
  void (*buffer_free)(void *bctx, void *p);
  /* Prepares a decomposed, verified graph to run with these options
   * (never NULL: the session's complete copy, every mode checked).
   * Fills out (zeroed by the caller but for the stats' op counts, which
   * a fusing backend may refine); on failure leaves nothing to release. */
  loom_status (*prepare)(void *bctx, loom_ctx *ctx, const loom_graph *g,
                         const loom_session_options *opts, loom_prepared *out);
  /* Releases what prepare made (handle may be NULL). */
  void (*release)(void *bctx, void *handle);
  /* Runs the whole graph. values[v] is a contiguous view of every value's
   * memory as planned (inputs already filled; values kept out of memory by
   * fusion have data NULL); unsupported nodes fall back to the reference
   * kernels through loom_exec_node_ref. */
  loom_status (*graph_compute)(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                               loom_view *values);
} loom_backend_iface;

typedef struct loom_backend {
  const loom_backend_iface *iface;
  void *context;
} loom_backend;

/* Creates a backend by name: "ref" or "cpu". */
loom_status loom_backend_new(loom_ctx *ctx, const char *name, loom_backend **out);
void loom_backend_free(loom_backend *b);

/* Runs one node with its reference kernel (the oracle and the fallback). */
loom_status loom_exec_node_ref(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                               loom_view *values);

/* Counts a graph's nodes by kind for the session stats: primitives,
 * memory-intensive ones (everything but GEMMs) and GEMMs. */
void loom_count_ops(const loom_graph *g, int32_t *n_primitive, int32_t *n_memory, int32_t *n_gemm);

#endif

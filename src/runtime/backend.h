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

#include "perf/machine.h"
#include "perf/rng_model.h"

struct loom_attention_costs; /* passes/attention.h */

/* What preparing a graph gives the session. */
typedef struct loom_prepared {
  /* Set by the session before prepare (read-only for the backend): per
   * node of the graph, whether the backend's supports_op took it. Nodes
   * the backend runs one at a time and did not take run their reference
   * kernels (loom_exec_node with no kernel). */
  const bool *supported;
  /* Backend-owned state for graph_compute (NULL if none); freed by
   * release. */
  void *handle;
  /* Where every value lives: node-based (loom_memplan_build) or over the
   * steps of a fused program (loom_memplan_build_steps). */
  loom_memplan plan;
  /* Filled by the backend: kernels, GEMMs, eager nodes, fallbacks, modeled
   * bytes, compile time, cache hit. The session fills the op counts and
   * peak. */
  loom_session_stats stats;
  /* A non-fatal problem worth telling the user ("" if none), e.g. no C
   * compiler: fell back to eager execution. */
  char warning[LOOM_WARNING_MAX];
} loom_prepared;

/*
 * A backend owns its pipeline: the graph rewrite it wants before
 * decomposition, preparing (fusion, code, memory plan), running, and
 * describing what it prepared. The session, the model builders, the bench
 * and the CLI reach it only through this table and never name a backend.
 * Optional entries are NULL when a backend has nothing to do there.
 */
typedef struct loom_backend_iface {
  const char *name;
  /* Frees the backend's context. */
  void (*free)(void *bctx);
  /* True if the backend runs this node of a decomposed graph itself when
   * it runs nodes one at a time; asked once per node at prepare time (the
   * answers are loom_prepared.supported). */
  bool (*supports_op)(void *bctx, const loom_graph *g, const loom_node *n);
  /* Memory for the arena and for values (host memory for CPU backends). */
  void *(*buffer_alloc)(void *bctx, size_t bytes);
  void (*buffer_free)(void *bctx, void *p);
  /* Optional: the graph rewrite this backend wants before decomposition
   * (and, in the training builders, before autodiff, so that a rewritten
   * op brings its own gradient): the cpu backend makes flash attention of
   * attention, with its RNG placement. opts: the session options (names
   * already checked). *out is a new graph, or NULL when it keeps g as is;
   * *n_rewritten (not NULL) counts the nodes replaced. Errors go to ctx. */
  loom_status (*rewrite)(void *bctx, loom_ctx *ctx, const loom_graph *g,
                         const loom_session_options *opts, loom_graph **out,
                         int32_t *n_rewritten);
  /* Optional: a last rewrite of the decomposed, simplified graph a session
   * prepares, never seen by the builders, autodiff or a parallel plan's
   * partition (the cpu backend folds layout ops into flash attention's
   * strided operands). *out: a new graph, or NULL when g stays. */
  loom_status (*finish)(void *bctx, loom_ctx *ctx, const loom_graph *g,
                        const loom_session_options *opts, loom_graph **out);
  /* Optional: the RNG placement model's rates measured on this backend's
   * kernels with `threads` threads (perf/rng_model.h). */
  void (*rng_model)(void *bctx, loom_ctx *ctx, int32_t threads, loom_rng_model *m);
  /* Optional: the rates of m that this backend's cost rules read, measured
   * on its own kernels or kept in the machine profile (the cpu backend:
   * the GEMM's efficiency by rows per block). */
  void (*machine_rates)(void *bctx, loom_ctx *ctx, loom_machine *m);
  /* Optional: what its choice between flash and decomposed attention reads
   * (passes/attention.h), measured on its own kernels. */
  void (*attention_costs)(void *bctx, loom_ctx *ctx, struct loom_attention_costs *c);
  /* Prepares a decomposed, verified graph to run with these options
   * (never NULL: the session's complete copy, every mode checked).
   * Fills out (zeroed by the caller but for `supported` and the stats' op
   * counts, which a fusing backend may refine); on failure leaves nothing
   * to release. */
  loom_status (*prepare)(void *bctx, loom_ctx *ctx, const loom_graph *g,
                         const loom_session_options *opts, loom_prepared *out);
  /* Releases what prepare made (handle may be NULL). */
  void (*release)(void *bctx, void *handle);
  /* Optional: what prepare made, as text (*text malloc'ed): the program,
   * kernels or source (never LOOM_ARTIFACT_GRAPH: the session prints its
   * graph). LOOM_STATUS_UNSUPPORTED, with a message, when there is none. */
  loom_status (*describe)(void *bctx, loom_ctx *ctx, const loom_graph *g, const void *handle,
                          loom_session_artifact what, char **text);
  /* Runs the whole graph. values[v] is a contiguous view of every value's
   * memory as planned (inputs already filled; values kept out of memory by
   * fusion have data NULL); every node run one at a time goes through
   * loom_exec_node, with the backend's kernel where supported[] says so
   * and the reference kernel otherwise. */
  loom_status (*graph_compute)(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                               loom_view *values);
  /* Optional: which graph inputs hold the same data on every run from now
   * on (frozen: per input of the prepared graph; NULL: none), so work
   * derived from them may be kept across runs (the cpu backend packs the
   * GEMM operands they give). Everything kept before is dropped: the
   * session calls this whenever a frozen input is bound, rebound or freed. */
  void (*freeze)(void *bctx, void *handle, const bool *frozen);
  /* Optional: how many operands it keeps packed now, and their bytes. */
  int32_t (*packed)(void *bctx, const void *handle, int64_t *bytes);
  /* Optional: the device the backend runs on, for `loom devices` (NULL:
   * the host CPU). */
  void (*device)(void *bctx, char *out, size_t n);
} loom_backend_iface;

typedef struct loom_backend {
  const loom_backend_iface *iface;
  void *context;
} loom_backend;

/*
 * The backend registry: one X(name) per backend, in the order `known:`
 * lists them. A backend lives in src/runtime/NAME/ and defines
 * loom_NAME_backend_init (declared from this list in runtime/session.h);
 * adding one is that folder and one entry here.
 */
#define LOOM_BACKEND_LIST(X) X(ref) X(cpu) X(opencl) X(cuda)
/* The backend a session gets when its options name none. */
#define LOOM_BACKEND_DEFAULT "cpu"
/* " ref cpu": the registered names as one string literal, for --help. */
#define LOOM_BACKEND_HELP_NAME(name) " " #name
#define LOOM_BACKEND_HELP_NAMES LOOM_BACKEND_LIST(LOOM_BACKEND_HELP_NAME)
/* "ref, cpu": the registered names, for messages. */
const char *loom_backend_names(void);

/* Creates a backend by name (loom_backend_names). */
loom_status loom_backend_new(loom_ctx *ctx, const char *name, loom_backend **out);
void loom_backend_free(loom_backend *b);
/* True if name is a registered backend. */
bool loom_backend_name_known(const char *name);

/* What `loom devices` prints (*text malloc'ed): each backend with its
 * device or why it is unavailable, the OpenCL and CUDA devices, NVRTC. */
loom_status loom_devices_report(loom_ctx *ctx, char **text);

/*
 * The backend's graph rewrite, for builders that must run it before
 * autodiff (model/gpt.c, the attention bench) without naming a backend:
 * the backend opts->backend names (default: the default backend) rewrites
 * g with these options (attention and RNG names checked here). *out: a new
 * graph, or NULL when the backend keeps g; *n_rewritten (may be NULL) counts
 * the nodes replaced.
 */
loom_status loom_backend_rewrite(loom_ctx *ctx, const loom_session_options *opts,
                                 const loom_graph *g, loom_graph **out, int32_t *n_rewritten);
/* The RNG placement model of the backend opts->backend names, measured on
 * `threads` threads; LOOM_STATUS_UNSUPPORTED if it has none. */
loom_status loom_backend_rng_model(loom_ctx *ctx, const loom_session_options *opts,
                                   int32_t threads, loom_rng_model *m);

/* The backend `name` names (NULL: the default) fills the rates of m its
 * cost rules read; a backend without any leaves m as it is. */
loom_status loom_backend_machine_rates(loom_ctx *ctx, const char *name, loom_machine *m);

/* The attention choice's costs of the backend `name` names (NULL: the
 * default); LOOM_STATUS_UNSUPPORTED if it makes no such choice. */
loom_status loom_backend_attention_costs(loom_ctx *ctx, const char *name,
                                         struct loom_attention_costs *c);

/* A backend's kernel for one node: n's outputs from its inputs. self is
 * what the backend's kernels share (the cpu backend: its context and
 * thread count). */
typedef loom_status (*loom_node_kernel_fn)(const void *self, const loom_node *n,
                                           const loom_view *in, const loom_view *out);

/*
 * The one node executor: gathers n's input and output views from values
 * and runs kernel(self, ...), or, when kernel is NULL, the op's reference
 * kernel (the oracle, and the fallback for every node the backend does not
 * support); a reshape planned in place moves nothing; a failure is
 * prefixed with the op and the node's index.
 */
loom_status loom_exec_node(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                           loom_view *values, loom_node_kernel_fn kernel, const void *self);
/* loom_exec_node with the reference kernel. */
loom_status loom_exec_node_ref(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                               loom_view *values);

/* Counts a graph's nodes by kind for the session stats: primitives,
 * memory-intensive ones (everything but GEMMs) and GEMMs. */
void loom_count_ops(const loom_graph *g, int32_t *n_primitive, int32_t *n_memory, int32_t *n_gemm);

#endif

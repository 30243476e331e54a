/*
 * Internals of the cpu backend: eager, one primitive at a time, plain C
 * loops parallelised with OpenMP. Determinism rule for every kernel: each
 * output element is computed by exactly one thread, in an order that does
 * not depend on the thread count, so results are bitwise identical for any
 * number of threads. Work is split into tasks of a fixed size (never sized
 * by the thread count) and handed out with static schedules.
 */
#ifndef LOOM_RUNTIME_CPU_CPU_H
#define LOOM_RUNTIME_CPU_CPU_H

#include "ir/view.h"
#include "runtime/backend.h"
#include "runtime/cpu/gemm.h"

/* Below this many elements a kernel runs on the calling thread only. */
#define LOOM_CPU_PAR_MIN 16384
/* Elements per task along a long contiguous row. */
#define LOOM_CPU_CHUNK 8192

typedef struct loom_cpu loom_cpu;
typedef struct loom_cpu_packs loom_cpu_packs;
typedef loom_status (*loom_cpu_kernel)(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                       const loom_view *out);

struct loom_cpu {
  loom_ctx *ctx;
  int32_t nt; /* OpenMP threads for this run */
  /* Per node of the graph being run: its cpu kernel, chosen at prepare
   * where supports_op took the node; NULL (or no table): the reference
   * kernel. */
  const loom_cpu_kernel *kernels;
  /* GEMM operands and conv weights packed once and reused across runs, and
   * the GEMMs' scratch (NULL: none). */
  loom_cpu_packs *packs;
};

/*
 * Values that hold the same data on every run of a session's graph, and
 * the B operands packed for the matmul nodes that read them
 * (cpu_matmul.c): a value is constant when it is a frozen graph input or
 * is computed, by ops that are not RNG or comm, from constants only (a
 * transpose of a weight, a `constant` node). A matmul whose B is constant
 * packs it on its first run (loom_gemm_pack_b) and reuses the pack until
 * the frozen inputs change; a conv whose weights are constant keeps them
 * reordered for its blocks in its node's own slot (loom_cpu_packs_slot).
 * One run at a time uses it (the session's).
 */
loom_status loom_cpu_packs_new(loom_ctx *ctx, const loom_graph *g, loom_cpu_packs **out);
void loom_cpu_packs_free(loom_cpu_packs *pk);
/* frozen: per graph input of g (NULL: none); drops every pack made. */
void loom_cpu_packs_set_frozen(loom_cpu_packs *pk, const bool *frozen);
/* How many operands are packed now (GEMM B's and kernels' own), and their bytes. */
int32_t loom_cpu_packs_count(const loom_cpu_packs *pk, int64_t *bytes);

/* A kernel's own pack for a node (cpu_conv_wpack.c: a conv's weights in its
 * primitives' layout): data freed by free_fn when the frozen set changes
 * or the kernel replaces it. */
typedef struct loom_cpu_pack {
  void *data;
  int64_t bytes;
  void (*free_fn)(void *data);
} loom_cpu_pack;
/* Whether node n's input k holds the same data on every run. */
bool loom_cpu_packs_constant(const loom_cpu *c, const loom_node *n, int32_t k);
/* Node n's own pack slot, or NULL where n is not a node of the session's
 * graph or there are no packs. */
loom_cpu_pack *loom_cpu_packs_slot(const loom_cpu *c, const loom_node *n);
/* Frees what slot holds and empties it. */
void loom_cpu_pack_clear(loom_cpu_pack *slot);

/* Each family returns its kernel for node n of g, or NULL when the cpu
 * backend does not handle that case (the node then runs its ref kernel). */
loom_cpu_kernel loom_cpu_elementwise_kernel(const loom_graph *g, const loom_node *n);
loom_cpu_kernel loom_cpu_reduce_kernel(const loom_graph *g, const loom_node *n);
loom_cpu_kernel loom_cpu_layout_kernel(const loom_graph *g, const loom_node *n);
loom_cpu_kernel loom_cpu_index_kernel(const loom_graph *g, const loom_node *n);
loom_cpu_kernel loom_cpu_source_kernel(const loom_graph *g, const loom_node *n);
loom_cpu_kernel loom_cpu_attention_kernel(const loom_graph *g, const loom_node *n);
/* conv, conv_transpose, conv_grad_weight and the pools (cpu_conv*.c). */
loom_cpu_kernel loom_cpu_conv_kernel(const loom_graph *g, const loom_node *n);
/* A conv's epilogue kernel: run on the output's rows (gemm.h's
 * epilogue), or, where the kernel computes what oneDNN's post-ops can
 * (cpu_conv_post.h) and nothing else reads the conv's output c, inside
 * the conv, which then writes the kernel's output instead. */
struct loom_kernel;
typedef struct loom_conv_epilogue {
  loom_gemm_epilogue rows;
  const struct loom_kernel *kernel; /* NULL: rows only */
  void *const *args;                /* the kernel's bound arguments */
  int32_t c;                        /* the conv's output value */
  bool c_read;                      /* c is read past the kernel, or a graph output */
  int32_t layout;                   /* LOOM_CPU_*_BLOCKED (a conv step without epilogue too) */
} loom_conv_epilogue;
/* Window ops' inputs and outputs kept in channel blocks between them
 * (cpu_conv_layout.c): a value made by a conv or pool and read only by
 * convs and pools that all take it in the same blocks (oneDNN's nChw16c
 * on AVX-512), or as the residual of a conv whose epilogue runs as
 * post-ops (POST: its one tensor operand, in the conv's output blocks),
 * stays in them, with no reorder to and from plain. */
enum { LOOM_CPU_IN_BLOCKED = 1, LOOM_CPU_OUT_BLOCKED = 2, LOOM_CPU_POST_BLOCKED = 4 };
/* The channel blocks conv or forward pool node n of g takes its input in
 * and gives its output in (1: plain; a conv with an epilogue kernel gives
 * blocks only when the kernel runs as post-ops). */
void loom_cpu_window_blocks(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                            const loom_conv_epilogue *epi, int64_t *in_block, int64_t *out_block);
/* Runs a pool node (max_pool, avg_pool, their gradients) with layout
 * LOOM_CPU_*_BLOCKED (0 for plain; forward pools only). */
loom_status loom_cpu_pool(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out, int32_t layout);
struct loom_program;
/* Per graph node, the LOOM_CPU_*_BLOCKED layout of each conv and pool step
 * of p (NULL when none is blocked); c_read as loom_conv_epilogue's. */
loom_status loom_cpu_window_layouts(loom_ctx *ctx, const loom_graph *g,
                                    const struct loom_program *p, const loom_cpu_kernel *kernels,
                                    const bool *c_read, uint8_t **layout);
/* Runs f32 conv node n (loom_cpu_conv_kernel said yes) with an epilogue
 * (NULL: none) on the output's rows (its last dim; each image's block of
 * channels is whole rows), in blocks of at most epi->rows.rows rows on the
 * thread that computed them, or as post-ops. */
loom_status loom_cpu_conv(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out, const loom_conv_epilogue *epi);

/* Async steps (cpu_overlap.c): moves every dropout_mask step marked
 * `overlap` to just before the last GEMM step ahead of its first user
 * (the program runs it on a worker beside that GEMM: joined after it), and
 * joins every comm step just before the first step that reads its outputs
 * (the program runs comm steps in order on the comm stream of its
 * ctx->comm_env, when it has one). *join: a new array of n_steps, step s
 * async when join[s] > s and joined after step join[s]; NULL when no step
 * is async or a comm step. *n_async_comm: comm steps with compute to
 * overlap (join[s] > s). */
struct loom_program;
struct loom_step;
loom_status loom_cpu_overlap_schedule(loom_ctx *ctx, const loom_graph *g, struct loom_program *p,
                                      int32_t **join, int32_t *n_async_comm);
/* True if st runs a comm op. */
bool loom_cpu_step_is_comm(const loom_graph *g, const struct loom_step *st);

/* The RNG placement model's rates for this machine, measured with the cpu
 * backend's kernels on `threads` threads (rng_rates.c, about 0.1 s) the
 * first time and kept in the machine profile. */
#include "perf/rng_model.h"
void loom_cpu_rng_model(loom_ctx *ctx, int32_t threads, loom_rng_model *m);
struct loom_attention_costs;
/* The rates the choice between flash and decomposed attention reads
 * (passes/attention.h): flash forward and backward at a short and a long
 * length and the decomposed form's batched score GEMM, measured in one
 * core's CPU time (times the cores: the load at the moment does not move
 * them), kept in the machine profile after the first measurement (a
 * choice that flipped with timer noise would change results' rounding);
 * bandwidth, launch and LLC from the machine. */
void loom_cpu_attention_costs(loom_ctx *ctx, struct loom_attention_costs *c);
loom_cpu_kernel loom_cpu_matmul_kernel(const loom_graph *g, const loom_node *n);
/* Runs f32 matmul node n (loom_cpu_matmul_kernel said yes) with a GEMM
 * epilogue (gemm.h; NULL: none), rows of the output counted row-major
 * over all its leading dims. */
struct loom_gemm_epilogue;
loom_status loom_cpu_matmul(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out, const struct loom_gemm_epilogue *epi);

/* Runs one node eagerly through loom_exec_node: its kernel in
 * c->kernels, else its reference kernel. */
loom_status loom_cpu_exec_node(const loom_cpu *c, const loom_graph *g, const loom_node *n,
                               loom_view *values);

/*
 * Fused programs (cpu_program.c): fusion plan -> kernel IR -> generated C
 * -> compiled, loaded, and run step by step. A program whose code cannot
 * be compiled for want of a compiler runs eagerly (with a warning) but
 * keeps its listing and source for reports.
 */
typedef struct loom_cpu_program loom_cpu_program;

/* Fuses g in `mode` (stitch, loop or none), generates and loads the
 * code, plans memory over the program's steps; fills out's plan, stats
 * and warning and sets *prog. kernels: per node, as loom_cpu.kernels. */
loom_status loom_cpu_program_prepare(loom_ctx *ctx, const loom_graph *g, loom_fusion_mode mode,
                                     const loom_cpu_kernel *kernels, loom_prepared *out,
                                     loom_cpu_program **prog);
void loom_cpu_program_free(loom_cpu_program *p);
/* The memory plan over a fused program's steps (join: as
 * loom_cpu_overlap_schedule's, or NULL); also the opencl backend's. */
loom_status loom_program_plan_steps(loom_ctx *ctx, const loom_graph *g,
                                    const struct loom_program *prog, const int32_t *join,
                                    loom_memplan *plan);
/* Runs the program's steps over values (as the session planned them). */
loom_status loom_cpu_program_run(loom_cpu_program *p, const loom_cpu *c, const loom_graph *g,
                                 loom_view *values);
/* The program's listing, kernels or generated C as text (*text malloc'ed;
 * the backend's describe hook). */
loom_status loom_cpu_program_describe(loom_ctx *ctx, const loom_graph *g,
                                      const loom_cpu_program *p, loom_session_artifact what,
                                      char **text);
/* The fused program's steps and kernels (for tests that check its plan). */
const struct loom_program *loom_cpu_program_get(const loom_cpu_program *p);
/* True if the program runs node by node (no compiler was found). */
bool loom_cpu_program_is_eager(const loom_cpu_program *p);
/* Stats and a node-based plan for running g eagerly on the cpu backend. */
loom_status loom_cpu_prepare_eager(const loom_graph *g, const loom_cpu_kernel *kernels,
                                   loom_prepared *out);

/* An n-d iteration over up to 4 same-shaped operands (strides in elements;
 * 0 for broadcast), with size-1 dims dropped and mergeable dims merged. */
#define LOOM_CPU_MAX_OPS 4
typedef struct loom_cpu_iter {
  int32_t n_ops, rank; /* rank >= 1 */
  int64_t shape[LOOM_MAX_RANK];
  int64_t stride[LOOM_CPU_MAX_OPS][LOOM_MAX_RANK];
  int64_t rows, chunks; /* tasks = rows * chunks over the innermost dim */
} loom_cpu_iter;

/* views[k] all have the same shape (broadcast views are fine). */
void loom_cpu_iter_init(loom_cpu_iter *it, int32_t n_ops, const loom_view *views);
static inline int64_t loom_cpu_iter_tasks(const loom_cpu_iter *it) { return it->rows * it->chunks; }
/* Element offsets of task t's first element per operand; *len its length. */
void loom_cpu_iter_task(const loom_cpu_iter *it, int64_t t, int64_t *off, int64_t *len);
int64_t loom_cpu_iter_numel(const loom_cpu_iter *it);

/* dst = src element by element (same shape and dtype; any strides), in
 * parallel; the cache-friendly core of every layout op. */
void loom_cpu_copy(const loom_cpu *c, const loom_view *dst, const loom_view *src);
/* Fills a contiguous buffer of n elements of size es with the bytes at val. */
void loom_cpu_fill(const loom_cpu *c, void *dst, int64_t n, size_t es, const void *val);

#endif

/*
 * loom.h — the public C API of Loom, a deep-learning compiler and runtime.
 *
 * Usage (build y = relu(x @ w), run it on the cpu backend):
 *
 *   loom_ctx *ctx = NULL;
 *   loom_graph *g = NULL;
 *   loom_session *s = NULL;
 *   loom_value x, w, h, y;
 *   if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
 *   loom_graph_new(ctx, &g);
 *   loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, &x);
 *   loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &w);
 *   loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &h);
 *   loom_graph_op(g, LOOM_OP_RELU, 1, &h, 0, NULL, &y);
 *   loom_graph_output(g, "y", y);
 *   loom_session_options o = LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_STITCH);
 *   if (loom_session_new(ctx, g, &o, &s) != LOOM_STATUS_OK)
 *     fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
 *   // inputs in declaration order; outputs allocated by the session when NULL
 *   loom_tensor *in[2] = {xt, wt}, *out[1] = {NULL};
 *   loom_session_run(s, 2, (const loom_tensor *const *)in, 1, out);
 *   float *yv = loom_tensor_data(out[0]);
 *   ...
 *   loom_tensor_free(out[0]);
 *   loom_session_free(s);
 *   loom_graph_free(g);
 *   loom_ctx_free(ctx);
 *
 * Conventions: every call that can fail returns a loom_status and leaves a
 * readable message on its context (loom_ctx_error). Every _new has a _free
 * that accepts NULL; memory Loom hands out otherwise (loom_graph_print's
 * text) is released with loom_free. No call aborts or exits on bad input.
 *
 * Compatibility: the values of every public enum (status, dtype, op, the
 * session modes) are fixed once released. A new value goes at the end of
 * its list, just before its _COUNT (which is not a value and moves); none
 * is renumbered, reused or removed. src/core/abi.c pins every value, so an
 * entry inserted in the middle fails the build. Options structs carry
 * their size (struct_size, set by LOOM_SESSION_OPTIONS(...) or
 * loom_session_options_init), so fields can be added at the end without
 * breaking a caller built against an older loom.h; the stats struct is
 * filled as far as the caller's size (loom_session_get_stats passes it).
 *
 * Threads: a context, and every graph and session made on it, is used by
 * one thread at a time: any call may write the context's error message
 * (a graph's passes report to the graph's context), and a session run may
 * record into the context's trace. For parallel work give each thread its
 * own context, graphs and sessions; sessions on different contexts run at
 * the same time safely (the kernel cache on disk is shared safely). One
 * session entered by a second thread while a run is in progress refuses
 * that call with LOOM_STATUS_BUSY, without touching the context (it
 * belongs to the running thread), and the first run completes correctly.
 * Tensors belong to no context: one may be read by several runs at once,
 * but not written while another run reads it.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shared library is built with hidden visibility: the names declared
 * here are its exported API, and nothing else. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_STRING "0.1.0"

/* Largest tensor rank Loom handles. */
#define LOOM_MAX_RANK 8

typedef enum loom_status {
  LOOM_STATUS_OK = 0,
  LOOM_STATUS_INVALID_ARGUMENT, /* NULL handle, bad value, unknown name */
  LOOM_STATUS_SHAPE_MISMATCH,   /* shapes that cannot go together */
  LOOM_STATUS_DTYPE_MISMATCH,   /* dtypes that cannot go together */
  LOOM_STATUS_UNSUPPORTED,      /* valid, but not implemented here */
  LOOM_STATUS_OUT_OF_MEMORY,
  LOOM_STATUS_IO,               /* a file could not be read or written */
  LOOM_STATUS_PARSE,            /* malformed text or file contents */
  LOOM_STATUS_OUT_OF_RANGE,     /* an index outside its tensor */
  LOOM_STATUS_INTERNAL,         /* a bug in Loom: please report */
  LOOM_STATUS_BUSY,             /* the session is running on another thread */
  LOOM_STATUS_COUNT             /* not a status: append new ones above */
} loom_status;

typedef enum loom_dtype {
  LOOM_DTYPE_F32 = 0,
  LOOM_DTYPE_F64,
  LOOM_DTYPE_F16,
  LOOM_DTYPE_BF16,
  LOOM_DTYPE_I32,
  LOOM_DTYPE_I64,
  LOOM_DTYPE_BOOL, /* one byte, 0 or 1 */
  LOOM_DTYPE_U8,
  LOOM_DTYPE_COUNT
} loom_dtype;

/*
 * The op list: every op Loom knows, primitive or composite. X(ENUM, name)
 * expands to the enum below and to the op table in src/ops; an op missing
 * its definition there is a link error. Attributes per op: docs/OPS.md.
 *
 * Append-only: an op's value is its position here, and callers keep it
 * (in binaries, saved values, bindings). A new op goes at the END of the
 * list, whatever its kind; the grouping below is history, and ops are
 * grouped by class only in docs/OPS.md and `loom ops`. src/core/abi.c pins
 * every value and LOOM_OP_COUNT: an op inserted in the middle fails the
 * build there, and a new op at the end gets its pin added.
 */
#define LOOM_OP_LIST(X)                                                        \
  /* element-wise unary */                                                     \
  X(NEG, neg) X(ABS, abs) X(SIGN, sign) X(EXP, exp) X(LOG, log) X(SQRT, sqrt)  \
  X(RSQRT, rsqrt) X(RECIPROCAL, reciprocal) X(TANH, tanh) X(SIGMOID, sigmoid)  \
  X(RELU, relu) X(ERF, erf) X(SIN, sin) X(COS, cos)                            \
  /* element-wise binary, NumPy broadcasting */                                \
  X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div) X(POW, pow)                  \
  X(MAXIMUM, maximum) X(MINIMUM, minimum)                                      \
  X(EQ, eq) X(NE, ne) X(LT, lt) X(LE, le) X(GT, gt) X(GE, ge)                  \
  X(SELECT, select) X(CAST, cast)                                              \
  /* reductions */                                                             \
  X(REDUCE_SUM, reduce_sum) X(REDUCE_MAX, reduce_max)                          \
  X(REDUCE_MIN, reduce_min)                                                    \
  /* layout */                                                                 \
  X(RESHAPE, reshape) X(TRANSPOSE, transpose) X(BROADCAST_TO, broadcast_to)    \
  X(SLICE, slice) X(CONCAT, concat) X(PAD, pad)                                \
  /* indexing and sources */                                                   \
  X(GATHER, gather) X(SCATTER_ADD, scatter_add) X(IOTA, iota)                  \
  X(CONSTANT, constant)                                                        \
  /* compute-intensive */                                                      \
  X(MATMUL, matmul)                                                            \
  X(FLASH_ATTENTION, flash_attention)                                          \
  X(FLASH_ATTENTION_GRAD, flash_attention_grad)                                \
  /* random */                                                                 \
  X(DROPOUT, dropout) X(DROPOUT_MASK, dropout_mask)                            \
  /* composites: lowered to the primitives above by the decompose pass */      \
  X(REDUCE_MEAN, reduce_mean) X(SOFTMAX, softmax)                              \
  X(LOG_SOFTMAX, log_softmax) X(LAYER_NORM, layer_norm)                        \
  X(RMS_NORM, rms_norm) X(GELU, gelu) X(SILU, silu)                            \
  X(CROSS_ENTROPY, cross_entropy) X(LINEAR, linear) X(ATTENTION, attention)    \
  X(ADAMW, adamw)                                                              \
  /* communication (docs/PARALLEL.md): a global form over every member of a  \
   * group, or one member's per-device form, told apart by `member` */       \
  X(ALL_REDUCE, all_reduce) X(ALL_GATHER, all_gather)                          \
  X(REDUCE_SCATTER, reduce_scatter) X(ALL_TO_ALL, all_to_all)                  \
  X(BROADCAST, broadcast) X(TRANSFER, transfer)                               \
  /* convolutions and pooling (docs/OPS.md, "Windows") */                    \
  X(CONV, conv) X(CONV_TRANSPOSE, conv_transpose)                              \
  X(CONV_GRAD_WEIGHT, conv_grad_weight) X(MAX_POOL, max_pool)                  \
  X(AVG_POOL, avg_pool) X(MAX_POOL_GRAD, max_pool_grad)                        \
  X(AVG_POOL_GRAD, avg_pool_grad)

typedef enum loom_op {
#define LOOM_X_ENUM(NAME, name) LOOM_OP_##NAME,
  LOOM_OP_LIST(LOOM_X_ENUM)
#undef LOOM_X_ENUM
  LOOM_OP_COUNT
} loom_op;

/* ---- session modes ------------------------------------------------------
 * Each mode is one list, X(ENUM, name, help) with SEP between entries,
 * expanded into its enum here, its names table (src/core/modes.c), the
 * known-names string of messages (LOOM_*_NAMES) and the command line's
 * --help lines. The first entry is the default: value 0, what zeroed
 * options mean. Append-only, like every public enum (see the top). */

/* How the cpu backend turns a graph into code (the ref backend ignores
 * it). */
#define LOOM_FUSION_MODE_LIST(X, SEP)                                          \
  X(STITCH, stitch, "stitching fusion (default)") SEP                          \
  X(LOOP, loop, "XLA-style loop fusion") SEP                                   \
  X(NONE, none, "generated code, one kernel per primitive") SEP                \
  X(EAGER, eager, "no code generation, one C loop per op")

/* What becomes of attention ops on the cpu backend (ref decomposes). */
#define LOOM_ATTENTION_MODE_LIST(X, SEP)                                       \
  X(FLASH, flash, "fused flash-attention kernels, fwd and bwd (default)") SEP  \
  X(DECOMPOSED, decomposed, "its primitives, fused like any others") SEP    \
  X(AUTO, auto, "flash or decomposed per op, as the cost model predicts")

/* With flash attention and dropout, where the random numbers come from.
 * The masks, and so the results, are the same bit for bit
 * (docs/DROPOUT.md). */
#define LOOM_RNG_PLACEMENT_LIST(X, SEP)                                        \
  X(AUTO, auto, "a performance model picks per op (default)") SEP              \
  X(FUSED, fused, "inside the attention kernels") SEP                          \
  X(OVERLAP, overlap, "a bitmask made by a worker beside earlier GEMMs") SEP   \
  X(SEQUENTIAL, sequential, "a bitmask made just before attention")

/* How GPU backends multiply f32 matrices (cuBLAS compute types; the cpu
 * and ref backends always compute in f32). Accumulation is f32 in every
 * mode; tf32 and bf16 round the operands. */
#define LOOM_GEMM_PRECISION_LIST(X, SEP)                                       \
  X(F32, f32, "f32 products, f32 accumulation (default)") SEP                 \
  X(TF32, tf32, "operands rounded to tf32, f32 accumulation") SEP              \
  X(BF16, bf16, "operands rounded to bf16, f32 accumulation")

#define LOOM_X_MODE_NAME(ENUM, name, help) #name
/* "stitch, loop, none, eager" and the like: string literals. */
#define LOOM_FUSION_MODE_NAMES LOOM_FUSION_MODE_LIST(LOOM_X_MODE_NAME, ", ")
#define LOOM_ATTENTION_MODE_NAMES                                              \
  LOOM_ATTENTION_MODE_LIST(LOOM_X_MODE_NAME, ", ")
#define LOOM_RNG_PLACEMENT_NAMES LOOM_RNG_PLACEMENT_LIST(LOOM_X_MODE_NAME, ", ")
#define LOOM_GEMM_PRECISION_NAMES LOOM_GEMM_PRECISION_LIST(LOOM_X_MODE_NAME, ", ")

typedef enum loom_fusion_mode {
#define LOOM_X_ENUM(ENUM, name, help) LOOM_FUSION_##ENUM,
  LOOM_FUSION_MODE_LIST(LOOM_X_ENUM, )
#undef LOOM_X_ENUM
  LOOM_FUSION_COUNT
} loom_fusion_mode;

typedef enum loom_attention_mode {
#define LOOM_X_ENUM(ENUM, name, help) LOOM_ATTENTION_##ENUM,
  LOOM_ATTENTION_MODE_LIST(LOOM_X_ENUM, )
#undef LOOM_X_ENUM
  LOOM_ATTENTION_COUNT
} loom_attention_mode;

typedef enum loom_rng_placement {
#define LOOM_X_ENUM(ENUM, name, help) LOOM_RNG_##ENUM,
  LOOM_RNG_PLACEMENT_LIST(LOOM_X_ENUM, )
#undef LOOM_X_ENUM
  LOOM_RNG_COUNT
} loom_rng_placement;

typedef enum loom_gemm_precision {
#define LOOM_X_ENUM(ENUM, name, help) LOOM_GEMM_##ENUM,
  LOOM_GEMM_PRECISION_LIST(LOOM_X_ENUM, )
#undef LOOM_X_ENUM
  LOOM_GEMM_COUNT
} loom_gemm_precision;

/* A value in a graph (an input, a parameter or an op's output). */
typedef int32_t loom_value;
#define LOOM_VALUE_NONE ((loom_value)-1)

typedef struct loom_ctx loom_ctx;
typedef struct loom_graph loom_graph;
typedef struct loom_tensor loom_tensor;
typedef struct loom_session loom_session;

/* ---- context ------------------------------------------------------------ */

/* Creates a context: owns the error message and the settings. */
loom_status loom_ctx_new(loom_ctx **out);
/* Frees a context (NULL is fine). */
void loom_ctx_free(loom_ctx *ctx);
/* The message of the last failed call on this context ("" if none). */
const char *loom_ctx_error(const loom_ctx *ctx);
/* Sets the number of CPU threads (0 = all cores). */
loom_status loom_ctx_set_threads(loom_ctx *ctx, int32_t n_threads);
/* A timeline of runs, as Chrome trace JSON (chrome://tracing,
 * ui.perfetto.dev): after _begin, every session run on this context
 * records its steps (generated kernels, GEMMs, eager nodes) on the main
 * lane and concurrent tasks (an overlapped dropout mask) on worker lanes.
 * _end writes what was recorded to path, replacing it atomically, and
 * stops recording; _begin while recording starts over. Files are written
 * through a fresh temporary file and rename, and only a regular, writable
 * file is replaced: a symlink, device, FIFO or read-only file at path is an
 * error (so are _save_npy's targets). Error messages escape control bytes. */
loom_status loom_ctx_trace_begin(loom_ctx *ctx);
loom_status loom_ctx_trace_end(loom_ctx *ctx, const char *path);
/* The number of CPU threads the backends use. */
int32_t loom_ctx_threads(const loom_ctx *ctx);

/* A short name for a status ("ok", "invalid argument", ...). */
const char *loom_status_name(loom_status s);
/* The library version, "MAJOR.MINOR.PATCH". */
const char *loom_version(void);

/* ---- dtypes and ops ----------------------------------------------------- */

/* Bytes per element; 0 for an invalid dtype. */
size_t loom_dtype_size(loom_dtype dt);
/* Text name ("f32", "bf16", ...); NULL for an invalid dtype. */
const char *loom_dtype_name(loom_dtype dt);
/* Parses a dtype name; LOOM_STATUS_INVALID_ARGUMENT if unknown. */
loom_status loom_dtype_from_name(const char *name, loom_dtype *out);
/* The op's text name ("add", "layer_norm", ...); NULL if out of range. */
const char *loom_op_name(loom_op op);
/* Looks an op up by its text name. */
loom_status loom_op_from_name(const char *name, loom_op *out);
/* True for composite ops (lowered to primitives before execution). */
bool loom_op_is_composite(loom_op op);

/* A mode's name ("stitch", "flash", "overlap", ...); NULL if out of range. */
const char *loom_fusion_mode_name(loom_fusion_mode m);
const char *loom_attention_mode_name(loom_attention_mode m);
const char *loom_rng_placement_name(loom_rng_placement p);
/* Parses a mode name; LOOM_STATUS_INVALID_ARGUMENT if unknown (the known
 * ones: LOOM_*_NAMES above). */
loom_status loom_fusion_mode_from_name(const char *name, loom_fusion_mode *out);
loom_status loom_attention_mode_from_name(const char *name,
                                          loom_attention_mode *out);
loom_status loom_rng_placement_from_name(const char *name,
                                         loom_rng_placement *out);
const char *loom_gemm_precision_name(loom_gemm_precision p);
loom_status loom_gemm_precision_from_name(const char *name,
                                          loom_gemm_precision *out);

/* ---- tensors (host memory) ---------------------------------------------- */

/* Allocates a zero-filled contiguous tensor. */
loom_status loom_tensor_new(loom_ctx *ctx, loom_dtype dt, int32_t rank,
                            const int64_t *shape, loom_tensor **out);
/* Wraps caller memory (not copied, not freed) as a contiguous tensor. */
loom_status loom_tensor_wrap(loom_ctx *ctx, loom_dtype dt, int32_t rank,
                             const int64_t *shape, void *data,
                             loom_tensor **out);
/* Frees a tensor (and its data, unless wrapped); NULL is fine. */
void loom_tensor_free(loom_tensor *t);
/* Frees a buffer Loom returned (loom_graph_print's text, ...); NULL is fine. */
void loom_free(void *p);
/* Pointer to the first element. */
void *loom_tensor_data(const loom_tensor *t);
loom_dtype loom_tensor_dtype(const loom_tensor *t);
int32_t loom_tensor_rank(const loom_tensor *t);
/* Extent of dimension i (i in [0, rank)). */
int64_t loom_tensor_dim(const loom_tensor *t, int32_t i);
/* Number of elements. */
int64_t loom_tensor_numel(const loom_tensor *t);
/* Reads a .npy file (little-endian, C order) into a new tensor. */
loom_status loom_tensor_load_npy(loom_ctx *ctx, const char *path,
                                 loom_tensor **out);
/* Writes a tensor as a .npy file. */
loom_status loom_tensor_save_npy(loom_ctx *ctx, const loom_tensor *t,
                                 const char *path);

/* ---- graphs ------------------------------------------------------------- */

typedef enum loom_attr_kind {
  LOOM_ATTR_INT = 0, /* also bools and dtypes */
  LOOM_ATTR_FLOAT,
  LOOM_ATTR_INTS
} loom_attr_kind;

/* A named attribute given to loom_graph_op (see docs/OPS.md per op). */
typedef struct loom_attr {
  const char *name;
  loom_attr_kind kind;
  int64_t i;
  double f;
  int32_t n_ints;
  const int64_t *ints;
} loom_attr;

/* Creates an empty graph. */
loom_status loom_graph_new(loom_ctx *ctx, loom_graph **out);
/* Frees a graph; NULL is fine. */
void loom_graph_free(loom_graph *g);
/* Adds a data input. */
loom_status loom_graph_input(loom_graph *g, const char *name, loom_dtype dt,
                             int32_t rank, const int64_t *shape,
                             loom_value *out);
/* Adds a trainable parameter (an input that training updates). */
loom_status loom_graph_param(loom_graph *g, const char *name, loom_dtype dt,
                             int32_t rank, const int64_t *shape,
                             loom_value *out);
/* Adds an op with one output; infers and checks its shape. */
loom_status loom_graph_op(loom_graph *g, loom_op op, int32_t n_inputs,
                          const loom_value *inputs, int32_t n_attrs,
                          const loom_attr *attrs, loom_value *out);
/* Adds an op with several outputs (adamw); n_outputs must match the op. */
loom_status loom_graph_op_multi(loom_graph *g, loom_op op, int32_t n_inputs,
                                const loom_value *inputs, int32_t n_attrs,
                                const loom_attr *attrs, int32_t n_outputs,
                                loom_value *outputs);
/* Marks a value as a named graph output. */
loom_status loom_graph_output(loom_graph *g, const char *name, loom_value v);
/* Number of graph inputs (data inputs and parameters, declaration order). */
int32_t loom_graph_num_inputs(const loom_graph *g);
int32_t loom_graph_num_outputs(const loom_graph *g);
/* The i-th input's value, name and whether it is a parameter. */
loom_value loom_graph_input_value(const loom_graph *g, int32_t i);
const char *loom_graph_input_name(const loom_graph *g, int32_t i);
bool loom_graph_input_is_param(const loom_graph *g, int32_t i);
loom_value loom_graph_output_value(const loom_graph *g, int32_t i);
const char *loom_graph_output_name(const loom_graph *g, int32_t i);
/* A value's dtype, rank and shape (shape may be NULL). */
loom_status loom_graph_value_type(const loom_graph *g, loom_value v,
                                  loom_dtype *dt, int32_t *rank,
                                  int64_t *shape);
/* Checks the graph's invariants; a failure names the node. */
loom_status loom_graph_verify(const loom_graph *g);
/* A new graph with composite ops lowered to primitives (same inputs and
 * outputs, by name and order; other value ids differ). */
loom_status loom_graph_decompose(const loom_graph *g, loom_graph **out);
/*
 * Reverse-mode autodiff: appends to g the nodes computing d(loss)/d(wrt[i])
 * for a scalar loss, and writes the gradient values to grads.
 */
loom_status loom_graph_grad(loom_graph *g, loom_value loss, int32_t n_wrt,
                            const loom_value *wrt, loom_value *grads);

/* ---- text IR ------------------------------------------------------------ */

/* Prints a graph as text IR; release *out with loom_free. */
loom_status loom_graph_print(const loom_graph *g, char **out);
/* Parses text IR; errors carry "line:column". */
loom_status loom_graph_parse(loom_ctx *ctx, const char *text,
                             loom_graph **out);
/* Reads and parses a text IR file. */
loom_status loom_graph_load(loom_ctx *ctx, const char *path, loom_graph **out);

/* ---- sessions: a graph prepared for one backend ------------------------- */

typedef struct loom_session_options {
  /* sizeof(loom_session_options) as the caller was compiled: set it with
   * LOOM_SESSION_OPTIONS(...) or loom_session_options_init. loom_session_new
   * reads only the fields it covers (a caller built against an older
   * loom.h gets the defaults of fields added since) and refuses 0 or a
   * size larger than it knows. */
  size_t struct_size;
  const char *backend; /* "cpu" (default, NULL) or "ref" */
  loom_fusion_mode fusion;       /* LOOM_FUSION_MODE_LIST */
  loom_attention_mode attention; /* LOOM_ATTENTION_MODE_LIST */
  loom_rng_placement rng;        /* LOOM_RNG_PLACEMENT_LIST */
  loom_gemm_precision gemm;      /* LOOM_GEMM_PRECISION_LIST */
} loom_session_options;

/* Options with their size set and every other field at its default, then
 * the given fields: LOOM_SESSION_OPTIONS(.backend = "ref"). An expression
 * (a compound literal), so &LOOM_SESSION_OPTIONS(...) may be passed as is. */
#define LOOM_SESSION_OPTIONS(...)                                              \
  ((loom_session_options){.struct_size = sizeof(loom_session_options),         \
                          __VA_ARGS__})
/* The same for a variable (and from C++): sets the size and defaults. */
static inline void loom_session_options_init(loom_session_options *o) {
  /* every field, in order (-Wextra flags one left out) */
  loom_session_options defaults = {sizeof(loom_session_options), NULL,
                                   LOOM_FUSION_STITCH, LOOM_ATTENTION_FLASH,
                                   LOOM_RNG_AUTO, LOOM_GEMM_F32};
  *o = defaults;
}

/* What preparing a session did. */
typedef struct loom_session_stats {
  int32_t n_primitive_ops; /* after decomposition */
  int32_t n_memory_ops;    /* memory-intensive primitives among them */
  int32_t n_kernels;       /* generated kernels */
  int32_t n_epilogues;     /* of which run inside a GEMM, on its product's rows */
  int32_t n_gemm;          /* GEMM library calls */
  int32_t n_eager;         /* nodes run one at a time without generated code */
  int64_t modeled_bytes;   /* global memory traffic the cost model predicts */
  int64_t peak_bytes;      /* the memory plan's arena */
  double compile_seconds;  /* fusion, code generation and compilation */
  bool cache_hit;          /* the compiled code came from the kernel cache */
  int32_t n_fallback;      /* nodes run one at a time on the reference
                            * kernels: the backend does not support them */
  int32_t n_async_comm;    /* comm ops that can run while later compute does
                            * (when a parallel plan's run overlaps them) */
  double modeled_seconds;  /* the cost model's time of the whole plan */
  double gemm_flops;       /* flops of the GEMM library calls of one run */
  /* Filled when asked (they change with loom_session_freeze_input and the
   * first run after it): */
  int32_t n_frozen_inputs; /* inputs bound with loom_session_freeze_input */
  int32_t n_packed;        /* GEMM operands and conv weights kept packed across runs */
  int64_t packed_bytes;    /* their bytes */
} loom_session_stats;

/* Decomposes, verifies and prepares a graph to run: on cpu, fuses it and
 * compiles the generated kernels (per opts->fusion), then plans memory.
 * opts NULL: every default. */
loom_status loom_session_new(loom_ctx *ctx, const loom_graph *g,
                             const loom_session_options *opts,
                             loom_session **out);
/* Frees a session; NULL is fine. */
void loom_session_free(loom_session *s);
/*
 * Runs the graph. inputs: one tensor per graph input in declaration order.
 * outputs[i] == NULL: a new tensor is allocated (caller frees it); else it
 * must match the output's dtype and shape and is written. Outputs are written
 * as if after all computation, so an output may alias an input (in-place
 * update); an output whose tensor is exactly an input's may be computed
 * there directly, where nothing still reads the old values (the same
 * results, without a copy).
 * One run at a time per session: a call made while another thread is
 * inside loom_session_run on the same session returns LOOM_STATUS_BUSY at
 * once, writing nothing (no outputs, no message on the context).
 */
loom_status loom_session_run(loom_session *s, int32_t n_inputs,
                             const loom_tensor *const *inputs,
                             int32_t n_outputs, loom_tensor **outputs);
/*
 * Frozen inputs: weights that stay the same from run to run. Binds graph
 * input `index` (declaration order) to a copy of t that the session owns,
 * and later runs read that copy: they pass NULL in the input's place (a
 * tensor there is refused with LOOM_STATUS_INVALID_ARGUMENT, naming the
 * input, since the session would silently ignore it). Work derived from
 * frozen data is kept across runs: the cpu backend packs every GEMM
 * operand computed from frozen inputs alone once, on the next run, into
 * the layout its fastest kernel reads, and reuses it. Calling again
 * rebinds (copies the new data and drops all that was derived from the
 * old); t NULL unfreezes (runs pass the input again). The caller's t may
 * change or be freed after the call. Errors: an index out of range, a
 * dtype or shape other than the input's, a tensor that is not contiguous;
 * LOOM_STATUS_BUSY while a run is in progress on another thread.
 */
loom_status loom_session_freeze_input(loom_session *s, int32_t index,
                                      const loom_tensor *t);
/* True if graph input `index` is frozen. */
bool loom_session_input_frozen(const loom_session *s, int32_t index);
/* Peak bytes of the session's memory plan (its one arena). */
int64_t loom_session_peak_bytes(const loom_session *s);
/* What preparing the session did (kernels, bytes, compile time). The
 * struct may gain fields at the end, so the call passes the caller's size
 * (the macro does): an older caller gets the fields it knows, a newer one
 * zeros in fields this library does not fill. */
loom_status loom_session_get_stats_sized(const loom_session *s,
                                         loom_session_stats *out,
                                         size_t out_size);
#define loom_session_get_stats(s, out)                                         \
  loom_session_get_stats_sized((s), (out), sizeof *(out))
/* A warning from preparing the session ("" if none), e.g. that no C
 * compiler was found and the graph runs eagerly instead. */
const char *loom_session_warning(const loom_session *s);

/* What a session prepared, as text for reports (`loom compile`). */
typedef enum loom_session_artifact {
  LOOM_ARTIFACT_GRAPH = 0, /* the decomposed, simplified graph (text IR) */
  LOOM_ARTIFACT_PROGRAM,   /* the fused program's listing: its steps */
  LOOM_ARTIFACT_KERNELS,   /* its kernels in the kernel IR */
  LOOM_ARTIFACT_SOURCE,    /* the generated source ("" when no kernels) */
  LOOM_ARTIFACT_DOT,       /* the fused program as Graphviz DOT: a cluster per step */
  LOOM_ARTIFACT_COUNT
} loom_session_artifact;
/* *text (release with loom_free) describes one artifact; the backend
 * writes all but the graph. LOOM_STATUS_UNSUPPORTED (with a message) when
 * the session has no such artifact (ref, eager: no program). */
loom_status loom_session_describe(const loom_session *s,
                                  loom_session_artifact what, char **text);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* LOOM_H */

/*
 * The kernel IR: what fusion produces and code generators consume, so that
 * neither depends on the other (DESIGN.md, "A kernel IR that serves every
 * target"). This comment is the specification: the interpreter
 * (kernel/interp.c) implements it literally and is the oracle every code
 * generator is tested against, bit for bit.
 *
 * ---- Structure ------------------------------------------------------------
 *
 * A kernel is one launch. It holds one or more parts: pieces of work over
 * their own iteration domains (horizontal fusion, e.g. AdamW over every
 * parameter, one part each). Every part has a phase; parts run phase by
 * phase (parts are stored sorted by phase): every tile of every part of
 * phase k, and the column-reduction combines of those parts, complete
 * before any part of phase k+1 starts. Parts of one phase are independent
 * (none reads what another writes) and may run concurrently. A later phase
 * may LOAD what an earlier one wrote, output or temp (a column-reduction
 * temp, say: a batch-norm mean, or a loss sum that is then scaled); no
 * other load reads an output argument.
 *
 * A part iterates over a domain split in two:
 *
 *   P  the parallel dims (p_shape, p_rank >= 0): rows, row-major order;
 *   R  the row dims (r_shape, r_rank >= 0): iterated inside one row.
 *
 * rows = prod(p_shape), row_len = prod(r_shape) (an empty product is 1).
 * Tiles are fixed ranges of rows: tile t holds rows
 * [t*rows_per_tile, min(rows, (t+1)*rows_per_tile)). A tile runs on one
 * thread, its rows in increasing order; which thread runs which tile never
 * changes a result, so results are bitwise identical for any thread count.
 *
 * For every row, the part runs its stages in order. A ROW stage loops over
 * the row's elements in increasing flat r index (row-major over r_shape)
 * and, per element, evaluates its outputs' expressions; a SCALAR stage runs
 * once per row with every r coordinate 0. Each stage output (loom_kout)
 * sends one expression's value to one destination:
 *
 *   STORE      an output argument, element map(p, r). (ROW, SCALAR)
 *   SCRATCH    scratch row `target` at the element's flat r: per thread,
 *              cache resident (the CPU analogue of GPU shared memory),
 *              read by later stages of the same row. f32 only. (ROW)
 *   REG        per-row register `target` := the value. (SCALAR)
 *   ROW_REDUCE per-row register `target` := the row reduced (see below).
 *              f32 only. (ROW)
 *   COL_REDUCE an output or temp argument reduced over rows: per-tile
 *              partials, combined in tile order (see below). f32 only.
 *              (ROW, SCALAR)
 *
 * Registers and scratch rows belong to the part and hold values of the
 * current row only: a stage reads only registers and scratch rows written
 * by an earlier stage of its part (in the same row). Every register is
 * written by exactly one output of its part; every output argument by
 * exactly one output of the kernel, or by STOREs of one phase whose maps
 * have the same strides and other bases (each writing its own elements:
 * the segments of a loop, fusion/lower.c);
 * every temp argument by exactly one COL_REDUCE; outputs and temps are
 * loaded only by parts of later phases.
 *
 * ---- Maps -----------------------------------------------------------------
 *
 * Every memory access and every index is an affine map of the iteration
 * coordinates: map(p, r) = base + sum_i p[i]*map.p[i] + sum_j r[j]*map.r[j]
 * (in elements of the argument; entries past p_rank / r_rank are 0).
 * Broadcasts are zero strides, transposes and slices at a kernel's inputs
 * are strides and bases, iota is an INDEX.
 *
 * ---- Numeric semantics ----------------------------------------------------
 *
 * Every expression has a value of its dtype: f32 values are floats, f64
 * doubles, integer dtypes (i32, i64, u8, bool) integers in the dtype's
 * range (bool is 0 or 1). The rule is "compute in double, round to the
 * expression's dtype" once per expression, exactly as the reference
 * executor computes once per graph node, so an expression DAG that mirrors
 * graph nodes reproduces the reference bit for bit (reductions and f32
 * exp/tanh/sigmoid/log aside, see OP below).
 * "Convert x to dtype" below means loom_store's conversion: to f32 round
 * to nearest; to an integer dtype truncate toward zero and saturate (NaN
 * gives 0); to bool x != 0.
 *
 *   LOAD    the argument's element at map(p, r); dtype == the arg's dtype.
 *           With an operand (n_a 1, a[0] bool) the load is guarded: where
 *           a[0] is 0 it reads nothing and its value is 0 (a concat or pad
 *           reading a piece by index: the guard states where the map lies
 *           in the argument, so the verifier does not bound the map).
 *   CONST   c converted to dtype. (An f64 CONST is an exact double operand,
 *           e.g. dropout's 1 - p.)
 *   INDEX   the integer map(p, r) converted to dtype.
 *   OP      element-wise op `op` of a[0..n_a):
 *           - SELECT (n_a 3): a[0] (bool) ? a[1] : a[2], converted to dtype;
 *           - CAST (n_a 1): a[0] converted to dtype (integer to integer is
 *             exact, then saturated);
 *           - every operand of an integer dtype and op != POW: the exact
 *             int64 result (saturating add/sub/mul/neg/abs, div truncating
 *             with x/0 = 0, comparisons 0/1), saturated to dtype, as the
 *             reference does (ops/elementwise.c);
 *           - EXP, TANH, SIGMOID, LOG or ERF of an f32 operand with an f32
 *             result: the kernel IR's own f32 functions lm_expf, lm_tanhf,
 *             lm_sigmoidf, lm_logf, lm_erff (kernel/kmath.h: float
 *             arithmetic and fmaf only, within 1, 1, 2, 1 and 2 ulp of the
 *             correctly rounded value), which
 *             generated code must reproduce bit for bit (the C generator
 *             pastes kmath.h's text into its prelude). So such an
 *             expression may differ from the reference executor (libm in
 *             double, rounded) by those ulps;
 *           - otherwise: operands converted to double, the op table's
 *             scalar1/scalar2 applied in double, the result converted to
 *             dtype (comparisons give bool).
 *           A generator may use float arithmetic where that is bitwise
 *           identical (+, -, *, /, sqrt of f32 operands rounded to f32 are;
 *           pow is not: call the double function).
 *   REG     the register's value; dtype == the dtype of its writer's expr.
 *   SCRATCH the scratch row's element at the current flat r (f32).
 *   KEEP    dropout's keep bit (bool): counter position
 *           j = (uint64)a[0] + (n_a == 2 ? (uint64)a[1] : 0) + offset,
 *           wrapping mod 2^64 (a[] integer exprs: the logical flat index,
 *           the op's runtime base); 1 iff loom_dropout_keep(seed, j,
 *           threshold) (rng/philox.h). A dropout lowers to
 *           select(keep, x / f64(1 - p), 0), the reference's formula.
 *
 * Row reductions (ROW_REDUCE, combine ADD, MAXIMUM or MINIMUM) run in
 * W = sched.vector_width lanes, accumulated in f32: every combine is
 * rounded to f32. Lane l starts at the identity (+0.0, -inf, +inf) and
 * takes, in increasing r, the elements whose flat r index is congruent to
 * l mod W:
 *   acc_l = f32(combine(acc_l, v_r)).
 * The row's result, into the register, is the left fold over lanes in
 * lane order, each step rounded to f32 likewise:
 *   res = combine(...combine(combine(acc_0, acc_1), acc_2)..., acc_{W-1}).
 * combine is the op table's scalar2 (ADD: a + b; MAXIMUM/MINIMUM:
 * NaN-propagating, combine(acc, v) with acc first). An f32 add rounded
 * once is float addition (double holds the exact sum of two floats), and
 * max and min are exact, so a generator adds and compares in float: one
 * vector add per W elements, where double lanes cost a conversion and two
 * adds. The order is fixed by W and the row length (never by threads);
 * the error of a sum is that of W interleaved f32 sums of row_len / W
 * terms each (the reference sums in double; docs/FUSION.md).
 *
 * Column reductions (COL_REDUCE into argument A with numel N): every tile
 * owns a partial of N doubles, all at the identity. The tile's rows, in
 * order (and in a ROW stage each row's elements in increasing r), do
 *   partial[map(p, r)] = combine(partial[map(p, r)], (double)v).
 * When all tiles of the part are done, for every e in [0, N):
 *   A[e] = f32(combine(...combine(identity, partial_0[e])..., partial_{T-1}[e]))
 * (T = the part's tile count; with no tiles A[e] is the identity). Every
 * element of A is written, so A needs no initialisation.
 *
 * ---- Workspace ------------------------------------------------------------
 *
 * The runtime passes one workspace of loom_kernel_workspace_bytes(k,
 * n_threads) bytes, 64-byte aligned. Layout, every block starting on a
 * 64-byte boundary (loom_kernel_workspace_layout computes the offsets):
 *   1. temps: for every temp argument, in argument order, numel elements
 *      of its dtype (the argument's memory: args[i] is not used for it);
 *   2. partials: for every COL_REDUCE output, in kernel order (parts,
 *      stages, outputs), tiles(part) * numel(target) doubles; tile t's
 *      element e at index t*numel + e;
 *   3. scratch: n_threads blocks of scratch_thread_bytes each; in the
 *      block of the thread running a tile, scratch row s of the tile's part
 *      starts at float index s * loom_kpart_scratch_stride(part).
 * Offsets 1 and 2 do not depend on the thread count.
 */
#ifndef LOOM_KERNEL_KERNEL_H
#define LOOM_KERNEL_KERNEL_H

#include "ir/graph.h"

/* An affine map from the iteration (p, r) to an element offset or index. */
typedef struct loom_kmap {
  int64_t base;
  int64_t p[LOOM_MAX_RANK];
  int64_t r[LOOM_MAX_RANK];
} loom_kmap;

/* A kernel argument: a buffer the runtime binds (a graph value), or a
 * temp (a kernel-internal buffer in the workspace; value names the graph
 * value it holds, for reports). */
typedef struct loom_karg {
  int32_t value; /* graph value id whose buffer this is */
  loom_dtype dtype;
  bool is_output; /* written by the kernel (STORE or COL_REDUCE) */
  bool temp;      /* lives in the workspace; never is_output */
  int64_t numel;  /* elements of the buffer (bounds, COL_REDUCE extent) */
} loom_karg;

typedef enum loom_kexpr_kind {
  LOOM_KX_LOAD = 0, /* arg `arg` at map; guarded by a[0] when n_a == 1 */
  LOOM_KX_CONST,    /* constant c */
  LOOM_KX_INDEX,    /* the integer map(p, r) (iota, flat indices) */
  LOOM_KX_OP,       /* element-wise op `op` of a[0..n_a) (loom_op_def scalar fns) */
  LOOM_KX_REG,      /* per-row register `reg` */
  LOOM_KX_SCRATCH,  /* scratch row `scratch` at r */
  LOOM_KX_KEEP,     /* dropout keep bit at counter a[0] (+ a[1]) + offset */
  LOOM_KX_COUNT
} loom_kexpr_kind;

typedef struct loom_kexpr {
  loom_kexpr_kind kind;
  loom_dtype dtype; /* the value's dtype (what the graph value has) */
  loom_op op;       /* LOOM_KX_OP: an element-wise op, incl. select, cast */
  int32_t n_a;
  int32_t a[3];     /* operand expr ids (earlier in the kernel's expr list) */
  int32_t arg;      /* LOAD */
  loom_kmap map;    /* LOAD, INDEX */
  double c;         /* CONST */
  int32_t reg;      /* REG */
  int32_t scratch;  /* SCRATCH */
  uint64_t seed;    /* KEEP */
  uint64_t offset;  /* KEEP: added to the counter */
  uint64_t threshold; /* KEEP: loom_dropout_threshold(p) */
} loom_kexpr;

typedef enum loom_kdst_kind {
  LOOM_KDST_STORE = 0,
  LOOM_KDST_SCRATCH,
  LOOM_KDST_REG,
  LOOM_KDST_ROW_REDUCE,
  LOOM_KDST_COL_REDUCE,
  LOOM_KDST_COUNT
} loom_kdst_kind;

typedef struct loom_kout {
  loom_kdst_kind dst;
  int32_t expr;    /* the value to put there */
  int32_t target;  /* arg (STORE, COL_REDUCE), scratch id or reg id */
  loom_kmap map;   /* STORE and COL_REDUCE: where in the argument */
  loom_op combine; /* ROW_REDUCE, COL_REDUCE: LOOM_OP_ADD, MAXIMUM, MINIMUM */
} loom_kout;

typedef enum loom_kstage_kind {
  LOOM_KSTAGE_ROW = 0, /* loops over R */
  LOOM_KSTAGE_SCALAR   /* once per row */
} loom_kstage_kind;

typedef struct loom_kstage {
  loom_kstage_kind kind;
  int32_t n_out;
  loom_kout *out;
} loom_kstage;

/* How a part runs: chosen by the cost model (fusion/), refined by --tune. */
typedef struct loom_kschedule {
  int64_t rows_per_tile; /* >= 1 */
  int32_t vector_width;  /* lanes of R loops and row reductions: 1, 2, 4, 8, 16 */
  int32_t rows_per_block; /* short rows: this many rows run side by side, one
                           * per vector lane (the C generator; 0 or 1: row by
                           * row); changes no result */
} loom_kschedule;

typedef struct loom_kpart {
  int32_t p_rank, r_rank;
  int64_t p_shape[LOOM_MAX_RANK];
  int64_t r_shape[LOOM_MAX_RANK];
  int32_t n_stages;
  loom_kstage *stages;
  int32_t n_regs;    /* per-row registers */
  int32_t n_scratch; /* scratch rows (f32) of loom_kpart_scratch_stride floats */
  int32_t phase;     /* parts run phase by phase (see the top) */
  loom_kschedule sched;
} loom_kpart;

typedef struct loom_kernel {
  char name[48]; /* a C identifier, unique in its program */
  int32_t n_args;
  loom_karg *args;
  int32_t n_exprs;
  loom_kexpr *exprs; /* shared by all parts: a DAG in topological order */
  int32_t n_parts;
  loom_kpart *parts;
  int32_t n_nodes;   /* graph nodes this kernel computes (for reports) */
  int32_t *nodes;
} loom_kernel;

/*
 * The ABI of a generated kernel function:
 *   void NAME(void *const *args, void *workspace, int32_t n_threads);
 * args[i] is the base pointer of kernel argument i (unused for temps);
 * workspace holds loom_kernel_workspace_bytes(k, n_threads) bytes
 * (64-byte aligned; its contents on entry do not matter).
 */
typedef void (*loom_kernel_fn)(void *const *args, void *workspace,
                               int32_t n_threads);

/*
 * The row-range entry, NAME_rows, generated for kernels where
 * loom_kernel_has_rows_entry is true (one part, no column reductions, no
 * temps: every row is independent of every other):
 *   void NAME_rows(void *const *args, void *workspace, int32_t thread,
 *                  int64_t row_begin, int64_t row_end);
 * runs rows [row_begin, row_end) of the part, in order, on the calling
 * thread, with scratch block `thread` of a workspace sized for more than
 * `thread` threads. Any split of the rows into ranges gives the kernel's
 * results bit for bit (a GEMM runs its epilogue this way, block by block
 * as the rows of its product are computed).
 */
typedef void (*loom_kernel_rows_fn)(void *const *args, void *workspace, int32_t thread,
                                    int64_t row_begin, int64_t row_end);
bool loom_kernel_has_rows_entry(const loom_kernel *k);

/* Rows in part (product of p_shape), elements per row, and tiles. */
int64_t loom_kpart_rows(const loom_kpart *part);
int64_t loom_kpart_row_len(const loom_kpart *part);
int64_t loom_kpart_tiles(const loom_kpart *part);
/* Floats between scratch rows: row_len rounded up to a multiple of 16. */
int64_t loom_kpart_scratch_stride(const loom_kpart *part);

/* map(p, r) for coordinates p[0..p_rank), r[0..r_rank). */
static inline int64_t loom_kmap_at(const loom_kmap *m, int32_t p_rank,
                                   const int64_t *p, int32_t r_rank,
                                   const int64_t *r) {
  int64_t o = m->base;
  for (int32_t i = 0; i < p_rank; i++) o += p[i] * m->p[i];
  for (int32_t j = 0; j < r_rank; j++) o += r[j] * m->r[j];
  return o;
}

/* Byte offsets of the workspace's blocks (see "Workspace" above). */
typedef struct loom_kworkspace {
  int64_t *temp;     /* per argument: offset of a temp's block, -1 if not a temp */
  int64_t *partial;  /* per COL_REDUCE output in kernel order: its block */
  int32_t n_partial;
  int64_t scratch;   /* start of the scratch blocks */
  int64_t scratch_thread_bytes; /* bytes per thread (a multiple of 64) */
  int64_t total;     /* scratch + n_threads * scratch_thread_bytes */
} loom_kworkspace;

/* Computes the layout for n_threads (>= 1); free with _clear. */
loom_status loom_kernel_workspace_layout(loom_ctx *ctx, const loom_kernel *k,
                                         int32_t n_threads,
                                         loom_kworkspace *out);
void loom_kworkspace_clear(loom_kworkspace *w);
/* Workspace bytes: temps + column partials + per-thread scratch. */
int64_t loom_kernel_workspace_bytes(const loom_kernel *k, int32_t n_threads);

/* Releases a kernel's arrays (not k itself); k is left empty. */
void loom_kernel_clear(loom_kernel *k);
/* Checks every invariant stated above (operands earlier, ids and maps in
 * range, accesses in bounds, destinations valid for their stage kind,
 * reads after writes, one writer per register and output); INTERNAL with
 * a message naming the offending piece. */
loom_status loom_kernel_verify(loom_ctx *ctx, const loom_kernel *k);
/* A readable, stable dump of the kernel IR (for --dump-after and tests);
 * *out is malloc'ed. */
loom_status loom_kernel_print(loom_ctx *ctx, const loom_kernel *k, char **out);

/* Names for printing: "load", "store", "row_reduce", ... */
const char *loom_kexpr_kind_name(loom_kexpr_kind k);
const char *loom_kdst_kind_name(loom_kdst_kind k);

#endif

/*
 * Private to the C code generator (c_codegen.c, c_prelude.c, c_expr.c,
 * c_stage.c): the output buffer, what is known about a part while its
 * code is written, and where a stage body is being written.
 */
#ifndef LOOM_CODEGEN_C_INTERNAL_H
#define LOOM_CODEGEN_C_INTERNAL_H

#include "codegen/c_codegen.h"
#include "kernel/kernel.h"

#include "core/strbuf.h"

#include <stdarg.h>

/* ---- output buffer ------------------------------------------------------ */

/* The generated text and the current indentation (in levels of 2). */
typedef struct cg_buf {
  loom_strbuf buf;
  int indent;
} cg_buf;

static inline void put(cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void put(cg_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loom_strbuf_vput(&b->buf, fmt, ap);
  va_end(ap);
}
/* One indented line. */
static inline void line(cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void line(cg_buf *b, const char *fmt, ...) {
  put(b, "%*s", 2 * b->indent, "");
  va_list ap;
  va_start(ap, fmt);
  loom_strbuf_vput(&b->buf, fmt, ap);
  va_end(ap);
  put(b, "\n");
}

/* ---- the prelude and the fast paths (c_prelude.c) ------------------------ */

/* The helpers every kernel may use (lm_*), erf's coefficients included. */
void loom_cg_put_prelude(cg_buf *b);

/* Ops with a fast path (f32 results only): function and input range. */
typedef struct cg_fast {
  loom_op op;
  const char *fn;
  double lo, hi;
} cg_fast;
extern const cg_fast loom_cg_fast_table[];

/* Index into loom_cg_fast_table + 1 if expr e has a fast path, else 0. */
int8_t loom_cg_fast_kind(const loom_kernel *k, int32_t e);

/* Elements per chunk of a stage with fast ops or streamed stores (a
 * multiple of every W). */
#define CG_CHUNK LOOM_CODEGEN_CHUNK
/* A STORE into an f32 output of at least this many bytes, unit stride
 * along a part's one loop, goes through streaming (non-temporal) stores:
 * an output that large is not re-read from cache anyway, and the stores
 * then skip the read-for-ownership of every line (a third of the traffic
 * of a kernel that reads one tensor and writes one). A constant, not the
 * machine's cache size: it changes no result, only the traffic. */
#define CG_STREAM_MIN_BYTES ((int64_t)8 << 20)
/* So do the stores of every output of a kernel that writes at least this
 * many bytes in all (a horizontally fused AdamW writes three tensors per
 * parameter, most of them small): beyond a last-level cache's worth, what
 * it wrote first is evicted before anyone reads it. */
#define CG_STREAM_KERNEL_BYTES ((int64_t)32 << 20)
/* Software prefetch: a part's first stage to load a row of an argument of
 * at least CG_PREFETCH_MIN_BYTES (flat row stride, unit stride along the
 * one loop) prefetches, one line per block of the R loop, the same
 * elements CG_PREFETCH_AHEAD bytes of rows ahead (at least one row). The
 * hardware prefetchers stop at every 4 KiB page, which is a row of 1024
 * f32, and a stitched part spends most of a row's time on its later
 * stages, with nothing in flight; the prefetches keep the next rows
 * coming meanwhile. Hints only: the results are unchanged. */
#define CG_PREFETCH_MIN_BYTES ((int64_t)1 << 20)
#define CG_PREFETCH_AHEAD 4096
/* Rows at least this long get streamed stores (shorter ones would spend
 * their few lines on the aligned head and tail). */
#define CG_STREAM_MIN_ROW 64
/* cg_site.fast value of a KEEP over consecutive counters: its words come
 * from one Philox block per four elements, made before the chunk's loop. */
#define CG_KEEP_BLOCK 100
/* Rows at most this long may run in row blocks (loom_cg_row_block). */
#define CG_BLOCK_MAX_ROW 16

/* ---- parts and sites -------------------------------------------------------- */

/* The loop nest of a part's ROW stages: the R dims of extent > 1, each
 * merged into the previous one where every map of the part allows it
 * (stride[prev] == stride[j] * extent[j]), so the usual row is one loop. */
typedef struct cg_loops {
  int32_t n;
  int64_t extent[LOOM_MAX_RANK];
  int32_t dim[LOOM_MAX_RANK]; /* the innermost r dim of each loop: its stride */
} cg_loops;

typedef struct cg_part {
  const loom_kernel *k;
  const loom_kpart *part;
  int32_t index;
  cg_loops loops;
  bool need_pidx;     /* some map needs the p multi-index */
  uint8_t *reach;     /* scratch for reachability (n_exprs) */
  uint8_t *level;     /* per expr: 1 if it varies along R in this part */
  loom_dtype *reg_dt; /* per register: its writer's dtype */
  const uint8_t *tied; /* per argument: 1 if a run may put it in another's
                        * memory (loom_cg_tied_args); NULL: none */
} cg_part;

/* Where a stage body is being emitted. */
typedef struct cg_site {
  const cg_part *cp;
  int32_t stage;
  bool scalar;         /* SCALAR stage: every r is 0 */
  const char *idx[LOOM_MAX_RANK]; /* C names of the loop indices */
  const char *flat;    /* the flat r index */
  const char *lane;    /* the row-reduction lane */
  const int8_t *fast;  /* per expr: index into fast_table + 1, or 0 */
  int tmode;           /* how fast exprs are emitted (TM_*) */
  const uint8_t *stream; /* per stage output: 1 if its STORE goes through a
                          * chunk buffer so<o>[] and streaming stores */
  bool ivdep;            /* LM_IVDEP before the innermost loop */
  int32_t n_pf;          /* LOAD exprs whose rows ahead are prefetched */
  const int32_t *pf;     /* in the R loop (offset pf<e> ahead of b<e>) */
  int32_t block;         /* > 1: inside a block of this many rows, row row0 + rl
                          * (loom_cg_emit_row_blocks): registers reg<r>[rl],
                          * scratch bs<s>[r * block + rl] */
} cg_site;

/* Fast exprs in a chunked ROW stage: computed fast into t<e>[] with a
 * `bad` flag, recomputed exactly where flagged, then read back. */
enum { TM_NONE = 0, TM_FAST, TM_EXACT, TM_BUF };

/* ---- expressions (c_expr.c) ----------------------------------------------- */

/* The C type of dtype dt (NULL for dtypes generated C does not handle). */
const char *loom_cg_ctype(loom_dtype dt);
bool loom_cg_is_float(loom_dtype dt);
/* Writes `x` (a C expression of dtype from) converted to dtype to, as
 * loom_store converts (kernel.h, "Convert x to dtype"). */
void loom_cg_conv(cg_buf *b, const char *x, loom_dtype from, loom_dtype to);
/* Marks in seen every expr e depends on (e included). */
void loom_cg_mark_reach(const loom_kernel *k, int32_t e, uint8_t *seen);
/* As loom_cg_mark_reach, not looking past expressions with stop[i] set
 * (they are marked themselves). */
void loom_cg_mark_reach_stop(const loom_kernel *k, int32_t e, uint8_t *seen, const int8_t *stop);
/* True if m's p strides collapse to one stride over the flat row index
 * (row-major over the non-unit p dims); *stride gets it. */
bool loom_cg_p_flat(const loom_kmap *m, const loom_kpart *part, int64_t *stride);
/* The element offset of map m: its row base (named base) plus r terms. */
void loom_cg_put_offset(cg_buf *b, const cg_site *si, const char *base, const loom_kmap *m);
/* The row base of map m (the p terms), as a C expression. */
void loom_cg_put_row_base(cg_buf *b, const cg_part *cp, const loom_kmap *m);
/* `const T v<e> = ...;` for expr e at site si. */
loom_status loom_cg_emit_expr(loom_ctx *ctx, cg_buf *b, const cg_site *si, int32_t e);
/* The identity of a reduction's combine, in double or float. */
const char *loom_cg_ident(loom_op combine, bool dbl);
/* "acc = combine(acc, v)" in double (column partials) or float (row
 * reduction lanes, kernel.h). */
void loom_cg_put_combine(cg_buf *b, loom_op combine, const char *acc, const char *v, bool dbl);
/* Output ko's value v (of type from) combined, in double, into its column
 * partial pc<col> at the map's offset from the row base named base. */
void loom_cg_put_col_combine(cg_buf *b, const cg_site *si, const loom_kout *ko, const char *base,
                             int32_t col, const char *v, loom_dtype from);

/* ---- parts and kernels (c_codegen.c), shared with the GPU renderer ------- */

/* Fills cp's loops, need_pidx, level and reg_dt (cp->k, part, reach,
 * level and reg_dt set by the caller; reach and level: n_exprs + 1). */
void loom_cg_analyze_part(cg_part *cp);
/* Marks in tied[] (n_args bytes) the arguments a run may place in the
 * memory of another: each output that may be computed in place of an
 * input (kernel/in_place.h), and those inputs. Their parameters are not
 * restrict: C11 leaves a store through one restrict pointer and a load of
 * the same element through another undefined. Returns how many. */
int32_t loom_cg_tied_args(const loom_kernel *k, uint8_t *tied);
/* True if a kernel name is an identifier the generated code can export. */
bool loom_cg_name_ok(const char *s);
/* Index (kernel order) of the first COL_REDUCE of stage s of part pi. */
int32_t loom_cg_col_index(const loom_kernel *k, int32_t pi, int32_t s);

/* ---- stages (c_stage.c) ---------------------------------------------------- */

/* Stage s of part cp: row bases, hoisted row-level exprs, the loop nest
 * over R with lanes for row reductions, the lane fold. need: scratch of
 * n_exprs + 1 bytes; col_first: kernel-order index of the stage's first
 * column reduction. */
loom_status loom_cg_emit_stage(loom_ctx *ctx, cg_buf *b, const cg_part *cp, int32_t s,
                               uint8_t *need, int32_t col_first);
/* Rows per block the part runs in (its schedule's rows_per_block where its
 * stages allow: one loop of at most CG_BLOCK_MAX_ROW elements, no fast
 * exprs or dropout masks), or 1: row by row. */
int32_t loom_cg_row_block(const cg_part *cp);
/* The part's rows from row_begin in blocks of loom_cg_row_block(cp), every
 * stage a loop over the block's rows with the row's elements unrolled
 * inside, so that the rows fill the vector lanes; leaves `row0` at the
 * first row left for the row-by-row loop. Same results as that loop. */
loom_status loom_cg_emit_row_blocks(loom_ctx *ctx, cg_buf *b, const cg_part *cp, uint8_t *need);
/* Declares p<i>, the part's domain indices of the row in `row`, if its
 * maps use them (cp->need_pidx). */
void loom_cg_emit_row_pidx(cg_buf *b, const cg_part *cp);
/* Into out: the C lvalue of register r, or of scratch row s at the
 * site's flat index, at site si. */
void loom_cg_reg_name(char *out, size_t n, const cg_site *si, int32_t r);
void loom_cg_scratch_name(char *out, size_t n, const cg_site *si, int32_t s);

#endif

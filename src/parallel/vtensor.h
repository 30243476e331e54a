/*
 * vTensors (docs/PARALLEL.md): a logical tensor and the pieces a parallel
 * plan cuts it into. A piece is an index box (per dimension [start, end)),
 * a value part (partial sum k of K: the tensor is the sum of its K parts)
 * and a replica index (r of R: replicas hold equal data). A layout is the
 * R/V/D description of how a tensor is cut, as nnScaler writes it:
 * D(dim, n) splits a dimension into n equal parts, V(n) splits the value
 * into n partial sums, R(n) makes n replicas; factors compose left to
 * right, "D(0,2)R(2)". Splits must be even (the extent divisible by the
 * parts), as in nnScaler: every piece of a layout then has the same shape,
 * which keeps collectives uniform and piece arithmetic exact.
 *
 * This is the vocabulary the plan primitives, the dependency finder and
 * the validator (issue 9) and the simulator and planner (issue 10) share.
 */
#ifndef LOOM_PARALLEL_VTENSOR_H
#define LOOM_PARALLEL_VTENSOR_H

#include "ir/box.h"
#include "ir/graph.h"

/* Factors in one layout: one per dimension, one V, one R. */
#define LOOM_VT_MAX_FACTORS (LOOM_MAX_RANK + 2)
/* Most pieces one layout may have (the product of its factors' parts). */
#define LOOM_VT_MAX_PIECES (1 << 20)

typedef enum loom_vfactor_kind {
  LOOM_VF_D = 0, /* split dimension dim into parts equal ranges */
  LOOM_VF_V,     /* split the value into parts partial sums */
  LOOM_VF_R      /* parts replicas */
} loom_vfactor_kind;

typedef struct loom_vfactor {
  loom_vfactor_kind kind;
  int32_t dim; /* D only; -1 otherwise */
  int32_t parts;
} loom_vfactor;

typedef struct loom_vlayout {
  loom_type type; /* the logical tensor */
  int32_t n_factors;
  loom_vfactor factors[LOOM_VT_MAX_FACTORS]; /* as written, left to right */
  int32_t n_pieces;                          /* product of the parts */
} loom_vlayout;


typedef struct loom_vpiece {
  loom_vbox box;
  int32_t value_k, value_n; /* partial sum value_k of value_n (1: whole) */
  int32_t replica, replicas;
} loom_vpiece;

/* Checks the factors against type and fills *out. Errors (INVALID_ARGUMENT,
 * message naming the factor): D of a dim outside the rank, a dim, V or R
 * given twice, parts < 1, more parts than the extent, an extent that does
 * not divide evenly, more than LOOM_VT_MAX_PIECES pieces. */
loom_status loom_vlayout_make(loom_ctx *ctx, const loom_type *type, int32_t n_factors,
                              const loom_vfactor *factors, loom_vlayout *out);

/* Parses the text form ("D(0,2)R(2)"; spaces allowed between tokens) of a
 * layout of type. Errors are LOOM_STATUS_PARSE, "LINE:COL: message" as in
 * the text IR, counted from line, col (1, 1 for a string of its own; a
 * plan file passes where the layout starts). */
loom_status loom_vlayout_parse(loom_ctx *ctx, const loom_type *type, const char *text,
                               size_t len, int32_t line, int32_t col, loom_vlayout *out);

/* For parsers of larger texts (plan files), over the text IR lexer
 * (ir/text_ir.h): reads factors starting at the current token *tok of lx
 * and stops at the first token that does not start a factor (a newline,
 * a name, ...), which it leaves in *tok for the caller. */
struct loom_lexer;
struct loom_token;
loom_status loom_vlayout_parse_lexer(loom_ctx *ctx, const loom_type *type,
                                     struct loom_lexer *lx, struct loom_token *tok,
                                     loom_vlayout *out);

/* The text form, which loom_vlayout_parse reads back to an equal layout. */
const char *loom_vlayout_str(const loom_vlayout *l, char *buf, size_t n);
bool loom_vlayout_equal(const loom_vlayout *a, const loom_vlayout *b);

/* Piece i of l, i in [0, n_pieces): the factors are the digits of i in
 * mixed radix, the leftmost factor the most significant (so in D(0,2)R(2)
 * pieces 0 and 1 are the two replicas of the top half). */
void loom_vlayout_piece(const loom_vlayout *l, int32_t i, loom_vpiece *out);

/* The box of the whole tensor. */
loom_vbox loom_vbox_full(const loom_type *t);
/* Elements in the box (0 when empty; rank 0 is 1). */
int64_t loom_vbox_numel(const loom_vbox *b);
bool loom_vbox_empty(const loom_vbox *b);
/* The box a and b share, in *out; false (and an empty *out) if none. */
bool loom_vbox_intersect(const loom_vbox *a, const loom_vbox *b, loom_vbox *out);
/* Same rank and the same ranges. */
bool loom_vbox_equal(const loom_vbox *a, const loom_vbox *b);
/* True if every index of inner is in outer (same rank). */
bool loom_vbox_contains(const loom_vbox *outer, const loom_vbox *inner);
/* "[0:2, 3:6]" */
const char *loom_vbox_str(const loom_vbox *b, char *buf, size_t n);
/* "[0:2, 3:6] v1/2 r0/2" (v and r left out when 1). */
const char *loom_vpiece_str(const loom_vpiece *p, char *buf, size_t n);

/* The type of the tensor a piece of a t holds: t's dtype, the box's extents
 * (what a per-device program allocates for it). */
loom_type loom_vpiece_type(const loom_type *t, const loom_vpiece *p);
/* Bytes a piece of a tensor of type t holds: its box's elements times the
 * dtype size (a partial sum is as big as the box it covers). */
int64_t loom_vpiece_bytes(const loom_type *t, const loom_vpiece *p);

/* Checks that pieces cut a tensor of type t exactly: all share one value
 * count K and one replica count R, every box lies inside the tensor, and
 * for each (value part k, replica r) the boxes with it tile the tensor
 * with no overlap and no gap. INVALID_ARGUMENT with a message naming the
 * pieces (by index into the array) otherwise. */
loom_status loom_vpieces_check_cover(loom_ctx *ctx, const loom_type *t, int32_t n,
                                     const loom_vpiece *pieces);

/* One piece of a producer layout that a region needs, and the part of the
 * region it holds. */
typedef struct loom_vneed {
  int32_t piece;
  loom_vbox box;
} loom_vneed;

/* The pieces of layout a whose boxes meet region (a box of a's tensor), in
 * piece order, into a malloc'd *out (free() it; NULL when *n is 0). All
 * value parts and all replicas are listed: the region's value is the sum
 * over the value parts, and the replicas of one (box, k) are alternatives,
 * any one of which suffices (the dependency finder picks the cheapest). */
loom_status loom_vlayout_needs(loom_ctx *ctx, const loom_vlayout *a, const loom_vbox *region,
                               loom_vneed **out, int32_t *n);

#endif

/* Helpers shared by the op definitions. */
#ifndef LOOM_OPS_UTIL_H
#define LOOM_OPS_UTIL_H

#include "ops/op.h"

/* Resolves a possibly negative axis against rank; false if out of range. */
bool loom_norm_axis(int64_t axis, int32_t rank, int32_t *out);
/* Resolves a list of axes into a mask (bit d = axis d); false on a bad or
 * repeated axis. An empty list means no axes. */
bool loom_axes_mask(const loom_ints *axes, int32_t rank, uint32_t *mask);
/* Partition of an element-wise op: one spatial label per output dim; an
 * input dim that is broadcast (size 1 against a larger output) stays whole. */
void loom_partition_elementwise(const loom_node *n, const loom_type *in,
                                const loom_type *out, loom_partition *p);
/* The rows that indices idx select in a piece of a table (gather and
 * scatter_add: attrs.h): rows [base, base + extent) of `range` rows
 * (range 0: the piece is the whole table, base 0). Checks the piece lies
 * in the table and every index in [0, range) before any data moves; on
 * success *rows (caller frees) holds idx - base per index, or -1 for an
 * index outside the piece. op names the op in messages. */
loom_status loom_index_rows(loom_ctx *ctx, const char *op, const loom_view *idx, int64_t base,
                            int64_t extent, int64_t range, int64_t **rows);
/* The check of the piece alone (shape inference). */
loom_status loom_index_piece_check(loom_ctx *ctx, int64_t base, int64_t extent, int64_t range);
/* A sub-op's box (parallel/vtensor.h) as a shape attribute: its extents. */
struct loom_vbox;
void loom_box_extents(const struct loom_vbox *box, loom_ints *shape);
/* Defines OP_sub_attrs, the sub_attrs hook of an op whose `shape`
 * attribute is its output's shape: the sub-op's is the piece's. */
#define LOOM_SUB_ATTRS_OUT_SHAPE(OP)                                                              \
  static loom_status OP##_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,        \
                                    const loom_type *out, const struct loom_vbox *in_box,         \
                                    const struct loom_vbox *out_box, loom_attr_value *attrs) {    \
    (void)ctx, (void)n, (void)in, (void)out, (void)in_box;                                        \
    loom_box_extents(&out_box[0], &LOOM_ATTRV_INTS(attrs, OP, shape));                             \
    return LOOM_STATUS_OK;                                                                         \
  }

#endif

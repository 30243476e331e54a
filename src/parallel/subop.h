/*
 * The partition algebra: what a sub-op reads and writes. An op's partition
 * annotation (ops/op.h) labels its dims; a sub-op takes, for every label l,
 * a range [lo[l], hi[l]) of the label's extent. This file turns those
 * ranges into the index boxes of each operand and result, and gives the
 * sub-op its attributes (the op table's sub_attrs hook).
 *
 * Label extents and scaled dims. Dims that share a label may differ in
 * extent when one is a merge of dims (a reshape of [B, T] into [B*T]):
 * the label's extent E is the smallest extent among its dims, each dim
 * carrying it has an extent that is a multiple s*E, and the range [lo, hi)
 * covers [lo*s, hi*s) of that dim. Splitting the label into n even parts
 * needs n to divide E.
 */
#ifndef LOOM_PARALLEL_SUBOP_H
#define LOOM_PARALLEL_SUBOP_H

#include "ops/op.h"
#include "parallel/vtensor.h"

/* Label ranges of one sub-op: [lo[l], hi[l]) for l < n_labels. */
typedef struct loom_subop_ranges {
  int32_t n_labels;
  int64_t lo[LOOM_PART_MAX_LABELS], hi[LOOM_PART_MAX_LABELS];
} loom_subop_ranges;

/* The node's annotation for these operand and result types (ops without
 * one: n_labels 0, every dim -1, i.e. replicate only). */
void loom_subop_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                          loom_partition *p);
/* Each label's extent (the smallest extent among its dims; 1 for a label
 * no dim carries) into ext[0..n_labels); false, with a message, when a dim
 * carrying a label is not a multiple of that extent (a bad annotation). */
bool loom_subop_label_extents(loom_ctx *ctx, const loom_partition *p, const loom_type *in,
                              const loom_type *out, int64_t *ext);
/* The whole-range sub-op: [0, ext[l]) for every label. */
void loom_subop_ranges_full(const loom_partition *p, const int64_t *ext, loom_subop_ranges *r);
/* The boxes operand i and result o of a sub-op with ranges r read and
 * write (in_box[n_in], out_box[n_out]; dims labeled -1 are whole). */
void loom_subop_boxes(const loom_partition *p, const int64_t *ext, const loom_type *in,
                      const loom_type *out, const loom_subop_ranges *r, loom_vbox *in_box,
                      loom_vbox *out_box);
/* True when r splits a PARTIAL label (the results are partial values, to
 * be joined with p->combine of that label); *combine gets that op. Two
 * split partial labels must share one combine op. */
bool loom_subop_is_partial(const loom_partition *p, const int64_t *ext,
                           const loom_subop_ranges *r, loom_op *combine);
/* The attributes of the sub-op: n's, rewritten by the op's sub_attrs hook
 * for ops whose attributes name shapes or positions (reshape's target
 * shape, a dropout's logical indices, ...). attrs: LOOM_MAX_ATTRS slots. */
loom_status loom_subop_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                             const loom_type *out, const loom_vbox *in_box,
                             const loom_vbox *out_box, loom_attr_value *attrs);

#endif

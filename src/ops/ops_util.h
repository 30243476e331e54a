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
/* A sub-op's box (parallel/vtensor.h) as a shape attribute: its extents. */
struct loom_vbox;
void loom_box_extents(const struct loom_vbox *box, loom_ints *shape);

#endif

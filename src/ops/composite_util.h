/* Helpers shared by the composite op definitions (src/ops/composite_*.c):
 * argument checks for infer functions and small primitive emitters. */
#ifndef LOOM_OPS_COMPOSITE_UTIL_H
#define LOOM_OPS_COMPOSITE_UTIL_H

#include "ops/op.h"

/* Fails with DTYPE_MISMATCH unless t is a float dtype; what names the operand. */
loom_status loom_composite_need_float(loom_ctx *ctx, const char *what, const loom_type *t);
/* Fails with DTYPE_MISMATCH unless a and b have the same dtype. */
loom_status loom_composite_same_dtype(loom_ctx *ctx, const char *what_a, const loom_type *a,
                                      const char *what_b, const loom_type *b);
/* Fails with SHAPE_MISMATCH unless t has exactly the given shape. */
loom_status loom_composite_need_shape(loom_ctx *ctx, const char *what, const loom_type *t,
                                      int32_t rank, const int64_t *shape);
/* Resolves the "normalise over axis..rank-1" attribute of the norms. */
loom_status loom_composite_trailing_axis(loom_ctx *ctx, int64_t axis, int32_t rank, int32_t *out);

/* Scaled dot-product attention, the composite and its flash form
 * (ops/attention.c): one attribute list (LOOM_ATTR_LIST_ATTENTION in
 * ops/attrs.h) and one check of in = {q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv]}
 * (one float dtype, equal leading dims), of base (NULL: absent; an i64 or
 * i32 scalar) and of the attributes p and scale. */
loom_status loom_composite_check_attention(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                           const loom_type *base);
/* Partition of the attention ops (the composite and both flash forms):
 * the dims before Sq spatial, the rest whole; a mask input: replicate
 * only. Their sub_attrs hook: whole/at of the sub-op's probabilities, from
 * q's box in_box[0] and k's in_box[1]. */
void loom_partition_attention(const loom_node *n, const loom_type *in, const loom_type *out,
                              loom_partition *p);
loom_status loom_sub_attrs_attention(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     const loom_type *out, const struct loom_vbox *in_box,
                                     const struct loom_vbox *out_box, loom_attr_value *attrs);

/* Mean of x over the listed (non-negative) axes, as reduce_sum * (1/count).
 * No axes: x itself. */
int32_t loom_composite_mean(loom_graph *g, int32_t x, int32_t n_axes, const int64_t *axes,
                            bool keepdims);
/* Softmax (or log-softmax) of x along axis, the max subtracted first. */
int32_t loom_composite_softmax(loom_graph *g, int32_t x, int32_t axis, bool log);

#endif

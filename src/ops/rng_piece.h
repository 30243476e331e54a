/*
 * The piece an RNG op draws (rng/piece.h), from its `whole` and `at`
 * attributes (ops/attrs.h, LOOM_ATTR_LIST_PIECE): dropout, dropout_mask,
 * and the attention ops, whose fused dropout covers the probabilities
 * [..., Sq, Sk]. Every kernel that computes such an op's counters (the
 * reference, the kernel IR lowering, the cpu kernels) reads it from here,
 * and the ops' sub_attrs hooks write the attributes for a sub-op.
 */
#ifndef LOOM_OPS_RNG_PIECE_H
#define LOOM_OPS_RNG_PIECE_H

#include "ops/op.h"
#include "rng/piece.h"

/* The piece node n (an RNG op above) draws when its own tensor (dropout's
 * x, the mask's tensor, the attention probabilities) has rank dims
 * `shape`; INVALID_ARGUMENT with a message when whole/at do not place it. */
loom_status loom_op_rng_piece(loom_ctx *ctx, const loom_node *n, int32_t rank,
                              const int64_t *shape, loom_rng_piece *p);

/* The probabilities [..., Sq, Sk] of attention over q [..., Sq, D] and
 * k [..., Sk, D]: rank and shape into *rank, shape. */
void loom_attention_probs_shape(const loom_type *q, const loom_type *k, int32_t *rank,
                                int64_t *shape);

/* The tensor dropout_mask n's bits stand for: its `shape`, or [numel]. */
void loom_dropout_mask_shape(const loom_node *n, int32_t *rank, int64_t *shape);

/* For a sub-op of n whose own tensor (shape `own`, rank dims) is the box
 * starting at `start`: whole becomes n's whole (or `own` if it has none),
 * at becomes n's at (or zeros) + start, so a piece of a piece still names
 * the logical tensor. attrs is the sub-op's attribute array. */
void loom_rng_piece_sub_attrs(const loom_node *n, int32_t rank, const int64_t *own,
                              const int64_t *start, loom_attr_value *attrs);

#endif

/*
 * The internal graph builder used by gradient rules, decompositions and
 * model builders. Errors are sticky: after a failed add, g->err is set and
 * every later lb_* call returns -1 at once, so a rule is written as plain
 * expressions and checked once (loom_build_status) at the end.
 */
#ifndef LOOM_IR_BUILD_H
#define LOOM_IR_BUILD_H

#include "ir/graph.h"

/* Adds op with attrs in spec order (NULL: defaults); one output. */
int32_t lb_op(loom_graph *g, loom_op op, int32_t n_in, const int32_t *in,
              const loom_attr_value *attrs);
/* As lb_op for several outputs; returns the first output id. */
int32_t lb_op_multi(loom_graph *g, loom_op op, int32_t n_in, const int32_t *in,
                    const loom_attr_value *attrs, int32_t n_out, int32_t *out);
/* Returns g->err and clears it. */
loom_status loom_build_status(loom_graph *g);

int32_t lb_unary(loom_graph *g, loom_op op, int32_t x);
int32_t lb_binary(loom_graph *g, loom_op op, int32_t a, int32_t b);
int32_t lb_add(loom_graph *g, int32_t a, int32_t b);
int32_t lb_sub(loom_graph *g, int32_t a, int32_t b);
int32_t lb_mul(loom_graph *g, int32_t a, int32_t b);
int32_t lb_div(loom_graph *g, int32_t a, int32_t b);
int32_t lb_neg(loom_graph *g, int32_t x);
int32_t lb_select(loom_graph *g, int32_t cond, int32_t a, int32_t b);
int32_t lb_cast(loom_graph *g, int32_t x, loom_dtype dt);

/* A constant filled with value. */
int32_t lb_const(loom_graph *g, loom_dtype dt, int32_t rank,
                 const int64_t *shape, double value);
/* A rank-0 constant. */
int32_t lb_scalar(loom_graph *g, loom_dtype dt, double value);
/* A rank-0 constant of x's dtype. */
int32_t lb_scalar_like(loom_graph *g, int32_t x, double value);
/* Zeros / ones with x's type. */
int32_t lb_zeros_like(loom_graph *g, int32_t x);
int32_t lb_iota(loom_graph *g, loom_dtype dt, int32_t rank,
                const int64_t *shape, int32_t axis);

/* axes may be negative (counted from the end). */
int32_t lb_reduce(loom_graph *g, loom_op op, int32_t x, int32_t n_axes,
                  const int64_t *axes, bool keepdims);
int32_t lb_sum(loom_graph *g, int32_t x, int32_t n_axes, const int64_t *axes,
               bool keepdims);
int32_t lb_reshape(loom_graph *g, int32_t x, int32_t rank, const int64_t *shape);
int32_t lb_transpose(loom_graph *g, int32_t x, const int64_t *perm);
/* Swaps the last two dims. */
int32_t lb_transpose_last2(loom_graph *g, int32_t x);
int32_t lb_broadcast_to(loom_graph *g, int32_t x, int32_t rank,
                        const int64_t *shape);
/* Broadcasts x to the shape of like. */
int32_t lb_broadcast_like(loom_graph *g, int32_t x, int32_t like);
/* starts/ends have one entry per dim of x. */
int32_t lb_slice(loom_graph *g, int32_t x, const int64_t *starts,
                 const int64_t *ends);
int32_t lb_concat(loom_graph *g, int32_t n, const int32_t *xs, int32_t axis);
int32_t lb_pad(loom_graph *g, int32_t x, const int64_t *lo, const int64_t *hi,
               double value);
int32_t lb_gather(loom_graph *g, int32_t data, int32_t idx, int32_t axis);
int32_t lb_scatter_add(loom_graph *g, int32_t idx, int32_t updates,
                       int32_t rank, const int64_t *shape, int32_t axis);
int32_t lb_matmul(loom_graph *g, int32_t a, int32_t b, bool trans_a,
                  bool trans_b);
/* base: optional i64 scalar added to offset (-1: none). */
int32_t lb_dropout(loom_graph *g, int32_t x, double p, int64_t seed,
                   int64_t offset, int32_t base);
/* The same drawing the piece that whole and at place (NULL: empty; see
 * rng/piece.h). */
int32_t lb_dropout_piece(loom_graph *g, int32_t x, double p, int64_t seed, int64_t offset,
                         int32_t base, const loom_ints *whole, const loom_ints *at);

/* Sums g (shaped like a broadcast result) down to the shape `target`,
 * undoing NumPy broadcasting: the gradient of a broadcast operand. */
int32_t lb_unbroadcast(loom_graph *g, int32_t grad, const loom_type *target);

#endif

/*
 * Batched matmul over broadcast operands, as every backend runs it: one
 * product per index of the output's leading (batch) dims, each reading A
 * and B at an offset their broadcast strides give.
 */
#ifndef LOOM_RUNTIME_MATMUL_BATCH_H
#define LOOM_RUNTIME_MATMUL_BATCH_H

#include "ir/view.h"

/* The batch products' element offsets: (*off)[i] into a and
 * (*off)[batch + i] into b for product i, batch being the product of
 * out's leading out->rank - 2 dims, which a's and b's leading dims
 * broadcast to. *off is malloc'ed. */
loom_status loom_matmul_batch_offsets(loom_ctx *ctx, const loom_view *a, const loom_view *b,
                                      const loom_view *out, int64_t batch, int64_t **off);

#endif

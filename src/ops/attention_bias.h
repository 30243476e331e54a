/*
 * The additive bias of the attention ops (the `attention` composite,
 * flash_attention, flash_attention_grad): with the `bias` attribute set,
 * the last input is a tensor of q's float dtype that broadcasts to the
 * scores [..., Sq, Sk] without growing them (NumPy rules, aligned on the
 * right; size-1 and missing dims repeat). It is added to the scaled
 * scores before the causal mask and the softmax; -inf entries hide a key.
 * Kernels read it at strides (0 on a repeated dim), never expanded.
 * flash_attention_grad gives the bias gradient as a fourth output when it
 * has one: dS, the softmax backward of the scaled scores, summed over the
 * bias's repeated dims.
 */
#ifndef LOOM_OPS_ATTENTION_BIAS_H
#define LOOM_OPS_ATTENTION_BIAS_H

#include "core/ctx.h"
#include "ir/graph.h"

/* Index of n's bias input, or -1 when it has none. */
int32_t loom_attention_bias_input(const loom_node *n);

/* Number of n's inputs before the bias (all of them without one). */
int32_t loom_attention_core_inputs(const loom_node *n);

/* Checks bias against the scores [rank, shape] it is added to, of dtype
 * dt; the error says which dim does not broadcast. */
loom_status loom_attention_check_bias(loom_ctx *ctx, const loom_type *bias, loom_dtype dt,
                                      int32_t rank, const int64_t *shape);

/* Element strides of a contiguous bias read as the scores [rank, shape]:
 * stride[d] is 0 where the bias repeats along d. */
void loom_attention_bias_strides(const loom_type *bias, int32_t rank, const int64_t *shape,
                                 int64_t *stride);

#endif

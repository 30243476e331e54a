/*
 * Strided operands of flash_attention and flash_attention_grad
 * (ops/attrs.h, LOOM_ATTR_LIST_FLASH): with `dims` set, operand q (k, v,
 * o, d_o) is either its input itself (its `_at` empty: the input has the
 * operand's logical type) or a strided view of it: the operand's
 * [lead..., S, W] elements at
 *
 *   offset + sum_i idx_i * stride_i + s * row + w
 *
 * of the input's row-major elements, idx the flattened leading index
 * decomposed over the view's own leading sizes (their product is the
 * operand's, so they may split or merge the logical leading dims; a
 * stride may be 0: a shared k or v head). The forward's o_at places o in
 * its output, of shape out_shape, which o must cover exactly (a
 * permutation of the output's elements, as a transpose is); the
 * backward's dq_at, dk_at, dv_at place its gradients in its first output
 * (the bias gradient, if any, is a second),
 * which they must cover exactly without overlapping (as a concatenation
 * does: the fold checks that). The view fold
 * (passes/attention_views.c) makes them from the layout ops around flash
 * attention; the results are those of the same operands copied out.
 */
#ifndef LOOM_OPS_ATTENTION_VIEWS_H
#define LOOM_OPS_ATTENTION_VIEWS_H

#include "ir/graph.h"
#include "ir/view.h"

/* Operands in attribute order: q_at, k_at, v_at, o_at, do_at (read;
 * the forward writes o), dq_at, dk_at, dv_at (the backward's). */
enum {
  LOOM_FLASH_Q, LOOM_FLASH_K, LOOM_FLASH_V, LOOM_FLASH_O, LOOM_FLASH_DO, LOOM_FLASH_N,
  LOOM_FLASH_DQ = LOOM_FLASH_N, LOOM_FLASH_DK, LOOM_FLASH_DV, LOOM_FLASH_ALL
};

/* One operand's placement, parsed. */
typedef struct loom_flash_view {
  bool strided; /* false: the input is the operand, contiguous */
  int64_t offset, row;
  int32_t n_lead;
  int64_t lead[3], stride[3];
} loom_flash_view;

/* Index of flash_attention_grad's bias gradient output (its last: 3, or
 * 1 after the one output dq_at, dk_at, dv_at place dq, dk, dv in), or -1
 * when it gives none. */
int32_t loom_flash_dbias_output(const loom_node *n);

/* True if n (a flash op) has `dims` set. */
bool loom_flash_has_views(const loom_node *n);

/* The logical types of n's operands (LOOM_FLASH_ALL of them: q, k, v,
 * o, d_o, dq, dk, dv), from dims, else from the inputs (in: the node's
 * input types). */
void loom_flash_logical_types(const loom_node *n, const loom_type *in, loom_type *lt);

/* Operand w's placement (attributes checked by the op's infer). */
loom_flash_view loom_flash_view_of(const loom_node *n, int32_t w);

/* Checks operand w's view against its logical type lt and the type of
 * the value it lies in (bounds, sizes); errors name the attribute. */
loom_status loom_flash_check_view(loom_ctx *ctx, const loom_node *n, int32_t w,
                                  const loom_type *lt, const loom_type *value);

/* A loom_view of operand w inside `value` (the input, or the forward's
 * output for o): shape [lead..., S, W] of the view's own leading sizes,
 * its strides; the value itself (reshaped to lt) when w is not strided. */
loom_view loom_flash_operand(const loom_node *n, int32_t w, const loom_type *lt,
                             const loom_view *value);

#endif

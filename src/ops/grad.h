/* Gradient rules of the differentiable primitives (src/ops/grad_*.c).
 * The op definitions point at these; ops missing here have no gradient
 * (comparisons, sign, iota, constant: their inputs get zero). */
#ifndef LOOM_OPS_GRAD_H
#define LOOM_OPS_GRAD_H

#include "ops/op.h"

void loom_grad_neg(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_abs(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_exp(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_log(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_sqrt(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_rsqrt(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_reciprocal(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_tanh(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_sigmoid(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_relu(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_erf(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_sin(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_cos(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_add(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_sub(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_mul(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_div(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_pow(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_maximum(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_minimum(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_select(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_cast(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_reduce_sum(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_reduce_max(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_reduce_min(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_reshape(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_transpose(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_broadcast_to(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_slice(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_concat(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_pad(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_gather(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_scatter_add(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_matmul(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);
void loom_grad_dropout(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din);

#endif

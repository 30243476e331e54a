/*
 * The attention pass: scaled dot-product attention (the `attention`
 * composite, or softmax(q k^T [* c]) [dropout] v written with matmul, mul
 * by a constant, softmax over the last axis and dropout, each result used
 * once) becomes one flash_attention node (ops/attention.c), whose
 * kernel never materializes the [Sq, Sk] probabilities, and whose gradient
 * rule is one flash_attention_grad node. With dropout, the RNG placement
 * decides where the keep bits come from:
 *
 *   fused       generated inside the attention kernels (forward and again
 *               in the backward);
 *   sequential  a dropout_mask node (1 bit per probability) just before
 *               attention; forward and backward read it;
 *   overlap     the same node marked `overlap`: the cpu backend runs it on
 *               a worker thread while the GEMMs before the attention run;
 *   auto        per attention node, the placement the RNG performance model
 *               (perf/rng_model.h) predicts fastest on this machine.
 *
 * Every placement gives the same masks (docs/DROPOUT.md), so the same
 * results bit for bit.
 */
#ifndef LOOM_PASSES_ATTENTION_H
#define LOOM_PASSES_ATTENTION_H

#include "ir/graph.h"
#include "perf/rng_model.h"

/* A copy of g with every attention composite replaced as above. model may
 * be NULL unless placement is AUTO. *n_replaced (may be NULL) counts them. */
loom_status loom_graph_fuse_attention(const loom_graph *g, loom_rng_placement placement,
                                      const loom_rng_model *model, loom_graph **out,
                                      int32_t *n_replaced);

/* True if g has something the attention pass may rewrite (an attention
 * composite, or a softmax its pattern may start from); *dropout: whether
 * any attention or dropout draws random numbers (only then does a
 * backend measure its RNG model for `auto`). */
bool loom_attention_candidates(const loom_graph *g, bool *dropout);

/* What the choice between flash and decomposed attention reads. */
typedef struct loom_attention_costs {
  loom_rng_model rates; /* measured: flash forward / backward and GEMM FLOP/s, bandwidth */
  double launch_s;      /* one step (kernel or GEMM) */
  int64_t cache_bytes;  /* the LLC */
  /* One core's seconds per score of the decomposed form's softmax and of
   * its gradient, as the stitched kernels compute them (0: not counted) */
  double softmax_s, softmax_grad_s;
} loom_attention_costs;

/* Predicted seconds of attention a as flash attention and decomposed: two
 * batched GEMMs (four more in the backward) over every score, causal or
 * not, at the GEMM rate, the softmax's (and its gradient's) own work per
 * score on all cores, and the [Sq, Sk] probabilities through memory
 * (3 passes forward, 5 more backward) plus a launch per step; decomposed
 * is never chosen when one attention's probabilities exceed the cache
 * (long sequences: they would stream from memory and take O(S^2) space). */
void loom_attention_predict(const loom_attention_costs *c, const loom_rng_attn *a,
                            double *flash_s, double *decomposed_s);

/* As loom_graph_fuse_attention, but an attention composite without dropout
 * stays as it is (to be decomposed and fused like any other ops) where
 * loom_attention_predict says decomposed is faster (costs NULL: never). */
loom_status loom_graph_fuse_attention_costed(const loom_graph *g, loom_rng_placement placement,
                                             const loom_rng_model *model,
                                             const loom_attention_costs *costs, loom_graph **out,
                                             int32_t *n_replaced);

/* As loom_graph_fuse_attention, but attention with an additive bias stays
 * as it is (decomposed): a backend whose kernels take no bias (every
 * backend's kernels take it today; tests compare the two forms with it). */
loom_status loom_graph_fuse_attention_unbiased(const loom_graph *g, loom_rng_placement placement,
                                               const loom_rng_model *model, loom_graph **out,
                                               int32_t *n_replaced);

/* The view fold (passes/attention_views.c): a copy of g in which each
 * f32 flash_attention and flash_attention_grad reads q, k, v (and o, d_o)
 * in place from the tensors they are reshaped, transposed, sliced or
 * broadcast from, and the forward writes o into the tensor a transpose
 * and reshape of it make (only they and its gradient reading it), as
 * strided operands (ops/attention_views.h), wherever the layout chain is
 * index arithmetic the kernels take (contiguous rows, one stride between
 * rows, at most three leading dims). The layout ops left without users
 * are dead (loom_graph_simplify removes them), and so is the counter
 * input of a folded node where it is never read (p = 0) or is a constant
 * (added to `offset`). A cpu program's own form,
 * made after autodiff and after any partition: a folded op has no
 * gradient rule and is never split. *n_folded (may be NULL) counts the
 * nodes that read or write an operand at strides. */
loom_status loom_graph_fold_attention_views(const loom_graph *g, loom_graph **out,
                                            int32_t *n_folded);

#endif

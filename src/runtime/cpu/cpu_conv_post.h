/*
 * A conv's epilogue kernel as oneDNN post-ops: when the kernel that reads
 * a convolution's output C (chosen by the epilogue rule, fusion/epilogue.c)
 * computes, element by element, a chain of
 *   - a per-channel affine map (add, sub, mul, div, neg with operands
 *     that depend only on the channel: a bias, a BatchNormalization's
 *     statistics, constants),
 *   - maximum / minimum with per-channel operands,
 *   - activations oneDNN has (relu, sigmoid, tanh, exp, abs, sqrt, and
 *     x * hardsigmoid(x) as hardswish, x * sigmoid(x) as swish),
 *   - an add / mul / ... of another tensor of C's shape read in the same
 *     order (a residual),
 * the conv runs it inside its own kernel (attr post-ops) and writes the
 * kernel's output directly: no pass over C. Runs of affine ops collapse
 * to one scale and one shift per channel; the first run, on the conv's
 * own output, becomes a scale of the weights (folded in as they are
 * reordered for the kernel: conv(x, w) * s = conv(x, w * s)) and the
 * conv's bias, which cost nothing inside the kernel (binary post-ops
 * cost about as much as the pass they replace). The per-channel operands
 * are evaluated per run from the kernel's arguments (they may be
 * parameters).
 */
#ifndef LOOM_RUNTIME_CPU_CONV_POST_H
#define LOOM_RUNTIME_CPU_CONV_POST_H

#include "kernel/kernel.h"

#define LOOM_CONV_POST_MAX 8

typedef enum loom_conv_post_kind {
  LOOM_CONV_POST_ELTWISE = 1, /* alg, alpha, beta */
  LOOM_CONV_POST_CHANNEL,     /* binary alg with a per-channel operand */
  LOOM_CONV_POST_TENSOR       /* binary alg with a tensor of C's shape */
} loom_conv_post_kind;

typedef struct loom_conv_post_op {
  int32_t kind; /* loom_conv_post_kind */
  int32_t alg;  /* dnnl_alg_kind_t */
  float alpha, beta;
  float *chan;         /* CHANNEL: one value per output channel (owned) */
  const float *tensor; /* TENSOR: [N, M, S...], plain unless kept blocked (LOOM_CPU_POST_BLOCKED) */
  int32_t arg;         /* TENSOR: the kernel argument it is */
} loom_conv_post_op;

typedef struct loom_conv_post {
  int32_t n;
  loom_conv_post_op op[LOOM_CONV_POST_MAX];
  float *scale; /* NULL or one value per output channel (owned): folded into the weights */
  float *bias;  /* NULL or one value per output channel (owned) */
  float *out;  /* where the kernel stores: [N, M, S...] plain */
} loom_conv_post;

/* Translates kernel k (bound to args) reading conv output value c, of
 * [batch, channels, plane] elements, into post-ops; false (and *post
 * empty) when it computes anything else. With args NULL, the structure
 * alone (operands zero, no pointers). */
bool loom_conv_post_from_kernel(const loom_kernel *k, void *const *args, int32_t c,
                                int64_t batch, int64_t channels, int64_t plane,
                                loom_conv_post *post);
void loom_conv_post_free(loom_conv_post *post);

#endif

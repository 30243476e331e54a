/*
 * Sliding windows: the geometry the conv and pool ops share. A window op
 * relates a "big" side [N, C, S...] (a conv's input, a conv_transpose's
 * output) to a "small" side [N, M, O...] (a conv's output): output
 * position o of spatial dim d reads big positions
 *   o * stride[d] + j * dil[d] - lo[d],  j in [0, kernel[d]),
 * those outside [0, S) being padding.
 */
#ifndef LOOM_OPS_WINDOW_H
#define LOOM_OPS_WINDOW_H

#include "ops/op.h"

/* Spatial dims a window op takes (its tensors have rank k + 2). */
#define LOOM_WINDOW_MAX_DIMS (LOOM_MAX_RANK - 2)

typedef struct loom_window {
  int32_t k; /* spatial dims */
  int64_t kernel[LOOM_WINDOW_MAX_DIMS], stride[LOOM_WINDOW_MAX_DIMS], dil[LOOM_WINDOW_MAX_DIMS];
  int64_t lo[LOOM_WINDOW_MAX_DIMS], hi[LOOM_WINDOW_MAX_DIMS];
  int64_t big[LOOM_WINDOW_MAX_DIMS], small[LOOM_WINDOW_MAX_DIMS];
  int64_t groups;   /* conv ops */
  bool ceil_mode;   /* pools */
  bool include_pad; /* avg_pool */
} loom_window;

/* Reads node n's window for a big side of spatial size big[0..k) (conv,
 * conv_grad_weight, the pools) or, for conv_transpose, a small side of
 * size small; kernel: the weights' spatial dims (NULL for the pools and
 * conv_grad_weight, which name theirs). Checks every attribute and that
 * the sizes come out positive; errors name the op. */
loom_status loom_window_read(loom_ctx *ctx, const loom_node *n, int32_t k, const int64_t *big,
                             const int64_t *small, const int64_t *kernel, loom_window *w);

/* Big-side position of window position j of output position o along d. */
static inline int64_t loom_window_pos(const loom_window *w, int32_t d, int64_t o, int64_t j) {
  return o * w->stride[d] + j * w->dil[d] - w->lo[d];
}

/* Product of kernel[0..k), of big[0..k) and of small[0..k). */
int64_t loom_window_kernel_numel(const loom_window *w);
int64_t loom_window_big_numel(const loom_window *w);
int64_t loom_window_small_numel(const loom_window *w);

/* Big-side position of window position (flat index jj over the kernel)
 * of output position (flat index oo over small) along every dim; false
 * when it lies in the padding. *flat: its flat index over big. */
bool loom_window_at(const loom_window *w, int64_t oo, int64_t jj, int64_t *flat);

/* avg_pool's divisor for output position oo (flat over small): the
 * window's positions inside the input, or inside the explicitly padded
 * input with include_pad. */
int64_t loom_window_count(const loom_window *w, int64_t oo);

#endif

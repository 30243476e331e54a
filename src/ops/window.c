/* The window geometry shared by the conv and pool ops (window.h). */
#include "ops/window.h"

#include "ops/attrs.h"

#include <string.h>

static bool is_pool(loom_op op) {
  return op == LOOM_OP_MAX_POOL || op == LOOM_OP_AVG_POOL || op == LOOM_OP_MAX_POOL_GRAD ||
         op == LOOM_OP_AVG_POOL_GRAD;
}

/* One per-dim list: empty gives `def` everywhere, else exactly k values
 * no smaller than `min`. */
static loom_status read_list(loom_ctx *ctx, const char *name, const loom_ints *v, int32_t k,
                             int64_t def, int64_t min, int64_t *out) {
  if (v->n != 0 && v->n != k)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'%s' has %d values for %d spatial dims",
                      name, (int)v->n, (int)k);
  for (int32_t d = 0; d < k; d++) {
    out[d] = v->n ? v->v[d] : def;
    if (out[d] < min)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'%s' must be >= %lld, got %lld", name,
                        (long long)min, (long long)out[d]);
  }
  return LOOM_STATUS_OK;
}

loom_status loom_window_read(loom_ctx *ctx, const loom_node *n, int32_t k, const int64_t *big,
                             const int64_t *small, const int64_t *kernel, loom_window *w) {
  memset(w, 0, sizeof *w);
  if (k < 1 || k > LOOM_WINDOW_MAX_DIMS)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "needs [N, C, spatial...] with 1 to %d spatial dims, got rank %d",
                      LOOM_WINDOW_MAX_DIMS, (int)k + 2);
  w->k = k;
  w->groups = 1;
  const loom_ints *strides, *lo, *hi, *dil, *ker = NULL, *opad = NULL;
  if (is_pool(n->op)) {
    ker = &LOOM_ATTR_INTS(n, max_pool, kernel);
    strides = &LOOM_ATTR_INTS(n, max_pool, strides);
    lo = &LOOM_ATTR_INTS(n, max_pool, pads_lo);
    hi = &LOOM_ATTR_INTS(n, max_pool, pads_hi);
    dil = &LOOM_ATTR_INTS(n, max_pool, dilations);
    w->ceil_mode = LOOM_ATTR_I(n, max_pool, ceil_mode) != 0;
    w->include_pad = LOOM_ATTR_I(n, max_pool, count_include_pad) != 0;
    if (ker->n != k)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "'kernel' has %d values for %d spatial dims", (int)ker->n, (int)k);
  } else {
    strides = &LOOM_ATTR_INTS(n, conv, strides);
    lo = &LOOM_ATTR_INTS(n, conv, pads_lo);
    hi = &LOOM_ATTR_INTS(n, conv, pads_hi);
    dil = &LOOM_ATTR_INTS(n, conv, dilations);
    w->groups = LOOM_ATTR_I(n, conv, groups);
    if (w->groups < 1)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'groups' must be >= 1, got %lld",
                        (long long)w->groups);
    if (n->op == LOOM_OP_CONV_TRANSPOSE) opad = &LOOM_ATTR_INTS(n, conv_transpose, output_padding);
    if (n->op == LOOM_OP_CONV_GRAD_WEIGHT) ker = &LOOM_ATTR_INTS(n, conv_grad_weight, kernel);
  }
  if (ker) LOOM_TRY(read_list(ctx, "kernel", ker, k, 1, 1, w->kernel));
  if (kernel) memcpy(w->kernel, kernel, sizeof *kernel * (size_t)k);
  LOOM_TRY(read_list(ctx, "strides", strides, k, 1, 1, w->stride));
  LOOM_TRY(read_list(ctx, "pads_lo", lo, k, 0, 0, w->lo));
  LOOM_TRY(read_list(ctx, "pads_hi", hi, k, 0, 0, w->hi));
  LOOM_TRY(read_list(ctx, "dilations", dil, k, 1, 1, w->dil));
  int64_t op[LOOM_WINDOW_MAX_DIMS] = {0};
  if (opad) LOOM_TRY(read_list(ctx, "output_padding", opad, k, 0, 0, op));
  for (int32_t d = 0; d < k; d++) {
    if (w->kernel[d] < 1) return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "an empty kernel");
    /* sizes stay far below 2^62, so these products cannot overflow */
    if (w->kernel[d] > (1 << 20) || w->stride[d] > (1 << 20) || w->dil[d] > (1 << 20) ||
        w->lo[d] > (1 << 30) || w->hi[d] > (1 << 30) || op[d] > (1 << 20))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "a kernel, stride, dilation or padding too large");
    int64_t span = w->dil[d] * (w->kernel[d] - 1) + 1;
    /* a pool's window always holds an input position */
    if (is_pool(n->op) && (w->lo[d] >= span || w->hi[d] >= span))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "padding (%lld, %lld) of spatial dim %d must be smaller than the "
                        "window (%lld)",
                        (long long)w->lo[d], (long long)w->hi[d], (int)d, (long long)span);
    if (n->op == LOOM_OP_CONV_TRANSPOSE) {
      w->small[d] = small[d];
      w->big[d] = w->stride[d] * (small[d] - 1) + span - w->lo[d] - w->hi[d] + op[d];
      if (small[d] < 1 || w->big[d] < 1)
        return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                          "spatial dim %d of size %lld gives an output of size %lld", (int)d,
                          (long long)small[d], (long long)w->big[d]);
      continue;
    }
    w->big[d] = big[d];
    int64_t room = big[d] + w->lo[d] + w->hi[d] - span;
    if (room < 0 || big[d] < 1)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "the window (%lld positions, dilation %lld) is larger than spatial "
                        "dim %d (%lld, padded by %lld and %lld)",
                        (long long)w->kernel[d], (long long)w->dil[d], (int)d, (long long)big[d],
                        (long long)w->lo[d], (long long)w->hi[d]);
    int64_t o = (w->ceil_mode ? room + w->stride[d] - 1 : room) / w->stride[d] + 1;
    /* ceil_mode: the last window must start inside the input or its
     * leading padding */
    if (w->ceil_mode && (o - 1) * w->stride[d] >= big[d] + w->lo[d]) o--;
    w->small[d] = o;
  }
  return LOOM_STATUS_OK;
}

static int64_t prod(const int64_t *v, int32_t k) {
  int64_t p = 1;
  for (int32_t d = 0; d < k; d++)
    p *= v[d];
  return p;
}

int64_t loom_window_kernel_numel(const loom_window *w) { return prod(w->kernel, w->k); }
int64_t loom_window_big_numel(const loom_window *w) { return prod(w->big, w->k); }
int64_t loom_window_small_numel(const loom_window *w) { return prod(w->small, w->k); }

bool loom_window_at(const loom_window *w, int64_t oo, int64_t jj, int64_t *flat) {
  int64_t pos[LOOM_WINDOW_MAX_DIMS];
  for (int32_t d = w->k - 1; d >= 0; d--) {
    pos[d] = loom_window_pos(w, d, oo % w->small[d], jj % w->kernel[d]);
    oo /= w->small[d];
    jj /= w->kernel[d];
  }
  int64_t f = 0;
  for (int32_t d = 0; d < w->k; d++) {
    if (pos[d] < 0 || pos[d] >= w->big[d]) return false;
    f = f * w->big[d] + pos[d];
  }
  *flat = f;
  return true;
}

int64_t loom_window_count(const loom_window *w, int64_t oo) {
  int64_t count = 1;
  for (int32_t d = w->k - 1; d >= 0; d--) {
    int64_t o = oo % w->small[d], first = loom_window_pos(w, d, o, 0);
    oo /= w->small[d];
    int64_t lo = w->include_pad ? -w->lo[d] : 0, hi = w->big[d] + (w->include_pad ? w->hi[d] : 0);
    int64_t c = 0;
    for (int64_t j = 0; j < w->kernel[d]; j++) {
      int64_t p = first + j * w->dil[d];
      c += p >= lo && p < hi;
    }
    count *= c;
  }
  return count;
}

/*
 * Convolutions and pooling onto Loom's window ops (ops/window.h): Conv ->
 * conv (+ the bias, broadcast over the channels), ConvTranspose ->
 * conv_transpose, MaxPool / AveragePool / GlobalAveragePool /
 * GlobalMaxPool -> max_pool / avg_pool. Here the ONNX attributes are
 * read and resolved: kernel_shape, strides, dilations, explicit or
 * automatic padding (auto_pad), groups, ceil_mode, count_include_pad,
 * ConvTranspose's output_padding and output_shape.
 */
#include "onnx/import_internal.h"

#include "ops/attrs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define G (cv->g)
#define MAX_SPATIAL 5
#define MAX_INDEX_TABLE ((int64_t)1 << 22) /* MaxPool Indices: entries of its position table */

typedef struct window {
  int32_t k; /* spatial dims */
  int64_t kernel[MAX_SPATIAL], stride[MAX_SPATIAL], dil[MAX_SPATIAL];
  int64_t lo[MAX_SPATIAL], hi[MAX_SPATIAL]; /* explicit padding */
  int64_t out[MAX_SPATIAL];
} window;

/* Reads kernel (given: from the weights), strides, dilations, pads and
 * auto_pad for an input whose spatial dims are shape[2..]. */
static loom_status read_window(onnx_cv *cv, const loom_type *t, const int64_t *kernel_given,
                               bool pool, window *w) {
  memset(w, 0, sizeof *w);
  w->k = t->rank - 2;
  if (w->k < 1 || w->k > MAX_SPATIAL) return cv_unsupported(cv, "%d spatial dims", w->k);
  int64_t v[2 * MAX_SPATIAL];
  int32_t n = cv_attr_ints(cv, "kernel_shape", v, MAX_SPATIAL);
  if (n >= 0 && n != w->k) return cv_invalid(cv, "kernel_shape has %d dims", n);
  for (int32_t d = 0; d < w->k; d++) {
    w->kernel[d] = n >= 0 ? v[d] : kernel_given ? kernel_given[d] : 0;
    if (w->kernel[d] <= 0) return cv_invalid(cv, "no kernel_shape");
    w->stride[d] = w->dil[d] = 1;
  }
  if ((n = cv_attr_ints(cv, "strides", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < w->k && d < n; d++)
      w->stride[d] = v[d];
  if ((n = cv_attr_ints(cv, "dilations", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < w->k && d < n; d++)
      w->dil[d] = v[d];
  if ((n = cv_attr_ints(cv, "pads", v, 2 * MAX_SPATIAL)) >= 0) {
    if (n != 2 * w->k) return cv_invalid(cv, "pads has %d values", n);
    for (int32_t d = 0; d < w->k; d++) {
      w->lo[d] = v[d];
      w->hi[d] = v[d + w->k];
    }
  }
  if (cv->st) return cv->st;
  const char *ap = cv_attr_s(cv, "auto_pad", "NOTSET");
  bool same_upper = strcmp(ap, "SAME_UPPER") == 0, same_lower = strcmp(ap, "SAME_LOWER") == 0;
  if (!same_upper && !same_lower && strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
    return cv_unsupported(cv, "auto_pad '%s'", ap);
  bool ceil_mode = cv_attr_i(cv, "ceil_mode", 0) != 0;
  for (int32_t d = 0; d < w->k; d++) {
    int64_t s = t->shape[2 + d], span = w->dil[d] * (w->kernel[d] - 1) + 1;
    if (w->stride[d] <= 0 || w->dil[d] <= 0 || w->lo[d] < 0 || w->hi[d] < 0)
      return cv_invalid(cv, "strides, dilations and pads must be positive");
    if (strcmp(ap, "VALID") == 0) w->lo[d] = w->hi[d] = 0;
    if (same_upper || same_lower) {
      int64_t o = (s + w->stride[d] - 1) / w->stride[d];
      int64_t total = LOOM_MAX(0, (o - 1) * w->stride[d] + span - s);
      w->lo[d] = same_upper ? total / 2 : total - total / 2;
      w->hi[d] = total - w->lo[d];
    }
    int64_t room = s + w->lo[d] + w->hi[d] - span;
    if (room < 0) return cv_invalid(cv, "the kernel is larger than the padded input");
    int64_t o = (ceil_mode ? (room + w->stride[d] - 1) / w->stride[d] : room / w->stride[d]) + 1;
    /* ceil_mode: a last window must start inside the input or its left pad */
    if (ceil_mode && (o - 1) * w->stride[d] >= s + w->lo[d]) o--;
    w->out[d] = o;
  }
  (void)pool;
  return LOOM_STATUS_OK;
}

static void set_list(loom_ints *l, int32_t k, const int64_t *v) {
  l->n = k;
  memcpy(l->v, v, sizeof *v * (size_t)k);
}

/* The window attributes every window op has. */
static void window_attrs(loom_op op, const window *w, loom_attr_value *a) {
  loom_attrs_default(op, a);
  bool pool = op == LOOM_OP_MAX_POOL || op == LOOM_OP_AVG_POOL;
  /* the pools' list starts with kernel; the conv ops' with strides */
  if (pool) {
    set_list(&LOOM_ATTRV_INTS(a, max_pool, kernel), w->k, w->kernel);
    set_list(&LOOM_ATTRV_INTS(a, max_pool, strides), w->k, w->stride);
    set_list(&LOOM_ATTRV_INTS(a, max_pool, pads_lo), w->k, w->lo);
    set_list(&LOOM_ATTRV_INTS(a, max_pool, pads_hi), w->k, w->hi);
    set_list(&LOOM_ATTRV_INTS(a, max_pool, dilations), w->k, w->dil);
  } else {
    set_list(&LOOM_ATTRV_INTS(a, conv, strides), w->k, w->stride);
    set_list(&LOOM_ATTRV_INTS(a, conv, pads_lo), w->k, w->lo);
    set_list(&LOOM_ATTRV_INTS(a, conv, pads_hi), w->k, w->hi);
    set_list(&LOOM_ATTRV_INTS(a, conv, dilations), w->k, w->dil);
  }
}

/* y + bias [M] over channel dim 1 of a rank-r y (bias -1: y). */
static int32_t add_bias(onnx_cv *cv, int32_t y, int32_t bias, int64_t m, int32_t r) {
  if (bias < 0) return y;
  int64_t bshape[LOOM_MAX_RANK];
  bshape[0] = m;
  for (int32_t d = 1; d < r - 1; d++)
    bshape[d] = 1;
  return lb_add(G, y, lb_reshape(G, bias, r - 1, bshape));
}

static loom_status done(onnx_cv *cv, int32_t y) {
  if (y < 0 && !G->err) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  cv_out(cv, 0, y);
  return LOOM_STATUS_OK;
}

loom_status onnx_cv_conv(onnx_cv *cv);
loom_status onnx_cv_conv(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *tw = cv_type(cv, 1);
  if (!loom_dtype_is_float(t->dtype))
    return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (tw->rank != t->rank || tw->dtype != t->dtype)
    return cv_invalid(cv, "weights of another rank or type");
  window w;
  LOOM_TRY(read_window(cv, t, tw->shape + 2, false, &w));
  for (int32_t d = 0; d < w.k; d++)
    if (w.kernel[d] != tw->shape[2 + d])
      return cv_invalid(cv, "kernel_shape differs from the weights'");
  int64_t g = cv_attr_i(cv, "group", 1), c = t->shape[1], m = tw->shape[0];
  if (g <= 0 || c % g || m % g || tw->shape[1] != c / g)
    return cv_invalid(cv, "group %lld for %lld channels", (long long)g, (long long)c);
  loom_attr_value a[LOOM_MAX_ATTRS];
  window_attrs(LOOM_OP_CONV, &w, a);
  LOOM_ATTRV_I(a, conv, groups) = g;
  int32_t y = lb_op(G, LOOM_OP_CONV, 2, (int32_t[]){cv_in(cv, 0), cv_in(cv, 1)}, a);
  return done(cv, add_bias(cv, y, cv_has(cv, 2) ? cv_in(cv, 2) : -1, m, t->rank));
}

/* A ConvTranspose whose kernel equals its strides (no dilation, padding
 * or groups: a DB head's or a U-Net's 2x2 stride-2 upsampling) writes
 * each input pixel's own K0 x K1 patch of the output, the patches not
 * overlapping: a 1x1 conv from C to M K0 K1 channels (the weights [C, M,
 * K...] as [M K..., C, 1...]), its channels spread into the patches by
 * a reshape and transpose ([N, M, K..., I...] to [N, M, I0, K0, ...])
 * that stitching fuses with what follows (bias, BatchNormalization,
 * activation), where conv_transpose ran oneDNN's backward-data kernel
 * (2.6x the time on pt_det_db's head). */
static int32_t patches_as_conv(onnx_cv *cv, const loom_type *t, int32_t k, int64_t m, const int64_t *kernel) {
  int64_t kp = 1, perm[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < k; d++) kp *= kernel[d];
  /* weights [C, M, K...] -> [M, K..., C] -> [M K..., C, 1...] */
  for (int32_t d = 0; d < k + 1; d++) perm[d] = d + 1;
  perm[k + 1] = 0;
  int32_t wt = lb_transpose(G, cv_in(cv, 1), perm);
  shape[0] = m * kp, shape[1] = t->shape[1];
  for (int32_t d = 0; d < k; d++) shape[2 + d] = 1;
  wt = lb_reshape(G, wt, t->rank, shape);
  window w1 = {.k = k};
  for (int32_t d = 0; d < k; d++) w1.kernel[d] = w1.stride[d] = w1.dil[d] = 1;
  loom_attr_value a[LOOM_MAX_ATTRS];
  window_attrs(LOOM_OP_CONV, &w1, a);
  LOOM_ATTRV_I(a, conv, groups) = 1;
  int32_t y = lb_op(G, LOOM_OP_CONV, 2, (int32_t[]){cv_in(cv, 0), wt}, a);
  /* [N, M K..., I...] -> [N, M, K..., I...] -> [N, M, I0, K0, I1, K1, ...] -> [N, M, I0 K0, ...] */
  shape[0] = t->shape[0], shape[1] = m;
  for (int32_t d = 0; d < k; d++) shape[2 + d] = kernel[d], shape[2 + k + d] = t->shape[2 + d];
  y = lb_reshape(G, y, 2 + 2 * k, shape);
  perm[0] = 0, perm[1] = 1;
  for (int32_t d = 0; d < k; d++) perm[2 + 2 * d] = 2 + k + d, perm[3 + 2 * d] = 2 + d;
  y = lb_transpose(G, y, perm);
  for (int32_t d = 0; d < k; d++) shape[2 + d] = t->shape[2 + d] * kernel[d];
  return lb_reshape(G, y, t->rank, shape);
}

/* ConvTranspose: the spec's padding may come out negative (an
 * output_shape larger than the strides give): negative end padding is
 * output_padding, negative start padding a run of zeros in front. */
loom_status onnx_cv_conv_transpose(onnx_cv *cv);
loom_status onnx_cv_conv_transpose(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *tw = cv_type(cv, 1);
  if (!loom_dtype_is_float(t->dtype))
    return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (tw->rank != t->rank || tw->dtype != t->dtype)
    return cv_invalid(cv, "weights of another rank or type");
  int32_t k = t->rank - 2;
  if (k < 1 || k > MAX_SPATIAL || t->rank + 1 > LOOM_MAX_RANK)
    return cv_unsupported(cv, "%d spatial dims", k);
  int64_t g = cv_attr_i(cv, "group", 1), c = t->shape[1], mg = tw->shape[1], m = mg * g;
  if (g <= 0 || c % g || tw->shape[0] != c)
    return cv_invalid(cv, "group %lld for %lld channels", (long long)g, (long long)c);
  int64_t v[2 * MAX_SPATIAL], kernel[MAX_SPATIAL], stride[MAX_SPATIAL], dil[MAX_SPATIAL],
      lo[MAX_SPATIAL] = {0}, hi[MAX_SPATIAL] = {0}, opad[MAX_SPATIAL] = {0}, oshape[MAX_SPATIAL];
  int32_t n;
  for (int32_t d = 0; d < k; d++) {
    kernel[d] = tw->shape[2 + d];
    stride[d] = dil[d] = 1;
  }
  if ((n = cv_attr_ints(cv, "kernel_shape", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++)
      if (v[d] != kernel[d]) return cv_invalid(cv, "kernel_shape differs from the weights'");
  if ((n = cv_attr_ints(cv, "strides", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++)
      stride[d] = v[d];
  if ((n = cv_attr_ints(cv, "dilations", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++)
      dil[d] = v[d];
  if ((n = cv_attr_ints(cv, "output_padding", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++)
      opad[d] = v[d];
  if ((n = cv_attr_ints(cv, "pads", v, 2 * MAX_SPATIAL)) >= 0) {
    if (n != 2 * k) return cv_invalid(cv, "pads has %d values", n);
    for (int32_t d = 0; d < k; d++) {
      lo[d] = v[d];
      hi[d] = v[d + k];
    }
  }
  int32_t n_os = cv_attr_ints(cv, "output_shape", oshape, MAX_SPATIAL);
  if (cv->st) return cv->st;
  const char *ap = cv_attr_s(cv, "auto_pad", "NOTSET");
  bool same = strncmp(ap, "SAME_", 5) == 0, upper = strcmp(ap, "SAME_UPPER") == 0;
  if (!same && strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
    return cv_unsupported(cv, "auto_pad '%s'", ap);
  for (int32_t d = 0; d < k; d++) {
    if (stride[d] <= 0 || dil[d] <= 0 || opad[d] < 0)
      return cv_invalid(cv, "bad strides, dilations or output_padding");
    if (n_os < 0 && !same && (lo[d] < 0 || hi[d] < 0)) return cv_invalid(cv, "negative pads");
    int64_t in = t->shape[2 + d],
            full = stride[d] * (in - 1) + opad[d] + (kernel[d] - 1) * dil[d] + 1;
    if (strcmp(ap, "VALID") == 0) lo[d] = hi[d] = 0;
    if (n_os >= 0 || same) {
      /* the spec's split of the total padding (floor halves; a negative
       * total widens the output at the end) */
      int64_t out = n_os >= 0 ? oshape[n_os - k + d] : in * stride[d];
      int64_t total = full - out, half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (upper) {
        lo[d] = half;
        hi[d] = total - half;
      } else {
        hi[d] = half;
        lo[d] = total - half;
      }
    }
  }
  window w = {.k = k};
  int64_t opad_all[MAX_SPATIAL], front[LOOM_MAX_RANK] = {0}, back[LOOM_MAX_RANK] = {0};
  bool pad_front = false;
  for (int32_t d = 0; d < k; d++) {
    w.kernel[d] = kernel[d];
    w.stride[d] = stride[d];
    w.dil[d] = dil[d];
    w.lo[d] = LOOM_MAX(lo[d], 0);
    w.hi[d] = LOOM_MAX(hi[d], 0);
    opad_all[d] = opad[d] + LOOM_MAX(-hi[d], 0);
    front[2 + d] = LOOM_MAX(-lo[d], 0);
    pad_front |= lo[d] < 0;
  }
  bool patches = g == 1 && !pad_front && 2 + 2 * k <= LOOM_MAX_RANK;
  for (int32_t d = 0; d < k; d++)
    patches &= kernel[d] == stride[d] && dil[d] == 1 && w.lo[d] == 0 && w.hi[d] == 0 && opad_all[d] == 0;
  if (patches)
    return done(cv, add_bias(cv, patches_as_conv(cv, t, k, m, kernel), cv_has(cv, 2) ? cv_in(cv, 2) : -1, m,
                             t->rank));
  loom_attr_value a[LOOM_MAX_ATTRS];
  window_attrs(LOOM_OP_CONV_TRANSPOSE, &w, a);
  LOOM_ATTRV_I(a, conv_transpose, groups) = g;
  set_list(&LOOM_ATTRV_INTS(a, conv_transpose, output_padding), k, opad_all);
  int32_t y = lb_op(G, LOOM_OP_CONV_TRANSPOSE, 2, (int32_t[]){cv_in(cv, 0), cv_in(cv, 1)}, a);
  if (pad_front) y = lb_pad(G, y, front, back, 0);
  return done(cv, add_bias(cv, y, cv_has(cv, 2) ? cv_in(cv, 2) : -1, m, t->rank));
}

/* MaxPool's Indices: for each output position the flat index over the
 * whole input [N, C, S...] (spatial dims row-major, or column-major with
 * storage_order 1) of the first maximum in the window's row-major order,
 * as ONNX Runtime and PyTorch pick it. Decomposed (a model asks for it
 * rarely; the values still come from max_pool): the windows gathered
 * from the input padded with -inf into [N, C, O..., K], the first
 * position j of the maximum along K, and a table of each (o, j)'s input
 * position built at load time. */
static int32_t pool_indices(onnx_cv *cv, const window *w, int32_t x, const loom_type *t,
                            bool col_major) {
  int32_t k = w->k, r = t->rank;
  int64_t lo[LOOM_MAX_RANK] = {0}, hi[LOOM_MAX_RANK] = {0}, ktot = 1, otot = 1;
  for (int32_t d = 0; d < k; d++) {
    int64_t span = w->dil[d] * (w->kernel[d] - 1) + 1;
    lo[2 + d] = w->lo[d];
    hi[2 + d] = LOOM_MAX(0, (w->out[d] - 1) * w->stride[d] + span - t->shape[2 + d] - w->lo[d]);
    ktot *= w->kernel[d];
    otot *= w->out[d];
  }
  /* [N, C, O0, K0, O1, K1, ...]: along each padded dim, positions
   * o * stride + j * dil */
  int32_t p = lb_pad(G, x, lo, hi, -INFINITY);
  for (int32_t d = 0; d < k; d++) {
    int64_t no = w->out[d], nk = w->kernel[d];
    double *at = malloc(sizeof(double) * (size_t)(no * nk));
    if (!at) return -1;
    for (int64_t o = 0; o < no; o++)
      for (int64_t j = 0; j < nk; j++) at[o * nk + j] = (double)(o * w->stride[d] + j * w->dil[d]);
    int32_t idx = cv_const_values(cv, LOOM_DTYPE_I64, 2, (int64_t[]){no, nk}, at);
    free(at);
    p = lb_gather(G, p, idx, 2 + 2 * d);
  }
  int64_t perm[LOOM_MAX_RANK] = {0, 1}, shape[LOOM_MAX_RANK] = {t->shape[0], t->shape[1]};
  for (int32_t d = 0; d < k; d++) {
    perm[2 + d] = 2 + 2 * d;
    perm[2 + k + d] = 3 + 2 * d;
    shape[2 + d] = w->out[d];
  }
  shape[2 + k] = ktot;
  p = lb_reshape(G, lb_transpose(G, p, perm), r + 1, shape);
  /* the first j reaching the window's maximum */
  int64_t last = r;
  int32_t hit = lb_binary(G, LOOM_OP_EQ, p, lb_reduce(G, LOOM_OP_REDUCE_MAX, p, 1, &last, true));
  int32_t js = lb_iota(G, LOOM_DTYPE_I64, r + 1, shape, r);
  int32_t first = lb_reduce(G, LOOM_OP_REDUCE_MIN,
                            lb_select(G, hit, js, lb_scalar(G, LOOM_DTYPE_I64, (double)ktot)), 1,
                            &last, true);
  /* its input position, from the table [O..., K] */
  double *pos = malloc(sizeof(double) * (size_t)(otot * ktot));
  if (!pos) return -1;
  for (int64_t oo = 0; oo < otot; oo++)
    for (int64_t jj = 0; jj < ktot; jj++) {
      int64_t orest = oo, jrest = jj, flat = 0, scale = 1;
      int64_t at[MAX_SPATIAL];
      for (int32_t d = k - 1; d >= 0; d--) {
        at[d] = orest % w->out[d] * w->stride[d] + jrest % w->kernel[d] * w->dil[d] - w->lo[d];
        orest /= w->out[d];
        jrest /= w->kernel[d];
      }
      for (int32_t i = 0; i < k; i++) {
        int32_t d = col_major ? i : k - 1 - i;
        flat += at[d] * scale;
        scale *= t->shape[2 + d];
      }
      pos[oo * ktot + jj] = (double)flat;
    }
  int32_t table = cv_const_values(cv, LOOM_DTYPE_I64, r - 1, shape + 2, pos);
  free(pos);
  int32_t sel = lb_select(G, lb_binary(G, LOOM_OP_EQ, js, first), table,
                          lb_scalar(G, LOOM_DTYPE_I64, 0.0));
  int32_t spatial = lb_reduce(G, LOOM_OP_REDUCE_SUM, sel, 1, &last, false);
  /* plus the plane's start: (n * C + c) * prod(S) */
  int64_t plane = 1, nc[LOOM_MAX_RANK] = {t->shape[0], t->shape[1]};
  for (int32_t d = 0; d < k; d++) {
    plane *= t->shape[2 + d];
    nc[2 + d] = 1;
  }
  int32_t n = lb_iota(G, LOOM_DTYPE_I64, r, nc, 0), c = lb_iota(G, LOOM_DTYPE_I64, r, nc, 1);
  int32_t start = lb_mul(G, lb_add(G, lb_mul(G, n, lb_scalar(G, LOOM_DTYPE_I64, (double)nc[1])), c),
                         lb_scalar(G, LOOM_DTYPE_I64, (double)plane));
  return lb_add(G, spatial, start);
}

static loom_status pool(onnx_cv *cv, bool max) {
  const loom_type *t = cv_type(cv, 0);
  if (!loom_dtype_is_float(t->dtype))
    return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  bool indices = cv->n_out > 1 && cv->node->out[1][0];
  int64_t order = cv_attr_i(cv, "storage_order", 0);
  if (indices && (order < 0 || order > 1)) return cv_invalid(cv, "storage_order %lld", (long long)order);
  if (indices && 2 * t->rank - 2 > LOOM_MAX_RANK)
    return cv_unsupported(cv, "the Indices output over %d spatial dims", t->rank - 2);
  window w;
  LOOM_TRY(read_window(cv, t, NULL, true, &w));
  double table = 1; /* pool_indices' table: output positions x window positions */
  for (int32_t d = 0; indices && d < w.k; d++)
    table *= (double)w.out[d] * (double)w.kernel[d];
  if (indices && table > (double)MAX_INDEX_TABLE)
    return cv_unsupported(cv, "the Indices output over %.0f (output, window) positions", table);
  if (indices) {
    int32_t ix = pool_indices(cv, &w, cv_in(cv, 0), t, order == 1);
    if (ix < 0 && !G->err) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    cv_out(cv, 1, ix);
  }
  loom_op op = max ? LOOM_OP_MAX_POOL : LOOM_OP_AVG_POOL;
  loom_attr_value a[LOOM_MAX_ATTRS];
  window_attrs(op, &w, a);
  LOOM_ATTRV_I(a, max_pool, ceil_mode) = cv_attr_i(cv, "ceil_mode", 0) != 0;
  LOOM_ATTRV_I(a, max_pool, count_include_pad) = !max && cv_attr_i(cv, "count_include_pad", 0) != 0;
  int32_t x = cv_in(cv, 0);
  return done(cv, lb_op(G, op, 1, &x, a));
}

loom_status onnx_cv_max_pool(onnx_cv *cv);
loom_status onnx_cv_max_pool(onnx_cv *cv) { return pool(cv, true); }
loom_status onnx_cv_average_pool(onnx_cv *cv);
loom_status onnx_cv_average_pool(onnx_cv *cv) { return pool(cv, false); }

/* GlobalAveragePool / GlobalMaxPool: one window over every spatial dim. */
static loom_status global_pool(onnx_cv *cv, bool max) {
  const loom_type *t = cv_type(cv, 0);
  if (!loom_dtype_is_float(t->dtype))
    return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (t->rank < 3 || t->rank - 2 > MAX_SPATIAL) return cv_invalid(cv, "input of rank %d", t->rank);
  window w = {.k = t->rank - 2};
  for (int32_t d = 0; d < w.k; d++) {
    w.kernel[d] = t->shape[2 + d];
    w.stride[d] = w.dil[d] = 1;
    if (w.kernel[d] < 1) return cv_invalid(cv, "an empty spatial dim");
  }
  loom_op op = max ? LOOM_OP_MAX_POOL : LOOM_OP_AVG_POOL;
  loom_attr_value a[LOOM_MAX_ATTRS];
  window_attrs(op, &w, a);
  int32_t x = cv_in(cv, 0);
  return done(cv, lb_op(G, op, 1, &x, a));
}

loom_status onnx_cv_global_average_pool(onnx_cv *cv);
loom_status onnx_cv_global_average_pool(onnx_cv *cv) { return global_pool(cv, false); }
loom_status onnx_cv_global_max_pool(onnx_cv *cv);
loom_status onnx_cv_global_max_pool(onnx_cv *cv) { return global_pool(cv, true); }

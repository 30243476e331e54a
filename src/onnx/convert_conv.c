/*
 * Convolutions and pooling, decomposed: the input's windows are gathered
 * into patches [N, C, K, O...] (K the kernel's positions, O the output's
 * spatial dims) by slices of the padded input, then a GEMM against the
 * weights (Conv) or a reduction over K (MaxPool, AveragePool). Any number
 * of spatial dims up to 5, strides, dilations, explicit or automatic
 * padding, groups, ceil_mode.
 */
#include "onnx/import_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define G (cv->g)
#define MAX_SPATIAL 5
#define MAX_KERNEL 4096

typedef struct window {
  int32_t k; /* spatial dims */
  int64_t kernel[MAX_SPATIAL], stride[MAX_SPATIAL], dil[MAX_SPATIAL];
  int64_t lo[MAX_SPATIAL], hi[MAX_SPATIAL]; /* explicit padding */
  int64_t extra[MAX_SPATIAL];                /* ceil_mode's padding past hi */
  int64_t out[MAX_SPATIAL];
} window;

/* Reads kernel (given: from the weights), strides, dilations, pads and
 * auto_pad for an input whose spatial dims are shape[2..]. */
static loom_status read_window(onnx_cv *cv, const loom_type *t, const int64_t *kernel_given, bool pool,
                               window *w) {
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
    for (int32_t d = 0; d < w->k && d < n; d++) w->stride[d] = v[d];
  if ((n = cv_attr_ints(cv, "dilations", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < w->k && d < n; d++) w->dil[d] = v[d];
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
    w->extra[d] = LOOM_MAX(0, (o - 1) * w->stride[d] + span - (s + w->lo[d] + w->hi[d]));
  }
  (void)pool;
  return LOOM_STATUS_OK;
}

/* x [N, C, S...] -> [N, C, K, O...]: pads with `value` (explicit pads) and
 * `extra_value` (ceil_mode's extra), then one strided slice per kernel
 * position. */
static int32_t patches(onnx_cv *cv, int32_t x, const window *w, double value, double extra_value) {
  loom_type t = G->values[x < 0 ? 0 : x].type;
  if (x < 0) return -1;
  int32_t r = t.rank;
  int64_t lo[LOOM_MAX_RANK] = {0}, hi[LOOM_MAX_RANK] = {0};
  bool pad = false, extra = false;
  for (int32_t d = 0; d < w->k; d++) {
    lo[2 + d] = w->lo[d];
    hi[2 + d] = w->hi[d];
    pad |= w->lo[d] || w->hi[d];
    extra |= w->extra[d] != 0;
  }
  if (pad) x = lb_pad(G, x, lo, hi, value);
  if (extra) {
    int64_t z[LOOM_MAX_RANK] = {0}, e[LOOM_MAX_RANK] = {0};
    for (int32_t d = 0; d < w->k; d++) e[2 + d] = w->extra[d];
    x = lb_pad(G, x, z, e, extra_value);
  }
  int64_t kk = 1;
  for (int32_t d = 0; d < w->k; d++) kk *= w->kernel[d];
  int32_t *parts = malloc(sizeof *parts * (size_t)kk);
  if (!parts) return -1;
  int64_t unsq[LOOM_MAX_RANK];
  unsq[0] = t.shape[0];
  unsq[1] = t.shape[1];
  unsq[2] = 1;
  for (int32_t d = 0; d < w->k; d++) unsq[3 + d] = w->out[d];
  for (int64_t p = 0; p < kk; p++) {
    int64_t pos[MAX_SPATIAL], rest = p;
    for (int32_t d = w->k - 1; d >= 0; d--) {
      pos[d] = rest % w->kernel[d];
      rest /= w->kernel[d];
    }
    int64_t s[LOOM_MAX_RANK] = {0}, e[LOOM_MAX_RANK];
    e[0] = t.shape[0];
    e[1] = t.shape[1];
    for (int32_t d = 0; d < w->k; d++) {
      s[2 + d] = pos[d] * w->dil[d];
      e[2 + d] = s[2 + d] + (w->out[d] - 1) * w->stride[d] + 1;
    }
    int32_t y = lb_slice(G, x, s, e);
    for (int32_t d = 0; d < w->k; d++) {
      if (w->stride[d] == 1) continue;
      double *idx = malloc(sizeof(double) * (size_t)w->out[d]);
      if (!idx) {
        free(parts);
        return -1;
      }
      for (int64_t i = 0; i < w->out[d]; i++) idx[i] = (double)(i * w->stride[d]);
      int32_t iv = cv_const_values(cv, LOOM_DTYPE_I64, 1, &w->out[d], idx);
      free(idx);
      y = lb_gather(G, y, iv, 2 + d);
    }
    parts[p] = lb_reshape(G, y, r + 1, unsq);
  }
  int32_t out = kk == 1 ? parts[0] : lb_concat(G, (int32_t)kk, parts, 2);
  free(parts);
  return out;
}

static int64_t kernel_size(const window *w) {
  int64_t kk = 1;
  for (int32_t d = 0; d < w->k; d++) kk *= w->kernel[d];
  return kk;
}

/* y = conv(x, weights [M, C/g, k...]) over window w with g groups, plus
 * bias [M] (bias -1: none). */
static int32_t conv_core(onnx_cv *cv, int32_t x, const loom_type *t, int32_t wv, const loom_type *tw, const window *w,
                         int64_t g, int32_t bias) {
  int64_t n = t->shape[0], c = t->shape[1], m = tw->shape[0], kk = kernel_size(w), op = 1;
  for (int32_t d = 0; d < w->k; d++) op *= w->out[d];
  int32_t p = patches(cv, x, w, 0, 0);
  int64_t cg = c / g, mg = m / g;
  int32_t *ys = malloc(sizeof *ys * (size_t)g);
  if (!ys) return -1;
  for (int64_t gi = 0; gi < g; gi++) {
    int32_t pg = p, wg = wv;
    if (g > 1) {
      int64_t s[LOOM_MAX_RANK] = {0}, e[LOOM_MAX_RANK];
      loom_type pt = G->values[p < 0 ? 0 : p].type;
      for (int32_t d = 0; d < pt.rank; d++) e[d] = pt.shape[d];
      s[1] = gi * cg;
      e[1] = (gi + 1) * cg;
      pg = lb_slice(G, p, s, e);
      int64_t ws[LOOM_MAX_RANK] = {0}, we[LOOM_MAX_RANK];
      for (int32_t d = 0; d < tw->rank; d++) we[d] = tw->shape[d];
      ws[0] = gi * mg;
      we[0] = (gi + 1) * mg;
      wg = lb_slice(G, wv, ws, we);
    }
    /* [N, Cg*K, O] and [N, Mg, Cg*K] (the weights broadcast over N) */
    pg = lb_reshape(G, pg, 3, (int64_t[]){n, cg * kk, op});
    wg = lb_reshape(G, wg, 3, (int64_t[]){1, mg, cg * kk});
    wg = lb_broadcast_to(G, wg, 3, (int64_t[]){n, mg, cg * kk});
    ys[gi] = lb_matmul(G, wg, pg, false, false);
  }
  int32_t y = g == 1 ? ys[0] : lb_concat(G, (int32_t)g, ys, 1);
  free(ys);
  int64_t oshape[LOOM_MAX_RANK];
  oshape[0] = n;
  oshape[1] = m;
  for (int32_t d = 0; d < w->k; d++) oshape[2 + d] = w->out[d];
  y = lb_reshape(G, y, t->rank, oshape);
  if (bias >= 0) {
    int64_t bshape[LOOM_MAX_RANK];
    bshape[0] = m;
    for (int32_t d = 0; d < w->k; d++) bshape[1 + d] = 1;
    y = lb_add(G, y, lb_reshape(G, bias, w->k + 1, bshape));
  }
  return y;
}

loom_status onnx_cv_conv(onnx_cv *cv);
loom_status onnx_cv_conv(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *tw = cv_type(cv, 1);
  if (!loom_dtype_is_float(t->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (tw->rank != t->rank || tw->dtype != t->dtype) return cv_invalid(cv, "weights of another rank or type");
  window w;
  LOOM_TRY(read_window(cv, t, tw->shape + 2, false, &w));
  for (int32_t d = 0; d < w.k; d++)
    if (w.kernel[d] != tw->shape[2 + d]) return cv_invalid(cv, "kernel_shape differs from the weights'");
  int64_t g = cv_attr_i(cv, "group", 1), c = t->shape[1], m = tw->shape[0];
  if (kernel_size(&w) > MAX_KERNEL) return cv_unsupported(cv, "a kernel of %lld positions", (long long)kernel_size(&w));
  if (g <= 0 || c % g || m % g || tw->shape[1] != c / g) return cv_invalid(cv, "group %lld for %lld channels", (long long)g, (long long)c);
  int32_t y = conv_core(cv, cv_in(cv, 0), t, cv_in(cv, 1), tw, &w, g, cv_has(cv, 2) ? cv_in(cv, 2) : -1);
  if (y < 0 && !G->err) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  cv_out(cv, 0, y);
  return LOOM_STATUS_OK;
}

/* ConvTranspose as a convolution: the input with stride-1 zeros between
 * its elements, padded by dilation*(k-1) less the pads (cropped where that
 * is negative), against the weights flipped with input and output
 * channels swapped per group. */
loom_status onnx_cv_conv_transpose(onnx_cv *cv);
loom_status onnx_cv_conv_transpose(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *tw = cv_type(cv, 1);
  if (!loom_dtype_is_float(t->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (tw->rank != t->rank || tw->dtype != t->dtype) return cv_invalid(cv, "weights of another rank or type");
  int32_t k = t->rank - 2;
  if (k < 1 || k > MAX_SPATIAL || t->rank + 1 > LOOM_MAX_RANK) return cv_unsupported(cv, "%d spatial dims", k);
  int64_t g = cv_attr_i(cv, "group", 1), c = t->shape[1], mg = tw->shape[1], m = mg * g;
  if (g <= 0 || c % g || tw->shape[0] != c) return cv_invalid(cv, "group %lld for %lld channels", (long long)g, (long long)c);
  int64_t v[2 * MAX_SPATIAL], kernel[MAX_SPATIAL], stride[MAX_SPATIAL], dil[MAX_SPATIAL], lo[MAX_SPATIAL] = {0},
      hi[MAX_SPATIAL] = {0}, opad[MAX_SPATIAL] = {0}, oshape[MAX_SPATIAL];
  int32_t n;
  for (int32_t d = 0; d < k; d++) {
    kernel[d] = tw->shape[2 + d];
    stride[d] = dil[d] = 1;
  }
  if ((n = cv_attr_ints(cv, "kernel_shape", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++)
      if (v[d] != kernel[d]) return cv_invalid(cv, "kernel_shape differs from the weights'");
  if ((n = cv_attr_ints(cv, "strides", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++) stride[d] = v[d];
  if ((n = cv_attr_ints(cv, "dilations", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++) dil[d] = v[d];
  if ((n = cv_attr_ints(cv, "output_padding", v, MAX_SPATIAL)) >= 0)
    for (int32_t d = 0; d < k && d < n; d++) opad[d] = v[d];
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
  if (!same && strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) return cv_unsupported(cv, "auto_pad '%s'", ap);
  for (int32_t d = 0; d < k; d++) {
    if (stride[d] <= 0 || dil[d] <= 0 || opad[d] < 0) return cv_invalid(cv, "bad strides, dilations or output_padding");
    if (n_os < 0 && !same && (lo[d] < 0 || hi[d] < 0)) return cv_invalid(cv, "negative pads");
    int64_t in = t->shape[2 + d], full = stride[d] * (in - 1) + opad[d] + (kernel[d] - 1) * dil[d] + 1;
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
  /* zeros between the input's elements */
  int32_t x = cv_in(cv, 0);
  loom_type cur = *t;
  for (int32_t d = 0; d < k; d++) {
    if (stride[d] == 1) continue;
    int32_t a = 2 + d;
    int64_t s1[LOOM_MAX_RANK], l0[LOOM_MAX_RANK] = {0}, h0[LOOM_MAX_RANK] = {0};
    for (int32_t e = 0, j = 0; e <= cur.rank; e++) s1[e] = e == a + 1 ? 1 : cur.shape[j++];
    h0[a + 1] = stride[d] - 1;
    x = lb_pad(G, lb_reshape(G, x, cur.rank + 1, s1), l0, h0, 0);
    int64_t len = cur.shape[a];
    cur.shape[a] = len * stride[d];
    x = lb_reshape(G, x, cur.rank, cur.shape);
    int64_t st[LOOM_MAX_RANK] = {0}, en[LOOM_MAX_RANK];
    for (int32_t e = 0; e < cur.rank; e++) en[e] = cur.shape[e];
    en[a] = (len - 1) * stride[d] + 1;
    cur.shape[a] = en[a];
    x = lb_slice(G, x, st, en);
  }
  /* crop where the pads exceed dilation*(k-1), pad the rest */
  window w;
  memset(&w, 0, sizeof w);
  w.k = k;
  int64_t st[LOOM_MAX_RANK] = {0}, en[LOOM_MAX_RANK];
  bool crop = false;
  for (int32_t e = 0; e < cur.rank; e++) en[e] = cur.shape[e];
  for (int32_t d = 0; d < k; d++) {
    int64_t span = dil[d] * (kernel[d] - 1), l = span - lo[d], h = span - hi[d] + opad[d];
    if (l < 0) {
      st[2 + d] = -l;
      crop = true;
      l = 0;
    }
    if (h < 0) {
      en[2 + d] += h;
      crop = true;
      h = 0;
    }
    if (en[2 + d] <= st[2 + d]) return cv_invalid(cv, "pads larger than the output");
    w.kernel[d] = kernel[d];
    w.stride[d] = 1;
    w.dil[d] = dil[d];
    w.lo[d] = l;
    w.hi[d] = h;
    w.out[d] = en[2 + d] - st[2 + d] + l + h - span;
    if (w.out[d] <= 0) return cv_invalid(cv, "an empty output");
  }
  if (crop) {
    x = lb_slice(G, x, st, en);
    for (int32_t d = 0; d < k; d++) cur.shape[2 + d] = en[2 + d] - st[2 + d];
  }
  if (kernel_size(&w) > MAX_KERNEL) return cv_unsupported(cv, "a kernel of %lld positions", (long long)kernel_size(&w));
  /* weights [C, M/g, k...] -> [M, C/g, k...], flipped */
  int64_t s5[LOOM_MAX_RANK], perm[LOOM_MAX_RANK], s3[LOOM_MAX_RANK];
  s5[0] = g;
  s5[1] = c / g;
  s5[2] = mg;
  perm[0] = 0;
  perm[1] = 2;
  perm[2] = 1;
  s3[0] = m;
  s3[1] = c / g;
  for (int32_t d = 0; d < k; d++) {
    s5[3 + d] = kernel[d];
    perm[3 + d] = 3 + d;
    s3[2 + d] = kernel[d];
  }
  int32_t wv = lb_reshape(G, lb_transpose(G, lb_reshape(G, cv_in(cv, 1), k + 3, s5), perm), k + 2, s3);
  for (int32_t d = 0; d < k; d++) {
    double rev[MAX_KERNEL];
    if (kernel[d] > MAX_KERNEL) return cv_unsupported(cv, "a kernel of %lld", (long long)kernel[d]);
    for (int64_t i = 0; i < kernel[d]; i++) rev[i] = (double)(kernel[d] - 1 - i);
    wv = lb_gather(G, wv, cv_const_values(cv, LOOM_DTYPE_I64, 1, &kernel[d], rev), 2 + d);
  }
  loom_type tw2 = {.dtype = t->dtype, .rank = k + 2};
  memcpy(tw2.shape, s3, sizeof s3);
  int32_t y = conv_core(cv, x, &cur, wv, &tw2, &w, g, cv_has(cv, 2) ? cv_in(cv, 2) : -1);
  if (y < 0 && !G->err) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  cv_out(cv, 0, y);
  return LOOM_STATUS_OK;
}

static loom_status pool(onnx_cv *cv, bool max) {
  const loom_type *t = cv_type(cv, 0);
  if (!loom_dtype_is_float(t->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  if (cv->n_out > 1 && cv->node->out[1][0]) return cv_unsupported(cv, "the Indices output");
  window w;
  LOOM_TRY(read_window(cv, t, NULL, true, &w));
  int64_t kk = kernel_size(&w);
  if (kk > MAX_KERNEL) return cv_unsupported(cv, "a kernel of %lld positions", (long long)kk);
  int32_t x = cv_in(cv, 0);
  int64_t ax = 2;
  if (max) {
    int32_t p = patches(cv, x, &w, -INFINITY, -INFINITY);
    cv_out(cv, 0, lb_reduce(G, LOOM_OP_REDUCE_MAX, p, 1, &ax, false));
    return LOOM_STATUS_OK;
  }
  int32_t p = patches(cv, x, &w, 0, 0);
  int32_t sum = lb_reduce(G, LOOM_OP_REDUCE_SUM, p, 1, &ax, false);
  /* the divisor: the window's positions inside the input (and inside the
   * explicit pads with count_include_pad), from the same windows over ones */
  bool include = cv_attr_i(cv, "count_include_pad", 0) != 0;
  int64_t one_shape[LOOM_MAX_RANK];
  one_shape[0] = one_shape[1] = 1;
  for (int32_t d = 0; d < w.k; d++) one_shape[2 + d] = t->shape[2 + d];
  int32_t ones = lb_const(G, t->dtype, t->rank, one_shape, 1.0);
  int32_t cnt = lb_reduce(G, LOOM_OP_REDUCE_SUM, patches(cv, ones, &w, include ? 1.0 : 0.0, 0.0), 1, &ax, false);
  cv_out(cv, 0, lb_div(G, sum, cnt));
  return LOOM_STATUS_OK;
}

loom_status onnx_cv_max_pool(onnx_cv *cv);
loom_status onnx_cv_max_pool(onnx_cv *cv) { return pool(cv, true); }
loom_status onnx_cv_average_pool(onnx_cv *cv);
loom_status onnx_cv_average_pool(onnx_cv *cv) { return pool(cv, false); }

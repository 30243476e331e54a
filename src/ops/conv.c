/*
 * Convolutions: conv, conv_transpose and conv_grad_weight, the three
 * products of one sliding window (window.h) between a big side
 * [N, Cb, S...], weights [Ms, Cb/g, K...] and a small side [N, Ms, O...]
 * with g groups (small channel m belongs to group m / (Ms/g), which reads
 * big channels of the same group):
 *   big[n, cb, p] * w[m, c, j] * small[n, m, o],  p = o*stride + j*dil - lo
 * summed over everything but the result's dims. conv gives the small side
 * (x is the big side), conv_transpose the big side (x is the small side,
 * weights [C, M/g, K...] read the same way), conv_grad_weight the weights.
 * Each is the others' gradient.
 */
#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/ops_util.h"
#include "ops/window.h"

#include <stdlib.h>
#include <string.h>

typedef enum conv_result { RESULT_SMALL, RESULT_BIG, RESULT_WEIGHTS } conv_result;

static conv_result result_of(loom_op op) {
  return op == LOOM_OP_CONV             ? RESULT_SMALL
         : op == LOOM_OP_CONV_TRANSPOSE ? RESULT_BIG
                                        : RESULT_WEIGHTS;
}

/* The window and channel counts of n from its input types: *cb big-side
 * channels, *ms small-side channels; checks everything shape inference
 * needs. */
static loom_status conv_geometry(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 loom_window *w, int64_t *batch, int64_t *cb, int64_t *ms) {
  char b0[128], b1[128];
  const loom_type *x = &in[0], *y = &in[1];
  if (x->dtype != y->dtype || !loom_dtype_is_float(x->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "inputs need the same float dtype, got %s and %s",
                      loom_type_str(x, b0, sizeof b0), loom_type_str(y, b1, sizeof b1));
  if (x->rank < 3 || x->rank != y->rank)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "inputs need the same rank >= 3 ([N, C, spatial...]), got %s and %s",
                      loom_type_str(x, b0, sizeof b0), loom_type_str(y, b1, sizeof b1));
  int32_t k = x->rank - 2;
  conv_result r = result_of(n->op);
  /* conv and conv_transpose: y is the weights; conv_grad_weight: dy */
  const int64_t *kernel = r == RESULT_WEIGHTS ? NULL : y->shape + 2;
  LOOM_TRY(loom_window_read(ctx, n, k, x->shape + 2, x->shape + 2, kernel, w));
  int64_t g = w->groups;
  *batch = x->shape[0];
  if (r == RESULT_SMALL) {
    *cb = x->shape[1];
    *ms = y->shape[0];
  } else if (r == RESULT_BIG) {
    *ms = x->shape[1];
    *cb = y->shape[1] * g;
  } else {
    *cb = x->shape[1];
    *ms = y->shape[1];
  }
  bool ok = *cb % g == 0 && *ms % g == 0;
  if (r == RESULT_SMALL) ok = ok && y->shape[1] * g == *cb;
  if (r == RESULT_BIG) ok = ok && y->shape[0] == *ms;
  if (!ok)
    return loom_error(
        ctx, LOOM_STATUS_SHAPE_MISMATCH, "channels of %s and %s do not match in %lld groups",
        loom_type_str(x, b0, sizeof b0), loom_type_str(y, b1, sizeof b1), (long long)g);
  if (r == RESULT_WEIGHTS) {
    bool same = y->shape[0] == x->shape[0];
    for (int32_t d = 0; d < k; d++)
      same = same && y->shape[2 + d] == w->small[d];
    if (!same)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "the output gradient %s is not the shape the window gives over %s",
                        loom_type_str(y, b1, sizeof b1), loom_type_str(x, b0, sizeof b0));
  }
  return LOOM_STATUS_OK;
}

static loom_status infer_conv(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              loom_type *out) {
  loom_window w;
  int64_t batch, cb, ms;
  LOOM_TRY(conv_geometry(ctx, n, in, &w, &batch, &cb, &ms));
  loom_type t = {.dtype = in[0].dtype, .rank = w.k + 2};
  conv_result r = result_of(n->op);
  t.shape[0] = r == RESULT_WEIGHTS ? ms : batch;
  t.shape[1] = r == RESULT_SMALL ? ms : r == RESULT_BIG ? cb : cb / w.groups;
  for (int32_t d = 0; d < w.k; d++)
    t.shape[2 + d] = r == RESULT_SMALL ? w.small[d] : r == RESULT_BIG ? w.big[d] : w.kernel[d];
  LOOM_TRY(loom_shape_check(ctx, t.rank, t.shape, NULL));
  out[0] = t;
  return LOOM_STATUS_OK;
}

/* A view's elements as doubles, row-major. */
static double *load_all(loom_ctx *ctx, const loom_view *v) {
  int64_t n = loom_view_numel(v);
  double *d = loom_malloc(ctx, sizeof(double) * (size_t)(n ? n : 1));
  if (d)
    for (int64_t i = 0; i < n; i++)
      d[i] = loom_view_get(v, i);
  return d;
}

/* Every (n, m, c, o, j) term once, added into the result's array. */
static void conv_terms(const loom_window *w, conv_result r, int64_t batch, int64_t cb, int64_t ms,
                       double *big, double *wt, double *small) {
  int64_t g = w->groups, cg = cb / g, mg = ms / g;
  int64_t nb = loom_window_big_numel(w), ns = loom_window_small_numel(w);
  int64_t nk = loom_window_kernel_numel(w);
  for (int64_t n = 0; n < batch; n++)
    for (int64_t m = 0; m < ms; m++)
      for (int64_t c = 0; c < cg; c++) {
        double *bp = big + (n * cb + m / mg * cg + c) * nb, *wp = wt + (m * cg + c) * nk;
        double *sp = small + (n * ms + m) * ns;
        for (int64_t o = 0; o < ns; o++)
          for (int64_t j = 0; j < nk; j++) {
            int64_t p;
            if (!loom_window_at(w, o, j, &p)) continue;
            if (r == RESULT_SMALL)
              sp[o] += bp[p] * wp[j];
            else if (r == RESULT_BIG)
              bp[p] += sp[o] * wp[j];
            else
              wp[j] += bp[p] * sp[o];
          }
      }
}

static loom_status ref_conv(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  loom_type t[2];
  for (int32_t i = 0; i < 2; i++) {
    t[i] = (loom_type){.dtype = in[i].dtype, .rank = in[i].rank};
    memcpy(t[i].shape, in[i].shape, sizeof t[i].shape);
  }
  loom_window w;
  int64_t batch, cb, ms;
  LOOM_TRY(conv_geometry(ctx, n, t, &w, &batch, &cb, &ms));
  conv_result r = result_of(n->op);
  double *a = load_all(ctx, &in[0]), *b = load_all(ctx, &in[1]);
  int64_t no = loom_view_numel(&out[0]);
  double *res = loom_calloc(ctx, (size_t)(no ? no : 1), sizeof *res);
  loom_status st = a && b && res ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    if (r == RESULT_SMALL)
      conv_terms(&w, r, batch, cb, ms, a, b, res);
    else if (r == RESULT_BIG)
      conv_terms(&w, r, batch, cb, ms, res, b, a);
    else
      conv_terms(&w, r, batch, cb, ms, a, res, b);
    for (int64_t i = 0; i < no; i++)
      loom_view_set(&out[0], i, res[i]);
  }
  free(a);
  free(b);
  free(res);
  return st;
}

/* The window attributes of n (a conv op) in a, an attribute array of op. */
static void copy_window(const loom_node *n, loom_op op, loom_attr_value *a) {
  loom_attrs_default(op, a);
  LOOM_ATTRV_INTS(a, conv, strides) = LOOM_ATTR_INTS(n, conv, strides);
  LOOM_ATTRV_INTS(a, conv, pads_lo) = LOOM_ATTR_INTS(n, conv, pads_lo);
  LOOM_ATTRV_INTS(a, conv, pads_hi) = LOOM_ATTR_INTS(n, conv, pads_hi);
  LOOM_ATTRV_INTS(a, conv, dilations) = LOOM_ATTR_INTS(n, conv, dilations);
  LOOM_ATTRV_I(a, conv, groups) = LOOM_ATTR_I(n, conv, groups);
}

/* conv_grad_weight(big, small) with the weights' kernel. */
static int32_t grad_weight(loom_graph *g, const loom_node *n, int32_t big, int32_t small,
                           const loom_type *wt) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  copy_window(n, LOOM_OP_CONV_GRAD_WEIGHT, a);
  loom_ints *ker = &LOOM_ATTRV_INTS(a, conv_grad_weight, kernel);
  ker->n = wt->rank - 2;
  for (int32_t d = 0; d < ker->n; d++)
    ker->v[d] = wt->shape[2 + d];
  return lb_op(g, LOOM_OP_CONV_GRAD_WEIGHT, 2, (int32_t[]){big, small}, a);
}

/* conv: dx = conv_transpose(dy, w) widened to x's size by output_padding;
 * dw = conv_grad_weight(x, dy). */
static void grad_conv(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  /* copied: adding to g may move n */
  loom_node nc = *n;
  loom_type xt = g->values[nc.in[0]].type, wt = g->values[nc.in[1]].type;
  loom_attr_value a[LOOM_MAX_ATTRS];
  copy_window(&nc, LOOM_OP_CONV_TRANSPOSE, a);
  loom_window w;
  if (loom_window_read(g->ctx, &nc, xt.rank - 2, xt.shape + 2, NULL, wt.shape + 2, &w)) {
    g->err = LOOM_STATUS_INTERNAL;
    return;
  }
  loom_ints *opad = &LOOM_ATTRV_INTS(a, conv_transpose, output_padding);
  opad->n = w.k;
  for (int32_t d = 0; d < w.k; d++) {
    int64_t span = w.dil[d] * (w.kernel[d] - 1) + 1;
    opad->v[d] = w.big[d] - (w.stride[d] * (w.small[d] - 1) + span - w.lo[d] - w.hi[d]);
  }
  din[0] = lb_op(g, LOOM_OP_CONV_TRANSPOSE, 2, (int32_t[]){dout[0], nc.in[1]}, a);
  din[1] = grad_weight(g, &nc, nc.in[0], dout[0], &wt);
}

/* conv_transpose: dx = conv(dy, w) (cut to x's size where output_padding
 * reaches past a stride); dw = conv_grad_weight(dy, x). */
static void grad_conv_transpose(loom_graph *g, const loom_node *n, const int32_t *dout,
                                int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_node nc = *n;
  loom_type xt = g->values[nc.in[0]].type, wt = g->values[nc.in[1]].type;
  loom_attr_value a[LOOM_MAX_ATTRS];
  copy_window(&nc, LOOM_OP_CONV, a);
  int32_t dx = lb_op(g, LOOM_OP_CONV, 2, (int32_t[]){dout[0], nc.in[1]}, a);
  if (g->err) return;
  loom_type dt = g->values[dx].type;
  if (memcmp(dt.shape, xt.shape, sizeof dt.shape) != 0) {
    int64_t s[LOOM_MAX_RANK] = {0};
    dx = lb_slice(g, dx, s, xt.shape);
  }
  din[0] = dx;
  din[1] = grad_weight(g, &nc, dout[0], nc.in[0], &wt);
}

/* Labels: the batch (spatial), and with one group the small side's
 * channels (spatial) and the big side's (partial sums); spatial dims and
 * kernels stay whole. */
static void partition_conv(const loom_node *n, const loom_type *in, const loom_type *out,
                           loom_partition *p) {
  (void)out;
  loom_partition_init(p, 2, 1);
  int32_t r = in[0].rank;
  conv_result res = result_of(n->op);
  bool one_group = LOOM_ATTR_I(n, conv, groups) == 1;
  int8_t nb = (int8_t)loom_partition_new_label(
      p, res == RESULT_WEIGHTS ? LOOM_SPLIT_PARTIAL : LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  int8_t m = -1, c = -1;
  if (one_group) {
    m = (int8_t)loom_partition_new_label(
        p, res == RESULT_BIG ? LOOM_SPLIT_PARTIAL : LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    c = (int8_t)loom_partition_new_label(
        p, res == RESULT_SMALL ? LOOM_SPLIT_PARTIAL : LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  }
  for (int32_t d = 0; d < r; d++)
    p->in[0][d] = p->in[1][d] = p->out[0][d] = -1;
  /* in[0] big/small/big, in[1] weights/weights/small, out small/big/weights */
  int8_t *big = res == RESULT_BIG ? p->out[0] : p->in[0];
  int8_t *small = res == RESULT_SMALL ? p->out[0] : res == RESULT_BIG ? p->in[0] : p->in[1];
  int8_t *wts = res == RESULT_WEIGHTS ? p->out[0] : p->in[1];
  big[0] = small[0] = nb;
  big[1] = c;
  small[1] = m;
  wts[0] = m;
  wts[1] = c;
}

#define CONV_DEF(NAME, GRAD)                                                                       \
  const loom_op_def loom_opdef_##NAME = {                                                          \
      .name = #NAME,                                                                               \
      .cls = LOOM_OPCLASS_GEMM,                                                                    \
      .min_in = 2,                                                                                 \
      .max_in = 2,                                                                                 \
      .n_out = 1,                                                                                  \
      .n_attrs = LOOM_ATTR_COUNT(NAME),                                                            \
      .attrs = LOOM_ATTR_SPECS(NAME),                                                              \
      .infer = infer_conv,                                                                         \
      .ref = ref_conv,                                                                             \
      .grad = GRAD,                                                                                \
      .partition = partition_conv,                                                                 \
  };
CONV_DEF(conv, grad_conv)
CONV_DEF(conv_transpose, grad_conv_transpose)
CONV_DEF(conv_grad_weight, NULL)

/*
 * Pooling over sliding windows (window.h): max_pool and avg_pool of
 * x [N, C, S...] -> [N, C, O...], and their gradients max_pool_grad(x, dy)
 * and avg_pool_grad(x, dy) -> dx (x for its shape and, for max, where the
 * maxima are). Padding never wins a max; avg_pool divides by the window's
 * positions inside the input (count_include_pad: inside the explicitly
 * padded input; positions past it that ceil_mode adds never count). A
 * window's gradient goes to its first maximum, in window order.
 */
#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/ops_util.h"
#include "ops/window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_grad(loom_op op) {
  return op == LOOM_OP_MAX_POOL_GRAD || op == LOOM_OP_AVG_POOL_GRAD;
}

static loom_status pool_geometry(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 loom_window *w) {
  char b0[128], b1[128];
  const loom_type *x = &in[0];
  if (!loom_dtype_is_float(x->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "needs a float input, got %s",
                      loom_type_str(x, b0, sizeof b0));
  if (x->rank < 3)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "needs [N, C, spatial...] (rank >= 3), got %s",
                      loom_type_str(x, b0, sizeof b0));
  LOOM_TRY(loom_window_read(ctx, n, x->rank - 2, x->shape + 2, NULL, NULL, w));
  if (is_grad(n->op)) {
    const loom_type *dy = &in[1];
    bool same = dy->dtype == x->dtype && dy->rank == x->rank && dy->shape[0] == x->shape[0] &&
                dy->shape[1] == x->shape[1];
    for (int32_t d = 0; same && d < w->k; d++)
      same = dy->shape[2 + d] == w->small[d];
    if (!same)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "the output gradient %s is not the pool's output over %s",
                        loom_type_str(dy, b1, sizeof b1), loom_type_str(x, b0, sizeof b0));
  }
  return LOOM_STATUS_OK;
}

static loom_status infer_pool(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              loom_type *out) {
  loom_window w;
  LOOM_TRY(pool_geometry(ctx, n, in, &w));
  loom_type t = in[0];
  if (!is_grad(n->op))
    for (int32_t d = 0; d < w.k; d++)
      t.shape[2 + d] = w.small[d];
  out[0] = t;
  return LOOM_STATUS_OK;
}

/* One (n, c) plane: x and dy (grads) of it as doubles, the result in res. */
static void pool_plane(const loom_window *w, loom_op op, const double *x, const double *dy,
                       double *res) {
  int64_t ns = loom_window_small_numel(w), nk = loom_window_kernel_numel(w);
  for (int64_t o = 0; o < ns; o++) {
    int64_t best = -1, p;
    double acc = op == LOOM_OP_MAX_POOL ? -INFINITY : 0.0;
    double share = op == LOOM_OP_AVG_POOL_GRAD ? dy[o] / (double)loom_window_count(w, o) : 0.0;
    for (int64_t j = 0; j < nk; j++) {
      if (!loom_window_at(w, o, j, &p)) continue;
      if (op == LOOM_OP_AVG_POOL) acc += x[p];
      if (op == LOOM_OP_AVG_POOL_GRAD) res[p] += share;
      /* the first maximum (NaN wins, as in the reduce_max reference) */
      if ((op == LOOM_OP_MAX_POOL || op == LOOM_OP_MAX_POOL_GRAD) &&
          (best < 0 || x[p] > x[best] || (isnan(x[p]) && !isnan(x[best]))))
        best = p;
    }
    if (op == LOOM_OP_MAX_POOL) res[o] = best < 0 ? -INFINITY : x[best];
    if (op == LOOM_OP_AVG_POOL) res[o] = acc / (double)loom_window_count(w, o);
    if (op == LOOM_OP_MAX_POOL_GRAD && best >= 0) res[best] += dy[o];
  }
}

static loom_status ref_pool(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  loom_type t[2];
  for (int32_t i = 0; i < n->n_in; i++) {
    t[i] = (loom_type){.dtype = in[i].dtype, .rank = in[i].rank};
    memcpy(t[i].shape, in[i].shape, sizeof t[i].shape);
  }
  loom_window w;
  LOOM_TRY(pool_geometry(ctx, n, t, &w));
  int64_t planes = in[0].shape[0] * in[0].shape[1], nb = loom_window_big_numel(&w);
  int64_t ns = loom_window_small_numel(&w), nx = planes * nb, ny = planes * ns;
  int64_t nr = loom_view_numel(&out[0]);
  double *x = loom_malloc(ctx, sizeof(double) * (size_t)(nx ? nx : 1));
  double *dy = loom_malloc(ctx, sizeof(double) * (size_t)(ny ? ny : 1));
  double *res = loom_calloc(ctx, (size_t)(nr ? nr : 1), sizeof *res);
  loom_status st = x && dy && res ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    for (int64_t i = 0; i < nx; i++)
      x[i] = loom_view_get(&in[0], i);
    for (int64_t i = 0; is_grad(n->op) && i < ny; i++)
      dy[i] = loom_view_get(&in[1], i);
    int64_t res_plane = is_grad(n->op) ? nb : ns;
    for (int64_t pl = 0; pl < planes; pl++)
      pool_plane(&w, n->op, x + pl * nb, dy + pl * ns, res + pl * res_plane);
    for (int64_t i = 0; i < nr; i++)
      loom_view_set(&out[0], i, res[i]);
  }
  free(x);
  free(dy);
  free(res);
  return st;
}

static void grad_pool(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_attr_value a[LOOM_MAX_ATTRS];
  memcpy(a, n->attr, sizeof a); /* the grads share the pools' layout */
  loom_op op = n->op == LOOM_OP_MAX_POOL ? LOOM_OP_MAX_POOL_GRAD : LOOM_OP_AVG_POOL_GRAD;
  din[0] = lb_op(g, op, 2, (int32_t[]){n->in[0], dout[0]}, a);
}

/* Batch and channels split into pieces; spatial dims stay whole. */
static void partition_pool(const loom_node *n, const loom_type *in, const loom_type *out,
                           loom_partition *p) {
  (void)out;
  loom_partition_init(p, n->n_in, 1);
  int8_t b = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  int8_t c = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  for (int32_t d = 0; d < in[0].rank; d++) {
    int8_t l = d == 0 ? b : d == 1 ? c : -1;
    p->out[0][d] = l;
    for (int32_t i = 0; i < n->n_in; i++)
      p->in[i][d] = l;
  }
}

#define POOL_DEF(NAME, N_IN, GRAD)                                                                 \
  const loom_op_def loom_opdef_##NAME = {                                                          \
      .name = #NAME,                                                                               \
      .cls = LOOM_OPCLASS_WINDOW,                                                                  \
      .min_in = N_IN,                                                                              \
      .max_in = N_IN,                                                                              \
      .n_out = 1,                                                                                  \
      .n_attrs = LOOM_ATTR_COUNT(NAME),                                                            \
      .attrs = LOOM_ATTR_SPECS(NAME),                                                              \
      .infer = infer_pool,                                                                         \
      .ref = ref_pool,                                                                             \
      .grad = GRAD,                                                                                \
      .partition = partition_pool,                                                                 \
  };
POOL_DEF(max_pool, 1, grad_pool)
POOL_DEF(avg_pool, 1, grad_pool)
POOL_DEF(max_pool_grad, 2, NULL)
POOL_DEF(avg_pool_grad, 2, NULL)

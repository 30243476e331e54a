/* Composite optimiser step: adamw(param, grad, m, v, step) -> param', m', v'. */
#include "ir/build.h"
#include "ops/composite_util.h"

#include <math.h>

static loom_status adamw_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                               loom_type *out) {
  static const char *const what[4] = {"param", "grad", "m", "v"};
  LOOM_TRY(loom_composite_need_float(ctx, "param", &in[0]));
  for (int32_t i = 1; i < 4; i++) {
    LOOM_TRY(loom_composite_same_dtype(ctx, what[i], &in[i], "param", &in[0]));
    LOOM_TRY(loom_composite_need_shape(ctx, what[i], &in[i], in[0].rank, in[0].shape));
  }
  LOOM_TRY(loom_composite_need_float(ctx, "step", &in[4]));
  if (in[4].rank != 0)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "step must be a scalar, got rank %d",
                      in[4].rank);
  double b1 = LOOM_ATTR_F(n, adamw, beta1), b2 = LOOM_ATTR_F(n, adamw, beta2);
  if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "beta1 and beta2 must be in [0, 1), got %g and %g", b1, b2);
  for (int32_t a = 0; a < LOOM_ATTR_COUNT(adamw); a++) { /* all FLOAT */
    double f = n->attr[a].f;
    if (!isfinite(f))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "attribute %d (%g) must be finite", a,
                        f);
  }
  out[0] = out[1] = out[2] = in[0];
  return LOOM_STATUS_OK;
}

static void adamw_decompose(loom_graph *g, const loom_node *n, const int32_t *in, int32_t *out) {
  int32_t param = in[0], grad = in[1], m = in[2], v = in[3];
  loom_dtype dt = loom_value_type(g, param)->dtype;
  double lr = LOOM_ATTR_F(n, adamw, lr), b1 = LOOM_ATTR_F(n, adamw, beta1),
         b2 = LOOM_ATTR_F(n, adamw, beta2);
  double eps = LOOM_ATTR_F(n, adamw, eps), wd = LOOM_ATTR_F(n, adamw, weight_decay);
  int32_t step = lb_cast(g, in[4], dt);
#define K(x) lb_scalar(g, dt, (x))
  int32_t m1 = lb_add(g, lb_mul(g, m, K(b1)), lb_mul(g, grad, K(1.0 - b1)));
  int32_t v1 = lb_add(g, lb_mul(g, v, K(b2)), lb_mul(g, lb_mul(g, grad, grad), K(1.0 - b2)));
  /* bias corrections 1 - beta^step on scalars; step is a runtime input */
  int32_t bc1 = lb_sub(g, K(1.0), lb_binary(g, LOOM_OP_POW, K(b1), step));
  int32_t bc2 = lb_sub(g, K(1.0), lb_binary(g, LOOM_OP_POW, K(b2), step));
  int32_t mhat = lb_div(g, m1, bc1), vhat = lb_div(g, v1, bc2);
  int32_t upd = lb_div(g, mhat, lb_add(g, lb_unary(g, LOOM_OP_SQRT, vhat), K(eps)));
  upd = lb_add(g, upd, lb_mul(g, param, K(wd)));
  out[0] = lb_sub(g, param, lb_mul(g, upd, K(lr)));
  out[1] = m1;
  out[2] = v1;
#undef K
}

/* Element-wise over param, grad, m and v (one shape); the rank-0 step has
 * no dims, so every piece reads all of it. */
static void adamw_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                            loom_partition *p) {
  (void)n;
  (void)out;
  loom_partition_init(p, 5, 3);
  for (int32_t d = 0; d < in[0].rank; d++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    for (int32_t i = 0; i < 4; i++) p->in[i][d] = l;
    for (int32_t o = 0; o < 3; o++) p->out[o][d] = l;
  }
}

const loom_op_def loom_opdef_adamw = {
    .name = "adamw",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 5,
    .max_in = 5,
    .n_out = 3,
    .n_attrs = LOOM_ATTR_COUNT(adamw),
    .attrs = LOOM_ATTR_SPECS(adamw),
    .infer = adamw_infer,
    .decompose = adamw_decompose,
    .partition = adamw_partition,
};

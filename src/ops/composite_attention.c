/* Composite scaled dot-product attention:
 * attention(q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], [base]).
 * Dropout (p > 0) acts on the probabilities [..., Sq, Sk]: element i (their
 * logical flat index) uses counter position base + offset + i, so a fused
 * kernel reproduces the mask exactly. With causal and Sq > Sk, the first
 * Sq - Sk query rows see no key and come out NaN (0/0), as in most
 * frameworks. */
#include "ir/build.h"
#include "ops/composite_util.h"

#include <math.h>

enum { ATT_CAUSAL = 0, ATT_P, ATT_SEED, ATT_OFFSET, ATT_SCALE };

static loom_status attention_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                   loom_type *out) {
  static const char *const what[3] = {"q", "k", "v"};
  for (int32_t i = 0; i < 3; i++) {
    LOOM_TRY(loom_composite_need_float(ctx, what[i], &in[i]));
    if (i) LOOM_TRY(loom_composite_same_dtype(ctx, what[i], &in[i], "q", &in[0]));
  }
  const loom_type *q = &in[0], *k = &in[1], *v = &in[2];
  int32_t r = q->rank;
  char qs[128], ks[128], vs[128];
  bool ok = r >= 2 && k->rank == r && v->rank == r;
  for (int32_t d = 0; ok && d < r - 2; d++)
    ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
  /* q·k contracts D; probabilities · v contracts Sk */
  if (ok) ok = k->shape[r - 1] == q->shape[r - 1] && v->shape[r - 2] == k->shape[r - 2];
  if (!ok)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "expected q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv] with equal "
                      "leading dims, got q %s, k %s, v %s",
                      loom_type_str(q, qs, sizeof qs), loom_type_str(k, ks, sizeof ks),
                      loom_type_str(v, vs, sizeof vs));
  if (n->n_in > 3) {
    const loom_type *b = &in[3];
    if (b->dtype != LOOM_DTYPE_I64 && b->dtype != LOOM_DTYPE_I32)
      return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                        "base (the dropout counter) must be i64 or i32");
    if (b->rank != 0)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "base (the dropout counter) must be a scalar, got rank %d", b->rank);
  }
  double p = n->attr[ATT_P].f, scale = n->attr[ATT_SCALE].f;
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "dropout p must be in [0, 1), got %g", p);
  if (!isfinite(scale))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "scale must be finite, got %g", scale);
  out[0] = *q;
  out[0].shape[r - 1] = v->shape[r - 1];
  return LOOM_STATUS_OK;
}

static void attention_decompose(loom_graph *g, const loom_node *n, const int32_t *in,
                                int32_t *out) {
  loom_type qt = *loom_value_type(g, in[0]);
  int32_t r = qt.rank;
  int64_t sq = qt.shape[r - 2], d = qt.shape[r - 1];
  int64_t sk = loom_value_type(g, in[1])->shape[r - 2];
  double scale = n->attr[ATT_SCALE].f;
  if (scale == 0.0) scale = d > 0 ? 1.0 / sqrt((double)d) : 1.0;

  int32_t s = lb_matmul(g, in[0], in[1], false, true); /* [..., Sq, Sk] */
  s = lb_mul(g, s, lb_scalar(g, qt.dtype, scale));
  if (n->attr[ATT_CAUSAL].i) {
    /* query i sees keys j <= i + (Sk - Sq): the queries are the last Sq
     * positions of the Sk-long sequence */
    int64_t sshape[LOOM_MAX_RANK], mshape[2] = {sq, sk};
    for (int32_t k = 0; k < r - 2; k++)
      sshape[k] = qt.shape[k];
    sshape[r - 2] = sq;
    sshape[r - 1] = sk;
    int32_t row = lb_iota(g, LOOM_DTYPE_I64, 2, mshape, 0);
    int32_t col = lb_iota(g, LOOM_DTYPE_I64, 2, mshape, 1);
    int32_t limit = lb_add(g, row, lb_scalar(g, LOOM_DTYPE_I64, (double)(sk - sq)));
    int32_t masked = lb_broadcast_to(g, lb_binary(g, LOOM_OP_GT, col, limit), r, sshape);
    int32_t ninf = lb_broadcast_to(g, lb_scalar(g, qt.dtype, -INFINITY), r, sshape);
    s = lb_select(g, masked, ninf, s);
  }
  int32_t probs = loom_composite_softmax(g, s, r - 1, false);
  double p = n->attr[ATT_P].f;
  if (p > 0.0) {
    int32_t base = n->n_in > 3 ? in[3] : -1; /* dropout takes i64 or i32 */
    probs = lb_dropout(g, probs, p, n->attr[ATT_SEED].i, n->attr[ATT_OFFSET].i, base);
  }
  out[0] = lb_matmul(g, probs, in[2], false, false);
}

const loom_op_def loom_opdef_attention = {
    .name = "attention",
    .cls = LOOM_OPCLASS_COMPOSITE,
    .min_in = 3,
    .max_in = 4,
    .n_out = 1,
    .n_attrs = 5,
    .attrs = {{"causal", LOOM_ATTR_INT, LOOM_ATTR_FMT_BOOL, false, 0, 0.0},
              {"p", LOOM_ATTR_FLOAT, LOOM_ATTR_FMT_PLAIN, false, 0, 0.0},
              {"seed", LOOM_ATTR_INT, LOOM_ATTR_FMT_PLAIN, false, 0, 0.0},
              {"offset", LOOM_ATTR_INT, LOOM_ATTR_FMT_PLAIN, false, 0, 0.0},
              {"scale", LOOM_ATTR_FLOAT, LOOM_ATTR_FMT_PLAIN, false, 0, 0.0}},
    .infer = attention_infer,
    .decompose = attention_decompose,
};

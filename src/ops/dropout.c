/*
 * dropout(x[, base]): the mask of rng/philox.h. Element j of x uses
 * counter position base + offset + lin(at + j, whole), its logical flat
 * index (rng/piece.h; with whole and at empty, x's own flat index); kept
 * values are x / (1 - p) (computed in double, rounded once on store),
 * dropped are 0. `base` is an optional rank-0 i64/i32 runtime counter base
 * (0 if absent).
 */
#include "ir/dtype.h"
#include "ops/grad.h"
#include "ops/ops_util.h"
#include "ops/rng_piece.h"
#include "rng/philox.h"

#include "ir/box.h"

#include <stdio.h>

static loom_status infer_dropout(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 loom_type *out) {
  char buf[128];
  if (!loom_dtype_is_float(in[0].dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "x needs a float dtype, got %s",
                      loom_type_str(&in[0], buf, sizeof buf));
  double p = LOOM_ATTR_F(n, dropout, p);
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'p' must satisfy 0 <= p < 1, got %g", p);
  if (n->n_in > 1) {
    if (in[1].dtype != LOOM_DTYPE_I64 && in[1].dtype != LOOM_DTYPE_I32)
      return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "base must be i64 or i32, got %s",
                        loom_type_str(&in[1], buf, sizeof buf));
    if (in[1].rank != 0)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "base must have rank 0, got %s",
                        loom_type_str(&in[1], buf, sizeof buf));
  }
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(ctx, n, in[0].rank, in[0].shape, &piece));
  out[0] = in[0];
  return LOOM_STATUS_OK;
}

static loom_status ref_dropout(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                               const loom_view *out) {
  double p = LOOM_ATTR_F(n, dropout, p);
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "dropout: 'p' must satisfy 0 <= p < 1, got %g", p);
  /* unsigned arithmetic: counter positions wrap mod 2^64, never overflow */
  uint64_t start = (uint64_t)LOOM_ATTR_I(n, dropout, offset);
  if (n->n_in > 1) start += (uint64_t)loom_view_get_i64(&in[1], 0);
  uint64_t seed = (uint64_t)LOOM_ATTR_I(n, dropout, seed);
  uint64_t thr = loom_dropout_threshold(p);
  double scale_div = 1.0 - p;
  loom_view x = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(ctx, n, out[0].rank, out[0].shape, &piece));
  int64_t numel = loom_view_numel(&out[0]);
  for (int64_t i = 0; i < numel; i++) {
    bool keep = loom_dropout_keep(seed, start + loom_rng_piece_index(&piece, i), thr);
    loom_view_set(&out[0], i, keep ? loom_view_get(&x, i) / scale_div : 0.0);
  }
  return LOOM_STATUS_OK;
}

/* Every dim spatial: a piece draws its own logical indices (whole/at, set
 * by sub_attrs below), so any cut reproduces the mask. base (rank 0) has
 * no dims. */
static void partition_dropout(const loom_node *n, const loom_type *in, const loom_type *out,
                              loom_partition *p) {
  loom_partition_init(p, n->n_in, 1);
  bool same = in[0].rank == out->rank;
  for (int32_t d = 0; d < out->rank; d++) {
    int32_t l = loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->out[0][d] = (int8_t)l;
    p->in[0][d] = same ? (int8_t)l : -1;
  }
}

/* The sub-op over out_box[0] draws that box of the logical tensor. */
static loom_status sub_attrs_dropout(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     const loom_type *out, const struct loom_vbox *in_box,
                                     const struct loom_vbox *out_box, loom_attr_value *attrs) {
  (void)ctx;
  (void)in;
  (void)in_box;
  loom_rng_piece_sub_attrs(n, out[0].rank, out[0].shape, out_box[0].start, attrs);
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_dropout = {
    .name = "dropout",
    .cls = LOOM_OPCLASS_RNG,
    .min_in = 1,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(dropout),
    .attrs = LOOM_ATTR_SPECS(dropout),
    .infer = infer_dropout,
    .ref = ref_dropout,
    .grad = loom_grad_dropout,
    .partition = partition_dropout,
    .sub_attrs = sub_attrs_dropout,
};

/*
 * Index ops: gather and its transpose scatter_add. Both map a position
 * (pre, j..., post) to (pre, idx[j...], post) along one axis of the big
 * tensor. Indices are checked before any data is touched, so a bad index
 * is an error, never an out-of-bounds read or write. The big tensor may be
 * a piece of the table (attributes base, range: attrs.h); indices outside
 * the piece give zeros / are dropped, so the pieces' results add up.
 */
#include "ops/grad.h"
#include "ops/ops_util.h"

#include "ir/dtype.h"
#include "ir/box.h"

#include <stdlib.h>
#include <string.h>

static bool index_dtype(loom_dtype dt) {
  return dt == LOOM_DTYPE_I32 || dt == LOOM_DTYPE_I64;
}

/* big = pre + [extent] + post, small = pre + idx.shape + post: writes
 * small's shape into shape; false if its rank would be too large. */
static bool indexed_shape(const int64_t *big, int32_t big_rank, int32_t axis,
                          const loom_type *idx, int32_t *rank, int64_t *shape) {
  *rank = big_rank - 1 + idx->rank;
  if (*rank > LOOM_MAX_RANK) return false;
  int32_t k = 0;
  for (int32_t d = 0; d < axis; d++) shape[k++] = big[d];
  for (int32_t d = 0; d < idx->rank; d++) shape[k++] = idx->shape[d];
  for (int32_t d = axis + 1; d < big_rank; d++) shape[k++] = big[d];
  return true;
}

/* Products of the dims before and after axis. */
static void outer_inner(const int64_t *shape, int32_t rank, int32_t axis,
                        int64_t *outer, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int32_t d = 0; d < axis; d++) *outer *= shape[d];
  for (int32_t d = axis + 1; d < rank; d++) *inner *= shape[d];
}

/* The piece attributes of a sub-op holding rows [lo, hi) of this op's
 * table of `extent` rows (itself maybe a piece). */
static void sub_piece(int64_t base, int64_t range, int64_t extent, int64_t lo, int64_t *sub_base,
                      int64_t *sub_range) {
  *sub_base = base + lo;
  *sub_range = range ? range : extent;
}

/* ---- gather ------------------------------------------------------------- */

static loom_status gather_infer(loom_ctx *ctx, const loom_node *n,
                                const loom_type *in, loom_type *out) {
  const loom_type *data = &in[0], *idx = &in[1];
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, gather, axis), data->rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "axis %lld is out of range for data of rank %d",
                      (long long)LOOM_ATTR_I(n, gather, axis), data->rank);
  if (!index_dtype(idx->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "indices must be i32 or i64, got %s",
                      loom_dtype_name(idx->dtype));
  LOOM_TRY(loom_index_piece_check(ctx, LOOM_ATTR_I(n, gather, base), data->shape[axis],
                       LOOM_ATTR_I(n, gather, range)));
  out->dtype = data->dtype;
  if (!indexed_shape(data->shape, data->rank, axis, idx, &out->rank, out->shape))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "output rank %d exceeds %d", data->rank - 1 + idx->rank,
                      LOOM_MAX_RANK);
  return LOOM_STATUS_OK;
}

static loom_status gather_ref(loom_ctx *ctx, const loom_node *n,
                              const loom_view *in, const loom_view *out) {
  const loom_view *data = &in[0], *idx = &in[1];
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, gather, axis), data->rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "gather: bad axis");
  int64_t extent = data->shape[axis], outer, inner, *iv = NULL;
  outer_inner(data->shape, data->rank, axis, &outer, &inner);
  LOOM_TRY(loom_index_rows(ctx, "gather", idx, LOOM_ATTR_I(n, gather, base), extent,
                           LOOM_ATTR_I(n, gather, range), &iv));
  int64_t ni = loom_view_numel(idx);
  size_t es = loom_dtype_size(data->dtype);
  bool contig = loom_view_is_contiguous(data);
  char *dst = out->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < ni; j++) {
      int64_t src = (o * extent + iv[j]) * inner;
      int64_t at = (o * ni + j) * inner;
      if (iv[j] < 0) { /* outside the piece: another piece's part of the sum */
        memset(dst + at * (int64_t)es, 0, (size_t)inner * es);
        continue;
      }
      if (contig) {
        memcpy(dst + at * (int64_t)es, (const char *)data->data + src * (int64_t)es,
               (size_t)inner * es);
        continue;
      }
      for (int64_t k = 0; k < inner; k++) /* bytes: exact for any dtype */
        memcpy(dst + (at + k) * (int64_t)es,
               (const char *)data->data + loom_view_offset(data, src + k) * (int64_t)es,
               es);
    }
  free(iv);
  return LOOM_STATUS_OK;
}

static void gather_partition(const loom_node *n, const loom_type *in,
                             const loom_type *out, loom_partition *p) {
  (void)out;
  const loom_type *data = &in[0], *idx = &in[1];
  loom_partition_init(p, 2, 1);
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, gather, axis), data->rank, &axis)) {
    loom_partition_init(p, 0, 1);
    return;
  }
  /* Labels in output order: data's leading dims, idx's dims, data's rest. */
  for (int32_t d = 0; d < axis; d++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->in[0][d] = p->out[0][d] = l;
  }
  for (int32_t e = 0; e < idx->rank; e++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->in[1][e] = p->out[0][axis + e] = l;
  }
  /* Splitting the table's rows gives partial lookups that add up. */
  p->in[0][axis] = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_PARTIAL, LOOM_OP_ADD);
  for (int32_t d = axis + 1; d < data->rank; d++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->in[0][d] = p->out[0][d - 1 + idx->rank] = l;
  }
}

/* A sub-op over rows [lo, hi) of the table holds that piece. */
static loom_status gather_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                    const loom_type *out, const struct loom_vbox *in_box,
                                    const struct loom_vbox *out_box, loom_attr_value *attrs) {
  (void)ctx, (void)out, (void)out_box;
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, gather, axis), in[0].rank, &axis)) return LOOM_STATUS_OK;
  sub_piece(LOOM_ATTR_I(n, gather, base), LOOM_ATTR_I(n, gather, range), in[0].shape[axis],
            in_box[0].start[axis], &LOOM_ATTRV_I(attrs, gather, base),
            &LOOM_ATTRV_I(attrs, gather, range));
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_gather = {
    .name = "gather",
    .cls = LOOM_OPCLASS_INDEX,
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(gather),
    .attrs = LOOM_ATTR_SPECS(gather),
    .infer = gather_infer,
    .ref = gather_ref,
    .grad = loom_grad_gather,
    .partition = gather_partition,
    .sub_attrs = gather_sub_attrs,
};

/* ---- scatter_add -------------------------------------------------------- */

static loom_status scatter_add_infer(loom_ctx *ctx, const loom_node *n,
                                     const loom_type *in, loom_type *out) {
  const loom_type *idx = &in[0], *upd = &in[1];
  const loom_ints *shape = &LOOM_ATTR_INTS(n, scatter_add, shape);
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, scatter_add, axis), shape->n, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "axis %lld is out of range for an output of rank %d",
                      (long long)LOOM_ATTR_I(n, scatter_add, axis), shape->n);
  for (int32_t d = 0; d < shape->n; d++)
    if (shape->v[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape dim %d is negative (%lld)", d,
                        (long long)shape->v[d]);
  if (!index_dtype(idx->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "indices must be i32 or i64, got %s",
                      loom_dtype_name(idx->dtype));
  loom_type want = {.dtype = upd->dtype};
  if (!indexed_shape(shape->v, shape->n, axis, idx, &want.rank, want.shape))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "updates rank %d exceeds %d", shape->n - 1 + idx->rank,
                      LOOM_MAX_RANK);
  if (!loom_type_equal(&want, upd)) {
    char a[128], b[128];
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "updates are %s, expected %s (shape[:axis] + "
                      "indices' shape + shape[axis+1:])",
                      loom_type_str(upd, a, sizeof a),
                      loom_type_str(&want, b, sizeof b));
  }
  LOOM_TRY(loom_index_piece_check(ctx, LOOM_ATTR_I(n, scatter_add, base), shape->v[axis],
                       LOOM_ATTR_I(n, scatter_add, range)));
  out->dtype = upd->dtype;
  out->rank = shape->n;
  for (int32_t d = 0; d < shape->n; d++) out->shape[d] = shape->v[d];
  return LOOM_STATUS_OK;
}

static loom_status scatter_add_ref(loom_ctx *ctx, const loom_node *n,
                                   const loom_view *in, const loom_view *out) {
  const loom_view *idx = &in[0], *upd = &in[1];
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, scatter_add, axis), out->rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "scatter_add: bad axis");
  int64_t extent = out->shape[axis], outer, inner, *iv = NULL;
  outer_inner(out->shape, out->rank, axis, &outer, &inner);
  int64_t ni = loom_view_numel(idx), total = loom_view_numel(out);
  if (loom_view_numel(upd) != outer * ni * inner)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "scatter_add: updates have %lld elements, expected %lld",
                      (long long)loom_view_numel(upd), (long long)(outer * ni * inner));
  LOOM_TRY(loom_index_rows(ctx, "scatter_add", idx, LOOM_ATTR_I(n, scatter_add, base), extent,
                           LOOM_ATTR_I(n, scatter_add, range), &iv));
  /* Sum in double, in a fixed order, then round once per output element. */
  double *acc = loom_calloc(ctx, (size_t)(total > 0 ? total : 1), sizeof(double));
  if (!acc) {
    free(iv);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  bool contig = loom_view_is_contiguous(upd);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < ni; j++) {
      if (iv[j] < 0) continue; /* another piece's row */
      int64_t dst = (o * extent + iv[j]) * inner;
      int64_t src = (o * ni + j) * inner;
      for (int64_t k = 0; k < inner; k++)
        acc[dst + k] += contig ? loom_load(upd->dtype, upd->data, src + k)
                               : loom_view_get(upd, src + k);
    }
  for (int64_t i = 0; i < total; i++) loom_store(out->dtype, out->data, i, acc[i]);
  free(acc);
  free(iv);
  return LOOM_STATUS_OK;
}

static void scatter_add_partition(const loom_node *n, const loom_type *in,
                                  const loom_type *out, loom_partition *p) {
  const loom_type *idx = &in[0];
  loom_partition_init(p, 2, 1);
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, scatter_add, axis), out->rank, &axis)) {
    loom_partition_init(p, 0, 1);
    return;
  }
  for (int32_t d = 0; d < axis; d++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->in[1][d] = p->out[0][d] = l;
  }
  /* Splitting the indices gives partial scatters that add up. */
  for (int32_t e = 0; e < idx->rank; e++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_PARTIAL, LOOM_OP_ADD);
    p->in[0][e] = p->in[1][axis + e] = l;
  }
  /* Splitting the output's rows: each piece keeps the updates of its rows. */
  p->out[0][axis] = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  for (int32_t d = axis + 1; d < out->rank; d++) {
    int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->out[0][d] = p->in[1][d - 1 + idx->rank] = l;
  }
}

/* The output's shape is the piece's, and a piece of its rows holds them. */
static loom_status scatter_add_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                         const loom_type *out, const struct loom_vbox *in_box,
                                         const struct loom_vbox *out_box,
                                         loom_attr_value *attrs) {
  (void)ctx, (void)in, (void)in_box;
  loom_box_extents(&out_box[0], &LOOM_ATTRV_INTS(attrs, scatter_add, shape));
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, scatter_add, axis), out[0].rank, &axis))
    return LOOM_STATUS_OK;
  sub_piece(LOOM_ATTR_I(n, scatter_add, base), LOOM_ATTR_I(n, scatter_add, range),
            out[0].shape[axis], out_box[0].start[axis], &LOOM_ATTRV_I(attrs, scatter_add, base),
            &LOOM_ATTRV_I(attrs, scatter_add, range));
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_scatter_add = {
    .name = "scatter_add",
    .cls = LOOM_OPCLASS_INDEX,
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(scatter_add),
    .attrs = LOOM_ATTR_SPECS(scatter_add),
    .infer = scatter_add_infer,
    .ref = scatter_add_ref,
    .grad = loom_grad_scatter_add,
    .partition = scatter_add_partition,
    .sub_attrs = scatter_add_sub_attrs,
};

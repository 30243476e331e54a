#include "ops/ops_util.h"

#include "ir/box.h"
#include "ir/view.h"

#include <stdlib.h>

bool loom_norm_axis(int64_t axis, int32_t rank, int32_t *out) {
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  *out = (int32_t)axis;
  return true;
}

bool loom_axes_mask(const loom_ints *axes, int32_t rank, uint32_t *mask) {
  *mask = 0;
  for (int32_t k = 0; k < axes->n; k++) {
    int32_t a;
    if (!loom_norm_axis(axes->v[k], rank, &a) || (*mask & (1u << a))) return false;
    *mask |= 1u << a;
  }
  return true;
}

void loom_partition_elementwise(const loom_node *n, const loom_type *in,
                                const loom_type *out, loom_partition *p) {
  int32_t n_in = n->n_in > LOOM_PART_MAX_IO ? 0 : n->n_in;
  loom_partition_init(p, n_in, 1);
  if (!n_in) return;
  for (int32_t d = 0; d < out->rank; d++) {
    int32_t l = loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->out[0][d] = (int8_t)l;
    for (int32_t i = 0; i < n_in; i++) {
      int32_t id = d - (out->rank - in[i].rank);
      if (id >= 0) p->in[i][id] = (int8_t)(in[i].shape[id] == out->shape[d] ? l : -1);
    }
  }
}

void loom_box_extents(const struct loom_vbox *box, loom_ints *shape) {
  shape->n = box->rank;
  for (int32_t d = 0; d < box->rank; d++) shape->v[d] = box->end[d] - box->start[d];
}

loom_status loom_index_piece_check(loom_ctx *ctx, int64_t base, int64_t extent, int64_t range) {
  if (range == 0 && base == 0) return LOOM_STATUS_OK;
  if (base < 0 || range < 0 || base > range || extent > range - base)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "a table piece of %lld rows at base %lld does not fit a table of %lld "
                      "rows (attributes base, range)",
                      (long long)extent, (long long)base, (long long)range);
  return LOOM_STATUS_OK;
}

loom_status loom_index_rows(loom_ctx *ctx, const char *op, const loom_view *idx, int64_t base,
                            int64_t extent, int64_t range, int64_t **rows) {
  *rows = NULL;
  if (loom_index_piece_check(ctx, base, extent, range)) {
    loom_error_prefix(ctx, "%s", op);
    return LOOM_STATUS_INVALID_ARGUMENT;
  }
  if (range == 0) range = extent;
  int64_t n = loom_view_numel(idx);
  int64_t *v = loom_malloc(ctx, sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!v) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int64_t i = 0; i < n; i++) {
    int64_t x = loom_view_get_i64(idx, i);
    if (x < 0 || x >= range) {
      free(v);
      return loom_error(ctx, LOOM_STATUS_OUT_OF_RANGE,
                        "%s: index %lld (at flat position %lld of the indices) is outside "
                        "[0, %lld)",
                        op, (long long)x, (long long)i, (long long)range);
    }
    v[i] = x >= base && x - base < extent ? x - base : -1;
  }
  *rows = v;
  return LOOM_STATUS_OK;
}

#include "ops/ops_util.h"

#include "ir/box.h"

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

#include "parallel/subop.h"

#include <string.h>

void loom_subop_partition(const loom_node *n, const loom_type *in, const loom_type *out,
                          loom_partition *p) {
  const loom_op_def *d = loom_op_get(n->op);
  if (d && d->partition) {
    d->partition(n, in, out, p);
    /* an annotation for other operand counts (an op that can only be
     * replicated in this form) reads as "no labels" */
    if (p->n_in == n->n_in && p->n_out == n->n_out) return;
  }
  loom_partition_init(p, n->n_in, n->n_out);
  for (int32_t i = 0; i < n->n_in && i < LOOM_PART_MAX_IO; i++)
    memset(p->in[i], -1, sizeof p->in[i]);
  for (int32_t o = 0; o < n->n_out && o < LOOM_PART_MAX_IO; o++)
    memset(p->out[o], -1, sizeof p->out[o]);
}

/* Calls f(label, extent) for every labeled dim of every operand and result. */
#define FOR_LABELED_DIMS(p, in, out, BODY)                                                         \
  do {                                                                                             \
    for (int32_t io_ = 0; io_ < 2; io_++) {                                                        \
      int32_t cnt_ = io_ ? (p)->n_out : (p)->n_in;                                                 \
      for (int32_t k_ = 0; k_ < cnt_ && k_ < LOOM_PART_MAX_IO; k_++) {                             \
        const loom_type *t_ = io_ ? &(out)[k_] : &(in)[k_];                                        \
        const int8_t *lab_ = io_ ? (p)->out[k_] : (p)->in[k_];                                     \
        for (int32_t d_ = 0; d_ < t_->rank; d_++) {                                                \
          int32_t label = lab_[d_];                                                                \
          int64_t extent = t_->shape[d_];                                                          \
          if (label < 0 || label >= (p)->n_labels) continue;                                       \
          BODY;                                                                                    \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  } while (0)

bool loom_subop_label_extents(loom_ctx *ctx, const loom_partition *p, const loom_type *in,
                              const loom_type *out, int64_t *ext) {
  for (int32_t l = 0; l < p->n_labels; l++) ext[l] = -1;
  FOR_LABELED_DIMS(p, in, out, {
    if (ext[label] < 0 || extent < ext[label]) ext[label] = extent;
  });
  for (int32_t l = 0; l < p->n_labels; l++)
    if (ext[l] < 0) ext[l] = 1;
  bool ok = true;
  FOR_LABELED_DIMS(p, in, out, {
    if (ok && (ext[label] == 0 ? extent != 0 : extent % ext[label] != 0)) {
      loom_error(ctx, LOOM_STATUS_INTERNAL,
                 "partition: a dim of extent %lld carries label %d of extent %lld, not a multiple",
                 (long long)extent, label, (long long)ext[label]);
      ok = false;
    }
  });
  return ok;
}

void loom_subop_ranges_full(const loom_partition *p, const int64_t *ext, loom_subop_ranges *r) {
  memset(r, 0, sizeof *r);
  r->n_labels = p->n_labels;
  for (int32_t l = 0; l < p->n_labels; l++) r->hi[l] = ext[l];
}

static void box_of(const loom_type *t, const int8_t *lab, const loom_partition *p,
                   const int64_t *ext, const loom_subop_ranges *r, loom_vbox *b) {
  *b = loom_vbox_full(t);
  for (int32_t d = 0; d < t->rank; d++) {
    int32_t l = lab[d];
    if (l < 0 || l >= p->n_labels || ext[l] == 0) continue;
    int64_t s = t->shape[d] / ext[l];
    b->start[d] = r->lo[l] * s;
    b->end[d] = r->hi[l] * s;
  }
}

void loom_subop_boxes(const loom_partition *p, const int64_t *ext, const loom_type *in,
                      const loom_type *out, const loom_subop_ranges *r, loom_vbox *in_box,
                      loom_vbox *out_box) {
  for (int32_t i = 0; i < p->n_in && i < LOOM_PART_MAX_IO; i++)
    box_of(&in[i], p->in[i], p, ext, r, &in_box[i]);
  for (int32_t o = 0; o < p->n_out && o < LOOM_PART_MAX_IO; o++)
    box_of(&out[o], p->out[o], p, ext, r, &out_box[o]);
}

bool loom_subop_is_partial(const loom_partition *p, const int64_t *ext,
                           const loom_subop_ranges *r, loom_op *combine) {
  bool partial = false;
  for (int32_t l = 0; l < p->n_labels; l++)
    if (p->split[l] == LOOM_SPLIT_PARTIAL && (r->lo[l] != 0 || r->hi[l] != ext[l])) {
      partial = true;
      if (combine) *combine = p->combine[l];
    }
  return partial;
}

loom_status loom_subop_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                             const loom_type *out, const loom_vbox *in_box,
                             const loom_vbox *out_box, loom_attr_value *attrs) {
  memcpy(attrs, n->attr, sizeof n->attr);
  const loom_op_def *d = loom_op_get(n->op);
  if (!d) return loom_error(ctx, LOOM_STATUS_INTERNAL, "unknown op %d", (int)n->op);
  if (!d->sub_attrs) return LOOM_STATUS_OK;
  return d->sub_attrs(ctx, n, in, out, in_box, out_box, attrs);
}

/* Source ops (no inputs): iota and constant. */
#include "ops/ops_util.h"

#include "ir/dtype.h"
#include "ir/box.h"

#include <string.h>

/* Checks a shape attribute and a dtype attribute and writes the type. */
static loom_status source_type(loom_ctx *ctx, const loom_ints *shape,
                               int64_t dtype, loom_type *out) {
  if (dtype < 0 || dtype >= LOOM_DTYPE_COUNT || !loom_dtype_valid((loom_dtype)dtype))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "dtype %lld is not valid",
                      (long long)dtype);
  for (int32_t d = 0; d < shape->n; d++)
    if (shape->v[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape dim %d is negative (%lld)", d, (long long)shape->v[d]);
  out->dtype = (loom_dtype)dtype;
  out->rank = shape->n;
  for (int32_t d = 0; d < shape->n; d++) out->shape[d] = shape->v[d];
  return LOOM_STATUS_OK;
}

/* ---- iota --------------------------------------------------------------- */

static loom_status iota_infer(loom_ctx *ctx, const loom_node *n,
                              const loom_type *in, loom_type *out) {
  (void)in;
  const loom_ints *shape = &LOOM_ATTR_INTS(n, iota, shape);
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, iota, axis), shape->n, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "axis %lld is out of range for rank %d",
                      (long long)LOOM_ATTR_I(n, iota, axis), shape->n);
  return source_type(ctx, shape, LOOM_ATTR_I(n, iota, dtype), out);
}

static loom_status iota_ref(loom_ctx *ctx, const loom_node *n,
                            const loom_view *in, const loom_view *out) {
  (void)in;
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, iota, axis), out->rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "iota: bad axis");
  int64_t extent = out->shape[axis], inner = 1, total = loom_view_numel(out);
  int64_t start = LOOM_ATTR_I(n, iota, start);
  for (int32_t d = axis + 1; d < out->rank; d++) inner *= out->shape[d];
  for (int64_t i = 0; i < total; i++)
    loom_store(out->dtype, out->data, i, (double)(start + (i / inner) % extent));
  return LOOM_STATUS_OK;
}

/* Every dim splits: a piece along the axis counts from its offset (the
 * start attribute, which sub_attrs sets). */
static void source_partition(const loom_node *n, const loom_type *in,
                             const loom_type *out, loom_partition *p) {
  (void)n;
  (void)in;
  loom_partition_init(p, 0, 1);
  for (int32_t d = 0; d < out->rank; d++)
    p->out[0][d] = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
}

static loom_status iota_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                  const loom_type *out, const loom_vbox *in_box,
                                  const loom_vbox *out_box, loom_attr_value *attrs) {
  (void)in;
  (void)in_box;
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, iota, axis), out->rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "iota: bad axis");
  loom_box_extents(&out_box[0], &LOOM_ATTRV_INTS(attrs, iota, shape));
  LOOM_ATTRV_I(attrs, iota, start) = LOOM_ATTR_I(n, iota, start) + out_box[0].start[axis];
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_iota = {
    .name = "iota",
    .cls = LOOM_OPCLASS_SOURCE,
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(iota),
    .attrs = LOOM_ATTR_SPECS(iota),
    .infer = iota_infer,
    .ref = iota_ref,
    .grad = NULL,
    .partition = source_partition,
    .sub_attrs = iota_sub_attrs,
};

/* ---- constant ----------------------------------------------------------- */

static loom_status constant_infer(loom_ctx *ctx, const loom_node *n,
                                  const loom_type *in, loom_type *out) {
  (void)in;
  return source_type(ctx, &LOOM_ATTR_INTS(n, constant, shape), LOOM_ATTR_I(n, constant, dtype),
                     out);
}

static loom_status constant_ref(loom_ctx *ctx, const loom_node *n,
                                const loom_view *in, const loom_view *out) {
  (void)ctx;
  (void)in;
  int64_t total = loom_view_numel(out);
  size_t es = loom_dtype_size(out->dtype);
  if (total <= 0) return LOOM_STATUS_OK;
  /* Convert once, then replicate the bytes. */
  loom_store(out->dtype, out->data, 0, LOOM_ATTR_F(n, constant, value));
  for (int64_t i = 1; i < total; i++)
    memcpy((char *)out->data + i * (int64_t)es, out->data, es);
  return LOOM_STATUS_OK;
}

LOOM_SUB_ATTRS_OUT_SHAPE(constant)

const loom_op_def loom_opdef_constant = {
    .name = "constant",
    .cls = LOOM_OPCLASS_SOURCE,
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(constant),
    .attrs = LOOM_ATTR_SPECS(constant),
    .infer = constant_infer,
    .ref = constant_ref,
    .grad = NULL,
    .partition = source_partition,
    .sub_attrs = constant_sub_attrs,
};

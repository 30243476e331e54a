/*
 * Layout ops: reshape, transpose, broadcast_to, slice, concat, pad.
 * Their reference kernels build a strided view over the input (permuted
 * strides, stride 0, a moved base) and copy it into the contiguous output.
 */
#include "ops/grad.h"
#include "ops/ops_util.h"

#include "core/checked.h"
#include "ir/dtype.h"
#include "ir/box.h"

#include <string.h>

static void set_out(loom_type *out, loom_dtype dt, int32_t rank,
                    const int64_t *shape) {
  out->dtype = dt;
  out->rank = rank;
  for (int32_t d = 0; d < rank; d++) out->shape[d] = shape[d];
}

/* A view whose base is moved by off[d] elements along each dim. */
static void *view_at(const loom_view *v, const int64_t *off) {
  int64_t e = 0;
  for (int32_t d = 0; d < v->rank; d++) e += off[d] * v->stride[d];
  return (char *)v->data + e * (int64_t)loom_dtype_size(v->dtype);
}

/* One label per dim where keep[d], else -1; returns the labels in lab. */
static void label_dims(loom_partition *p, int32_t rank, const bool *keep,
                       int8_t *lab) {
  for (int32_t d = 0; d < rank && d < LOOM_MAX_RANK; d++)
    lab[d] = (int8_t)(keep[d] ? loom_partition_new_label(p, LOOM_SPLIT_SPATIAL,
                                                         LOOM_OP_ADD)
                              : -1);
}

/* ---- reshape ------------------------------------------------------------ */

static loom_status reshape_infer(loom_ctx *ctx, const loom_node *n,
                                 const loom_type *in, loom_type *out) {
  const loom_ints *s = &LOOM_ATTR_INTS(n, reshape, shape);
  int64_t known = 1;
  int32_t infer_at = -1;
  for (int32_t d = 0; d < s->n; d++) {
    if (s->v[d] == -1) {
      if (infer_at >= 0)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "shape has more than one -1 (dims %d and %d)",
                          infer_at, d);
      infer_at = d;
    } else if (s->v[d] < 0) {
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape dim %d is %lld (only -1 may be negative)", d,
                        (long long)s->v[d]);
    } else if (s->v[d] > 0 && known > LOOM_MAX_NUMEL / s->v[d]) {
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape has too many elements");
    } else {
      known *= s->v[d];
    }
  }
  int64_t numel = loom_type_numel(&in[0]);
  set_out(out, in[0].dtype, s->n, s->v);
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "cannot infer dim %d: %lld elements do not divide "
                        "into the other dims' %lld",
                        infer_at, (long long)numel, (long long)known);
    out->shape[infer_at] = numel / known;
  } else if (known != numel) {
    char buf[128];
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "cannot reshape %s (%lld elements) into %lld elements",
                      loom_type_str(&in[0], buf, sizeof buf), (long long)numel,
                      (long long)known);
  }
  return LOOM_STATUS_OK;
}

static loom_status reshape_ref(loom_ctx *ctx, const loom_node *n,
                               const loom_view *in, const loom_view *out) {
  (void)ctx;
  (void)n;
  /* The contiguous output seen with the input's shape has the same memory
   * order, so copying the (maybe strided) input there is the reshape. */
  loom_view as_in = out[0];
  as_in.rank = in[0].rank;
  int64_t s = 1;
  for (int32_t d = in[0].rank - 1; d >= 0; d--) {
    as_in.shape[d] = in[0].shape[d];
    as_in.stride[d] = s;
    s *= in[0].shape[d];
  }
  loom_view_copy(&as_in, &in[0]);
  return LOOM_STATUS_OK;
}

/* The next dim at or after d whose extent is not 1 (rank if none). */
static int32_t next_non1(const loom_type *t, int32_t d) {
  while (d < t->rank && t->shape[d] == 1) d++;
  return d;
}

/* Both shapes cut into groups of dims with equal products (size-1 dims
 * left out): [B, T, 3D] -> [B, T, H, 3, dh] is {B}{T}{3D -> H 3 dh}. The
 * outermost dims of a group take one label when one extent is a multiple
 * of the other (3D = H * 3dh): rows [lo, hi) of the smaller are rows
 * [lo*s, hi*s) of the larger, and the dims inside the group stay whole,
 * so a piece of the input is a contiguous piece of the output. */
static void reshape_partition(const loom_node *n, const loom_type *in,
                              const loom_type *out, loom_partition *p) {
  (void)n;
  loom_partition_init(p, 1, 1);
  const loom_type *a = &in[0], *b = &out[0];
  for (int32_t d = 0; d < a->rank; d++) p->in[0][d] = -1;
  for (int32_t d = 0; d < b->rank; d++) p->out[0][d] = -1;
  if (loom_type_numel(a) == 0) return; /* no groups to speak of */
  int32_t i = next_non1(a, 0), j = next_non1(b, 0);
  while (i < a->rank && j < b->rank) {
    int32_t i0 = i, j0 = j;
    int64_t pa = a->shape[i++], pb = b->shape[j++];
    while (pa != pb) { /* the products stay <= numel: no overflow */
      if (pa < pb) {
        if (i >= a->rank) return;
        pa *= a->shape[i++];
      } else {
        if (j >= b->rank) return;
        pb *= b->shape[j++];
      }
    }
    int64_t ea = a->shape[i0], eb = b->shape[j0];
    if (ea % eb == 0 || eb % ea == 0) {
      int8_t l = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
      p->in[0][i0] = l;
      p->out[0][j0] = l;
    }
    i = next_non1(a, i);
    j = next_non1(b, j);
  }
}

/* The target shape is the piece's. */
LOOM_SUB_ATTRS_OUT_SHAPE(reshape)

const loom_op_def loom_opdef_reshape = {
    .name = "reshape",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(reshape),
    .attrs = LOOM_ATTR_SPECS(reshape),
    .infer = reshape_infer,
    .ref = reshape_ref,
    .grad = loom_grad_reshape,
    .partition = reshape_partition,
    .sub_attrs = reshape_sub_attrs,
};

/* ---- transpose ---------------------------------------------------------- */

static loom_status transpose_infer(loom_ctx *ctx, const loom_node *n,
                                   const loom_type *in, loom_type *out) {
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  if (perm->n != in[0].rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "perm has %d entries for an input of rank %d", perm->n,
                      in[0].rank);
  uint32_t seen = 0;
  for (int32_t d = 0; d < perm->n; d++) {
    int64_t p = perm->v[d];
    if (p < 0 || p >= in[0].rank || (seen & (1u << p)))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "perm is not a permutation of 0..%d (entry %d is %lld)",
                        in[0].rank - 1, d, (long long)p);
    seen |= 1u << p;
  }
  out->dtype = in[0].dtype;
  out->rank = in[0].rank;
  for (int32_t d = 0; d < in[0].rank; d++) out->shape[d] = in[0].shape[perm->v[d]];
  return LOOM_STATUS_OK;
}

static loom_status transpose_ref(loom_ctx *ctx, const loom_node *n,
                                 const loom_view *in, const loom_view *out) {
  (void)ctx;
  loom_view src = loom_view_permute(&in[0], LOOM_ATTR_INTS(n, transpose, perm).v);
  loom_view_copy(&out[0], &src);
  return LOOM_STATUS_OK;
}

static void transpose_partition(const loom_node *n, const loom_type *in,
                                const loom_type *out, loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  for (int32_t d = 0; d < in[0].rank; d++)
    p->in[0][d] = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  for (int32_t d = 0; d < in[0].rank && d < perm->n; d++)
    p->out[0][d] = p->in[0][perm->v[d]];
}

const loom_op_def loom_opdef_transpose = {
    .name = "transpose",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(transpose),
    .attrs = LOOM_ATTR_SPECS(transpose),
    .infer = transpose_infer,
    .ref = transpose_ref,
    .grad = loom_grad_transpose,
    .partition = transpose_partition,
};

/* ---- broadcast_to ------------------------------------------------------- */

static loom_status broadcast_to_infer(loom_ctx *ctx, const loom_node *n,
                                      const loom_type *in, loom_type *out) {
  const loom_ints *s = &LOOM_ATTR_INTS(n, broadcast_to, shape);
  char buf[128];
  if (s->n < in[0].rank)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "cannot broadcast %s to rank %d (fewer dims)",
                      loom_type_str(&in[0], buf, sizeof buf), s->n);
  for (int32_t d = 0; d < s->n; d++) {
    if (s->v[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape dim %d is negative (%lld)", d, (long long)s->v[d]);
    int32_t id = d - (s->n - in[0].rank);
    if (id >= 0 && in[0].shape[id] != 1 && in[0].shape[id] != s->v[d])
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "cannot broadcast %s: input dim %d is %lld, target dim "
                        "%d is %lld",
                        loom_type_str(&in[0], buf, sizeof buf), id,
                        (long long)in[0].shape[id], d, (long long)s->v[d]);
  }
  set_out(out, in[0].dtype, s->n, s->v);
  return LOOM_STATUS_OK;
}

static loom_status broadcast_to_ref(loom_ctx *ctx, const loom_node *n,
                                    const loom_view *in, const loom_view *out) {
  (void)ctx;
  (void)n;
  loom_view src = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  loom_view_copy(&out[0], &src);
  return LOOM_STATUS_OK;
}

LOOM_SUB_ATTRS_OUT_SHAPE(broadcast_to)

const loom_op_def loom_opdef_broadcast_to = {
    .name = "broadcast_to",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(broadcast_to),
    .attrs = LOOM_ATTR_SPECS(broadcast_to),
    .infer = broadcast_to_infer,
    .ref = broadcast_to_ref,
    .grad = loom_grad_broadcast_to,
    /* Same rule as element-wise: a dim broadcast from 1 stays whole. */
    .partition = loom_partition_elementwise,
    .sub_attrs = broadcast_to_sub_attrs,
};

/* ---- slice -------------------------------------------------------------- */

/* Resolves negative starts/ends against the extents; false (with the bad
 * dim in *bad) unless 0 <= start <= end <= extent everywhere. */
static bool slice_bounds(const loom_node *n, const loom_type *t, int64_t *lo,
                         int64_t *hi, int32_t *bad) {
  const loom_ints *s = &LOOM_ATTR_INTS(n, slice, starts), *e = &LOOM_ATTR_INTS(n, slice, ends);
  *bad = -1;
  if (s->n != t->rank || e->n != t->rank) return false;
  for (int32_t d = 0; d < t->rank; d++) {
    lo[d] = s->v[d] < 0 ? s->v[d] + t->shape[d] : s->v[d];
    hi[d] = e->v[d] < 0 ? e->v[d] + t->shape[d] : e->v[d];
    if (lo[d] < 0 || lo[d] > hi[d] || hi[d] > t->shape[d]) {
      *bad = d;
      return false;
    }
  }
  return true;
}

static loom_status slice_infer(loom_ctx *ctx, const loom_node *n,
                               const loom_type *in, loom_type *out) {
  const loom_ints *s = &LOOM_ATTR_INTS(n, slice, starts), *e = &LOOM_ATTR_INTS(n, slice, ends);
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  int32_t bad;
  if (s->n != in[0].rank || e->n != in[0].rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "starts and ends need one entry per input dim (%d), "
                      "got %d and %d",
                      in[0].rank, s->n, e->n);
  if (!slice_bounds(n, &in[0], lo, hi, &bad))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "dim %d: range [%lld, %lld) does not fit extent %lld "
                      "(resolved [%lld, %lld))",
                      bad, (long long)s->v[bad], (long long)e->v[bad],
                      (long long)in[0].shape[bad], (long long)lo[bad],
                      (long long)hi[bad]);
  out->dtype = in[0].dtype;
  out->rank = in[0].rank;
  for (int32_t d = 0; d < in[0].rank; d++) out->shape[d] = hi[d] - lo[d];
  return LOOM_STATUS_OK;
}

static loom_status slice_ref(loom_ctx *ctx, const loom_node *n,
                             const loom_view *in, const loom_view *out) {
  loom_type t = {.dtype = in[0].dtype, .rank = in[0].rank};
  memcpy(t.shape, in[0].shape, sizeof t.shape);
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  int32_t bad;
  if (!slice_bounds(n, &t, lo, hi, &bad))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "slice: bad range at dim %d", bad);
  loom_view src = in[0];
  src.data = view_at(&in[0], lo);
  for (int32_t d = 0; d < src.rank; d++) src.shape[d] = hi[d] - lo[d];
  loom_view_copy(&out[0], &src);
  return LOOM_STATUS_OK;
}

static void slice_partition(const loom_node *n, const loom_type *in,
                            const loom_type *out, loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  int32_t bad;
  bool ok = slice_bounds(n, &in[0], lo, hi, &bad), whole[LOOM_MAX_RANK];
  for (int32_t d = 0; d < in[0].rank; d++)
    whole[d] = ok && lo[d] == 0 && hi[d] == in[0].shape[d];
  label_dims(p, in[0].rank, whole, p->in[0]);
  memcpy(p->out[0], p->in[0], (size_t)in[0].rank);
}

/* Only dims the slice keeps whole carry labels, so a dim the sub-op cuts
 * is taken whole from its piece: [0, piece extent). */
static loom_status slice_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                   const loom_type *out, const loom_vbox *in_box,
                                   const loom_vbox *out_box, loom_attr_value *attrs) {
  (void)out;
  (void)out_box;
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  int32_t bad;
  if (!slice_bounds(n, &in[0], lo, hi, &bad))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "slice: bad range at dim %d", bad);
  loom_ints *st = &LOOM_ATTRV_INTS(attrs, slice, starts);
  loom_ints *en = &LOOM_ATTRV_INTS(attrs, slice, ends);
  for (int32_t d = 0; d < in[0].rank; d++) {
    int64_t ext = in_box[0].end[d] - in_box[0].start[d];
    if (ext == in[0].shape[d]) continue; /* whole: the node's own range */
    if (lo[d] != 0 || hi[d] != in[0].shape[d])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "slice: dim %d is cut into a piece but the slice takes [%lld, %lld) of it",
                        d, (long long)lo[d], (long long)hi[d]);
    st->v[d] = 0;
    en->v[d] = ext;
  }
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_slice = {
    .name = "slice",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(slice),
    .attrs = LOOM_ATTR_SPECS(slice),
    .infer = slice_infer,
    .ref = slice_ref,
    .grad = loom_grad_slice,
    .partition = slice_partition,
    .sub_attrs = slice_sub_attrs,
};

/* ---- concat ------------------------------------------------------------- */

static loom_status concat_infer(loom_ctx *ctx, const loom_node *n,
                                const loom_type *in, loom_type *out) {
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, concat, axis), in[0].rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "axis %lld is out of range for rank %d",
                      (long long)LOOM_ATTR_I(n, concat, axis), in[0].rank);
  *out = in[0];
  char a[128], b[128];
  for (int32_t i = 1; i < n->n_in; i++) {
    if (in[i].dtype != in[0].dtype)
      return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                        "input %d is %s, input 0 is %s", i,
                        loom_dtype_name(in[i].dtype), loom_dtype_name(in[0].dtype));
    bool ok = in[i].rank == in[0].rank;
    for (int32_t d = 0; ok && d < in[0].rank; d++)
      ok = d == axis || in[i].shape[d] == in[0].shape[d];
    if (!ok)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "input %d %s does not match input 0 %s outside axis %d",
                        i, loom_type_str(&in[i], a, sizeof a),
                        loom_type_str(&in[0], b, sizeof b), axis);
    if (loom_add_overflows(out->shape[axis], in[i].shape[axis], &out->shape[axis]))
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "the inputs' extents along axis %d overflow a 64-bit size (at input %d)",
                        axis, i);
  }
  return LOOM_STATUS_OK;
}

static loom_status concat_ref(loom_ctx *ctx, const loom_node *n,
                              const loom_view *in, const loom_view *out) {
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, concat, axis), out[0].rank, &axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "concat: bad axis");
  int64_t off[LOOM_MAX_RANK] = {0};
  for (int32_t i = 0; i < n->n_in; i++) {
    /* The piece of the output that input i fills. */
    loom_view dst = out[0];
    dst.data = view_at(&out[0], off);
    dst.shape[axis] = in[i].shape[axis];
    loom_view_copy(&dst, &in[i]);
    off[axis] += in[i].shape[axis];
  }
  return LOOM_STATUS_OK;
}

static void concat_partition(const loom_node *n, const loom_type *in,
                             const loom_type *out, loom_partition *p) {
  int32_t axis;
  if (n->n_in > LOOM_PART_MAX_IO ||
      !loom_norm_axis(LOOM_ATTR_I(n, concat, axis), out[0].rank, &axis)) {
    loom_partition_init(p, 0, 1); /* replicate */
    return;
  }
  (void)in;
  loom_partition_init(p, n->n_in, 1);
  bool keep[LOOM_MAX_RANK];
  for (int32_t d = 0; d < out[0].rank; d++) keep[d] = d != axis;
  label_dims(p, out[0].rank, keep, p->out[0]);
  for (int32_t i = 0; i < n->n_in; i++)
    memcpy(p->in[i], p->out[0], (size_t)out[0].rank);
}

const loom_op_def loom_opdef_concat = {
    .name = "concat",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = -1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(concat),
    .attrs = LOOM_ATTR_SPECS(concat),
    .infer = concat_infer,
    .ref = concat_ref,
    .grad = loom_grad_concat,
    .partition = concat_partition,
};

/* ---- pad ---------------------------------------------------------------- */

static loom_status pad_infer(loom_ctx *ctx, const loom_node *n,
                             const loom_type *in, loom_type *out) {
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo), *hi = &LOOM_ATTR_INTS(n, pad, hi);
  if (lo->n != in[0].rank || hi->n != in[0].rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "lo and hi need one entry per input dim (%d), got %d and %d",
                      in[0].rank, lo->n, hi->n);
  *out = in[0];
  for (int32_t d = 0; d < in[0].rank; d++) {
    if (lo->v[d] < 0 || hi->v[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "dim %d: padding (%lld, %lld) must not be negative", d,
                        (long long)lo->v[d], (long long)hi->v[d]);
    if (loom_add_overflows(out->shape[d], lo->v[d], &out->shape[d]) ||
        loom_add_overflows(out->shape[d], hi->v[d], &out->shape[d]))
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "dim %d: %lld padded by (%lld, %lld) overflows a 64-bit size", d,
                        (long long)in[0].shape[d], (long long)lo->v[d], (long long)hi->v[d]);
  }
  return LOOM_STATUS_OK;
}

static loom_status pad_ref(loom_ctx *ctx, const loom_node *n,
                           const loom_view *in, const loom_view *out) {
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo);
  if (lo->n != out[0].rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "pad: bad lo");
  /* Fill with the value (converted once), then copy the input inside. */
  int64_t total = loom_view_numel(&out[0]);
  size_t es = loom_dtype_size(out[0].dtype);
  if (total > 0) {
    loom_store(out[0].dtype, out[0].data, 0, LOOM_ATTR_F(n, pad, value));
    for (int64_t i = 1; i < total; i++)
      memcpy((char *)out[0].data + i * (int64_t)es, out[0].data, es);
  }
  loom_view dst = out[0];
  dst.data = view_at(&out[0], lo->v);
  for (int32_t d = 0; d < dst.rank; d++) dst.shape[d] = in[0].shape[d];
  loom_view_copy(&dst, &in[0]);
  return LOOM_STATUS_OK;
}

static void pad_partition(const loom_node *n, const loom_type *in,
                          const loom_type *out, loom_partition *p) {
  (void)out;
  loom_partition_init(p, 1, 1);
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo), *hi = &LOOM_ATTR_INTS(n, pad, hi);
  bool keep[LOOM_MAX_RANK];
  for (int32_t d = 0; d < in[0].rank; d++)
    keep[d] = d < lo->n && d < hi->n && lo->v[d] == 0 && hi->v[d] == 0;
  label_dims(p, in[0].rank, keep, p->in[0]);
  memcpy(p->out[0], p->in[0], (size_t)in[0].rank);
}

/* Only unpadded dims carry labels: the padding stays as it is, and a cut
 * dim with padding is a bad box. */
static loom_status pad_sub_attrs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                 const loom_type *out, const loom_vbox *in_box,
                                 const loom_vbox *out_box, loom_attr_value *attrs) {
  (void)out;
  (void)out_box;
  (void)attrs;
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo), *hi = &LOOM_ATTR_INTS(n, pad, hi);
  for (int32_t d = 0; d < in[0].rank && d < lo->n && d < hi->n; d++)
    if (in_box[0].end[d] - in_box[0].start[d] != in[0].shape[d] && (lo->v[d] || hi->v[d]))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "pad: dim %d is cut into a piece but is padded by (%lld, %lld)", d,
                        (long long)lo->v[d], (long long)hi->v[d]);
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_pad = {
    .name = "pad",
    .cls = LOOM_OPCLASS_LAYOUT,
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(pad),
    .attrs = LOOM_ATTR_SPECS(pad),
    .infer = pad_infer,
    .ref = pad_ref,
    .grad = loom_grad_pad,
    .partition = pad_partition,
    .sub_attrs = pad_sub_attrs,
};

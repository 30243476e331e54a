/*
 * Communication ops: all_reduce, all_gather, reduce_scatter, all_to_all,
 * broadcast, transfer (class COMM). Each has two forms, told apart by the
 * `member` attribute (ops/attrs.h):
 *
 *   member == -1, the GLOBAL form: one value per group member in, one per
 *   member out, in member order; the reference executor runs a graph that
 *   holds every device of a parallel plan in one process with it.
 *
 *   member >= 0, the PER-DEVICE form on that member: this member's piece
 *   in and out, exchanged through ctx->comm_env's communicator with the
 *   group collectives of comm/comm.h.
 *
 * Both give the same values bit for bit: reductions fold in member order
 * 0..n-1 from member 0's value (loom_comm_reduce_into), as the collectives
 * do, and everything else is a copy.
 */
#include "comm/comm.h"
#include "core/checked.h"
#include "ops/op.h"
#include "ops/ops_util.h"

#include <stdlib.h>
#include <string.h>

/* ---- attributes ---------------------------------------------------------- */

/* The group ops share their first four slots (group, size, member, seq);
 * transfer has its own layout. */
static int64_t comm_member(const loom_node *n) {
  return n->op == LOOM_OP_TRANSFER ? LOOM_ATTR_I(n, transfer, member)
                                   : LOOM_ATTR_I(n, all_reduce, member);
}
int64_t loom_comm_op_seq(const loom_node *n) {
  return n->op == LOOM_OP_TRANSFER ? LOOM_ATTR_I(n, transfer, seq) : LOOM_ATTR_I(n, all_reduce, seq);
}
void loom_comm_op_set_seq(loom_op op, loom_attr_value *attrs, int64_t seq) {
  if (op == LOOM_OP_TRANSFER)
    LOOM_ATTRV_I(attrs, transfer, seq) = seq;
  else
    LOOM_ATTRV_I(attrs, all_reduce, seq) = seq;
}
static int64_t comm_size(const loom_node *n) {
  return n->op == LOOM_OP_TRANSFER ? 2 : LOOM_ATTR_I(n, all_reduce, size);
}

static loom_status check_common(loom_ctx *ctx, const loom_node *n) {
  int64_t size = comm_size(n), member = comm_member(n), seq = loom_comm_op_seq(n);
  if (n->op == LOOM_OP_TRANSFER) {
    int64_t src = LOOM_ATTR_I(n, transfer, src), dst = LOOM_ATTR_I(n, transfer, dst);
    if (src < 0 || dst < 0 || src == dst || src > INT32_MAX || dst > INT32_MAX)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "src %lld and dst %lld must be two different devices (>= 0)",
                        (long long)src, (long long)dst);
  } else {
    if (size < 1 || size > LOOM_MAX_NODE_IO)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "size %lld is not in 1..%d",
                        (long long)size, LOOM_MAX_NODE_IO);
    int64_t group = LOOM_ATTR_I(n, all_reduce, group);
    if (group < 0 || group > INT32_MAX)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "group %lld is not a group id (>= 0)",
                        (long long)group);
  }
  if (member < -1 || member >= size)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "member %lld is not -1 (the global form) or a member of 0..%lld",
                      (long long)member, (long long)size - 1);
  if (seq < 0) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "seq %lld < 0", (long long)seq);
  return LOOM_STATUS_OK;
}

/* The input and output counts of n's form (n_in < 0: any). */
static void form_counts(const loom_node *n, int32_t *n_in, int32_t *n_out) {
  int64_t member = comm_member(n), size = comm_size(n);
  if (member < 0) {
    bool one_in = n->op == LOOM_OP_BROADCAST || n->op == LOOM_OP_TRANSFER;
    *n_in = one_in ? 1 : (int32_t)size;
    *n_out = n->op == LOOM_OP_TRANSFER ? 1 : (int32_t)size;
    return;
  }
  *n_out = 1;
  *n_in = 1;
  if (n->op == LOOM_OP_BROADCAST && member != LOOM_ATTR_I(n, broadcast, root)) *n_in = 0;
  if (n->op == LOOM_OP_TRANSFER && member == 1) *n_in = 0;
}

static loom_status check_counts(loom_ctx *ctx, const loom_node *n) {
  int32_t want_in, want_out;
  form_counts(n, &want_in, &want_out);
  const char *form = comm_member(n) < 0 ? "the global form" : "this per-device form";
  if (n->n_in != want_in)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s takes %d input%s, got %d", form,
                      want_in, want_in == 1 ? "" : "s", n->n_in);
  if (n->n_out != want_out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s has %d output%s, %d asked for", form,
                      want_out, want_out == 1 ? "" : "s", n->n_out);
  return LOOM_STATUS_OK;
}

/* Every input has input 0's type. */
static loom_status check_same_types(loom_ctx *ctx, const loom_node *n, const loom_type *in) {
  for (int32_t i = 1; i < n->n_in; i++)
    if (!loom_type_equal(&in[i], &in[0])) {
      char a[128], b[128];
      return loom_error(ctx, in[i].dtype != in[0].dtype ? LOOM_STATUS_DTYPE_MISMATCH
                                                        : LOOM_STATUS_SHAPE_MISMATCH,
                        "input %d is %s but input 0 is %s (one value per member, all alike)", i,
                        loom_type_str(&in[i], a, sizeof a), loom_type_str(&in[0], b, sizeof b));
    }
  return LOOM_STATUS_OK;
}

static loom_status check_reduce_attr(loom_ctx *ctx, int64_t r, loom_dtype dt) {
  if (r < 0 || r > 2)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "reduce %lld is not 0 (sum), 1 (max) or 2 (min)", (long long)r);
  if (!loom_comm_reduce_supported(dt, (loom_comm_reduce)r))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no %s reduction of %s",
                      loom_comm_reduce_name((loom_comm_reduce)r), loom_dtype_name(dt));
  return LOOM_STATUS_OK;
}

static loom_status axis_of(loom_ctx *ctx, const char *what, int64_t a, const loom_type *t,
                           int32_t *axis) {
  if (!loom_norm_axis(a, t->rank, axis))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s %lld is out of range for rank %d",
                      what, (long long)a, t->rank);
  return LOOM_STATUS_OK;
}

static loom_status check_divides(loom_ctx *ctx, const char *what, const loom_type *t,
                                 int32_t axis, int64_t size) {
  if (t->shape[axis] % size != 0) {
    char b[128];
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "%s %d of %s (extent %lld) does not split into %lld equal parts", what,
                      axis, loom_type_str(t, b, sizeof b), (long long)t->shape[axis],
                      (long long)size);
  }
  return LOOM_STATUS_OK;
}

static loom_status type_from_attrs(loom_ctx *ctx, const loom_ints *shape, int64_t dtype,
                                   loom_type *out) {
  if (dtype < 0 || dtype >= LOOM_DTYPE_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "dtype %lld is not a dtype",
                      (long long)dtype);
  out->dtype = (loom_dtype)dtype;
  out->rank = shape->n;
  for (int32_t d = 0; d < shape->n; d++) out->shape[d] = shape->v[d];
  return loom_shape_check(ctx, out->rank, out->shape, NULL);
}

/* ---- inference ----------------------------------------------------------- */

static loom_status fill_outputs(const loom_node *n, const loom_type *t, loom_type *out) {
  for (int32_t o = 0; o < n->n_out; o++) out[o] = *t;
  return LOOM_STATUS_OK;
}

static loom_status prologue(loom_ctx *ctx, const loom_node *n, const loom_type *in) {
  LOOM_TRY(check_common(ctx, n));
  LOOM_TRY(check_counts(ctx, n));
  return check_same_types(ctx, n, in);
}

static loom_status all_reduce_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                    loom_type *out) {
  LOOM_TRY(prologue(ctx, n, in));
  LOOM_TRY(check_reduce_attr(ctx, LOOM_ATTR_I(n, all_reduce, reduce), in[0].dtype));
  return fill_outputs(n, &in[0], out);
}

static loom_status all_gather_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                    loom_type *out) {
  LOOM_TRY(prologue(ctx, n, in));
  int32_t axis;
  LOOM_TRY(axis_of(ctx, "axis", LOOM_ATTR_I(n, all_gather, axis), &in[0], &axis));
  loom_type t = in[0];
  if (loom_mul_overflows(t.shape[axis], comm_size(n), &t.shape[axis]))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "the gathered extent overflows");
  return fill_outputs(n, &t, out);
}

static loom_status reduce_scatter_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                        loom_type *out) {
  LOOM_TRY(prologue(ctx, n, in));
  LOOM_TRY(check_reduce_attr(ctx, LOOM_ATTR_I(n, reduce_scatter, reduce), in[0].dtype));
  int32_t axis;
  LOOM_TRY(axis_of(ctx, "axis", LOOM_ATTR_I(n, reduce_scatter, axis), &in[0], &axis));
  LOOM_TRY(check_divides(ctx, "axis", &in[0], axis, comm_size(n)));
  loom_type t = in[0];
  t.shape[axis] /= comm_size(n);
  return fill_outputs(n, &t, out);
}

static loom_status all_to_all_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                    loom_type *out) {
  LOOM_TRY(prologue(ctx, n, in));
  int32_t split, cat;
  LOOM_TRY(axis_of(ctx, "split_axis", LOOM_ATTR_I(n, all_to_all, split_axis), &in[0], &split));
  LOOM_TRY(axis_of(ctx, "concat_axis", LOOM_ATTR_I(n, all_to_all, concat_axis), &in[0], &cat));
  LOOM_TRY(check_divides(ctx, "split_axis", &in[0], split, comm_size(n)));
  loom_type t = in[0];
  t.shape[split] /= comm_size(n);
  t.shape[cat] *= comm_size(n); /* cannot overflow: at most the input's numel */
  return fill_outputs(n, &t, out);
}

static loom_status broadcast_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                   loom_type *out) {
  LOOM_TRY(check_common(ctx, n));
  int64_t root = LOOM_ATTR_I(n, broadcast, root);
  if (root < 0 || root >= comm_size(n))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "root %lld is not a member of 0..%lld",
                      (long long)root, (long long)comm_size(n) - 1);
  LOOM_TRY(check_counts(ctx, n));
  loom_type t;
  if (n->n_in == 1)
    t = in[0];
  else
    LOOM_TRY(type_from_attrs(ctx, &LOOM_ATTR_INTS(n, broadcast, shape),
                             LOOM_ATTR_I(n, broadcast, dtype), &t));
  return fill_outputs(n, &t, out);
}

static loom_status transfer_infer(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                  loom_type *out) {
  LOOM_TRY(check_common(ctx, n));
  LOOM_TRY(check_counts(ctx, n));
  int64_t member = comm_member(n);
  if (member < 0) {
    out[0] = in[0];
  } else if (member == 0) {
    out[0] = (loom_type){.dtype = LOOM_DTYPE_I64, .rank = 0};
  } else {
    LOOM_TRY(type_from_attrs(ctx, &LOOM_ATTR_INTS(n, transfer, shape),
                             LOOM_ATTR_I(n, transfer, dtype), &out[0]));
  }
  return LOOM_STATUS_OK;
}

/* ---- views and buffers ---------------------------------------------------- */

/* The part [lo, lo+len) of v along axis (a view of the same memory). */
static loom_view slice_of(const loom_view *v, int32_t axis, int64_t lo, int64_t len) {
  loom_view s = *v;
  s.shape[axis] = len;
  if (len > 0) s.data = (char *)v->data + lo * v->stride[axis] * (int64_t)loom_dtype_size(v->dtype);
  return s;
}

/* A contiguous buffer of t's size (and its view); NULL on out of memory. */
static void *scratch(loom_ctx *ctx, const loom_type *t, loom_view *v) {
  size_t bytes = (size_t)loom_type_numel(t) * loom_dtype_size(t->dtype);
  void *p = loom_malloc(ctx, bytes ? bytes : 1);
  if (p) *v = loom_view_of(t, p);
  return p;
}

static loom_type type_of(const loom_view *v) {
  loom_type t = {.dtype = v->dtype, .rank = v->rank};
  for (int32_t d = 0; d < v->rank; d++) t.shape[d] = v->shape[d];
  return t;
}

/* dst (contiguous) = the fold of src[0..n) in order 0, 1, ..., n-1. */
static loom_status reduce_views(loom_ctx *ctx, const loom_view *dst, const loom_view *src,
                                int32_t n, loom_comm_reduce op) {
  loom_view_copy(dst, &src[0]);
  int64_t numel = loom_view_numel(dst);
  loom_view tmp = *dst;
  loom_type t = type_of(dst);
  void *buf = NULL;
  for (int32_t i = 1; i < n; i++) {
    const void *x = src[i].data;
    if (!loom_view_is_contiguous(&src[i])) {
      if (!buf && !(buf = scratch(ctx, &t, &tmp))) return LOOM_STATUS_OUT_OF_MEMORY;
      loom_view_copy(&tmp, &src[i]);
      x = buf;
    }
    if (numel) loom_comm_reduce_into(dst->data, x, numel, dst->dtype, op);
  }
  free(buf);
  return LOOM_STATUS_OK;
}

/* dst = the pieces concatenated along axis. */
static void concat_views(const loom_view *dst, const loom_view *pieces, int32_t n, int32_t axis) {
  int64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    loom_view d = slice_of(dst, axis, at, pieces[i].shape[axis]);
    loom_view_copy(&d, &pieces[i]);
    at += pieces[i].shape[axis];
  }
}

/* n equal parts of v along axis, each a view. */
static void split_views(const loom_view *v, int32_t axis, int32_t n, loom_view *parts) {
  int64_t len = v->shape[axis] / n;
  for (int32_t i = 0; i < n; i++) parts[i] = slice_of(v, axis, i * len, len);
}

static loom_view *view_array(loom_ctx *ctx, int64_t n) {
  return loom_malloc(ctx, sizeof(loom_view) * (size_t)(n > 0 ? n : 1));
}

/* ---- the global form ------------------------------------------------------ */

static loom_status global_all_reduce(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  loom_comm_reduce op = (loom_comm_reduce)LOOM_ATTR_I(n, all_reduce, reduce);
  LOOM_TRY(reduce_views(ctx, &out[0], in, n->n_in, op));
  for (int32_t o = 1; o < n->n_out; o++) loom_view_copy(&out[o], &out[0]);
  return LOOM_STATUS_OK;
}

static loom_status global_all_gather(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  (void)ctx;
  int32_t axis;
  loom_norm_axis(LOOM_ATTR_I(n, all_gather, axis), out[0].rank, &axis);
  concat_views(&out[0], in, n->n_in, axis);
  for (int32_t o = 1; o < n->n_out; o++) loom_view_copy(&out[o], &out[0]);
  return LOOM_STATUS_OK;
}

static loom_status global_reduce_scatter(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                         const loom_view *out) {
  int32_t axis, size = n->n_in;
  loom_norm_axis(LOOM_ATTR_I(n, reduce_scatter, axis), in[0].rank, &axis);
  loom_type t = type_of(&in[0]);
  loom_view all;
  void *buf = scratch(ctx, &t, &all);
  loom_view *parts = view_array(ctx, size);
  loom_status st = buf && parts ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st)
    st = reduce_views(ctx, &all, in, size,
                      (loom_comm_reduce)LOOM_ATTR_I(n, reduce_scatter, reduce));
  if (!st) {
    split_views(&all, axis, size, parts);
    for (int32_t o = 0; o < size; o++) loom_view_copy(&out[o], &parts[o]);
  }
  free(parts);
  free(buf);
  return st;
}

static loom_status global_all_to_all(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  int32_t split, cat, size = n->n_in;
  loom_norm_axis(LOOM_ATTR_I(n, all_to_all, split_axis), in[0].rank, &split);
  loom_norm_axis(LOOM_ATTR_I(n, all_to_all, concat_axis), in[0].rank, &cat);
  loom_view *parts = view_array(ctx, size);
  if (!parts) return LOOM_STATUS_OUT_OF_MEMORY;
  int64_t len = in[0].shape[split] / size;
  /* output j: slice j of every input, concatenated in member order */
  for (int32_t j = 0; j < size; j++) {
    for (int32_t i = 0; i < size; i++) parts[i] = slice_of(&in[i], split, j * len, len);
    concat_views(&out[j], parts, size, cat);
  }
  free(parts);
  return LOOM_STATUS_OK;
}

static loom_status global_copy(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                               const loom_view *out) {
  (void)ctx;
  for (int32_t o = 0; o < n->n_out; o++) loom_view_copy(&out[o], &in[0]);
  return LOOM_STATUS_OK;
}

/* ---- the per-device form --------------------------------------------------- */

/* This device's communicator and group, checked against n's attributes. */
typedef struct device_group {
  loom_comm *comm;
  int32_t n;
  const int32_t *ranks;
} device_group;

static loom_status env_comm(loom_ctx *ctx, const loom_node *n, loom_comm **out) {
  const loom_comm_env *env = ctx->comm_env;
  if (!env || !env->comm)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: per-device comm op needs a communicator (loom_ctx.comm_env is %s)",
                      loom_op_name(n->op), env ? "without one" : "NULL");
  *out = env->comm;
  return LOOM_STATUS_OK;
}

static loom_status device_group_of(loom_ctx *ctx, const loom_node *n, device_group *dg) {
  LOOM_TRY(env_comm(ctx, n, &dg->comm));
  const loom_comm_env *env = ctx->comm_env;
  const char *name = loom_op_name(n->op);
  int64_t g = LOOM_ATTR_I(n, all_reduce, group), size = comm_size(n), member = comm_member(n);
  if (g < 0 || g >= env->n_groups || !env->group_start || !env->group_ranks)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: group %lld is not one of the communicator environment's %d groups",
                      name, (long long)g, (int)env->n_groups);
  int32_t start = env->group_start[g], end = env->group_start[g + 1];
  if (end - start != size)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: size %lld, but group %lld has %d members", name, (long long)size,
                      (long long)g, (int)(end - start));
  int32_t rank = dg->comm->rank;
  if (env->group_ranks[start + member] != rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: this device is rank %d, but member %lld of group %lld is rank %d",
                      name, (int)rank, (long long)member, (long long)g,
                      (int)env->group_ranks[start + member]);
  dg->n = (int32_t)size;
  dg->ranks = env->group_ranks + start;
  return LOOM_STATUS_OK;
}

/* out = in, contiguous (out is). */
static void copy_in(const loom_view *out, const loom_view *in) { loom_view_copy(out, in); }

static loom_status device_all_reduce(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  device_group dg = {NULL, 0, NULL};
  LOOM_TRY(device_group_of(ctx, n, &dg));
  copy_in(&out[0], &in[0]);
  return loom_comm_group_all_reduce(dg.comm, ctx, dg.n, dg.ranks, loom_comm_op_seq(n), out[0].data,
                                    loom_view_numel(&out[0]), out[0].dtype,
                                    (loom_comm_reduce)LOOM_ATTR_I(n, all_reduce, reduce));
}

static loom_status device_all_gather(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  device_group dg = {NULL, 0, NULL};
  LOOM_TRY(device_group_of(ctx, n, &dg));
  int32_t axis;
  loom_norm_axis(LOOM_ATTR_I(n, all_gather, axis), in[0].rank, &axis);
  loom_type t = type_of(&in[0]);
  loom_view mine;
  void *mbuf = scratch(ctx, &t, &mine);
  /* the blocks as they arrive: member m's piece at m * numel */
  size_t bytes = (size_t)loom_view_numel(&out[0]) * loom_dtype_size(t.dtype);
  void *abuf = loom_malloc(ctx, bytes ? bytes : 1);
  loom_view *parts = view_array(ctx, dg.n);
  loom_status st = mbuf && abuf && parts ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    loom_view_copy(&mine, &in[0]);
    st = loom_comm_group_all_gather(dg.comm, ctx, dg.n, dg.ranks, loom_comm_op_seq(n), mbuf, abuf,
                                    loom_view_numel(&in[0]), NULL, t.dtype);
  }
  if (!st) {
    size_t each = (size_t)loom_type_numel(&t) * loom_dtype_size(t.dtype);
    for (int32_t m = 0; m < dg.n; m++) parts[m] = loom_view_of(&t, (char *)abuf + m * each);
    concat_views(&out[0], parts, dg.n, axis);
  }
  free(parts);
  free(abuf);
  free(mbuf);
  return st;
}

/* buf = the n parts of in along axis, one after another (block m = part m). */
static void pack_parts(const loom_view *in, int32_t axis, int32_t n, void *buf,
                       loom_view *parts) {
  split_views(in, axis, n, parts);
  loom_type pt = type_of(&parts[0]);
  size_t each = (size_t)loom_type_numel(&pt) * loom_dtype_size(pt.dtype);
  for (int32_t m = 0; m < n; m++) {
    loom_view dst = loom_view_of(&pt, (char *)buf + m * each);
    loom_view_copy(&dst, &parts[m]);
  }
}

static loom_status device_reduce_scatter(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                         const loom_view *out) {
  device_group dg = {NULL, 0, NULL};
  LOOM_TRY(device_group_of(ctx, n, &dg));
  int32_t axis;
  loom_norm_axis(LOOM_ATTR_I(n, reduce_scatter, axis), in[0].rank, &axis);
  loom_type t = type_of(&in[0]);
  loom_view packed;
  void *buf = scratch(ctx, &t, &packed);
  loom_view *parts = view_array(ctx, dg.n);
  loom_status st = buf && parts ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    pack_parts(&in[0], axis, dg.n, buf, parts);
    st = loom_comm_group_reduce_scatter(dg.comm, ctx, dg.n, dg.ranks, loom_comm_op_seq(n), buf,
                                        out[0].data, loom_view_numel(&out[0]), NULL, t.dtype,
                                        (loom_comm_reduce)LOOM_ATTR_I(n, reduce_scatter, reduce));
  }
  free(parts);
  free(buf);
  return st;
}

static loom_status device_all_to_all(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                     const loom_view *out) {
  device_group dg = {NULL, 0, NULL};
  LOOM_TRY(device_group_of(ctx, n, &dg));
  int32_t split, cat;
  loom_norm_axis(LOOM_ATTR_I(n, all_to_all, split_axis), in[0].rank, &split);
  loom_norm_axis(LOOM_ATTR_I(n, all_to_all, concat_axis), in[0].rank, &cat);
  loom_type t = type_of(&in[0]);
  loom_view packed, got;
  void *sbuf = scratch(ctx, &t, &packed), *rbuf = scratch(ctx, &t, &got);
  loom_view *parts = view_array(ctx, dg.n);
  loom_status st = sbuf && rbuf && parts ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    pack_parts(&in[0], split, dg.n, sbuf, parts); /* block j goes to member j */
    st = loom_comm_group_all_to_all(dg.comm, ctx, dg.n, dg.ranks, loom_comm_op_seq(n), sbuf, rbuf,
                                    loom_view_numel(&in[0]) / dg.n, t.dtype);
  }
  if (!st) {
    /* block i came from member i: this member's slice of its input */
    loom_type pt = type_of(&parts[0]);
    size_t each = (size_t)loom_type_numel(&pt) * loom_dtype_size(pt.dtype);
    for (int32_t i = 0; i < dg.n; i++) parts[i] = loom_view_of(&pt, (char *)rbuf + i * each);
    concat_views(&out[0], parts, dg.n, cat);
  }
  free(parts);
  free(rbuf);
  free(sbuf);
  return st;
}

static loom_status device_broadcast(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                    const loom_view *out) {
  device_group dg = {NULL, 0, NULL};
  LOOM_TRY(device_group_of(ctx, n, &dg));
  if (n->n_in == 1) copy_in(&out[0], &in[0]);
  return loom_comm_group_broadcast(dg.comm, ctx, dg.n, dg.ranks, loom_comm_op_seq(n), out[0].data,
                                   loom_view_numel(&out[0]), out[0].dtype,
                                   (int32_t)LOOM_ATTR_I(n, broadcast, root));
}

static loom_status device_transfer(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                   const loom_view *out) {
  loom_comm *c = NULL;
  LOOM_TRY(env_comm(ctx, n, &c));
  int64_t member = comm_member(n);
  int32_t src = (int32_t)LOOM_ATTR_I(n, transfer, src), dst = (int32_t)LOOM_ATTR_I(n, transfer, dst);
  int32_t want = member == 0 ? src : dst;
  if (c->rank != want)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "transfer: member %lld is device %d (%s), but this device is rank %d",
                      (long long)member, (int)want, member == 0 ? "src" : "dst", (int)c->rank);
  if (member == 1)
    return loom_comm_seq_recv(c, ctx, out[0].data, loom_view_numel(&out[0]), out[0].dtype, src,
                              loom_comm_op_seq(n));
  *(int64_t *)out[0].data = 0;
  loom_type t = type_of(&in[0]);
  loom_view v = in[0];
  void *buf = NULL;
  if (!loom_view_is_contiguous(&in[0])) {
    if (!(buf = scratch(ctx, &t, &v))) return LOOM_STATUS_OUT_OF_MEMORY;
    loom_view_copy(&v, &in[0]);
  }
  loom_status st =
      loom_comm_seq_send(c, ctx, v.data, loom_view_numel(&v), v.dtype, dst, loom_comm_op_seq(n));
  free(buf);
  return st;
}

/* ---- the reference kernels: one per op, by form ----------------------------- */

#define COMM_REF(name)                                                                           \
  static loom_status name##_ref(loom_ctx *ctx, const loom_node *n, const loom_view *in,          \
                                const loom_view *out) {                                          \
    return comm_member(n) < 0 ? global_##name(ctx, n, in, out) : device_##name(ctx, n, in, out); \
  }
#define global_broadcast global_copy
#define global_transfer global_copy
COMM_REF(all_reduce)
COMM_REF(all_gather)
COMM_REF(reduce_scatter)
COMM_REF(all_to_all)
COMM_REF(broadcast)
COMM_REF(transfer)
#undef global_broadcast
#undef global_transfer
#undef COMM_REF

#define COMM_DEF(NAME)                                                                           \
  const loom_op_def loom_opdef_##NAME = {                                                        \
      .name = #NAME,                                                                             \
      .cls = LOOM_OPCLASS_COMM,                                                                  \
      .min_in = 0,                                                                               \
      .max_in = -1,                                                                              \
      .n_out = -1,                                                                               \
      .n_attrs = LOOM_ATTR_COUNT(NAME),                                                          \
      .attrs = LOOM_ATTR_SPECS(NAME),                                                            \
      .infer = NAME##_infer,                                                                     \
      .ref = NAME##_ref,                                                                         \
  };
COMM_DEF(all_reduce)
COMM_DEF(all_gather)
COMM_DEF(reduce_scatter)
COMM_DEF(all_to_all)
COMM_DEF(broadcast)
COMM_DEF(transfer)
#undef COMM_DEF

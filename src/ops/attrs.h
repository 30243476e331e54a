/*
 * Every op's attributes, in one list per op. Each list expands twice: into
 * the op's loom_attr_spec array (its definition in src/ops, which the text
 * IR, `loom ops` and loom_graph_op's named attributes read), and into an
 * enum of slot indices, so that code reads an attribute by a name the
 * compiler checks:
 *
 *   bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0;
 *
 * A misspelt op or attribute name is a build error; so is reading an INT
 * attribute as FLOAT. In builds without NDEBUG a node read through the
 * wrong op's slots (n->op has no attribute NAME at that slot) aborts with
 * a message. Names given by the user (the text IR, loom_graph_op) are the
 * only ones looked up as strings, with loom_op_attr_index, and an unknown
 * one is an error there.
 *
 * X(OP, NAME, KIND, FMT, REQUIRED, DEF_I, DEF_F): KIND is INT, FLOAT or
 * INTS (loom_attr_kind); FMT is how the text IR shows an INT (PLAIN, BOOL,
 * DTYPE); defaults apply when not required (INTS default to empty). The
 * order of a list is the op's spec order: the text IR prints attributes in
 * it, so reordering a list changes printed graphs.
 */
#ifndef LOOM_OPS_ATTRS_H
#define LOOM_OPS_ATTRS_H

#include "ir/graph.h"

/* ---- the lists -------------------------------------------------------- */

#define LOOM_ATTR_LIST_cast(X, OP) X(OP, dtype, INT, DTYPE, true, 0, 0.0)

/* reduce_sum/max/min and the reduce_mean composite share one layout. */
#define LOOM_ATTR_LIST_REDUCE(X, OP)                                                               \
  X(OP, axes, INTS, PLAIN, false, 0, 0.0) /* empty: every axis */                                  \
  X(OP, keepdims, INT, BOOL, false, 0, 0.0)
#define LOOM_ATTR_LIST_reduce_sum LOOM_ATTR_LIST_REDUCE
#define LOOM_ATTR_LIST_reduce_max LOOM_ATTR_LIST_REDUCE
#define LOOM_ATTR_LIST_reduce_min LOOM_ATTR_LIST_REDUCE
#define LOOM_ATTR_LIST_reduce_mean LOOM_ATTR_LIST_REDUCE

#define LOOM_ATTR_LIST_reshape(X, OP) X(OP, shape, INTS, PLAIN, true, 0, 0.0)
#define LOOM_ATTR_LIST_transpose(X, OP) X(OP, perm, INTS, PLAIN, true, 0, 0.0)
#define LOOM_ATTR_LIST_broadcast_to(X, OP) X(OP, shape, INTS, PLAIN, true, 0, 0.0)
#define LOOM_ATTR_LIST_slice(X, OP)                                                                \
  X(OP, starts, INTS, PLAIN, true, 0, 0.0)                                                         \
  X(OP, ends, INTS, PLAIN, true, 0, 0.0)
#define LOOM_ATTR_LIST_concat(X, OP) X(OP, axis, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_pad(X, OP)                                                                  \
  X(OP, lo, INTS, PLAIN, true, 0, 0.0)                                                             \
  X(OP, hi, INTS, PLAIN, true, 0, 0.0)                                                             \
  X(OP, value, FLOAT, PLAIN, false, 0, 0.0)

/* gather and scatter_add over a piece of the table along axis: the piece
 * holds rows [base, base + extent) of a table of `range` rows (0: the
 * piece is the whole table). Indices must lie in [0, range); those outside
 * the piece read zeros (gather) or are dropped (scatter_add), so the
 * pieces' results are partial sums of the whole op's: a vocabulary-parallel
 * embedding is a gather split along the table's rows. */
#define LOOM_ATTR_LIST_gather(X, OP)                                                               \
  X(OP, axis, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, base, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, range, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_scatter_add(X, OP)                                                          \
  X(OP, shape, INTS, PLAIN, true, 0, 0.0)                                                          \
  X(OP, axis, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, base, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, range, INT, PLAIN, false, 0, 0.0)
/* iota counts from start along axis: a piece of a split iota starts at
 * its offset. */
#define LOOM_ATTR_LIST_iota(X, OP)                                                                 \
  X(OP, shape, INTS, PLAIN, true, 0, 0.0)                                                          \
  X(OP, axis, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, dtype, INT, DTYPE, false, LOOM_DTYPE_I64, 0.0)                                             \
  X(OP, start, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_constant(X, OP)                                                             \
  X(OP, shape, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dtype, INT, DTYPE, false, LOOM_DTYPE_F32, 0.0)                                             \
  X(OP, value, FLOAT, PLAIN, false, 0, 0.0)

#define LOOM_ATTR_LIST_matmul(X, OP)                                                               \
  X(OP, trans_a, INT, BOOL, false, 0, 0.0)                                                         \
  X(OP, trans_b, INT, BOOL, false, 0, 0.0)

/* Where an RNG op's tensor lies in the logical tensor whose mask it draws
 * (rng/piece.h): `whole` the logical shape (empty: the op's own, the
 * single-device case), `at` the piece's first index (empty: zeros). The
 * sub-op of a parallel plan gets them from the op's sub_attrs hook. */
#define LOOM_ATTR_LIST_PIECE(X, OP)                                                                \
  X(OP, whole, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, at, INTS, PLAIN, false, 0, 0.0)

/* The attention composite and its flash forms: one layout, so a pass can
 * copy the attributes from one to the other slot by slot. scale 0 means
 * 1/sqrt(D); bias: the last input is an additive bias on the scaled scores
 * (ops/attention_bias.h). */
#define LOOM_ATTR_LIST_ATTENTION(X, OP)                                                            \
  X(OP, causal, INT, BOOL, false, 0, 0.0)                                                          \
  X(OP, p, FLOAT, PLAIN, false, 0, 0.0)                                                            \
  X(OP, seed, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, offset, INT, PLAIN, false, 0, 0.0)                                                         \
  X(OP, scale, FLOAT, PLAIN, false, 0, 0.0)                                                        \
  LOOM_ATTR_LIST_PIECE(X, OP)                                                                      \
  X(OP, bias, INT, BOOL, false, 0, 0.0)
#define LOOM_ATTR_LIST_attention LOOM_ATTR_LIST_ATTENTION
/* The flash forms add strided operands (ops/attention.c; made by the cpu
 * backend's view fold, passes/attention_views.c, never before autodiff):
 * dims, the logical sizes [lead..., Sq, D, Sk, Dv] (empty: no views, every
 * operand is its input); q_at ... do_at, where operand q (k, v, o, d_o)
 * lies in its input (o: in the forward's output) as [offset, row stride,
 * (size, stride) per leading dim] (empty: the input is the operand);
 * dq_at, dk_at, dv_at, where the backward writes dq, dk, dv in its one
 * output (all three or none: then it has three outputs, the gradients);
 * out_shape, the shape of the forward's output when o_at places o in it,
 * of the backward's one output. */
#define LOOM_ATTR_LIST_FLASH(X, OP)                                                                \
  LOOM_ATTR_LIST_ATTENTION(X, OP)                                                                  \
  X(OP, dims, INTS, PLAIN, false, 0, 0.0)                                                          \
  X(OP, q_at, INTS, PLAIN, false, 0, 0.0)                                                          \
  X(OP, k_at, INTS, PLAIN, false, 0, 0.0)                                                          \
  X(OP, v_at, INTS, PLAIN, false, 0, 0.0)                                                          \
  X(OP, o_at, INTS, PLAIN, false, 0, 0.0)                                                          \
  X(OP, do_at, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dq_at, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dk_at, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dv_at, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, out_shape, INTS, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_flash_attention LOOM_ATTR_LIST_FLASH
#define LOOM_ATTR_LIST_flash_attention_grad LOOM_ATTR_LIST_FLASH

#define LOOM_ATTR_LIST_dropout(X, OP)                                                              \
  X(OP, p, FLOAT, PLAIN, false, 0, 0.1)                                                            \
  X(OP, seed, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, offset, INT, PLAIN, false, 0, 0.0)                                                         \
  LOOM_ATTR_LIST_PIECE(X, OP)
/* overlap is a scheduling hint: the mask may run concurrently with
 * earlier work. Bit e of the mask is element e (row-major) of a tensor of
 * `shape` (empty: [numel]; its elements must number numel), the piece
 * that whole and at place: the probabilities of the flash_attention that
 * reads it. */
#define LOOM_ATTR_LIST_dropout_mask(X, OP)                                                         \
  X(OP, p, FLOAT, PLAIN, false, 0, 0.1)                                                            \
  X(OP, seed, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, offset, INT, PLAIN, false, 0, 0.0)                                                         \
  X(OP, numel, INT, PLAIN, true, 0, 0.0)                                                           \
  X(OP, overlap, INT, BOOL, false, 0, 0.0)                                                         \
  LOOM_ATTR_LIST_PIECE(X, OP)                                                                      \
  X(OP, shape, INTS, PLAIN, false, 0, 0.0)

#define LOOM_ATTR_LIST_SOFTMAX(X, OP) X(OP, axis, INT, PLAIN, false, -1, 0.0)
#define LOOM_ATTR_LIST_softmax LOOM_ATTR_LIST_SOFTMAX
#define LOOM_ATTR_LIST_log_softmax LOOM_ATTR_LIST_SOFTMAX
/* Normalise over axis..rank-1; the norms differ only in eps's default. */
#define LOOM_ATTR_LIST_NORM(X, OP, EPS)                                                            \
  X(OP, axis, INT, PLAIN, false, -1, 0.0)                                                          \
  X(OP, eps, FLOAT, PLAIN, false, 0, EPS)
#define LOOM_ATTR_LIST_layer_norm(X, OP) LOOM_ATTR_LIST_NORM(X, OP, 1e-5)
#define LOOM_ATTR_LIST_rms_norm(X, OP) LOOM_ATTR_LIST_NORM(X, OP, 1e-6)
#define LOOM_ATTR_LIST_gelu(X, OP) X(OP, approximate, INT, BOOL, false, 0, 0.0)
#define LOOM_ATTR_LIST_adamw(X, OP)                                                                \
  X(OP, lr, FLOAT, PLAIN, false, 0, 1e-3)                                                          \
  X(OP, beta1, FLOAT, PLAIN, false, 0, 0.9)                                                        \
  X(OP, beta2, FLOAT, PLAIN, false, 0, 0.999)                                                      \
  X(OP, eps, FLOAT, PLAIN, false, 0, 1e-8)                                                         \
  X(OP, weight_decay, FLOAT, PLAIN, false, 0, 0.01)

/* Communication ops (comm_ops.c). group: an id into the communicator
 * environment's groups (comm/comm.h); size: its members; member -1: the
 * global form (one input and output per member), else this member's
 * per-device form; seq: the op's number, from which its message tags come,
 * so two comm ops never take each other's messages; reduce: 0 sum, 1 max,
 * 2 min (loom_comm_reduce). */
#define LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                           \
  X(OP, group, INT, PLAIN, false, 0, 0.0)                                                          \
  X(OP, size, INT, PLAIN, true, 0, 0.0)                                                            \
  X(OP, member, INT, PLAIN, false, -1, 0.0)                                                        \
  X(OP, seq, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_all_reduce(X, OP)                                                           \
  LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                                 \
  X(OP, reduce, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_all_gather(X, OP)                                                           \
  LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                                 \
  X(OP, axis, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_reduce_scatter(X, OP)                                                       \
  LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                                 \
  X(OP, axis, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, reduce, INT, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_all_to_all(X, OP)                                                           \
  LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                                 \
  X(OP, split_axis, INT, PLAIN, false, 0, 0.0)                                                     \
  X(OP, concat_axis, INT, PLAIN, false, 0, 0.0)
/* root: the member whose value everyone gets; shape and dtype: the type a
 * non-root member's per-device form (no input) gives. */
#define LOOM_ATTR_LIST_broadcast(X, OP)                                                            \
  LOOM_ATTR_LIST_COMM_GROUP(X, OP)                                                                 \
  X(OP, root, INT, PLAIN, false, 0, 0.0)                                                           \
  X(OP, shape, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dtype, INT, DTYPE, false, LOOM_DTYPE_F32, 0.0)
/* One value from device src to device dst (ranks). Per-device: member 0
 * sends (its output is an i64 token, 0), member 1 receives shape/dtype. */
#define LOOM_ATTR_LIST_transfer(X, OP)                                                             \
  X(OP, src, INT, PLAIN, false, 0, 0.0)                                                            \
  X(OP, dst, INT, PLAIN, false, 0, 0.0)                                                            \
  X(OP, member, INT, PLAIN, false, -1, 0.0)                                                        \
  X(OP, seq, INT, PLAIN, false, 0, 0.0)                                                            \
  X(OP, shape, INTS, PLAIN, false, 0, 0.0)                                                         \
  X(OP, dtype, INT, DTYPE, false, LOOM_DTYPE_F32, 0.0)

/* Sliding windows (conv.c, pool.c) over the spatial dims 2.. of [N, C,
 * S...]: per spatial dim a stride, padding before (pads_lo) and after
 * (pads_hi) and a dilation; an empty list means strides and dilations of
 * 1 and no padding. The conv ops share their first five slots, the pools
 * all of theirs, so a gradient copies them slot by slot. */
#define LOOM_ATTR_LIST_WINDOW(X, OP)                                                               \
  X(OP, strides, INTS, PLAIN, false, 0, 0.0)                                                       \
  X(OP, pads_lo, INTS, PLAIN, false, 0, 0.0)                                                       \
  X(OP, pads_hi, INTS, PLAIN, false, 0, 0.0)                                                       \
  X(OP, dilations, INTS, PLAIN, false, 0, 0.0)
#define LOOM_ATTR_LIST_conv(X, OP)                                                                 \
  LOOM_ATTR_LIST_WINDOW(X, OP)                                                                     \
  X(OP, groups, INT, PLAIN, false, 1, 0.0)
/* output_padding: extra output positions at the end of each spatial dim
 * (which the stride would otherwise leave ambiguous). */
#define LOOM_ATTR_LIST_conv_transpose(X, OP)                                                       \
  LOOM_ATTR_LIST_conv(X, OP)                                                                       \
  X(OP, output_padding, INTS, PLAIN, false, 0, 0.0)
/* kernel: the weights' spatial dims (the input and the output gradient do
 * not tell them). */
#define LOOM_ATTR_LIST_conv_grad_weight(X, OP)                                                     \
  LOOM_ATTR_LIST_conv(X, OP)                                                                       \
  X(OP, kernel, INTS, PLAIN, true, 0, 0.0)
/* ceil_mode: the output size rounds up (a last window may run past the
 * end padding). count_include_pad (avg_pool only): the divisor counts the
 * window's positions in the explicit padding too. */
#define LOOM_ATTR_LIST_POOL(X, OP)                                                                 \
  X(OP, kernel, INTS, PLAIN, true, 0, 0.0)                                                         \
  LOOM_ATTR_LIST_WINDOW(X, OP)                                                                     \
  X(OP, ceil_mode, INT, BOOL, false, 0, 0.0)                                                       \
  X(OP, count_include_pad, INT, BOOL, false, 0, 0.0)
#define LOOM_ATTR_LIST_max_pool LOOM_ATTR_LIST_POOL
#define LOOM_ATTR_LIST_avg_pool LOOM_ATTR_LIST_POOL
#define LOOM_ATTR_LIST_max_pool_grad LOOM_ATTR_LIST_POOL
#define LOOM_ATTR_LIST_avg_pool_grad LOOM_ATTR_LIST_POOL

/* The ops that have a list above (the others have no attributes). */
/* clang-format off */
#define LOOM_ATTR_OPS(Y)                                                                           \
  Y(cast) Y(reduce_sum) Y(reduce_max) Y(reduce_min)                                                \
  Y(reshape) Y(transpose) Y(broadcast_to) Y(slice) Y(concat) Y(pad)                                \
  Y(gather) Y(scatter_add) Y(iota) Y(constant)                                                     \
  Y(matmul) Y(flash_attention) Y(flash_attention_grad) Y(dropout) Y(dropout_mask)                  \
  Y(reduce_mean) Y(softmax) Y(log_softmax) Y(layer_norm) Y(rms_norm) Y(gelu) Y(attention)          \
  Y(adamw) Y(all_reduce) Y(all_gather) Y(reduce_scatter) Y(all_to_all) Y(broadcast)              \
  Y(transfer) Y(conv) Y(conv_transpose) Y(conv_grad_weight) Y(max_pool) Y(avg_pool)             \
  Y(max_pool_grad) Y(avg_pool_grad)
/* clang-format on */

/* ---- what the lists expand into --------------------------------------- */

/* LOOM_ATTR_SLOT_<op>_<name>: the slot; LOOM_ATTR_COUNT_<op>: how many. */
#define LOOM_X_ATTR_SLOT(OP, NAME, ...) LOOM_ATTR_SLOT_##OP##_##NAME,
/* LOOM_ATTR_KIND_<op>_<name>: the loom_attr_kind, for the typed reads. */
#define LOOM_X_ATTR_KIND(OP, NAME, KIND, ...) LOOM_ATTR_KIND_##OP##_##NAME = LOOM_ATTR_##KIND,
#define LOOM_X_ATTR_ENUMS(OP)                                                                      \
  enum { LOOM_ATTR_LIST_##OP(LOOM_X_ATTR_SLOT, OP) LOOM_ATTR_COUNT_##OP };                         \
  enum { LOOM_ATTR_LIST_##OP(LOOM_X_ATTR_KIND, OP) };                                              \
  _Static_assert(LOOM_ATTR_COUNT_##OP <= LOOM_MAX_ATTRS, #OP ": too many attributes");
LOOM_ATTR_OPS(LOOM_X_ATTR_ENUMS)
#undef LOOM_X_ATTR_ENUMS

/* The spec array of an op's definition: `.n_attrs = LOOM_ATTR_COUNT(matmul),
 * .attrs = LOOM_ATTR_SPECS(matmul)`. */
#define LOOM_X_ATTR_SPEC(OP, NAME, KIND, FMT, REQ, DEF_I, DEF_F)                                   \
  {.name = #NAME,                                                                                  \
   .kind = LOOM_ATTR_##KIND,                                                                       \
   .fmt = LOOM_ATTR_FMT_##FMT,                                                                     \
   .required = (REQ),                                                                              \
   .def_i = (DEF_I),                                                                               \
   .def_f = (DEF_F)},
#define LOOM_ATTR_SPECS(OP)                                                                        \
  { LOOM_ATTR_LIST_##OP(LOOM_X_ATTR_SPEC, OP) }
#define LOOM_ATTR_COUNT(OP) LOOM_ATTR_COUNT_##OP

/* ---- typed reads ------------------------------------------------------ */

/* The slot of OP's attribute NAME; a build error unless it is of KIND
 * (the negative array size is the check). */
#define LOOM_ATTR_KIND_CHECK_(OP, NAME, KIND)                                                      \
  (0 * sizeof(char[(int)LOOM_ATTR_KIND_##OP##_##NAME == (int)LOOM_ATTR_##KIND ? 1 : -1]))
#define LOOM_ATTR_SLOT(OP, NAME, KIND)                                                             \
  ((int32_t)(LOOM_ATTR_SLOT_##OP##_##NAME + LOOM_ATTR_KIND_CHECK_(OP, NAME, KIND)))

/* Returns slot when op's attribute at slot is called name; otherwise
 * reports the misuse on stderr and aborts (a bug in Loom, not in input). */
int32_t loom_attr_slot_checked(loom_op op, int32_t slot, const char *name);

#ifdef NDEBUG
#define LOOM_ATTR_NODE_(n, OP, NAME, KIND) ((n)->attr[LOOM_ATTR_SLOT(OP, NAME, KIND)])
#else
#define LOOM_ATTR_NODE_(n, OP, NAME, KIND)                                                         \
  ((n)->attr[loom_attr_slot_checked((n)->op, LOOM_ATTR_SLOT(OP, NAME, KIND), #NAME)])
#endif

/* Attribute NAME of node n, whose op has OP's attributes (OP itself or an
 * op sharing its list). Lvalues: they also set. */
#define LOOM_ATTR_I(n, OP, NAME) (LOOM_ATTR_NODE_(n, OP, NAME, INT).i)
#define LOOM_ATTR_F(n, OP, NAME) (LOOM_ATTR_NODE_(n, OP, NAME, FLOAT).f)
#define LOOM_ATTR_INTS(n, OP, NAME) (LOOM_ATTR_NODE_(n, OP, NAME, INTS).ints)

/* The same on a spec-ordered value array (loom_attr_value[LOOM_MAX_ATTRS],
 * as lb_op and loom_graph_add take it). */
#define LOOM_ATTRV_I(a, OP, NAME) ((a)[LOOM_ATTR_SLOT(OP, NAME, INT)].i)
#define LOOM_ATTRV_F(a, OP, NAME) ((a)[LOOM_ATTR_SLOT(OP, NAME, FLOAT)].f)
#define LOOM_ATTRV_INTS(a, OP, NAME) ((a)[LOOM_ATTR_SLOT(OP, NAME, INTS)].ints)

#endif

/*
 * The op table: one definition per op (the single source of truth).
 * Each op lives in one file of src/ops by family; op_table.c gathers them
 * through LOOM_OP_LIST, so an op without a definition fails to link.
 */
#ifndef LOOM_OPS_OP_H
#define LOOM_OPS_OP_H

#include "ir/graph.h"
#include "ir/view.h"
#include "ops/attrs.h"

typedef enum loom_op_class {
  LOOM_OPCLASS_ELEMENTWISE = 0, /* incl. select, cast, comparisons */
  LOOM_OPCLASS_REDUCE,
  LOOM_OPCLASS_LAYOUT,  /* reshape, transpose, broadcast, slice, concat, pad */
  LOOM_OPCLASS_INDEX,   /* gather, scatter_add */
  LOOM_OPCLASS_SOURCE,  /* iota, constant: no inputs */
  LOOM_OPCLASS_GEMM,    /* matmul: compute-intensive */
  LOOM_OPCLASS_RNG,     /* dropout, dropout_mask */
  LOOM_OPCLASS_ATTENTION, /* flash_attention (+ grad): compute-intensive, one kernel */
  LOOM_OPCLASS_COMPOSITE,
  /* all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
   * transfer (comm_ops.c): data between devices. Each node is its own
   * event: never fused, merged with an equal one, dropped as dead or
   * reordered relative to another comm node (loom_op_is_comm). */
  LOOM_OPCLASS_COMM,
  /* max_pool, avg_pool (+ grads, pool.c): sliding windows, a boundary for
   * stitching (the convolutions are GEMM-class) */
  LOOM_OPCLASS_WINDOW
} loom_op_class;

/* Inputs and outputs of one node at most: a comm op's global form has one
 * per group member. Ops other than comm ops stay within LOOM_PART_MAX_IO
 * outputs. */
#define LOOM_MAX_NODE_IO 4096

/* How the text IR shows an INT attribute. */
typedef enum loom_attr_fmt {
  LOOM_ATTR_FMT_PLAIN = 0,
  LOOM_ATTR_FMT_BOOL,  /* true/false */
  LOOM_ATTR_FMT_DTYPE, /* f32, i64, ... */
} loom_attr_fmt;

typedef struct loom_attr_spec {
  const char *name;
  loom_attr_kind kind;
  loom_attr_fmt fmt;
  bool required;
  int64_t def_i; /* defaults when not required; INTS default to empty */
  double def_f;
} loom_attr_spec;

/*
 * Partition annotation, einsum-style. Every dimension of every input and
 * output carries a label (or -1: must stay whole). A label that appears in
 * an output is SPATIAL: splitting it splits every tensor carrying it into
 * disjoint pieces. A label found only in inputs is PARTIAL: splitting it
 * gives partial results that `combine` (add, maximum, minimum) joins.
 */
#define LOOM_PART_MAX_LABELS 16
#define LOOM_PART_MAX_IO 16
typedef enum loom_split_kind {
  LOOM_SPLIT_SPATIAL = 0,
  LOOM_SPLIT_PARTIAL
} loom_split_kind;

typedef struct loom_partition {
  int32_t n_labels, n_in, n_out; /* n_labels == 0: can only be replicated */
  uint8_t split[LOOM_PART_MAX_LABELS];
  loom_op combine[LOOM_PART_MAX_LABELS]; /* for PARTIAL labels */
  int8_t in[LOOM_PART_MAX_IO][LOOM_MAX_RANK];
  int8_t out[LOOM_PART_MAX_IO][LOOM_MAX_RANK];
} loom_partition;

typedef loom_status (*loom_infer_fn)(loom_ctx *ctx, const loom_node *n,
                                     const loom_type *in, loom_type *out);
/* Reference kernel: inputs are (possibly strided) views; outputs contiguous. */
typedef loom_status (*loom_ref_fn)(loom_ctx *ctx, const loom_node *n,
                                   const loom_view *in, const loom_view *out);
/* Gradient rule: dout[i] is the gradient of output i (-1: none). Sets din[j]
 * (preset to -1 = zero) by adding nodes to g with the ir/build.h helpers. */
typedef void (*loom_grad_fn)(loom_graph *g, const loom_node *n,
                             const int32_t *dout, int32_t *din);
/* Composite lowering: in are n's inputs already in g; writes n_out ids. */
typedef void (*loom_decompose_fn)(loom_graph *g, const loom_node *n,
                                  const int32_t *in, int32_t *out);
typedef void (*loom_partition_fn)(const loom_node *n, const loom_type *in,
                                  const loom_type *out, loom_partition *p);
/* Sub-op attributes (parallel/subop.h): attrs hold n's; the hook rewrites
 * those that name shapes or positions for the sub-op that reads in_box[i]
 * of input i (whole type in[i]) and writes out_box[o] of output o. */
struct loom_vbox;
typedef loom_status (*loom_sub_attrs_fn)(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                         const loom_type *out, const struct loom_vbox *in_box,
                                         const struct loom_vbox *out_box,
                                         loom_attr_value *attrs);

typedef struct loom_op_def {
  const char *name;
  loom_op_class cls;
  int32_t min_in, max_in; /* max_in < 0: variadic */
  int32_t n_out;          /* < 0: variadic (1..LOOM_MAX_NODE_IO; infer checks) */
  int32_t n_attrs;
  loom_attr_spec attrs[LOOM_MAX_ATTRS];
  loom_infer_fn infer;
  loom_ref_fn ref;             /* primitives */
  loom_grad_fn grad;           /* NULL: not differentiable (a composite: through its decomposition) */
  loom_decompose_fn decompose; /* composites */
  loom_partition_fn partition; /* primitives */
  loom_sub_attrs_fn sub_attrs; /* NULL: no attribute depends on the piece */
  /* Element-wise scalar semantics, shared by the reference kernel and the
   * code generators: scalar1 for unary ops, scalar2 for binary ops. */
  double (*scalar1)(double x);
  double (*scalar2)(double a, double b);
} loom_op_def;

/* The exact integer semantics of an element-wise op (unary ops ignore b):
 * int64, saturating, x / 0 == 0. The reference kernels and the kernel IR
 * interpreter both use it; generated code must match it. */
int64_t loom_int_elementwise(loom_op op, int64_t a, int64_t b);

/* The definition of op (NULL if out of range). */
const loom_op_def *loom_op_get(loom_op op);
/* True for the COMM class: nodes with effects beyond their outputs (a
 * peer waits for them), which passes keep as they are, in order. */
bool loom_op_is_comm(loom_op op);
/* The element-wise op a reduction folds its elements with: add for
 * reduce_sum, maximum for reduce_max, minimum for reduce_min. */
loom_op loom_reduce_combine(loom_op reduce);
/* A comm op every member of its group takes part in (not a point-to-point
 * transfer): the runtime's order runs its readers after the ready work
 * that does not read one (fusion/plan_merge.c; lower_run_order.c mirrors it). */
bool loom_op_is_collective(loom_op op);
/* A comm op's `seq` (the number every member runs it by; comm_ops.c):
 * read from a node, or set in attributes of op. */
int64_t loom_comm_op_seq(const loom_node *n);
void loom_comm_op_set_seq(loom_op op, loom_attr_value *attrs, int64_t seq);
/* True if n may have n_out outputs. */
bool loom_op_out_count_ok(const loom_op_def *d, int32_t n_out);
/* Index of attribute `name` in op's spec, -1 if none. Only for names the
 * user gives (text IR, loom_graph_op); code reads slots (ops/attrs.h). */
int32_t loom_op_attr_index(loom_op op, const char *name);

/* Empties p for n_in inputs and n_out outputs (every dim slot unused). */
void loom_partition_init(loom_partition *p, int32_t n_in, int32_t n_out);
/* Gives label l to dim d of input i / output o; returns l. */
int32_t loom_partition_new_label(loom_partition *p, loom_split_kind k,
                                 loom_op combine);

/* Formats a partition as "a b, b c -> a c | b:add" into buf. */
const char *loom_partition_str(const loom_partition *p, char *buf, size_t n);

#define LOOM_X_DECL(NAME, name) extern const loom_op_def loom_opdef_##name;
LOOM_OP_LIST(LOOM_X_DECL)
#undef LOOM_X_DECL

#endif

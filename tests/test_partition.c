/*
 * Every op's partition annotation and sub_attrs hook, checked by running
 * the pieces. For a corpus of op instances, each label whose extent splits
 * by 2 (and by 3 where it divides) is cut into even ranges; each sub-op
 * reads the boxes (parallel/subop.h) of random whole inputs, runs the op's
 * reference kernel (composites: their decomposition) with the sub-op's
 * attributes, and must give exactly the box of the whole output (spatial
 * labels) or, joined by the label's combine op, the whole output (partial
 * labels). A negative control runs the same check on broken annotations
 * and expects it to fail. Also: the annotations' text for each instance,
 * label extents that are not multiples, and iota's start attribute on
 * every backend and fusion mode.
 */
#include "common.h"

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/view.h"
#include "model/gpt.h"
#include "ops/op.h"
#include "parallel/subop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
static bool quiet; /* the negative control expects failures: no messages */
static loom_test_rng rng = {.s = 0x9e3779b97f4a7c15ull};

#define MAX_IN 5
#define MAX_OUT 3

typedef struct tensor {
  loom_type t;
  void *data;
} tensor;

static void tensor_alloc(tensor *x, const loom_type *t) {
  x->t = *t;
  int64_t n = loom_type_numel(t);
  x->data = calloc((size_t)(n > 0 ? n : 1), loom_dtype_size(t->dtype));
}

static loom_view view(const tensor *x) { return loom_view_of(&x->t, x->data); }

/* Copies box b of x into a new contiguous tensor. */
static void tensor_box(const tensor *x, const loom_vbox *b, tensor *piece) {
  loom_type t = x->t;
  for (int32_t d = 0; d < t.rank; d++)
    t.shape[d] = b->end[d] - b->start[d];
  tensor_alloc(piece, &t);
  loom_view src = view(x), dst = view(piece);
  int64_t off = 0;
  for (int32_t d = 0; d < t.rank; d++) {
    off += b->start[d] * src.stride[d];
    src.shape[d] = t.shape[d];
  }
  src.data = (char *)x->data + off * (int64_t)loom_dtype_size(t.dtype);
  if (loom_type_numel(&t) > 0) loom_view_copy(&dst, &src);
}

/* ---- running one op on the reference kernels ----------------------------- */

static loom_status run_node(const loom_graph *g, const loom_node *n, tensor *in, tensor *out);

/* A composite: its decomposition into a graph of its own, run node by node. */
static loom_status run_composite(const loom_graph *g, const loom_node *n, tensor *in, tensor *out) {
  const loom_op_def *d = loom_op_get(n->op);
  loom_graph *h = NULL;
  LOOM_TRY(loom_graph_new(ctx, &h));
  int32_t ids[MAX_IN], outs[MAX_OUT];
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n->n_in && !st; i++) {
    char name[8] = {'x', (char)('0' + i), 0};
    const loom_type *t = loom_value_type(g, n->in[i]);
    st = loom_graph_input(h, name, t->dtype, t->rank, t->shape, &ids[i]);
  }
  if (!st) {
    d->decompose(h, n, ids, outs);
    st = h->err;
  }
  tensor *vals = calloc((size_t)h->n_values, sizeof *vals);
  for (int32_t i = 0; i < n->n_in && !st; i++)
    vals[ids[i]] = in[i];
  for (int32_t k = 0; k < h->n_nodes && !st; k++) {
    const loom_node *m = &h->nodes[k];
    tensor mi[MAX_IN], mo[MAX_OUT];
    for (int32_t i = 0; i < m->n_in; i++)
      mi[i] = vals[m->in[i]];
    for (int32_t o = 0; o < m->n_out; o++)
      tensor_alloc(&mo[o], loom_value_type(h, m->out[o]));
    st = run_node(h, m, mi, mo);
    for (int32_t o = 0; o < m->n_out; o++)
      vals[m->out[o]] = mo[o];
  }
  for (int32_t o = 0; o < n->n_out && !st; o++) {
    int64_t bytes = loom_type_numel(&out[o].t) * (int64_t)loom_dtype_size(out[o].t.dtype);
    memcpy(out[o].data, vals[outs[o]].data, (size_t)bytes);
  }
  for (int32_t v = 0; v < h->n_values; v++)
    if (h->values[v].kind == LOOM_VALUE_NODE) free(vals[v].data);
  free(vals);
  loom_graph_free(h);
  return st;
}

static loom_status run_node(const loom_graph *g, const loom_node *n, tensor *in, tensor *out) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d->ref) return run_composite(g, n, in, out);
  loom_view vi[MAX_IN], vo[MAX_OUT];
  for (int32_t i = 0; i < n->n_in; i++)
    vi[i] = view(&in[i]);
  for (int32_t o = 0; o < n->n_out; o++)
    vo[o] = view(&out[o]);
  return d->ref(ctx, n, vi, vo);
}

/* Adds op(in; attrs) to a new graph (its types inferred) and runs it: out
 * gets n_out new tensors. *gp keeps the graph for the caller to free. */
static loom_status run_op(loom_op op, const loom_attr_value *attrs, int32_t n_in, tensor *in,
                          loom_graph **gp, tensor *out) {
  loom_graph *g = NULL;
  LOOM_TRY(loom_graph_new(ctx, &g));
  *gp = g;
  int32_t ids[MAX_IN], outs[MAX_OUT];
  for (int32_t i = 0; i < n_in; i++) {
    char name[8] = {'x', (char)('0' + i), 0};
    LOOM_TRY(loom_graph_input(g, name, in[i].t.dtype, in[i].t.rank, in[i].t.shape, &ids[i]));
  }
  int32_t n_out = loom_op_get(op)->n_out;
  LOOM_TRY(loom_graph_add(g, op, n_in, ids, attrs, n_out, outs));
  for (int32_t o = 0; o < n_out; o++)
    tensor_alloc(&out[o], loom_value_type(g, outs[o]));
  return run_node(g, &g->nodes[g->n_nodes - 1], in, out);
}

/* ---- the corpus ------------------------------------------------------------ */

typedef struct tcase {
  const char *name;
  loom_op op;
  int32_t n_in;
  loom_type in[MAX_IN];
  int64_t index_bound[MAX_IN]; /* > 0: an index input, values in [0, bound) */
  loom_attr_value attrs[LOOM_MAX_ATTRS];
  const char *want; /* the annotation's text */
} tcase;

#define MAX_CASES 96
static tcase cases[MAX_CASES];
static int32_t n_cases;

static loom_type ty(loom_dtype dt, int32_t rank, const int64_t *shape) {
  loom_type t = {.dtype = dt, .rank = rank};
  for (int32_t d = 0; d < rank; d++)
    t.shape[d] = shape[d];
  return t;
}
#define T(dt, ...)                                                                                 \
  ty(LOOM_DTYPE_##dt, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),               \
     (int64_t[]){__VA_ARGS__})
#define SCALAR(dt) ty(LOOM_DTYPE_##dt, 0, NULL)
#define INTS(...)                                                                                  \
  ((loom_ints){.n = (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                 \
               .v = {__VA_ARGS__}})

static tcase *add(const char *name, loom_op op, const char *want, int32_t n_in,
                  const loom_type *in) {
  if (n_cases >= MAX_CASES) abort();
  tcase *c = &cases[n_cases++];
  memset(c, 0, sizeof *c);
  c->name = name;
  c->op = op;
  c->want = want;
  c->n_in = n_in;
  for (int32_t i = 0; i < n_in; i++)
    c->in[i] = in[i];
  loom_attrs_default(op, c->attrs);
  return c;
}
#define ADD(name, op, want, ...)                                                                   \
  add(name, LOOM_OP_##op, want, (int32_t)(sizeof((loom_type[]){__VA_ARGS__}) / sizeof(loom_type)), \
      (loom_type[]){__VA_ARGS__})

static void build_corpus(void) {
  tcase *c;
  /* element-wise, with broadcasting */
  ADD("add row", ADD, "a b, b -> a b", T(F64, 4, 6), T(F64, 6));
  ADD("mul 1-dims", MUL, "a _ c, _ b c -> a b c", T(F64, 4, 1, 6), T(F64, 1, 3, 6));
  ADD("sub scalar", SUB, "a b,  -> a b", T(F64, 6, 4), SCALAR(F64));
  ADD("div", DIV, "a b, a b -> a b", T(F64, 6, 4), T(F64, 6, 4));
  ADD("pow col", POW, "a b, a _ -> a b", T(F64, 6, 4), T(F64, 6, 1));
  ADD("maximum", MAXIMUM, "a b c, c -> a b c", T(F64, 2, 3, 6), T(F64, 6));
  ADD("exp", EXP, "a b -> a b", T(F64, 6, 4));
  ADD("neg i64", NEG, "a -> a", T(I64, 12));
  ADD("lt", LT, "a b, a b -> a b", T(F64, 4, 6), T(F64, 4, 6));
  ADD("select", SELECT, "a _, a b, b -> a b", T(BOOL, 4, 1), T(F64, 4, 6), T(F64, 6));
  c = ADD("cast f32", CAST, "a b -> a b", T(F64, 6, 4));
  LOOM_ATTRV_I(c->attrs, cast, dtype) = LOOM_DTYPE_F32;

  /* reductions: kept dims spatial, reduced dims partial */
  c = ADD("sum axis 1", REDUCE_SUM, "a b -> a | b:add", T(F64, 4, 6));
  LOOM_ATTRV_INTS(c->attrs, reduce_sum, axes) = INTS(1);
  c = ADD("sum keepdims", REDUCE_SUM, "a b c -> _ b _ | a:add | c:add", T(F64, 4, 3, 6));
  LOOM_ATTRV_INTS(c->attrs, reduce_sum, axes) = INTS(0, -1);
  LOOM_ATTRV_I(c->attrs, reduce_sum, keepdims) = 1;
  ADD("sum all", REDUCE_SUM, "a b ->  | a:add | b:add", T(F64, 6, 4));
  c = ADD("max axis 0 keepdims", REDUCE_MAX, "a b -> _ b | a:maximum", T(F64, 6, 4));
  LOOM_ATTRV_INTS(c->attrs, reduce_max, axes) = INTS(0);
  LOOM_ATTRV_I(c->attrs, reduce_max, keepdims) = 1;
  c = ADD("min axes 0 2", REDUCE_MIN, "a b c -> b | a:minimum | c:minimum", T(F64, 2, 3, 6));
  LOOM_ATTRV_INTS(c->attrs, reduce_min, axes) = INTS(0, 2);

  /* reshape: groups of equal products, scaled dims */
  c = ADD("reshape merge B T", RESHAPE, "a _ b -> a b", T(F64, 4, 6, 4));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(24, 4);
  c = ADD("reshape heads", RESHAPE, "a b c -> a b c _ _", T(F64, 2, 3, 12));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(2, 3, 2, 3, 2);
  c = ADD("reshape heads back", RESHAPE, "a b c _ _ -> a b c", T(F64, 2, 3, 2, 3, 2));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(2, 3, 12);
  c = ADD("reshape split", RESHAPE, "a -> a _", T(F64, 12));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(-1, 4);
  c = ADD("reshape merge tail", RESHAPE, "a b _ -> a b", T(F64, 2, 3, 4));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(2, 12);
  c = ADD("reshape 1-dims", RESHAPE, "a _ b -> _ a b _", T(F64, 4, 1, 6));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(1, 4, 6, 1);
  c = ADD("reshape coarser", RESHAPE, "a _ -> a _", T(F64, 8, 3));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(2, 12);
  c = ADD("reshape flat", RESHAPE, "a _ _ -> a", T(F64, 6, 2, 2));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(24);
  c = ADD("reshape mixed", RESHAPE, "replicate", T(F64, 6, 4));
  LOOM_ATTRV_INTS(c->attrs, reshape, shape) = INTS(4, 6);

  /* other layout ops */
  c = ADD("transpose", TRANSPOSE, "a b c -> c a b", T(F64, 2, 3, 4));
  LOOM_ATTRV_INTS(c->attrs, transpose, perm) = INTS(2, 0, 1);
  c = ADD("transpose square", TRANSPOSE, "a b -> b a", T(F64, 6, 6));
  LOOM_ATTRV_INTS(c->attrs, transpose, perm) = INTS(1, 0);
  c = ADD("broadcast row", BROADCAST_TO, "_ b -> a b", T(F64, 1, 6));
  LOOM_ATTRV_INTS(c->attrs, broadcast_to, shape) = INTS(4, 6);
  c = ADD("broadcast new dims", BROADCAST_TO, "c -> a b c", T(F64, 6));
  LOOM_ATTRV_INTS(c->attrs, broadcast_to, shape) = INTS(3, 4, 6);
  c = ADD("slice cols", SLICE, "a _ -> a _", T(F64, 6, 8));
  LOOM_ATTRV_INTS(c->attrs, slice, starts) = INTS(0, 2);
  LOOM_ATTRV_INTS(c->attrs, slice, ends) = INTS(6, 7);
  c = ADD("slice negative", SLICE, "a _ b -> a _ b", T(F64, 6, 8, 4));
  LOOM_ATTRV_INTS(c->attrs, slice, starts) = INTS(-6, 1, 0);
  LOOM_ATTRV_INTS(c->attrs, slice, ends) = INTS(6, -1, 4);
  c = ADD("concat cols", CONCAT, "a _, a _ -> a _", T(F64, 4, 2), T(F64, 4, 3));
  LOOM_ATTRV_I(c->attrs, concat, axis) = 1;
  ADD("concat rows", CONCAT, "_ a, _ a, _ a -> _ a", T(F64, 2, 6), T(F64, 1, 6), T(F64, 3, 6));
  c = ADD("pad", PAD, "a _ -> a _", T(F64, 4, 6));
  LOOM_ATTRV_INTS(c->attrs, pad, lo) = INTS(0, 1);
  LOOM_ATTRV_INTS(c->attrs, pad, hi) = INTS(0, 2);
  LOOM_ATTRV_F(c->attrs, pad, value) = 0.5;

  /* index ops: the table's rows (6, so splits in 2 and 3 are tried) split
   * into partial lookups (gather) or kept pieces (scatter_add) */
  c = ADD("gather rows", GATHER, "b c, a -> a c | b:add", T(F64, 6, 6), T(I64, 4));
  c->index_bound[1] = 6;
  c = ADD("gather axis 1", GATHER, "a d e, b c -> a b c e | d:add", T(F64, 4, 6, 6),
          T(I64, 2, 3));
  LOOM_ATTRV_I(c->attrs, gather, axis) = 1;
  c->index_bound[1] = 6;
  c = ADD("scatter rows", SCATTER_ADD, "a, a c -> b c | a:add", T(I64, 6), T(F64, 6, 4));
  LOOM_ATTRV_INTS(c->attrs, scatter_add, shape) = INTS(6, 4);
  c->index_bound[0] = 6;
  c = ADD("scatter axis 1", SCATTER_ADD, "b c, a b c -> a d | b:add | c:add", T(I64, 2, 3),
          T(F64, 4, 2, 3));
  LOOM_ATTRV_INTS(c->attrs, scatter_add, shape) = INTS(4, 6);
  LOOM_ATTRV_I(c->attrs, scatter_add, axis) = 1;
  c->index_bound[0] = 6;

  /* sources */
  c = ADD("iota axis 1", IOTA, " -> a b", T(F64, 1)); /* the input is dropped below */
  c->n_in = 0;
  LOOM_ATTRV_INTS(c->attrs, iota, shape) = INTS(4, 6);
  LOOM_ATTRV_I(c->attrs, iota, axis) = 1;
  LOOM_ATTRV_I(c->attrs, iota, dtype) = LOOM_DTYPE_F64;
  c = ADD("iota axis 0 start", IOTA, " -> a b c", T(F64, 1));
  c->n_in = 0;
  LOOM_ATTRV_INTS(c->attrs, iota, shape) = INTS(6, 2, 3);
  LOOM_ATTRV_I(c->attrs, iota, axis) = -3;
  LOOM_ATTRV_I(c->attrs, iota, start) = 5;
  c = ADD("constant", CONSTANT, " -> a b", T(F64, 1));
  c->n_in = 0;
  LOOM_ATTRV_INTS(c->attrs, constant, shape) = INTS(4, 6);
  LOOM_ATTRV_I(c->attrs, constant, dtype) = LOOM_DTYPE_F64;
  LOOM_ATTRV_F(c->attrs, constant, value) = 1.5;

  /* matmul: m and n spatial, k partial, batch dims broadcast */
  ADD("matmul", MATMUL, "a b, b c -> a c | b:add", T(F64, 4, 6), T(F64, 6, 8));
  c = ADD("matmul trans_a", MATMUL, "b a, b c -> a c | b:add", T(F64, 6, 4), T(F64, 6, 8));
  LOOM_ATTRV_I(c->attrs, matmul, trans_a) = 1;
  c = ADD("matmul trans_b", MATMUL, "a b, c b -> a c | b:add", T(F64, 4, 6), T(F64, 8, 6));
  LOOM_ATTRV_I(c->attrs, matmul, trans_b) = 1;
  c = ADD("matmul trans both", MATMUL, "b a, c b -> a c | b:add", T(F64, 6, 4), T(F64, 8, 6));
  LOOM_ATTRV_I(c->attrs, matmul, trans_a) = 1;
  LOOM_ATTRV_I(c->attrs, matmul, trans_b) = 1;
  ADD("matmul batch", MATMUL, "a b c, c d -> a b d | c:add", T(F64, 2, 4, 6), T(F64, 6, 8));
  ADD("matmul batch bcast", MATMUL, "a _ c d, b d e -> a b c e | d:add", T(F64, 2, 1, 4, 6),
      T(F64, 3, 6, 4));
  ADD("matmul f32", MATMUL, "a b, b c -> a c | b:add", T(F32, 6, 6), T(F32, 6, 4));

  /* composites with annotations of their own (run through their decompositions) */
  /* attention with an additive bias: the bias split along the leading
   * dims it has, whole along those it repeats along */
  c = ADD("flash_attention head bias", FLASH_ATTENTION, "a b _ _, a b _ _, a b _ _, b _ _ -> a b _ _, a b _",
          T(F64, 2, 3, 4, 2), T(F64, 2, 3, 5, 2), T(F64, 2, 3, 5, 3), T(F64, 3, 4, 5));
  LOOM_ATTRV_I(c->attrs, flash_attention, bias) = 1;
  c = ADD("flash_attention padding bias", FLASH_ATTENTION, "a b _ _, a b _ _, a b _ _, a _ _ _ -> a b _ _, a b _",
          T(F64, 2, 3, 4, 2), T(F64, 2, 3, 5, 2), T(F64, 2, 3, 5, 3), T(F64, 2, 1, 1, 5));
  LOOM_ATTRV_I(c->attrs, flash_attention, bias) = 1;
  c = ADD("attention bias", ATTENTION, "a b _ _, a b _ _, a b _ _, _ b _ _ -> a b _ _",
          T(F64, 2, 3, 4, 2), T(F64, 2, 3, 5, 2), T(F64, 2, 3, 5, 3), T(F64, 1, 3, 4, 5));
  LOOM_ATTRV_I(c->attrs, attention, bias) = 1;
  LOOM_ATTRV_I(c->attrs, attention, causal) = 1;
  ADD("softmax", SOFTMAX, "a _ -> a _", T(F64, 4, 6));
  c = ADD("log_softmax axis 1", LOG_SOFTMAX, "a _ b -> a _ b", T(F64, 2, 6, 4));
  LOOM_ATTRV_I(c->attrs, log_softmax, axis) = 1;
  c = ADD("gelu tanh", GELU, "a b -> a b", T(F64, 4, 6));
  LOOM_ATTRV_I(c->attrs, gelu, approximate) = 1;
  ADD("silu", SILU, "a b -> a b", T(F64, 6, 4));
  ADD("linear bias", LINEAR, "a b _, _ c, c -> a b c", T(F64, 2, 3, 6), T(F64, 6, 4), T(F64, 4));
  ADD("linear", LINEAR, "a b, b c -> a c | b:add", T(F64, 4, 6), T(F64, 6, 8));
  c = ADD("mean axis 1", REDUCE_MEAN, "a _ -> a", T(F64, 4, 6));
  LOOM_ATTRV_INTS(c->attrs, reduce_mean, axes) = INTS(1);
  c = ADD("mean keepdims", REDUCE_MEAN, "_ a -> _ a", T(F64, 6, 4));
  LOOM_ATTRV_INTS(c->attrs, reduce_mean, axes) = INTS(0);
  LOOM_ATTRV_I(c->attrs, reduce_mean, keepdims) = 1;
  ADD("layer_norm", LAYER_NORM, "a b _, _, _ -> a b _", T(F64, 4, 3, 6), T(F64, 6), T(F64, 6));
  c = ADD("layer_norm axis 1", LAYER_NORM, "a _ _, _ _ -> a _ _", T(F64, 4, 3, 2), T(F64, 3, 2));
  LOOM_ATTRV_I(c->attrs, layer_norm, axis) = 1;
  ADD("rms_norm", RMS_NORM, "a _, _ -> a _", T(F64, 6, 4), T(F64, 4));

  /* the composite optimiser step */
  ADD("adamw", ADAMW, "a b, a b, a b, a b,  -> a b, a b, a b", T(F64, 4, 6), T(F64, 4, 6),
      T(F64, 4, 6), T(F64, 4, 6), SCALAR(F64));
}

/* ---- the check ---------------------------------------------------------- */

static void fill(tensor *x, int64_t index_bound) {
  int64_t n = loom_type_numel(&x->t);
  for (int64_t i = 0; i < n; i++) {
    double v;
    if (index_bound > 0)
      v = floor(loom_test_uniform(&rng, 0, (double)index_bound));
    else if (x->t.dtype == LOOM_DTYPE_BOOL)
      v = loom_test_uniform(&rng, 0, 1) < 0.5;
    else if (loom_dtype_is_int(x->t.dtype))
      v = floor(loom_test_uniform(&rng, -9, 10));
    else /* positive: log, sqrt and pow take every op's inputs */
      v = loom_test_uniform(&rng, 0.5, 2.0);
    if (index_bound > 0 && v >= (double)index_bound) v = (double)index_bound - 1;
    loom_store(x->t.dtype, x->data, i, v);
  }
}

static double combine(loom_op op, double a, double b) {
  switch (op) {
  case LOOM_OP_MAXIMUM: return a > b ? a : b;
  case LOOM_OP_MINIMUM: return a < b ? a : b;
  default: return a + b;
  }
}

typedef struct split_stats {
  int32_t splits, subops, mismatches;
} split_stats;

/* One sub-op: its inputs are the boxes of the whole inputs; the output
 * types inferred from them must be the out boxes' extents. */
static bool run_subop(const tcase *c, const loom_node *n, const loom_type *out_t, tensor *in,
                      const loom_vbox *in_box, const loom_vbox *out_box, tensor *pout,
                      loom_graph **gp) {
  int32_t n_out = loom_op_get(c->op)->n_out;
  loom_attr_value attrs[LOOM_MAX_ATTRS];
  loom_status s = loom_subop_attrs(ctx, n, c->in, out_t, in_box, out_box, attrs);
  tensor pin[MAX_IN];
  for (int32_t i = 0; i < c->n_in; i++)
    tensor_box(&in[i], &in_box[i], &pin[i]);
  if (!s) s = run_op(c->op, attrs, c->n_in, pin, gp, pout);
  for (int32_t i = 0; i < c->n_in; i++)
    free(pin[i].data);
  if (s) {
    if (!quiet) fprintf(stderr, "  %s: sub-op failed: %s\n", c->name, loom_ctx_error(ctx));
    return false;
  }
  bool ok = true;
  for (int32_t o = 0; o < n_out; o++) {
    loom_type want = out_t[o];
    for (int32_t d = 0; d < want.rank; d++)
      want.shape[d] = out_box[o].end[d] - out_box[o].start[d];
    if (!loom_type_equal(&want, &pout[o].t)) {
      char a[128], b[128];
      if (!quiet)
        fprintf(stderr, "  %s: sub-op output %d is %s, its box is %s\n", c->name, o,
                loom_type_str(&pout[o].t, a, sizeof a), loom_type_str(&want, b, sizeof b));
      ok = false;
    }
  }
  return ok;
}

/* A split: label lab[i] cut into parts[i] even ranges, for i < n. */
typedef struct split {
  int32_t n;
  int32_t lab[2], parts[2];
} split;

/* The flat index in the whole tensor t of element e of box b. */
static int64_t whole_index(const loom_type *t, const loom_vbox *b, int64_t e) {
  int64_t idx = 0, stride = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    int64_t ext = b->end[d] - b->start[d];
    idx += (b->start[d] + e % ext) * stride;
    e /= ext;
    stride *= t->shape[d];
  }
  return idx;
}

static void report(const tcase *c, const split *sp, int32_t o, int64_t e, double got, double want,
                   int64_t *mismatches) {
  if (!quiet && *mismatches < 4) {
    fprintf(stderr, "  %s: split", c->name);
    for (int32_t i = 0; i < sp->n; i++)
      fprintf(stderr, " %c/%d", 'a' + sp->lab[i], (int)sp->parts[i]);
    fprintf(stderr, ", output %d, element %lld: %.17g != %.17g\n", (int)o, (long long)e, got, want);
  }
  ++*mismatches;
}

/* Runs every sub-op of split sp and compares with the whole output: a
 * sub-op that splits no partial label must give exactly its out boxes; the
 * results of the others, joined by their combine op, the whole output.
 * Returns false when the machinery failed (an error, a piece of the wrong
 * type); value mismatches only count in *mismatches, so that the negative
 * control can expect them. */
static bool check_split(const tcase *c, const loom_node *n, const loom_partition *p,
                        const int64_t *ext, const split *sp, tensor *in, const loom_type *out_t,
                        const tensor *whole, int64_t *mismatches) {
  int32_t n_out = loom_op_get(c->op)->n_out;
  double *acc[MAX_OUT];
  uint8_t *seen[MAX_OUT]; /* elements that got a partial result */
  for (int32_t o = 0; o < n_out; o++) {
    int64_t ne = loom_type_numel(&whole[o].t);
    acc[o] = calloc((size_t)(ne > 0 ? ne : 1), sizeof(double));
    seen[o] = calloc((size_t)(ne > 0 ? ne : 1), 1);
  }
  int32_t n_sub = 1;
  for (int32_t i = 0; i < sp->n; i++)
    n_sub *= sp->parts[i];
  bool ok = true;
  for (int32_t j = 0; j < n_sub && ok; j++) {
    loom_subop_ranges r;
    loom_subop_ranges_full(p, ext, &r);
    for (int32_t i = 0, rest = j; i < sp->n; i++, rest /= sp->parts[i - 1]) {
      int32_t l = sp->lab[i], q = rest % sp->parts[i];
      r.lo[l] = ext[l] / sp->parts[i] * q;
      r.hi[l] = ext[l] / sp->parts[i] * (q + 1);
    }
    loom_vbox in_box[MAX_IN], out_box[MAX_OUT];
    loom_subop_boxes(p, ext, c->in, out_t, &r, in_box, out_box);
    loom_op comb = LOOM_OP_ADD;
    bool partial = loom_subop_is_partial(p, ext, &r, &comb);
    tensor pout[MAX_OUT];
    memset(pout, 0, sizeof pout);
    loom_graph *g = NULL;
    ok = run_subop(c, n, out_t, in, in_box, out_box, pout, &g);
    for (int32_t o = 0; o < n_out && ok; o++) {
      int64_t ne = loom_type_numel(&pout[o].t);
      for (int64_t e = 0; e < ne; e++) {
        double got = loom_load(pout[o].t.dtype, pout[o].data, e);
        int64_t w = whole_index(&whole[o].t, &out_box[o], e);
        if (partial) {
          acc[o][w] = seen[o][w] ? combine(comb, acc[o][w], got) : got;
          seen[o][w] = 1;
          continue;
        }
        double want = loom_load(whole[o].t.dtype, whole[o].data, w);
        if (got != want && !(got != got && want != want))
          report(c, sp, o, w, got, want, mismatches);
      }
    }
    for (int32_t o = 0; o < n_out; o++)
      free(pout[o].data);
    loom_graph_free(g);
  }
  for (int32_t o = 0; o < n_out; o++) {
    int64_t ne = loom_type_numel(&whole[o].t);
    double tol = whole[o].t.dtype == LOOM_DTYPE_F64 ? 1e-12 : 1e-5;
    for (int64_t e = 0; e < ne && ok; e++) {
      if (!seen[o][e]) continue;
      double want = loom_load(whole[o].t.dtype, whole[o].data, e);
      if (fabs(acc[o][e] - want) > tol * (1.0 + fabs(want)))
        report(c, sp, o, e, acc[o][e], want, mismatches);
    }
    free(acc[o]);
    free(seen[o]);
  }
  return ok;
}

/* Every split of every label of c's annotation (override, or NULL: the
 * op's own). Returns the failures (wrong values, sub-ops that fail or
 * give pieces of the wrong type); *splits counts the splits tried. */
static int64_t check_case(const tcase *c, const loom_partition *override, int32_t *splits) {
  tensor in[MAX_IN], whole[MAX_OUT];
  for (int32_t i = 0; i < c->n_in; i++) {
    tensor_alloc(&in[i], &c->in[i]);
    fill(&in[i], c->index_bound[i]);
  }
  loom_graph *g = NULL;
  int64_t mismatches = 0;
  *splits = 0;
  CHECK_OK(ctx, run_op(c->op, c->attrs, c->n_in, in, &g, whole));
  const loom_node *n = &g->nodes[g->n_nodes - 1];
  int32_t n_out = n->n_out;
  loom_type out_t[MAX_OUT];
  for (int32_t o = 0; o < n_out; o++)
    out_t[o] = *loom_value_type(g, n->out[o]);
  loom_partition p;
  loom_subop_partition(n, c->in, out_t, &p);
  if (!override && c->want) {
    char buf[256];
    loom_partition_str(&p, buf, sizeof buf);
    CHECK(strcmp(buf, c->want) == 0);
    if (strcmp(buf, c->want) != 0)
      fprintf(stderr, "  %s: annotation '%s', want '%s'\n", c->name, buf, c->want);
  }
  if (override) p = *override;
  int64_t ext[LOOM_PART_MAX_LABELS];
  bool ext_ok = loom_subop_label_extents(ctx, &p, c->in, out_t, ext);
  if (!ext_ok) mismatches++;
  /* each label in 2 and in 3 where its extent divides; pairs in 2 x 2 */
  for (int32_t l = 0; ext_ok && l < p.n_labels; l++)
    for (int32_t k = 2; k <= 3; k++) {
      if (ext[l] < k || ext[l] % k != 0) continue;
      split sp = {.n = 1, .lab = {l}, .parts = {k}};
      ++*splits;
      if (!check_split(c, n, &p, ext, &sp, in, out_t, whole, &mismatches)) mismatches++;
      for (int32_t l2 = l + 1; k == 2 && l2 < p.n_labels; l2++) {
        if (ext[l2] % 2 != 0) continue;
        split sp2 = {.n = 2, .lab = {l, l2}, .parts = {2, 2}};
        ++*splits;
        if (!check_split(c, n, &p, ext, &sp2, in, out_t, whole, &mismatches)) mismatches++;
      }
    }
  for (int32_t i = 0; i < c->n_in; i++)
    free(in[i].data);
  for (int32_t o = 0; o < n_out; o++)
    free(whole[o].data);
  loom_graph_free(g);
  return mismatches;
}

static void test_corpus(void) {
  build_corpus();
  int32_t total = 0;
  for (int32_t i = 0; i < n_cases; i++) {
    int32_t splits = 0;
    int64_t bad = check_case(&cases[i], NULL, &splits);
    CHECK(bad == 0);
    if (bad) fprintf(stderr, "  %s: %lld mismatches\n", cases[i].name, (long long)bad);
    /* every instance but the unsplittable one has something to split */
    bool replicate = cases[i].want && strcmp(cases[i].want, "replicate") == 0;
    CHECK(replicate ? splits == 0 : splits > 0);
    total += splits;
  }
  CHECK(total > 100);
}

/* The check fails on broken annotations: a matmul whose k is called
 * spatial, a transpose whose output labels are not permuted, a reshape
 * that labels the inner dim of a merged group, a reduction whose partial
 * dims combine with the wrong op. */
static const tcase *find_case(const char *name) {
  for (int32_t i = 0; i < n_cases; i++)
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  abort();
}

static int64_t broken(const char *name, void (*edit)(loom_partition *p)) {
  const tcase *c = find_case(name);
  loom_type out_t[MAX_OUT];
  loom_graph *g = NULL;
  tensor in[MAX_IN], whole[MAX_OUT];
  for (int32_t i = 0; i < c->n_in; i++) {
    tensor_alloc(&in[i], &c->in[i]);
    fill(&in[i], c->index_bound[i]);
  }
  CHECK_OK(ctx, run_op(c->op, c->attrs, c->n_in, in, &g, whole));
  const loom_node *n = &g->nodes[g->n_nodes - 1];
  for (int32_t o = 0; o < n->n_out; o++)
    out_t[o] = *loom_value_type(g, n->out[o]);
  loom_partition p;
  loom_subop_partition(n, c->in, out_t, &p);
  edit(&p);
  for (int32_t i = 0; i < c->n_in; i++)
    free(in[i].data);
  for (int32_t o = 0; o < n->n_out; o++)
    free(whole[o].data);
  loom_graph_free(g);
  int32_t splits = 0;
  quiet = true;
  int64_t bad = check_case(c, &p, &splits);
  quiet = false;
  return bad;
}

static void k_spatial(loom_partition *p) { p->split[1] = LOOM_SPLIT_SPATIAL; }
static void unpermute(loom_partition *p) {
  for (int32_t d = 0; d < 2; d++)
    p->out[0][d] = p->in[0][d];
}
static void label_inner(loom_partition *p) { /* [4, 6, 4] -> [24, 4]: T instead of B */
  p->in[0][1] = p->in[0][0];
  p->in[0][0] = -1;
}
static void wrong_combine(loom_partition *p) { p->combine[0] = LOOM_OP_ADD; }

static void test_negative_control(void) {
  CHECK(broken("matmul", k_spatial) > 0);
  CHECK(broken("transpose square", unpermute) > 0);
  CHECK(broken("reshape merge B T", label_inner) > 0);
  CHECK(broken("max axis 0 keepdims", wrong_combine) > 0);
}

/* A dim carrying a label must be a multiple of the label's extent. */
static void test_label_extents(void) {
  loom_partition p;
  loom_partition_init(&p, 1, 1);
  int32_t l = loom_partition_new_label(&p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  p.in[0][0] = p.out[0][0] = (int8_t)l;
  loom_type a = T(F32, 4), b = T(F32, 6), c8 = T(F32, 8);
  int64_t ext[LOOM_PART_MAX_LABELS];
  loom_error_clear(ctx);
  CHECK(!loom_subop_label_extents(ctx, &p, &a, &b, ext));
  CHECK(strstr(loom_ctx_error(ctx), "not a multiple") != NULL);
  CHECK(loom_subop_label_extents(ctx, &p, &a, &c8, ext));
  CHECK(ext[0] == 4);
}

/* Slice and pad refuse a box that cuts a dim they slice or pad. */
static void test_sub_attrs_errors(void) {
  const tcase *sl = find_case("slice cols"), *pd = find_case("pad");
  loom_graph *g = NULL;
  tensor in, out;
  for (int32_t k = 0; k < 2; k++) {
    const tcase *c = k ? pd : sl;
    tensor_alloc(&in, &c->in[0]);
    fill(&in, 0);
    CHECK_OK(ctx, run_op(c->op, c->attrs, 1, &in, &g, &out));
    const loom_node *n = &g->nodes[g->n_nodes - 1];
    loom_type ot = out.t;
    loom_vbox ib = loom_vbox_full(&c->in[0]), ob = loom_vbox_full(&ot);
    ib.end[1] = c->in[0].shape[1] / 2; /* dim 1 is sliced / padded */
    ob.end[1] = ot.shape[1] / 2;
    loom_attr_value attrs[LOOM_MAX_ATTRS];
    loom_error_clear(ctx);
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 loom_subop_attrs(ctx, n, c->in, &ot, &ib, &ob, attrs));
    CHECK(strstr(loom_ctx_error(ctx), "cut") != NULL);
    free(in.data);
    free(out.data);
    loom_graph_free(g);
  }
}

/* The GPT training step: every node's annotation has consistent label
 * extents, and the fused QKV reshape [B, T, 3D] -> [B, T, H, 3, Dh] carries
 * a head label from 3D to H (head-major columns). */
static void test_gpt_graph(void) {
  loom_gpt_config cfg;
  loom_gpt_config_default(&cfg);
  cfg.n_layer = 1;
  loom_gpt_optim o = {0.9, 0.999, 1e-8, 0.01, 1, NULL};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &cfg, 2, 16, &o, &g, &per_step));
  if (!g) return;
  int32_t bad = 0, head_reshapes = 0, labeled = 0;
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const loom_node *n = &g->nodes[k];
    loom_type it[LOOM_PART_MAX_IO], ot[LOOM_PART_MAX_IO];
    if (n->n_in > LOOM_PART_MAX_IO || n->n_out > LOOM_PART_MAX_IO) continue;
    for (int32_t i = 0; i < n->n_in; i++)
      it[i] = *loom_value_type(g, n->in[i]);
    for (int32_t i = 0; i < n->n_out; i++)
      ot[i] = *loom_value_type(g, n->out[i]);
    loom_partition p;
    loom_subop_partition(n, it, ot, &p);
    int64_t ext[LOOM_PART_MAX_LABELS];
    if (!loom_subop_label_extents(ctx, &p, it, ot, ext)) bad++;
    labeled += p.n_labels > 0;
    if (n->op == LOOM_OP_RESHAPE && it[0].rank == 3 && ot[0].rank == 5 &&
        ot[0].shape[2] == cfg.n_head && ot[0].shape[3] == 3) {
      char buf[128];
      CHECK(strcmp(loom_partition_str(&p, buf, sizeof buf), "a b c -> a b c _ _") == 0);
      CHECK(ext[2] == cfg.n_head);
      head_reshapes++;
    }
  }
  CHECK(bad == 0);
  CHECK(head_reshapes == 1);
  CHECK(labeled > g->n_nodes / 2);
  loom_graph_free(g);
}

/* iota's start on every backend and fusion mode (the reference kernel, the
 * cpu backend's eager kernel, the kernel IR and the generated C). */
static void test_iota_start(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x, y, y2;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){6, 40}, &x));
  loom_attr a1[4] = {
      {.name = "shape", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){6, 40}},
      {.name = "axis", .kind = LOOM_ATTR_INT, .i = 1},
      {.name = "dtype", .kind = LOOM_ATTR_INT, .i = LOOM_DTYPE_F32},
      {.name = "start", .kind = LOOM_ATTR_INT, .i = 7}};
  loom_value io;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 4, a1, &io));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){io, x}, 0, NULL, &y));
  loom_attr a2[3] = {
      {.name = "shape", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){6, 5}},
      {.name = "axis", .kind = LOOM_ATTR_INT, .i = -2},
      {.name = "start", .kind = LOOM_ATTR_INT, .i = -3}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 3, a2, &y2));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "y2", y2));
  loom_tensor *xt = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){6, 40}, &xt));
  if (!xt) return;
  float *xv = loom_tensor_data(xt);
  for (int i = 0; i < 240; i++)
    xv[i] = (float)(i % 7) * 0.25f;
  const loom_fusion_mode modes[4] = {LOOM_FUSION_STITCH, LOOM_FUSION_LOOP, LOOM_FUSION_NONE,
                                     LOOM_FUSION_EAGER};
  for (int run = 0; run < 5; run++) {
    loom_session_options o =
        LOOM_SESSION_OPTIONS(.backend = run == 4 ? "ref" : "cpu", .fusion = modes[run % 4]);
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    if (!s) continue;
    loom_tensor *out[2] = {NULL, NULL};
    CHECK_OK(ctx, loom_session_run(s, 1, (const loom_tensor *const *)&xt, 2, out));
    if (out[0] && out[1]) {
      const float *yv = loom_tensor_data(out[0]);
      const int64_t *iv = loom_tensor_data(out[1]);
      int bad = 0;
      for (int i = 0; i < 240; i++)
        bad += yv[i] != xv[i] + (float)(7 + i % 40);
      for (int i = 0; i < 30; i++)
        bad += iv[i] != i / 5 - 3;
      CHECK(bad == 0);
      if (bad) fprintf(stderr, "  iota start: %d wrong on run %d\n", bad, run);
    }
    loom_tensor_free(out[0]);
    loom_tensor_free(out[1]);
    loom_session_free(s);
  }
  loom_tensor_free(xt);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_corpus();
  test_negative_control();
  test_label_extents();
  test_sub_attrs_errors();
  test_gpt_graph();
  test_iota_start();
  loom_ctx_free(ctx);
  return loom_test_finish("test_partition");
}

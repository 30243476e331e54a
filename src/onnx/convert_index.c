/*
 * Index ops decomposed onto gather and scatter_add over flattened data:
 * ScatterElements, ScatterND, GatherND; and CumSum (log-step prefix sums),
 * TopK (k rounds of arg-extreme).
 */
#include "onnx/import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G (cv->g)

static int32_t i64(onnx_cv *cv, double v) { return lb_scalar(G, LOOM_DTYPE_I64, v); }

/* Negative indices count from the end of a dim of extent dim. */
static int32_t wrap(onnx_cv *cv, int32_t idx, int64_t dim) {
  idx = lb_cast(G, idx, LOOM_DTYPE_I64);
  return lb_select(G, lb_binary(G, LOOM_OP_LT, idx, i64(cv, 0)), lb_add(G, idx, i64(cv, (double)dim)), idx);
}

/* data (type t) with its elements at flat positions flat [M] replaced by
 * updates [M] (reduction 0) or added to them (reduction 1). Positions
 * are assumed distinct for replacement, as ONNX requires. */
static int32_t scatter_flat(onnx_cv *cv, int32_t data, const loom_type *t, int32_t flat, int32_t upd, int red) {
  int64_t total = loom_type_numel(t);
  int32_t s = lb_scatter_add(G, flat, upd, 1, &total, 0);
  int32_t y;
  if (red == 1) {
    y = lb_add(G, lb_reshape(G, data, 1, &total), s);
  } else {
    loom_type tu = G->values[upd < 0 ? 0 : upd].type;
    int32_t ones = lb_const(G, LOOM_DTYPE_I32, tu.rank, tu.shape, 1);
    int32_t hit = lb_binary(G, LOOM_OP_GT, lb_scatter_add(G, flat, ones, 1, &total, 0), lb_scalar(G, LOOM_DTYPE_I32, 0));
    y = lb_select(G, hit, s, lb_reshape(G, data, 1, &total));
  }
  return lb_reshape(G, y, t->rank, t->shape);
}

static int reduction(onnx_cv *cv) {
  const char *r = cv_attr_s(cv, "reduction", "none");
  return strcmp(r, "none") == 0 ? 0 : strcmp(r, "add") == 0 ? 1 : -1;
}

static loom_status cv_scatter_elements(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *ti = cv_type(cv, 1), *tu = cv_type(cv, 2);
  int32_t axis, red = reduction(cv);
  if (red < 0) return cv_unsupported(cv, "reduction '%s'", cv_attr_s(cv, "reduction", ""));
  if (t->rank == 0 || ti->rank != t->rank || tu->rank != ti->rank)
    return cv_invalid(cv, "indices and updates must have the data's rank");
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  int32_t idx = wrap(cv, cv_in(cv, 1), t->shape[axis]), flat = -1;
  int64_t stride = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    int32_t at = d == axis ? idx : lb_iota(G, LOOM_DTYPE_I64, ti->rank, ti->shape, d);
    int32_t term = lb_mul(G, at, i64(cv, (double)stride));
    flat = flat < 0 ? term : lb_add(G, flat, term);
    stride *= t->shape[d];
  }
  int64_t m = loom_type_numel(ti);
  flat = lb_reshape(G, flat, 1, &m);
  int32_t upd = lb_reshape(G, cv_in(cv, 2), 1, &m);
  cv_out(cv, 0, scatter_flat(cv, cv_in(cv, 0), t, flat, upd, red));
  return LOOM_STATUS_OK;
}

/* The flat positions [M, inner] that indices [..., k] address in data,
 * with M the indices' leading count and inner the elements of data's
 * dims past k. */
static int32_t nd_positions(onnx_cv *cv, const loom_type *t, int32_t idxv, const loom_type *ti, int64_t *m_out,
                            int64_t *inner_out) {
  int64_t k = ti->shape[ti->rank - 1], m = 1, inner = 1;
  for (int32_t d = 0; d < ti->rank - 1; d++) m *= ti->shape[d];
  for (int32_t d = (int32_t)k; d < t->rank; d++) inner *= t->shape[d];
  int32_t idx = lb_reshape(G, lb_cast(G, idxv, LOOM_DTYPE_I64), 2, (int64_t[]){m, k});
  int32_t base = -1;
  int64_t stride = inner;
  for (int64_t j = k - 1; j >= 0; j--) {
    int32_t col = lb_reshape(G, lb_slice(G, idx, (int64_t[]){0, j}, (int64_t[]){m, j + 1}), 1, &m);
    col = wrap(cv, col, t->shape[j]);
    int32_t term = lb_mul(G, col, i64(cv, (double)stride));
    base = base < 0 ? term : lb_add(G, base, term);
    stride *= t->shape[j];
  }
  if (base < 0) base = lb_const(G, LOOM_DTYPE_I64, 1, &m, 0);
  int32_t pos = lb_add(G, lb_reshape(G, base, 2, (int64_t[]){m, 1}), lb_iota(G, LOOM_DTYPE_I64, 2, (int64_t[]){m, inner}, 1));
  *m_out = m;
  *inner_out = inner;
  return pos;
}

static loom_status cv_scatter_nd(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *ti = cv_type(cv, 1);
  int32_t red = reduction(cv);
  if (red < 0) return cv_unsupported(cv, "reduction '%s'", cv_attr_s(cv, "reduction", ""));
  if (ti->rank < 1 || ti->shape[ti->rank - 1] > t->rank) return cv_invalid(cv, "bad indices shape");
  int64_t m, inner;
  int32_t pos = nd_positions(cv, t, cv_in(cv, 1), ti, &m, &inner);
  int64_t n = m * inner;
  pos = lb_reshape(G, pos, 1, &n);
  int32_t upd = lb_reshape(G, cv_in(cv, 2), 1, &n);
  cv_out(cv, 0, scatter_flat(cv, cv_in(cv, 0), t, pos, upd, red));
  return LOOM_STATUS_OK;
}

static loom_status cv_gather_nd(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0), *ti = cv_type(cv, 1);
  if (cv_attr_i(cv, "batch_dims", 0) != 0) return cv_unsupported(cv, "batch_dims");
  if (ti->rank < 1 || ti->shape[ti->rank - 1] > t->rank) return cv_invalid(cv, "bad indices shape");
  int64_t m, inner, k = ti->shape[ti->rank - 1];
  int32_t pos = nd_positions(cv, t, cv_in(cv, 1), ti, &m, &inner);
  int64_t total = loom_type_numel(t);
  int32_t y = lb_gather(G, lb_reshape(G, cv_in(cv, 0), 1, &total), pos, 0);
  int64_t shape[LOOM_MAX_RANK];
  int32_t r = 0;
  for (int32_t d = 0; d < ti->rank - 1; d++) shape[r++] = ti->shape[d];
  for (int32_t d = (int32_t)k; d < t->rank; d++) shape[r++] = t->shape[d];
  if (r > LOOM_MAX_RANK) return cv_unsupported(cv, "rank %d", r);
  cv_out(cv, 0, lb_reshape(G, y, r, shape));
  return LOOM_STATUS_OK;
}

/* x reversed along axis. */
static int32_t flip(onnx_cv *cv, int32_t x, int64_t n, int32_t axis) {
  double *v = malloc(sizeof *v * (size_t)n);
  if (!v) return -1;
  for (int64_t i = 0; i < n; i++) v[i] = (double)(n - 1 - i);
  int32_t idx = cv_const_values(cv, LOOM_DTYPE_I64, 1, &n, v);
  free(v);
  return lb_gather(G, x, idx, axis);
}

/* x shifted by s along axis (zeros enter at the start). */
static int32_t shift(onnx_cv *cv, int32_t x, const loom_type *t, int32_t axis, int64_t s) {
  int64_t lo[LOOM_MAX_RANK] = {0}, hi[LOOM_MAX_RANK] = {0}, st[LOOM_MAX_RANK] = {0}, en[LOOM_MAX_RANK];
  lo[axis] = s;
  for (int32_t d = 0; d < t->rank; d++) en[d] = t->shape[d];
  return lb_slice(G, lb_pad(G, x, lo, hi, 0), st, en);
}

static loom_status cv_cumsum(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0);
  double a;
  int32_t axis;
  if (!cv_scalar(cv, 1, &a)) return cv_unsupported(cv, "axis not known at load time");
  if (t->rank == 0 || !onnx_axis((int64_t)a, t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  bool reverse = cv_attr_i(cv, "reverse", 0) != 0, exclusive = cv_attr_i(cv, "exclusive", 0) != 0;
  int64_t n = t->shape[axis];
  int32_t y = cv_in(cv, 0);
  if (reverse) y = flip(cv, y, n, axis);
  for (int64_t s = 1; s < n; s *= 2) y = lb_add(G, y, shift(cv, y, t, axis, s));
  if (exclusive && n > 0) y = shift(cv, y, t, axis, 1);
  if (reverse) y = flip(cv, y, n, axis);
  cv_out(cv, 0, y);
  return LOOM_STATUS_OK;
}

/* TopK with k known at load time: k rounds of taking the first extreme
 * and masking it out. */
static loom_status cv_top_k(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0);
  double kd;
  int32_t axis;
  if (!cv_scalar(cv, 1, &kd)) return cv_unsupported(cv, "k not known at load time");
  if (t->rank == 0 || !onnx_axis(cv_attr_i(cv, "axis", -1), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  int64_t k = (int64_t)kd, n = t->shape[axis];
  if (k < 0 || k > n) return cv_invalid(cv, "k = %lld for a dim of %lld", (long long)k, (long long)n);
  if (k > 64) return cv_unsupported(cv, "k = %lld (at most 64)", (long long)k);
  if (k == 0) return cv_unsupported(cv, "k = 0");
  /* sorted=0 allows any order: the sorted one is one of them */
  bool largest = cv_attr_i(cv, "largest", 1) != 0;
  if (!loom_dtype_is_float(t->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  int32_t x = cv_in(cv, 0);
  int32_t iota = lb_iota(G, LOOM_DTYPE_I64, t->rank, t->shape, axis);
  int32_t gone = lb_scalar(G, t->dtype, largest ? -INFINITY : INFINITY);
  int32_t taken = lb_binary(G, LOOM_OP_LT, iota, i64(cv, 0)); /* all false */
  int32_t vals[64], idxs[64];
  int64_t ax = axis;
  for (int64_t r = 0; r < k; r++) {
    /* taken elements are out of the running */
    int32_t cur = lb_select(G, taken, gone, x);
    int32_t m = lb_reduce(G, largest ? LOOM_OP_REDUCE_MAX : LOOM_OP_REDUCE_MIN, cur, 1, &ax, true);
    int32_t free_ = lb_binary(G, LOOM_OP_EQ, taken, lb_scalar(G, LOOM_DTYPE_BOOL, 0));
    int32_t hit = lb_binary(G, LOOM_OP_MINIMUM, lb_binary(G, LOOM_OP_EQ, cur, m), free_);
    int32_t cand = lb_select(G, hit, iota, i64(cv, (double)n));
    int32_t first = lb_reduce(G, LOOM_OP_REDUCE_MIN, cand, 1, &ax, true);
    vals[r] = m;
    idxs[r] = first;
    taken = lb_binary(G, LOOM_OP_MAXIMUM, taken, lb_binary(G, LOOM_OP_EQ, iota, first));
  }
  cv_out(cv, 0, k == 1 ? vals[0] : lb_concat(G, (int32_t)k, vals, axis));
  cv_out(cv, 1, k == 1 ? idxs[0] : lb_concat(G, (int32_t)k, idxs, axis));
  return LOOM_STATUS_OK;
}

loom_status onnx_cv_scatter_elements(onnx_cv *cv);
loom_status onnx_cv_scatter_elements(onnx_cv *cv) { return cv_scatter_elements(cv); }
loom_status onnx_cv_scatter_nd(onnx_cv *cv);
loom_status onnx_cv_scatter_nd(onnx_cv *cv) { return cv_scatter_nd(cv); }
loom_status onnx_cv_gather_nd(onnx_cv *cv);
loom_status onnx_cv_gather_nd(onnx_cv *cv) { return cv_gather_nd(cv); }
loom_status onnx_cv_cumsum(onnx_cv *cv);
loom_status onnx_cv_cumsum(onnx_cv *cv) { return cv_cumsum(cv); }
loom_status onnx_cv_top_k(onnx_cv *cv);
loom_status onnx_cv_top_k(onnx_cv *cv) { return cv_top_k(cv); }

/* Einsum without ellipses or repeated labels within one operand: every
 * operand permuted to one order of all labels (size-1 dims for those it
 * lacks), multiplied with broadcasting, summed over the labels the output
 * lacks. Correct for any such equation, but a contraction materializes
 * the full product (no GEMM): fine for small operands. */
loom_status onnx_cv_einsum(onnx_cv *cv);
loom_status onnx_cv_einsum(onnx_cv *cv) {
  const onnx_attr *a = onnx_node_attr(cv->node, "equation");
  if (!a) return cv_invalid(cv, "no equation");
  char eq[128];
  size_t n = 0;
  for (size_t i = 0; i < a->s.n && n + 1 < sizeof eq; i++)
    if (a->s.p[i] != ' ') eq[n++] = (char)a->s.p[i];
  eq[n] = '\0';
  if (strstr(eq, "...")) return cv_unsupported(cv, "an ellipsis in '%s'", eq);
  char *arrow = strstr(eq, "->");
  char labels[LOOM_MAX_RANK + 1] = "";
  int32_t n_labels = 0;
  char ops[ONNX_MAX_NODE_IO][LOOM_MAX_RANK + 1];
  int32_t n_ops = 0;
  char out[LOOM_MAX_RANK + 1] = "";
  const char *p = eq;
  while (*p && p != arrow) {
    int32_t k = 0;
    if (n_ops == ONNX_MAX_NODE_IO) return cv_unsupported(cv, "too many operands");
    while (*p && *p != ',' && p != arrow) {
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) || k == LOOM_MAX_RANK)
        return cv_invalid(cv, "bad equation '%s'", eq);
      for (int32_t j = 0; j < k; j++)
        if (ops[n_ops][j] == *p) return cv_unsupported(cv, "a repeated label in one operand ('%s')", eq);
      ops[n_ops][k++] = *p;
      if (!strchr(labels, *p)) {
        if (n_labels == LOOM_MAX_RANK) return cv_unsupported(cv, "more than %d labels", LOOM_MAX_RANK);
        labels[n_labels++] = *p;
        labels[n_labels] = '\0';
      }
      p++;
    }
    ops[n_ops++][k] = '\0';
    if (*p == ',') p++;
  }
  if (n_ops != cv->n_in) return cv_invalid(cv, "%d operands for %d inputs", n_ops, cv->n_in);
  if (arrow) {
    snprintf(out, sizeof out, "%s", arrow + 2);
    for (const char *q = out; *q; q++)
      if (!strchr(labels, *q) || strchr(q + 1, *q)) return cv_invalid(cv, "bad output in '%s'", eq);
  } else { /* implicit: labels seen once, alphabetically */
    int32_t k = 0;
    for (char c = 'A'; c <= 'z'; c++) {
      int32_t seen = 0;
      for (int32_t i = 0; i < n_ops; i++) seen += strchr(ops[i], c) != NULL;
      if (seen == 1) out[k++] = c;
    }
    out[k] = '\0';
  }
  /* the label order: the output's, then the summed ones */
  char order[LOOM_MAX_RANK + 1];
  int32_t no = 0;
  for (const char *q = out; *q; q++) order[no++] = *q;
  for (int32_t l = 0; l < n_labels; l++)
    if (!strchr(out, labels[l])) order[no++] = labels[l];
  order[no] = '\0';
  int64_t extent[128] = {0};
  for (int32_t i = 0; i < n_ops; i++) {
    const loom_type *t = cv_type(cv, i);
    if ((size_t)t->rank != strlen(ops[i])) return cv_invalid(cv, "operand %d has rank %d for '%s'", i, t->rank, ops[i]);
    if (t->dtype != cv_type(cv, 0)->dtype) return cv_invalid(cv, "operands of different types");
    for (int32_t d = 0; d < t->rank; d++) {
      int64_t *e = &extent[(unsigned char)ops[i][d]];
      if (*e > 1 && t->shape[d] > 1 && *e != t->shape[d]) return cv_invalid(cv, "label '%c' has two extents", ops[i][d]);
      if (t->shape[d] > *e) *e = t->shape[d];
    }
  }
  int32_t acc = -1;
  for (int32_t i = 0; i < n_ops; i++) {
    const loom_type *t = cv_type(cv, i);
    /* permute to the order's labels this operand has, then insert 1s */
    int64_t perm[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
    int32_t k = 0;
    for (int32_t l = 0; l < no; l++) {
      const char *at = strchr(ops[i], order[l]);
      if (at) perm[k++] = at - ops[i];
    }
    int32_t x = cv_in(cv, i);
    bool identity = true;
    for (int32_t d = 0; d < k; d++) identity &= perm[d] == d;
    if (!identity) x = lb_transpose(G, x, perm);
    for (int32_t l = 0, j = 0; l < no; l++) shape[l] = strchr(ops[i], order[l]) ? t->shape[perm[j++]] : 1;
    x = lb_reshape(G, x, no, shape);
    acc = acc < 0 ? x : lb_mul(G, acc, x);
  }
  int32_t n_out = (int32_t)strlen(out);
  if (no > n_out) {
    int64_t axes[LOOM_MAX_RANK];
    for (int32_t l = n_out; l < no; l++) axes[l - n_out] = l;
    acc = lb_reduce(G, LOOM_OP_REDUCE_SUM, acc, no - n_out, axes, false);
  }
  /* a label only broadcast (extent 1 everywhere) may still need its
   * extent: broadcast to the output's shape */
  int64_t oshape[LOOM_MAX_RANK];
  for (int32_t l = 0; l < n_out; l++) oshape[l] = extent[(unsigned char)out[l]];
  if (acc >= 0) {
    const loom_type *ta = &G->values[acc].type;
    bool same = ta->rank == n_out;
    for (int32_t l = 0; same && l < n_out; l++) same = ta->shape[l] == oshape[l];
    if (!same) acc = lb_broadcast_to(G, acc, n_out, oshape);
  }
  cv_out(cv, 0, acc);
  return LOOM_STATUS_OK;
}

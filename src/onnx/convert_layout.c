/*
 * Layout and indexing converters: Transpose, Reshape, Flatten, Squeeze,
 * Unsqueeze, Concat, Split, Slice, Gather, GatherElements, Expand, Tile,
 * Pad and the losses that index their targets (NegativeLogLikelihoodLoss,
 * SoftmaxCrossEntropyLoss).
 */
#include "onnx/convert_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

loom_status onnx_cv_transpose(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t perm[LOOM_MAX_RANK];
  int32_t n = cv_attr_ints(cv, "perm", perm, LOOM_MAX_RANK);
  if (cv->st) return cv->st;
  if (n < 0) {
    n = t->rank;
    for (int32_t d = 0; d < n; d++) perm[d] = n - 1 - d;
  }
  if (n != t->rank) return cv_invalid(cv, "perm has %d entries for rank %d", n, t->rank);
  for (int32_t d = 0; d < n; d++)
    if (perm[d] < 0) perm[d] += n;
  return done1(cv, lb_transpose(G, IN(0), perm));
}

loom_status onnx_cv_reshape(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t shape[LOOM_MAX_RANK + 1];
  int32_t n;
  if (cv->opset < 5) {
    n = cv_attr_ints(cv, "shape", shape, LOOM_MAX_RANK);
    if (n < 0) return cv->st ? cv->st : cv_invalid(cv, "no shape");
  } else if ((n = cv_ints(cv, 1, shape, LOOM_MAX_RANK)) < 0) {
    return cv->st;
  }
  bool allowzero = cv_attr_i(cv, "allowzero", 0) != 0;
  for (int32_t d = 0; d < n; d++) {
    if (shape[d] == 0 && !allowzero) {
      if (d >= t->rank) return cv_invalid(cv, "shape copies dim %d of a rank-%d input", d, t->rank);
      shape[d] = t->shape[d];
    }
  }
  return done1(cv, lb_reshape(G, IN(0), n, shape));
}

loom_status onnx_cv_flatten(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t axis = cv_attr_i(cv, "axis", 1);
  if (axis < 0) axis += t->rank;
  if (axis < 0 || axis > t->rank) return cv_invalid(cv, "axis out of range");
  int64_t rows = 1, cols = 1;
  for (int32_t d = 0; d < t->rank; d++) *(d < axis ? &rows : &cols) *= t->shape[d];
  return done1(cv, lb_reshape(G, IN(0), 2, (int64_t[]){rows, cols}));
}

/* Squeeze/Unsqueeze's axes: an attribute before opset 13, an input after. */
static int32_t axes_of(onnx_cv *cv, int64_t *axes) {
  if (cv->opset >= 13) return cv_has(cv, 1) ? cv_ints(cv, 1, axes, LOOM_MAX_RANK) : -2;
  int32_t n = cv_attr_ints(cv, "axes", axes, LOOM_MAX_RANK);
  return n < 0 && !cv->st ? -2 : n;
}

loom_status onnx_cv_squeeze(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t axes[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
  int32_t n = axes_of(cv, axes), r = 0;
  if (n == -1) return cv->st;
  bool drop[LOOM_MAX_RANK] = {false};
  for (int32_t i = 0; i < n; i++) {
    int32_t a;
    if (!onnx_axis(axes[i], t->rank, &a) || t->shape[a] != 1) return cv_invalid(cv, "cannot squeeze axis %lld", (long long)axes[i]);
    drop[a] = true;
  }
  for (int32_t d = 0; d < t->rank; d++)
    if (!(n == -2 ? t->shape[d] == 1 : drop[d])) shape[r++] = t->shape[d];
  return done1(cv, lb_reshape(G, IN(0), r, shape));
}

loom_status onnx_cv_unsqueeze(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t axes[LOOM_MAX_RANK], shape[LOOM_MAX_RANK];
  int32_t n = axes_of(cv, axes);
  if (n == -1) return cv->st;
  if (n == -2) return cv_invalid(cv, "no axes");
  int32_t r = t->rank + n;
  if (r > LOOM_MAX_RANK) return cv_unsupported(cv, "rank %d", r);
  bool add[LOOM_MAX_RANK] = {false};
  for (int32_t i = 0; i < n; i++) {
    int32_t a;
    if (!onnx_axis(axes[i], r, &a) || add[a]) return cv_invalid(cv, "bad axis %lld", (long long)axes[i]);
    add[a] = true;
  }
  for (int32_t d = 0, k = 0; d < r; d++) shape[d] = add[d] ? 1 : t->shape[k++];
  return done1(cv, lb_reshape(G, IN(0), r, shape));
}

loom_status onnx_cv_concat(onnx_cv *cv) {
  int32_t xs[ONNX_MAX_NODE_IO], n = 0, axis;
  const loom_type *t = TYPE(0);
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  for (int32_t i = 0; i < cv->n_in; i++)
    if (cv_has(cv, i)) xs[n++] = IN(i);
  if (n == 1) return done1(cv, xs[0]);
  return done1(cv, lb_concat(G, n, xs, axis));
}

/* Part [at, at + len) along axis of value v when v = x + c, c known at
 * load time (a bias after a merged QKV GEMM): slice(x) + c's part, so the
 * add runs in whatever reads the part rather than as a pass of its own
 * over all of v. -1 when v is not such a sum. */
static int32_t split_sum(onnx_cv *cv, int32_t v, int32_t axis, int64_t at, int64_t len) {
  const loom_graph *g = G;
  /* copies: adding the constant below moves the graph's values and nodes */
  const loom_type vt = g->values[v].type, *tv = &vt;
  const loom_node *n = g->values[v].kind == LOOM_VALUE_NODE ? &g->nodes[g->values[v].node] : NULL;
  if (!n || n->op != LOOM_OP_ADD || !loom_dtype_is_float(tv->dtype)) return -1;
  int32_t ins[2] = {n->in[0], n->in[1]};
  for (int32_t side = 0; side < 2; side++) {
    const loom_tensor *c = cv_value_const(cv, ins[side]);
    int32_t x = ins[1 - side];
    const loom_type *tx = &g->values[x].type;
    bool same = c && tx->rank == tv->rank && loom_tensor_rank(c) <= tv->rank &&
                loom_tensor_dtype(c) == tv->dtype && loom_tensor_numel(c) <= (int64_t)1 << 24;
    for (int32_t d = 0; same && d < tv->rank; d++) same = tx->shape[d] == tv->shape[d];
    if (!same) continue;
    /* c's dims aligned right against v's; its part along axis */
    int32_t rc = loom_tensor_rank(c), off = tv->rank - rc;
    int64_t shape[LOOM_MAX_RANK], cd = axis >= off ? loom_tensor_dim(c, axis - off) : 1;
    for (int32_t d = 0; d < rc; d++) shape[d] = loom_tensor_dim(c, d);
    if (cd != 1 && cd != tv->shape[axis]) continue;
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < rc; d++) {
      if (d < axis - off) outer *= shape[d];
      if (d > axis - off) inner *= shape[d];
    }
    if (cd != 1) shape[axis - off] = len;
    int64_t keep = cd != 1 ? len : 1, from = cd != 1 ? at : 0;
    double *vals = malloc(sizeof(double) * (size_t)LOOM_MAX(1, outer * keep * inner));
    if (!vals) return -1;
    for (int64_t o = 0, k = 0; o < outer; o++)
      for (int64_t a = 0; a < keep; a++)
        for (int64_t i = 0; i < inner; i++)
          vals[k++] = loom_load(tv->dtype, loom_tensor_data(c), (o * cd + from + a) * inner + i);
    int32_t cp = cv_const_values(cv, tv->dtype, rc, shape, vals);
    free(vals);
    int64_t st[LOOM_MAX_RANK] = {0}, en[LOOM_MAX_RANK];
    for (int32_t d = 0; d < tv->rank; d++) en[d] = tv->shape[d];
    st[axis] = at, en[axis] = at + len;
    return cp < 0 ? -1 : lb_add(G, lb_slice(G, x, st, en), cp);
  }
  return -1;
}

loom_status onnx_cv_split(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int32_t axis;
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  int64_t split[ONNX_MAX_NODE_IO];
  int32_t n = -1;
  if (cv->opset >= 13) {
    if (cv_has(cv, 1) && (n = cv_ints(cv, 1, split, ONNX_MAX_NODE_IO)) < 0) return cv->st;
  } else if ((n = cv_attr_ints(cv, "split", split, ONNX_MAX_NODE_IO)) < 0 && cv->st) {
    return cv->st;
  }
  int64_t dim = t->shape[axis];
  if (n < 0) {
    int64_t parts = cv_attr_i(cv, "num_outputs", cv->n_out);
    if (parts != cv->n_out || parts <= 0) return cv_invalid(cv, "num_outputs differs from the outputs");
    int64_t each = (dim + parts - 1) / parts; /* the last part may be smaller */
    n = (int32_t)parts;
    for (int32_t i = 0; i < n; i++) split[i] = LOOM_MAX(0, LOOM_MIN(each, dim - each * i));
  }
  if (n != cv->n_out) return cv_invalid(cv, "%d parts for %d outputs", n, cv->n_out);
  int64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    if (split[i] < 0 || split[i] > dim - at) return cv_invalid(cv, "the split does not add up to the dim");
    int64_t s[LOOM_MAX_RANK] = {0}, e[LOOM_MAX_RANK];
    for (int32_t d = 0; d < t->rank; d++) e[d] = t->shape[d];
    s[axis] = at;
    e[axis] = at + split[i];
    int32_t part = split[i] > 0 ? split_sum(cv, IN(0), axis, at, split[i]) : -1;
    cv_out(cv, i, part >= 0 ? part : lb_slice(G, IN(0), s, e));
    at += split[i];
  }
  if (at != dim) return cv_invalid(cv, "the split does not add up to the dim");
  return LOOM_STATUS_OK;
}


loom_status onnx_cv_slice(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t starts[LOOM_MAX_RANK], ends[LOOM_MAX_RANK], axes[LOOM_MAX_RANK], steps[LOOM_MAX_RANK];
  int32_t n, na = -1, ns = -1;
  if (cv->opset < 10) {
    n = cv_attr_ints(cv, "starts", starts, LOOM_MAX_RANK);
    int32_t ne = cv_attr_ints(cv, "ends", ends, LOOM_MAX_RANK);
    na = cv_attr_ints(cv, "axes", axes, LOOM_MAX_RANK);
    if (cv->st) return cv->st;
    if (n < 0 || ne != n) return cv_invalid(cv, "starts and ends differ in length");
  } else {
    if ((n = cv_ints(cv, 1, starts, LOOM_MAX_RANK)) < 0 || cv_ints(cv, 2, ends, LOOM_MAX_RANK) != n) {
      return cv->st ? cv->st : cv_invalid(cv, "starts and ends differ in length");
    }
    if (cv_has(cv, 3) && (na = cv_ints(cv, 3, axes, LOOM_MAX_RANK)) != n)
      return cv->st ? cv->st : cv_invalid(cv, "axes differ in length");
    if (cv_has(cv, 4) && (ns = cv_ints(cv, 4, steps, LOOM_MAX_RANK)) != n)
      return cv->st ? cv->st : cv_invalid(cv, "steps differ in length");
  }
  int64_t lo[LOOM_MAX_RANK] = {0}, hi[LOOM_MAX_RANK], step[LOOM_MAX_RANK];
  for (int32_t d = 0; d < t->rank; d++) {
    hi[d] = t->shape[d];
    step[d] = 1;
  }
  bool seen[LOOM_MAX_RANK] = {false};
  for (int32_t i = 0; i < n; i++) {
    int32_t a;
    if (!onnx_axis(na < 0 ? i : axes[i], t->rank, &a) || seen[a]) return cv_invalid(cv, "bad axis");
    seen[a] = true;
    int64_t dim = t->shape[a], st = ns < 0 ? 1 : steps[i];
    if (st == 0) return cv_invalid(cv, "a step of 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < -dim ? -dim - 1 : s + dim; /* saturates, no overflow */
    if (e < 0) e = e < -dim ? -dim - 1 : e + dim;
    if (st > 0) {
      s = clamp64(s, 0, dim);
      e = clamp64(e, 0, dim);
    } else {
      s = clamp64(s, 0, dim - 1);
      e = clamp64(e, -1, dim - 1);
    }
    lo[a] = s;
    hi[a] = e;
    step[a] = st;
  }
  /* contiguous ranges by slice, strided ones by a gather of their indices */
  int64_t s0[LOOM_MAX_RANK], e0[LOOM_MAX_RANK];
  for (int32_t d = 0; d < t->rank; d++) {
    s0[d] = step[d] == 1 ? lo[d] : 0;
    e0[d] = step[d] == 1 ? LOOM_MAX(lo[d], hi[d]) : t->shape[d];
  }
  int32_t y = lb_slice(G, IN(0), s0, e0);
  for (int32_t d = 0; d < t->rank; d++) {
    if (step[d] == 1) continue;
    int64_t cnt = step[d] > 0 ? (hi[d] - lo[d] + step[d] - 1) / step[d] : (lo[d] - hi[d] + (-step[d]) - 1) / (-step[d]);
    if (cnt < 0) cnt = 0;
    if (cnt > (int64_t)1 << 24) return cv_unsupported(cv, "a strided slice of %lld elements", (long long)cnt);
    double *idx = malloc(sizeof(double) * (size_t)(cnt ? cnt : 1));
    if (!idx) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int64_t k = 0; k < cnt; k++) idx[k] = (double)(lo[d] + k * step[d]);
    int32_t iv = cv_const_values(cv, LOOM_DTYPE_I64, 1, &cnt, idx);
    free(idx);
    y = lb_gather(G, y, iv, d);
  }
  return done1(cv, y);
}

/* Negative indices count from the end. */
static int32_t wrap_indices(onnx_cv *cv, int32_t i, int64_t dim) {
  int32_t idx = IN(i);
  return lb_select(G, lb_binary(G, LOOM_OP_LT, idx, scalar(cv, idx, 0)), lb_add(G, idx, scalar(cv, idx, (double)dim)), idx);
}

loom_status onnx_cv_gather(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int32_t axis;
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  if (TYPE(1)->dtype != LOOM_DTYPE_I32 && TYPE(1)->dtype != LOOM_DTYPE_I64) return cv_invalid(cv, "indices must be int32 or int64");
  if (t->rank - 1 + TYPE(1)->rank > LOOM_MAX_RANK) return cv_unsupported(cv, "result rank over %d", LOOM_MAX_RANK);
  return done1(cv, lb_gather(G, IN(0), wrap_indices(cv, 1, t->shape[axis]), axis));
}

/* out[i] = data[i with i[axis] = idx[i]] (idx i64, in range, of data's
 * rank), as a gather from the flattened data at sum of index * stride. */
static int32_t gather_along(onnx_cv *cv, int32_t data, const loom_type *t, int32_t idx, const loom_type *ti,
                            int32_t axis) {
  int32_t flat = -1;
  int64_t stride = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    int32_t at = d == axis ? idx : lb_iota(G, LOOM_DTYPE_I64, ti->rank, ti->shape, d);
    int32_t term = lb_mul(G, at, lb_scalar(G, LOOM_DTYPE_I64, (double)stride));
    flat = flat < 0 ? term : lb_add(G, flat, term);
    stride *= t->shape[d];
  }
  int64_t total = loom_type_numel(t);
  return lb_gather(G, lb_reshape(G, data, 1, &total), flat, 0);
}

loom_status onnx_cv_gather_elements(onnx_cv *cv) {
  const loom_type *t = TYPE(0), *ti = TYPE(1);
  int32_t axis;
  if (t->rank == 0) return cv_invalid(cv, "a scalar input");
  if (!onnx_axis(cv_attr_i(cv, "axis", 0), t->rank, &axis)) return cv_invalid(cv, "axis out of range");
  if (ti->rank != t->rank) return cv_invalid(cv, "indices of another rank");
  int32_t idx = lb_cast(G, wrap_indices(cv, 1, t->shape[axis]), LOOM_DTYPE_I64);
  return done1(cv, gather_along(cv, IN(0), t, idx, ti, axis));
}

/* NegativeLogLikelihoodLoss on log-probabilities lp [N, C, d...] (value
 * lpv) with targets input ti and optional weights input wi. */
static loom_status nll(onnx_cv *cv, int32_t lpv, const loom_type *t, int32_t ti, int32_t wi) {
  const loom_type *tt = TYPE(ti);
  if (t->rank < 2 || tt->rank != t->rank - 1) return cv_invalid(cv, "targets of rank %d for input of rank %d", tt->rank, t->rank);
  if (!loom_dtype_is_int(tt->dtype)) return cv_invalid(cv, "integer targets needed");
  const char *red = cv_attr_s(cv, "reduction", "mean");
  int mode = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : strcmp(red, "mean") == 0 ? 2 : -1;
  if (mode < 0) return cv_unsupported(cv, "reduction '%s'", red);
  int32_t tgt = lb_cast(G, IN(ti), LOOM_DTYPE_I64), valid = -1;
  if (cv_attr_has(cv, "ignore_index")) {
    valid = lb_binary(G, LOOM_OP_NE, tgt, lb_scalar(G, LOOM_DTYPE_I64, (double)cv_attr_i(cv, "ignore_index", 0)));
    tgt = lb_select(G, valid, tgt, lb_scalar(G, LOOM_DTYPE_I64, 0));
  }
  loom_type ut = *tt; /* [N, 1, d...] */
  ut.rank = t->rank;
  ut.shape[0] = tt->shape[0];
  ut.shape[1] = 1;
  for (int32_t d = 1; d < tt->rank; d++) ut.shape[d + 1] = tt->shape[d];
  ut.dtype = LOOM_DTYPE_I64;
  int32_t picked = gather_along(cv, lpv, t, lb_reshape(G, tgt, ut.rank, ut.shape), &ut, 1);
  int32_t loss = lb_neg(G, lb_reshape(G, picked, tt->rank, tt->shape));
  int32_t wt = -1;
  if (wi >= 0 && cv_has(cv, wi)) wt = lb_gather(G, IN(wi), tgt, 0);
  if (valid >= 0) {
    int32_t v = lb_cast(G, valid, t->dtype);
    wt = wt < 0 ? v : lb_mul(G, wt, v);
  }
  if (wt >= 0) loss = lb_mul(G, loss, wt);
  if (mode == 0) return done1(cv, loss);
  int32_t sum = lb_reduce(G, LOOM_OP_REDUCE_SUM, loss, 0, NULL, false);
  if (mode == 1) return done1(cv, sum);
  int32_t den = wt >= 0 ? lb_reduce(G, LOOM_OP_REDUCE_SUM, wt, 0, NULL, false)
                        : lb_scalar(G, t->dtype, (double)loom_type_numel(tt));
  return done1(cv, lb_div(G, sum, den));
}

loom_status onnx_cv_nll_loss(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  return nll(cv, IN(0), TYPE(0), 1, 2);
}

loom_status onnx_cv_softmax_ce_loss(onnx_cv *cv) {
  LOOM_TRY(need_float(cv, 0));
  const loom_type *t = TYPE(0);
  if (t->rank < 2) return cv_invalid(cv, "scores of rank %d", t->rank);
  loom_attr_value a[LOOM_MAX_ATTRS];
  attrs_of(LOOM_OP_LOG_SOFTMAX, a);
  LOOM_ATTRV_I(a, log_softmax, axis) = 1;
  int32_t x = IN(0);
  int32_t lp = lb_op(G, LOOM_OP_LOG_SOFTMAX, 1, &x, a);
  LOOM_TRY(nll(cv, lp, t, 1, 2));
  if (cv->n_out > 1) cv_out(cv, 1, lp);
  return LOOM_STATUS_OK;
}

loom_status onnx_cv_expand(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t shape[LOOM_MAX_RANK], out[LOOM_MAX_RANK];
  int32_t n = cv_ints(cv, 1, shape, LOOM_MAX_RANK), r;
  if (n < 0) return cv->st;
  if (!loom_broadcast_shapes(t->rank, t->shape, n, shape, &r, out)) return cv_invalid(cv, "shapes do not broadcast");
  return done1(cv, lb_broadcast_to(G, IN(0), r, out));
}

loom_status onnx_cv_tile(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t rep[LOOM_MAX_RANK];
  int32_t n = cv_ints(cv, 1, rep, LOOM_MAX_RANK);
  if (n < 0) return cv->st;
  if (n != t->rank) return cv_invalid(cv, "repeats has %d entries for rank %d", n, t->rank);
  int32_t y = IN(0);
  for (int32_t d = 0; d < t->rank; d++) {
    if (rep[d] < 0) return cv_invalid(cv, "a negative repeat");
    if (rep[d] == 1) continue;
    if (rep[d] == 0 || rep[d] > ONNX_MAX_NODE_IO) {
      /* [.., D, ..] -> [.., 1, D, ..] broadcast to [.., r, D, ..] -> [.., r*D, ..] */
      if (t->rank + 1 > LOOM_MAX_RANK) return cv_unsupported(cv, "rank %d", t->rank + 1);
      loom_type cur = G->values[y].type;
      int64_t s1[LOOM_MAX_RANK], s2[LOOM_MAX_RANK];
      for (int32_t k = 0, j = 0; k <= cur.rank; k++) {
        s1[k] = k == d ? 1 : cur.shape[j];
        s2[k] = k == d ? rep[d] : cur.shape[j];
        if (k != d) j++;
      }
      y = lb_broadcast_to(G, lb_reshape(G, y, cur.rank + 1, s1), cur.rank + 1, s2);
      cur.shape[d] *= rep[d];
      y = lb_reshape(G, y, cur.rank, cur.shape);
      continue;
    }
    int32_t xs[ONNX_MAX_NODE_IO];
    for (int64_t k = 0; k < rep[d]; k++) xs[k] = y;
    y = lb_concat(G, (int32_t)rep[d], xs, d);
  }
  return done1(cv, y);
}

loom_status onnx_cv_pad(onnx_cv *cv) {
  const loom_type *t = TYPE(0);
  int64_t pads[2 * LOOM_MAX_RANK];
  int32_t n;
  double value = 0;
  const char *ms = cv_attr_s(cv, "mode", "constant");
  int mode = strcmp(ms, "constant") == 0 ? 0 : strcmp(ms, "edge") == 0 ? 1 : strcmp(ms, "reflect") == 0 ? 2 : -1;
  if (mode < 0) return cv_unsupported(cv, "mode '%s'", ms);
  if (cv->opset < 11) {
    n = cv_attr_ints(cv, "pads", pads, 2 * LOOM_MAX_RANK);
    value = cv_attr_f(cv, "value", 0);
    if (n < 0) return cv->st ? cv->st : cv_invalid(cv, "no pads");
  } else {
    if ((n = cv_ints(cv, 1, pads, 2 * LOOM_MAX_RANK)) < 0) return cv->st;
    if (cv_has(cv, 2) && !cv_scalar(cv, 2, &value)) return cv_unsupported(cv, "constant_value not known at load time");
    if (cv_has(cv, 3)) return cv_unsupported(cv, "axes");
  }
  if (n != 2 * t->rank) return cv_invalid(cv, "%d pads for rank %d", n, t->rank);
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK], s[LOOM_MAX_RANK], e[LOOM_MAX_RANK];
  bool crop = false;
  for (int32_t d = 0; d < t->rank; d++) {
    lo[d] = LOOM_MAX(0, pads[d]);
    hi[d] = LOOM_MAX(0, pads[d + t->rank]);
    s[d] = LOOM_MAX(0, -pads[d]);
    e[d] = t->shape[d] - LOOM_MAX(0, -pads[d + t->rank]);
    if (e[d] < s[d]) return cv_invalid(cv, "negative pads larger than the dim");
    crop |= pads[d] < 0 || pads[d + t->rank] < 0;
  }
  int32_t x = IN(0);
  if (crop) x = lb_slice(G, x, s, e);
  if (mode == 0) return done1(cv, lb_pad(G, x, lo, hi, value));
  /* edge and reflect: a gather per padded dim of the clamped or mirrored
   * source index */
  for (int32_t d = 0; d < t->rank; d++) {
    int64_t len = e[d] - s[d], n = lo[d] + len + hi[d];
    if (!lo[d] && !hi[d]) continue;
    if (len == 0 || (mode == 2 && (lo[d] >= len || hi[d] >= len)))
      return cv_invalid(cv, "pads too large for mode '%s'", ms);
    double *idx = malloc(sizeof *idx * (size_t)n);
    if (!idx) return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) {
      int64_t j = i - lo[d];
      if (mode == 1) j = clamp64(j, 0, len - 1);
      else if (j < 0) j = -j;
      else if (j >= len) j = 2 * (len - 1) - j;
      idx[i] = (double)j;
    }
    int32_t iv = cv_const_values(cv, LOOM_DTYPE_I64, 1, &n, idx);
    free(idx);
    x = lb_gather(G, x, iv, d);
  }
  return done1(cv, x);
}


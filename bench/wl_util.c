/* Helpers shared by the workload builders: inputs with fill rules,
 * backward graphs, flop and byte counts. */
#include "workloads.h"

#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/op.h"
#include "passes/decompose.h"
#include "runtime/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_bench_graph_clear(loom_bench_graph *b) {
  if (!b) return;
  loom_graph_free(b->g);
  free(b->fill);
  for (int32_t i = 0; b->given && i < b->n_given; i++) loom_tensor_free(b->given[i]);
  free(b->given);
  memset(b, 0, sizeof *b);
}

int32_t loom_bench_input(loom_bench_graph *b, const char *name, loom_dtype dt, int32_t rank,
                         const int64_t *shape, loom_bench_fill fill, bool is_param) {
  loom_graph *g = b->g;
  if (g->err) return -1;
  if (!loom_grow(g->ctx, (void **)&b->fill, &b->cap_fill, b->n_fill + 1, sizeof *b->fill)) {
    g->err = LOOM_STATUS_OUT_OF_MEMORY;
    return -1;
  }
  loom_value v = -1;
  loom_status st = is_param ? loom_graph_param(g, name, dt, rank, shape, &v)
                            : loom_graph_input(g, name, dt, rank, shape, &v);
  if (st) {
    g->err = st;
    return -1;
  }
  b->fill[b->n_fill++] = fill;
  return v;
}

int32_t loom_bench_vjp_loss(loom_graph *g, int32_t y, int32_t dy) {
  if (g->err || y < 0) return -1;
  int32_t r = loom_value_type(g, y)->rank;
  int64_t axes[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r; d++)
    axes[d] = d;
  int32_t p = lb_mul(g, y, dy);
  return r ? lb_sum(g, p, r, axes, false) : p;
}

/*
 * A copy of src with the same inputs, only the nodes the given outputs
 * need, and those outputs: dead code (the loss, forward values nobody
 * reads) would otherwise run in the unfused modes and skew them.
 */
static loom_status extract(const loom_graph *src, int32_t n_out, char *const *names,
                           const int32_t *vals, loom_graph **out) {
  *out = NULL;
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  uint8_t *live = loom_calloc(src->ctx, (size_t)(src->n_values ? src->n_values : 1), 1);
  if (!live) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < n_out; i++)
    live[vals[i]] = 1;
  uint8_t *keep = loom_calloc(src->ctx, (size_t)(src->n_nodes ? src->n_nodes : 1), 1);
  loom_status st = keep ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = src->n_nodes - 1; !st && i >= 0; i--) {
    const loom_node *n = &src->nodes[i];
    for (int32_t k = 0; k < n->n_out && !keep[i]; k++)
      keep[i] = live[n->out[k]];
    if (keep[i])
      for (int32_t j = 0; j < n->n_in; j++)
        live[n->in[j]] = 1;
  }
  if (!st) st = loom_graph_begin_copy(src, &dst, &map);
  for (int32_t i = 0; !st && i < src->n_nodes; i++)
    if (keep[i]) st = loom_graph_copy_node(dst, src, &src->nodes[i], map);
  for (int32_t i = 0; !st && i < n_out; i++)
    st = loom_graph_output(dst, names[i], map[vals[i]]);
  free(live);
  free(keep);
  free(map);
  if (st) {
    loom_graph_free(dst);
    return st;
  }
  *out = dst;
  return LOOM_STATUS_OK;
}

loom_status loom_bench_make_backward(loom_bench_graph *b, int32_t n_wrt, const int32_t *wrt) {
  return loom_bench_make_backward_of(b, 0, n_wrt, wrt);
}

loom_status loom_bench_make_backward_of(loom_bench_graph *b, int32_t loss, int32_t n_wrt,
                                        const int32_t *wrt) {
  loom_graph *g = b->g, *dg = NULL, *fin = NULL;
  loom_ctx *ctx = g->ctx;
  if (loss < 0 || loss >= g->n_outputs)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: a backward workload needs a loss");
  /* as `loom train` builds its step: the default backend's rewrite (flash
   * attention, its own backward) before autodiff, which would otherwise
   * differentiate attention's primitives */
  loom_session_options so = LOOM_SESSION_OPTIONS(.attention = b->attention);
  LOOM_TRY(loom_backend_rewrite(ctx, &so, g, &fin, NULL));
  if (fin) {
    loom_graph_free(b->g);
    b->g = g = fin;
    fin = NULL;
  }
  LOOM_TRY(loom_graph_decompose_for_grad(g, &dg));
  int32_t n_keep = dg->n_outputs - 1, n_out = n_keep + n_wrt;
  int32_t *wv = loom_calloc(ctx, (size_t)(n_wrt ? n_wrt : 1), sizeof *wv);
  int32_t *vals = loom_calloc(ctx, (size_t)n_out, sizeof *vals);
  char **names = loom_calloc(ctx, (size_t)n_out, sizeof *names);
  loom_status st = wv && vals && names ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; !st && i < n_wrt; i++) {
    if (wrt[i] < 0 || wrt[i] >= dg->n_inputs)
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: wrt %d is not an input", wrt[i]);
    else
      wv[i] = dg->inputs[wrt[i]];
  }
  if (!st) st = loom_graph_grad(dg, dg->outputs[loss], n_wrt, wv, vals + n_keep);
  for (int32_t i = 0; !st && i < n_keep; i++) {
    int32_t o = i < loss ? i : i + 1; /* every output but the loss */
    vals[i] = dg->outputs[o];
    names[i] = loom_strdup(ctx, dg->output_names[o]);
    if (!names[i]) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; !st && i < n_wrt; i++) {
    const char *in = dg->values[wv[i]].name;
    size_t len = strlen(in) + 2;
    names[n_keep + i] = loom_malloc(ctx, len);
    if (!names[n_keep + i])
      st = LOOM_STATUS_OUT_OF_MEMORY;
    else
      snprintf(names[n_keep + i], len, "d%s", in);
  }
  if (!st) st = extract(dg, n_out, names, vals, &fin);
  for (int32_t i = 0; names && i < n_out; i++)
    free(names[i]);
  free(names);
  free(vals);
  free(wv);
  loom_graph_free(dg);
  if (st) return st;
  loom_graph_free(b->g);
  b->g = fin;
  return LOOM_STATUS_OK;
}

loom_status loom_bench_fill_by_kind(loom_ctx *ctx, loom_bench_graph *b) {
  const loom_graph *g = b->g;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_value_info *v = &g->values[g->inputs[i]];
    loom_bench_fill fill = loom_dtype_is_int(v->type.dtype) ? LOOM_BENCH_FILL_LABELS
                           : v->kind == LOOM_VALUE_PARAM    ? LOOM_BENCH_FILL_SMALL
                                                            : LOOM_BENCH_FILL_UNIFORM;
    if (!loom_grow(ctx, (void **)&b->fill, &b->cap_fill, b->n_fill + 1, sizeof *b->fill))
      return LOOM_STATUS_OUT_OF_MEMORY;
    b->fill[b->n_fill++] = fill;
  }
  return LOOM_STATUS_OK;
}

loom_status loom_bench_count_flops(loom_bench_graph *b) {
  loom_graph *dg = NULL;
  LOOM_TRY(loom_graph_decompose(b->g, &dg));
  double flops = 0.0;
  for (int32_t i = 0; i < dg->n_nodes; i++) {
    const loom_node *n = &dg->nodes[i];
    const loom_type *a = loom_value_type(dg, n->in[0]);
    if (n->op == LOOM_OP_MATMUL) {
      bool trans_a = LOOM_ATTR_I(n, matmul, trans_a) != 0;
      int64_t k = a->shape[a->rank - (trans_a ? 2 : 1)];
      flops += 2.0 * (double)loom_type_numel(loom_value_type(dg, n->out[0])) * (double)k;
      continue;
    }
    /* the convolutions (the gemm kind too): 2 flops per element of the
     * small side (the conv's output, conv_transpose's input, the
     * gradient conv_grad_weight reads) per weight of one small channel */
    bool conv = n->op == LOOM_OP_CONV, grad_w = n->op == LOOM_OP_CONV_GRAD_WEIGHT;
    if (!conv && !grad_w && n->op != LOOM_OP_CONV_TRANSPOSE) continue;
    const loom_type *w = loom_value_type(dg, grad_w ? n->out[0] : n->in[1]);
    const loom_type *small = conv ? loom_value_type(dg, n->out[0])
                             : grad_w ? loom_value_type(dg, n->in[1])
                                      : a;
    if (w->shape[0] > 0)
      flops += 2.0 * (double)loom_type_numel(small) * (double)(loom_type_numel(w) / w->shape[0]);
  }
  b->gemm_flops = flops;
  loom_graph_free(dg);
  return LOOM_STATUS_OK;
}

int64_t loom_bench_io_bytes(const loom_graph *g) {
  int64_t bytes = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    bytes += loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const loom_type *t = loom_value_type(g, g->outputs[i]);
    bytes += loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
  }
  return bytes;
}

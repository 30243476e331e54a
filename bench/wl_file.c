/*
 * `loom bench FILE`: the user's own graph as a workload. The graph file is
 * loaded as `loom run` loads it; its inputs get deterministic random data
 * of their declared shapes (parameters small, like initialised weights;
 * integer inputs valid indices of the axes they index), unless --input
 * gives them; with --grad the workload is the forward and the backward
 * pass: the gradients of the graph's scalar loss with respect to its
 * parameters, as the named model workloads are built.
 */
#include "workloads.h"

#include "ir/dtype.h"
#include "ops/attrs.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The extent an integer input may index: the smallest indexed axis among
 * its consumers (gather, scatter_add, cross_entropy), 1 when none says. */
static int64_t index_extent(const loom_graph *g, int32_t v) {
  int64_t extent = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const loom_node *nd = &g->nodes[n];
    if (nd->n_in < 2 || nd->in[1] != v) continue;
    int64_t e = 0;
    if (nd->op == LOOM_OP_GATHER) {
      const loom_type *t = loom_value_type(g, nd->in[0]);
      int64_t axis = LOOM_ATTR_I(nd, gather, axis);
      if (axis >= 0 && axis < t->rank) e = t->shape[axis];
    } else if (nd->op == LOOM_OP_SCATTER_ADD) {
      const loom_type *t = loom_value_type(g, nd->out[0]);
      int64_t axis = LOOM_ATTR_I(nd, scatter_add, axis);
      if (axis >= 0 && axis < t->rank) e = t->shape[axis];
    } else if (nd->op == LOOM_OP_CROSS_ENTROPY) {
      const loom_type *t = loom_value_type(g, nd->in[0]);
      if (t->rank > 0) e = t->shape[t->rank - 1];
    }
    if (e > 0 && (extent == 0 || e < extent)) extent = e;
  }
  return extent > 0 ? extent : 1;
}

/* The loss for --grad: the first f32 scalar output. */
static int32_t find_loss(const loom_graph *g) {
  for (int32_t o = 0; o < g->n_outputs; o++) {
    const loom_type *t = loom_value_type(g, g->outputs[o]);
    if (t->rank == 0 && t->dtype == LOOM_DTYPE_F32) return o;
  }
  return -1;
}

/* Reads each "name=file.npy" of the spec into b->given, checked against
 * the input's declared type. */
static loom_status bind_inputs(loom_ctx *ctx, const loom_bench_file_spec *spec,
                               loom_bench_graph *b) {
  const loom_graph *g = b->g;
  b->given = calloc((size_t)g->n_inputs + 1, sizeof *b->given);
  if (!b->given) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "bench: out of memory");
  b->n_given = g->n_inputs;
  for (int32_t k = 0; k < spec->n_inputs; k++) {
    const char *arg = spec->inputs[k], *eq = strchr(arg, '=');
    char name[256];
    size_t n = eq ? (size_t)(eq - arg) : 0;
    if (!eq || n == 0 || n >= sizeof name || !eq[1])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "--input wants NAME=FILE.npy, got '%s'",
                        arg);
    memcpy(name, arg, n);
    name[n] = '\0';
    int32_t slot = -1;
    for (int32_t i = 0; i < g->n_inputs; i++)
      if (g->values[g->inputs[i]].name && !strcmp(g->values[g->inputs[i]].name, name)) slot = i;
    if (slot < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "--input %s: %s has no input '%s'%s",
                        arg, spec->path, name, spec->grad ? " (or --grad does not need it)" : "");
    if (b->given[slot])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "--input: '%s' given twice", name);
    LOOM_TRY(loom_tensor_load_npy(ctx, eq + 1, &b->given[slot]));
    const loom_type *t = loom_value_type(g, g->inputs[slot]);
    loom_tensor *x = b->given[slot];
    bool same = loom_tensor_dtype(x) == t->dtype && loom_tensor_rank(x) == t->rank;
    for (int32_t d = 0; same && d < t->rank; d++)
      same = loom_tensor_dim(x, d) == t->shape[d];
    char want[128];
    if (!same)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "--input %s: the file does not hold %s",
                        arg, loom_type_str(t, want, sizeof want));
  }
  return LOOM_STATUS_OK;
}

loom_status loom_bench_build_file(loom_ctx *ctx, const loom_bench_workload *w, bool small,
                                  loom_bench_graph *b) {
  (void)small; /* the file's shapes are the user's */
  const loom_bench_file_spec *spec = w->arg;
  memset(b, 0, sizeof *b);
  LOOM_TRY(loom_graph_load(ctx, spec->path, &b->g));
  loom_graph *g = b->g;
  /* integer inputs index axes: found before --grad decomposes the graph */
  int64_t classes = 0;
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (loom_dtype_is_int(g->values[g->inputs[i]].type.dtype)) {
      int64_t e = index_extent(g, g->inputs[i]);
      classes = classes == 0 || e < classes ? e : classes;
    }
  if (spec->grad) {
    int32_t loss = find_loss(g);
    if (loss < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "--grad: %s has no scalar f32 output to be the loss", spec->path);
    int32_t *wrt = calloc((size_t)g->n_inputs + 1, sizeof *wrt), n_wrt = 0;
    if (!wrt) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "bench: out of memory");
    for (int32_t i = 0; i < g->n_inputs; i++)
      if (g->values[g->inputs[i]].kind == LOOM_VALUE_PARAM) wrt[n_wrt++] = i;
    loom_status st = n_wrt == 0
                         ? loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                                      "--grad: %s has no params to differentiate", spec->path)
                         : loom_bench_make_backward_of(b, loss, n_wrt, wrt);
    free(wrt);
    LOOM_TRY(st);
    g = b->g;
  }
  /* fill rules: params like initialised weights, indices in range */
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_value_info *v = &g->values[g->inputs[i]];
    loom_bench_fill fill = loom_dtype_is_int(v->type.dtype) ? LOOM_BENCH_FILL_LABELS
                           : v->kind == LOOM_VALUE_PARAM    ? LOOM_BENCH_FILL_SMALL
                                                            : LOOM_BENCH_FILL_UNIFORM;
    if (!loom_grow(ctx, (void **)&b->fill, &b->cap_fill, b->n_fill + 1, sizeof *b->fill))
      return LOOM_STATUS_OUT_OF_MEMORY;
    b->fill[b->n_fill++] = fill;
  }
  b->classes = classes > 0 ? classes : 1;
  LOOM_TRY(bind_inputs(ctx, spec, b));
  b->min_bytes = loom_bench_io_bytes(g);
  LOOM_TRY(loom_bench_count_flops(b));
  char tb[96] = "";
  if (g->n_inputs > 0) loom_type_str(loom_value_type(g, g->inputs[0]), tb, sizeof tb);
  snprintf(b->shape, sizeof b->shape, "%s%s", tb, spec->grad ? " fwd+bwd" : "");
  return LOOM_STATUS_OK;
}

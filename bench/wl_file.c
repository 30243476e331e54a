/*
 * `loom bench FILE`: the user's own graph as a workload. The graph file is
 * loaded as `loom run` loads it; its inputs get deterministic random data
 * of their declared shapes (parameters small, like initialised weights;
 * integer inputs valid indices of the axes they index), unless --input
 * gives them; with --grad the workload is the forward and the backward
 * pass: the gradients of the graph's scalar loss with respect to its
 * parameters, as the named model workloads are built. An ONNX model
 * (FILE.onnx) is imported as `loom run` imports it: its initializers are
 * the params and keep their values; its inputs are random of their
 * declared shapes (symbolic dims from --dim, else 1) unless --input gives
 * them (.npy or TensorProto .pb).
 */
#include "workloads.h"

#include "ir/dtype.h"
#include "ops/attrs.h"
#include "onnx/feeds.h"
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

/* Tensors held by name until the graph's inputs are final (--grad may drop
 * some and renumber the rest). */
typedef struct held_data {
  int32_t n;
  char **names;
  loom_tensor **t;
} held_data;

static void held_free(held_data *h) {
  for (int32_t k = 0; k < h->n; k++) free(h->names[k]), loom_tensor_free(h->t[k]);
  free(h->names);
  free(h->t);
  memset(h, 0, sizeof *h);
}

static bool is_onnx(const char *path) {
  size_t n = strlen(path);
  return n >= 5 && strcmp(path + n - 5, ".onnx") == 0;
}

/* "NAME=VALUE" into a malloc'd name and a pointer to the value. */
static loom_status split_pair(loom_ctx *ctx, const char *flag, const char *arg, char **name,
                              const char **value) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1])
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s wants NAME=VALUE, got '%s'", flag, arg);
  *name = strndup(arg, (size_t)(eq - arg));
  *value = eq + 1;
  return *name ? LOOM_STATUS_OK : loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "bench: out of memory");
}

/* Imports the model with its inputs; *g takes the program's graph and h
 * the data of every graph input (the initializers and the inputs). */
static loom_status load_onnx(loom_ctx *ctx, const loom_bench_file_spec *spec, loom_graph **g,
                             held_data *h) {
  int32_t n_pairs = spec->n_inputs + spec->n_dims;
  char **names = calloc((size_t)n_pairs + 1, sizeof *names);
  const char **values = calloc((size_t)n_pairs + 1, sizeof *values);
  int64_t *dims = calloc((size_t)spec->n_dims + 1, sizeof *dims);
  onnx_model *m = NULL;
  onnx_inputs in = {0};
  onnx_program *p = NULL;
  loom_status st = names && values && dims ? LOOM_STATUS_OK
                                           : loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  for (int32_t k = 0; !st && k < spec->n_inputs; k++)
    st = split_pair(ctx, "--input", spec->inputs[k], &names[k], &values[k]);
  for (int32_t k = 0; !st && k < spec->n_dims; k++) {
    int32_t j = spec->n_inputs + k;
    st = split_pair(ctx, "--dim", spec->dims[k], &names[j], &values[j]);
    if (!st) dims[k] = strtoll(values[j], NULL, 10); /* checked by the command line */
  }
  onnx_input_spec is = {.n_given = spec->n_inputs, .given_names = (const char *const *)names,
                        .given_paths = values, .n_dims = spec->n_dims,
                        .dim_names = (const char *const *)names + spec->n_inputs,
                        .dim_values = dims, .random = true};
  if (!st) st = onnx_model_load(ctx, spec->path, &m);
  if (!st) st = onnx_inputs_load(ctx, m, &is, &in);
  if (!st) st = onnx_import(ctx, m, in.n, in.feeds, &p);
  if (!st) {
    *g = p->g;
    p->g = NULL;
    int32_t n = (*g)->n_inputs;
    h->names = calloc((size_t)n + 1, sizeof *h->names);
    h->t = calloc((size_t)n + 1, sizeof *h->t);
    if (!h->names || !h->t) st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int32_t i = 0; !st && i < n; i++) {
      const char *name = loom_graph_input_name(*g, i);
      loom_tensor **from = NULL; /* the slot that owns its data, emptied */
      for (int32_t k = 0; p->bound[i] && k < p->n_owned; k++)
        if (p->owned[k] == p->bound[i]) from = &p->owned[k];
      for (int32_t k = 0; !p->bound[i] && k < in.n; k++)
        if (strcmp(in.feeds[k].name, name) == 0) from = &in.t[k];
      if (!from) continue; /* filled by the bench's rules */
      if (!(h->names[h->n] = strdup(name))) {
        st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
        break;
      }
      h->t[h->n++] = *from;
      *from = NULL;
    }
  }
  onnx_program_free(p);
  onnx_inputs_free(&in);
  onnx_model_free(m);
  for (int32_t k = 0; names && k < n_pairs; k++) free(names[k]);
  free(names);
  free(values);
  free(dims);
  return st;
}

/* Gives each graph input the held tensor of its name (moved into b). */
static loom_status bind_held(loom_ctx *ctx, held_data *h, loom_bench_graph *b) {
  const loom_graph *g = b->g;
  b->given = calloc((size_t)g->n_inputs + 1, sizeof *b->given);
  if (!b->given) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "bench: out of memory");
  b->n_given = g->n_inputs;
  for (int32_t i = 0; i < g->n_inputs; i++)
    for (int32_t k = 0; k < h->n; k++)
      if (h->t[k] && strcmp(h->names[k], loom_graph_input_name(g, i)) == 0) {
        b->given[i] = h->t[k];
        h->t[k] = NULL;
      }
  return LOOM_STATUS_OK;
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

static loom_status build_loaded(loom_ctx *ctx, const loom_bench_file_spec *spec, held_data *held,
                                loom_bench_graph *b);

loom_status loom_bench_build_file(loom_ctx *ctx, const loom_bench_workload *w, bool small,
                                  loom_bench_graph *b) {
  (void)small; /* the file's shapes are the user's */
  const loom_bench_file_spec *spec = w->arg;
  memset(b, 0, sizeof *b);
  held_data held = {0};
  bool onnx = is_onnx(spec->path);
  loom_status st = onnx ? load_onnx(ctx, spec, &b->g, &held) : loom_graph_load(ctx, spec->path, &b->g);
  if (!st) st = build_loaded(ctx, spec, onnx ? &held : NULL, b);
  held_free(&held);
  return st;
}

/* The rest of loom_bench_build_file, on the loaded graph b->g; held: an
 * ONNX model's data by name (NULL: a graph file, --input read here). */
static loom_status build_loaded(loom_ctx *ctx, const loom_bench_file_spec *spec, held_data *held,
                                loom_bench_graph *b) {
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
  LOOM_TRY(loom_bench_fill_by_kind(ctx, b));
  b->classes = classes > 0 ? classes : 1;
  LOOM_TRY(held ? bind_held(ctx, held, b) : bind_inputs(ctx, spec, b));
  b->min_bytes = loom_bench_io_bytes(g);
  LOOM_TRY(loom_bench_count_flops(b));
  char tb[80] = "";
  if (g->n_inputs > 0) loom_type_str(loom_value_type(g, g->inputs[0]), tb, sizeof tb);
  snprintf(b->shape, sizeof b->shape, "%s%s", tb, spec->grad ? " fwd+bwd" : "");
  return LOOM_STATUS_OK;
}

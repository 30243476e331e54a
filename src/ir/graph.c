#include "ir/graph.h"

#include "core/checked.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

loom_status loom_graph_new(loom_ctx *ctx, loom_graph **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_new: out is NULL");
  *out = NULL;
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_graph *g = loom_calloc(ctx, 1, sizeof *g);
  if (!g) return LOOM_STATUS_OUT_OF_MEMORY;
  g->ctx = ctx;
  *out = g;
  return LOOM_STATUS_OK;
}

static void graph_clear(loom_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    free(g->nodes[i].in);
    free(g->nodes[i].out);
  }
  for (int32_t i = 0; i < g->n_values; i++) free(g->values[i].name);
  for (int32_t i = 0; i < g->n_outputs; i++) free(g->output_names[i]);
  free(g->nodes);
  free(g->values);
  free(g->inputs);
  free(g->outputs);
  free(g->output_names);
  loom_strmap_free(&g->value_names);
  loom_strmap_free(&g->output_index);
}

void loom_graph_free(loom_graph *g) {
  if (!g) return;
  graph_clear(g);
  free(g);
}

void loom_graph_replace(loom_graph *dst, loom_graph *src) {
  graph_clear(dst);
  *dst = *src;
  free(src);
}

int64_t loom_type_numel(const loom_type *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
  return n;
}

bool loom_type_equal(const loom_type *a, const loom_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int32_t d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

const char *loom_type_str(const loom_type *t, char *buf, size_t n) {
  const char *dn = loom_dtype_name(t->dtype);
  size_t k = (size_t)snprintf(buf, n, "%s[", dn ? dn : "?");
  for (int32_t d = 0; d < t->rank && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

bool loom_broadcast_shapes(int32_t ra, const int64_t *a, int32_t rb,
                           const int64_t *b, int32_t *rout, int64_t *out) {
  int32_t r = LOOM_MAX(ra, rb);
  for (int32_t d = r - 1, da = ra - 1, db = rb - 1; d >= 0; d--, da--, db--) {
    int64_t x = da >= 0 ? a[da] : 1, y = db >= 0 ? b[db] : 1;
    if (x != y && x != 1 && y != 1) return false;
    out[d] = x == 1 ? y : x;
  }
  *rout = r;
  return true;
}

loom_status loom_shape_check(loom_ctx *ctx, int32_t rank, const int64_t *shape,
                             int64_t *numel) {
  if (rank < 0 || rank > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "rank %d is outside [0, %d]", rank,
                      LOOM_MAX_RANK);
  if (rank > 0 && !shape)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "shape is NULL for rank %d", rank);
  /* Zero dims count as one in the bound so that strides stay bounded too
   * (f32[0, 2^62, 2^62] has no elements but a stride of 2^62). */
  int64_t n = 1, extent = 1;
  for (int32_t d = 0; d < rank; d++) {
    if (shape[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "dimension %d has negative extent %lld", d, (long long)shape[d]);
    int64_t s = shape[d] ? shape[d] : 1;
    if (extent > LOOM_MAX_NUMEL / s)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "shape has too many elements (dim %d is %lld; the dims, zeros counted "
                        "as one, may multiply to at most 2^48)",
                        d, (long long)shape[d]);
    extent *= s;
    n *= shape[d];
  }
  if (numel) *numel = n;
  return LOOM_STATUS_OK;
}

static int32_t add_value(loom_graph *g, const loom_type *t, loom_value_kind kind,
                         int32_t node, int32_t index) {
  if (!loom_grow(g->ctx, (void **)&g->values, &g->cap_values, g->n_values + 1,
                 sizeof *g->values))
    return -1;
  loom_value_info *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->type = *t;
  v->kind = kind;
  v->node = node;
  v->index = index;
  return g->n_values++;
}

int32_t loom_graph_find_value(const loom_graph *g, const char *name) {
  return loom_strmap_get(&g->value_names, name, strlen(name));
}

loom_status loom_value_set_name(loom_graph *g, int32_t v, const char *name) {
  if (!loom_value_valid(g, v))
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "no value %d", v);
  if (!name || !*name)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "empty value name");
  int32_t other = loom_graph_find_value(g, name);
  if (other >= 0 && other != v)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "the name '%s' is already used", name);
  char *copy = loom_strdup(g->ctx, name);
  if (!copy || !loom_strmap_put(&g->value_names, name, strlen(name), v)) {
    free(copy);
    return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory naming a value");
  }
  if (g->values[v].name && strcmp(g->values[v].name, name) != 0)
    loom_strmap_remove(&g->value_names, g->values[v].name, strlen(g->values[v].name));
  free(g->values[v].name);
  g->values[v].name = copy;
  return LOOM_STATUS_OK;
}

static loom_status add_input(loom_graph *g, const char *name, loom_dtype dt,
                             int32_t rank, const int64_t *shape,
                             loom_value_kind kind, loom_value *out) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  if (out) *out = LOOM_VALUE_NONE;
  if (!name || !*name)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "an input needs a name");
  if (!loom_dtype_valid(dt))
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "input '%s': invalid dtype %d", name, (int)dt);
  if (loom_shape_check(g->ctx, rank, shape, NULL)) {
    loom_error_prefix(g->ctx, "input '%s'", name);
    return LOOM_STATUS_INVALID_ARGUMENT;
  }
  if (loom_graph_find_value(g, name) >= 0)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "the name '%s' is already used", name);
  loom_type t = {.dtype = dt, .rank = rank};
  for (int32_t d = 0; d < rank; d++) t.shape[d] = shape[d];
  if (!loom_grow(g->ctx, (void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1,
                 sizeof *g->inputs))
    return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t v = add_value(g, &t, kind, -1, 0);
  if (v < 0) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = loom_value_set_name(g, v, name);
  if (st) {
    g->n_values--;
    return st;
  }
  g->inputs[g->n_inputs++] = v;
  if (out) *out = v;
  return LOOM_STATUS_OK;
}

loom_status loom_graph_input(loom_graph *g, const char *name, loom_dtype dt,
                             int32_t rank, const int64_t *shape,
                             loom_value *out) {
  return add_input(g, name, dt, rank, shape, LOOM_VALUE_INPUT, out);
}

loom_status loom_graph_param(loom_graph *g, const char *name, loom_dtype dt,
                             int32_t rank, const int64_t *shape,
                             loom_value *out) {
  return add_input(g, name, dt, rank, shape, LOOM_VALUE_PARAM, out);
}

uint64_t loom_hash_mix(uint64_t h, uint64_t x) {
  return h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

uint64_t loom_attrs_hash(uint64_t h, const loom_attr_value *attrs) {
  for (int32_t a = 0; a < LOOM_MAX_ATTRS; a++) {
    h = loom_hash_mix(h, (uint64_t)attrs[a].i);
    h = loom_hash_mix(h, double_bits(attrs[a].f));
    h = loom_hash_mix(h, (uint64_t)attrs[a].ints.n);
    for (int32_t k = 0; k < attrs[a].ints.n && k < LOOM_MAX_RANK; k++)
      h = loom_hash_mix(h, (uint64_t)attrs[a].ints.v[k]);
  }
  return h;
}

bool loom_attrs_equal(const loom_attr_value *a, const loom_attr_value *b) {
  for (int32_t k = 0; k < LOOM_MAX_ATTRS; k++) {
    if (a[k].i != b[k].i || double_bits(a[k].f) != double_bits(b[k].f) || a[k].ints.n != b[k].ints.n)
      return false;
    for (int32_t j = 0; j < a[k].ints.n && j < LOOM_MAX_RANK; j++)
      if (a[k].ints.v[j] != b[k].ints.v[j]) return false;
  }
  return true;
}

uint64_t loom_node_hash(uint64_t h, const loom_node *n) {
  h = loom_hash_mix(h, (uint64_t)n->op);
  h = loom_hash_mix(h, (uint64_t)n->copy);
  return loom_attrs_hash(h, n->attr);
}

bool loom_node_same_kind(const loom_node *a, const loom_node *b) {
  return a->op == b->op && a->copy == b->copy && a->n_in == b->n_in && a->n_out == b->n_out &&
         loom_attrs_equal(a->attr, b->attr);
}

void loom_graph_mark_copy(loom_graph *g, int32_t from, int32_t copy) {
  for (int32_t i = from < 0 ? 0 : from; i < g->n_nodes; i++) g->nodes[i].copy = copy;
}

void loom_attrs_default(loom_op op, loom_attr_value *attrs) {
  memset(attrs, 0, sizeof(loom_attr_value) * LOOM_MAX_ATTRS);
  const loom_op_def *d = loom_op_get(op);
  if (!d) return;
  for (int32_t i = 0; i < d->n_attrs; i++) {
    attrs[i].i = d->attrs[i].def_i;
    attrs[i].f = d->attrs[i].def_f;
  }
}

loom_status loom_attrs_from_named(loom_ctx *ctx, loom_op op, int32_t n,
                                  const loom_attr *named,
                                  loom_attr_value *attrs) {
  const loom_op_def *d = loom_op_get(op);
  if (!d) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "unknown op %d", (int)op);
  loom_attrs_default(op, attrs);
  bool seen[LOOM_MAX_ATTRS] = {false};
  if (n < 0 || (n > 0 && !named))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: bad attribute list", d->name);
  for (int32_t k = 0; k < n; k++) {
    const loom_attr *a = &named[k];
    int32_t i = a->name ? loom_op_attr_index(op, a->name) : -1;
    if (i < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s has no attribute '%s'", d->name,
                        a->name ? a->name : "(NULL)");
    if (seen[i])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s: attribute '%s' given twice", d->name, a->name);
    seen[i] = true;
    const loom_attr_spec *s = &d->attrs[i];
    if (s->kind == LOOM_ATTR_FLOAT && a->kind == LOOM_ATTR_INT) {
      attrs[i].f = (double)a->i; /* an integer literal is a fine float */
      continue;
    }
    if (a->kind != s->kind)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s: attribute '%s' has the wrong kind", d->name, a->name);
    if (s->kind == LOOM_ATTR_INT) {
      attrs[i].i = a->i;
    } else if (s->kind == LOOM_ATTR_FLOAT) {
      attrs[i].f = a->f;
    } else {
      if (a->n_ints < 0 || a->n_ints > LOOM_MAX_RANK || (a->n_ints && !a->ints))
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "%s: attribute '%s' must list 0 to %d integers",
                          d->name, a->name, LOOM_MAX_RANK);
      attrs[i].ints.n = a->n_ints;
      for (int32_t j = 0; j < a->n_ints; j++) attrs[i].ints.v[j] = a->ints[j];
    }
  }
  for (int32_t i = 0; i < d->n_attrs; i++)
    if (d->attrs[i].required && !seen[i])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s needs the attribute '%s'", d->name, d->attrs[i].name);
  return LOOM_STATUS_OK;
}

loom_status loom_graph_add(loom_graph *g, loom_op op, int32_t n_in,
                           const int32_t *in, const loom_attr_value *attrs,
                           int32_t n_out, int32_t *out) {
  loom_ctx *ctx = g->ctx;
  const loom_op_def *d = loom_op_get(op);
  if (!d) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "unknown op %d", (int)op);
  if (n_in < d->min_in || (d->max_in >= 0 && n_in > d->max_in) || (n_in && !in))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s takes %d%s inputs, got %d", d->name, d->min_in,
                      d->max_in < 0 ? " or more" : d->max_in == d->min_in ? "" : " or more",
                      n_in);
  if (!loom_op_out_count_ok(d, n_out)) {
    if (d->n_out < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s has 1 to %d outputs, %d asked for", d->name, LOOM_MAX_NODE_IO, n_out);
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s has %d output(s), %d asked for", d->name, d->n_out, n_out);
  }
  if (n_in > LOOM_MAX_NODE_IO)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: %d inputs, at most %d", d->name,
                      n_in, LOOM_MAX_NODE_IO);
  loom_node node;
  memset(&node, 0, sizeof node);
  node.op = op;
  node.n_in = n_in;
  node.n_out = n_out;
  if (attrs)
    memcpy(node.attr, attrs, sizeof node.attr);
  else
    loom_attrs_default(op, node.attr);
  loom_type *in_types = loom_malloc(ctx, sizeof(loom_type) * (size_t)(n_in ? n_in : 1));
  /* a comm op's global form may have up to LOOM_MAX_NODE_IO outputs */
  loom_type out_stack[LOOM_PART_MAX_IO], *out_types = out_stack;
  if (in_types && n_out > LOOM_PART_MAX_IO)
    out_types = loom_malloc(ctx, sizeof *out_types * (size_t)n_out);
  if (!in_types || !out_types) {
    free(in_types);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n_in; i++) {
    if (!loom_value_valid(g, in[i])) {
      free(in_types);
      if (out_types != out_stack) free(out_types);
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s: input %d is not a value of this graph (%d)", d->name, i, in[i]);
    }
    in_types[i] = g->values[in[i]].type;
  }
  memset(out_types, 0, sizeof *out_types * (size_t)LOOM_MAX(n_out, LOOM_PART_MAX_IO));
  node.in = (int32_t *)in; /* infer may read the ids; not kept */
  loom_status st = d->infer(ctx, &node, in_types, out_types);
  free(in_types);
  if (st) loom_error_prefix(ctx, "%s", d->name);
  for (int32_t o = 0; o < n_out && !st; o++)
    if (loom_shape_check(ctx, out_types[o].rank, out_types[o].shape, NULL)) {
      loom_error_prefix(ctx, "%s output", d->name);
      st = LOOM_STATUS_SHAPE_MISMATCH;
    }
  if (st) {
    if (out_types != out_stack) free(out_types);
    return st;
  }
  node.in = loom_malloc(ctx, sizeof(int32_t) * (size_t)(n_in ? n_in : 1));
  node.out = loom_malloc(ctx, sizeof(int32_t) * (size_t)n_out);
  if (!node.in || !node.out ||
      !loom_grow(ctx, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) {
    free(node.in);
    free(node.out);
    if (out_types != out_stack) free(out_types);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  if (n_in) memcpy(node.in, in, sizeof(int32_t) * (size_t)n_in);
  int32_t first = g->n_values;
  for (int32_t o = 0; o < n_out; o++) {
    int32_t v = add_value(g, &out_types[o], LOOM_VALUE_NODE, g->n_nodes, o);
    if (v < 0) {
      g->n_values = first;
      free(node.in);
      free(node.out);
      if (out_types != out_stack) free(out_types);
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
    node.out[o] = v;
    if (out) out[o] = v;
  }
  if (out_types != out_stack) free(out_types);
  g->nodes[g->n_nodes++] = node;
  return LOOM_STATUS_OK;
}

loom_status loom_graph_op_multi(loom_graph *g, loom_op op, int32_t n_inputs,
                                const loom_value *inputs, int32_t n_attrs,
                                const loom_attr *attrs, int32_t n_outputs,
                                loom_value *outputs) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!outputs || n_outputs < 1 || n_outputs > LOOM_MAX_NODE_IO)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_op: bad outputs");
  for (int32_t o = 0; o < n_outputs; o++) outputs[o] = LOOM_VALUE_NONE;
  loom_attr_value av[LOOM_MAX_ATTRS];
  LOOM_TRY(loom_attrs_from_named(g->ctx, op, n_attrs, attrs, av));
  return loom_graph_add(g, op, n_inputs, inputs, av, n_outputs, outputs);
}

loom_status loom_graph_op(loom_graph *g, loom_op op, int32_t n_inputs,
                          const loom_value *inputs, int32_t n_attrs,
                          const loom_attr *attrs, loom_value *out) {
  return loom_graph_op_multi(g, op, n_inputs, inputs, n_attrs, attrs, 1, out);
}

loom_status loom_graph_output(loom_graph *g, const char *name, loom_value v) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!name || !*name)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "an output needs a name");
  if (!loom_value_valid(g, v))
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "output '%s': %d is not a value of this graph", name, v);
  if (loom_strmap_get(&g->output_index, name, strlen(name)) >= 0)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "output name '%s' is already used", name);
  int32_t cap = g->cap_outputs;
  if (!loom_grow(g->ctx, (void **)&g->outputs, &cap, g->n_outputs + 1, sizeof *g->outputs))
    return LOOM_STATUS_OUT_OF_MEMORY;
  cap = g->cap_outputs;
  if (!loom_grow(g->ctx, (void **)&g->output_names, &cap, g->n_outputs + 1,
                 sizeof *g->output_names))
    return LOOM_STATUS_OUT_OF_MEMORY;
  g->cap_outputs = cap;
  char *copy = loom_strdup(g->ctx, name);
  if (!copy || !loom_strmap_put(&g->output_index, name, strlen(name), g->n_outputs)) {
    free(copy);
    return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory adding an output");
  }
  g->outputs[g->n_outputs] = v;
  g->output_names[g->n_outputs++] = copy;
  return LOOM_STATUS_OK;
}

int32_t loom_graph_num_inputs(const loom_graph *g) { return g ? g->n_inputs : 0; }
int32_t loom_graph_num_outputs(const loom_graph *g) { return g ? g->n_outputs : 0; }

loom_value loom_graph_input_value(const loom_graph *g, int32_t i) {
  return g && i >= 0 && i < g->n_inputs ? g->inputs[i] : LOOM_VALUE_NONE;
}

const char *loom_graph_input_name(const loom_graph *g, int32_t i) {
  return g && i >= 0 && i < g->n_inputs ? g->values[g->inputs[i]].name : NULL;
}

bool loom_graph_input_is_param(const loom_graph *g, int32_t i) {
  return g && i >= 0 && i < g->n_inputs &&
         g->values[g->inputs[i]].kind == LOOM_VALUE_PARAM;
}

loom_value loom_graph_output_value(const loom_graph *g, int32_t i) {
  return g && i >= 0 && i < g->n_outputs ? g->outputs[i] : LOOM_VALUE_NONE;
}

const char *loom_graph_output_name(const loom_graph *g, int32_t i) {
  return g && i >= 0 && i < g->n_outputs ? g->output_names[i] : NULL;
}

loom_status loom_graph_value_type(const loom_graph *g, loom_value v,
                                  loom_dtype *dt, int32_t *rank,
                                  int64_t *shape) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!loom_value_valid(g, v))
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT, "no value %d", v);
  const loom_type *t = &g->values[v].type;
  if (dt) *dt = t->dtype;
  if (rank) *rank = t->rank;
  if (shape)
    for (int32_t d = 0; d < t->rank; d++) shape[d] = t->shape[d];
  return LOOM_STATUS_OK;
}

int64_t loom_graph_param_count(const loom_graph *g) {
  int64_t n = 0;
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (g->values[g->inputs[i]].kind == LOOM_VALUE_PARAM)
      n += loom_type_numel(&g->values[g->inputs[i]].type);
  return n;
}

loom_status loom_graph_begin_copy(const loom_graph *src, loom_graph **dst,
                                  int32_t **map) {
  *dst = NULL;
  *map = loom_malloc(src->ctx, sizeof(int32_t) * (size_t)(src->n_values ? src->n_values : 1));
  if (!*map) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < src->n_values; i++) (*map)[i] = -1;
  loom_status st = loom_graph_new(src->ctx, dst);
  for (int32_t i = 0; i < src->n_inputs && !st; i++) {
    const loom_value_info *v = &src->values[src->inputs[i]];
    st = add_input(*dst, v->name, v->type.dtype, v->type.rank, v->type.shape, v->kind,
                   &(*map)[src->inputs[i]]);
  }
  if (st) {
    loom_graph_free(*dst);
    *dst = NULL;
    free(*map);
    *map = NULL;
  }
  return st;
}

loom_status loom_graph_copy_node(loom_graph *dst, const loom_graph *src,
                                 const loom_node *n, int32_t *map) {
  int32_t stack_in[16] = {0}, *in = stack_in;
  if (n->n_in > 16) {
    in = loom_malloc(dst->ctx, sizeof(int32_t) * (size_t)n->n_in);
    if (!in) return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n->n_in; i++) in[i] = map[n->in[i]];
  int32_t out_stack[LOOM_PART_MAX_IO], *out = out_stack;
  if (n->n_out > LOOM_PART_MAX_IO) out = loom_malloc(dst->ctx, sizeof *out * (size_t)n->n_out);
  loom_status st = out ? loom_graph_add(dst, n->op, n->n_in, in, n->attr, n->n_out, out)
                       : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) dst->nodes[dst->n_nodes - 1].copy = n->copy;
  if (in != stack_in) free(in);
  for (int32_t o = 0; o < n->n_out && !st; o++) {
    map[n->out[o]] = out[o];
    const char *name = src->values[n->out[o]].name;
    if (name && loom_graph_find_value(dst, name) < 0) st = loom_value_set_name(dst, out[o], name);
  }
  if (out != out_stack) free(out);
  return st;
}

loom_status loom_graph_finish_copy(loom_graph *dst, const loom_graph *src,
                                   const int32_t *map) {
  for (int32_t i = 0; i < src->n_outputs; i++) {
    int32_t v = map[src->outputs[i]];
    if (v < 0)
      return loom_error(src->ctx, LOOM_STATUS_INTERNAL,
                        "output '%s' was lost by a pass", src->output_names[i]);
    LOOM_TRY(loom_graph_output(dst, src->output_names[i], v));
  }
  return LOOM_STATUS_OK;
}

/*
 * The graph verifier: checks every invariant of ir/graph.h. A failure is a
 * bug in whatever built the graph (usually a pass), so it returns
 * LOOM_STATUS_INTERNAL with a message naming the node or value.
 */
#include "ir/graph.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "%name" or "%12" for messages; buf must hold 64 bytes. */
static const char *vdesc(const loom_graph *g, int32_t v, char *buf) {
  if (!loom_value_valid(g, v)) {
    snprintf(buf, 64, "invalid value %d", v);
  } else if (g->values[v].name) {
    snprintf(buf, 64, "value %d ('%.40s')", v, g->values[v].name);
  } else {
    snprintf(buf, 64, "value %d", v);
  }
  return buf;
}

static loom_status fail(const loom_graph *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static loom_status fail(const loom_graph *g, const char *fmt, ...) {
  char msg[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(g->ctx, LOOM_STATUS_INTERNAL, "verify: %s", msg);
}

static bool type_ok(const loom_type *t) {
  return loom_dtype_valid(t->dtype) &&
         loom_shape_check(NULL, t->rank, t->shape, NULL) == LOOM_STATUS_OK;
}

/* Names must be unique among values, and among outputs: the indices of
 * the first duplicate pair in dup_a, dup_b (-1 if none). */
static loom_status find_duplicate(const loom_graph *g, int32_t n,
                                  char *const *names, int32_t *dup_a,
                                  int32_t *dup_b) {
  *dup_a = *dup_b = -1;
  loom_strmap seen = {0};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n && *dup_a < 0 && !st; i++) {
    if (!names[i]) continue;
    size_t len = strlen(names[i]);
    int32_t first = loom_strmap_get(&seen, names[i], len);
    if (first >= 0) {
      *dup_a = first;
      *dup_b = i;
    } else if (!loom_strmap_put(&seen, names[i], len, i)) {
      st = loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "verify: out of memory");
    }
  }
  loom_strmap_free(&seen);
  return st;
}

static loom_status verify_values(const loom_graph *g) {
  char b[64];
  for (int32_t v = 0; v < g->n_values; v++) {
    const loom_value_info *vi = &g->values[v];
    if (!type_ok(&vi->type)) {
      char t[160];
      return fail(g, "%s has an invalid type %s (dtype %d, rank %d)", vdesc(g, v, b),
                  loom_type_str(&vi->type, t, sizeof t), (int)vi->type.dtype,
                  vi->type.rank);
    }
    if (vi->name && !vi->name[0]) return fail(g, "%s has an empty name", vdesc(g, v, b));
    switch (vi->kind) {
    case LOOM_VALUE_INPUT:
    case LOOM_VALUE_PARAM:
      if (vi->node != -1)
        return fail(g, "%s is an input but names producer node %d", vdesc(g, v, b),
                    vi->node);
      if (!vi->name) return fail(g, "%s is an input without a name", vdesc(g, v, b));
      break;
    case LOOM_VALUE_NODE: {
      if (vi->node < 0 || vi->node >= g->n_nodes)
        return fail(g, "%s names producer node %d, outside [0, %d)", vdesc(g, v, b),
                    vi->node, g->n_nodes);
      const loom_node *n = &g->nodes[vi->node];
      if (vi->index < 0 || vi->index >= n->n_out || !n->out || n->out[vi->index] != v)
        return fail(g, "%s claims to be output %d of node %d, which does not list it",
                    vdesc(g, v, b), vi->index, vi->node);
      break;
    }
    default:
      return fail(g, "%s has an invalid kind %d", vdesc(g, v, b), (int)vi->kind);
    }
  }
  char **names = malloc(sizeof(char *) * (g->n_values > 0 ? (size_t)g->n_values : 1));
  if (!names) return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "verify: out of memory");
  for (int32_t v = 0; v < g->n_values; v++) names[v] = g->values[v].name;
  int32_t a, c;
  loom_status st = find_duplicate(g, g->n_values, names, &a, &c);
  free(names);
  LOOM_TRY(st);
  if (a >= 0)
    return fail(g, "values %d and %d share the name '%.200s'", a, c, g->values[a].name);
  return LOOM_STATUS_OK;
}

static loom_status verify_inputs(const loom_graph *g) {
  char b[64];
  if (g->n_inputs < 0 || (g->n_inputs > 0 && !g->inputs))
    return fail(g, "the input list is broken (%d entries)", g->n_inputs);
  /* listed[v]: how often value v appears in g->inputs. */
  uint8_t *listed = calloc(g->n_values > 0 ? (size_t)g->n_values : 1, 1);
  if (!listed) return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "verify: out of memory");
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < g->n_inputs && !st; i++) {
    int32_t v = g->inputs[i];
    if (!loom_value_valid(g, v))
      st = fail(g, "graph input %d is %s", i, vdesc(g, v, b));
    else if (g->values[v].kind != LOOM_VALUE_INPUT && g->values[v].kind != LOOM_VALUE_PARAM)
      st = fail(g, "graph input %d is %s, produced by node %d, not an input or param", i,
                vdesc(g, v, b), g->values[v].node);
    else if (listed[v]++)
      st = fail(g, "graph input %d (%s) is listed twice", i, vdesc(g, v, b));
  }
  for (int32_t v = 0; v < g->n_values && !st; v++) {
    loom_value_kind k = g->values[v].kind;
    if ((k == LOOM_VALUE_INPUT || k == LOOM_VALUE_PARAM) && !listed[v])
      st = fail(g, "%s is an input but missing from the graph's input list",
                vdesc(g, v, b));
  }
  free(listed);
  return st;
}

static loom_status verify_node(const loom_graph *g, int32_t i) {
  char b[64];
  const loom_node *n = &g->nodes[i];
  const loom_op_def *d = loom_op_get(n->op);
  if (!d) return fail(g, "node %d has an invalid op %d", i, (int)n->op);
  if (n->n_in < d->min_in || (d->max_in >= 0 && n->n_in > d->max_in))
    return fail(g, "node %d (%s) has %d inputs; the op takes %d to %d", i, d->name,
                n->n_in, d->min_in, d->max_in);
  if (!loom_op_out_count_ok(d, n->n_out) || n->n_out < 1 ||
      (d->n_out >= 0 && n->n_out > LOOM_PART_MAX_IO))
    return fail(g, "node %d (%s) has %d outputs; the op has %d%s", i, d->name, n->n_out,
                d->n_out < 0 ? LOOM_MAX_NODE_IO : d->n_out, d->n_out < 0 ? " at most" : "");
  if ((n->n_in > 0 && !n->in) || !n->out)
    return fail(g, "node %d (%s) has no input or output array", i, d->name);
  for (int32_t k = 0; k < n->n_in; k++) {
    int32_t v = n->in[k];
    if (!loom_value_valid(g, v))
      return fail(g, "node %d (%s): input %d is %s (the graph has %d values)", i, d->name,
                  k, vdesc(g, v, b), g->n_values);
    const loom_value_info *vi = &g->values[v];
    if (vi->kind == LOOM_VALUE_NODE && vi->node >= i)
      return fail(g, "node %d (%s): input %d is %s, produced by node %d, which is not "
                  "earlier (topological order)", i, d->name, k, vdesc(g, v, b), vi->node);
  }
  for (int32_t o = 0; o < n->n_out; o++) {
    int32_t v = n->out[o];
    if (!loom_value_valid(g, v))
      return fail(g, "node %d (%s): output %d is %s", i, d->name, o, vdesc(g, v, b));
    const loom_value_info *vi = &g->values[v];
    if (vi->kind != LOOM_VALUE_NODE || vi->node != i || vi->index != o)
      return fail(g, "node %d (%s): output %d is %s, which records node %d output %d", i,
                  d->name, o, vdesc(g, v, b), vi->kind == LOOM_VALUE_NODE ? vi->node : -1,
                  vi->index);
  }
  for (int32_t a = 0; a < d->n_attrs; a++)
    if (d->attrs[a].kind == LOOM_ATTR_INTS &&
        (n->attr[a].ints.n < 0 || n->attr[a].ints.n > LOOM_MAX_RANK))
      return fail(g, "node %d (%s): attribute '%s' has %d integers (0 to %d allowed)", i,
                  d->name, d->attrs[a].name, n->attr[a].ints.n, LOOM_MAX_RANK);

  /* Re-run inference: the stored types must be what the op gives. */
  loom_type *in_types = malloc(sizeof(loom_type) * (n->n_in > 0 ? (size_t)n->n_in : 1));
  if (!in_types) return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "verify: out of memory");
  for (int32_t k = 0; k < n->n_in; k++) in_types[k] = g->values[n->in[k]].type;
  loom_type *out_types = calloc((size_t)LOOM_MAX(n->n_out, LOOM_PART_MAX_IO), sizeof *out_types);
  loom_status st = out_types ? d->infer(g->ctx, n, in_types, out_types) : LOOM_STATUS_OUT_OF_MEMORY;
  free(in_types);
  if (!out_types) return loom_error(g->ctx, st, "verify: out of memory");
  if (st) {
    char why[LOOM_ERROR_MAX];
    snprintf(why, sizeof why, "%s", loom_ctx_error(g->ctx));
    free(out_types);
    return fail(g, "node %d (%s): shape inference rejects its inputs: %s", i, d->name, why);
  }
  for (int32_t o = 0; o < n->n_out; o++) {
    const loom_type *have = &g->values[n->out[o]].type;
    if (!loom_type_equal(have, &out_types[o])) {
      char t1[160], t2[160];
      st = fail(g, "node %d (%s): output %d (%s) is stored as %s but the op gives %s", i,
                d->name, o, vdesc(g, n->out[o], b), loom_type_str(have, t1, sizeof t1),
                loom_type_str(&out_types[o], t2, sizeof t2));
      break;
    }
  }
  free(out_types);
  return st;
}

static loom_status verify_outputs(const loom_graph *g) {
  char b[64];
  if (g->n_outputs < 0 || (g->n_outputs > 0 && (!g->outputs || !g->output_names)))
    return fail(g, "the output list is broken (%d entries)", g->n_outputs);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    if (!g->output_names[i] || !g->output_names[i][0])
      return fail(g, "graph output %d has no name", i);
    if (!loom_value_valid(g, g->outputs[i]))
      return fail(g, "graph output %d ('%.200s') is %s", i, g->output_names[i],
                  vdesc(g, g->outputs[i], b));
  }
  int32_t a, c;
  LOOM_TRY(find_duplicate(g, g->n_outputs, g->output_names, &a, &c));
  if (a >= 0)
    return fail(g, "graph outputs %d and %d share the name '%.200s'", a, c,
                g->output_names[a]);
  return LOOM_STATUS_OK;
}

loom_status loom_graph_verify(const loom_graph *g) {
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  if (g->n_values < 0 || g->n_nodes < 0 || (g->n_values > 0 && !g->values) ||
      (g->n_nodes > 0 && !g->nodes))
    return fail(g, "the graph's arrays are broken (%d values, %d nodes)", g->n_values,
                g->n_nodes);
  LOOM_TRY(verify_values(g));
  LOOM_TRY(verify_inputs(g));
  for (int32_t i = 0; i < g->n_nodes; i++) LOOM_TRY(verify_node(g, i));
  return verify_outputs(g);
}

#include "parallel/plan.h"

#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void placement_free(loom_plan_placement *pl) {
  free(pl->devices);
  memset(pl, 0, sizeof *pl);
}

void loom_plan_free(loom_plan *p) {
  if (!p) return;
  if (p->inputs)
    for (int32_t i = 0; i < p->graph->n_inputs; i++) placement_free(&p->inputs[i]);
  if (p->outputs)
    for (int32_t o = 0; o < p->graph->n_outputs; o++) placement_free(&p->outputs[o]);
  free(p->inputs);
  free(p->outputs);
  free(p->tied);
  free(p->subops);
  free(p->orders);
  free(p->part);
  free(p->ext);
  free(p);
}

/* The node's operand and result types. */
static void node_types(const loom_graph *g, const loom_node *n, loom_type *in, loom_type *out) {
  for (int32_t i = 0; i < n->n_in && i < LOOM_PART_MAX_IO; i++) in[i] = *loom_value_type(g, n->in[i]);
  for (int32_t o = 0; o < n->n_out && o < LOOM_PART_MAX_IO; o++)
    out[o] = *loom_value_type(g, n->out[o]);
}

loom_status loom_plan_new(loom_ctx *ctx, const loom_graph *g, int32_t n_devices,
                          loom_plan **out) {
  if (!out || !g) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: NULL argument");
  *out = NULL;
  if (n_devices < 1 || n_devices > LOOM_PLAN_MAX_DEVICES)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: %d devices is outside [1, %d]",
                      n_devices, LOOM_PLAN_MAX_DEVICES);
  loom_plan *p = loom_calloc(ctx, 1, sizeof *p);
  if (!p) return LOOM_STATUS_OUT_OF_MEMORY;
  p->ctx = ctx;
  p->graph = g;
  p->n_devices = n_devices;
  int32_t nn = g->n_nodes;
  p->cap_subops = nn > 0 ? 2 * nn : 1;
  p->subops = loom_calloc(ctx, (size_t)p->cap_subops, sizeof *p->subops);
  p->part = loom_calloc(ctx, (size_t)(nn ? nn : 1), sizeof *p->part);
  p->ext = loom_calloc(ctx, (size_t)(nn ? nn : 1), sizeof *p->ext);
  p->inputs = loom_calloc(ctx, (size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *p->inputs);
  p->outputs = loom_calloc(ctx, (size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *p->outputs);
  p->tied = loom_malloc(ctx, sizeof *p->tied * (size_t)(g->n_outputs ? g->n_outputs : 1));
  if (!p->subops || !p->part || !p->ext || !p->inputs || !p->outputs || !p->tied) {
    loom_plan_free(p);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t o = 0; o < g->n_outputs; o++) p->tied[o] = -1;
  for (int32_t i = 0; i < nn; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->n_in > LOOM_PART_MAX_IO || n->n_out > LOOM_PART_MAX_IO) {
      loom_plan_free(p);
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "plan: node %d (%s) has more than %d operands", i,
                        loom_op_get(n->op)->name, LOOM_PART_MAX_IO);
    }
    loom_type tin[LOOM_PART_MAX_IO], tout[LOOM_PART_MAX_IO];
    node_types(g, n, tin, tout);
    loom_subop_partition(n, tin, tout, &p->part[i]);
    if (!loom_subop_label_extents(ctx, &p->part[i], tin, tout, p->ext[i])) {
      loom_error_prefix(ctx, "plan: node %d (%s)", i, loom_op_get(n->op)->name);
      loom_plan_free(p);
      return LOOM_STATUS_INTERNAL;
    }
    loom_subop *s = &p->subops[i];
    s->node = i;
    s->parent = -1;
    s->device = -1;
    s->replicas = 1;
    s->first_child = -1;
    loom_subop_ranges_full(&p->part[i], p->ext[i], &s->r);
  }
  p->n_subops = nn;
  *out = p;
  return LOOM_STATUS_OK;
}

static loom_status placement_copy(loom_ctx *ctx, const loom_plan_placement *a,
                                  loom_plan_placement *b) {
  *b = *a;
  b->devices = NULL;
  if (!a->set) return LOOM_STATUS_OK;
  b->devices = loom_malloc(ctx, sizeof *b->devices * (size_t)a->layout.n_pieces);
  if (!b->devices) return LOOM_STATUS_OUT_OF_MEMORY;
  memcpy(b->devices, a->devices, sizeof *b->devices * (size_t)a->layout.n_pieces);
  return LOOM_STATUS_OK;
}

loom_status loom_plan_copy(const loom_plan *p, loom_plan **out) {
  loom_ctx *ctx = p->ctx;
  loom_plan *q = NULL;
  LOOM_TRY(loom_plan_new(ctx, p->graph, p->n_devices, &q));
  loom_status s = LOOM_STATUS_OK;
  if (p->cap_subops > q->cap_subops) {
    loom_subop *ns = loom_realloc(ctx, q->subops, sizeof *ns * (size_t)p->cap_subops);
    if (!ns) s = LOOM_STATUS_OUT_OF_MEMORY;
    else {
      q->subops = ns;
      q->cap_subops = p->cap_subops;
    }
  }
  if (!s) {
    memcpy(q->subops, p->subops, sizeof *q->subops * (size_t)p->n_subops);
    q->n_subops = p->n_subops;
  }
  if (!s && p->n_orders) {
    q->orders = loom_malloc(ctx, sizeof *q->orders * (size_t)p->n_orders);
    if (!q->orders) s = LOOM_STATUS_OUT_OF_MEMORY;
    else {
      memcpy(q->orders, p->orders, sizeof *q->orders * (size_t)p->n_orders);
      q->n_orders = q->cap_orders = p->n_orders;
    }
  }
  for (int32_t i = 0; !s && i < p->graph->n_inputs; i++)
    s = placement_copy(ctx, &p->inputs[i], &q->inputs[i]);
  for (int32_t o = 0; !s && o < p->graph->n_outputs; o++) {
    s = placement_copy(ctx, &p->outputs[o], &q->outputs[o]);
    q->tied[o] = p->tied[o];
  }
  if (s) {
    loom_plan_free(q);
    return s;
  }
  *out = q;
  return LOOM_STATUS_OK;
}

int32_t loom_plan_label(const loom_plan *p, int32_t node, bool is_output, int32_t operand,
                        int32_t dim) {
  const loom_graph *g = p->graph;
  if (node < 0 || node >= g->n_nodes) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: node %d is outside [0, %d)", node,
               g->n_nodes);
    return -1;
  }
  const loom_node *n = &g->nodes[node];
  const char *op = loom_op_get(n->op)->name;
  int32_t count = is_output ? n->n_out : n->n_in;
  if (operand < 0 || operand >= count) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: %s.%d has no %s %d", op, node,
               is_output ? "output" : "input", operand);
    return -1;
  }
  const loom_type *t = loom_value_type(g, is_output ? n->out[operand] : n->in[operand]);
  if (dim < 0 || dim >= t->rank) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: %s %d of %s.%d has no dim %d (rank %d)",
               is_output ? "output" : "input", operand, op, node, dim, t->rank);
    return -1;
  }
  const loom_partition *pa = &p->part[node];
  int32_t l = is_output ? pa->out[operand][dim] : pa->in[operand][dim];
  if (l < 0 || l >= pa->n_labels) {
    char buf[256];
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
               "plan: dim %d of %s %d of %s.%d cannot be split (annotation %s)", dim,
               is_output ? "output" : "input", operand, op, node,
               loom_partition_str(pa, buf, sizeof buf));
    return -1;
  }
  return l;
}

static loom_status check_subop(const loom_plan *p, int32_t s, const char *what) {
  if (s < 0 || s >= p->n_subops)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: %s: sub-op %d is outside [0, %d)",
                      what, s, p->n_subops);
  return LOOM_STATUS_OK;
}

loom_status loom_op_trans(loom_plan *p, int32_t s, loom_algo a, int32_t n, int32_t *first) {
  loom_ctx *ctx = p->ctx;
  char name[96];
  LOOM_TRY(check_subop(p, s, "op_trans"));
  loom_subop_name(p, s, name, sizeof name);
  if (p->subops[s].n_children > 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: op_trans: %s is already cut", name);
  if (n < 1 || n > LOOM_PLAN_MAX_DEVICES)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: op_trans %s: %d parts is outside [1, %d]", name, n,
                      LOOM_PLAN_MAX_DEVICES);
  const loom_subop parent = p->subops[s];
  const loom_partition *pa = &p->part[parent.node];
  int64_t step = 0;
  if (a.kind == LOOM_ALGO_SPLIT) {
    if (a.label < 0 || a.label >= pa->n_labels)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: op_trans %s: label %d is not one of its %d labels", name, a.label,
                        pa->n_labels);
    int64_t span = parent.r.hi[a.label] - parent.r.lo[a.label];
    if (span % n != 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: op_trans %s: label %d spans %lld, which does not split evenly "
                        "into %d parts",
                        name, a.label, (long long)span, n);
    step = span / n;
  } else if (a.kind != LOOM_ALGO_REPLICATE) {
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: op_trans %s: unknown algorithm %d",
                      name, (int)a.kind);
  }
  if (!loom_grow(ctx, (void **)&p->subops, &p->cap_subops, p->n_subops + n, sizeof *p->subops))
    return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t f = p->n_subops;
  for (int32_t i = 0; i < n; i++) {
    loom_subop *c = &p->subops[f + i];
    *c = parent;
    c->parent = s;
    c->index = i;
    c->first_child = -1;
    c->n_children = 0;
    if (a.kind == LOOM_ALGO_SPLIT) {
      c->r.lo[a.label] = parent.r.lo[a.label] + step * i;
      c->r.hi[a.label] = c->r.lo[a.label] + step;
    } else {
      c->replicas = parent.replicas * n;
      c->replica = parent.replica * n + i;
    }
  }
  p->subops[s].first_child = f;
  p->subops[s].n_children = n;
  p->n_subops += n;
  if (first) *first = f;
  return LOOM_STATUS_OK;
}

loom_status loom_op_assign(loom_plan *p, int32_t s, int32_t device) {
  LOOM_TRY(check_subop(p, s, "op_assign"));
  if (device < 0 || device >= p->n_devices) {
    char name[96];
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: op_assign %s: device %d is outside [0, %d)",
                      loom_subop_name(p, s, name, sizeof name), device, p->n_devices);
  }
  loom_subop *sub = &p->subops[s];
  sub->device = device;
  for (int32_t i = 0; i < sub->n_children; i++)
    LOOM_TRY(loom_op_assign(p, sub->first_child + i, device));
  return LOOM_STATUS_OK;
}

loom_status loom_op_order(loom_plan *p, int32_t a, int32_t b) {
  LOOM_TRY(check_subop(p, a, "op_order"));
  LOOM_TRY(check_subop(p, b, "op_order"));
  if (!loom_grow(p->ctx, (void **)&p->orders, &p->cap_orders, p->n_orders + 1, sizeof *p->orders))
    return LOOM_STATUS_OUT_OF_MEMORY;
  /* same device and leaves are checked by the validator: assignments may
   * come after the order */
  p->orders[p->n_orders++] = (loom_plan_order){a, b};
  return LOOM_STATUS_OK;
}

static loom_status set_placement(loom_plan *p, loom_plan_placement *pl, const char *what,
                                 const char *name, const loom_type *t, const loom_vlayout *l,
                                 const int32_t *devices) {
  char b1[96], b2[96];
  if (!l || !devices)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: %s %s: NULL layout", what,
                      name);
  if (!loom_type_equal(&l->type, t))
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: %s %s is %s, the layout is of %s", what, name,
                      loom_type_str(t, b1, sizeof b1), loom_type_str(&l->type, b2, sizeof b2));
  for (int32_t i = 0; i < l->n_pieces; i++)
    if (devices[i] < 0 || devices[i] >= p->n_devices)
      return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: %s %s: piece %d is on device %d, outside [0, %d)", what, name, i,
                        devices[i], p->n_devices);
  int32_t *dv = loom_malloc(p->ctx, sizeof *dv * (size_t)l->n_pieces);
  if (!dv) return LOOM_STATUS_OUT_OF_MEMORY;
  memcpy(dv, devices, sizeof *dv * (size_t)l->n_pieces);
  placement_free(pl);
  pl->set = true;
  pl->layout = *l;
  pl->devices = dv;
  return LOOM_STATUS_OK;
}

loom_status loom_plan_set_input(loom_plan *p, int32_t input, const loom_vlayout *l,
                                const int32_t *devices) {
  const loom_graph *g = p->graph;
  if (input < 0 || input >= g->n_inputs)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: input %d is outside [0, %d)",
                      input, g->n_inputs);
  int32_t v = g->inputs[input];
  return set_placement(p, &p->inputs[input], "input", g->values[v].name, loom_value_type(g, v), l,
                       devices);
}

loom_status loom_plan_set_output(loom_plan *p, int32_t output, const loom_vlayout *l,
                                 const int32_t *devices) {
  const loom_graph *g = p->graph;
  if (output < 0 || output >= g->n_outputs)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: output %d is outside [0, %d)",
                      output, g->n_outputs);
  return set_placement(p, &p->outputs[output], "output", g->output_names[output],
                       loom_value_type(g, g->outputs[output]), l, devices);
}

loom_status loom_plan_tie(loom_plan *p, int32_t output, int32_t input) {
  const loom_graph *g = p->graph;
  if (output < 0 || output >= g->n_outputs || input < 0 || input >= g->n_inputs)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: tie output %d to input %d: outside [0, %d) x [0, %d)", output, input,
                      g->n_outputs, g->n_inputs);
  if (!loom_type_equal(loom_value_type(g, g->outputs[output]), loom_value_type(g, g->inputs[input])))
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: output %s and input %s differ in type, so one cannot update the other",
                      g->output_names[output], g->values[g->inputs[input]].name);
  p->tied[output] = input;
  return LOOM_STATUS_OK;
}

static loom_status collect_leaves(const loom_plan *p, int32_t s, int32_t **out, int32_t *n,
                                  int32_t *cap) {
  const loom_subop *sub = &p->subops[s];
  if (sub->n_children == 0) {
    if (!loom_grow(p->ctx, (void **)out, cap, *n + 1, sizeof **out)) return LOOM_STATUS_OUT_OF_MEMORY;
    (*out)[(*n)++] = s;
    return LOOM_STATUS_OK;
  }
  for (int32_t i = 0; i < sub->n_children; i++)
    LOOM_TRY(collect_leaves(p, sub->first_child + i, out, n, cap));
  return LOOM_STATUS_OK;
}

loom_status loom_plan_leaves(const loom_plan *p, int32_t node, int32_t **out, int32_t *n) {
  *out = NULL;
  *n = 0;
  if (node < 0 || node >= p->graph->n_nodes)
    return loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: node %d is outside [0, %d)",
                      node, p->graph->n_nodes);
  int32_t cap = 0;
  loom_status s = collect_leaves(p, node, out, n, &cap);
  if (s) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return s;
}

const char *loom_subop_name(const loom_plan *p, int32_t s, char *buf, size_t n) {
  if (s < 0 || s >= p->n_subops) {
    snprintf(buf, n, "sub-op %d", s);
    return buf;
  }
  /* the path of indices from the node down */
  int32_t path[64], depth = 0;
  int32_t at = s;
  while (p->subops[at].parent >= 0 && depth < 64) {
    path[depth++] = p->subops[at].index;
    at = p->subops[at].parent;
  }
  const loom_subop *sub = &p->subops[s];
  size_t k = (size_t)snprintf(buf, n, "%s.%d", loom_op_get(p->graph->nodes[sub->node].op)->name,
                              sub->node);
  for (int32_t i = depth - 1; i >= 0 && k < n; i--)
    k += (size_t)snprintf(buf + k, n - k, "#%d", path[i]);
  return buf;
}

int32_t loom_plan_find_subop(const loom_plan *p, const char *name) {
  const char *dot = strrchr(name, '.');
  const char *hash = strchr(name, '#');
  if (hash && dot && dot > hash) dot = NULL;
  if (!dot) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
               "plan: '%s' is not a sub-op name (OP.NODE, then #i per cut)", name);
    return -1;
  }
  char *end = NULL;
  long node = strtol(dot + 1, &end, 10);
  if (end == dot + 1 || node < 0 || node >= p->graph->n_nodes) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: '%s': no node %.*s in the graph",
               name, (int)(end - dot - 1), dot + 1);
    return -1;
  }
  const char *op = loom_op_get(p->graph->nodes[node].op)->name;
  if ((size_t)(dot - name) != strlen(op) || strncmp(name, op, (size_t)(dot - name)) != 0) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: '%s': node %ld is a %s, not a %.*s",
               name, node, op, (int)(dot - name), name);
    return -1;
  }
  int32_t s = (int32_t)node;
  const char *q = end;
  while (*q == '#') {
    long i = strtol(q + 1, &end, 10);
    if (end == q + 1 || i < 0 || i >= p->subops[s].n_children) {
      loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 "plan: '%s': %.*s has %d parts, so no part %.*s", name, (int)(q - name), name,
                 p->subops[s].n_children, (int)(end - q - 1), q + 1);
      return -1;
    }
    s = p->subops[s].first_child + (int32_t)i;
    q = end;
  }
  if (*q) {
    loom_error(p->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: '%s': unexpected '%s'", name, q);
    return -1;
  }
  return s;
}

/*
 * The text IR printer (docs/TEXT_IR.md). Output is deterministic: inputs in
 * declaration order, nodes in graph order, outputs last; unnamed values are
 * numbered %0, %1, ... in order of definition; attributes that differ from
 * the op's defaults (and required ones) in spec order. Everything it needs
 * about an op comes from the op table.
 */
#include "ir/text_ir.h"

#include "core/strbuf.h"
#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name: bare when it is an identifier, else quoted with escapes. */
static void put_name(loom_strbuf *b, const char *name) {
  if (loom_text_is_ident(name)) {
    loom_strbuf_put(b, "%s", name);
    return;
  }
  loom_strbuf_put(b, "\"");
  for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
    if (*s == '"' || *s == '\\')
      loom_strbuf_put(b, "\\%c", *s);
    else if (*s < 0x20 || *s >= 0x7f)
      loom_strbuf_put(b, "\\x%02x", *s);
    else
      loom_strbuf_put(b, "%c", *s);
  }
  loom_strbuf_put(b, "\"");
}

/* num[v] >= 0: the number of unnamed value v. */
static void put_ref(loom_strbuf *b, const loom_graph *g, const int32_t *num, int32_t v) {
  if (!loom_value_valid(g, v)) {
    loom_strbuf_put(b, "%%<invalid %d>", v); /* only for broken graphs; will not parse */
  } else if (g->values[v].name) {
    loom_strbuf_put(b, "%%");
    put_name(b, g->values[v].name);
  } else {
    loom_strbuf_put(b, "%%%d", num[v]);
  }
}

static void put_type(loom_strbuf *b, const loom_type *t) {
  const char *dn = loom_dtype_name(t->dtype);
  if (dn)
    loom_strbuf_put(b, "%s[", dn);
  else
    loom_strbuf_put(b, "<dtype %d>[", (int)t->dtype);
  for (int32_t d = 0; d < t->rank && d < LOOM_MAX_RANK; d++)
    loom_strbuf_put(b, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  loom_strbuf_put(b, "]");
}

/* The shortest %.Ng (N <= 17) that reads back as the same double. */
static void put_double(loom_strbuf *b, double v) {
  if (isnan(v)) {
    loom_strbuf_put(b, "nan");
    return;
  }
  if (isinf(v)) {
    loom_strbuf_put(b, v < 0 ? "-inf" : "inf");
    return;
  }
  char s[40];
  if (v == floor(v) && fabs(v) < 1e15) { /* integral: 100, not 1e+02 */
    loom_strbuf_put(b, "%.0f", v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(s, sizeof s, "%.*g", prec, v);
    if (strtod(s, NULL) == v) break;
  }
  loom_strbuf_put(b, "%s", s);
}

static bool attr_is_default(const loom_attr_spec *s, const loom_attr_value *a) {
  if (s->required) return false;
  switch (s->kind) {
  case LOOM_ATTR_INT: return a->i == s->def_i;
  case LOOM_ATTR_FLOAT: return memcmp(&a->f, &s->def_f, sizeof a->f) == 0;
  case LOOM_ATTR_INTS: return a->ints.n == 0;
  }
  return false;
}

static void put_attr(loom_strbuf *b, const loom_attr_spec *s, const loom_attr_value *a) {
  loom_strbuf_put(b, "%s=", s->name);
  if (s->kind == LOOM_ATTR_FLOAT) {
    put_double(b, a->f);
  } else if (s->kind == LOOM_ATTR_INTS) {
    loom_strbuf_put(b, "[");
    for (int32_t k = 0; k < a->ints.n && k < LOOM_MAX_RANK; k++)
      loom_strbuf_put(b, k ? ", %lld" : "%lld", (long long)a->ints.v[k]);
    loom_strbuf_put(b, "]");
  } else if (s->fmt == LOOM_ATTR_FMT_BOOL && (a->i == 0 || a->i == 1)) {
    loom_strbuf_put(b, "%s", a->i ? "true" : "false");
  } else if (s->fmt == LOOM_ATTR_FMT_DTYPE && a->i >= 0 && a->i < LOOM_DTYPE_COUNT) {
    loom_strbuf_put(b, "%s", loom_dtype_name((loom_dtype)a->i));
  } else {
    loom_strbuf_put(b, "%lld", (long long)a->i);
  }
}

static void put_node(loom_strbuf *b, const loom_graph *g, const int32_t *num, const loom_node *n) {
  const loom_op_def *d = loom_op_get(n->op);
  for (int32_t o = 0; n->out && o < n->n_out; o++) {
    int32_t v = n->out[o];
    if (o) loom_strbuf_put(b, ", ");
    put_ref(b, g, num, v);
    if (loom_value_valid(g, v)) {
      loom_strbuf_put(b, " : ");
      put_type(b, &g->values[v].type);
    }
  }
  if (d)
    loom_strbuf_put(b, " = %s(", d->name);
  else
    loom_strbuf_put(b, " = <op %d>(", (int)n->op);
  for (int32_t i = 0; n->in && i < n->n_in; i++) {
    if (i) loom_strbuf_put(b, ", ");
    put_ref(b, g, num, n->in[i]);
  }
  bool first = n->n_in == 0;
  for (int32_t a = 0; d && a < d->n_attrs; a++) {
    if (attr_is_default(&d->attrs[a], &n->attr[a])) continue;
    if (!first) loom_strbuf_put(b, ", ");
    first = false;
    put_attr(b, &d->attrs[a], &n->attr[a]);
  }
  /* the recomputation mark (loom_node.copy): after the op's own attributes */
  if (n->copy) loom_strbuf_put(b, "%scopy=%d", first ? "" : ", ", (int)n->copy);
  loom_strbuf_put(b, ")\n");
}

loom_status loom_graph_print(const loom_graph *g, char **out) {
  if (out) *out = NULL;
  if (!g || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_strbuf b = {0};
  int32_t *num = malloc(sizeof(int32_t) * (size_t)(g->n_values > 0 ? g->n_values : 1));
  if (!num) return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "graph_print: out of memory");
  /* Number the unnamed values in order of definition: inputs, then nodes. */
  int32_t next_num = 0;
  for (int32_t v = 0; v < g->n_values; v++) num[v] = -1;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    if (loom_value_valid(g, v) && !g->values[v].name && num[v] < 0) num[v] = next_num++;
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t o = 0; g->nodes[i].out && o < g->nodes[i].n_out; o++) {
      int32_t v = g->nodes[i].out[o];
      if (loom_value_valid(g, v) && !g->values[v].name && num[v] < 0) num[v] = next_num++;
    }
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    bool param = loom_value_valid(g, v) && g->values[v].kind == LOOM_VALUE_PARAM;
    loom_strbuf_put(&b, "%s ", param ? "param" : "input");
    put_ref(&b, g, num, v);
    if (loom_value_valid(g, v)) {
      loom_strbuf_put(&b, " : ");
      put_type(&b, &g->values[v].type);
    }
    loom_strbuf_put(&b, "\n");
  }
  for (int32_t i = 0; i < g->n_nodes; i++) put_node(&b, g, num, &g->nodes[i]);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    loom_strbuf_put(&b, "output ");
    put_name(&b, g->output_names[i] ? g->output_names[i] : "");
    loom_strbuf_put(&b, " = ");
    put_ref(&b, g, num, g->outputs[i]);
    loom_strbuf_put(&b, "\n");
  }
  free(num);
  *out = loom_strbuf_take(&b);
  if (!*out) return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "graph_print: out of memory");
  return LOOM_STATUS_OK;
}

/*
 * loom show (a graph: its text, op counts, values, inputs, and the
 * primitive ops it decomposes into) and loom ops (the op table).
 */
#include "loom.h"

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/text_ir.h"
#include "ops/op.h"

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_show[] =
    "usage: loom show FILE\n"
    "\n"
    "Prints the graph in FILE as text IR, the op counts, every value's\n"
    "type, the inputs and parameter count, and the primitive op counts\n"
    "after composite ops are decomposed.\n"
    "\n"
    "  -h, --help           print this help\n";

static const char usage_ops[] =
    "usage: loom ops\n"
    "\n"
    "Prints every op of the op table as a Markdown table: class, input\n"
    "count, output count, attributes with their defaults, and whether it\n"
    "has a gradient rule.\n"
    "\n"
    "  -h, --help           print this help\n";

/* "f32[4, 8]" of a graph value. */
static const char *value_type_str(const loom_graph *g, loom_value v, char *buf, size_t n) {
  return loom_type_str(loom_value_type(g, v), buf, n);
}

/* "%name", or "%N" numbered as the text IR printer numbers unnamed values
 * (num[v], in order of definition), so the two listings agree. */
static void print_value_ref(const loom_graph *g, const int32_t *num, int32_t v) {
  const char *name = g->values[v].name;
  if (!name)
    printf("%%%d", num[v]);
  else if (loom_text_is_ident(name))
    printf("%%%s", name);
  else
    printf("%%\"%s\"", loom_cli_shown(name));
}

/* The printer's numbering: unnamed inputs first, then node outputs. */
static void number_unnamed(const loom_graph *g, int32_t *num) {
  int32_t next = 0;
  for (int32_t v = 0; v < g->n_values; v++)
    num[v] = -1;
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].name) num[g->inputs[i]] = next++;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t o = 0; o < g->nodes[i].n_out; o++) {
      int32_t v = g->nodes[i].out[o];
      if (!g->values[v].name && num[v] < 0) num[v] = next++;
    }
}

/* ---- loom show ---------------------------------------------------------------- */

static void print_op_counts(const loom_graph *g, const char *title) {
  int32_t counts[LOOM_OP_COUNT] = {0};
  for (int32_t i = 0; i < g->n_nodes; i++)
    if ((unsigned)g->nodes[i].op < LOOM_OP_COUNT) counts[g->nodes[i].op]++;
  printf("%s (%d nodes):\n", title, g->n_nodes);
  for (int op = 0; op < LOOM_OP_COUNT; op++)
    if (counts[op]) printf("  %-14s %d\n", loom_op_name((loom_op)op), counts[op]);
}

int loom_cli_show_main(int argc, char **argv) {
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (loom_cli_is_help(argv[i])) {
      fputs(usage_show, stdout);
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1] != '\0')
      return loom_cli_usage_error("loom", usage_show, "unknown flag '%s' for 'show'", argv[i]);
    if (file) return loom_cli_usage_error("loom", usage_show, "unexpected argument '%s'", argv[i]);
    file = argv[i];
  }
  if (!file) return loom_cli_usage_error("loom", usage_show, "show needs a FILE");

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  loom_graph *g = NULL, *dg = NULL;
  char *text = NULL;
  int32_t *num = NULL;
  int rc = 0;
  if (loom_graph_load(ctx, file, &g) != LOOM_STATUS_OK ||
      loom_graph_print(g, &text) != LOOM_STATUS_OK) {
    rc = loom_cli_fail("loom", ctx);
    goto done;
  }
  fputs(text, stdout);
  if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
  putchar('\n');

  print_op_counts(g, "ops");

  char buf[160];
  num = malloc(sizeof *num * (size_t)(g->n_values + 1));
  if (!num) {
    fprintf(stderr, "loom: out of memory\n");
    rc = 1;
    goto done;
  }
  number_unnamed(g, num);
  printf("\nvalues (%d):\n", g->n_values);
  for (int32_t v = 0; v < g->n_values; v++) {
    printf("  ");
    print_value_ref(g, num, v);
    const char *kind = g->values[v].kind == LOOM_VALUE_INPUT   ? "input"
                       : g->values[v].kind == LOOM_VALUE_PARAM ? "param"
                                                               : "";
    printf(" : %s%s%s\n", value_type_str(g, v, buf, sizeof buf), kind[0] ? "  " : "", kind);
  }

  int32_t n_in = loom_graph_num_inputs(g), n_params = 0;
  for (int32_t i = 0; i < n_in; i++)
    n_params += loom_graph_input_is_param(g, i);
  printf("\ninputs: %d data, %d params; parameter elements: %lld\n", n_in - n_params, n_params,
         (long long)loom_graph_param_count(g));
  printf("outputs:");
  for (int32_t i = 0; i < loom_graph_num_outputs(g); i++)
    printf(" %s", loom_cli_shown(loom_graph_output_name(g, i)));
  printf("\n\n");

  if (loom_graph_decompose(g, &dg) != LOOM_STATUS_OK) {
    rc = loom_cli_fail("loom", ctx);
    goto done;
  }
  print_op_counts(dg, "after decompose: primitive ops");

done:
  free(num);
  loom_free(text);
  loom_graph_free(dg);
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return rc;
}

/* ---- loom ops ---------------------------------------------------------------- */

static const char *class_name(loom_op_class c) {
  switch (c) {
  case LOOM_OPCLASS_ELEMENTWISE: return "element-wise";
  case LOOM_OPCLASS_REDUCE: return "reduction";
  case LOOM_OPCLASS_LAYOUT: return "layout";
  case LOOM_OPCLASS_INDEX: return "index";
  case LOOM_OPCLASS_SOURCE: return "source";
  case LOOM_OPCLASS_GEMM: return "gemm";
  case LOOM_OPCLASS_RNG: return "rng";
  case LOOM_OPCLASS_ATTENTION: return "attention";
  case LOOM_OPCLASS_COMPOSITE: return "composite";
  case LOOM_OPCLASS_COMM: return "comm";
  case LOOM_OPCLASS_WINDOW: return "window";
  }
  return "?";
}

static void print_attr_default(const loom_attr_spec *a) {
  printf("`%s`", a->name);
  if (a->required) {
    printf(" (required)");
  } else if (a->kind == LOOM_ATTR_FLOAT) {
    printf(" = %g", a->def_f);
  } else if (a->kind == LOOM_ATTR_INTS) {
    printf(" = []");
  } else if (a->fmt == LOOM_ATTR_FMT_BOOL) {
    printf(" = %s", a->def_i ? "true" : "false");
  } else if (a->fmt == LOOM_ATTR_FMT_DTYPE && loom_dtype_name((loom_dtype)a->def_i)) {
    printf(" = %s", loom_dtype_name((loom_dtype)a->def_i));
  } else {
    printf(" = %lld", (long long)a->def_i);
  }
}

int loom_cli_ops_main(int argc, char **argv) {
  if (argc > 1) {
    if (loom_cli_is_help(argv[1])) {
      fputs(usage_ops, stdout);
      return 0;
    }
    return loom_cli_usage_error("loom", usage_ops, "unexpected argument '%s'", argv[1]);
  }
  printf("| op | class | inputs | outputs | attributes (default) | gradient |\n");
  printf("|---|---|---|---|---|---|\n");
  /* Grouped by class, in list order within one: the op list itself is
   * append-only (loom.h), so its order is history, not a grouping. */
  loom_op order[LOOM_OP_COUNT];
  int n_ops = 0;
  for (int cls = 0; cls <= LOOM_OPCLASS_WINDOW; cls++) /* the last class */
    for (int op = 0; op < LOOM_OP_COUNT; op++)
      if (loom_op_get((loom_op)op) && (int)loom_op_get((loom_op)op)->cls == cls)
        order[n_ops++] = (loom_op)op;
  for (int i = 0; i < n_ops; i++) {
    const loom_op_def *d = loom_op_get(order[i]);
    printf("| `%s` | %s | ", d->name, class_name(d->cls));
    /* The notation of docs/TEXT_IR.md: "2", "1-3", "1+". */
    if (d->max_in < 0)
      printf("%d+", d->min_in);
    else if (d->max_in != d->min_in)
      printf("%d-%d", d->min_in, d->max_in);
    else
      printf("%d", d->min_in);
    if (d->n_out < 0)
      printf(" | 1+ | "); /* variadic: a comm op's global form */
    else
      printf(" | %d | ", d->n_out);
    for (int32_t a = 0; a < d->n_attrs; a++) {
      if (a) printf(", ");
      print_attr_default(&d->attrs[a]);
    }
    if (d->n_attrs == 0) printf("—");
    const char *grad = d->cls == LOOM_OPCLASS_COMPOSITE ? d->grad ? "own rule" : "via decomposition"
                       : d->grad                        ? "yes"
                                                        : "—";
    printf(" | %s |\n", grad);
  }
  return 0;
}

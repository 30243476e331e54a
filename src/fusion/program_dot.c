/*
 * A fused program as a Graphviz picture (`loom compile --dot`): one
 * cluster per step of the program, coloured by kind: a generated kernel,
 * a GEMM with the epilogue kernel that rides on it, an eager node. Edges
 * between values that live only inside a kernel (registers or tile
 * scratch: what fusion saved) are dashed. Dead nodes are left out.
 */
#include "fusion/fusion.h"

#include "core/strbuf.h"
#include "ops/op.h"

#include <stdlib.h>

/* Fill and border of each kind of cluster, and of graph inputs. */
static const char *const KERNEL_FILL = "#dbe9f6", *const KERNEL_LINE = "#3b6ea8";
static const char *const GEMM_FILL = "#fde3c8", *const GEMM_LINE = "#c0661a";
static const char *const EAGER_FILL = "#ececec", *const EAGER_LINE = "#707070";
static const char *const PARAM_FILL = "#dff2d8", *const INPUT_FILL = "#fff7cc";

static void put_value_name(loom_strbuf *b, const loom_graph *g, int32_t v) {
  if (g->values[v].name)
    loom_strbuf_put_dot_label(b, g->values[v].name);
  else
    loom_strbuf_put(b, "v%d", v);
}

static void put_node(loom_strbuf *b, const loom_graph *g, int32_t n, const char *style) {
  const loom_node *nd = &g->nodes[n];
  char tb[128] = "";
  if (nd->n_out > 0) loom_type_str(loom_value_type(g, nd->out[0]), tb, sizeof tb);
  loom_strbuf_put(b, "    n%d [label=\"%s\\n", n, loom_op_name(nd->op));
  loom_strbuf_put_dot_label(b, tb);
  loom_strbuf_put(b, "\"%s];\n", style);
}

static void open_cluster(loom_strbuf *b, int32_t step, const char *fill, const char *line) {
  loom_strbuf_put(b,
                  "  subgraph cluster_%d {\n    style=\"filled,rounded\"; fillcolor=\"%s\"; "
                  "color=\"%s\";\n    label=\"",
                  step, fill, line);
}

static void put_bytes(loom_strbuf *b, double by) {
  if (by >= 1e6)
    loom_strbuf_put(b, "%.3g MB", by / 1e6);
  else if (by >= 1e3)
    loom_strbuf_put(b, "%.3g kB", by / 1e3);
  else
    loom_strbuf_put(b, "%.0f B", by);
}

static void put_seconds(loom_strbuf *b, double s) {
  if (s >= 1e-3)
    loom_strbuf_put(b, "%.3g ms", s * 1e3);
  else
    loom_strbuf_put(b, "%.3g us", s * 1e6);
}

/* A kernel's nodes (and the producers it recomputes), inside an open
 * cluster whose label the caller has begun. */
static void put_kernel_body(loom_strbuf *b, const loom_graph *g, const loom_program *p, int32_t k) {
  const loom_kernel *kn = &p->kernels[k];
  loom_strbuf_put(b, "%s: %d op%s", kn->name, kn->n_nodes, kn->n_nodes == 1 ? "" : "s");
  if (p->kernel_bytes && p->kernel_seconds) {
    loom_strbuf_put(b, ", ");
    put_bytes(b, (double)p->kernel_bytes[k]);
    loom_strbuf_put(b, ", ");
    put_seconds(b, p->kernel_seconds[k]);
  }
  loom_strbuf_put(b, "\";\n");
  for (int32_t i = 0; i < kn->n_nodes; i++)
    if (kn->nodes[i] >= 0 && kn->nodes[i] < g->n_nodes) put_node(b, g, kn->nodes[i], "");
  for (int32_t d = 0; d < p->n_dups; d++)
    if (p->dup_kernel[d] == k && p->dup_node[d] >= 0 && p->dup_node[d] < g->n_nodes)
      loom_strbuf_put(b, "    d%d_%d [label=\"%s\\n(recomputed)\", style=dashed];\n", k,
                      p->dup_node[d], loom_op_name(g->nodes[p->dup_node[d]].op));
}

loom_status loom_program_dot(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                             char **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "program_dot: out is NULL");
  *out = NULL;
  if (!g || !p) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "program_dot: NULL argument");
  /* which nodes run: only their edges are drawn */
  bool *shown = calloc((size_t)g->n_nodes + 1, sizeof *shown);
  if (!shown) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "program_dot: out of memory");
  loom_strbuf b = {0};
  loom_strbuf_put(&b,
                  "digraph program {\n  rankdir=TB; newrank=true;\n  label=\"fusion %s: %d "
                  "kernels, %d steps, modeled ",
                  loom_fusion_mode_name(p->mode), p->n_kernels, p->n_steps);
  put_bytes(&b, (double)p->modeled_bytes);
  loom_strbuf_put(&b, ", ");
  put_seconds(&b, p->modeled_seconds);
  loom_strbuf_put(&b, "\"; labelloc=t;\n  node [shape=box, style=\"rounded,filled\", "
                      "fillcolor=white, fontsize=10];\n");
  for (int32_t s = 0; s < p->n_steps; s++) {
    const loom_step *st = &p->steps[s];
    bool kernel_ok = st->kernel >= 0 && st->kernel < p->n_kernels;
    if (st->kind == LOOM_STEP_KERNEL) {
      if (!kernel_ok) continue;
      open_cluster(&b, s, KERNEL_FILL, KERNEL_LINE);
      loom_strbuf_put(&b, "step %d: kernel ", s);
      put_kernel_body(&b, g, p, st->kernel);
      const loom_kernel *kn = &p->kernels[st->kernel];
      for (int32_t i = 0; i < kn->n_nodes; i++)
        if (kn->nodes[i] >= 0 && kn->nodes[i] < g->n_nodes) shown[kn->nodes[i]] = true;
    } else {
      if (st->node < 0 || st->node >= g->n_nodes) continue;
      bool gemm = st->kind == LOOM_STEP_GEMM;
      open_cluster(&b, s, gemm ? GEMM_FILL : EAGER_FILL, gemm ? GEMM_LINE : EAGER_LINE);
      bool epilogue = gemm && st->epilogue_rows > 0 && kernel_ok;
      if (epilogue) {
        loom_strbuf_put(&b, "step %d: gemm + epilogue on %lld-row blocks, ", s,
                        (long long)st->epilogue_rows);
        put_kernel_body(&b, g, p, st->kernel);
        const loom_kernel *kn = &p->kernels[st->kernel];
        for (int32_t i = 0; i < kn->n_nodes; i++)
          if (kn->nodes[i] >= 0 && kn->nodes[i] < g->n_nodes) shown[kn->nodes[i]] = true;
      } else {
        const char *what = gemm                                       ? "gemm"
                           : g->nodes[st->node].op == LOOM_OP_RESHAPE ? "alias"
                                                                      : "eager";
        loom_strbuf_put(&b, "step %d: %s\";\n", s, what);
      }
      put_node(&b, g, st->node, gemm ? ", penwidth=2" : "");
      shown[st->node] = true;
    }
    loom_strbuf_put(&b, "  }\n");
  }
  /* inputs and params, and the graph's outputs */
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    loom_strbuf_put(&b, "  v%d [shape=note, fillcolor=\"%s\", label=\"", v,
                    g->values[v].kind == LOOM_VALUE_PARAM ? PARAM_FILL : INPUT_FILL);
    put_value_name(&b, g, v);
    char tb[128];
    loom_strbuf_put(&b, "\\n");
    loom_strbuf_put_dot_label(&b, loom_type_str(&g->values[v].type, tb, sizeof tb));
    loom_strbuf_put(&b, "\"];\n");
  }
  for (int32_t n = 0; n < g->n_nodes; n++) {
    if (!shown[n]) continue;
    const loom_node *nd = &g->nodes[n];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t v = nd->in[k];
      if (!loom_value_valid(g, v)) continue;
      int32_t src = g->values[v].node;
      bool kept = p->materialized && v < p->n_values && !p->materialized[v];
      const char *style = kept ? " [style=dashed, color=\"#3b6ea8\"]" : "";
      if (src < 0)
        loom_strbuf_put(&b, "  v%d -> n%d%s;\n", v, n, style);
      else if (shown[src])
        loom_strbuf_put(&b, "  n%d -> n%d%s;\n", src, n, style);
    }
  }
  for (int32_t o = 0; o < g->n_outputs; o++) {
    int32_t v = g->outputs[o];
    if (!loom_value_valid(g, v)) continue;
    int32_t src = g->values[v].node;
    loom_strbuf_put(&b, "  out%d [shape=plaintext, style=\"\", label=\"", o);
    loom_strbuf_put_dot_label(&b, g->output_names[o]);
    if (src >= 0)
      loom_strbuf_put(&b, "\"];\n  n%d -> out%d;\n", src, o);
    else
      loom_strbuf_put(&b, "\"];\n  v%d -> out%d;\n", v, o);
  }
  loom_strbuf_put(&b, "}\n");
  free(shown);
  *out = loom_strbuf_take(&b);
  if (!*out) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "program_dot: out of memory");
  return LOOM_STATUS_OK;
}

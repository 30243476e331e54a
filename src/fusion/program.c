/*
 * Programs: release, and the readable listing behind
 * `loom compile --dump-after fuse`.
 */
#include "fusion/fusion.h"

#include "core/strbuf.h"
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_program_clear(loom_program *p) {
  if (!p) return;
  for (int32_t i = 0; i < p->n_kernels; i++)
    loom_kernel_clear(&p->kernels[i]);
  free(p->kernels);
  free(p->steps);
  free(p->materialized);
  free(p->kernel_bytes);
  free(p->kernel_seconds);
  free(p->kernel_memory_excess);
  free(p->dup_kernel);
  free(p->dup_node);
  memset(p, 0, sizeof *p);
}

static void put_value(loom_strbuf *b, const loom_graph *g, int32_t v) {
  if (!loom_value_valid(g, v))
    loom_strbuf_put(b, "%%?");
  else if (g->values[v].name)
    loom_strbuf_put(b, "%%%s", g->values[v].name);
  else
    loom_strbuf_put(b, "%%v%d", v);
}

/* "%out = op(%a, %b) f32[4, 8]" for node n. */
static void put_node(loom_strbuf *b, const loom_graph *g, int32_t n) {
  const loom_node *nd = &g->nodes[n];
  for (int32_t o = 0; o < nd->n_out; o++) {
    if (o) loom_strbuf_put(b, ", ");
    put_value(b, g, nd->out[o]);
  }
  loom_strbuf_put(b, " = %s(", loom_op_name(nd->op));
  for (int32_t i = 0; i < nd->n_in; i++) {
    if (i) loom_strbuf_put(b, ", ");
    put_value(b, g, nd->in[i]);
  }
  char tb[128];
  loom_strbuf_put(b, ") %s", nd->n_out > 0 ? loom_type_str(loom_value_type(g, nd->out[0]), tb, sizeof tb) : "");
}

static void put_kernel(loom_strbuf *b, const loom_graph *g, const loom_program *p, int32_t ki) {
  const loom_kernel *k = &p->kernels[ki];
  loom_strbuf_put(b, "kernel %s: %d node%s, %d part%s", k->name, k->n_nodes, k->n_nodes == 1 ? "" : "s",
      k->n_parts, k->n_parts == 1 ? "" : "s");
  if (p->kernel_bytes && p->kernel_seconds) {
    double by = (double)p->kernel_bytes[ki], t = p->kernel_seconds[ki];
    loom_strbuf_put(b, ", modeled %.4g %s %.4g %s",
        by >= 1e6   ? by / 1e6
        : by >= 1e3 ? by / 1e3
                    : by,
        by >= 1e6   ? "MB"
        : by >= 1e3 ? "kB"
                    : "B",
        t >= 1e-3 ? t * 1e3 : t * 1e6, t >= 1e-3 ? "ms" : "us");
  }
  loom_strbuf_put(b, "; args");
  for (int32_t a = 0; a < k->n_args; a++) {
    loom_strbuf_put(b, " %s", k->args[a].is_output ? "out:" : "");
    put_value(b, g, k->args[a].value);
  }
  loom_strbuf_put(b, "\n");
  for (int32_t i = 0; i < k->n_parts; i++) {
    const loom_kpart *pt = &k->parts[i];
    loom_strbuf_put(b,
        "  part %d: rows %lld x row %lld, %d stage%s, %d scratch, %d regs, "
        "rows_per_tile %lld, vector %d\n",
        i, (long long)loom_kpart_rows(pt), (long long)loom_kpart_row_len(pt), pt->n_stages,
        pt->n_stages == 1 ? "" : "s", pt->n_scratch, pt->n_regs, (long long)pt->sched.rows_per_tile,
        pt->sched.vector_width);
  }
  for (int32_t i = 0; i < k->n_nodes; i++) {
    int32_t n = k->nodes[i];
    if (n < 0 || n >= g->n_nodes) continue;
    loom_strbuf_put(b, "    ");
    put_node(b, g, n);
    /* Values that stay inside the kernel are what fusion saved. */
    const loom_node *nd = &g->nodes[n];
    bool kept = nd->n_out > 0 && p->materialized && nd->out[0] < p->n_values &&
                !p->materialized[nd->out[0]];
    loom_strbuf_put(b, "%s\n", kept ? "  [in kernel]" : "");
  }
}

loom_status loom_program_print(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                               char **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "program_print: out is NULL");
  *out = NULL;
  if (!g || !p)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "program_print: NULL argument");
  loom_strbuf b = {0};
  int32_t n_gemm = 0, n_node = 0, n_run = 0, n_epi = 0;
  for (int32_t s = 0; s < p->n_steps; s++) {
    if (p->steps[s].kind == LOOM_STEP_GEMM) n_gemm++;
    if (p->steps[s].kind == LOOM_STEP_GEMM && p->steps[s].epilogue_rows > 0) n_epi++;
    if (p->steps[s].kind == LOOM_STEP_NODE) n_node++;
    if (p->steps[s].kind != LOOM_STEP_KERNEL) n_run++;
    bool has_kernel = p->steps[s].kind == LOOM_STEP_KERNEL || p->steps[s].epilogue_rows > 0;
    if (has_kernel && p->steps[s].kernel >= 0 && p->steps[s].kernel < p->n_kernels)
      n_run += p->kernels[p->steps[s].kernel].n_nodes;
  }
  loom_strbuf_put(&b,
      "# fusion %s: %d memory-intensive ops in %d kernels (%d of them gemm epilogues), %d gemm, "
      "%d eager, %d dead; modeled %lld bytes, %.3g s\n",
      loom_fusion_mode_name(p->mode), p->n_memory_ops, p->n_kernels, n_epi, n_gemm, n_node,
      g->n_nodes - n_run, (long long)p->modeled_bytes, p->modeled_seconds);
  for (int32_t s = 0; s < p->n_steps; s++) {
    const loom_step *st = &p->steps[s];
    loom_strbuf_put(&b, "step %d: ", s);
    if (st->kind == LOOM_STEP_KERNEL && st->kernel >= 0 && st->kernel < p->n_kernels) {
      put_kernel(&b, g, p, st->kernel);
    } else if (st->node >= 0 && st->node < g->n_nodes) {
      /* a reshape run alone is an alias of its input's memory */
      const char *what = st->kind == LOOM_STEP_GEMM                 ? "gemm"
                         : g->nodes[st->node].op == LOOM_OP_RESHAPE ? "alias"
                                                                    : "eager";
      loom_strbuf_put(&b, "%s ", what);
      put_node(&b, g, st->node);
      loom_strbuf_put(&b, "\n");
      if (st->kind == LOOM_STEP_GEMM && st->epilogue_rows > 0 && st->kernel >= 0 &&
          st->kernel < p->n_kernels) {
        loom_strbuf_put(&b, "  epilogue on blocks of %lld rows: ", (long long)st->epilogue_rows);
        put_kernel(&b, g, p, st->kernel);
      }
    } else {
      loom_strbuf_put(&b, "<invalid step>\n");
    }
  }
  *out = loom_strbuf_take(&b);
  if (!*out) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "program_print: out of memory");
  return LOOM_STATUS_OK;
}

loom_status loom_program_describe(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                                  const char *const *sources, int n_sources,
                                  loom_session_artifact what, const char *backend, char **text) {
  *text = NULL;
  if (what == LOOM_ARTIFACT_PROGRAM) return loom_program_print(ctx, g, p, text);
  if (what == LOOM_ARTIFACT_DOT) return loom_program_dot(ctx, g, p, text);
  loom_strbuf b = {0};
  if (what == LOOM_ARTIFACT_SOURCE) {
    for (int i = 0; i < n_sources; i++)
      if (sources[i]) loom_strbuf_put(&b, "%s", sources[i]);
  } else if (what == LOOM_ARTIFACT_KERNELS) {
    for (int32_t k = 0; k < p->n_kernels; k++) {
      char *kt = NULL;
      loom_status st = loom_kernel_print(ctx, &p->kernels[k], &kt);
      if (st) {
        free(loom_strbuf_take(&b));
        return st;
      }
      size_t n = strlen(kt);
      loom_strbuf_put(&b, "%s%s", kt, n && kt[n - 1] != '\n' ? "\n" : "");
      free(kt);
    }
  } else {
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "%s backend: nothing to describe as %d",
                      backend, (int)what);
  }
  *text = loom_strbuf_take(&b);
  return *text ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

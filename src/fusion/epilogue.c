/*
 * GEMM epilogues: a kernel that reads a GEMM's product C row by row (bias,
 * activation, residual, a LayerNorm over the rows) can run inside the GEMM,
 * on each block of whole rows of C right after the block is computed, while
 * it is still in the computing core's cache. Its read of C then costs no
 * memory traffic. The kernel is unchanged: it runs through its rows entry
 * (kernel.h), so the epilogue is produced by the general mechanism like
 * every other kernel.
 *
 * Cost model (docs/FUSION.md, "GEMM epilogues"): a block of R rows must
 * stay in the core's L2 between the GEMM writing it and the epilogue
 * reading it, with what the epilogue writes per row:
 *   R * (4 N + out_bytes_per_row) <= L2 / 2,
 * and R >= 16, below which the single-threaded sgemm of a block runs
 * thin panels (and re-streams B for every block) and loses more than the
 * re-read of C saves. R is capped at 256 and so that the GEMM still has
 * two blocks per core; a block ends on a row of the kernel (whose rows
 * lowering may have cut to another length), or R is all of a short M. When the
 * kernel qualifies and R exists, fusing removes the kernel's read of C,
 * 4 * rows * N bytes, at the cost of nothing the model counts: it is fused.
 */
#include "fusion/fusion.h"

#include "ir/dtype.h"

#include <stdlib.h>
#include <string.h>

/* True if every load of argument `arg` reads C in order, row_len
 * elements per kernel row: map(p, r) = row_len * flat(p) + flat(r), with
 * flat row-major indices. (Lowering may cut an element-wise domain into
 * rows of its own length, which need not be C's.) */
static bool loads_in_order(const loom_kernel *k, int32_t arg, int64_t row_len) {
  const loom_kpart *part = &k->parts[0];
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    if (x->kind != LOOM_KX_LOAD || x->arg != arg) continue;
    if (x->map.base != 0) return false;
    int64_t stride = 1;
    for (int32_t j = part->r_rank - 1; j >= 0; j--) {
      if (part->r_shape[j] != 1 && x->map.r[j] != stride) return false;
      stride *= part->r_shape[j];
    }
    if (stride != row_len) return false;
    for (int32_t i = part->p_rank - 1; i >= 0; i--) {
      if (part->p_shape[i] != 1 && x->map.p[i] != stride) return false;
      stride *= part->p_shape[i];
    }
  }
  return true;
}

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

/* Rows per block for a GEMM producing `rows` rows of n_cols (per batch
 * element: m) feeding kernel k, whose rows are row_len long; 0 if the
 * epilogue does not pay. A block must end on a kernel row: R n_cols is a
 * multiple of row_len. */
static int64_t block_rows(const loom_machine *mc, const loom_kernel *k, int64_t m, int64_t rows,
                          int64_t n_cols, int64_t row_len) {
  if ((m * n_cols) % row_len != 0) return 0; /* batch elements end on kernel rows */
  int64_t unit = row_len / gcd(n_cols, row_len); /* R is a multiple of unit, */
  unit *= (16 + unit - 1) / unit;                /* and at least 16 */
  int64_t out_bytes = 0;
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].is_output)
      out_bytes += k->args[a].numel * (int64_t)loom_dtype_size(k->args[a].dtype);
  int64_t per_row = 4 * n_cols + out_bytes / rows;
  int64_t fit = mc->l2_bytes / 2 / per_row; /* rows that stay in the cache */
  int64_t spread = LOOM_MAX(16, rows / (2 * (int64_t)LOOM_MAX(mc->cores, 1)));
  int64_t cap = LOOM_MIN(LOOM_MIN(fit, spread), 256);
  if (m <= cap) return m; /* a block per batch element */
  return cap / unit * unit;
}

/* The epilogue kernel for GEMM step s, or -1: the first kernel step after
 * it that reads its product and qualifies. */
static int32_t find_epilogue(const loom_graph *g, const loom_machine *mc, const loom_program *p,
                             const int32_t *made_at, int32_t s, int64_t *rows_out) {
  const loom_node *n = &g->nodes[p->steps[s].node];
  int32_t c = n->out[0];
  const loom_type *ct = loom_value_type(g, c);
  if (ct->dtype != LOOM_DTYPE_F32 || ct->rank < 2) return -1;
  int64_t n_cols = ct->shape[ct->rank - 1], m = ct->shape[ct->rank - 2];
  int64_t rows = n_cols > 0 ? loom_type_numel(ct) / n_cols : 0;
  if (rows <= 0) return -1;
  /* a convolution's unit is an image (its blocks of channels end on rows
   * the epilogue's blocks align to: cpu_conv.c) */
  if (n->op != LOOM_OP_MATMUL) m = ct->shape[0] > 0 ? rows / ct->shape[0] : 0;
  if (m <= 0) return -1;
  for (int32_t t = s + 1; t < p->n_steps; t++) {
    if (p->steps[t].kind != LOOM_STEP_KERNEL) continue;
    const loom_kernel *k = &p->kernels[p->steps[t].kernel];
    int32_t arg = -1;
    for (int32_t a = 0; a < k->n_args; a++)
      if (!k->args[a].is_output && k->args[a].value == c) arg = a;
    if (arg < 0) continue;
    if (!loom_kernel_has_rows_entry(k)) continue;
    const loom_kpart *part = &k->parts[0];
    int64_t row_len = loom_kpart_row_len(part);
    if (row_len <= 0 || loom_kpart_rows(part) * row_len != rows * n_cols) continue;
    if (!loads_in_order(k, arg, row_len)) continue;
    bool ok = true;
    if (p->mode == LOOM_FUSION_LOOP) { /* element-wise epilogues only */
      ok = part->n_scratch == 0;
      for (int32_t st = 0; st < part->n_stages; st++)
        for (int32_t o = 0; o < part->stages[st].n_out; o++)
          ok = ok && part->stages[st].out[o].dst != LOOM_KDST_ROW_REDUCE;
    }
    /* it moves up to the GEMM (past other readers of C, which is harmless):
     * everything else it reads must exist by then */
    for (int32_t a = 0; a < k->n_args && ok; a++)
      ok = k->args[a].is_output || a == arg || made_at[k->args[a].value] < s;
    int64_t r = ok ? block_rows(mc, k, m, rows, n_cols, row_len) : 0;
    if (r <= 0) continue;
    *rows_out = r;
    return t;
  }
  return -1;
}

loom_status loom_fusion_attach_epilogues(loom_ctx *ctx, const loom_graph *g, const loom_machine *m,
                                         loom_program *p) {
  if (p->mode == LOOM_FUSION_NONE || p->n_kernels == 0) return LOOM_STATUS_OK;
  /* made_at[v]: the step that produces v; -1 for graph inputs */
  int32_t *made_at = malloc(sizeof *made_at * (size_t)(g->n_values ? g->n_values : 1));
  if (!made_at) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion: out of memory");
  for (int32_t v = 0; v < g->n_values; v++) made_at[v] = -1;
  for (int32_t s = 0; s < p->n_steps; s++) {
    const loom_step *st = &p->steps[s];
    if (st->kind == LOOM_STEP_KERNEL) {
      const loom_kernel *k = &p->kernels[st->kernel];
      for (int32_t a = 0; a < k->n_args; a++)
        if (k->args[a].is_output) made_at[k->args[a].value] = s;
    } else {
      const loom_node *n = &g->nodes[st->node];
      for (int32_t o = 0; o < n->n_out; o++) made_at[n->out[o]] = s;
    }
  }
  for (int32_t s = 0; s < p->n_steps; s++) {
    loom_step *st = &p->steps[s];
    if (st->kind != LOOM_STEP_GEMM || st->epilogue_rows > 0) continue;
    int64_t rows = 0;
    int32_t t = find_epilogue(g, m, p, made_at, s, &rows);
    if (t < 0) continue;
    int32_t ki = p->steps[t].kernel;
    st->kernel = ki;
    st->epilogue_rows = rows;
    /* the kernel's step goes; what it makes is now made at s */
    memmove(&p->steps[t], &p->steps[t + 1], sizeof *p->steps * (size_t)(p->n_steps - t - 1));
    p->n_steps--;
    const loom_kernel *k = &p->kernels[ki];
    for (int32_t v = 0; v < g->n_values; v++)
      if (made_at[v] > t) made_at[v]--;
    for (int32_t a = 0; a < k->n_args; a++)
      if (k->args[a].is_output) made_at[k->args[a].value] = s;
    /* the model: the kernel's read of C now hits the cache */
    const loom_type *ct = loom_value_type(g, g->nodes[st->node].out[0]);
    int64_t saved = 4 * loom_type_numel(ct);
    double secs = m->triad_gbps > 0 ? (double)saved / (m->triad_gbps * 1e9) : 0.0;
    if (p->kernel_bytes) p->kernel_bytes[ki] -= saved;
    if (p->kernel_seconds) {
      secs = LOOM_MIN(secs, p->kernel_seconds[ki]);
      p->kernel_seconds[ki] -= secs;
    }
    p->modeled_bytes -= saved;
    p->modeled_seconds -= secs;
  }
  free(made_at);
  return LOOM_STATUS_OK;
}

/* Node steps the backend runs with an epilogue of its own (a convolution
 * whose kernel computes blocks of whole output rows, cpu_conv.c) take one
 * by the same rule: marked as GEMM steps for the search, then restored. */
loom_status loom_fusion_attach_node_epilogues(loom_ctx *ctx, const loom_graph *g,
                                              const loom_machine *m, loom_program *p,
                                              const bool *producer) {
  for (int32_t s = 0; s < p->n_steps; s++)
    if (p->steps[s].kind == LOOM_STEP_NODE && producer[p->steps[s].node])
      p->steps[s].kind = LOOM_STEP_GEMM;
  loom_status st = loom_fusion_attach_epilogues(ctx, g, m, p);
  for (int32_t s = 0; s < p->n_steps; s++)
    if (p->steps[s].kind == LOOM_STEP_GEMM && producer[p->steps[s].node])
      p->steps[s].kind = LOOM_STEP_NODE;
  return st;
}

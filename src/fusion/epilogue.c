/*
 * GEMM epilogues: a kernel that reads a GEMM's product C row by row (bias,
 * activation, residual, a LayerNorm over the rows) can run inside the GEMM,
 * on each block of whole rows of C right after the block is computed, while
 * it is still in the computing core's cache. Its read of C then costs no
 * memory traffic. The kernel is unchanged: it runs through its rows entry
 * (kernel.h), so the epilogue is produced by the general mechanism like
 * every other kernel.
 *
 * Cost model (docs/FUSION.md, "GEMM epilogues"): an epilogue must never
 * make its GEMM slower than what it saves. Fused, the GEMM runs in blocks
 * of R whole rows of C, at the rate the machine measured for such blocks
 * (machine.h, gemm_rows_eff: thin blocks re-pack B and run short panels),
 * in waves over the cores; the kernel loses its launch, and its read of C
 * (4 * rows * N bytes) when a block stays in the core's L2 with what the
 * epilogue writes, R * (4 N + out_bytes_per_row) <= L2 / 2. Unfused, the
 * GEMM runs on its own tiles at the sgemm rate. Per GEMM the block size
 * with the largest gain is taken (16 .. 256 rows or all of M); with no
 * gain the kernel stays a separate step. An element-wise epilogue thus
 * gets large blocks (near the full rate, C read from the LLC) unless the
 * L2 saving pays for thin ones. An epilogue whose traffic over the whole
 * product outgrows the LLC (its blocks not in L2) also pays for B (one
 * that would stay in the LLC) read from memory again by every block,
 * since it evicts it.
 */
#include "fusion/fusion.h"

#include "fusion/cost.h"
#include "ir/dtype.h"
#include "ops/op.h"

#include <math.h>
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

/* What fusing a kernel into a GEMM would cost and save. */
typedef struct epi_choice {
  int64_t rows;   /* rows per block */
  double gain_s;  /* modeled seconds saved (> 0: fuse) */
  double saved_s; /* of the kernel's: its launch and, if in cache, its read of C */
  bool in_cache;  /* a block stays in L2: the kernel reads C from there */
} epi_choice;

/* The block size with the largest modeled gain for a GEMM (node) producing
 * `rows` rows of n_cols (per batch element: m) feeding kernel k, whose
 * rows are row_len long, whose modeled time is kernel_s and whose traffic
 * takes `excess` seconds longer than its compute. A block must
 * end on a kernel row (R n_cols a multiple of row_len). Candidates: 16,
 * 32, .., 256 rows (rounded down to the alignment) and all of m. */
static epi_choice choose_rows(const loom_machine *mc, const loom_graph *g, int32_t node,
                              const loom_kernel *k, double kernel_s, double excess, int64_t m,
                              int64_t rows, int64_t n_cols, int64_t row_len) {
  epi_choice best = {0};
  if ((m * n_cols) % row_len != 0) return best; /* batch elements end on kernel rows */
  int64_t unit = row_len / gcd(n_cols, row_len);  /* R is a multiple of unit */
  int64_t out_bytes = 0;
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].is_output)
      out_bytes += k->args[a].numel * (int64_t)loom_dtype_size(k->args[a].dtype);
  int64_t per_row = 4 * n_cols + out_bytes / rows;
  int64_t batch = rows / m;
  int64_t kdim = loom_cost_gemm_depth(g, node);
  double flops = 2.0 * (double)rows * (double)n_cols * (double)kdim;
  int64_t b_bytes = 4 * kdim * n_cols; /* one batch element's B */
  double bw = (mc->triad_gbps > 0 ? mc->triad_gbps : 10.0) * 1e9;
  double io_s = (double)loom_cost_node_bytes(g, node) / bw;
  double plain_s = loom_cost_gemm(mc, g, node);
  int64_t cand[LOOM_GEMM_ROWS_POINTS + 1];
  int32_t n_cand = 0;
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) {
    int64_t r = ((int64_t)LOOM_GEMM_ROWS_MIN << i) / unit * unit;
    if (r > 0 && r < m) cand[n_cand++] = r;
  }
  cand[n_cand++] = m;
  for (int32_t i = 0; i < n_cand; i++) {
    int64_t r = cand[i];
    /* the kernel's read of C hits the cache only when a block stays in
     * the computing core's L2 (with what the epilogue writes); bytes not
     * read save time only where the kernel waits on memory rather than
     * computes (a GELU's tanh, a LayerNorm's passes: its excess) */
    double saved = mc->kernel_launch_s;
    bool in_cache = r * per_row <= mc->l2_bytes / 2;
    if (in_cache) saved += LOOM_MIN((double)(4 * rows * n_cols) / bw, excess);
    saved = LOOM_MIN(saved, kernel_s);
    int64_t tasks = batch * ((m + r - 1) / r);
    double gemm_s =
        mc->kernel_launch_s + fmax(loom_cost_gemm_blocked(mc, flops, tasks, r, b_bytes), io_s);
    /* an epilogue streaming more than the LLC holds over the product (its
     * blocks not in L2) evicts a B that would stay there between blocks:
     * each block reads B from memory again (sqrelu_mlp's backward: 96 MB
     * through a 32 MB LLC beside a 4 MB B ran 0-70 ms slower fused:
     * docs/PERFORMANCE.md, fifteenth session) */
    if (!in_cache && 2 * b_bytes <= mc->llc_bytes &&
        (double)rows * (double)per_row > (double)mc->llc_bytes)
      gemm_s += (double)tasks * (double)b_bytes / bw;
    double gain = plain_s + saved - gemm_s;
    /* candidates grow: on a tie, the larger block (fewer sgemm calls) */
    if (gain > 0 && gain >= best.gain_s * (1 - 1e-9)) best = (epi_choice){r, gain, saved, in_cache};
  }
  return best;
}

/* The epilogue kernel for GEMM step s, or -1: the first kernel step after
 * it that reads its product, qualifies and pays (*choice says how). */
static int32_t find_epilogue(const loom_graph *g, const loom_machine *mc, const loom_program *p,
                             const int32_t *made_at, int32_t s, epi_choice *choice) {
  const loom_node *n = &g->nodes[p->steps[s].node];
  int32_t c = n->out[0];
  const loom_type *ct = loom_value_type(g, c);
  if (ct->dtype != LOOM_DTYPE_F32 || ct->rank < 2) return -1;
  int64_t n_cols = ct->shape[ct->rank - 1], m = ct->shape[ct->rank - 2];
  int64_t rows = n_cols > 0 ? loom_type_numel(ct) / n_cols : 0;
  if (rows <= 0) return -1;
  /* a convolution's unit is an image (its blocks of channels end on rows
   * the epilogue's blocks align to: cpu_conv_forward.c) */
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
    if (!ok) continue;
    int32_t ki = p->steps[t].kernel;
    double kernel_s = p->kernel_seconds ? p->kernel_seconds[ki] : 0.0;
    /* without the split (a program made elsewhere), as before: all of it */
    double excess = p->kernel_memory_excess ? p->kernel_memory_excess[ki] : kernel_s;
    *choice = choose_rows(mc, g, p->steps[s].node, k, kernel_s, excess, m, rows, n_cols, row_len);
    if (choice->gain_s > 0) return t;
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
    epi_choice choice = {0};
    int32_t t = find_epilogue(g, m, p, made_at, s, &choice);
    if (t < 0) continue;
    int32_t ki = p->steps[t].kernel;
    st->kernel = ki;
    st->epilogue_rows = choice.rows;
    /* the kernel's step goes; what it makes is now made at s */
    memmove(&p->steps[t], &p->steps[t + 1], sizeof *p->steps * (size_t)(p->n_steps - t - 1));
    p->n_steps--;
    const loom_kernel *k = &p->kernels[ki];
    for (int32_t v = 0; v < g->n_values; v++)
      if (made_at[v] > t) made_at[v]--;
    for (int32_t a = 0; a < k->n_args; a++)
      if (k->args[a].is_output) made_at[k->args[a].value] = s;
    /* the model: the kernel loses its launch (and its read of C, when a
     * block stays in cache); the GEMM runs at its blocks' rate */
    const loom_type *ct = loom_value_type(g, g->nodes[st->node].out[0]);
    int64_t saved = choice.in_cache ? 4 * loom_type_numel(ct) : 0;
    if (p->kernel_bytes) p->kernel_bytes[ki] -= saved;
    if (p->kernel_seconds) p->kernel_seconds[ki] -= choice.saved_s;
    if (p->kernel_memory_excess)
      p->kernel_memory_excess[ki] =
          fmax(0.0, p->kernel_memory_excess[ki] - (choice.saved_s - m->kernel_launch_s));
    p->modeled_bytes -= saved;
    p->modeled_seconds -= choice.gain_s;
  }
  free(made_at);
  return LOOM_STATUS_OK;
}

/* Node steps the backend runs with an epilogue of its own (a convolution
 * whose kernel computes blocks of whole output rows, cpu_conv_forward.c) take one
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

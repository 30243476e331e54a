/*
 * Kernel IR -> C (c_codegen.h). The semantics are kernel.h's, reproduced
 * bit for bit (the interpreter, kernel/interp.c, is the oracle):
 *
 * - every expression is a C local of its dtype's type, computed in double
 *   and rounded once, or in float where that gives the same bits;
 * - a part is a static function running one tile; the kernel function runs
 *   the tiles of each phase in one `omp for` (schedule(static)), then the
 *   phase's column-reduction combines, inside one parallel region (a phase
 *   of several parts, a horizontal fusion, splits the parts' concatenated
 *   elements evenly instead: emit_phase_split); a
 *   kernel whose rows are independent also gets NAME_rows, which runs any
 *   range of rows on the calling thread (a GEMM's epilogue, kernel.h);
 * - a ROW stage is a loop nest over the part's R dims, adjacent dims merged
 *   where every map allows, so the innermost loop is usually one unit-stride
 *   loop over the whole row. With row reductions it runs in blocks of W
 *   elements with W explicit lane accumulators (lane l takes flat r = l mod
 *   W), which gcc vectorises; a tail loop finishes the row;
 * - f32 exp, tanh, sigmoid, log and erf are Loom's own (kernel/kmath.h,
 *   shared with the interpreter); erf of a double operand into an f32
 *   result goes through a vectorisable double version checked against
 *   libm; dropout masks along a row share one Philox block per four
 *   elements. The last two run chunk by chunk before the stage's
 *   loop, into stack buffers (emit_chunked); rows are prefetched in the
 *   loop and large outputs are written with streaming stores (c_stage.c).
 *
 * Files: c_prelude.c (the lm_* helpers and the fast paths), c_expr.c
 * (ops, conversions, maps, one expression), c_stage.c (a stage's loops),
 * this file (part analysis, tile functions, kernels); c_internal.h holds
 * what they share.
 */
#include "codegen/c_codegen.h"
#include "codegen/c_internal.h"

#include "ir/dtype.h"
#include "kernel/in_place.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-part analysis --------------------------------------------------- */

/* Calls fn for every map the part evaluates. */
static void part_maps(const cg_part *cp, void (*fn)(void *, const loom_kmap *), void *u) {
  const loom_kernel *k = cp->k;
  memset(cp->reach, 0, (size_t)k->n_exprs + 1);
  for (int32_t s = 0; s < cp->part->n_stages; s++)
    for (int32_t o = 0; o < cp->part->stages[s].n_out; o++) {
      const loom_kout *ko = &cp->part->stages[s].out[o];
      loom_cg_mark_reach(k, ko->expr, cp->reach);
      if (ko->dst == LOOM_KDST_STORE || ko->dst == LOOM_KDST_COL_REDUCE) fn(u, &ko->map);
    }
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (cp->reach[e] && (k->exprs[e].kind == LOOM_KX_LOAD || k->exprs[e].kind == LOOM_KX_INDEX))
      fn(u, &k->exprs[e].map);
}

typedef struct merge_check {
  const loom_kpart *part;
  int32_t prev, j;
  bool ok;
} merge_check;

static void check_merge(void *u, const loom_kmap *m) {
  merge_check *mc = u;
  if (m->r[mc->prev] != m->r[mc->j] * mc->part->r_shape[mc->j]) mc->ok = false;
}

static void check_pflat(void *u, const loom_kmap *m) {
  cg_part *cp = u;
  int64_t s;
  if (!loom_cg_p_flat(m, cp->part, &s)) cp->need_pidx = true;
}

void loom_cg_analyze_part(cg_part *cp) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  cg_loops *lp = &cp->loops;
  lp->n = 0;
  int32_t prev = -1;
  for (int32_t j = 0; j < part->r_rank; j++) {
    if (part->r_shape[j] == 1) continue;
    merge_check mc = {part, prev, j, prev >= 0};
    if (mc.ok) part_maps(cp, check_merge, &mc);
    if (mc.ok) {
      lp->extent[lp->n - 1] *= part->r_shape[j];
    } else {
      lp->extent[lp->n] = part->r_shape[j];
      lp->n++;
    }
    lp->dim[lp->n - 1] = j;
    prev = j;
  }
  cp->need_pidx = false;
  part_maps(cp, check_pflat, cp);
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    uint8_t lv = 0;
    if (x->kind == LOOM_KX_LOAD || x->kind == LOOM_KX_INDEX) {
      for (int32_t j = 0; j < part->r_rank && j < LOOM_MAX_RANK; j++)
        if (x->map.r[j] != 0 && part->r_shape[j] != 1) lv = 1;
      if (x->kind == LOOM_KX_LOAD && x->n_a == 1 && cp->level[x->a[0]]) lv = 1; /* its guard */
    } else if (x->kind == LOOM_KX_SCRATCH) {
      lv = 1;
    } else if (x->kind == LOOM_KX_OP || x->kind == LOOM_KX_KEEP) {
      for (int32_t a = 0; a < x->n_a && a < 3; a++)
        if (x->a[a] >= 0 && x->a[a] < e && cp->level[x->a[a]]) lv = 1;
    }
    cp->level[e] = lv;
  }
  for (int32_t r = 0; r < part->n_regs; r++) cp->reg_dt[r] = LOOM_DTYPE_F32;
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *ko = &part->stages[s].out[o];
      if (ko->dst == LOOM_KDST_REG && ko->target >= 0 && ko->target < part->n_regs)
        cp->reg_dt[ko->target] = k->exprs[ko->expr].dtype;
    }
}

/* ---- parts and kernels ------------------------------------------------------ */

/* Index (kernel order) of the first COL_REDUCE of stage s of part pi. */
int32_t loom_cg_col_index(const loom_kernel *k, int32_t pi, int32_t s) {
  int32_t c = 0;
  for (int32_t q = 0; q <= pi; q++)
    for (int32_t t = 0; t < k->parts[q].n_stages && (q < pi || t < s); t++)
      for (int32_t o = 0; o < k->parts[q].stages[t].n_out; o++)
        c += k->parts[q].stages[t].out[o].dst == LOOM_KDST_COL_REDUCE;
  return c;
}

static const char *dst_name(loom_kdst_kind d) { return loom_kdst_kind_name(d); }

/* A comment listing a part's stages. */
static void part_comment(cg_buf *b, const cg_part *cp) {
  const loom_kpart *part = cp->part;
  put(b, "/* %s part %d (phase %d): P [", cp->k->name, cp->index, part->phase);
  for (int32_t i = 0; i < part->p_rank; i++) put(b, "%s%lld", i ? ", " : "", (long long)part->p_shape[i]);
  put(b, "] x R [");
  for (int32_t j = 0; j < part->r_rank; j++) put(b, "%s%lld", j ? ", " : "", (long long)part->r_shape[j]);
  put(b, "], %lld rows per tile, %d lanes", (long long)part->sched.rows_per_tile,
      part->sched.vector_width);
  for (int32_t s = 0; s < part->n_stages; s++) {
    const loom_kstage *st = &part->stages[s];
    put(b, "\n *   stage %d (%s):", s, st->kind == LOOM_KSTAGE_ROW ? "row" : "scalar");
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      put(b, " %s", dst_name(ko->dst));
      if (ko->dst == LOOM_KDST_ROW_REDUCE || ko->dst == LOOM_KDST_COL_REDUCE)
        put(b, ".%s", loom_op_name(ko->combine));
      put(b, " %s%d <- e%d%s", ko->dst == LOOM_KDST_SCRATCH ? "s"
                               : ko->dst == LOOM_KDST_REG || ko->dst == LOOM_KDST_ROW_REDUCE ? "reg"
                                                                                             : "a",
          ko->target, ko->expr, o + 1 < st->n_out ? ";" : "");
    }
  }
  put(b, " */\n");
}

/* Which arguments part pi touches: 2 written (STORE), 1 read; 0 not. */
static void part_args(const loom_kernel *k, int32_t pi, uint8_t *need, uint8_t *used) {
  const loom_kpart *part = &k->parts[pi];
  memset(need, 0, (size_t)k->n_exprs + 1);
  memset(used, 0, (size_t)k->n_args + 1);
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *ko = &part->stages[s].out[o];
      loom_cg_mark_reach(k, ko->expr, need);
      if (ko->dst == LOOM_KDST_STORE) used[ko->target] = 2;
    }
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (need[e] && k->exprs[e].kind == LOOM_KX_LOAD && !used[k->exprs[e].arg])
      used[k->exprs[e].arg] = 1;
}

/* The call of part pi's function for tile `tile` over rows [row_begin,
 * row_end) (C expressions): its arguments as typed pointers (temps: into
 * the workspace). */
static void put_part_call(cg_buf *b, const loom_kernel *k, const loom_kworkspace *ws, int32_t pi,
                          const uint8_t *used, const char *tile, const char *row_begin,
                          const char *row_end) {
  put(b, "%s_part%d(%s, %s, %s, ws, scratch", k->name, pi, tile, row_begin, row_end);
  for (int32_t a = 0; a < k->n_args; a++) {
    if (!used[a]) continue;
    if (k->args[a].temp)
      put(b, ", (%s *)(ws + %lld)", loom_cg_ctype(k->args[a].dtype), (long long)ws->temp[a]);
    else
      put(b, ", args[%d]", a);
  }
  put(b, ")");
}

/* How many leading stages of a part run once per call instead of once
 * per row: SCALAR stages that only set registers from values that do not
 * depend on the row (constants, and loads whose map ignores the row, and
 * ops of those). AdamW's bias corrections 1 - beta^step are such a stage:
 * two double pows per row, a cost the size of the row's own work on a
 * bias of a few hundred elements. */
static int32_t row_invariant_stages(const cg_part *cp) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  uint8_t *inv = calloc((size_t)k->n_exprs + 1, 1);
  if (!inv) return 0; /* only an optimisation */
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    /* a SCALAR stage has r = 0: a map there depends on p alone */
    bool ok = x->kind == LOOM_KX_CONST || x->kind == LOOM_KX_OP || x->kind == LOOM_KX_LOAD ||
              x->kind == LOOM_KX_INDEX;
    if (x->kind == LOOM_KX_LOAD || x->kind == LOOM_KX_INDEX)
      for (int32_t i = 0; ok && i < part->p_rank; i++)
        ok = x->map.p[i] == 0 || part->p_shape[i] == 1;
    for (int32_t i = 0; ok && i < x->n_a; i++) ok = inv[x->a[i]];
    inv[e] = ok;
  }
  int32_t n = 0;
  for (; n < part->n_stages; n++) {
    const loom_kstage *st = &part->stages[n];
    bool ok = st->kind == LOOM_KSTAGE_SCALAR;
    for (int32_t o = 0; ok && o < st->n_out; o++)
      ok = st->out[o].dst == LOOM_KDST_REG && inv[st->out[o].expr];
    if (!ok) break;
  }
  /* a register a later stage writes again must be set anew each row */
  for (int32_t s = n; s < part->n_stages && n > 0; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *ko = &part->stages[s].out[o];
      if (ko->dst != LOOM_KDST_REG && ko->dst != LOOM_KDST_ROW_REDUCE) continue;
      for (int32_t h = 0; h < n; h++)
        for (int32_t q = 0; q < part->stages[h].n_out; q++)
          if (part->stages[h].out[q].target == ko->target) n = 0;
    }
  free(inv);
  return n;
}

int32_t loom_cg_tied_args(const loom_kernel *k, uint8_t *tied) {
  int32_t *from = malloc(sizeof(int32_t) * (size_t)(k->n_args + 1)), n = 0;
  memset(tied, !from, (size_t)k->n_args); /* no room to ask: none is restrict */
  for (int32_t a = 0; from && a < k->n_args; a++) {
    if (!k->args[a].is_output) continue;
    int32_t m = loom_kernel_in_place_inputs(k, a, from, k->n_args);
    for (int32_t c = 0; c < m; c++) tied[from[c]] = 1;
    if (m > 0) tied[a] = 1;
  }
  for (int32_t a = 0; a < k->n_args; a++) n += tied[a];
  free(from);
  return n;
}

/* The function of a part: rows [row_begin, row_end), which are tile
 * `tile` (its column partials) or, through NAME_rows, any range of a part
 * without column reductions. Arguments come in as restrict parameters:
 * gcc disambiguates those, where restrict locals loaded from args[] would
 * leave it one run-time alias check per pair, and no vectorisation past
 * ten pairs. Arguments that a run may tie (an output computed in an
 * input's memory: loom_cg_tied_args) are plain pointers instead, and the
 * stages that use them carry LM_IVDEP (c_stage.c). */
static loom_status emit_part(loom_ctx *ctx, cg_buf *b, cg_part *cp, const loom_kworkspace *ws,
                             uint8_t *need, uint8_t *used) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  part_comment(b, cp);
  part_args(k, cp->index, need, used);
  bool guarded = false; /* a guarded load: see LM_GUARDED in the prelude */
  for (int32_t e = 0; e < k->n_exprs; e++)
    guarded |= k->exprs[e].kind == LOOM_KX_LOAD && k->exprs[e].n_a == 1;
  put(b,
      "static %svoid %s_part%d(int64_t tile, int64_t row_begin, int64_t row_end, char *restrict ws,"
      " float *restrict scratch",
      guarded ? "LM_GUARDED " : "", k->name, cp->index);
  for (int32_t a = 0; a < k->n_args; a++)
    if (used[a])
      put(b, ",\n    %s%s *%sa%d", used[a] == 2 ? "" : "const ", loom_cg_ctype(k->args[a].dtype),
          cp->tied && cp->tied[a] ? "" : "restrict ", a);
  put(b, ") {\n");
  b->indent++;
  line(b, "(void)tile; (void)ws; (void)scratch;");
  for (int32_t a = 0; a < k->n_args; a++)
    if (used[a])
      line(b, "/* a%d: %s v%d%s%s */", a, used[a] == 2 ? "writes" : "reads", k->args[a].value,
           k->args[a].temp ? " (a temp in the workspace)" : "",
           cp->tied && cp->tied[a] ? " (may share memory: not restrict)" : "");
  /* scratch rows and column partials */
  int64_t stride = loom_kpart_scratch_stride(part);
  for (int32_t s = 0; s < part->n_scratch; s++)
    line(b, "float *restrict s%d = scratch + %lld;", s, (long long)(s * stride));
  int32_t col = loom_cg_col_index(k, cp->index, 0);
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *ko = &part->stages[s].out[o];
      if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
      int64_t n = k->args[ko->target].numel;
      line(b, "double *restrict pc%d = (double *)(ws + %lld) + tile * %lld; /* partial of a%d */",
           col, (long long)ws->partial[col], (long long)n, ko->target);
      line(b, "for (int64_t e = 0; e < %lld; e++) pc%d[e] = %s;", (long long)n, col,
           loom_cg_ident(ko->combine, true));
      col++;
    }
  int32_t once = row_invariant_stages(cp);
  if (once > 0) {
    for (int32_t r = 0; r < part->n_regs; r++) line(b, "%s reg%d;", loom_cg_ctype(cp->reg_dt[r]), r);
    line(b, "if (row_begin < row_end) { /* row-invariant: once per call */");
    b->indent++;
    for (int32_t s = 0; s < once; s++)
      LOOM_TRY(loom_cg_emit_stage(ctx, b, cp, s, need, loom_cg_col_index(k, cp->index, s)));
    b->indent--;
    line(b, "}");
  }
  bool blocks = once == 0 && loom_cg_row_block(cp) > 1; /* short rows: c_stage.c */
  if (blocks) LOOM_TRY(loom_cg_emit_row_blocks(ctx, b, cp, need));
  line(b, "for (int64_t row = %s; row < row_end; row++) {", blocks ? "row0" : "row_begin");
  b->indent++;
  loom_cg_emit_row_pidx(b, cp);
  if (once == 0)
    for (int32_t r = 0; r < part->n_regs; r++) line(b, "%s reg%d;", loom_cg_ctype(cp->reg_dt[r]), r);
  for (int32_t s = once; s < part->n_stages; s++)
    LOOM_TRY(loom_cg_emit_stage(ctx, b, cp, s, need, loom_cg_col_index(k, cp->index, s)));
  b->indent--;
  line(b, "}");
  b->indent--;
  line(b, "}\n");
  return LOOM_STATUS_OK;
}

/* The phase's column-reduction combines, inside the parallel region. */
static void emit_combines(cg_buf *b, const loom_kernel *k, const loom_kworkspace *ws,
                          int32_t phase) {
  int32_t col = 0;
  for (int32_t pi = 0; pi < k->n_parts; pi++) {
    const loom_kpart *part = &k->parts[pi];
    for (int32_t s = 0; s < part->n_stages; s++)
      for (int32_t o = 0; o < part->stages[s].n_out; o++) {
        const loom_kout *ko = &part->stages[s].out[o];
        if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
        int32_t c = col++;
        if (part->phase != phase) continue;
        const loom_karg *g = &k->args[ko->target];
        int64_t n = g->numel, tiles = loom_kpart_tiles(part);
        if (n <= 0) continue;
        line(b, "{ /* a%d = column reduction %d (%s) over %lld tile partials, in tile order */",
             ko->target, c, loom_op_name(ko->combine), (long long)tiles);
        b->indent++;
        if (g->temp)
          line(b, "%s *restrict dst = (%s *)(ws + %lld);", loom_cg_ctype(g->dtype),
               loom_cg_ctype(g->dtype), (long long)ws->temp[ko->target]);
        else
          line(b, "%s *restrict dst = (%s *)args[%d];", loom_cg_ctype(g->dtype),
               loom_cg_ctype(g->dtype), ko->target);
        line(b, "const double *restrict pc = (const double *)(ws + %lld);",
             (long long)ws->partial[c]);
        line(b, "#pragma omp for schedule(static)");
        line(b, "for (int64_t e0 = 0; e0 < %lld; e0 += 256) {", (long long)n);
        b->indent++;
        line(b, "const int64_t e1 = e0 + 256 < %lld ? e0 + 256 : %lld;", (long long)n, (long long)n);
        line(b, "double acc[256];");
        line(b, "for (int64_t e = e0; e < e1; e++) acc[e - e0] = %s;",
             loom_cg_ident(ko->combine, true));
        line(b, "for (int64_t t = 0; t < %lld; t++)", (long long)tiles);
        put(b, "%*s  for (int64_t e = e0; e < e1; e++) ", 2 * b->indent, "");
        char pv[64];
        snprintf(pv, sizeof pv, "pc[t * %lld + e]", (long long)n);
        loom_cg_put_combine(b, ko->combine, "acc[e - e0]", pv, true);
        put(b, ";\n");
        put(b, "%*sfor (int64_t e = e0; e < e1; e++) dst[e] = ", 2 * b->indent, "");
        loom_cg_conv(b, "acc[e - e0]", LOOM_DTYPE_F64, g->dtype);
        put(b, ";\n");
        b->indent--;
        line(b, "}");
        b->indent--;
        line(b, "}");
      }
  }
}

/* A kernel name becomes an exported C symbol (and NAME_partN): it must be
 * an identifier that cannot collide with the helpers (lm_*) or the C
 * library's reserved names (_*). Fusion names kernels loom_k<N>_... */
bool loom_cg_name_ok(const char *s) {
  size_t n = strnlen(s, sizeof ((loom_kernel *)0)->name);
  if (n == 0 || n >= sizeof ((loom_kernel *)0)->name - 8) return false;
  if (s[0] == '_' || strncmp(s, "lm_", 3) == 0 || (s[0] >= '0' && s[0] <= '9')) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

static bool part_has_col_reduce(const loom_kpart *part) {
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++)
      if (part->stages[s].out[o].dst == LOOM_KDST_COL_REDUCE) return true;
  return false;
}

/* A horizontally fused phase (several parts with rows: AdamW over every
 * parameter, the row and column sums of a LayerNorm backward): the parts'
 * elements, concatenated in part order, are split into one even run per
 * thread. A part without column reductions is cut at rows (a row goes to
 * the thread whose run holds its first element), and every row is
 * computed alone, so any split gives the same bits. A part with column
 * reductions is cut at its tiles, the same way: each tile still fills its
 * own partials, combined in tile order, so the bits do not depend on
 * which thread ran it either. `omp for` over the tiles split the tile
 * *count* evenly, and tiles of different parts differ in size. The bases
 * and lengths are constants in the code. */
static void emit_phase_split(cg_buf *b, const loom_kernel *k, const loom_kworkspace *ws,
                             int32_t pi, int32_t pj, uint8_t *need, uint8_t *used) {
  /* a row of an empty R (a reduction over a zero-length axis) still
   * writes its result: it weighs one element */
  int64_t total = 0;
  for (int32_t q = pi; q < pj; q++)
    total += loom_kpart_rows(&k->parts[q]) * LOOM_MAX(loom_kpart_row_len(&k->parts[q]), 1);
  line(b, "{ /* %lld elements, an even run per thread */", (long long)total);
  b->indent++;
  line(b, "const int64_t nt_ = omp_get_num_threads(), me_ = omp_get_thread_num();");
  line(b, "const int64_t lo = %lldLL * me_ / nt_, hi = %lldLL * (me_ + 1) / nt_;",
       (long long)total, (long long)total);
  int64_t base = 0;
  for (int32_t q = pi; q < pj; q++) {
    const loom_kpart *part = &k->parts[q];
    int64_t rows = loom_kpart_rows(part), len = LOOM_MAX(loom_kpart_row_len(part), 1);
    if (rows <= 0) continue;
    bool tiled = part_has_col_reduce(part);
    /* the unit the part is cut at: a tile or a row */
    int64_t rpt = tiled ? part->sched.rows_per_tile : 1, unit = rpt * len;
    int64_t units = tiled ? loom_kpart_tiles(part) : rows, end = base + rows * len;
    line(b, "if (lo < %lldLL && hi > %lldLL) { /* part %d: elements [%lld, %lld) */",
         (long long)end, (long long)base, q, (long long)base, (long long)end);
    b->indent++;
    line(b, "const int64_t u0 = lo > %lldLL ? (lo - %lldLL + %lld) / %lld : 0;", (long long)base,
         (long long)base, (long long)(unit - 1), (long long)unit);
    line(b, "const int64_t u1 = hi < %lldLL ? (hi - %lldLL + %lld) / %lld : %lld;", (long long)end,
         (long long)base, (long long)(unit - 1), (long long)unit, (long long)units);
    part_args(k, q, need, used);
    if (tiled) {
      char r0[48], r1[192];
      snprintf(r0, sizeof r0, "t * %lld", (long long)rpt);
      snprintf(r1, sizeof r1, "t * %lld + %lld < %lld ? t * %lld + %lld : %lld", (long long)rpt,
               (long long)rpt, (long long)rows, (long long)rpt, (long long)rpt, (long long)rows);
      line(b, "for (int64_t t = u0; t < u1; t++)");
      put(b, "%*s  ", 2 * b->indent, "");
      put_part_call(b, k, ws, q, used, "t", r0, r1);
    } else {
      put(b, "%*sif (u0 < u1) ", 2 * b->indent, "");
      put_part_call(b, k, ws, q, used, "0", "u0", "u1");
    }
    put(b, ";\n");
    b->indent--;
    line(b, "}");
    base = end;
  }
  b->indent--;
  line(b, "}");
  /* the combines and the next phase read what this one wrote */
  bool combines = false;
  for (int32_t q = pi; q < pj; q++) combines |= part_has_col_reduce(&k->parts[q]);
  if (combines || pj < k->n_parts) line(b, "#pragma omp barrier");
}

static loom_status emit_kernel(loom_ctx *ctx, cg_buf *b, const loom_kernel *k) {
  if (!loom_cg_name_ok(k->name))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "kernel name '%.47s' is not a C identifier of at most 39 characters "
                      "(not starting with '_' or 'lm_')",
                      k->name);
  for (int32_t a = 0; a < k->n_args; a++)
    if (!loom_cg_ctype(k->args[a].dtype))
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "kernel %s: argument a%d has dtype %s, which generated C does not handle",
                        k->name, a, loom_dtype_name(k->args[a].dtype));
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (!loom_cg_ctype(k->exprs[e].dtype))
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "kernel %s: e%d has dtype %s, which generated C does not handle", k->name,
                        e, loom_dtype_name(k->exprs[e].dtype));
  loom_kworkspace ws;
  LOOM_TRY(loom_kernel_workspace_layout(ctx, k, 1, &ws));
  size_t ne = (size_t)k->n_exprs + 1;
  uint8_t *need = calloc(ne, 1), *reach = calloc(ne, 1), *level = calloc(ne, 1);
  uint8_t *used = calloc((size_t)k->n_args + 1, 1), *tied = calloc((size_t)k->n_args + 1, 1);
  int32_t max_regs = 1;
  for (int32_t pi = 0; pi < k->n_parts; pi++) max_regs = LOOM_MAX(max_regs, k->parts[pi].n_regs);
  loom_dtype *reg_dt = calloc((size_t)max_regs, sizeof *reg_dt);
  loom_status st = LOOM_STATUS_OK;
  if (!need || !reach || !level || !reg_dt || !used || !tied)
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
  bool any_tied = st == LOOM_STATUS_OK && loom_cg_tied_args(k, tied) > 0;

  put(b, "\n/* ==== kernel %s: graph nodes", k->name);
  for (int32_t i = 0; i < k->n_nodes;) { /* runs of consecutive ids as ranges */
    int32_t j = i;
    while (j + 1 < k->n_nodes && k->nodes[j + 1] == k->nodes[j] + 1) j++;
    if (j > i + 1)
      put(b, " %d-%d", k->nodes[i], k->nodes[j]);
    else
      for (int32_t q = i; q <= j; q++) put(b, " %d", k->nodes[q]);
    i = j + 1;
  }
  put(b, " ==== */\n\n");
  for (int32_t pi = 0; st == LOOM_STATUS_OK && pi < k->n_parts; pi++) {
    cg_part cp = {.k = k, .part = &k->parts[pi], .index = pi, .reach = reach, .level = level,
                  .reg_dt = reg_dt, .tied = any_tied ? tied : NULL};
    loom_cg_analyze_part(&cp);
    st = emit_part(ctx, b, &cp, &ws, need, used);
  }
  if (st == LOOM_STATUS_OK) {
    bool par = false; /* fork threads only when there is more than a tile of work */
    for (int32_t pi = 0; pi < k->n_parts; pi++) par |= loom_kpart_tiles(&k->parts[pi]) > 1;
    for (int32_t a = 0; a < k->n_args; a++) par |= k->args[a].numel > 4096;
    put(b, "void %s(void *const *args, void *workspace, int32_t n_threads) {\n", k->name);
    b->indent = 1;
    line(b, "char *const ws = (char *)workspace;");
    line(b, "(void)args; (void)ws;");
    line(b, "if (n_threads < 1) n_threads = 1;");
    line(b, "#pragma omp parallel num_threads(n_threads)%s", par ? "" : " if (0)");
    line(b, "{");
    b->indent++;
    line(b, "float *const scratch = (float *)(ws + %lld + (size_t)omp_get_thread_num() * %lld);",
         (long long)ws.scratch, (long long)ws.scratch_thread_bytes);
    line(b, "(void)scratch;");
    for (int32_t pi = 0; pi < k->n_parts;) {
      int32_t phase = k->parts[pi].phase, pj = pi;
      int64_t total = 0;
      while (pj < k->n_parts && k->parts[pj].phase == phase) total += loom_kpart_tiles(&k->parts[pj++]);
      line(b, "/* phase %d: the tiles of parts %d..%d, then their column reductions */", phase,
           pi, pj - 1);
      int32_t with_rows = 0;
      for (int32_t q = pi; q < pj; q++) with_rows += loom_kpart_rows(&k->parts[q]) > 0;
      if (total > 0 && with_rows > 1) {
        emit_phase_split(b, k, &ws, pi, pj, need, used);
      } else if (total > 0) {
        line(b, "#pragma omp for schedule(static)");
        line(b, "for (int64_t t = 0; t < %lld; t++) {", (long long)total);
        b->indent++;
        int64_t start = 0;
        for (int32_t q = pi; q < pj; q++) {
          int64_t nt = loom_kpart_tiles(&k->parts[q]);
          if (nt == 0) continue;
          int64_t rows = loom_kpart_rows(&k->parts[q]), rpt = k->parts[q].sched.rows_per_tile;
          char tile[48], r0[64], r1[128];
          snprintf(tile, sizeof tile, "t - %lld", (long long)start);
          snprintf(r0, sizeof r0, "(t - %lld) * %lld", (long long)start, (long long)rpt);
          snprintf(r1, sizeof r1, "(t - %lld) * %lld + %lld < %lld ? (t - %lld) * %lld + %lld : %lld",
                   (long long)start, (long long)rpt, (long long)rpt, (long long)rows,
                   (long long)start, (long long)rpt, (long long)rpt, (long long)rows);
          part_args(k, q, need, used);
          put(b, "%*s%s", 2 * b->indent, "", start ? "else " : "");
          if (start + nt < total) put(b, "if (t < %lld) ", (long long)(start + nt));
          put_part_call(b, k, &ws, q, used, tile, r0, r1);
          put(b, ";\n");
          start += nt;
        }
        b->indent--;
        line(b, "}");
      }
      emit_combines(b, k, &ws, phase);
      pi = pj;
    }
    b->indent--;
    line(b, "}");
    b->indent = 0;
    put(b, "}\n");
    if (loom_kernel_has_rows_entry(k)) {
      part_args(k, 0, need, used);
      put(b, "void %s_rows(void *const *args, void *workspace, int32_t thread, int64_t row_begin, "
             "int64_t row_end) {\n", k->name);
      b->indent = 1;
      line(b, "char *const ws = (char *)workspace;");
      line(b, "float *const scratch = (float *)(ws + %lld + (size_t)thread * %lld);",
           (long long)ws.scratch, (long long)ws.scratch_thread_bytes);
      put(b, "  ");
      put_part_call(b, k, &ws, 0, used, "0", "row_begin", "row_end");
      put(b, ";\n}\n");
      b->indent = 0;
    }
  }
  free(need);
  free(reach);
  free(level);
  free(used);
  free(tied);
  free(reg_dt);
  loom_kworkspace_clear(&ws);
  return st;
}

loom_status loom_codegen_c(loom_ctx *ctx, const loom_kernel *kernels, int32_t n, char **source) {
  if (!source || (n > 0 && !kernels) || n < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_codegen_c: bad arguments");
  *source = NULL;
  for (int32_t i = 0; i < n; i++) {
    loom_status st = loom_kernel_verify(ctx, &kernels[i]);
    if (st != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "generating C");
      return st;
    }
  }
  cg_buf b = {0};
  loom_cg_put_prelude(&b);
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n && st == LOOM_STATUS_OK; i++) st = emit_kernel(ctx, &b, &kernels[i]);
  if (st == LOOM_STATUS_OK && (b.buf.oom || !b.buf.p))
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
  if (st != LOOM_STATUS_OK) {
    free(b.buf.p);
    return st;
  }
  *source = b.buf.p;
  return LOOM_STATUS_OK;
}

loom_status loom_codegen_c_prelude(loom_ctx *ctx, char **source) {
  if (!source) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_codegen_c_prelude: NULL");
  cg_buf b = {0};
  loom_cg_put_prelude(&b);
  if (b.buf.oom || !b.buf.p) {
    free(b.buf.p);
    *source = NULL;
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
  }
  *source = b.buf.p;
  return LOOM_STATUS_OK;
}

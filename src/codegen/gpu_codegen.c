/*
 * Kernel IR -> GPU source (gpu_codegen.h describes the lowering). The
 * expressions, conversions and maps are the C renderer's (c_expr.c, one
 * local per expression); this file lays out groups, threads, shared
 * memory and barriers; gpu_dialect.c spells them per dialect.
 */
#include "codegen/gpu_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L LOOM_GPU_LOCAL

/* What the part's function needs beyond its stages. */
typedef struct gpu_part {
  int32_t max_rr, max_cr; /* most row / column reductions of one ROW stage */
  bool global_scratch;    /* scratch rows in the workspace, not shared memory */
} gpu_part;

static void gpu_part_info(const loom_kpart *part, gpu_part *gp) {
  memset(gp, 0, sizeof *gp);
  for (int32_t s = 0; s < part->n_stages; s++) {
    const loom_kstage *st = &part->stages[s];
    int32_t rr = 0, cr = 0;
    for (int32_t o = 0; o < st->n_out; o++) {
      rr += st->out[o].dst == LOOM_KDST_ROW_REDUCE;
      cr += st->out[o].dst == LOOM_KDST_COL_REDUCE && st->kind == LOOM_KSTAGE_ROW;
    }
    gp->max_rr = LOOM_MAX(gp->max_rr, rr);
    gp->max_cr = LOOM_MAX(gp->max_cr, cr);
  }
  gp->global_scratch = (int64_t)part->n_scratch * loom_kpart_scratch_stride(part) * 4 >
                       LOOM_GPU_LOCAL_SCRATCH_BYTES;
}

static int64_t part_groups(const loom_kpart *part) {
  gpu_part gp;
  gpu_part_info(part, &gp);
  int64_t t = loom_kpart_tiles(part);
  int64_t cap = gp.global_scratch ? LOOM_GPU_MAX_SCRATCH_GROUPS : LOOM_GPU_MAX_GROUPS;
  return t < cap ? t : cap;
}

/* Where part q runs in its phase's one launch: groups [base, base +
 * groups), and its workspace scratch (when global) at scr floats past the
 * scratch area's start, one block per group. The parts of a phase run at
 * once, so their workspace scratch blocks lie side by side. */
typedef struct gpu_slot {
  int64_t base, groups, scr;
} gpu_slot;

/* The slots of parts [pi, pj) (one phase); returns the phase's groups and
 * sets *scr_floats to the workspace scratch it needs. */
static int64_t phase_slots(const loom_kernel *k, int32_t pi, int32_t pj, gpu_slot *slot,
                           int64_t *scr_floats) {
  int64_t base = 0, scr = 0;
  for (int32_t q = pi; q < pj; q++) {
    const loom_kpart *part = &k->parts[q];
    gpu_part gp;
    gpu_part_info(part, &gp);
    int64_t groups = LOOM_MAX(part_groups(part), 0);
    slot[q - pi] = (gpu_slot){.base = base, .groups = groups, .scr = scr};
    base += groups;
    if (gp.global_scratch) scr += groups * part->n_scratch * loom_kpart_scratch_stride(part);
  }
  *scr_floats = scr;
  return base;
}

/* The group-shared buffers a phase may use, in argument order. */
static const struct {
  const char *name, *type;
  int64_t size; /* bytes per element */
} shared_bufs[3] = {
    {"lm_red", "float", sizeof(float)},  /* row-reduction lanes */
    {"lm_col", "double", sizeof(double)}, /* column-reduction staging */
    {"lm_scr", "float", sizeof(float)},  /* scratch rows that fit */
};

/* Bytes of each of shared_bufs for the phase of parts [pi, pj), as large
 * as its largest part needs (0: unused). */
static void phase_shared(const loom_kernel *k, int32_t pi, int32_t pj, int64_t bytes[3]) {
  int64_t elems[3] = {0, 0, 0};
  for (int32_t q = pi; q < pj; q++) {
    gpu_part gp;
    gpu_part_info(&k->parts[q], &gp);
    elems[0] = LOOM_MAX(elems[0], (int64_t)gp.max_rr * L);
    elems[1] = LOOM_MAX(elems[1], (int64_t)gp.max_cr * L);
    if (!gp.global_scratch)
      elems[2] = LOOM_MAX(elems[2], k->parts[q].n_scratch * loom_kpart_scratch_stride(&k->parts[q]));
  }
  for (int32_t i = 0; i < 3; i++) bytes[i] = elems[i] * shared_bufs[i].size;
}

/* The end of the phase that starts at part pi. */
static int32_t phase_end(const loom_kernel *k, int32_t pi) {
  int32_t pj = pi;
  while (pj < k->n_parts && k->parts[pj].phase == k->parts[pi].phase) pj++;
  return pj;
}

loom_status loom_gpu_launches(loom_ctx *ctx, const loom_kernel *k, loom_gpu_launch **out,
                              int32_t *n, int64_t *workspace_bytes) {
  *out = NULL;
  *n = 0;
  loom_kworkspace ws;
  LOOM_TRY(loom_kernel_workspace_layout(ctx, k, 1, &ws));
  int32_t cap = k->n_parts + ws.n_partial + 1;
  loom_gpu_launch *l = loom_calloc(ctx, (size_t)cap, sizeof *l);
  gpu_slot *slot = loom_calloc(ctx, (size_t)k->n_parts + 1, sizeof *slot);
  if (!l || !slot) {
    free(l);
    free(slot);
    loom_kworkspace_clear(&ws);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int64_t scratch = 0;
  int32_t m = 0;
  for (int32_t pi = 0; pi < k->n_parts;) {
    int32_t pj = phase_end(k, pi);
    int64_t scr = 0, groups = phase_slots(k, pi, pj, slot, &scr);
    scratch = LOOM_MAX(scratch, scr * 4);
    if (groups > 0) {
      snprintf(l[m].fn, sizeof l[m].fn, "%s_h%d", k->name, k->parts[pi].phase);
      phase_shared(k, pi, pj, l[m].shared_bytes);
      l[m++].groups = groups;
    }
    for (int32_t q = pi; q < pj; q++) {
      const loom_kpart *part = &k->parts[q];
      int32_t c = loom_cg_col_index(k, q, 0);
      for (int32_t s = 0; s < part->n_stages; s++)
        for (int32_t o = 0; o < part->stages[s].n_out; o++) {
          const loom_kout *ko = &part->stages[s].out[o];
          if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
          int64_t numel = k->args[ko->target].numel;
          if (numel > 0) {
            int64_t cg = (numel + L - 1) / L;
            snprintf(l[m].fn, sizeof l[m].fn, "%s_c%d", k->name, c);
            l[m++].groups = cg < LOOM_GPU_MAX_GROUPS ? cg : LOOM_GPU_MAX_GROUPS;
          }
          c++;
        }
    }
    pi = pj;
  }
  *workspace_bytes = ws.scratch + (scratch + 63) / 64 * 64;
  free(slot);
  loom_kworkspace_clear(&ws);
  *out = l;
  *n = m;
  return LOOM_STATUS_OK;
}

/* ---- a function's parameters ---------------------------------------------- */

/* Every function takes the kernel's non-temp arguments, then the workspace
 * (the list is left open: a part's function takes more). */
static void put_params(cg_buf *b, const gpu_dialect *d, const loom_kernel *k) {
  put(b, "(");
  for (int32_t a = 0; a < k->n_args; a++) {
    if (k->args[a].temp) continue;
    put(b, "\n    %s%s%s *%s a%d,", d->global, k->args[a].is_output ? "" : "const ",
        loom_cg_ctype(k->args[a].dtype), d->restrict_kw, a);
  }
  put(b, "\n    %schar *%s lm_ws", d->global, d->restrict_kw);
}

/* The same arguments, passed on. */
static void put_args(cg_buf *b, const loom_kernel *k) {
  put(b, "(");
  for (int32_t a = 0; a < k->n_args; a++)
    if (!k->args[a].temp) put(b, "a%d, ", a);
  put(b, "lm_ws");
}

/* Pointers to the temps the workspace holds. */
static void put_temps(cg_buf *b, const gpu_dialect *d, const loom_kernel *k,
                      const loom_kworkspace *ws) {
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].temp)
      line(b, "%s%s *%s a%d = (%s%s *)(lm_ws + %lld); /* temp v%d */", d->global,
           loom_cg_ctype(k->args[a].dtype), d->restrict_kw, a, d->global,
           loom_cg_ctype(k->args[a].dtype), (long long)ws->temp[a], k->args[a].value);
}

/* ---- stages ---------------------------------------------------------------- */

/* const int64_t <pre>0.. = the loop indices of flat r index `flat`. */
static void put_unflatten(cg_buf *b, const cg_loops *lp, const char *flat, const char *pre,
                          char names[][16], cg_site *si) {
  for (int32_t d = 0; d < lp->n; d++) {
    snprintf(names[d], sizeof names[d], "%s%d", pre, d);
    si->idx[d] = names[d];
  }
  if (lp->n == 1) {
    line(b, "const int64_t %s = %s;", names[0], flat);
    return;
  }
  if (lp->n == 0) return;
  line(b, "int64_t %s_t = %s;", pre, flat);
  for (int32_t d = lp->n - 1; d > 0; d--) {
    line(b, "const int64_t %s = %s_t %% %lld;", names[d], pre, (long long)lp->extent[d]);
    line(b, "%s_t /= %lld;", pre, (long long)lp->extent[d]);
  }
  line(b, "const int64_t %s = %s_t;", names[0], pre);
}

/* The stage's outputs for one element (or the scalar stage's once). In a
 * reducing ROW stage, row reductions stage their value in lm_red and
 * column reductions in lm_col at this thread's slot; a scalar stage
 * stores and reduces on thread 0 only. */
static loom_status put_outputs(loom_ctx *ctx, cg_buf *b, const cg_site *si, int32_t col_first,
                               bool staged) {
  const cg_part *cp = si->cp;
  const loom_kernel *k = cp->k;
  const loom_kstage *st = &cp->part->stages[si->stage];
  int32_t col = col_first, rr = 0, cr = 0;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    const loom_kexpr *x = &k->exprs[ko->expr];
    char v[24], base[24];
    snprintf(v, sizeof v, "v%d", ko->expr);
    snprintf(base, sizeof base, "bo%d", o);
    put(b, "%*s", 2 * b->indent, "");
    switch (ko->dst) {
    case LOOM_KDST_STORE:
      if (si->scalar) put(b, "if (lm_lid == 0) ");
      put(b, "a%d[", ko->target);
      loom_cg_put_offset(b, si, base, &ko->map);
      put(b, "] = ");
      loom_cg_conv(b, v, x->dtype, k->args[ko->target].dtype);
      break;
    case LOOM_KDST_SCRATCH:
      put(b, "s%d[%s] = ", ko->target, si->scalar ? "0" : si->flat);
      loom_cg_conv(b, v, x->dtype, LOOM_DTYPE_F32);
      break;
    case LOOM_KDST_REG: put(b, "reg%d = %s", ko->target, v); break;
    case LOOM_KDST_ROW_REDUCE:
      put(b, "lm_red[%d * %d + lm_lid] = ", rr++, L);
      loom_cg_conv(b, v, x->dtype, LOOM_DTYPE_F32);
      break;
    case LOOM_KDST_COL_REDUCE:
      if (staged) {
        put(b, "lm_col[%d * %d + lm_lid] = ", cr++, L);
        loom_cg_conv(b, v, x->dtype, LOOM_DTYPE_F64);
      } else { /* scalar stage */
        put(b, "if (lm_lid == 0) ");
        loom_cg_put_col_combine(b, si, ko, base, col, v, x->dtype);
      }
      col++;
      break;
    default:
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "kernel %s: bad destination %d", k->name,
                        (int)ko->dst);
    }
    put(b, ";\n");
  }
  return LOOM_STATUS_OK;
}

/* The element-level exprs of need at site si, then the outputs. */
static loom_status put_element(loom_ctx *ctx, cg_buf *b, const cg_site *si, const uint8_t *need,
                               int32_t col_first, bool staged) {
  for (int32_t e = 0; e < si->cp->k->n_exprs; e++)
    if (need[e] && si->cp->level[e]) LOOM_TRY(loom_cg_emit_expr(ctx, b, si, e));
  return put_outputs(ctx, b, si, col_first, staged);
}

/* After a staged chunk: lanes 0..W-1 take their elements of the chunk in
 * increasing r; thread 0 adds the column values into the partials in r
 * order (their offsets recomputed from r). */
static void put_chunk_reduce(cg_buf *b, const gpu_dialect *d, const cg_site *si0,
                             int32_t col_first, int32_t W, const char *n) {
  const cg_part *cp = si0->cp;
  const loom_kstage *st = &cp->part->stages[si0->stage];
  int32_t rr = 0, cr = 0, col = col_first;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst == LOOM_KDST_ROW_REDUCE) {
      char acc[24], v[40];
      snprintf(acc, sizeof acc, "lm_acc%d", o);
      snprintf(v, sizeof v, "lm_red[%d * %d + j]", rr++, L);
      put(b, "%*sif (lm_lid < %d) for (int j = lm_lid; j < %d && c0 + j < %s; j += %d) ",
          2 * b->indent, "", W, L, n, W);
      loom_cg_put_combine(b, ko->combine, acc, v, false);
      put(b, ";\n");
    }
  }
  bool any_col = false;
  for (int32_t o = 0; o < st->n_out; o++) any_col |= st->out[o].dst == LOOM_KDST_COL_REDUCE;
  if (any_col) {
    line(b, "if (lm_lid == 0) for (int j = 0; j < %d && c0 + j < %s; j++) {", L, n);
    b->indent++;
    cg_site si = *si0;
    char names[LOOM_MAX_RANK][16];
    line(b, "const int64_t lm_q = c0 + j;");
    put_unflatten(b, &cp->loops, "lm_q", "q", names, &si);
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
      cg_buf a = {0}, v = {0};
      char base[24];
      snprintf(base, sizeof base, "bo%d", o);
      put(&a, "pc%d[", col + cr);
      loom_cg_put_offset(&a, &si, base, &ko->map);
      put(&a, "]");
      put(&v, "lm_col[%d * %d + j]", cr, L);
      put(b, "%*s", 2 * b->indent, "");
      if (!a.buf.oom && !v.buf.oom) loom_cg_put_combine(b, ko->combine, a.buf.p, v.buf.p, true);
      b->buf.oom |= a.buf.oom || v.buf.oom;
      put(b, ";\n");
      free(a.buf.p);
      free(v.buf.p);
      cr++;
    }
    b->indent--;
    line(b, "}");
  }
  (void)d;
}

static loom_status put_stage(loom_ctx *ctx, cg_buf *b, const gpu_dialect *d, const cg_part *cp,
                             int32_t s, uint8_t *need, int32_t col_first) {
  const loom_kernel *k = cp->k;
  const loom_kstage *st = &cp->part->stages[s];
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  memset(need, 0, (size_t)k->n_exprs + 1);
  for (int32_t o = 0; o < st->n_out; o++) loom_cg_mark_reach(k, st->out[o].expr, need);
  line(b, "{ /* stage %d (%s) */", s, scalar ? "scalar: every thread, stores on thread 0"
                                             : "row: elements strided over the group");
  b->indent++;
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    if (!need[e] || (x->kind != LOOM_KX_LOAD && x->kind != LOOM_KX_INDEX)) continue;
    put(b, "%*sconst int64_t b%d = ", 2 * b->indent, "", e);
    loom_cg_put_row_base(b, cp, &x->map);
    put(b, ";\n");
  }
  int32_t n_rr = 0, n_cr = 0, n_scr = 0;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst == LOOM_KDST_STORE || ko->dst == LOOM_KDST_COL_REDUCE) {
      put(b, "%*sconst int64_t bo%d = ", 2 * b->indent, "", o);
      loom_cg_put_row_base(b, cp, &ko->map);
      put(b, ";\n");
    }
    n_rr += ko->dst == LOOM_KDST_ROW_REDUCE;
    n_cr += ko->dst == LOOM_KDST_COL_REDUCE;
    n_scr += ko->dst == LOOM_KDST_SCRATCH;
  }
  cg_site si = {.cp = cp, .stage = s, .scalar = scalar, .flat = "0", .lane = "0"};
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (need[e] && (scalar || !cp->level[e])) LOOM_TRY(loom_cg_emit_expr(ctx, b, &si, e));
  if (scalar) {
    LOOM_TRY(put_outputs(ctx, b, &si, col_first, false));
    b->indent--;
    line(b, "}");
    return LOOM_STATUS_OK;
  }
  int64_t n = loom_kpart_row_len(cp->part);
  char nn[32];
  snprintf(nn, sizeof nn, "(int64_t)%lld", (long long)n);
  char names[LOOM_MAX_RANK][16];
  si.flat = "r";
  if (n_rr == 0 && n_cr == 0) {
    line(b, "for (int64_t r = lm_lid; r < %s; r += %d) {", nn, L);
    b->indent++;
    put_unflatten(b, &cp->loops, "r", "i", names, &si);
    LOOM_TRY(put_element(ctx, b, &si, need, col_first, false));
    b->indent--;
    line(b, "}");
  } else {
    int32_t W = cp->part->sched.vector_width > 0 ? cp->part->sched.vector_width : 1;
    if (L % W != 0)
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "kernel %s: vector width %d does not divide the GPU group size %d",
                        k->name, W, L);
    for (int32_t o = 0; o < st->n_out; o++)
      if (st->out[o].dst == LOOM_KDST_ROW_REDUCE)
        line(b, "float lm_acc%d = %s; /* lane lm_lid's accumulator (lm_lid < %d) */", o,
             loom_cg_ident(st->out[o].combine, false), W);
    line(b, "for (int64_t c0 = 0; c0 < %s; c0 += %d) {", nn, L);
    b->indent++;
    line(b, "const int64_t r = c0 + lm_lid;");
    line(b, "if (r < %s) {", nn);
    b->indent++;
    put_unflatten(b, &cp->loops, "r", "i", names, &si);
    LOOM_TRY(put_element(ctx, b, &si, need, col_first, true));
    b->indent--;
    line(b, "}");
    line(b, "%s;", d->barrier);
    put_chunk_reduce(b, d, &si, col_first, W, nn);
    line(b, "%s;", d->barrier);
    b->indent--;
    line(b, "}");
    /* the fold over lanes in lane order, on every thread (same result) */
    int32_t rr = 0;
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      if (ko->dst != LOOM_KDST_ROW_REDUCE) continue;
      line(b, "if (lm_lid < %d) lm_red[%d * %d + lm_lid] = lm_acc%d;", W, rr, L, o);
      rr++;
    }
    if (n_rr) line(b, "%s;", d->barrier);
    rr = 0;
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      if (ko->dst != LOOM_KDST_ROW_REDUCE) continue;
      line(b, "{");
      b->indent++;
      line(b, "float res = lm_red[%d * %d];", rr, L);
      char a[48];
      snprintf(a, sizeof a, "lm_red[%d * %d + l]", rr, L);
      put(b, "%*sfor (int l = 1; l < %d; l++) ", 2 * b->indent, "", W);
      loom_cg_put_combine(b, ko->combine, "res", a, false);
      put(b, ";\n");
      line(b, "reg%d = res;", ko->target);
      b->indent--;
      line(b, "}");
      rr++;
    }
    if (n_rr) line(b, "%s; /* lm_red is reused */", d->barrier);
  }
  if (n_scr) line(b, "%s; /* scratch: read by other threads in scalar stages */", d->barrier);
  b->indent--;
  line(b, "}");
  return LOOM_STATUS_OK;
}

/* ---- parts and combines ------------------------------------------------------ */

static loom_status put_part(loom_ctx *ctx, cg_buf *b, const gpu_dialect *d, cg_part *cp,
                            const loom_kworkspace *ws, const gpu_slot *slot, uint8_t *need) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  gpu_part gp;
  gpu_part_info(part, &gp);
  int64_t tiles = loom_kpart_tiles(part), rows = loom_kpart_rows(part);
  int64_t rpt = part->sched.rows_per_tile;
  put(b, "/* %s part %d (phase %d): %lld rows of %lld, %lld rows per tile, %d lanes */\n",
      k->name, cp->index, part->phase, (long long)rows, (long long)loom_kpart_row_len(part),
      (long long)rpt, part->sched.vector_width);
  /* a function its phase's launch calls (put_phase) for the groups of
   * its slot: lm_gid counts from the slot's first group */
  put(b, "%s void %s_p%d", d->fn, k->name, cp->index);
  put_params(b, d, k);
  put(b, ",\n    const int64_t lm_gid, const int64_t lm_ngroups");
  if (gp.max_rr) put(b, ",\n    %sfloat *%s lm_red", d->shared_ptr, d->restrict_kw);
  if (gp.max_cr) put(b, ",\n    %sdouble *%s lm_col", d->shared_ptr, d->restrict_kw);
  if (part->n_scratch > 0 && !gp.global_scratch)
    put(b, ",\n    %sfloat *%s lm_scr", d->shared_ptr, d->restrict_kw);
  put(b, ") {\n");
  b->indent = 1;
  line(b, "const int lm_lid = %s;", d->lid);
  line(b, "(void)lm_ws; (void)lm_lid;");
  put_temps(b, d, k, ws);
  int64_t stride = loom_kpart_scratch_stride(part);
  if (part->n_scratch > 0) {
    if (gp.global_scratch) {
      line(b, "%sfloat *%s lm_scr = (%sfloat *)(lm_ws + %lld) + %lld + lm_gid * %lld;", d->global,
           d->restrict_kw, d->global, (long long)ws->scratch, (long long)slot->scr,
           (long long)(part->n_scratch * stride));
      for (int32_t s = 0; s < part->n_scratch; s++)
        line(b, "%sfloat *%s s%d = lm_scr + %lld;", d->global, d->restrict_kw, s,
             (long long)(s * stride));
    } else {
      for (int32_t s = 0; s < part->n_scratch; s++)
        line(b, "%sfloat *s%d = lm_scr + %lld;", d->shared_ptr, s, (long long)(s * stride));
    }
  }
  line(b, "for (int64_t tile = lm_gid; tile < %lld; tile += lm_ngroups) {", (long long)tiles);
  b->indent++;
  line(b, "const int64_t row_begin = tile * %lld;", (long long)rpt);
  line(b, "const int64_t row_end = row_begin + %lld < %lld ? row_begin + %lld : %lld;",
       (long long)rpt, (long long)rows, (long long)rpt, (long long)rows);
  int32_t col = loom_cg_col_index(k, cp->index, 0);
  bool any_col = false;
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++) {
      const loom_kout *ko = &part->stages[s].out[o];
      if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
      int64_t numel = k->args[ko->target].numel;
      line(b, "%sdouble *%s pc%d = (%sdouble *)(lm_ws + %lld) + tile * %lld; /* partial of a%d */",
           d->global, d->restrict_kw, col, d->global, (long long)ws->partial[col],
           (long long)numel, ko->target);
      line(b, "for (int64_t e = lm_lid; e < %lld; e += %d) pc%d[e] = %s;", (long long)numel, L,
           col, loom_cg_ident(ko->combine, true));
      col++;
      any_col = true;
    }
  if (any_col) line(b, "%s;", d->barrier);
  line(b, "for (int64_t row = row_begin; row < row_end; row++) {");
  b->indent++;
  if (cp->need_pidx) {
    line(b, "int64_t q = row;");
    for (int32_t i = part->p_rank - 1; i >= 0; i--) {
      line(b, "const int64_t p%d = q %% %lld;", i, (long long)part->p_shape[i]);
      if (i) line(b, "q /= %lld;", (long long)part->p_shape[i]);
    }
  }
  for (int32_t r = 0; r < part->n_regs; r++) line(b, "%s reg%d;", loom_cg_ctype(cp->reg_dt[r]), r);
  for (int32_t s = 0; s < part->n_stages; s++)
    LOOM_TRY(put_stage(ctx, b, d, cp, s, need, loom_cg_col_index(k, cp->index, s)));
  b->indent--;
  line(b, "}");
  if (any_col) line(b, "%s; /* the partials are done before the next tile's start */", d->barrier);
  b->indent--;
  line(b, "}");
  b->indent = 0;
  put(b, "}\n\n");
  return LOOM_STATUS_OK;
}

/* NAME_h<phase>: one launch for every part of a phase (a horizontally
 * fused kernel's parts run side by side): each group finds its part by
 * its index and runs that part's function over the part's own groups.
 * Shared memory is declared here (OpenCL allows it only at a launched
 * function's scope) or, where the dialect says so, passed in. */
static void put_phase(cg_buf *b, const gpu_dialect *d, const loom_kernel *k, int32_t pi,
                      int32_t pj, const gpu_slot *slot) {
  int64_t bytes[3];
  phase_shared(k, pi, pj, bytes);
  put(b, "/* %s phase %d: parts %d..%d in one launch */\n", k->name, k->parts[pi].phase, pi,
      pj - 1);
  put(b, "%s %s_h%d", d->kernel, k->name, k->parts[pi].phase);
  put_params(b, d, k);
  for (int32_t i = 0; i < 3 && d->shared_as_args; i++)
    if (bytes[i])
      put(b, ",\n    %s%s *%s %s", d->shared_ptr, shared_bufs[i].type, d->restrict_kw,
          shared_bufs[i].name);
  put(b, ") {\n");
  b->indent = 1;
  for (int32_t i = 0; i < 3 && !d->shared_as_args; i++)
    if (bytes[i])
      line(b, "%s%s %s[%lld];", d->shared, shared_bufs[i].type, shared_bufs[i].name,
           (long long)(bytes[i] / shared_bufs[i].size));
  line(b, "const int64_t lm_g = %s;", d->gid);
  const char *kw = "if";
  for (int32_t q = pi; q < pj; q++) {
    const gpu_slot *sl = &slot[q - pi];
    if (sl->groups <= 0) continue;
    const loom_kpart *part = &k->parts[q];
    gpu_part gp;
    gpu_part_info(part, &gp);
    put(b, "  %s (lm_g < %lld)\n", kw, (long long)(sl->base + sl->groups));
    put(b, "    %s_p%d", k->name, q);
    put_args(b, k);
    put(b, ", lm_g - %lld, %lld", (long long)sl->base, (long long)sl->groups);
    if (gp.max_rr) put(b, ", lm_red");
    if (gp.max_cr) put(b, ", lm_col");
    if (part->n_scratch > 0 && !gp.global_scratch) put(b, ", lm_scr");
    put(b, ");\n");
    kw = "else if";
  }
  b->indent = 0;
  put(b, "}\n\n");
}

/* NAME_c<c>: column reduction c's partials combined in tile order. */
static void put_combine(cg_buf *b, const gpu_dialect *d, const loom_kernel *k,
                        const loom_kworkspace *ws, const loom_kpart *part, const loom_kout *ko,
                        int32_t c) {
  const loom_karg *g = &k->args[ko->target];
  int64_t n = g->numel, tiles = loom_kpart_tiles(part);
  put(b, "/* %s: a%d = column reduction %d (%s) over %lld tile partials, in tile order */\n",
      k->name, ko->target, c, loom_op_name(ko->combine), (long long)tiles);
  put(b, "%s %s_c%d", d->kernel, k->name, c);
  put_params(b, d, k);
  put(b, ") {\n");
  b->indent = 1;
  line(b, "const int lm_lid = %s;", d->lid);
  put_temps(b, d, k, ws);
  line(b, "%sconst double *%s pc = (%sconst double *)(lm_ws + %lld);", d->global, d->restrict_kw,
       d->global, (long long)ws->partial[c]);
  line(b, "for (int64_t e = %s * %d + lm_lid; e < %lld; e += %s * %d) {", d->gid, L,
       (long long)n, d->ngroups, L);
  b->indent++;
  line(b, "double acc = %s;", loom_cg_ident(ko->combine, true));
  put(b, "%*sfor (int64_t t = 0; t < %lld; t++) ", 2 * b->indent, "", (long long)tiles);
  char pv[64];
  snprintf(pv, sizeof pv, "pc[t * %lld + e]", (long long)n);
  loom_cg_put_combine(b, ko->combine, "acc", pv, true);
  put(b, ";\n");
  put(b, "%*sa%d[e] = ", 2 * b->indent, "", ko->target);
  loom_cg_conv(b, "acc", LOOM_DTYPE_F64, g->dtype);
  put(b, ";\n");
  b->indent--;
  line(b, "}");
  b->indent = 0;
  put(b, "}\n\n");
}

static loom_status put_kernel(loom_ctx *ctx, cg_buf *b, const gpu_dialect *d, const loom_kernel *k) {
  if (!loom_cg_name_ok(k->name))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "kernel name '%.47s' is not an identifier of at most 39 characters "
                      "(not starting with '_' or 'lm_')",
                      k->name);
  for (int32_t a = 0; a < k->n_args; a++)
    if (!loom_cg_ctype(k->args[a].dtype))
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "kernel %s: argument a%d has dtype %s, which generated code does not handle",
                        k->name, a, loom_dtype_name(k->args[a].dtype));
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (!loom_cg_ctype(k->exprs[e].dtype))
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "kernel %s: e%d has dtype %s, which generated code does not handle",
                        k->name, e, loom_dtype_name(k->exprs[e].dtype));
  loom_kworkspace ws;
  LOOM_TRY(loom_kernel_workspace_layout(ctx, k, 1, &ws));
  size_t ne = (size_t)k->n_exprs + 1;
  uint8_t *need = calloc(ne, 1), *reach = calloc(ne, 1), *level = calloc(ne, 1);
  int32_t max_regs = 1;
  for (int32_t pi = 0; pi < k->n_parts; pi++) max_regs = LOOM_MAX(max_regs, k->parts[pi].n_regs);
  loom_dtype *reg_dt = calloc((size_t)max_regs, sizeof *reg_dt);
  loom_status st = LOOM_STATUS_OK;
  if (!need || !reach || !level || !reg_dt)
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating GPU code");
  put(b, "\n/* ==== kernel %s ==== */\n\n", k->name);
  gpu_slot *slot = calloc((size_t)k->n_parts + 1, sizeof *slot);
  if (!slot && st == LOOM_STATUS_OK)
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating GPU code");
  for (int32_t pi = 0; st == LOOM_STATUS_OK && pi < k->n_parts;) {
    int32_t pj = phase_end(k, pi);
    int64_t scr = 0;
    phase_slots(k, pi, pj, slot, &scr);
    for (int32_t q = pi; st == LOOM_STATUS_OK && q < pj; q++) {
      cg_part cp = {.k = k, .part = &k->parts[q], .index = q, .reach = reach, .level = level,
                    .reg_dt = reg_dt};
      loom_cg_analyze_part(&cp);
      st = put_part(ctx, b, d, &cp, &ws, &slot[q - pi], need);
    }
    if (st == LOOM_STATUS_OK) put_phase(b, d, k, pi, pj, slot);
    pi = pj;
  }
  free(slot);
  int32_t c = 0;
  for (int32_t pi = 0; st == LOOM_STATUS_OK && pi < k->n_parts; pi++)
    for (int32_t s = 0; s < k->parts[pi].n_stages; s++)
      for (int32_t o = 0; o < k->parts[pi].stages[s].n_out; o++) {
        const loom_kout *ko = &k->parts[pi].stages[s].out[o];
        if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
        if (k->args[ko->target].numel > 0) put_combine(b, d, k, &ws, &k->parts[pi], ko, c);
        c++;
      }
  free(need);
  free(reach);
  free(level);
  free(reg_dt);
  loom_kworkspace_clear(&ws);
  return st;
}

loom_status loom_codegen_gpu(loom_ctx *ctx, loom_gpu_dialect dialect, const loom_kernel *kernels,
                             int32_t n, char **source) {
  if (!source || (n > 0 && !kernels) || n < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_codegen_gpu: bad arguments");
  *source = NULL;
  const gpu_dialect *d = loom_gpu_dialect_get(dialect);
  for (int32_t i = 0; i < n; i++) {
    loom_status st = loom_kernel_verify(ctx, &kernels[i]);
    if (st != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "generating %s", d->name);
      return st;
    }
  }
  cg_buf b = {0};
  loom_gpu_put_prelude(&b, d);
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n && st == LOOM_STATUS_OK; i++) st = put_kernel(ctx, &b, d, &kernels[i]);
  if (st == LOOM_STATUS_OK && (b.buf.oom || !b.buf.p))
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating %s", d->name);
  if (st != LOOM_STATUS_OK) {
    free(b.buf.p);
    return st;
  }
  *source = b.buf.p;
  return LOOM_STATUS_OK;
}

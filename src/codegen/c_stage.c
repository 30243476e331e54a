/*
 * Stages of generated C (c_codegen.c describes the shape): a stage's loop
 * nest over R, row-reduction lanes, the chunked fast path for erf and
 * dropout masks, and streaming stores of large outputs.
 */
#include "codegen/c_internal.h"
#include "kernel/in_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stages ---------------------------------------------------------------- */

/* The stage outputs for one element (the body of the R loop). */
static loom_status emit_outputs(loom_ctx *ctx, cg_buf *b, const cg_site *si, int32_t col_first) {
  const cg_part *cp = si->cp;
  const loom_kernel *k = cp->k;
  const loom_kstage *st = &cp->part->stages[si->stage];
  int32_t col = col_first;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    const loom_kexpr *x = &k->exprs[ko->expr];
    char v[24], base[24];
    snprintf(v, sizeof v, "v%d", ko->expr);
    snprintf(base, sizeof base, "bo%d", o);
    put(b, "%*s", 2 * b->indent, "");
    switch (ko->dst) {
    case LOOM_KDST_STORE:
      if (si->stream && si->stream[o] && !si->scalar) { /* streamed after the chunk or run */
        int32_t last = cp->loops.n - 1;
        if (last == 0)
          put(b, "so%d[%s - c0] = ", o, si->idx[0]);
        else
          put(b, "so%d[%s] = ", o, si->idx[last]);
      } else {
        put(b, "a%d[", ko->target);
        loom_cg_put_offset(b, si, base, &ko->map);
        put(b, "] = ");
      }
      loom_cg_conv(b, v, x->dtype, k->args[ko->target].dtype);
      break;
    case LOOM_KDST_SCRATCH: {
      char sn[64];
      loom_cg_scratch_name(sn, sizeof sn, si, ko->target);
      put(b, "%s = ", sn);
      loom_cg_conv(b, v, x->dtype, LOOM_DTYPE_F32);
      break;
    }
    case LOOM_KDST_REG: {
      char rn[32];
      loom_cg_reg_name(rn, sizeof rn, si, ko->target);
      put(b, "%s = %s", rn, v);
      break;
    }
    case LOOM_KDST_ROW_REDUCE: {
      char acc[48]; /* f32 lanes (kernel.h): float adds and compares */
      cg_buf t = {0};
      snprintf(acc, sizeof acc, "acc%d[%s]", o, si->lane);
      loom_cg_conv(&t, v, x->dtype, LOOM_DTYPE_F32);
      if (!t.buf.oom) loom_cg_put_combine(b, ko->combine, acc, t.buf.p, false);
      b->buf.oom |= t.buf.oom;
      free(t.buf.p);
      break;
    }
    case LOOM_KDST_COL_REDUCE:
      if (si->block > 1) { /* combined after the block's loop, row by row (emit_col_block) */
        put(b, "bc%d[(%s) * %d + rl] = ", col++, si->scalar ? "0" : si->flat, si->block);
        loom_cg_conv(b, v, x->dtype, LOOM_DTYPE_F64);
      } else {
        loom_cg_put_col_combine(b, si, ko, base, col++, v, x->dtype);
      }
      break;
    default:
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "kernel %s: bad destination %d", k->name,
                        (int)ko->dst);
    }
    put(b, ";\n");
  }
  return LOOM_STATUS_OK;
}

/* Element-level exprs of `need` (the row-level ones were emitted before
 * the loop), then the stage outputs unless `pre`. */
static loom_status emit_body(loom_ctx *ctx, cg_buf *b, const cg_site *si, const uint8_t *need,
                             int32_t col_first, bool pre) {
  const cg_part *cp = si->cp;
  for (int32_t e = 0; e < cp->k->n_exprs; e++)
    if (need[e] && cp->level[e]) LOOM_TRY(loom_cg_emit_expr(ctx, b, si, e));
  return pre ? LOOM_STATUS_OK : emit_outputs(ctx, b, si, col_first);
}

/* Prefetches of the rows ahead for the block of the R loop at i0. */
static void emit_pf(cg_buf *b, const cg_site *si) {
  const loom_kernel *k = si->cp->k;
  for (int32_t q = 0; q < si->n_pf; q++) {
    int32_t e = si->pf[q];
    line(b, "__builtin_prefetch(&a%d[b%d + pf%d + i0], 0, 3);", k->exprs[e].arg, e, e);
  }
}

/* The loop over flat r in [lo, hi) of a one-loop part: blocks of W
 * elements with lane l = r mod W (lo is a multiple of W), then the tail;
 * or a plain loop when there are no lanes (in blocks of 16 when it
 * prefetches, one prefetch per block). */
static loom_status emit_range(loom_ctx *ctx, cg_buf *b, cg_site si, const uint8_t *need,
                              int32_t col_first, int32_t W, const char *lo, const char *hi) {
  if (W <= 1 && si.n_pf == 0) {
    if (si.ivdep) line(b, "LM_IVDEP");
    line(b, "for (int64_t i0 = %s; i0 < %s; i0++) {", lo, hi);
    b->indent++;
    si.idx[0] = si.flat = "i0";
    LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
    b->indent--;
    line(b, "}");
    return LOOM_STATUS_OK;
  }
  bool lanes = W > 1;
  int32_t B = lanes ? W : 16;
  line(b, "int64_t i0 = %s;", lo);
  line(b, "for (; i0 + %d <= %s; i0 += %d) {", B, hi, B);
  b->indent++;
  emit_pf(b, &si);
  /* unrolled first, the lanes would not vectorise, nor would a
   * prefetch block holding a select or a relu: gcc unrolled the 16
   * iterations whole, kept the selects as branches, which its
   * straight-line vectoriser does not take, and random signs then ran
   * the block 6x slower (a squared-ReLU backward, eighteenth session);
   * 1, not 0: clang refuses 0, and both compilers read 1 as "do not
   * unroll" */
  line(b, "#pragma GCC unroll 1");
  if (si.ivdep) line(b, "LM_IVDEP");
  line(b, "for (int l = 0; l < %d; l++) {", B);
  b->indent++;
  line(b, "const int64_t r = i0 + l;");
  si.idx[0] = si.flat = "r";
  si.lane = lanes ? "l" : "0";
  LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
  b->indent--;
  line(b, "}");
  b->indent--;
  line(b, "}");
  if (lanes)
    line(b, "for (int l = 0; l < %d && i0 < %s; i0++, l++) {", W, hi);
  else
    line(b, "for (; i0 < %s; i0++) {", hi);
  b->indent++;
  si.idx[0] = si.flat = "i0";
  LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
  b->indent--;
  line(b, "}");
  return LOOM_STATUS_OK;
}

/* The LOAD exprs of stage s (marked in need) whose rows ahead stage s
 * prefetches (CG_PREFETCH_MIN_BYTES), into pf[]; emits their distances
 * pf<e> (0 on the last rows: the current row again). */
static int32_t prefetch_loads(cg_buf *b, const cg_part *cp, int32_t s, const uint8_t *need,
                              int32_t *pf) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  const cg_loops *lp = &cp->loops;
  if (lp->n != 1 || part->stages[s].kind != LOOM_KSTAGE_ROW) return 0;
  int64_t rows = loom_kpart_rows(part);
  int32_t n = 0;
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    /* guarded loads are left out: their rows may start outside the argument */
    if (!need[e] || x->kind != LOOM_KX_LOAD || x->n_a || k->args[x->arg].temp) continue;
    int64_t sz = (int64_t)loom_dtype_size(x->dtype), st;
    if (!loom_cg_p_flat(&x->map, part, &st) || st <= 0 || x->map.r[lp->dim[0]] != 1 ||
        k->args[x->arg].numel * sz < CG_PREFETCH_MIN_BYTES)
      continue;
    bool dup = false; /* the same row loaded by an earlier stage or expr */
    for (int32_t t = 0; t <= s && !dup; t++) {
      uint8_t *m = calloc((size_t)k->n_exprs + 1, 1);
      if (!m) return n;
      for (int32_t o = 0; o < part->stages[t].n_out; o++)
        loom_cg_mark_reach(k, part->stages[t].out[o].expr, m);
      for (int32_t f = 0; f < k->n_exprs && !dup; f++) {
        const loom_kexpr *y = &k->exprs[f];
        if (!m[f] || y->kind != LOOM_KX_LOAD || y->arg != x->arg) continue;
        if (y->map.base == x->map.base && (t < s || f < e)) dup = true;
      }
      free(m);
    }
    if (dup) continue;
    int64_t row_bytes = lp->extent[0] * sz;
    int64_t ahead = (CG_PREFETCH_AHEAD + row_bytes - 1) / row_bytes;
    if (ahead < 1) ahead = 1;
    line(b, "const int64_t pf%d = row + %lld < %lld ? (int64_t)%lld : 0; /* prefetch ahead */", e,
         (long long)ahead, (long long)rows, (long long)(ahead * st));
    pf[n++] = e;
  }
  return n;
}

/* True if every innermost run of map m over a part with several loops
 * covers whole 64-byte lines (an aligned tensor assumed): the runs are at
 * most a chunk long, a multiple of 16 floats, and start at multiples of
 * 16 elements. Streaming stores of partial lines would mix with ordinary
 * ones; whole lines need no head and tail. */
static bool runs_whole_lines(const cg_part *cp, const loom_kmap *m) {
  const cg_loops *lp = &cp->loops;
  const loom_kpart *part = cp->part;
  int32_t last = lp->n - 1;
  if (lp->extent[last] % 16 != 0 || lp->extent[last] > CG_CHUNK || m->base % 16 != 0) return false;
  for (int32_t i = 0; i < part->p_rank; i++)
    if (part->p_shape[i] > 1 && m->p[i] % 16 != 0) return false;
  for (int32_t d = 0; d < last; d++)
    if (m->r[lp->dim[d]] % 16 != 0) return false;
  return true;
}

/* Marks in stream[] the outputs of ROW stage st that go through streaming
 * stores (CG_STREAM_MIN_BYTES, CG_STREAM_KERNEL_BYTES), unit stride along
 * the innermost loop: in chunks of the one loop of a one-loop part, or
 * run by run of the innermost loop of a loop nest whose runs are whole
 * lines (runs_whole_lines: a rotary embedding's half heads) and whose
 * loads (need: the stage's exprs) are not guarded: a guarded load keeps
 * the loop scalar (LM_GUARDED), and the run's vector copy out of the
 * buffer then waits on its scalar stores (the `rotary` workload's concat
 * of slices ran 2.5 ms a run on one thread through the cache, 3.7
 * streamed). 1, or 2 for an output the run may compute in an input's
 * memory (kernel/in_place.h), which streams only when it is not (see
 * emit_stream_flush); returns how many. */
static int32_t stream_outputs(const cg_part *cp, const loom_kstage *st, const uint8_t *need,
                              uint8_t *stream) {
  const loom_kernel *k = cp->k;
  const cg_loops *lp = &cp->loops;
  int32_t n = 0, last = lp->n - 1;
  bool guarded = false;
  for (int32_t e = 0; e < k->n_exprs; e++)
    guarded |= need[e] && k->exprs[e].kind == LOOM_KX_LOAD && k->exprs[e].n_a == 1;
  int64_t written = 0; /* the kernel's outputs, in bytes */
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].is_output && !k->args[a].temp)
      written += k->args[a].numel * (int64_t)loom_dtype_size(k->args[a].dtype);
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    stream[o] = 0;
    if (st->kind != LOOM_KSTAGE_ROW || lp->n < 1 || ko->dst != LOOM_KDST_STORE) continue;
    const loom_karg *g = &k->args[ko->target];
    if (g->dtype != LOOM_DTYPE_F32 ||
        (g->numel * 4 < CG_STREAM_MIN_BYTES && written < CG_STREAM_KERNEL_BYTES) ||
        ko->map.r[lp->dim[last]] != 1)
      continue;
    if (last == 0 ? lp->extent[0] < CG_STREAM_MIN_ROW : guarded || !runs_whole_lines(cp, &ko->map))
      continue;
    stream[o] = loom_kernel_in_place_inputs(k, ko->target, NULL, 0) > 0 ? 2 : 1;
    n++;
  }
  return n;
}

/* The chunk buffers of streamed outputs (ch floats each). */
static void emit_stream_decl(cg_buf *b, const cg_site *si, int32_t ch) {
  const loom_kstage *st = &si->cp->part->stages[si->stage];
  for (int32_t o = 0; si->stream && o < st->n_out; o++)
    if (si->stream[o]) line(b, "float so%d[%d] __attribute__((aligned(64)));", o, ch);
}

/* Streams the chunk [c0, c1) of every streamed output (of a loop nest:
 * the innermost loop's run just computed) to memory. An
 * output computed in place of an input it reads (the same pointer: an
 * optimizer's state) is stored the ordinary way instead: its lines were
 * just read, so a store costs no read for ownership, and a streaming
 * store would evict them (the in-place AdamW of `loom bench adamw` ran
 * 1.5-2x faster so). */
static void emit_stream_flush(cg_buf *b, cg_site si) {
  const loom_kernel *k = si.cp->k;
  const loom_kstage *st = &si.cp->part->stages[si.stage];
  const cg_loops *lp = &si.cp->loops;
  int32_t last = lp->n - 1;
  char count[32] = "c1 - c0";
  if (last == 0) {
    si.idx[0] = si.flat = "c0";
  } else {
    si.idx[last] = "0";
    snprintf(count, sizeof count, "%lld", (long long)lp->extent[last]);
  }
  for (int32_t o = 0; si.stream && o < st->n_out; o++) {
    if (!si.stream[o]) continue;
    int32_t t = st->out[o].target;
    char base[24];
    snprintf(base, sizeof base, "bo%d", o);
    cg_buf off = {0}; /* the run's first element in a<t> */
    loom_cg_put_offset(&off, &si, base, &st->out[o].map);
    b->buf.oom |= off.buf.oom || !off.buf.p;
    const char *at = off.buf.p ? off.buf.p : "0";
    put(b, "%*s", 2 * b->indent, "");
    int32_t *from = si.stream[o] == 2 ? malloc(sizeof(int32_t) * (size_t)k->n_args) : NULL;
    int32_t n = from ? loom_kernel_in_place_inputs(k, t, from, k->n_args) : 0;
    for (int32_t c = 0; c < n; c++)
      put(b, "%s(uintptr_t)a%d == (uintptr_t)a%d", c ? " || " : "if (", t, from[c]);
    if (n)
      put(b, ")\n%*s  for (int64_t q = 0; q < %s; q++) (&a%d[%s])[q] = so%d[q];\n%*selse\n%*s  ",
          2 * b->indent, "", count, t, at, o, 2 * b->indent, "", 2 * b->indent, "");
    put(b, "%s(&a%d[%s], so%d, %s);\n", last == 0 ? "lm_stream_f32" : "lm_stream_run_f32", t, at,
        o, count);
    free(off.buf.p);
    free(from);
  }
}

/* True if KEEP expr e counts consecutive positions along the part's one
 * loop: one operand an i64 INDEX with stride 1 there, the others
 * row-level. */
static bool keep_block(const cg_part *cp, int32_t e) {
  const loom_kernel *k = cp->k;
  const loom_kexpr *x = &k->exprs[e];
  if (x->kind != LOOM_KX_KEEP || cp->loops.n != 1) return false;
  int32_t n_el = 0;
  for (int32_t i = 0; i < x->n_a; i++) {
    const loom_kexpr *a = &k->exprs[x->a[i]];
    if (loom_cg_is_float(a->dtype)) return false;
    if (!cp->level[x->a[i]]) continue;
    if (a->kind != LOOM_KX_INDEX || a->dtype != LOOM_DTYPE_I64 ||
        a->map.r[cp->loops.dim[0]] != 1)
      return false;
    n_el++;
  }
  return n_el == 1;
}

/* The R loops of a part with several (a map no merge could fold, as a
 * per-channel gain over GroupNorm's (C/G, H*W)): a loop per dim, the flat
 * index counted along. When the innermost extent is a multiple of the
 * lanes, it runs in blocks of W with lane l = flat mod W, as emit_range
 * does, so that the block vectorises; else element by element with lane
 * f mod W. The lanes, hence the results, are the same either way. */
static loom_status emit_nested(loom_ctx *ctx, cg_buf *b, cg_site si, const uint8_t *need,
                               int32_t col_first, int32_t W) {
  static const char *const ix[LOOM_MAX_RANK] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
  const cg_loops *lp = &si.cp->loops;
  int32_t last = lp->n - 1;
  bool blocks = W > 1 && lp->extent[last] % W == 0;
  char lane[48];
  snprintf(lane, sizeof lane, "(f %% %d)", W);
  for (int32_t d = 0; d < lp->n; d++) si.idx[d] = ix[d];
  si.flat = "f";
  si.lane = W > 1 ? lane : "0";
  line(b, "int64_t f = 0;");
  for (int32_t d = 0; d < last; d++) {
    line(b, "for (int64_t %s = 0; %s < %lld; %s++) {", ix[d], ix[d], (long long)lp->extent[d],
         ix[d]);
    b->indent++;
  }
  emit_stream_decl(b, &si, (int32_t)lp->extent[last]); /* one run (runs_whole_lines) */
  if (blocks) {
    line(b, "for (int64_t ib = 0; ib < %lld; ib += %d) {", (long long)lp->extent[last], W);
    b->indent++;
    line(b, "#pragma GCC unroll 1");
    if (si.ivdep) line(b, "LM_IVDEP");
    line(b, "for (int l = 0; l < %d; l++) {", W);
    b->indent++;
    line(b, "const int64_t %s = ib + l, fl = f + l;", ix[last]);
    line(b, "(void)fl;");
    si.flat = "fl";
    si.lane = "l";
    LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
    b->indent--;
    line(b, "}");
    line(b, "f += %d;", W);
    b->indent--;
    line(b, "}");
  } else {
    if (si.ivdep) line(b, "LM_IVDEP");
    line(b, "for (int64_t %s = 0; %s < %lld; %s++) {", ix[last], ix[last],
         (long long)lp->extent[last], ix[last]);
    b->indent++;
    LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
    line(b, "f++;");
    b->indent--;
    line(b, "}");
  }
  emit_stream_flush(b, si);
  for (int32_t d = 0; d < last; d++) {
    b->indent--;
    line(b, "}");
  }
  return LOOM_STATUS_OK;
}

/* A one-loop ROW stage with fast exprs, chunk by chunk: the fast exprs
 * (and what they need) for the whole chunk into stack buffers, exact libm
 * where flagged, then the stage's loop over the chunk reading them back.
 * (Running the stage with the fast exprs inline and redoing a flagged
 * chunk measured 2x slower: the separate pass streams better.) */
static loom_status emit_chunked(loom_ctx *ctx, cg_buf *b, cg_site si, int8_t *fast,
                                int32_t col_first, int32_t W) {
  const cg_part *cp = si.cp;
  const loom_kernel *k = cp->k;
  const loom_kstage *st = &cp->part->stages[si.stage];
  long long n = (long long)cp->loops.extent[0];
  int32_t ch = n < CG_CHUNK ? (int32_t)(n > 0 ? n : 1) : CG_CHUNK; /* one chunk for short rows */
  size_t ne = (size_t)k->n_exprs + 1;
  uint8_t *pre = calloc(ne, 1), *main_need = calloc(ne, 1);
  if (!pre || !main_need) {
    free(pre);
    free(main_need);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
  }
  bool any_fn = false;
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (fast[e] && fast[e] != CG_KEEP_BLOCK) {
      loom_cg_mark_reach(k, e, pre);
      any_fn = true;
    }
  for (int32_t o = 0; o < st->n_out; o++) loom_cg_mark_reach_stop(k, st->out[o].expr, main_need, fast);
  loom_status status = LOOM_STATUS_OK;
  line(b, "for (int64_t c0 = 0; c0 < %lld; c0 += %d) {", n, ch);
  b->indent++;
  line(b, "const int64_t c1 = c0 + %d < %lld ? c0 + %d : %lld;", ch, n, ch, n);
  emit_stream_decl(b, &si, ch);
  for (int32_t e = 0; e < k->n_exprs && status == LOOM_STATUS_OK; e++) {
    if (fast[e] != CG_KEEP_BLOCK) continue;
    const loom_kexpr *x = &k->exprs[e];
    line(b, "uint32_t w%d_[%d];", e, ch + 8);
    line(b, "const uint32_t *w%d;", e);
    line(b, "{ /* dropout words: one Philox block per four consecutive counters */");
    b->indent++;
    cg_site s0 = si;
    s0.idx[0] = s0.flat = "c0";
    for (int32_t i = 0; i < x->n_a && status == LOOM_STATUS_OK; i++)
      if (cp->level[x->a[i]]) status = loom_cg_emit_expr(ctx, b, &s0, x->a[i]);
    put(b, "%*sconst uint64_t j0 = ", 2 * b->indent, "");
    for (int32_t i = 0; i < x->n_a; i++) put(b, "(uint64_t)v%d + ", x->a[i]);
    put(b, "%lluull;\n", (unsigned long long)x->offset);
    line(b, "const int64_t nq = (int64_t)(((j0 & 3) + (uint64_t)(c1 - c0) + 3) >> 2);");
    line(b, "lm_philox_run(%lluull, j0 >> 2, nq, w%d_); /* blocks mod 2^62, even past a wrap */",
         (unsigned long long)x->seed, e);
    line(b, "w%d = w%d_ + (j0 & 3);", e, e);
    b->indent--;
    line(b, "}");
  }
  if (!any_fn) {
    si.fast = fast;
    si.tmode = TM_BUF;
    if (status == LOOM_STATUS_OK)
      status = emit_range(ctx, b, si, main_need, col_first, W, "c0", "c1");
    emit_stream_flush(b, si);
    b->indent--;
    line(b, "}");
    free(pre);
    free(main_need);
    return status;
  }
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (fast[e] && fast[e] != CG_KEEP_BLOCK) line(b, "float t%d[%d];", e, ch);
  line(b, "uint8_t tb[%d];", ch);
  line(b, "int tbad = 0;");
  line(b, "for (int64_t i0 = c0; i0 < c1; i0++) { /* fast pass */");
  b->indent++;
  line(b, "int bad = 0;");
  si.idx[0] = si.flat = "i0";
  si.fast = fast;
  si.tmode = TM_FAST;
  if (status == LOOM_STATUS_OK) status = emit_body(ctx, b, &si, pre, col_first, true);
  line(b, "tb[i0 - c0] = (uint8_t)bad;");
  line(b, "tbad |= bad;");
  b->indent--;
  line(b, "}");
  line(b, "if (tbad) /* exact libm where the fast value might round differently */");
  line(b, "  for (int64_t i0 = c0; i0 < c1; i0++) {");
  b->indent += 2;
  line(b, "if (!tb[i0 - c0]) continue;");
  si.tmode = TM_EXACT;
  if (status == LOOM_STATUS_OK) status = emit_body(ctx, b, &si, pre, col_first, true);
  b->indent--;
  line(b, "}");
  b->indent--;
  si.tmode = TM_BUF;
  if (status == LOOM_STATUS_OK)
    status = emit_range(ctx, b, si, main_need, col_first, W, "c0", "c1");
  emit_stream_flush(b, si);
  b->indent--;
  line(b, "}");
  free(pre);
  free(main_need);
  return status;
}

/* True if stage st (its exprs marked in need) gets LM_IVDEP: it loads
 * or stores an argument that may share memory with another (the
 * parameters are not restrict, and gcc vectorises nothing with a few such
 * pairs: AdamW's three); and it has no reductions, whose accumulators
 * (one lane, or a column partial at a map's offset) may carry a
 * dependence from one element to the next. */
static bool stage_ivdep(const cg_part *cp, const loom_kstage *st, const uint8_t *need) {
  const loom_kernel *k = cp->k;
  bool tied = false;
  if (!cp->tied) return false;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst == LOOM_KDST_ROW_REDUCE || ko->dst == LOOM_KDST_COL_REDUCE) return false;
    tied |= ko->dst == LOOM_KDST_STORE && cp->tied[ko->target];
  }
  for (int32_t e = 0; e < k->n_exprs; e++)
    tied |= need[e] && k->exprs[e].kind == LOOM_KX_LOAD && cp->tied[k->exprs[e].arg];
  return tied;
}

/* The loop over a short row inside a row block, unrolled in the text
 * (gcc's unroll pragma left a store loop rolled): the lane accumulators
 * become scalars and what vectorises is the loop over the block's rows
 * around it; lane l takes r = l mod W, as in emit_range. */
static loom_status emit_unrolled(loom_ctx *ctx, cg_buf *b, cg_site si, const uint8_t *need,
                                 int32_t col_first, int32_t W) {
  si.idx[0] = si.flat = "i0";
  char lane[32];
  for (int64_t r = 0; r < si.cp->loops.extent[0]; r++) {
    snprintf(lane, sizeof lane, "%lld", (long long)(W > 1 ? r % W : 0));
    si.lane = lane;
    line(b, "{");
    b->indent++;
    line(b, "const int64_t i0 = %lld;", (long long)r);
    LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
    b->indent--;
    line(b, "}");
  }
  return LOOM_STATUS_OK;
}

static loom_status emit_stage(loom_ctx *ctx, cg_buf *b, const cg_part *cp, int32_t s,
                              uint8_t *need, int32_t col_first, int32_t block) {
  const loom_kernel *k = cp->k;
  const loom_kstage *st = &cp->part->stages[s];
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  memset(need, 0, (size_t)k->n_exprs + 1);
  for (int32_t o = 0; o < st->n_out; o++) loom_cg_mark_reach(k, st->out[o].expr, need);

  line(b, "{ /* stage %d (%s) */", s, scalar ? "scalar: once per row" : "row: over R");
  b->indent++;
  /* row bases of every map in the stage */
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    if (!need[e] || (x->kind != LOOM_KX_LOAD && x->kind != LOOM_KX_INDEX)) continue;
    put(b, "%*sconst int64_t b%d = ", 2 * b->indent, "", e);
    loom_cg_put_row_base(b, cp, &x->map);
    put(b, ";\n");
  }
  bool has_rr = false;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst == LOOM_KDST_STORE || ko->dst == LOOM_KDST_COL_REDUCE) {
      put(b, "%*sconst int64_t bo%d = ", 2 * b->indent, "", o);
      loom_cg_put_row_base(b, cp, &ko->map);
      put(b, ";\n");
    }
    has_rr |= ko->dst == LOOM_KDST_ROW_REDUCE;
  }
  cg_site si = {
      .cp = cp, .stage = s, .scalar = scalar, .flat = "0", .lane = "0", .block = block};
  si.ivdep = stage_ivdep(cp, st, need);
  /* row-level exprs: hoisted out of the R loop */
  for (int32_t e = 0; e < k->n_exprs; e++)
    if (need[e] && (scalar || !cp->level[e])) LOOM_TRY(loom_cg_emit_expr(ctx, b, &si, e));
  if (scalar) {
    LOOM_TRY(emit_outputs(ctx, b, &si, col_first));
    b->indent--;
    line(b, "}");
    return LOOM_STATUS_OK;
  }
  int32_t W = cp->part->sched.vector_width > 0 ? cp->part->sched.vector_width : 1;
  if (!has_rr) W = 1;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst != LOOM_KDST_ROW_REDUCE) continue;
    line(b, "float acc%d[%d]; /* f32 lanes of row reduction %d */", o, W, o);
    if (block > 1) line(b, "#pragma GCC unroll %d", W);
    line(b, "for (int l = 0; l < %d; l++) acc%d[l] = %s;", W, o, loom_cg_ident(ko->combine, false));
  }
  const cg_loops *lp = &cp->loops;
  if (lp->n == 0) { /* one element per row */
    LOOM_TRY(emit_body(ctx, b, &si, need, col_first, false));
  } else if (block > 1) { /* loom_cg_row_block: one loop, nothing fast or streamed */
    LOOM_TRY(emit_unrolled(ctx, b, si, need, col_first, W));
  } else if (lp->n == 1) {
    int8_t *fast = calloc((size_t)k->n_exprs + 1, 1);
    uint8_t *stream = calloc((size_t)st->n_out + 1, 1);
    int32_t *pf = calloc((size_t)k->n_exprs + 1, sizeof(int32_t));
    if (!fast || !stream || !pf) {
      free(fast);
      free(stream);
      free(pf);
      return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
    }
    si.n_pf = prefetch_loads(b, cp, s, need, pf);
    si.pf = pf;
    bool any = false;
    for (int32_t e = 0; e < k->n_exprs; e++) {
      fast[e] = !need[e] || !cp->level[e] ? 0
                : keep_block(cp, e)       ? CG_KEEP_BLOCK
                                          : loom_cg_fast_kind(k, e);
      any |= fast[e] != 0;
    }
    char n[32];
    snprintf(n, sizeof n, "%lld", (long long)lp->extent[0]);
    int32_t n_stream = stream_outputs(cp, st, need, stream);
    si.stream = n_stream ? stream : NULL;
    loom_status st2;
    if (any) {
      st2 = emit_chunked(ctx, b, si, fast, col_first, W);
    } else if (n_stream) { /* chunks only for the streamed stores */
      long long ne = (long long)lp->extent[0];
      int32_t ch = ne < CG_CHUNK ? (int32_t)ne : CG_CHUNK;
      line(b, "for (int64_t c0 = 0; c0 < %lld; c0 += %d) {", ne, ch);
      b->indent++;
      line(b, "const int64_t c1 = c0 + %d < %lld ? c0 + %d : %lld;", ch, ne, ch, ne);
      emit_stream_decl(b, &si, ch);
      st2 = emit_range(ctx, b, si, need, col_first, W, "c0", "c1");
      emit_stream_flush(b, si);
      b->indent--;
      line(b, "}");
    } else {
      st2 = emit_range(ctx, b, si, need, col_first, W, "0", n);
    }
    if (n_stream) line(b, "if (row + 1 == row_end) lm_sfence(); /* streamed stores done */");
    free(fast);
    free(stream);
    free(pf);
    LOOM_TRY(st2);
  } else {
    uint8_t *stream = calloc((size_t)st->n_out + 1, 1);
    if (!stream) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating C");
    int32_t n_stream = stream_outputs(cp, st, need, stream);
    si.stream = n_stream ? stream : NULL;
    loom_status st2 = emit_nested(ctx, b, si, need, col_first, W);
    if (n_stream) line(b, "if (row + 1 == row_end) lm_sfence(); /* streamed stores done */");
    free(stream);
    LOOM_TRY(st2);
  }
  /* lanes folded left in lane order, rounded to f32 */
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst != LOOM_KDST_ROW_REDUCE) continue;
    line(b, "{");
    b->indent++;
    line(b, "float res = acc%d[0];", o);
    char a[32], rn[32];
    snprintf(a, sizeof a, "acc%d[l]", o);
    if (block > 1) line(b, "#pragma GCC unroll %d", W);
    put(b, "%*sfor (int l = 1; l < %d; l++) ", 2 * b->indent, "", W);
    loom_cg_put_combine(b, ko->combine, "res", a, false);
    put(b, ";\n");
    loom_cg_reg_name(rn, sizeof rn, &si, ko->target);
    line(b, "%s = (float)res;", rn);
    b->indent--;
    line(b, "}");
  }
  b->indent--;
  line(b, "}");
  return LOOM_STATUS_OK;
}

loom_status loom_cg_emit_stage(loom_ctx *ctx, cg_buf *b, const cg_part *cp, int32_t s,
                              uint8_t *need, int32_t col_first) {
  return emit_stage(ctx, b, cp, s, need, col_first, 0);
}

/* ---- row blocks ------------------------------------------------------------ */

void loom_cg_reg_name(char *out, size_t n, const cg_site *si, int32_t r) {
  if (si->block > 1)
    snprintf(out, n, "reg%d[rl]", r);
  else
    snprintf(out, n, "reg%d", r);
}

void loom_cg_scratch_name(char *out, size_t n, const cg_site *si, int32_t s) {
  const char *idx = si->scalar ? "0" : si->flat;
  if (si->block > 1)
    snprintf(out, n, "bs%d[(%s) * %d + rl]", s, idx, si->block);
  else
    snprintf(out, n, "s%d[%s]", s, idx);
}

int32_t loom_cg_row_block(const cg_part *cp) {
  const loom_kernel *k = cp->k;
  const loom_kpart *part = cp->part;
  int32_t v = part->sched.rows_per_block;
  if (v <= 1 || cp->loops.n != 1 || cp->loops.extent[0] > CG_BLOCK_MAX_ROW ||
      loom_kpart_rows(part) < v)
    return 1;
  uint8_t *m = calloc((size_t)k->n_exprs + 1, 1);
  if (!m) return 1; /* only a schedule */
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++)
      loom_cg_mark_reach(k, part->stages[s].out[o].expr, m);
  for (int32_t e = 0; e < k->n_exprs && v > 1; e++)
    if (m[e] && (k->exprs[e].kind == LOOM_KX_KEEP || loom_cg_fast_kind(k, e))) v = 1;
  free(m);
  return v;
}

/* The part's domain indices p<i> of row `row` (when its maps use them). */
void loom_cg_emit_row_pidx(cg_buf *b, const cg_part *cp) {
  if (!cp->need_pidx) return;
  line(b, "int64_t q = row;");
  for (int32_t i = cp->part->p_rank - 1; i >= 0; i--) {
    line(b, "const int64_t p%d = q %% %lld;", i, (long long)cp->part->p_shape[i]);
    if (i) line(b, "q /= %lld;", (long long)cp->part->p_shape[i]);
  }
}

/* Stage s's column reductions of a row block, from its buffers bc<col>
 * into the tile's partials, row by row and element by element in the
 * order the row loop combines them. */
static void emit_col_block(cg_buf *b, const cg_part *cp, int32_t s, int32_t V) {
  const loom_kstage *st = &cp->part->stages[s];
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  int32_t col = loom_cg_col_index(cp->k, cp->index, s);
  cg_site si = {.cp = cp, .stage = s, .scalar = scalar, .flat = "i0", .lane = "0"};
  si.idx[0] = "i0";
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
    char base[24], v[48];
    snprintf(base, sizeof base, "bo%d", o);
    snprintf(v, sizeof v, "bc%d[i0 * %d + rl]", col, V);
    line(b, "for (int64_t rl = 0; rl < %d; rl++) {", V);
    b->indent++;
    line(b, "const int64_t row = row0 + rl;");
    line(b, "(void)row;");
    loom_cg_emit_row_pidx(b, cp);
    put(b, "%*sconst int64_t %s = ", 2 * b->indent, "", base);
    loom_cg_put_row_base(b, cp, &ko->map);
    put(b, ";\n");
    line(b, "for (int64_t i0 = 0; i0 < %lld; i0++) {",
         scalar ? 1LL : (long long)cp->loops.extent[0]);
    b->indent++;
    put(b, "%*s", 2 * b->indent, "");
    loom_cg_put_col_combine(b, &si, ko, base, col, v, LOOM_DTYPE_F64);
    put(b, ";\n");
    b->indent--;
    line(b, "}");
    b->indent--;
    line(b, "}");
    col++;
  }
}

loom_status loom_cg_emit_row_blocks(loom_ctx *ctx, cg_buf *b, const cg_part *cp, uint8_t *need) {
  const loom_kpart *part = cp->part;
  int32_t V = loom_cg_row_block(cp);
  line(b, "int64_t row0 = row_begin;");
  if (V <= 1) return LOOM_STATUS_OK;
  long long R = (long long)cp->loops.extent[0];
  line(b, "{ /* rows in blocks of %d, one row per vector lane; the rest row by row */", V);
  b->indent++;
  for (int32_t s = 0; s < part->n_scratch; s++)
    line(b, "float bs%d[%lld] __attribute__((aligned(64)));", s, R * V);
  int32_t col = loom_cg_col_index(cp->k, cp->index, 0);
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++)
      if (part->stages[s].out[o].dst == LOOM_KDST_COL_REDUCE)
        line(b, "double bc%d[%lld] __attribute__((aligned(64)));", col++, R * V);
  line(b, "for (; row0 + %d <= row_end; row0 += %d) {", V, V);
  b->indent++;
  for (int32_t r = 0; r < part->n_regs; r++)
    line(b, "%s reg%d[%d];", loom_cg_ctype(cp->reg_dt[r]), r, V);
  for (int32_t s = 0; s < part->n_stages; s++) {
    /* rolled: a loop unrolled whole lets gcc carry values into the next
     * stage's loop through phis, which then does not vectorise */
    line(b, "#pragma GCC unroll 1");
    line(b, "for (int64_t rl = 0; rl < %d; rl++) {", V);
    b->indent++;
    line(b, "const int64_t row = row0 + rl;");
    line(b, "(void)row;");
    loom_cg_emit_row_pidx(b, cp);
    LOOM_TRY(emit_stage(ctx, b, cp, s, need, loom_cg_col_index(cp->k, cp->index, s), V));
    b->indent--;
    line(b, "}");
    emit_col_block(b, cp, s, V);
  }
  b->indent--;
  line(b, "}");
  b->indent--;
  line(b, "}");
  return LOOM_STATUS_OK;
}

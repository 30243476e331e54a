/* The kernel IR: hand-built kernels through verify, print, workspace layout
 * and the interpreter, with answers computed here independently (including
 * the exact lane order of row reductions and the tile order of column
 * reductions); and the verifier rejecting broken kernels. */
#include "common.h"

#include "core/ctx.h"
#include "kernel/interp.h"
#include "kernel/kmath.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a tiny kernel builder ------------------------------------------------ */

typedef struct kb {
  loom_kernel k;
  loom_karg args[16];
  loom_kexpr exprs[64];
  loom_kpart parts[4];
  loom_kstage stages[4][8];
  loom_kout outs[4][8][8];
} kb;

static void kb_init(kb *b, const char *name) {
  memset(b, 0, sizeof *b);
  snprintf(b->k.name, sizeof b->k.name, "%s", name);
  b->k.args = b->args;
  b->k.exprs = b->exprs;
  b->k.parts = b->parts;
}

static int32_t kb_arg(kb *b, loom_dtype dt, int64_t numel, bool out, bool temp) {
  b->args[b->k.n_args] = (loom_karg){.value = b->k.n_args, .dtype = dt, .is_output = out,
                                     .temp = temp, .numel = numel};
  return b->k.n_args++;
}

static int32_t kb_expr(kb *b, loom_kexpr e) {
  b->exprs[b->k.n_exprs] = e;
  return b->k.n_exprs++;
}

static loom_kmap map2(int64_t base, int64_t p0, int64_t r0) {
  loom_kmap m = {.base = base};
  m.p[0] = p0;
  m.r[0] = r0;
  return m;
}

static int32_t kb_load(kb *b, int32_t arg, loom_dtype dt, loom_kmap m) {
  return kb_expr(b, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = dt, .arg = arg, .map = m});
}
static int32_t kb_const(kb *b, loom_dtype dt, double c) {
  return kb_expr(b, (loom_kexpr){.kind = LOOM_KX_CONST, .dtype = dt, .c = c});
}
static int32_t kb_op(kb *b, loom_op op, loom_dtype dt, int32_t n, int32_t a0, int32_t a1,
                     int32_t a2) {
  return kb_expr(b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = dt, .op = op, .n_a = n,
                                 .a = {a0, a1, a2}});
}
static int32_t kb_reg(kb *b, int32_t r) {
  return kb_expr(b, (loom_kexpr){.kind = LOOM_KX_REG, .dtype = LOOM_DTYPE_F32, .reg = r});
}

/* Adds a part (its stages are added with kb_stage). */
static loom_kpart *kb_part(kb *b, int64_t rows, int64_t row_len, int64_t rpt, int32_t w,
                           int32_t phase) {
  int32_t pi = b->k.n_parts++;
  loom_kpart *p = &b->parts[pi];
  p->p_rank = rows >= 0 ? 1 : 0;
  p->p_shape[0] = rows;
  p->r_rank = row_len >= 0 ? 1 : 0;
  p->r_shape[0] = row_len;
  p->stages = b->stages[pi];
  p->sched = (loom_kschedule){.rows_per_tile = rpt, .vector_width = w};
  p->phase = phase;
  return p;
}

static loom_kstage *kb_stage(kb *b, loom_kstage_kind kind) {
  int32_t pi = b->k.n_parts - 1;
  loom_kpart *p = &b->parts[pi];
  loom_kstage *s = &p->stages[p->n_stages];
  s->kind = kind;
  s->out = b->outs[pi][p->n_stages];
  p->n_stages++;
  return s;
}

static void kb_out(loom_kstage *s, loom_kdst_kind dst, int32_t expr, int32_t target, loom_kmap m,
                   loom_op combine) {
  s->out[s->n_out++] =
      (loom_kout){.dst = dst, .expr = expr, .target = target, .map = m, .combine = combine};
}

/* ---- softmax over rows, with scratch and two row reductions ---------------- */

/* The sum the spec defines: W lanes in f32, folded in lane order. */
static float lane_sum(const float *v, int64_t n, int32_t w) {
  float acc[16] = {0};
  for (int64_t i = 0; i < n; i++) acc[i % w] += v[i];
  float r = acc[0];
  for (int32_t l = 1; l < w; l++) r += acc[l];
  return r;
}

static void test_softmax(loom_ctx *ctx, int64_t rows, int64_t n, int32_t w) {
  kb b;
  kb_init(&b, "softmax_k");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, rows * n, false, false);
  int32_t ay = kb_arg(&b, LOOM_DTYPE_F32, rows * n, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, n, 1));
  int32_t m = kb_reg(&b, 0);
  int32_t e = kb_op(&b, LOOM_OP_EXP, LOOM_DTYPE_F32, 1,
                    kb_op(&b, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, x, m, 0), 0, 0);
  int32_t s0 = kb_expr(&b, (loom_kexpr){.kind = LOOM_KX_SCRATCH, .dtype = LOOM_DTYPE_F32});
  int32_t y = kb_op(&b, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, s0, kb_reg(&b, 1), 0);
  loom_kpart *p = kb_part(&b, rows, n, 2, w, 0);
  p->n_regs = 2;
  p->n_scratch = 1;
  loom_kstage *st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_ROW_REDUCE, x, 0, (loom_kmap){0}, LOOM_OP_MAXIMUM);
  st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_SCRATCH, e, 0, (loom_kmap){0}, LOOM_OP_ADD);
  kb_out(st, LOOM_KDST_ROW_REDUCE, e, 1, (loom_kmap){0}, LOOM_OP_ADD);
  st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_STORE, y, ay, map2(0, n, 1), LOOM_OP_ADD);
  CHECK_OK(ctx, loom_kernel_verify(ctx, &b.k));

  float *xv = malloc(sizeof(float) * (size_t)(rows * n));
  float *yv = calloc((size_t)(rows * n), sizeof(float));
  float *ev = malloc(sizeof(float) * (size_t)n);
  loom_test_rng rng = {(uint64_t)(rows * 131 + n)};
  for (int64_t i = 0; i < rows * n; i++) xv[i] = (float)loom_test_uniform(&rng, -4, 4);
  void *args[2] = {xv, yv};
  CHECK_OK(ctx, loom_kernel_interpret(ctx, &b.k, args));
  int bad = 0;
  for (int64_t r = 0; r < rows; r++) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = xv[r * n + j] > mx ? xv[r * n + j] : mx;
    /* x - m rounds to f32 before exp: one rounding per expression; exp of
     * an f32 into an f32 is the kernel IR's own lm_expf (kernel/kmath.h),
     * within an ulp of libm's */
    for (int64_t j = 0; j < n; j++) {
      float d = xv[r * n + j] - mx;
      ev[j] = lm_expf(d);
      float lib = (float)exp((double)d);
      bad += fabsf(ev[j] - lib) > ldexpf(fabsf(lib), -23);
    }
    float s = lane_sum(ev, n, w);
    for (int64_t j = 0; j < n; j++) {
      float want = (float)((double)ev[j] / (double)s);
      if (memcmp(&want, &yv[r * n + j], sizeof want) != 0) bad++;
    }
  }
  CHECK(bad == 0); /* bit for bit */
  if (bad) fprintf(stderr, "softmax rows %lld n %lld w %d: %d mismatches\n", (long long)rows,
                   (long long)n, w, bad);
  free(xv);
  free(yv);
  free(ev);
}

/* ---- column sums in tile order, a temp, and a later phase ----------------- */

static void test_col_reduce(loom_ctx *ctx, int64_t rows, int64_t n, int64_t rpt) {
  kb b;
  kb_init(&b, "colsum");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, rows * n, false, false);
  int32_t asum = kb_arg(&b, LOOM_DTYPE_F32, n, true, false);
  int32_t atot = kb_arg(&b, LOOM_DTYPE_F32, 1, false, true); /* temp */
  int32_t amean = kb_arg(&b, LOOM_DTYPE_F32, 1, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, n, 1));
  int32_t rsum = kb_reg(&b, 0);
  int32_t t = kb_load(&b, atot, LOOM_DTYPE_F32, (loom_kmap){0});
  int32_t inv = kb_const(&b, LOOM_DTYPE_F32, 1.0 / (double)(rows * n));
  int32_t mean = kb_op(&b, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, t, inv, 0);

  loom_kpart *p = kb_part(&b, rows, n, rpt, 4, 0);
  p->n_regs = 1;
  loom_kstage *st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_COL_REDUCE, x, asum, map2(0, 0, 1), LOOM_OP_ADD);
  kb_out(st, LOOM_KDST_ROW_REDUCE, x, 0, (loom_kmap){0}, LOOM_OP_ADD);
  st = kb_stage(&b, LOOM_KSTAGE_SCALAR);
  kb_out(st, LOOM_KDST_COL_REDUCE, rsum, atot, (loom_kmap){0}, LOOM_OP_ADD);
  p = kb_part(&b, -1, -1, 1, 1, 1); /* rank 0: one row of one element */
  st = kb_stage(&b, LOOM_KSTAGE_SCALAR);
  kb_out(st, LOOM_KDST_STORE, mean, amean, (loom_kmap){0}, LOOM_OP_ADD);
  CHECK_OK(ctx, loom_kernel_verify(ctx, &b.k));

  float *xv = malloc(sizeof(float) * (size_t)(rows * n));
  float *sv = malloc(sizeof(float) * (size_t)n);
  float mv = 0;
  loom_test_rng rng = {7};
  for (int64_t i = 0; i < rows * n; i++) xv[i] = (float)loom_test_uniform(&rng, -1, 1);
  for (int64_t j = 0; j < n; j++) sv[j] = 12345.f; /* every element gets written */
  void *args[4] = {xv, sv, NULL, &mv};
  CHECK_OK(ctx, loom_kernel_interpret(ctx, &b.k, args));
  int bad = 0;
  double total_part[64] = {0};
  int64_t tiles = (rows + rpt - 1) / rpt;
  for (int64_t j = 0; j < n; j++) {
    double acc = 0;
    for (int64_t ti = 0; ti < tiles; ti++) {
      double part = 0;
      for (int64_t r = ti * rpt; r < rows && r < (ti + 1) * rpt; r++) part += xv[r * n + j];
      acc += part;
    }
    if ((float)acc != sv[j]) bad++;
  }
  for (int64_t ti = 0; ti < tiles; ti++)
    for (int64_t r = ti * rpt; r < rows && r < (ti + 1) * rpt; r++)
      total_part[ti] += (double)lane_sum(&xv[r * n], n, 4);
  double tot = 0;
  for (int64_t ti = 0; ti < tiles; ti++) tot += total_part[ti];
  float want_mean = (float)((double)(float)tot * (double)(float)(1.0 / (double)(rows * n)));
  CHECK(bad == 0);
  CHECK(mv == want_mean);
  free(xv);
  free(sv);

  /* the layout: temp first, then partials, then scratch */
  loom_kworkspace w;
  CHECK_OK(ctx, loom_kernel_workspace_layout(ctx, &b.k, 3, &w));
  CHECK(w.temp[atot] == 0 && w.temp[ax] == -1);
  CHECK(w.n_partial == 2 && w.partial[0] == 64);
  CHECK(w.partial[1] == 64 + (tiles * n * 8 + 63) / 64 * 64);
  CHECK(w.scratch_thread_bytes == 0 && w.total == w.scratch);
  CHECK(loom_kernel_workspace_bytes(&b.k, 3) == w.total);
  loom_kworkspace_clear(&w);
}

/* ---- dropout (keep), iota and integer compares, select, cast -------------- */

static void test_keep_index(loom_ctx *ctx) {
  const int64_t rows = 5, n = 9;
  const double pdrop = 0.3;
  kb b;
  kb_init(&b, "keep_idx");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, rows * n, false, false);
  int32_t alab = kb_arg(&b, LOOM_DTYPE_I64, rows, false, false);
  int32_t abase = kb_arg(&b, LOOM_DTYPE_I64, 1, false, false);
  int32_t ay = kb_arg(&b, LOOM_DTYPE_F32, rows * n, true, false);
  int32_t ahot = kb_arg(&b, LOOM_DTYPE_F32, rows * n, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, n, 1));
  int32_t flat = kb_expr(&b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = LOOM_DTYPE_I64,
                                          .map = map2(0, n, 1)});
  int32_t base = kb_load(&b, abase, LOOM_DTYPE_I64, (loom_kmap){0});
  int32_t keep = kb_expr(&b, (loom_kexpr){.kind = LOOM_KX_KEEP, .dtype = LOOM_DTYPE_BOOL,
                                          .n_a = 2, .a = {flat, base}, .seed = 42, .offset = 1000,
                                          .threshold = loom_dropout_threshold(pdrop)});
  int32_t sc = kb_op(&b, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, x, kb_const(&b, LOOM_DTYPE_F64, 1 - pdrop),
                     0);
  int32_t y = kb_op(&b, LOOM_OP_SELECT, LOOM_DTYPE_F32, 3, keep, sc, kb_const(&b, LOOM_DTYPE_F32, 0));
  int32_t cls = kb_expr(&b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = LOOM_DTYPE_I64,
                                         .map = map2(0, 0, 1)});
  int32_t lab = kb_load(&b, alab, LOOM_DTYPE_I64, map2(0, 1, 0));
  int32_t hot = kb_op(&b, LOOM_OP_CAST, LOOM_DTYPE_F32, 1,
                      kb_op(&b, LOOM_OP_EQ, LOOM_DTYPE_BOOL, 2, cls, lab, 0), 0, 0);
  kb_part(&b, rows, n, 3, 8, 0);
  loom_kstage *st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_STORE, y, ay, map2(0, n, 1), LOOM_OP_ADD);
  kb_out(st, LOOM_KDST_STORE, hot, ahot, map2(0, n, 1), LOOM_OP_ADD);
  CHECK_OK(ctx, loom_kernel_verify(ctx, &b.k));
  float xv[45], yv[45], hv[45];
  int64_t labels[5] = {0, 8, 3, -1, 9}, bv = 77;
  for (int i = 0; i < 45; i++) xv[i] = (float)(i - 20) * 0.37f;
  void *args[5] = {xv, labels, &bv, yv, hv};
  CHECK_OK(ctx, loom_kernel_interpret(ctx, &b.k, args));
  int bad = 0, kept = 0;
  for (int64_t i = 0; i < rows * n; i++) {
    bool k = loom_dropout_keep(42, (uint64_t)(77 + 1000 + i), loom_dropout_threshold(pdrop));
    kept += k;
    float want = k ? (float)((double)xv[i] / (1 - pdrop)) : 0.f;
    if (want != yv[i]) bad++;
    float wh = (i % n) == labels[i / n] ? 1.f : 0.f;
    if (wh != hv[i]) bad++;
  }
  CHECK(bad == 0);
  CHECK(kept > 20 && kept < 45);
}

/* Integer semantics: saturating i32 add, division by zero, u8 casts. */
static void test_int_semantics(loom_ctx *ctx) {
  kb b;
  kb_init(&b, "ints");
  int32_t aa = kb_arg(&b, LOOM_DTYPE_I32, 4, false, false);
  int32_t ab = kb_arg(&b, LOOM_DTYPE_I32, 4, false, false);
  int32_t as = kb_arg(&b, LOOM_DTYPE_I32, 4, true, false);
  int32_t ad = kb_arg(&b, LOOM_DTYPE_I32, 4, true, false);
  int32_t au = kb_arg(&b, LOOM_DTYPE_U8, 4, true, false);
  int32_t a = kb_load(&b, aa, LOOM_DTYPE_I32, map2(0, 0, 1));
  int32_t bb = kb_load(&b, ab, LOOM_DTYPE_I32, map2(0, 0, 1));
  int32_t s = kb_op(&b, LOOM_OP_ADD, LOOM_DTYPE_I32, 2, a, bb, 0);
  int32_t d = kb_op(&b, LOOM_OP_DIV, LOOM_DTYPE_I32, 2, a, bb, 0);
  int32_t f = kb_op(&b, LOOM_OP_MUL, LOOM_DTYPE_F32, 2,
                    kb_op(&b, LOOM_OP_CAST, LOOM_DTYPE_F32, 1, a, 0, 0),
                    kb_const(&b, LOOM_DTYPE_F32, 0.5), 0);
  int32_t u = kb_op(&b, LOOM_OP_CAST, LOOM_DTYPE_U8, 1, f, 0, 0);
  kb_part(&b, -1, 4, 1, 1, 0);
  loom_kstage *st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_STORE, s, as, map2(0, 0, 1), LOOM_OP_ADD);
  kb_out(st, LOOM_KDST_STORE, d, ad, map2(0, 0, 1), LOOM_OP_ADD);
  kb_out(st, LOOM_KDST_STORE, u, au, map2(0, 0, 1), LOOM_OP_ADD);
  int32_t av[4] = {INT32_MAX, -7, 9, 1000}, bv[4] = {5, 2, 0, -3}, sv[4], dv[4];
  uint8_t uv[4];
  void *args[5] = {av, bv, sv, dv, uv};
  CHECK_OK(ctx, loom_kernel_interpret(ctx, &b.k, args));
  CHECK(sv[0] == INT32_MAX && sv[1] == -5 && sv[2] == 9 && sv[3] == 997);
  CHECK(dv[0] == INT32_MAX / 5 && dv[1] == -3 && dv[2] == 0 && dv[3] == -333);
  CHECK(uv[0] == 255 && uv[1] == 0 && uv[2] == 4 && uv[3] == 255);
}

/* ---- the printer ------------------------------------------------------------- */

static void test_print(loom_ctx *ctx) {
  kb b;
  kb_init(&b, "tiny");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, 6, false, false);
  int32_t ay = kb_arg(&b, LOOM_DTYPE_F32, 2, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, 3, 1));
  loom_kpart *p = kb_part(&b, 2, 3, 1, 4, 0);
  p->n_regs = 1;
  loom_kstage *st = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(st, LOOM_KDST_ROW_REDUCE, x, 0, (loom_kmap){0}, LOOM_OP_MAXIMUM);
  st = kb_stage(&b, LOOM_KSTAGE_SCALAR);
  kb_out(st, LOOM_KDST_STORE, kb_reg(&b, 0), ay, map2(0, 1, 0), LOOM_OP_ADD);
  char *text = NULL;
  CHECK_OK(ctx, loom_kernel_print(ctx, &b.k, &text));
  const char *want =
      "kernel tiny\n"
      "  a0: in f32[6] v0\n"
      "  a1: out f32[2] v1\n"
      "  e0 = load a0[0 + p0*3 + r0*1] : f32\n"
      "  e1 = reg r0 : f32\n"
      "  part 0 phase 0: P [2] R [3] rows/tile 1 vec 4 regs 1 scratch 0\n"
      "    stage 0 row\n"
      "      row_reduce.maximum r0 <- e0\n"
      "    stage 1 scalar\n"
      "      store a1[0 + p0*1] <- e1\n";
  CHECK(text && strcmp(text, want) == 0);
  if (text && strcmp(text, want) != 0) fprintf(stderr, "got:\n%s", text);
  free(text);
  float xv[6] = {1, 5, 2, -1, -3, NAN}, yv[2];
  void *args[2] = {xv, yv};
  CHECK_OK(ctx, loom_kernel_interpret(ctx, &b.k, args));
  CHECK(yv[0] == 5 && isnan(yv[1])); /* NaN propagates through max */
}

/* ---- the verifier rejects broken kernels ----------------------------------- */

/* A valid base kernel: x[4,8] -> row sums -> y[4]; then one breakage. */
static void broken(loom_ctx *ctx, int what) {
  kb b;
  kb_init(&b, "bad");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, 32, false, false);
  int32_t ay = kb_arg(&b, LOOM_DTYPE_F32, 4, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, 8, 1));
  int32_t r = kb_reg(&b, 0);
  int32_t y = kb_op(&b, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, r, kb_const(&b, LOOM_DTYPE_F32, 2), 0);
  loom_kpart *p = kb_part(&b, 4, 8, 2, 4, 0);
  p->n_regs = 1;
  loom_kstage *s0 = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(s0, LOOM_KDST_ROW_REDUCE, x, 0, (loom_kmap){0}, LOOM_OP_ADD);
  loom_kstage *s1 = kb_stage(&b, LOOM_KSTAGE_SCALAR);
  kb_out(s1, LOOM_KDST_STORE, y, ay, map2(0, 1, 0), LOOM_OP_ADD);
  loom_error_clear(ctx);
  switch (what) {
  case 0: CHECK_OK(ctx, loom_kernel_verify(ctx, &b.k)); return;
  case 1: b.exprs[y].a[0] = y; break;                      /* operand not earlier */
  case 2: s1->kind = LOOM_KSTAGE_ROW; s0->kind = LOOM_KSTAGE_SCALAR; break; /* dst vs kind */
  case 3: b.exprs[x].map.p[0] = 9; break;                  /* load out of bounds */
  case 4: s1->out[0].map.p[0] = 2; break;                  /* store out of bounds */
  case 5: p->sched.vector_width = 3; break;                /* bad lanes */
  case 6: b.args[ay].dtype = LOOM_DTYPE_F64; break;        /* store dtype */
  case 7: kb_out(s0, LOOM_KDST_STORE, x, ay, map2(0, 0, 0), LOOM_OP_ADD); break; /* 2 writers */
  case 8: b.exprs[x].arg = ay; break;                      /* load of an output */
  case 9: p->n_regs = 0; break;                            /* register out of range */
  case 10: s0->out[0].combine = LOOM_OP_MUL; break;        /* bad combine */
  case 11: snprintf(b.k.name, sizeof b.k.name, "9lives"); break;
  case 12: b.exprs[x].map.r[1] = 1; break;                 /* past the R rank */
  case 13: b.exprs[y].op = LOOM_OP_REDUCE_SUM; break;      /* not element-wise */
  case 14: s0->out[0].expr = 99; break;
  case 15: b.exprs[r].dtype = LOOM_DTYPE_F64; break;       /* reg read as another dtype */
  case 16: b.k.n_parts = 0; break;
  default: return;
  }
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_kernel_verify(ctx, &b.k));
}

/* Scratch read before it is written, and a temp loaded in its own phase. */
static void broken_more(loom_ctx *ctx) {
  kb b;
  kb_init(&b, "bad2");
  int32_t ax = kb_arg(&b, LOOM_DTYPE_F32, 8, false, false);
  int32_t at = kb_arg(&b, LOOM_DTYPE_F32, 1, false, true);
  int32_t ay = kb_arg(&b, LOOM_DTYPE_F32, 8, true, false);
  int32_t x = kb_load(&b, ax, LOOM_DTYPE_F32, map2(0, 0, 1));
  int32_t sc = kb_expr(&b, (loom_kexpr){.kind = LOOM_KX_SCRATCH, .dtype = LOOM_DTYPE_F32});
  int32_t t = kb_load(&b, at, LOOM_DTYPE_F32, (loom_kmap){0});
  loom_kpart *p = kb_part(&b, -1, 8, 1, 1, 0);
  p->n_scratch = 1;
  loom_kstage *s0 = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(s0, LOOM_KDST_COL_REDUCE, x, at, (loom_kmap){0}, LOOM_OP_ADD);
  kb_out(s0, LOOM_KDST_SCRATCH, x, 0, (loom_kmap){0}, LOOM_OP_ADD);
  loom_kstage *s1 = kb_stage(&b, LOOM_KSTAGE_ROW);
  kb_out(s1, LOOM_KDST_STORE, kb_op(&b, LOOM_OP_ADD, LOOM_DTYPE_F32, 2, sc, t, 0), ay,
         map2(0, 0, 1), LOOM_OP_ADD);
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_kernel_verify(ctx, &b.k)); /* temp same phase */
  CHECK(strstr(loom_ctx_error(ctx), "temp") != NULL);
  s1->out[0].expr = kb_op(&b, LOOM_OP_ADD, LOOM_DTYPE_F32, 2, sc, x, 0);
  CHECK_OK(ctx, loom_kernel_verify(ctx, &b.k));
  s0->out[1].dst = LOOM_KDST_STORE; /* now scratch s0 is never written */
  s0->out[1].target = ay;
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_kernel_verify(ctx, &b.k));
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_softmax(ctx, 3, 5, 4);
  test_softmax(ctx, 4, 33, 8);
  test_softmax(ctx, 2, 1, 16);
  test_softmax(ctx, 5, 7, 1);
  test_softmax(ctx, 2, 100, 2);
  test_col_reduce(ctx, 7, 3, 2);
  test_col_reduce(ctx, 9, 5, 4);
  test_col_reduce(ctx, 1, 1, 3);
  test_keep_index(ctx);
  test_int_semantics(ctx);
  test_print(ctx);
  for (int w = 0; w <= 16; w++) broken(ctx, w);
  broken_more(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_kernel_ir");
}

/* Generated C against the kernel interpreter, on hand-built kernels:
 * element-wise with broadcasts and bool/i64 operands, softmax with scratch
 * and row reductions, column reductions over many tiles with a temp read by
 * a later phase, iota, dropout over consecutive and strided counters,
 * several parts, R = 1, odd sizes, nested R loops, streaming stores (one
 * loop and a loop nest), a kernel that may run in place, and
 * errors. Each is generated, compiled through the jit and run with 1, 2 and
 * 3 threads (and on the GPU renderers: codegen_check.h). Results equal the
 * interpreter bit for bit, are identical across thread counts, and match
 * values computed here directly (loom_dropout_keep, sums in double). Every
 * element-wise op and cast: test_codegen_ops.c. */
#include "codegen_check.h"

#include "codegen/c_codegen.h"
#include "ir/dtype.h"
#include "kernel/interp.h"
#include "ops/op.h"
#include "rng/philox.h"
#include "runtime/jit.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the kernels ------------------------------------------------------------ */

/* Element-wise over [37, 53]: broadcast loads (a row vector, a scalar, a
 * column of i64), a bool mask, select, casts, i64 saturation, i32. */
static void test_elementwise(void) {
  const int64_t P = 37, R = 53, N = P * R;
  loom_kernel k;
  kb_init(&k, "k_elementwise");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t aw = kb_arg(&k, LOOM_DTYPE_F32, R, false, false);
  int32_t ab = kb_arg(&k, LOOM_DTYPE_F32, 1, false, false);
  int32_t am = kb_arg(&k, LOOM_DTYPE_BOOL, N, false, false);
  int32_t ai = kb_arg(&k, LOOM_DTYPE_I64, P, false, false);
  int32_t ao = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t aoi = kb_arg(&k, LOOM_DTYPE_I64, N, true, false);
  int32_t aob = kb_arg(&k, LOOM_DTYPE_BOOL, N, true, false);
  int32_t ao32 = kb_arg(&k, LOOM_DTYPE_I32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t w = kb_load(&k, aw, MAP(0, .r = {1}));
  int32_t b = kb_load(&k, ab, MAP(0));
  int32_t m = kb_load(&k, am, full);
  int32_t id = kb_load(&k, ai, MAP(0, .p = {1}));
  int32_t xw = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, w, 0);
  int32_t t = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2, xw, b, 0);
  int32_t idf = kb_op(&k, LOOM_OP_CAST, LOOM_DTYPE_F32, 1, id, 0, 0);
  int32_t sel = kb_op(&k, LOOM_OP_SELECT, LOOM_DTYPE_F32, 3, m, t, idf);
  int32_t j = kb_index(&k, LOOM_DTYPE_I64, MAP(0, .r = {1}));
  int32_t si = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_I64, 2, id, j, 0);
  int32_t zero = kb_const(&k, LOOM_DTYPE_F32, 0.0);
  int32_t gt = kb_op(&k, LOOM_OP_GT, LOOM_DTYPE_BOOL, 2, x, zero, 0);
  int32_t i32 = kb_op(&k, LOOM_OP_CAST, LOOM_DTYPE_I32, 1, id, 0, 0);
  int32_t three = kb_const(&k, LOOM_DTYPE_I32, 3.0);
  int32_t m32 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_I32, 2, i32, three, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 5, 8, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, st, LOOM_KDST_STORE, sel, ao, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, si, aoi, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, gt, aob, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, m32, ao32, full, LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -2, 2);
  fill_f32(in.p[aw], R, -2, 2);
  fill_f32(in.p[ab], 1, -2, 2);
  uint8_t *mk = in.p[am];
  int64_t *iv = in.p[ai];
  for (int64_t e = 0; e < N; e++)
    mk[e] = (uint8_t)(loom_test_uniform(&cg_rng, 0, 1) < 0.5);
  for (int64_t p = 0; p < P; p++)
    iv[p] = p % 3 == 0 ? INT64_MAX - 20 : p % 3 == 1 ? -(int64_t)p * 1000003 : (int64_t)1 << 40;
  check_kernel(&k, &in, false);
  const float *xf = in.p[ax], *wf = in.p[aw], *bf = in.p[ab], *of = in.p[ao];
  const int64_t *oi = in.p[aoi];
  const uint8_t *ob = in.p[aob];
  const int32_t *o32 = in.p[ao32];
  int bad = 0;
  for (int64_t p = 0; p < P; p++)
    for (int64_t r = 0; r < R; r++) {
      int64_t e = p * R + r;
      float tv = (float)((float)(xf[e] * wf[r]) + bf[0]);
      float want = mk[e] ? tv : (float)(double)iv[p];
      int64_t wi = iv[p] > INT64_MAX - r ? INT64_MAX : iv[p] + r;
      int64_t c32 = iv[p] > INT32_MAX ? INT32_MAX : iv[p] < INT32_MIN ? INT32_MIN : iv[p];
      int64_t w32 = c32 * 3 > INT32_MAX ? INT32_MAX : c32 * 3 < INT32_MIN ? INT32_MIN : c32 * 3;
      bad += of[e] != want || oi[e] != wi || ob[e] != (xf[e] > 0) || o32[e] != w32;
    }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* softmax over rows: row max, exp into scratch with a row sum, divide. */
static void test_softmax(int32_t vw, int64_t rpt) {
  const int64_t P = cg_quick ? 9 : 37, R = 1001, N = P * R;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_softmax_w%d", vw);
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t mx = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t d = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, x, mx, 0);
  int32_t ex = kb_op(&k, LOOM_OP_EXP, LOOM_DTYPE_F32, 1, d, 0, 0);
  int32_t sc = kb_scratch(&k, 0);
  int32_t sum = kb_reg(&k, LOOM_DTYPE_F32, 1);
  int32_t q = kb_op(&k, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, sc, sum, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), rpt, vw, 2, 1, 0);
  int32_t s0 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_MAXIMUM);
  int32_t s1 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s1, LOOM_KDST_SCRATCH, ex, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_ROW_REDUCE, ex, 1, MAP(0), LOOM_OP_ADD);
  int32_t s2 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s2, LOOM_KDST_STORE, q, ay, full, LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -8, 8);
  ((float *)in.p[ax])[5] = 30.0f; /* a dominant element */
  check_kernel(&k, &in, getenv("LOOM_TEST_PRINT") && vw == 8);
  const float *xf = in.p[ax], *yf = in.p[ay];
  /* against a double sum: the row sum runs in vw f32 lanes of R / vw
   * positive terms (kernel.h), so its relative error is below
   * (R / vw + vw) 2^-24; exp adds an ulp, the division half of one */
  double tol = ((double)(R / vw + vw) + 4.0) * 0x1p-24;
  int bad = 0;
  for (int64_t p = 0; p < P; p++) {
    double m = -INFINITY, s = 0;
    for (int64_t r = 0; r < R; r++)
      m = fmax(m, xf[p * R + r]);
    for (int64_t r = 0; r < R; r++)
      s += (float)exp((float)(xf[p * R + r] - (float)m));
    for (int64_t r = 0; r < R; r++) {
      double want = (float)exp((float)(xf[p * R + r] - (float)m)) / s;
      bad += fabs(yf[p * R + r] - want) > tol * want;
    }
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Column sums and maxima over 101 rows in 15 tiles, a sum of squares into
 * a temp that phase 1 reads (R = 1 there), and per-row sums reduced again
 * over rows from a SCALAR stage. */
static void test_column(int64_t P) {
  const int64_t R = 67, N = P * R;
  loom_kernel k;
  kb_init(&k, P ? "k_column" : "k_column_empty");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t asum = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t amax = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t atmp = kb_arg(&k, LOOM_DTYPE_F32, R, false, true);
  int32_t anorm = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t atot = kb_arg(&k, LOOM_DTYPE_F32, 1, true, false);
  int32_t arow = kb_arg(&k, LOOM_DTYPE_F32, P, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  loom_kmap col = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t xx = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, x, 0);
  int32_t rs = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 7, 4, 1, 0, 0);
  int32_t s0 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, x, asum, col, LOOM_OP_ADD);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, x, amax, col, LOOM_OP_MAXIMUM);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, xx, atmp, col, LOOM_OP_ADD);
  kb_out(&k, part, s0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_ADD);
  int32_t s1 = kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, s1, LOOM_KDST_COL_REDUCE, rs, atot, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_STORE, rs, arow, MAP(0, .p = {1}), LOOM_OP_ADD);
  /* phase 1: norm[r] = sqrt(tmp[r]), one element per row */
  int32_t t = kb_load(&k, atmp, MAP(0, .p = {1}));
  int32_t sq = kb_op(&k, LOOM_OP_SQRT, LOOM_DTYPE_F32, 1, t, 0, 0);
  int32_t part1 = kb_part(&k, 1, I64S(R), 0, NULL, 16, 8, 0, 0, 1);
  int32_t s10 = kb_stage(&k, part1, LOOM_KSTAGE_ROW);
  kb_out(&k, part1, s10, LOOM_KDST_STORE, sq, anorm, MAP(0, .p = {1}), LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -1, 1);
  check_kernel(&k, &in, false);
  const float *xf = in.p[ax];
  int bad = 0;
  double total = 0;
  for (int64_t r = 0; r < R; r++) {
    double s = 0, m = -INFINITY, q = 0;
    for (int64_t p = 0; p < P; p++) {
      s += xf[p * R + r];
      m = fmax(m, xf[p * R + r]);
      q += (double)(float)(xf[p * R + r] * xf[p * R + r]);
    }
    bad += !close_rel(((float *)in.p[asum])[r], s, 1e-6);
    bad += ((float *)in.p[amax])[r] != (float)m;
    bad += !close_rel(((float *)in.p[anorm])[r], sqrt(q), 1e-6);
  }
  for (int64_t p = 0; p < P; p++) {
    double s = 0;
    for (int64_t r = 0; r < R; r++)
      s += xf[p * R + r];
    bad += !close_rel(((float *)in.p[arow])[p], s, 1e-6);
    total += (double)((float *)in.p[arow])[p];
  }
  bad += !close_rel(((float *)in.p[atot])[0], total, 1e-6);
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Short rows in row blocks (sched.rows_per_block, c_stage.c): a top-1
 * gate over R experts, rows in tiles of 40 (two blocks of 16 and a tail
 * of 8, and a last tile of 21). Row max, exp into scratch with the row
 * sum, the argmax mask (bool -> f32) summed over rows into a column
 * output, a SCALAR stage's reciprocal, the normalised row stored. Bitwise
 * the interpreter's (which runs row by row: column sums over rows of
 * +-2^40 between small values show the order of the combines), and the
 * code has the blocks. */
static void test_short_rows(int64_t R) {
  const int64_t P = 101, N = P * R;
  int32_t vw = R >= 8 ? 8 : 1;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_short_rows_%lld", (long long)R);
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t acount = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t aesum = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t mx = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t d = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, x, mx, 0);
  int32_t ex = kb_op(&k, LOOM_OP_EXP, LOOM_DTYPE_F32, 1, d, 0, 0);
  int32_t top = kb_op(&k, LOOM_OP_EQ, LOOM_DTYPE_BOOL, 2, x, mx, 0);
  int32_t topf = kb_op(&k, LOOM_OP_CAST, LOOM_DTYPE_F32, 1, top, 0, 0);
  int32_t one = kb_const(&k, LOOM_DTYPE_F32, 1.0);
  int32_t sum = kb_reg(&k, LOOM_DTYPE_F32, 1);
  int32_t inv = kb_op(&k, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, one, sum, 0);
  int32_t sc = kb_scratch(&k, 0);
  int32_t q = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, sc, kb_reg(&k, LOOM_DTYPE_F32, 2), 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 40, vw, 3, 1, 0);
  k.parts[part].sched.rows_per_block = 16;
  int32_t s0 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_MAXIMUM);
  int32_t s1 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s1, LOOM_KDST_SCRATCH, ex, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_ROW_REDUCE, ex, 1, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_COL_REDUCE, topf, acount, MAP(0, .r = {1}), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_COL_REDUCE, x, aesum, MAP(0, .r = {1}), LOOM_OP_ADD);
  int32_t s2 = kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, s2, LOOM_KDST_REG, inv, 2, MAP(0), LOOM_OP_ADD);
  int32_t s3 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s3, LOOM_KDST_STORE, q, ay, full, LOOM_OP_ADD);

  char *src = NULL;
  CHECK(loom_codegen_c(cg_ctx, &k, 1, &src) == LOOM_STATUS_OK);
  CHECK(src && strstr(src, "rows in blocks of 16") != NULL);
  free(src);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -4, 4);
  for (int64_t p = 1; p < P; p += 2) /* +-2^40 rows: what a double sum rounds away shows its order */
    for (int64_t r = 0; r < R; r++) ((float *)in.p[ax])[p * R + r] = p % 4 == 1 ? 0x1p40f : -0x1p40f;
  check_kernel(&k, &in, false);
  const float *xf = in.p[ax], *yf = in.p[ay], *cnt = in.p[acount];
  int bad = 0;
  double total = 0;
  for (int64_t p = 0; p < P; p++) {
    double s = 0;
    for (int64_t r = 0; r < R; r++) s += yf[p * R + r];
    bad += fabs(s - 1.0) > 1e-5;
  }
  for (int64_t r = 0; r < R; r++) total += cnt[r];
  bad += total < (double)P; /* every row has an argmax (ties count twice) */
  CHECK(bad == 0);
  (void)xf;
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* iota: f32 flat indices, and an i32 row index stored transposed (the
 * store's p strides need the p multi-index). */
static void test_iota(void) {
  const int64_t P0 = 7, P1 = 3, R = 11, N = P0 * P1 * R;
  loom_kernel k;
  kb_init(&k, "k_iota");
  int32_t af = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t ai = kb_arg(&k, LOOM_DTYPE_I32, N, true, false);
  int32_t flat = kb_index(&k, LOOM_DTYPE_F32, MAP(0, .p = {P1 * R, R}, .r = {1}));
  int32_t p0 = kb_index(&k, LOOM_DTYPE_I32, MAP(100, .p = {1, 0}));
  int32_t part = kb_part(&k, 2, I64S(P0, P1), 1, I64S(R), 2, 8, 0, 0, 0);
  int32_t s = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s, LOOM_KDST_STORE, flat, af, MAP(0, .p = {P1 * R, R}, .r = {1}), LOOM_OP_ADD);
  /* element (p0, p1, r) goes to [r][p1][p0] */
  kb_out(&k, part, s, LOOM_KDST_STORE, p0, ai, MAP(0, .p = {1, P0}, .r = {P0 * P1}), LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  check_kernel(&k, &in, false);
  int bad = 0;
  for (int64_t a = 0; a < P0; a++)
    for (int64_t b = 0; b < P1; b++)
      for (int64_t r = 0; r < R; r++) {
        bad += ((float *)in.p[af])[(a * P1 + b) * R + r] != (float)((a * P1 + b) * R + r);
        bad += ((int32_t *)in.p[ai])[r * P0 * P1 + b * P0 + a] != 100 + a;
      }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Dropout: keep = philox(seed, index + base + offset), y = keep ? x / (1-p) : 0.
 * Counters along a row are consecutive (stride 1: Philox blocks shared by
 * four elements, rows longer than a chunk) or strided (per element). */
static void test_dropout(int64_t R, int64_t stride, int64_t bval) {
  const int64_t P = cg_quick ? 5 : 23, N = P * R;
  const double prob = 0.1;
  const uint64_t seed = 0x1234567890abcdefull, offset = 77;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_dropout_%lld_%lld", (long long)R, (long long)stride);
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t abase = kb_arg(&k, LOOM_DTYPE_I64, 1, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t am = kb_arg(&k, LOOM_DTYPE_BOOL, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t idx = kb_index(&k, LOOM_DTYPE_I64, MAP(0, .p = {R * stride}, .r = {stride}));
  int32_t base = kb_load(&k, abase, MAP(0));
  int32_t keep = kb_expr(&k, (loom_kexpr){.kind = LOOM_KX_KEEP,
                                          .dtype = LOOM_DTYPE_BOOL,
                                          .n_a = 2,
                                          .a = {idx, base},
                                          .seed = seed,
                                          .offset = offset,
                                          .threshold = loom_dropout_threshold(prob)});
  int32_t c = kb_const(&k, LOOM_DTYPE_F64, 1.0 - prob);
  int32_t dv = kb_op(&k, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, x, c, 0);
  int32_t zero = kb_const(&k, LOOM_DTYPE_F32, 0.0);
  int32_t y = kb_op(&k, LOOM_OP_SELECT, LOOM_DTYPE_F32, 3, keep, dv, zero);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 3, 8, 0, 0, 0);
  int32_t s = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s, LOOM_KDST_STORE, y, ay, full, LOOM_OP_ADD);
  kb_out(&k, part, s, LOOM_KDST_STORE, keep, am, full, LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -3, 3);
  *(int64_t *)in.p[abase] = bval;
  check_kernel(&k, &in, false);
  int bad = 0, kept = 0;
  uint64_t thr = loom_dropout_threshold(prob);
  for (int64_t e = 0; e < N; e++) {
    bool kp = loom_dropout_keep(seed, (uint64_t)bval + offset + (uint64_t)(e * stride), thr);
    float xv = ((float *)in.p[ax])[e];
    float want = kp ? (float)((double)xv / (1.0 - prob)) : 0.0f;
    bad += ((uint8_t *)in.p[am])[e] != kp || ((float *)in.p[ay])[e] != want;
    kept += kp;
  }
  CHECK(bad == 0);
  CHECK(kept > N * 8 / 10 && kept < N * 97 / 100);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Four parts in one launch: R = 1 (no R dims), a wide row with a row
 * reduction in 16 lanes, and nested R loops over a transposed load that
 * cannot merge (with scratch and 4 lanes), once with an innermost extent
 * the lanes do not divide (element by element) and once with one they do
 * (blocks of lanes); rows_per_tile beyond the rows. */
static void test_multipart(void) {
  loom_kernel k;
  kb_init(&k, "k_multi");
  const int64_t P0 = 13, P1 = 5, R1 = 19, P2 = 4, R2a = 6, R2b = 5, P3 = 3, R3a = 3, R3b = 8;
  int32_t a0 = kb_arg(&k, LOOM_DTYPE_F32, P0, false, false);
  int32_t a0o = kb_arg(&k, LOOM_DTYPE_F32, P0, true, false);
  int32_t a1 = kb_arg(&k, LOOM_DTYPE_F32, P1 * R1, false, false);
  int32_t a1o = kb_arg(&k, LOOM_DTYPE_F32, P1 * R1, true, false);
  int32_t a1s = kb_arg(&k, LOOM_DTYPE_F32, P1, true, false);
  int32_t a2 = kb_arg(&k, LOOM_DTYPE_F32, P2 * R2a * R2b, false, false);
  int32_t a2o = kb_arg(&k, LOOM_DTYPE_F32, P2 * R2a * R2b, true, false);
  int32_t a2s = kb_arg(&k, LOOM_DTYPE_F32, P2, true, false);
  int32_t a3 = kb_arg(&k, LOOM_DTYPE_F32, P3 * R3a * R3b, false, false);
  int32_t a3o = kb_arg(&k, LOOM_DTYPE_F32, P3 * R3a * R3b, true, false);
  int32_t a3s = kb_arg(&k, LOOM_DTYPE_F32, P3, true, false);
  /* part 0: y = x * 2 + 1 */
  int32_t x0 = kb_load(&k, a0, MAP(0, .p = {1}));
  int32_t two = kb_const(&k, LOOM_DTYPE_F32, 2.0), one = kb_const(&k, LOOM_DTYPE_F32, 1.0);
  int32_t y0 = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x0, two, 0), one, 0);
  int32_t p0 = kb_part(&k, 1, I64S(P0), 0, NULL, 3, 8, 0, 0, 0);
  kb_stage(&k, p0, LOOM_KSTAGE_ROW);
  kb_out(&k, p0, 0, LOOM_KDST_STORE, y0, a0o, MAP(0, .p = {1}), LOOM_OP_ADD);
  /* part 1: relu, and the row sum of tanh in 16 lanes */
  loom_kmap f1 = MAP(0, .p = {R1}, .r = {1});
  int32_t x1 = kb_load(&k, a1, f1);
  int32_t r1 = kb_op(&k, LOOM_OP_RELU, LOOM_DTYPE_F32, 1, x1, 0, 0);
  int32_t t1 = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x1, 0, 0);
  int32_t p1 = kb_part(&k, 1, I64S(P1), 1, I64S(R1), 100, 16, 1, 0, 0);
  kb_stage(&k, p1, LOOM_KSTAGE_ROW);
  kb_out(&k, p1, 0, LOOM_KDST_STORE, r1, a1o, f1, LOOM_OP_ADD);
  kb_out(&k, p1, 0, LOOM_KDST_ROW_REDUCE, t1, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, p1, LOOM_KSTAGE_SCALAR);
  kb_out(&k, p1, 1, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 0), a1s, MAP(0, .p = {1}),
         LOOM_OP_ADD);
  /* part 2: element (p, i, j) reads x[p][j][i] (transposed), scratch, min */
  loom_kmap tr = MAP(0, .p = {R2a * R2b}, .r = {1, R2a});
  loom_kmap nat = MAP(0, .p = {R2a * R2b}, .r = {R2b, 1});
  int32_t x2 = kb_load(&k, a2, tr);
  int32_t half = kb_const(&k, LOOM_DTYPE_F32, 0.5);
  int32_t h2 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x2, half, 0);
  int32_t s2 = kb_scratch(&k, 0);
  int32_t mn = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t y2 = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, s2, mn, 0);
  int32_t p2 = kb_part(&k, 1, I64S(P2), 2, I64S(R2a, R2b), 1, 4, 2, 1, 0);
  kb_stage(&k, p2, LOOM_KSTAGE_ROW);
  kb_out(&k, p2, 0, LOOM_KDST_SCRATCH, h2, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, p2, 0, LOOM_KDST_ROW_REDUCE, x2, 0, MAP(0), LOOM_OP_MINIMUM);
  kb_out(&k, p2, 0, LOOM_KDST_ROW_REDUCE, x2, 1, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, p2, LOOM_KSTAGE_ROW);
  kb_out(&k, p2, 1, LOOM_KDST_STORE, y2, a2o, nat, LOOM_OP_ADD);
  kb_stage(&k, p2, LOOM_KSTAGE_SCALAR);
  kb_out(&k, p2, 2, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 1), a2s, MAP(0, .p = {1}),
         LOOM_OP_ADD);
  /* part 3: the same over R [3, 8] in 4 lanes: the inner loop in blocks */
  loom_kmap tr3 = MAP(0, .p = {R3a * R3b}, .r = {1, R3a});
  loom_kmap nat3 = MAP(0, .p = {R3a * R3b}, .r = {R3b, 1});
  int32_t x3 = kb_load(&k, a3, tr3);
  int32_t h3 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x3, half, 0);
  int32_t y3 = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, kb_scratch(&k, 0),
                     kb_reg(&k, LOOM_DTYPE_F32, 0), 0);
  int32_t p3 = kb_part(&k, 1, I64S(P3), 2, I64S(R3a, R3b), 2, 4, 2, 1, 0);
  kb_stage(&k, p3, LOOM_KSTAGE_ROW);
  kb_out(&k, p3, 0, LOOM_KDST_SCRATCH, h3, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, p3, 0, LOOM_KDST_ROW_REDUCE, x3, 0, MAP(0), LOOM_OP_MINIMUM);
  kb_out(&k, p3, 0, LOOM_KDST_ROW_REDUCE, x3, 1, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, p3, LOOM_KSTAGE_ROW);
  kb_out(&k, p3, 1, LOOM_KDST_STORE, y3, a3o, nat3, LOOM_OP_ADD);
  kb_stage(&k, p3, LOOM_KSTAGE_SCALAR);
  kb_out(&k, p3, 2, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 1), a3s, MAP(0, .p = {1}),
         LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[a0], P0, -3, 3);
  fill_f32(in.p[a1], P1 * R1, -3, 3);
  fill_f32(in.p[a2], P2 * R2a * R2b, -3, 3);
  fill_f32(in.p[a3], P3 * R3a * R3b, -3, 3);
  check_kernel(&k, &in, false);
  int bad = 0;
  for (int64_t p = 0; p < P0; p++) {
    float xv = ((float *)in.p[a0])[p];
    bad += ((float *)in.p[a0o])[p] != (float)(xv * 2.0f) + 1.0f;
  }
  for (int64_t p = 0; p < P1; p++) {
    double s = 0;
    for (int64_t r = 0; r < R1; r++) {
      float xv = ((float *)in.p[a1])[p * R1 + r];
      bad += ((float *)in.p[a1o])[p * R1 + r] != (xv < 0 ? 0.0f : xv);
      s += (float)tanh(xv);
    }
    bad += !close_rel(((float *)in.p[a1s])[p], s, 1e-6);
  }
  for (int64_t p = 0; p < P2; p++) {
    const float *xv = (const float *)in.p[a2] + p * R2a * R2b;
    float m = INFINITY;
    double s = 0;
    for (int64_t e = 0; e < R2a * R2b; e++) {
      m = fminf(m, xv[e]);
      s += xv[e];
    }
    for (int64_t i = 0; i < R2a; i++)
      for (int64_t j = 0; j < R2b; j++)
        bad += ((float *)in.p[a2o])[p * R2a * R2b + i * R2b + j] != xv[j * R2a + i] * 0.5f - m;
    bad += !close_rel(((float *)in.p[a2s])[p], s, 1e-6);
  }
  for (int64_t p = 0; p < P3; p++) {
    const float *xv = (const float *)in.p[a3] + p * R3a * R3b;
    float m = INFINITY;
    double s = 0;
    for (int64_t e = 0; e < R3a * R3b; e++) {
      m = fminf(m, xv[e]);
      s += xv[e];
    }
    for (int64_t i = 0; i < R3a; i++)
      for (int64_t j = 0; j < R3b; j++)
        bad += ((float *)in.p[a3o])[p * R3a * R3b + i * R3b + j] != xv[j * R3a + i] * 0.5f - m;
    bad += !close_rel(((float *)in.p[a3s])[p], s, 1e-6);
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

static void test_stream(void) {
  const int64_t P = 2051, R = 1031, N = P * R, base = 5;
  loom_kernel k;
  kb_init(&k, "k_stream");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N + base, true, false);
  int32_t az = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t aw = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t sum = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t y = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                    kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, sum, 0),
                    kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x, 0, 0), 0);
  int32_t z = kb_op(&k, LOOM_OP_ERF, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t w = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, z, x, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 64, 16, 1, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 1, LOOM_KDST_STORE, y, ay, MAP(base, .p = {R}, .r = {1}), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 2, LOOM_KDST_STORE, z, az, full, LOOM_OP_ADD);
  kb_out(&k, part, 2, LOOM_KDST_STORE, w, aw, full, LOOM_OP_ADD);
  char *src = NULL;
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, &k, 1, &src));
  CHECK(src && strstr(src, "lm_stream_f32(&a1[") && strstr(src, "lm_stream_f32(&a2[") &&
        strstr(src, "lm_stream_f32(&a3["));
  free(src);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -3, 3);
  check_kernel(&k, &in, false);
  const float *yv = in.p[ay];
  int bad = 0;
  for (int64_t e = 0; e < base; e++) { /* untouched before the base */
    uint32_t u;
    memcpy(&u, &yv[e], sizeof u);
    bad += u != 0xa5a5a5a5u;
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Streaming stores in a loop nest (c_stage.c, runs_whole_lines): the
 * rotate-half of a rotary embedding, out[t, h, :D2] = x[t, h, :D2] c[t] +
 * x[t, h, D2:] and out[t, h, D2:] = x[t, h, D2:] c[t] - x[t, h, :D2] with
 * c broadcast over the heads, so R = [H, D2] stays two loops. With runs of
 * whole lines (D2 = 32) the stores stream run by run, also in a stage
 * with row-reduction lanes (the second, which sums its values); with D2 =
 * 24 (runs of 96 bytes), or a guarded load (scalar code), they do not.
 * Either way the interpreter's bits. */
static void test_stream_nested(int64_t d2, bool guarded) {
  const int64_t T = 2048, H = 16, D = 2 * d2, N = T * H * D;
  loom_kernel k;
  kb_init(&k, "k_stream_nested");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ac = kb_arg(&k, LOOM_DTYPE_F32, T * d2, false, false);
  int32_t ao = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t as = kb_arg(&k, LOOM_DTYPE_F32, T, true, false);
  loom_kmap lo = MAP(0, .p = {H * D}, .r = {D, 1}), hi = MAP(d2, .p = {H * D}, .r = {D, 1});
  int32_t c = kb_load(&k, ac, MAP(0, .p = {d2}, .r = {0, 1}));
  int32_t x1 = kb_load(&k, ax, lo), x2 = kb_load(&k, ax, hi);
  if (guarded) { /* a guard that always holds: the loop stays scalar, so no streaming */
    int32_t j = kb_index(&k, LOOM_DTYPE_I64, MAP(0, .r = {0, 1}));
    int32_t in = kb_op(&k, LOOM_OP_LT, LOOM_DTYPE_BOOL, 2, j, kb_const(&k, LOOM_DTYPE_I64, (double)d2),
                       0);
    x2 = kb_expr(&k, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = LOOM_DTYPE_F32, .arg = ax,
                                  .map = hi, .n_a = 1, .a = {in}});
  }
  int32_t y1 = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x1, c, 0), x2, 0);
  int32_t y2 = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2,
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x2, c, 0), x1, 0);
  int32_t part = kb_part(&k, 1, I64S(T), 2, I64S(H, d2), 16, 16, 1, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, y1, ao, lo, LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 1, LOOM_KDST_STORE, y2, ao, hi, LOOM_OP_ADD);
  kb_out(&k, part, 1, LOOM_KDST_ROW_REDUCE, y2, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, 2, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 0), as, MAP(0, .p = {1}),
         LOOM_OP_ADD);
  char *src = NULL;
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, &k, 1, &src));
  bool streams = src && strstr(src, "lm_stream_run_f32(&a2[bo0 + i0 * (");
  CHECK(streams == (d2 % 16 == 0 && !guarded));
  free(src);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -3, 3);
  fill_f32(in.p[ac], T * d2, -1, 1);
  check_kernel(&k, &in, false);
  const float *xv = in.p[ax], *cv = in.p[ac], *ov = in.p[ao];
  int bad = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t j = 0; j < d2; j++) {
        int64_t e = (t * H + h) * D + j;
        bad += ov[e] != xv[e] * cv[t * d2 + j] + xv[e + d2];
        bad += ov[e + d2] != xv[e + d2] * cv[t * d2 + j] - xv[e];
      }
  CHECK(bad == 0);
  /* the output on a 64-byte line (runs streamed) and 16 bytes off (runs
   * stored plainly, lm_stream_run_f32): the same bits either way */
  loom_jit_module *m = codegen_compile(&k, 1, false);
  for (int off = 0; m && off <= 16; off += 16) {
    bufs got;
    bufs_copy(&k, &in, &got);
    char *blk = aligned_alloc(64, (got.bytes[ao] + 127) / 64 * 64);
    float *o = blk ? (float *)(blk + off) : NULL;
    void *own = got.p[ao];
    if (o) {
      memset(o, 0xa5, got.bytes[ao]);
      got.p[ao] = o;
      codegen_run(m, &k, &got, 2);
      CHECK(memcmp(o, in.p[ao], got.bytes[ao]) == 0);
    }
    got.p[ao] = own;
    free(blk);
    bufs_free(&got);
  }
  loom_jit_free(m);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* A kernel that may run in place (kernel/in_place.h: an optimizer's
 * update, m' = 0.9 m + g c and g2 = g g, c a per-column scale): the
 * arguments a run may tie (m and g, each output's candidates, and the
 * outputs) are plain pointers, the rest restrict, and the stage carries
 * LM_IVDEP. Run with m' in m's memory, on 1-3 threads, it gives the
 * interpreter's bits of the untied run. */
static void test_tied(void) {
  const int64_t P = 67, R = 300, N = P * R;
  loom_kernel k;
  kb_init(&k, "k_tied");
  int32_t am = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ag = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ac = kb_arg(&k, LOOM_DTYPE_F32, R, false, false);
  int32_t amo = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t ag2 = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t m = kb_load(&k, am, full), g = kb_load(&k, ag, full);
  int32_t c = kb_load(&k, ac, MAP(0, .r = {1}));
  int32_t mo = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, m,
                           kb_const(&k, LOOM_DTYPE_F32, 0.9), 0),
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, g, c, 0), 0);
  int32_t g2 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, g, g, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 8, 16, 0, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, mo, amo, full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, g2, ag2, full, LOOM_OP_ADD);
  char *src = NULL;
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, &k, 1, &src));
  CHECK(src && strstr(src, "const float *a0,") && strstr(src, "const float *a1,") &&
        strstr(src, "const float *restrict a2,") && strstr(src, "float *a3,") &&
        strstr(src, "float *a4)") && strstr(src, "LM_IVDEP\n"));
  free(src);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[am], N, -3, 3);
  fill_f32(in.p[ag], N, -3, 3);
  fill_f32(in.p[ac], R, -1, 1);
  bufs ref;
  bufs_copy(&k, &in, &ref);
  CHECK_OK(cg_ctx, loom_kernel_interpret(cg_ctx, &k, ref.p));
  check_kernel(&k, &in, false);
  loom_jit_module *mod = codegen_compile(&k, 1, false);
  for (int32_t nt = 1; mod && nt <= 3; nt++) {
    bufs got;
    bufs_copy(&k, &ref, &got); /* fresh inputs: ref's are untouched */
    void *own = got.p[amo];
    got.p[amo] = got.p[am]; /* m' computed over m */
    codegen_run(mod, &k, &got, nt);
    CHECK(memcmp(got.p[am], ref.p[amo], got.bytes[amo]) == 0);
    CHECK(memcmp(got.p[ag2], ref.p[ag2], got.bytes[ag2]) == 0);
    got.p[amo] = own;
    bufs_free(&got);
  }
  loom_jit_free(mod);
  bufs_free(&ref);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

static void test_errors(void) {
  loom_kernel k;
  kb_init(&k, "k_f16");
  int32_t a = kb_arg(&k, LOOM_DTYPE_F16, 4, false, false);
  int32_t o = kb_arg(&k, LOOM_DTYPE_F16, 4, true, false);
  int32_t x = kb_load(&k, a, MAP(0, .r = {1}));
  int32_t part = kb_part(&k, 0, NULL, 1, I64S(4), 1, 1, 0, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, x, o, MAP(0, .r = {1}), LOOM_OP_ADD);
  char *src = NULL;
  loom_status st = loom_codegen_c(cg_ctx, &k, 1, &src);
  CHECK(st != LOOM_STATUS_OK && src == NULL && loom_ctx_error(cg_ctx)[0]);
  CHECK_STATUS(cg_ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_codegen_c(cg_ctx, &k, 1, NULL));
  loom_kernel_clear(&k);
  /* kernel names become C symbols */
  static const char *bad_names[] = {"", "9k", "_k", "lm_k", "k-1", "k 1"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    kb_init(&k, "k_ok");
    int32_t ai = kb_arg(&k, LOOM_DTYPE_F32, 4, false, false);
    int32_t ao = kb_arg(&k, LOOM_DTYPE_F32, 4, true, false);
    int32_t p = kb_part(&k, 0, NULL, 1, I64S(4), 1, 1, 0, 0, 0);
    kb_stage(&k, p, LOOM_KSTAGE_ROW);
    kb_out(&k, p, 0, LOOM_KDST_STORE, kb_load(&k, ai, MAP(0, .r = {1})), ao, MAP(0, .r = {1}),
           LOOM_OP_ADD);
    CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, &k, 1, &src));
    free(src);
    snprintf(k.name, sizeof k.name, "%s", bad_names[i]);
    loom_error_clear(cg_ctx);
    src = NULL;
    loom_status st = loom_codegen_c(cg_ctx, &k, 1, &src);
    CHECK(st != LOOM_STATUS_OK && src == NULL && loom_ctx_error(cg_ctx)[0] != '\0');
    loom_kernel_clear(&k);
  }
  /* no kernels: just the prelude, which compiles */
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, NULL, 0, &src));
  loom_jit_module *m = NULL;
  if (src) CHECK_OK(cg_ctx, loom_jit_load(cg_ctx, src, &m, NULL));
  loom_jit_free(m);
  free(src);
}

int main(void) {
  codegen_check_init("test_codegen");
  test_elementwise();
  test_softmax(8, 4);
  test_softmax(1, 5);
  test_column(101);
  test_column(0);
  test_short_rows(8);
  test_short_rows(12);
  test_short_rows(3);
  test_iota();
  test_dropout(129, 1, ((int64_t)1 << 40) + 5);
  test_dropout(cg_quick ? 1100 : 2053, 1, ((int64_t)1 << 40) + 5);
  test_dropout(37, 3, ((int64_t)1 << 40) + 5);
  /* Philox blocks whose low word carries into the high one, and the 2^62
   * wrap of the block number, inside a row (the vector runs leave them to
   * the scalar loop). */
  test_dropout(1024, 1, ((int64_t)1 << 34) - 2000);
  test_dropout(1024, 1, -3000);
  test_multipart();
  test_stream();
  test_stream_nested(32, false);
  test_stream_nested(24, false);
  test_stream_nested(32, true);
  test_tied();
  test_errors();
  /* everything above was compiled into the private cache */
  const char *cache = getenv("XDG_CACHE_HOME");
  char *dir = loom_jit_cache_dir();
  CHECK(cache && strstr(cache, "/loom-test-cache-") != NULL);
  CHECK(cache && dir && strncmp(dir, cache, strlen(cache)) == 0);
  free(dir);
  return codegen_check_finish();
}

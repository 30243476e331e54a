/* Every element-wise op and cast of the op table through generated C
 * against the kernel interpreter and the op table's scalar functions, for
 * every dtype, on values that reach the edges (NaN, infinities, overflow,
 * wrap-around); the kernel IR's f32 exp/tanh/sigmoid and the fast erf path
 * over a wide range of inputs. Harness: codegen_check.h. */
#include "codegen_check.h"

#include "codegen/c_codegen.h"
#include "ir/dtype.h"
#include "kernel/kmath.h"
#include "ops/op.h"
#include "runtime/jit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- every element-wise op and cast against the op table --------------------- */

static const double float_vals[] = {
    0.0,    -0.0,         1.0,           -1.0,   0.5,      -2.5,      3.0,   1e-40, -1e-40,
    1e30,   -1e30,        88.7,          -104.0, 1e-7,     2.0,       100.0, -0.75, 7.25,
    0.1,    -0.3,         12.5,          -3.0,   INFINITY, -INFINITY, NAN,   255.5, 256.0,
    -129.0, 2147483648.0, -2147483904.0, 9.3e18, -9.3e18,  4.0,       0.25};
#define N_FLOAT_VALS ((int64_t)(sizeof float_vals / sizeof float_vals[0]))

static const int64_t int_vals[] = {0,
                                   1,
                                   -1,
                                   2,
                                   -2,
                                   3,
                                   7,
                                   -7,
                                   100,
                                   -100,
                                   255,
                                   256,
                                   -129,
                                   INT32_MAX,
                                   INT32_MIN,
                                   (int64_t)INT32_MAX + 1,
                                   (int64_t)1 << 40,
                                   -((int64_t)1 << 40),
                                   INT64_MAX,
                                   INT64_MIN,
                                   INT64_MAX - 1,
                                   INT64_MIN + 1,
                                   3037000500LL,
                                   12,
                                   -12,
                                   5};
#define N_INT_VALS ((int64_t)(sizeof int_vals / sizeof int_vals[0]))

static void fill_vals(loom_dtype dt, void *p, int64_t n, int32_t shift) {
  for (int64_t i = 0; i < n; i++) {
    if (loom_dtype_is_float(dt)) {
      loom_store(dt, p, i, float_vals[(i + shift) % N_FLOAT_VALS]);
    } else {
      int64_t v = int_vals[(i + shift) % N_INT_VALS];
      switch (dt) {
      case LOOM_DTYPE_I64: ((int64_t *)p)[i] = v; break;
      case LOOM_DTYPE_I32:
        ((int32_t *)p)[i] = (int32_t)(v % 3000000000LL > INT32_MAX ? INT32_MAX
                                      : v < INT32_MIN              ? INT32_MIN
                                      : v > INT32_MAX              ? INT32_MAX
                                                                   : v);
        break;
      case LOOM_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)(v & 0xff); break;
      default: ((uint8_t *)p)[i] = (uint8_t)(v & 1); break;
      }
    }
  }
}

/* Distance in ulps between two non-NaN floats (signed zeros equal). */
static int64_t ulp_dist(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  int64_t oa = ia < 0 ? -(int64_t)(ia & 0x7fffffff) : ia;
  int64_t ob = ib < 0 ? -(int64_t)(ib & 0x7fffffff) : ib;
  return oa > ob ? oa - ob : ob - oa;
}

/* out_op = op(x[, y]) for every op defined on dtype dt, R = all pairs. */
static void test_ops(loom_dtype dt) {
  bool flt = loom_dtype_is_float(dt);
  int64_t nv = flt ? N_FLOAT_VALS : N_INT_VALS;
  const int64_t R = nv * 3; /* x against three shifts of y */
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_ops_%s", loom_dtype_name(dt));
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, dt, R, false, false);
  int32_t ay = kb_arg(&k, dt, R, false, false);
  loom_kmap m = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, m), y = kb_load(&k, ay, m);
  int32_t part = kb_part(&k, 0, NULL, 1, I64S(R), 1, 8, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  int32_t n_out = 0;
  for (int32_t op = 0; op <= LOOM_OP_GE; op++) {
    const loom_op_def *d = loom_op_get((loom_op)op);
    bool unary = d->scalar1 != NULL;
    bool int_ok = op == LOOM_OP_NEG || op == LOOM_OP_ABS || op == LOOM_OP_SIGN ||
                  op == LOOM_OP_RELU || !unary;
    if (!flt && !int_ok) continue;
    bool cmp = op >= LOOM_OP_EQ;
    loom_dtype odt = cmp ? LOOM_DTYPE_BOOL : dt;
    int32_t a = kb_arg(&k, odt, R, true, false);
    int32_t e = kb_op(&k, (loom_op)op, odt, unary ? 1 : 2, x, y, 0);
    kb_out(&k, part, st, LOOM_KDST_STORE, e, a, m, LOOM_OP_ADD);
    n_out++;
  }
  CHECK(n_out > 10);
  bufs in;
  bufs_alloc(&k, &in);
  for (int32_t s = 0; s < 3; s++) {
    char *px = (char *)in.p[ax] + (size_t)(s * nv) * loom_dtype_size(dt);
    char *py = (char *)in.p[ay] + (size_t)(s * nv) * loom_dtype_size(dt);
    fill_vals(dt, px, nv, 0);
    fill_vals(dt, py, nv, 1 + 5 * s);
  }
  check_kernel(&k, &in, false);
  /* floats: also straight from the op table's scalar functions */
  if (dt == LOOM_DTYPE_F32) {
    int bad = 0;
    const float *xv = in.p[ax], *yv = in.p[ay];
    for (int32_t o = 0; o < k.parts[0].stages[0].n_out; o++) {
      const loom_kout *ko = &k.parts[0].stages[0].out[o];
      const loom_kexpr *e = &k.exprs[ko->expr];
      const loom_op_def *d = loom_op_get(e->op);
      for (int64_t r = 0; r < R; r++) {
        double v = d->scalar1 ? d->scalar1(xv[r]) : d->scalar2(xv[r], yv[r]);
        double got = loom_load(e->dtype, in.p[ko->target], r);
        double want = loom_load(e->dtype, &(float){(float)v}, 0);
        if (e->dtype == LOOM_DTYPE_BOOL) want = v != 0.0;
        /* f32 exp, tanh, log, sigmoid, erf: the kernel IR's own functions,
         * within 1, 1, 1, 2 and 2 ulp of the op table's (kernel/kmath.h) */
        int64_t ulps = e->op == LOOM_OP_EXP || e->op == LOOM_OP_TANH || e->op == LOOM_OP_LOG ? 1
                       : e->op == LOOM_OP_SIGMOID || e->op == LOOM_OP_ERF                    ? 2
                                                                                             : 0;
        if (ulps && got == got && want == want && ulp_dist((float)got, (float)want) <= ulps)
          continue;
        if (!(got == want || (got != got && want != want))) {
          if (bad++ < 5)
            fprintf(stderr, "  %s(%g, %g): got %g want %g\n", loom_op_name(e->op), xv[r], yv[r],
                    got, want);
        }
      }
    }
    CHECK(bad == 0);
  }
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* cast from dtype `from` to every other dtype. */
static void test_casts(loom_dtype from) {
  static const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I32,
                                   LOOM_DTYPE_I64, LOOM_DTYPE_U8,  LOOM_DTYPE_BOOL};
  const int64_t R = loom_dtype_is_float(from) ? N_FLOAT_VALS : N_INT_VALS;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_cast_%s", loom_dtype_name(from));
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, from, R, false, false);
  loom_kmap m = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, m);
  int32_t part = kb_part(&k, 1, I64S(1), 1, I64S(R), 1, 1, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    int32_t a = kb_arg(&k, dts[i], R, true, false);
    kb_out(&k, part, st, LOOM_KDST_STORE, kb_op(&k, LOOM_OP_CAST, dts[i], 1, x, 0, 0), a, m,
           LOOM_OP_ADD);
  }
  bufs in;
  bufs_alloc(&k, &in);
  fill_vals(from, in.p[ax], R, 0);
  check_kernel(&k, &in, false);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* The prelude's double exp and erf (the fast erf path) stay within 2^-44
 * of libm (the generated code relies on 2^-40); the prelude's f32 exp,
 * tanh, sigmoid, log and erf (kernel/kmath.h's text), vectorised in
 * generated code, equal kmath.h's functions compiled here bit for bit and
 * stay within 1, 1, 2, 1 and 2 ulp of libm's double results rounded to f32; and an f32 kernel
 * over a wide range of inputs, where some elements take erf's exact
 * fallback, equals the interpreter bit for bit. */
static double ref_sigmoid(double x) { return loom_op_get(LOOM_OP_SIGMOID)->scalar1(x); }

static void test_fast_math(void) {
  char *pre = NULL;
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, NULL, 0, &pre));
  if (!pre) return;
  static const char wrappers[] =
      "double t_fexp(double x) { return lm_fexp(x); }\n"
      "double t_ferf(double x) { return lm_ferf(x); }\n"
      "void t_vf(int f, const float *x, float *y, int64_t n) {\n"
      "  if (f == 0) for (int64_t i = 0; i < n; i++) y[i] = lm_expf(x[i]);\n"
      "  if (f == 1) for (int64_t i = 0; i < n; i++) y[i] = lm_tanhf(x[i]);\n"
      "  if (f == 2) for (int64_t i = 0; i < n; i++) y[i] = lm_sigmoidf(x[i]);\n"
      "  if (f == 3) for (int64_t i = 0; i < n; i++) y[i] = lm_logf(x[i]);\n"
      "  if (f == 4) for (int64_t i = 0; i < n; i++) y[i] = lm_erff(x[i]);\n"
      "}\n";
  size_t n = strlen(pre) + sizeof wrappers;
  char *src = malloc(n);
  snprintf(src, n, "%s%s", pre, wrappers);
  free(pre);
  loom_jit_module *m = NULL;
  CHECK_OK(cg_ctx, loom_jit_load(cg_ctx, src, &m, NULL));
  free(src);
  if (!m) return;
  typedef double (*fn1)(double);
  typedef void (*fnv)(int, const float *, float *, int64_t);
  fn1 fe = (fn1)loom_jit_symbol(m, "t_fexp"), ff = (fn1)loom_jit_symbol(m, "t_ferf");
  fnv fv = (fnv)loom_jit_symbol(m, "t_vf");
  CHECK(fe && ff && fv);
  double worst[2] = {0, 0};
  int erf_sat_bad = 0;
  int64_t samples = cg_quick ? 100000 : 1000000;
  static const double scale[] = {1e-6, 0.3, 1.0, 5.0, 20.0, 40.0, 87.0};
  for (int64_t i = 0; fe && ff && i < samples; i++) {
    double x = loom_test_uniform(&cg_rng, -1, 1) * scale[i % 7];
    if (i & 1) x = (float)x;
    double e = exp(x), er = erf(x);
    if (x <= 88.5) worst[0] = fmax(worst[0], fabs(fe(x) - e) / e);
    if (fabs(x) <= 4.0 && er != 0)
      worst[1] = fmax(worst[1], fabs(ff(x) - er) / fabs(er));
    else if (fabs(x) > 4.0) /* saturated: +-1, which is libm's value rounded to f32 */
      erf_sat_bad += ff(x) != (double)(float)er;
  }
  bool fine = erf_sat_bad == 0 && worst[0] <= ldexp(1, -44) && worst[1] <= ldexp(1, -44);
  CHECK(fine);
  if (!fine)
    fprintf(stderr, "  fast math: worst relative errors %g %g, erf saturation %d\n", worst[0],
            worst[1], erf_sat_bad);
  /* f32 functions: random bit patterns (every exponent, NaNs, infinities,
   * subnormals) and a dense spread over the interesting range */
  const int64_t nv = cg_quick ? 1 << 16 : 1 << 20;
  float *xs = malloc(sizeof(float) * (size_t)nv), *ys = malloc(sizeof(float) * (size_t)nv);
  CHECK(xs && ys);
  for (int64_t i = 0; xs && ys && i < nv; i++) {
    if (i % 2) {
      uint32_t u = (uint32_t)loom_test_uniform(&cg_rng, 0, 4294967296.0);
      memcpy(&xs[i], &u, sizeof u);
    } else {
      xs[i] = (float)(loom_test_uniform(&cg_rng, -1, 1) * scale[(i / 2) % 7] * 1.2);
    }
  }
  if (xs && ys) {
    xs[0] = 0.0f, xs[2] = -0.0f, xs[4] = INFINITY, xs[6] = -INFINITY, xs[8] = 88.72283f,
    xs[10] = -103.97f, xs[12] = -87.34f, xs[14] = 0.625f, xs[16] = -0.625f;
    /* exp's core runs unclamped: these take the selects after it */
    xs[18] = 89.0f, xs[20] = 89.00001f, xs[22] = -104.0f, xs[24] = -104.00001f,
    xs[26] = -3e38f, xs[28] = 3e38f, xs[30] = -1e10f, xs[32] = 44.0f, xs[34] = -44.00001f;
  }
  static const int64_t max_ulp[5] = {1, 1, 2, 1, 2};
  for (int f = 0; fv && xs && ys && f < 5; f++) {
    fv(f, xs, ys, nv);
    int64_t bits_bad = 0, ulp_bad = 0, worst_ulp = 0;
    for (int64_t i = 0; i < nv; i++) {
      float x = xs[i];
      float mine = f == 0   ? lm_expf(x)
                   : f == 1 ? lm_tanhf(x)
                   : f == 2 ? lm_sigmoidf(x)
                   : f == 3 ? lm_logf(x)
                            : lm_erff(x);
      bits_bad += memcmp(&mine, &ys[i], sizeof mine) != 0;
      double r = f == 0   ? exp(x)
                 : f == 1 ? tanh(x)
                 : f == 2 ? ref_sigmoid(x)
                 : f == 3 ? log(x)
                          : erf(x);
      float want = (float)r;
      if (x != x || want != want) {
        ulp_bad += ys[i] == ys[i]; /* NaN in, NaN out */
        continue;
      }
      int64_t d = ulp_dist(ys[i], want);
      worst_ulp = d > worst_ulp ? d : worst_ulp;
      ulp_bad += d > max_ulp[f] || (want == 0 && signbit(want) != signbit(ys[i]));
    }
    CHECK(bits_bad == 0 && ulp_bad == 0);
    if (bits_bad || ulp_bad)
      fprintf(stderr, "  f32 fn %d: %lld differ from kmath.h, %lld beyond %lld ulp (worst %lld)\n",
              f, (long long)bits_bad, (long long)ulp_bad, (long long)max_ulp[f],
              (long long)worst_ulp);
  }
  free(xs);
  free(ys);
  loom_jit_free(m);

  /* exp, tanh, sigmoid and erf of a wide spread of f32 values, and a
   * chain (tanh of exp) */
  const int64_t P = 7, R = cg_quick ? 3001 : 30011, N = P * R;
  loom_kernel k;
  kb_init(&k, "k_fast");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ao[5];
  for (int32_t i = 0; i < 5; i++)
    ao[i] = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t acol = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t ex = kb_op(&k, LOOM_OP_EXP, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t th = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t sg = kb_op(&k, LOOM_OP_SIGMOID, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t ch = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, ex, 0, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 2, 8, 1, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, ex, ao[0], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, th, ao[1], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, sg, ao[2], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, kb_op(&k, LOOM_OP_ERF, LOOM_DTYPE_F32, 1, x, 0, 0), ao[4],
         full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_ROW_REDUCE, ch, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, 1, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 0), ao[3], MAP(0, .p = {R}),
         LOOM_OP_ADD);
  /* a column reduction of sigmoid(x): the buffered fast pass */
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 2, LOOM_KDST_COL_REDUCE, sg, acol, MAP(0, .r = {1}), LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  float *xv = in.p[ax];
  for (int64_t e = 0; e < N; e++) {
    double mag = pow(10.0, loom_test_uniform(&cg_rng, -8, 2.1));
    xv[e] = (float)(e % 2 ? mag : -mag);
  }
  xv[0] = NAN;
  xv[1] = INFINITY;
  xv[2] = -INFINITY;
  xv[3] = -0.0f;
  check_kernel(&k, &in, false);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Outputs of 8 MiB and more go through streaming stores (CG_STREAM_MIN_BYTES):
 * rows of an odd length at an odd base (unaligned heads and tails), a
 * plain stage with row-reduction lanes, and a chunked stage (erf's fast
 * path) storing two outputs. */

int main(void) {
  codegen_check_init("test_codegen_ops");
  test_fast_math();
  static const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I32,
                                   LOOM_DTYPE_I64, LOOM_DTYPE_U8,  LOOM_DTYPE_BOOL};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    test_ops(dts[i]);
    test_casts(dts[i]);
  }
  return codegen_check_finish();
}

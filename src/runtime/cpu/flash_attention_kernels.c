/*
 * Flash attention's tile kernels (flash_attention_kernels.h): the plain C
 * set and the AVX-512F set.
 */
#include "runtime/cpu/flash_attention_kernels.h"

#include "runtime/cpu/flash_attention.h"
#include "runtime/cpu/flash_attention_avx2.h"
#include "rng/philox_fast.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if LOOM_PHILOX_HAVE_X86
#define FA_HAVE_AVX512 1
#include <immintrin.h>
#else
#define FA_HAVE_AVX512 0
#endif

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }



/* -- portable: plain C, auto-vectorised for the baseline where it can be -- */

static void gemm_port(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                      const float *b, int64_t ldb, float *c, int64_t ldc, bool acc) {
  for (int64_t i = 0; i < m; i++) {
    float *restrict ci = c + i * ldc;
    if (!acc)
      for (int64_t j = 0; j < n; j++)
        ci[j] = 0.0f;
    for (int64_t kk = 0; kk < k; kk++) {
      const float av = a[i * ars + kk * aks];
      const float *restrict bk = b + kk * ldb;
      for (int64_t j = 0; j < n; j++)
        ci[j] += av * bk[j];
    }
  }
}

static void transpose_port(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                           int64_t ldd) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      dst[c * ldd + r] = src[r * lds + c];
}

static void col_causal_port(float *x, int64_t ldx, int64_t rows, int64_t n, int64_t t0) {
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < min64(n, t0 + j); i++)
      x[j * ldx + i] = -INFINITY;
}

static void col_bias_port(float *x, int64_t ldx, int64_t rows, int64_t n, const float *b,
                          int64_t brs, int64_t bcs) {
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < n; i++)
      x[j * ldx + i] += b[i * brs + j * bcs];
}

static void row_bias_port(float *x, int64_t n, const float *b, int64_t bcs) {
  for (int64_t j = 0; j < n; j++)
    x[j] += b[j * bcs];
}

static void col_max_port(const float *x, int64_t ldx, int64_t rows, int64_t n, float *m) {
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < n; i++)
      m[i] = x[j * ldx + i] > m[i] ? x[j * ldx + i] : m[i];
}

static void col_exp_sum_port(float *x, int64_t ldx, int64_t rows, int64_t n, float mul,
                             const float *sub, float *sum) {
  for (int64_t i = 0; i < n; i++)
    sum[i] = 0.0f;
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < n; i++) {
      float e = expf(mul * x[j * ldx + i] - sub[i]);
      x[j * ldx + i] = e;
      sum[i] += e;
    }
}

static void col_mask_port(float *x, int64_t ldx, int64_t rows, int64_t n, const uint8_t *bits,
                          int64_t bstride, int64_t kb, float mul) {
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < n; i++)
      x[j * ldx + i] = loom_fa_bit_at(bits + i * bstride, kb + j) ? x[j * ldx + i] * mul : 0.0f;
}

static float exp_sum_port(float *x, int64_t n, float sub) {
  float s = 0.0f;
  for (int64_t j = 0; j < n; j++) {
    x[j] = expf(x[j] - sub);
    s += x[j];
  }
  return s;
}

static void mask_port(float *x, int64_t n, const uint8_t *bits, float mul) {
  for (int64_t j = 0; j < n; j++)
    x[j] = loom_fa_bit_at(bits, j) ? x[j] * mul : 0.0f;
}

static void dsoft_port(float *ds, const float *p, int64_t n, const uint8_t *bits, float inv,
                       float di) {
  for (int64_t j = 0; j < n; j++) {
    float t = !bits ? ds[j] : loom_fa_bit_at(bits, j) ? ds[j] * inv : 0.0f;
    ds[j] = p[j] * (t - di);
  }
}

/* dst = scale * src, rounded once from double. */
static void scale_port(const float *src, int64_t n, double scale, float *dst) {
  for (int64_t x = 0; x < n; x++)
    dst[x] = (float)((double)src[x] * scale);
}

static double dot_port(const float *x, const float *y, int64_t n) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; j++)
    sum += (double)x[j] * (double)y[j];
  return sum;
}

static const fa_kernels kernels_port = {
    .gemm = gemm_port,       .transpose = transpose_port,     .col_causal = col_causal_port,
    .col_max = col_max_port, .col_exp_sum = col_exp_sum_port, .col_mask = col_mask_port,
    .exp_sum = exp_sum_port, .mask = mask_port,               .dsoft = dsoft_port,
    .scale = scale_port,     .dot = dot_port,                 .col_bias = col_bias_port,
    .row_bias = row_bias_port};

/* -- AVX-512F ---------------------------------------------------------------- */

#if FA_HAVE_AVX512

#define T512 __attribute__((target("avx512f")))
#define I512 static inline __attribute__((always_inline, target("avx512f")))

/* Lanes [0, n) of a 16-lane vector, n may exceed 16. */
I512 __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* The tile product's register block: mr rows (<= 8) x nv vectors of 16
 * columns (masks m0, m1) of C, all in registers, k summed in order. full:
 * both vectors whole (unmasked loads of B: about 15% faster, measured). */
I512 void mk(int mr, int nv, bool full, int64_t k, const float *a, int64_t ars, int64_t aks,
             const float *b, int64_t ldb, float *c, int64_t ldc, __mmask16 m0, __mmask16 m1,
             bool acc) {
  __m512 c0[8], c1[8];
  for (int r = 0; r < mr; r++) {
    c0[r] = acc ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    if (nv > 1) c1[r] = acc ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; kk++) {
    const float *bk = b + kk * ldb, *ak = a + kk * aks;
    __m512 b0 = full ? _mm512_loadu_ps(bk) : _mm512_maskz_loadu_ps(m0, bk);
    __m512 b1 = nv < 2 ? b0 : full ? _mm512_loadu_ps(bk + 16) : _mm512_maskz_loadu_ps(m1, bk + 16);
    for (int r = 0; r < mr; r++) {
      __m512 av = _mm512_set1_ps(ak[r * ars]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      if (nv > 1) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    if (nv > 1) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

#define MK_CASES(NV, FULL)                                                                         \
  switch (mr) {                                                                                    \
  case 8: mk(8, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 7: mk(7, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 6: mk(6, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 5: mk(5, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 4: mk(4, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 3: mk(3, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  case 2: mk(2, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                 \
  default: mk(1, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  }

T512 static void gemm_512(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                          const float *b, int64_t ldb, float *c, int64_t ldc, bool acc) {
  for (int64_t j = 0; j < n; j += 32) {
    __mmask16 m0 = lanes(n - j), m1 = n - j > 16 ? lanes(n - j - 16) : 0;
    const float *bj = b + j;
    for (int64_t i = 0; i < m; i += 8) {
      int mr = (int)min64(8, m - i);
      const float *ai = a + i * ars;
      float *cij = c + i * ldc + j;
      if (n - j >= 32) {
        MK_CASES(2, true)
      } else if (m1) {
        MK_CASES(2, false)
      } else {
        MK_CASES(1, false)
      }
    }
  }
}

/* 8 x 8 transpose of floats in AVX registers. */
I512 void tr8(const float *s, int64_t lds, float *d, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds);
  __m256 r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

T512 static void transpose_512(int64_t rows, int64_t cols, const float *src, int64_t lds,
                               float *dst, int64_t ldd) {
  int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8)
      tr8(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = r < r8 ? c8 : 0; c < cols; c++)
      dst[c * ldd + r] = src[r * lds + c];
}

/* exp(x - sub) in 16 lanes as 2^t: t = x log2(e) - sub log2(e) (one FMA;
 * the rounding of sub log2(e) is the same for a whole row, so it cancels in
 * the softmax), t = n + f with n = round(t) and |f| <= 1/2, 2^f by a
 * degree-6 polynomial (fitted here: relative error 2e-9, under f32
 * rounding), times 2^n by scalef (which underflows to 0 correctly). NaN
 * stays NaN; arguments are <= 0 up to rounding. */
I512 __m512 exp2_512(__m512 t) {
  t = _mm512_max_ps(_mm512_set1_ps(-150.0f), t); /* max returns t if t is NaN */
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.535338615e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339888198e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437329e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332447e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472029e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

#define FA_LOG2E 1.4426950408889634

T512 static float exp_sum_512(float *x, int64_t n, float sub) {
  const __m512 l2e = _mm512_set1_ps((float)FA_LOG2E);
  const __m512 c = _mm512_set1_ps((float)(-(double)sub * FA_LOG2E));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = lanes(n - j);
    __m512 e = exp2_512(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + j), l2e, c));
    _mm512_mask_storeu_ps(x + j, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

T512 static void scale_512(const float *src, int64_t n, double scale, float *dst) {
  const __m512d f = _mm512_set1_pd(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(dst + j,
                     _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(src + j)), f)));
  for (; j < n; j++)
    dst[j] = (float)((double)src[j] * scale);
}

/* Bits j .. j + 15 of the mask (bits holds at least (n + 7) / 8 bytes). */
I512 __mmask16 bits16(const uint8_t *bits, int64_t j, int64_t n) {
  unsigned v = bits[j >> 3];
  if (j + 8 < n) v |= (unsigned)bits[(j >> 3) + 1] << 8;
  return (__mmask16)v;
}

T512 static void mask_512(float *x, int64_t n, const uint8_t *bits, float mul) {
  const __m512 f = _mm512_set1_ps(mul);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = lanes(n - j), keep = bits16(bits, j, n);
    __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    _mm512_mask_storeu_ps(x + j, m, _mm512_maskz_mul_ps(keep, v, f));
  }
}

T512 static void dsoft_512(float *ds, const float *p, int64_t n, const uint8_t *bits, float inv,
                           float di) {
  const __m512 f = _mm512_set1_ps(inv), d = _mm512_set1_ps(di);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = lanes(n - j);
    __m512 t = _mm512_maskz_loadu_ps(m, ds + j);
    if (bits) t = _mm512_maskz_mul_ps(bits16(bits, j, n), t, f);
    t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_sub_ps(t, d));
    _mm512_mask_storeu_ps(ds + j, m, t);
  }
}

T512 static void col_causal_512(float *x, int64_t ldx, int64_t rows, int64_t n, int64_t t0) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < rows; j++)
    for (int64_t i = 0; i < min64(n, t0 + j); i += 16)
      _mm512_mask_storeu_ps(x + j * ldx + i, lanes(min64(n, t0 + j) - i), ninf);
}

/* The bias of a key row: one value for every query (brs 0: a padding
 * mask), a contiguous run (brs 1), or gathered. */
T512 static void col_bias_512(float *x, int64_t ldx, int64_t rows, int64_t n, const float *b,
                              int64_t brs, int64_t bcs) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,
                                                          4, 3, 2, 1, 0),
                                         _mm512_set1_epi32((int)brs));
  const bool gather = brs > 1 && brs * 16 < INT32_MAX;
  for (int64_t j = 0; j < rows; j++) {
    const float *bj = b + j * bcs;
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 k = lanes(n - i);
      __m512 v;
      if (brs == 0)
        v = _mm512_set1_ps(bj[0]);
      else if (brs == 1)
        v = _mm512_maskz_loadu_ps(k, bj + i);
      else if (gather)
        v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, bj + i * brs, 4);
      else {
        float t[16] = {0};
        for (int64_t l = 0; l < min64(16, n - i); l++) t[l] = bj[(i + l) * brs];
        v = _mm512_loadu_ps(t);
      }
      float *xj = x + j * ldx + i;
      _mm512_mask_storeu_ps(xj, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, xj), v));
    }
  }
}

T512 static void row_bias_512(float *x, int64_t n, const float *b, int64_t bcs) {
  if (bcs != 1) {
    for (int64_t j = 0; j < n; j++) x[j] += b[j * bcs];
    return;
  }
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = lanes(n - j);
    _mm512_mask_storeu_ps(x + j, k,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + j), _mm512_maskz_loadu_ps(k, b + j)));
  }
}

T512 static void col_max_512(const float *x, int64_t ldx, int64_t rows, int64_t n, float *m) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = lanes(n - i);
    __m512 v = _mm512_mask_loadu_ps(ninf, k, m + i);
    for (int64_t j = 0; j < rows; j++)
      v = _mm512_max_ps(v, _mm512_mask_loadu_ps(ninf, k, x + j * ldx + i));
    _mm512_mask_storeu_ps(m + i, k, v);
  }
}

T512 static void col_exp_sum_512(float *x, int64_t ldx, int64_t rows, int64_t n, float mul,
                                 const float *sub, float *sum) {
  const __m512 l2e = _mm512_set1_ps((float)(mul * FA_LOG2E));
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = lanes(n - i);
    const __m512 c = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sub + i), _mm512_set1_ps(-(float)FA_LOG2E));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < rows; j++) {
      float *p = x + j * ldx + i;
      __m512 e = exp2_512(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, p), l2e, c));
      _mm512_mask_storeu_ps(p, k, e);
      acc = _mm512_add_ps(acc, e);
    }
    _mm512_mask_storeu_ps(sum + i, k, acc);
  }
}

/* The keep bits of 16 query rows for 32 keys at a time, as lanes: bit b
 * of lane l is key kb + j + b of row l. */
T512 static void col_mask_512(float *x, int64_t ldx, int64_t rows, int64_t n, const uint8_t *bits,
                              int64_t bstride, int64_t kb, float mul) {
  const __m512 f = _mm512_set1_ps(mul);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = lanes(n - i);
    for (int64_t j = 0; j < rows; j += 32) {
      uint32_t w[16] = {0};
      for (int64_t l = 0; l < min64(16, n - i); l++)
        memcpy(&w[l], bits + (i + l) * bstride + (kb + j) / 8, sizeof w[l]);
      const __m512i g = _mm512_loadu_si512(w);
      for (int64_t b = 0; b < min64(32, rows - j); b++) {
        __mmask16 keep = _mm512_test_epi32_mask(g, _mm512_set1_epi32((int)(1u << b)));
        float *p = x + (j + b) * ldx + i;
        _mm512_mask_storeu_ps(p, k, _mm512_maskz_mul_ps(keep, _mm512_maskz_loadu_ps(k, p), f));
      }
    }
  }
}

/* The upper 8 floats of v as doubles. */
I512 __m512d hi_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* Sixteen double lanes (float products are exact in double), then their sum. */
T512 static double dot_512(const float *x, const float *y, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = lanes(n - j);
    __m512 a = _mm512_maskz_loadu_ps(k, x + j), b = _mm512_maskz_loadu_ps(k, y + j);
    lo = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
                         _mm512_cvtps_pd(_mm512_castps512_ps256(b)), lo);
    hi = _mm512_fmadd_pd(hi_pd(a), hi_pd(b), hi);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

static const fa_kernels kernels_512 = {
    .gemm = gemm_512,       .transpose = transpose_512,     .col_causal = col_causal_512,
    .col_max = col_max_512, .col_exp_sum = col_exp_sum_512, .col_mask = col_mask_512,
    .exp_sum = exp_sum_512, .mask = mask_512,               .dsoft = dsoft_512,
    .scale = scale_512,     .dot = dot_512,                 .col_bias = col_bias_512,
    .row_bias = row_bias_512};

#endif /* FA_HAVE_AVX512 */

#if LOOM_FA_HAVE_AVX2
/* AVX2 + FMA where the time goes; the masks (dropout) stay plain C. */
static const fa_kernels kernels_avx2 = {
    .gemm = loom_fa_gemm_avx2,       .transpose = loom_fa_transpose_avx2,
    .col_causal = col_causal_port,   .col_max = loom_fa_col_max_avx2,
    .col_exp_sum = loom_fa_col_exp_sum_avx2, .col_mask = col_mask_port,
    .exp_sum = loom_fa_exp_sum_avx2, .mask = mask_port,
    .dsoft = loom_fa_dsoft_avx2,     .scale = loom_fa_scale_avx2,
    .dot = loom_fa_dot_avx2,         .col_bias = loom_fa_col_bias_avx2,
    .row_bias = loom_fa_row_bias_avx2};
#endif

bool loom_flash_attn_impl_supported(int32_t impl) {
  switch (impl) {
  case LOOM_FLASH_ATTN_IMPL_BEST:
  case LOOM_FLASH_ATTN_IMPL_PORTABLE: return true;
#if FA_HAVE_AVX512
  case LOOM_FLASH_ATTN_IMPL_AVX512: return __builtin_cpu_supports("avx512f");
#endif
  case LOOM_FLASH_ATTN_IMPL_AVX2: return loom_fa_avx2_supported();
  default: return false;
  }
}

const fa_kernels *loom_fa_kernels(int32_t impl) {
#if FA_HAVE_AVX512
  if ((impl == LOOM_FLASH_ATTN_IMPL_BEST || impl == LOOM_FLASH_ATTN_IMPL_AVX512) &&
      __builtin_cpu_supports("avx512f"))
    return &kernels_512;
#endif
#if LOOM_FA_HAVE_AVX2
  if ((impl == LOOM_FLASH_ATTN_IMPL_BEST || impl == LOOM_FLASH_ATTN_IMPL_AVX2) &&
      loom_fa_avx2_supported())
    return &kernels_avx2;
#endif
  return &kernels_port;
}

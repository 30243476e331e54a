/*
 * Flash attention's AVX2 + FMA tile kernels (flash_attention_avx2.h). The
 * plain C set runs at SSE2 width with a libm expf per element: on a CPU
 * with AVX2 but no AVX-512 (the development machine's AMD EPYC) that left
 * the main job's short-sequence attention at 8-11 GFLOP/s. Each element of
 * a product is summed over k in order in one FMA accumulator, as in the
 * other sets, so a product does not depend on its blocking.
 */
#include "runtime/cpu/flash_attention_avx2.h"

#if LOOM_FA_HAVE_AVX2

#include <immintrin.h>
#include <math.h>

#define TAV2 __attribute__((target("avx2,fma")))
#define IAV2 static inline __attribute__((always_inline, target("avx2,fma")))

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

bool loom_fa_avx2_supported(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* All-ones in lanes [0, n) of 8 (n may exceed 8 or be <= 0). */
IAV2 __m256i lanes8(int64_t n) {
  const int32_t c = (int32_t)(n > 8 ? 8 : n < 0 ? 0 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 floats at p: whole vectors by plain loads and stores, a row's last
 * partial vector by masked ones (lanes k). Masked stores cost about 8
 * times a plain one on AMD Zen (3.8 against 0.45 ns a vector, measured
 * on the development machine's EPYC), so they are kept for the tail. */
IAV2 __m256 load8(const float *p, __m256i k, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, k);
}
IAV2 void store8(float *p, __m256i k, bool full, __m256 v) {
  if (full)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, k, v);
}

/* The register block: mr rows (<= 6) x nv vectors of 8 columns of C, k
 * summed in order. full: every vector whole (plain loads and stores). */
IAV2 void mk8(int mr, int nv, bool full, int64_t k, const float *a, int64_t ars, int64_t aks,
              const float *b, int64_t ldb, float *c, int64_t ldc, __m256i m0, __m256i m1,
              bool acc) {
  __m256 c0[6], c1[6];
  for (int r = 0; r < mr; r++) {
    float *cr = c + r * ldc;
    c0[r] = acc ? load8(cr, m0, full) : _mm256_setzero_ps();
    if (nv > 1) c1[r] = acc ? load8(cr + 8, m1, full) : _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; kk++) {
    const float *bk = b + kk * ldb, *ak = a + kk * aks;
    __m256 b0 = load8(bk, m0, full);
    __m256 b1 = nv < 2 ? b0 : load8(bk + 8, m1, full);
    for (int r = 0; r < mr; r++) {
      __m256 av = _mm256_broadcast_ss(ak + r * ars);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      if (nv > 1) c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < mr; r++) {
    float *cr = c + r * ldc;
    store8(cr, m0, full, c0[r]);
    if (nv > 1) store8(cr + 8, m1, full, c1[r]);
  }
}

#define MK8_CASES(NV, FULL)                                                                        \
  switch (mr) {                                                                                    \
  case 6: mk8(6, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  case 5: mk8(5, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  case 4: mk8(4, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  case 3: mk8(3, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  case 2: mk8(2, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;                \
  default: mk8(1, NV, FULL, k, ai, ars, aks, bj, ldb, cij, ldc, m0, m1, acc); break;               \
  }

TAV2 void loom_fa_gemm_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                            int64_t aks, const float *b, int64_t ldb, float *c, int64_t ldc,
                            bool acc) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t w = n - j;
    const __m256i m0 = lanes8(w), m1 = lanes8(w - 8);
    const float *bj = b + j;
    for (int64_t i = 0, mr; i < m; i += mr) {
      /* blocks of 6 rows; the last 7 to 9 as two of 3 to 5: a block of 1
       * or 2 rows keeps too few accumulators to cover the FMA latency (2
       * rows ran at 2.5x the time a row of 6 did) */
      const int64_t left = m - i;
      mr = left >= 10 || left <= 6 ? min64(6, left) : left - left / 2;
      const float *ai = a + i * ars;
      float *cij = c + i * ldc + j;
      if (w >= 16) {
        MK8_CASES(2, true)
      } else if (w == 8) {
        MK8_CASES(1, true)
      } else if (w > 8) {
        MK8_CASES(2, false)
      } else {
        MK8_CASES(1, false)
      }
    }
  }
}

/* 8 x 8 transpose of floats in registers. */
IAV2 void tr8x8(const float *s, int64_t lds, float *d, int64_t ldd) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(d + i * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

TAV2 void loom_fa_transpose_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds,
                                 float *dst, int64_t ldd) {
  const int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8)
      tr8x8(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = r < r8 ? c8 : 0; c < cols; c++)
      dst[c * ldd + r] = src[r * lds + c];
}

/* 2^t in 8 lanes: t = n + f, n = round(t), |f| <= 1/2, 2^f by the same
 * degree-6 polynomial as the AVX-512 set (relative error 2e-9), times 2^n
 * built in the exponent bits. t is clamped to -127 first, where those bits
 * are 0: exp(-inf) and anything below 2^-126.5 give exactly 0 (what a
 * masked score needs). NaN stays NaN (max returns its second operand,
 * t, when t is NaN, and f is then NaN). */
IAV2 __m256 exp2_avx2(__m256 t) {
  t = _mm256_max_ps(_mm256_set1_ps(-127.0f), t);
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.535338615e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339888198e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437329e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332447e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472029e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#define FA_LOG2E 1.4426950408889634

/* The sum of 8 lanes, in a fixed order. */
IAV2 float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TAV2 float loom_fa_exp_sum_avx2(float *x, int64_t n, float sub) {
  const __m256 l2e = _mm256_set1_ps((float)FA_LOG2E);
  const __m256 c = _mm256_set1_ps((float)(-(double)sub * FA_LOG2E));
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 e = exp2_avx2(_mm256_fmadd_ps(_mm256_loadu_ps(x + j), l2e, c));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    const __m256i m = lanes8(n - j);
    __m256 e = exp2_avx2(_mm256_fmadd_ps(_mm256_maskload_ps(x + j, m), l2e, c));
    _mm256_maskstore_ps(x + j, m, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
  }
  return hsum8(acc);
}

TAV2 void loom_fa_col_max_avx2(const float *x, int64_t ldx, int64_t rows, int64_t n, float *m) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = lanes8(n - i);
    const bool full = n - i >= 8;
    __m256 v = load8(m + i, k, full);
    for (int64_t j = 0; j < rows; j++)
      v = _mm256_max_ps(v, load8(x + j * ldx + i, k, full));
    store8(m + i, k, full, v);
  }
}

TAV2 void loom_fa_col_exp_sum_avx2(float *x, int64_t ldx, int64_t rows, int64_t n, float mul,
                                   const float *sub, float *sum) {
  const __m256 l2e = _mm256_set1_ps((float)(mul * FA_LOG2E));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = lanes8(n - i);
    const bool full = n - i >= 8;
    const __m256 c = _mm256_mul_ps(load8(sub + i, k, full), _mm256_set1_ps(-(float)FA_LOG2E));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < rows; j++) {
      float *p = x + j * ldx + i;
      __m256 e = exp2_avx2(_mm256_fmadd_ps(load8(p, k, full), l2e, c));
      store8(p, k, full, e);
      acc = _mm256_add_ps(acc, e);
    }
    store8(sum + i, k, full, acc);
  }
}

/* The bias of the transposed scores (fa_kernels.col_bias): one value per
 * key (brs 0), a run along the queries (brs 1), or, for a bias with a row
 * per query along the keys (bcs 1: a learned [H, Sq, Sk] bias), 8 x 8
 * blocks read along the keys and transposed in registers; anything else
 * element by element. One add per element, as the plain C set. */
TAV2 void loom_fa_col_bias_avx2(float *x, int64_t ldx, int64_t rows, int64_t n, const float *b,
                                int64_t brs, int64_t bcs) {
  if (brs > 1 && bcs == 1) { /* whole 8 x 8 blocks, then the edges */
    const int64_t r8 = rows & ~(int64_t)7, n8 = n & ~(int64_t)7;
    float t[64];
    for (int64_t j = 0; j < r8; j += 8)
      for (int64_t i = 0; i < n8; i += 8) {
        tr8x8(b + i * brs + j, brs, t, 8);
        for (int r = 0; r < 8; r++) {
          float *xr = x + (j + r) * ldx + i;
          _mm256_storeu_ps(xr, _mm256_add_ps(_mm256_loadu_ps(xr), _mm256_loadu_ps(t + 8 * r)));
        }
      }
    for (int64_t j = 0; j < rows; j++)
      for (int64_t i = j < r8 ? n8 : 0; i < n; i++) x[j * ldx + i] += b[i * brs + j];
    return;
  }
  for (int64_t j = 0; j < rows; j++) {
    const float *bj = b + j * bcs;
    float *xj = x + j * ldx;
    if (brs > 1) {
      for (int64_t i = 0; i < n; i++) xj[i] += bj[i * brs];
      continue;
    }
    for (int64_t i = 0; i < n; i += 8) {
      const __m256i k = lanes8(n - i);
      const bool full = n - i >= 8;
      const __m256 v = brs == 0 ? _mm256_set1_ps(bj[0]) : load8(bj + i, k, full);
      store8(xj + i, k, full, _mm256_add_ps(load8(xj + i, k, full), v));
    }
  }
}

TAV2 void loom_fa_row_bias_avx2(float *x, int64_t n, const float *b, int64_t bcs) {
  if (bcs != 1) {
    for (int64_t j = 0; j < n; j++) x[j] += b[j * bcs];
    return;
  }
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i k = lanes8(n - j);
    const bool full = n - j >= 8;
    store8(x + j, k, full, _mm256_add_ps(load8(x + j, k, full), load8(b + j, k, full)));
  }
}

/* Lanes whose bit of the byte is set (j a multiple of 8). */
IAV2 __m256 keep8(const uint8_t *bits, int64_t j) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i v = _mm256_and_si256(_mm256_set1_epi32(bits[j >> 3]), sel);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, sel));
}

TAV2 void loom_fa_dsoft_avx2(float *ds, const float *p, int64_t n, const uint8_t *bits, float inv,
                             float di) {
  const __m256 f = _mm256_set1_ps(inv), d = _mm256_set1_ps(di);
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i m = lanes8(n - j);
    const bool full = n - j >= 8;
    __m256 t = load8(ds + j, m, full);
    if (bits) t = _mm256_and_ps(_mm256_mul_ps(t, f), keep8(bits, j));
    t = _mm256_mul_ps(load8(p + j, m, full), _mm256_sub_ps(t, d));
    store8(ds + j, m, full, t);
  }
}

TAV2 void loom_fa_scale_avx2(const float *src, int64_t n, double scale, float *dst) {
  const __m256d f = _mm256_set1_pd(scale);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    _mm_storeu_ps(dst + j, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(src + j)), f)));
  for (; j < n; j++)
    dst[j] = (float)((double)src[j] * scale);
}

/* Eight double lanes (float products are exact in double), then their sum. */
TAV2 double loom_fa_dot_avx2(const float *x, const float *y, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i k = lanes8(n - j);
    const bool full = n - j >= 8;
    const __m256 a = load8(x + j, k, full), b = load8(y + j, k, full);
    lo = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                         _mm256_cvtps_pd(_mm256_castps256_ps128(b)), lo);
    hi = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                         _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), hi);
  }
  const __m256d s = _mm256_add_pd(lo, hi);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

#else

bool loom_fa_avx2_supported(void) { return false; }

#endif

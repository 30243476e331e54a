/*
 * Philox4x32 and the dropout kernels with AVX2 (+FMA for the exact
 * division): 8 blocks per vector, two vectors in flight. Every function
 * here carries the target attribute and is only reached through the
 * dispatcher after __builtin_cpu_supports("avx2") and ("fma").
 */
#include "rng/philox_fast.h"

#if LOOM_PHILOX_HAVE_X86

#include "rng/philox.h"

#include <immintrin.h>
#include <string.h>

#define T256 __attribute__((target("avx2,fma")))
#define I256 static inline __attribute__((always_inline, target("avx2,fma")))

typedef struct v8 {
  __m256i c0, c1, c2, c3;
} v8;

/* hi and lo halves of a * m in 8 lanes: vpmuludq on the even lanes and on
 * the odd ones after a shift, then shuffles and blends put the halves back. */
I256 void mulhilo(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
  __m256i pe = _mm256_mul_epu32(a, m);
  __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_shuffle_epi32(pe, 0xB1), po, 0xAA);
  *lo = _mm256_blend_epi32(pe, _mm256_shuffle_epi32(po, 0xB1), 0xAA);
}

I256 void round8(v8 *s, __m256i ka, __m256i kb, __m256i m0, __m256i m1) {
  __m256i hi0, lo0, hi1, lo1;
  mulhilo(s->c0, m0, &hi0, &lo0);
  mulhilo(s->c2, m1, &hi1, &lo1);
  s->c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, s->c1), ka);
  s->c1 = lo1;
  s->c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, s->c3), kb);
  s->c3 = lo0;
}

/* Counters of blocks b0 .. b0 + 7 (mod 2^64). Lane 4g + k holds block
 * 2k + g, so the 4x4 transposes in store8 leave the blocks in order. */
I256 v8 counters8(uint64_t b0, __m256i c2, __m256i c3) {
  const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  __m256i base = _mm256_set1_epi32((int)(uint32_t)b0);
  __m256i lo = _mm256_add_epi32(base, perm);
  /* no carry where lo >= base (unsigned): that lane gets hi + 1 - 1 */
  __m256i no_carry = _mm256_cmpeq_epi32(_mm256_max_epu32(lo, base), lo);
  __m256i hi = _mm256_add_epi32(_mm256_set1_epi32((int)((uint32_t)(b0 >> 32) + 1u)), no_carry);
  v8 s = {lo, hi, c2, c3};
  return s;
}

I256 void store8(const v8 *s, uint32_t *out) {
  __m256i t0 = _mm256_unpacklo_epi32(s->c0, s->c1), t1 = _mm256_unpackhi_epi32(s->c0, s->c1);
  __m256i t2 = _mm256_unpacklo_epi32(s->c2, s->c3), t3 = _mm256_unpackhi_epi32(s->c2, s->c3);
  _mm256_storeu_si256((__m256i *)out, _mm256_unpacklo_epi64(t0, t2));
  _mm256_storeu_si256((__m256i *)(out + 8), _mm256_unpackhi_epi64(t0, t2));
  _mm256_storeu_si256((__m256i *)(out + 16), _mm256_unpacklo_epi64(t1, t3));
  _mm256_storeu_si256((__m256i *)(out + 24), _mm256_unpackhi_epi64(t1, t3));
}

I256 void run(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t b0, int64_t nb,
              int rounds, uint32_t *out) {
  const __m256i c2 = _mm256_set1_epi32((int)ctr2), c3 = _mm256_set1_epi32((int)ctr3);
  const __m256i m0 = _mm256_set1_epi32((int)LOOM_PHILOX_M0);
  const __m256i m1 = _mm256_set1_epi32((int)LOOM_PHILOX_M1);
  uint32_t ka[LOOM_PHILOX_MAX_ROUNDS], kb[LOOM_PHILOX_MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    ka[r] = key[0] + (uint32_t)r * LOOM_PHILOX_W0;
    kb[r] = key[1] + (uint32_t)r * LOOM_PHILOX_W1;
  }
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    v8 a = counters8(b0 + (uint64_t)i, c2, c3), b = counters8(b0 + (uint64_t)i + 8, c2, c3);
    for (int r = 0; r < rounds; r++) {
      __m256i kx = _mm256_set1_epi32((int)ka[r]), ky = _mm256_set1_epi32((int)kb[r]);
      round8(&a, kx, ky, m0, m1);
      round8(&b, kx, ky, m0, m1);
    }
    store8(&a, out + 4 * i);
    store8(&b, out + 4 * i + 32);
  }
  for (; i < nb; i += 8) {
    v8 a = counters8(b0 + (uint64_t)i, c2, c3);
    for (int r = 0; r < rounds; r++)
      round8(&a, _mm256_set1_epi32((int)ka[r]), _mm256_set1_epi32((int)kb[r]), m0, m1);
    if (i + 8 <= nb) {
      store8(&a, out + 4 * i);
    } else {
      uint32_t tmp[32];
      store8(&a, tmp);
      memcpy(out + 4 * i, tmp, sizeof(uint32_t) * 4 * (size_t)(nb - i));
    }
  }
}

T256 void loom_philox_avx2_gen(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                               int64_t n_blocks, int rounds, uint32_t *out) {
  switch (rounds) {
  case 10: run(key, ctr2, ctr3, block0, n_blocks, 10, out); break;
  case 7: run(key, ctr2, ctr3, block0, n_blocks, 7, out); break;
  default: run(key, ctr2, ctr3, block0, n_blocks, rounds, out); break;
  }
}

/* Correctly rounded (double)a / b from y = 1 / b; see philox_avx512.c. */
I256 __m256d div_exact(__m256d a, __m256d b, __m256d y) {
  __m256d q = _mm256_mul_pd(a, y);
  __m256d r = _mm256_fnmadd_pd(q, b, a);
  __m256d fix = _mm256_cmp_pd(r, _mm256_setzero_pd(), _CMP_NEQ_OQ);
  return _mm256_blendv_pd(q, _mm256_fmadd_pd(r, y, q), fix);
}

/* w >= t as unsigned 32-bit: all ones where true. */
I256 __m256i ge_epu32(__m256i w, __m256i t) {
  return _mm256_cmpeq_epi32(_mm256_max_epu32(w, t), w);
}

T256 void loom_philox_avx2_apply(const uint32_t *w, int64_t n, uint32_t thr, double div,
                                 double inv, const float *x, float *y) {
  const __m256i t = _mm256_set1_epi32((int)thr);
  const __m256d vd = _mm256_set1_pd(div), vi = _mm256_set1_pd(inv);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256i keep = ge_epu32(_mm256_loadu_si256((const __m256i *)(w + k)), t);
    __m256 v = _mm256_loadu_ps(x + k);
    __m128 yl = _mm256_cvtpd_ps(div_exact(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vd, vi));
    __m128 yh = _mm256_cvtpd_ps(div_exact(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vd, vi));
    __m256 r = _mm256_insertf128_ps(_mm256_castps128_ps256(yl), yh, 1);
    _mm256_storeu_ps(y + k, _mm256_and_ps(_mm256_castsi256_ps(keep), r));
  }
  for (; k < n; k++)
    y[k] = w[k] >= thr ? (float)((double)x[k] / div) : 0.0f;
}

T256 void loom_philox_avx2_bits(const uint32_t *w, int64_t n, uint32_t thr, uint8_t *bits) {
  const __m256i t = _mm256_set1_epi32((int)thr);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256i keep = ge_epu32(_mm256_loadu_si256((const __m256i *)(w + k)), t);
    bits[k / 8] = (uint8_t)_mm256_movemask_ps(_mm256_castsi256_ps(keep)); /* lane 0 -> bit 0 */
  }
  if (k < n) {
    unsigned b = 0;
    for (int64_t e = 0; k + e < n; e++)
      b |= (unsigned)(w[k + e] >= thr) << e;
    bits[k / 8] = (uint8_t)b;
  }
}

#endif

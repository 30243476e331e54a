/*
 * The kernel IR's own f32 transcendental functions (kernel.h, "Numeric
 * semantics"): exp, tanh, sigmoid, log and erf of an f32 operand with an f32 result
 * are defined as these functions, not as libm's double functions rounded.
 * The interpreter (kernel/interp.c) calls them; the C generator pastes the
 * very same text into the prelude of every generated file
 * (codegen/c_prelude.c, LOOM_KMATH_STR), so generated code and the
 * interpreter agree bit for bit while gcc vectorises the functions in
 * float lanes (16 per AVX-512 vector, where double needed 8 and a check).
 *
 * Each function is a macro holding its definition, so that one token
 * sequence is both compiled here and stringified for generated C. The
 * bodies use only operations that are correctly rounded in IEEE single
 * precision (+, -, *, /, fmaf, comparisons, selects, exact bit
 * manipulation of powers of two), each in its own statement, so the
 * result does not depend on the compiler, vectorisation or FMA
 * contraction (the interpreter is built as ISO C, where gcc does not
 * contract; clang contracts only inside one expression, and every
 * rounding step here is a statement of its own). No macros (INFINITY,
 * memcpy, ...) inside: they would be expanded into the stringified text.
 *
 * Accuracy (measured over every f32 input against libm's double result
 * rounded to f32; tests/test_codegen.c checks a sample): lm_expf and
 * lm_tanhf and lm_logf within 1 ulp (lm_logf: every input), lm_sigmoidf
 * and lm_erff within 2 ulp (lm_erff: a third of all inputs, every third
 * bit pattern; 99.7% within 1 ulp). Specials: exp(-inf) =
 * 0, exp(inf) = inf, tanh(+-inf) = +-1, sigmoid(-inf) = 0, sigmoid(inf) =
 * 1, tanh(+-0) = +-0 (tanh(x) = x below 2^-12); overflow gives inf and
 * underflow rounds through the subnormals; a NaN operand is returned as
 * it is (sign and payload: a NaN made inside would differ between vector
 * and scalar code).
 *
 * lm_expf: x = k ln2 + r with k = round(x / ln2) (the 1.5 * 2^23 shift),
 * r = x - k ln2_hi exactly (one fmaf: k ln2_hi has its low bit at 2^-24
 * and |r| < 0.5, so r fits in 24 bits), minus k ln2_lo; exp(r) =
 * 1 + r (1 + r P(r)) with Cephes' expf polynomial P (relative error
 * 4e-9 on |r| <= ln2 / 2); times 2^k as two exact powers of two (the
 * second multiplication rounds once, into the subnormals if need be).
 * That much is lm_expf_core, meaningful on [-104, 89]; lm_expf then
 * selects 0 below and inf above (exp rounds to them there) and the NaN.
 * Selecting afterwards, not clamping x first, gives the same bits for
 * every input (checked over all 2^32): a clamp to a constant let gcc
 * (partial redundancy elimination, jump threading) evaluate the whole
 * function once per case and blend the three, a third more instructions
 * a vector.
 * lm_tanhf: Cephes' odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1)
 * above (with the sign of x; the core's e^2|x| is in range up to |x| =
 * 44, and 1 is selected beyond, where tanh rounded to 1 long before).
 * lm_sigmoidf: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below, as the
 * op table's sigmoid; it calls the core with -|x|, which never
 * overflows, and selects only the underflow.
 * lm_logf: x = 2^e m with m in (sqrt(1/2), sqrt(2)] (subnormals scaled by
 * 2^25 first, exactly), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1 and
 * Cephes' logf polynomial P, plus e ln2 in two parts (0.693359375 exact,
 * -2.12194440e-4); log(0) = -inf, log(x < 0) = NaN (the quiet NaN
 * 0x7fc00000, the same bits in vector and scalar code), log(inf) = inf.
 * lm_erff: below |x| = 1, x P(x^2) with P of degree 7; from 1 to 4,
 * 1 - Q(t) with Q of degree 14 in t = (|x| - 2.5) / 1.5 fitted to erfc
 * (absolute error 1e-8, under a sixth of an ulp of the result); 1 above
 * 3.95 (erfc < 2^-25 there: erf rounds to 1; Q runs unclamped, its value
 * beyond being discarded); the sign of x, erf(-0) =
 * -0. Both polynomials are least-squares Chebyshev fits, coefficients
 * rounded to f32, and both are evaluated (a select picks one), so the
 * function vectorises without branches: about 25 fmaf a value, where
 * libm's double erf rounded took a 61-term double series per value.
 */
#ifndef LOOM_KERNEL_KMATH_H
#define LOOM_KERNEL_KMATH_H

#include <math.h>
#include <stdint.h>

#define LOOM_KMATH_EXPF                                                                          \
  static inline float lm_expf_core(float x) {                                                     \
    float kx = x * 0x1.715476p+0f;                                                                \
    float kf = kx + 0x1.8p+23f;                                                                   \
    union { float f; uint32_t u; } kb = {kf};                                                     \
    int32_t k = (int32_t)(kb.u - 0x4b400000u);                                                    \
    kf = kf - 0x1.8p+23f;                                                                         \
    float r = fmaf(-kf, 0x1.62e43p-1f, x);                                                        \
    r = fmaf(-kf, -0x1.05c61p-29f, r);                                                            \
    float p = 0x1.a0d2cep-13f;                                                                    \
    p = fmaf(p, r, 0x1.6e879cp-10f);                                                              \
    p = fmaf(p, r, 0x1.11121p-7f);                                                                \
    p = fmaf(p, r, 0x1.555382p-5f);                                                               \
    p = fmaf(p, r, 0x1.555554p-3f);                                                               \
    p = fmaf(p, r, 0x1p-1f);                                                                      \
    p = fmaf(p, r, 1.0f);                                                                         \
    p = fmaf(p, r, 1.0f);                                                                         \
    int32_t k1 = k >> 1;                                                                          \
    int32_t k2 = k - k1;                                                                          \
    union { uint32_t u; float f; } s1 = {(uint32_t)(k1 + 127) << 23};                            \
    union { uint32_t u; float f; } s2 = {(uint32_t)(k2 + 127) << 23};                            \
    p = p * s1.f;                                                                                 \
    p = p * s2.f;                                                                                 \
    return p;                                                                                     \
  }                                                                                               \
  static inline float lm_expf(float x) {                                                          \
    float p = lm_expf_core(x);                                                                    \
    union { uint32_t u; float f; } inf = {0x7f800000u};                                           \
    p = x > 89.0f ? inf.f : p;                                                                    \
    p = x < -104.0f ? 0.0f : p;                                                                   \
    return x != x ? x : p;                                                                        \
  }

#define LOOM_KMATH_TANHF                                                                         \
  static inline float lm_tanhf(float x) {                                                         \
    float a = fabsf(x);                                                                           \
    float z = x * x;                                                                              \
    float p = -0x1.75e1d4p-8f;                                                                    \
    p = fmaf(p, z, 0x1.52269cp-6f);                                                               \
    p = fmaf(p, z, -0x1.b83c5ap-5f);                                                              \
    p = fmaf(p, z, 0x1.110726p-3f);                                                               \
    p = fmaf(p, z, -0x1.555532p-2f);                                                              \
    float xz = x * z;                                                                             \
    float s = fmaf(p, xz, x);                                                                     \
    s = a < 0x1p-12f ? x : s;                                                                     \
    float aa = a + a;                                                                             \
    float e = lm_expf_core(aa);                                                                   \
    float d = e + 1.0f;                                                                           \
    float q = 2.0f / d;                                                                           \
    float t = 1.0f - q;                                                                           \
    t = a > 44.0f ? 1.0f : t;                                                                     \
    t = copysignf(t, x);                                                                          \
    t = a < 0.625f ? s : t;                                                                       \
    return x != x ? x : t;                                                                        \
  }

#define LOOM_KMATH_SIGMOIDF                                                                      \
  static inline float lm_sigmoidf(float x) {                                                      \
    float m = -fabsf(x);                                                                          \
    float e = lm_expf_core(m);                                                                    \
    e = m < -104.0f ? 0.0f : e;                                                                   \
    float d = 1.0f + e;                                                                           \
    float n = x >= 0.0f ? 1.0f : e;                                                               \
    float y = n / d;                                                                              \
    return x != x ? x : y;                                                                        \
  }

#define LOOM_KMATH_LOGF                                                                          \
  static inline float lm_logf(float x) {                                                          \
    float xs = x < 0x1p-126f ? x * 0x1p+25f : x;                                                  \
    int32_t eb = x < 0x1p-126f ? -25 : 0;                                                         \
    union { float f; uint32_t u; } b = {xs};                                                      \
    int32_t e = (int32_t)((b.u >> 23) & 0xffu) - 127 + eb;                                        \
    union { uint32_t u; float f; } mb = {(b.u & 0x007fffffu) | 0x3f800000u};                      \
    float m = mb.f;                                                                               \
    int32_t big = m > 0x1.6a09e6p+0f;                                                             \
    float mh = m * 0.5f;                                                                          \
    m = big ? mh : m;                                                                             \
    e = e + big;                                                                                  \
    float f = m - 1.0f;                                                                           \
    float z = f * f;                                                                              \
    float p = 7.0376836292e-2f;                                                                     \
    p = fmaf(p, f, -1.1514610310e-1f);                                                              \
    p = fmaf(p, f, 1.1676998740e-1f);                                                               \
    p = fmaf(p, f, -1.2420140846e-1f);                                                              \
    p = fmaf(p, f, 1.4249322787e-1f);                                                               \
    p = fmaf(p, f, -1.6668057665e-1f);                                                              \
    p = fmaf(p, f, 2.0000714765e-1f);                                                               \
    p = fmaf(p, f, -2.4999993993e-1f);                                                              \
    p = fmaf(p, f, 3.3333331174e-1f);                                                               \
    float fz = f * z;                                                                             \
    float y = p * fz;                                                                             \
    float ef = (float)e;                                                                          \
    y = fmaf(ef, -2.12194440e-4f, y);                                                            \
    y = fmaf(-0.5f, z, y);                                                                        \
    float r = f + y;                                                                              \
    r = fmaf(ef, 0x1.63p-1f, r);                                                                  \
    union { uint32_t u; float f; } ninf = {0xff800000u};                                          \
    union { uint32_t u; float f; } qnan = {0x7fc00000u};                                          \
    r = x == 0.0f ? ninf.f : r;                                                                   \
    r = x < 0.0f ? qnan.f : r;                                                                    \
    r = x > 0x1.fffffep+127f ? x : r;                                                             \
    return x != x ? x : r;                                                                        \
  }

#define LOOM_KMATH_ERFF                                                                          \
  static inline float lm_erff(float x) {                                                          \
    float a = x < 0.0f ? -x : x;                                                                  \
    float s = a * a;                                                                              \
    float p = -0x1.449784p-17f;                                                                   \
    p = fmaf(p, s, 0x1.d89ff4p-14f);                                                              \
    p = fmaf(p, s, -0x1.bcd3a4p-11f);                                                             \
    p = fmaf(p, s, 0x1.562abep-8f);                                                               \
    p = fmaf(p, s, -0x1.b829d0p-6f);                                                              \
    p = fmaf(p, s, 0x1.ce2f0ap-4f);                                                               \
    p = fmaf(p, s, -0x1.812746p-2f);                                                              \
    p = fmaf(p, s, 0x1.20dd76p+0f);                                                               \
    float small = a * p;                                                                          \
    float t = fmaf(a, 0x1.555556p-1f, -0x1.aaaaaap+0f);                                           \
    float q = -0x1.107adap-12f;                                                                   \
    q = fmaf(q, t, -0x1.96fa22p-14f);                                                             \
    q = fmaf(q, t, 0x1.0b52dcp-9f);                                                               \
    q = fmaf(q, t, -0x1.92b5cap-10f);                                                             \
    q = fmaf(q, t, -0x1.327d5ep-8f);                                                              \
    q = fmaf(q, t, 0x1.54e6a8p-7f);                                                               \
    q = fmaf(q, t, -0x1.b29136p-8f);                                                              \
    q = fmaf(q, t, -0x1.39badep-7f);                                                              \
    q = fmaf(q, t, 0x1.050ba0p-5f);                                                               \
    q = fmaf(q, t, -0x1.7c0916p-5f);                                                              \
    q = fmaf(q, t, 0x1.6598bep-5f);                                                               \
    q = fmaf(q, t, -0x1.cdd1c8p-6f);                                                              \
    q = fmaf(q, t, 0x1.917feep-7f);                                                               \
    q = fmaf(q, t, -0x1.ac3fa0p-9f);                                                              \
    q = fmaf(q, t, 0x1.aab872p-12f);                                                              \
    float large = 1.0f - q;                                                                       \
    float y = a < 1.0f ? small : large;                                                           \
    y = a > 3.95f ? 1.0f : y;                                                                     \
    float r = x < 0.0f ? -y : y;                                                                  \
    r = x == 0.0f ? x : r;                                                                        \
    return x != x ? x : r;                                                                        \
  }

LOOM_KMATH_EXPF
LOOM_KMATH_TANHF
LOOM_KMATH_SIGMOIDF
LOOM_KMATH_LOGF
LOOM_KMATH_ERFF

/* The text of a LOOM_KMATH_* definition, for generated C. */
#define LOOM_KMATH_STR_(...) #__VA_ARGS__
#define LOOM_KMATH_STR(...) LOOM_KMATH_STR_(__VA_ARGS__)

#endif

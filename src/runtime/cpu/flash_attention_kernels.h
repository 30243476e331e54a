/*
 * The tile kernels of flash attention on the CPU (flash_attention.c): one
 * table of functions, in two sets, AVX-512F intrinsics (per-function
 * target attributes, chosen only after __builtin_cpu_supports) and plain C
 * for the baseline ISA. Every set gives the same bits: each element of a
 * product is summed over k in order in one accumulator.
 */
#ifndef LOOM_RUNTIME_CPU_FLASH_ATTENTION_KERNELS_H
#define LOOM_RUNTIME_CPU_FLASH_ATTENTION_KERNELS_H

#include <stdbool.h>
#include <stdint.h>


typedef struct fa_kernels {
  /* C[m x n] = (acc ? C : 0) + A B, A(i, k) = a[i * ars + k * aks], B[k x n]
   * row-major (ldb), C row-major (ldc); each element summed over k in order. */
  void (*gemm)(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
               const float *b, int64_t ldb, float *c, int64_t ldc, bool acc);
  /* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols */
  void (*transpose)(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                    int64_t ldd);
  /* The forward's column kernels, over a tile x[j * ldx + i] of scores
   * transposed (row j: a key, column i: a query), j < rows, i < n. */
  /* x[j][i] = -inf for i < t0 + j: keys past a query's causal limit */
  void (*col_causal)(float *x, int64_t ldx, int64_t rows, int64_t n, int64_t t0);
  /* x[j][i] += b[i * brs + j * bcs]: the bias tile (one add per element,
   * so every set gives the same bits) */
  void (*col_bias)(float *x, int64_t ldx, int64_t rows, int64_t n, const float *b, int64_t brs,
                   int64_t bcs);
  /* x[j] += b[j * bcs] for j < n */
  void (*row_bias)(float *x, int64_t n, const float *b, int64_t bcs);
  /* m[i] = max(m[i], x[0][i], ..., x[rows - 1][i]) */
  void (*col_max)(const float *x, int64_t ldx, int64_t rows, int64_t n, float *m);
  /* x[j][i] = exp(mul x[j][i] - sub[i]); sum[i] = their sum over j in order */
  void (*col_exp_sum)(float *x, int64_t ldx, int64_t rows, int64_t n, float mul,
                      const float *sub, float *sum);
  /* x[j][i] = bit kb + j of keep-bit row i (bits + i * bstride) ? x * mul : 0;
   * kb + 32 t is a whole 32-bit word of each row for every t < rows / 32 */
  void (*col_mask)(float *x, int64_t ldx, int64_t rows, int64_t n, const uint8_t *bits,
                   int64_t bstride, int64_t kb, float mul);
  /* x[j] = exp(x[j] - sub) for j < n; returns their sum (a fixed order) */
  float (*exp_sum)(float *x, int64_t n, float sub);
  /* x[j] = bit j of bits ? x[j] * mul : 0 for j < n */
  void (*mask)(float *x, int64_t n, const uint8_t *bits, float mul);
  /* ds[j] = p[j] * (t - di), t = ds[j] without bits, else bit j ? ds[j] * inv : 0 */
  void (*dsoft)(float *ds, const float *p, int64_t n, const uint8_t *bits, float inv, float di);
  /* dst[x] = (float)((double)src[x] * scale): the same bits in every set */
  void (*scale)(const float *src, int64_t n, double scale, float *dst);
  /* sum of x[j] y[j] for j < n, in double, in a fixed order */
  double (*dot)(const float *x, const float *y, int64_t n);
} fa_kernels;

/* The set impl names (LOOM_FLASH_ATTN_IMPL_*): the best this CPU runs for
 * BEST, the portable set where the one asked for is missing. */
const fa_kernels *loom_fa_kernels(int32_t impl);

/* Bit j of a little-endian bit array. */
static inline bool loom_fa_bit_at(const uint8_t *bits, int64_t j) { return (bits[j >> 3] >> (j & 7)) & 1; }

#endif

/*
 * Flash attention's AVX2 + FMA tile kernels (flash_attention_avx2.c): the
 * ones that carry the time (the tile product, the exponentials, the
 * reductions, the bias tiles); flash_attention_kernels.c puts them in a
 * set with the plain C kernels for the rest (masks). Call them only where
 * loom_fa_avx2_supported() is true.
 */
#ifndef LOOM_RUNTIME_CPU_FLASH_ATTENTION_AVX2_H
#define LOOM_RUNTIME_CPU_FLASH_ATTENTION_AVX2_H

#include <stdbool.h>
#include <stdint.h>

#include "rng/philox_fast.h"

#if LOOM_PHILOX_HAVE_X86
#define LOOM_FA_HAVE_AVX2 1
#else
#define LOOM_FA_HAVE_AVX2 0
#endif

/* True if this CPU runs AVX2 and FMA (false where not compiled in). */
bool loom_fa_avx2_supported(void);

#if LOOM_FA_HAVE_AVX2
/* The contracts of fa_kernels' members of the same names. */
void loom_fa_gemm_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                       const float *b, int64_t ldb, float *c, int64_t ldc, bool acc);
void loom_fa_transpose_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                            int64_t ldd);
void loom_fa_col_max_avx2(const float *x, int64_t ldx, int64_t rows, int64_t n, float *m);
void loom_fa_col_exp_sum_avx2(float *x, int64_t ldx, int64_t rows, int64_t n, float mul,
                              const float *sub, float *sum);
float loom_fa_exp_sum_avx2(float *x, int64_t n, float sub);
void loom_fa_dsoft_avx2(float *ds, const float *p, int64_t n, const uint8_t *bits, float inv,
                        float di);
void loom_fa_scale_avx2(const float *src, int64_t n, double scale, float *dst);
double loom_fa_dot_avx2(const float *x, const float *y, int64_t n);
void loom_fa_col_bias_avx2(float *x, int64_t ldx, int64_t rows, int64_t n, const float *b,
                           int64_t brs, int64_t bcs);
void loom_fa_row_bias_avx2(float *x, int64_t n, const float *b, int64_t bcs);
#endif

#endif

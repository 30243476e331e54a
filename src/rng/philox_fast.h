/*
 * Fast Philox4x32 and dropout masks for the CPU: the same numbers as the
 * reference in rng/philox.h, computed many counters at a time.
 *
 * Paths (chosen at run time by what the CPU supports, or forced for tests
 * and benchmarks):
 *   ref       loom_philox4x32 once per block: the scalar reference
 *   portable  plain C over 8 blocks at a time, written to unroll and
 *             auto-vectorise for the baseline ISA
 *   avx2      16 blocks per step in 8-lane vectors (needs AVX2 and FMA)
 *   avx512    64 blocks per step in 16-lane vectors (needs AVX-512F)
 * The ISA paths are compiled with per-function target attributes and only
 * called after __builtin_cpu_supports says yes, so the library builds for
 * the baseline and never runs an instruction the CPU lacks.
 *
 * A leaf like rng/philox.h: depends on nothing else in Loom.
 */
#ifndef LOOM_RNG_PHILOX_FAST_H
#define LOOM_RNG_PHILOX_FAST_H

#include <stdbool.h>
#include <stdint.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LOOM_PHILOX_HAVE_X86 1
#else
#define LOOM_PHILOX_HAVE_X86 0
#endif

typedef enum loom_philox_path {
  LOOM_PHILOX_PATH_BEST = -1, /* the fastest path this CPU supports */
  LOOM_PHILOX_PATH_REF = 0,
  LOOM_PHILOX_PATH_PORTABLE = 1,
  LOOM_PHILOX_PATH_AVX2 = 2,
  LOOM_PHILOX_PATH_AVX512 = 3,
  LOOM_PHILOX_PATH_COUNT = 4
} loom_philox_path;

/* Rounds the fast paths accept: 0..LOOM_PHILOX_MAX_ROUNDS (10 and 7 are
 * specialised; 10 is standard, 7 is FlashAttention's choice). */
#define LOOM_PHILOX_MAX_ROUNDS 16

/* Number of paths (supported here or not): LOOM_PHILOX_PATH_COUNT. */
int loom_philox_path_count(void);
/* The path's short name ("ref", "portable", "avx2", "avx512"), or NULL. */
const char *loom_philox_path_name(int path);
/* The path with that name, or -1 ("best" gives LOOM_PHILOX_PATH_BEST). */
int loom_philox_path_by_name(const char *name);
/* True if the path is compiled in and this CPU can run it. */
bool loom_philox_path_supported(int path);
/* The fastest supported path (never LOOM_PHILOX_PATH_BEST). */
int loom_philox_best_path(void);

/* Philox4x32-`rounds` on blocks block0, block0 + 1, ... (mod 2^64),
 * n_blocks of them: block b uses counter {lo32(b), hi32(b), 0, 0} and key
 * {lo32(seed), hi32(seed)} and writes its 4 words to out[4 (b - block0)..].
 * False (nothing written) if the path is unsupported here or rounds is
 * outside 0..LOOM_PHILOX_MAX_ROUNDS. */
bool loom_philox_blocks(int path, uint64_t seed, uint64_t block0, int64_t n_blocks, int rounds,
                        uint32_t *out);
/* The general form: block b uses counter {lo32(b), hi32(b), ctr2, ctr3}
 * and the given key (Random123's known answers need all four words). */
bool loom_philox_blocks_ctr(int path, const uint32_t key[2], uint32_t ctr2, uint32_t ctr3,
                            uint64_t block0, int64_t n_blocks, int rounds, uint32_t *out);

/* Dropout over counter positions j0, j0 + 1, ... (mod 2^64), as
 * docs/DROPOUT.md defines it (Philox4x32-10, word j % 4 of block j / 4):
 * y[k] = keep(seed, j0 + k, threshold) ? (float)((double)x[k] / keep_div)
 * : 0, for k < n. keep_div is 1 - p: the division is the reference kernel's
 * (in double, rounded once to float), so results match it bit for bit.
 * threshold is loom_dropout_threshold(p); keep_div must be > 0. Any j0
 * alignment; y may equal x. Uses the best path. */
void loom_dropout_apply_f32(uint64_t seed, uint64_t j0, int64_t n, uint64_t threshold,
                            double keep_div, const float *x, float *y);
/* The dropout mask as bits: bit k % 8 of bits[k / 8] is 1 iff the element
 * at position j0 + k is kept, for k < n; the unused high bits of the last
 * byte are 0. Writes (n + 7) / 8 bytes. Uses the best path. */
void loom_dropout_mask_bits(uint64_t seed, uint64_t j0, int64_t n, uint64_t threshold,
                            uint8_t *bits);
/* loom_dropout_apply_f32 on a given path; false if it is unsupported. */
bool loom_dropout_apply_f32_path(int path, uint64_t seed, uint64_t j0, int64_t n,
                                 uint64_t threshold, double keep_div, const float *x, float *y);
/* loom_dropout_mask_bits on a given path; false if it is unsupported. */
bool loom_dropout_mask_bits_path(int path, uint64_t seed, uint64_t j0, int64_t n,
                                 uint64_t threshold, uint8_t *bits);

/* ---- internal: the per-ISA kernels behind the dispatcher ---------------
 * gen: n_blocks blocks as loom_philox_blocks_ctr (rounds already checked).
 * apply: y[k] = w[k] >= thr ? (float)((double)x[k] / div) : 0 for k < n,
 *        with inv = 1 / div (the words are given, any alignment).
 * bits: bit k of bits = w[k] >= thr for k < n (bits starts on a byte; the
 *       last byte's unused bits are zeroed). */
typedef void (*loom_philox_gen_fn)(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3,
                                   uint64_t block0, int64_t n_blocks, int rounds, uint32_t *out);
typedef void (*loom_philox_apply_fn)(const uint32_t *w, int64_t n, uint32_t thr, double div,
                                     double inv, const float *x, float *y);
typedef void (*loom_philox_bits_fn)(const uint32_t *w, int64_t n, uint32_t thr, uint8_t *bits);

#if LOOM_PHILOX_HAVE_X86
void loom_philox_avx2_gen(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                          int64_t n_blocks, int rounds, uint32_t *out);
void loom_philox_avx2_apply(const uint32_t *w, int64_t n, uint32_t thr, double div, double inv,
                            const float *x, float *y);
void loom_philox_avx2_bits(const uint32_t *w, int64_t n, uint32_t thr, uint8_t *bits);
void loom_philox_avx512_gen(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                            int64_t n_blocks, int rounds, uint32_t *out);
void loom_philox_avx512_apply(const uint32_t *w, int64_t n, uint32_t thr, double div, double inv,
                              const float *x, float *y);
void loom_philox_avx512_bits(const uint32_t *w, int64_t n, uint32_t thr, uint8_t *bits);
#endif

#endif

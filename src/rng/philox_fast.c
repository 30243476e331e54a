/*
 * Dispatch for the fast Philox paths, the ref and portable paths, and the
 * dropout drivers shared by every path (chunking, counter wrap, the
 * drop-everything threshold). The ISA kernels are in philox_avx2.c and
 * philox_avx512.c.
 */
#include "rng/philox_fast.h"

#include "rng/philox.h"

#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PHILOX_INLINE static inline __attribute__((always_inline))
#else
#define PHILOX_INLINE static inline
#endif

static const char *const path_names[LOOM_PHILOX_PATH_COUNT] = {"ref", "portable", "avx2",
                                                                "avx512"};

int loom_philox_path_count(void) { return LOOM_PHILOX_PATH_COUNT; }

const char *loom_philox_path_name(int path) {
  return path >= 0 && path < LOOM_PHILOX_PATH_COUNT ? path_names[path] : NULL;
}

int loom_philox_path_by_name(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "best") == 0) return LOOM_PHILOX_PATH_BEST;
  for (int p = 0; p < LOOM_PHILOX_PATH_COUNT; p++)
    if (strcmp(name, path_names[p]) == 0) return p;
  return -1;
}

bool loom_philox_path_supported(int path) {
  switch (path) {
  case LOOM_PHILOX_PATH_REF:
  case LOOM_PHILOX_PATH_PORTABLE: return true;
#if LOOM_PHILOX_HAVE_X86
  /* libgcc's cpu model also checks that the OS saves the vector state */
  case LOOM_PHILOX_PATH_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case LOOM_PHILOX_PATH_AVX512: return __builtin_cpu_supports("avx512f");
#endif
  default: return false;
  }
}

int loom_philox_best_path(void) {
  for (int p = LOOM_PHILOX_PATH_COUNT - 1; p > LOOM_PHILOX_PATH_PORTABLE; p--)
    if (loom_philox_path_supported(p)) return p;
  return LOOM_PHILOX_PATH_PORTABLE;
}

/* ---- ref: the reference, one block at a time ---------------------------- */

static void ref_gen(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                    int64_t n_blocks, int rounds, uint32_t *out) {
  for (int64_t i = 0; i < n_blocks; i++) {
    uint64_t b = block0 + (uint64_t)i;
    uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), ctr2, ctr3};
    loom_philox4x32(ctr, key, rounds, out + 4 * i);
  }
}

/* ---- portable: blocks side by side in plain C ----------------------------
 * Lane-major arrays with a compile-time round count, so compilers unroll
 * the rounds and interleave the lanes' independent multiply chains. Two
 * lanes keep all the state in registers on x86-64; with 4 or 8, gcc 12
 * spills and runs no faster than the reference (measured). */

#define PORT_LANES 2

PHILOX_INLINE void port_group(uint32_t k0, uint32_t k1, uint32_t ctr2, uint32_t ctr3, uint64_t b0,
                              int rounds, uint32_t *out) {
  uint32_t c0[PORT_LANES], c1[PORT_LANES], c2[PORT_LANES], c3[PORT_LANES];
  for (int l = 0; l < PORT_LANES; l++) {
    uint64_t b = b0 + (uint64_t)l;
    c0[l] = (uint32_t)b;
    c1[l] = (uint32_t)(b >> 32);
    c2[l] = ctr2;
    c3[l] = ctr3;
  }
  for (int r = 0; r < rounds; r++) {
    uint32_t ka = k0 + (uint32_t)r * LOOM_PHILOX_W0, kb = k1 + (uint32_t)r * LOOM_PHILOX_W1;
    for (int l = 0; l < PORT_LANES; l++) {
      uint64_t p0 = (uint64_t)LOOM_PHILOX_M0 * c0[l], p1 = (uint64_t)LOOM_PHILOX_M1 * c2[l];
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ ka, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ kb;
      c1[l] = (uint32_t)p1;
      c3[l] = (uint32_t)p0;
      c0[l] = n0;
      c2[l] = n2;
    }
  }
  for (int l = 0; l < PORT_LANES; l++) {
    out[4 * l] = c0[l];
    out[4 * l + 1] = c1[l];
    out[4 * l + 2] = c2[l];
    out[4 * l + 3] = c3[l];
  }
}

PHILOX_INLINE void port_run(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                            int64_t n_blocks, int rounds, uint32_t *out) {
  int64_t i = 0;
  for (; i + PORT_LANES <= n_blocks; i += PORT_LANES)
    port_group(key[0], key[1], ctr2, ctr3, block0 + (uint64_t)i, rounds, out + 4 * i);
  if (i < n_blocks) {
    uint32_t tmp[4 * PORT_LANES];
    port_group(key[0], key[1], ctr2, ctr3, block0 + (uint64_t)i, rounds, tmp);
    memcpy(out + 4 * i, tmp, sizeof(uint32_t) * 4 * (size_t)(n_blocks - i));
  }
}

static void port_gen(const uint32_t key[2], uint32_t ctr2, uint32_t ctr3, uint64_t block0,
                     int64_t n_blocks, int rounds, uint32_t *out) {
  switch (rounds) {
  case 10: port_run(key, ctr2, ctr3, block0, n_blocks, 10, out); break;
  case 7: port_run(key, ctr2, ctr3, block0, n_blocks, 7, out); break;
  default: port_run(key, ctr2, ctr3, block0, n_blocks, rounds, out); break;
  }
}

/* The scalar apply and bits, shared by ref and portable (and ISA tails). */
static void scalar_apply(const uint32_t *w, int64_t n, uint32_t thr, double div, double inv,
                         const float *x, float *y) {
  (void)inv;
  for (int64_t k = 0; k < n; k++)
    y[k] = w[k] >= thr ? (float)((double)x[k] / div) : 0.0f;
}

static void scalar_bits(const uint32_t *w, int64_t n, uint32_t thr, uint8_t *bits) {
  for (int64_t k = 0; k < n; k += 8) {
    unsigned b = 0;
    for (int64_t e = 0; e < 8 && k + e < n; e++)
      b |= (unsigned)(w[k + e] >= thr) << e;
    bits[k / 8] = (uint8_t)b;
  }
}

/* ---- dispatch ------------------------------------------------------------ */

typedef struct kernels {
  loom_philox_gen_fn gen;
  loom_philox_apply_fn apply;
  loom_philox_bits_fn bits;
} kernels;

static bool path_kernels(int path, kernels *k) {
  if (path == LOOM_PHILOX_PATH_BEST) path = loom_philox_best_path();
  if (!loom_philox_path_supported(path)) return false;
  switch (path) {
  case LOOM_PHILOX_PATH_REF: *k = (kernels){ref_gen, scalar_apply, scalar_bits}; return true;
  case LOOM_PHILOX_PATH_PORTABLE: *k = (kernels){port_gen, scalar_apply, scalar_bits}; return true;
#if LOOM_PHILOX_HAVE_X86
  case LOOM_PHILOX_PATH_AVX2:
    *k = (kernels){loom_philox_avx2_gen, loom_philox_avx2_apply, loom_philox_avx2_bits};
    return true;
  case LOOM_PHILOX_PATH_AVX512:
    *k = (kernels){loom_philox_avx512_gen, loom_philox_avx512_apply, loom_philox_avx512_bits};
    return true;
#endif
  default: return false;
  }
}

bool loom_philox_blocks_ctr(int path, const uint32_t key[2], uint32_t ctr2, uint32_t ctr3,
                            uint64_t block0, int64_t n_blocks, int rounds, uint32_t *out) {
  kernels k;
  if (rounds < 0 || rounds > LOOM_PHILOX_MAX_ROUNDS || !path_kernels(path, &k)) return false;
  if (n_blocks > 0) k.gen(key, ctr2, ctr3, block0, n_blocks, rounds, out);
  return true;
}

bool loom_philox_blocks(int path, uint64_t seed, uint64_t block0, int64_t n_blocks, int rounds,
                        uint32_t *out) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  return loom_philox_blocks_ctr(path, key, 0, 0, block0, n_blocks, rounds, out);
}

/* ---- dropout drivers ----------------------------------------------------- */

/* Positions per chunk: the words live in a 1 KiB stack buffer (L1). */
#define DROP_WORDS 256

/* Words of positions j .. j + cnt - 1 (s + cnt <= DROP_WORDS, s = j % 4)
 * into w; returns where position j's word is. Positions wrap mod 2^64, and
 * block j / 4 with them: past 2^64 - 1 the blocks restart at 0, not at
 * 2^62, so a range that wraps is made in two pieces. */
static const uint32_t *position_words(const kernels *k, uint64_t seed, uint64_t j, int64_t cnt,
                                      uint32_t *w) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint64_t s = j & 3, room = (uint64_t)0 - j; /* positions before the wrap; 0: 2^64 */
  if (room == 0 || room >= (uint64_t)cnt) {
    k->gen(key, 0, 0, j >> 2, (int64_t)((s + (uint64_t)cnt + 3) >> 2), 10, w);
  } else {
    uint64_t head = s + room; /* a multiple of 4: 2^64 is */
    k->gen(key, 0, 0, j >> 2, (int64_t)(head >> 2), 10, w);
    k->gen(key, 0, 0, 0, (int64_t)(((uint64_t)cnt - room + 3) >> 2), 10, w + head);
  }
  return w + s;
}

static void dropout_apply(const kernels *k, uint64_t seed, uint64_t j, int64_t n, uint64_t thr,
                          double div, const float *x, float *y) {
  if (n <= 0) return;
  if (thr > UINT32_MAX) { /* p = 1: no word reaches the threshold */
    for (int64_t e = 0; e < n; e++)
      y[e] = 0.0f;
    return;
  }
  double inv = 1.0 / div;
  uint32_t w[DROP_WORDS];
  while (n > 0) {
    int64_t cnt = DROP_WORDS - (int64_t)(j & 3);
    if (cnt > n) cnt = n;
    const uint32_t *wj = position_words(k, seed, j, cnt, w);
    k->apply(wj, cnt, (uint32_t)thr, div, inv, x, y);
    j += (uint64_t)cnt;
    x += cnt;
    y += cnt;
    n -= cnt;
  }
}

static void dropout_bits(const kernels *k, uint64_t seed, uint64_t j, int64_t n, uint64_t thr,
                         uint8_t *bits) {
  if (n <= 0) return;
  if (thr > UINT32_MAX) {
    memset(bits, 0, (size_t)((n + 7) / 8));
    return;
  }
  uint32_t w[DROP_WORDS];
  while (n > 0) {
    /* whole 16-bit groups per chunk, so every chunk starts on a byte */
    int64_t cnt = (DROP_WORDS - (int64_t)(j & 3)) & ~(int64_t)15;
    if (cnt > n) cnt = n;
    const uint32_t *wj = position_words(k, seed, j, cnt, w);
    k->bits(wj, cnt, (uint32_t)thr, bits);
    j += (uint64_t)cnt;
    bits += cnt / 8;
    n -= cnt;
  }
}

bool loom_dropout_apply_f32_path(int path, uint64_t seed, uint64_t j0, int64_t n,
                                 uint64_t threshold, double keep_div, const float *x, float *y) {
  kernels k;
  if (!path_kernels(path, &k)) return false;
  dropout_apply(&k, seed, j0, n, threshold, keep_div, x, y);
  return true;
}

bool loom_dropout_mask_bits_path(int path, uint64_t seed, uint64_t j0, int64_t n,
                                 uint64_t threshold, uint8_t *bits) {
  kernels k;
  if (!path_kernels(path, &k)) return false;
  dropout_bits(&k, seed, j0, n, threshold, bits);
  return true;
}

void loom_dropout_apply_f32(uint64_t seed, uint64_t j0, int64_t n, uint64_t threshold,
                            double keep_div, const float *x, float *y) {
  loom_dropout_apply_f32_path(LOOM_PHILOX_PATH_BEST, seed, j0, n, threshold, keep_div, x, y);
}

void loom_dropout_mask_bits(uint64_t seed, uint64_t j0, int64_t n, uint64_t threshold,
                            uint8_t *bits) {
  loom_dropout_mask_bits_path(LOOM_PHILOX_PATH_BEST, seed, j0, n, threshold, bits);
}

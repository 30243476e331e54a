#include "rng/philox.h"

void loom_philox4x32(const uint32_t ctr[4], const uint32_t key[2], int rounds,
                     uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < rounds; r++) {
    if (r) {
      k0 += LOOM_PHILOX_W0;
      k1 += LOOM_PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)LOOM_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)LOOM_PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint64_t loom_dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return UINT64_C(1) << 32; /* no 32-bit word reaches it: drop all */
  return (uint64_t)(p * 4294967296.0);
}

uint32_t loom_dropout_word(uint64_t seed, uint64_t j) {
  uint64_t block = j >> 2;
  uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  loom_philox4x32(ctr, key, 10, out);
  return out[j & 3];
}

bool loom_dropout_keep(uint64_t seed, uint64_t j, uint64_t threshold) {
  return (uint64_t)loom_dropout_word(seed, j) >= threshold;
}

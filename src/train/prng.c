#include "train/prng.h"

#include <math.h>

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

loom_prng loom_prng_make(uint64_t seed, uint64_t stream) {
  /* hash both so nearby seeds and streams give unrelated states */
  loom_prng r = {mix(mix(seed) ^ (stream * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull))};
  return r;
}

uint64_t loom_prng_next(loom_prng *r) {
  r->s += 0x9E3779B97F4A7C15ull;
  return mix(r->s);
}

uint64_t loom_prng_below(loom_prng *r, uint64_t n) {
  uint64_t lim = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do
    x = loom_prng_next(r);
  while (x >= lim);
  return x % n;
}

double loom_prng_uniform(loom_prng *r) {
  return ((double)(loom_prng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double loom_prng_normal(loom_prng *r) {
  double u1 = loom_prng_uniform(r), u2 = loom_prng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

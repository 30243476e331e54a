/*
 * The training code's own seeded generator: splitmix64 (Steele, Lea and
 * Flood, OOPSLA'14). Small, fast, and fully determined by its 64-bit state,
 * so a run is reproducible from its seed and a step number alone.
 */
#ifndef LOOM_TRAIN_PRNG_H
#define LOOM_TRAIN_PRNG_H

#include <stdint.h>

typedef struct loom_prng {
  uint64_t s;
} loom_prng;

/* A generator for (seed, stream): distinct streams are independent. */
loom_prng loom_prng_make(uint64_t seed, uint64_t stream);
uint64_t loom_prng_next(loom_prng *r);
/* Uniform in [0, n) (n > 0), without modulo bias. */
uint64_t loom_prng_below(loom_prng *r, uint64_t n);
/* Uniform in (0, 1): never 0, so log() is safe. */
double loom_prng_uniform(loom_prng *r);
/* Standard normal by Box-Muller (one value per call; the pair's second
 * value is dropped so the sequence depends on nothing but the state). */
double loom_prng_normal(loom_prng *r);

#endif

/*
 * Philox4x32 (Salmon et al., SC'11) and the dropout mask definition.
 * A leaf: depends on nothing, so ops, kernels and generated code share it.
 *
 * Dropout definition (docs/DROPOUT.md): for a dropout op with attributes
 * (seed, offset, p) and base b (an optional runtime input, 0 if absent), the
 * element at logical flat index i uses counter position j = b + offset + i.
 * Philox4x32-10 is run on counter {lo32(j/4), hi32(j/4), 0, 0} with key
 * {lo32(seed), hi32(seed)}; output word j%4 is w. The element is kept iff
 * w >= threshold(p) = floor(p * 2^32) (saturated), and kept values are
 * scaled by 1/(1-p). The mask depends only on (seed, j): never on threads,
 * tiles or execution order.
 */
#ifndef LOOM_RNG_PHILOX_H
#define LOOM_RNG_PHILOX_H

#include <stdbool.h>
#include <stdint.h>

#define LOOM_PHILOX_M0 0xD2511F53u
#define LOOM_PHILOX_M1 0xCD9E8D57u
#define LOOM_PHILOX_W0 0x9E3779B9u
#define LOOM_PHILOX_W1 0xBB67AE85u

/* Philox4x32 with `rounds` rounds (10 is standard; 7 is FlashAttention's). */
void loom_philox4x32(const uint32_t ctr[4], const uint32_t key[2], int rounds,
                     uint32_t out[4]);

/* The keep threshold for drop probability p in [0, 1]. */
uint64_t loom_dropout_threshold(double p);
/* The 32-bit random word for counter position j under seed. */
uint32_t loom_dropout_word(uint64_t seed, uint64_t j);
/* True if the element at counter position j is kept. */
bool loom_dropout_keep(uint64_t seed, uint64_t j, uint64_t threshold);

#endif

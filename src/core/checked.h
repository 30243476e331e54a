/*
 * Checked integer arithmetic for sizes, shapes and offsets, and the limit
 * every tensor type is held to. A type that passes loom_shape_check has
 * each dim, every stride and its element count at most LOOM_MAX_NUMEL
 * (2^48), and its byte size at most 2^51: sums and products of a few such
 * numbers cannot overflow int64, so later arithmetic on valid types needs
 * no checks. Arithmetic on untrusted numbers (attributes, file headers,
 * sums over many values) goes through these helpers.
 */
#ifndef LOOM_CORE_CHECKED_H
#define LOOM_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

#define LOOM_MAX_NUMEL (INT64_C(1) << 48)

/* *r = a + b (a * b); true if that overflowed int64 (then *r is unusable). */
static inline bool loom_add_overflows(int64_t a, int64_t b, int64_t *r) {
  return __builtin_add_overflow(a, b, r);
}
static inline bool loom_mul_overflows(int64_t a, int64_t b, int64_t *r) {
  return __builtin_mul_overflow(a, b, r);
}

#endif

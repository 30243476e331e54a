/*
 * Dropout over a piece of a logical tensor. A parallel plan runs an op as
 * sub-ops over pieces of its tensors; each must draw the numbers the
 * single-device op draws there, so a mask element depends only on (seed,
 * logical index) whatever the plan (docs/DROPOUT.md).
 *
 * A piece of shape `shape` whose first element sits at index `at` of a
 * logical tensor of shape `whole`: the piece's element j (a multi-index)
 * has logical flat index lin(at + j, whole) (row-major) and uses counter
 * base + offset + that index. An empty whole means the piece is the whole
 * tensor (today's flat index); an empty at means zeros.
 *
 * A leaf like rng/philox.h: depends on nothing else in Loom.
 */
#ifndef LOOM_RNG_PIECE_H
#define LOOM_RNG_PIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOOM_RNG_PIECE_MAX_RANK 8

typedef struct loom_rng_piece {
  int32_t rank;
  int64_t shape[LOOM_RNG_PIECE_MAX_RANK];   /* the piece's */
  uint64_t stride[LOOM_RNG_PIECE_MAX_RANK]; /* the whole's row-major strides */
  uint64_t origin;                          /* lin(at, whole) */
  /* Piece elements per run of consecutive logical indices: the trailing
   * dims the piece covers fully, times the next one (>= 1). Runs start at
   * flat piece indices that are multiples of run. */
  int64_t run;
} loom_rng_piece;

/* Sets p up for a piece of rank dims `shape` at `at` (n_at 0: zeros) in
 * `whole` (n_whole 0: shape itself). False, with a message in err (n_err
 * bytes), unless whole and at have the piece's rank and the piece lies
 * inside whole. */
bool loom_rng_piece_init(loom_rng_piece *p, int32_t rank, const int64_t *shape, int32_t n_whole,
                         const int64_t *whole, int32_t n_at, const int64_t *at, char *err,
                         size_t n_err);

/* True when the piece's logical indices are origin + its flat index (one
 * run over all of it: the whole tensor, or a piece split on its leading
 * dim only). */
bool loom_rng_piece_is_flat(const loom_rng_piece *p);

/* The logical flat index of the piece's element at flat index e. */
uint64_t loom_rng_piece_index(const loom_rng_piece *p, int64_t e);

/* Elements e, e + 1, ... (at most n) whose logical indices are
 * consecutive: returns how many (>= 1 when n >= 1) and sets *first to the
 * logical index of e. */
int64_t loom_rng_piece_span(const loom_rng_piece *p, int64_t e, int64_t n, uint64_t *first);

#endif

/* Logical indices of a piece's elements (rng/piece.h). */
#include "rng/piece.h"

#include <stdio.h>

bool loom_rng_piece_init(loom_rng_piece *p, int32_t rank, const int64_t *shape, int32_t n_whole,
                         const int64_t *whole, int32_t n_at, const int64_t *at, char *err,
                         size_t n_err) {
  *p = (loom_rng_piece){.rank = rank, .run = 1};
  if (rank < 0 || rank > LOOM_RNG_PIECE_MAX_RANK) {
    snprintf(err, n_err, "rank %d is outside [0, %d]", (int)rank, LOOM_RNG_PIECE_MAX_RANK);
    return false;
  }
  if (n_whole != 0 && n_whole != rank) {
    snprintf(err, n_err, "'whole' has %d dims, the piece %d", (int)n_whole, (int)rank);
    return false;
  }
  if (n_at != 0 && n_at != rank) {
    snprintf(err, n_err, "'at' has %d dims, the piece %d", (int)n_at, (int)rank);
    return false;
  }
  uint64_t stride = 1;
  for (int32_t d = rank - 1; d >= 0; d--) {
    int64_t w = n_whole ? whole[d] : shape[d], a = n_at ? at[d] : 0;
    if (w < 0 || a < 0 || shape[d] < 0 || shape[d] > w || a > w - shape[d]) {
      snprintf(err, n_err,
               "dim %d: a piece of %lld at %lld does not fit in the whole's %lld", (int)d,
               (long long)shape[d], (long long)a, (long long)w);
      return false;
    }
    p->shape[d] = shape[d];
    p->stride[d] = stride;
    p->origin += (uint64_t)a * stride;
    if (w > 0 && stride > (uint64_t)INT64_MAX / (uint64_t)w) {
      snprintf(err, n_err, "the whole tensor has more than 2^63 elements");
      return false;
    }
    stride *= (uint64_t)w;
  }
  /* the run: trailing dims covered fully, and the first one that is not */
  int64_t run = 1;
  for (int32_t d = rank - 1; d >= 0; d--) {
    run *= p->shape[d];
    if (p->shape[d] != (n_whole ? whole[d] : shape[d])) break;
  }
  p->run = run > 0 ? run : 1;
  return true;
}

bool loom_rng_piece_is_flat(const loom_rng_piece *p) {
  int64_t numel = 1;
  for (int32_t d = 0; d < p->rank; d++) numel *= p->shape[d];
  return p->run >= numel;
}

uint64_t loom_rng_piece_index(const loom_rng_piece *p, int64_t e) {
  uint64_t j = p->origin;
  for (int32_t d = p->rank - 1; d >= 0 && e > 0; d--) {
    int64_t s = p->shape[d];
    j += (uint64_t)(e % s) * p->stride[d];
    e /= s;
  }
  return j;
}

int64_t loom_rng_piece_span(const loom_rng_piece *p, int64_t e, int64_t n, uint64_t *first) {
  *first = loom_rng_piece_index(p, e);
  int64_t left = p->run - e % p->run;
  return n < left ? n : left;
}

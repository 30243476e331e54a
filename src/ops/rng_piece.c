/* The piece an RNG op draws, and its sub-ops' attributes (rng_piece.h). */
#include "ops/rng_piece.h"

/* The slots of whole and at in n's attributes (every RNG op has them). */
static void piece_slots(loom_op op, int32_t *whole, int32_t *at) {
  switch (op) {
  case LOOM_OP_DROPOUT:
    *whole = LOOM_ATTR_SLOT(dropout, whole, INTS);
    *at = LOOM_ATTR_SLOT(dropout, at, INTS);
    return;
  case LOOM_OP_DROPOUT_MASK:
    *whole = LOOM_ATTR_SLOT(dropout_mask, whole, INTS);
    *at = LOOM_ATTR_SLOT(dropout_mask, at, INTS);
    return;
  default: /* attention, flash_attention, flash_attention_grad: one layout */
    *whole = LOOM_ATTR_SLOT(attention, whole, INTS);
    *at = LOOM_ATTR_SLOT(attention, at, INTS);
    return;
  }
}

loom_status loom_op_rng_piece(loom_ctx *ctx, const loom_node *n, int32_t rank,
                              const int64_t *shape, loom_rng_piece *p) {
  int32_t ws, as;
  piece_slots(n->op, &ws, &as);
  const loom_ints *whole = &n->attr[ws].ints, *at = &n->attr[as].ints;
  char err[160];
  if (!loom_rng_piece_init(p, rank, shape, whole->n, whole->v, at->n, at->v, err, sizeof err))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'whole'/'at': %s", err);
  return LOOM_STATUS_OK;
}

void loom_attention_probs_shape(const loom_type *q, const loom_type *k, int32_t *rank,
                                int64_t *shape) {
  int32_t r = q->rank;
  for (int32_t d = 0; d < r - 1; d++) shape[d] = q->shape[d];
  shape[r - 1] = k->shape[r - 2];
  *rank = r;
}

void loom_dropout_mask_shape(const loom_node *n, int32_t *rank, int64_t *shape) {
  const loom_ints *s = &LOOM_ATTR_INTS(n, dropout_mask, shape);
  if (s->n == 0) {
    *rank = 1;
    shape[0] = LOOM_ATTR_I(n, dropout_mask, numel);
    return;
  }
  *rank = s->n;
  for (int32_t d = 0; d < s->n; d++) shape[d] = s->v[d];
}

void loom_rng_piece_sub_attrs(const loom_node *n, int32_t rank, const int64_t *own,
                              const int64_t *start, loom_attr_value *attrs) {
  int32_t ws, as;
  piece_slots(n->op, &ws, &as);
  const loom_ints *whole = &n->attr[ws].ints, *at = &n->attr[as].ints;
  loom_ints w = {.n = rank}, a = {.n = rank};
  for (int32_t d = 0; d < rank; d++) {
    w.v[d] = whole->n == rank ? whole->v[d] : own[d];
    a.v[d] = (at->n == rank ? at->v[d] : 0) + start[d];
  }
  attrs[ws].ints = w;
  attrs[as].ints = a;
}

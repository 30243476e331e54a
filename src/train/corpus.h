/*
 * The training corpus of `loom train`, made by Loom itself from a seed:
 * lines of arithmetic problems with their answers ("37+45=82\n",
 * "81-19=62\n", "7*8=56\n") drawn from a small grammar. A set of problems
 * is held out of the training text; the accuracy on it (exact match of the
 * greedily decoded answer after '=') measures what the model generalises.
 */
#ifndef LOOM_TRAIN_CORPUS_H
#define LOOM_TRAIN_CORPUS_H

#include "core/ctx.h"

/* One problem: prompt "37+45=" and answer "82". */
typedef struct loom_problem {
  char prompt[16];
  char answer[8];
} loom_problem;

typedef struct loom_corpus {
  uint8_t *text; /* the training stream: lines of "a op b = c\n" */
  size_t len;
  int32_t n_heldout;
  loom_problem *heldout; /* never in text */
} loom_corpus;

/* Makes a corpus of n_lines training lines and n_heldout held-out
 * problems, all determined by seed. */
loom_status loom_corpus_new(loom_ctx *ctx, uint64_t seed, int32_t n_lines, int32_t n_heldout,
                            loom_corpus **out);
void loom_corpus_free(loom_corpus *c);

/* Fills tokens and targets ([batch, t] each, targets shifted by one) with
 * windows of the stream chosen by (seed, step) alone, so a resumed run sees
 * the batches the uninterrupted one would. Needs len > t. */
void loom_corpus_batch(const loom_corpus *c, uint64_t seed, int64_t step, int32_t batch, int32_t t,
                       int64_t *tokens, int64_t *targets);

/* Writes problem p (drawn by the grammar from the generator state) into
 * out; exposed for tests. */
struct loom_prng;
void loom_corpus_draw(struct loom_prng *r, loom_problem *out);

#endif

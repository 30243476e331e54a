/*
 * The training corpus of `loom train`, made by Loom itself from a seed:
 * lines of fixed-width arithmetic problems on two 2-digit numbers, sums
 * and differences with a non-negative result, whose answers are written
 * least-significant digit first and zero-padded to 3 digits:
 * "47+38=580\n" is 47 + 38 = 85 ("085" read backwards), "93-07=680\n" is
 * 93 - 7 = 86. Reversed answers let a small GPT write each digit after the
 * digits it depends on (the ones, then the carry into the tens), which is
 * why it learns them in a couple of minutes on a CPU. A set of problems is
 * held out of the training text; the accuracy on it (exact match of the
 * greedily decoded answer after '=') measures what the model generalises.
 */
#ifndef LOOM_TRAIN_CORPUS_H
#define LOOM_TRAIN_CORPUS_H

#include "core/ctx.h"

/* Every line has this many bytes: "ab+cd=xyz\n". */
#define LOOM_CORPUS_LINE 10
/* Answers have this many digits, least significant first. */
#define LOOM_CORPUS_ANSWER_DIGITS 3

/* One problem: prompt "47+38=" and answer "580" (as written: 85 reversed
 * and padded), with its numbers for reports. */
typedef struct loom_problem {
  char prompt[16];
  char answer[8];
  char op;      /* '+' or '-' */
  int32_t a, b; /* the operands, 0..99 */
  int32_t value; /* the answer read normally: a + b or a - b */
} loom_problem;

typedef struct loom_corpus {
  uint8_t *text; /* the training stream: lines of "ab+cd=xyz\n" */
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
 * the batches the uninterrupted one would; each window starts at the
 * newline that ends a line. Needs len > t. */
void loom_corpus_batch(const loom_corpus *c, uint64_t seed, int64_t step, int32_t batch, int32_t t,
                       int64_t *tokens, int64_t *targets);

/* Writes the problem drawn by the grammar from the generator state into
 * out; exposed for tests. */
struct loom_prng;
void loom_corpus_draw(struct loom_prng *r, loom_problem *out);

/* Writes value (0..999) as an answer is written: 3 digits, least
 * significant first ("085" -> "580"); out has room for 4 bytes. */
void loom_corpus_write_answer(int32_t value, char out[4]);
/* Reads an answer as written back into its value; -1 when it is not 3
 * digits. */
int32_t loom_corpus_read_answer(const char *written);

#endif

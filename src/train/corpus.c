#include "train/corpus.h"

#include "train/prng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generator streams, so each use of the seed draws independent numbers. */
enum { STREAM_HELDOUT = 1, STREAM_TEXT = 2, STREAM_BATCH = 3 };

/* Problem ids: op * 10000 + a * 100 + b, with a, b < 100. */
#define N_IDS 20000

typedef struct drawn {
  int op; /* 0 '+', 1 '-' */
  int a, b;
} drawn;

/* The grammar: half sums of two numbers below 100, half differences with
 * a non-negative result (b <= a). */
static drawn draw(loom_prng *r) {
  drawn d;
  d.op = (int)loom_prng_below(r, 2);
  d.a = (int)loom_prng_below(r, 100);
  d.b = (int)loom_prng_below(r, d.op == 0 ? 100 : (uint64_t)d.a + 1);
  return d;
}

static int drawn_id(drawn d) { return d.op * 10000 + d.a * 100 + d.b; }

void loom_corpus_write_answer(int32_t value, char out[4]) {
  for (int i = 0; i < LOOM_CORPUS_ANSWER_DIGITS; i++, value /= 10)
    out[i] = (char)('0' + value % 10);
  out[LOOM_CORPUS_ANSWER_DIGITS] = '\0';
}

int32_t loom_corpus_read_answer(const char *written) {
  if (!written || strlen(written) != LOOM_CORPUS_ANSWER_DIGITS) return -1;
  int32_t v = 0;
  for (int i = LOOM_CORPUS_ANSWER_DIGITS - 1; i >= 0; i--) {
    if (written[i] < '0' || written[i] > '9') return -1;
    v = 10 * v + (written[i] - '0');
  }
  return v;
}

static void to_problem(drawn d, loom_problem *p) {
  memset(p, 0, sizeof *p);
  p->op = d.op == 0 ? '+' : '-';
  p->a = d.a;
  p->b = d.b;
  p->value = d.op == 0 ? d.a + d.b : d.a - d.b;
  snprintf(p->prompt, sizeof p->prompt, "%02d%c%02d=", d.a, p->op, d.b);
  loom_corpus_write_answer(p->value, p->answer);
}

void loom_corpus_draw(struct loom_prng *r, loom_problem *out) { to_problem(draw(r), out); }

void loom_corpus_free(loom_corpus *c) {
  if (!c) return;
  free(c->text);
  free(c->heldout);
  free(c);
}

loom_status loom_corpus_new(loom_ctx *ctx, uint64_t seed, int32_t n_lines, int32_t n_heldout,
                            loom_corpus **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "corpus_new: out is NULL");
  *out = NULL;
  /* a held-out set much smaller than the 15050 problems leaves plenty to train on */
  if (n_lines < 1 || n_lines > 10000000 || n_heldout < 0 || n_heldout > 1000)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "corpus: %d lines / %d held-out problems are out of range", n_lines,
                      n_heldout);
  loom_corpus *c = loom_calloc(ctx, 1, sizeof *c);
  uint8_t *held = loom_calloc(ctx, N_IDS, 1);
  if (!c || !held) goto oom;
  c->heldout = loom_calloc(ctx, (size_t)(n_heldout ? n_heldout : 1), sizeof *c->heldout);
  c->text = loom_malloc(ctx, (size_t)n_lines * LOOM_CORPUS_LINE + 1);
  if (!c->heldout || !c->text) goto oom;

  loom_prng r = loom_prng_make(seed, STREAM_HELDOUT);
  while (c->n_heldout < n_heldout) {
    drawn d = draw(&r);
    if (held[drawn_id(d)]) continue;
    held[drawn_id(d)] = 1;
    to_problem(d, &c->heldout[c->n_heldout++]);
  }
  /* the training lines are drawn from what is left: no held-out problem
   * is ever seen in training */
  r = loom_prng_make(seed, STREAM_TEXT);
  for (int32_t i = 0; i < n_lines; i++) {
    drawn d;
    do
      d = draw(&r);
    while (held[drawn_id(d)]);
    loom_problem p;
    to_problem(d, &p);
    int n = snprintf((char *)c->text + c->len, LOOM_CORPUS_LINE + 1, "%s%s\n", p.prompt, p.answer);
    c->len += (size_t)n;
  }
  free(held);
  *out = c;
  return LOOM_STATUS_OK;
oom:
  free(held);
  loom_corpus_free(c);
  return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "corpus: out of memory");
}

void loom_corpus_batch(const loom_corpus *c, uint64_t seed, int64_t step, int32_t batch, int32_t t,
                       int64_t *tokens, int64_t *targets) {
  loom_prng r = loom_prng_make(seed ^ ((uint64_t)step * 0xD1B54A32D192ED03ull), STREAM_BATCH);
  /* Windows start on the newline before a line, as the held-out prompts
   * do ("\n47+38="): each digit of a problem then sits at the same
   * positions in every window, which the model learns much sooner than
   * problems at any offset. A stream too short for that takes any offset. */
  uint64_t lines = (uint64_t)(c->len - (size_t)t) / LOOM_CORPUS_LINE;
  uint64_t span = (uint64_t)(c->len - (size_t)t);
  for (int32_t b = 0; b < batch; b++) {
    size_t at = lines > 0 ? (size_t)(1 + loom_prng_below(&r, lines)) * LOOM_CORPUS_LINE - 1
                          : (size_t)loom_prng_below(&r, span);
    for (int32_t i = 0; i < t; i++) {
      tokens[(int64_t)b * t + i] = c->text[at + (size_t)i];
      targets[(int64_t)b * t + i] = c->text[at + (size_t)i + 1];
    }
  }
}

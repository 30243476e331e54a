#include "train/corpus.h"

#include "train/prng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generator streams, so each use of the seed draws independent numbers. */
enum { STREAM_HELDOUT = 1, STREAM_TEXT = 2, STREAM_BATCH = 3 };

/* Problem ids: op * 10000 + a * 100 + b, with a, b < 100. */
#define N_IDS 30000

typedef struct drawn {
  int op; /* 0 '+', 1 '-', 2 '*' */
  int a, b;
} drawn;

/* The grammar: sums of two numbers below 100 (40%), differences with a
 * non-negative result (40%), products of two numbers up to 12 (20%). */
static drawn draw(loom_prng *r) {
  drawn d;
  uint64_t k = loom_prng_below(r, 10);
  if (k < 4) {
    d.op = 0;
    d.a = (int)loom_prng_below(r, 100);
    d.b = (int)loom_prng_below(r, 100);
  } else if (k < 8) {
    d.op = 1;
    d.a = (int)loom_prng_below(r, 100);
    d.b = (int)loom_prng_below(r, (uint64_t)d.a + 1);
  } else {
    d.op = 2;
    d.a = (int)loom_prng_below(r, 13);
    d.b = (int)loom_prng_below(r, 13);
  }
  return d;
}

static int drawn_id(drawn d) { return d.op * 10000 + d.a * 100 + d.b; }

static void to_problem(drawn d, loom_problem *p) {
  static const char ops[3] = {'+', '-', '*'};
  int c = d.op == 0 ? d.a + d.b : d.op == 1 ? d.a - d.b : d.a * d.b;
  snprintf(p->prompt, sizeof p->prompt, "%d%c%d=", d.a, ops[d.op], d.b);
  snprintf(p->answer, sizeof p->answer, "%d", c);
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
  /* a held-out set much smaller than the problem space leaves plenty to train on */
  if (n_lines < 1 || n_lines > 10000000 || n_heldout < 0 || n_heldout > 1000)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "corpus: %d lines / %d held-out problems are out of range", n_lines,
                      n_heldout);
  loom_corpus *c = loom_calloc(ctx, 1, sizeof *c);
  uint8_t *held = loom_calloc(ctx, N_IDS, 1);
  if (!c || !held) goto oom;
  c->heldout = loom_calloc(ctx, (size_t)(n_heldout ? n_heldout : 1), sizeof *c->heldout);
  /* the longest line is "99+99=198\n" (10 bytes) */
  c->text = loom_malloc(ctx, (size_t)n_lines * 10 + 1);
  if (!c->heldout || !c->text) goto oom;

  loom_prng r = loom_prng_make(seed, STREAM_HELDOUT);
  while (c->n_heldout < n_heldout) {
    drawn d = draw(&r);
    if (held[drawn_id(d)]) continue;
    held[drawn_id(d)] = 1;
    to_problem(d, &c->heldout[c->n_heldout++]);
  }
  r = loom_prng_make(seed, STREAM_TEXT);
  for (int32_t i = 0; i < n_lines; i++) {
    drawn d;
    do
      d = draw(&r);
    while (held[drawn_id(d)]);
    loom_problem p;
    to_problem(d, &p);
    int n = snprintf((char *)c->text + c->len, 11, "%s%s\n", p.prompt, p.answer);
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
  uint64_t span = (uint64_t)(c->len - (size_t)t);
  for (int32_t b = 0; b < batch; b++) {
    size_t at = (size_t)loom_prng_below(&r, span);
    for (int32_t i = 0; i < t; i++) {
      tokens[(int64_t)b * t + i] = c->text[at + (size_t)i];
      targets[(int64_t)b * t + i] = c->text[at + (size_t)i + 1];
    }
  }
}

/* The main job learns (issue 13, point 4): a smaller but real `loom train`
 * configuration on the reversed-digit arithmetic reaches a held-out
 * accuracy far above chance; a second run on another thread count repeats
 * its first steps' losses and answers bit for bit (the whole run twice
 * would double the test's time); the report's counts agree with the
 * answers and with an independent classification of carries and borrows.
 * LOOM_TEST_QUICK=1 (the sanitizer build) trains for a few steps only and
 * checks determinism alone. */
#include "common.h"

#include "core/ctx.h"
#include "train/corpus.h"
#include "train/report.h"
#include "train/trainer.h"

#include <stdlib.h>
#include <string.h>

/* The schedule, the held-out problems of 100 it must get right (99-100
 * with seed 1 on this machine: a margin for other machines' rounding),
 * and the steps the second run repeats. */
#define LEARN_STEPS 1500
#define LEARN_MIN_RIGHT 80
#define REPEAT_STEPS 100

/* loom train's own model (two layers) on half its schedule: about 27 s of
 * two cores. Fewer steps or one layer sit on the edge of learning the
 * reversed sums: a change of rounding (a GEMM's summation order) moved one
 * layer at 1000 steps between 13 and 99 of 100, and two layers at 1000
 * steps get 59 with seed 2; two layers at 1500 get 100 with seeds 1 and 2. */
static void learn_config(loom_train_config *c, bool quick) {
  loom_train_config_default(c);
  c->steps = quick ? 20 : LEARN_STEPS;
  c->threads = 2;
}

/* Carries and borrows by hand, digit by digit. */
static void test_kinds(void) {
  struct {
    char op;
    int a, b;
    loom_problem_kind want;
  } cases[] = {
      {'+', 23, 45, LOOM_PROBLEM_ADD_PLAIN},  {'+', 47, 38, LOOM_PROBLEM_ADD_CARRY},
      {'+', 60, 50, LOOM_PROBLEM_ADD_CARRY},  {'+', 99, 0, LOOM_PROBLEM_ADD_PLAIN},
      {'+', 5, 5, LOOM_PROBLEM_ADD_CARRY},    {'-', 68, 25, LOOM_PROBLEM_SUB_PLAIN},
      {'-', 52, 17, LOOM_PROBLEM_SUB_BORROW}, {'-', 40, 1, LOOM_PROBLEM_SUB_BORROW},
      {'-', 7, 7, LOOM_PROBLEM_SUB_PLAIN},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_problem p = {.op = cases[i].op, .a = cases[i].a, .b = cases[i].b};
    CHECK(loom_problem_kind_of(&p) == cases[i].want);
  }
}

/* The report of t into buf (cap bytes); the tally checked against the
 * answers the trainer decodes. */
static void report(loom_ctx *ctx, loom_trainer *t, char *buf, size_t cap, loom_train_tally *tally) {
  buf[0] = '\0';
  FILE *f = tmpfile();
  CHECK(f != NULL);
  if (!f) return;
  CHECK_OK(ctx, loom_train_report(t, f, tally));
  rewind(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  const loom_corpus *corpus = loom_trainer_corpus(t);
  int32_t n_held = corpus->n_heldout, ok = -1, total = 0;
  loom_heldout_answer *a = calloc((size_t)n_held, sizeof *a);
  CHECK_OK(ctx, loom_trainer_heldout_answers(t, a));
  CHECK_OK(ctx, loom_trainer_accuracy(t, &ok, &total));
  int32_t right = 0, per_kind[LOOM_PROBLEM_KIND_COUNT] = {0};
  for (int32_t i = 0; i < n_held; i++) {
    CHECK(a[i].correct == (a[i].ended && strcmp(a[i].written, corpus->heldout[i].answer) == 0));
    right += a[i].correct;
    per_kind[loom_problem_kind_of(&corpus->heldout[i])] += a[i].correct;
  }
  CHECK(right == ok && total == n_held && tally->all_right == ok && tally->all_total == total);
  for (int32_t k = 0; k < LOOM_PROBLEM_KIND_COUNT; k++)
    CHECK(tally->right[k] == per_kind[k]);
  free(a);
}

/* Trains c up to step `stop` (losses[stop]); reports after step `at` into
 * early and after `stop` into last. */
static bool train(loom_ctx *ctx, const loom_train_config *c, int64_t stop, int64_t at,
                  float *losses, char *early, char *last, size_t cap, loom_train_tally *tally) {
  loom_trainer *t = NULL;
  CHECK_OK(ctx, loom_trainer_new(ctx, c, &t));
  if (!t) return false;
  bool good = true;
  loom_train_tally ignored;
  for (int64_t k = 0; good && k < stop; k++) {
    loom_status s = loom_trainer_step(t, &losses[k]);
    CHECK_OK(ctx, s);
    good = s == LOOM_STATUS_OK;
    if (good && k + 1 == at) report(ctx, t, early, cap, &ignored);
  }
  if (good) report(ctx, t, last, cap, tally);
  loom_trainer_free(t);
  return good;
}

int main(void) {
  const char *q = getenv("LOOM_TEST_QUICK");
  bool quick = q && *q && strcmp(q, "0") != 0;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_kinds();
  loom_train_config c;
  learn_config(&c, quick);
  int64_t repeat = quick ? 10 : REPEAT_STEPS;
  float *l1 = calloc((size_t)c.steps, sizeof *l1), *l2 = calloc((size_t)c.steps, sizeof *l2);
  static char e1[4096], r1[4096], e2[4096], r2[4096];
  loom_train_tally t1, t2;
  bool good = train(ctx, &c, c.steps, repeat, l1, e1, r1, sizeof r1, &t1);
  /* again on another thread count, for the first steps: the same losses
   * and the same answers bit for bit (an evaluation in between changes
   * nothing) */
  c.threads = 1;
  good = train(ctx, &c, repeat, -1, l2, e2, r2, sizeof r2, &t2) && good;
  if (good) {
    CHECK(memcmp(l1, l2, sizeof *l1 * (size_t)repeat) == 0);
    CHECK(strcmp(e1, r2) == 0);
    printf("learn: %lld steps, loss %.4f -> %.4f, held-out %d/%d\n", (long long)c.steps,
           (double)l1[0], (double)l1[c.steps - 1], t1.all_right, t1.all_total);
    if (!quick) {
      /* a 3-digit answer guessed right is one in hundreds */
      CHECK(t1.all_total == 100 && t1.all_right >= LEARN_MIN_RIGHT);
      CHECK(strstr(r1, "what it learned:") && strstr(r1, "addition with a carry") &&
            strstr(r1, "subtraction with a borrow") && strstr(r1, " reads ") &&
            strstr(r1, " right"));
    }
    if (getenv("LOOM_TEST_VERBOSE")) fputs(r1, stdout);
  }
  free(l1);
  free(l2);
  loom_ctx_free(ctx);
  return loom_test_finish("test_learn");
}

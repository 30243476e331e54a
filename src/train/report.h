/*
 * The end of `loom train`: what the model learned, in words a newcomer
 * follows. Held-out accuracy split by operation and by carry / borrow (the
 * hard part of column arithmetic), a few held-out problems with the
 * model's answer as it wrote it (least-significant digit first) and read
 * normally, each marked right or wrong, and one sentence on the format.
 */
#ifndef LOOM_TRAIN_REPORT_H
#define LOOM_TRAIN_REPORT_H

#include "train/trainer.h"

#include <stdio.h>

/* The kinds of held-out problem the report counts separately. */
typedef enum loom_problem_kind {
  LOOM_PROBLEM_ADD_PLAIN,  /* a sum without a carry: 23+45 */
  LOOM_PROBLEM_ADD_CARRY,  /* a sum with a carry out of a column: 47+38, 60+50 */
  LOOM_PROBLEM_SUB_PLAIN,  /* a difference without a borrow: 68-25 */
  LOOM_PROBLEM_SUB_BORROW, /* a difference with a borrow: 52-17 */
  LOOM_PROBLEM_KIND_COUNT
} loom_problem_kind;

loom_problem_kind loom_problem_kind_of(const loom_problem *p);

/* Right answers of each kind: right[k] of total[k]. */
typedef struct loom_train_tally {
  int32_t right[LOOM_PROBLEM_KIND_COUNT], total[LOOM_PROBLEM_KIND_COUNT];
  int32_t all_right, all_total;
} loom_train_tally;

/* Counts the answers (one per held-out problem of the corpus). */
void loom_train_tally_answers(const loom_corpus *c, const loom_heldout_answer *answers,
                              loom_train_tally *out);

/* Decodes the held-out problems and prints the report to f (the
 * accuracy line "held-out accuracy: R/N (P%)" first); *tally gets the
 * counts when not NULL. */
loom_status loom_train_report(loom_trainer *t, FILE *f, loom_train_tally *tally);

#endif

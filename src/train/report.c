#include "train/report.h"

#include "core/file.h"

#include <stdlib.h>
#include <string.h>

/* How many held-out problems the report shows, and at most how many of
 * them may be wrong ones (so mistakes are seen even when they are rare). */
#define N_SHOWN 6
#define N_SHOWN_WRONG 3

loom_problem_kind loom_problem_kind_of(const loom_problem *p) {
  if (p->op == '+')
    return p->a % 10 + p->b % 10 >= 10 || p->a + p->b >= 100 ? LOOM_PROBLEM_ADD_CARRY
                                                               : LOOM_PROBLEM_ADD_PLAIN;
  return p->a % 10 < p->b % 10 ? LOOM_PROBLEM_SUB_BORROW : LOOM_PROBLEM_SUB_PLAIN;
}

void loom_train_tally_answers(const loom_corpus *c, const loom_heldout_answer *answers,
                              loom_train_tally *out) {
  memset(out, 0, sizeof *out);
  for (int32_t i = 0; i < c->n_heldout; i++) {
    loom_problem_kind k = loom_problem_kind_of(&c->heldout[i]);
    out->total[k]++;
    out->right[k] += answers[i].correct;
  }
  for (int32_t k = 0; k < LOOM_PROBLEM_KIND_COUNT; k++) {
    out->all_right += out->right[k];
    out->all_total += out->total[k];
  }
}

static double percent(int32_t right, int32_t total) {
  return total > 0 ? 100.0 * right / total : 0.0;
}

/* "47+38=580  reads 47 + 38 = 85   right", or what it wrote when wrong. */
static void print_problem(FILE *f, const loom_problem *p, const loom_heldout_answer *a) {
  char shown[64];
  loom_escape(a->written, shown, sizeof shown);
  int32_t read = a->ended ? loom_corpus_read_answer(a->written) : -1;
  char as_read[32];
  if (read >= 0)
    snprintf(as_read, sizeof as_read, "%d", (int)read);
  else
    snprintf(as_read, sizeof as_read, "?");
  char eq[64];
  snprintf(eq, sizeof eq, "%d %c %d = %s", (int)p->a, p->op, (int)p->b, as_read);
  fprintf(f, "    %s%-6s  reads  %-16s %s", p->prompt, shown, eq, a->correct ? "right" : "WRONG");
  if (!a->correct)
    fprintf(f, " (%d %c %d is %d, written %s)", (int)p->a, p->op, (int)p->b, (int)p->value,
            p->answer);
  fputc('\n', f);
}

loom_status loom_train_report(loom_trainer *t, FILE *f, loom_train_tally *tally) {
  const loom_corpus *c = loom_trainer_corpus(t);
  if (!c || !f) return LOOM_STATUS_INVALID_ARGUMENT;
  int32_t n = c->n_heldout;
  loom_heldout_answer *a = loom_calloc(loom_trainer_ctx(t), (size_t)LOOM_MAX(n, 1), sizeof *a);
  if (!a) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status s = loom_trainer_heldout_answers(t, a);
  if (s) {
    free(a);
    return s;
  }
  loom_train_tally tl;
  loom_train_tally_answers(c, a, &tl);
  fprintf(f, "held-out accuracy: %d/%d (%.1f%%)\n", tl.all_right, tl.all_total,
          percent(tl.all_right, tl.all_total));

  fprintf(f, "\nwhat it learned:\n");
  fprintf(f, "  The model writes each answer backwards, ones digit first, padded to three\n"
             "  digits: \"47+38=580\" means 47 + 38 = 085 = 85. Written that way it can work\n"
             "  out the ones digit first and carry into the tens, as you would on paper.\n");
  fprintf(f, "  On %d problems it never saw in training it wrote %d exact answers (%.0f%%):\n",
          tl.all_total, tl.all_right, percent(tl.all_right, tl.all_total));
  static const char *names[LOOM_PROBLEM_KIND_COUNT] = {
      "addition without a carry", "addition with a carry", "subtraction without a borrow",
      "subtraction with a borrow"};
  for (int32_t k = 0; k < LOOM_PROBLEM_KIND_COUNT; k++)
    if (tl.total[k] > 0)
      fprintf(f, "    %-30s %3d/%-3d right\n", names[k], tl.right[k], tl.total[k]);

  /* the first problems, with room kept for some of the wrong ones */
  int32_t wrong = 0, shown = 0;
  bool *pick = calloc((size_t)LOOM_MAX(n, 1), sizeof *pick);
  if (!pick) {
    free(a);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n && wrong < N_SHOWN_WRONG; i++)
    if (!a[i].correct) pick[i] = true, wrong++;
  for (int32_t i = 0; i < n && shown + wrong < N_SHOWN; i++)
    if (!pick[i]) pick[i] = true, shown++;
  fprintf(f, "  Some of them, as the model wrote them and read normally:\n");
  for (int32_t i = 0; i < n; i++)
    if (pick[i]) print_problem(f, &c->heldout[i], &a[i]);
  free(pick);
  free(a);
  if (tally) *tally = tl;
  return LOOM_STATUS_OK;
}

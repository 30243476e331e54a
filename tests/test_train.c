/* `loom train`: corpus, schedule, graph layout, learning, determinism,
 * checkpoint resume and the command line. A tiny model keeps it quick;
 * LOOM_TEST_QUICK=1 (the sanitizer build) shrinks it further. */
#include "common.h"

#include "core/ctx.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train/prng.h"
#include "train/train_cli.h"
#include "train/trainer.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool quick;

static void tiny_config(loom_train_config *c) {
  loom_train_config_default(c);
  c->model.n_layer = 1;
  c->model.d_model = 32;
  c->model.n_head = 2;
  c->model.d_ff = 128;
  c->model.context = quick ? 16 : 32;
  c->batch = quick ? 4 : 8;
  c->steps = quick ? 16 : 40;
  c->lr = 1e-2;
  c->corpus_lines = 5000;
  c->threads = 2;
  c->model.dropout = 0.1; /* loom train's default is 0: keep the RNG paths tested */
}

/* ---- corpus ------------------------------------------------------------- */

/* Checks a line "ab+cd=xyz" (the answer's digits least significant first)
 * independently of the generator. */
static bool line_ok(const char *s, size_t n) {
  if (n != 9 || s[5] != '=' || (s[2] != '+' && s[2] != '-')) return false;
  static const int digit_at[7] = {0, 1, 3, 4, 6, 7, 8};
  for (int i = 0; i < 7; i++)
    if (s[digit_at[i]] < '0' || s[digit_at[i]] > '9') return false;
  int a = (s[0] - '0') * 10 + (s[1] - '0'), b = (s[3] - '0') * 10 + (s[4] - '0');
  int c = (s[8] - '0') * 100 + (s[7] - '0') * 10 + (s[6] - '0');
  if (s[2] == '+') return c == a + b;
  return b <= a && c == a - b;
}

/* No training line's prompt is a held-out one (the lines are fixed-width,
 * so line k is text[10k, 10k + 10)). */
static bool heldout_unseen(const loom_corpus *c) {
  for (size_t at = 0; at + 10 <= c->len; at += 10)
    for (int32_t i = 0; i < c->n_heldout; i++)
      if (memcmp(c->text + at, c->heldout[i].prompt, 6) == 0) return false;
  return true;
}

static void test_corpus(loom_ctx *ctx) {
  /* the format's own examples */
  CHECK(line_ok("47+38=580", 9) && line_ok("93-07=680", 9) && line_ok("99+99=891", 9));
  CHECK(!line_ok("47+38=85", 8) && !line_ok("47+38=085", 9) && !line_ok("07-93=041", 9));
  char w[4];
  loom_corpus_write_answer(85, w);
  CHECK(strcmp(w, "580") == 0 && loom_corpus_read_answer("580") == 85);
  loom_corpus_write_answer(198, w);
  CHECK(strcmp(w, "891") == 0 && loom_corpus_read_answer("891") == 198);
  CHECK(loom_corpus_read_answer("58") == -1 && loom_corpus_read_answer("5x0") == -1);
  loom_corpus *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(ctx, loom_corpus_new(ctx, 7, 2000, 50, &a));
  CHECK_OK(ctx, loom_corpus_new(ctx, 7, 2000, 50, &b));
  CHECK_OK(ctx, loom_corpus_new(ctx, 8, 2000, 50, &c));
  if (!a || !b || !c) goto out;
  CHECK(a->len == b->len && memcmp(a->text, b->text, a->len) == 0);
  CHECK(a->len != c->len || memcmp(a->text, c->text, a->len) != 0);
  /* every line is a correct problem; count the lines and ops */
  int32_t lines = 0, bad = 0, ops[2] = {0};
  size_t start = 0;
  for (size_t i = 0; i < a->len; i++)
    if (a->text[i] == '\n') {
      if (!line_ok((const char *)a->text + start, i - start)) bad++;
      const char *l = (const char *)a->text + start;
      ops[0] += memchr(l, '+', i - start) != NULL;
      ops[1] += memchr(l, '-', i - start) != NULL;
      lines++;
      start = i + 1;
    }
  CHECK(lines == 2000 && bad == 0 && start == a->len && a->len == 2000 * 10);
  CHECK(ops[0] > 900 && ops[1] > 900 && ops[0] + ops[1] == 2000);
  /* held-out problems: correct, distinct, and never in the training text */
  CHECK(a->n_heldout == 50);
  for (int32_t i = 0; i < a->n_heldout; i++) {
    const loom_problem *p = &a->heldout[i];
    char line[32];
    int n = snprintf(line, sizeof line, "%s%s", p->prompt, p->answer);
    CHECK(line_ok(line, (size_t)n));
    CHECK(p->value == (p->op == '+' ? p->a + p->b : p->a - p->b) &&
          loom_corpus_read_answer(p->answer) == p->value);
    for (int32_t j = 0; j < i; j++)
      CHECK(strcmp(a->heldout[i].prompt, a->heldout[j].prompt) != 0);
  }
  CHECK(heldout_unseen(a));
  /* the check can fail: a held-out prompt that is a training line's */
  loom_problem keep = a->heldout[7];
  memcpy(a->heldout[7].prompt, a->text + 10 * 123, 6);
  CHECK(!heldout_unseen(a));
  a->heldout[7] = keep;
  /* batches: targets are the tokens shifted by one, same for same (seed, step) */
  int64_t t1[2 * 8], y1[2 * 8], t2[2 * 8], y2[2 * 8];
  loom_corpus_batch(a, 3, 5, 2, 8, t1, y1);
  loom_corpus_batch(a, 3, 5, 2, 8, t2, y2);
  CHECK(memcmp(t1, t2, sizeof t1) == 0 && memcmp(y1, y2, sizeof y1) == 0);
  for (int32_t r = 0; r < 2; r++)
    for (int32_t i = 0; i + 1 < 8; i++)
      CHECK(y1[r * 8 + i] == t1[r * 8 + i + 1]);
  loom_corpus_batch(a, 3, 6, 2, 8, t2, y2);
  CHECK(memcmp(t1, t2, sizeof t1) != 0);
  /* windows start at a line's newline, as the held-out prompts do */
  CHECK(t1[0] == '\n' && t1[8] == '\n' && t2[0] == '\n' && t2[8] == '\n');
  /* the default corpus too: 50000 lines, none of them a held-out problem */
  loom_train_config dc;
  loom_train_config_default(&dc);
  loom_corpus_free(c);
  c = NULL;
  CHECK_OK(ctx, loom_corpus_new(ctx, dc.seed, dc.corpus_lines, dc.heldout, &c));
  CHECK(c && c->n_heldout == dc.heldout && heldout_unseen(c));
out:
  loom_corpus_free(a);
  loom_corpus_free(b);
  loom_corpus_free(c);
}

static void test_prng(void) {
  loom_prng r = loom_prng_make(1, 2);
  double s = 0, s2 = 0;
  int n = 20000;
  for (int i = 0; i < n; i++) {
    double x = loom_prng_normal(&r);
    s += x;
    s2 += x * x;
  }
  CHECK(fabs(s / n) < 0.03);
  CHECK(fabs(s2 / n - 1.0) < 0.05);
  loom_prng a = loom_prng_make(1, 2), b = loom_prng_make(1, 3);
  CHECK(loom_prng_next(&a) != loom_prng_next(&b));
  for (int i = 0; i < 1000; i++)
    CHECK(loom_prng_below(&a, 7) < 7);
}

static void test_schedule(void) {
  loom_train_config c;
  loom_train_config_default(&c);
  c.steps = 1000;
  c.lr = 1e-3;
  c.warmup = 100;
  c.min_lr_frac = 0.1;
  CHECK(fabs(loom_train_lr_at(&c, 0) - 1e-5) < 1e-15);
  CHECK(fabs(loom_train_lr_at(&c, 49) - 5e-4) < 1e-15);
  CHECK(fabs(loom_train_lr_at(&c, 99) - 1e-3) < 1e-15);
  CHECK(fabs(loom_train_lr_at(&c, 100) - 1e-3) < 1e-15);
  /* halfway through the cosine: the mean of peak and floor */
  CHECK(fabs(loom_train_lr_at(&c, 550) - 0.55e-3) < 1e-12);
  CHECK(fabs(loom_train_lr_at(&c, 1000) - 1e-4) < 1e-12);
  CHECK(fabs(loom_train_lr_at(&c, 5000) - 1e-4) < 1e-12);
}

/* ---- graphs ------------------------------------------------------------- */

static void test_graphs(loom_ctx *ctx) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 4;
  c.d_ff = 64;
  c.context = 8;
  loom_gpt_param *ps = NULL;
  int32_t n = 0;
  CHECK_OK(ctx, loom_gpt_params(ctx, &c, &ps, &n));
  CHECK(n == 2 + 12 * 2 + 2);
  int64_t count = 0;
  for (int32_t i = 0; i < n; i++)
    count += ps[i].shape[0] * (ps[i].rank == 2 ? ps[i].shape[1] : 1);
  /* wte, wpe; per layer 2 LN (4d), qkv d*3d+3d, proj d*d+d, fc d*f+f, proj f*d+d; lnf */
  int64_t d = 16, f = 64;
  CHECK(count == 256 * d + 8 * d +
                     2 * (4 * d + 3 * d * d + 3 * d + d * d + d + d * f + f + f * d + d) + 2 * d);
  CHECK(n > 0 && strcmp(ps[0].name, "wte") == 0 && strcmp(ps[2].name, "h0.ln1.g") == 0 &&
        ps[2].init == LOOM_GPT_INIT_ONES && strcmp(ps[n - 1].name, "lnf.b") == 0);

  loom_gpt_optim o = {0.9, 0.95, 1e-8, 0.1, 5, NULL};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, 3, 8, &o, &g, &per_step));
  /* per layer: attention probabilities B*H*T*T, two residual B*T*D */
  CHECK(per_step == 2 * (3 * 4 * 8 * 8 + 2 * 3 * 8 * 16));
  if (g) {
    CHECK(loom_graph_num_inputs(g) == LOOM_GPT_IN_PARAMS + 3 * n);
    CHECK(loom_graph_num_outputs(g) == 1 + 3 * n);
    CHECK(strcmp(loom_graph_input_name(g, LOOM_GPT_IN_RNG_BASE), "rng_base") == 0);
    CHECK(strcmp(loom_graph_input_name(g, LOOM_GPT_IN_PARAMS), "wte") == 0);
    CHECK(loom_graph_input_is_param(g, LOOM_GPT_IN_PARAMS));
    CHECK(strcmp(loom_graph_input_name(g, LOOM_GPT_IN_PARAMS + n), "adam.m.wte") == 0);
    CHECK(strcmp(loom_graph_input_name(g, LOOM_GPT_IN_PARAMS + 2 * n), "adam.v.wte") == 0);
    CHECK(strcmp(loom_graph_output_name(g, 0), "loss") == 0);
    CHECK_OK(ctx, loom_graph_verify(g));
  }
  loom_graph_free(g);
  /* no dropout, no counter */
  c.dropout = 0.0;
  g = NULL;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, 3, 8, &o, &g, &per_step));
  CHECK(per_step == 0);
  loom_graph_free(g);
  g = NULL;
  CHECK_OK(ctx, loom_gpt_build_infer(ctx, &c, 2, 5, &g));
  if (g) {
    loom_dtype dt;
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_output_value(g, 0), &dt, &rank, shape));
    CHECK(dt == LOOM_DTYPE_F32 && rank == 2 && shape[0] == 2 && shape[1] == 256);
  }
  loom_graph_free(g);
  /* bad configurations are errors */
  c.n_head = 3;
  g = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_gpt_build_infer(ctx, &c, 2, 5, &g));
  c.n_head = 4;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_gpt_build_infer(ctx, &c, 2, 9, &g));
  CHECK(g == NULL);
  free(ps);
}

/* ---- training ----------------------------------------------------------- */

/* Trains steps [from, to) and records the losses into loss[from..to). */
static bool train_range(loom_ctx *ctx, loom_trainer *t, int64_t to, float *loss) {
  for (int64_t k = loom_trainer_steps_done(t); k < to; k++) {
    loom_status s = loom_trainer_step(t, &loss[k]);
    CHECK_OK(ctx, s);
    if (s) return false;
  }
  return true;
}

static bool same_state(const loom_trainer *a, const loom_trainer *b) {
  for (int32_t k = 0; k < 3; k++)
    for (int32_t i = 0; i < loom_trainer_num_params(a); i++) {
      const loom_tensor *x = loom_trainer_tensor(a, k, i), *y = loom_trainer_tensor(b, k, i);
      if (memcmp(loom_tensor_data(x), loom_tensor_data(y),
                 (size_t)loom_tensor_numel(x) * sizeof(float)) != 0)
        return false;
    }
  return true;
}

static void test_training(loom_ctx *ctx, const char *ckpt) {
  loom_train_config c;
  tiny_config(&c);
  int64_t n = c.steps, k = n / 2;
  float *la = calloc((size_t)n, sizeof *la), *lb = calloc((size_t)n, sizeof *lb);
  float *lc = calloc((size_t)n, sizeof *lc);
  loom_trainer *a = NULL, *b = NULL, *r = NULL;
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_trainer_new(ctx, &c, &a));
  CHECK_OK(ctx, loom_trainer_new(ctx, &c, &b));
  if (!a || !b) goto out;

  /* init: normal(0, 0.02) embeddings, unit LayerNorm gains, zero moments */
  const loom_tensor *wte = loom_trainer_tensor(a, 0, 0);
  const float *w = loom_tensor_data(wte);
  double s = 0, s2 = 0;
  int64_t m = loom_tensor_numel(wte);
  for (int64_t i = 0; i < m; i++) {
    s += w[i];
    s2 += (double)w[i] * w[i];
  }
  CHECK(fabs(s / (double)m) < 0.002 && fabs(sqrt(s2 / (double)m) - 0.02) < 0.002);
  CHECK(((const float *)loom_tensor_data(loom_trainer_tensor(a, 0, 2)))[0] == 1.0f);
  CHECK(((const float *)loom_tensor_data(loom_trainer_tensor(a, 1, 0)))[0] == 0.0f);
  CHECK(same_state(a, b));

  /* the loss falls clearly from ln(256) = 5.55 */
  if (!train_range(ctx, a, n, la)) goto out;
  CHECK(fabs(la[0] - log(256.0)) < 0.1);
  double tail = 0;
  for (int64_t i = n - 4; i < n; i++)
    tail += la[i] / 4.0;
  printf("tiny run: first loss %.4f, mean of the last 4 %.4f\n", (double)la[0], tail);
  CHECK(tail < la[0] - (quick ? 1.0 : 1.5));

  /* the same seed gives the same losses and state, bit for bit */
  if (!train_range(ctx, b, k, lb)) goto out;
  CHECK(memcmp(la, lb, sizeof(float) * (size_t)k) == 0);

  /* save at step k, load, continue: the uninterrupted run's losses */
  CHECK_OK(ctx, loom_checkpoint_save(b, ckpt));
  loom_train_config rc;
  loom_train_config_default(&rc);
  rc.threads = 1; /* not stored: the results do not depend on it */
  CHECK_OK(ctx, loom_checkpoint_read(ctx, ckpt, &rc, &st));
  CHECK(rc.model.d_model == c.model.d_model && rc.model.context == c.model.context &&
        rc.batch == c.batch && rc.steps == c.steps && rc.lr == c.lr && rc.seed == c.seed &&
        rc.model.dropout == c.model.dropout);
  CHECK_OK(ctx, loom_trainer_new(ctx, &rc, &r));
  if (!r || !st) goto out;
  CHECK_OK(ctx, loom_checkpoint_restore(r, st));
  CHECK(loom_trainer_steps_done(r) == k);
  CHECK(same_state(b, r));
  if (!train_range(ctx, r, n, lc)) goto out;
  CHECK(memcmp(la + k, lc + k, sizeof(float) * (size_t)(n - k)) == 0);
  if (!train_range(ctx, b, n, lb)) goto out;
  CHECK(memcmp(la, lb, sizeof(float) * (size_t)n) == 0);
  CHECK(same_state(a, r) && same_state(a, b));

  /* greedy decoding is deterministic and accuracy runs */
  char g1[64], g2[64];
  CHECK_OK(ctx, loom_trainer_generate(a, "\n1+2=", 10, g1, sizeof g1));
  CHECK_OK(ctx, loom_trainer_generate(r, "\n1+2=", 10, g2, sizeof g2));
  CHECK(strlen(g1) == 15 && strcmp(g1, g2) == 0 && strncmp(g1, "\n1+2=", 5) == 0);
  int32_t ok = -1, total = 0;
  CHECK_OK(ctx, loom_trainer_accuracy(a, &ok, &total));
  CHECK(total == c.heldout && ok >= 0 && ok <= total);

  /* a checkpoint for another model is refused, with the tensor named */
  loom_trainer *other = NULL;
  loom_train_config oc = c;
  oc.model.d_model = 16;
  oc.model.d_ff = 64;
  CHECK_OK(ctx, loom_trainer_new(ctx, &oc, &other));
  if (other) {
    CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_checkpoint_restore(other, st));
    CHECK(strstr(loom_ctx_error(ctx), "wte") != NULL);
  }
  loom_trainer_free(other);
out:
  loom_safetensors_free(st);
  loom_trainer_free(a);
  loom_trainer_free(b);
  loom_trainer_free(r);
  free(la);
  free(lb);
  free(lc);
}

/* Copies the whole training state (dir 0: out of t into buf, 1: back). */
static void state_copy(loom_trainer *t, float **buf, int dir) {
  for (int32_t k = 0; k < 3; k++)
    for (int32_t i = 0; i < loom_trainer_num_params(t); i++) {
      loom_tensor *x = loom_trainer_tensor(t, k, i);
      size_t bytes = (size_t)loom_tensor_numel(x) * sizeof(float);
      float *b = buf[k * loom_trainer_num_params(t) + i];
      if (dir == 0)
        memcpy(b, loom_tensor_data(x), bytes);
      else
        memcpy(loom_tensor_data(x), b, bytes);
    }
}

/* The gradients of the whole step, against central differences of its loss.
 * After step 1 the AdamW moment is m = (1 - beta1) * grad, which exposes
 * the gradient the graph computed. */
static void test_gradients(loom_ctx *ctx) {
  loom_train_config c;
  tiny_config(&c);
  c.model.dropout = 0.0; /* the loss is then a function of the parameters */
  c.model.context = 8;
  c.batch = 2;
  loom_trainer *t = NULL;
  CHECK_OK(ctx, loom_trainer_new(ctx, &c, &t));
  if (!t) return;
  int32_t n = loom_trainer_num_params(t);
  float **snap = calloc((size_t)(3 * n), sizeof *snap);
  for (int32_t k = 0; k < 3 * n; k++)
    snap[k] = malloc((size_t)loom_tensor_numel(loom_trainer_tensor(t, k / n, k % n)) * 4);
  state_copy(t, snap, 0);
  float loss = 0;
  CHECK_OK(ctx, loom_trainer_step(t, &loss));
  /* the moments after step 1 (the FD steps below overwrite the state) */
  float **grad = calloc((size_t)(3 * n), sizeof *grad);
  for (int32_t k = 0; k < 3 * n; k++)
    grad[k] = malloc((size_t)loom_tensor_numel(loom_trainer_tensor(t, k / n, k % n)) * 4);
  state_copy(t, grad, 0);
  /* every parameter, including the tied wte, by its largest gradient entry */
  int32_t checked = 0;
  for (int32_t i = 0; i < n; i++) {
    const float *mv = grad[n + i];
    int64_t best = 0;
    for (int64_t e = 1; e < loom_tensor_numel(loom_trainer_tensor(t, 1, i)); e++)
      if (fabsf(mv[e]) > fabsf(mv[best])) best = e;
    double g = mv[best] / (1.0 - c.beta1), h = 1e-2, lp = 0, lm = 0;
    for (int side = 0; side < 2; side++) {
      state_copy(t, snap, 1);
      ((float *)loom_tensor_data(loom_trainer_tensor(t, 0, i)))[best] += (float)(side ? -h : h);
      loom_trainer_set_steps_done(t, 0);
      float l = 0;
      CHECK_OK(ctx, loom_trainer_step(t, &l));
      if (side)
        lm = l;
      else
        lp = l;
    }
    double fd = (lp - lm) / (2 * h);
    bool ok = fabs(fd - g) <= 5e-4 + 0.01 * fabs(g);
    if (!ok || getenv("LOOM_TEST_VERBOSE"))
      fprintf(stderr, "gradient of %s[%lld]: graph %.6g, central difference %.6g\n",
              loom_trainer_param(t, i)->name, (long long)best, g, fd);
    CHECK(ok);
    checked++;
  }
  CHECK(checked == n);
  for (int32_t k = 0; k < 3 * n; k++) {
    free(snap[k]);
    free(grad[k]);
  }
  free(snap);
  free(grad);
  loom_trainer_free(t);
}

/* ---- an independent forward pass ---------------------------------------- */

/* Parameter i of the trainer as floats (the order of loom_gpt_params:
 * wte, wpe, 12 per layer, lnf.g, lnf.b). */
static const float *P(const loom_trainer *t, int32_t i) {
  return loom_tensor_data(loom_trainer_tensor(t, 0, i));
}

static void ref_ln(const double *x, const float *g, const float *b, int d, double *y) {
  double mean = 0, var = 0;
  for (int j = 0; j < d; j++)
    mean += x[j] / d;
  for (int j = 0; j < d; j++)
    var += (x[j] - mean) * (x[j] - mean) / d;
  for (int j = 0; j < d; j++)
    y[j] = (x[j] - mean) / sqrt(var + 1e-5) * g[j] + b[j];
}

/* y[n_out] = x[n_in] @ w[n_in, n_out] + b */
static void ref_linear(const double *x, const float *w, const float *b, int n_in, int n_out,
                       double *y) {
  for (int o = 0; o < n_out; o++) {
    double s = b[o];
    for (int i = 0; i < n_in; i++)
      s += x[i] * w[(size_t)i * n_out + o];
    y[o] = s;
  }
}

/* GPT-2 in plain loops, in double: logits [T, V] of one sequence. */
static void ref_forward(const loom_trainer *t, const int64_t *tok, int T, double *logits) {
  const loom_gpt_config *c = &loom_trainer_config(t)->model;
  int D = c->d_model, H = c->n_head, Dh = D / H, F = c->d_ff, V = c->vocab;
  double *x = calloc((size_t)T * D, sizeof *x), *a = calloc((size_t)T * D, sizeof *a);
  double *qkv = calloc((size_t)T * 3 * D, sizeof *qkv), *att = calloc((size_t)T * D, sizeof *att);
  double *y = calloc((size_t)D, sizeof *y), *m = calloc((size_t)F, sizeof *m);
  double *p = calloc((size_t)T, sizeof *p);
  for (int s = 0; s < T; s++)
    for (int j = 0; j < D; j++)
      x[s * D + j] = P(t, 0)[tok[s] * D + j] + P(t, 1)[s * D + j];
  for (int l = 0; l < c->n_layer; l++) {
    int b0 = 2 + 12 * l;
    for (int s = 0; s < T; s++) {
      ref_ln(x + s * D, P(t, b0 + 0), P(t, b0 + 1), D, a + s * D);
      ref_linear(a + s * D, P(t, b0 + 2), P(t, b0 + 3), D, 3 * D, qkv + s * 3 * D);
    }
    /* qkv is head-major: head h's q, k, v are columns h*3Dh + {0, Dh, 2Dh} */
    for (int h = 0; h < H; h++)
      for (int s = 0; s < T; s++) {
        double mx = -INFINITY, z = 0;
        const double *q = qkv + s * 3 * D + h * 3 * Dh;
        for (int u = 0; u <= s; u++) {
          double dot = 0;
          for (int e = 0; e < Dh; e++)
            dot += q[e] * qkv[u * 3 * D + h * 3 * Dh + Dh + e];
          p[u] = dot / sqrt((double)Dh);
          mx = fmax(mx, p[u]);
        }
        for (int u = 0; u <= s; u++)
          z += p[u] = exp(p[u] - mx);
        for (int e = 0; e < Dh; e++) {
          double acc = 0;
          for (int u = 0; u <= s; u++)
            acc += p[u] / z * qkv[u * 3 * D + h * 3 * Dh + 2 * Dh + e];
          att[s * D + h * Dh + e] = acc;
        }
      }
    for (int s = 0; s < T; s++) {
      ref_linear(att + s * D, P(t, b0 + 4), P(t, b0 + 5), D, D, y);
      for (int j = 0; j < D; j++)
        x[s * D + j] += y[j];
      ref_ln(x + s * D, P(t, b0 + 6), P(t, b0 + 7), D, a + s * D);
      ref_linear(a + s * D, P(t, b0 + 8), P(t, b0 + 9), D, F, m);
      for (int k = 0; k < F; k++)
        m[k] =
            0.5 * m[k] *
            (1 + tanh(sqrt(2 / 3.14159265358979323846) * (m[k] + 0.044715 * m[k] * m[k] * m[k])));
      ref_linear(m, P(t, b0 + 10), P(t, b0 + 11), F, D, y);
      for (int j = 0; j < D; j++)
        x[s * D + j] += y[j];
    }
  }
  int nl = 2 + 12 * c->n_layer;
  for (int s = 0; s < T; s++) {
    ref_ln(x + s * D, P(t, nl), P(t, nl + 1), D, a + s * D);
    for (int v = 0; v < V; v++) {
      double acc = 0;
      for (int j = 0; j < D; j++)
        acc += a[s * D + j] * P(t, 0)[v * D + j];
      logits[s * V + v] = acc;
    }
  }
  free(x);
  free(a);
  free(qkv);
  free(att);
  free(y);
  free(m);
  free(p);
}

/* The graphs compute the model above: the inference logits and the
 * training loss (without dropout) against the plain loops. */
static void test_forward(loom_ctx *ctx) {
  loom_train_config c;
  tiny_config(&c);
  c.model.dropout = 0.0;
  c.model.n_layer = 2;
  c.model.context = 8;
  c.batch = 2;
  loom_trainer *t = NULL;
  loom_corpus *corpus = NULL;
  CHECK_OK(ctx, loom_trainer_new(ctx, &c, &t));
  CHECK_OK(ctx, loom_corpus_new(ctx, c.seed, c.corpus_lines, c.heldout, &corpus));
  if (!t || !corpus) goto out;
  int T = c.model.context, V = 256, B = c.batch;
  double *lg = calloc((size_t)T * V, sizeof *lg);
  /* a few steps first, so gains and biases are no longer 1 and 0 */
  for (int k = 0; k < 4; k++)
    CHECK_OK(ctx, loom_trainer_step(t, NULL));
  /* the loss of step 5 is the mean cross-entropy of its batch */
  int64_t tok[2 * 8], tgt[2 * 8];
  loom_corpus_batch(corpus, c.seed, 4, B, T, tok, tgt);
  double want = 0;
  for (int b = 0; b < B; b++) {
    ref_forward(t, tok + b * T, T, lg);
    for (int s = 0; s < T; s++) {
      double mx = -INFINITY, z = 0;
      for (int v = 0; v < V; v++)
        mx = fmax(mx, lg[s * V + v]);
      for (int v = 0; v < V; v++)
        z += exp(lg[s * V + v] - mx);
      want += (log(z) + mx - lg[s * V + tgt[b * T + s]]) / (B * T);
    }
  }
  float loss = 0;
  CHECK_OK(ctx, loom_trainer_step(t, &loss));
  printf("step-5 loss: graph %.6f, plain loops %.6f\n", (double)loss, want);
  CHECK(fabs(loss - want) < 1e-4 * want);

  /* inference: logits of chosen positions of two sequences */
  loom_graph *g = NULL;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_gpt_build_infer(ctx, &c.model, 2, T, &g));
  if (g) CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (s) {
    int32_t n = loom_trainer_num_params(t);
    const loom_tensor **in = calloc((size_t)(2 + n), sizeof *in);
    loom_tensor *tt = NULL, *rt = NULL, *out = NULL;
    int64_t shape[2] = {2, T}, two[1] = {2}, rows[2] = {3, T + T - 1};
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_I64, 2, shape, tok, &tt));
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_I64, 1, two, rows, &rt));
    in[0] = tt;
    in[1] = rt;
    for (int32_t i = 0; i < n; i++)
      in[2 + i] = loom_trainer_tensor(t, 0, i);
    CHECK_OK(ctx, loom_session_run(s, 2 + n, in, 1, &out));
    if (out) {
      const float *got = loom_tensor_data(out);
      double worst = 0;
      for (int b = 0; b < 2; b++) {
        ref_forward(t, tok + b * T, T, lg);
        int pos = (int)(rows[b] - b * T);
        for (int v = 0; v < V; v++)
          worst = fmax(worst, fabs(got[b * V + v] - lg[pos * V + v]));
      }
      CHECK(worst < 1e-4);
    }
    loom_tensor_free(out);
    loom_tensor_free(tt);
    loom_tensor_free(rt);
    free(in);
  }
  loom_session_free(s);
  loom_graph_free(g);
  free(lg);
out:
  loom_corpus_free(corpus);
  loom_trainer_free(t);
}

/* The losses depend on neither the thread count (bitwise) nor the backend
 * (the reference executor is the oracle: close, not bitwise). */
static void test_backends(loom_ctx *ctx) {
  loom_train_config c;
  tiny_config(&c);
  enum { N = 3 };
  float l[3][N] = {{0}};
  for (int32_t v = 0; v < 3; v++) {
    loom_train_config vc = c;
    vc.threads = v == 0 ? 1 : 2;
    if (v == 2) snprintf(vc.backend, sizeof vc.backend, "ref");
    loom_trainer *t = NULL;
    CHECK_OK(ctx, loom_trainer_new(ctx, &vc, &t));
    if (t) train_range(ctx, t, N, l[v]);
    loom_trainer_free(t);
  }
  CHECK(memcmp(l[0], l[1], sizeof l[0]) == 0);
  for (int32_t k = 0; k < N; k++)
    CHECK(fabs(l[1][k] - l[2][k]) < 1e-3);
}

/* Every RNG placement draws the same masks: the same losses bit for bit;
 * decomposed attention follows within rounding. */
static void test_rng_placements(loom_ctx *ctx) {
  loom_train_config c;
  tiny_config(&c);
  enum { N = 4 };
  static const loom_rng_placement rng[] = {LOOM_RNG_SEQUENTIAL, LOOM_RNG_FUSED, LOOM_RNG_OVERLAP,
                                           LOOM_RNG_AUTO};
  float l[5][N] = {{0}};
  for (int32_t v = 0; v < 5; v++) {
    loom_train_config vc = c;
    if (v < 4) vc.rng = rng[v];
    if (v == 4) vc.attention = LOOM_ATTENTION_DECOMPOSED;
    loom_trainer *t = NULL;
    CHECK_OK(ctx, loom_trainer_new(ctx, &vc, &t));
    if (t) train_range(ctx, t, N, l[v]);
    loom_trainer_free(t);
  }
  for (int32_t v = 1; v < 4; v++) CHECK(memcmp(l[0], l[v], sizeof l[0]) == 0);
  for (int32_t k = 0; k < N; k++) CHECK(fabs(l[0][k] - l[4][k]) < 1e-3);
  loom_train_config bad = c;
  bad.rng = LOOM_RNG_COUNT;
  loom_trainer *t = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trainer_new(ctx, &bad, &t));
}

/* A bad checkpoint: metadata or tensors that do not fit. */
static void test_bad_checkpoints(loom_ctx *ctx, const char *path) {
  loom_train_config c;
  loom_train_config_default(&c);
  loom_safetensors *st = NULL;
  float x = 0;
  loom_st_tensor t = {
      .name = "wte", .dtype = LOOM_DTYPE_F32, .rank = 1, .shape = {1}, .data = &x, .nbytes = 4};
  const char *k1[1] = {"format"}, *v1[1] = {"something-else"};
  CHECK_OK(ctx, loom_safetensors_save(ctx, path, 1, &t, 1, k1, v1));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_checkpoint_read(ctx, path, &c, &st));
  const char *k2[2] = {"format", "version"}, *v2[2] = {"loom-train-checkpoint", "1"};
  CHECK_OK(ctx, loom_safetensors_save(ctx, path, 1, &t, 2, k2, v2));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_checkpoint_read(ctx, path, &c, &st));
  CHECK(strstr(loom_ctx_error(ctx), "missing") != NULL);
  CHECK(st == NULL);
  FILE *f = fopen(path, "wb");
  fputs("not a checkpoint", f);
  fclose(f);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_checkpoint_read(ctx, path, &c, &st));
}

/* ---- command line ------------------------------------------------------- */

/* Runs loom_train_main with stdout/stderr sent to /dev/null. */
static int run_cli(int argc, const char **argv) {
  fflush(stdout);
  fflush(stderr);
  int o = dup(1), e = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 1);
  dup2(null, 2);
  int rc = loom_train_main(argc, (char **)argv);
  fflush(stdout);
  fflush(stderr);
  dup2(o, 1);
  dup2(e, 2);
  close(o);
  close(e);
  close(null);
  return rc;
}

#define CLI(...)                                                                                   \
  run_cli((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),                     \
          (const char *[]){__VA_ARGS__})

static void test_cli(const char *path) {
  CHECK(CLI("train", "--help") == 0);
  CHECK(CLI("train", "--layers", "abc") == 2);
  CHECK(CLI("train", "--layers", "0") == 2);
  CHECK(CLI("train", "--layers", "2.5") == 2);
  CHECK(CLI("train", "--d-model", "12x") == 2);
  CHECK(CLI("train", "--heads", "3") == 2); /* 128 % 3 != 0 */
  CHECK(CLI("train", "--d-model", "64", "--heads", "128") == 2);
  CHECK(CLI("train", "--context", "1") == 2);
  CHECK(CLI("train", "--batch", "-4") == 2);
  CHECK(CLI("train", "--steps", "0") == 2);
  CHECK(CLI("train", "--steps", "99999999999999999999") == 2);
  CHECK(CLI("train", "--lr", "0") == 2);
  CHECK(CLI("train", "--lr", "nan") == 2);
  CHECK(CLI("train", "--lr") == 2);
  CHECK(CLI("train", "--dropout", "1") == 2);
  CHECK(CLI("train", "--dropout", "-0.1") == 2);
  CHECK(CLI("train", "--seed", "-3") == 2);
  CHECK(CLI("train", "--threads", "-1") == 2);
  CHECK(CLI("train", "--backend", "gpu") == 2);
  CHECK(CLI("train", "--log-every", "0") == 2);
  CHECK(CLI("train", "--save", "") == 2);
  CHECK(CLI("train", "--bogus", "1") == 2);
  CHECK(CLI("train", "extra") == 2);
  CHECK(CLI("train", "--steps", "10", "--stop-at", "11") == 2);
  CHECK(CLI("train", "--rng", "later") == 2);
  CHECK(CLI("train", "--attention", "magic") == 2);
  CHECK(CLI("train", "--trace", "") == 2);
  FILE *keep = fopen(path, "wb"); /* an existing file: not overwritten without --force */
  if (keep) fclose(keep);
  CHECK(keep && CLI("train", "--trace", path) == 1);

  /* a short run with a checkpoint, resumed; then bad loads fail with 1 */
  const char *st = quick ? "6" : "10", *half = quick ? "3" : "5";
  CHECK(CLI("train", "--layers=1", "--d-model=16", "--heads=2", "--context=16", "--batch=2",
            "--steps", st, "--stop-at", half, "--threads=2", "--save", path) == 0);
  CHECK(CLI("train", "--load", path, "--threads", "2") == 0);
  CHECK(CLI("train", "--load", path, "--d-model", "32") == 1);
  CHECK(CLI("train", "--load", "/nonexistent-dir/ckpt.safetensors") == 1);
  FILE *f = fopen(path, "r+b");
  if (f) {
    fputc(0xff, f); /* a header length far past the file */
    fclose(f);
  }
  CHECK(CLI("train", "--load", path) == 1);
}

/* The parameters' memory is checked from the configuration before any of
 * it is allocated: a model too big for the machine fails with the numbers
 * instead of being allocated and touched until the OOM killer comes. */
static void test_memory_check(loom_ctx *ctx) {
  loom_train_config c;
  tiny_config(&c);
  loom_trainer *t = NULL;
  CHECK_OK(ctx, loom_train_check_memory(ctx, &c, 0));
  CHECK_OK(ctx, loom_train_check_memory(ctx, &c, (int64_t)1 << 30));
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_train_check_memory(ctx, &c, 1000));
  CHECK(strstr(loom_ctx_error(ctx), "GiB") != NULL);
  /* 64 layers of d_model 4096: 144 GiB with the AdamW moments */
  c.model.n_layer = 64;
  c.model.d_model = 4096;
  c.model.n_head = 32;
  c.model.d_ff = 4 * 4096;
  int64_t mem = loom_physical_memory_bytes();
  if (mem > 0 && mem < (int64_t)144 << 30) {
    CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_trainer_new(ctx, &c, &t));
    CHECK(t == NULL && strstr(loom_ctx_error(ctx), "144.05 GiB") != NULL);
  }
}

int main(void) {
  const char *q = getenv("LOOM_TEST_QUICK");
  quick = q && *q && strcmp(q, "0") != 0;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  char path[256];
  snprintf(path, sizeof path, "/tmp/loom_test_train_%d.safetensors", (int)getpid());
  test_prng();
  test_corpus(ctx);
  test_schedule();
  test_memory_check(ctx);
  test_graphs(ctx);
  test_training(ctx, path);
  test_backends(ctx);
  test_rng_placements(ctx);
  test_gradients(ctx);
  test_forward(ctx);
  test_bad_checkpoints(ctx, path);
  test_cli(path);
  remove(path);
  loom_ctx_free(ctx);
  return loom_test_finish("test_train");
}

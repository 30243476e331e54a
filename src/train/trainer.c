#include "train/trainer.h"


#include "comm/comm.h"
#include "core/sha256.h"
#include "ir/view.h"
#include "ops/op.h"
#include "parallel/plan_text.h"
#include "runtime/plan_runner.h"
#include "perf/comm_model.h"
#include "runtime/backend.h"
#include "train/prng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generator streams of the seed (the corpus uses its own, see corpus.c). */
#define STREAM_INIT 1000u

/* Held-out prompts are decoded in a short window: "\n99+99=" + "891\n". */
#define EVAL_T 16

struct loom_trainer {
  loom_ctx *ctx;
  loom_train_config cfg;
  loom_corpus *corpus;
  loom_gpt_param *ps;
  int32_t n;
  loom_tensor **state; /* 3n: parameters, m, v */
  loom_tensor *tokens, *targets, *step_t, *lr_t, *base_t, *loss_t;
  loom_graph *train_g;
  loom_session *train_s;
  int64_t rng_per_step;
  const loom_tensor **in;
  loom_tensor **out;
  int64_t done;
  /* inference, built on first use: [0] held-out answers, [1] samples */
  loom_graph *infer_g[2];
  loom_session *infer_s[2];
  int32_t infer_b[2], infer_t[2];
  loom_fusion_mode fusion; /* the sessions' */
  /* parallel: this rank's program of a plan (NULL: one device) */
  loom_comm *comm;
  loom_plan *plan;
  loom_plan_program *program;
  loom_plan_runner *runner;
  int64_t bucket_bytes; /* the lowering's gradient buckets */
  bool state_synced; /* the whole tensors hold the pieces' values */
};

void loom_train_config_default(loom_train_config *c) {
  memset(c, 0, sizeof *c);
  loom_gpt_config_default(&c->model);
  /* the arithmetic is learned faster and as well without dropout; --dropout
   * turns it on (its RNG paths are exercised by tests that ask for it) */
  c->model.dropout = 0.0;
  /* a window holds three problems: a short context and a larger batch learn
   * the digits' positions sooner than long windows (docs/PERFORMANCE.md,
   * "The main job") */
  c->model.context = 32;
  c->batch = 32;
  c->steps = 3000; /* held-out accuracy >= 99% at seeds 1-3 (docs/PERFORMANCE.md) */
  c->lr = 3e-3;
  c->warmup = -1;
  c->min_lr_frac = 0.1;
  c->beta1 = 0.9;
  c->beta2 = 0.95;
  c->eps = 1e-8;
  c->weight_decay = 0.1;
  c->seed = 1;
  c->threads = 0;
  snprintf(c->backend, sizeof c->backend, "%s", LOOM_BACKEND_DEFAULT);
  /* flash or decomposed per attention op, as the cost model predicts from
   * the machine profile's measured rates (kept there, so a run's pick and
   * its losses repeat); the default GPT's short sequences pick flash */
  c->attention = LOOM_ATTENTION_AUTO;
  c->rng = LOOM_RNG_AUTO;
  c->corpus_lines = 50000;
  c->heldout = 100;
}

loom_status loom_train_config_check(loom_ctx *ctx, const loom_train_config *c) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: config is NULL");
  LOOM_TRY(loom_gpt_config_check(ctx, &c->model));
  if (c->model.vocab != 256)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: the corpus is bytes, so vocab must be 256 (got %d)", c->model.vocab);
  if (c->batch < 1 || c->batch > 4096)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: batch %d is outside [1, 4096]",
                      c->batch);
  /* the AdamW step is an f32 input: exact up to 2^24 */
  if (c->steps < 1 || c->steps > (1 << 24))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: steps %lld is outside [1, 16777216]", (long long)c->steps);
  if (!(c->lr > 0.0 && c->lr <= 10.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: lr %g is outside (0, 10]", c->lr);
  if (c->warmup > c->steps)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: warmup %lld is longer than the %lld steps", (long long)c->warmup,
                      (long long)c->steps);
  if (!(c->min_lr_frac >= 0.0 && c->min_lr_frac <= 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: min_lr_frac %g is outside [0, 1]",
                      c->min_lr_frac);
  if (!(c->beta1 >= 0.0 && c->beta1 < 1.0) || !(c->beta2 >= 0.0 && c->beta2 < 1.0) ||
      !(c->eps > 0.0 && c->eps < 1.0) || !(c->weight_decay >= 0.0 && c->weight_decay < 10.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: AdamW settings out of range");
  if (c->threads < 0 || c->threads > 4096)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: threads %d is outside [0, 4096]",
                      c->threads);
  if ((unsigned)c->attention >= LOOM_ATTENTION_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: attention mode %d is not one of " LOOM_ATTENTION_MODE_NAMES,
                      (int)c->attention);
  if ((unsigned)c->rng >= LOOM_RNG_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: rng placement %d is not one of " LOOM_RNG_PLACEMENT_NAMES,
                      (int)c->rng);
  if (!loom_backend_name_known(c->backend))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: backend '%s' is not one of %s",
                      c->backend, loom_backend_names());
  if (c->corpus_lines < 100 || c->heldout < 1 || c->heldout > 1000)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: corpus size out of range");
  return LOOM_STATUS_OK;
}

static int64_t warmup_steps(const loom_train_config *c) {
  if (c->warmup >= 0) return c->warmup;
  return LOOM_MIN(c->steps / 10, 100);
}

double loom_train_lr_at(const loom_train_config *c, int64_t k) {
  int64_t w = warmup_steps(c);
  if (k < w) return c->lr * (double)(k + 1) / (double)w;
  double span = (double)LOOM_MAX(c->steps - w, 1);
  double prog = LOOM_MIN((double)(k - w) / span, 1.0);
  double lo = c->lr * c->min_lr_frac;
  return lo + 0.5 * (c->lr - lo) * (1.0 + cos(3.14159265358979323846 * prog));
}

/* ---- setup -------------------------------------------------------------- */

void loom_trainer_free(loom_trainer *t) {
  if (!t) return;
  for (int32_t i = 0; i < 2; i++) {
    loom_session_free(t->infer_s[i]);
    loom_graph_free(t->infer_g[i]);
  }
  loom_plan_runner_free(t->runner);
  loom_plan_program_free(t->program);
  loom_plan_free(t->plan);
  loom_session_free(t->train_s);
  loom_graph_free(t->train_g);
  if (t->state)
    for (int32_t i = 0; i < 3 * t->n; i++)
      loom_tensor_free(t->state[i]);
  free(t->state);
  loom_tensor_free(t->tokens);
  loom_tensor_free(t->targets);
  loom_tensor_free(t->step_t);
  loom_tensor_free(t->lr_t);
  loom_tensor_free(t->base_t);
  loom_tensor_free(t->loss_t);
  free(t->in);
  free(t->out);
  free(t->ps);
  loom_corpus_free(t->corpus);
  free(t);
}

/* Seeded init: each parameter draws from its own stream, so its values do
 * not depend on the other parameters' shapes. */
static void init_params(loom_trainer *t) {
  for (int32_t i = 0; i < t->n; i++) {
    float *p = loom_tensor_data(t->state[i]);
    int64_t numel = loom_tensor_numel(t->state[i]);
    loom_prng r = loom_prng_make(t->cfg.seed, STREAM_INIT + (uint64_t)i);
    for (int64_t k = 0; k < numel; k++) {
      switch (t->ps[i].init) {
      case LOOM_GPT_INIT_NORMAL: p[k] = (float)(0.02 * loom_prng_normal(&r)); break;
      case LOOM_GPT_INIT_ONES: p[k] = 1.0f; break;
      case LOOM_GPT_INIT_ZEROS: p[k] = 0.0f; break;
      }
    }
  }
}

loom_status loom_train_check_memory(loom_ctx *ctx, const loom_train_config *c,
                                    int64_t limit_bytes) {
  loom_gpt_param *ps = NULL;
  int32_t n = 0;
  LOOM_TRY(loom_gpt_params(ctx, &c->model, &ps, &n));
  double params = 0; /* double: no overflow, and exact far past any machine */
  for (int32_t i = 0; i < n; i++)
    params += (double)(ps[i].rank > 0 ? ps[i].shape[0] : 1) *
              (double)(ps[i].rank > 1 ? ps[i].shape[1] : 1);
  free(ps);
  double need = 3.0 * 4.0 * params;
  if (limit_bytes > 0 && need > (double)limit_bytes)
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "train: %.0f parameters with their AdamW moments need %.2f GiB (3 x 4 "
                      "bytes each), more than the machine's %.2f GiB of memory; use a smaller "
                      "--layers or --d-model",
                      params, need / 1073741824.0, (double)limit_bytes / 1073741824.0);
  return LOOM_STATUS_OK;
}

static loom_status setup(loom_trainer *t) {
  loom_ctx *ctx = t->ctx;
  const loom_train_config *c = &t->cfg;
  int32_t b = c->batch, tl = c->model.context;
  /* before anything big is allocated (and touched: init_params) */
  LOOM_TRY(loom_train_check_memory(ctx, c, loom_physical_memory_bytes()));
  LOOM_TRY(loom_corpus_new(ctx, c->seed, c->corpus_lines, c->heldout, &t->corpus));
  if (t->corpus->len <= (size_t)tl + 1)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: the corpus (%zu bytes) is shorter than the context %d",
                      t->corpus->len, tl);
  LOOM_TRY(loom_gpt_params(ctx, &c->model, &t->ps, &t->n));
  int32_t n = t->n;
  t->state = loom_calloc(ctx, (size_t)(3 * n), sizeof *t->state);
  t->in = loom_calloc(ctx, (size_t)(LOOM_GPT_IN_PARAMS + 3 * n), sizeof *t->in);
  t->out = loom_calloc(ctx, (size_t)(1 + 3 * n), sizeof *t->out);
  if (!t->state || !t->in || !t->out) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < 3 * n; i++)
    LOOM_TRY(
        loom_tensor_new(ctx, LOOM_DTYPE_F32, t->ps[i % n].rank, t->ps[i % n].shape, &t->state[i]));
  int64_t bt[2] = {b, tl};
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_I64, 2, bt, &t->tokens));
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_I64, 2, bt, &t->targets));
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &t->step_t));
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &t->lr_t));
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_I64, 0, NULL, &t->base_t));
  LOOM_TRY(loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &t->loss_t));
  init_params(t);

  /* the backend's rewrite (flash attention) runs in the builder, before autodiff */
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = c->backend, .fusion = t->fusion,
                                                 .attention = c->attention, .rng = c->rng);
  loom_gpt_optim o = {c->beta1, c->beta2, c->eps, c->weight_decay, c->seed, &so};
  LOOM_TRY(loom_gpt_build_train(ctx, &c->model, b, tl, &o, &t->train_g, &t->rng_per_step));
  LOOM_TRY(loom_session_new(ctx, t->train_g, &so, &t->train_s));

  /* inputs and outputs of the step; the state is updated in place */
  t->in[LOOM_GPT_IN_TOKENS] = t->tokens;
  t->in[LOOM_GPT_IN_TARGETS] = t->targets;
  t->in[LOOM_GPT_IN_STEP] = t->step_t;
  t->in[LOOM_GPT_IN_LR] = t->lr_t;
  t->in[LOOM_GPT_IN_RNG_BASE] = t->base_t;
  t->out[0] = t->loss_t;
  for (int32_t i = 0; i < 3 * n; i++) {
    t->in[LOOM_GPT_IN_PARAMS + i] = t->state[i];
    t->out[1 + i] = t->state[i];
  }
  return LOOM_STATUS_OK;
}

loom_status loom_trainer_new(loom_ctx *ctx, const loom_train_config *c, loom_trainer **out) {
  return loom_trainer_new_fused(ctx, c, LOOM_FUSION_STITCH, out);
}

const loom_session *loom_trainer_session(const loom_trainer *t) {
  if (!t) return NULL;
  return t->runner ? loom_plan_runner_session(t->runner) : t->train_s;
}

loom_trainer_rng_counts loom_trainer_rng_placements(const loom_trainer *t) {
  loom_trainer_rng_counts c = {0, 0, 0, 0};
  const loom_graph *g = t ? t->train_g : NULL;
  for (int32_t i = 0; g && i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->op == LOOM_OP_FLASH_ATTENTION) {
      c.flash++;
      c.fused += LOOM_ATTR_F(n, flash_attention, p) > 0.0 && n->n_in < 5;
    } else if (n->op == LOOM_OP_DROPOUT_MASK) {
      if (LOOM_ATTR_I(n, dropout_mask, overlap))
        c.overlap++;
      else
        c.sequential++;
    }
  }
  return c;
}

loom_status loom_trainer_new_fused(loom_ctx *ctx, const loom_train_config *c,
                                   loom_fusion_mode fusion, loom_trainer **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trainer_new: out is NULL");
  *out = NULL;
  LOOM_TRY(loom_train_config_check(ctx, c));
  if ((unsigned)fusion >= LOOM_FUSION_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "train: fusion mode %d is not one of " LOOM_FUSION_MODE_NAMES, (int)fusion);
  LOOM_TRY(loom_ctx_set_threads(ctx, c->threads));
  loom_trainer *t = loom_calloc(ctx, 1, sizeof *t);
  if (!t) return LOOM_STATUS_OUT_OF_MEMORY;
  t->ctx = ctx;
  t->cfg = *c;
  t->fusion = fusion;
  loom_status s = setup(t);
  if (s) {
    loom_trainer_free(t);
    return s;
  }
  *out = t;
  return LOOM_STATUS_OK;
}

/* ---- training ----------------------------------------------------------- */

loom_status loom_trainer_step(loom_trainer *t, float *loss) {
  if (!t) return LOOM_STATUS_INVALID_ARGUMENT;
  const loom_train_config *c = &t->cfg;
  if (t->done >= (1 << 24))
    return loom_error(t->ctx, LOOM_STATUS_OUT_OF_RANGE, "train: too many steps");
  int64_t k = t->done;
  loom_corpus_batch(t->corpus, c->seed, k, c->batch, c->model.context, loom_tensor_data(t->tokens),
                    loom_tensor_data(t->targets));
  *(float *)loom_tensor_data(t->step_t) = (float)(k + 1);
  *(float *)loom_tensor_data(t->lr_t) = (float)loom_train_lr_at(c, k);
  *(int64_t *)loom_tensor_data(t->base_t) = k * t->rng_per_step;
  int32_t n_in = LOOM_GPT_IN_PARAMS + 3 * t->n, n_out = 1 + 3 * t->n;
  loom_status s;
  if (t->runner) {
    /* every rank steps its pieces; the loss is gathered to all */
    s = loom_plan_runner_step(t->runner, t->in);
    if (!s) s = loom_plan_runner_gather_output(t->runner, 0, t->loss_t);
    t->state_synced = false;
  } else {
    s = loom_session_run(t->train_s, n_in, t->in, n_out, t->out);
  }
  if (s) {
    loom_error_prefix(t->ctx, "train step %lld", (long long)(k + 1));
    return s;
  }
  float l = *(const float *)loom_tensor_data(t->loss_t);
  if (!isfinite(l))
    return loom_error(t->ctx, LOOM_STATUS_INTERNAL,
                      "train step %lld: the loss is %g (diverged; try a lower --lr)",
                      (long long)(k + 1), (double)l);
  t->done++;
  if (loss) *loss = l;
  return LOOM_STATUS_OK;
}

int64_t loom_trainer_steps_done(const loom_trainer *t) { return t ? t->done : 0; }
const loom_train_config *loom_trainer_config(const loom_trainer *t) { return &t->cfg; }
loom_ctx *loom_trainer_ctx(const loom_trainer *t) { return t ? t->ctx : NULL; }
int32_t loom_trainer_num_params(const loom_trainer *t) { return t ? t->n : 0; }

int64_t loom_trainer_param_count(const loom_trainer *t) {
  int64_t total = 0;
  for (int32_t i = 0; t && i < t->n; i++)
    total += loom_tensor_numel(t->state[i]);
  return total;
}

const loom_gpt_param *loom_trainer_param(const loom_trainer *t, int32_t i) {
  return t && i >= 0 && i < t->n ? &t->ps[i] : NULL;
}

loom_tensor *loom_trainer_tensor(const loom_trainer *t, int32_t kind, int32_t i) {
  if (!t || kind < 0 || kind > 2 || i < 0 || i >= t->n) return NULL;
  return t->state[kind * t->n + i];
}

loom_status loom_trainer_set_steps_done(loom_trainer *t, int64_t steps) {
  if (!t) return LOOM_STATUS_INVALID_ARGUMENT;
  if (steps < 0 || steps >= (1 << 24))
    return loom_error(t->ctx, LOOM_STATUS_OUT_OF_RANGE, "train: step %lld is out of range",
                      (long long)steps);
  t->done = steps;
  return LOOM_STATUS_OK;
}

/* ---- inference ---------------------------------------------------------- */

/* The inference session for batch b, length tl (slot 0 or 1), built once. */
static loom_status infer_session(loom_trainer *t, int32_t slot, int32_t b, int32_t tl) {
  if (t->infer_s[slot]) return LOOM_STATUS_OK;
  LOOM_TRY(loom_gpt_build_infer(t->ctx, &t->cfg.model, b, tl, &t->infer_g[slot]));
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = t->cfg.backend, .fusion = t->fusion);
  LOOM_TRY(loom_session_new(t->ctx, t->infer_g[slot], &so, &t->infer_s[slot]));
  t->infer_b[slot] = b;
  t->infer_t[slot] = tl;
  return LOOM_STATUS_OK;
}

/* Runs inference slot on tokens/rows; writes the argmax byte of each row. */
static loom_status infer_argmax(loom_trainer *t, int32_t slot, loom_tensor *tokens,
                                loom_tensor *rows, int32_t *next) {
  int32_t n_in = 2 + t->n;
  const loom_tensor **in = loom_calloc(t->ctx, (size_t)n_in, sizeof *in);
  if (!in) return LOOM_STATUS_OUT_OF_MEMORY;
  in[0] = tokens;
  in[1] = rows;
  for (int32_t i = 0; i < t->n; i++)
    in[2 + i] = t->state[i];
  loom_tensor *logits = NULL;
  loom_status s = loom_session_run(t->infer_s[slot], n_in, in, 1, &logits);
  free(in);
  if (s) return s;
  const float *l = loom_tensor_data(logits);
  int32_t b = t->infer_b[slot], v = t->cfg.model.vocab;
  for (int32_t i = 0; i < b; i++) {
    int32_t best = 0; /* ties go to the lowest byte */
    for (int32_t k = 1; k < v; k++)
      if (l[(int64_t)i * v + k] > l[(int64_t)i * v + best]) best = k;
    next[i] = best;
  }
  loom_tensor_free(logits);
  return LOOM_STATUS_OK;
}

loom_status loom_trainer_generate(loom_trainer *t, const char *prompt, int32_t n, char *out,
                                  size_t cap) {
  if (!t || !prompt || !out || cap == 0 || n < 0)
    return loom_error(t ? t->ctx : NULL, LOOM_STATUS_INVALID_ARGUMENT, "generate: bad argument");
  LOOM_TRY(loom_trainer_sync(t));
  size_t len = strlen(prompt);
  if (len == 0 || len >= cap)
    return loom_error(t->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "generate: the prompt must be non-empty and fit the output");
  int32_t tl = t->cfg.model.context;
  LOOM_TRY(infer_session(t, 1, 1, tl));
  memcpy(out, prompt, len + 1);
  int64_t one[1] = {1}, shape[2] = {1, tl};
  loom_tensor *tokens = NULL, *rows = NULL;
  loom_status s = loom_tensor_new(t->ctx, LOOM_DTYPE_I64, 2, shape, &tokens);
  if (!s) s = loom_tensor_new(t->ctx, LOOM_DTYPE_I64, 1, one, &rows);
  for (int32_t k = 0; !s && k < n && len + 1 < cap; k++) {
    /* the last `context` bytes at most */
    size_t w = LOOM_MIN(len, (size_t)tl), from = len - w;
    int64_t *tok = loom_tensor_data(tokens);
    for (int32_t i = 0; i < tl; i++)
      tok[i] = (size_t)i < w ? (unsigned char)out[from + (size_t)i] : 0;
    *(int64_t *)loom_tensor_data(rows) = (int64_t)w - 1;
    int32_t next = 0;
    s = infer_argmax(t, 1, tokens, rows, &next);
    if (!s) {
      /* NUL would end the C string early: show it as a space */
      out[len++] = next ? (char)next : ' ';
      out[len] = '\0';
    }
  }
  loom_tensor_free(tokens);
  loom_tensor_free(rows);
  return s;
}

const loom_corpus *loom_trainer_corpus(const loom_trainer *t) { return t ? t->corpus : NULL; }

loom_status loom_trainer_heldout_answers(loom_trainer *t, loom_heldout_answer *out) {
  if (!t || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  LOOM_TRY(loom_trainer_sync(t));
  const loom_corpus *c = t->corpus;
  int32_t b = c->n_heldout, tl = LOOM_MIN(EVAL_T, t->cfg.model.context);
  LOOM_TRY(infer_session(t, 0, b, tl));
  int64_t shape[2] = {b, tl}, bs[1] = {b};
  loom_tensor *tokens = NULL, *rows = NULL;
  int32_t *len = loom_calloc(t->ctx, (size_t)b, sizeof *len);
  int32_t *next = loom_calloc(t->ctx, (size_t)b, sizeof *next);
  int32_t *gl = loom_calloc(t->ctx, (size_t)b, sizeof *gl);
  uint8_t *state = loom_calloc(t->ctx, (size_t)b, 1); /* 0 running, 1 done, 2 failed */
  loom_status s = len && next && gl && state ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!s) s = loom_tensor_new(t->ctx, LOOM_DTYPE_I64, 2, shape, &tokens);
  if (!s) s = loom_tensor_new(t->ctx, LOOM_DTYPE_I64, 1, bs, &rows);
  int64_t *tok = s ? NULL : loom_tensor_data(tokens);
  memset(out, 0, (size_t)b * sizeof *out);
  /* each prompt starts a line, as in the corpus: "\n47+38=" */
  for (int32_t i = 0; !s && i < b; i++) {
    const char *p = c->heldout[i].prompt;
    tok[(int64_t)i * tl] = '\n';
    len[i] = 1;
    for (; *p && len[i] < tl; p++)
      tok[(int64_t)i * tl + len[i]++] = (unsigned char)*p;
    if (*p) state[i] = 2;
  }
  /* an answer has LOOM_CORPUS_ANSWER_DIGITS digits and its newline */
  for (int32_t step = 0; !s && step < LOOM_CORPUS_ANSWER_DIGITS + 1; step++) {
    bool any = false;
    for (int32_t i = 0; i < b; i++) {
      ((int64_t *)loom_tensor_data(rows))[i] = (int64_t)i * tl + len[i] - 1;
      any |= state[i] == 0;
    }
    if (!any) break;
    s = infer_argmax(t, 0, tokens, rows, next);
    for (int32_t i = 0; !s && i < b; i++) {
      if (state[i]) continue;
      if (next[i] == '\n') {
        state[i] = 1;
        continue;
      }
      if (len[i] >= tl || gl[i] >= 7) {
        state[i] = 2;
        continue;
      }
      out[i].written[gl[i]++] = next[i] ? (char)next[i] : ' ';
      tok[(int64_t)i * tl + len[i]++] = next[i];
    }
  }
  for (int32_t i = 0; !s && i < b; i++) {
    out[i].ended = state[i] == 1;
    out[i].correct = out[i].ended && strcmp(out[i].written, c->heldout[i].answer) == 0;
  }
  loom_tensor_free(tokens);
  loom_tensor_free(rows);
  free(len);
  free(next);
  free(gl);
  free(state);
  return s;
}

loom_status loom_trainer_accuracy(loom_trainer *t, int32_t *correct, int32_t *total) {
  if (!t || !correct || !total) return LOOM_STATUS_INVALID_ARGUMENT;
  int32_t b = t->corpus->n_heldout;
  loom_heldout_answer *a = loom_calloc(t->ctx, (size_t)LOOM_MAX(b, 1), sizeof *a);
  if (!a) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status s = loom_trainer_heldout_answers(t, a);
  int32_t ok = 0;
  for (int32_t i = 0; !s && i < b; i++)
    ok += a[i].correct;
  free(a);
  if (s) return s;
  *correct = ok;
  *total = b;
  return LOOM_STATUS_OK;
}

/* ---- parallel ------------------------------------------------------------ */

/* What every rank must agree on: the configuration that shapes the graph
 * and the state, the plan, and what the lowering made of it. */
static void setup_digest(const loom_trainer *t, const char *plan, uint8_t out[32]) {
  const loom_train_config *c = &t->cfg;
  loom_sha256_state h;
  loom_sha256_init(&h);
  int64_t fields[] = {c->model.vocab, c->model.n_layer, c->model.d_model, c->model.n_head,
                      c->model.context, c->model.d_ff, c->batch, c->steps, (int64_t)c->seed,
                      c->warmup, t->done, t->program->n_comms, t->program->global->n_nodes,
                      t->program->n_devices};
  double reals[] = {c->model.dropout, c->lr, c->min_lr_frac, c->beta1, c->beta2, c->eps,
                    c->weight_decay};
  loom_sha256_update(&h, fields, sizeof fields);
  loom_sha256_update(&h, reals, sizeof reals);
  loom_sha256_update(&h, plan, strlen(plan));
  loom_sha256_final(&h, out);
}

static loom_status check_ranks_agree(loom_trainer *t, const char *plan) {
  loom_comm *c = t->comm;
  uint8_t mine[32];
  setup_digest(t, plan, mine);
  uint8_t *all = loom_malloc(t->ctx, (size_t)c->size * 32);
  if (!all) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status s = loom_comm_all_gather(c, t->ctx, mine, all, 32, NULL, LOOM_DTYPE_U8);
  for (int32_t r = 0; !s && r < c->size; r++)
    if (memcmp(all + 32 * r, all, 32) != 0)
      s = loom_error(t->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                     "parallel train: rank %d was started with another plan, model or schedule "
                     "than rank 0 (their setups differ); start every rank with the same flags",
                     r);
  free(all);
  return s;
}

void loom_trainer_set_bucket_bytes(loom_trainer *t, int64_t bytes) {
  if (t) t->bucket_bytes = bytes;
}

loom_status loom_trainer_attach_plan(loom_trainer *t, struct loom_comm *comm, const char *plan) {
  if (!t || !comm || !plan)
    return loom_error(t ? t->ctx : NULL, LOOM_STATUS_INVALID_ARGUMENT, "train: NULL argument");
  loom_ctx *ctx = t->ctx;
  if (t->runner) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "train: a plan is attached");
  t->comm = comm;
  /* Attention dropout is drawn inside the attention kernels under a plan:
   * a bitmask made beside a GEMM covers the whole tensor (a piece cannot
   * take it), and the auto placement measures this machine, so ranks could
   * choose differently. The masks are the same numbers either way. For
   * the same reason auto attention is flash here: every rank's graph must
   * have the same ops. */
  const loom_attention_mode attention =
      t->cfg.attention == LOOM_ATTENTION_AUTO ? LOOM_ATTENTION_FLASH : t->cfg.attention;
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = t->cfg.backend, .fusion = t->fusion,
                                                 .attention = attention,
                                                 .rng = LOOM_RNG_FUSED);
  loom_gpt_optim o = {t->cfg.beta1, t->cfg.beta2, t->cfg.eps, t->cfg.weight_decay, t->cfg.seed, &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  loom_status s = loom_gpt_build_train(ctx, &t->cfg.model, t->cfg.batch, t->cfg.model.context, &o,
                                       &g, &per_step);
  if (!s) {
    loom_graph_free(t->train_g);
    t->train_g = g;
    t->rng_per_step = per_step;
  }
  if (!s) s = loom_plan_open(ctx, t->train_g, plan, comm->size, &t->plan);
  /* the communication choices use this machine's links, as rank 0's
   * profile keeps them (measured on the first run): every rank, and every
   * run on this machine, lowers with the same model */
  loom_plan_lower_options lo = {.comm = loom_comm_model_default(), .bucket_bytes = t->bucket_bytes};
  if (!s) s = loom_comm_model_get(comm, ctx, false, &lo.comm);
  if (!s) s = loom_plan_lower(t->plan, &lo, &t->program);
  if (!s) s = check_ranks_agree(t, plan);
  if (!s) s = loom_plan_runner_new(ctx, t->program, comm, &so, &t->runner);
  if (!s) s = loom_plan_runner_load(t->runner, t->in);
  /* Ranks compile their programs at their own pace (minutes on a busy
   * machine): meet once with a setup-sized bound before the first step, so
   * the step's communication keeps its own, shorter one. */
  double bound = comm->timeout_s;
  if (!s) s = loom_comm_set_timeout(comm, ctx, bound > 600.0 ? bound : 600.0);
  if (!s) s = loom_comm_barrier(comm, ctx);
  if (!s) s = loom_comm_set_timeout(comm, ctx, bound);
  if (s) {
    loom_error_prefix(ctx, "plan %s on %d devices", plan, comm->size);
    return s;
  }
  /* the single-device session is not needed any more */
  loom_session_free(t->train_s);
  t->train_s = NULL;
  t->state_synced = true;
  return LOOM_STATUS_OK;
}

loom_status loom_trainer_sync(loom_trainer *t) {
  if (!t || !t->runner || t->state_synced) return LOOM_STATUS_OK;
  for (int32_t i = 0; i < 3 * t->n; i++)
    LOOM_TRY(loom_plan_runner_gather_input(t->runner, LOOM_GPT_IN_PARAMS + i, t->state[i]));
  t->state_synced = true;
  return LOOM_STATUS_OK;
}

int32_t loom_trainer_devices(const loom_trainer *t) {
  return t && t->comm ? t->comm->size : 1;
}

void loom_trainer_set_comm_overlap(loom_trainer *t, bool on) {
  if (t && t->runner) loom_plan_runner_set_comm_overlap(t->runner, on);
}

bool loom_trainer_comm_overlap(const loom_trainer *t) {
  return t && t->runner && loom_plan_runner_comm_overlap(t->runner);
}

/*
 * The training loop of `loom train`: a GPT (model/gpt.h) on the arithmetic
 * corpus (train/corpus.h), one compiled training-step session, AdamW with
 * linear warmup and cosine decay. Everything a step does is fixed by the
 * seed and the step number (batch windows, dropout counters, learning
 * rate), so a run is reproducible bit for bit and a resumed run
 * (train/checkpoint.h) continues exactly as the uninterrupted one.
 */
#ifndef LOOM_TRAIN_TRAINER_H
#define LOOM_TRAIN_TRAINER_H

#include "model/gpt.h"
#include "perf/rng_model.h"
#include "train/corpus.h"

typedef struct loom_train_config {
  loom_gpt_config model;
  int32_t batch;
  int64_t steps;      /* the schedule's length */
  double lr;          /* peak learning rate */
  int64_t warmup;     /* linear warmup steps; < 0: steps / 10, at most 100 */
  double min_lr_frac; /* the cosine decays to lr * min_lr_frac */
  double beta1, beta2, eps, weight_decay;
  uint64_t seed;   /* corpus, init, batches, dropout */
  int32_t threads; /* 0: all cores */
  char backend[16]; /* a registered backend name (runtime/backend.h) */
  /* Attention: flash (fused kernels, dropout RNG placed per `rng`) or
   * decomposed (primitives, differentiated as such). */
  loom_attention_mode attention;
  loom_rng_placement rng;
  int32_t corpus_lines, heldout;
} loom_train_config;

/* The defaults of `loom train`. */
void loom_train_config_default(loom_train_config *c);
/* Checks every field. */
loom_status loom_train_config_check(loom_ctx *ctx, const loom_train_config *c);
/* Fails, with the numbers, when c's parameters and AdamW moments (3 x 4
 * bytes a parameter) need more than limit_bytes (0: no limit). Creating a
 * trainer checks this against the physical memory before allocating any of
 * it; the step's arena comes on top and is checked when it is allocated. */
loom_status loom_train_check_memory(loom_ctx *ctx, const loom_train_config *c, int64_t limit_bytes);
/* The learning rate of step index k (0-based). */
double loom_train_lr_at(const loom_train_config *c, int64_t k);

typedef struct loom_trainer loom_trainer;

/* Builds the corpus, the graphs and the session, and initialises the
 * parameters (normal(0, 0.02), LayerNorm gains 1, biases 0) from the seed. */
loom_status loom_trainer_new(loom_ctx *ctx, const loom_train_config *c, loom_trainer **out);
/* As loom_trainer_new with a fusion mode for the cpu backend. */
loom_status loom_trainer_new_fused(loom_ctx *ctx, const loom_train_config *c,
                                   loom_fusion_mode fusion, loom_trainer **out);
/* The training-step session (for its stats: kernels, peak bytes). */
const loom_session *loom_trainer_session(const loom_trainer *t);
/* Where the step's attention dropout draws its random numbers: how many
 * flash attention ops take them inside the kernel (fused), from a mask
 * made on a worker beside a GEMM (overlap) or just before (sequential). */
typedef struct loom_trainer_rng_counts {
  int32_t flash, fused, overlap, sequential;
} loom_trainer_rng_counts;
loom_trainer_rng_counts loom_trainer_rng_placements(const loom_trainer *t);
void loom_trainer_free(loom_trainer *t);

/*
 * Parallel training (docs/PARALLEL.md): from here on, steps run this
 * rank's program of `plan` (a plan file, else a built-in spec) over the
 * communicator (one rank per device; every rank calls every function
 * below in the same order). The state is loaded from the trainer's tensors
 * and lives as this rank's pieces; loom_trainer_sync gathers it back into
 * them (collective), which generate, accuracy and checkpoints need first.
 * Every rank checks that all were started with the same plan and model.
 */
struct loom_comm;
/* Gradient buckets of the next attach (loom_plan_lower_options.bucket_bytes:
 * 0, the default, one all-reduce per gradient); every rank the same. */
void loom_trainer_set_bucket_bytes(loom_trainer *t, int64_t bytes);
loom_status loom_trainer_attach_plan(loom_trainer *t, struct loom_comm *comm, const char *plan);
/* Gathers the state into the trainer's whole tensors (no-op on one device). */
loom_status loom_trainer_sync(loom_trainer *t);
/* The plan's device count (1 when none is attached). */
int32_t loom_trainer_devices(const loom_trainer *t);
/* Comm ops overlap computation (on, the default when the communicator
 * allows it) or block the step (off): loom_plan_runner_set_comm_overlap.
 * No effect without an attached plan; the getter says what steps do. */
void loom_trainer_set_comm_overlap(loom_trainer *t, bool on);
bool loom_trainer_comm_overlap(const loom_trainer *t);

/* Runs one training step; *loss is its loss (before the update). */
loom_status loom_trainer_step(loom_trainer *t, float *loss);
/* Steps done so far. */
int64_t loom_trainer_steps_done(const loom_trainer *t);
const loom_train_config *loom_trainer_config(const loom_trainer *t);
loom_ctx *loom_trainer_ctx(const loom_trainer *t);
int64_t loom_trainer_param_count(const loom_trainer *t);

/* The training state, for checkpoints: parameter i's spec and its tensors
 * (parameter, AdamW m and v), i in [0, n). */
int32_t loom_trainer_num_params(const loom_trainer *t);
const loom_gpt_param *loom_trainer_param(const loom_trainer *t, int32_t i);
loom_tensor *loom_trainer_tensor(const loom_trainer *t, int32_t kind, int32_t i);
/* Sets the number of steps done (restoring a checkpoint). */
loom_status loom_trainer_set_steps_done(loom_trainer *t, int64_t steps);

/* Greedy decoding: appends n bytes to prompt; out gets prompt + n bytes
 * (NUL-terminated, cap bytes at most). */
loom_status loom_trainer_generate(loom_trainer *t, const char *prompt, int32_t n, char *out,
                                  size_t cap);
/* Exact-match accuracy of greedy answers on the held-out problems;
 * *correct of *total. */
loom_status loom_trainer_accuracy(loom_trainer *t, int32_t *correct, int32_t *total);

/* The corpus the trainer made (its held-out problems, for reports). */
const loom_corpus *loom_trainer_corpus(const loom_trainer *t);
/* What the model wrote after a held-out prompt, greedily, up to its
 * newline: the bytes as written (at most 7) and whether it matched. */
typedef struct loom_heldout_answer {
  char written[8];
  bool ended;   /* the model ended the line within 7 bytes */
  bool correct; /* ended, and written is the problem's answer */
} loom_heldout_answer;
/* Fills out[i] for each held-out problem i (loom_trainer_corpus(t)->n_heldout). */
loom_status loom_trainer_heldout_answers(loom_trainer *t, loom_heldout_answer *out);

#endif

/*
 * The main job's training step as a workload: the graph `loom train` runs
 * each step (its default GPT, batch and context: forward, cross-entropy,
 * backward, AdamW on every parameter), built by the same function the
 * trainer uses, so the peers (bench/peers) can be measured on exactly the
 * step a user runs. Tokens per second = batch x context / the step's time.
 */
#include "workloads.h"

#include "core/ctx.h"
#include "train/trainer.h"

#include <stdio.h>
#include <string.h>

/* ".g" ends the names of the norms' gains (model/gpt.c) */
static bool is_gain(const char *name) {
  size_t n = strlen(name);
  return n >= 2 && strcmp(name + n - 2, ".g") == 0;
}

static loom_bench_fill fill_of(const loom_graph *g, int32_t k) {
  const loom_value_info *v = &g->values[g->inputs[k]];
  switch (k) {
  case LOOM_GPT_IN_TOKENS:
  case LOOM_GPT_IN_TARGETS:
  case LOOM_GPT_IN_RNG_BASE: return LOOM_BENCH_FILL_LABELS;
  case LOOM_GPT_IN_STEP: return LOOM_BENCH_FILL_STEP;
  /* the state is updated in place run after run (bench/run.c): a small
   * step keeps it near where it starts, as training does */
  case LOOM_GPT_IN_LR: return LOOM_BENCH_FILL_SMALL;
  default: break;
  }
  if (strncmp(v->name, "adam.v.", 7) == 0) return LOOM_BENCH_FILL_POSITIVE;
  if (strncmp(v->name, "adam.m.", 7) == 0) return LOOM_BENCH_FILL_SMALL;
  return is_gain(v->name) ? LOOM_BENCH_FILL_GAIN : LOOM_BENCH_FILL_SMALL;
}

loom_status loom_bench_build_train_step(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                        loom_bench_graph *b) {
  (void)self;
  loom_train_config c;
  loom_train_config_default(&c);
  if (small) c.batch = 8;
  loom_session_options so =
      LOOM_SESSION_OPTIONS(.backend = "cpu", .rng = c.rng, .attention = c.attention);
  loom_gpt_optim opt = {.beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps,
                        .weight_decay = c.weight_decay, .seed = c.seed, .session = &so};
  int64_t per_step = 0;
  LOOM_TRY(loom_gpt_build_train(ctx, &c.model, c.batch, c.model.context, &opt, &b->g, &per_step));
  loom_graph *g = b->g;
  for (int32_t k = 0; k < g->n_inputs; k++) {
    if (!loom_grow(ctx, (void **)&b->fill, &b->cap_fill, b->n_fill + 1, sizeof *b->fill))
      return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "bench: out of memory");
    b->fill[b->n_fill++] = fill_of(g, k);
  }
  b->classes = c.model.vocab;
  snprintf(b->shape, sizeof b->shape, "b%d t%d d%d L%d: %d tokens", c.batch, c.model.context,
           c.model.d_model, c.model.n_layer, c.batch * c.model.context);
  b->min_bytes = loom_bench_io_bytes(g);
  return loom_bench_count_flops(b);
}

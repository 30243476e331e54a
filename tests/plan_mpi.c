/*
 * Equal to one device, under mpirun: every rank trains the GPT of `loom
 * train` (small, dropout on) with the plan named on the command line for
 * K steps; rank 0 also trains it alone. The loss of every step and every
 * weight and AdamW moment after the last must match within the tolerance
 * of docs/PARALLEL.md ("Equal to one device").
 *
 *   mpirun -np N plan_mpi PLAN [--llama] [--skip]
 * --llama: the Llama options (RMSNorm, SwiGLU, RoPE, 2 K/V heads for 4
 * query heads, no biases, an untied head) on the same shapes.
 * Exit: 0 equal, 1 not, 77 skipped (no MPI).
 */
#include "common.h"

#include "comm/comm.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { K = 3 };
/* a weight's error in units of its update's rms, and the loss's relative error */
#define TOL_UPDATE 5e-3
#define TOL_LOSS 1e-5

static loom_train_config config(bool llama) {
  loom_train_config c;
  loom_train_config_default(&c);
  c.model.n_layer = 4; /* pp4 and interleaved 1F1B (two chunks per stage) need 4 */
  c.model.d_model = 32;
  c.model.n_head = 4;
  c.model.context = 16;
  c.model.d_ff = 128;
  c.model.dropout = 0.1;
  c.batch = 8;
  c.steps = 100;
  c.threads = 1;
  c.corpus_lines = 500;
  c.heldout = 10;
  if (llama) {
    loom_gpt_config_set_arch(&c.model, LOOM_GPT_ARCH_LLAMA);
    c.model.n_kv_head = 2;
  }
  return c;
}

static double update_error(const loom_tensor *want, const loom_tensor *got, const float *before) {
  const float *a = loom_tensor_data(want), *b = loom_tensor_data(got);
  int64_t n = loom_tensor_numel(want);
  double sq = 0, worst = 0;
  for (int64_t e = 0; e < n; e++) sq += ((double)a[e] - before[e]) * ((double)a[e] - before[e]);
  double scale = fmax(sqrt(sq / (double)(n ? n : 1)), 1e-30);
  for (int64_t e = 0; e < n; e++) {
    double d = fabs((double)a[e] - b[e]) / scale;
    if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: plan_mpi PLAN [--llama] [--skip]\n");
    return 2;
  }
  bool llama = false, skip = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--llama")) llama = true;
    else if (!strcmp(argv[i], "--skip")) skip = true;
    else {
      fprintf(stderr, "plan_mpi: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (skip || !loom_comm_mpi_available()) {
    printf("plan_mpi: skipped (no MPI)\n");
    return 77;
  }
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_comm *comm = NULL;
  CHECK_OK(ctx, loom_comm_mpi_new(ctx, &comm));
  if (!comm) return 1;
  loom_train_config c = config(llama);
  loom_trainer *t = NULL, *one = NULL;
  CHECK_OK(ctx, loom_trainer_new(ctx, &c, &t));
  /* the initial state, to measure updates against */
  int32_t n = t ? loom_trainer_num_params(t) : 0;
  float **before = calloc((size_t)(3 * n + 1), sizeof *before);
  for (int32_t k = 0; k < 3 * n; k++) {
    const loom_tensor *x = loom_trainer_tensor(t, k / n, k % n);
    before[k] = malloc((size_t)loom_tensor_numel(x) * sizeof(float));
    memcpy(before[k], loom_tensor_data(x), (size_t)loom_tensor_numel(x) * sizeof(float));
  }
  if (t) CHECK_OK(ctx, loom_trainer_attach_plan(t, comm, argv[1]));
  float loss[K], loss1[K];
  for (int32_t k = 0; k < K && loom_test_failures == 0; k++) CHECK_OK(ctx, loom_trainer_step(t, &loss[k]));
  if (t && loom_test_failures == 0) CHECK_OK(ctx, loom_trainer_sync(t));
  /* the single-device run after the parallel one: no rank waits for it */
  if (comm->rank == 0 && loom_test_failures == 0) CHECK_OK(ctx, loom_trainer_new(ctx, &c, &one));
  for (int32_t k = 0; one && k < K && loom_test_failures == 0; k++)
    CHECK_OK(ctx, loom_trainer_step(one, &loss1[k]));
  if (one && loom_test_failures == 0) {
    double worst = 0, worst_loss = 0;
    for (int32_t k = 0; k < K; k++) {
      double e = fabs((double)loss[k] - loss1[k]) / fabs((double)loss1[k]);
      worst_loss = fmax(worst_loss, e);
      CHECK(e <= TOL_LOSS);
    }
    for (int32_t k = 0; k < 3 * n; k++) {
      double e = update_error(loom_trainer_tensor(one, k / n, k % n), loom_trainer_tensor(t, k / n, k % n),
                              before[k]);
      if (!(e <= TOL_UPDATE))
        fprintf(stderr, "%s: %s (kind %d) off by %g of its update\n", argv[1],
                loom_trainer_param(t, k % n)->name, k / n, e);
      CHECK(e <= TOL_UPDATE);
      worst = fmax(worst, e);
    }
    printf("%s%s on %d ranks, %d steps (comm overlap %s): losses within %.1e, state within %.1e "
           "of an update's rms\n",
           argv[1], llama ? " (llama)" : "", comm->size, K, loom_trainer_comm_overlap(t) ? "on" : "off", worst_loss, worst);
  }
  for (int32_t k = 0; k < 3 * n; k++) free(before[k]);
  free(before);
  int failed = loom_test_failures != 0;
  loom_trainer_free(one);
  loom_trainer_free(t);
  if (failed) loom_comm_abort(comm, "plan_mpi: a check failed");
  loom_comm_free(comm);
  loom_ctx_free(ctx);
  return loom_test_finish("plan_mpi");
}

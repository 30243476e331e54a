/* The in-process communicator: every collective on 1-4 threads against
 * plain C (comm_checks.c), bitwise-deterministic reductions, bounded
 * waits that name the peer, and aborts that wake every rank. */
#include "comm_checks.h"
#include "common.h"

#include "core/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct rank_job {
  loom_comm *c;
  loom_ctx *ctx;
  int failures, checks;
  loom_status status; /* of the timeout / abort jobs */
  double seconds;
  char message[512];
} rank_job;

static void *run_checks(void *arg) {
  rank_job *j = arg;
  j->failures = comm_check_all(j->c, j->ctx, &j->checks);
  return NULL;
}

/* Runs fn on every rank of a new in-process world of n threads. */
static void run_world(int32_t n, void *(*fn)(void *), double timeout_s, rank_job *jobs) {
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  loom_comm *comms[8] = {0};
  CHECK_OK(ctx, loom_comm_inproc_new(ctx, n, comms));
  pthread_t th[8];
  for (int32_t r = 0; r < n; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r].c = comms[r];
    loom_ctx_new(&jobs[r].ctx);
    if (timeout_s > 0) CHECK_OK(ctx, loom_comm_set_timeout(comms[r], ctx, timeout_s));
    pthread_create(&th[r], NULL, fn, &jobs[r]);
  }
  for (int32_t r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    loom_test_failures += jobs[r].failures;
    loom_test_checks += jobs[r].checks;
    loom_ctx_free(jobs[r].ctx);
    loom_comm_free(comms[r]);
  }
  loom_ctx_free(ctx);
}

/* Rank 1 waits for a message rank 0 never sends; rank 0 just returns. */
static void *never_sent(void *arg) {
  rank_job *j = arg;
  if (j->c->rank == 1) {
    double t0 = loom_now_s();
    float x[4];
    j->status = loom_comm_recv(j->c, j->ctx, x, 4, LOOM_DTYPE_F32, 0, 5);
    j->seconds = loom_now_s() - t0;
    snprintf(j->message, sizeof j->message, "%s", loom_ctx_error(j->ctx));
  }
  return NULL;
}

/* Rank 0 calls an all-reduce that rank 1 never joins. */
static void *half_collective(void *arg) {
  rank_job *j = arg;
  if (j->c->rank == 0) {
    double t0 = loom_now_s();
    double x[3] = {1, 2, 3};
    j->status = loom_comm_all_reduce(j->c, j->ctx, x, 3, LOOM_DTYPE_F64, LOOM_COMM_SUM);
    j->seconds = loom_now_s() - t0;
    snprintf(j->message, sizeof j->message, "%s", loom_ctx_error(j->ctx));
  }
  return NULL;
}

/* Ranks 1..n-1 wait in a barrier; rank 0 aborts instead of joining. */
static void *abort_world(void *arg) {
  rank_job *j = arg;
  double t0 = loom_now_s();
  if (j->c->rank == 0) {
    loom_comm_abort(j->c, "bad plan");
    j->status = LOOM_STATUS_OK;
  } else {
    j->status = loom_comm_barrier(j->c, j->ctx);
    snprintf(j->message, sizeof j->message, "%s", loom_ctx_error(j->ctx));
  }
  j->seconds = loom_now_s() - t0;
  return NULL;
}

int main(void) {
  rank_job jobs[8];
  for (int32_t n = 1; n <= 4; n++) run_world(n, run_checks, 0, jobs);

  run_world(2, never_sent, 0.2, jobs);
  CHECK(jobs[1].status == LOOM_STATUS_IO);
  CHECK(jobs[1].seconds >= 0.19 && jobs[1].seconds < 2.0);
  CHECK(strstr(jobs[1].message, "rank 1") && strstr(jobs[1].message, "recv from rank 0") &&
        strstr(jobs[1].message, "timed out") && strstr(jobs[1].message, "LOOM_COMM_TIMEOUT"));
  printf("timeout: %.2f s: %s\n", jobs[1].seconds, jobs[1].message);

  run_world(2, half_collective, 0.2, jobs);
  CHECK(jobs[0].status == LOOM_STATUS_IO);
  CHECK(jobs[0].seconds < 2.0);
  CHECK(strstr(jobs[0].message, "all_reduce") && strstr(jobs[0].message, "rank 1"));
  printf("collective timeout: %.2f s: %s\n", jobs[0].seconds, jobs[0].message);

  run_world(3, abort_world, 30, jobs);
  for (int r = 1; r < 3; r++) {
    CHECK(jobs[r].status == LOOM_STATUS_IO);
    CHECK(jobs[r].seconds < 5.0);
    CHECK(strstr(jobs[r].message, "bad plan") != NULL);
  }
  printf("abort: %s\n", jobs[1].message);

  /* The timeout option and its checks. */
  setenv("LOOM_COMM_TIMEOUT", "2.5", 1);
  CHECK(loom_comm_timeout_from_env() == 2.5);
  setenv("LOOM_COMM_TIMEOUT", "soon", 1);
  CHECK(loom_comm_timeout_from_env() == LOOM_COMM_TIMEOUT_DEFAULT_S);
  unsetenv("LOOM_COMM_TIMEOUT");
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  loom_comm *one[1] = {0};
  CHECK_OK(ctx, loom_comm_inproc_new(ctx, 1, one));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_comm_set_timeout(one[0], ctx, 0));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_comm_inproc_new(ctx, 0, one + 0));
  float f[2] = {1, 2};
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               loom_comm_all_reduce(one[0], ctx, f, 2, (loom_dtype)99, LOOM_COMM_SUM));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_comm_broadcast(one[0], ctx, f, -1, LOOM_DTYPE_F32, 0));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_comm_broadcast(one[0], ctx, f, 2, LOOM_DTYPE_F32, 1));
  loom_comm_free(one[0]);
  /* Without MPI the MPI communicator says so. */
  if (!loom_comm_mpi_available()) {
    loom_comm *m = NULL;
    CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_comm_mpi_new(ctx, &m));
    CHECK(strstr(loom_ctx_error(ctx), "without MPI") != NULL);
  }
  loom_ctx_free(ctx);
  return loom_test_finish("test_comm");
}

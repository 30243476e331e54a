/*
 * The stream (runtime/stream.h): tasks run in submission order on one
 * thread beside the caller; a wait covers every task up to its ticket;
 * a failed task's message comes back at its wait (and at every later
 * one), and the tasks after it are skipped; tasks are traced on the
 * stream's lane.
 */
#include "common.h"

#include "runtime/stream.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 200 };

typedef struct log {
  int32_t order[N];
  int32_t n; /* written by the stream's thread only */
} log_t;

typedef struct step {
  log_t *log;
  int32_t id;
  bool fail;
} step;

static loom_status record(void *arg, loom_ctx *ctx) {
  step *s = arg;
  if (s->id % 7 == 0) nanosleep(&(struct timespec){0, 200000}, NULL); /* let the queue fill */
  if (s->fail) return loom_error(ctx, LOOM_STATUS_IO, "task %d could not send", s->id);
  s->log->order[s->log->n++] = s->id;
  return LOOM_STATUS_OK;
}

static void test_order(loom_ctx *ctx) {
  loom_stream *s = NULL;
  CHECK_OK(ctx, loom_stream_new(ctx, 200, "test stream", &s));
  if (!s) return;
  static log_t lg;
  static step steps[N];
  int64_t tickets[N];
  for (int32_t round = 0; round < 2; round++) {
    lg.n = 0;
    for (int32_t i = 0; i < N; i++) {
      steps[i] = (step){&lg, i, false};
      loom_stream_task t = {record, &steps[i], "record", NULL};
      CHECK_OK(ctx, loom_stream_submit(s, ctx, &t, &tickets[i]));
      if (i > 0) CHECK(tickets[i] == tickets[i - 1] + 1);
    }
    /* waiting for the middle ticket means everything before it ran */
    CHECK_OK(ctx, loom_stream_wait(s, ctx, tickets[N / 2]));
    CHECK(lg.n >= N / 2 + 1);
    bool ordered = true;
    for (int32_t i = 0; i <= N / 2; i++)
      ordered &= lg.order[i] == i;
    CHECK(ordered);
    CHECK_OK(ctx, loom_stream_sync(s, ctx));
    CHECK(lg.n == N);
    for (int32_t i = 0; i < N; i++)
      ordered &= lg.order[i] == i;
    CHECK(ordered);
  }
  CHECK(loom_stream_tasks_run(s) == 2 * N);
  CHECK_OK(ctx, loom_stream_wait(s, ctx, 0)); /* nothing to wait for */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_stream_wait(s, ctx, tickets[N - 1] + 5));
  loom_stream_free(s);
  printf("order: %d tasks in two rounds ran in submission order\n", 2 * N);
}

static void test_error(loom_ctx *ctx) {
  loom_stream *s = NULL;
  CHECK_OK(ctx, loom_stream_new(ctx, 200, "test stream", &s));
  if (!s) return;
  static log_t lg;
  step steps[6];
  int64_t tickets[6];
  for (int32_t i = 0; i < 6; i++) {
    steps[i] = (step){&lg, i + 1, i == 2};
    loom_stream_task t = {record, &steps[i], i == 2 ? "all_reduce" : "record", NULL};
    CHECK_OK(ctx, loom_stream_submit(s, ctx, &t, &tickets[i]));
  }
  CHECK_OK(ctx, loom_stream_wait(s, ctx, tickets[1])); /* the tasks before the failure are fine */
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_stream_wait(s, ctx, tickets[2]));
  CHECK(strstr(loom_ctx_error(ctx), "all_reduce: task 3 could not send") != NULL);
  printf("error at its wait: %s\n", loom_ctx_error(ctx));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_stream_sync(s, ctx)); /* and at every later one */
  CHECK(lg.n == 2 && loom_stream_tasks_run(s) == 3);           /* the tasks after it were skipped */
  loom_error_clear(ctx);
  loom_stream_free(s);
}

static void test_trace(loom_ctx *ctx) {
  loom_trace *tr = NULL;
  loom_stream *s = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &tr));
  CHECK_OK(ctx, loom_stream_new(ctx, 200, "comm stream", &s));
  if (!tr || !s) {
    loom_stream_free(s);
    loom_trace_free(tr);
    return;
  }
  static log_t lg;
  step steps[3];
  int64_t ticket = 0;
  for (int32_t i = 0; i < 3; i++) {
    steps[i] = (step){&lg, i + 1, false};
    loom_stream_task t = {record, &steps[i], "all_reduce", tr};
    CHECK_OK(ctx, loom_stream_submit(s, ctx, &t, &ticket));
  }
  CHECK_OK(ctx, loom_stream_sync(s, ctx));
  CHECK(loom_trace_count(tr) == 3);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f) {
    CHECK_OK(ctx, loom_trace_write(ctx, tr, f));
    fclose(f);
    CHECK(text && strstr(text, "\"comm stream\"") && strstr(text, "\"all_reduce\""));
    free(text);
  }
  loom_stream_free(s);
  loom_trace_free(tr);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_order(ctx);
  test_error(ctx);
  test_trace(ctx);
  loom_stream_free(NULL);
  loom_ctx_free(ctx);
  return loom_test_finish("test_stream");
}

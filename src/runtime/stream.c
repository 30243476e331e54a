/*
 * The stream (stream.h). One mutex and two condition variables: the
 * thread sleeps on `wake` until a task is queued, and a waiter sleeps on
 * `done` until the count of finished tasks reaches its ticket. The queue
 * is an array of copies; it is emptied (indices back to 0) whenever the
 * thread has taken every queued task, which every wait in a run ensures.
 */
#include "runtime/stream.h"
#include "core/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_stream {
  loom_ctx *ctx; /* the tasks' context, used by the stream's thread only */
  int32_t lane;
  char *name;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the thread: a task queued, or stop */
  pthread_cond_t done; /* waiters: a task finished */
  loom_stream_task *queue;
  int32_t head, n, cap; /* queue[head..n) are still to run */
  int64_t base;         /* the ticket of queue[0] is base + 1 */
  int64_t finished, run;
  bool stop;
  loom_trace *named; /* the trace the lane was last named in */
  /* the first failure */
  int64_t failed; /* its ticket, 0: none */
  loom_status fail_status;
  const char *fail_name;
  char fail_msg[LOOM_ERROR_MAX];
};

static void *stream_main(void *p) {
  loom_stream *s = p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && s->head == s->n)
      pthread_cond_wait(&s->wake, &s->mu);
    if (s->head == s->n) break; /* stopping, nothing queued */
    int64_t ticket = s->base + s->head + 1;
    loom_stream_task t = s->queue[s->head++];
    bool skip = s->failed > 0;
    pthread_mutex_unlock(&s->mu);

    loom_status st = LOOM_STATUS_OK;
    if (!skip) {
      double t0 = loom_trace_now(t.trace);
      loom_error_clear(s->ctx);
      st = t.fn(t.arg, s->ctx);
      if (t.trace) {
        loom_trace_arg a = {"ticket", ticket};
        /* a dropped event is reported by loom_trace_write */
        (void)loom_trace_event_args(t.trace, s->lane, t.name ? t.name : "task", "comm", t0,
                                    loom_trace_now(t.trace), &a, 1);
      }
    }

    pthread_mutex_lock(&s->mu);
    if (!skip) s->run++;
    if (st && !s->failed) {
      s->failed = ticket;
      s->fail_status = st;
      s->fail_name = t.name;
      snprintf(s->fail_msg, sizeof s->fail_msg, "%s", loom_ctx_error(s->ctx));
    }
    s->finished = ticket;
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

loom_status loom_stream_new(loom_ctx *ctx, int32_t lane, const char *name, loom_stream **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "stream_new: out is NULL");
  *out = NULL;
  loom_stream *s = loom_calloc(ctx, 1, sizeof *s);
  if (!s) return LOOM_STATUS_OUT_OF_MEMORY;
  s->lane = lane;
  s->name = loom_strdup(ctx, name ? name : "stream");
  if (!s->name || loom_ctx_new(&s->ctx)) {
    free(s->name);
    free(s);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int rc = pthread_mutex_init(&s->mu, NULL);
  if (rc == 0 && (rc = pthread_cond_init(&s->wake, NULL)) != 0) pthread_mutex_destroy(&s->mu);
  if (rc == 0 && (rc = pthread_cond_init(&s->done, NULL)) != 0) {
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
  }
  if (rc == 0 && (rc = pthread_create(&s->th, NULL, stream_main, s)) != 0) {
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
  }
  if (rc != 0) {
    loom_ctx_free(s->ctx);
    free(s->name);
    free(s);
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "stream_new: cannot start the stream's thread: %s",
                      strerror(rc));
  }
  *out = s;
  return LOOM_STATUS_OK;
}

void loom_stream_free(loom_stream *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL); /* it runs what is queued first */
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->mu);
  loom_ctx_free(s->ctx);
  free(s->queue);
  free(s->name);
  free(s);
}

loom_status loom_stream_submit(loom_stream *s, loom_ctx *ctx, const loom_stream_task *task,
                               int64_t *ticket) {
  if (!s || !task || !task->fn || !ticket)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "stream_submit: NULL argument");
  if (task->trace && task->trace != s->named) {
    LOOM_TRY(loom_trace_name_lane(ctx, task->trace, s->lane, s->name));
    s->named = task->trace; /* only the owner's thread reads or writes it */
  }
  pthread_mutex_lock(&s->mu);
  if (s->head == s->n) { /* the thread took everything: start the array over */
    s->base += s->n;
    s->head = s->n = 0;
  }
  if (!loom_grow(ctx, (void **)&s->queue, &s->cap, s->n + 1, sizeof *s->queue)) {
    pthread_mutex_unlock(&s->mu);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  s->queue[s->n++] = *task;
  *ticket = s->base + s->n;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
  return LOOM_STATUS_OK;
}

loom_status loom_stream_wait(loom_stream *s, loom_ctx *ctx, int64_t ticket) {
  if (!s || ticket <= 0) return LOOM_STATUS_OK;
  pthread_mutex_lock(&s->mu);
  if (ticket > s->base + s->n) {
    pthread_mutex_unlock(&s->mu);
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "stream_wait: ticket %lld was never handed out", (long long)ticket);
  }
  while (s->finished < ticket)
    pthread_cond_wait(&s->done, &s->mu);
  loom_status st = LOOM_STATUS_OK;
  if (s->failed && s->failed <= ticket)
    st = loom_error(ctx, s->fail_status, "%s: %s", s->fail_name ? s->fail_name : "task",
                    s->fail_msg);
  pthread_mutex_unlock(&s->mu);
  return st;
}

loom_status loom_stream_sync(loom_stream *s, loom_ctx *ctx) {
  if (!s) return LOOM_STATUS_OK;
  pthread_mutex_lock(&s->mu);
  int64_t last = s->base + s->n;
  pthread_mutex_unlock(&s->mu);
  return loom_stream_wait(s, ctx, last);
}

int64_t loom_stream_tasks_run(loom_stream *s) {
  if (!s) return 0;
  pthread_mutex_lock(&s->mu);
  int64_t n = s->run;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/*
 * The worker pool (worker.h). One mutex and two condition variables: a
 * task is announced by bumping a generation number (so a thread never runs
 * the same task twice nor misses one to a spurious wake-up), and the last
 * piece to finish wakes the waiter. The mutex hand-offs also order the
 * task's memory: what fn wrote is visible once wait returns.
 */
#include "runtime/worker.h"
#include "core/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker_thread {
  loom_worker *w;
  int32_t index;
  pthread_t th;
} worker_thread;

struct loom_worker {
  loom_ctx *ctx;
  int32_t n;
  worker_thread *threads;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers: a new task or stop */
  pthread_cond_t done; /* waiter: pending reached 0 */
  uint64_t gen;        /* task number, bumped by submit */
  int32_t pending;     /* pieces of the current task still running */
  bool busy;           /* submitted and not yet waited for */
  bool stop;
  loom_worker_fn fn;
  void *arg;
  loom_worker_trace tr;
};

static void *worker_main(void *p) {
  worker_thread *self = p;
  loom_worker *w = self->w;
  uint64_t seen = 0;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->stop && w->gen == seen) pthread_cond_wait(&w->wake, &w->mu);
    if (w->gen == seen) break; /* stopping, nothing new to run */
    seen = w->gen;
    loom_worker_fn fn = w->fn;
    void *arg = w->arg;
    loom_worker_trace tr = w->tr;
    pthread_mutex_unlock(&w->mu);

    double t0 = tr.trace ? loom_now_s() : 0.0;
    fn(arg, self->index, w->n);
    if (tr.trace) {
      loom_trace_arg a[2] = {{"index", self->index}, {"count", w->n}};
      /* a dropped event is reported by loom_trace_write */
      (void)loom_trace_event_args(tr.trace, tr.tid0 + self->index, tr.name ? tr.name : "task",
                                  tr.cat ? tr.cat : "worker", t0, loom_now_s(), a, 2);
    }

    pthread_mutex_lock(&w->mu);
    if (--w->pending == 0) pthread_cond_signal(&w->done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Stops and joins the first n_started threads, then frees w. */
static void teardown(loom_worker *w, int32_t n_started) {
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  for (int32_t i = 0; i < n_started; i++) pthread_join(w->threads[i].th, NULL);
  pthread_cond_destroy(&w->done);
  pthread_cond_destroy(&w->wake);
  pthread_mutex_destroy(&w->mu);
  free(w->threads);
  free(w);
}

loom_status loom_worker_new(loom_ctx *ctx, int32_t n_threads, loom_worker **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "worker_new: out is NULL");
  *out = NULL;
  if (n_threads < 1 || n_threads > LOOM_WORKER_MAX_THREADS)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "worker_new: thread count %d is out of range [1, %d]", n_threads,
                      LOOM_WORKER_MAX_THREADS);
  loom_worker *w = loom_calloc(ctx, 1, sizeof *w);
  if (!w) return LOOM_STATUS_OUT_OF_MEMORY;
  w->threads = loom_calloc(ctx, (size_t)n_threads, sizeof *w->threads);
  if (!w->threads) {
    free(w);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  w->ctx = ctx;
  w->n = n_threads;
  int rc = pthread_mutex_init(&w->mu, NULL);
  if (rc == 0 && (rc = pthread_cond_init(&w->wake, NULL)) != 0) pthread_mutex_destroy(&w->mu);
  if (rc == 0 && (rc = pthread_cond_init(&w->done, NULL)) != 0) {
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
  }
  if (rc != 0) {
    free(w->threads);
    free(w);
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "worker_new: cannot create a lock: %s",
                      strerror(rc));
  }
  for (int32_t i = 0; i < n_threads; i++) {
    w->threads[i] = (worker_thread){.w = w, .index = i};
    rc = pthread_create(&w->threads[i].th, NULL, worker_main, &w->threads[i]);
    if (rc != 0) {
      teardown(w, i);
      return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                        "worker_new: cannot start thread %d of %d: %s", i, n_threads,
                        strerror(rc));
    }
  }
  *out = w;
  return LOOM_STATUS_OK;
}

void loom_worker_free(loom_worker *w) {
  if (!w) return;
  loom_worker_wait(w);
  teardown(w, w->n);
}

int32_t loom_worker_threads(const loom_worker *w) { return w ? w->n : 0; }

loom_status loom_worker_submit(loom_worker *w, loom_worker_fn fn, void *arg,
                               const loom_worker_trace *tr) {
  if (!w) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!fn) return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT, "worker_submit: fn is NULL");
  /* busy, not pending: whether a second submit fails must not depend on
   * how fast the first task runs */
  pthread_mutex_lock(&w->mu);
  bool busy = w->busy;
  pthread_mutex_unlock(&w->mu);
  if (busy)
    return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "worker_submit: a task is already in flight (call loom_worker_wait first)");
  loom_worker_trace t = tr ? *tr : (loom_worker_trace){0};
  if (t.trace && t.tid0 > INT32_MAX - w->n)
    return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "worker_submit: trace lanes %d + %d overflow", t.tid0, w->n);
  for (int32_t i = 0; t.trace && i < w->n; i++) {
    char lane[128];
    snprintf(lane, sizeof lane, "%s %d", t.lane ? t.lane : "worker", i);
    LOOM_TRY(loom_trace_name_lane(w->ctx, t.trace, t.tid0 + i, lane));
  }
  pthread_mutex_lock(&w->mu);
  w->fn = fn;
  w->arg = arg;
  w->tr = t;
  w->pending = w->n;
  w->busy = true;
  w->gen++;
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  return LOOM_STATUS_OK;
}

void loom_worker_wait(loom_worker *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  while (w->pending > 0) pthread_cond_wait(&w->done, &w->mu);
  w->busy = false;
  pthread_mutex_unlock(&w->mu);
}

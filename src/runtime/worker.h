/*
 * A tiny pool of dedicated pthreads (not OpenMP) that runs one task
 * asynchronously while the caller's thread goes on, e.g. generating a
 * dropout mask while the caller runs an OpenMP GEMM:
 *
 *   loom_worker_submit(w, make_mask, &job, NULL);
 *   gemm(...);                 // caller's thread, OpenMP inside
 *   loom_worker_wait(w);       // mask ready
 *
 * A task is fn(arg, index, count), called once on each of the pool's count
 * threads at the same time (index 0..count-1), so it splits its own work.
 * One task at a time: submitting again before loom_worker_wait (even if
 * the task has finished) is an error (INVALID_ARGUMENT), never a hidden
 * wait. Idle threads sleep on a
 * condition variable (no spinning: they share cores with OpenMP).
 *
 * The pool belongs to one thread (its ctx gets the errors); the tasks
 * report their own failures through arg. Everything fn wrote is visible to
 * the caller once loom_worker_wait returns.
 */
#ifndef LOOM_RUNTIME_WORKER_H
#define LOOM_RUNTIME_WORKER_H

#include "core/ctx.h"
#include "runtime/trace.h"

#define LOOM_WORKER_MAX_THREADS 256

typedef struct loom_worker loom_worker;
typedef void (*loom_worker_fn)(void *arg, int32_t index, int32_t count);

/* Optional tracing of a task: each piece becomes one event named name
 * (NULL: "task"; category cat, NULL: "worker") on lane tid0 + index, with
 * args {"index", "count"}; submit names those lanes "LANE INDEX" (lane
 * NULL: "worker"), e.g. "rng worker 0". The strings must stay valid until
 * loom_worker_wait returns. */
typedef struct loom_worker_trace {
  loom_trace *trace; /* NULL: no tracing */
  const char *name;
  const char *cat;
  const char *lane;
  int32_t tid0; /* e.g. 100 */
} loom_worker_trace;

/* Starts n_threads threads (1..LOOM_WORKER_MAX_THREADS). */
loom_status loom_worker_new(loom_ctx *ctx, int32_t n_threads, loom_worker **out);
/* Waits for a task in flight, then stops and joins the threads. NULL ok. */
void loom_worker_free(loom_worker *w);

int32_t loom_worker_threads(const loom_worker *w);

/* Starts fn on every thread and returns at once. tr may be NULL. */
loom_status loom_worker_submit(loom_worker *w, loom_worker_fn fn, void *arg,
                               const loom_worker_trace *tr);
/* Blocks until every piece of the task in flight has returned; returns at
 * once when there is none. */
void loom_worker_wait(loom_worker *w);

#endif

/*
 * A stream: an ordered queue of tasks run one after another on one
 * dedicated thread (a pthread, not OpenMP), while the submitting thread
 * goes on. It is the host analogue of a CUDA stream with events:
 *
 *   loom_stream_submit(s, ctx, &task, &ticket)  ~ enqueue on a cudaStream_t,
 *                                                 then cudaEventRecord
 *   loom_stream_wait(s, ctx, ticket)            ~ cudaEventSynchronize (or
 *                                                 cudaStreamWaitEvent)
 *
 * so a device program's comm ops map onto NCCL calls on a comm stream
 * (ncclAllReduce(..., stream)) with the same submit/wait points.
 *
 * Tasks run strictly in submission order (collectives must be issued in
 * the same order on every rank). A ticket numbers a task (1, 2, ...);
 * waiting for it waits for every task up to it. The idle thread sleeps on
 * a condition variable (no spinning: it shares cores with OpenMP). What a
 * task wrote is visible to the waiter once its wait returns.
 *
 * A task reports failure by returning a status with a message on the ctx
 * it is given (the stream's own context, used by its thread only). The
 * first failure breaks the stream: later tasks are skipped, and every wait
 * for the failed task or a later one returns its status with "TASK: its
 * message" on the waiter's ctx (the caller aborts its communicator, as
 * after any comm failure, and frees the stream).
 *
 * One thread submits and waits (the owner); freeing waits for the queue.
 */
#ifndef LOOM_RUNTIME_STREAM_H
#define LOOM_RUNTIME_STREAM_H

#include "core/ctx.h"
#include "runtime/trace.h"

typedef struct loom_stream loom_stream;

typedef struct loom_stream_task {
  /* Runs on the stream's thread; errors go to ctx (the stream's). */
  loom_status (*fn)(void *arg, loom_ctx *ctx);
  void *arg;         /* must stay valid until the task is waited for */
  const char *name;  /* for errors and the trace (a string that outlives the wait) */
  loom_trace *trace; /* NULL: not traced; else one event on the stream's lane */
} loom_stream_task;

/* Starts the thread. lane/name: the stream's trace lane number and name
 * (e.g. 200, "comm stream"). */
loom_status loom_stream_new(loom_ctx *ctx, int32_t lane, const char *name, loom_stream **out);
/* Waits for every task, then stops and joins the thread. NULL ok. */
void loom_stream_free(loom_stream *s);

/* Queues a copy of *task; *ticket numbers it. Fails (on ctx) only when out
 * of memory. */
loom_status loom_stream_submit(loom_stream *s, loom_ctx *ctx, const loom_stream_task *task,
                               int64_t *ticket);
/* Blocks until every task up to ticket has run (ticket <= 0: returns at
 * once); the failure of any of them, or of an earlier one, goes to ctx. */
loom_status loom_stream_wait(loom_stream *s, loom_ctx *ctx, int64_t ticket);
/* Waits for every task submitted so far. */
loom_status loom_stream_sync(loom_stream *s, loom_ctx *ctx);
/* Tasks run so far (skipped ones not counted). */
int64_t loom_stream_tasks_run(loom_stream *s);

#endif

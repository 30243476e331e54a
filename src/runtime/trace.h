/*
 * A recorder of timed events, written as Chrome Trace Event JSON (loads in
 * chrome://tracing and ui.perfetto.dev):
 *
 *   {"traceEvents":[
 *     {"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"loom"}},
 *     {"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"main"}},
 *     {"name":"thread_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}},
 *     {"name":"gemm","cat":"gemm","ph":"X","ts":12.345,"dur":678.900,
 *      "pid":1,"tid":0,"args":{"m":64}}, ...],
 *    "displayTimeUnit":"ms"}
 *
 * ts and dur are microseconds; ts counts from the recorder's creation.
 * Times passed in are seconds on the clock of loom_now_s() (core/clock.h),
 * which is what loom_trace_now returns. A lane is a Chrome "thread" (tid):
 * the caller picks lane numbers (they need not be OS threads); lane 0 is
 * named "main" until renamed. Events are written sorted by (ts, tid).
 *
 * Threads: every function except new/free may be called from any thread at
 * once (one mutex; appending is amortised O(1) plus a hash of the strings).
 * Strings (names, categories, arg keys) are copied into an interned pool,
 * so callers may pass temporaries. A NULL trace makes the recording calls
 * (now, event, name_lane) no-ops, so code can trace unconditionally.
 *
 * Recording never takes a ctx (it runs on any thread): an event that
 * cannot be recorded (no memory, non-finite or reversed times) is dropped,
 * the call returns false, and loom_trace_write reports it as an error.
 */
#ifndef LOOM_RUNTIME_TRACE_H
#define LOOM_RUNTIME_TRACE_H

#include "core/ctx.h"

#include <stdio.h>

#define LOOM_TRACE_MAX_ARGS 4

typedef struct loom_trace loom_trace;

/* One numeric argument shown in the viewer's details pane. */
typedef struct loom_trace_arg {
  const char *key;
  int64_t value;
} loom_trace_arg;

loom_status loom_trace_new(loom_ctx *ctx, loom_trace **out);
/* NULL is fine. No recording call may be running. */
void loom_trace_free(loom_trace *t);

/* Seconds on loom_now_s()'s clock; 0 (without reading the clock) when t is
 * NULL. */
double loom_trace_now(const loom_trace *t);

/* Records a complete event on lane tid from t_begin_s to t_end_s (seconds,
 * loom_now_s() clock; end >= begin). cat may be NULL ("loom"). */
bool loom_trace_event(loom_trace *t, int32_t tid, const char *name, const char *cat,
                      double t_begin_s, double t_end_s);
/* The same with up to LOOM_TRACE_MAX_ARGS numeric arguments. */
bool loom_trace_event_args(loom_trace *t, int32_t tid, const char *name, const char *cat,
                           double t_begin_s, double t_end_s, const loom_trace_arg *args,
                           int32_t n_args);

/* Names lane tid (a later call renames it). ctx gets the error when out of
 * memory; t NULL is a no-op. */
loom_status loom_trace_name_lane(loom_ctx *ctx, loom_trace *t, int32_t tid, const char *name);

/* Writes the JSON to f (not closed). Recording waits meanwhile. Fails with
 * OUT_OF_MEMORY / INVALID_ARGUMENT, before writing anything, if events were
 * dropped; IO if writing fails. */
loom_status loom_trace_write(loom_ctx *ctx, loom_trace *t, FILE *f);
/* Writes the JSON to path safely (core/file.h: a fresh temporary file
 * beside it, synced, then renamed); an existing regular, writable file is
 * replaced (whether to allow that is the caller's decision), anything else
 * (symlink, device, FIFO, read-only file) is refused. Errors name the path. */
loom_status loom_trace_save(loom_ctx *ctx, loom_trace *t, const char *path);

/* Events recorded so far (for tests and summaries). */
int64_t loom_trace_count(loom_trace *t);
/* Seconds of the recorded events of category cat ("gemm", "kernel", ...),
 * summed over lanes. */
double loom_trace_seconds(loom_trace *t, const char *cat);
/* Seconds of the events of category cat whose name starts with prefix
 * (either NULL: any), summed over lanes; *count (may be NULL) gets how
 * many there were. */
double loom_trace_sum(loom_trace *t, const char *cat, const char *prefix, int64_t *count);

#endif

/* The cpu backend's oneDNN engine and per-thread streams (dnnl_thread.h). */
#include "runtime/cpu/dnnl_thread.h"

#include <pthread.h>
#include <stdlib.h>

/* Chained on a global list, so that what a thread made stays reachable
 * (not a leak) after OpenMP retires the thread. */
struct loom_dnnl_thread {
  dnnl_stream_t stream;
  void *buf[LOOM_DNNL_N_BUFS];
  size_t size[LOOM_DNNL_N_BUFS];
  struct loom_dnnl_thread *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static bool engine_failed;
static loom_dnnl_thread *all_threads;
static _Thread_local loom_dnnl_thread *mine;

dnnl_engine_t loom_dnnl_engine(void) {
  pthread_mutex_lock(&lock);
  if (!engine && !engine_failed && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine = NULL;
    engine_failed = true;
  }
  dnnl_engine_t e = engine;
  pthread_mutex_unlock(&lock);
  return e;
}

loom_dnnl_thread *loom_dnnl_thread_get(void) {
  if (mine) return mine;
  dnnl_engine_t e = loom_dnnl_engine();
  loom_dnnl_thread *t = e ? calloc(1, sizeof *t) : NULL;
  if (!t) return NULL;
  if (dnnl_stream_create(&t->stream, e, dnnl_stream_default_flags) != dnnl_success) {
    free(t);
    return NULL;
  }
  pthread_mutex_lock(&lock);
  t->next = all_threads;
  all_threads = t;
  pthread_mutex_unlock(&lock);
  return mine = t;
}

dnnl_stream_t loom_dnnl_stream(const loom_dnnl_thread *t) { return t->stream; }

void *loom_dnnl_buffer(loom_dnnl_thread *t, loom_dnnl_buf which, size_t bytes) {
  if (bytes <= t->size[which] && t->buf[which]) return t->buf[which];
  free(t->buf[which]);
  size_t n = (bytes ? bytes : 1) + 63;
  t->buf[which] = aligned_alloc(64, n / 64 * 64);
  t->size[which] = t->buf[which] ? bytes : 0;
  return t->buf[which];
}

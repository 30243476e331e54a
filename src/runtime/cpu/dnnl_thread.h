/*
 * What the cpu backend's oneDNN primitives share (convolutions, GEMM
 * tiles): one engine for the process, and per OpenMP thread a stream and
 * buffers that grow to the largest need. Every primitive is made for one
 * thread and runs on the thread that calls it, inside Loom's own parallel
 * loop, so each thread needs its own stream and scratchpad.
 */
#ifndef LOOM_RUNTIME_CPU_DNNL_THREAD_H
#define LOOM_RUNTIME_CPU_DNNL_THREAD_H

#include <dnnl.h>
#include <stdbool.h>
#include <stddef.h>

/* The process's cpu engine, made on first use; NULL if oneDNN cannot. */
dnnl_engine_t loom_dnnl_engine(void);

/* A thread's buffers, by use: a primitive's scratchpad, and an operand
 * held in a primitive's own layout (or a dense copy of a strided one). */
typedef enum loom_dnnl_buf {
  LOOM_DNNL_SCRATCH,
  LOOM_DNNL_SRC,
  LOOM_DNNL_DST,
  LOOM_DNNL_WEIGHTS,
  LOOM_DNNL_POST, /* a conv's tensor post-op operands in its output's layout */
  LOOM_DNNL_N_BUFS
} loom_dnnl_buf;

typedef struct loom_dnnl_thread loom_dnnl_thread;

/* The calling thread's stream and buffers (made on first use, kept to
 * the process's end); NULL when out of memory or without an engine. */
loom_dnnl_thread *loom_dnnl_thread_get(void);
dnnl_stream_t loom_dnnl_stream(const loom_dnnl_thread *t);
/* Buffer `which` of t, at least `bytes` long (64-byte aligned; its old
 * contents are lost when it grows); NULL when out of memory. */
void *loom_dnnl_buffer(loom_dnnl_thread *t, loom_dnnl_buf which, size_t bytes);

#endif

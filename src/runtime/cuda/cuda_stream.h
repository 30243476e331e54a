/*
 * What code beside the cuda backend may use of the CUDA device layer
 * (cuda_device.c): the process's device, opaque here, its memory, and
 * streams of one's own with copies on them. The NCCL communicator
 * (runtime/cuda/comm_nccl.c) moves its messages through device buffers this way;
 * the backend's internals (modules, launches, cuBLAS) stay in cuda.h.
 */
#ifndef LOOM_RUNTIME_CUDA_CUDA_STREAM_H
#define LOOM_RUNTIME_CUDA_CUDA_STREAM_H

#include "runtime/cuda/cuda_api.h"

#include <stdbool.h>

typedef struct loom_cu loom_cu;

/* The process's device, opened on first use. UNSUPPORTED, with a message
 * beginning "no CUDA driver: " or "no CUDA device: ", without one. */
loom_status loom_cu_get(loom_ctx *ctx, loom_cu **out);
/* Makes the device's context current on this thread. */
loom_status loom_cu_bind(loom_ctx *ctx, loom_cu *cu);

/* Device memory. */
loom_status loom_cu_alloc(loom_ctx *ctx, loom_cu *cu, size_t bytes, loom_cu_deviceptr *out);
void loom_cu_free(loom_cu *cu, loom_cu_deviceptr p);

/* A stream that does not wait for the main one. */
loom_status loom_cu_stream_new(loom_ctx *ctx, loom_cu *cu, loom_cu_stream *out);
/* Teardown: makes the device current on this thread (it stays so), waits
 * for s and destroys it; errors are ignored. */
void loom_cu_stream_free(loom_cu *cu, loom_cu_stream s);
/* Copies queued on stream s; the host memory must outlive them. */
loom_status loom_cu_to_device_on(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, const void *src,
                                 size_t bytes, loom_cu_stream s);
loom_status loom_cu_to_host_on(loom_ctx *ctx, loom_cu *cu, void *dst, loom_cu_deviceptr src,
                               size_t bytes, loom_cu_stream s);
/* *done: everything queued on s has finished (without waiting); an error
 * s met is returned, naming `what`. */
loom_status loom_cu_stream_done(loom_ctx *ctx, loom_cu *cu, loom_cu_stream s, const char *what,
                                bool *done);
/* Waits for everything queued on s; an error names `what`. */
loom_status loom_cu_stream_sync(loom_ctx *ctx, loom_cu *cu, loom_cu_stream s, const char *what);

#endif

/*
 * Runtime internals shared by the session and the backends: the backend
 * constructors that loom_backend_new dispatches to.
 */
#ifndef LOOM_RUNTIME_SESSION_H
#define LOOM_RUNTIME_SESSION_H

#include "runtime/backend.h"

/* Fill b with the reference backend / the cpu backend (ctx for errors). */
loom_status loom_ref_backend_init(loom_ctx *ctx, loom_backend *b);
loom_status loom_cpu_backend_init(loom_ctx *ctx, loom_backend *b);

/* Host buffers aligned to 64 bytes (shared by the CPU-side backends). */
void *loom_host_buffer_alloc(void *bctx, size_t bytes);
void loom_host_buffer_free(void *bctx, void *p);

#endif

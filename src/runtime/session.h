/*
 * Runtime internals shared by the session and the backends: the backend
 * constructors that loom_backend_new dispatches to (one per entry of
 * LOOM_BACKEND_LIST) and the host buffers of the CPU-side backends.
 */
#ifndef LOOM_RUNTIME_SESSION_H
#define LOOM_RUNTIME_SESSION_H

#include "runtime/backend.h"

/* loom_ref_backend_init, loom_cpu_backend_init, ...: fill b with the
 * backend (ctx for errors). */
#define LOOM_BACKEND_INIT_DECL(name) loom_status loom_##name##_backend_init(loom_ctx *ctx, loom_backend *b);
LOOM_BACKEND_LIST(LOOM_BACKEND_INIT_DECL)
#undef LOOM_BACKEND_INIT_DECL

/* Host buffers aligned to 64 bytes (shared by the CPU-side backends). */
void *loom_host_buffer_alloc(void *bctx, size_t bytes);
void loom_host_buffer_free(void *bctx, void *p);

/* How many outputs the session's last run computed straight into the
 * memory of an input (the caller's tensor for both: an in-place update,
 * loom_memplan.in_place) instead of copying them there after the run. */
int32_t loom_session_last_in_place(const loom_session *s);

#endif

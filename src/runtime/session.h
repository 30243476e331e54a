/*
 * Runtime internals shared by the session, the backends and the tools:
 * the backend constructors that loom_backend_new dispatches to, and what
 * a session prepared (for `loom compile`).
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

/* The session's decomposed graph (what the backend runs). */
const loom_graph *loom_session_graph(const loom_session *s);
/* The fused program and its generated C when the session runs one on the
 * cpu backend (also after falling back to eager for want of a compiler);
 * NULL otherwise. */
const struct loom_program *loom_session_program(const loom_session *s);
const char *loom_session_source(const loom_session *s);

#endif

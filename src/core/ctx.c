#include "core/ctx.h"

#include "core/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

loom_status loom_ctx_new(loom_ctx **out) {
  if (!out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = calloc(1, sizeof(loom_ctx));
  return *out ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

void loom_ctx_free(loom_ctx *ctx) {
  if (ctx && ctx->trace && ctx->trace_free) ctx->trace_free(ctx->trace);
  free(ctx);
}

void loom_free(void *p) { free(p); }

const char *loom_ctx_error(const loom_ctx *ctx) {
  return ctx ? ctx->error : "no context (NULL)";
}

loom_status loom_ctx_set_threads(loom_ctx *ctx, int32_t n_threads) {
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (n_threads < 0 || n_threads > 4096)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "thread count %d is out of range [0, 4096]", n_threads);
  ctx->n_threads = n_threads;
  return LOOM_STATUS_OK;
}

int32_t loom_ctx_threads(const loom_ctx *ctx) {
  return loom_ctx_resolved_threads(ctx);
}

int32_t loom_ctx_resolved_threads(const loom_ctx *ctx) {
  if (ctx && ctx->n_threads > 0) return ctx->n_threads;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)n : 1;
}

int64_t loom_physical_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

const char *loom_status_name(loom_status s) {
  static const char *const names[LOOM_STATUS_COUNT] = {
      [LOOM_STATUS_OK] = "ok",
      [LOOM_STATUS_INVALID_ARGUMENT] = "invalid argument",
      [LOOM_STATUS_SHAPE_MISMATCH] = "shape mismatch",
      [LOOM_STATUS_DTYPE_MISMATCH] = "dtype mismatch",
      [LOOM_STATUS_UNSUPPORTED] = "unsupported",
      [LOOM_STATUS_OUT_OF_MEMORY] = "out of memory",
      [LOOM_STATUS_IO] = "i/o error",
      [LOOM_STATUS_PARSE] = "parse error",
      [LOOM_STATUS_OUT_OF_RANGE] = "out of range",
      [LOOM_STATUS_INTERNAL] = "internal error",
      [LOOM_STATUS_BUSY] = "busy",
  };
  if ((unsigned)s >= LOOM_STATUS_COUNT) return "unknown status";
  return names[s];
}

const char *loom_version(void) { return LOOM_VERSION_STRING; }

loom_status loom_verror(loom_ctx *ctx, loom_status status, const char *fmt,
                        va_list ap) {
  if (ctx) {
    /* names come from files: no control byte reaches a terminal */
    char raw[LOOM_ERROR_MAX];
    vsnprintf(raw, sizeof raw, fmt, ap);
    loom_escape_message(raw, ctx->error, sizeof ctx->error);
    ctx->last = status;
  }
  return status;
}

loom_status loom_error(loom_ctx *ctx, loom_status status, const char *fmt,
                       ...) {
  va_list ap;
  va_start(ap, fmt);
  loom_verror(ctx, status, fmt, ap);
  va_end(ap);
  return status;
}

void loom_error_prefix(loom_ctx *ctx, const char *fmt, ...) {
  if (!ctx) return;
  char raw[LOOM_ERROR_MAX], prefix[LOOM_ERROR_MAX], old[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  loom_escape_message(raw, prefix, sizeof prefix);
  memcpy(old, ctx->error, sizeof old);
  /* Truncation is fine: messages are for people, capped at LOOM_ERROR_MAX. */
  size_t k = strnlen(prefix, sizeof ctx->error - 3);
  memcpy(ctx->error, prefix, k);
  memcpy(ctx->error + k, ": ", 2);
  size_t rest = sizeof ctx->error - k - 3;
  size_t m = strnlen(old, rest);
  memcpy(ctx->error + k + 2, old, m);
  ctx->error[k + 2 + m] = '\0';
}

void loom_error_clear(loom_ctx *ctx) {
  if (ctx) {
    ctx->error[0] = '\0';
    ctx->last = LOOM_STATUS_OK;
  }
}

void *loom_malloc(loom_ctx *ctx, size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory (%zu bytes)", n);
  return p;
}

void *loom_calloc(loom_ctx *ctx, size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p)
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory (%zu x %zu bytes)",
               count, size);
  return p;
}

void *loom_realloc(loom_ctx *ctx, void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory (%zu bytes)", n);
  return q;
}

char *loom_strdup(loom_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = loom_malloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}

bool loom_grow(loom_ctx *ctx, void **p, int32_t *cap, int32_t need,
               size_t elem) {
  if (need <= *cap) return true;
  int32_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *q = loom_realloc(ctx, *p, (size_t)n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

/* The context: error message and settings. Every layer may include this. */
#ifndef LOOM_CORE_CTX_H
#define LOOM_CORE_CTX_H

#include "loom.h"

#include <stdarg.h>

#define LOOM_ERROR_MAX 1024

struct loom_trace;
struct loom_comm_env;

struct loom_ctx {
  char error[LOOM_ERROR_MAX];
  loom_status last;
  int32_t n_threads; /* 0 = all cores */
  /* The timeline being recorded (runtime/trace.h), or NULL; freed through
   * trace_free, which the runtime sets (core does not know the type). */
  struct loom_trace *trace;
  void (*trace_free)(struct loom_trace *);
  /* The communicator and groups that per-device comm ops run on
   * (comm/comm.h), or NULL; set and owned by the caller of a run. */
  struct loom_comm_env *comm_env;
};

/* Records a formatted message on ctx and returns status (ctx may be NULL). */
loom_status loom_error(loom_ctx *ctx, loom_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
loom_status loom_verror(loom_ctx *ctx, loom_status status, const char *fmt,
                        va_list ap);
/* Prefixes the current message with "prefix: " (for adding context). */
void loom_error_prefix(loom_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the message. */
void loom_error_clear(loom_ctx *ctx);

/* The thread count to use now (resolves 0 to the core count). */
int32_t loom_ctx_resolved_threads(const loom_ctx *ctx);
/* The machine's physical memory in bytes, 0 if unknown. */
int64_t loom_physical_memory_bytes(void);

/* Checked allocation helpers: NULL and an error on ctx when out of memory. */
void *loom_malloc(loom_ctx *ctx, size_t n);
void *loom_calloc(loom_ctx *ctx, size_t count, size_t size);
void *loom_realloc(loom_ctx *ctx, void *p, size_t n);
char *loom_strdup(loom_ctx *ctx, const char *s);

/* Grows *p (an array of elem bytes, capacity *cap) to hold need elements. */
bool loom_grow(loom_ctx *ctx, void **p, int32_t *cap, int32_t need,
               size_t elem);

#define LOOM_ARRAY_LEN(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
#define LOOM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LOOM_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Returns early with the status if it is not OK. */
#define LOOM_TRY(expr)                                                         \
  do {                                                                         \
    loom_status try_status_ = (expr);                                          \
    if (try_status_ != LOOM_STATUS_OK) return try_status_;                     \
  } while (0)

#endif

/*
 * A GPU backend's device, opened once per process: the first caller opens
 * it, later ones get the same device, or the same error (a missing driver
 * is not retried on every session).
 */
#ifndef LOOM_RUNTIME_DEVICE_ONCE_H
#define LOOM_RUNTIME_DEVICE_ONCE_H

#include "core/ctx.h"

#include <pthread.h>

typedef struct loom_device_once {
  pthread_mutex_t lock;
  void *device;       /* the opened device; NULL until then */
  loom_status status; /* why opening failed (then never tried again) */
  char error[512];
} loom_device_once;

#define LOOM_DEVICE_ONCE_INIT                                                                      \
  { .lock = PTHREAD_MUTEX_INITIALIZER }

/* *out = the device open() fills in storage on the first call (storage
 * kept for the process); the remembered failure, with its message, after
 * a failed one. */
loom_status loom_device_once_get(loom_ctx *ctx, loom_device_once *once,
                                 loom_status (*open)(loom_ctx *ctx, void *storage), void *storage,
                                 void **out);

#endif

/* Opening a backend's device once per process (device_once.h). */
#include "runtime/device_once.h"

#include <stdio.h>

loom_status loom_device_once_get(loom_ctx *ctx, loom_device_once *once,
                                 loom_status (*open)(loom_ctx *ctx, void *storage), void *storage,
                                 void **out) {
  pthread_mutex_lock(&once->lock);
  if (!once->device && !once->status) {
    loom_ctx *tmp = NULL; /* its message is kept for every later caller */
    if (loom_ctx_new(&tmp)) {
      pthread_mutex_unlock(&once->lock);
      *out = NULL;
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
    once->status = open(tmp, storage);
    if (once->status)
      snprintf(once->error, sizeof once->error, "%s", loom_ctx_error(tmp));
    else
      once->device = storage;
    loom_ctx_free(tmp);
  }
  pthread_mutex_unlock(&once->lock);
  *out = once->device;
  if (!once->device) return loom_error(ctx, once->status, "%s", once->error);
  return LOOM_STATUS_OK;
}

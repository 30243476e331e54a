/*
 * A stand-in CUDA driver for tests on machines without a GPU
 * (test_cuda_fake opens it through LOOM_CUDA_DRIVER_LIB): one "device"
 * whose memory is host memory, with every symbol of Loom's driver table.
 * Device addresses are host addresses with a high bit flipped, so a device
 * address used as a host pointer (or the reverse) faults instead of
 * passing; copies and memsets are done at once (every stream is always
 * idle). Modules cannot load (there is nothing to run PTX): a graph with
 * generated kernels fails there, with the driver's error.
 */
#include "runtime/cuda/cuda_api.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_BIT 0x4000000000000000ULL
#define NOT_SUPPORTED 801 /* CUDA_ERROR_NOT_SUPPORTED */

static char handles[4]; /* what the context, streams and events point to */
static long live_device, live_host;

/* Live fake allocations, device and pinned host (for leak checks). */
long fake_cuda_live(void) { return live_device + live_host; }

static void *host_of(loom_cu_deviceptr p) { return (void *)(uintptr_t)(p ^ FAKE_BIT); }

loom_cu_result cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }
loom_cu_result cuDriverGetVersion(int *version) {
  *version = 13000;
  return 0;
}
loom_cu_result cuDeviceGetCount(int *count) {
  *count = 1;
  return 0;
}
loom_cu_result cuDeviceGet(loom_cu_device *dev, int ordinal) {
  *dev = ordinal;
  return ordinal == 0 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */
}
loom_cu_result cuDeviceGetName(char *name, int len, loom_cu_device dev) {
  (void)dev;
  snprintf(name, (size_t)len, "Loom fake CUDA device (host memory)");
  return 0;
}
loom_cu_result cuDeviceGetAttribute(int *value, loom_cu_device_attribute attr, loom_cu_device dev) {
  (void)dev;
  *value = attr == LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
           : attr == LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
                                                                       : 1;
  return 0;
}
loom_cu_result cuDeviceTotalMem_v2(size_t *bytes, loom_cu_device dev) {
  (void)dev;
  *bytes = (size_t)1 << 30;
  return 0;
}
loom_cu_result cuDevicePrimaryCtxRetain(loom_cu_context *c, loom_cu_device dev) {
  (void)dev;
  *c = (loom_cu_context)(void *)&handles[0];
  return 0;
}
loom_cu_result cuCtxSetCurrent(loom_cu_context c) { return c ? 0 : 1; }
loom_cu_result cuModuleLoadData(loom_cu_module *m, const void *image) {
  (void)image;
  *m = NULL;
  return NOT_SUPPORTED;
}
loom_cu_result cuModuleUnload(loom_cu_module m) {
  (void)m;
  return NOT_SUPPORTED;
}
loom_cu_result cuModuleGetFunction(loom_cu_function *f, loom_cu_module m, const char *name) {
  (void)m;
  (void)name;
  *f = NULL;
  return NOT_SUPPORTED;
}
loom_cu_result cuLaunchKernel(loom_cu_function f, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz,
                              unsigned int shared_bytes, loom_cu_stream s, void **params,
                              void **extra) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared_bytes;
  (void)s, (void)params, (void)extra;
  return NOT_SUPPORTED;
}
loom_cu_result cuMemAlloc_v2(loom_cu_deviceptr *p, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  if (!h) return 2;       /* CUDA_ERROR_OUT_OF_MEMORY */
  memset(h, 0xcd, bytes); /* fresh device memory is garbage */
  *p = (loom_cu_deviceptr)(uintptr_t)h ^ FAKE_BIT;
  live_device++;
  return 0;
}
loom_cu_result cuMemFree_v2(loom_cu_deviceptr p) {
  if (!p) return 1;
  free(host_of(p));
  live_device--;
  return 0;
}
loom_cu_result cuMemAllocHost_v2(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  if (!*p) return 2;
  live_host++;
  return 0;
}
loom_cu_result cuMemFreeHost(void *p) {
  free(p);
  live_host--;
  return 0;
}
loom_cu_result cuMemcpyHtoDAsync_v2(loom_cu_deviceptr dst, const void *src, size_t bytes,
                                    loom_cu_stream s) {
  (void)s;
  memcpy(host_of(dst), src, bytes);
  return 0;
}
loom_cu_result cuMemcpyDtoHAsync_v2(void *dst, loom_cu_deviceptr src, size_t bytes,
                                    loom_cu_stream s) {
  (void)s;
  memcpy(dst, host_of(src), bytes);
  return 0;
}
loom_cu_result cuMemcpyDtoDAsync_v2(loom_cu_deviceptr dst, loom_cu_deviceptr src, size_t bytes,
                                    loom_cu_stream s) {
  (void)s;
  memmove(host_of(dst), host_of(src), bytes);
  return 0;
}
loom_cu_result cuMemsetD8Async(loom_cu_deviceptr dst, unsigned char v, size_t n, loom_cu_stream s) {
  (void)s;
  memset(host_of(dst), v, n);
  return 0;
}
loom_cu_result cuStreamCreate(loom_cu_stream *s, unsigned int flags) {
  (void)flags;
  *s = (loom_cu_stream)(void *)&handles[1];
  return 0;
}
loom_cu_result cuStreamDestroy_v2(loom_cu_stream s) { return s ? 0 : 1; }
loom_cu_result cuStreamSynchronize(loom_cu_stream s) { return s ? 0 : 1; }
loom_cu_result cuStreamQuery(loom_cu_stream s) { return s ? 0 : 1; }
loom_cu_result cuStreamWaitEvent(loom_cu_stream s, loom_cu_event e, unsigned int flags) {
  (void)flags;
  return s && e ? 0 : 1;
}
loom_cu_result cuEventCreate(loom_cu_event *e, unsigned int flags) {
  (void)flags;
  *e = (loom_cu_event)(void *)&handles[2];
  return 0;
}
loom_cu_result cuEventRecord(loom_cu_event e, loom_cu_stream s) { return e && s ? 0 : 1; }
loom_cu_result cuEventSynchronize(loom_cu_event e) { return e ? 0 : 1; }
loom_cu_result cuEventElapsedTime(float *ms, loom_cu_event start, loom_cu_event end) {
  *ms = 0.001f;
  return start && end ? 0 : 1;
}
loom_cu_result cuEventDestroy_v2(loom_cu_event e) { return e ? 0 : 1; }
loom_cu_result cuGetErrorName(loom_cu_result r, const char **name) {
  *name = r == NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_FAKE";
  return 0;
}

/* Every entry of Loom's table is defined here with its type. */
#define SAME_TYPE(sym, ret, params)                                                                \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&sym), ret(*) params), #sym);
LOOM_CU_DRIVER_FUNCS(SAME_TYPE)

/* The OpenCL entry points, from the ICD loader opened at run time. */
#include "runtime/opencl/ocl_api.h"

#if LOOM_OCL_HEADERS
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static loom_ocl_api api;
static loom_status api_status;
static char api_error[256];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void) {
  const char *names[] = {"libOpenCL.so.1", "libOpenCL.so"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    api_status = LOOM_STATUS_UNSUPPORTED;
    snprintf(api_error, sizeof api_error,
             "no OpenCL ICD loader (libOpenCL.so.1; Debian: ocl-icd-libopencl1, and a driver "
             "such as pocl-opencl-icd)");
    return;
  }
#define LOOM_OCL_LOAD(name)                                                                     \
  if (!api_status) {                                                                           \
    void *sym = dlsym(h, #name);                                                               \
    if (!sym) {                                                                                \
      api_status = LOOM_STATUS_UNSUPPORTED;                                                    \
      snprintf(api_error, sizeof api_error, "the OpenCL loader has no %s", #name);             \
    } else {                                                                                   \
      memcpy(&api.name, &sym, sizeof sym);                                                     \
    }                                                                                          \
  }
  LOOM_OCL_FUNCS(LOOM_OCL_LOAD)
#undef LOOM_OCL_LOAD
}

loom_status loom_ocl_api_get(loom_ctx *ctx, const loom_ocl_api **out) {
  pthread_once(&api_once, api_load);
  *out = NULL;
  if (api_status) return loom_error(ctx, api_status, "%s", api_error);
  *out = &api;
  return LOOM_STATUS_OK;
}

const char *loom_ocl_error_name(cl_int e, char *buf, size_t n) {
  static const struct {
    cl_int code;
    const char *name;
  } names[] = {
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_INVALID_BINARY, "CL_INVALID_BINARY"},
      {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
      {CL_INVALID_KERNEL_NAME, "CL_INVALID_KERNEL_NAME"},
      {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
      {CL_INVALID_ARG_SIZE, "CL_INVALID_ARG_SIZE"},
      {CL_INVALID_ARG_VALUE, "CL_INVALID_ARG_VALUE"},
      {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
      {CL_INVALID_GLOBAL_WORK_SIZE, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
      {CL_INVALID_HOST_PTR, "CL_INVALID_HOST_PTR"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].code == e) {
      snprintf(buf, n, "%s (%d)", names[i].name, (int)e);
      return buf;
    }
  snprintf(buf, n, "OpenCL error %d", (int)e);
  return buf;
}
#endif

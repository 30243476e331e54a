/*
 * The OpenCL entry points Loom calls, resolved from the ICD loader at run
 * time (ocl_api.c): Loom links no OpenCL library, so it builds and runs
 * where there is none. Only the headers are needed at build time; without
 * them LOOM_OCL_HEADERS is 0 and the loader reports UNSUPPORTED.
 */
#ifndef LOOM_RUNTIME_OPENCL_OCL_API_H
#define LOOM_RUNTIME_OPENCL_OCL_API_H

#include "core/ctx.h"

#if defined(__has_include)
#if __has_include(<CL/cl.h>)
#define LOOM_OCL_HEADERS 1
#endif
#endif
#ifndef LOOM_OCL_HEADERS
#define LOOM_OCL_HEADERS 0
#endif

#if LOOM_OCL_HEADERS
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

/* X(name): every function of the table. */
#define LOOM_OCL_FUNCS(X)                                                                       \
  X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo)                 \
  X(clCreateContext) X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue)       \
  X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram)                  \
  X(clGetProgramBuildInfo) X(clGetProgramInfo) X(clReleaseProgram) X(clCreateKernel)            \
  X(clReleaseKernel) X(clSetKernelArg) X(clEnqueueNDRangeKernel) X(clFinish) X(clCreateBuffer)  \
  X(clReleaseMemObject) X(clEnqueueMapBuffer) X(clEnqueueUnmapMemObject) X(clFlush)            \
  X(clWaitForEvents) X(clReleaseEvent)

typedef struct loom_ocl_api {
#define LOOM_OCL_FIELD(name) __typeof__(&name) name;
  LOOM_OCL_FUNCS(LOOM_OCL_FIELD)
#undef LOOM_OCL_FIELD
} loom_ocl_api;

/* The table, loaded once (NULL with a message in ctx: UNSUPPORTED). */
loom_status loom_ocl_api_get(loom_ctx *ctx, const loom_ocl_api **out);
/* "CL_BUILD_PROGRAM_FAILURE (-11)" for an OpenCL error code. */
const char *loom_ocl_error_name(cl_int e, char *buf, size_t n);
#endif

#endif

/*
 * The CUDA libraries Loom calls, opened at run time with dlopen: the
 * driver (libcuda.so.1), cuBLAS (libcublas.so.13 / .12) and NCCL
 * (libnccl.so.2). Loom links none of them and needs none of their headers,
 * so it builds and runs everywhere; where a library is missing, getting
 * its table reports UNSUPPORTED with a message ("no CUDA driver: ...").
 *
 * The declarations are Loom's own, in the libraries' ABI: handles are
 * pointers to the same incomplete structs the headers name, enums are
 * int, CUdeviceptr is unsigned long long. tests/test_cuda_abi.c, built
 * where the CUDA toolkit's headers are, checks every function type of the
 * tables against the real prototypes and every constant below against
 * the real enums; tests/test_cuda.c resolves every symbol from the
 * installed libraries (the driver from the toolkit's stub library).
 *
 * A table entry is X(symbol, return type, parameters): the symbol is the
 * exact exported name (the versioned _v2 one where cuda.h's macros would
 * pick it), and the field of the table has that name.
 */
#ifndef LOOM_RUNTIME_CUDA_CUDA_API_H
#define LOOM_RUNTIME_CUDA_CUDA_API_H

#include "core/ctx.h"

#include <stddef.h>

#ifndef LOOM_CUDA_API_REAL_TYPES
/* The handle and enum types (the ABI check maps them to the headers'). */
typedef int loom_cu_result;
typedef int loom_cu_device;
typedef int loom_cu_device_attribute;
typedef unsigned long long loom_cu_deviceptr;
typedef struct CUctx_st *loom_cu_context;
typedef struct CUmod_st *loom_cu_module;
typedef struct CUfunc_st *loom_cu_function;
typedef struct CUstream_st *loom_cu_stream;
typedef struct CUevent_st *loom_cu_event;
typedef int loom_cublas_status;
typedef struct cublasContext *loom_cublas_handle;
typedef int loom_cublas_operation;
typedef int loom_cublas_math;
typedef int loom_cuda_data_type;
typedef int loom_cublas_compute_type;
typedef int loom_cublas_gemm_algo;
typedef int loom_nccl_result;
typedef int loom_nccl_data_type;
typedef struct ncclComm *loom_nccl_comm;
typedef struct {
  char internal[128];
} loom_nccl_unique_id;
#endif

/* The constants Loom uses, with the headers' values (checked). */
enum {
  LOOM_CU_SUCCESS = 0,
  LOOM_CU_ERROR_NOT_READY = 600,
  LOOM_CU_ERROR_NO_DEVICE = 100,
  LOOM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  LOOM_CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  LOOM_CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
  LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  LOOM_CU_STREAM_NON_BLOCKING = 1,
  LOOM_CU_EVENT_DISABLE_TIMING = 2,
  LOOM_CUBLAS_STATUS_SUCCESS = 0,
  LOOM_CUBLAS_OP_N = 0,
  LOOM_CUBLAS_OP_T = 1,
  LOOM_CUBLAS_DEFAULT_MATH = 0,
  LOOM_CUBLAS_GEMM_DEFAULT = -1,
  LOOM_CUDA_R_16F = 2,
  LOOM_CUDA_R_16BF = 14,
  LOOM_CUDA_R_32F = 0,
  LOOM_CUDA_R_64F = 1,
  LOOM_CUBLAS_COMPUTE_32F = 68,
  LOOM_CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  LOOM_CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  LOOM_CUBLAS_COMPUTE_64F = 70,
  LOOM_NCCL_SUCCESS = 0,
  LOOM_NCCL_IN_PROGRESS = 7,
  LOOM_NCCL_UINT8 = 1,
};

/* The driver API. */
#define LOOM_CU_DRIVER_FUNCS(X)                                                                  \
  X(cuInit, loom_cu_result, (unsigned int flags))                                               \
  X(cuDriverGetVersion, loom_cu_result, (int *version))                                         \
  X(cuDeviceGetCount, loom_cu_result, (int *count))                                             \
  X(cuDeviceGet, loom_cu_result, (loom_cu_device * dev, int ordinal))                           \
  X(cuDeviceGetName, loom_cu_result, (char *name, int len, loom_cu_device dev))                 \
  X(cuDeviceGetAttribute, loom_cu_result,                                                       \
    (int *value, loom_cu_device_attribute attr, loom_cu_device dev))                            \
  X(cuDeviceTotalMem_v2, loom_cu_result, (size_t * bytes, loom_cu_device dev))                  \
  X(cuDevicePrimaryCtxRetain, loom_cu_result, (loom_cu_context * c, loom_cu_device dev))        \
  X(cuCtxSetCurrent, loom_cu_result, (loom_cu_context c))                                       \
  X(cuModuleLoadData, loom_cu_result, (loom_cu_module * m, const void *image))                  \
  X(cuModuleUnload, loom_cu_result, (loom_cu_module m))                                         \
  X(cuModuleGetFunction, loom_cu_result,                                                        \
    (loom_cu_function * f, loom_cu_module m, const char *name))                                 \
  X(cuLaunchKernel, loom_cu_result,                                                             \
    (loom_cu_function f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,    \
     unsigned int by, unsigned int bz, unsigned int shared_bytes, loom_cu_stream s,             \
     void **params, void **extra))                                                              \
  X(cuMemAlloc_v2, loom_cu_result, (loom_cu_deviceptr * p, size_t bytes))                       \
  X(cuMemFree_v2, loom_cu_result, (loom_cu_deviceptr p))                                        \
  X(cuMemAllocHost_v2, loom_cu_result, (void **p, size_t bytes))                                \
  X(cuMemFreeHost, loom_cu_result, (void *p))                                                   \
  X(cuMemcpyHtoDAsync_v2, loom_cu_result,                                                       \
    (loom_cu_deviceptr dst, const void *src, size_t bytes, loom_cu_stream s))                   \
  X(cuMemcpyDtoHAsync_v2, loom_cu_result,                                                       \
    (void *dst, loom_cu_deviceptr src, size_t bytes, loom_cu_stream s))                         \
  X(cuMemcpyDtoDAsync_v2, loom_cu_result,                                                       \
    (loom_cu_deviceptr dst, loom_cu_deviceptr src, size_t bytes, loom_cu_stream s))             \
  X(cuMemsetD8Async, loom_cu_result,                                                            \
    (loom_cu_deviceptr dst, unsigned char v, size_t n, loom_cu_stream s))                       \
  X(cuStreamCreate, loom_cu_result, (loom_cu_stream * s, unsigned int flags))                   \
  X(cuStreamDestroy_v2, loom_cu_result, (loom_cu_stream s))                                     \
  X(cuStreamSynchronize, loom_cu_result, (loom_cu_stream s))                                    \
  X(cuStreamQuery, loom_cu_result, (loom_cu_stream s))                                          \
  X(cuStreamWaitEvent, loom_cu_result, (loom_cu_stream s, loom_cu_event e, unsigned int flags)) \
  X(cuEventCreate, loom_cu_result, (loom_cu_event * e, unsigned int flags))                     \
  X(cuEventRecord, loom_cu_result, (loom_cu_event e, loom_cu_stream s))                         \
  X(cuEventSynchronize, loom_cu_result, (loom_cu_event e))                                      \
  X(cuEventElapsedTime, loom_cu_result, (float *ms, loom_cu_event start, loom_cu_event end))    \
  X(cuEventDestroy_v2, loom_cu_result, (loom_cu_event e))                                       \
  X(cuGetErrorName, loom_cu_result, (loom_cu_result r, const char **name))

/* cuBLAS (v2 API). */
#define LOOM_CUBLAS_FUNCS(X)                                                                     \
  X(cublasCreate_v2, loom_cublas_status, (loom_cublas_handle * h))                              \
  X(cublasDestroy_v2, loom_cublas_status, (loom_cublas_handle h))                               \
  X(cublasGetVersion_v2, loom_cublas_status, (loom_cublas_handle h, int *version))              \
  X(cublasSetStream_v2, loom_cublas_status, (loom_cublas_handle h, loom_cu_stream s))           \
  X(cublasSetMathMode, loom_cublas_status, (loom_cublas_handle h, loom_cublas_math mode))       \
  X(cublasGetStatusString, const char *, (loom_cublas_status s))                                \
  X(cublasGemmEx, loom_cublas_status,                                                           \
    (loom_cublas_handle h, loom_cublas_operation ta, loom_cublas_operation tb, int m, int n,    \
     int k, const void *alpha, const void *a, loom_cuda_data_type at, int lda, const void *b,   \
     loom_cuda_data_type bt, int ldb, const void *beta, void *c, loom_cuda_data_type ct,        \
     int ldc, loom_cublas_compute_type compute, loom_cublas_gemm_algo algo))                    \
  X(cublasGemmStridedBatchedEx, loom_cublas_status,                                             \
    (loom_cublas_handle h, loom_cublas_operation ta, loom_cublas_operation tb, int m, int n,    \
     int k, const void *alpha, const void *a, loom_cuda_data_type at, int lda,                  \
     long long int stride_a, const void *b, loom_cuda_data_type bt, int ldb,                    \
     long long int stride_b, const void *beta, void *c, loom_cuda_data_type ct, int ldc,        \
     long long int stride_c, int batch, loom_cublas_compute_type compute,                       \
     loom_cublas_gemm_algo algo))                                                               \
  X(cublasGemmBatchedEx, loom_cublas_status,                                                    \
    (loom_cublas_handle h, loom_cublas_operation ta, loom_cublas_operation tb, int m, int n,    \
     int k, const void *alpha, const void *const a[], loom_cuda_data_type at, int lda,          \
     const void *const b[], loom_cuda_data_type bt, int ldb, const void *beta, void *const c[], \
     loom_cuda_data_type ct, int ldc, int batch, loom_cublas_compute_type compute,              \
     loom_cublas_gemm_algo algo))

/* NCCL. */
#define LOOM_NCCL_FUNCS(X)                                                                       \
  X(ncclGetVersion, loom_nccl_result, (int *version))                                           \
  X(ncclGetUniqueId, loom_nccl_result, (loom_nccl_unique_id * id))                              \
  X(ncclCommInitRank, loom_nccl_result,                                                         \
    (loom_nccl_comm * c, int nranks, loom_nccl_unique_id id, int rank))                         \
  X(ncclCommDestroy, loom_nccl_result, (loom_nccl_comm c))                                      \
  X(ncclCommAbort, loom_nccl_result, (loom_nccl_comm c))                                        \
  X(ncclCommGetAsyncError, loom_nccl_result, (loom_nccl_comm c, loom_nccl_result * e))          \
  X(ncclSend, loom_nccl_result,                                                                 \
    (const void *buf, size_t count, loom_nccl_data_type dt, int peer, loom_nccl_comm c,         \
     loom_cu_stream s))                                                                         \
  X(ncclRecv, loom_nccl_result,                                                                 \
    (void *buf, size_t count, loom_nccl_data_type dt, int peer, loom_nccl_comm c,               \
     loom_cu_stream s))                                                                         \
  X(ncclGroupStart, loom_nccl_result, (void))                                                   \
  X(ncclGroupEnd, loom_nccl_result, (void))                                                     \
  X(ncclGetErrorString, const char *, (loom_nccl_result r))

#define LOOM_CUDA_API_FIELD(sym, ret, params) ret(*sym) params;
typedef struct loom_cu_driver_api {
  LOOM_CU_DRIVER_FUNCS(LOOM_CUDA_API_FIELD)
} loom_cu_driver_api;
typedef struct loom_cublas_api {
  LOOM_CUBLAS_FUNCS(LOOM_CUDA_API_FIELD)
} loom_cublas_api;
typedef struct loom_nccl_api {
  LOOM_NCCL_FUNCS(LOOM_CUDA_API_FIELD)
} loom_nccl_api;
#undef LOOM_CUDA_API_FIELD

/* The tables, each loaded once. UNSUPPORTED with a message where the
 * library (or a symbol) is missing: "no CUDA driver: ...", "no cuBLAS:
 * ...", "no NCCL: ...". The driver table is only the symbols: cuInit is
 * the device layer's (cuda.h). $LOOM_CUDA_DRIVER_LIB names the driver
 * library to open instead of libcuda.so.1 (tests point it at the
 * toolkit's stub). */
loom_status loom_cu_driver_get(loom_ctx *ctx, const loom_cu_driver_api **out);
loom_status loom_cublas_get(loom_ctx *ctx, const loom_cublas_api **out);
loom_status loom_nccl_get(loom_ctx *ctx, const loom_nccl_api **out);

/* "CUDA_ERROR_NO_DEVICE (100)" for a driver result (api may be NULL). */
const char *loom_cu_error_name(const loom_cu_driver_api *api, loom_cu_result r, char *buf,
                               size_t n);

/* The exported names of each table, for the symbol tests: *n of them. */
const char *const *loom_cu_driver_symbols(int *n);
const char *const *loom_cublas_symbols(int *n);
const char *const *loom_nccl_symbols(int *n);

#endif

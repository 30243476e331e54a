/*
 * Loom's own CUDA declarations (runtime/cuda/cuda_api.h) against the
 * toolkit's headers, at compile time: every function of the driver,
 * cuBLAS and NCCL tables has the type of the real prototype (its handle
 * and enum types mapped to the headers' own), every constant has the
 * headers' value, and Loom's stand-in types have the real ones' sizes.
 * Built only where CMake finds cuda.h, cublas_api.h and nccl.h; running
 * it only reports that it compiled.
 */
#include <cublas_api.h>
#include <cuda.h>
#include <nccl.h>

#include <stdio.h>

/* The tables' types as the headers spell them. */
typedef CUresult loom_cu_result;
typedef CUdevice loom_cu_device;
typedef CUdevice_attribute loom_cu_device_attribute;
typedef CUdeviceptr loom_cu_deviceptr;
typedef CUcontext loom_cu_context;
typedef CUmodule loom_cu_module;
typedef CUfunction loom_cu_function;
typedef CUstream loom_cu_stream;
typedef CUevent loom_cu_event;
typedef cublasStatus_t loom_cublas_status;
typedef cublasHandle_t loom_cublas_handle;
typedef cublasOperation_t loom_cublas_operation;
typedef cublasMath_t loom_cublas_math;
typedef cudaDataType loom_cuda_data_type;
typedef cublasComputeType_t loom_cublas_compute_type;
typedef cublasGemmAlgo_t loom_cublas_gemm_algo;
typedef ncclResult_t loom_nccl_result;
typedef ncclDataType_t loom_nccl_data_type;
typedef ncclComm_t loom_nccl_comm;
typedef ncclUniqueId loom_nccl_unique_id;
#define LOOM_CUDA_API_REAL_TYPES 1
#include "runtime/cuda/cuda_api.h"

/* Each entry's type is the real function's (cuda.h's macros map the
 * plain names to the versioned symbols the tables name). */
#define SAME_TYPE(sym, ret, params)                                                              \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&sym), ret(*) params),                 \
                 #sym ": Loom's declaration differs from the header's");
LOOM_CU_DRIVER_FUNCS(SAME_TYPE)
LOOM_CUBLAS_FUNCS(SAME_TYPE)
LOOM_NCCL_FUNCS(SAME_TYPE)

/* The stand-in types (cuda_api.h without the headers) have the real sizes. */
_Static_assert(sizeof(int) == sizeof(CUresult) && sizeof(int) == sizeof(CUdevice) &&
                   sizeof(int) == sizeof(CUdevice_attribute) &&
                   sizeof(unsigned long long) == sizeof(CUdeviceptr) &&
                   sizeof(int) == sizeof(cublasStatus_t) &&
                   sizeof(int) == sizeof(cublasOperation_t) && sizeof(int) == sizeof(cublasMath_t) &&
                   sizeof(int) == sizeof(cudaDataType) &&
                   sizeof(int) == sizeof(cublasComputeType_t) &&
                   sizeof(int) == sizeof(cublasGemmAlgo_t) && sizeof(int) == sizeof(ncclResult_t) &&
                   sizeof(int) == sizeof(ncclDataType_t) && sizeof(ncclUniqueId) == 128,
               "a stand-in type's size");

#define SAME_VALUE(loom, real) _Static_assert((long long)(loom) == (long long)(real), #real);
SAME_VALUE(LOOM_CU_SUCCESS, CUDA_SUCCESS)
SAME_VALUE(LOOM_CU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY)
SAME_VALUE(LOOM_CU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)
SAME_VALUE(LOOM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
SAME_VALUE(LOOM_CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
SAME_VALUE(LOOM_CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
           CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
SAME_VALUE(LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
SAME_VALUE(LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
SAME_VALUE(LOOM_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING)
SAME_VALUE(LOOM_CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING)
SAME_VALUE(LOOM_CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS)
SAME_VALUE(LOOM_CUBLAS_OP_N, CUBLAS_OP_N)
SAME_VALUE(LOOM_CUBLAS_OP_T, CUBLAS_OP_T)
SAME_VALUE(LOOM_CUBLAS_DEFAULT_MATH, CUBLAS_DEFAULT_MATH)
SAME_VALUE(LOOM_CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT)
SAME_VALUE(LOOM_CUDA_R_16F, CUDA_R_16F)
SAME_VALUE(LOOM_CUDA_R_16BF, CUDA_R_16BF)
SAME_VALUE(LOOM_CUDA_R_32F, CUDA_R_32F)
SAME_VALUE(LOOM_CUDA_R_64F, CUDA_R_64F)
SAME_VALUE(LOOM_CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F)
SAME_VALUE(LOOM_CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_16BF)
SAME_VALUE(LOOM_CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_TF32)
SAME_VALUE(LOOM_CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_64F)
SAME_VALUE(LOOM_NCCL_SUCCESS, ncclSuccess)
SAME_VALUE(LOOM_NCCL_IN_PROGRESS, ncclInProgress)
SAME_VALUE(LOOM_NCCL_UINT8, ncclUint8)

int main(void) {
  puts("cuda_abi_check: Loom's CUDA declarations match the toolkit's headers (checked when "
       "compiled)");
  return 0;
}

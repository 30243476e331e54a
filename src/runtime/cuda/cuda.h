/*
 * The CUDA device layer (cuda_device.c) and the cuda backend's internals:
 * the process's device through the driver API (cuda_api.h: opened at run
 * time, so Loom builds and runs without CUDA), its primary context, two
 * streams (the main one, in order, and a second one for work that may
 * overlap it), modules of generated CUDA C compiled by NVRTC into PTX
 * (kernel cache like the cpu backend's: KEY.ptx) and loaded with
 * cuModuleLoadData, launches of the kernel IR's functions over device
 * memory, and cuBLAS GEMMs (cuda_gemm.c).
 *
 * Device choice: $LOOM_CUDA_DEVICE=N (0-based), else the launcher's local
 * rank modulo the device count (mpirun, srun: one process per GPU), else
 * device 0. The primary context is made current on the calling thread by
 * every entry that needs it, so any thread may call; but every session
 * shares the main stream and waits for all of it, so sessions of one
 * process should run one at a time (running two at once is correct, only
 * slower).
 */
#ifndef LOOM_RUNTIME_CUDA_CUDA_H
#define LOOM_RUNTIME_CUDA_CUDA_H

#include "codegen/gpu_attention.h"
#include "kernel/kernel.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_stream.h" /* the device, memory, streams */

struct loom_cu {
  const loom_cu_driver_api *api;
  loom_cu_device dev;
  loom_cu_context context;
  loom_cu_stream stream; /* the main stream: kernels, GEMMs and copies in program order */
  loom_cu_stream side;   /* a second stream, for work beside the main one */
  int32_t ordinal, arch; /* arch: compute capability, 90 for sm_90 */
  int32_t sms, driver_version;
  size_t memory_bytes;
  char name[256];
};

/* An error for driver result r of `what` (LOOM_STATUS_OK if r is 0). */
loom_status loom_cu_check(loom_ctx *ctx, const loom_cu *cu, loom_cu_result r, const char *what);
/* "NAME, sm_90, 132 SMs, 139 GiB, driver 13.0" */
void loom_cu_describe(const loom_cu *cu, char *out, size_t n);
/* Every CUDA device, one "  cuda:N NAME (sm_XY)" line each, into *text
 * (malloc'ed); UNSUPPORTED without a driver. */
loom_status loom_cu_list_devices(loom_ctx *ctx, char **text);

/* Copies on the main stream (asynchronous where the host memory is
 * pinned; wait with loom_cu_sync). */
loom_status loom_cu_to_device(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, const void *src,
                              size_t bytes);
loom_status loom_cu_to_host(loom_ctx *ctx, loom_cu *cu, void *dst, loom_cu_deviceptr src,
                            size_t bytes);
loom_status loom_cu_zero(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, size_t bytes);
/* Waits for everything queued on the main stream. */
loom_status loom_cu_sync(loom_ctx *ctx, loom_cu *cu);

typedef struct loom_cu_kernels loom_cu_kernels;
/* Compiles generated CUDA C with NVRTC for the device (or loads its PTX
 * from the kernel cache) and loads it; a compile error is INTERNAL with
 * NVRTC's log, a load error names the driver's and NVRTC's versions. */
loom_status loom_cu_module_build(loom_ctx *ctx, loom_cu *cu, const char *source,
                                 loom_cu_kernels **out, bool *cache_hit);
void loom_cu_module_free(loom_cu_kernels *m);
/* Queues kernel k (whose functions the module holds) on the main stream
 * over device pointers args[i] (temps ignored: they live in the module's
 * workspace). */
loom_status loom_cu_run(loom_ctx *ctx, loom_cu_kernels *m, const loom_kernel *k,
                        const loom_cu_deviceptr *args);

/* Queues calls[0 .. n) of module m (codegen/gpu_attention.h: flash
 * attention, dropout masks) in order on stream s, over device pointers:
 * bufs[i] for the node's buffer i (0: none), ws for the workspace. */
loom_status loom_cu_calls(loom_ctx *ctx, loom_cu_kernels *m, const loom_gpu_call *calls, int32_t n,
                          int32_t n_bufs, const loom_cu_deviceptr *bufs, loom_cu_deviceptr ws,
                          loom_cu_stream s);

/* ---- cuBLAS (cuda_gemm.c) ---------------------------------------------------- */

/* True if matmul node n runs on cuBLAS: f32, f64, f16 or bf16 throughout,
 * rank >= 2, sizes within int. */
bool loom_cuda_gemm_supported(const loom_graph *g, const loom_node *n);
/* The cuBLAS compute type for f32 products under a precision option. */
int loom_cuda_gemm_compute_f32(loom_gemm_precision p);
/* Queues matmul node n (supported) on the main stream: views of its
 * operands and output (for shapes) and their device pointers. *blas: the
 * handle, created on first use. compute_f32: for f32 operands. */
loom_status loom_cuda_matmul(loom_ctx *ctx, loom_cu *cu, loom_cublas_handle *blas, int compute_f32,
                             const loom_node *n, const loom_view *in,
                             const loom_cu_deviceptr *in_dev, const loom_view *out,
                             loom_cu_deviceptr out_dev);

#endif

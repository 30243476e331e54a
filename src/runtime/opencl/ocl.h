/*
 * The OpenCL device layer: the ICD loader (libOpenCL.so.1, opened at run
 * time with dlopen, so Loom builds and links without OpenCL and reports
 * UNSUPPORTED, with a message, where it is missing), one device per
 * process, programs built from generated source with a binary cache (like
 * the cpu backend's kernel cache), and kernels of the kernel IR run over
 * host buffers.
 *
 * Device choice: $LOOM_OPENCL_DEVICE=N takes the Nth device (0-based,
 * platforms in order); by default the first GPU, else the first device.
 * Programs are built with -cl-fp32-correctly-rounded-divide-sqrt where the
 * device has it (kernel.h's f32 / and sqrt). Cache: the cpu backend's
 * directory (runtime/jit.h), entries KEY.clbin, KEY = SHA-256 of the
 * platform and device names and versions, the build options and the
 * source; a corrupt or unsafe entry is rebuilt, never trusted.
 *
 * Memory: the session's buffers are host memory; a launch wraps each
 * argument in a buffer over the host memory (CL_MEM_USE_HOST_PTR: no copy
 * on a CPU device such as PoCL) and maps the outputs back before it
 * returns, so host code (GEMM fallbacks, eager nodes) and kernels may
 * alternate freely.
 */
#ifndef LOOM_RUNTIME_OPENCL_OCL_H
#define LOOM_RUNTIME_OPENCL_OCL_H

#include "codegen/gpu_attention.h"
#include "kernel/kernel.h"

typedef struct loom_ocl loom_ocl;

/* The process's device, opened on first use. UNSUPPORTED (with a message
 * saying what is missing) without a loader, platform or device. */
loom_status loom_ocl_get(loom_ctx *ctx, loom_ocl **out);
/* "PLATFORM: DEVICE" of the device, for reports. */
const char *loom_ocl_device_name(const loom_ocl *cl);
/* Every OpenCL device present, one "opencl:N PLATFORM: DEVICE" line each,
 * into *text (malloc'ed; "" when none); UNSUPPORTED without a loader. */
loom_status loom_ocl_list_devices(loom_ctx *ctx, char **text);

typedef struct loom_ocl_module loom_ocl_module;

/* Builds (or loads from the cache) a program of generated OpenCL C; a
 * build error is INTERNAL with the compiler's log. */
loom_status loom_ocl_module_build(loom_ctx *ctx, loom_ocl *cl, const char *source,
                                  loom_ocl_module **out, bool *cache_hit);
void loom_ocl_module_free(loom_ocl_module *m);

/* Runs kernel k (whose functions the module holds: codegen/gpu_codegen.h)
 * over host buffers args[i] (numel elements each; temps ignored), and
 * waits for it. */
loom_status loom_ocl_run(loom_ctx *ctx, loom_ocl_module *m, const loom_kernel *k,
                         void *const *args);

/* A launch of one function of the module over host buffers, for
 * hand-written kernels (the GEMM): args[i] of bytes[i] bytes (written[i]:
 * mapped back afterwards), then n_scalars 32-bit integer arguments;
 * global and local sizes in 2 dimensions. */
loom_status loom_ocl_launch(loom_ctx *ctx, loom_ocl_module *m, const char *fn, int32_t n_bufs,
                            void *const *args, const size_t *bytes, const bool *written,
                            int32_t n_scalars, const int32_t *scalars, const size_t global[2],
                            const size_t local[2]);

/* A launch of gpu_attention.h's calls still running on the second queue. */
typedef struct loom_ocl_pending loom_ocl_pending;

/* Runs calls[0 .. n) of module m (codegen/gpu_attention.h) in order over
 * host buffers: bufs[i] of bytes[i] bytes (written[i]: mapped back when
 * done) for the node's buffers, ws of ws_bytes for the workspace. With
 * pending NULL on the main queue, waiting for them; else on the second
 * queue, returning at once with *pending to join (loom_ocl_join) before
 * anything reads what they write. */
loom_status loom_ocl_calls(loom_ctx *ctx, loom_ocl_module *m, const loom_gpu_call *calls, int32_t n,
                           int32_t n_bufs, void *const *bufs, const size_t *bytes,
                           const bool *written, void *ws, size_t ws_bytes,
                           loom_ocl_pending **pending);
/* Waits for p (joined through its event), maps its outputs back and frees
 * it (NULL: nothing to do). */
loom_status loom_ocl_join(loom_ctx *ctx, loom_ocl_pending *p);

/* A row-major f32 product C = op(A) op(B), `batch` of them: product i
 * reads A from element a_off[i] and B from b_off[i] and writes C from
 * i * m * n. Host pointers and their sizes in bytes. */
typedef struct loom_ocl_gemm_args {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, batch;
  void *a, *b, *c;
  size_t a_bytes, b_bytes, c_bytes;
  const int64_t *a_off, *b_off;
} loom_ocl_gemm_args;

/* True if CLBlast (libclblast.so.1) could be opened, unless
 * $LOOM_OPENCL_NO_CLBLAST is set. */
bool loom_ocl_have_clblast(void);
/* The product through CLBlast's Sgemm / SgemmBatched on the device. */
loom_status loom_ocl_clblast_sgemm(loom_ctx *ctx, loom_ocl *cl, const loom_ocl_gemm_args *g);

#endif

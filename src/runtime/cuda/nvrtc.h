/*
 * NVRTC, the CUDA runtime compiler, opened at run time (dlopen of
 * libnvrtc.so from the loader path, $CUDA_HOME/lib64 or the toolkit's
 * default prefix): Loom builds and links without the CUDA toolkit, and
 * compiling reports UNSUPPORTED, saying so, where NVRTC is missing.
 * Generated CUDA C (codegen/gpu_codegen.h) is compiled with --fmad=false
 * (kernel.h: no contraction), which no GPU is needed for.
 */
#ifndef LOOM_RUNTIME_CUDA_NVRTC_H
#define LOOM_RUNTIME_CUDA_NVRTC_H

#include "core/ctx.h"

/* Compiles source for compute capability arch (90: sm_90) into PTX
 * (*ptx malloc'ed). UNSUPPORTED without NVRTC; INTERNAL with the
 * compiler's log on an error. */
loom_status loom_nvrtc_compile(loom_ctx *ctx, const char *source, int arch, char **ptx);
/* NVRTC's version ("13.0"), or UNSUPPORTED. */
loom_status loom_nvrtc_version(loom_ctx *ctx, char *out, size_t n);

#endif

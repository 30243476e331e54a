/*
 * Internals of the opencl backend (opencl_backend.c): the GEMM
 * (ocl_gemm.c) over the device layer (ocl.h).
 */
#ifndef LOOM_RUNTIME_OPENCL_OPENCL_H
#define LOOM_RUNTIME_OPENCL_OPENCL_H

#include "runtime/backend.h"
#include "runtime/opencl/ocl.h"

/* The GEMM kernel's OpenCL C (function lm_sgemm). */
extern const char loom_ocl_gemm_source[];
/* True if matmul node n runs on the device (f32, rank >= 2). */
bool loom_ocl_gemm_supported(const loom_graph *g, const loom_node *n);
/* Runs matmul node n (supported) with lm_sgemm of module gemm, or with
 * CLBlast when gemm is NULL. */
loom_status loom_ocl_matmul(loom_ctx *ctx, loom_ocl *dev, loom_ocl_module *gemm,
                            const loom_node *n, const loom_view *in, const loom_view *out);

#endif

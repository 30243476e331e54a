/* Checks every GPU backend's test runs the same way (test_cuda, test_opencl):
 * a backend against the cpu backend and the rng spec. */
#ifndef LOOM_TESTS_GPU_COMMON_H
#define LOOM_TESTS_GPU_COMMON_H

#include "common.h"

/* Runs g on backend; the outputs into out[]. Prints the error and returns
 * false on failure. */
bool loom_test_gpu_run(loom_ctx *ctx, loom_graph *g, const char *backend, loom_fusion_mode fusion,
                       loom_gemm_precision gemm, int32_t n_in, loom_tensor **in, int32_t n_out,
                       loom_tensor **out);
/* Fills an f32 or f64 tensor with uniform values in [-2, 2). */
void loom_test_gpu_fill(loom_tensor *t, uint64_t seed);
/* The worst |a - b| / max(floor, |a|) over two f32 or f64 tensors. */
double loom_test_gpu_worst_rel(const loom_tensor *a, const loom_tensor *b, double floor);

/* dropout(x) with p = 0.3 on [61, 257]: the kept elements are exactly
 * those loom_dropout_keep keeps, and the bytes equal the cpu backend's. */
void loom_test_gpu_dropout(loom_ctx *ctx, const char *backend, loom_fusion_mode fusion);
/* softmax(a @ b) with a [37, 45], b [45, 131]: close to the cpu backend,
 * the same bytes on a second run, everything on the device, and the
 * described source holds each of the n_marks strings marks (the backend's
 * kernel language). */
void loom_test_gpu_softmax_matmul(loom_ctx *ctx, const char *backend, const char *const *marks,
                                  int n_marks);
/* Independent groups of every kind (element-wise, row reductions with
 * shared and workspace scratch, column sums) fused horizontally: close to
 * the cpu backend, the same bytes on a second run, and one launch for the
 * kernel's parts. */
void loom_test_gpu_horizontal(loom_ctx *ctx, const char *backend);

#endif

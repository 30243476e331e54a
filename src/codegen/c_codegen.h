/*
 * Kernel IR -> C. One self-contained C11 translation unit (no Loom
 * headers: <math.h>, <stdint.h>, <string.h>, <omp.h> only) with one
 * function per kernel, following the ABI of src/kernel/kernel.h:
 *
 *   void NAME(void *const *args, void *workspace, int32_t n_threads);
 *
 * Tiles of all parts run in one OpenMP loop (schedule(static)); the work
 * of a tile does not depend on the thread count, so results are bitwise
 * identical for any n_threads. Arguments are declared restrict: an output
 * must not overlap any other argument of the same kernel (the memory plan
 * never gives a step's output its inputs' memory).
 *
 * Results equal the kernel interpreter (kernel/interp.c) bit for bit,
 * including exp, tanh and sigmoid, which take a vectorised path only where
 * it provably rounds to libm's f32 value. Kernel names must be C
 * identifiers of at most 39 characters, not starting with '_' or "lm_"
 * (the generated helpers' prefix) and not naming a C library function.
 *
 * Compile the result with src/runtime/jit.h (its flags keep a*b+c two
 * roundings: -ffp-contract=off).
 */
#ifndef LOOM_CODEGEN_C_CODEGEN_H
#define LOOM_CODEGEN_C_CODEGEN_H

#include "kernel/kernel.h"

/* Generates C for n kernels into *source (malloc'ed, NUL-terminated). */
loom_status loom_codegen_c(loom_ctx *ctx, const loom_kernel *kernels,
                           int32_t n, char **source);
/* The prelude every generated translation unit starts with (its helpers,
 * streaming stores included), into *source (malloc'ed): for hand-written
 * kernels that must be built exactly like generated ones (the memory
 * roof of `loom bench`). */
loom_status loom_codegen_c_prelude(loom_ctx *ctx, char **source);
#define LOOM_CODEGEN_CHUNK 512 /* elements per streamed chunk (c_internal.h) */

#endif

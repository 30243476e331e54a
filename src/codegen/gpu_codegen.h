/*
 * Kernel IR -> GPU source, one renderer for two dialects (OpenCL C and
 * CUDA C; gpu_dialect.c holds the small table of what differs). The
 * results equal the kernel interpreter's (kernel/interp.c) for every
 * launch geometry: the order of every reduction is kernel.h's, never the
 * hardware's (docs/GPU.md).
 *
 * The lowering:
 * - every part of a kernel is one GPU function NAME_p<q>, run by groups
 *   (work-groups / thread blocks) of LOOM_GPU_LOCAL threads; a group runs
 *   whole tiles (tile = group id, then + the group count), the tile's rows
 *   in order, the threads of the group sharing each row;
 * - the parts of one phase are one launch, NAME_h<phase>: its groups are
 *   cut into a slot per part, and each calls its slot's part with its
 *   index within the slot (its group-shared memory, as large as the largest
 *   part needs, is declared there or, in OpenCL, passed in by the host);
 * - a ROW stage gives thread t the elements r = t, t + L, t + 2L, ...
 *   (L = LOOM_GPU_LOCAL: neighbouring threads touch neighbouring
 *   elements, so loads and stores coalesce); a SCALAR stage runs on every
 *   thread (its registers are then private copies), its stores on thread 0;
 * - scratch rows live in local / shared memory when they fit
 *   (LOOM_GPU_LOCAL_SCRATCH_BYTES), else in the workspace, one block per
 *   group; stage boundaries that other threads read across are barriers;
 * - row reductions: the group computes L elements at a time into local
 *   memory, then threads 0..W-1 each add the elements of their lane in
 *   increasing r, and the lanes are folded in lane order, which is
 *   kernel.h's order exactly (W = the schedule's vector width, which
 *   divides L); column reductions: thread 0 adds the staged elements into
 *   the tile's partial in r order; NAME_c<c> combines the partials of
 *   column reduction c in tile order, one element per thread;
 * - phases run in order: the host launches the functions in the order
 *   loom_gpu_launches gives, on one in-order queue or stream.
 *
 * Every function takes the kernel's non-temp arguments in argument order
 * (a<i>, typed pointers) and then the workspace (bytes): temps and column
 * partials at loom_kernel_workspace_layout's offsets, global scratch after.
 */
#ifndef LOOM_CODEGEN_GPU_CODEGEN_H
#define LOOM_CODEGEN_GPU_CODEGEN_H

#include "kernel/kernel.h"

typedef enum loom_gpu_dialect { LOOM_GPU_OPENCL = 0, LOOM_GPU_CUDA } loom_gpu_dialect;

/* Threads per group of every generated function (a multiple of 16, the
 * widest vector width, so row-reduction lanes stay within one thread). */
#define LOOM_GPU_LOCAL 64
/* Scratch rows of a part up to this many bytes live in local memory. */
#define LOOM_GPU_LOCAL_SCRATCH_BYTES 16384
/* Most groups of one launch (groups loop over the remaining tiles). */
#define LOOM_GPU_MAX_GROUPS 4096
/* ... and of a part whose scratch lives in the workspace. */
#define LOOM_GPU_MAX_SCRATCH_GROUPS 256

/* "opencl" or "cuda". */
const char *loom_gpu_dialect_name(loom_gpu_dialect d);

/* Generates the source of n kernels into *source (malloc'ed). */
loom_status loom_codegen_gpu(loom_ctx *ctx, loom_gpu_dialect d, const loom_kernel *kernels,
                             int32_t n, char **source);

/* One launch of a generated function: fn over `groups` groups of
 * LOOM_GPU_LOCAL threads. shared_bytes: the group-shared buffers of a
 * phase launch (lm_red, lm_col, lm_scr; 0 where absent). CUDA declares
 * them in the function; OpenCL takes each present one as a trailing
 * __local argument the host sets to that size (gpu_internal.h says why). */
typedef struct loom_gpu_launch {
  char fn[64];
  int64_t groups;
  int64_t shared_bytes[3];
} loom_gpu_launch;

/* The launches that run kernel k, in order (*out malloc'ed; *n may be 0),
 * and the workspace bytes they need. */
loom_status loom_gpu_launches(loom_ctx *ctx, const loom_kernel *k, loom_gpu_launch **out,
                              int32_t *n, int64_t *workspace_bytes);

#endif

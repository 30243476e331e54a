/*
 * Private to the GPU renderer (gpu_codegen.c, gpu_dialect.c): the table
 * of what differs between OpenCL C and CUDA C. Everything else (the
 * lowering, the expressions, through the C renderer's c_expr.c) is
 * written once.
 */
#ifndef LOOM_CODEGEN_GPU_INTERNAL_H
#define LOOM_CODEGEN_GPU_INTERNAL_H

#include "codegen/c_internal.h"
#include "codegen/gpu_codegen.h"

typedef struct gpu_dialect {
  const char *name;
  /* The first lines: extensions, fixed-width integer types, limits,
   * NaN and infinity, the f32 math names the C renderer uses (fabsf,
   * sqrtf, fmaf, copysignf) where the dialect spells them otherwise. */
  const char *header;
  const char *fn;          /* qualifiers of a helper function */
  const char *kernel;      /* qualifiers and return type of a launched function */
  const char *global;      /* pointer qualifier: global memory */
  const char *shared;      /* declaration qualifier: group-shared memory */
  const char *shared_ptr;  /* pointer qualifier: into group-shared memory */
  const char *restrict_kw; /* restrict */
  const char *lid;         /* this thread's index in its group (int) */
  const char *gid;         /* this group's index (int64_t) */
  const char *ngroups;     /* groups in the launch (int64_t) */
  const char *barrier;     /* every thread of the group, global and shared memory */
  /* A phase launch's shared memory comes as trailing arguments the host
   * sizes (loom_gpu_launch.shared_bytes), not as declarations: PoCL's
   * CPU device lets work-groups that run at once on different threads
   * share a kernel-scope __local array handed to a helper function. */
  bool shared_as_args;
} gpu_dialect;

const gpu_dialect *loom_gpu_dialect_get(loom_gpu_dialect d);

/* The dialect's header and the lm_* helpers generated code calls (the
 * kernel IR's f32 exp, tanh and sigmoid: kernel/kmath.h's text). */
void loom_gpu_put_prelude(cg_buf *b, const gpu_dialect *d);

#endif

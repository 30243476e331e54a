/*
 * The harness of the generated-code tests (test_codegen*.c): kernels built
 * by hand in the kernel IR (kernel.h), then run through generated C (the
 * jit) with 1, 2 and 3 threads, through the GPU renderer on OpenCL (PoCL
 * here) and CUDA (NVRTC compiles them for sm_90; run where a device is),
 * each against the kernel interpreter. The kernel cache is a private
 * temporary directory (tests/common.c), never the user's.
 */
#ifndef LOOM_TESTS_CODEGEN_CHECK_H
#define LOOM_TESTS_CODEGEN_CHECK_H

#include "common.h"

#include "kernel/kernel.h"
#include "runtime/jit.h"

#include <stdlib.h>
#include <string.h>

extern loom_ctx *cg_ctx; /* made by codegen_check_init */
extern bool cg_quick;    /* LOOM_TEST_QUICK: smaller sizes */
extern loom_test_rng cg_rng;

/* Makes cg_ctx; name prefixes the lines the harness prints. */
void codegen_check_init(const char *name);
/* Prints what ran on the GPU renderers, frees cg_ctx; loom_test_finish's status. */
int codegen_check_finish(void);

/* ---- building kernels ------------------------------------------------------ */

static inline void *kb_grow(void *p, int32_t n, size_t elem) {
  void *q = realloc(p, elem * (size_t)(n + 1));
  if (!q) abort(); /* test code: out of memory is fatal */
  memset((char *)q + elem * (size_t)n, 0, elem);
  return q;
}

static inline void kb_init(loom_kernel *k, const char *name) {
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
}

static inline int32_t kb_arg(loom_kernel *k, loom_dtype dt, int64_t numel, bool out, bool temp) {
  k->args = kb_grow(k->args, k->n_args, sizeof *k->args);
  k->args[k->n_args] =
      (loom_karg){.value = k->n_args, .dtype = dt, .is_output = out, .temp = temp, .numel = numel};
  return k->n_args++;
}

static inline int32_t kb_expr(loom_kernel *k, loom_kexpr e) {
  k->exprs = kb_grow(k->exprs, k->n_exprs, sizeof *k->exprs);
  k->exprs[k->n_exprs] = e;
  return k->n_exprs++;
}

static inline int32_t kb_load(loom_kernel *k, int32_t arg, loom_kmap m) {
  return kb_expr(
      k, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = k->args[arg].dtype, .arg = arg, .map = m});
}
static inline int32_t kb_const(loom_kernel *k, loom_dtype dt, double c) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_CONST, .dtype = dt, .c = c});
}
static inline int32_t kb_index(loom_kernel *k, loom_dtype dt, loom_kmap m) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = dt, .map = m});
}
static inline int32_t kb_op(loom_kernel *k, loom_op op, loom_dtype dt, int32_t n, int32_t a0,
                            int32_t a1, int32_t a2) {
  return kb_expr(
      k, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = dt, .op = op, .n_a = n, .a = {a0, a1, a2}});
}
static inline int32_t kb_reg(loom_kernel *k, loom_dtype dt, int32_t reg) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_REG, .dtype = dt, .reg = reg});
}
static inline int32_t kb_scratch(loom_kernel *k, int32_t s) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_SCRATCH, .dtype = LOOM_DTYPE_F32, .scratch = s});
}

static inline int32_t kb_part(loom_kernel *k, int32_t pr, const int64_t *ps, int32_t rr,
                              const int64_t *rs, int64_t rpt, int32_t vw, int32_t regs,
                              int32_t scratch, int32_t phase) {
  k->parts = kb_grow(k->parts, k->n_parts, sizeof *k->parts);
  loom_kpart *p = &k->parts[k->n_parts];
  p->p_rank = pr;
  p->r_rank = rr;
  for (int32_t i = 0; i < pr; i++)
    p->p_shape[i] = ps[i];
  for (int32_t j = 0; j < rr; j++)
    p->r_shape[j] = rs[j];
  p->sched = (loom_kschedule){.rows_per_tile = rpt, .vector_width = vw};
  p->n_regs = regs;
  p->n_scratch = scratch;
  p->phase = phase;
  return k->n_parts++;
}

static inline int32_t kb_stage(loom_kernel *k, int32_t part, loom_kstage_kind kind) {
  loom_kpart *p = &k->parts[part];
  p->stages = kb_grow(p->stages, p->n_stages, sizeof *p->stages);
  p->stages[p->n_stages].kind = kind;
  return p->n_stages++;
}

static inline void kb_out(loom_kernel *k, int32_t part, int32_t stage, loom_kdst_kind dst,
                          int32_t expr, int32_t target, loom_kmap m, loom_op combine) {
  loom_kstage *st = &k->parts[part].stages[stage];
  st->out = kb_grow(st->out, st->n_out, sizeof *st->out);
  st->out[st->n_out++] =
      (loom_kout){.dst = dst, .expr = expr, .target = target, .map = m, .combine = combine};
}

#define MAP(b, ...) ((loom_kmap){.base = (b), __VA_ARGS__})
#define I64S(...) ((const int64_t[]){__VA_ARGS__})

/* Argument buffers: inputs filled by the caller, outputs pre-filled with a
 * pattern so that an element the kernel forgets shows up. */
#define MAX_ARGS 96
typedef struct bufs {
  int32_t n;
  void *p[MAX_ARGS];
  size_t bytes[MAX_ARGS];
} bufs;

void bufs_alloc(const loom_kernel *k, bufs *b);
void bufs_copy(const loom_kernel *k, const bufs *src, bufs *dst);
void bufs_free(bufs *b);

/* Generated C of ks[0..n) through the jit (print: the source to stdout). */
loom_jit_module *codegen_compile(const loom_kernel *ks, int32_t n, bool print);
/* Runs kernel k of m on b with nt threads (a workspace filled with junk). */
void codegen_run(loom_jit_module *m, const loom_kernel *k, bufs *b, int32_t nt);

/* Runs k on the interpreter and generated with 1, 2, 3 threads on inputs
 * `in` (and on the GPU renderers); checks every output bitwise equal.
 * Leaves the generated result of the last run in `in` (outputs). Returns
 * false on a mismatch. */
bool check_kernel(const loom_kernel *k, bufs *in, bool print);

void fill_f32(void *p, int64_t n, double lo, double hi);
bool close_rel(double got, double want, double tol);

#endif

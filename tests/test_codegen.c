/* Generated C against the kernel interpreter: hand-built kernels (element-
 * wise with broadcasts and bool/i64 operands, softmax with scratch and row
 * reductions, column reductions over many tiles with a temp read by a later
 * phase, iota, dropout over consecutive and strided counters, several
 * parts, R = 1, odd sizes, nested R loops, every element-wise op and cast,
 * the kernel IR's f32 exp/tanh/sigmoid and the fast erf path over a wide
 * range of inputs) are
 * generated, compiled through the jit and run with 1, 2 and 3 threads.
 * Results equal the interpreter bit for bit, are identical across thread
 * counts, and match values computed here directly (the op table's scalar
 * functions, loom_dropout_keep, sums in double). The kernel cache is a
 * private temporary directory (tests/common.c), never the user's. */
#include "common.h"

#include "codegen/c_codegen.h"
#include "codegen/gpu_codegen.h"
#include "ir/dtype.h"
#include "kernel/interp.h"
#include "kernel/kmath.h"
#include "ops/op.h"
#include "rng/philox.h"
#include "runtime/jit.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/opencl/ocl.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static loom_ctx *ctx;
static bool quick;

/* ---- building kernels ------------------------------------------------------ */

static void *grow(void *p, int32_t n, size_t elem) {
  void *q = realloc(p, elem * (size_t)(n + 1));
  if (!q) abort(); /* test code: out of memory is fatal */
  memset((char *)q + elem * (size_t)n, 0, elem);
  return q;
}

static void kb_init(loom_kernel *k, const char *name) {
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
}

static int32_t kb_arg(loom_kernel *k, loom_dtype dt, int64_t numel, bool out, bool temp) {
  k->args = grow(k->args, k->n_args, sizeof *k->args);
  k->args[k->n_args] = (loom_karg){.value = k->n_args, .dtype = dt, .is_output = out,
                                   .temp = temp, .numel = numel};
  return k->n_args++;
}

static int32_t kb_expr(loom_kernel *k, loom_kexpr e) {
  k->exprs = grow(k->exprs, k->n_exprs, sizeof *k->exprs);
  k->exprs[k->n_exprs] = e;
  return k->n_exprs++;
}

static int32_t kb_load(loom_kernel *k, int32_t arg, loom_kmap m) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = k->args[arg].dtype, .arg = arg,
                                 .map = m});
}
static int32_t kb_const(loom_kernel *k, loom_dtype dt, double c) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_CONST, .dtype = dt, .c = c});
}
static int32_t kb_index(loom_kernel *k, loom_dtype dt, loom_kmap m) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = dt, .map = m});
}
static int32_t kb_op(loom_kernel *k, loom_op op, loom_dtype dt, int32_t n, int32_t a0, int32_t a1,
                     int32_t a2) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = dt, .op = op, .n_a = n,
                                 .a = {a0, a1, a2}});
}
static int32_t kb_reg(loom_kernel *k, loom_dtype dt, int32_t reg) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_REG, .dtype = dt, .reg = reg});
}
static int32_t kb_scratch(loom_kernel *k, int32_t s) {
  return kb_expr(k, (loom_kexpr){.kind = LOOM_KX_SCRATCH, .dtype = LOOM_DTYPE_F32, .scratch = s});
}

static int32_t kb_part(loom_kernel *k, int32_t pr, const int64_t *ps, int32_t rr,
                       const int64_t *rs, int64_t rpt, int32_t vw, int32_t regs,
                       int32_t scratch, int32_t phase) {
  k->parts = grow(k->parts, k->n_parts, sizeof *k->parts);
  loom_kpart *p = &k->parts[k->n_parts];
  p->p_rank = pr;
  p->r_rank = rr;
  for (int32_t i = 0; i < pr; i++) p->p_shape[i] = ps[i];
  for (int32_t j = 0; j < rr; j++) p->r_shape[j] = rs[j];
  p->sched = (loom_kschedule){.rows_per_tile = rpt, .vector_width = vw};
  p->n_regs = regs;
  p->n_scratch = scratch;
  p->phase = phase;
  return k->n_parts++;
}

static int32_t kb_stage(loom_kernel *k, int32_t part, loom_kstage_kind kind) {
  loom_kpart *p = &k->parts[part];
  p->stages = grow(p->stages, p->n_stages, sizeof *p->stages);
  p->stages[p->n_stages].kind = kind;
  return p->n_stages++;
}

static void kb_out(loom_kernel *k, int32_t part, int32_t stage, loom_kdst_kind dst, int32_t expr,
                   int32_t target, loom_kmap m, loom_op combine) {
  loom_kstage *st = &k->parts[part].stages[stage];
  st->out = grow(st->out, st->n_out, sizeof *st->out);
  st->out[st->n_out++] = (loom_kout){.dst = dst, .expr = expr, .target = target, .map = m,
                                     .combine = combine};
}

#define MAP(b, ...) ((loom_kmap){.base = (b), __VA_ARGS__})
#define I64S(...) ((const int64_t[]){__VA_ARGS__})

/* ---- running ----------------------------------------------------------------- */

/* Argument buffers: inputs filled by the caller, outputs pre-filled with a
 * pattern so that an element the kernel forgets shows up. */
#define MAX_ARGS 96
typedef struct bufs {
  int32_t n;
  void *p[MAX_ARGS];
  size_t bytes[MAX_ARGS];
} bufs;

static void bufs_alloc(const loom_kernel *k, bufs *b) {
  memset(b, 0, sizeof *b);
  b->n = k->n_args;
  for (int32_t i = 0; i < k->n_args; i++) {
    b->bytes[i] = (size_t)k->args[i].numel * loom_dtype_size(k->args[i].dtype);
    b->p[i] = calloc(b->bytes[i] ? b->bytes[i] : 1, 1);
    if (k->args[i].is_output) memset(b->p[i], 0xa5, b->bytes[i]);
  }
}

static void bufs_copy(const loom_kernel *k, const bufs *src, bufs *dst) {
  bufs_alloc(k, dst);
  for (int32_t i = 0; i < k->n_args; i++) memcpy(dst->p[i], src->p[i], src->bytes[i]);
}

static void bufs_free(bufs *b) {
  for (int32_t i = 0; i < b->n; i++) free(b->p[i]);
}

static loom_jit_module *compile(const loom_kernel *ks, int32_t n, bool print) {
  char *src = NULL;
  loom_jit_module *m = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, ks, n, &src));
  if (!src) return NULL;
  if (print) printf("%s\n", src);
  CHECK_OK(ctx, loom_jit_load(ctx, src, &m, NULL));
  free(src);
  return m;
}

static void run_generated(loom_jit_module *m, const loom_kernel *k, bufs *b, int32_t nt) {
  loom_kernel_fn fn = (loom_kernel_fn)loom_jit_symbol(m, k->name);
  CHECK(fn != NULL);
  if (!fn) return;
  int64_t wsb = loom_kernel_workspace_bytes(k, nt);
  CHECK(wsb >= 0);
  size_t sz = (size_t)((wsb + 63) / 64 * 64 + 64);
  void *ws = aligned_alloc(64, sz);
  memset(ws, 0x5a, sz); /* contents on entry must not matter */
  fn(b->p, ws, nt);
  free(ws);
}

static void gpu_check(const loom_kernel *k, const bufs *in, const bufs *ref, bool loose);
static bool has_libm_op(const loom_kernel *k);
static void cuda_check(const loom_kernel *k, const bufs *in, const bufs *ref, bool loose);

/* Runs k on the interpreter and generated with 1, 2, 3 threads on inputs
 * `in`; checks every output bitwise equal. Leaves the generated result of
 * the last run in `in` (outputs). Returns false on a mismatch. */
static bool check_kernel(const loom_kernel *k, bufs *in, bool print) {
  CHECK_OK(ctx, loom_kernel_verify(ctx, k));
  const char *want = getenv("LOOM_TEST_PRINT");
  loom_jit_module *m = compile(k, 1, print || (want && strcmp(want, k->name) == 0));
  if (!m) return false;
  bufs ref;
  bufs_copy(k, in, &ref);
  CHECK_OK(ctx, loom_kernel_interpret(ctx, k, ref.p));
  gpu_check(k, in, &ref, has_libm_op(k));
  cuda_check(k, in, &ref, has_libm_op(k));
  bool ok = true;
  for (int32_t nt = 1; nt <= 3; nt++) {
    bufs got;
    bufs_copy(k, in, &got);
    run_generated(m, k, &got, nt);
    for (int32_t i = 0; i < k->n_args; i++) {
      if (!k->args[i].is_output) continue;
      bool same = memcmp(got.p[i], ref.p[i], got.bytes[i]) == 0;
      CHECK(same);
      if (!same) {
        ok = false;
        size_t es = loom_dtype_size(k->args[i].dtype);
        for (int64_t e = 0; e < k->args[i].numel; e++)
          if (memcmp((char *)got.p[i] + e * es, (char *)ref.p[i] + e * es, es)) {
            fprintf(stderr, "  %s a%d[%lld] (%d threads): got %.9g want %.9g\n", k->name, i,
                    (long long)e, nt, loom_load(k->args[i].dtype, got.p[i], e),
                    loom_load(k->args[i].dtype, ref.p[i], e));
            break;
          }
      }
    }
    if (nt == 3)
      for (int32_t i = 0; i < k->n_args; i++) memcpy(in->p[i], got.p[i], got.bytes[i]);
    bufs_free(&got);
  }
  bufs_free(&ref);
  loom_jit_free(m);
  return ok;
}

/* ---- the same kernels on GPUs, through the GPU renderer: CUDA (NVRTC, and run
 * where there is a device) and OpenCL (PoCL here) ---------------------------- */

static bool same_as_interpreter(const char *which, const loom_kernel *k, const bufs *got,
                                const bufs *ref, bool loose);

static int cuda_state; /* 0: not tried; 1: NVRTC present; -1: none (skipped) */
static int cuda_kernels;
static int cu_state; /* 0: not tried; 1: a CUDA device; -1: none (skipped) */
static loom_cu *cu_dev;
static int cu_kernels, cu_exact;

/* Runs k on the CUDA device: the same buffers through device memory. */
static void cuda_run(const loom_kernel *k, const char *src, const bufs *in, const bufs *ref,
                     bool loose) {
  if (cu_state == 0) {
    if (!loom_test_backend_selected("cuda")) {
      cu_state = -1;
      printf("test_codegen: CUDA runs skipped: not in LOOM_TEST_BACKENDS\n");
    } else {
      cu_state = loom_cu_get(ctx, &cu_dev) == LOOM_STATUS_OK ? 1 : -1;
      if (cu_state < 0) printf("test_codegen: CUDA runs skipped: %s\n", loom_ctx_error(ctx));
      else printf("test_codegen: CUDA runs on %s\n", cu_dev->name);
    }
  }
  if (cu_state < 0) return;
  loom_cu_kernels *m = NULL;
  CHECK_OK(ctx, loom_cu_module_build(ctx, cu_dev, src, &m, NULL));
  if (!m) return;
  bufs got;
  bufs_copy(k, in, &got);
  loom_cu_deviceptr dev[MAX_ARGS] = {0};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; !st && i < k->n_args; i++) {
    if (k->args[i].temp) continue;
    st = loom_cu_alloc(ctx, cu_dev, got.bytes[i], &dev[i]);
    if (!st) st = loom_cu_to_device(ctx, cu_dev, dev[i], got.p[i], got.bytes[i]);
  }
  if (!st) st = loom_cu_run(ctx, m, k, dev);
  for (int32_t i = 0; !st && i < k->n_args; i++)
    if (k->args[i].is_output) st = loom_cu_to_host(ctx, cu_dev, got.p[i], dev[i], got.bytes[i]);
  if (!st) st = loom_cu_sync(ctx, cu_dev);
  CHECK_OK(ctx, st);
  if (!st) {
    cu_kernels++;
    cu_exact += same_as_interpreter("CUDA", k, &got, ref, loose);
  }
  for (int32_t i = 0; i < k->n_args; i++) loom_cu_free(cu_dev, dev[i]);
  bufs_free(&got);
  loom_cu_module_free(m);
}

/* The CUDA C of k must compile with NVRTC for sm_90 (no GPU needed),
 * every launch's function an entry of the PTX; where there is a CUDA
 * device, k also runs there against the interpreter. */
static void cuda_check(const loom_kernel *k, const bufs *in, const bufs *ref, bool loose) {
  char ver[32];
  if (cuda_state == 0) {
    cuda_state = loom_nvrtc_version(ctx, ver, sizeof ver) == LOOM_STATUS_OK ? 1 : -1;
    if (cuda_state < 0) printf("test_codegen: CUDA (NVRTC) skipped: %s\n", loom_ctx_error(ctx));
    else printf("test_codegen: CUDA C compiled with NVRTC %s for sm_90\n", ver);
  }
  if (cuda_state < 0) return;
  char *src = NULL, *ptx = NULL;
  CHECK_OK(ctx, loom_codegen_gpu(ctx, LOOM_GPU_CUDA, k, 1, &src));
  if (src) CHECK_OK(ctx, loom_nvrtc_compile(ctx, src, 90, &ptx));
  loom_gpu_launch *l = NULL;
  int32_t n = 0;
  int64_t ws = 0;
  CHECK_OK(ctx, loom_gpu_launches(ctx, k, &l, &n, &ws));
  for (int32_t i = 0; ptx && i < n; i++) {
    char entry[96];
    snprintf(entry, sizeof entry, ".entry %s(", l[i].fn);
    CHECK(strstr(ptx, entry) != NULL);
  }
  cuda_kernels += ptx != NULL;
  if (src && ptx) cuda_run(k, src, in, ref, loose);
  free(l);
  free(src);
  free(ptx);
}

/* True if every output of got is the interpreter's `ref` bit for bit;
 * else checks each differs only as allowed (`loose`: ops the device's
 * library computes in double, a last-bit difference after rounding; NaN
 * signs and payloads). */
static bool same_as_interpreter(const char *which, const loom_kernel *k, const bufs *got,
                                const bufs *ref, bool loose) {
  bool exact = true;
  for (int32_t i = 0; i < k->n_args; i++) {
    if (!k->args[i].is_output) continue;
    size_t es = loom_dtype_size(k->args[i].dtype);
    for (int64_t e = 0; e < k->args[i].numel; e++) {
      const void *g = (char *)got->p[i] + e * es, *r = (char *)ref->p[i] + e * es;
      if (memcmp(g, r, es) == 0) continue;
      exact = false;
      double gv = loom_load(k->args[i].dtype, got->p[i], e), rv = loom_load(k->args[i].dtype, ref->p[i], e);
      /* a NaN's sign and payload are not specified by either library */
      double tol = k->args[i].dtype == LOOM_DTYPE_F32 ? 2.5e-7 : 1e-15;
      bool ok = (gv != gv && rv != rv) ||
                (loose && loom_dtype_is_float(k->args[i].dtype) && fabs(gv - rv) <= tol * fabs(rv) + 1e-300);
      CHECK(ok);
      if (!ok) {
        fprintf(stderr, "  %s %s a%d[%lld]: got %.9g want %.9g\n", which, k->name, i, (long long)e, gv, rv);
        break;
      }
    }
  }
  return exact;
}

static int gpu_state; /* 0: not tried; 1: device ready; -1: none (skipped) */
static loom_ocl *gpu_dev;
static int gpu_kernels, gpu_exact;

/* Runs k through generated OpenCL C on inputs `in`; every output must equal
 * the interpreter's `ref` bit for bit, but for ops the OpenCL C library
 * computes in double (log, erf, pow, ...: not correctly rounded there
 * either, so a last-bit difference after rounding to f32 is allowed when
 * `loose`). */
static void gpu_check(const loom_kernel *k, const bufs *in, const bufs *ref, bool loose) {
  if (gpu_state == 0) {
    if (!loom_test_backend_selected("opencl")) {
      gpu_state = -1;
      printf("test_codegen: OpenCL skipped: not in LOOM_TEST_BACKENDS\n");
    } else {
      gpu_state = loom_ocl_get(ctx, &gpu_dev) == LOOM_STATUS_OK ? 1 : -1;
      if (gpu_state < 0) printf("test_codegen: OpenCL skipped: %s\n", loom_ctx_error(ctx));
      else printf("test_codegen: OpenCL on %s\n", loom_ocl_device_name(gpu_dev));
    }
  }
  if (gpu_state < 0) return;
  char *src = NULL;
  loom_ocl_module *m = NULL;
  CHECK_OK(ctx, loom_codegen_gpu(ctx, LOOM_GPU_OPENCL, k, 1, &src));
  const char *want = getenv("LOOM_TEST_PRINT_GPU");
  if (src && want && strcmp(want, k->name) == 0) printf("%s\n", src);
  if (src) CHECK_OK(ctx, loom_ocl_module_build(ctx, gpu_dev, src, &m, NULL));
  free(src);
  if (!m) return;
  bufs got;
  bufs_copy(k, in, &got);
  CHECK_OK(ctx, loom_ocl_run(ctx, m, k, got.p));
  bool exact = same_as_interpreter("OpenCL", k, &got, ref, loose);
  gpu_kernels++;
  gpu_exact += exact;
  bufs_free(&got);
  loom_ocl_module_free(m);
}

/* True if k has an op whose double form OpenCL's library may round
 * differently from glibc's. */
static bool has_libm_op(const loom_kernel *k) {
  for (int32_t e = 0; e < k->n_exprs; e++) {
    const loom_kexpr *x = &k->exprs[e];
    if (x->kind != LOOM_KX_OP) continue;
    switch (x->op) {
    case LOOM_OP_ERF: case LOOM_OP_POW: case LOOM_OP_SIN: case LOOM_OP_COS:
    case LOOM_OP_RSQRT: return true;
    case LOOM_OP_SIGMOID: case LOOM_OP_TANH: case LOOM_OP_EXP: /* f32: kmath.h's, exact */
    case LOOM_OP_LOG:
      if (x->dtype != LOOM_DTYPE_F32 || k->exprs[x->a[0]].dtype != LOOM_DTYPE_F32) return true;
      break;
    default: break;
    }
  }
  return false;
}

static loom_test_rng rng = {42};

static void fill_f32(void *p, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)loom_test_uniform(&rng, lo, hi);
}

static bool close_rel(double got, double want, double tol) {
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* ---- the kernels ------------------------------------------------------------ */

/* Element-wise over [37, 53]: broadcast loads (a row vector, a scalar, a
 * column of i64), a bool mask, select, casts, i64 saturation, i32. */
static void test_elementwise(void) {
  const int64_t P = 37, R = 53, N = P * R;
  loom_kernel k;
  kb_init(&k, "k_elementwise");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t aw = kb_arg(&k, LOOM_DTYPE_F32, R, false, false);
  int32_t ab = kb_arg(&k, LOOM_DTYPE_F32, 1, false, false);
  int32_t am = kb_arg(&k, LOOM_DTYPE_BOOL, N, false, false);
  int32_t ai = kb_arg(&k, LOOM_DTYPE_I64, P, false, false);
  int32_t ao = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t aoi = kb_arg(&k, LOOM_DTYPE_I64, N, true, false);
  int32_t aob = kb_arg(&k, LOOM_DTYPE_BOOL, N, true, false);
  int32_t ao32 = kb_arg(&k, LOOM_DTYPE_I32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t w = kb_load(&k, aw, MAP(0, .r = {1}));
  int32_t b = kb_load(&k, ab, MAP(0));
  int32_t m = kb_load(&k, am, full);
  int32_t id = kb_load(&k, ai, MAP(0, .p = {1}));
  int32_t xw = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, w, 0);
  int32_t t = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2, xw, b, 0);
  int32_t idf = kb_op(&k, LOOM_OP_CAST, LOOM_DTYPE_F32, 1, id, 0, 0);
  int32_t sel = kb_op(&k, LOOM_OP_SELECT, LOOM_DTYPE_F32, 3, m, t, idf);
  int32_t j = kb_index(&k, LOOM_DTYPE_I64, MAP(0, .r = {1}));
  int32_t si = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_I64, 2, id, j, 0);
  int32_t zero = kb_const(&k, LOOM_DTYPE_F32, 0.0);
  int32_t gt = kb_op(&k, LOOM_OP_GT, LOOM_DTYPE_BOOL, 2, x, zero, 0);
  int32_t i32 = kb_op(&k, LOOM_OP_CAST, LOOM_DTYPE_I32, 1, id, 0, 0);
  int32_t three = kb_const(&k, LOOM_DTYPE_I32, 3.0);
  int32_t m32 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_I32, 2, i32, three, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 5, 8, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, st, LOOM_KDST_STORE, sel, ao, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, si, aoi, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, gt, aob, full, LOOM_OP_ADD);
  kb_out(&k, part, st, LOOM_KDST_STORE, m32, ao32, full, LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -2, 2);
  fill_f32(in.p[aw], R, -2, 2);
  fill_f32(in.p[ab], 1, -2, 2);
  uint8_t *mk = in.p[am];
  int64_t *iv = in.p[ai];
  for (int64_t e = 0; e < N; e++) mk[e] = (uint8_t)(loom_test_uniform(&rng, 0, 1) < 0.5);
  for (int64_t p = 0; p < P; p++)
    iv[p] = p % 3 == 0 ? INT64_MAX - 20 : p % 3 == 1 ? -(int64_t)p * 1000003 : (int64_t)1 << 40;
  check_kernel(&k, &in, false);
  const float *xf = in.p[ax], *wf = in.p[aw], *bf = in.p[ab], *of = in.p[ao];
  const int64_t *oi = in.p[aoi];
  const uint8_t *ob = in.p[aob];
  const int32_t *o32 = in.p[ao32];
  int bad = 0;
  for (int64_t p = 0; p < P; p++)
    for (int64_t r = 0; r < R; r++) {
      int64_t e = p * R + r;
      float tv = (float)((float)(xf[e] * wf[r]) + bf[0]);
      float want = mk[e] ? tv : (float)(double)iv[p];
      int64_t wi = iv[p] > INT64_MAX - r ? INT64_MAX : iv[p] + r;
      int64_t c32 = iv[p] > INT32_MAX ? INT32_MAX : iv[p] < INT32_MIN ? INT32_MIN : iv[p];
      int64_t w32 = c32 * 3 > INT32_MAX ? INT32_MAX : c32 * 3 < INT32_MIN ? INT32_MIN : c32 * 3;
      bad += of[e] != want || oi[e] != wi || ob[e] != (xf[e] > 0) || o32[e] != w32;
    }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* softmax over rows: row max, exp into scratch with a row sum, divide. */
static void test_softmax(int32_t vw, int64_t rpt) {
  const int64_t P = quick ? 9 : 37, R = 1001, N = P * R;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_softmax_w%d", vw);
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t mx = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t d = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, x, mx, 0);
  int32_t ex = kb_op(&k, LOOM_OP_EXP, LOOM_DTYPE_F32, 1, d, 0, 0);
  int32_t sc = kb_scratch(&k, 0);
  int32_t sum = kb_reg(&k, LOOM_DTYPE_F32, 1);
  int32_t q = kb_op(&k, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, sc, sum, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), rpt, vw, 2, 1, 0);
  int32_t s0 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_MAXIMUM);
  int32_t s1 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s1, LOOM_KDST_SCRATCH, ex, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_ROW_REDUCE, ex, 1, MAP(0), LOOM_OP_ADD);
  int32_t s2 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s2, LOOM_KDST_STORE, q, ay, full, LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -8, 8);
  ((float *)in.p[ax])[5] = 30.0f; /* a dominant element */
  check_kernel(&k, &in, getenv("LOOM_TEST_PRINT") && vw == 8);
  const float *xf = in.p[ax], *yf = in.p[ay];
  /* against a double sum: the row sum runs in vw f32 lanes of R / vw
   * positive terms (kernel.h), so its relative error is below
   * (R / vw + vw) 2^-24; exp adds an ulp, the division half of one */
  double tol = ((double)(R / vw + vw) + 4.0) * 0x1p-24;
  int bad = 0;
  for (int64_t p = 0; p < P; p++) {
    double m = -INFINITY, s = 0;
    for (int64_t r = 0; r < R; r++) m = fmax(m, xf[p * R + r]);
    for (int64_t r = 0; r < R; r++) s += (float)exp((float)(xf[p * R + r] - (float)m));
    for (int64_t r = 0; r < R; r++) {
      double want = (float)exp((float)(xf[p * R + r] - (float)m)) / s;
      bad += fabs(yf[p * R + r] - want) > tol * want;
    }
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Column sums and maxima over 101 rows in 15 tiles, a sum of squares into
 * a temp that phase 1 reads (R = 1 there), and per-row sums reduced again
 * over rows from a SCALAR stage. */
static void test_column(int64_t P) {
  const int64_t R = 67, N = P * R;
  loom_kernel k;
  kb_init(&k, P ? "k_column" : "k_column_empty");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t asum = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t amax = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t atmp = kb_arg(&k, LOOM_DTYPE_F32, R, false, true);
  int32_t anorm = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  int32_t atot = kb_arg(&k, LOOM_DTYPE_F32, 1, true, false);
  int32_t arow = kb_arg(&k, LOOM_DTYPE_F32, P, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  loom_kmap col = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t xx = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, x, 0);
  int32_t rs = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 7, 4, 1, 0, 0);
  int32_t s0 = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, x, asum, col, LOOM_OP_ADD);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, x, amax, col, LOOM_OP_MAXIMUM);
  kb_out(&k, part, s0, LOOM_KDST_COL_REDUCE, xx, atmp, col, LOOM_OP_ADD);
  kb_out(&k, part, s0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_ADD);
  int32_t s1 = kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, s1, LOOM_KDST_COL_REDUCE, rs, atot, MAP(0), LOOM_OP_ADD);
  kb_out(&k, part, s1, LOOM_KDST_STORE, rs, arow, MAP(0, .p = {1}), LOOM_OP_ADD);
  /* phase 1: norm[r] = sqrt(tmp[r]), one element per row */
  int32_t t = kb_load(&k, atmp, MAP(0, .p = {1}));
  int32_t sq = kb_op(&k, LOOM_OP_SQRT, LOOM_DTYPE_F32, 1, t, 0, 0);
  int32_t part1 = kb_part(&k, 1, I64S(R), 0, NULL, 16, 8, 0, 0, 1);
  int32_t s10 = kb_stage(&k, part1, LOOM_KSTAGE_ROW);
  kb_out(&k, part1, s10, LOOM_KDST_STORE, sq, anorm, MAP(0, .p = {1}), LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -1, 1);
  check_kernel(&k, &in, false);
  const float *xf = in.p[ax];
  int bad = 0;
  double total = 0;
  for (int64_t r = 0; r < R; r++) {
    double s = 0, m = -INFINITY, q = 0;
    for (int64_t p = 0; p < P; p++) {
      s += xf[p * R + r];
      m = fmax(m, xf[p * R + r]);
      q += (double)(float)(xf[p * R + r] * xf[p * R + r]);
    }
    bad += !close_rel(((float *)in.p[asum])[r], s, 1e-6);
    bad += ((float *)in.p[amax])[r] != (float)m;
    bad += !close_rel(((float *)in.p[anorm])[r], sqrt(q), 1e-6);
  }
  for (int64_t p = 0; p < P; p++) {
    double s = 0;
    for (int64_t r = 0; r < R; r++) s += xf[p * R + r];
    bad += !close_rel(((float *)in.p[arow])[p], s, 1e-6);
    total += (double)((float *)in.p[arow])[p];
  }
  bad += !close_rel(((float *)in.p[atot])[0], total, 1e-6);
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* iota: f32 flat indices, and an i32 row index stored transposed (the
 * store's p strides need the p multi-index). */
static void test_iota(void) {
  const int64_t P0 = 7, P1 = 3, R = 11, N = P0 * P1 * R;
  loom_kernel k;
  kb_init(&k, "k_iota");
  int32_t af = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t ai = kb_arg(&k, LOOM_DTYPE_I32, N, true, false);
  int32_t flat = kb_index(&k, LOOM_DTYPE_F32, MAP(0, .p = {P1 * R, R}, .r = {1}));
  int32_t p0 = kb_index(&k, LOOM_DTYPE_I32, MAP(100, .p = {1, 0}));
  int32_t part = kb_part(&k, 2, I64S(P0, P1), 1, I64S(R), 2, 8, 0, 0, 0);
  int32_t s = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s, LOOM_KDST_STORE, flat, af, MAP(0, .p = {P1 * R, R}, .r = {1}), LOOM_OP_ADD);
  /* element (p0, p1, r) goes to [r][p1][p0] */
  kb_out(&k, part, s, LOOM_KDST_STORE, p0, ai, MAP(0, .p = {1, P0}, .r = {P0 * P1}), LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  check_kernel(&k, &in, false);
  int bad = 0;
  for (int64_t a = 0; a < P0; a++)
    for (int64_t b = 0; b < P1; b++)
      for (int64_t r = 0; r < R; r++) {
        bad += ((float *)in.p[af])[(a * P1 + b) * R + r] != (float)((a * P1 + b) * R + r);
        bad += ((int32_t *)in.p[ai])[r * P0 * P1 + b * P0 + a] != 100 + a;
      }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Dropout: keep = philox(seed, index + base + offset), y = keep ? x / (1-p) : 0.
 * Counters along a row are consecutive (stride 1: Philox blocks shared by
 * four elements, rows longer than a chunk) or strided (per element). */
static void test_dropout(int64_t R, int64_t stride, int64_t bval) {
  const int64_t P = quick ? 5 : 23, N = P * R;
  const double prob = 0.1;
  const uint64_t seed = 0x1234567890abcdefull, offset = 77;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_dropout_%lld_%lld", (long long)R, (long long)stride);
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t abase = kb_arg(&k, LOOM_DTYPE_I64, 1, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t am = kb_arg(&k, LOOM_DTYPE_BOOL, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t idx = kb_index(&k, LOOM_DTYPE_I64, MAP(0, .p = {R * stride}, .r = {stride}));
  int32_t base = kb_load(&k, abase, MAP(0));
  int32_t keep = kb_expr(&k, (loom_kexpr){.kind = LOOM_KX_KEEP, .dtype = LOOM_DTYPE_BOOL, .n_a = 2,
                                           .a = {idx, base}, .seed = seed, .offset = offset,
                                           .threshold = loom_dropout_threshold(prob)});
  int32_t c = kb_const(&k, LOOM_DTYPE_F64, 1.0 - prob);
  int32_t dv = kb_op(&k, LOOM_OP_DIV, LOOM_DTYPE_F32, 2, x, c, 0);
  int32_t zero = kb_const(&k, LOOM_DTYPE_F32, 0.0);
  int32_t y = kb_op(&k, LOOM_OP_SELECT, LOOM_DTYPE_F32, 3, keep, dv, zero);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 3, 8, 0, 0, 0);
  int32_t s = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, s, LOOM_KDST_STORE, y, ay, full, LOOM_OP_ADD);
  kb_out(&k, part, s, LOOM_KDST_STORE, keep, am, full, LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -3, 3);
  *(int64_t *)in.p[abase] = bval;
  check_kernel(&k, &in, false);
  int bad = 0, kept = 0;
  uint64_t thr = loom_dropout_threshold(prob);
  for (int64_t e = 0; e < N; e++) {
    bool kp = loom_dropout_keep(seed, (uint64_t)bval + offset + (uint64_t)(e * stride), thr);
    float xv = ((float *)in.p[ax])[e];
    float want = kp ? (float)((double)xv / (1.0 - prob)) : 0.0f;
    bad += ((uint8_t *)in.p[am])[e] != kp || ((float *)in.p[ay])[e] != want;
    kept += kp;
  }
  CHECK(bad == 0);
  CHECK(kept > N * 8 / 10 && kept < N * 97 / 100);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Three parts in one launch: R = 1 (no R dims), a wide row with a row
 * reduction in 16 lanes, and nested R loops over a transposed load that
 * cannot merge (with scratch and 4 lanes); rows_per_tile beyond the rows. */
static void test_multipart(void) {
  loom_kernel k;
  kb_init(&k, "k_multi");
  const int64_t P0 = 13, P1 = 5, R1 = 19, P2 = 4, R2a = 6, R2b = 5;
  int32_t a0 = kb_arg(&k, LOOM_DTYPE_F32, P0, false, false);
  int32_t a0o = kb_arg(&k, LOOM_DTYPE_F32, P0, true, false);
  int32_t a1 = kb_arg(&k, LOOM_DTYPE_F32, P1 * R1, false, false);
  int32_t a1o = kb_arg(&k, LOOM_DTYPE_F32, P1 * R1, true, false);
  int32_t a1s = kb_arg(&k, LOOM_DTYPE_F32, P1, true, false);
  int32_t a2 = kb_arg(&k, LOOM_DTYPE_F32, P2 * R2a * R2b, false, false);
  int32_t a2o = kb_arg(&k, LOOM_DTYPE_F32, P2 * R2a * R2b, true, false);
  int32_t a2s = kb_arg(&k, LOOM_DTYPE_F32, P2, true, false);
  /* part 0: y = x * 2 + 1 */
  int32_t x0 = kb_load(&k, a0, MAP(0, .p = {1}));
  int32_t two = kb_const(&k, LOOM_DTYPE_F32, 2.0), one = kb_const(&k, LOOM_DTYPE_F32, 1.0);
  int32_t y0 = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                     kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x0, two, 0), one, 0);
  int32_t p0 = kb_part(&k, 1, I64S(P0), 0, NULL, 3, 8, 0, 0, 0);
  kb_stage(&k, p0, LOOM_KSTAGE_ROW);
  kb_out(&k, p0, 0, LOOM_KDST_STORE, y0, a0o, MAP(0, .p = {1}), LOOM_OP_ADD);
  /* part 1: relu, and the row sum of tanh in 16 lanes */
  loom_kmap f1 = MAP(0, .p = {R1}, .r = {1});
  int32_t x1 = kb_load(&k, a1, f1);
  int32_t r1 = kb_op(&k, LOOM_OP_RELU, LOOM_DTYPE_F32, 1, x1, 0, 0);
  int32_t t1 = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x1, 0, 0);
  int32_t p1 = kb_part(&k, 1, I64S(P1), 1, I64S(R1), 100, 16, 1, 0, 0);
  kb_stage(&k, p1, LOOM_KSTAGE_ROW);
  kb_out(&k, p1, 0, LOOM_KDST_STORE, r1, a1o, f1, LOOM_OP_ADD);
  kb_out(&k, p1, 0, LOOM_KDST_ROW_REDUCE, t1, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, p1, LOOM_KSTAGE_SCALAR);
  kb_out(&k, p1, 1, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 0), a1s, MAP(0, .p = {1}),
         LOOM_OP_ADD);
  /* part 2: element (p, i, j) reads x[p][j][i] (transposed), scratch, min */
  loom_kmap tr = MAP(0, .p = {R2a * R2b}, .r = {1, R2a});
  loom_kmap nat = MAP(0, .p = {R2a * R2b}, .r = {R2b, 1});
  int32_t x2 = kb_load(&k, a2, tr);
  int32_t half = kb_const(&k, LOOM_DTYPE_F32, 0.5);
  int32_t h2 = kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x2, half, 0);
  int32_t s2 = kb_scratch(&k, 0);
  int32_t mn = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t y2 = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, s2, mn, 0);
  int32_t p2 = kb_part(&k, 1, I64S(P2), 2, I64S(R2a, R2b), 1, 4, 2, 1, 0);
  kb_stage(&k, p2, LOOM_KSTAGE_ROW);
  kb_out(&k, p2, 0, LOOM_KDST_SCRATCH, h2, 0, MAP(0), LOOM_OP_ADD);
  kb_out(&k, p2, 0, LOOM_KDST_ROW_REDUCE, x2, 0, MAP(0), LOOM_OP_MINIMUM);
  kb_out(&k, p2, 0, LOOM_KDST_ROW_REDUCE, x2, 1, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, p2, LOOM_KSTAGE_ROW);
  kb_out(&k, p2, 1, LOOM_KDST_STORE, y2, a2o, nat, LOOM_OP_ADD);
  kb_stage(&k, p2, LOOM_KSTAGE_SCALAR);
  kb_out(&k, p2, 2, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 1), a2s, MAP(0, .p = {1}),
         LOOM_OP_ADD);

  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[a0], P0, -3, 3);
  fill_f32(in.p[a1], P1 * R1, -3, 3);
  fill_f32(in.p[a2], P2 * R2a * R2b, -3, 3);
  check_kernel(&k, &in, false);
  int bad = 0;
  for (int64_t p = 0; p < P0; p++) {
    float xv = ((float *)in.p[a0])[p];
    bad += ((float *)in.p[a0o])[p] != (float)(xv * 2.0f) + 1.0f;
  }
  for (int64_t p = 0; p < P1; p++) {
    double s = 0;
    for (int64_t r = 0; r < R1; r++) {
      float xv = ((float *)in.p[a1])[p * R1 + r];
      bad += ((float *)in.p[a1o])[p * R1 + r] != (xv < 0 ? 0.0f : xv);
      s += (float)tanh(xv);
    }
    bad += !close_rel(((float *)in.p[a1s])[p], s, 1e-6);
  }
  for (int64_t p = 0; p < P2; p++) {
    const float *xv = (const float *)in.p[a2] + p * R2a * R2b;
    float m = INFINITY;
    double s = 0;
    for (int64_t e = 0; e < R2a * R2b; e++) {
      m = fminf(m, xv[e]);
      s += xv[e];
    }
    for (int64_t i = 0; i < R2a; i++)
      for (int64_t j = 0; j < R2b; j++)
        bad += ((float *)in.p[a2o])[p * R2a * R2b + i * R2b + j] != xv[j * R2a + i] * 0.5f - m;
    bad += !close_rel(((float *)in.p[a2s])[p], s, 1e-6);
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* ---- every element-wise op and cast against the op table --------------------- */

static const double float_vals[] = {
    0.0,   -0.0,   1.0,   -1.0,   0.5,    -2.5,   3.0,    1e-40,  -1e-40, 1e30,   -1e30,
    88.7,  -104.0, 1e-7,  2.0,    100.0,  -0.75,  7.25,   0.1,    -0.3,   12.5,   -3.0,
    INFINITY, -INFINITY, NAN,  255.5,  256.0,  -129.0, 2147483648.0, -2147483904.0,
    9.3e18, -9.3e18, 4.0, 0.25};
#define N_FLOAT_VALS ((int64_t)(sizeof float_vals / sizeof float_vals[0]))

static const int64_t int_vals[] = {0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 255, 256, -129,
                                   INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
                                   (int64_t)1 << 40, -((int64_t)1 << 40), INT64_MAX, INT64_MIN,
                                   INT64_MAX - 1, INT64_MIN + 1, 3037000500LL, 12, -12, 5};
#define N_INT_VALS ((int64_t)(sizeof int_vals / sizeof int_vals[0]))

static void fill_vals(loom_dtype dt, void *p, int64_t n, int32_t shift) {
  for (int64_t i = 0; i < n; i++) {
    if (loom_dtype_is_float(dt)) {
      loom_store(dt, p, i, float_vals[(i + shift) % N_FLOAT_VALS]);
    } else {
      int64_t v = int_vals[(i + shift) % N_INT_VALS];
      switch (dt) {
      case LOOM_DTYPE_I64: ((int64_t *)p)[i] = v; break;
      case LOOM_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(v % 3000000000LL > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v); break;
      case LOOM_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)(v & 0xff); break;
      default: ((uint8_t *)p)[i] = (uint8_t)(v & 1); break;
      }
    }
  }
}

/* Distance in ulps between two non-NaN floats (signed zeros equal). */
static int64_t ulp_dist(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  int64_t oa = ia < 0 ? -(int64_t)(ia & 0x7fffffff) : ia;
  int64_t ob = ib < 0 ? -(int64_t)(ib & 0x7fffffff) : ib;
  return oa > ob ? oa - ob : ob - oa;
}

/* out_op = op(x[, y]) for every op defined on dtype dt, R = all pairs. */
static void test_ops(loom_dtype dt) {
  bool flt = loom_dtype_is_float(dt);
  int64_t nv = flt ? N_FLOAT_VALS : N_INT_VALS;
  const int64_t R = nv * 3; /* x against three shifts of y */
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_ops_%s", loom_dtype_name(dt));
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, dt, R, false, false);
  int32_t ay = kb_arg(&k, dt, R, false, false);
  loom_kmap m = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, m), y = kb_load(&k, ay, m);
  int32_t part = kb_part(&k, 0, NULL, 1, I64S(R), 1, 8, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  int32_t n_out = 0;
  for (int32_t op = 0; op <= LOOM_OP_GE; op++) {
    const loom_op_def *d = loom_op_get((loom_op)op);
    bool unary = d->scalar1 != NULL;
    bool int_ok = op == LOOM_OP_NEG || op == LOOM_OP_ABS || op == LOOM_OP_SIGN ||
                  op == LOOM_OP_RELU || !unary;
    if (!flt && !int_ok) continue;
    bool cmp = op >= LOOM_OP_EQ;
    loom_dtype odt = cmp ? LOOM_DTYPE_BOOL : dt;
    int32_t a = kb_arg(&k, odt, R, true, false);
    int32_t e = kb_op(&k, (loom_op)op, odt, unary ? 1 : 2, x, y, 0);
    kb_out(&k, part, st, LOOM_KDST_STORE, e, a, m, LOOM_OP_ADD);
    n_out++;
  }
  CHECK(n_out > 10);
  bufs in;
  bufs_alloc(&k, &in);
  for (int32_t s = 0; s < 3; s++) {
    char *px = (char *)in.p[ax] + (size_t)(s * nv) * loom_dtype_size(dt);
    char *py = (char *)in.p[ay] + (size_t)(s * nv) * loom_dtype_size(dt);
    fill_vals(dt, px, nv, 0);
    fill_vals(dt, py, nv, 1 + 5 * s);
  }
  check_kernel(&k, &in, false);
  /* floats: also straight from the op table's scalar functions */
  if (dt == LOOM_DTYPE_F32) {
    int bad = 0;
    const float *xv = in.p[ax], *yv = in.p[ay];
    for (int32_t o = 0; o < k.parts[0].stages[0].n_out; o++) {
      const loom_kout *ko = &k.parts[0].stages[0].out[o];
      const loom_kexpr *e = &k.exprs[ko->expr];
      const loom_op_def *d = loom_op_get(e->op);
      for (int64_t r = 0; r < R; r++) {
        double v = d->scalar1 ? d->scalar1(xv[r]) : d->scalar2(xv[r], yv[r]);
        double got = loom_load(e->dtype, in.p[ko->target], r);
        double want = loom_load(e->dtype, &(float){(float)v}, 0);
        if (e->dtype == LOOM_DTYPE_BOOL) want = v != 0.0;
        /* f32 exp, tanh, sigmoid: the kernel IR's own functions, within 1,
         * 1 and 2 ulp of the op table's (kernel/kmath.h) */
        int64_t ulps = e->op == LOOM_OP_EXP || e->op == LOOM_OP_TANH ? 1
                       : e->op == LOOM_OP_SIGMOID                    ? 2
                                                                     : 0;
        if (ulps && got == got && want == want && ulp_dist((float)got, (float)want) <= ulps)
          continue;
        if (!(got == want || (got != got && want != want))) {
          if (bad++ < 5)
            fprintf(stderr, "  %s(%g, %g): got %g want %g\n", loom_op_name(e->op), xv[r], yv[r],
                    got, want);
        }
      }
    }
    CHECK(bad == 0);
  }
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* cast from dtype `from` to every other dtype. */
static void test_casts(loom_dtype from) {
  static const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I32,
                                   LOOM_DTYPE_I64, LOOM_DTYPE_U8, LOOM_DTYPE_BOOL};
  const int64_t R = loom_dtype_is_float(from) ? N_FLOAT_VALS : N_INT_VALS;
  loom_kernel k;
  char name[48];
  snprintf(name, sizeof name, "k_cast_%s", loom_dtype_name(from));
  kb_init(&k, name);
  int32_t ax = kb_arg(&k, from, R, false, false);
  loom_kmap m = MAP(0, .r = {1});
  int32_t x = kb_load(&k, ax, m);
  int32_t part = kb_part(&k, 1, I64S(1), 1, I64S(R), 1, 1, 0, 0, 0);
  int32_t st = kb_stage(&k, part, LOOM_KSTAGE_ROW);
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    int32_t a = kb_arg(&k, dts[i], R, true, false);
    kb_out(&k, part, st, LOOM_KDST_STORE, kb_op(&k, LOOM_OP_CAST, dts[i], 1, x, 0, 0), a, m,
           LOOM_OP_ADD);
  }
  bufs in;
  bufs_alloc(&k, &in);
  fill_vals(from, in.p[ax], R, 0);
  check_kernel(&k, &in, false);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* The prelude's double exp and erf (the fast erf path) stay within 2^-44
 * of libm (the generated code relies on 2^-40); the prelude's f32 exp,
 * tanh, sigmoid and log (kernel/kmath.h's text), vectorised in generated
 * code, equal kmath.h's functions compiled here bit for bit and stay within
 * 1, 1, 2 and 1 ulp of libm's double results rounded to f32; and an f32 kernel
 * over a wide range of inputs, where some elements take erf's exact
 * fallback, equals the interpreter bit for bit. */
static double ref_sigmoid(double x) {
  return loom_op_get(LOOM_OP_SIGMOID)->scalar1(x);
}

static void test_fast_math(void) {
  char *pre = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, NULL, 0, &pre));
  if (!pre) return;
  static const char wrappers[] =
      "double t_fexp(double x) { return lm_fexp(x); }\n"
      "double t_ferf(double x) { return lm_ferf(x); }\n"
      "void t_vf(int f, const float *x, float *y, int64_t n) {\n"
      "  if (f == 0) for (int64_t i = 0; i < n; i++) y[i] = lm_expf(x[i]);\n"
      "  if (f == 1) for (int64_t i = 0; i < n; i++) y[i] = lm_tanhf(x[i]);\n"
      "  if (f == 2) for (int64_t i = 0; i < n; i++) y[i] = lm_sigmoidf(x[i]);\n"
      "  if (f == 3) for (int64_t i = 0; i < n; i++) y[i] = lm_logf(x[i]);\n"
      "}\n";
  size_t n = strlen(pre) + sizeof wrappers;
  char *src = malloc(n);
  snprintf(src, n, "%s%s", pre, wrappers);
  free(pre);
  loom_jit_module *m = NULL;
  CHECK_OK(ctx, loom_jit_load(ctx, src, &m, NULL));
  free(src);
  if (!m) return;
  typedef double (*fn1)(double);
  typedef void (*fnv)(int, const float *, float *, int64_t);
  fn1 fe = (fn1)loom_jit_symbol(m, "t_fexp"), ff = (fn1)loom_jit_symbol(m, "t_ferf");
  fnv fv = (fnv)loom_jit_symbol(m, "t_vf");
  CHECK(fe && ff && fv);
  double worst[2] = {0, 0};
  int erf_sat_bad = 0;
  int64_t samples = quick ? 100000 : 1000000;
  static const double scale[] = {1e-6, 0.3, 1.0, 5.0, 20.0, 40.0, 87.0};
  for (int64_t i = 0; fe && ff && i < samples; i++) {
    double x = loom_test_uniform(&rng, -1, 1) * scale[i % 7];
    if (i & 1) x = (float)x;
    double e = exp(x), er = erf(x);
    if (x <= 88.5) worst[0] = fmax(worst[0], fabs(fe(x) - e) / e);
    if (fabs(x) <= 4.0 && er != 0)
      worst[1] = fmax(worst[1], fabs(ff(x) - er) / fabs(er));
    else if (fabs(x) > 4.0) /* saturated: +-1, which is libm's value rounded to f32 */
      erf_sat_bad += ff(x) != (double)(float)er;
  }
  bool fine = erf_sat_bad == 0 && worst[0] <= ldexp(1, -44) && worst[1] <= ldexp(1, -44);
  CHECK(fine);
  if (!fine)
    fprintf(stderr, "  fast math: worst relative errors %g %g, erf saturation %d\n", worst[0],
            worst[1], erf_sat_bad);
  /* f32 functions: random bit patterns (every exponent, NaNs, infinities,
   * subnormals) and a dense spread over the interesting range */
  const int64_t nv = quick ? 1 << 16 : 1 << 20;
  float *xs = malloc(sizeof(float) * (size_t)nv), *ys = malloc(sizeof(float) * (size_t)nv);
  CHECK(xs && ys);
  for (int64_t i = 0; xs && ys && i < nv; i++) {
    if (i % 2) {
      uint32_t u = (uint32_t)loom_test_uniform(&rng, 0, 4294967296.0);
      memcpy(&xs[i], &u, sizeof u);
    } else {
      xs[i] = (float)(loom_test_uniform(&rng, -1, 1) * scale[(i / 2) % 7] * 1.2);
    }
  }
  if (xs && ys) {
    xs[0] = 0.0f, xs[2] = -0.0f, xs[4] = INFINITY, xs[6] = -INFINITY, xs[8] = 88.72283f,
    xs[10] = -103.97f, xs[12] = -87.34f, xs[14] = 0.625f, xs[16] = -0.625f;
  }
  static const int64_t max_ulp[4] = {1, 1, 2, 1};
  for (int f = 0; fv && xs && ys && f < 4; f++) {
    fv(f, xs, ys, nv);
    int64_t bits_bad = 0, ulp_bad = 0, worst_ulp = 0;
    for (int64_t i = 0; i < nv; i++) {
      float x = xs[i];
      float mine = f == 0   ? lm_expf(x)
                   : f == 1 ? lm_tanhf(x)
                   : f == 2 ? lm_sigmoidf(x)
                            : lm_logf(x);
      bits_bad += memcmp(&mine, &ys[i], sizeof mine) != 0;
      double r = f == 0 ? exp(x) : f == 1 ? tanh(x) : f == 2 ? ref_sigmoid(x) : log(x);
      float want = (float)r;
      if (x != x || want != want) {
        ulp_bad += ys[i] == ys[i]; /* NaN in, NaN out */
        continue;
      }
      int64_t d = ulp_dist(ys[i], want);
      worst_ulp = d > worst_ulp ? d : worst_ulp;
      ulp_bad += d > max_ulp[f] || (want == 0 && signbit(want) != signbit(ys[i]));
    }
    CHECK(bits_bad == 0 && ulp_bad == 0);
    if (bits_bad || ulp_bad)
      fprintf(stderr, "  f32 fn %d: %lld differ from kmath.h, %lld beyond %lld ulp (worst %lld)\n", f,
              (long long)bits_bad, (long long)ulp_bad, (long long)max_ulp[f],
              (long long)worst_ulp);
  }
  free(xs);
  free(ys);
  loom_jit_free(m);

  /* exp, tanh, sigmoid and erf of a wide spread of f32 values, and a
   * chain (tanh of exp) */
  const int64_t P = 7, R = quick ? 3001 : 30011, N = P * R;
  loom_kernel k;
  kb_init(&k, "k_fast");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ao[5];
  for (int32_t i = 0; i < 5; i++) ao[i] = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t acol = kb_arg(&k, LOOM_DTYPE_F32, R, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t ex = kb_op(&k, LOOM_OP_EXP, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t th = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t sg = kb_op(&k, LOOM_OP_SIGMOID, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t ch = kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, ex, 0, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 2, 8, 1, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, ex, ao[0], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, th, ao[1], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, sg, ao[2], full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_STORE, kb_op(&k, LOOM_OP_ERF, LOOM_DTYPE_F32, 1, x, 0, 0), ao[4],
         full, LOOM_OP_ADD);
  kb_out(&k, part, 0, LOOM_KDST_ROW_REDUCE, ch, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_SCALAR);
  kb_out(&k, part, 1, LOOM_KDST_STORE, kb_reg(&k, LOOM_DTYPE_F32, 0), ao[3], MAP(0, .p = {R}),
         LOOM_OP_ADD);
  /* a column reduction of sigmoid(x): the buffered fast pass */
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 2, LOOM_KDST_COL_REDUCE, sg, acol, MAP(0, .r = {1}), LOOM_OP_ADD);
  bufs in;
  bufs_alloc(&k, &in);
  float *xv = in.p[ax];
  for (int64_t e = 0; e < N; e++) {
    double mag = pow(10.0, loom_test_uniform(&rng, -8, 2.1));
    xv[e] = (float)(e % 2 ? mag : -mag);
  }
  xv[0] = NAN;
  xv[1] = INFINITY;
  xv[2] = -INFINITY;
  xv[3] = -0.0f;
  check_kernel(&k, &in, false);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

/* Outputs of 8 MiB and more go through streaming stores (CG_STREAM_MIN_BYTES):
 * rows of an odd length at an odd base (unaligned heads and tails), a
 * plain stage with row-reduction lanes, and a chunked stage (erf's fast
 * path) storing two outputs. */
static void test_stream(void) {
  const int64_t P = 2051, R = 1031, N = P * R, base = 5;
  loom_kernel k;
  kb_init(&k, "k_stream");
  int32_t ax = kb_arg(&k, LOOM_DTYPE_F32, N, false, false);
  int32_t ay = kb_arg(&k, LOOM_DTYPE_F32, N + base, true, false);
  int32_t az = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  int32_t aw = kb_arg(&k, LOOM_DTYPE_F32, N, true, false);
  loom_kmap full = MAP(0, .p = {R}, .r = {1});
  int32_t x = kb_load(&k, ax, full);
  int32_t sum = kb_reg(&k, LOOM_DTYPE_F32, 0);
  int32_t y = kb_op(&k, LOOM_OP_ADD, LOOM_DTYPE_F32, 2,
                    kb_op(&k, LOOM_OP_MUL, LOOM_DTYPE_F32, 2, x, sum, 0),
                    kb_op(&k, LOOM_OP_TANH, LOOM_DTYPE_F32, 1, x, 0, 0), 0);
  int32_t z = kb_op(&k, LOOM_OP_ERF, LOOM_DTYPE_F32, 1, x, 0, 0);
  int32_t w = kb_op(&k, LOOM_OP_SUB, LOOM_DTYPE_F32, 2, z, x, 0);
  int32_t part = kb_part(&k, 1, I64S(P), 1, I64S(R), 64, 16, 1, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_ROW_REDUCE, x, 0, MAP(0), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 1, LOOM_KDST_STORE, y, ay, MAP(base, .p = {R}, .r = {1}), LOOM_OP_ADD);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 2, LOOM_KDST_STORE, z, az, full, LOOM_OP_ADD);
  kb_out(&k, part, 2, LOOM_KDST_STORE, w, aw, full, LOOM_OP_ADD);
  char *src = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, &k, 1, &src));
  CHECK(src && strstr(src, "lm_stream_f32(&a1[") && strstr(src, "lm_stream_f32(&a2[") &&
        strstr(src, "lm_stream_f32(&a3["));
  free(src);
  bufs in;
  bufs_alloc(&k, &in);
  fill_f32(in.p[ax], N, -3, 3);
  check_kernel(&k, &in, false);
  const float *yv = in.p[ay];
  int bad = 0;
  for (int64_t e = 0; e < base; e++) { /* untouched before the base */
    uint32_t u;
    memcpy(&u, &yv[e], sizeof u);
    bad += u != 0xa5a5a5a5u;
  }
  CHECK(bad == 0);
  bufs_free(&in);
  loom_kernel_clear(&k);
}

static void test_errors(void) {
  loom_kernel k;
  kb_init(&k, "k_f16");
  int32_t a = kb_arg(&k, LOOM_DTYPE_F16, 4, false, false);
  int32_t o = kb_arg(&k, LOOM_DTYPE_F16, 4, true, false);
  int32_t x = kb_load(&k, a, MAP(0, .r = {1}));
  int32_t part = kb_part(&k, 0, NULL, 1, I64S(4), 1, 1, 0, 0, 0);
  kb_stage(&k, part, LOOM_KSTAGE_ROW);
  kb_out(&k, part, 0, LOOM_KDST_STORE, x, o, MAP(0, .r = {1}), LOOM_OP_ADD);
  char *src = NULL;
  loom_status st = loom_codegen_c(ctx, &k, 1, &src);
  CHECK(st != LOOM_STATUS_OK && src == NULL && loom_ctx_error(ctx)[0]);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_codegen_c(ctx, &k, 1, NULL));
  loom_kernel_clear(&k);
  /* kernel names become C symbols */
  static const char *bad_names[] = {"", "9k", "_k", "lm_k", "k-1", "k 1"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    kb_init(&k, "k_ok");
    int32_t ai = kb_arg(&k, LOOM_DTYPE_F32, 4, false, false);
    int32_t ao = kb_arg(&k, LOOM_DTYPE_F32, 4, true, false);
    int32_t p = kb_part(&k, 0, NULL, 1, I64S(4), 1, 1, 0, 0, 0);
    kb_stage(&k, p, LOOM_KSTAGE_ROW);
    kb_out(&k, p, 0, LOOM_KDST_STORE, kb_load(&k, ai, MAP(0, .r = {1})), ao, MAP(0, .r = {1}),
           LOOM_OP_ADD);
    CHECK_OK(ctx, loom_codegen_c(ctx, &k, 1, &src));
    free(src);
    snprintf(k.name, sizeof k.name, "%s", bad_names[i]);
    loom_error_clear(ctx);
    src = NULL;
    loom_status st = loom_codegen_c(ctx, &k, 1, &src);
    CHECK(st != LOOM_STATUS_OK && src == NULL && loom_ctx_error(ctx)[0] != '\0');
    loom_kernel_clear(&k);
  }
  /* no kernels: just the prelude, which compiles */
  CHECK_OK(ctx, loom_codegen_c(ctx, NULL, 0, &src));
  loom_jit_module *m = NULL;
  if (src) CHECK_OK(ctx, loom_jit_load(ctx, src, &m, NULL));
  loom_jit_free(m);
  free(src);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  quick = getenv("LOOM_TEST_QUICK") != NULL;
  setvbuf(stdout, NULL, _IONBF, 0); /* sources printed before a crash still show */
  test_elementwise();
  test_softmax(8, 4);
  test_softmax(1, 5);
  test_column(101);
  test_column(0);
  test_iota();
  test_dropout(129, 1, ((int64_t)1 << 40) + 5);
  test_dropout(quick ? 1100 : 2053, 1, ((int64_t)1 << 40) + 5);
  test_dropout(37, 3, ((int64_t)1 << 40) + 5);
  /* Philox blocks whose low word carries into the high one, and the 2^62
   * wrap of the block number, inside a row (the vector runs leave them to
   * the scalar loop). */
  test_dropout(1024, 1, ((int64_t)1 << 34) - 2000);
  test_dropout(1024, 1, -3000);
  test_multipart();
  test_fast_math();
  test_stream();
  static const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I32,
                                   LOOM_DTYPE_I64, LOOM_DTYPE_U8, LOOM_DTYPE_BOOL};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    test_ops(dts[i]);
    test_casts(dts[i]);
  }
  test_errors();
  /* everything above was compiled into the private cache */
  const char *cache = getenv("XDG_CACHE_HOME");
  char *dir = loom_jit_cache_dir();
  CHECK(cache && strstr(cache, "/loom-test-cache-") != NULL);
  CHECK(cache && dir && strncmp(dir, cache, strlen(cache)) == 0);
  free(dir);
  loom_ctx_free(ctx);
  if (cuda_state > 0) printf("test_codegen: NVRTC compiled %d kernels' CUDA C\n", cuda_kernels);
  if (cu_state > 0)
    printf("test_codegen: CUDA ran %d kernels, %d of them bit for bit the interpreter's\n",
           cu_kernels, cu_exact);
  if (gpu_state > 0)
    printf("test_codegen: OpenCL ran %d kernels, %d of them bit for bit the interpreter's\n",
           gpu_kernels, gpu_exact);
  return loom_test_finish("test_codegen");
}

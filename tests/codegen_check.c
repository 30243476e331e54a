/* The generated-code tests' harness (codegen_check.h). */
#include "codegen_check.h"

#include "codegen/c_codegen.h"
#include "codegen/gpu_codegen.h"
#include "ir/dtype.h"
#include "kernel/interp.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/jit.h"
#include "runtime/opencl/ocl.h"

#include <math.h>
#include <stdio.h>

loom_ctx *cg_ctx;
bool cg_quick;
loom_test_rng cg_rng = {42};
static const char *test_name = "test_codegen";

void codegen_check_init(const char *name) {
  test_name = name;
  if (loom_ctx_new(&cg_ctx) != LOOM_STATUS_OK) exit(1);
  cg_quick = getenv("LOOM_TEST_QUICK") != NULL;
  setvbuf(stdout, NULL, _IONBF, 0); /* sources printed before a crash still show */
}

/* ---- running ----------------------------------------------------------------- */

void bufs_alloc(const loom_kernel *k, bufs *b) {
  memset(b, 0, sizeof *b);
  b->n = k->n_args;
  for (int32_t i = 0; i < k->n_args; i++) {
    b->bytes[i] = (size_t)k->args[i].numel * loom_dtype_size(k->args[i].dtype);
    b->p[i] = calloc(b->bytes[i] ? b->bytes[i] : 1, 1);
    if (k->args[i].is_output) memset(b->p[i], 0xa5, b->bytes[i]);
  }
}

void bufs_copy(const loom_kernel *k, const bufs *src, bufs *dst) {
  bufs_alloc(k, dst);
  for (int32_t i = 0; i < k->n_args; i++)
    memcpy(dst->p[i], src->p[i], src->bytes[i]);
}

void bufs_free(bufs *b) {
  for (int32_t i = 0; i < b->n; i++)
    free(b->p[i]);
}

loom_jit_module *codegen_compile(const loom_kernel *ks, int32_t n, bool print) {
  char *src = NULL;
  loom_jit_module *m = NULL;
  CHECK_OK(cg_ctx, loom_codegen_c(cg_ctx, ks, n, &src));
  if (!src) return NULL;
  if (print) printf("%s\n", src);
  CHECK_OK(cg_ctx, loom_jit_load(cg_ctx, src, &m, NULL));
  free(src);
  return m;
}

void codegen_run(loom_jit_module *m, const loom_kernel *k, bufs *b, int32_t nt) {
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

bool check_kernel(const loom_kernel *k, bufs *in, bool print) {
  CHECK_OK(cg_ctx, loom_kernel_verify(cg_ctx, k));
  const char *want = getenv("LOOM_TEST_PRINT");
  loom_jit_module *m = codegen_compile(k, 1, print || (want && strcmp(want, k->name) == 0));
  if (!m) return false;
  bufs ref;
  bufs_copy(k, in, &ref);
  CHECK_OK(cg_ctx, loom_kernel_interpret(cg_ctx, k, ref.p));
  gpu_check(k, in, &ref, has_libm_op(k));
  cuda_check(k, in, &ref, has_libm_op(k));
  bool ok = true;
  for (int32_t nt = 1; nt <= 3; nt++) {
    bufs got;
    bufs_copy(k, in, &got);
    codegen_run(m, k, &got, nt);
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
      for (int32_t i = 0; i < k->n_args; i++)
        memcpy(in->p[i], got.p[i], got.bytes[i]);
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
      printf("%s: CUDA runs skipped: not in LOOM_TEST_BACKENDS\n", test_name);
    } else {
      cu_state = loom_cu_get(cg_ctx, &cu_dev) == LOOM_STATUS_OK ? 1 : -1;
      if (cu_state < 0)
        printf("%s: CUDA runs skipped: %s\n", test_name, loom_ctx_error(cg_ctx));
      else
        printf("%s: CUDA runs on %s\n", test_name, cu_dev->name);
    }
  }
  if (cu_state < 0) return;
  loom_cu_kernels *m = NULL;
  CHECK_OK(cg_ctx, loom_cu_module_build(cg_ctx, cu_dev, src, &m, NULL));
  if (!m) return;
  bufs got;
  bufs_copy(k, in, &got);
  loom_cu_deviceptr dev[MAX_ARGS] = {0};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; !st && i < k->n_args; i++) {
    if (k->args[i].temp) continue;
    st = loom_cu_alloc(cg_ctx, cu_dev, got.bytes[i], &dev[i]);
    if (!st) st = loom_cu_to_device(cg_ctx, cu_dev, dev[i], got.p[i], got.bytes[i]);
  }
  if (!st) st = loom_cu_run(cg_ctx, m, k, dev);
  for (int32_t i = 0; !st && i < k->n_args; i++)
    if (k->args[i].is_output) st = loom_cu_to_host(cg_ctx, cu_dev, got.p[i], dev[i], got.bytes[i]);
  if (!st) st = loom_cu_sync(cg_ctx, cu_dev);
  CHECK_OK(cg_ctx, st);
  if (!st) {
    cu_kernels++;
    cu_exact += same_as_interpreter("CUDA", k, &got, ref, loose);
  }
  for (int32_t i = 0; i < k->n_args; i++)
    loom_cu_free(cu_dev, dev[i]);
  bufs_free(&got);
  loom_cu_module_free(m);
}

/* The CUDA C of k must compile with NVRTC for sm_90 (no GPU needed),
 * every launch's function an entry of the PTX; where there is a CUDA
 * device, k also runs there against the interpreter. */
static void cuda_check(const loom_kernel *k, const bufs *in, const bufs *ref, bool loose) {
  char ver[32];
  if (cuda_state == 0) {
    cuda_state = loom_nvrtc_version(cg_ctx, ver, sizeof ver) == LOOM_STATUS_OK ? 1 : -1;
    if (cuda_state < 0)
      printf("%s: CUDA (NVRTC) skipped: %s\n", test_name, loom_ctx_error(cg_ctx));
    else
      printf("%s: CUDA C compiled with NVRTC %s for sm_90\n", test_name, ver);
  }
  if (cuda_state < 0) return;
  char *src = NULL, *ptx = NULL;
  CHECK_OK(cg_ctx, loom_codegen_gpu(cg_ctx, LOOM_GPU_CUDA, k, 1, &src));
  if (src) CHECK_OK(cg_ctx, loom_nvrtc_compile(cg_ctx, src, 90, &ptx));
  loom_gpu_launch *l = NULL;
  int32_t n = 0;
  int64_t ws = 0;
  CHECK_OK(cg_ctx, loom_gpu_launches(cg_ctx, k, &l, &n, &ws));
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
      double gv = loom_load(k->args[i].dtype, got->p[i], e),
             rv = loom_load(k->args[i].dtype, ref->p[i], e);
      /* a NaN's sign and payload are not specified by either library */
      double tol = k->args[i].dtype == LOOM_DTYPE_F32 ? 2.5e-7 : 1e-15;
      bool ok = (gv != gv && rv != rv) || (loose && loom_dtype_is_float(k->args[i].dtype) &&
                                           fabs(gv - rv) <= tol * fabs(rv) + 1e-300);
      CHECK(ok);
      if (!ok) {
        fprintf(stderr, "  %s %s a%d[%lld]: got %.9g want %.9g\n", which, k->name, i, (long long)e,
                gv, rv);
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
      printf("%s: OpenCL skipped: not in LOOM_TEST_BACKENDS\n", test_name);
    } else {
      gpu_state = loom_ocl_get(cg_ctx, &gpu_dev) == LOOM_STATUS_OK ? 1 : -1;
      if (gpu_state < 0)
        printf("%s: OpenCL skipped: %s\n", test_name, loom_ctx_error(cg_ctx));
      else
        printf("%s: OpenCL on %s\n", test_name, loom_ocl_device_name(gpu_dev));
    }
  }
  if (gpu_state < 0) return;
  char *src = NULL;
  loom_ocl_module *m = NULL;
  CHECK_OK(cg_ctx, loom_codegen_gpu(cg_ctx, LOOM_GPU_OPENCL, k, 1, &src));
  const char *want = getenv("LOOM_TEST_PRINT_GPU");
  if (src && want && strcmp(want, k->name) == 0) printf("%s\n", src);
  if (src) CHECK_OK(cg_ctx, loom_ocl_module_build(cg_ctx, gpu_dev, src, &m, NULL));
  free(src);
  if (!m) return;
  bufs got;
  bufs_copy(k, in, &got);
  CHECK_OK(cg_ctx, loom_ocl_run(cg_ctx, m, k, got.p));
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
    case LOOM_OP_ERF:
    case LOOM_OP_POW:
    case LOOM_OP_SIN:
    case LOOM_OP_COS:
    case LOOM_OP_RSQRT: return true;
    case LOOM_OP_SIGMOID:
    case LOOM_OP_TANH:
    case LOOM_OP_EXP: /* f32: kmath.h's, exact */
    case LOOM_OP_LOG:
      if (x->dtype != LOOM_DTYPE_F32 || k->exprs[x->a[0]].dtype != LOOM_DTYPE_F32) return true;
      break;
    default: break;
    }
  }
  return false;
}

void fill_f32(void *p, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++)
    ((float *)p)[i] = (float)loom_test_uniform(&cg_rng, lo, hi);
}

bool close_rel(double got, double want, double tol) {
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

int codegen_check_finish(void) {
  if (cuda_state > 0) printf("%s: NVRTC compiled %d kernels' CUDA C\n", test_name, cuda_kernels);
  if (cu_state > 0)
    printf("%s: CUDA ran %d kernels, %d of them bit for bit the interpreter's\n", test_name,
           cu_kernels, cu_exact);
  if (gpu_state > 0)
    printf("%s: OpenCL ran %d kernels, %d of them bit for bit the interpreter's\n", test_name,
           gpu_kernels, gpu_exact);
  loom_ctx_free(cg_ctx);
  return loom_test_finish(test_name);
}

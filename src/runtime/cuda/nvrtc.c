/* NVRTC through dlopen (nvrtc.h); the few declarations Loom needs, its own. */
#include "runtime/cuda/nvrtc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtc_result; /* NVRTC_SUCCESS is 0 */
typedef struct nvrtc_prog *nvrtc_program;

static struct {
  nvrtc_result (*create)(nvrtc_program *, const char *, const char *, int, const char *const *,
                         const char *const *);
  nvrtc_result (*compile)(nvrtc_program, int, const char *const *);
  nvrtc_result (*log_size)(nvrtc_program, size_t *);
  nvrtc_result (*log)(nvrtc_program, char *);
  nvrtc_result (*ptx_size)(nvrtc_program, size_t *);
  nvrtc_result (*ptx)(nvrtc_program, char *);
  nvrtc_result (*destroy)(nvrtc_program *);
  nvrtc_result (*version)(int *, int *);
  const char *(*error_string)(nvrtc_result);
} fn;
static bool loaded;
static char load_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *try_open(void) {
  static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  for (size_t d = 0; d < sizeof homes / sizeof homes[0]; d++) {
    if (!homes[d] || !homes[d][0]) continue;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      char path[1024];
      snprintf(path, sizeof path, "%s/lib64/%s", homes[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
  }
  return NULL;
}

static void load(void) {
  void *h = try_open();
  if (!h) {
    snprintf(load_error, sizeof load_error,
             "no NVRTC (libnvrtc.so: install the CUDA toolkit or set CUDA_HOME)");
    return;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {{(void **)&fn.create, "nvrtcCreateProgram"},
              {(void **)&fn.compile, "nvrtcCompileProgram"},
              {(void **)&fn.log_size, "nvrtcGetProgramLogSize"},
              {(void **)&fn.log, "nvrtcGetProgramLog"},
              {(void **)&fn.ptx_size, "nvrtcGetPTXSize"},
              {(void **)&fn.ptx, "nvrtcGetPTX"},
              {(void **)&fn.destroy, "nvrtcDestroyProgram"},
              {(void **)&fn.version, "nvrtcVersion"},
              {(void **)&fn.error_string, "nvrtcGetErrorString"}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *s = dlsym(h, syms[i].name);
    if (!s) {
      snprintf(load_error, sizeof load_error, "NVRTC has no %s", syms[i].name);
      return;
    }
    memcpy(syms[i].slot, &s, sizeof s);
  }
  loaded = true;
}

static loom_status need(loom_ctx *ctx) {
  pthread_once(&once, load);
  return loaded ? LOOM_STATUS_OK : loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "%s", load_error);
}

loom_status loom_nvrtc_version(loom_ctx *ctx, char *out, size_t n) {
  LOOM_TRY(need(ctx));
  int major = 0, minor = 0;
  fn.version(&major, &minor);
  snprintf(out, n, "%d.%d", major, minor);
  return LOOM_STATUS_OK;
}

loom_status loom_nvrtc_compile(loom_ctx *ctx, const char *source, int arch, char **ptx) {
  *ptx = NULL;
  LOOM_TRY(need(ctx));
  nvrtc_program p = NULL;
  nvrtc_result r = fn.create(&p, source, "loom_kernels.cu", 0, NULL, NULL);
  if (r) return loom_error(ctx, LOOM_STATUS_INTERNAL, "NVRTC: %s", fn.error_string(r));
  char a[48];
  snprintf(a, sizeof a, "--gpu-architecture=compute_%d", arch);
  const char *opts[] = {a, "--fmad=false", "--std=c++17"};
  r = fn.compile(p, 3, opts);
  loom_status st = LOOM_STATUS_OK;
  if (r) {
    size_t n = 0;
    fn.log_size(p, &n);
    char *log = calloc(n + 1, 1);
    if (log) fn.log(p, log);
    st = loom_error(ctx, LOOM_STATUS_INTERNAL, "NVRTC (%s): %s\n%.3000s", a, fn.error_string(r),
                    log ? log : "");
    free(log);
  } else {
    size_t n = 0;
    fn.ptx_size(p, &n);
    *ptx = malloc(n + 1);
    if (!*ptx) st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    else if ((r = fn.ptx(p, *ptx)) != 0) {
      free(*ptx);
      *ptx = NULL;
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "NVRTC: %s", fn.error_string(r));
    } else {
      (*ptx)[n] = '\0';
    }
  }
  fn.destroy(&p);
  return st;
}

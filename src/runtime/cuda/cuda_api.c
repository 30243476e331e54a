/* The CUDA libraries' tables, from dlopen at run time (cuda_api.h). */
#include "runtime/cuda/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opens the first of names found on the loader's path, then under the
 * toolkit's prefixes ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda; lib64 and
 * lib). NULL with dlerror's last message in why. */
static void *open_library(const char *const *names, size_t n, bool search_toolkit, char *why,
                          size_t why_n) {
  why[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *e = dlerror();
    if (e && !why[0]) snprintf(why, why_n, "%s", e);
  }
  if (!search_toolkit) return NULL;
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  const char *subdirs[] = {"lib64", "lib"};
  for (size_t d = 0; d < sizeof homes / sizeof homes[0]; d++) {
    if (!homes[d] || !homes[d][0]) continue;
    for (size_t s = 0; s < 2; s++)
      for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/%s", homes[d], subdirs[s], names[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
      }
  }
  return NULL;
}

/* Fills slots[i] with symbol names[i] of h; false (naming it) if one is
 * missing. */
static bool resolve(void *h, const char *const *names, void **slots, int n, char *why,
                    size_t why_n) {
  for (int i = 0; i < n; i++) {
    slots[i] = dlsym(h, names[i]);
    if (!slots[i]) {
      snprintf(why, why_n, "%s", names[i]);
      return false;
    }
  }
  return true;
}

#define LOOM_CUDA_API_NAME(sym, ret, params) #sym,
static const char *const driver_names[] = {LOOM_CU_DRIVER_FUNCS(LOOM_CUDA_API_NAME)};
static const char *const cublas_names[] = {LOOM_CUBLAS_FUNCS(LOOM_CUDA_API_NAME)};
static const char *const nccl_names[] = {LOOM_NCCL_FUNCS(LOOM_CUDA_API_NAME)};
#undef LOOM_CUDA_API_NAME

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))
/* Each table is exactly its function pointers, in list order. */
_Static_assert(sizeof(loom_cu_driver_api) == sizeof(void (*)(void)) * N_OF(driver_names),
               "the driver table is its symbols");
_Static_assert(sizeof(loom_cublas_api) == sizeof(void (*)(void)) * N_OF(cublas_names),
               "the cuBLAS table is its symbols");
_Static_assert(sizeof(loom_nccl_api) == sizeof(void (*)(void)) * N_OF(nccl_names),
               "the NCCL table is its symbols");

typedef struct lib_table {
  const char *what;          /* "CUDA driver" */
  const char *const *libs;   /* file names to try */
  int n_libs;
  bool search_toolkit;       /* also under the toolkit's prefixes */
  const char *const *names;  /* symbols */
  int n_names;
  void *table;               /* n_names function pointers */
  pthread_once_t once;
  loom_status status;
  char error[512];
} lib_table;

static void load_table(lib_table *t, const char *override) {
  char why[400];
  void *h = NULL;
  if (override && override[0]) {
    h = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    const char *e = h ? NULL : dlerror();
    snprintf(why, sizeof why, "%s", e ? e : "");
  } else {
    h = open_library(t->libs, (size_t)t->n_libs, t->search_toolkit, why, sizeof why);
  }
  if (!h) {
    t->status = LOOM_STATUS_UNSUPPORTED;
    snprintf(t->error, sizeof t->error, "no %s: %s not found (%.300s)", t->what,
             override && override[0] ? override : t->libs[0], why);
    return;
  }
  void *slots[64];
  if (t->n_names > 64 || !resolve(h, t->names, slots, t->n_names, why, sizeof why)) {
    t->status = LOOM_STATUS_UNSUPPORTED;
    snprintf(t->error, sizeof t->error, "no %s: its library has no %.200s (too old?)", t->what,
             why);
    dlclose(h);
    return;
  }
  /* function pointers stored through their object representation */
  memcpy(t->table, slots, sizeof(void *) * (size_t)t->n_names);
}

static loom_cu_driver_api driver_api;
static loom_cublas_api cublas_api;
static loom_nccl_api nccl_api;

static const char *const driver_libs[] = {"libcuda.so.1"};
static const char *const cublas_libs[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
static const char *const nccl_libs[] = {"libnccl.so.2", "libnccl.so"};

static lib_table driver_table = {"CUDA driver", driver_libs, 1, false, driver_names,
                                 N_OF(driver_names), &driver_api, PTHREAD_ONCE_INIT, 0, ""};
static lib_table cublas_table = {"cuBLAS", cublas_libs, N_OF(cublas_libs), true, cublas_names,
                                 N_OF(cublas_names), &cublas_api, PTHREAD_ONCE_INIT, 0, ""};
static lib_table nccl_table = {"NCCL", nccl_libs, N_OF(nccl_libs), true, nccl_names,
                               N_OF(nccl_names), &nccl_api, PTHREAD_ONCE_INIT, 0, ""};

static void load_driver(void) { load_table(&driver_table, getenv("LOOM_CUDA_DRIVER_LIB")); }
static void load_cublas(void) { load_table(&cublas_table, NULL); }
static void load_nccl(void) { load_table(&nccl_table, NULL); }

static loom_status table_status(loom_ctx *ctx, const lib_table *t) {
  if (t->status) return loom_error(ctx, t->status, "%s", t->error);
  return LOOM_STATUS_OK;
}

loom_status loom_cu_driver_get(loom_ctx *ctx, const loom_cu_driver_api **out) {
  pthread_once(&driver_table.once, load_driver);
  *out = driver_table.status ? NULL : &driver_api;
  return table_status(ctx, &driver_table);
}

loom_status loom_cublas_get(loom_ctx *ctx, const loom_cublas_api **out) {
  pthread_once(&cublas_table.once, load_cublas);
  *out = cublas_table.status ? NULL : &cublas_api;
  return table_status(ctx, &cublas_table);
}

loom_status loom_nccl_get(loom_ctx *ctx, const loom_nccl_api **out) {
  pthread_once(&nccl_table.once, load_nccl);
  *out = nccl_table.status ? NULL : &nccl_api;
  return table_status(ctx, &nccl_table);
}

const char *loom_cu_error_name(const loom_cu_driver_api *api, loom_cu_result r, char *buf,
                               size_t n) {
  /* the driver's own names; these where it has none (the stub library) */
  static const struct {
    int code;
    const char *name;
  } known[] = {{1, "CUDA_ERROR_INVALID_VALUE"},          {2, "CUDA_ERROR_OUT_OF_MEMORY"},
               {3, "CUDA_ERROR_NOT_INITIALIZED"},        {34, "CUDA_ERROR_STUB_LIBRARY"},
               {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"},   {100, "CUDA_ERROR_NO_DEVICE"},
               {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},    {218, "CUDA_ERROR_INVALID_PTX"},
               {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"}, {500, "CUDA_ERROR_NOT_FOUND"},
               {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},      {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
               {719, "CUDA_ERROR_LAUNCH_FAILED"}};
  const char *name = NULL;
  if (!api || api->cuGetErrorName(r, &name) != LOOM_CU_SUCCESS || !name) {
    name = "CUDA error";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
      if (known[i].code == r) name = known[i].name;
  }
  snprintf(buf, n, "%s (%d)", name, (int)r);
  return buf;
}

const char *const *loom_cu_driver_symbols(int *n) {
  *n = N_OF(driver_names);
  return driver_names;
}
const char *const *loom_cublas_symbols(int *n) {
  *n = N_OF(cublas_names);
  return cublas_names;
}
const char *const *loom_nccl_symbols(int *n) {
  *n = N_OF(nccl_names);
  return nccl_names;
}

/* The CUDA device, modules with their PTX cache, launches and memory (cuda.h). */
#include "runtime/cuda/cuda.h"

#include "codegen/gpu_codegen.h"
#include "core/strbuf.h"
#include "ir/dtype.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/binary_cache.h"
#include "runtime/device_once.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_cu the_device;
static loom_device_once device_once = LOOM_DEVICE_ONCE_INIT;

loom_status loom_cu_check(loom_ctx *ctx, const loom_cu *cu, loom_cu_result r, const char *what) {
  if (r == LOOM_CU_SUCCESS) return LOOM_STATUS_OK;
  char b[96];
  loom_cu_error_name(cu ? cu->api : NULL, r, b, sizeof b);
  return loom_error(ctx, r == 2 ? LOOM_STATUS_OUT_OF_MEMORY : LOOM_STATUS_INTERNAL, "CUDA: %s: %s",
                    what, b);
}

/* cuInit, and the device count; the "no CUDA driver" / "no CUDA device"
 * messages. */
static loom_status driver_init(loom_ctx *ctx, const loom_cu_driver_api **api_out, int *count) {
  const loom_cu_driver_api *api;
  LOOM_TRY(loom_cu_driver_get(ctx, &api));
  *api_out = api;
  loom_cu_result r = api->cuInit(0);
  char b[96];
  if (r == LOOM_CU_ERROR_NO_DEVICE)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no CUDA device: cuInit: %s",
                      loom_cu_error_name(api, r, b, sizeof b));
  if (r != LOOM_CU_SUCCESS)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no CUDA driver: cuInit: %s",
                      loom_cu_error_name(api, r, b, sizeof b));
  *count = 0;
  r = api->cuDeviceGetCount(count);
  if (r != LOOM_CU_SUCCESS || *count <= 0)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no CUDA device: the driver finds none%s%s",
                      r ? ": " : "", r ? loom_cu_error_name(api, r, b, sizeof b) : "");
  return LOOM_STATUS_OK;
}

static loom_status open_device(loom_ctx *ctx, loom_cu *cu) {
  int count = 0;
  LOOM_TRY(driver_init(ctx, &cu->api, &count));
  const loom_cu_driver_api *api = cu->api;
  /* one process per GPU under a launcher: the GPU of the local rank */
  int32_t pick = 0;
  const char *local[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof local / sizeof local[0]; i++) {
    const char *v = getenv(local[i]);
    if (v && v[0] >= '0' && v[0] <= '9') {
      pick = (int32_t)(strtol(v, NULL, 10) % count);
      break;
    }
  }
  const char *env = getenv("LOOM_CUDA_DEVICE");
  if (env && env[0]) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 0 || v >= count)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "LOOM_CUDA_DEVICE=%s: wants a device number in [0, %d)", env, count);
    pick = (int32_t)v;
  }
  cu->ordinal = pick;
  LOOM_TRY(loom_cu_check(ctx, cu, api->cuDeviceGet(&cu->dev, pick), "cuDeviceGet"));
  api->cuDeviceGetName(cu->name, (int)sizeof cu->name - 1, cu->dev);
  int major = 0, minor = 0, sms = 0, ver = 0;
  api->cuDeviceGetAttribute(&major, LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu->dev);
  api->cuDeviceGetAttribute(&minor, LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu->dev);
  api->cuDeviceGetAttribute(&sms, LOOM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu->dev);
  api->cuDriverGetVersion(&ver);
  api->cuDeviceTotalMem_v2(&cu->memory_bytes, cu->dev);
  cu->arch = major * 10 + minor;
  cu->sms = sms;
  cu->driver_version = ver;
  LOOM_TRY(loom_cu_check(ctx, cu, api->cuDevicePrimaryCtxRetain(&cu->context, cu->dev),
                         "retaining the primary context"));
  LOOM_TRY(loom_cu_check(ctx, cu, api->cuCtxSetCurrent(cu->context), "cuCtxSetCurrent"));
  LOOM_TRY(loom_cu_check(ctx, cu, api->cuStreamCreate(&cu->stream, LOOM_CU_STREAM_NON_BLOCKING),
                         "creating the main stream"));
  LOOM_TRY(loom_cu_check(ctx, cu, api->cuStreamCreate(&cu->side, LOOM_CU_STREAM_NON_BLOCKING),
                         "creating the second stream"));
  return LOOM_STATUS_OK;
}

static loom_status open_the_device(loom_ctx *ctx, void *storage) {
  return open_device(ctx, storage);
}

loom_status loom_cu_get(loom_ctx *ctx, loom_cu **out) {
  void *dev = NULL;
  loom_status st = loom_device_once_get(ctx, &device_once, open_the_device, &the_device, &dev);
  *out = dev;
  if (st) return st;
  return loom_cu_bind(ctx, *out);
}

loom_status loom_cu_bind(loom_ctx *ctx, loom_cu *cu) {
  return loom_cu_check(ctx, cu, cu->api->cuCtxSetCurrent(cu->context), "cuCtxSetCurrent");
}

void loom_cu_describe(const loom_cu *cu, char *out, size_t n) {
  snprintf(out, n, "%s, sm_%d, %d SMs, %.0f GiB, driver %d.%d", cu->name, (int)cu->arch,
           (int)cu->sms, (double)cu->memory_bytes / (1024.0 * 1024 * 1024),
           (int)cu->driver_version / 1000, (int)(cu->driver_version % 1000) / 10);
}

loom_status loom_cu_list_devices(loom_ctx *ctx, char **text) {
  *text = NULL;
  const loom_cu_driver_api *api;
  int count = 0;
  LOOM_TRY(driver_init(ctx, &api, &count));
  loom_strbuf b = {0};
  loom_strbuf_put(&b, "%s", "");
  for (int i = 0; i < count; i++) {
    loom_cu_device d;
    char name[256] = "";
    int major = 0, minor = 0;
    if (api->cuDeviceGet(&d, i) != LOOM_CU_SUCCESS) continue;
    api->cuDeviceGetName(name, (int)sizeof name - 1, d);
    api->cuDeviceGetAttribute(&major, LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    api->cuDeviceGetAttribute(&minor, LOOM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    loom_strbuf_put(&b, "  cuda:%d %s (sm_%d%d)\n", i, name, major, minor);
  }
  *text = loom_strbuf_take(&b);
  return *text ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

/* ---- memory ------------------------------------------------------------------- */

loom_status loom_cu_alloc(loom_ctx *ctx, loom_cu *cu, size_t bytes, loom_cu_deviceptr *out) {
  *out = 0;
  loom_cu_result r = cu->api->cuMemAlloc_v2(out, bytes ? bytes : 256);
  if (r == LOOM_CU_SUCCESS) return LOOM_STATUS_OK;
  char b[96];
  *out = 0;
  return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "CUDA: allocating %zu bytes on %s: %s", bytes,
                    cu->name, loom_cu_error_name(cu->api, r, b, sizeof b));
}

void loom_cu_free(loom_cu *cu, loom_cu_deviceptr p) {
  if (p) cu->api->cuMemFree_v2(p);
}

loom_status loom_cu_to_device_on(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, const void *src,
                                 size_t bytes, loom_cu_stream s) {
  if (!bytes) return LOOM_STATUS_OK;
  return loom_cu_check(ctx, cu, cu->api->cuMemcpyHtoDAsync_v2(dst, src, bytes, s),
                       "copying to the device");
}

loom_status loom_cu_to_host_on(loom_ctx *ctx, loom_cu *cu, void *dst, loom_cu_deviceptr src,
                               size_t bytes, loom_cu_stream s) {
  if (!bytes) return LOOM_STATUS_OK;
  return loom_cu_check(ctx, cu, cu->api->cuMemcpyDtoHAsync_v2(dst, src, bytes, s),
                       "copying to the host");
}

loom_status loom_cu_to_device(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, const void *src,
                              size_t bytes) {
  return loom_cu_to_device_on(ctx, cu, dst, src, bytes, cu->stream);
}

loom_status loom_cu_to_host(loom_ctx *ctx, loom_cu *cu, void *dst, loom_cu_deviceptr src,
                            size_t bytes) {
  return loom_cu_to_host_on(ctx, cu, dst, src, bytes, cu->stream);
}

loom_status loom_cu_zero(loom_ctx *ctx, loom_cu *cu, loom_cu_deviceptr dst, size_t bytes) {
  if (!bytes) return LOOM_STATUS_OK;
  return loom_cu_check(ctx, cu, cu->api->cuMemsetD8Async(dst, 0, bytes, cu->stream),
                       "zeroing device memory");
}

loom_status loom_cu_sync(loom_ctx *ctx, loom_cu *cu) {
  return loom_cu_stream_sync(ctx, cu, cu->stream,
                             "waiting for the stream (an earlier kernel or copy failed)");
}

/* ---- streams of one's own (cuda_stream.h) ---------------------------------------- */

loom_status loom_cu_stream_new(loom_ctx *ctx, loom_cu *cu, loom_cu_stream *out) {
  *out = NULL;
  return loom_cu_check(ctx, cu, cu->api->cuStreamCreate(out, LOOM_CU_STREAM_NON_BLOCKING),
                       "creating a stream");
}

void loom_cu_stream_free(loom_cu *cu, loom_cu_stream s) {
  cu->api->cuCtxSetCurrent(cu->context);
  if (!s) return;
  cu->api->cuStreamSynchronize(s);
  cu->api->cuStreamDestroy_v2(s);
}

loom_status loom_cu_stream_done(loom_ctx *ctx, loom_cu *cu, loom_cu_stream s, const char *what,
                                bool *done) {
  loom_cu_result r = cu->api->cuStreamQuery(s);
  *done = r == LOOM_CU_SUCCESS;
  return r == LOOM_CU_ERROR_NOT_READY ? LOOM_STATUS_OK : loom_cu_check(ctx, cu, r, what);
}

loom_status loom_cu_stream_sync(loom_ctx *ctx, loom_cu *cu, loom_cu_stream s, const char *what) {
  return loom_cu_check(ctx, cu, cu->api->cuStreamSynchronize(s), what);
}

/* ---- modules and their PTX cache ------------------------------------------------ */

typedef struct cu_fn {
  char name[64];
  loom_cu_function fn;
} cu_fn;

struct loom_cu_kernels {
  loom_cu *cu;
  loom_cu_module handle;
  int32_t n_fns, cap_fns;
  cu_fn *fns;
  loom_cu_deviceptr workspace;
  int64_t workspace_bytes;
};

/* The PTX of source: from the cache when an entry for its key is there and
 * intact, else from NVRTC (then stored, best effort). *ptx malloc'ed and
 * NUL-terminated. */
static loom_status get_ptx(loom_ctx *ctx, loom_cu *cu, const char *source, char **ptx,
                           bool *cache_hit) {
  *ptx = NULL;
  char nvrtc[32];
  LOOM_TRY(loom_nvrtc_version(ctx, nvrtc, sizeof nvrtc));
  char id[96];
  snprintf(id, sizeof id, "loom-cuda-1|nvrtc %s|compute_%d|--fmad=false", nvrtc, (int)cu->arch);
  const char *parts[] = {id};
  loom_binary_cache c;
  loom_binary_cache_open(&c, "ptx", parts, 1, source);
  size_t len = 0;
  *ptx = (char *)loom_binary_cache_load(&c, &len);
  if (*ptx) {
    if (cache_hit) *cache_hit = true;
    loom_binary_cache_close(&c);
    return LOOM_STATUS_OK;
  }
  loom_status st = loom_nvrtc_compile(ctx, source, (int)cu->arch, ptx);
  if (!st) loom_binary_cache_store(&c, *ptx, strlen(*ptx));
  loom_binary_cache_close(&c);
  return st;
}

loom_status loom_cu_module_build(loom_ctx *ctx, loom_cu *cu, const char *source,
                                 loom_cu_kernels **out, bool *cache_hit) {
  *out = NULL;
  if (cache_hit) *cache_hit = false;
  LOOM_TRY(loom_cu_bind(ctx, cu));
  char *ptx = NULL;
  LOOM_TRY(get_ptx(ctx, cu, source, &ptx, cache_hit));
  loom_cu_module handle = NULL;
  loom_cu_result r = cu->api->cuModuleLoadData(&handle, ptx);
  free(ptx);
  if (r != LOOM_CU_SUCCESS) {
    char b[96], v[32] = "?";
    loom_nvrtc_version(ctx, v, sizeof v);
    return loom_error(ctx, LOOM_STATUS_INTERNAL,
                      "CUDA: loading NVRTC's PTX (compute_%d) on %s: %s (driver supports CUDA "
                      "%d.%d, NVRTC is %s: the driver must be at least as new)",
                      (int)cu->arch, cu->name, loom_cu_error_name(cu->api, r, b, sizeof b),
                      (int)cu->driver_version / 1000, (int)(cu->driver_version % 1000) / 10, v);
  }
  loom_cu_kernels *m = loom_calloc(ctx, 1, sizeof *m);
  if (!m) {
    cu->api->cuModuleUnload(handle);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  m->cu = cu;
  m->handle = handle;
  *out = m;
  return LOOM_STATUS_OK;
}

void loom_cu_module_free(loom_cu_kernels *m) {
  if (!m) return;
  m->cu->api->cuCtxSetCurrent(m->cu->context);
  m->cu->api->cuStreamSynchronize(m->cu->stream); /* nothing queued still uses it */
  loom_cu_free(m->cu, m->workspace);
  m->cu->api->cuModuleUnload(m->handle);
  free(m->fns);
  free(m);
}

/* The module's function `name` (looked up on first use). */
static loom_status get_fn(loom_ctx *ctx, loom_cu_kernels *m, const char *name,
                          loom_cu_function *out) {
  for (int32_t i = 0; i < m->n_fns; i++)
    if (strcmp(m->fns[i].name, name) == 0) {
      *out = m->fns[i].fn;
      return LOOM_STATUS_OK;
    }
  if (m->n_fns == m->cap_fns) {
    int32_t cap = m->cap_fns ? 2 * m->cap_fns : 16;
    cu_fn *f = realloc(m->fns, sizeof *f * (size_t)cap);
    if (!f) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    m->fns = f;
    m->cap_fns = cap;
  }
  loom_cu_function fn = NULL;
  loom_cu_result r = m->cu->api->cuModuleGetFunction(&fn, m->handle, name);
  if (r != LOOM_CU_SUCCESS) {
    char b[96];
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "CUDA: no function %s in the module: %s", name,
                      loom_cu_error_name(m->cu->api, r, b, sizeof b));
  }
  snprintf(m->fns[m->n_fns].name, sizeof m->fns[m->n_fns].name, "%s", name);
  m->fns[m->n_fns++].fn = fn;
  *out = fn;
  return LOOM_STATUS_OK;
}

loom_status loom_cu_run(loom_ctx *ctx, loom_cu_kernels *m, const loom_kernel *k,
                        const loom_cu_deviceptr *args) {
  loom_cu *cu = m->cu;
  loom_gpu_launch *launches = NULL;
  int32_t n_launch = 0;
  int64_t ws_bytes = 0;
  LOOM_TRY(loom_gpu_launches(ctx, k, &launches, &n_launch, &ws_bytes));
  /* kernel parameters: each a pointer to the argument's value */
  loom_cu_deviceptr *vals = calloc((size_t)k->n_args + 1, sizeof *vals);
  void **params = calloc((size_t)k->n_args + 1, sizeof *params);
  loom_status st = LOOM_STATUS_OK;
  if (!vals || !params) st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  if (!st && (ws_bytes > m->workspace_bytes || !m->workspace)) {
    /* queued launches may still use the old workspace */
    st = loom_cu_sync(ctx, cu);
    if (!st) {
      loom_cu_free(cu, m->workspace);
      m->workspace = 0;
      m->workspace_bytes = 0;
      st = loom_cu_alloc(ctx, cu, (size_t)(ws_bytes > 0 ? ws_bytes : 256), &m->workspace);
      if (!st) m->workspace_bytes = ws_bytes > 0 ? ws_bytes : 256;
    }
  }
  int32_t n_params = 0;
  for (int32_t a = 0; !st && a < k->n_args; a++) {
    if (k->args[a].temp) continue;
    vals[n_params] = args[a];
    params[n_params] = &vals[n_params];
    n_params++;
  }
  if (!st) {
    vals[n_params] = m->workspace;
    params[n_params] = &vals[n_params];
  }
  for (int32_t l = 0; !st && l < n_launch; l++) {
    loom_cu_function fn = NULL;
    st = get_fn(ctx, m, launches[l].fn, &fn);
    if (st) break;
    loom_cu_result r = cu->api->cuLaunchKernel(fn, (unsigned)launches[l].groups, 1, 1,
                                               LOOM_GPU_LOCAL, 1, 1, 0, cu->stream, params, NULL);
    if (r != LOOM_CU_SUCCESS) {
      char b[96];
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "CUDA: launching %s over %lld blocks: %s",
                      launches[l].fn, (long long)launches[l].groups,
                      loom_cu_error_name(cu->api, r, b, sizeof b));
    }
  }
  free(vals);
  free(params);
  free(launches);
  return st;
}

loom_status loom_cu_calls(loom_ctx *ctx, loom_cu_kernels *m, const loom_gpu_call *calls, int32_t n,
                          int32_t n_bufs, const loom_cu_deviceptr *bufs, loom_cu_deviceptr ws,
                          loom_cu_stream s) {
  loom_cu *cu = m->cu;
  for (int32_t c = 0; c < n; c++) {
    const loom_gpu_call *call = &calls[c];
    /* kernel parameters: each a pointer to its 8-byte value */
    union {
      loom_cu_deviceptr p;
      int64_t i;
      double f;
    } vals[LOOM_GPU_CALL_MAX_ARGS];
    void *params[LOOM_GPU_CALL_MAX_ARGS];
    for (int32_t a = 0; a < call->n_args; a++) {
      const loom_gpu_arg *arg = &call->args[a];
      if (arg->kind == LOOM_GPU_ARG_BUF)
        vals[a].p = arg->buf == LOOM_GPU_BUF_WORKSPACE ? ws
                    : arg->buf >= 0 && arg->buf < n_bufs ? bufs[arg->buf]
                                                         : 0;
      else if (arg->kind == LOOM_GPU_ARG_I64)
        vals[a].i = arg->i;
      else
        vals[a].f = arg->f;
      params[a] = &vals[a];
    }
    loom_cu_function fn = NULL;
    LOOM_TRY(get_fn(ctx, m, call->fn, &fn));
    loom_cu_result r = cu->api->cuLaunchKernel(fn, (unsigned)call->groups, 1, 1, LOOM_GPU_LOCAL, 1,
                                               1, 0, s, params, NULL);
    if (r != LOOM_CU_SUCCESS) {
      char b[96];
      return loom_error(ctx, LOOM_STATUS_INTERNAL, "CUDA: launching %s over %lld blocks: %s",
                        call->fn, (long long)call->groups,
                        loom_cu_error_name(cu->api, r, b, sizeof b));
    }
  }
  return LOOM_STATUS_OK;
}

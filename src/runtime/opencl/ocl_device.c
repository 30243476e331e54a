/* The OpenCL device, programs with their binary cache, and launches (ocl.h). */
#include "runtime/opencl/ocl.h"
#include "runtime/opencl/ocl_api.h"

#include "codegen/gpu_codegen.h"
#include "core/strbuf.h"
#include "ir/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !LOOM_OCL_HEADERS
loom_status loom_ocl_get(loom_ctx *ctx, loom_ocl **out) {
  *out = NULL;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
const char *loom_ocl_device_name(const loom_ocl *cl) { (void)cl; return ""; }
loom_status loom_ocl_list_devices(loom_ctx *ctx, char **text) {
  *text = NULL;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
loom_status loom_ocl_module_build(loom_ctx *ctx, loom_ocl *cl, const char *source,
                                  loom_ocl_module **out, bool *cache_hit) {
  (void)cl; (void)source; (void)cache_hit;
  *out = NULL;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
void loom_ocl_module_free(loom_ocl_module *m) { (void)m; }
loom_status loom_ocl_run(loom_ctx *ctx, loom_ocl_module *m, const loom_kernel *k,
                         void *const *args) {
  (void)m; (void)k; (void)args;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
loom_status loom_ocl_launch(loom_ctx *ctx, loom_ocl_module *m, const char *fn, int32_t n_bufs,
                            void *const *args, const size_t *bytes, const bool *written,
                            int32_t n_scalars, const int32_t *scalars, const size_t global[2],
                            const size_t local[2]) {
  (void)m; (void)fn; (void)n_bufs; (void)args; (void)bytes; (void)written; (void)n_scalars;
  (void)scalars; (void)global; (void)local;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
loom_status loom_ocl_calls(loom_ctx *ctx, loom_ocl_module *m, const loom_gpu_call *calls, int32_t n,
                           int32_t n_bufs, void *const *bufs, const size_t *bytes,
                           const bool *written, void *ws, size_t ws_bytes,
                           loom_ocl_pending **pending) {
  (void)m; (void)calls; (void)n; (void)n_bufs; (void)bufs; (void)bytes; (void)written; (void)ws;
  (void)ws_bytes;
  if (pending) *pending = NULL;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
loom_status loom_ocl_join(loom_ctx *ctx, loom_ocl_pending *p) {
  (void)ctx; (void)p;
  return LOOM_STATUS_OK;
}
bool loom_ocl_have_clblast(void) { return false; }
loom_status loom_ocl_clblast_sgemm(loom_ctx *ctx, loom_ocl *cl, const loom_ocl_gemm_args *g) {
  (void)cl; (void)g;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "Loom was built without the OpenCL headers");
}
#else
#include "runtime/binary_cache.h"
#include "runtime/device_once.h"

#include <dlfcn.h>
#include <pthread.h>

struct loom_ocl {
  const loom_ocl_api *api;
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  cl_command_queue side; /* a second queue: work beside the main one (the overlapped mask) */
  char name[256];
  char identity[1024]; /* platform and device names and versions: part of cache keys */
  char options[128];   /* build options */
  pthread_mutex_t lock; /* one launch at a time on the queue */
};

typedef struct ocl_fn {
  char name[64];
  cl_kernel kernel;
} ocl_fn;

struct loom_ocl_module {
  loom_ocl *cl;
  cl_program program;
  int32_t n_fns, cap_fns;
  ocl_fn *fns;
  cl_mem workspace;
  int64_t workspace_bytes;
};

#define CL_FAIL(ctx, what, e)                                                                   \
  do {                                                                                         \
    char b_[64];                                                                               \
    return loom_error((ctx), LOOM_STATUS_INTERNAL, "OpenCL: %s: %s", (what),                    \
                      loom_ocl_error_name((e), b_, sizeof b_));                                \
  } while (0)

static loom_ocl the_device;
static loom_device_once device_once = LOOM_DEVICE_ONCE_INIT;

/* Devices of every platform in order: up to cap into ids (and their
 * platforms); the count. */
static int32_t all_devices(const loom_ocl_api *api, cl_platform_id *plats, cl_device_id *ids,
                           int32_t cap) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (api->clGetPlatformIDs(16, ps, &np) != CL_SUCCESS) return 0;
  int32_t n = 0;
  for (cl_uint p = 0; p < np && n < cap; p++) {
    cl_uint nd = 0;
    cl_device_id ds[16];
    if (api->clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 16, ds, &nd) != CL_SUCCESS) continue;
    for (cl_uint d = 0; d < nd && n < cap; d++) {
      plats[n] = ps[p];
      ids[n++] = ds[d];
    }
  }
  return n;
}

static void device_label(const loom_ocl_api *api, cl_platform_id p, cl_device_id d, char *out,
                         size_t n) {
  char pn[128] = "", dn[128] = "";
  api->clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pn - 1, pn, NULL);
  api->clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dn - 1, dn, NULL);
  snprintf(out, n, "%s: %s", pn, dn);
}

static loom_status open_device(loom_ctx *ctx, loom_ocl *cl) {
  const loom_ocl_api *api;
  LOOM_TRY(loom_ocl_api_get(ctx, &api));
  cl->api = api;
  cl_platform_id plats[64];
  cl_device_id ids[64];
  int32_t n = all_devices(api, plats, ids, 64);
  if (n == 0)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no OpenCL device (no platform or device found; Debian: pocl-opencl-icd "
                      "runs OpenCL on the CPU)");
  int32_t pick = -1;
  const char *env = getenv("LOOM_OPENCL_DEVICE");
  if (env && env[0]) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 0 || v >= n)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "LOOM_OPENCL_DEVICE=%s: wants a device number in [0, %d)", env, (int)n);
    pick = (int32_t)v;
  }
  for (int32_t i = 0; i < n && pick < 0; i++) {
    cl_device_type t = 0;
    api->clGetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof t, &t, NULL);
    if (t & CL_DEVICE_TYPE_GPU) pick = i;
  }
  if (pick < 0) pick = 0;
  cl->platform = plats[pick];
  cl->device = ids[pick];
  device_label(api, cl->platform, cl->device, cl->name, sizeof cl->name);
  char pv[128] = "", dv[128] = "";
  api->clGetPlatformInfo(cl->platform, CL_PLATFORM_VERSION, sizeof pv - 1, pv, NULL);
  api->clGetDeviceInfo(cl->device, CL_DRIVER_VERSION, sizeof dv - 1, dv, NULL);
  snprintf(cl->identity, sizeof cl->identity, "%s|%s|%s", cl->name, pv, dv);
  cl_device_fp_config fp = 0;
  api->clGetDeviceInfo(cl->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
  snprintf(cl->options, sizeof cl->options, "%s",
           (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? "-cl-fp32-correctly-rounded-divide-sqrt"
                                                      : "");
  char ext[4096] = "";
  api->clGetDeviceInfo(cl->device, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  if (!strstr(ext, "cl_khr_fp64"))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "OpenCL device %s has no double precision (cl_khr_fp64), which Loom's "
                      "kernels use",
                      cl->name);
  cl_int e;
  cl->context = api->clCreateContext(NULL, 1, &cl->device, NULL, NULL, &e);
  if (!cl->context) CL_FAIL(ctx, "creating a context", e);
  cl->queue = api->clCreateCommandQueue(cl->context, cl->device, 0, &e);
  if (!cl->queue) CL_FAIL(ctx, "creating a command queue", e);
  cl->side = api->clCreateCommandQueue(cl->context, cl->device, 0, &e);
  if (!cl->side) CL_FAIL(ctx, "creating the second command queue", e);
  pthread_mutex_init(&cl->lock, NULL);
  return LOOM_STATUS_OK;
}

static loom_status open_the_device(loom_ctx *ctx, void *storage) {
  return open_device(ctx, storage);
}

loom_status loom_ocl_get(loom_ctx *ctx, loom_ocl **out) {
  void *dev = NULL;
  loom_status st = loom_device_once_get(ctx, &device_once, open_the_device, &the_device, &dev);
  *out = dev;
  return st;
}

const char *loom_ocl_device_name(const loom_ocl *cl) { return cl ? cl->name : ""; }

loom_status loom_ocl_list_devices(loom_ctx *ctx, char **text) {
  *text = NULL;
  const loom_ocl_api *api;
  LOOM_TRY(loom_ocl_api_get(ctx, &api));
  cl_platform_id plats[64];
  cl_device_id ids[64];
  int32_t n = all_devices(api, plats, ids, 64);
  loom_strbuf b = {0};
  loom_strbuf_put(&b, "%s", "");
  for (int32_t i = 0; i < n; i++) {
    char label[256];
    device_label(api, plats[i], ids[i], label, sizeof label);
    loom_strbuf_put(&b, "  opencl:%d %s\n", (int)i, label);
  }
  *text = loom_strbuf_take(&b);
  return *text ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

/* ---- programs and their cache ------------------------------------------------ */

/* The build log, for an error message. */
static loom_status build_error(loom_ctx *ctx, const loom_ocl *cl, cl_program p, cl_int e) {
  size_t n = 0;
  cl->api->clGetProgramBuildInfo(p, cl->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char *log = calloc(n + 1, 1);
  if (log) cl->api->clGetProgramBuildInfo(p, cl->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
  char b[64];
  loom_status st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: building the program on %s: %s\n%.3000s",
                              cl->name, loom_ocl_error_name(e, b, sizeof b), log ? log : "");
  free(log);
  return st;
}

/* The program's binary (malloc'ed) for the cache; NULL if the driver has none. */
static uint8_t *program_binary(const loom_ocl *cl, cl_program p, size_t *n) {
  size_t size = 0;
  if (cl->api->clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) ||
      size == 0)
    return NULL;
  uint8_t *bin = malloc(size);
  if (!bin) return NULL;
  if (cl->api->clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL)) {
    free(bin);
    return NULL;
  }
  *n = size;
  return bin;
}

loom_status loom_ocl_module_build(loom_ctx *ctx, loom_ocl *cl, const char *source,
                                  loom_ocl_module **out, bool *cache_hit) {
  *out = NULL;
  if (cache_hit) *cache_hit = false;
  const loom_ocl_api *api = cl->api;
  /* the key: the driver and device, and the build options */
  const char *parts[] = {"loom-opencl-1", cl->identity, cl->options};
  loom_binary_cache c;
  loom_binary_cache_open(&c, "clbin", parts, 3, source);
  cl_program p = NULL;
  cl_int e = CL_SUCCESS;
  size_t bn = 0;
  uint8_t *data = loom_binary_cache_load(&c, &bn);
  if (data) {
    const unsigned char *bp = data;
    cl_int bs = CL_SUCCESS;
    p = api->clCreateProgramWithBinary(cl->context, 1, &cl->device, &bn, &bp, &bs, &e);
    if (p && (bs != CL_SUCCESS ||
              api->clBuildProgram(p, 1, &cl->device, cl->options, NULL, NULL) != CL_SUCCESS)) {
      api->clReleaseProgram(p); /* a binary the driver no longer takes: rebuild */
      p = NULL;
    }
    if (p && cache_hit) *cache_hit = true;
    free(data);
  }
  if (!p) {
    p = api->clCreateProgramWithSource(cl->context, 1, &source, NULL, &e);
    if (!p) {
      loom_binary_cache_close(&c);
      CL_FAIL(ctx, "creating a program", e);
    }
    e = api->clBuildProgram(p, 1, &cl->device, cl->options, NULL, NULL);
    if (e != CL_SUCCESS) {
      loom_status st = build_error(ctx, cl, p, e);
      api->clReleaseProgram(p);
      loom_binary_cache_close(&c);
      return st;
    }
    uint8_t *bin = c.have_dir ? program_binary(cl, p, &bn) : NULL;
    if (bin) loom_binary_cache_store(&c, bin, bn);
    free(bin);
  }
  loom_binary_cache_close(&c);
  loom_ocl_module *m = loom_calloc(ctx, 1, sizeof *m);
  if (!m) {
    api->clReleaseProgram(p);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  m->cl = cl;
  m->program = p;
  *out = m;
  return LOOM_STATUS_OK;
}

void loom_ocl_module_free(loom_ocl_module *m) {
  if (!m) return;
  const loom_ocl_api *api = m->cl->api;
  for (int32_t i = 0; i < m->n_fns; i++) api->clReleaseKernel(m->fns[i].kernel);
  free(m->fns);
  if (m->workspace) api->clReleaseMemObject(m->workspace);
  api->clReleaseProgram(m->program);
  free(m);
}

/* The module's function `name` (created on first use). */
static loom_status get_fn(loom_ctx *ctx, loom_ocl_module *m, const char *name, cl_kernel *out) {
  for (int32_t i = 0; i < m->n_fns; i++)
    if (strcmp(m->fns[i].name, name) == 0) {
      *out = m->fns[i].kernel;
      return LOOM_STATUS_OK;
    }
  if (m->n_fns == m->cap_fns) {
    int32_t cap = m->cap_fns ? 2 * m->cap_fns : 16;
    ocl_fn *f = realloc(m->fns, sizeof *f * (size_t)cap);
    if (!f) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    m->fns = f;
    m->cap_fns = cap;
  }
  cl_int e;
  cl_kernel k = m->cl->api->clCreateKernel(m->program, name, &e);
  if (!k) {
    char b[64];
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: no function %s in the program: %s", name,
                      loom_ocl_error_name(e, b, sizeof b));
  }
  snprintf(m->fns[m->n_fns].name, sizeof m->fns[m->n_fns].name, "%s", name);
  m->fns[m->n_fns++].kernel = k;
  *out = k;
  return LOOM_STATUS_OK;
}

/* A buffer over host memory p of n bytes (a small device buffer when n is 0). */
static cl_mem host_buffer(loom_ocl *cl, void *p, size_t n, bool written, cl_int *e) {
  if (n == 0 || !p) return cl->api->clCreateBuffer(cl->context, CL_MEM_READ_WRITE, 64, NULL, e);
  cl_mem_flags f = CL_MEM_USE_HOST_PTR | (written ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY);
  return cl->api->clCreateBuffer(cl->context, f, n, p, e);
}

/* Maps each written buffer back to the host (its memory is then current) and
 * releases every buffer. */
static cl_int finish_buffers(loom_ocl *cl, int32_t n, cl_mem *mem, const size_t *bytes,
                             const bool *written) {
  const loom_ocl_api *api = cl->api;
  cl_int err = CL_SUCCESS;
  for (int32_t i = 0; i < n; i++) {
    if (!mem[i]) continue;
    if (written[i] && bytes[i] && err == CL_SUCCESS) {
      cl_int e;
      void *p = api->clEnqueueMapBuffer(cl->queue, mem[i], CL_TRUE, CL_MAP_READ, 0, bytes[i], 0,
                                        NULL, NULL, &e);
      if (!p) err = e;
      else api->clEnqueueUnmapMemObject(cl->queue, mem[i], p, 0, NULL, NULL);
    }
  }
  cl_int fe = api->clFinish(cl->queue);
  if (err == CL_SUCCESS) err = fe;
  for (int32_t i = 0; i < n; i++)
    if (mem[i]) api->clReleaseMemObject(mem[i]);
  return err;
}

loom_status loom_ocl_run(loom_ctx *ctx, loom_ocl_module *m, const loom_kernel *k,
                         void *const *args) {
  loom_ocl *cl = m->cl;
  const loom_ocl_api *api = cl->api;
  loom_gpu_launch *launches = NULL;
  int32_t n_launch = 0;
  int64_t ws_bytes = 0;
  LOOM_TRY(loom_gpu_launches(ctx, k, &launches, &n_launch, &ws_bytes));
  cl_mem *mem = calloc((size_t)k->n_args + 1, sizeof *mem);
  size_t *bytes = calloc((size_t)k->n_args + 1, sizeof *bytes);
  bool *written = calloc((size_t)k->n_args + 1, sizeof *written);
  loom_status st = LOOM_STATUS_OK;
  if (!mem || !bytes || !written) st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  pthread_mutex_lock(&cl->lock);
  cl_int e = CL_SUCCESS;
  if (!st && ws_bytes > m->workspace_bytes) {
    if (m->workspace) api->clReleaseMemObject(m->workspace);
    m->workspace_bytes = 0;
    m->workspace = api->clCreateBuffer(cl->context, CL_MEM_READ_WRITE, (size_t)ws_bytes, NULL, &e);
    if (!m->workspace) {
      char b[64];
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "OpenCL: cannot allocate a %lld-byte kernel workspace: %s",
                      (long long)ws_bytes, loom_ocl_error_name(e, b, sizeof b));
    } else {
      m->workspace_bytes = ws_bytes;
    }
  }
  if (!st && !m->workspace) { /* every function takes one */
    m->workspace = api->clCreateBuffer(cl->context, CL_MEM_READ_WRITE, 64, NULL, &e);
    m->workspace_bytes = m->workspace ? 64 : 0;
  }
  for (int32_t a = 0; !st && a < k->n_args; a++) {
    if (k->args[a].temp) continue;
    bytes[a] = (size_t)k->args[a].numel * loom_dtype_size(k->args[a].dtype);
    written[a] = k->args[a].is_output;
    mem[a] = host_buffer(cl, args[a], bytes[a], written[a], &e);
    if (!mem[a]) {
      char b[64];
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: a buffer for argument a%d of %s: %s", a,
                      k->name, loom_ocl_error_name(e, b, sizeof b));
    }
  }
  for (int32_t l = 0; !st && l < n_launch; l++) {
    cl_kernel fn;
    st = get_fn(ctx, m, launches[l].fn, &fn);
    if (st) break;
    cl_uint idx = 0;
    for (int32_t a = 0; a < k->n_args && e == CL_SUCCESS; a++)
      if (!k->args[a].temp) e = api->clSetKernelArg(fn, idx++, sizeof(cl_mem), &mem[a]);
    if (e == CL_SUCCESS) e = api->clSetKernelArg(fn, idx++, sizeof(cl_mem), &m->workspace);
    for (int32_t i = 0; i < 3 && e == CL_SUCCESS; i++) /* the group's __local buffers */
      if (launches[l].shared_bytes[i] > 0)
        e = api->clSetKernelArg(fn, idx++, (size_t)launches[l].shared_bytes[i], NULL);
    size_t local = LOOM_GPU_LOCAL, global = (size_t)launches[l].groups * LOOM_GPU_LOCAL;
    if (e == CL_SUCCESS)
      e = api->clEnqueueNDRangeKernel(cl->queue, fn, 1, NULL, &global, &local, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
      char b[64];
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: launching %s: %s", launches[l].fn,
                      loom_ocl_error_name(e, b, sizeof b));
    }
  }
  if (mem) {
    cl_int fe = finish_buffers(cl, k->n_args, mem, bytes, written);
    if (!st && fe != CL_SUCCESS) {
      char b[64];
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: running %s: %s", k->name,
                      loom_ocl_error_name(fe, b, sizeof b));
    }
  }
  pthread_mutex_unlock(&cl->lock);
  free(mem);
  free(bytes);
  free(written);
  free(launches);
  return st;
}

loom_status loom_ocl_launch(loom_ctx *ctx, loom_ocl_module *m, const char *fn, int32_t n_bufs,
                            void *const *args, const size_t *bytes, const bool *written,
                            int32_t n_scalars, const int32_t *scalars, const size_t global[2],
                            const size_t local[2]) {
  loom_ocl *cl = m->cl;
  const loom_ocl_api *api = cl->api;
  cl_mem mem[8] = {0};
  if (n_bufs > 8) return loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL launch: too many buffers");
  loom_status st = LOOM_STATUS_OK;
  pthread_mutex_lock(&cl->lock);
  cl_int e = CL_SUCCESS;
  cl_kernel k = NULL;
  st = get_fn(ctx, m, fn, &k);
  for (int32_t i = 0; !st && i < n_bufs && e == CL_SUCCESS; i++) {
    mem[i] = host_buffer(cl, args[i], bytes[i], written[i], &e);
    if (mem[i]) e = api->clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &mem[i]);
  }
  for (int32_t i = 0; !st && i < n_scalars && e == CL_SUCCESS; i++)
    e = api->clSetKernelArg(k, (cl_uint)(n_bufs + i), sizeof(cl_int), &scalars[i]);
  if (!st && e == CL_SUCCESS)
    e = api->clEnqueueNDRangeKernel(cl->queue, k, 2, NULL, global, local, 0, NULL, NULL);
  cl_int fe = finish_buffers(cl, n_bufs, mem, bytes, written);
  if (!st && e == CL_SUCCESS) e = fe;
  if (!st && e != CL_SUCCESS) {
    char b[64];
    st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: launching %s: %s", fn,
                    loom_ocl_error_name(e, b, sizeof b));
  }
  pthread_mutex_unlock(&cl->lock);
  return st;
}

/* ---- gpu_attention.h's calls, on either queue ---------------------------------- */

struct loom_ocl_pending {
  loom_ocl *cl;
  int32_t n;     /* buffers */
  cl_mem *mem;   /* n + 1: the node's buffers, then the workspace */
  size_t *bytes;
  bool *written;
  cl_event done;
};

static void pending_free(loom_ocl_pending *p) {
  if (!p) return;
  free(p->mem);
  free(p->bytes);
  free(p->written);
  free(p);
}

/* Sets the arguments of one call and queues it on q (the last one
 * signalling *done when done is not NULL). */
static cl_int enqueue_call(loom_ocl *cl, cl_command_queue q, cl_kernel k, const loom_gpu_call *c,
                           const loom_ocl_pending *p, cl_event *done) {
  const loom_ocl_api *api = cl->api;
  cl_int e = CL_SUCCESS;
  for (int32_t i = 0; i < c->n_args && e == CL_SUCCESS; i++) {
    const loom_gpu_arg *a = &c->args[i];
    if (a->kind == LOOM_GPU_ARG_BUF) {
      cl_mem none = NULL;
      const cl_mem *mem = a->buf == LOOM_GPU_BUF_WORKSPACE ? &p->mem[p->n]
                          : a->buf >= 0 && a->buf < p->n ? &p->mem[a->buf]
                                                         : &none;
      e = api->clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), mem);
    } else if (a->kind == LOOM_GPU_ARG_I64) {
      cl_long v = a->i;
      e = api->clSetKernelArg(k, (cl_uint)i, sizeof v, &v);
    } else {
      cl_double v = a->f;
      e = api->clSetKernelArg(k, (cl_uint)i, sizeof v, &v);
    }
  }
  size_t local = LOOM_GPU_LOCAL, global = (size_t)c->groups * LOOM_GPU_LOCAL;
  if (e == CL_SUCCESS) e = api->clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, done);
  return e;
}

loom_status loom_ocl_calls(loom_ctx *ctx, loom_ocl_module *m, const loom_gpu_call *calls, int32_t n,
                           int32_t n_bufs, void *const *bufs, const size_t *bytes,
                           const bool *written, void *ws, size_t ws_bytes,
                           loom_ocl_pending **pending) {
  loom_ocl *cl = m->cl;
  if (pending) *pending = NULL;
  loom_ocl_pending *p = calloc(1, sizeof *p);
  if (p) {
    p->cl = cl;
    p->n = n_bufs;
    p->mem = calloc((size_t)n_bufs + 1, sizeof *p->mem);
    p->bytes = calloc((size_t)n_bufs + 1, sizeof *p->bytes);
    p->written = calloc((size_t)n_bufs + 1, sizeof *p->written);
  }
  if (!p || !p->mem || !p->bytes || !p->written) {
    pending_free(p);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  loom_status st = LOOM_STATUS_OK;
  cl_int e = CL_SUCCESS;
  pthread_mutex_lock(&cl->lock);
  for (int32_t i = 0; i <= n_bufs && e == CL_SUCCESS; i++) {
    p->bytes[i] = i < n_bufs ? bytes[i] : ws_bytes;
    p->written[i] = i < n_bufs ? written[i] : true;
    void *host = i < n_bufs ? bufs[i] : ws;
    if (host || i == n_bufs) p->mem[i] = host_buffer(cl, host, p->bytes[i], p->written[i], &e);
  }
  cl_command_queue q = pending ? cl->side : cl->queue;
  for (int32_t c = 0; c < n && e == CL_SUCCESS && !st; c++) {
    cl_kernel k;
    st = get_fn(ctx, m, calls[c].fn, &k);
    if (!st) e = enqueue_call(cl, q, k, &calls[c], p, pending && c == n - 1 ? &p->done : NULL);
    if (!st && e != CL_SUCCESS) {
      char b[64];
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: launching %s: %s", calls[c].fn,
                      loom_ocl_error_name(e, b, sizeof b));
    }
  }
  if (!st && pending && n > 0) {
    cl->api->clFlush(q); /* start it now: the main queue's work goes on beside it */
    pthread_mutex_unlock(&cl->lock);
    *pending = p;
    return LOOM_STATUS_OK;
  }
  if (pending && p->done) cl->api->clWaitForEvents(1, &p->done);
  cl_int fe = finish_buffers(cl, n_bufs + 1, p->mem, p->bytes, p->written);
  pthread_mutex_unlock(&cl->lock);
  if (p->done) cl->api->clReleaseEvent(p->done);
  pending_free(p);
  if (!st && fe != CL_SUCCESS) {
    char b[64];
    st = loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: running %s: %s", n > 0 ? calls[0].fn : "",
                    loom_ocl_error_name(fe, b, sizeof b));
  }
  return st;
}

loom_status loom_ocl_join(loom_ctx *ctx, loom_ocl_pending *p) {
  if (!p) return LOOM_STATUS_OK;
  loom_ocl *cl = p->cl;
  cl_int e = cl->api->clWaitForEvents(1, &p->done);
  pthread_mutex_lock(&cl->lock);
  cl_int fe = finish_buffers(cl, p->n + 1, p->mem, p->bytes, p->written);
  pthread_mutex_unlock(&cl->lock);
  cl->api->clReleaseEvent(p->done);
  pending_free(p);
  if (e == CL_SUCCESS) e = fe;
  if (e == CL_SUCCESS) return LOOM_STATUS_OK;
  char b[64];
  return loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: the second queue's work: %s",
                    loom_ocl_error_name(e, b, sizeof b));
}

/* ---- CLBlast (Debian libclblast1), opened at run time ------------------------ */

/* Its C API's enums are ints: RowMajor 101, TransposeNo 111, TransposeYes 112. */
typedef int (*clblast_sgemm_fn)(int, int, int, size_t, size_t, size_t, float, cl_mem, size_t,
                                size_t, cl_mem, size_t, size_t, float, cl_mem, size_t, size_t,
                                cl_command_queue *, cl_event *);
typedef int (*clblast_sgemm_batched_fn)(int, int, int, size_t, size_t, size_t, const float *,
                                        cl_mem, const size_t *, size_t, cl_mem, const size_t *,
                                        size_t, const float *, cl_mem, const size_t *, size_t,
                                        size_t, cl_command_queue *, cl_event *);
static clblast_sgemm_fn clblast_sgemm;
static clblast_sgemm_batched_fn clblast_sgemm_batched;
static pthread_once_t clblast_once = PTHREAD_ONCE_INIT;

static void clblast_load(void) {
  void *h = dlopen("libclblast.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libclblast.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  void *a = dlsym(h, "CLBlastSgemm"), *b = dlsym(h, "CLBlastSgemmBatched");
  if (!a || !b) return;
  memcpy(&clblast_sgemm, &a, sizeof a);
  memcpy(&clblast_sgemm_batched, &b, sizeof b);
}

bool loom_ocl_have_clblast(void) {
  const char *off = getenv("LOOM_OPENCL_NO_CLBLAST");
  if (off && off[0] && strcmp(off, "0") != 0) return false;
  pthread_once(&clblast_once, clblast_load);
  return clblast_sgemm != NULL;
}

loom_status loom_ocl_clblast_sgemm(loom_ctx *ctx, loom_ocl *cl, const loom_ocl_gemm_args *g) {
  if (!loom_ocl_have_clblast())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no CLBlast (libclblast.so.1)");
  void *p[3] = {g->a, g->b, g->c};
  size_t bytes[3] = {g->a_bytes, g->b_bytes, g->c_bytes};
  bool written[3] = {false, false, true};
  cl_mem mem[3] = {0};
  size_t *offs = NULL;
  float *scal = NULL;
  loom_status st = LOOM_STATUS_OK;
  pthread_mutex_lock(&cl->lock);
  cl_int e = CL_SUCCESS;
  for (int i = 0; i < 3 && e == CL_SUCCESS; i++) mem[i] = host_buffer(cl, p[i], bytes[i], written[i], &e);
  int rc = 0;
  int ta = g->trans_a ? 112 : 111, tb = g->trans_b ? 112 : 111;
  if (e == CL_SUCCESS && g->batch == 1) {
    rc = clblast_sgemm(101, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, 1.0f, mem[0],
                       (size_t)g->a_off[0], (size_t)g->lda, mem[1], (size_t)g->b_off[0],
                       (size_t)g->ldb, 0.0f, mem[2], 0, (size_t)g->n, &cl->queue, NULL);
  } else if (e == CL_SUCCESS) {
    offs = malloc(sizeof *offs * 3 * (size_t)g->batch);
    scal = malloc(sizeof *scal * 2 * (size_t)g->batch);
    if (!offs || !scal) {
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    } else {
      for (int64_t i = 0; i < g->batch; i++) {
        offs[i] = (size_t)g->a_off[i];
        offs[g->batch + i] = (size_t)g->b_off[i];
        offs[2 * g->batch + i] = (size_t)(i * g->m * g->n);
        scal[i] = 1.0f;
        scal[g->batch + i] = 0.0f;
      }
      rc = clblast_sgemm_batched(101, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, scal,
                                 mem[0], offs, (size_t)g->lda, mem[1], offs + g->batch,
                                 (size_t)g->ldb, scal + g->batch, mem[2], offs + 2 * g->batch,
                                 (size_t)g->n, (size_t)g->batch, &cl->queue, NULL);
    }
  }
  cl_int fe = finish_buffers(cl, 3, mem, bytes, written);
  pthread_mutex_unlock(&cl->lock);
  free(offs);
  free(scal);
  if (st) return st;
  if (e != CL_SUCCESS || fe != CL_SUCCESS) {
    char b[64];
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "OpenCL: CLBlast's buffers: %s",
                      loom_ocl_error_name(e != CL_SUCCESS ? e : fe, b, sizeof b));
  }
  if (rc != 0)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "CLBlast sgemm failed with status %d", rc);
  return LOOM_STATUS_OK;
}
#endif

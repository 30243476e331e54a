/*
 * The cuda backend: the fusion plan's kernels rendered as CUDA C
 * (codegen/gpu_codegen.h), compiled by NVRTC and run on the process's
 * CUDA device (cuda.h), matmuls on cuBLAS (f32, tf32 or bf16 by the
 * session's gemm option), flash attention (forward, backward) and dropout
 * masks as the GPU attention kernels (codegen/gpu_attention.h), every
 * other node on the host through the one node executor with its reference
 * kernel. Like the cpu backend it rewrites attention into flash attention
 * with the session's RNG placement; an `overlap` mask runs on the second
 * stream beside the GEMM before its attention (the cpu backend's schedule,
 * loom_cpu_overlap_schedule): it waits for an event recorded on the main
 * stream when it is queued, and the main stream waits for its event after
 * that GEMM. Dropout masks come from the same Philox counters as the cpu
 * backend's, so masks agree bit for bit.
 *
 * Memory is device-resident: the session's arena is pinned host memory
 * with a device mirror of the same size, and every value lives in the
 * mirror at its planned offset. A run copies the graph's inputs (caller
 * memory) to device buffers kept per value, runs every step on the main
 * stream, and copies the graph's outputs back to the host at the end. A
 * node that runs on the host waits for the stream, copies its operands to
 * the host side of the arena, runs there and copies its results back.
 *
 * Creating the backend fails with UNSUPPORTED, saying why ("no CUDA
 * driver: ..."), where there is no driver or device: tests skip it then.
 */
#include "runtime/cuda/cuda.h"

#include "codegen/gpu_attention.h"
#include "codegen/gpu_codegen.h"
#include "core/clock.h"
#include "core/strbuf.h"
#include "fusion/fusion.h"
#include "ir/dtype.h"
#include "ops/op.h"
#include "perf/machine.h"
#include "runtime/cpu/cpu.h"
#include "runtime/session.h"
#include "runtime/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A host buffer the session got from buffer_alloc and its device mirror. */
typedef struct cu_buffer {
  void *host;
  loom_cu_deviceptr dev;
  size_t bytes;
} cu_buffer;

typedef struct cuda_backend {
  loom_cu *cu;
  pthread_mutex_t lock; /* the buffer list */
  cu_buffer *bufs;
  int32_t n_bufs, cap_bufs;
  loom_cublas_handle blas;
  loom_cu_event start, end; /* around a run's device work ($LOOM_CUDA_TIMING) */
} cuda_backend;

typedef struct cuda_prepared {
  loom_program prog;
  char *source; /* the generated CUDA C (NULL: no kernels) */
  loom_cu_kernels *module;
  bool *gemm_on_device; /* per step */
  int compute_f32;      /* cuBLAS compute type of f32 products */
  int64_t modeled_bytes;
  int32_t n_values;
  int32_t *root;            /* per value: the plan's owner of its memory */
  loom_cu_deviceptr *stage; /* per root outside the arena: its device buffer */
  size_t *stage_bytes;
  loom_cu_deviceptr *dev;  /* per value, this run: where it lives on the device */
  bool *host_input;        /* per value, this run: a graph input read from caller memory */
  loom_cu_deviceptr *args; /* argument pointers, room for the widest kernel */
  char *attn_source;       /* the attention kernels' CUDA C (NULL: none) */
  loom_cu_kernels *attn;
  loom_cu_deviceptr attn_ws; /* the attention backward's workspace (Di; dS for dbias) */
  int32_t *join;           /* per step: on the second stream until step join[s] when > s */
  loom_cu_event *done;     /* per such step: recorded on the second stream after it */
  loom_cu_event ready;     /* recorded on the main stream when one is queued */
} cuda_prepared;

static void cuda_free(void *bctx) {
  cuda_backend *b = bctx;
  if (!b) return;
  if (b->blas) {
    const loom_cublas_api *api = NULL;
    loom_ctx *tmp = NULL;
    if (!loom_ctx_new(&tmp) && !loom_cublas_get(tmp, &api)) api->cublasDestroy_v2(b->blas);
    loom_ctx_free(tmp);
  }
  if (b->start) b->cu->api->cuEventDestroy_v2(b->start);
  if (b->end) b->cu->api->cuEventDestroy_v2(b->end);
  free(b->bufs);
  pthread_mutex_destroy(&b->lock);
  free(b);
}

/* Nodes run one at a time run their reference kernels on the host. */
static bool cuda_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  (void)g;
  (void)n;
  return false;
}

/* Pinned host memory (fast copies) and its device mirror. */
static void *cuda_buffer_alloc(void *bctx, size_t bytes) {
  cuda_backend *b = bctx;
  loom_cu *cu = b->cu;
  size_t n = (bytes + 255) / 256 * 256;
  if (!n) n = 256;
  if (cu->api->cuCtxSetCurrent(cu->context) != LOOM_CU_SUCCESS) return NULL;
  void *host = NULL;
  loom_cu_deviceptr dev = 0;
  if (cu->api->cuMemAllocHost_v2(&host, n) != LOOM_CU_SUCCESS) return NULL;
  if (cu->api->cuMemAlloc_v2(&dev, n) != LOOM_CU_SUCCESS) {
    cu->api->cuMemFreeHost(host);
    return NULL;
  }
  pthread_mutex_lock(&b->lock);
  if (b->n_bufs == b->cap_bufs) {
    int32_t cap = b->cap_bufs ? 2 * b->cap_bufs : 8;
    cu_buffer *nb = realloc(b->bufs, sizeof *nb * (size_t)cap);
    if (!nb) {
      pthread_mutex_unlock(&b->lock);
      cu->api->cuMemFree_v2(dev);
      cu->api->cuMemFreeHost(host);
      return NULL;
    }
    b->bufs = nb;
    b->cap_bufs = cap;
  }
  b->bufs[b->n_bufs++] = (cu_buffer){host, dev, n};
  pthread_mutex_unlock(&b->lock);
  return host;
}

static void cuda_buffer_free(void *bctx, void *p) {
  cuda_backend *b = bctx;
  if (!p) return;
  loom_cu *cu = b->cu;
  cu->api->cuCtxSetCurrent(cu->context);
  cu->api->cuStreamSynchronize(cu->stream);
  pthread_mutex_lock(&b->lock);
  for (int32_t i = 0; i < b->n_bufs; i++)
    if (b->bufs[i].host == p) {
      cu->api->cuMemFree_v2(b->bufs[i].dev);
      cu->api->cuMemFreeHost(p);
      b->bufs[i] = b->bufs[--b->n_bufs];
      break;
    }
  pthread_mutex_unlock(&b->lock);
}

/* The device address of host address p inside a buffer_alloc buffer, or 0. */
static loom_cu_deviceptr mirror_of(cuda_backend *b, const void *p) {
  uintptr_t x = (uintptr_t)p;
  loom_cu_deviceptr d = 0;
  pthread_mutex_lock(&b->lock);
  for (int32_t i = 0; i < b->n_bufs && !d; i++) {
    uintptr_t h = (uintptr_t)b->bufs[i].host;
    if (x >= h && x < h + b->bufs[i].bytes) d = b->bufs[i].dev + (x - h);
  }
  pthread_mutex_unlock(&b->lock);
  return d;
}

static void cuda_release(void *bctx, void *handle) {
  cuda_backend *b = bctx;
  cuda_prepared *h = handle;
  if (!h) return;
  free(h->source);
  loom_cu_module_free(h->module);
  b->cu->api->cuCtxSetCurrent(b->cu->context);
  b->cu->api->cuStreamSynchronize(b->cu->side); /* nothing queued there still runs */
  loom_cu_module_free(h->attn);
  free(h->attn_source);
  loom_cu_free(b->cu, h->attn_ws);
  for (int32_t s = 0; h->done && s < h->prog.n_steps; s++)
    if (h->done[s]) b->cu->api->cuEventDestroy_v2(h->done[s]);
  if (h->ready) b->cu->api->cuEventDestroy_v2(h->ready);
  free(h->done);
  free(h->join);
  loom_program_clear(&h->prog);
  if (h->stage) {
    b->cu->api->cuCtxSetCurrent(b->cu->context);
    b->cu->api->cuStreamSynchronize(b->cu->stream);
    for (int32_t v = 0; v < h->n_values; v++)
      loom_cu_free(b->cu, h->stage[v]);
  }
  free(h->stage);
  free(h->stage_bytes);
  free(h->dev);
  free(h->host_input);
  free(h->root);
  free(h->gemm_on_device);
  free(h->args);
  free(h);
}

/* The attention kernels of g (NVRTC), their workspace, and the events of
 * the steps that run on the second stream. */
static loom_status prepare_attention(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h,
                                     const loom_graph *g) {
  loom_cu *cu = be->cu;
  LOOM_TRY(loom_codegen_gpu_attention(ctx, LOOM_GPU_CUDA, g, &h->attn_source));
  if (!h->attn_source) return LOOM_STATUS_OK;
  loom_status st = loom_cu_module_build(ctx, cu, h->attn_source, &h->attn, NULL);
  if (st) {
    loom_error_prefix(ctx, "cuda backend: the attention kernels");
    return st;
  }
  int64_t ws_max = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS];
    int32_t nc = 0;
    int64_t ws = 0;
    LOOM_TRY(loom_gpu_attention_calls(ctx, g, &g->nodes[i], calls, &nc, &ws));
    ws_max = LOOM_MAX(ws_max, ws);
  }
  LOOM_TRY(loom_cu_alloc(ctx, cu, (size_t)ws_max, &h->attn_ws));
  if (!h->join) return LOOM_STATUS_OK;
  h->done = loom_calloc(ctx, (size_t)h->prog.n_steps + 1, sizeof *h->done);
  if (!h->done) return LOOM_STATUS_OUT_OF_MEMORY;
  LOOM_TRY(loom_cu_check(ctx, cu, cu->api->cuEventCreate(&h->ready, LOOM_CU_EVENT_DISABLE_TIMING),
                         "creating an event"));
  for (int32_t s = 0; s < h->prog.n_steps; s++)
    if (h->join[s] > s)
      LOOM_TRY(loom_cu_check(ctx, cu,
                             cu->api->cuEventCreate(&h->done[s], LOOM_CU_EVENT_DISABLE_TIMING),
                             "creating an event"));
  return LOOM_STATUS_OK;
}

static loom_status cuda_prepare(void *bctx, loom_ctx *ctx, const loom_graph *g,
                                const loom_session_options *opts, loom_prepared *out) {
  cuda_backend *be = bctx;
  double t0 = loom_now_s();
  LOOM_TRY(loom_cu_bind(ctx, be->cu));
  cuda_prepared *h = loom_calloc(ctx, 1, sizeof *h);
  if (!h) return LOOM_STATUS_OUT_OF_MEMORY;
  h->compute_f32 = loom_cuda_gemm_compute_f32(opts->gemm);
  loom_machine machine;
  loom_machine_detect(ctx, &machine);
  loom_fusion_mode mode = opts->fusion == LOOM_FUSION_EAGER ? LOOM_FUSION_NONE : opts->fusion;
  loom_fusion_options fo = {.mode = mode, .machine = &machine};
  loom_status st = loom_fusion_compile(ctx, g, &fo, &h->prog);
  if (st) {
    loom_error_prefix(ctx, "cuda backend: fusion (%s)", loom_fusion_mode_name(mode));
    goto fail;
  }
  /* overlapped masks move beside the GEMM before their attention */
  int32_t n_async_comm = 0;
  st = loom_cpu_overlap_schedule(ctx, g, &h->prog, &h->join, &n_async_comm);
  if (st) goto fail;
  const loom_program *prog = &h->prog;
  int32_t max_args = 1;
  for (int32_t i = 0; i < prog->n_kernels; i++)
    max_args = LOOM_MAX(max_args, prog->kernels[i].n_args);
  st = prepare_attention(ctx, be, h, g);
  if (st) goto fail;
  size_t nv = (size_t)(g->n_values ? g->n_values : 1);
  h->n_values = g->n_values;
  h->args = loom_calloc(ctx, (size_t)max_args, sizeof *h->args);
  h->gemm_on_device = loom_calloc(ctx, (size_t)(prog->n_steps + 1), sizeof *h->gemm_on_device);
  h->root = loom_calloc(ctx, nv, sizeof *h->root);
  h->stage = loom_calloc(ctx, nv, sizeof *h->stage);
  h->stage_bytes = loom_calloc(ctx, nv, sizeof *h->stage_bytes);
  h->dev = loom_calloc(ctx, nv, sizeof *h->dev);
  h->host_input = loom_calloc(ctx, nv, sizeof *h->host_input);
  if (!h->args || !h->gemm_on_device || !h->root || !h->stage || !h->stage_bytes || !h->dev ||
      !h->host_input) {
    st = LOOM_STATUS_OUT_OF_MEMORY;
    goto fail;
  }
  if (prog->n_kernels > 0) {
    st = loom_codegen_gpu(ctx, LOOM_GPU_CUDA, prog->kernels, prog->n_kernels, &h->source);
    bool hit = false;
    if (!st) st = loom_cu_module_build(ctx, be->cu, h->source, &h->module, &hit);
    if (st) {
      loom_error_prefix(ctx, "cuda backend: the generated kernels");
      goto fail;
    }
    out->stats.cache_hit = hit;
  }
  out->stats.n_kernels = prog->n_kernels;
  for (int32_t s = 0; s < prog->n_steps; s++) {
    const loom_step *ps = &prog->steps[s];
    if (ps->kind == LOOM_STEP_GEMM) {
      h->gemm_on_device[s] = loom_cuda_gemm_supported(g, &g->nodes[ps->node]);
      out->stats.n_gemm++;
      out->stats.n_epilogues += ps->epilogue_rows > 0;
      out->stats.n_fallback += !h->gemm_on_device[s];
    } else if (ps->kind == LOOM_STEP_NODE) {
      loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS];
      int32_t nc = 0;
      int64_t ws = 0;
      st = loom_gpu_attention_calls(ctx, g, &g->nodes[ps->node], calls, &nc, &ws);
      if (st) goto fail;
      out->stats.n_eager++;
      out->stats.n_fallback += nc == 0; /* else the attention kernels run it */
    }
  }
  const loom_cublas_api *blas = NULL;
  if (out->stats.n_gemm > out->stats.n_fallback - out->stats.n_eager &&
      (st = loom_cublas_get(ctx, &blas)) != LOOM_STATUS_OK) {
    loom_error_prefix(ctx, "cuda backend: the graph has matmuls");
    goto fail;
  }
  st = loom_program_plan_steps(ctx, g, prog, h->join, &out->plan);
  if (st) goto fail;
  for (int32_t v = 0; v < g->n_values; v++)
    h->root[v] = out->plan.root[v];
  out->stats.n_memory_ops = prog->n_memory_ops;
  out->stats.modeled_bytes = prog->modeled_bytes;
  h->modeled_bytes = prog->modeled_bytes;
  out->stats.compile_seconds = loom_now_s() - t0;
  out->handle = h;
  return LOOM_STATUS_OK;
fail:
  loom_memplan_free(&out->plan);
  cuda_release(bctx, h);
  return st;
}

static loom_status cuda_describe(void *bctx, loom_ctx *ctx, const loom_graph *g, const void *handle,
                                 loom_session_artifact what, char **text) {
  (void)bctx;
  const cuda_prepared *h = handle;
  *text = NULL;
  if (!h) return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "cuda backend: nothing prepared");
  const char *sources[] = {h->source, h->attn_source};
  return loom_program_describe(ctx, g, &h->prog, sources, 2, what, "cuda", text);
}

static size_t view_bytes(const loom_view *v) {
  return (size_t)loom_view_numel(v) * loom_dtype_size(v->dtype);
}

/*
 * Where every value lives on the device this run: in the arena's mirror,
 * or (caller memory: the graph's inputs and outputs computed in place) in
 * a device buffer of its root, kept across runs; the inputs are copied
 * there.
 */
static loom_status bind_values(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h,
                               const loom_graph *g, const loom_view *values) {
  loom_cu *cu = be->cu;
  for (int32_t v = 0; v < g->n_values; v++) {
    h->dev[v] = 0;
    h->host_input[v] = false;
  }
  for (int32_t i = 0; i < g->n_inputs; i++)
    h->host_input[g->inputs[i]] = true;
  for (int32_t v = 0; v < g->n_values; v++) {
    if (!values[v].data) continue;
    loom_cu_deviceptr d = mirror_of(be, values[v].data);
    if (d) {
      h->dev[v] = d;
      continue;
    }
    int32_t r = h->root[v];
    size_t bytes = LOOM_MAX(view_bytes(&values[r]), view_bytes(&values[v]));
    if (h->stage_bytes[r] < bytes || !h->stage[r]) {
      LOOM_TRY(loom_cu_sync(ctx, cu));
      loom_cu_free(cu, h->stage[r]);
      h->stage[r] = 0;
      h->stage_bytes[r] = 0;
      LOOM_TRY(loom_cu_alloc(ctx, cu, bytes, &h->stage[r]));
      h->stage_bytes[r] = bytes;
    }
    h->dev[v] = h->stage[r];
    h->host_input[v] = h->host_input[r];
  }
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    if (h->dev[v] && !mirror_of(be, values[v].data))
      LOOM_TRY(loom_cu_to_device(ctx, cu, h->dev[v], values[v].data, view_bytes(&values[v])));
  }
  return LOOM_STATUS_OK;
}

/* A node on the host: its operands brought over, its results sent back.
 * A reshape stays on the device: nothing to do when planned in place, a
 * device-to-device copy otherwise. */
static loom_status run_on_host(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h,
                               const loom_graph *g, const loom_node *n, loom_view *values) {
  loom_cu *cu = be->cu;
  if (n->op == LOOM_OP_RESHAPE && n->n_in == 1 && h->dev[n->in[0]] && h->dev[n->out[0]]) {
    loom_cu_deviceptr src = h->dev[n->in[0]], dst = h->dev[n->out[0]];
    size_t bytes = view_bytes(&values[n->out[0]]);
    if (src == dst || !bytes) return LOOM_STATUS_OK;
    return loom_cu_check(ctx, cu, cu->api->cuMemcpyDtoDAsync_v2(dst, src, bytes, cu->stream),
                         "a reshape's copy on the device");
  }
  for (int32_t i = 0; i < n->n_in; i++) {
    int32_t v = n->in[i];
    if (h->dev[v] && !h->host_input[v])
      LOOM_TRY(loom_cu_to_host(ctx, cu, values[v].data, h->dev[v], view_bytes(&values[v])));
  }
  LOOM_TRY(loom_cu_sync(ctx, cu));
  LOOM_TRY(loom_exec_node_ref(ctx, g, n, values));
  for (int32_t i = 0; i < n->n_out; i++) {
    int32_t v = n->out[i];
    if (h->dev[v])
      LOOM_TRY(loom_cu_to_device(ctx, cu, h->dev[v], values[v].data, view_bytes(&values[v])));
  }
  return LOOM_STATUS_OK;
}

static loom_status run_kernel(loom_ctx *ctx, cuda_prepared *h, const loom_kernel *k) {
  for (int32_t a = 0; a < k->n_args; a++)
    h->args[a] = k->args[a].temp ? 0 : h->dev[k->args[a].value];
  loom_status st = loom_cu_run(ctx, h->module, k, h->args);
  if (st) loom_error_prefix(ctx, "kernel %s", k->name);
  return st;
}

/* Queues node n on the attention kernels: on the main stream, or (async:
 * an overlapped mask) on the second stream after the main stream's work so
 * far, signalling h->done[s]. *done false when the kernels do not take n. */
static loom_status run_attention(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h,
                                 const loom_graph *g, const loom_node *n, int32_t s, bool async,
                                 bool *done) {
  *done = false;
  if (!h->attn) return LOOM_STATUS_OK;
  loom_cu *cu = be->cu;
  loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS];
  int32_t nc = 0;
  int64_t ws = 0;
  LOOM_TRY(loom_gpu_attention_calls(ctx, g, n, calls, &nc, &ws));
  const int32_t nb = n->n_in + n->n_out; /* at most 9 + 4 for the attention ops (bias, dbias) */
  if (nc == 0 || nb > 16) return LOOM_STATUS_OK;
  loom_cu_deviceptr bufs[16];
  for (int32_t i = 0; i < nb; i++) bufs[i] = h->dev[i < n->n_in ? n->in[i] : n->out[i - n->n_in]];
  *done = true;
  if (!async) return loom_cu_calls(ctx, h->attn, calls, nc, nb, bufs, h->attn_ws, cu->stream);
  LOOM_TRY(loom_cu_check(ctx, cu, cu->api->cuEventRecord(h->ready, cu->stream), "an event"));
  LOOM_TRY(loom_cu_check(ctx, cu, cu->api->cuStreamWaitEvent(cu->side, h->ready, 0),
                         "the second stream waiting for the main one"));
  LOOM_TRY(loom_cu_calls(ctx, h->attn, calls, nc, nb, bufs, 0, cu->side));
  return loom_cu_check(ctx, cu, cu->api->cuEventRecord(h->done[s], cu->side), "an event");
}

/* The main stream waits for the second stream's steps joined after step s. */
static loom_status join_after(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h, int32_t s) {
  loom_cu *cu = be->cu;
  for (int32_t a = 0; h->join && h->done && a < h->prog.n_steps; a++)
    if (h->join[a] == s && h->join[a] > a && h->done[a])
      LOOM_TRY(loom_cu_check(ctx, cu, cu->api->cuStreamWaitEvent(cu->stream, h->done[a], 0),
                             "the main stream waiting for the second one"));
  return LOOM_STATUS_OK;
}

/* The graph's outputs back in host memory, where the session reads them;
 * waits for the stream. */
static loom_status copy_outputs(loom_ctx *ctx, cuda_backend *be, cuda_prepared *h,
                                const loom_graph *g, const loom_view *values) {
  loom_cu *cu = be->cu;
  for (int32_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    if (!h->dev[v] || h->host_input[v]) continue;
    LOOM_TRY(loom_cu_to_host(ctx, cu, values[v].data, h->dev[v], view_bytes(&values[v])));
  }
  return loom_cu_sync(ctx, cu);
}

static const char *const step_category[] = {"kernel", "gemm", "eager"};

static loom_status cuda_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                                      loom_view *values) {
  cuda_backend *be = bctx;
  cuda_prepared *h = handle;
  const loom_program *prog = &h->prog;
  loom_trace *trace = ctx->trace;
  LOOM_TRY(loom_cu_bind(ctx, be->cu));
  double t_all = loom_now_s();
  LOOM_TRY(bind_values(ctx, be, h, g, values));
  const char *timing = getenv("LOOM_CUDA_TIMING");
  bool timed = timing && timing[0] && strcmp(timing, "0") != 0 &&
               (be->start || !be->cu->api->cuEventCreate(&be->start, 0)) &&
               (be->end || !be->cu->api->cuEventCreate(&be->end, 0)) &&
               !be->cu->api->cuEventRecord(be->start, be->cu->stream);
  for (int32_t s = 0; s < prog->n_steps; s++) {
    const loom_step *st = &prog->steps[s];
    double t0 = loom_trace_now(trace);
    loom_status rs = LOOM_STATUS_OK;
    if (st->kind == LOOM_STEP_KERNEL) {
      rs = run_kernel(ctx, h, &prog->kernels[st->kernel]);
    } else if (st->kind == LOOM_STEP_GEMM && h->gemm_on_device[s]) {
      const loom_node *n = &g->nodes[st->node];
      loom_view in[2] = {values[n->in[0]], values[n->in[1]]};
      loom_cu_deviceptr in_dev[2] = {h->dev[n->in[0]], h->dev[n->in[1]]};
      rs = loom_cuda_matmul(ctx, be->cu, &be->blas, h->compute_f32, n, in, in_dev,
                            &values[n->out[0]], h->dev[n->out[0]]);
      if (rs) loom_error_prefix(ctx, "matmul (node %d)", st->node);
    } else {
      const loom_node *n = &g->nodes[st->node];
      const bool async = h->join && h->join[s] > s && n->op == LOOM_OP_DROPOUT_MASK && h->done;
      bool done = false;
      rs = run_attention(ctx, be, h, g, n, s, async, &done);
      if (!rs && !done) rs = run_on_host(ctx, be, h, g, n, values);
    }
    /* a GEMM's epilogue: the kernel over all the product's rows */
    if (!rs && st->kind == LOOM_STEP_GEMM && st->epilogue_rows > 0)
      rs = run_kernel(ctx, h, &prog->kernels[st->kernel]);
    if (!rs) rs = join_after(ctx, be, h, s);
    if (!rs && trace) rs = loom_cu_sync(ctx, be->cu); /* a step's time, not its queueing */
    if (rs) {
      loom_cu_sync(ctx, be->cu);
      be->cu->api->cuStreamSynchronize(be->cu->side);
      return rs;
    }
    if (trace) {
      const char *name = st->kind == LOOM_STEP_KERNEL ? prog->kernels[st->kernel].name
                                                      : loom_op_name(g->nodes[st->node].op);
      loom_trace_event(trace, 0, name, step_category[st->kind], t0, loom_trace_now(trace));
    }
  }
  if (timed) be->cu->api->cuEventRecord(be->end, be->cu->stream);
  LOOM_TRY(copy_outputs(ctx, be, h, g, values));
  float ms = 0;
  if (timed && !be->cu->api->cuEventElapsedTime(&ms, be->start, be->end))
    /* the device's own time, without the copies in and out: what a
     * bandwidth figure needs (docs/GPU.md) */
    fprintf(stderr,
            "cuda run: %d kernels, %d steps, modeled %lld bytes: %.4f ms on the device (%.1f GB/s "
            "modeled), %.4f ms with the copies in and out\n",
            (int)prog->n_kernels, (int)prog->n_steps, (long long)h->modeled_bytes, (double)ms,
            ms > 0 ? (double)h->modeled_bytes / (ms * 1e6) : 0.0, (loom_now_s() - t_all) * 1e3);
  return LOOM_STATUS_OK;
}

/* Auto picks by the published rates of the GPU (perf/rng_model.h): an
 * H200's where the device is one, else an H100's. */
static void cuda_measure(void *arg, loom_ctx *ctx, loom_rng_model *m) {
  const loom_cu *cu = arg;
  (void)ctx;
  if (strstr(cu->name, "H200"))
    loom_rng_model_h200(m);
  else
    loom_rng_model_h100(m);
}

static loom_status cuda_rewrite(void *bctx, loom_ctx *ctx, const loom_graph *g,
                                const loom_session_options *opts, loom_graph **out,
                                int32_t *n_rewritten) {
  cuda_backend *be = bctx;
  return loom_gpu_attention_rewrite(ctx, g, opts, cuda_measure, be->cu, out, n_rewritten);
}

static void cuda_device_name(void *bctx, char *out, size_t n) {
  const cuda_backend *be = bctx;
  char d[200];
  loom_cu_describe(be->cu, d, sizeof d);
  snprintf(out, n, "CUDA: %s", d);
}

static const loom_backend_iface cuda_iface = {
    .name = "cuda",
    .free = cuda_free,
    .supports_op = cuda_supports_op,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .rewrite = cuda_rewrite,
    .prepare = cuda_prepare,
    .release = cuda_release,
    .describe = cuda_describe,
    .graph_compute = cuda_graph_compute,
    .device = cuda_device_name,
};

loom_status loom_cuda_backend_init(loom_ctx *ctx, loom_backend *b) {
  loom_cu *cu = NULL;
  loom_status st = loom_cu_get(ctx, &cu);
  if (st) {
    loom_error_prefix(ctx, "backend cuda");
    return st;
  }
  cuda_backend *be = loom_calloc(ctx, 1, sizeof *be);
  if (!be) return LOOM_STATUS_OUT_OF_MEMORY;
  be->cu = cu;
  pthread_mutex_init(&be->lock, NULL);
  b->iface = &cuda_iface;
  b->context = be;
  return LOOM_STATUS_OK;
}

/*
 * The opencl backend: the fusion plan's kernels rendered as OpenCL C
 * (codegen/gpu_codegen.h) and run on the process's OpenCL device (ocl.h:
 * PoCL on this machine's CPU), f32 matmuls on CLBlast where it is
 * installed, else Loom's tiled GEMM kernel (ocl_gemm.c), flash attention
 * (forward, backward) and dropout masks as the GPU attention kernels
 * (codegen/gpu_attention.h), every other node on the host through the one
 * node executor with its reference kernel. Like the cpu backend it
 * rewrites attention into flash attention with the session's RNG
 * placement; an `overlap` mask runs on the second command queue beside
 * the GEMM before its attention (the cpu backend's schedule,
 * loom_cpu_overlap_schedule), joined through its event after that GEMM.
 * Dropout masks come from the same Philox counters as on the cpu backend
 * (the kernels' lm_keep), so masks agree bit for bit. Fusion `eager` runs
 * one kernel per primitive (fusion none) on the device.
 *
 * Creating the backend fails with UNSUPPORTED, saying why, when there is
 * no OpenCL device: tests that compare backends skip it then.
 */
#include "runtime/opencl/opencl.h"

#include "codegen/gpu_attention.h"
#include "codegen/gpu_codegen.h"
#include "core/clock.h"
#include "core/strbuf.h"
#include "fusion/fusion.h"
#include "ir/dtype.h"
#include "kernel/kernel.h"
#include "ops/op.h"
#include "perf/machine.h"
#include "runtime/cpu/cpu.h"
#include "runtime/session.h"
#include "runtime/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ocl_backend {
  loom_ocl *dev;
  loom_ocl_module *gemm; /* lm_sgemm, built on first use */
} ocl_backend;

typedef struct ocl_prepared {
  loom_program prog;
  char *source;           /* the generated OpenCL C (NULL: no kernels) */
  loom_ocl_module *module;
  bool *gemm_on_device;   /* per step: a GEMM lm_sgemm runs */
  void **args;            /* argument pointers, room for the widest kernel */
  char *attn_source;      /* the attention kernels' OpenCL C (NULL: none) */
  loom_ocl_module *attn;
  int32_t *join;          /* per step: async until step join[s] when > s (NULL: none) */
  loom_ocl_pending **pending; /* per step: its async launch, until joined */
  double *queued_at;          /* per step: when its async launch was queued (trace) */
} ocl_prepared;

static void ocl_free(void *bctx) {
  ocl_backend *b = bctx;
  if (!b) return;
  loom_ocl_module_free(b->gemm);
  free(b);
}

/* Nodes run one at a time run their reference kernels on the host. */
static bool ocl_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  (void)g;
  (void)n;
  return false;
}

/* Page-aligned host memory: the device uses it in place. */
static void *ocl_buffer_alloc(void *bctx, size_t bytes) {
  (void)bctx;
  size_t n = (bytes + 4095) / 4096 * 4096;
  return aligned_alloc(4096, n ? n : 4096);
}

static void ocl_buffer_free(void *bctx, void *p) {
  (void)bctx;
  free(p);
}

static void ocl_release(void *bctx, void *handle) {
  (void)bctx;
  ocl_prepared *h = handle;
  if (!h) return;
  loom_program_clear(&h->prog);
  free(h->source);
  loom_ocl_module_free(h->module);
  free(h->gemm_on_device);
  free(h->args);
  free(h->attn_source);
  loom_ocl_module_free(h->attn);
  free(h->join);
  free(h->pending);
  free(h->queued_at);
  free(h);
}

static loom_status ocl_prepare(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_prepared *out) {
  ocl_backend *be = bctx;
  double t0 = loom_now_s();
  ocl_prepared *h = loom_calloc(ctx, 1, sizeof *h);
  if (!h) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_machine machine;
  loom_machine_detect(ctx, &machine);
  loom_fusion_mode mode = opts->fusion == LOOM_FUSION_EAGER ? LOOM_FUSION_NONE : opts->fusion;
  loom_fusion_options fo = {.mode = mode, .machine = &machine};
  loom_status st = loom_fusion_compile(ctx, g, &fo, &h->prog);
  if (st) {
    loom_error_prefix(ctx, "opencl backend: fusion (%s)", loom_fusion_mode_name(mode));
    goto fail;
  }
  /* overlapped masks move beside the GEMM before their attention */
  int32_t n_async_comm = 0;
  st = loom_cpu_overlap_schedule(ctx, g, &h->prog, &h->join, &n_async_comm);
  if (st) goto fail;
  const loom_program *prog = &h->prog;
  int32_t max_args = 1;
  for (int32_t i = 0; i < prog->n_kernels; i++) max_args = LOOM_MAX(max_args, prog->kernels[i].n_args);
  h->pending = loom_calloc(ctx, (size_t)(prog->n_steps + 1), sizeof *h->pending);
  h->queued_at = loom_calloc(ctx, (size_t)(prog->n_steps + 1), sizeof *h->queued_at);
  if (!h->pending || !h->queued_at) {
    st = LOOM_STATUS_OUT_OF_MEMORY;
    goto fail;
  }
  st = loom_codegen_gpu_attention(ctx, LOOM_GPU_OPENCL, g, &h->attn_source);
  if (!st && h->attn_source) st = loom_ocl_module_build(ctx, be->dev, h->attn_source, &h->attn, NULL);
  if (st) {
    loom_error_prefix(ctx, "opencl backend: the attention kernels");
    goto fail;
  }
  h->args = loom_calloc(ctx, (size_t)max_args, sizeof *h->args);
  h->gemm_on_device = loom_calloc(ctx, (size_t)(prog->n_steps + 1), sizeof *h->gemm_on_device);
  if (!h->args || !h->gemm_on_device) {
    st = LOOM_STATUS_OUT_OF_MEMORY;
    goto fail;
  }
  if (prog->n_kernels > 0) {
    st = loom_codegen_gpu(ctx, LOOM_GPU_OPENCL, prog->kernels, prog->n_kernels, &h->source);
    bool hit = false;
    if (!st) st = loom_ocl_module_build(ctx, be->dev, h->source, &h->module, &hit);
    if (st) {
      loom_error_prefix(ctx, "opencl backend: the generated kernels");
      goto fail;
    }
    out->stats.cache_hit = hit;
  }
  out->stats.n_kernels = prog->n_kernels;
  int32_t device_gemms = 0;
  for (int32_t s = 0; s < prog->n_steps; s++) {
    const loom_step *ps = &prog->steps[s];
    if (ps->kind == LOOM_STEP_GEMM) {
      h->gemm_on_device[s] = loom_ocl_gemm_supported(g, &g->nodes[ps->node]);
      out->stats.n_gemm++;
      out->stats.n_epilogues += ps->epilogue_rows > 0;
      out->stats.n_fallback += !h->gemm_on_device[s];
      device_gemms += h->gemm_on_device[s];
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
  if (!be->gemm && device_gemms > 0 && !loom_ocl_have_clblast()) {
    st = loom_ocl_module_build(ctx, be->dev, loom_ocl_gemm_source, &be->gemm, NULL);
    if (st) {
      loom_error_prefix(ctx, "opencl backend: the GEMM kernel");
      goto fail;
    }
  }
  st = loom_program_plan_steps(ctx, g, prog, h->join, &out->plan);
  if (st) goto fail;
  out->stats.n_memory_ops = prog->n_memory_ops;
  out->stats.modeled_bytes = prog->modeled_bytes;
  out->stats.compile_seconds = loom_now_s() - t0;
  out->handle = h;
  return LOOM_STATUS_OK;
fail:
  loom_memplan_free(&out->plan);
  ocl_release(bctx, h);
  return st;
}

static loom_status ocl_describe(void *bctx, loom_ctx *ctx, const loom_graph *g,
                                const void *handle, loom_session_artifact what, char **text) {
  (void)bctx;
  const ocl_prepared *h = handle;
  *text = NULL;
  if (!h) return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "opencl backend: nothing prepared");
  const char *sources[] = {h->source, h->attn_source};
  return loom_program_describe(ctx, g, &h->prog, sources, 2, what, "opencl", text);
}

static const char *const step_category[] = {"kernel", "gemm", "eager"};

static loom_status run_kernel(loom_ctx *ctx, ocl_prepared *h, const loom_kernel *k,
                              loom_view *values) {
  for (int32_t a = 0; a < k->n_args; a++)
    h->args[a] = k->args[a].temp ? NULL : values[k->args[a].value].data;
  loom_status st = loom_ocl_run(ctx, h->module, k, h->args);
  if (st) loom_error_prefix(ctx, "kernel %s", k->name);
  return st;
}

/* Runs node n on the attention kernels, on the second queue when async
 * (*pending then set); *done false when they do not take it. */
static loom_status run_attention(loom_ctx *ctx, ocl_prepared *h, const loom_graph *g,
                                 const loom_node *n, loom_view *values, bool async,
                                 loom_ocl_pending **pending, bool *done) {
  *done = false;
  if (!h->attn) return LOOM_STATUS_OK;
  loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS];
  int32_t nc = 0;
  int64_t ws_bytes = 0;
  LOOM_TRY(loom_gpu_attention_calls(ctx, g, n, calls, &nc, &ws_bytes));
  if (nc == 0) return LOOM_STATUS_OK;
  void *bufs[16];
  size_t bytes[16];
  bool written[16];
  const int32_t nb = n->n_in + n->n_out; /* at most 9 + 4 for the attention ops (bias, dbias) */
  if (nb > 16) return LOOM_STATUS_OK;
  for (int32_t i = 0; i < nb; i++) {
    const loom_view *v = &values[i < n->n_in ? n->in[i] : n->out[i - n->n_in]];
    bufs[i] = v->data;
    bytes[i] = (size_t)loom_view_numel(v) * loom_dtype_size(v->dtype);
    written[i] = i >= n->n_in;
  }
  void *ws = ws_bytes > 0 ? malloc((size_t)ws_bytes) : NULL;
  if (ws_bytes > 0 && !ws) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  loom_status st = loom_ocl_calls(ctx, h->attn, calls, nc, nb, bufs, bytes, written, ws,
                                  (size_t)ws_bytes, async ? pending : NULL);
  free(ws); /* an async call (the mask) has no workspace */
  if (st) loom_error_prefix(ctx, "%s (node %d)", loom_op_name(n->op), (int)(n - g->nodes));
  *done = true;
  return st;
}

/* The trace lane of the second queue's work (from queuing to joining). */
#define SIDE_LANE 1

/* Joins every async launch whose join step is s. */
static loom_status join_after(loom_ctx *ctx, ocl_prepared *h, const loom_graph *g, int32_t s) {
  loom_status st = LOOM_STATUS_OK;
  for (int32_t a = 0; h->join && a < h->prog.n_steps; a++)
    if (h->pending[a] && h->join[a] == s) {
      loom_status js = loom_ocl_join(ctx, h->pending[a]);
      h->pending[a] = NULL;
      if (!st) st = js;
      loom_trace_event(ctx->trace, SIDE_LANE, loom_op_name(g->nodes[h->prog.steps[a].node].op),
                       "rng", h->queued_at[a], loom_trace_now(ctx->trace));
    }
  return st;
}

/* After a failure: nothing left running on the second queue. */
static void drain(loom_ctx *ctx, ocl_prepared *h) {
  for (int32_t a = 0; a < h->prog.n_steps; a++) {
    loom_ocl_join(ctx, h->pending[a]);
    h->pending[a] = NULL;
  }
}

static loom_status ocl_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                                     loom_view *values) {
  ocl_backend *be = bctx;
  ocl_prepared *h = handle;
  const loom_program *prog = &h->prog;
  loom_trace *trace = ctx->trace;
  for (int32_t s = 0; s < prog->n_steps; s++) {
    const loom_step *st = &prog->steps[s];
    double t0 = loom_trace_now(trace);
    loom_status rs = LOOM_STATUS_OK;
    if (st->kind == LOOM_STEP_KERNEL) {
      rs = run_kernel(ctx, h, &prog->kernels[st->kernel], values);
    } else if (st->kind == LOOM_STEP_GEMM && h->gemm_on_device[s]) {
      const loom_node *n = &g->nodes[st->node];
      loom_view in[2] = {values[n->in[0]], values[n->in[1]]};
      rs = loom_ocl_matmul(ctx, be->dev, loom_ocl_have_clblast() ? NULL : be->gemm, n, in,
                           &values[n->out[0]]);
      if (rs) loom_error_prefix(ctx, "matmul (node %d)", st->node);
    } else {
      const loom_node *n = &g->nodes[st->node];
      bool done = false;
      const bool async = h->join && h->join[s] > s && n->op == LOOM_OP_DROPOUT_MASK;
      h->queued_at[s] = t0;
      if (async && trace) rs = loom_trace_name_lane(ctx, trace, SIDE_LANE, "opencl queue 2");
      if (!rs) rs = run_attention(ctx, h, g, n, values, async, &h->pending[s], &done);
      if (!rs && !done) rs = loom_exec_node_ref(ctx, g, n, values);
    }
    /* a GEMM's epilogue: the kernel over all the product's rows */
    if (!rs && st->kind == LOOM_STEP_GEMM && st->epilogue_rows > 0)
      rs = run_kernel(ctx, h, &prog->kernels[st->kernel], values);
    if (rs) {
      drain(ctx, h);
      return rs;
    }
    if (trace) {
      const char *name = st->kind == LOOM_STEP_KERNEL ? prog->kernels[st->kernel].name
                                                      : loom_op_name(g->nodes[st->node].op);
      loom_trace_event(trace, 0, name, step_category[st->kind], t0, loom_trace_now(trace));
    }
    rs = join_after(ctx, h, g, s); /* the masks queued beside this step */
    if (rs) {
      drain(ctx, h);
      return rs;
    }
  }
  return LOOM_STATUS_OK;
}

/* On PoCL the device is this CPU, so the cpu backend's measured rates are
 * the ones auto chooses by: measured once per process (a second or so). */
static void ocl_measure(void *arg, loom_ctx *ctx, loom_rng_model *m) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static loom_rng_model rates;
  static bool measured;
  (void)arg;
  pthread_mutex_lock(&lock);
  if (!measured) loom_cpu_rng_model(ctx, loom_ctx_resolved_threads(ctx), &rates);
  measured = true;
  *m = rates;
  pthread_mutex_unlock(&lock);
}

static loom_status ocl_rewrite(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_graph **out,
                               int32_t *n_rewritten) {
  (void)bctx;
  return loom_gpu_attention_rewrite(ctx, g, opts, ocl_measure, NULL, out, n_rewritten);
}

static void ocl_device_name(void *bctx, char *out, size_t n) {
  const ocl_backend *be = bctx;
  snprintf(out, n, "OpenCL: %s", loom_ocl_device_name(be->dev));
}

static const loom_backend_iface ocl_iface = {
    .name = "opencl",
    .free = ocl_free,
    .supports_op = ocl_supports_op,
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_free = ocl_buffer_free,
    .rewrite = ocl_rewrite,
    .prepare = ocl_prepare,
    .release = ocl_release,
    .describe = ocl_describe,
    .graph_compute = ocl_graph_compute,
    .device = ocl_device_name,
};

loom_status loom_opencl_backend_init(loom_ctx *ctx, loom_backend *b) {
  loom_ocl *dev = NULL;
  loom_status st = loom_ocl_get(ctx, &dev);
  if (st) {
    loom_error_prefix(ctx, "backend opencl");
    return st;
  }
  ocl_backend *be = loom_calloc(ctx, 1, sizeof *be);
  if (!be) return LOOM_STATUS_OUT_OF_MEMORY;
  be->dev = dev;
  b->iface = &ocl_iface;
  b->context = be;
  return LOOM_STATUS_OK;
}

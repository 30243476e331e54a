/*
 * The cpu backend. Before decomposition it rewrites attention into flash
 * attention with an RNG placement. With fusion "eager" it runs the graph
 * node by node: nodes with a cpu kernel (f32 compute, any-dtype data
 * movement; supports_op, asked at prepare) run it, every other node runs
 * its reference kernel through the same executor (loom_exec_node), so the
 * backend is complete for every primitive. With "stitch" (the default),
 * "loop" or "none" it runs a fused program of generated kernels
 * (cpu_program.c), whose GEMM and leftover nodes run here one at a time
 * by the same rule.
 */
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/gemm.h"

#include "ops/composite_util.h"
#include "ops/op.h"
#include "passes/attention.h"
#include "passes/short_reduce.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

static loom_cpu_kernel select_kernel(const loom_graph *g, const loom_node *n) {
  const loom_op_def *d = loom_op_get(n->op);
  if (!d) return NULL;
  switch (d->cls) {
  case LOOM_OPCLASS_ELEMENTWISE: return loom_cpu_elementwise_kernel(g, n);
  case LOOM_OPCLASS_REDUCE: return loom_cpu_reduce_kernel(g, n);
  case LOOM_OPCLASS_LAYOUT: return loom_cpu_layout_kernel(g, n);
  case LOOM_OPCLASS_INDEX:
  case LOOM_OPCLASS_RNG: return n->op == LOOM_OP_DROPOUT_MASK ? loom_cpu_attention_kernel(g, n)
                                                             : loom_cpu_index_kernel(g, n);
  case LOOM_OPCLASS_ATTENTION: return loom_cpu_attention_kernel(g, n);
  case LOOM_OPCLASS_SOURCE: return loom_cpu_source_kernel(g, n);
  case LOOM_OPCLASS_GEMM:
    return n->op == LOOM_OP_MATMUL ? loom_cpu_matmul_kernel(g, n) : loom_cpu_conv_kernel(g, n);
  case LOOM_OPCLASS_WINDOW: return loom_cpu_conv_kernel(g, n);
  /* the reference kernel, on ctx->comm_env's communicator */
  case LOOM_OPCLASS_COMM: return NULL;
  default: return NULL;
  }
}

static void cpu_free(void *bctx) { (void)bctx; }

static bool cpu_supports_op(void *bctx, const loom_graph *g, const loom_node *n) {
  (void)bctx;
  return select_kernel(g, n) != NULL;
}

/* What prepare made: the kernel table and, unless eager, the program. */
typedef struct cpu_prepared {
  loom_cpu_kernel *kernels; /* per node; NULL: the reference kernel */
  loom_cpu_program *program;
  loom_cpu_packs *packs; /* GEMM operands packed across runs */
} cpu_prepared;

/* loom_exec_node's view of a cpu kernel. */
typedef struct cpu_call {
  const loom_cpu *c;
  loom_cpu_kernel k;
} cpu_call;

static loom_status call_cpu_kernel(const void *self, const loom_node *n, const loom_view *in,
                                   const loom_view *out) {
  const cpu_call *cc = self;
  return cc->k(cc->c, n, in, out);
}

loom_status loom_cpu_exec_node(const loom_cpu *c, const loom_graph *g, const loom_node *n,
                               loom_view *values) {
  cpu_call cc = {c, c->kernels ? c->kernels[n - g->nodes] : NULL};
  return loom_exec_node(c->ctx, g, n, values, cc.k ? call_cpu_kernel : NULL, &cc);
}

loom_status loom_cpu_prepare_eager(const loom_graph *g, const loom_cpu_kernel *kernels,
                                   loom_prepared *out) {
  out->stats.n_kernels = 0;
  out->stats.n_gemm = out->stats.n_eager = out->stats.n_fallback = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->op == LOOM_OP_MATMUL && kernels[i])
      out->stats.n_gemm++;
    else
      out->stats.n_eager++;
    out->stats.n_fallback += !kernels[i];
  }
  return loom_memplan_build(g, &out->plan);
}

static void cpu_release(void *bctx, void *handle) {
  (void)bctx;
  cpu_prepared *h = handle;
  if (!h) return;
  loom_cpu_program_free(h->program);
  loom_cpu_packs_free(h->packs);
  free(h->kernels);
  free(h);
}

static loom_status cpu_prepare(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_prepared *out) {
  cpu_prepared *h = loom_calloc(ctx, 1, sizeof *h);
  if (!h) return LOOM_STATUS_OUT_OF_MEMORY;
  h->kernels = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *h->kernels);
  if (!h->kernels) {
    cpu_release(bctx, h);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  /* the nodes supports_op took, and only those, run a cpu kernel */
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (out->supported && out->supported[i]) h->kernels[i] = select_kernel(g, &g->nodes[i]);
  loom_status st = opts->fusion == LOOM_FUSION_EAGER
                       ? loom_cpu_prepare_eager(g, h->kernels, out)
                       : loom_cpu_program_prepare(ctx, g, opts->fusion, h->kernels, out, &h->program);
  if (!st) st = loom_cpu_packs_new(ctx, g, &h->packs);
  if (st) {
    cpu_release(bctx, h);
    return st;
  }
  out->handle = h;
  return LOOM_STATUS_OK;
}

static loom_status cpu_describe(void *bctx, loom_ctx *ctx, const loom_graph *g,
                                const void *handle, loom_session_artifact what, char **text) {
  (void)bctx;
  const cpu_prepared *h = handle;
  if (!h || !h->program)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "the cpu backend runs this graph node by node (fusion eager): no program");
  return loom_cpu_program_describe(ctx, g, h->program, what, text);
}

static loom_status cpu_graph_compute(void *bctx, loom_ctx *ctx, const loom_graph *g, void *handle,
                                     loom_view *values) {
  (void)bctx;
  const cpu_prepared *h = handle;
  loom_cpu c = {.ctx = ctx, .nt = loom_ctx_resolved_threads(ctx), .kernels = h->kernels,
                .packs = h->packs};
  if (h->program && !loom_cpu_program_is_eager(h->program))
    return loom_cpu_program_run(h->program, &c, g, values);
  for (int32_t i = 0; i < g->n_nodes; i++)
    LOOM_TRY(loom_cpu_exec_node(&c, g, &g->nodes[i], values));
  return LOOM_STATUS_OK;
}

static void cpu_freeze(void *bctx, void *handle, const bool *frozen) {
  (void)bctx;
  cpu_prepared *h = handle;
  if (h && h->packs) loom_cpu_packs_set_frozen(h->packs, frozen);
}

static int32_t cpu_packed(void *bctx, const void *handle, int64_t *bytes) {
  (void)bctx;
  const cpu_prepared *h = handle;
  return loom_cpu_packs_count(h ? h->packs : NULL, bytes);
}

/* Attention becomes flash attention (passes/attention.h) unless the
 * options ask for it decomposed; the RNG placement model (rng_rates.c) is
 * measured only where a placement is to be chosen. */
static loom_status cpu_rewrite(void *bctx, loom_ctx *ctx, const loom_graph *g,
                               const loom_session_options *opts, loom_graph **out,
                               int32_t *n_rewritten) {
  (void)bctx;
  loom_rng_placement placement = opts->rng;
  if (opts->attention == LOOM_ATTENTION_DECOMPOSED) return LOOM_STATUS_OK;
  /* attention is an `attention` node or a pattern around a softmax */
  bool dropout = false;
  if (!loom_attention_candidates(g, &dropout)) return LOOM_STATUS_OK;
  loom_rng_model model;
  bool measured = placement == LOOM_RNG_AUTO && dropout;
  if (measured) loom_cpu_rng_model(ctx, loom_ctx_resolved_threads(ctx), &model);
  /* auto: flash or decomposed per attention op, by the cost model */
  loom_attention_costs costs;
  bool choose = opts->attention == LOOM_ATTENTION_AUTO;
  if (choose) loom_cpu_attention_costs(ctx, &costs);
  loom_status st = loom_graph_fuse_attention_costed(g, placement, measured ? &model : NULL,
                                                    choose ? &costs : NULL, out, n_rewritten);
  if (st && g->ctx != ctx) loom_error(ctx, st, "%s", loom_ctx_error(g->ctx));
  return st;
}

/* The backend's last graph passes: in the fusing modes, reductions over a
 * short middle axis as element-wise chains (passes/short_reduce.h); then
 * layout ops around flash attention as its strided operands
 * (passes/attention.h), unless LOOM_ATTENTION_VIEWS=0 (the copies kept:
 * an A/B switch; the results are the same bit for bit). */
static loom_status cpu_finish(void *bctx, loom_ctx *ctx, const loom_graph *g,
                              const loom_session_options *opts, loom_graph **out) {
  (void)bctx;
  *out = NULL;
  loom_graph *cur = NULL; /* the latest rewrite, when there is one */
  int32_t n = 0;
  loom_status st = LOOM_STATUS_OK;
  if (opts->fusion == LOOM_FUSION_LOOP || opts->fusion == LOOM_FUSION_STITCH) {
    st = loom_graph_unroll_short_reductions(g, &cur, &n);
    if (!st && n == 0) loom_graph_free(cur), cur = NULL;
  }
  const char *env = getenv("LOOM_ATTENTION_VIEWS");
  bool views = !(env && strcmp(env, "0") == 0), any = false;
  for (int32_t i = 0; i < g->n_nodes && views && !any; i++)
    any = g->nodes[i].op == LOOM_OP_FLASH_ATTENTION || g->nodes[i].op == LOOM_OP_FLASH_ATTENTION_GRAD;
  if (!st && any) {
    loom_graph *f = NULL;
    st = loom_graph_fold_attention_views(cur ? cur : g, &f, &n);
    if (!st && n > 0) loom_graph_free(cur), cur = f;
    else loom_graph_free(f);
  }
  if (st) {
    loom_graph_free(cur);
    if (g->ctx != ctx) loom_error(ctx, st, "%s", loom_ctx_error(g->ctx));
    return st;
  }
  *out = cur;
  return LOOM_STATUS_OK;
}

static void cpu_rng_model(void *bctx, loom_ctx *ctx, int32_t threads, loom_rng_model *m) {
  (void)bctx;
  loom_cpu_rng_model(ctx, threads, m);
}

static void cpu_machine_rates(void *bctx, loom_ctx *ctx, loom_machine *m) {
  (void)bctx;
  loom_gemm_rows_curve(ctx, m);
}

static void cpu_attention_costs(void *bctx, loom_ctx *ctx, struct loom_attention_costs *c) {
  (void)bctx;
  loom_cpu_attention_costs(ctx, c);
}

static const loom_backend_iface cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .supports_op = cpu_supports_op,
    .buffer_alloc = loom_host_buffer_alloc,
    .buffer_free = loom_host_buffer_free,
    .rewrite = cpu_rewrite,
    .finish = cpu_finish,
    .rng_model = cpu_rng_model,
    .machine_rates = cpu_machine_rates,
    .attention_costs = cpu_attention_costs,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .describe = cpu_describe,
    .graph_compute = cpu_graph_compute,
    .freeze = cpu_freeze,
    .packed = cpu_packed,
};

loom_status loom_cpu_backend_init(loom_ctx *ctx, loom_backend *b) {
  (void)ctx;
  b->iface = &cpu_iface;
  b->context = NULL;
  return LOOM_STATUS_OK;
}

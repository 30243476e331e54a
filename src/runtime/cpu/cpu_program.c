/*
 * Fused execution on the cpu backend: a graph is fused into a program
 * (fusion/fusion.h), its kernels become C (codegen/c_codegen.h) that the
 * system compiler turns into a shared object (runtime/jit.h), and a run
 * walks the program's steps: generated kernels, GEMMs through the cpu
 * matmul path, and leftover nodes run eagerly. Only values the program
 * materializes get memory (passes/memplan.h, step-based plan).
 */
#include "runtime/cpu/cpu.h"
#include "core/clock.h"
#include "core/strbuf.h"
#include "runtime/cpu/gemm.h"

#include "codegen/c_codegen.h"
#include "comm/comm.h"
#include "fusion/fusion.h"
#include "kernel/in_place.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "perf/machine.h"
#include "perf/measure.h"
#include "runtime/jit.h"
#include "runtime/stream.h"
#include "runtime/trace.h"
#include "runtime/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct loom_cpu_program {
  loom_program prog;
  char *source;         /* the generated C (NULL when no kernels) */
  loom_jit_module *jit; /* NULL: no kernels, or no compiler (eager) */
  loom_kernel_fn *fns;  /* per kernel */
  loom_kernel_rows_fn *rows_fns; /* per kernel: its rows entry, or NULL */
  bool eager;           /* no compiler: runs node by node */
  void **args;          /* argument pointers, room for the widest kernel */
  void *workspace;      /* grown to the largest kernel's need */
  int64_t workspace_bytes;
  int64_t *need;        /* per kernel: workspace bytes at need_threads */
  int32_t need_threads; /* 0: need not computed yet */
  /* Async steps (loom_cpu_overlap_schedule): per step, join[s] > s when
   * it runs off the main thread until step join[s] is done (NULL: no
   * async or comm step). Dropout masks run on `worker` beside the next
   * step (a GEMM); comm steps on the comm stream of ctx->comm_env. */
  int32_t *join;
  loom_worker *worker;
  loom_ctx *task_ctx;        /* the worker task's own context, for its errors */
  struct comm_task *comm;    /* per step: a comm step's task on the stream */
  int64_t *wait_after;       /* per step: the stream ticket to wait for after it, 0 */
  /* per node, for steps with an epilogue (conv or GEMM): the output is
   * read past its epilogue kernel (or is a graph output), so it must be
   * stored; a conv's epilogue cannot replace it, a GEMM's product cannot
   * stay in tiles (NULL: no epilogues) */
  bool *c_read;
  /* per node: LOOM_CPU_*_BLOCKED of conv and pool steps (NULL: all plain) */
  uint8_t *layout;
  /* a GEMM product not read past its epilogue goes to c_tiles, one buffer
   * a thread (loom_gemm_epilogue.tiles), and each thread's epilogue calls
   * read their arguments from targs (n_args a thread) */
  float *c_tiles;
  int64_t c_tiles_cap; /* floats */
  void **targs;
  int64_t targs_cap;   /* pointers */
};

void loom_cpu_program_free(loom_cpu_program *p) {
  if (!p) return;
  loom_program_clear(&p->prog);
  free(p->source);
  free(p->fns);
  free(p->rows_fns);
  free(p->args);
  free(p->workspace);
  free(p->need);
  free(p->join);
  free(p->comm);
  free(p->wait_after);
  free(p->c_read);
  free(p->layout);
  free(p->c_tiles);
  free(p->targs);
  loom_worker_free(p->worker);
  loom_ctx_free(p->task_ctx);
  loom_jit_free(p->jit);
  free(p);
}

loom_status loom_cpu_program_describe(loom_ctx *ctx, const loom_graph *g,
                                      const loom_cpu_program *p, loom_session_artifact what,
                                      char **text) {
  const char *sources[] = {p->source};
  return loom_program_describe(ctx, g, &p->prog, sources, 1, what, "cpu", text);
}

bool loom_cpu_program_is_eager(const loom_cpu_program *p) { return !p || p->eager; }

/* The in-place offers of kernel k's step (loom_memplan_step.in_place:
 * pairs of an index in its out[], the kernel's outputs in argument
 * order, and one in its in[], the arguments that are neither outputs nor
 * temps, in order) into offer; returns how many. Room: 2 n_in n_out
 * ints. */
static int32_t offer_in_place(const loom_kernel *k, int32_t *offer) {
  int32_t n = 0, o = 0;
  int32_t *from = malloc(sizeof(int32_t) * (size_t)(k->n_args + 1));
  for (int32_t a = 0; from && a < k->n_args; a++) {
    if (!k->args[a].is_output) continue;
    int32_t m = loom_kernel_in_place_inputs(k, a, from, k->n_args);
    for (int32_t c = 0; c < m; c++) {
      int32_t i = -1;
      for (int32_t b = 0; b <= from[c]; b++) i += !k->args[b].is_output && !k->args[b].temp;
      offer[2 * n] = o, offer[2 * n + 1] = i;
      n++;
    }
    o++;
  }
  free(from);
  return n;
}

/* The memory plan over the program's steps: a kernel reads its input
 * arguments and writes its outputs; GEMM and NODE steps their node's; a
 * GEMM with an epilogue both (the product is an output of the step, so
 * nothing the epilogue writes shares its memory). An async step (join[s]
 * > s) keeps its values until it is joined (loom_cpu_program_run). With
 * in_place, a kernel step offers each output the memory of an input it
 * updates element by element (kernel/in_place.h): C the generator emits
 * honours that; other targets' code is not checked for it. */
static loom_status plan_steps(loom_ctx *ctx, const loom_graph *g, const loom_program *prog,
                              const int32_t *join, bool in_place, loom_memplan *plan) {
  int32_t ns = prog->n_steps, total = 0;
  int64_t room = 0; /* in-place offers: 2 n_in n_out ints per kernel step */
  for (int32_t s = 0; s < ns; s++) {
    const loom_step *st = &prog->steps[s];
    if (st->kind == LOOM_STEP_KERNEL || st->epilogue_rows > 0)
      total += prog->kernels[st->kernel].n_args;
    if (st->kind == LOOM_STEP_KERNEL && in_place) {
      const loom_kernel *k = &prog->kernels[st->kernel];
      int64_t n_out = 0;
      for (int32_t a = 0; a < k->n_args; a++) n_out += k->args[a].is_output;
      room += 2 * n_out * (k->n_args - n_out);
    }
    if (st->kind != LOOM_STEP_KERNEL) total += g->nodes[st->node].n_in + g->nodes[st->node].n_out;
  }
  loom_memplan_step *steps = loom_calloc(ctx, (size_t)(ns ? ns : 1), sizeof *steps);
  int32_t *ids = loom_malloc(ctx, sizeof(int32_t) * (size_t)(total ? total : 1));
  int32_t *offer = loom_malloc(ctx, sizeof(int32_t) * (size_t)(room ? room : 1));
  int64_t offered = 0;
  if (!steps || !ids || !offer) {
    free(steps);
    free(ids);
    free(offer);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t at = 0;
  for (int32_t s = 0; s < ns; s++) {
    const loom_step *st = &prog->steps[s];
    loom_memplan_step *m = &steps[s];
    if (st->kind == LOOM_STEP_KERNEL) {
      const loom_kernel *k = &prog->kernels[st->kernel];
      /* inputs, then outputs, in one run of ids */
      /* temps live in the kernel's workspace, not in the arena */
      m->in = ids + at;
      for (int32_t a = 0; a < k->n_args; a++)
        if (!k->args[a].is_output && !k->args[a].temp) ids[at + m->n_in++] = k->args[a].value;
      m->out = ids + at + m->n_in;
      for (int32_t a = 0; a < k->n_args; a++)
        if (k->args[a].is_output) ids[at + m->n_in + m->n_out++] = k->args[a].value;
      if (in_place) {
        m->in_place = offer + offered;
        m->n_in_place = offer_in_place(k, offer + offered);
        offered += 2 * (int64_t)m->n_in_place;
      }
      at += k->n_args;
    } else if (st->epilogue_rows > 0) { /* GEMM node's, then the epilogue's */
      const loom_node *n = &g->nodes[st->node];
      const loom_kernel *k = &prog->kernels[st->kernel];
      m->in = ids + at;
      for (int32_t i = 0; i < n->n_in; i++) ids[at + m->n_in++] = n->in[i];
      for (int32_t a = 0; a < k->n_args; a++)
        if (!k->args[a].is_output && k->args[a].value != n->out[0])
          ids[at + m->n_in++] = k->args[a].value;
      m->out = ids + at + m->n_in;
      ids[at + m->n_in + m->n_out++] = n->out[0];
      for (int32_t a = 0; a < k->n_args; a++)
        if (k->args[a].is_output) ids[at + m->n_in + m->n_out++] = k->args[a].value;
      at += m->n_in + m->n_out;
    } else {
      const loom_node *n = &g->nodes[st->node];
      *m = (loom_memplan_step){.n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out};
      if (n->op == LOOM_OP_RESHAPE && n->n_in == 1 && n->n_out == 1) {
        const loom_type *a = &g->values[n->in[0]].type, *b = &g->values[n->out[0]].type;
        m->alias = loom_type_numel(a) * (int64_t)loom_dtype_size(a->dtype) ==
                   loom_type_numel(b) * (int64_t)loom_dtype_size(b->dtype);
      }
    }
    m->join = join ? join[s] : 0;
  }
  loom_status st = loom_memplan_build_steps(g, ns, steps, prog->materialized, plan);
  free(steps);
  free(ids);
  free(offer);
  if (st)
    loom_error_prefix(ctx, "memory plan of the %s program",
                      loom_fusion_mode_name(prog->mode));
  return st;
}

loom_status loom_program_plan_steps(loom_ctx *ctx, const loom_graph *g, const loom_program *prog,
                                     const int32_t *join, loom_memplan *plan) {
  return plan_steps(ctx, g, prog, join, false, plan);
}

/* Compiles and loads the generated source; resolves every kernel. On a
 * missing compiler sets p->eager and a warning instead of failing. */
static loom_status load_code(loom_ctx *ctx, loom_cpu_program *p, loom_prepared *out) {
  const loom_program *prog = &p->prog;
  if (prog->n_kernels == 0) return LOOM_STATUS_OK; /* nothing to compile */
  LOOM_TRY(loom_codegen_c(ctx, prog->kernels, prog->n_kernels, &p->source));
  loom_jit_info info;
  memset(&info, 0, sizeof info);
  loom_status st = loom_jit_load_ex(ctx, p->source, &p->jit, &info);
  if (st == LOOM_STATUS_UNSUPPORTED) {
    snprintf(out->warning, sizeof out->warning,
             "cannot compile generated code (%s): running the graph eagerly instead",
             loom_ctx_error(ctx));
    loom_error_clear(ctx);
    p->eager = true;
    return LOOM_STATUS_OK;
  }
  if (st) {
    loom_error_prefix(ctx, "cpu backend: compiling the generated kernels");
    return st;
  }
  out->stats.cache_hit = info.cache_hit;
  if (info.warning[0] && !out->warning[0])
    snprintf(out->warning, sizeof out->warning, "%s", info.warning);
  p->fns = loom_calloc(ctx, (size_t)prog->n_kernels, sizeof *p->fns);
  p->rows_fns = loom_calloc(ctx, (size_t)prog->n_kernels, sizeof *p->rows_fns);
  if (!p->fns || !p->rows_fns) return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t max_args = 1;
  for (int32_t i = 0; i < prog->n_kernels; i++) {
    const loom_kernel *k = &prog->kernels[i];
    void *sym = loom_jit_symbol(p->jit, k->name);
    if (!sym)
      return loom_error(ctx, LOOM_STATUS_INTERNAL,
                        "cpu backend: the generated module has no kernel '%s'", k->name);
    /* dlsym hands out data pointers; POSIX guarantees this conversion */
    memcpy(&p->fns[i], &sym, sizeof sym);
    if (loom_kernel_has_rows_entry(k)) {
      char rows_name[sizeof k->name + 8];
      snprintf(rows_name, sizeof rows_name, "%s_rows", k->name);
      sym = loom_jit_symbol(p->jit, rows_name);
      if (!sym)
        return loom_error(ctx, LOOM_STATUS_INTERNAL,
                          "cpu backend: the generated module has no entry '%s'", rows_name);
      memcpy(&p->rows_fns[i], &sym, sizeof sym);
    }
    max_args = LOOM_MAX(max_args, k->n_args);
  }
  p->args = loom_calloc(ctx, (size_t)max_args, sizeof *p->args);
  p->need = loom_calloc(ctx, (size_t)prog->n_kernels, sizeof *p->need);
  return p->args && p->need ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

/* A comm step run on the comm stream: its own cpu view (one thread, the
 * stream's context) of the shared values. */
typedef struct comm_task {
  const loom_graph *g;
  const loom_node *n;
  const loom_cpu_kernel *kernels;
  loom_view *values;
  struct loom_comm_env *env;
} comm_task;

static loom_status run_comm_task(void *arg, loom_ctx *ctx) {
  comm_task *t = arg;
  ctx->comm_env = t->env;
  loom_cpu c = {.ctx = ctx, .nt = 1, .kernels = t->kernels};
  return loom_cpu_exec_node(&c, t->g, t->n, t->values);
}

/* What running the async steps needs: the RNG worker and its context
 * when a mask is async, the comm tasks when there are comm steps. */
static loom_status prepare_async(loom_ctx *ctx, const loom_graph *g, loom_cpu_program *p) {
  const loom_program *prog = &p->prog;
  bool rng = false, comm = false;
  for (int32_t s = 0; s < prog->n_steps; s++) {
    bool is_comm = loom_cpu_step_is_comm(g, &prog->steps[s]);
    comm |= is_comm;
    rng |= !is_comm && p->join[s] > s;
  }
  if (rng) LOOM_TRY(loom_worker_new(ctx, 1, &p->worker));
  if (rng && loom_ctx_new(&p->task_ctx)) return LOOM_STATUS_OUT_OF_MEMORY;
  if (!comm) return LOOM_STATUS_OK;
  p->comm = loom_calloc(ctx, (size_t)prog->n_steps, sizeof *p->comm);
  p->wait_after = loom_calloc(ctx, (size_t)prog->n_steps, sizeof *p->wait_after);
  return p->comm && p->wait_after ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

const loom_program *loom_cpu_program_get(const loom_cpu_program *p) { return p ? &p->prog : NULL; }

/* The value whose memory v is: a reshape's output is its input's
 * (passes/memplan.h). */
static int32_t memory_root(const loom_graph *g, int32_t v) {
  while (g->values[v].node >= 0 && g->nodes[g->values[v].node].op == LOOM_OP_RESHAPE)
    v = g->nodes[g->values[v].node].in[0];
  return v;
}

/* True if the output of step ps (a node with an epilogue kernel) is read
 * by another step, through a reshape or not, or is a graph output. Steps,
 * not graph nodes, are asked: a kernel may recompute a node of ps's
 * epilogue (fusion/plan_dup.c) and so read the output too. */
static bool read_past_epilogue(const loom_graph *g, const loom_program *prog,
                               const loom_step *ps) {
  const int32_t c = g->nodes[ps->node].out[0];
  bool read = false;
  for (int32_t o = 0; o < g->n_outputs; o++) read |= memory_root(g, g->outputs[o]) == c;
  for (int32_t s = 0; s < prog->n_steps && !read; s++) {
    const loom_step *st = &prog->steps[s];
    if (st == ps) continue;
    if (st->kind == LOOM_STEP_KERNEL || st->epilogue_rows > 0) {
      const loom_kernel *k = &prog->kernels[st->kernel];
      for (int32_t a = 0; a < k->n_args; a++)
        read |= !k->args[a].temp && !k->args[a].is_output && memory_root(g, k->args[a].value) == c;
    }
    if (st->kind != LOOM_STEP_KERNEL && g->nodes[st->node].op != LOOM_OP_RESHAPE) {
      const loom_node *n = &g->nodes[st->node];
      for (int32_t a = 0; a < n->n_in; a++) read |= memory_root(g, n->in[a]) == c;
    }
  }
  return read;
}

/* Convolutions with a cpu kernel take epilogues like GEMMs: a kernel that
 * reads the output row by row (a BatchNormalization's scale and shift,
 * an activation) runs on each block of rows right after it is made. */
static loom_status conv_epilogues(loom_ctx *ctx, const loom_graph *g, const loom_machine *m,
                                  const loom_cpu_kernel *kernels, loom_cpu_program *p) {
  loom_program *prog = &p->prog;
  bool *producer = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *producer);
  if (!producer) return LOOM_STATUS_OUT_OF_MEMORY;
  bool any = false;
  for (int32_t i = 0; i < g->n_nodes; i++)
    any |= producer[i] = g->nodes[i].op == LOOM_OP_CONV && kernels[i];
  loom_status st = any ? loom_fusion_attach_node_epilogues(ctx, g, m, prog, producer) : LOOM_STATUS_OK;
  free(producer);
  return st;
}

/* p->c_read for every step with an epilogue, conv or GEMM. */
static loom_status outputs_read(loom_ctx *ctx, const loom_graph *g, loom_cpu_program *p) {
  const loom_program *prog = &p->prog;
  for (int32_t s = 0; s < prog->n_steps; s++) {
    const loom_step *ps = &prog->steps[s];
    if (ps->kind == LOOM_STEP_KERNEL || ps->epilogue_rows <= 0) continue;
    if (!p->c_read) p->c_read = loom_calloc(ctx, (size_t)g->n_nodes, sizeof *p->c_read);
    if (!p->c_read) return LOOM_STATUS_OUT_OF_MEMORY;
    p->c_read[ps->node] = read_past_epilogue(g, prog, ps);
  }
  return LOOM_STATUS_OK;
}

/* 2 m n k of a matmul node. */
static double gemm_step_flops(const loom_graph *g, int32_t node) {
  const loom_node *n = &g->nodes[node];
  const loom_type *a = loom_value_type(g, n->in[0]);
  int64_t k = a->shape[a->rank - (LOOM_ATTR_I(n, matmul, trans_a) ? 2 : 1)];
  return 2.0 * (double)loom_type_numel(loom_value_type(g, n->out[0])) * (double)k;
}

loom_status loom_cpu_program_prepare(loom_ctx *ctx, const loom_graph *g, loom_fusion_mode fm,
                                     const loom_cpu_kernel *kernels, loom_prepared *out,
                                     loom_cpu_program **program) {
  *program = NULL;
  double t0 = loom_now_s();
  loom_cpu_program *p = loom_calloc(ctx, 1, sizeof *p);
  if (!p) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_machine machine;
  loom_machine_detect(ctx, &machine);
  loom_gemm_rows_curve(ctx, &machine); /* the epilogue rule reads it */
  /* the cost model's rates: kept in the profile, or measured once now */
  loom_status st = loom_machine_measure_once(ctx, loom_gemm_sgemm, &machine);
  if (st) goto fail;
  loom_fusion_options fo = {.mode = fm, .machine = &machine};
  st = loom_fusion_compile(ctx, g, &fo, &p->prog);
  if (st) {
    loom_error_prefix(ctx, "cpu backend: fusion (%s)", loom_fusion_mode_name(fm));
    goto fail;
  }
  st = conv_epilogues(ctx, g, &machine, kernels, p);
  if (!st) st = outputs_read(ctx, g, p);
  if (!st) st = loom_cpu_window_layouts(ctx, g, &p->prog, kernels, p->c_read, &p->layout);
  if (!st) st = load_code(ctx, p, out);
  int32_t n_async_comm = 0;
  if (!st && !p->eager)
    st = loom_cpu_overlap_schedule(ctx, g, &p->prog, &p->join, &n_async_comm);
  if (!st && p->join) st = prepare_async(ctx, g, p);
  if (st) goto fail;
  out->stats.n_async_comm = n_async_comm;
  const loom_program *prog = &p->prog;
  if (p->eager) {
    st = loom_cpu_prepare_eager(g, kernels, out);
  } else {
    out->stats.n_kernels = prog->n_kernels;
    out->stats.n_gemm = out->stats.n_eager = out->stats.n_fallback = 0;
    for (int32_t s = 0; s < prog->n_steps; s++) {
      const loom_step *ps = &prog->steps[s];
      out->stats.n_gemm += ps->kind == LOOM_STEP_GEMM;
      if (ps->kind == LOOM_STEP_GEMM) out->stats.gemm_flops += gemm_step_flops(g, ps->node);
      out->stats.n_epilogues += ps->epilogue_rows > 0;
      out->stats.n_eager += ps->kind == LOOM_STEP_NODE;
      /* a GEMM with an epilogue runs the cpu matmul itself */
      out->stats.n_fallback += ps->kind != LOOM_STEP_KERNEL && ps->epilogue_rows <= 0 &&
                               !kernels[ps->node];
    }
    st = plan_steps(ctx, g, prog, p->join, true, &out->plan);
  }
  if (st) goto fail;
  out->stats.n_memory_ops = prog->n_memory_ops;
  out->stats.modeled_bytes = prog->modeled_bytes;
  out->stats.modeled_seconds = prog->modeled_seconds;
  out->stats.compile_seconds = loom_now_s() - t0;
  *program = p;
  return LOOM_STATUS_OK;
fail:
  loom_memplan_free(&out->plan);
  loom_cpu_program_free(p);
  return st;
}

/* Sizes the workspace for nt threads: the largest kernel's need. */
static loom_status reserve_workspace(loom_ctx *ctx, loom_cpu_program *p, int32_t nt) {
  if (p->need_threads == nt) return LOOM_STATUS_OK;
  int64_t most = 0;
  for (int32_t i = 0; i < p->prog.n_kernels; i++) {
    p->need[i] = loom_kernel_workspace_bytes(&p->prog.kernels[i], nt);
    if (p->need[i] < 0)
      return loom_error(ctx, LOOM_STATUS_INTERNAL, "cpu backend: kernel %s has no workspace layout",
                        p->prog.kernels[i].name);
    most = LOOM_MAX(most, p->need[i]);
  }
  if (most > p->workspace_bytes) {
    free(p->workspace);
    p->workspace_bytes = 0;
    p->workspace = aligned_alloc(64, ((size_t)most + 63) / 64 * 64);
    if (!p->workspace)
      return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                        "cpu backend: cannot allocate a %lld-byte kernel workspace",
                        (long long)most);
    p->workspace_bytes = most;
  }
  p->need_threads = nt;
  return LOOM_STATUS_OK;
}

/* A GEMM's epilogue block: the kernel's rows entry on the same elements
 * (its rows are row_len long, the product's n_cols; fusion made every
 * block end on a kernel row). */
typedef struct epilogue_call {
  loom_kernel_rows_fn fn;
  void *const *args;
  void *workspace;
  int64_t n_cols, row_len;
  /* a product kept in tiles: each thread's arguments (n_args apiece),
   * the product's (argument prod) moved to its thread's tile */
  void **targs;
  int32_t n_args, prod;
} epilogue_call;

static void run_epilogue(void *user, int32_t thread, int64_t row0, int64_t row1) {
  const epilogue_call *e = user;
  e->fn(e->targs ? e->targs + (size_t)thread * (size_t)e->n_args : e->args, e->workspace, thread,
        row0 * e->n_cols / e->row_len, row1 * e->n_cols / e->row_len);
}

/* The product's rows from row0 on are at `rows` (a tile; NULL: in the
 * product itself). The kernel addresses the product from its first row,
 * so its argument becomes the address where row 0 would be: computed on
 * integers (gcc defines the conversions), as only rows of the tile are
 * read through it. */
static void epilogue_at(void *user, int32_t thread, int64_t row0, const float *rows) {
  const epilogue_call *e = user;
  void **a = e->targs + (size_t)thread * (size_t)e->n_args;
  memcpy(a, e->args, sizeof *a * (size_t)e->n_args);
  if (rows)
    a[e->prod] = (void *)((uintptr_t)rows - (uintptr_t)row0 * (uintptr_t)e->n_cols * sizeof(float));
}

/* Room in p for nt threads' tiles of `floats` and their arguments. */
static loom_status reserve_tiles(loom_ctx *ctx, loom_cpu_program *p, int32_t nt, int64_t floats,
                                 int32_t n_args) {
  int64_t want = floats * nt, ptrs = (int64_t)n_args * nt;
  if (want > p->c_tiles_cap) {
    free(p->c_tiles);
    p->c_tiles_cap = 0;
    p->c_tiles = aligned_alloc(64, ((size_t)want * sizeof(float) + 63) / 64 * 64);
    if (!p->c_tiles) return LOOM_STATUS_OUT_OF_MEMORY;
    p->c_tiles_cap = want;
  }
  if (ptrs > p->targs_cap) {
    free(p->targs);
    p->targs_cap = 0;
    p->targs = loom_calloc(ctx, (size_t)ptrs, sizeof *p->targs);
    if (!p->targs) return LOOM_STATUS_OUT_OF_MEMORY;
    p->targs_cap = ptrs;
  }
  return LOOM_STATUS_OK;
}

/* A dropout mask computed on the worker: its own cpu view (one thread,
 * its own context) of the shared values. */
typedef struct mask_task {
  loom_cpu cpu;
  const loom_graph *g;
  const loom_node *n;
  loom_view *values;
  loom_status st;
} mask_task;

static void run_mask_task(void *arg, int32_t index, int32_t count) {
  (void)index;
  (void)count;
  mask_task *t = arg;
  t->st = loom_cpu_exec_node(&t->cpu, t->g, t->n, t->values);
}

/* The trace name of step st ("k3", "matmul + k4", an op name). */
static const char *step_name(const loom_graph *g, const loom_program *prog, const loom_step *st,
                             char *buf, size_t n) {
  if (st->kind == LOOM_STEP_KERNEL) return prog->kernels[st->kernel].name;
  if (st->epilogue_rows > 0) {
    snprintf(buf, n, "%s + %s", loom_op_name(g->nodes[st->node].op), prog->kernels[st->kernel].name);
    return buf;
  }
  return loom_op_name(g->nodes[st->node].op);
}

static const char *const step_category[] = {"kernel", "gemm", "eager"};

/* A matmul step's problem as trace arguments (m, n, k, batch), so a
 * trace shows each GEMM's shape and, with its duration, its rate; 0 for
 * other steps. */
static int32_t step_args(const loom_graph *g, const loom_step *st, loom_trace_arg *a) {
  const loom_node *n = &g->nodes[st->node];
  if (st->kind != LOOM_STEP_GEMM || n->op != LOOM_OP_MATMUL) return 0;
  const loom_type *ta = loom_value_type(g, n->in[0]), *to = loom_value_type(g, n->out[0]);
  int32_t r = to->rank;
  int64_t m = to->shape[r - 2], nn = to->shape[r - 1];
  int64_t k = ta->shape[ta->rank - (LOOM_ATTR_I(n, matmul, trans_a) ? 2 : 1)];
  int64_t batch = m * nn > 0 ? loom_type_numel(to) / (m * nn) : 0;
  a[0] = (loom_trace_arg){"m", m};
  a[1] = (loom_trace_arg){"n", nn};
  a[2] = (loom_trace_arg){"k", k};
  a[3] = (loom_trace_arg){"batch", batch};
  return 4;
}

/* Runs step st (a GEMM: with its epilogue, if any) with c's threads. */
static loom_status run_step(loom_cpu_program *p, const loom_cpu *c, const loom_graph *g,
                            loom_view *values, const loom_step *st, int32_t nt) {
  const loom_program *prog = &p->prog;
  int32_t layout = p->layout && st->kind != LOOM_STEP_KERNEL ? p->layout[st->node] : 0;
  if (layout && st->epilogue_rows <= 0) { /* a window op on channel-blocked values */
    const loom_node *n = &g->nodes[st->node];
    loom_view in[2] = {values[n->in[0]], values[n->in[n->n_in - 1]]};
    loom_conv_epilogue plain_epi = {.layout = layout};
    return n->op == LOOM_OP_CONV ? loom_cpu_conv(c, n, in, &values[n->out[0]], &plain_epi)
                                 : loom_cpu_pool(c, n, in, &values[n->out[0]], layout);
  }
  if (st->kind != LOOM_STEP_KERNEL && st->epilogue_rows <= 0)
    return loom_cpu_exec_node(c, g, &g->nodes[st->node], values);
  const loom_kernel *k = &prog->kernels[st->kernel];
  for (int32_t a = 0; a < k->n_args; a++)
    p->args[a] = k->args[a].temp ? NULL : values[k->args[a].value].data;
  if (st->kind == LOOM_STEP_KERNEL) {
    p->fns[st->kernel](p->args, p->workspace, nt);
    return LOOM_STATUS_OK;
  }
  const loom_node *n = &g->nodes[st->node];
  const loom_view *cv = &values[n->out[0]];
  epilogue_call call = {.fn = p->rows_fns[st->kernel], .args = p->args, .workspace = p->workspace,
                        .n_cols = cv->shape[cv->rank - 1],
                        .row_len = loom_kpart_row_len(&k->parts[0])};
  loom_gemm_epilogue epi = {.rows = st->epilogue_rows, .fn = run_epilogue, .user = &call};
  /* a product only the epilogue reads stays in per-thread tiles */
  int64_t tile = st->epilogue_rows * call.n_cols;
  call.prod = -1;
  for (int32_t a = 0; a < k->n_args; a++)
    if (!k->args[a].temp && k->args[a].value == n->out[0]) call.prod = a;
  if (p->c_read && !p->c_read[st->node] && call.prod >= 0 && n->op == LOOM_OP_MATMUL &&
      tile * (int64_t)sizeof(float) <= LOOM_GEMM_TILE_C_MAX_BYTES) {
    if (reserve_tiles(c->ctx, p, nt, tile, k->n_args))
      return loom_error(c->ctx, LOOM_STATUS_OUT_OF_MEMORY, "cpu backend: no memory for GEMM tiles");
    call.targs = p->targs;
    call.n_args = k->n_args;
    epi.tiles = p->c_tiles;
    epi.tile_floats = tile;
    epi.threads = nt;
    epi.at = epilogue_at;
  }
  loom_view in[2] = {values[n->in[0]], values[n->in[1]]};
  loom_conv_epilogue conv_epi = {epi, k, p->args, n->out[0], p->c_read && p->c_read[st->node],
                                 layout};
  loom_status rs = n->op == LOOM_OP_MATMUL ? loom_cpu_matmul(c, n, in, &values[n->out[0]], &epi)
                                           : loom_cpu_conv(c, n, in, &values[n->out[0]], &conv_epi);
  if (rs)
    loom_error_prefix(c->ctx, "%s with epilogue %s (node %d)", loom_op_name(n->op), k->name, st->node);
  return rs;
}

/* Queues comm step s on the stream, to be waited for after its join. */
static loom_status submit_comm(loom_cpu_program *p, const loom_cpu *c, const loom_graph *g,
                               loom_view *values, loom_stream *stream, int32_t s) {
  const loom_node *n = &g->nodes[p->prog.steps[s].node];
  p->comm[s] = (comm_task){.g = g, .n = n, .kernels = c->kernels, .values = values,
                           .env = c->ctx->comm_env};
  loom_stream_task task = {run_comm_task, &p->comm[s], loom_op_name(n->op), c->ctx->trace};
  int64_t ticket = 0;
  LOOM_TRY(loom_stream_submit(stream, c->ctx, &task, &ticket));
  p->wait_after[LOOM_MAX(p->join[s], s)] = ticket; /* tickets grow: the latest covers all */
  return LOOM_STATUS_OK;
}

loom_status loom_cpu_program_run(loom_cpu_program *p, const loom_cpu *c, const loom_graph *g,
                                 loom_view *values) {
  const loom_program *prog = &p->prog;
  int32_t nt = LOOM_MAX(c->nt, 1);
  if (prog->n_kernels) LOOM_TRY(reserve_workspace(c->ctx, p, nt));
  loom_trace *trace = c->ctx->trace;
  /* comm steps go to the stream only when the caller gave one */
  loom_stream *stream = p->comm && c->ctx->comm_env ? c->ctx->comm_env->stream : NULL;
  if (stream) memset(p->wait_after, 0, sizeof *p->wait_after * (size_t)prog->n_steps);
  mask_task task;
  bool pending = false; /* a mask on the worker, joined after step mask_join */
  int32_t mask_join = -1;
  loom_status rs = LOOM_STATUS_OK;
  for (int32_t s = 0; s < prog->n_steps && !rs; s++) {
    const loom_step *st = &prog->steps[s];
    bool comm = p->comm && loom_cpu_step_is_comm(g, st);
    if (comm && stream) {
      rs = submit_comm(p, c, g, values, stream, s);
    } else if (!comm && p->worker && p->join[s] > s && !pending) {
      task = (mask_task){.cpu = {.ctx = p->task_ctx, .nt = 1, .kernels = c->kernels}, .g = g,
                         .n = &g->nodes[st->node], .values = values};
      loom_worker_trace wt = {.trace = trace, .name = "dropout_mask", .cat = "rng",
                              .lane = "rng worker", .tid0 = 100};
      rs = loom_worker_submit(p->worker, run_mask_task, &task, trace ? &wt : NULL);
      pending = !rs;
      mask_join = p->join[s];
    } else {
      /* the GEMM beside a mask task leaves it a core */
      loom_cpu cs = *c;
      if (pending) cs.nt = LOOM_MAX(1, nt - 1);
      double t0 = loom_trace_now(trace);
      rs = run_step(p, &cs, g, values, st, cs.nt);
      if (trace) {
        char buf[64];
        loom_trace_arg args[LOOM_TRACE_MAX_ARGS];
        loom_trace_event_args(trace, 0, step_name(g, prog, st, buf, sizeof buf),
                              step_category[st->kind], t0, loom_trace_now(trace), args,
                              step_args(g, st, args));
      }
    }
    if (pending && s >= mask_join) {
      loom_worker_wait(p->worker);
      pending = false;
      if (!rs && task.st)
        rs = loom_error(c->ctx, task.st, "dropout_mask on the worker: %s",
                        loom_ctx_error(p->task_ctx));
    }
    if (stream && p->wait_after[s] && !rs) {
      double t0 = loom_trace_now(trace);
      rs = loom_stream_wait(stream, c->ctx, p->wait_after[s]);
      if (trace) loom_trace_event(trace, 0, "comm wait", "comm", t0, loom_trace_now(trace));
    }
  }
  if (pending) loom_worker_wait(p->worker);
  /* nothing of this run may still be in flight when it returns (even
   * after an error: the stream's tasks use these values) */
  if (stream) {
    loom_status ss = loom_stream_sync(stream, rs ? NULL : c->ctx); /* keep the first message */
    if (!rs) rs = ss;
  }
  return rs;
}

/*
 * Async steps, scheduled on the program's steps before the memory plan
 * (which keeps an async step's values live through its join step):
 *
 * Overlapped RNG (docs/DROPOUT.md, placement `overlap`): a dropout_mask
 * node marked `overlap` moves to just before the last GEMM step ahead of
 * its first user, and runs on a worker thread while that GEMM runs on the
 * other cores (joined after the GEMM).
 *
 * Overlapped communication (docs/PARALLEL.md): comm steps stay where they
 * are (their order is the plan's, the same on every member); each is
 * joined just before the first step that reads one of its outputs, so
 * the compute between runs while its messages are in flight.
 */
#include "runtime/cpu/cpu.h"

#include "fusion/fusion.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* True if step st reads value v. */
static bool step_reads(const loom_graph *g, const loom_program *p, const loom_step *st, int32_t v) {
  if (st->kind != LOOM_STEP_KERNEL) {
    const loom_node *n = &g->nodes[st->node];
    for (int32_t i = 0; i < n->n_in; i++)
      if (n->in[i] == v) return true;
  }
  if (st->kind == LOOM_STEP_KERNEL || st->epilogue_rows > 0) {
    const loom_kernel *k = &p->kernels[st->kernel];
    for (int32_t a = 0; a < k->n_args; a++)
      if (!k->args[a].is_output && k->args[a].value == v) return true;
  }
  return false;
}

/* True if step st writes value v. */
static bool step_writes(const loom_graph *g, const loom_program *p, const loom_step *st,
                        int32_t v) {
  if (st->kind != LOOM_STEP_KERNEL) {
    const loom_node *n = &g->nodes[st->node];
    for (int32_t o = 0; o < n->n_out; o++)
      if (n->out[o] == v) return true;
  }
  if (st->kind == LOOM_STEP_KERNEL || st->epilogue_rows > 0) {
    const loom_kernel *k = &p->kernels[st->kernel];
    for (int32_t a = 0; a < k->n_args; a++)
      if (k->args[a].is_output && k->args[a].value == v) return true;
  }
  return false;
}

/* Moves step `from` to index `to`, shifting the steps between. */
static void move_step(loom_program *p, bool *async, int32_t from, int32_t to) {
  loom_step st = p->steps[from];
  bool a = async[from];
  if (from < to) {
    memmove(&p->steps[from], &p->steps[from + 1], sizeof *p->steps * (size_t)(to - from));
    memmove(&async[from], &async[from + 1], sizeof *async * (size_t)(to - from));
  } else if (from > to) {
    memmove(&p->steps[to + 1], &p->steps[to], sizeof *p->steps * (size_t)(from - to));
    memmove(&async[to + 1], &async[to], sizeof *async * (size_t)(from - to));
  }
  p->steps[to] = st;
  async[to] = a;
}

/* Moves overlapped dropout masks; sets (*async_out)[s] for each moved
 * (NULL when none moved). */
static loom_status schedule_rng(loom_ctx *ctx, const loom_graph *g, loom_program *p,
                                bool **async_out) {
  *async_out = NULL;
  bool any = false;
  for (int32_t s = 0; s < p->n_steps && !any; s++)
    any = p->steps[s].kind == LOOM_STEP_NODE && g->nodes[p->steps[s].node].op == LOOM_OP_DROPOUT_MASK &&
          LOOM_ATTR_I(&g->nodes[p->steps[s].node], dropout_mask, overlap);
  if (!any) return LOOM_STATUS_OK;
  bool *async = loom_calloc(ctx, (size_t)p->n_steps, sizeof *async);
  if (!async) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t s = 0; s < p->n_steps; s++) {
    const loom_step *st = &p->steps[s];
    if (st->kind != LOOM_STEP_NODE || async[s]) continue;
    const loom_node *n = &g->nodes[st->node];
    if (n->op != LOOM_OP_DROPOUT_MASK || !LOOM_ATTR_I(n, dropout_mask, overlap)) continue;
    int32_t user = p->n_steps, ready = -1; /* first reader; last writer of an input */
    for (int32_t t = 0; t < p->n_steps; t++) {
      if (t > s && t < user && step_reads(g, p, &p->steps[t], n->out[0])) user = t;
      for (int32_t i = 0; i < n->n_in; i++)
        if (step_writes(g, p, &p->steps[t], n->in[i])) ready = LOOM_MAX(ready, t);
    }
    int32_t gemm = -1;
    for (int32_t t = user - 1; t > ready && gemm < 0; t--)
      if (p->steps[t].kind == LOOM_STEP_GEMM) gemm = t;
    if (gemm < 0) continue; /* no GEMM to hide behind: runs in place */
    int32_t to = s < gemm ? gemm - 1 : gemm;
    move_step(p, async, s, to);
    async[to] = true;
    if (s < gemm) s--; /* the step now at s has not been looked at */
  }
  *async_out = async;
  return LOOM_STATUS_OK;
}

bool loom_cpu_step_is_comm(const loom_graph *g, const loom_step *st) {
  return st->kind == LOOM_STEP_NODE && loom_op_is_comm(g->nodes[st->node].op);
}

/* The step before the first step after s that reads one of its outputs
 * (the last step if none does). */
static int32_t comm_join(const loom_graph *g, const loom_program *p, int32_t s) {
  const loom_node *n = &g->nodes[p->steps[s].node];
  for (int32_t t = s + 1; t < p->n_steps; t++)
    for (int32_t o = 0; o < n->n_out; o++)
      if (step_reads(g, p, &p->steps[t], n->out[o])) return t - 1;
  return p->n_steps - 1;
}

loom_status loom_cpu_overlap_schedule(loom_ctx *ctx, const loom_graph *g, loom_program *p,
                                      int32_t **join_out, int32_t *n_async_comm) {
  *join_out = NULL;
  *n_async_comm = 0;
  bool *async = NULL;
  LOOM_TRY(schedule_rng(ctx, g, p, &async));
  bool any_comm = false;
  for (int32_t s = 0; s < p->n_steps && !any_comm; s++)
    any_comm = loom_cpu_step_is_comm(g, &p->steps[s]);
  if (!async && !any_comm) return LOOM_STATUS_OK;
  int32_t *join = loom_calloc(ctx, (size_t)p->n_steps, sizeof *join);
  if (!join) {
    free(async);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t s = 0; s < p->n_steps; s++) {
    if (async && async[s]) join[s] = s + 1;
    if (!loom_cpu_step_is_comm(g, &p->steps[s])) continue;
    join[s] = comm_join(g, p, s);
    *n_async_comm += join[s] > s;
  }
  free(async);
  *join_out = join;
  return LOOM_STATUS_OK;
}

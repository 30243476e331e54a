/*
 * Which values between window ops stay in channel blocks (cpu.h,
 * loom_cpu_window_layouts). A conv on oneDNN's direct kernels reads and
 * writes images in blocks of 16 channels; with Loom's tensors plain, each
 * conv reorders its input from plain and its output back, and a pool on
 * plain images runs oneDNN's slower plain kernel. A value made by a conv
 * or pool step (for a conv with an epilogue kernel: the kernel's output,
 * when the kernel runs as post-ops) and read only by conv and pool steps
 * that take it in the same blocks is kept in them: the buffer has the
 * same size when the channels are a multiple of the block, and nothing
 * else ever reads it. A conv whose epilogue runs as post-ops may read its
 * one residual (the tensor operand: a block's input, in a ResNet) in its
 * output's blocks too: the kernel that would read it plain never runs.
 * Every other value stays plain, so the program's inputs, outputs and
 * every kernel that runs see plain tensors.
 */
#include "runtime/cpu/cpu.h"

#include "fusion/fusion.h"
#include "runtime/cpu/cpu_conv_post.h"

#include <stdlib.h>

static bool is_window(const loom_node *n) {
  return n->op == LOOM_OP_CONV || n->op == LOOM_OP_MAX_POOL || n->op == LOOM_OP_AVG_POOL;
}

/* The value step s's window op writes its result to: the conv's output,
 * or its epilogue kernel's one output. */
static int32_t result_of(const loom_graph *g, const loom_program *p, const loom_step *st) {
  if (st->epilogue_rows <= 0) return g->nodes[st->node].out[0];
  const loom_kernel *k = &p->kernels[st->kernel];
  int32_t v = -1, outs = 0;
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].is_output) {
      v = k->args[a].value;
      outs++;
    }
  return outs == 1 ? v : -1;
}

/* The kernel argument of the one tensor operand (a residual) of conv
 * node n's epilogue kernel k run as post-ops, or -1. */
static int32_t residual_arg(const loom_graph *g, const loom_node *n, const loom_kernel *k) {
  const loom_type *t = loom_value_type(g, n->out[0]);
  if (t->rank < 3) return -1;
  int64_t plane = 1;
  for (int32_t d = 2; d < t->rank; d++)
    plane *= t->shape[d];
  loom_conv_post post;
  if (!loom_conv_post_from_kernel(k, NULL, n->out[0], t->shape[0], t->shape[1], plane, &post))
    return -1;
  int32_t arg = -1, tensors = 0;
  for (int32_t i = 0; i < post.n; i++)
    if (post.op[i].kind == LOOM_CONV_POST_TENSOR) {
      arg = post.op[i].arg;
      tensors++;
    }
  loom_conv_post_free(&post);
  return tensors == 1 ? arg : -1;
}

loom_status loom_cpu_window_layouts(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                                    const loom_cpu_kernel *kernels, const bool *c_read,
                                    uint8_t **layout) {
  *layout = NULL;
  size_t nv = (size_t)(g->n_values ? g->n_values : 1), nn = (size_t)(g->n_nodes ? g->n_nodes : 1);
  int64_t *made = calloc(nv, sizeof *made);     /* blocks a window step writes v in (0: none) */
  int32_t *maker = malloc(nv * sizeof *maker);  /* that step's node */
  bool *plain = calloc(nv, sizeof *plain);      /* read by something that needs it plain */
  int64_t *reads = calloc(nn, sizeof *reads);   /* per window node: the blocks it reads in */
  uint8_t *out = calloc(nn, sizeof *out);
  int32_t *residual = malloc(nn * sizeof *residual); /* per conv node: its residual kept, or -1 */
  int64_t *res_block = calloc(nn, sizeof *res_block); /* the blocks the conv reads it in */
  loom_status st = made && maker && plain && reads && out && residual && res_block
                       ? LOOM_STATUS_OK
                       : LOOM_STATUS_OUT_OF_MEMORY;
  for (size_t i = 0; !st && i < nn; i++)
    residual[i] = -1;
  for (int32_t s = 0; !st && s < p->n_steps; s++) {
    const loom_step *ps = &p->steps[s];
    const loom_node *n = ps->kind == LOOM_STEP_KERNEL ? NULL : &g->nodes[ps->node];
    bool window = n && is_window(n) && kernels[ps->node] && ps->kind == LOOM_STEP_NODE;
    /* what the program will hand the conv: its epilogue kernel, unbound */
    loom_conv_epilogue epi = {0};
    int64_t ib = 1, ob = 1;
    if (window) {
      if (ps->epilogue_rows > 0) {
        epi.rows.rows = ps->epilogue_rows;
        epi.kernel = &p->kernels[ps->kernel];
        epi.c = n->out[0];
        epi.c_read = c_read && c_read[ps->node];
      }
      loom_cpu_window_blocks(ctx, g, n, &epi, &ib, &ob);
    }
    /* blocks out with an epilogue kernel: it runs as post-ops, and its
     * residual is read by the conv, not by the kernel */
    int32_t res = window && epi.kernel && ob > 1 ? residual_arg(g, n, epi.kernel) : -1;
    if (ps->kind == LOOM_STEP_KERNEL || ps->epilogue_rows > 0) {
      const loom_kernel *k = &p->kernels[ps->kernel];
      for (int32_t a = 0; a < k->n_args; a++)
        if (!k->args[a].is_output && a != res) plain[k->args[a].value] = true;
    }
    if (res >= 0) {
      residual[ps->node] = p->kernels[ps->kernel].args[res].value;
      res_block[ps->node] = ob;
    }
    if (!n) continue;
    for (int32_t i = window ? 1 : 0; i < n->n_in; i++)
      plain[n->in[i]] = true;
    if (!window) continue;
    reads[ps->node] = ib;
    if (ib <= 1) plain[n->in[0]] = true;
    int32_t v = result_of(g, p, ps);
    if (v >= 0 && ob > 1) {
      made[v] = ob;
      maker[v] = ps->node;
    }
  }
  for (int32_t o = 0; !st && o < g->n_outputs; o++) plain[g->outputs[o]] = true;
  /* a value is kept blocked when its maker writes, and all its readers
   * read, the same blocks, and its channels fill them */
  for (int32_t s = 0; !st && s < p->n_steps; s++) {
    const loom_step *ps = &p->steps[s];
    if (ps->kind != LOOM_STEP_NODE || !is_window(&g->nodes[ps->node])) continue;
    int32_t v = g->nodes[ps->node].in[0], r = residual[ps->node];
    if (reads[ps->node] != made[v]) plain[v] = true;
    if (r >= 0 && res_block[ps->node] != made[r]) plain[r] = true;
  }
  bool any = false;
  for (int32_t v = 0; !st && v < g->n_values; v++) {
    const loom_type *t = loom_value_type(g, v);
    if (made[v] <= 1 || plain[v] || t->rank < 3 || t->shape[1] % made[v] != 0) continue;
    out[maker[v]] |= LOOM_CPU_OUT_BLOCKED;
    for (int32_t s = 0; s < p->n_steps; s++) {
      const loom_step *ps = &p->steps[s];
      if (ps->kind != LOOM_STEP_NODE || !is_window(&g->nodes[ps->node])) continue;
      if (g->nodes[ps->node].in[0] == v) out[ps->node] |= LOOM_CPU_IN_BLOCKED;
      if (residual[ps->node] == v) out[ps->node] |= LOOM_CPU_POST_BLOCKED;
    }
    any = true;
  }
  free(made);
  free(maker);
  free(plain);
  free(reads);
  free(residual);
  free(res_block);
  if (!st && any)
    *layout = out;
  else
    free(out);
  return st ? loom_error(ctx, st, "cpu backend: out of memory") : LOOM_STATUS_OK;
}

/*
 * conv, conv_transpose, conv_grad_weight and the pools on the cpu backend
 * (f32, 1 to 3 spatial dims) through oneDNN primitives: convolution
 * forward (conv), backward data (conv_transpose: the weights [C, M/g, K]
 * are a convolution's [OC, IC/g, K] with OC the small side), backward
 * weights (conv_grad_weight) and pooling forward. Like the GEMM (gemm.c),
 * the work is cut into tasks sized by the shapes only (one image times a
 * block of channels or groups) and each task is one single-threaded
 * primitive run, on the caller and helper threads of the window ops' own
 * (cpu_conv_workers.c), so results do not depend on the thread count. conv_grad_weight sums its per-image products in image
 * order. Primitives are cached by their geometry. Forward convs run on
 * oneDNN's direct kernels in channel-blocked layouts (layouts_tried):
 * each task reorders its weights, and its images where they are plain,
 * to and from the primitive's layouts; values the program keeps blocked
 * between window ops (cpu_conv_layout.c: LOOM_CPU_*_BLOCKED) pass as
 * they are. A conv's epilogue kernel runs as post-ops where oneDNN can
 * say it (cpu_conv_post.c: its first scale folded into the weights'
 * reorder, its shift the bias), else on the output's rows after each
 * task. Forward pools run blocked where their input or output is kept
 * blocked, else plain. Pool gradients, and
 * pools oneDNN does not express (count_include_pad over ceil_mode's extra
 * positions), run plain loops over (image, channel) planes.
 *
 * The files, by concern (cpu_conv_internal.h): cpu_conv_prim.c (the
 * primitives, their cache, layouts and reorders), cpu_conv_tasks.c (the
 * tasks), cpu_conv_forward.c, cpu_conv_wpack.c (a forward conv's weights
 * packed once), cpu_conv_backward.c (conv_transpose, conv_grad_weight),
 * cpu_conv_pool.c; cpu_conv_post.c (epilogues as post-ops) and
 * cpu_conv_layout.c (which values stay blocked), cpu_conv_workers.c (the
 * threads that run the tasks). This one picks the kernels and answers the
 * layout planner.
 */
#include "runtime/cpu/cpu_conv_internal.h"

#include <string.h>

/* A view of type t without data (the planners read shapes only). */
static void shape_view(loom_view *v, const loom_type *t) {
  memset(v, 0, sizeof *v);
  v->dtype = t->dtype;
  v->rank = t->rank;
  memcpy(v->shape, t->shape, sizeof v->shape);
}

void loom_cpu_window_blocks(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                            const loom_conv_epilogue *epi, int64_t *in_block, int64_t *out_block) {
  *in_block = *out_block = 1;
  loom_view in[2], out;
  for (int32_t i = 0; i < 2; i++)
    shape_view(&in[i], loom_value_type(g, n->in[LOOM_MIN(i, n->n_in - 1)]));
  shape_view(&out, loom_value_type(g, n->out[0]));
  loom_cpu c = {.ctx = ctx, .nt = 1};
  if (n->op == LOOM_OP_CONV && n->n_in == 2)
    conv_forward_blocks(&c, n, in, &out, epi, in_block, out_block);
  else if (n->op == LOOM_OP_MAX_POOL || n->op == LOOM_OP_AVG_POOL)
    conv_pool_blocks(&c, n, in, in_block, out_block);
}

loom_cpu_kernel loom_cpu_conv_kernel(const loom_graph *g, const loom_node *n) {
  for (int32_t i = 0; i < n->n_in; i++)
    if (g->values[n->in[i]].type.dtype != LOOM_DTYPE_F32) return NULL;
  const loom_type *x = &g->values[n->in[0]].type;
  bool dnnl_dims = x->rank >= 3 && x->rank <= CONV_MAX_DIMS + 2;
  switch (n->op) {
  case LOOM_OP_CONV: return dnnl_dims ? conv_forward_kernel : NULL;
  case LOOM_OP_CONV_TRANSPOSE: return dnnl_dims ? conv_transpose_kernel : NULL;
  case LOOM_OP_CONV_GRAD_WEIGHT: return dnnl_dims ? conv_grad_weight_kernel : NULL;
  case LOOM_OP_MAX_POOL:
  case LOOM_OP_AVG_POOL:
  case LOOM_OP_MAX_POOL_GRAD:
  case LOOM_OP_AVG_POOL_GRAD: return conv_pool_kernel;
  default: return NULL;
  }
}

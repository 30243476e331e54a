/*
 * The pools: forward pools on oneDNN's pooling primitive, blocked where
 * their input or output is kept in channel blocks, else plain; pool
 * gradients, and pools oneDNN does not express (count_include_pad over
 * ceil_mode's extra positions), in plain loops over (image, channel)
 * planes: the reference's rule (pool.c) on floats.
 */
#include "runtime/cpu/cpu_conv_internal.h"
#include "runtime/cpu/dnnl_thread.h"

#include <math.h>
#include <string.h>

/* One (image, channel) plane of a pool or pool gradient in plain loops:
 * the reference's rule (pool.c) on floats. */
static void pool_plane(const loom_window *w, loom_op op, const float *x, const float *dy,
                       float *res) {
  int64_t ns = loom_window_small_numel(w), nk = loom_window_kernel_numel(w);
  if (op == LOOM_OP_MAX_POOL_GRAD || op == LOOM_OP_AVG_POOL_GRAD)
    memset(res, 0, sizeof(float) * (size_t)loom_window_big_numel(w));
  for (int64_t o = 0; o < ns; o++) {
    int64_t best = -1, p;
    double acc = 0.0, share = 0.0;
    if (op == LOOM_OP_AVG_POOL_GRAD) share = dy[o] / (double)loom_window_count(w, o);
    for (int64_t j = 0; j < nk; j++) {
      if (!loom_window_at(w, o, j, &p)) continue;
      if (op == LOOM_OP_AVG_POOL)
        acc += x[p];
      else if (op == LOOM_OP_AVG_POOL_GRAD)
        res[p] += (float)share;
      else if (best < 0 || x[p] > x[best] || (x[p] != x[p] && x[best] == x[best]))
        best = p;
    }
    if (op == LOOM_OP_MAX_POOL) res[o] = best < 0 ? -INFINITY : x[best];
    if (op == LOOM_OP_AVG_POOL) res[o] = (float)(acc / (double)loom_window_count(w, o));
    if (op == LOOM_OP_MAX_POOL_GRAD && best >= 0) res[best] += dy[o];
  }
}

typedef struct pool_job {
  loom_window w;
  loom_op op;
  prim_key whole;    /* any: in channel blocks (the input or output kept in them) */
  prim_entry blk[2]; /* the primitives of every block but the last, and of the last */
  bool blk_owned[2];
  int64_t ch, bs, ss, b, blocks, block;
  int32_t layout; /* LOOM_CPU_*_BLOCKED */
  const float *x, *dy;
  float *y;
} pool_job;

/* Image x block of channels through oneDNN (plane loops where it has no
 * primitive for the case). In channel blocks, the side that is not kept
 * in them passes through this thread's buffers. */
static bool pool_task(const void *user, int64_t t) {
  const pool_job *j = user;
  int64_t img = t / j->blocks, c0 = (t % j->blocks) * j->b, nc = LOOM_MIN(j->b, j->ch - c0);
  prim_key p = j->whole;
  prim_entry e = j->blk[(t % j->blocks) == j->blocks - 1];
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  int64_t pl0 = img * j->ch + c0;
  const float *x = j->x + pl0 * j->bs;
  float *y = j->y + pl0 * j->ss, *dst = y;
  dnnl_memory_desc_t plain[2];
  conv_md_image(&plain[0], nc, j->w.k, j->w.big);
  conv_md_image(&plain[1], nc, j->w.k, j->w.small);
  bool ok = true;
  if (!e.prim && !p.any) {
    for (int64_t pl = pl0; pl < pl0 + nc; pl++)
      pool_plane(&j->w, j->op, j->x + pl * j->bs, NULL, j->y + pl * j->ss);
  } else if (!e.prim || !res || (p.any && conv_inner_block(&e.md[0]) != j->block)) {
    ok = false;
  } else {
    if (e.to[0] && !(j->layout & LOOM_CPU_IN_BLOCKED)) {
      void *buf = loom_dnnl_buffer(res, LOOM_DNNL_SRC, dnnl_memory_desc_get_size(&e.md[0]));
      ok = buf && conv_reorder(e.to[0], &plain[0], x, &e.md[0], buf);
      x = buf;
    }
    if (e.from[1] && !(j->layout & LOOM_CPU_OUT_BLOCKED))
      ok = ok && (dst = loom_dnnl_buffer(res, LOOM_DNNL_DST, dnnl_memory_desc_get_size(&e.md[1])));
    void *ptrs[2] = {(void *)x, dst};
    static const int which[4] = {0, DNNL_ARG_SRC, 1, DNNL_ARG_DST};
    ok = ok && conv_prim_run(&e, 2, which, ptrs) &&
         (dst == y || conv_reorder(e.from[1], &e.md[1], dst, &plain[1], y));
  }
  return ok;
}

/* One plane in plain loops. */
static bool plane_task(const void *user, int64_t t) {
  const pool_job *j = user;
  bool grad = j->dy != NULL;
  pool_plane(&j->w, j->op, j->x + t * j->bs, grad ? j->dy + t * j->ss : NULL,
             j->y + t * (grad ? j->bs : j->ss));
  return true;
}

/* j planned for pool node n on inputs of in's shapes: whether oneDNN runs
 * it (*dnnl), its blocks of channels and, with layout, its channel block
 * (j->block; 1: none). */
static loom_status plan_pool(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             int32_t layout, pool_job *j, bool *dnnl) {
  j->op = n->op;
  j->layout = layout;
  LOOM_TRY(conv_window_of(c, n, in, &j->w));
  bool grad = n->op == LOOM_OP_MAX_POOL_GRAD || n->op == LOOM_OP_AVG_POOL_GRAD;
  int64_t batch = in[0].shape[0];
  j->ch = in[0].shape[1];
  j->bs = loom_window_big_numel(&j->w);
  j->ss = loom_window_small_numel(&j->w);
  prim_kind kind = n->op == LOOM_OP_MAX_POOL ? P_MAX : j->w.include_pad ? P_AVG_INCL : P_AVG_EXCL;
  bool use_dnnl = !grad && j->w.k <= CONV_MAX_DIMS;
  conv_key_window(&j->whole, kind, &j->w);
  /* include_pad: oneDNN divides by the kernel's size, right only when no
   * window runs past the explicit padding */
  for (int32_t d = 0; d < j->w.k && use_dnnl; d++)
    use_dnnl = kind != P_AVG_INCL || j->whole.hi[d] <= j->w.hi[d];
  *dnnl = use_dnnl;
  j->block = 1;
  j->b = conv_block_units(j->ch, 1, batch, CONV_MIN_CHANNELS);
  if (use_dnnl && layout) { /* the whole pool's blocks; tasks cut on them */
    prim_key p = j->whole;
    p.big_c = p.small_c = j->ch;
    p.any = 1;
    bool owned;
    prim_entry e = conv_prim_get(&p, &owned);
    if (e.prim) j->block = conv_inner_block(&e.md[0]);
    conv_prim_release(&e, owned);
    j->whole.any = 1;
    j->b = LOOM_MIN((j->b + j->block - 1) / j->block * j->block, j->ch);
  }
  j->blocks = (j->ch + j->b - 1) / j->b;
  return LOOM_STATUS_OK;
}

loom_status loom_cpu_pool(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out, int32_t layout) {
  pool_job j = {.x = in[0].data, .y = out[0].data};
  bool use_dnnl;
  LOOM_TRY(plan_pool(c, n, in, layout, &j, &use_dnnl));
  if (layout && (!use_dnnl || j.block <= 1))
    return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "%s: no channel-blocked layout",
                      loom_op_name(n->op));
  int64_t batch = in[0].shape[0], planes = batch * j.ch;
  bool parallel = planes * (j.bs + j.ss) >= LOOM_CPU_PAR_MIN;
  if (!use_dnnl) {
    if (n->op == LOOM_OP_MAX_POOL_GRAD || n->op == LOOM_OP_AVG_POOL_GRAD) j.dy = in[1].data;
    conv_run_tasks(c, planes, parallel, plane_task, &j);
    return LOOM_STATUS_OK;
  }
  for (int32_t i = 0; i < 2; i++) { /* the first block's, the last's */
    prim_key p = j.whole;
    p.big_c = p.small_c = LOOM_MIN(j.b, j.ch - (i ? j.blocks - 1 : 0) * j.b);
    j.blk[i] = conv_prim_get(&p, &j.blk_owned[i]);
  }
  bool ok = conv_run_tasks(c, batch * j.blocks, parallel, pool_task, &j);
  for (int32_t i = 0; i < 2; i++)
    conv_prim_release(&j.blk[i], j.blk_owned[i]);
  return conv_status(c, n, ok);
}

/* Pools through oneDNN where it computes what the op means, else, and for
 * the gradients, plane loops. */
loom_status conv_pool_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_view *out) {
  return loom_cpu_pool(c, n, in, out, 0);
}

void conv_pool_blocks(const loom_cpu *c, const loom_node *n, const loom_view *in, int64_t *in_block,
                      int64_t *out_block) {
  pool_job j = {0};
  bool dnnl;
  if (plan_pool(c, n, in, 1, &j, &dnnl) == LOOM_STATUS_OK && dnnl) *in_block = *out_block = j.block;
}

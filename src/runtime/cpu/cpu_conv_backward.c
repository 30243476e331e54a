/*
 * conv_transpose (oneDNN's convolution backward data: the weights [C, M/g,
 * K] are a convolution's [OC, IC/g, K] with OC the small side) and
 * conv_grad_weight (backward weights, summing its per-image products in
 * image order). Both run on oneDNN's direct kernels in channel-blocked
 * layouts where it has them (cpu_conv_prim.c, layouts_tried: 2.0-2.7x
 * the im2col + GEMM paths of the plain layouts on one AVX2 core), each
 * task reordering what it reads from plain and what it writes back;
 * otherwise on plain layouts.
 */
#include "runtime/cpu/cpu_conv_internal.h"
#include "runtime/cpu/dnnl_thread.h"

#include <stdlib.h>
#include <string.h>

/* Operand i (0 big, 1 small, 2 weights) of e at plain, through this
 * thread's buffer for md i when e reads it in another layout; NULL when
 * out of memory or a reorder failed. */
static const void *read_operand(const prim_entry *e, loom_dnnl_thread *res, int32_t i,
                                const float *plain) {
  if (!e->to[i]) return plain;
  static const loom_dnnl_buf slot[3] = {LOOM_DNNL_SRC, LOOM_DNNL_DST, LOOM_DNNL_WEIGHTS};
  dnnl_memory_desc_t md;
  if (i == 2)
    conv_md_weights(&md, &e->key);
  else
    conv_md_image(&md, i ? e->key.small_c : e->key.big_c, (int32_t)e->key.k,
                  i ? e->key.small : e->key.big);
  void *buf = loom_dnnl_buffer(res, slot[i], dnnl_memory_desc_get_size(&e->md[i]));
  return buf && conv_reorder(e->to[i], &md, plain, &e->md[i], buf) ? buf : NULL;
}

/* Whether kind's primitives take layouts of their own: backward data not
 * for a 1 x 1 window with stride 1 and no padding, where the plain
 * layouts' path is one GEMM with no im2col to undo (pointwise
 * conv_transposes between 96 and 384 channels over 28 x 28: 2.56 ms plain,
 * 3.1-3.2 blocked); backward weights always (the same convs' weight
 * gradients: 5.5 and 2.8 ms plain, 3.6 and 3.6 blocked). */
static int64_t backward_any(prim_kind kind, const loom_window *w) {
  if (kind == P_BWD_WEIGHTS) return 1;
  for (int32_t d = 0; d < w->k; d++)
    if (w->kernel[d] != 1 || w->stride[d] != 1 || w->lo[d] || w->hi[d] || w->dil[d] != 1) return 1;
  return 0;
}

/* Blocks of the side the op cuts (by_big: the big one) in channel blocks
 * of the layouts its primitive takes, where it takes them: blocks of
 * fewer channels pay there (no im2col to redo), and start on whole
 * channel blocks. images: the tasks per block. */
static void split_for_layouts(conv_split *s, prim_kind kind, bool by_big, int64_t images) {
  conv_split whole = *s;
  whole.b = whole.units;
  whole.blocks = 1;
  prim_key p;
  int64_t u0, nu;
  conv_block_key(&whole, kind, 0, &p, &u0, &nu);
  p.any = backward_any(kind, &s->w);
  bool owned;
  prim_entry e = conv_prim_get(&p, &owned);
  bool blocked = e.prim && (e.to[0] || e.to[1] || e.from[0] || e.from[2]);
  int64_t unit = blocked && s->w.groups == 1 ? conv_inner_block(&e.md[by_big ? 0 : 1]) : 1;
  conv_prim_release(&e, owned);
  int64_t per = LOOM_MAX(s->per_small, s->per_big);
  s->b = conv_block_units(s->units, per, images,
                          blocked ? CONV_MIN_CHANNELS_BLOCKED : CONV_MIN_CHANNELS);
  s->b = LOOM_MIN((s->b + unit - 1) / unit * unit, s->units);
  s->blocks = (s->units + s->b - 1) / s->b;
}

/* conv_transpose: x small [N, C, O], w [C, M/g, K] -> big [N, M, S];
 * tasks: image x block of output channels. With one group a block's
 * weights are a slice of w's second dim: packed first, block by block. */
static bool conv_transpose_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t img = t / s->blocks, u0, nu;
  prim_key p;
  conv_block_key(s, P_BWD_DATA, t % s->blocks, &p, &u0, &nu);
  p.any = backward_any(P_BWD_DATA, &s->w);
  /* grouped: a block's weights are contiguous; packed: they start at the
   * block's first unit times every small channel */
  const float *wb = j->packed ? j->packed + u0 * s->small_c * s->kn
                              : j->b + u0 * s->per_small * s->per_big * s->kn;
  const float *dy = j->a + (img * s->small_c + u0 * s->per_small) * s->ss;
  float *out = j->out + (img * s->big_c + u0 * s->per_big) * s->bs;
  bool owned;
  prim_entry e = conv_prim_get(&p, &owned);
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  void *ptrs[3] = {(void *)read_operand(&e, res, 1, dy), (void *)read_operand(&e, res, 2, wb),
                   e.from[0] ? loom_dnnl_buffer(res, LOOM_DNNL_SRC,
                                                dnnl_memory_desc_get_size(&e.md[0]))
                             : out};
  static const int which[6] = {1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_WEIGHTS, 0, DNNL_ARG_DIFF_SRC};
  bool ok = e.prim && res && ptrs[0] && ptrs[1] && ptrs[2] && conv_prim_run(&e, 3, which, ptrs);
  if (ok && e.from[0]) {
    dnnl_memory_desc_t plain;
    conv_md_image(&plain, p.big_c, (int32_t)p.k, p.big);
    ok = conv_reorder(e.from[0], &e.md[0], ptrs[2], &plain, out);
  }
  conv_prim_release(&e, owned);
  return ok;
}

loom_status conv_transpose_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                  const loom_view *out) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data};
  conv_split *s = &j.s;
  LOOM_TRY(conv_window_of(c, n, in, &s->w));
  conv_split_make(s, in[0].shape[0], in[1].shape[1] * s->w.groups, in[0].shape[1], true,
                  CONV_MIN_CHANNELS);
  if (s->batch > 0) split_for_layouts(s, P_BWD_DATA, true, s->batch);
  float *packed = NULL;
  if (s->w.groups == 1 && s->blocks > 1) {
    packed = loom_malloc(c->ctx, sizeof(float) * (size_t)(s->small_c * s->big_c * s->kn));
    if (!packed) return LOOM_STATUS_OUT_OF_MEMORY;
    float *at = packed;
    for (int64_t blk = 0; blk < s->blocks; blk++) {
      int64_t u0 = blk * s->b, nu = LOOM_MIN(s->b, s->units - u0);
      for (int64_t ci = 0; ci < s->small_c; ci++, at += nu * s->kn)
        memcpy(at, j.b + (ci * s->big_c + u0) * s->kn, sizeof(float) * (size_t)(nu * s->kn));
    }
  }
  j.packed = packed;
  bool ok = conv_run_tasks(c, s->batch * s->blocks, conv_big_flops(s), conv_transpose_task, &j);
  free(packed);
  return conv_status(c, n, ok);
}

/* conv_grad_weight: x big [N, C, S], dy small [N, M, O] -> dw [M, C/g, K];
 * tasks: blocks of output channels, each summing its images in order (in
 * the primitive's layout of the weights, then reordered to plain: the
 * same sums). */
static bool grad_weight_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t u0, nu, sc = s->per_small, cg = s->big_c / s->w.groups;
  prim_key p;
  conv_block_key(s, P_BWD_WEIGHTS, t, &p, &u0, &nu);
  p.any = backward_any(P_BWD_WEIGHTS, &s->w);
  bool owned;
  prim_entry e = conv_prim_get(&p, &owned);
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  float *dst = j->out + u0 * sc * cg * s->kn;
  size_t bytes = e.prim ? dnnl_memory_desc_get_size(&e.md[2]) : 0, alloc = (bytes + 63) / 64 * 64;
  float *sum = e.from[2] ? aligned_alloc(64, alloc) : dst;
  float *part = s->batch > 1 ? aligned_alloc(64, alloc) : NULL;
  bool ok = e.prim && res && sum && (s->batch == 1 || part);
  static const int which[6] = {0, DNNL_ARG_SRC, 1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_DIFF_WEIGHTS};
  for (int64_t img = 0; img < s->batch && ok; img++) {
    void *ptrs[3] = {
        (void *)read_operand(&e, res, 0, j->a + (img * s->big_c + u0 * s->per_big) * s->bs),
        (void *)read_operand(&e, res, 1, j->b + (img * s->small_c + u0 * sc) * s->ss),
        img ? part : sum};
    ok = ptrs[0] && ptrs[1] && conv_prim_run(&e, 3, which, ptrs);
    for (size_t i = 0; ok && img && i < bytes / sizeof(float); i++)
      sum[i] += part[i];
  }
  if (ok && e.from[2]) {
    dnnl_memory_desc_t plain;
    conv_md_weights(&plain, &p);
    ok = conv_reorder(e.from[2], &e.md[2], sum, &plain, dst);
  }
  if (sum != dst) free(sum);
  free(part);
  conv_prim_release(&e, owned);
  return ok;
}

/* Depthwise conv_grad_weight (one channel per group on both sides), 1-d
 * or 2-d, is Loom's own loop: oneDNN 2.6 has no fast kernel for it on
 * AVX2 (blocked layouts fall to its reference, 0.04 GFLOP/s; plain NCHW to
 * a GEMM per channel, 2.2 GFLOP/s for 7 x 7 taps over 28 x 28, a ConvNeXt
 * stage's). Per channel (a task) and tap: the dot product of the
 * gradient's rows with the input rows the tap shifts them to, each row in
 * 8 float lanes folded pairwise, the rows' sums added in double, images
 * and rows in order: an order fixed by the shapes. */
typedef struct dw_job {
  const float *x, *dy;
  float *dw;
  int64_t n, c, h, w, oh, ow; /* images, channels, input and gradient planes */
  int64_t kh, kw, sh, sw, dh, dw_, lh, lw;
} dw_job;

/* Output columns [*lo, *hi) whose input column ox * s - l + t lies in [0, w). */
static void dw_cols(int64_t w, int64_t ow, int64_t s, int64_t l, int64_t t, int64_t *lo,
                    int64_t *hi) {
  int64_t a = l - t; /* ox * s >= a */
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t b = w - 1 + l - t; /* ox * s <= b */
  *hi = b < 0 ? 0 : LOOM_MIN(ow, b / s + 1);
}

static bool dw_grad_task(const void *user, int64_t ch) {
  const dw_job *j = user;
  for (int64_t ky = 0; ky < j->kh; ky++)
    for (int64_t kx = 0; kx < j->kw; kx++) {
      int64_t lo, hi, off = kx * j->dw_ - j->lw;
      dw_cols(j->w, j->ow, j->sw, j->lw, kx * j->dw_, &lo, &hi);
      double sum = 0;
      for (int64_t img = 0; img < j->n && lo < hi; img++)
        for (int64_t oy = 0; oy < j->oh; oy++) {
          int64_t iy = oy * j->sh - j->lh + ky * j->dh;
          if (iy < 0 || iy >= j->h) continue;
          const float *restrict xr = j->x + ((img * j->c + ch) * j->h + iy) * j->w + off;
          const float *restrict gr = j->dy + ((img * j->c + ch) * j->oh + oy) * j->ow;
          float lane[8] = {0};
          int64_t ox = lo;
          if (j->sw == 1)
            for (; ox + 8 <= hi; ox += 8)
              for (int32_t l = 0; l < 8; l++) lane[l] += xr[ox + l] * gr[ox + l];
          for (; ox < hi; ox++) lane[(ox - lo) % 8] += xr[ox * j->sw] * gr[ox];
          sum += (double)(((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                          ((lane[4] + lane[5]) + (lane[6] + lane[7])));
        }
      j->dw[(ch * j->kh + ky) * j->kw + kx] = (float)sum;
    }
  return true;
}

/* Whether conv_grad_weight with window s->w on x [N, C, S] runs as
 * Loom's depthwise loop, and then runs it. */
static bool grad_weight_depthwise(const loom_cpu *c, const conv_split *s, const loom_view *in,
                                  const loom_view *out, bool *ok) {
  const loom_window *w = &s->w;
  int64_t ch = in[0].shape[1];
  if (w->groups != ch || in[1].shape[1] != ch || w->k > 2 || w->k < 1) return false;
  bool two = w->k == 2;
  dw_job j = {.x = in[0].data, .dy = in[1].data, .dw = out[0].data, .n = in[0].shape[0], .c = ch,
              .h = two ? w->big[0] : 1, .w = w->big[w->k - 1], .oh = two ? w->small[0] : 1,
              .ow = w->small[w->k - 1], .kh = two ? w->kernel[0] : 1, .kw = w->kernel[w->k - 1],
              .sh = two ? w->stride[0] : 1, .sw = w->stride[w->k - 1], .dh = two ? w->dil[0] : 1,
              .dw_ = w->dil[w->k - 1], .lh = two ? w->lo[0] : 0, .lw = w->lo[w->k - 1]};
  *ok = conv_run_tasks(c, ch, conv_big_flops(s), dw_grad_task, &j);
  return true;
}

loom_status conv_grad_weight_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                    const loom_view *out) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data};
  conv_split *s = &j.s;
  LOOM_TRY(conv_window_of(c, n, in, &s->w));
  conv_split_make(s, in[0].shape[0], in[0].shape[1], in[1].shape[1], false, CONV_MIN_CHANNELS);
  if (s->batch == 0) {
    memset(j.out, 0, sizeof(float) * (size_t)loom_view_numel(&out[0]));
    return LOOM_STATUS_OK;
  }
  bool ok = true;
  if (grad_weight_depthwise(c, s, in, out, &ok)) return conv_status(c, n, ok);
  /* a block's tasks are its blocks alone: its images are summed inside */
  split_for_layouts(s, P_BWD_WEIGHTS, false, 1);
  return conv_status(c, n, conv_run_tasks(c, s->blocks, conv_big_flops(s), grad_weight_task, &j));
}

/*
 * conv on oneDNN's convolution forward (cpu_conv.c says how): tasks of one
 * image times a block of output channels, on the direct kernels' layouts
 * where the whole conv has one, its epilogue as post-ops where oneDNN can
 * say it, else run on each task's rows.
 */
#include "runtime/cpu/cpu_conv_internal.h"
#include "runtime/cpu/dnnl_thread.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* One image of the input into the shared copy. */
static bool input_layout_task(const void *user, int64_t img) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  dnnl_memory_desc_t plain;
  conv_md_image(&plain, s->big_c, s->w.k, s->w.big);
  return conv_reorder(j->whole.to[0], &plain, j->a + img * s->big_c * s->bs, &j->whole.md[0],
                      j->xb + (size_t)img * j->x_bytes);
}

/* post's signature into p (a forward conv's key). */
static void key_post(prim_key *p, const loom_conv_post *post) {
  if (!post) return;
  p->scale = post->scale != NULL;
  p->bias = post->bias != NULL;
  p->n_post = post->n;
  for (int32_t i = 0; i < post->n; i++) {
    const loom_conv_post_op *o = &post->op[i];
    p->post[i][0] = o->kind;
    p->post[i][1] = o->alg;
    p->post[i][2] = conv_float_bits(o->alpha);
    p->post[i][3] = conv_float_bits(o->beta);
  }
}

/* One task's conv through e: input channels from u0 * per_big (all with
 * one group), output channels [c0, c0 + nc) of image img. Images and
 * weights in other layouts than plain pass through this thread's buffers
 * (the input through the shared copy where it has e's layout), unless the
 * weights are packed (packed_wt: this block's, or NULL). With post-ops,
 * it writes their result (post->out) instead of the conv's. */
static bool conv_block(const conv_job *j, const prim_entry *e, int64_t img, int64_t u0,
                       int64_t c0, const float *packed_wt) {
  const conv_split *s = &j->s;
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  if (!e->prim || !res) return false;
  const loom_conv_post *post = j->post;
  const float *src = j->a + (img * s->big_c + u0 * s->per_big) * s->bs;
  const float *wt = j->b + c0 * (s->big_c / s->w.groups) * s->kn;
  float *out = (post ? post->out : j->out) + (img * s->small_c + c0) * s->ss, *dst = out;
  dnnl_memory_desc_t plain[3];
  conv_md_image(&plain[0], e->key.big_c, (int32_t)e->key.k, e->key.big);
  conv_md_image(&plain[1], e->key.small_c, (int32_t)e->key.k, e->key.small);
  conv_md_weights(&plain[2], &e->key);
  if (j->layout & LOOM_CPU_IN_BLOCKED) { /* already in e's layout */
    if (conv_inner_block(&e->md[0]) != j->in_block) return false;
  } else if (j->xb && dnnl_memory_desc_equal(&e->md[0], &j->whole.md[0])) {
    src = (const float *)(j->xb + (size_t)img * j->x_bytes);
  } else if (e->to[0]) {
    void *buf = loom_dnnl_buffer(res, LOOM_DNNL_SRC, dnnl_memory_desc_get_size(&e->md[0]));
    if (!buf || !conv_reorder(e->to[0], &plain[0], src, &e->md[0], buf)) return false;
    src = buf;
  }
  if (packed_wt) {
    wt = packed_wt;
  } else if (e->to[2]) {
    void *buf = loom_dnnl_buffer(res, LOOM_DNNL_WEIGHTS, dnnl_memory_desc_get_size(&e->md[2]));
    if (!buf || !conv_reorder_weights(j, e, c0, buf)) return false;
    wt = buf;
  }
  bool out_blocked = j->layout & LOOM_CPU_OUT_BLOCKED;
  if (out_blocked && conv_inner_block(&e->md[1]) != j->out_block) return false;
  if (e->from[1] && !out_blocked) {
    dst = loom_dnnl_buffer(res, LOOM_DNNL_DST, dnnl_memory_desc_get_size(&e->md[1]));
    if (!dst) return false;
  }
  void *ptrs[CONV_MAX_ARGS] = {(void *)src, (void *)wt, dst};
  int which[2 * CONV_MAX_ARGS] = {0, DNNL_ARG_SRC, 2, DNNL_ARG_WEIGHTS, 1, DNNL_ARG_DST};
  dnnl_memory_desc_t extra[CONV_MAX_ARGS];
  int32_t n = 3;
  if (e->key.bias) {
    conv_md_plain(&extra[n - 3], 1, &e->key.small_c);
    which[2 * n + 1] = DNNL_ARG_BIAS;
    ptrs[n++] = post->bias + c0;
  }
  /* tensor operands (plain) into the output's layout, one after another */
  size_t post_bytes = dnnl_memory_desc_get_size(&e->md[1]);
  char *post_buf = NULL;
  for (int32_t i = 0; i < e->key.n_post; i++) {
    const loom_conv_post_op *o = &post->op[i];
    if (o->kind == LOOM_CONV_POST_ELTWISE) continue;
    conv_md_post_operand(&extra[n - 3], &e->key, o->kind);
    which[2 * n + 1] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1;
    if (o->kind == LOOM_CONV_POST_CHANNEL) {
      ptrs[n++] = (void *)(o->chan + c0);
      continue;
    }
    const float *x = o->tensor + (out - post->out);
    if (j->layout & LOOM_CPU_POST_BLOCKED) { /* kept in the output's blocks */
      if (conv_inner_block(&e->md[1]) != j->out_block) return false;
      extra[n - 3] = e->md[1];
    } else if (e->to_post) {
      if (!post_buf)
        post_buf = loom_dnnl_buffer(res, LOOM_DNNL_POST, post_bytes * (size_t)e->key.n_post);
      char *at = post_buf ? post_buf + (size_t)i * post_bytes : NULL;
      if (!at || !conv_reorder(e->to_post, &plain[1], x, &e->md[1], at)) return false;
      x = (const float *)at;
      extra[n - 3] = e->md[1];
    }
    ptrs[n++] = (void *)x;
  }
  return conv_prim_run_with(e, n, which, ptrs, extra) &&
         (!e->from[1] || out_blocked || conv_reorder(e->from[1], &e->md[1], dst, &plain[1], out));
}


/* conv: x big [N, C, S], w [M, C/g, K] -> small [N, M, O]; tasks: image x
 * block of output channels. */
static bool conv_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t img = t / s->blocks, u0, nu, sc = s->per_small;
  int64_t blk = t % s->blocks;
  u0 = blk * s->b;
  nu = LOOM_MIN(s->b, s->units - u0);
  const float *packed_wt = j->wpack ? conv_wpack_block(j->wpack, blk) : NULL;
  bool ok = conv_block(j, &j->blk[blk == s->blocks - 1], img, u0, u0 * sc, packed_wt);
  const loom_gemm_epilogue *epi = j->epi;
  if (!ok || !epi) return ok;
  /* the task's output, [nu * sc] channels of image img, is whole rows of
   * the last dim, ending on planes (which end on the kernel's rows) */
  int64_t cols = s->w.small[s->w.k - 1];
  if (cols <= 0) return true;
  int64_t r0 = (img * s->small_c + u0 * sc) * s->ss / cols, r1 = r0 + nu * sc * s->ss / cols;
  for (int64_t r = r0; r < r1; r += epi->rows)
    epi->fn(epi->user, conv_worker_index(), r, LOOM_MIN(r + epi->rows, r1));
  return true;
}

/* Cuts s into blocks of whole epilogue blocks (epi: NULL or its rows):
 * each image's rows are cut into blocks of epi->rows (aligned to the
 * kernel's rows, as is the image's end), so a block of channels must span
 * a multiple of them. */
static void align_blocks(conv_split *s, const loom_gemm_epilogue *epi, int64_t unit) {
  int64_t plane_rows = s->w.k > 1 ? s->ss / s->w.small[s->w.k - 1] : 1, q = unit;
  if (epi && plane_rows > 0)
    q = conv_lcm(q, epi->rows / conv_gcd(epi->rows, plane_rows * s->per_small));
  s->b = LOOM_MIN((s->b + q - 1) / q * q, s->units);
  s->blocks = (s->units + s->b - 1) / s->b;
}

/* Whether the whole conv (key p) runs with j's post-ops on the layouts
 * it takes without them (a post-op that only a slower kernel supports is
 * left to the epilogue on rows). */
static bool post_fits(const conv_job *j, const prim_key *p) {
  const prim_entry *w = &j->whole;
  bool fast = w->prim && (w->to[0] || w->from[1]), owned;
  prim_key q = *p;
  key_post(&q, j->post);
  q.any = fast;
  prim_entry e = conv_prim_get(&q, &owned);
  bool ok = e.prim && (!fast || (dnnl_memory_desc_equal(&e.md[0], &w->md[0]) &&
                                 dnnl_memory_desc_equal(&e.md[1], &w->md[1])));
  conv_prim_release(&e, owned);
  return ok;
}

/* Whether the conv runs on the layouts oneDNN picks: its direct kernels
 * on channels-last or channel-blocked images (and weights in their own
 * layout) instead of im2col + GEMM on plain ones, each task reordering its
 * images and weights. Decided on the whole conv's picks; with those,
 * blocks of fewer channels pay (no im2col to redo). */
static void pick_layouts(conv_job *j) {
  conv_split *s = &j->s, whole = *s;
  whole.b = whole.units;
  whole.blocks = 1;
  prim_key p;
  int64_t u0, nu;
  conv_block_key(&whole, P_FWD, 0, &p, &u0, &nu);
  p.any = 1;
  j->whole = conv_prim_get(&p, &j->whole_owned);
  if (j->post && !post_fits(j, &p)) j->post = NULL;
  const prim_entry *e = &j->whole;
  if (!e->prim || (!e->to[0] && !e->from[1])) return;
  j->any = 1;
  j->in_block = conv_inner_block(&e->md[0]);
  j->out_block = conv_inner_block(&e->md[1]);
  /* blocks start on whole channel blocks of the sides they cut (one
   * group: the output; depthwise: both), so no task pads a block */
  int64_t b0 = conv_inner_block(&e->md[0]), b1 = conv_inner_block(&e->md[1]);
  bool thin = (s->per_big == 1 && s->per_small == 1) || s->big_c < b1;
  conv_split_make(s, s->batch, s->big_c, s->small_c, false,
                  thin ? CONV_MIN_CHANNELS_THIN : CONV_MIN_CHANNELS_BLOCKED);
  if (s->w.groups == 1)
    j->unit = b1;
  else if (s->per_big == 1 && s->per_small == 1)
    j->unit = conv_lcm(b0, b1);
}

/* The whole input in the whole conv's layout, for its blocks. */
static bool shared_input(const loom_cpu *c, conv_job *j) {
  const conv_split *s = &j->s;
  if (!j->any || s->w.groups != 1 || s->blocks == 1 || !j->whole.prim || !j->whole.to[0] ||
      (j->layout & LOOM_CPU_IN_BLOCKED))
    return true;
  j->x_bytes = (dnnl_memory_desc_get_size(&j->whole.md[0]) + 63) / 64 * 64;
  j->xb = loom_malloc(c->ctx, j->x_bytes * (size_t)s->batch);
  return j->xb && conv_run_tasks(c, s->batch, s->batch > 1, input_layout_task, j);
}

/* j planned for conv node n on inputs of in's shapes (the data is not
 * read): its window, blocks, post-ops (post, translated by the caller, or
 * NULL) and layouts. */
static loom_status plan_conv(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_conv_post *post, conv_job *j) {
  LOOM_TRY(conv_window_of(c, n, in, &j->s.w));
  conv_split *s = &j->s;
  conv_split_make(s, in[0].shape[0], in[0].shape[1], in[1].shape[0], false, CONV_MIN_CHANNELS);
  j->post = post;
  j->in_block = j->out_block = 1;
  if (s->batch > 0) pick_layouts(j);
  if (j->post) j->epi = NULL;
  align_blocks(s, j->epi, j->unit);
  return LOOM_STATUS_OK;
}

/* The epilogue's post-ops when oneDNN can say them and nothing else reads
 * the conv's own output (args NULL: the structure alone). */
static bool conv_post(const loom_conv_epilogue *epi, void *const *args, const loom_view *in,
                      const loom_view *out, loom_conv_post *post) {
  memset(post, 0, sizeof *post);
  if (!epi || !epi->kernel || epi->c_read || out->rank < 3) return false;
  int64_t plane = 1;
  for (int32_t d = 2; d < out->rank; d++)
    plane *= out->shape[d];
  (void)in;
  return loom_conv_post_from_kernel(epi->kernel, args, epi->c, out->shape[0], out->shape[1], plane,
                                    post);
}

loom_status loom_cpu_conv(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out, const loom_conv_epilogue *epi) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data, .unit = 1};
  if (epi && epi->rows.rows > 0 && epi->rows.fn) j.epi = &epi->rows;
  j.layout = epi ? epi->layout : 0;
  loom_conv_post post;
  bool has_post = j.epi && conv_post(epi, epi->args, in, out, &post);
  loom_status st = plan_conv(c, n, in, has_post ? &post : NULL, &j);
  /* kept blocked: what the program planned (loom_cpu_window_blocks) */
  bool ok = !st && (!(j.layout & LOOM_CPU_IN_BLOCKED) || j.in_block > 1) &&
            (!(j.layout & LOOM_CPU_OUT_BLOCKED) || (j.out_block > 1 && !j.epi)) &&
            (!(j.layout & LOOM_CPU_POST_BLOCKED) || (j.out_block > 1 && j.post));
  for (int32_t i = 0; ok && i < 2; i++) { /* the first block's, the last's */
    prim_key p;
    int64_t u0, nu;
    conv_block_key(&j.s, P_FWD, i ? j.s.blocks - 1 : 0, &p, &u0, &nu);
    p.any = j.any;
    key_post(&p, j.post);
    j.blk[i] = conv_prim_get(&p, &j.blk_owned[i]);
  }
  if (ok && !st) st = conv_wpack_get(c, n, &j);
  ok = ok && !st && shared_input(c, &j) &&
       conv_run_tasks(c, j.s.batch * j.s.blocks, conv_big_flops(&j.s), conv_task, &j);
  free(j.xb);
  conv_prim_release(&j.whole, j.whole_owned);
  for (int32_t i = 0; i < 2; i++)
    conv_prim_release(&j.blk[i], j.blk_owned[i]);
  if (has_post) loom_conv_post_free(&post);
  return st ? st : conv_status(c, n, ok);
}

loom_status conv_forward_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out) {
  return loom_cpu_conv(c, n, in, out, NULL);
}

void conv_forward_blocks(const loom_cpu *c, const loom_node *n, const loom_view *in,
                         const loom_view *out, const loom_conv_epilogue *epi, int64_t *in_block,
                         int64_t *out_block) {
  conv_job j = {.unit = 1};
  if (epi && epi->rows.rows > 0) j.epi = &epi->rows;
  loom_conv_post post;
  bool has_post = j.epi && conv_post(epi, NULL, in, out, &post);
  if (plan_conv(c, n, in, has_post ? &post : NULL, &j) == LOOM_STATUS_OK && j.any) {
    *in_block = j.in_block;
    if (!j.epi) *out_block = j.out_block;
  }
  conv_prim_release(&j.whole, j.whole_owned);
  if (has_post) loom_conv_post_free(&post);
}

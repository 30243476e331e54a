/*
 * conv_transpose (oneDNN's convolution backward data: the weights [C, M/g,
 * K] are a convolution's [OC, IC/g, K] with OC the small side) and
 * conv_grad_weight (backward weights, summing its per-image products in
 * image order), on plain layouts.
 */
#include "runtime/cpu/cpu_conv_internal.h"

#include <stdlib.h>
#include <string.h>

/* conv_transpose: x small [N, C, O], w [C, M/g, K] -> big [N, M, S];
 * tasks: image x block of output channels. With one group a block's
 * weights are a slice of w's second dim: packed first, block by block. */
static bool conv_transpose_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t img = t / s->blocks, u0, nu;
  prim_key p;
  conv_block_key(s, P_BWD_DATA, t % s->blocks, &p, &u0, &nu);
  /* grouped: a block's weights are contiguous; packed: they start at the
   * block's first unit times every small channel */
  const float *wb = j->packed ? j->packed + u0 * s->small_c * s->kn
                              : j->b + u0 * s->per_small * s->per_big * s->kn;
  void *ptrs[3] = {(void *)(j->a + (img * s->small_c + u0 * s->per_small) * s->ss), (void *)wb,
                   j->out + (img * s->big_c + u0 * s->per_big) * s->bs};
  static const int which[6] = {1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_WEIGHTS, 0, DNNL_ARG_DIFF_SRC};
  return conv_prim_run_key(&p, 3, which, ptrs);
}

loom_status conv_transpose_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                  const loom_view *out) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data};
  conv_split *s = &j.s;
  LOOM_TRY(conv_window_of(c, n, in, &s->w));
  conv_split_make(s, in[0].shape[0], in[1].shape[1] * s->w.groups, in[0].shape[1], true,
                  CONV_MIN_CHANNELS);
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
 * tasks: blocks of output channels, each summing its images in order. */
static bool grad_weight_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t u0, nu, sc = s->per_small, cg = s->big_c / s->w.groups;
  prim_key p;
  conv_block_key(s, P_BWD_WEIGHTS, t, &p, &u0, &nu);
  bool owned;
  prim_entry e = conv_prim_get(&p, &owned);
  int64_t len = nu * sc * cg * s->kn;
  float *dst = j->out + u0 * sc * cg * s->kn;
  float *part = s->batch > 1 ? malloc(sizeof(float) * (size_t)len) : NULL;
  bool ok = e.prim && (s->batch == 1 || part);
  static const int which[6] = {0, DNNL_ARG_SRC, 1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_DIFF_WEIGHTS};
  for (int64_t img = 0; img < s->batch && ok; img++) {
    void *ptrs[3] = {(void *)(j->a + (img * s->big_c + u0 * s->per_big) * s->bs),
                     (void *)(j->b + (img * s->small_c + u0 * sc) * s->ss), img ? part : dst};
    ok = conv_prim_run(&e, 3, which, ptrs);
    for (int64_t i = 0; ok && img && i < len; i++)
      dst[i] += part[i];
  }
  free(part);
  conv_prim_release(&e, owned);
  return ok;
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
  return conv_status(c, n, conv_run_tasks(c, s->blocks, conv_big_flops(s), grad_weight_task, &j));
}

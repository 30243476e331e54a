/*
 * oneDNN primitives for the window ops (cpu_conv_internal.h), cached by
 * their geometry: convolution forward, backward data and backward weights
 * and pooling forward, each made for one thread (N = 1), with the reorders
 * that move its operands between Loom's plain layout and the layouts it
 * takes, and running them on the calling thread's stream and buffers
 * (dnnl_thread.h).
 */
#include "runtime/cpu/cpu_conv_internal.h"
#include "runtime/cpu/dnnl_thread.h"

#include <omp.h>
#include <pthread.h>
#include <string.h>

#define CACHE_CAP 512
static prim_entry cache[CACHE_CAP];
static int32_t n_cached;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;

void conv_md_plain(dnnl_memory_desc_t *md, int32_t nd, const int64_t *dims) {
  dnnl_dims_t d = {0}, s = {0};
  int64_t st = 1;
  for (int32_t i = nd - 1; i >= 0; i--) {
    d[i] = dims[i];
    s[i] = st;
    st *= dims[i];
  }
  dnnl_memory_desc_init_by_strides(md, nd, d, dnnl_f32, s);
}

/* [1, c, spatial...] */
void conv_md_image(dnnl_memory_desc_t *md, int64_t c, int32_t k, const int64_t *sp) {
  int64_t dims[CONV_MAX_DIMS + 2] = {1, c};
  memcpy(dims + 2, sp, sizeof *sp * (size_t)k);
  conv_md_plain(md, k + 2, dims);
}

/* [OC, IC, K...] or, grouped, [G, OC/G, IC/G, K...] */
static int32_t weight_dims(const prim_key *p, int64_t *dims) {
  int32_t at = 0;
  if (p->groups > 1) dims[at++] = p->groups;
  dims[at++] = p->small_c / p->groups;
  dims[at++] = p->big_c / p->groups;
  for (int32_t d = 0; d < p->k; d++)
    dims[at++] = p->kernel[d];
  return at;
}

void conv_md_weights(dnnl_memory_desc_t *md, const prim_key *p) {
  int64_t dims[CONV_MAX_DIMS + 3];
  conv_md_plain(md, weight_dims(p, dims), dims);
}

/* The same shapes in layout tag (any: the primitive picks). */
static void md_tag(dnnl_memory_desc_t *md, int32_t nd, const int64_t *dims, dnnl_format_tag_t tag) {
  dnnl_dims_t d = {0};
  memcpy(d, dims, sizeof *dims * (size_t)nd);
  dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, tag);
}

/* The layouts a forward conv may take, tried in this order: images in
 * blocks of 16 or 8 channels (the direct kernels' own layouts on AVX-512
 * and AVX2: cheap to reorder to and from plain, unlike channels-last),
 * then whatever the primitive picks. */
enum { LAYOUT_PLAIN = 0, LAYOUT_ANY = 1 };
static const int32_t layouts_tried[] = {16, 8, LAYOUT_ANY};

/* An image layout's tag: nd dims in blocks of `layout` channels (plain
 * when c is below a block: the direct kernels read a thin input plain). */
static dnnl_format_tag_t image_tag(int32_t layout, int32_t nd, int64_t c) {
  if (layout == LAYOUT_ANY) return dnnl_format_tag_any;
  if (c < layout) return nd == 3 ? dnnl_abc : nd == 4 ? dnnl_abcd : dnnl_abcde;
  if (layout == 8) return nd == 3 ? dnnl_aBc8b : nd == 4 ? dnnl_aBcd8b : dnnl_aBcde8b;
  return nd == 3 ? dnnl_aBc16b : nd == 4 ? dnnl_aBcd16b : dnnl_aBcde16b;
}

int64_t conv_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(int64_t b) {
  uint32_t u = (uint32_t)b;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A post-op's second operand: per channel [1, c, 1...] or a tensor
 * [1, c, spatial...] of the block's output channels, plain. */
void conv_md_post_operand(dnnl_memory_desc_t *md, const prim_key *p, int64_t kind) {
  int64_t dims[CONV_MAX_DIMS + 2] = {1, p->small_c};
  for (int32_t d = 0; d < p->k; d++)
    dims[2 + d] = kind == LOOM_CONV_POST_CHANNEL ? 1 : p->small[d];
  conv_md_plain(md, (int32_t)p->k + 2, dims);
}

/* p's post-ops into attr; a tensor operand in the layout of dst (the
 * direct kernels read a residual only in their output's own layout). */
static dnnl_status_t set_post_ops(dnnl_primitive_attr_t attr, const prim_key *p,
                                  const dnnl_memory_desc_t *dst) {
  if (!p->n_post) return dnnl_success;
  dnnl_post_ops_t po;
  dnnl_status_t st = dnnl_post_ops_create(&po);
  if (st != dnnl_success) return st;
  for (int64_t i = 0; st == dnnl_success && i < p->n_post; i++) {
    const int64_t *q = p->post[i];
    dnnl_memory_desc_t md;
    if (q[0] == LOOM_CONV_POST_ELTWISE) {
      st = dnnl_post_ops_append_eltwise(po, 1.0f, (dnnl_alg_kind_t)q[1], bits_float(q[2]),
                                        bits_float(q[3]));
    } else {
      conv_md_post_operand(&md, p, q[0]);
      st = dnnl_post_ops_append_binary(po, (dnnl_alg_kind_t)q[1],
                                       q[0] == LOOM_CONV_POST_TENSOR ? dst : &md);
    }
  }
  if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
  dnnl_post_ops_destroy(po);
  return st;
}

/* p's primitive with images in `layout` (LAYOUT_PLAIN, LAYOUT_ANY or a
 * channel block) and, unless plain, weights as it picks;
 * kept: its descriptor, for the layouts. With a layout, an implementation
 * that is neither a reference loop nor im2col + GEMM, or none. */
static dnnl_status_t create(const prim_key *p, int32_t layout, dnnl_primitive_t *prim,
                            size_t *scratch, dnnl_primitive_desc_t *kept) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL, hint = NULL;
  dnnl_memory_desc_t big, small, wt = {0}, bias;
  dnnl_dims_t stride = {0}, dil = {0}, lo = {0}, hi = {0}, ker = {0};
  int32_t k = (int32_t)p->k;
  for (int32_t d = 0; d < k; d++) {
    stride[d] = p->stride[d];
    dil[d] = p->dil[d] - 1;
    lo[d] = p->lo[d];
    hi[d] = p->hi[d];
    ker[d] = p->kernel[d];
  }
  conv_md_image(&big, p->big_c, k, p->big);
  conv_md_image(&small, p->small_c, k, p->small);
  dnnl_memory_desc_t plain_small = small;
  if (p->kind <= P_BWD_WEIGHTS) conv_md_weights(&wt, p);
  conv_md_plain(&bias, 1, &p->small_c);
  if (layout != LAYOUT_PLAIN) {
    int64_t dims[CONV_MAX_DIMS + 3] = {1, p->big_c};
    memcpy(dims + 2, p->big, sizeof *dims * (size_t)k);
    md_tag(&big, k + 2, dims, image_tag(layout, k + 2, p->big_c));
    dims[1] = p->small_c;
    memcpy(dims + 2, p->small, sizeof *dims * (size_t)k);
    md_tag(&small, k + 2, dims, image_tag(layout, k + 2, layout));
    md_tag(&wt, weight_dims(p, dims), dims, dnnl_format_tag_any);
  }
  dnnl_status_t st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success)
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success) st = set_post_ops(attr, p, layout == LAYOUT_ANY ? &plain_small : &small);
  if (st == dnnl_success && p->kind <= P_BWD_WEIGHTS) {
    dnnl_convolution_desc_t fwd, cd;
    st = dnnl_dilated_convolution_forward_desc_init(
        &fwd, p->kind == P_FWD ? dnnl_forward_inference : dnnl_forward_training,
        dnnl_convolution_direct, &big, &wt, p->bias ? &bias : NULL, &small, stride, dil, lo, hi);
    if (st == dnnl_success && p->kind == P_FWD) {
      st = dnnl_primitive_desc_create(&pd, &fwd, attr, engine, NULL);
    } else if (st == dnnl_success) {
      st = dnnl_primitive_desc_create(&hint, &fwd, NULL, engine, NULL);
      if (st == dnnl_success)
        st = p->kind == P_BWD_DATA
                 ? dnnl_dilated_convolution_backward_data_desc_init(
                       &cd, dnnl_convolution_direct, &big, &wt, &small, stride, dil, lo, hi)
                 : dnnl_dilated_convolution_backward_weights_desc_init(
                       &cd, dnnl_convolution_direct, &big, &wt, NULL, &small, stride, dil, lo, hi);
      if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &cd, attr, engine, hint);
    }
    const char *impl = NULL;
    if (st == dnnl_success && layout != LAYOUT_PLAIN &&
        (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
         !impl || strncmp(impl, "ref", 3) == 0 || strstr(impl, "gemm")))
      st = dnnl_unimplemented;
  } else if (st == dnnl_success) {
    dnnl_pooling_v2_desc_t pl;
    dnnl_alg_kind_t alg = p->kind == P_MAX        ? dnnl_pooling_max
                          : p->kind == P_AVG_EXCL ? dnnl_pooling_avg_exclude_padding
                                                  : dnnl_pooling_avg_include_padding;
    st = dnnl_pooling_v2_forward_desc_init(&pl, dnnl_forward_inference, alg, &big, &small, stride,
                                           ker, dil, lo, hi);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &pl, attr, engine, NULL);
  }
  if (st == dnnl_success) {
    *scratch =
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    st = dnnl_primitive_create(prim, pd);
  }
  if (st == dnnl_success && kept) {
    *kept = pd;
    pd = NULL;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

/* A reorder from one layout to another, or NULL where they are the same
 * and it scales nothing; scale_mask: the dims whose index picks a scale
 * given at run time (0: none). */
static dnnl_status_t create_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                    int scale_mask, dnnl_primitive_t *r) {
  *r = NULL;
  if (!scale_mask && dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_status_t st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success && scale_mask)
    st = dnnl_primitive_attr_set_output_scales(attr, 1, scale_mask, &DNNL_RUNTIME_F32_VAL);
  if (st == dnnl_success)
    st = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr);
  if (st == dnnl_success) st = dnnl_primitive_create(r, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

static void destroy_entry(prim_entry *e) {
  dnnl_primitive_t *all[8] = {&e->prim,    &e->to[0],   &e->to[1],   &e->to[2],
                              &e->from[0], &e->from[1], &e->from[2], &e->to_post};
  for (int32_t i = 0; i < 8; i++) {
    if (*all[i]) dnnl_primitive_destroy(*all[i]);
    *all[i] = NULL;
  }
}

/* Whether p's primitive writes operand i (0 big, 1 small, 2 weights):
 * the forward ops (conv, pools) their output, the backward ones the
 * gradient they compute. */
static bool writes(const prim_key *p, int32_t i) {
  return i == (p->kind == P_BWD_DATA ? 0 : p->kind == P_BWD_WEIGHTS ? 2 : 1);
}

static bool has_tensor_post(const prim_key *p) {
  for (int64_t i = 0; i < p->n_post; i++)
    if (p->post[i][0] == LOOM_CONV_POST_TENSOR) return true;
  return false;
}

/* e's primitive and layouts for e->key: plain ones, or with key.any
 * the first of layouts_tried that has a fast implementation, its weights
 * as it picks, and the reorders to and from plain (plain when none) of
 * what it reads and writes. */
static dnnl_status_t create_entry(prim_entry *e) {
  prim_key *p = &e->key;
  int32_t k = (int32_t)p->k;
  conv_md_image(&e->md[0], p->big_c, k, p->big);
  conv_md_image(&e->md[1], p->small_c, k, p->small);
  if (p->kind <= P_BWD_WEIGHTS) conv_md_weights(&e->md[2], p);
  dnnl_primitive_desc_t pd = NULL;
  for (size_t i = 0; p->any && !pd && i < sizeof layouts_tried / sizeof *layouts_tried; i++)
    if (create(p, layouts_tried[i], &e->prim, &e->scratch, &pd) != dnnl_success) pd = NULL;
  /* weights scaled per output channel (grouped: [G, OC/G, ...]) */
  int wt_mask = p->scale ? (p->groups > 1 ? 3 : 1) : 0;
  if (!pd) {
    dnnl_status_t st = create(p, LAYOUT_PLAIN, &e->prim, &e->scratch, NULL);
    if (st == dnnl_success && wt_mask)
      st = create_reorder(&e->md[2], &e->md[2], wt_mask, &e->to[2]);
    return st;
  }
  bool bwd_data = p->kind == P_BWD_DATA, bwd_weights = p->kind == P_BWD_WEIGHTS;
  dnnl_query_t q[3] = {bwd_data ? dnnl_query_diff_src_md : dnnl_query_src_md,
                       bwd_data || bwd_weights ? dnnl_query_diff_dst_md : dnnl_query_dst_md,
                       bwd_weights ? dnnl_query_diff_weights_md : dnnl_query_weights_md};
  dnnl_status_t st = dnnl_success;
  for (int32_t i = 0; i < (p->kind <= P_BWD_WEIGHTS ? 3 : 2) && st == dnnl_success; i++) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, q[i], 0);
    if (writes(p, i))
      st = create_reorder(md, &e->md[i], 0, &e->from[i]);
    else
      st = create_reorder(&e->md[i], md, i == 2 ? wt_mask : 0, &e->to[i]);
    if (st == dnnl_success && i == 1 && has_tensor_post(p))
      st = create_reorder(&e->md[1], md, 0, &e->to_post);
    e->md[i] = *md;
  }
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* The cached primitive for p (created on first use, with oneDNN seeing one
 * thread, so its choices never depend on ours); NULL prim when oneDNN
 * cannot run p. *owned: the caller destroys it (the cache is full). */
prim_entry conv_prim_get(const prim_key *p, bool *owned) {
  prim_entry e = {.key = *p};
  *owned = false;
  pthread_mutex_lock(&cache_lock);
  for (int32_t i = 0; i < n_cached; i++)
    if (memcmp(&cache[i].key, p, sizeof *p) == 0) {
      e = cache[i];
      pthread_mutex_unlock(&cache_lock);
      return e;
    }
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  if (!engine) engine = loom_dnnl_engine();
  if (engine && create_entry(&e) != dnnl_success) destroy_entry(&e);
  omp_set_num_threads(prev);
  if (n_cached < CACHE_CAP)
    cache[n_cached++] = e;
  else
    *owned = e.prim != NULL;
  pthread_mutex_unlock(&cache_lock);
  return e;
}

/* Runs a reorder primitive from src to dst on this thread's stream;
 * scales: NULL, or the n_scales values it multiplies by. */
bool conv_reorder_scaled(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                         const dnnl_memory_desc_t *to, void *dst, const float *scales,
                         int64_t n_scales) {
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  dnnl_memory_t m[3] = {0};
  dnnl_memory_desc_t smd;
  conv_md_plain(&smd, 1, &n_scales);
  bool ok = res && dnnl_memory_create(&m[0], from, engine, (void *)src) == dnnl_success &&
            dnnl_memory_create(&m[1], to, engine, dst) == dnnl_success &&
            (!scales || dnnl_memory_create(&m[2], &smd, engine, (void *)scales) == dnnl_success);
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_FROM, m[0]}, {DNNL_ARG_TO, m[1]}, {DNNL_ARG_ATTR_OUTPUT_SCALES, m[2]}};
  ok = ok &&
       dnnl_primitive_execute(r, loom_dnnl_stream(res), scales ? 3 : 2, args) == dnnl_success &&
       dnnl_stream_wait(loom_dnnl_stream(res)) == dnnl_success;
  for (int32_t i = 0; i < 3; i++)
    if (m[i]) dnnl_memory_destroy(m[i]);
  return ok;
}

bool conv_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                  const dnnl_memory_desc_t *to, void *dst) {
  return conv_reorder_scaled(r, from, src, to, dst, NULL, 0);
}

/* The post-op operands and the bias after a run's first three args. */
#define CONV_MAX_ARGS (3 + 1 + LOOM_CONV_POST_MAX)

/* Runs e's primitive on one thread: args are (DNNL_ARG_*, pointer)
 * pairs; extra (NULL or one desc per arg past the first three): the
 * descs of the bias and post-op operands. */
bool conv_prim_run_with(const prim_entry *e, int32_t n, const int *which, void *const *ptrs,
                        const dnnl_memory_desc_t *extra) {
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  void *scratch = res ? loom_dnnl_buffer(res, LOOM_DNNL_SCRATCH, e->scratch) : NULL;
  if (!scratch) return false;
  const dnnl_memory_desc_t *mds = e->md;
  dnnl_memory_desc_t smd;
  dnnl_dims_t sdim = {(int64_t)e->scratch};
  dnnl_memory_desc_init_by_tag(&smd, 1, sdim, dnnl_u8, dnnl_a);
  dnnl_exec_arg_t args[CONV_MAX_ARGS + 1];
  dnnl_memory_t mem[CONV_MAX_ARGS + 1] = {0};
  bool ok = n <= CONV_MAX_ARGS;
  int32_t na = 0;
  for (int32_t i = 0; i < n && ok; i++, na++) {
    /* which: 0 big, 1 small, 2 weights (the md), with its DNNL_ARG */
    const dnnl_memory_desc_t *md = i < 3 ? &mds[which[2 * i]] : &extra[i - 3];
    ok = dnnl_memory_create(&mem[na], md, engine, ptrs[i]) == dnnl_success;
    args[na] = (dnnl_exec_arg_t){which[2 * i + 1], mem[na]};
  }
  if (ok && e->scratch) {
    ok = dnnl_memory_create(&mem[na], &smd, engine, scratch) == dnnl_success;
    args[na] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[na]};
    na++;
  }
  ok = ok && dnnl_primitive_execute(e->prim, loom_dnnl_stream(res), na, args) == dnnl_success &&
       dnnl_stream_wait(loom_dnnl_stream(res)) == dnnl_success;
  for (int32_t i = 0; i < CONV_MAX_ARGS + 1; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  return ok;
}

bool conv_prim_run(const prim_entry *e, int32_t n, const int *which, void *const *ptrs) {
  return conv_prim_run_with(e, n, which, ptrs, NULL);
}

/* Destroys what conv_prim_get handed over when it did not cache it. */
void conv_prim_release(prim_entry *e, bool owned) {
  if (owned) destroy_entry(e);
}

/* An image md's channel block (1: none). */
int64_t conv_inner_block(const dnnl_memory_desc_t *md) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  return md->format_kind == dnnl_blocked && b->inner_nblks == 1 && b->inner_idxs[0] == 1
             ? b->inner_blks[0]
             : 1;
}

/*
 * conv, conv_transpose, conv_grad_weight and the pools on the cpu backend
 * (f32, 1 to 3 spatial dims) through oneDNN primitives: convolution
 * forward (conv), backward data (conv_transpose: the weights [C, M/g, K]
 * are a convolution's [OC, IC/g, K] with OC the small side), backward
 * weights (conv_grad_weight) and pooling forward. Like the GEMM (gemm.c),
 * the work is cut into tasks sized by the shapes only (one image times a
 * block of channels or groups) and each task is one single-threaded
 * primitive run inside our own OpenMP loop, so results do not depend on
 * the thread count. conv_grad_weight sums its per-image products in image
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
 */
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/cpu_conv_post.h"
#include "runtime/cpu/dnnl_thread.h"
#include "runtime/cpu/gemm.h"

#include "ops/window.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 3      /* spatial dims oneDNN takes */
#define MIN_TASKS 8     /* blocks of channels: at least this many tasks per call, */
#define MIN_CHANNELS 64 /* while a block keeps this many channels (each block redoes im2col) */
#define MIN_CHANNELS_BLOCKED 32 /* the same for direct kernels on blocked layouts (no im2col) */

typedef enum prim_kind {
  P_FWD,
  P_BWD_DATA,
  P_BWD_WEIGHTS,
  P_MAX,
  P_AVG_EXCL,
  P_AVG_INCL
} prim_kind;

/* One primitive's geometry (N = 1; zero-filled so it compares bytewise). */
typedef struct prim_key {
  int64_t kind, k, groups, big_c, small_c;
  int64_t any; /* P_FWD: the first of layouts_tried with a fast kernel, else plain */
  int64_t big[MAX_DIMS], small[MAX_DIMS], kernel[MAX_DIMS], stride[MAX_DIMS], dil[MAX_DIMS];
  int64_t lo[MAX_DIMS], hi[MAX_DIMS]; /* hi: oneDNN's padding_r */
  /* P_FWD: weights scaled per output channel, a bias, and post-ops (kind,
   * alg, alpha and beta bits each): cpu_conv_post.h */
  int64_t scale, bias, n_post, post[LOOM_CONV_POST_MAX][4];
} prim_key;

/* A primitive and the layouts it takes: md[0] the big side, md[1] the
 * small side, md[2] the weights. With key.any (forward only) they are
 * the layouts it was made for, and the reorders move each that is not
 * plain between Loom's plain layout and it (NULL: plain). */
typedef struct prim_entry {
  prim_key key;
  dnnl_primitive_t prim; /* NULL: oneDNN has no implementation */
  size_t scratch;
  dnnl_memory_desc_t md[3];
  dnnl_primitive_t to_src, from_dst, to_wt;
} prim_entry;

#define CACHE_CAP 512
static prim_entry cache[CACHE_CAP];
static int32_t n_cached;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;

static void md_plain(dnnl_memory_desc_t *md, int32_t nd, const int64_t *dims) {
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
static void md_image(dnnl_memory_desc_t *md, int64_t c, int32_t k, const int64_t *sp) {
  int64_t dims[MAX_DIMS + 2] = {1, c};
  memcpy(dims + 2, sp, sizeof *sp * (size_t)k);
  md_plain(md, k + 2, dims);
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

static void md_weights(dnnl_memory_desc_t *md, const prim_key *p) {
  int64_t dims[MAX_DIMS + 3];
  md_plain(md, weight_dims(p, dims), dims);
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

static int64_t float_bits(float f) {
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
static void md_post_operand(dnnl_memory_desc_t *md, const prim_key *p, int64_t kind) {
  int64_t dims[MAX_DIMS + 2] = {1, p->small_c};
  for (int32_t d = 0; d < p->k; d++)
    dims[2 + d] = kind == LOOM_CONV_POST_CHANNEL ? 1 : p->small[d];
  md_plain(md, (int32_t)p->k + 2, dims);
}

/* p's post-ops into attr. */
static dnnl_status_t set_post_ops(dnnl_primitive_attr_t attr, const prim_key *p) {
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
      md_post_operand(&md, p, q[0]);
      st = dnnl_post_ops_append_binary(po, (dnnl_alg_kind_t)q[1], &md);
    }
  }
  if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
  dnnl_post_ops_destroy(po);
  return st;
}

/* p's primitive with images in `layout` (LAYOUT_PLAIN, LAYOUT_ANY or a
 * channel block; forward only) and, unless plain, weights as it picks;
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
  md_image(&big, p->big_c, k, p->big);
  md_image(&small, p->small_c, k, p->small);
  if (p->kind <= P_BWD_WEIGHTS) md_weights(&wt, p);
  md_plain(&bias, 1, &p->small_c);
  if (layout != LAYOUT_PLAIN) {
    int64_t dims[MAX_DIMS + 3] = {1, p->big_c};
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
  if (st == dnnl_success) st = set_post_ops(attr, p);
  if (st == dnnl_success && p->kind <= P_BWD_WEIGHTS) {
    dnnl_convolution_desc_t fwd, cd;
    st = dnnl_dilated_convolution_forward_desc_init(
        &fwd, p->kind == P_FWD ? dnnl_forward_inference : dnnl_forward_training,
        dnnl_convolution_direct, &big, &wt, p->bias ? &bias : NULL, &small, stride, dil, lo, hi);
    if (st == dnnl_success && p->kind == P_FWD) {
      st = dnnl_primitive_desc_create(&pd, &fwd, attr, engine, NULL);
      const char *impl = NULL;
      if (st == dnnl_success && layout != LAYOUT_PLAIN &&
          (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
           !impl || strncmp(impl, "ref", 3) == 0 || strstr(impl, "gemm")))
        st = dnnl_unimplemented;
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
  dnnl_primitive_t *all[4] = {&e->prim, &e->to_src, &e->from_dst, &e->to_wt};
  for (int32_t i = 0; i < 4; i++) {
    if (*all[i]) dnnl_primitive_destroy(*all[i]);
    *all[i] = NULL;
  }
}

/* e's primitive and layouts for e->key: plain ones, or with key.any
 * the first of layouts_tried that has a fast implementation, its weights
 * as it picks, and the reorders to and from plain (plain when none). */
static dnnl_status_t create_entry(prim_entry *e) {
  prim_key *p = &e->key;
  int32_t k = (int32_t)p->k;
  md_image(&e->md[0], p->big_c, k, p->big);
  md_image(&e->md[1], p->small_c, k, p->small);
  if (p->kind <= P_BWD_WEIGHTS) md_weights(&e->md[2], p);
  dnnl_primitive_desc_t pd = NULL;
  for (size_t i = 0; p->any && !pd && i < sizeof layouts_tried / sizeof *layouts_tried; i++)
    if (create(p, layouts_tried[i], &e->prim, &e->scratch, &pd) != dnnl_success) pd = NULL;
  /* weights scaled per output channel (grouped: [G, OC/G, ...]) */
  int wt_mask = p->scale ? (p->groups > 1 ? 3 : 1) : 0;
  if (!pd) {
    dnnl_status_t st = create(p, LAYOUT_PLAIN, &e->prim, &e->scratch, NULL);
    if (st == dnnl_success && wt_mask) st = create_reorder(&e->md[2], &e->md[2], wt_mask, &e->to_wt);
    return st;
  }
  const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *wt = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  dnnl_status_t st = create_reorder(&e->md[0], src, 0, &e->to_src);
  if (st == dnnl_success) st = create_reorder(dst, &e->md[1], 0, &e->from_dst);
  if (st == dnnl_success) st = create_reorder(&e->md[2], wt, wt_mask, &e->to_wt);
  e->md[0] = *src;
  e->md[1] = *dst;
  e->md[2] = *wt;
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* The cached primitive for p (created on first use, with oneDNN seeing one
 * thread, so its choices never depend on ours); NULL prim when oneDNN
 * cannot run p. *owned: the caller destroys it (the cache is full). */
static prim_entry get_prim(const prim_key *p, bool *owned) {
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
static bool run_reorder_scaled(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                               const dnnl_memory_desc_t *to, void *dst, const float *scales,
                               int64_t n_scales) {
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  dnnl_memory_t m[3] = {0};
  dnnl_memory_desc_t smd;
  md_plain(&smd, 1, &n_scales);
  bool ok = res &&
            dnnl_memory_create(&m[0], from, engine, (void *)src) == dnnl_success &&
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

static bool run_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                        const dnnl_memory_desc_t *to, void *dst) {
  return run_reorder_scaled(r, from, src, to, dst, NULL, 0);
}

/* The post-op operands and the bias after a run's first three args. */
#define MAX_ARGS (3 + 1 + LOOM_CONV_POST_MAX)

/* Runs e's primitive on one thread: args are (DNNL_ARG_*, pointer)
 * pairs; extra (NULL or one desc per arg past the first three): the
 * descs of the bias and post-op operands. */
static bool run_prim_with(const prim_entry *e, int32_t n, const int *which, void *const *ptrs,
                          const dnnl_memory_desc_t *extra) {
  loom_dnnl_thread *res = loom_dnnl_thread_get();
  void *scratch = res ? loom_dnnl_buffer(res, LOOM_DNNL_SCRATCH, e->scratch) : NULL;
  if (!scratch) return false;
  const dnnl_memory_desc_t *mds = e->md;
  dnnl_memory_desc_t smd;
  dnnl_dims_t sdim = {(int64_t)e->scratch};
  dnnl_memory_desc_init_by_tag(&smd, 1, sdim, dnnl_u8, dnnl_a);
  dnnl_exec_arg_t args[MAX_ARGS + 1];
  dnnl_memory_t mem[MAX_ARGS + 1] = {0};
  bool ok = n <= MAX_ARGS;
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
  for (int32_t i = 0; i < MAX_ARGS + 1; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  return ok;
}

static bool run_prim(const prim_entry *e, int32_t n, const int *which, void *const *ptrs) {
  return run_prim_with(e, n, which, ptrs, NULL);
}

/* ---- splitting the work ------------------------------------------------ */

/* Units (groups, or single channels with one group) per block: the whole
 * lot unless that leaves fewer than MIN_TASKS tasks over `images`, halved
 * while a block keeps MIN_CHANNELS channels (per_unit each). */
static int64_t block_units(int64_t units, int64_t per_unit, int64_t images, int64_t min_channels) {
  int64_t b = units;
  while (b > 1 && images * ((units + b - 1) / b) < MIN_TASKS &&
         (b + 1) / 2 * per_unit >= min_channels)
    b = (b + 1) / 2;
  return b;
}

/* The key's window from w (N = 1, channels filled in by the caller). */
static void key_window(prim_key *p, prim_kind kind, const loom_window *w) {
  memset(p, 0, sizeof *p);
  p->kind = kind;
  p->k = w->k;
  p->groups = 1;
  for (int32_t d = 0; d < w->k; d++) {
    p->big[d] = w->big[d];
    p->small[d] = w->small[d];
    p->kernel[d] = w->kernel[d];
    p->stride[d] = w->stride[d];
    p->dil[d] = w->dil[d];
    p->lo[d] = w->lo[d];
    /* oneDNN's padding_r: what the output size implies (ceil_mode's extra
     * positions included; never below 0) */
    int64_t span = w->dil[d] * (w->kernel[d] - 1) + 1;
    p->hi[d] = LOOM_MAX(0, (w->small[d] - 1) * w->stride[d] + span - w->big[d] - w->lo[d]);
  }
}

static loom_status window_of(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             loom_window *w) {
  int32_t k = in[0].rank - 2;
  const int64_t *kernel =
      n->op == LOOM_OP_CONV || n->op == LOOM_OP_CONV_TRANSPOSE ? in[1].shape + 2 : NULL;
  return loom_window_read(c->ctx, n, k, in[0].shape + 2, in[0].shape + 2, kernel, w);
}

/* Runs task(user, t) for t in [0, tasks) in our OpenMP loop (see the
 * top); false if a task failed. */
static bool run_tasks(const loom_cpu *c, int64_t tasks, bool parallel,
                      bool (*task)(const void *user, int64_t t), const void *user) {
  int failed = 0;
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
#pragma omp parallel for num_threads(c->nt) schedule(static) if (parallel && tasks > 1)
  for (int64_t t = 0; t < tasks; t++) {
    omp_set_num_threads(1);
    if (!task(user, t)) {
#pragma omp atomic write
      failed = 1;
    }
  }
  omp_set_num_threads(prev);
  return !failed;
}

/* Destroys what get_prim handed over when it did not cache it. */
static void release(prim_entry *e, bool owned) {
  if (owned) destroy_entry(e);
}

/* Runs p's primitive on one task's pointers. */
static bool run_key(const prim_key *p, int32_t n, const int *which, void *const *ptrs) {
  bool owned;
  prim_entry e = get_prim(p, &owned);
  bool ok = e.prim && run_prim(&e, n, which, ptrs);
  release(&e, owned);
  return ok;
}

/* The blocks of a conv op: units u of the side it splits, per_small /
 * per_big channels of each side per unit (0: the whole side in every
 * block), b units per block. */
typedef struct conv_split {
  loom_window w;
  int64_t batch, units, per_small, per_big, b, blocks, big_c, small_c, kn, bs, ss;
} conv_split;

static void split_conv(conv_split *s, int64_t batch, int64_t big_c, int64_t small_c, bool by_big,
                       int64_t min_channels) {
  const loom_window *w = &s->w;
  int64_t g = w->groups;
  s->batch = batch;
  s->big_c = big_c;
  s->small_c = small_c;
  s->kn = loom_window_kernel_numel(w);
  s->bs = loom_window_big_numel(w);
  s->ss = loom_window_small_numel(w);
  s->units = g > 1 ? g : by_big ? big_c : small_c;
  s->per_small = g > 1 ? small_c / g : by_big ? 0 : 1;
  s->per_big = g > 1 ? big_c / g : by_big ? 1 : 0;
  int64_t per = LOOM_MAX(s->per_small, s->per_big);
  s->b = block_units(s->units, per, by_big || s->per_small ? batch : 1, min_channels);
  s->blocks = (s->units + s->b - 1) / s->b;
}

/* Block blk's key: u0 its first unit, nu its units. */
static void block_key(const conv_split *s, prim_kind kind, int64_t blk, prim_key *p, int64_t *u0,
                      int64_t *nu) {
  *u0 = blk * s->b;
  *nu = LOOM_MIN(s->b, s->units - *u0);
  key_window(p, kind, &s->w);
  p->groups = s->w.groups > 1 ? *nu : 1;
  p->small_c = s->per_small ? *nu * s->per_small : s->small_c;
  p->big_c = s->per_big ? *nu * s->per_big : s->big_c;
}

static bool big_flops(const conv_split *s) {
  return 2.0 * (double)s->batch * (double)s->small_c * (double)(s->big_c / s->w.groups) *
             (double)s->kn * (double)s->ss >=
         1e6;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }
static int64_t lcm64(int64_t a, int64_t b) { return a / gcd64(a, b) * b; }

/* What a conv op's tasks read. */
typedef struct conv_job {
  conv_split s;
  const float *a, *b, *packed;
  float *out;
  const loom_gemm_epilogue *epi; /* conv: NULL or run on each task's rows */
  const loom_conv_post *post;    /* conv: NULL or the epilogue as post-ops (then no epi) */
  /* conv: any, primitives that pick their layouts; with one group, whole
   * (the whole conv's primitive) and xb, the input in its layout once for
   * every task whose primitive takes the same (x_bytes an image) */
  int64_t any, unit; /* unit: blocks are multiples of it */
  /* the whole conv's channel blocks (1: plain), and LOOM_CPU_*_BLOCKED:
   * the input and output are kept in them between window ops */
  int64_t in_block, out_block;
  int32_t layout;
  prim_entry whole;
  bool whole_owned;
  /* conv: the primitives of every block but the last, and of the last
   * (looked up once a call, not once a task) */
  prim_entry blk[2];
  bool blk_owned[2];
  char *xb;
  size_t x_bytes;
  const struct conv_wpack *wpack; /* conv: the weights packed for these blocks, or NULL */
} conv_job;


static loom_status conv_done(const loom_cpu *c, const loom_node *n, bool ok) {
  if (ok) return LOOM_STATUS_OK;
  return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "%s: a oneDNN primitive failed",
                    loom_op_name(n->op));
}

/* One image of the input into the shared copy. */
static bool input_layout_task(const void *user, int64_t img) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  dnnl_memory_desc_t plain;
  md_image(&plain, s->big_c, s->w.k, s->w.big);
  return run_reorder(j->whole.to_src, &plain, j->a + img * s->big_c * s->bs, &j->whole.md[0],
                     j->xb + (size_t)img * j->x_bytes);
}

/* An image md's channel block (1: none). */
static int64_t inner_block(const dnnl_memory_desc_t *md) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  return md->format_kind == dnnl_blocked && b->inner_nblks == 1 && b->inner_idxs[0] == 1
             ? b->inner_blks[0]
             : 1;
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
    p->post[i][2] = float_bits(o->alpha);
    p->post[i][3] = float_bits(o->beta);
  }
}

/* The weights of e's output channels from c0 into e's layout at dst,
 * with the post-ops' scale per output channel folded in. */
static bool reorder_weights(const conv_job *j, const prim_entry *e, int64_t c0, void *dst) {
  const conv_split *s = &j->s;
  dnnl_memory_desc_t plain;
  md_weights(&plain, &e->key);
  const float *scale = e->key.scale ? j->post->scale + c0 : NULL;
  return run_reorder_scaled(e->to_wt, &plain, j->b + c0 * (s->big_c / s->w.groups) * s->kn, &e->md[2],
                            dst, scale, e->key.small_c);
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
  md_image(&plain[0], e->key.big_c, (int32_t)e->key.k, e->key.big);
  md_image(&plain[1], e->key.small_c, (int32_t)e->key.k, e->key.small);
  md_weights(&plain[2], &e->key);
  if (j->layout & LOOM_CPU_IN_BLOCKED) { /* already in e's layout */
    if (inner_block(&e->md[0]) != j->in_block) return false;
  } else if (j->xb && dnnl_memory_desc_equal(&e->md[0], &j->whole.md[0])) {
    src = (const float *)(j->xb + (size_t)img * j->x_bytes);
  } else if (e->to_src) {
    void *buf = loom_dnnl_buffer(res, LOOM_DNNL_SRC, dnnl_memory_desc_get_size(&e->md[0]));
    if (!buf || !run_reorder(e->to_src, &plain[0], src, &e->md[0], buf)) return false;
    src = buf;
  }
  if (packed_wt) {
    wt = packed_wt;
  } else if (e->to_wt) {
    void *buf = loom_dnnl_buffer(res, LOOM_DNNL_WEIGHTS, dnnl_memory_desc_get_size(&e->md[2]));
    if (!buf || !reorder_weights(j, e, c0, buf)) return false;
    wt = buf;
  }
  bool out_blocked = j->layout & LOOM_CPU_OUT_BLOCKED;
  if (out_blocked && inner_block(&e->md[1]) != j->out_block) return false;
  if (e->from_dst && !out_blocked) {
    dst = loom_dnnl_buffer(res, LOOM_DNNL_DST, dnnl_memory_desc_get_size(&e->md[1]));
    if (!dst) return false;
  }
  void *ptrs[MAX_ARGS] = {(void *)src, (void *)wt, dst};
  int which[2 * MAX_ARGS] = {0, DNNL_ARG_SRC, 2, DNNL_ARG_WEIGHTS, 1, DNNL_ARG_DST};
  dnnl_memory_desc_t extra[MAX_ARGS];
  int32_t n = 3;
  if (e->key.bias) {
    md_plain(&extra[n - 3], 1, &e->key.small_c);
    which[2 * n + 1] = DNNL_ARG_BIAS;
    ptrs[n++] = post->bias + c0;
  }
  for (int32_t i = 0; i < e->key.n_post; i++) {
    const loom_conv_post_op *o = &post->op[i];
    if (o->kind == LOOM_CONV_POST_ELTWISE) continue;
    md_post_operand(&extra[n - 3], &e->key, o->kind);
    which[2 * n + 1] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1;
    ptrs[n++] = o->kind == LOOM_CONV_POST_CHANNEL ? (void *)(o->chan + c0)
                                                  : (void *)(o->tensor + (out - post->out));
  }
  return run_prim_with(e, n, which, ptrs, extra) &&
         (!e->from_dst || out_blocked || run_reorder(e->from_dst, &e->md[1], dst, &plain[1], out));
}

/*
 * A conv's weights reordered (and scaled) once for its blocks, kept in
 * its node's pack slot (cpu.h, loom_cpu_packs) while the weights are
 * constant. It remembers what it was made from (the weights' address, the
 * blocks' layouts, the scale's values) and is remade when any differs,
 * so a pack describes exactly the reorders a run would do.
 */
typedef struct conv_wpack {
  const float *w;
  dnnl_memory_desc_t md[2]; /* the weights' layouts: every block but the last, the last */
  int64_t b, blocks, n_scale;
  float *scale; /* the scale folded in (n_scale values), or NULL */
  size_t stride; /* bytes a block but the last takes */
  char *data;
} conv_wpack;

static void wpack_free(void *data) {
  conv_wpack *pk = data;
  free(pk->scale);
  free(pk->data);
  free(pk);
}

static const float *wpack_block(const conv_wpack *pk, int64_t blk) {
  return (const float *)(pk->data + (size_t)blk * pk->stride);
}

static bool wpack_task(const void *user, int64_t blk) {
  const conv_job *j = user;
  const prim_entry *e = &j->blk[blk == j->s.blocks - 1];
  return reorder_weights(j, e, blk * j->s.b * j->s.per_small, (void *)wpack_block(j->wpack, blk));
}

static bool wpack_fits(const conv_wpack *pk, const conv_job *j) {
  const loom_conv_post *post = j->post;
  bool scaled = j->blk[1].key.scale != 0;
  return pk->w == j->b && pk->b == j->s.b && pk->blocks == j->s.blocks &&
         dnnl_memory_desc_equal(&pk->md[0], &j->blk[0].md[2]) &&
         dnnl_memory_desc_equal(&pk->md[1], &j->blk[1].md[2]) && (pk->scale != NULL) == scaled &&
         (!scaled || (pk->n_scale == j->s.small_c &&
                      !memcmp(pk->scale, post->scale, sizeof(float) * (size_t)pk->n_scale)));
}

/* Sets j->wpack for conv node n when its weights are constant and its
 * blocks reorder them: the pack in n's slot, made (again) where it does
 * not fit j. Nothing packed is no error: the tasks then reorder. */
static loom_status conv_wpack_get(const loom_cpu *c, const loom_node *n, conv_job *j) {
  const conv_split *s = &j->s;
  loom_cpu_pack *slot = loom_cpu_packs_slot(c, n);
  if (!slot || !loom_cpu_packs_constant(c, n, 1) || s->batch <= 0 || !j->blk[0].prim ||
      !j->blk[1].prim || !j->blk[0].to_wt || !j->blk[1].to_wt)
    return LOOM_STATUS_OK;
  if (slot->data && wpack_fits(slot->data, j)) {
    j->wpack = slot->data;
    return LOOM_STATUS_OK;
  }
  loom_cpu_pack_clear(slot);
  conv_wpack *pk = loom_calloc(c->ctx, 1, sizeof *pk);
  if (!pk) return LOOM_STATUS_OUT_OF_MEMORY;
  pk->w = j->b;
  pk->b = s->b;
  pk->blocks = s->blocks;
  pk->md[0] = j->blk[0].md[2];
  pk->md[1] = j->blk[1].md[2];
  pk->stride = (dnnl_memory_desc_get_size(&pk->md[0]) + 63) / 64 * 64;
  size_t bytes = pk->stride * (size_t)(s->blocks - 1) + dnnl_memory_desc_get_size(&pk->md[1]);
  pk->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (j->blk[1].key.scale) {
    pk->n_scale = s->small_c;
    pk->scale = loom_malloc(c->ctx, sizeof(float) * (size_t)s->small_c);
    if (pk->scale) memcpy(pk->scale, j->post->scale, sizeof(float) * (size_t)s->small_c);
  }
  if (!pk->data || (j->blk[1].key.scale && !pk->scale)) {
    wpack_free(pk);
    return loom_error(c->ctx, LOOM_STATUS_OUT_OF_MEMORY, "conv: packing its weights");
  }
  j->wpack = pk;
  if (!run_tasks(c, s->blocks, big_flops(s), wpack_task, j)) {
    j->wpack = NULL;
    wpack_free(pk);
    return conv_done(c, n, false);
  }
  *slot = (loom_cpu_pack){pk, (int64_t)bytes, wpack_free};
  return LOOM_STATUS_OK;
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
  const float *packed_wt = j->wpack ? wpack_block(j->wpack, blk) : NULL;
  bool ok = conv_block(j, &j->blk[blk == s->blocks - 1], img, u0, u0 * sc, packed_wt);
  const loom_gemm_epilogue *epi = j->epi;
  if (!ok || !epi) return ok;
  /* the task's output, [nu * sc] channels of image img, is whole rows of
   * the last dim, ending on planes (which end on the kernel's rows) */
  int64_t cols = s->w.small[s->w.k - 1];
  if (cols <= 0) return true;
  int64_t r0 = (img * s->small_c + u0 * sc) * s->ss / cols, r1 = r0 + nu * sc * s->ss / cols;
  for (int64_t r = r0; r < r1; r += epi->rows)
    epi->fn(epi->user, omp_get_thread_num(), r, LOOM_MIN(r + epi->rows, r1));
  return true;
}

/* Cuts s into blocks of whole epilogue blocks (epi: NULL or its rows):
 * each image's rows are cut into blocks of epi->rows (aligned to the
 * kernel's rows, as is the image's end), so a block of channels must span
 * a multiple of them. */
static void align_blocks(conv_split *s, const loom_gemm_epilogue *epi, int64_t unit) {
  int64_t plane_rows = s->w.k > 1 ? s->ss / s->w.small[s->w.k - 1] : 1, q = unit;
  if (epi && plane_rows > 0) q = lcm64(q, epi->rows / gcd64(epi->rows, plane_rows * s->per_small));
  s->b = LOOM_MIN((s->b + q - 1) / q * q, s->units);
  s->blocks = (s->units + s->b - 1) / s->b;
}

/* Whether the whole conv (key p) runs with j's post-ops on the layouts
 * it takes without them (a post-op that only a slower kernel supports is
 * left to the epilogue on rows). */
static bool post_fits(const conv_job *j, const prim_key *p) {
  const prim_entry *w = &j->whole;
  bool fast = w->prim && (w->to_src || w->from_dst), owned;
  prim_key q = *p;
  key_post(&q, j->post);
  q.any = fast;
  prim_entry e = get_prim(&q, &owned);
  bool ok = e.prim && (!fast || (dnnl_memory_desc_equal(&e.md[0], &w->md[0]) &&
                                 dnnl_memory_desc_equal(&e.md[1], &w->md[1])));
  release(&e, owned);
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
  block_key(&whole, P_FWD, 0, &p, &u0, &nu);
  p.any = 1;
  j->whole = get_prim(&p, &j->whole_owned);
  if (j->post && !post_fits(j, &p)) j->post = NULL;
  const prim_entry *e = &j->whole;
  if (!e->prim || (!e->to_src && !e->from_dst)) return;
  j->any = 1;
  j->in_block = inner_block(&e->md[0]);
  j->out_block = inner_block(&e->md[1]);
  split_conv(s, s->batch, s->big_c, s->small_c, false, MIN_CHANNELS_BLOCKED);
  /* blocks start on whole channel blocks of the sides they cut (one
   * group: the output; depthwise: both), so no task pads a block */
  int64_t b0 = inner_block(&e->md[0]), b1 = inner_block(&e->md[1]);
  if (s->w.groups == 1)
    j->unit = b1;
  else if (s->per_big == 1 && s->per_small == 1)
    j->unit = lcm64(b0, b1);
}

/* The whole input in the whole conv's layout, for its blocks. */
static bool shared_input(const loom_cpu *c, conv_job *j) {
  const conv_split *s = &j->s;
  if (!j->any || s->w.groups != 1 || s->blocks == 1 || !j->whole.prim || !j->whole.to_src ||
      (j->layout & LOOM_CPU_IN_BLOCKED))
    return true;
  j->x_bytes = (dnnl_memory_desc_get_size(&j->whole.md[0]) + 63) / 64 * 64;
  j->xb = loom_malloc(c->ctx, j->x_bytes * (size_t)s->batch);
  return j->xb && run_tasks(c, s->batch, s->batch > 1, input_layout_task, j);
}

/* j planned for conv node n on inputs of in's shapes (the data is not
 * read): its window, blocks, post-ops (post, translated by the caller, or
 * NULL) and layouts. */
static loom_status plan_conv(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_conv_post *post, conv_job *j) {
  LOOM_TRY(window_of(c, n, in, &j->s.w));
  conv_split *s = &j->s;
  split_conv(s, in[0].shape[0], in[0].shape[1], in[1].shape[0], false, MIN_CHANNELS);
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
  for (int32_t d = 2; d < out->rank; d++) plane *= out->shape[d];
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
            (!(j.layout & LOOM_CPU_OUT_BLOCKED) || (j.out_block > 1 && !j.epi));
  for (int32_t i = 0; ok && i < 2; i++) { /* the first block's, the last's */
    prim_key p;
    int64_t u0, nu;
    block_key(&j.s, P_FWD, i ? j.s.blocks - 1 : 0, &p, &u0, &nu);
    p.any = j.any;
    key_post(&p, j.post);
    j.blk[i] = get_prim(&p, &j.blk_owned[i]);
  }
  if (ok && !st) st = conv_wpack_get(c, n, &j);
  ok = ok && !st && shared_input(c, &j) &&
       run_tasks(c, j.s.batch * j.s.blocks, big_flops(&j.s), conv_task, &j);
  free(j.xb);
  release(&j.whole, j.whole_owned);
  for (int32_t i = 0; i < 2; i++) release(&j.blk[i], j.blk_owned[i]);
  if (has_post) loom_conv_post_free(&post);
  return st ? st : conv_done(c, n, ok);
}

static loom_status k_conv(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out) {
  return loom_cpu_conv(c, n, in, out, NULL);
}

/* conv_transpose: x small [N, C, O], w [C, M/g, K] -> big [N, M, S];
 * tasks: image x block of output channels. With one group a block's
 * weights are a slice of w's second dim: packed first, block by block. */
static bool conv_transpose_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t img = t / s->blocks, u0, nu;
  prim_key p;
  block_key(s, P_BWD_DATA, t % s->blocks, &p, &u0, &nu);
  /* grouped: a block's weights are contiguous; packed: they start at the
   * block's first unit times every small channel */
  const float *wb = j->packed ? j->packed + u0 * s->small_c * s->kn
                              : j->b + u0 * s->per_small * s->per_big * s->kn;
  void *ptrs[3] = {(void *)(j->a + (img * s->small_c + u0 * s->per_small) * s->ss), (void *)wb,
                   j->out + (img * s->big_c + u0 * s->per_big) * s->bs};
  static const int which[6] = {1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_WEIGHTS, 0, DNNL_ARG_DIFF_SRC};
  return run_key(&p, 3, which, ptrs);
}

static loom_status k_conv_transpose(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                    const loom_view *out) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data};
  conv_split *s = &j.s;
  LOOM_TRY(window_of(c, n, in, &s->w));
  split_conv(s, in[0].shape[0], in[1].shape[1] * s->w.groups, in[0].shape[1], true,
             MIN_CHANNELS);
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
  bool ok = run_tasks(c, s->batch * s->blocks, big_flops(s), conv_transpose_task, &j);
  free(packed);
  return conv_done(c, n, ok);
}

/* conv_grad_weight: x big [N, C, S], dy small [N, M, O] -> dw [M, C/g, K];
 * tasks: blocks of output channels, each summing its images in order. */
static bool grad_weight_task(const void *user, int64_t t) {
  const conv_job *j = user;
  const conv_split *s = &j->s;
  int64_t u0, nu, sc = s->per_small, cg = s->big_c / s->w.groups;
  prim_key p;
  block_key(s, P_BWD_WEIGHTS, t, &p, &u0, &nu);
  bool owned;
  prim_entry e = get_prim(&p, &owned);
  int64_t len = nu * sc * cg * s->kn;
  float *dst = j->out + u0 * sc * cg * s->kn;
  float *part = s->batch > 1 ? malloc(sizeof(float) * (size_t)len) : NULL;
  bool ok = e.prim && (s->batch == 1 || part);
  static const int which[6] = {0, DNNL_ARG_SRC, 1, DNNL_ARG_DIFF_DST, 2, DNNL_ARG_DIFF_WEIGHTS};
  for (int64_t img = 0; img < s->batch && ok; img++) {
    void *ptrs[3] = {(void *)(j->a + (img * s->big_c + u0 * s->per_big) * s->bs),
                     (void *)(j->b + (img * s->small_c + u0 * sc) * s->ss), img ? part : dst};
    ok = run_prim(&e, 3, which, ptrs);
    for (int64_t i = 0; ok && img && i < len; i++)
      dst[i] += part[i];
  }
  free(part);
  release(&e, owned);
  return ok;
}

static loom_status k_conv_grad_weight(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                      const loom_view *out) {
  conv_job j = {.a = in[0].data, .b = in[1].data, .out = out[0].data};
  conv_split *s = &j.s;
  LOOM_TRY(window_of(c, n, in, &s->w));
  split_conv(s, in[0].shape[0], in[0].shape[1], in[1].shape[1], false, MIN_CHANNELS);
  if (s->batch == 0) {
    memset(j.out, 0, sizeof(float) * (size_t)loom_view_numel(&out[0]));
    return LOOM_STATUS_OK;
  }
  return conv_done(c, n, run_tasks(c, s->blocks, big_flops(s), grad_weight_task, &j));
}

/* ---- pools ------------------------------------------------------------- */

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
  prim_key whole; /* any: in channel blocks (the input or output kept in them) */
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
  md_image(&plain[0], nc, j->w.k, j->w.big);
  md_image(&plain[1], nc, j->w.k, j->w.small);
  bool ok = true;
  if (!e.prim && !p.any) {
    for (int64_t pl = pl0; pl < pl0 + nc; pl++)
      pool_plane(&j->w, j->op, j->x + pl * j->bs, NULL, j->y + pl * j->ss);
  } else if (!e.prim || !res || (p.any && inner_block(&e.md[0]) != j->block)) {
    ok = false;
  } else {
    if (e.to_src && !(j->layout & LOOM_CPU_IN_BLOCKED)) {
      void *buf = loom_dnnl_buffer(res, LOOM_DNNL_SRC, dnnl_memory_desc_get_size(&e.md[0]));
      ok = buf && run_reorder(e.to_src, &plain[0], x, &e.md[0], buf);
      x = buf;
    }
    if (e.from_dst && !(j->layout & LOOM_CPU_OUT_BLOCKED))
      ok = ok && (dst = loom_dnnl_buffer(res, LOOM_DNNL_DST, dnnl_memory_desc_get_size(&e.md[1])));
    void *ptrs[2] = {(void *)x, dst};
    static const int which[4] = {0, DNNL_ARG_SRC, 1, DNNL_ARG_DST};
    ok = ok && run_prim(&e, 2, which, ptrs) &&
         (dst == y || run_reorder(e.from_dst, &e.md[1], dst, &plain[1], y));
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
  LOOM_TRY(window_of(c, n, in, &j->w));
  bool grad = n->op == LOOM_OP_MAX_POOL_GRAD || n->op == LOOM_OP_AVG_POOL_GRAD;
  int64_t batch = in[0].shape[0];
  j->ch = in[0].shape[1];
  j->bs = loom_window_big_numel(&j->w);
  j->ss = loom_window_small_numel(&j->w);
  prim_kind kind = n->op == LOOM_OP_MAX_POOL ? P_MAX : j->w.include_pad ? P_AVG_INCL : P_AVG_EXCL;
  bool use_dnnl = !grad && j->w.k <= MAX_DIMS;
  key_window(&j->whole, kind, &j->w);
  /* include_pad: oneDNN divides by the kernel's size, right only when no
   * window runs past the explicit padding */
  for (int32_t d = 0; d < j->w.k && use_dnnl; d++)
    use_dnnl = kind != P_AVG_INCL || j->whole.hi[d] <= j->w.hi[d];
  *dnnl = use_dnnl;
  j->block = 1;
  j->b = block_units(j->ch, 1, batch, MIN_CHANNELS);
  if (use_dnnl && layout) { /* the whole pool's blocks; tasks cut on them */
    prim_key p = j->whole;
    p.big_c = p.small_c = j->ch;
    p.any = 1;
    bool owned;
    prim_entry e = get_prim(&p, &owned);
    if (e.prim) j->block = inner_block(&e.md[0]);
    release(&e, owned);
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
    run_tasks(c, planes, parallel, plane_task, &j);
    return LOOM_STATUS_OK;
  }
  for (int32_t i = 0; i < 2; i++) { /* the first block's, the last's */
    prim_key p = j.whole;
    p.big_c = p.small_c = LOOM_MIN(j.b, j.ch - (i ? j.blocks - 1 : 0) * j.b);
    j.blk[i] = get_prim(&p, &j.blk_owned[i]);
  }
  bool ok = run_tasks(c, batch * j.blocks, parallel, pool_task, &j);
  for (int32_t i = 0; i < 2; i++) release(&j.blk[i], j.blk_owned[i]);
  return conv_done(c, n, ok);
}

/* Pools through oneDNN where it computes what the op means, else, and for
 * the gradients, plane loops. */
static loom_status k_pool(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out) {
  return loom_cpu_pool(c, n, in, out, 0);
}

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
  for (int32_t i = 0; i < 2; i++) shape_view(&in[i], loom_value_type(g, n->in[LOOM_MIN(i, n->n_in - 1)]));
  shape_view(&out, loom_value_type(g, n->out[0]));
  loom_cpu c = {.ctx = ctx, .nt = 1};
  if (n->op == LOOM_OP_CONV && n->n_in == 2) {
    conv_job j = {.unit = 1};
    if (epi && epi->rows.rows > 0) j.epi = &epi->rows;
    loom_conv_post post;
    bool has_post = j.epi && conv_post(epi, NULL, in, &out, &post);
    if (plan_conv(&c, n, in, has_post ? &post : NULL, &j) == LOOM_STATUS_OK && j.any) {
      *in_block = j.in_block;
      if (!j.epi) *out_block = j.out_block;
    }
    release(&j.whole, j.whole_owned);
    if (has_post) loom_conv_post_free(&post);
  } else if (n->op == LOOM_OP_MAX_POOL || n->op == LOOM_OP_AVG_POOL) {
    pool_job j = {0};
    bool dnnl;
    if (plan_pool(&c, n, in, 1, &j, &dnnl) == LOOM_STATUS_OK && dnnl)
      *in_block = *out_block = j.block;
  }
}

loom_cpu_kernel loom_cpu_conv_kernel(const loom_graph *g, const loom_node *n) {
  for (int32_t i = 0; i < n->n_in; i++)
    if (g->values[n->in[i]].type.dtype != LOOM_DTYPE_F32) return NULL;
  const loom_type *x = &g->values[n->in[0]].type;
  bool dnnl_dims = x->rank >= 3 && x->rank <= MAX_DIMS + 2;
  switch (n->op) {
  case LOOM_OP_CONV: return dnnl_dims ? k_conv : NULL;
  case LOOM_OP_CONV_TRANSPOSE: return dnnl_dims ? k_conv_transpose : NULL;
  case LOOM_OP_CONV_GRAD_WEIGHT: return dnnl_dims ? k_conv_grad_weight : NULL;
  case LOOM_OP_MAX_POOL:
  case LOOM_OP_AVG_POOL:
  case LOOM_OP_MAX_POOL_GRAD:
  case LOOM_OP_AVG_POOL_GRAD: return k_pool;
  default: return NULL;
  }
}

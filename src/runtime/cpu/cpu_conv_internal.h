/*
 * What the window ops' files share (cpu_conv.c says how they fit):
 * cpu_conv_prim.c (oneDNN primitives by geometry, their layouts, running
 * them and reorders on one thread), cpu_conv_tasks.c (cutting an op into
 * tasks sized by the shapes, and running them in our OpenMP loop),
 * cpu_conv_forward.c, cpu_conv_wpack.c (a conv's weights packed once),
 * cpu_conv_backward.c and cpu_conv_pool.c. Not part of the backend's
 * interface: cpu.h is.
 */
#ifndef LOOM_RUNTIME_CPU_CONV_INTERNAL_H
#define LOOM_RUNTIME_CPU_CONV_INTERNAL_H

#include "ops/window.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/cpu_conv_post.h"

#include <dnnl.h>
#include <stdbool.h>
#include <stdint.h>

#define CONV_MAX_DIMS 3      /* spatial dims oneDNN takes */
#define CONV_MIN_TASKS 8     /* blocks of channels: at least this many tasks per call, */
#define CONV_MIN_CHANNELS 64 /* while a block keeps this many channels (each block redoes im2col)  \
                              */
#define CONV_MIN_CHANNELS_BLOCKED                                                                  \
  32 /* the same for direct kernels on blocked layouts (no im2col) */
/* ... and where a block's work shares no input with the others' (depthwise
 * convs) or the input is thinner than a channel block (a stem on RGB
 * images): one channel block, so that small convs still split over two
 * threads. Pools keep CONV_MIN_CHANNELS: a ResNet's max_pool (25 us) gains
 * less from a second thread than a parallel region costs on a busy machine. */
#define CONV_MIN_CHANNELS_THIN 16

/* ---- primitives (cpu_conv_prim.c) ---------------------------------------- */

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
  int64_t any; /* the first of the layouts tried with a fast kernel, else plain */
  int64_t big[CONV_MAX_DIMS], small[CONV_MAX_DIMS], kernel[CONV_MAX_DIMS], stride[CONV_MAX_DIMS],
      dil[CONV_MAX_DIMS];
  int64_t lo[CONV_MAX_DIMS], hi[CONV_MAX_DIMS]; /* hi: oneDNN's padding_r */
  /* P_FWD: weights scaled per output channel, a bias, and post-ops (kind,
   * alg, alpha and beta bits each): cpu_conv_post.h */
  int64_t scale, bias, n_post, post[LOOM_CONV_POST_MAX][4];
} prim_key;

/* A primitive and the layouts it takes: md[0] the big side, md[1] the
 * small side, md[2] the weights. With key.any they are the layouts it was
 * made for, and the reorders move each that is not plain between Loom's
 * plain layout and it (NULL: plain): to[i] an operand the primitive reads
 * (forward: the image and the weights, scaled per output channel with
 * key.scale; backward data: the small side's gradient and the weights;
 * backward weights: both images), from[i] the one it writes; a tensor
 * post-op operand takes md[1]. */
typedef struct prim_entry {
  prim_key key;
  dnnl_primitive_t prim; /* NULL: oneDNN has no implementation */
  size_t scratch;
  dnnl_memory_desc_t md[3];
  dnnl_primitive_t to[3], from[3];
  dnnl_primitive_t to_post; /* a plain tensor post-op operand into md[1] (NULL: plain) */
} prim_entry;

/* Plain (row-major) f32 layouts: dims; an image [1, c, spatial...]; p's
 * weights [OC, IC, K...] or, grouped, [G, OC/G, IC/G, K...]; a post-op's
 * second operand of kind (cpu_conv_post.h), per channel [1, c, 1...] or a
 * tensor [1, c, spatial...] of p's output channels. */
void conv_md_plain(dnnl_memory_desc_t *md, int32_t nd, const int64_t *dims);
void conv_md_image(dnnl_memory_desc_t *md, int64_t c, int32_t k, const int64_t *sp);
void conv_md_weights(dnnl_memory_desc_t *md, const prim_key *p);
void conv_md_post_operand(dnnl_memory_desc_t *md, const prim_key *p, int64_t kind);
/* An image md's channel block (1: none). */
int64_t conv_inner_block(const dnnl_memory_desc_t *md);
/* A float's bits, as a key holds a post-op's alpha and beta. */
int64_t conv_float_bits(float f);

/* The cached primitive for p (created on first use, with oneDNN seeing one
 * thread, so its choices never depend on ours); NULL prim when oneDNN
 * cannot run p. *owned: the caller releases it (the cache is full). */
prim_entry conv_prim_get(const prim_key *p, bool *owned);
/* Destroys what conv_prim_get handed over when it did not cache it. */
void conv_prim_release(prim_entry *e, bool owned);

/* The post-op operands and the bias after a run's first three args. */
#define CONV_MAX_ARGS (3 + 1 + LOOM_CONV_POST_MAX)
/* Runs e's primitive on one thread: which holds (md index: 0 big, 1 small,
 * 2 weights; DNNL_ARG_*) pairs, ptrs the pointers; extra (NULL or one desc
 * per arg past the first three): the descs of the bias and post-op
 * operands. */
bool conv_prim_run_with(const prim_entry *e, int32_t n, const int *which, void *const *ptrs,
                        const dnnl_memory_desc_t *extra);
bool conv_prim_run(const prim_entry *e, int32_t n, const int *which, void *const *ptrs);
/* Runs reorder r from src to dst on this thread's stream; scales: NULL,
 * or the n_scales values it multiplies by. */
bool conv_reorder_scaled(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                         const dnnl_memory_desc_t *to, void *dst, const float *scales,
                         int64_t n_scales);
bool conv_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from, const void *src,
                  const dnnl_memory_desc_t *to, void *dst);

/* ---- tasks (cpu_conv_tasks.c) -------------------------------------------- */

/* Units (groups, or single channels with one group) per block: the whole
 * lot unless that leaves fewer than CONV_MIN_TASKS tasks over `images`,
 * halved while a block keeps min_channels channels (per_unit each). */
int64_t conv_block_units(int64_t units, int64_t per_unit, int64_t images, int64_t min_channels);
/* The key's window from w (N = 1, channels filled in by the caller). */
void conv_key_window(prim_key *p, prim_kind kind, const loom_window *w);
/* Window node n's window on inputs of in's shapes. */
loom_status conv_window_of(const loom_cpu *c, const loom_node *n, const loom_view *in,
                           loom_window *w);
/* Runs task(user, t) for t in [0, tasks), each task one single-threaded
 * primitive run, so results do not depend on the thread count: on the
 * caller and c->nt - 1 helper threads when parallel, else in order on the
 * caller; false if a task failed. */
bool conv_run_tasks(const loom_cpu *c, int64_t tasks, bool parallel,
                    bool (*task)(const void *user, int64_t t), const void *user);
bool conv_run_inline(int64_t tasks, bool (*task)(const void *user, int64_t t), const void *user);
/* cpu_conv_workers.c: the caller takes tasks too and waits only for those
 * a helper took (one that wakes late finds none and delays nothing); in
 * order on the caller inside an OpenMP region or while another op's tasks
 * hold the helpers. */
bool conv_run_workers(int32_t threads, int64_t tasks, bool (*task)(const void *user, int64_t t),
                      const void *user);
/* The running task's thread in [0, threads): 0 the caller (or, inside an
 * OpenMP region, its thread number), k + 1 helper k; indexes per-thread
 * scratch such as an epilogue's. */
int32_t conv_worker_index(void);
/* OK, or n's error when a oneDNN primitive failed (!ok). */
loom_status conv_status(const loom_cpu *c, const loom_node *n, bool ok);

/* The blocks of a conv op: units u of the side it splits, per_small /
 * per_big channels of each side per unit (0: the whole side in every
 * block), b units per block. */
typedef struct conv_split {
  loom_window w;
  int64_t batch, units, per_small, per_big, b, blocks, big_c, small_c, kn, bs, ss;
} conv_split;

/* s (its window set) cut by the big side (by_big) or the small one. */
void conv_split_make(conv_split *s, int64_t batch, int64_t big_c, int64_t small_c, bool by_big,
                     int64_t min_channels);
/* Block blk's key: u0 its first unit, nu its units. */
void conv_block_key(const conv_split *s, prim_kind kind, int64_t blk, prim_key *p, int64_t *u0,
                    int64_t *nu);
/* Whether s is worth running in parallel. */
bool conv_big_flops(const conv_split *s);
int64_t conv_gcd(int64_t a, int64_t b);
int64_t conv_lcm(int64_t a, int64_t b);

/* ---- a conv op's job ----------------------------------------------------- */

struct conv_wpack;

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

/* ---- the forward conv's weights packed (cpu_conv_wpack.c) ---------------- */

/* The weights of e's output channels from c0 into e's layout at dst,
 * with the post-ops' scale per output channel folded in. */
bool conv_reorder_weights(const conv_job *j, const prim_entry *e, int64_t c0, void *dst);
/* Sets j->wpack for conv node n when its weights are constant and its
 * blocks reorder them. Nothing packed is no error: the tasks then reorder. */
loom_status conv_wpack_get(const loom_cpu *c, const loom_node *n, conv_job *j);
/* Block blk's weights in a pack. */
const float *conv_wpack_block(const struct conv_wpack *pk, int64_t blk);

/* ---- the kernels, and the planners loom_cpu_window_blocks asks ----------- */

loom_status conv_forward_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                const loom_view *out);
loom_status conv_transpose_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                  const loom_view *out);
loom_status conv_grad_weight_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                    const loom_view *out);
loom_status conv_pool_kernel(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_view *out);
/* The channel blocks of conv node n (with epi) or forward pool node n on
 * inputs of in's shapes, as loom_cpu_window_blocks gives them. */
void conv_forward_blocks(const loom_cpu *c, const loom_node *n, const loom_view *in,
                         const loom_view *out, const loom_conv_epilogue *epi, int64_t *in_block,
                         int64_t *out_block);
void conv_pool_blocks(const loom_cpu *c, const loom_node *n, const loom_view *in, int64_t *in_block,
                      int64_t *out_block);

#endif

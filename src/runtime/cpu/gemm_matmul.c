/* GEMM tiles on oneDNN's matmul primitive (gemm_matmul.h). */
#include "runtime/cpu/gemm_matmul.h"

#include "runtime/cpu/dnnl_thread.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

/* What a tile's primitive depends on (no padding: compared bytewise). */
typedef struct tile_key {
  int64_t m, n, k, lda, ldb, ldc;
  int32_t trans_a, trans_b;
  int32_t packed; /* B in the primitive's own layout (weights format `any`) */
  int32_t unused; /* zero: keeps the key free of padding */
} tile_key;

struct loom_gemm_tile_prim {
  tile_key key;
  dnnl_primitive_t prim; /* NULL: no fast primitive for this key */
  dnnl_memory_desc_t a, b, c;
  dnnl_memory_desc_t b_strided; /* packed: B as stored, what packing reads */
  size_t scratch;
};

/* Kept for the process: a product has at most four tile shapes (full and
 * tails), a model a few dozen products. When full, new shapes use sgemm. */
#define TILE_CACHE 256
static loom_gemm_tile_prim cache[TILE_CACHE];
static int32_t n_cached;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;

/* A [rows, cols] f32 matrix with row stride ld, stored transposed if t. */
static void md_matrix(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, bool t) {
  dnnl_dims_t d = {rows, cols}, s = {t ? 1 : ld, t ? ld : 1};
  dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_f32, s);
}

static void create(loom_gemm_tile_prim *e) {
  const tile_key *k = &e->key;
  md_matrix(&e->a, k->m, k->k, k->lda, k->trans_a);
  md_matrix(&e->b, k->k, k->n, k->ldb, k->trans_b);
  e->b_strided = e->b;
  if (k->packed) {
    dnnl_dims_t d = {k->k, k->n};
    dnnl_memory_desc_init_by_tag(&e->b, 2, d, dnnl_f32, dnnl_format_tag_any);
  }
  /* oneDNN 2.6's brgemm matmul writes only a dense C: a narrower tile is
   * computed into the thread's buffer and copied out (m x n floats, in
   * cache, against 2 m n k flops) */
  md_matrix(&e->c, k->m, k->n, k->n, false);
  dnnl_matmul_desc_t md;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t st = dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c);
  if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success)
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
  /* only the blocked kernels: oneDNN's reference matmul is far slower */
  const char *impl = NULL;
  if (st == dnnl_success &&
      (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
       strncmp(impl, "brg", 3) != 0))
    st = dnnl_unimplemented;
  /* the layout the primitive picked for a packed B */
  if (st == dnnl_success && k->packed) e->b = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  if (st == dnnl_success) {
    e->scratch =
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) e->prim = NULL;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
}

const loom_gemm_tile_prim *loom_gemm_tile_prim_get(const loom_gemm *p, int64_t m, int64_t n,
                                                   bool packed_b) {
  tile_key key = {.packed = packed_b,
                  .m = m,
                  .n = n,
                  .k = p->k,
                  .lda = p->lda,
                  .ldb = p->ldb,
                  .ldc = p->ldc,
                  .trans_a = p->trans_a,
                  .trans_b = p->trans_b};
  const loom_gemm_tile_prim *found = NULL;
  pthread_mutex_lock(&lock);
  for (int32_t i = 0; i < n_cached && !found; i++)
    if (memcmp(&cache[i].key, &key, sizeof key) == 0) found = &cache[i];
  if (!found && n_cached < TILE_CACHE) {
    /* made for one thread: its blocking must not follow the thread count */
    int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    if (!engine) engine = loom_dnnl_engine();
    loom_gemm_tile_prim *e = &cache[n_cached++];
    memset(e, 0, sizeof *e);
    e->key = key;
    if (engine) create(e);
    omp_set_num_threads(prev);
    found = e;
  }
  pthread_mutex_unlock(&lock);
  return found && found->prim ? found : NULL;
}

bool loom_gemm_tile_prim_run(const loom_gemm_tile_prim *t, const float *a, const float *b,
                             float *c) {
  const tile_key *k = &t->key;
  bool copy = k->ldc != k->n;
  loom_dnnl_thread *r = loom_dnnl_thread_get();
  void *scratch = r && t->scratch ? loom_dnnl_buffer(r, LOOM_DNNL_SCRATCH, t->scratch) : NULL;
  size_t tile_bytes = sizeof(float) * (size_t)(k->m * k->n);
  float *dst = r && copy ? loom_dnnl_buffer(r, LOOM_DNNL_DST, tile_bytes) : c;
  if (!r || (t->scratch && !scratch) || !dst) return false;
  dnnl_memory_desc_t smd;
  dnnl_dims_t sdim = {(int64_t)(t->scratch ? t->scratch : 1)};
  dnnl_memory_desc_init_by_tag(&smd, 1, sdim, dnnl_u8, dnnl_a);
  dnnl_memory_t mem[4] = {0};
  bool ok = dnnl_memory_create(&mem[0], &t->a, engine, (void *)a) == dnnl_success &&
            dnnl_memory_create(&mem[1], &t->b, engine, (void *)b) == dnnl_success &&
            dnnl_memory_create(&mem[2], &t->c, engine, dst) == dnnl_success &&
            (!t->scratch || dnnl_memory_create(&mem[3], &smd, engine, scratch) == dnnl_success);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                             {DNNL_ARG_WEIGHTS, mem[1]},
                             {DNNL_ARG_DST, mem[2]},
                             {DNNL_ARG_SCRATCHPAD, mem[3]}};
  dnnl_stream_t stream = loom_dnnl_stream(r);
  ok = ok && dnnl_primitive_execute(t->prim, stream, t->scratch ? 4 : 3, args) == dnnl_success &&
       dnnl_stream_wait(stream) == dnnl_success;
  for (int32_t i = 0; i < 4; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  for (int64_t i = 0; ok && copy && i < k->m; i++)
    memcpy(c + i * k->ldc, dst + i * k->n, sizeof(float) * (size_t)k->n);
  return ok;
}

size_t loom_gemm_tile_prim_b_bytes(const loom_gemm_tile_prim *t) {
  return dnnl_memory_desc_get_size(&t->b);
}

bool loom_gemm_tile_prim_same_b(const loom_gemm_tile_prim *x, const loom_gemm_tile_prim *y) {
  return dnnl_memory_desc_equal(&x->b, &y->b) != 0;
}

bool loom_gemm_tile_prim_pack_b(const loom_gemm_tile_prim *t, const float *b, void *dst) {
  if (!t->key.packed) return false;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t reorder = NULL;
  dnnl_memory_t src = NULL, out = NULL;
  dnnl_stream_t stream = NULL;
  bool ok = dnnl_reorder_primitive_desc_create(&pd, &t->b_strided, engine, &t->b, engine, NULL) ==
                dnnl_success &&
            dnnl_primitive_create(&reorder, pd) == dnnl_success &&
            dnnl_memory_create(&src, &t->b_strided, engine, (void *)b) == dnnl_success &&
            dnnl_memory_create(&out, &t->b, engine, dst) == dnnl_success &&
            dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, out}};
  ok = ok && dnnl_primitive_execute(reorder, stream, 2, args) == dnnl_success &&
       dnnl_stream_wait(stream) == dnnl_success;
  if (stream) dnnl_stream_destroy(stream);
  if (out) dnnl_memory_destroy(out);
  if (src) dnnl_memory_destroy(src);
  if (reorder) dnnl_primitive_destroy(reorder);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return ok;
}

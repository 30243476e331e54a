/*
 * The cpu backend's GEMM: C = op(A) op(B), f32, row-major, batched, on
 * oneDNN's dnnl_sgemm (or its matmul primitive, for a transposed B). The
 * work is split into fixed tiles of C (batch x row block x column block,
 * sized by the shapes only) and each tile is one single-threaded oneDNN
 * call inside our own OpenMP loop: oneDNN runs sequentially
 * inside a parallel region, so there is one thread count (ours) and the
 * result does not depend on it.
 *
 * A B that holds the same data from run to run (a frozen session input,
 * an ONNX initializer) can be packed once (loom_gemm_pack_b) into the
 * layout oneDNN's matmul primitive picks for each tile's column block, and
 * every later call with that pack reads it instead of re-packing B per
 * call. The pack is made for the product's own tiles, so the tiles, and
 * with them which elements each call sums and in what order, are the same
 * as without it: a result still depends on the shapes (and on whether the
 * session packed that B), never on the thread count.
 */
#ifndef LOOM_RUNTIME_CPU_GEMM_H
#define LOOM_RUNTIME_CPU_GEMM_H

#include "core/ctx.h"
#include "perf/machine.h"

/* Optional work on the product (rows > 0): the tiles become blocks of
 * `rows` whole rows of C, and fn(user, thread, r0, r1) runs on rows
 * [r0, r1) of C (counted over batch * m) on the thread that computed them,
 * right after they are computed, while they are still in its cache. */
typedef struct loom_gemm_epilogue {
  int64_t rows;
  void (*fn)(void *user, int32_t thread, int64_t row0, int64_t row1);
  void *user;
  /* Optional (at non-NULL): C is read by nothing but fn, so a tile may be
   * computed into a buffer of its thread's, tiles + thread * tile_floats
   * (threads: how many there are), reused tile after tile: it stays in
   * cache, and C's lines are neither read for ownership nor written back.
   * A tile that fits is computed there (C dense, loom_gemm_tile_c), and
   * at(user, thread, row0, rows) tells fn, before its call on rows from
   * row0, that they start at `rows` (tile_floats apart, n floats each);
   * other tiles go to C as usual, at(user, thread, row0, NULL) first. */
  float *tiles;
  int64_t tile_floats;
  int32_t threads;
  void (*at)(void *user, int32_t thread, int64_t row0, const float *rows);
} loom_gemm_epilogue;

typedef struct loom_gemm_packed_b loom_gemm_packed_b;

/* Memory a product may keep its restrided operands in (gemm_restride.h)
 * from call to call, grown as needed, so a call does not map and fault in
 * fresh pages; one product at a time uses it. */
typedef struct loom_gemm_scratch {
  float *data;
  int64_t floats;
  /* the scratch of the product a transposed operand's copy turns p into
   * (its own restrided copies; NULL until one is made) */
  struct loom_gemm_scratch *inner;
} loom_gemm_scratch;
void loom_gemm_scratch_free(loom_gemm_scratch *s);

typedef struct loom_gemm {
  bool trans_a, trans_b; /* A stored [K, M] / B stored [N, K] */
  int64_t m, n, k, batch;
  const float *a;
  int64_t lda;          /* row stride of A as stored */
  const int64_t *a_off; /* per batch element: offset of its A (NULL: 0) */
  const float *b;
  int64_t ldb;
  const int64_t *b_off;
  float *c;
  int64_t ldc, c_stride; /* row stride of C; offset between batch elements */
  loom_gemm_epilogue epilogue; /* none when rows == 0 */
  /* B packed ahead for exactly this product (loom_gemm_pack_b), or NULL;
   * a pack made for another product (a B moved, another tiling) is not
   * used: the product then reads b as stored */
  const loom_gemm_packed_b *b_packed;
  loom_gemm_scratch *scratch; /* or NULL: a call allocates its own */
} loom_gemm;

/* Products below this many flops run on the calling thread. */
#define LOOM_GEMM_PARALLEL_FLOPS 1e6

/* The floats a thread's buffer needs to hold p's epilogue tiles
 * (loom_gemm_epilogue.tiles), or 0 when p's tiles go to C: no epilogue,
 * C not dense, or a tile over LOOM_GEMM_TILE_C_MAX_BYTES (it would not
 * stay in cache). */
#define LOOM_GEMM_TILE_C_MAX_BYTES ((int64_t)1 << 20)
int64_t loom_gemm_tile_c(const loom_gemm *p);

/* Runs p with nt OpenMP threads. */
loom_status loom_gemm_f32(loom_ctx *ctx, int32_t nt, const loom_gemm *p);
/* The number of tiles p is split into when they run in parallel; 1 when
 * p runs on the calling thread (one tile, or below the flop threshold). */
int64_t loom_gemm_parallel_tasks(const loom_gemm *p);

/* True if p's tiles run on oneDNN's matmul primitive (gemm_matmul.h)
 * rather than sgemm: a deep enough product with B transposed. If oneDNN
 * has no fast primitive for a tile, the product still runs on sgemm. */
bool loom_gemm_uses_matmul(const loom_gemm *p);

/* True if p's sgemm tiles read a copy of A or B made at another row
 * stride (gemm_restride.h): an operand oneDNN would copy with thrashing
 * caches, on a machine where the copy pays. */
bool loom_gemm_restrides(const loom_gemm *p);

/* Packs p's B for p's tiles: *out NULL (and OK) when the product gains
 * nothing from it (small, or no blocked primitive for its tiles). The
 * pack holds a copy in another layout: B may change or go away after,
 * but the pack then describes the old B, so whoever keeps it must drop
 * it when B changes. Call outside any parallel region. */
loom_status loom_gemm_pack_b(loom_ctx *ctx, const loom_gemm *p, loom_gemm_packed_b **out);
void loom_gemm_packed_b_free(loom_gemm_packed_b *pb);
/* Whether this CPU has a blocked primitive that reads a packed B at all
 * (oneDNN 2.x's brgemm matmul needs AVX-512): without one,
 * loom_gemm_pack_b packs nothing and every product runs on sgemm. */
bool loom_gemm_can_pack(void);
/* The bytes a pack holds. */
int64_t loom_gemm_packed_b_bytes(const loom_gemm_packed_b *pb);

/* C[m, n] = A[m, k] B[k, n], dense row-major, with `threads` threads:
 * the shape of perf/measure.h's loom_sgemm_fn, so the machine's sgemm
 * rate is measured through this GEMM. */
loom_status loom_gemm_sgemm(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                            const float *a, const float *b, float *c);

/* Sets m->gemm_rows_eff from this machine's profile, or measures it (one
 * core, about 0.1 s of CPU, once per machine) and keeps it there. The
 * LOOM_GEMM_ROWS_EFF environment variable ("0.6,0.7,0.8,0.9,1") pins it. */
void loom_gemm_rows_curve(loom_ctx *ctx, loom_machine *m);

#endif

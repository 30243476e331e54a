#include "runtime/cpu/gemm.h"

#include "runtime/cpu/flash_attention.h"
#include "runtime/cpu/flash_attention_kernels.h"
#include "runtime/cpu/gemm_matmul.h"
#include "runtime/cpu/gemm_restride.h"

#include "core/clock.h"
#include "perf/profile.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The tile of C per task: the largest that still gives at least
 * GEMM_MIN_TASKS tasks, so big products run big, efficient sgemm calls and
 * small ones still spread over the cores. Each sgemm call re-packs its
 * share of A and B, and runs panels as wide as its tile: a tile narrower
 * than GEMM_MIN_COLS columns or shorter than GEMM_MIN_ROWS rows loses
 * 10-25% on one core (64 x 64 tiles of 128 x 768 x 3072 ran at 74 GFLOP/s,
 * 64 x 128 at 90, whole rows at 99: docs/PERFORMANCE.md), so tiles stop
 * shrinking there even when that leaves fewer tasks. Tiles start at most
 * GEMM_MAX_TILE on a side, cut evenly (first_tile), and halve along their
 * longer side (rows on a tie). With an epilogue a tile is the epilogue's
 * whole rows. The tile depends on the shapes only, never on the thread
 * count, so results do not change with threads. Eight tasks balance on 1,
 * 2, 4 and 8 threads and lose at most 11% on 3; sixteen cut mid-sized
 * products into tiles 1-8% slower on one core (512 x 1024 x 1024:
 * 128 x 256 tiles 89 GFLOP/s, 256 x 256 tiles 94). */
#define GEMM_MIN_TASKS 8
#define GEMM_MAX_TILE 512
#define GEMM_MIN_ROWS 64
#define GEMM_MIN_COLS 128

/* Half of a tile side, rounded up to whole vectors of 16 floats. */
static int64_t half_tile(int64_t t) { return ((t + 1) / 2 + 15) / 16 * 16; }

static int64_t tile_count(int64_t len, int64_t tile) { return (len + tile - 1) / tile; }

/* The first tile side for a side of len: as few tiles as GEMM_MAX_TILE
 * allows, of equal size (rounded up to 16), so the tiles of a row carry
 * equal work: 768 rows become 2 x 384, not 512 + 256, which left one of
 * two threads a third more to do (768 x 3072 x 1024 ran at 127 GFLOP/s
 * on two threads, against 175 for 1024 rows). */
static int64_t first_tile(int64_t len) {
  int64_t n = tile_count(len, GEMM_MAX_TILE);
  return LOOM_MIN(len, (tile_count(len, n) + 15) / 16 * 16);
}

static void gemm_tile(const loom_gemm *p, int64_t *tile_m, int64_t *tile_n) {
  if (p->epilogue.rows > 0 && p->epilogue.fn) {
    *tile_m = p->epilogue.rows;
    *tile_n = p->n;
    return;
  }
  int64_t tm = first_tile(p->m), tn = first_tile(p->n);
  while (p->batch * tile_count(p->m, tm) * tile_count(p->n, tn) < GEMM_MIN_TASKS) {
    bool can_m = half_tile(tm) >= GEMM_MIN_ROWS && half_tile(tm) < tm;
    bool can_n = half_tile(tn) >= GEMM_MIN_COLS && half_tile(tn) < tn;
    if (can_m && (tm >= tn || !can_n))
      tm = half_tile(tm);
    else if (can_n)
      tn = half_tile(tn);
    else
      break;
  }
  *tile_m = tm;
  *tile_n = tn;
}

int64_t loom_gemm_tile_c(const loom_gemm *p) {
  if (p->epilogue.rows <= 0 || !p->epilogue.fn || p->k <= 0 || p->ldc != p->n ||
      (p->batch > 1 && p->c_stride != p->m * p->n))
    return 0;
  int64_t floats = LOOM_MIN(p->epilogue.rows, p->m) * p->n;
  return floats * (int64_t)sizeof(float) <= LOOM_GEMM_TILE_C_MAX_BYTES ? floats : 0;
}

/* Tiles per column and row of C, and their count. */
static int64_t gemm_tasks(const loom_gemm *p, int64_t tile_m, int64_t tile_n, int64_t *mb,
                          int64_t *nb) {
  *mb = (p->m + tile_m - 1) / tile_m;
  *nb = (p->n + tile_n - 1) / tile_n;
  return p->batch * *mb * *nb;
}

/* Products whose tiles run on oneDNN's matmul primitive rather than
 * sgemm: a transposed B (as ONNX Gemm's transB and a linear layer's input
 * gradient give it) at least GEMM_MATMUL_MIN_DEPTH deep, which the
 * primitive reads in place (gemm_matmul.h). Shallower products lost 0-10%
 * on it (K = 64..256), and small ones stay on sgemm: a primitive call
 * costs a few microseconds more. */
#define GEMM_MATMUL_MIN_DEPTH 512
#define GEMM_MATMUL_MIN_FLOPS 1e7

bool loom_gemm_uses_matmul(const loom_gemm *p) {
  double flops = 2.0 * (double)p->batch * (double)p->m * (double)p->n * (double)p->k;
  return p->trans_b && !p->trans_a && p->k >= GEMM_MATMUL_MIN_DEPTH &&
         flops >= GEMM_MATMUL_MIN_FLOPS;
}

static bool gemm_parallel(const loom_gemm *p, int64_t tasks) {
  double flops = 2.0 * (double)p->batch * (double)p->m * (double)p->n * (double)p->k;
  return tasks > 1 && flops >= LOOM_GEMM_PARALLEL_FLOPS;
}

int64_t loom_gemm_parallel_tasks(const loom_gemm *p) {
  if (p->m <= 0 || p->n <= 0 || p->batch <= 0 || p->k == 0) return 1;
  int64_t tile_m, tile_n, mb, nb;
  gemm_tile(p, &tile_m, &tile_n);
  int64_t tasks = gemm_tasks(p, tile_m, tile_n, &mb, &nb);
  return gemm_parallel(p, tasks) ? tasks : 1;
}

/* Restriding (gemm_restride.h) an operand the copy walks down K rows of:
 * B stored [K, N], A stored [K, M] (trans_a). Copying one moves 8 bytes
 * per element for 2 x (the other side) flops per element, so the other
 * side must be long enough for the gain to outweigh it. Measured on two
 * cores of an AVX2 host (docs/PERFORMANCE.md, fifteenth session): B of
 * 768 x 3072 under 32 rows of A 83 -> 117 GFLOP/s, 128 rows 89 -> 165;
 * A of 1024 x 768 (a weight gradient) with 128 columns of B 149 -> 139,
 * 256 columns 143 -> 174. A batched operand's distinct matrices are
 * copied once each.
 *
 * How much A gains depends on the power of two in its stride (one core,
 * A [1024, M] transposed, 128 columns of B, sixteenth session): 3 KiB
 * rows 1.1x faster padded, 2 KiB 1.4x, 4, 8 and 12 KiB 2.2x. A 4 KiB
 * stride repays the copy over far fewer columns: on two cores with A
 * cold in memory, 1024 x 32 x 1024 860 -> 700 us, x 64 x 1950 -> 1170,
 * but x 16 460 -> 690. A 2 KiB one gained in isolation (512 x 128 x 1024
 * 1150-1320 -> 1005 us cold) and lost inside the training step (900 ->
 * 1000 us), so it keeps the general threshold. */
#define RESTRIDE_B_MIN_ROWS 32

static int64_t restride_a_min_cols(int64_t lda) {
  return lda * (int64_t)sizeof(float) % 4096 == 0 ? 32 : 256;
}

/* The strides p's A and B are copied into on their way through sgemm (0:
 * as stored). */
static void restride_lds(const loom_gemm *p, int64_t *ld_a, int64_t *ld_b) {
  double flops = 2.0 * (double)p->batch * (double)p->m * (double)p->n * (double)p->k;
  *ld_a = *ld_b = 0;
  if (flops < GEMM_MATMUL_MIN_FLOPS || !loom_gemm_restride_pays()) return;
  if (p->trans_a && p->n >= restride_a_min_cols(p->lda)) *ld_a = loom_gemm_restride_ld(p->lda);
  if (!p->trans_b && p->m >= RESTRIDE_B_MIN_ROWS) *ld_b = loom_gemm_restride_ld(p->ldb);
}

bool loom_gemm_restrides(const loom_gemm *p) {
  int64_t ld_a, ld_b;
  restride_lds(p, &ld_a, &ld_b);
  return (ld_a || ld_b) && !loom_gemm_uses_matmul(p);
}

/* B packed for one product's tiles: per set of B (one per distinct
 * batch offset) and column block, the block in the layout of the tile
 * primitive of that block's width; tiles of the last row block (a shorter
 * tail) read the same block, so their primitive must want the same layout. */
struct loom_gemm_packed_b {
  loom_gemm shape; /* the product it was made for (pointers compared, not read) */
  int64_t tile_m, tile_n, mb, nb, n_sets;
  int64_t *b_off;  /* a copy of shape.b_off (NULL: none) */
  int64_t *set;    /* per batch element: its set of blocks */
  const loom_gemm_tile_prim *prim[2][2];
  float **block;   /* [n_sets * nb] */
  /* or, where no primitive reads a packed B: B copied whole at a harmless
   * row stride (gemm_restride.h), read by sgemm */
  float *restrided;
  int64_t ld;
  int64_t bytes;
};

void loom_gemm_packed_b_free(loom_gemm_packed_b *pb) {
  if (!pb) return;
  for (int64_t i = 0; pb->block && i < pb->n_sets * pb->nb; i++) free(pb->block[i]);
  free(pb->block);
  free(pb->restrided);
  free(pb->b_off);
  free(pb->set);
  free(pb);
}

int64_t loom_gemm_packed_b_bytes(const loom_gemm_packed_b *pb) { return pb ? pb->bytes : 0; }

/* The primitives for p's tile shapes (full and tails), packed B or not;
 * false when one of them has no fast primitive. */
static bool tile_prims(const loom_gemm *p, int64_t tile, int64_t tile_n, int64_t mb, int64_t nb,
                       bool packed, const loom_gemm_tile_prim *prim[2][2]) {
  for (int32_t tm = 0; tm < 2; tm++)
    for (int32_t tn = 0; tn < 2; tn++) {
      int64_t m = tm ? p->m - (mb - 1) * tile : LOOM_MIN(tile, p->m);
      int64_t n = tn ? p->n - (nb - 1) * tile_n : LOOM_MIN(tile_n, p->n);
      prim[tm][tn] = loom_gemm_tile_prim_get(p, m, n, packed);
      if (!prim[tm][tn]) return false;
    }
  return true;
}

/* Products worth packing, by measurement (one core, CPU time, BERT-base's
 * shapes; docs/PERFORMANCE.md, tenth session): a B transposed (stored
 * [N, K]: ONNX Gemm's transB, weights in PyTorch's layout), where the
 * packed primitive ran 1.02-1.25x the unpacked paths; and a B stored
 * [K, N] under a short product (at most GEMM_PACK_MAX_ROWS rows, one or
 * two sequences: sgemm re-packs B for few rows of A per call there), where
 * it ran 0.99-1.20x sgemm. Under taller products sgemm already runs at
 * about the core's peak (105-110 GFLOP/s) and the packed primitive
 * measured 0.88-1.00x of it (one outlier 1.08x). Both big
 * enough that a primitive call's few microseconds do not matter.
 * LOOM_GEMM_PACK=all packs every big product (to measure), =none none. */
#define GEMM_PACK_MAX_ROWS 256

static bool pack_env(const char *value) {
  const char *env = getenv("LOOM_GEMM_PACK");
  return env && strcmp(env, value) == 0;
}

static bool worth_packing(const loom_gemm *p) {
  double flops = 2.0 * (double)p->batch * (double)p->m * (double)p->n * (double)p->k;
  bool all = pack_env("all"), none = pack_env("none");
  bool shape = p->trans_b || p->m <= GEMM_PACK_MAX_ROWS || all;
  return !none && shape && !p->trans_a && p->k > 0 && p->m > 0 && p->n > 0 && p->batch > 0 &&
         flops >= GEMM_MATMUL_MIN_FLOPS;
}

bool loom_gemm_can_pack(void) {
  loom_gemm probe = {.m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .batch = 1};
  return loom_gemm_tile_prim_get(&probe, 64, 64, true) != NULL;
}

/* p's B in the blocks of its tiles' primitives; *out NULL when there is
 * no fast primitive for them. */
static loom_status pack_blocks(loom_ctx *ctx, const loom_gemm *p, loom_gemm_packed_b **out) {
  *out = NULL;
  loom_gemm_packed_b *pb = loom_calloc(ctx, 1, sizeof *pb);
  if (!pb) return LOOM_STATUS_OUT_OF_MEMORY;
  pb->shape = *p;
  pb->shape.b_packed = NULL;
  gemm_tile(p, &pb->tile_m, &pb->tile_n);
  gemm_tasks(p, pb->tile_m, pb->tile_n, &pb->mb, &pb->nb);
  /* the tail row block reads the full one's blocks: same layout needed */
  bool ok = tile_prims(p, pb->tile_m, pb->tile_n, pb->mb, pb->nb, true, pb->prim) &&
            loom_gemm_tile_prim_same_b(pb->prim[0][0], pb->prim[1][0]) &&
            loom_gemm_tile_prim_same_b(pb->prim[0][1], pb->prim[1][1]);
  if (!ok) {
    loom_gemm_packed_b_free(pb);
    return LOOM_STATUS_OK; /* no fast primitive: the product stays as it is */
  }
  pb->set = loom_calloc(ctx, (size_t)p->batch, sizeof *pb->set);
  if (p->b_off) pb->b_off = loom_malloc(ctx, sizeof *pb->b_off * (size_t)p->batch);
  if (!pb->set || (p->b_off && !pb->b_off)) goto oom;
  /* batch elements that share a B (broadcast) share its blocks */
  for (int64_t bi = 0; bi < p->batch && p->b_off; bi++) {
    pb->b_off[bi] = p->b_off[bi];
    int64_t same = 0;
    while (same < bi && p->b_off[same] != p->b_off[bi]) same++;
    pb->set[bi] = same < bi ? pb->set[same] : pb->n_sets++;
  }
  if (!p->b_off) pb->n_sets = 1;
  pb->block = loom_calloc(ctx, (size_t)(pb->n_sets * pb->nb), sizeof *pb->block);
  if (!pb->block) goto oom;
  /* sets are numbered in order of first use: pack each at its first */
  for (int64_t bi = 0, next = 0; bi < p->batch && next < pb->n_sets; bi++) {
    if (pb->set[bi] != next) continue;
    next++;
    for (int64_t jb = 0; jb < pb->nb; jb++) {
      const loom_gemm_tile_prim *t = pb->prim[0][jb == pb->nb - 1 && pb->nb > 1];
      size_t bytes = (loom_gemm_tile_prim_b_bytes(t) + 63) / 64 * 64;
      float **dst = &pb->block[pb->set[bi] * pb->nb + jb];
      *dst = aligned_alloc(64, bytes);
      if (!*dst) goto oom;
      int64_t j0 = jb * pb->tile_n;
      const float *b = p->b + (p->b_off ? p->b_off[bi] : 0) + (p->trans_b ? j0 * p->ldb : j0);
      if (!loom_gemm_tile_prim_pack_b(t, b, *dst)) {
        loom_gemm_packed_b_free(pb);
        return loom_error(ctx, LOOM_STATUS_INTERNAL, "matmul: packing B (%lld x %lld) failed",
                          (long long)p->k, (long long)p->n);
      }
      pb->bytes += (int64_t)bytes;
    }
  }
  *out = pb;
  return LOOM_STATUS_OK;
oom:
  loom_gemm_packed_b_free(pb);
  return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "matmul: no memory to pack B");
}

/* Each set's rows x cols floats, rows ld apart at src + set_off[s], to
 * dst + s * rows * ld2, rows ld2 apart. */
static void copy_sets(int32_t nt, bool parallel, const float *src, int64_t ld,
                      const int64_t *set_off, int64_t n_sets, int64_t rows, int64_t cols,
                      float *dst, int64_t ld2) {
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel)
  for (int64_t i = 0; i < n_sets * rows; i++) {
    int64_t s = i / rows, r = i % rows;
    memcpy(dst + (s * rows + r) * ld2, src + set_off[s] + r * ld, sizeof(float) * (size_t)cols);
  }
}

/* p's B copied whole at the stride restriding gives it; *out NULL when
 * restriding leaves it as stored. */
static loom_status pack_restrided(loom_ctx *ctx, const loom_gemm *p, loom_gemm_packed_b **out) {
  *out = NULL;
  int64_t ld_a, ld_b;
  restride_lds(p, &ld_a, &ld_b);
  if (!ld_b || loom_gemm_uses_matmul(p)) return LOOM_STATUS_OK;
  loom_gemm_packed_b *pb = loom_calloc(ctx, 1, sizeof *pb);
  size_t bytes = (sizeof(float) * (size_t)(p->k * ld_b) + 63) / 64 * 64;
  float *b = pb ? aligned_alloc(64, bytes) : NULL;
  if (!b) {
    free(pb);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "matmul: no memory to pack B");
  }
  pb->shape = *p;
  pb->shape.b_packed = NULL;
  gemm_tile(p, &pb->tile_m, &pb->tile_n);
  const int64_t at = 0;
  copy_sets(1, false, p->b, p->ldb, &at, 1, p->k, p->n, b, ld_b);
  pb->restrided = b;
  pb->ld = ld_b;
  pb->bytes = (int64_t)bytes;
  *out = pb;
  return LOOM_STATUS_OK;
}

loom_status loom_gemm_pack_b(loom_ctx *ctx, const loom_gemm *p, loom_gemm_packed_b **out) {
  *out = NULL;
  if (worth_packing(p)) LOOM_TRY(pack_blocks(ctx, p, out));
  if (!*out && p->batch == 1 && !pack_env("none")) LOOM_TRY(pack_restrided(ctx, p, out));
  return LOOM_STATUS_OK;
}

/* True if pb was made for exactly p: the same operands, strides, shapes
 * and tiles (the epilogue's rows set the tiles); A's layout matters to
 * the primitives' blocks only, not to a restrided copy of B (which p may
 * read after its A was copied untransposed). */
static bool pack_fits(const loom_gemm_packed_b *pb, const loom_gemm *p, int64_t tile,
                      int64_t tile_n) {
  const loom_gemm *s = &pb->shape;
  bool same_a = pb->restrided || (s->trans_a == p->trans_a && s->lda == p->lda);
  return same_a && s->trans_b == p->trans_b && s->m == p->m && s->n == p->n &&
         s->k == p->k && s->batch == p->batch && s->b == p->b &&
         s->ldb == p->ldb && s->ldc == p->ldc && pb->tile_m == tile && pb->tile_n == tile_n &&
         !pb->b_off == !p->b_off &&
         (!p->b_off || memcmp(pb->b_off, p->b_off, sizeof *p->b_off * (size_t)p->batch) == 0);
}

/* The distinct matrices of a batched operand (at offsets off; NULL: all
 * at 0): set_off[s], where set s is stored, and new_off[bi], where batch
 * element bi's copy starts when each set takes `size` floats. Returns the
 * number of sets. Offsets usually grow, each new: that case is O(batch). */
static int64_t operand_sets(const int64_t *off, int64_t batch, int64_t size, int64_t *set_off,
                            int64_t *new_off) {
  int64_t n = 0;
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t o = off ? off[bi] : 0, s = n;
    if (!n || o < set_off[n - 1])
      for (s = 0; s < n && set_off[s] != o; s++) {
      }
    else if (o == set_off[n - 1])
      s = n - 1;
    if (s == n) set_off[n++] = o;
    new_off[bi] = s * size;
  }
  return n;
}

void loom_gemm_scratch_free(loom_gemm_scratch *s) {
  if (s->inner) loom_gemm_scratch_free(s->inner);
  free(s->inner);
  free(s->data);
  *s = (loom_gemm_scratch){0};
}

/* Restrided copies of a product's operands, freed by restrided_free. */
typedef struct restrided {
  float *buf;
  bool own;      /* buf is this call's (else the product's scratch) */
  int64_t *offs; /* new A offsets, new B offsets, then two scratch arrays: batch each */
} restrided;

static void restrided_free(restrided *r) {
  if (r->own) free(r->buf);
  free(r->offs);
}

/* floats of memory (64-byte aligned) for p's copies: its scratch, grown
 * if need be, or this call's own; NULL if there is none. */
static float *restride_buffer(const loom_gemm *p, int64_t floats, bool *own) {
  size_t bytes = sizeof(float) * (size_t)((floats + 15) / 16 * 16);
  loom_gemm_scratch *s = p->scratch;
  *own = !s;
  if (!s) return aligned_alloc(64, bytes);
  if (s->floats < floats) {
    free(s->data);
    s->data = aligned_alloc(64, bytes);
    s->floats = s->data ? floats : 0;
  }
  return s->data;
}

/* q: p, with a thrashing A and B copied into r at a harmless stride, B
 * read from its restrided pack where pk is one; p as it is when its tiles
 * run on the matmul primitive (prim). A failed allocation only skips the
 * copy. */
static void restride(int32_t nt, bool parallel, const loom_gemm *p, bool prim,
                     const loom_gemm_packed_b *pk, loom_gemm *q, restrided *r) {
  *q = *p;
  *r = (restrided){0};
  if (prim) return;
  int64_t ld_a, ld_b;
  restride_lds(p, &ld_a, &ld_b);
  if (pk && pk->restrided) {
    q->b = pk->restrided, q->ldb = pk->ld;
    ld_b = 0;
  }
  if (!ld_a && !ld_b) return;
  const int64_t batch = p->batch, size_a = p->k * ld_a, size_b = p->k * ld_b;
  r->offs = malloc(sizeof(int64_t) * 4 * (size_t)batch);
  if (!r->offs) return;
  int64_t *off_a = r->offs, *off_b = off_a + batch, *sets_a = off_b + batch, *sets_b = sets_a + batch;
  int64_t n_a = ld_a ? operand_sets(p->a_off, batch, size_a, sets_a, off_a) : 0;
  int64_t n_b = ld_b ? operand_sets(p->b_off, batch, size_b, sets_b, off_b) : 0;
  r->buf = restride_buffer(p, n_a * size_a + n_b * size_b, &r->own);
  if (!r->buf) {
    restrided_free(r);
    *r = (restrided){0};
    return;
  }
  if (ld_a) {
    copy_sets(nt, parallel, p->a, p->lda, sets_a, n_a, p->k, p->m, r->buf, ld_a);
    q->a = r->buf, q->lda = ld_a, q->a_off = off_a;
  }
  if (ld_b) {
    copy_sets(nt, parallel, p->b, p->ldb, sets_b, n_b, p->k, p->n, r->buf + n_a * size_a, ld_b);
    q->b = r->buf + n_a * size_a, q->ldb = ld_b, q->b_off = off_b;
  }
}

/* A transposed B under an epilogue's thin row blocks is copied to [K, N]
 * first: each block's product re-read it transposed, and 32-row blocks of
 * 4096 x 1024 x 1024 with B transposed ran at 132 GFLOP/s on two cores,
 * against 177 with B as [K, N] (and 155 on the GEMM's own tiles): the
 * LoRA workload's input gradient, dy W^T with the adapter's term added on
 * 32-row blocks, took 68 ms fused and 52 unfused. So is one under
 * TRANSPOSE_B_MIN_ROWS rows or more on the matmul primitive's path
 * (1024 x 768 x 3072 30.7 -> 26.5 ms; 512^3 lost 5%: docs/PERFORMANCE.md,
 * seventeenth session). The copy moves 8 bytes per element of B, once. */
#define TRANSPOSE_B_MIN_BLOCKS 4
#define TRANSPOSE_B_MIN_ROWS 1024
#define TRANSPOSE_TILE 64

static bool transpose_b_pays(const loom_gemm *p, int64_t mb) {
  if (!p->trans_b || p->batch != 1 || p->b_packed ||
      2.0 * (double)p->m * (double)p->n * (double)p->k < GEMM_MATMUL_MIN_FLOPS)
    return false;
  if (p->epilogue.rows > 0 && p->epilogue.fn) return mb >= TRANSPOSE_B_MIN_BLOCKS;
  return loom_gemm_uses_matmul(p) && p->m >= TRANSPOSE_B_MIN_ROWS;
}

/* A transposed A (stored [K, M]: a weight gradient x^T dy) is copied to
 * [M, K] first: sgemm ran such products up to 1.3x slower than with A as
 * [M, K], copy included (two cores, copies in a kept scratch,
 * docs/PERFORMANCE.md, eighteenth session: 512 x 128 x 1024 1.25-1.34 ->
 * 1.01 ms; big ones gain less, 768 x 3072 x 1024 30.5 -> 26.7 ms, 1024 x
 * 1024 x 4096 even). The copy moves 8 bytes per element of A for 2 N
 * flops, so B must be TRANSPOSE_A_MIN_COLS wide (1024 x 16 x 4096 and 512
 * x 32 x 1024 lost), and A TRANSPOSE_A_MIN_ROWS tall (16 x 1024 x 4096
 * lost 6%). */
#define TRANSPOSE_A_MIN_COLS 64
#define TRANSPOSE_A_MIN_ROWS 64

static bool transpose_a_pays(const loom_gemm *p) {
  return p->trans_a && p->batch == 1 && p->m >= TRANSPOSE_A_MIN_ROWS &&
         p->n >= TRANSPOSE_A_MIN_COLS &&
         2.0 * (double)p->m * (double)p->n * (double)p->k >= GEMM_MATMUL_MIN_FLOPS;
}

/* dst[c][r] = src[r][c] for src [rows, cols] (rows ld apart), in tiles
 * that stay in L1 on both sides, by the flash-attention kernels' tile
 * transpose (the best set this CPU runs). */
static void transpose_copy(int32_t nt, bool parallel, const float *src, int64_t ld, int64_t rows,
                           int64_t cols, float *dst, int64_t ld2) {
  const int64_t tr = (rows + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE;
  const int64_t tc = (cols + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE;
  const fa_kernels *fk = loom_fa_kernels(LOOM_FLASH_ATTN_IMPL_BEST);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel)
  for (int64_t t = 0; t < tr * tc; t++) {
    int64_t r0 = t / tc * TRANSPOSE_TILE, c0 = t % tc * TRANSPOSE_TILE;
    fk->transpose(LOOM_MIN(rows - r0, TRANSPOSE_TILE), LOOM_MIN(cols - c0, TRANSPOSE_TILE),
                  src + r0 * ld + c0, ld, dst + c0 * ld2 + r0, ld2);
  }
}

/* p with its A (a) or B (!a) copied untransposed into a buffer, then run;
 * false (and nothing run) when no buffer could be had. */
static bool run_transposed(loom_ctx *ctx, int32_t nt, bool parallel, const loom_gemm *p, bool a,
                           loom_status *st) {
  int64_t rows = a ? p->m : p->k, cols = a ? p->k : p->n; /* the copy's shape */
  int64_t ld = loom_gemm_restride_ld(cols) ? loom_gemm_restride_ld(cols) : cols;
  bool own;
  float *buf = restride_buffer(p, rows * ld, &own);
  if (!buf) return false;
  loom_gemm t = *p;
  if (a) {
    transpose_copy(nt, parallel, p->a, p->lda, p->k, p->m, buf, ld);
    t.trans_a = false, t.a = buf, t.lda = ld;
  } else {
    transpose_copy(nt, parallel, p->b, p->ldb, p->n, p->k, buf, ld);
    t.trans_b = false, t.b = buf, t.ldb = ld;
  }
  /* buf is in p's scratch: the product's own copies go in the inner one */
  if (p->scratch && !p->scratch->inner) p->scratch->inner = calloc(1, sizeof *p->scratch->inner);
  t.scratch = p->scratch ? p->scratch->inner : NULL;
  *st = loom_gemm_f32(ctx, nt, &t);
  if (own) free(buf);
  return true;
}

loom_status loom_gemm_f32(loom_ctx *ctx, int32_t nt, const loom_gemm *p) {
  if (p->m <= 0 || p->n <= 0 || p->batch <= 0) return LOOM_STATUS_OK;
  const bool epi = p->epilogue.rows > 0 && p->epilogue.fn;
  if (p->k == 0) { /* an empty sum: zeros (sgemm may not touch C) */
    for (int64_t bi = 0; bi < p->batch; bi++)
      for (int64_t i = 0; i < p->m; i++)
        memset(p->c + bi * p->c_stride + i * p->ldc, 0, sizeof(float) * (size_t)p->n);
    if (epi && p->epilogue.at) p->epilogue.at(p->epilogue.user, 0, 0, NULL);
    if (epi) p->epilogue.fn(p->epilogue.user, 0, 0, p->batch * p->m);
    return LOOM_STATUS_OK;
  }
  /* with an epilogue a tile is whole rows: the epilogue needs them all */
  int64_t tile, tile_n, mb, nb;
  gemm_tile(p, &tile, &tile_n);
  int64_t tasks = gemm_tasks(p, tile, tile_n, &mb, &nb);
  const bool parallel = gemm_parallel(p, tasks);
  loom_status st; /* a transposed operand copied first, if it pays and memory allows */
  if (transpose_a_pays(p) && run_transposed(ctx, nt, parallel, p, true, &st)) return st;
  if (transpose_b_pays(p, mb) && run_transposed(ctx, nt, parallel, p, false, &st)) return st;
  /* tiles on the matmul primitive (gemm_matmul.h): one per tile shape,
   * the full tile and the tails; with B packed ahead, the pack's */
  const loom_gemm_packed_b *pk =
      p->b_packed && pack_fits(p->b_packed, p, tile, tile_n) ? p->b_packed : NULL;
  const loom_gemm_tile_prim *prim[2][2] = {{NULL}};
  bool use_prim = pk && pk->block;
  if (use_prim)
    memcpy(prim, pk->prim, sizeof prim);
  else if (loom_gemm_uses_matmul(p))
    use_prim = tile_prims(p, tile, tile_n, mb, nb, false, prim);
  /* a product only the epilogue reads: each tile in its thread's buffer */
  const int64_t tile_c = p->epilogue.at && p->epilogue.tiles ? loom_gemm_tile_c(p) : 0;
  const bool in_tiles = tile_c > 0 && tile_c <= p->epilogue.tile_floats &&
                        p->epilogue.threads >= (parallel ? nt : 1);
  loom_gemm q; /* p, with operands of a thrashing stride copied */
  restrided copies;
  restride(nt, parallel, p, use_prim, pk, &q, &copies);
  int failed = 0;
  /* oneDNN threads itself unless it runs inside an active parallel region;
   * a one-thread (inactive) region would still let it use every core with
   * a different split, so pin its view of the thread count to 1. */
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
#pragma omp parallel for num_threads(nt) schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t bi = t / (mb * nb), r = t % (mb * nb), ib = r / nb, jb = r % nb;
    int64_t i0 = ib * tile, j0 = jb * tile_n;
    int64_t m = p->m - i0 < tile ? p->m - i0 : tile;
    int64_t n = p->n - j0 < tile_n ? p->n - j0 : tile_n;
    const float *a = q.a + (q.a_off ? q.a_off[bi] : 0) + (q.trans_a ? i0 : i0 * q.lda);
    const float *b = use_prim && pk ? pk->block[pk->set[bi] * nb + jb]
                        : q.b + (q.b_off ? q.b_off[bi] : 0) + (q.trans_b ? j0 * q.ldb : j0);
    const int32_t thread = omp_get_thread_num();
    float *c = in_tiles ? p->epilogue.tiles + thread * p->epilogue.tile_floats
                        : p->c + bi * p->c_stride + i0 * p->ldc + j0;
    omp_set_num_threads(1);
    dnnl_status_t st = dnnl_success;
    if (use_prim) {
      if (!loom_gemm_tile_prim_run(prim[ib == mb - 1 && mb > 1][jb == nb - 1 && nb > 1], a, b, c))
        st = dnnl_runtime_error;
    } else {
      st = dnnl_sgemm(q.trans_a ? 'T' : 'N', q.trans_b ? 'T' : 'N', m, n, q.k, 1.0f, a, q.lda,
                      b, q.ldb, 0.0f, c, q.ldc);
    }
    if (st != dnnl_success) {
#pragma omp atomic write
      failed = (int)st;
    } else if (epi) {
      if (p->epilogue.at) p->epilogue.at(p->epilogue.user, thread, bi * p->m + i0, in_tiles ? c : NULL);
      p->epilogue.fn(p->epilogue.user, thread, bi * p->m + i0, bi * p->m + i0 + m);
    }
  }
  omp_set_num_threads(prev);
  restrided_free(&copies);
  if (failed)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "matmul: dnnl_sgemm failed (status %d)", failed);
  return LOOM_STATUS_OK;
}

loom_status loom_gemm_sgemm(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                            const float *a, const float *b, float *c) {
  loom_gemm p = {.m = m, .n = n, .k = k, .batch = 1, .a = a, .lda = k, .b = b, .ldb = n,
                 .c = c, .ldc = n, .c_stride = m * n};
  return loom_gemm_f32(ctx, threads, &p);
}

/* The block-size curve: one core times the same product on its own tiles
 * and on whole-row blocks of 16 .. 256 rows, by CPU time (a busy machine
 * slows the wall clock, not the thread's own work), best of CURVE_RUNS.
 * B is larger than a core's L2, as a transformer's weights are, so thin
 * blocks pay for re-packing it. Fractions are rounded to CURVE_STEP: plans
 * read them, and a plan must not flip with timer noise. */
#define CURVE_M 256
#define CURVE_N 2048
#define CURVE_K 512
#define CURVE_RUNS 3
#define CURVE_STEP 0.05

static void no_epilogue(void *user, int32_t thread, int64_t row0, int64_t row1) {
  (void)user, (void)thread, (void)row0, (void)row1;
}

static bool curve_from_env(loom_machine *m) {
  const char *env = getenv("LOOM_GEMM_ROWS_EFF");
  if (!env || !*env) return false;
  double e[LOOM_GEMM_ROWS_POINTS];
  const char *s = env;
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) {
    char *end = NULL;
    e[i] = strtod(s, &end);
    if (end == s || !(e[i] > 0 && e[i] <= 1)) return false;
    s = *end == ',' ? end + 1 : end;
  }
  memcpy(m->gemm_rows_eff, e, sizeof e);
  return true;
}

static bool curve_from_profile(loom_machine *m) {
  double e[LOOM_GEMM_ROWS_POINTS];
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) {
    char key[32];
    snprintf(key, sizeof key, "gemm_rows_eff_%d", LOOM_GEMM_ROWS_MIN << i);
    if (!loom_profile_get(key, &e[i]) || !(e[i] > 0 && e[i] <= 1)) return false;
  }
  memcpy(m->gemm_rows_eff, e, sizeof e);
  return true;
}

void loom_gemm_rows_curve(loom_ctx *ctx, loom_machine *m) {
  if (curve_from_env(m) || curve_from_profile(m)) return;
  float *a = calloc((size_t)CURVE_M * CURVE_K, sizeof *a);
  float *b = calloc((size_t)CURVE_K * CURVE_N, sizeof *b);
  float *c = calloc((size_t)CURVE_M * CURVE_N, sizeof *c);
  if (a && b && c) {
    for (int64_t i = 0; i < (int64_t)CURVE_K * CURVE_N; i++) b[i] = (float)(i % 7) * 0.125f;
    for (int64_t i = 0; i < (int64_t)CURVE_M * CURVE_K; i++) a[i] = (float)(i % 5) * 0.25f;
    loom_gemm p = {.m = CURVE_M, .n = CURVE_N, .k = CURVE_K, .batch = 1, .a = a, .lda = CURVE_K,
                   .b = b, .ldb = CURVE_N, .c = c, .ldc = CURVE_N,
                   .c_stride = (int64_t)CURVE_M * CURVE_N};
    /* best[0]: the GEMM's own tiles; best[1 + i]: blocks of 16 << i rows */
    double best[1 + LOOM_GEMM_ROWS_POINTS];
    for (int32_t i = 0; i <= LOOM_GEMM_ROWS_POINTS; i++) best[i] = 1e30;
    bool ok = loom_gemm_f32(ctx, 1, &p) == LOOM_STATUS_OK; /* warm-up */
    for (int32_t run = 0; run < CURVE_RUNS && ok; run++)
      for (int32_t i = 0; i <= LOOM_GEMM_ROWS_POINTS && ok; i++) {
        p.epilogue = (loom_gemm_epilogue){
            .rows = i ? (int64_t)LOOM_GEMM_ROWS_MIN << (i - 1) : 0, .fn = no_epilogue};
        double t0 = loom_thread_cpu_s();
        ok = loom_gemm_f32(ctx, 1, &p) == LOOM_STATUS_OK;
        best[i] = LOOM_MIN(best[i], loom_thread_cpu_s() - t0);
      }
    for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS && ok && best[0] > 0; i++) {
      double e = best[1 + i] > 0 ? best[0] / best[1 + i] : 1.0;
      e = LOOM_MAX(CURVE_STEP, LOOM_MIN(1.0, round(e / CURVE_STEP) * CURVE_STEP));
      m->gemm_rows_eff[i] = e;
      char key[32];
      snprintf(key, sizeof key, "gemm_rows_eff_%d", LOOM_GEMM_ROWS_MIN << i);
      loom_profile_put(key, e);
    }
  }
  free(a);
  free(b);
  free(c);
}

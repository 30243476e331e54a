/* The cpu backend's GEMM (runtime/cpu/gemm.h) on its threaded path: shapes
 * above the flop threshold split into several tiles run in parallel — plain,
 * transposed, batched with per-batch offsets, skinny with tails, and with a
 * row epilogue — are cut into the expected tiles, give the same bytes on 1,
 * 2 and 3 threads and match a double-precision
 * product; small products stay on the calling thread. With B packed ahead
 * (loom_gemm_pack_b) the same tiles give the same bytes on any thread
 * count and match the product too; a pack made for another B is ignored.
 * A product only its epilogue reads, kept tile by tile in per-thread
 * buffers, gives the epilogue the same bytes and leaves C alone. Operands
 * whose row stride is a multiple of 1 KiB are copied at another stride
 * (gemm_restride.h), forced on here, with the same checks. (The session-level
 * determinism checks of test_ops and test_models reach the same path
 * through matmul nodes; this pins it down where the split happens.) */
#include "common.h"

#include "runtime/cpu/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
  const char *name;
  int64_t m, n, k, batch;
  bool ta, tb;
  int64_t epilogue_rows;
  int64_t tasks; /* expected: 1 on the calling thread, else the tile count */
  bool matmul;   /* expected: tiles on oneDNN's matmul primitive */
  bool restride; /* expected: A or B copied at another row stride (main forces the copy on) */
  bool shared_b; /* every batch element reads the same B (broadcast) */
} shape;

/* Tiles stop at 64 rows x 128 columns (gemm.c): a skinny product splits
 * its columns first, and odd sizes leave tails in both directions. */
/* A deep product with B transposed runs on the matmul primitive: tiles
 * narrower than C (copied out), whole rows (an epilogue's), tails, batches. */
static const shape shapes[] = {
    {"plain", 130, 70, 200, 1, false, false, 0, 2, false, false, false},
    {"trans_a trans_b", 130, 70, 200, 1, true, true, 0, 2, false, false, false},
    {"batched", 64, 80, 96, 4, false, false, 0, 4, false, false, false},
    {"epilogue", 128, 96, 128, 1, false, false, 16, 8, false, false, false},
    {"small", 16, 16, 16, 1, false, false, 0, 1, false, false, false},
    {"skinny tails", 100, 1000, 300, 1, false, false, 0, 8, false, false, false},
    {"skinny trans_b", 100, 1000, 300, 1, false, true, 0, 8, false, false, false},
    {"skinny trans_a", 100, 1000, 300, 1, true, false, 0, 8, false, false, false},
    {"deep trans_b", 100, 1000, 600, 1, false, true, 0, 8, true, false, false},
    {"trans_b epilogue", 100, 200, 520, 1, false, true, 32, 4, true, false, false},
    {"one row", 1, 1100, 4800, 1, false, true, 0, 6, true, false, false},
    {"batched trans_b", 40, 300, 520, 3, false, true, 0, 6, true, false, false},
    {"batched tails", 70, 300, 260, 3, false, false, 0, 6, false, false, false},
    {"batched epilogue", 70, 96, 200, 3, false, false, 32, 9, false, false, false},
    {"restride B", 160, 256, 192, 1, false, false, 0, 4, false, true, false},
    {"restride A and B", 256, 256, 160, 1, true, false, 0, 8, false, true, false},
    {"restride epilogue", 160, 256, 192, 1, false, false, 32, 5, false, true, false},
    {"batched restride", 64, 256, 128, 3, false, false, 0, 6, false, true, false},
    {"batched restride A", 256, 256, 64, 3, true, false, 0, 12, false, true, false},
    {"shared restride", 64, 256, 128, 3, false, false, 0, 6, false, true, true},
    /* A^T rows 4 KiB apart repay the copy over 32 columns, 2 KiB ones not over 128 */
    {"thin restride A", 1024, 32, 512, 1, true, false, 0, 8, false, true, false},
    /* a transposed A at least 64 x 64 copied to [M, K] first (then not
     * restrided: 128 floats a row); tails off the copy's steps, and under
     * an epilogue */
    {"thin A transposed", 512, 128, 128, 1, true, false, 0, 8, false, false, false},
    {"trans_a copied", 150, 70, 515, 1, true, false, 0, 2, false, false, false},
    {"trans_a epilogue", 130, 96, 600, 1, true, false, 32, 5, false, false, false},
    /* a transposed B copied to [K, N] first: under many epilogue blocks,
     * and under 1024 rows or more; sizes off the copy's 4 x 4 steps */
    {"trans_b blocks", 150, 70, 515, 1, false, true, 16, 10, true, false, false},
    {"trans_b copied", 1030, 70, 515, 1, false, true, 0, 11, true, false, false},
};

/* The epilogue: tanh over whole rows of C, in place (row_len = n). */
typedef struct epi_user {
  float *c;
  int64_t n;
} epi_user;

static void epi_tanh(void *user, int32_t thread, int64_t r0, int64_t r1) {
  (void)thread;
  epi_user *u = user;
  for (int64_t i = r0 * u->n; i < r1 * u->n; i++) u->c[i] = tanhf(u->c[i]);
}

/* The epilogue of a product only it reads (loom_gemm_epilogue.tiles):
 * tanh of the rows where `at` said they are, into out. */
typedef struct tile_user {
  float *out;
  int64_t n;
  const float *rows[4]; /* per thread: where the rows from row0[] are */
  int64_t row0[4];
  int64_t in_tiles;     /* calls on rows in a tile */
  const float *c;       /* the product, for calls on rows that are there */
} tile_user;

static void tile_at(void *user, int32_t thread, int64_t row0, const float *rows) {
  tile_user *u = user;
  u->rows[thread] = rows ? rows : u->c + row0 * u->n;
  u->row0[thread] = row0;
#pragma omp atomic
  u->in_tiles += rows != NULL;
}

static void tile_tanh(void *user, int32_t thread, int64_t r0, int64_t r1) {
  tile_user *u = user;
  const float *x = u->rows[thread] - u->row0[thread] * u->n;
  for (int64_t i = r0 * u->n; i < r1 * u->n; i++) u->out[i] = tanhf(x[i]);
}

/* p (its epilogue's result in want) again with its tiles kept in
 * per-thread buffers: on 1-3 threads, the epilogue's output is want's
 * bytes, every call read a tile, and C was not written. */
static void test_tiles(loom_ctx *ctx, const shape *s, loom_gemm *p, const float *want,
                       int64_t c_n) {
  int64_t floats = loom_gemm_tile_c(p);
  CHECK(floats == LOOM_MIN(s->epilogue_rows, s->m) * s->n);
  float *tiles = malloc(sizeof(float) * (size_t)(3 * floats));
  float *out = malloc(sizeof(float) * (size_t)c_n), *c = malloc(sizeof(float) * (size_t)c_n);
  loom_gemm q = *p;
  q.c = c;
  for (int t = 0; t < 3; t++) {
    tile_user u = {.out = out, .n = s->n, .c = c};
    memset(c, 0xa5, sizeof(float) * (size_t)c_n);
    memset(out, 0, sizeof(float) * (size_t)c_n);
    q.epilogue = (loom_gemm_epilogue){.rows = s->epilogue_rows, .fn = tile_tanh, .user = &u,
                                      .tiles = tiles, .tile_floats = floats, .threads = t + 1,
                                      .at = tile_at};
    CHECK_OK(ctx, loom_gemm_f32(ctx, t + 1, &q));
    bool c_kept = true;
    for (int64_t i = 0; i < c_n; i++) {
      uint32_t w;
      memcpy(&w, &c[i], sizeof w);
      c_kept &= w == 0xa5a5a5a5u;
    }
    int64_t calls = (s->batch * s->m + s->epilogue_rows - 1) / s->epilogue_rows;
    if (s->batch > 1) calls = s->batch * ((s->m + s->epilogue_rows - 1) / s->epilogue_rows);
    printf("gemm %-16s tiles in buffers, %d threads: %s, %lld of %lld calls on tiles, C %s\n",
           s->name, t + 1,
           memcmp(out, want, sizeof(float) * (size_t)c_n) == 0 ? "equal" : "DIFFER",
           (long long)u.in_tiles, (long long)calls, c_kept ? "untouched" : "WRITTEN");
    CHECK(memcmp(out, want, sizeof(float) * (size_t)c_n) == 0);
    CHECK(u.in_tiles == calls);
    CHECK(c_kept);
  }
  /* a buffer too small, or too few: the tiles go to C, the calls say so */
  q.epilogue.tile_floats = floats - 1;
  tile_user u = {.out = out, .n = s->n, .c = c};
  q.epilogue.user = &u;
  memset(out, 0, sizeof(float) * (size_t)c_n);
  CHECK_OK(ctx, loom_gemm_f32(ctx, 2, &q));
  CHECK(u.in_tiles == 0 && memcmp(out, want, sizeof(float) * (size_t)c_n) == 0);
  free(tiles);
  free(out);
  free(c);
}

/* p (computed unpacked into want) again with B packed: on 1 and 2
 * threads into c1, c2, equal to each other and close to want; and with a
 * pack whose B has moved, exactly want (the pack is not used). */
static void test_packed(loom_ctx *ctx, const shape *s, loom_gemm *p, const float *want, int64_t c_n,
                        float *c1, float *c2, epi_user *u) {
  loom_gemm_packed_b *pb = NULL;
  CHECK_OK(ctx, loom_gemm_pack_b(ctx, p, &pb));
  /* packed where the primitive wins (big, A as stored, B transposed or
   * the product short), or else where B is restrided (a copy at another
   * row stride, its rows a multiple of 1 KiB; batched products restride
   * on every call) */
  double flops = 2.0 * (double)(s->batch * s->m * s->n * s->k);
  bool expect = (!s->ta && (s->tb || s->m <= 256) && flops >= 1e7 && loom_gemm_can_pack()) ||
                (s->restride && !s->tb && s->batch == 1 && s->n * 4 % 1024 == 0);
  if ((pb != NULL) != expect)
    fprintf(stderr, "gemm %s: packed %d, expected %d\n", s->name, pb != NULL, expect);
  CHECK((pb != NULL) == expect);
  if (!pb) return;
  p->b_packed = pb;
  float *cs[2] = {c1, c2};
  for (int t = 0; t < 2; t++) {
    memset(cs[t], 0, sizeof(float) * (size_t)c_n);
    p->c = u->c = cs[t];
    CHECK_OK(ctx, loom_gemm_f32(ctx, t + 1, p));
  }
  bool same = memcmp(c1, c2, sizeof(float) * (size_t)c_n) == 0;
  double worst = 0;
  for (int64_t i = 0; i < c_n; i++) worst = fmax(worst, fabs((double)c1[i] - want[i]));
  /* B changed in place: the pack still holds the old one (its owner must
   * drop it), which shows that the packed run read the pack */
  float *b = (float *)p->b;
  int64_t b_n = s->batch * s->k * s->n;
  for (int64_t i = 0; i < b_n; i++) b[i] = -b[i];
  p->c = u->c = c2;
  CHECK_OK(ctx, loom_gemm_f32(ctx, 2, p));
  bool read_pack = memcmp(c1, c2, sizeof(float) * (size_t)c_n) == 0;
  for (int64_t i = 0; i < b_n; i++) b[i] = -b[i];
  CHECK(read_pack);
  /* a B elsewhere (the same values): the pack describes another operand */
  float *b2 = malloc(sizeof(float) * (size_t)(s->batch * s->k * s->n));
  memcpy(b2, p->b, sizeof(float) * (size_t)(s->batch * s->k * s->n));
  const float *b_was = p->b;
  p->b = b2;
  p->c = u->c = c2;
  CHECK_OK(ctx, loom_gemm_f32(ctx, 2, p));
  bool ignored = memcmp(c2, want, sizeof(float) * (size_t)c_n) == 0;
  printf("gemm %-16s packed B %.2f MB: 1/2 threads %s, vs unpacked %.2g, %s, moved B %s\n",
         s->name, (double)loom_gemm_packed_b_bytes(pb) / 1e6, same ? "equal" : "DIFFER", worst,
         read_pack ? "reads the pack" : "DOES NOT READ THE PACK", ignored ? "unpacked" : "WRONG");
  CHECK(same);
  CHECK(worst <= 2e-6 * (double)s->k);
  CHECK(ignored);
  p->b = b_was;
  p->b_packed = NULL;
  free(b2);
  loom_gemm_packed_b_free(pb);
}

static void test_shape(loom_ctx *ctx, const shape *s, loom_test_rng *rng) {
  int64_t a_n = s->batch * s->m * s->k, b_n = s->batch * s->k * s->n, c_n = s->batch * s->m * s->n;
  float *a = malloc(sizeof(float) * (size_t)a_n), *b = malloc(sizeof(float) * (size_t)b_n);
  float *c[3];
  int64_t *off = malloc(sizeof(int64_t) * 2 * (size_t)s->batch);
  for (int64_t i = 0; i < a_n; i++) a[i] = (float)loom_test_uniform(rng, -1, 1);
  for (int64_t i = 0; i < b_n; i++) b[i] = (float)loom_test_uniform(rng, -1, 1);
  for (int64_t i = 0; i < s->batch; i++) {
    off[i] = i * s->m * s->k;
    off[s->batch + i] = s->shared_b ? 0 : i * s->k * s->n;
  }
  for (int t = 0; t < 3; t++) c[t] = calloc((size_t)c_n, sizeof(float));
  loom_gemm p = {.trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k,
                 .batch = s->batch, .a = a, .lda = s->ta ? s->m : s->k,
                 .a_off = s->batch > 1 ? off : NULL, .b = b, .ldb = s->tb ? s->k : s->n,
                 .b_off = s->batch > 1 ? off + s->batch : NULL, .ldc = s->n,
                 .c_stride = s->m * s->n};
  epi_user u = {NULL, s->n};
  if (s->epilogue_rows)
    p.epilogue = (loom_gemm_epilogue){.rows = s->epilogue_rows, .fn = epi_tanh, .user = &u};
  int64_t tasks = loom_gemm_parallel_tasks(&p);
  if (tasks != s->tasks)
    fprintf(stderr, "gemm %s: %lld tasks, expected %lld\n", s->name, (long long)tasks,
            (long long)s->tasks);
  CHECK(tasks == s->tasks);
  CHECK(loom_gemm_uses_matmul(&p) == s->matmul);
  CHECK(loom_gemm_restrides(&p) == s->restride);
  for (int t = 0; t < 3; t++) {
    p.c = u.c = c[t];
    CHECK_OK(ctx, loom_gemm_f32(ctx, t + 1, &p));
  }
  bool same = memcmp(c[0], c[1], sizeof(float) * (size_t)c_n) == 0 &&
              memcmp(c[0], c[2], sizeof(float) * (size_t)c_n) == 0;
  if (!same) fprintf(stderr, "gemm %s: results differ between 1, 2 and 3 threads\n", s->name);
  CHECK(same);
  /* against a double product: f32 sums of k terms, |a|, |b| <= 1 */
  double worst = 0;
  for (int64_t bi = 0; bi < s->batch; bi++)
    for (int64_t i = 0; i < s->m; i++)
      for (int64_t j = 0; j < s->n; j++) {
        double acc = 0;
        for (int64_t q = 0; q < s->k; q++) {
          double x = a[off[bi] + (s->ta ? q * s->m + i : i * s->k + q)];
          double y = b[off[s->batch + bi] + (s->tb ? j * s->k + q : q * s->n + j)];
          acc += x * y;
        }
        if (s->epilogue_rows) acc = tanh(acc);
        worst = fmax(worst, fabs(acc - c[0][(bi * s->m + i) * s->n + j]));
      }
  printf("gemm %-16s %3lldx%3lldx%3lld batch %lld: %lld parallel tasks, 1/2/3 threads %s, "
         "error %.2g%s%s\n",
         s->name, (long long)s->m, (long long)s->n, (long long)s->k, (long long)s->batch,
         (long long)tasks, same ? "equal" : "DIFFER", worst, s->matmul ? ", matmul primitive" : "",
         s->restride ? ", restrided" : "");
  CHECK(worst <= 1e-6 * (double)s->k);
  if (s->restride) { /* copies kept in a scratch across calls: the same bytes */
    loom_gemm_scratch scratch = {0};
    p.scratch = &scratch;
    bool kept = true;
    for (int call = 0; call < 2; call++) {
      memset(c[1], 0, sizeof(float) * (size_t)c_n);
      p.c = u.c = c[1];
      CHECK_OK(ctx, loom_gemm_f32(ctx, 2, &p));
      kept = kept && memcmp(c[0], c[1], sizeof(float) * (size_t)c_n) == 0;
    }
    printf("gemm %-16s scratch %.2f MB kept across calls: %s\n", s->name,
           (double)scratch.floats * 4e-6, kept ? "equal" : "DIFFER");
    CHECK(kept && scratch.floats > 0);
    loom_gemm_scratch_free(&scratch);
    p.scratch = NULL;
  }
  if (s->epilogue_rows) test_tiles(ctx, s, &p, c[0], c_n);
  test_packed(ctx, s, &p, c[0], c_n, c[1], c[2], &u);
  for (int t = 0; t < 3; t++) free(c[t]);
  free(a);
  free(b);
  free(off);
}

int main(void) {
  /* restriding on, as on a machine whose probe found it pays */
  setenv("LOOM_GEMM_RESTRIDE", "1", 1);
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_test_rng rng = {2024};
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(shapes); i++) test_shape(ctx, &shapes[i], &rng);
  loom_ctx_free(ctx);
  return loom_test_finish("test_gemm");
}

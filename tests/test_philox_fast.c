/* The fast Philox paths (rng/philox_fast.h) on every path this CPU runs:
 * Random123's known answers at every lane position, equality with the
 * reference loom_philox4x32 over long counter ranges (crossing 2^32 and
 * 2^64), and the dropout apply and mask bits against loom_dropout_keep.
 * Paths the CPU lacks are reported as skipped. Also the cpu backend's
 * dropout kernel (which uses the fast paths) against the reference kernel,
 * bit for bit, at several thread counts. LOOM_TEST_QUICK=1 shrinks the
 * long ranges (the sanitizer build). */
#include "common.h"

#include "ir/graph.h"
#include "ir/view.h"
#include "ops/op.h"
#include "rng/philox.h"
#include "rng/philox_fast.h"
#include "runtime/cpu/cpu.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool quick;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void test_paths(void) {
  CHECK(loom_philox_path_count() == LOOM_PHILOX_PATH_COUNT);
  for (int p = 0; p < loom_philox_path_count(); p++) {
    const char *name = loom_philox_path_name(p);
    CHECK(name != NULL);
    if (name) CHECK(loom_philox_path_by_name(name) == p);
  }
  CHECK(loom_philox_path_name(-1) == NULL);
  CHECK(loom_philox_path_name(LOOM_PHILOX_PATH_COUNT) == NULL);
  CHECK(loom_philox_path_by_name("best") == LOOM_PHILOX_PATH_BEST);
  CHECK(loom_philox_path_by_name("sse9") == -1);
  CHECK(loom_philox_path_by_name(NULL) == -1);
  CHECK(loom_philox_path_supported(LOOM_PHILOX_PATH_REF));
  CHECK(loom_philox_path_supported(LOOM_PHILOX_PATH_PORTABLE));
  CHECK(!loom_philox_path_supported(LOOM_PHILOX_PATH_COUNT));
  int best = loom_philox_best_path();
  CHECK(best >= LOOM_PHILOX_PATH_PORTABLE && loom_philox_path_supported(best));
  /* bad arguments are refused and write nothing */
  uint32_t out[4] = {1, 2, 3, 4};
  CHECK(!loom_philox_blocks(LOOM_PHILOX_PATH_COUNT, 0, 0, 1, 10, out));
  CHECK(!loom_philox_blocks(-2, 0, 0, 1, 10, out));
  CHECK(!loom_philox_blocks(LOOM_PHILOX_PATH_REF, 0, 0, 1, -1, out));
  CHECK(!loom_philox_blocks(LOOM_PHILOX_PATH_REF, 0, 0, 1, LOOM_PHILOX_MAX_ROUNDS + 1, out));
  CHECK(out[0] == 1 && out[3] == 4);
  CHECK(loom_philox_blocks(LOOM_PHILOX_PATH_BEST, 0, 0, 0, 10, out)); /* no blocks: nothing */
  CHECK(out[0] == 1);
  for (int p = 0; p < LOOM_PHILOX_PATH_COUNT; p++)
    if (!loom_philox_path_supported(p)) {
      float x = 1.0f, y = 2.0f;
      uint8_t b = 7;
      CHECK(!loom_philox_blocks(p, 0, 0, 1, 10, out));
      CHECK(!loom_dropout_apply_f32_path(p, 0, 0, 1, 0, 1.0, &x, &y));
      CHECK(!loom_dropout_mask_bits_path(p, 0, 0, 1, 0, &b));
      CHECK(y == 2.0f && b == 7 && out[0] == 1);
    }
}

/* Each known answer, placed at every lane position of a 40-block run (so
 * every vector lane and the tails see it), on path p. */
static void test_kat(int p) {
  FILE *f = fopen(LOOM_TEST_DATA "/philox_kat.txt", "r");
  CHECK(f != NULL);
  if (!f) return;
  enum { SPAN = 40 };
  char line[512];
  int n10 = 0, n7 = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n' || line[0] == '\0') continue;
    int rounds;
    unsigned c[4], k[2], e[4];
    if (sscanf(line, "%d %x %x %x %x %x %x %x %x %x %x", &rounds, &c[0], &c[1], &c[2], &c[3], &k[0],
               &k[1], &e[0], &e[1], &e[2], &e[3]) != 11) {
      CHECK(!"malformed known-answer line");
      continue;
    }
    n10 += rounds == 10;
    n7 += rounds == 7;
    uint64_t b = (uint64_t)c[0] | (uint64_t)c[1] << 32;
    uint32_t key[2] = {k[0], k[1]}, out[4 * (SPAN + 2) + 1];
    int bad = 0;
    for (int lane = 0; lane < SPAN; lane++) {
      int64_t n = SPAN + (lane % 3); /* odd and even lengths */
      out[4 * n] = 0xdeadbeefu;
      CHECK(loom_philox_blocks_ctr(p, key, c[2], c[3], b - (uint64_t)lane, n, rounds, out));
      for (int w = 0; w < 4; w++)
        bad += out[4 * lane + w] != (uint32_t)e[w];
      bad += out[4 * n] != 0xdeadbeefu; /* nothing past the end */
    }
    CHECK(bad == 0);
    if (bad) fprintf(stderr, "  %s: known answer rounds %d ctr %08x: %d mismatches\n",
                     loom_philox_path_name(p), rounds, c[0], bad);
  }
  fclose(f);
  CHECK(n10 == 3 && n7 == 3);
}

/* Blocks on path p equal the reference over long ranges, including ranges
 * whose counters cross 2^32 (hi word carry) and 2^64 (wrap to 0). */
static void test_long_ranges(int p) {
  int64_t n = quick ? 50000 : 1000000;
  uint32_t *got = malloc(sizeof(uint32_t) * 4 * (size_t)n);
  uint32_t *want = malloc(sizeof(uint32_t) * 4 * (size_t)n);
  CHECK(got && want);
  if (!got || !want) {
    free(got);
    free(want);
    return;
  }
  const uint64_t seeds[4] = {0, 0x0123456789abcdefull, 0xffffffffffffffffull, 42};
  const uint64_t starts[4] = {0, (UINT64_C(1) << 32) - (uint64_t)n / 2 - 3,
                              (uint64_t)0 - (uint64_t)n / 2 - 5, 0x00000007fffffff1ull};
  for (int t = 0; t < 4; t++) {
    int rounds = t == 1 ? 7 : 10;
    if (t == 3) rounds = 7;
    uint32_t key[2] = {(uint32_t)seeds[t], (uint32_t)(seeds[t] >> 32)};
    for (int64_t i = 0; i < n; i++) {
      uint64_t b = starts[t] + (uint64_t)i;
      uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
      loom_philox4x32(ctr, key, rounds, want + 4 * i);
    }
    CHECK(loom_philox_blocks(p, seeds[t], starts[t], n, rounds, got));
    int64_t first = -1;
    for (int64_t i = 0; i < 4 * n && first < 0; i++)
      if (got[i] != want[i]) first = i;
    CHECK(first < 0);
    if (first >= 0)
      fprintf(stderr, "  %s: range %d (rounds %d) first differs at word %lld\n",
              loom_philox_path_name(p), t, rounds, (long long)first);
  }
  /* other round counts take the generic (not unrolled) code */
  const int other[4] = {0, 1, 5, LOOM_PHILOX_MAX_ROUNDS};
  for (int r = 0; r < 4; r++) {
    int64_t m = 77;
    uint32_t key[2] = {0x9abcdef0u, 0x12345678u};
    for (int64_t i = 0; i < m; i++) {
      uint64_t b = UINT64_C(0xfffffffffffffff0) + (uint64_t)i;
      uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
      loom_philox4x32(ctr, key, other[r], want + 4 * i);
    }
    CHECK(loom_philox_blocks(p, 0x123456789abcdef0ull, UINT64_C(0xfffffffffffffff0), m, other[r],
                             got));
    CHECK(memcmp(got, want, sizeof(uint32_t) * 4 * (size_t)m) == 0);
  }
  free(got);
  free(want);
}

/* x values for dropout: random over many exponents, plus zeros of both
 * signs, infinities, NaN, subnormals and the extremes. */
static void fill_x(float *x, int64_t n, uint64_t s) {
  const float special[10] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MIN / 4, -FLT_MIN / 3,
                             FLT_MAX, -FLT_MAX, 1.0f};
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix(&s);
    if (r % 17 == 0) {
      x[i] = special[(r >> 8) % 10];
    } else {
      float m = (float)((double)(r >> 40) / 16777216.0 + 1.0);
      int e = (int)((r >> 8) % 40) - 20;
      x[i] = ldexpf((r >> 20) & 1 ? -m : m, e);
    }
  }
}

/* Same float, NaNs equal. */
static bool same_f32(float a, float b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static void test_dropout(int p) {
  enum { MAXN = 2100 };
  static float x[MAXN], y[MAXN + 1], yi[MAXN];
  static uint8_t bits[MAXN / 8 + 2];
  const double ps[5] = {0.0, 0.1, 0.5, 0.9999, 1.0};
  const uint64_t seeds[2] = {7, 0xfedcba9876543210ull};
  const uint64_t j0s[6] = {0, 1, 3, (UINT64_C(1) << 32) * 4 - 517, (uint64_t)0 - 1003,
                           0x123456789ull};
  const int64_t ns[7] = {0, 1, 5, 31, 257, 1001, MAXN};
  fill_x(x, MAXN, 99);
  int bad_y = 0, bad_bits = 0, bad_edge = 0, runs = 0;
  for (int pi = 0; pi < 5; pi++)
    for (int si = 0; si < 2; si++)
      for (int ji = 0; ji < 6; ji++)
        for (int ni = 0; ni < 7; ni++) {
          uint64_t thr = loom_dropout_threshold(ps[pi]), seed = seeds[si], j0 = j0s[ji];
          double div = ps[pi] < 1.0 ? 1.0 - ps[pi] : 1.0;
          int64_t n = ns[ni];
          y[n] = 12345.0f;
          memset(bits, 0xa5, sizeof bits);
          CHECK(loom_dropout_apply_f32_path(p, seed, j0, n, thr, div, x, y));
          CHECK(loom_dropout_mask_bits_path(p, seed, j0, n, thr, bits));
          for (int64_t k = 0; k < n; k++) {
            bool keep = loom_dropout_keep(seed, j0 + (uint64_t)k, thr);
            float want = keep ? (float)((double)x[k] / div) : 0.0f;
            bad_y += !same_f32(y[k], want);
            bad_bits += ((bits[k / 8] >> (k % 8)) & 1) != keep;
          }
          int64_t nbytes = (n + 7) / 8;
          if (n % 8) bad_edge += (bits[nbytes - 1] >> (n % 8)) != 0; /* unused bits are 0 */
          bad_edge += bits[nbytes] != 0xa5;
          bad_edge += y[n] != 12345.0f;
          runs++;
        }
  CHECK(bad_y == 0);
  CHECK(bad_bits == 0);
  CHECK(bad_edge == 0);
  if (bad_y || bad_bits || bad_edge)
    fprintf(stderr, "  %s: dropout over %d runs: %d values, %d bits, %d edges differ\n",
            loom_philox_path_name(p), runs, bad_y, bad_bits, bad_edge);
  /* in place (y == x) and the best-path entry points give the same */
  uint64_t thr = loom_dropout_threshold(0.3);
  memcpy(yi, x, sizeof x);
  CHECK(loom_dropout_apply_f32_path(p, 5, 13, MAXN, thr, 0.7, yi, yi));
  loom_dropout_apply_f32(5, 13, MAXN, thr, 0.7, x, y);
  int same = 0;
  for (int k = 0; k < MAXN; k++)
    same += same_f32(yi[k], y[k]);
  CHECK(same == MAXN);
  static uint8_t best_bits[MAXN / 8 + 1];
  CHECK(loom_dropout_mask_bits_path(p, 5, 13, MAXN, thr, bits));
  loom_dropout_mask_bits(5, 13, MAXN, thr, best_bits);
  CHECK(memcmp(bits, best_bits, sizeof best_bits) == 0);
}

/* The vector paths divide by multiplying with 1 / div and correcting with
 * an FMA; it must round exactly like (float)((double)x / div) for any x and
 * div, including divisors with an all-ones significand. */
static void test_exact_division(int p) {
  int64_t n = quick ? 4096 : 1 << 16;
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  CHECK(x && y);
  if (!x || !y) {
    free(x);
    free(y);
    return;
  }
  double divs[16] = {0.9, 0.7, 0.5, 1.0 - 1.0 / 3.0, 0.99, 1.0 - 1e-7, 1e-6, 1.0,
                     nextafter(1.0, 0.0), 1.0 - ldexp(1.0, -30), 0.1};
  uint64_t s = 1234;
  for (int d = 11; d < 16; d++)
    divs[d] = (double)(splitmix(&s) >> 11) / 9007199254740992.0 + 1e-9;
  int bad = 0;
  for (int d = 0; d < 16; d++) {
    fill_x(x, n, (uint64_t)d + 1000);
    for (int64_t i = 0; i < n; i += 7) /* some x next to 1 and 2 too */
      x[i] = nextafterf((float)(1 + (i & 1)), (float)(i & 2));
    CHECK(loom_dropout_apply_f32_path(p, 3, 0, n, 0, divs[d], x, y));
    for (int64_t i = 0; i < n; i++)
      bad += !same_f32(y[i], (float)((double)x[i] / divs[d]));
  }
  CHECK(bad == 0);
  if (bad) fprintf(stderr, "  %s: %d quotients differ\n", loom_philox_path_name(p), bad);
  free(x);
  free(y);
}

/* The cpu backend's dropout kernel, over several tasks and threads, with
 * an unaligned offset and a runtime base, equals the reference kernel and
 * the definition bit for bit. */
static void test_cpu_kernel(loom_ctx *ctx) {
  const int64_t rows = 37, cols = 1003, n = rows * cols; /* 4.5 tasks of LOOM_CPU_CHUNK */
  loom_graph *g = NULL;
  loom_value x, base, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){rows, cols}, &x));
  CHECK_OK(ctx, loom_graph_input(g, "base", LOOM_DTYPE_I64, 0, NULL, &base));
  loom_attr attrs[3] = {{.name = "p", .kind = LOOM_ATTR_FLOAT, .f = 0.3},
                        {.name = "seed", .kind = LOOM_ATTR_INT, .i = -5}, /* 2^64 - 5 */
                        {.name = "offset", .kind = LOOM_ATTR_INT, .i = 77}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_DROPOUT, 2, (loom_value[]){x, base}, 3, attrs, &y));
  loom_cpu_kernel k = g->n_nodes == 1 ? loom_cpu_index_kernel(g, &g->nodes[0]) : NULL;
  CHECK(k != NULL);
  float *xd = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
  float *got = malloc(sizeof(float) * (size_t)n);
  if (k && xd && want && got) {
    int64_t b = 1000003;
    fill_x(xd, n, 5);
    loom_type tx = g->values[x].type, tb = g->values[base].type;
    loom_view in[2] = {loom_view_of(&tx, xd), loom_view_of(&tb, &b)};
    loom_view out_ref = loom_view_of(&tx, want), out = loom_view_of(&tx, got);
    CHECK_OK(ctx, loom_op_get(LOOM_OP_DROPOUT)->ref(ctx, &g->nodes[0], in, &out_ref));
    int bad_def = 0;
    uint64_t thr = loom_dropout_threshold(0.3);
    for (int64_t i = 0; i < n; i++) {
      bool keep = loom_dropout_keep((uint64_t)-5, (uint64_t)(b + 77 + i), thr);
      bad_def += !same_f32(want[i], keep ? (float)((double)xd[i] / 0.7) : 0.0f);
    }
    CHECK(bad_def == 0);
    for (int32_t nt = 1; nt <= 3; nt++) {
      loom_cpu c = {.ctx = ctx, .nt = nt};
      memset(got, 0xff, sizeof(float) * (size_t)n);
      CHECK_OK(ctx, k(&c, &g->nodes[0], in, &out));
      int bad = 0;
      for (int64_t i = 0; i < n; i++)
        bad += !same_f32(got[i], want[i]);
      CHECK(bad == 0);
      if (bad) fprintf(stderr, "  cpu dropout kernel, %d threads: %d values differ\n", nt, bad);
    }
  }
  free(xd);
  free(want);
  free(got);
  loom_graph_free(g);
}

int main(void) {
  const char *q = getenv("LOOM_TEST_QUICK");
  quick = q && atoi(q) != 0;
  test_paths();
  int tested = 0;
  for (int p = 0; p < loom_philox_path_count(); p++) {
    if (!loom_philox_path_supported(p)) {
      printf("test_philox_fast: path %s SKIPPED (not supported on this CPU)\n",
             loom_philox_path_name(p));
      continue;
    }
    test_kat(p);
    test_long_ranges(p);
    test_dropout(p);
    test_exact_division(p);
    printf("test_philox_fast: path %s tested\n", loom_philox_path_name(p));
    tested++;
  }
  CHECK(tested >= 2);
  loom_ctx *ctx = NULL;
  CHECK(loom_ctx_new(&ctx) == LOOM_STATUS_OK);
  if (ctx) test_cpu_kernel(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_philox_fast");
}

/* Philox4x32 known answers, the dropout threshold, keep rates, and the
 * dropout reference kernel's index-only mask. */
#include "common.h"

#include "ir/graph.h"
#include "ir/view.h"
#include "ops/op.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_kat(void) {
  FILE *f = fopen(LOOM_TEST_DATA "/philox_kat.txt", "r");
  CHECK(f != NULL);
  if (!f) return;
  char line[512];
  int n_vec = 0, n10 = 0, n7 = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n' || line[0] == '\0') continue;
    int rounds;
    unsigned c[4], k[2], e[4];
    int got = sscanf(line, "%d %x %x %x %x %x %x %x %x %x %x", &rounds, &c[0], &c[1], &c[2], &c[3],
                     &k[0], &k[1], &e[0], &e[1], &e[2], &e[3]);
    CHECK(got == 11);
    if (got != 11) continue;
    uint32_t ctr[4] = {c[0], c[1], c[2], c[3]}, key[2] = {k[0], k[1]}, out[4];
    loom_philox4x32(ctr, key, rounds, out);
    for (int w = 0; w < 4; w++) {
      CHECK(out[w] == (uint32_t)e[w]);
      if (out[w] != (uint32_t)e[w])
        fprintf(stderr, "  rounds %d vector %d word %d: got %08x want %08x\n", rounds, n_vec, w,
                out[w], e[w]);
    }
    n_vec++;
    n10 += rounds == 10;
    n7 += rounds == 7;
  }
  fclose(f);
  CHECK(n_vec == 6);
  CHECK(n10 == 3);
  CHECK(n7 == 3);
}

/* loom_dropout_word must be word j%4 of Philox-10 on block j/4. */
static void test_word_layout(void) {
  uint64_t seed = 0x0123456789abcdefull, j = (UINT64_C(5) << 32) * 4 + 4 * 7 + 2;
  uint32_t ctr[4] = {7, 5, 0, 0}, key[2] = {0x89abcdefu, 0x01234567u}, out[4];
  loom_philox4x32(ctr, key, 10, out);
  CHECK(loom_dropout_word(seed, j) == out[2]);
  CHECK(loom_dropout_word(seed, j + 1) == out[3]);
}

static void test_threshold(void) {
  CHECK(loom_dropout_threshold(0.0) == 0);
  CHECK(loom_dropout_threshold(0.5) == (UINT64_C(1) << 31));
  CHECK(loom_dropout_threshold(0.25) == (UINT64_C(1) << 30));
  CHECK(loom_dropout_threshold(1.0) == (UINT64_C(1) << 32));
  /* largest double below 1: floor((1 - 2^-53) * 2^32) = 2^32 - 1 */
  double p_hi = nextafter(1.0, 0.0);
  CHECK(loom_dropout_threshold(p_hi) == (UINT64_C(1) << 32) - 1);
  /* p = 0 keeps every position, even a word of 0 */
  int kept = 0;
  for (uint64_t j = 0; j < 4096; j++)
    kept += loom_dropout_keep(7, j, 0);
  CHECK(kept == 4096);
  /* p close to 1 keeps only the word 0xffffffff; p = 1 keeps nothing */
  int kept_hi = 0, kept_one = 0;
  for (uint64_t j = 0; j < 4096; j++) {
    bool k = loom_dropout_keep(7, j, loom_dropout_threshold(p_hi));
    kept_hi += k;
    if (k) CHECK(loom_dropout_word(7, j) == 0xffffffffu);
    kept_one += loom_dropout_keep(7, j, loom_dropout_threshold(1.0));
  }
  CHECK(kept_hi <= 1); /* 4096 draws at 2^-32 each */
  CHECK(kept_one == 0);
}

static void test_keep_rate(void) {
  const double ps[2] = {0.1, 0.5};
  for (int t = 0; t < 2; t++) {
    uint64_t thr = loom_dropout_threshold(ps[t]);
    int64_t kept = 0, n = 1000000;
    for (int64_t j = 0; j < n; j++)
      kept += loom_dropout_keep(1234, (uint64_t)j, thr);
    double frac = (double)kept / (double)n;
    CHECK(fabs(frac - (1.0 - ps[t])) < 0.002);
    if (fabs(frac - (1.0 - ps[t])) >= 0.002)
      fprintf(stderr, "  p=%g kept fraction %f\n", ps[t], frac);
  }
}

/* Runs the dropout reference kernel on n floats x -> y. */
static loom_status run_dropout(loom_ctx *ctx, const float *x, float *y, int64_t n, double p,
                               int64_t seed, int64_t offset, const int64_t *base) {
  loom_node node;
  memset(&node, 0, sizeof node);
  node.op = LOOM_OP_DROPOUT;
  node.n_in = base ? 2 : 1;
  node.n_out = 1;
  loom_attrs_default(LOOM_OP_DROPOUT, node.attr);
  LOOM_ATTR_F(&node, dropout, p) = p;
  LOOM_ATTR_I(&node, dropout, seed) = seed;
  LOOM_ATTR_I(&node, dropout, offset) = offset;
  loom_type tx = {.dtype = LOOM_DTYPE_F32, .rank = 1, .shape = {n}};
  loom_type tb = {.dtype = LOOM_DTYPE_I64, .rank = 0};
  loom_view in[2] = {loom_view_of(&tx, (void *)x), loom_view_of(&tb, (void *)base)};
  loom_view out = loom_view_of(&tx, y);
  return loom_op_get(LOOM_OP_DROPOUT)->ref(ctx, &node, in, &out);
}

static void test_dropout_ref(loom_ctx *ctx) {
  enum { N = 1000 };
  static float x[N], whole[N], parts[N], based[N];
  loom_test_rng rng = {42};
  for (int i = 0; i < N; i++)
    x[i] = (float)loom_test_uniform(&rng, 0.5, 2.0);
  const double p = 0.3;
  const int64_t seed = 99;
  CHECK_OK(ctx, run_dropout(ctx, x, whole, N, p, seed, 0, NULL));
  CHECK_OK(ctx, run_dropout(ctx, x, parts, 400, p, seed, 0, NULL));
  CHECK_OK(ctx, run_dropout(ctx, x + 400, parts + 400, N - 400, p, seed, 400, NULL));
  int same = 0, kept = 0, exact = 0;
  for (int i = 0; i < N; i++) {
    same += memcmp(&whole[i], &parts[i], sizeof(float)) == 0;
    bool k = loom_dropout_keep((uint64_t)seed, (uint64_t)i, loom_dropout_threshold(p));
    float want = k ? (float)((double)x[i] / (1.0 - p)) : 0.0f;
    kept += k;
    exact += whole[i] == want;
  }
  CHECK(same == N);
  CHECK(exact == N);
  CHECK(kept > 600 && kept < 800); /* ~700 expected */
  /* a runtime base shifts the counter like offset does: base 150 + offset 250 */
  int64_t base = 150;
  CHECK_OK(ctx, run_dropout(ctx, x + 400, based + 400, N - 400, p, seed, 250, &base));
  int same_b = 0;
  for (int i = 400; i < N; i++)
    same_b += based[i] == whole[i];
  CHECK(same_b == N - 400);
  /* a different seed gives a different mask */
  CHECK_OK(ctx, run_dropout(ctx, x, parts, N, p, seed + 1, 0, NULL));
  int diff = 0;
  for (int i = 0; i < N; i++)
    diff += (parts[i] == 0.0f) != (whole[i] == 0.0f);
  CHECK(diff > 100);
  /* p = 0 is the identity */
  CHECK_OK(ctx, run_dropout(ctx, x, parts, N, 0.0, seed, 0, NULL));
  int ident = 0;
  for (int i = 0; i < N; i++)
    ident += parts[i] == x[i];
  CHECK(ident == N);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_kat();
  test_word_layout();
  test_threshold();
  test_keep_rate();
  test_dropout_ref(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_philox");
}

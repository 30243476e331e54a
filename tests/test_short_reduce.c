/* Reductions over one short axis that is not the last
 * (passes/short_reduce.h): the pass unrolls exactly those (sum, max and
 * min; keepdims or not; a leading or middle axis; not a trailing one, a
 * longer one, or one of several axes), and the fusing modes then run the
 * grouped-query key gradient's sum as one element-wise kernel with the
 * reference's values. */
#include "common.h"

#include "passes/short_reduce.h"

#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static int32_t count_op(const loom_graph *g, loom_op op) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

/* Unrolls the graph in text; how many reductions it unrolled (-1: failed). */
static int32_t unrolled(const char *text, int32_t *slices, int32_t *reductions) {
  loom_graph *g = NULL, *u = NULL;
  int32_t n = -1;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (g) CHECK_OK(ctx, loom_graph_unroll_short_reductions(g, &u, &n));
  if (u) {
    CHECK_OK(ctx, loom_graph_verify(u));
    *slices = count_op(u, LOOM_OP_SLICE);
    *reductions = count_op(u, LOOM_OP_REDUCE_SUM) + count_op(u, LOOM_OP_REDUCE_MAX) +
                  count_op(u, LOOM_OP_REDUCE_MIN);
  }
  loom_graph_free(u);
  loom_graph_free(g);
  return n;
}

static void test_which(void) {
  static const struct {
    const char *text;
    int32_t n, slices;
  } cases[] = {
      {"input %x : f32[4, 3, 2, 5]\n%y = reduce_sum(%x, axes=[1])\noutput y = %y\n", 1, 3},
      {"input %x : f32[4, 3, 5]\n%y = reduce_max(%x, axes=[0], keepdims=true)\noutput y = %y\n", 1, 4},
      {"input %x : f32[4, 3, 5]\n%y = reduce_min(%x, axes=[-2])\noutput y = %y\n", 1, 3},
      {"input %x : f32[4, 8, 5]\n%y = reduce_sum(%x, axes=[1])\noutput y = %y\n", 1, 8},
      /* left as they are */
      {"input %x : f32[4, 9, 5]\n%y = reduce_sum(%x, axes=[1])\noutput y = %y\n", 0, 0},
      {"input %x : f32[4, 3, 5]\n%y = reduce_sum(%x, axes=[2])\noutput y = %y\n", 0, 0},
      {"input %x : f32[4, 3, 5]\n%y = reduce_sum(%x, axes=[0, 1])\noutput y = %y\n", 0, 0},
      {"input %x : f32[4, 3, 5]\n%y = reduce_sum(%x)\noutput y = %y\n", 0, 0},
      {"input %x : f32[4, 1, 5]\n%y = reduce_sum(%x, axes=[1])\noutput y = %y\n", 0, 0},
  };
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(cases); i++) {
    int32_t slices = -1, reductions = -1;
    int32_t n = unrolled(cases[i].text, &slices, &reductions);
    CHECK(n == cases[i].n);
    CHECK(slices == cases[i].slices);
    CHECK(reductions == 1 - cases[i].n);
  }
}

/* Grouped-query attention's key gradient summed over the 4 query heads of
 * each of 2 key heads: on the cpu backend's fusing modes one kernel with no
 * reduction in it, equal to the reference. */
static void test_grouped_sum(void) {
  static const char *text = "input %dk : f32[4, 64, 2, 4, 32]\n"
                            "%s = reduce_sum(%dk, axes=[3])\n"
                            "%t = mul(%s, %s)\n"
                            "output t = %t\n";
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return;
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 0x5eed);
  loom_session_options ro = LOOM_SESSION_OPTIONS(.backend = "ref");
  loom_tensor **want = loom_test_run(ctx, g, &ro, in);
  static const loom_fusion_mode modes[] = {LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  for (int32_t m = 0; m < 2 && want; m++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = modes[m]);
    loom_tensor **got = loom_test_run(ctx, g, &o, in);
    if (got) CHECK(loom_test_update_error(want[0], got[0], NULL) < 1e-5);
    loom_test_free_tensors(got, 1);
    loom_session *s = NULL;
    char *listing = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_PROGRAM, &listing));
    if (listing) {
      CHECK(strstr(listing, "reduce_sum") == NULL);
      const char *k = strstr(listing, "memory-intensive ops in ");
      CHECK(k && strncmp(k + strlen("memory-intensive ops in "), "1 kernels", 9) == 0);
    }
    loom_free(listing);
    loom_session_free(s);
  }
  loom_test_free_tensors(want, 1);
  loom_test_free_tensors(in, 1);
  loom_graph_free(g);
}

int main(void) {
  CHECK_OK(NULL, loom_ctx_new(&ctx));
  test_which();
  test_grouped_sum();
  loom_ctx_free(ctx);
  return loom_test_finish("test_short_reduce");
}

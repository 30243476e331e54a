/*
 * Group analysis without running anything: the bytes a group walks at a
 * stride, the per-graph index against the graph-scanning calls, groups
 * that are not one kernel (refused with a message, never a crash), and
 * two independent loops a session still computes in every mode.
 */
#include "lower_check.h"

#include "ir/build.h"

#include <stdlib.h>
#include <string.h>

static bool same_info(const loom_group_info *a, const loom_group_info *b) {
  return a->bytes_read == b->bytes_read && a->bytes_written == b->bytes_written &&
         a->rows == b->rows && a->row_len == b->row_len && a->n_parts == b->n_parts &&
         a->n_stages == b->n_stages && a->n_row_reduce == b->n_row_reduce &&
         a->n_col_reduce == b->n_col_reduce && a->n_scratch == b->n_scratch &&
         a->elem_ops == b->elem_ops && a->recompute_ops == b->recompute_ops &&
         a->strided_bytes == b->strided_bytes;
}

/* The bytes a group's rows walk at a stride (a transposed operand or
 * result), which the cost model charges more. */
static void case_strided(loom_ctx *ctx) {
  static const struct {
    const char *text;
    int64_t strided;
  } cases[] = {
      /* x + transpose(u): rows along x and y, u walked at a stride */
      {"input %x : f32[4, 24, 32]\ninput %u : f32[4, 32, 24]\n"
       "%t = transpose(%u, perm=[0, 2, 1])\n%y = add(%x, %t)\noutput y = %y\n",
       4 * 24 * 32 * 4},
      {"input %x : f32[4, 24, 32]\ninput %u : f32[4, 24, 32]\n"
       "%y = add(%x, %u)\noutput y = %y\n",
       0},
  };
  for (int32_t c = 0; c < LOOM_ARRAY_LEN(cases); c++) {
    loom_graph *g = NULL;
    CHECK_OK(ctx, loom_graph_parse(ctx, cases[c].text, &g));
    if (!g) continue;
    int32_t *gon = calloc((size_t)g->n_nodes, sizeof(int32_t));
    loom_group_info info;
    bool ok = gon && loom_fusion_group_analyze(g, gon, 0, LOOM_FUSION_STITCH, &info);
    CHECK(ok);
    if (ok) CHECK(info.strided_bytes == cases[c].strided);
    free(gon);
    loom_graph_free(g);
  }
}

/* The per-graph index answers as the graph-scanning calls do: every value's
 * materialization, and a group's analysis from its members in any order. */
static void case_index(loom_ctx *ctx) {
  loom_graph *g0 = NULL, *g = NULL;
  loom_graph_new(ctx, &g0);
  int64_t n = 6, h = 40, ax1 = 1;
  int64_t xs[2] = {n, h};
  int32_t x = loom_test_lower_input(g0, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = loom_test_lower_input(g0, "b", LOOM_DTYPE_F32, 1, &h);
  int32_t e = lb_unary(g0, LOOM_OP_EXP, lb_add(g0, x, b));
  int32_t s = lb_sum(g0, e, 1, &ax1, true);
  loom_graph_output(g0, "p", lb_div(g0, e, s));
  loom_graph_output(g0, "t", lb_unary(g0, LOOM_OP_TANH, e));
  CHECK_OK(ctx, loom_build_status(g0));
  CHECK_OK(ctx, loom_graph_decompose(g0, &g));
  loom_graph_free(g0);
  if (!g) return;
  loom_fusion_index *ix = NULL;
  CHECK_OK(ctx, loom_fusion_index_new(ctx, g, &ix));
  int32_t nn = g->n_nodes, *gon = malloc(sizeof(int32_t) * (size_t)nn);
  int32_t *mem = malloc(sizeof(int32_t) * (size_t)nn);
  /* the last node alone in group 1, the rest in group 0 */
  for (int32_t i = 0; i < nn; i++)
    gon[i] = i + 1 < nn ? 0 : 1;
  for (int32_t v = 0; v < g->n_values; v++)
    CHECK(loom_fusion_index_materialized(ix, gon, v) == loom_fusion_value_materialized(g, gon, v));
  for (int32_t i = 0; i + 1 < nn; i++)
    mem[i] = nn - 2 - i; /* descending */
  loom_group_info a, m;
  CHECK(loom_fusion_group_analyze(g, gon, 0, LOOM_FUSION_STITCH, &a));
  CHECK(loom_fusion_group_analyze_members(ix, gon, 0, mem, nn - 1, LOOM_FUSION_STITCH, &m));
  CHECK(same_info(&a, &m));
  if (nn > 3) { /* an unordered list gives the same kernel */
    int32_t tmp = mem[0];
    mem[0] = mem[1];
    mem[1] = tmp;
    CHECK(loom_fusion_group_analyze_members(ix, gon, 0, mem, nn - 1, LOOM_FUSION_STITCH, &m));
    CHECK(same_info(&a, &m));
  }
  /* a list that is not the group's: refused, and the index stays usable */
  loom_kernel k;
  CHECK_STATUS(
      ctx, LOOM_STATUS_INVALID_ARGUMENT,
      loom_fusion_group_lower_members(ctx, ix, gon, 0, mem, nn, LOOM_FUSION_STITCH, NULL, "k", &k));
  CHECK(!loom_fusion_group_analyze_members(ix, gon, 1, mem, 1, LOOM_FUSION_STITCH, NULL));
  CHECK(loom_fusion_group_analyze_members(ix, gon, 0, mem, nn - 1, LOOM_FUSION_STITCH, NULL));
  free(gon);
  free(mem);
  loom_fusion_index_free(ix);
  loom_graph_free(g);
}

/* Column statistics consumed by later work: a batch-norm-like graph. */
/* A group that is not one kernel gives false from analyze and a message
 * from lower, never a crash. */
static void case_refusals(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s[2] = {4, 6};
  int32_t x = loom_test_lower_input(g, "x", LOOM_DTYPE_F32, 2, s);
  int32_t w = loom_test_lower_input(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){6, 3});
  /* a reshape that regroups computed dims, read again in the group, whose
   * factors do not nest (24 as 4 x 6 and as 6 x 4) */
  int32_t r =
      lb_unary(g, LOOM_OP_NEG, lb_reshape(g, lb_unary(g, LOOM_OP_EXP, x), 2, (int64_t[]){6, 4}));
  int32_t mm = lb_matmul(g, x, w, false, false);
  loom_graph_output(g, "r", r);
  loom_graph_output(g, "mm", mm);
  CHECK_OK(ctx, loom_build_status(g));
  int32_t gon[8];
  CHECK(g->n_nodes == 4);
  for (int32_t n = 0; n < g->n_nodes; n++)
    gon[n] = 3;
  CHECK(!loom_fusion_node_fusible(g, g->values[mm].node));
  CHECK(!loom_fusion_group_analyze(g, gon, 3, LOOM_FUSION_STITCH, NULL));
  gon[g->values[mm].node] = -1;
  CHECK(!loom_fusion_group_analyze(g, gon, 3, LOOM_FUSION_STITCH, NULL));
  loom_kernel k;
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               loom_fusion_group_lower(ctx, g, gon, 3, LOOM_FUSION_STITCH, NULL, "k", &k));
  CHECK(k.n_parts == 0 && k.exprs == NULL);
  CHECK(!loom_fusion_group_analyze(g, gon, 99, LOOM_FUSION_STITCH, NULL)); /* empty group */
  /* without the neg the reshape is stored in the exp's loops; the exp
   * alone is fine too, also in mode none */
  gon[g->values[r].node] = -1;
  CHECK(loom_fusion_group_analyze(g, gon, 3, LOOM_FUSION_STITCH, NULL));
  gon[1] = -1; /* the reshape */
  loom_group_info info;
  CHECK(loom_fusion_group_analyze(g, gon, 3, LOOM_FUSION_NONE, &info));
  CHECK(info.bytes_read == 24 * 4 && info.bytes_written == 24 * 4 && info.recompute_ops == 0);
  CHECK(loom_fusion_value_materialized(g, gon, x));
  CHECK(loom_fusion_value_materialized(g, gon, g->nodes[g->values[r].node].in[0]));
  CHECK(!loom_fusion_value_materialized(g, (int32_t[]){3, 3, 3, 3}, g->nodes[1].out[0]));
  loom_graph_free(g);
}

/* sum(a) + sum(b): two independent loops feeding one scalar. One kernel
 * cannot run both loops as one (b's load once kept the loop index, a's
 * lost it: the kernel summed a[0] sixteen times), so stitch refuses the
 * whole group, and a session still computes the right value in every
 * mode (the planner keeps the sums in kernels of their own). */
static void case_independent_sums(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s[1] = {16};
  int32_t a = loom_test_lower_input(g, "a", LOOM_DTYPE_F32, 1, s),
          b = loom_test_lower_input(g, "b", LOOM_DTYPE_F32, 1, s);
  int32_t y = lb_add(g, lb_sum(g, a, 0, NULL, false), lb_sum(g, b, 0, NULL, false));
  loom_graph_output(g, "y", y);
  CHECK_OK(ctx, loom_build_status(g));
  int32_t gon[3] = {1, 1, 1};
  CHECK(g->n_nodes == 3);
  CHECK(!loom_fusion_group_analyze(g, gon, 1, LOOM_FUSION_STITCH, NULL));
  loom_tensor *in[2] = {NULL, NULL};
  double want = 0;
  for (int32_t i = 0; i < 2; i++) {
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 1, s, &in[i]));
    float *d = loom_tensor_data(in[i]);
    for (int32_t e = 0; e < 16; e++)
      want += d[e] = (float)(1 + e + 100 * i);
  }
  for (int32_t m = 0; m < LOOM_FUSION_COUNT; m++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = (loom_fusion_mode)m);
    loom_session *ss = NULL;
    loom_tensor *out = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &ss));
    if (ss) CHECK_OK(ctx, loom_session_run(ss, 2, (const loom_tensor *const *)in, 1, &out));
    if (out) CHECK(*(const float *)loom_tensor_data(out) == (float)want);
    loom_tensor_free(out);
    loom_session_free(ss);
  }
  loom_tensor_free(in[0]);
  loom_tensor_free(in[1]);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  case_strided(ctx);
  case_index(ctx);
  case_refusals(ctx);
  case_independent_sums(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_lower_analyze");
}

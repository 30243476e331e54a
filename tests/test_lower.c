/*
 * Lowering fused groups into kernels: whole graphs (decomposed, with
 * gradients where training needs them) put in one group, analysed in each
 * fusion mode, lowered, run by the kernel interpreter and compared with the
 * reference executor (session backend "ref"), output by output.
 */
#include "common.h"

#include "core/ctx.h"
#include "fusion/group.h"
#include "ir/build.h"
#include "ir/dtype.h"
#include "codegen/c_codegen.h"
#include "kernel/interp.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool quick(void) {
  const char *q = getenv("LOOM_TEST_QUICK");
  return q && q[0] == '1';
}

static bool verbose(void) {
  const char *v = getenv("LOOM_TEST_VERBOSE");
  return v && v[0] == '1';
}

typedef struct tcase {
  const char *name;
  double lo, hi;       /* f32 inputs uniform in [lo, hi) */
  int64_t ilo, ihi;    /* integer inputs uniform in [ilo, ihi] */
  int loop_ok;         /* expected loop-mode verdict: 1 yes, 0 no, -1 unchecked */
  int32_t want_parts;  /* expected parts (0: unchecked) */
  int32_t want_phases; /* expected phases (0: unchecked) */
} tcase;

/* Runs g (composites allowed) through the reference and through one
 * stitched kernel; compares every output. */
static void check_graph(loom_ctx *ctx, loom_graph *g0, const tcase *tc) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g0, &g));
  if (!g) return;
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  int32_t non_fusible = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    gon[n] = loom_fusion_node_fusible(g, n) ? 7 : -1;
    non_fusible += gon[n] < 0;
  }
  CHECK(non_fusible == 0);
  loom_group_info info;
  bool ok = loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_STITCH, &info);
  CHECK(ok);
  if (!ok) {
    loom_kernel k;
    loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, NULL, "k", &k);
    fprintf(stderr, "%s: stitch refused: %s\n", tc->name, loom_ctx_error(ctx));
  }
  if (verbose()) {
    char *text = NULL;
    if (loom_graph_print(g, &text) == LOOM_STATUS_OK) fputs(text, stdout);
    loom_free(text);
  }
  if (tc->loop_ok >= 0) {
    bool lo = loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_LOOP, NULL);
    CHECK(lo == (tc->loop_ok == 1));
    if (lo != (tc->loop_ok == 1)) fprintf(stderr, "%s: loop mode says %d\n", tc->name, lo);
  }
  if (g->n_nodes > 1) CHECK(!loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_NONE, NULL));
  loom_kernel k = {0};
  loom_kschedule sched = {.rows_per_tile = 2, .vector_width = 4};
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, &sched, "k_test", &k));
  if (k.n_parts > 0) {
    if (tc->want_parts) CHECK(k.n_parts == tc->want_parts);
    if (tc->want_phases) CHECK(k.parts[k.n_parts - 1].phase + 1 == tc->want_phases);
    CHECK(info.n_parts == k.n_parts);
    printf("%-28s nodes %3d  parts %d  phases %d  stages %2d  row/col reduce %d/%d  scratch %d  "
           "read %lld B  written %lld B  recompute %lld/%lld\n",
           tc->name, g->n_nodes, k.n_parts, k.parts[k.n_parts - 1].phase + 1, info.n_stages,
           info.n_row_reduce, info.n_col_reduce, info.n_scratch, (long long)info.bytes_read,
           (long long)info.bytes_written, (long long)info.recompute_ops,
           (long long)info.elem_ops);
    if (verbose()) {
      char *text = NULL;
      if (loom_kernel_print(ctx, &k, &text) == LOOM_STATUS_OK) fputs(text, stdout);
      free(text);
    }
  }

  /* inputs */
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_tensor **in = calloc((size_t)ni, sizeof(loom_tensor *));
  loom_tensor **ref = calloc((size_t)no, sizeof(loom_tensor *));
  void **mine = calloc((size_t)no, sizeof(void *));
  loom_test_rng rng = {0x1234 + (uint64_t)strlen(tc->name)};
  for (int32_t i = 0; i < ni; i++) {
    const loom_type *t = loom_value_type(g, loom_graph_input_value(g, i));
    CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
    void *d = loom_tensor_data(in[i]);
    int64_t n = loom_type_numel(t);
    for (int64_t e = 0; e < n; e++) {
      if (loom_dtype_is_int(t->dtype)) {
        int64_t v = tc->ilo + (int64_t)loom_test_uniform(&rng, 0, (double)(tc->ihi - tc->ilo + 1));
        loom_store(t->dtype, d, e, (double)LOOM_MIN(v, tc->ihi));
      } else {
        loom_store(t->dtype, d, e, loom_test_uniform(&rng, tc->lo, tc->hi));
      }
    }
  }
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  CHECK_OK(ctx, loom_session_new(ctx, g, &opts, &s));
  if (s) CHECK_OK(ctx, loom_session_run(s, ni, (const loom_tensor *const *)in, no, ref));
  loom_session_free(s);

  /* the kernel's arguments: graph inputs and outputs */
  void **args = calloc((size_t)(k.n_args > 0 ? k.n_args : 1), sizeof(void *));
  for (int32_t o = 0; o < no; o++) {
    const loom_type *t = loom_value_type(g, loom_graph_output_value(g, o));
    mine[o] = calloc((size_t)(loom_type_numel(t) + 1), loom_dtype_size(t->dtype));
  }
  for (int32_t a = 0; a < k.n_args; a++) {
    int32_t v = k.args[a].value;
    for (int32_t i = 0; i < ni; i++)
      if (loom_graph_input_value(g, i) == v) args[a] = loom_tensor_data(in[i]);
    for (int32_t o = 0; o < no; o++)
      if (loom_graph_output_value(g, o) == v) args[a] = mine[o];
    CHECK(args[a] != NULL || k.args[a].temp);
  }
  if (k.n_parts > 0) CHECK_OK(ctx, loom_kernel_interpret(ctx, &k, args));
  for (int32_t o = 0; o < no && ref[o]; o++) {
    const loom_type *t = loom_value_type(g, loom_graph_output_value(g, o));
    int64_t n = loom_type_numel(t), bad = 0;
    double maxabs = 0, worst = 0;
    for (int64_t e = 0; e < n; e++) maxabs = fmax(maxabs, fabs(loom_load(t->dtype, loom_tensor_data(ref[o]), e)));
    for (int64_t e = 0; e < n; e++) {
      double want = loom_load(t->dtype, loom_tensor_data(ref[o]), e);
      double got = loom_load(t->dtype, mine[o], e);
      if ((want != want && got != got) || want == got) continue; /* NaNs, infinities */
      double err = fabs(got - want) / fmax(fabs(want), 1e-3 * fmax(maxabs, 1e-30));
      /* f32 exp/tanh/sigmoid are Loom's own (kernel/kmath.h, within 2 ulp of
       * the reference's libm in double), and cancellation in random DAGs
       * can amplify an ulp to a few 1e-5 */
      if (!(err <= 1e-4)) bad++;
      if (err > worst || err != err) worst = err;
    }
    CHECK(bad == 0);
    if (bad)
      fprintf(stderr, "%s: output %d (%s): %lld of %lld differ, worst relative %g\n", tc->name, o,
              loom_graph_output_name(g, o), (long long)bad, (long long)n, worst);
  }
  for (int32_t i = 0; i < ni; i++) loom_tensor_free(in[i]);
  for (int32_t o = 0; o < no; o++) {
    loom_tensor_free(ref[o]);
    free(mine[o]);
  }
  free(in);
  free(ref);
  free(mine);
  free(args);
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

/* ---- graph builders ------------------------------------------------------ */

static int32_t input(loom_graph *g, const char *name, loom_dtype dt, int32_t rank,
                     const int64_t *shape) {
  loom_value v = -1;
  loom_graph_input(g, name, dt, rank, shape, &v);
  return v;
}

static int32_t op1(loom_graph *g, loom_op op, int32_t n, const int32_t *in, int32_t n_attr,
                   const loom_attr *attrs) {
  loom_value out = -1;
  loom_graph_op(g, op, n, in, n_attr, attrs, &out);
  return out;
}

/* sum(y * w): a scalar loss whose gradient wrt y is w. */
static int32_t weighted_loss(loom_graph *g, int32_t y, int32_t rank, const int64_t *shape) {
  int32_t w = input(g, "w_loss", LOOM_DTYPE_F32, rank, shape);
  return lb_sum(g, lb_mul(g, y, w), 0, NULL, false);
}

static void case_layernorm(loom_ctx *ctx, int64_t n, int64_t h, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t gam = input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t bet = input(g, "beta", LOOM_DTYPE_F32, 1, &h);
  int32_t y = op1(g, LOOM_OP_LAYER_NORM, 3, (int32_t[]){x, gam, bet}, 0, NULL);
  char name[64];
  if (!bwd) {
    loom_graph_output(g, "y", y);
    snprintf(name, sizeof name, "layernorm fwd [%lld,%lld]", (long long)n, (long long)h);
    tcase tc = {name, -2, 2, 0, 0, h > 1 ? 0 : 1, 1, 1};
    check_graph(ctx, g, &tc);
  } else {
    int32_t loss = weighted_loss(g, y, 2, xs);
    loom_value grads[3];
    CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, gam, bet}, grads));
    loom_graph_output(g, "dx", grads[0]);
    loom_graph_output(g, "dgamma", grads[1]);
    loom_graph_output(g, "dbeta", grads[2]);
    snprintf(name, sizeof name, "layernorm bwd [%lld,%lld]", (long long)n, (long long)h);
    tcase tc = {name, -2, 2, 0, 0, -1, 0, 1};
    check_graph(ctx, g, &tc);
  }
  loom_graph_free(g);
}

static void case_softmax(loom_ctx *ctx, int32_t rank, const int64_t *shape, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = input(g, "x", LOOM_DTYPE_F32, rank, shape);
  int32_t y = op1(g, LOOM_OP_SOFTMAX, 1, &x, 0, NULL);
  char name[64];
  snprintf(name, sizeof name, "softmax %s rank %d [..%lld]", bwd ? "bwd" : "fwd", rank,
           (long long)shape[rank - 1]);
  if (!bwd) {
    loom_graph_output(g, "y", y);
  } else {
    int32_t loss = weighted_loss(g, y, rank, shape);
    loom_value dx;
    CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &x, &dx));
    loom_graph_output(g, "dx", dx);
  }
  tcase tc = {name, -3, 3, 0, 0, shape[rank - 1] > 1 ? 0 : -1, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* y = layernorm(dropout(x + b) + residual) */
static void case_bdrln(loom_ctx *ctx, int64_t n, int64_t h) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = input(g, "b", LOOM_DTYPE_F32, 1, &h);
  int32_t res = input(g, "res", LOOM_DTYPE_F32, 2, xs);
  int32_t gam = input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t bet = input(g, "beta", LOOM_DTYPE_F32, 1, &h);
  int32_t d = lb_dropout(g, lb_add(g, x, b), 0.1, 1234, 77, -1);
  int32_t s = lb_add(g, d, res);
  int32_t y = op1(g, LOOM_OP_LAYER_NORM, 3, (int32_t[]){s, gam, bet}, 0, NULL);
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "s", s); /* the residual stream, kept for later */
  char name[64];
  snprintf(name, sizeof name, "bias+dropout+res+ln [%lld,%lld]", (long long)n, (long long)h);
  tcase tc = {name, -2, 2, 0, 0, 0, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_xent(loom_ctx *ctx, int64_t n, int64_t c, loom_dtype ldt) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, c};
  int32_t x = input(g, "logits", LOOM_DTYPE_F32, 2, xs);
  int32_t lab = input(g, "labels", ldt, 1, &n);
  int32_t loss = op1(g, LOOM_OP_CROSS_ENTROPY, 2, (int32_t[]){x, lab}, 0, NULL);
  loom_value dx;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &x, &dx));
  loom_graph_output(g, "loss", loss);
  loom_graph_output(g, "dlogits", dx);
  char name[64];
  snprintf(name, sizeof name, "cross-entropy f+b [%lld,%lld]", (long long)n, (long long)c);
  tcase tc = {name, -4, 4, 0, c - 1, 0, 0, 2};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_adamw(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s0[2] = {5, 7}, s1[1] = {33}, s2[3] = {2, 3, 4};
  const int64_t *shapes[3] = {s0, s1, s2};
  int32_t ranks[3] = {2, 1, 3};
  int32_t step = input(g, "step", LOOM_DTYPE_F32, 0, NULL);
  for (int i = 0; i < 3; i++) {
    char nm[4][16];
    snprintf(nm[0], 16, "p%d", i);
    snprintf(nm[1], 16, "g%d", i);
    snprintf(nm[2], 16, "m%d", i);
    snprintf(nm[3], 16, "v%d", i);
    int32_t p = input(g, nm[0], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t gr = input(g, nm[1], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t m = input(g, nm[2], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    int32_t v = input(g, nm[3], LOOM_DTYPE_F32, ranks[i], shapes[i]);
    loom_value out[3];
    loom_attr lr = {.name = "lr", .kind = LOOM_ATTR_FLOAT, .f = 0.01};
    CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){p, gr, m, v, step}, 1,
                                      &lr, 3, out));
    for (int j = 0; j < 3; j++) {
      char on[32];
      snprintf(on, sizeof on, "o%d_%d", i, j);
      loom_graph_output(g, on, out[j]);
    }
  }
  tcase tc = {"adamw x3", 0.1, 3, 0, 0, 1, 3, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

static void case_bias_gelu(loom_ctx *ctx, int64_t n, int64_t h, bool approx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {2, n, h};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 3, xs);
  int32_t b = input(g, "b", LOOM_DTYPE_F32, 1, &h);
  loom_attr ap = {.name = "approximate", .kind = LOOM_ATTR_INT, .i = approx};
  int32_t s = lb_add(g, x, b);
  int32_t y = op1(g, LOOM_OP_GELU, 1, &s, 1, &ap);
  loom_graph_output(g, "y", y);
  char name[64];
  snprintf(name, sizeof name, "bias+gelu(%s) [2,%lld,%lld]", approx ? "tanh" : "erf",
           (long long)n, (long long)h);
  tcase tc = {name, -3, 3, 0, 0, 1, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* A flat element-wise chain over a huge 1-D tensor: split into rows. */
static void case_flat(loom_ctx *ctx, int64_t n) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 1, &n);
  int32_t y = lb_mul(g, lb_unary(g, LOOM_OP_SIGMOID, x), lb_scalar(g, LOOM_DTYPE_F32, 3.0));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "total", lb_sum(g, y, 0, NULL, false));
  char name[64];
  snprintf(name, sizeof name, "flat chain + total [%lld]", (long long)n);
  tcase tc = {name, -3, 3, 0, 0, 1, 0, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* A chain of n tanh (issue 8 bug 5): lowering, the kernel verifier and
 * interpreter, and C generation walk expressions 10k deep without
 * recursion (a recursive emitter overflowed the stack), and match the
 * reference. */
static void case_deep_chain(loom_ctx *ctx, int32_t n) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 1, (int64_t[]){16});
  for (int32_t i = 0; i < n; i++) x = lb_unary(g, i % 2 ? LOOM_OP_TANH : LOOM_OP_NEG, x);
  loom_graph_output(g, "y", x);
  char name[64];
  snprintf(name, sizeof name, "chain of %d neg/tanh", n);
  tcase tc = {name, -3, 3, 0, 0, 1, 1, 1};
  check_graph(ctx, g, &tc);
  /* C for the same kernel (generated, not compiled) */
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  for (int32_t i = 0; i < g->n_nodes; i++) gon[i] = 0;
  loom_kernel k = {0};
  loom_kschedule sched = {.rows_per_tile = 2, .vector_width = 4};
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 0, LOOM_FUSION_STITCH, &sched, "k_deep", &k));
  char *src = NULL;
  CHECK_OK(ctx, loom_codegen_c(ctx, &k, 1, &src));
  CHECK(src && strstr(src, "k_deep") != NULL);
  free(src);
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

/* Element-wise work over short rows keeps rows for the threads: [512, 128]
 * is not one row of 65536 (one tile), and [4096, 4] is not 4096 rows of 4. */
static void case_short_rows(loom_ctx *ctx, int64_t n, int64_t h) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, h};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = input(g, "b", LOOM_DTYPE_F32, 1, &h);
  int32_t t = lb_unary(g, LOOM_OP_TANH, lb_add(g, x, b));
  loom_graph_output(g, "y", lb_mul(g, t, lb_scalar(g, LOOM_DTYPE_F32, 0.5)));
  CHECK_OK(ctx, loom_build_status(g));
  char name[64];
  snprintf(name, sizeof name, "short rows [%lld,%lld]", (long long)n, (long long)h);
  tcase tc = {name, -3, 3, 0, 0, 1, 1, 1};
  check_graph(ctx, g, &tc);
  int32_t *gon = malloc(sizeof(int32_t) * (size_t)g->n_nodes);
  for (int32_t i = 0; i < g->n_nodes; i++) gon[i] = 7;
  loom_group_info info;
  CHECK(loom_fusion_group_analyze(g, gon, 7, LOOM_FUSION_STITCH, &info));
  CHECK(info.rows >= 16 && info.rows * info.row_len == n * h);
  loom_kernel k;
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, NULL, "k", &k));
  CHECK(k.n_parts == 1);
  if (k.n_parts == 1) {
    int64_t rows = loom_kpart_rows(&k.parts[0]), len = loom_kpart_row_len(&k.parts[0]);
    CHECK(rows >= 16 && len >= 8 && rows * len == n * h);
    printf("%-28s rows %lld x row %lld\n", name, (long long)rows, (long long)len);
  }
  loom_kernel_clear(&k);
  free(gon);
  loom_graph_free(g);
}

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
       "%y = add(%x, %u)\noutput y = %y\n", 0},
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
  int32_t x = input(g0, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t b = input(g0, "b", LOOM_DTYPE_F32, 1, &h);
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
  for (int32_t i = 0; i < nn; i++) gon[i] = i + 1 < nn ? 0 : 1;
  for (int32_t v = 0; v < g->n_values; v++)
    CHECK(loom_fusion_index_materialized(ix, gon, v) == loom_fusion_value_materialized(g, gon, v));
  for (int32_t i = 0; i + 1 < nn; i++) mem[i] = nn - 2 - i; /* descending */
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
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_fusion_group_lower_members(ctx, ix, gon, 0, mem, nn, LOOM_FUSION_STITCH, NULL,
                                               "k", &k));
  CHECK(!loom_fusion_group_analyze_members(ix, gon, 1, mem, 1, LOOM_FUSION_STITCH, NULL));
  CHECK(loom_fusion_group_analyze_members(ix, gon, 0, mem, nn - 1, LOOM_FUSION_STITCH, NULL));
  free(gon);
  free(mem);
  loom_fusion_index_free(ix);
  loom_graph_free(g);
}

/* Column statistics consumed by later work: a batch-norm-like graph. */
static void case_batchnorm(loom_ctx *ctx, int64_t n, int64_t c) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {n, c};
  int64_t ax0 = 0;
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t inv = lb_scalar(g, LOOM_DTYPE_F32, 1.0 / (double)n);
  int32_t mean = lb_mul(g, lb_sum(g, x, 1, &ax0, true), inv);
  int32_t d = lb_sub(g, x, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, d, d), 1, &ax0, true), inv);
  int32_t y = lb_mul(g, d, lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, lb_scalar(g, LOOM_DTYPE_F32, 1e-5))));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "mean", mean); /* materialized, and loaded by later phases */
  tcase tc = {"batchnorm (column stats)", -2, 2, 0, 0, 0, 0, 3};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* Transposed and sliced inputs fold into loads; broadcast_to and size-1
 * reshapes of computed values share their loops. */
static void case_layout(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t as[2] = {7, 5}, bs[2] = {9, 7}, rs[3] = {5, 1, 7};
  int32_t a = input(g, "a", LOOM_DTYPE_F32, 2, as);
  int32_t b = input(g, "b", LOOM_DTYPE_F32, 2, bs);
  int32_t at = lb_transpose(g, a, (int64_t[]){1, 0});              /* [5,7] */
  int32_t bsl = lb_slice(g, b, (int64_t[]){2, 0}, (int64_t[]){7, 7}); /* [5,7] */
  int32_t s = lb_add(g, at, bsl);
  int64_t ax = 1;
  int32_t mx = lb_reduce(g, LOOM_OP_REDUCE_MAX, s, 1, &ax, false); /* [5] */
  int32_t mr = lb_reshape(g, mx, 2, (int64_t[]){5, 1});
  int32_t e = lb_unary(g, LOOM_OP_EXP, lb_sub(g, s, lb_broadcast_to(g, mr, 2, (int64_t[]){5, 7})));
  loom_graph_output(g, "e", lb_reshape(g, e, 3, rs));
  loom_graph_output(g, "t", lb_transpose(g, e, (int64_t[]){1, 0}));
  loom_graph_output(g, "flat", lb_reshape(g, lb_unary(g, LOOM_OP_TANH, e), 1, (int64_t[]){35}));
  tcase tc = {"transpose/slice/reshape", -2, 2, 0, 0, 0, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* Concat, pad and slice inside one kernel: rotary embeddings (slices of
 * an input, neg, concat) and the shape of their backward (slices of a
 * gradient padded back), a softmax over a concat of three computed pieces,
 * a pad of a computed value, a slice of a computed value, and a concat
 * along rows reduced over rows. */
static void case_concat_pad(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {3, 4, 10}, cs[3] = {3, 1, 10};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 3, xs), d = input(g, "d", LOOM_DTYPE_F32, 3, xs);
  int32_t cs_ = input(g, "cos", LOOM_DTYPE_F32, 3, cs), sn = input(g, "sin", LOOM_DTYPE_F32, 3, cs);
  int32_t x1 = lb_slice(g, x, (int64_t[]){0, 0, 0}, (int64_t[]){3, 4, 5});
  int32_t x2 = lb_slice(g, x, (int64_t[]){0, 0, 5}, (int64_t[]){3, 4, 10});
  int32_t rot = lb_concat(g, 2, (int32_t[]){lb_neg(g, x2), x1}, -1);
  int32_t y = lb_add(g, lb_mul(g, x, cs_), lb_mul(g, rot, sn));
  loom_graph_output(g, "y", lb_unary(g, LOOM_OP_TANH, y));
  int32_t d1 = lb_slice(g, d, (int64_t[]){0, 0, 0}, (int64_t[]){3, 4, 5});
  int32_t d2 = lb_slice(g, d, (int64_t[]){0, 0, 5}, (int64_t[]){3, 4, 10});
  int32_t back = lb_add(g, lb_pad(g, lb_neg(g, d1), (int64_t[]){0, 0, 5}, (int64_t[]){0, 0, 0}, 0),
                        lb_pad(g, d2, (int64_t[]){0, 0, 0}, (int64_t[]){0, 0, 5}, 0));
  int32_t e = lb_unary(g, LOOM_OP_EXP, d);
  int32_t mid = lb_slice(g, e, (int64_t[]){0, 1, 2}, (int64_t[]){3, 3, 9}); /* [3, 2, 7] */
  int32_t mid_p = lb_pad(g, mid, (int64_t[]){0, 1, 2}, (int64_t[]){0, 1, 1}, 0.25);
  loom_graph_output(g, "back", lb_add(g, lb_mul(g, back, sn), mid_p));
  tcase tc = {"rotary, slices padded back", -2, 2, 0, 0, -1, 0, 0};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);

  loom_graph_new(ctx, &g);
  int32_t a = input(g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){4, 3});
  int32_t b = input(g, "b", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t c = input(g, "c", LOOM_DTYPE_F32, 2, (int64_t[]){4, 2});
  int32_t k = lb_concat(g, 3, (int32_t[]){lb_unary(g, LOOM_OP_TANH, a), b,
                                           lb_unary(g, LOOM_OP_EXP, c)}, 1); /* [4, 11] */
  loom_attr_value av[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SOFTMAX, av);
  LOOM_ATTRV_I(av, softmax, axis) = -1;
  loom_graph_output(g, "softmax", lb_op(g, LOOM_OP_SOFTMAX, 1, &k, av));
  int32_t b2 = input(g, "b2", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t p = lb_pad(g, lb_unary(g, LOOM_OP_EXP, b2), (int64_t[]){1, 2}, (int64_t[]){0, 3}, -0.5);
  int64_t ax = 1;
  loom_graph_output(g, "pad_sum", lb_sum(g, lb_mul(g, p, p), 1, &ax, false)); /* [5] */
  int32_t b3 = input(g, "b3", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});
  int32_t b4 = input(g, "b4", LOOM_DTYPE_F32, 2, (int64_t[]){3, 6});
  int32_t rows = lb_concat(g, 2, (int32_t[]){lb_neg(g, b3), lb_unary(g, LOOM_OP_EXP, b4)}, 0);
  int64_t ax0 = 0;
  loom_graph_output(g, "col_sum", lb_sum(g, rows, 1, &ax0, false)); /* [6] */
  tcase tc2 = {"softmax(concat), pad, row concat", -1, 1, 0, 0, -1, 0, 0};
  check_graph(ctx, g, &tc2);
  loom_graph_free(g);

  /* one-element dims padded and concatenated wider (q, k and v sliced from
   * one projection, their gradients padded back and summed), transposed */
  loom_graph_new(ctx, &g);
  int64_t qs[3] = {1, 4, 6};
  int32_t q = input(g, "q", LOOM_DTYPE_F32, 3, qs), kq = input(g, "k", LOOM_DTYPE_F32, 3, qs);
  int32_t v = input(g, "v", LOOM_DTYPE_F32, 3, qs);
  int32_t sum3 = lb_add(
      g,
      lb_add(g, lb_pad(g, lb_unary(g, LOOM_OP_TANH, q), (int64_t[]){0, 0, 0}, (int64_t[]){2, 0, 0}, 0),
             lb_pad(g, kq, (int64_t[]){1, 0, 0}, (int64_t[]){1, 0, 0}, 0)),
      lb_pad(g, v, (int64_t[]){2, 0, 0}, (int64_t[]){0, 0, 0}, 0.5)); /* [3, 4, 6] */
  loom_graph_output(g, "qkv", lb_transpose(g, sum3, (int64_t[]){1, 0, 2}));
  tcase tc3 = {"one-element dims padded wider", -1, 1, 0, 0, -1, 1, 0};
  check_graph(ctx, g, &tc3);
  loom_graph_free(g);
  loom_graph_new(ctx, &g);
  q = input(g, "q", LOOM_DTYPE_F32, 3, qs);
  v = input(g, "v", LOOM_DTYPE_F32, 3, qs);
  int32_t cat = lb_concat(g, 2, (int32_t[]){lb_neg(g, q), lb_unary(g, LOOM_OP_EXP, v)}, 0);
  loom_graph_output(g, "cat", lb_transpose(g, lb_add(g, cat, cat), (int64_t[]){2, 1, 0}));
  tcase tc4 = {"one-element dims concatenated", -1, 1, 0, 0, -1, 1, 0};
  check_graph(ctx, g, &tc4);
  loom_graph_free(g);

  /* one computed value at two or three places of one loop: an instance
   * per place (lower_instance.c) — a concat of a value with itself,
   * rotate_half of a computed value, and the shape of a gated unit's
   * backward (both halves of one projection read by both pads) */
  loom_graph_new(ctx, &g);
  e = lb_unary(g, LOOM_OP_EXP, input(g, "e", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}));
  loom_graph_output(g, "twice", lb_concat(g, 3, (int32_t[]){e, lb_neg(g, e), e}, 1));
  int32_t t = lb_unary(g, LOOM_OP_TANH, input(g, "t", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}));
  int32_t t1 = lb_slice(g, t, (int64_t[]){0, 0}, (int64_t[]){4, 4});
  int32_t t2 = lb_slice(g, t, (int64_t[]){0, 4}, (int64_t[]){4, 8});
  loom_graph_output(g, "rotate_half", lb_add(g, lb_mul(g, t, t), lb_concat(g, 2, (int32_t[]){lb_neg(g, t2), t1}, 1)));
  tcase tc5 = {"one value at several offsets", -1, 1, 0, 0, 1, 0, 1};
  check_graph(ctx, g, &tc5);
  loom_graph_free(g);
  /* ... and cut into a stage per segment of du's columns, [0, 32) and
   * [32, 64), in one part (a row's inputs are read once for both), where
   * each half computes only its own chain (the tanh and exp of the other
   * half are not evaluated there) */
  loom_graph_new(ctx, &g);
  int32_t u = input(g, "u", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64});
  int32_t dy = input(g, "dy", LOOM_DTYPE_F32, 2, (int64_t[]){64, 32});
  int32_t ua = lb_unary(g, LOOM_OP_TANH, lb_slice(g, u, (int64_t[]){0, 0}, (int64_t[]){64, 32}));
  int32_t ub = lb_slice(g, u, (int64_t[]){0, 32}, (int64_t[]){64, 64});
  int32_t dya = lb_mul(g, dy, ub), dyb = lb_mul(g, lb_unary(g, LOOM_OP_EXP, dy), ua);
  loom_graph_output(g, "du", lb_add(g, lb_pad(g, lb_mul(g, dya, ua), (int64_t[]){0, 0}, (int64_t[]){0, 32}, 0),
                                   lb_pad(g, dyb, (int64_t[]){0, 32}, (int64_t[]){0, 0}, 0)));
  tcase tc6 = {"gated unit bwd, segments", -1, 1, 0, 0, 1, 1, 1};
  check_graph(ctx, g, &tc6);
  loom_graph_free(g);
  /* rotate_half of an input with no work in its pieces: a stage per half
   * head, each of plain loads (no guard: a guarded load keeps the loop
   * scalar), in one part */
  loom_graph_new(ctx, &g);
  int64_t rs[3] = {5, 3, 32}, rc[3] = {5, 1, 32};
  x = input(g, "x", LOOM_DTYPE_F32, 3, rs);
  cs_ = input(g, "cos", LOOM_DTYPE_F32, 3, rc);
  sn = input(g, "sin", LOOM_DTYPE_F32, 3, rc);
  x1 = lb_slice(g, x, (int64_t[]){0, 0, 0}, (int64_t[]){5, 3, 16});
  x2 = lb_slice(g, x, (int64_t[]){0, 0, 16}, (int64_t[]){5, 3, 32});
  rot = lb_concat(g, 2, (int32_t[]){lb_neg(g, x2), x1}, -1);
  loom_graph_output(g, "y", lb_add(g, lb_mul(g, x, cs_), lb_mul(g, rot, sn)));
  {
    loom_graph *rg = NULL;
    CHECK_OK(ctx, loom_graph_decompose(g, &rg));
    int32_t *rgon = rg ? malloc(sizeof(int32_t) * (size_t)rg->n_nodes) : NULL;
    for (int32_t n = 0; rgon && n < rg->n_nodes; n++) rgon[n] = 7;
    loom_kernel rk = {0};
    loom_kschedule rsched = {.rows_per_tile = 2, .vector_width = 4};
    if (rgon)
      CHECK_OK(ctx, loom_fusion_group_lower(ctx, rg, rgon, 7, LOOM_FUSION_STITCH, &rsched, "k_rot", &rk));
    CHECK(rk.n_parts == 1 && rk.parts[0].n_stages == 2);
    int32_t guarded = 0;
    for (int32_t i = 0; i < rk.n_exprs; i++) guarded += rk.exprs[i].kind == LOOM_KX_LOAD && rk.exprs[i].n_a > 0;
    CHECK(guarded == 0);
    loom_kernel_clear(&rk);
    free(rgon);
    loom_graph_free(rg);
  }
  tcase tc7 = {"rotate_half of an input", -1, 1, 0, 0, -1, 1, 1};
  check_graph(ctx, g, &tc7);
  loom_graph_free(g);
  /* a stored slice of a computed value: not one kernel (the slice's other
   * elements are not its own) */
  loom_graph *dg = NULL;
  int32_t *gon = NULL;
  loom_graph_new(ctx, &g);
  e = lb_unary(g, LOOM_OP_EXP, input(g, "e", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}));
  loom_graph_output(g, "e", e);
  loom_graph_output(g, "part", lb_slice(g, e, (int64_t[]){0, 1}, (int64_t[]){4, 4}));
  CHECK_OK(ctx, loom_graph_decompose(g, &dg));
  gon = dg ? malloc(sizeof(int32_t) * (size_t)dg->n_nodes) : NULL;
  for (int32_t n = 0; gon && n < dg->n_nodes; n++) gon[n] = 7;
  if (gon) CHECK(!loom_fusion_group_analyze(dg, gon, 7, LOOM_FUSION_STITCH, NULL));
  free(gon);
  loom_graph_free(dg);
  loom_graph_free(g);
}

/* Attention's memory-bound middle: scale, causal mask (iota compare),
 * softmax, dropout with a runtime counter base; forward and backward. */
static void case_attn_middle(loom_ctx *ctx, int64_t sq, int64_t sk) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t ss[4] = {2, 3, sq, sk}, ms[2] = {sq, sk};
  int32_t sc = input(g, "scores", LOOM_DTYPE_F32, 4, ss);
  int32_t base = input(g, "base", LOOM_DTYPE_I64, 0, NULL);
  int32_t s = lb_mul(g, sc, lb_scalar(g, LOOM_DTYPE_F32, 0.125));
  int32_t row = lb_iota(g, LOOM_DTYPE_I64, 2, ms, 0);
  int32_t col = lb_iota(g, LOOM_DTYPE_I64, 2, ms, 1);
  int32_t limit = lb_add(g, row, lb_scalar(g, LOOM_DTYPE_I64, (double)(sk - sq)));
  int32_t masked = lb_broadcast_to(g, lb_binary(g, LOOM_OP_GT, col, limit), 4, ss);
  int32_t ninf = lb_broadcast_to(g, lb_scalar(g, LOOM_DTYPE_F32, -INFINITY), 4, ss);
  s = lb_select(g, masked, ninf, s);
  loom_attr ax = {.name = "axis", .kind = LOOM_ATTR_INT, .i = -1};
  int32_t pr = op1(g, LOOM_OP_SOFTMAX, 1, &s, 1, &ax);
  int32_t y = lb_dropout(g, pr, 0.2, 99, 5, base);
  int32_t loss = weighted_loss(g, y, 4, ss);
  loom_value d;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &sc, &d));
  loom_graph_output(g, "y", y);
  loom_graph_output(g, "dscores", d);
  char name[64];
  snprintf(name, sizeof name, "masked softmax+dropout f+b [2,3,%lld,%lld]", (long long)sq,
           (long long)sk);
  tcase tc = {name, -3, 3, 0, 1000, 0, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* Norms and activations nobody wrote a kernel for. */
static void case_rmsnorm_bwd(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[3] = {2, 5, 24}, h = 24;
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 3, xs);
  int32_t gam = input(g, "gamma", LOOM_DTYPE_F32, 1, &h);
  int32_t y = op1(g, LOOM_OP_RMS_NORM, 2, (int32_t[]){x, gam}, 0, NULL);
  int32_t z = op1(g, LOOM_OP_SILU, 1, &y, 0, NULL);
  loom_attr ax = {.name = "axis", .kind = LOOM_ATTR_INT, .i = -1};
  int32_t ls = op1(g, LOOM_OP_LOG_SOFTMAX, 1, &z, 1, &ax);
  int32_t loss = weighted_loss(g, ls, 3, xs);
  loom_value grads[2];
  CHECK_OK(ctx, loom_graph_grad(g, loss, 2, (loom_value[]){x, gam}, grads));
  loom_graph_output(g, "ls", ls);
  loom_graph_output(g, "dx", grads[0]);
  loom_graph_output(g, "dgamma", grads[1]);
  tcase tc = {"rmsnorm+silu+logsoftmax f+b", -2, 2, 0, 0, 0, 1, 1};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* Empty tensors: loops of no iterations; reductions give their identity. */
static void case_empty(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[2] = {3, 0}, ys[2] = {0, 5};
  int64_t ax1 = 1, ax0 = 0;
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, xs);
  int32_t y = input(g, "y", LOOM_DTYPE_F32, 2, ys);
  loom_graph_output(g, "rowsum", lb_sum(g, lb_unary(g, LOOM_OP_EXP, x), 1, &ax1, false));
  loom_graph_output(g, "rowmax", lb_reduce(g, LOOM_OP_REDUCE_MAX, x, 1, &ax1, true));
  loom_graph_output(g, "colsum", lb_sum(g, y, 1, &ax0, false));
  loom_graph_output(g, "ey", lb_unary(g, LOOM_OP_TANH, y));
  tcase tc = {"empty dims", -2, 2, 0, 0, 1, 0, 0};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* ---- random DAGs ----------------------------------------------------------- */

static void case_random(loom_ctx *ctx, uint64_t seed) {
  loom_test_rng r = {seed * 7919 + 13};
  for (int i = 0; i < 4; i++) loom_test_uniform(&r, 0, 1); /* small seeds start small */
  static const int64_t sizes[] = {1, 2, 3, 7, 33};
  int64_t A = sizes[(int)loom_test_uniform(&r, 0, 5)], B = sizes[(int)loom_test_uniform(&r, 0, 5)];
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s2[2] = {A, B}, sa[2] = {A, 1};
  int32_t pool[64], np = 0;
  pool[np++] = input(g, "x", LOOM_DTYPE_F32, 2, s2);
  pool[np++] = input(g, "y", LOOM_DTYPE_F32, 1, &B);
  pool[np++] = input(g, "z", LOOM_DTYPE_F32, 2, sa);
  int32_t n_ops = 6 + (int32_t)loom_test_uniform(&r, 0, 8);
  for (int32_t i = 0; i < n_ops && np < 60; i++) {
    int32_t a = pool[(int)loom_test_uniform(&r, 0, np)];
    int32_t b = pool[(int)loom_test_uniform(&r, 0, np)];
    int kind = (int)loom_test_uniform(&r, 0, 10);
    int32_t v;
    int64_t ax1 = -1, ax0 = 0;
    switch (kind) {
    case 0: v = lb_unary(g, LOOM_OP_TANH, a); break;
    case 1: v = lb_unary(g, LOOM_OP_SIGMOID, a); break;
    case 2: v = lb_add(g, a, b); break;
    case 3: v = lb_mul(g, a, b); break;
    case 4: v = lb_binary(g, LOOM_OP_MAXIMUM, a, b); break;
    case 5: v = lb_sub(g, a, b); break;
    case 6: /* row reduction, kept as a broadcastable column */
      v = loom_value_type(g, a)->rank == 2 ? lb_reduce(g, LOOM_OP_REDUCE_MAX, a, 1, &ax1, true)
                                          : lb_unary(g, LOOM_OP_NEG, a);
      break;
    case 7:
      v = loom_value_type(g, a)->rank == 2 ? lb_sum(g, a, 1, &ax1, true) : lb_unary(g, LOOM_OP_ABS, a);
      break;
    case 8: /* column reduction */
      v = loom_value_type(g, a)->rank == 2 ? lb_sum(g, a, 1, &ax0, true) : lb_unary(g, LOOM_OP_TANH, a);
      break;
    default: v = lb_unary(g, LOOM_OP_EXP, lb_unary(g, LOOM_OP_TANH, a)); break;
    }
    if (v < 0) break;
    pool[np++] = v;
  }
  CHECK_OK(ctx, loom_build_status(g));
  /* outputs: the last two values, and the first computed one */
  loom_graph_output(g, "o1", pool[np - 1]);
  if (np - 2 > 2 && pool[np - 2] != pool[np - 1]) loom_graph_output(g, "o2", pool[np - 2]);
  if (np - 1 > 3) loom_graph_output(g, "o3", pool[3]);
  char name[64];
  snprintf(name, sizeof name, "random %llu [%lld,%lld]", (unsigned long long)seed, (long long)A,
           (long long)B);
  tcase tc = {name, -2, 2, 0, 0, -1, 0, 0};
  check_graph(ctx, g, &tc);
  loom_graph_free(g);
}

/* A group that is not one kernel gives false from analyze and a message
 * from lower, never a crash. */
/* Reshapes of computed values that merge or split dims, read again in
 * the group (lower_split.c): GroupNorm with a per-channel affine and SiLU
 * ([N, C, H, W] -> [N, G, C/G*H*W] and back around the statistics),
 * forward and backward; and [4, 6] -> [8, 3] (loops 4 x 2 x 3), with an
 * iota along the merged dim, a column sum over it and a transpose. */
static void case_split_reshape(loom_ctx *ctx, bool bwd) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t xs[4] = {2, 6, 3, 5}, gs[3] = {2, 3, 30}, ps[3] = {6, 1, 1}, last = -1;
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 4, xs);
  int32_t gam = input(g, "gamma", LOOM_DTYPE_F32, 3, ps);
  int32_t bet = input(g, "beta", LOOM_DTYPE_F32, 3, ps);
  int32_t xg = lb_reshape(g, lb_unary(g, LOOM_OP_TANH, x), 3, gs);
  int32_t inv = lb_scalar(g, LOOM_DTYPE_F32, 1.0 / 30);
  int32_t mean = lb_mul(g, lb_sum(g, xg, 1, &last, true), inv);
  int32_t xc = lb_sub(g, xg, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, xc, xc), 1, &last, true), inv);
  int32_t rstd = lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, lb_scalar(g, LOOM_DTYPE_F32, 1e-5)));
  int32_t xn = lb_reshape(g, lb_mul(g, xc, rstd), 4, xs);
  int32_t y = lb_unary(g, LOOM_OP_SILU, lb_add(g, lb_mul(g, xn, gam), bet));
  if (!bwd) {
    loom_graph_output(g, "y", y);
    int64_t as[2] = {4, 6}, bs[2] = {8, 3}, ax0 = 0;
    int32_t a = input(g, "a", LOOM_DTYPE_F32, 2, as);
    int32_t r = lb_reshape(g, lb_unary(g, LOOM_OP_EXP, a), 2, bs);
    int32_t row = lb_cast(g, lb_iota(g, LOOM_DTYPE_I64, 2, bs, 0), LOOM_DTYPE_F32);
    int32_t r2 = lb_add(g, r, row);
    loom_graph_output(g, "r", lb_unary(g, LOOM_OP_NEG, r2));
    loom_graph_output(g, "colsum", lb_sum(g, r2, 1, &ax0, false));
    loom_graph_output(g, "rt", lb_transpose(g, lb_unary(g, LOOM_OP_TANH, r2), (int64_t[]){1, 0}));
    tcase tc = {"split reshapes fwd", -2, 2, 0, 0, 0, 0, 0};
    check_graph(ctx, g, &tc);
  } else {
    int32_t loss = weighted_loss(g, y, 4, xs);
    loom_value grads[3];
    CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, gam, bet}, grads));
    loom_graph_output(g, "dx", grads[0]);
    loom_graph_output(g, "dgamma", grads[1]);
    loom_graph_output(g, "dbeta", grads[2]);
    tcase tc = {"groupnorm+silu bwd", -2, 2, 0, 0, 0, 0, 0};
    check_graph(ctx, g, &tc);
  }
  loom_graph_free(g);
}

static void case_refusals(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_graph_new(ctx, &g);
  int64_t s[2] = {4, 6};
  int32_t x = input(g, "x", LOOM_DTYPE_F32, 2, s);
  int32_t w = input(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){6, 3});
  /* a reshape that regroups computed dims, read again in the group, whose
   * factors do not nest (24 as 4 x 6 and as 6 x 4) */
  int32_t r = lb_unary(g, LOOM_OP_NEG,
                       lb_reshape(g, lb_unary(g, LOOM_OP_EXP, x), 2, (int64_t[]){6, 4}));
  int32_t mm = lb_matmul(g, x, w, false, false);
  loom_graph_output(g, "r", r);
  loom_graph_output(g, "mm", mm);
  CHECK_OK(ctx, loom_build_status(g));
  int32_t gon[8];
  CHECK(g->n_nodes == 4);
  for (int32_t n = 0; n < g->n_nodes; n++) gon[n] = 3;
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
  int32_t a = input(g, "a", LOOM_DTYPE_F32, 1, s), b = input(g, "b", LOOM_DTYPE_F32, 1, s);
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
    for (int32_t e = 0; e < 16; e++) want += d[e] = (float)(1 + e + 100 * i);
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
  bool q = quick();
  const char *only = getenv("LOOM_TEST_RANDOM"); /* debugging: one random case */
  if (only) {
    case_random(ctx, (uint64_t)atoll(only));
    loom_ctx_free(ctx);
    return loom_test_finish("test_lower");
  }
  const char *one = getenv("LOOM_TEST_CASE"); /* debugging: one named case */
  if (one) {
    if (!strcmp(one, "xent")) case_xent(ctx, 3, 7, LOOM_DTYPE_I64);
    if (!strcmp(one, "adamw")) case_adamw(ctx);
    if (!strcmp(one, "lnb")) case_layernorm(ctx, 6, 33, true);
    if (!strcmp(one, "ln")) case_layernorm(ctx, 4, 33, false);
    if (!strcmp(one, "smb")) case_softmax(ctx, 3, (int64_t[]){2, 3, 7}, true);
    if (!strcmp(one, "bdrln")) case_bdrln(ctx, 5, 33);
    if (!strcmp(one, "bn")) case_batchnorm(ctx, 9, 5);
    if (!strcmp(one, "flat")) case_flat(ctx, 8192);
    if (!strcmp(one, "deep")) case_deep_chain(ctx, 10000);
    if (!strcmp(one, "concat")) case_concat_pad(ctx);
    if (!strcmp(one, "split")) case_split_reshape(ctx, false);
    if (!strcmp(one, "splitb")) case_split_reshape(ctx, true);
    loom_ctx_free(ctx);
    return loom_test_finish("test_lower");
  }
  case_layernorm(ctx, 4, 33, false);
  case_layernorm(ctx, 3, 7, false);
  case_layernorm(ctx, 5, 1, false);
  case_layernorm(ctx, 1, 64, false);
  case_layernorm(ctx, 6, 33, true);
  case_layernorm(ctx, 3, 1, true);
  case_softmax(ctx, 2, (int64_t[]){5, 33}, false);
  case_softmax(ctx, 3, (int64_t[]){2, 3, 7}, true);
  case_softmax(ctx, 2, (int64_t[]){4, 1}, true);
  case_bdrln(ctx, 5, 33);
  case_xent(ctx, 6, 33, LOOM_DTYPE_I64);
  case_xent(ctx, 3, 7, LOOM_DTYPE_I32);
  case_adamw(ctx);
  case_bias_gelu(ctx, 3, 33, true);
  case_bias_gelu(ctx, 3, 7, false);
  case_flat(ctx, q ? 8192 : 3 * 8192);
  case_deep_chain(ctx, 10000);
  case_short_rows(ctx, 512, 128);
  case_short_rows(ctx, 4096, 4);
  case_short_rows(ctx, 64, 128);
  case_index(ctx);
  case_strided(ctx);
  case_batchnorm(ctx, 9, 5);
  case_layout(ctx);
  case_concat_pad(ctx);
  case_attn_middle(ctx, 5, 5);
  case_independent_sums(ctx);
  case_attn_middle(ctx, 3, 7);
  case_rmsnorm_bwd(ctx);
  case_empty(ctx);
  case_refusals(ctx);
  case_split_reshape(ctx, false);
  case_split_reshape(ctx, true);
  for (uint64_t s = 1; s <= (q ? 30u : 300u); s++) case_random(ctx, s);
  loom_ctx_free(ctx);
  return loom_test_finish("test_lower");
}

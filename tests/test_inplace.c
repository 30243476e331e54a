/* In-place updates (passes/memplan.h, "in_place"; kernel/in_place.h): a
 * session computes an output straight into an input's tensor when the
 * caller passes one tensor for both and the plan allows it, with the
 * results of the copy-back path bit for bit (the reference backend, which
 * always copies back, is the oracle); where another step still reads the
 * old value, or the kernel reads it at other elements, or the caller's
 * tensor is also another input, it copies back and the results stay
 * right. The GPT training step updates its whole state in place. */
#include "common.h"

#include "ir/graph.h"
#include "model/gpt.h"
#include "passes/memplan.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static loom_graph *parse(const char *text) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  return g;
}

static size_t bytes_of(const loom_tensor *t) {
  return (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
}

static loom_tensor *copy_of(const loom_tensor *t) {
  loom_tensor *c = NULL;
  int64_t shape[LOOM_MAX_RANK];
  int32_t rank = loom_tensor_rank(t);
  for (int32_t d = 0; d < rank; d++) shape[d] = loom_tensor_dim(t, d);
  if (loom_tensor_new(ctx, loom_tensor_dtype(t), rank, shape, &c)) return NULL;
  memcpy(loom_tensor_data(c), loom_tensor_data(t), bytes_of(t));
  return c;
}

static bool same_bytes(const loom_tensor *a, const loom_tensor *b) {
  return a && b && bytes_of(a) == bytes_of(b) &&
         memcmp(loom_tensor_data(a), loom_tensor_data(b), bytes_of(a)) == 0;
}

/*
 * Runs g `runs` times on backend/fusion from a copy of in; after each run
 * input alias[o] holds output o (alias[o] >= 0): passed as the output
 * tensor itself (copy false) or copied there from a tensor of the output's
 * own after the run (copy true). The final inputs and outputs go to *fin /
 * *fout (g's counts). Returns the session's last in-place count.
 */
static int32_t run_aliased(const loom_graph *g, const char *backend, loom_fusion_mode fm,
                           loom_tensor *const *in, const int32_t *alias, bool copy, int32_t runs,
                           loom_tensor ***fin, loom_tensor ***fout) {
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_tensor **x = calloc((size_t)ni, sizeof *x), **y = calloc((size_t)no, sizeof *y);
  *fin = x;
  *fout = y;
  for (int32_t i = 0; i < ni; i++) x[i] = copy_of(in[i]);
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fm),
                                 &s));
  int32_t n = -1;
  for (int32_t r = 0; s && r < runs; r++) {
    for (int32_t o = 0; o < no; o++)
      if (alias[o] >= 0 && !copy) y[o] = x[alias[o]];
    loom_status st = loom_session_run(s, ni, (const loom_tensor *const *)x, no, y);
    CHECK_OK(ctx, st);
    if (st) break;
    for (int32_t o = 0; o < no; o++)
      if (alias[o] >= 0 && copy) memcpy(loom_tensor_data(x[alias[o]]), loom_tensor_data(y[o]), bytes_of(y[o]));
    n = loom_session_last_in_place(s);
  }
  loom_session_free(s);
  return n;
}

static double max_diff(const loom_tensor *a, const loom_tensor *b) {
  if (!a || !b || loom_tensor_numel(a) != loom_tensor_numel(b)) return INFINITY;
  const float *p = loom_tensor_data(a), *q = loom_tensor_data(b);
  double m = 0;
  for (int64_t i = 0; i < loom_tensor_numel(a); i++) m = fmax(m, fabs((double)p[i] - q[i]));
  return m;
}

static void free_run(const loom_graph *g, loom_tensor **x, loom_tensor **y, const int32_t *alias,
                     bool copy) {
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  for (int32_t o = 0; y && o < no; o++)
    if (alias[o] < 0 || copy) loom_tensor_free(y[o]);
  for (int32_t i = 0; x && i < ni; i++) loom_tensor_free(x[i]);
  free(x);
  free(y);
}

/* g in every fusion mode of the cpu backend with outputs aliased to inputs
 * as `alias` says, `runs` runs: bit for bit what the same session gives
 * when the outputs are copied back after each run, and close to the
 * reference; the stitch session computes want_in_place outputs in place. */
static void check_graph(const char *name, const char *text, const int32_t *alias, int32_t runs,
                        int32_t want_in_place) {
  loom_graph *g = parse(text);
  if (!g) return;
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 11);
  loom_tensor **rx = NULL, **ry = NULL;
  CHECK(run_aliased(g, "ref", LOOM_FUSION_STITCH, in, alias, false, runs, &rx, &ry) == 0);
  static const loom_fusion_mode modes[] = {LOOM_FUSION_NONE, LOOM_FUSION_LOOP, LOOM_FUSION_STITCH};
  for (int32_t m = 0; m < 3; m++) {
    loom_tensor **x = NULL, **y = NULL, **cx = NULL, **cy = NULL;
    int32_t n = run_aliased(g, "cpu", modes[m], in, alias, false, runs, &x, &y);
    int32_t nc = run_aliased(g, "cpu", modes[m], in, alias, true, runs, &cx, &cy);
    bool same = nc == 0;
    double worst = 0;
    for (int32_t i = 0; i < ni; i++) {
      same &= same_bytes(x[i], cx[i]);
      worst = fmax(worst, max_diff(x[i], rx[i]));
    }
    for (int32_t o = 0; o < no; o++) {
      same &= same_bytes(y[o], cy[o]);
      worst = fmax(worst, max_diff(y[o], ry[o]));
    }
    CHECK(same);
    CHECK(worst < 1e-4);
    if (modes[m] == LOOM_FUSION_STITCH) CHECK(n == want_in_place);
    if (!same || !(worst < 1e-4) || (modes[m] == LOOM_FUSION_STITCH && n != want_in_place))
      fprintf(stderr, "  %s, fusion %s: %d in place (stitch: want %d), %s the copy-back run, %g from the reference\n",
              name, loom_fusion_mode_name(modes[m]), n, want_in_place, same ? "equal to" : "differs from", worst);
    free_run(g, x, y, alias, false);
    free_run(g, cx, cy, alias, true);
  }
  free_run(g, rx, ry, alias, false);
  loom_test_free_tensors(in, ni);
  loom_graph_free(g);
}

/* The memory plan's pairs from offers: a step's offer holds only while no
 * other step reads the input at or after it, no async step reading it is
 * still running, and the input is no output itself. */
static bool has_pair(const loom_memplan *p, int32_t v, int32_t x) {
  for (int32_t k = 0; k < p->n_in_place; k++)
    if (p->in_place_out[k] == v && p->in_place_in[k] == x) return true;
  return false;
}

static void test_plan_pairs(void) {
  loom_graph *g = parse("param %x : f32[16]\n"
                        "input %y : f32[16]\n"
                        "%a : f32[16] = add(%x, %y)\n"
                        "%b : f32[16] = mul(%x, %y)\n"
                        "output a = %a\n"
                        "output b = %b\n");
  if (!g) return;
  int32_t x = g->inputs[0], y = g->inputs[1], a = g->outputs[0], b = g->outputs[1];
  int32_t xy[2] = {x, y};
  static const int32_t offer_x[2] = {0, 0}, offer_both[4] = {0, 0, 0, 1};
  struct {
    const char *what;
    int32_t first_out, second_out; /* the steps' outputs, in order */
    int32_t join0;                 /* the first step's join */
    const int32_t *offer;          /* the second step's offers */
    int32_t n_offer;
    bool want_x, want_y;           /* pairs (second_out, x), (second_out, y) */
  } cases[] = {
      {"after the last other read", b, a, 0, offer_x, 1, true, false},
      {"both inputs offered", b, a, 0, offer_both, 2, true, true},
      {"an async reader still running", b, a, 1, offer_x, 1, false, false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t o0 = cases[c].first_out, o1 = cases[c].second_out;
    loom_memplan_step steps[2] = {
        {.n_in = 2, .n_out = 1, .in = xy, .out = &o0, .join = cases[c].join0},
        {.n_in = 2, .n_out = 1, .in = xy, .out = &o1, .n_in_place = cases[c].n_offer,
         .in_place = cases[c].offer},
    };
    loom_memplan p;
    CHECK_OK(ctx, loom_memplan_build_steps(g, 2, steps, NULL, &p));
    bool ok = has_pair(&p, o1, x) == cases[c].want_x && has_pair(&p, o1, y) == cases[c].want_y &&
              p.n_in_place == (int32_t)cases[c].want_x + (int32_t)cases[c].want_y;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  plan pairs, %s: %d pairs\n", cases[c].what, p.n_in_place);
    loom_memplan_free(&p);
  }
  /* the first step offers: the second still reads x and y */
  {
    loom_memplan_step steps[2] = {
        {.n_in = 2, .n_out = 1, .in = xy, .out = &a, .n_in_place = 2, .in_place = offer_both},
        {.n_in = 2, .n_out = 1, .in = xy, .out = &b},
    };
    loom_memplan p;
    CHECK_OK(ctx, loom_memplan_build_steps(g, 2, steps, NULL, &p));
    CHECK(p.n_in_place == 0);
    loom_memplan_free(&p);
  }
  loom_graph_free(g);
  /* an input that is also an output keeps its memory */
  g = parse("param %x : f32[16]\n"
            "%a : f32[16] = neg(%x)\n"
            "output a = %a\n"
            "output x = %x\n");
  if (!g) return;
  int32_t in0 = g->inputs[0], out0 = g->outputs[0];
  loom_memplan_step step = {.n_in = 1, .n_out = 1, .in = &in0, .out = &out0, .n_in_place = 1,
                            .in_place = offer_x};
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 1, &step, NULL, &p));
  CHECK(p.n_in_place == 0);
  loom_memplan_free(&p);
  loom_graph_free(g);
}

/* SGD with momentum and weight decay: both state tensors in place, over
 * three runs (each reads what the last wrote). */
static void test_update(void) {
  check_graph("momentum",
              "param %p : f32[64, 48]\n"
              "input %g : f32[64, 48]\n"
              "input %m : f32[64, 48]\n"
              "%b : f32[] = constant(value=0.9)\n"
              "%lr : f32[] = constant(value=0.05)\n"
              "%wd : f32[] = constant(value=0.001)\n"
              "%m0 : f32[64, 48] = mul(%m, %b)\n"
              "%m1 : f32[64, 48] = add(%m0, %g)\n"
              "%u : f32[64, 48] = mul(%m1, %lr)\n"
              "%d : f32[64, 48] = mul(%p, %wd)\n"
              "%p0 : f32[64, 48] = sub(%p, %u)\n"
              "%p1 : f32[64, 48] = sub(%p0, %d)\n"
              "output p = %p1\n"
              "output m = %m1\n",
              (const int32_t[]){0, 2}, 3, 2);
  /* the update output not aliased: nothing in place, nothing changes */
  check_graph("momentum, fresh outputs",
              "param %p : f32[64, 48]\n"
              "input %g : f32[64, 48]\n"
              "%lr : f32[] = constant(value=0.05)\n"
              "%u : f32[64, 48] = mul(%g, %lr)\n"
              "%p1 : f32[64, 48] = sub(%p, %u)\n"
              "output p = %p1\n",
              (const int32_t[]){-1}, 2, 0);
}

/* Where the old value is still needed, the copy stays. */
static void test_kept_copies(void) {
  /* a GEMM after the update reads the old p */
  check_graph("read after the update",
              "param %p : f32[32, 32]\n"
              "input %g : f32[32, 32]\n"
              "%h : f32[] = constant(value=0.5)\n"
              "%q : f32[32, 32] = mul(%p, %h)\n"
              "%p1 : f32[32, 32] = add(%q, %g)\n"
              "%z : f32[32, 32] = matmul(%p1, %p)\n"
              "output p = %p1\n"
              "output z = %z\n",
              (const int32_t[]){0, -1}, 2, 0);
  /* the kernel reads p at other elements (its transpose) */
  check_graph("transposed read",
              "param %p : f32[32, 32]\n"
              "%t : f32[32, 32] = transpose(%p, perm=[1, 0])\n"
              "%p1 : f32[32, 32] = add(%p, %t)\n"
              "output p = %p1\n",
              (const int32_t[]){0}, 2, 0);
  /* a row reduction of p before the update of the same row */
  check_graph("row mean",
              "param %p : f32[16, 200]\n"
              "%s : f32[16, 1] = reduce_mean(%p, axes=[1], keepdims=true)\n"
              "%p1 : f32[16, 200] = sub(%p, %s)\n"
              "output p = %p1\n",
              (const int32_t[]){0}, 2, 0);
  /* the old value is an output too */
  check_graph("old value out",
              "param %p : f32[8, 40]\n"
              "input %g : f32[8, 40]\n"
              "%p1 : f32[8, 40] = add(%p, %g)\n"
              "output p = %p1\n"
              "output old = %p\n",
              (const int32_t[]){0, -1}, 2, 0);
}

/* The caller passes one tensor as two inputs: the output that may take
 * p's memory would overwrite g's values, which the step reads. */
static void test_same_tensor_twice(void) {
  loom_graph *g = parse("param %p : f32[8, 40]\n"
                        "input %g : f32[8, 40]\n"
                        "%p1 : f32[8, 40] = add(%p, %g)\n"
                        "output p = %p1\n");
  if (!g) return;
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 3);
  loom_tensor *want = copy_of(in[0]);
  float *w = loom_tensor_data(want);
  for (int64_t i = 0; i < 320; i++) w[i] += w[i];
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (s) {
    const loom_tensor *x[2] = {in[0], in[0]};
    loom_tensor *y[1] = {in[0]};
    CHECK_OK(ctx, loom_session_run(s, 2, x, 1, y));
    CHECK(loom_session_last_in_place(s) == 0);
    CHECK(same_bytes(in[0], want));
  }
  loom_session_free(s);
  loom_tensor_free(want);
  loom_test_free_tensors(in, 2);
  loom_graph_free(g);
}

/* The GPT training step: parameters, first and second moments all updated
 * in place, bit for bit what a run into fresh outputs then copied back
 * gives, step after step. */
static void test_train_step(void) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = 1;
  c.d_model = 32;
  c.n_head = 2;
  c.d_ff = 128;
  c.context = 16;
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = "cpu");
  loom_gpt_optim o = {0.9, 0.95, 1e-8, 0.1, 5, &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, 4, 16, &o, &g, &per_step));
  if (!g) return;
  int32_t ni = loom_graph_num_inputs(g), no = loom_graph_num_outputs(g);
  int32_t n_state = no - 1; /* outputs 1.. update inputs LOOM_GPT_IN_PARAMS.. */
  loom_tensor **in = loom_test_gpt_inputs(ctx, g, 9);
  loom_tensor **a = calloc((size_t)ni, sizeof *a), **b = calloc((size_t)ni, sizeof *b);
  loom_tensor **ya = calloc((size_t)no, sizeof *ya), **yb = calloc((size_t)no, sizeof *yb);
  for (int32_t i = 0; i < ni; i++) a[i] = copy_of(in[i]), b[i] = copy_of(in[i]);
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &so, &s));
  bool same = s != NULL;
  for (int32_t step = 0; s && step < 3; step++) {
    /* a: the state tensors are the outputs */
    for (int32_t k = 0; k < n_state; k++) ya[1 + k] = a[LOOM_GPT_IN_PARAMS + k];
    CHECK_OK(ctx, loom_session_run(s, ni, (const loom_tensor *const *)a, no, ya));
    CHECK(loom_session_last_in_place(s) == n_state);
    if (loom_session_last_in_place(s) != n_state)
      fprintf(stderr, "  train step: %d of %d state tensors in place\n", loom_session_last_in_place(s), n_state);
    /* b: fresh outputs, copied into the inputs after the run */
    CHECK_OK(ctx, loom_session_run(s, ni, (const loom_tensor *const *)b, no, yb));
    CHECK(loom_session_last_in_place(s) == 0);
    for (int32_t k = 0; k < n_state; k++)
      memcpy(loom_tensor_data(b[LOOM_GPT_IN_PARAMS + k]), loom_tensor_data(yb[1 + k]),
             bytes_of(yb[1 + k]));
    same &= same_bytes(ya[0], yb[0]);
    for (int32_t i = 0; i < ni; i++) same &= same_bytes(a[i], b[i]);
  }
  CHECK(same);
  loom_session_free(s);
  loom_tensor_free(ya[0]);
  for (int32_t k = 0; k < no; k++) loom_tensor_free(yb[k]);
  loom_test_free_tensors(a, ni);
  loom_test_free_tensors(b, ni);
  loom_test_free_tensors(in, ni);
  free(ya);
  free(yb);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  test_plan_pairs();
  test_update();
  test_kept_copies();
  test_same_tensor_twice();
  test_train_step();
  loom_ctx_free(ctx);
  return loom_test_finish("test_inplace");
}

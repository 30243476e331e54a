/*
 * Fusion planning: classification, plan search and the cost model, on
 * decomposed graphs of the named patterns (layernorm fwd/bwd, softmax
 * fwd/bwd, bias+dropout+residual+layernorm, cross-entropy fwd+bwd, AdamW,
 * bias+gelu) and a GPT block's training step, in the three modes.
 *
 * Checked independently of the planner: every node runs exactly once, in
 * an order that respects every edge; every kernel is convex (no path
 * leaves it and comes back: reachability over the DAG); the materialized
 * mask matches the steps; none is one kernel per fusible op; stitch makes
 * one kernel per named pattern; loop needs more kernels than stitch on
 * layernorm and softmax; modeled bytes go stitch <= loop <= none; the same
 * graph gives the same program twice. Plans are made for bench-sized
 * shapes: planning never touches tensor data.
 */
#include "common.h"

#include "fusion/cost.h"
#include "perf/measure.h"
#include "perf/profile.h"
#include "runtime/cpu/gemm.h"
#include "ir/build.h"
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static loom_ctx *ctx;
static loom_machine machine;
static bool quick;

#define SHAPE(...)                                                                                 \
  (const int64_t[]) { __VA_ARGS__ }
#define A_INT(nm, val) ((loom_attr){.name = (nm), .kind = LOOM_ATTR_INT, .i = (val)})
#define A_F(nm, val) ((loom_attr){.name = (nm), .kind = LOOM_ATTR_FLOAT, .f = (val)})
#define A_INTS(nm, cnt, ...)                                                                       \
  ((loom_attr){.name = (nm),                                                                       \
               .kind = LOOM_ATTR_INTS,                                                             \
               .n_ints = (cnt),                                                                    \
               .ints = (const int64_t[]){__VA_ARGS__}})

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- graph builders (public API, composites; decomposed by finish) ---- */

static loom_value op1(loom_graph *g, loom_op op, loom_value a, int32_t na, const loom_attr *at) {
  loom_value y = LOOM_VALUE_NONE;
  CHECK_OK(ctx, loom_graph_op(g, op, 1, &a, na, at, &y));
  return y;
}

static loom_value op2(loom_graph *g, loom_op op, loom_value a, loom_value b) {
  loom_value y = LOOM_VALUE_NONE;
  CHECK_OK(ctx, loom_graph_op(g, op, 2, (loom_value[]){a, b}, 0, NULL, &y));
  return y;
}

static loom_value in_f32(loom_graph *g, const char *name, int32_t rank, const int64_t *shape) {
  loom_value v = LOOM_VALUE_NONE;
  CHECK_OK(ctx, loom_graph_input(g, name, LOOM_DTYPE_F32, rank, shape, &v));
  return v;
}

static loom_value layer_norm(loom_graph *g, loom_value x, loom_value gamma, loom_value beta) {
  loom_value y = LOOM_VALUE_NONE;
  CHECK_OK(ctx,
           loom_graph_op(g, LOOM_OP_LAYER_NORM, 3, (loom_value[]){x, gamma, beta}, 0, NULL, &y));
  return y;
}

/* sum over every element of a rank-2 value: a scalar loss */
static loom_value sum_all2(loom_graph *g, loom_value x) {
  loom_attr a[1] = {A_INTS("axes", 2, 0, 1)};
  return op1(g, LOOM_OP_REDUCE_SUM, x, 1, a);
}

/* Nodes some graph output depends on (computed here, not by the planner). */
static bool *live_nodes(const loom_graph *g) {
  bool *lv = calloc((size_t)g->n_values + 1, 1), *ln = calloc((size_t)g->n_nodes + 1, 1);
  if (!lv || !ln) {
    free(lv);
    free(ln);
    return NULL;
  }
  for (int32_t i = 0; i < g->n_outputs; i++)
    lv[g->outputs[i]] = true;
  for (int32_t n = g->n_nodes - 1; n >= 0; n--) {
    for (int32_t o = 0; o < g->nodes[n].n_out; o++)
      ln[n] = ln[n] || lv[g->nodes[n].out[o]];
    for (int32_t i = 0; ln[n] && i < g->nodes[n].n_in; i++)
      lv[g->nodes[n].in[i]] = true;
  }
  free(lv);
  return ln;
}

/* A copy of g without dead nodes (autodiff leaves the loss behind). */
static loom_graph *dce(loom_graph *g) {
  bool *ln = live_nodes(g);
  loom_graph *d = NULL;
  int32_t *map = NULL;
  CHECK(ln != NULL);
  if (ln) CHECK_OK(ctx, loom_graph_begin_copy(g, &d, &map));
  for (int32_t n = 0; d && n < g->n_nodes; n++)
    if (ln[n]) CHECK_OK(ctx, loom_graph_copy_node(d, g, &g->nodes[n], map));
  if (d) CHECK_OK(ctx, loom_graph_finish_copy(d, g, map));
  free(map);
  free(ln);
  loom_graph_free(g);
  return d;
}

/* The graph, decomposed (ownership moves to the caller). */
static loom_graph *finish(loom_graph *g) {
  loom_graph *d = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  loom_graph_free(g);
  if (d) d = dce(d);
  if (d) CHECK_OK(ctx, loom_graph_verify(d));
  return d;
}

static int64_t R = 32768, C = 1024;

static loom_graph *build_layernorm_fwd(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), ga = in_f32(g, "gamma", 1, SHAPE(C)),
             be = in_f32(g, "beta", 1, SHAPE(C));
  CHECK_OK(ctx, loom_graph_output(g, "y", layer_norm(g, x, ga, be)));
  return finish(g);
}

/* dx, dgamma, dbeta of sum(layer_norm(x) * dy): the forward is recomputed. */
static loom_graph *build_layernorm_bwd(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), ga = in_f32(g, "gamma", 1, SHAPE(C)),
             be = in_f32(g, "beta", 1, SHAPE(C)), dy = in_f32(g, "dy", 2, SHAPE(R, C));
  loom_value loss = sum_all2(g, op2(g, LOOM_OP_MUL, layer_norm(g, x, ga, be), dy));
  loom_value grads[3];
  CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, ga, be}, grads));
  CHECK_OK(ctx, loom_graph_output(g, "dx", grads[0]));
  CHECK_OK(ctx, loom_graph_output(g, "dgamma", grads[1]));
  CHECK_OK(ctx, loom_graph_output(g, "dbeta", grads[2]));
  return finish(g);
}

static loom_graph *build_softmax_fwd(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C));
  CHECK_OK(ctx, loom_graph_output(g, "y", op1(g, LOOM_OP_SOFTMAX, x, 0, NULL)));
  return finish(g);
}

static loom_graph *build_softmax_bwd(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), dy = in_f32(g, "dy", 2, SHAPE(R, C));
  loom_value loss = sum_all2(g, op2(g, LOOM_OP_MUL, op1(g, LOOM_OP_SOFTMAX, x, 0, NULL), dy));
  loom_value dx;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &x, &dx));
  CHECK_OK(ctx, loom_graph_output(g, "dx", dx));
  return finish(g);
}

static loom_graph *build_bias_dropout_residual_ln(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), b = in_f32(g, "b", 1, SHAPE(C)),
             res = in_f32(g, "res", 2, SHAPE(R, C)), ga = in_f32(g, "gamma", 1, SHAPE(C)),
             be = in_f32(g, "beta", 1, SHAPE(C));
  loom_attr da[3] = {A_F("p", 0.1), A_INT("seed", 7), A_INT("offset", 0)};
  loom_value h =
      op2(g, LOOM_OP_ADD, op1(g, LOOM_OP_DROPOUT, op2(g, LOOM_OP_ADD, x, b), 3, da), res);
  CHECK_OK(ctx, loom_graph_output(g, "h", h));
  CHECK_OK(ctx, loom_graph_output(g, "y", layer_norm(g, h, ga, be)));
  return finish(g);
}

static loom_graph *build_cross_entropy(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int64_t n = R / 8, k = C * 8; /* the bench's [4096, 8192] at full size */
  loom_value logits = in_f32(g, "logits", 2, SHAPE(n, k)), labels = LOOM_VALUE_NONE, loss;
  CHECK_OK(ctx, loom_graph_input(g, "labels", LOOM_DTYPE_I64, 1, SHAPE(n), &labels));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CROSS_ENTROPY, 2, (loom_value[]){logits, labels}, 0, NULL,
                              &loss));
  loom_value dl;
  CHECK_OK(ctx, loom_graph_grad(g, loss, 1, &logits, &dl));
  CHECK_OK(ctx, loom_graph_output(g, "loss", loss));
  CHECK_OK(ctx, loom_graph_output(g, "dlogits", dl));
  return finish(g);
}

/* AdamW over n tensors of the given shapes; weight decay on matrices only
 * (as the bench's GPT-shaped workload does). */
static loom_graph *build_adamw_over(int32_t n, const int32_t *ranks, const int64_t (*shapes)[3]) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value step = in_f32(g, "step", 0, NULL);
  for (int32_t i = 0; i < n; i++) {
    char nm[4][16];
    loom_value v[5];
    snprintf(nm[0], sizeof nm[0], "p%d", i);
    snprintf(nm[1], sizeof nm[1], "g%d", i);
    snprintf(nm[2], sizeof nm[2], "m%d", i);
    snprintf(nm[3], sizeof nm[3], "v%d", i);
    for (int32_t j = 0; j < 4; j++)
      v[j] = in_f32(g, nm[j], ranks[i], shapes[i]);
    v[4] = step;
    loom_value out[3];
    loom_attr at[2] = {A_F("lr", 1e-3), A_F("weight_decay", ranks[i] >= 2 ? 0.01 : 0.0)};
    CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, v, 2, at, 3, out));
    for (int32_t j = 0; j < 3; j++) {
      char on[32];
      snprintf(on, sizeof on, "new_%.15s", nm[j == 0 ? 0 : j + 1]);
      CHECK_OK(ctx, loom_graph_output(g, on, out[j]));
    }
  }
  return finish(g);
}

static loom_graph *build_adamw(void) {
  static const int32_t ranks[3] = {2, 1, 3};
  static const int64_t shapes[3][3] = {{768, 3072}, {3072, 0, 0}, {12, 64, 64}};
  return build_adamw_over(3, ranks, shapes);
}

/* The bench's GPT-2-small-shaped parameter set: embeddings and one block. */
static loom_graph *build_adamw_gpt(void) {
  enum { H = 768 };
  static const int32_t ranks[14] = {2, 2, 1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1};
  static const int64_t shapes[14][3] = {{2776, H},  {1024, H}, {H},        {H}, {H, 3 * H},
                                        {3 * H},    {H, H},    {H},        {H}, {H},
                                        {H, 4 * H}, {4 * H},   {4 * H, H}, {H}};
  return build_adamw_over(14, ranks, shapes);
}

static loom_graph *build_bias_gelu(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), b = in_f32(g, "b", 1, SHAPE(C));
  loom_attr a[1] = {A_INT("approximate", 1)};
  CHECK_OK(ctx, loom_graph_output(g, "y", op1(g, LOOM_OP_GELU, op2(g, LOOM_OP_ADD, x, b), 1, a)));
  return finish(g);
}

/* The GPT training step with n_layer blocks (GPT-2 small widths unless
 * quick): forward, loss, backward, AdamW. */
static loom_graph *build_gpt(int32_t n_layer) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = n_layer;
  if (!quick) {
    c.d_model = 768;
    c.n_head = 12;
    c.d_ff = 3072;
    c.context = 256;
  }
  loom_gpt_optim o = {0.9, 0.999, 1e-8, 0.01, 1, NULL};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, quick ? 2 : 4, quick ? 16 : 256, &o, &g, &per_step));
  /* the AdamW updates are still composites: decompose as a session does */
  return g ? finish(g) : NULL;
}

/* ---- checks independent of the planner -------------------------------- */

/* Where each node runs: its step, and its kernel (-1 outside kernels). */
typedef struct placement {
  int32_t *step_of, *kernel_of;
} placement;

static bool place_steps(const loom_graph *g, const loom_program *p, placement *pl,
                        const bool *live);

static bool place(const loom_graph *g, const loom_program *p, placement *pl) {
  pl->step_of = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
  pl->kernel_of = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
  bool *live = live_nodes(g);
  bool ok = pl->step_of && pl->kernel_of && live && place_steps(g, p, pl, live);
  free(live);
  return ok;
}
static bool place_steps(const loom_graph *g, const loom_program *p, placement *pl,
                        const bool *live) {
  for (int32_t n = 0; n < g->n_nodes; n++)
    pl->step_of[n] = pl->kernel_of[n] = -1;
  bool ok = true;
  /* step s is at 2 s; a GEMM's epilogue runs after the GEMM, at 2 s + 1 */
  for (int32_t s = 0; s < p->n_steps; s++) {
    const loom_step *st = &p->steps[s];
    if (st->kind == LOOM_STEP_KERNEL || st->epilogue_rows > 0) {
      if (st->kernel < 0 || st->kernel >= p->n_kernels) return false;
      if (st->epilogue_rows > 0 && st->kind != LOOM_STEP_GEMM) return false;
      const loom_kernel *k = &p->kernels[st->kernel];
      for (int32_t i = 0; i < k->n_nodes; i++) {
        int32_t n = k->nodes[i];
        if (n < 0 || n >= g->n_nodes || pl->step_of[n] >= 0)
          ok = false;
        else
          pl->step_of[n] = 2 * s + (st->kind == LOOM_STEP_GEMM), pl->kernel_of[n] = st->kernel;
      }
    }
    if (st->kind != LOOM_STEP_KERNEL) {
      int32_t n = st->node;
      if (n < 0 || n >= g->n_nodes || pl->step_of[n] >= 0)
        ok = false;
      else
        pl->step_of[n] = 2 * s;
      if (n >= 0 && n < g->n_nodes)
        ok = ok && ((g->nodes[n].op == LOOM_OP_MATMUL) == (st->kind == LOOM_STEP_GEMM) ||
                    st->kind == LOOM_STEP_NODE);
    }
  }
  /* live nodes run exactly once, dead ones never */
  for (int32_t n = 0; n < g->n_nodes; n++)
    ok = ok && (pl->step_of[n] >= 0) == live[n];
  return ok;
}

/* Every edge goes to a later step or stays inside one kernel. */
static bool order_valid(const loom_graph *g, const placement *pl) {
  for (int32_t n = 0; n < g->n_nodes; n++) {
    if (pl->step_of[n] < 0) continue; /* dead */
    for (int32_t i = 0; i < g->nodes[n].n_in; i++) {
      int32_t pr = g->values[g->nodes[n].in[i]].node;
      if (pr < 0) continue;
      bool same = pl->kernel_of[pr] >= 0 && pl->kernel_of[pr] == pl->kernel_of[n];
      if (!same && pl->step_of[pr] >= pl->step_of[n]) return false;
      if (same && pl->step_of[pr] != pl->step_of[n]) return false;
    }
  }
  return true;
}

/* No path leaves kernel k and comes back (forward search over nodes). */
static bool convex(const loom_graph *g, const placement *pl, int32_t k, uint8_t *seen) {
  memset(seen, 0, (size_t)g->n_nodes);
  /* nodes are in topological order: one forward sweep marks everything
   * reachable from k through at least one outside node */
  for (int32_t n = 0; n < g->n_nodes; n++) {
    bool from_outside_path = false, from_k = false;
    for (int32_t i = 0; i < g->nodes[n].n_in; i++) {
      int32_t pr = g->values[g->nodes[n].in[i]].node;
      if (pr < 0) continue;
      if (seen[pr]) from_outside_path = true;
      if (pl->kernel_of[pr] == k) from_k = true;
    }
    if (pl->kernel_of[n] == k) {
      if (from_outside_path) return false;
    } else if (from_k || from_outside_path) {
      seen[n] = 1;
    }
  }
  return true;
}

/* True if kernel k recomputes node u (a duplicated producer). */
static bool recomputed(const loom_program *p, int32_t k, int32_t u) {
  for (int32_t i = 0; k >= 0 && i < p->n_dups; i++)
    if (p->dup_kernel[i] == k && p->dup_node[i] == u) return true;
  return false;
}

static bool materialized_consistent(const loom_graph *g, const loom_program *p,
                                    const placement *pl) {
  if (!p->materialized || p->n_values != g->n_values) return false;
  bool *crosses = calloc((size_t)g->n_values + 1, 1);
  if (!crosses) return false;
  for (int32_t i = 0; i < g->n_outputs; i++)
    crosses[g->outputs[i]] = true;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    if (pl->step_of[n] < 0) continue; /* dead: reads nothing */
    for (int32_t i = 0; i < g->nodes[n].n_in; i++) {
      int32_t v = g->nodes[n].in[i], pr = g->values[v].node;
      if (pr < 0 || pl->kernel_of[pr] < 0 || pl->kernel_of[pr] != pl->kernel_of[n])
        crosses[v] = crosses[v] || !recomputed(p, pl->kernel_of[n], pr);
    }
  }
  bool ok = true;
  for (int32_t v = 0; v < g->n_values; v++) {
    int32_t pr = g->values[v].node;
    if (pr >= 0 && pl->step_of[pr] < 0)
      ok = ok && !p->materialized[v]; /* never computed */
    else if (pr < 0 || pl->kernel_of[pr] < 0)
      ok = ok && p->materialized[v];
    else if (crosses[v])
      ok = ok && p->materialized[v];
  }
  free(crosses);
  return ok;
}

/* The same groups in the same order (schedules and costs aside). */
static bool same_plan(const loom_program *a, const loom_program *b) {
  if (a->n_steps != b->n_steps || a->n_kernels != b->n_kernels) return false;
  for (int32_t s = 0; s < a->n_steps; s++) {
    const loom_step *x = &a->steps[s], *y = &b->steps[s];
    if (x->kind != y->kind || x->epilogue_rows != y->epilogue_rows) return false;
    if (x->kind != LOOM_STEP_KERNEL && x->node != y->node) return false;
    if (x->kind != LOOM_STEP_KERNEL && x->epilogue_rows <= 0) continue;
    const loom_kernel *kx = &a->kernels[x->kernel], *ky = &b->kernels[y->kernel];
    if (kx->n_nodes != ky->n_nodes) return false;
    for (int32_t i = 0; i < kx->n_nodes; i++)
      if (kx->nodes[i] != ky->nodes[i]) return false;
  }
  return true;
}

/* Plans must not hinge on the measured launch cost (noisy on a busy
 * machine): the same plan from 0.2 us to 100 us. */
static void check_launch_robust(const char *name, const loom_graph *g) {
  loom_program p[2];
  double launch[2] = {2e-7, 1e-4};
  for (int i = 0; i < 2; i++) {
    loom_machine m = machine;
    m.kernel_launch_s = launch[i];
    loom_fusion_options o = {.mode = LOOM_FUSION_STITCH, .machine = &m};
    CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o, &p[i]));
  }
  bool same = same_plan(&p[0], &p[1]);
  CHECK(same);
  if (!same) fprintf(stderr, "  %s: the plan changes with the launch cost\n", name);
  loom_program_clear(&p[0]);
  loom_program_clear(&p[1]);
}

typedef struct plan_result {
  int32_t kernels, memory_ops, steps;
  int64_t bytes;
  double seconds;
  char *listing;
} plan_result;

/* Compiles g in mode, checks the program's structure, returns a summary. */
/* The fusing modes, in the order the reports print them (r[0], r[1], r[2]). */
static const loom_fusion_mode plan_modes[3] = {LOOM_FUSION_NONE, LOOM_FUSION_LOOP,
                                               LOOM_FUSION_STITCH};

static plan_result compile_checked(const char *name, const loom_graph *g, loom_fusion_mode mode) {
  plan_result r = {0};
  loom_program p;
  loom_fusion_options o = {.mode = mode, .machine = &machine};
  loom_status st = loom_fusion_compile(ctx, g, &o, &p);
  CHECK_OK(ctx, st);
  if (st) {
    fprintf(stderr, "  (%s, %s)\n", name, loom_fusion_mode_name(mode));
    return r;
  }
  placement pl = {0};
  bool placed = place(g, &p, &pl);
  CHECK(placed);
  if (placed) {
    CHECK(order_valid(g, &pl));
    uint8_t *seen = malloc((size_t)g->n_nodes + 1);
    for (int32_t k = 0; seen && k < p.n_kernels; k++) {
      bool c = convex(g, &pl, k, seen);
      CHECK(c);
      if (!c)
        fprintf(stderr, "  %s %s: kernel %d is not convex\n", name, loom_fusion_mode_name(mode), k);
    }
    free(seen);
    CHECK(materialized_consistent(g, &p, &pl));
  }
  free(pl.step_of);
  free(pl.kernel_of);
  for (int32_t k = 0; k < p.n_kernels; k++) {
    CHECK_OK(ctx, loom_kernel_verify(ctx, &p.kernels[k]));
    char want[16];
    snprintf(want, sizeof want, "k%d", k);
    CHECK(strcmp(p.kernels[k].name, want) == 0);
    for (int32_t i = 0; i < p.kernels[k].n_parts; i++) {
      const loom_kschedule *s = &p.kernels[k].parts[i].sched;
      CHECK(s->rows_per_tile >= 1);
      CHECK(s->vector_width == 1 || s->vector_width == 8 || s->vector_width == 16);
    }
  }
  r.kernels = p.n_kernels;
  r.memory_ops = p.n_memory_ops;
  r.steps = p.n_steps;
  r.bytes = p.modeled_bytes;
  r.seconds = p.modeled_seconds;
  CHECK_OK(ctx, loom_program_print(ctx, g, &p, &r.listing));
  CHECK(p.mode == mode);
  loom_program_clear(&p);
  return r;
}

/* Fusible nodes, and those of them that need a kernel when alone (a
 * reshape alone aliases its input's memory instead). */
static int32_t count_fusible(const loom_graph *g, int32_t *need_kernel) {
  int32_t k = 0;
  *need_kernel = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    bool f = loom_fusion_node_fusible(g, n);
    k += f;
    *need_kernel += f && g->nodes[n].op != LOOM_OP_RESHAPE;
  }
  return k;
}

/* Compiles one named pattern in every mode and checks the relations. */
static void check_pattern(const char *name, loom_graph *g, int32_t stitch_kernels, bool loop_more) {
  if (!g) return;
  const char *only = getenv("LOOM_TEST_ONLY"); /* debugging: one pattern */
  if (only && !strstr(name, only)) {
    loom_graph_free(g);
    return;
  }
  plan_result r[3];
  for (int m = 0; m < 3; m++)
    r[m] = compile_checked(name, g, plan_modes[m]);
  if (only && getenv("LOOM_TEST_DUMP")) /* debugging: the programs */
    for (int m = 0; m < 3; m++)
      fprintf(stderr, "%s", r[m].listing ? r[m].listing : "");
  int32_t alone;
  int32_t fus = count_fusible(g, &alone);
  printf("%-28s ops %4d fusible %4d | kernels none %4d loop %3d stitch %3d | MB none %8.1f "
         "loop %8.1f stitch %8.1f | model ms stitch %.3f\n",
         name, g->n_nodes, fus, r[0].kernels, r[1].kernels, r[2].kernels, r[0].bytes / 1e6,
         r[1].bytes / 1e6, r[2].bytes / 1e6, r[2].seconds * 1e3);
  CHECK(r[0].kernels == alone); /* none: one kernel per fusible primitive */
  CHECK(r[0].memory_ops == fus);
  if (stitch_kernels > 0) {
    CHECK(r[2].kernels == stitch_kernels);
    if (r[2].kernels != stitch_kernels) fprintf(stderr, "%s", r[2].listing ? r[2].listing : "");
  }
  if (loop_more) CHECK(r[1].kernels > r[2].kernels);
  CHECK(r[2].kernels <= r[1].kernels);
  CHECK(r[1].kernels <= r[0].kernels);
  CHECK(r[2].bytes <= r[1].bytes);
  CHECK(r[1].bytes <= r[0].bytes);
  check_launch_robust(name, g);
  /* deterministic: the same program again */
  plan_result again = compile_checked(name, g, LOOM_FUSION_STITCH);
  CHECK(again.listing && r[2].listing && strcmp(again.listing, r[2].listing) == 0);
  free(again.listing);
  for (int m = 0; m < 3; m++)
    free(r[m].listing);
  loom_graph_free(g);
}

/* ---- the cost model against hand computations ------------------------- */

static void test_cost_model(void) {
  /* 32768 rows of 1024 f32 in and out: 8 KiB per row; 256 tiles wanted,
   * 32 KiB per tile at least -> max(4, 128) = 128 rows per tile */
  loom_kschedule s = loom_cost_schedule(32768, 1024, 8192, 0);
  CHECK(s.rows_per_tile == 128 && s.vector_width == 16);
  /* lanes: 16 from 256-element rows on, 8 from 8, else 1 */
  CHECK(loom_cost_vector_width(256) == 16 && loom_cost_vector_width(255) == 8);
  CHECK(loom_cost_vector_width(8) == 8 && loom_cost_vector_width(7) == 1);
  CHECK(loom_cost_schedule(32768, 64, 512, 0).vector_width == 8);
  /* tiny rows: amortisation wins (32 KiB / 8 B = 4096 rows per tile) */
  s = loom_cost_schedule(100000, 1, 8, 0);
  CHECK(s.rows_per_tile == 4096 && s.vector_width == 1);
  s = loom_cost_schedule(1, 10, 80, 0);
  CHECK(s.rows_per_tile == 1);
  s = loom_cost_schedule(3, 4096, 32768, 0);
  CHECK(s.rows_per_tile == 1); /* 32 KiB per row already; 3 tiles */
  /* a bias gradient over 1024 rows of 2304: partials (16 B per element
   * and tile) within 1/8 of 1024 * 18432 B allow 1024*18432/(8*16*2304)
   * = 64 tiles: 16 rows per tile, where sizes alone would give 4 */
  s = loom_cost_schedule(1024, 2304, 18432, 0);
  CHECK(s.rows_per_tile == 4);
  s = loom_cost_schedule(1024, 2304, 18432, 2304);
  CHECK(s.rows_per_tile == 16);
  /* but never fewer than 16 tiles for the partials' sake */
  s = loom_cost_schedule(1024, 2304, 18432, 2304 * 64);
  CHECK(s.rows_per_tile == 64);

  loom_machine m;
  loom_machine_default(&m);
  m.cores = 2;
  m.triad_gbps = 10;
  m.sgemm_gflops = 100;
  m.kernel_launch_s = 5e-6;
  m.l1d_bytes = 32768;
  m.l2_bytes = 1 << 20;
  /* memory bound: 2 x 128 MiB at 10 GB/s, 256 tiles on 2 cores */
  loom_group_info info = {.bytes_read = 134217728,
                          .bytes_written = 134217728,
                          .rows = 32768,
                          .row_len = 1024,
                          .n_parts = 1,
                          .n_stages = 1,
                          .elem_ops = 33554432};
  loom_cost_detail d;
  double t = loom_cost_group(&m, &info, &d);
  double mem = 268435456.0 / 10e9, tiles = 256 * 1e-7 / 2;
  CHECK(d.tiles == 256 && d.utilization == 1.0 && d.imbalance == 1.0);
  CHECK(fabs(t - (5e-6 + mem + tiles)) < 1e-12);
  /* one row: one tile on two cores halves the bandwidth */
  loom_group_info one = {.bytes_read = 4096,
                         .bytes_written = 4,
                         .rows = 1,
                         .row_len = 1024,
                         .n_parts = 1,
                         .n_stages = 1,
                         .n_row_reduce = 1,
                         .elem_ops = 1024};
  t = loom_cost_group(&m, &one, &d);
  CHECK(d.tiles == 1 && d.utilization == 0.5);
  CHECK(fabs(t - (5e-6 + 4100.0 / (10e9 * 0.5) + 1e-7)) < 1e-12);
  /* the memory-bound group again with half its bytes walked at a stride:
   * each of those costs 6 (STRIDED_COST, cost.c) */
  loom_group_info walk = info;
  walk.strided_bytes = 134217728;
  loom_cost_group(&m, &walk, &d);
  CHECK(d.strided_bytes == 5 * (int64_t)134217728);
  CHECK(fabs(d.memory_s - (268435456.0 + 5.0 * 134217728.0) / 10e9) < 1e-12);
  /* two row reductions feeding three stages over rows whose working set
   * exceeds L2: the inputs are read three times, scratch spills */
  loom_group_info big = {.bytes_read = 1 << 30,
                         .bytes_written = 1 << 20,
                         .rows = 256,
                         .row_len = 1 << 20,
                         .n_parts = 1,
                         .n_stages = 3,
                         .n_scratch = 1,
                         .n_row_reduce = 2,
                         .elem_ops = 1 << 28};
  loom_cost_group(&m, &big, &d);
  int64_t scratch = (int64_t)4 << 20;
  CHECK(d.working_set == scratch + (4 << 20));
  CHECK(d.extra_bytes == 2 * ((int64_t)1 << 30) + 2 * scratch * 256);
  /* the same rows within L2 (256 KiB each): a tenth of the re-reads */
  loom_group_info mid = {.bytes_read = 1 << 26,
                         .bytes_written = 1 << 20,
                         .rows = 256,
                         .row_len = 1 << 16,
                         .n_parts = 1,
                         .n_stages = 3,
                         .n_row_reduce = 2,
                         .elem_ops = 1 << 24};
  loom_cost_group(&m, &mid, &d);
  CHECK(d.extra_bytes == (int64_t)(0.1 * (double)(2 << 26)));
  /* a SCALAR stage after one reduction re-reads nothing: one re-read only */
  mid.n_row_reduce = 1;
  loom_cost_group(&m, &mid, &d);
  CHECK(d.extra_bytes == (int64_t)(0.1 * (double)(1 << 26)));
  /* compute bound: elem ops at a quarter of the GEMM rate */
  loom_group_info cmp = {.bytes_read = 1 << 20,
                         .bytes_written = 1 << 20,
                         .rows = 1024,
                         .row_len = 1024,
                         .n_parts = 1,
                         .n_stages = 1,
                         .elem_ops = (int64_t)1 << 32};
  loom_cost_group(&m, &cmp, &d);
  CHECK(fabs(d.compute_s - 4294967296.0 / 25e9) < 1e-9);
}

static void test_machine(void) {
  loom_machine m;
  loom_machine_detect(ctx, &m);
  CHECK(m.threads >= 1 && m.cores >= 1);
  CHECK(m.l1d_bytes > 0 && m.l2_bytes >= m.l1d_bytes && m.llc_bytes >= m.l2_bytes);
  CHECK(m.kernel_launch_s > 0 && m.kernel_launch_s < 1e-2);
  CHECK(m.triad_gbps > 0 && m.sgemm_gflops > 0);
  printf("machine: %d threads, %d cores, L1d %lld, L2 %lld, LLC %lld, launch %.2g s\n", m.threads,
         m.cores, (long long)m.l1d_bytes, (long long)m.l2_bytes, (long long)m.llc_bytes,
         m.kernel_launch_s);
  CHECK_OK(ctx, loom_ctx_set_threads(ctx, 1));
  loom_machine one;
  loom_machine_detect(ctx, &one);
  CHECK(one.threads == 1 && one.cores == m.cores); /* plans read cores */
  /* rates measured with fewer threads than cores are not kept */
  one.measured = true;
  one.triad_gbps = 1e4;
  loom_machine_keep_best(&one, 0);
  double kept = 0;
  CHECK(one.cores == 1 || !loom_profile_get("triad_gbps", &kept) || kept < 1e4);
  CHECK_OK(ctx, loom_ctx_set_threads(ctx, 0));
  /* the profile keeps the best rates and launch cost seen, to two digits,
   * and plans read them (the profile is this test's own: common.c) */
  loom_machine seen = m;
  seen.measured = true;
  seen.triad_gbps = 23.456;
  seen.sgemm_gflops = 187.6;
  loom_machine_keep_best(&seen, 3e-6);
  seen.triad_gbps = 11.0; /* a busy machine's: lower, not kept */
  seen.sgemm_gflops = 250.0;
  loom_machine_keep_best(&seen, 9e-6);
  loom_machine got;
  loom_machine_detect(ctx, &got);
  CHECK(got.measured && fabs(got.triad_gbps - 23.0) < 1e-9 && fabs(got.sgemm_gflops - 250.0) < 1e-9);
  CHECK(getenv("LOOM_KERNEL_LAUNCH_US") || got.kernel_launch_s <= 3e-6);
  /* nothing usable kept: the first session measures quickly and keeps
   * what beats the profile (the triad here; not the sgemm rate of 250) */
  loom_profile_put("triad_gbps", -1.0);
  loom_machine fresh;
  loom_machine_detect(ctx, &fresh);
  CHECK(!fresh.measured && fresh.triad_gbps == 10.0);
  CHECK_OK(ctx, loom_machine_measure_once(ctx, loom_gemm_sgemm, &fresh));
  CHECK(fresh.measured && fresh.triad_gbps > 0.1 && fresh.sgemm_gflops > 0.1);
  loom_machine_detect(ctx, &got);
  CHECK(got.measured && got.triad_gbps > 0.1 && got.sgemm_gflops == 250.0);
  CHECK(fabs(got.triad_gbps - fresh.triad_gbps) <= 0.05 * fresh.triad_gbps);
}

static void test_api(void) {
  loom_fusion_mode m;
  CHECK_OK(ctx, loom_fusion_mode_from_name("loop", &m));
  CHECK(m == LOOM_FUSION_LOOP);
  CHECK(strcmp(loom_fusion_mode_name(LOOM_FUSION_STITCH), "stitch") == 0);
  CHECK(loom_fusion_mode_from_name("fast", &m) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_program p;
  loom_fusion_options o = {.mode = LOOM_FUSION_STITCH};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_fusion_compile(ctx, NULL, &o, &p));
  /* eager is the cpu backend's mode, not one that fuses */
  loom_graph *tiny = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, "input %x : f32[4]\n%y = exp(%x)\noutput y = %y\n", &tiny));
  loom_fusion_options eager = {.mode = LOOM_FUSION_EAGER};
  if (tiny) {
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_fusion_compile(ctx, tiny, &eager, &p));
    CHECK(strstr(loom_ctx_error(ctx), "(eager) does not fuse") != NULL);
    loom_program_clear(&p);
  }
  loom_graph_free(tiny);
  loom_program_clear(&p); /* cleared by the failed call: safe */
  loom_program_clear(NULL);
  /* an empty graph: no steps */
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o, &p)); /* machine NULL: defaults */
  CHECK(p.n_steps == 0 && p.n_kernels == 0);
  loom_program_clear(&p);
  loom_graph_free(g);
}

/* A matmul between two element-wise chains: a GEMM step, two regions. */
static void test_gemm_split(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(256, 512)), w = in_f32(g, "w", 2, SHAPE(512, 512)), y;
  loom_value h = op1(g, LOOM_OP_RELU, op2(g, LOOM_OP_ADD, x, x), 0, NULL);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){h, w}, 0, NULL, &y));
  /* the residual reads x again: fusing it with the first chain would
   * need the matmul in between, a cycle */
  y = op2(g, LOOM_OP_ADD, op1(g, LOOM_OP_TANH, y, 0, NULL), h);
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  g = finish(g);
  if (!g) return;
  /* the second region reads the product row by row: the GEMM's epilogue
   * (element-wise, so in loop mode too); none mode has no epilogues */
  static const loom_fusion_mode modes[] = {LOOM_FUSION_STITCH, LOOM_FUSION_LOOP};
  for (int i = 0; i < 2; i++) {
    plan_result r = compile_checked("gemm-split", g, modes[i]);
    CHECK(r.kernels == 2 && r.steps == 2);
    CHECK(r.listing && strstr(r.listing, "epilogue on blocks of"));
    free(r.listing);
  }
  plan_result r = compile_checked("gemm-split", g, LOOM_FUSION_NONE);
  CHECK(r.listing && !strstr(r.listing, "epilogue on"));
  free(r.listing);
  loom_graph_free(g);
}

/* The epilogue rule: the block size is the model's, from the machine's
 * GEMM curve. An FFN GEMM ([1024, 768] x [768, 3072]) with bias + tanh: on
 * the default machine (whole-row blocks of 128 rows and more at the full
 * rate) the epilogue takes big blocks, where the old rule (as large as
 * fits half the L2) took 16 rows; where every block runs at a fifth of the
 * rate no epilogue pays and the kernel stays a separate step, as where
 * the epilogue's traffic outgrows the LLC; and the modeled time is never
 * above the plan without an epilogue. */
static int64_t epilogue_rows_of(const loom_graph *g, const loom_machine *m, double *modeled) {
  loom_program p;
  loom_fusion_options o = {.mode = LOOM_FUSION_STITCH, .machine = m};
  int64_t rows = -1;
  CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o, &p));
  for (int32_t s = 0; s < p.n_steps; s++)
    if (p.steps[s].kind == LOOM_STEP_GEMM) rows = p.steps[s].epilogue_rows;
  *modeled = p.modeled_seconds;
  loom_program_clear(&p);
  return rows;
}

static void test_epilogue_rule(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in_f32(g, "x", 2, SHAPE(1024, 768)), w = in_f32(g, "w", 2, SHAPE(768, 3072));
  loom_value b = in_f32(g, "b", 1, SHAPE(3072)), y;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &y));
  y = op1(g, LOOM_OP_TANH, op2(g, LOOM_OP_ADD, y, b), 0, NULL);
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  g = finish(g);
  if (!g) return;
  double fused_s = 0, slow_s = 0;
  int64_t rows = epilogue_rows_of(g, &machine, &fused_s);
  CHECK(rows >= 128);
  loom_machine slow = machine;
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) slow.gemm_rows_eff[i] = 0.2;
  CHECK(epilogue_rows_of(g, &slow, &slow_s) == 0);
  /* the same GEMM and kernel, less the kernel's launch */
  CHECK(fused_s < slow_s && fused_s > slow_s - 2 * machine.kernel_launch_s);
  if (rows < 128) fprintf(stderr, "  epilogue rule: blocks of %lld rows\n", (long long)rows);
  /* Bytes saved are time saved only where the kernel waits on memory: on
   * a machine of slow arithmetic (5 GFLOP/s: bias + tanh computes longer
   * than its 25 MB take at 10 GB/s) blocks of 16 rows, which keep C in L2
   * for the kernel but run the GEMM 0.05% slower (0.5 ms), gain only the
   * launch and lose, though the read of C they save would take 1.3 ms. */
  loom_machine busy = machine;
  busy.sgemm_gflops = 5;
  busy.triad_gbps = 10;
  busy.l2_bytes = 1 << 20;
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) busy.gemm_rows_eff[i] = i ? 0.2 : 0.9995;
  CHECK(epilogue_rows_of(g, &busy, &slow_s) == 0);
  busy.gemm_rows_eff[0] = 1.0; /* free blocks: the launch is gain enough */
  CHECK(epilogue_rows_of(g, &busy, &slow_s) == 16);
  /* An epilogue streaming more than the LLC over the product (C and the
   * output: 24 MB) evicts B (9 MB) between blocks that do not stay in L2:
   * with a 20 MB LLC, which would hold B, each block would read B from
   * memory again, which the launch does not repay, so the kernel stays a
   * separate step. (The default machine's 8 MB LLC holds no B anyway.) */
  loom_machine small_llc = machine;
  small_llc.llc_bytes = 20 << 20;
  CHECK(epilogue_rows_of(g, &small_llc, &slow_s) == 0);
  small_llc.llc_bytes = 64 << 20; /* it fits: fused as on the default machine */
  CHECK(epilogue_rows_of(g, &small_llc, &slow_s) == rows);
  loom_graph_free(g);
}

/* Stitch mode never keeps a plan the model rates slower than the loop
 * plan: it compiles both and keeps the faster, whatever the machine. */
static void check_never_slower_than_loop(const char *what, const loom_graph *g) {
  static const double launch[] = {0.5e-6, 5e-6, 1e-4};
  for (int32_t i = 0; i < 3; i++) {
    loom_machine m = machine;
    m.kernel_launch_s = launch[i];
    loom_program p[3];
    loom_fusion_options o[3] = {{.mode = LOOM_FUSION_LOOP, .machine = &m},
                                {.mode = LOOM_FUSION_STITCH, .machine = &m, .stitch_only = true},
                                {.mode = LOOM_FUSION_STITCH, .machine = &m}};
    for (int32_t k = 0; k < 3; k++)
      CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o[k], &p[k]));
    double best = fmin(p[0].modeled_seconds, p[1].modeled_seconds);
    CHECK(p[2].modeled_seconds == best);
    CHECK(p[2].mode == (p[1].modeled_seconds <= p[0].modeled_seconds ? LOOM_FUSION_STITCH
                                                                      : LOOM_FUSION_LOOP));
    if (p[2].mode == LOOM_FUSION_LOOP)
      printf("%s, launch %.1g s: stitch keeps the loop plan (%.3f ms against %.3f)\n", what,
             launch[i], 1e3 * p[0].modeled_seconds, 1e3 * p[1].modeled_seconds);
    for (int32_t k = 0; k < 3; k++)
      loom_program_clear(&p[k]);
  }
}

static void test_gpt(void) {
  loom_graph *g = build_gpt(1);
  if (!g) return;
  plan_result r[3];
  double t[3];
  for (int m = 0; m < 3; m++) {
    double t0 = now_s();
    r[m] = compile_checked("gpt block", g, plan_modes[m]);
    t[m] = now_s() - t0;
  }
  printf("gpt block fwd+bwd+adamw: %d nodes, %d memory ops; kernels none %d loop %d stitch %d; "
         "MB none %.1f loop %.1f stitch %.1f; compile s none %.3f loop %.3f stitch %.3f\n",
         g->n_nodes, r[2].memory_ops, r[0].kernels, r[1].kernels, r[2].kernels, r[0].bytes / 1e6,
         r[1].bytes / 1e6, r[2].bytes / 1e6, t[0], t[1], t[2]);
  if (getenv("LOOM_TEST_DUMP")) fprintf(stderr, "%s", r[2].listing ? r[2].listing : "");
  CHECK(3 * r[2].kernels <= r[2].memory_ops);
  CHECK(r[2].bytes <= r[1].bytes && r[1].bytes <= r[0].bytes);
  CHECK(r[2].kernels <= r[1].kernels);
  /* at bench sizes only: on toy tensors launches rightly decide more */
  if (!quick) check_launch_robust("gpt block", g);
  check_never_slower_than_loop("gpt block", g);
  /* the thread count of a run never reaches the plan */
  loom_machine one = machine;
  one.threads = 1;
  loom_program p1, p2;
  loom_fusion_options o1 = {.mode = LOOM_FUSION_STITCH, .machine = &one};
  loom_fusion_options o2 = {.mode = LOOM_FUSION_STITCH, .machine = &machine};
  CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o1, &p1));
  CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o2, &p2));
  CHECK(same_plan(&p1, &p2));
  for (int32_t k = 0; k < p1.n_kernels && k < p2.n_kernels; k++)
    for (int32_t i = 0; i < p1.kernels[k].n_parts && i < p2.kernels[k].n_parts; i++)
      CHECK(p1.kernels[k].parts[i].sched.rows_per_tile ==
            p2.kernels[k].parts[i].sched.rows_per_tile);
  loom_program_clear(&p1);
  loom_program_clear(&p2);
  plan_result again = compile_checked("gpt block", g, LOOM_FUSION_STITCH);
  CHECK(again.listing && r[2].listing && strcmp(again.listing, r[2].listing) == 0);
  free(again.listing);
  for (int m = 0; m < 3; m++)
    free(r[m].listing);
  loom_graph_free(g);
}

/* Producer duplication (docs/FUSION.md): h = f(x + b) read by a row sum
 * and, past the sum, by y = h * sum: loop mode cannot put both readers in
 * one kernel (a reduction only as a root), so XLA recomputes the cheap
 * broadcast-add in the second kernel instead of writing h and reading it
 * back. An exp of it is recomputed too (an f32 function of the kernels,
 * cheaper than the traffic by the cost model); an erf (computed in
 * double) is left alone. */
static void test_duplication(void) {
  for (int kind = 0; kind < 3; kind++) { /* add, exp, erf */
    loom_graph *g = NULL;
    CHECK_OK(ctx, loom_graph_new(ctx, &g));
    loom_value x = in_f32(g, "x", 2, SHAPE(R, C)), b = in_f32(g, "b", 1, SHAPE(C));
    loom_value h = op2(g, LOOM_OP_ADD, x, b);
    if (kind) h = op1(g, kind == 1 ? LOOM_OP_EXP : LOOM_OP_ERF, h, 0, NULL);
    loom_attr a[2] = {A_INTS("axes", 1, 1), A_INT("keepdims", 1)};
    loom_value s = op1(g, LOOM_OP_REDUCE_SUM, h, 2, a);
    CHECK_OK(ctx, loom_graph_output(g, "y", op2(g, LOOM_OP_MUL, h, s)));
    g = finish(g);
    if (!g) return;
    loom_program p[2];
    for (int dup = 0; dup < 2; dup++) {
      loom_fusion_options o = {.mode = LOOM_FUSION_LOOP, .machine = &machine,
                               .duplicate = dup ? 0 : -1}; /* 0: loop's default, on */
      CHECK_OK(ctx, loom_fusion_compile(ctx, g, &o, &p[dup]));
    }
    /* the value h lives in memory only without duplication */
    int32_t hv = -1, n_add = 0, n_exp = 0, n_erf = 0;
    for (int32_t n = 0; n < g->n_nodes; n++) {
      if (g->nodes[n].op == LOOM_OP_REDUCE_SUM) hv = g->nodes[n].in[0];
    }
    for (int32_t i = 0; i < p[1].n_dups; i++) {
      n_add += g->nodes[p[1].dup_node[i]].op == LOOM_OP_ADD;
      n_exp += g->nodes[p[1].dup_node[i]].op == LOOM_OP_EXP;
      n_erf += g->nodes[p[1].dup_node[i]].op == LOOM_OP_ERF;
    }
    CHECK(p[0].n_dups == 0);
    CHECK(n_erf == 0);
    if (kind < 2) {
      CHECK(n_add == 1 && n_exp == (kind == 1));
      CHECK(hv >= 0 && p[0].materialized[hv] && !p[1].materialized[hv]);
      CHECK(p[1].modeled_bytes < p[0].modeled_bytes);
      printf("duplication: broadcast-add%s into 2 kernels: MB %.1f -> %.1f, %d copies\n",
             kind ? " + exp" : "", p[0].modeled_bytes / 1e6, p[1].modeled_bytes / 1e6,
             (int)p[1].n_dups);
    } else {
      CHECK(p[1].n_dups == 0);
      CHECK(hv >= 0 && p[1].materialized[hv]);
      CHECK(p[1].modeled_bytes == p[0].modeled_bytes);
    }
    /* stitch needs no copies here: one kernel */
    loom_fusion_options so = {.mode = LOOM_FUSION_STITCH, .machine = &machine};
    loom_program sp;
    CHECK_OK(ctx, loom_fusion_compile(ctx, g, &so, &sp));
    CHECK(sp.n_kernels == 1 && sp.n_dups == 0);
    loom_program_clear(&sp);
    free(compile_checked("duplication", g, LOOM_FUSION_LOOP).listing);
    loom_program_clear(&p[0]);
    loom_program_clear(&p[1]);
    loom_graph_free(g);
  }
}

int main(void) {
  quick = getenv("LOOM_TEST_QUICK") && atoi(getenv("LOOM_TEST_QUICK")) != 0;
  if (loom_ctx_new(&ctx)) return 1;
  loom_machine_default(&machine);
  test_api();
  test_machine();
  test_cost_model();
  test_gemm_split();
  test_epilogue_rule();
  test_duplication();
  check_pattern("layernorm fwd", build_layernorm_fwd(), 1, true);
  check_pattern("layernorm bwd", build_layernorm_bwd(), 1, true);
  check_pattern("softmax fwd", build_softmax_fwd(), 1, true);
  check_pattern("softmax bwd", build_softmax_bwd(), 1, true);
  check_pattern("bias+dropout+residual+ln", build_bias_dropout_residual_ln(), 1, true);
  /* two: the rows' loss (log of the sum, less the label's logit, summed)
   * is a tiny kernel of its own, so the big one keeps exp(x - max) in a
   * scratch row rather than recomputing it in a second phase (exp costs
   * 16 element operations: loom_cost_op_weight) */
  check_pattern("cross-entropy fwd+bwd", build_cross_entropy(), 2, false);
  check_pattern("adamw x3", build_adamw(), 1, false);
  check_pattern("adamw gpt-2 block params", build_adamw_gpt(), 1, false);
  check_pattern("bias+gelu", build_bias_gelu(), 1, false);
  test_gpt();
  loom_ctx_free(ctx);
  return loom_test_finish("test_fusion_plan");
}

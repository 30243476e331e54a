/* Memory planning: reuse on chains, no overlap between live values on
 * random DAGs, outputs kept to the end, arena execution equal to
 * execution with one private buffer per value, and plans over the steps
 * of fused programs (only materialized values get memory; an async step's
 * values live until it is joined). */
#include "common.h"

#include "ir/build.h"
#include "ir/view.h"
#include "passes/memplan.h"
#include "fusion/fusion.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t bytes_of(const loom_graph *g, int32_t v) {
  const loom_type *t = &g->values[v].type;
  return loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
}

static void test_chain(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 1, (int64_t[]){1000}, &x));
  int32_t v = x;
  for (int i = 0; i < 100; i++)
    v = lb_unary(g, i % 2 ? LOOM_OP_NEG : LOOM_OP_EXP, v);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", v));
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build(g, &p));
  int64_t sum = 0;
  for (int32_t k = 0; k < g->n_values; k++)
    if (p.offset[k] >= 0) sum += p.size[k];
  CHECK(sum == 100 * 4000);
  CHECK(p.offset[x] == -1);
  /* a chain needs two buffers (input and output of the running node) */
  CHECK(p.peak_bytes == 2 * 4032);
  CHECK(p.peak_bytes * 20 < sum);
  loom_memplan_free(&p);
  loom_graph_free(g);
}

/* 4100 buffers of 2^51 bytes alive at once sum past int64: the planner
 * must refuse, not wrap its offsets and peak (issue 8 bug 1). */
static void test_sizes_overflow(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  enum { N = 4100 };
  int32_t *a = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N; i++)
    a[i] = lb_iota(g, LOOM_DTYPE_F64, 1, (int64_t[]){INT64_C(1) << 48}, 0);
  int32_t sum = a[0];
  for (int i = 1; i < N; i++) sum = lb_add(g, sum, a[i]);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", sum));
  loom_memplan p;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_MEMORY, loom_memplan_build(g, &p));
  CHECK(strstr(loom_ctx_error(ctx), "more than 2^62 bytes") != NULL);
  free(a);
  loom_graph_free(g);
}

/* A random DAG over a few shapes; returns the graph. */
static loom_graph *random_dag(loom_ctx *ctx, loom_test_rng *r, int32_t n_ops) {
  static const int64_t shapes[][2] = {{4, 8}, {1, 8}, {4, 1}, {8, 8}, {4, 16}};
  loom_graph *g = NULL;
  if (loom_graph_new(ctx, &g)) return NULL;
  int32_t vals[256], nv = 0;
  char name[16];
  int32_t n_in = 2 + (int32_t)loom_test_uniform(r, 0, 3);
  for (int32_t i = 0; i < n_in; i++) {
    snprintf(name, sizeof name, "in%d", i);
    int s = (int)loom_test_uniform(r, 0, 5);
    if (loom_graph_input(g, name, LOOM_DTYPE_F32, 2, shapes[s], &vals[nv])) break;
    nv++;
  }
  for (int32_t k = 0; k < n_ops && nv < 256; k++) {
    int32_t a = vals[(int)loom_test_uniform(r, 0, nv)];
    int32_t b = vals[(int)loom_test_uniform(r, 0, nv)];
    const loom_type *ta = &g->values[a].type, *tb = &g->values[b].type;
    int32_t rk;
    int64_t sh[LOOM_MAX_RANK];
    int32_t v = -1;
    switch ((int)loom_test_uniform(r, 0, 7)) {
    case 0: v = lb_unary(g, LOOM_OP_TANH, a); break;
    case 1:
    case 2:
      if (loom_broadcast_shapes(ta->rank, ta->shape, tb->rank, tb->shape, &rk, sh))
        v = lb_binary(g, k % 3 ? LOOM_OP_ADD : LOOM_OP_MUL, a, b);
      break;
    case 3:
      if (ta->rank == 2) v = lb_sum(g, a, 1, (int64_t[]){0}, true);
      break;
    case 4:
      if (ta->rank == 2 && tb->rank == 2 && ta->shape[1] == tb->shape[0])
        v = lb_matmul(g, a, b, false, false);
      else if (ta->rank == 2 && tb->rank == 2 && ta->shape[1] == tb->shape[1])
        v = lb_matmul(g, a, b, false, true);
      break;
    case 5:
      if (ta->rank == 2 && tb->rank == 2 && ta->shape[1] == tb->shape[1])
        v = lb_concat(g, 2, (int32_t[]){a, b}, 0);
      break;
    case 6: /* shares its input's buffer */
      if (ta->rank == 2 && ta->shape[0] != ta->shape[1])
        v = lb_reshape(g, a, 2, (int64_t[]){ta->shape[1], ta->shape[0]});
      break;
    }
    if (v >= 0) vals[nv++] = v;
  }
  int32_t n_out = 0;
  for (int32_t i = n_in; i < nv; i++)
    if (i == nv - 1 || loom_test_uniform(r, 0, 1) < 0.1) {
      snprintf(name, sizeof name, "out%d", n_out++);
      loom_graph_output(g, name, vals[i]);
    }
  if (loom_build_status(g) || n_out == 0) {
    loom_graph_free(g);
    return NULL;
  }
  return g;
}

/* Every pair of buffers alive at the same step must be disjoint; a reshape
 * shares its input's buffer, which then lives as long as either. */
static void check_plan(const loom_graph *g, const loom_memplan *p, int64_t *lower_bound) {
  int32_t nv = g->n_values;
  int32_t *first = malloc(sizeof(int32_t) * (size_t)nv);
  int32_t *last = malloc(sizeof(int32_t) * (size_t)nv);
  int32_t *root = malloc(sizeof(int32_t) * (size_t)nv);
  for (int32_t v = 0; v < nv; v++) {
    first[v] = g->values[v].kind == LOOM_VALUE_NODE ? g->values[v].node : -1;
    last[v] = first[v];
    root[v] = v;
  }
  for (int32_t j = 0; j < g->n_nodes; j++) {
    const loom_node *n = &g->nodes[j];
    for (int32_t i = 0; i < n->n_in; i++)
      last[n->in[i]] = j;
    if (n->op == LOOM_OP_RESHAPE) root[n->out[0]] = root[n->in[0]];
  }
  for (int32_t i = 0; i < g->n_outputs; i++)
    last[g->outputs[i]] = g->n_nodes;
  int bad = 0;
  for (int32_t v = 0; v < nv; v++) {
    if (p->root[v] != root[v] || p->first[v] != first[v] || p->last[v] != last[v]) bad++;
    if (root[v] != v) {
      if (p->offset[v] != p->offset[root[v]]) bad++;
      last[root[v]] = LOOM_MAX(last[root[v]], last[v]); /* roots precede aliases */
    }
  }
  /* the most bytes live at one step: no plan can do better */
  int64_t bound = 0;
  for (int32_t j = 0; j < g->n_nodes; j++) {
    int64_t live = 0;
    for (int32_t v = 0; v < nv; v++)
      if (g->values[v].kind == LOOM_VALUE_NODE && root[v] == v && first[v] <= j && j <= last[v])
        live += (p->size[v] + 63) / 64 * 64;
    bound = LOOM_MAX(bound, live);
  }
  *lower_bound += bound;
  for (int32_t u = 0; u < nv; u++) {
    if (g->values[root[u]].kind != LOOM_VALUE_NODE) {
      if (p->offset[u] != -1) bad++;
      continue;
    }
    if (p->offset[u] < 0 || p->offset[u] % 64 || p->size[u] != bytes_of(g, u) ||
        p->offset[u] + p->size[u] > p->peak_bytes)
      bad++;
    if (root[u] != u) continue;
    for (int32_t v = u + 1; v < nv; v++) {
      if (root[v] != v || g->values[v].kind != LOOM_VALUE_NODE) continue;
      bool live_together = first[u] <= last[v] && first[v] <= last[u];
      bool mem_overlap =
          p->offset[u] < p->offset[v] + p->size[v] && p->offset[v] < p->offset[u] + p->size[u];
      if (live_together && mem_overlap) bad++;
    }
  }
  CHECK(bad == 0);
  free(first);
  free(last);
  free(root);
}

/* Runs g with one private buffer per value (no planning) on ref kernels. */
static loom_view *run_unplanned(loom_ctx *ctx, const loom_graph *g, loom_tensor *const *inputs) {
  loom_view *vals = calloc((size_t)g->n_values, sizeof *vals);
  for (int32_t v = 0; v < g->n_values; v++)
    vals[v] = loom_view_of(&g->values[v].type, calloc((size_t)bytes_of(g, v) + 1, 1));
  for (int32_t i = 0; i < g->n_inputs; i++)
    memcpy(vals[g->inputs[i]].data, loom_tensor_data(inputs[i]), (size_t)bytes_of(g, g->inputs[i]));
  for (int32_t j = 0; j < g->n_nodes; j++)
    CHECK_OK(ctx, loom_exec_node_ref(ctx, g, &g->nodes[j], vals));
  return vals;
}

static void test_random_dags(loom_ctx *ctx) {
  loom_test_rng r = {12345};
  int made = 0, compared = 0, mismatched = 0;
  int64_t total_sum = 0, total_peak = 0, total_bound = 0;
  for (int trial = 0; trial < 300; trial++) {
    loom_graph *g = random_dag(ctx, &r, 5 + trial % 40);
    if (!g) continue;
    made++;
    loom_memplan p;
    CHECK_OK(ctx, loom_memplan_build(g, &p));
    check_plan(g, &p, &total_bound);
    for (int32_t v = 0; v < g->n_values; v++)
      if (p.offset[v] >= 0 && p.root[v] == v) total_sum += (p.size[v] + 63) / 64 * 64;
    total_peak += p.peak_bytes;
    loom_memplan_free(&p);

    /* Execution through the arena (a ref session) equals the unplanned run. */
    if (trial % 3 == 0) {
      loom_tensor *in[8] = {NULL}, *out[64] = {NULL};
      for (int32_t i = 0; i < g->n_inputs; i++) {
        const loom_type *t = &g->values[g->inputs[i]].type;
        CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
        float *d = loom_tensor_data(in[i]);
        for (int64_t e = 0; e < loom_type_numel(t); e++)
          d[e] = (float)loom_test_uniform(&r, -1, 1);
      }
      loom_session *s = NULL;
      loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "ref");
      CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
      CHECK_OK(ctx,
               loom_session_run(s, g->n_inputs, (const loom_tensor *const *)in, g->n_outputs, out));
      loom_view *vals = run_unplanned(ctx, g, in);
      for (int32_t k = 0; k < g->n_outputs; k++) {
        int64_t nb = bytes_of(g, g->outputs[k]);
        if (!out[k] || memcmp(loom_tensor_data(out[k]), vals[g->outputs[k]].data, (size_t)nb) != 0)
          mismatched++;
        compared++;
        loom_tensor_free(out[k]);
      }
      for (int32_t v = 0; v < g->n_values; v++)
        free(vals[v].data);
      free(vals);
      for (int32_t i = 0; i < g->n_inputs; i++)
        loom_tensor_free(in[i]);
      loom_session_free(s);
    }
    loom_graph_free(g);
  }
  CHECK(made > 200);
  CHECK(compared > 50);
  CHECK(mismatched == 0);
  /* reuse pays, and best fit stays close to the live-bytes lower bound */
  CHECK(total_peak < total_sum * 3 / 4);
  CHECK(total_peak <= total_bound * 5 / 4);
  printf("random DAGs: %d planned, %d outputs compared; bytes: peak %lld, "
         "live bound %lld, sum %lld\n",
         made, compared, (long long)total_peak, (long long)total_bound, (long long)total_sum);
}

/* A node's output never shares memory with its inputs, even a dying one. */
static void test_no_in_place(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 3}, &x));
  int32_t a = lb_unary(g, LOOM_OP_EXP, x);
  int32_t t = lb_transpose(g, a, (int64_t[]){1, 0});
  int32_t y = lb_matmul(g, t, t, false, false);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build(g, &p));
  CHECK(p.offset[a] != p.offset[t]);
  CHECK(p.offset[t] != p.offset[y]);
  CHECK(p.offset[y] == p.offset[a]); /* a is dead by then: reused */
  CHECK(p.last[y] == g->n_nodes);
  loom_memplan_free(&p);
  CHECK(loom_memplan_build(NULL, &p) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_memplan_free(NULL);
  loom_graph_free(g);
}

/* A reshape shares its input's buffer and keeps it alive. */
static void test_reshape_alias(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}, &x));
  int32_t xr = lb_reshape(g, x, 1, (int64_t[]){24});                 /* node 0, of an input */
  int32_t a = lb_unary(g, LOOM_OP_EXP, xr);                          /* node 1 */
  int32_t ar = lb_reshape(g, a, 2, (int64_t[]){6, 4});               /* node 2 */
  int32_t b = lb_unary(g, LOOM_OP_NEG, x);                           /* node 3 */
  int32_t c = lb_unary(g, LOOM_OP_NEG, b);                           /* node 4: b dies */
  int32_t y = lb_add(g, ar, lb_reshape(g, c, 2, (int64_t[]){6, 4})); /* 5, 6 */
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build(g, &p));
  CHECK(p.root[xr] == x && p.offset[xr] == -1);
  CHECK(p.root[ar] == a && p.offset[ar] == p.offset[a]);
  /* a stays alive through node 6 (via ar): b and c must not take it */
  CHECK(p.offset[b] != p.offset[a] && p.offset[c] != p.offset[a]);
  CHECK(p.offset[c] != p.offset[b]);
  int64_t lb = 0;
  check_plan(g, &p, &lb);
  loom_memplan_free(&p);

  /* and it runs: y = exp(x) viewed as [6, 4] + x viewed as [6, 4] */
  loom_session *s = NULL;
  float xv[24];
  for (int i = 0; i < 24; i++)
    xv[i] = (float)i / 10.0f;
  loom_tensor *xt = NULL, *out[1] = {NULL};
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}, xv, &xt));
  for (int k = 0; k < 2; k++) {
    CHECK_OK(ctx,
             loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = k ? "cpu" : "ref"), &s));
    CHECK_OK(ctx, loom_session_run(s, 1, (const loom_tensor *const *)&xt, 1, out));
    int bad = 0; /* generated f32 exp is within 2 ulp of libm's (kernel/kmath.h) */
    for (int i = 0; out[0] && i < 24; i++) {
      float want = (float)exp((double)xv[i]) + xv[i];
      bad += fabsf(((float *)loom_tensor_data(out[0]))[i] - want) > 4 * FLT_EPSILON * want;
    }
    CHECK(out[0] && bad == 0);
    loom_tensor_free(out[0]);
    out[0] = NULL;
    loom_session_free(s);
  }
  loom_tensor_free(xt);
  loom_graph_free(g);
}

/* A fused program by hand: step 0 = kernel {a = exp(x); b = neg(a)},
 * step 1 = kernel {c = b + x; y = sum(c)}; a and c never reach memory. */
static void test_steps(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){10, 100}, &x));
  int32_t a = lb_unary(g, LOOM_OP_EXP, x);
  int32_t b = lb_unary(g, LOOM_OP_NEG, a);
  int32_t c = lb_add(g, b, x);
  int32_t y = lb_reduce(g, LOOM_OP_REDUCE_SUM, c, 1, (int64_t[]){1}, false);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  bool *mat = calloc((size_t)g->n_values, sizeof *mat);
  mat[x] = mat[b] = mat[y] = true;
  int32_t in0[] = {x}, out0[] = {b}, in1[] = {b, x}, out1[] = {y};
  loom_memplan_step steps[2] = {{.n_in = 1, .n_out = 1, .in = in0, .out = out0},
                                {.n_in = 2, .n_out = 1, .in = in1, .out = out1}};
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 2, steps, mat, &p));
  CHECK(p.offset[a] == -1 && p.offset[c] == -1 && p.offset[x] == -1);
  CHECK(p.offset[b] >= 0 && p.offset[y] >= 0 && p.offset[b] != p.offset[y]);
  CHECK(p.first[b] == 0 && p.last[b] == 1 && p.first[y] == 1 && p.last[y] == 2);
  CHECK(p.first[a] == -1 && p.last[a] == -1 && p.last[x] == 1);
  CHECK(p.peak_bytes == 4032 + 64); /* b [10, 100] and y [10], nothing else */
  loom_memplan_free(&p);

  /* inconsistent programs are INTERNAL errors with a message */
  mat[b] = false; /* step 0 writes a value nobody keeps */
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 2, steps, mat, &p));
  CHECK(strstr(loom_ctx_error(ctx), "not materialized") != NULL);
  mat[b] = true;
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 1, steps + 1, mat, &p));
  CHECK(strstr(loom_ctx_error(ctx), "no earlier step") != NULL);
  loom_memplan_step twice[2] = {steps[0], steps[0]};
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 2, twice, mat, &p));
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 1, steps, mat, &p));
  CHECK(strstr(loom_ctx_error(ctx), "never written") != NULL);
  int32_t bad_in[] = {x}, bad_out[] = {x};
  loom_memplan_step writes_input = {.n_in = 1, .n_out = 1, .in = bad_in, .out = bad_out};
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 1, &writes_input, mat, &p));
  loom_memplan_step alias_bad = steps[1];
  alias_bad.alias = true; /* b [10, 100] and y [10] differ in size */
  loom_memplan_step seq[2] = {steps[0], alias_bad};
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_memplan_build_steps(g, 2, seq, mat, &p));
  CHECK(loom_memplan_build_steps(g, 2, NULL, mat, &p) == LOOM_STATUS_INVALID_ARGUMENT);
  free(mat);
  loom_graph_free(g);
}

/* One step per node with everything materialized is the node plan. */
static void test_steps_match_nodes(loom_ctx *ctx) {
  loom_test_rng r = {777};
  int same = 0, made = 0;
  for (int trial = 0; trial < 40; trial++) {
    loom_graph *g = random_dag(ctx, &r, 5 + trial);
    if (!g) continue;
    made++;
    loom_memplan_step *steps = calloc((size_t)g->n_nodes + 1, sizeof *steps);
    for (int32_t j = 0; j < g->n_nodes; j++) {
      const loom_node *n = &g->nodes[j];
      steps[j] = (loom_memplan_step){.n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out,
                                     .alias = n->op == LOOM_OP_RESHAPE};
    }
    loom_memplan a, b;
    CHECK_OK(ctx, loom_memplan_build(g, &a));
    CHECK_OK(ctx, loom_memplan_build_steps(g, g->n_nodes, steps, NULL, &b));
    bool eq = a.peak_bytes == b.peak_bytes;
    for (int32_t v = 0; eq && v < g->n_values; v++)
      eq = a.offset[v] == b.offset[v] && a.first[v] == b.first[v] && a.last[v] == b.last[v] &&
           a.root[v] == b.root[v];
    same += eq;
    loom_memplan_free(&a);
    loom_memplan_free(&b);
    free(steps);
    loom_graph_free(g);
  }
  CHECK(made > 20 && same == made);
}


/* An async step (a dropout mask on the worker, beside the next step's
 * GEMM) keeps its inputs and outputs until it is joined after that step:
 * step 0 a = exp(x); step 1 (async) m = neg(a), a's last read; step 2
 * y = matmul(x, w), as big as a; step 3 z = m + y. Planned as if step 1
 * were done when step 2 starts, y would take a's memory while the worker
 * still reads it. At the join a is released, so z can reuse it. */
static void test_async_step(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x, w;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64}, &x));
  CHECK_OK(ctx, loom_graph_input(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64}, &w));
  int32_t a = lb_unary(g, LOOM_OP_EXP, x);
  int32_t m = lb_unary(g, LOOM_OP_NEG, a);
  int32_t y = lb_matmul(g, x, w, false, false);
  int32_t z = lb_add(g, m, y);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "z", z));
  if (loom_build_status(g)) {
    loom_graph_free(g);
    return;
  }
  loom_memplan_step steps[4];
  for (int32_t j = 0; j < 4; j++) {
    const loom_node *n = &g->nodes[j];
    steps[j] = (loom_memplan_step){.n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out};
  }
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 4, steps, NULL, &p));
  bool reused = p.offset[y] == p.offset[a]; /* fine when step 1 is synchronous */
  loom_memplan_free(&p);
  steps[1].join = 2;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 4, steps, NULL, &p));
  CHECK(p.last[a] == 2 && p.last[m] == 3 && p.first[y] == 2);
  CHECK(p.offset[y] != p.offset[a] && p.offset[y] != p.offset[m]);
  CHECK(p.offset[z] == p.offset[a]); /* released at the join, reused */
  CHECK(p.peak_bytes == 3 * 64 * 64 * 4);
  printf("async step: y %s a's memory when step 1 is synchronous, not when it is async\n",
         reused ? "takes" : "does not take");
  loom_memplan_free(&p);
  /* an async last step has nothing to run beside: ranges as usual */
  loom_memplan_step last[4] = {steps[0], steps[1], steps[2], steps[3]};
  last[1].join = 0;
  last[3].join = 4;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 4, last, NULL, &p));
  CHECK(p.last[z] == 4 && p.last[a] == 1);
  loom_memplan_free(&p);
  loom_graph_free(g);
}

/* An async step joined several steps later (a comm op in flight while
 * compute runs): step 0 a = exp(x); step 1 (async, joined after step 3)
 * m = neg(a); step 2 y = matmul(a, w), a's last read by the main thread;
 * step 3 y2 = exp(y); step 4 z = m + y2. Synchronously y2 takes a's
 * memory (a dies at step 2); with the join at 3 neither y nor y2 may take
 * a's or m's memory (the async step still reads a and writes m), and a
 * read at step 2 must not shorten a's range back to 2. After the join
 * (step 4) z reuses freed memory. */
static void test_join_step(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x, w;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64}, &x));
  CHECK_OK(ctx, loom_graph_input(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){64, 64}, &w));
  int32_t a = lb_unary(g, LOOM_OP_EXP, x);
  int32_t m = lb_unary(g, LOOM_OP_NEG, a);
  int32_t y = lb_matmul(g, a, w, false, false);
  int32_t y2 = lb_unary(g, LOOM_OP_EXP, y);
  int32_t z = lb_add(g, m, y2);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "z", z));
  if (loom_build_status(g)) {
    loom_graph_free(g);
    return;
  }
  loom_memplan_step steps[5];
  for (int32_t j = 0; j < 5; j++) {
    const loom_node *n = &g->nodes[j];
    steps[j] = (loom_memplan_step){.n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out};
  }
  loom_memplan p;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 5, steps, NULL, &p));
  CHECK(p.last[a] == 2 && p.offset[y2] == p.offset[a]); /* reused when step 1 is synchronous */
  loom_memplan_free(&p);
  steps[1].join = 3;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 5, steps, NULL, &p));
  CHECK(p.last[a] == 3 && p.last[m] == 4 && p.last[y] == 3);
  for (int32_t v = 0; v < g->n_values; v++) {
    if (v == a || v == m || p.offset[v] < 0 || p.first[v] > 3 || p.last[v] < 1) continue;
    /* everything alive while the async step runs is apart from a and m */
    CHECK(p.offset[v] + p.size[v] <= p.offset[a] || p.offset[a] + p.size[a] <= p.offset[v]);
    CHECK(p.offset[v] + p.size[v] <= p.offset[m] || p.offset[m] + p.size[m] <= p.offset[v]);
  }
  CHECK(p.offset[y] != p.offset[a] && p.offset[y2] != p.offset[a]);
  CHECK(p.offset[z] == p.offset[a] || p.offset[z] == p.offset[y]); /* freed at the join */
  CHECK(p.peak_bytes == 4 * 64 * 64 * 4);
  loom_memplan_free(&p);
  /* a join past the last step is the end of the run */
  steps[1].join = 99;
  CHECK_OK(ctx, loom_memplan_build_steps(g, 5, steps, NULL, &p));
  CHECK(p.last[a] == 4);
  loom_memplan_free(&p);
  loom_graph_free(g);
}

/* The cpu backend plans an overlapped dropout mask as async: with its
 * base computed in the arena (b = base + one, read by the mask only), the
 * mask runs on the worker beside the GEMM step after it, and b stays live
 * through that GEMM, apart from the product. */
static void test_overlap_program(loom_ctx *ctx) {
  loom_graph *g = NULL, *d = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[1, 2, 32, 16]\n"
                                 "input %k : f32[1, 2, 32, 16]\n"
                                 "input %v : f32[1, 2, 32, 16]\n"
                                 "input %base : i64[]\n"
                                 "input %one : i64[]\n"
                                 "input %a : f32[64, 64]\n"
                                 "%b : i64[] = add(%base, %one)\n"
                                 "%c : f32[64, 64] = matmul(%a, %a)\n"
                                 "%m : u8[256] = dropout_mask(%b, seed=5, numel=2048, overlap=true)\n"
                                 "%y : f32[1, 2, 32, 16], %l : f32[1, 2, 32] = flash_attention("
                                 "%q, %k, %v, %base, %m, causal=true, p=0.1, seed=5)\n"
                                 "output y = %y\n"
                                 "output c = %c\n",
                                 &g));
  if (g) CHECK_OK(ctx, loom_graph_decompose(g, &d));
  loom_prepared prep;
  memset(&prep, 0, sizeof prep);
  /* no cpu kernels: every node step would run its reference kernel */
  loom_cpu_kernel *kernels = d ? calloc((size_t)d->n_nodes, sizeof *kernels) : NULL;
  loom_cpu_program *cp = NULL;
  if (kernels) CHECK_OK(ctx, loom_cpu_program_prepare(ctx, d, LOOM_FUSION_STITCH, kernels, &prep, &cp));
  const loom_program *prog = cp ? loom_cpu_program_get(cp) : NULL;
  int32_t checked = 0;
  for (int32_t s = 0; prog && s + 1 < prog->n_steps; s++) {
    const loom_step *st = &prog->steps[s], *next = &prog->steps[s + 1];
    if (st->kind != LOOM_STEP_NODE || d->nodes[st->node].op != LOOM_OP_DROPOUT_MASK) continue;
    CHECK(next->kind == LOOM_STEP_GEMM); /* moved beside the GEMM */
    int32_t b = d->nodes[st->node].in[0], c = d->nodes[next->node].out[0];
    CHECK(prep.plan.offset[b] >= 0 && prep.plan.last[b] == s + 1);
    CHECK(prep.plan.offset[b] + prep.plan.size[b] <= prep.plan.offset[c] ||
          prep.plan.offset[c] + prep.plan.size[c] <= prep.plan.offset[b]);
    checked++;
  }
  CHECK(checked == 1);
  loom_memplan_free(&prep.plan);
  loom_cpu_program_free(cp);
  free(kernels);
  loom_graph_free(d);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_chain(ctx);
  test_sizes_overflow(ctx);
  test_no_in_place(ctx);
  test_reshape_alias(ctx);
  test_random_dags(ctx);
  test_steps(ctx);
  test_steps_match_nodes(ctx);
  test_async_step(ctx);
  test_join_step(ctx);
  test_overlap_program(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_memplan");
}

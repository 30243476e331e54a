/*
 * The lowering's search over layout transitions (parallel/lower_search.c):
 * a value made in one tiling and read in another on the same devices is
 * one all_to_all per group, on the reference executor (the oracle) and
 * per device through the in-process communicator (threads, bit for bit);
 * the search's choices between all-reduce, reduce-scatter, sending parts
 * and broadcast; and a cost model that turns a choice around.
 */
#include "common.h"

#include "ir/build.h"
#include "ops/op.h"
#include "parallel/lower.h"
#include "parallel/plan_text.h"
#include "runtime/plan_runner.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const loom_session_options ref_opts = LOOM_SESSION_OPTIONS(.backend = "ref");

/* z = neg(relu(x)), x [4, 8, 12]: relu.0, neg.1 */
static loom_graph *chain(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 3, (int64_t[]){4, 8, 12}, &x));
  int32_t z = lb_unary(g, LOOM_OP_NEG, lb_unary(g, LOOM_OP_RELU, x));
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "z", z));
  return g;
}

/* r = relu(x @ w), x [8, 16], w [16, 4]: matmul.0, relu.1 */
static loom_graph *mm_relu(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x, w;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){16, 4}, &w));
  int32_t r = lb_unary(g, LOOM_OP_RELU, lb_matmul(g, x, w, false, false));
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "r", r));
  return g;
}

/* Parses and lowers text over g (opts NULL: the default cost model), and
 * checks the global graph against g on the reference executor. */
static loom_plan_program *lower_checked(loom_ctx *ctx, const loom_graph *g, const char *text,
                                        const loom_plan_lower_options *opts, loom_plan **plan) {
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_parse(ctx, g, text, strlen(text), &p));
  if (p) CHECK_OK(ctx, loom_plan_lower(p, opts, &pp));
  if (!pp) {
    loom_plan_free(p);
    return NULL;
  }
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 11);
  loom_tensor **want = loom_test_run(ctx, g, &ref_opts, in);
  loom_tensor **got = loom_test_run(ctx, pp->global, &ref_opts, in);
  for (int32_t o = 0; o < loom_graph_num_outputs(g); o++)
    CHECK(loom_test_update_error(want ? want[o] : NULL, got ? got[o] : NULL, NULL) <= 1e-5);
  loom_test_free_tensors(in, loom_graph_num_inputs(g));
  loom_test_free_tensors(want, loom_graph_num_outputs(g));
  loom_test_free_tensors(got, loom_graph_num_outputs(g));
  *plan = p;
  return pp;
}

/* Comm ops of kind op that move logical value v (-1: any). */
static int32_t count(const loom_plan_program *pp, loom_op op, int32_t v) {
  int32_t n = 0;
  for (int32_t c = 0; c < pp->n_comms; c++)
    n += pp->comms[c].op == op && (v < 0 || pp->comms[c].value == v);
  return n;
}

/* ---- D -> D: all_to_all ------------------------------------------------------------ */

/* relu's output is cut by batch and rows, neg reads it by batch and
 * columns: within each batch half, devices {0,1} and {2,3} trade rows for
 * columns. */
static const char a2a_plan[] = "plan devices 4\n"
                               "trans relu.0 split out0 0 2\n"
                               "trans relu.0#* split out0 1 2    # rows\n"
                               "trans neg.1 split out0 0 2\n"
                               "trans neg.1#* split out0 2 2     # columns\n"
                               "assign relu.0#0 0 1\n"
                               "assign relu.0#1 2 3\n"
                               "assign neg.1#0 0 1\n"
                               "assign neg.1#1 2 3\n"
                               "input %x D(0,2)D(1,2) on 0 1 2 3\n"
                               "output z D(0,2)D(2,2) on 0 1 2 3\n";

typedef struct shared {
  const loom_plan_program *pp;
  loom_comm **comms;
  loom_tensor **in;
  loom_tensor *got; /* rank 0's gather of z */
  bool failed;
} shared;

typedef struct job {
  shared *sh;
  int32_t rank;
} job;

static void *device_main(void *arg) {
  job *j = arg;
  shared *sh = j->sh;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return NULL;
  loom_ctx_set_threads(ctx, 1);
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_STITCH);
  loom_plan_runner *r = NULL;
  loom_status st = loom_plan_runner_new(ctx, sh->pp, sh->comms[j->rank], &so, &r);
  if (!st) st = loom_plan_runner_load(r, (const loom_tensor *const *)sh->in);
  if (!st) st = loom_plan_runner_step(r, (const loom_tensor *const *)sh->in);
  loom_tensor *whole = NULL;
  const loom_type *t = loom_value_type(sh->pp->global, sh->pp->global->outputs[0]);
  if (!st) st = loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &whole);
  if (!st) st = loom_plan_runner_gather_output(r, 0, whole);
  if (!st && j->rank == 0)
    sh->got = whole;
  else
    loom_tensor_free(whole);
  if (st) {
    fprintf(stderr, "rank %d: %s\n", j->rank, loom_ctx_error(ctx));
    sh->failed = true;
    loom_comm_abort(sh->comms[j->rank], loom_ctx_error(ctx));
  }
  loom_plan_runner_free(r);
  loom_ctx_free(ctx);
  return NULL;
}

/* Each device's program in its own thread; z gathered equals the oracle's. */
static void run_per_device(loom_ctx *ctx, const loom_plan_program *pp, const loom_graph *g) {
  enum { N = 4 };
  shared sh = {.pp = pp, .in = loom_test_uniform_inputs(ctx, g, 11)};
  loom_tensor **oracle = loom_test_run(ctx, pp->global, &ref_opts, sh.in);
  sh.comms = calloc(N, sizeof *sh.comms);
  CHECK_OK(ctx, loom_comm_inproc_new(ctx, N, sh.comms));
  pthread_t th[N];
  job jobs[N];
  for (int32_t r = 0; r < N; r++) {
    jobs[r] = (job){&sh, r};
    pthread_create(&th[r], NULL, device_main, &jobs[r]);
  }
  for (int32_t r = 0; r < N; r++)
    pthread_join(th[r], NULL);
  CHECK(!sh.failed && sh.got && oracle);
  if (sh.got && oracle) {
    size_t bytes = (size_t)loom_tensor_numel(oracle[0]) * sizeof(float);
    CHECK(loom_tensor_numel(sh.got) == loom_tensor_numel(oracle[0]));
    CHECK(memcmp(loom_tensor_data(sh.got), loom_tensor_data(oracle[0]), bytes) == 0);
    printf("all_to_all on 4 threads: z equals the oracle bit for bit\n");
  }
  for (int32_t r = 0; r < N; r++)
    loom_comm_free(sh.comms[r]);
  free(sh.comms);
  loom_tensor_free(sh.got);
  loom_test_free_tensors(oracle, 1);
  loom_test_free_tensors(sh.in, 1);
}

static void test_all_to_all(loom_ctx *ctx) {
  loom_graph *g = chain(ctx);
  loom_plan *p = NULL;
  loom_plan_program *pp = lower_checked(ctx, g, a2a_plan, NULL, &p);
  if (pp) {
    /* relu's output is value 1; the only comms are its two all_to_alls */
    CHECK(pp->n_comms == 2);
    CHECK(count(pp, LOOM_OP_ALL_TO_ALL, 1) == 2);
    int32_t seen[4] = {0, 0, 0, 0};
    for (int32_t c = 0; c < pp->n_comms; c++) {
      const loom_plan_comm *k = &pp->comms[c];
      /* each member's piece is [2, 4, 12] floats; it sends (n-1)/n of it */
      CHECK(k->bytes == 2 * 4 * 12 * 4 / 2);
      int32_t g0 = pp->group_start[k->group], n = pp->group_start[k->group + 1] - g0;
      CHECK(n == 2);
      for (int32_t m = 0; m < n; m++)
        seen[pp->group_ranks[g0 + m]]++;
      /* split along the columns, concatenated along the rows */
      const loom_node *node = &pp->global->nodes[k->node];
      CHECK(LOOM_ATTR_I(node, all_to_all, split_axis) == 2);
      CHECK(LOOM_ATTR_I(node, all_to_all, concat_axis) == 1);
    }
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
    CHECK(pp->stats[3].comm_bytes[LOOM_OP_ALL_TO_ALL] == 2 * 4 * 12 * 4 / 2);
    run_per_device(ctx, pp, g);
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

/* ---- the choices -------------------------------------------------------------------- */

/* matmul.0's reduction over 4 devices: its output y (value 2) is partial. */
#define PARTIAL_Y "plan devices 4\ntrans matmul.0 split in0 1 4\nassign matmul.0 0 1 2 3\n"

typedef struct choice {
  const char *what, *plan;
  loom_op op; /* the comm kind y's move must be */
  int32_t n;  /* that many of them, and no other kind for y */
} choice;

static void test_choices(loom_ctx *ctx) {
  static const choice cases[] = {
      {"replicated needs: all-reduce (not reduce-scatter + all-gather)",
       PARTIAL_Y "trans relu.1 replicate 4\nassign relu.1 0 1 2 3\n", LOOM_OP_ALL_REDUCE, 1},
      {"sharded needs: reduce-scatter",
       PARTIAL_Y "trans relu.1 split out0 0 4\nassign relu.1 0 1 2 3\noutput r D(0,4) on 0 1 2 3\n",
       LOOM_OP_REDUCE_SCATTER, 1},
      {"one device wants it: the parts sent there", PARTIAL_Y "assign relu.1 0\n", LOOM_OP_TRANSFER,
       3},
      {"one device holds it: broadcast",
       "plan devices 4\nassign matmul.0 0\ntrans relu.1 replicate 4\nassign relu.1 0 1 2 3\n",
       LOOM_OP_BROADCAST, 1},
  };
  static const loom_op kinds[] = {LOOM_OP_ALL_REDUCE, LOOM_OP_ALL_GATHER, LOOM_OP_REDUCE_SCATTER,
                                  LOOM_OP_ALL_TO_ALL, LOOM_OP_BROADCAST,  LOOM_OP_TRANSFER};
  loom_graph *g = mm_relu(ctx);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_plan *p = NULL;
    loom_plan_program *pp = lower_checked(ctx, g, cases[i].plan, NULL, &p);
    bool ok = pp != NULL;
    for (size_t k = 0; pp && k < sizeof kinds / sizeof kinds[0]; k++)
      ok &= count(pp, kinds[k], 2) == (kinds[k] == cases[i].op ? cases[i].n : 0);
    printf("%-64s %s\n", cases[i].what, ok ? "ok" : "WRONG");
    CHECK(ok);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  loom_graph_free(g);
}

/* y partial over 4 devices, wanted whole on 0 and 1 only: all-reduce
 * sends 1.5 y per device in 6 messages, sending the parts to both 2 y in
 * 2 (plus one sync per comm op). Latency-bound, the parts are sent;
 * bandwidth-bound, y is all-reduced. */
static void test_cost_model(loom_ctx *ctx) {
  static const char plan[] = PARTIAL_Y "trans relu.1 replicate 2\nassign relu.1 0 1\n";
  loom_graph *g = mm_relu(ctx);
  loom_plan_lower_options slow_links = {.comm = {1e-3, 1e15, false}};
  loom_plan_lower_options thin_links = {.comm = {1e-12, 1e3, false}};
  loom_plan *p = NULL;
  loom_plan_program *pp = lower_checked(ctx, g, plan, &slow_links, &p);
  if (pp) {
    CHECK(count(pp, LOOM_OP_ALL_REDUCE, 2) == 0);
    CHECK(count(pp, LOOM_OP_TRANSFER, 2) == 6); /* 3 parts to each of 2 devices */
    printf("latency-bound:   y sent as %d transfers\n", count(pp, LOOM_OP_TRANSFER, 2));
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  pp = lower_checked(ctx, g, plan, &thin_links, &p);
  if (pp) {
    CHECK(count(pp, LOOM_OP_ALL_REDUCE, 2) == 1);
    CHECK(count(pp, LOOM_OP_TRANSFER, 2) == 0);
    printf("bandwidth-bound: y all-reduced (%d all_reduce)\n", count(pp, LOOM_OP_ALL_REDUCE, 2));
  }
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_ctx_set_threads(ctx, 1);
  test_all_to_all(ctx);
  test_choices(ctx);
  test_cost_model(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_plan_search");
}

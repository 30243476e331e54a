/*
 * The cluster simulator (parallel/simulate.h) on plans whose times can be
 * worked out by hand: a GEMM by the roofline, an all-reduce inside a node
 * and across nodes, a pipeline's idle stage, overlap never slower than
 * blocking, and the errors (no cluster, a precision the cluster lacks,
 * too few nodes).
 */
#include "common.h"

#include "comm/comm.h"
#include "parallel/builtin.h"
#include "parallel/plan_text.h"
#include "parallel/simulate.h"
#include "parallel/simulate_merge.h"
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

/* A made-up device: 1 TFLOP/s f32, 4 TFLOP/s bf16, 100 GB/s memory. */
static loom_cluster cluster(int32_t per_node) {
  return (loom_cluster){.name = "test", .device = "dev",
                        .flops = {[LOOM_PRECISION_f32] = 1e12, [LOOM_PRECISION_bf16] = 4e12},
                        .memory_bandwidth_Bps = 100e9, .memory_bytes = 16e9,
                        .devices_per_node = per_node,
                        .intra = {.kind = "link", .bandwidth_Bps = 10e9, .latency_s = 1e-6},
                        .inter = {.kind = "net", .bandwidth_Bps = 2e9, .latency_s = 10e-6, .nics = 1}};
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* y = x @ w, x [512, 256], w [256, 1024]; the k split's all-reduce of y. */
static const char mm[] = "input %x : f32[512, 256]\n"
                         "param %w : f32[256, 1024]\n"
                         "%y = matmul(%x, %w)\n"
                         "output y = %y\n";
static const char k_plan[] = "plan devices 2\n"
                             "trans matmul.* split in0 1 2\n"
                             "assign matmul.0 0 1\n"
                             "input %x D(1,2) on 0 1\n"
                             "input %w D(0,2) on 0 1\n"
                             "output y R(2) on 0 1\n";

static loom_plan_program *lower_text(loom_graph **g, const char *graph, const char *plan) {
  CHECK_OK(ctx, loom_graph_parse(ctx, graph, g));
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_parse(ctx, *g, plan, strlen(plan), &p));
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  loom_plan_free(p);
  return pp;
}

static void test_gemm_and_all_reduce(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm, k_plan);
  /* each device: 512 x 1024 x 128 x 2 FLOPs at 4 TFLOP/s x 0.75 x
   * 128 / (128 + 32); then a ring all-reduce of y (2 MiB) over 2
   * members inside a node: 2 steps of 1 us + 2 MiB (what each sends) /
   * 10 GB/s */
  loom_cluster c = cluster(2);
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_sim_result r;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
  double gemm = 2.0 * 512 * 1024 * 128 / (4e12 * 0.75 * (128.0 / 160.0));
  double ring = 2 * 1e-6 + (double)pp->comms[0].bytes / 10e9;
  CHECK(pp->n_comms == 1 && pp->comms[0].op == LOOM_OP_ALL_REDUCE);
  CHECK(pp->comms[0].bytes == 512 * 1024 * 4); /* 2 (n-1)/n of y's bytes */
  double slices = 0; /* the pieces of x and w are fed: no time */
  for (int32_t d = 0; d < 2; d++) {
    CHECK(near(r.devices[d].compute_s, gemm + slices));
    CHECK(near(r.devices[d].comm_s, ring));
    CHECK(r.devices[d].idle_s < 1e-12);
  }
  CHECK(near(r.step_s, gemm + ring) && r.bubble < 1e-9);
  /* the events: matmul then the all-reduce on each device */
  int32_t comm_events = 0;
  for (int32_t e = 0; e < r.event_start[2]; e++) comm_events += r.events[e].comm;
  CHECK(comm_events == 2);
  loom_sim_result_free(&r);

  /* one device per node: the ring crosses the network at 2 GB/s, 10 us */
  c = cluster(1);
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
  CHECK(near(r.devices[0].comm_s, 2 * 10e-6 + (double)pp->comms[0].bytes / 2e9));
  loom_sim_result_free(&r);

  /* errors: no cluster; no fp8 rate; a cluster of one node without a network */
  CHECK(loom_plan_simulate(pp, &(loom_sim_options){0}, &r) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(loom_ctx_error(ctx), "no cluster description"));
  o.precision = LOOM_PRECISION_fp8;
  CHECK(loom_plan_simulate(pp, &o, &r) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(loom_ctx_error(ctx), "gives no fp8 rate"));
  o.precision = LOOM_PRECISION_f32;
  c.max_nodes = 1;
  CHECK(loom_plan_simulate(pp, &o, &r) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(loom_ctx_error(ctx), "2 devices need 2 nodes of 1"));
  c.max_nodes = 0;
  c.inter.kind[0] = '\0';
  CHECK(loom_plan_simulate(pp, &o, &r) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(loom_ctx_error(ctx), "has no network"));
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

/* The collectives' algorithms, an all-reduce of y (S = 2 MiB) over 4
 * members: NCCL's ring inside one node (a tree would send twice as much),
 * its hierarchy across 2 nodes of 2, and Loom's direct all-pairs. */
static const char k4_plan[] = "plan devices 4\n"
                              "trans matmul.* split in0 1 4\n"
                              "assign matmul.0 0 1 2 3\n"
                              "input %x D(1,4) on 0 1 2 3\n"
                              "input %w D(0,4) on 0 1 2 3\n"
                              "output y R(4) on 0 1 2 3\n";

static void test_collectives(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm, k4_plan);
  if (!pp) return;
  CHECK(pp->n_comms == 1 && pp->comms[0].op == LOOM_OP_ALL_REDUCE);
  double S = 512.0 * 1024 * 4, comm[3];
  loom_cluster one = cluster(4), two = cluster(2), direct = cluster(2);
  snprintf(one.collectives, sizeof one.collectives, "nccl");
  snprintf(two.collectives, sizeof two.collectives, "nccl");
  snprintf(direct.collectives, sizeof direct.collectives, "direct");
  const loom_cluster *cs[3] = {&one, &two, &direct};
  for (int32_t k = 0; k < 3; k++) {
    loom_sim_options o = {.cluster = cs[k], .precision = LOOM_PRECISION_f32};
    loom_sim_result r;
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
    comm[k] = r.devices ? r.devices[0].comm_s : 0;
    loom_sim_result_free(&r);
  }
  /* ring: 2 (n-1) steps of 1 us, 2 (n-1)/n S at 10 GB/s */
  CHECK(near(comm[0], 6e-6 + 1.5 * S / 10e9));
  /* across nodes each device has half a 2 GB/s NIC: reduce-scatter inside
   * (1 step, S/2 at 10 GB/s), all-reduce of S/2 between the 2 nodes (2
   * steps of 10 us, S/2 at 1 GB/s), all-gather inside */
  CHECK(near(comm[1], 2 * (1e-6 + S / 2 / 10e9) + 20e-6 + S / 2 / 1e9));
  /* direct: two phases, each member sends 2 (n-1)/n S over its NIC share,
   * and its CPU moves (2 + 6/n + 3 (n-1)/n) S = 5.75 S around them (the
   * input copied into the output, its block into the parts and out, three
   * others folded in, its block into the all-gather) at 0.8 of 100 GB/s */
  CHECK(near(comm[2], 2 * 10e-6 + 1.5 * S / 1e9 + 5.75 * S / 80e9));
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

/* Ranks bound to cores (as many ranks as cores: mpirun binds each to its
 * own): device 0 runs exp(v) after its GEMM while its comm stream does
 * the all-reduce of y, so the two share core 0 at half speed each, and
 * device 1's core, which only waits, speeds neither: the all-reduce moves
 * at its slower member's pace. With C the all-reduce and E the exp alone,
 * the all-reduce ends at G + 2C, the exp at G + C + E. */
static const char mm_exp[] = "input %x : f32[512, 256]\n"
                             "param %w : f32[256, 1024]\n"
                             "input %v : f32[4096, 1024]\n"
                             "%y = matmul(%x, %w)\n"
                             "%z = exp(%v)\n"
                             "output y = %y\n"
                             "output z = %z\n";
static const char k_exp_plan[] = "plan devices 2\n"
                                 "trans matmul.* split in0 1 2\n"
                                 "assign matmul.0 0 1\n"
                                 "assign exp.1 0\n"
                                 "order matmul.0#0 exp.1\n"
                                 "input %x D(1,2) on 0 1\n"
                                 "input %w D(0,2) on 0 1\n"
                                 "input %v R(1) on 0\n"
                                 "output y R(2) on 0 1\n"
                                 "output z R(1) on 0\n";

static void test_bound_cores(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm_exp, k_exp_plan);
  if (!pp) return;
  loom_cluster c = cluster(2);
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32, .overlap = true};
  loom_sim_result alone, bound;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &alone));
  o.cores = 2;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &bound));
  if (alone.devices && bound.devices) {
    double G = 0, E = 0, C = alone.devices[0].comm_s;
    for (int32_t e = alone.event_start[0]; e < alone.event_start[1]; e++) {
      const loom_sim_event *ev = &alone.events[e];
      if (ev->comm) continue;
      loom_op op = pp->global->nodes[ev->node].op;
      if (op == LOOM_OP_MATMUL) G = ev->end_s - ev->start_s;
      if (op != LOOM_OP_EXP) continue;
      E = ev->end_s - ev->start_s;
      CHECK(ev->start_s >= G * (1 - 1e-9)); /* after the GEMM, as ordered */
    }
    CHECK(G > 0 && E > C && C > 0); /* the exp outlasts the all-reduce */
    CHECK(near(alone.step_s, G + E));
    CHECK(near(bound.devices[0].comm_s, 2 * C) && near(bound.devices[1].comm_s, 2 * C));
    CHECK(near(bound.devices[0].end_s, G + C + E));
    CHECK(near(bound.step_s, G + C + E));
  }
  loom_sim_result_free(&alone);
  loom_sim_result_free(&bound);
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

/* Run order: device 0's plan reads the all-reduce of y (sigmoid) before
 * an exp that does not need it; the runtime runs the exp first
 * (lower_run_order.c), so the all-reduce hides behind it and the step is
 * G + E + S, not G + C + S + E. */
static const char mm_late[] = "input %x : f32[512, 256]\n"
                              "param %w : f32[256, 1024]\n"
                              "input %v : f32[4096, 1024]\n"
                              "%y = matmul(%x, %w)\n"
                              "%s = sigmoid(%y)\n"
                              "%z = exp(%v)\n"
                              "output s = %s\n"
                              "output z = %z\n";
static const char k_reader_plan[] = "plan devices 2\n"
                                    "trans matmul.* split in0 1 2\n"
                                    "trans sigmoid.1 replicate 2\n"
                                    "assign matmul.0 0 1\n"
                                    "assign sigmoid.1 0 1\n"
                                    "assign exp.2 0\n"
                                    "order matmul.0#0 sigmoid.1#0\n"
                                    "order sigmoid.1#0 exp.2\n"
                                    "input %x D(1,2) on 0 1\n"
                                    "input %w D(0,2) on 0 1\n"
                                    "input %v R(1) on 0\n"
                                    "output s R(2) on 0 1\n"
                                    "output z R(1) on 0\n";

static void test_run_order(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm_late, k_reader_plan);
  if (!pp) return;
  loom_cluster c = cluster(2);
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32, .overlap = true};
  loom_sim_result r;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
  double G = -1, E = -1, S = -1, e_start = -1, s_start = -1, C = r.devices ? r.devices[0].comm_s : 0;
  for (int32_t e = r.devices ? r.event_start[0] : 0; r.devices && e < r.event_start[1]; e++) {
    const loom_sim_event *ev = &r.events[e];
    if (ev->comm) continue;
    loom_op op = pp->global->nodes[ev->node].op;
    double t = ev->end_s - ev->start_s;
    if (op == LOOM_OP_MATMUL) G = t;
    if (op == LOOM_OP_EXP) E = t, e_start = ev->start_s;
    if (op == LOOM_OP_SIGMOID) S = t, s_start = ev->start_s;
  }
  CHECK(G > 0 && E > C && C > 0 && S > 0);
  CHECK(near(e_start, G));     /* the exp right after the GEMM */
  CHECK(near(s_start, G + E)); /* the sigmoid after it, its all-reduce long done */
  CHECK(near(r.step_s, G + E + S));
  loom_sim_result_free(&r);
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

/* Stitching: x -> exp -> mul -> add -> y on one device is one kernel that
 * reads x once and writes y once; a GEMM between two element-wise nodes
 * splits them into two kernels, each paying its own traffic and launch.
 * The cluster's gemm.efficiency and gemm.half_dim replace the defaults. */
static const char chain[] = "input %x : f32[1024, 256]\n"
                            "param %w : f32[256, 256]\n"
                            "%a = exp(%x)\n"
                            "%b = mul(%a, %a)\n"
                            "%c = matmul(%b, %w)\n"
                            "%d = add(%c, %c)\n"
                            "%e = neg(%d)\n"
                            "output y = %e\n";

static void test_stitching(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, chain, &g));
  if (!g) return;
  loom_cluster c = cluster(1);
  c.kernel_launch_s = 5e-6;
  c.gemm_efficiency = 0.5;
  c.gemm_half_dim = 256;
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
  double t[8] = {0};
  CHECK(g->n_nodes == 5);
  CHECK_OK(ctx, loom_sim_graph_seconds(ctx, g, &o, t));
  double mb = 1024.0 * 256 * 4, bw = 100e9 * 0.8;
  /* exp: launch + reads x (its flops 1 per element are below the bytes);
   * mul: inside the kernel, writes b for the GEMM */
  CHECK(near(t[0], 5e-6 + mb / bw));
  CHECK(near(t[1], mb / bw));
  /* the GEMM: 2 m n k at 1 TFLOP/s x 0.5 x 256 / (256 + 256) */
  CHECK(near(t[2], 5e-6 + 2.0 * 1024 * 256 * 256 / (1e12 * 0.5 * 0.5)));
  /* add reads c (once per operand: it names it twice), neg writes y */
  CHECK(near(t[3], 5e-6 + 2 * mb / bw));
  CHECK(near(t[4], mb / bw));
  /* one node alone: every operand and result moves */
  CHECK(near(loom_sim_node_seconds(g, &g->nodes[1], &o), 5e-6 + 3 * mb / bw));
  loom_graph_free(g);
}

/* An output tied to an input (training state, updated in place) is
 * computed in the arena and copied over the input after the run: a read
 * and a write of its bytes at the end of the device's step. Without the
 * tie nothing is copied. */
static const char update[] = "param %w : f32[1024, 256]\n"
                             "%n = neg(%w)\n"
                             "output w2 = %n\n";

static void test_state_copy_out(void) {
  loom_cluster c = cluster(1);
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
  double mb = 1024.0 * 256 * 4, bw = 100e9 * 0.8;
  for (int32_t tied = 0; tied < 2; tied++) {
    char plan[256];
    snprintf(plan, sizeof plan,
             "plan devices 1\nassign neg.0 0\ninput %%w R(1) on 0\noutput w2 R(1) on 0\n%s",
             tied ? "tie w2 %w\n" : "");
    loom_graph *g = NULL;
    loom_plan_program *pp = lower_text(&g, update, plan);
    loom_sim_result r;
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
    /* neg reads w and writes n; the copy reads n and writes w */
    CHECK(near(r.step_s, 2 * mb / bw + (tied ? 2 * mb / bw : 0)));
    loom_sim_result_free(&r);
    loom_plan_program_free(pp);
    loom_graph_free(g);
  }
}

/* attn.efficiency: flash attention at that fraction of the rate, its
 * shape's own (no skinny-GEMM factor); absent, attention runs as a GEMM. */
static const char attn[] = "input %q : f32[2, 4, 64, 32]\n"
                           "input %base : i64[]\n"
                           "%o, %l = flash_attention(%q, %q, %q, %base)\n"
                           "output o = %o\n";

static void test_attention_efficiency(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, attn, &g));
  if (!g) return;
  loom_cluster c = cluster(1);
  c.gemm_efficiency = 0.5;
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
  const loom_node *n = &g->nodes[0];
  double flops = 4.0 * 2 * 4 * 64 * 64 * 32; /* QK^T and PV */
  CHECK(near(loom_sim_node_seconds(g, n, &o), flops / (1e12 * 0.5 * 32.0 / (32 + 32))));
  c.attention_efficiency = 0.2;
  CHECK(near(loom_sim_node_seconds(g, n, &o), flops / (1e12 * 0.2)));
  loom_graph_free(g);
}

/* The GPT step under built-in plans: a pipeline idles (its bubble), data
 * parallel does not; overlapping never makes a step slower; the step is at
 * least the busiest device's compute. */
static void test_gpt_plans(void) {
  loom_gpt_config cfg;
  loom_gpt_config_default(&cfg);
  cfg.n_layer = 4;
  cfg.d_model = 64;
  cfg.d_ff = 256;
  cfg.context = 16;
  loom_gpt_optim opt = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .seed = 1};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &cfg, 8, 16, &opt, &g, &per_step));
  loom_cluster c = cluster(8);
  const char *specs[] = {"dp2", "pp2+gpipe+mb4", "pp2+1f1b+mb4", "tp2"};
  double bubble[4] = {0}, shared_ratio[4] = {0};
  for (int32_t k = 0; k < 4; k++) {
    loom_plan *p = NULL;
    CHECK_OK(ctx, loom_plan_open(ctx, g, specs[k], 2, &p));
    loom_plan_program *pp = NULL;
    CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
    loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
    loom_sim_result blocking, overlapped;
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &blocking));
    o.overlap = true;
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &overlapped));
    CHECK(overlapped.step_s <= blocking.step_s * (1 + 1e-12));
    for (int32_t d = 0; d < 2; d++) {
      CHECK(blocking.step_s >= blocking.devices[d].compute_s);
      CHECK(near(blocking.devices[d].compute_s + blocking.devices[d].comm_s +
                     blocking.devices[d].idle_s,
                 blocking.step_s));
      const loom_sim_memory *m = &blocking.devices[d].at_peak;
      CHECK(m->params > 0 && m->activations > 0);
    }
    bubble[k] = blocking.bubble;
    /* both ranks on one core: whenever anything runs the core is busy
     * (each running task at 1 / demand of it), so the step is at least
     * all the work the two ranks do, dedicated, compute and comm alike,
     * and more by what a rank waiting for its peer spins (comm_mpi.c:
     * loom_comm_spin_seconds per op, at most) */
    loom_sim_options one_core = {.cluster = &c, .precision = LOOM_PRECISION_f32, .cores = 1};
    loom_sim_result shared;
    CHECK_OK(ctx, loom_plan_simulate(pp, &one_core, &shared));
    if (shared.devices) {
      double work = 0, spins = 0;
      for (int32_t d = 0; d < 2; d++)
        work += blocking.devices[d].compute_s + blocking.devices[d].comm_s;
      for (int32_t m = 0; m < pp->n_comms; m++)
        spins += 2 * loom_comm_spin_seconds((size_t)pp->comms[m].bytes);
      CHECK(shared.step_s >= work * (1 - 1e-9) && shared.step_s <= work + spins + 1e-9);
      double ratio = shared.devices[0].compute_s / blocking.devices[0].compute_s;
      CHECK(ratio >= 1 && ratio <= 2 + 1e-9);
      shared_ratio[k] = ratio;
      /* a rank polling for its peers takes a share of the core as well */
      loom_cluster polling = c;
      polling.wait_share = 0.5;
      one_core.cluster = &polling;
      loom_sim_result polled;
      CHECK_OK(ctx, loom_plan_simulate(pp, &one_core, &polled));
      CHECK(polled.step_s >= shared.step_s * (1 - 1e-12)); /* test_wait_period: where one waits */
      loom_sim_result_free(&polled);
    }
    loom_sim_result_free(&shared);
    printf("%-14s step %.3f ms blocking, %.3f ms overlapped, bubble %.1f%%\n", specs[k],
           blocking.step_s * 1e3, overlapped.step_s * 1e3, 100 * blocking.bubble);
    loom_sim_result_free(&blocking);
    loom_sim_result_free(&overlapped);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  /* a pipeline waits to fill and drain; data parallel only for its
   * all-reduces, which here are not idle but comm */
  CHECK(bubble[0] < 0.05);
  CHECK(bubble[1] > 0.1 && bubble[2] > 0.1);
  CHECK(shared_ratio[0] > shared_ratio[1] && shared_ratio[0] > shared_ratio[2]);
  loom_graph_free(g);
}

/* Bytes of g's inputs: parameters, and those whose name starts with
 * `prefix` (NULL: any). */
static int64_t input_bytes(const loom_graph *g, bool params, const char *prefix) {
  int64_t bytes = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    const loom_value_info *x = &g->values[g->inputs[i]];
    if ((x->kind == LOOM_VALUE_PARAM) != params) continue;
    if (prefix && (!x->name || strncmp(x->name, prefix, strlen(prefix)))) continue;
    const loom_type *t = &x->type;
    bytes += loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
  }
  return bytes;
}

/* Memory by role, exactly: a device holds its pieces of the parameters
 * and of AdamW's two moments for the whole step (the plan runner's
 * tensors), so the optimizer state is twice the parameters it updates:
 * 2P per replica under dp, 2P / dp under ZeRO-1/2/3; the parameters are
 * P per replica, plus under ZeRO-1/2 the 1/dp shard the device updates,
 * which the runner holds as a piece of its own beside the replica the
 * forward reads; P / dp under ZeRO-3. The roles sum to the peak. The updates (new parameters and moments in the arena until they
 * are copied over the held pieces) never pass three times the parameters
 * updated. */
static void test_memory_roles(void) {
  loom_gpt_config cfg;
  loom_gpt_config_default(&cfg);
  cfg.n_layer = 4;
  cfg.d_model = 64;
  cfg.d_ff = 256;
  cfg.context = 16;
  loom_gpt_optim opt = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .seed = 1};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &cfg, 8, 16, &opt, &g, &per_step));
  if (!g) return;
  int64_t P = input_bytes(g, true, NULL), wte = input_bytes(g, true, "wte");
  CHECK(P > 0 && wte > 0 && input_bytes(g, false, "adam.") == 2 * P);
  loom_cluster c = cluster(8);
  /* per plan: its devices, its dp degree, whether ZeRO shards the state
   * by it, and each device's parameters as a multiple of P, or 0 where
   * the plan cuts them by tp or pp (checked otherwise) */
  const struct {
    const char *spec;
    int32_t devices, dp;
    bool zero;
    double params;
  } plans[] = {{"dp2", 2, 2, false, 1},          {"dp2+recompute", 2, 2, false, 1},
               {"dp2+zero1", 2, 2, true, 1.5},   {"dp4+zero2", 4, 4, true, 1.25},
               {"dp2+zero3", 2, 2, true, 0.5},   {"tp2", 2, 1, false, 0},
               {"pp2+1f1b+mb4", 2, 1, false, 0}, {"dp2xpp2", 4, 2, false, 0}};
  for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
    loom_plan *p = NULL;
    loom_plan_program *pp = NULL;
    CHECK_OK(ctx, loom_plan_open(ctx, g, plans[k].spec, plans[k].devices, &p));
    CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
    loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
    loom_sim_result r = {0};
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
    /* per device, the bytes of the values a merged node's duplicate keeps
     * alive longer (to the later one's last use): what merging may add */
    const loom_graph *G = pp->global;
    bool *merged = malloc(sizeof *merged * (size_t)G->n_nodes), *kept = calloc((size_t)G->n_values, 1);
    int32_t *canon = malloc(sizeof *canon * (size_t)G->n_values);
    int64_t longer[4] = {0};
    CHECK_OK(ctx, loom_sim_merged_nodes(pp, merged, canon));
    for (int32_t n = 0; n < G->n_nodes; n++)
      for (int32_t o = 0; merged[n] && o < G->nodes[n].n_out; o++) {
        int32_t v = canon[G->nodes[n].out[o]];
        if (v == G->nodes[n].out[o] || kept[v] || pp->value_device[v] < 0) continue;
        kept[v] = true;
        longer[pp->value_device[v]] += (int64_t)loom_type_numel(loom_value_type(G, v)) * 4;
      }
    free(merged), free(kept), free(canon);
    int64_t optimizer = 0;
    for (int32_t d = 0; r.devices && d < plans[k].devices; d++) {
      const loom_sim_memory *m = &r.devices[d].at_peak;
      CHECK(m->params + m->optimizer + m->inputs + m->updates + m->grads + m->comm_buffers +
                m->activations ==
            r.devices[d].peak_bytes);
      /* the lowering's peak, less what the runtime's merging saves, plus
       * at most what it keeps alive longer */
      CHECK(r.devices[d].peak_bytes <= pp->stats[d].peak_bytes + longer[d]);
      CHECK(m->inputs > 0 && m->activations > 0);
      optimizer += m->optimizer;
      if (plans[k].params > 0) {
        CHECK(m->params == (int64_t)(plans[k].params * (double)P));
        CHECK(m->optimizer == 2 * P / (plans[k].zero ? plans[k].dp : 1));
      } else {
        /* every piece it holds it updates, but a copy of the embedding:
         * tp's gather reads it whole beside the vocabulary shard the head
         * reads and the device updates; a pipeline's last stage holds the
         * tied head's copy, which the first stage updates */
        bool copy = !strncmp(plans[k].spec, "tp", 2) || d % 2 == 1;
        CHECK(m->optimizer == 2 * (m->params - (copy ? wte : 0)));
      }
      CHECK(m->updates <= 3 * m->optimizer / 2);
    }
    /* the moments' pieces cover the state once per replica (tp: its
     * replicated pieces, the norms' and the row-cut GEMMs' biases, more) */
    int64_t state = 2 * P * (plans[k].zero ? 1 : plans[k].dp);
    CHECK(plans[k].spec[0] == 't' ? optimizer > state : optimizer == state);
    printf("%-14s device 0: params %lld optimizer %lld updates %lld grads %lld activations %lld\n",
           plans[k].spec, (long long)r.devices[0].at_peak.params,
           (long long)r.devices[0].at_peak.optimizer, (long long)r.devices[0].at_peak.updates,
           (long long)r.devices[0].at_peak.grads, (long long)r.devices[0].at_peak.activations);
    loom_sim_result_free(&r);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  loom_graph_free(g);
}

/* What runs: the session's simplify merges identical nodes of a device's
 * program (simulate_merge.h), but +recompute's copies carry their mark
 * (loom_node.copy) and run again, in the backward. The simulator times and
 * sizes that program: on a step whose activations outweigh its state
 * (4 layers, 32 sequences of 64 tokens) dp2+recompute charges about a
 * forward's worth of GEMMs more than dp2, computes longer and peaks far
 * lower, its layers' activations dying with the forward. */
static void test_recompute_kept(void) {
  loom_gpt_config cfg;
  loom_gpt_config_default(&cfg);
  cfg.n_layer = 4;
  cfg.d_model = 32;
  cfg.n_head = 4;
  cfg.d_ff = 64;
  cfg.context = 64;
  loom_gpt_optim opt = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .seed = 1};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &cfg, 32, 64, &opt, &g, &per_step));
  if (!g) return;
  loom_cluster c = cluster(8);
  const char *specs[2] = {"dp2", "dp2+recompute"};
  int32_t lowered[2] = {0}, charged[2] = {0};
  int64_t peak[2] = {0}, activations[2] = {0};
  double compute[2] = {0};
  for (int32_t k = 0; k < 2; k++) {
    loom_plan *p = NULL;
    loom_plan_program *pp = NULL;
    CHECK_OK(ctx, loom_plan_open(ctx, g, specs[k], 2, &p));
    CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
    loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
    loom_sim_result r = {0};
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
    for (int32_t i = pp->order_start[0]; r.events && i < pp->order_start[1]; i++) {
      if (pp->global->nodes[pp->order_nodes[i]].op != LOOM_OP_MATMUL) continue;
      lowered[k]++;
      charged[k] += r.events[i].end_s > r.events[i].start_s;
    }
    peak[k] = r.devices ? r.devices[0].peak_bytes : 0;
    activations[k] = r.devices ? r.devices[0].at_peak.activations : 0;
    compute[k] = r.devices ? r.devices[0].compute_s : 0;
    /* the lowering's peak counts what the simulator's does */
    CHECK(peak[k] <= pp->stats[0].peak_bytes);
    loom_sim_result_free(&r);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  /* every copy runs but those nothing reads (the MLP's output GEMM of a
   * layer whose sum is the next layer's checkpoint), which the runtime's
   * dead-code elimination drops as well */
  CHECK(charged[0] == lowered[0] && charged[1] > charged[0] && charged[1] < lowered[1]);
  CHECK(compute[0] > 0 && compute[1] > 1.15 * compute[0]);
  CHECK(peak[1] > 0 && peak[1] < 0.75 * peak[0] && activations[1] < activations[0] / 2);
  printf("dp2: %d GEMMs, peak %lld (activations %lld), compute %.3f ms; dp2+recompute: %d GEMMs "
         "of %d lowered, peak %lld (activations %lld), compute %.3f ms\n",
         (int)charged[0], (long long)peak[0], (long long)activations[0], compute[0] * 1e3,
         (int)charged[1], (int)lowered[1], (long long)peak[1], (long long)activations[1],
         compute[1] * 1e3);
  loom_graph_free(g);
}

/* A piece held but read by no node still takes its memory: device 1 holds
 * a replica of %v that only device 0's exp reads. */
static const char k_held_plan[] = "plan devices 2\n"
                                  "trans matmul.* split in0 1 2\n"
                                  "assign matmul.0 0 1\n"
                                  "assign exp.1 0\n"
                                  "input %x D(1,2) on 0 1\n"
                                  "input %w D(0,2) on 0 1\n"
                                  "input %v R(2) on 0 1\n"
                                  "output y R(2) on 0 1\n"
                                  "output z R(1) on 0\n";

/* Turns (docs/SIMULATOR.md): four ranks on two cores compute their GEMM
 * pieces at half speed and reach the all-reduce together; of the four
 * members, each on a core half the time (the pool wants four cores),
 * 4 (1 - 2/4) = 2 wait for a turn in each of its two phases, so the step
 * grows by 4 turns. On four cores (bound, one a rank) no member waits. */
static void test_turns(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm, k4_plan);
  if (!pp) return;
  loom_cluster c = cluster(4);
  snprintf(c.collectives, sizeof c.collectives, "direct");
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32, .cores = 2};
  loom_sim_result base, turned, bound, bound_turned;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &base));
  c.wait_turn_s = 1e-3;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &turned));
  o.cores = 4;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &bound_turned));
  c.wait_turn_s = 0;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &bound));
  CHECK(base.step_s > 0 && near(turned.step_s, base.step_s + 4e-3));
  CHECK(near(turned.devices[0].comm_s, base.devices[0].comm_s + 4e-3));
  CHECK(bound.step_s > 0 && near(bound_turned.step_s, bound.step_s));
  loom_sim_result_free(&base);
  loom_sim_result_free(&turned);
  loom_sim_result_free(&bound);
  loom_sim_result_free(&bound_turned);
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

/* Turns back to back: in a blocking dp4 step on two cores every member
 * of every collective wants a core (the compute lanes wait), so each op
 * pays n (1 - C / n) = 2 turns a phase, also when its members come
 * straight from the op before (four spinning comm threads on two cores
 * are never all on one): the step grows by 4 turns an all-reduce and 2 a
 * reduce-scatter or all-gather, exactly. Blocking, compute comes between
 * any two ops; overlapped, ops queue back to back (below). */
static void test_turns_back_to_back(void) {
  loom_gpt_config cfg;
  loom_gpt_config_default(&cfg);
  cfg.n_layer = 2;
  cfg.d_model = 64;
  cfg.d_ff = 256;
  cfg.context = 16;
  loom_gpt_optim opt = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .seed = 1};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &cfg, 8, 16, &opt, &g, &per_step));
  if (!g) return;
  const char *specs[] = {"dp4", "dp4+zero2"};
  for (int32_t k = 0; k < 2; k++) {
    loom_plan *p = NULL;
    loom_plan_program *pp = NULL;
    CHECK_OK(ctx, loom_plan_open(ctx, g, specs[k], 4, &p));
    CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
    loom_cluster c = cluster(4);
    snprintf(c.collectives, sizeof c.collectives, "direct");
    loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32, .cores = 2};
    loom_sim_result base = {0}, turned = {0};
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &base));
    c.wait_turn_s = 1e-3;
    CHECK_OK(ctx, loom_plan_simulate(pp, &o, &turned));
    double turns = 0;
    for (int32_t m = 0; m < pp->n_comms; m++)
      turns += pp->comms[m].op == LOOM_OP_ALL_REDUCE ? 4 : 2;
    CHECK(pp->n_comms > 20 && base.step_s > 0);
    CHECK(fabs(turned.step_s - base.step_s - turns * 1e-3) < 1e-9 * turned.step_s);
    /* overlapped, ZeRO-2's all-gathers queue on the comm lanes after the
     * optimizer's small updates, one straight after the other, and still
     * pay their 2 turns each (before the twelfth session: only the first) */
    if (k == 1) {
      int32_t gathers = 0;
      for (int32_t m = 0; m < pp->n_comms; m++) gathers += pp->comms[m].op == LOOM_OP_ALL_GATHER;
      loom_sim_result base_o = {0}, turned_o = {0};
      o.overlap = true;
      c.wait_turn_s = 0;
      CHECK_OK(ctx, loom_plan_simulate(pp, &o, &base_o));
      c.wait_turn_s = 1e-3;
      CHECK_OK(ctx, loom_plan_simulate(pp, &o, &turned_o));
      CHECK(gathers > 10 && turned_o.step_s - base_o.step_s > 0.9 * 2e-3 * gathers);
      printf("dp4+zero2 overlapped: %d all-gathers; 1 ms turns add %.1f ms\n", (int)gathers,
             (turned_o.step_s - base_o.step_s) * 1e3);
      loom_sim_result_free(&base_o);
      loom_sim_result_free(&turned_o);
    }
    loom_sim_result_free(&base);
    loom_sim_result_free(&turned);
    loom_plan_program_free(pp);
    loom_plan_free(p);
  }
  loom_graph_free(g);
}

/* A waiter's pauses: device 0 runs a long exp before its GEMM, so device
 * 1 reaches the all-reduce first and waits past its spin, sleeping between
 * tests; it notices the last member on average half a pause late, which
 * the step pays once. Without that wait (the exp after the GEMM) nothing. */
static const char k_late_plan[] = "plan devices 2\n"
                                  "trans matmul.* split in0 1 2\n"
                                  "assign matmul.0 0 1\n"
                                  "assign exp.1 0\n"
                                  "order exp.1 matmul.0#0\n"
                                  "input %x D(1,2) on 0 1\n"
                                  "input %w D(0,2) on 0 1\n"
                                  "input %v R(1) on 0\n"
                                  "output y R(2) on 0 1\n"
                                  "output z R(1) on 0\n";
static const char mm_big_exp[] = "input %x : f32[512, 256]\n"
                                 "param %w : f32[256, 1024]\n"
                                 "input %v : f32[16384, 4096]\n"
                                 "%y = matmul(%x, %w)\n"
                                 "%z = exp(%v)\n"
                                 "output y = %y\n"
                                 "output z = %z\n";

static void test_wait_period(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm_big_exp, k_late_plan);
  if (!pp) return;
  loom_cluster c = cluster(2);
  snprintf(c.collectives, sizeof c.collectives, "direct");
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32, .cores = 2};
  loom_sim_result base, late;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &base));
  c.wait_period_s = 200e-6;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &late));
  /* the exp (256 MiB in and out at 80 GB/s) outlasts device 1's spin */
  CHECK(base.devices[1].idle_s > loom_comm_spin_seconds((size_t)pp->comms[0].bytes));
  CHECK(near(late.step_s, base.step_s + 100e-6));
  /* on one core the waiting rank's polls take a share of it (wait.share)
   * from the exp beside them */
  loom_sim_result shared, polled;
  o.cores = 1;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &shared));
  c.wait_share = 0.5;
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &polled));
  CHECK(polled.step_s > shared.step_s * (1 + 1e-6));
  loom_sim_result_free(&shared);
  loom_sim_result_free(&polled);
  loom_sim_result_free(&base);
  loom_sim_result_free(&late);
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

static void test_held_unread(void) {
  loom_graph *g = NULL;
  loom_plan_program *pp = lower_text(&g, mm_big_exp, k_held_plan);
  if (!pp) return;
  loom_cluster c = cluster(2);
  loom_sim_options o = {.cluster = &c, .precision = LOOM_PRECISION_f32};
  loom_sim_result r = {0};
  CHECK_OK(ctx, loom_plan_simulate(pp, &o, &r));
  if (r.devices) {
    int64_t x = 512 * 128 * 4, w = 128 * 1024 * 4, v = (int64_t)16384 * 4096 * 4;
    CHECK(r.devices[1].at_peak.inputs == x + v && r.devices[1].at_peak.params == w);
    CHECK(r.devices[0].at_peak.inputs == x + v && r.devices[0].at_peak.params == w);
    /* device 1's arena: the GEMM's piece of y and the all-reduce's */
    CHECK(r.devices[1].at_peak.activations == 512 * 1024 * 4);
    CHECK(r.devices[1].at_peak.comm_buffers == 512 * 1024 * 4);
  }
  loom_sim_result_free(&r);
  loom_plan_program_free(pp);
  loom_graph_free(g);
}

int main(void) {
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  test_gemm_and_all_reduce();
  test_stitching();
  test_state_copy_out();
  test_attention_efficiency();
  test_collectives();
  test_bound_cores();
  test_run_order();
  test_turns();
  test_turns_back_to_back();
  test_wait_period();
  test_gpt_plans();
  test_memory_roles();
  test_recompute_kept();
  test_held_unread();
  loom_ctx_free(ctx);
  return loom_test_finish("test_simulate");
}

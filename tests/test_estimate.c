/*
 * Composed estimates (parallel/estimate.h) against figures worked out by
 * hand: the pipeline bubble of 1F1B and GPipe, (p-1)/(m+p-1) of the
 * pipeline's time when the layers dominate, the interleaved schedule's
 * bubble 1/v of that, recomputation adding one forward (4/3 of the
 * compute of a GEMM-bound model), the parameter, gradient and optimizer
 * bytes of the ZeRO stages, the recomputed activations, a data-parallel
 * all-reduce across two nodes, Megatron's FLOP count, the built-in spec
 * strings, the errors for degrees that do not divide, and Megatron's 1.7B
 * run in a sane range.
 */
#include "common.h"

#include "core/clock.h"
#include "parallel/builtin.h"
#include "parallel/estimate.h"

#include <math.h>
#include <string.h>

static loom_ctx *ctx;

/* A made-up device: 100 TFLOP/s bf16, 10 f32, 1 TB/s memory, 16 GB. */
static loom_cluster cluster(int32_t per_node, double link_Bps, double latency_s) {
  loom_cluster_link link = {.kind = "link", .bandwidth_Bps = link_Bps, .latency_s = latency_s};
  loom_cluster_link net = {.kind = "net", .bandwidth_Bps = link_Bps, .latency_s = latency_s, .nics = 1};
  return (loom_cluster){.name = "test", .device = "dev",
                        .flops = {[LOOM_PRECISION_f32] = 10e12, [LOOM_PRECISION_bf16] = 100e12},
                        .memory_bandwidth_Bps = 1e12, .memory_bytes = 16e9,
                        .devices_per_node = per_node, .intra = link, .inter = net};
}

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* Wide layers, a tiny vocabulary: the layers are nearly all the time. */
static loom_gpt_config layer_bound(int32_t layers) {
  return (loom_gpt_config){.vocab = 64, .n_layer = layers, .d_model = 1024, .n_head = 8,
                           .context = 256, .d_ff = 4096, .dropout = 0.1};
}

static loom_mesh_plan plan(int32_t dp, int32_t tp, int32_t pp, int32_t mb) {
  return (loom_mesh_plan){.dp = dp, .tp = tp, .pp = pp, .micro_batch = mb,
                          .schedule = LOOM_PIPE_1F1B, .chunks = 1};
}

/* The pipeline's time: the step less what runs after it. */
static double pipe_time(const loom_estimate *e) {
  return e->step_s - e->optimizer_s - e->dp_comm_s - e->pp_comm_s;
}

static void test_bubbles(void) {
  /* links so fast the transfers vanish: the bubble is the schedule's */
  loom_cluster c = cluster(8, 1e18, 0);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m = layer_bound(8);
  const int32_t p = 4, mbs = 8;
  loom_mesh_plan pl = plan(1, 1, p, 1);
  loom_estimate e1, eg, ei;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, mbs, &pl, &o, &e1));
  /* 1F1B: (p-1) stage-steps of fill and drain over m + p - 1 */
  double want = (double)(p - 1) / (mbs + p - 1);
  CHECK(near(e1.bubble_s / pipe_time(&e1), want, 0.03));
  CHECK(e1.pp_comm_s < 1e-9 * e1.step_s + 1e-12);
  pl.schedule = LOOM_PIPE_GPIPE;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, mbs, &pl, &o, &eg));
  CHECK(near(eg.bubble_s / pipe_time(&eg), want, 0.03));
  /* interleaved over v = 2 chunks: the same work, the bubble halved
   * (Megatron: (p-1)/(v m) of the ideal time) */
  pl.schedule = LOOM_PIPE_INTERLEAVED;
  pl.chunks = 2;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, mbs, &pl, &o, &ei));
  double ideal = pipe_time(&e1) - e1.bubble_s;
  CHECK(near(ei.bubble_s / ideal, (double)(p - 1) / (2.0 * mbs), 0.05));
  CHECK(near(ei.bubble_s, e1.bubble_s / 2, 0.05));
  CHECK(near(ei.compute_s, e1.compute_s, 1e-9));
  /* no pipeline: no bubble */
  pl = plan(1, 1, 1, 1);
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, mbs, &pl, &o, &e1));
  CHECK(e1.bubble_s <= 1e-12);
}

static void test_recompute(void) {
  loom_cluster c = cluster(8, 1e18, 0);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m = layer_bound(4);
  loom_mesh_plan pl = plan(1, 1, 1, 2);
  loom_estimate a, b;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 4, &pl, &o, &a));
  pl.recompute = true;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 4, &pl, &o, &b));
  /* one more forward per layer: a GEMM-bound backward costs two forwards,
   * so compute grows by about 4/3 */
  CHECK(near(b.compute_s / a.compute_s, 4.0 / 3.0, 0.08));
  CHECK(b.compute_s > a.compute_s);
  /* Megatron's count: 96 B s l h^2 (1 + s/6h + V/16lh) with recomputation,
   * 72 ... with 6 B s h V for the head unchanged */
  double B = 4, s = 256, l = 4, h = 1024, V = 64;
  double with = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  double without = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V;
  CHECK(near(b.model_flops, with, 1e-12));
  CHECK(near(a.model_flops, without, 1e-12));
  CHECK(near(b.flops_per_device_s, b.model_flops / b.step_s, 1e-12));
}

static void test_memory(void) {
  loom_cluster c = cluster(8, 100e9, 1e-6);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m = layer_bound(4);
  double l = 4, h = 1024, V = 64, s = 256;
  /* 12 h^2 + 13 h per block, V h + s h embeddings, 2 h final norm */
  double P = l * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
  loom_mesh_plan pl = plan(4, 1, 1, 1);
  loom_estimate e0, e1, e2, e3;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &e0));
  /* mixed precision: 2 + 2 + 12 bytes per parameter (the ZeRO paper) */
  CHECK(near(e0.memory.params, 2 * P, 1e-12));
  CHECK(near(e0.memory.grads, 2 * P, 1e-12));
  CHECK(near(e0.memory.optimizer, 12 * P, 1e-12));
  pl.zero = 1;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &e1));
  CHECK(near(e1.memory.optimizer, 12 * P / 4, 1e-12) && near(e1.memory.grads, 2 * P, 1e-12));
  pl.zero = 2;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &e2));
  CHECK(near(e2.memory.grads, 2 * P / 4, 1e-12) && near(e2.memory.params, 2 * P, 1e-12));
  pl.zero = 3;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &e3));
  CHECK(near(e3.memory.params, e0.memory.params / 4, 1e-12));
  CHECK(e3.dp_comm_s > e0.dp_comm_s); /* gathers for forward and backward */
  CHECK(near(e0.memory.total, e0.memory.params + e0.memory.grads + e0.memory.optimizer +
                                  e0.memory.activations + e0.memory.comm_buffers, 1e-12));
  /* recomputation keeps each block's input [b, s, h] (2 bytes) and one
   * block's full activations (Korthikanti et al.: s b h (10 + 24) bytes at
   * t = 1, flash attention's f32 log-sum-exp 4 a s b) */
  pl = plan(1, 1, 1, 2);
  pl.recompute = true;
  loom_estimate r;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 2, &pl, &o, &r));
  double b = 2, a = 8, sbh = s * b * h;
  double full = sbh * 34 + 4 * a * s * b;
  CHECK(near(r.memory.activations, l * sbh * 2 + full + b * s * V * (2 + 4), 1e-12));
  /* without: every block's full activations for the one micro-batch */
  pl.recompute = false;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 2, &pl, &o, &r));
  CHECK(near(r.memory.activations, l * full + b * s * V * (2 + 4), 1e-12));
  /* a 1F1B first stage holds p micro-batches, GPipe all m */
  pl = plan(1, 1, 2, 1);
  loom_estimate f, g;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &f));
  pl.schedule = LOOM_PIPE_GPIPE;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &pl, &o, &g));
  double full1 = s * h * 34 + 4 * a * s; /* micro-batch 1 */
  CHECK(f.memory.activations >= 2 * (l / 2) * full1 * (1 - 1e-12));
  CHECK(g.memory.activations >= 8 * (l / 2) * full1 * (1 - 1e-12));
  CHECK(f.fits && g.fits);
  /* a model far beyond 16 GB does not fit */
  loom_gpt_config big = layer_bound(64);
  big.d_model = 4096, big.d_ff = 16384, big.n_head = 32;
  pl = plan(1, 1, 1, 1);
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &big, 1, &pl, &o, &r));
  CHECK(!r.fits && r.memory.total > 16 * 12 * 4096.0 * 4096 * 64);
}

static void test_dp_comm(void) {
  /* two nodes of one device: the gradients' ring all-reduce across them,
   * 2 steps of latency + 2 (n-1)/n of the bytes at 0.8 of the link */
  const double bw = 10e9, lat = 1e-5;
  loom_cluster c = cluster(1, bw, lat);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m = layer_bound(2);
  double h = 1024, V = 64, s = 256;
  double P = 2 * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
  loom_mesh_plan pl = plan(2, 1, 1, 1);
  loom_estimate e;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 2, &pl, &o, &e));
  CHECK(near(e.dp_comm_s, 2 * lat + 2 * P / (0.8 * bw), 1e-9));
  /* overlapped with the backward: never more exposed */
  o.overlap = true;
  loom_estimate ov;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 2, &pl, &o, &ov));
  CHECK(ov.dp_comm_s <= e.dp_comm_s && ov.step_s <= e.step_s);
}

static void test_tp_comm(void) {
  /* Megatron's tp all-reduces of [b, s, h]: 2 a block forward, 2 backward
   * (2 more recomputing), 1 for the embedding, 1 for the head's input
   * gradient; a ring of 2 inside a node: 2 latencies + the bytes at 0.8 */
  const double bw = 50e9, lat = 2e-6;
  loom_cluster c = cluster(8, bw, lat);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m = layer_bound(2);
  double b = 2, s = 256, h = 1024, mbs = 3;
  double ar = 2 * lat + b * s * h * 2 / (0.8 * bw);
  loom_mesh_plan pl = plan(1, 2, 1, 2);
  loom_estimate e, r, one;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 6, &pl, &o, &e));
  CHECK(near(e.tp_comm_s, mbs * (2 * 4 + 2) * ar, 1e-9));
  pl.recompute = true;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 6, &pl, &o, &r));
  CHECK(near(r.tp_comm_s, mbs * (2 * 6 + 2) * ar, 1e-9));
  /* the shard computes about half of what one device does (norms and
   * residuals are replicated) */
  pl = plan(1, 1, 1, 2);
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 6, &pl, &o, &one));
  CHECK(e.compute_s < 0.7 * one.compute_s && e.compute_s > 0.45 * one.compute_s);
}

static void spec_is(loom_mesh_plan p, int64_t batch, const char *want) {
  char buf[64];
  bool ok = loom_mesh_plan_spec(&p, batch, buf, sizeof buf);
  CHECK(ok && !strcmp(buf, want));
  if (!ok || strcmp(buf, want)) fprintf(stderr, "  spec '%s', wanted '%s'\n", buf, want);
  CHECK(loom_plan_builtin_known(buf));
}

static void test_specs(void) {
  spec_is(plan(2, 2, 1, 4), 8, "dp2xtp2");
  spec_is(plan(2, 2, 1, 1), 8, "dp2xtp2xpp1+mb4"); /* accumulation over 4 micro-batches */
  loom_mesh_plan p = plan(2, 2, 1, 4);
  p.zero = 1;
  spec_is(p, 8, "dp2xtp2+zero1");
  p = plan(1, 1, 4, 1);
  spec_is(p, 4, "pp4");
  spec_is(p, 16, "pp4+mb16");
  p.schedule = LOOM_PIPE_GPIPE;
  spec_is(p, 8, "pp4+gpipe+mb8");
  p.schedule = LOOM_PIPE_INTERLEAVED, p.chunks = 2;
  spec_is(p, 8, "pp4+interleaved+mb8");
  p = plan(2, 4, 1, 1);
  p.tp_across_nodes = true;
  spec_is(p, 2, "tp4xdp2");
  p = plan(4, 1, 1, 2);
  p.recompute = true, p.zero = 2;
  spec_is(p, 8, "dp4+zero2+recompute");
  char buf[64];
  p = plan(1, 1, 2, 1);
  p.recompute = true;
  spec_is(p, 4, "pp2+mb4+recompute");
  p = plan(2, 2, 1, 1);
  p.zero = 3;
  spec_is(p, 2, "dp2xtp2+zero3");
  p = plan(1, 1, 2, 1);
  p.schedule = LOOM_PIPE_INTERLEAVED, p.chunks = 4;
  spec_is(p, 4, "pp2+interleaved4+mb4");
  CHECK(!loom_mesh_plan_spec(&p, 4, buf, 4));          /* too small a buffer */
}

static void test_errors(void) {
  loom_gpt_config m = layer_bound(8);
  loom_mesh_plan p = plan(1, 3, 1, 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_mesh_plan_check(ctx, &m, 4, &p, 8));
  CHECK(strstr(loom_ctx_error(ctx), "tp 3") != NULL);
  p = plan(1, 1, 3, 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_mesh_plan_check(ctx, &m, 4, &p, 8));
  CHECK(strstr(loom_ctx_error(ctx), "layers") != NULL);
  p = plan(3, 1, 1, 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_mesh_plan_check(ctx, &m, 4, &p, 8));
  CHECK(strstr(loom_ctx_error(ctx), "batch 4") != NULL);
  p = plan(1, 1, 4, 1);
  p.schedule = LOOM_PIPE_INTERLEAVED, p.chunks = 2;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_mesh_plan_check(ctx, &m, 6, &p, 8));
  p = plan(1, 8, 1, 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_mesh_plan_check(ctx, &m, 4, &p, 4));
  p = plan(1, 2, 2, 1);
  CHECK_OK(ctx, loom_mesh_plan_check(ctx, &m, 4, &p, 8));
  loom_estimate e;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_estimate_gpt(ctx, &m, 4, &p, NULL, &e));
  loom_cluster c = cluster(8, 100e9, 1e-6);
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_fp8}; /* not given */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_estimate_gpt(ctx, &m, 4, &p, &o, &e));
  c.max_nodes = 1;
  o.precision = LOOM_PRECISION_bf16;
  p = plan(4, 1, 4, 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_estimate_gpt(ctx, &m, 16, &p, &o, &e));
}

/* Megatron's 1.7B on 32 A100s (arXiv 2104.04473, Table 1: 137 TFLOP/s per
 * GPU): below the 312 TFLOP/s peak, above a third of it, fits in 80 GB. */
static void test_megatron_1_7b(void) {
  loom_cluster c;
  CHECK_OK(ctx, loom_cluster_load(ctx, LOOM_TEST_DATA "/../../clusters/dgx-a100-80gb-hdr.txt", &c));
  loom_gpt_config m = {.vocab = 51200, .n_layer = 24, .d_model = 2304, .n_head = 24,
                       .context = 2048, .d_ff = 4 * 2304, .dropout = 0.1};
  loom_mesh_plan p = plan(32, 1, 1, 1);
  p.recompute = true;
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16,
                             .composite_attention = true};
  loom_estimate e;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 512, &p, &o, &e));
  CHECK(e.flops_per_device_s > 104e12 && e.flops_per_device_s < 312e12);
  /* 1.7B parameters at 16 bytes each: about 27 GB of state */
  CHECK(e.memory.params + e.memory.grads + e.memory.optimizer > 16 * 1.6e9);
  CHECK(e.fits);
  /* the second call is the cached layer timing: thousands per second */
  double t0 = loom_now_s();
  for (int i = 0; i < 200; i++) loom_estimate_gpt(ctx, &m, 512, &p, &o, &e);
  CHECK(loom_now_s() - t0 < 2.0);
}

int main(void) {
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  test_bubbles();
  test_recompute();
  test_memory();
  test_dp_comm();
  test_tp_comm();
  test_specs();
  test_errors();
  test_megatron_1_7b();
  loom_ctx_free(ctx);
  return loom_test_finish("test_estimate");
}

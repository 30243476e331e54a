/*
 * `loom bench megatron`: composed estimates (parallel/estimate.h) against
 * Megatron-LM's published weak-scaling runs (Narayanan et al. 2021,
 * arXiv 2104.04473, Table 1: GPT 1.7B on 32 A100s ... 1008B on 3072),
 * on the cluster of those runs (clusters/dgx-a100-80gb-hdr.txt, embedded
 * here so the bench needs no file). Nothing is measured: it prints, per
 * row, the published and the predicted teraFLOP/s per GPU, the error, the
 * predicted step time, the memory per GPU and whether it fits.
 * docs/PERFORMANCE.md, "Simulator against Megatron-LM's published runs".
 */
#include "harness.h"

#include "core/clock.h"
#include "parallel/estimate.h"
#include "parallel/search.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* clusters/dgx-a100-80gb-hdr.txt */
static const char dgx_a100[] =
    "name              dgx-a100-80gb-hdr\n"
    "device            a100-sxm4-80gb\n"
    "flops.f32         19.5 TFLOP/s\n"
    "flops.tf32        156 TFLOP/s\n"
    "flops.bf16        312 TFLOP/s\n"
    "memory.bandwidth  2039 GB/s\n"
    "memory.capacity   80 GB\n"
    "node.devices      8\n"
    "intra.kind        nvlink3\n"
    "intra.bandwidth   300 GB/s\n"
    "intra.latency     3 us\n"
    "inter.kind        infiniband-hdr\n"
    "inter.bandwidth   200 Gb/s\n"
    "inter.latency     5 us\n"
    "inter.nics        8\n";

/* Table 1 of 2104.04473: parameters (billions), heads, hidden, layers,
 * t, p, GPUs, batch, achieved teraFLOP/s per GPU. Sequence 2048,
 * vocabulary 51200 throughout. */
typedef struct megatron_row {
  double params_b;
  int32_t heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;
} megatron_row;

static const megatron_row rows[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};
#define N_ROWS ((int32_t)(sizeof rows / sizeof rows[0]))

/* Row i as a model and a plan: micro-batch 1, the 1F1B schedule (not
 * interleaved: 60, 105 layers do not split into 2 chunks per stage), full
 * recomputation, tp inside a node, no ZeRO (docs/PERFORMANCE.md says why). */
static void row_plan(int32_t i, loom_gpt_config *m, int64_t *batch, loom_mesh_plan *p) {
  const megatron_row *r = &rows[i];
  *m = (loom_gpt_config){.vocab = 51200, .n_layer = r->layers, .d_model = r->hidden,
                         .n_head = r->heads, .context = 2048, .d_ff = 4 * r->hidden,
                         .dropout = 0.1};
  *batch = r->batch;
  *p = (loom_mesh_plan){.dp = r->gpus / (r->tp * r->pp), .tp = r->tp, .pp = r->pp,
                        .micro_batch = 1, .schedule = LOOM_PIPE_1F1B, .chunks = 1,
                        .zero = 0, .recompute = true, .tp_across_nodes = false};
}

bool loom_bench_run_megatron(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *bo) {
  (void)bo;
  loom_cluster c;
  if (loom_cluster_parse(ctx, dgx_a100, strlen(dgx_a100), &c) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: megatron: %s\n", loom_ctx_error(ctx));
    return false;
  }
  loom_estimate_options o = {.cluster = &c, .precision = LOOM_PRECISION_bf16,
                             .element_bytes = 2, .overlap = false, .composite_attention = true};
  if (!json)
    fprintf(f,
            "Megatron-LM weak scaling (arXiv 2104.04473, Table 1) on %s: bf16, seq 2048, vocab "
            "51200,\nmicro-batch 1, 1F1B, full recomputation, attention unfused (QK^T, softmax, PV) as in\n"
            "2021, dp gradients after the backward, the simulator's GEMM efficiency\n"
            "%-8s %5s %2s %3s %5s %9s %9s %7s %8s %9s %7s %5s\n",
            c.name, "model", "GPUs", "t", "p", "batch", "pub TF", "pred TF", "error", "step s",
            "bubble", "mem GB", "fits");
  bool ok = true;
  double worst = 0, search_worst = 0;
  int32_t planner_ok = 0;
  double t0 = loom_now_s();
  for (int32_t i = 0; i < N_ROWS; i++) {
    loom_gpt_config m;
    int64_t batch;
    loom_mesh_plan p;
    row_plan(i, &m, &batch, &p);
    loom_estimate e;
    if (loom_estimate_gpt(ctx, &m, batch, &p, &o, &e) != LOOM_STATUS_OK) {
      fprintf(stderr, "loom: megatron %.1fB: %s\n", rows[i].params_b, loom_ctx_error(ctx));
      ok = false;
      continue;
    }
    /* the planner on the same model, GPUs and batch, rated the same way */
    loom_search_options so = {.cluster = &c, .precision = o.precision, .element_bytes = 2,
                              .overlap = false, .composite_attention = true, .top = 1};
    loom_search_result sr = {0};
    double plan_s = 0, plan_gb = 0, search_s = 0;
    char plan_words[128] = "-";
    if (loom_plan_search(ctx, &m, batch, rows[i].gpus, &so, &sr) == LOOM_STATUS_OK && sr.n_best) {
      plan_s = sr.best[0].est.step_s;
      plan_gb = sr.best[0].est.memory.total / 1e9;
      search_s = sr.seconds;
      loom_mesh_plan_describe(&sr.best[0].plan, plan_words, sizeof plan_words);
    } else {
      ok = false;
    }
    loom_search_result_free(&sr);
    planner_ok += plan_s > 0 && plan_s <= e.step_s * (1 + 1e-9) && plan_gb <= 80;
    search_worst = search_s > search_worst ? search_s : search_worst;
    double pred = e.flops_per_device_s / 1e12, err = (pred - rows[i].tflops) / rows[i].tflops;
    if (fabs(err) > worst) worst = fabs(err);
    char name[16];
    snprintf(name, sizeof name, "%.1fB", rows[i].params_b);
    if (json)
      fprintf(f,
              "{\"bench\":\"megatron\",\"model\":\"%s\",\"gpus\":%d,\"tp\":%d,\"pp\":%d,"
              "\"batch\":%d,\"published_tflops\":%.1f,\"predicted_tflops\":%.2f,"
              "\"error\":%.4f,\"step_s\":%.4f,\"bubble\":%.4f,\"compute_s\":%.4f,"
              "\"tp_comm_s\":%.4f,\"pp_comm_s\":%.4f,\"dp_comm_s\":%.4f,\"optimizer_s\":%.4f,"
              "\"memory_bytes\":%.0f,\"fits\":%s}\n",
              name, rows[i].gpus, rows[i].tp, rows[i].pp, rows[i].batch, rows[i].tflops, pred,
              err, e.step_s, e.bubble_fraction, e.compute_s, e.tp_comm_s, e.pp_comm_s,
              e.dp_comm_s, e.optimizer_s, e.memory.total, e.fits ? "true" : "false");
    else
      fprintf(f,
              "%-8s %5d %2d %3d %5d %9.0f %9.1f %+6.1f%% %8.2f %8.1f%% %7.1f %5s   planner "
              "%7.2f s %5.1f GB (%.1fx; %s, %.1f s)\n",
              name, rows[i].gpus, rows[i].tp, rows[i].pp, rows[i].batch, rows[i].tflops, pred,
              100 * err, e.step_s, 100 * e.bubble_fraction, e.memory.total / 1e9,
              e.fits ? "yes" : "no", plan_s, plan_gb, plan_s > 0 ? e.step_s / plan_s : 0,
              plan_words, search_s);
  }
  double took = loom_now_s() - t0;
  if (!json)
    fprintf(f,
            "worst error %.1f%% (target: every row within 15%%); planner at least as fast as the "
            "published configuration and within 80 GB on %d of %d rows (longest search %.1f s, "
            "target 60 s); %.1f s in all\n",
            100 * worst, planner_ok, N_ROWS, search_worst, took);
  return ok;
}

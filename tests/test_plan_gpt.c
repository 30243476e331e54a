/*
 * Every built-in plan on the training step of the GPT of `loom train`
 * (small sizes, dropout on): the plan's global graph on the reference
 * executor computes the loss and every updated weight and AdamW moment
 * of the single-device graph, and each collective moves the analytic
 * volume (data parallel: one all-reduce of the gradients, 2(n-1)/n of
 * their bytes per device; Megatron TP: per layer two all-reduces of the
 * activations forward and two backward).
 */
#include "common.h"

#include "model/gpt.h"
#include "ops/op.h"
#include "parallel/builtin.h"
#include "parallel/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const loom_session_options ref_opts = LOOM_SESSION_OPTIONS(.backend = "ref");

static loom_gpt_config config(void) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 4;
  c.context = 8;
  c.d_ff = 64;
  c.dropout = 0.1;
  return c;
}

enum { B = 4, T = 8 };

static loom_graph *train_graph(loom_ctx *ctx, const loom_session_options *so) {
  loom_gpt_config c = config();
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5,
                      .session = so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, B, T, &o, &g, &per_step));
  return g;
}

static int64_t grad_bytes(const loom_graph *g) {
  int64_t b = 0;
  for (int32_t i = 0; i < loom_graph_num_inputs(g); i++)
    if (loom_graph_input_is_param(g, i)) {
      loom_dtype dt;
      int32_t rank;
      int64_t shape[LOOM_MAX_RANK], n = 1;
      loom_graph_value_type(g, loom_graph_input_value(g, i), &dt, &rank, shape);
      for (int32_t d = 0; d < rank; d++) n *= shape[d];
      b += 4 * n;
    }
  return b;
}

static void check_plan(loom_ctx *ctx, const loom_graph *g, loom_tensor **in, loom_tensor **want,
                       const char *spec, int32_t n) {
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_builtin(ctx, g, spec, n, &p));
  if (!p) return;
  loom_plan_program *pp = NULL;
  CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
  if (!pp) {
    loom_plan_free(p);
    return;
  }
  loom_tensor **got = loom_test_run(ctx, pp->global, &ref_opts, in);
  double worst = 0;
  int32_t no = loom_graph_num_outputs(g);
  for (int32_t o = 0; o < no; o++) {
    /* output o >= 1 updates input LOOM_GPT_IN_PARAMS + o - 1 */
    const loom_tensor *base = o ? in[LOOM_GPT_IN_PARAMS + o - 1] : NULL;
    double e = loom_test_update_error(want[o], got ? got[o] : NULL, base);
    if (!(e <= 1e-3)) fprintf(stderr, "%s: output %d off by %g\n", spec, o, e);
    CHECK(e <= 1e-3);
    if (e > worst) worst = e;
  }
  int64_t ar = 0;
  for (int32_t d = 0; d < n; d++) ar += pp->stats[d].comm_bytes[LOOM_OP_ALL_REDUCE];
  printf("%-14s worst %.1e  all_reduce %lld B/device  all_gather %lld  reduce_scatter %lld  comms %d\n",
         spec, worst, (long long)(ar / n), (long long)pp->stats[0].comm_bytes[LOOM_OP_ALL_GATHER],
         (long long)pp->stats[0].comm_bytes[LOOM_OP_REDUCE_SCATTER], pp->n_comms);
  if (strcmp(spec, "dp2") == 0 || strcmp(spec, "dp4") == 0) {
    /* the gradients and the loss (a scalar every device reads) */
    int64_t want_b = (int64_t)(2.0 * (n - 1) / n * (double)(grad_bytes(g) + 4));
    for (int32_t d = 0; d < n; d++) CHECK(pp->stats[d].comm_bytes[LOOM_OP_ALL_REDUCE] == want_b);
  }
  if (strncmp(spec, "dp2+zero", 8) == 0) {
    /* ZeRO: the gradients reduce-scattered into the sharded update and the
     * parameters all-gathered, (n-1)/n of their bytes each (zero3 gathers
     * where they are used, once a step, the others after the update); the
     * only all-reduce left is the loss every device reads */
    int64_t half = grad_bytes(g) / 2;
    for (int32_t d = 0; d < n; d++) {
      CHECK(pp->stats[d].comm_bytes[LOOM_OP_REDUCE_SCATTER] == half);
      CHECK(pp->stats[d].comm_bytes[LOOM_OP_ALL_GATHER] == half);
      CHECK(pp->stats[d].comm_bytes[LOOM_OP_ALL_REDUCE] == 4);
      CHECK(pp->stats[d].comm_bytes[LOOM_OP_ALL_TO_ALL] == 0);
    }
  }
  if (strcmp(spec, "tp2") == 0) {
    /* Megatron: per layer two all-reduces of [B*T, D] forward (attention
     * and MLP outputs) and two backward (their inputs' gradients), one for
     * the vocabulary-parallel head's input gradient and one joining the
     * vocabulary-parallel embedding's partial lookups (B*T = 32 tokens
     * move fewer bytes than the 256-row table would) */
    int32_t act = 0;
    for (int32_t k = 0; k < pp->n_comms; k++)
      act += pp->comms[k].op == LOOM_OP_ALL_REDUCE &&
             loom_type_numel(loom_value_type(g, pp->comms[k].value)) == (int64_t)B * T * 32;
    printf("tp2: %d all-reduces of activations [B*T, D]\n", act);

    CHECK(act == 4 * 2 + 2);
    /* each device looks up in its own half of the table */
    int32_t halves = 0;
    const loom_graph *G = pp->global;
    for (int32_t i = 0; i < G->n_nodes; i++) {
      const loom_node *nd = &G->nodes[i];
      if (nd->op == LOOM_OP_GATHER && LOOM_ATTR_I(nd, gather, range) == 256 &&
          loom_value_type(G, nd->in[0])->shape[0] == 128)
        halves += LOOM_ATTR_I(nd, gather, base) == 128 * pp->node_device[i];
    }
    CHECK(halves == 2);
  }
  if (strncmp(spec, "pp", 2) == 0) {
    /* stages carry their own layers' forward and backward: the backward
     * follows where the forward read (a tied embedding's head included),
     * not the first stage (which took 4x its share before); the last
     * stage's extra is the head and loss over the 256-word vocabulary */
    double lo = pp->stats[0].flops, hi = lo;
    for (int32_t d = 1; d < n; d++) {
      lo = fmin(lo, pp->stats[d].flops);
      hi = fmax(hi, pp->stats[d].flops);
    }
    printf("%s: stage flops from %.3g to %.3g\n", spec, lo, hi);
    CHECK(hi < 2.0 * lo);
  }
  loom_test_free_tensors(got, no);
  loom_plan_program_free(pp);
  loom_plan_free(p);
}

/* Recomputation trades FLOPs for memory: on a step whose activations
 * outweigh its state (batch 32, 4 layers), the recomputing plan's peak is
 * far lower and its FLOPs about a forward pass higher. Lowering only. */
static void test_recompute_memory(loom_ctx *ctx) {
  loom_gpt_config c = config();
  c.n_layer = 4;
  c.context = 64;
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, 32, 64, &o, &g, &per_step));
  /* with a pipeline, the first stage (device 0) holds the most micro-batches */
  static const char *const specs[][2] = {
      {"dp2", "dp2+recompute"}, {"tp2", "tp2+recompute"}, {"pp2", "pp2+recompute"}};
  for (int32_t k = 0; g && k < (int32_t)(sizeof specs / sizeof specs[0]); k++) {
    loom_plan_device_stats st[2];
    for (int32_t j = 0; j < 2; j++) {
      loom_plan *p = NULL;
      loom_plan_program *pp = NULL;
      CHECK_OK(ctx, loom_plan_builtin(ctx, g, specs[k][j], 2, &p));
      if (p) CHECK_OK(ctx, loom_plan_lower(p, NULL, &pp));
      if (pp) st[j] = pp->stats[0];
      else memset(&st[j], 0, sizeof st[j]);
      loom_plan_program_free(pp);
      loom_plan_free(p);
    }
    printf("%s: peak %.2f MiB, %.2f GFLOP; %s: peak %.2f MiB, %.2f GFLOP\n", specs[k][0],
           st[0].peak_bytes / 1048576.0, st[0].flops * 1e-9, specs[k][1],
           st[1].peak_bytes / 1048576.0, st[1].flops * 1e-9);
    CHECK(st[1].peak_bytes < 0.7 * st[0].peak_bytes);
    CHECK(st[1].flops > 1.2 * st[0].flops && st[1].flops < 1.5 * st[0].flops);
  }
  loom_graph_free(g);
}

/* The Llama options (RMSNorm, SwiGLU, RoPE, grouped-query attention with
 * 2 K/V heads for 4 query heads, no biases, an untied head): tp splits the
 * K/V heads, so each device's query heads find their K and V at home, and
 * the same analytic volumes hold (tp2: 10 activation all-reduces). */
static void test_llama(loom_ctx *ctx) {
  loom_gpt_config c = config();
  loom_gpt_config_set_arch(&c, LOOM_GPT_ARCH_LLAMA);
  c.n_kv_head = 2;
  c.d_ff = 48;
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, B, T, &o, &g, &per_step));
  if (!g) return;
  loom_tensor **in = loom_test_gpt_inputs(ctx, g, 13), **want = loom_test_run(ctx, g, &ref_opts, in);
  static const struct {
    const char *spec;
    int32_t n;
  } plans[] = {{"dp2", 2}, {"tp2", 2}, {"pp2", 2}, {"dp2xtp2", 4}, {"dp2+zero2", 2},
               {"dp2+zero3", 2}, {"tp2xpp2", 4}, {"pp2+recompute", 2}, {"dp2xtp2+zero3", 4}};
  printf("llama (gqa 4/2, swiglu, rope, rmsnorm, untied):\n");
  for (size_t i = 0; want && i < sizeof plans / sizeof plans[0]; i++)
    check_plan(ctx, g, in, want, plans[i].spec, plans[i].n);
  loom_test_free_tensors(in, loom_graph_num_inputs(g));
  loom_test_free_tensors(want, loom_graph_num_outputs(g));
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_graph *g = train_graph(ctx, NULL);
  if (!g) return loom_test_finish("test_plan_gpt");
  loom_tensor **in = loom_test_gpt_inputs(ctx, g, 11), **want = loom_test_run(ctx, g, &ref_opts, in);
  static const struct {
    const char *spec;
    int32_t n;
  } plans[] = {{"dp2", 2}, {"dp4", 4}, {"tp2", 2}, {"dp2xtp2", 4}, {"dp2+zero2", 2},
               {"dp2+zero3", 2}, {"pp2", 2}, {"pp2+gpipe+mb4", 2}, {"dp2xpp2", 4},
               {"tp2xpp2", 4}, {"pp2+interlaced", 2}, {"dp2+recompute", 2}, {"dp2tp2pp2", 8},
               {"tp2+recompute", 2}, {"pp2+recompute", 2}, {"dp2xpp2+recompute", 4},
               {"dp2xtp2+zero3", 4}, {"dp2xpp2+zero3", 4}, {"dp2tp2pp2+zero3", 8}};
  for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
    check_plan(ctx, g, in, want, plans[i].spec, plans[i].n);
  loom_test_free_tensors(in, loom_graph_num_inputs(g));
  loom_test_free_tensors(want, loom_graph_num_outputs(g));
  loom_graph_free(g);
  /* interleaved 1F1B: two or three chunks of layers per device, so 6 layers */
  loom_gpt_config c4 = config();
  c4.n_layer = 6;
  loom_gpt_optim o4 = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5};
  int64_t per_step = 0;
  g = NULL;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c4, B, T, &o4, &g, &per_step));
  if (g) {
    in = loom_test_gpt_inputs(ctx, g, 12);
    want = loom_test_run(ctx, g, &ref_opts, in);
    check_plan(ctx, g, in, want, "pp2+interleaved", 2);
    check_plan(ctx, g, in, want, "pp2+interleaved+mb4", 2);
    check_plan(ctx, g, in, want, "dp2xpp2+interleaved", 4);
    check_plan(ctx, g, in, want, "pp2+interleaved3", 2); /* one layer a chunk */
    check_plan(ctx, g, in, want, "pp2+interleaved+recompute", 2);
    loom_test_free_tensors(in, loom_graph_num_inputs(g));
    loom_test_free_tensors(want, loom_graph_num_outputs(g));
    loom_graph_free(g);
  }
  test_llama(ctx);
  test_recompute_memory(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_plan_gpt");
}

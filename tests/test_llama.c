/*
 * The Llama options of the GPT builder (model/gpt.h): RMSNorm, SwiGLU,
 * RoPE, grouped-query attention, no biases, an untied head.
 *
 *  - The training step's loss and gradients against a plain-C model in
 *    doubles written here from the definitions (not from the builder), its
 *    gradients by central finite differences: on the reference executor
 *    (attention a composite) and on the cpu backend (flash attention,
 *    generated code). The step runs AdamW with beta1 = 0 from zero moments,
 *    so its new first moments are the gradients.
 *  - Parameter counts: the list loom_gpt_params makes against
 *    loom_gpt_param_count, and the named full-size configurations against
 *    the published sizes (Llama 2 70B: 68,976,648,192; Llama 3 405B:
 *    405,853,388,800).
 *  - The composed estimate at full size (no weights): a one-device plan
 *    holds exactly the published parameters; the FLOPs are 6 x tokens x
 *    the matrix weights (SwiGLU's three, GQA's narrow K and V: counted
 *    here by hand) plus attention and the head; the planner places
 *    Llama 2 70B on 64 H100s and Llama 3 405B on 16,384.
 */
#include "common.h"

#include "model/gpt.h"
#include "parallel/estimate.h"
#include "parallel/search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 6 };
#define TOL 2e-3 /* of a gradient tensor's rms: f32 rounding is ~1e-5 here */

static loom_gpt_config config(void) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.vocab = 32;
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 4;
  c.n_kv_head = 2; /* two query heads share each K/V head */
  c.d_ff = 24;
  c.context = 8;
  c.dropout = 0.0;
  loom_gpt_config_set_arch(&c, LOOM_GPT_ARCH_LLAMA);
  return c;
}

/* ---- the reference model, in doubles ------------------------------------ */

typedef struct ref {
  const loom_gpt_config *c;
  const loom_gpt_param *ps;
  int32_t n;
  double **w; /* per parameter, row-major */
} ref;

static const double *param_named(const ref *r, const char *name) {
  for (int32_t i = 0; i < r->n; i++)
    if (!strcmp(r->ps[i].name, name)) return r->w[i];
  fprintf(stderr, "no parameter %s\n", name);
  exit(1);
}

static const double *layer_param(const ref *r, int32_t l, const char *suffix) {
  char nm[48];
  snprintf(nm, sizeof nm, "h%d.%s", (int)l, suffix);
  return param_named(r, nm);
}

/* y = rmsnorm(x) * g over d values (eps 1e-5). */
static void rmsnorm(const double *x, const double *g, int32_t d, double *y) {
  double ms = 0;
  for (int32_t i = 0; i < d; i++) ms += x[i] * x[i];
  double s = 1.0 / sqrt(ms / d + 1e-5);
  for (int32_t i = 0; i < d; i++) y[i] = x[i] * s * g[i];
}

/* y[n] = x[k] @ w[k, n] */
static void matvec(const double *x, const double *w, int32_t k, int32_t n, double *y) {
  for (int32_t j = 0; j < n; j++) y[j] = 0;
  for (int32_t i = 0; i < k; i++)
    for (int32_t j = 0; j < n; j++) y[j] += x[i] * w[(int64_t)i * n + j];
}

/* Rotates one head's vector at position t: pairs (i, i + dh/2). */
static void rotate(double *x, int32_t dh, int32_t t, double theta) {
  int32_t half = dh / 2;
  for (int32_t i = 0; i < half; i++) {
    double a = t * pow(theta, -2.0 * i / dh), c = cos(a), s = sin(a);
    double x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

/* The mean cross-entropy over the B x T positions. */
static double ref_loss(const ref *r, const int64_t *tok, const int64_t *tgt) {
  const loom_gpt_config *c = r->c;
  int32_t d = c->d_model, H = c->n_head, KV = loom_gpt_kv_heads(c), dh = d / H, rep = H / KV;
  int32_t F = c->d_ff, V = c->vocab, C = d + 2 * KV * dh;
  double theta = loom_gpt_rope_theta(c), total = 0;
  double *x = calloc((size_t)T * d, sizeof *x), *a = calloc((size_t)T * d, sizeof *a);
  double *qkv = calloc((size_t)T * C, sizeof *qkv), *att = calloc((size_t)T * d, sizeof *att);
  double *tmp = calloc((size_t)(F > V ? F : V) * 4 + d, sizeof *tmp), *p = calloc(T, sizeof *p);
  const double *wte = param_named(r, "wte");
  for (int32_t b = 0; b < B; b++) {
    for (int32_t t = 0; t < T; t++)
      memcpy(x + t * d, wte + tok[b * T + t] * d, (size_t)d * sizeof *x);
    for (int32_t l = 0; l < c->n_layer; l++) {
      for (int32_t t = 0; t < T; t++) {
        rmsnorm(x + t * d, layer_param(r, l, "ln1.g"), d, a + t * d);
        matvec(a + t * d, layer_param(r, l, "attn.qkv.w"), d, C, qkv + t * C);
        /* group j: its rep query heads, then k, then v, dh columns each */
        for (int32_t j = 0; j < KV; j++)
          for (int32_t i = 0; i < rep + 1; i++) rotate(qkv + t * C + (j * (rep + 2) + i) * dh, dh, t, theta);
      }
      for (int32_t h = 0; h < H; h++) {
        int32_t j = h / rep, qo = (j * (rep + 2) + h % rep) * dh;
        int32_t ko = (j * (rep + 2) + rep) * dh, vo = ko + dh;
        for (int32_t t = 0; t < T; t++) {
          double m = -INFINITY, sum = 0;
          for (int32_t u = 0; u <= t; u++) {
            double s = 0;
            for (int32_t e = 0; e < dh; e++) s += qkv[t * C + qo + e] * qkv[u * C + ko + e];
            p[u] = s / sqrt((double)dh);
            if (p[u] > m) m = p[u];
          }
          for (int32_t u = 0; u <= t; u++) sum += p[u] = exp(p[u] - m);
          for (int32_t e = 0; e < dh; e++) {
            double o = 0;
            for (int32_t u = 0; u <= t; u++) o += p[u] / sum * qkv[u * C + vo + e];
            att[t * d + h * dh + e] = o;
          }
        }
      }
      for (int32_t t = 0; t < T; t++) {
        matvec(att + t * d, layer_param(r, l, "attn.proj.w"), d, d, tmp);
        for (int32_t i = 0; i < d; i++) x[t * d + i] += tmp[i];
        rmsnorm(x + t * d, layer_param(r, l, "ln2.g"), d, a + t * d);
        /* mlp.fc.w [d, 2F]: gate column i at 2i, up column i at 2i + 1 */
        double *gu = tmp, *hid = tmp + 2 * F, *out = tmp + 3 * F;
        matvec(a + t * d, layer_param(r, l, "mlp.fc.w"), d, 2 * F, gu);
        for (int32_t i = 0; i < F; i++) hid[i] = gu[2 * i] / (1 + exp(-gu[2 * i])) * gu[2 * i + 1];
        matvec(hid, layer_param(r, l, "mlp.proj.w"), F, d, out);
        for (int32_t i = 0; i < d; i++) x[t * d + i] += out[i];
      }
    }
    /* [V, d]: logits = h head^T */
    const double *head = param_named(r, c->untied ? "head.w" : "wte");
    for (int32_t t = 0; t < T; t++) {
      rmsnorm(x + t * d, param_named(r, "lnf.g"), d, a + t * d);
      double m = -INFINITY, sum = 0;
      for (int32_t v = 0; v < V; v++) {
        double s = 0;
        for (int32_t i = 0; i < d; i++) s += a[t * d + i] * head[(int64_t)v * d + i];
        tmp[v] = s;
        if (s > m) m = s;
      }
      for (int32_t v = 0; v < V; v++) sum += exp(tmp[v] - m);
      total += m + log(sum) - tmp[tgt[b * T + t]];
    }
  }
  free(x), free(a), free(qkv), free(att), free(tmp), free(p);
  return total / (B * T);
}

/* ---- the graph's gradients ----------------------------------------------- */

static loom_graph *train_graph(loom_ctx *ctx, const loom_gpt_config *c,
                               const loom_session_options *so) {
  /* beta1 0, zero moments: the new first moment is the gradient */
  loom_gpt_optim o = {.beta1 = 0.0, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5,
                      .session = so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, c, B, T, &o, &g, &per_step));
  return g;
}

static loom_tensor **inputs(loom_ctx *ctx, const loom_graph *g, int32_t vocab) {
  loom_test_gpt_fill f = {.seed = 77, .vocab = vocab, .step = 1, .lr = 1e-3f, .lo = -0.5,
                          .hi = 0.5, .zero_moments = true, .gain_lo = 0.8, .gain_hi = 1.2};
  return loom_test_gpt_fill_inputs(ctx, g, &f);
}

/* Every gradient of g's step on in (run with so) against finite
 * differences of the reference; returns the worst error in units of
 * each tensor's gradient rms. */
static double check_gradients(loom_ctx *ctx, const char *what, const loom_gpt_config *c,
                              const loom_graph *g, const loom_session_options *so,
                              loom_tensor **in) {
  loom_gpt_param *ps = NULL;
  int32_t n = 0;
  CHECK_OK(ctx, loom_gpt_params(ctx, c, &ps, &n));
  loom_tensor **out = ps ? loom_test_run(ctx, g, so, in) : NULL;
  if (!out) {
    free(ps);
    return INFINITY;
  }
  ref r = {c, ps, n, calloc((size_t)n, sizeof(double *))};
  for (int32_t i = 0; i < n; i++) {
    const loom_tensor *t = in[LOOM_GPT_IN_PARAMS + i];
    const float *f = loom_tensor_data(t);
    r.w[i] = malloc((size_t)loom_tensor_numel(t) * sizeof(double));
    for (int64_t e = 0; e < loom_tensor_numel(t); e++) r.w[i][e] = f[e];
  }
  const int64_t *tok = loom_tensor_data(in[LOOM_GPT_IN_TOKENS]);
  const int64_t *tgt = loom_tensor_data(in[LOOM_GPT_IN_TARGETS]);
  double loss = ref_loss(&r, tok, tgt), got = *(const float *)loom_tensor_data(out[0]);
  printf("%s: loss %.7f, reference %.7f\n", what, got, loss);
  CHECK(fabs(got - loss) <= 1e-5 * fabs(loss));
  double worst = 0;
  for (int32_t i = 0; i < n; i++) {
    const float *gr = loom_tensor_data(out[1 + n + i]); /* new.adam.m.NAME */
    int64_t ne = loom_tensor_numel(in[LOOM_GPT_IN_PARAMS + i]);
    /* a spread of at most 64 elements a tensor keeps the test quick */
    int64_t step = (ne + 63) / 64, checked = 0;
    double *fd = calloc((size_t)ne, sizeof *fd), sq = 0, err = 0;
    for (int64_t e = 0; e < ne; e += step, checked++) {
      double keep = r.w[i][e], h = 1e-5;
      r.w[i][e] = keep + h;
      double up = ref_loss(&r, tok, tgt);
      r.w[i][e] = keep - h;
      fd[e] = (up - ref_loss(&r, tok, tgt)) / (2 * h);
      r.w[i][e] = keep;
      sq += fd[e] * fd[e];
    }
    double rms = sqrt(sq / (double)checked);
    for (int64_t e = 0; e < ne; e += step) err = fmax(err, fabs(gr[e] - fd[e]));
    err /= fmax(rms, 1e-12);
    if (!(err <= TOL)) fprintf(stderr, "%s: d loss / d %s off by %g of its rms %g\n", what, ps[i].name, err, rms);
    CHECK(err <= TOL);
    worst = fmax(worst, err);
    free(fd);
  }
  printf("%s: %d gradients within %.1e of their rms of central differences\n", what, (int)n, worst);
  for (int32_t i = 0; i < n; i++) free(r.w[i]);
  free(r.w);
  loom_test_free_tensors(out, loom_graph_num_outputs(g));
  free(ps);
  return worst;
}

static void test_numerics(loom_ctx *ctx) {
  loom_gpt_config c = config();
  static const loom_session_options ref_opts = LOOM_SESSION_OPTIONS(.backend = "ref");
  static const loom_session_options cpu_opts = LOOM_SESSION_OPTIONS(.backend = "cpu");
  loom_graph *g = train_graph(ctx, &c, NULL);
  loom_tensor **in = g ? inputs(ctx, g, c.vocab) : NULL;
  if (in) check_gradients(ctx, "ref, attention composite", &c, g, &ref_opts, in);
  loom_graph *gc = train_graph(ctx, &c, &cpu_opts); /* with the cpu's flash attention */
  if (in && gc) check_gradients(ctx, "cpu, flash attention", &c, gc, &cpu_opts, in);
  /* multi-head attention with RoPE (Llama 2 7B's form) and a tied head */
  loom_gpt_config mha = c;
  mha.n_kv_head = 0;
  mha.untied = false;
  mha.rope_theta = 100; /* turns faster over 6 positions */
  if (g) loom_test_free_tensors(in, loom_graph_num_inputs(g));
  loom_graph_free(gc);
  loom_graph_free(g);
  g = train_graph(ctx, &mha, NULL);
  in = g ? inputs(ctx, g, mha.vocab) : NULL;
  if (in) check_gradients(ctx, "ref, multi-head RoPE, tied head", &mha, g, &ref_opts, in);
  if (g) loom_test_free_tensors(in, loom_graph_num_inputs(g));
  loom_graph_free(g);
}

/* ---- parameter counts ---------------------------------------------------- */

static void test_counts(loom_ctx *ctx) {
  loom_gpt_config cs[3] = {config(), config(), config()};
  loom_gpt_config_default(&cs[1]); /* GPT-2's block */
  cs[2].no_bias = false;           /* a custom mix: biases with RMSNorm and SwiGLU */
  cs[2].untied = false;
  for (int32_t k = 0; k < 3; k++) {
    loom_gpt_param *ps = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_gpt_params(ctx, &cs[k], &ps, &n));
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += (double)ps[i].shape[0] * (ps[i].rank == 2 ? ps[i].shape[1] : 1);
    CHECK(sum == loom_gpt_param_count(&cs[k]));
    free(ps);
  }
  CHECK(loom_gpt_config_arch(&cs[0]) == LOOM_GPT_ARCH_LLAMA);
  CHECK(loom_gpt_config_arch(&cs[1]) == LOOM_GPT_ARCH_GPT);
  CHECK(loom_gpt_config_arch(&cs[2]) == LOOM_GPT_ARCH_CUSTOM);
  static const struct {
    const char *name;
    double params;
  } named[] = {{"llama2-70b", 68976648192.0}, {"llama3-405b", 405853388800.0},
               {"gpt3-175b", 174.6e9}};
  for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
    loom_gpt_config c;
    int32_t batch = 0;
    CHECK(loom_gpt_config_named(named[k].name, &c, &batch));
    CHECK_OK(ctx, loom_gpt_config_check(ctx, &c));
    double got = loom_gpt_param_count(&c);
    printf("%s: %.0f parameters (published %.4g), batch %d\n", named[k].name, got, named[k].params,
           (int)batch);
    CHECK(fabs(got - named[k].params) <= 0.002 * named[k].params);
  }
  loom_gpt_config c;
  CHECK(!loom_gpt_config_named("llama9-1t", &c, NULL));
  /* bad options are refused with a message */
  c = config();
  c.n_kv_head = 3;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_gpt_config_check(ctx, &c));
  c = config();
  c.d_model = 12, c.n_head = 4; /* head width 3: RoPE needs pairs */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_gpt_config_check(ctx, &c));
}

/* ---- estimates and plans at full size ------------------------------------ */

/* clusters/dgx-h100-ndr.txt */
static const char h100_text[] =
    "name h100\ndevice h100-sxm5-80gb\nflops.f32 67 TFLOP/s\nflops.tf32 494.7 TFLOP/s\n"
    "flops.bf16 989.4 TFLOP/s\nmemory.bandwidth 3350 GB/s\nmemory.capacity 80 GB\n"
    "node.devices 8\nintra.kind nvlink4\nintra.bandwidth 450 GB/s\nintra.latency 3 us\n"
    "inter.kind infiniband-ndr\ninter.bandwidth 400 Gb/s\ninter.latency 5 us\ninter.nics 8\n";

static void test_full_size(loom_ctx *ctx) {
  loom_cluster cl;
  CHECK_OK(ctx, loom_cluster_parse(ctx, h100_text, strlen(h100_text), &cl));
  loom_estimate_options eo = {.cluster = &cl, .precision = LOOM_PRECISION_bf16};
  loom_gpt_config m;
  int32_t batch = 0;
  CHECK(loom_gpt_config_named("llama2-70b", &m, &batch));
  /* one device, ZeRO off: the parameters are the model's, at 2 bytes */
  loom_mesh_plan one = {.dp = 1, .tp = 1, .pp = 1, .micro_batch = 1, .chunks = 1};
  loom_estimate e;
  CHECK_OK(ctx, loom_estimate_gpt(ctx, &m, 8, &one, &eo, &e));
  printf("llama2-70b on one device: %.6g parameter bytes (want %.6g)\n", e.memory.params,
         2 * 68976648192.0);
  CHECK(fabs(e.memory.params - 2 * 68976648192.0) < 1.0);
  /* per token and layer forward: q and o 2 h^2, k and v 2 h (8 x 128), the
   * MLP 3 h ff, as 2-FLOP multiply-adds */
  double h = 8192, kv = 1024, ff = 28672, s = 4096, L = 80, V = 32000, B = 8;
  double mat = 2 * h * h + 2 * h * kv + 3 * h * ff;
  double flops = 3 * L * (2 * B * s * mat + 4 * B * s * s * h) + 6 * B * s * h * V;
  printf("llama2-70b: %.6g FLOPs a step of 8 sequences (want %.6g)\n", e.model_flops, flops);
  CHECK(fabs(e.model_flops - flops) <= 1e-9 * flops);
  /* GQA's K/V heads must divide tp */
  loom_mesh_plan tp16 = {.dp = 1, .tp = 16, .pp = 1, .micro_batch = 1, .chunks = 1,
                         .tp_across_nodes = true};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_estimate_gpt(ctx, &m, 8, &tp16, &eo, &e));
  CHECK(strstr(loom_ctx_error(ctx), "key/value heads") != NULL);
  /* the planner: 70B on 64 devices and 405B on 16384, each fitting in 80 GB */
  static const struct {
    const char *name;
    int32_t devices;
  } runs[] = {{"llama2-70b", 64}, {"llama3-405b", 16384}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    CHECK(loom_gpt_config_named(runs[k].name, &m, &batch));
    loom_search_options so = {.cluster = &cl, .precision = LOOM_PRECISION_bf16, .top = 1};
    loom_search_result r = {0};
    CHECK_OK(ctx, loom_plan_search(ctx, &m, batch, runs[k].devices, &so, &r));
    if (r.n_best) {
      char words[128];
      loom_mesh_plan_describe(&r.best[0].plan, words, sizeof words);
      printf("%s on %d devices: %s, %.4g s a step, %.3g GB, %lld plans estimated in %.2f s\n",
             runs[k].name, (int)runs[k].devices, words, r.best[0].est.step_s,
             r.best[0].est.memory.total / 1e9, (long long)r.estimated, r.seconds);
      CHECK(r.best[0].est.memory.total <= 80e9 && r.best[0].est.step_s > 0);
      CHECK(r.best[0].plan.dp * r.best[0].plan.tp * r.best[0].plan.pp == runs[k].devices);
      CHECK(8 % r.best[0].plan.tp == 0); /* 8 K/V heads */
      CHECK(r.bound_violations == 0);
    }
    CHECK(r.n_best > 0);
    loom_search_result_free(&r);
  }
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_counts(ctx);
  test_full_size(ctx);
  test_numerics(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_llama");
}

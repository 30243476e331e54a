/* The attention pass (passes/attention.h) end to end: graphs with the
 * `attention` composite run on the cpu backend as flash_attention, under
 * every RNG placement, against the ref backend (which keeps the
 * decomposition: the reference), forward and gradients; every placement
 * gives the same results bit for bit (the same masks); unknown options are
 * errors; and the peak memory of a flash session at sequence 4096 stays
 * far below one [Sq, Sk] probability matrix. */
#include "attention_graph.h"
#include "common.h"

#include "io/json.h"
#include "ir/graph.h"
#include "passes/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static loom_ctx *ctx;

static const char *const placements[] = {"fused", "sequential", "overlap", "auto"};

/* The shared graph (attention_graph.h), q an input. */
static loom_graph *build(int64_t bh0, int64_t bh1, int64_t sq, int64_t sk, int64_t d, bool causal,
                         double p, const char *placement) {
  loom_test_attention a = {bh0, bh1, sq, sk, d, causal, p, .seed = 1234, .offset = 99};
  loom_rng_model model;
  loom_rng_model_h100(&model); /* auto: any model will do for equality */
  return loom_test_attention_graph(ctx, &a, placement, &model);
}

static bool run(const loom_graph *g, const loom_session_options *o, loom_tensor **in,
                loom_tensor **out) {
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, o, &s));
  if (!s) return false;
  for (int i = 0; i < 4; i++) out[i] = NULL;
  loom_status st = loom_session_run(s, 5, (const loom_tensor *const *)in, 4, out);
  CHECK_OK(ctx, st);
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

static void free4(loom_tensor **t) {
  for (int i = 0; i < 4; i++) {
    loom_tensor_free(t[i]);
    t[i] = NULL;
  }
}

static void test_case(int64_t bh0, int64_t bh1, int64_t sq, int64_t sk, int64_t d, bool causal,
                      double p) {
  loom_graph *g = build(bh0, bh1, sq, sk, d, causal, p, NULL);
  if (!g) return;
  loom_test_rng rng = {(uint64_t)(sq * 131 + sk * 7 + causal)};
  loom_tensor *in[5] = {0};
  int64_t qs[4] = {bh0, bh1, sq, d}, ks[4] = {bh0, bh1, sk, d};
  const int64_t *shapes[5] = {qs, ks, ks, NULL, qs};
  for (int i = 0; i < 5; i++) {
    CHECK_OK(ctx, loom_tensor_new(ctx, i == 3 ? LOOM_DTYPE_I64 : LOOM_DTYPE_F32, i == 3 ? 0 : 4,
                                  shapes[i], &in[i]));
    if (!in[i]) return;
    if (i == 3) {
      *(int64_t *)loom_tensor_data(in[i]) = 1000003;
      continue;
    }
    float *x = loom_tensor_data(in[i]);
    for (int64_t e = 0; e < loom_tensor_numel(in[i]); e++) x[e] = (float)loom_test_uniform(&rng, -1, 1);
  }
  loom_tensor *ref[4], *first[4] = {0};
  if (run(g, &LOOM_SESSION_OPTIONS(.backend = "ref"), in, ref)) {
    for (int pl = 0; pl < 4; pl++) {
      loom_tensor *got[4];
      loom_graph *gf = build(bh0, bh1, sq, sk, d, causal, p, placements[pl]);
      bool ok = gf && run(gf, &LOOM_SESSION_OPTIONS(.backend = "cpu"), in, got);
      loom_graph_free(gf);
      if (!ok) continue;
      double worst = 0;
      for (int t = 0; t < 4; t++) {
        const float *a = loom_tensor_data(got[t]), *b = loom_tensor_data(ref[t]);
        for (int64_t e = 0; e < loom_tensor_numel(ref[t]); e++) {
          double err = fabs((double)a[e] - (double)b[e]) / (1.0 + fabs((double)b[e]));
          if (err > worst || isnan(err)) worst = err;
        }
      }
      /* f32 tiles with an online softmax against the decomposition in double */
      CHECK(worst <= 1e-4);
      if (!(worst <= 1e-4))
        fprintf(stderr, "  [%lld,%lld] sq %lld sk %lld d %lld causal %d p %g, %s: error %g\n",
                (long long)bh0, (long long)bh1, (long long)sq, (long long)sk, (long long)d,
                causal, p, placements[pl], worst);
      if (!first[0]) {
        memcpy(first, got, sizeof got);
        continue;
      }
      bool same = true;
      for (int t = 0; t < 4; t++)
        same = same && memcmp(loom_tensor_data(got[t]), loom_tensor_data(first[t]),
                              sizeof(float) * (size_t)loom_tensor_numel(got[t])) == 0;
      CHECK(same); /* the same masks, so the same bits */
      free4(got);
    }
    free4(ref);
  }
  free4(first);
  for (int i = 0; i < 5; i++) loom_tensor_free(in[i]);
  loom_graph_free(g);
}

static void test_options(void) {
  loom_graph *g = build(1, 2, 8, 8, 4, true, 0.1, NULL);
  if (!g) return;
  loom_session *s = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.rng = (loom_rng_placement)7), &s));
  CHECK(strstr(loom_ctx_error(ctx), "rng placement 7") != NULL);
  CHECK(strstr(loom_ctx_error(ctx), "auto, fused, overlap, sequential") != NULL);
  CHECK(s == NULL);
  CHECK_STATUS(
      ctx, LOOM_STATUS_INVALID_ARGUMENT,
      loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.attention = LOOM_ATTENTION_COUNT), &s));
  CHECK(strstr(loom_ctx_error(ctx), "flash, decomposed") != NULL);
  /* names, from the one table */
  loom_rng_placement pl = LOOM_RNG_AUTO;
  CHECK(loom_rng_placement_from_name("sometimes", &pl) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_rng_placement_from_name("overlap", &pl) == LOOM_STATUS_OK && pl == LOOM_RNG_OVERLAP);
  loom_attention_mode am = LOOM_ATTENTION_FLASH;
  CHECK(loom_attention_mode_from_name("magic", &am) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_attention_mode_from_name("decomposed", &am) == LOOM_STATUS_OK &&
        am == LOOM_ATTENTION_DECOMPOSED);
  CHECK(strcmp(loom_attention_mode_name(LOOM_ATTENTION_FLASH), "flash") == 0);
  CHECK(loom_attention_mode_name(LOOM_ATTENTION_COUNT) == NULL);
  loom_graph_free(g);
}

/* An inference graph: the session's attention pass makes flash attention
 * of it (one primitive where the decomposition has a dozen). */
static void test_session_pass(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[2, 4, 32, 16]\n"
                                 "input %k : f32[2, 4, 32, 16]\n"
                                 "input %v : f32[2, 4, 32, 16]\n"
                                 "%y : f32[2, 4, 32, 16] = attention(%q, %k, %v, causal=true)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  loom_session_stats st[2];
  static const loom_attention_mode modes[2] = {LOOM_ATTENTION_FLASH, LOOM_ATTENTION_DECOMPOSED};
  for (int i = 0; i < 2; i++) {
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.attention = modes[i]), &s));
    memset(&st[i], 0, sizeof st[i]);
    if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st[i]));
    loom_session_free(s);
  }
  CHECK(st[0].n_primitive_ops < st[1].n_primitive_ops);
  loom_graph_free(g);
}

/* Peak memory at sequence 4096 (one head, d 64): the flash session's arena
 * holds q, k, v, o and their gradients, O(S D); one probability matrix
 * alone would be S^2 floats (64 MiB). Printed for the closing report. */
static void test_peak_4096(void) {
  const int64_t square = 4096LL * 4096 * 4;
  for (int pl = 0; pl < 3; pl++) {
    loom_graph *g = build(1, 1, 4096, 4096, 64, true, 0.1, placements[pl]);
    if (!g) return;
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
    int64_t peak = loom_session_peak_bytes(s);
    printf("peak at sequence 4096 (rng %s): %.2f MiB; one [S, S] f32 matrix: %.0f MiB\n",
           placements[pl], (double)peak / (1 << 20), (double)square / (1 << 20));
    /* fused: O(S D); sequential and overlap add the S^2 / 8-byte mask */
    CHECK(peak < (pl == 0 ? square / 8 : square / 4));
    loom_session_free(s);
    loom_graph_free(g);
  }
}

/* Attention written as primitives is recognised too: fewer primitives
 * than its decomposition, and the reference's results. */
static void test_primitive_pattern(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[2, 3, 40, 16]\n"
                                 "input %k : f32[2, 3, 24, 16]\n"
                                 "input %v : f32[2, 3, 24, 8]\n"
                                 "input %base : i64[]\n"
                                 "%s : f32[2, 3, 40, 24] = matmul(%q, %k, trans_b=true)\n"
                                 "%c : f32[] = constant(value=0.25)\n"
                                 "%t : f32[2, 3, 40, 24] = mul(%s, %c)\n"
                                 "%p : f32[2, 3, 40, 24] = softmax(%t, axis=-1)\n"
                                 "%d : f32[2, 3, 40, 24] = dropout(%p, %base, p=0.2, seed=3, "
                                 "offset=7)\n"
                                 "%y : f32[2, 3, 40, 8] = matmul(%d, %v)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  loom_test_rng rng = {77};
  loom_tensor *in[4] = {0};
  for (int32_t i = 0; i < 4; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
    if (!in[i]) return;
    if (t->dtype == LOOM_DTYPE_I64) {
      *(int64_t *)loom_tensor_data(in[i]) = 12345;
      continue;
    }
    float *x = loom_tensor_data(in[i]);
    for (int64_t e = 0; e < loom_tensor_numel(in[i]); e++) x[e] = (float)loom_test_uniform(&rng, -1, 1);
  }
  const loom_session_options opts[3] = {
      LOOM_SESSION_OPTIONS(.backend = "ref"), LOOM_SESSION_OPTIONS(.backend = "cpu"),
      LOOM_SESSION_OPTIONS(.backend = "cpu", .attention = LOOM_ATTENTION_DECOMPOSED)};
  loom_tensor *out[3] = {0};
  loom_session_stats st[3];
  for (int m = 0; m < 3; m++) {
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &opts[m], &s));
    memset(&st[m], 0, sizeof st[m]);
    if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st[m]));
    if (s) CHECK_OK(ctx, loom_session_run(s, 4, (const loom_tensor *const *)in, 1, &out[m]));
    loom_session_free(s);
  }
  CHECK(st[1].n_primitive_ops < st[2].n_primitive_ops);
  for (int m = 1; m < 3 && out[0]; m++) {
    double worst = 0;
    const float *a = out[m] ? loom_tensor_data(out[m]) : NULL, *b = loom_tensor_data(out[0]);
    for (int64_t e = 0; a && e < loom_tensor_numel(out[0]); e++)
      worst = fmax(worst, fabs((double)a[e] - b[e]) / (1.0 + fabs((double)b[e])));
    CHECK(a && worst <= 1e-4);
  }
  for (int m = 0; m < 3; m++) loom_tensor_free(out[m]);
  for (int32_t i = 0; i < 4; i++) loom_tensor_free(in[i]);
  loom_graph_free(g);
}

/* The interval [ts, ts + dur] (microseconds) of the first complete event
 * of category cat (and name, if not NULL) in a Chrome trace. */
static bool trace_interval(const loom_json *events, const char *cat, const char *name,
                           double *t0, double *t1) {
  for (int32_t i = 0; events && i < events->n; i++) {
    const loom_json *e = &events->items[i], *c = loom_json_get(e, "cat"),
                    *n = loom_json_get(e, "name"), *ts = loom_json_get(e, "ts"),
                    *dur = loom_json_get(e, "dur");
    if (!c || c->kind != LOOM_JSON_STRING || strcmp(c->str, cat) != 0 || !ts || !dur) continue;
    if (name && (!n || n->kind != LOOM_JSON_STRING || strcmp(n->str, name) != 0)) continue;
    *t0 = ts->num;
    *t1 = ts->num + dur->num;
    return true;
  }
  return false;
}

/* One traced run of s; the mask's and the GEMM's intervals. False if the
 * trace lacks either. */
static bool traced_run(loom_session *s, loom_tensor **in, int32_t n_in, loom_tensor **out,
                       const char *path, double mask[2], double gemm[2]) {
  CHECK_OK(ctx, loom_ctx_trace_begin(ctx));
  CHECK_OK(ctx, loom_session_run(s, n_in, (const loom_tensor *const *)in, 2, out));
  CHECK_OK(ctx, loom_ctx_trace_end(ctx, path));
  FILE *f = fopen(path, "rb");
  static char buf[1 << 16];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
  CHECK(strstr(buf, "\"traceEvents\"") && strstr(buf, "\"rng worker 0\""));
  loom_json *j = NULL;
  CHECK_OK(ctx, loom_json_parse(ctx, buf, n, &j));
  const loom_json *ev = loom_json_get(j, "traceEvents");
  bool found = trace_interval(ev, "rng", "dropout_mask", &mask[0], &mask[1]) &&
               trace_interval(ev, "gemm", NULL, &gemm[0], &gemm[1]);
  loom_json_free(j);
  free4(out);
  return found;
}

/* With the overlap placement the mask runs on the worker lane while the
 * GEMM step before attention runs on the other threads: the timeline shows
 * both, and their intervals intersect. The GEMM ([768, 768]^2, ~0.9
 * GFLOP) is long against the worker's wake-up even on a loaded machine;
 * up to 20 runs are tried and any overlapping one counts. The mask
 * ([4, 512, 512] bits, ~0.5 ms) outlasts the gap between its submission
 * and the GEMM's start, so an idle worker cannot finish it before then.
 * A schedule that
 * ran the mask before or after the GEMM (serially) never overlaps, so
 * with at least 2 threads and 2 cores overlap is required. */
static void test_overlap_trace(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[1, 4, 512, 16]\n"
                                 "input %k : f32[1, 4, 512, 16]\n"
                                 "input %v : f32[1, 4, 512, 16]\n"
                                 "input %base : i64[]\n"
                                 "input %a : f32[768, 768]\n"
                                 "%c : f32[768, 768] = matmul(%a, %a)\n"
                                 "%y : f32[1, 4, 512, 16] = attention(%q, %k, %v, %base, "
                                 "causal=true, p=0.1, seed=5)\n"
                                 "output y = %y\n"
                                 "output c = %c\n",
                                 &g));
  if (!g) return;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.rng = LOOM_RNG_OVERLAP), &s));
  loom_tensor *in[5] = {0}, *out[4] = {0};
  for (int32_t i = 0; i < 5; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
  }
  char path[] = "/tmp/loom_trace_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_ctx_trace_end(ctx, path)); /* not begun */
  CHECK_OK(ctx, loom_ctx_set_threads(ctx, 2));
  if (s) CHECK_OK(ctx, loom_session_run(s, 5, (const loom_tensor *const *)in, 2, out)); /* warm */
  free4(out);
  bool cores2 = sysconf(_SC_NPROCESSORS_ONLN) >= 2, overlapped = false;
  double mask[2] = {0, 0}, gemm[2] = {0, 0};
  int tries = 0;
  while (s && !overlapped && tries < 20) {
    tries++;
    bool found = traced_run(s, in, 5, out, path, mask, gemm);
    CHECK(found);
    if (!found) break;
    overlapped = mask[0] < gemm[1] && gemm[0] < mask[1];
  }
  printf("overlap: mask [%.0f, %.0f] us, gemm [%.0f, %.0f] us: %s after %d run(s)%s\n", mask[0],
         mask[1], gemm[0], gemm[1], overlapped ? "overlapping" : "apart", tries,
         cores2 ? "" : " (one core: not required)");
  if (cores2) CHECK(overlapped);
  loom_ctx_set_threads(ctx, 0);
  remove(path);
  for (int32_t i = 0; i < 5; i++) loom_tensor_free(in[i]);
  loom_session_free(s);
  loom_graph_free(g);
}

/* The choice between flash and decomposed attention (attention: auto):
 * by the model's prediction, never with dropout, never past the cache. */
static int32_t replaced_with(const loom_graph *g, const loom_attention_costs *c) {
  loom_graph *f = NULL;
  int32_t n = -1;
  loom_rng_model model;
  loom_rng_model_h100(&model);
  CHECK_OK(ctx, loom_graph_fuse_attention_costed(g, LOOM_RNG_FUSED, &model, c, &f, &n));
  loom_graph_free(f);
  return n;
}

static void test_choice(void) {
  loom_attention_costs c = {.launch_s = 1e-6, .cache_bytes = 32 << 20};
  c.rates = (loom_rng_model){.cores = 2, .gemm_flops = 2e11, .attn_fwd_flops = 5e10,
                             .attn_bwd_flops = 4e10, .bandwidth = 1e10};
  /* BERT-base's attention: 96 heads of 128 x 128, Dh 64 */
  loom_rng_attn a = {.bh = 96, .sq = 128, .sk = 128, .d = 64, .dv = 64};
  double flash = 0, dec = 0;
  loom_attention_predict(&c, &a, &flash, &dec);
  /* flash: 4 n d / rate; decomposed: 4 n d / gemm rate + 3 passes of n
   * floats + 3 launches */
  double n = 96.0 * 128 * 128;
  CHECK(fabs(flash - 4 * n * 64 / 5e10) < 1e-9);
  CHECK(fabs(dec - (4 * n * 64 / 2e11 + 3 * 4 * n / 1e10 + 3e-6)) < 1e-9);
  CHECK(dec < flash);
  /* the softmax's own work per score, spread over the cores: forward
   * only, then with its gradient in the backward */
  loom_attention_costs cs = c;
  cs.softmax_s = 6e-9;
  cs.softmax_grad_s = 1e-9;
  double flash2 = 0, dec2 = 0;
  loom_attention_predict(&cs, &a, &flash2, &dec2);
  CHECK(flash2 == flash && fabs(dec2 - (dec + n * 6e-9 / 2)) < 1e-9);
  CHECK(dec2 > flash); /* enough to turn the choice */
  loom_rng_attn ab = a;
  ab.backward = true;
  double fb = 0, db = 0, fb2 = 0, db2 = 0;
  loom_attention_predict(&c, &ab, &fb, &db);
  loom_attention_predict(&cs, &ab, &fb2, &db2);
  CHECK(fb2 == fb && fabs(db2 - (db + n * 7e-9 / 2)) < 1e-9);
  a.sq = a.sk = 8192; /* one head's probabilities (256 MiB) pass the cache */
  loom_attention_predict(&c, &a, &flash, &dec);
  CHECK(isinf(dec));
  /* graphs: short and no dropout -> decomposed (nothing replaced); with
   * dropout, or a slow GEMM, or no costs -> flash */
  loom_graph *g = build(2, 3, 33, 33, 16, true, 0.0, NULL);
  loom_graph *gd = build(2, 3, 33, 33, 16, true, 0.1, NULL);
  c.rates.bandwidth = 1e12; /* tiny tensors: the cache's rate */
  if (g && gd) {
    CHECK(replaced_with(g, &c) == 0);
    CHECK(replaced_with(gd, &c) == 1);
    CHECK(replaced_with(g, NULL) == 1);
    loom_attention_costs slow = c;
    slow.rates.gemm_flops = 1e9;
    CHECK(replaced_with(g, &slow) == 1);
  }
  loom_graph_free(g);
  loom_graph_free(gd);
  loom_attention_mode m = LOOM_ATTENTION_FLASH;
  CHECK(loom_attention_mode_from_name("auto", &m) == LOOM_STATUS_OK && m == LOOM_ATTENTION_AUTO);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  test_case(2, 3, 33, 33, 16, true, 0.1);
  test_case(1, 2, 17, 40, 8, false, 0.3);
  test_case(2, 2, 64, 64, 32, true, 0.0);
  test_case(1, 1, 130, 70, 24, false, 0.1);
  test_options();
  test_session_pass();
  test_peak_4096();
  test_overlap_trace();
  test_primitive_pattern();
  test_choice();
  loom_ctx_free(ctx);
  return loom_test_finish("test_attention");
}

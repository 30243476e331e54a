/* The backend interface (runtime/backend.h): the registry, the one node
 * executor and its reference fallback, supports_op deciding at prepare
 * which nodes a backend runs, the graph rewrite hook and the
 * prepared-description hook (loom_session_describe). */
#include "common.h"

#include "ir/graph.h"
#include "ops/op.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static loom_graph *parse(const char *text) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  return g;
}

static int32_t count_op(const loom_graph *g, loom_op op) {
  int32_t n = 0;
  for (int32_t i = 0; g && i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

static void test_registry(void) {
  CHECK(strcmp(loom_backend_names(), "ref, cpu, opencl, cuda") == 0);
  CHECK(loom_backend_name_known("ref") && loom_backend_name_known("cpu"));
  CHECK(!loom_backend_name_known("gpu") && !loom_backend_name_known(NULL) &&
        !loom_backend_name_known(""));
  loom_backend *b = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_backend_new(ctx, "gpu", &b));
  CHECK(strstr(loom_ctx_error(ctx), "known: ref, cpu, opencl, cuda") != NULL);
  CHECK_OK(ctx, loom_backend_new(ctx, "cpu", &b));
  CHECK(b && strcmp(b->iface->name, "cpu") == 0 && b->iface->rewrite && b->iface->describe);
  loom_backend_free(b);
  CHECK_OK(ctx, loom_backend_new(ctx, "ref", &b));
  CHECK(b && !b->iface->rewrite && !b->iface->describe && !b->iface->rng_model);
  loom_backend_free(b);
}

/* ---- the one node executor ---------------------------------------------- */

typedef struct probe {
  int calls;
  const void *in0, *out0;
  int64_t n_out;
  bool fail;
} probe;

/* A backend kernel that records what the executor handed it. */
static loom_status probe_kernel(const void *self, const loom_node *n, const loom_view *in,
                                const loom_view *out) {
  probe *p = (probe *)self;
  p->calls++;
  p->in0 = in[0].data;
  p->out0 = out[0].data;
  p->n_out = loom_view_numel(&out[0]);
  (void)n;
  if (p->fail) return loom_error(ctx, LOOM_STATUS_INTERNAL, "probe refused");
  return LOOM_STATUS_OK;
}

static void test_exec_node(void) {
  loom_graph *g = parse("input %x : f32[3]\n"
                        "%y : f32[3] = neg(%x)\n"
                        "%z : f32[3] = exp(%y)\n"
                        "output z = %z\n");
  if (!g) return;
  float x[3] = {1, -2, 0.5f}, y[3] = {0}, z[3] = {0};
  loom_view v[3];
  void *data[3] = {x, y, z};
  for (int32_t i = 0; i < 3; i++) v[i] = loom_view_of(&g->values[i].type, data[i]);
  /* a kernel gets the node's views, gathered from the values */
  probe p = {0};
  CHECK_OK(ctx, loom_exec_node(ctx, g, &g->nodes[0], v, probe_kernel, &p));
  CHECK(p.calls == 1 && p.in0 == x && p.out0 == y && p.n_out == 3);
  CHECK(y[0] == 0.0f); /* the probe computed nothing */
  /* no kernel: the reference kernel computes the node */
  CHECK_OK(ctx, loom_exec_node(ctx, g, &g->nodes[0], v, NULL, NULL));
  CHECK(y[0] == -1.0f && y[1] == 2.0f && y[2] == -0.5f);
  CHECK_OK(ctx, loom_exec_node_ref(ctx, g, &g->nodes[1], v));
  CHECK(fabs(z[1] - exp(2.0)) < 1e-5);
  /* a failing kernel's message names the op and the node */
  p.fail = true;
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL,
               loom_exec_node(ctx, g, &g->nodes[1], v, probe_kernel, &p));
  CHECK(strcmp(loom_ctx_error(ctx), "exp (node 1): probe refused") == 0);
  loom_graph_free(g);
}

/* ---- supports_op decides, at prepare, what falls back ------------------- */

/* f64 arithmetic has no cpu kernel: those nodes run their reference
 * kernels, counted as fallbacks, with the right values; f32 ones do not. */
static void test_fallback(void) {
  loom_graph *g = parse("input %a : f64[4]\n"
                        "input %b : f64[4]\n"
                        "input %c : f32[4]\n"
                        "%s : f64[4] = add(%a, %b)\n"
                        "%m : f64[4] = mul(%s, %a)\n"
                        "%n : f32[4] = neg(%c)\n"
                        "output m = %m\n"
                        "output n = %n\n");
  if (!g) return;
  loom_backend *cpu = NULL;
  CHECK_OK(ctx, loom_backend_new(ctx, "cpu", &cpu));
  int32_t unsupported = 0;
  for (int32_t i = 0; cpu && i < g->n_nodes; i++)
    unsupported += !cpu->iface->supports_op(cpu->context, g, &g->nodes[i]);
  CHECK(unsupported == 2);
  loom_backend_free(cpu);

  double a[4] = {1, 2, 3, 4}, b[4] = {0.5, -1, 2, 0};
  float c[4] = {1, -2, 3, -4};
  loom_tensor *in[3] = {NULL}, *out[2] = {NULL};
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F64, 1, (int64_t[]){4}, a, &in[0]));
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F64, 1, (int64_t[]){4}, b, &in[1]));
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 1, (int64_t[]){4}, c, &in[2]));
  static const loom_fusion_mode fusion[] = {LOOM_FUSION_EAGER, LOOM_FUSION_STITCH};
  for (int f = 0; f < 2; f++) {
    loom_session *s = NULL;
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = fusion[f]);
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    if (!s) continue;
    loom_session_stats st;
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    if (f == 0) CHECK(st.n_fallback == 2);
    /* fused: whatever fusion leaves to run alone is f64 and falls back */
    if (f == 1) CHECK(st.n_fallback == st.n_eager + st.n_gemm && st.n_fallback <= 2);
    out[0] = out[1] = NULL;
    CHECK_OK(ctx, loom_session_run(s, 3, (const loom_tensor *const *)in, 2, out));
    if (out[0] && out[1]) {
      const double *m = loom_tensor_data(out[0]);
      const float *n = loom_tensor_data(out[1]);
      for (int i = 0; i < 4; i++) CHECK(m[i] == (a[i] + b[i]) * a[i] && n[i] == -c[i]);
    }
    loom_tensor_free(out[0]);
    loom_tensor_free(out[1]);
    loom_session_free(s);
  }
  /* ref runs everything on its own (reference) kernels: no fallback */
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), &s));
  loom_session_stats st;
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st));
  if (s) CHECK(st.n_fallback == 0 && st.n_eager == 3);
  loom_session_free(s);
  for (int i = 0; i < 3; i++) loom_tensor_free(in[i]);
  loom_graph_free(g);
}

/* ---- the graph rewrite hook --------------------------------------------- */

static const char attn_graph[] =
    "input %q : f32[1, 2, 16, 8]\n"
    "input %k : f32[1, 2, 16, 8]\n"
    "input %v : f32[1, 2, 16, 8]\n"
    "%y : f32[1, 2, 16, 8] = attention(%q, %k, %v, causal=true)\n"
    "output y = %y\n";

static void test_rewrite(void) {
  loom_graph *g = parse(attn_graph);
  if (!g) return;
  /* the default backend (cpu) makes flash attention of it */
  loom_graph *r = NULL;
  int32_t n = -1;
  CHECK_OK(ctx, loom_backend_rewrite(ctx, NULL, g, &r, &n));
  CHECK(r && n == 1 && count_op(r, LOOM_OP_FLASH_ATTENTION) == 1 &&
        count_op(r, LOOM_OP_ATTENTION) == 0);
  loom_graph_free(r);
  /* asked for decomposed attention, or on ref: nothing to rewrite */
  r = NULL;
  CHECK_OK(ctx, loom_backend_rewrite(ctx, &LOOM_SESSION_OPTIONS(.attention = LOOM_ATTENTION_DECOMPOSED), g,
                                     &r, &n));
  CHECK(r == NULL && n == 0);
  CHECK_OK(ctx, loom_backend_rewrite(ctx, &LOOM_SESSION_OPTIONS(.backend = "ref"), g, &r, &n));
  CHECK(r == NULL && n == 0);
  /* the options are checked whether or not the backend rewrites */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_backend_rewrite(ctx, &LOOM_SESSION_OPTIONS(.backend = "ref", .rng = LOOM_RNG_COUNT),
                                    g, &r, &n));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_backend_rewrite(ctx, &LOOM_SESSION_OPTIONS(.backend = "gpu"), g, &r, &n));
  /* a session runs the same hook before decomposition: flash on cpu
   * (a primitive or two), its dozen-odd primitives on ref */
  int32_t prims[2] = {0, 0};
  static const char *const backends[2] = {"cpu", "ref"};
  for (int b = 0; b < 2; b++) {
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = backends[b]), &s));
    loom_session_stats st;
    if (s && !loom_session_get_stats(s, &st)) prims[b] = st.n_primitive_ops;
    loom_session_free(s);
  }
  CHECK(prims[0] > 0 && prims[0] <= 2 && prims[1] > 5);
  /* the RNG model comes from the backend that has one */
  loom_rng_model m;
  memset(&m, 0, sizeof m);
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               loom_backend_rng_model(ctx, &LOOM_SESSION_OPTIONS(.backend = "ref"), 1, &m));
  CHECK_OK(ctx, loom_backend_rng_model(ctx, NULL, 1, &m));
  CHECK(m.rng_words_core > 0 && m.gemm_flops > 0);
  loom_graph_free(g);
}

/* ---- what a session prepared, as text ----------------------------------- */

static void test_describe(void) {
  loom_graph *g = parse("input %x : f32[4, 8]\n"
                        "input %w : f32[8, 8]\n"
                        "%h : f32[4, 8] = matmul(%x, %w)\n"
                        "%a : f32[4, 8] = tanh(%h)\n"
                        "%b : f32[4, 8] = exp(%a)\n"
                        "output b = %b\n");
  if (!g) return;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_STITCH), &s));
  if (s) {
    char *t[LOOM_ARTIFACT_COUNT] = {NULL};
    for (int a = 0; a < LOOM_ARTIFACT_COUNT; a++)
      CHECK_OK(ctx, loom_session_describe(s, (loom_session_artifact)a, &t[a]));
    loom_session_stats st;
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(t[LOOM_ARTIFACT_GRAPH] && strstr(t[LOOM_ARTIFACT_GRAPH], "matmul(") &&
          strstr(t[LOOM_ARTIFACT_GRAPH], "output b"));
    CHECK(t[LOOM_ARTIFACT_PROGRAM] && strncmp(t[LOOM_ARTIFACT_PROGRAM], "# fusion stitch", 15) == 0);
    /* one kernel IR listing per generated kernel, one C function each */
    int kernels = 0;
    for (const char *p = t[LOOM_ARTIFACT_KERNELS]; p && (p = strstr(p, "kernel ")); p++) kernels++;
    CHECK(st.n_kernels >= 1 && kernels >= st.n_kernels);
    CHECK(t[LOOM_ARTIFACT_SOURCE] && strstr(t[LOOM_ARTIFACT_SOURCE], "#include"));
    for (int a = 0; a < LOOM_ARTIFACT_COUNT; a++) loom_free(t[a]);
    char *x = NULL;
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 loom_session_describe(s, LOOM_ARTIFACT_COUNT, &x));
    CHECK(x == NULL);
  }
  loom_session_free(s);
  /* no program on ref or in eager mode: the graph only */
  const loom_session_options none[2] = {LOOM_SESSION_OPTIONS(.backend = "ref"),
                                        LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_EAGER)};
  for (int i = 0; i < 2; i++) {
    s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, &none[i], &s));
    char *x = NULL;
    if (s) {
      CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
                   loom_session_describe(s, LOOM_ARTIFACT_PROGRAM, &x));
      CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &x));
      CHECK(x == NULL);
      CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_GRAPH, &x));
      CHECK(x && strstr(x, "tanh("));
      loom_free(x);
    }
    loom_session_free(s);
  }
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  test_registry();
  test_exec_node();
  test_fallback();
  test_rewrite();
  test_describe();
  loom_ctx_free(ctx);
  return loom_test_finish("test_backend");
}

/* The view fold (passes/attention.h, loom_graph_fold_attention_views) on
 * the GPT training step, GPT-2's heads (q, k, v sliced from the fused QKV
 * projection, o transposed back) and grouped heads with rotary positions
 * (k and v shared by broadcast, q and k made by RoPE):
 *  - which operands it folds (the step's decomposed graph, as a session
 *    sees it): GPT-2's q, k, v, o in the forward and q, k, v, o, d_o in
 *    the backward, and dq, dk, dv written into the QKV projection's
 *    gradient (their zero pads, adds and transpose folded); grouped
 *    heads' k, v (a stride-0 head dim), o and d_o;
 *  - the cpu session with the fold gives bitwise the outputs of the one
 *    without (LOOM_ATTENTION_VIEWS=0: the layout ops run as copies), in
 *    stitch and eager (node by node) modes;
 *  - the ref backend on the folded graph gives bitwise its outputs on the
 *    unfolded one (the op's reference reads the same operands), and the
 *    cpu session is within tolerance of it;
 *  - a malformed view is refused by the op's shape inference. */
#include "common.h"

#include "ir/build.h"
#include "model/gpt.h"
#include "ops/attention_views.h"
#include "ops/op.h"
#include "passes/attention.h"
#include "passes/decompose.h"
#include "passes/simplify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
enum { B = 2, T = 8 };

static loom_gpt_config config(bool grouped) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  c.vocab = 32;
  c.n_layer = 2;
  c.d_model = 24;
  c.n_head = 4;
  c.d_ff = 32;
  c.context = T;
  c.dropout = grouped ? 0.0 : 0.1; /* GPT-2: attention dropout in the kernels too */
  if (grouped) {
    loom_gpt_config_set_arch(&c, LOOM_GPT_ARCH_LLAMA);
    c.n_kv_head = 2;
  }
  return c;
}

static loom_graph *train_graph(const loom_gpt_config *c) {
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = "cpu", .rng = LOOM_RNG_FUSED,
                                                 .attention = LOOM_ATTENTION_FLASH);
  loom_gpt_optim o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .seed = 5,
                      .session = &so};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, c, B, T, &o, &g, &per_step));
  return g;
}

static loom_tensor **inputs(const loom_graph *g, int32_t vocab) {
  loom_test_gpt_fill f = {.seed = 77, .vocab = vocab, .step = 1, .lr = 1e-3f, .lo = -0.5,
                          .hi = 0.5, .v_lo = 0.0, .v_hi = 1e-2};
  return loom_test_gpt_fill_inputs(ctx, g, &f);
}

/* Runs g on backend (fusion mode for cpu); the outputs, NULL on failure. */
static loom_tensor **run(const loom_graph *g, loom_tensor **in, const char *backend,
                         loom_fusion_mode fm) {
  int32_t n_out = loom_graph_num_outputs(g);
  loom_tensor **out = calloc((size_t)n_out + 1, sizeof *out);
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fm), &s));
  if (!s || !out) {
    free(out);
    return NULL;
  }
  loom_status st = loom_session_run(s, loom_graph_num_inputs(g), (const loom_tensor *const *)in,
                                    n_out, out);
  CHECK_OK(ctx, st);
  loom_session_free(s);
  return out;
}

static void free_all(loom_tensor **t, int32_t n) {
  for (int32_t i = 0; t && i < n; i++) loom_tensor_free(t[i]);
  free(t);
}

static bool same_bits(loom_tensor **a, loom_tensor **b, int32_t n) {
  if (!a || !b) return false;
  for (int32_t i = 0; i < n; i++)
    if (loom_tensor_numel(a[i]) != loom_tensor_numel(b[i]) ||
        memcmp(loom_tensor_data(a[i]), loom_tensor_data(b[i]),
               (size_t)loom_tensor_numel(a[i]) * 4) != 0)
      return false;
  return true;
}

/* max |a - b| / max(max |b|, 1e-3) over each output, the worst */
static double worst_rel(loom_tensor **a, loom_tensor **b, int32_t n) {
  double worst = 0;
  for (int32_t i = 0; a && b && i < n; i++) {
    const float *x = loom_tensor_data(a[i]), *y = loom_tensor_data(b[i]);
    double mx = 1e-3, diff = 0;
    for (int64_t e = 0; e < loom_tensor_numel(b[i]); e++) {
      mx = fmax(mx, fabs(y[e]));
      diff = fmax(diff, fabs((double)x[e] - y[e]));
    }
    worst = fmax(worst, diff / mx);
  }
  return worst;
}

/* The step's graph as a session sees it before its backend's last form. */
static loom_graph *lowered(const loom_graph *g) {
  loom_graph *d = NULL, *s = NULL;
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  if (d) CHECK_OK(ctx, loom_graph_simplify(d, &s));
  loom_graph_free(d);
  return s;
}

/* Which operands of g's flash nodes are strided: a bit per operand
 * (q, k, v, o, d_o, dq, dk, dv), OR-ed over the forward (*fwd) and backward (*bwd)
 * nodes, which must all have the same. */
static void folded_operands(const loom_graph *g, int *fwd, int *bwd) {
  *fwd = *bwd = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->op != LOOM_OP_FLASH_ATTENTION && n->op != LOOM_OP_FLASH_ATTENTION_GRAD) continue;
    int bits = 0;
    for (int32_t w = 0; w < LOOM_FLASH_ALL; w++) bits |= loom_flash_view_of(n, w).strided << w;
    int *dst = n->op == LOOM_OP_FLASH_ATTENTION ? fwd : bwd;
    CHECK(*dst == -1 || *dst == bits);
    *dst = bits;
  }
}

static void test_model(bool grouped) {
  loom_gpt_config c = config(grouped);
  loom_graph *g = train_graph(&c);
  if (!g) return;
  /* what it folds */
  loom_graph *low = lowered(g), *fold = NULL;
  int32_t n = 0;
  if (low) CHECK_OK(ctx, loom_graph_fold_attention_views(low, &fold, &n));
  CHECK(n == 2 * c.n_layer);
  int fwd = 0, bwd = 0;
  if (fold) folded_operands(fold, &fwd, &bwd);
  int want_fwd = grouped ? 0xE : 0xF, want_bwd = grouped ? 0x1E : 0xFF;
  printf("%s: folded operands forward 0x%x, backward 0x%x\n", grouped ? "grouped+rope" : "gpt2",
         fwd, bwd);
  CHECK(fwd == want_fwd && bwd == want_bwd);
  int32_t n_out = loom_graph_num_outputs(g);
  loom_tensor **in = inputs(g, c.vocab);
  /* the fold is bitwise the copies, fused and node by node */
  for (int m = 0; m < 2; m++) {
    loom_fusion_mode fm = m ? LOOM_FUSION_EAGER : LOOM_FUSION_STITCH;
    setenv("LOOM_ATTENTION_VIEWS", "0", 1);
    loom_tensor **copies = run(g, in, "cpu", fm);
    unsetenv("LOOM_ATTENTION_VIEWS");
    loom_tensor **views = run(g, in, "cpu", fm);
    CHECK(same_bits(views, copies, n_out));
    free_all(copies, n_out);
    if (m == 1) {
      free_all(views, n_out);
      continue;
    }
    /* the reference reads the strided operands as the copies it had */
    loom_tensor **ref = run(low, in, "ref", LOOM_FUSION_STITCH);
    loom_tensor **ref_fold = fold ? run(fold, in, "ref", LOOM_FUSION_STITCH) : NULL;
    CHECK(same_bits(ref_fold, ref, n_out));
    double w = worst_rel(views, ref, n_out);
    printf("  cpu with the fold against the reference: %.2g\n", w);
    CHECK(w < 1e-3);
    free_all(ref, n_out);
    free_all(ref_fold, n_out);
    free_all(views, n_out);
  }
  free_all(in, loom_graph_num_inputs(g));
  loom_graph_free(fold);
  loom_graph_free(low);
  loom_graph_free(g);
}

/* q [1, 2, 4, 3] read from x [4, 2, 3] by q_at; bad views refused. */
static void test_infer(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  int64_t xs[3] = {4, 2, 3}, ks[4] = {1, 2, 4, 3};
  int32_t x = -1, k = -1;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 3, xs, &x));
  CHECK_OK(ctx, loom_graph_input(g, "k", LOOM_DTYPE_F32, 4, ks, &k));
  static const int64_t good[6] = {0, 6, 1, 0, 2, 3}, other[4][6] = {
      {1, 6, 1, 0, 2, 3},  /* the last element past x's 24 */
      {0, 6, 1, 0, 3, 3},  /* leading sizes multiply to 3, not 2 */
      {0, -6, 1, 0, 2, 3}, /* a negative stride */
      {0, 6, 1, 0, 2, 0}};
  for (int c = 0; c < 5; c++) {
    loom_attr_value a[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_FLASH_ATTENTION, a);
    loom_ints *dm = &LOOM_ATTRV_INTS(a, flash_attention, dims), *qa = &LOOM_ATTRV_INTS(a, flash_attention, q_at);
    *dm = (loom_ints){6, {1, 2, 4, 3, 4, 3}};
    qa->n = 6;
    memcpy(qa->v, c == 0 ? good : other[c - 1], sizeof good);
    int32_t in[4] = {x, k, k, lb_scalar(g, LOOM_DTYPE_I64, 0)}, out[2];
    (void)loom_build_status(g);
    lb_op_multi(g, LOOM_OP_FLASH_ATTENTION, 4, in, a, 2, out);
    loom_status st = loom_build_status(g);
    /* the last one has stride-0 leading dims: a shared head, fine */
    CHECK(c == 0 || c == 4 ? st == LOOM_STATUS_OK : st != LOOM_STATUS_OK);
    if (c == 0) { /* no base (counter base 0) */
      lb_op_multi(g, LOOM_OP_FLASH_ATTENTION, 3, in, a, 2, out);
      CHECK(loom_build_status(g) == LOOM_STATUS_OK);
    }
  }
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  loom_ctx_set_threads(ctx, 2);
  test_infer();
  test_model(false);
  test_model(true);
  loom_ctx_free(ctx);
  return loom_test_finish("test_attention_views");
}

/* The recognitions of the ONNX import, each on a small model written as
 * the exporters write it and checked against loops on ref, cpu eager and
 * cpu stitch: attention (causal, keep-everything and other masks, additive
 * and by Where, K^T in its three exported forms, a padding mask given at
 * run time), Split of a biased product, and GELU in five spellings. */
#include "onnx_models_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Attention as PyTorch exports it: x [1, 2, 6, 4] as q, k = 0.5 x, v =
 * -x; Softmax(masked scores) v, the scores q k^T * 0.5 (or q and k^T each
 * times sqrt(0.5) first), masked by Where(mask, scores, fill) with the
 * mask from Trilu (lower: causal; upper: not) and Equal, or by adding a
 * float mask of 0 and fill; or a mask keeping everything (BERT's padding
 * mask of ones: (1 - ones) * min, all zeros, [1, 1, 1, 6]; or Where on
 * all true; or no mask at all). k^T is transpose(k) of the last two dims, or (keyperm 1) one
 * transpose from k's [1, 6, 2, 4] layout, as PyTorch writes
 * k.view(b, t, h, d).permute(0, 2, 1, 3).transpose(-1, -2), or (keyperm
 * 2) k as [2, 6, 4], transposed and reshaped back, as torch.export does. The import
 * makes the attention op for every additive mask (causal or keeping
 * everything: the causal flag or nothing; any other: an additive bias)
 * and every Where of fill <= -1e9 (the bias where(mask, 0, fill) for a
 * mask neither causal nor keeping all), not for a Where of a higher fill
 * (not the same as adding it); every variant matches the definition
 * computed here. */
enum { MASK_LOWER, MASK_UPPER, MASK_NONE, MASK_ABSENT };

/* The definition the attention tests compare with, in double: per head h
 * of x [hs, n, dk], q = x, k = 0.5 x, v = -x, scores q k^T * 0.5 passed
 * through score(s, i, j, u) (masks, biases), softmax over j, times v. */
static void attention_want(const float *x, int hs, int n, int dk,
                           double (*score)(double s, int i, int j, const void *u), const void *u,
                           float *want) {
  for (int h = 0; h < hs; h++)
    for (int i = 0; i < n; i++) {
      const float *xh = x + h * n * dk;
      double s[n], mx = -INFINITY, sum = 0;
      for (int j = 0; j < n; j++) {
        double d = 0;
        for (int e = 0; e < dk; e++) d += (double)xh[i * dk + e] * 0.5 * xh[j * dk + e];
        s[j] = score(d * 0.5, i, j, u);
        mx = fmax(mx, s[j]);
      }
      for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
      for (int e = 0; e < dk; e++) {
        double acc = 0;
        for (int j = 0; j < n; j++) acc += s[j] / sum * -xh[j * dk + e];
        want[(h * n + i) * dk + e] = (float)acc;
      }
    }
}

/* A causal (or upper) mask: kept scores as they are, the others fill, or
 * plus fill when the mask is additive. */
typedef struct mask_rule {
  bool none, upper, additive;
  float fill;
} mask_rule;

static double masked_score(double s, int i, int j, const void *u) {
  const mask_rule *r = u;
  bool kept = r->none || (r->upper ? j >= i : j <= i);
  return kept ? s : r->additive ? s + r->fill : r->fill;
}

/* BERT's padding mask: (1 - mask[j]) * -10000 added. */
static double padded_score(double s, int i, int j, const void *u) {
  (void)i;
  return s + (1.0 - (double)((const int64_t *)u)[j]) * -10000.0;
}


/* The end both attention forms share: softmax over the last axis of the
 * (masked) scores, times v, as output y [1, hs, n, dk]; the model. */
static pbw attention_tail(gw *w, const char *masked, const char *v, int hs, int n, int dk) {
  pbw ax = onnxw_attr_int("axis", -1);
  const char *pr = node(w, "Softmax", 1, &masked, &ax, 1);
  const char *mm[2] = {pr, v};
  pbw o = onnxw_node("MatMul", "att", 2, mm, 1, (const char *[]){"y"});
  pbw_msg(&w->g, 1, &o);
  pbw y = onnxw_value("y", 1, 4, (int64_t[]){1, hs, n, dk}, NULL);
  pbw_msg(&w->g, 12, &y);
  return onnxw_model(&w->g, 17);
}
static void test_causal_attention(void) {
  static const struct {
    int mask, additive, prescaled, keyperm;
    float fill;
    int attention;
  } cases[] = {{MASK_LOWER, 0, 0, 0, -1e9f, 1},     {MASK_LOWER, 0, 0, 0, -INFINITY, 1},
               {MASK_LOWER, 0, 0, 0, -1e4f, 0},     {MASK_UPPER, 0, 0, 0, -1e9f, 1},
               {MASK_LOWER, 1, 0, 0, -INFINITY, 1}, {MASK_LOWER, 1, 0, 0, -1e4f, 1},
               {MASK_UPPER, 1, 0, 0, -INFINITY, 1}, {MASK_LOWER, 0, 1, 0, -1e9f, 1},
               {MASK_LOWER, 1, 1, 0, -3.4e38f, 1},  {MASK_LOWER, 0, 0, 1, -3.4e38f, 1},
               {MASK_LOWER, 1, 1, 1, -INFINITY, 1}, {MASK_NONE, 1, 0, 0, -3.4e38f, 1},
               {MASK_NONE, 1, 0, 1, -3.4e38f, 1},   {MASK_NONE, 0, 1, 1, -3.4e38f, 1},
               {MASK_NONE, 0, 0, 0, -1e4f, 1},      {MASK_UPPER, 1, 0, 1, -INFINITY, 1},
               {MASK_LOWER, 1, 1, 2, -INFINITY, 1},  {MASK_UPPER, 0, 0, 2, -1e9f, 1},
               {MASK_ABSENT, 0, 0, 1, 0, 1},        {MASK_ABSENT, 0, 1, 2, 0, 1}};
  enum { N = 6, DK = 4, HS = 2 };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *k = op2(&w, "Mul", "x", scalar_f(&w, 0.5f)), *vv = op1(&w, "Neg", "x"), *kt, *sc;
    if (cases[c].keyperm == 2) { /* torch.export: [1, h, t, d] as [h, t, d], transposed, and back */
      const char *k3 = op2(&w, "Reshape", k, ints(&w, 3, (int64_t[]){HS, N, DK}));
      pbw perm = onnxw_attr_ints("perm", 3, (int64_t[]){0, 2, 1});
      const char *kt3 = node(&w, "Transpose", 1, &k3, &perm, 1);
      kt = op2(&w, "Reshape", kt3, ints(&w, 4, (int64_t[]){1, HS, DK, N}));
    } else if (cases[c].keyperm) {
      pbw heads = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 1, 3});
      const char *kx = node(&w, "Transpose", 1, &k, &heads, 1);
      pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 3, 1});
      kt = node(&w, "Transpose", 1, &kx, &perm, 1);
    } else {
      pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2});
      kt = node(&w, "Transpose", 1, &k, &perm, 1);
    }
    if (cases[c].prescaled) {
      float r = sqrtf(0.5f);
      sc = op2(&w, "MatMul", op2(&w, "Mul", "x", scalar_f(&w, r)), op2(&w, "Mul", kt, scalar_f(&w, r)));
    } else {
      sc = op2(&w, "Mul", op2(&w, "MatMul", "x", kt), scalar_f(&w, 0.5f));
    }
    bool none = cases[c].mask == MASK_NONE || cases[c].mask == MASK_ABSENT;
    float mask[N * N];
    for (int i = 0; i < N * N; i++) {
      bool kept = none || (cases[c].mask == MASK_UPPER ? i % N >= i / N : i % N <= i / N);
      mask[i] = cases[c].additive ? (kept ? 0.0f : cases[c].fill) : 1.0f;
    }
    const char *on = fresh(&w);
    pbw t = none && cases[c].additive ? onnxw_tensor(on, 1, 4, (int64_t[]){1, 1, 1, N}, mask, sizeof(float) * N)
                                      : onnxw_tensor(on, 1, 2, (int64_t[]){N, N}, mask, sizeof mask);
    pbw_msg(&w.g, 5, &t);
    const char *masked;
    if (cases[c].mask == MASK_ABSENT) {
      masked = sc;
    } else if (cases[c].additive) {
      masked = op2(&w, "Add", sc, on);
    } else {
      const char *tri = on;
      if (!none) {
        pbw up = onnxw_attr_int("upper", cases[c].mask == MASK_UPPER);
        tri = node(&w, "Trilu", 1, &on, &up, 1);
      }
      const char *keep = op2(&w, "Equal", tri, scalar_f(&w, 1.0f));
      const char *win[3] = {keep, sc, scalar_f(&w, cases[c].fill)};
      masked = node(&w, "Where", 3, win, NULL, 0);
    }
    pbw m = attention_tail(&w, masked, vv, HS, N, DK);
    CHECK(count_op(&m, LOOM_OP_ATTENTION) == cases[c].attention);
    float x[HS * N * DK], want[HS * N * DK];
    for (int i = 0; i < HS * N * DK; i++) x[i] = (float)loom_test_uniform(&rng, -2, 2);
    mask_rule rule = {none, cases[c].mask == MASK_UPPER, cases[c].additive, cases[c].fill};
    attention_want(x, HS, N, DK, masked_score, &rule, want);
    char what[160];
    snprintf(what, sizeof what, "attention, %s %s mask, fill %g%s%s",
             cases[c].mask == MASK_ABSENT ? "no" : none ? "keep-all" : cases[c].mask == MASK_UPPER ? "upper" : "causal",
             cases[c].additive ? "additive" : "Where", (double)cases[c].fill,
             cases[c].prescaled ? ", q and k scaled" : "",
             cases[c].keyperm == 2 ? ", k^T through [h, t, d]"
             : cases[c].keyperm    ? ", k^T from [b, t, h, d]"
                                   : "");
    run_and_compare(what, &m, "x", 4, (int64_t[]){1, HS, N, DK}, x, want, HS * N * DK, 0);
    free(m.p);
  }
}

/* BERT's padding mask known only at run time, as Hugging Face exports
 * it: mask i64 [1, N] an input, (1 - float(mask[:, None, None, :])) *
 * -10000 added to the scaled scores q k^T * 0.5 (x [1, 2, N, 4] as q, k =
 * 0.5 x, v = -x). The import makes one attention op with that additive
 * bias (flash attention in the session), and the results are the
 * definition's computed here, with the last three keys padded. */
static void test_padding_mask_attention(void) {
  enum { N = 6, DK = 4, HS = 2 };
  gw w = {0};
  pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
  pbw_msg(&w.g, 11, &v);
  v = onnxw_value("mask", 7, 2, (int64_t[]){1, N}, NULL);
  pbw_msg(&w.g, 11, &v);
  const char *k = op2(&w, "Mul", "x", scalar_f(&w, 0.5f)), *vv = op1(&w, "Neg", "x");
  pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2});
  const char *kt = node(&w, "Transpose", 1, &k, &perm, 1);
  const char *sc = op2(&w, "Mul", op2(&w, "MatMul", "x", kt), scalar_f(&w, 0.5f));
  const char *m4 = op2(&w, "Unsqueeze", "mask", ints(&w, 2, (int64_t[]){1, 2}));
  pbw to = onnxw_attr_int("to", 1);
  const char *mf = node(&w, "Cast", 1, &m4, &to, 1);
  const char *ext = op2(&w, "Mul", op2(&w, "Sub", scalar_f(&w, 1.0f), mf), scalar_f(&w, -10000.0f));
  const char *masked = op2(&w, "Add", sc, ext);
  pbw model = attention_tail(&w, masked, vv, HS, N, DK);
  CHECK(count_op(&model, LOOM_OP_ATTENTION) == 1);
  float x[HS * N * DK], want[HS * N * DK];
  int64_t mask[N] = {1, 1, 1, 0, 0, 0};
  for (int i = 0; i < HS * N * DK; i++) x[i] = (float)loom_test_uniform(&rng, -2, 2);
  attention_want(x, HS, N, DK, padded_score, mask, want);
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model.p, model.n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  loom_tensor *xt = NULL, *mt = NULL;
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 4, (int64_t[]){1, HS, N, DK}, x, &xt));
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_I64, 2, (int64_t[]){1, N}, mask, &mt));
  onnx_feed f[2] = {{"x", xt}, {"mask", mt}};
  static const char *const backends[3] = {"ref", "cpu", "cpu"};
  for (int b = 0; p && b < 3; b++) {
    loom_session *sess = NULL;
    loom_tensor *out[1] = {NULL};
    loom_session_options opts = LOOM_SESSION_OPTIONS(
        .backend = backends[b], .fusion = b == 2 ? LOOM_FUSION_STITCH : LOOM_FUSION_EAGER);
    CHECK_OK(ctx, onnx_program_session(ctx, p, &opts, &sess));
    if (sess) CHECK_OK(ctx, onnx_program_run(ctx, p, sess, 2, f, out));
    double err = out[0] ? 0 : INFINITY;
    for (int64_t i = 0; out[0] && i < HS * N * DK; i++)
      err = fmax(err, fabs(((const float *)loom_tensor_data(out[0]))[i] - want[i]));
    printf("attention, runtime padding mask on %s/%s: max |error| %.3g\n", backends[b],
           b == 2 ? "stitch" : "eager", err);
    CHECK(err < 2e-5);
    loom_tensor_free(out[0]);
    loom_session_free(sess);
  }
  loom_tensor_free(xt);
  loom_tensor_free(mt);
  onnx_program_free(p);
  onnx_model_free(m);
  free(model.p);
}

/* Split(x W + b) as PyTorch exports a merged QKV projection: x [2, 3, 4],
 * W [4, 12], b of 12 values, split along the last axis into 4 + 4 + 4 (b
 * split with it) or along axis 1 into 1 + 2 (b whole in each part); the
 * parts multiplied together. The import makes x W one GEMM of 6 rows
 * and adds b's part to each slice (3 adds, or 2; the full sum is left
 * dead), and the values match loops. */
static void test_split_bias(void) {
  for (int along_last = 0; along_last < 2; along_last++) {
    gw w = {0};
    float wt[4 * 12], b[12], x[2 * 3 * 4], want[2 * 3 * 4 * 3];
    pbw v = onnxw_value("x", 1, 3, (int64_t[]){2, 3, 4}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *mm = op2(&w, "MatMul", "x", weight(&w, 2, (int64_t[]){4, 12}, wt, 0.5));
    const char *sum = op2(&w, "Add", weight(&w, 1, (int64_t[]){12}, b, 0.5), mm);
    const char *in[2] = {sum, along_last ? ints(&w, 3, (int64_t[]){4, 4, 4}) : ints(&w, 2, (int64_t[]){1, 2})};
    const char *parts[3] = {fresh(&w), fresh(&w), fresh(&w)};
    pbw split = onnxw_node("Split", "split", 2, in, along_last ? 3 : 2, parts);
    pbw ax = onnxw_attr_int("axis", along_last ? 2 : 1);
    pbw_msg(&split, 5, &ax);
    pbw_msg(&w.g, 1, &split);
    const char *y = along_last ? op2(&w, "Mul", op2(&w, "Mul", parts[0], parts[1]), parts[2])
                               : op2(&w, "Mul", op1(&w, "Neg", parts[0]), parts[1]);
    pbw idn = onnxw_node("Identity", "out", 1, &y, 1, (const char *[]){"y"});
    pbw_msg(&w.g, 1, &idn);
    int64_t n_out = along_last ? 2 * 3 * 4 : 2 * 2 * 12;
    v = onnxw_value("y", 1, 3, along_last ? (int64_t[]){2, 3, 4} : (int64_t[]){2, 2, 12}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 17);
    CHECK(count_op(&m, LOOM_OP_ADD) >= (along_last ? 3 : 2)); /* and the dead full sum */
    CHECK(first_matmul_rank(&m) == 2); /* [2, 3, 4] x W as one GEMM of 6 rows */
    for (int i = 0; i < 2 * 3 * 4; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
    float h[2 * 3 * 12];
    matmul(x, wt, h, 6, 4, 12);
    for (int i = 0; i < 6 * 12; i++) h[i] += b[i % 12];
    for (int bt = 0; bt < 2; bt++)
      for (int i = 0; i < (along_last ? 3 * 4 : 2 * 12); i++) {
        int r = i / (along_last ? 4 : 12), c = i % (along_last ? 4 : 12);
        const float *hb = h + bt * 36;
        want[bt * (along_last ? 12 : 24) + i] =
            along_last ? hb[r * 12 + c] * hb[r * 12 + 4 + c] * hb[r * 12 + 8 + c] : -hb[c] * hb[(1 + r) * 12 + c];
      }
    run_and_compare(along_last ? "Split of a biased product, last axis" : "Split of a biased product, axis 1", &m, "x",
                    3, (int64_t[]){2, 3, 4}, x, want, n_out, 0);
    free(m.p);
  }
}

/* GELU spelled out as exporters write it, x [2, 5]: (0) TorchScript's tanh
 * form (x * x * x, constants on the left), (1) torch.export's (Pow, Add(t,
 * 1)), (2) the erf form with x times 1/sqrt 2, (3) a tanh form with 0.045
 * for 0.044715 and (4) an erf form without the 0.5: the import makes the
 * gelu op for the first three only, and every variant matches its
 * definition computed here. */
static void test_gelu_forms(void) {
  for (int form = 0; form < 5; form++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 2, (int64_t[]){2, 5}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *x = "x", *y;
    bool tanh_form = form == 0 || form == 1 || form == 3;
    double cube = form == 3 ? 0.045 : 0.044715, half = form == 4 ? 1.0 : 0.5;
    if (tanh_form) {
      const char *x3 = form == 1 ? op2(&w, "Pow", x, scalar_f(&w, 3.0f)) : op2(&w, "Mul", x, op2(&w, "Mul", x, x));
      const char *s = op2(&w, "Add", x, op2(&w, "Mul", scalar_f(&w, (float)cube), x3));
      const char *t = op1(&w, "Tanh", op2(&w, "Mul", scalar_f(&w, 0.7978845608f), s));
      const char *p = form == 1 ? op2(&w, "Add", t, scalar_f(&w, 1.0f)) : op2(&w, "Add", scalar_f(&w, 1.0f), t);
      y = form == 1 ? op2(&w, "Mul", x, op2(&w, "Mul", scalar_f(&w, 0.5f), p))
                    : op2(&w, "Mul", scalar_f(&w, 0.5f), op2(&w, "Mul", x, p));
    } else {
      const char *e = op1(&w, "Erf", op2(&w, "Mul", x, scalar_f(&w, 0.70710678f)));
      const char *p = op2(&w, "Add", e, scalar_f(&w, 1.0f));
      y = form == 4 ? op2(&w, "Mul", x, p) : op2(&w, "Mul", op2(&w, "Mul", scalar_f(&w, 0.5f), x), p);
    }
    pbw idn = onnxw_node("Identity", "out", 1, &y, 1, (const char *[]){"y"});
    pbw_msg(&w.g, 1, &idn);
    v = onnxw_value("y", 1, 2, (int64_t[]){2, 5}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 17);
    CHECK(count_op(&m, LOOM_OP_GELU) == (form < 3));
    float xs[10], want[10];
    for (int i = 0; i < 10; i++) {
      double a = xs[i] = (float)loom_test_uniform(&rng, -4, 4);
      double c = tanh_form ? 1 + tanh(0.7978845608 * (a + cube * a * a * a)) : 1 + erf(a * 0.70710678);
      want[i] = (float)(half * a * c);
    }
    char what[64];
    snprintf(what, sizeof what, "GELU spelled out, form %d", form);
    run_and_compare(what, &m, "x", 2, (int64_t[]){2, 5}, xs, want, 10, 0);
    free(m.p);
  }
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_causal_attention();
  test_padding_mask_attention();
  test_split_bias();
  test_gelu_forms();
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx_attention");
}

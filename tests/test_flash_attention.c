/* The flash attention kernels (runtime/cpu/flash_attention.h) on every
 * implementation this CPU runs (portable C, AVX-512):
 *  - forward O and lse, backward dq, dk, dv against a naive reference in
 *    double written here (the composite's semantics: causal mask, softmax,
 *    dropout from loom_dropout_keep, NaN rows), causal or not, Sq == Sk,
 *    Sq < Sk, Sq > Sk (NaN rows), odd sizes (Sq = 1, Sk = 65, D = 3, Dv = 5,
 *    sizes not multiples of the tiles), p = 0, 0.1, 0.5, counters that wrap
 *    past 2^64. Tolerance: max |x - ref| <= 1e-4 * max(max |ref|, 0.1) over
 *    each tensor (f32 tiles against double; the worst seen is printed, about
 *    1e-6), and NaN exactly where the reference has NaN;
 *  - mask_bits read from loom_dropout_mask_bits gives bitwise the outputs
 *    of the kernel's own generation;
 *  - bitwise identical results with 1, 2 and 3 threads;
 *  - the backward against central finite differences of the kernel's own
 *    f32 forward (relative 2e-2: f32 differences with h = 1e-2);
 *  - operands at strides (q, k, v inside one QKV buffer, o and d_o in
 *    [B, T, H, Dv]): bitwise the results of contiguous copies;
 *  - zero sizes, bad arguments, workspace bounds.
 * LOOM_TEST_QUICK=1 (the sanitizer build) runs fewer, smaller shapes.
 * Timings belong to `loom bench attention`, not here. */
#include "common.h"

#include "rng/philox.h"
#include "rng/philox_fast.h"
#include "runtime/cpu/flash_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool quick;

typedef struct shape {
  int64_t bh, sq, sk, d, dv;
} shape;

/* ---- the reference, in double ------------------------------------------- */

typedef struct ref_out {
  double *o, *lse, *dq, *dk, *dv;
} ref_out;

static void ref_free(ref_out *r) {
  free(r->o);
  free(r->lse);
  free(r->dq);
  free(r->dk);
  free(r->dv);
}

/* The decomposed composite, literally: S = scale q k^T, masked entries
 * -inf, softmax (a row with no visible key is 0/0 = NaN everywhere), dropout
 * (kept / (1 - p), dropped 0), O = Pd v; the gradient as the composite's
 * autodiff computes it: dPd = dO v^T, dP = dropout(dPd), dS = P (dP - sum_j P
 * dP) at visible entries and 0 at masked ones (the select), dq = scale dS k,
 * dk = scale dS^T q, dv = Pd^T dO. */
static void reference(const loom_flash_attn *a, const float *d_o, ref_out *r) {
  const int64_t BH = a->bh, SQ = a->sq, SK = a->sk, D = a->d, DV = a->dv;
  r->o = calloc((size_t)(BH * SQ * DV) + 1, sizeof(double));
  r->lse = calloc((size_t)(BH * SQ) + 1, sizeof(double));
  r->dq = calloc((size_t)(BH * SQ * D) + 1, sizeof(double));
  r->dk = calloc((size_t)(BH * SK * D) + 1, sizeof(double));
  r->dv = calloc((size_t)(BH * SK * DV) + 1, sizeof(double));
  double *p = calloc((size_t)SK + 1, sizeof(double)), *pd = calloc((size_t)SK + 1, sizeof(double));
  double *dp = calloc((size_t)SK + 1, sizeof(double));
  bool *vis = calloc((size_t)SK + 1, sizeof(bool)), *keep = calloc((size_t)SK + 1, sizeof(bool));
  uint64_t thr = loom_dropout_threshold(a->p);
  for (int64_t b = 0; b < BH; b++)
    for (int64_t i = 0; i < SQ; i++) {
      const float *qi = a->q + (b * SQ + i) * D, *doi = d_o + (b * SQ + i) * DV;
      double m = -INFINITY;
      for (int64_t j = 0; j < SK; j++) {
        vis[j] = !a->causal || j <= i + (SK - SQ);
        uint64_t e = (uint64_t)((b * SQ + i) * SK + j);
        keep[j] = a->p == 0.0 || loom_dropout_keep(a->seed, a->j0 + e, thr);
        double s = 0.0;
        for (int64_t x = 0; x < D; x++)
          s += (double)qi[x] * (double)a->k[(b * SK + j) * D + x];
        p[j] = vis[j] ? s * a->scale : -INFINITY;
        if (p[j] > m) m = p[j];
      }
      double l = 0.0;
      for (int64_t j = 0; j < SK; j++) {
        p[j] = exp(p[j] - m); /* NaN everywhere when m = -inf */
        l += p[j];
      }
      r->lse[b * SQ + i] = m == -INFINITY ? -INFINITY : m + log(l); /* log of an empty sum */
      for (int64_t j = 0; j < SK; j++) {
        p[j] /= l;
        pd[j] = keep[j] ? p[j] / (1.0 - a->p) : 0.0;
      }
      for (int64_t x = 0; x < DV; x++) {
        double o = 0.0;
        for (int64_t j = 0; j < SK; j++)
          o += pd[j] * (double)a->v[(b * SK + j) * DV + x];
        r->o[(b * SQ + i) * DV + x] = o;
      }
      /* backward */
      double di = 0.0;
      for (int64_t j = 0; j < SK; j++) {
        double g = 0.0;
        for (int64_t x = 0; x < DV; x++)
          g += (double)doi[x] * (double)a->v[(b * SK + j) * DV + x];
        dp[j] = keep[j] ? g / (1.0 - a->p) : 0.0;
        di += p[j] * dp[j];
      }
      for (int64_t j = 0; j < SK; j++) {
        double ds = vis[j] ? p[j] * (dp[j] - di) : 0.0;
        for (int64_t x = 0; x < D; x++) {
          r->dq[(b * SQ + i) * D + x] += a->scale * ds * (double)a->k[(b * SK + j) * D + x];
          r->dk[(b * SK + j) * D + x] += a->scale * ds * (double)qi[x];
        }
        for (int64_t x = 0; x < DV; x++)
          r->dv[(b * SK + j) * DV + x] += pd[j] * (double)doi[x];
      }
    }
  free(p);
  free(pd);
  free(dp);
  free(vis);
  free(keep);
}

/* The largest relative error seen (printed at the end). */
static double worst_rel;

/* max |x - ref| <= tol * max(max |ref|, 0.1), NaN (and inf) exactly where
 * ref has them. */
static bool close_to(const char *what, const float *x, const double *ref, int64_t n, double tol) {
  double big = 0.0, err = 0.0;
  int64_t nan_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(ref[i]) || isnan(x[i])) {
      nan_bad += isnan(ref[i]) != isnan(x[i]);
      continue;
    }
    if (isinf(ref[i]) || isinf(x[i])) {
      nan_bad += ref[i] != x[i];
      continue;
    }
    big = fmax(big, fabs(ref[i]));
    err = fmax(err, fabs((double)x[i] - ref[i]));
  }
  /* the floor: a tensor whose exact values are 0 (dq with Sk = 1) still has
   * rounding-level errors from terms of size ~1 */
  bool ok = nan_bad == 0 && err <= tol * fmax(big, 0.1);
  if (err / fmax(big, 0.1) > worst_rel) worst_rel = err / fmax(big, 0.1);
  if (!ok)
    fprintf(stderr,
            "  %s: max error %.3g (max |ref| %.3g, relative %.3g), %lld NaN/inf mismatches\n", what,
            err, big, err / fmax(big, 1e-30), (long long)nan_bad);
  return ok;
}

static void fill(float *x, int64_t n, loom_test_rng *rng, double lo, double hi) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)loom_test_uniform(rng, lo, hi);
}

typedef struct outs {
  float *o, *lse, *dq, *dk, *dv;
} outs;

static void outs_alloc(outs *u, const shape *s) {
  u->o = malloc(sizeof(float) * (size_t)(s->bh * s->sq * s->dv + 1));
  u->lse = malloc(sizeof(float) * (size_t)(s->bh * s->sq + 1));
  u->dq = malloc(sizeof(float) * (size_t)(s->bh * s->sq * s->d + 1));
  u->dk = malloc(sizeof(float) * (size_t)(s->bh * s->sk * s->d + 1));
  u->dv = malloc(sizeof(float) * (size_t)(s->bh * s->sk * s->dv + 1));
}

static void outs_free(outs *u) {
  free(u->o);
  free(u->lse);
  free(u->dq);
  free(u->dk);
  free(u->dv);
}

static bool outs_same(const outs *x, const outs *y, const shape *s) {
  return memcmp(x->o, y->o, sizeof(float) * (size_t)(s->bh * s->sq * s->dv)) == 0 &&
         memcmp(x->lse, y->lse, sizeof(float) * (size_t)(s->bh * s->sq)) == 0 &&
         memcmp(x->dq, y->dq, sizeof(float) * (size_t)(s->bh * s->sq * s->d)) == 0 &&
         memcmp(x->dk, y->dk, sizeof(float) * (size_t)(s->bh * s->sk * s->d)) == 0 &&
         memcmp(x->dv, y->dv, sizeof(float) * (size_t)(s->bh * s->sk * s->dv)) == 0;
}

static void run_both(loom_ctx *ctx, int32_t nt, const loom_flash_attn *a, const float *d_o,
                     outs *u) {
  /* every output is written, never accumulated: start from garbage */
  memset(u->o, 0x7f, sizeof(float) * (size_t)(a->bh * a->sq * a->dv));
  memset(u->lse, 0x7f, sizeof(float) * (size_t)(a->bh * a->sq));
  memset(u->dq, 0x7f, sizeof(float) * (size_t)(a->bh * a->sq * a->d));
  memset(u->dk, 0x7f, sizeof(float) * (size_t)(a->bh * a->sk * a->d));
  memset(u->dv, 0x7f, sizeof(float) * (size_t)(a->bh * a->sk * a->dv));
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, nt, a, u->o, u->lse));
  CHECK_OK(ctx, loom_flash_attn_bwd(ctx, nt, a, u->o, u->lse, d_o, u->dq, u->dk, u->dv));
}

/* One shape, causal flag, p and implementation: the reference, the thread
 * counts, the mask_bits mode. */
static void check_case(loom_ctx *ctx, const shape *s, bool causal, double p, uint64_t j0,
                       double scale, int32_t impl) {
  loom_test_rng rng = {(uint64_t)(s->bh * 1000003 + s->sq * 1009 + s->sk * 17 + s->d + 1)};
  const int64_t nq = s->bh * s->sq * s->d, nk = s->bh * s->sk * s->d, nv = s->bh * s->sk * s->dv;
  const int64_t no = s->bh * s->sq * s->dv;
  float *q = malloc(sizeof(float) * (size_t)(nq + 1)),
        *k = malloc(sizeof(float) * (size_t)(nk + 1));
  float *v = malloc(sizeof(float) * (size_t)(nv + 1)),
        *d_o = malloc(sizeof(float) * (size_t)(no + 1));
  fill(q, nq, &rng, -1.5, 1.5);
  fill(k, nk, &rng, -1.5, 1.5);
  fill(v, nv, &rng, -1.0, 1.0);
  fill(d_o, no, &rng, -1.0, 1.0);
  loom_flash_attn a = {.bh = s->bh,
                       .sq = s->sq,
                       .sk = s->sk,
                       .d = s->d,
                       .dv = s->dv,
                       .q = q,
                       .k = k,
                       .v = v,
                       .scale = scale  ? scale
                                : s->d ? 1.0 / sqrt((double)s->d)
                                       : 1.0,
                       .causal = causal,
                       .p = p,
                       .seed = 0x1234abcdull + (uint64_t)s->sk,
                       .j0 = j0,
                       .impl = impl};
  char what[160];
  snprintf(what, sizeof what, "bh %lld sq %lld sk %lld d %lld dv %lld causal %d p %g impl %d",
           (long long)s->bh, (long long)s->sq, (long long)s->sk, (long long)s->d, (long long)s->dv,
           causal, p, impl);

  ref_out r;
  reference(&a, d_o, &r);
  outs u[3];
  for (int t = 0; t < 3; t++) {
    outs_alloc(&u[t], s);
    run_both(ctx, t + 1, &a, d_o, &u[t]);
  }
  const double tol = 1e-4;
  bool ok = close_to("o", u[0].o, r.o, no, tol) &&
            close_to("lse", u[0].lse, r.lse, s->bh * s->sq, tol) &&
            close_to("dq", u[0].dq, r.dq, nq, tol) && close_to("dk", u[0].dk, r.dk, nk, tol) &&
            close_to("dv", u[0].dv, r.dv, nv, tol);
  if (!ok) fprintf(stderr, "  ^ against the reference: %s\n", what);
  CHECK(ok);
  bool same = outs_same(&u[0], &u[1], s) && outs_same(&u[0], &u[2], s);
  if (!same) fprintf(stderr, "  thread counts differ: %s\n", what);
  CHECK(same);

  if (p > 0.0) { /* the mask as bits gives the same bits of output */
    int64_t n = s->bh * s->sq * s->sk;
    uint8_t *bits = malloc((size_t)(n + 7) / 8 + 1);
    loom_dropout_mask_bits(a.seed, a.j0, n, loom_dropout_threshold(p), bits);
    loom_flash_attn b = a;
    b.mask_bits = bits;
    outs w;
    outs_alloc(&w, s);
    run_both(ctx, 2, &b, d_o, &w);
    same = outs_same(&u[0], &w, s);
    if (!same) fprintf(stderr, "  mask_bits mode differs: %s\n", what);
    CHECK(same);
    outs_free(&w);
    free(bits);
  }
  if (p == 0.0 && s->bh * s->sq * s->sk > 0) { /* p = 0: mask_bits is not read */
    uint8_t junk[1] = {0};
    loom_flash_attn b = a;
    b.mask_bits = junk;
    outs w;
    outs_alloc(&w, s);
    run_both(ctx, 2, &b, d_o, &w);
    CHECK(outs_same(&u[0], &w, s));
    outs_free(&w);
  }
  for (int t = 0; t < 3; t++)
    outs_free(&u[t]);
  ref_free(&r);
  free(q);
  free(k);
  free(v);
  free(d_o);
}

static void test_against_reference(loom_ctx *ctx, int32_t impl) {
  static const shape full[] = {
      {2, 37, 37, 16, 16},   {1, 1, 65, 3, 5},      {2, 65, 1, 8, 8},       {2, 9, 3, 5, 7},
      {2, 130, 200, 64, 64}, {2, 200, 130, 24, 40}, {3, 129, 129, 64, 32},  {1, 257, 300, 64, 64},
      {1, 70, 70, 0, 6},     {1, 33, 40, 7, 0},     {1, 300, 1100, 32, 16}, {2, 513, 700, 64, 64}};
  static const shape small[] = {{2, 37, 37, 16, 16}, {1, 1, 65, 3, 5},  {2, 9, 3, 5, 7},
                                {1, 70, 90, 17, 9},  {1, 90, 70, 8, 8}, {1, 20, 20, 0, 3}};
  const shape *sh = quick ? small : full;
  int n = quick ? LOOM_ARRAY_LEN(small) : LOOM_ARRAY_LEN(full);
  static const double ps[] = {0.0, 0.1, 0.5};
  for (int i = 0; i < n; i++)
    for (int causal = 0; causal < 2; causal++)
      for (int pi = 0; pi < 3; pi++)
        check_case(ctx, &sh[i], causal, ps[pi], (uint64_t)i * 977, 0.0, impl);
  /* counter positions that wrap past 2^64 inside the tensor; a negative
   * and a large scale */
  shape w = {2, 20, 33, 8, 8};
  check_case(ctx, &w, true, 0.3, (uint64_t)0 - 700, -0.6, impl);
  check_case(ctx, &w, false, 0.3, (uint64_t)0 - 701, 3.0, impl);
}

/* ---- finite differences of the kernel's own forward ------------------------ */

/* L = sum O * W in double from the f32 forward. */
static double loss(loom_ctx *ctx, const loom_flash_attn *a, const float *w, float *o) {
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 1, a, o, NULL));
  double l = 0.0;
  for (int64_t i = 0; i < a->bh * a->sq * a->dv; i++)
    l += (double)o[i] * (double)w[i];
  return l;
}

static void test_finite_differences(loom_ctx *ctx, int32_t impl, bool causal, double p) {
  shape s = {2, 23, 29, 6, 5};
  loom_test_rng rng = {777 + (uint64_t)causal};
  const int64_t nq = s.bh * s.sq * s.d, nk = s.bh * s.sk * s.d, nv = s.bh * s.sk * s.dv;
  const int64_t no = s.bh * s.sq * s.dv;
  float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk);
  float *v = malloc(sizeof(float) * (size_t)nv), *w = malloc(sizeof(float) * (size_t)no);
  fill(q, nq, &rng, -1.0, 1.0);
  fill(k, nk, &rng, -1.0, 1.0);
  fill(v, nv, &rng, -1.0, 1.0);
  fill(w, no, &rng, -1.0, 1.0);
  loom_flash_attn a = {.bh = s.bh,
                       .sq = s.sq,
                       .sk = s.sk,
                       .d = s.d,
                       .dv = s.dv,
                       .q = q,
                       .k = k,
                       .v = v,
                       .scale = 0.7,
                       .causal = causal,
                       .p = p,
                       .seed = 99,
                       .j0 = 5,
                       .impl = impl};
  outs u;
  outs_alloc(&u, &s);
  run_both(ctx, 2, &a, w, &u); /* d_o = W: the gradient of L */
  float *o = malloc(sizeof(float) * (size_t)no);
  float *tensors[3] = {q, k, v};
  const float *grads[3] = {u.dq, u.dk, u.dv};
  const int64_t sizes[3] = {nq, nk, nv};
  const double h = 1e-2;
  int bad = 0;
  for (int t = 0; t < 3; t++) {
    double gmax = 0.0, emax = 0.0;
    for (int64_t i = 0; i < sizes[t]; i++)
      gmax = fmax(gmax, fabs(grads[t][i]));
    for (int trial = 0; trial < 12; trial++) {
      int64_t i = (int64_t)loom_test_uniform(&rng, 0, (double)sizes[t]);
      float keep = tensors[t][i];
      tensors[t][i] = (float)(keep + h);
      double hi = (double)tensors[t][i];
      double lp = loss(ctx, &a, w, o);
      tensors[t][i] = (float)(keep - h);
      double lo = (double)tensors[t][i];
      double lm = loss(ctx, &a, w, o);
      tensors[t][i] = keep;
      double fd = (lp - lm) / (hi - lo);
      emax = fmax(emax, fabs(fd - grads[t][i]));
    }
    if (emax > 2e-2 * gmax) {
      fprintf(
          stderr,
          "  finite differences: tensor %d error %.3g (max |grad| %.3g), causal %d p %g impl %d\n",
          t, emax, gmax, causal, p, impl);
      bad++;
    }
  }
  CHECK(bad == 0);
  free(o);
  outs_free(&u);
  free(q);
  free(k);
  free(v);
  free(w);
}

/* ---- edges and errors ------------------------------------------------------- */

static void test_zero_sizes(loom_ctx *ctx) {
  float q[64], k[64], v[64], o[64], lse[16], dq[64], dk[64], dv[64], d_o[64];
  for (int i = 0; i < 64; i++)
    q[i] = k[i] = v[i] = d_o[i] = 0.25f * (float)(i % 7);
  loom_flash_attn a = {.bh = 0, .sq = 4, .sk = 4, .d = 4, .dv = 4, .scale = 0.5};
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 2, &a, NULL, NULL)); /* empty: NULLs are fine */
  CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 2, &a, NULL, NULL, NULL, NULL, NULL, NULL));
  /* Sk = 0: O = 0 (an empty sum), lse = -inf, dq = 0 */
  a = (loom_flash_attn){
      .bh = 2, .sq = 3, .sk = 0, .d = 4, .dv = 4, .q = q, .scale = 0.5, .causal = true};
  for (int i = 0; i < 64; i++)
    o[i] = dq[i] = 9.0f;
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 2, &a, o, lse));
  bool ok = true;
  for (int i = 0; i < 24; i++)
    ok = ok && o[i] == 0.0f;
  for (int i = 0; i < 6; i++)
    ok = ok && isinf(lse[i]) && lse[i] < 0;
  CHECK(ok);
  CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 2, &a, o, lse, d_o, dq, NULL, NULL));
  ok = true;
  for (int i = 0; i < 24; i++)
    ok = ok && dq[i] == 0.0f;
  CHECK(ok);
  /* Sq = 0: dk = dv = 0 */
  a = (loom_flash_attn){.bh = 2, .sq = 0, .sk = 3, .d = 4, .dv = 4, .k = k, .v = v, .scale = 0.5};
  for (int i = 0; i < 64; i++)
    dk[i] = dv[i] = 9.0f;
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 2, &a, NULL, NULL));
  CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 2, &a, NULL, NULL, NULL, NULL, dk, dv));
  ok = true;
  for (int i = 0; i < 24; i++)
    ok = ok && dk[i] == 0.0f && dv[i] == 0.0f;
  CHECK(ok);
  /* n_threads 0: the context's setting */
  a = (loom_flash_attn){
      .bh = 1, .sq = 4, .sk = 4, .d = 4, .dv = 4, .q = q, .k = k, .v = v, .scale = 0.5};
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 0, &a, o, lse));
  CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 0, &a, o, lse, d_o, dq, dk, dv));
}

static void test_errors(loom_ctx *ctx) {
  float x[64] = {0}, o[64], lse[16], g[64];
  loom_flash_attn good = {
      .bh = 1, .sq = 4, .sk = 4, .d = 4, .dv = 4, .q = x, .k = x, .v = x, .scale = 0.5};
  CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 1, &good, o, lse));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, NULL, o, lse));
  loom_flash_attn a = good;
  a.q = NULL;
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
  a = good;
  a.sk = -1;
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
  a = good;
  a.bh = INT64_MAX / 2;
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
  static const double bad_p[] = {1.0, -0.1, 1.5, NAN};
  for (int i = 0; i < 4; i++) {
    a = good;
    a.p = bad_p[i];
    loom_error_clear(ctx);
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
    loom_error_clear(ctx);
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 loom_flash_attn_bwd(ctx, 1, &a, o, lse, g, g, g, g));
  }
  a = good;
  a.scale = INFINITY;
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
  a = good;
  a.impl = 99;
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &a, o, lse));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, -1, &good, o, lse));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &good, NULL, lse));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_flash_attn_bwd(ctx, 1, &good, o, NULL, g, g, g, g)); /* lse needed */
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_flash_attn_bwd(ctx, 1, &good, o, lse, NULL, g, g, g));
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_flash_attn_bwd(ctx, 1, &good, o, lse, g, g, NULL, g));
  /* a NULL context still gets a status */
  CHECK(loom_flash_attn_fwd(NULL, 1, NULL, o, lse) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(!loom_flash_attn_impl_supported(-1) && !loom_flash_attn_impl_supported(99));
  CHECK(loom_flash_attn_impl_supported(LOOM_FLASH_ATTN_IMPL_BEST));
  CHECK(loom_flash_attn_impl_supported(LOOM_FLASH_ATTN_IMPL_PORTABLE));
}

static void test_workspace(void) {
  loom_flash_attn a = {.bh = 8, .sq = 4096, .sk = 4096, .d = 64, .dv = 64, .scale = 0.125};
  int64_t f = loom_flash_attn_workspace_bytes(&a, 2, false);
  int64_t b = loom_flash_attn_workspace_bytes(&a, 2, true);
  int64_t qbytes = a.bh * a.sq * a.d * 4, sbytes = a.bh * a.sq * a.sk * 4;
  CHECK(f > 0 && f < 1 << 20);     /* tiles only */
  CHECK(b > 0 && b <= 2 * qbytes); /* tiles, Di and partial dq: at most ~ one dq */
  CHECK(b < sbytes / 50);          /* never the probabilities */
  a.p = 0.1; /* dropout: the forward keeps its rows' keep bits, 16 bytes per key per thread */
  int64_t fp = loom_flash_attn_workspace_bytes(&a, 2, false);
  CHECK(fp > f && fp <= f + 2 * 16 * a.sk + 256);
  CHECK(loom_flash_attn_workspace_bytes(&a, 2, true) == b);
  a.p = 0.0;
  a.sq = a.sk = 8192;
  CHECK(loom_flash_attn_workspace_bytes(&a, 2, false) == f); /* forward: independent of length */
  CHECK(loom_flash_attn_workspace_bytes(&a, 64, false) > f); /* grows with the threads... */
  a.bh = 1;
  a.sq = 100;
  CHECK(loom_flash_attn_workspace_bytes(&a, 64, false) ==
        loom_flash_attn_workspace_bytes(&a, 1, false)); /* ...that have a task */
  CHECK(loom_flash_attn_workspace_bytes(NULL, 2, false) == 0);
}

/* Operands at strides (loom_flash_attn.at): q, k, v read in place from one
 * [B, T, H, 3, Dh] buffer (a fused QKV projection, head-major) and dq, dk,
 * dv written into another, o written into and d_o read from [B, T, H, Dv]
 * buffers, against contiguous copies
 * of the same operands: bitwise equal o, lse, dq, dk, dv, causal or not,
 * with dropout, on implementation impl; and a lead count whose product is
 * not bh is refused. */
static void test_strided(loom_ctx *ctx, int32_t impl) {
  const int64_t B = 2, H = 3, T = quick ? 37 : 133, DH = 8, BH = B * H;
  const int64_t row = H * 3 * DH, n_qkv = B * T * row, n_o = B * T * H * DH;
  loom_test_rng rng = {0x5eed5 + (uint64_t)impl};
  float *qkv = malloc(sizeof(float) * (size_t)n_qkv), *d_o_s = malloc(sizeof(float) * (size_t)n_o);
  float *o_s = malloc(sizeof(float) * (size_t)n_o), *dqkv = malloc(sizeof(float) * (size_t)n_qkv);
  float *c[4]; /* q, k, v, d_o contiguous [BH, T, DH] */
  for (int i = 0; i < 4; i++) c[i] = malloc(sizeof(float) * (size_t)(BH * T * DH));
  fill(qkv, n_qkv, &rng, -1.0, 1.0);
  fill(d_o_s, n_o, &rng, -1.0, 1.0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t x = 0; x < DH; x++) {
          int64_t cr = ((b * H + h) * T + t) * DH + x;
          for (int w = 0; w < 3; w++) c[w][cr] = qkv[b * T * row + t * row + (h * 3 + w) * DH + x];
          c[3][cr] = d_o_s[((b * T + t) * H + h) * DH + x];
        }
  shape s = {BH, T, T, DH, DH};
  for (int causal = 0; causal < 2; causal++)
    for (int drop = 0; drop < 2; drop++) {
      loom_flash_attn a = {.bh = BH, .sq = T, .sk = T, .d = DH, .dv = DH, .q = c[0], .k = c[1],
                           .v = c[2], .scale = 0.3, .causal = causal, .p = drop ? 0.2 : 0.0,
                           .seed = 7, .j0 = 11, .impl = impl};
      outs want, got;
      outs_alloc(&want, &s);
      outs_alloc(&got, &s);
      run_both(ctx, 2, &a, c[3], &want);
      loom_flash_attn st = a;
      st.q = qkv;
      st.k = qkv + DH;
      st.v = qkv + 2 * DH;
      for (int w = 0; w < LOOM_FA_OPERANDS; w++) {
        loom_flash_attn_layout *l = &st.at[w];
        bool in_qkv = w <= LOOM_FA_V || w >= LOOM_FA_DQ;
        *l = (loom_flash_attn_layout){.n_lead = 2, .lead = {B, H},
                                      .stride = {T * (in_qkv ? row : H * DH), in_qkv ? 3 * DH : DH},
                                      .row = in_qkv ? row : H * DH};
      }
      memset(o_s, 0x7f, sizeof(float) * (size_t)n_o);
      memset(got.lse, 0x7f, sizeof(float) * (size_t)(BH * T));
      CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 2, &st, o_s, got.lse));
      memset(dqkv, 0x7f, sizeof(float) * (size_t)n_qkv);
      CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 2, &st, o_s, got.lse, d_o_s, dqkv, dqkv + DH,
                                        dqkv + 2 * DH));
      for (int64_t b = 0; b < B; b++) /* o, dq, dk, dv back to [BH, T, DH] */
        for (int64_t h = 0; h < H; h++)
          for (int64_t t = 0; t < T; t++) {
            int64_t cr = ((b * H + h) * T + t) * DH, at = b * T * row + t * row + h * 3 * DH;
            memcpy(got.o + cr, o_s + ((b * T + t) * H + h) * DH, sizeof(float) * (size_t)DH);
            memcpy(got.dq + cr, dqkv + at, sizeof(float) * (size_t)DH);
            memcpy(got.dk + cr, dqkv + at + DH, sizeof(float) * (size_t)DH);
            memcpy(got.dv + cr, dqkv + at + 2 * DH, sizeof(float) * (size_t)DH);
          }
      CHECK(outs_same(&want, &got, &s));
      outs_free(&want);
      outs_free(&got);
    }
  loom_flash_attn bad = {.bh = BH, .sq = T, .sk = T, .d = DH, .dv = DH, .q = qkv, .k = qkv,
                         .v = qkv, .scale = 1.0, .impl = impl};
  bad.at[LOOM_FA_K] = (loom_flash_attn_layout){.n_lead = 1, .lead = {BH + 1}, .stride = {1}, .row = 1};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_flash_attn_fwd(ctx, 1, &bad, o_s, NULL));
  for (int i = 0; i < 4; i++) free(c[i]);
  free(qkv);
  free(d_o_s);
  free(o_s);
  free(dqkv);
}

int main(void) {
  const char *qe = getenv("LOOM_TEST_QUICK");
  quick = qe && qe[0] && strcmp(qe, "0") != 0;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  for (int32_t impl = LOOM_FLASH_ATTN_IMPL_PORTABLE; impl < LOOM_FLASH_ATTN_IMPL_COUNT; impl++) {
    if (!loom_flash_attn_impl_supported(impl)) {
      printf("flash attention implementation %d: not supported on this CPU, skipped\n", impl);
      continue;
    }
    test_against_reference(ctx, impl);
    test_strided(ctx, impl);
    for (int causal = 0; causal < 2; causal++) {
      test_finite_differences(ctx, impl, causal, 0.0);
      test_finite_differences(ctx, impl, causal, 0.2);
    }
  }
  test_zero_sizes(ctx);
  test_errors(ctx);
  test_workspace();
  printf("worst relative error against the double reference: %.2g\n", worst_rel);
  loom_ctx_free(ctx);
  return loom_test_finish("test_flash_attention");
}

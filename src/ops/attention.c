/*
 * Fused attention primitives (what the attention pass, passes/attention.c,
 * turns scaled dot-product attention into) and the dropout bitmask:
 *
 *   flash_attention(q, k, v[, base[, mask]][, bias]) -> o, lse
 *   flash_attention_grad(q, k, v, o, lse, d_o[, base[, mask]][, bias])
 *     -> dq, dk, dv[, dbias]
 *   (bias: with the `bias` attribute, the last input, added to the scaled
 *   scores; dbias, its gradient, only when asked for: ops/attention_bias.h)
 *   (without base the counter base is 0: the view fold drops a constant
 *   base, adding it to `offset`, so that no kernel computes it)
 *   dropout_mask([base]) -> bits u8[(numel + 7) / 8]   (overlap: a hint that
 *     the backend may run it concurrently with the work before its users;
 *     bit e is element e of a tensor of `shape`, [numel] if empty, placed
 *     in the logical tensor by whole and at)
 *
 * q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv] with equal leading dims;
 * the attributes are the `attention` composite's (causal, p, seed, offset,
 * scale; scale 0 means 1/sqrt(D)) and so are the semantics: o is the
 * composite's output, lse [..., Sq] the log-sum-exp of each row's scaled,
 * masked scores (-inf for a row that sees no key). Dropout element e (flat
 * index of the [..., Sq, Sk] probabilities) uses counter base + offset +
 * lin(at + j, whole), j its multi-index (rng/piece.h: the probabilities are
 * a piece of a logical [..., Sq, Sk] tensor; whole and at empty: e itself;
 * docs/DROPOUT.md). With `mask` (u8, 1 bit per probability, bit e % 8 of
 * byte e / 8: what dropout_mask writes for the same seed, offset, p, whole
 * and at, over shape [..., Sq, Sk]),
 * the keep decisions are read from it instead of generated: the mask must
 * hold exactly the generated bits, so both forms give the same result.
 * lse carries no gradient.
 *
 * The reference kernels compute in double, row by row, exactly as written
 * above; the cpu kernels are runtime/cpu/flash_attention.c.
 */
#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/composite_util.h"
#include "ops/grad.h"
#include "ops/ops_util.h"
#include "ops/rng_piece.h"
#include "ir/box.h"
#include "ops/attention_bias.h"
#include "ops/attention_views.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>

/* Sizes of an attention node: BH (leading dims flattened), Sq, Sk, D, Dv. */
typedef struct fa_dims {
  int64_t bh, sq, sk, d, dv;
} fa_dims;

static fa_dims dims_of(const loom_type *q, const loom_type *k, const loom_type *v) {
  int32_t r = q->rank;
  fa_dims m = {1, q->shape[r - 2], k->shape[r - 2], q->shape[r - 1], v->shape[r - 1]};
  for (int32_t i = 0; i < r - 2; i++) m.bh *= q->shape[i];
  return m;
}

static loom_status check_base(loom_ctx *ctx, const loom_type *b) {
  char buf[128];
  if ((b->dtype != LOOM_DTYPE_I64 && b->dtype != LOOM_DTYPE_I32) || b->rank != 0)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "base (the dropout counter) must be an i64 or i32 scalar, got %s",
                      loom_type_str(b, buf, sizeof buf));
  return LOOM_STATUS_OK;
}

static loom_status check_mask(loom_ctx *ctx, const loom_type *m, int64_t numel) {
  char buf[128];
  int64_t want = (numel + 7) / 8;
  if (m->dtype != LOOM_DTYPE_U8 || m->rank != 1 || m->shape[0] != want)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "mask must be u8[%lld] (1 bit per probability), got %s", (long long)want,
                      loom_type_str(m, buf, sizeof buf));
  return LOOM_STATUS_OK;
}

/* whole/at place the probabilities [..., Sq, Sk] in the logical tensor. */
static loom_status check_piece(loom_ctx *ctx, const loom_node *n, const loom_type *in) {
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  loom_attention_probs_shape(&in[0], &in[1], &rank, shape);
  loom_rng_piece piece;
  return loom_op_rng_piece(ctx, n, rank, shape, &piece);
}

/* The bias input, if any, against the scores of the logical types lt. */
static loom_status check_bias(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              const loom_type *lt) {
  int32_t b = loom_attention_bias_input(n), rank;
  if (b < 0) return LOOM_STATUS_OK;
  int64_t shape[LOOM_MAX_RANK];
  loom_attention_probs_shape(&lt[0], &lt[1], &rank, shape);
  return loom_attention_check_bias(ctx, &in[b], lt[0].dtype, rank, shape);
}

/* The strided operands' attributes (ops/attention_views.h): dims well
 * formed, each view inside its value; lt: the logical types. n_views:
 * the operands that may have one (3 forward, 5 backward). */
static loom_status check_views(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                               int32_t n_views, loom_type *lt) {
  const loom_ints *dm = &LOOM_ATTR_INTS(n, flash_attention, dims);
  if (!loom_flash_has_views(n)) {
    if (LOOM_ATTR_INTS(n, flash_attention, out_shape).n || LOOM_ATTR_INTS(n, flash_attention, q_at).n ||
        LOOM_ATTR_INTS(n, flash_attention, k_at).n || LOOM_ATTR_INTS(n, flash_attention, v_at).n ||
        LOOM_ATTR_INTS(n, flash_attention, o_at).n || LOOM_ATTR_INTS(n, flash_attention, do_at).n ||
        LOOM_ATTR_INTS(n, flash_attention, dq_at).n || LOOM_ATTR_INTS(n, flash_attention, dk_at).n ||
        LOOM_ATTR_INTS(n, flash_attention, dv_at).n)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "strided operands need 'dims'");
    loom_flash_logical_types(n, in, lt);
    return LOOM_STATUS_OK;
  }
  bool ok = dm->n >= 4;
  for (int32_t d = 0; ok && d < dm->n; d++) ok = dm->v[d] >= 0;
  if (!ok)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "'dims' must be [lead..., Sq, D, Sk, Dv], sizes >= 0");
  loom_flash_logical_types(n, in, lt);
  for (int32_t w = 0; w < n_views; w++) {
    int32_t i = w < 3 ? w : w == LOOM_FLASH_O ? 3 : 5;
    LOOM_TRY(loom_flash_check_view(ctx, n, w, &lt[w], &in[i]));
  }
  return LOOM_STATUS_OK;
}

static loom_status infer_flash(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                               loom_type *out) {
  loom_type lt[LOOM_FLASH_ALL];
  LOOM_TRY(check_views(ctx, n, in, 3, lt));
  if (LOOM_ATTR_INTS(n, flash_attention, do_at).n || LOOM_ATTR_INTS(n, flash_attention, dq_at).n ||
      LOOM_ATTR_INTS(n, flash_attention, dk_at).n || LOOM_ATTR_INTS(n, flash_attention, dv_at).n)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "do_at, dq_at, dk_at, dv_at are the backward's");
  int32_t n_core = loom_attention_core_inputs(n);
  if (n_core < 3 || n_core > 5)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "flash_attention takes q, k, v, [base, [mask]], and a bias only with 'bias'");
  LOOM_TRY(loom_composite_check_attention(ctx, n, lt, n_core > 3 ? &in[3] : NULL));
  LOOM_TRY(check_piece(ctx, n, lt));
  LOOM_TRY(check_bias(ctx, n, in, lt));
  fa_dims m = dims_of(&lt[0], &lt[1], &lt[2]);
  if (n_core > 4) LOOM_TRY(check_mask(ctx, &in[4], m.bh * m.sq * m.sk));
  int32_t r = lt[0].rank;
  out[0] = lt[LOOM_FLASH_O];
  out[1] = lt[0];
  out[1].rank = r - 1; /* lse [..., Sq] */
  const loom_ints *os = &LOOM_ATTR_INTS(n, flash_attention, out_shape);
  if (loom_flash_view_of(n, LOOM_FLASH_O).strided) { /* o placed in a tensor of out_shape */
    out[0].rank = os->n;
    for (int32_t d = 0; d < os->n; d++) out[0].shape[d] = os->v[d];
    bool ok = os->n > 0 && loom_type_numel(&out[0]) == loom_type_numel(&lt[LOOM_FLASH_O]);
    for (int32_t d = 0; ok && d < os->n; d++) ok = os->v[d] >= 0;
    if (!ok)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                        "'out_shape' must hold exactly o's %lld elements",
                        (long long)loom_type_numel(&lt[LOOM_FLASH_O]));
    LOOM_TRY(loom_flash_check_view(ctx, n, LOOM_FLASH_O, &lt[LOOM_FLASH_O], &out[0]));
  } else if (os->n > 0) {
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'out_shape' needs 'o_at'");
  }
  return LOOM_STATUS_OK;
}

/* The backward's outputs: dq, dk, dv, or (dq_at, dk_at, dv_at set) one
 * tensor of out_shape holding all three. */
static loom_status grad_outputs(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                const loom_type *lt, loom_type *out) {
  int32_t placed = 0, db = loom_flash_dbias_output(n);
  if (db >= 0) out[db] = in[loom_attention_bias_input(n)]; /* the bias gradient, last */
  const int32_t n_out = n->n_out - (db >= 0);
  for (int32_t w = LOOM_FLASH_DQ; w < LOOM_FLASH_ALL; w++) placed += loom_flash_view_of(n, w).strided;
  const loom_ints *os = &LOOM_ATTR_INTS(n, flash_attention, out_shape);
  if (placed == 0) {
    if (n_out != 3 || os->n > 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "flash_attention_grad has 3 outputs (dq, dk, dv; with a bias maybe "
                        "its gradient last) and no 'out_shape' unless dq_at, dk_at and dv_at "
                        "place them in one");
    for (int32_t w = 0; w < 3; w++) out[w] = lt[LOOM_FLASH_DQ + w];
    return LOOM_STATUS_OK;
  }
  if (placed != 3 || n_out != 1 || os->n == 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "dq_at, dk_at and dv_at place dq, dk, dv in the one output of 'out_shape': "
                      "all three, one output");
  out[0] = (loom_type){.dtype = lt[0].dtype, .rank = os->n};
  int64_t total = 0;
  for (int32_t d = 0; d < os->n; d++) {
    if (os->v[d] < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'out_shape' has a negative dim");
    out[0].shape[d] = os->v[d];
  }
  for (int32_t w = LOOM_FLASH_DQ; w < LOOM_FLASH_ALL; w++) {
    LOOM_TRY(loom_flash_check_view(ctx, n, w, &lt[w], &out[0]));
    total += loom_type_numel(&lt[w]);
  }
  if (total != loom_type_numel(&out[0]))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "dq, dk, dv (%lld elements) must fill the output of 'out_shape' exactly",
                      (long long)total);
  return LOOM_STATUS_OK;
}

static loom_status infer_flash_grad(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                    loom_type *out) {
  char buf[128];
  loom_type lt[LOOM_FLASH_ALL];
  LOOM_TRY(check_views(ctx, n, in, LOOM_FLASH_N, lt));
  int32_t n_core = loom_attention_core_inputs(n);
  if (n_core < 6 || n_core > 8)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "flash_attention_grad takes q, k, v, o, lse, d_o, [base, [mask]], and a "
                      "bias only with 'bias'");
  LOOM_TRY(loom_composite_check_attention(ctx, n, lt, n_core > 6 ? &in[6] : NULL));
  LOOM_TRY(check_piece(ctx, n, lt));
  LOOM_TRY(check_bias(ctx, n, in, lt));
  fa_dims m = dims_of(&lt[0], &lt[1], &lt[2]);
  loom_type ls = lt[0];
  ls.rank--;
  if (!loom_flash_has_views(n)) {
    const loom_type *want[3] = {&lt[LOOM_FLASH_O], &ls, &lt[LOOM_FLASH_O]};
    static const char *const what[3] = {"o", "lse", "d_o"};
    for (int32_t i = 0; i < 3; i++)
      if (!loom_type_equal(&in[3 + i], want[i]))
        return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "%s must be %s", what[i],
                          loom_type_str(want[i], buf, sizeof buf));
  } else if (!loom_type_equal(&in[4], &ls)) {
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "lse must be %s",
                      loom_type_str(&ls, buf, sizeof buf));
  }
  if (n_core > 7) LOOM_TRY(check_mask(ctx, &in[7], m.bh * m.sq * m.sk));
  return grad_outputs(ctx, n, in, lt, out);
}

/* What the reference kernels share: sizes, scale, dropout. */
typedef struct fa_ref {
  fa_dims m;
  double scale, p;
  bool causal;
  uint64_t seed, j0, thr;
  loom_rng_piece piece;  /* of the probabilities: element e's counter j0 + index(e) */
  const loom_view *mask; /* NULL: generate */
  const loom_view *bias; /* NULL: none; else read at bstride over the scores' dims */
  int32_t rank;          /* the scores' [shape] */
  int64_t shape[LOOM_MAX_RANK], bstride[LOOM_MAX_RANK];
} fa_ref;

static loom_status ref_setup(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                             int32_t n_float, fa_ref *out) {
  int32_t n_core = loom_attention_core_inputs(n), b = loom_attention_bias_input(n);
  const loom_view *base = n_core > n_float ? &in[n_float] : NULL;
  const loom_view *mask = n_core > n_float + 1 ? &in[n_float + 1] : NULL;
  int32_t r = in[0].rank;
  fa_ref f = {.m = {1, in[0].shape[r - 2], in[1].shape[r - 2], in[0].shape[r - 1],
                    in[2].shape[r - 1]}};
  for (int32_t i = 0; i < r - 2; i++) f.m.bh *= in[0].shape[i];
  f.scale = LOOM_ATTR_F(n, flash_attention, scale);
  if (f.scale == 0.0) f.scale = f.m.d > 0 ? 1.0 / sqrt((double)f.m.d) : 1.0;
  f.p = LOOM_ATTR_F(n, flash_attention, p);
  f.causal = LOOM_ATTR_I(n, flash_attention, causal) != 0;
  f.seed = (uint64_t)LOOM_ATTR_I(n, flash_attention, seed);
  f.j0 = (uint64_t)LOOM_ATTR_I(n, flash_attention, offset) +
         (base ? (uint64_t)loom_view_get_i64(base, 0) : 0);
  f.thr = loom_dropout_threshold(f.p);
  f.mask = mask;
  int32_t rank = r;
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r - 1; d++) shape[d] = in[0].shape[d];
  shape[r - 1] = in[1].shape[r - 2];
  LOOM_TRY(loom_op_rng_piece(ctx, n, rank, shape, &f.piece));
  f.rank = rank;
  for (int32_t d = 0; d < rank; d++) f.shape[d] = shape[d];
  if (b >= 0) {
    loom_type bt = {.dtype = in[b].dtype, .rank = in[b].rank};
    for (int32_t d = 0; d < bt.rank; d++) bt.shape[d] = in[b].shape[d];
    loom_attention_bias_strides(&bt, rank, shape, f.bstride);
    f.bias = &in[b];
  }
  *out = f;
  return LOOM_STATUS_OK;
}

/* Element (b, i, j) of a [BH, rows, cols] tensor viewed flat. */
static double at(const loom_view *x, int64_t b, int64_t rows, int64_t cols, int64_t i, int64_t j) {
  return loom_view_get(x, (b * rows + i) * cols + j);
}

/* Flat index in the bias of score (b, i, j). */
static int64_t bias_index(const fa_ref *f, int64_t b, int64_t i, int64_t j) {
  int32_t r = f->rank;
  int64_t e = i * f->bstride[r - 2] + j * f->bstride[r - 1];
  for (int32_t d = r - 3; d >= 0; d--) {
    e += (b % f->shape[d]) * f->bstride[d];
    b /= f->shape[d];
  }
  return e;
}

static bool visible(const fa_ref *f, int64_t i, int64_t j) {
  return !f->causal || j <= i + (f->m.sk - f->m.sq);
}

/* The dropout factor of probability (b, i, j): 0 or 1 / (1 - p). */
static double keep_factor(const fa_ref *f, int64_t b, int64_t i, int64_t j) {
  if (f->p <= 0.0) return 1.0;
  int64_t e = (b * f->m.sq + i) * f->m.sk + j;
  bool keep = f->mask ? ((int64_t)loom_view_get(f->mask, e / 8) >> (e % 8)) & 1
                      : loom_dropout_keep(f->seed, f->j0 + loom_rng_piece_index(&f->piece, e),
                                          f->thr);
  return keep ? 1.0 / (1.0 - f->p) : 0.0;
}

/* Row (b, i) of the scaled, masked scores into s (Sk doubles); returns
 * their maximum. */
static double row_scores(const fa_ref *f, const loom_view *q, const loom_view *k, int64_t b,
                         int64_t i, double *s) {
  const fa_dims *m = &f->m;
  double mx = -INFINITY;
  for (int64_t j = 0; j < m->sk; j++) {
    double dot = 0;
    for (int64_t c = 0; c < m->d; c++) dot += at(q, b, m->sq, m->d, i, c) * at(k, b, m->sk, m->d, j, c);
    double bias = f->bias ? loom_view_get(f->bias, bias_index(f, b, i, j)) : 0.0;
    s[j] = visible(f, i, j) ? f->scale * dot + bias : -INFINITY;
    if (s[j] > mx) mx = s[j];
  }
  return mx;
}

/* Row (b, i): probabilities P[j] (NaN for a row that sees no key) and its
 * log-sum-exp (-inf then). s is scratch of Sk doubles. */
static double row_probs(const fa_ref *f, const loom_view *q, const loom_view *k, int64_t b,
                        int64_t i, double *s) {
  const fa_dims *m = &f->m;
  double mx = row_scores(f, q, k, b, i, s);
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < m->sk; j++) s[j] = NAN;
    return -INFINITY;
  }
  double sum = 0;
  for (int64_t j = 0; j < m->sk; j++) sum += exp(s[j] - mx);
  for (int64_t j = 0; j < m->sk; j++) s[j] = exp(s[j] - mx) / sum;
  return mx + log(sum);
}

typedef loom_status (*ref_fn)(loom_ctx *, const loom_node *, const loom_view *,
                              const loom_view *);

static loom_type type_of(const loom_view *v) {
  loom_type t = {.dtype = v->dtype, .rank = v->rank};
  for (int32_t d = 0; d < v->rank; d++) t.shape[d] = v->shape[d];
  return t;
}

/* Copies a strided operand view element by element (flat index order). */
static void copy_flat(const loom_view *dst, const loom_view *src) {
  int64_t numel = loom_view_numel(dst);
  for (int64_t e = 0; e < numel; e++) loom_view_set(dst, e, loom_view_get(src, e));
}

/* A node with strided operands (attention_views.h): fn on contiguous
 * copies of them, the forward's o placed into its output afterwards. */
static loom_status ref_strided(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                               const loom_view *out, ref_fn fn) {
  bool grad = n->op == LOOM_OP_FLASH_ATTENTION_GRAD;
  loom_type it[LOOM_PART_MAX_IO], lt[LOOM_FLASH_ALL];
  loom_view vin[LOOM_PART_MAX_IO], vout[4];
  for (int32_t i = 0; i < n->n_in; i++) it[i] = type_of(&in[i]), vin[i] = in[i];
  for (int32_t o = 0; o < n->n_out; o++) vout[o] = out[o];
  if (loom_flash_dbias_output(n) >= 0) vout[3] = out[loom_flash_dbias_output(n)];
  loom_flash_logical_types(n, it, lt);
  void *buf[LOOM_FLASH_ALL] = {NULL};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t w = 0; w < LOOM_FLASH_ALL && !st; w++) {
    bool is_out = (w == LOOM_FLASH_O && !grad) || w >= LOOM_FLASH_DQ;
    if ((!grad && w > LOOM_FLASH_O) || !loom_flash_view_of(n, w).strided) continue;
    int32_t i = w < 3 ? w : w == LOOM_FLASH_O ? 3 : 5;
    buf[w] = malloc((size_t)loom_type_numel(&lt[w]) * loom_dtype_size(lt[w].dtype) + 1);
    if (!buf[w]) {
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "%s: out of memory", loom_op_name(n->op));
      break;
    }
    loom_view c = loom_view_of(&lt[w], buf[w]);
    if (is_out) {
      vout[w >= LOOM_FLASH_DQ ? w - LOOM_FLASH_DQ : 0] = c;
    } else {
      loom_view src = loom_flash_operand(n, w, &lt[w], &in[i]);
      copy_flat(&c, &src);
      vin[i] = c;
    }
  }
  if (!st) st = fn(ctx, n, vin, vout);
  for (int32_t w = LOOM_FLASH_O; w < LOOM_FLASH_ALL && !st; w++) {
    if (!buf[w] || (w == LOOM_FLASH_O && grad) || w == LOOM_FLASH_DO) continue;
    loom_view dst = loom_flash_operand(n, w, &lt[w], &out[0]);
    copy_flat(&dst, &vout[w >= LOOM_FLASH_DQ ? w - LOOM_FLASH_DQ : 0]);
  }
  for (int32_t w = 0; w < LOOM_FLASH_ALL; w++) free(buf[w]);
  return st;
}

static loom_status ref_flash_plain(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                   const loom_view *out);

static loom_status ref_flash(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                             const loom_view *out) {
  if (loom_flash_has_views(n)) return ref_strided(ctx, n, in, out, ref_flash_plain);
  return ref_flash_plain(ctx, n, in, out);
}

static loom_status ref_flash_plain(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                   const loom_view *out) {
  fa_ref f;
  LOOM_TRY(ref_setup(ctx, n, in, 3, &f));
  const fa_dims *m = &f.m;
  double *s = malloc(sizeof *s * (size_t)(m->sk + 1));
  if (!s) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "flash_attention: out of memory");
  for (int64_t b = 0; b < m->bh; b++)
    for (int64_t i = 0; i < m->sq; i++) {
      double lse = row_probs(&f, &in[0], &in[1], b, i, s);
      loom_view_set(&out[1], b * m->sq + i, m->sk > 0 ? lse : -INFINITY);
      for (int64_t c = 0; c < m->dv; c++) {
        double acc = 0;
        for (int64_t j = 0; j < m->sk; j++)
          acc += s[j] * keep_factor(&f, b, i, j) * at(&in[2], b, m->sk, m->dv, j, c);
        loom_view_set(&out[0], (b * m->sq + i) * m->dv + c, acc);
      }
    }
  free(s);
  return LOOM_STATUS_OK;
}

/* P = exp(S - lse) from the given lse (the forward's: then P is the
 * softmax); dS = P (dP - D) with D = rowsum(dO o) over visible keys (masked
 * ones get no gradient, as through the composite's select); dv = Pd^T dO
 * over every key (a row that sees no key has lse -inf and spreads NaN, as
 * the composite's gradient does). */
static loom_status ref_flash_grad_plain(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                        const loom_view *out) {
  fa_ref f;
  LOOM_TRY(ref_setup(ctx, n, in, 6, &f));
  const fa_dims *m = &f.m;
  const loom_view *q = &in[0], *k = &in[1], *v = &in[2], *o = &in[3], *d_o = &in[5];
  int64_t nk = m->bh * m->sk * m->d, nv = m->bh * m->sk * m->dv;
  double *s = malloc(sizeof *s * (size_t)(m->sk + 1));
  double *dk = calloc((size_t)(nk + 1), sizeof *dk), *dv = calloc((size_t)(nv + 1), sizeof *dv);
  /* the bias gradient: out[3] here (ref_strided puts it there) */
  int64_t nb = loom_flash_dbias_output(n) >= 0 ? loom_view_numel(&out[3]) : 0;
  double *db = calloc((size_t)(nb + 1), sizeof *db);
  if (!s || !dk || !dv || !db) {
    free(s);
    free(dk);
    free(dv);
    free(db);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "flash_attention_grad: out of memory");
  }
  for (int64_t b = 0; b < m->bh; b++)
    for (int64_t i = 0; i < m->sq; i++) {
      row_scores(&f, q, k, b, i, s);
      double lse = loom_view_get(&in[4], b * m->sq + i);
      for (int64_t j = 0; j < m->sk; j++) s[j] = exp(s[j] - lse);
      double dsum = 0; /* D = sum_c dO O */
      for (int64_t c = 0; c < m->dv; c++)
        dsum += at(d_o, b, m->sq, m->dv, i, c) * at(o, b, m->sq, m->dv, i, c);
      for (int64_t c = 0; c < m->d; c++) loom_view_set(&out[0], (b * m->sq + i) * m->d + c, 0.0);
      for (int64_t j = 0; j < m->sk; j++) {
        double kf = keep_factor(&f, b, i, j), dp = 0;
        for (int64_t c = 0; c < m->dv; c++) {
          double g = at(d_o, b, m->sq, m->dv, i, c);
          dp += g * at(v, b, m->sk, m->dv, j, c);
          if (kf != 0.0) dv[(b * m->sk + j) * m->dv + c] += s[j] * kf * g; /* dropped: 0 */
        }
        if (!visible(&f, i, j)) continue;
        double ds = s[j] * (dp * kf - dsum);
        if (nb) db[bias_index(&f, b, i, j)] += ds;
        for (int64_t c = 0; c < m->d; c++) {
          int64_t qi = (b * m->sq + i) * m->d + c;
          loom_view_set(&out[0], qi,
                        loom_view_get(&out[0], qi) + f.scale * ds * at(k, b, m->sk, m->d, j, c));
          dk[(b * m->sk + j) * m->d + c] += f.scale * ds * at(q, b, m->sq, m->d, i, c);
        }
      }
    }
  for (int64_t e = 0; e < nk; e++) loom_view_set(&out[1], e, dk[e]);
  for (int64_t e = 0; e < nv; e++) loom_view_set(&out[2], e, dv[e]);
  for (int64_t e = 0; e < nb; e++) loom_view_set(&out[3], e, db[e]);
  free(s);
  free(dk);
  free(dv);
  free(db);
  return LOOM_STATUS_OK;
}

static loom_status ref_flash_grad(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                                  const loom_view *out) {
  if (loom_flash_has_views(n)) return ref_strided(ctx, n, in, out, ref_flash_grad_plain);
  return ref_flash_grad_plain(ctx, n, in, out);
}

static void grad_flash(loom_graph *g, const loom_node *n, const int32_t *dout, int32_t *din) {
  if (dout[0] < 0 || g->err) return; /* lse carries no gradient */
  if (loom_flash_has_views(n)) { /* the fold runs after autodiff, never before */
    g->err = loom_error(g->ctx, LOOM_STATUS_UNSUPPORTED,
                        "flash_attention with strided operands has no gradient rule");
    return;
  }
  int32_t in[9] = {n->in[0], n->in[1], n->in[2], n->out[0], n->out[1], dout[0], -1, -1, -1};
  int32_t n_in = 6, out[4] = {-1, -1, -1, -1}, bias = loom_attention_bias_input(n);
  for (int32_t i = 3; i < n->n_in; i++) in[n_in++] = n->in[i]; /* base, mask, bias */
  loom_attr_value attrs[LOOM_MAX_ATTRS];
  /* One layout (ops/attrs.h); copied, since adding to g may move n. */
  for (int32_t a = 0; a < LOOM_ATTR_COUNT(flash_attention); a++)
    attrs[a] = n->attr[a];
  /* dbias always (autodiff passes it on only to a bias that needs it);
   * the view fold drops it when nothing reads it */
  lb_op_multi(g, LOOM_OP_FLASH_ATTENTION_GRAD, n_in, in, attrs, bias >= 0 ? 4 : 3, out);
  for (int32_t i = 0; i < 3; i++) din[i] = out[i];
  if (bias >= 0) din[bias] = out[3];
}

/* Batch and head dims (every dim before Sq) spatial in every operand and
 * result that has them; Sq, Sk, D whole. A sub-op draws its piece of the
 * logical probabilities through whole/at (sub_attrs below). With a mask
 * input (an RNG placement, made after the plan) the bits are the node's
 * own, flat: replicate only. A bias carries the label of each leading dim
 * it has in full (a dim it repeats along stays whole: every sub-op reads
 * it all); its gradient, which sums over those dims, would be partial, so
 * a backward with one splits only when the bias has every leading dim.
 * The attention composite shares both. */
void loom_partition_attention(const loom_node *n, const loom_type *in, const loom_type *out,
                              loom_partition *p) {
  int32_t n_float_in = n->op == LOOM_OP_FLASH_ATTENTION_GRAD ? 6 : 3, n_out = n->n_out;
  int32_t bias = loom_attention_bias_input(n), db = loom_flash_dbias_output(n);
  loom_partition_init(p, n->n_in, n_out);
  for (int32_t i = 0; i < n->n_in; i++)
    for (int32_t d = 0; d < in[i].rank; d++) p->in[i][d] = -1;
  for (int32_t o = 0; o < n_out; o++)
    for (int32_t d = 0; d < out[o].rank; d++) p->out[o][d] = -1;
  /* strided operands (a cpu program's own form): replicated */
  if (loom_attention_core_inputs(n) > n_float_in + 1 || loom_flash_has_views(n)) return;
  const int32_t lead = in[0].rank - 2, skip = bias >= 0 ? in[0].rank - in[bias].rank : 0;
  bool full = true; /* the bias has every leading dim */
  for (int32_t d = 0; bias >= 0 && d < lead; d++)
    full = full && d >= skip && in[bias].shape[d - skip] == in[0].shape[d];
  if (db >= 0 && !full) return;
  for (int32_t d = 0; d < lead; d++) {
    int32_t l = loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    for (int32_t i = 0; i < n_float_in; i++) p->in[i][d] = (int8_t)l;
    for (int32_t o = 0; o < n_out; o++)
      if (o != db) p->out[o][d] = (int8_t)l;
    if (bias >= 0 && d >= skip && in[bias].shape[d - skip] == in[0].shape[d]) {
      p->in[bias][d - skip] = (int8_t)l;
      if (db >= 0) p->out[db][d - skip] = (int8_t)l;
    }
  }
}

/* The sub-op reads q's box in_box[0] and k's in_box[1]: its probabilities
 * are the box (q's leading dims and rows, k's rows) of the node's. */
loom_status loom_sub_attrs_attention(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                     const loom_type *out, const struct loom_vbox *in_box,
                                     const struct loom_vbox *out_box, loom_attr_value *attrs) {
  (void)ctx;
  (void)out;
  (void)out_box;
  int32_t rank;
  int64_t own[LOOM_MAX_RANK], start[LOOM_MAX_RANK];
  loom_attention_probs_shape(&in[0], &in[1], &rank, own);
  for (int32_t d = 0; d < rank - 1; d++) start[d] = in_box[0].start[d];
  start[rank - 1] = in_box[1].start[rank - 2];
  loom_rng_piece_sub_attrs(n, rank, own, start, attrs);
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_flash_attention = {
    .name = "flash_attention",
    .cls = LOOM_OPCLASS_ATTENTION,
    .min_in = 3,
    .max_in = 6,
    .n_out = 2,
    .n_attrs = LOOM_ATTR_COUNT(flash_attention),
    .attrs = LOOM_ATTR_SPECS(flash_attention),
    .infer = infer_flash,
    .ref = ref_flash,
    .grad = grad_flash,
    .partition = loom_partition_attention,
    .sub_attrs = loom_sub_attrs_attention,
};

const loom_op_def loom_opdef_flash_attention_grad = {
    .name = "flash_attention_grad",
    .cls = LOOM_OPCLASS_ATTENTION,
    .min_in = 6,
    .max_in = 9,
    .n_out = -1, /* 3, 4 with dbias, or 1 with dq_at, dk_at, dv_at (ops/attention_views.h) */
    .n_attrs = LOOM_ATTR_COUNT(flash_attention_grad),
    .attrs = LOOM_ATTR_SPECS(flash_attention_grad),
    .infer = infer_flash_grad,
    .ref = ref_flash_grad,
    .partition = loom_partition_attention,
    .sub_attrs = loom_sub_attrs_attention,
};

/* ---- dropout_mask --------------------------------------------------------- */

static loom_status infer_mask(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                              loom_type *out) {
  double p = LOOM_ATTR_F(n, dropout_mask, p);
  int64_t numel = LOOM_ATTR_I(n, dropout_mask, numel);
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'p' must satisfy 0 <= p < 1, got %g", p);
  if (numel < 0 || numel > INT64_MAX - 7)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'numel' must be >= 0, got %lld",
                      (long long)numel);
  if (n->n_in > 0) LOOM_TRY(check_base(ctx, &in[0]));
  const loom_ints *shape = &LOOM_ATTR_INTS(n, dropout_mask, shape);
  if (shape->n > 0) {
    int64_t count = 1;
    for (int32_t d = 0; d < shape->n; d++) {
      if (shape->v[d] < 0)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "'shape' has a negative dim %lld",
                          (long long)shape->v[d]);
      count = shape->v[d] && count > INT64_MAX / shape->v[d] ? -1 : count * shape->v[d];
    }
    if (count != numel)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "'shape' has %lld elements, 'numel' is %lld", (long long)count,
                        (long long)numel);
  }
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  loom_dropout_mask_shape(n, &rank, dims);
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(ctx, n, rank, dims, &piece));
  out[0] = (loom_type){.dtype = LOOM_DTYPE_U8, .rank = 1, .shape = {(numel + 7) / 8}};
  return LOOM_STATUS_OK;
}

static loom_status ref_mask(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  loom_dropout_mask_shape(n, &rank, dims);
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(ctx, n, rank, dims, &piece));
  uint64_t j0 = (uint64_t)LOOM_ATTR_I(n, dropout_mask, offset);
  if (n->n_in > 0) j0 += (uint64_t)loom_view_get_i64(&in[0], 0);
  uint64_t seed = (uint64_t)LOOM_ATTR_I(n, dropout_mask, seed),
           thr = loom_dropout_threshold(LOOM_ATTR_F(n, dropout_mask, p));
  int64_t numel = LOOM_ATTR_I(n, dropout_mask, numel);
  for (int64_t byte = 0; byte < (numel + 7) / 8; byte++) {
    int v = 0;
    for (int64_t b = 0; b < 8 && byte * 8 + b < numel; b++)
      v |= loom_dropout_keep(seed, j0 + loom_rng_piece_index(&piece, byte * 8 + b), thr) << b;
    loom_view_set(&out[0], byte, (double)v);
  }
  return LOOM_STATUS_OK;
}

const loom_op_def loom_opdef_dropout_mask = {
    .name = "dropout_mask",
    .cls = LOOM_OPCLASS_RNG,
    .min_in = 0,
    .max_in = 1,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(dropout_mask),
    .attrs = LOOM_ATTR_SPECS(dropout_mask),
    .infer = infer_mask,
    .ref = ref_mask,
};

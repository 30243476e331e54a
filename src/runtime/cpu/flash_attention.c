/*
 * Flash attention on the CPU: forward and backward over tiles, with the
 * online softmax, the causal mask and Philox dropout (flash_attention.h).
 *
 * Every tile product is C (+)= A B with B row-major (the forward
 * transposes each task's Q once, the backward K and V once per key block;
 * A may be read transposed), done by one kernel: each element of C is
 * summed over k in order in one accumulator, so a product does not depend
 * on how it is blocked. The forward keeps its scores transposed (queries
 * as vector lanes), so its softmax works down columns; the backward's
 * element-wise work (exp, masks, dS) runs along rows. Two sets of tile
 * kernels (flash_attention_kernels.c): AVX-512F
 * intrinsics (per-function target attributes, called only after
 * __builtin_cpu_supports) and plain C for the baseline ISA.
 *
 * Why not dnnl_sgemm per tile (as runtime/cpu/gemm.c): measured on the
 * development machine (AVX-512, one thread, CPU time, BH 8, D 64), the
 * register-blocked kernel here is faster end to end: forward 106 / 113 / 120
 * / 119 GFLOP/s against 94 / 105 / 106 / 100 with sgemm at Sq = Sk = 512 /
 * 1024 / 2048 / 4096, backward 10-12% faster; and it needs no care about
 * oneDNN's own threading.
 */
#include "runtime/cpu/flash_attention.h"
#include "runtime/cpu/flash_attention_kernels.h"

#include "rng/philox.h"
#include "rng/philox_fast.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>


/* Tile sizes (fixed: they decide the summation order, never the thread
 * count). Forward: FWD_BR query rows per task, FWD_BC keys per block,
 * FWD_BN query rows (vector lanes) per strip: the transposed scores of a
 * strip (FWD_BC x FWD_BN) stay in L1. Backward: BWD_BC keys per block,
 * BWD_BR query rows per step. Chosen by measurement at Sq = Sk = 1024,
 * D = 64 (64 x 128 backward tiles: 128-key runs also make the Philox words
 * cheaper per element than 64-key runs). */
#define FWD_BR 128
#define FWD_BN 32
#define FWD_BC 128
#define BWD_BR 64
#define BWD_BC 128
/* The backward's causal products go by strips of this many rows (the tile
 * kernel's register block), each over the keys or rows it needs. */
#define BWD_STRIP 8
_Static_assert(FWD_BC % 32 == 0 && FWD_BN <= FWD_BR, "key blocks start on a word of keep bits");
/* The backward splits each bh's key blocks over enough chunks (tasks) to
 * give at least this many tasks, each with its own partial dq. */
#define BWD_MIN_TASKS 16

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* Floats, rounded up to a 64-byte multiple. */
static int64_t up16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* ---- shared pieces ------------------------------------------------------------ */

/* Everything a task needs besides its buffers. */
typedef struct fa_run {
  loom_flash_attn args;     /* the caller's, with a dummy for NULL empty tensors */
  const loom_flash_attn *a; /* &args */
  const fa_kernels *kn;
  bool drop;        /* p > 0 */
  uint64_t thr;     /* loom_dropout_threshold(p) */
  float inv_keep;   /* 1 / (1 - p) as float (backward) */
  double inv_keepd; /* 1 / (1 - p) (forward's final scaling) */
  int64_t off;      /* Sk - Sq: row i sees keys j <= i + off when causal */
} fa_run;

/* Number of keys query row i sees: min(Sk, i + off + 1) when causal (may be
 * <= 0: the row sees none), Sk otherwise. */
static int64_t row_limit(const fa_run *R, int64_t i) {
  return R->a->causal ? min64(R->a->sk, i + R->off + 1) : R->a->sk;
}

/* Element offset of bh's first row of an operand of `rows` rows of `width`
 * (flash_attention.h: loom_flash_attn_layout), and the offset from one row
 * to the next. */
static int64_t op_off(const loom_flash_attn_layout *l, int64_t bh, int64_t rows, int64_t width) {
  if (l->n_lead == 0) return bh * rows * width;
  int64_t off = 0;
  for (int32_t i = l->n_lead - 1; i >= 0; i--) {
    off += (bh % l->lead[i]) * l->stride[i];
    bh /= l->lead[i];
  }
  return off;
}

/* The bias row of query i of bh (its element for key j at [j * bias_col]). */
static const float *bias_row(const loom_flash_attn *a, int64_t bh, int64_t i) {
  const loom_flash_attn_layout *l = &a->bias_at;
  int64_t off = i * l->row;
  for (int32_t d = l->n_lead - 1; d >= 0; d--) {
    off += (bh % l->lead[d]) * l->stride[d];
    bh /= l->lead[d];
  }
  return a->bias + off;
}

static int64_t op_ld(const loom_flash_attn_layout *l, int64_t width) {
  return l->n_lead ? l->row : width;
}

/* dst bit k = bit e0 + k of src, for k < n (n >= 1); the last byte's unused
 * bits are 0. Reads only the bytes holding bits e0 .. e0 + n - 1. */
static void bits_extract(const uint8_t *src, uint64_t e0, int64_t n, uint8_t *dst) {
  uint64_t byte = e0 >> 3, last = (e0 + (uint64_t)n - 1) >> 3;
  unsigned sh = (unsigned)(e0 & 7);
  int64_t nb = (n + 7) / 8;
  for (int64_t b = 0; b < nb; b++) {
    unsigned v = (unsigned)src[byte + (uint64_t)b] >> sh;
    if (sh && byte + (uint64_t)b + 1 <= last)
      v |= (unsigned)src[byte + (uint64_t)b + 1] << (8 - sh);
    dst[b] = (uint8_t)v;
  }
  if (n & 7) dst[nb - 1] &= (uint8_t)((1u << (n & 7)) - 1);
}

/* The keep bits of n consecutive elements from flat index e0 into buf
 * (all in one row: a piece's runs are whole rows, so their counters are
 * consecutive too). */
static const uint8_t *row_bits(const fa_run *R, int64_t e0, int64_t n, uint8_t *buf) {
  const loom_flash_attn *a = R->a;
  if (a->mask_bits)
    bits_extract(a->mask_bits, (uint64_t)e0, n, buf);
  else
    loom_dropout_mask_bits(a->seed,
                           a->j0 + (a->piece ? loom_rng_piece_index(a->piece, e0) : (uint64_t)e0),
                           n, R->thr, buf);
  return buf;
}

/* ---- forward ------------------------------------------------------------------ */

/* Bytes of keep bits per query row in the forward (a 64-byte multiple). */
static int64_t fwd_bits_stride(const loom_flash_attn *a) {
  return ((a->sk + 7) / 8 + 63) & ~(int64_t)63;
}

/* Per-thread floats of the forward: Q^T, a strip's S^T, O, the running
 * max, the row sums (double) and the final factors per query row, and with
 * dropout the keep bits of the task's rows over all keys (made once per
 * task: long runs make Philox words cheaper, 0.39 against 0.53 ns per
 * element for 128-key runs, measured) plus a word of slack. */
static int64_t fwd_thread_floats(const loom_flash_attn *a) {
  return up16(a->d * FWD_BR) + up16(FWD_BC * FWD_BN) + up16(FWD_BR * a->dv) + up16(FWD_BR) +
         up16(2 * FWD_BR) +
         (a->p > 0.0 ? FWD_BR * fwd_bits_stride(a) / 4 + 16 : 0);
}

/* One task: FWD_BR query rows of one bh. The scores are computed
 * transposed, S^T = K Qs^T (keys as rows, queries as vector lanes), so the
 * online softmax's max, exp and sums run down columns, lane-parallel, with
 * no per-row reductions; O += P V reads P^T as its broadcast operand, so
 * nothing is transposed back. Strips of FWD_BN queries keep the scores in
 * L1, and causal strips stop at the last key their last query sees. */
static void fwd_task(const fa_run *R, int64_t bh, int64_t q0, float *ws, float *o, float *lse) {
  const loom_flash_attn *a = R->a;
  const fa_kernels *kn = R->kn;
  const int64_t D = a->d, DV = a->dv, SQ = a->sq, SK = a->sk;
  const int64_t r = min64(FWD_BR, SQ - q0);
  float *qt = ws, *st = qt + up16(D * FWD_BR), *acc = st + up16(FWD_BC * FWD_BN);
  float *mx = acc + up16(FWD_BR * DV);
  double *l = (double *)(void *)(mx + up16(FWD_BR));
  uint8_t *bits = (uint8_t *)(void *)(mx + up16(FWD_BR) + up16(2 * FWD_BR));

  const int64_t bstride = fwd_bits_stride(a);
  const int64_t ldq = op_ld(&a->at[LOOM_FA_Q], D), ldk = op_ld(&a->at[LOOM_FA_K], D);
  const int64_t ldv = op_ld(&a->at[LOOM_FA_V], DV), ldo = op_ld(&a->at[LOOM_FA_O], DV);
  const float *kbh = a->k + op_off(&a->at[LOOM_FA_K], bh, SK, D);
  const float *vbh = a->v + op_off(&a->at[LOOM_FA_V], bh, SK, DV);
  kn->transpose(r, D, a->q + op_off(&a->at[LOOM_FA_Q], bh, SQ, D) + q0 * ldq, ldq, qt, FWD_BR);
  /* a positive scale goes into the exponent (as the max): one pass fewer;
   * not with a bias, which adds to the scaled scores */
  const bool prescale = a->bias || !(a->scale > 0.0);
  const float mul = prescale ? 1.0f : (float)a->scale;
  if (prescale)
    for (int64_t x = 0; x < D; x++)
      kn->scale(qt + x * FWD_BR, r, a->scale, qt + x * FWD_BR);
  for (int64_t i = 0; i < r; i++) {
    mx[i] = -INFINITY;
    l[i] = 0.0;
    /* the keep bits of every key the row sees (all keys for a row that sees
     * none: its output depends on whether any is kept); the rest of the
     * row's words is read, so zeroed */
    const int64_t lim = row_limit(R, q0 + i);
    if (!R->drop) continue;
    memset(bits + i * bstride, 0, (size_t)bstride);
    row_bits(R, (bh * SQ + q0 + i) * SK, lim > 0 ? lim : SK, bits + i * bstride);
  }
  memset(acc, 0, sizeof(float) * (size_t)(r * DV));
  const int64_t kend = row_limit(R, q0 + r - 1); /* the last row sees the most keys */
  for (int64_t kb = 0; kb < kend; kb += FWD_BC) {
    const int64_t c = min64(FWD_BC, kend - kb);
    for (int64_t i1 = 0; i1 < r; i1 += FWD_BN) {
      const int64_t w = min64(FWD_BN, r - i1);
      const int64_t cs = min64(c, row_limit(R, q0 + i1 + w - 1) - kb); /* keys the strip sees */
      if (cs <= 0) continue;
      /* S^T; causal: per 16 lanes, each up to the last key its last lane
       * sees (the keys past it are set to -inf below) */
      const int64_t hw = a->causal ? 16 : w;
      for (int64_t h = 0; h < w; h += hw) {
        const int64_t ch = min64(cs, row_limit(R, q0 + i1 + min64(w, h + hw) - 1) - kb);
        if (ch > 0)
          kn->gemm(ch, min64(hw, w - h), D, kbh + kb * ldk, ldk, 1, qt + i1 + h, FWD_BR, st + h,
                   FWD_BN, false);
      }
      if (a->bias) /* the keys past a lane's causal limit get -inf below */
        kn->col_bias(st, FWD_BN, cs, w, bias_row(a, bh, q0 + i1) + kb * a->bias_col,
                     a->bias_at.row, a->bias_col);
      /* key kb + j is past query q0 + i1 + i's limit when i < t0 + j */
      const int64_t t0 = kb - (q0 + i1) - R->off;
      if (a->causal && t0 + cs - 1 > 0) kn->col_causal(st, FWD_BN, cs, w, t0);
      float smax[FWD_BN], sub[FWD_BN], sum[FWD_BN];
      for (int64_t i = 0; i < w; i++)
        smax[i] = -INFINITY;
      kn->col_max(st, FWD_BN, cs, w, smax);
      for (int64_t i = 0; i < w; i++) {
        const float mold = mx[i1 + i], ms = mul * smax[i];
        const float mnew = ms > mold ? ms : mold;
        mx[i1 + i] = mnew;
        sub[i] = mnew == -INFINITY ? 0.0f : mnew; /* sees no key yet: exp(-inf) = 0 */
        if (mnew != mold && mold != -INFINITY) {
          double al = exp((double)mold - (double)mnew);
          l[i1 + i] *= al;
          kn->scale(acc + (i1 + i) * DV, DV, al, acc + (i1 + i) * DV);
        }
      }
      kn->col_exp_sum(st, FWD_BN, cs, w, mul, sub, sum);
      for (int64_t i = 0; i < w; i++)
        l[i1 + i] += sum[i];
      if (R->drop) kn->col_mask(st, FWD_BN, cs, w, bits + i1 * bstride, bstride, kb, 1.0f);
      for (int64_t h = 0; h < w; h += hw) { /* O += P V, over the keys each lane group sees */
        const int64_t ch = min64(cs, row_limit(R, q0 + i1 + min64(w, h + hw) - 1) - kb);
        if (ch > 0)
          kn->gemm(min64(hw, w - h), DV, ch, st + h, 1, FWD_BN, vbh + kb * ldv, ldv,
                   acc + (i1 + h) * DV, DV, true);
      }
    }
  }
  float *obh = o + op_off(&a->at[LOOM_FA_O], bh, SQ, DV) + q0 * ldo;
  for (int64_t i = 0; i < r; i++) {
    if (row_limit(R, q0 + i) <= 0) continue;
    kn->scale(acc + i * DV, DV, R->inv_keepd / l[i], obh + i * ldo);
    if (lse) lse[bh * SQ + q0 + i] = (float)((double)mx[i] + log(l[i]));
  }
  for (int64_t i = 0; i < r && row_limit(R, q0 + i) <= 0; i++) {
    /* Sees no key. The composite's probabilities are 0/0 = NaN; dropout
     * zeroes the dropped ones, so the row is NaN unless every key is
     * dropped (then 0). */
    float fill = NAN;
    if (R->drop) {
      bool any = false;
      for (int64_t x = 0; x < (SK + 7) / 8; x++)
        any |= bits[i * bstride + x] != 0;
      if (!any) fill = 0.0f;
    }
    for (int64_t x = 0; x < DV; x++)
      obh[i * ldo + x] = fill;
    if (lse) lse[bh * SQ + q0 + i] = -INFINITY;
  }
}

/* ---- checks and setup -------------------------------------------------------------- */

/* Stands in for the NULL pointer of an empty tensor (never read or written). */
static float fa_dummy[16];

static bool mul_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* Checks a (sizes, pointers of non-empty tensors, scale, p, impl) and the
 * thread count; fills R and the resolved thread count. */
static loom_status fa_setup(loom_ctx *ctx, const char *fn, int32_t n_threads,
                            const loom_flash_attn *a, fa_run *R, int32_t *nt) {
  if (!a) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: NULL arguments", fn);
  if (a->bh < 0 || a->sq < 0 || a->sk < 0 || a->d < 0 || a->dv < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: sizes must be >= 0, got bh %lld, sq %lld, sk %lld, d %lld, dv %lld", fn,
                      (long long)a->bh, (long long)a->sq, (long long)a->sk, (long long)a->d,
                      (long long)a->dv);
  int64_t t, n_qk, n_q, n_k, n_v, n_o;
  if (!mul_ok(a->bh, a->sq, &t) || !mul_ok(t, a->sk, &n_qk) || !mul_ok(t, a->d, &n_q) ||
      !mul_ok(t, a->dv, &n_o) || !mul_ok(a->bh, a->sk, &t) || !mul_ok(t, a->d, &n_k) ||
      !mul_ok(t, a->dv, &n_v) || n_qk > INT64_MAX / 8)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: sizes overflow 64 bits", fn);
  if ((n_q && !a->q) || (n_k && !a->k) || (n_v && !a->v))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: q, k or v is NULL", fn);
  (void)n_o;
  if (!isfinite(a->scale))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: scale must be finite, got %g", fn,
                      a->scale);
  if (!(a->p >= 0.0 && a->p < 1.0))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: dropout p must be in [0, 1), got %g",
                      fn, a->p);
  if (a->impl < 0 || a->impl >= LOOM_FLASH_ATTN_IMPL_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: unknown implementation %d", fn,
                      (int)a->impl);
  if (!loom_flash_attn_impl_supported(a->impl))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: implementation %d is not supported on this CPU", fn, (int)a->impl);
  for (int32_t w = 0; w < LOOM_FA_OPERANDS; w++) {
    const loom_flash_attn_layout *l = &a->at[w];
    int64_t prod = 1;
    bool ok = l->n_lead >= 0 && l->n_lead <= LOOM_FLASH_ATTN_MAX_LEAD && l->row >= 0;
    for (int32_t i = 0; ok && i < l->n_lead; i++)
      ok = l->lead[i] >= 0 && l->stride[i] >= 0 && mul_ok(prod, l->lead[i], &prod);
    if (!ok || (l->n_lead > 0 && prod != a->bh))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s: layout of operand %d: leading dims must be >= 0 with product bh "
                        "(%lld), strides >= 0",
                        fn, (int)w, (long long)a->bh);
  }
  if (n_threads < 0 || n_threads > 4096)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: thread count %d is out of range [0, 4096]", fn, (int)n_threads);
  *nt = n_threads ? n_threads : loom_ctx_resolved_threads(ctx);
  R->args = *a; /* no pointer arithmetic on NULL, even by 0 */
  if (!R->args.q) R->args.q = fa_dummy;
  if (!R->args.k) R->args.k = fa_dummy;
  if (!R->args.v) R->args.v = fa_dummy;
  R->a = &R->args;
  R->kn = loom_fa_kernels(a->impl);
  R->drop = a->p > 0.0;
  R->thr = loom_dropout_threshold(a->p);
  R->inv_keepd = 1.0 / (1.0 - a->p);
  R->inv_keep = (float)R->inv_keepd;
  R->off = a->sk - a->sq;
  return LOOM_STATUS_OK;
}

/* A 64-byte aligned block of n floats (at least one) from loom_malloc;
 * *raw is what to free. */
static float *alloc_floats(loom_ctx *ctx, int64_t n, void **raw) {
  if ((uint64_t)n > (SIZE_MAX - 64) / sizeof(float)) {
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "flash attention: workspace too large");
    return NULL;
  }
  *raw = loom_malloc(ctx, sizeof(float) * (size_t)(n > 0 ? n : 1) + 64);
  if (!*raw) return NULL;
  uintptr_t p = ((uintptr_t)*raw + 63) & ~(uintptr_t)63;
  return (float *)(void *)p;
}

loom_status loom_flash_attn_fwd(loom_ctx *ctx, int32_t n_threads, const loom_flash_attn *a,
                                float *o, float *lse) {
  fa_run R;
  int32_t nt = 1;
  LOOM_TRY(fa_setup(ctx, "flash_attn_fwd", n_threads, a, &R, &nt));
  a = R.a;
  const int64_t n_rows = a->bh * a->sq;
  if (n_rows == 0) return LOOM_STATUS_OK;
  if (a->dv && !o)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "flash_attn_fwd: o is NULL");
  if (!o) o = fa_dummy;
  if (a->sk == 0) { /* softmax over no keys times an empty v: an empty sum */
    for (int64_t i = 0; a->dv && i < n_rows; i++)
      memset(o + op_off(&a->at[LOOM_FA_O], i / a->sq, a->sq, a->dv) +
                 i % a->sq * op_ld(&a->at[LOOM_FA_O], a->dv),
             0, sizeof(float) * (size_t)a->dv);
    if (lse)
      for (int64_t i = 0; i < n_rows; i++)
        lse[i] = -INFINITY;
    return LOOM_STATUS_OK;
  }
  const int64_t nqb = (a->sq + FWD_BR - 1) / FWD_BR, tasks = a->bh * nqb;
  nt = (int32_t)min64(nt, tasks); /* no buffers for threads without a task */
  const int64_t per = fwd_thread_floats(a);
  void *raw;
  float *ws = alloc_floats(ctx, per * nt, &raw);
  if (!ws) return LOOM_STATUS_OUT_OF_MEMORY;
#pragma omp parallel num_threads(nt) if (tasks > 1)
  {
    float *mine = ws + per * omp_get_thread_num();
    /* the largest (causal: last) query blocks first */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; t++)
      fwd_task(&R, t / nqb, (nqb - 1 - t % nqb) * FWD_BR, mine, o, lse);
  }
  free(raw);
  return LOOM_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------- */

/* Key chunks per bh: each bh's key blocks kb = c, c + chunks, ... go to
 * task (bh, c), which owns a partial dq (chunk 0 writes dq itself). */
static int64_t bwd_chunks(const loom_flash_attn *a) {
  int64_t nkb = (a->sk + BWD_BC - 1) / BWD_BC;
  if (nkb == 0 || a->bh == 0) return 1;
  return max64(1, min64(nkb, (BWD_MIN_TASKS + a->bh - 1) / a->bh));
}

/* Per-thread floats: Qs, K^T, V^T, S/P/Pd, dP/dS, keep bits (two rows: one
 * read, one accumulated for the NaN rule). */
static int64_t bwd_thread_floats(const loom_flash_attn *a) {
  return up16(BWD_BR * a->d) + up16(a->d * BWD_BC) + up16(a->dv * BWD_BC) +
         2 * up16(BWD_BR * BWD_BC) + 2 * up16(BWD_BC / 32 + 16);
}

/* Rows of the bias gradient's partial sums per bh: Sq when the bias
 * varies along the queries, else 1 (the rows summed as they come). */
static int64_t bwd_dbias_rows(const loom_flash_attn *a) {
  return a->dbias ? (a->bias_at.row ? a->sq : 1) : 0;
}

/* Shared floats: Di per row, the partial dbias [BH, dbias rows, Sk] (each
 * task adds to its own bh's keys: no races, a fixed order) and the partial
 * dq of chunks 1 .. chunks-1. */
static int64_t bwd_shared_floats(const loom_flash_attn *a) {
  return up16(a->bh * a->sq) + up16(a->bh * bwd_dbias_rows(a) * a->sk) +
         (bwd_chunks(a) - 1) * a->bh * a->sq * a->d;
}

typedef struct bwd_io {
  const float *o, *lse, *d_o;
  float *dq, *dk, *dv;
  float *di;   /* [BH * Sq] rowsum(dO * O) */
  float *part; /* [(chunks - 1) * BH, Sq, D] partial dq */
  int64_t chunks;
  float *dbp;      /* [BH, db_rows, Sk] partial bias gradient, or NULL */
  int64_t db_rows; /* bwd_dbias_rows */
} bwd_io;

/* Keys of the block at kb (cc of them) that query row i sees. */
static int64_t strip_keys(const fa_run *R, int64_t i, int64_t kb, int64_t cc) {
  return max64(0, min64(cc, row_limit(R, i) - kb));
}

/* The first of the query rows q0 .. q0 + r - 1 that sees key j (r: none). */
static int64_t strip_first_row(const fa_run *R, int64_t j, int64_t q0, int64_t r) {
  return R->a->causal ? min64(r, max64(0, j - R->off - q0)) : 0;
}

static void bwd_task(const fa_run *R, const bwd_io *io, int64_t bh, int64_t chunk, float *ws) {
  const loom_flash_attn *a = R->a;
  const fa_kernels *kn = R->kn;
  const int64_t D = a->d, DV = a->dv, SQ = a->sq, SK = a->sk;
  float *qs = ws, *kt = qs + up16(BWD_BR * D), *vt = kt + up16(D * BWD_BC);
  float *s = vt + up16(DV * BWD_BC), *dp = s + up16(BWD_BR * BWD_BC);
  uint8_t *bits = (uint8_t *)(void *)(dp + up16(BWD_BR * BWD_BC));
  uint8_t *nanbits = bits + 4 * up16(BWD_BC / 32 + 16);

  const int64_t lddq = chunk == 0 ? op_ld(&a->at[LOOM_FA_DQ], D) : D;
  const int64_t lddk = op_ld(&a->at[LOOM_FA_DK], D), lddv = op_ld(&a->at[LOOM_FA_DV], DV);
  float *dqt = chunk == 0 ? io->dq + op_off(&a->at[LOOM_FA_DQ], bh, SQ, D)
                          : io->part + ((chunk - 1) * a->bh + bh) * SQ * D;
  for (int64_t i = 0; i < SQ; i++)
    memset(dqt + i * lddq, 0, sizeof(float) * (size_t)D);
  const int64_t ldq = op_ld(&a->at[LOOM_FA_Q], D), ldk = op_ld(&a->at[LOOM_FA_K], D);
  const int64_t ldv = op_ld(&a->at[LOOM_FA_V], DV), lddo = op_ld(&a->at[LOOM_FA_DO], DV);
  const float *qbh = a->q + op_off(&a->at[LOOM_FA_Q], bh, SQ, D);
  const float *kbh = a->k + op_off(&a->at[LOOM_FA_K], bh, SK, D);
  const float *vbh = a->v + op_off(&a->at[LOOM_FA_V], bh, SK, DV);
  const float *dobh = io->d_o + op_off(&a->at[LOOM_FA_DO], bh, SQ, DV);
  const float *lse = io->lse + bh * SQ, *di = io->di + bh * SQ;
  const int64_t nkb = (SK + BWD_BC - 1) / BWD_BC;
  for (int64_t kbi = chunk; kbi < nkb; kbi += io->chunks) {
    const int64_t kb = kbi * BWD_BC, c = min64(BWD_BC, SK - kb);
    kn->transpose(c, D, kbh + kb * ldk, ldk, kt, c);
    kn->transpose(c, DV, vbh + kb * ldv, ldv, vt, c);
    /* the task owns these keys' rows of dk and dv: accumulated in place */
    float *dka = io->dk + op_off(&a->at[LOOM_FA_DK], bh, SK, D) + kb * lddk;
    float *dva = io->dv + op_off(&a->at[LOOM_FA_DV], bh, SK, DV) + kb * lddv;
    for (int64_t j = 0; j < c; j++) {
      memset(dka + j * lddk, 0, sizeof(float) * (size_t)D);
      memset(dva + j * lddv, 0, sizeof(float) * (size_t)DV);
    }
    /* the first query row that sees key kb: i + off >= kb */
    const int64_t qfirst = a->causal ? max64(0, kb - R->off) : 0;
    for (int64_t q0 = qfirst; q0 < SQ; q0 += BWD_BR) {
      const int64_t r = min64(BWD_BR, SQ - q0);
      const int64_t cc = min64(c, row_limit(R, q0 + r - 1) - kb); /* keys these rows see */
      if (ldq == D) {
        kn->scale(qbh + q0 * D, r * D, a->scale, qs);
      } else { /* the same products, row by row */
        for (int64_t i = 0; i < r; i++)
          kn->scale(qbh + (q0 + i) * ldq, D, a->scale, qs + i * D);
      }
      /* Causal: per strip of BWD_STRIP query rows, only the keys its last
       * row sees (the rest of each row is zeroed below) */
      for (int64_t i = 0; i < r; i += BWD_STRIP) {
        const int64_t h = min64(BWD_STRIP, r - i), n = strip_keys(R, q0 + i + h - 1, kb, cc);
        if (n <= 0) continue;
        kn->gemm(h, n, D, qs + i * D, D, 1, kt, c, s + i * BWD_BC, BWD_BC, false); /* S */
        kn->gemm(h, n, DV, dobh + (q0 + i) * lddo, lddo, 1, vt, c, dp + i * BWD_BC, BWD_BC,
                 false); /* dO V^T */
      }
      for (int64_t i = 0; i < r; i++) {
        float *si = s + i * BWD_BC, *dpi = dp + i * BWD_BC;
        const int64_t vis = min64(cc, max64(0, row_limit(R, q0 + i) - kb));
        if (vis < cc) {
          memset(si + vis, 0, sizeof(float) * (size_t)(cc - vis));
          memset(dpi + vis, 0, sizeof(float) * (size_t)(cc - vis));
        }
        if (vis == 0) continue;
        if (a->bias) kn->row_bias(si, vis, bias_row(a, bh, q0 + i) + kb * a->bias_col, a->bias_col);
        (void)kn->exp_sum(si, vis, lse[q0 + i]); /* P */
        const uint8_t *b = R->drop ? row_bits(R, (bh * SQ + q0 + i) * SK + kb, vis, bits) : NULL;
        kn->dsoft(dpi, si, vis, b, R->inv_keep, di[q0 + i]); /* dS (unscaled) */
        if (io->dbp) { /* dbias: dS summed over the rows it repeats along */
          float *d = io->dbp + (bh * io->db_rows + (io->db_rows > 1 ? q0 + i : 0)) * SK + kb;
          for (int64_t j = 0; j < vis; j++)
            d[j] += dpi[j];
        }
        if (b) kn->mask(si, vis, b, R->inv_keep);            /* Pd */
      }
      /* The products below skip only terms whose P or dS is exactly 0 (the
       * rows before the first that sees a strip of keys, the keys past a
       * strip of rows' last): the same sums in the same order */
      for (int64_t j = 0; j < cc; j += BWD_STRIP) {
        const int64_t h = min64(BWD_STRIP, cc - j), i0 = strip_first_row(R, kb + j, q0, r);
        if (i0 >= r) continue;
        kn->gemm(h, DV, r - i0, s + i0 * BWD_BC + j, 1, BWD_BC, dobh + (q0 + i0) * lddo, lddo,
                 dva + j * lddv, lddv, true); /* dV += Pd^T dO */
        kn->gemm(h, D, r - i0, dp + i0 * BWD_BC + j, 1, BWD_BC, qs + i0 * D, D, dka + j * lddk,
                 lddk, true); /* dK += dS^T Qs */
      }
      for (int64_t i = 0; i < r; i += BWD_STRIP) {
        const int64_t h = min64(BWD_STRIP, r - i), n = strip_keys(R, q0 + i + h - 1, kb, cc);
        if (n > 0)
          kn->gemm(h, D, n, dp + i * BWD_BC, BWD_BC, 1, kbh + kb * ldk, ldk, dqt + (q0 + i) * lddq,
                   lddq, true); /* dQ += dS K */
      }
    }
    float *dvo = dva;
    /* The composite's NaN rows (no key seen: causal with Sq > Sk, or a
     * bias of -inf on every key; their lse is -inf) reach dv through
     * Pd^T dO: dv[j] is NaN for every key j such a row keeps. */
    bool nan_rows = false;
    const int64_t nb = (c + 7) / 8;
    for (int64_t i = 0; i < SQ && DV > 0 && (a->bias || (a->causal && i < SQ - SK)); i++) {
      if (lse[i] != -INFINITY) continue;
      if (!nan_rows) memset(nanbits, 0, (size_t)nb);
      nan_rows = true;
      if (!R->drop) {
        memset(nanbits, 0xFF, (size_t)nb);
        break;
      }
      row_bits(R, (bh * SQ + i) * SK + kb, c, bits);
      for (int64_t x = 0; x < nb; x++)
        nanbits[x] |= bits[x];
    }
    if (nan_rows) {
      for (int64_t j = 0; j < c; j++)
        if (loom_fa_bit_at(nanbits, j))
          for (int64_t x = 0; x < DV; x++)
            dvo[j * lddv + x] = NAN;
    }
  }
}

loom_status loom_flash_attn_bwd(loom_ctx *ctx, int32_t n_threads, const loom_flash_attn *a,
                                const float *o, const float *lse, const float *d_o, float *dq,
                                float *dk, float *dv) {
  fa_run R;
  int32_t nt = 1;
  LOOM_TRY(fa_setup(ctx, "flash_attn_bwd", n_threads, a, &R, &nt));
  const int64_t n_rows = a->bh * a->sq, n_keys = a->bh * a->sk;
  if ((n_rows && a->dv && (!o || !d_o)) || (n_rows && !lse) || (n_rows && a->d && !dq) ||
      (n_keys && a->d && !dk) || (n_keys && a->dv && !dv))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "flash_attn_bwd: o, lse, d_o, dq, dk or dv is NULL");
  if (a->dbias && !a->bias)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "flash_attn_bwd: dbias without a bias");
  a = R.a;
  if (!o) o = fa_dummy;
  if (!d_o) d_o = fa_dummy;
  if (!lse) lse = fa_dummy;
  if (!dq) dq = fa_dummy;
  if (!dk) dk = fa_dummy;
  if (!dv) dv = fa_dummy;
  if (n_rows == 0 || a->sk == 0) { /* empty sums: zero gradients, row by row */
    for (int64_t i = 0; a->d && i < n_keys; i++)
      memset(dk + op_off(&a->at[LOOM_FA_DK], i / a->sk, a->sk, a->d) +
                 i % a->sk * op_ld(&a->at[LOOM_FA_DK], a->d),
             0, sizeof(float) * (size_t)a->d);
    for (int64_t i = 0; a->dv && i < n_keys; i++)
      memset(dv + op_off(&a->at[LOOM_FA_DV], i / a->sk, a->sk, a->dv) +
                 i % a->sk * op_ld(&a->at[LOOM_FA_DV], a->dv),
             0, sizeof(float) * (size_t)a->dv);
    for (int64_t i = 0; a->d && i < n_rows; i++)
      memset(dq + op_off(&a->at[LOOM_FA_DQ], i / a->sq, a->sq, a->d) +
                 i % a->sq * op_ld(&a->at[LOOM_FA_DQ], a->d),
             0, sizeof(float) * (size_t)a->d);
    return LOOM_STATUS_OK;
  }
  const int64_t tasks = a->bh * bwd_chunks(a);
  nt = (int32_t)min64(nt, tasks); /* no buffers for threads without a task */
  const int64_t per = bwd_thread_floats(a), shared = bwd_shared_floats(a);
  void *raw;
  float *ws = alloc_floats(ctx, per * nt + shared, &raw);
  if (!ws) return LOOM_STATUS_OUT_OF_MEMORY;
  const int64_t db_n = a->bh * bwd_dbias_rows(a) * a->sk;
  bwd_io io = {o, lse, d_o, dq, dk, dv, ws + per * nt,
               ws + per * nt + up16(n_rows) + up16(db_n), bwd_chunks(a),
               a->dbias ? ws + per * nt + up16(n_rows) : NULL, bwd_dbias_rows(a)};
  if (io.dbp) memset(io.dbp, 0, sizeof(float) * (size_t)db_n);
  const int64_t DV = a->dv, D = a->d, SQ = a->sq;
  const int64_t rblocks = (n_rows + 255) / 256;
#pragma omp parallel num_threads(nt)
  {
    float *mine = ws + per * omp_get_thread_num();
    /* Di = rowsum(dO * O), in double */
    const int64_t lddo = op_ld(&a->at[LOOM_FA_DO], DV), ldo = op_ld(&a->at[LOOM_FA_O], DV);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rblocks; t++) {
      /* rows i of (bh, row), offsets found once per bh */
      int64_t bh = t * 256 / SQ, row = t * 256 - bh * SQ;
      const float *dob = d_o + op_off(&a->at[LOOM_FA_DO], bh, SQ, DV);
      const float *ob = o + op_off(&a->at[LOOM_FA_O], bh, SQ, DV);
      for (int64_t i = t * 256; i < min64(n_rows, t * 256 + 256); i++) {
        io.di[i] = (float)R.kn->dot(dob + row * lddo, ob + row * ldo, DV);
        if (++row == SQ && i + 1 < n_rows) {
          row = 0, bh++;
          dob = d_o + op_off(&a->at[LOOM_FA_DO], bh, SQ, DV);
          ob = o + op_off(&a->at[LOOM_FA_O], bh, SQ, DV);
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; t++)
      bwd_task(&R, &io, t / io.chunks, t % io.chunks, mine);
    /* dq = scale * (dq + part_1 + ... ), in chunk order */
    if (D > 0) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < rblocks; t++) {
        const int64_t i1 = min64(n_rows, t * 256 + 256), lddq = op_ld(&a->at[LOOM_FA_DQ], D);
        int64_t bh = t * 256 / SQ, row = t * 256 - bh * SQ;
        float *dqb = dq + op_off(&a->at[LOOM_FA_DQ], bh, SQ, D);
        for (int64_t i = t * 256; i < i1; i++, row++) {
          if (row == SQ) {
            row = 0, bh++;
            dqb = dq + op_off(&a->at[LOOM_FA_DQ], bh, SQ, D);
          }
          float *dqi = dqb + row * lddq;
          for (int64_t c = 1; c < io.chunks; c++) {
            const float *pi = io.part + (((c - 1) * a->bh + bh) * SQ + row) * D;
            for (int64_t x = 0; x < D; x++)
              dqi[x] += pi[x];
          }
          const float sc = (float)a->scale;
          for (int64_t x = 0; x < D; x++)
            dqi[x] *= sc;
        }
      }
    }
  }
  /* dbias += the partial sums, bh by bh: a fixed order */
  for (int64_t bh = 0; io.dbp && bh < a->bh; bh++)
    for (int64_t ri = 0; ri < io.db_rows; ri++) {
      const float *src = io.dbp + (bh * io.db_rows + ri) * a->sk;
      float *dst = a->dbias + (bias_row(a, bh, ri) - a->bias);
      for (int64_t j = 0; j < a->sk; j++)
        dst[j * a->bias_col] += src[j];
    }
  free(raw);
  return LOOM_STATUS_OK;
}

int64_t loom_flash_attn_workspace_bytes(const loom_flash_attn *a, int32_t n_threads,
                                        bool backward) {
  if (!a || a->bh < 0 || a->sq < 0 || a->sk < 0 || a->d < 0 || a->dv < 0 || n_threads < 0) return 0;
  if (a->bh * a->sq == 0 || a->sk == 0) return 0;
  int64_t nt = n_threads ? n_threads : loom_ctx_resolved_threads(NULL);
  int64_t floats;
  if (backward)
    floats = bwd_thread_floats(a) * min64(nt, a->bh * bwd_chunks(a)) + bwd_shared_floats(a);
  else
    floats = fwd_thread_floats(a) * min64(nt, a->bh * ((a->sq + FWD_BR - 1) / FWD_BR));
  return (int64_t)sizeof(float) * floats + 64;
}

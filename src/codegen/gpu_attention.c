/*
 * Flash attention and the dropout bitmask as GPU kernels (gpu_attention.h),
 * written once: each kernel is one text whose @-words the dialect table
 * spells (@K launched function, @G global pointer, @R restrict, @S shared
 * declaration, @L / @I / @N thread, group and group count, @B barrier)
 * and whose sizes are the function's constants (@D head dim, @V value
 * dim, @M dropout mode: 0 none, 1 Philox in the kernel, 2 read the
 * bitmask; @T the name's tag).
 *
 * FlashAttention-2 on groups of LOOM_GPU_LOCAL (64) threads, one row per
 * thread, so every sum runs in a fixed order whatever the launch:
 * - forward: a group per (batch*head, 64 query rows); key and value tiles
 *   of FA_BC keys staged in shared memory; each thread keeps its scaled
 *   query row, output accumulator and the online softmax's running max and
 *   sum; writes o and the logsumexp lse for the backward;
 * - backward: Di = rowsum(dO * O) per row (lm_fa_di), then one pass over
 *   query tiles per key (a group per (batch*head, 64 keys), a thread per
 *   key accumulating its dK and dV rows, query / dO tiles of FA_BR rows
 *   staged, and with fused dropout the tile's keep bits, drawn by the
 *   group a Philox block per four consecutive keys) and one over key tiles
 *   per query (lm_fa_dq, a thread per row
 *   accumulating its dQ row): the probabilities are recomputed from lse,
 *   never stored, and nothing is summed by atomics.
 * Keep bits: the Philox counters of docs/DROPOUT.md (one block of four
 * words cached per thread, consecutive keys share it) or the bitmask.
 * An additive bias (@H, the spec's bias: 1 read, 2 also dS written for
 * dbias) is read in place at strides over [three leading dims, Sq, Sk];
 * dbias is lm_fa_dbias's fixed-order sum of the dS the dK / dV pass
 * wrote, a thread per bias element (docs/GPU.md, "An additive bias").
 */
#include "codegen/gpu_attention.h"
#include "codegen/gpu_internal.h"

#include "ir/dtype.h"
#include "ops/attention_bias.h"
#include "ops/attention_views.h"
#include "ops/op.h"
#include "ops/rng_piece.h"
#include "passes/attention.h"
#include "rng/philox.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FA_BC 32 /* keys per staged tile (forward, dQ) */
#define FA_BR 32 /* query rows per staged tile (dK / dV) */
/* Shared memory of one group, FA_BC * (D + Dv) floats, stays within the
 * 48 KiB a CUDA block may declare statically. */
#define FA_MAX_DSUM 320
_Static_assert(LOOM_GPU_LOCAL == 64, "one row (key) per thread of 64-row tiles");
_Static_assert(2 * FA_BR == LOOM_GPU_LOCAL, "dK / dV: two threads draw each staged row's bits");

/* What every attention kernel shares: reading `base`, the keep bits. */
static const char helpers[] =
    "/* Flash attention (codegen/gpu_attention.c) */\n"
    "LM_FN int64_t lm_min64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "LM_FN int64_t lm_max64(int64_t a, int64_t b) { return a > b ? a : b; }\n"
    "/* the dropout counter base: an i64 or i32 scalar (bytes 8 or 4), or none */\n"
    "LM_FN uint64_t lm_base_of(@G const uint8_t *b, int64_t bytes) {\n"
    "  if (bytes == 8) return *(@G const uint64_t *)b;\n"
    "  if (bytes == 4) return (uint64_t)(int64_t)*(@G const int32_t *)b;\n"
    "  return 0;\n"
    "}\n"
    "/* keep bit of counter position c; the block's four words cached in w */\n"
    "LM_FN uint8_t lm_keep_at(uint64_t seed, uint64_t c, uint64_t thr, uint64_t *cb, uint32_t *w) {\n"
    "  if ((c >> 2) != *cb) {\n"
    "    *cb = c >> 2;\n"
    "    lm_philox4(seed, c >> 2, w);\n"
    "  }\n"
    "  uint32_t w01 = (c & 1) ? w[1] : w[0], w23 = (c & 1) ? w[3] : w[2];\n"
    "  return (uint64_t)((c & 2) ? w23 : w01) >= thr;\n"
    "}\n"
    "LM_FN uint8_t lm_mask_bit(@G const uint8_t *m, uint64_t e) { return (m[e >> 3] >> (e & 7)) & 1; }\n"
    "/* the bias's offset for bh = (b0, b1, b2) over the leading dims [*, l1, l2] */\n"
    "LM_FN int64_t lm_bias_off(int64_t bh, int64_t l1, int64_t l2, int64_t s0, int64_t s1,\n"
    "                          int64_t s2) {\n"
    "  return bh / (l1 * l2) * s0 + bh / l2 % l1 * s1 + bh % l2 * s2;\n"
    "}\n"
    "/* dbias: a thread per bias element sums dS (the workspace, [BH, Sq, Sk],\n"
    " * written where a query sees a key) over the scores it is added to, in\n"
    " * the scores' order, in double: no atomics, the same sum for any launch */\n"
    "@K lm_fa_dbias(@G const float *@R dsw, int64_t dso, @G float *@R db, int64_t nb, int64_t l0,\n"
    "               int64_t l1, int64_t l2, int64_t sq, int64_t sk, int64_t s0, int64_t s1,\n"
    "               int64_t s2, int64_t srow, int64_t scol, int64_t causal) {\n"
    "  const int64_t size[5] = {l0, l1, l2, sq, sk}, stride[5] = {s0, s1, s2, srow, scol};\n"
    "  int64_t reps = 1;\n"
    "  for (int d = 0; d < 5; d++) reps *= stride[d] ? 1 : size[d];\n"
    "  for (int64_t e = @I * 64 + @L; e < nb; e += @N * 64) {\n"
    "    int64_t c[5];\n"
    "    for (int d = 0; d < 5; d++) c[d] = stride[d] ? e / stride[d] % size[d] : 0;\n"
    "    double sum = 0.0;\n"
    "    for (int64_t r = 0; r < reps; r++) { /* the repeated dims, row-major */\n"
    "      int64_t rest = r;\n"
    "      for (int d = 4; d >= 0; d--)\n"
    "        if (!stride[d]) {\n"
    "          c[d] = rest % size[d];\n"
    "          rest /= size[d];\n"
    "        }\n"
    "      if (causal && c[4] > c[3] + sk - sq) continue;\n"
    "      sum += (double)dsw[dso + (((c[0] * l1 + c[1]) * l2 + c[2]) * sq + c[3]) * sk + c[4]];\n"
    "    }\n"
    "    db[e] = (float)sum;\n"
    "  }\n"
    "}\n"
    "/* Di = rowsum(dO * O), in double, a thread per row */\n"
    "@K lm_fa_di(@G const float *@R o, @G const float *@R d_o, @G float *@R di, int64_t rows,\n"
    "            int64_t dv) {\n"
    "  for (int64_t r = @I * 64 + @L; r < rows; r += @N * 64) {\n"
    "    double s = 0.0;\n"
    "    for (int64_t x = 0; x < dv; x++) s += (double)d_o[r * dv + x] * (double)o[r * dv + x];\n"
    "    di[r] = (float)s;\n"
    "  }\n"
    "}\n"
    "/* dropout_mask: bit e of the flat tensor in bit e % 8 of byte e / 8, a thread per byte */\n"
    "@K lm_dropout_bits(@G const uint8_t *@R base, @G uint8_t *@R bits, int64_t numel,\n"
    "                   int64_t base_bytes, uint64_t seed, uint64_t offset, uint64_t thr) {\n"
    "  const uint64_t j0 = offset + lm_base_of(base, base_bytes);\n"
    "  for (int64_t b = @I * 64 + @L; b < (numel + 7) / 8; b += @N * 64) {\n"
    "    uint64_t cb = ~(uint64_t)0;\n"
    "    uint32_t w[4];\n"
    "    uint8_t out = 0;\n"
    "    for (int k = 0; k < 8; k++)\n"
    "      if (b * 8 + k < numel && lm_keep_at(seed, j0 + (uint64_t)(b * 8 + k), thr, &cb, w))\n"
    "        out |= (uint8_t)(1u << k);\n"
    "    bits[b] = out;\n"
    "  }\n"
    "}\n";

/* The keep bit of element e (a uint64_t) of the probabilities, as @M says. */
#define KEEP(E)                                                                                    \
  "(@M == 1 ? lm_keep_at(seed, j0 + (" E "), thr, &cb, w) : @M == 2 ? lm_mask_bit(mask, (" E      \
  ")) : 1)"

/* The bias, read at strides over the scores (0 where it repeats): the
 * leading dims [*, bl1, bl2] at bs0..bs2, a query row at brow, a key at
 * bcol (the kernels read it only where @H, the spec's bias, is not 0). */
#define BIAS_PARAMS                                                                                \
  ",\n    @G const float *@R bias, int64_t bl1, int64_t bl2, int64_t bs0, int64_t bs1,"            \
  " int64_t bs2,\n    int64_t brow, int64_t bcol"

static const char fwd_text[] =
    "@K lm_fa_fwd_@T(@G const float *@R q, @G const float *@R k, @G const float *@R v,\n"
    "    @G const uint8_t *@R base, @G const uint8_t *@R mask, @G float *@R o, @G float *@R lse,\n"
    "    int64_t nbh, int64_t sq, int64_t sk, int64_t causal, int64_t base_bytes, uint64_t seed,\n"
    "    uint64_t offset, uint64_t thr, double scale, double inv_keep" BIAS_PARAMS ") {\n"
    "  @S float ks[@C * @D];\n"
    "  @S float vs[@C * @V];\n"
    "  const int t = @L;\n"
    "  const int64_t nqt = (sq + 63) / 64, off = sk - sq;\n"
    "  const uint64_t j0 = offset + lm_base_of(base, base_bytes);\n"
    "  for (int64_t tile = @I; tile < nbh * nqt; tile += @N) {\n"
    "    const int64_t bh = tile / nqt, q0 = tile % nqt * 64, i = q0 + t;\n"
    "    const int row = i < sq;\n"
    "    const int64_t bo = @H ? lm_bias_off(bh, bl1, bl2, bs0, bs1, bs2) + i * brow : 0;\n"
    "    /* keys this row sees, and the keys any row of the tile sees */\n"
    "    const int64_t lim = !row ? 0 : causal ? lm_min64(sk, i + off + 1) : sk;\n"
    "    const int64_t klim = causal ? lm_max64(0, lm_min64(sk, lm_min64(sq, q0 + 64) + off)) : sk;\n"
    "    const uint64_t e0 = (uint64_t)((bh * sq + i) * sk);\n"
    "    float qr[@D], acc[@V], s[@C];\n"
    "    float m = -INFINITY, l = 0.0f;\n"
    "    uint64_t cb = ~(uint64_t)0;\n"
    "    uint32_t w[4];\n"
    "    for (int x = 0; x < @D; x++)\n"
    "      qr[x] = row ? (float)((double)q[(bh * sq + i) * @D + x] * scale) : 0.0f;\n"
    "    for (int x = 0; x < @V; x++) acc[x] = 0.0f;\n"
    "    for (int64_t kb = 0; kb < klim; kb += @C) {\n"
    "      const int64_t c = lm_min64(@C, sk - kb);\n"
    "      @B;\n"
    "      for (int64_t x = t; x < c * @D; x += 64) ks[x] = k[(bh * sk + kb) * @D + x];\n"
    "      for (int64_t x = t; x < c * @V; x += 64) vs[x] = v[(bh * sk + kb) * @V + x];\n"
    "      @B;\n"
    "      const int vis = (int)lm_max64(0, lm_min64(c, lim - kb));\n"
    "      float mx = m;\n"
    "      for (int j = 0; j < vis; j++) {\n"
    "        float a = 0.0f;\n"
    "        for (int x = 0; x < @D; x++) a += qr[x] * ks[j * @D + x];\n"
    "        if (@H) a += bias[bo + (kb + j) * bcol];\n"
    "        s[j] = a;\n"
    "        mx = a > mx ? a : mx;\n"
    "      }\n"
    "      if (vis > 0 && mx > m) { /* the online softmax: rescale what came before */\n"
    "        if (m != -INFINITY) {\n"
    "          const float al = lm_expf(m - mx);\n"
    "          l *= al;\n"
    "          for (int x = 0; x < @V; x++) acc[x] *= al;\n"
    "        }\n"
    "        m = mx;\n"
    "      }\n"
    "      for (int j = 0; j < vis; j++) {\n"
    "        /* m is -inf while every score so far is (a bias's -inf): exp(-inf) = 0 */\n"
    "        const float p = lm_expf(s[j] - (m == -INFINITY ? 0.0f : m));\n"
    "        l += p;\n"
    "        if (" KEEP("e0 + (uint64_t)(kb + j)") ")\n"
    "          for (int x = 0; x < @V; x++) acc[x] += p * vs[j * @V + x];\n"
    "      }\n"
    "    }\n"
    "    if (!row) continue;\n"
    "    @G float *oi = o + (bh * sq + i) * @V;\n"
    "    if (sk == 0 || lim <= 0) {\n"
    "      /* no key: the composite's 0/0 probabilities make the row NaN, unless\n"
    "       * dropout drops every key of it (then 0); no keys at all: 0 */\n"
    "      float fill = sk == 0 ? 0.0f : NAN;\n"
    "      if (@M != 0 && sk > 0) {\n"
    "        int any = 0;\n"
    "        for (int64_t j = 0; j < sk && !any; j++) any = " KEEP("e0 + (uint64_t)j") ";\n"
    "        if (!any) fill = 0.0f;\n"
    "      }\n"
    "      for (int x = 0; x < @V; x++) oi[x] = fill;\n"
    "      lse[bh * sq + i] = -INFINITY;\n"
    "      continue;\n"
    "    }\n"
    "    const double f = inv_keep / (double)l;\n"
    "    for (int x = 0; x < @V; x++) oi[x] = (float)((double)acc[x] * f);\n"
    "    lse[bh * sq + i] = (float)((double)m + log((double)l));\n"
    "  }\n"
    "}\n";

/* dS and dP from p, dp and the keep bit: the cpu kernel's dsoft. */
#define DSOFT                                                                                      \
  "        const float inv = (float)inv_keep;\n"                                                   \
  "        const float pd = @M == 0 ? p : keep ? p * inv : 0.0f;\n"                                \
  "        const float tt = @M == 0 ? dp : keep ? dp * inv : 0.0f;\n"                              \
  "        const float dsv = p * (tt - dis);\n"

static const char dkdv_text[] =
    "@K lm_fa_dkdv_@T(@G const float *@R q, @G const float *@R k, @G const float *@R v,\n"
    "    @G const uint8_t *@R base, @G const uint8_t *@R mask, @G const float *@R lse,\n"
    "    @G const float *@R d_o, @G const float *@R di, @G float *@R dk, @G float *@R dv,\n"
    "    int64_t nbh, int64_t sq, int64_t sk, int64_t causal, int64_t base_bytes, uint64_t seed,\n"
    "    uint64_t offset, uint64_t thr, double scale, double inv_keep" BIAS_PARAMS ",\n"
    "    @G float *@R dsw, int64_t dso) {\n"
    "  @S float qs[@R_ * @D];\n"
    "  @S float dos[@R_ * @V];\n"
    "  @S float ls[@R_], ds[@R_];\n"
    "  @S uint32_t kbits[2 * @R_]; /* fused dropout: the tile's keep bits, 64 per row */\n"
    "  const int t = @L;\n"
    "  const int64_t nkt = (sk + 63) / 64, off = sk - sq;\n"
    "  const uint64_t j0 = offset + lm_base_of(base, base_bytes);\n"
    "  for (int64_t tile = @I; tile < nbh * nkt; tile += @N) {\n"
    "    const int64_t bh = tile / nkt, k0 = tile % nkt * 64, j = k0 + t;\n"
    "    const int col = j < sk;\n"
    "    const int64_t bo = @H ? lm_bias_off(bh, bl1, bl2, bs0, bs1, bs2) + j * bcol : 0;\n"
    "    float kr[@D], vr[@V], dka[@D], dva[@V];\n"
    "    uint64_t cb = ~(uint64_t)0;\n"
    "    uint32_t w[4];\n"
    "    for (int x = 0; x < @D; x++) {\n"
    "      kr[x] = col ? k[(bh * sk + j) * @D + x] : 0.0f;\n"
    "      dka[x] = 0.0f;\n"
    "    }\n"
    "    for (int x = 0; x < @V; x++) {\n"
    "      vr[x] = col ? v[(bh * sk + j) * @V + x] : 0.0f;\n"
    "      dva[x] = 0.0f;\n"
    "    }\n"
    "    /* the first query row that sees key k0 */\n"
    "    const int64_t qfirst = causal ? lm_max64(0, k0 - off) : 0;\n"
    "    for (int64_t q0 = qfirst; q0 < sq; q0 += @R_) {\n"
    "      const int64_t r = lm_min64(@R_, sq - q0);\n"
    "      @B;\n"
    "      for (int64_t x = t; x < r * @D; x += 64)\n"
    "        qs[x] = (float)((double)q[(bh * sq + q0) * @D + x] * scale);\n"
    "      for (int64_t x = t; x < r * @V; x += 64) dos[x] = d_o[(bh * sq + q0) * @V + x];\n"
    "      for (int64_t x = t; x < r; x += 64) {\n"
    "        ls[x] = lse[bh * sq + q0 + x];\n"
    "        ds[x] = di[bh * sq + q0 + x];\n"
    "      }\n"
    "      if (@M == 1) { /* thread t draws row t / 2's bits of 32 keys: consecutive\n"
    "                      * counters, a Philox block per four */\n"
    "        const int64_t ii = t >> 1, kk = k0 + (t & 1) * 32;\n"
    "        uint32_t word = 0;\n"
    "        for (int b = 0; ii < r && b < 32 && kk + b < sk; b++)\n"
    "          if (" KEEP("(uint64_t)((bh * sq + q0 + ii) * sk + kk + b)") ") word |= 1u << b;\n"
    "        kbits[t] = word;\n"
    "      }\n"
    "      @B;\n"
    "      for (int ii = 0; col && ii < r; ii++) {\n"
    "        const int64_t i = q0 + ii;\n"
    "        if (causal && j > i + off) continue;\n"
    "        float a = 0.0f, dp = 0.0f;\n"
    "        for (int x = 0; x < @D; x++) a += qs[ii * @D + x] * kr[x];\n"
    "        for (int x = 0; x < @V; x++) dp += dos[ii * @V + x] * vr[x];\n"
    "        if (@H) a += bias[bo + i * brow];\n"
    "        const float p = lm_expf(a - ls[ii]), dis = ds[ii];\n"
    "        const uint8_t keep = @M == 1 ? (uint8_t)((kbits[ii * 2 + (t >> 5)] >> (t & 31)) & 1u)\n"
    "                                     : " KEEP("(uint64_t)((bh * sq + i) * sk + j)") ";\n"
    DSOFT
    "        if (@H == 2) dsw[dso + (bh * sq + i) * sk + j] = dsv; /* dbias's terms */\n"
    "        for (int x = 0; x < @V; x++) dva[x] += pd * dos[ii * @V + x];\n"
    "        for (int x = 0; x < @D; x++) dka[x] += dsv * qs[ii * @D + x];\n"
    "      }\n"
    "    }\n"
    "    if (!col) continue;\n"
    "    /* rows that see no key (causal, Sq > Sk; with a bias, any whose lse is\n"
    "     * -inf) have NaN probabilities, which reach dv through every key they keep */\n"
    "    int nan_row = 0;\n"
    "    for (int64_t i = 0; i < (@H ? sq : causal ? sq - sk : 0) && !nan_row; i++)\n"
    "      nan_row = !@H || lse[bh * sq + i] == -INFINITY\n"
    "                ? " KEEP("(uint64_t)((bh * sq + i) * sk + j)") " : 0;\n"
    "    for (int x = 0; x < @D; x++) dk[(bh * sk + j) * @D + x] = dka[x];\n"
    "    for (int x = 0; x < @V; x++) dv[(bh * sk + j) * @V + x] = nan_row ? NAN : dva[x];\n"
    "  }\n"
    "}\n";

static const char dq_text[] =
    "@K lm_fa_dq_@T(@G const float *@R q, @G const float *@R k, @G const float *@R v,\n"
    "    @G const uint8_t *@R base, @G const uint8_t *@R mask, @G const float *@R lse,\n"
    "    @G const float *@R d_o, @G const float *@R di, @G float *@R dq,\n"
    "    int64_t nbh, int64_t sq, int64_t sk, int64_t causal, int64_t base_bytes, uint64_t seed,\n"
    "    uint64_t offset, uint64_t thr, double scale, double inv_keep" BIAS_PARAMS ") {\n"
    "  @S float ks[@C * @D];\n"
    "  @S float vs[@C * @V];\n"
    "  const int t = @L;\n"
    "  const int64_t nqt = (sq + 63) / 64, off = sk - sq;\n"
    "  const uint64_t j0 = offset + lm_base_of(base, base_bytes);\n"
    "  for (int64_t tile = @I; tile < nbh * nqt; tile += @N) {\n"
    "    const int64_t bh = tile / nqt, q0 = tile % nqt * 64, i = q0 + t;\n"
    "    const int row = i < sq;\n"
    "    const int64_t lim = !row ? 0 : causal ? lm_min64(sk, i + off + 1) : sk;\n"
    "    const int64_t klim = causal ? lm_max64(0, lm_min64(sk, lm_min64(sq, q0 + 64) + off)) : sk;\n"
    "    const uint64_t e0 = (uint64_t)((bh * sq + i) * sk);\n"
    "    const int64_t bo = @H ? lm_bias_off(bh, bl1, bl2, bs0, bs1, bs2) + i * brow : 0;\n"
    "    float qr[@D], dor[@V], dqa[@D];\n"
    "    const float li = row ? lse[bh * sq + i] : 0.0f, dis = row ? di[bh * sq + i] : 0.0f;\n"
    "    uint64_t cb = ~(uint64_t)0;\n"
    "    uint32_t w[4];\n"
    "    for (int x = 0; x < @D; x++) {\n"
    "      qr[x] = row ? (float)((double)q[(bh * sq + i) * @D + x] * scale) : 0.0f;\n"
    "      dqa[x] = 0.0f;\n"
    "    }\n"
    "    for (int x = 0; x < @V; x++) dor[x] = row ? d_o[(bh * sq + i) * @V + x] : 0.0f;\n"
    "    for (int64_t kb = 0; kb < klim; kb += @C) {\n"
    "      const int64_t c = lm_min64(@C, sk - kb);\n"
    "      @B;\n"
    "      for (int64_t x = t; x < c * @D; x += 64) ks[x] = k[(bh * sk + kb) * @D + x];\n"
    "      for (int64_t x = t; x < c * @V; x += 64) vs[x] = v[(bh * sk + kb) * @V + x];\n"
    "      @B;\n"
    "      const int vis = (int)lm_max64(0, lm_min64(c, lim - kb));\n"
    "      for (int jj = 0; jj < vis; jj++) {\n"
    "        float a = 0.0f, dp = 0.0f;\n"
    "        for (int x = 0; x < @D; x++) a += qr[x] * ks[jj * @D + x];\n"
    "        for (int x = 0; x < @V; x++) dp += dor[x] * vs[jj * @V + x];\n"
    "        if (@H) a += bias[bo + (kb + jj) * bcol];\n"
    "        const float p = lm_expf(a - li);\n"
    "        const uint8_t keep = " KEEP("e0 + (uint64_t)(kb + jj)") ";\n"
    DSOFT
    "        (void)pd;\n"
    "        for (int x = 0; x < @D; x++) dqa[x] += dsv * ks[jj * @D + x];\n"
    "      }\n"
    "    }\n"
    "    if (!row) continue;\n"
    "    const float sc = (float)scale;\n"
    "    for (int x = 0; x < @D; x++) dq[(bh * sq + i) * @D + x] = dqa[x] * sc;\n"
    "  }\n"
    "}\n";

/* One function to generate: kind 0 forward, 1 dK/dV, 2 dQ; bias 0 none,
 * 1 added to the scores, 2 also dS written for dbias (dK/dV only). */
typedef struct fa_spec {
  int32_t kind, d, dv, mode, bias;
} fa_spec;

static void spec_tag(const fa_spec *s, char *out, size_t n) {
  static const char *const bias[] = {"", "_b", "_bg"};
  snprintf(out, n, "d%d_v%d_m%d%s", (int)s->d, (int)s->dv, (int)s->mode,
           bias[s->bias >= 0 && s->bias <= 2 ? s->bias : 0]);
}

/* Writes text with its @-words spelled for dialect d and spec s (NULL:
 * the helpers, which use none of the sizes). */
static void put_text(cg_buf *b, const gpu_dialect *d, const char *text, const fa_spec *s) {
  char tag[48] = "";
  if (s) spec_tag(s, tag, sizeof tag);
  for (const char *p = text; *p; p++) {
    if (*p != '@') {
      put(b, "%c", *p);
      continue;
    }
    const char c = p[1];
    p++;
    switch (c) {
    case 'K': put(b, "%s", d->kernel); break;
    case 'G':
    case 'S': { /* qualifiers end with a space where not empty: no second one */
      const char *q = c == 'G' ? d->global : d->shared;
      put(b, "%s", q);
      if (q[0] && p[1] == ' ') p++;
      break;
    }
    case 'L': put(b, "%s", d->lid); break;
    case 'I': put(b, "%s", d->gid); break;
    case 'N': put(b, "%s", d->ngroups); break;
    case 'B': put(b, "%s", d->barrier); break;
    case 'T': put(b, "%s", tag); break;
    case 'C': put(b, "%d", FA_BC); break;
    case 'D': put(b, "%d", s ? (int)s->d : 0); break;
    case 'V': put(b, "%d", s ? (int)s->dv : 0); break;
    case 'M': put(b, "%d", s ? (int)s->mode : 0); break;
    case 'H': put(b, "%d", s ? (int)s->bias : 0); break;
    case 'R':
      if (p[1] == '_') { /* @R_: query rows per staged tile */
        put(b, "%d", FA_BR);
        p++;
      } else {
        put(b, "%s", d->restrict_kw);
      }
      break;
    default: put(b, "@%c", c); break;
    }
  }
}

/* ---- the launches of one node ------------------------------------------------------ */

static bool all_f32(const loom_graph *g, const loom_node *n, int32_t n_float) {
  for (int32_t i = 0; i < n_float; i++)
    if (loom_value_type(g, n->in[i])->dtype != LOOM_DTYPE_F32) return false;
  return true;
}

/* The counter base: its buffer and byte size (0: none). */
static void base_arg(const loom_graph *g, const loom_node *n, int32_t idx, loom_gpu_arg *buf,
                     loom_gpu_arg *bytes) {
  *buf = (loom_gpu_arg){.kind = LOOM_GPU_ARG_BUF, .buf = LOOM_GPU_BUF_NONE};
  *bytes = (loom_gpu_arg){.kind = LOOM_GPU_ARG_I64};
  if (idx < 0 || n->n_in <= idx) return;
  const loom_type *t = loom_value_type(g, n->in[idx]);
  if (t->rank != 0 || (t->dtype != LOOM_DTYPE_I64 && t->dtype != LOOM_DTYPE_I32)) return;
  buf->buf = idx;
  bytes->i = (int64_t)loom_dtype_size(t->dtype);
}

static loom_gpu_arg buf_arg(int32_t b) { return (loom_gpu_arg){.kind = LOOM_GPU_ARG_BUF, .buf = b}; }
static loom_gpu_arg i64_arg(int64_t v) { return (loom_gpu_arg){.kind = LOOM_GPU_ARG_I64, .i = v}; }
static loom_gpu_arg f64_arg(double v) { return (loom_gpu_arg){.kind = LOOM_GPU_ARG_F64, .f = v}; }

static int64_t groups_for(int64_t tiles) {
  const int64_t cap = (int64_t)1 << 20;
  return tiles < 1 ? 1 : tiles < cap ? tiles : cap;
}

/* The attention node's sizes, attributes and dropout mode; false when the
 * kernels do not take it. */
typedef struct fa_node {
  int64_t bh, sq, sk, d, dv;
  double scale, p;
  bool causal;
  uint64_t seed, offset;
  int32_t mode, mask_in, base_in;
  /* the bias input (-1: none), its strides over [lead[0..2], Sq, Sk] (the
   * scores' leading dims merged into three), and whether dbias is wanted */
  int32_t bias_in;
  int64_t lead[3], stride[5];
  bool dbias;
} fa_node;

/* True if value v is read: by a node of g or as one of its outputs. */
static bool value_read(const loom_graph *g, int32_t v) {
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v) return true;
  return false;
}

/* The bias of node n against the scores [rank, shape] into a's lead and
 * stride: size-1 dims dropped, neighbours merged where the bias repeats
 * along both or steps through both contiguously; false when more than
 * three leading dims remain. */
static bool bias_layout(const loom_graph *g, const loom_node *n, int32_t rank,
                        const int64_t *shape, fa_node *a) {
  const loom_type *bt = loom_value_type(g, n->in[a->bias_in]);
  int64_t st[LOOM_MAX_RANK], size[LOOM_MAX_RANK], step[LOOM_MAX_RANK];
  loom_attention_bias_strides(bt, rank, shape, st);
  int32_t m = 0;
  for (int32_t d = 0; d < rank - 2; d++) {
    if (shape[d] == 1) continue;
    if (m > 0 && ((step[m - 1] == 0 && st[d] == 0) ||
                  (st[d] != 0 && step[m - 1] == st[d] * shape[d]))) {
      size[m - 1] *= shape[d];
      step[m - 1] = st[d];
      continue;
    }
    size[m] = shape[d];
    step[m++] = st[d];
  }
  if (m > 3) return false;
  for (int32_t d = 0; d < 3; d++) {
    const int32_t k = d - (3 - m); /* right-aligned, padded with size-1 dims in front */
    a->lead[d] = k >= 0 ? size[k] : 1;
    a->stride[d] = k >= 0 ? step[k] : 0;
  }
  a->stride[3] = st[rank - 2];
  a->stride[4] = st[rank - 1];
  return true;
}

static bool fa_node_of(loom_ctx *ctx, const loom_graph *g, const loom_node *n, fa_node *a) {
  const bool fwd = n->op == LOOM_OP_FLASH_ATTENTION;
  const int32_t n_float = fwd ? 3 : 6, core = loom_attention_core_inputs(n),
                bias = loom_attention_bias_input(n);
  if (core < n_float || !all_f32(g, n, n_float) ||
      (bias >= 0 && loom_value_type(g, n->in[bias])->dtype != LOOM_DTYPE_F32))
    return false;
  const loom_type *q = loom_value_type(g, n->in[0]), *k = loom_value_type(g, n->in[1]),
                  *v = loom_value_type(g, n->in[2]);
  const int32_t r = q->rank;
  memset(a, 0, sizeof *a);
  a->bh = 1;
  for (int32_t i = 0; i < r - 2; i++) a->bh *= q->shape[i];
  a->sq = q->shape[r - 2];
  a->sk = k->shape[r - 2];
  a->d = q->shape[r - 1];
  a->dv = v->shape[r - 1];
  if (a->bh < 1 || a->sq < 1 || a->sk < 1 || a->d < 1 || a->dv < 1 || a->d + a->dv > FA_MAX_DSUM)
    return false;
  a->scale = LOOM_ATTR_F(n, flash_attention, scale);
  if (a->scale == 0.0) a->scale = 1.0 / sqrt((double)a->d);
  a->causal = LOOM_ATTR_I(n, flash_attention, causal) != 0;
  a->p = LOOM_ATTR_F(n, flash_attention, p);
  a->seed = (uint64_t)LOOM_ATTR_I(n, flash_attention, seed);
  a->offset = (uint64_t)LOOM_ATTR_I(n, flash_attention, offset);
  a->base_in = core > n_float ? n_float : -1;
  a->mask_in = core > n_float + 1 ? n_float + 1 : -1;
  a->bias_in = bias;
  if (bias >= 0) {
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    loom_attention_probs_shape(q, k, &rank, shape);
    if (!bias_layout(g, n, rank, shape, a)) return false;
    const int32_t db = fwd ? -1 : loom_flash_dbias_output(n);
    a->dbias = db >= 0 && value_read(g, n->out[db]);
  }
  a->mode = a->p > 0.0 ? (a->mask_in >= 0 ? 2 : 1) : 0;
  if (a->mode != 0) { /* a flat piece only: its counters are origin + e */
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    loom_attention_probs_shape(q, k, &rank, shape);
    loom_rng_piece piece;
    if (loom_op_rng_piece(ctx, n, rank, shape, &piece) || !loom_rng_piece_is_flat(&piece))
      return false;
    a->offset += piece.origin;
  }
  return true;
}

/* The arguments every attention kernel ends with. */
static void put_scalars(loom_gpu_call *c, const loom_graph *g, const loom_node *n,
                        const fa_node *a) {
  loom_gpu_arg bb, bytes;
  base_arg(g, n, a->base_in, &bb, &bytes);
  (void)bb;
  loom_gpu_arg s[] = {i64_arg(a->bh),
                      i64_arg(a->sq),
                      i64_arg(a->sk),
                      i64_arg(a->causal),
                      bytes,
                      i64_arg((int64_t)a->seed),
                      i64_arg((int64_t)a->offset),
                      i64_arg((int64_t)loom_dropout_threshold(a->p)),
                      f64_arg(a->scale),
                      f64_arg(1.0 / (1.0 - a->p)),
                      buf_arg(a->bias_in >= 0 ? a->bias_in : LOOM_GPU_BUF_NONE),
                      i64_arg(a->lead[1]),
                      i64_arg(a->lead[2]),
                      i64_arg(a->stride[0]),
                      i64_arg(a->stride[1]),
                      i64_arg(a->stride[2]),
                      i64_arg(a->stride[3]),
                      i64_arg(a->stride[4])};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) c->args[c->n_args++] = s[i];
}

/* The spec's bias field for kind (0 forward, 1 dK/dV, 2 dQ). */
static int32_t spec_bias(const fa_node *a, int32_t kind) {
  return a->bias_in < 0 ? 0 : kind == 1 && a->dbias ? 2 : 1;
}

static void name_call(loom_gpu_call *c, const char *kind, const fa_node *a) {
  const int32_t k = !strcmp(kind, "fwd") ? 0 : !strcmp(kind, "dkdv") ? 1 : 2;
  fa_spec s = {k, (int32_t)a->d, (int32_t)a->dv, a->mode, spec_bias(a, k)};
  char tag[48];
  spec_tag(&s, tag, sizeof tag);
  snprintf(c->fn, sizeof c->fn, "lm_fa_%s_%s", kind, tag);
}

loom_status loom_gpu_attention_calls(loom_ctx *ctx, const loom_graph *g, const loom_node *n,
                                     loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS],
                                     int32_t *n_calls, int64_t *workspace_bytes) {
  *n_calls = 0;
  *workspace_bytes = 0;
  memset(calls, 0, LOOM_GPU_ATTENTION_MAX_CALLS * sizeof *calls);
  if (n->op == LOOM_OP_DROPOUT_MASK) {
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    loom_dropout_mask_shape(n, &rank, shape);
    loom_rng_piece piece;
    if (loom_op_rng_piece(ctx, n, rank, shape, &piece) || !loom_rng_piece_is_flat(&piece))
      return LOOM_STATUS_OK;
    int64_t numel = LOOM_ATTR_I(n, dropout_mask, numel);
    if (numel < 1) return LOOM_STATUS_OK;
    loom_gpu_call *c = &calls[0];
    loom_gpu_arg bb, bytes;
    base_arg(g, n, 0, &bb, &bytes);
    snprintf(c->fn, sizeof c->fn, "lm_dropout_bits");
    c->groups = groups_for((numel + 8 * 64 - 1) / (8 * 64));
    loom_gpu_arg args[] = {bb,
                           buf_arg(n->n_in),
                           i64_arg(numel),
                           bytes,
                           i64_arg(LOOM_ATTR_I(n, dropout_mask, seed)),
                           i64_arg(LOOM_ATTR_I(n, dropout_mask, offset) + (int64_t)piece.origin),
                           i64_arg((int64_t)loom_dropout_threshold(LOOM_ATTR_F(n, dropout_mask, p)))};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) c->args[c->n_args++] = args[i];
    *n_calls = 1;
    return LOOM_STATUS_OK;
  }
  if (n->op != LOOM_OP_FLASH_ATTENTION && n->op != LOOM_OP_FLASH_ATTENTION_GRAD)
    return LOOM_STATUS_OK;
  fa_node a;
  if (!fa_node_of(ctx, g, n, &a)) return LOOM_STATUS_OK;
  loom_gpu_arg bb, bytes;
  base_arg(g, n, a.base_in, &bb, &bytes);
  const int32_t out = n->n_in; /* buffers: inputs, then outputs */
  const loom_gpu_arg mask = buf_arg(a.mask_in >= 0 ? a.mask_in : LOOM_GPU_BUF_NONE);
  const int64_t qtiles = a.bh * ((a.sq + 63) / 64), ktiles = a.bh * ((a.sk + 63) / 64);
  if (n->op == LOOM_OP_FLASH_ATTENTION) {
    loom_gpu_call *c = &calls[0];
    name_call(c, "fwd", &a);
    c->groups = groups_for(qtiles);
    loom_gpu_arg args[] = {buf_arg(0), buf_arg(1), buf_arg(2), bb, mask, buf_arg(out),
                           buf_arg(out + 1)};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) c->args[c->n_args++] = args[i];
    put_scalars(c, g, n, &a);
    *n_calls = 1;
    return LOOM_STATUS_OK;
  }
  /* backward: inputs q k v o lse d_o [base [mask]] [bias]; outputs dq dk dv
   * [dbias]; the workspace holds Di, then (dbias) dS at dso floats */
  const int64_t rows = a.bh * a.sq, dso = (rows + 63) / 64 * 64;
  loom_gpu_call *c = &calls[0];
  snprintf(c->fn, sizeof c->fn, "lm_fa_di");
  c->groups = groups_for((rows + 63) / 64);
  loom_gpu_arg di_args[] = {buf_arg(3), buf_arg(5), buf_arg(LOOM_GPU_BUF_WORKSPACE), i64_arg(rows),
                            i64_arg(a.dv)};
  for (size_t i = 0; i < sizeof di_args / sizeof di_args[0]; i++) c->args[c->n_args++] = di_args[i];
  c = &calls[1];
  name_call(c, "dkdv", &a);
  c->groups = groups_for(ktiles);
  loom_gpu_arg kv_args[] = {buf_arg(0), buf_arg(1), buf_arg(2), bb, mask, buf_arg(4), buf_arg(5),
                            buf_arg(LOOM_GPU_BUF_WORKSPACE), buf_arg(out + 1), buf_arg(out + 2)};
  for (size_t i = 0; i < sizeof kv_args / sizeof kv_args[0]; i++) c->args[c->n_args++] = kv_args[i];
  put_scalars(c, g, n, &a);
  c->args[c->n_args++] = buf_arg(LOOM_GPU_BUF_WORKSPACE);
  c->args[c->n_args++] = i64_arg(dso);
  c = &calls[2];
  name_call(c, "dq", &a);
  c->groups = groups_for(qtiles);
  loom_gpu_arg q_args[] = {buf_arg(0), buf_arg(1), buf_arg(2), bb, mask, buf_arg(4), buf_arg(5),
                           buf_arg(LOOM_GPU_BUF_WORKSPACE), buf_arg(out)};
  for (size_t i = 0; i < sizeof q_args / sizeof q_args[0]; i++) c->args[c->n_args++] = q_args[i];
  put_scalars(c, g, n, &a);
  *n_calls = 3;
  *workspace_bytes = rows * (int64_t)sizeof(float);
  if (!a.dbias) return LOOM_STATUS_OK;
  /* dbias from dS, a thread per bias element */
  const int32_t db = loom_flash_dbias_output(n);
  const int64_t nb = loom_type_numel(loom_value_type(g, n->out[db]));
  c = &calls[3];
  snprintf(c->fn, sizeof c->fn, "lm_fa_dbias");
  c->groups = groups_for((nb + 63) / 64);
  loom_gpu_arg db_args[] = {buf_arg(LOOM_GPU_BUF_WORKSPACE), i64_arg(dso), buf_arg(out + db),
                            i64_arg(nb), i64_arg(a.lead[0]), i64_arg(a.lead[1]), i64_arg(a.lead[2]),
                            i64_arg(a.sq), i64_arg(a.sk), i64_arg(a.stride[0]),
                            i64_arg(a.stride[1]), i64_arg(a.stride[2]), i64_arg(a.stride[3]),
                            i64_arg(a.stride[4]), i64_arg(a.causal)};
  for (size_t i = 0; i < sizeof db_args / sizeof db_args[0]; i++) c->args[c->n_args++] = db_args[i];
  *n_calls = 4;
  *workspace_bytes = (dso + a.bh * a.sq * a.sk) * (int64_t)sizeof(float);
  return LOOM_STATUS_OK;
}

/* ---- the source ---------------------------------------------------------------------- */

static loom_status put_source(loom_ctx *ctx, loom_gpu_dialect dialect, const fa_spec *specs,
                              int32_t n, char **source) {
  const gpu_dialect *d = loom_gpu_dialect_get(dialect);
  cg_buf b = {0};
  loom_gpu_put_prelude(&b, d);
  put_text(&b, d, helpers, NULL);
  static const char *const texts[] = {fwd_text, dkdv_text, dq_text};
  for (int32_t i = 0; i < n; i++) put_text(&b, d, texts[specs[i].kind], &specs[i]);
  if (b.buf.oom || !b.buf.p) {
    free(b.buf.p);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory generating attention kernels");
  }
  *source = b.buf.p;
  return LOOM_STATUS_OK;
}

/* Adds s to specs[*n] unless there (cap: room). */
static void add_spec(fa_spec *specs, int32_t *n, fa_spec s) {
  for (int32_t i = 0; i < *n; i++)
    if (!memcmp(&specs[i], &s, sizeof s)) return;
  specs[(*n)++] = s;
}

loom_status loom_codegen_gpu_attention(loom_ctx *ctx, loom_gpu_dialect d, const loom_graph *g,
                                       char **source) {
  *source = NULL;
  bool any = false;
  int32_t cap = 0, n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) cap += 2;
  fa_spec *specs = loom_calloc(ctx, (size_t)(cap + 1), sizeof *specs);
  if (!specs) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *nd = &g->nodes[i];
    loom_gpu_call calls[LOOM_GPU_ATTENTION_MAX_CALLS];
    int32_t nc = 0;
    int64_t ws = 0;
    loom_status st = loom_gpu_attention_calls(ctx, g, nd, calls, &nc, &ws);
    if (st) {
      free(specs);
      return st;
    }
    any |= nc > 0;
    fa_node a;
    if (nc == 0 || nd->op == LOOM_OP_DROPOUT_MASK || !fa_node_of(ctx, g, nd, &a)) continue;
    fa_spec s = {0, (int32_t)a.d, (int32_t)a.dv, a.mode, spec_bias(&a, 0)};
    if (nd->op == LOOM_OP_FLASH_ATTENTION) {
      add_spec(specs, &n, s);
    } else {
      s.kind = 1;
      s.bias = spec_bias(&a, 1);
      add_spec(specs, &n, s);
      s.kind = 2;
      s.bias = spec_bias(&a, 2);
      add_spec(specs, &n, s);
    }
  }
  loom_status st = any ? put_source(ctx, d, specs, n, source) : LOOM_STATUS_OK;
  free(specs);
  return st;
}

loom_status loom_codegen_gpu_attention_dims(loom_ctx *ctx, loom_gpu_dialect d, int32_t n,
                                            const int32_t *dims, const int32_t *dvs,
                                            const int32_t *rngs, char **source) {
  *source = NULL;
  fa_spec *specs = loom_calloc(ctx, (size_t)(3 * n + 1), sizeof *specs);
  if (!specs) return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++) {
    if (dims[i] < 1 || dvs[i] < 1 || dims[i] + dvs[i] > FA_MAX_DSUM || rngs[i] < 0 || rngs[i] > 2) {
      free(specs);
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "attention kernels: head dims %d, %d (sum at most %d) and mode %d (0-2)",
                        (int)dims[i], (int)dvs[i], FA_MAX_DSUM, (int)rngs[i]);
    }
    for (int32_t kind = 0; kind < 3; kind++)
      add_spec(specs, &m, (fa_spec){kind, dims[i], dvs[i], rngs[i], 0});
  }
  loom_status st = put_source(ctx, d, specs, m, source);
  free(specs);
  return st;
}

/* ---- the rewrite ------------------------------------------------------------------------ */

loom_status loom_gpu_attention_rewrite(loom_ctx *ctx, const loom_graph *g,
                                       const loom_session_options *opts,
                                       void (*measure)(void *arg, loom_ctx *ctx, loom_rng_model *m),
                                       void *arg, loom_graph **out, int32_t *n_rewritten) {
  *out = NULL;
  if (opts->attention == LOOM_ATTENTION_DECOMPOSED) return LOOM_STATUS_OK;
  bool dropout = false;
  if (!loom_attention_candidates(g, &dropout)) return LOOM_STATUS_OK;
  loom_rng_model model;
  const bool measured = opts->rng == LOOM_RNG_AUTO && dropout && measure;
  if (measured) measure(arg, ctx, &model);
  loom_status st =
      loom_graph_fuse_attention(g, opts->rng, measured ? &model : NULL, out, n_rewritten);
  if (st && g->ctx != ctx) loom_error(ctx, st, "%s", loom_ctx_error(g->ctx));
  return st;
}

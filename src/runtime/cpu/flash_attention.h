/*
 * Flash attention on the CPU (FlashAttention-2 style), forward and backward,
 * over raw contiguous row-major f32 pointers: q [BH, Sq, D], k [BH, Sk, D],
 * v [BH, Sk, Dv] (BH = batch * heads flattened), o [BH, Sq, Dv].
 *
 * Semantics: those of the decomposed `attention` composite
 * (ops/composite_attention.c), up to f32 rounding:
 *   S = scale * q k^T; with causal, query row i sees keys j <= i + (Sk - Sq)
 *   (the others are -inf); P = softmax over j; with dropout (p > 0),
 *   Pd[i,j] = keep(e) ? P[i,j] / (1 - p) : 0, where e = (bh*Sq + i)*Sk + j
 *   is the flat index of the [BH, Sq, Sk] probabilities and keep(e) is
 *   loom_dropout_keep(seed, j0 + e, loom_dropout_threshold(p)) (with a
 *   piece, j0 + its logical index of e instead)
 *   (rng/philox.h, docs/DROPOUT.md); O = Pd v.
 * Edge cases, as the composite: a row that sees no key (causal with
 * Sq > Sk: the first Sq - Sk rows) has probabilities 0/0 = NaN, so its
 * output is NaN (0 if dropout drops every key of the row) and its lse is
 * -inf; in the backward such a row gets dq = 0, adds nothing to dk, and
 * makes dv[j, :] NaN for every key j it keeps (all j without dropout), as
 * the composite's gradient does (its NaN probabilities reach dv = Pd^T dO).
 * Sk = 0 gives O = 0 (an empty sum) and lse = -inf; Sq = 0 gives
 * dk = dv = 0; BH = 0, D = 0 or Dv = 0 are allowed too.
 *
 * Design: FlashAttention-2. The forward runs tasks (bh, 128 query rows)
 * with an online softmax (running max in f32, running sum in double) over
 * blocks of 128 keys, on transposed scores K Q^T in strips of 32 queries
 * (the queries are the vector lanes: the softmax needs no row reductions,
 * and a causal strip stops at its last query's last key); the backward recomputes P from lse, with
 * Di = rowsum(dO * O), and runs tasks (bh, key chunk): each accumulates dk,
 * dv of its key blocks and a partial dq, and the partial dq are summed in
 * a fixed order afterwards (no atomics). Tasks depend on the shapes only,
 * never on the thread count, so results are bitwise identical for any
 * n_threads. Extra memory (loom_flash_attn_workspace_bytes), never
 * Sq x Sk: per-thread tiles (about 80 KB forward, 150 KB backward at D =
 * Dv = 64; with dropout the forward adds 16 bytes per key per thread of
 * keep bits) and, in the backward, BH * Sq floats of Di plus at most 15
 * partial [Sq, D] dq slices in all. The keep mask is generated per tile
 * row with the fast Philox paths (loom_dropout_mask_bits) or read from
 * mask_bits; both give bitwise the same results. Outputs must not
 * overlap the inputs.
 */
#ifndef LOOM_RUNTIME_CPU_FLASH_ATTENTION_H
#define LOOM_RUNTIME_CPU_FLASH_ATTENTION_H

#include "core/ctx.h"
#include "rng/piece.h"

#define LOOM_FLASH_ATTN_MAX_LEAD 8

/* Which kernels run the tiles. BEST picks AVX512 where the CPU has
 * AVX-512F, else AVX2 where it has AVX2 and FMA, else PORTABLE; tests
 * force one. Results are deterministic per
 * implementation, not equal across implementations (FMA, exp). */
typedef enum loom_flash_attn_impl {
  LOOM_FLASH_ATTN_IMPL_BEST = 0,
  LOOM_FLASH_ATTN_IMPL_PORTABLE = 1, /* plain C for the baseline ISA */
  LOOM_FLASH_ATTN_IMPL_AVX512 = 2,   /* AVX-512F intrinsics (target attributes) */
  LOOM_FLASH_ATTN_IMPL_AVX2 = 3,     /* AVX2 + FMA intrinsics for the products and exponentials */
  LOOM_FLASH_ATTN_IMPL_COUNT = 4
} loom_flash_attn_impl;

/* Where a [BH, S, W] operand's rows lie in its buffer: row s of bh starts
 * at element off(bh) + s * row, its W elements contiguous. off(bh) is
 * sum_i idx_i * stride_i over bh's multi-index in the n_lead dims `lead`
 * (row-major, their product BH); n_lead 0 with row 0: the contiguous
 * [BH, S, W] tensor. What a strided view of a larger tensor gives: the
 * attention's q, k, v read in place from the fused QKV projection, o
 * written in the layout the next matmul reads (runtime/cpu/cpu_attention.c). */
typedef struct loom_flash_attn_layout {
  int32_t n_lead;
  int64_t lead[LOOM_FLASH_ATTN_MAX_LEAD], stride[LOOM_FLASH_ATTN_MAX_LEAD];
  int64_t row;
} loom_flash_attn_layout;

/* Which operand a layout is for: loom_flash_attn.at[]. */
enum {
  LOOM_FA_Q, LOOM_FA_K, LOOM_FA_V, LOOM_FA_O, LOOM_FA_DO, /* read */
  LOOM_FA_DQ, LOOM_FA_DK, LOOM_FA_DV,                     /* written by the backward */
  LOOM_FA_OPERANDS
};

typedef struct loom_flash_attn {
  int64_t bh, sq, sk, d, dv; /* sizes, all >= 0 */
  const float *q, *k, *v;    /* may be NULL only when the tensor is empty */
  double scale;              /* finite; the caller resolves the op's 0 to 1/sqrt(D) */
  bool causal;
  double p;          /* dropout probability in [0, 1); 0: no dropout */
  uint64_t seed, j0; /* dropout key and first counter position (base + offset) */
  /* Optional, read only when p > 0: the keep mask as 1 bit per element of
   * the flat [BH, Sq, Sk] tensor, element e in bit e % 8 of byte e / 8 (the
   * layout loom_dropout_mask_bits(seed, j0, BH*Sq*Sk, thr, bits) writes),
   * read instead of generating Philox words. NULL: generate in the kernel. */
  const uint8_t *mask_bits;
  /* Optional: the probabilities [BH, Sq, Sk] are this piece of a logical
   * tensor (rng/piece.h, with the op's [..., Sq, Sk] shape), so element e
   * uses counter j0 + loom_rng_piece_index(piece, e). NULL: j0 + e. */
  const loom_rng_piece *piece;
  /* Optional additive bias on the scaled scores (before the causal mask
   * and the softmax; -inf hides a key): score (bh, i, j) adds
   * bias[bias_at's offset of bh + i * bias_at.row + j * bias_col], every
   * stride possibly 0 (a broadcast bias read in place). NULL: none. A row
   * the bias hides from every key has lse -inf and output NaN (the
   * composite's 0/0), and NaN gradients. */
  const float *bias;
  loom_flash_attn_layout bias_at;
  int64_t bias_col;
  /* Backward, optional: the bias gradient dS (unscaled) summed into
   * dbias at the bias's own offsets (the caller zeroes it; its own
   * repeated elements are summed in a fixed order). Needs bias. Extra
   * memory: partial sums of BH x Sk floats, BH x Sq x Sk when the bias
   * varies along the queries (the one case that holds Sq x Sk: the
   * gradient of such a bias is that large itself for BH = 1). */
  float *dbias;
  int32_t impl; /* loom_flash_attn_impl; 0 (BEST) when zero-initialised */
  /* Layouts of q, k, v, o, d_o, dq, dk and dv (zero-initialised:
   * contiguous); the results are bitwise those of contiguous copies (the
   * same sums in the same order). lse is contiguous. dq, dk, dv may lie
   * in one tensor (the fused QKV projection's gradient) if they do not
   * overlap. */
  loom_flash_attn_layout at[LOOM_FA_OPERANDS];
} loom_flash_attn;

/* True if the implementation runs on this CPU (BEST always does). */
bool loom_flash_attn_impl_supported(int32_t impl);

/* Forward: o [BH, Sq, Dv] and, if lse is not NULL, lse [BH, Sq]: the
 * log-sum-exp of the scaled, masked scores of each row (before dropout),
 * which the backward needs. n_threads: OpenMP threads (0: the context's
 * setting, loom_ctx_resolved_threads). */
loom_status loom_flash_attn_fwd(loom_ctx *ctx, int32_t n_threads, const loom_flash_attn *a,
                                float *o, float *lse);

/* Backward from the forward's o and lse and the output gradient d_o
 * [BH, Sq, Dv]: dq [BH, Sq, D], dk [BH, Sk, D], dv [BH, Sk, Dv] (written,
 * not accumulated). The same a (and mask) as the forward. */
loom_status loom_flash_attn_bwd(loom_ctx *ctx, int32_t n_threads, const loom_flash_attn *a,
                                const float *o, const float *lse, const float *d_o, float *dq,
                                float *dk, float *dv);

/* Bytes of memory the forward (backward: true) allocates for these sizes
 * and n_threads (0: the core count): O(n_threads * (tiles + Sk) + BH * Sq
 * * D), never O(Sq * Sk). 0 for a NULL or invalid a. */
int64_t loom_flash_attn_workspace_bytes(const loom_flash_attn *a, int32_t n_threads, bool backward);

#endif

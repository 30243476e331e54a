/*
 * The attention primitives on the cpu backend (ops/attention.c): fused
 * flash attention forward and backward (runtime/cpu/flash_attention.c) and
 * the dropout bitmask (the fast Philox paths), f32, with operands
 * contiguous or at strides inside their values (ops/attention_views.h);
 * other cases run their reference kernels.
 */
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/flash_attention.h"

#include "ir/dtype.h"
#include "ops/attention_bias.h"
#include "ops/attention_views.h"
#include "ops/op.h"
#include "ops/rng_piece.h"
#include "rng/philox.h"
#include "rng/philox_fast.h"

#include <math.h>
#include <string.h>

/* Where operand w of n lies in the value at `data` (attention_views.h):
 * *at its layout, the result its first element. */
static float *place(const loom_node *n, int32_t w, void *data, loom_flash_attn_layout *at) {
  loom_flash_view v = loom_flash_view_of(n, w);
  if (!v.strided) return data;
  at->n_lead = v.n_lead;
  for (int32_t i = 0; i < v.n_lead; i++) at->lead[i] = v.lead[i], at->stride[i] = v.stride[i];
  at->row = v.row;
  return (float *)data + v.offset;
}

/* The op's attributes and sizes as the flash kernels take them, q, k, v
 * at their places; the counter base is input `base`, the optional mask
 * input `mask` (-1: none). lt: the operands' logical types. */
static loom_status flash_args(const loom_cpu *c, const loom_node *n, const loom_view *in,
                              int32_t base, int32_t mask, loom_rng_piece *piece,
                              loom_type *lt, loom_flash_attn *out) {
  loom_type it[LOOM_PART_MAX_IO];
  for (int32_t i = 0; i < n->n_in && i < LOOM_PART_MAX_IO; i++) {
    it[i] = (loom_type){.dtype = in[i].dtype, .rank = in[i].rank};
    for (int32_t d = 0; d < in[i].rank; d++) it[i].shape[d] = in[i].shape[d];
  }
  loom_flash_logical_types(n, it, lt);
  int32_t r = lt[0].rank;
  loom_flash_attn a = {.bh = 1,
                       .sq = lt[0].shape[r - 2],
                       .sk = lt[1].shape[r - 2],
                       .d = lt[0].shape[r - 1],
                       .dv = lt[2].shape[r - 1]};
  a.q = place(n, LOOM_FLASH_Q, in[0].data, &a.at[LOOM_FA_Q]);
  a.k = place(n, LOOM_FLASH_K, in[1].data, &a.at[LOOM_FA_K]);
  a.v = place(n, LOOM_FLASH_V, in[2].data, &a.at[LOOM_FA_V]);
  for (int32_t i = 0; i < r - 2; i++) a.bh *= lt[0].shape[i];
  a.scale = LOOM_ATTR_F(n, flash_attention, scale);
  if (a.scale == 0.0) a.scale = a.d > 0 ? 1.0 / sqrt((double)a.d) : 1.0;
  a.causal = LOOM_ATTR_I(n, flash_attention, causal) != 0;
  a.p = LOOM_ATTR_F(n, flash_attention, p);
  a.seed = (uint64_t)LOOM_ATTR_I(n, flash_attention, seed);
  int32_t n_core = loom_attention_core_inputs(n), bias = loom_attention_bias_input(n);
  a.j0 = (uint64_t)LOOM_ATTR_I(n, flash_attention, offset) +
         (n_core > base ? (uint64_t)loom_load_i64(in[base].dtype, in[base].data, 0) : 0);
  a.mask_bits = mask >= 0 && n_core > mask ? in[mask].data : NULL;
  int32_t rank = r;
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < r - 1; d++) shape[d] = lt[0].shape[d];
  shape[r - 1] = a.sk;
  LOOM_TRY(loom_op_rng_piece(c->ctx, n, rank, shape, piece));
  a.piece = loom_rng_piece_is_flat(piece) && piece->origin == 0 ? NULL : piece;
  if (bias >= 0) { /* read at its broadcast strides over the scores */
    loom_type bt = it[bias];
    int64_t st[LOOM_MAX_RANK];
    loom_attention_bias_strides(&bt, rank, shape, st);
    a.bias = in[bias].data;
    a.bias_at.n_lead = r - 2;
    for (int32_t d = 0; d < r - 2; d++) a.bias_at.lead[d] = shape[d], a.bias_at.stride[d] = st[d];
    a.bias_at.row = st[r - 2];
    a.bias_col = st[r - 1];
  }
  *out = a;
  return LOOM_STATUS_OK;
}

/* Buffers of the cpu backend are contiguous; a strided view here would be
 * a bug upstream, not a case to compute. */
static loom_status need_contiguous(const loom_cpu *c, const loom_node *n, const loom_view *in) {
  for (int32_t i = 0; i < n->n_in; i++)
    if (!loom_view_is_contiguous(&in[i]))
      return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "%s: input %d is not contiguous",
                        loom_op_name(n->op), i);
  return LOOM_STATUS_OK;
}

static loom_status k_flash(const loom_cpu *c, const loom_node *n, const loom_view *in,
                           const loom_view *out) {
  LOOM_TRY(need_contiguous(c, n, in));
  loom_flash_attn a;
  loom_rng_piece piece;
  loom_type lt[LOOM_FLASH_ALL];
  LOOM_TRY(flash_args(c, n, in, 3, 4, &piece, lt, &a));
  float *o = place(n, LOOM_FLASH_O, out[0].data, &a.at[LOOM_FA_O]);
  return loom_flash_attn_fwd(c->ctx, c->nt, &a, o, out[1].data);
}

static loom_status k_flash_grad(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                const loom_view *out) {
  LOOM_TRY(need_contiguous(c, n, in));
  loom_flash_attn a;
  loom_rng_piece piece;
  loom_type lt[LOOM_FLASH_ALL];
  LOOM_TRY(flash_args(c, n, in, 6, 7, &piece, lt, &a));
  const float *o = place(n, LOOM_FLASH_O, in[3].data, &a.at[LOOM_FA_O]);
  const float *d_o = place(n, LOOM_FLASH_DO, in[5].data, &a.at[LOOM_FA_DO]);
  float *d[3]; /* dq, dk, dv: three outputs, or places in one */
  const bool placed = loom_flash_view_of(n, LOOM_FLASH_DQ).strided;
  for (int32_t w = 0; w < 3; w++)
    d[w] = place(n, LOOM_FLASH_DQ + w, out[placed ? 0 : w].data, &a.at[LOOM_FA_DQ + w]);
  const int32_t db = loom_flash_dbias_output(n);
  if (db >= 0) { /* the bias gradient, summed into */
    a.dbias = out[db].data;
    memset(out[db].data, 0, (size_t)loom_view_numel(&out[db]) * sizeof(float));
  }
  return loom_flash_attn_bwd(c->ctx, c->nt, &a, o, in[4].data, d_o, d[0], d[1], d[2]);
}

/* Bytes per task: a multiple of 8 elements keeps every task on whole bytes. */
#define MASK_TASK_BYTES 4096

/* ORs the keep bits of counters j, j + 1, ... (n of them) into bits e,
 * e + 1, ... of dst (any bit alignment; touches only the bytes holding
 * them). */
static void put_bits(uint64_t seed, uint64_t j, int64_t n, uint64_t thr, int64_t e,
                     uint8_t *dst) {
  uint8_t tmp[512];
  for (int64_t k = 0; k < n; k += 8 * (int64_t)sizeof tmp) {
    int64_t len = LOOM_MIN(n - k, 8 * (int64_t)sizeof tmp), at = e + k;
    loom_dropout_mask_bits(seed, j + (uint64_t)k, len, thr, tmp);
    int64_t byte = at >> 3, last = (at + len - 1) >> 3;
    unsigned sh = (unsigned)(at & 7);
    for (int64_t b = 0; b < (len + 7) / 8; b++) {
      dst[byte + b] |= (uint8_t)(tmp[b] << sh);
      if (sh && byte + b + 1 <= last) dst[byte + b + 1] |= (uint8_t)(tmp[b] >> (8 - sh));
    }
  }
}

static loom_status k_dropout_mask(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                  const loom_view *out) {
  uint64_t j0 = (uint64_t)LOOM_ATTR_I(n, dropout_mask, offset);
  if (n->n_in > 0) j0 += (uint64_t)loom_load_i64(in[0].dtype, in[0].data, 0);
  uint64_t seed = (uint64_t)LOOM_ATTR_I(n, dropout_mask, seed);
  uint64_t thr = loom_dropout_threshold(LOOM_ATTR_F(n, dropout_mask, p));
  int64_t numel = LOOM_ATTR_I(n, dropout_mask, numel), bytes = (numel + 7) / 8;
  uint8_t *bits = out[0].data;
  int64_t tasks = (bytes + MASK_TASK_BYTES - 1) / MASK_TASK_BYTES;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  loom_dropout_mask_shape(n, &rank, shape);
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(c->ctx, n, rank, shape, &piece));
#pragma omp parallel for num_threads(c->nt) schedule(static) if (tasks > 1)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t e0 = t * MASK_TASK_BYTES * 8, end = LOOM_MIN(numel, e0 + (int64_t)MASK_TASK_BYTES * 8);
    uint64_t first;
    int64_t len = loom_rng_piece_span(&piece, e0, end - e0, &first);
    if (len == end - e0) { /* one run: straight into place */
      loom_dropout_mask_bits(seed, j0 + first, len, thr, bits + t * MASK_TASK_BYTES);
      continue;
    }
    memset(bits + t * MASK_TASK_BYTES, 0, (size_t)((end - e0 + 7) / 8));
    for (int64_t e = e0; e < end; e += len) {
      len = loom_rng_piece_span(&piece, e, end - e, &first);
      put_bits(seed, j0 + first, len, thr, e, bits);
    }
  }
  return LOOM_STATUS_OK;
}

static bool is_f32(const loom_graph *g, int32_t v) {
  return g->values[v].type.dtype == LOOM_DTYPE_F32;
}

loom_cpu_kernel loom_cpu_attention_kernel(const loom_graph *g, const loom_node *n) {
  switch (n->op) {
  case LOOM_OP_FLASH_ATTENTION:
  case LOOM_OP_FLASH_ATTENTION_GRAD: {
    int32_t n_float = n->op == LOOM_OP_FLASH_ATTENTION ? 3 : 6;
    for (int32_t i = 0; i < n_float; i++)
      if (!is_f32(g, n->in[i])) return NULL;
    if (loom_attention_bias_input(n) >= 0 && !is_f32(g, n->in[loom_attention_bias_input(n)]))
      return NULL;
    return n->op == LOOM_OP_FLASH_ATTENTION ? k_flash : k_flash_grad;
  }
  case LOOM_OP_DROPOUT_MASK: return k_dropout_mask;
  default: return NULL;
  }
}

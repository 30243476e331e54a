/*
 * matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N] with NumPy-broadcast
 * batch dims; trans_a / trans_b read a as [..., K, M] / b as [..., N, K].
 */
#include "ir/dtype.h"
#include "ops/grad.h"
#include "ops/ops_util.h"

static loom_status infer_matmul(loom_ctx *ctx, const loom_node *n, const loom_type *in,
                                loom_type *out) {
  char ba[128], bb[128];
  const loom_type *a = &in[0], *b = &in[1];
  if (a->rank < 2 || b->rank < 2)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "inputs need rank >= 2, got %s and %s",
                      loom_type_str(a, ba, sizeof ba), loom_type_str(b, bb, sizeof bb));
  if (a->dtype != b->dtype || !loom_dtype_is_float(a->dtype))
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH,
                      "inputs need the same float dtype, got %s and %s",
                      loom_type_str(a, ba, sizeof ba), loom_type_str(b, bb, sizeof bb));
  bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  int64_t m = a->shape[a->rank - (ta ? 1 : 2)], ka = a->shape[a->rank - (ta ? 2 : 1)];
  int64_t kb = b->shape[b->rank - (tb ? 1 : 2)], nn = b->shape[b->rank - (tb ? 2 : 1)];
  if (ka != kb)
    return loom_error(
        ctx, LOOM_STATUS_SHAPE_MISMATCH, "contracted dims differ: %s%s and %s%s (K = %lld vs %lld)",
        loom_type_str(a, ba, sizeof ba), ta ? " (transposed)" : "", loom_type_str(b, bb, sizeof bb),
        tb ? " (transposed)" : "", (long long)ka, (long long)kb);
  loom_type t = {.dtype = a->dtype};
  if (!loom_broadcast_shapes(a->rank - 2, a->shape, b->rank - 2, b->shape, &t.rank, t.shape))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "batch dims of %s and %s do not broadcast",
                      loom_type_str(a, ba, sizeof ba), loom_type_str(b, bb, sizeof bb));
  t.shape[t.rank++] = m;
  t.shape[t.rank++] = nn;
  out[0] = t;
  return LOOM_STATUS_OK;
}

/* Reads x as [..., R, C] (swapping its last two dims if trans) broadcast to
 * the batch dims `bshape` (rank br) followed by R, C. */
static loom_view matmul_operand(const loom_view *x, bool trans, int32_t br, const int64_t *bshape) {
  loom_view v = *x;
  if (trans) {
    int32_t r = v.rank;
    int64_t s = v.shape[r - 1], st = v.stride[r - 1];
    v.shape[r - 1] = v.shape[r - 2];
    v.stride[r - 1] = v.stride[r - 2];
    v.shape[r - 2] = s;
    v.stride[r - 2] = st;
  }
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < br; d++)
    shape[d] = bshape[d];
  shape[br] = v.shape[v.rank - 2];
  shape[br + 1] = v.shape[v.rank - 1];
  return loom_view_broadcast(&v, br + 2, shape);
}

/* The triple loop with double accumulation, over strided views. */
static loom_status ref_matmul(loom_ctx *ctx, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  const loom_view *o = &out[0];
  if (in[0].rank < 2 || in[1].rank < 2 || o->rank < 2)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "matmul: rank below 2");
  int32_t br = o->rank - 2;
  loom_view a = matmul_operand(&in[0], LOOM_ATTR_I(n, matmul, trans_a) != 0, br, o->shape);
  loom_view b = matmul_operand(&in[1], LOOM_ATTR_I(n, matmul, trans_b) != 0, br, o->shape);
  int64_t M = o->shape[br], N = o->shape[br + 1], K = a.shape[br + 1];
  int64_t n_batch = 1;
  for (int32_t d = 0; d < br; d++)
    n_batch *= o->shape[d];
  int64_t sam = a.stride[br], sak = a.stride[br + 1];
  int64_t sbk = b.stride[br], sbn = b.stride[br + 1];
  for (int64_t bi = 0; bi < n_batch; bi++) {
    int64_t oa = 0, ob = 0, rest = bi;
    for (int32_t d = br - 1; d >= 0; d--) {
      int64_t idx = rest % o->shape[d];
      rest /= o->shape[d];
      oa += idx * a.stride[d];
      ob += idx * b.stride[d];
    }
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; k++)
          acc += loom_load(a.dtype, a.data, oa + i * sam + k * sak) *
                 loom_load(b.dtype, b.data, ob + k * sbk + j * sbn);
        loom_view_set(o, (bi * M + i) * N + j, acc);
      }
  }
  return LOOM_STATUS_OK;
}

/* "batch..., m k, k n -> batch..., m n | k:add"; an input's batch dim that is
 * broadcast from size 1 stays whole. Labels: batch dims, then M, K, N. */
static void partition_matmul(const loom_node *n, const loom_type *in, const loom_type *out,
                             loom_partition *p) {
  loom_partition_init(p, 2, 1);
  int32_t br = out->rank - 2;
  for (int32_t d = 0; d < br; d++) {
    int32_t l = loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
    p->out[0][d] = (int8_t)l;
    for (int32_t i = 0; i < 2; i++) {
      int32_t id = d - (br - (in[i].rank - 2));
      if (id >= 0) p->in[i][id] = (int8_t)(in[i].shape[id] == out->shape[d] ? l : -1);
    }
  }
  int8_t m = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  int8_t k = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_PARTIAL, LOOM_OP_ADD);
  int8_t nl = (int8_t)loom_partition_new_label(p, LOOM_SPLIT_SPATIAL, LOOM_OP_ADD);
  bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  int32_t ra = in[0].rank, rb = in[1].rank;
  p->in[0][ra - 2] = ta ? k : m;
  p->in[0][ra - 1] = ta ? m : k;
  p->in[1][rb - 2] = tb ? nl : k;
  p->in[1][rb - 1] = tb ? k : nl;
  p->out[0][br] = m;
  p->out[0][br + 1] = nl;
}

const loom_op_def loom_opdef_matmul = {
    .name = "matmul",
    .cls = LOOM_OPCLASS_GEMM,
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .n_attrs = LOOM_ATTR_COUNT(matmul),
    .attrs = LOOM_ATTR_SPECS(matmul),
    .infer = infer_matmul,
    .ref = ref_matmul,
    .grad = loom_grad_matmul,
    .partition = partition_matmul,
};

/* Strided operands of the flash attention ops (attention_views.h). */
#include "ops/attention_views.h"

#include "ops/attention_bias.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <string.h>

static const loom_ints *view_attr(const loom_node *n, int32_t w) {
  switch (w) {
  case LOOM_FLASH_Q: return &LOOM_ATTR_INTS(n, flash_attention, q_at);
  case LOOM_FLASH_K: return &LOOM_ATTR_INTS(n, flash_attention, k_at);
  case LOOM_FLASH_V: return &LOOM_ATTR_INTS(n, flash_attention, v_at);
  case LOOM_FLASH_O: return &LOOM_ATTR_INTS(n, flash_attention, o_at);
  case LOOM_FLASH_DO: return &LOOM_ATTR_INTS(n, flash_attention, do_at);
  case LOOM_FLASH_DQ: return &LOOM_ATTR_INTS(n, flash_attention, dq_at);
  case LOOM_FLASH_DK: return &LOOM_ATTR_INTS(n, flash_attention, dk_at);
  default: return &LOOM_ATTR_INTS(n, flash_attention, dv_at);
  }
}

static const char *const view_name[LOOM_FLASH_ALL] = {"q_at", "k_at", "v_at", "o_at",
                                                      "do_at", "dq_at", "dk_at", "dv_at"};

int32_t loom_flash_dbias_output(const loom_node *n) {
  if (n->op != LOOM_OP_FLASH_ATTENTION_GRAD || loom_attention_bias_input(n) < 0) return -1;
  int32_t want = loom_flash_view_of(n, LOOM_FLASH_DQ).strided ? 2 : 4;
  return n->n_out == want ? want - 1 : -1;
}

bool loom_flash_has_views(const loom_node *n) {
  return (n->op == LOOM_OP_FLASH_ATTENTION || n->op == LOOM_OP_FLASH_ATTENTION_GRAD) &&
         LOOM_ATTR_INTS(n, flash_attention, dims).n > 0;
}

void loom_flash_logical_types(const loom_node *n, const loom_type *in, loom_type *lt) {
  bool grad = n->op == LOOM_OP_FLASH_ATTENTION_GRAD;
  if (!loom_flash_has_views(n)) {
    for (int32_t w = 0; w < 3; w++) lt[w] = in[w];
    lt[LOOM_FLASH_O] = in[0];
    lt[LOOM_FLASH_O].shape[in[0].rank - 1] = in[2].shape[in[2].rank - 1];
    lt[LOOM_FLASH_DO] = grad ? in[5] : lt[LOOM_FLASH_O];
    if (grad) lt[LOOM_FLASH_O] = in[3];
    for (int32_t w = 0; w < 3; w++) lt[LOOM_FLASH_DQ + w] = lt[w];
    return;
  }
  const loom_ints *dm = &LOOM_ATTR_INTS(n, flash_attention, dims);
  int32_t r = dm->n - 2; /* q's rank */
  loom_type q = {.dtype = in[0].dtype, .rank = r};
  for (int32_t d = 0; d < r; d++) q.shape[d] = dm->v[d];
  int64_t sk = dm->v[r], dv = dm->v[r + 1];
  lt[LOOM_FLASH_Q] = q;
  lt[LOOM_FLASH_K] = q, lt[LOOM_FLASH_K].shape[r - 2] = sk;
  lt[LOOM_FLASH_V] = lt[LOOM_FLASH_K], lt[LOOM_FLASH_V].shape[r - 1] = dv;
  lt[LOOM_FLASH_O] = q, lt[LOOM_FLASH_O].shape[r - 1] = dv;
  lt[LOOM_FLASH_DO] = lt[LOOM_FLASH_O];
  for (int32_t w = 0; w < 3; w++) lt[LOOM_FLASH_DQ + w] = lt[w];
}

loom_flash_view loom_flash_view_of(const loom_node *n, int32_t w) {
  loom_flash_view v = {0};
  const loom_ints *a = view_attr(n, w);
  if (!loom_flash_has_views(n) || a->n < 2) return v;
  v.strided = true;
  v.offset = a->v[0];
  v.row = a->v[1];
  v.n_lead = (a->n - 2) / 2;
  for (int32_t i = 0; i < v.n_lead && i < 3; i++) {
    v.lead[i] = a->v[2 + 2 * i];
    v.stride[i] = a->v[3 + 2 * i];
  }
  return v;
}

loom_status loom_flash_check_view(loom_ctx *ctx, const loom_node *n, int32_t w,
                                  const loom_type *lt, const loom_type *value) {
  char a[128], b[128];
  const loom_ints *at = view_attr(n, w);
  if (at->n == 0) {
    bool same = (w == LOOM_FLASH_O && n->op == LOOM_OP_FLASH_ATTENTION) || w >= LOOM_FLASH_DQ
                    ? true /* an output: typed from lt */
                    : loom_type_equal(lt, value);
    if (!same)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "operand %s must be %s, got %s",
                        view_name[w] , loom_type_str(lt, a, sizeof a),
                        loom_type_str(value, b, sizeof b));
    return LOOM_STATUS_OK;
  }
  if (at->n < 2 || at->n % 2 || at->n > 8)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "'%s' must be [offset, row, (size, stride) per leading dim], at most 3 "
                      "leading dims; got %d numbers",
                      view_name[w], (int)at->n);
  if (value->dtype != lt->dtype)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "'%s': the value holding %s is %s",
                      view_name[w], loom_type_str(lt, a, sizeof a),
                      loom_type_str(value, b, sizeof b));
  loom_flash_view v = loom_flash_view_of(n, w);
  int32_t r = lt->rank;
  int64_t bh = 1, prod = 1, last = v.offset;
  for (int32_t d = 0; d < r - 2; d++) bh *= lt->shape[d];
  bool ok = v.offset >= 0 && v.row >= 0;
  for (int32_t i = 0; ok && i < v.n_lead; i++) {
    ok = v.lead[i] >= 0 && v.stride[i] >= 0;
    prod *= v.lead[i];
    if (v.lead[i] > 0) last += (v.lead[i] - 1) * v.stride[i];
  }
  int64_t numel = loom_type_numel(lt);
  if (lt->shape[r - 2] > 0) last += (lt->shape[r - 2] - 1) * v.row;
  last += lt->shape[r - 1] - 1;
  if (!ok || prod != bh || (numel > 0 && last >= loom_type_numel(value)))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "'%s' does not place %s inside %s (sizes >= 0 with product %lld, strides "
                      ">= 0, every element in bounds)",
                      view_name[w], loom_type_str(lt, a, sizeof a),
                      loom_type_str(value, b, sizeof b), (long long)bh);
  return LOOM_STATUS_OK;
}

loom_view loom_flash_operand(const loom_node *n, int32_t w, const loom_type *lt,
                             const loom_view *value) {
  loom_flash_view v = loom_flash_view_of(n, w);
  if (!v.strided) return *value;
  loom_view out = loom_view_of(lt, value->data);
  int32_t r = 0;
  for (int32_t i = 0; i < v.n_lead; i++) {
    out.shape[r] = v.lead[i];
    out.stride[r++] = v.stride[i];
  }
  out.shape[r] = lt->shape[lt->rank - 2];
  out.stride[r++] = v.row;
  out.shape[r] = lt->shape[lt->rank - 1];
  out.stride[r++] = 1;
  out.rank = r;
  out.data = (char *)value->data + v.offset * (int64_t)loom_dtype_size(value->dtype);
  return out;
}

/* The public host tensor: a contiguous view plus ownership of its memory. */
#include "ir/dtype.h"
#include "ir/view.h"

#include <stdlib.h>
#include <string.h>

static loom_status check_args(loom_ctx *ctx, const char *fn, loom_dtype dt, int32_t rank,
                              const int64_t *shape, int64_t *numel) {
  if (!loom_dtype_valid(dt))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: invalid dtype %d", fn, (int)dt);
  loom_status st = loom_shape_check(ctx, rank, shape, numel);
  if (st) loom_error_prefix(ctx, "%s", fn);
  return st;
}

static loom_status make(loom_ctx *ctx, const char *fn, loom_dtype dt, int32_t rank,
                        const int64_t *shape, void *data, bool owns, loom_tensor **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  int64_t numel = 0;
  LOOM_TRY(check_args(ctx, fn, dt, rank, shape, &numel));
  if (!owns && !data && numel > 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s: data is NULL for a non-empty tensor",
                      fn);
  loom_tensor *t = loom_calloc(ctx, 1, sizeof *t);
  if (!t) return LOOM_STATUS_OUT_OF_MEMORY;
  if (owns) {
    /* At least one byte so data is never NULL, even for empty tensors. */
    size_t bytes = (size_t)numel * loom_dtype_size(dt);
    data = loom_calloc(ctx, bytes ? bytes : 1, 1);
    if (!data) {
      free(t);
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
  }
  loom_type ty = {.dtype = dt, .rank = rank};
  for (int32_t d = 0; d < rank; d++)
    ty.shape[d] = shape[d];
  t->v = loom_view_of(&ty, data);
  t->owns = owns;
  *out = t;
  return LOOM_STATUS_OK;
}

loom_status loom_tensor_new(loom_ctx *ctx, loom_dtype dt, int32_t rank, const int64_t *shape,
                            loom_tensor **out) {
  return make(ctx, "tensor_new", dt, rank, shape, NULL, true, out);
}

loom_status loom_tensor_wrap(loom_ctx *ctx, loom_dtype dt, int32_t rank, const int64_t *shape,
                             void *data, loom_tensor **out) {
  return make(ctx, "tensor_wrap", dt, rank, shape, data, false, out);
}

void loom_tensor_free(loom_tensor *t) {
  if (!t) return;
  if (t->owns) free(t->v.data);
  free(t);
}

void *loom_tensor_data(const loom_tensor *t) { return t ? t->v.data : NULL; }

loom_dtype loom_tensor_dtype(const loom_tensor *t) { return t ? t->v.dtype : LOOM_DTYPE_COUNT; }

int32_t loom_tensor_rank(const loom_tensor *t) { return t ? t->v.rank : 0; }

int64_t loom_tensor_dim(const loom_tensor *t, int32_t i) {
  if (!t || i < 0 || i >= t->v.rank) return 0;
  return t->v.shape[i];
}

int64_t loom_tensor_numel(const loom_tensor *t) { return t ? loom_view_numel(&t->v) : 0; }

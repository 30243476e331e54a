/*
 * Views: a dtype, a shape and element strides over memory. Layout ops are
 * views over their input (transpose permutes strides, broadcast uses
 * stride 0, slice moves the base), which the reference executor then copies.
 */
#ifndef LOOM_IR_VIEW_H
#define LOOM_IR_VIEW_H

#include "ir/graph.h"

typedef struct loom_view {
  loom_dtype dtype;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  int64_t stride[LOOM_MAX_RANK]; /* in elements; 0 for broadcast dims */
  void *data;                    /* element (0, ..., 0) */
} loom_view;

/* The public tensor: a view plus ownership. */
struct loom_tensor {
  loom_view v;
  bool owns;
};

/* A contiguous (row-major) view of data with type t. */
loom_view loom_view_of(const loom_type *t, void *data);
int64_t loom_view_numel(const loom_view *v);
bool loom_view_is_contiguous(const loom_view *v);
/* Element offset (in elements from data) of logical flat index i. */
int64_t loom_view_offset(const loom_view *v, int64_t i);
/* Element at logical flat index i, as a double. */
double loom_view_get(const loom_view *v, int64_t i);
int64_t loom_view_get_i64(const loom_view *v, int64_t i);
/* Stores at logical flat index i. */
void loom_view_set(const loom_view *v, int64_t i, double x);
/* Right-aligned NumPy broadcast of v to shape (stride 0 on new/size-1 dims). */
loom_view loom_view_broadcast(const loom_view *v, int32_t rank,
                              const int64_t *shape);
/* out dim d = v dim perm[d]. */
loom_view loom_view_permute(const loom_view *v, const int64_t *perm);
/* Copies src into dst element by element (same shape), converting dtype. */
void loom_view_copy(const loom_view *dst, const loom_view *src);

#endif

/* The attention pass (attention.h): attention composites -> flash_attention,
 * with the dropout mask placed as asked or as the model predicts best. */
#include "passes/attention.h"

#include "ir/build.h"
#include "ops/composite_util.h"

#include <stdlib.h>

/* FLOPs of the matmul that produces x through layout ops (reshape,
 * transpose, slice): the GEMM an overlapped mask task would run beside. */
static double producing_gemm_flops(const loom_graph *g, int32_t x) {
  for (int32_t hops = 0; hops < 8 && x >= 0; hops++) {
    int32_t nd = g->values[x].node;
    if (nd < 0) return 0.0;
    const loom_node *n = &g->nodes[nd];
    if (n->op == LOOM_OP_MATMUL || n->op == LOOM_OP_LINEAR) {
      const loom_type *a = loom_value_type(g, n->in[0]), *o = loom_value_type(g, n->out[0]);
      return 2.0 * (double)loom_type_numel(o) * (double)a->shape[a->rank - 1];
    }
    if (loom_op_get(n->op)->cls != LOOM_OPCLASS_LAYOUT) return 0.0;
    x = n->in[0];
  }
  return 0.0;
}

/* Emits the flash form of attention node n (inputs already mapped). */
static loom_status replace(loom_graph *dst, const loom_graph *src, const loom_node *n, int32_t *map,
                           loom_rng_placement placement, const loom_rng_model *model) {
  const loom_type *q = loom_value_type(src, n->in[0]), *k = loom_value_type(src, n->in[1]);
  const loom_type *v = loom_value_type(src, n->in[2]);
  int32_t r = q->rank;
  loom_rng_attn shape = {.bh = 1, .sq = q->shape[r - 2], .sk = k->shape[r - 2],
                         .d = q->shape[r - 1], .dv = v->shape[r - 1],
                         .causal = n->attr[LOOM_ATT_CAUSAL].i != 0, .backward = true,
                         .gemm_before_flops = producing_gemm_flops(src, n->in[0])};
  for (int32_t i = 0; i < r - 2; i++) shape.bh *= q->shape[i];
  double p = n->attr[LOOM_ATT_P].f;
  if (placement == LOOM_RNG_AUTO && p > 0.0) {
    double t[LOOM_RNG_COUNT];
    placement = model ? loom_rng_model_predict(model, &shape, NULL, t) : LOOM_RNG_FUSED;
  }
  (void)loom_build_status(dst);
  int32_t base = n->n_in > 3 ? map[n->in[3]] : lb_scalar(dst, LOOM_DTYPE_I64, 0.0);
  int32_t in[5] = {map[n->in[0]], map[n->in[1]], map[n->in[2]], base, -1}, n_in = 4;
  if (p > 0.0 && placement != LOOM_RNG_FUSED) {
    loom_attr_value ma[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_DROPOUT_MASK, ma);
    ma[0].f = p;                       /* p */
    ma[1].i = n->attr[LOOM_ATT_SEED].i;     /* seed */
    ma[2].i = n->attr[LOOM_ATT_OFFSET].i;   /* offset */
    ma[3].i = shape.bh * shape.sq * shape.sk; /* numel */
    ma[4].i = placement == LOOM_RNG_OVERLAP; /* overlap */
    in[n_in++] = lb_op(dst, LOOM_OP_DROPOUT_MASK, 1, &base, ma);
  }
  loom_attr_value fa[LOOM_MAX_ATTRS];
  for (int32_t a = 0; a < loom_op_get(LOOM_OP_ATTENTION)->n_attrs; a++) fa[a] = n->attr[a]; /* one layout */
  int32_t out[2] = {-1, -1};
  lb_op_multi(dst, LOOM_OP_FLASH_ATTENTION, n_in, in, fa, 2, out);
  LOOM_TRY(loom_build_status(dst));
  map[n->out[0]] = out[0];
  return LOOM_STATUS_OK;
}

loom_status loom_graph_fuse_attention(const loom_graph *g, loom_rng_placement placement,
                                      const loom_rng_model *model, loom_graph **out,
                                      int32_t *n_replaced) {
  *out = NULL;
  if (n_replaced) *n_replaced = 0;
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  LOOM_TRY(loom_graph_begin_copy(g, &dst, &map));
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const loom_node *n = &g->nodes[i];
    if (n->op == LOOM_OP_ATTENTION) {
      st = replace(dst, g, n, map, placement, model);
      if (!st && n_replaced) (*n_replaced)++;
    } else {
      st = loom_graph_copy_node(dst, g, n, map);
    }
  }
  if (!st) st = loom_graph_finish_copy(dst, g, map);
  free(map);
  if (st) {
    loom_error_prefix(g->ctx, "attention pass");
    loom_graph_free(dst);
    return st;
  }
  *out = dst;
  return LOOM_STATUS_OK;
}

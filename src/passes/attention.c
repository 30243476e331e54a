/* The attention pass (attention.h): scaled dot-product attention — the
 * composite, or matmul / scale / bias / softmax / dropout / matmul written
 * as primitives — becomes flash_attention, with the dropout mask placed as
 * asked or as the model predicts best. */
#include "passes/attention.h"

#include "ir/build.h"
#include "ops/attention_bias.h"
#include "ops/op.h"
#include "ops/rng_piece.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* One scaled dot-product attention found in the source graph: the
 * composite, or the same computation written as primitives. */
typedef struct sdpa {
  int32_t q, k, v, base; /* source values; base -1: none */
  int32_t bias;          /* added to the scaled scores; -1: none */
  int32_t out;           /* the source value it computes */
  loom_attr_value attr[LOOM_MAX_ATTRS]; /* attention's, which flash_attention shares */
} sdpa;

static sdpa from_composite(const loom_node *n) {
  int32_t nc = loom_attention_core_inputs(n), b = loom_attention_bias_input(n);
  sdpa a = {n->in[0], n->in[1], n->in[2], nc > 3 ? n->in[3] : -1, b >= 0 ? n->in[b] : -1,
            n->out[0], {{0}}};
  for (int32_t i = 0; i < LOOM_ATTR_COUNT(attention); i++) a.attr[i] = n->attr[i];
  return a;
}

/* The node producing v, if v has exactly one use (by anything) and is not
 * a graph output; else NULL. */
static const loom_node *sole_producer(const loom_graph *g, const int32_t *uses, int32_t v) {
  if (v < 0 || g->values[v].node < 0 || uses[v] != 1) return NULL;
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return NULL;
  return &g->nodes[g->values[v].node];
}

/* True if x is matmul(q, k^T) or mul(that, rank-0 constant), each used
 * once: the scores side of an add. */
static bool is_scores(const loom_graph *g, const int32_t *uses, const loom_node *x) {
  if (x && x->op == LOOM_OP_MUL) {
    int32_t cn = g->values[x->in[1]].node;
    if (cn < 0 || g->nodes[cn].op != LOOM_OP_CONSTANT || loom_value_type(g, x->in[1])->rank != 0)
      return false;
    x = sole_producer(g, uses, x->in[0]);
  }
  return x && x->op == LOOM_OP_MATMUL && !LOOM_ATTR_I(x, matmul, trans_a) &&
         LOOM_ATTR_I(x, matmul, trans_b);
}

/* Matches y = matmul(dropout?(softmax(add?(mul?(matmul(q, k^T), c), b),
 * -1)), v), every intermediate used once, c a rank-0 constant, b any
 * tensor of the scores' dtype that broadcasts to them (a padding mask, a
 * position bias: flash attention's bias, on either side of the add);
 * marks the intermediate nodes in skip. (An additive causal mask written
 * as primitives is matched as a bias, a select of -inf is not matched;
 * the composite's causal flag is the cheaper form.) */
static bool match_primitives(const loom_graph *g, const int32_t *uses, const loom_node *y,
                             bool with_bias, uint8_t *skip, sdpa *a) {
  if (y->op != LOOM_OP_MATMUL || LOOM_ATTR_I(y, matmul, trans_a) ||
      LOOM_ATTR_I(y, matmul, trans_b))
    return false;
  const loom_node *chain[5];
  int32_t n_chain = 0;
  const loom_node *x = sole_producer(g, uses, y->in[0]);
  memset(a, 0, sizeof *a);
  a->base = -1;
  a->bias = -1;
  LOOM_ATTRV_F(a->attr, attention, scale) = 1.0;
  if (x && x->op == LOOM_OP_DROPOUT) {
    LOOM_ATTRV_F(a->attr, attention, p) = LOOM_ATTR_F(x, dropout, p);
    LOOM_ATTRV_I(a->attr, attention, seed) = LOOM_ATTR_I(x, dropout, seed);
    LOOM_ATTRV_I(a->attr, attention, offset) = LOOM_ATTR_I(x, dropout, offset);
    LOOM_ATTRV_INTS(a->attr, attention, whole) = LOOM_ATTR_INTS(x, dropout, whole);
    LOOM_ATTRV_INTS(a->attr, attention, at) = LOOM_ATTR_INTS(x, dropout, at);
    a->base = x->n_in > 1 ? x->in[1] : -1;
    chain[n_chain++] = x;
    x = sole_producer(g, uses, x->in[0]);
  }
  if (!x || x->op != LOOM_OP_SOFTMAX) return false;
  int64_t axis = LOOM_ATTR_I(x, softmax, axis);
  int32_t rank = loom_value_type(g, x->out[0])->rank;
  if (axis != -1 && axis != rank - 1) return false;
  chain[n_chain++] = x;
  const loom_node *add = sole_producer(g, uses, x->in[0]);
  x = add;
  if (add && add->op == LOOM_OP_ADD) { /* the side that is not the scores is the bias */
    const loom_type *st = loom_value_type(g, add->out[0]);
    for (int32_t side = 0; side < 2 && a->bias < 0; side++) {
      const loom_node *sx = sole_producer(g, uses, add->in[side]);
      const loom_type *bt = loom_value_type(g, add->in[1 - side]);
      bool scores = is_scores(g, uses, sx) && loom_type_equal(loom_value_type(g, add->in[side]), st);
      if (scores && !loom_attention_check_bias(NULL, bt, st->dtype, st->rank, st->shape)) {
        a->bias = add->in[1 - side];
        chain[n_chain++] = add;
        x = sx;
      }
    }
    if (a->bias < 0 || !with_bias) return false;
  }
  if (x && x->op == LOOM_OP_MUL) {
    const loom_node *c = g->values[x->in[1]].node >= 0 ? &g->nodes[g->values[x->in[1]].node] : NULL;
    if (!c || c->op != LOOM_OP_CONSTANT || loom_value_type(g, x->in[1])->rank != 0) return false;
    LOOM_ATTRV_F(a->attr, attention, scale) = LOOM_ATTR_F(c, constant, value);
    if (LOOM_ATTRV_F(a->attr, attention, scale) == 0.0) return false; /* 1/sqrt(D) to flash */
    chain[n_chain++] = x;
    x = sole_producer(g, uses, x->in[0]);
  }
  if (!x || x->op != LOOM_OP_MATMUL || LOOM_ATTR_I(x, matmul, trans_a) ||
      !LOOM_ATTR_I(x, matmul, trans_b))
    return false;
  chain[n_chain++] = x;
  a->q = x->in[0];
  a->k = x->in[1];
  a->v = y->in[1];
  a->out = y->out[0];
  /* the flash op's own checks: same ranks and leading dims, float */
  const loom_type *tq = loom_value_type(g, a->q), *tk = loom_value_type(g, a->k),
                  *tv = loom_value_type(g, a->v);
  bool ok = tq->rank >= 2 && tk->rank == tq->rank && tv->rank == tq->rank;
  for (int32_t d = 0; ok && d < tq->rank - 2; d++)
    ok = tk->shape[d] == tq->shape[d] && tv->shape[d] == tq->shape[d];
  if (ok && a->bias >= 0) { /* the scores the bias was checked against are q k^T's */
    int32_t rank;
    int64_t probs[LOOM_MAX_RANK];
    loom_attention_probs_shape(tq, tk, &rank, probs);
    const loom_type *st = loom_value_type(g, x->out[0]);
    ok = st->rank == rank && !memcmp(st->shape, probs, sizeof(int64_t) * (size_t)rank);
    LOOM_ATTRV_I(a->attr, attention, bias) = 1;
  }
  if (!ok) return false;
  for (int32_t i = 0; i < n_chain; i++) skip[chain[i] - g->nodes] = 1;
  return true;
}

/* The attention's sizes as the models read them (rank >= 2 operands). */
static loom_rng_attn attn_shape(const loom_graph *g, const sdpa *a) {
  const loom_type *q = loom_value_type(g, a->q), *k = loom_value_type(g, a->k);
  const loom_type *v = loom_value_type(g, a->v);
  int32_t r = q->rank;
  loom_rng_attn s = {.bh = 1, .sq = q->shape[r - 2], .sk = k->shape[r - 2], .d = q->shape[r - 1],
                     .dv = v->shape[r - 1],
                     .causal = LOOM_ATTRV_I(a->attr, attention, causal) != 0, .backward = true,
                     .gemm_before_flops = producing_gemm_flops(g, a->q)};
  for (int32_t i = 0; i < r - 2; i++) s.bh *= q->shape[i];
  return s;
}

/* Emits the flash form of a (inputs already mapped). */
static loom_status replace(loom_graph *dst, const loom_graph *src, const sdpa *a, int32_t *map,
                           loom_rng_placement placement, const loom_rng_model *model) {
  const loom_type *q = loom_value_type(src, a->q);
  int32_t r = q->rank;
  loom_rng_attn shape = attn_shape(src, a);
  double p = LOOM_ATTRV_F(a->attr, attention, p);
  if (placement == LOOM_RNG_AUTO && p > 0.0) {
    double t[LOOM_RNG_COUNT];
    placement = model ? loom_rng_model_predict(model, &shape, NULL, t) : LOOM_RNG_FUSED;
  }
  (void)loom_build_status(dst);
  int32_t base = a->base >= 0 ? map[a->base] : lb_scalar(dst, LOOM_DTYPE_I64, 0.0);
  int32_t in[6] = {map[a->q], map[a->k], map[a->v], base, -1, -1}, n_in = 4;
  if (p > 0.0 && placement != LOOM_RNG_FUSED) {
    loom_attr_value ma[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_DROPOUT_MASK, ma);
    LOOM_ATTRV_F(ma, dropout_mask, p) = p;
    LOOM_ATTRV_I(ma, dropout_mask, seed) = LOOM_ATTRV_I(a->attr, attention, seed);
    LOOM_ATTRV_I(ma, dropout_mask, offset) = LOOM_ATTRV_I(a->attr, attention, offset);
    LOOM_ATTRV_I(ma, dropout_mask, numel) = shape.bh * shape.sq * shape.sk;
    LOOM_ATTRV_I(ma, dropout_mask, overlap) = placement == LOOM_RNG_OVERLAP;
    /* the bits of this attention's probabilities, where whole/at put them */
    LOOM_ATTRV_INTS(ma, dropout_mask, whole) = LOOM_ATTRV_INTS(a->attr, attention, whole);
    LOOM_ATTRV_INTS(ma, dropout_mask, at) = LOOM_ATTRV_INTS(a->attr, attention, at);
    if (LOOM_ATTRV_INTS(ma, dropout_mask, whole).n > 0) {
      loom_ints *ms = &LOOM_ATTRV_INTS(ma, dropout_mask, shape);
      ms->n = r;
      for (int32_t d = 0; d < r - 1; d++) ms->v[d] = q->shape[d];
      ms->v[r - 1] = shape.sk;
    }
    /* without a base the mask takes none: a constant would tie it to
     * whichever kernel computes that constant, and to its place */
    in[n_in++] = lb_op(dst, LOOM_OP_DROPOUT_MASK, a->base >= 0 ? 1 : 0, &base, ma);
  }
  if (a->bias >= 0) in[n_in++] = map[a->bias]; /* last, as the `bias` attribute says */
  int32_t out[2] = {-1, -1};
  lb_op_multi(dst, LOOM_OP_FLASH_ATTENTION, n_in, in, a->attr, 2, out);
  LOOM_TRY(loom_build_status(dst));
  map[a->out] = out[0];
  return LOOM_STATUS_OK;
}

/* Forward: S = q k^T, P = softmax(S) (an epilogue of the first GEMM's
 * blocks, or a kernel: its max, exp and sums per score too), O = P v: P's
 * bytes written and read, S's written (3 passes), 3 steps. Backward:
 * dP = dO v^T, dS from P and dP, dq, dk, dv: 4 GEMMs, 5 passes, 5 steps. */
void loom_attention_predict(const loom_attention_costs *c, const loom_rng_attn *a,
                            double *flash_s, double *decomposed_s) {
  const loom_rng_model *m = &c->rates;
  double t[LOOM_RNG_COUNT], none = 0;
  (void)loom_rng_model_predict(m, a, &none, t);
  *flash_s = none;
  double n = (double)a->bh * (double)a->sq * (double)a->sk;
  double flops = 2.0 * n * (double)(a->d + a->dv), bytes = 4.0 * n;
  double passes = 3, steps = 3;
  if (a->backward) {
    flops *= 3.0;
    passes += 5;
    steps += 5;
  }
  double bw = m->bandwidth > 0 ? m->bandwidth : 1e10;
  double gemm = m->gemm_flops > 0 ? m->gemm_flops : 1e11;
  double softmax = n * (c->softmax_s + (a->backward ? c->softmax_grad_s : 0.0)) /
                   (m->cores > 0 ? m->cores : 1);
  *decomposed_s = flops / gemm + softmax + passes * bytes / bw + steps * c->launch_s;
  if (a->bh > 0 && (double)bytes / (double)a->bh > (double)c->cache_bytes) *decomposed_s = INFINITY;
}

static loom_status fuse(const loom_graph *g, loom_rng_placement placement,
                        const loom_rng_model *model, const loom_attention_costs *costs,
                        bool with_bias, loom_graph **out, int32_t *n_replaced);

loom_status loom_graph_fuse_attention(const loom_graph *g, loom_rng_placement placement,
                                      const loom_rng_model *model, loom_graph **out,
                                      int32_t *n_replaced) {
  return fuse(g, placement, model, NULL, true, out, n_replaced);
}

loom_status loom_graph_fuse_attention_unbiased(const loom_graph *g, loom_rng_placement placement,
                                               const loom_rng_model *model, loom_graph **out,
                                               int32_t *n_replaced) {
  return fuse(g, placement, model, NULL, false, out, n_replaced);
}

/* True if costs say attention a (a composite without dropout) runs faster
 * decomposed. */
static bool keep_decomposed(const loom_graph *g, const loom_attention_costs *costs,
                            const loom_node *n, const sdpa *a) {
  if (!costs || n->op != LOOM_OP_ATTENTION || LOOM_ATTRV_F(a->attr, attention, p) > 0.0)
    return false;
  loom_rng_attn s = attn_shape(g, a);
  double flash = 0, decomposed = 0;
  loom_attention_predict(costs, &s, &flash, &decomposed);
  return decomposed < flash;
}

loom_status loom_graph_fuse_attention_costed(const loom_graph *g, loom_rng_placement placement,
                                             const loom_rng_model *model,
                                             const loom_attention_costs *costs, loom_graph **out,
                                             int32_t *n_replaced) {
  return fuse(g, placement, model, costs, true, out, n_replaced);
}

static loom_status fuse(const loom_graph *g, loom_rng_placement placement,
                        const loom_rng_model *model, const loom_attention_costs *costs,
                        bool with_bias, loom_graph **out, int32_t *n_replaced) {
  *out = NULL;
  if (n_replaced) *n_replaced = 0;
  /* uses of every value, and which primitive nodes an attention replaces */
  int32_t *uses = calloc((size_t)g->n_values + 1, sizeof *uses);
  uint8_t *skip = calloc((size_t)g->n_nodes + 1, 1);
  if (!uses || !skip) {
    free(uses);
    free(skip);
    return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "attention pass: out of memory");
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t j = 0; j < g->nodes[i].n_in; j++) uses[g->nodes[i].in[j]]++;
  sdpa a;
  for (int32_t i = 0; i < g->n_nodes; i++) /* mark the matches' inner nodes first */
    match_primitives(g, uses, &g->nodes[i], with_bias, skip, &a);
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  loom_status st = loom_graph_begin_copy(g, &dst, &map);
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const loom_node *n = &g->nodes[i];
    bool found = n->op == LOOM_OP_ATTENTION && (with_bias || loom_attention_bias_input(n) < 0);
    if (found)
      a = from_composite(n);
    else if (n->op != LOOM_OP_ATTENTION)
      found = match_primitives(g, uses, n, with_bias, skip, &a);
    if (found && keep_decomposed(g, costs, n, &a)) {
      st = loom_graph_copy_node(dst, g, n, map);
    } else if (found) {
      st = replace(dst, g, &a, map, placement, model);
      if (!st && n_replaced) (*n_replaced)++;
    } else if (!skip[i]) {
      st = loom_graph_copy_node(dst, g, n, map);
    }
  }
  free(uses);
  free(skip);
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

bool loom_attention_candidates(const loom_graph *g, bool *dropout) {
  bool candidate = false;
  *dropout = false;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    loom_op op = g->nodes[i].op;
    candidate |= op == LOOM_OP_ATTENTION || op == LOOM_OP_SOFTMAX;
    *dropout |= (op == LOOM_OP_ATTENTION && LOOM_ATTR_F(&g->nodes[i], attention, p) > 0.0) ||
                op == LOOM_OP_DROPOUT;
  }
  return candidate;
}

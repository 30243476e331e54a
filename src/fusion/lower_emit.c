/*
 * Lowering, kernel emission (lower.c, step 5): the expressions of values
 * (loads, recomputation, registers and scratch rows of earlier stages)
 * and the stages of one part.
 */
#include "fusion/lower_internal.h"

#include "ops/op.h"
#include "ops/rng_piece.h"
#include "rng/philox.h"

#include <stdlib.h>
#include <string.h>

/* ---- kernel building ------------------------------------------------------ */

static int32_t kb_expr(lw *w, kbuild *b, loom_kexpr e) {
  loom_kernel *k = b->k;
  if (!loom_grow(w->ctx, (void **)&k->exprs, &b->cap_exprs, k->n_exprs + 1, sizeof e)) {
    w->err = LOOM_STATUS_OUT_OF_MEMORY;
    return -1;
  }
  k->exprs[k->n_exprs] = e;
  return k->n_exprs++;
}

/* The argument for graph value v in a role (0 input, 1 output, 2 temp). */
static int32_t kb_arg(lw *w, kbuild *b, int32_t v, int role) {
  loom_kernel *k = b->k;
  for (int32_t i = 0; i < k->n_args; i++)
    if (k->args[i].value == v && k->args[i].is_output == (role == 1) && k->args[i].temp == (role == 2))
      return i;
  if (!loom_grow(w->ctx, (void **)&k->args, &b->cap_args, k->n_args + 1, sizeof(loom_karg))) {
    w->err = LOOM_STATUS_OUT_OF_MEMORY;
    return -1;
  }
  const loom_type *t = loom_value_type(w->g, v);
  k->args[k->n_args] = (loom_karg){.value = v, .dtype = t->dtype, .is_output = role == 1,
                                   .temp = role == 2, .numel = loom_type_numel(t)};
  return k->n_args++;
}


static bool is_elem(const lpart *P, const lval *x) { return (x->space & P->rmask_) != 0; }

/* The map of a value with strides `stride` (per dim) and `base`: loop
 * index i of a dim's class is the dim's element i - off. */
static loom_kmap value_map(const lw *w, const lpart *P, int32_t l, const int64_t *stride,
                           int64_t base) {
  loom_kmap m = {.base = base};
  const lval *x = &w->lv[l];
  if (P->comp < 0) return m;
  const lcomp *c = &w->comp[P->comp];
  for (int32_t d = 0; d < MAXR; d++)
    if (x->uf[d] >= 0) m.base -= stride[d] * x->off[d];
  /* a dim split over several loops (lower_split.c) is their weighted sum */
  for (int32_t k = 0; k < x->n_loops; k++) {
    int64_t s = stride[x->loop_dim[k]] * x->loop_mult[k];
    if (P->seg_lo) m.base += s * P->seg_lo[x->loop[k]]; /* the part's loop starts there */
    for (int32_t i = 0; i < c->nd; i++) {
      if (c->dcls[i] != x->loop[k]) continue;
      if (P->pmask & (1u << i)) m.p[P->pidx[i]] += s * c->dmult[i];
      else if (P->rmask_ & (1u << i)) m.r[P->ridx[i]] += s * c->dmult[i];
    }
  }
  return m;
}

/* The expression of l, emitted earlier in this stage (emit ensures it). */
static int32_t got(const lpart *P, int32_t l) { return P->memo[l]; }

static int32_t emit_const(lw *w, kbuild *b, loom_dtype dt, double c) {
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_CONST, .dtype = dt, .c = c});
}

static int32_t emit_op(lw *w, kbuild *b, loom_op op, loom_dtype dt, int32_t x, int32_t y) {
  if (x < 0 || y < 0) return -1;
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = dt, .op = op, .n_a = 2,
                                    .a = {x, y}});
}

/* The loop index of dim d of value l minus the dim's start: the element
 * of the dim at this point (outside [0, size) where l does not reach). */
static int32_t emit_dim_index(lw *w, kbuild *b, lpart *P, int32_t l, int32_t d) {
  int64_t st[MAXR] = {0};
  st[d] = 1;
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = LOOM_DTYPE_I64,
                                    .map = value_map(w, P, l, st, 0)});
}

/* bool: lo <= element of dim d of l < hi (a bound at the loop's own end
 * is left out); -2 when no bound is needed. */
static int32_t emit_in_range(lw *w, kbuild *b, lpart *P, int32_t l, int32_t d, int64_t lo,
                             int64_t hi) {
  const lval *x = &w->lv[l];
  int64_t s0, s1;
  seg_range(w, P, x->uf[d], &s0, &s1);
  bool need_lo = x->off[d] + lo > s0, need_hi = x->off[d] + hi < s1;
  if (!need_lo && !need_hi) return -2;
  if (x->off[d] + lo >= s1 || x->off[d] + hi <= s0) /* nowhere in this part's loop */
    return emit_const(w, b, LOOM_DTYPE_BOOL, 0.0);
  int32_t i = emit_dim_index(w, b, P, l, d), c = -2;
  if (need_lo)
    c = emit_op(w, b, LOOM_OP_GE, LOOM_DTYPE_BOOL, i, emit_const(w, b, LOOM_DTYPE_I64, (double)lo));
  if (need_hi) {
    int32_t h =
        emit_op(w, b, LOOM_OP_LT, LOOM_DTYPE_BOOL, i, emit_const(w, b, LOOM_DTYPE_I64, (double)hi));
    c = c == -2 ? h : emit_op(w, b, LOOM_OP_MUL, LOOM_DTYPE_BOOL, c, h);
  }
  return c;
}

/* bool: the point lies inside value l on every dim it covers only part
 * of (and, when `pad` is a pad node, inside its unpadded input); -2 when
 * no condition is needed. */
static int32_t emit_inside(lw *w, kbuild *b, lpart *P, int32_t l, const loom_node *pad) {
  const loom_type *t = vt(w, l);
  int32_t c = -2;
  for (int32_t d = 0; d < t->rank && c != -1; d++) {
    if (w->lv[l].uf[d] < 0) continue;
    int64_t lo = 0, hi = t->shape[d];
    if (pad) {
      lo = LOOM_ATTR_INTS(pad, pad, lo).v[d];
      hi -= LOOM_ATTR_INTS(pad, pad, hi).v[d];
      if (lo == 0 && hi == t->shape[d]) continue; /* not padded */
    }
    int32_t r = emit_in_range(w, b, P, l, d, lo, hi);
    if (r == -2) continue;
    c = c == -2 ? r : emit_op(w, b, LOOM_OP_MUL, LOOM_DTYPE_BOOL, c, r);
  }
  return c;
}

static int32_t emit_load(lw *w, kbuild *b, lpart *P, int32_t l) {
  const lval *x = &w->lv[l];
  const loom_type *t = vt(w, l);
  if (outside_part(w, P, l)) /* what a guarded load reads there */
    return emit_const(w, b, t->dtype, 0.0);
  if (x->view) {
    int32_t a = kb_arg(w, b, x->src, 0);
    /* a piece of a concat or the inside of a pad reads only where it lies */
    int32_t guard = emit_inside(w, b, P, l, NULL);
    if (a < 0 || guard == -1) return -1;
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = t->dtype, .arg = a,
                                      .n_a = guard >= 0, .a = {guard},
                                      .map = value_map(w, P, l, x->stride, x->base)});
  }
  int32_t a = kb_arg(w, b, x->v, x->mat ? 1 : 2);
  if (a < 0) return -1;
  int64_t st[MAXR];
  contiguous(t, st);
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = t->dtype, .arg = a,
                                    .map = value_map(w, P, l, st, 0)});
}

/* The expression computing local value l (output of member m); the values
 * it reads (node_dep) have their expressions already. */
static int32_t emit_node(lw *w, kbuild *b, lpart *P, int32_t l, int32_t m) {
  const loom_node *nd = mnode(w, m);
  const loom_type *t = vt(w, l);
  const loom_op_def *d = loom_op_get(nd->op);
  switch (d->cls) {
  case LOOM_OPCLASS_SOURCE: {
    if (nd->op == LOOM_OP_CONSTANT)
      return emit_const(w, b, t->dtype, LOOM_ATTR_F(nd, constant, value));
    int64_t axis = LOOM_ATTR_I(nd, iota, axis);
    if (axis < 0) axis += t->rank;
    int64_t st[MAXR] = {0};
    st[axis] = 1; /* the value is start + the index along axis */
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = t->dtype,
                                      .map = value_map(w, P, l, st, LOOM_ATTR_I(nd, iota, start))});
  }
  case LOOM_OPCLASS_LAYOUT: {
    if (nd->op == LOOM_OP_PAD) { /* the input inside, the pad value outside */
      if (outside_part(w, P, m_in(w, m, 0)))
        return emit_const(w, b, t->dtype, LOOM_ATTR_F(nd, pad, value));
      int32_t in = got(P, m_in(w, m, 0)), c = emit_inside(w, b, P, l, nd);
      if (c == -2) return in;
      int32_t v = emit_const(w, b, t->dtype, LOOM_ATTR_F(nd, pad, value));
      if (in < 0 || c < 0 || v < 0) return -1;
      return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = t->dtype,
                                        .op = LOOM_OP_SELECT, .n_a = 3, .a = {c, in, v}});
    }
    if (nd->op != LOOM_OP_CONCAT) return got(P, m_in(w, m, 0));
    /* the piece whose range holds the index, by a chain of selects from
     * the last piece back */
    int64_t axis = LOOM_ATTR_I(nd, concat, axis), end = t->shape[axis < 0 ? axis += t->rank : axis];
    int32_t last = nd->n_in - 1; /* pieces outside this part's loop are left out */
    while (last > 0 && outside_part(w, P, m_in(w, m, last))) end -= vt(w, m_in(w, m, last--))->shape[axis];
    int32_t e = got(P, m_in(w, m, last)), idx = -2;
    for (int32_t i = last - 1; i >= 0 && e >= 0; i--) {
      end -= vt(w, m_in(w, m, i + 1))->shape[axis];
      if (outside_part(w, P, m_in(w, m, i))) continue;
      if (idx == -2) idx = emit_dim_index(w, b, P, l, (int32_t)axis);
      int32_t c =
          emit_op(w, b, LOOM_OP_LT, LOOM_DTYPE_BOOL, idx, emit_const(w, b, LOOM_DTYPE_I64, (double)end));
      int32_t pi = got(P, m_in(w, m, i));
      if (c < 0 || pi < 0) return -1;
      e = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = t->dtype, .op = LOOM_OP_SELECT,
                                     .n_a = 3, .a = {c, pi, e}});
    }
    return e;
  }
  case LOOM_OPCLASS_REDUCE: {
    int32_t x = got(P, m_in(w, m, 0));
    if (w->red[m] != RED_IDENT) { /* a bug: a row reduction's register is missing */
      w->err = loom_error(w->ctx, LOOM_STATUS_INTERNAL,
                          "group %d: reduction node %d used before its stage", w->group, w->mem[m]);
      return -1;
    }
    if (x < 0 || nd->op != LOOM_OP_REDUCE_SUM) return x;
    /* the reference's sum starts at +0.0 */
    int32_t z = emit_const(w, b, t->dtype, 0.0);
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = t->dtype, .op = LOOM_OP_ADD,
                                      .n_a = 2, .a = {z, x}});
  }
  case LOOM_OPCLASS_RNG: {
    int32_t x = got(P, m_in(w, m, 0));
    /* the logical index lin(at + j, whole): whole's strides, at's offset */
    loom_rng_piece piece;
    loom_status ps = loom_op_rng_piece(w->ctx, nd, t->rank, t->shape, &piece);
    if (ps) {
      w->err = ps;
      return -1;
    }
    int64_t st[MAXR] = {0};
    for (int32_t d = 0; d < t->rank; d++) st[d] = (int64_t)piece.stride[d];
    int32_t idx = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = LOOM_DTYPE_I64,
                                             .map = value_map(w, P, l, st, 0)});
    int32_t base = nd->n_in > 1 ? got(P, m_in(w, m, 1)) : -1;
    double p = LOOM_ATTR_F(nd, dropout, p);
    loom_kexpr keep = {.kind = LOOM_KX_KEEP, .dtype = LOOM_DTYPE_BOOL, .n_a = base >= 0 ? 2 : 1,
                       .a = {idx, base}, .seed = (uint64_t)LOOM_ATTR_I(nd, dropout, seed),
                       .offset = (uint64_t)LOOM_ATTR_I(nd, dropout, offset) + piece.origin,
                       .threshold = loom_dropout_threshold(p)};
    int32_t kp = kb_expr(w, b, keep);
    int32_t sc = emit_const(w, b, LOOM_DTYPE_F64, 1.0 - p);
    int32_t dv = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = t->dtype,
                                            .op = LOOM_OP_DIV, .n_a = 2, .a = {x, sc}});
    int32_t z = emit_const(w, b, t->dtype, 0.0);
    if (x < 0 || idx < 0 || kp < 0 || sc < 0 || dv < 0 || z < 0 || (nd->n_in > 1 && base < 0))
      return -1;
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_OP, .dtype = t->dtype, .op = LOOM_OP_SELECT,
                                      .n_a = 3, .a = {kp, dv, z}});
  }
  default: break;
  }
  loom_kexpr e = {.kind = LOOM_KX_OP, .dtype = t->dtype, .op = nd->op, .n_a = nd->n_in};
  for (int32_t i = 0; i < nd->n_in; i++) {
    e.a[i] = got(P, m_in(w, m, i));
    if (e.a[i] < 0) return e.a[i];
  }
  return kb_expr(w, b, e);
}

static bool memoised(const lpart *P, int32_t l) { return P->memo_stamp[l] == P->stamp; }

/* Register, scratch row or load: an expression that reads no other value. */
static bool is_leaf(const lw *w, const lpart *P, int32_t l) {
  return P->avail[l] == AV_REG || P->avail[l] == AV_SCRATCH || loadable(w, l, P->phase);
}

/* The i-th local value emit_node reads for l, or -1 past the last: not
 * what lies outside the part's loop range behind a pad or a concat. */
static int32_t node_dep(const lw *w, const lpart *P, int32_t l, int32_t i) {
  int32_t m = w->lv[l].prod;
  const loom_node *nd = mnode(w, m);
  loom_op_class c = loom_op_get(nd->op)->cls;
  int32_t n = c == LOOM_OPCLASS_SOURCE ? 0
              : (c == LOOM_OPCLASS_LAYOUT && nd->op != LOOM_OP_CONCAT) || c == LOOM_OPCLASS_REDUCE
                  ? 1
                  : nd->n_in;
  if (!P->seg_lo || (nd->op != LOOM_OP_PAD && nd->op != LOOM_OP_CONCAT)) return i < n ? m_in(w, m, i) : -1;
  bool any = false;
  for (int32_t j = 0; j < n; j++) any |= !outside_part(w, P, m_in(w, m, j));
  for (int32_t j = 0; j < n; j++) {
    if (outside_part(w, P, m_in(w, m, j)) && (any || nd->op == LOOM_OP_PAD || j > 0)) continue;
    if (i-- == 0) return m_in(w, m, j);
  }
  return -1;
}

/* The expression of l, whose operands are all memoised. */
static int32_t emit_one(lw *w, kbuild *b, lpart *P, int32_t l) {
  int32_t e;
  if (P->avail[l] == AV_REG)
    e = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_REG, .dtype = vt(w, l)->dtype,
                                   .reg = P->avail_id[l]});
  else if (P->avail[l] == AV_SCRATCH)
    e = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_SCRATCH, .dtype = LOOM_DTYPE_F32,
                                   .scratch = P->avail_id[l]});
  else if (loadable(w, l, P->phase))
    e = emit_load(w, b, P, l);
  else
    e = emit_node(w, b, P, l, w->lv[l].prod);
  if (e >= 0) {
    P->memo[l] = e;
    P->memo_stamp[l] = P->stamp;
  }
  return e;
}

/* The expression for local value l in the current stage (memoised), its
 * operands first, depth first in operand order. An explicit stack, not
 * recursion: a chain of 10k element-wise ops is 10k deep. The stack holds
 * one path of the (acyclic) value graph, so n_lv entries suffice. */
static int32_t emit(lw *w, kbuild *b, lpart *P, int32_t l) {
  if (memoised(P, l)) return P->memo[l];
  int32_t *stack = P->emit_stack, top = 0;
  stack[top++] = l;
  while (top > 0) {
    int32_t t = stack[top - 1], next = -1;
    if (!is_leaf(w, P, t))
      for (int32_t i = 0, d; (d = node_dep(w, P, t, i)) >= 0; i++)
        if (!memoised(P, d)) {
          next = d;
          break;
        }
    if (next >= 0) {
      stack[top++] = next;
      continue;
    }
    if (emit_one(w, b, P, t) < 0) return -1;
    top--;
  }
  return P->memo[l];
}

/* Growable list of stage outputs. */
typedef struct outs {
  loom_kout *o;
  int32_t n, cap;
} outs;

static bool push_out(lw *w, outs *s, loom_kout o) {
  if (!loom_grow(w->ctx, (void **)&s->o, &s->cap, s->n + 1, sizeof o)) return false;
  s->o[s->n++] = o;
  return true;
}

/* Appends stage s (if it has outputs) to the part, taking its array. */
static bool flush_stage(lw *w, lpart *P, int32_t *cap_stages, outs *s, loom_kstage_kind kind) {
  if (s->n == 0) return true;
  loom_kpart *kp = P->kp;
  if (!loom_grow(w->ctx, (void **)&kp->stages, cap_stages, kp->n_stages + 1, sizeof(loom_kstage)))
    return false;
  kp->stages[kp->n_stages++] = (loom_kstage){.kind = kind, .n_out = s->n, .out = s->o};
  memset(s, 0, sizeof *s);
  return true;
}

static loom_kmap out_map(const lw *w, const lpart *P, int32_t l) {
  int64_t st[MAXR];
  contiguous(vt(w, l), st);
  return value_map(w, P, l, st, 0);
}

#define TRYE(x)                                                                                    \
  do {                                                                                             \
    if ((x) < 0) goto oom;                                                                         \
  } while (0)

loom_status loom_lower_build_part(lw *w, kbuild *b, lpart *P, const lroot *roots, int32_t n) {
  int32_t L = 0, cap_stages = 0;
  outs so = {0};
  int32_t *cost = P->cost, *set_l = P->set_l, *set_kind = P->set_kind, *set_id = P->set_id;
  bool *later = P->later, *need_reg = P->need_reg, *wants_reg = P->wants_reg;
  /* levels, and recompute costs: weighted ops to recompute a value from
   * loads and registers (a per-row value costs an element nothing: it is
   * a register) */
  for (int32_t q = 0; q < P->n_cl; q++) {
    int32_t m = P->cl[q];
    const loom_node *nd = mnode(w, m);
    int32_t lo = m_out(w, m), lvl = 0, c = loom_lower_op_weight(w, m);
    bool elem = is_elem(P, &w->lv[lo]);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = m_in(w, m, i);
      lvl = LOOM_MAX(lvl, P->level[li]);
      if (!loadable(w, li, P->phase) && (!elem || is_elem(P, &w->lv[li]))) c += cost[li];
    }
    if (w->red[m] == RED_ROW) {
      lvl++;
      c = 0;
    }
    P->level[lo] = lvl;
    cost[lo] = LOOM_MIN(c, 1000);
    L = LOOM_MAX(L, lvl + 1);
  }
  /* later: needed by a stage after its own; need_reg: read element-wise */
  for (int32_t q = 0; q < P->n_cl; q++) {
    int32_t m = P->cl[q];
    if (w->red[m] >= RED_ROW) continue;
    const loom_node *nd = mnode(w, m);
    int32_t lo = m_out(w, m);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = m_in(w, m, i);
      need_reg[li] = true;
      if (P->level[li] < P->level[lo]) later[li] = true;
    }
  }
  /* views and identities pass the need on to what they read */
  for (int32_t q = P->n_cl - 1; q >= 0; q--) {
    int32_t m = P->cl[q];
    if (loom_lower_op_weight(w, m) > 0 || w->red[m] >= RED_ROW) continue;
    const loom_node *nd = mnode(w, m);
    int32_t lo = m_out(w, m);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = m_in(w, m, i);
      later[li] |= later[lo];
      need_reg[li] |= need_reg[lo];
    }
  }
  int32_t n_reg = 0, n_scr = 0;
  for (int32_t q = 0; q < P->n_cl; q++) {
    int32_t m = P->cl[q], l = m_out(w, m);
    const lval *x = &w->lv[l];
    bool computed = !loadable(w, l, P->phase) && w->red[m] < RED_ROW && loom_lower_op_weight(w, m) > 0;
    P->scratch[l] = computed && later[l] && is_elem(P, x) && vt(w, l)->dtype == LOOM_DTYPE_F32 &&
                    cost[l] >= 4;
    /* per-row values: once per row into a register, if it saves work */
    wants_reg[l] = computed && !is_elem(P, x) && need_reg[l] && (P->level[l] >= 1 || cost[l] >= 2);
  }
  /* segments of R loops: the stages again for each (lower.c, "segments");
   * per-row registers of the first stay available to the others */
  int32_t n_rseg = P->rsg ? segs_count(P->rsg) : 1;
  for (int32_t lvl = 0, rs = 0; rs < n_rseg; lvl = lvl == L ? 0 : lvl + 1, rs += lvl == 0) {
    if (P->rsg && lvl == 0) seg_pick(P->rsg, rs, P->seg_lo, P->seg_hi);
    for (int pass = 0; pass < 2; pass++) { /* 0: SCALAR stage, 1: ROW stage */
      bool row = pass == 1;
      P->stamp++; /* a new stage: expressions are emitted afresh */
      /* registers and scratch rows this stage fills become visible after it */
      int32_t n_set = 0;
      for (int32_t q = 0; q < P->n_cl; q++) {
        int32_t m = P->cl[q];
        const loom_node *nd = mnode(w, m);
        int32_t lo = m_out(w, m);
        int32_t lin = nd->n_in > 0 ? m_in(w, m, 0) : -1;
        if (row && (w->red[m] == RED_ROW || w->red[m] == RED_ROWCOL) && P->level[lin] == lvl) {
          int32_t e = emit(w, b, P, lin);
          TRYE(e);
          loom_op comb = loom_reduce_combine(nd->op);
          int32_t r = n_reg++;
          if (!push_out(w, &so, (loom_kout){.dst = LOOM_KDST_ROW_REDUCE, .expr = e, .target = r,
                                            .combine = comb}))
            goto oom;
          if (w->red[m] == RED_ROW) {
            set_l[n_set] = lo, set_kind[n_set] = AV_REG, set_id[n_set++] = r;
          } else {
            P->rowreg[m] = r;
          }
        }
        if (row && P->scratch[lo] && P->level[lo] == lvl) {
          int32_t e = emit(w, b, P, lo);
          TRYE(e);
          int32_t s = n_scr++;
          if (!push_out(w, &so, (loom_kout){.dst = LOOM_KDST_SCRATCH, .expr = e, .target = s}))
            goto oom;
          set_l[n_set] = lo, set_kind[n_set] = AV_SCRATCH, set_id[n_set++] = s;
        }
        if (!row && wants_reg[lo] && P->level[lo] == lvl && P->avail[lo] == AV_NONE) {
          int32_t e = emit(w, b, P, lo);
          TRYE(e);
          int32_t r = n_reg++;
          if (!push_out(w, &so, (loom_kout){.dst = LOOM_KDST_REG, .expr = e, .target = r}))
            goto oom;
          set_l[n_set] = lo, set_kind[n_set] = AV_REG, set_id[n_set++] = r;
        }
      }
      for (int32_t i = 0; i < n; i++) {
        const lroot *rt = &roots[i];
        const loom_node *nd = mnode(w, rt->m);
        const lval *x = &w->lv[rt->l];
        if (!rt->col) {
          int32_t src = store_src(w, rt->l);
          if (is_elem(P, &w->lv[src]) != row || P->level[rt->l] != lvl) continue;
          int32_t e = emit(w, b, P, rt->l), a = kb_arg(w, b, x->v, 1);
          TRYE(e);
          TRYE(a);
          if (!push_out(w, &so, (loom_kout){.dst = LOOM_KDST_STORE, .expr = e, .target = a,
                                            .map = out_map(w, P, src)}))
            goto oom;
          continue;
        }
        int32_t lin = m_in(w, rt->m, 0), e;
        if (w->red[rt->m] == RED_COL) {
          if (is_elem(P, &w->lv[lin]) != row || P->level[lin] != lvl) continue;
          e = emit(w, b, P, lin);
        } else {
          if (row || P->level[lin] + 1 != lvl) continue;
          e = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_REG, .dtype = LOOM_DTYPE_F32,
                                         .reg = P->rowreg[rt->m]});
        }
        int32_t a = kb_arg(w, b, x->v, x->mat ? 1 : 2);
        TRYE(e);
        TRYE(a);
        loom_op comb = loom_reduce_combine(nd->op);
        if (!push_out(w, &so, (loom_kout){.dst = LOOM_KDST_COL_REDUCE, .expr = e, .target = a,
                                          .map = out_map(w, P, rt->l), .combine = comb}))
          goto oom;
      }
      if (!flush_stage(w, P, &cap_stages, &so, row ? LOOM_KSTAGE_ROW : LOOM_KSTAGE_SCALAR))
        goto oom;
      for (int32_t i = 0; i < n_set; i++) {
        P->avail[set_l[i]] = (uint8_t)set_kind[i];
        P->avail_id[set_l[i]] = set_id[i];
      }
    }
  }
  P->kp->n_regs = n_reg;
  P->kp->n_scratch = n_scr;
  return LOOM_STATUS_OK;
oom:
  free(so.o);
  if (w->err) return w->err;
  return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory lowering group %d",
                    w->group);
}

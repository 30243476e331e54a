/*
 * Lowering, steps 1-4 (lower.c describes them): the group's members and
 * values, dim classes, components and their domains (P x R), and the
 * reductions and phases.
 */
#include "fusion/lower_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* ---- 1. members and values ---------------------------------------------- */

static int32_t add_value(lw *w, int32_t v) {
  if (w->loc[v] >= 0) return w->loc[v];
  if (!loom_grow(w->ctx, (void **)&w->lv, &w->cap_lv, w->n_lv + 1, sizeof(lval))) return -1;
  lval *l = &w->lv[w->n_lv];
  memset(l, 0, sizeof *l);
  l->v = v;
  l->prod = -1;
  l->src = -1;
  l->comp = -1;
  l->alias = -1;
  w->loc[v] = w->n_lv;
  return w->n_lv++;
}

/* Local values of the members in w->mem, with uses, producers and the
 * materialized flag. */
static loom_status collect_values(lw *w) {
  for (int32_t l = 0; l < w->n_lv; l++) w->loc[w->lv[l].v] = -1;
  w->n_lv = 0;
  int32_t n_io = 0;
  for (int32_t m = 0; m < w->n_mem; m++) n_io += 1 + mnode(w, m)->n_in;
  free(w->io_off);
  w->io_off = malloc(sizeof(int32_t) * ((size_t)w->n_mem + (size_t)n_io + 1));
  if (!w->io_off) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->io = w->io_off + w->n_mem;
  for (int32_t m = 0, at = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m); /* fusible nodes have one output */
    w->io_off[m] = at;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t l = add_value(w, nd->in[i]);
      if (l < 0) return LOOM_STATUS_OUT_OF_MEMORY;
      w->lv[l].n_use++;
      w->io[at + 1 + i] = l;
    }
    int32_t l = add_value(w, nd->out[0]);
    if (l < 0) return LOOM_STATUS_OUT_OF_MEMORY;
    w->lv[l].prod = m;
    w->io[at] = l;
    at += 1 + nd->n_in;
  }
  /* materialized: a graph output, or used by a node outside the group
   * (any node, dead ones too) */
  const loom_fusion_index *ix = w->ix;
  for (int32_t l = 0; l < w->n_lv; l++) {
    lval *x = &w->lv[l];
    if (x->prod >= 0) {
      /* a duplicated producer's value is its owner's to store */
      x->mat = w->gon[w->mem[x->prod]] == w->group &&
               loom_fusion_index_materialized(ix, w->gon, x->v);
      continue;
    }
    x->mat = true; /* produced outside: in memory */
    x->view = true;
    x->src = x->v;
    contiguous(vt(w, l), x->stride);
  }
  return LOOM_STATUS_OK;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static loom_status collect(lw *w) {
  const loom_graph *g = w->g;
  size_t cap = (size_t)(w->n_given > 0 ? w->n_given : 1);
  w->mem = malloc(sizeof(int32_t) * cap * 2);
  if (!w->mem) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->all_mem = w->mem + cap;
  w->loc = w->ix->loc;
  w->n_all = w->n_given;
  bool up = true, down = true; /* the planner lists groups descending */
  for (int32_t m = 0; m < w->n_all; m++) {
    w->all_mem[m] = w->given[m];
    up = up && (m == 0 || w->given[m - 1] < w->given[m]);
    down = down && (m == 0 || w->given[m - 1] > w->given[m]);
  }
  if (down)
    for (int32_t m = 0; m < w->n_all; m++) w->all_mem[m] = w->given[w->n_all - 1 - m];
  else if (!up)
    qsort(w->all_mem, (size_t)w->n_all, sizeof(int32_t), cmp_i32);
  for (int32_t m = 0; m < w->n_all; m++) {
    int32_t u = w->all_mem[m];
    if (u < 0 || u >= g->n_nodes ||
        (w->gon[u] != w->group && !loom_fusion_index_dup(w->ix, w->group, u)) ||
        (m > 0 && w->all_mem[m - 1] == u))
      return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "group %d: member list does not match the grouping (node %d)", w->group,
                        u);
  }
  if (w->n_all == 0) return loom_lower_fail(w, "has no nodes");
  if (w->mode == LOOM_FUSION_NONE && w->n_all != 1)
    return loom_lower_fail(w, "mode none takes one node per kernel, not %d", w->n_all);
  for (int32_t m = 0; m < w->n_all; m++) {
    w->mem[m] = w->all_mem[m];
    const loom_node *nd = &g->nodes[w->mem[m]];
    if (!loom_fusion_node_fusible(g, w->mem[m]))
      return loom_lower_fail(w, "node %d (%s) cannot be fused", w->mem[m], loom_op_name(nd->op));
  }
  w->n_mem = w->n_all;
  LOOM_TRY(collect_values(w));
  /* members nothing materialized depends on are dead: leave them out */
  bool *live = calloc((size_t)w->n_mem, sizeof(bool));
  if (!live) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  int32_t n_live = 0;
  for (int32_t m = w->n_mem - 1; m >= 0; m--) {
    const loom_node *nd = mnode(w, m);
    live[m] = live[m] || w->lv[m_out(w, m)].mat;
    if (!live[m]) continue;
    n_live++;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t p = w->lv[m_in(w, m, i)].prod;
      if (p >= 0) live[p] = true;
    }
  }
  if (n_live < w->n_mem) {
    int32_t k = 0;
    for (int32_t m = 0; m < w->n_mem; m++)
      if (live[m]) w->mem[k++] = w->mem[m];
    w->n_mem = k;
    free(live);
    if (k == 0) return loom_lower_fail(w, "produces nothing");
    return collect_values(w);
  }
  free(live);
  return LOOM_STATUS_OK;
}

/* ---- 2. views and dim classes ------------------------------------------- */

/*
 * The dims' union-find is weighted: every dim also knows where it starts
 * in its class's loop, relative to its parent (w->uoff), because a piece
 * of a concat, a slice of a computed value and the inside of a pad iterate
 * the same loop as the whole, shifted. Returns the root; *start is the
 * dim's start minus the root's.
 */
static int32_t wf_find(lw *w, int32_t a, int64_t *start) {
  int64_t o = 0;
  int32_t r = a;
  for (; w->uf[r] != r; r = w->uf[r]) o += w->uoff[r];
  for (int64_t rest = o; w->uf[a] != a;) { /* compress: every node on the path to the root */
    int32_t next = w->uf[a];
    int64_t step = w->uoff[a];
    w->uf[a] = r;
    w->uoff[a] = rest;
    rest -= step;
    a = next;
  }
  if (start) *start = o;
  return r;
}

/* Puts dims a and b in one class with start(a) - start(b) = delta; false
 * (and w->off_clash) if their class already places them otherwise. */
static bool wf_union(lw *w, int32_t a, int32_t b, int64_t delta) {
  int64_t da, db;
  int32_t ra = wf_find(w, a, &da), rb = wf_find(w, b, &db);
  if (ra == rb) {
    if (da - db != delta) w->off_clash = true;
    return da - db == delta;
  }
  int64_t d = delta - da + db; /* start(ra) - start(rb) */
  if (ra < rb) {
    w->uf[rb] = ra;
    w->uoff[rb] = -d;
  } else {
    w->uf[ra] = rb;
    w->uoff[ra] = d;
  }
  return true;
}

/* Unifies the dims of a (rank ra) with b's, right-aligned, where sizes
 * match and exceed 1 (NumPy broadcasting). */
static void unify_aligned(lw *w, int32_t la, int32_t lb) {
  const loom_type *ta = vt(w, la), *tb = vt(w, lb);
  for (int32_t i = 1; i <= ta->rank && i <= tb->rank; i++) {
    int32_t da = ta->rank - i, db = tb->rank - i;
    if (ta->shape[da] != 1 && ta->shape[da] == tb->shape[db])
      wf_union(w, la * MAXR + da, lb * MAXR + db, 0);
  }
}

/* Dim d of local values li (input) and lo (output) in one class, the
 * input's element i at the output's i + shift; false if a side has one
 * element (no loop) while the other does not. */
static bool unify_shifted(lw *w, int32_t li, int32_t lo, int32_t d, int64_t shift, bool widen) {
  int64_t ni = vt(w, li)->shape[d], no = vt(w, lo)->shape[d];
  if (ni == 1 && no == 1) return true;
  /* A one-element dim padded or concatenated wider (the gradient of a
   * slice that split q, k and v): the input has no loop there and reads
   * its one element at every index; the pad's guard or the concat's
   * choice of piece (lower_emit.c) keeps only the index where it lies. */
  if (ni == 1 && widen) return true;
  if (ni <= 1 || no <= 1) return false;
  wf_union(w, li * MAXR + d, lo * MAXR + d, shift);
  return true;
}

/* Concat, pad and slice of computed values: index arithmetic on one loop
 * (the emitter selects a piece by index, guards the pad). */
static loom_status shifted_layout(lw *w, int32_t m, const loom_node *nd, int32_t lo) {
  const loom_type *to = vt(w, lo);
  bool ok = true;
  if (nd->op == LOOM_OP_CONCAT) {
    int64_t axis = LOOM_ATTR_I(nd, concat, axis), at = 0;
    if (axis < 0) axis += to->rank;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = m_in(w, m, i);
      for (int32_t d = 0; d < to->rank; d++)
        ok = ok && unify_shifted(w, li, lo, d, d == axis ? at : 0, true);
      at += vt(w, li)->shape[axis];
    }
  } else {
    int32_t li = m_in(w, m, 0);
    const loom_type *ti = vt(w, li);
    for (int32_t d = 0; d < to->rank; d++) {
      int64_t shift = 0;
      if (nd->op == LOOM_OP_PAD) {
        shift = LOOM_ATTR_INTS(nd, pad, lo).v[d];
      } else { /* slice: the output's element i is the input's start + i */
        shift = LOOM_ATTR_INTS(nd, slice, starts).v[d];
        if (shift < 0) shift += ti->shape[d];
        shift = -shift;
      }
      ok = ok && unify_shifted(w, li, lo, d, shift, nd->op == LOOM_OP_PAD);
    }
  }
  if (!ok)
    return loom_lower_fail(w, "%s (node %d) moves a one-element dim", loom_op_name(nd->op),
                           w->mem[m]);
  return LOOM_STATUS_OK;
}

uint32_t loom_lower_reduce_mask(const loom_node *nd, int32_t rank) {
  const loom_ints *axes = &LOOM_ATTR_INTS(nd, reduce_sum, axes); /* sum, max, min */
  if (axes->n == 0) return rank ? (uint32_t)((UINT64_C(1) << rank) - 1) : 0;
  uint32_t m = 0;
  for (int32_t i = 0; i < axes->n; i++) {
    int64_t a = axes->v[i] < 0 ? axes->v[i] + rank : axes->v[i];
    if (a >= 0 && a < rank) m |= 1u << a;
  }
  return m;
}

/* Strides of a reshape of a strided view, if every merged run of input
 * dims is itself contiguous; false otherwise. */
static bool reshape_strides(const loom_type *in, const int64_t *istr, const loom_type *out,
                            int64_t *ostr) {
  int32_t i = 0, o = 0;
  while (i < in->rank || o < out->rank) {
    /* skip size-1 dims on both sides */
    if (i < in->rank && in->shape[i] == 1) { i++; continue; }
    if (o < out->rank && out->shape[o] == 1) { ostr[o++] = 0; continue; }
    if (i >= in->rank || o >= out->rank) return false;
    int32_t i0 = i, o0 = o;
    int64_t pi = in->shape[i++], po = out->shape[o++];
    while (pi != po) {
      if (pi < po) {
        if (i >= in->rank) return false;
        pi *= in->shape[i++];
      } else {
        if (o >= out->rank) return false;
        po *= out->shape[o++];
      }
    }
    /* the input block i0..i must be mergeable: stride[d] = stride[d+1]*shape[d+1] */
    int32_t last = -1;
    for (int32_t d = i0; d < i; d++) {
      if (in->shape[d] == 1) continue;
      if (last >= 0 && istr[last] != istr[d] * in->shape[d]) return false;
      last = d;
    }
    if (pi == 0) return false;
    int64_t s = last >= 0 ? istr[last] : 1;
    for (int32_t d = o - 1; d >= o0; d--) {
      ostr[d] = out->shape[d] == 1 ? 0 : s;
      s *= out->shape[d];
    }
  }
  return true;
}

/* A layout op over a view gives a view (no work: the load moves). */
static bool view_through(lw *w, const loom_node *nd, int32_t li, int32_t lo) {
  const lval *x = &w->lv[li];
  lval *y = &w->lv[lo];
  const loom_type *ti = vt(w, li), *to = vt(w, lo);
  y->src = x->src;
  y->base = x->base;
  switch (nd->op) {
  case LOOM_OP_RESHAPE:
    if (!reshape_strides(ti, x->stride, to, y->stride)) return false;
    break;
  case LOOM_OP_TRANSPOSE:
    for (int32_t d = 0; d < to->rank; d++)
      y->stride[d] = x->stride[LOOM_ATTR_INTS(nd, transpose, perm).v[d]];
    break;
  case LOOM_OP_SLICE:
    for (int32_t d = 0; d < ti->rank; d++) {
      int64_t s = LOOM_ATTR_INTS(nd, slice, starts).v[d];
      if (s < 0) s += ti->shape[d];
      y->base += s * x->stride[d];
      y->stride[d] = x->stride[d];
    }
    break;
  case LOOM_OP_BROADCAST_TO:
    for (int32_t d = 0; d < to->rank; d++) {
      int32_t di = d - (to->rank - ti->rank);
      y->stride[d] = di >= 0 && ti->shape[di] == to->shape[d] ? x->stride[di] : 0;
    }
    break;
  default: return false;
  }
  y->view = true;
  return true;
}

static loom_status classes(lw *w) {
  size_t nuf = (size_t)w->n_lv * MAXR;
  w->uf = malloc(sizeof(int32_t) * nuf);
  w->uoff = calloc(nuf, sizeof(int64_t));
  w->ext = calloc(nuf, sizeof(int64_t));
  int64_t *lo_of = malloc(sizeof(int64_t) * nuf * 2); /* then each class's end */
  /* reshapes of computed values that merge or split dims (lower_split.c) */
  int32_t *splits = malloc(sizeof(int32_t) * (size_t)(w->n_mem > 0 ? w->n_mem : 1)), n_splits = 0;
  w->n_cls = (int32_t)nuf;
  if (!w->uf || !w->uoff || !w->ext || !lo_of || !splits) {
    free(lo_of);
    free(splits);
    return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  for (int32_t i = 0; i < w->n_lv * MAXR; i++) w->uf[i] = i;
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    const loom_op_def *d = loom_op_get(nd->op);
    int32_t lo = m_out(w, m);
    int32_t li = nd->n_in > 0 ? m_in(w, m, 0) : -1;
    if (d->cls == LOOM_OPCLASS_LAYOUT) {
      if (w->lv[li].view && view_through(w, nd, li, lo)) continue;
      const loom_type *ti = vt(w, li), *to = vt(w, lo);
      if (nd->op == LOOM_OP_CONCAT || nd->op == LOOM_OP_PAD || nd->op == LOOM_OP_SLICE) {
        loom_status st = shifted_layout(w, m, nd, lo);
        if (st) {
          free(lo_of);
          free(splits);
          return st;
        }
      } else if (nd->op == LOOM_OP_TRANSPOSE) {
        for (int32_t k = 0; k < to->rank; k++)
          if (to->shape[k] != 1)
            wf_union(w, lo * MAXR + k,
                     li * MAXR + (int32_t)LOOM_ATTR_INTS(nd, transpose, perm).v[k], 0);
      } else if (nd->op == LOOM_OP_BROADCAST_TO) {
        unify_aligned(w, li, lo);
      } else if (nd->op == LOOM_OP_RESHAPE) {
        /* size-1 dims may come and go between computed values; a reshape
         * that merges or splits dims is stored in its input's loops (the
         * flat order is the same) if nothing in the group reads it, else
         * both sides iterate their dims' common factors (lower_split.c) */
        int32_t a = 0, b = 0;
        bool same = true;
        for (;;) {
          while (a < ti->rank && ti->shape[a] == 1) a++;
          while (b < to->rank && to->shape[b] == 1) b++;
          if (a >= ti->rank || b >= to->rank) break;
          if (ti->shape[a++] != to->shape[b++]) same = false;
        }
        same = same && a >= ti->rank && b >= to->rank;
        if (!same && w->lv[lo].n_use == 0) {
          w->lv[lo].alias = w->lv[li].alias >= 0 ? w->lv[li].alias : li;
          continue;
        }
        if (!same) {
          splits[n_splits++] = m;
          continue;
        }
        a = b = 0;
        for (;;) {
          while (a < ti->rank && ti->shape[a] == 1) a++;
          while (b < to->rank && to->shape[b] == 1) b++;
          if (a >= ti->rank || b >= to->rank) break;
          wf_union(w, li * MAXR + a++, lo * MAXR + b++, 0);
        }
      } else {
        free(lo_of);
        free(splits);
        return loom_lower_fail(w, "%s (node %d) of a computed value", d->name, w->mem[m]);
      }
    } else if (d->cls == LOOM_OPCLASS_REDUCE) {
      const loom_type *ti = vt(w, li);
      uint32_t mask = loom_lower_reduce_mask(nd, ti->rank);
      bool keep = LOOM_ATTR_I(nd, reduce_sum, keepdims) != 0;
      for (int32_t k = 0, od = 0; k < ti->rank; k++) {
        if (mask & (1u << k)) {
          od += keep;
          continue;
        }
        if (ti->shape[k] != 1) wf_union(w, li * MAXR + k, lo * MAXR + od, 0);
        od++;
      }
    } else if (d->cls == LOOM_OPCLASS_ELEMENTWISE || d->cls == LOOM_OPCLASS_RNG) {
      for (int32_t i = 0; i < nd->n_in; i++) unify_aligned(w, m_in(w, m, i), lo);
    }
  }
  if (w->off_clash) { /* without instances yet: the caller makes them and comes back */
    free(lo_of);
    free(splits);
    return w->instanced ? loom_lower_fail(w, "layout ops place one loop at two offsets")
                        : LOOM_STATUS_OK;
  }
  /* class ids: uf roots of dims != 1 (an empty dim is a loop of no
   * iterations). A class's loop runs over the union of the ranges of the
   * dims whose every element the kernel needs — stored values and what
   * reductions reduce — from the lowest start; a value reaching past them
   * (a slice's input, an instance of a value at another offset) is
   * computed only inside. A class none of those iterates takes the union
   * of all its dims' ranges. */
  bool *need = calloc((size_t)w->n_lv + nuf + 1, sizeof(bool)), *open = need + w->n_lv;
  if (!need) {
    free(lo_of);
    free(splits);
    return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  for (int32_t l = 0; l < w->n_lv; l++)
    if (w->lv[l].prod >= 0 && w->lv[l].mat) need[store_src(w, l)] = true;
  for (int32_t m = 0; m < w->n_mem; m++)
    if (loom_op_get(mnode(w, m)->op)->cls == LOOM_OPCLASS_REDUCE) need[m_in(w, m, 0)] = true;
  int64_t *hi_of = lo_of + nuf;
  for (size_t i = 0; i < nuf; i++) lo_of[i] = INT64_MAX, hi_of[i] = INT64_MIN;
  for (int32_t l = 0; l < w->n_lv; l++) {
    const loom_type *t = vt(w, l);
    for (int32_t d = 0; d < MAXR; d++) {
      int64_t start = 0;
      w->lv[l].uf[d] = d < t->rank && t->shape[d] != 1 && w->lv[l].alias < 0
                           ? wf_find(w, l * MAXR + d, &start)
                           : -1;
      w->lv[l].off[d] = start;
      int32_t c = w->lv[l].uf[d];
      if (c < 0 || !need[l]) continue;
      lo_of[c] = LOOM_MIN(lo_of[c], start);
      hi_of[c] = LOOM_MAX(hi_of[c], start + t->shape[d]);
    }
  }
  for (int32_t l = 0; l < w->n_lv; l++) /* classes nothing needed whole: open */
    for (int32_t d = 0; d < MAXR; d++)
      if (w->lv[l].uf[d] >= 0 && lo_of[w->lv[l].uf[d]] == INT64_MAX) open[w->lv[l].uf[d]] = true;
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c < 0 || !open[c]) continue;
      lo_of[c] = LOOM_MIN(lo_of[c], w->lv[l].off[d]);
      hi_of[c] = LOOM_MAX(hi_of[c], w->lv[l].off[d] + vt(w, l)->shape[d]);
    }
  free(need);
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t d = 0; d < MAXR; d++)
      if (w->lv[l].uf[d] >= 0) w->lv[l].off[d] -= lo_of[w->lv[l].uf[d]];
  for (size_t c = 0; c < nuf; c++)
    if (lo_of[c] != INT64_MAX) w->ext[c] = hi_of[c] - lo_of[c];
  free(lo_of);
  /* each value's loops; a value may not hold a loop twice */
  loom_status st = loom_lower_loops(w, splits, n_splits);
  free(splits);
  return st;
}

/* ---- 3. components and domains ------------------------------------------ */

static int32_t count_cls(const lval *x) { return x->n_loops; }

/* Domain dims a set of classes covers (a class may span two after a split). */
static uint32_t cls_mask(const lcomp *c, const int32_t *cls, int32_t n) {
  uint32_t m = 0;
  for (int32_t j = 0; j < n; j++)
    for (int32_t i = 0; i < c->nd; i++)
      if (cls[j] >= 0 && c->dcls[i] == cls[j]) m |= 1u << i;
  return m;
}

/* Classes a reduce node reduces (the loops of its reduced dims), into out
 * (room for MAXD); returns the count. */
static int32_t reduced_classes(const lw *w, int32_t m, int32_t *out) {
  const loom_node *nd = mnode(w, m);
  const lval *x = &w->lv[m_in(w, m, 0)];
  uint32_t mask = loom_lower_reduce_mask(nd, vt(w, m_in(w, m, 0))->rank);
  int32_t n = 0;
  for (int32_t k = 0; k < x->n_loops; k++)
    if (mask & (1u << x->loop_dim[k])) out[n++] = x->loop[k];
  return n;
}

/* Splits domain dim j of c into (size/inner, inner); the outer half goes
 * to P (k = j + 1). */
static void split_at(lcomp *c, int32_t j, int64_t inner) {
  int64_t n = c->dsize[j];
  for (int32_t i = c->nd; i > j; i--) {
    c->dcls[i] = c->dcls[i - 1];
    c->dsize[i] = c->dsize[i - 1];
    c->dmult[i] = c->dmult[i - 1];
  }
  c->nd++;
  c->dsize[j] = n / inner;
  c->dmult[j] = inner * c->dmult[j + 1];
  c->dsize[j + 1] = inner;
  c->k = j + 1;
}

/* Splits a lone huge dim j: inner a divisor in [512, 8192]. */
static void split_dim(lcomp *c, int32_t j) {
  int64_t n = c->dsize[j], inner = 0;
  for (int64_t t = 8192; t >= 512; t--)
    if (n % t == 0 && n / t >= 2) {
      inner = t;
      break;
    }
  if (!inner || c->nd >= MAXD) return;
  split_at(c, j, inner);
}

/* A row of `len` elements left short so that `rows` rows remain: P dim
 * j - 1 (the last) lends R a divisor of its size, the smallest giving a
 * row of 512, else the largest that keeps 16 rows. */
static void lengthen_row(lcomp *c, int32_t j, int64_t rows, int64_t len) {
  int64_t d = c->dsize[j - 1], inner = 0;
  if (c->nd >= MAXD || c->nd + 1 - j > LOOM_MAX_RANK) return;
  for (int64_t t = 2; t <= 512 && t < d && t <= rows / 16; t++) {
    if (d % t) continue;
    inner = t;
    if (len * t >= 512) break;
  }
  if (inner) split_at(c, j - 1, inner);
}

/* R of a component without row reductions: the shortest suffix within
 * [s, nd) of at least 512 elements (enough to vectorise), but not at the
 * price of fewer rows than the threads need (16): an element-wise
 * [512, 128] is not one row of 65536. A row that rule leaves short
 * borrows from the last P dim (lengthen_row). Sets c->k. */
static void plain_suffix(lcomp *c, int32_t s) {
  int64_t prod = 1, rows = 1;
  for (int32_t i = 0; i < c->nd; i++) rows *= c->dsize[i];
  int32_t j = c->nd;
  while (j > s && prod < 512) {
    int64_t d = c->dsize[j - 1];
    if (j < c->nd && rows >= 16 && rows / d < 16) break;
    prod *= d;
    rows = rows > 0 ? rows / d : 0;
    j--;
  }
  c->k = j;
  if (j > s && prod < 512 && rows > 0) lengthen_row(c, j, rows, prod);
}

static bool has_cls(const lval *x, int32_t c) {
  for (int32_t k = 0; k < x->n_loops; k++)
    if (x->loop[k] == c) return true;
  return false;
}

static int64_t cls_size(const lw *w, int32_t c) { return w->ext[c]; }

/* Loops no op ties together may still run as one: when a piece of the
 * group has no value spanning all its loops (x[a, b] and z[c, b] sharing
 * only b), a loop c that never meets loop a in one value and has its size
 * is merged into it. Returns true if it merged anything. */
static bool merge_one(lw *w, int32_t *cuf) {
  int32_t nuf = w->n_cls;
  int32_t *ncls = calloc((size_t)nuf * 3, sizeof(int32_t));
  if (!ncls) return false;
  int32_t *best = ncls + nuf, *seen = ncls + 2 * nuf;
  for (int32_t i = 0; i < nuf; i++) {
    cuf[i] = i;
    best[i] = -1;
  }
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t k = 1; k < w->lv[l].n_loops; k++) uf_union(cuf, w->lv[l].loop[0], w->lv[l].loop[k]);
  /* per piece: its loop count and its fullest value */
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t k = 0; k < w->lv[l].n_loops; k++) {
      int32_t c = w->lv[l].loop[k];
      int32_t r = uf_find(cuf, c);
      if (!seen[c]) {
        seen[c] = 1;
        ncls[r]++;
      }
      if (best[r] < 0 || count_cls(&w->lv[l]) > count_cls(&w->lv[best[r]])) best[r] = l;
    }
  bool merged = false;
  for (int32_t r = 0; r < nuf && !merged; r++) {
    if (best[r] < 0 || count_cls(&w->lv[best[r]]) == ncls[r]) continue;
    const lval *f = &w->lv[best[r]];
    for (int32_t l2 = 0; l2 < w->n_lv && !merged; l2++)
      for (int32_t k2 = 0; k2 < w->lv[l2].n_loops && !merged; k2++) {
        int32_t c = w->lv[l2].loop[k2];
        if (uf_find(cuf, c) != r || has_cls(f, c)) continue;
        int64_t sz = cls_size(w, c);
        for (int32_t e = 0; e < f->n_loops && !merged; e++) {
          int32_t t = f->loop[e];
          if (cls_size(w, t) != sz) continue;
          bool meet = false;
          for (int32_t l3 = 0; l3 < w->n_lv && !meet; l3++)
            meet = has_cls(&w->lv[l3], c) && has_cls(&w->lv[l3], t);
          if (meet) continue;
          for (int32_t l3 = 0; l3 < w->n_lv; l3++) {
            lval *x = &w->lv[l3];
            for (int32_t k3 = 0; k3 < x->n_loops; k3++)
              if (x->loop[k3] == c) x->loop[k3] = t;
            for (int32_t d3 = 0; d3 < MAXR; d3++)
              if (x->uf[d3] == c) x->uf[d3] = t;
          }
          merged = true;
        }
      }
  }
  free(ncls);
  return merged;
}

static loom_status domains(lw *w) {
  int32_t nuf = w->n_cls;
  int32_t *cuf = malloc(sizeof(int32_t) * (size_t)nuf * 2);
  if (!cuf) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->cls_comp = cuf + nuf;
  for (int32_t guard = 0; guard < 64 && merge_one(w, cuf); guard++) {
  }
  for (int32_t i = 0; i < nuf; i++) {
    cuf[i] = i;
    w->cls_comp[i] = -1;
  }
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t k = 1; k < w->lv[l].n_loops; k++) uf_union(cuf, w->lv[l].loop[0], w->lv[l].loop[k]);
  /* components: one per class-union root, domain from its fullest value */
  int32_t *reds = malloc(sizeof(int32_t) * (size_t)(w->n_mem > 0 ? w->n_mem : 1)), n_red = 0;
  if (reds)
    for (int32_t m = 0; m < w->n_mem; m++)
      if (loom_op_get(mnode(w, m)->op)->cls == LOOM_OPCLASS_REDUCE) reds[n_red++] = m;
  int32_t *root_comp = malloc(sizeof(int32_t) * (size_t)nuf);
  int32_t *ncls = calloc((size_t)nuf, sizeof(int32_t));
  int32_t *full = malloc(sizeof(int32_t) * (size_t)(w->n_lv > 0 ? w->n_lv : 1));
  loom_status st = LOOM_STATUS_OK;
  if (!reds || !root_comp || !ncls || !full) {
    st = loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int32_t i = 0; i < nuf; i++) root_comp[i] = -1;
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t k = 0; k < w->lv[l].n_loops; k++) {
      int32_t c = w->lv[l].loop[k];
      if (w->cls_comp[c] >= 0) continue;
      int32_t r = uf_find(cuf, c);
      if (root_comp[r] < 0) {
        root_comp[r] = w->n_comp;
        full[w->n_comp++] = -1;
      }
      w->cls_comp[c] = root_comp[r];
      ncls[root_comp[r]]++;
    }
  w->comp = calloc((size_t)(w->n_comp > 0 ? w->n_comp : 1), sizeof(lcomp));
  if (!w->comp) {
    st = loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    int32_t c0 = w->lv[l].n_loops > 0 ? w->cls_comp[w->lv[l].loop[0]] : -1;
    w->lv[l].comp = c0;
    if (c0 >= 0 && count_cls(&w->lv[l]) == ncls[c0] && full[c0] < 0) full[c0] = l;
  }
  for (int32_t ci = 0; ci < w->n_comp; ci++) {
    if (full[ci] < 0) {
      st = loom_lower_fail(w, "no value spans every loop of one of its pieces");
      goto done;
    }
    lcomp *c = &w->comp[ci];
    const lval *f = &w->lv[full[ci]];
    for (int32_t k = 0; k < f->n_loops; k++) {
      c->dcls[c->nd] = f->loop[k];
      c->dsize[c->nd] = w->ext[f->loop[k]];
      c->dmult[c->nd++] = 1;
    }
    /* R: what the row reductions reduce (a common trailing run), else a
     * trailing run of unreduced dims big enough to vectorise */
    int32_t last = c->dcls[c->nd - 1], j = c->nd, any_row = 0;
    uint32_t reduced_any = 0;
    for (int32_t q = 0; q < n_red; q++) {
      int32_t m = reds[q];
      int32_t rc[MAXD], nr = reduced_classes(w, m, rc);
      if (nr == 0 || w->cls_comp[rc[0]] != ci) continue;
      uint32_t rm = cls_mask(c, rc, nr);
      reduced_any |= rm;
      bool has_last = false;
      for (int32_t i = 0; i < nr; i++) has_last |= rc[i] == last;
      if (!has_last) continue;
      int32_t s = c->nd;
      while (s > 0 && (rm & (1u << (s - 1)))) s--;
      j = any_row ? LOOM_MAX(j, s) : s; /* the run every row reduction reduces */
      any_row = 1;
    }
    c->k = j;
    if (!any_row) {
      int32_t s = c->nd; /* R stays after the last reduced dim */
      while (s > 0 && !(reduced_any & (1u << (s - 1)))) s--;
      plain_suffix(c, s);
    }
    /* too few rows for the threads: move leading R dims to P while rows
     * stay long, then split a lone huge dim (a row reduction then also
     * reduces over P: row + column) */
    int64_t rows = 1, rlen = 1;
    for (int32_t i = 0; i < c->k; i++) rows *= c->dsize[i];
    for (int32_t i = c->k; i < c->nd; i++) rlen *= c->dsize[i];
    while (rows < 16 && c->nd - c->k >= 2 && c->dsize[c->k] > 0 &&
           rlen / c->dsize[c->k] >= 1024) {
      rows *= c->dsize[c->k];
      rlen /= c->dsize[c->k++];
    }
    if (rows < 16 && c->k < c->nd && c->dsize[c->k] >= 4096) split_dim(c, c->k);
    if (c->k > LOOM_MAX_RANK || c->nd - c->k > LOOM_MAX_RANK) {
      st = loom_lower_fail(w, "too many loops");
      goto done;
    }
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    lval *x = &w->lv[l];
    if (x->comp >= 0) x->space = cls_mask(&w->comp[x->comp], x->loop, x->n_loops);
  }
done:
  free(reds);
  free(root_comp);
  free(ncls);
  free(full);
  /* the dim union-find is done with; cls_comp lives in the cuf block */
  free(w->uf);
  w->uf = cuf;
  return st;
}

/* ---- 4. reductions and phases ------------------------------------------- */

/* True if member m's one-element result reaches, through one-element
 * values, a node iterating loops of another component. */
static bool feeds_other_piece(const lw *w, int32_t m) {
  int32_t comp = w->lv[m_in(w, m, 0)].comp;
  bool *tm = calloc((size_t)w->n_lv, sizeof(bool));
  if (!tm) return true;
  tm[m_out(w, m)] = true;
  bool other = false;
  for (int32_t m2 = m + 1; m2 < w->n_mem && !other; m2++) {
    const loom_node *nd = mnode(w, m2);
    bool hit = false;
    for (int32_t i = 0; i < nd->n_in; i++) hit |= tm[m_in(w, m2, i)];
    if (!hit) continue;
    int32_t lo = m_out(w, m2);
    if (w->lv[lo].comp < 0)
      tm[lo] = true;
    else
      other = w->lv[lo].comp != comp;
  }
  free(tm);
  return other;
}

static loom_status reductions(lw *w) {
  w->red = calloc((size_t)w->n_mem, 1);
  w->phase = calloc((size_t)w->n_mem, sizeof(int32_t));
  if (!w->red || !w->phase) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  /* a value that covers part of its loops is computed over all of them and
   * selected by index; it may not be stored or reduced (its other
   * elements are not its own) */
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    int32_t lo = m_out(w, m);
    bool red = loom_op_get(nd->op)->cls == LOOM_OPCLASS_REDUCE;
    if ((w->lv[lo].mat && (value_partial(w, lo) || value_partial(w, store_src(w, lo)))) ||
        (red && value_partial(w, m_in(w, m, 0))))
      return loom_lower_fail(w, "node %d %s a value that covers part of its loops", w->mem[m],
                             red ? "reduces" : "stores");
  }
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    if (loom_op_get(nd->op)->cls != LOOM_OPCLASS_REDUCE) continue;
    int32_t rc[MAXD], nr = reduced_classes(w, m, rc);
    if (nr == 0) {
      w->red[m] = RED_IDENT;
      continue;
    }
    const lcomp *c = &w->comp[w->cls_comp[rc[0]]];
    uint32_t rd = cls_mask(c, rc, nr), R = rmask(c);
    uint32_t rowp = rd & R, colp = rd & ~R;
    if (rowp && rowp != R) return loom_lower_fail(w, "node %d reduces part of a row", w->mem[m]);
    w->red[m] = rowp && colp ? RED_ROWCOL : rowp ? RED_ROW : RED_COL;
    /* a reduction to one element that feeds work over other loops (another
     * piece of the group) ends a phase, through a column step */
    if (w->red[m] == RED_ROW && w->lv[m_out(w, m)].comp < 0 && feeds_other_piece(w, m))
      w->red[m] = RED_ROWCOL;
  }
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    int32_t ph = 0;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t p = w->lv[m_in(w, m, i)].prod;
      if (p < 0) continue;
      if (w->mode == LOOM_FUSION_LOOP && w->red[p] >= RED_ROW)
        return loom_lower_fail(w, "loop mode: reduction node %d feeds node %d in the group",
                               w->mem[p], w->mem[m]);
      ph = LOOM_MAX(ph, w->phase[p] + (w->red[p] == RED_COL || w->red[p] == RED_ROWCOL));
    }
    w->phase[m] = ph;
    w->max_phase = LOOM_MAX(w->max_phase, ph);
  }
  return LOOM_STATUS_OK;
}

loom_status loom_lower_domains(lw *w) {
  loom_status st = collect(w);
  if (st == LOOM_STATUS_OK) st = classes(w);
  if (st == LOOM_STATUS_OK && w->off_clash) { /* one value at two offsets of a loop */
    free(w->uf);
    free(w->uoff);
    free(w->ext);
    w->uf = NULL;
    w->uoff = NULL;
    w->ext = NULL;
    w->off_clash = false;
    w->instanced = true;
    st = loom_lower_instances(w);
    if (st == LOOM_STATUS_OK) st = classes(w);
  }
  if (st == LOOM_STATUS_OK) st = domains(w);
  if (st == LOOM_STATUS_OK) st = reductions(w);
  return st;
}

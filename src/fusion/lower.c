/*
 * Lowering a fused group into one kernel of the kernel IR (group.h,
 * kernel/kernel.h). The steps:
 *
 *  1. Values. The group's member nodes and every value they touch; which
 *     are materialized (group.h's rule). Values produced outside the group
 *     are loaded; a layout op (reshape, transpose, slice, broadcast_to)
 *     over a loaded value is folded into the load's strides (a "view").
 *  2. Dim classes. Every dim of size != 1 of every value is unified with the
 *     dims it must iterate together with: aligned broadcast dims of
 *     element-wise ops, kept dims of reductions, permuted dims of
 *     transposes, reshapes that only add or drop size-1 dims. A class is
 *     one loop of the iteration domain.
 *  3. Domains. Classes that share values form a component (one or more
 *     parts); a component's domain is the dim order of a value that holds
 *     all its classes, split into P (rows) and R (inside a row): R is what
 *     the row reductions reduce, or for groups without them a trailing
 *     suffix big enough to vectorise. A lone huge dim is split in two so
 *     that rows exist for the threads.
 *  4. Reductions reduce R (row: ROW_REDUCE into a register), P (column:
 *     COL_REDUCE) or both (row, then column over the register). A column
 *     result consumed inside the group moves its consumers to a later
 *     phase, which loads it (a temp when it is not materialized).
 *  5. Parts. Per phase, the values to produce (materialized values and
 *     column results) are grouped by shared work into parts; each part's
 *     stages follow from levels (row reductions passed through): SCALAR
 *     stage L computes per-row values into registers, ROW stage L stores,
 *     reduces and fills scratch. A per-element value used at a later level
 *     is kept in scratch when recomputing it would cost more than reading
 *     it back (transcendentals), else recomputed.
 */
#include "fusion/group.h"

#include "ir/dtype.h"
#include "ops/op.h"
#include "rng/philox.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR LOOM_MAX_RANK
#define MAXD (2 * LOOM_MAX_RANK) /* domain dims of a component */

/* Reduction kinds relative to the domain. */
enum { RED_NONE = 0, RED_IDENT, RED_ROW, RED_COL, RED_ROWCOL };

typedef struct lval {
  int32_t v;      /* graph value id */
  int32_t prod;   /* producing member (local index), -1 if produced outside */
  bool mat;       /* materialized */
  bool view;      /* loadable from buffer src with base and strides */
  int32_t src;
  int64_t base;
  int64_t stride[MAXR];
  int32_t uf[MAXR]; /* class per dim (after step 2), -1 for size-1 dims */
  int32_t comp;     /* component, -1 for values without classes (tiny) */
  uint32_t space;   /* domain dims of its component it iterates */
  int32_t n_use;    /* uses by member nodes */
  int32_t alias;    /* a reshape stored without looping over its own dims:
                       the local value it reshapes (same flat order), or -1 */
} lval;

typedef struct lcomp {
  int32_t nd, k; /* domain dims, of which the first k are P */
  int32_t dcls[MAXD];
  int64_t dsize[MAXD], dmult[MAXD];
} lcomp;

typedef struct lw {
  loom_ctx *ctx;
  const loom_graph *g;
  const int32_t *gon;
  int32_t group;
  loom_fusion_mode mode;
  int32_t *mem, n_mem;  /* live member node ids, ascending */
  int32_t *all_mem, n_all; /* every member (the kernel's node list) */
  int32_t *loc;         /* graph value -> local value index, -1 */
  lval *lv;
  int32_t n_lv, cap_lv;
  int32_t *uf;          /* union-find over local dims (n_lv * MAXR) */
  int32_t *cls_comp;    /* class (uf root) -> component */
  lcomp *comp;
  int32_t n_comp;
  uint8_t *red;         /* per member: RED_* */
  int32_t *phase;       /* per member */
  int32_t max_phase;
  loom_status err; /* the first failure while emitting */
} lw;

static loom_status fail(lw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static loom_status fail(lw *w, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(w->ctx, LOOM_STATUS_UNSUPPORTED, "group %d: %s", w->group, msg);
}

static const loom_type *vt(const lw *w, int32_t l) { return loom_value_type(w->g, w->lv[l].v); }
static const loom_node *mnode(const lw *w, int32_t m) { return &w->g->nodes[w->mem[m]]; }

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

static void contiguous(const loom_type *t, int64_t *stride) {
  int64_t s = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= t->shape[d];
  }
}

/* Local values of the members in w->mem, with uses, producers and the
 * materialized flag. */
static loom_status collect_values(lw *w) {
  const loom_graph *g = w->g;
  for (int32_t l = 0; l < w->n_lv; l++) w->loc[w->lv[l].v] = -1;
  w->n_lv = 0;
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t l = add_value(w, nd->in[i]);
      if (l < 0) return LOOM_STATUS_OUT_OF_MEMORY;
      w->lv[l].n_use++;
    }
    for (int32_t o = 0; o < nd->n_out; o++) {
      int32_t l = add_value(w, nd->out[o]);
      if (l < 0) return LOOM_STATUS_OUT_OF_MEMORY;
      w->lv[l].prod = m;
    }
  }
  /* materialized: used outside the group, or a graph output */
  for (int32_t n = 0; n < g->n_nodes; n++) {
    if (w->gon[n] == w->group) continue;
    const loom_node *nd = &g->nodes[n];
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t l = w->loc[nd->in[i]];
      if (l >= 0 && w->lv[l].prod >= 0) w->lv[l].mat = true;
    }
  }
  for (int32_t o = 0; o < g->n_outputs; o++) {
    int32_t l = w->loc[g->outputs[o]];
    if (l >= 0) w->lv[l].mat = true;
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    lval *x = &w->lv[l];
    if (x->prod >= 0) continue;
    x->mat = true; /* produced outside: in memory */
    x->view = true;
    x->src = x->v;
    contiguous(vt(w, l), x->stride);
  }
  return LOOM_STATUS_OK;
}

static loom_status collect(lw *w) {
  const loom_graph *g = w->g;
  w->mem = malloc(sizeof(int32_t) * (size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * 2);
  w->loc = malloc(sizeof(int32_t) * (size_t)(g->n_values > 0 ? g->n_values : 1));
  if (!w->mem || !w->loc) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->all_mem = w->mem + (g->n_nodes > 0 ? g->n_nodes : 1);
  for (int32_t v = 0; v < g->n_values; v++) w->loc[v] = -1;
  for (int32_t n = 0; n < g->n_nodes; n++)
    if (w->gon[n] == w->group) w->all_mem[w->n_all++] = n;
  if (w->n_all == 0) return fail(w, "has no nodes");
  if (w->mode == LOOM_FUSION_NONE && w->n_all != 1)
    return fail(w, "mode none takes one node per kernel, not %d", w->n_all);
  for (int32_t m = 0; m < w->n_all; m++) {
    w->mem[m] = w->all_mem[m];
    const loom_node *nd = &g->nodes[w->mem[m]];
    if (!loom_fusion_node_fusible(g, w->mem[m]))
      return fail(w, "node %d (%s) cannot be fused", w->mem[m], loom_op_name(nd->op));
  }
  w->n_mem = w->n_all;
  LOOM_TRY(collect_values(w));
  /* members nothing materialized depends on are dead: leave them out */
  bool *live = calloc((size_t)w->n_mem, sizeof(bool));
  if (!live) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  int32_t n_live = 0;
  for (int32_t m = w->n_mem - 1; m >= 0; m--) {
    const loom_node *nd = mnode(w, m);
    live[m] = live[m] || w->lv[w->loc[nd->out[0]]].mat;
    if (!live[m]) continue;
    n_live++;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t p = w->lv[w->loc[nd->in[i]]].prod;
      if (p >= 0) live[p] = true;
    }
  }
  if (n_live < w->n_mem) {
    int32_t k = 0;
    for (int32_t m = 0; m < w->n_mem; m++)
      if (live[m]) w->mem[k++] = w->mem[m];
    w->n_mem = k;
    free(live);
    if (k == 0) return fail(w, "produces nothing");
    return collect_values(w);
  }
  free(live);
  return LOOM_STATUS_OK;
}

/* ---- 2. views and dim classes ------------------------------------------- */

static int32_t uf_find(int32_t *uf, int32_t a) {
  while (uf[a] != a) {
    uf[a] = uf[uf[a]];
    a = uf[a];
  }
  return a;
}

static void uf_union(int32_t *uf, int32_t a, int32_t b) {
  a = uf_find(uf, a);
  b = uf_find(uf, b);
  if (a != b) uf[a < b ? b : a] = a < b ? a : b;
}

/* Unifies the dims of a (rank ra) with b's, right-aligned, where sizes
 * match and exceed 1 (NumPy broadcasting). */
static void unify_aligned(lw *w, int32_t la, int32_t lb) {
  const loom_type *ta = vt(w, la), *tb = vt(w, lb);
  for (int32_t i = 1; i <= ta->rank && i <= tb->rank; i++) {
    int32_t da = ta->rank - i, db = tb->rank - i;
    if (ta->shape[da] != 1 && ta->shape[da] == tb->shape[db])
      uf_union(w->uf, la * MAXR + da, lb * MAXR + db);
  }
}

/* The reduced-axes mask of a reduce node over its input rank. */
static uint32_t reduce_mask(const loom_node *nd, int32_t rank) {
  const loom_ints *axes = &nd->attr[0].ints;
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
    for (int32_t d = 0; d < to->rank; d++) y->stride[d] = x->stride[nd->attr[0].ints.v[d]];
    break;
  case LOOM_OP_SLICE:
    for (int32_t d = 0; d < ti->rank; d++) {
      int64_t s = nd->attr[0].ints.v[d];
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
  w->uf = malloc(sizeof(int32_t) * (size_t)w->n_lv * MAXR);
  if (!w->uf) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  for (int32_t i = 0; i < w->n_lv * MAXR; i++) w->uf[i] = i;
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    const loom_op_def *d = loom_op_get(nd->op);
    int32_t lo = w->loc[nd->out[0]];
    int32_t li = nd->n_in > 0 ? w->loc[nd->in[0]] : -1;
    if (d->cls == LOOM_OPCLASS_LAYOUT) {
      if (w->lv[li].view && view_through(w, nd, li, lo)) continue;
      const loom_type *ti = vt(w, li), *to = vt(w, lo);
      if (nd->op == LOOM_OP_TRANSPOSE) {
        for (int32_t k = 0; k < to->rank; k++)
          if (to->shape[k] != 1)
            uf_union(w->uf, lo * MAXR + k, li * MAXR + (int32_t)nd->attr[0].ints.v[k]);
      } else if (nd->op == LOOM_OP_BROADCAST_TO) {
        unify_aligned(w, li, lo);
      } else if (nd->op == LOOM_OP_RESHAPE) {
        /* size-1 dims may come and go between computed values; a reshape
         * that merges or splits dims is stored in its input's loops (the
         * flat order is the same) if nothing in the group reads it */
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
        if (!same) return fail(w, "reshape (node %d) merges or splits dims read in the group", w->mem[m]);
        a = b = 0;
        for (;;) {
          while (a < ti->rank && ti->shape[a] == 1) a++;
          while (b < to->rank && to->shape[b] == 1) b++;
          if (a >= ti->rank || b >= to->rank) break;
          uf_union(w->uf, li * MAXR + a++, lo * MAXR + b++);
        }
      } else {
        return fail(w, "%s (node %d) of a computed value", d->name, w->mem[m]);
      }
    } else if (d->cls == LOOM_OPCLASS_REDUCE) {
      const loom_type *ti = vt(w, li);
      uint32_t mask = reduce_mask(nd, ti->rank);
      bool keep = nd->attr[1].i != 0;
      for (int32_t k = 0, od = 0; k < ti->rank; k++) {
        if (mask & (1u << k)) {
          od += keep;
          continue;
        }
        if (ti->shape[k] != 1) uf_union(w->uf, li * MAXR + k, lo * MAXR + od);
        od++;
      }
    } else if (d->cls == LOOM_OPCLASS_ELEMENTWISE || d->cls == LOOM_OPCLASS_RNG) {
      for (int32_t i = 0; i < nd->n_in; i++) unify_aligned(w, w->loc[nd->in[i]], lo);
    }
  }
  /* class ids: uf roots of dims != 1 (an empty dim is a loop of no
   * iterations); a value may not hold a class twice */
  for (int32_t l = 0; l < w->n_lv; l++) {
    const loom_type *t = vt(w, l);
    for (int32_t d = 0; d < MAXR; d++) {
      w->lv[l].uf[d] = d < t->rank && t->shape[d] != 1 && w->lv[l].alias < 0
                           ? uf_find(w->uf, l * MAXR + d)
                           : -1;
      for (int32_t e = 0; e < d && w->lv[l].uf[d] >= 0; e++)
        if (w->lv[l].uf[e] == w->lv[l].uf[d])
          return fail(w, "value %d iterates one loop twice (a diagonal)", w->lv[l].v);
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- 3. components and domains ------------------------------------------ */

static int32_t count_cls(const lval *x) {
  int32_t n = 0;
  for (int32_t d = 0; d < MAXR; d++) n += x->uf[d] >= 0;
  return n;
}

/* Domain dims a set of classes covers (a class may span two after a split). */
static uint32_t cls_mask(const lcomp *c, const int32_t *cls, int32_t n) {
  uint32_t m = 0;
  for (int32_t j = 0; j < n; j++)
    for (int32_t i = 0; i < c->nd; i++)
      if (cls[j] >= 0 && c->dcls[i] == cls[j]) m |= 1u << i;
  return m;
}

/* Classes a reduce node reduces (dims != 1), into out; returns the count. */
static int32_t reduced_classes(const lw *w, int32_t m, int32_t *out) {
  const loom_node *nd = mnode(w, m);
  int32_t li = w->loc[nd->in[0]];
  uint32_t mask = reduce_mask(nd, vt(w, li)->rank);
  int32_t n = 0;
  for (int32_t d = 0; d < MAXR; d++)
    if ((mask & (1u << d)) && w->lv[li].uf[d] >= 0) out[n++] = w->lv[li].uf[d];
  return n;
}

/* Splits domain dim j of c into (size/inner, inner), inner a divisor in
 * [512, 8192]; the outer half goes to P (k = j + 1). */
static void split_dim(lcomp *c, int32_t j) {
  int64_t n = c->dsize[j], inner = 0;
  for (int64_t t = 8192; t >= 512; t--)
    if (n % t == 0 && n / t >= 2) {
      inner = t;
      break;
    }
  if (!inner || c->nd >= MAXD) return;
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

static bool has_cls(const lval *x, int32_t c) {
  for (int32_t d = 0; d < MAXR; d++)
    if (x->uf[d] == c) return true;
  return false;
}

static int64_t cls_size(const lw *w, int32_t c) {
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t d = 0; d < MAXR; d++)
      if (w->lv[l].uf[d] == c) return vt(w, l)->shape[d];
  return 0;
}

/* Loops no op ties together may still run as one: when a piece of the
 * group has no value spanning all its loops (x[a, b] and z[c, b] sharing
 * only b), a loop c that never meets loop a in one value and has its size
 * is merged into it. Returns true if it merged anything. */
static bool merge_one(lw *w, int32_t *cuf) {
  int32_t nuf = w->n_lv * MAXR;
  int32_t *ncls = calloc((size_t)nuf * 3, sizeof(int32_t));
  if (!ncls) return false;
  int32_t *best = ncls + nuf, *seen = ncls + 2 * nuf;
  for (int32_t i = 0; i < nuf; i++) {
    cuf[i] = i;
    best[i] = -1;
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    int32_t first = -1;
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c < 0) continue;
      if (first < 0) first = c;
      else uf_union(cuf, first, c);
    }
  }
  /* per piece: its loop count and its fullest value */
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c < 0) continue;
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
      for (int32_t d = 0; d < MAXR && !merged; d++) {
        int32_t c = w->lv[l2].uf[d];
        if (c < 0 || uf_find(cuf, c) != r || has_cls(f, c)) continue;
        int64_t sz = cls_size(w, c);
        for (int32_t e = 0; e < MAXR && !merged; e++) {
          int32_t t = f->uf[e];
          if (t < 0 || cls_size(w, t) != sz) continue;
          bool meet = false;
          for (int32_t l3 = 0; l3 < w->n_lv && !meet; l3++)
            meet = has_cls(&w->lv[l3], c) && has_cls(&w->lv[l3], t);
          if (meet) continue;
          for (int32_t l3 = 0; l3 < w->n_lv; l3++)
            for (int32_t d3 = 0; d3 < MAXR; d3++)
              if (w->lv[l3].uf[d3] == c) w->lv[l3].uf[d3] = t;
          merged = true;
        }
      }
  }
  free(ncls);
  return merged;
}

static loom_status domains(lw *w) {
  int32_t nuf = w->n_lv * MAXR;
  int32_t *cuf = malloc(sizeof(int32_t) * (size_t)nuf * 2);
  if (!cuf) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->cls_comp = cuf + nuf;
  for (int32_t guard = 0; guard < 64 && merge_one(w, cuf); guard++) {
  }
  for (int32_t i = 0; i < nuf; i++) {
    cuf[i] = i;
    w->cls_comp[i] = -1;
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    int32_t first = -1;
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c < 0) continue;
      if (first < 0) first = c;
      else uf_union(cuf, first, c);
    }
  }
  /* components: one per class-union root, domain from its fullest value */
  w->comp = calloc((size_t)(w->n_lv > 0 ? w->n_lv : 1), sizeof(lcomp));
  if (!w->comp) {
    free(w->uf);
    w->uf = cuf;
    return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
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
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c < 0 || w->cls_comp[c] >= 0) continue;
      int32_t r = uf_find(cuf, c);
      if (root_comp[r] < 0) {
        root_comp[r] = w->n_comp;
        full[w->n_comp++] = -1;
      }
      w->cls_comp[c] = root_comp[r];
      ncls[root_comp[r]]++;
    }
  for (int32_t l = 0; l < w->n_lv; l++) {
    int32_t c0 = -1;
    for (int32_t d = 0; d < MAXR && c0 < 0; d++)
      if (w->lv[l].uf[d] >= 0) c0 = w->cls_comp[w->lv[l].uf[d]];
    w->lv[l].comp = c0;
    if (c0 >= 0 && count_cls(&w->lv[l]) == ncls[c0] && full[c0] < 0) full[c0] = l;
  }
  for (int32_t ci = 0; ci < w->n_comp; ci++) {
    if (full[ci] < 0) {
      st = fail(w, "no value spans every loop of one of its pieces");
      goto done;
    }
    lcomp *c = &w->comp[ci];
    const lval *f = &w->lv[full[ci]];
    const loom_type *t = vt(w, full[ci]);
    for (int32_t d = 0; d < t->rank; d++)
      if (f->uf[d] >= 0) {
        c->dcls[c->nd] = f->uf[d];
        c->dsize[c->nd] = t->shape[d];
        c->dmult[c->nd++] = 1;
      }
    /* R: what the row reductions reduce (a common trailing run), else a
     * trailing run of unreduced dims big enough to vectorise */
    int32_t last = c->dcls[c->nd - 1], j = c->nd, any_row = 0;
    uint32_t reduced_any = 0;
    for (int32_t q = 0; q < n_red; q++) {
      int32_t m = reds[q];
      int32_t rc[MAXR], nr = reduced_classes(w, m, rc);
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
    if (!any_row) {
      int32_t s = c->nd;
      while (s > 0 && !(reduced_any & (1u << (s - 1)))) s--;
      /* shortest suffix within [s, nd) of at least 512 elements */
      int64_t prod = 1;
      j = c->nd;
      while (j > s && prod < 512) prod *= c->dsize[--j];
    }
    c->k = j;
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
      st = fail(w, "too many loops");
      goto done;
    }
  }
  for (int32_t l = 0; l < w->n_lv; l++) {
    lval *x = &w->lv[l];
    if (x->comp >= 0) x->space = cls_mask(&w->comp[x->comp], x->uf, MAXR);
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

static uint32_t rmask(const lcomp *c) { return (uint32_t)(((UINT64_C(1) << c->nd) - 1) & ~((UINT64_C(1) << c->k) - 1)); }

/* True if member m's one-element result reaches, through one-element
 * values, a node iterating loops of another component. */
static bool feeds_other_piece(const lw *w, int32_t m) {
  int32_t comp = w->lv[w->loc[mnode(w, m)->in[0]]].comp;
  bool *tm = calloc((size_t)w->n_lv, sizeof(bool));
  if (!tm) return true;
  tm[w->loc[mnode(w, m)->out[0]]] = true;
  bool other = false;
  for (int32_t m2 = m + 1; m2 < w->n_mem && !other; m2++) {
    const loom_node *nd = mnode(w, m2);
    bool hit = false;
    for (int32_t i = 0; i < nd->n_in; i++) hit |= tm[w->loc[nd->in[i]]];
    if (!hit) continue;
    int32_t lo = w->loc[nd->out[0]];
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
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    if (loom_op_get(nd->op)->cls != LOOM_OPCLASS_REDUCE) continue;
    int32_t rc[MAXR], nr = reduced_classes(w, m, rc);
    if (nr == 0) {
      w->red[m] = RED_IDENT;
      continue;
    }
    const lcomp *c = &w->comp[w->cls_comp[rc[0]]];
    uint32_t rd = cls_mask(c, rc, nr), R = rmask(c);
    uint32_t rowp = rd & R, colp = rd & ~R;
    if (rowp && rowp != R) return fail(w, "node %d reduces part of a row", w->mem[m]);
    w->red[m] = rowp && colp ? RED_ROWCOL : rowp ? RED_ROW : RED_COL;
    /* a reduction to one element that feeds work over other loops (another
     * piece of the group) ends a phase, through a column step */
    if (w->red[m] == RED_ROW && w->lv[w->loc[nd->out[0]]].comp < 0 && feeds_other_piece(w, m))
      w->red[m] = RED_ROWCOL;
  }
  for (int32_t m = 0; m < w->n_mem; m++) {
    const loom_node *nd = mnode(w, m);
    int32_t ph = 0;
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t p = w->lv[w->loc[nd->in[i]]].prod;
      if (p < 0) continue;
      if (w->mode == LOOM_FUSION_LOOP && w->red[p] >= RED_ROW)
        return fail(w, "loop mode: reduction node %d feeds node %d in the group", w->mem[p],
                    w->mem[m]);
      ph = LOOM_MAX(ph, w->phase[p] + (w->red[p] == RED_COL || w->red[p] == RED_ROWCOL));
    }
    w->phase[m] = ph;
    w->max_phase = LOOM_MAX(w->max_phase, ph);
  }
  return LOOM_STATUS_OK;
}

/* ---- kernel building ------------------------------------------------------ */

typedef struct kbuild {
  loom_kernel *k;
  int32_t cap_args, cap_exprs;
} kbuild;

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

/* ---- 5. parts ------------------------------------------------------------- */

enum { AV_NONE = 0, AV_REG, AV_SCRATCH };

/* What one part needs while it is built. */
typedef struct lpart {
  int32_t phase, comp;
  uint32_t pmask, rmask_;    /* domain dims in P / R */
  int32_t pidx[MAXD], ridx[MAXD]; /* domain dim -> P / R coordinate */
  bool *in_clo;              /* per member: computed in this part */
  int32_t *level;            /* per local value */
  uint8_t *avail;            /* per local value: AV_* from an earlier stage */
  int32_t *avail_id;         /* its register or scratch row */
  bool *scratch;             /* per local value: kept in scratch */
  int32_t *rowreg;           /* per member (ROWCOL): register of the row part */
  int32_t *memo;             /* per local value: expr in the current stage */
  int32_t *memo_stamp;       /* memo[l] is valid iff memo_stamp[l] == stamp */
  int32_t stamp;
  const int32_t *cl;         /* members computed, ascending */
  int32_t n_cl;
  /* per local value, work arrays of build_part (zero between parts) */
  int32_t *cost, *set_l, *set_kind, *set_id;
  bool *later, *need_reg, *wants_reg;
  loom_kpart *kp;
} lpart;

/* True if value l is loaded (not computed) in phase ph. */
static bool loadable(const lw *w, int32_t l, int32_t ph) {
  const lval *x = &w->lv[l];
  if (x->view) return true;
  int32_t p = x->prod;
  return w->phase[p] < ph && (x->mat || w->red[p] == RED_COL || w->red[p] == RED_ROWCOL);
}

/* The value whose loops store value l: itself, or what an alias reshapes. */
static int32_t store_src(const lw *w, int32_t l) {
  return w->lv[l].alias >= 0 ? w->lv[l].alias : l;
}

static bool is_elem(const lpart *P, const lval *x) { return (x->space & P->rmask_) != 0; }

/* The map of a value with strides `stride` (per dim) and `base`. */
static loom_kmap value_map(const lw *w, const lpart *P, int32_t l, const int64_t *stride,
                           int64_t base) {
  loom_kmap m = {.base = base};
  const lval *x = &w->lv[l];
  if (P->comp < 0) return m;
  const lcomp *c = &w->comp[P->comp];
  for (int32_t d = 0; d < MAXR; d++) {
    if (x->uf[d] < 0) continue;
    for (int32_t i = 0; i < c->nd; i++) {
      if (c->dcls[i] != x->uf[d]) continue;
      if (P->pmask & (1u << i)) m.p[P->pidx[i]] += stride[d] * c->dmult[i];
      else if (P->rmask_ & (1u << i)) m.r[P->ridx[i]] += stride[d] * c->dmult[i];
    }
  }
  return m;
}

static int32_t emit(lw *w, kbuild *b, lpart *P, int32_t l);

static int32_t emit_const(lw *w, kbuild *b, loom_dtype dt, double c) {
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_CONST, .dtype = dt, .c = c});
}

static int32_t emit_load(lw *w, kbuild *b, lpart *P, int32_t l) {
  const lval *x = &w->lv[l];
  const loom_type *t = vt(w, l);
  if (x->view) {
    int32_t a = kb_arg(w, b, x->src, 0);
    if (a < 0) return -1;
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = t->dtype, .arg = a,
                                      .map = value_map(w, P, l, x->stride, x->base)});
  }
  int32_t a = kb_arg(w, b, x->v, x->mat ? 1 : 2);
  if (a < 0) return -1;
  int64_t st[MAXR];
  contiguous(t, st);
  return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_LOAD, .dtype = t->dtype, .arg = a,
                                    .map = value_map(w, P, l, st, 0)});
}

/* The expression computing local value l (output of member m). */
static int32_t emit_node(lw *w, kbuild *b, lpart *P, int32_t l, int32_t m) {
  const loom_node *nd = mnode(w, m);
  const loom_type *t = vt(w, l);
  const loom_op_def *d = loom_op_get(nd->op);
  switch (d->cls) {
  case LOOM_OPCLASS_SOURCE: {
    if (nd->op == LOOM_OP_CONSTANT) return emit_const(w, b, t->dtype, nd->attr[2].f);
    int64_t axis = nd->attr[1].i < 0 ? nd->attr[1].i + t->rank : nd->attr[1].i;
    int64_t st[MAXR] = {0};
    st[axis] = 1;
    return kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = t->dtype,
                                      .map = value_map(w, P, l, st, 0)});
  }
  case LOOM_OPCLASS_LAYOUT: return emit(w, b, P, w->loc[nd->in[0]]);
  case LOOM_OPCLASS_REDUCE: {
    int32_t x = emit(w, b, P, w->loc[nd->in[0]]);
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
    int32_t x = emit(w, b, P, w->loc[nd->in[0]]);
    int64_t st[MAXR];
    contiguous(t, st);
    int32_t idx = kb_expr(w, b, (loom_kexpr){.kind = LOOM_KX_INDEX, .dtype = LOOM_DTYPE_I64,
                                             .map = value_map(w, P, l, st, 0)});
    int32_t base = nd->n_in > 1 ? emit(w, b, P, w->loc[nd->in[1]]) : -1;
    double p = nd->attr[0].f;
    loom_kexpr keep = {.kind = LOOM_KX_KEEP, .dtype = LOOM_DTYPE_BOOL, .n_a = base >= 0 ? 2 : 1,
                       .a = {idx, base}, .seed = (uint64_t)nd->attr[1].i,
                       .offset = (uint64_t)nd->attr[2].i, .threshold = loom_dropout_threshold(p)};
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
    e.a[i] = emit(w, b, P, w->loc[nd->in[i]]);
    if (e.a[i] < 0) return e.a[i];
  }
  return kb_expr(w, b, e);
}

/* The expression for local value l in the current stage (memoised). */
static int32_t emit(lw *w, kbuild *b, lpart *P, int32_t l) {
  if (P->memo_stamp[l] == P->stamp) return P->memo[l];
  const lval *x = &w->lv[l];
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
    e = emit_node(w, b, P, l, x->prod);
  if (e >= 0) {
    P->memo[l] = e;
    P->memo_stamp[l] = P->stamp;
  }
  return e;
}

/* Marks in `in` (per member) the members phase ph computes for value l. */
/* Appends to list (from *n) the members phase ph computes for value l,
 * marking them in `in`; stack has room for every member. */
static void closure(const lw *w, int32_t l, int32_t ph, bool *in, int32_t *stack, int32_t *list,
                    int32_t *n) {
  int32_t sp = 0;
  if (loadable(w, l, ph)) return;
  int32_t m0 = w->lv[l].prod;
  if (in[m0]) return;
  in[m0] = true;
  list[(*n)++] = m0;
  stack[sp++] = m0;
  while (sp > 0) {
    const loom_node *nd = mnode(w, stack[--sp]);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = w->loc[nd->in[i]];
      if (loadable(w, li, ph)) continue;
      int32_t m = w->lv[li].prod;
      if (!in[m]) {
        in[m] = true;
        list[(*n)++] = m;
        stack[sp++] = m;
      }
    }
  }
}

typedef struct lroot {
  int32_t l, m;  /* value and its producer */
  bool col;      /* COL_REDUCE (else STORE) */
} lroot;

static int32_t op_weight(const lw *w, int32_t m) {
  const loom_node *nd = mnode(w, m);
  switch (nd->op) {
  case LOOM_OP_EXP: case LOOM_OP_LOG: case LOOM_OP_TANH: case LOOM_OP_ERF: case LOOM_OP_SIGMOID:
  case LOOM_OP_POW: case LOOM_OP_SIN: case LOOM_OP_COS: case LOOM_OP_DROPOUT: return 8;
  case LOOM_OP_DIV: case LOOM_OP_SQRT: case LOOM_OP_RSQRT: case LOOM_OP_RECIPROCAL: return 3;
  default: break;
  }
  loom_op_class c = loom_op_get(nd->op)->cls;
  return c == LOOM_OPCLASS_ELEMENTWISE ? 1 : 0;
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

/* Emits the stages of one part: roots[0..n) are its values to produce. */
static loom_status build_part(lw *w, kbuild *b, lpart *P, const lroot *roots, int32_t n) {
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
    int32_t lo = w->loc[nd->out[0]], lvl = 0, c = op_weight(w, m);
    bool elem = is_elem(P, &w->lv[lo]);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = w->loc[nd->in[i]];
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
    int32_t lo = w->loc[nd->out[0]];
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = w->loc[nd->in[i]];
      need_reg[li] = true;
      if (P->level[li] < P->level[lo]) later[li] = true;
    }
  }
  /* views and identities pass the need on to what they read */
  for (int32_t q = P->n_cl - 1; q >= 0; q--) {
    int32_t m = P->cl[q];
    if (op_weight(w, m) > 0 || w->red[m] >= RED_ROW) continue;
    const loom_node *nd = mnode(w, m);
    int32_t lo = w->loc[nd->out[0]];
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = w->loc[nd->in[i]];
      later[li] |= later[lo];
      need_reg[li] |= need_reg[lo];
    }
  }
  int32_t n_reg = 0, n_scr = 0;
  for (int32_t q = 0; q < P->n_cl; q++) {
    int32_t m = P->cl[q], l = w->loc[mnode(w, m)->out[0]];
    const lval *x = &w->lv[l];
    bool computed = !loadable(w, l, P->phase) && w->red[m] < RED_ROW && op_weight(w, m) > 0;
    P->scratch[l] = computed && later[l] && is_elem(P, x) && vt(w, l)->dtype == LOOM_DTYPE_F32 &&
                    cost[l] >= 4;
    /* per-row values: once per row into a register, if it saves work */
    wants_reg[l] = computed && !is_elem(P, x) && need_reg[l] && (P->level[l] >= 1 || cost[l] >= 2);
  }
  for (int32_t lvl = 0; lvl <= L; lvl++) {
    for (int pass = 0; pass < 2; pass++) { /* 0: SCALAR stage, 1: ROW stage */
      bool row = pass == 1;
      P->stamp++; /* a new stage: expressions are emitted afresh */
      /* registers and scratch rows this stage fills become visible after it */
      int32_t n_set = 0;
      for (int32_t q = 0; q < P->n_cl; q++) {
        int32_t m = P->cl[q];
        const loom_node *nd = mnode(w, m);
        int32_t lo = w->loc[nd->out[0]];
        int32_t lin = nd->n_in > 0 ? w->loc[nd->in[0]] : -1;
        if (row && (w->red[m] == RED_ROW || w->red[m] == RED_ROWCOL) && P->level[lin] == lvl) {
          int32_t e = emit(w, b, P, lin);
          TRYE(e);
          loom_op comb = nd->op == LOOM_OP_REDUCE_SUM   ? LOOM_OP_ADD
                         : nd->op == LOOM_OP_REDUCE_MAX ? LOOM_OP_MAXIMUM
                                                        : LOOM_OP_MINIMUM;
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
        int32_t lin = w->loc[nd->in[0]], e;
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
        loom_op comb = nd->op == LOOM_OP_REDUCE_SUM   ? LOOM_OP_ADD
                       : nd->op == LOOM_OP_REDUCE_MAX ? LOOM_OP_MAXIMUM
                                                      : LOOM_OP_MINIMUM;
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

/* True if root r can be written from every row of a part with domain dims
 * pm (P) and rm (R): no row or element may write another's result. */
static bool root_fits(const lw *w, const lroot *r, uint32_t pm, uint32_t rm) {
  const loom_node *nd = mnode(w, r->m);
  uint32_t sp = r->col ? w->lv[w->loc[nd->in[0]]].space : w->lv[store_src(w, r->l)].space;
  if ((sp & pm) != pm) return false;
  return (sp & rm) == 0 || (sp & rm) == rm;
}

/* The component and the domain dims a set of roots (label lab) touches. */
static void part_domain(const lw *w, const lroot *roots, int32_t nr, const int32_t *label,
                        int32_t lab, const int32_t *cl, int32_t n_cl, int32_t *comp,
                        uint32_t *mask) {
  *comp = -1;
  *mask = 0;
  for (int32_t i = 0; i < nr; i++) {
    if (label[i] != lab) continue;
    const loom_node *rn = mnode(w, roots[i].m);
    const lval *vals[2] = {&w->lv[store_src(w, roots[i].l)],
                           roots[i].col ? &w->lv[w->loc[rn->in[0]]] : NULL};
    for (int32_t j = 0; j < 2; j++)
      if (vals[j] && vals[j]->comp >= 0) {
        *comp = vals[j]->comp;
        *mask |= vals[j]->space;
      }
  }
  for (int32_t q = 0; q < n_cl; q++) {
    const loom_node *nd = mnode(w, cl[q]);
    for (int32_t i = -1; i < nd->n_in; i++) {
      const lval *x = &w->lv[w->loc[i < 0 ? nd->out[0] : nd->in[i]]];
      if (x->comp < 0) continue;
      *comp = x->comp;
      *mask |= x->space;
    }
  }
}

static loom_status new_part(lw *w, kbuild *b, int32_t *cap_parts, lpart *P, int32_t comp,
                            uint32_t mask, int32_t phase) {
  loom_kernel *k = b->k;
  if (!loom_grow(w->ctx, (void **)&k->parts, cap_parts, k->n_parts + 1, sizeof(loom_kpart)))
    return LOOM_STATUS_OUT_OF_MEMORY;
  loom_kpart *kp = &k->parts[k->n_parts++];
  memset(kp, 0, sizeof *kp);
  kp->phase = phase;
  P->kp = kp;
  P->phase = phase;
  P->comp = comp;
  P->pmask = P->rmask_ = 0;
  if (comp < 0) return LOOM_STATUS_OK;
  const lcomp *c = &w->comp[comp];
  for (int32_t i = 0; i < c->nd; i++) {
    if (!(mask & (1u << i))) continue;
    if (i < c->k) {
      P->pmask |= 1u << i;
      P->pidx[i] = kp->p_rank;
      kp->p_shape[kp->p_rank++] = c->dsize[i];
    } else {
      P->rmask_ |= 1u << i;
      P->ridx[i] = kp->r_rank;
      kp->r_shape[kp->r_rank++] = c->dsize[i];
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- canonical form: merge loops that every map walks contiguously ---- */

/* Merges dim d+1 into dim d of one side (P or R) where every map allows:
 * stride[d] == stride[d+1] * shape[d+1]. Row-major order, hence rows,
 * tiles and the lanes of row reductions, stay the same. */
static void merge_side(int32_t *rank, int64_t *shape, loom_kmap **maps, int32_t n, bool r_side) {
  for (int32_t d = 0; d + 1 < *rank;) {
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) {
      const int64_t *st = r_side ? maps[i]->r : maps[i]->p;
      ok = st[d] == st[d + 1] * shape[d + 1];
    }
    if (!ok) {
      d++;
      continue;
    }
    shape[d] *= shape[d + 1];
    for (int32_t i = 0; i < n; i++) {
      int64_t *st = r_side ? maps[i]->r : maps[i]->p;
      st[d] = st[d + 1];
      for (int32_t e = d + 1; e + 1 < LOOM_MAX_RANK; e++) st[e] = st[e + 1];
      st[LOOM_MAX_RANK - 1] = 0;
    }
    for (int32_t e = d + 1; e + 1 < *rank; e++) shape[e] = shape[e + 1];
    (*rank)--;
  }
}

/* Puts part p (whose expressions are those from first_expr on: parts emit
 * their own) in canonical form. Without memory for the map list, the part
 * stays as it is (still correct). */
static void canonicalize_part(loom_kernel *k, loom_kpart *p, int32_t first_expr) {
  int32_t cap = k->n_exprs - first_expr + 1;
  for (int32_t s = 0; s < p->n_stages; s++) cap += p->stages[s].n_out;
  loom_kmap **maps = malloc(sizeof(loom_kmap *) * (size_t)cap);
  if (!maps) return;
  int32_t n = 0;
  for (int32_t s = 0; s < p->n_stages; s++)
    for (int32_t o = 0; o < p->stages[s].n_out; o++) {
      loom_kout *ko = &p->stages[s].out[o];
      if (ko->dst == LOOM_KDST_STORE || ko->dst == LOOM_KDST_COL_REDUCE) maps[n++] = &ko->map;
    }
  for (int32_t i = first_expr; i < k->n_exprs; i++) {
    loom_kexpr *e = &k->exprs[i];
    if (e->kind == LOOM_KX_LOAD || e->kind == LOOM_KX_INDEX) maps[n++] = &e->map;
  }
  merge_side(&p->p_rank, p->p_shape, maps, n, false);
  merge_side(&p->r_rank, p->r_shape, maps, n, true);
  free(maps);
}

/* Schedules: the largest part takes sched; the others keep its tile size
 * in elements (rows_per_tile scaled by row length), within their rows. */
static void schedule(loom_kernel *k, const loom_kschedule *sched) {
  int32_t big = 0;
  int64_t big_n = -1;
  for (int32_t i = 0; i < k->n_parts; i++) {
    int64_t n = loom_kpart_rows(&k->parts[i]) * loom_kpart_row_len(&k->parts[i]);
    if (n > big_n) big_n = n, big = i;
  }
  const loom_kpart *bp = &k->parts[big];
  int64_t blen = LOOM_MAX(loom_kpart_row_len(bp), 1), brows = loom_kpart_rows(bp);
  int64_t rpt = sched && sched->rows_per_tile > 0 ? sched->rows_per_tile
                                                  : (16384 + blen - 1) / blen;
  int32_t vw = sched ? sched->vector_width : (blen >= 8 ? 8 : 1);
  if (!(vw == 1 || vw == 2 || vw == 4 || vw == 8 || vw == 16)) vw = 8;
  int64_t tile_elems = LOOM_MIN(rpt, LOOM_MAX(brows, 1)) * blen;
  for (int32_t i = 0; i < k->n_parts; i++) {
    loom_kpart *p = &k->parts[i];
    int64_t len = LOOM_MAX(loom_kpart_row_len(p), 1), rows = LOOM_MAX(loom_kpart_rows(p), 1);
    int64_t r = i == big ? rpt : (tile_elems + len - 1) / len;
    p->sched.rows_per_tile = LOOM_MAX(1, LOOM_MIN(r, rows));
    p->sched.vector_width = vw;
  }
}

/* order[0..n) := 0..n-1 sorted by (label, index). */
static void sort_by_label(int32_t *order, const int32_t *label, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    int32_t x = i, j = i;
    while (j > 0 && (label[order[j - 1]] > label[x])) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* The union of the closures of roots idx[0..n) as an ascending member list
 * (marked in uclo, which the caller clears by the list). */
static int32_t union_closure(bool *uclo, const int32_t *clo_off, const int32_t *clo_m,
                             const int32_t *idx, int32_t n, int32_t *out) {
  int32_t k = 0;
  for (int32_t q = 0; q < n; q++)
    for (int32_t t = clo_off[idx[q]]; t < clo_off[idx[q] + 1]; t++)
      if (!uclo[clo_m[t]]) {
        uclo[clo_m[t]] = true;
        out[k++] = clo_m[t];
      }
  qsort(out, (size_t)k, sizeof(int32_t), cmp_i32);
  return k;
}

static loom_status parts(lw *w, kbuild *b) {
  int32_t nm = w->n_mem, nl = w->n_lv, cap_parts = 0, cap_clo = 0, n_clo = 0;
  loom_status st = LOOM_STATUS_OK;
  lroot *roots = malloc(sizeof(lroot) * (size_t)nm);
  lroot *mine = malloc(sizeof(lroot) * (size_t)nm);
  int32_t *ibuf = malloc(sizeof(int32_t) * ((size_t)nm * 6 + 1));
  bool *mark = calloc((size_t)nm, sizeof(bool)); /* all false between uses */
  int32_t *clo_m = NULL;                          /* closures, root after root */
  lpart P = {0};
  P.level = calloc((size_t)nl * 10, sizeof(int32_t));
  P.avail = calloc((size_t)nl * 5, 1);
  if (!roots || !mine || !ibuf || !mark || !P.level || !P.avail) {
    st = loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  int32_t *label = ibuf, *rcomp = ibuf + nm, *order = ibuf + 2 * nm, *stack = ibuf + 3 * nm;
  int32_t *ulist = ibuf + 4 * nm, *clo_off = ibuf + 5 * nm; /* nm + 1 entries */
  P.avail_id = P.level + nl;
  P.memo = P.level + 2 * nl;
  P.memo_stamp = P.level + 3 * nl;
  P.cost = P.level + 4 * nl;
  P.set_l = P.level + 5 * nl;
  P.set_kind = P.level + 6 * nl;
  P.set_id = P.level + 7 * nl;
  P.rowreg = P.level + 8 * nl; /* per member: nm <= nl */
  P.scratch = (bool *)P.avail + nl;
  P.later = (bool *)P.avail + 2 * nl;
  P.need_reg = (bool *)P.avail + 3 * nl;
  P.wants_reg = (bool *)P.avail + 4 * nl;
  for (int32_t l = 0; l < nl; l++) P.memo_stamp[l] = -1;
  for (int32_t m = 0; m < nm; m++) P.rowreg[m] = -1;
  P.in_clo = mark;
  for (int32_t ph = 0; ph <= w->max_phase && st == LOOM_STATUS_OK; ph++) {
    int32_t nr = 0;
    for (int32_t m = 0; m < nm; m++) {
      if (w->phase[m] != ph) continue;
      int32_t l = w->loc[mnode(w, m)->out[0]];
      bool col = w->red[m] == RED_COL || w->red[m] == RED_ROWCOL;
      if (w->lv[l].mat || (col && w->lv[l].n_use > 0))
        roots[nr++] = (lroot){.l = l, .m = m, .col = col};
    }
    /* each root's closure, as a member list */
    n_clo = 0;
    for (int32_t i = 0; i < nr; i++) {
      clo_off[i] = n_clo;
      if (!loom_grow(w->ctx, (void **)&clo_m, &cap_clo, n_clo + nm, sizeof(int32_t))) {
        st = LOOM_STATUS_OUT_OF_MEMORY;
        goto done;
      }
      if (roots[i].col) {
        mark[roots[i].m] = true;
        clo_m[n_clo++] = roots[i].m;
        closure(w, w->loc[mnode(w, roots[i].m)->in[0]], ph, mark, stack, clo_m, &n_clo);
      } else {
        closure(w, roots[i].l, ph, mark, stack, clo_m, &n_clo);
      }
      for (int32_t t = clo_off[i]; t < n_clo; t++) mark[clo_m[t]] = false;
      label[i] = i;
    }
    clo_off[nr] = n_clo;
    /* roots iterating the same loops share a part (a row is read once for
     * all of them); roots over no loop at all share one too */
    for (int32_t i = 0; i < nr; i++) {
      uint32_t mask;
      part_domain(w, roots, nr, label, label[i], clo_m + clo_off[i], clo_off[i + 1] - clo_off[i],
                  &rcomp[i], &mask);
    }
    for (int32_t i = 0; i < nr; i++)
      for (int32_t j = 0; j < i; j++)
        if (rcomp[j] == rcomp[i]) {
          label[i] = label[j];
          break;
        }
    /* a root that cannot be written from every row of its part's domain
     * gets a part of its own */
    int32_t next_label = nr;
    for (bool changed = true; changed && st == LOOM_STATUS_OK;) {
      changed = false;
      sort_by_label(order, label, nr);
      for (int32_t a = 0, z; a < nr && !changed; a = z) {
        int32_t lab = label[order[a]], comp;
        uint32_t mask;
        for (z = a; z < nr && label[order[z]] == lab; z++) {
        }
        int32_t nu = union_closure(mark, clo_off, clo_m, order + a, z - a, ulist);
        for (int32_t q = 0; q < nu; q++) mark[ulist[q]] = false;
        part_domain(w, roots, nr, label, lab, ulist, nu, &comp, &mask);
        if (comp < 0) continue;
        const lcomp *c = &w->comp[comp];
        uint32_t pm = mask & ((1u << c->k) - 1), rm = mask & rmask(c);
        for (int32_t q = a; q < z && !changed; q++) {
          const lroot *rt = &roots[order[q]];
          if (root_fits(w, rt, pm, rm)) continue;
          if (z - a == 1) {
            st = fail(w, "value %d cannot be written once per element of its loops",
                      w->lv[rt->l].v);
            break;
          }
          label[order[q]] = next_label++;
          changed = true;
        }
      }
    }
    /* build the parts: roots grouped by label (first roots first) */
    sort_by_label(order, label, nr);
    for (int32_t a = 0, z; a < nr && st == LOOM_STATUS_OK; a = z) {
      int32_t lab = label[order[a]], comp;
      uint32_t mask;
      for (z = a; z < nr && label[order[z]] == lab; z++) {
      }
      int32_t nu = union_closure(mark, clo_off, clo_m, order + a, z - a, ulist);
      part_domain(w, roots, nr, label, lab, ulist, nu, &comp, &mask);
      st = new_part(w, b, &cap_parts, &P, comp, mask, ph);
      if (st == LOOM_STATUS_OK) {
        P.cl = ulist;
        P.n_cl = nu;
        for (int32_t q = a; q < z; q++) mine[q - a] = roots[order[q]];
        int32_t first_expr = b->k->n_exprs;
        st = build_part(w, b, &P, mine, z - a);
        if (st == LOOM_STATUS_OK) canonicalize_part(b->k, P.kp, first_expr);
      }
      /* back to zero for the next part */
      for (int32_t q = 0; q < nu; q++) {
        int32_t m = ulist[q];
        const loom_node *nd = mnode(w, m);
        mark[m] = false;
        P.rowreg[m] = -1;
        for (int32_t i = -1; i < nd->n_in; i++) {
          int32_t l = w->loc[i < 0 ? nd->out[0] : nd->in[i]];
          P.level[l] = P.cost[l] = 0;
          P.avail[l] = 0;
          P.scratch[l] = P.later[l] = P.need_reg[l] = P.wants_reg[l] = false;
        }
      }
    }
  }
  if (st == LOOM_STATUS_OK && b->k->n_parts == 0) st = fail(w, "produces nothing");
done:
  free(roots);
  free(mine);
  free(ibuf);
  free(mark);
  free(clo_m);
  free(P.level);
  free(P.avail);
  return st;
}

static void lw_free(lw *w) {
  free(w->mem);
  free(w->loc);
  free(w->lv);
  free(w->uf);
  free(w->comp);
  free(w->red);
  free(w->phase);
}

loom_status loom_fusion_group_lower(loom_ctx *ctx, const loom_graph *g,
                                    const int32_t *group_of_node, int32_t group,
                                    loom_fusion_mode mode, const loom_kschedule *sched,
                                    const char *name, loom_kernel *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no kernel to lower into");
  memset(out, 0, sizeof *out);
  if (!g || !group_of_node)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "lowering needs a graph and a grouping");
  lw w = {.ctx = ctx, .g = g, .gon = group_of_node, .group = group, .mode = mode};
  kbuild b = {.k = out};
  loom_status st = collect(&w);
  if (st == LOOM_STATUS_OK) st = classes(&w);
  if (st == LOOM_STATUS_OK) st = domains(&w);
  if (st == LOOM_STATUS_OK) st = reductions(&w);
  if (st == LOOM_STATUS_OK) st = parts(&w, &b);
  if (st == LOOM_STATUS_OK) {
    snprintf(out->name, sizeof out->name, "%s", name && name[0] ? name : "loom_kernel");
    schedule(out, sched);
  }
  if (st == LOOM_STATUS_OK) {
    out->nodes = malloc(sizeof(int32_t) * (size_t)w.n_all);
    if (!out->nodes) {
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    } else {
      memcpy(out->nodes, w.all_mem, sizeof(int32_t) * (size_t)w.n_all);
      out->n_nodes = w.n_all;
      st = loom_kernel_verify(ctx, out);
    }
  }
  lw_free(&w);
  if (st != LOOM_STATUS_OK) loom_kernel_clear(out);
  return st;
}

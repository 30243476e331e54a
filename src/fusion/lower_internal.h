/*
 * Private to the lowering of fused groups (lower.c, lower_domain.c,
 * lower_emit.c): the lowering state and the steps' entry points. The
 * steps themselves are described at the top of lower.c.
 */
#ifndef LOOM_FUSION_LOWER_INTERNAL_H
#define LOOM_FUSION_LOWER_INTERNAL_H

#include "fusion/cost.h"
#include "fusion/group.h"

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
  int32_t uf[MAXR]; /* class per dim (after step 2) when the dim is one loop;
                       -1 for size-1 dims and for dims split over several */
  int32_t n_loops;  /* the loops it iterates, dims in order, outer first: */
  int32_t loop[MAXD];       /* class of each */
  int8_t loop_dim[MAXD];    /* the dim it indexes */
  int64_t loop_mult[MAXD];  /* its weight in that dim's index (a reshape of a
                               computed value splits a dim over several loops:
                               lower_split.c) */
  int32_t comp;     /* component, -1 for values without classes (tiny) */
  uint32_t space;   /* domain dims of its component it iterates */
  int32_t n_use;    /* uses by member nodes */
  int32_t alias;    /* a reshape stored without looping over its own dims:
                       the local value it reshapes (same flat order), or -1 */
  int64_t off[MAXR]; /* where the dim starts in its class's loop: element i
                        of the dim is loop index off + i (a piece of a concat,
                        a slice, the inside of a pad); 0 for most values */
} lval;

typedef struct lcomp {
  int32_t nd, k; /* domain dims, of which the first k are P */
  int32_t dcls[MAXD];
  int64_t dsize[MAXD], dmult[MAXD];
} lcomp;

/* The per-graph index of group.h. */
struct loom_fusion_index {
  const loom_graph *g;
  int32_t *cons_off, *cons; /* consumer nodes of each value (CSR, one per use) */
  bool *is_output;          /* per value: a graph output */
  int32_t *loc;             /* per value: scratch for lw.loc, all -1 between calls */
  const loom_fusion_dups *dups; /* duplicated producers, or NULL */
};

typedef struct lw {
  loom_ctx *ctx;
  const loom_graph *g;
  loom_fusion_index *ix;
  const int32_t *gon;
  int32_t group;
  loom_fusion_mode mode;
  const int32_t *given;  /* the caller's member list (any order) */
  int32_t n_given;
  int32_t *mem, n_mem;  /* live member node ids, ascending (a node twice when
                           lower_instance.c made instances of it) */
  int32_t *io_off, *io; /* per member m: io[io_off[m]] its output's local
                           value, io[io_off[m] + 1 + i] its input i's */
  int32_t *all_mem, n_all; /* every member (the kernel's node list) */
  int32_t *loc;         /* graph value -> local value index, -1 (ix->loc: set
                           back to -1 by lw_free) */
  lval *lv;
  int32_t n_lv, cap_lv;
  int32_t *uf;          /* union-find over local dims (n_lv * MAXR) */
  int64_t *uoff;        /* per dim while classes are built: its start minus its
                           parent's (a weighted union-find) */
  int64_t *ext;         /* per class (uf root): the loop's extent */
  int32_t n_cls;        /* class ids: dims' uf slots, then the loops that
                           split dims add (lower_split.c) */
  bool off_clash;       /* two layout ops placed one dim at two starts */
  bool instanced;       /* values have an instance per offset (lower_instance.c) */
  int32_t *cls_comp;    /* class (uf root) -> component */
  lcomp *comp;
  int32_t n_comp;
  uint8_t *red;         /* per member: RED_* */
  int32_t *phase;       /* per member */
  int32_t max_phase;
  loom_status err; /* the first failure while emitting */
} lw;

/* A plain union-find over ids (path halving; the smaller id is the root). */
static inline int32_t uf_find(int32_t *uf, int32_t a) {
  while (uf[a] != a) {
    uf[a] = uf[uf[a]];
    a = uf[a];
  }
  return a;
}

static inline void uf_union(int32_t *uf, int32_t a, int32_t b) {
  a = uf_find(uf, a);
  b = uf_find(uf, b);
  if (a != b) uf[a < b ? b : a] = a < b ? a : b;
}

/* Fails lowering with UNSUPPORTED: "group G: <message>" (lower.c). */
loom_status loom_lower_fail(lw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline const loom_type *vt(const lw *w, int32_t l) {
  return loom_value_type(w->g, w->lv[l].v);
}
static inline const loom_node *mnode(const lw *w, int32_t m) { return &w->g->nodes[w->mem[m]]; }
/* The local values member m writes and reads (its instance's, when a
 * value is read at several offsets of one loop: lower_instance.c). */
static inline int32_t m_out(const lw *w, int32_t m) { return w->io[w->io_off[m]]; }
static inline int32_t m_in(const lw *w, int32_t m, int32_t i) { return w->io[w->io_off[m] + 1 + i]; }

/* Row-major strides of a contiguous value of type t. */
static inline void contiguous(const loom_type *t, int64_t *stride) {
  int64_t s = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= t->shape[d];
  }
}

/* True if dim d of value l covers only part of its class's loop. */
static inline bool dim_partial(const lw *w, int32_t l, int32_t d) {
  const lval *x = &w->lv[l];
  return x->uf[d] >= 0 && (x->off[d] != 0 || vt(w, l)->shape[d] != w->ext[x->uf[d]]);
}

/* True if value l covers only part of a loop it iterates. */
static inline bool value_partial(const lw *w, int32_t l) {
  for (int32_t d = 0; d < MAXR; d++)
    if (dim_partial(w, l, d)) return true;
  return false;
}

/* The R dims of a component's domain, as a mask. */
static inline uint32_t rmask(const lcomp *c) {
  return (uint32_t)(((UINT64_C(1) << c->nd) - 1) & ~((UINT64_C(1) << c->k) - 1));
}

/* Step 2's end (lower_split.c): each value's loops. Reshapes of computed
 * values that merge or split dims (members splits[0..n)) refine the
 * classes of their dims into common factors, one loop each. */
loom_status loom_lower_loops(lw *w, const int32_t *splits, int32_t n);

/* The reduced-axes mask of a reduce node over its input rank. */
uint32_t loom_lower_reduce_mask(const loom_node *nd, int32_t rank);

/* Step 1b (lower_instance.c): an instance of every value per offset it is
 * needed at, after step 2 found one loop at two offsets. */
loom_status loom_lower_instances(lw *w);

/* Steps 1-4 (lower_domain.c): members and values, dim classes, domains,
 * reductions and phases. */
loom_status loom_lower_domains(lw *w);

/* ---- kernel building (lower_emit.c) -------------------------------------- */

typedef struct kbuild {
  loom_kernel *k;
  int32_t cap_args, cap_exprs;
} kbuild;

enum { AV_NONE = 0, AV_REG, AV_SCRATCH };

/* Segments of loops (lower.c, "segments"): per cut class its points, 0
 * and the loop's end included. */
#define MAX_SEGMENTS 8
typedef struct segs {
  int32_t n; /* cut classes */
  int32_t cls[MAXD];
  int32_t n_pts[MAXD];
  int64_t pts[MAXD][MAX_SEGMENTS + 1];
} segs;

static inline int32_t segs_count(const segs *sg) {
  int32_t n = 1;
  for (int32_t s = 0; s < sg->n; s++) n *= sg->n_pts[s] - 1;
  return n;
}

/* Sets the ranges of sg's classes to segment `which` (mixed radix). */
static inline void seg_pick(const segs *sg, int32_t which, int64_t *lo, int64_t *hi) {
  for (int32_t s = 0; s < sg->n; s++) {
    int32_t n = sg->n_pts[s] - 1, k = which % n;
    which /= n;
    lo[sg->cls[s]] = sg->pts[s][k];
    hi[sg->cls[s]] = sg->pts[s][k + 1];
  }
}

/* Sets sg's classes back to their whole loops. */
static inline void seg_whole(const lw *w, const segs *sg, int64_t *lo, int64_t *hi) {
  for (int32_t s = 0; s < sg->n; s++) lo[sg->cls[s]] = 0, hi[sg->cls[s]] = w->ext[sg->cls[s]];
}

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
  int32_t *emit_stack;       /* per local value: emit's work stack (a DAG path) */
  const int32_t *cl;         /* members computed, ascending */
  int32_t n_cl;
  /* the range of each class's loop this part runs, [seg_lo, seg_hi) (NULL:
   * whole loops); a part per segment between the places where pieces of
   * a concat or pad begin and end (lower.c, "segments") */
  int64_t *seg_lo, *seg_hi;
  const struct segs *rsg;    /* segments of R loops: the stages run once per
                                segment (NULL: once) */
  /* per local value, work arrays of build_part (zero between parts) */
  int32_t *cost, *set_l, *set_kind, *set_id;
  bool *later, *need_reg, *wants_reg;
  loom_kpart *kp;
} lpart;

/* True if value l is loaded (not computed) in phase ph. */
static inline bool loadable(const lw *w, int32_t l, int32_t ph) {
  const lval *x = &w->lv[l];
  if (x->view) return true;
  int32_t p = x->prod;
  return w->phase[p] < ph && (x->mat || w->red[p] == RED_COL || w->red[p] == RED_ROWCOL);
}

/* The value whose loops store value l: itself, or what an alias reshapes. */
static inline int32_t store_src(const lw *w, int32_t l) {
  return w->lv[l].alias >= 0 ? w->lv[l].alias : l;
}

typedef struct lroot {
  int32_t l, m;  /* value and its producer */
  bool col;      /* COL_REDUCE (else STORE) */
} lroot;

/* The loop range [*lo, *hi) part P runs along class c. */
static inline void seg_range(const lw *w, const lpart *P, int32_t c, int64_t *lo, int64_t *hi) {
  *lo = P->seg_lo ? P->seg_lo[c] : 0;
  *hi = P->seg_hi ? P->seg_hi[c] : w->ext[c];
}

/* True if value l has no element in the loop range part P runs. */
static inline bool outside_part(const lw *w, const lpart *P, int32_t l) {
  if (!P->seg_lo) return false;
  const lval *x = &w->lv[l];
  for (int32_t d = 0; d < MAXR; d++) {
    if (x->uf[d] < 0) continue;
    int64_t lo, hi;
    seg_range(w, P, x->uf[d], &lo, &hi);
    if (x->off[d] >= hi || x->off[d] + vt(w, l)->shape[d] <= lo) return true;
  }
  return false;
}

/* What member m costs per element (loom_cost_op_weight). */
static inline int32_t loom_lower_op_weight(const lw *w, int32_t m) {
  return loom_cost_op_weight(mnode(w, m)->op);
}

/* Emits the stages of one part: roots[0..n) are its values to produce. */
loom_status loom_lower_build_part(lw *w, kbuild *b, lpart *P, const lroot *roots, int32_t n);

#endif

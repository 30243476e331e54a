/*
 * Lowering, the end of step 2: the loops each value iterates.
 *
 * Most dims are one loop each: their class. A reshape of a computed value
 * that merges or splits dims (GroupNorm's [N, G, C/G*H*W] -> [N, C, H, W]
 * between the statistics and the per-channel scale) cannot share loops
 * dim for dim, and the kernel IR's maps are affine in the loop indices:
 * no div/mod reaches across. So the classes on both sides are refined
 * into their common factors: the reshape's input and output both iterate
 * [N, G, C/G, H, W], the input's last dim as the loops (C/G, H, W) with
 * weights (H*W, W, 1), the output's C as (G, C/G) with weights (C/G, 1).
 * A dim's index is a weighted sum of loop indices, which a load's or a
 * store's map already is, so the rest of lowering sees loops as before.
 *
 * A refinement belongs to the class, so every dim of that class iterates
 * the same factors (the per-channel gain's C as (G, C/G) too), and it runs
 * to a fixpoint over all such reshapes of the group. A run of dims whose
 * sizes multiply to the same product on both sides is one unit: its
 * factorizations' suffix products must form a chain under divisibility
 * (24 as [4, 6] and as [8, 3] refine to [4, 2, 3]; as [4, 6] and [6, 4]
 * they do not, and lowering refuses). Refused too: a refined class that
 * some value covers only part of (a slice, a concat piece, a pad), and a
 * value with more loops than a domain holds.
 */
#include "fusion/lower_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAXP (2 * MAXD + 2) /* suffix products of one run, both sides */

typedef struct refined {
  int32_t cls, n;
  int64_t f[MAXD];  /* factors, outer first */
  int32_t id[MAXD]; /* the class id of each factor's loop */
} refined;

typedef struct splitter {
  lw *w;
  refined *r;
  int32_t n_r, cap_r;
} splitter;

static refined *refined_of(const splitter *s, int32_t c) {
  for (int32_t i = 0; i < s->n_r; i++)
    if (s->r[i].cls == c) return &s->r[i];
  return NULL;
}

/* The factors of class c, outer first: its refinement, or its extent. */
static int32_t factors(const splitter *s, int32_t c, const int64_t **f) {
  const refined *r = refined_of(s, c);
  if (r) {
    *f = r->f;
    return r->n;
  }
  *f = &s->w->ext[c];
  return 1;
}

/* The next run of dims of a reshape's input [*i0, *i) and output [*o0, *o)
 * whose sizes multiply to one product (size-1 dims left out at its ends);
 * false after the last. */
static bool next_run(const loom_type *ti, const loom_type *to, int32_t *i, int32_t *o,
                     int32_t *i0, int32_t *o0) {
  while (*i < ti->rank && ti->shape[*i] == 1) (*i)++;
  while (*o < to->rank && to->shape[*o] == 1) (*o)++;
  if (*i >= ti->rank || *o >= to->rank) return false;
  *i0 = *i;
  *o0 = *o;
  int64_t pi = ti->shape[(*i)++], po = to->shape[(*o)++];
  while (pi != po) {
    if (pi < po) {
      if (*i >= ti->rank) return false;
      pi *= ti->shape[(*i)++];
    } else {
      if (*o >= to->rank) return false;
      po *= to->shape[(*o)++];
    }
  }
  return true;
}

/* True if dim d of value l covers its whole loop. */
static bool dim_whole(const lw *w, int32_t l, int32_t d) {
  const lval *x = &w->lv[l];
  return x->uf[d] < 0 || (x->off[d] == 0 && vt(w, l)->shape[d] == w->ext[x->uf[d]]);
}

/* Appends the suffix products of the factors of dims [d0, d1) of value l,
 * innermost first; false if a dim covers part of its loop or too many. */
static bool run_points(const splitter *s, int32_t l, int32_t d0, int32_t d1, int64_t *pts,
                       int32_t *n) {
  const lw *w = s->w;
  int64_t acc = 1;
  for (int32_t d = d1 - 1; d >= d0; d--) {
    int32_t c = w->lv[l].uf[d];
    if (c < 0) continue; /* size 1 */
    if (!dim_whole(w, l, d)) return false;
    const int64_t *f;
    for (int32_t j = factors(s, c, &f) - 1; j >= 0; j--) {
      if (*n >= MAXP) return false;
      acc *= f[j];
      pts[(*n)++] = acc;
    }
  }
  return true;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Sorts and dedupes pts; true if each divides the next (factors nest). */
static bool chain(int64_t *pts, int32_t *n) {
  qsort(pts, (size_t)*n, sizeof *pts, cmp_i64);
  int32_t k = 0;
  for (int32_t i = 0; i < *n; i++) {
    if (k > 0 && pts[k - 1] == pts[i]) continue;
    if (pts[i] <= 0 || (k > 0 && pts[i] % pts[k - 1] != 0)) return false;
    pts[k++] = pts[i];
  }
  *n = k;
  return true;
}

/* Refines the class of dim d of value l, whose later dims in its run
 * multiply to `inner`, by the run's points: 1 if it gained factors, 0 if
 * not, -1 if it would have too many or memory ran out. */
static int refine_dim(splitter *s, int32_t l, int32_t d, int64_t inner, const int64_t *pts,
                      int32_t n) {
  lw *w = s->w;
  int32_t c = w->lv[l].uf[d];
  int64_t hi = inner * vt(w, l)->shape[d], q[MAXD];
  int32_t k = 0;
  for (int32_t i = 0; i < n; i++) {
    if (pts[i] <= inner || pts[i] > hi) continue;
    if (k >= MAXD) return -1;
    q[k++] = pts[i];
  }
  const int64_t *f;
  if (k <= factors(s, c, &f)) return 0; /* the points hold its own factors */
  refined *r = refined_of(s, c);
  if (!r) {
    if (!loom_grow(w->ctx, (void **)&s->r, &s->cap_r, s->n_r + 1, sizeof(refined))) return -1;
    r = &s->r[s->n_r++];
    memset(r, 0, sizeof *r);
    r->cls = c;
  }
  r->n = k;
  for (int32_t j = 0; j < k; j++) /* q ascends from the inside */
    r->f[k - 1 - j] = q[j] / (j > 0 ? q[j - 1] : inner);
  return 1;
}

/* The loop ids of dims [d0, d1) of value l, outer first, and their sizes. */
static int32_t run_loops(const splitter *s, int32_t l, int32_t d0, int32_t d1, int32_t *ids,
                         int64_t *size) {
  int32_t n = 0;
  for (int32_t d = d0; d < d1; d++) {
    int32_t c = s->w->lv[l].uf[d];
    if (c < 0) continue;
    const refined *r = refined_of(s, c);
    const int64_t *f;
    int32_t nf = factors(s, c, &f);
    for (int32_t j = 0; j < nf && n < MAXP; j++, n++) {
      ids[n] = r ? r->id[j] : c;
      size[n] = f[j];
    }
  }
  return n;
}

/* Refines classes to a fixpoint over the reshapes splits[0..n). */
static loom_status refine(splitter *s, const int32_t *splits, int32_t n) {
  lw *w = s->w;
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t q = 0; q < n; q++) {
      int32_t li = m_in(w, splits[q], 0), lo = m_out(w, splits[q]);
      const loom_type *ti = vt(w, li), *to = vt(w, lo);
      if (loom_type_numel(ti) <= 0)
        return loom_lower_fail(w, "reshape (node %d) of an empty value", w->mem[splits[q]]);
      for (int32_t i = 0, o = 0, i0, o0; next_run(ti, to, &i, &o, &i0, &o0);) {
        int64_t pts[MAXP];
        int32_t np = 0;
        if (!run_points(s, li, i0, i, pts, &np) || !run_points(s, lo, o0, o, pts, &np))
          return loom_lower_fail(w, "reshape (node %d) of a value that covers part of its loops",
                                 w->mem[splits[q]]);
        if (!chain(pts, &np))
          return loom_lower_fail(w, "reshape (node %d) regroups dims whose factors do not nest",
                                 w->mem[splits[q]]);
        const int32_t side[2][3] = {{li, i0, i}, {lo, o0, o}};
        for (int32_t sd = 0; sd < 2; sd++) {
          int64_t inner = 1;
          for (int32_t d = side[sd][2] - 1; d >= side[sd][1]; d--) {
            const loom_type *t = vt(w, side[sd][0]);
            if (t->shape[d] == 1) continue;
            int rc = refine_dim(s, side[sd][0], d, inner, pts, np);
            if (rc < 0) return loom_lower_fail(w, "too many loops");
            changed |= rc > 0;
            inner *= t->shape[d];
          }
        }
      }
    }
  }
  /* a refined loop is one piece of the dim: no value may cover part of it */
  for (int32_t l = 0; l < w->n_lv; l++)
    for (int32_t d = 0; d < MAXR; d++) {
      int32_t c = w->lv[l].uf[d];
      if (c >= 0 && refined_of(s, c) && !dim_whole(w, l, d))
        return loom_lower_fail(w, "value %d covers part of a loop a reshape splits", w->lv[l].v);
    }
  return LOOM_STATUS_OK;
}

/* Gives every factor of a refined class a loop id, and joins the loops
 * that the reshapes' two sides iterate together (into auf). */
static loom_status join(splitter *s, const int32_t *splits, int32_t n, int32_t **auf) {
  lw *w = s->w;
  int32_t n_cls = w->n_cls;
  for (int32_t i = 0; i < s->n_r; i++) {
    refined *r = &s->r[i];
    r->id[0] = r->cls;
    for (int32_t j = 1; j < r->n; j++) r->id[j] = n_cls++;
  }
  int64_t *ext = realloc(w->ext, sizeof(int64_t) * (size_t)n_cls);
  *auf = malloc(sizeof(int32_t) * (size_t)n_cls);
  if (ext) w->ext = ext;
  if (!ext || !*auf) return loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  w->n_cls = n_cls;
  for (int32_t c = 0; c < n_cls; c++) (*auf)[c] = c;
  for (int32_t i = 0; i < s->n_r; i++)
    for (int32_t j = 0; j < s->r[i].n; j++) w->ext[s->r[i].id[j]] = s->r[i].f[j];
  for (int32_t q = 0; q < n; q++) {
    int32_t li = m_in(w, splits[q], 0), lo = m_out(w, splits[q]);
    for (int32_t i = 0, o = 0, i0, o0; next_run(vt(w, li), vt(w, lo), &i, &o, &i0, &o0);) {
      int32_t a[MAXP], b[MAXP];
      int64_t sa[MAXP], sb[MAXP];
      int32_t na = run_loops(s, li, i0, i, a, sa), nb = run_loops(s, lo, o0, o, b, sb);
      bool same = na == nb;
      for (int32_t k = 0; k < na && same; k++) same = sa[k] == sb[k];
      if (!same) /* both sides were refined to the run's points */
        return loom_error(w->ctx, LOOM_STATUS_INTERNAL, "group %d: reshape (node %d) refined apart",
                          w->group, w->mem[splits[q]]);
      for (int32_t k = 0; k < na; k++) uf_union(*auf, a[k], b[k]);
    }
  }
  return LOOM_STATUS_OK;
}

loom_status loom_lower_loops(lw *w, const int32_t *splits, int32_t n) {
  splitter s = {.w = w};
  int32_t *auf = NULL;
  loom_status st = LOOM_STATUS_OK;
  if (n > 0) {
    st = refine(&s, splits, n);
    if (st == LOOM_STATUS_OK) st = join(&s, splits, n, &auf);
  }
  for (int32_t l = 0; l < w->n_lv && st == LOOM_STATUS_OK; l++) {
    lval *x = &w->lv[l];
    int32_t k = 0;
    for (int32_t d = 0; d < MAXR && st == LOOM_STATUS_OK; d++) {
      int32_t c = x->uf[d];
      if (c < 0) continue;
      const refined *r = n > 0 ? refined_of(&s, c) : NULL;
      int32_t nf = r ? r->n : 1;
      if (k + nf > MAXD) {
        st = loom_lower_fail(w, "value %d has too many loops", x->v);
        break;
      }
      int64_t mult = 1;
      for (int32_t j = nf - 1; j >= 0; j--) {
        int32_t id = r ? r->id[j] : c;
        x->loop[k + j] = auf ? uf_find(auf, id) : id;
        x->loop_dim[k + j] = (int8_t)d;
        x->loop_mult[k + j] = mult;
        mult *= r ? r->f[j] : 1;
      }
      x->uf[d] = nf == 1 ? x->loop[k] : -1;
      k += nf;
    }
    x->n_loops = k;
    for (int32_t i = 0; i < k && st == LOOM_STATUS_OK; i++)
      for (int32_t j = 0; j < i; j++)
        if (x->loop[j] == x->loop[i]) {
          st = loom_lower_fail(w, "value %d iterates one loop twice (a diagonal)", x->v);
          break;
        }
  }
  free(auf);
  free(s.r);
  return st;
}

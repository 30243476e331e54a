/*
 * Lowering a fused group into one kernel of the kernel IR (group.h,
 * kernel/kernel.h). The steps:
 *
 *  1. Values. The group's member nodes and every value they touch; which
 *     are materialized (group.h's rule). Values produced outside the group
 *     are loaded; a layout op (reshape, transpose, slice, broadcast_to)
 *     over a loaded value is folded into the load's strides (a "view").
 *  1b. Instances (lower_instance.c): when step 2 finds a value needed at
 *     two offsets of one loop, every value gets an instance per offset and
 *     step 2 runs again.
 *  2. Dim classes. Every dim of size != 1 of every value is unified with the
 *     dims it must iterate together with: aligned broadcast dims of
 *     element-wise ops, kept dims of reductions, permuted dims of
 *     transposes, reshapes that only add or drop size-1 dims. A class is
 *     one loop of the iteration domain; a reshape that regroups dims
 *     refines the classes on both sides into their common factors, one
 *     loop each (lower_split.c).
 *  3. Domains. Classes that share values form a component (one or more
 *     parts); a component's domain is the dim order of a value that holds
 *     all its classes, split into P (rows) and R (inside a row): R is what
 *     the row reductions reduce, or for groups without them a trailing
 *     suffix big enough to vectorise (512 elements) that leaves 16 rows
 *     for the threads; a row that rule leaves short borrows a divisor of
 *     the last P dim. A lone huge dim is split in two so that rows exist
 *     for the threads.
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
 *     it back (transcendentals), else recomputed. A part of element-wise
 *     work over pieces of a loop is cut into a part per segment between
 *     the pieces' ends, so each computes only what lies in it (segments).
 *
 * Steps 1-4 are in lower_domain.c (step 2's loops per value in
 * lower_split.c), the expressions and stages of one part
 * in lower_emit.c (shared state: lower_internal.h); this file groups the
 * roots of each phase into parts, puts parts in canonical form, schedules
 * them, and holds the entry point.
 */
#include "fusion/cost.h"
#include "fusion/lower_internal.h"

#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

loom_status loom_lower_fail(lw *w, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(w->ctx, LOOM_STATUS_UNSUPPORTED, "group %d: %s", w->group, msg);
}

/* ---- 5. parts ------------------------------------------------------------- */

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
    int32_t mm = stack[--sp];
    const loom_node *nd = mnode(w, mm);
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t li = m_in(w, mm, i);
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

/* True if root r can be written from every row of a part with domain dims
 * pm (P) and rm (R): no row or element may write another's result. */
static bool root_fits(const lw *w, const lroot *r, uint32_t pm, uint32_t rm) {
  uint32_t sp = r->col ? w->lv[m_in(w, r->m, 0)].space : w->lv[store_src(w, r->l)].space;
  if ((sp & pm) != pm) return false;
  return (sp & rm) == 0 || (sp & rm) == rm;
}

/* Notes component c as one a part touches: -2 once a second appears (a
 * part runs the loops of one component; values of two independent ones,
 * sum(a) + sum(b), need a part each, or the second's loads lose their
 * loop index). */
static void touch_comp(int32_t *comp, int32_t c) {
  if (c < 0 || *comp == -2) return;
  *comp = *comp < 0 || *comp == c ? c : -2;
}

/* The component and the domain dims a set of roots (label lab) touches:
 * *comp -1 for none, -2 for more than one. */
static void part_domain(const lw *w, const lroot *roots, int32_t nr, const int32_t *label,
                        int32_t lab, const int32_t *cl, int32_t n_cl, int32_t *comp,
                        uint32_t *mask) {
  *comp = -1;
  *mask = 0;
  for (int32_t i = 0; i < nr; i++) {
    if (label[i] != lab) continue;
    const lval *vals[2] = {&w->lv[store_src(w, roots[i].l)],
                           roots[i].col ? &w->lv[m_in(w, roots[i].m, 0)] : NULL};
    for (int32_t j = 0; j < 2; j++)
      if (vals[j] && vals[j]->comp >= 0) {
        touch_comp(comp, vals[j]->comp);
        *mask |= vals[j]->space;
      }
  }
  for (int32_t q = 0; q < n_cl; q++) {
    const loom_node *nd = mnode(w, cl[q]);
    for (int32_t i = -1; i < nd->n_in; i++) {
      const lval *x = &w->lv[(i < 0 ? m_out(w, cl[q]) : m_in(w, cl[q], i))];
      if (x->comp < 0) continue;
      touch_comp(comp, x->comp);
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
    int64_t size = c->dsize[i], lo, hi;
    seg_range(w, P, c->dcls[i], &lo, &hi);
    if (lo != 0 || hi != w->ext[c->dcls[i]]) size = hi - lo; /* a segment (one dim) */
    if (i < c->k) {
      P->pmask |= 1u << i;
      P->pidx[i] = kp->p_rank;
      kp->p_shape[kp->p_rank++] = size;
    } else {
      P->rmask_ |= 1u << i;
      P->ridx[i] = kp->r_rank;
      kp->r_shape[kp->r_rank++] = size;
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- segments ----------------------------------------------------------- */

/*
 * A value that covers part of a loop (a piece of a concat, the inside of a
 * pad, an instance at another offset) is computed at every iteration and
 * selected by index. Where such values carry real work — the two halves of
 * a gated unit's backward, each padded into one gradient — that work would
 * be done twice or more. A part of element-wise work is then cut along
 * those loops at the places where the pieces begin and end: a part per
 * segment of a P loop, a stage per segment of an R loop (equal segments),
 * in each of which every piece lies wholly inside or wholly outside, so
 * the selects and guards resolve while lowering and what lies outside is
 * not computed (lower_emit.c). So too where the pieces carry no work
 * but a load of part of a loop (a concat of slices of an input, as
 * rotate_half): its guard keeps the whole loop scalar (LM_GUARDED), and
 * in a segment it needs none, so each piece becomes a stage of plain
 * index arithmetic that vectorises (and streams). Not for parts with
 * reductions (a reduction would be cut in two), loops the kernel splits
 * or regroups, segments of a row shorter than the vector lanes, or more
 * than MAX_SEGMENTS parts.
 */
#define SEG_MIN_ROW 16 /* elements of a row segment */
#define SEG_MIN_WORK 4 /* op weight per element the pieces must carry */

/* Adds cut point p of a loop of extent ext to a sorted list; false when
 * the list would exceed MAX_SEGMENTS segments. */
static bool add_cut(int64_t *pts, int32_t *n, int64_t p) {
  int32_t i = 0;
  while (i < *n && pts[i] < p) i++;
  if (i < *n && pts[i] == p) return true;
  if (*n >= MAX_SEGMENTS + 1) return false;
  memmove(pts + i + 1, pts + i, sizeof(int64_t) * (size_t)(*n - i));
  pts[i] = p;
  (*n)++;
  return true;
}

/* The segments of a part computing members cl[0..n_cl) over the domain
 * dims `mask` of component comp: along P loops (psg: a part each) and
 * along R loops (rsg: a stage each, in one part, so a row's inputs are
 * read from memory once for all its segments); returns how many segments
 * there are in all (1: not cut). */
static int32_t plan_segments(const lw *w, const int32_t *cl, int32_t n_cl, int32_t comp,
                             uint32_t mask, segs *psg, segs *rsg) {
  psg->n = rsg->n = 0;
  if (comp < 0) return 1;
  int32_t work = 0;
  bool guarded = false; /* a load of part of a loop: guarded, so scalar */
  for (int32_t q = 0; q < n_cl; q++) {
    const loom_node *nd = mnode(w, cl[q]);
    if (loom_op_get(nd->op)->cls == LOOM_OPCLASS_REDUCE) return 1;
    if (value_partial(w, m_out(w, cl[q]))) work += loom_lower_op_weight(w, cl[q]);
    for (int32_t i = 0; i < nd->n_in; i++)
      guarded |= w->lv[m_in(w, cl[q], i)].view && value_partial(w, m_in(w, cl[q], i));
  }
  if (work < SEG_MIN_WORK && !guarded) return 1;
  const lcomp *c = &w->comp[comp];
  int32_t total = 1;
  for (int32_t i = 0; i < c->nd; i++) {
    int32_t cls = c->dcls[i];
    bool ok = (mask & (1u << i)) && c->dmult[i] == 1;
    for (int32_t j = 0; j < c->nd && ok; j++) ok = j == i || c->dcls[j] != cls;
    segs *sg = i < c->k ? psg : rsg;
    int32_t n_pts = 2;
    int64_t *pts = sg->pts[sg->n];
    pts[0] = 0;
    pts[1] = w->ext[cls];
    for (int32_t q = 0; q < n_cl && ok; q++)
      for (int32_t k = -1; k < mnode(w, cl[q])->n_in && ok; k++) {
        const lval *x = &w->lv[k < 0 ? m_out(w, cl[q]) : m_in(w, cl[q], k)];
        for (int32_t e = 0; e < x->n_loops; e++) ok = ok && (x->loop[e] != cls || x->loop_mult[e] == 1);
        for (int32_t d = 0; d < MAXR && ok; d++) {
          if (x->uf[d] != cls) continue;
          int64_t a = x->off[d], z = x->off[d] + vt(w, (int32_t)(x - w->lv))->shape[d];
          if (a > 0 && a < w->ext[cls]) ok = add_cut(pts, &n_pts, a);
          if (ok && z > 0 && z < w->ext[cls]) ok = add_cut(pts, &n_pts, z);
        }
      }
    /* a row's segments run as stages of one part over one R loop: equal */
    for (int32_t p = 0; ok && i >= c->k && p + 1 < n_pts; p++)
      ok = pts[p + 1] - pts[p] >= SEG_MIN_ROW && pts[p + 1] - pts[p] == pts[1];
    if (!ok || n_pts <= 2 || total * (n_pts - 1) > MAX_SEGMENTS) continue;
    total *= n_pts - 1;
    sg->cls[sg->n] = cls;
    sg->n_pts[sg->n++] = n_pts;
  }
  return total;
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
  int32_t vw = sched ? sched->vector_width : loom_cost_vector_width(blen);
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
static int32_t union_closure(bool *uclo, int32_t nm, const int32_t *clo_off, const int32_t *clo_m,
                             const int32_t *idx, int32_t n, int32_t *out) {
  int32_t k = 0;
  for (int32_t q = 0; q < n; q++)
    for (int32_t t = clo_off[idx[q]]; t < clo_off[idx[q] + 1]; t++)
      if (!uclo[clo_m[t]]) {
        uclo[clo_m[t]] = true;
        out[k++] = clo_m[t];
      }
  if (k < nm / 8) {
    qsort(out, (size_t)k, sizeof(int32_t), cmp_i32);
  } else { /* most members: reading the marks in order is cheaper */
    k = 0;
    for (int32_t m = 0; m < nm; m++)
      if (uclo[m]) out[k++] = m;
  }
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
  segs psg, rsg;
  int64_t *seg_lo = malloc(sizeof(int64_t) * 2 * (size_t)(w->n_cls > 0 ? w->n_cls : 1));
  int64_t *seg_hi = seg_lo ? seg_lo + w->n_cls : NULL;
  for (int32_t c = 0; seg_lo && c < w->n_cls; c++) seg_lo[c] = 0, seg_hi[c] = w->ext[c];
  P.level = calloc((size_t)nl * 10, sizeof(int32_t));
  P.avail = calloc((size_t)nl * 5, 1);
  if (!roots || !mine || !ibuf || !mark || !P.level || !P.avail || !seg_lo) {
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
  P.emit_stack = P.level + 9 * nl;
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
      int32_t l = m_out(w, m);
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
        closure(w, m_in(w, roots[i].m, 0), ph, mark, stack, clo_m, &n_clo);
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
        int32_t nu = union_closure(mark, nm, clo_off, clo_m, order + a, z - a, ulist);
        for (int32_t q = 0; q < nu; q++) mark[ulist[q]] = false;
        part_domain(w, roots, nr, label, lab, ulist, nu, &comp, &mask);
        if (comp == -2) {
          if (z - a == 1) {
            st = loom_lower_fail(w, "value %d needs the loops of two independent pieces",
                                 w->lv[roots[order[a]].l].v);
            break;
          }
          label[order[a]] = next_label++;
          changed = true;
          continue;
        }
        if (comp < 0) continue;
        const lcomp *c = &w->comp[comp];
        uint32_t pm = mask & ((1u << c->k) - 1), rm = mask & rmask(c);
        for (int32_t q = a; q < z && !changed; q++) {
          const lroot *rt = &roots[order[q]];
          if (root_fits(w, rt, pm, rm)) continue;
          if (z - a == 1) {
            st = loom_lower_fail(w, "value %d cannot be written once per element of its loops",
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
      int32_t nu = union_closure(mark, nm, clo_off, clo_m, order + a, z - a, ulist);
      part_domain(w, roots, nr, label, lab, ulist, nu, &comp, &mask);
      int32_t n_seg = plan_segments(w, ulist, nu, comp, mask, &psg, &rsg);
      P.seg_lo = n_seg > 1 ? seg_lo : NULL;
      P.seg_hi = n_seg > 1 ? seg_hi : NULL;
      P.rsg = n_seg > 1 && rsg.n > 0 ? &rsg : NULL;
      int32_t n_pseg = segs_count(&psg);
      for (int32_t s = 0; s < n_pseg && st == LOOM_STATUS_OK; s++) {
        if (n_seg > 1) {
          seg_pick(&psg, s, seg_lo, seg_hi);
          seg_pick(&rsg, 0, seg_lo, seg_hi); /* the part's R loop: the first segment's */
        }
        st = new_part(w, b, &cap_parts, &P, comp, mask, ph);
        if (st == LOOM_STATUS_OK) {
          P.cl = ulist;
          P.n_cl = nu;
          for (int32_t q = a; q < z; q++) mine[q - a] = roots[order[q]];
          int32_t first_expr = b->k->n_exprs;
          st = loom_lower_build_part(w, b, &P, mine, z - a);
          if (st == LOOM_STATUS_OK) canonicalize_part(b->k, P.kp, first_expr);
        }
        /* back to zero for the next part */
        for (int32_t q = 0; q < nu; q++) {
          int32_t m = ulist[q];
          const loom_node *nd = mnode(w, m);
          P.rowreg[m] = -1;
          for (int32_t i = -1; i < nd->n_in; i++) {
            int32_t l = (i < 0 ? m_out(w, m) : m_in(w, m, i));
            P.level[l] = P.cost[l] = 0;
            P.avail[l] = 0;
            P.scratch[l] = P.later[l] = P.need_reg[l] = P.wants_reg[l] = false;
          }
        }
      }
      for (int32_t q = 0; q < nu; q++) mark[ulist[q]] = false;
      if (n_seg > 1) { /* whole loops again */
        seg_whole(w, &psg, seg_lo, seg_hi);
        seg_whole(w, &rsg, seg_lo, seg_hi);
      }
      P.seg_lo = P.seg_hi = NULL;
      P.rsg = NULL;
    }
  }
  if (st == LOOM_STATUS_OK && b->k->n_parts == 0) st = loom_lower_fail(w, "produces nothing");
done:
  free(roots);
  free(mine);
  free(ibuf);
  free(mark);
  free(clo_m);
  free(P.level);
  free(P.avail);
  free(seg_lo);
  return st;
}

static void lw_free(lw *w) {
  if (w->loc) /* the index's scratch: back to all -1 */
    for (int32_t l = 0; l < w->n_lv; l++) w->loc[w->lv[l].v] = -1;
  free(w->mem);
  free(w->io_off);
  free(w->lv);
  free(w->uf);
  free(w->uoff);
  free(w->ext);
  free(w->comp);
  free(w->red);
  free(w->phase);
}

loom_status loom_fusion_group_lower_members(loom_ctx *ctx, loom_fusion_index *ix,
                                            const int32_t *group_of_node, int32_t group,
                                            const int32_t *members, int32_t n_members,
                                            loom_fusion_mode mode, const loom_kschedule *sched,
                                            const char *name, loom_kernel *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no kernel to lower into");
  memset(out, 0, sizeof *out);
  if (!ix || !group_of_node || (n_members > 0 && !members) || n_members < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "lowering needs an index, a grouping and the members");
  lw w = {.ctx = ctx, .g = ix->g, .ix = ix, .gon = group_of_node, .group = group, .mode = mode,
          .given = members, .n_given = n_members};
  kbuild b = {.k = out};
  loom_status st = loom_lower_domains(&w);
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
      /* the group's own nodes: duplicated producers it recomputes belong
       * to their owner's kernel (group.h, loom_fusion_dups) */
      out->n_nodes = 0;
      for (int32_t m = 0; m < w.n_all; m++)
        if (group_of_node[w.all_mem[m]] == group) out->nodes[out->n_nodes++] = w.all_mem[m];
      st = loom_kernel_verify(ctx, out);
    }
  }
  lw_free(&w);
  if (st != LOOM_STATUS_OK) loom_kernel_clear(out);
  return st;
}

loom_status loom_fusion_group_lower(loom_ctx *ctx, const loom_graph *g,
                                    const int32_t *group_of_node, int32_t group,
                                    loom_fusion_mode mode, const loom_kschedule *sched,
                                    const char *name, loom_kernel *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no kernel to lower into");
  memset(out, 0, sizeof *out);
  if (!g || !group_of_node)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "lowering needs a graph and a grouping");
  loom_fusion_index *ix = NULL;
  int32_t *members = malloc(sizeof(int32_t) * (size_t)(g->n_nodes > 0 ? g->n_nodes : 1)), n = 0;
  loom_status st = members ? loom_fusion_index_new(ctx, g, &ix)
                           : loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  if (st == LOOM_STATUS_OK) {
    for (int32_t u = 0; u < g->n_nodes; u++)
      if (group_of_node[u] == group) members[n++] = u;
    st = loom_fusion_group_lower_members(ctx, ix, group_of_node, group, members, n, mode, sched,
                                         name, out);
  }
  loom_fusion_index_free(ix);
  free(members);
  return st;
}

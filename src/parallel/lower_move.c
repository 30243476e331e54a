/*
 * How a value's pieces reach the sub-ops that read them. For one logical
 * value at a time, with every (device, box) any consumer needs known:
 *
 *   1. Partial sums are joined first: parts on one device are added
 *      locally; a complete set of parts on distinct devices becomes a
 *      reduce-scatter when each member needs its own tile of the box, an
 *      all-reduce otherwise, or transfers to the devices that need it when
 *      the cost model says that is cheaper (a loss wanted on one device);
 *      anything else is summed on one device (pad and add).
 *   2. Whole values: a box several devices need, which they hold as even
 *      tiles, is all-gathered; one that a single other device holds is
 *      broadcast; every remaining need is assembled on its device from the
 *      nearest pieces (local slices, transfers, concatenation).
 *
 * Collectives are the ring algorithms of comm/comm.c; the bytes recorded
 * per comm op are what each member sends.
 */
#include "parallel/lower_internal.h"

#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const loom_type *vtype(const lower_walk *w, int32_t v) { return loom_value_type(w->L, v); }

static int64_t box_bytes(const lower_walk *w, int32_t v, const loom_vbox *b) {
  return loom_vbox_numel(b) * (int64_t)loom_dtype_size(vtype(w, v)->dtype);
}

int32_t lower_find_piece(const lower_walk *w, int32_t v, int32_t dev, const loom_vbox *box) {
  const lower_plist *l = &w->avail[v];
  for (int32_t k = 0; k < l->n; k++)
    if (l->v[k].K == 1 && l->v[k].dev == dev && loom_vbox_equal(&l->v[k].box, box)) return k;
  return -1;
}

int32_t lower_find_last_piece(const lower_walk *w, int32_t v, int32_t dev, const loom_vbox *box) {
  const lower_plist *l = &w->avail[v];
  for (int32_t k = l->n - 1; k >= 0; k--)
    if (l->v[k].K == 1 && l->v[k].dev == dev && loom_vbox_equal(&l->v[k].box, box)) return k;
  return -1;
}

/* Tags what was just emitted: on dev, or left for the host's final tag. */
static loom_status tag(lower_walk *w, int32_t dev, bool host) {
  return host ? LOOM_STATUS_OK : lower_tag(w, dev, LOWER_INSERTED);
}

static int32_t slice_to(lower_walk *w, int32_t gv, const loom_vbox *src, const loom_vbox *q,
                        int32_t dev, bool host) {
  if (loom_vbox_equal(src, q)) return gv;
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  for (int32_t d = 0; d < q->rank; d++) {
    lo[d] = q->start[d] - src->start[d];
    hi[d] = q->end[d] - src->start[d];
  }
  int32_t r = lb_slice(w->G, gv, lo, hi);
  if (r < 0 || loom_build_status(w->G) || tag(w, dev, host)) return -1;
  return r;
}

/* ---- comm ops ---------------------------------------------------------------- */

/* Adds a comm op in its global form: in[] one per input member, n_out
 * outputs on members out_dev[]. Returns the first output (-1 on error). */
static int32_t emit_comm(lower_walk *w, int32_t v, loom_op op, loom_attr_value *a, int32_t n_in,
                         const int32_t *in, int32_t n_out, const int32_t *out_dev, int32_t *outs,
                         int32_t group, int64_t bytes) {
  loom_plan_program *pp = w->pp;
  int32_t seq = pp->n_comms;
  switch (op) {
  case LOOM_OP_ALL_REDUCE: LOOM_ATTRV_I(a, all_reduce, seq) = seq; break;
  case LOOM_OP_ALL_GATHER: LOOM_ATTRV_I(a, all_gather, seq) = seq; break;
  case LOOM_OP_REDUCE_SCATTER: LOOM_ATTRV_I(a, reduce_scatter, seq) = seq; break;
  case LOOM_OP_ALL_TO_ALL: LOOM_ATTRV_I(a, all_to_all, seq) = seq; break;
  case LOOM_OP_BROADCAST: LOOM_ATTRV_I(a, broadcast, seq) = seq; break;
  default: LOOM_ATTRV_I(a, transfer, seq) = seq; break;
  }
  if (loom_graph_add(w->G, op, n_in, in, a, n_out, outs)) return -1;
  int32_t node = w->G->n_nodes - 1;
  if (lower_tag(w, -1, LOWER_INSERTED)) return -1;
  for (int32_t i = 0; i < n_out; i++) pp->value_device[outs[i]] = out_dev[i];
  if (!loom_grow(w->ctx, (void **)&pp->comms, &w->cap_comms, pp->n_comms + 1, sizeof *pp->comms))
    return -1;
  pp->comms[pp->n_comms++] = (loom_plan_comm){op, node, group, seq, v, bytes};
  return outs[0];
}

static void comm_attrs(loom_op op, loom_attr_value *a, int32_t group, int32_t size) {
  loom_attrs_default(op, a);
  switch (op) {
  case LOOM_OP_ALL_REDUCE:
    LOOM_ATTRV_I(a, all_reduce, group) = group;
    LOOM_ATTRV_I(a, all_reduce, size) = size;
    break;
  case LOOM_OP_ALL_GATHER:
    LOOM_ATTRV_I(a, all_gather, group) = group;
    LOOM_ATTRV_I(a, all_gather, size) = size;
    break;
  case LOOM_OP_REDUCE_SCATTER:
    LOOM_ATTRV_I(a, reduce_scatter, group) = group;
    LOOM_ATTRV_I(a, reduce_scatter, size) = size;
    break;
  case LOOM_OP_BROADCAST:
    LOOM_ATTRV_I(a, broadcast, group) = group;
    LOOM_ATTRV_I(a, broadcast, size) = size;
    break;
  default: break;
  }
}

static int32_t reduce_kind(loom_op combine) {
  return combine == LOOM_OP_MAXIMUM ? 1 : combine == LOOM_OP_MINIMUM ? 2 : 0;
}

static void set_type_attrs(loom_ints *shape, int64_t *dtype, const loom_type *t) {
  shape->n = t->rank;
  for (int32_t d = 0; d < t->rank; d++) shape->v[d] = t->shape[d];
  *dtype = t->dtype;
}

/* A transfer of gv (a piece of v of type t) from device src to dst. */
static int32_t transfer(lower_walk *w, int32_t v, int32_t gv, int32_t src, int32_t dst) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_TRANSFER, a);
  LOOM_ATTRV_I(a, transfer, src) = src;
  LOOM_ATTRV_I(a, transfer, dst) = dst;
  const loom_type *t = loom_value_type(w->G, gv);
  set_type_attrs(&LOOM_ATTRV_INTS(a, transfer, shape), &LOOM_ATTRV_I(a, transfer, dtype), t);
  int32_t members[2] = {src, dst}, out = -1;
  int32_t g = lower_group(w, 2, members);
  if (g < 0) return -1;
  int64_t bytes = loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
  return emit_comm(w, v, LOOM_OP_TRANSFER, a, 1, &gv, 1, &dst, &out, g, bytes);
}

/* ---- assembling a box from whole pieces ------------------------------------------- */

/* Piece k (whole) cut to q, on dev: a local slice, or a transfer. */
static int32_t fetch(lower_walk *w, int32_t v, int32_t k, const loom_vbox *q, int32_t dev,
                     bool host) {
  lower_piece pc = w->avail[v].v[k];
  if (host || pc.dev == dev) return slice_to(w, pc.gv, &pc.box, q, dev, host);
  int32_t s = slice_to(w, pc.gv, &pc.box, q, pc.dev, false);
  if (s < 0) return -1;
  return transfer(w, v, s, pc.dev, dev);
}

static int64_t dev_distance(int32_t a, int32_t b) { return a > b ? a - b : b - a; }

/* Box q of v on dev (host: the oracle's host, which reads every device),
 * from the whole pieces: the best piece (one holding all of q, local,
 * largest share, nearest) gives its share; the rest of q, cut along one
 * dim around that share, is assembled the same way and concatenated. */
int32_t lower_assemble(lower_walk *w, int32_t v, const loom_vbox *q, int32_t dev, bool host) {
  const lower_plist *l = &w->avail[v];
  int32_t best = -1;
  bool best_contains = false, best_local = false;
  int64_t best_share = 0, best_dist = 0;
  loom_vbox best_inter;
  for (int32_t k = 0; k < l->n; k++) {
    const lower_piece *pc = &l->v[k];
    if (pc->K != 1) continue;
    loom_vbox inter;
    if (!loom_vbox_intersect(&pc->box, q, &inter)) continue;
    bool contains = loom_vbox_contains(&pc->box, q), local = host || pc->dev == dev;
    int64_t share = loom_vbox_numel(&inter), dist = dev_distance(pc->dev, dev);
    bool better = best < 0 || contains > best_contains ||
                  (contains == best_contains &&
                   (local > best_local ||
                    (local == best_local &&
                     (share > best_share || (share == best_share && dist < best_dist)))));
    if (better) {
      best = k;
      best_contains = contains;
      best_local = local;
      best_share = share;
      best_dist = dist;
      best_inter = inter;
    }
  }
  if (best < 0) {
    char bb[160];
    loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
               "plan: no piece of value %d holds %s, which device %d needs", v,
               loom_vbox_str(q, bb, sizeof bb), dev);
    return -1;
  }
  if (best_contains) {
    int32_t gv = fetch(w, v, best, q, dev, host);
    if (gv >= 0 && !host && lower_find_piece(w, v, dev, q) < 0) {
      lower_piece got = {.dev = dev, .box = *q, .parts = 1, .K = 1, .gv = gv};
      if (lower_add_piece(w, v, got)) return -1;
    }
    return gv;
  }
  int32_t d0 = 0;
  while (d0 < q->rank && best_inter.start[d0] == q->start[d0] && best_inter.end[d0] == q->end[d0])
    d0++;
  int64_t cuts[4] = {q->start[d0], best_inter.start[d0], best_inter.end[d0], q->end[d0]};
  int32_t parts[3], n = 0;
  for (int32_t i = 0; i < 3; i++) {
    if (cuts[i + 1] <= cuts[i]) continue;
    loom_vbox sub = *q;
    sub.start[d0] = cuts[i];
    sub.end[d0] = cuts[i + 1];
    parts[n] = lower_assemble(w, v, &sub, dev, host);
    if (parts[n++] < 0) return -1;
  }
  int32_t r = n == 1 ? parts[0] : lb_concat(w->G, n, parts, d0);
  if (r < 0 || loom_build_status(w->G) || (n > 1 && tag(w, dev, host))) return -1;
  if (!host) {
    lower_piece got = {.dev = dev, .box = *q, .parts = 1, .K = 1, .gv = r};
    if (lower_add_piece(w, v, got)) return -1;
  }
  return r;
}

/* ---- partial sums --------------------------------------------------------------- */

static bool same_part_group(const lower_piece *a, const lower_piece *b) {
  return a->K == b->K && a->combine == b->combine && a->replica == b->replica &&
         loom_vbox_equal(&a->box, &b->box);
}

/* a combine b on dev (add, maximum, minimum). */
static int32_t combine2(lower_walk *w, loom_op combine, int32_t a, int32_t b, int32_t dev) {
  int32_t r = lb_binary(w->G, combine, a, b);
  if (r < 0 || loom_build_status(w->G) || lower_tag(w, dev, LOWER_INSERTED)) return -1;
  return r;
}

/* Parts of one box on one device are combined there first. */
static loom_status merge_local_parts(lower_walk *w, int32_t v) {
  lower_plist *l = &w->avail[v];
  for (int32_t i = 0; i < l->n; i++) {
    if (l->v[i].K <= 1) continue;
    for (int32_t j = i + 1; j < l->n; j++) {
      if (l->v[j].K <= 1 || l->v[j].dev != l->v[i].dev || !same_part_group(&l->v[i], &l->v[j]))
        continue;
      int32_t r = combine2(w, l->v[i].combine, l->v[i].gv, l->v[j].gv, l->v[i].dev);
      if (r < 0) return LOOM_STATUS_INTERNAL;
      l->v[i].gv = r;
      l->v[i].parts += l->v[j].parts;
      l->v[j].K = -1; /* consumed */
    }
    if (l->v[i].parts == l->v[i].K) l->v[i].K = l->v[i].parts = 1;
  }
  return LOOM_STATUS_OK;
}

/* Seconds the cost model gives each way of finishing a complete group of
 * n parts of b bytes: a ring all-reduce, or sending every part to each of
 * m devices that need the value. */
static double ring_all_reduce_s(const lower_walk *w, int32_t n, int64_t b) {
  return loom_comm_model_time(&w->o.comm, 2.0 * (n - 1) / n * (double)b, 2 * (n - 1));
}
static double gather_parts_s(const lower_walk *w, int32_t n, int32_t m, int64_t b) {
  return loom_comm_model_time(&w->o.comm, (double)m * (n - 1) * (double)b, m * (n - 1));
}

/* If needs on the members' devices are exactly one even tile of box each,
 * along one axis, in some member order: that axis, and the member order
 * in *order (member i gets tile i). */
static int32_t tile_axis(const loom_vbox *box, int32_t n_members, const int32_t *devs,
                         const lower_need *needs, int32_t n_needs, int32_t *order) {
  for (int32_t a = 0; a < box->rank; a++) {
    int64_t ext = box->end[a] - box->start[a];
    if (n_members < 2 || ext % n_members) continue;
    int64_t tile = ext / n_members;
    bool ok = true;
    int32_t found = 0;
    for (int32_t m = 0; m < n_members && ok; m++) order[m] = -1;
    for (int32_t k = 0; k < n_needs && ok; k++) {
      const loom_vbox *q = &needs[k].box;
      loom_vbox inter;
      if (!loom_vbox_intersect(q, box, &inter)) continue;
      int32_t m = 0;
      while (m < n_members && devs[m] != needs[k].dev) m++;
      if (m == n_members) {
        ok = false;
        break;
      }
      for (int32_t d = 0; d < box->rank && ok; d++)
        if (d != a && (q->start[d] != box->start[d] || q->end[d] != box->end[d])) ok = false;
      int64_t off = q->start[a] - box->start[a];
      if (!ok || q->end[a] - q->start[a] != tile || off % tile) {
        ok = false;
        break;
      }
      int32_t t = (int32_t)(off / tile);
      if (order[t] >= 0) {
        ok = false;
        break;
      }
      order[t] = m;
      found++;
    }
    if (ok && found == n_members) return a;
  }
  return -1;
}

/* A complete group of parts (pieces idx[0..n) of v, on distinct devices). */
static loom_status join_group(lower_walk *w, int32_t v, int32_t n, const int32_t *idx,
                              int32_t n_needs, const lower_need *needs) {
  lower_plist *l = &w->avail[v];
  lower_piece first = l->v[idx[0]];
  int32_t devs[LOOM_PLAN_MAX_DEVICES], order[LOOM_PLAN_MAX_DEVICES], in[LOOM_PLAN_MAX_DEVICES];
  int32_t outs[LOOM_PLAN_MAX_DEVICES], out_dev[LOOM_PLAN_MAX_DEVICES];
  for (int32_t m = 0; m < n; m++) devs[m] = l->v[idx[m]].dev;
  int64_t b = box_bytes(w, v, &first.box);
  /* which devices need some of this box */
  int32_t m_need = 0;
  bool all_members = true;
  for (int32_t k = 0; k < n_needs; k++) {
    loom_vbox inter;
    if (!loom_vbox_intersect(&needs[k].box, &first.box, &inter)) continue;
    bool member = false, dup = false;
    for (int32_t m = 0; m < n; m++) member |= devs[m] == needs[k].dev;
    for (int32_t j = 0; j < k; j++) dup |= needs[j].dev == needs[k].dev;
    all_members &= member;
    if (!dup) m_need++;
  }
  int32_t axis = all_members ? tile_axis(&first.box, n, devs, needs, n_needs, order) : -1;
  loom_attr_value a[LOOM_MAX_ATTRS];
  if (axis >= 0) {
    /* reduce-scatter: member order = tile order */
    int32_t gdev[LOOM_PLAN_MAX_DEVICES];
    for (int32_t t = 0; t < n; t++) {
      gdev[t] = devs[order[t]];
      in[t] = l->v[idx[order[t]]].gv;
    }
    int32_t g = lower_group(w, n, gdev);
    if (g < 0) return LOOM_STATUS_OUT_OF_MEMORY;
    comm_attrs(LOOM_OP_REDUCE_SCATTER, a, g, n);
    LOOM_ATTRV_I(a, reduce_scatter, axis) = axis;
    LOOM_ATTRV_I(a, reduce_scatter, reduce) = reduce_kind(first.combine);
    if (emit_comm(w, v, LOOM_OP_REDUCE_SCATTER, a, n, in, n, gdev, outs, g,
                  (int64_t)((double)b * (n - 1) / n)) < 0)
      return LOOM_STATUS_INTERNAL;
    int64_t tile = (first.box.end[axis] - first.box.start[axis]) / n;
    for (int32_t t = 0; t < n; t++) {
      lower_piece pc = {.dev = gdev[t], .box = first.box, .parts = 1, .K = 1, .gv = outs[t]};
      pc.box.start[axis] = first.box.start[axis] + tile * t;
      pc.box.end[axis] = pc.box.start[axis] + tile;
      LOOM_TRY(lower_add_piece(w, v, pc));
    }
  } else if (m_need > 0 && gather_parts_s(w, n, m_need, b) < ring_all_reduce_s(w, n, b)) {
    /* few devices need it: send the parts there and combine in member order */
    for (int32_t k = 0; k < n_needs; k++) {
      loom_vbox inter;
      if (!loom_vbox_intersect(&needs[k].box, &first.box, &inter)) continue;
      int32_t d = needs[k].dev, acc = -1;
      bool done = false;
      for (int32_t j = 0; j < l->n; j++)
        done |= l->v[j].K == 1 && l->v[j].dev == d && loom_vbox_equal(&l->v[j].box, &first.box);
      if (done) continue;
      for (int32_t m = 0; m < n; m++) {
        const lower_piece pc = l->v[idx[m]];
        int32_t here = pc.dev == d ? pc.gv : transfer(w, v, pc.gv, pc.dev, d);
        if (here < 0) return LOOM_STATUS_INTERNAL;
        acc = acc < 0 ? here : combine2(w, first.combine, acc, here, d);
        if (acc < 0) return LOOM_STATUS_INTERNAL;
      }
      lower_piece got = {.dev = d, .box = first.box, .parts = 1, .K = 1, .gv = acc};
      LOOM_TRY(lower_add_piece(w, v, got));
    }
  } else {
    for (int32_t m = 0; m < n; m++) {
      in[m] = l->v[idx[m]].gv;
      out_dev[m] = devs[m];
    }
    int32_t g = lower_group(w, n, devs);
    if (g < 0) return LOOM_STATUS_OUT_OF_MEMORY;
    comm_attrs(LOOM_OP_ALL_REDUCE, a, g, n);
    LOOM_ATTRV_I(a, all_reduce, reduce) = reduce_kind(first.combine);
    if (emit_comm(w, v, LOOM_OP_ALL_REDUCE, a, n, in, n, out_dev, outs, g,
                  (int64_t)(2.0 * (double)b * (n - 1) / n)) < 0)
      return LOOM_STATUS_INTERNAL;
    for (int32_t m = 0; m < n; m++) {
      lower_piece pc = {.dev = devs[m], .box = first.box, .parts = 1, .K = 1, .gv = outs[m]};
      LOOM_TRY(lower_add_piece(w, v, pc));
    }
  }
  for (int32_t m = 0; m < n; m++) w->avail[v].v[idx[m]].K = -1;
  return LOOM_STATUS_OK;
}

static double identity_of(loom_op combine) {
  return combine == LOOM_OP_MAXIMUM ? -INFINITY : combine == LOOM_OP_MINIMUM ? INFINITY : 0.0;
}

/* Parts that form no complete group (cuts that differ between parts):
 * each goes to one device, padded to the whole tensor with the combine's
 * identity, and they are combined there. */
static loom_status join_rest(lower_walk *w, int32_t v, int32_t owner) {
  lower_plist *l = &w->avail[v];
  loom_vbox whole = loom_vbox_full(vtype(w, v));
  int32_t acc = -1;
  loom_op combine = LOOM_OP_ADD;
  for (int32_t k = 0; k < l->n; k++) {
    if (l->v[k].K <= 1) continue;
    lower_piece pc = l->v[k];
    combine = pc.combine;
    int32_t here = pc.dev == owner ? pc.gv : transfer(w, v, pc.gv, pc.dev, owner);
    if (here < 0) return LOOM_STATUS_INTERNAL;
    int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
    for (int32_t d = 0; d < whole.rank; d++) {
      lo[d] = pc.box.start[d];
      hi[d] = whole.end[d] - pc.box.end[d];
    }
    int32_t padded = loom_vbox_equal(&pc.box, &whole) ? here : lb_pad(w->G, here, lo, hi, identity_of(combine));
    if (padded < 0 || loom_build_status(w->G) || lower_tag(w, owner, LOWER_INSERTED))
      return LOOM_STATUS_INTERNAL;
    acc = acc < 0 ? padded : combine2(w, combine, acc, padded, owner);
    if (acc < 0) return LOOM_STATUS_INTERNAL;
    l->v[k].K = -1;
  }
  if (acc < 0) return LOOM_STATUS_OK;
  lower_piece got = {.dev = owner, .box = whole, .parts = 1, .K = 1, .gv = acc};
  return lower_add_piece(w, v, got);
}

static loom_status join_partials(lower_walk *w, int32_t v, int32_t n_needs,
                                 const lower_need *needs) {
  LOOM_TRY(merge_local_parts(w, v));
  lower_plist *l = &w->avail[v];
  int32_t *idx = loom_malloc(w->ctx, sizeof *idx * (size_t)(l->n ? l->n : 1));
  if (!idx) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = LOOM_STATUS_OK;
  int32_t n0 = l->n;
  for (int32_t i = 0; !st && i < n0; i++) {
    if (l->v[i].K <= 1) continue;
    int32_t n = 0, parts = 0;
    for (int32_t j = i; j < n0; j++)
      if (l->v[j].K > 1 && same_part_group(&l->v[i], &l->v[j])) {
        idx[n++] = j;
        parts += l->v[j].parts;
      }
    if (parts != l->v[i].K) continue; /* incomplete: join_rest */
    st = join_group(w, v, n, idx, n_needs, needs);
    l = &w->avail[v];
  }
  free(idx);
  if (!st) st = join_rest(w, v, n_needs > 0 ? needs[0].dev : 0);
  return st;
}

/* ---- whole values ------------------------------------------------------------------ */

/* Devices of needs[] that want exactly box q and do not have it. */
static int32_t lacking(const lower_walk *w, int32_t v, const lower_need *needs, int32_t n_needs,
                       const loom_vbox *q, int32_t *devs) {
  int32_t n = 0;
  for (int32_t k = 0; k < n_needs; k++) {
    if (!loom_vbox_equal(&needs[k].box, q) || lower_find_piece(w, v, needs[k].dev, q) >= 0) continue;
    bool dup = false;
    for (int32_t j = 0; j < n; j++) dup |= devs[j] == needs[k].dev;
    if (!dup) devs[n++] = needs[k].dev;
  }
  return n;
}

/* All-gather when the devices lacking q hold even tiles of it along one
 * axis, one each; broadcast when none holds any of it and one other
 * device holds all of it. */
static loom_status collectives_for(lower_walk *w, int32_t v, const loom_vbox *q,
                                   int32_t n, const int32_t *devs) {
  lower_plist *l = &w->avail[v];
  int32_t tiles[LOOM_PLAN_MAX_DEVICES], outs[LOOM_PLAN_MAX_DEVICES], gdev[LOOM_PLAN_MAX_DEVICES];
  loom_attr_value a[LOOM_MAX_ATTRS];
  for (int32_t ax = 0; ax < q->rank; ax++) {
    int64_t ext = q->end[ax] - q->start[ax];
    if (ext % n) continue;
    int64_t tile = ext / n;
    int32_t found = 0;
    for (int32_t t = 0; t < n; t++) tiles[t] = -1;
    for (int32_t m = 0; m < n; m++)
      for (int32_t k = 0; k < l->n; k++) {
        const lower_piece *pc = &l->v[k];
        if (pc->K != 1 || pc->dev != devs[m] || !loom_vbox_contains(q, &pc->box)) continue;
        bool ok = pc->box.end[ax] - pc->box.start[ax] == tile &&
                  (pc->box.start[ax] - q->start[ax]) % tile == 0;
        for (int32_t d = 0; d < q->rank && ok; d++)
          if (d != ax && (pc->box.start[d] != q->start[d] || pc->box.end[d] != q->end[d])) ok = false;
        int32_t t = ok ? (int32_t)((pc->box.start[ax] - q->start[ax]) / tile) : -1;
        if (t >= 0 && tiles[t] < 0) {
          tiles[t] = k;
          found++;
          break;
        }
      }
    if (found != n) continue;
    int32_t in[LOOM_PLAN_MAX_DEVICES];
    for (int32_t t = 0; t < n; t++) {
      gdev[t] = l->v[tiles[t]].dev;
      in[t] = l->v[tiles[t]].gv;
    }
    int32_t g = lower_group(w, n, gdev);
    if (g < 0) return LOOM_STATUS_OUT_OF_MEMORY;
    comm_attrs(LOOM_OP_ALL_GATHER, a, g, n);
    LOOM_ATTRV_I(a, all_gather, axis) = ax;
    int64_t b = box_bytes(w, v, &l->v[tiles[0]].box);
    if (emit_comm(w, v, LOOM_OP_ALL_GATHER, a, n, in, n, gdev, outs, g, b * (n - 1)) < 0)
      return LOOM_STATUS_INTERNAL;
    for (int32_t t = 0; t < n; t++) {
      lower_piece pc = {.dev = gdev[t], .box = *q, .parts = 1, .K = 1, .gv = outs[t]};
      LOOM_TRY(lower_add_piece(w, v, pc));
    }
    return LOOM_STATUS_OK;
  }
  /* broadcast */
  int32_t root = -1;
  for (int32_t k = 0; k < l->n; k++) {
    const lower_piece *pc = &l->v[k];
    loom_vbox inter;
    if (pc->K != 1) continue;
    bool member = false;
    for (int32_t m = 0; m < n; m++) member |= devs[m] == pc->dev;
    if (member && loom_vbox_intersect(&pc->box, q, &inter)) return LOOM_STATUS_OK;
    if (!member && loom_vbox_contains(&pc->box, q) &&
        (root < 0 || dev_distance(pc->dev, devs[0]) < dev_distance(l->v[root].dev, devs[0])))
      root = k;
  }
  if (root < 0 || n < 2) return LOOM_STATUS_OK;
  lower_piece src = l->v[root];
  int32_t in = slice_to(w, src.gv, &src.box, q, src.dev, false);
  if (in < 0) return LOOM_STATUS_INTERNAL;
  gdev[0] = src.dev;
  for (int32_t m = 0; m < n; m++) gdev[m + 1] = devs[m];
  int32_t g = lower_group(w, n + 1, gdev);
  if (g < 0) return LOOM_STATUS_OUT_OF_MEMORY;
  comm_attrs(LOOM_OP_BROADCAST, a, g, n + 1);
  LOOM_ATTRV_I(a, broadcast, root) = 0;
  set_type_attrs(&LOOM_ATTRV_INTS(a, broadcast, shape), &LOOM_ATTRV_I(a, broadcast, dtype),
                 loom_value_type(w->G, in));
  if (emit_comm(w, v, LOOM_OP_BROADCAST, a, 1, &in, n + 1, gdev, outs, g,
                box_bytes(w, v, q) * n) < 0)
    return LOOM_STATUS_INTERNAL;
  for (int32_t m = 1; m <= n; m++) {
    lower_piece pc = {.dev = gdev[m], .box = *q, .parts = 1, .K = 1, .gv = outs[m]};
    LOOM_TRY(lower_add_piece(w, v, pc));
  }
  return LOOM_STATUS_OK;
}

loom_status lower_move_value(lower_walk *w, int32_t v, int32_t n_needs, const lower_need *needs) {
  bool partial = false;
  for (int32_t k = 0; k < w->avail[v].n; k++) partial |= w->avail[v].v[k].K > 1;
  if (partial) LOOM_TRY(join_partials(w, v, n_needs, needs));
  int32_t devs[LOOM_PLAN_MAX_DEVICES];
  for (int32_t k = 0; k < n_needs; k++) {
    bool seen = false;
    for (int32_t j = 0; j < k; j++) seen |= loom_vbox_equal(&needs[j].box, &needs[k].box);
    if (seen) continue;
    int32_t n = lacking(w, v, needs, n_needs, &needs[k].box, devs);
    if (n >= 2) LOOM_TRY(collectives_for(w, v, &needs[k].box, n, devs));
  }
  for (int32_t k = 0; k < n_needs; k++) {
    if (lower_find_piece(w, v, needs[k].dev, &needs[k].box) >= 0) continue;
    if (lower_assemble(w, v, &needs[k].box, needs[k].dev, false) < 0) return LOOM_STATUS_INVALID_ARGUMENT;
  }
  return LOOM_STATUS_OK;
}

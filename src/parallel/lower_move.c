/*
 * How a value's pieces reach the sub-ops that read them. For one logical
 * value at a time, with every (device, box) any consumer needs known:
 * parts on one device are added there, parts that form no complete group
 * (cut differently) are summed on one device, then lower_search.c chooses
 * the transitions (all-reduce, reduce-scatter, sending parts, all-gather,
 * all-to-all, broadcast), which are emitted here, and every need still
 * lacking is assembled on its device from the best pieces (local slices,
 * transfers, concatenation).
 *
 * The bytes recorded per comm op are what each member sends, the same
 * for Loom's direct collectives (comm/comm.c) and rings, but a
 * broadcast's: its root sends the piece to every other member.
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
  int32_t seq = pp->n_comms; /* in emission order; lower_order.c renumbers */
  loom_comm_op_set_seq(op, a, seq);
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
  case LOOM_OP_ALL_TO_ALL:
    LOOM_ATTRV_I(a, all_to_all, group) = group;
    LOOM_ATTRV_I(a, all_to_all, size) = size;
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

/* Box q of v on dev (host: the oracle's host, which reads every device),
 * from the whole pieces: the best piece (lower_best_piece) gives its
 * share; the rest of q, cut along one dim around that share, is assembled
 * the same way and concatenated. */
int32_t lower_assemble(lower_walk *w, int32_t v, const loom_vbox *q, int32_t dev, bool host) {
  loom_vbox best_inter;
  bool best_contains;
  int32_t best = lower_best_piece(&w->avail[v], q, dev, host, &best_inter, &best_contains);
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
      if (l->v[j].K <= 1 || l->v[j].dev != l->v[i].dev ||
          !lower_same_part_group(&l->v[i], &l->v[j]))
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

static double identity_of(loom_op combine) {
  return combine == LOOM_OP_MAXIMUM ? -INFINITY : combine == LOOM_OP_MINIMUM ? INFINITY : 0.0;
}

/* The parts take[] selects each go to one device, padded to the whole
 * tensor with the combine's identity, and are combined there: the way for
 * parts that form no complete group (cuts that differ between parts). */
static loom_status join_rest(lower_walk *w, int32_t v, int32_t owner, const bool *take) {
  lower_plist *l = &w->avail[v];
  loom_vbox whole = loom_vbox_full(vtype(w, v));
  int32_t acc = -1;
  loom_op combine = LOOM_OP_ADD;
  for (int32_t k = 0; k < l->n; k++) {
    if (l->v[k].K <= 1 || !take[k]) continue;
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
    w->avail[v].v[k].K = -1;
    l = &w->avail[v];
  }
  if (acc < 0) return LOOM_STATUS_OK;
  lower_piece got = {.dev = owner, .box = whole, .parts = 1, .K = 1, .gv = acc};
  return lower_add_piece(w, v, got);
}

/* take[k]: piece k is a part whose group is incomplete (complete: false),
 * or, after the transitions, a part some need still reads (complete:
 * true, a fallback the search never leaves). */
static void select_parts(const lower_walk *w, int32_t v, bool complete, int32_t n_needs,
                         const lower_need *needs, bool *take) {
  const lower_plist *l = &w->avail[v];
  for (int32_t i = 0; i < l->n; i++) {
    take[i] = false;
    if (l->v[i].K <= 1) continue;
    int32_t parts = 0;
    for (int32_t j = 0; j < l->n; j++)
      if (l->v[j].K > 1 && lower_same_part_group(&l->v[i], &l->v[j])) parts += l->v[j].parts;
    if (!complete) {
      take[i] = parts != l->v[i].K;
      continue;
    }
    loom_vbox inter;
    for (int32_t k = 0; k < n_needs && !take[i]; k++)
      take[i] = loom_vbox_intersect(&needs[k].box, &l->v[i].box, &inter);
  }
}

/* ---- emitting the chosen transitions ------------------------------------------------ */

/* The parts of m sent to device d and combined there in member order. */
static int32_t sum_parts_on(lower_walk *w, int32_t v, const lower_move *m, int32_t d) {
  int32_t acc = -1;
  for (int32_t t = 0; t < m->n; t++) {
    const lower_piece pc = w->avail[v].v[m->piece[t]];
    int32_t here = pc.dev == d ? pc.gv : transfer(w, v, pc.gv, pc.dev, d);
    if (here < 0) return -1;
    acc = acc < 0 ? here : combine2(w, pc.combine, acc, here, d);
    if (acc < 0) return -1;
  }
  return acc;
}

/* Emits move m: its comm op (or transfers and sums), its result pieces
 * added in lower_move_results' order, its input parts consumed. */
static loom_status emit_move(lower_walk *w, int32_t v, const lower_move *m) {
  static const loom_op ops[] = {
      [LOWER_MV_ALL_REDUCE] = LOOM_OP_ALL_REDUCE, [LOWER_MV_REDUCE_SCATTER] = LOOM_OP_REDUCE_SCATTER,
      [LOWER_MV_SEND_PARTS] = LOOM_OP_TRANSFER,   [LOWER_MV_ALL_GATHER] = LOOM_OP_ALL_GATHER,
      [LOWER_MV_ALL_TO_ALL] = LOOM_OP_ALL_TO_ALL, [LOWER_MV_BROADCAST] = LOOM_OP_BROADCAST};
  int32_t cap = (m->n > m->n_to ? m->n : m->n_to) + 1;
  lower_piece *res = loom_malloc(w->ctx, sizeof *res * (size_t)cap);
  int32_t *in = loom_malloc(w->ctx, sizeof *in * (size_t)cap);
  int32_t *outs = loom_malloc(w->ctx, sizeof *outs * (size_t)cap);
  if (!res || !in || !outs) {
    free(res);
    free(in);
    free(outs);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t n_res = lower_move_results(m, res), n = m->n;
  loom_op op = ops[m->kind];
  loom_status st = LOOM_STATUS_OK;
  int64_t b = box_bytes(w, v, &m->box);
  if (m->kind == LOWER_MV_SEND_PARTS) {
    for (int32_t i = 0; !st && i < m->n_to; i++)
      if ((outs[i] = sum_parts_on(w, v, m, m->to[i])) < 0) st = LOOM_STATUS_INTERNAL;
  } else {
    loom_attr_value a[LOOM_MAX_ATTRS];
    int32_t g = lower_group(w, n, m->dev), n_in = n;
    if (g < 0) st = LOOM_STATUS_OUT_OF_MEMORY;
    comm_attrs(op, a, g, n);
    int64_t bytes = 0;
    int32_t reduce = reduce_kind(w->avail[v].v[m->piece[0]].combine);
    for (int32_t t = 0; t < n; t++) in[t] = m->piece[t] >= 0 ? w->avail[v].v[m->piece[t]].gv : -1;
    switch (m->kind) {
    case LOWER_MV_ALL_REDUCE:
      LOOM_ATTRV_I(a, all_reduce, reduce) = reduce;
      bytes = (int64_t)(2.0 * (double)b * (n - 1) / n);
      break;
    case LOWER_MV_REDUCE_SCATTER:
      LOOM_ATTRV_I(a, reduce_scatter, axis) = m->axis;
      LOOM_ATTRV_I(a, reduce_scatter, reduce) = reduce;
      bytes = (int64_t)((double)b * (n - 1) / n);
      break;
    case LOWER_MV_ALL_GATHER:
      LOOM_ATTRV_I(a, all_gather, axis) = m->axis;
      bytes = box_bytes(w, v, &w->avail[v].v[m->piece[0]].box) * (n - 1);
      break;
    case LOWER_MV_ALL_TO_ALL:
      LOOM_ATTRV_I(a, all_to_all, split_axis) = m->axis;
      LOOM_ATTRV_I(a, all_to_all, concat_axis) = m->axis2;
      bytes = (int64_t)((double)box_bytes(w, v, &w->avail[v].v[m->piece[0]].box) * (n - 1) / n);
      break;
    default: { /* broadcast: the root's piece cut to the box */
      const lower_piece src = w->avail[v].v[m->piece[0]];
      in[0] = slice_to(w, src.gv, &src.box, &m->box, src.dev, false);
      if (in[0] < 0) st = LOOM_STATUS_INTERNAL;
      else {
        LOOM_ATTRV_I(a, broadcast, root) = 0;
        set_type_attrs(&LOOM_ATTRV_INTS(a, broadcast, shape), &LOOM_ATTRV_I(a, broadcast, dtype),
                       loom_value_type(w->G, in[0]));
      }
      n_in = 1;
      bytes = b * (n - 1);
    }
    }
    if (!st && emit_comm(w, v, op, a, n_in, in, n, m->dev, outs, g, bytes) < 0)
      st = LOOM_STATUS_INTERNAL;
    if (m->kind == LOWER_MV_BROADCAST) memmove(outs, outs + 1, sizeof *outs * (size_t)(n - 1));
  }
  for (int32_t i = 0; !st && i < n_res; i++) {
    res[i].gv = outs[i];
    st = lower_add_piece(w, v, res[i]);
  }
  if (!st && m->kind <= LOWER_MV_SEND_PARTS)
    for (int32_t t = 0; t < n; t++) w->avail[v].v[m->piece[t]].K = -1;
  free(res);
  free(in);
  free(outs);
  return st;
}

loom_status lower_move_value(lower_walk *w, int32_t v, int32_t n_needs, const lower_need *needs) {
  bool partial = false;
  for (int32_t k = 0; k < w->avail[v].n; k++) partial |= w->avail[v].v[k].K > 1;
  int32_t owner = n_needs > 0 ? needs[0].dev : 0;
  bool *take = NULL;
  if (partial) {
    LOOM_TRY(merge_local_parts(w, v));
    take = loom_malloc(w->ctx, sizeof *take * (size_t)(w->avail[v].n + 1));
    if (!take) return LOOM_STATUS_OUT_OF_MEMORY;
    select_parts(w, v, false, n_needs, needs, take);
    loom_status st = join_rest(w, v, owner, take);
    if (st) {
      free(take);
      return st;
    }
  }
  lower_path path;
  loom_status st = lower_search(w, v, n_needs, needs, &path);
  for (int32_t i = 0; !st && i < path.n_moves; i++) st = emit_move(w, v, &path.moves[i]);
  lower_path_free(&path);
  if (!st && partial) {
    /* parts no need reads are dropped */
    bool *t2 = realloc(take, sizeof *take * (size_t)(w->avail[v].n + 1));
    if (!t2) st = LOOM_STATUS_OUT_OF_MEMORY;
    else {
      take = t2;
      select_parts(w, v, true, n_needs, needs, take);
      st = join_rest(w, v, owner, take);
      for (int32_t k = 0; !st && k < w->avail[v].n; k++)
        if (w->avail[v].v[k].K > 1) w->avail[v].v[k].K = -1;
    }
  }
  free(take);
  for (int32_t k = 0; !st && k < n_needs; k++) {
    if (lower_find_piece(w, v, needs[k].dev, &needs[k].box) >= 0) continue;
    if (lower_assemble(w, v, &needs[k].box, needs[k].dev, false) < 0) st = LOOM_STATUS_INVALID_ARGUMENT;
  }
  return st;
}

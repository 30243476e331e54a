/*
 * Choosing how a value's pieces reach its needs: a best-first search over
 * layout transitions (nnScaler's R/V/D states), priced by the cost model.
 *
 * A state is the list of v's pieces (device, box, partial part k of K).
 * A step applies one kind of transition to every group it fits at once:
 *
 *   V -> R   all-reduce of each complete group of parts a need reads;
 *   V -> D   reduce-scatter, toward the tiles the members need (or, when
 *            every member needs the whole box and no other group has that
 *            box, along its first even axis, so that reduce-scatter +
 *            all-gather competes with all-reduce; groups of one box are
 *            a recomputed sub-op's replicas, each read by its own readers,
 *            and are joined alike);
 *   V -> 1   the parts sent to each device that needs them, summed there;
 *   D -> R   all-gather of a box several devices need and hold as tiles;
 *   D -> D   all-to-all of tiles along one axis into the tiles along
 *            another that the same devices need;
 *   R -> R   broadcast of a box several devices need from one that has it.
 *
 * Partial groups come first (a step of whole-value transitions is tried
 * only once no part a need reads is left). A state where that holds is a
 * goal; what its needs still lack is assembled point to point
 * (lower_assemble: local slices, transfers, concatenation), estimated
 * here without emitting (pieces that tile a need without overlap in one
 * pass: a transfer per remote share). The cost of a step or of that assembly is, per
 * device, the bytes it sends over the bandwidth plus its messages and the
 * comm ops it takes part in (each a synchronisation) times the latency,
 * the busiest device's; ties go to fewer comm ops. The ring algorithms'
 * counts are those of comm/comm.c. Steps are bounded (MAX_STEPS) and
 * states seen before are not expanded again.
 */
#include "parallel/lower_internal.h"

#include "ir/dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_STEPS = 3 };

bool lower_same_part_group(const lower_piece *a, const lower_piece *b) {
  return a->K == b->K && a->combine == b->combine && a->replica == b->replica &&
         loom_vbox_equal(&a->box, &b->box);
}

static int64_t dev_distance(int32_t a, int32_t b) { return a > b ? a - b : b - a; }

int32_t lower_best_piece(const lower_plist *l, const loom_vbox *q, int32_t dev, bool host,
                         loom_vbox *inter, bool *contains) {
  int32_t best = -1;
  bool best_contains = false, best_local = false;
  int64_t best_share = 0, best_dist = 0;
  for (int32_t k = 0; k < l->n; k++) {
    const lower_piece *pc = &l->v[k];
    if (pc->K != 1) continue;
    loom_vbox in;
    if (!loom_vbox_intersect(&pc->box, q, &in)) continue;
    bool c = loom_vbox_contains(&pc->box, q), local = host || pc->dev == dev;
    int64_t share = loom_vbox_numel(&in), dist = dev_distance(pc->dev, dev);
    bool better = best < 0 || c > best_contains ||
                  (c == best_contains &&
                   (local > best_local ||
                    (local == best_local &&
                     (share > best_share || (share == best_share && dist < best_dist)))));
    if (better) {
      best = k;
      best_contains = c;
      best_local = local;
      best_share = share;
      best_dist = dist;
      *inter = in;
    }
  }
  *contains = best_contains;
  return best;
}

static loom_vbox tile_of(const loom_vbox *box, int32_t axis, int32_t n, int32_t t) {
  loom_vbox b = *box;
  int64_t tile = (box->end[axis] - box->start[axis]) / n;
  b.start[axis] = box->start[axis] + tile * t;
  b.end[axis] = b.start[axis] + tile;
  return b;
}

int32_t lower_move_results(const lower_move *m, lower_piece *out) {
  lower_piece whole = {.dev = -1, .box = m->box, .parts = 1, .K = 1, .gv = -1};
  int32_t n = 0;
  switch (m->kind) {
  case LOWER_MV_ALL_REDUCE:
  case LOWER_MV_ALL_GATHER:
    for (int32_t t = 0; t < m->n; t++, n++)
      out[n] = whole, out[n].dev = m->dev[t];
    break;
  case LOWER_MV_REDUCE_SCATTER:
  case LOWER_MV_ALL_TO_ALL:
    for (int32_t t = 0; t < m->n; t++, n++) {
      out[n] = whole;
      out[n].dev = m->dev[t];
      out[n].box = tile_of(&m->box, m->axis, m->n, t);
    }
    break;
  case LOWER_MV_SEND_PARTS:
    for (int32_t i = 0; i < m->n_to; i++, n++)
      out[n] = whole, out[n].dev = m->to[i];
    break;
  case LOWER_MV_BROADCAST:
    for (int32_t t = 1; t < m->n; t++, n++)
      out[n] = whole, out[n].dev = m->dev[t];
    break;
  }
  return n;
}

/* ---- the search's bookkeeping --------------------------------------------------- */

typedef struct snode {
  lower_piece *pc; /* the state: v's pieces (K -1: consumed) */
  int32_t n;
  int32_t parent, depth;
  int32_t n_moves; /* the step from the parent */
  lower_move *moves;
  double g;    /* seconds so far */
  int32_t ops; /* comm ops so far */
  uint64_t hash;
  bool expanded;
} snode;

typedef struct search {
  const lower_walk *w;
  int32_t v, n_needs;
  const lower_need *needs;
  int64_t esize;
  snode *nodes;
  int32_t n_nodes, cap_nodes;
  /* per device: what the step being priced makes it send and wait for */
  double *bytes;
  int32_t *lat; /* messages + comm ops */
  int32_t *touched, n_touched, ops;
  /* the step being built */
  lower_move *step;
  int32_t n_step, cap_step;
  int32_t *scratch; /* n_devices + pieces */
  bool oom;
} search;

static void charge(search *s, int32_t dev, double bytes, int32_t msgs, int32_t ops) {
  if (!s->lat[dev] && !s->bytes[dev]) s->touched[s->n_touched++] = dev;
  s->bytes[dev] += bytes;
  s->lat[dev] += msgs + ops;
}

/* The busiest device's seconds for what was charged; clears the charges. */
static double settle(search *s) {
  const loom_comm_model *cm = &s->w->o.comm;
  double worst = 0;
  for (int32_t i = 0; i < s->n_touched; i++) {
    int32_t d = s->touched[i];
    worst = fmax(worst, loom_comm_model_time(cm, s->bytes[d], s->lat[d]));
    s->bytes[d] = 0;
    s->lat[d] = 0;
  }
  s->n_touched = 0;
  return worst;
}

static int64_t bytes_of(const search *s, const loom_vbox *b) {
  return loom_vbox_numel(b) * s->esize;
}

/* What move m costs each member (the ring algorithms of comm/comm.c). */
static void charge_move(search *s, const lower_move *m) {
  int32_t n = m->n;
  double b = (double)bytes_of(s, &m->box);
  switch (m->kind) {
  case LOWER_MV_ALL_REDUCE:
    for (int32_t t = 0; t < n; t++)
      charge(s, m->dev[t], 2.0 * (n - 1) / n * b, 2 * (n - 1), 1);
    s->ops++;
    break;
  case LOWER_MV_REDUCE_SCATTER:
    for (int32_t t = 0; t < n; t++)
      charge(s, m->dev[t], (double)(n - 1) / n * b, n - 1, 1);
    s->ops++;
    break;
  case LOWER_MV_ALL_GATHER:
    for (int32_t t = 0; t < n; t++)
      charge(s, m->dev[t], (double)(n - 1) / n * b, n - 1, 1);
    s->ops++;
    break;
  case LOWER_MV_ALL_TO_ALL:
    /* each member sends (n-1)/n of its tile, which is b / n */
    for (int32_t t = 0; t < n; t++)
      charge(s, m->dev[t], (double)(n - 1) / n * b / n, n - 1, 1);
    s->ops++;
    break;
  case LOWER_MV_BROADCAST:
    charge(s, m->dev[0], (double)(n - 1) * b, n - 1, 1);
    for (int32_t t = 1; t < n; t++)
      charge(s, m->dev[t], 0, 0, 1);
    s->ops++;
    break;
  case LOWER_MV_SEND_PARTS:
    for (int32_t i = 0; i < m->n_to; i++)
      for (int32_t t = 0; t < n; t++) {
        if (m->dev[t] == m->to[i]) continue;
        charge(s, m->dev[t], b, 1, 1);
        charge(s, m->to[i], 0, 0, 1);
        s->ops++;
      }
    break;
  }
}

/* The cost of assembling q on dev from the state's whole pieces, as
 * lower_assemble does it; false if some of q is held by no piece. */
static bool charge_assembly(search *s, const lower_plist *l, const loom_vbox *q, int32_t dev) {
  loom_vbox inter;
  bool contains;
  int32_t best = lower_best_piece(l, q, dev, false, &inter, &contains);
  if (best < 0) return false;
  if (contains) {
    if (l->v[best].dev != dev) {
      charge(s, l->v[best].dev, (double)bytes_of(s, q), 1, 1);
      charge(s, dev, 0, 0, 1);
      s->ops++;
    }
    return true;
  }
  int32_t d0 = 0;
  while (d0 < q->rank && inter.start[d0] == q->start[d0] && inter.end[d0] == q->end[d0])
    d0++;
  int64_t cuts[4] = {q->start[d0], inter.start[d0], inter.end[d0], q->end[d0]};
  for (int32_t i = 0; i < 3; i++) {
    if (cuts[i + 1] <= cuts[i]) continue;
    loom_vbox sub = *q;
    sub.start[d0] = cuts[i];
    sub.end[d0] = cuts[i + 1];
    if (!charge_assembly(s, l, &sub, dev)) return false;
  }
  return true;
}

/* A whole piece on dev holding all of q. */
static bool holds(const lower_piece *pc, int32_t n, int32_t dev, const loom_vbox *q, bool exact) {
  for (int32_t k = 0; k < n; k++)
    if (pc[k].K == 1 && pc[k].dev == dev &&
        (exact ? loom_vbox_equal(&pc[k].box, q) : loom_vbox_contains(&pc[k].box, q)))
      return true;
  return false;
}

/* Need q on dev from pieces that tile it without overlap (their shares
 * add up to q): each remote share is one transfer from its holder, which
 * is what the assembly does, in one pass. False if they do not. */
static bool charge_tiling(search *s, const lower_plist *l, const loom_vbox *q, int32_t dev) {
  int64_t covered = 0;
  loom_vbox inter;
  for (int32_t k = 0; k < l->n; k++)
    if (l->v[k].K == 1 && loom_vbox_intersect(&l->v[k].box, q, &inter)) {
      if (loom_vbox_contains(&l->v[k].box, q)) return false;
      covered += loom_vbox_numel(&inter);
    }
  if (covered != loom_vbox_numel(q)) return false;
  for (int32_t k = 0; k < l->n; k++)
    if (l->v[k].K == 1 && l->v[k].dev != dev && loom_vbox_intersect(&l->v[k].box, q, &inter)) {
      charge(s, l->v[k].dev, (double)bytes_of(s, &inter), 1, 1);
      charge(s, dev, 0, 0, 1);
      s->ops++;
    }
  return true;
}

/* Seconds (and comm ops, in *ops) to finish node x point to point. */
static double terminal_cost(search *s, const snode *x, int32_t *ops) {
  lower_plist l = {x->pc, x->n, x->n};
  s->ops = 0;
  for (int32_t k = 0; k < s->n_needs; k++) {
    const lower_need *nd = &s->needs[k];
    if (holds(x->pc, x->n, nd->dev, &nd->box, false) || charge_tiling(s, &l, &nd->box, nd->dev))
      continue;
    if (!charge_assembly(s, &l, &nd->box, nd->dev)) {
      settle(s);
      return INFINITY;
    }
  }
  *ops = s->ops;
  return settle(s);
}

/* ---- candidate steps --------------------------------------------------------------- */

static lower_move *add_move(search *s, lower_move_kind kind, int32_t n, int32_t n_to,
                            const loom_vbox *box) {
  if (!loom_grow(s->w->ctx, (void **)&s->step, &s->cap_step, s->n_step + 1, sizeof *s->step)) {
    s->oom = true;
    return NULL;
  }
  int32_t *ids = loom_malloc(s->w->ctx, sizeof *ids * (size_t)(2 * n + n_to + 1));
  if (!ids) {
    s->oom = true;
    return NULL;
  }
  lower_move *m = &s->step[s->n_step++];
  *m = (lower_move){.kind = kind,
                    .n = n,
                    .n_to = n_to,
                    .piece = ids,
                    .dev = ids + n,
                    .to = ids + 2 * n,
                    .axis = -1,
                    .axis2 = -1,
                    .box = *box};
  return m;
}

static void free_moves(lower_move *m, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    free(m[i].piece);
}

static bool needed(const search *s, const loom_vbox *box) {
  loom_vbox inter;
  for (int32_t k = 0; k < s->n_needs; k++)
    if (loom_vbox_intersect(&s->needs[k].box, box, &inter)) return true;
  return false;
}

/* If the needs that meet box are, on the members' devices only, one even
 * tile of box each along one axis: that axis, and in order[t] the member
 * that gets tile t. */
static int32_t tile_axis(const search *s, const loom_vbox *box, int32_t n, const int32_t *devs,
                         int32_t *order) {
  for (int32_t a = 0; a < box->rank; a++) {
    int64_t ext = box->end[a] - box->start[a];
    if (n < 2 || ext % n) continue;
    int64_t tile = ext / n;
    bool ok = true;
    int32_t found = 0;
    for (int32_t m = 0; m < n; m++)
      order[m] = -1;
    for (int32_t k = 0; k < s->n_needs && ok; k++) {
      const loom_vbox *q = &s->needs[k].box;
      loom_vbox inter;
      if (!loom_vbox_intersect(q, box, &inter)) continue;
      int32_t m = 0;
      while (m < n && devs[m] != s->needs[k].dev)
        m++;
      ok = m < n;
      for (int32_t d = 0; d < box->rank && ok; d++)
        if (d != a && (q->start[d] != box->start[d] || q->end[d] != box->end[d])) ok = false;
      int64_t off = q->start[a] - box->start[a];
      ok = ok && q->end[a] - q->start[a] == tile && off % tile == 0 && order[off / tile] < 0;
      if (ok) order[off / tile] = m, found++;
    }
    if (ok && found == n) return a;
  }
  return -1;
}

/* Whether every member needs exactly box. */
static bool all_need_whole(const search *s, const loom_vbox *box, int32_t n, const int32_t *devs) {
  for (int32_t m = 0; m < n; m++) {
    bool got = false;
    for (int32_t k = 0; k < s->n_needs && !got; k++)
      got = s->needs[k].dev == devs[m] && loom_vbox_equal(&s->needs[k].box, box);
    if (!got) return false;
  }
  return true;
}

/* Whether another of the groups has the box of the group at idx[at]: the
 * replicas of a recomputed sub-op, which are joined alike (each replica's
 * readers read its own). */
static bool same_box_twice(const snode *x, int32_t n_groups, const int32_t *idx, const int32_t *len,
                           int32_t at) {
  for (int32_t g = 0, j = 0; g < n_groups; j += len[g++])
    if (j != at && loom_vbox_equal(&x->pc[idx[j]].box, &x->pc[idx[at]].box)) return true;
  return false;
}

/* The complete groups of parts that needs read, as runs of idx (piece
 * indices) with their sizes in len; returns how many groups. */
static int32_t needed_groups(const search *s, const snode *x, int32_t *idx, int32_t *len) {
  int32_t n_groups = 0, used = 0;
  bool *taken = calloc((size_t)x->n + 1, sizeof *taken);
  if (!taken) return -1;
  for (int32_t i = 0; i < x->n; i++) {
    if (x->pc[i].K <= 1 || taken[i]) continue;
    int32_t n = 0, parts = 0;
    for (int32_t j = i; j < x->n; j++)
      if (x->pc[j].K > 1 && !taken[j] && lower_same_part_group(&x->pc[i], &x->pc[j])) {
        idx[used + n++] = j;
        parts += x->pc[j].parts;
        taken[j] = true;
      }
    if (parts == x->pc[i].K && needed(s, &x->pc[i].box)) {
      len[n_groups++] = n;
      used += n;
    }
  }
  free(taken);
  return n_groups;
}

/* The steps from x while parts a need reads are left: all-reduce, reduce-
 * scatter and send-parts, each over every group it fits. Fills s->step
 * with the moves of step `kind` (0..2); false if it fits no group. */
static bool partial_step(search *s, const snode *x, int32_t kind, int32_t n_groups,
                         const int32_t *idx, const int32_t *len) {
  int32_t *devs = s->scratch, order[LOOM_PLAN_MAX_DEVICES];
  for (int32_t g = 0, at = 0; g < n_groups && !s->oom; at += len[g++]) {
    int32_t n = len[g];
    const loom_vbox *box = &x->pc[idx[at]].box;
    for (int32_t m = 0; m < n; m++)
      devs[m] = x->pc[idx[at + m]].dev;
    if (kind == 0) {
      lower_move *mv = add_move(s, LOWER_MV_ALL_REDUCE, n, 0, box);
      for (int32_t m = 0; mv && m < n; m++)
        mv->piece[m] = idx[at + m], mv->dev[m] = devs[m];
    } else if (kind == 1) {
      int32_t axis = tile_axis(s, box, n, devs, order);
      if (axis < 0 && n >= 2 && all_need_whole(s, box, n, devs) &&
          !same_box_twice(x, n_groups, idx, len, at))
        for (int32_t a = 0; a < box->rank && axis < 0; a++)
          if ((box->end[a] - box->start[a]) % n == 0) {
            axis = a;
            for (int32_t m = 0; m < n; m++)
              order[m] = m;
          }
      if (axis < 0) continue;
      lower_move *mv = add_move(s, LOWER_MV_REDUCE_SCATTER, n, 0, box);
      if (!mv) break;
      mv->axis = axis;
      for (int32_t t = 0; t < n; t++)
        mv->piece[t] = idx[at + order[t]], mv->dev[t] = devs[order[t]];
    } else {
      /* the devices whose needs meet box and lack it whole */
      int32_t n_to = 0, *to = s->scratch + n;
      loom_vbox inter;
      for (int32_t k = 0; k < s->n_needs; k++) {
        int32_t d = s->needs[k].dev;
        if (!loom_vbox_intersect(&s->needs[k].box, box, &inter) || holds(x->pc, x->n, d, box, true))
          continue;
        bool dup = false;
        for (int32_t j = 0; j < n_to && !dup; j++)
          dup = to[j] == d;
        if (!dup) to[n_to++] = d;
      }
      lower_move *mv = add_move(s, LOWER_MV_SEND_PARTS, n, n_to, box);
      if (!mv) break;
      for (int32_t m = 0; m < n; m++)
        mv->piece[m] = idx[at + m], mv->dev[m] = devs[m];
      memcpy(mv->to, to, sizeof *to * (size_t)n_to);
    }
  }
  return s->n_step > 0;
}

/* Devices that need exactly q and lack it. */
static int32_t lacking(const search *s, const snode *x, const loom_vbox *q, int32_t *devs) {
  int32_t n = 0;
  for (int32_t k = 0; k < s->n_needs; k++) {
    int32_t d = s->needs[k].dev;
    if (!loom_vbox_equal(&s->needs[k].box, q) || holds(x->pc, x->n, d, q, true)) continue;
    bool dup = false;
    for (int32_t j = 0; j < n && !dup; j++)
      dup = devs[j] == d;
    if (!dup) devs[n++] = d;
  }
  return n;
}

/* An all-gather of q among devs[0..n) if they hold even tiles of it
 * along one axis, one each. */
static bool gather_move(search *s, const snode *x, const loom_vbox *q, int32_t n,
                        const int32_t *devs) {
  int32_t tiles[LOOM_PLAN_MAX_DEVICES];
  for (int32_t ax = 0; ax < q->rank; ax++) {
    int64_t ext = q->end[ax] - q->start[ax];
    if (ext % n) continue;
    int64_t tile = ext / n;
    int32_t found = 0;
    for (int32_t t = 0; t < n; t++)
      tiles[t] = -1;
    for (int32_t m = 0; m < n; m++)
      for (int32_t k = 0; k < x->n; k++) {
        const lower_piece *pc = &x->pc[k];
        if (pc->K != 1 || pc->dev != devs[m] || !loom_vbox_contains(q, &pc->box)) continue;
        bool ok = pc->box.end[ax] - pc->box.start[ax] == tile &&
                  (pc->box.start[ax] - q->start[ax]) % tile == 0;
        for (int32_t d = 0; d < q->rank && ok; d++)
          if (d != ax && (pc->box.start[d] != q->start[d] || pc->box.end[d] != q->end[d]))
            ok = false;
        int32_t t = ok ? (int32_t)((pc->box.start[ax] - q->start[ax]) / tile) : -1;
        if (t >= 0 && tiles[t] < 0) {
          tiles[t] = k;
          found++;
          break;
        }
      }
    if (found != n) continue;
    lower_move *mv = add_move(s, LOWER_MV_ALL_GATHER, n, 0, q);
    if (!mv) return false;
    mv->axis = ax;
    for (int32_t t = 0; t < n; t++)
      mv->piece[t] = tiles[t], mv->dev[t] = x->pc[tiles[t]].dev;
    return true;
  }
  return false;
}

/* A broadcast of q to devs[0..n) when none of them holds any of it and
 * another device holds all of it (the nearest to devs[0] the root). */
static void broadcast_move(search *s, const snode *x, const loom_vbox *q, int32_t n,
                           const int32_t *devs) {
  int32_t root = -1;
  for (int32_t k = 0; k < x->n; k++) {
    const lower_piece *pc = &x->pc[k];
    loom_vbox inter;
    if (pc->K != 1) continue;
    bool member = false;
    for (int32_t m = 0; m < n && !member; m++)
      member = devs[m] == pc->dev;
    if (member && loom_vbox_intersect(&pc->box, q, &inter)) return;
    if (!member && loom_vbox_contains(&pc->box, q) &&
        (root < 0 || dev_distance(pc->dev, devs[0]) < dev_distance(x->pc[root].dev, devs[0])))
      root = k;
  }
  if (root < 0) return;
  lower_move *mv = add_move(s, LOWER_MV_BROADCAST, n + 1, 0, q);
  if (!mv) return;
  mv->piece[0] = root;
  mv->dev[0] = x->pc[root].dev;
  for (int32_t m = 0; m < n; m++)
    mv->piece[m + 1] = -1, mv->dev[m + 1] = devs[m];
}

/* All-to-all groups: a device holding tile i along axis a of a box B and
 * needing tile i along axis b of B (its piece and its need agree on every
 * other dim), for the same n; B, a, b, n and the members found so far. */
typedef struct a2a_group {
  loom_vbox box;
  int32_t a, b, n, found;
  int32_t *piece; /* per tile index */
} a2a_group;

/* If piece box p and need box q are tile i along a and tile i along b of
 * one box, for some a != b and n >= 2: fills *g (box, a, b, n), *i. */
static bool a2a_relation(const loom_vbox *p, const loom_vbox *q, a2a_group *g, int32_t *i) {
  int32_t a = -1, b = -1;
  for (int32_t d = 0; d < p->rank; d++) {
    if (p->start[d] == q->start[d] && p->end[d] == q->end[d]) continue;
    if (p->start[d] >= q->start[d] && p->end[d] <= q->end[d] && a < 0)
      a = d; /* p is a tile of q's range */
    else if (q->start[d] >= p->start[d] && q->end[d] <= p->end[d] && b < 0)
      b = d;
    else
      return false;
  }
  if (a < 0 || b < 0) return false;
  int64_t pa = p->end[a] - p->start[a], qa = q->end[a] - q->start[a];
  int64_t pb = p->end[b] - p->start[b], qb = q->end[b] - q->start[b];
  if (qa % pa || pb % qb || qa / pa != pb / qb || qa / pa < 2) return false;
  int64_t ia = p->start[a] - q->start[a], ib = q->start[b] - p->start[b];
  if (ia % pa || ib % qb || ia / pa != ib / qb) return false;
  g->box = *p;
  g->box.start[a] = q->start[a];
  g->box.end[a] = q->end[a];
  g->a = a;
  g->b = b;
  g->n = (int32_t)(qa / pa);
  *i = (int32_t)(ia / pa);
  return true;
}

static void all_to_all_moves(search *s, const snode *x) {
  a2a_group *groups = NULL;
  int32_t n_groups = 0, cap = 0;
  for (int32_t k = 0; k < s->n_needs && !s->oom; k++) {
    const lower_need *nd = &s->needs[k];
    if (holds(x->pc, x->n, nd->dev, &nd->box, false)) continue;
    for (int32_t j = 0; j < x->n; j++) {
      const lower_piece *pc = &x->pc[j];
      a2a_group key;
      int32_t i;
      if (pc->K != 1 || pc->dev != nd->dev || !a2a_relation(&pc->box, &nd->box, &key, &i)) continue;
      int32_t g = 0;
      while (g < n_groups && !(loom_vbox_equal(&groups[g].box, &key.box) && groups[g].a == key.a &&
                               groups[g].b == key.b && groups[g].n == key.n))
        g++;
      if (g == n_groups) {
        if (!loom_grow(s->w->ctx, (void **)&groups, &cap, n_groups + 1, sizeof *groups) ||
            !(key.piece = malloc(sizeof *key.piece * (size_t)key.n))) {
          s->oom = true;
          break;
        }
        for (int32_t t = 0; t < key.n; t++)
          key.piece[t] = -1;
        key.found = 0;
        groups[n_groups++] = key;
      }
      bool member = false;
      for (int32_t t = 0; t < groups[g].n && !member; t++)
        member = groups[g].piece[t] >= 0 && x->pc[groups[g].piece[t]].dev == nd->dev;
      if (groups[g].piece[i] < 0 && !member) groups[g].piece[i] = j, groups[g].found++;
      break;
    }
  }
  for (int32_t g = 0; g < n_groups; g++) {
    a2a_group *gr = &groups[g];
    lower_move *mv =
        gr->found == gr->n && !s->oom ? add_move(s, LOWER_MV_ALL_TO_ALL, gr->n, 0, &gr->box) : NULL;
    if (mv) {
      mv->axis = gr->b;
      mv->axis2 = gr->a;
      for (int32_t t = 0; t < gr->n; t++)
        mv->piece[t] = gr->piece[t], mv->dev[t] = x->pc[gr->piece[t]].dev;
    }
    free(gr->piece);
  }
  free(groups);
}

/* Whole-value step `kind` (0 all-gather, 1 broadcast, 2 all-to-all) from x. */
static bool whole_step(search *s, const snode *x, int32_t kind) {
  if (kind == 2) {
    all_to_all_moves(s, x);
    return s->n_step > 0;
  }
  int32_t *devs = s->scratch;
  for (int32_t k = 0; k < s->n_needs && !s->oom; k++) {
    const loom_vbox *q = &s->needs[k].box;
    bool seen = false;
    for (int32_t j = 0; j < k && !seen; j++)
      seen = loom_vbox_equal(&s->needs[j].box, q);
    int32_t n = seen ? 0 : lacking(s, x, q, devs);
    if (n < 2) continue;
    if (kind == 0)
      gather_move(s, x, q, n, devs);
    else
      broadcast_move(s, x, q, n, devs);
  }
  return s->n_step > 0;
}

/* ---- states -------------------------------------------------------------------------- */

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

/* The state's pieces as a set: an order-free hash of the live ones. */
static uint64_t state_hash(const lower_piece *pc, int32_t n) {
  uint64_t sum = 0;
  for (int32_t k = 0; k < n; k++) {
    if (pc[k].K < 1) continue;
    uint64_t h = mix((uint64_t)pc[k].dev * 131 + (uint64_t)pc[k].parts * 7 + (uint64_t)pc[k].K);
    h = mix(h ^ (uint64_t)pc[k].replica);
    for (int32_t d = 0; d < pc[k].box.rank; d++)
      h = mix(h ^ ((uint64_t)pc[k].box.start[d] << 32 ^ (uint64_t)pc[k].box.end[d]));
    sum += h;
  }
  return sum;
}

/* Adds the child of node `at` that s->step makes (the step is moved into it). */
static void add_child(search *s, int32_t at) {
  const snode *x = &s->nodes[at];
  int32_t grow = 0;
  for (int32_t i = 0; i < s->n_step; i++)
    grow += s->step[i].n > s->step[i].n_to ? s->step[i].n : s->step[i].n_to;
  lower_piece *pc = loom_malloc(s->w->ctx, sizeof *pc * (size_t)(x->n + grow + 1));
  if (!pc) {
    s->oom = true;
    return;
  }
  memcpy(pc, x->pc, sizeof *pc * (size_t)x->n);
  int32_t n = x->n;
  s->ops = 0;
  for (int32_t i = 0; i < s->n_step; i++) {
    const lower_move *m = &s->step[i];
    charge_move(s, m);
    n += lower_move_results(m, pc + n);
    if (m->kind <= LOWER_MV_SEND_PARTS)
      for (int32_t t = 0; t < m->n; t++)
        pc[m->piece[t]].K = -1;
  }
  int32_t ops = s->ops;
  double g = x->g + settle(s);
  uint64_t h = state_hash(pc, n);
  for (int32_t i = 0; i < s->n_nodes; i++)
    if (s->nodes[i].hash == h && s->nodes[i].g <= g) {
      free(pc);
      return;
    }
  if (!loom_grow(s->w->ctx, (void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) {
    free(pc);
    s->oom = true;
    return;
  }
  x = &s->nodes[at];
  lower_move *moves = loom_malloc(s->w->ctx, sizeof *moves * (size_t)s->n_step);
  if (!moves) {
    free(pc);
    s->oom = true;
    return;
  }
  memcpy(moves, s->step, sizeof *moves * (size_t)s->n_step);
  s->nodes[s->n_nodes++] =
      (snode){pc, n, at, x->depth + 1, s->n_step, moves, g, x->ops + ops, h, false};
  s->n_step = 0; /* the child owns the moves */
}

/* a before b: cheaper, or as cheap with fewer comm ops. */
static bool better(double a, int32_t a_ops, double b, int32_t b_ops) {
  if (isinf(a) || isinf(b)) return a < b || (a == b && a_ops < b_ops);
  double eps = 1e-9 * fmax(fabs(a), fabs(b));
  return a < b - eps || (a <= b + eps && a_ops < b_ops);
}

static loom_status take_path(search *s, int32_t best, lower_path *out) {
  int32_t n = 0;
  for (int32_t i = best; i > 0; i = s->nodes[i].parent)
    n += s->nodes[i].n_moves;
  out->moves = loom_malloc(s->w->ctx, sizeof *out->moves * (size_t)(n + 1));
  if (!out->moves) return LOOM_STATUS_OUT_OF_MEMORY;
  out->n_moves = n;
  for (int32_t i = best; i > 0; i = s->nodes[i].parent) {
    snode *x = &s->nodes[i];
    n -= x->n_moves;
    memcpy(out->moves + n, x->moves, sizeof *x->moves * (size_t)x->n_moves);
    x->n_moves = 0; /* the path owns them now */
  }
  return LOOM_STATUS_OK;
}

loom_status lower_search(const lower_walk *w, int32_t v, int32_t n_needs, const lower_need *needs,
                         lower_path *out) {
  *out = (lower_path){0, NULL};
  const lower_plist *l = &w->avail[v];
  const loom_type *t = loom_value_type(w->L, v);
  int32_t nd = w->p->n_devices;
  search s = {.w = w,
              .v = v,
              .n_needs = n_needs,
              .needs = needs,
              .esize = (int64_t)loom_dtype_size(t->dtype)};
  s.bytes = loom_calloc(w->ctx, (size_t)nd, sizeof *s.bytes);
  s.lat = loom_calloc(w->ctx, (size_t)nd, sizeof *s.lat);
  s.touched = loom_malloc(w->ctx, sizeof *s.touched * (size_t)nd);
  s.scratch = loom_malloc(w->ctx, sizeof *s.scratch * (size_t)(nd + l->n + n_needs + 1));
  int32_t *idx = loom_malloc(w->ctx, sizeof *idx * (size_t)(l->n + 1));
  int32_t *len = loom_malloc(w->ctx, sizeof *len * (size_t)(l->n + 1));
  lower_piece *root = loom_malloc(w->ctx, sizeof *root * (size_t)(l->n + 1));
  s.oom = !s.bytes || !s.lat || !s.touched || !s.scratch || !idx || !len || !root ||
          !loom_grow(w->ctx, (void **)&s.nodes, &s.cap_nodes, 1, sizeof *s.nodes);
  int32_t best = -1, best_ops = 0;
  double best_cost = INFINITY;
  if (!s.oom) {
    memcpy(root, l->v, sizeof *root * (size_t)l->n);
    s.nodes[s.n_nodes++] = (snode){root, l->n, -1, 0, 0, NULL, 0, 0, state_hash(root, l->n), false};
    root = NULL;
  }
  while (!s.oom) {
    /* best-first: the cheapest state not expanded yet */
    int32_t at = -1;
    for (int32_t i = 0; i < s.n_nodes; i++)
      if (!s.nodes[i].expanded &&
          (at < 0 || better(s.nodes[i].g, s.nodes[i].ops, s.nodes[at].g, s.nodes[at].ops)))
        at = i;
    if (at < 0 || !better(s.nodes[at].g, s.nodes[at].ops, best_cost, best_ops + 1)) break;
    s.nodes[at].expanded = true;
    int32_t n_groups = needed_groups(&s, &s.nodes[at], idx, len);
    if (n_groups < 0) {
      s.oom = true;
      break;
    }
    bool goal = n_groups == 0, any = false;
    for (int32_t kind = 0; kind < 3 && !s.oom && s.nodes[at].depth < MAX_STEPS; kind++) {
      bool made = goal ? whole_step(&s, &s.nodes[at], kind)
                       : partial_step(&s, &s.nodes[at], kind, n_groups, idx, len);
      if (made) add_child(&s, at), any = true;
      free_moves(s.step, s.n_step);
      s.n_step = 0;
    }
    if (!goal) continue;
    /* what is left is assembled point to point (nothing to price when no
     * step could be taken from the start: that is the only way) */
    int32_t ops = 0;
    double c = at == 0 && !any ? 0 : s.nodes[at].g + terminal_cost(&s, &s.nodes[at], &ops);
    if (better(c, s.nodes[at].ops + ops, best_cost, best_ops)) {
      best = at;
      best_cost = c;
      best_ops = s.nodes[at].ops + ops;
    }
  }
  loom_status st = s.oom ? LOOM_STATUS_OUT_OF_MEMORY : LOOM_STATUS_OK;
  if (!st && best > 0) st = take_path(&s, best, out);
  for (int32_t i = 0; i < s.n_nodes; i++) {
    free_moves(s.nodes[i].moves, s.nodes[i].n_moves);
    free(s.nodes[i].moves);
    free(s.nodes[i].pc);
  }
  free(s.nodes);
  free(s.step);
  free(root);
  free(idx);
  free(len);
  free(s.scratch);
  free(s.touched);
  free(s.lat);
  free(s.bytes);
  return st;
}

void lower_path_free(lower_path *p) {
  free_moves(p->moves, p->n_moves);
  free(p->moves);
  *p = (lower_path){0, NULL};
}

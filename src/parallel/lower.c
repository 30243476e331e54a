/*
 * The dependency finder: walks the logical graph in order, emits every
 * sub-op into the global graph over its pieces, and brings each value's
 * pieces to where they are needed (lower_move.c chooses how). See lower.h.
 */
#include "parallel/lower_internal.h"

#include "ir/build.h"
#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void loom_plan_program_free(loom_plan_program *pp) {
  if (!pp) return;
  loom_graph_free(pp->global);
  free(pp->node_device);
  free(pp->value_device);
  free(pp->node_subop);
  free(pp->group_start);
  free(pp->group_ranks);
  free(pp->comms);
  free(pp->order_start);
  free(pp->order_nodes);
  free(pp->ins);
  free(pp->outs);
  free(pp->output_tied);
  free(pp->stats);
  free(pp);
}

loom_status lower_tag(lower_walk *w, int32_t dev, int32_t s) {
  loom_plan_program *pp = w->pp;
  loom_graph *G = w->G;
  if (!loom_grow(w->ctx, (void **)&pp->node_device, &w->cap_node_tags, G->n_nodes,
                 sizeof *pp->node_device))
    return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t cap = w->cap_node_tags;
  int32_t *ns = loom_realloc(w->ctx, pp->node_subop, sizeof *ns * (size_t)(cap ? cap : 1));
  if (!ns) return LOOM_STATUS_OUT_OF_MEMORY;
  pp->node_subop = ns;
  int32_t vcap = w->cap_value_tags;
  if (!loom_grow(w->ctx, (void **)&pp->value_device, &vcap, G->n_values,
                 sizeof *pp->value_device))
    return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t v = w->cap_value_tags; v < vcap; v++) pp->value_device[v] = -1;
  w->cap_value_tags = vcap;
  for (int32_t i = w->tagged; i < G->n_nodes; i++) {
    pp->node_device[i] = dev;
    pp->node_subop[i] = s;
    const loom_node *n = &G->nodes[i];
    for (int32_t o = 0; o < n->n_out; o++) pp->value_device[n->out[o]] = dev;
  }
  w->tagged = G->n_nodes;
  return LOOM_STATUS_OK;
}

int32_t lower_group(lower_walk *w, int32_t n, const int32_t *members) {
  loom_plan_program *pp = w->pp;
  for (int32_t g = 0; g < pp->n_groups; g++) {
    int32_t a = pp->group_start[g], b = pp->group_start[g + 1];
    if (b - a == n && memcmp(pp->group_ranks + a, members, sizeof *members * (size_t)n) == 0)
      return g;
  }
  int32_t need = pp->n_groups + 2;
  if (!loom_grow(w->ctx, (void **)&pp->group_start, &w->cap_groups, need, sizeof *pp->group_start))
    return -1;
  int32_t at = pp->group_start[pp->n_groups];
  if (!loom_grow(w->ctx, (void **)&pp->group_ranks, &w->cap_ranks, at + n, sizeof *pp->group_ranks))
    return -1;
  memcpy(pp->group_ranks + at, members, sizeof *members * (size_t)n);
  pp->group_start[++pp->n_groups] = at + n;
  return pp->n_groups - 1;
}

loom_status lower_add_piece(lower_walk *w, int32_t v, lower_piece piece) {
  lower_plist *l = &w->avail[v];
  if (!loom_grow(w->ctx, (void **)&l->v, &l->cap, l->n + 1, sizeof *l->v))
    return LOOM_STATUS_OUT_OF_MEMORY;
  l->v[l->n++] = piece;
  return LOOM_STATUS_OK;
}

/* ---- validation before the walk ------------------------------------------ */

static loom_status check_leaves(lower_walk *w) {
  const loom_plan *p = w->p;
  char name[96];
  for (int32_t node = 0; node < w->L->n_nodes; node++)
    for (int32_t k = 0; k < w->n_leaves[node]; k++) {
      int32_t s = w->leaves[node][k];
      if (p->subops[s].device < 0)
        return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "plan: %s is assigned to no device (op_assign it, or its node)",
                          loom_subop_name(p, s, name, sizeof name));
    }
  for (int32_t i = 0; i < p->n_orders; i++) {
    const loom_plan_order *o = &p->orders[i];
    char na[96], nb[96];
    loom_subop_name(p, o->before, na, sizeof na);
    loom_subop_name(p, o->after, nb, sizeof nb);
    for (int32_t j = 0; j < 2; j++) {
      int32_t s = j ? o->after : o->before;
      if (p->subops[s].n_children)
        return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "plan: op_order(%s, %s): %s is cut into %d parts; order its parts", na,
                          nb, j ? nb : na, p->subops[s].n_children);
    }
    int32_t da = p->subops[o->before].device, db = p->subops[o->after].device;
    if (da != db)
      return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: op_order(%s, %s): %s is on device %d and %s on device %d; "
                        "op_order orders two sub-ops of one device",
                        na, nb, na, da, nb, db);
    if (o->before == o->after)
      return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: op_order(%s, %s) orders a sub-op before itself", na, nb);
  }
  return LOOM_STATUS_OK;
}

/* The piece (vtensor terms) a leaf writes to output o, for the cover check. */
static void leaf_piece(const loom_plan *p, int32_t s, const loom_vbox *box, loom_vpiece *out) {
  const loom_subop *sub = &p->subops[s];
  const loom_partition *pa = &p->part[sub->node];
  const int64_t *ext = p->ext[sub->node];
  out->box = *box;
  int32_t k = 0, K = 1;
  for (int32_t l = 0; l < pa->n_labels; l++) {
    if (pa->split[l] != LOOM_SPLIT_PARTIAL) continue;
    int64_t span = sub->r.hi[l] - sub->r.lo[l];
    if (span <= 0 || span == ext[l]) continue;
    int32_t parts = (int32_t)(ext[l] / span);
    k = k * parts + (int32_t)(sub->r.lo[l] / span);
    K *= parts;
  }
  out->value_k = k;
  out->value_n = K;
  out->replica = sub->replica;
  out->replicas = sub->replicas;
}

/* Every node's leaves cut its label space exactly: replicas aside, no
 * two overlap and together they cover it (each piece of each output is
 * then produced exactly once, whatever mix of nested cuts made them). */
static loom_status check_cover(lower_walk *w) {
  const loom_plan *p = w->p;
  for (int32_t node = 0; node < w->L->n_nodes; node++) {
    int32_t n = w->n_leaves[node];
    if (n == 1) continue;
    const loom_partition *pa = &p->part[node];
    const int64_t *ext = p->ext[node];
    double total = 1, covered = 0;
    for (int32_t l = 0; l < pa->n_labels; l++) total *= (double)ext[l];
    for (int32_t i = 0; i < n; i++) {
      const loom_subop *a = &p->subops[w->leaves[node][i]];
      double vol = 1;
      for (int32_t l = 0; l < pa->n_labels; l++) vol *= (double)(a->r.hi[l] - a->r.lo[l]);
      covered += vol / a->replicas;
      for (int32_t j = i + 1; j < n && n <= 4096; j++) {
        const loom_subop *b = &p->subops[w->leaves[node][j]];
        bool meet = true;
        for (int32_t l = 0; l < pa->n_labels && meet; l++)
          meet = a->r.lo[l] < b->r.hi[l] && b->r.lo[l] < a->r.hi[l];
        if (meet && (a->replicas == 1 || b->replicas == 1 || a->replica == b->replica)) {
          char na[96], nb[96];
          return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                            "plan: %s and %s compute the same part (a piece produced twice)",
                            loom_subop_name(p, w->leaves[node][i], na, sizeof na),
                            loom_subop_name(p, w->leaves[node][j], nb, sizeof nb));
        }
      }
    }
    if (covered < total * (1 - 1e-12)) {
      char nm[96];
      return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "plan: the parts of %s leave some of it uncomputed",
                        loom_subop_name(p, node, nm, sizeof nm));
    }
  }
  return LOOM_STATUS_OK;
}

/* ---- needs ---------------------------------------------------------------- */

static loom_status add_need(loom_ctx *ctx, lower_need **needs, int32_t *n, int32_t *cap,
                            int32_t dev, const loom_vbox *box) {
  for (int32_t i = 0; i < *n; i++)
    if ((*needs)[i].dev == dev && loom_vbox_equal(&(*needs)[i].box, box)) return LOOM_STATUS_OK;
  if (!loom_grow(ctx, (void **)needs, cap, *n + 1, sizeof **needs)) return LOOM_STATUS_OUT_OF_MEMORY;
  (*needs)[(*n)++] = (lower_need){dev, *box};
  return LOOM_STATUS_OK;
}

/* The boxes leaf s of node reads (in_box) and writes (out_box). */
static void leaf_boxes(const lower_walk *w, int32_t node, int32_t s, loom_vbox *ib, loom_vbox *ob) {
  const loom_graph *L = w->L;
  const loom_node *n = &L->nodes[node];
  loom_type tin[LOOM_PART_MAX_IO], tout[LOOM_PART_MAX_IO];
  for (int32_t i = 0; i < n->n_in; i++) tin[i] = *loom_value_type(L, n->in[i]);
  for (int32_t o = 0; o < n->n_out; o++) tout[o] = *loom_value_type(L, n->out[o]);
  loom_subop_boxes(&w->p->part[node], w->p->ext[node], tin, tout, &w->p->subops[s].r, ib, ob);
}

/* Where graph output o is delivered: its placement's pieces (or its tied
 * input's: held or fed), else whole on device 0. */
static loom_status output_needs_of(lower_walk *w, int32_t o, lower_need **needs, int32_t *n,
                                   int32_t *cap) {
  const loom_graph *L = w->L;
  const loom_plan *p = w->p;
  const loom_plan_placement *pl = &p->outputs[o];
  int32_t tie = p->tied[o];
  if (!pl->set && tie >= 0 && p->inputs[tie].set) pl = &p->inputs[tie];
  if (pl->set) {
    for (int32_t j = 0; j < pl->layout.n_pieces; j++) {
      loom_vpiece pc;
      loom_vlayout_piece(&pl->layout, j, &pc);
      LOOM_TRY(add_need(w->ctx, needs, n, cap, pl->devices[j], &pc.box));
    }
  } else if (tie >= 0) {
    for (int32_t k = w->first_feed[tie]; k >= 0; k = w->next_feed[k])
      LOOM_TRY(add_need(w->ctx, needs, n, cap, w->pp->ins[k].device, &w->pp->ins[k].box));
  } else {
    loom_vbox whole = loom_vbox_full(loom_value_type(L, L->outputs[o]));
    LOOM_TRY(add_need(w->ctx, needs, n, cap, 0, &whole));
  }
  return LOOM_STATUS_OK;
}

/* The output needs of value v: every graph output it is. */
static loom_status output_needs(lower_walk *w, int32_t v, lower_need **needs, int32_t *n,
                                int32_t *cap) {
  for (int32_t o = w->first_output[v]; o >= 0; o = w->next_output[o])
    LOOM_TRY(output_needs_of(w, o, needs, n, cap));
  return LOOM_STATUS_OK;
}

/* Every (device, box) some consumer sub-op of v, or a graph output, reads. */
static loom_status value_needs(lower_walk *w, int32_t v, lower_need **needs, int32_t *n) {
  int32_t cap = 0;
  *needs = NULL;
  *n = 0;
  loom_status st = LOOM_STATUS_OK;
  for (int32_t u = w->use_start[v]; !st && u < w->use_start[v + 1]; u++) {
    int32_t node = w->use_node[u];
    const loom_node *nd = &w->L->nodes[node];
    for (int32_t k = 0; !st && k < w->n_leaves[node]; k++) {
      int32_t s = w->leaves[node][k];
      loom_vbox ib[LOOM_PART_MAX_IO], ob[LOOM_PART_MAX_IO];
      leaf_boxes(w, node, s, ib, ob);
      for (int32_t i = 0; !st && i < nd->n_in; i++)
        if (nd->in[i] == v) st = add_need(w->ctx, needs, n, &cap, w->p->subops[s].device, &ib[i]);
    }
  }
  if (!st) st = output_needs(w, v, needs, n, &cap);
  if (st) {
    free(*needs);
    *needs = NULL;
  }
  return st;
}

/* ---- inputs: feeds ---------------------------------------------------------- */

static loom_status feed(lower_walk *w, int32_t input, int32_t dev, const loom_vbox *box) {
  loom_graph *G = w->G;
  int32_t gin = G->inputs[input];
  const loom_type *t = loom_value_type(G, gin);
  int64_t lo[LOOM_MAX_RANK], hi[LOOM_MAX_RANK];
  for (int32_t d = 0; d < t->rank; d++) {
    lo[d] = box->start[d];
    hi[d] = box->end[d];
  }
  int32_t gv = lb_slice(G, gin, lo, hi);
  LOOM_TRY(loom_build_status(G));
  LOOM_TRY(lower_tag(w, dev, LOWER_FEED));
  loom_plan_program *pp = w->pp;
  if (!loom_grow(w->ctx, (void **)&pp->ins, &w->cap_ins, pp->n_ins + 1, sizeof *pp->ins))
    return LOOM_STATUS_OUT_OF_MEMORY;
  pp->ins[pp->n_ins++] = (loom_plan_io){dev, input, *box, gv};
  lower_piece pc = {.dev = dev, .box = *box, .parts = 1, .K = 1, .combine = LOOM_OP_ADD, .gv = gv};
  return lower_add_piece(w, w->L->inputs[input], pc);
}

static loom_status feed_inputs(lower_walk *w) {
  const loom_graph *L = w->L;
  const loom_plan *p = w->p;
  for (int32_t i = 0; i < L->n_inputs; i++) {
    int32_t v = L->inputs[i];
    const loom_plan_placement *pl = &p->inputs[i];
    if (pl->set) {
      for (int32_t j = 0; j < pl->layout.n_pieces; j++) {
        loom_vpiece pc;
        loom_vlayout_piece(&pl->layout, j, &pc);
        if (pc.value_n > 1)
          return loom_error(w->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                            "plan: input %s is held as partial sums (%s); an input holds values",
                            L->values[v].name, "V");
        LOOM_TRY(feed(w, i, pl->devices[j], &pc.box));
      }
      continue;
    }
    lower_need *needs = NULL;
    int32_t n = 0;
    LOOM_TRY(value_needs(w, v, &needs, &n));
    loom_status st = LOOM_STATUS_OK;
    for (int32_t k = 0; !st && k < n; k++) st = feed(w, i, needs[k].dev, &needs[k].box);
    free(needs);
    LOOM_TRY(st);
  }
  /* each input's feeds, in order, for the outputs tied to it */
  loom_plan_program *pp = w->pp;
  w->first_feed = loom_malloc(w->ctx, sizeof(int32_t) * (size_t)(L->n_inputs + 1));
  w->next_feed = loom_malloc(w->ctx, sizeof(int32_t) * (size_t)(pp->n_ins + 1));
  if (!w->first_feed || !w->next_feed) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < L->n_inputs; i++) w->first_feed[i] = -1;
  for (int32_t k = pp->n_ins - 1; k >= 0; k--) {
    w->next_feed[k] = w->first_feed[pp->ins[k].index];
    w->first_feed[pp->ins[k].index] = k;
  }
  return LOOM_STATUS_OK;
}

/* ---- the walk ------------------------------------------------------------- */

static loom_status resolve(lower_walk *w, int32_t v) {
  if (w->resolved[v]) return LOOM_STATUS_OK;
  w->resolved[v] = true;
  lower_need *needs = NULL;
  int32_t n = 0;
  LOOM_TRY(value_needs(w, v, &needs, &n));
  loom_status st = lower_move_value(w, v, n, needs);
  free(needs);
  return st;
}

static const char *value_name(const loom_graph *g, int32_t v, char *buf, size_t n) {
  if (g->values[v].name) snprintf(buf, n, "%%%s", g->values[v].name);
  else snprintf(buf, n, "%%%d", v);
  return buf;
}

/* A leaf's part: its device and label ranges, then its place in the list. */
typedef struct leaf_key {
  int32_t device, k;
  const loom_subop_ranges *r;
} leaf_key;

static bool same_part(const leaf_key *a, const leaf_key *b) {
  if (a->device != b->device || a->r->n_labels != b->r->n_labels) return false;
  for (int32_t l = 0; l < a->r->n_labels; l++)
    if (a->r->lo[l] != b->r->lo[l] || a->r->hi[l] != b->r->hi[l]) return false;
  return true;
}

static int cmp_leaf_key(const void *pa, const void *pb) {
  const leaf_key *a = pa, *b = pb;
  if (a->device != b->device) return a->device < b->device ? -1 : 1;
  if (a->r->n_labels != b->r->n_labels) return a->r->n_labels < b->r->n_labels ? -1 : 1;
  for (int32_t l = 0; l < a->r->n_labels; l++) {
    if (a->r->lo[l] != b->r->lo[l]) return a->r->lo[l] < b->r->lo[l] ? -1 : 1;
    if (a->r->hi[l] != b->r->hi[l]) return a->r->hi[l] < b->r->hi[l] ? -1 : 1;
  }
  return a->k - b->k;
}

/* ord[k]: how many of node's leaves before leaf k compute its very part on
 * its device: 0 for the first, j > 0 for the j-th recomputation (a replica
 * on the same device, +recompute's copy). The mark (loom_node.copy) keeps
 * the session's common-subexpression elimination from merging it back.
 * Sorted, so a node cut for a thousand devices costs no square. */
static loom_status leaf_ordinals(const lower_walk *w, int32_t node, int32_t *ord) {
  int32_t n = w->n_leaves[node];
  leaf_key *keys = loom_malloc(w->ctx, sizeof *keys * (size_t)(n ? n : 1));
  if (!keys) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t k = 0; k < n; k++) {
    const loom_subop *sub = &w->p->subops[w->leaves[node][k]];
    keys[k] = (leaf_key){sub->device, k, &sub->r};
  }
  qsort(keys, (size_t)n, sizeof *keys, cmp_leaf_key);
  for (int32_t j = 0; j < n; j++)
    ord[keys[j].k] = j > 0 && same_part(&keys[j - 1], &keys[j]) ? ord[keys[j - 1].k] + 1 : 0;
  free(keys);
  return LOOM_STATUS_OK;
}

static loom_status emit_leaf(lower_walk *w, int32_t node, int32_t s, int32_t copy) {
  const loom_graph *L = w->L;
  const loom_node *n = &L->nodes[node];
  const loom_plan *p = w->p;
  const loom_subop *sub = &p->subops[s];
  loom_vbox ib[LOOM_PART_MAX_IO], ob[LOOM_PART_MAX_IO];
  leaf_boxes(w, node, s, ib, ob);
  int32_t in[LOOM_PART_MAX_IO], out[LOOM_PART_MAX_IO];
  char name[96], vb[64], bb[160];
  for (int32_t i = 0; i < n->n_in; i++) {
    int32_t k = sub->reads_last ? lower_find_last_piece(w, n->in[i], sub->device, &ib[i])
                                : lower_find_piece(w, n->in[i], sub->device, &ib[i]);
    if (k < 0)
      return loom_error(w->ctx, LOOM_STATUS_INTERNAL,
                        "plan: %s on device %d: the piece %s of %s it reads was not brought there",
                        loom_subop_name(p, s, name, sizeof name), sub->device,
                        loom_vbox_str(&ib[i], bb, sizeof bb), value_name(L, n->in[i], vb, sizeof vb));
    in[i] = w->avail[n->in[i]].v[k].gv;
  }
  loom_type tin[LOOM_PART_MAX_IO], tout[LOOM_PART_MAX_IO];
  for (int32_t i = 0; i < n->n_in; i++) tin[i] = *loom_value_type(L, n->in[i]);
  for (int32_t o = 0; o < n->n_out; o++) tout[o] = *loom_value_type(L, n->out[o]);
  loom_attr_value attrs[LOOM_MAX_ATTRS];
  LOOM_TRY(loom_subop_attrs(w->ctx, n, tin, tout, ib, ob, attrs));
  loom_status st = loom_graph_add(w->G, n->op, n->n_in, in, attrs, n->n_out, out);
  if (st) {
    loom_error_prefix(w->ctx, "plan: %s", loom_subop_name(p, s, name, sizeof name));
    return st;
  }
  w->G->nodes[w->G->n_nodes - 1].copy = copy;
  LOOM_TRY(lower_tag(w, sub->device, s));
  loom_op combine = LOOM_OP_ADD;
  bool partial = loom_subop_is_partial(&p->part[node], p->ext[node], &sub->r, &combine);
  loom_vpiece vp;
  for (int32_t o = 0; o < n->n_out; o++) {
    loom_vpiece want = {.box = ob[o]};
    loom_type pt = loom_vpiece_type(&tout[o], &want);
    if (!loom_type_equal(&pt, loom_value_type(w->G, out[o]))) {
      char b1[96], b2[96];
      return loom_error(w->ctx, LOOM_STATUS_INTERNAL,
                        "plan: %s computes %s for output %d, its piece %s is %s (the op's "
                        "partition annotation or sub_attrs rule is wrong)",
                        loom_subop_name(p, s, name, sizeof name),
                        loom_type_str(loom_value_type(w->G, out[o]), b1, sizeof b1), o,
                        loom_vbox_str(&ob[o], bb, sizeof bb), loom_type_str(&pt, b2, sizeof b2));
    }
    leaf_piece(p, s, &ob[o], &vp);
    lower_piece pc = {.dev = sub->device, .box = ob[o], .parts = 1, .K = partial ? vp.value_n : 1,
                      .combine = combine, .replica = partial ? vp.replica : 0, .gv = out[o]};
    LOOM_TRY(lower_add_piece(w, n->out[o], pc));
  }
  return LOOM_STATUS_OK;
}

static loom_status build_uses(lower_walk *w) {
  const loom_graph *L = w->L;
  w->use_start = loom_calloc(w->ctx, (size_t)L->n_values + 1, sizeof *w->use_start);
  if (!w->use_start) return LOOM_STATUS_OUT_OF_MEMORY;
  int32_t total = 0;
  for (int32_t i = 0; i < L->n_nodes; i++)
    for (int32_t k = 0; k < L->nodes[i].n_in; k++) {
      /* a node using v twice is one use */
      bool dup = false;
      for (int32_t j = 0; j < k; j++) dup |= L->nodes[i].in[j] == L->nodes[i].in[k];
      if (!dup) {
        w->use_start[L->nodes[i].in[k] + 1]++;
        total++;
      }
    }
  for (int32_t v = 0; v < L->n_values; v++) w->use_start[v + 1] += w->use_start[v];
  w->first_output = loom_malloc(w->ctx, sizeof(int32_t) * (size_t)(L->n_values + 1));
  w->next_output = loom_malloc(w->ctx, sizeof(int32_t) * (size_t)(L->n_outputs + 1));
  if (!w->first_output || !w->next_output) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t v = 0; v < L->n_values; v++) w->first_output[v] = -1;
  for (int32_t o = L->n_outputs - 1; o >= 0; o--) {
    w->next_output[o] = w->first_output[L->outputs[o]];
    w->first_output[L->outputs[o]] = o;
  }
  w->use_node = loom_malloc(w->ctx, sizeof *w->use_node * (size_t)(total ? total : 1));
  int32_t *fill = loom_calloc(w->ctx, (size_t)L->n_values + 1, sizeof *fill);
  if (!w->use_node || !fill) {
    free(fill);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < L->n_nodes; i++)
    for (int32_t k = 0; k < L->nodes[i].n_in; k++) {
      bool dup = false;
      for (int32_t j = 0; j < k; j++) dup |= L->nodes[i].in[j] == L->nodes[i].in[k];
      if (dup) continue;
      int32_t v = L->nodes[i].in[k];
      w->use_node[w->use_start[v] + fill[v]++] = i;
    }
  free(fill);
  return LOOM_STATUS_OK;
}

/* A sum of partial sums stays partial: an add whose two operands are only
 * partial parts, cut alike (same boxes on the same devices) and read by
 * nothing else, is computed part by part on the parts' devices, and its
 * result joined once — a weight used twice (a tied embedding) gets one
 * all-reduce of its gradient, not two. */
static bool sum_of_partials(lower_walk *w, int32_t node, loom_status *st) {
  const loom_graph *L = w->L;
  const loom_node *n = &L->nodes[node];
  *st = LOOM_STATUS_OK;
  if (n->op != LOOM_OP_ADD || n->n_in != 2 || n->in[0] == n->in[1]) return false;
  const loom_type *to = loom_value_type(L, n->out[0]);
  for (int32_t i = 0; i < 2; i++) {
    int32_t v = n->in[i];
    if (!loom_type_equal(loom_value_type(L, v), to) || w->resolved[v]) return false;
    if (w->use_start[v + 1] - w->use_start[v] != 1) return false;
    for (int32_t o = 0; o < L->n_outputs; o++)
      if (L->outputs[o] == v) return false;
    if (w->avail[v].n == 0) return false;
    for (int32_t k = 0; k < w->avail[v].n; k++)
      if (w->avail[v].v[k].K <= 1) return false;
  }
  const lower_plist *a = &w->avail[n->in[0]], *b = &w->avail[n->in[1]];
  if (a->n != b->n) return false;
  for (int32_t k = 0; k < a->n; k++) {
    const lower_piece *x = &a->v[k], *y = &b->v[k];
    if (x->dev != y->dev || x->K != y->K || x->parts != y->parts || x->replica != y->replica ||
        x->combine != LOOM_OP_ADD || y->combine != LOOM_OP_ADD || !loom_vbox_equal(&x->box, &y->box))
      return false;
  }
  for (int32_t k = 0; k < a->n && !*st; k++) {
    lower_piece pc = a->v[k];
    pc.gv = lb_add(w->G, a->v[k].gv, w->avail[n->in[1]].v[k].gv);
    *st = loom_build_status(w->G);
    if (!*st) *st = lower_tag(w, pc.dev, LOWER_INSERTED);
    if (!*st) *st = lower_add_piece(w, n->out[0], pc);
  }
  w->resolved[n->in[0]] = w->resolved[n->in[1]] = true;
  return true;
}

static loom_status walk(lower_walk *w) {
  const loom_graph *L = w->L;
  LOOM_TRY(feed_inputs(w));
  for (int32_t i = 0; i < L->n_inputs; i++) w->resolved[L->inputs[i]] = false;
  int32_t most = 1;
  for (int32_t node = 0; node < L->n_nodes; node++) most = LOOM_MAX(most, w->n_leaves[node]);
  int32_t *ord = loom_malloc(w->ctx, sizeof *ord * (size_t)most);
  loom_status st = ord ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t node = 0; !st && node < L->n_nodes; node++) {
    const loom_node *n = &L->nodes[node];
    if (sum_of_partials(w, node, &st)) continue;
    for (int32_t i = 0; !st && i < n->n_in; i++) st = resolve(w, n->in[i]);
    if (!st) st = leaf_ordinals(w, node, ord);
    for (int32_t k = 0; !st && k < w->n_leaves[node]; k++)
      st = emit_leaf(w, node, w->leaves[node][k], ord[k]);
  }
  free(ord);
  for (int32_t o = 0; !st && o < L->n_outputs; o++) st = resolve(w, L->outputs[o]);
  return st;
}

/* The graph's outputs: each device's pieces (pp->outs) and, for the
 * oracle, the whole value assembled on the host. */
static loom_status deliver_outputs(lower_walk *w) {
  const loom_graph *L = w->L;
  loom_plan_program *pp = w->pp;
  for (int32_t o = 0; o < L->n_outputs; o++) {
    int32_t v = L->outputs[o];
    lower_need *needs = NULL;
    int32_t n = 0, cap = 0;
    LOOM_TRY(output_needs_of(w, o, &needs, &n, &cap));
    loom_status st = LOOM_STATUS_OK;
    for (int32_t k = 0; !st && k < n; k++) {
      int32_t at = lower_find_piece(w, v, needs[k].dev, &needs[k].box);
      if (at < 0) {
        st = loom_error(w->ctx, LOOM_STATUS_INTERNAL, "plan: output %s: a piece was not delivered",
                        L->output_names[o]);
        break;
      }
      if (!loom_grow(w->ctx, (void **)&pp->outs, &w->cap_outs, pp->n_outs + 1, sizeof *pp->outs))
        st = LOOM_STATUS_OUT_OF_MEMORY;
      else
        pp->outs[pp->n_outs++] =
            (loom_plan_io){needs[k].dev, o, needs[k].box, w->avail[v].v[at].gv};
    }
    free(needs);
    LOOM_TRY(st);
    loom_vbox whole = loom_vbox_full(loom_value_type(L, v));
    int32_t gv = lower_assemble(w, v, &whole, -1, true);
    if (gv < 0) return LOOM_STATUS_INTERNAL;
    LOOM_TRY(loom_graph_output(w->G, L->output_names[o], gv));
  }
  return LOOM_STATUS_OK;
}

loom_status loom_plan_lower(const loom_plan *p, const loom_plan_lower_options *opts,
                            loom_plan_program **out) {
  loom_ctx *ctx = p->ctx;
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: out is NULL");
  *out = NULL;
  const loom_graph *L = p->graph;
  lower_walk w = {.ctx = ctx, .p = p, .L = L};
  w.o.comm = loom_comm_model_default();
  if (opts) w.o = *opts;
  loom_plan_program *pp = loom_calloc(ctx, 1, sizeof *pp);
  if (!pp) return LOOM_STATUS_OUT_OF_MEMORY;
  pp->ctx = ctx;
  pp->n_devices = p->n_devices;
  w.pp = pp;
  loom_status st = LOOM_STATUS_OK;
  w.avail = loom_calloc(ctx, (size_t)L->n_values, sizeof *w.avail);
  w.resolved = loom_calloc(ctx, (size_t)L->n_values, sizeof *w.resolved);
  w.leaves = loom_calloc(ctx, (size_t)(L->n_nodes ? L->n_nodes : 1), sizeof *w.leaves);
  w.n_leaves = loom_calloc(ctx, (size_t)(L->n_nodes ? L->n_nodes : 1), sizeof *w.n_leaves);
  pp->group_start = loom_calloc(ctx, 1, sizeof *pp->group_start);
  w.cap_groups = 1;
  if (!w.avail || !w.resolved || !w.leaves || !w.n_leaves || !pp->group_start)
    st = LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t node = 0; !st && node < L->n_nodes; node++)
    st = loom_plan_leaves(p, node, &w.leaves[node], &w.n_leaves[node]);
  if (!st) st = check_leaves(&w);
  if (!st) st = check_cover(&w);
  if (!st) st = build_uses(&w);
  int32_t *map = NULL;
  if (!st) st = loom_graph_begin_copy(L, &w.G, &map);
  free(map);
  pp->global = w.G;
  if (!st) st = walk(&w);
  if (!st) st = deliver_outputs(&w);
  if (!st) st = lower_tag(&w, -1, LOWER_HOST);
  if (!st) st = lower_bucket(&w);
  if (!st) st = lower_finish(&w);
  if (!st) {
    pp->output_tied = loom_malloc(ctx, sizeof *pp->output_tied * (size_t)(L->n_outputs + 1));
    if (!pp->output_tied) st = LOOM_STATUS_OUT_OF_MEMORY;
    else memcpy(pp->output_tied, p->tied, sizeof *p->tied * (size_t)L->n_outputs);
  }
  for (int32_t v = 0; w.avail && v < L->n_values; v++) free(w.avail[v].v);
  for (int32_t node = 0; w.leaves && node < L->n_nodes; node++) free(w.leaves[node]);
  free(w.avail);
  free(w.resolved);
  free(w.leaves);
  free(w.n_leaves);
  free(w.use_start);
  free(w.use_node);
  free(w.first_output);
  free(w.next_output);
  free(w.first_feed);
  free(w.next_feed);
  if (st) {
    loom_plan_program_free(pp);
    return st;
  }
  *out = pp;
  return LOOM_STATUS_OK;
}

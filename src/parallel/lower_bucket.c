/*
 * Gradient bucketing, after the walk: all-reduces of one group, dtype and
 * reduction are coalesced into one all-reduce of a flat buffer (PyTorch
 * DDP's buckets), so a data-parallel step synchronises a few times rather
 * than once per gradient.
 *
 * All-reduces are taken in execution order (lower_sort). One joins the
 * open bucket of its key while the bucket has room (bucket_bytes per
 * member) and no all-reduce since the bucket opened is among its
 * ancestors: then no member needs another's result, so the bucket can be
 * one node. The global graph is then rebuilt in an order where a bucket
 * is emitted once all its members' inputs exist and before anything
 * reads a result: per member, each input flattened and concatenated, one
 * all-reduce, each result sliced back out and reshaped. The bucket is
 * issued as soon as its last input is made, and its readers wait for it.
 *
 * The reduction of an element is the same sum in member order as before
 * (comm/comm.c folds parts in member order wherever the element sits), so
 * results are the same bits; the bytes each member sends are the
 * members' sum.
 */
#include "parallel/lower_internal.h"

#include "ir/build.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* What must match for two all-reduces to share a bucket. */
typedef struct bucket_key {
  int64_t group, reduce;
  loom_dtype dtype;
} bucket_key;

static bucket_key key_of(const loom_graph *G, const loom_node *n) {
  return (bucket_key){LOOM_ATTR_I(n, all_reduce, group), LOOM_ATTR_I(n, all_reduce, reduce),
                      loom_value_type(G, n->in[0])->dtype};
}

static bool same_key(bucket_key a, bucket_key b) {
  return a.group == b.group && a.reduce == b.reduce && a.dtype == b.dtype;
}

/* An open bucket: its key, members (indices into pp->comms), bytes per
 * member, and the execution position of its first member. */
typedef struct open_bucket {
  bucket_key key;
  int32_t *members, n, first_pos;
  int64_t bytes;
} open_bucket;

/* Closes b: its members point at its last one (in execution order). */
static int32_t close_bucket(open_bucket *b, int32_t *bucket) {
  int32_t merged = b->n > 1 ? b->n - 1 : 0;
  for (int32_t k = 0; b->n > 1 && k < b->n; k++) bucket[b->members[k]] = b->members[b->n - 1];
  b->n = 0;
  return merged;
}

/* Assigns each comm op a bucket: bucket[c] is the index (in pp->comms) of
 * its bucket's representative, or -1 when it stays alone. Returns how
 * many comm ops were merged away. */
static loom_status choose_buckets(lower_walk *w, const int32_t *sorted, const int32_t *succ_start,
                                  const int32_t *succ, int64_t cap, int32_t *bucket,
                                  int32_t *merged) {
  const loom_plan_program *pp = w->pp;
  const loom_graph *G = pp->global;
  int32_t nn = G->n_nodes;
  /* anc[x]: the latest execution position of an all-reduce x depends on */
  int32_t *anc = loom_malloc(w->ctx, sizeof *anc * (size_t)(nn ? nn : 1));
  int32_t *pool = loom_malloc(w->ctx, sizeof *pool * (size_t)pp->n_comms);
  open_bucket *open = loom_calloc(w->ctx, (size_t)pp->n_comms, sizeof *open);
  if (!anc || !pool || !open) {
    free(anc);
    free(pool);
    free(open);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t n_open = 0, used = 0;
  *merged = 0;
  for (int32_t x = 0; x < nn; x++) anc[x] = -1;
  for (int32_t c = 0; c < pp->n_comms; c++) bucket[c] = -1;
  for (int32_t i = 0; i < nn; i++) {
    int32_t x = sorted[i], out = anc[x];
    int32_t c = loom_op_is_comm(G->nodes[x].op) ? lower_comm_index(pp, x) : -1;
    if (c >= 0 && pp->comms[c].op == LOOM_OP_ALL_REDUCE) {
      const loom_node *n = &G->nodes[x];
      bucket_key key = key_of(G, n);
      int64_t bytes = lower_value_bytes(G, n->in[0]);
      open_bucket *b = NULL;
      for (int32_t k = 0; k < n_open && !b; k++)
        if (same_key(open[k].key, key)) b = &open[k];
      if (b && b->n && (anc[x] >= b->first_pos || b->bytes + bytes > cap))
        *merged += close_bucket(b, bucket);
      if (!b) {
        b = &open[n_open++];
        b->key = key;
        b->members = pool + used; /* a key's members never outnumber its comms */
        for (int32_t k = 0; k < pp->n_comms; k++)
          if (pp->comms[k].op == LOOM_OP_ALL_REDUCE && same_key(key_of(G, &G->nodes[pp->comms[k].node]), key))
            used++;
      }
      if (!b->n) {
        b->first_pos = i;
        b->bytes = 0;
      }
      b->members[b->n++] = c;
      b->bytes += bytes;
      out = i;
    }
    for (int32_t e = succ_start[x]; e < succ_start[x + 1]; e++)
      anc[succ[e]] = LOOM_MAX(anc[succ[e]], out);
  }
  for (int32_t k = 0; k < n_open; k++) *merged += close_bucket(&open[k], bucket);
  free(anc);
  free(pool);
  free(open);
  return LOOM_STATUS_OK;
}

/* The rebuilt program's tags, grown as nodes and values are added. */
typedef struct rebuild {
  lower_walk *w;
  loom_graph *H;
  int32_t *map;                 /* old value -> new value */
  int32_t *node_device, *node_subop, *value_device;
  int32_t tagged_nodes, tagged_values, cap_nodes, cap_values;
  loom_plan_comm *comms;
  int32_t n_comms;
} rebuild;

/* Tags the nodes and values added to H since the last call. */
static loom_status tag_new(rebuild *r, int32_t dev, int32_t subop) {
  loom_ctx *ctx = r->w->ctx;
  int32_t cn = r->cap_nodes, cv = r->cap_values;
  if (!loom_grow(ctx, (void **)&r->node_device, &cn, r->H->n_nodes, sizeof *r->node_device))
    return LOOM_STATUS_OUT_OF_MEMORY;
  if (!loom_grow(ctx, (void **)&r->node_subop, &r->cap_nodes, r->H->n_nodes, sizeof *r->node_subop))
    return LOOM_STATUS_OUT_OF_MEMORY;
  if (!loom_grow(ctx, (void **)&r->value_device, &cv, r->H->n_values, sizeof *r->value_device))
    return LOOM_STATUS_OUT_OF_MEMORY;
  r->cap_values = cv;
  for (int32_t i = r->tagged_nodes; i < r->H->n_nodes; i++) {
    r->node_device[i] = dev;
    r->node_subop[i] = subop;
  }
  for (int32_t v = r->tagged_values; v < r->H->n_values; v++) r->value_device[v] = dev;
  r->tagged_nodes = r->H->n_nodes;
  r->tagged_values = r->H->n_values;
  return LOOM_STATUS_OK;
}

/* Emits the bucket whose members are comms mem[0..k) (the last one's
 * attrs) in H. */
static loom_status emit_bucket(rebuild *r, const int32_t *mem, int32_t k) {
  const loom_plan_program *pp = r->w->pp;
  const loom_graph *G = pp->global;
  loom_graph *H = r->H;
  const loom_plan_comm *lc = &pp->comms[mem[k - 1]];
  const loom_node *ln = &G->nodes[lc->node];
  int32_t n = ln->n_in;
  const int32_t *devs = pp->group_ranks + pp->group_start[lc->group];
  int32_t *parts = malloc(sizeof *parts * (size_t)k);
  int32_t *flat = malloc(sizeof *flat * (size_t)n);
  int32_t *outs = malloc(sizeof *outs * (size_t)n);
  loom_status st = parts && flat && outs ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  int64_t bytes = 0;
  for (int32_t j = 0; j < k; j++) bytes += pp->comms[mem[j]].bytes;
  /* per member: its inputs flattened, one after another */
  for (int32_t t = 0; !st && t < n; t++) {
    for (int32_t j = 0; j < k; j++) {
      int32_t x = r->map[G->nodes[pp->comms[mem[j]].node].in[t]];
      int64_t numel = loom_type_numel(loom_value_type(H, x));
      parts[j] = lb_reshape(H, x, 1, &numel);
    }
    flat[t] = lb_concat(H, k, parts, 0);
    st = loom_build_status(H);
    if (!st) st = tag_new(r, devs[t], LOWER_INSERTED);
  }
  /* the one all-reduce, with the last member's attrs */
  if (!st) st = loom_graph_add(H, LOOM_OP_ALL_REDUCE, n, flat, ln->attr, n, outs);
  if (!st) st = tag_new(r, -1, LOWER_INSERTED);
  for (int32_t t = 0; !st && t < n; t++) r->value_device[outs[t]] = devs[t];
  if (!st)
    r->comms[r->n_comms++] =
        (loom_plan_comm){LOOM_OP_ALL_REDUCE, H->n_nodes - 1, lc->group, lc->seq, lc->value, bytes};
  /* per member: each result cut back out */
  for (int32_t t = 0; !st && t < n; t++) {
    int64_t at = 0;
    for (int32_t j = 0; !st && j < k; j++) {
      const loom_node *mn = &G->nodes[pp->comms[mem[j]].node];
      const loom_type *ty = loom_value_type(G, mn->out[t]);
      int64_t end = at + loom_type_numel(ty);
      int32_t piece = lb_slice(H, outs[t], &at, &end);
      r->map[mn->out[t]] = lb_reshape(H, piece, ty->rank, ty->shape);
      at = end;
      st = loom_build_status(H);
    }
    if (!st) st = tag_new(r, devs[t], LOWER_INSERTED);
  }
  free(parts);
  free(flat);
  free(outs);
  return st;
}

/* Copies node x of the old graph into H with its tags. */
static loom_status copy_node(rebuild *r, int32_t x, int32_t c) {
  const loom_plan_program *pp = r->w->pp;
  const loom_graph *G = pp->global;
  LOOM_TRY(loom_graph_copy_node(r->H, G, &G->nodes[x], r->map));
  LOOM_TRY(tag_new(r, pp->node_device[x], pp->node_subop[x]));
  for (int32_t o = 0; o < G->nodes[x].n_out; o++)
    r->value_device[r->map[G->nodes[x].out[o]]] = pp->value_device[G->nodes[x].out[o]];
  if (c >= 0) {
    r->comms[r->n_comms] = pp->comms[c];
    r->comms[r->n_comms++].node = r->H->n_nodes - 1;
  }
  return LOOM_STATUS_OK;
}

/* A binary min-heap of execution positions. */
typedef struct pos_heap {
  int32_t *v, n;
} pos_heap;

static void pos_push(pos_heap *h, int32_t x) {
  int32_t i = h->n++;
  for (; i > 0 && h->v[(i - 1) / 2] > x; i = (i - 1) / 2) h->v[i] = h->v[(i - 1) / 2];
  h->v[i] = x;
}

static int32_t pos_pop(pos_heap *h) {
  int32_t top = h->v[0], x = h->v[--h->n], i = 0;
  for (;;) {
    int32_t l = 2 * i + 1, m = l;
    if (l >= h->n) break;
    if (l + 1 < h->n && h->v[l + 1] < h->v[l]) m = l + 1;
    if (h->v[m] >= x) break;
    h->v[i] = h->v[m];
    i = m;
  }
  if (h->n) h->v[i] = x;
  return top;
}

/* Rebuilds the global graph with the buckets: Kahn's algorithm over the
 * old graph where a bucket's members are one node (they depend on no
 * other member, choose_buckets), the earliest old execution position
 * first. */
static loom_status rebuild_graph(rebuild *r, const int32_t *sorted, const int32_t *succ_start,
                                 const int32_t *succ, const int32_t *bucket) {
  const loom_plan_program *pp = r->w->pp;
  const loom_graph *G = pp->global;
  int32_t nn = G->n_nodes, nc = pp->n_comms;
  int32_t *pos = malloc(sizeof *pos * (size_t)(nn ? nn : 1));
  int32_t *rep = malloc(sizeof *rep * (size_t)(nn ? nn : 1)); /* node -> its bucket's rep node */
  int32_t *comm_of = malloc(sizeof *comm_of * (size_t)(nn ? nn : 1));
  int32_t *indeg = calloc((size_t)(nn ? nn : 1), sizeof *indeg);
  int32_t *head = malloc(sizeof *head * (size_t)nc), *next = malloc(sizeof *next * (size_t)nc);
  int32_t *mem = malloc(sizeof *mem * (size_t)nc);
  pos_heap h = {malloc(sizeof(int32_t) * (size_t)(nn ? nn : 1)), 0};
  loom_status st = pos && rep && comm_of && indeg && head && next && mem && h.v
                       ? LOOM_STATUS_OK
                       : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; !st && i < nn; i++) {
    pos[sorted[i]] = i;
    rep[i] = i;
    comm_of[i] = -1;
  }
  /* members of each bucket, in comm (emission) order */
  for (int32_t c = nc - 1; !st && c >= 0; c--) {
    head[c] = -1;
    comm_of[pp->comms[c].node] = c;
  }
  for (int32_t c = nc - 1; !st && c >= 0; c--) {
    if (bucket[c] < 0) continue;
    next[c] = head[bucket[c]];
    head[bucket[c]] = c;
    rep[pp->comms[c].node] = pp->comms[bucket[c]].node;
  }
  for (int32_t x = 0; !st && x < nn; x++)
    for (int32_t e = succ_start[x]; e < succ_start[x + 1]; e++) indeg[rep[succ[e]]]++;
  for (int32_t x = 0; !st && x < nn; x++)
    if (rep[x] == x && !indeg[x]) pos_push(&h, pos[x]);
  int32_t done = 0;
  while (!st && h.n) {
    int32_t x = sorted[pos_pop(&h)], c = comm_of[x], k = 0;
    if (c >= 0 && bucket[c] == c) {
      for (int32_t m = head[c]; m >= 0; m = next[m]) mem[k++] = m;
      st = emit_bucket(r, mem, k);
    } else {
      mem[k++] = c;
      st = copy_node(r, x, c);
    }
    done++;
    for (int32_t j = 0; !st && j < k; j++) {
      int32_t y = c >= 0 ? pp->comms[mem[j]].node : x;
      for (int32_t e = succ_start[y]; e < succ_start[y + 1]; e++)
        if (--indeg[rep[succ[e]]] == 0) pos_push(&h, pos[rep[succ[e]]]);
    }
  }
  int32_t groups = 0;
  for (int32_t x = 0; x < nn; x++) groups += rep && rep[x] == x;
  if (!st && done != groups)
    st = loom_error(r->w->ctx, LOOM_STATUS_INTERNAL, "plan: gradient buckets made a cycle");
  free(pos);
  free(rep);
  free(comm_of);
  free(indeg);
  free(head);
  free(next);
  free(mem);
  free(h.v);
  return st;
}

loom_status lower_bucket(lower_walk *w) {
  loom_plan_program *pp = w->pp;
  if (w->o.bucket_bytes <= 0 || pp->n_comms < 2) return LOOM_STATUS_OK;
  int64_t cap = w->o.bucket_bytes;
  int32_t *sorted = NULL, *succ_start = NULL, *succ = NULL, merged = 0;
  int32_t *bucket = loom_malloc(w->ctx, sizeof *bucket * (size_t)pp->n_comms);
  loom_status st = bucket ? lower_sort(w, &sorted, &succ_start, &succ) : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) st = choose_buckets(w, sorted, succ_start, succ, cap, bucket, &merged);
  rebuild r = {.w = w};
  if (!st && merged > 0) {
    const loom_graph *G = pp->global;
    r.comms = loom_malloc(w->ctx, sizeof *r.comms * (size_t)pp->n_comms);
    st = r.comms ? loom_graph_begin_copy(G, &r.H, &r.map) : LOOM_STATUS_OUT_OF_MEMORY;
    if (!st) st = tag_new(&r, -1, LOWER_INSERTED);
    for (int32_t v = 0; !st && v < G->n_values; v++)
      if (r.map[v] >= 0) r.value_device[r.map[v]] = pp->value_device[v];
    if (!st) st = rebuild_graph(&r, sorted, succ_start, succ, bucket);
    if (!st) st = loom_graph_finish_copy(r.H, G, r.map);
    /* comms in node order, as lower_comm_index expects */
    for (int32_t k = 1; !st && k < r.n_comms; k++)
      if (r.comms[k].node < r.comms[k - 1].node)
        st = loom_error(w->ctx, LOOM_STATUS_INTERNAL, "plan: bucketing put comm ops out of order");
    for (int32_t k = 0; !st && k < pp->n_ins; k++) pp->ins[k].value = r.map[pp->ins[k].value];
    for (int32_t k = 0; !st && k < pp->n_outs; k++) pp->outs[k].value = r.map[pp->outs[k].value];
  }
  if (!st && merged > 0) {
    loom_graph_replace(pp->global, r.H);
    r.H = NULL;
    w->G = pp->global;
    free(pp->node_device);
    free(pp->node_subop);
    free(pp->value_device);
    free(pp->comms);
    pp->node_device = r.node_device;
    pp->node_subop = r.node_subop;
    pp->value_device = r.value_device;
    pp->comms = r.comms;
    pp->n_comms = r.n_comms;
    w->cap_node_tags = r.cap_nodes;
    w->tagged = pp->global->n_nodes;
    w->cap_value_tags = r.cap_values;
    w->cap_comms = r.n_comms;
    r.node_device = r.node_subop = r.value_device = NULL;
    r.comms = NULL;
  }
  loom_graph_free(r.H);
  free(r.map);
  free(r.node_device);
  free(r.node_subop);
  free(r.value_device);
  free(r.comms);
  free(bucket);
  free(sorted);
  free(succ_start);
  free(succ);
  return st;
}

/*
 * Fusion-plan exploration (docs/FUSION.md, "Plan search").
 *
 * A plan assigns every memory-intensive node to a group (one kernel). The
 * search, per connected memory-intensive region, visits nodes consumers
 * first and keeps a beam of partial plans: at node v each plan branches
 * into "v alone", "v joins the group of consumer c" for each consumer
 * group, and "v joins all of them" (stitching siblings through their
 * common producer). Every branch is scored by the cost model; the best
 * `beam_width` distinct plans survive. A final pass merges independent
 * groups (horizontal fusion) while the cost model says it pays; it and the
 * execution order are in plan_merge.c.
 *
 * Every group is legal (loom_fusion_group_analyze accepts it in the mode)
 * and the groups stay schedulable: a merge is refused when a path leaves
 * the new group and comes back to it through other nodes or groups (the
 * quotient graph must stay acyclic, which also makes each group convex).
 *
 * Group ids are node indices: a group is named by its largest member, so
 * ids stay stable while producers (smaller indices) join. Groups are
 * analysed through one loom_fusion_index of the graph, with their member
 * lists, so that scoring a candidate costs O(its size), not O(graph).
 */
#include "fusion/plan_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_BEAM 4

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* A node's contribution to a plan's key when it is in group gid. */
static uint64_t state_mix(int32_t node, int32_t gid) {
  return gid < 0 ? 0 : mix64(((uint64_t)(uint32_t)node << 32) ^ (uint32_t)gid ^ 0x5bd1e995u);
}

static memo_ent *memo_find(plan_ctx *p, uint64_t h1, uint64_t h2) {
  uint64_t mask = (uint64_t)p->memo_cap - 1;
  for (uint64_t i = h1 & mask;; i = (i + 1) & mask) {
    memo_ent *e = &p->memo[i];
    if (!e->used || (e->h1 == h1 && e->h2 == h2)) return e;
  }
}

static bool memo_grow(plan_ctx *p) {
  int64_t cap = p->memo_cap ? p->memo_cap * 2 : 4096;
  memo_ent *old = p->memo;
  int64_t old_cap = p->memo_cap;
  p->memo = calloc((size_t)cap, sizeof *p->memo);
  if (!p->memo) {
    p->memo = old;
    p->oom = true;
    return false;
  }
  p->memo_cap = cap;
  for (int64_t i = 0; i < old_cap; i++)
    if (old[i].used) *memo_find(p, old[i].h1, old[i].h2) = old[i];
  free(old);
  return true;
}

/* Legality and cost of group `gid` as currently labelled in p->gon: its
 * members mem[0..nm) (any order), whose set hashes to (h1, h2). Cost is
 * +inf when not one kernel. */
double loom_plan_group_cost(plan_ctx *p, int32_t gid, const int32_t *mem, int32_t nm, uint64_t h1,
                            uint64_t h2, bool *ok) {
  if (2 * (p->memo_used + 1) > p->memo_cap && !memo_grow(p)) {
    *ok = false;
    return 1e30;
  }
  memo_ent *e = memo_find(p, h1, h2);
  if (!e->used) {
    loom_group_info info;
    memset(&info, 0, sizeof info);
    p->n_analyze++;
    e->used = true;
    e->h1 = h1;
    e->h2 = h2;
    e->ok = loom_fusion_group_analyze_members(p->ix, p->gon, gid, mem, nm, p->mode, &info);
    e->cost = e->ok ? loom_cost_group(p->m, &info, NULL) : 1e30;
    p->memo_used++;
  }
  *ok = e->ok;
  return e->cost;
}

/* Members of group gid into out (descending for finished groups); count. */
int32_t loom_plan_members(const plan_ctx *p, int32_t gid, int32_t *out) {
  int32_t k = 0;
  if (p->cur >= 0 && p->comp[gid] == p->cur) {
    for (int32_t j = p->local[gid]; j >= 0 && p->cnodes[j] >= p->gmin[gid]; j--)
      if (p->gon[p->cnodes[j]] == gid) out[k++] = p->cnodes[j];
  } else {
    for (int32_t u = gid; u >= 0; u = p->fnext[u])
      out[k++] = u;
  }
  return k;
}

/* The largest node a path out of a group ending at or below maxt can pass
 * through and still come back: above it, no group reaches back down. */
static int32_t return_bound(const plan_ctx *p, int32_t maxt) {
  /* a group has its smallest member <= b iff one of its members is: the
   * region's groups are found by one ascending scan of its labelled
   * nodes (from p->lo) while b grows */
  int32_t b = maxt, j = p->cur >= 0 ? p->lo : p->ncn, top = -1;
  for (;;) {
    for (; j < p->ncn && p->cnodes[j] <= b; j++)
      top = LOOM_MAX(top, p->gon[p->cnodes[j]]);
    int32_t nb = LOOM_MAX(LOOM_MAX(b, p->span[b]), top);
    if (nb == b) return b;
    b = nb;
  }
}

/* True if a path leaves group t (members mem[0..nm), all labelled t in
 * p->gon) and comes back: merging would make the plan unschedulable. */
bool loom_plan_creates_cycle(plan_ctx *p, int32_t t, const int32_t *mem, int32_t nm) {
  int32_t maxt = 0;
  for (int32_t i = 0; i < nm; i++)
    maxt = LOOM_MAX(maxt, mem[i]);
  int32_t bound = return_bound(p, maxt);
  uint32_t ep = ++p->epoch;
  int32_t sp = 0;
  for (int32_t i = 0; i < nm; i++) {
    for (int32_t e = p->cons_off[mem[i]]; e < p->cons_off[mem[i] + 1]; e++) {
      int32_t c = p->cons[e];
      if (p->gon[c] == t || c > bound || p->mark[c] == ep) continue;
      p->mark[c] = ep;
      p->stack[sp++] = c;
    }
  }
  while (sp > 0) {
    int32_t u = p->stack[--sp], gid = p->gon[u];
    int32_t *from = p->gbuf, nf = 1;
    if (gid >= 0) {
      if (p->gmark[gid] == ep) continue;
      p->gmark[gid] = ep;
      nf = loom_plan_members(p, gid, from);
    } else {
      from[0] = u;
    }
    for (int32_t i = 0; i < nf; i++) {
      p->mark[from[i]] = ep;
      for (int32_t e = p->cons_off[from[i]]; e < p->cons_off[from[i] + 1]; e++) {
        int32_t c = p->cons[e];
        if (p->gon[c] == t) return true;
        if (c > bound || p->mark[c] == ep) continue;
        p->mark[c] = ep;
        p->stack[sp++] = c;
      }
    }
  }
  return false;
}

/* A node that, alone, needs no kernel: a reshape runs as an alias of its
 * input's memory (the runtime's NODE step), where a kernel would copy. */
static bool is_alias(const loom_graph *g, int32_t v) {
  const loom_node *nd = &g->nodes[v];
  return nd->op == LOOM_OP_RESHAPE && nd->n_in == 1 && nd->n_out == 1;
}

/* ---- the beam over one region ------------------------------------------ */

typedef struct pstate {
  int32_t *lg; /* per local node: group id or -1 */
  double cost;
  uint64_t key;
} pstate;

typedef struct child {
  int32_t parent;
  bool eager;    /* v runs outside kernels */
  uint64_t mask; /* which of v's consumer groups v joins (bit i: gs[i]) */
  double cost;
  uint64_t key;
} child;

static int cmp_child(const void *a, const void *b) {
  const child *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->eager != y->eager) return x->eager ? 1 : -1;
  return (x->mask > y->mask) - (x->mask < y->mask);
}

/* The groups of gs[0..ng) selected by mask, into sel; count. */
static int32_t select_groups(const int32_t *gs, int32_t ng, uint64_t mask, int32_t *sel) {
  int32_t k = 0;
  for (int32_t i = 0; i < ng && i < 64; i++)
    if (mask >> i & 1) sel[k++] = gs[i];
  return k;
}

/* Writes a state's labels for the region into p->gon and p->gmin (nodes
 * below p->lo are unlabelled in every state). */
static void load_state(plan_ctx *p, const pstate *s) {
  for (int32_t j = p->ncn - 1; j >= p->lo; j--) {
    int32_t u = p->cnodes[j], gid = s->lg[j];
    p->gon[u] = gid;
    if (gid >= 0) p->gmin[gid] = u; /* descending: the last write is the min */
  }
}

/* The distinct groups of v's consumers in this state, ascending. */
static int32_t consumer_groups(const plan_ctx *p, int32_t v, int32_t *out) {
  int32_t k = 0;
  for (int32_t e = p->cons_off[v]; e < p->cons_off[v + 1]; e++) {
    int32_t gid = p->gon[p->cons[e]];
    if (gid < 0 || p->comp[p->cons[e]] != p->cur) continue;
    int32_t i = k;
    while (i > 0 && out[i - 1] > gid)
      i--;
    if (i > 0 && out[i - 1] == gid) continue;
    memmove(out + i + 1, out + i, sizeof *out * (size_t)(k - i));
    out[i] = gid;
    k++;
  }
  return k;
}

/* The most nodes a join of the search may make a group hold. Scoring a
 * join lowers the whole group, so without a bound a chain of n ops costs
 * O(n^2) to plan (a 10k chain: minutes); with it, the search stays linear
 * in the graph (the pair merges after it still join such groups, a few
 * times each). The bound is far above real fused groups (the train step
 * of test_models has one of more than 256 nodes, none of 512), so it
 * changes no plan of theirs. */
#define PLAN_MAX_MEMBERS 1024

/*
 * Scores "v joins groups gs[0..ng)" (ng == 0: v alone) in the loaded state
 * of cost `cost`, key `key`; restores p->gon before returning. False when
 * the group is not one kernel or would make a cycle.
 */
static bool eval_join(plan_ctx *p, int32_t v, const int32_t *gs, int32_t ng, double cost,
                      uint64_t key, double *out_cost, uint64_t *out_key) {
  int32_t t = v;
  for (int32_t i = 0; i < ng; i++)
    t = LOOM_MAX(t, gs[i]);
  uint64_t h1 = p->z1[v], h2 = p->z2[v];
  int32_t nm = 0;
  double removed = 0;
  for (int32_t i = 0; i < ng; i++) {
    int32_t k = loom_plan_members(p, gs[i], p->mem + nm);
    if (nm + k + 1 > PLAN_MAX_MEMBERS) return false; /* nothing changed yet */
    uint64_t g1 = 0, g2 = 0;
    for (int32_t j = nm; j < nm + k; j++) {
      g1 += p->z1[p->mem[j]];
      g2 += p->z2[p->mem[j]];
    }
    bool ok;
    removed += loom_plan_group_cost(p, gs[i], p->mem + nm, k, g1, g2, &ok);
    h1 += g1;
    h2 += g2;
    nm += k;
  }
  for (int32_t j = 0; j < nm; j++) {
    int32_t u = p->mem[j];
    p->old[j] = p->gon[u];
    key += state_mix(u, t) - state_mix(u, p->gon[u]);
    p->gon[u] = t;
  }
  p->gon[v] = t;
  key += state_mix(v, t);
  p->mem[nm++] = v;
  int32_t old_min = p->gmin[t];
  p->gmin[t] = v;
  bool ok;
  double c = loom_plan_group_cost(p, t, p->mem, nm, h1, h2, &ok);
  bool cyc = ok && ng > 0 && loom_plan_creates_cycle(p, t, p->mem, nm);
  for (int32_t j = 0; j < nm - 1; j++)
    p->gon[p->mem[j]] = p->old[j];
  p->gon[v] = -1;
  p->gmin[t] = old_min;
  *out_cost = cost - removed + c;
  *out_key = key;
  return ok && !cyc;
}

/* Applies a chosen branch to a copy of its parent's labels (those from vi
 * on: below, every state is unlabelled). */
static void apply_join(plan_ctx *p, pstate *dst, const pstate *src, int32_t vi, const int32_t *gs,
                       int32_t ng) {
  memcpy(dst->lg + vi, src->lg + vi, sizeof *dst->lg * (size_t)(p->ncn - vi));
  int32_t t = p->cnodes[vi];
  for (int32_t i = 0; i < ng; i++)
    t = LOOM_MAX(t, gs[i]);
  for (int32_t j = vi + 1; j < p->ncn; j++) {
    for (int32_t i = 0; i < ng; i++)
      if (dst->lg[j] == gs[i]) dst->lg[j] = t;
  }
  dst->lg[vi] = t;
}

/* Beam search over one region (nodes cn[0..ncn), ascending); writes the
 * best plan's labels into p->gon. */
static loom_status search_region(plan_ctx *p, int32_t beam) {
  int32_t ncn = p->ncn;
  int32_t nst = 2 * beam;
  pstate *st = calloc((size_t)nst, sizeof *st);
  int32_t *lab = malloc(sizeof *lab * (size_t)ncn * (size_t)nst);
  int32_t maxc = 0; /* most consumers of a node: room for its groups */
  for (int32_t j = 0; j < ncn; j++)
    maxc = LOOM_MAX(maxc, p->cons_off[p->cnodes[j] + 1] - p->cons_off[p->cnodes[j]]);
  /* per beam state: v's consumer groups in it (kept for the selection) */
  int32_t *pgs = malloc(sizeof *pgs * (size_t)(maxc + 1) * (size_t)beam);
  int32_t *png = malloc(sizeof *png * (size_t)beam), *sel = malloc(sizeof *sel * 64);
  int32_t cap_ch = 64;
  child *ch = malloc(sizeof *ch * (size_t)cap_ch);
  loom_status status = LOOM_STATUS_OK;
  if (!st || !lab || !pgs || !png || !sel || !ch) {
    status = LOOM_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  for (int32_t i = 0; i < nst; i++)
    st[i].lg = lab + (size_t)i * (size_t)ncn;
  for (size_t j = 0; j < (size_t)ncn * (size_t)nst; j++)
    lab[j] = -1;
  pstate *cur = st, *next = st + beam;
  int32_t n_cur = 1;
  for (int32_t vi = ncn - 1; vi >= 0; vi--) {
    int32_t v = p->cnodes[vi], n_ch = 0;
    p->lo = vi; /* nodes below v are unlabelled in every state */
    for (int32_t s = 0; s < n_cur; s++) {
      load_state(p, &cur[s]);
      int32_t *gs = pgs + (size_t)s * (size_t)(maxc + 1);
      int32_t ng = png[s] = consumer_groups(p, v, gs);
      /* branches: alone, each consumer group, all of them, and (when all
       * fails) the groups that can be joined, greedily in order */
      /* A source node (a constant, an iota: no inputs) joins one consumer
       * group at most: joining several would merge kernels that share
       * nothing but it (every micro-batch's backward through one
       * constant, so a pipeline stage waited for all of them); the other
       * groups recompute it (plan_dup.c). */
      bool source = p->g->nodes[v].n_in == 0;
      int32_t nm = ng > 64 ? 0 : ng;
      uint64_t all = nm == 64 ? ~0ull : (1ull << nm) - 1, greedy = 0;
      bool all_ok = false;
      for (int32_t o = 0; o < 3 + nm; o++) {
        uint64_t mask = o == 0 ? 0 : o <= nm ? 1ull << (o - 1) : o == nm + 1 ? all : greedy;
        if (o > 0 && o <= nm && ng == 0) continue;
        if (o == nm + 1 && (nm < 2 || source)) continue;
        if (o == nm + 2) {
          /* greedy: only when it differs from every branch above */
          if (nm < 3 || all_ok || source) continue;
          for (int32_t i = 0; i < nm; i++) {
            int32_t ns = select_groups(gs, ng, greedy | 1ull << i, sel);
            double c;
            uint64_t k;
            if (eval_join(p, v, sel, ns, cur[s].cost, cur[s].key, &c, &k)) greedy |= 1ull << i;
          }
          if (__builtin_popcountll(greedy) < 2) continue;
          mask = greedy;
        }
        int32_t ns = select_groups(gs, ng, mask, sel);
        double c = 0;
        uint64_t k = 0;
        bool alias = mask == 0 && is_alias(p->g, v);
        bool ok = !alias && eval_join(p, v, sel, ns, cur[s].cost, cur[s].key, &c, &k);
        bool eager = false;
        if (o == nm + 1) all_ok = ok;
        if (!ok && mask == 0) {
          /* v alone runs outside kernels: free for a reshape (it aliases
           * its input), eager for a node no kernel can hold */
          c = cur[s].cost + (alias ? 0.0 : loom_cost_eager(p->m, p->g, v));
          k = cur[s].key ^ mix64((uint64_t)v);
          eager = ok = true;
        }
        if (!ok) continue;
        if (n_ch == cap_ch) {
          cap_ch *= 2;
          child *nc = realloc(ch, sizeof *ch * (size_t)cap_ch);
          if (!nc) {
            status = LOOM_STATUS_OUT_OF_MEMORY;
            goto done;
          }
          ch = nc;
        }
        ch[n_ch++] = (child){.parent = s, .eager = eager, .mask = mask, .cost = c, .key = k};
      }
    }
    qsort(ch, (size_t)n_ch, sizeof *ch, cmp_child);
    int32_t n_next = 0;
    for (int32_t i = 0; i < n_ch && n_next < beam; i++) {
      bool dup = false;
      for (int32_t j = 0; j < i && !dup; j++)
        dup = ch[j].key == ch[i].key && ch[j].cost == ch[i].cost;
      if (dup) continue;
      const pstate *par = &cur[ch[i].parent];
      const int32_t *gs = pgs + (size_t)ch[i].parent * (size_t)(maxc + 1);
      int32_t ns = select_groups(gs, png[ch[i].parent], ch[i].mask, sel);
      pstate *dst = &next[n_next++];
      apply_join(p, dst, par, vi, sel, ns);
      if (ch[i].eager) dst->lg[vi] = -1;
      dst->cost = ch[i].cost;
      dst->key = ch[i].key;
    }
    if (n_next == 0) { /* cannot happen: "alone" always exists */
      status = loom_error(p->ctx, LOOM_STATUS_INTERNAL, "fusion plan: empty beam at node %d", v);
      goto done;
    }
    pstate *tmp = cur;
    cur = next;
    next = tmp;
    n_cur = n_next;
  }
  p->lo = 0;
  load_state(p, &cur[0]);
done:
  free(st);
  free(lab);
  free(pgs);
  free(png);
  free(sel);
  free(ch);
  if (p->oom && !status) status = LOOM_STATUS_OUT_OF_MEMORY;
  return status;
}

/* After a region is searched (or groups merged): links each finished
 * group's members (descending) and refreshes span. */
void loom_plan_finish_groups(plan_ctx *p) {
  int32_t *last = p->old;
  for (int32_t u = p->n - 1; u >= 0; u--) {
    int32_t gid = p->gon[u];
    if (gid < 0) continue;
    if (u == gid) {
      p->fnext[u] = -1;
    } else {
      p->fnext[last[gid]] = u;
      p->fnext[u] = -1;
    }
    last[gid] = u;
    p->gmin[gid] = u;
  }
  for (int32_t x = 0; x < p->n; x++)
    p->span[x] = x;
  for (int32_t u = 0; u < p->n; u++)
    if (p->gon[u] == u && p->span[p->gmin[u]] < u) p->span[p->gmin[u]] = u;
  for (int32_t x = 1; x < p->n; x++)
    p->span[x] = LOOM_MAX(p->span[x], p->span[x - 1]);
}

/* ---- the driver ---------------------------------------------------------- */

static int32_t uf_find(int32_t *parent, int32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

/* The producers of node c, in a plan's device program (comm nodes in
 * it): besides its inputs' producers, a comm node comes after every node
 * before it and every node after it comes after the comm node. Comm ops
 * thus stay where the plan ordered them, in order (each one's peers wait
 * for it in that order), and nothing moves across one: a pipeline's send
 * is issued as soon as its stage has computed it, not after work the plan
 * put later (a micro-batch's forward fused with the next one's). */
typedef struct producers {
  int32_t c, i, n_in, prev_comm;
  bool comm;
} producers;

static producers producers_of(const plan_ctx *p, int32_t c, int32_t prev_comm) {
  const loom_graph *g = p->g;
  return (producers){c, 0, g->nodes[c].n_in, prev_comm, loom_op_is_comm(g->nodes[c].op)};
}

/* The next producer in *out (-1: an input no node makes; repeats
 * possible); false at the end. */
static bool producers_next(const plan_ctx *p, producers *it, int32_t *out) {
  for (;;) {
    int32_t i = it->i++;
    if (i < it->n_in) return *out = p->g->values[p->g->nodes[it->c].in[i]].node, true;
    if (!it->comm) return *out = it->prev_comm, i == it->n_in;
    /* the last comm node and all since (all before the first) */
    int32_t u = LOOM_MAX(it->prev_comm, 0) + (i - it->n_in);
    if (u >= it->c) return false;
    if (p->cls[u] != LOOM_NODE_DEAD) return *out = u, true;
  }
}

/* Distinct consumer nodes of every node, in CSR form. */
static bool build_consumers(plan_ctx *p) {
  const loom_graph *g = p->g;
  int32_t n = p->n;
  int64_t total = 0;
  p->cons_off = calloc((size_t)n + 1, sizeof *p->cons_off);
  if (!p->cons_off) return false;
  for (int32_t u = 0; u < n; u++)
    total += g->nodes[u].n_in + 2;
  p->cons = malloc(sizeof *p->cons * (size_t)(total + 1));
  int32_t *last = malloc(sizeof *last * (size_t)n);
  if (!p->cons || !last) {
    free(last);
    return false;
  }
  int32_t *fill = p->old; /* scratch: next slot per producer */
  /* pass 0 counts, pass 1 fills: a consumer appears once per producer */
  for (int32_t pass = 0; pass < 2; pass++) {
    for (int32_t u = 0; u < n; u++) {
      last[u] = -1;
      if (pass) fill[u] = p->cons_off[u];
    }
    int32_t prev_comm = -1;
    for (int32_t c = 0; c < n; c++) {
      if (p->cls[c] == LOOM_NODE_DEAD) continue; /* dead nodes run nowhere */
      producers it = producers_of(p, c, prev_comm);
      for (int32_t pr; producers_next(p, &it, &pr);) {
        if (pr < 0 || last[pr] == c) continue;
        last[pr] = c;
        if (pass) p->cons[fill[pr]++] = c;
        else p->cons_off[pr + 1]++;
      }
      if (it.comm) prev_comm = c;
    }
    if (!pass)
      for (int32_t u = 0; u < n; u++)
        p->cons_off[u + 1] += p->cons_off[u];
  }
  free(last);
  return true;
}

static void plan_ctx_free(plan_ctx *p) {
  loom_fusion_index_free(p->ix);
  free(p->cons_off);
  free(p->cons);
  free(p->z1);
  free(p->z2);
  free(p->gon);
  free(p->gmin);
  free(p->fnext);
  free(p->span);
  free(p->comp);
  free(p->local);
  free(p->mark);
  free(p->gmark);
  free(p->stack);
  free(p->gbuf);
  free(p->mem);
  free(p->old);
  free(p->late);
  free(p->memo);
}

void loom_fusion_plan_clear(loom_fusion_plan *plan) {
  if (!plan) return;
  free(plan->group_of_node);
  free(plan->steps);
  free(plan->dup_group);
  free(plan->dup_node);
  memset(plan, 0, sizeof *plan);
}

/* Searches every region in turn (ascending by first node). */
static loom_status search_regions(plan_ctx *p, int32_t beam) {
  int32_t n = p->n;
  int32_t *parent = malloc(sizeof *parent * (size_t)n);
  int32_t *start = calloc((size_t)n + 1, sizeof *start), *nodes = malloc(sizeof *nodes * (size_t)n);
  loom_status status = LOOM_STATUS_OK;
  if (!parent || !start || !nodes) {
    status = LOOM_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  for (int32_t u = 0; u < n; u++)
    parent[u] = u;
  for (int32_t u = 0; u < n; u++) {
    if (p->cls[u] != LOOM_NODE_MEMORY) continue;
    for (int32_t e = p->cons_off[u]; e < p->cons_off[u + 1]; e++) {
      int32_t c = p->cons[e];
      if (p->cls[c] != LOOM_NODE_MEMORY) continue;
      int32_t a = uf_find(parent, u), b = uf_find(parent, c);
      if (a != b) parent[LOOM_MAX(a, b)] = LOOM_MIN(a, b); /* root: smallest */
    }
  }
  /* regions numbered by their smallest node; nodes listed ascending */
  for (int32_t u = 0; u < n; u++) {
    p->comp[u] = p->cls[u] == LOOM_NODE_MEMORY ? uf_find(parent, u) : -1;
    if (p->comp[u] >= 0) start[p->comp[u] + 1]++;
  }
  for (int32_t u = 0; u < n; u++)
    start[u + 1] += start[u];
  for (int32_t u = 0; u < n; u++)
    parent[u] = start[u]; /* reuse: fill cursor */
  for (int32_t u = 0; u < n; u++) {
    if (p->comp[u] < 0) continue;
    p->local[u] = parent[p->comp[u]] - start[p->comp[u]];
    nodes[parent[p->comp[u]]++] = u;
  }
  for (int32_t r = 0; r < n && !status; r++) {
    int32_t cnt = start[r + 1] - start[r];
    if (cnt == 0) continue;
    p->cur = r;
    p->cnodes = nodes + start[r];
    p->ncn = cnt;
    status = search_region(p, beam);
    p->cur = -1;
    loom_plan_finish_groups(p);
  }
done:
  free(parent);
  free(start);
  free(nodes);
  return status;
}

/* Every memory node alone (mode none); nodes no kernel can hold stay -1. */
static void plan_singletons(plan_ctx *p) {
  for (int32_t u = 0; u < p->n; u++) {
    if (p->cls[u] != LOOM_NODE_MEMORY || is_alias(p->g, u)) continue;
    bool ok;
    p->gon[u] = u;
    loom_plan_group_cost(p, u, &u, 1, p->z1[u], p->z2[u], &ok);
    if (!ok) p->gon[u] = -1;
  }
  loom_plan_finish_groups(p);
}

/* Numbers the groups in execution order and writes the steps. */
static loom_status write_plan(plan_ctx *p, loom_fusion_plan *out) {
  int32_t n = p->n;
  int32_t *order = malloc(sizeof *order * (size_t)(n ? n : 1));
  int32_t *indeg = malloc(sizeof *indeg * (size_t)(n ? n : 1));
  int32_t *heap = malloc(sizeof *heap * (size_t)(n ? n : 1));
  out->group_of_node = malloc(sizeof *out->group_of_node * (size_t)(n ? n : 1));
  out->steps = malloc(sizeof *out->steps * (size_t)(n ? n : 1));
  loom_status status = LOOM_STATUS_OK;
  if (!order || !indeg || !heap || !out->group_of_node || !out->steps) {
    status = LOOM_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  p->cur = -1;
  int32_t nu = loom_plan_order_units(p, order, indeg, heap);
  if (nu < 0) {
    status = loom_error(p->ctx, LOOM_STATUS_INTERNAL, "fusion plan: groups form a cycle");
    goto done;
  }
  out->n_nodes = n;
  out->n_groups = 0;
  out->n_steps = nu;
  out->cost_s = 0;
  for (int32_t u = 0; u < n; u++)
    out->group_of_node[u] = -1;
  for (int32_t i = 0; i < nu; i++) {
    int32_t unit = order[i];
    loom_step *st = &out->steps[i];
    if (p->gon[unit] >= 0) {
      int32_t nm = loom_plan_members(p, unit, p->mem);
      uint64_t h1 = 0, h2 = 0;
      for (int32_t j = 0; j < nm; j++) {
        out->group_of_node[p->mem[j]] = out->n_groups;
        h1 += p->z1[p->mem[j]];
        h2 += p->z2[p->mem[j]];
      }
      bool ok;
      out->cost_s += loom_plan_group_cost(p, unit, p->mem, nm, h1, h2, &ok);
      *st = (loom_step){.kind = LOOM_STEP_KERNEL, .kernel = out->n_groups++, .node = -1};
    } else {
      bool gemm = p->cls[unit] == LOOM_NODE_GEMM;
      *st = (loom_step){.kind = gemm ? LOOM_STEP_GEMM : LOOM_STEP_NODE, .kernel = -1, .node = unit};
    }
  }
  out->n_analyzed = p->n_analyze;
done:
  free(order);
  free(indeg);
  free(heap);
  return status;
}

loom_status loom_fusion_plan_build(loom_ctx *ctx, const loom_graph *g, const loom_node_class *cls,
                                   const loom_fusion_options *opts, loom_fusion_plan *out) {
  if (!g || !cls || !opts || !opts->machine || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "fusion plan: NULL argument");
  memset(out, 0, sizeof *out);
  plan_ctx p = {.ctx = ctx,
                .g = g,
                .cls = cls,
                .mode = opts->mode,
                .m = opts->machine,
                .n = g->n_nodes,
                .cur = -1};
  size_t n = (size_t)(g->n_nodes ? g->n_nodes : 1);
  p.z1 = malloc(sizeof *p.z1 * n);
  p.z2 = malloc(sizeof *p.z2 * n);
  p.gon = malloc(sizeof *p.gon * n);
  p.gmin = malloc(sizeof *p.gmin * n);
  p.fnext = malloc(sizeof *p.fnext * n);
  p.span = malloc(sizeof *p.span * n);
  p.comp = malloc(sizeof *p.comp * n);
  p.local = calloc(n, sizeof *p.local);
  p.mark = calloc(n, sizeof *p.mark);
  p.gmark = calloc(n, sizeof *p.gmark);
  p.stack = malloc(sizeof *p.stack * n);
  p.gbuf = malloc(sizeof *p.gbuf * n);
  p.mem = malloc(sizeof *p.mem * (n + 1));
  p.old = malloc(sizeof *p.old * (n + 1));
  p.late = malloc(sizeof *p.late * n);
  loom_status status = LOOM_STATUS_OK;
  if (!p.z1 || !p.z2 || !p.gon || !p.gmin || !p.fnext || !p.span || !p.comp || !p.local ||
      !p.mark || !p.gmark || !p.stack || !p.gbuf || !p.mem || !p.old || !p.late || !memo_grow(&p) ||
      loom_fusion_index_new(ctx, g, &p.ix) != LOOM_STATUS_OK ||
      !build_consumers(&p)) {
    status = LOOM_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  for (int32_t u = 0; u < p.n; u++) {
    p.z1[u] = mix64(2 * (uint64_t)u + 1);
    p.z2[u] = mix64(2 * (uint64_t)u + 2 + ((uint64_t)1 << 40));
    p.gon[u] = -1;
    p.gmin[u] = u;
    p.fnext[u] = -1;
    p.span[u] = u;
  }
  if (opts->mode == LOOM_FUSION_NONE) {
    plan_singletons(&p);
  } else {
    int32_t beam = opts->beam_width > 0 ? opts->beam_width : DEFAULT_BEAM;
    status = search_regions(&p, beam);
    if (!status) status = loom_plan_horizontal(&p);
  }
  bool dup = opts->duplicate > 0 || (opts->duplicate == 0 && loom_fusion_mode_duplicates(opts->mode));
  int32_t *dup_group = NULL, *dup_node = NULL, n_dups = 0;
  if (!status && !p.oom && dup && opts->mode != LOOM_FUSION_NONE)
    status = loom_plan_duplicate(&p, &dup_group, &dup_node, &n_dups);
  if (!status && p.oom) status = LOOM_STATUS_OUT_OF_MEMORY;
  if (!status) status = write_plan(&p, out);
  if (!status && n_dups > 0) {
    /* group ids are largest members: renumber to the plan's groups */
    for (int32_t i = 0; i < n_dups; i++)
      dup_group[i] = out->group_of_node[dup_group[i]];
    out->n_dups = n_dups;
    out->dup_group = dup_group;
    out->dup_node = dup_node;
  } else {
    free(dup_group);
    free(dup_node);
  }
done:
  if (status == LOOM_STATUS_OUT_OF_MEMORY) loom_error(ctx, status, "fusion plan: out of memory");
  if (status) loom_fusion_plan_clear(out);
  plan_ctx_free(&p);
  return status;
}

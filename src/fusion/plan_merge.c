/*
 * Plan exploration, second half (docs/FUSION.md, "Plan search", steps 2
 * and 3): horizontal fusion of pairs of groups while the cost model says
 * it pays, and the execution order of groups and lone nodes.
 */
#include "fusion/plan_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

#define HORIZONTAL_WINDOW 8 /* kernels apart, for shared-input pairs */
#define HORIZONTAL_ROUNDS 64

/* ---- execution order: Kahn over units (groups and lone nodes) ---------- */

static int32_t unit_of(const plan_ctx *p, int32_t u) { return p->gon[u] >= 0 ? p->gon[u] : u; }
/* Ties go to the smallest first node, so the order follows the graph's
 * own; but a unit reading a collective's output goes after every ready
 * unit that does not, so the collective overlaps what can run without it
 * (in the graph's order a gradient bucket's unpacking comes right after
 * its all-reduce, and compute would wait there for each). Not a
 * transfer's readers: a pipeline stage's are ordered by its schedule,
 * and deferred they let every recomputed forward run first (pp2+recompute
 * held its activations again). */
static int32_t unit_key(const plan_ctx *p, int32_t unit) {
  int32_t first = p->gon[unit] >= 0 ? p->gmin[unit] : unit;
  return p->late[unit] ? p->n + first : first;
}

static void heap_push(const plan_ctx *p, int32_t *h, int32_t *n, int32_t x) {
  int32_t i = (*n)++;
  while (i > 0 && unit_key(p, h[(i - 1) / 2]) > unit_key(p, x)) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = x;
}

static int32_t heap_pop(const plan_ctx *p, int32_t *h, int32_t *n) {
  int32_t top = h[0], x = h[--(*n)], i = 0;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && unit_key(p, h[c + 1]) < unit_key(p, h[c])) c++;
    if (unit_key(p, h[c]) >= unit_key(p, x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = x;
  return top;
}

/* Units in a valid order (unit_key); count, or -1 on a cycle. */
int32_t loom_plan_order_units(plan_ctx *p, int32_t *order, int32_t *indeg, int32_t *heap) {
  int32_t n_units = 0, n_heap = 0, k = 0;
  memset(indeg, 0, sizeof *indeg * (size_t)p->n);
  for (int32_t u = 0; u < p->n; u++) {
    if (p->cls[u] == LOOM_NODE_DEAD) continue;
    if (unit_of(p, u) == u) n_units++;
    for (int32_t e = p->cons_off[u]; e < p->cons_off[u + 1]; e++)
      if (unit_of(p, p->cons[e]) != unit_of(p, u)) indeg[unit_of(p, p->cons[e])]++;
  }
  memset(p->late, 0, sizeof *p->late * (size_t)p->n);
  for (int32_t u = 0; u < p->n; u++) {
    const loom_node *nd = &p->g->nodes[u];
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t pr = p->g->values[nd->in[i]].node;
      if (pr >= 0 && loom_op_is_collective(p->g->nodes[pr].op)) p->late[unit_of(p, u)] = true;
    }
  }
  for (int32_t u = 0; u < p->n; u++)
    if (p->cls[u] != LOOM_NODE_DEAD && unit_of(p, u) == u && indeg[u] == 0)
      heap_push(p, heap, &n_heap, u);
  while (n_heap > 0) {
    int32_t unit = heap_pop(p, heap, &n_heap);
    order[k++] = unit;
    int32_t nm = 1;
    if (p->gon[unit] >= 0)
      nm = loom_plan_members(p, unit, p->gbuf);
    else
      p->gbuf[0] = unit;
    for (int32_t i = 0; i < nm; i++) {
      int32_t w = p->gbuf[i];
      for (int32_t e = p->cons_off[w]; e < p->cons_off[w + 1]; e++) {
        int32_t cu = unit_of(p, p->cons[e]);
        if (cu != unit && --indeg[cu] == 0) heap_push(p, heap, &n_heap, cu);
      }
    }
  }
  return k == n_units ? k : -1;
}

/* ---- horizontal fusion: merging independent (or any) pairs of groups --- */

typedef struct hpair {
  int32_t a, b; /* group ids, a's position before b's */
  int32_t pa, pb;
  double gain;
} hpair;

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static int cmp_hpair(const void *x, const void *y) {
  const hpair *a = x, *b = y;
  if (a->gain != b->gain) return a->gain > b->gain ? -1 : 1;
  if (a->pa != b->pa) return a->pa < b->pa ? -1 : 1;
  return (a->pb > b->pb) - (a->pb < b->pb);
}

/* Tentatively labels a and b as one group t = max(a, b); fills p->mem. */
static int32_t label_pair(plan_ctx *p, int32_t a, int32_t b, int32_t t, uint64_t *h1,
                          uint64_t *h2) {
  int32_t nm = loom_plan_members(p, a, p->mem);
  nm += loom_plan_members(p, b, p->mem + nm);
  *h1 = *h2 = 0;
  for (int32_t i = 0; i < nm; i++) {
    *h1 += p->z1[p->mem[i]];
    *h2 += p->z2[p->mem[i]];
    p->gon[p->mem[i]] = t;
  }
  return nm;
}

/* Seconds a group could save as a GEMM's epilogue (epilogue.c): the read
 * of the largest product it takes straight from a GEMM. Members mem[0..nm). */
static double epilogue_stake(const plan_ctx *p, const int32_t *mem, int32_t nm) {
  int64_t most = 0;
  for (int32_t i = 0; i < nm; i++) {
    const loom_node *nd = &p->g->nodes[mem[i]];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t pr = p->g->values[nd->in[k]].node;
      if (pr >= 0 && p->cls[pr] == LOOM_NODE_GEMM)
        most = LOOM_MAX(most, loom_type_numel(loom_value_type(p->g, nd->in[k])) *
                                  (int64_t)loom_dtype_size(loom_value_type(p->g, nd->in[k])->dtype));
    }
  }
  double bw = (p->m->triad_gbps > 0 ? p->m->triad_gbps : 10.0) * 1e9;
  return (double)most / bw;
}

/* True if the group's members mem[0..nm) read nothing made outside it
 * (constants, iotas and what they compute): a part that costs a launch
 * at most wherever it runs. */
static bool reads_nothing(const plan_ctx *p, const int32_t *mem, int32_t nm) {
  int32_t gid = p->gon[mem[0]];
  for (int32_t i = 0; i < nm; i++) {
    const loom_node *nd = &p->g->nodes[mem[i]];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t pr = p->g->values[nd->in[k]].node;
      if (pr < 0 || p->gon[pr] != gid) return false;
    }
  }
  return true;
}

/* True if no member of group a reads what a member of group b makes, nor
 * the other way round: merged, they would be two parts of one kernel. */
static bool independent(const plan_ctx *p, int32_t a, int32_t b, const int32_t *mem, int32_t nm) {
  for (int32_t i = 0; i < nm; i++) {
    const loom_node *nd = &p->g->nodes[mem[i]];
    int32_t other = p->gon[mem[i]] == a ? b : a;
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t pr = p->g->values[nd->in[k]].node;
      if (pr >= 0 && p->gon[pr] == other) return false;
    }
  }
  return true;
}

/* What merging a group that reads nothing (a constant a step needs) as a
 * second part into group x costs beyond the model of the merged kernel:
 * a kernel of two parts runs on no GEMM's rows, so x, were it a GEMM's
 * epilogue, would lose that (epilogue.c). Its upper bound: x's read of the
 * product. Other pairs: 0 (the epilogue pass works on whatever kernels the
 * plan makes; the cost model of a group does not see it). */
static double epilogue_lost(const plan_ctx *p, int32_t a, int32_t b, const int32_t *mem, int32_t na,
                            int32_t nb) {
  if (!independent(p, a, b, mem, na + nb)) return 0.0;
  if (reads_nothing(p, mem, na)) return epilogue_stake(p, mem + na, nb);
  if (reads_nothing(p, mem + na, nb)) return epilogue_stake(p, mem, na);
  return 0.0;
}

/* The latest comm op (by index: nodes are in topological order) that
 * any of the members mem[0..nm) waits on, or -1. */
static int32_t group_wait(const plan_ctx *p, const int32_t *mem, int32_t nm) {
  int32_t w = -1;
  for (int32_t i = 0; i < nm; i++) w = LOOM_MAX(w, p->wait[mem[i]]);
  return w;
}

static double pair_gain(plan_ctx *p, int32_t a, int32_t b) {
  int32_t t = LOOM_MAX(a, b), lo = LOOM_MIN(p->gmin[a], p->gmin[b]);
  int32_t old_min = p->gmin[t];
  uint64_t h1, h2;
  bool ok_a, ok_b, ok;
  /* costs of the parts first, while their labels are still theirs */
  int32_t na = loom_plan_members(p, a, p->mem), nb = loom_plan_members(p, b, p->mem + na);
  uint64_t a1 = 0, a2 = 0, b1 = 0, b2 = 0;
  for (int32_t i = 0; i < na; i++)
    a1 += p->z1[p->mem[i]], a2 += p->z2[p->mem[i]];
  for (int32_t i = na; i < na + nb; i++)
    b1 += p->z1[p->mem[i]], b2 += p->z2[p->mem[i]];
  double ca = loom_plan_group_cost(p, a, p->mem, na, a1, a2, &ok_a);
  double cb = loom_plan_group_cost(p, b, p->mem + na, nb, b1, b2, &ok_b);
  double lost = epilogue_lost(p, a, b, p->mem, na, nb);
  /* groups waiting on different comm ops stay apart: merged, the work
   * that could run first would wait for the later one's data (a
   * pipeline stage's next micro-batch, a layer's weight gradients beside
   * the all-reduce of its input's) */
  if (group_wait(p, p->mem, na) != group_wait(p, p->mem + na, nb)) return -1;
  int32_t nm = label_pair(p, a, b, t, &h1, &h2);
  p->gmin[t] = lo;
  double c = loom_plan_group_cost(p, t, p->mem, nm, h1, h2, &ok);
  double gain =
      ok && ok_a && ok_b && !loom_plan_creates_cycle(p, t, p->mem, nm) ? ca + cb - c - lost : -1;
  for (int32_t i = 0; i < na; i++)
    p->gon[p->mem[i]] = a;
  for (int32_t i = na; i < nm; i++)
    p->gon[p->mem[i]] = b;
  p->gmin[t] = old_min;
  return gain;
}

loom_status loom_plan_horizontal(plan_ctx *p) {
  int32_t n = p->n;
  int32_t *order = malloc(sizeof *order * (size_t)n), *indeg = malloc(sizeof *indeg * (size_t)n);
  int32_t *heap = malloc(sizeof *heap * (size_t)n), *pos = malloc(sizeof *pos * (size_t)n);
  int32_t *kern = malloc(sizeof *kern * (size_t)n);
  int64_t cap = 64, n_in = 0;
  for (int32_t u = 0; u < n; u++)
    n_in += p->g->nodes[u].n_in;
  int64_t *uses = malloc(sizeof *uses * (size_t)(n_in + 1));
  hpair *pairs = malloc(sizeof *pairs * (size_t)cap);
  bool *touched = calloc((size_t)n, sizeof *touched);
  int32_t *wait = malloc(sizeof *wait * (size_t)(n ? n : 1));
  loom_status status = LOOM_STATUS_OK;
  if (!order || !indeg || !heap || !pos || !kern || !uses || !pairs || !touched || !wait) {
    status = LOOM_STATUS_OUT_OF_MEMORY;
    goto done;
  }
  for (int32_t u = 0; u < n; u++) wait[u] = -1;
  for (int32_t u = 0; u < n; u++) { /* producers come first: nodes are in topological order */
    const loom_node *nd = &p->g->nodes[u];
    for (int32_t i = 0; i < nd->n_in; i++) {
      int32_t pr = p->g->values[nd->in[i]].node;
      if (pr >= 0) wait[u] = LOOM_MAX(wait[u], wait[pr]);
    }
    if (loom_op_is_comm(nd->op)) wait[u] = u;
  }
  p->wait = wait;
  p->cur = -1;
  for (int32_t round = 0; round < HORIZONTAL_ROUNDS; round++) {
    int32_t nu = loom_plan_order_units(p, order, indeg, heap);
    if (nu < 0) {
      status = loom_error(p->ctx, LOOM_STATUS_INTERNAL, "fusion plan: groups form a cycle");
      goto done;
    }
    int32_t nk = 0;
    for (int32_t i = 0; i < nu; i++)
      if (p->gon[order[i]] >= 0) {
        pos[order[i]] = nk;
        kern[nk++] = order[i];
      }
    int32_t np = 0;
#define ADD_PAIR(A, B)                                                                             \
  do {                                                                                             \
    if (np == cap) {                                                                               \
      cap *= 2;                                                                                    \
      hpair *q = realloc(pairs, sizeof *pairs * (size_t)cap);                                      \
      if (!q) {                                                                                    \
        status = LOOM_STATUS_OUT_OF_MEMORY;                                                        \
        goto done;                                                                                 \
      }                                                                                            \
      pairs = q;                                                                                   \
    }                                                                                              \
    pairs[np++] = (hpair){.a = (A), .b = (B), .pa = pos[A], .pb = pos[B]};                         \
  } while (0)
    /* neighbours in the execution order */
    for (int32_t i = 0; i + 1 < nk; i++)
      ADD_PAIR(kern[i], kern[i + 1]);
    /* groups reading the same value, a few kernels apart: (value, pos) */
    int64_t nuse = 0;
    for (int32_t u = 0; u < n; u++) {
      if (p->gon[u] < 0) continue;
      for (int32_t i = 0; i < p->g->nodes[u].n_in; i++) {
        int32_t x = p->g->nodes[u].in[i], pr = p->g->values[x].node;
        if (pr >= 0 && p->gon[pr] == p->gon[u]) continue;
        uses[nuse++] = ((int64_t)x << 32) | pos[p->gon[u]];
      }
    }
    qsort(uses, (size_t)nuse, sizeof *uses, cmp_i64);
    for (int64_t i = 0; i + 1 < nuse; i++) {
      int32_t x = (int32_t)(uses[i] >> 32), xa = (int32_t)(uses[i] & 0xffffffff);
      int32_t xb = (int32_t)(uses[i + 1] & 0xffffffff);
      if ((int32_t)(uses[i + 1] >> 32) != x || xa == xb) continue;
      if (xb - xa > 1 && xb - xa <= HORIZONTAL_WINDOW) ADD_PAIR(kern[xa], kern[xb]);
    }
#undef ADD_PAIR
    for (int32_t i = 0; i < np; i++)
      pairs[i].gain = pair_gain(p, pairs[i].a, pairs[i].b);
    if (p->oom) {
      status = LOOM_STATUS_OUT_OF_MEMORY;
      goto done;
    }
    qsort(pairs, (size_t)np, sizeof *pairs, cmp_hpair);
    memset(touched, 0, sizeof *touched * (size_t)n);
    int32_t merged = 0;
    for (int32_t i = 0; i < np && pairs[i].gain > 0; i++) {
      int32_t a = pairs[i].a, b = pairs[i].b;
      if (touched[a] || touched[b]) continue;
      /* earlier merges this round may have closed a cycle through a, b */
      if (merged > 0 && pair_gain(p, a, b) <= 0) continue;
      int32_t t = LOOM_MAX(a, b);
      uint64_t h1, h2;
      int32_t lo = LOOM_MIN(p->gmin[a], p->gmin[b]);
      label_pair(p, a, b, t, &h1, &h2);
      p->gmin[t] = lo;
      touched[a] = touched[b] = true;
      merged++;
      loom_plan_finish_groups(p);
    }
    if (merged == 0) break;
  }
done:
  p->wait = NULL;
  free(wait);
  free(order);
  free(indeg);
  free(heap);
  free(pos);
  free(kern);
  free(uses);
  free(pairs);
  free(touched);
  return status;
}


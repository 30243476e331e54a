/*
 * Producer duplication (docs/FUSION.md, "Producer duplication"): after
 * the search, a cheap producer whose value other kernels load from memory
 * is recomputed in each of them instead, where the cost model says the
 * plan gets cheaper, as XLA's loop fusion duplicates cheap element-wise
 * producers into their consumers (instruction_fusion.cc: IsExpensive,
 * FusionWouldDuplicate). Unlike XLA, values a few float instructions
 * recompute are candidates too (exp, tanh, sigmoid: the kernel IR's own
 * f32 functions; sqrt, rsqrt, reciprocal, division): a backward kernel
 * recomputes exp(x - max) or a GELU's tanh from what it loads anyway
 * instead of the forward writing them, when the cost model says so (its
 * compute term counts the recomputation). Never duplicated: erf, pow, sin
 * and cos (computed in double), log (f32 since lm_logf, not yet measured
 * as a copy), reductions, random numbers. A
 * duplicated producer takes with it the cheap producers of its inputs
 * whose values were not in memory (a broadcast of a mean with the
 * subtraction it feeds), so the copy reads what is in memory already.
 *
 * Groups keep their members; the copies are extra (group, node) pairs
 * that lowering computes and never stores (group.h, loom_fusion_dups).
 * The owner of a duplicated node keeps it while anything still loads its
 * value or its own members use it; a duplication that would leave the
 * owner with nothing to do is refused (the search has already fused such
 * a producer into one of its consumers). Copies read values produced
 * upstream of the owner, so the plan's order stays valid.
 */
#include "fusion/plan_internal.h"
#include "fusion/lower_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* Cheap ops, as XLA counts them: a few instructions per element. */
static bool cheap_op(loom_op op) {
  switch (op) {
  case LOOM_OP_NEG: case LOOM_OP_ABS: case LOOM_OP_SIGN: case LOOM_OP_RELU:
  case LOOM_OP_ADD: case LOOM_OP_SUB: case LOOM_OP_MUL:
  case LOOM_OP_MAXIMUM: case LOOM_OP_MINIMUM:
  case LOOM_OP_EQ: case LOOM_OP_NE: case LOOM_OP_LT: case LOOM_OP_LE: case LOOM_OP_GT:
  case LOOM_OP_GE: case LOOM_OP_SELECT: case LOOM_OP_CAST:
  case LOOM_OP_RESHAPE: case LOOM_OP_TRANSPOSE: case LOOM_OP_BROADCAST_TO: case LOOM_OP_SLICE:
  case LOOM_OP_CONCAT: case LOOM_OP_PAD:
  case LOOM_OP_IOTA: case LOOM_OP_CONSTANT:
    return true;
  default: return false;
  }
}

/* Worth recomputing rather than storing and loading, if the cost model
 * agrees: cheap ops and the float functions the kernels compute in f32. */
static bool recomputable_op(loom_op op) {
  switch (op) {
  case LOOM_OP_EXP: case LOOM_OP_TANH: case LOOM_OP_SIGMOID: case LOOM_OP_SQRT:
  case LOOM_OP_RSQRT: case LOOM_OP_RECIPROCAL: case LOOM_OP_DIV:
    return true;
  default: return cheap_op(op);
  }
}

#define MAX_CONE_DEPTH 16
#define MAX_GROUPS 64

typedef struct dup_state {
  plan_ctx *p;
  int32_t n, cap;
  int32_t *grp, *node;
  loom_fusion_dups view;
} dup_state;

static void sync(dup_state *d) {
  d->view = (loom_fusion_dups){.n = d->n, .group = d->grp, .node = d->node};
  loom_fusion_index_set_dups(d->p->ix, &d->view);
}

static bool push_pair(dup_state *d, int32_t g, int32_t u) {
  if (d->n == d->cap) {
    int32_t cap = d->cap ? 2 * d->cap : 64;
    int32_t *a = realloc(d->grp, sizeof *a * (size_t)cap);
    if (!a) return false;
    d->grp = a;
    int32_t *b = realloc(d->node, sizeof *b * (size_t)cap);
    if (!b) return false;
    d->node = b;
    d->cap = cap;
  }
  d->grp[d->n] = g;
  d->node[d->n] = u;
  d->n++;
  sync(d); /* the index sees the pairs, in their (maybe moved) arrays */
  return true;
}

/* A node that may be duplicated: a recomputable, fusible, single-output
 * memory node in a group, whose value is no graph output. */
static bool candidate(const plan_ctx *p, int32_t u) {
  const loom_node *nd = &p->g->nodes[u];
  return p->cls[u] == LOOM_NODE_MEMORY && p->gon[u] >= 0 && nd->n_out == 1 &&
         recomputable_op(nd->op) && !p->ix->is_output[nd->out[0]];
}

static bool has(const dup_state *d, int32_t g, int32_t u) {
  return g >= 0 && (d->p->gon[u] == g || loom_fusion_index_dup(d->p->ix, g, u));
}

/* Adds q and the cheap producers of its inputs that are not in memory now
 * (n0: the pairs before this step) as copies in group h. */
static bool add_cone(dup_state *d, int32_t h, int32_t q, int32_t n0, int32_t depth) {
  plan_ctx *p = d->p;
  if (has(d, h, q)) return true;
  if (!push_pair(d, h, q)) return false;
  if (depth >= MAX_CONE_DEPTH) return true;
  const loom_node *nd = &p->g->nodes[q];
  for (int32_t i = 0; i < nd->n_in; i++) {
    int32_t pr = p->g->values[nd->in[i]].node;
    if (pr < 0 || !candidate(p, pr) || has(d, h, pr)) continue;
    int32_t keep = d->n;
    d->n = n0;
    sync(d);
    bool in_memory = loom_fusion_index_materialized(p->ix, p->gon, nd->in[i]);
    d->n = keep;
    sync(d);
    if (!in_memory && !add_cone(d, h, pr, n0, depth + 1)) return false;
  }
  return true;
}

/* Adds group g to gs once; false when gs is full (the candidate is then
 * left alone: a cost over some of the groups it touches proves nothing). */
static bool add_group(int32_t *gs, int32_t *ng, int32_t g) {
  if (g < 0) return true;
  for (int32_t i = 0; i < *ng; i++)
    if (gs[i] == g) return true;
  if (*ng == 4 * MAX_GROUPS) return false;
  gs[(*ng)++] = g;
  return true;
}

/* The modeled seconds of group gid with its copies under the current
 * pairs; false if it is not one kernel. */
static bool group_cost(dup_state *d, int32_t gid, double *cost) {
  plan_ctx *p = d->p;
  int32_t nm = loom_plan_members(p, gid, p->mem);
  for (int32_t i = 0; i < d->n; i++)
    if (d->grp[i] == gid) p->mem[nm++] = d->node[i];
  loom_group_info info;
  memset(&info, 0, sizeof info);
  p->n_analyze++;
  if (!loom_fusion_group_analyze_members(p->ix, p->gon, gid, p->mem, nm, p->mode, &info))
    return false;
  *cost = loom_cost_group(p->m, &info, NULL);
  return true;
}

static bool total_cost(dup_state *d, const int32_t *gs, int32_t ng, double *total) {
  *total = 0;
  for (int32_t i = 0; i < ng; i++) {
    double c;
    if (!group_cost(d, gs[i], &c)) return false;
    *total += c;
  }
  return true;
}

loom_status loom_plan_duplicate(plan_ctx *p, int32_t **dup_group, int32_t **dup_node,
                                int32_t *n_dups) {
  dup_state d = {.p = p};
  *dup_group = *dup_node = NULL;
  *n_dups = 0;
  int32_t hs[MAX_GROUPS], gs[4 * MAX_GROUPS];
  loom_status st = LOOM_STATUS_OK;
  p->cur = -1;
  for (int32_t u = p->n - 1; u >= 0 && !st; u--) {
    if (!candidate(p, u)) continue;
    int32_t v = p->g->nodes[u].out[0], home = p->gon[u], nh = 0;
    sync(&d);
    if (!loom_fusion_index_materialized(p->ix, p->gon, v)) continue;
    /* the groups that load v: consumers' own groups and groups that
     * recompute a consumer, unless they compute u already */
    bool too_many = false;
    for (int32_t e = p->ix->cons_off[v]; e < p->ix->cons_off[v + 1]; e++) {
      int32_t c = p->ix->cons[e];
      int32_t cand[1 + 64], nc = 0;
      cand[nc++] = p->gon[c];
      for (int32_t i = 0; i < d.n && nc < 65; i++)
        if (d.node[i] == c) cand[nc++] = d.grp[i];
      for (int32_t k = 0; k < nc; k++) {
        int32_t h = cand[k];
        if (h < 0 || h == home || has(&d, h, u)) continue;
        bool seen = false;
        for (int32_t i = 0; i < nh && !seen; i++) seen = hs[i] == h;
        if (seen) continue;
        if (nh == MAX_GROUPS) too_many = true;
        else hs[nh++] = h;
      }
    }
    if (nh == 0 || too_many) continue;
    int32_t n0 = d.n;
    bool ok = true;
    for (int32_t i = 0; i < nh && ok; i++) ok = add_cone(&d, hs[i], u, n0, 0);
    if (!ok) {
      st = LOOM_STATUS_OUT_OF_MEMORY;
      break;
    }
    /* groups whose cost can change: the owners of the copies (their
     * values may no longer be loaded), the groups that copy, and the
     * owners of what the copies read (now loaded by more groups) */
    int32_t ng = 0;
    bool fits = true;
    for (int32_t i = n0; i < d.n && fits; i++) {
      fits = add_group(gs, &ng, d.grp[i]) && add_group(gs, &ng, p->gon[d.node[i]]);
      const loom_node *nd = &p->g->nodes[d.node[i]];
      for (int32_t k = 0; k < nd->n_in && fits; k++) {
        int32_t pr = p->g->values[nd->in[k]].node;
        if (pr >= 0) fits = add_group(gs, &ng, p->gon[pr]);
      }
    }
    int32_t n1 = d.n;
    double before = 0, after = 0;
    d.n = n0;
    sync(&d);
    bool ok0 = fits && total_cost(&d, gs, ng, &before);
    d.n = n1;
    sync(&d);
    bool ok1 = ok0 && total_cost(&d, gs, ng, &after);
    /* copies that compute nothing (a constant and its reshapes) go where
     * they do not cost more: a value fewer crosses kernels, where a
     * compute-bound consumer's model sees no gain in the load it saves */
    bool free_copies = true;
    for (int32_t i = n0; i < n1 && free_copies; i++)
      free_copies = loom_cost_op_weight(p->g->nodes[d.node[i]].op) == 0;
    bool gain = free_copies ? after <= before * (1.0 + 1e-9) : after < before * (1.0 - 1e-9);
    if (!ok1 || !gain) d.n = n0; /* not one kernel, or no gain */
    sync(&d);
  }
  loom_fusion_index_set_dups(p->ix, NULL);
  if (st) {
    free(d.grp);
    free(d.node);
    return loom_error(p->ctx, st, "fusion plan: out of memory duplicating producers");
  }
  *dup_group = d.grp;
  *dup_node = d.node;
  *n_dups = d.n;
  return LOOM_STATUS_OK;
}

/* loop: XLA's rule; stitch: where a value still crosses kernels */
bool loom_fusion_mode_duplicates(loom_fusion_mode m) { return m != LOOM_FUSION_NONE; }

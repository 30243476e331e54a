/*
 * Private to plan exploration (plan.c: the beam search and the driver;
 * plan_merge.c: horizontal fusion and the execution order): the search
 * state and what both halves use.
 */
#ifndef LOOM_FUSION_PLAN_INTERNAL_H
#define LOOM_FUSION_PLAN_INTERNAL_H

#include "fusion/cost.h"

/* ---- analyze memo: group member set (128-bit hash) -> legality, cost ---- */

typedef struct memo_ent {
  uint64_t h1, h2;
  bool used, ok;
  double cost;
} memo_ent;

typedef struct plan_ctx {
  loom_ctx *ctx;
  const loom_graph *g;
  loom_fusion_index *ix; /* consumers and scratch for analysing groups */
  const loom_node_class *cls;
  loom_fusion_mode mode;
  const loom_machine *m;
  int32_t n;
  int32_t *cons_off, *cons; /* distinct consumer nodes per node */
  uint64_t *z1, *z2;        /* per-node keys: a set hashes to their sums */
  int32_t *gon;             /* working assignment: group id or -1 */
  int32_t *gmin;            /* per group id: smallest member */
  int32_t *fnext;           /* finished groups: next smaller member or -1 */
  int32_t *span;            /* span[x]: largest finished group id with gmin <= x */
  int32_t *comp, *local;    /* region of each memory node, index in it */
  int32_t cur;              /* region being searched (-1: none) */
  const int32_t *cnodes;    /* its nodes, ascending */
  int32_t ncn;
  int32_t lo;               /* its nodes below cnodes[lo] are unlabelled */
  uint32_t *mark, *gmark, epoch;
  int32_t *stack, *gbuf; /* DFS stack; members of a group it expands */
  int32_t *mem, *old;    /* members of a tentative group, their labels */
  bool *late;            /* per unit while ordering: reads a collective's output */
  int32_t *wait;         /* horizontal fusion: the latest comm op each node waits on, or -1 */
  memo_ent *memo;
  int64_t memo_cap, memo_used;
  int64_t n_analyze;
  bool oom;
} plan_ctx;

/* Legality and cost of group `gid` as currently labelled in p->gon: its
 * members mem[0..nm) (any order), whose set hashes to (h1, h2). Cost is
 * +inf when not one kernel. */
double loom_plan_group_cost(plan_ctx *p, int32_t gid, const int32_t *mem, int32_t nm, uint64_t h1,
                            uint64_t h2, bool *ok);
/* Members of group gid into out (descending for finished groups); count. */
int32_t loom_plan_members(const plan_ctx *p, int32_t gid, int32_t *out);
/* True if a path leaves group t (members mem[0..nm), all labelled t in
 * p->gon) and comes back: merging would make the plan unschedulable. */
bool loom_plan_creates_cycle(plan_ctx *p, int32_t t, const int32_t *mem, int32_t nm);
/* After a region is searched (or groups merged): links each finished
 * group's members (descending) and refreshes span. */
void loom_plan_finish_groups(plan_ctx *p);

/* Units (groups and lone nodes) in a valid order, ties to the smallest
 * first node; count, or -1 on a cycle (plan_merge.c). order, indeg and
 * heap have p->n entries. */
int32_t loom_plan_order_units(plan_ctx *p, int32_t *order, int32_t *indeg, int32_t *heap);
/* Horizontal fusion over the whole graph (plan_merge.c). */
loom_status loom_plan_horizontal(plan_ctx *p);
/* Producer duplication over the finished groups (plan_dup.c): the
 * (group id, node) pairs, malloc'ed (NULL when none). */
loom_status loom_plan_duplicate(plan_ctx *p, int32_t **dup_group, int32_t **dup_node,
                                int32_t *n_dups);

#endif

/*
 * Fused groups: the contract between plan exploration (plan.c, cost.c)
 * and lowering (lower.c). A group is a set of memory-intensive nodes that
 * would run as one kernel; group_of_node maps every graph node to its group
 * (-1 for nodes outside any group: GEMMs and eager nodes). A value is
 * materialized (written to memory) iff it is a graph output, or a graph
 * input, or is used by a node outside its producer's group.
 */
#ifndef LOOM_FUSION_GROUP_H
#define LOOM_FUSION_GROUP_H

#include "fusion/fusion.h"

/* What the cost model needs to know about one group. */
typedef struct loom_group_info {
  int64_t bytes_read;    /* global memory read (materialized inputs, once each) */
  int64_t bytes_written; /* global memory written (materialized outputs) */
  int64_t rows;          /* |P| of the largest part */
  int64_t row_len;       /* |R| of that part */
  int32_t n_parts;
  int32_t n_stages;      /* over all parts */
  int32_t n_row_reduce, n_col_reduce;
  int64_t strided_bytes; /* of the bytes read and written, those a row walks at a stride */
  int32_t n_scratch;     /* scratch rows per tile */
  int64_t elem_ops;      /* element-wise evaluations, recomputation included */
  int64_t recompute_ops; /* of which recomputation */
} loom_group_info;

/* True if group `group` can be lowered to one kernel in `mode`; fills info
 * (may be NULL). Cheap enough to call for every candidate the search
 * scores. Never fails loudly: false means "not one kernel". */
bool loom_fusion_group_analyze(const loom_graph *g, const int32_t *group_of_node,
                               int32_t group, loom_fusion_mode mode,
                               loom_group_info *info);

/* Lowers group `group` into kernel `out` (named `name`) with the given
 * schedule for its parts. */
loom_status loom_fusion_group_lower(loom_ctx *ctx, const loom_graph *g,
                                    const int32_t *group_of_node, int32_t group,
                                    loom_fusion_mode mode,
                                    const loom_kschedule *sched,
                                    const char *name, loom_kernel *out);

/* Whether value v must live in memory under this grouping. */
bool loom_fusion_value_materialized(const loom_graph *g,
                                    const int32_t *group_of_node, int32_t v);

/*
 * For analysing and lowering many groups of one graph (the planner scores
 * thousands): the consumers of every value and which values are graph
 * outputs, built once in O(graph), plus scratch reused from call to call,
 * so that one call costs O(the group's members and their edges) instead
 * of O(graph). The calls above build a temporary index each time. An
 * index is tied to its graph, which must not change while it lives, and
 * is used by one thread at a time.
 */
typedef struct loom_fusion_index loom_fusion_index;

loom_status loom_fusion_index_new(loom_ctx *ctx, const loom_graph *g, loom_fusion_index **out);
void loom_fusion_index_free(loom_fusion_index *ix);

/* loom_fusion_group_analyze and _lower with the group's members given:
 * members[0..n_members), in any order, exactly the nodes that
 * group_of_node labels `group`. */
bool loom_fusion_group_analyze_members(loom_fusion_index *ix, const int32_t *group_of_node,
                                       int32_t group, const int32_t *members, int32_t n_members,
                                       loom_fusion_mode mode, loom_group_info *info);
loom_status loom_fusion_group_lower_members(loom_ctx *ctx, loom_fusion_index *ix,
                                            const int32_t *group_of_node, int32_t group,
                                            const int32_t *members, int32_t n_members,
                                            loom_fusion_mode mode, const loom_kschedule *sched,
                                            const char *name, loom_kernel *out);
/* Producer duplication: group group[i] recomputes node node[i], which
 * another group owns. With dups set on an index, lowering accepts those
 * nodes in a member list (computed, never stored: the owner stores what
 * others still load) and materialization counts a value as loaded by a
 * group only where the group does not recompute its producer. The arrays
 * are the caller's; NULL clears. */
typedef struct loom_fusion_dups {
  int32_t n;
  const int32_t *group, *node;
} loom_fusion_dups;
void loom_fusion_index_set_dups(loom_fusion_index *ix, const loom_fusion_dups *dups);
/* True if group recomputes node under ix's dups. */
bool loom_fusion_index_dup(const loom_fusion_index *ix, int32_t group, int32_t node);

/* loom_fusion_value_materialized in O(consumers of v) (with dups: times
 * their count). */
bool loom_fusion_index_materialized(const loom_fusion_index *ix, const int32_t *group_of_node,
                                    int32_t v);

#endif

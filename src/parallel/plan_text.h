/*
 * Plan files (docs/PARALLEL.md, "Plan files"): a parallel plan as text,
 * one primitive per line, over the text IR's tokens (ir/text_ir.h), so
 * comments, spacing and "LINE:COL: message" errors read as in a .loom
 * file. The printer writes every cut, assignment, order, placement and
 * tie of a plan in that grammar, so a plan made in C (a built-in's, a
 * planner's) can be saved, edited and read back to an equal plan.
 */
#ifndef LOOM_PARALLEL_PLAN_TEXT_H
#define LOOM_PARALLEL_PLAN_TEXT_H

#include "core/strbuf.h"
#include "parallel/plan.h"

/* Largest plan file loom_plan_load reads. */
#define LOOM_PLAN_MAX_FILE ((size_t)64 << 20)

/* Parses len bytes of plan text over graph g (borrowed: it must outlive
 * the plan). Errors are LOOM_STATUS_PARSE, "LINE:COL: message". */
loom_status loom_plan_parse(loom_ctx *ctx, const loom_graph *g, const char *text, size_t len,
                            loom_plan **out);
/* loom_plan_parse of a file; errors are "PATH:LINE:COL: message". */
loom_status loom_plan_load(loom_ctx *ctx, const loom_graph *g, const char *path, loom_plan **out);

/* A plan named on a command line: the plan file at `what` if one exists,
 * else the built-in spec `what` (parallel/builtin.h) over n_devices. A
 * file's device count must equal n_devices when n_devices > 0. */
loom_status loom_plan_open(loom_ctx *ctx, const loom_graph *g, const char *what,
                           int32_t n_devices, loom_plan **out);

/* Appends p in the plan-file grammar (check b->oom at the end). Fails, and
 * writes nothing, for a plan the grammar cannot state (a split of a label
 * no operand dim carries). */
loom_status loom_plan_write(const loom_plan *p, loom_strbuf *b);

/* True if a and b are equal plans over one graph: the same devices, the
 * same cuts (per node, the same tree of splits and replications), the same
 * device on every leaf, the same orders, placements and ties. *why (may be
 * NULL) gets the first difference. */
bool loom_plan_same(const loom_plan *a, const loom_plan *b, char *why, size_t n);

#endif

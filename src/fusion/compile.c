/*
 * loom_fusion_compile: classify, plan, schedule and lower a graph into a
 * program (fusion.h). The plan (plan.c) fixes the groups and the order of
 * the steps; the cost model (cost.c) fixes each kernel part's schedule
 * from the part's own sizes once the group is lowered.
 */
#include "fusion/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Schedules every part of a lowered kernel from its sizes: the kernel's
 * global traffic per element, times the part's row length, and the
 * extent of the part's column reductions. */
static void schedule_parts(loom_kernel *k, const loom_group_info *info) {
  int64_t elems = 0;
  for (int32_t i = 0; i < k->n_parts; i++)
    elems += loom_kpart_rows(&k->parts[i]) * loom_kpart_row_len(&k->parts[i]);
  double per_elem =
      elems > 0 ? (double)(info->bytes_read + info->bytes_written) / (double)elems : 4.0;
  for (int32_t i = 0; i < k->n_parts; i++) {
    loom_kpart *pt = &k->parts[i];
    int64_t row_len = loom_kpart_row_len(pt), partial = 0;
    for (int32_t s = 0; s < pt->n_stages; s++) {
      for (int32_t o = 0; o < pt->stages[s].n_out; o++) {
        const loom_kout *ko = &pt->stages[s].out[o];
        if (ko->dst == LOOM_KDST_COL_REDUCE && ko->target >= 0 && ko->target < k->n_args)
          partial += k->args[ko->target].numel;
      }
    }
    int64_t bpr = (int64_t)(per_elem * (double)row_len + 0.5);
    pt->sched = loom_cost_schedule(loom_kpart_rows(pt), row_len, bpr, partial);
  }
}

static loom_status lower_group(loom_ctx *ctx, loom_fusion_index *ix, const loom_fusion_plan *plan,
                               int32_t group, const int32_t *mem, int32_t n_mem,
                               loom_fusion_mode mode, const loom_machine *m, loom_kernel *k,
                               int64_t *bytes, double *seconds, double *excess) {
  loom_group_info info;
  memset(&info, 0, sizeof info);
  if (!loom_fusion_group_analyze_members(ix, plan->group_of_node, group, mem, n_mem, mode, &info))
    return loom_error(ctx, LOOM_STATUS_INTERNAL,
                      "fusion: the plan's group %d is not one kernel in mode %s", group,
                      loom_fusion_mode_name(mode));
  loom_cost_detail d;
  *seconds = loom_cost_group(m, &info, &d);
  *excess = fmax(0.0, d.memory_s - d.compute_s) * d.imbalance;
  *bytes = info.bytes_read + info.bytes_written;
  char name[48];
  snprintf(name, sizeof name, "k%d", group);
  /* The largest part's schedule; every part gets its own once lowered. */
  loom_status st = loom_fusion_group_lower_members(ctx, ix, plan->group_of_node, group, mem, n_mem,
                                                   mode, &d.sched, name, k);
  if (st) {
    loom_error_prefix(ctx, "fusion: lowering group %d", group);
    return st;
  }
  schedule_parts(k, &info);
  return LOOM_STATUS_OK;
}

static loom_status compile_mode(loom_ctx *ctx, const loom_graph *g, const loom_fusion_options *opts,
                                loom_program *out);

loom_status loom_fusion_compile(loom_ctx *ctx, const loom_graph *g, const loom_fusion_options *opts,
                                loom_program *out) {
  LOOM_TRY(compile_mode(ctx, g, opts, out));
  if (opts->mode != LOOM_FUSION_STITCH || opts->stitch_only) return LOOM_STATUS_OK;
  /* The search is greedy and stitch's larger groups can lose what loop's
   * epilogues win: the loop plan, when the model rates it faster. */
  loom_fusion_options lo = *opts;
  lo.mode = LOOM_FUSION_LOOP;
  loom_program loop;
  loom_status st = compile_mode(ctx, g, &lo, &loop);
  if (st) {
    loom_program_clear(out);
    return st;
  }
  if (loop.modeled_seconds < out->modeled_seconds) {
    loom_program_clear(out);
    *out = loop;
  } else {
    loom_program_clear(&loop);
  }
  return LOOM_STATUS_OK;
}

static loom_status compile_mode(loom_ctx *ctx, const loom_graph *g, const loom_fusion_options *opts,
                                loom_program *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "fusion_compile: out is NULL");
  memset(out, 0, sizeof *out);
  if (!g || !opts)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "fusion_compile: NULL argument");
  if (opts->mode != LOOM_FUSION_NONE && opts->mode != LOOM_FUSION_LOOP &&
      opts->mode != LOOM_FUSION_STITCH)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "fusion_compile: mode %d (%s) does not fuse", (int)opts->mode,
                      loom_fusion_mode_name(opts->mode) ? loom_fusion_mode_name(opts->mode) : "?");
  loom_machine fallback;
  loom_fusion_options o = *opts;
  if (!o.machine) {
    loom_machine_default(&fallback);
    o.machine = &fallback;
  }
  const loom_machine *m = o.machine;
  out->mode = o.mode;
  loom_node_class *cls = malloc(sizeof *cls * (size_t)(g->n_nodes ? g->n_nodes : 1));
  loom_fusion_plan plan;
  memset(&plan, 0, sizeof plan);
  loom_fusion_index *ix = NULL;
  int32_t *mem_off = NULL, *mem = NULL; /* members of each group (CSR) */
  loom_status st = LOOM_STATUS_OK;
  if (!cls) {
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion: out of memory");
    goto fail;
  }
  loom_fusion_classify(g, cls);
  st = loom_fusion_plan_build(ctx, g, cls, &o, &plan);
  if (st) goto fail;

  out->n_values = g->n_values;
  out->kernels = calloc((size_t)(plan.n_groups ? plan.n_groups : 1), sizeof *out->kernels);
  out->steps = malloc(sizeof *out->steps * (size_t)(plan.n_steps ? plan.n_steps : 1));
  out->materialized = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *out->materialized);
  out->kernel_bytes =
      calloc((size_t)(plan.n_groups ? plan.n_groups : 1), sizeof *out->kernel_bytes);
  out->kernel_seconds =
      calloc((size_t)(plan.n_groups ? plan.n_groups : 1), sizeof *out->kernel_seconds);
  out->kernel_memory_excess =
      calloc((size_t)(plan.n_groups ? plan.n_groups : 1), sizeof *out->kernel_memory_excess);
  if (!out->kernels || !out->steps || !out->materialized || !out->kernel_bytes ||
      !out->kernel_seconds || !out->kernel_memory_excess) {
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion: out of memory");
    goto fail;
  }
  out->n_kernels = plan.n_groups; /* zeroed kernels clear safely on failure */
  /* one index and member lists for all groups: lowering is O(graph) */
  st = loom_fusion_index_new(ctx, g, &ix);
  if (st) goto fail;
  /* duplicated producers: lowered with the groups that recompute them,
   * and counted in what is materialized */
  loom_fusion_dups dups = {.n = plan.n_dups, .group = plan.dup_group, .node = plan.dup_node};
  loom_fusion_index_set_dups(ix, &dups);
  mem_off = calloc((size_t)plan.n_groups + 1, sizeof *mem_off);
  mem = malloc(sizeof *mem * (size_t)(g->n_nodes + plan.n_dups > 0 ? g->n_nodes + plan.n_dups : 1));
  if (!mem_off || !mem) {
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion: out of memory");
    goto fail;
  }
  for (int32_t n = 0; n < g->n_nodes; n++)
    if (plan.group_of_node[n] >= 0) mem_off[plan.group_of_node[n] + 1]++;
  for (int32_t i = 0; i < plan.n_dups; i++) mem_off[plan.dup_group[i] + 1]++;
  for (int32_t i = 0; i < plan.n_groups; i++) mem_off[i + 1] += mem_off[i];
  {
    int32_t *cur = malloc(sizeof *cur * (size_t)(plan.n_groups ? plan.n_groups : 1));
    if (!cur) {
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion: out of memory");
      goto fail;
    }
    memcpy(cur, mem_off, sizeof *cur * (size_t)plan.n_groups);
    for (int32_t n = 0; n < g->n_nodes; n++)
      if (plan.group_of_node[n] >= 0) mem[cur[plan.group_of_node[n]]++] = n;
    for (int32_t i = 0; i < plan.n_dups; i++) mem[cur[plan.dup_group[i]]++] = plan.dup_node[i];
    free(cur);
  }
  for (int32_t n = 0; n < g->n_nodes; n++)
    out->n_memory_ops += cls[n] == LOOM_NODE_MEMORY;
  /* Groups are numbered in step order: kernel i is group i, named k<i>. */
  for (int32_t s = 0; s < plan.n_steps; s++) {
    const loom_step *ps = &plan.steps[s];
    out->steps[out->n_steps++] = *ps;
    if (ps->kind == LOOM_STEP_KERNEL) {
      int64_t bytes = 0;
      double secs = 0, excess = 0;
      int32_t gi = ps->kernel;
      st = lower_group(ctx, ix, &plan, gi, mem + mem_off[gi], mem_off[gi + 1] - mem_off[gi],
                       o.mode, m, &out->kernels[gi], &bytes, &secs, &excess);
      if (st) goto fail;
      out->kernel_bytes[ps->kernel] = bytes;
      out->kernel_seconds[ps->kernel] = secs;
      out->kernel_memory_excess[ps->kernel] = excess;
      out->modeled_bytes += bytes;
      out->modeled_seconds += secs;
    } else {
      out->modeled_bytes += loom_cost_node_bytes(g, ps->node);
      out->modeled_seconds += ps->kind == LOOM_STEP_GEMM ? loom_cost_gemm(m, g, ps->node)
                                                         : loom_cost_eager(m, g, ps->node);
    }
  }
  for (int32_t v = 0; v < g->n_values; v++) {
    int32_t pr = g->values[v].node;
    if (pr >= 0 && cls[pr] == LOOM_NODE_DEAD) continue; /* never computed */
    out->materialized[v] = pr < 0 || plan.group_of_node[pr] < 0 ||
                           loom_fusion_index_materialized(ix, plan.group_of_node, v);
  }
  if (plan.n_dups > 0) { /* kernel i is group i */
    out->n_dups = plan.n_dups;
    out->dup_kernel = plan.dup_group;
    out->dup_node = plan.dup_node;
    plan.dup_group = plan.dup_node = NULL;
    plan.n_dups = 0;
  }
  st = loom_fusion_attach_epilogues(ctx, g, m, out);
  if (st) goto fail;
  free(cls);
  loom_fusion_index_free(ix);
  free(mem_off);
  free(mem);
  loom_fusion_plan_clear(&plan);
  return LOOM_STATUS_OK;
fail:
  free(cls);
  loom_fusion_index_free(ix);
  free(mem_off);
  free(mem);
  loom_fusion_plan_clear(&plan);
  loom_program_clear(out);
  return st;
}

/*
 * What fusion may put in a kernel (loom_fusion_node_fusible), which values
 * live in memory (loom_fusion_value_materialized), and what one group
 * would cost as a kernel (loom_fusion_group_analyze). The analysis lowers
 * the group for real (lower.c) and reads the figures off the kernel, so
 * that what the cost model sees is exactly what would run: the same
 * parts, stages, scratch rows and recomputation. The per-graph index
 * (group.h) lives here too: its consumer lists decide materialization.
 */
#include "fusion/lower_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

/* Kernel values: f32 data, integers and bools (labels, masks, indices). */
static bool kernel_dtype(loom_dtype dt) {
  return dt == LOOM_DTYPE_F32 || dt == LOOM_DTYPE_I32 || dt == LOOM_DTYPE_I64 ||
         dt == LOOM_DTYPE_BOOL || dt == LOOM_DTYPE_U8;
}

bool loom_fusion_node_fusible(const loom_graph *g, int32_t node) {
  if (!g || node < 0 || node >= g->n_nodes) return false;
  const loom_node *n = &g->nodes[node];
  const loom_op_def *d = loom_op_get(n->op);
  if (!d || n->n_out != 1) return false;
  for (int32_t i = 0; i < n->n_in; i++)
    if (!kernel_dtype(loom_value_type(g, n->in[i])->dtype)) return false;
  loom_dtype out = loom_value_type(g, n->out[0])->dtype;
  if (!kernel_dtype(out)) return false;
  switch (d->cls) {
  case LOOM_OPCLASS_ELEMENTWISE:
  case LOOM_OPCLASS_SOURCE: return true;
  /* reductions and dropout accumulate or scale f32 data only */
  case LOOM_OPCLASS_REDUCE:
  case LOOM_OPCLASS_RNG: return out == LOOM_DTYPE_F32;
  /* views: folded into loads, or loops shared with their input; concat
   * and pad: a piece selected by index, guarded loads (lower_domain.c) */
  case LOOM_OPCLASS_LAYOUT:
    return n->op == LOOM_OP_RESHAPE || n->op == LOOM_OP_BROADCAST_TO ||
           n->op == LOOM_OP_TRANSPOSE || n->op == LOOM_OP_SLICE || n->op == LOOM_OP_CONCAT ||
           n->op == LOOM_OP_PAD;
  /* a peer waits for each comm node: a boundary, run alone and in order */
  case LOOM_OPCLASS_COMM: return false;
  default: return false; /* GEMM, gather/scatter */
  }
}

bool loom_fusion_value_materialized(const loom_graph *g, const int32_t *group_of_node,
                                    int32_t v) {
  if (!g || !loom_value_valid(g, v)) return false;
  int32_t prod = g->values[v].node;
  if (prod < 0) return true;
  for (int32_t o = 0; o < g->n_outputs; o++)
    if (g->outputs[o] == v) return true;
  int32_t grp = group_of_node ? group_of_node[prod] : -1;
  if (grp < 0) return true; /* produced by a GEMM or an eager node */
  for (int32_t n = prod + 1; n < g->n_nodes; n++) {
    if (group_of_node[n] == grp) continue;
    const loom_node *nd = &g->nodes[n];
    for (int32_t i = 0; i < nd->n_in; i++)
      if (nd->in[i] == v) return true;
  }
  return false;
}

loom_status loom_fusion_index_new(loom_ctx *ctx, const loom_graph *g, loom_fusion_index **out) {
  if (out) *out = NULL;
  if (!out || !g)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "fusion index: NULL argument");
  loom_fusion_index *ix = calloc(1, sizeof *ix);
  size_t nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
  int64_t uses = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) uses += g->nodes[n].n_in;
  if (ix) {
    ix->g = g;
    ix->cons_off = calloc(nv + 1, sizeof *ix->cons_off);
    ix->cons = malloc(sizeof *ix->cons * (size_t)(uses + 1));
    ix->is_output = calloc(nv, sizeof *ix->is_output);
    ix->loc = malloc(sizeof *ix->loc * nv);
  }
  if (!ix || !ix->cons_off || !ix->cons || !ix->is_output || !ix->loc) {
    loom_fusion_index_free(ix);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "fusion index: out of memory");
  }
  /* consumers by value: count, prefix sums, fill (ascending node order) */
  for (int32_t n = 0; n < g->n_nodes; n++)
    for (int32_t i = 0; i < g->nodes[n].n_in; i++) ix->cons_off[g->nodes[n].in[i] + 1]++;
  for (int32_t v = 0; v < g->n_values; v++) ix->cons_off[v + 1] += ix->cons_off[v];
  for (int32_t v = 0; v < g->n_values; v++) ix->loc[v] = ix->cons_off[v]; /* fill cursors */
  for (int32_t n = 0; n < g->n_nodes; n++)
    for (int32_t i = 0; i < g->nodes[n].n_in; i++) ix->cons[ix->loc[g->nodes[n].in[i]]++] = n;
  for (int32_t v = 0; v < g->n_values; v++) ix->loc[v] = -1;
  for (int32_t o = 0; o < g->n_outputs; o++) ix->is_output[g->outputs[o]] = true;
  *out = ix;
  return LOOM_STATUS_OK;
}

void loom_fusion_index_free(loom_fusion_index *ix) {
  if (!ix) return;
  free(ix->cons_off);
  free(ix->cons);
  free(ix->is_output);
  free(ix->loc);
  free(ix);
}

void loom_fusion_index_set_dups(loom_fusion_index *ix, const loom_fusion_dups *dups) {
  if (ix) ix->dups = dups && dups->n > 0 ? dups : NULL;
}

bool loom_fusion_index_dup(const loom_fusion_index *ix, int32_t group, int32_t node) {
  if (!ix || !ix->dups || group < 0) return false;
  for (int32_t i = 0; i < ix->dups->n; i++)
    if (ix->dups->node[i] == node && ix->dups->group[i] == group) return true;
  return false;
}

bool loom_fusion_index_materialized(const loom_fusion_index *ix, const int32_t *group_of_node,
                                    int32_t v) {
  if (!ix || !loom_value_valid(ix->g, v)) return false;
  int32_t prod = ix->g->values[v].node;
  if (prod < 0 || ix->is_output[v]) return true;
  int32_t grp = group_of_node ? group_of_node[prod] : -1;
  if (grp < 0) return true; /* produced by a GEMM or an eager node */
  const loom_fusion_dups *d = ix->dups;
  for (int32_t e = ix->cons_off[v]; e < ix->cons_off[v + 1]; e++) {
    int32_t c = ix->cons[e], h = group_of_node[c];
    /* a consumer's own group loads v unless it recomputes the producer */
    if (h != grp && !loom_fusion_index_dup(ix, h, prod)) return true;
    /* and so does every group that recomputes the consumer */
    for (int32_t i = 0; d && i < d->n; i++)
      if (d->node[i] == c && d->group[i] != grp && !loom_fusion_index_dup(ix, d->group[i], prod))
        return true;
  }
  return false;
}

/* Whether map walks its argument at a stride along part p's row: the
 * innermost row dim moves it by more than one element (a transposed
 * operand: every element of a row on another cache line). */
static bool strided(const loom_kpart *p, const loom_kmap *map) {
  if (p->r_rank < 1 || p->r_shape[p->r_rank - 1] < 2) return false;
  int64_t step = map->r[p->r_rank - 1];
  return step > 1 || step < -1;
}

/* Element-wise work of stage st of part p: the OP (by loom_cost_op_weight)
 * and KEEP expressions it reaches, once per element it runs for; in a ROW
 * stage, the args it loads or stores at a stride along the row are marked
 * in walked. mark holds the stamp of the last walk that reached each
 * expression; stack has room for every one. */
static int64_t stage_ops(const loom_kernel *k, const loom_kpart *p, const loom_kstage *st,
                         int32_t *mark, int32_t stamp, int32_t *stack, bool *walked) {
  bool row = st->kind == LOOM_KSTAGE_ROW;
  int64_t n = 0;
  int32_t sp = 0;
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *out = &st->out[o];
    if (row && out->dst == LOOM_KDST_STORE && strided(p, &out->map)) walked[out->target] = true;
    int32_t r = out->expr;
    if (mark[r] == stamp) continue;
    mark[r] = stamp;
    stack[sp++] = r;
    while (sp > 0) {
      const loom_kexpr *e = &k->exprs[stack[--sp]];
      if (e->kind == LOOM_KX_OP) n += LOOM_MAX(1, loom_cost_op_weight(e->op));
      n += e->kind == LOOM_KX_KEEP;
      if (row && e->kind == LOOM_KX_LOAD && strided(p, &e->map)) walked[e->arg] = true;
      for (int32_t a = 0; a < e->n_a; a++)
        if (mark[e->a[a]] != stamp) {
          mark[e->a[a]] = stamp;
          stack[sp++] = e->a[a];
        }
    }
  }
  return n;
}

/* Element-wise work the graph itself asks for (each node once). */
static int64_t graph_ops(const loom_graph *g, const loom_kernel *k) {
  int64_t n = 0;
  for (int32_t i = 0; i < k->n_nodes; i++) {
    const loom_node *nd = &g->nodes[k->nodes[i]];
    loom_op_class c = loom_op_get(nd->op)->cls;
    int64_t numel = loom_type_numel(loom_value_type(g, nd->out[0]));
    if (c == LOOM_OPCLASS_ELEMENTWISE) n += numel * loom_cost_op_weight(nd->op);
    if (c == LOOM_OPCLASS_RNG) n += 3 * numel; /* keep, scale, select */
  }
  return n;
}

static void fill_info(const loom_graph *g, const loom_kernel *k, loom_group_info *info) {
  memset(info, 0, sizeof *info);
  size_t ne = (size_t)(k->n_exprs > 0 ? k->n_exprs : 1);
  int32_t *mark = calloc(ne * 2, sizeof(int32_t)), stamp = 0;
  bool *walked = calloc((size_t)(k->n_args > 0 ? k->n_args : 1), sizeof(bool));
  int64_t best = -1;
  info->n_parts = k->n_parts;
  for (int32_t pi = 0; pi < k->n_parts; pi++) {
    const loom_kpart *p = &k->parts[pi];
    int64_t rows = loom_kpart_rows(p), len = loom_kpart_row_len(p);
    if (rows * len > best) {
      best = rows * len;
      info->rows = rows;
      info->row_len = len;
    }
    info->n_stages += p->n_stages;
    info->n_scratch = LOOM_MAX(info->n_scratch, p->n_scratch);
    for (int32_t s = 0; s < p->n_stages; s++) {
      const loom_kstage *st = &p->stages[s];
      for (int32_t o = 0; o < st->n_out; o++) {
        info->n_row_reduce += st->out[o].dst == LOOM_KDST_ROW_REDUCE;
        info->n_col_reduce += st->out[o].dst == LOOM_KDST_COL_REDUCE;
      }
      if (mark && walked)
        info->elem_ops += stage_ops(k, p, st, mark, ++stamp, mark + ne, walked) * rows *
                          (st->kind == LOOM_KSTAGE_ROW ? len : 1);
    }
  }
  for (int32_t i = 0; i < k->n_args; i++) {
    const loom_karg *a = &k->args[i];
    if (a->temp) continue;
    int64_t bytes = a->numel * (int64_t)loom_dtype_size(a->dtype);
    if (a->is_output)
      info->bytes_written += bytes;
    else
      info->bytes_read += bytes;
    if (walked && walked[i]) info->strided_bytes += bytes;
  }
  free(mark);
  free(walked);
  int64_t need = graph_ops(g, k);
  info->recompute_ops = info->elem_ops > need ? info->elem_ops - need : 0;
}

bool loom_fusion_group_analyze_members(loom_fusion_index *ix, const int32_t *group_of_node,
                                       int32_t group, const int32_t *members, int32_t n_members,
                                       loom_fusion_mode mode, loom_group_info *info) {
  loom_kernel k;
  /* no context: a refusal is an answer here, not an error to report */
  if (loom_fusion_group_lower_members(NULL, ix, group_of_node, group, members, n_members, mode,
                                      NULL, "analyze", &k) != LOOM_STATUS_OK)
    return false;
  if (info) fill_info(ix->g, &k, info);
  loom_kernel_clear(&k);
  return true;
}

bool loom_fusion_group_analyze(const loom_graph *g, const int32_t *group_of_node, int32_t group,
                               loom_fusion_mode mode, loom_group_info *info) {
  loom_kernel k;
  /* no context: a refusal is an answer here, not an error to report */
  if (loom_fusion_group_lower(NULL, g, group_of_node, group, mode, NULL, "analyze", &k) !=
      LOOM_STATUS_OK)
    return false;
  if (info) fill_info(g, &k, info);
  loom_kernel_clear(&k);
  return true;
}

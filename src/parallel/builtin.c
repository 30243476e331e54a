/*
 * Built-in plans (builtin.h). Every strategy is one pass of `cut_axis`
 * over the graph for one axis of the device mesh: each node is cut by
 * op_trans into that axis' degree of parts — on a label of its partition
 * annotation, or into replicas — and part i goes to the i-th device of the
 * axis. Which label is the strategy's only decision:
 *
 *   dp  (data parallel): the batch label, wherever the batch reaches (the
 *       integer inputs' leading dim, followed through every node). Weight
 *       gradients come out as partial sums over the batch, so the lowering
 *       all-reduces them; everything else is replicated.
 *   tp  (tensor parallel, Megatron's form): weights are seeded split as
 *       Megatron does (QKV and first MLP matrix by columns, the output
 *       projections by rows, the embedding by vocabulary); each node
 *       takes the cut the cost model finds cheapest given how its
 *       operands are split. Attention splits by heads, the rest of the
 *       block is replicated, and the lowering adds the two all-reduces
 *       per layer and direction.
 *   zero1/zero2/zero3 (ZeRO, with dp): the AdamW moments (and with zero3
 *       the parameters) are held as row shards across the dp group; the
 *       optimizer step is cut by those rows, so the lowering
 *       reduce-scatters the gradients into it and all-gathers the new
 *       parameters (zero3: gathers each parameter where it is used). Only
 *       the moments steer the cuts: a zero3 parameter's shards are how it
 *       is stored, not how its readers are cut (following them would cut
 *       a norm's gain-times-activation by columns and all-reduce
 *       activations instead of gathering the parameter).
 *
 * A mesh axis of degree n with stride s: part i of a node already placed
 * on device b goes to device b + i*s.
 */
#include "parallel/builtin_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char help[] =
    "  dpN        data parallel over N devices (gradients all-reduced)\n"
    "  tpN        tensor parallel (Megatron: heads, MLP columns/rows, vocabulary)\n"
    "  AxB        a mesh of strategies, e.g. dp2xtp2 or dp2tp2 (tp groups are\n"
    "             adjacent devices)\n"
    "  ppN        pipeline over N stages by layer, micro-batched (default 1F1B)\n"
    "  +gpipe|+1f1b|+interleaved[V]|+mbM\n"
    "             the pipeline's schedule (interleaved: 1F1B over V chunks of\n"
    "             layers per device, default 2), and M micro-batches (default N)\n"
    "  +interlaced\n"
    "             with pp: embedding and head tensor-parallel across all the\n"
    "             stages' devices, the layers pipelined (GPipe order)\n"
    "  +recompute every layer's activations in its backward (layer outputs kept;\n"
    "             with pp, each micro-batch's just before its backward)\n"
    "  +zero1|+zero2|+zero3\n"
    "             ZeRO with the dp axis: AdamW state (zero3: and parameters)\n"
    "             sharded, gradients reduce-scattered, parameters all-gathered\n";

const char *loom_plan_builtin_help(void) { return help; }

static bool parse_spec(const char *s, spec *out) {
  memset(out, 0, sizeof *out);
  const char *q = s;
  for (;;) {
    if (out->n_axes == MAX_AXES) return false;
    axis_kind k;
    if (strncmp(q, "dp", 2) == 0) k = AXIS_DP;
    else if (strncmp(q, "tp", 2) == 0) k = AXIS_TP;
    else if (strncmp(q, "pp", 2) == 0) k = AXIS_PP;
    else return false;
    q += 2;
    char *end = NULL;
    long n = strtol(q, &end, 10);
    if (end == q || n < 1 || n > LOOM_PLAN_MAX_DEVICES || *q == '+' || *q == '-') return false;
    for (int32_t a = 0; a < out->n_axes; a++)
      if (out->kind[a] == k) return false;
    out->kind[out->n_axes] = k;
    out->degree[out->n_axes++] = (int32_t)n;
    q = end;
    /* axes joined by 'x' (dp2xtp2) or written one after another (dp2tp2) */
    if (*q == 'x') q++;
    else if (!(q[0] == 'd' || q[0] == 't' || (q[0] == 'p' && q[1] == 'p'))) break;
  }
  while (*q == '+') {
    q++;
    if (strncmp(q, "zero", 4) == 0 && q[4] >= '1' && q[4] <= '3' && !out->zero) {
      out->zero = q[4] - '0';
      q += 5;
    } else if (strncmp(q, "recompute", 9) == 0) {
      out->recompute = true;
      q += 9;
    } else if (strncmp(q, "interlaced", 10) == 0) {
      out->interlaced = true;
      q += 10;
    } else if (strncmp(q, "gpipe", 5) == 0) {
      out->schedule = PP_GPIPE;
      q += 5;
    } else if (strncmp(q, "interleaved", 11) == 0) {
      out->schedule = PP_INTERLEAVED;
      out->chunks = 2;
      q += 11;
      if (*q >= '0' && *q <= '9') { /* +interleaved4: four chunks a device */
        char *end = NULL;
        long v = strtol(q, &end, 10);
        if (v < 2 || v > 1024) return false;
        out->chunks = (int32_t)v;
        q = end;
      }
    } else if (strncmp(q, "1f1b", 4) == 0) {
      out->schedule = PP_1F1B;
      q += 4;
    } else if (strncmp(q, "mb", 2) == 0 && q[2] >= '1' && q[2] <= '9') {
      char *end = NULL;
      long n = strtol(q + 2, &end, 10);
      if (n < 1 || n > 4096) return false;
      out->micro = (int32_t)n;
      q = end;
    } else {
      return false;
    }
  }
  return *q == '\0';
}

bool loom_plan_builtin_known(const char *s) {
  spec sp;
  return s && parse_spec(s, &sp);
}

loom_status loom_plan_tie_by_name(loom_plan *p) {
  const loom_graph *g = p->graph;
  for (int32_t o = 0; o < g->n_outputs; o++) {
    const char *nm = g->output_names[o];
    if (strncmp(nm, "new.", 4) != 0) continue;
    for (int32_t i = 0; i < g->n_inputs; i++)
      if (strcmp(g->values[g->inputs[i]].name, nm + 4) == 0) LOOM_TRY(loom_plan_tie(p, o, i));
  }
  return LOOM_STATUS_OK;
}

/* ---- one mesh axis ------------------------------------------------------------------ */


static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Megatron's split of a parameter (by its name, adam.m./adam.v. prefixes
 * stripped): the dim, or WHOLE. */
static int32_t megatron_dim(const char *name) {
  if (strncmp(name, "adam.m.", 7) == 0 || strncmp(name, "adam.v.", 7) == 0) name += 7;
  if (ends_with(name, "qkv.w") || ends_with(name, "fc.w")) return 1;
  if (ends_with(name, "qkv.b") || ends_with(name, "fc.b")) return 0;
  if (ends_with(name, "proj.w")) return 0;
  if (strcmp(name, "wte") == 0 || strcmp(name, "head.w") == 0) return 0; /* by vocabulary */
  return WHOLE;
}

static int64_t value_bytes(const loom_graph *g, int32_t v) {
  const loom_type *t = loom_value_type(g, v);
  return loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
}

/* The first dim of operand (input i or output o) that carries label l. */
static int32_t dim_of(const loom_partition *pa, bool out, int32_t k, int32_t rank, int32_t l) {
  for (int32_t d = 0; d < rank; d++)
    if ((out ? pa->out[k][d] : pa->in[k][d]) == l) return d;
  return -1;
}

/* Bytes of communication the cut (label l, or -1: replicas) costs given
 * how the operands lie. */
static double cut_cost(const axis_cut *ax, int32_t node, int32_t l) {
  const loom_plan *p = ax->p;
  const loom_graph *g = p->graph;
  const loom_node *n = &g->nodes[node];
  const loom_partition *pa = &p->part[node];
  double f = (double)(ax->degree - 1) / ax->degree, cost = 0;
  for (int32_t i = 0; i < n->n_in; i++) {
    int32_t s = ax->state[n->in[i]];
    if (s == FREE) continue;
    int32_t want = l < 0 ? WHOLE : dim_of(pa, false, i, loom_value_type(g, n->in[i])->rank, l);
    if (want == s || (want >= 0 && s == WHOLE)) continue;
    cost += f * (double)value_bytes(g, n->in[i]); /* an all-gather or all-to-all */
  }
  if (l >= 0 && pa->split[l] == LOOM_SPLIT_PARTIAL)
    for (int32_t o = 0; o < n->n_out; o++) cost += 2 * f * (double)value_bytes(g, n->out[o]);
  return cost;
}

/* Whether every leaf of node spans a multiple of degree on label l. */
static bool splits(const axis_cut *ax, const int32_t *leaves, int32_t n_leaves, int32_t l) {
  for (int32_t k = 0; k < n_leaves; k++) {
    const loom_subop *s = &ax->p->subops[leaves[k]];
    if ((s->r.hi[l] - s->r.lo[l]) % ax->degree) return false;
  }
  return true;
}

/* The label this axis cuts node by, or -1 for replicas. */
static int32_t choose(const axis_cut *ax, int32_t node, const int32_t *leaves, int32_t n_leaves) {
  const loom_plan *p = ax->p;
  const loom_node *n = &p->graph->nodes[node];
  const loom_partition *pa = &p->part[node];
  int32_t best = -1;
  double best_cost = cut_cost(ax, node, -1);
  bool any_split = false;
  for (int32_t i = 0; i < n->n_in; i++) {
    int32_t s = ax->state[n->in[i]];
    if (s < 0) continue;
    any_split = true;
    int32_t l = pa->in[i][s];
    if (l < 0 || l >= pa->n_labels || !splits(ax, leaves, n_leaves, l)) continue;
    /* data parallel follows the batch wherever it goes; the others pay */
    if (ax->kind == AXIS_DP) return l;
    double c = cut_cost(ax, node, l);
    if (best < 0 ? c <= best_cost : c < best_cost) {
      best = l;
      best_cost = c;
    }
  }
  (void)any_split;
  return best;
}

loom_status builtin_cut_node(axis_cut *ax, int32_t node) {
  loom_plan *p = ax->p;
  const loom_graph *g = p->graph;
  const loom_node *n = &g->nodes[node];
  int32_t *leaves = NULL, n_leaves = 0;
  LOOM_TRY(loom_plan_leaves(p, node, &leaves, &n_leaves));
  int32_t l = choose(ax, node, leaves, n_leaves);
  /* parts that stay on one device (micro-batches) are never replicas */
  if (l < 0 && ax->stride == 0) n_leaves = 0;
  loom_algo a = {l >= 0 ? LOOM_ALGO_SPLIT : LOOM_ALGO_REPLICATE, l >= 0 ? l : 0};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t k = 0; !st && k < n_leaves; k++) {
    int32_t base = p->subops[leaves[k]].device, first = -1;
    if (base < 0) base = 0;
    st = loom_op_trans(p, leaves[k], a, ax->degree, &first);
    for (int32_t i = 0; !st && i < ax->degree; i++)
      st = loom_op_assign(p, first + i, base + i * ax->stride);
  }
  free(leaves);
  const loom_partition *pa = &p->part[node];
  for (int32_t o = 0; o < n->n_out; o++) {
    int32_t v = n->out[o];
    bool spatial = l >= 0 && pa->split[l] == LOOM_SPLIT_SPATIAL;
    int32_t d = spatial ? dim_of(pa, true, o, loom_value_type(g, v)->rank, l) : -1;
    ax->state[v] = d >= 0 ? d : WHOLE;
  }
  return st;
}

static bool is_moment(const char *name) {
  return strncmp(name, "adam.m.", 7) == 0 || strncmp(name, "adam.v.", 7) == 0;
}

/* Seeds the axis' input states: what each strategy starts from. */
void builtin_seed(axis_cut *ax, const spec *sp) {
  const loom_graph *g = ax->p->graph;
  for (int32_t v = 0; v < g->n_values; v++) ax->state[v] = WHOLE;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    const loom_type *t = loom_value_type(g, v);
    const char *name = g->values[v].name;
    int32_t s = FREE; /* fed as needed */
    if (ax->kind == AXIS_DP) {
      if (loom_dtype_is_int(t->dtype) && t->rank > 0) s = 0;
      if (sp->zero >= 1 && is_moment(name) && t->rank > 0) s = 0;
    } else if (g->values[v].kind == LOOM_VALUE_PARAM || is_moment(name)) {
      int32_t d = megatron_dim(name);
      if (d >= 0 && d < t->rank) s = d;
    }
    if (s >= 0 && (t->rank <= s || t->shape[s] % ax->degree)) s = FREE;
    ax->state[v] = s;
  }
}

/* A mesh axis: its degree and device stride (degree 1: absent). */
typedef struct mesh_axis {
  int32_t degree, stride;
} mesh_axis;

/* The device a leaf reading value v runs on, -1 if none does. */
static int32_t reader_device(const loom_plan *p, int32_t v) {
  const loom_graph *g = p->graph;
  for (int32_t node = 0; node < g->n_nodes; node++)
    for (int32_t k = 0; k < g->nodes[node].n_in; k++) {
      if (g->nodes[node].in[k] != v) continue;
      int32_t *leaves = NULL, n = 0;
      if (loom_plan_leaves(p, node, &leaves, &n)) return -1;
      int32_t d = n > 0 ? p->subops[leaves[0]].device : -1;
      free(leaves);
      if (d >= 0) return d;
    }
  return -1;
}

/*
 * ZeRO-3 holds every parameter in shards across the dp axis: on top of
 * its tp split (Megatron's dim, when there is a tp axis), along the first
 * other dim that divides (replicated across dp when none does: a bias
 * already cut by tp). The shards sit in the dp and tp groups of the device
 * that first reads the parameter, so a pipeline stage holds its own
 * layers. Readers are cut as without ZeRO; the lowering gathers.
 */
static loom_status hold_params_sharded(loom_plan *p, mesh_axis dp, mesh_axis tp) {
  const loom_graph *g = p->graph;
  int32_t *devs = loom_malloc(p->ctx, sizeof *devs * (size_t)dp.degree * (size_t)tp.degree);
  if (!devs) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; !st && i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    const loom_type *t = loom_value_type(g, v);
    if (g->values[v].kind != LOOM_VALUE_PARAM || t->rank < 1) continue;
    loom_vfactor f[2];
    int32_t nf = 0, dtp = tp.degree > 1 ? megatron_dim(g->values[v].name) : WHOLE;
    if (dtp >= 0 && dtp < t->rank && t->shape[dtp] % tp.degree == 0)
      f[nf++] = (loom_vfactor){LOOM_VF_D, dtp, tp.degree};
    else if (tp.degree > 1)
      f[nf++] = (loom_vfactor){LOOM_VF_R, -1, tp.degree};
    int32_t ddp = -1;
    for (int32_t d = 0; d < t->rank && ddp < 0; d++)
      if (d != dtp && t->shape[d] % dp.degree == 0) ddp = d;
    if (ddp < 0 && nf == 0) continue; /* nothing to shard: fed whole */
    f[nf++] = ddp >= 0 ? (loom_vfactor){LOOM_VF_D, ddp, dp.degree}
                       : (loom_vfactor){LOOM_VF_R, -1, dp.degree};
    int32_t base = reader_device(p, v);
    if (base < 0) continue;
    /* the reader's device with its dp and tp coordinates at 0 */
    base -= (base / dp.stride) % dp.degree * dp.stride;
    if (tp.degree > 1) base -= (base / tp.stride) % tp.degree * tp.stride;
    loom_vlayout l;
    st = loom_vlayout_make(p->ctx, t, nf, f, &l);
    /* pieces in mixed radix, the tp factor the more significant */
    for (int32_t k = 0; !st && k < l.n_pieces; k++)
      devs[k] = base + (k / dp.degree) * (tp.degree > 1 ? tp.stride : 0) + (k % dp.degree) * dp.stride;
    if (!st) st = loom_plan_set_input(p, i, &l, devs);
  }
  free(devs);
  return st;
}

loom_status loom_plan_builtin(loom_ctx *ctx, const loom_graph *g, const char *text,
                              int32_t n_devices, loom_plan **out) {
  if (!out || !g || !text) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: NULL argument");
  *out = NULL;
  spec sp;
  if (!parse_spec(text, &sp))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: '%s' is not a built-in plan; they are:\n%s", text, help);
  int64_t prod = 1;
  int32_t dp_axis = -1, tp_axis = -1, pp_axis = -1;
  for (int32_t a = 0; a < sp.n_axes; a++) {
    prod *= sp.degree[a];
    if (sp.kind[a] == AXIS_DP) dp_axis = a;
    else if (sp.kind[a] == AXIS_TP) tp_axis = a;
    else pp_axis = a;
  }
  if ((sp.micro || sp.schedule != PP_1F1B || sp.interlaced) && pp_axis < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: %s: a schedule or micro-batch count needs a pp axis", text);
  if (prod != n_devices)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: %s uses %lld devices, not the %d given", text, (long long)prod,
                      n_devices);
  if (sp.zero && dp_axis < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: %s: ZeRO shards across a dp axis, and there is none", text);
  if (sp.schedule == PP_INTERLEAVED && sp.interlaced)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "plan: %s: the interlaced pipeline runs the GPipe order, not interleaved "
                      "1F1B", text);
  loom_plan *p = NULL;
  LOOM_TRY(loom_plan_new(ctx, g, n_devices, &p));
  axis_cut ax = {.p = p};
  ax.state = loom_malloc(ctx, sizeof *ax.state * (size_t)(g->n_values ? g->n_values : 1));
  loom_status st = ax.state ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  int32_t stride = n_devices;
  mesh_axis dp = {1, 1}, tp = {1, 1};
  for (int32_t a = 0; !st && a < sp.n_axes; a++) {
    stride /= sp.degree[a];
    if (a == dp_axis) dp = (mesh_axis){sp.degree[a], stride};
    if (a == tp_axis) tp = (mesh_axis){sp.degree[a], stride};
    if (sp.kind[a] == AXIS_PP) {
      st = builtin_pipeline(p, &sp, sp.degree[a], stride);
      continue;
    }
    ax.kind = sp.kind[a];
    ax.degree = sp.degree[a];
    ax.stride = stride;
    builtin_seed(&ax, &sp);
    for (int32_t node = 0; !st && node < g->n_nodes; node++) st = builtin_cut_node(&ax, node);
  }
  if (!st && sp.zero >= 3) st = hold_params_sharded(p, dp, tp);
  if (!st && sp.n_axes == 0)
    for (int32_t node = 0; !st && node < g->n_nodes; node++) st = loom_op_assign(p, node, 0);
  if (!st && sp.recompute && pp_axis < 0) st = builtin_recompute(p); /* pp: in its schedule */
  if (!st) st = loom_plan_tie_by_name(p);
  free(ax.state);
  if (st) {
    loom_error_prefix(ctx, "plan %s", text);
    loom_plan_free(p);
    return st;
  }
  *out = p;
  return LOOM_STATUS_OK;
}

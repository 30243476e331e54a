/*
 * One device's program, cut out of the global graph (lower.h): its nodes
 * in its order, its pieces of the graph's inputs as inputs, its pieces of
 * the outputs as outputs, and each comm op in its per-device form (member
 * `member` of its group, run through the communicator). A comm op's
 * result that nothing on the device reads (a transfer's sender token, a
 * broadcast root's copy) is made an output too, so no pass drops the op
 * and leaves the other members waiting.
 */
#include "parallel/lower_internal.h"

#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t member_of(const loom_plan_program *pp, int32_t group, int32_t d) {
  for (int32_t i = pp->group_start[group]; i < pp->group_start[group + 1]; i++)
    if (pp->group_ranks[i] == d) return i - pp->group_start[group];
  return -1;
}

/* The piece's name: the value's, with the box when it is not whole. */
static void piece_name(const char *base, const loom_vbox *box, const loom_type *whole, char *buf,
                       size_t n) {
  loom_vbox full = loom_vbox_full(whole);
  if (loom_vbox_equal(box, &full)) {
    snprintf(buf, n, "%s", base);
    return;
  }
  size_t k = (size_t)snprintf(buf, n, "%s@", base);
  for (int32_t d = 0; d < box->rank && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld_%lld", d ? "_" : "", (long long)box->start[d],
                          (long long)box->end[d]);
}

/* The per-device form of comm node `node` for member m: its attributes. */
static void member_attrs(const loom_node *n, int32_t m, loom_attr_value *a) {
  memcpy(a, n->attr, sizeof n->attr);
  switch (n->op) {
  case LOOM_OP_ALL_REDUCE: LOOM_ATTRV_I(a, all_reduce, member) = m; break;
  case LOOM_OP_ALL_GATHER: LOOM_ATTRV_I(a, all_gather, member) = m; break;
  case LOOM_OP_REDUCE_SCATTER: LOOM_ATTRV_I(a, reduce_scatter, member) = m; break;
  case LOOM_OP_ALL_TO_ALL: LOOM_ATTRV_I(a, all_to_all, member) = m; break;
  case LOOM_OP_BROADCAST: LOOM_ATTRV_I(a, broadcast, member) = m; break;
  default: LOOM_ATTRV_I(a, transfer, member) = m; break;
  }
}

loom_status loom_plan_device_graph(const loom_plan_program *pp, int32_t d, loom_graph **out,
                                   int32_t **in_map, int32_t **out_map) {
  loom_ctx *ctx = pp->ctx;
  *out = NULL;
  if (in_map) *in_map = NULL;
  if (out_map) *out_map = NULL;
  if (d < 0 || d >= pp->n_devices)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: device %d is outside [0, %d)", d,
                      pp->n_devices);
  const loom_graph *G = pp->global;
  loom_graph *g = NULL;
  LOOM_TRY(loom_graph_new(ctx, &g));
  int32_t *map = loom_malloc(ctx, sizeof *map * (size_t)(G->n_values ? G->n_values : 1));
  int32_t *uses = loom_calloc(ctx, (size_t)(G->n_values ? G->n_values : 1), sizeof *uses);
  int32_t *imap = NULL, *omap = NULL, n_imap = 0, n_omap = 0, cap_i = 0, cap_o = 0;
  int32_t *feed_of = loom_malloc(ctx, sizeof *feed_of * (size_t)(G->n_values ? G->n_values : 1));
  bool *is_out = loom_calloc(ctx, (size_t)(G->n_values ? G->n_values : 1), sizeof *is_out);
  loom_status st = map && uses && feed_of && is_out ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t v = 0; !st && v < G->n_values; v++) map[v] = feed_of[v] = -1;
  for (int32_t k = 0; !st && k < pp->n_ins; k++) feed_of[pp->ins[k].value] = k;
  for (int32_t k = 0; !st && k < pp->n_outs; k++)
    if (pp->outs[k].device == d) is_out[pp->outs[k].value] = true;
  int32_t a = pp->order_start[d], b = pp->order_start[d + 1];
  for (int32_t i = a; !st && i < b; i++) {
    const loom_node *n = &G->nodes[pp->order_nodes[i]];
    for (int32_t k = 0; k < n->n_in; k++) uses[n->in[k]]++;
  }
  char name[256];
  for (int32_t i = a; !st && i < b; i++) {
    int32_t node = pp->order_nodes[i];
    const loom_node *n = &G->nodes[node];
    if (pp->node_subop[node] == LOWER_FEED) {
      const loom_plan_io *io = &pp->ins[feed_of[n->out[0]]];
      int32_t gin = G->inputs[io->index];
      const loom_type *t = loom_value_type(G, n->out[0]);
      piece_name(G->values[gin].name, &io->box, loom_value_type(G, gin), name, sizeof name);
      int32_t v = -1;
      st = G->values[gin].kind == LOOM_VALUE_PARAM
               ? loom_graph_param(g, name, t->dtype, t->rank, t->shape, &v)
               : loom_graph_input(g, name, t->dtype, t->rank, t->shape, &v);
      map[n->out[0]] = v;
      if (!st && !loom_grow(ctx, (void **)&imap, &cap_i, n_imap + 1, sizeof *imap))
        st = LOOM_STATUS_OUT_OF_MEMORY;
      if (!st) imap[n_imap++] = feed_of[n->out[0]];
      continue;
    }
    int32_t in[LOOM_PART_MAX_IO];
    if (pp->node_device[node] >= 0) {
      /* any number of inputs (a gradient bucket's concat has one per gradient) */
      int32_t *ins = n->n_in > LOOM_PART_MAX_IO ? malloc(sizeof *ins * (size_t)n->n_in) : in;
      int32_t out_stack[LOOM_PART_MAX_IO], *outv = out_stack;
      if (n->n_out > LOOM_PART_MAX_IO) outv = malloc(sizeof *outv * (size_t)n->n_out);
      if (!ins || !outv) st = LOOM_STATUS_OUT_OF_MEMORY;
      for (int32_t k = 0; !st && k < n->n_in; k++) ins[k] = map[n->in[k]];
      if (!st) st = loom_graph_add(g, n->op, n->n_in, ins, n->attr, n->n_out, outv);
      if (!st) g->nodes[g->n_nodes - 1].copy = n->copy;
      for (int32_t o = 0; !st && o < n->n_out; o++) map[n->out[o]] = outv[o];
      if (ins != in) free(ins);
      if (outv != out_stack) free(outv);
      continue;
    }
    /* a comm op: this member's input (if any) and output */
    int32_t c = lower_comm_index(pp, node);
    int32_t m = c >= 0 ? member_of(pp, pp->comms[c].group, d) : -1;
    if (m < 0) {
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "plan: device %d is not in comm op %d's group", d,
                      node);
      break;
    }
    loom_attr_value at[LOOM_MAX_ATTRS];
    member_attrs(n, m, at);
    int32_t n_in = 0;
    if (n->op == LOOM_OP_BROADCAST || n->op == LOOM_OP_TRANSFER) {
      if (m == 0) in[n_in++] = map[n->in[0]];
    } else {
      in[n_in++] = map[n->in[m]];
    }
    int32_t res = -1;
    st = loom_graph_add(g, n->op, n_in, in, at, 1, &res);
    if (st) break;
    int32_t gout = n->op == LOOM_OP_TRANSFER ? n->out[0] : n->out[m];
    bool receives = n->op != LOOM_OP_TRANSFER || m == 1;
    if (receives) map[gout] = res;
    if (!receives || uses[gout] == 0) {
      if (!is_out[gout]) {
        snprintf(name, sizeof name, "comm.%d", pp->comms[c].seq);
        st = loom_graph_output(g, name, res);
        if (!st && !loom_grow(ctx, (void **)&omap, &cap_o, n_omap + 1, sizeof *omap))
          st = LOOM_STATUS_OUT_OF_MEMORY;
        if (!st) omap[n_omap++] = -1;
      }
    }
  }
  for (int32_t k = 0; !st && k < pp->n_outs; k++) {
    const loom_plan_io *io = &pp->outs[k];
    if (io->device != d) continue;
    if (map[io->value] < 0) {
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "plan: device %d: output piece %d is not on it", d,
                      k);
      break;
    }
    /* output names are the logical graph's */
    piece_name(G->output_names[io->index], &io->box,
               loom_value_type(G, G->outputs[io->index]), name, sizeof name);
    st = loom_graph_output(g, name, map[io->value]);
    if (!st && !loom_grow(ctx, (void **)&omap, &cap_o, n_omap + 1, sizeof *omap))
      st = LOOM_STATUS_OUT_OF_MEMORY;
    if (!st) omap[n_omap++] = k;
  }
  free(map);
  free(uses);
  free(feed_of);
  free(is_out);
  if (st) {
    loom_error_prefix(ctx, "device %d's program", d);
    loom_graph_free(g);
    free(imap);
    free(omap);
    return st;
  }
  *out = g;
  if (in_map) *in_map = imap;
  else free(imap);
  if (out_map) *out_map = omap;
  else free(omap);
  return LOOM_STATUS_OK;
}

/* ---- matching across devices' programs ------------------------------------------- */

typedef struct comm_seen {
  loom_op op;
  int32_t group, size, device, node;
  int64_t numel; /* the member's piece */
  bool set;
} comm_seen;

static int32_t attr_group(const loom_node *n) {
  switch (n->op) {
  case LOOM_OP_ALL_REDUCE: return (int32_t)LOOM_ATTR_I(n, all_reduce, group);
  case LOOM_OP_ALL_GATHER: return (int32_t)LOOM_ATTR_I(n, all_gather, group);
  case LOOM_OP_REDUCE_SCATTER: return (int32_t)LOOM_ATTR_I(n, reduce_scatter, group);
  case LOOM_OP_ALL_TO_ALL: return (int32_t)LOOM_ATTR_I(n, all_to_all, group);
  case LOOM_OP_BROADCAST: return (int32_t)LOOM_ATTR_I(n, broadcast, group);
  default: return -1;
  }
}


loom_status loom_plan_check_matching(loom_ctx *ctx, int32_t n_devices, loom_graph *const *graphs) {
  int32_t max_seq = -1;
  for (int32_t d = 0; d < n_devices; d++)
    for (int32_t i = 0; i < graphs[d]->n_nodes; i++) {
      const loom_node *n = &graphs[d]->nodes[i];
      if (loom_op_is_comm(n->op)) max_seq = LOOM_MAX(max_seq, (int32_t)loom_comm_op_seq(n));
    }
  if (max_seq < 0) return LOOM_STATUS_OK;
  comm_seen *seen = loom_calloc(ctx, (size_t)max_seq + 1, sizeof *seen);
  int32_t *count = loom_calloc(ctx, (size_t)max_seq + 1, sizeof *count);
  loom_status st = seen && count ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t d = 0; !st && d < n_devices; d++) {
    int32_t prev = -1;
    for (int32_t i = 0; !st && i < graphs[d]->n_nodes; i++) {
      const loom_node *n = &graphs[d]->nodes[i];
      if (loom_op_get(n->op)->cls != LOOM_OPCLASS_COMM) continue;
      int32_t seq = (int32_t)loom_comm_op_seq(n);
      const char *op = loom_op_get(n->op)->name;
      if (seq < 0) {
        st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "device %d: %s (node %d) has seq %d", d,
                        op, i, seq);
        break;
      }
      if (seq <= prev) {
        st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "device %d runs comm op %d (%s) after comm op %d: members must meet "
                        "their comm ops in one order, or they deadlock",
                        d, seq, op, prev);
        break;
      }
      prev = seq;
      int32_t group = attr_group(n);
      int64_t numel = n->n_in ? loom_type_numel(loom_value_type(graphs[d], n->in[0]))
                              : loom_type_numel(loom_value_type(graphs[d], n->out[0]));
      comm_seen *s = &seen[seq];
      if (!s->set) {
        *s = (comm_seen){n->op, group, 0, d, i, numel, true};
      } else if (s->op != n->op || s->group != group) {
        st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "comm op %d is %s over group %d on device %d but %s over group %d on "
                        "device %d: mismatched groups",
                        seq, loom_op_get(s->op)->name, s->group, s->device, op, group, d);
      } else if (n->op != LOOM_OP_TRANSFER && n->op != LOOM_OP_BROADCAST && s->numel != numel) {
        st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "comm op %d (%s): device %d brings %lld elements, device %d %lld", seq, op,
                        s->device, (long long)s->numel, d, (long long)numel);
      }
      count[seq]++;
    }
  }
  for (int32_t q = 0; !st && q <= max_seq; q++)
    if (seen[q].set && count[q] < 2)
      st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm op %d (%s) has one member (device %d): the others never call it", q,
                      loom_op_get(seen[q].op)->name, seen[q].device);
  free(seen);
  free(count);
  return st;
}

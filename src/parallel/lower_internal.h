/* Shared by the lowering's files: the walk's state and its helpers. */
#ifndef LOOM_PARALLEL_LOWER_INTERNAL_H
#define LOOM_PARALLEL_LOWER_INTERNAL_H

#include "parallel/lower.h"

/* node_subop markers for the nodes the lowering adds */
enum {
  LOWER_INSERTED = -1, /* slice, concat, sum, pad, comm */
  LOWER_FEED = -2,     /* a device's piece of a graph input */
  LOWER_HOST = -3      /* assembling an output whole (the oracle only) */
};

/* A piece of a logical value that exists somewhere in the global graph. */
typedef struct lower_piece {
  int32_t dev;
  loom_vbox box;
  int32_t parts, K; /* it sums `parts` of the value's K partial parts (K 1: whole) */
  loom_op combine;  /* how partial parts join */
  int32_t replica;  /* partial parts of replicated sub-ops: which replica */
  int32_t gv;       /* its value in the global graph */
} lower_piece;

typedef struct lower_plist {
  lower_piece *v;
  int32_t n, cap;
} lower_plist;

typedef struct lower_need {
  int32_t dev;
  loom_vbox box;
} lower_need;

typedef struct lower_walk {
  loom_ctx *ctx;
  const loom_plan *p;
  const loom_graph *L;
  loom_plan_program *pp;
  loom_graph *G;
  loom_plan_lower_options o;
  lower_plist *avail; /* per logical value */
  bool *resolved;     /* per logical value */
  int32_t **leaves;   /* per logical node */
  int32_t *n_leaves;
  int32_t *use_start, *use_node; /* consumers of each logical value (CSR) */
  int32_t *first_output, *next_output; /* per value / per output: the outputs it is (chains) */
  int32_t *first_feed, *next_feed;     /* per input / per pp->ins entry: its feeds (chains) */
  int32_t tagged;     /* global nodes tagged so far */
  int32_t cap_node_tags, cap_value_tags, cap_comms, cap_ins, cap_outs, cap_groups, cap_ranks;
} lower_walk;

/* Tags every global node added since the last call with device dev and
 * sub-op s (or a LOWER_* marker), and their outputs' value device. */
loom_status lower_tag(lower_walk *w, int32_t dev, int32_t s);
/* The group id of these members (in order), added if new. */
int32_t lower_group(lower_walk *w, int32_t n, const int32_t *members);
/* Adds piece to avail[v]. */
loom_status lower_add_piece(lower_walk *w, int32_t v, lower_piece piece);

/* lower_move.c: brings v's pieces to every need (its whole consumers' and
 * outputs' list); finds a whole piece of v on dev with exactly this box,
 * the first or the last made (-1: none); assembles box q on dev (host: the
 * oracle's assembly, tagged later), returning its global value or -1. */
loom_status lower_move_value(lower_walk *w, int32_t v, int32_t n_needs, const lower_need *needs);
int32_t lower_find_piece(const lower_walk *w, int32_t v, int32_t dev, const loom_vbox *box);
int32_t lower_find_last_piece(const lower_walk *w, int32_t v, int32_t dev, const loom_vbox *box);
int32_t lower_assemble(lower_walk *w, int32_t v, const loom_vbox *q, int32_t dev, bool host);
/* ---- lower_search.c: choosing a value's layout transitions ---------------- */

typedef enum lower_move_kind {
  LOWER_MV_ALL_REDUCE,     /* V -> R: a complete group of parts, whole on every member */
  LOWER_MV_REDUCE_SCATTER, /* V -> D: member t gets tile t along axis */
  LOWER_MV_SEND_PARTS,     /* V -> one device: the parts sent to each of to[], summed there */
  LOWER_MV_ALL_GATHER,     /* D -> R: member t holds tile t along axis, all get box */
  LOWER_MV_ALL_TO_ALL,     /* D -> D: tile t along axis2 becomes tile t along axis */
  LOWER_MV_BROADCAST       /* member 0 holds box, the others get it */
} lower_move_kind;

/* One comm op (send-parts: a set of transfers and sums) on one group of
 * v's pieces; the pieces are indices into w->avail[v] when it is emitted. */
typedef struct lower_move {
  lower_move_kind kind;
  int32_t n, n_to;     /* members; send-parts: devices the sum goes to */
  int32_t *piece;      /* per member, in member order: its input piece
                          (broadcast: the root's only, the others -1) */
  int32_t *dev;        /* per member: its device */
  int32_t *to;         /* send-parts: n_to devices */
  int32_t axis, axis2; /* reduce-scatter, all-gather: the axis; all-to-all:
                          axis the new tiling (split_axis), axis2 the held one (concat_axis) */
  loom_vbox box;       /* the group's box */
} lower_move;

/* A chosen path: steps in order, each one or more moves on disjoint groups. */
typedef struct lower_path {
  int32_t n_moves;
  lower_move *moves; /* in emission order */
} lower_path;

/* The pieces move m makes, in the order they are added to the value's
 * list (gv -1); returns how many (at most max(n, n_to)). */
int32_t lower_move_results(const lower_move *m, lower_piece *out);
/* Whether a and b are parts of one box of one group (same K, combine, replica). */
bool lower_same_part_group(const lower_piece *a, const lower_piece *b);
/* The whole piece lower_assemble takes first for box q on dev (host: any
 * device is local): one holding all of q, local, largest share, nearest;
 * -1 if none meets q. *inter: its part of q; *contains: it holds all of q. */
int32_t lower_best_piece(const lower_plist *l, const loom_vbox *q, int32_t dev, bool host,
                         loom_vbox *inter, bool *contains);
/* Searches, from v's pieces now (local parts merged, incomplete groups
 * joined), the cheapest sequence of transitions after which every need is
 * a local slice or a point-to-point assembly; *out gets its moves (free
 * with lower_path_free). */
loom_status lower_search(const lower_walk *w, int32_t v, int32_t n_needs, const lower_need *needs,
                         lower_path *out);
void lower_path_free(lower_path *p);

/* lower_bucket.c: coalesces all-reduces into buckets (w->o.bucket_bytes),
 * rebuilding the global graph and its tags. */
loom_status lower_bucket(lower_walk *w);
/* lower_order.c: one topological order of the global graph's nodes (data
 * and op_order edges, lower_schedule's), or the deadlock's message; with
 * succ_start, also the edges by source (CSR: the successors of x are
 * succ[succ_start[x] .. succ_start[x+1])). */
loom_status lower_sort(lower_walk *w, int32_t **sorted, int32_t **succ_start, int32_t **succ);
/* lower_schedule.c: a binary min-heap of entries ordered by (t, tie,
 * node), which the order's sorts share: the list schedule's (t a time,
 * tie 0 for a comm op; dev and version its own) and the run order's (t a
 * rank). */
typedef struct lower_entry {
  double t;
  int32_t tie, node, dev, version;
} lower_entry;
typedef struct lower_heap {
  lower_entry *v;
  int32_t n;
} lower_heap;
void lower_heap_push(lower_heap *h, lower_entry x);
lower_entry lower_heap_pop(lower_heap *h);
/* lower_schedule.c: Kahn's sort over those edges (indeg: each node's
 * count, consumed) as a list schedule on a rough clock of every device's
 * compute and comm lanes; writes the order to sorted and returns its
 * length (short of all nodes: a cycle), or -1 out of memory. */
int32_t lower_schedule(const loom_plan_program *pp, const int32_t *succ_start, const int32_t *succ,
                       int32_t *indeg, int32_t *sorted);
/* lower_run_order.c: each device's order (pp->order_nodes) as the
 * runtime runs it: between two comm ops, the readers of a collective's
 * output after the ready work that does not read one. */
loom_status lower_run_order(loom_plan_program *pp);
/* lower_order.c: the index in pp->comms of the comm op at global node
 * `node`, or -1 (comms are kept in node order). */
int32_t lower_comm_index(const loom_plan_program *pp, int32_t node);
/* lower_order.c: the members of comm op c (an index in pp->comms): *n of
 * them. */
const int32_t *lower_comm_members(const loom_plan_program *pp, int32_t c, int32_t *n);
/* lower_order.c: the execution order, the deadlock check, the counts. */
loom_status lower_finish(lower_walk *w);

/* Bytes of global value v (its type's elements times the dtype size). */
int64_t lower_value_bytes(const loom_graph *g, int32_t v);

#endif

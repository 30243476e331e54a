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
/* lower_order.c: the execution order, the deadlock check, the counts. */
loom_status lower_finish(lower_walk *w);

#endif

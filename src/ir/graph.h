/*
 * The graph IR: values (inputs, parameters, op outputs) and nodes (ops).
 * Nodes are kept in a topological order by construction: a node may only use
 * values that exist when it is added. Passes build new graphs by walking an
 * old one in order (see loom_graph_begin_copy).
 */
#ifndef LOOM_IR_GRAPH_H
#define LOOM_IR_GRAPH_H

#include "core/ctx.h"
#include "core/strmap.h"

/* the flash attention ops' 17 (ops/attrs.h) */
#define LOOM_MAX_ATTRS 18

/* A value's static type: dtype and shape (no symbolic dims). */
typedef struct loom_type {
  loom_dtype dtype;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
} loom_type;

typedef struct loom_ints {
  int32_t n;
  int64_t v[LOOM_MAX_RANK];
} loom_ints;

/* One attribute value; which field is meaningful comes from the op's spec. */
typedef struct loom_attr_value {
  int64_t i;
  double f;
  loom_ints ints;
} loom_attr_value;

typedef enum loom_value_kind {
  LOOM_VALUE_INPUT = 0,
  LOOM_VALUE_PARAM,
  LOOM_VALUE_NODE
} loom_value_kind;

typedef struct loom_value_info {
  loom_type type;
  loom_value_kind kind;
  int32_t node;  /* producing node, -1 for inputs and params */
  int32_t index; /* output index of that node */
  char *name;    /* optional (always set for inputs and params) */
} loom_value_info;

typedef struct loom_node {
  loom_op op;
  int32_t n_in, n_out;
  int32_t *in, *out; /* value ids, owned by the graph */
  loom_attr_value attr[LOOM_MAX_ATTRS];
  /* 0, or k > 0 for the k-th deliberate recomputation of what another node
   * computes (a plan's +recompute copy): part of the node's identity, so
   * common-subexpression elimination keeps it apart from the original.
   * Copying a node keeps it; a pass that replaces a node with several
   * marks them all (loom_graph_mark_copy). */
  int32_t copy;
} loom_node;

struct loom_graph {
  loom_ctx *ctx;
  loom_node *nodes;
  int32_t n_nodes, cap_nodes;
  loom_value_info *values;
  int32_t n_values, cap_values;
  int32_t *inputs; /* value ids of inputs and params, declaration order */
  int32_t n_inputs, cap_inputs;
  int32_t *outputs;
  char **output_names;
  int32_t n_outputs, cap_outputs;
  /* name -> value id, and output name -> output index: lookups by name
   * stay constant time on graphs with 100k names. Kept in step with
   * values[].name and output_names by the functions of graph.c. */
  loom_strmap value_names, output_index;
  /* Sticky status for the internal builder (ir/build.h): once an add
   * fails, later adds return -1 until the caller reads and clears it. */
  loom_status err;
};

/* Adds a node with attrs given in spec order (NULL: all defaults).
 * Infers output types; writes the n_out output ids. */
loom_status loom_graph_add(loom_graph *g, loom_op op, int32_t n_in,
                           const int32_t *in, const loom_attr_value *attrs,
                           int32_t n_out, int32_t *out);
/* A node's identity for common-subexpression elimination (passes/simplify.c
 * and the simulator's merged nodes): loom_hash_mix folds x into hash h;
 * loom_attrs_hash folds in every attribute slot; loom_attrs_equal compares
 * them bit for bit (floats by their bits). */
uint64_t loom_hash_mix(uint64_t h, uint64_t x);
uint64_t loom_attrs_hash(uint64_t h, const loom_attr_value *attrs);
bool loom_attrs_equal(const loom_attr_value *a, const loom_attr_value *b);
/* The rest of that identity besides the inputs: op, attributes and the
 * recomputation mark (loom_node.copy). loom_node_hash folds it into h. */
uint64_t loom_node_hash(uint64_t h, const loom_node *n);
bool loom_node_same_kind(const loom_node *a, const loom_node *b);
/* Marks nodes [from, n_nodes) of g as recomputation copy `copy` (a pass
 * that replaced one marked node with these). */
void loom_graph_mark_copy(loom_graph *g, int32_t from, int32_t copy);
/* Fills attrs with op's defaults (every slot of LOOM_MAX_ATTRS). */
void loom_attrs_default(loom_op op, loom_attr_value *attrs);
/* Converts public named attributes into spec-ordered values. */
loom_status loom_attrs_from_named(loom_ctx *ctx, loom_op op, int32_t n,
                                  const loom_attr *named,
                                  loom_attr_value *attrs);

static inline const loom_type *loom_value_type(const loom_graph *g, int32_t v) {
  return &g->values[v].type;
}
static inline bool loom_value_valid(const loom_graph *g, int32_t v) {
  return v >= 0 && v < g->n_values;
}
/* Sets a value's name (copied); fails on a duplicate name. */
loom_status loom_value_set_name(loom_graph *g, int32_t v, const char *name);
/* Looks up a value by name; -1 if none. */
int32_t loom_graph_find_value(const loom_graph *g, const char *name);

/* Number of parameters' elements (sum over LOOM_VALUE_PARAM inputs). */
int64_t loom_graph_param_count(const loom_graph *g);

/* --- support for passes that rebuild a graph ---------------------------- */

/* Creates dst with src's inputs (same order, names, kinds) and fills map
 * (src value id -> dst value id, -1 where not yet mapped; map has
 * src->n_values entries, allocated here, freed by the caller). */
loom_status loom_graph_begin_copy(const loom_graph *src, loom_graph **dst,
                                  int32_t **map);
/* Adds to dst a copy of src node n with its inputs mapped; maps outputs. */
loom_status loom_graph_copy_node(loom_graph *dst, const loom_graph *src,
                                 const loom_node *n, int32_t *map);
/* Adds src's outputs (mapped, same names) to dst. */
loom_status loom_graph_finish_copy(loom_graph *dst, const loom_graph *src,
                                   const int32_t *map);
/* Moves src's contents into dst (freeing dst's old contents) and frees src. */
void loom_graph_replace(loom_graph *dst, loom_graph *src);

/* Shape helpers. */
/* The rule every value's and tensor's shape obeys (core/checked.h): rank in
 * [0, LOOM_MAX_RANK], dims >= 0, and the dims, zeros counted as one,
 * multiply to at most LOOM_MAX_NUMEL. Writes the element count if numel. */
loom_status loom_shape_check(loom_ctx *ctx, int32_t rank, const int64_t *shape,
                             int64_t *numel);
/* Cannot overflow for a shape that passed loom_shape_check. */
int64_t loom_type_numel(const loom_type *t);
bool loom_type_equal(const loom_type *a, const loom_type *b);
/* "f32[4, 8]" into buf. */
const char *loom_type_str(const loom_type *t, char *buf, size_t n);
/* NumPy broadcast of two shapes into out; false if incompatible. */
bool loom_broadcast_shapes(int32_t ra, const int64_t *a, int32_t rb,
                           const int64_t *b, int32_t *rout, int64_t *out);

#endif

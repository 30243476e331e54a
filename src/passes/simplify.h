/* simplify: dead-code and common-subexpression elimination (graph to graph). */
#ifndef LOOM_PASSES_SIMPLIFY_H
#define LOOM_PASSES_SIMPLIFY_H

#include "ir/graph.h"

/* A new graph without nodes no output depends on, with identical nodes
 * (same op, inputs and attributes) merged. Inputs and outputs keep their
 * names and order. */
loom_status loom_graph_simplify(const loom_graph *g, loom_graph **out);

#endif

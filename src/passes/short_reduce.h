/* short_reduce: a reduction over one short, non-trailing axis written as
 * an element-wise chain over the axis's slices (graph to graph). */
#ifndef LOOM_PASSES_SHORT_REDUCE_H
#define LOOM_PASSES_SHORT_REDUCE_H

#include "ir/graph.h"

/* The longest axis a reduction is unrolled over. */
#define LOOM_SHORT_REDUCE_MAX 8

/* A new graph in which each reduce_sum, reduce_max and reduce_min over
 * one axis of 2 to LOOM_SHORT_REDUCE_MAX elements that is not the last
 * is add (maximum, minimum) of the axis's slices in index order; every
 * other node as it was. *n_unrolled: how many (the graph is the same as
 * g's when 0). */
loom_status loom_graph_unroll_short_reductions(const loom_graph *g, loom_graph **out,
                                               int32_t *n_unrolled);

#endif

#ifndef LOOM_PASSES_DECOMPOSE_H
#define LOOM_PASSES_DECOMPOSE_H

#include "loom.h"

/* loom_graph_decompose, except that composites with a gradient rule of their
 * own (ops/op.h: gelu) stay, for loom_graph_grad to apply that rule rather
 * than the chain rule through their primitives; a session lowers them
 * later. What graph builders call before differentiating. */
loom_status loom_graph_decompose_for_grad(const loom_graph *g, loom_graph **out);

#endif

/*
 * Liveness-based memory planning. Every value an op produces gets a byte
 * offset in one arena (64-byte aligned). A value lives from the node that
 * produces it to its last consumer (graph outputs: to the end); a buffer is
 * released after its last consumer runs and reused, best fit, by later
 * values. A node's outputs never share memory with its inputs, except that
 * a reshape's output IS its input's buffer (same bytes, same order): it
 * shares its root's memory, which then lives as long as either. Graph
 * inputs and params live in caller memory: offset -1 (and so do reshapes
 * of them).
 */
#ifndef LOOM_PASSES_MEMPLAN_H
#define LOOM_PASSES_MEMPLAN_H

#include "ir/graph.h"

#define LOOM_MEMPLAN_ALIGN 64

typedef struct loom_memplan {
  int32_t n_values;
  int64_t *offset; /* per value: bytes into the arena; -1 for external */
  int64_t *size;   /* per value: bytes it holds (numel * dtype size) */
  /* Live range per value in node steps, inclusive: produced at node
   * first[v] (-1 for external values), last read at node last[v]
   * (g->n_nodes for graph outputs). */
  int32_t *first, *last;
  /* Per value: the value that owns its memory (itself unless it is a
   * reshape, maybe of a reshape, of that value). */
  int32_t *root;
  int64_t peak_bytes; /* the arena size */
} loom_memplan;

/* Plans g's memory into *out (errors go to g->ctx). */
loom_status loom_memplan_build(const loom_graph *g, loom_memplan *out);
/* Releases the plan's arrays (the struct itself is the caller's). */
void loom_memplan_free(loom_memplan *p);

#endif

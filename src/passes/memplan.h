/*
 * Liveness-based memory planning. Every value an op produces gets a byte
 * offset in one arena (64-byte aligned). A value lives from the node that
 * produces it to its last consumer (graph outputs: to the end); a buffer is
 * released after its last consumer runs and reused by later values. Two
 * placements are made, online best fit in step order and offline largest
 * first, and the one with the lower peak is kept. A node's outputs never
 * share memory with its inputs, except that a reshape's output IS its
 * input's buffer (same bytes, same order): it shares its root's memory,
 * which then lives as long as either. Graph inputs and params live in
 * caller memory: offset -1 (and so do reshapes of them).
 */
#ifndef LOOM_PASSES_MEMPLAN_H
#define LOOM_PASSES_MEMPLAN_H

#include "ir/graph.h"

#define LOOM_MEMPLAN_ALIGN 64

typedef struct loom_memplan {
  int32_t n_values;
  int64_t *offset; /* per value: bytes into the arena; -1 for external */
  int64_t *size;   /* per value: bytes it holds (numel * dtype size) */
  /* Live range per value in steps (nodes, for loom_memplan_build),
   * inclusive: produced at step first[v] (-1 for external values), last
   * read at step last[v] (the step count for graph outputs; the join step
   * of an async step that reads or writes it, if later). */
  int32_t *first, *last;
  /* Per value: the value that owns its memory (itself unless it is a
   * reshape, maybe of a reshape, of that value). */
  int32_t *root;
  /* In-place pairs: graph output in_place_out[k] may be computed in the
   * memory of graph input (or param) in_place_in[k], k < n_in_place. A
   * pair is made when a step that writes the output offers it that
   * input's memory (loom_memplan_step.in_place), no other step reads the
   * input (or a reshape of it) at or after that step, no async step that
   * reads it is still running then, and the input is no graph output
   * itself. The caller decides per run: a session computes such an output
   * straight into the caller's tensor when that tensor IS the input's (an
   * optimizer updating its state in place), into the arena otherwise. */
  int32_t n_in_place;
  int32_t *in_place_out, *in_place_in;
  int64_t peak_bytes; /* the arena size */
} loom_memplan;

/* Plans g's memory into *out, one step per node (errors go to g->ctx). */
loom_status loom_memplan_build(const loom_graph *g, loom_memplan *out);

/*
 * One step of a program (a fused kernel, a GEMM, a node run eagerly): the
 * materialized values it reads and writes. With alias, out[0] is in[0]'s
 * memory (a reshape run in place; same byte size required). With join
 * greater than the step's own index j, the step is async: it runs on
 * another thread beside steps j+1 .. join and is joined once step join is
 * done (a join past the last step: at the end of the run). Its inputs and
 * outputs stay live through its join step, so nothing those steps write
 * takes their memory. join <= j (0 by default): the step is synchronous.
 */
typedef struct loom_memplan_step {
  int32_t n_in, n_out;
  const int32_t *in, *out;
  bool alias;
  int32_t join;
  /* n_in_place offers (o, i) = (in_place[2k], in_place[2k + 1]): out[o]
   * may share in[i]'s memory (the step reads in[i]'s elements only before,
   * and where, it writes the same ones of out[o]: kernel/in_place.h). */
  int32_t n_in_place;
  const int32_t *in_place;
} loom_memplan_step;

/*
 * Plans memory for a program: only values with materialized[v] get memory
 * (materialized NULL: all values); live ranges are in steps, as above with
 * steps in place of nodes (first/last -1 for values that are never in
 * memory). A step reading a value that is not in memory, or a value written
 * twice, is an INTERNAL error: the program is inconsistent.
 */
loom_status loom_memplan_build_steps(const loom_graph *g, int32_t n_steps,
                                     const loom_memplan_step *steps, const bool *materialized,
                                     loom_memplan *out);
/* Releases the plan's arrays (the struct itself is the caller's). */
void loom_memplan_free(loom_memplan *p);

#endif

/*
 * Fusion: classify ops, explore fusion plans with a cost model, and lower
 * each fused group into a kernel of the kernel IR. The result is a program:
 * an ordered list of steps (generated kernels, GEMM calls, and nodes run
 * eagerly) that the runtime executes.
 */
#ifndef LOOM_FUSION_FUSION_H
#define LOOM_FUSION_FUSION_H

#include "kernel/kernel.h"
#include "perf/machine.h"

/* Fusion modes are loom_fusion_mode (loom.h): LOOM_FUSION_NONE is one
 * kernel per primitive; LOOP is XLA-style (element-wise into consumers, a
 * reduction only as a kernel's root); STITCH is the full approach
 * (reductions, broadcasts and element-wise work with different
 * parallelism in one kernel). EAGER is the cpu backend's, not fusion's:
 * loom_fusion_compile refuses it. */

typedef enum loom_step_kind {
  LOOM_STEP_KERNEL = 0, /* a generated kernel */
  LOOM_STEP_GEMM,       /* a matmul node through the GEMM library */
  LOOM_STEP_NODE        /* a node run eagerly (no kernel form: other dtypes,
                           gather/scatter, ...) */
} loom_step_kind;

typedef struct loom_step {
  loom_step_kind kind;
  int32_t kernel; /* KERNEL: index into program->kernels; GEMM with an
                     epilogue: the epilogue kernel */
  int32_t node;   /* GEMM and NODE: the graph node */
  /* GEMM: epilogue_rows > 0 runs kernel `kernel` (which has a rows entry,
   * kernel.h) on each block of that many rows of the product as soon as
   * the block is computed (fusion/epilogue.c). */
  int64_t epilogue_rows;
} loom_step;

/* A program runs every node of its graph except dead ones (no graph output
 * depends on them): those are in no step, and their values are not
 * materialized. */
typedef struct loom_program {
  loom_fusion_mode mode;
  int32_t n_kernels;
  loom_kernel *kernels;
  int32_t n_steps;
  loom_step *steps;
  /* Per graph value: true if it lives in memory between steps (inputs,
   * outputs, values crossing steps); false if it lives only inside a
   * kernel (registers or scratch). */
  bool *materialized;
  int32_t n_values;
  /* Report: primitive memory-intensive ops, kernels, modeled bytes. */
  int32_t n_memory_ops;
  int64_t modeled_bytes;
  double modeled_seconds;
  /* Per kernel: the cost model's bytes and seconds (n_kernels each). */
  int64_t *kernel_bytes;
  double *kernel_seconds;
  /* Per kernel: how much longer its memory traffic takes than its
   * compute (>= 0): what saving some of its traffic can gain at most. */
  double *kernel_memory_excess;
  /* Duplicated producers: kernel dup_kernel[i] recomputes node
   * dup_node[i], which kernel_of its owner lists in its nodes. */
  int32_t n_dups;
  int32_t *dup_kernel, *dup_node;
} loom_program;

typedef struct loom_fusion_options {
  loom_fusion_mode mode;
  const loom_machine *machine; /* rates and cache sizes for the cost model */
  int32_t beam_width;          /* plans kept per step of the search (0: default) */
  /* Producer duplication (docs/FUSION.md, "Producer duplication"): cheap
   * element-wise and layout producers recomputed in the kernels that read
   * their value, where the cost model says that saves traffic, as XLA's
   * loop fusion does. 0: the mode's default (loom_fusion_mode_duplicates);
   * 1: on; -1: off. */
  int32_t duplicate;
  /* Stitch mode also compiles the loop plan and keeps whichever the cost
   * model rates faster (its fusions are a subset of stitch's, so stitch is
   * never modeled slower than the plan it could have chosen); true keeps
   * the stitch plan regardless (tests of the stitch plan itself). */
  bool stitch_only;
} loom_fusion_options;

/* Whether mode duplicates cheap producers by default: loop does (XLA's
 * rule), and so does stitch (the cost model keeps only copies that pay);
 * none does not. */
bool loom_fusion_mode_duplicates(loom_fusion_mode m);

/* --- the stages of loom_fusion_compile (exposed for tests and tools) --- */

/* How a node is executed (classify.c). */
typedef enum loom_node_class {
  LOOM_NODE_MEMORY = 0, /* memory-intensive and fusible: the planner's */
  LOOM_NODE_GEMM,       /* compute-intensive (matmul): the GEMM library */
  LOOM_NODE_EAGER,      /* run alone, without generated code */
  LOOM_NODE_DEAD        /* no graph output depends on it: not run at all */
} loom_node_class;

/* True if node n can be in a fused group at all (a memory-intensive
 * primitive on dtypes the kernels handle). */
bool loom_fusion_node_fusible(const loom_graph *g, int32_t node);

/* Classifies every node of g into cls (g->n_nodes entries). */
void loom_fusion_classify(const loom_graph *g, loom_node_class *cls);

/* A fusion plan: group_of_node (g->n_nodes entries) gives each MEMORY node
 * that runs in a kernel its group (0 .. n_groups-1, numbered in execution
 * order) and -1 to every other node. steps is a valid execution order of
 * the groups (KERNEL steps, `kernel` = the group) and of the other nodes
 * (GEMM and NODE steps). cost_s: the modeled time of the groups' kernels. */
typedef struct loom_fusion_plan {
  int32_t n_nodes;
  int32_t *group_of_node;
  int32_t n_groups;
  int32_t n_steps;
  loom_step *steps;
  double cost_s;
  int64_t n_analyzed; /* distinct candidate groups the search scored */
  /* Duplicated producers: group dup_group[i] also computes node
   * dup_node[i] (a member of another group) instead of loading its
   * value. */
  int32_t n_dups;
  int32_t *dup_group, *dup_node;
} loom_fusion_plan;

/* Explores fusion plans for g in opts->mode with the cost model and
 * returns the best one (deterministic for a given graph and machine). */
loom_status loom_fusion_plan_build(loom_ctx *ctx, const loom_graph *g, const loom_node_class *cls,
                                   const loom_fusion_options *opts, loom_fusion_plan *out);
void loom_fusion_plan_clear(loom_fusion_plan *p);

/* Moves kernels that read a GEMM's product row by row into that GEMM as
 * its epilogue where the cost model says it pays (epilogue.c): element-wise
 * kernels in loop mode, any kernel with independent rows in stitch mode,
 * none in none mode. Part of loom_fusion_compile. */
loom_status loom_fusion_attach_epilogues(loom_ctx *ctx, const loom_graph *g, const loom_machine *m,
                                         loom_program *p);
/* The same for the node steps whose node is marked in producer (per node
 * of g): ops the backend runs in blocks of whole output rows with an
 * epilogue (the cpu backend's convolutions). */
loom_status loom_fusion_attach_node_epilogues(loom_ctx *ctx, const loom_graph *g,
                                              const loom_machine *m, loom_program *p,
                                              const bool *producer);

/* Plans fusion over a decomposed, verified graph and lowers it. */
loom_status loom_fusion_compile(loom_ctx *ctx, const loom_graph *g, const loom_fusion_options *opts,
                                loom_program *out);
void loom_program_clear(loom_program *p);
/* A readable listing of the program (steps, kernels, nodes per kernel). */
/* The program as Graphviz DOT: a cluster per step (kernel, GEMM with its
 * epilogue, eager node); *out is malloc'ed. */
loom_status loom_program_dot(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                             char **out);
loom_status loom_program_print(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                               char **out);
/* A backend's loom_session_describe of its fused program: the listing,
 * the DOT, the kernels (each ending in a newline) or the source, given as
 * n_sources parts joined in order (NULL parts skipped). Any other artifact
 * is LOOM_STATUS_UNSUPPORTED, the message naming backend. */
loom_status loom_program_describe(loom_ctx *ctx, const loom_graph *g, const loom_program *p,
                                  const char *const *sources, int n_sources,
                                  loom_session_artifact what, const char *backend, char **text);

#endif

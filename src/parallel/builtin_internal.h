/* Shared by the built-in plans' files. */
#ifndef LOOM_PARALLEL_BUILTIN_INTERNAL_H
#define LOOM_PARALLEL_BUILTIN_INTERNAL_H

#include "parallel/builtin.h"

typedef enum axis_kind { AXIS_DP = 0, AXIS_TP, AXIS_PP } axis_kind;
typedef enum pp_schedule { PP_1F1B = 0, PP_GPIPE, PP_INTERLEAVED } pp_schedule;

#define MAX_AXES 4

typedef struct spec {
  int32_t n_axes;
  axis_kind kind[MAX_AXES];
  int32_t degree[MAX_AXES];
  int32_t zero;          /* ZeRO stage, 0: none */
  pp_schedule schedule;  /* with a pp axis */
  int32_t chunks;        /* PP_INTERLEAVED: model chunks per device (>= 2) */
  int32_t micro;         /* micro-batches, 0: as many as stages */
  bool interlaced;       /* embedding and head tensor-parallel across the stages */
  bool recompute;        /* activation recomputation */
} spec;

/* How a logical value is laid out along the axis being cut. */
enum { WHOLE = -1, FREE = -2 }; /* or >= 0: split along that dim */

typedef struct axis_cut {
  loom_plan *p;
  axis_kind kind; /* AXIS_DP or AXIS_TP: how labels are chosen */
  int32_t degree, stride; /* stride 0: every part stays on its device */
  int32_t *state; /* per logical value */
} axis_cut;

/* The axis' starting states of the graph's inputs. */
void builtin_seed(axis_cut *ax, const spec *sp);
/* Cuts every leaf of node into ax->degree parts; part i of a leaf on
 * device b goes to b + i * stride. */
loom_status builtin_cut_node(axis_cut *ax, int32_t node);
/* Activation recomputation over the cut plan (builtin_pipeline.c). */
loom_status builtin_recompute(loom_plan *p);
/* The pipeline axis: stages by layer, micro-batches, the schedule. */
loom_status builtin_pipeline(loom_plan *p, const spec *sp, int32_t degree, int32_t stride);

#endif

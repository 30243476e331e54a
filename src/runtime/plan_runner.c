#include "runtime/plan_runner.h"

#include "ir/dtype.h"
#include "runtime/stream.h"

#include <stdlib.h>
#include <string.h>

/* Gathers use tags from here down (below the collectives' range). */
#define GATHER_TAG 16000

struct loom_plan_runner {
  loom_ctx *ctx;
  const loom_plan_program *pp;
  loom_comm *comm;
  int32_t device;
  loom_comm_env env; /* env.stream: `stream` when overlapping, else NULL */
  loom_stream *stream; /* the comm stream (NULL: the communicator allows no other thread) */
  loom_graph *g;
  int32_t *in_map, *out_map; /* device graph input/output -> pp->ins / pp->outs (-1: a token) */
  loom_session *s;
  loom_tensor **in, **out; /* per device-graph input / output */
  int32_t *tied_in;        /* per device-graph output: the device input it updates, -1 */
};

void loom_plan_runner_free(loom_plan_runner *r) {
  if (!r) return;
  for (int32_t i = 0; r->g && r->in && i < r->g->n_inputs; i++) loom_tensor_free(r->in[i]);
  for (int32_t o = 0; r->g && r->out && o < r->g->n_outputs; o++)
    if (!r->tied_in || r->tied_in[o] < 0) loom_tensor_free(r->out[o]);
  free(r->in);
  free(r->out);
  free(r->tied_in);
  loom_session_free(r->s);
  loom_stream_free(r->stream);
  loom_graph_free(r->g);
  free(r->in_map);
  free(r->out_map);
  free(r);
}

const loom_session *loom_plan_runner_session(const loom_plan_runner *r) { return r ? r->s : NULL; }
const loom_graph *loom_plan_runner_graph(const loom_plan_runner *r) { return r ? r->g : NULL; }

static loom_status new_like(loom_ctx *ctx, const loom_graph *g, int32_t v, loom_tensor **out) {
  const loom_type *t = loom_value_type(g, v);
  return loom_tensor_new(ctx, t->dtype, t->rank, t->shape, out);
}

loom_status loom_plan_runner_new(loom_ctx *ctx, const loom_plan_program *pp, loom_comm *comm,
                                 const loom_session_options *so, loom_plan_runner **out) {
  *out = NULL;
  if (!comm || comm->size != pp->n_devices)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: the plan is for %d devices, the communicator has %d ranks",
                      pp->n_devices, comm ? comm->size : 0);
  loom_plan_runner *r = loom_calloc(ctx, 1, sizeof *r);
  if (!r) return LOOM_STATUS_OUT_OF_MEMORY;
  r->ctx = ctx;
  r->pp = pp;
  r->comm = comm;
  r->device = comm->rank;
  r->env = (loom_comm_env){comm, pp->n_groups, pp->group_start, pp->group_ranks, NULL};
  loom_status st = loom_plan_device_graph(pp, r->device, &r->g, &r->in_map, &r->out_map);
  if (!st) st = loom_session_new(ctx, r->g, so, &r->s);
  if (!st && comm->threads_ok) st = loom_stream_new(ctx, 200, "comm stream", &r->stream);
  r->env.stream = r->stream; /* overlap by default */
  if (!st) {
    r->in = loom_calloc(ctx, (size_t)r->g->n_inputs + 1, sizeof *r->in);
    r->out = loom_calloc(ctx, (size_t)r->g->n_outputs + 1, sizeof *r->out);
    r->tied_in = loom_malloc(ctx, sizeof *r->tied_in * ((size_t)r->g->n_outputs + 1));
    if (!r->in || !r->out || !r->tied_in) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; !st && i < r->g->n_inputs; i++) st = new_like(ctx, r->g, r->g->inputs[i], &r->in[i]);
  /* a tied output piece is written into the input piece it updates */
  for (int32_t o = 0; !st && o < r->g->n_outputs; o++) {
    r->tied_in[o] = -1;
    int32_t k = r->out_map[o];
    if (k >= 0) {
      const loom_plan_io *io = &pp->outs[k];
      int32_t tie = pp->output_tied ? pp->output_tied[io->index] : -1;
      for (int32_t i = 0; tie >= 0 && i < r->g->n_inputs; i++) {
        const loom_plan_io *ii = &pp->ins[r->in_map[i]];
        if (ii->index == tie && loom_vbox_equal(&ii->box, &io->box)) r->tied_in[o] = i;
      }
    }
    if (r->tied_in[o] >= 0) r->out[o] = r->in[r->tied_in[o]];
    else st = new_like(ctx, r->g, r->g->outputs[o], &r->out[o]);
  }
  if (st) {
    loom_error_prefix(ctx, "device %d", r->device);
    loom_plan_runner_free(r);
    return st;
  }
  *out = r;
  return LOOM_STATUS_OK;
}

/* Copies the box `box` between a tensor holding box `a` and one holding
 * box `b` (both contiguous, row-major): from a to b when to_b. */
static void copy_box(void *pa, const loom_vbox *a, void *pb, const loom_vbox *b,
                     const loom_vbox *box, size_t es, bool to_b) {
  int32_t rank = box->rank;
  int64_t sa[LOOM_MAX_RANK], sb[LOOM_MAX_RANK], idx[LOOM_MAX_RANK];
  int64_t acc_a = 1, acc_b = 1;
  for (int32_t d = rank - 1; d >= 0; d--) {
    sa[d] = acc_a;
    sb[d] = acc_b;
    acc_a *= a->end[d] - a->start[d];
    acc_b *= b->end[d] - b->start[d];
  }
  if (loom_vbox_numel(box) == 0) return;
  int64_t inner = rank ? box->end[rank - 1] - box->start[rank - 1] : 1;
  for (int32_t d = 0; d < rank; d++) idx[d] = box->start[d];
  for (;;) {
    int64_t oa = 0, ob = 0;
    for (int32_t d = 0; d < rank; d++) {
      oa += (idx[d] - a->start[d]) * sa[d];
      ob += (idx[d] - b->start[d]) * sb[d];
    }
    char *xa = (char *)pa + oa * (int64_t)es, *xb = (char *)pb + ob * (int64_t)es;
    if (to_b) memcpy(xb, xa, (size_t)inner * es);
    else memcpy(xa, xb, (size_t)inner * es);
    int32_t d = rank - 2;
    while (d >= 0) {
      if (++idx[d] < box->end[d]) break;
      idx[d] = box->start[d];
      d--;
    }
    if (d < 0) break;
  }
}

static loom_status check_whole(loom_plan_runner *r, int32_t input, const loom_tensor *t) {
  const loom_type *want = loom_value_type(r->pp->global, r->pp->global->inputs[input]);
  bool ok = loom_tensor_dtype(t) == want->dtype && loom_tensor_rank(t) == want->rank;
  for (int32_t d = 0; ok && d < want->rank; d++) ok = loom_tensor_dim(t, d) == want->shape[d];
  if (!ok)
    return loom_error(r->ctx, LOOM_STATUS_SHAPE_MISMATCH, "plan: input %s has the wrong type",
                      r->pp->global->values[r->pp->global->inputs[input]].name);
  return LOOM_STATUS_OK;
}

static loom_status slice_in(loom_plan_runner *r, int32_t i, const loom_tensor *whole_t) {
  const loom_plan_io *io = &r->pp->ins[r->in_map[i]];
  LOOM_TRY(check_whole(r, io->index, whole_t));
  const loom_type *t = loom_value_type(r->pp->global, r->pp->global->inputs[io->index]);
  loom_vbox whole = loom_vbox_full(t);
  copy_box(loom_tensor_data(whole_t), &whole, loom_tensor_data(r->in[i]), &io->box, &io->box,
           loom_dtype_size(t->dtype), true);
  return LOOM_STATUS_OK;
}

loom_status loom_plan_runner_load(loom_plan_runner *r, const loom_tensor *const *whole) {
  for (int32_t i = 0; i < r->g->n_inputs; i++) {
    int32_t index = r->pp->ins[r->in_map[i]].index;
    if (whole[index]) LOOM_TRY(slice_in(r, i, whole[index]));
  }
  return LOOM_STATUS_OK;
}

static bool is_state(const loom_plan_program *pp, int32_t input) {
  for (int32_t o = 0; pp->output_tied && o < pp->global->n_outputs; o++)
    if (pp->output_tied[o] == input) return true;
  return false;
}

loom_status loom_plan_runner_step(loom_plan_runner *r, const loom_tensor *const *whole) {
  for (int32_t i = 0; i < r->g->n_inputs; i++) {
    int32_t index = r->pp->ins[r->in_map[i]].index;
    if (whole[index] && !is_state(r->pp, index)) LOOM_TRY(slice_in(r, i, whole[index]));
  }
  loom_ctx *ctx = r->ctx;
  struct loom_comm_env *saved = ctx->comm_env;
  ctx->comm_env = &r->env;
  loom_status st = loom_session_run(r->s, r->g->n_inputs, (const loom_tensor *const *)r->in,
                                    r->g->n_outputs, r->out);
  ctx->comm_env = saved;
  if (st) loom_error_prefix(ctx, "device %d", r->device);
  return st;
}

void loom_plan_runner_set_comm_overlap(loom_plan_runner *r, bool on) {
  r->env.stream = on ? r->stream : NULL;
}

bool loom_plan_runner_comm_overlap(const loom_plan_runner *r) { return r->env.stream != NULL; }

int64_t loom_plan_runner_comm_tasks(const loom_plan_runner *r) {
  return loom_stream_tasks_run(r->stream);
}

/* Collective: every distinct box of a value, held on some device, goes
 * to rank 0, which assembles the whole and broadcasts it. */
static loom_status gather(loom_plan_runner *r, const loom_plan_io *ios, int32_t n_ios,
                          int32_t index, bool outputs, loom_tensor *whole_t) {
  const loom_plan_program *pp = r->pp;
  const loom_graph *G = pp->global;
  int32_t v = outputs ? G->outputs[index] : G->inputs[index];
  const loom_type *t = loom_value_type(G, v);
  loom_vbox whole = loom_vbox_full(t);
  size_t es = loom_dtype_size(t->dtype);
  int32_t me = r->device;
  loom_status st = LOOM_STATUS_OK;
  for (int32_t k = 0; !st && k < n_ios; k++) {
    const loom_plan_io *io = &ios[k];
    if (io->index != index) continue;
    bool dup = false;
    for (int32_t j = 0; j < k; j++)
      dup |= ios[j].index == index && loom_vbox_equal(&ios[j].box, &io->box);
    if (dup) continue;
    /* this device's tensor for the piece */
    loom_tensor *mine = NULL;
    if (io->device == me) {
      int32_t n = outputs ? r->g->n_outputs : r->g->n_inputs;
      for (int32_t i = 0; i < n && !mine; i++) {
        int32_t m = outputs ? r->out_map[i] : r->in_map[i];
        if (m >= 0 && &ios[m] == io) mine = outputs ? r->out[i] : r->in[i];
      }
    }
    int64_t count = loom_vbox_numel(&io->box);
    if (me == 0) {
      void *buf = mine ? loom_tensor_data(mine) : malloc((size_t)count * es + 1);
      if (!buf) return LOOM_STATUS_OUT_OF_MEMORY;
      if (!mine) st = loom_comm_recv(r->comm, r->ctx, buf, count, t->dtype, io->device, GATHER_TAG);
      if (!st) copy_box(loom_tensor_data(whole_t), &whole, buf, &io->box, &io->box, es, false);
      if (!mine) free(buf);
    } else if (io->device == me) {
      if (!mine) return loom_error(r->ctx, LOOM_STATUS_INTERNAL, "plan: gather: a piece is missing");
      st = loom_comm_send(r->comm, r->ctx, loom_tensor_data(mine), count, t->dtype, 0, GATHER_TAG);
    }
  }
  if (!st) st = loom_comm_broadcast(r->comm, r->ctx, loom_tensor_data(whole_t), loom_type_numel(t),
                                    t->dtype, 0);
  return st;
}

loom_status loom_plan_runner_gather_input(loom_plan_runner *r, int32_t input, loom_tensor *whole) {
  if (input < 0 || input >= r->pp->global->n_inputs)
    return loom_error(r->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: no input %d", input);
  LOOM_TRY(check_whole(r, input, whole));
  return gather(r, r->pp->ins, r->pp->n_ins, input, false, whole);
}

loom_status loom_plan_runner_gather_output(loom_plan_runner *r, int32_t output,
                                           loom_tensor *whole) {
  if (output < 0 || output >= r->pp->global->n_outputs)
    return loom_error(r->ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan: no output %d", output);
  return gather(r, r->pp->outs, r->pp->n_outs, output, true, whole);
}

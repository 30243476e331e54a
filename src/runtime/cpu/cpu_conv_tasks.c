/*
 * Cutting a window op into tasks sized by the shapes only (one image times
 * a block of channels or groups) and running them on the caller and the
 * helper threads (cpu_conv_workers.c), one single-threaded primitive run
 * per task (cpu_conv_internal.h).
 */
#include "runtime/cpu/cpu_conv_internal.h"

#include <omp.h>
#include <string.h>

/* Units (groups, or single channels with one group) per block: the whole
 * lot unless that leaves fewer than CONV_MIN_TASKS tasks over `images`, halved
 * while a block keeps CONV_MIN_CHANNELS channels (per_unit each). */
int64_t conv_block_units(int64_t units, int64_t per_unit, int64_t images, int64_t min_channels) {
  int64_t b = units;
  while (b > 1 && images * ((units + b - 1) / b) < CONV_MIN_TASKS &&
         (b + 1) / 2 * per_unit >= min_channels)
    b = (b + 1) / 2;
  return b;
}

/* The key's window from w (N = 1, channels filled in by the caller). */
void conv_key_window(prim_key *p, prim_kind kind, const loom_window *w) {
  memset(p, 0, sizeof *p);
  p->kind = kind;
  p->k = w->k;
  p->groups = 1;
  for (int32_t d = 0; d < w->k; d++) {
    p->big[d] = w->big[d];
    p->small[d] = w->small[d];
    p->kernel[d] = w->kernel[d];
    p->stride[d] = w->stride[d];
    p->dil[d] = w->dil[d];
    p->lo[d] = w->lo[d];
    /* oneDNN's padding_r: what the output size implies (ceil_mode's extra
     * positions included; never below 0) */
    int64_t span = w->dil[d] * (w->kernel[d] - 1) + 1;
    p->hi[d] = LOOM_MAX(0, (w->small[d] - 1) * w->stride[d] + span - w->big[d] - w->lo[d]);
  }
}

loom_status conv_window_of(const loom_cpu *c, const loom_node *n, const loom_view *in,
                           loom_window *w) {
  int32_t k = in[0].rank - 2;
  const int64_t *kernel =
      n->op == LOOM_OP_CONV || n->op == LOOM_OP_CONV_TRANSPOSE ? in[1].shape + 2 : NULL;
  return loom_window_read(c->ctx, n, k, in[0].shape + 2, in[0].shape + 2, kernel, w);
}

bool conv_run_inline(int64_t tasks, bool (*task)(const void *user, int64_t t), const void *user) {
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  bool ok = true;
  for (int64_t t = 0; t < tasks; t++)
    ok = task(user, t) && ok;
  omp_set_num_threads(prev);
  return ok;
}

/* Runs task(user, t) for t in [0, tasks) on the caller and the window
 * ops' helper threads (cpu_conv_workers.c); false if a task failed. */
bool conv_run_tasks(const loom_cpu *c, int64_t tasks, bool parallel,
                    bool (*task)(const void *user, int64_t t), const void *user) {
  if (!parallel || tasks <= 1) return conv_run_inline(tasks, task, user);
  return conv_run_workers(c->nt, tasks, task, user);
}

void conv_split_make(conv_split *s, int64_t batch, int64_t big_c, int64_t small_c, bool by_big,
                     int64_t min_channels) {
  const loom_window *w = &s->w;
  int64_t g = w->groups;
  s->batch = batch;
  s->big_c = big_c;
  s->small_c = small_c;
  s->kn = loom_window_kernel_numel(w);
  s->bs = loom_window_big_numel(w);
  s->ss = loom_window_small_numel(w);
  s->units = g > 1 ? g : by_big ? big_c : small_c;
  s->per_small = g > 1 ? small_c / g : by_big ? 0 : 1;
  s->per_big = g > 1 ? big_c / g : by_big ? 1 : 0;
  int64_t per = LOOM_MAX(s->per_small, s->per_big);
  s->b = conv_block_units(s->units, per, by_big || s->per_small ? batch : 1, min_channels);
  s->blocks = (s->units + s->b - 1) / s->b;
}

/* Block blk's key: u0 its first unit, nu its units. */
void conv_block_key(const conv_split *s, prim_kind kind, int64_t blk, prim_key *p, int64_t *u0,
                    int64_t *nu) {
  *u0 = blk * s->b;
  *nu = LOOM_MIN(s->b, s->units - *u0);
  conv_key_window(p, kind, &s->w);
  p->groups = s->w.groups > 1 ? *nu : 1;
  p->small_c = s->per_small ? *nu * s->per_small : s->small_c;
  p->big_c = s->per_big ? *nu * s->per_big : s->big_c;
}

bool conv_big_flops(const conv_split *s) {
  return 2.0 * (double)s->batch * (double)s->small_c * (double)(s->big_c / s->w.groups) *
             (double)s->kn * (double)s->ss >=
         1e6;
}

int64_t conv_gcd(int64_t a, int64_t b) { return b ? conv_gcd(b, a % b) : a; }
int64_t conv_lcm(int64_t a, int64_t b) { return a / conv_gcd(a, b) * b; }

loom_status conv_status(const loom_cpu *c, const loom_node *n, bool ok) {
  if (ok) return LOOM_STATUS_OK;
  return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "%s: a oneDNN primitive failed",
                    loom_op_name(n->op));
}

/*
 * The machine line of `loom bench`: triad bandwidth and the sgemm rate,
 * measured in the same run as the workloads. The sgemm rate the ratios
 * use is Loom's own: a one-matmul graph run by a session on the default
 * backend (on cpu: fixed tiles, one single-threaded oneDNN call each);
 * oneDNN's own threaded sgemm is measured beside it, so a gap between the
 * two shows.
 */
#define _GNU_SOURCE /* sched_setaffinity: mpirun binds each rank to a core */
#include "harness.h"
#include "bench.h"
#include "comm/comm.h"
#include "perf/cluster.h"
#include "perf/comm_model.h"
#include "perf/profile.h"
#include "model/gpt.h"
#include "ops/op.h"
#include "parallel/lower.h"
#include "parallel/simulate.h"
#include "runtime/backend.h"
#include "runtime/trace.h"
#include "train/trainer.h"
#include "core/clock.h"
#include "core/ctx.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#define GEMM_N 2048
/* A floor for the triad arrays (all three) when the LLC reads small. */
#define TRIAD_MIN_BYTES ((int64_t)48 << 20)
/* Timed runs of each roof variant at the machine's size. */
#define ROOF_RUNS 7

/* The session behind via_loom (one shape at a time; the bench measures
 * the machine from one thread), freed once the machine is measured. */
static struct {
  loom_graph *g;
  loom_session *s;
  int64_t m, n, k;
} loom_mm;

static void loom_mm_free(void) {
  loom_session_free(loom_mm.s);
  loom_graph_free(loom_mm.g);
  memset(&loom_mm, 0, sizeof loom_mm);
}

static loom_status loom_mm_prepare(loom_ctx *ctx, int64_t m, int64_t n, int64_t k) {
  if (loom_mm.s && loom_mm.m == m && loom_mm.n == n && loom_mm.k == k) return LOOM_STATUS_OK;
  loom_mm_free();
  loom_value a, b, c;
  LOOM_TRY(loom_graph_new(ctx, &loom_mm.g));
  LOOM_TRY(loom_graph_input(loom_mm.g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){m, k}, &a));
  LOOM_TRY(loom_graph_input(loom_mm.g, "b", LOOM_DTYPE_F32, 2, (int64_t[]){k, n}, &b));
  LOOM_TRY(loom_graph_op(loom_mm.g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 0, NULL, &c));
  LOOM_TRY(loom_graph_output(loom_mm.g, "c", c));
  loom_session_options o = LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_NONE);
  LOOM_TRY(loom_session_new(ctx, loom_mm.g, &o, &loom_mm.s));
  loom_mm.m = m, loom_mm.n = n, loom_mm.k = k;
  return LOOM_STATUS_OK;
}

static loom_status via_loom(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                            const float *a, const float *b, float *c) {
  LOOM_TRY(loom_mm_prepare(ctx, m, n, k));
  loom_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  int32_t prev = ctx->n_threads; /* the setting (0: all cores), restored below */
  loom_status st = loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){m, k}, (void *)a, &ta);
  if (!st) st = loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){k, n}, (void *)b, &tb);
  if (!st) st = loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){m, n}, c, &tc);
  if (!st) st = loom_ctx_set_threads(ctx, threads);
  const loom_tensor *in[2] = {ta, tb};
  loom_tensor *out[1] = {tc}; /* computed in place: the caller's memory */
  if (!st) st = loom_session_run(loom_mm.s, 2, in, 1, out);
  loom_ctx_set_threads(ctx, prev);
  loom_tensor_free(ta);
  loom_tensor_free(tb);
  loom_tensor_free(tc);
  return st;
}

static loom_status onednn_sgemm(loom_ctx *ctx, int32_t threads, int64_t m, int64_t n, int64_t k,
                                const float *a, const float *b, float *c) {
  int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  dnnl_status_t st = dnnl_sgemm('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  omp_set_num_threads(prev);
  if (st != dnnl_success)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "dnnl_sgemm failed (status %d)", (int)st);
  return LOOM_STATUS_OK;
}

void loom_bench_machine_info_clear(loom_bench_machine_info *mi) {
  loom_bench_roof_free(mi->roof_kit);
  mi->roof_kit = NULL;
}

double loom_bench_row_roof(const loom_bench_row *row, const loom_bench_machine_info *mi) {
  if (row && row->have_roof && row->roof.roof_gbps > 0) return row->roof.roof_gbps;
  return mi->roof.roof_gbps > 0 ? mi->roof.roof_gbps : mi->m.triad_gbps;
}

/* Other processes' load: a shared machine's timings are only as good as
 * it is quiet, so the report says how busy it was. */
double loom_bench_loadavg(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  double x = -1.0;
  if (!f) return -1.0;
  if (fscanf(f, "%lf", &x) != 1) x = -1.0;
  fclose(f);
  return x;
}

loom_status loom_bench_measure_machine(loom_ctx *ctx, bool small, bool quiet,
                                       loom_bench_machine_info *mi) {
  memset(mi, 0, sizeof *mi);
  mi->loadavg = loom_bench_loadavg();
  loom_machine_detect(ctx, &mi->m);
  /* STREAM's rule is arrays several times the LLC; --size small settles
   * for one LLC's worth in all so quick runs stay quick. */
  loom_measure_options mo = {.gemm_n = GEMM_N, .sgemm = via_loom};
  mo.triad_bytes = (small ? 1 : 4) * mi->m.llc_bytes;
  if (mo.triad_bytes < TRIAD_MIN_BYTES) mo.triad_bytes = TRIAD_MIN_BYTES;
  if (!quiet)
    fprintf(stderr, "bench: measuring the machine (triad over %lld MiB, sgemm %d^3)\n",
            (long long)(mo.triad_bytes >> 20), GEMM_N);
  double t0 = loom_now_s();
  loom_triad_result tr;
  loom_status st = loom_machine_measure(ctx, &mo, &mi->m, &tr);
  loom_mm_free();
  LOOM_TRY(st);
  /* what the default backend's cost rules read (the cpu GEMM's epilogue
   * rule: kept in the machine profile) */
  LOOM_TRY(loom_backend_machine_rates(ctx, NULL, &mi->m));
  LOOM_TRY(loom_measure_sgemm(ctx, onednn_sgemm, mi->m.threads, GEMM_N, 0,
                              &mi->sgemm_lib_gflops));
  /* The roof over the same bytes as the triad, with the kernels built
   * like generated code (roof.c). */
  LOOM_TRY(loom_bench_roof_load(ctx, &mi->roof_kit));
  LOOM_TRY(loom_bench_roof_measure(ctx, mi->roof_kit, mi->m.threads, tr.bytes, ROOF_RUNS,
                                   &mi->roof));
  mi->measure_s = loom_now_s() - t0;
  mi->triad_bytes = tr.bytes;
  mi->gemm_n = GEMM_N;
  return LOOM_STATUS_OK;
}

/* The simulator rates a GEMM whose smallest dim is s at s / (s + H) of a
 * large one's (simulate.c): H from the rates of a 1024^3 sgemm and of a
 * skinny one shaped as a transformer layer's (PROBE_M rows of width
 * HALF_DIM_PROBE times a HALF_DIM_PROBE x PROBE_N weight),
 * q = skinny / large = [p / (p + H)] / [1024 / (1024 + H)]. */
#define HALF_DIM_PROBE 128
#define PROBE_M 2048
#define PROBE_N 512
#define PROBE_TRIALS 9

/* The median rate of Loom's m x n x k sgemm on one thread, in GFLOP/s. */
static loom_status skinny_rate(loom_ctx *ctx, int64_t m, int64_t n, int64_t k, double *gflops) {
  float *a = loom_calloc(ctx, (size_t)(m * k), sizeof *a), *b = loom_calloc(ctx, (size_t)(k * n), sizeof *b);
  float *c = loom_calloc(ctx, (size_t)(m * n), sizeof *c);
  double t[PROBE_TRIALS];
  loom_status st = a && b && c ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) st = via_loom(ctx, 1, m, n, k, a, b, c); /* warm-up */
  for (int32_t r = 0; !st && r < PROBE_TRIALS; r++) {
    double t0 = loom_now_s();
    st = via_loom(ctx, 1, m, n, k, a, b, c);
    t[r] = loom_now_s() - t0;
  }
  double med = st ? 0 : loom_median(t, PROBE_TRIALS);
  *gflops = med > 0 ? 2.0 * (double)m * (double)n * (double)k / med / 1e9 : 0;
  free(a);
  free(b);
  free(c);
  return st;
}
#define MAX_NEIGHBOURS 255
static int32_t half_dim(double large, double small) {
  double q = large > 0 ? small / large : 1, p = HALF_DIM_PROBE;
  if (q >= 1) return 1;
  if (q * 1024 <= p) return 4096;
  double h = p * 1024 * (1 - q) / (1024 * q - p);
  return h < 1 ? 1 : h > 4096 ? 4096 : (int32_t)(h + 0.5);
}

/* A device of this machine's cluster is one core while its neighbours
 * work too (ranks run side by side): a lone busy core runs at a higher
 * clock than all of them together. So while the per-core sgemm is
 * measured, n child processes keep the other cores busy with a plain
 * vector loop (no library state crosses the fork). Pollers instead wait
 * as a rank waits for its peers (loom_comm_poll_pause) on a request that
 * never completes. */
static float busy_loop(int32_t reps) {
  static float x[4096];
  for (int32_t r = 0; r < reps; r++)
    for (int32_t i = 0; i < 4096; i++) x[i] = x[i] * 0.999f + 1.0f;
  return x[reps % 4096];
}

/* Binds the calling process to core `cpu` (of the `cores` online), as
 * mpirun binds each of up to `cores` ranks to its own core, or frees it
 * (cpu < 0). A bound rank keeps its core's share of the machine when
 * other work runs beside it, where unbound processes crowd one another
 * (two unbound trainers ran 1.7x slower each than one, two bound ranks
 * about as fast as one); the rates measured here must be the ranks'. */
static void bind_to_core(int32_t cpu, int32_t cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int32_t c = 0; c < cores && c < CPU_SETSIZE; c++)
    if (cpu < 0 || c == cpu % cores) CPU_SET(c, &set);
  (void)sched_setaffinity(0, sizeof set, &set); /* best effort: unbound measures too */
}

/* n neighbours, the i-th bound to core first + i. */
static int32_t start_neighbours(int32_t n, bool poll, int32_t first, pid_t *pids) {
  int32_t started = 0, cores = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
  pid_t parent = getpid();
  for (; started < n; started++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      bind_to_core(first + started, cores > 0 ? cores : 1);
      /* until killed, or orphaned (the parent died before it could) */
      for (int32_t spins = 0; getppid() == parent; spins++)
        if (poll) loom_comm_poll_pause(spins);
        else busy_loop(1000);
      _exit(0);
    }
    pids[started] = pid;
  }
  return started;
}

static void stop_neighbours(const pid_t *pids, int32_t n) {
  for (int32_t i = 0; i < n; i++) kill(pids[i], SIGKILL);
  for (int32_t i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
}

/* The small GPT a rank's step is calibrated on (measure_step), which the
 * trainer neighbours below train too. */
#define CAL_LAYERS 4
#define CAL_D_MODEL 128
#define CAL_HEADS 4
#define CAL_BATCH 16
#define CAL_CONTEXT 64
/* how long a trainer neighbour may take to compile and run its first step */
#define TRAINER_START_S 120

/* Neighbours that run what ranks run: `loom train` on the calibration
 * model, one thread, each bound to core first + i (first < 0: unbound,
 * as mpirun leaves more ranks than cores). A busy loop keeps a core busy
 * but leaves the caches and the memory bus alone; a rank does not. Each
 * is waited for until its first step is done (the compile behind it);
 * it dies with this process. Returns how many run (0: fall back). */
static int32_t start_trainers(int32_t n, int32_t first, pid_t *pids) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  int32_t cores = (int32_t)sysconf(_SC_NPROCESSORS_ONLN), started = 0;
  if (len <= 0 || n <= 0) return 0;
  exe[len] = '\0';
  char layers[16], width[16], heads[16], batch[16], context[16];
  snprintf(layers, sizeof layers, "%d", CAL_LAYERS);
  snprintf(width, sizeof width, "%d", CAL_D_MODEL);
  snprintf(heads, sizeof heads, "%d", CAL_HEADS);
  snprintf(batch, sizeof batch, "%d", CAL_BATCH);
  snprintf(context, sizeof context, "%d", CAL_CONTEXT);
  int fds[MAX_NEIGHBOURS];
  pid_t parent = getpid();
  for (; started < n; started++) {
    int p[2];
    if (pipe(p) != 0) break;
    pid_t pid = fork();
    if (pid < 0) {
      close(p[0]), close(p[1]);
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      bind_to_core(first < 0 ? -1 : first + started, cores > 0 ? cores : 1);
      int null = open("/dev/null", O_WRONLY);
      dup2(p[1], STDOUT_FILENO);
      if (null >= 0) dup2(null, STDERR_FILENO);
      close(p[0]);
      setenv("OMP_NUM_THREADS", "1", 1);
      execl(exe, exe, "train", "--layers", layers, "--d-model", width, "--heads", heads, "--batch",
            batch, "--context", context, "--steps", "1000000", "--threads", "1", "--log-every",
            "1000000", "--eval-every", "0", (char *)NULL);
      _exit(127);
    }
    close(p[1]);
    pids[started] = pid, fds[started] = p[0];
  }
  /* the first "step" line of each: it runs steady from then on */
  bool ok = started == n;
  for (int32_t i = 0; i < started; i++) {
    char buf[4096];
    size_t have = 0;
    double until = loom_now_s() + TRAINER_START_S;
    bool seen = false;
    while (ok && !seen && loom_now_s() < until) {
      struct pollfd pf = {fds[i], POLLIN, 0};
      if (poll(&pf, 1, 1000) <= 0) continue;
      ssize_t got = read(fds[i], buf + have, sizeof buf - 1 - have);
      if (got <= 0) break; /* it died */
      have += (size_t)got;
      buf[have] = '\0';
      seen = strstr(buf, "step ") != NULL;
      if (have > sizeof buf / 2) memmove(buf, buf + have / 2, have - have / 2), have -= have / 2;
    }
    ok &= seen;
    close(fds[i]); /* it writes no more until its last step */
  }
  if (ok) return started;
  stop_neighbours(pids, started);
  return 0;
}

/* One process training a small GPT, which is what a rank runs: its GEMMs
 * (transposed operands for the gradients, fused epilogues, weights packed
 * anew as they change) are not one 1024^3 sgemm, its flash-attention
 * kernels run well below its GEMMs, and a step pays for more than its
 * kernels. Measured over CAL_STEPS steps, per step: the time of its
 * "gemm" events, of its flash-attention events, of all its events, and
 * the wall time. The caller keeps the other cores busy,
 * as ranks run side by side. */
#define CAL_STEPS 2
typedef struct step_measure {
  loom_graph *g; /* the step's graph, built as the trainer builds it */
  double gemm_s, attn_s, events_s, wall_s;
  double state_bytes; /* parameters and AdamW moments, updated in place */
} step_measure;

static loom_status measure_step(loom_ctx *ctx, step_measure *m) {
  loom_train_config c;
  loom_train_config_default(&c);
  c.model.n_layer = CAL_LAYERS;
  c.model.d_model = CAL_D_MODEL;
  c.model.n_head = CAL_HEADS;
  c.model.d_ff = 4 * CAL_D_MODEL;
  c.batch = CAL_BATCH;
  c.steps = 1 + CAL_STEPS;
  c.threads = 1;
  c.model.dropout = 0; /* as `loom train` runs */
  c.model.context = CAL_CONTEXT;
  loom_trainer *t = NULL;
  LOOM_TRY(loom_trainer_new(ctx, &c, &t));
  m->state_bytes = 3.0 * (double)loom_trainer_param_count(t) * sizeof(float);
  float loss = 0;
  loom_status st = loom_trainer_step(t, &loss); /* compiles */
  if (!st) st = loom_ctx_trace_begin(ctx);
  double t0 = loom_now_s();
  for (int32_t k = 0; !st && k < CAL_STEPS; k++) st = loom_trainer_step(t, &loss);
  m->wall_s = (loom_now_s() - t0) / CAL_STEPS;
  if (!st) {
    m->gemm_s = loom_trace_seconds(ctx->trace, "gemm") / CAL_STEPS;
    m->attn_s = loom_trace_sum(ctx->trace, NULL, "flash_attention", NULL) / CAL_STEPS;
    m->events_s = loom_trace_sum(ctx->trace, NULL, NULL, NULL) / CAL_STEPS;
  }
  if (ctx->trace) ctx->trace_free(ctx->trace), ctx->trace = NULL;
  loom_trainer_free(t);
  /* the same step's graph, built as the trainer builds it */
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = "cpu", .rng = c.rng, .attention = c.attention);
  loom_gpt_optim opt = {.beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps,
                        .weight_decay = c.weight_decay, .seed = c.seed, .session = &so};
  int64_t per_step = 0;
  if (!st) st = loom_gpt_build_train(ctx, &c.model, c.batch, c.model.context, &opt, &m->g, &per_step);
  return st;
}

/* The simulator's seconds for the step's graph on cluster c (one device):
 * its GEMMs, its flash attention and the rest. */
typedef struct step_parts {
  double gemm, attn, other;
} step_parts;

static loom_status simulate_step(loom_ctx *ctx, const loom_graph *g, const loom_cluster *c,
                                 step_parts *out) {
  double *t = loom_malloc(ctx, sizeof *t * (size_t)(g->n_nodes ? g->n_nodes : 1));
  if (!t) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_sim_options so = {.cluster = c, .precision = LOOM_PRECISION_f32};
  loom_status st = loom_sim_graph_seconds(ctx, g, &so, t);
  *out = (step_parts){0, 0, 0};
  for (int32_t n = 0; !st && n < g->n_nodes; n++) {
    loom_op op = g->nodes[n].op;
    if (op == LOOM_OP_MATMUL) out->gemm += t[n];
    else if (op == LOOM_OP_FLASH_ATTENTION || op == LOOM_OP_FLASH_ATTENTION_GRAD) out->attn += t[n];
    else out->other += t[n];
  }
  free(t);
  return st;
}

/* Fits the device to the measured step, so that the simulator's one
 * device runs it as measured, part by part:
 *   gemm.efficiency   its GEMMs at the full rate against the "gemm" events
 *                     (their fused epilogues inside), flops.f32 raised
 *                     when the step's GEMMs beat the 1024^3 sgemm;
 *   memory.bandwidth  the rate at which the step's other kernels move
 *                     their bytes (its small activations stay in cache:
 *                     more than the triad here);
 *   attn.efficiency   its flash kernels at the full rate against theirs;
 *   kernel.launch     what the step spends outside its kernels, less the
 *                     copy of the updated state the simulator charges
 *                     itself, per kernel the simulator counts.
 * Each is left as measured (the triad, efficiency 1, no launch) when the
 * step gives nothing to fit it to. */
#define LAUNCH_PROBE_S 1e-3
#define BANDWIDTH_ROUNDS 3
static loom_status fit_step(loom_ctx *ctx, const step_measure *m, loom_cluster *c) {
  step_parts p;
  double *rate = &c->flops[LOOM_PRECISION_f32];
  c->gemm_efficiency = c->attention_efficiency = c->memory_efficiency = 1;
  c->kernel_launch_s = 0;
  LOOM_TRY(simulate_step(ctx, m->g, c, &p));
  if (p.gemm > 0 && m->gemm_s > 0) {
    double e = p.gemm / m->gemm_s;
    if (e > 1) *rate *= e, e = 1;
    c->gemm_efficiency = fmax(0.05, e);
  }
  /* the rest is mostly memory-bound: a few rounds settle the nodes that
   * cross between the roofline's two sides */
  double other = m->events_s - m->gemm_s - m->attn_s;
  for (int32_t r = 0; r < BANDWIDTH_ROUNDS && other > 0; r++) {
    LOOM_TRY(simulate_step(ctx, m->g, c, &p));
    if (p.other <= 0) break;
    c->memory_bandwidth_Bps *= p.other / other;
  }
  LOOM_TRY(simulate_step(ctx, m->g, c, &p));
  c->attention_efficiency = p.attn > 0 && m->attn_s > 0 ? fmin(1, fmax(0.001, p.attn / m->attn_s)) : 0;
  double total0 = p.gemm + p.attn + p.other;
  c->kernel_launch_s = LAUNCH_PROBE_S;
  LOOM_TRY(simulate_step(ctx, m->g, c, &p));
  double launches = (p.gemm + p.attn + p.other - total0) / LAUNCH_PROBE_S;
  double copy = 2 * m->state_bytes / c->memory_bandwidth_Bps;
  double outside = m->wall_s - m->events_s - copy;
  c->kernel_launch_s = launches >= 1 && outside > 0 ? outside / launches : 0;
  return LOOM_STATUS_OK;
}

/* wait.share: the fraction of a core a rank takes while it polls for its
 * peers, as the simulator charges it: a task beside a poller runs at
 * 1 / (1 + w) of its speed alone. A poller (loom_comm_poll_pause, as a
 * rank waits) is bound to core 0 beside a vector loop bound there too,
 * and its CPU time is read from the kernel when it is reaped: taking a
 * share f of the core it leaves 1 - f, so w = f / (1 - f) (medians of
 * WAIT_TURNS). The loop only keeps the core busy: timing the loop alone
 * and beside the poller instead read 0.2 in one build and 0.8 in
 * another of the same source (the loop's own speed beside the switches
 * moved with the binary's layout), while the poller's share read
 * 0.12-0.16 in both. */
#define WAIT_TURNS 5
static double seconds_of_loop(int32_t reps) {
  double t0 = loom_now_s();
  volatile float sink = busy_loop(reps);
  (void)sink;
  return loom_now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double wait_share(int32_t cores) {
  double share[WAIT_TURNS];
  int32_t got = 0;
  bind_to_core(0, cores);
  int32_t reps = 100;
  while (reps < (1 << 24) && seconds_of_loop(reps) < 0.05) reps *= 2; /* 50-100 ms */
  for (int32_t t = 0; t < WAIT_TURNS; t++) {
    pid_t poller;
    double t0 = loom_now_s();
    if (start_neighbours(1, true, 0, &poller) < 1) break;
    (void)seconds_of_loop(reps);
    kill(poller, SIGKILL);
    struct rusage ru;
    if (wait4(poller, NULL, 0, &ru) != poller) break;
    double life = loom_now_s() - t0;
    double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                 (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    share[got++] = life > 0 ? fmin(0.99, cpu / life) : 0;
  }
  bind_to_core(-1, cores);
  if (got < 1) return 0; /* no fork */
  qsort(share, (size_t)got, sizeof *share, cmp_double);
  double f = share[got / 2], w = f / (1 - f);
  return w > 1 ? 1 : w;
}

/* harness.h. Each run is one moment of a shared machine: the median of
 * MPI_LINK_RUNS runs' latencies and bandwidths is kept. */
#define MPI_LINK_RUNS 3
void loom_bench_measure_mpi_link(void) {
  char exe[4096], cmd[5000];
  if (!loom_bench_mpi_exe(exe, sizeof exe)) return;
  loom_bench_mpirun_cmd(cmd, sizeof cmd, 2, exe,
                        "train --layers 1 --d-model 16 --heads 1 --batch 2 --context 8 --steps 1 "
                        "--threads 1 --log-every 100000 --eval-every 0",
                        "dp2", ">/dev/null");
  char env_cmd[5100];
  snprintf(env_cmd, sizeof env_cmd, "LOOM_COMM_REMEASURE=1 %s", cmd);
  double lat[MPI_LINK_RUNS], bw[MPI_LINK_RUNS], ex[MPI_LINK_RUNS], cp[MPI_LINK_RUNS];
  int32_t got = 0;
  for (int32_t r = 0; r < MPI_LINK_RUNS; r++) {
    if (system(env_cmd) != 0) continue; /* the kept model stays */
    loom_comm_model m = loom_comm_model_kept("mpi");
    if (m.measured && m.exchange_Bps > 0 && m.copy_Bps > 0)
      lat[got] = m.latency_s, bw[got] = m.bandwidth_Bps, ex[got] = m.exchange_Bps,
      cp[got] = m.copy_Bps, got++;
  }
  if (got < 2) return; /* one run's model is kept as it is */
  qsort(lat, (size_t)got, sizeof *lat, cmp_double);
  qsort(bw, (size_t)got, sizeof *bw, cmp_double);
  qsort(ex, (size_t)got, sizeof *ex, cmp_double);
  qsort(cp, (size_t)got, sizeof *cp, cmp_double);
  loom_profile_put("comm_mpi_latency_s", lat[got / 2]);
  loom_profile_put("comm_mpi_bytes_per_s", bw[got / 2]);
  loom_profile_put("comm_mpi_exchange_bytes_per_s", ex[got / 2]);
  loom_profile_put("comm_mpi_copy_bytes_per_s", cp[got / 2]);
}

loom_status loom_bench_this_cluster(loom_ctx *ctx, loom_cluster *out) {
  loom_machine m;
  loom_machine_detect(ctx, &m);
  loom_measure_options mo = {.gemm_n = 1024, .sgemm = via_loom};
  mo.triad_bytes = 4 * m.llc_bytes < TRIAD_MIN_BYTES ? TRIAD_MIN_BYTES : 4 * m.llc_bytes;
  double one = 0, small = 0;
  loom_status st = loom_machine_measure(ctx, &mo, &m, NULL);
  double waiting = st ? 0 : wait_share(m.cores > 0 ? m.cores : 1);
  /* waits' pauses, and turns as the bench oversubscribes: two ranks a core */
  loom_turn_result turns = {0, 0};
  int32_t cores = m.cores > 0 ? m.cores : 1;
  if (!st)
    st = loom_measure_turns(ctx, cores, LOOM_MIN(2 * cores, LOOM_MEASURE_TURNS_MAX_RANKS), &turns);
  /* every rate under the same conditions as the ranks run: one thread,
   * bound to a core, a rank on each other core (a busy loop where no
   * trainer starts) */
  pid_t pids[MAX_NEIGHBOURS];
  int32_t others = LOOM_MIN(m.cores - 1, MAX_NEIGHBOURS);
  int32_t busy = start_trainers(others, 1, pids);
  if (busy < others) busy = start_neighbours(others, false, 1, pids);
  bind_to_core(0, m.cores);
  step_measure sm = {0}, crowded = {0};
  if (!st) st = loom_measure_sgemm(ctx, via_loom, 1, 1024, 0, &one);
  if (!st) st = skinny_rate(ctx, PROBE_M, PROBE_N, HALF_DIM_PROBE, &small);
  loom_mm_free();
  if (!st) st = measure_step(ctx, &sm);
  stop_neighbours(pids, busy);
  bind_to_core(-1, m.cores);
  /* and two ranks a core, unbound as mpirun leaves them: the step takes
   * twice as long with fair, free turns; what it takes beyond that is
   * the turns' cost (shared.efficiency) */
  int32_t crowd = LOOM_MIN(2 * m.cores - 1, MAX_NEIGHBOURS);
  busy = st ? 0 : start_trainers(crowd, -1, pids);
  if (busy == crowd) st = measure_step(ctx, &crowded);
  stop_neighbours(pids, busy);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double memory = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
  /* flops.f32 the 1024^3 sgemm's rate (raised if the step's GEMMs beat
   * it), the efficiencies, bandwidth and launch fitted to the step */
  loom_cluster_this_machine(&m, one, half_dim(one, small), memory, out);
  if (!st) st = fit_step(ctx, &sm, out);
  if (!st && crowded.wall_s > 0 && sm.wall_s > 0)
    out->shared_efficiency = fmin(1, fmax(0.2, 2 * sm.wall_s / crowded.wall_s));
  loom_graph_free(sm.g);
  loom_graph_free(crowded.g);
  LOOM_TRY(st);
  out->wait_share = waiting;
  out->wait_period_s = turns.poll_period_s;
  out->wait_turn_s = turns.turn_s;
  return LOOM_STATUS_OK;
}

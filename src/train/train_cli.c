#include "train/train_cli.h"

#include "core/file.h"
#include "core/clock.h"
#include "core/sha256.h"

#include "comm/comm.h"
#include "parallel/builtin.h"
#include "runtime/backend.h"
#include "train/checkpoint.h"
#include "train/report.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* A --help line per mode, from the mode's list in loom.h. */
#define HELP_MODE(ENUM, name, help) "                    " #name ": " help "\n"

static const char usage[] =
    "usage: loom train [flags]\n"
    "\n"
    "Trains a small GPT on arithmetic problems that Loom generates from the\n"
    "seed, sums and differences of two 2-digit numbers with the answer written\n"
    "ones digit first (\"47+38=580\" is 47 + 38 = 85), printing the loss as it\n"
    "goes, then a greedy sample, the exact-match accuracy on held-out problems\n"
    "and what the model learned. The same seed gives the same losses bit for bit.\n"
    "\n"
    "model:\n"
    "  --layers N        transformer blocks (default 2, 1..64)\n"
    "  --d-model N       width (default 128, 1..4096; the MLP is 4x)\n"
    "  --heads N         attention heads, must divide --d-model (default 4)\n"
    "  --arch A          gpt (default: LayerNorm, GELU, learned positions, biases,\n"
    "                    head tied to the embedding) or llama (RMSNorm, SwiGLU,\n"
    "                    RoPE, no biases, a head of its own)\n"
    "  --kv-heads N      key/value heads: grouped-query attention, each shared by\n"
    "                    --heads / N query heads; must divide --heads\n"
    "                    (default: --heads)\n"
    "  --context N       sequence length (default 32, 2..4096)\n"
    "  --dropout P       attention and residual dropout (default 0, [0, 1))\n"
    "training:\n"
    "  --batch N         sequences per step (default 32, 1..4096)\n"
    "  --steps N         steps of the schedule (default 3000)\n"
    "  --lr X            peak learning rate, warmup then cosine (default 0.003)\n"
    "  --seed N          corpus, init, batches and dropout (default 1)\n"
    "  --stop-at K       stop after step K; the schedule still spans --steps\n"
    "  --log-every N     a progress line every N steps (default 100)\n"
    "  --eval-every N    held-out accuracy every N steps too (default 500; 0: at the end only)\n"
    "running:\n"
    "  --backend B       one of" LOOM_BACKEND_HELP_NAMES " (default " LOOM_BACKEND_DEFAULT ")\n"
    "  --fusion M        how the cpu backend makes code:\n" LOOM_FUSION_MODE_LIST(HELP_MODE, )
    "  --threads N       CPU threads, 0 = all cores (default 0)\n"
    "  --attention A     what the cpu backend makes of attention (default here:\n"
    "                    auto, which picks flash for the default GPT):\n"
    LOOM_ATTENTION_MODE_LIST(HELP_MODE, )
    "  --rng P           where attention dropout's random numbers come from\n"
    "                    (the same masks, so the same losses, each way):\n"
    LOOM_RNG_PLACEMENT_LIST(HELP_MODE, )
    "  --trace FILE      write a timeline of steps 2-4 (Chrome trace JSON:\n"
    "                    chrome://tracing, ui.perfetto.dev): kernels, GEMMs and\n"
    "                    overlapped RNG tasks on their own lane\n"
    "                    (under --plan each rank its own: rank R > 0 writes FILE\n"
    "                    with .rankR before its extension, t.json -> t.rank1.json)\n"
    "  --force           overwrite the --trace file if it exists\n"
    "parallel (docs/PARALLEL.md):\n"
    "  --plan P          run the step as plan P over MPI, one process per device:\n"
    "                    mpirun -np N loom train --plan P; P is a plan file\n"
    "                    (`loom plan gpt ... --save-plan` writes one) or a built-in:\n"
    "%s"
    "  --comm-overlap on|off  on (default): comm ops run on a comm stream while\n"
    "                    the compute after them runs; off: each blocks the step\n"
    "  --bucket-bytes N  gradient all-reduces coalesced into buckets of at most N\n"
    "                    bytes per device (default 0: one all-reduce per gradient)\n"
    "checkpoints (safetensors):\n"
    "  --save FILE       save parameters, AdamW state and config at the end\n"
    "                    (under --plan: gathered, one file, by rank 0)\n"
    "  --load FILE       resume from FILE; its model and schedule are used\n"
    "                    unless given again (model flags must then match)\n"
    "  -h, --help        print this help\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong arguments.\n";

typedef struct cli {
  loom_train_config cfg;
  int64_t log_every, eval_every, stop_at;
  const char *save, *load;
  loom_fusion_mode fusion;
  const char *trace;  /* NULL: none; this rank's file (rank_trace) */
  char rank_trace[4096];
  const char *plan;   /* NULL: one device */
  bool comm_overlap;  /* --comm-overlap */
  int64_t bucket_bytes; /* --bucket-bytes (0: none) */
  bool force;
  int32_t rank; /* this process's rank under --plan, else 0 */
  /* which flags were given, so --load knows what to keep */
  bool g_layers, g_dmodel, g_heads, g_context, g_dropout, g_batch, g_steps, g_lr, g_seed;
  bool g_arch, g_kvheads;
} cli;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loom train: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: loom train [flags]  (see 'loom train --help')\n");
  return EXIT_USAGE;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end || errno || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool parse_f64(const char *s, double *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  double v = strtod(s, &end);
  if (*end || !isfinite(v)) return false;
  *out = v;
  return true;
}

/* Parses argv into c; returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, cli *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf(usage, loom_plan_builtin_help());
      return 0;
    }
    if (strncmp(a, "--", 2) != 0) return usage_error("unexpected argument '%s'", a);
    /* --flag=value or --flag value */
    char name[32];
    const char *eq = strchr(a, '='), *val;
    size_t nl = eq ? (size_t)(eq - a) : strlen(a);
    if (nl >= sizeof name) return usage_error("unknown flag '%s'", a);
    memcpy(name, a, nl);
    name[nl] = '\0';
    if (!strcmp(name, "--force") && !eq) {
      c->force = true;
      continue;
    }
    if (eq) {
      val = eq + 1;
    } else {
      if (i + 1 >= argc) return usage_error("%s needs a value", name);
      val = argv[++i];
    }
    int64_t iv = 0;
    double fv = 0.0;
#define INT_FLAG(flag, lo, hi, dst, given)                                                         \
  if (!strcmp(name, flag)) {                                                                       \
    if (!parse_i64(val, lo, hi, &iv))                                                              \
      return usage_error("%s wants an integer in [%lld, %lld], got '%s'", flag, (long long)(lo),   \
                         (long long)(hi), val);                                                    \
    dst = iv;                                                                                      \
    given;                                                                                         \
    continue;                                                                                      \
  }
    INT_FLAG("--layers", 1, 64, c->cfg.model.n_layer, c->g_layers = true)
    INT_FLAG("--d-model", 1, 4096, c->cfg.model.d_model, c->g_dmodel = true)
    INT_FLAG("--heads", 1, 4096, c->cfg.model.n_head, c->g_heads = true)
    INT_FLAG("--kv-heads", 1, 4096, c->cfg.model.n_kv_head, c->g_kvheads = true)
    INT_FLAG("--context", 2, 4096, c->cfg.model.context, c->g_context = true)
    INT_FLAG("--batch", 1, 4096, c->cfg.batch, c->g_batch = true)
    INT_FLAG("--steps", 1, 1 << 24, c->cfg.steps, c->g_steps = true)
    INT_FLAG("--stop-at", 1, 1 << 24, c->stop_at, (void)0)
    INT_FLAG("--log-every", 1, 1 << 24, c->log_every, (void)0)
    INT_FLAG("--eval-every", 0, 1 << 24, c->eval_every, (void)0)
    INT_FLAG("--threads", 0, 4096, c->cfg.threads, (void)0)
    INT_FLAG("--bucket-bytes", 0, (int64_t)1 << 40, c->bucket_bytes, (void)0)
#undef INT_FLAG
    if (!strcmp(name, "--seed")) {
      char *end = NULL;
      errno = 0;
      unsigned long long s = strtoull(val, &end, 10);
      if (!*val || *val == '-' || *val == '+' || *end || errno)
        return usage_error("--seed wants a non-negative integer, got '%s'", val);
      c->cfg.seed = s;
      c->g_seed = true;
    } else if (!strcmp(name, "--lr")) {
      if (!parse_f64(val, &fv) || !(fv > 0.0 && fv <= 10.0))
        return usage_error("--lr wants a number in (0, 10], got '%s'", val);
      c->cfg.lr = fv;
      c->g_lr = true;
    } else if (!strcmp(name, "--dropout")) {
      if (!parse_f64(val, &fv) || !(fv >= 0.0 && fv < 1.0))
        return usage_error("--dropout wants a number in [0, 1), got '%s'", val);
      c->cfg.model.dropout = fv;
      c->g_dropout = true;
    } else if (!strcmp(name, "--arch")) {
      loom_gpt_arch arch;
      if (!loom_gpt_arch_from_name(val, &arch))
        return usage_error("--arch wants gpt or llama, got '%s'", val);
      loom_gpt_config_set_arch(&c->cfg.model, arch);
      c->g_arch = true;
    } else if (!strcmp(name, "--backend")) {
      if (!loom_backend_name_known(val))
        return usage_error("--backend wants one of %s, got '%s'", loom_backend_names(), val);
      snprintf(c->cfg.backend, sizeof c->cfg.backend, "%s", val);
    } else if (!strcmp(name, "--fusion")) {
      if (loom_fusion_mode_from_name(val, &c->fusion))
        return usage_error("--fusion wants one of " LOOM_FUSION_MODE_NAMES ", got '%s'", val);
    } else if (!strcmp(name, "--attention")) {
      if (loom_attention_mode_from_name(val, &c->cfg.attention))
        return usage_error("--attention wants one of " LOOM_ATTENTION_MODE_NAMES ", got '%s'", val);
    } else if (!strcmp(name, "--rng")) {
      if (loom_rng_placement_from_name(val, &c->cfg.rng))
        return usage_error("--rng wants one of " LOOM_RNG_PLACEMENT_NAMES ", got '%s'", val);
    } else if (!strcmp(name, "--plan")) {
      if (!*val) return usage_error("--plan wants a plan file or a built-in plan (see --help)");
      c->plan = val;
    } else if (!strcmp(name, "--comm-overlap")) {
      if (strcmp(val, "on") && strcmp(val, "off"))
        return usage_error("--comm-overlap wants on or off, got '%s'", val);
      c->comm_overlap = !strcmp(val, "on");
    } else if (!strcmp(name, "--trace")) {
      if (!*val) return usage_error("--trace wants a file name");
      c->trace = val;
    } else if (!strcmp(name, "--save") || !strcmp(name, "--load")) {
      if (!*val) return usage_error("%s wants a file name", name);
      if (name[2] == 's')
        c->save = val;
      else
        c->load = val;
    } else {
      return usage_error("unknown flag '%s'", name);
    }
  }
  loom_gpt_config *m = &c->cfg.model;
  if (m->n_head > m->d_model || m->d_model % m->n_head)
    return usage_error("--heads %d does not divide --d-model %d", m->n_head, m->d_model);
  if (m->n_kv_head && m->n_head % m->n_kv_head)
    return usage_error("--kv-heads %d does not divide --heads %d", m->n_kv_head, m->n_head);
  if (m->position == LOOM_GPT_POS_ROPE && (m->d_model / m->n_head) % 2)
    return usage_error("--arch llama rotates pairs of a head's dims (RoPE): the head width "
                       "--d-model / --heads = %d must be even",
                       m->d_model / m->n_head);
  m->d_ff = 4 * m->d_model;
  if (c->stop_at > c->cfg.steps && !c->load)
    return usage_error("--stop-at %lld is past --steps %lld", (long long)c->stop_at,
                       (long long)c->cfg.steps);
  return -1;
}

static int fail(loom_ctx *ctx, const char *what) {
  fprintf(stderr, "loom train: %s%s%s\n", what ? what : "", what ? ": " : "", loom_ctx_error(ctx));
  return EXIT_FAIL;
}

/* Every output is checked before training starts, so a run is not lost at
 * its end: -1 to go on, else the exit code. --save replaces a checkpoint
 * (runs save over their own); --trace does only with --force. Under --plan
 * rank 0 alone writes the checkpoint and each rank its own trace, so only
 * those paths need to be writable on each (other ranks may run where the
 * checkpoint's directory does not exist). */
static int check_outputs(loom_ctx *ctx, const cli *c) {
  if (c->rank != 0) {
    if (c->trace && loom_file_check_output(ctx, c->trace,
                                           LOOM_FILE_HINT_FORCE | (c->force ? LOOM_FILE_REPLACE : 0)))
      return fail(ctx, "--trace");
    return -1;
  }
  if (c->save && loom_file_check_output(ctx, c->save, LOOM_FILE_REPLACE))
    return fail(ctx, "--save");
  if (c->trace && loom_file_check_output(ctx, c->trace,
                                         LOOM_FILE_HINT_FORCE | (c->force ? LOOM_FILE_REPLACE : 0)))
    return fail(ctx, "--trace");
  if (c->save && c->trace && loom_file_same(c->save, c->trace)) {
    fprintf(stderr, "loom train: --save and --trace name the same file (%s)\n", c->trace);
    return EXIT_FAIL;
  }
  if (c->load && c->trace && loom_file_same(c->load, c->trace)) {
    fprintf(stderr, "loom train: --trace %s would overwrite the --load checkpoint\n", c->trace);
    return EXIT_FAIL;
  }
  return -1;
}

/* Merges a checkpoint's configuration with the flags given. */
static int merge_checkpoint(const cli *c, loom_train_config *ck) {
  const loom_gpt_config *m = &c->cfg.model;
#define SAME(given, field, flag)                                                                   \
  if (given && m->field != ck->model.field) {                                                      \
    fprintf(stderr, "loom train: %s %d does not match the checkpoint's %d\n", flag, (int)m->field, \
            (int)ck->model.field);                                                                 \
    return EXIT_FAIL;                                                                              \
  }
  SAME(c->g_layers, n_layer, "--layers")
  SAME(c->g_dmodel, d_model, "--d-model")
  SAME(c->g_heads, n_head, "--heads")
  SAME(c->g_context, context, "--context")
#undef SAME
  loom_gpt_arch mine = loom_gpt_config_arch(m), theirs = loom_gpt_config_arch(&ck->model);
  if (c->g_arch && mine != theirs) {
    fprintf(stderr,
            "loom train: --arch %s does not match the checkpoint's architecture (%s); leave "
            "--arch out to resume it as it was\n",
            loom_gpt_arch_name(mine), loom_gpt_arch_name(theirs));
    return EXIT_FAIL;
  }
  if (c->g_kvheads && loom_gpt_kv_heads(m) != loom_gpt_kv_heads(&ck->model)) {
    fprintf(stderr, "loom train: --kv-heads %d does not match the checkpoint's %d\n",
            (int)loom_gpt_kv_heads(m), (int)loom_gpt_kv_heads(&ck->model));
    return EXIT_FAIL;
  }
  if (c->g_dropout) ck->model.dropout = m->dropout;
  if (c->g_batch) ck->batch = c->cfg.batch;
  if (c->g_steps) ck->steps = c->cfg.steps;
  if (c->g_lr) ck->lr = c->cfg.lr;
  if (c->g_seed) ck->seed = c->cfg.seed;
  ck->threads = c->cfg.threads;
  memcpy(ck->backend, c->cfg.backend, sizeof ck->backend);
  ck->attention = c->cfg.attention; /* how to run, not what */
  ck->rng = c->cfg.rng;
  return -1;
}

/* Under --plan every rank reads the --load file itself (each slices its
 * pieces from the whole tensors): they must have read the same bytes. The
 * setup digest (trainer.c) covers the step count, not the state, so the
 * ranks compare the checkpoint's data checksum here. */
static loom_status check_same_checkpoint(loom_ctx *ctx, loom_comm *comm,
                                         const loom_safetensors *st) {
  uint8_t mine[32] = {0};
  const char *sum = st ? loom_safetensors_meta(st, LOOM_SAFETENSORS_DIGEST_KEY) : NULL;
  if (st) loom_sha256(sum ? sum : "", sum ? strlen(sum) : 0, mine);
  uint8_t *all = loom_malloc(ctx, (size_t)comm->size * sizeof mine);
  if (!all) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status s = loom_comm_all_gather(comm, ctx, mine, all, sizeof mine, NULL, LOOM_DTYPE_U8);
  for (int32_t r = 1; !s && r < comm->size; r++)
    if (memcmp(all + r * sizeof mine, all, sizeof mine) != 0)
      s = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                     "--load: rank %d read another checkpoint than rank 0 (their data checksums "
                     "differ); give every rank the same file",
                     (int)r);
  free(all);
  return s;
}

/* Training, sample, accuracy, save. */
static int run(loom_ctx *ctx, cli *c, loom_trainer *t, int64_t end) {
  const loom_train_config *cfg = loom_trainer_config(t);
  int64_t start = loom_trainer_steps_done(t);
  printf("loom train: %s, %d layer%s, d_model %d, %d heads (%d kv), context %d, %lld params; "
         "batch %d, %lld steps, lr %g, dropout %g, seed %llu, backend %s, %d threads\n",
         loom_gpt_arch_name(loom_gpt_config_arch(&cfg->model)), cfg->model.n_layer,
         cfg->model.n_layer == 1 ? "" : "s", cfg->model.d_model, cfg->model.n_head,
         (int)loom_gpt_kv_heads(&cfg->model), cfg->model.context, (long long)loom_trainer_param_count(t), cfg->batch,
         (long long)cfg->steps, cfg->lr, cfg->model.dropout, (unsigned long long)cfg->seed,
         cfg->backend, (int)loom_ctx_threads(ctx));
  /* what the step's session is made of, and its memory */
  loom_session_stats ss;
  const loom_session *s = loom_trainer_session(t);
  if (loom_session_get_stats(s, &ss) == LOOM_STATUS_OK) {
    printf("step graph: %d primitive ops (%d memory-intensive); ", ss.n_primitive_ops,
           ss.n_memory_ops);
    if (ss.n_kernels > 0)
      printf("fusion %s: %d kernels, %d GEMMs, %d eager nodes; compiled in %.2fs%s; ",
             loom_fusion_mode_name(c->fusion), ss.n_kernels, ss.n_gemm, ss.n_eager,
             ss.compile_seconds, ss.cache_hit ? " (cache hit)" : "");
    else
      printf("%d nodes run one at a time; ", ss.n_eager + ss.n_gemm);
    printf("peak %.2f MiB\n", (double)ss.peak_bytes / (1024.0 * 1024.0));
  }
  loom_trainer_rng_counts rc = loom_trainer_rng_placements(t);
  if (rc.flash > 0 && cfg->model.dropout == 0.0)
    printf("attention: %d flash op%s; no dropout (--dropout 0)\n", rc.flash,
           rc.flash == 1 ? "" : "s");
  else if (rc.flash > 0)
    printf("attention: %d flash op%s; dropout RNG (--rng %s): %d fused, %d overlap, %d "
           "sequential\n",
           rc.flash, rc.flash == 1 ? "" : "s", loom_rng_placement_name(cfg->rng), rc.fused,
           rc.overlap, rc.sequential);
  else if (cfg->attention == LOOM_ATTENTION_FLASH)
    printf("attention: decomposed into primitives (the %s backend has no flash attention)\n",
           cfg->backend[0] ? cfg->backend : LOOM_BACKEND_DEFAULT);
  else
    printf("attention: decomposed into primitives (--attention %s)\n",
           loom_attention_mode_name(cfg->attention));
  if (s && loom_session_warning(s)[0])
    fprintf(stderr, "loom train: warning: %s\n", loom_session_warning(s));
  if (c->plan)
    printf("plan %s: %d processes, one device each (the step graph above is rank 0's); comm "
           "overlap %s\n",
           c->plan, (int)loom_trainer_devices(t), loom_trainer_comm_overlap(t) ? "on" : "off");
  if (start > 0) printf("resumed from %s at step %lld\n", c->load, (long long)start);
  fflush(stdout);
  double t0 = loom_now_s(), t_last = t0, eval_s = 0;
  int64_t last_logged = start;
  float loss = NAN, first = NAN;
  int64_t tok_per_step = (int64_t)cfg->batch * cfg->model.context;
  /* the timeline: steps 2-4 of this run (the first one warms up) */
  bool trace = c->trace != NULL;
  int64_t trace_from = start + 1, trace_to = LOOM_MIN(start + 4, end);
  for (int64_t k = start; k < end; k++) {
    if (trace && k == trace_from && loom_ctx_trace_begin(ctx)) return fail(ctx, "tracing");
    if (loom_trainer_step(t, &loss)) return fail(ctx, NULL);
    if (trace && k + 1 == trace_to && trace_from < trace_to) {
      if (loom_ctx_trace_end(ctx, c->trace)) return fail(ctx, NULL);
      printf("wrote the timeline of steps %lld-%lld to %s\n", (long long)trace_from + 1,
             (long long)trace_to, c->trace);
    }
    if (k == start) first = loss;
    int64_t done = k + 1;
    if (done == start + 1 || done % c->log_every == 0 || done == end) {
      double now = loom_now_s();
      double tps = (double)((done - last_logged) * tok_per_step) / LOOM_MAX(now - t_last, 1e-9);
      printf("step %6lld/%lld  loss %.4f  lr %.2e  %8.0f tok/s  %7.1fs\n", (long long)done,
             (long long)cfg->steps, (double)loss, loom_train_lr_at(cfg, k), tps, now - t0);
      fflush(stdout);
      t_last = now;
      last_logged = done;
    }
    if (c->eval_every > 0 && done % c->eval_every == 0 && done != end) {
      /* greedy answers only: the training state and its losses are untouched;
       * its time is left out of the tok/s figures */
      double e0 = loom_now_s();
      int32_t ok = 0, total = 0;
      if (loom_trainer_accuracy(t, &ok, &total)) return fail(ctx, "accuracy");
      printf("step %6lld/%lld  held-out accuracy %d/%d (%.0f%%)\n", (long long)done,
             (long long)cfg->steps, ok, total, 100.0 * ok / LOOM_MAX(total, 1));
      fflush(stdout);
      double e = loom_now_s() - e0;
      t_last += e;
      eval_s += e;
    }
  }
  double train_s = loom_now_s() - t0 - eval_s;
  if (end > start)
    printf("final loss %.4f (first %.4f) after step %lld: %.1fs, %.0f tok/s%s\n", (double)loss,
           (double)first, (long long)end, train_s,
           (double)((end - start) * tok_per_step) / LOOM_MAX(train_s, 1e-9),
           eval_s > 0 ? " (held-out evaluations not counted)" : "");
  else
    printf("nothing to train: the checkpoint is at step %lld of %lld\n", (long long)start,
           (long long)cfg->steps);

  /* one context's worth: past it the window slides off the line starts the
   * model was trained on */
  static const char prompt[] = "\n12+34=";
  int32_t n_sample = LOOM_MAX(1, LOOM_MIN(64, cfg->model.context - (int32_t)strlen(prompt)));
  char sample[160];
  if (loom_trainer_generate(t, prompt, n_sample, sample, sizeof sample))
    return fail(ctx, "sampling");
  printf("sample (greedy, prompt \"12+34=\"; the lines after it are the model's own):\n");
  /* indent each generated line; skip the prompt's leading newline and a
   * last line the context cut short. The model emits any byte: control
   * bytes are shown escaped. */
  char *last_nl = strrchr(sample + 1, '\n');
  if (last_nl) last_nl[1] = '\0';
  for (char *p = sample + 1; *p;) {
    char *nl = strchr(p, '\n'), shown[4 * sizeof sample];
    if (nl) *nl = '\0';
    printf("  %s\n", loom_escape(p, shown, sizeof shown));
    p = nl ? nl + 1 : p + strlen(p);
  }
  if (loom_train_report(t, stdout, NULL)) return fail(ctx, "accuracy");
  if (c->save) {
    if (loom_trainer_sync(t)) return fail(ctx, "gathering the state");
    /* one checkpoint, in the single-device layout, written by rank 0 */
    if (c->rank == 0 && loom_checkpoint_save(t, c->save)) return fail(ctx, "saving the checkpoint");
    printf("saved %s (step %lld)\n", c->save, (long long)loom_trainer_steps_done(t));
  }
  fflush(stdout);
  return 0;
}

int loom_train_main(int argc, char **argv) {
  cli c;
  memset(&c, 0, sizeof c);
  loom_train_config_default(&c.cfg);
  c.log_every = 100;
  c.eval_every = 500;
  c.comm_overlap = true;
  int rc = parse_args(argc, argv, &c);
  if (rc >= 0) return rc;

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) {
    fprintf(stderr, "loom train: out of memory\n");
    return EXIT_FAIL;
  }
  loom_safetensors *st = NULL;
  loom_trainer *t = NULL;
  loom_comm *comm = NULL;
  loom_train_config cfg = c.cfg;
  /* MPI first: from here a failing rank ends every rank (the abort below),
   * and only rank 0 checks what only it writes */
  if (c.plan) {
    const char *which = getenv("LOOM_COMM");
    bool nccl = which && strcmp(which, "nccl") == 0;
    if (nccl ? loom_comm_nccl_new(ctx, &comm) : loom_comm_mpi_new(ctx, &comm)) {
      rc = fail(ctx, "--plan");
      goto out;
    }
    c.rank = comm->rank;
    if (c.trace && c.rank > 0) {
      /* t.json -> t.rank1.json; a name without an extension gets .rankR */
      const char *slash = strrchr(c.trace, '/'), *dot = strrchr(c.trace, '.');
      int stem = dot && (!slash || dot > slash + 1) ? (int)(dot - c.trace) : (int)strlen(c.trace);
      int n = snprintf(c.rank_trace, sizeof c.rank_trace, "%.*s.rank%d%s", stem, c.trace,
                       (int)c.rank, c.trace + stem);
      if (n < 0 || (size_t)n >= sizeof c.rank_trace) {
        fprintf(stderr, "loom train: --trace: the path is too long\n");
        rc = EXIT_USAGE;
        goto out;
      }
      c.trace = c.rank_trace;
    }
    /* one rank speaks; errors still reach stderr from every rank */
    if (c.rank != 0 && !freopen("/dev/null", "w", stdout)) {
      rc = EXIT_FAIL;
      goto out;
    }
  }
  if ((rc = check_outputs(ctx, &c)) >= 0) goto out;
  if (c.load) {
    if (loom_checkpoint_read(ctx, c.load, &cfg, &st)) {
      rc = fail(ctx, NULL);
      goto out;
    }
    /* older checkpoints have no digest: they load, unverified */
    if (!loom_safetensors_meta(st, LOOM_SAFETENSORS_DIGEST_KEY))
      fprintf(stderr,
              "loom train: note: %s has no data checksum (saved by an older Loom); "
              "its content cannot be verified\n",
              c.load);
    if ((rc = merge_checkpoint(&c, &cfg)) >= 0) goto out;
  }
  if (loom_trainer_new_fused(ctx, &cfg, c.fusion, &t)) {
    rc = fail(ctx, NULL);
    goto out;
  }
  if (st && loom_checkpoint_restore(t, st)) {
    rc = fail(ctx, c.load);
    goto out;
  }
  if (comm) {
    if (check_same_checkpoint(ctx, comm, st)) {
      rc = fail(ctx, NULL);
      goto out;
    }
    loom_trainer_set_bucket_bytes(t, c.bucket_bytes);
    if (loom_trainer_attach_plan(t, comm, c.plan)) {
      rc = fail(ctx, NULL);
      if (comm->size == 1)
        fprintf(stderr, "loom train: --plan runs one process per device: start it with "
                        "mpirun -np N loom train --plan %s\n", c.plan);
      goto out;
    }
    loom_trainer_set_comm_overlap(t, c.comm_overlap);
  }
  loom_safetensors_free(st);
  st = NULL;
  int64_t end = cfg.steps;
  if (c.stop_at > 0) end = LOOM_MIN(end, c.stop_at);
  end = LOOM_MAX(end, loom_trainer_steps_done(t));
  rc = run(ctx, &c, t, end);
out:
  loom_safetensors_free(st);
  /* a failing rank ends every rank (MPI_Abort) rather than leave them waiting */
  if (comm && rc == EXIT_FAIL) {
    const char *why = loom_ctx_error(ctx);
    loom_comm_abort(comm, why && *why ? why : "its error is above");
  }
  loom_trainer_free(t);
  loom_comm_free(comm);
  loom_ctx_free(ctx);
  return rc;
}

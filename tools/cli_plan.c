/*
 * `loom plan MODEL --plan P --devices N`: reads or builds the model's
 * graph, opens the plan (a plan file or a built-in spec), lowers it
 * (parallel/lower.h, which validates it) and prints each device's program
 * as text IR and a table of what each device computes, sends and holds.
 * `--dot` draws the global graph with one cluster per device.
 * `loom plan gpt --search --devices N --cluster FILE` finds the fastest
 * plan instead (parallel/search.h) and can write it as a plan file.
 */

#include "loom.h"

#include "cli.h"
#include "core/file.h"
#include "core/strbuf.h"
#include "ir/graph.h"
#include "model/gpt.h"
#include "ops/op.h"
#include "parallel/lower.h"
#include "parallel/plan_text.h"
#include "parallel/search.h"
#include "parallel/simulate.h"
#include "perf/cluster.h"
#include "runtime/trace.h"
#include "runtime/backend.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --search rates plans without lowering them: clusters of any size */
#define SEARCH_MAX_DEVICES (1L << 20)

static const char usage[] =
    "usage: loom plan MODEL --plan P --devices N [--show DEVICE|all|none]\n"
    "                 [--memory-limit BYTES] [--dot FILE] [--save-plan FILE] [--force]\n"
    "                 [model flags]\n"
    "       loom plan gpt|NAME --search --devices N --cluster FILE [--memory-limit BYTES]\n"
    "                 [--top K] [--out FILE [--force]] [--precision P] [model flags]\n"
    "\n"
    "Lowers the parallel plan P over MODEL and prints every device's program\n"
    "(text IR, communication ops included) and a summary per device: FLOPs,\n"
    "bytes sent by each kind of communication, peak memory, bytes of graph\n"
    "inputs held, node and comm op counts, and the totals. A plan that does\n"
    "not hold together (a sub-op left unplaced, a piece made twice, an order\n"
    "across devices) fails with a message naming the sub-op.\n"
    "\n"
    "  MODEL                a text-IR file, or 'gpt': the training step of\n"
    "                       'loom train' (forward, gradients, AdamW), or a named\n"
    "                       full-size gpt configuration (its published shape and\n"
    "                       global batch; model flags given change it):\n"
    "                       gpt3-175b, llama2-70b, llama3-405b\n"
    "  --model NAME         the same as MODEL\n"
    "  --plan P             a plan file (docs/PARALLEL.md, \"Plan files\") or a\n"
    "                       built-in plan spec (dp2, dp2xtp2, ...)\n"
    "  --devices N          devices, 1..4096 (a plan file's must match)\n"
    "  --show WHAT          the programs to print: one device's number, all\n"
    "                       (the default) or none (the summary only)\n"
    "  --memory-limit B     fail when a device's peak would pass B bytes\n"
    "  --bucket-bytes N     coalesce gradient all-reduces into buckets of at most\n"
    "                       N bytes per device (default 0: none)\n"
    "  --dot FILE           write the global graph as Graphviz, one cluster\n"
    "                       per device, comm ops between them\n"
    "  --save-plan FILE     write the plan as a plan file (a built-in's too), to\n"
    "                       read back with --plan FILE or edit\n"
    "  --force              overwrite the --dot, --save-plan or --trace file if it exists\n"
    "  --cluster FILE       simulate one step on a cluster (docs/CLUSTER.md): step\n"
    "                       time, per-device compute, comm, idle and the bubble\n"
    "  --precision P        the rate GEMMs and attention run at: f32 (default),\n"
    "                       tf32, bf16 or fp8 (the cluster must give it)\n"
    "  --overlap            communication overlaps computation (else it blocks)\n"
    "  --trace FILE         write the simulated timeline as a Chrome trace\n"
    "  --oversubscribe      the N ranks time-share the cluster's devices, as\n"
    "                       'mpirun --oversubscribe' runs more ranks than cores\n"
    "  --search             find the fastest plan of the gpt model on N devices of\n"
    "                       the --cluster (docs/PLANNER.md): every dp x tp x pp,\n"
    "                       micro-batch, schedule, ZeRO stage, recomputation and\n"
    "                       tp placement, rated by the composed estimate (N up to\n"
    "                       1048576), the best re-ranked by the exact simulator\n"
    "                       where N <= 16 and N x layers <= 64; prints the winner\n"
    "                       and why the others lost; --memory-limit (default:\n"
    "                       the device's memory)\n"
    "  --top K              the alternatives to list (default 5)\n"
    "  --out FILE           with --search: write the winner as a plan file for\n"
    "                       'mpirun -np N loom train --plan FILE' (with --force:\n"
    "                       replace FILE)\n"
    "gpt model flags (as 'loom train'):\n"
    "  --layers N           transformer blocks (default 2, 1..1024)\n"
    "  --d-model N          width (default 128, 1..65536)\n"
    "  --heads N            attention heads, must divide --d-model (default 4)\n"
    "  --d-ff N             MLP hidden width (default 4 x --d-model)\n"
    "  --arch A             gpt (default: LayerNorm, GELU, learned positions,\n"
    "                       biases, tied head) or llama (RMSNorm, SwiGLU, RoPE,\n"
    "                       no biases, untied head)\n"
    "  --kv-heads N         key/value heads (grouped-query attention), dividing\n"
    "                       --heads (default: --heads)\n"
    "  --vocab N            vocabulary (default 256, 2..1048576)\n"
    "  --context N          sequence length (default 64, 2..65536)\n"
    "  --batch N            sequences per step (default 16, 1..65536)\n"
    "                       Planning needs shapes only: a model of any size is\n"
    "                       planned without allocating its parameters.\n"
    "  --dropout P          dropout (default 0.1, [0, 1))\n"
    "  --attention A        one of " LOOM_ATTENTION_MODE_NAMES " (default flash)\n"
    "  --rng P              where attention dropout's random numbers come from:\n"
    "                       fused, overlap or sequential (default fused; not auto,\n"
    "                       which measures the machine: a plan file names nodes,\n"
    "                       so the graph must come out the same every run)\n"
    "  -h, --help           print this help\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong arguments.\n";

/* The comm op kinds of the summary, in column order. */
static const char *const comm_kinds[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "all_to_all", "broadcast",  "transfer"};
#define N_KINDS ((int)(sizeof comm_kinds / sizeof comm_kinds[0]))

static int fail(loom_ctx *ctx) {
  char msg[LOOM_ERROR_MAX];
  const char *m = loom_ctx_error(ctx);
  if (!strncmp(m, "plan: ", 6)) m += 6; /* "loom plan: plan: ..." says it twice */
  fprintf(stderr, "loom plan: %s\n", loom_escape_message(m, msg, sizeof msg));
  return 1;
}

typedef struct plan_args {
  const char *model, *plan, *dot, *show, *save_plan;
  const char *cluster, *trace; /* simulate on a cluster; its timeline */
  loom_precision precision;
  bool overlap;
  bool oversubscribe; /* more ranks than the cluster's devices: they time-share them */
  int32_t cores;      /* with it: the cluster's devices before sharing */
  long devices;
  int64_t memory_limit;
  int64_t bucket_bytes; /* --bucket-bytes (0: none) */
  bool force;
  bool search;              /* --search: find the plan instead of lowering one */
  long top;
  const char *out;          /* --search: the winner's plan file */
  const char *devices_text; /* as given, for the range message */
  loom_train_config cfg; /* gpt: the model, batch and attention */
  const char *model_flag; /* the first gpt flag given, for "applies to gpt only" */
  uint32_t given;         /* the gpt flags given (GIVEN_*), kept over a named config */
  const char *arch;       /* --arch */
} plan_args;

/* gpt_int_flag's entries are bits 0..7; then: */
enum { GIVEN_DROPOUT = 1u << 16, GIVEN_ARCH = 1u << 17 };

/* loom_cli_parse_long into an int64_t (long is 64 bits here). */
static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  long v = 0;
  if (!loom_cli_parse_long(s, (long)lo, (long)hi, &v)) return false;
  *out = v;
  return true;
}

/* The gpt flags that take integers, and where they go. */
static int32_t *gpt_int_flag(plan_args *a, const char *name, int64_t *lo, int64_t *hi) {
  static const struct {
    const char *name;
    int64_t lo, hi;
  } flags[] = {{"--layers", 1, LOOM_GPT_MAX_LAYERS},   {"--d-model", 1, LOOM_GPT_MAX_WIDTH},
               {"--heads", 1, LOOM_GPT_MAX_WIDTH},     {"--context", 2, LOOM_GPT_MAX_CONTEXT},
               {"--batch", 1, 65536},                 {"--vocab", 2, LOOM_GPT_MAX_VOCAB},
               {"--d-ff", 1, LOOM_GPT_MAX_FF},         {"--kv-heads", 1, LOOM_GPT_MAX_WIDTH}};
  int32_t *dst[] = {&a->cfg.model.n_layer, &a->cfg.model.d_model, &a->cfg.model.n_head,
                    &a->cfg.model.context, &a->cfg.batch,       &a->cfg.model.vocab,
                    &a->cfg.model.d_ff,    &a->cfg.model.n_kv_head};
  for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
    if (!strcmp(name, flags[k].name)) {
      *lo = flags[k].lo;
      *hi = flags[k].hi;
      a->given |= 1u << k;
      return dst[k];
    }
  return NULL;
}

/* A named configuration as MODEL: its shape and batch, with the gpt flags
 * given on top. false: the name is not one. */
static bool apply_named(plan_args *a) {
  loom_gpt_config m;
  int32_t batch = 0;
  if (!loom_gpt_config_named(a->model, &m, &batch)) return false;
  loom_gpt_config *f = &a->cfg.model;
  int32_t *fields[] = {&m.n_layer, &m.d_model, &m.n_head, &m.context,
                       &batch,     &m.vocab,   &m.d_ff,   &m.n_kv_head};
  int32_t *flags[] = {&f->n_layer, &f->d_model, &f->n_head, &f->context,
                      &a->cfg.batch, &f->vocab, &f->d_ff,  &f->n_kv_head};
  for (int k = 0; k < 8; k++)
    if (a->given & (1u << k)) *fields[k] = *flags[k];
  if (a->given & GIVEN_DROPOUT) m.dropout = f->dropout;
  if (a->given & GIVEN_ARCH) {
    m.norm = f->norm, m.mlp = f->mlp, m.position = f->position;
    m.no_bias = f->no_bias, m.untied = f->untied;
  }
  if ((a->given & (1u << 1)) && !(a->given & (1u << 6))) m.d_ff = 0; /* 4 x a new --d-model */
  *f = m;
  a->cfg.batch = batch;
  return true;
}

/* Parses argv; -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, plan_args *a) {
  loom_train_config_default(&a->cfg);
  a->cfg.model.d_ff = 0; /* 4 x d_model unless --d-ff */
  /* the GPT `loom train` trained before its defaults were tuned for the
   * arithmetic (docs/CLI.md): dropout on, so plans place its RNG */
  a->cfg.model.dropout = 0.1;
  a->cfg.model.context = 64;
  a->cfg.batch = 16;
  a->cfg.rng = LOOM_RNG_FUSED; /* the same graph every run (auto measures) */
  a->devices = -1;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    if (loom_cli_is_help(arg)) {
      fputs(usage, stdout);
      return 0;
    }
    if (!strcmp(arg, "--force")) {
      a->force = true;
      continue;
    }
    if (!strcmp(arg, "--overlap")) {
      a->overlap = true;
      continue;
    }
    if (!strcmp(arg, "--search")) {
      a->search = true;
      continue;
    }
    if (!strcmp(arg, "--oversubscribe")) {
      a->oversubscribe = true;
      continue;
    }
    if (arg[0] != '-' || !arg[1]) {
      if (a->model) return loom_cli_usage_error("loom plan", usage, "unexpected argument '%s'", arg);
      a->model = arg;
      continue;
    }
    /* every other flag takes a value: --flag VALUE or --flag=VALUE */
    char name[32];
    const char *eq = strchr(arg, '=');
    size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
    if (strncmp(arg, "--", 2) != 0 || nl >= sizeof name)
      return loom_cli_usage_error("loom plan", usage, "unknown flag '%s' for 'plan'", arg);
    memcpy(name, arg, nl);
    name[nl] = '\0';
    int64_t lo = 0, hi = 0, iv = 0;
    int32_t *gpt_dst = gpt_int_flag(a, name, &lo, &hi);
    bool known = gpt_dst || !strcmp(name, "--plan") || !strcmp(name, "--devices") ||
                 !strcmp(name, "--model") || !strcmp(name, "--arch") ||
                 !strcmp(name, "--show") || !strcmp(name, "--memory-limit") ||
                 !strcmp(name, "--bucket-bytes") ||
                 !strcmp(name, "--dot") || !strcmp(name, "--dropout") ||
                 !strcmp(name, "--save-plan") || !strcmp(name, "--rng") ||
                 !strcmp(name, "--attention") || !strcmp(name, "--cluster") ||
                 !strcmp(name, "--trace") || !strcmp(name, "--precision") ||
                 !strcmp(name, "--top") || !strcmp(name, "--out");
    if (!known) return loom_cli_usage_error("loom plan", usage, "unknown flag '%s' for 'plan'", name);
    if (loom_cli_flag_value(argc, argv, &i, name, &v) < 0)
      return loom_cli_usage_error("loom plan", usage, "%s needs a value", name);
    if (gpt_dst) {
      if (!parse_i64(v, lo, hi, &iv))
        return loom_cli_usage_error("loom plan", usage, "%s wants an integer in [%lld, %lld], got '%s'", name, (long long)lo,
                           (long long)hi, v);
      *gpt_dst = (int32_t)iv;
      if (!a->model_flag) a->model_flag = arg;
    } else if (!strcmp(name, "--model")) {
      if (a->model) return loom_cli_usage_error("loom plan", usage, "--model %s: the model is already %s", v, a->model);
      loom_gpt_config m;
      if (!loom_gpt_config_named(v, &m, NULL))
        return loom_cli_usage_error("loom plan", usage, "--model wants one of %s, got '%s'", loom_gpt_config_names(), v);
      a->model = v;
    } else if (!strcmp(name, "--arch")) {
      loom_gpt_arch arch;
      if (!loom_gpt_arch_from_name(v, &arch))
        return loom_cli_usage_error("loom plan", usage, "--arch wants gpt or llama, got '%s'", v);
      loom_gpt_config_set_arch(&a->cfg.model, arch);
      a->given |= GIVEN_ARCH;
      if (!a->model_flag) a->model_flag = arg;
    } else if (!strcmp(name, "--plan")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--plan wants a plan file or a built-in spec");
      a->plan = v;
    } else if (!strcmp(name, "--devices")) {
      /* the range is checked below: --search plans far more devices */
      a->devices_text = v;
      if (!loom_cli_parse_long(v, 1, SEARCH_MAX_DEVICES, &a->devices)) a->devices = 0;
    } else if (!strcmp(name, "--top")) {
      if (!loom_cli_parse_long(v, 1, 1000, &a->top))
        return loom_cli_usage_error("loom plan", usage, "--top wants a number in [1, 1000], got '%s'", v);
    } else if (!strcmp(name, "--out")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--out wants a file name");
      a->out = v;
    } else if (!strcmp(name, "--show")) {
      a->show = v;
    } else if (!strcmp(name, "--memory-limit")) {
      if (!parse_i64(v, 0, INT64_MAX, &a->memory_limit))
        return loom_cli_usage_error("loom plan", usage, "--memory-limit wants a byte count, got '%s'", v);
    } else if (!strcmp(name, "--bucket-bytes")) {
      if (!parse_i64(v, 0, INT64_MAX, &a->bucket_bytes))
        return loom_cli_usage_error("loom plan", usage, "--bucket-bytes wants a byte count, got '%s'", v);
    } else if (!strcmp(name, "--dot")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--dot wants a file name");
      a->dot = v;
    } else if (!strcmp(name, "--cluster")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--cluster wants a cluster file");
      a->cluster = v;
    } else if (!strcmp(name, "--trace")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--trace wants a file name");
      a->trace = v;
    } else if (!strcmp(name, "--precision")) {
      int32_t p = 0;
      while (p < LOOM_PRECISION_COUNT && strcmp(v, loom_precision_name((loom_precision)p))) p++;
      if (p == LOOM_PRECISION_COUNT)
        return loom_cli_usage_error("loom plan", usage, "--precision wants f32, tf32, bf16 or fp8, got '%s'", v);
      a->precision = (loom_precision)p;
    } else if (!strcmp(name, "--save-plan")) {
      if (!*v) return loom_cli_usage_error("loom plan", usage, "--save-plan wants a file name");
      a->save_plan = v;
    } else if (!strcmp(name, "--dropout")) {
      char *end = NULL;
      double p = strtod(v, &end);
      if (!*v || *end || !(p >= 0.0 && p < 1.0))
        return loom_cli_usage_error("loom plan", usage, "--dropout wants a number in [0, 1), got '%s'", v);
      a->cfg.model.dropout = p;
      a->given |= GIVEN_DROPOUT;
      if (!a->model_flag) a->model_flag = arg;
    } else if (!strcmp(name, "--rng")) {
      if (loom_rng_placement_from_name(v, &a->cfg.rng) || a->cfg.rng == LOOM_RNG_AUTO)
        return loom_cli_usage_error("loom plan", usage, "--rng wants fused, overlap or sequential, got '%s'", v);
      if (!a->model_flag) a->model_flag = arg;
    } else {
      if (loom_attention_mode_from_name(v, &a->cfg.attention))
        return loom_cli_usage_error("loom plan", usage, "--attention wants one of " LOOM_ATTENTION_MODE_NAMES ", got '%s'", v);
      if (!a->model_flag) a->model_flag = arg;
    }
  }
  if (!a->model)
    return loom_cli_usage_error("loom plan", usage, "plan needs a MODEL (a text-IR file, gpt, or one of %s)",
                       loom_gpt_config_names());
  if (a->search && a->plan) return loom_cli_usage_error("loom plan", usage, "--search finds the plan: it goes without --plan");
  if (!a->plan && !a->search) return loom_cli_usage_error("loom plan", usage, "plan needs --plan P (or --search)");
  if (a->devices < 0) return loom_cli_usage_error("loom plan", usage, "plan needs --devices N");
  long most = a->search ? SEARCH_MAX_DEVICES : LOOM_PLAN_MAX_DEVICES;
  if (a->devices < 1 || a->devices > most)
    return loom_cli_usage_error("loom plan", usage, "--devices wants a number in [1, %ld], got '%s'", most, a->devices_text);
  bool gpt = strcmp(a->model, "gpt") == 0 || apply_named(a);
  if (a->search) {
    if (!gpt) return loom_cli_usage_error("loom plan", usage, "--search plans the gpt model only");
    if (!a->cluster) return loom_cli_usage_error("loom plan", usage, "--search needs --cluster FILE: the plans are rated on it");
    if (a->show || a->dot || a->save_plan || a->trace)
      return loom_cli_usage_error("loom plan", usage, "--show, --dot, --save-plan and --trace go with --plan, not --search");
  } else if (a->out || a->top) {
    return loom_cli_usage_error("loom plan", usage, "--out and --top go with --search");
  }
  if (!gpt && a->model_flag)
    return loom_cli_usage_error("loom plan", usage, "%s applies to the gpt model only", a->model_flag);
  loom_gpt_config *g = &a->cfg.model;
  if (gpt && (g->n_head > g->d_model || g->d_model % g->n_head))
    return loom_cli_usage_error("loom plan", usage, "--heads %d does not divide --d-model %d", g->n_head, g->d_model);
  if (gpt && g->n_kv_head && g->n_head % g->n_kv_head)
    return loom_cli_usage_error("loom plan", usage, "--kv-heads %d does not divide --heads %d", g->n_kv_head, g->n_head);
  if (!g->d_ff) g->d_ff = 4 * g->d_model;
  if ((a->trace || a->overlap || a->precision || a->oversubscribe) && !a->cluster)
    return loom_cli_usage_error("loom plan", usage, "--trace, --overlap, --oversubscribe and --precision go with --cluster");
  if (a->show && strcmp(a->show, "all") && strcmp(a->show, "none")) {
    long d = 0;
    if (!loom_cli_parse_long(a->show, 0, a->devices - 1, &d))
      return loom_cli_usage_error("loom plan", usage, "--show wants a device in [0, %ld], all or none, got '%s'",
                         a->devices - 1, a->show);
  }
  return -1;
}

/* The model's graph: a text-IR file, or the gpt training step. */
static loom_status load_model(loom_ctx *ctx, const plan_args *a, loom_graph **g) {
  loom_gpt_config named;
  if (strcmp(a->model, "gpt") != 0 && !loom_gpt_config_named(a->model, &named, NULL))
    return loom_graph_load(ctx, a->model, g);
  const loom_train_config *c = &a->cfg;
  LOOM_TRY(loom_gpt_config_check(ctx, &c->model));
  /* as the trainer builds it: the default backend's rewrite runs first */
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = LOOM_BACKEND_DEFAULT,
                                                 .attention = c->attention, .rng = c->rng);
  loom_gpt_optim o = {c->beta1, c->beta2, c->eps, c->weight_decay, c->seed, &so};
  int64_t rng_per_step = 0;
  return loom_gpt_build_train(ctx, &c->model, c->batch, c->model.context, &o, g, &rng_per_step);
}

/* ---- printing ------------------------------------------------------------ */

static loom_status print_device(loom_ctx *ctx, const loom_plan_program *pp, int32_t d) {
  loom_graph *dg = NULL;
  char *text = NULL;
  loom_status st = loom_plan_device_graph(pp, d, &dg, NULL, NULL);
  if (!st) st = loom_graph_print(dg, &text);
  if (!st) {
    printf("== device %d ==\n%s", d, text);
    if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
    putchar('\n');
  } else {
    loom_error_prefix(ctx, "device %d's program", d);
  }
  loom_free(text);
  loom_graph_free(dg);
  return st;
}

static void print_summary(const loom_plan_program *pp) {
  loom_op kind_op[N_KINDS];
  bool have[N_KINDS];
  for (int k = 0; k < N_KINDS; k++) have[k] = loom_op_from_name(comm_kinds[k], &kind_op[k]) == 0;
  printf("%-8s %16s", "device", "flops");
  for (int k = 0; k < N_KINDS; k++) printf(" %14s", comm_kinds[k]);
  printf(" %14s %14s %7s %6s\n", "peak_bytes", "input_bytes", "nodes", "comms");
  double flops = 0;
  int64_t bytes[N_KINDS] = {0}, peak = 0, input = 0;
  int64_t nodes = 0;
  for (int32_t d = 0; d < pp->n_devices; d++) {
    const loom_plan_device_stats *s = &pp->stats[d];
    printf("%-8d %16.0f", d, s->flops);
    for (int k = 0; k < N_KINDS; k++) {
      int64_t b = have[k] ? s->comm_bytes[kind_op[k]] : 0;
      bytes[k] += b;
      printf(" %14lld", (long long)b);
    }
    printf(" %14lld %14lld %7d %6d\n", (long long)s->peak_bytes, (long long)s->input_bytes,
           s->n_nodes, s->n_comms);
    flops += s->flops;
    peak = s->peak_bytes > peak ? s->peak_bytes : peak;
    input += s->input_bytes;
    nodes += s->n_nodes;
  }
  printf("%-8s %16.0f", "total", flops);
  for (int k = 0; k < N_KINDS; k++) printf(" %14lld", (long long)bytes[k]);
  printf(" %14lld %14lld %7lld %6d\n", (long long)peak, (long long)input, (long long)nodes,
         pp->n_comms);
  printf("(total: sums over the devices, except peak_bytes, the largest, and comms, the\n"
         " comm ops of the plan, each counted once though every member runs it)\n");
}

static void dot_node(loom_strbuf *b, const loom_plan_program *pp, int32_t i, const char *indent) {
  const loom_node *n = &pp->global->nodes[i];
  const loom_op_def *d = loom_op_get(n->op);
  bool comm = false;
  for (int k = 0; k < N_KINDS && pp->node_device[i] < 0; k++) comm |= !strcmp(d->name, comm_kinds[k]);
  loom_strbuf_put(b, "%sn%d [label=\"%s.%d\"%s];\n", indent, i, d->name, i,
                  comm ? ", shape=box, style=filled, fillcolor=\"#ffd27f\"" : "");
}

static loom_status write_dot(loom_ctx *ctx, const loom_plan_program *pp, const char *path,
                             bool force) {
  const loom_graph *G = pp->global;
  loom_strbuf b = {0};
  loom_strbuf_put(&b, "digraph plan {\n  rankdir=TB;\n  node [shape=ellipse, fontsize=10];\n");
  for (int32_t d = 0; d < pp->n_devices; d++) {
    loom_strbuf_put(&b, "  subgraph cluster_%d {\n    label=\"device %d\";\n", d, d);
    for (int32_t v = 0; v < G->n_values; v++)
      if (G->values[v].kind != LOOM_VALUE_NODE && pp->value_device[v] == d) {
        loom_strbuf_put(&b, "    v%d [shape=note, label=\"", v);
        loom_strbuf_put_dot_label(&b, G->values[v].name);
        loom_strbuf_put(&b, "\"];\n");
      }
    for (int32_t i = 0; i < G->n_nodes; i++)
      if (pp->node_device[i] == d) dot_node(&b, pp, i, "    ");
    loom_strbuf_put(&b, "  }\n");
  }
  /* comm ops and the host's assembly of outputs sit between the clusters */
  for (int32_t v = 0; v < G->n_values; v++)
    if (G->values[v].kind != LOOM_VALUE_NODE &&
        (pp->value_device[v] < 0 || pp->value_device[v] >= pp->n_devices)) {
      loom_strbuf_put(&b, "  v%d [shape=note, label=\"", v);
      loom_strbuf_put_dot_label(&b, G->values[v].name);
      loom_strbuf_put(&b, "\"];\n");
    }
  for (int32_t i = 0; i < G->n_nodes; i++)
    if (pp->node_device[i] < 0 || pp->node_device[i] >= pp->n_devices) dot_node(&b, pp, i, "  ");
  for (int32_t i = 0; i < G->n_nodes; i++) {
    const loom_node *n = &G->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) {
      int32_t v = n->in[k], src = G->values[v].node;
      if (src >= 0) loom_strbuf_put(&b, "  n%d -> n%d;\n", src, i);
      else loom_strbuf_put(&b, "  v%d -> n%d;\n", v, i);
    }
  }
  for (int32_t o = 0; o < G->n_outputs; o++) {
    loom_strbuf_put(&b, "  out%d [shape=plaintext, label=\"", o);
    loom_strbuf_put_dot_label(&b, G->output_names[o]);
    int32_t v = G->outputs[o], src = G->values[v].node;
    loom_strbuf_put(&b, "\"];\n  %s%d -> out%d;\n", src >= 0 ? "n" : "v", src >= 0 ? src : v, o);
  }
  loom_strbuf_put(&b, "}\n");
  bool oom = b.oom;
  char *text = loom_strbuf_take(&b);
  if (oom || !text) {
    free(text);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "--dot: out of memory");
  }
  loom_status st = loom_file_write_atomic(ctx, path, text, strlen(text),
                                          LOOM_FILE_HINT_FORCE | (force ? LOOM_FILE_REPLACE : 0));
  free(text);
  return st;
}

static loom_status save_plan(loom_ctx *ctx, const loom_plan *p, const char *path, unsigned flags) {
  loom_strbuf b = {0};
  LOOM_TRY(loom_plan_write(p, &b));
  bool oom = b.oom;
  char *text = loom_strbuf_take(&b);
  if (oom || !text) {
    free(text);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "--save-plan: out of memory");
  }
  loom_status st = loom_file_write_atomic(ctx, path, text, strlen(text), flags);
  free(text);
  return st;
}

/* The simulated step on the cluster: a table per device, and the
 * timeline as a Chrome trace (lanes 2d: device d's compute, 2d + 1: its
 * communication). */
static loom_status simulate(loom_ctx *ctx, const plan_args *a, const loom_plan_program *pp,
                            const loom_cluster *c) {
  loom_sim_options so = {.cluster = c, .precision = a->precision, .overlap = a->overlap,
                         .cores = a->oversubscribe ? a->cores : 0};
  loom_sim_result r;
  LOOM_TRY(loom_plan_simulate(pp, &so, &r));
  printf("\nsimulated on %s (%s GEMMs, communication %s): step %.3f ms, bubble %.1f%%\n",
         c->name, loom_precision_name(a->precision), a->overlap ? "overlapped" : "blocking",
         r.step_s * 1e3, 100.0 * r.bubble);
  printf("%-8s %12s %12s %12s %10s   %s\n", "device", "compute_ms", "comm_ms", "idle_ms",
         "peak_GB",
         "held: params optimizer inputs; arena at the peak: updates grads comm activations (GB)");
  for (int32_t d = 0; d < r.n_devices; d++) {
    const loom_sim_device *dv = &r.devices[d];
    const loom_sim_memory *m = &dv->at_peak;
    printf("%-8d %12.3f %12.3f %12.3f %10.3f   %.3f %.3f %.3f; %.3f %.3f %.3f %.3f\n", d,
           dv->compute_s * 1e3, dv->comm_s * 1e3, dv->idle_s * 1e3, (double)dv->peak_bytes / 1e9,
           m->params / 1e9, m->optimizer / 1e9, m->inputs / 1e9, m->updates / 1e9, m->grads / 1e9,
           m->comm_buffers / 1e9, m->activations / 1e9);
  }
  int64_t over = 0;
  for (int32_t d = 0; d < r.n_devices; d++) over += (double)r.devices[d].peak_bytes > c->memory_bytes;
  if (over)
    printf("(%lld devices need more than the %.1f GB a %s holds)\n", (long long)over,
           c->memory_bytes / 1e9, c->device);
  loom_status st = LOOM_STATUS_OK;
  if (a->trace) {
    loom_trace *t = NULL;
    st = loom_trace_new(ctx, &t);
    double t0 = loom_trace_now(t);
    char lane[48];
    for (int32_t d = 0; !st && d < r.n_devices; d++) {
      snprintf(lane, sizeof lane, "device %d", (int)d);
      st = loom_trace_name_lane(ctx, t, 2 * d, lane);
      snprintf(lane, sizeof lane, "device %d comm", (int)d);
      if (!st) st = loom_trace_name_lane(ctx, t, 2 * d + 1, lane);
      for (int32_t e = r.event_start[d]; !st && e < r.event_start[d + 1]; e++) {
        const loom_sim_event *ev = &r.events[e];
        if (ev->end_s <= ev->start_s) continue;
        const char *name = loom_op_name(pp->global->nodes[ev->node].op);
        loom_trace_event(t, 2 * d + ev->comm, name, ev->comm ? "comm" : "compute",
                         t0 + ev->start_s, t0 + ev->end_s);
      }
    }
    if (!st) st = loom_trace_save(ctx, t, a->trace);
    if (!st) printf("wrote %s\n", a->trace);
    loom_trace_free(t);
  }
  loom_sim_result_free(&r);
  return st;
}

/* ---- --search (parallel/search.h) ------------------------------------------ */

/* Exact re-ranking lowers each of the best plans over the whole graph:
 * affordable (well under a second a plan) for a few devices and layers
 * (lowering grows with devices x layers: 16 x 4 takes ~0.3 s a plan). */
#define EXACT_MAX_DEVICES 16
#define EXACT_MAX_DEVICE_LAYERS 64
/* the estimate's best this many go to the exact re-ranking (the estimate's
 * order among close plans is not the simulator's) */
#define EXACT_POOL 16

static void print_candidate(int32_t rank, const loom_search_candidate *c, bool exact) {
  char words[128], sim[16] = "-", step[16] = "-";
  loom_mesh_plan_describe(&c->plan, words, sizeof words);
  if (strstr(c->spec, "+interlaced")) /* the built-in's family, no field of the plan */
    snprintf(words + strlen(words), sizeof words - strlen(words), " interlaced");
  if (c->simulated) snprintf(sim, sizeof sim, "%.3f", c->sim_step_s * 1e3);
  if (isfinite(c->est.step_s)) snprintf(step, sizeof step, "%.3f", c->est.step_s * 1e3);
  double mem = c->simulated ? c->sim_peak_bytes : c->est.memory.total;
  char lost[40] = "winner";
  if (rank < 0 || rank > 1) {
    if (c->lost_by == LOOM_LOSS_MEMORY)
      snprintf(lost, sizeof lost, "memory +%.3g GB", c->lost_s / 1e9);
    else if (c->lost_by == LOOM_LOSS_SYNC)
      snprintf(lost, sizeof lost, "sync points +%.0f", c->lost_s);
    else
      snprintf(lost, sizeof lost, "%s +%.3g ms", loom_search_loss_name(c->lost_by),
               c->lost_s * 1e3);
  }
  char r[16] = "-";
  if (rank > 0) snprintf(r, sizeof r, "%d", (int)rank);
  printf("%-4s %-34s %10s", r, c->spec[0] ? c->spec : "(no built-in spec)", step);
  if (exact) printf(" %10s", sim);
  printf(" %9.2f %8.1f  %-22s %s\n", mem / 1e9,
         isfinite(c->est.bubble_fraction) ? 100.0 * c->est.bubble_fraction : 0.0, lost, words);
}

/* The winner as a plan file: `plan devices N` and `builtin "SPEC"` (quoted:
 * the plan lexer takes the '+' of dp4+zero1 for the end of a name). */
static loom_status write_plan_file(loom_ctx *ctx, const plan_args *a, const loom_cluster *cl,
                                   const loom_search_candidate *w, unsigned flags) {
  const loom_gpt_config *m = &a->cfg.model;
  char text[1024];
  int n = snprintf(text, sizeof text,
                   "# loom plan gpt --search: --arch %s --layers %d --d-model %d --heads %d "
                   "--kv-heads %d --d-ff %d --vocab %d --context %d --batch %d\n"
                   "# on %ld devices of %s (%s): predicted step %.4g ms\n"
                   "plan devices %ld\nbuiltin \"%s\"\n",
                   loom_gpt_arch_name(loom_gpt_config_arch(m)), (int)m->n_layer,
                   (int)m->d_model, (int)m->n_head, (int)loom_gpt_kv_heads(m), (int)m->d_ff,
                   (int)m->vocab, (int)m->context, (int)a->cfg.batch, a->devices, cl->name,
                   loom_precision_name(a->precision),
                   (w->simulated ? w->sim_step_s : w->est.step_s) * 1e3, a->devices, w->spec);
  if (n < 0 || (size_t)n >= sizeof text)
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "--out: the plan file is too long");
  return loom_file_write_atomic(ctx, a->out, text, (size_t)n, flags);
}

static loom_status run_search(loom_ctx *ctx, const plan_args *a, const loom_cluster *cl,
                              const loom_cluster *shared, unsigned flags) {
  const loom_gpt_config *m = &a->cfg.model;
  int32_t N = (int32_t)a->devices;
  bool exact = N <= EXACT_MAX_DEVICES && (int64_t)N * m->n_layer <= EXACT_MAX_DEVICE_LAYERS;
  if (a->out && N > LOOM_PLAN_MAX_DEVICES)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "--out: a plan file holds at most %d devices, not %d",
                      LOOM_PLAN_MAX_DEVICES, (int)N);
  /* a plan to run must be one a built-in spec states */
  int32_t top = a->top > 0 ? (int32_t)a->top : 5;
  loom_search_options so = {.cluster = cl, .precision = a->precision, .overlap = a->overlap,
                            .memory_limit = (double)a->memory_limit,
                            .top = exact && top < EXACT_POOL ? EXACT_POOL : top,
                            .require_spec = exact || a->out, .shared = shared,
                            .cores = (int32_t)a->cores};
  loom_search_result r;
  loom_status st = loom_plan_search(ctx, m, a->cfg.batch, N, &so, &r);
  if (!st && exact) {
    loom_graph *g = NULL;
    loom_plan_lower_options lo = {.comm = loom_comm_model_kept("mpi")};
    st = load_model(ctx, a, &g);
    if (!st) st = loom_plan_search_rerank(ctx, g, N, &so, &lo, &r);
    loom_graph_free(g);
  }
  if (st) {
    loom_search_result_free(&r);
    return st;
  }
  const loom_search_candidate *w = &r.best[0];
  char words[128];
  loom_mesh_plan_describe(&w->plan, words, sizeof words);
  printf("search: %s (%s: %d layers, d_model %d, %d heads, %d kv heads, d_ff %d, vocab %d, "
         "context %d; %.4g B parameters), batch "
         "%d, on %d devices of %s (%s GEMMs), memory limit %.3g GB\n",
         a->model, loom_gpt_arch_name(loom_gpt_config_arch(m)), (int)m->n_layer,
         (int)m->d_model, (int)m->n_head, (int)loom_gpt_kv_heads(m), (int)m->d_ff, (int)m->vocab,
         (int)m->context, loom_gpt_param_count(m) / 1e9, (int)a->cfg.batch, (int)N, cl->name, loom_precision_name(a->precision),
         r.memory_limit / 1e9);
  printf("winner: %s (%s)\n", w->spec[0] ? w->spec : "(no built-in spec)", words);
  printf("  predicted step %.4g ms, %.3g GB per device, bubble %.1f%%, %.3g TFLOP/s per device",
         w->est.step_s * 1e3, w->est.memory.total / 1e9, 100.0 * w->est.bubble_fraction,
         w->est.flops_per_device_s / 1e12);
  if (w->simulated)
    printf("; simulated step %.4g ms, peak %.3g GB", w->sim_step_s * 1e3, w->sim_peak_bytes / 1e9);
  printf("\n\n%-4s %-34s %10s", "rank", "spec", "step_ms");
  if (exact) printf(" %10s", "sim_ms");
  printf(" %9s %8s  %-22s %s\n", "mem_GB", "bubble%", "lost_by", "plan");
  for (int32_t i = 0; i < r.n_best && i < top; i++) print_candidate(i + 1, &r.best[i], exact);
  for (int32_t i = 0; i < r.n_unfit && i < top; i++) print_candidate(-1, &r.unfit[i], exact);
  if (r.n_unfit) printf("(rank -: faster than the winner, but over the memory limit)\n");
  if (r.have_inexpressible) {
    loom_mesh_plan_describe(&r.inexpressible.plan, words, sizeof words);
    printf("(%s would take %.4g ms, but no built-in spec expresses it)\n", words,
           r.inexpressible.est.step_s * 1e3);
  }
  printf("\nsearched %d meshes (%d cut whole) and %lld plans: %lld estimated, %lld cut by the "
         "step bound, %lld by memory, %lld over the limit",
         (int)r.meshes, (int)r.meshes_pruned, (long long)r.visited, (long long)r.estimated,
         (long long)r.pruned_time, (long long)r.pruned_memory, (long long)r.unfit_count);
  if (so.require_spec) printf(", %lld without a built-in spec", (long long)r.no_spec);
  printf("; %.2f s\n", r.seconds);
  if (exact)
    printf("re-ranked by the exact simulator: %d plans lowered and simulated, %d could not be\n",
           (int)r.n_simulated, (int)r.n_sim_failed);
  if (a->out) {
    st = write_plan_file(ctx, a, cl, w, flags);
    if (!st)
      printf("wrote %s: run it with 'mpirun -np %d loom train --plan %s' and the same model "
             "flags\n",
             a->out, (int)N, a->out);
  }
  loom_search_result_free(&r);
  return st;
}

int loom_cli_plan_main(int argc, char **argv) {
  plan_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom plan: out of memory\n");
    return 1;
  }
  loom_graph *g = NULL;
  loom_plan *p = NULL;
  loom_plan_program *pp = NULL;
  rc = 1;
  /* the --dot file is checked before the work, not found unwritable after */
  unsigned flags = LOOM_FILE_HINT_FORCE | (a.force ? LOOM_FILE_REPLACE : 0);
  if (a.dot && loom_file_check_output(ctx, a.dot, flags)) {
    loom_error_prefix(ctx, "--dot");
    goto fail;
  }
  if (a.save_plan && loom_file_check_output(ctx, a.save_plan, flags)) {
    loom_error_prefix(ctx, "--save-plan");
    goto fail;
  }
  if (a.dot && a.save_plan && loom_file_same(a.dot, a.save_plan)) {
    fprintf(stderr, "loom plan: --dot and --save-plan name the same file (%s)\n", a.dot);
    goto done;
  }
  if (a.trace && loom_file_check_output(ctx, a.trace, flags)) {
    loom_error_prefix(ctx, "--trace");
    goto fail;
  }
  if (a.out && loom_file_check_output(ctx, a.out, flags)) {
    loom_error_prefix(ctx, "--out");
    goto fail;
  }
  loom_cluster cluster;
  if (a.cluster && loom_cluster_load(ctx, a.cluster, &cluster)) goto fail;
  if (a.cluster && a.oversubscribe) a.cores = cluster.devices_per_node;
  if (a.search) {
    /* composed estimates rate devices alike: each a fixed share of a core */
    int64_t nodes = cluster.max_nodes > 0 ? cluster.max_nodes : 1;
    loom_cluster whole = cluster; /* the exact re-ranking shares its cores as they run */
    if (a.oversubscribe)
      loom_cluster_time_shared(&cluster, (int32_t)((a.devices + nodes - 1) / nodes), &cluster);
    if (run_search(ctx, &a, &cluster, a.oversubscribe ? &whole : NULL, flags)) goto fail;
    rc = 0;
    goto done;
  }
  if (load_model(ctx, &a, &g)) goto fail;
  if (loom_plan_open(ctx, g, a.plan, (int32_t)a.devices, &p)) goto fail;
  /* saved before lowering: a plan the lowering rejects can be edited */
  if (a.save_plan) {
    if (save_plan(ctx, p, a.save_plan, flags)) goto fail;
    printf("wrote %s\n", a.save_plan);
  }
  /* the costs an MPI run on this machine lowers with */
  loom_plan_lower_options lo = {.comm = loom_comm_model_kept("mpi"),
                                .memory_limit = a.memory_limit,
                                .bucket_bytes = a.bucket_bytes};
  if (loom_plan_lower(p, &lo, &pp)) goto fail;
  if (!a.show || strcmp(a.show, "none") != 0) {
    bool all = !a.show || strcmp(a.show, "all") == 0;
    int32_t only = all ? -1 : (int32_t)strtol(a.show, NULL, 10);
    for (int32_t d = 0; d < pp->n_devices; d++)
      if ((all || d == only) && print_device(ctx, pp, d)) goto fail;
  }
  print_summary(pp);
  printf("comm model: %.3g us per message + bytes / %.3g GB/s (%s)\n", lo.comm.latency_s * 1e6,
         lo.comm.bandwidth_Bps / 1e9,
         lo.comm.measured ? "MPI, as the machine profile keeps it" : "defaults: no MPI run measured yet");
  if (a.cluster && simulate(ctx, &a, pp, &cluster)) goto fail;
  if (a.dot && write_dot(ctx, pp, a.dot, a.force)) goto fail;
  if (a.dot) printf("wrote %s\n", a.dot);
  rc = 0;
  goto done;
fail:
  rc = fail(ctx);
done:
  loom_plan_program_free(pp);
  loom_plan_free(p);
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return rc;
}

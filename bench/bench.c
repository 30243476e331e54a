/*
 * `loom bench`: the command line. Measures the machine (machine.c), runs
 * the workloads (run.c) and prints the reports (report.c); `rng` measures
 * the Philox paths instead (run.c, at its end), `attention` the RNG
 * placements of flash attention against their model (wl_attention.c).
 */
#include "bench.h"

#include "harness.h"
#include "plot.h"
#include "cli.h"
#include "core/file.h"
#include "runtime/backend.h"

#include "rng/philox_fast.h"

#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#define DEFAULT_RUNS 5

static const char usage[] =
    "usage: loom bench [WORKLOAD|FILE...] [--size small|full] [--json] [--runs N]\n"
    "                  [--modes LIST | --fusion M] [--threads N] [--with-reference]\n"
    "                  [--back-to-back]\n"
    "                  [--quiet] [--list] [--rounds N] [--seconds S]\n"
    "                  [--trace FILE [--force]]\n"
    "                  [--plot OUT.svg [--peer FILE.jsonl]... [--plot-only]]\n"
    "                  [--grad] [--input NAME=FILE]... [--dim NAME=N]...\n"
    "                  [--save-graph DIR [--force]]\n"
    "\n"
    "Measures the machine's triad bandwidth, memory roof and sgemm rate, then\n"
    "runs each workload (all of them when none is named) in the modes\n"
    "reference (the ref backend), eager (one C loop per op), none, loop and\n"
    "stitch (the fusion modes of the cpu backend), and frozen (stitch with the\n"
    "params frozen: loom_session_freeze_input, GEMM operands packed once;\n"
    "only where GEMMs read params), and reports per workload\n"
    "and mode: primitive ops, kernels, modeled bytes, the median time, GB/s\n"
    "counting the minimum bytes the workload must move, that bandwidth as a\n"
    "fraction of the memory roof (the best of triad and copy, ordinary and\n"
    "streaming stores, built like generated kernels, counted without\n"
    "write-allocate) measured at the workload's own footprint, and the\n"
    "speedups between modes.\n"
    "\n"
    "A FILE (a graph file, as 'loom run' takes, or an ONNX model, MODEL.onnx)\n"
    "is a workload of its own: its inputs get random data of their declared\n"
    "shapes (params small, integer inputs valid indices of the axes they\n"
    "index; an ONNX model's symbolic dims 1 unless --dim sets them) unless\n"
    "--input gives them (.npy; for ONNX also TensorProto .pb); with --grad it\n"
    "runs forward + backward (the gradients of its first scalar f32 output\n"
    "with respect to its params: an ONNX model's initializers).\n"
    "\n"
    "The workload 'rng' (run only when named) measures instead the random\n"
    "bytes per second of every Philox4x32 path (ref, portable, avx2, avx512;\n"
    "those this CPU lacks are listed as skipped) on 1 thread (per core) and on\n"
    "all threads (in total), next to the scalar reference; alone it skips the\n"
    "machine measurement.\n"
    "\n"
    "The workload 'attention' (run only when named; about a minute at full size)\n"
    "sweeps sequence lengths 128-4096 and head dims 64 and 128 (--size small:\n"
    "128 and 256, head dim 64) for one pre-LN GPT block, forward + backward,\n"
    "batch 1, 4 heads, causal, with attention dropout 0.1 under each RNG\n"
    "placement (fused, sequential, overlap) and without dropout (none), and\n"
    "reports per point each one's measured and predicted time, the RNG\n"
    "performance model's pick and the measured best. Its sessions use the\n"
    "default options (--modes and --fusion do not apply); it measures the\n"
    "machine first, as its prediction prices memory traffic at the triad.\n"
    "\n"
    "The workload 'megatron' (run only when named; nothing is measured) prints\n"
    "the composed estimates of Megatron-LM's published weak-scaling runs (GPT\n"
    "1.7B-1T on 32-3072 A100s) next to their published teraFLOP/s per GPU.\n"
    "\n"
    "  --backend NAME       the backend of the eager and fusion modes (default cpu)\n"
    "  --gemm f32|tf32|bf16 how a GPU backend multiplies f32 matrices (default f32)\n"
    "  --attention A        attention on the cpu backend: " LOOM_ATTENTION_MODE_NAMES "\n"
    "                       (default flash; train_step builds attention as\n"
    "                       'loom train' does, auto)\n"
    "  --size small|full    workload sizes (default full: issue 3's sizes)\n"
    "  --json               one JSON object per line (the machine line first,\n"
    "                       but none for rng alone); attention: one line per\n"
    "                       point and placement\n"
    "  --runs N             timed runs per mode (attention: per placement) after\n"
    "                       one warm-up (default 5)\n"
    "  --modes LIST         comma-separated subset of\n"
    "                       reference,eager,none,loop,stitch,frozen (default all)\n"
    "  --fusion M           one mode only: " LOOM_FUSION_MODE_NAMES "\n"
    "  --threads N          CPU threads (default 0 = all cores)\n"
    "  --with-reference     run the reference mode at full size too (slow)\n"
    "  --back-to-back       time each mode's runs in a row, warm, as bench/peers\n"
    "                       times the peers (default: one run of each mode per\n"
    "                       round, then the roof's round, so modes share the noise)\n"
    "  --quiet              no progress on stderr\n"
    "  --list               print the workloads and exit\n"
    "  --rounds N           rng: Philox rounds, 0-16 (default both 10 and 7)\n"
    "  --seconds S          rng: seconds per figure, (0, 60] (default 0.5)\n"
    "  --trace FILE         write a Chrome trace (chrome://tracing, ui.perfetto.dev)\n"
    "                       of every timed session run (not the warm-ups):\n"
    "                       kernels, GEMMs and overlapped mask tasks per lane\n"
    "  --plot FILE          draw each workload's median time per mode as an SVG\n"
    "                       bar chart (bars scaled to the workload's slowest)\n"
    "  --peer FILE          with --plot: add the timed JSON lines of FILE (from\n"
    "                       bench/peers, or an earlier `loom bench --json`) as\n"
    "                       more bars; repeatable\n"
    "  --plot-only          draw the --peer files alone; run nothing\n"
    "  --save-graph DIR     write each named workload's graph (all when none is\n"
    "                       named; --size applies) as text IR to DIR/NAME.loom\n"
    "                       and run nothing: 'loom compile DIR/NAME.loom' then\n"
    "                       shows its fusion plan, kernels and code; a FILE\n"
    "                       workload as the graph built from it (an ONNX model's,\n"
    "                       forward + backward with --grad) to DIR/STEM[.grad].loom\n"
    "  --grad               FILE workloads: forward + backward\n"
    "  --input NAME=FILE    FILE workloads: the input NAME from a .npy file\n"
    "                       (its dtype and shape as declared); repeatable\n"
    "  --force              overwrite the --trace, --plot or --save-graph files\n"
    "                       if they exist\n"
    "                       (otherwise refused, exit 1, before anything runs)\n"
    "  -h, --help           print this help\n"
    "\n"
    "Exit status: 0 success, 1 a failure (a mode that could not run), 2 wrong\n"
    "arguments.\n";

typedef struct opts {
  loom_bench_opts run;
  int32_t rng_rounds; /* -1: the defaults */
  double rng_seconds;
  bool json;
  bool force;
  const char *trace; /* --trace FILE, or NULL */
  const char *plot;  /* --plot FILE, or NULL */
  const char *save_graph; /* --save-graph DIR, or NULL */
  bool plot_only;
  int32_t n_peers;
  const char **peers; /* --peer FILEs */
  bool grad;          /* --grad: file workloads run forward + backward */
  int32_t n_inputs;
  const char **inputs; /* --input NAME=FILE */
  int32_t n_dims;
  const char **dims; /* --dim NAME=N */
  int32_t n_files;
  loom_bench_file_spec *file_specs; /* the named FILEs, as workloads */
  loom_bench_workload *files;
  int32_t threads;
  int32_t n_names;
  const char **names;
} opts;

static bool parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
  long v;
  if (!loom_cli_parse_long(s, lo, hi, &v)) return false;
  *out = (int32_t)v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (!*s || *end || !(v > 0.0) || v > 60.0) return false;
  *out = v;
  return true;
}

static bool is_rng(const char *name) { return strcmp(name, LOOM_BENCH_RNG_NAME) == 0; }
static bool is_attention(const char *name) { return strcmp(name, LOOM_BENCH_ATTENTION_NAME) == 0; }
/* Benchmarks that run only when named and need neither the machine line
 * nor options of their own. */
typedef struct named_bench {
  const char *name, *what;
  bool (*run)(loom_ctx *ctx, FILE *f, bool json, const loom_bench_opts *o);
} named_bench;
static const named_bench named_benches[] = {
    {LOOM_BENCH_PARALLEL_NAME,
     "data-parallel scaling under mpirun, and planning a 48-layer GPT on 64 devices",
     loom_bench_run_parallel},
    {LOOM_BENCH_SIMULATOR_NAME,
     "every built-in plan at 2 and 4 ranks: measured under mpirun against the simulator",
     loom_bench_run_simulator},
    {LOOM_BENCH_MEGATRON_NAME,
     "composed estimates against Megatron-LM's published runs, 1.7B-1T on 32-3072 A100s",
     loom_bench_run_megatron},
};
enum { N_NAMED = sizeof named_benches / sizeof named_benches[0] };

static const named_bench *find_named(const char *name) {
  for (int32_t k = 0; k < N_NAMED; k++)
    if (strcmp(name, named_benches[k].name) == 0) return &named_benches[k];
  return NULL;
}
static bool is_special(const char *name) {
  return is_rng(name) || is_attention(name) || find_named(name);
}

static bool parse_modes(const char *s, bool *modes) {
  memset(modes, 0, sizeof(bool) * LOOM_BENCH_MODE_COUNT);
  bool any = false;
  while (*s) {
    size_t n = strcspn(s, ",");
    int32_t m = -1;
    for (int32_t k = 0; k < LOOM_BENCH_MODE_COUNT; k++) {
      const char *name = loom_bench_mode_name((loom_bench_mode)k);
      if (strlen(name) == n && strncmp(s, name, n) == 0) m = k;
    }
    if (m < 0) return false;
    modes[m] = any = true;
    s += n;
    if (*s == ',') s++;
  }
  return any;
}

/* A name that is no workload but a file: the user's own graph. */
static bool is_graph_file(const char *name) {
  struct stat st;
  return stat(name, &st) == 0 && S_ISREG(st.st_mode);
}

static void add_file(opts *o, const char *path) {
  loom_bench_file_spec *spec = &o->file_specs[o->n_files];
  spec->path = path;
  loom_bench_workload *w = &o->files[o->n_files++];
  w->name = path;
  w->what = "a graph file";
  w->bytes_rule = "inputs+outputs";
  w->build = loom_bench_build_file;
  w->arg = spec;
}

/* The workload a name stands for: a file named on the command line, or a
 * built-in one. */
static const loom_bench_workload *find_workload(const opts *o, const char *name) {
  for (int32_t k = 0; k < o->n_files; k++)
    if (o->files[k].name == name) return &o->files[k];
  return loom_bench_find(name);
}

/* Parses argv; returns -1 to go on, else an exit status. */
static int parse_args(int argc, char **argv, opts *o) {
  o->run.runs = DEFAULT_RUNS;
  o->rng_rounds = -1;
  o->rng_seconds = LOOM_BENCH_RNG_SECONDS;
  for (int32_t k = 0; k < LOOM_BENCH_MODE_COUNT; k++)
    o->run.modes[k] = true;
  o->names = calloc((size_t)argc + 1, sizeof *o->names);
  o->peers = calloc((size_t)argc + 1, sizeof *o->peers);
  o->inputs = calloc((size_t)argc + 1, sizeof *o->inputs);
  o->dims = calloc((size_t)argc + 1, sizeof *o->dims);
  o->file_specs = calloc((size_t)argc + 1, sizeof *o->file_specs);
  o->files = calloc((size_t)argc + 1, sizeof *o->files);
  if (!o->names || !o->peers || !o->inputs || !o->dims || !o->file_specs || !o->files) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int r;
    if (loom_cli_is_help(a)) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(a, "--list") == 0) {
      int32_t n;
      const loom_bench_workload *w = loom_bench_workloads(&n);
      for (int32_t k = 0; k < n; k++)
        printf("%-26s %s (min bytes %s)\n", w[k].name, w[k].what, w[k].bytes_rule);
      printf("%-26s Philox4x32 random bytes/s per path, per core and in total (only when "
             "named)\n",
             LOOM_BENCH_RNG_NAME);
      printf("%-26s RNG placements of attention dropout, measured vs the model, one GPT "
             "block per sequence length and head dim (only when named)\n",
             LOOM_BENCH_ATTENTION_NAME);
      for (int32_t k = 0; k < N_NAMED; k++)
        printf("%-26s %s (only when named)\n", named_benches[k].name, named_benches[k].what);
      return 0;
    } else if (strcmp(a, "--json") == 0) {
      o->json = true;
    } else if (strcmp(a, "--quiet") == 0) {
      o->run.quiet = true;
    } else if (strcmp(a, "--force") == 0) {
      o->force = true;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--trace", &v)) != 0) {
      if (r < 0 || !*v) return loom_cli_usage_error("loom", usage, "%s needs a file name", a);
      o->trace = v;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--save-graph", &v)) != 0) {
      if (r < 0 || !*v) return loom_cli_usage_error("loom", usage, "%s needs a folder", a);
      o->save_graph = v;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--plot", &v)) != 0) {
      if (r < 0 || !*v) return loom_cli_usage_error("loom", usage, "%s needs a file name", a);
      o->plot = v;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--peer", &v)) != 0) {
      if (r < 0 || !*v) return loom_cli_usage_error("loom", usage, "%s needs a file name", a);
      o->peers[o->n_peers++] = v;
    } else if (strcmp(a, "--plot-only") == 0) {
      o->plot_only = true;
    } else if (strcmp(a, "--grad") == 0) {
      o->grad = true;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--input", &v)) != 0) {
      if (r < 0 || !strchr(v, '='))
        return loom_cli_usage_error("loom", usage, "--input wants NAME=FILE.npy, got '%s'", r < 0 ? "" : v);
      o->inputs[o->n_inputs++] = v;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--dim", &v)) != 0) {
      const char *eq = r > 0 ? strchr(v, '=') : NULL;
      int32_t n = 0;
      if (!eq || eq == v || !parse_int(eq + 1, 1, 1 << 30, &n))
        return loom_cli_usage_error("loom", usage, "--dim wants NAME=N (N >= 1), got '%s'", r < 0 ? "" : v);
      o->dims[o->n_dims++] = v;
    } else if (strcmp(a, "--with-reference") == 0) {
      o->run.with_reference = true;
    } else if (strcmp(a, "--back-to-back") == 0) {
      o->run.back_to_back = true;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--size", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (strcmp(v, "small") == 0)
        o->run.small = true;
      else if (strcmp(v, "full") == 0)
        o->run.small = false;
      else
        return loom_cli_usage_error("loom", usage, "--size must be small or full, got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--runs", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!parse_int(v, 1, 1000, &o->run.runs))
        return loom_cli_usage_error("loom", usage, "--runs must be an integer in [1, 1000], got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--rounds", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!parse_int(v, 0, LOOM_PHILOX_MAX_ROUNDS, &o->rng_rounds))
        return loom_cli_usage_error("loom", usage, "--rounds must be an integer in [0, 16], got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--seconds", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!parse_seconds(v, &o->rng_seconds))
        return loom_cli_usage_error("loom", usage, "--seconds must be a number in (0, 60], got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!parse_int(v, 0, 4096, &o->threads))
        return loom_cli_usage_error("loom", usage, "--threads must be an integer in [0, 4096], got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--modes", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!parse_modes(v, o->run.modes))
        return loom_cli_usage_error("loom", usage, "--modes takes a comma-separated subset of "
                           "reference,eager,none,loop,stitch,frozen, got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--attention", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (loom_attention_mode_from_name(v, &o->run.attention))
        return loom_cli_usage_error("loom", usage, "--attention wants one of " LOOM_ATTENTION_MODE_NAMES ", got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (!loom_backend_name_known(v))
        return loom_cli_usage_error("loom", usage, "unknown backend '%s' (see 'loom bench --help')", v);
      o->run.backend = v;
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--gemm", &v)) != 0) {
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (loom_gemm_precision_from_name(v, &o->run.gemm))
        return loom_cli_usage_error("loom", usage, "--gemm must be one of " LOOM_GEMM_PRECISION_NAMES ", got '%s'", v);
    } else if ((r = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      /* as on every command that compiles: one mode only */
      if (r < 0) return loom_cli_usage_error("loom", usage, "%s needs a value", a);
      if (strchr(v, ',') || strcmp(v, "reference") == 0 || strcmp(v, "frozen") == 0 ||
          !parse_modes(v, o->run.modes))
        return loom_cli_usage_error("loom", usage, "--fusion must be one of " LOOM_FUSION_MODE_NAMES ", got '%s'", v);
    } else if (a[0] == '-') {
      return loom_cli_usage_error("loom", usage, "unknown option '%s'", a);
    } else if (!is_special(a) && !loom_bench_find(a) && !is_graph_file(a)) {
      return loom_cli_usage_error("loom", usage, "unknown workload '%s' (see 'loom bench --list'; a graph file is "
                         "taken by its path)",
                         a);
    } else {
      if (!is_special(a) && !loom_bench_find(a)) add_file(o, a);
      o->names[o->n_names++] = a;
    }
  }
  for (int32_t k = 0; k < o->n_files; k++) { /* flags may follow the files */
    o->file_specs[k].grad = o->grad;
    o->file_specs[k].n_inputs = o->n_inputs;
    o->file_specs[k].inputs = o->inputs;
    o->file_specs[k].n_dims = o->n_dims;
    o->file_specs[k].dims = o->dims;
  }
  if ((o->grad || o->n_inputs || o->n_dims) && !o->n_files)
    return loom_cli_usage_error("loom", usage, "%s applies to FILE workloads: name a graph file",
                       o->grad ? "--grad" : o->n_inputs ? "--input" : "--dim");
  if (o->save_graph && (o->plot || o->trace))
    return loom_cli_usage_error("loom", usage, "--save-graph runs nothing: it takes no %s",
                                o->plot ? "--plot" : "--trace");
  if ((o->n_peers || o->plot_only) && !o->plot)
    return loom_cli_usage_error("loom", usage, "%s needs --plot FILE", o->plot_only ? "--plot-only" : "--peer");
  if (o->plot_only && (!o->n_peers || o->n_names))
    return loom_cli_usage_error("loom", usage, "%s", o->n_names ? "--plot-only runs no workloads: name none"
                                        : "--plot-only draws --peer files: give at least one");
  return -1;
}

/* Loom's timed modes of each row as bars. */
static bool plot_rows(loom_bench_plot *plot, const loom_bench_row *rows, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    for (int32_t m = 0; m < LOOM_BENCH_MODE_COUNT; m++) {
      const loom_bench_result *r = &rows[i].r[m];
      if (rows[i].wanted[m] && r->outcome == LOOM_BENCH_RAN && r->median_s > 0 &&
          !loom_bench_plot_add(plot, rows[i].w->name, loom_bench_mode_name((loom_bench_mode)m),
                               r->median_s))
        return false;
    }
  return true;
}

/* Writes the chart to o->plot; 0 or 1 (after a message). */
static int write_plot(loom_ctx *ctx, const opts *o, const loom_bench_plot *plot) {
  char *svg = loom_bench_plot_svg(plot, "loom bench: median time per workload and mode");
  loom_status st =
      svg ? loom_file_write_atomic(ctx, o->plot, svg, strlen(svg),
                                   LOOM_FILE_HINT_FORCE | (o->force ? LOOM_FILE_REPLACE : 0))
          : loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                       "--plot: no workload was timed, nothing to draw");
  free(svg);
  if (st) {
    fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
    return 1;
  }
  if (!o->run.quiet) fprintf(stderr, "bench: chart written to %s\n", o->plot);
  return 0;
}

/* Starts recording the --trace timeline (*tracing: it started); 0 or 1
 * (after a message). */
static int start_trace(loom_ctx *ctx, bool *tracing) {
  if (loom_ctx_trace_begin(ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: starting the trace: %s\n", loom_ctx_error(ctx));
    return 1;
  }
  *tracing = true;
  return 0;
}

static void free_opts(opts *o) {
  free(o->names);
  free(o->peers);
  free(o->inputs);
  free(o->dims);
  free(o->file_specs);
  free(o->files);
}

/* --save-graph: each graph workload (the named ones, or all) built and
 * written as text IR to DIR/NAME.loom; 0 or 1 (after a message). */
static int save_graphs(loom_ctx *ctx, const opts *o) {
  int32_t n_all;
  const loom_bench_workload *all = loom_bench_workloads(&n_all);
  int32_t n = o->n_names ? o->n_names : n_all;
  for (int32_t i = 0; i < n; i++) {
    const loom_bench_workload *w = o->n_names ? find_workload(o, o->names[i]) : &all[i];
    if (!w) {
      fprintf(stderr, "loom: --save-graph: '%s' is no graph workload\n", o->names[i]);
      return 1;
    }
    char *text = NULL, path[4096], name[1024];
    snprintf(name, sizeof name, "%s", w->name);
    if (w->build == loom_bench_build_file) {
      /* what Loom built from the user's file: an ONNX model's graph, or
       * with --grad forward + backward, as STEM[.grad].loom; a graph file
       * as it is already is one */
      const loom_bench_file_spec *f = w->arg;
      const char *base = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
      const char *dot = strrchr(base, '.');
      bool onnx = dot && strcmp(dot, ".onnx") == 0;
      if (!onnx && !f->grad) {
        if (!o->run.quiet)
          fprintf(stderr, "bench: %s is a graph file already (nothing written)\n", f->path);
        continue;
      }
      snprintf(name, sizeof name, "%.*s%s", (int)(dot ? dot - base : (ptrdiff_t)strlen(base)), base,
               f->grad ? ".grad" : "");
    }
    loom_bench_graph b = {0};
    int len = snprintf(path, sizeof path, "%s/%s.loom", o->save_graph, name);
    loom_status st =
        len < 0 || (size_t)len >= sizeof path
            ? loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "--save-graph: folder name too long")
            : w->build(ctx, w, o->run.small, &b);
    if (!st) st = loom_graph_print(b.g, &text);
    if (!st)
      st = loom_file_write_atomic(ctx, path, text, strlen(text),
                                  LOOM_FILE_HINT_FORCE | (o->force ? LOOM_FILE_REPLACE : 0));
    loom_free(text);
    loom_bench_graph_clear(&b);
    if (st) {
      fprintf(stderr, "loom: %s: %s\n", w->name, loom_ctx_error(ctx));
      return 1;
    }
    if (!o->run.quiet) fprintf(stderr, "bench: %s written to %s\n", name, path);
  }
  return 0;
}

int loom_bench_main(int argc, char **argv) {
  opts o = {0};
  int rc = parse_args(argc, argv, &o);
  loom_ctx *ctx = NULL;
  if (rc < 0 && loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: cannot create a context\n");
    rc = 1;
  }
  if (rc >= 0) {
    free_opts(&o);
    return rc;
  }
  /* the trace and plot files can be written, the peers' files read:
   * checked before the work (core/file.h) */
  unsigned out_flags = LOOM_FILE_HINT_FORCE | (o.force ? LOOM_FILE_REPLACE : 0);
  loom_bench_plot *plot = o.plot ? loom_bench_plot_new() : NULL;
  bool bad = (o.plot && !plot && loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory")) ||
             (o.trace && loom_file_check_output(ctx, o.trace, out_flags)) ||
             (o.plot && loom_file_check_output(ctx, o.plot, out_flags)) ||
             loom_ctx_set_threads(ctx, o.threads) != LOOM_STATUS_OK;
  for (int32_t i = 0; !bad && i < o.n_peers; i++)
    bad = loom_bench_plot_read(ctx, plot, o.peers[i]) != LOOM_STATUS_OK;
  if (bad || o.plot_only || o.save_graph) {
    if (bad)
      fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
    else if (o.plot_only)
      bad = write_plot(ctx, &o, plot) != 0;
    else
      bad = save_graphs(ctx, &o) != 0;
    loom_bench_plot_free(plot);
    loom_ctx_free(ctx);
    free_opts(&o);
    return bad ? 1 : 0;
  }
  int32_t n_all;
  const loom_bench_workload *all = loom_bench_workloads(&n_all);
  /* Graph workloads to run: the named ones (rng and attention aside), or
   * all of them when none is named; rng and attention run only when
   * named, where they are named. */
  int32_t n_graph = 0, n_rng = 0, n_attn = 0;
  for (int32_t i = 0; i < o.n_names; i++) {
    if (find_named(o.names[i])) continue;
    if (is_rng(o.names[i]))
      n_rng++;
    else if (is_attention(o.names[i]))
      n_attn++;
    else
      n_graph++;
  }
  if (!o.n_names) n_graph = n_all;
  /* the user's files are read and built before anything is measured, so
   * a mistake in one ends the run at once */
  for (int32_t k = 0; k < o.n_files; k++) {
    loom_bench_graph b = {0};
    loom_status st = o.files[k].build(ctx, &o.files[k], o.run.small, &b);
    loom_bench_graph_clear(&b);
    if (st) {
      fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
      loom_bench_plot_free(plot);
      loom_ctx_free(ctx);
      free_opts(&o);
      return 1;
    }
  }
  loom_bench_rng_opts ro = {.rounds = o.rng_rounds,
                            .seconds = o.rng_seconds,
                            .threads = loom_ctx_threads(ctx),
                            .quiet = o.run.quiet};
  loom_bench_machine_info mi;
  bool tracing = false;
  rc = 0;
  if (n_graph == 0 && n_attn == 0) {
    /* rng and parallel alone: the triad and sgemm say nothing about them */
    if (o.trace && start_trace(ctx, &tracing) != 0)
      rc = 1;
    else
      for (int32_t i = 0; i < o.n_names; i++) {
        if (is_rng(o.names[i]) && !loom_bench_run_rng(stdout, o.json, &ro)) rc = 1;
        const named_bench *nb = find_named(o.names[i]);
        if (nb && !nb->run(ctx, stdout, o.json, &o.run)) rc = 1;
      }
  } else if (loom_bench_measure_machine(ctx, o.run.small, o.run.quiet, &mi) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: measuring the machine: %s\n", loom_ctx_error(ctx));
    rc = 1;
  } else {
    o.run.roof_kit = mi.roof_kit;
    o.run.threads = mi.m.threads;
    loom_bench_print_machine(stdout, o.json, &mi);
    if (n_graph) loom_bench_print_header(stdout, o.json);
    fflush(stdout);
    int32_t n = n_graph;
    loom_bench_row *rows = calloc((size_t)(n ? n : 1), sizeof *rows);
    if (!rows) {
      fprintf(stderr, "loom: out of memory\n");
      rc = 1;
      n = 0;
    }
    if (rows && o.trace && start_trace(ctx, &tracing) != 0) {
      rc = 1;
      free(rows);
      rows = NULL;
      n = 0;
    }
    int32_t n_steps = o.n_names ? o.n_names : n, k = 0;
    for (int32_t i = 0; rows && i < n_steps; i++) {
      if (o.n_names && is_rng(o.names[i])) {
        if (!loom_bench_run_rng(stdout, o.json, &ro)) rc = 1;
        fflush(stdout);
        continue;
      }
      const named_bench *nb = o.n_names ? find_named(o.names[i]) : NULL;
      if (nb) {
        if (!nb->run(ctx, stdout, o.json, &o.run)) rc = 1;
        fflush(stdout);
        continue;
      }
      if (o.n_names && is_attention(o.names[i])) {
        if (!loom_bench_run_attention(ctx, stdout, o.json, &o.run, &mi)) rc = 1;
        fflush(stdout);
        continue;
      }
      const loom_bench_workload *w = o.n_names ? find_workload(&o, o.names[i]) : &all[i];
      if (!loom_bench_run_workload(ctx, &o.run, w, &rows[k])) rc = 1;
      loom_bench_print_row(stdout, o.json, &rows[k], &mi);
      fflush(stdout);
      k++;
    }
    if (!o.json && n) loom_bench_print_targets(stdout, rows, n, &mi, o.run.small);
    if (plot && rows && !plot_rows(plot, rows, k)) {
      fprintf(stderr, "loom: --plot: out of memory\n");
      rc = 1;
    }
    free(rows);
  }
  if (n_graph || n_attn) loom_bench_machine_info_clear(&mi);
  if (o.trace && tracing) {
    if (loom_ctx_trace_end(ctx, o.trace) != LOOM_STATUS_OK) {
      fprintf(stderr, "loom: writing the trace: %s\n", loom_ctx_error(ctx));
      rc = 1;
    } else if (!o.run.quiet) {
      fprintf(stderr, "bench: trace written to %s\n", o.trace);
    }
  }
  if (plot && write_plot(ctx, &o, plot) != 0) rc = 1;
  loom_bench_plot_free(plot);
  loom_ctx_free(ctx);
  free_opts(&o);
  return rc;
}

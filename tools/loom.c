/*
 * loom: the command-line tool (docs/CLI.md).
 *
 *   loom train [flags]          train the GPT of src/train (loom train --help)
 *   loom run FILE [flags]       run a text-IR graph on .npy inputs
 *   loom compile FILE [flags]   fuse and compile a graph; print its artifacts
 *   loom bench [WORKLOAD...]    benchmarks (bench/; loom bench --help)
 *   loom show FILE              print a graph and what it is made of
 *   loom ops                    print the op table
 *   loom plan MODEL [flags]     lower a parallel plan; print each device's program
 *
 * Exit codes: 0 success, 1 a failure ("loom: <message>" on stderr),
 * 2 wrong arguments (a usage message on stderr).
 */
#include "loom.h"

#include "core/file.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/text_ir.h"
#include "ops/op.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/opencl/ocl.h"
#include "train/train_cli.h"

#include "bench.h"
#include "cli_args.h"
#include "cli_cluster.h"
#include "cli_onnx.h"
#include "cli_plan.h"
#include "cli_render.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#define EXIT_USAGE 2

/* A --help line per fusion mode, from the mode list in loom.h. */
#define HELP_MODE(ENUM, name, help) "                       " #name ": " help "\n"

static const char usage_main[] =
    "usage: loom <command> [options]\n"
    "\n"
    "commands:\n"
    "  train [flags]        train a small GPT (see 'loom train --help')\n"
    "  run FILE [flags]     run a text-IR graph on .npy inputs\n"
    "  compile FILE [flags] fuse and compile a graph, print what it became\n"
    "  bench [WORKLOAD...]  measure workloads in every fusion mode\n"
    "  show FILE            print a graph, its op counts and value shapes\n"
    "  ops                  print the op table (a Markdown table)\n"
    "  plan MODEL [flags]   lower a parallel plan, print each device's program\n"
    "  cluster FILE         check and print a cluster description (or --this-machine)\n"
    "  devices              list the backends and the devices present\n"
    "  onnx-test DIR        run the ONNX node tests in DIR (run, show, compile\n"
    "                       and bench also take a .onnx model: docs/ONNX.md)\n"
    "  help [COMMAND]       print help for loom or for one command\n"
    "\n"
    "options:\n"
    "  -h, --help           print this help\n"
    "  --version            print the version\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong arguments.\n";

static const char usage_run[] =
    "usage: loom run FILE [--input NAME=PATH.npy]... [--out DIR]\n"
    "                [--backend NAME] [--fusion MODE] [--threads N] [--force]\n"
    "\n"
    "Runs the text-IR graph in FILE. Every graph input (parameters too) is\n"
    "read from the .npy file given for its name; each output is written to\n"
    "DIR/<output name>.npy and summarized on stdout.\n"
    "\n"
    "  --input NAME=PATH    the .npy file for graph input NAME (repeatable)\n"
    "  --out DIR            where outputs go (default '.'; created if missing)\n"
    "  --backend NAME       one of" LOOM_BACKEND_HELP_NAMES " (default " LOOM_BACKEND_DEFAULT
    "; ref: the\n"
    "                       reference kernels)\n"
    "  --fusion MODE        how the cpu backend makes code:\n"
    LOOM_FUSION_MODE_LIST(HELP_MODE, )
    "  --threads N          CPU threads (0 = all cores, the default)\n"
    "  --force              overwrite output files that already exist\n"
    "  -h, --help           print this help\n";

static const char usage_compile[] =
    "usage: loom compile FILE [--backend NAME] [--fusion MODE] [--emit c|kernels|program]\n"
    "                    [--dump-after decompose|fuse|lower] [--threads N]\n"
    "                    [--dot OUT.dot] [--svg OUT.svg] [--png OUT.png] [--force]\n"
    "\n"
    "Prepares the text-IR graph in FILE for the cpu backend as 'loom run'\n"
    "would (decomposition, fusion plan, kernels, generated C, compilation\n"
    "through the kernel cache, memory plan) and prints a summary: primitive\n"
    "ops, memory-intensive ops, kernels, GEMMs, eager nodes, modeled bytes,\n"
    "peak bytes, compile time and whether the code came from the cache.\n"
    "With --emit or --dump-after the artifact goes to stdout and the\n"
    "summary to stderr.\n"
    "\n"
    "  --fusion MODE        how the cpu backend makes code:\n"
    LOOM_FUSION_MODE_LIST(HELP_MODE, )
    "  --backend NAME       one of" LOOM_BACKEND_HELP_NAMES " (default " LOOM_BACKEND_DEFAULT ");\n"
    "                       --emit c prints its source (opencl: OpenCL C)\n"
    "  --emit WHAT          c: the generated C source; kernels: the kernel IR;\n"
    "                       program: the fused program's steps\n"
    "  --dump-after PASS    decompose: the text IR after decomposition;\n"
    "                       fuse: the program listing; lower: the kernel IR\n"
    "  --threads N          CPU threads (0 = all cores, the default)\n"
    "  --dot FILE           write the fused program as Graphviz DOT: one cluster\n"
    "                       per step (blue: a generated kernel; orange: a GEMM\n"
    "                       and its epilogue; grey: an eager node); dashed edges\n"
    "                       are values kept inside a kernel\n"
    "  --svg FILE, --png FILE  the same picture rendered by Graphviz (its 'dot'\n"
    "                       program must be installed)\n"
    "  --force              overwrite the --dot, --svg or --png file if it exists\n"
    "  -h, --help           print this help\n";

static const char usage_show[] =
    "usage: loom show FILE\n"
    "\n"
    "Prints the graph in FILE as text IR, the op counts, every value's\n"
    "type, the inputs and parameter count, and the primitive op counts\n"
    "after composite ops are decomposed.\n"
    "\n"
    "  -h, --help           print this help\n";

static const char usage_ops[] =
    "usage: loom ops\n"
    "\n"
    "Prints every op of the op table as a Markdown table: class, input\n"
    "count, output count, attributes with their defaults, and whether it\n"
    "has a gradient rule.\n"
    "\n"
    "  -h, --help           print this help\n";

/* ---- small helpers -------------------------------------------------------- */

/* A usage error: message, then the command's usage, on stderr. */
static int usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loom: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  /* Only the synopsis (up to the first blank line), then a pointer. */
  const char *end = strstr(usage, "\n\n");
  fprintf(stderr, "\n%.*s\n", end ? (int)(end - usage) : (int)strlen(usage),
          usage);
  fprintf(stderr, "Try 'loom %s--help' for more.\n",
          usage == usage_run       ? "run "
          : usage == usage_show    ? "show "
          : usage == usage_compile ? "compile "
                                   : "");
  return EXIT_USAGE;
}

static int fail(loom_ctx *ctx) {
  fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
  return 1;
}

static bool is_help(const char *a) {
  return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

/* "f32[4, 8]" of a graph value. */
static const char *value_type_str(const loom_graph *g, loom_value v, char *buf,
                                  size_t n) {
  return loom_type_str(loom_value_type(g, v), buf, n);
}

/* A name from a file as printed: control bytes escaped, so it cannot
 * drive the terminal (core/file.h). Four calls may share one printf. */
static const char *shown(const char *name) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  return loom_escape(name, buf[k], sizeof buf[k]);
}

/* "%name", or "%N" numbered as the text IR printer numbers unnamed values
 * (num[v], in order of definition), so the two listings agree. */
static void print_value_ref(const loom_graph *g, const int32_t *num,
                            int32_t v) {
  const char *name = g->values[v].name;
  if (!name)
    printf("%%%d", num[v]);
  else if (loom_text_is_ident(name))
    printf("%%%s", name);
  else
    printf("%%\"%s\"", shown(name));
}

/* The printer's numbering: unnamed inputs first, then node outputs. */
static void number_unnamed(const loom_graph *g, int32_t *num) {
  int32_t next = 0;
  for (int32_t v = 0; v < g->n_values; v++) num[v] = -1;
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].name) num[g->inputs[i]] = next++;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t o = 0; o < g->nodes[i].n_out; o++) {
      int32_t v = g->nodes[i].out[o];
      if (!g->values[v].name && num[v] < 0) num[v] = next++;
    }
}

/* ---- loom show -------------------------------------------------------------- */

static void print_op_counts(const loom_graph *g, const char *title) {
  int32_t counts[LOOM_OP_COUNT] = {0};
  for (int32_t i = 0; i < g->n_nodes; i++)
    if ((unsigned)g->nodes[i].op < LOOM_OP_COUNT) counts[g->nodes[i].op]++;
  printf("%s (%d nodes):\n", title, g->n_nodes);
  for (int op = 0; op < LOOM_OP_COUNT; op++)
    if (counts[op])
      printf("  %-14s %d\n", loom_op_name((loom_op)op), counts[op]);
}

static int cmd_show(int argc, char **argv) {
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (is_help(argv[i])) {
      fputs(usage_show, stdout);
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1] != '\0')
      return usage_error(usage_show, "unknown flag '%s' for 'show'", argv[i]);
    if (file)
      return usage_error(usage_show, "unexpected argument '%s'", argv[i]);
    file = argv[i];
  }
  if (!file) return usage_error(usage_show, "show needs a FILE");

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  loom_graph *g = NULL, *dg = NULL;
  char *text = NULL;
  int32_t *num = NULL;
  int rc = 0;
  if (loom_graph_load(ctx, file, &g) != LOOM_STATUS_OK ||
      loom_graph_print(g, &text) != LOOM_STATUS_OK) {
    rc = fail(ctx);
    goto done;
  }
  fputs(text, stdout);
  if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
  putchar('\n');

  print_op_counts(g, "ops");

  char buf[160];
  num = malloc(sizeof *num * (size_t)(g->n_values + 1));
  if (!num) {
    fprintf(stderr, "loom: out of memory\n");
    rc = 1;
    goto done;
  }
  number_unnamed(g, num);
  printf("\nvalues (%d):\n", g->n_values);
  for (int32_t v = 0; v < g->n_values; v++) {
    printf("  ");
    print_value_ref(g, num, v);
    const char *kind = g->values[v].kind == LOOM_VALUE_INPUT   ? "input"
                       : g->values[v].kind == LOOM_VALUE_PARAM ? "param"
                                                               : "";
    printf(" : %s%s%s\n", value_type_str(g, v, buf, sizeof buf),
           kind[0] ? "  " : "", kind);
  }

  int32_t n_in = loom_graph_num_inputs(g), n_params = 0;
  for (int32_t i = 0; i < n_in; i++) n_params += loom_graph_input_is_param(g, i);
  printf("\ninputs: %d data, %d params; parameter elements: %lld\n",
         n_in - n_params, n_params, (long long)loom_graph_param_count(g));
  printf("outputs:");
  for (int32_t i = 0; i < loom_graph_num_outputs(g); i++)
    printf(" %s", shown(loom_graph_output_name(g, i)));
  printf("\n\n");

  if (loom_graph_decompose(g, &dg) != LOOM_STATUS_OK) {
    rc = fail(ctx);
    goto done;
  }
  print_op_counts(dg, "after decompose: primitive ops");

done:
  free(num);
  loom_free(text);
  loom_graph_free(dg);
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return rc;
}

/* ---- loom ops ---------------------------------------------------------------- */

static const char *class_name(loom_op_class c) {
  switch (c) {
  case LOOM_OPCLASS_ELEMENTWISE: return "element-wise";
  case LOOM_OPCLASS_REDUCE: return "reduction";
  case LOOM_OPCLASS_LAYOUT: return "layout";
  case LOOM_OPCLASS_INDEX: return "index";
  case LOOM_OPCLASS_SOURCE: return "source";
  case LOOM_OPCLASS_GEMM: return "gemm";
  case LOOM_OPCLASS_RNG: return "rng";
  case LOOM_OPCLASS_ATTENTION: return "attention";
  case LOOM_OPCLASS_COMPOSITE: return "composite";
  case LOOM_OPCLASS_COMM: return "comm";
  case LOOM_OPCLASS_WINDOW: return "window";
  }
  return "?";
}

static void print_attr_default(const loom_attr_spec *a) {
  printf("`%s`", a->name);
  if (a->required) {
    printf(" (required)");
  } else if (a->kind == LOOM_ATTR_FLOAT) {
    printf(" = %g", a->def_f);
  } else if (a->kind == LOOM_ATTR_INTS) {
    printf(" = []");
  } else if (a->fmt == LOOM_ATTR_FMT_BOOL) {
    printf(" = %s", a->def_i ? "true" : "false");
  } else if (a->fmt == LOOM_ATTR_FMT_DTYPE &&
             loom_dtype_name((loom_dtype)a->def_i)) {
    printf(" = %s", loom_dtype_name((loom_dtype)a->def_i));
  } else {
    printf(" = %lld", (long long)a->def_i);
  }
}

static int cmd_ops(int argc, char **argv) {
  if (argc > 1) {
    if (is_help(argv[1])) {
      fputs(usage_ops, stdout);
      return 0;
    }
    return usage_error(usage_ops, "unexpected argument '%s'", argv[1]);
  }
  printf("| op | class | inputs | outputs | attributes (default) | gradient |\n");
  printf("|---|---|---|---|---|---|\n");
  /* Grouped by class, in list order within one: the op list itself is
   * append-only (loom.h), so its order is history, not a grouping. */
  loom_op order[LOOM_OP_COUNT];
  int n_ops = 0;
  for (int cls = 0; cls <= LOOM_OPCLASS_COMM; cls++)
    for (int op = 0; op < LOOM_OP_COUNT; op++)
      if (loom_op_get((loom_op)op) && (int)loom_op_get((loom_op)op)->cls == cls)
        order[n_ops++] = (loom_op)op;
  for (int i = 0; i < n_ops; i++) {
    const loom_op_def *d = loom_op_get(order[i]);
    printf("| `%s` | %s | ", d->name, class_name(d->cls));
    /* The notation of docs/TEXT_IR.md: "2", "1-3", "1+". */
    if (d->max_in < 0)
      printf("%d+", d->min_in);
    else if (d->max_in != d->min_in)
      printf("%d-%d", d->min_in, d->max_in);
    else
      printf("%d", d->min_in);
    if (d->n_out < 0)
      printf(" | 1+ | "); /* variadic: a comm op's global form */
    else
      printf(" | %d | ", d->n_out);
    for (int32_t a = 0; a < d->n_attrs; a++) {
      if (a) printf(", ");
      print_attr_default(&d->attrs[a]);
    }
    if (d->n_attrs == 0) printf("—");
    printf(" | %s |\n", d->cls == LOOM_OPCLASS_COMPOSITE ? "via decomposition"
                        : d->grad                         ? "yes"
                                                          : "—");
  }
  return 0;
}

/* ---- loom run --------------------------------------------------------------- */

typedef struct run_input {
  const char *name, *path;
  bool used;
} run_input;

/* A one-line summary: "y: f32[4, 16] -> out/y.npy  [0.5, -1, ...]". */
static void print_summary(const char *name, const loom_tensor *t,
                          const char *path) {
  loom_type ty = {.dtype = loom_tensor_dtype(t), .rank = loom_tensor_rank(t)};
  for (int32_t d = 0; d < ty.rank; d++) ty.shape[d] = loom_tensor_dim(t, d);
  char buf[160];
  printf("%s: %s -> %s  [", shown(name), loom_type_str(&ty, buf, sizeof buf), shown(path));
  int64_t n = loom_tensor_numel(t), shown = n < 6 ? n : 6;
  for (int64_t i = 0; i < shown; i++)
    printf("%s%.6g", i ? ", " : "", loom_load(ty.dtype, loom_tensor_data(t), i));
  printf("%s]\n", n > shown ? ", ..." : "");
}

/* An output name must stay inside DIR: no '/', not "." or "..". */
static bool safe_file_name(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
         !loom_has_control_bytes(s);
}

static int run_graph(loom_ctx *ctx, const char *file, run_input *ins,
                     int n_ins, const char *out_dir, const char *backend,
                     loom_fusion_mode fusion, bool force) {
  loom_graph *g = NULL;
  loom_session *s = NULL;
  loom_tensor **inputs = NULL, **outputs = NULL;
  char **paths = NULL;
  int32_t n_in = 0, n_out = 0;
  int rc = 1;
  char buf[160], buf2[160];

  if (loom_graph_load(ctx, file, &g) != LOOM_STATUS_OK) goto fail;
  n_in = loom_graph_num_inputs(g);
  n_out = loom_graph_num_outputs(g);
  inputs = calloc((size_t)n_in + 1, sizeof *inputs);
  outputs = calloc((size_t)n_out + 1, sizeof *outputs);
  paths = calloc((size_t)n_out + 1, sizeof *paths);
  if (!inputs || !outputs || !paths) {
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }

  /* Match the --input flags to the graph's inputs: report every missing
   * input at once, since the user will want to fix them together. */
  char missing[512] = "";
  for (int32_t i = 0; i < n_in; i++) {
    const char *name = loom_graph_input_name(g, i);
    int k = 0;
    while (k < n_ins && strcmp(ins[k].name, name) != 0) k++;
    if (k == n_ins) {
      size_t m = strlen(missing);
      snprintf(missing + m, sizeof missing - m, "%s%s (%s)", m ? ", " : "",
               name,
               value_type_str(g, loom_graph_input_value(g, i), buf, sizeof buf));
      continue;
    }
    ins[k].used = true;
  }
  for (int k = 0; k < n_ins; k++)
    if (!ins[k].used) {
      loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 "%s has no input named '%s' (see 'loom show %s')", file,
                 ins[k].name, file);
      goto fail;
    }
  if (missing[0]) {
    loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               "no --input given for graph input %s", missing);
    goto fail;
  }

  /* Refuse to overwrite before any work is done. A missing directory is
   * made only once there is something to put in it. */
  struct stat st;
  bool make_dir = false;
  if (stat(out_dir, &st) != 0) {
    if (errno != ENOENT) {
      loom_error(ctx, LOOM_STATUS_IO, "cannot use output directory '%s': %s",
                 out_dir, strerror(errno));
      goto fail;
    }
    /* it can be made: its parent exists and is writable */
    if (loom_file_check_output(ctx, out_dir, 0) != LOOM_STATUS_OK) goto fail;
    make_dir = true;
  } else if (!S_ISDIR(st.st_mode)) {
    loom_error(ctx, LOOM_STATUS_IO, "'%s' is not a directory", out_dir);
    goto fail;
  }
  for (int32_t i = 0; i < n_out; i++) {
    const char *name = loom_graph_output_name(g, i);
    if (!safe_file_name(name)) {
      loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 "output name '%s' cannot be used as a file name (a '/', '.', '..', "
                 "or control bytes)",
                 name);
      goto fail;
    }
    size_t len = strlen(out_dir) + strlen(name) + 6;
    paths[i] = malloc(len);
    if (!paths[i]) {
      loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    snprintf(paths[i], len, "%s/%s.npy", out_dir, name);
    for (int32_t j = 0; j < i; j++)
      if (strcmp(paths[i], paths[j]) == 0) {
        loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                   "two outputs are named '%s'", name);
        goto fail;
      }
    /* writable now, not found out after the graph ran */
    if (!make_dir && loom_file_check_output(ctx, paths[i],
                                            LOOM_FILE_HINT_FORCE | (force ? LOOM_FILE_REPLACE : 0)))
      goto fail;
  }

  for (int32_t i = 0; i < n_in; i++) {
    const char *name = loom_graph_input_name(g, i);
    int k = 0;
    while (strcmp(ins[k].name, name) != 0) k++;
    if (loom_tensor_load_npy(ctx, ins[k].path, &inputs[i]) != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "input '%s'", name);
      goto fail;
    }
    loom_type want = *loom_value_type(g, loom_graph_input_value(g, i));
    loom_type have = {.dtype = loom_tensor_dtype(inputs[i]),
                      .rank = loom_tensor_rank(inputs[i])};
    for (int32_t d = 0; d < have.rank; d++)
      have.shape[d] = loom_tensor_dim(inputs[i], d);
    if (!loom_type_equal(&want, &have)) {
      loom_error(ctx,
                 want.dtype != have.dtype ? LOOM_STATUS_DTYPE_MISMATCH
                                          : LOOM_STATUS_SHAPE_MISMATCH,
                 "input '%s': %s holds %s but the graph wants %s", name,
                 ins[k].path, loom_type_str(&have, buf, sizeof buf),
                 loom_type_str(&want, buf2, sizeof buf2));
      goto fail;
    }
  }

  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  if (loom_session_new(ctx, g, &opts, &s) != LOOM_STATUS_OK) goto fail;
  if (loom_session_warning(s)[0])
    fprintf(stderr, "loom: warning: %s\n", loom_session_warning(s));
  if (loom_session_run(s, n_in, (const loom_tensor *const *)inputs, n_out,
                       outputs) != LOOM_STATUS_OK)
    goto fail;
  if (make_dir && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
    loom_error(ctx, LOOM_STATUS_IO, "cannot create output directory '%s': %s",
               out_dir, strerror(errno));
    goto fail;
  }
  for (int32_t i = 0; i < n_out; i++) {
    if (loom_tensor_save_npy(ctx, outputs[i], paths[i]) != LOOM_STATUS_OK)
      goto fail;
    print_summary(loom_graph_output_name(g, i), outputs[i], paths[i]);
  }
  rc = 0;
  goto done;

fail:
  fail(ctx);
done:
  for (int32_t i = 0; inputs && i < n_in; i++) loom_tensor_free(inputs[i]);
  for (int32_t i = 0; outputs && i < n_out; i++) loom_tensor_free(outputs[i]);
  for (int32_t i = 0; paths && i < n_out; i++) free(paths[i]);
  free(inputs);
  free(outputs);
  free(paths);
  loom_session_free(s);
  loom_graph_free(g);
  return rc;
}

static int cmd_run(int argc, char **argv) {
  const char *file = NULL, *out_dir = ".", *backend = LOOM_BACKEND_DEFAULT;
  loom_fusion_mode fusion = LOOM_FUSION_STITCH;
  long threads = 0;
  bool force = false;
  run_input *ins = calloc((size_t)argc, sizeof *ins);
  int n_ins = 0, rc = EXIT_USAGE;
  if (!ins) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (is_help(a)) {
      fputs(usage_run, stdout);
      rc = 0;
      goto done;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--input", &v)) != 0) {
      if (m < 0) goto missing;
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1]) {
        rc = usage_error(usage_run, "--input wants NAME=PATH, got '%s'", v);
        goto done;
      }
      /* Cut NAME in place: argv strings are ours to modify. */
      ((char *)eq)[0] = '\0';
      for (int k = 0; k < n_ins; k++)
        if (strcmp(ins[k].name, v) == 0) {
          rc = usage_error(usage_run, "--input '%s' is given twice", v);
          goto done;
        }
      ins[n_ins].name = v;
      ins[n_ins++].path = eq + 1;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--out", &v)) != 0) {
      if (m < 0) goto missing;
      if (!v[0]) {
        rc = usage_error(usage_run, "--out wants a directory");
        goto done;
      }
      out_dir = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0) goto missing;
      if (!loom_backend_name_known(v)) {
        rc = usage_error(usage_run, "unknown backend '%s' (%s)", v, loom_backend_names());
        goto done;
      }
      backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0) goto missing;
      if (loom_fusion_mode_from_name(v, &fusion)) {
        rc = usage_error(usage_run, "unknown fusion mode '%s' (known: " LOOM_FUSION_MODE_NAMES ")",
                         v);
        goto done;
      }
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0) goto missing;
      if (!loom_cli_parse_long(v, 0, 4096, &threads)) {
        rc = usage_error(usage_run, "--threads wants a number in [0, 4096], "
                                    "got '%s'", v);
        goto done;
      }
    } else if (strcmp(a, "--force") == 0) {
      force = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      rc = usage_error(usage_run, "unknown flag '%s' for 'run'", a);
      goto done;
    } else if (file) {
      rc = usage_error(usage_run, "unexpected argument '%s'", a);
      goto done;
    } else {
      file = a;
    }
    continue;
  missing:
    rc = usage_error(usage_run, "%s needs a value", a);
    goto done;
  }
  if (!file) {
    rc = usage_error(usage_run, "run needs a FILE");
    goto done;
  }

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: out of memory\n");
    rc = 1;
    goto done;
  }
  if (loom_ctx_set_threads(ctx, (int32_t)threads) != LOOM_STATUS_OK)
    rc = fail(ctx);
  else
    rc = run_graph(ctx, file, ins, n_ins, out_dir, backend, fusion, force);
  loom_ctx_free(ctx);
done:
  free(ins);
  return rc;
}

/* ---- loom compile ------------------------------------------------------------ */

/* "12345 (12.1 KiB)" */
static void print_bytes(FILE *f, int64_t b) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)b;
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    u++;
  }
  if (u == 0)
    fprintf(f, "%lld B", (long long)b);
  else
    fprintf(f, "%lld (%.1f %s)", (long long)b, x, unit[u]);
}

static void print_compile_summary(FILE *f, const char *file, loom_fusion_mode fusion,
                                  const loom_session_stats *st) {
  fprintf(f, "%s: fusion %s\n", file, loom_fusion_mode_name(fusion));
  fprintf(f, "  primitive ops   %d\n", st->n_primitive_ops);
  fprintf(f, "  memory ops      %d\n", st->n_memory_ops);
  fprintf(f, "  kernels         %d\n", st->n_kernels);
  fprintf(f, "  GEMMs           %d\n", st->n_gemm);
  fprintf(f, "  eager nodes     %d\n", st->n_eager);
  fprintf(f, "  modeled bytes   ");
  print_bytes(f, st->modeled_bytes);
  fprintf(f, "\n  peak bytes      ");
  print_bytes(f, st->peak_bytes);
  fprintf(f, "\n  compile time    %.3f s\n", st->compile_seconds);
  fprintf(f, "  kernel cache    %s\n",
          st->n_kernels == 0 ? "-" : st->cache_hit ? "hit" : "miss");
}

/* Writes text to stdout, ending with a newline. */
static void put_text(const char *text) {
  fputs(text, stdout);
  if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
}

/* The pictures `loom compile` writes: DOT text, and renderings of it. */
typedef struct compile_pictures {
  const char *dot, *svg, *png;
  bool force;
} compile_pictures;

static bool want_pictures(const compile_pictures *p) { return p->dot || p->svg || p->png; }

/* Checks every picture's path can be written, before any work. */
static loom_status check_pictures(loom_ctx *ctx, const compile_pictures *p) {
  unsigned flags = LOOM_FILE_HINT_FORCE | (p->force ? LOOM_FILE_REPLACE : 0);
  const char *paths[] = {p->dot, p->svg, p->png};
  for (size_t i = 0; i < 3; i++)
    if (paths[i]) LOOM_TRY(loom_file_check_output(ctx, paths[i], flags));
  if ((p->svg || p->png) && !loom_cli_have_graphviz())
    return loom_cli_render_dot(ctx, "", p->svg ? "svg" : "png", p->svg ? p->svg : p->png, flags);
  return LOOM_STATUS_OK;
}

static loom_status write_pictures(loom_ctx *ctx, const loom_session *s, const compile_pictures *p) {
  char *dot = NULL;
  unsigned flags = LOOM_FILE_HINT_FORCE | (p->force ? LOOM_FILE_REPLACE : 0);
  loom_status st = loom_session_describe(s, LOOM_ARTIFACT_DOT, &dot);
  if (!st && p->dot) st = loom_file_write_atomic(ctx, p->dot, dot, strlen(dot), flags);
  if (!st && p->svg) st = loom_cli_render_dot(ctx, dot, "svg", p->svg, flags);
  if (!st && p->png) st = loom_cli_render_dot(ctx, dot, "png", p->png, flags);
  loom_free(dot);
  return st;
}

static int cmd_compile(int argc, char **argv) {
  const char *file = NULL, *emit = NULL, *dump = NULL, *backend = LOOM_BACKEND_DEFAULT;
  loom_fusion_mode fusion = LOOM_FUSION_STITCH;
  compile_pictures pics = {0};
  long threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (is_help(a)) {
      fputs(usage_compile, stdout);
      return 0;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0) return usage_error(usage_compile, "%s needs a value", a);
      if (loom_fusion_mode_from_name(v, &fusion))
        return usage_error(usage_compile,
                           "unknown fusion mode '%s' (known: " LOOM_FUSION_MODE_NAMES ")", v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--emit", &v)) != 0) {
      if (m < 0) return usage_error(usage_compile, "%s needs a value", a);
      if (strcmp(v, "c") && strcmp(v, "kernels") && strcmp(v, "program"))
        return usage_error(usage_compile, "--emit wants c, kernels or program, got '%s'", v);
      emit = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0) return usage_error(usage_compile, "%s needs a value", a);
      if (!loom_backend_name_known(v))
        return usage_error(usage_compile, "unknown backend '%s' (%s)", v, loom_backend_names());
      backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--dump-after", &v)) != 0) {
      if (m < 0) return usage_error(usage_compile, "%s needs a value", a);
      if (strcmp(v, "decompose") && strcmp(v, "fuse") && strcmp(v, "lower"))
        return usage_error(usage_compile,
                           "--dump-after wants decompose, fuse or lower, got '%s'", v);
      dump = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0) return usage_error(usage_compile, "%s needs a value", a);
      if (!loom_cli_parse_long(v, 0, 4096, &threads))
        return usage_error(usage_compile, "--threads wants a number in [0, 4096], got '%s'", v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--dot", &v)) != 0) {
      if (m < 0 || !*v) return usage_error(usage_compile, "%s needs a file name", a);
      pics.dot = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--svg", &v)) != 0) {
      if (m < 0 || !*v) return usage_error(usage_compile, "%s needs a file name", a);
      pics.svg = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--png", &v)) != 0) {
      if (m < 0 || !*v) return usage_error(usage_compile, "%s needs a file name", a);
      pics.png = v;
    } else if (strcmp(a, "--force") == 0) {
      pics.force = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      return usage_error(usage_compile, "unknown flag '%s' for 'compile'", a);
    } else if (file) {
      return usage_error(usage_compile, "unexpected argument '%s'", a);
    } else {
      file = a;
    }
  }
  if (!file) return usage_error(usage_compile, "compile needs a FILE");
  /* what each artifact is: decompose, program listing, kernel IR, C */
  bool want_decompose = dump && strcmp(dump, "decompose") == 0;
  bool want_program = (dump && strcmp(dump, "fuse") == 0) || (emit && strcmp(emit, "program") == 0);
  bool want_kernels = (dump && strcmp(dump, "lower") == 0) || (emit && strcmp(emit, "kernels") == 0);
  bool want_c = emit && strcmp(emit, "c") == 0;
  if (fusion == LOOM_FUSION_EAGER && (want_program || want_kernels || want_c))
    return usage_error(usage_compile, "%s %s needs a fusion mode other than eager",
                       emit ? "--emit" : "--dump-after", emit ? emit : dump);
  if (fusion == LOOM_FUSION_EAGER && want_pictures(&pics))
    return usage_error(usage_compile, "%s needs a fusion mode other than eager (no program to draw)",
                       pics.dot ? "--dot" : pics.svg ? "--svg" : "--png");

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  loom_graph *g = NULL;
  loom_session *s = NULL;
  char *text = NULL;
  int rc = 1;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  if (check_pictures(ctx, &pics) != LOOM_STATUS_OK ||
      loom_ctx_set_threads(ctx, (int32_t)threads) != LOOM_STATUS_OK ||
      loom_graph_load(ctx, file, &g) != LOOM_STATUS_OK ||
      loom_session_new(ctx, g, &opts, &s) != LOOM_STATUS_OK) {
    rc = fail(ctx);
    goto done;
  }
  if (loom_session_warning(s)[0])
    fprintf(stderr, "loom: warning: %s\n", loom_session_warning(s));
  /* each artifact as text from the session, in the order asked for */
  const struct {
    bool wanted;
    loom_session_artifact what;
  } show[] = {{want_decompose, LOOM_ARTIFACT_GRAPH},
              {want_program, LOOM_ARTIFACT_PROGRAM},
              {want_kernels, LOOM_ARTIFACT_KERNELS},
              {want_c, LOOM_ARTIFACT_SOURCE}};
  for (size_t i = 0; i < sizeof show / sizeof show[0]; i++) {
    if (!show[i].wanted) continue;
    loom_free(text);
    text = NULL;
    loom_status ds = loom_session_describe(s, show[i].what, &text);
    if (ds == LOOM_STATUS_UNSUPPORTED) {
      fprintf(stderr, "loom: no fused program to print (%s)\n",
              loom_session_warning(s)[0] ? loom_session_warning(s) : loom_ctx_error(ctx));
      goto done;
    }
    if (ds != LOOM_STATUS_OK) {
      rc = fail(ctx);
      goto done;
    }
    if (show[i].what == LOOM_ARTIFACT_SOURCE && !text[0])
      put_text("/* no generated kernels: every step is a GEMM or an eager node */\n");
    else
      put_text(text);
  }
  if (want_pictures(&pics)) {
    loom_status ps = write_pictures(ctx, s, &pics);
    if (ps == LOOM_STATUS_UNSUPPORTED) {
      fprintf(stderr, "loom: no fused program to draw (%s)\n",
              loom_session_warning(s)[0] ? loom_session_warning(s) : loom_ctx_error(ctx));
      goto done;
    }
    if (ps != LOOM_STATUS_OK) {
      rc = fail(ctx);
      goto done;
    }
  }
  loom_session_stats st;
  loom_session_get_stats(s, &st);
  print_compile_summary(dump || emit ? stderr : stdout, file, fusion, &st);
  rc = 0;
done:
  loom_free(text);
  loom_session_free(s);
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return rc;
}

/* ---- loom bench ---------------------------------------------------------------- */

static int cmd_bench(int argc, char **argv) { return loom_bench_main(argc, argv); }

/* ---- loom devices -------------------------------------------------------------- */

/* Every registered backend (created, or why not), the OpenCL devices and
 * NVRTC. */
static int cmd_devices(int argc, char **argv) {
  if (argc > 1) {
    if (is_help(argv[1])) {
      fputs("usage: loom devices\n\nLists every backend with its device (or why it is "
            "unavailable),\nthe OpenCL and CUDA devices present and whether NVRTC compiles CUDA C.\n",
            stdout);
      return 0;
    }
    return usage_error(usage_main, "unexpected argument '%s' for 'devices'", argv[1]);
  }
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  printf("backends:\n");
  const char *names = loom_backend_names();
  while (*names) {
    size_t n = strcspn(names, ",");
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)n, names);
    names += n;
    names += strspn(names, ", ");
    loom_backend *b = NULL;
    if (loom_backend_new(ctx, name, &b) == LOOM_STATUS_OK) {
      char dev[256] = "host CPU";
      if (b->iface->device) b->iface->device(b->context, dev, sizeof dev);
      printf("  %-8s %s\n", name, dev);
    } else {
      printf("  %-8s unavailable: %s\n", name, loom_ctx_error(ctx));
    }
    loom_backend_free(b);
  }
  char *text = NULL;
  if (loom_ocl_list_devices(ctx, &text) == LOOM_STATUS_OK)
    printf("OpenCL devices:\n%s", text[0] ? text : "  (none)\n");
  else
    printf("OpenCL: %s\n", loom_ctx_error(ctx));
  free(text);
  if (loom_cu_list_devices(ctx, &text) == LOOM_STATUS_OK)
    printf("CUDA devices:\n%s", text[0] ? text : "  (none)\n");
  else
    printf("CUDA: %s\n", loom_ctx_error(ctx));
  free(text);
  char ver[32];
  if (loom_nvrtc_version(ctx, ver, sizeof ver) == LOOM_STATUS_OK)
    printf("NVRTC %s compiles Loom's generated CUDA C\n", ver);
  else
    printf("NVRTC: %s\n", loom_ctx_error(ctx));
  loom_ctx_free(ctx);
  return 0;
}

/* ---- main ------------------------------------------------------------------- */

static const struct {
  const char *name;
  const char *usage; /* NULL: the command prints its own help */
} commands[] = {
    {"train", NULL},
    {"run", usage_run},
    {"compile", usage_compile},
    {"show", usage_show},
    {"ops", usage_ops},
};

static int cmd_help(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (argc > 2) return usage_error(usage_main, "unexpected argument '%s'", argv[2]);
  if (strcmp(argv[1], "train") == 0) {
    char a0[] = "train", a1[] = "--help";
    char *targv[] = {a0, a1, NULL};
    return loom_train_main(2, targv);
  }
  if (strcmp(argv[1], "bench") == 0) {
    char a0[] = "bench", a1[] = "--help";
    char *bargv[] = {a0, a1, NULL};
    return cmd_bench(2, bargv);
  }
  if (strcmp(argv[1], "plan") == 0) {
    char a0[] = "plan", a1[] = "--help";
    char *pargv[] = {a0, a1, NULL};
    return loom_cli_plan_main(2, pargv);
  }
  if (strcmp(argv[1], "cluster") == 0) {
    char a0[] = "cluster", a1[] = "--help";
    char *cargv[] = {a0, a1, NULL};
    return loom_cli_cluster_main(2, cargv);
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (commands[i].usage && strcmp(argv[1], commands[i].name) == 0) {
      fputs(commands[i].usage, stdout);
      return 0;
    }
  if (strcmp(argv[1], "help") == 0) {
    fputs(usage_main, stdout);
    return 0;
  }
  return usage_error(usage_main, "unknown command '%s'", argv[1]);
}

int main(int argc, char **argv) {
  if (argc < 2) return usage_error(usage_main, "no command given");
  const char *cmd = argv[1];
  if (is_help(cmd)) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("loom %s\n", LOOM_VERSION_STRING);
    return 0;
  }
  /* Each command sees its own name as argv[0]. ONNX models and tests
   * (tools/cli_onnx.c) first. */
  if (loom_cli_onnx_wants(argc - 1, argv + 1)) return loom_cli_onnx_main(argc - 1, argv + 1);
  if (strcmp(cmd, "train") == 0) return loom_train_main(argc - 1, argv + 1);
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
  if (strcmp(cmd, "compile") == 0) return cmd_compile(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
  if (strcmp(cmd, "show") == 0) return cmd_show(argc - 1, argv + 1);
  if (strcmp(cmd, "ops") == 0) return cmd_ops(argc - 1, argv + 1);
  if (strcmp(cmd, "plan") == 0) return loom_cli_plan_main(argc - 1, argv + 1);
  if (strcmp(cmd, "cluster") == 0) return loom_cli_cluster_main(argc - 1, argv + 1);
  if (strcmp(cmd, "devices") == 0) return cmd_devices(argc - 1, argv + 1);
  if (strcmp(cmd, "help") == 0) return cmd_help(argc - 1, argv + 1);
  if (cmd[0] == '-')
    return usage_error(usage_main, "unknown option '%s'", cmd);
  return usage_error(usage_main, "unknown command '%s'", cmd);
}

/*
 * loom onnx-test DIR: the ONNX backend node tests (a folder per test:
 * model.onnx and test_data_set_N/{input,output}_K.pb), each imported with
 * its inputs, run on a backend and compared with the expected outputs;
 * and loom run / show / compile for a .onnx model (loom bench takes one as
 * any graph file: bench/wl_file.c).
 */
#define _DEFAULT_SOURCE /* DT_DIR */

#include "cli.h"
#include "core/clock.h"
#include "core/file.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "onnx/feeds.h"
#include "onnx/import.h"
#include "onnx/model.h"
#include "runtime/backend.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* Paths too long for their buffers are cut, and then not found: an error
 * message, not a fault. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool loom_cli_onnx_wants(int argc, char **argv) {
  if (argc < 1) return false;
  if (strcmp(argv[0], "onnx-test") == 0) return true;
  if (strcmp(argv[0], "run") && strcmp(argv[0], "show") && strcmp(argv[0], "compile"))
    return false;
  for (int i = 1; i < argc; i++)
    if (argv[i][0] != '-' && ends_with(argv[i], ".onnx")) return true;
  return false;
}

/* ---- tensors from files -------------------------------------------------- */

/* ---- comparing outputs ---------------------------------------------------- */

/* Within the ONNX backend tests' tolerance (rtol 1e-3, atol 1e-7; NaN
 * equals NaN); integers and bools exactly. */
static bool same_values(const loom_tensor *got, const loom_tensor *want, char *why, size_t n) {
  loom_dtype dt = loom_tensor_dtype(want);
  char b1[160], b2[160];
  loom_type tg = {.dtype = loom_tensor_dtype(got), .rank = loom_tensor_rank(got)};
  loom_type tw = {.dtype = dt, .rank = loom_tensor_rank(want)};
  for (int32_t d = 0; d < tg.rank; d++) tg.shape[d] = loom_tensor_dim(got, d);
  for (int32_t d = 0; d < tw.rank; d++) tw.shape[d] = loom_tensor_dim(want, d);
  if (!loom_type_equal(&tg, &tw)) {
    snprintf(why, n, "got %s, want %s", loom_type_str(&tg, b1, sizeof b1), loom_type_str(&tw, b2, sizeof b2));
    return false;
  }
  int64_t numel = loom_tensor_numel(want);
  double rtol = dt == LOOM_DTYPE_F16 || dt == LOOM_DTYPE_BF16 ? 1e-2 : 1e-3, atol = 1e-7;
  if (dt == LOOM_DTYPE_F16 || dt == LOOM_DTYPE_BF16) atol = 1e-3;
  for (int64_t i = 0; i < numel; i++) {
    if (loom_dtype_is_float(dt)) {
      double a = loom_load(dt, loom_tensor_data(got), i), b = loom_load(dt, loom_tensor_data(want), i);
      if (isnan(a) && isnan(b)) continue;
      if (a == b) continue;
      if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
        snprintf(why, n, "element %lld: got %.9g, want %.9g", (long long)i, a, b);
        return false;
      }
    } else {
      int64_t a = loom_load_i64(dt, loom_tensor_data(got), i), b = loom_load_i64(dt, loom_tensor_data(want), i);
      if (a != b) {
        snprintf(why, n, "element %lld: got %lld, want %lld", (long long)i, (long long)a, (long long)b);
        return false;
      }
    }
  }
  return true;
}

/* ---- onnx-test ------------------------------------------------------------ */

typedef enum { T_PASS, T_FAIL, T_UNSUPPORTED } test_result;

typedef struct op_total {
  char name[64];
  int n[3];
} op_total;

typedef struct test_opts {
  const char *backend;
  loom_fusion_mode fusion;
  bool verbose;
} test_opts;

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir starting with prefix, sorted. */
static int list_dir(const char *dir, const char *prefix, char ***out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0, cap = 0;
  char **names = NULL;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(names, sizeof *names * (size_t)cap);
      if (!nn) break;
      names = nn;
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  *out = names;
  return n;
}

static void free_list(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* One data set of one test. */
static test_result run_data_set(loom_ctx *ctx, const onnx_model *m, const char *set_dir,
                                const test_opts *o, char *why, size_t why_n) {
  char **files = NULL, path[4096];
  int n_files = list_dir(set_dir, "", &files);
  loom_tensor *ins[64] = {0}, *want[64] = {0}, *got[64] = {0};
  char *in_names[64] = {0};
  onnx_feed feeds[64];
  int n_in = 0, n_want = 0;
  onnx_program *p = NULL;
  loom_session *s = NULL;
  test_result r = T_FAIL;
  loom_status st = LOOM_STATUS_OK;
  /* input_K.pb and output_K.pb, K in order */
  for (int k = 0; k < 64 && !st; k++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", set_dir, k);
    struct stat sb;
    if (stat(path, &sb) != 0) break;
    st = onnx_tensor_load_file(ctx, path, &ins[k], &in_names[k]);
    n_in = k + 1;
  }
  for (int k = 0; k < 64 && !st; k++) {
    snprintf(path, sizeof path, "%s/output_%d.pb", set_dir, k);
    struct stat sb;
    if (stat(path, &sb) != 0) break;
    st = onnx_tensor_load_file(ctx, path, &want[k], NULL);
    n_want = k + 1;
  }
  if (st) {
    r = st == LOOM_STATUS_UNSUPPORTED ? T_UNSUPPORTED : T_FAIL;
    snprintf(why, why_n, "%s", loom_ctx_error(ctx));
    goto done;
  }
  /* unnamed inputs are the graph's inputs (not initializers) in order */
  const onnx_graph *g = m->graph;
  for (int k = 0, gi = 0; k < n_in; k++) {
    if (!in_names[k]) {
      while (gi < g->n_inputs) {
        bool init = false;
        for (int32_t j = 0; j < g->n_init; j++) init |= strcmp(g->init[j].name, g->inputs[gi].name) == 0;
        if (!init) break;
        gi++;
      }
      if (gi >= g->n_inputs) {
        snprintf(why, why_n, "more inputs than the graph has");
        goto done;
      }
      in_names[k] = strdup(g->inputs[gi++].name);
    }
    feeds[k] = (onnx_feed){in_names[k], ins[k]};
  }
  st = onnx_import(ctx, m, n_in, feeds, &p);
  if (!st) {
    if (loom_graph_num_outputs(p->g) != n_want) {
      snprintf(why, why_n, "%d outputs, %d expected", loom_graph_num_outputs(p->g), n_want);
      goto done;
    }
    loom_session_options so = LOOM_SESSION_OPTIONS(.backend = o->backend, .fusion = o->fusion);
    st = onnx_program_session(ctx, p, &so, &s);
  }
  if (!st) st = onnx_program_run(ctx, p, s, n_in, feeds, got);
  if (st) {
    r = st == LOOM_STATUS_UNSUPPORTED ? T_UNSUPPORTED : T_FAIL;
    snprintf(why, why_n, "%s", loom_ctx_error(ctx));
    goto done;
  }
  r = T_PASS;
  for (int k = 0; k < n_want && r == T_PASS; k++) {
    char w[256];
    if (!same_values(got[k], want[k], w, sizeof w)) {
      snprintf(why, why_n, "output %d (%s): %s", k, loom_graph_output_name(p->g, k), w);
      r = T_FAIL;
    }
  }
done:
  for (int k = 0; k < 64; k++) {
    loom_tensor_free(ins[k]);
    loom_tensor_free(want[k]);
    loom_tensor_free(got[k]);
    free(in_names[k]);
  }
  loom_session_free(s);
  onnx_program_free(p);
  free_list(files, n_files);
  return r;
}

static test_result run_test(loom_ctx *ctx, const char *dir, const test_opts *o, char *why, size_t why_n,
                            onnx_model **model) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  *model = NULL;
  if (onnx_model_load(ctx, path, model)) {
    snprintf(why, why_n, "%s", loom_ctx_error(ctx));
    return T_FAIL;
  }
  char **sets = NULL;
  int n = list_dir(dir, "test_data_set_", &sets);
  test_result r = n > 0 ? T_PASS : T_FAIL;
  if (n <= 0) snprintf(why, why_n, "no test_data_set_N folder");
  for (int i = 0; i < n && r == T_PASS; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, sets[i]);
    r = run_data_set(ctx, *model, path, o, why, why_n);
  }
  free_list(sets, n);
  return r;
}

static const char usage_test[] =
    "usage: loom onnx-test DIR [--backend NAME] [--fusion MODE] [--only SUBSTRING] [--verbose]\n"
    "\n"
    "Runs the ONNX node tests in DIR (a folder per test: model.onnx and\n"
    "test_data_set_N/input_K.pb, output_K.pb; Debian's libonnx-testdata has\n"
    "them under /usr/share/libonnx-testdata/data/node): each model is\n"
    "imported with the test's inputs, run, and its outputs compared with the\n"
    "expected ones (rtol 1e-3, atol 1e-7). Prints pass, fail or unsupported\n"
    "per test, then the totals per op type and overall. Exit status 1 when a\n"
    "supported test fails.\n"
    "\n"
    "  --backend NAME   one of" LOOM_BACKEND_HELP_NAMES " (default " LOOM_BACKEND_DEFAULT ")\n"
    "  --fusion MODE    how the cpu backend makes code (" LOOM_FUSION_MODE_NAMES ")\n"
    "  --only TEXT      only the tests whose folder name contains TEXT\n"
    "  --shard K/N      only every N-th test (by name), starting at the K-th\n"
    "  --verbose        the reason for every unsupported test too\n"
    "  -h, --help       print this help\n";

static int cmd_onnx_test(int argc, char **argv) {
  const char *dir = NULL, *only = NULL;
  long shard_k = 0, shard_n = 1;
  test_opts o = {.backend = LOOM_BACKEND_DEFAULT, .fusion = LOOM_FUSION_STITCH};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (loom_cli_is_help(a)) {
      fputs(usage_test, stdout);
      return 0;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0 || !loom_backend_name_known(v)) goto bad;
      o.backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0 || loom_fusion_mode_from_name(v, &o.fusion)) goto bad;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--only", &v)) != 0) {
      if (m < 0) goto bad;
      only = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--shard", &v)) != 0) {
      const char *slash = m > 0 ? strchr(v, '/') : NULL;
      char k[32];
      if (!slash || slash - v >= (long)sizeof k) goto bad;
      snprintf(k, sizeof k, "%.*s", (int)(slash - v), v);
      if (!loom_cli_parse_long(slash + 1, 1, 1000000, &shard_n) || !loom_cli_parse_long(k, 0, shard_n - 1, &shard_k))
        goto bad;
    } else if (strcmp(a, "--verbose") == 0) {
      o.verbose = true;
    } else if (a[0] == '-' || dir) {
      goto bad;
    } else {
      dir = a;
    }
    continue;
  bad:
    fprintf(stderr, "loom: bad argument '%s' for onnx-test\n%.*s\n", a, (int)(strchr(usage_test, '\n') - usage_test),
            usage_test);
    return LOOM_CLI_EXIT_USAGE;
  }
  if (!dir) {
    fprintf(stderr, "loom: onnx-test needs a DIR\n%s", usage_test);
    return LOOM_CLI_EXIT_USAGE;
  }
  char **tests = NULL;
  int n = list_dir(dir, "", &tests);
  if (n < 0) {
    fprintf(stderr, "loom: cannot read '%s': %s\n", dir, strerror(errno));
    return 1;
  }
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  op_total *ops = calloc(512, sizeof *ops);
  int n_ops = 0, total[3] = {0};
  for (int i = 0; i < n; i++) {
    if ((only && !strstr(tests[i], only)) || i % shard_n != shard_k) continue;
    char path[4096], why[1024] = "";
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, tests[i]);
    struct stat sb;
    if (stat(path, &sb) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, tests[i]);
    onnx_model *m = NULL;
    test_result r = run_test(ctx, path, &o, why, sizeof why, &m);
    static const char *const label[3] = {"pass", "FAIL", "unsupported"};
    if (r == T_PASS || (r == T_UNSUPPORTED && !o.verbose))
      printf("%-11s %s\n", label[r], tests[i]);
    else {
      char esc[1100];
      printf("%-11s %s: %s\n", label[r], tests[i], loom_escape_message(why, esc, sizeof esc));
    }
    fflush(stdout);
    total[r]++;
    /* the op types of the model, each counted once per test */
    for (int32_t k = 0; m && m->graph && k < m->graph->n_nodes; k++) {
      const char *op = m->graph->nodes[k].op_type;
      bool dup = false;
      for (int32_t j = 0; j < k && !dup; j++) dup = strcmp(m->graph->nodes[j].op_type, op) == 0;
      if (dup) continue;
      int j = 0;
      while (j < n_ops && strcmp(ops[j].name, op) != 0) j++;
      if (j == n_ops && n_ops < 512) snprintf(ops[n_ops++].name, sizeof ops[0].name, "%s", op);
      if (j < n_ops) ops[j].n[r]++;
    }
    onnx_model_free(m);
  }
  printf("\nper op type (pass / fail / unsupported):\n");
  for (int j = 0; j < n_ops; j++)
    printf("  %-24s %4d %4d %4d\n", ops[j].name, ops[j].n[T_PASS], ops[j].n[T_FAIL], ops[j].n[T_UNSUPPORTED]);
  int all = total[0] + total[1] + total[2];
  char mode[64] = "";
  if (strcmp(o.backend, "ref") != 0) snprintf(mode, sizeof mode, ", fusion %s", loom_fusion_mode_name(o.fusion));
  printf("\nonnx-test %s (backend %s%s): %d tests, %d supported, %d passed, %d failed, %d unsupported\n", dir,
         o.backend, mode, all, total[T_PASS] + total[T_FAIL], total[T_PASS], total[T_FAIL], total[T_UNSUPPORTED]);
  free(ops);
  free_list(tests, n);
  loom_ctx_free(ctx);
  return total[T_FAIL] ? 1 : 0;
}

/* ---- run, show, compile of a model --------------------------------- */

static const char usage_model[] =
    "usage: loom run MODEL.onnx [--input NAME=PATH]... [--out DIR] [--force]\n"
    "       loom show MODEL.onnx [--input NAME=PATH]...\n"
    "       loom compile MODEL.onnx [--input NAME=PATH]... [--dim NAME=N]... [--fusion MODE]\n"
    "                         [--emit graph|program|kernels|c]\n"
    "  (each also takes --backend NAME, --fusion MODE, --threads N)\n"
    "\n"
    "An ONNX model, imported as docs/ONNX.md says. Inputs are .npy or ONNX\n"
    "TensorProto (.pb) files; a given input's shape binds the model's\n"
    "symbolic dims. run writes each output to DIR/<name>.npy. show prints the\n"
    "model's inputs, outputs, opsets and op counts, and the nodes Loom does\n"
    "not support. compile prints what the cpu backend made of it, on random\n"
    "inputs of the declared shapes where none are given (uniform in [-1, 1)\n"
    "for floats, zeros for integers; a symbolic dim is 1 unless --dim sets\n"
    "it). `loom bench MODEL.onnx` times a model like any workload (loom bench\n"
    "--help).\n";

typedef struct model_args {
  const char *cmd, *file, *out_dir, *backend, *emit;
  loom_fusion_mode fusion;
  long threads;
  bool force;
  int n_in, n_dims;
  const char *in_name[64], *in_path[64];
  const char *dim_name[64];
  int64_t dim_value[64];
} model_args;

static int model_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "loom: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage_model);
  return LOOM_CLI_EXIT_USAGE;
}

static int parse_model_args(int argc, char **argv, model_args *a) {
  memset(a, 0, sizeof *a);
  a->cmd = argv[0];
  a->out_dir = ".";
  a->backend = LOOM_BACKEND_DEFAULT;
  a->fusion = LOOM_FUSION_STITCH;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    int m;
    if (loom_cli_is_help(arg)) {
      fputs(usage_model, stdout);
      return -1;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--input", &v)) != 0 ||
        (m = loom_cli_flag_value(argc, argv, &i, "--dim", &v)) != 0) {
      bool dim = strncmp(arg, "--dim", 5) == 0;
      const char *eq = m > 0 ? strchr(v, '=') : NULL;
      if (!eq || eq == v || !eq[1]) return model_usage("%s wants NAME=VALUE", arg);
      ((char *)eq)[0] = '\0';
      if (dim) {
        long n = 0;
        if (a->n_dims == 64 || !loom_cli_parse_long(eq + 1, 0, 1L << 40, &n))
          return model_usage("--dim wants NAME=N, got '%s'", eq + 1);
        a->dim_value[a->n_dims] = n;
        a->dim_name[a->n_dims++] = v;
      } else {
        if (a->n_in == 64) return model_usage("%s", "at most 64 inputs");
        for (int k = 0; k < a->n_in; k++)
          if (strcmp(a->in_name[k], v) == 0) return model_usage("--input '%s' is given twice", v);
        a->in_name[a->n_in] = v;
        a->in_path[a->n_in++] = eq + 1;
      }
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--out", &v)) != 0) {
      if (m < 0 || !v[0]) return model_usage("%s wants a directory", arg);
      a->out_dir = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0 || !loom_backend_name_known(v)) return model_usage("unknown backend '%s'", m < 0 ? arg : v);
      a->backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0 || loom_fusion_mode_from_name(v, &a->fusion)) return model_usage("unknown fusion mode '%s'", m < 0 ? arg : v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0 || !loom_cli_parse_long(v, 0, 4096, &a->threads)) return model_usage("--threads wants a number, got '%s'", m < 0 ? "" : v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--emit", &v)) != 0) {
      if (m < 0 || (strcmp(v, "graph") && strcmp(v, "program") && strcmp(v, "kernels") && strcmp(v, "c")))
        return model_usage("--emit wants graph, program, kernels or c, got '%s'", m < 0 ? "" : v);
      a->emit = v;
    } else if (strcmp(arg, "--force") == 0) {
      a->force = true;
    } else if (arg[0] == '-' || a->file) {
      return model_usage("unexpected argument '%s'", arg);
    } else {
      a->file = arg;
    }
  }
  if (!a->file) return model_usage("%s needs a model", a->cmd);
  return 0;
}

typedef struct loaded {
  onnx_model *m;
  onnx_inputs in;
  onnx_program *p;
} loaded;

static void loaded_free(loaded *l) {
  onnx_inputs_free(&l->in);
  onnx_program_free(l->p);
  onnx_model_free(l->m);
}

static loom_status load_model(loom_ctx *ctx, const model_args *a, bool random, loaded *l) {
  memset(l, 0, sizeof *l);
  LOOM_TRY(onnx_model_load(ctx, a->file, &l->m));
  onnx_input_spec spec = {.n_given = a->n_in, .given_names = a->in_name, .given_paths = a->in_path,
                          .n_dims = a->n_dims, .dim_names = a->dim_name, .dim_values = a->dim_value,
                          .random = random};
  LOOM_TRY(onnx_inputs_load(ctx, l->m, &spec, &l->in));
  return onnx_import(ctx, l->m, l->in.n, l->in.feeds, &l->p);
}

static bool safe_name(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !loom_has_control_bytes(s);
}

static int model_run(loom_ctx *ctx, const model_args *a) {
  loaded l;
  loom_session *s = NULL;
  loom_tensor *outs[256] = {0};
  int rc = 1;
  loom_status st = load_model(ctx, a, false, &l);
  int32_t n_out = st ? 0 : loom_graph_num_outputs(l.p->g);
  if (!st && n_out > 256) st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "more than 256 outputs");
  for (int32_t i = 0; !st && i < n_out; i++)
    if (!safe_name(loom_graph_output_name(l.p->g, i)))
      st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "output name '%s' cannot be a file name",
                      loom_graph_output_name(l.p->g, i));
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = a->backend, .fusion = a->fusion);
  if (!st) st = onnx_program_session(ctx, l.p, &so, &s);
  if (!st) st = onnx_program_run(ctx, l.p, s, l.in.n, l.in.feeds, outs);
  if (!st && mkdir(a->out_dir, 0777) != 0 && errno != EEXIST)
    st = loom_error(ctx, LOOM_STATUS_IO, "cannot create '%s': %s", a->out_dir, strerror(errno));
  for (int32_t i = 0; !st && i < n_out; i++) {
    char path[4096], buf[160], esc[256];
    const char *name = loom_graph_output_name(l.p->g, i);
    snprintf(path, sizeof path, "%s/%s.npy", a->out_dir, name);
    if (loom_file_check_output(ctx, path, LOOM_FILE_HINT_FORCE | (a->force ? LOOM_FILE_REPLACE : 0)) ||
        loom_tensor_save_npy(ctx, outs[i], path)) {
      st = LOOM_STATUS_IO;
      break;
    }
    loom_type ty = {.dtype = loom_tensor_dtype(outs[i]), .rank = loom_tensor_rank(outs[i])};
    for (int32_t d = 0; d < ty.rank; d++) ty.shape[d] = loom_tensor_dim(outs[i], d);
    printf("%s: %s -> %s  [", loom_escape(name, esc, sizeof esc), loom_type_str(&ty, buf, sizeof buf), path);
    int64_t n = loom_tensor_numel(outs[i]);
    for (int64_t k = 0; k < n && k < 6; k++) printf("%s%.6g", k ? ", " : "", loom_load(ty.dtype, loom_tensor_data(outs[i]), k));
    printf("%s]\n", n > 6 ? ", ..." : "");
  }
  if (st) {
    char esc[1100];
    fprintf(stderr, "loom: %s\n", loom_escape_message(loom_ctx_error(ctx), esc, sizeof esc));
  } else {
    rc = 0;
  }
  for (int32_t i = 0; i < n_out && i < 256; i++) loom_tensor_free(outs[i]);
  loom_session_free(s);
  loaded_free(&l);
  return rc;
}

static void print_vi(const onnx_value_info *vi) {
  char esc[256];
  printf("  %s: %s", loom_escape(vi->name, esc, sizeof esc), vi->is_tensor ? onnx_dtype_name(vi->elem_type) : "(not a tensor)");
  if (vi->is_tensor && vi->has_shape) {
    printf("[");
    for (int32_t d = 0; d < vi->rank; d++) {
      if (vi->params[d]) printf("%s%s", d ? ", " : "", loom_escape(vi->params[d], esc, sizeof esc));
      else if (vi->dims[d] >= 0) printf("%s%lld", d ? ", " : "", (long long)vi->dims[d]);
      else printf("%s?", d ? ", " : "");
    }
    printf("]");
  }
  printf("\n");
}

static int model_show(loom_ctx *ctx, const model_args *a) {
  onnx_model *m = NULL;
  char esc[1100];
  if (onnx_model_load(ctx, a->file, &m)) {
    fprintf(stderr, "loom: %s\n", loom_escape_message(loom_ctx_error(ctx), esc, sizeof esc));
    return 1;
  }
  const onnx_graph *g = m->graph;
  int64_t opset = onnx_model_opset(m);
  printf("%s: ONNX IR version %lld, producer '%s'\nopsets:", a->file, (long long)m->ir_version,
         loom_escape(m->producer, esc, sizeof esc));
  for (int32_t i = 0; i < m->n_opsets; i++)
    printf(" %s %lld", m->opsets[i].domain[0] ? loom_escape(m->opsets[i].domain, esc, sizeof esc) : "ai.onnx",
           (long long)m->opsets[i].version);
  printf("\ninputs:\n");
  for (int32_t i = 0; i < g->n_inputs; i++) {
    bool init = false;
    for (int32_t k = 0; k < g->n_init; k++) init |= strcmp(g->init[k].name, g->inputs[i].name) == 0;
    if (!init) print_vi(&g->inputs[i]);
  }
  printf("outputs:\n");
  for (int32_t i = 0; i < g->n_outputs; i++) print_vi(&g->outputs[i]);
  int64_t elems = 0;
  for (int32_t k = 0; k < g->n_init; k++) {
    int64_t n = 1;
    for (int32_t d = 0; d < g->init[k].n_dims; d++) n = g->init[k].dims[d] > 0 && n < (INT64_C(1) << 50) ? n * g->init[k].dims[d] : 0;
    elems += n;
  }
  printf("initializers: %d (%lld elements)\n", g->n_init, (long long)elems);
  printf("ops (%d nodes):\n", g->n_nodes);
  int n_unsup = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const onnx_node *n = &g->nodes[i];
    bool dup = false;
    for (int32_t j = 0; j < i && !dup; j++) dup = strcmp(g->nodes[j].op_type, n->op_type) == 0 && strcmp(g->nodes[j].domain, n->domain) == 0;
    if (dup) continue;
    int count = 0;
    for (int32_t j = i; j < g->n_nodes; j++) count += strcmp(g->nodes[j].op_type, n->op_type) == 0 && strcmp(g->nodes[j].domain, n->domain) == 0;
    bool ok = onnx_op_supported(n->domain, n->op_type, opset);
    printf("  %-24s %5d%s\n", loom_escape(n->op_type, esc, sizeof esc), count, ok ? "" : "  unsupported");
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const onnx_node *n = &g->nodes[i];
    if (onnx_op_supported(n->domain, n->op_type, opset)) continue;
    if (!n_unsup++) printf("unsupported nodes:\n");
    char e2[256];
    printf("  node %d '%s': %s%s%s\n", i, loom_escape(n->name, esc, sizeof esc), n->domain[0] ? n->domain : "",
           n->domain[0] ? "." : "", loom_escape(n->op_type, e2, sizeof e2));
  }
  onnx_model_free(m);
  /* the import itself: attributes, types and shapes only it can check */
  loaded l;
  loom_status st = load_model(ctx, a, a->n_in == 0, &l);
  if (st)
    printf("import: %s\n", loom_escape_message(loom_ctx_error(ctx), esc, sizeof esc));
  else
    printf("import: ok: %d Loom nodes, %d ONNX nodes folded at load time, %d parameters bound\n", l.p->g->n_nodes,
           l.p->n_folded, l.p->g->n_inputs - l.in.n);
  loaded_free(&l);
  return st || n_unsup ? 1 : 0;
}

static int model_compile(loom_ctx *ctx, const model_args *a) {
  loaded l;
  loom_session *s = NULL;
  char esc[1100];
  int rc = 1;
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = a->backend, .fusion = a->fusion);
  loom_status st = load_model(ctx, a, true, &l);
  if (!st) st = onnx_program_session(ctx, l.p, &so, &s);
  if (!st && a->emit) {
    /* the artifact on stdout, the summary on stderr (as loom compile) */
    loom_session_artifact what = strcmp(a->emit, "graph") == 0     ? LOOM_ARTIFACT_GRAPH
                                 : strcmp(a->emit, "program") == 0 ? LOOM_ARTIFACT_PROGRAM
                                 : strcmp(a->emit, "kernels") == 0 ? LOOM_ARTIFACT_KERNELS
                                                                   : LOOM_ARTIFACT_SOURCE;
    char *text = NULL;
    st = loom_session_describe(s, what, &text);
    if (!st) fputs(text, stdout);
    loom_free(text);
  }
  FILE *sum = a->emit ? stderr : stdout;
  if (!st) {
    loom_session_stats ss;
    loom_session_get_stats(s, &ss);
    fprintf(sum, "%s: backend %s, fusion %s\n", a->file, a->backend, loom_fusion_mode_name(a->fusion));
    fprintf(sum, "  Loom nodes      %d (%d ONNX nodes folded at load time)\n", l.p->g->n_nodes, l.p->n_folded);
    fprintf(sum, "  primitive ops   %d\n  kernels         %d (%d GEMM epilogues)\n  GEMMs           %d\n",
            ss.n_primitive_ops, ss.n_kernels, ss.n_epilogues, ss.n_gemm);
    fprintf(sum, "  eager nodes     %d\n  peak bytes      %lld\n  compile time    %.3f s\n", ss.n_eager,
            (long long)ss.peak_bytes, ss.compile_seconds);
    rc = 0;
  } else {
    fprintf(stderr, "loom: %s\n", loom_escape_message(loom_ctx_error(ctx), esc, sizeof esc));
  }
  loom_session_free(s);
  loaded_free(&l);
  return rc;
}

int loom_cli_onnx_main(int argc, char **argv) {
  if (strcmp(argv[0], "onnx-test") == 0) return cmd_onnx_test(argc, argv);
  model_args a;
  int r = parse_model_args(argc, argv, &a);
  if (r) return r < 0 ? 0 : r;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  int rc = 1;
  if (loom_ctx_set_threads(ctx, (int32_t)a.threads)) fprintf(stderr, "loom: %s\n", loom_ctx_error(ctx));
  else if (strcmp(a.cmd, "run") == 0) rc = model_run(ctx, &a);
  else if (strcmp(a.cmd, "show") == 0) rc = model_show(ctx, &a);
  else rc = model_compile(ctx, &a);
  loom_ctx_free(ctx);
  return rc;
}

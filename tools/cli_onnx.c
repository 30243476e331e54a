/*
 * loom onnx-test DIR: the ONNX backend node tests (a folder per test:
 * model.onnx and test_data_set_N/{input,output}_K.pb), each imported with
 * its inputs, run on a backend and compared with the expected outputs;
 * and loom run / show / compile / bench for a .onnx model.
 */
#define _DEFAULT_SOURCE /* DT_DIR */
#include "cli_onnx.h"

#include "cli_args.h"
#include "core/clock.h"
#include "core/file.h"
#include "ir/dtype.h"
#include "ir/graph.h"
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

#define EXIT_USAGE 2

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
  if (strcmp(argv[0], "run") && strcmp(argv[0], "show") && strcmp(argv[0], "compile") && strcmp(argv[0], "bench"))
    return false;
  for (int i = 1; i < argc; i++)
    if (argv[i][0] != '-' && ends_with(argv[i], ".onnx")) return true;
  return false;
}

/* ---- tensors from files -------------------------------------------------- */

/* A TensorProto .pb file as a Loom tensor; its name (if any) to *name. */
static loom_status load_pb(loom_ctx *ctx, const char *path, loom_tensor **out, char **name) {
  char *buf = NULL;
  size_t len = 0;
  *out = NULL;
  if (name) *name = NULL;
  LOOM_TRY(loom_file_read(ctx, path, (size_t)2 << 30, &buf, &len));
  onnx_model *holder = NULL;
  onnx_tensor *t = NULL;
  loom_status st = onnx_tensor_parse(ctx, buf, len, &holder, &t);
  free(buf);
  if (!st) st = onnx_tensor_to_loom(ctx, holder, t, out);
  if (!st && name && t->name[0] && !(*name = strdup(t->name))) st = LOOM_STATUS_OUT_OF_MEMORY;
  onnx_model_free(holder);
  if (st) loom_error_prefix(ctx, "%s", path);
  return st;
}

__attribute__((unused)) static loom_status load_tensor(loom_ctx *ctx, const char *path, loom_tensor **out) {
  if (ends_with(path, ".npy")) return loom_tensor_load_npy(ctx, path, out);
  return load_pb(ctx, path, out, NULL);
}

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
    st = load_pb(ctx, path, &ins[k], &in_names[k]);
    n_in = k + 1;
  }
  for (int k = 0; k < 64 && !st; k++) {
    snprintf(path, sizeof path, "%s/output_%d.pb", set_dir, k);
    struct stat sb;
    if (stat(path, &sb) != 0) break;
    st = load_pb(ctx, path, &want[k], NULL);
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
    "  --verbose        the reason for every unsupported test too\n"
    "  -h, --help       print this help\n";

static int cmd_onnx_test(int argc, char **argv) {
  const char *dir = NULL, *only = NULL;
  test_opts o = {.backend = LOOM_BACKEND_DEFAULT, .fusion = LOOM_FUSION_STITCH};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
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
    return EXIT_USAGE;
  }
  if (!dir) {
    fprintf(stderr, "loom: onnx-test needs a DIR\n%s", usage_test);
    return EXIT_USAGE;
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
    if (only && !strstr(tests[i], only)) continue;
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
  printf("\nonnx-test %s (backend %s, fusion %s): %d tests, %d supported, %d passed, %d failed, %d unsupported\n",
         dir, o.backend, loom_fusion_mode_name(o.fusion), all, total[T_PASS] + total[T_FAIL], total[T_PASS],
         total[T_FAIL], total[T_UNSUPPORTED]);
  free(ops);
  free_list(tests, n);
  loom_ctx_free(ctx);
  return total[T_FAIL] ? 1 : 0;
}

int loom_cli_onnx_main(int argc, char **argv) {
  if (strcmp(argv[0], "onnx-test") == 0) return cmd_onnx_test(argc, argv);
  fprintf(stderr, "loom: '%s' of an ONNX model is not available yet\n", argv[0]);
  return 1;
}

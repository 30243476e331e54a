/*
 * loom run: a text-IR graph run on .npy inputs, its outputs written as
 * .npy files and summarized; nothing is overwritten without --force.
 */
#include "loom.h"

#include "core/file.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "runtime/backend.h"

#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A --help line per fusion mode, from the mode list in loom.h. */
#define HELP_MODE(ENUM, name, help) "                       " #name ": " help "\n"

static const char usage_run[] =
    "usage: loom run FILE [--input NAME=PATH.npy]... [--out DIR]\n"
    "                [--backend NAME] [--fusion MODE] [--gemm P] [--threads N] [--force]\n"
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
    "  --fusion MODE        how the cpu backend makes code:\n" LOOM_FUSION_MODE_LIST(
        HELP_MODE, ) "  --gemm P             f32 products on a GPU backend: f32 (default), tf32\n"
                     "                       or bf16 (operands rounded, f32 accumulation)\n"
                     "  --threads N          CPU threads (0 = all cores, the default)\n"
                     "  --force              overwrite output files that already exist\n"
                     "  -h, --help           print this help\n";

typedef struct run_input {
  const char *name, *path;
  bool used;
} run_input;

/* A one-line summary: "y: f32[4, 16] -> out/y.npy  [0.5, -1, ...]". */
static void print_summary(const char *name, const loom_tensor *t, const char *path) {
  loom_type ty = {.dtype = loom_tensor_dtype(t), .rank = loom_tensor_rank(t)};
  for (int32_t d = 0; d < ty.rank; d++)
    ty.shape[d] = loom_tensor_dim(t, d);
  char buf[160];
  printf("%s: %s -> %s  [", loom_cli_shown(name), loom_type_str(&ty, buf, sizeof buf),
         loom_cli_shown(path));
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

static int run_graph(loom_ctx *ctx, const char *file, run_input *ins, int n_ins,
                     const char *out_dir, const char *backend, loom_fusion_mode fusion,
                     loom_gemm_precision gemm, bool force) {
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
    while (k < n_ins && strcmp(ins[k].name, name) != 0)
      k++;
    if (k == n_ins) {
      size_t m = strlen(missing);
      snprintf(missing + m, sizeof missing - m, "%s%s (%s)", m ? ", " : "", name,
               loom_type_str(loom_value_type(g, loom_graph_input_value(g, i)), buf, sizeof buf));
      continue;
    }
    ins[k].used = true;
  }
  for (int k = 0; k < n_ins; k++)
    if (!ins[k].used) {
      loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 "%s has no input named '%s' (see 'loom show %s')", file, ins[k].name, file);
      goto fail;
    }
  if (missing[0]) {
    loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no --input given for graph input %s", missing);
    goto fail;
  }

  /* Refuse to overwrite before any work is done. A missing directory is
   * made only once there is something to put in it. */
  struct stat st;
  bool make_dir = false;
  if (stat(out_dir, &st) != 0) {
    if (errno != ENOENT) {
      loom_error(ctx, LOOM_STATUS_IO, "cannot use output directory '%s': %s", out_dir,
                 strerror(errno));
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
        loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "two outputs are named '%s'", name);
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
    while (strcmp(ins[k].name, name) != 0)
      k++;
    if (loom_tensor_load_npy(ctx, ins[k].path, &inputs[i]) != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "input '%s'", name);
      goto fail;
    }
    loom_type want = *loom_value_type(g, loom_graph_input_value(g, i));
    loom_type have = {.dtype = loom_tensor_dtype(inputs[i]), .rank = loom_tensor_rank(inputs[i])};
    for (int32_t d = 0; d < have.rank; d++)
      have.shape[d] = loom_tensor_dim(inputs[i], d);
    if (!loom_type_equal(&want, &have)) {
      loom_error(ctx,
                 want.dtype != have.dtype ? LOOM_STATUS_DTYPE_MISMATCH : LOOM_STATUS_SHAPE_MISMATCH,
                 "input '%s': %s holds %s but the graph wants %s", name, ins[k].path,
                 loom_type_str(&have, buf, sizeof buf), loom_type_str(&want, buf2, sizeof buf2));
      goto fail;
    }
  }

  loom_session_options opts =
      LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion, .gemm = gemm);
  if (loom_session_new(ctx, g, &opts, &s) != LOOM_STATUS_OK) goto fail;
  if (loom_session_warning(s)[0]) fprintf(stderr, "loom: warning: %s\n", loom_session_warning(s));
  if (loom_session_run(s, n_in, (const loom_tensor *const *)inputs, n_out, outputs) !=
      LOOM_STATUS_OK)
    goto fail;
  if (make_dir && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
    loom_error(ctx, LOOM_STATUS_IO, "cannot create output directory '%s': %s", out_dir,
               strerror(errno));
    goto fail;
  }
  for (int32_t i = 0; i < n_out; i++) {
    if (loom_tensor_save_npy(ctx, outputs[i], paths[i]) != LOOM_STATUS_OK) goto fail;
    print_summary(loom_graph_output_name(g, i), outputs[i], paths[i]);
  }
  rc = 0;
  goto done;

fail:
  loom_cli_fail("loom", ctx);
done:
  for (int32_t i = 0; inputs && i < n_in; i++)
    loom_tensor_free(inputs[i]);
  for (int32_t i = 0; outputs && i < n_out; i++)
    loom_tensor_free(outputs[i]);
  for (int32_t i = 0; paths && i < n_out; i++)
    free(paths[i]);
  free(inputs);
  free(outputs);
  free(paths);
  loom_session_free(s);
  loom_graph_free(g);
  return rc;
}

int loom_cli_run_main(int argc, char **argv) {
  const char *file = NULL, *out_dir = ".", *backend = LOOM_BACKEND_DEFAULT;
  loom_fusion_mode fusion = LOOM_FUSION_STITCH;
  loom_gemm_precision gemm = LOOM_GEMM_F32;
  long threads = 0;
  bool force = false;
  run_input *ins = calloc((size_t)argc, sizeof *ins);
  int n_ins = 0, rc = LOOM_CLI_EXIT_USAGE;
  if (!ins) {
    fprintf(stderr, "loom: out of memory\n");
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (loom_cli_is_help(a)) {
      fputs(usage_run, stdout);
      rc = 0;
      goto done;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--input", &v)) != 0) {
      if (m < 0) goto missing;
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1]) {
        rc = loom_cli_usage_error("loom", usage_run, "--input wants NAME=PATH, got '%s'", v);
        goto done;
      }
      /* Cut NAME in place: argv strings are ours to modify. */
      ((char *)eq)[0] = '\0';
      for (int k = 0; k < n_ins; k++)
        if (strcmp(ins[k].name, v) == 0) {
          rc = loom_cli_usage_error("loom", usage_run, "--input '%s' is given twice", v);
          goto done;
        }
      ins[n_ins].name = v;
      ins[n_ins++].path = eq + 1;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--out", &v)) != 0) {
      if (m < 0) goto missing;
      if (!v[0]) {
        rc = loom_cli_usage_error("loom", usage_run, "--out wants a directory");
        goto done;
      }
      out_dir = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0) goto missing;
      if (!loom_backend_name_known(v)) {
        rc = loom_cli_usage_error("loom", usage_run, "unknown backend '%s' (%s)", v,
                                  loom_backend_names());
        goto done;
      }
      backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0) goto missing;
      if (loom_fusion_mode_from_name(v, &fusion)) {
        rc = loom_cli_usage_error(
            "loom", usage_run, "unknown fusion mode '%s' (known: " LOOM_FUSION_MODE_NAMES ")", v);
        goto done;
      }
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--gemm", &v)) != 0) {
      if (m < 0) goto missing;
      if (loom_gemm_precision_from_name(v, &gemm)) {
        rc = loom_cli_usage_error(
            "loom", usage_run, "unknown gemm precision '%s' (known: " LOOM_GEMM_PRECISION_NAMES ")",
            v);
        goto done;
      }
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0) goto missing;
      if (!loom_cli_parse_long(v, 0, 4096, &threads)) {
        rc = loom_cli_usage_error("loom", usage_run,
                                  "--threads wants a number in [0, 4096], "
                                  "got '%s'",
                                  v);
        goto done;
      }
    } else if (strcmp(a, "--force") == 0) {
      force = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      rc = loom_cli_usage_error("loom", usage_run, "unknown flag '%s' for 'run'", a);
      goto done;
    } else if (file) {
      rc = loom_cli_usage_error("loom", usage_run, "unexpected argument '%s'", a);
      goto done;
    } else {
      file = a;
    }
    continue;
  missing:
    rc = loom_cli_usage_error("loom", usage_run, "%s needs a value", a);
    goto done;
  }
  if (!file) {
    rc = loom_cli_usage_error("loom", usage_run, "run needs a FILE");
    goto done;
  }

  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom: out of memory\n");
    rc = 1;
    goto done;
  }
  if (loom_ctx_set_threads(ctx, (int32_t)threads) != LOOM_STATUS_OK)
    rc = loom_cli_fail("loom", ctx);
  else
    rc = run_graph(ctx, file, ins, n_ins, out_dir, backend, fusion, gemm, force);
  loom_ctx_free(ctx);
done:
  free(ins);
  return rc;
}

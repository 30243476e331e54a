/*
 * loom compile: a graph prepared as `loom run` would prepare it, with a
 * summary of what it became and, on request, each artifact (the graph
 * after decomposition, the program, the kernel IR, the generated source)
 * and pictures of the program.
 */
#include "loom.h"

#include "core/file.h"
#include "ir/graph.h"
#include "runtime/backend.h"

#include "cli.h"
#include "cli_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A --help line per fusion mode, from the mode list in loom.h. */
#define HELP_MODE(ENUM, name, help) "                       " #name ": " help "\n"

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
    "  --fusion MODE        how the cpu backend makes code:\n" LOOM_FUSION_MODE_LIST(
        HELP_MODE, ) "  --backend NAME       one of" LOOM_BACKEND_HELP_NAMES
                     " (default " LOOM_BACKEND_DEFAULT ");\n"
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
                     "  --force              overwrite the --dot, --svg or --png file if it "
                     "exists\n"
                     "  -h, --help           print this help\n";

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
  fprintf(f, "  kernel cache    %s\n", st->n_kernels == 0 ? "-" : st->cache_hit ? "hit" : "miss");
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

int loom_cli_compile_main(int argc, char **argv) {
  const char *file = NULL, *emit = NULL, *dump = NULL, *backend = LOOM_BACKEND_DEFAULT;
  loom_fusion_mode fusion = LOOM_FUSION_STITCH;
  compile_pictures pics = {0};
  long threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int m;
    if (loom_cli_is_help(a)) {
      fputs(usage_compile, stdout);
      return 0;
    }
    if ((m = loom_cli_flag_value(argc, argv, &i, "--fusion", &v)) != 0) {
      if (m < 0) return loom_cli_usage_error("loom", usage_compile, "%s needs a value", a);
      if (loom_fusion_mode_from_name(v, &fusion))
        return loom_cli_usage_error("loom", usage_compile,
                                    "unknown fusion mode '%s' (known: " LOOM_FUSION_MODE_NAMES ")",
                                    v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--emit", &v)) != 0) {
      if (m < 0) return loom_cli_usage_error("loom", usage_compile, "%s needs a value", a);
      if (strcmp(v, "c") && strcmp(v, "kernels") && strcmp(v, "program"))
        return loom_cli_usage_error("loom", usage_compile,
                                    "--emit wants c, kernels or program, got '%s'", v);
      emit = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (m < 0) return loom_cli_usage_error("loom", usage_compile, "%s needs a value", a);
      if (!loom_backend_name_known(v))
        return loom_cli_usage_error("loom", usage_compile, "unknown backend '%s' (%s)", v,
                                    loom_backend_names());
      backend = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--dump-after", &v)) != 0) {
      if (m < 0) return loom_cli_usage_error("loom", usage_compile, "%s needs a value", a);
      if (strcmp(v, "decompose") && strcmp(v, "fuse") && strcmp(v, "lower"))
        return loom_cli_usage_error("loom", usage_compile,
                                    "--dump-after wants decompose, fuse or lower, got '%s'", v);
      dump = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0) return loom_cli_usage_error("loom", usage_compile, "%s needs a value", a);
      if (!loom_cli_parse_long(v, 0, 4096, &threads))
        return loom_cli_usage_error("loom", usage_compile,
                                    "--threads wants a number in [0, 4096], got '%s'", v);
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--dot", &v)) != 0) {
      if (m < 0 || !*v)
        return loom_cli_usage_error("loom", usage_compile, "%s needs a file name", a);
      pics.dot = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--svg", &v)) != 0) {
      if (m < 0 || !*v)
        return loom_cli_usage_error("loom", usage_compile, "%s needs a file name", a);
      pics.svg = v;
    } else if ((m = loom_cli_flag_value(argc, argv, &i, "--png", &v)) != 0) {
      if (m < 0 || !*v)
        return loom_cli_usage_error("loom", usage_compile, "%s needs a file name", a);
      pics.png = v;
    } else if (strcmp(a, "--force") == 0) {
      pics.force = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      return loom_cli_usage_error("loom", usage_compile, "unknown flag '%s' for 'compile'", a);
    } else if (file) {
      return loom_cli_usage_error("loom", usage_compile, "unexpected argument '%s'", a);
    } else {
      file = a;
    }
  }
  if (!file) return loom_cli_usage_error("loom", usage_compile, "compile needs a FILE");
  /* what each artifact is: decompose, program listing, kernel IR, C */
  bool want_decompose = dump && strcmp(dump, "decompose") == 0;
  bool want_program = (dump && strcmp(dump, "fuse") == 0) || (emit && strcmp(emit, "program") == 0);
  bool want_kernels =
      (dump && strcmp(dump, "lower") == 0) || (emit && strcmp(emit, "kernels") == 0);
  bool want_c = emit && strcmp(emit, "c") == 0;
  if (fusion == LOOM_FUSION_EAGER && (want_program || want_kernels || want_c))
    return loom_cli_usage_error("loom", usage_compile, "%s %s needs a fusion mode other than eager",
                                emit ? "--emit" : "--dump-after", emit ? emit : dump);
  if (fusion == LOOM_FUSION_EAGER && want_pictures(&pics))
    return loom_cli_usage_error("loom", usage_compile,
                                "%s needs a fusion mode other than eager (no program to draw)",
                                pics.dot   ? "--dot"
                                : pics.svg ? "--svg"
                                           : "--png");

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
    rc = loom_cli_fail("loom", ctx);
    goto done;
  }
  if (loom_session_warning(s)[0]) fprintf(stderr, "loom: warning: %s\n", loom_session_warning(s));
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
      rc = loom_cli_fail("loom", ctx);
      goto done;
    }
    if (show[i].what == LOOM_ARTIFACT_SOURCE && !text[0])
      loom_cli_put_text("/* no generated kernels: every step is a GEMM or an eager node */\n");
    else
      loom_cli_put_text(text);
  }
  if (want_pictures(&pics)) {
    loom_status ps = write_pictures(ctx, s, &pics);
    if (ps == LOOM_STATUS_UNSUPPORTED) {
      fprintf(stderr, "loom: no fused program to draw (%s)\n",
              loom_session_warning(s)[0] ? loom_session_warning(s) : loom_ctx_error(ctx));
      goto done;
    }
    if (ps != LOOM_STATUS_OK) {
      rc = loom_cli_fail("loom", ctx);
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

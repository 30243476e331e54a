/*
 * The command-line tool's own interface (tools/): each command's entry
 * point, and the helpers every command shares so that all of them parse
 * flags, report wrong arguments and report failures the same way.
 *
 * Exit codes: 0 success, 1 a failure ("PREFIX: <message>" on stderr),
 * LOOM_CLI_EXIT_USAGE for wrong arguments (message, synopsis, a pointer to
 * --help).
 */
#ifndef LOOM_TOOLS_CLI_H
#define LOOM_TOOLS_CLI_H

#include "core/ctx.h"

#include <stdbool.h>

#define LOOM_CLI_EXIT_USAGE 2

/* ---- the commands (argv[0] is the command's own name) --------------------- */

int loom_cli_show_main(int argc, char **argv);
int loom_cli_ops_main(int argc, char **argv);
int loom_cli_run_main(int argc, char **argv);
int loom_cli_compile_main(int argc, char **argv);
int loom_cli_plan_main(int argc, char **argv);
int loom_cli_cluster_main(int argc, char **argv);
/* ONNX models (run, show, compile of a .onnx file) and onnx-test. */
bool loom_cli_onnx_wants(int argc, char **argv);
int loom_cli_onnx_main(int argc, char **argv);

/* ---- shared helpers -------------------------------------------------------- */

/* Matches "--name VALUE" and "--name=VALUE" at argv[*i]; advances *i past
 * the value. Returns 1 on a match, 0 if argv[*i] is another flag, -1 if
 * the value is missing. */
int loom_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value);
/* Parses a whole decimal integer in [lo, hi]. */
bool loom_cli_parse_long(const char *s, long lo, long hi, long *out);
/* "-h" or "--help". */
bool loom_cli_is_help(const char *arg);

/* A wrong argument: "PREFIX: message", the synopsis of usage (its text up
 * to the first blank line) and "Try 'loom CMD --help'", CMD read from the
 * synopsis ("usage: loom CMD ..."), on stderr. Returns
 * LOOM_CLI_EXIT_USAGE. */
int loom_cli_usage_error(const char *prefix, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A failure: "PREFIX: <ctx's error>" on stderr. Returns 1. */
int loom_cli_fail(const char *prefix, loom_ctx *ctx);

/* A name from a file as printed: control bytes escaped, so it cannot drive
 * the terminal (core/file.h). Four calls may share one printf. */
const char *loom_cli_shown(const char *name);
/* Writes text to stdout, ending with a newline. */
void loom_cli_put_text(const char *text);

#endif

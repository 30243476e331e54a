/* The helpers every command of the tool shares (cli.h). */
#include "cli.h"

#include "core/file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int loom_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) return -1;
  *value = argv[++*i];
  return 1;
}

bool loom_cli_parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool loom_cli_is_help(const char *arg) {
  return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int loom_cli_usage_error(const char *prefix, const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prefix);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  const char *end = strstr(usage, "\n\n");
  fprintf(stderr, "\n%.*s\n", end ? (int)(end - usage) : (int)strlen(usage), usage);
  /* "usage: loom plan MODEL ..." -> "plan "; "usage: loom <command> ..." -> "" */
  const char *cmd = strncmp(usage, "usage: loom ", 12) == 0 ? usage + 12 : "";
  int n = cmd[0] == '<' || cmd[0] == '[' ? 0 : (int)strcspn(cmd, " \n");
  fprintf(stderr, "Try 'loom %.*s%s--help' for more.\n", n, cmd, n ? " " : "");
  return LOOM_CLI_EXIT_USAGE;
}

int loom_cli_fail(const char *prefix, loom_ctx *ctx) {
  char msg[LOOM_ERROR_MAX];
  fprintf(stderr, "%s: %s\n", prefix, loom_escape_message(loom_ctx_error(ctx), msg, sizeof msg));
  return 1;
}

const char *loom_cli_shown(const char *name) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  return loom_escape(name, buf[k], sizeof buf[k]);
}

void loom_cli_put_text(const char *text) {
  fputs(text, stdout);
  if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
}

#include "cli_args.h"

#include <errno.h>
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

/* Argument helpers shared by the command-line tool's commands (tools/,
 * bench/). */
#ifndef LOOM_TOOLS_CLI_ARGS_H
#define LOOM_TOOLS_CLI_ARGS_H

#include <stdbool.h>

/* Matches "--name VALUE" and "--name=VALUE" at argv[*i]; advances *i past
 * the value. Returns 1 on a match, 0 if argv[*i] is another flag, -1 if
 * the value is missing. */
int loom_cli_flag_value(int argc, char **argv, int *i, const char *name, const char **value);
/* Parses a whole decimal integer in [lo, hi]. */
bool loom_cli_parse_long(const char *s, long lo, long hi, long *out);

#endif

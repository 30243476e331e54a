/* `loom plan`: lowers a parallel plan over a model and prints each
 * device's program and a per-device summary (docs/CLI.md). */
#ifndef LOOM_TOOLS_CLI_PLAN_H
#define LOOM_TOOLS_CLI_PLAN_H

/* Runs `loom plan` (argv[0] is "plan"). Returns the exit code: 0 ok,
 * 1 failure (message on stderr), 2 usage error (usage on stderr). */
int loom_cli_plan_main(int argc, char **argv);

#endif

/* `loom cluster`: reads, checks and prints a cluster description, or
 * measures this machine's (docs/CLI.md, docs/CLUSTER.md). */
#ifndef LOOM_TOOLS_CLI_CLUSTER_H
#define LOOM_TOOLS_CLI_CLUSTER_H

/* Runs `loom cluster` (argv[0] is "cluster"). Returns the exit code: 0 ok,
 * 1 failure (message on stderr), 2 usage error. */
int loom_cli_cluster_main(int argc, char **argv);

#endif

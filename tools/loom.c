/*
 * loom: the command-line tool (docs/CLI.md). This file is the dispatch;
 * each command lives in tools/cli_*.c (train in src/train, bench in bench/).
 *
 *   loom train [flags]          train the GPT of src/train (loom train --help)
 *   loom run FILE [flags]       run a text-IR graph on .npy inputs
 *   loom compile FILE [flags]   fuse and compile a graph; print its artifacts
 *   loom bench [WORKLOAD...]    benchmarks (bench/; loom bench --help)
 *   loom show FILE              print a graph and what it is made of
 *   loom ops                    print the op table
 *   loom plan MODEL [flags]     lower a parallel plan; print each device's program
 *   loom cluster FILE           check and print a cluster description
 *   loom devices                the backends and devices present
 *
 * Exit codes: 0 success, 1 a failure ("loom: <message>" on stderr),
 * 2 wrong arguments (a usage message on stderr).
 */
#include "loom.h"

#include "runtime/backend.h"
#include "train/train_cli.h"

#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_main[] =
    "usage: loom <command> [options]\n"
    "\n"
    "commands:\n"
    "  train [flags]        train a small GPT (see 'loom train --help')\n"
    "  run FILE [flags]     run a text-IR graph on .npy inputs\n"
    "  compile FILE [flags] fuse and compile a graph, print what it became\n"
    "  bench [WORKLOAD...]  measure workloads in every fusion mode\n"
    "  show FILE            print a graph, its op counts and value shapes\n"
    "  ops                  print the op table (a Markdown table)\n"
    "  plan MODEL [flags]   lower a parallel plan, print each device's program\n"
    "  cluster FILE         check and print a cluster description (or --this-machine)\n"
    "  devices              list the backends and the devices present\n"
    "  onnx-test DIR        run the ONNX node tests in DIR (run, show, compile\n"
    "                       and bench also take a .onnx model: docs/ONNX.md)\n"
    "  help [COMMAND]       print help for loom or for one command\n"
    "\n"
    "options:\n"
    "  -h, --help           print this help\n"
    "  --version            print the version\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong arguments.\n";

static int cmd_devices(int argc, char **argv) {
  if (argc > 1) {
    if (loom_cli_is_help(argv[1])) {
      fputs(
          "usage: loom devices\n\nLists every backend with its device (or why it is "
          "unavailable),\nthe OpenCL and CUDA devices present and whether NVRTC compiles CUDA C.\n",
          stdout);
      return 0;
    }
    return loom_cli_usage_error("loom", usage_main, "unexpected argument '%s' for 'devices'",
                                argv[1]);
  }
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  char *text = NULL;
  int rc = loom_devices_report(ctx, &text) ? loom_cli_fail("loom", ctx) : 0;
  if (text) fputs(text, stdout);
  free(text);
  loom_ctx_free(ctx);
  /* how the cpu backend's OpenMP threads wait (bound_openmp_spin) */
  const char *policy = getenv("OMP_WAIT_POLICY"), *spins = getenv("GOMP_SPINCOUNT");
  if (policy)
    printf("OpenMP waits: OMP_WAIT_POLICY=%s\n", policy);
  else if (spins)
    printf("OpenMP waits: %s spins, then sleep (GOMP_SPINCOUNT)\n", spins);
  else
    printf("OpenMP waits: libgomp's default\n");
  return rc;
}

/* Every command: `loom NAME ARGS...` calls main with argv[0] = NAME, and
 * `loom help NAME` calls it with --help. */
static const struct {
  const char *name;
  int (*main)(int argc, char **argv);
} commands[] = {
    {"train", loom_train_main},         {"run", loom_cli_run_main},
    {"compile", loom_cli_compile_main}, {"bench", loom_bench_main},
    {"show", loom_cli_show_main},       {"ops", loom_cli_ops_main},
    {"plan", loom_cli_plan_main},       {"cluster", loom_cli_cluster_main},
    {"devices", cmd_devices},
};

static int (*find_command(const char *name))(int, char **) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(name, commands[i].name) == 0) return commands[i].main;
  return NULL;
}

static int cmd_help(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "help") == 0) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (argc > 2)
    return loom_cli_usage_error("loom", usage_main, "unexpected argument '%s'", argv[2]);
  int (*cmd)(int, char **) = find_command(argv[1]);
  if (!cmd) return loom_cli_usage_error("loom", usage_main, "unknown command '%s'", argv[1]);
  char help[] = "--help";
  char *hargv[] = {argv[1], help, NULL};
  return cmd(2, hargv);
}

/* OpenMP threads wait for work by spinning, 300,000 pauses by libgomp's
 * default (milliseconds), then sleep. On a machine to itself short spins
 * are what make fork/join cheap; beside other jobs a spinning thread takes
 * the core its late peer needs: the training step ran 140-190 ms a step
 * with three busy processes on two cores, 60-70 with 3,000 spins, and 16.5
 * quiet either way (docs/PERFORMANCE.md, twelfth session). libgomp reads
 * its policy once, as it loads, before main: so unless the user chose one
 * (OMP_WAIT_POLICY or GOMP_SPINCOUNT), loom sets a bounded spin and starts
 * itself again. If that fails it runs on with the default. */
#define LOOM_SPIN_COUNT "3000"

static void bound_openmp_spin(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", LOOM_SPIN_COUNT, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GOMP_SPINCOUNT"); /* not restarted: the policy is libgomp's default */
}

int main(int argc, char **argv) {
  bound_openmp_spin(argv);
  if (argc < 2) return loom_cli_usage_error("loom", usage_main, "no command given");
  const char *name = argv[1];
  if (loom_cli_is_help(name)) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (strcmp(name, "--version") == 0) {
    printf("loom %s\n", LOOM_VERSION_STRING);
    return 0;
  }
  /* ONNX models and tests (tools/cli_onnx.c) first. */
  if (loom_cli_onnx_wants(argc - 1, argv + 1)) return loom_cli_onnx_main(argc - 1, argv + 1);
  if (strcmp(name, "help") == 0) return cmd_help(argc - 1, argv + 1);
  int (*cmd)(int, char **) = find_command(name);
  if (cmd) return cmd(argc - 1, argv + 1);
  if (name[0] == '-') return loom_cli_usage_error("loom", usage_main, "unknown option '%s'", name);
  return loom_cli_usage_error("loom", usage_main, "unknown command '%s'", name);
}

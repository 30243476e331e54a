/*
 * `loom cluster FILE`: reads a cluster description (perf/cluster.h),
 * checks it and prints it with the figures a planner derives from it.
 * `loom cluster --this-machine [--out FILE]`: measures this machine and
 * writes its description (docs/CLI.md).
 */

#include "loom.h"

#include "bench.h"
#include "cli.h"
#include "core/file.h"
#include "core/strbuf.h"
#include "perf/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loom cluster FILE\n"
    "       loom cluster --this-machine [--out FILE [--force]]\n"
    "\n"
    "Reads a cluster description (docs/CLUSTER.md), checks it and prints it\n"
    "with derived figures; or measures this machine (triad, one-thread sgemm,\n"
    "launch cost, the MPI model the machine profile keeps) and prints its\n"
    "description.\n"
    "\n"
    "  --this-machine   measure this machine instead of reading FILE\n"
    "  --out FILE       write the description to FILE (never replaced without --force)\n"
    "  --force          replace --out FILE if it exists\n"
    "  -h, --help       print this help\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong arguments.\n";

/* What a planner reads off the description. */
static void print_derived(const loom_cluster *c) {
  printf("\n# derived\n");
  for (int32_t p = 0; p < LOOM_PRECISION_COUNT; p++)
    if (c->flops[p] > 0)
      printf("# ridge point %-5s %8.1f FLOP/byte (a kernel below it is memory-bound)\n",
             loom_precision_name((loom_precision)p), c->flops[p] / c->memory_bandwidth_Bps);
  printf("# node: %d devices, %.1f GB of device memory, intra %.1f GB/s per device\n",
         (int)c->devices_per_node, c->memory_bytes * c->devices_per_node / 1e9,
         c->intra.bandwidth_Bps / 1e9);
  if (c->inter.kind[0]) {
    double node = c->inter.bandwidth_Bps * c->inter.nics;
    printf("# network: %.1f GB/s per node out (%d NICs), %.2f GB/s per device\n", node / 1e9,
           (int)c->inter.nics, node / c->devices_per_node / 1e9);
  } else {
    printf("# one node: no network\n");
  }
}

int loom_cli_cluster_main(int argc, char **argv) {
  const char *file = NULL, *out = NULL;
  bool this_machine = false, force = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    if (loom_cli_is_help(arg)) {
      fputs(usage, stdout);
      return 0;
    }
    int got = loom_cli_flag_value(argc, argv, &i, "--out", &v);
    if (got < 0) return loom_cli_usage_error("loom cluster", usage, "--out wants a file name");
    if (got > 0) {
      out = v;
      continue;
    }
    if (!strcmp(arg, "--this-machine")) {
      this_machine = true;
    } else if (!strcmp(arg, "--force")) {
      force = true;
    } else if (arg[0] == '-' && arg[1]) {
      return loom_cli_usage_error("loom cluster", usage, "unknown option '%s'", arg);
    } else if (!file) {
      file = arg;
    } else {
      return loom_cli_usage_error("loom cluster", usage, "unexpected argument '%s'", arg);
    }
  }
  if (this_machine == (file != NULL))
    return loom_cli_usage_error("loom cluster", usage, "%s",
                                this_machine ? "give FILE or --this-machine, not both"
                                             : "give a cluster FILE or --this-machine");
  if (out && !this_machine)
    return loom_cli_usage_error("loom cluster", usage, "--out goes with --this-machine");
  if (force && !out) return loom_cli_usage_error("loom cluster", usage, "--force goes with --out");
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) {
    fprintf(stderr, "loom cluster: out of memory\n");
    return 1;
  }
  int rc = 1;
  unsigned flags = LOOM_FILE_HINT_FORCE | (force ? LOOM_FILE_REPLACE : 0);
  loom_cluster c;
  loom_strbuf b = {0};
  char *text = NULL;
  if (out && loom_file_check_output(ctx, out, flags)) goto fail;
  if (this_machine) {
    fprintf(stderr, "loom cluster: measuring this machine\n");
    if (loom_bench_this_cluster(ctx, &c)) goto fail;
    loom_strbuf_put(&b, "# this machine, measured by `loom cluster --this-machine`: one device\n"
                        "# is one MPI rank of one thread (docs/CLUSTER.md)\n");
  } else if (loom_cluster_load(ctx, file, &c)) {
    goto fail;
  }
  loom_cluster_write(&c, &b);
  text = loom_strbuf_take(&b);
  if (!text) {
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  if (out) {
    if (loom_file_write_atomic(ctx, out, text, strlen(text), flags)) goto fail;
    printf("wrote %s\n", out);
  } else {
    fputs(text, stdout);
    print_derived(&c);
  }
  rc = 0;
  goto done;
fail:
  rc = loom_cli_fail("loom cluster", ctx);
done:
  free(text);
  loom_ctx_free(ctx);
  return rc;
}

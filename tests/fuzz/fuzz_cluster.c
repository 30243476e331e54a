// libFuzzer target over the cluster-description parser (loom_cluster_parse,
// src/perf/cluster.h). Properties: no crash or sanitizer report on any
// bytes; a rejected input leaves a "LINE:COL: ..." message; an accepted
// description is written out and parses back to the same cluster (numbers
// to the writer's 6 significant digits). Built by `make fuzz`; replayed
// over tests/fuzz/corpus/cluster by `make test`.
#include "perf/cluster.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_cluster: %s: %s\n", what, detail);
  __builtin_trap();
}

static void near(double a, double b, const char *what) {
  if (fabs(a - b) > 1e-5 * fabs(b)) fail("parse(write(c)) changed a number", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  loom_cluster c, d;
  loom_status st = loom_cluster_parse(ctx, (const char *)data, size, &c);
  if (st != LOOM_STATUS_OK) {
    int line = 0, col = 0;
    if (sscanf(loom_ctx_error(ctx), "%d:%d: ", &line, &col) != 2 || line < 1 || col < 1)
      fail("error without a position", loom_ctx_error(ctx));
    return 0;
  }
  loom_strbuf b = {0};
  loom_cluster_write(&c, &b);
  char *text = loom_strbuf_take(&b);
  if (!text) fail("write", "out of memory");
  if (loom_cluster_parse(ctx, text, strlen(text), &d) != LOOM_STATUS_OK)
    fail("a written description does not parse", loom_ctx_error(ctx));
  if (strcmp(c.name, d.name) || strcmp(c.device, d.device) || strcmp(c.intra.kind, d.intra.kind) ||
      strcmp(c.inter.kind, d.inter.kind) || c.devices_per_node != d.devices_per_node ||
      c.max_nodes != d.max_nodes || c.inter.nics != d.inter.nics)
    fail("parse(write(c)) changed a name or a count", text);
  for (int32_t p = 0; p < LOOM_PRECISION_COUNT; p++) near(d.flops[p], c.flops[p], "flops");
  near(d.memory_bandwidth_Bps, c.memory_bandwidth_Bps, "memory.bandwidth");
  near(d.memory_bytes, c.memory_bytes, "memory.capacity");
  near(d.kernel_launch_s, c.kernel_launch_s, "kernel.launch");
  near(d.intra.bandwidth_Bps, c.intra.bandwidth_Bps, "intra.bandwidth");
  near(d.intra.latency_s, c.intra.latency_s, "intra.latency");
  near(d.inter.bandwidth_Bps, c.inter.bandwidth_Bps, "inter.bandwidth");
  near(d.inter.latency_s, c.inter.latency_s, "inter.latency");
  free(text);
  return 0;
}

/*
 * Cluster descriptions (perf/cluster.h): the shipped files read to the
 * datasheet figures they quote; units convert; a description written out
 * reads back; every kind of mistake is an error at its LINE:COL; this
 * machine's description is built from a measured machine.
 */
#include "common.h"

#include "perf/cluster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

static void test_shipped(void) {
  loom_cluster c;
  CHECK_OK(ctx, loom_cluster_load(ctx, LOOM_TEST_DATA "/../../clusters/dgx-a100-80gb-hdr.txt", &c));
  CHECK(strcmp(c.name, "dgx-a100-80gb-hdr") == 0 && strcmp(c.device, "a100-sxm4-80gb") == 0);
  CHECK(near(c.flops[LOOM_PRECISION_f32], 19.5e12) && near(c.flops[LOOM_PRECISION_bf16], 312e12));
  CHECK(c.flops[LOOM_PRECISION_fp8] == 0); /* the A100 has no fp8 */
  CHECK(near(c.memory_bandwidth_Bps, 2039e9) && near(c.memory_bytes, 80e9));
  CHECK(c.devices_per_node == 8 && c.max_nodes == 0);
  CHECK(near(c.intra.bandwidth_Bps, 300e9) && near(c.intra.latency_s, 3e-6));
  /* 200 Gb/s is 25 GB/s */
  CHECK(strcmp(c.inter.kind, "infiniband-hdr") == 0 && near(c.inter.bandwidth_Bps, 25e9) &&
        c.inter.nics == 8);
  CHECK_OK(ctx, loom_cluster_load(ctx, LOOM_TEST_DATA "/../../clusters/dgx-h100-ndr.txt", &c));
  CHECK(near(c.flops[LOOM_PRECISION_fp8], 1978.9e12) && near(c.inter.bandwidth_Bps, 50e9));
  CHECK_OK(ctx, loom_cluster_load(ctx, LOOM_TEST_DATA "/../../clusters/hgx-h200-ndr.txt", &c));
  CHECK(near(c.memory_bytes, 141e9) && near(c.memory_bandwidth_Bps, 4.8e12));
}

static const char good[] = "name t\n"
                           "device d   # a comment\n"
                           "flops.f32 2 GFLOP/s\n"
                           "memory.bandwidth 1.5 GiB/s\n"
                           "memory.capacity 512 MiB\n"
                           "kernel.launch 20 us\n"
                           "\n"
                           "node.devices 4\n"
                           "nodes 3\n"
                           "intra.kind shm\n"
                           "intra.bandwidth 4e9\n"
                           "intra.latency 500 ns\n"
                           "inter.kind ethernet\n"
                           "inter.bandwidth 10 Gb/s\n"
                           "inter.latency 0.05 ms\n"
                           "inter.nics 1\n";

static void test_units_and_round_trip(void) {
  loom_cluster c, d;
  CHECK_OK(ctx, loom_cluster_parse(ctx, good, strlen(good), &c));
  CHECK(near(c.flops[LOOM_PRECISION_f32], 2e9) && near(c.memory_bandwidth_Bps, 1.5 * (1 << 30)));
  CHECK(near(c.memory_bytes, 512.0 * (1 << 20)) && near(c.kernel_launch_s, 20e-6));
  CHECK(c.max_nodes == 3 && near(c.intra.bandwidth_Bps, 4e9) && near(c.intra.latency_s, 5e-7));
  CHECK(near(c.inter.bandwidth_Bps, 1.25e9) && near(c.inter.latency_s, 5e-5));
  loom_strbuf b = {0};
  loom_cluster_write(&c, &b);
  char *text = loom_strbuf_take(&b);
  CHECK(text != NULL);
  CHECK_OK(ctx, loom_cluster_parse(ctx, text, strlen(text), &d));
  CHECK(strcmp(d.name, c.name) == 0 && d.devices_per_node == 4 && d.inter.nics == 1);
  CHECK(fabs(d.memory_bandwidth_Bps - c.memory_bandwidth_Bps) < 1e-5 * c.memory_bandwidth_Bps);
  CHECK(fabs(d.inter.latency_s - c.inter.latency_s) < 1e-5 * c.inter.latency_s);
  CHECK(strstr(text, "intra.latency     500 ns") && strstr(text, "flops.f32         2 GFLOP/s"));
  free(text);
}

/* Each broken description fails with its LINE:COL and a message saying
 * what is wrong. */
static void test_errors(void) {
  static const struct {
    const char *what, *text, *want;
  } bad[] = {
      {"unknown key", "name t\nflop.f32 1\n", "2:1: unknown key 'flop.f32'"},
      {"twice", "name t\nname u\n", "2:1: 'name' is given twice"},
      {"no value", "name t\nflops.f32\n", "2:10: 'flops.f32' wants a FLOP rate"},
      {"wrong unit", "name t\nmemory.capacity 3 GB/s\n", "2:19: 'GB/s' is not a unit of 'memory.capacity'"},
      {"not a number", "name t\nflops.f32 fast\n", "2:11: 'flops.f32' wants a FLOP rate"},
      {"negative", "memory.bandwidth -2 GB/s\n", "1:18: 'memory.bandwidth' must be a non-negative"},
      {"fraction of a count", "node.devices 2.5\n", "1:14: 'node.devices' wants a whole number"},
      {"unit on a count", "node.devices 2 GB\n", "1:16: 'GB' is not a unit of 'node.devices'"},
      {"unknown algorithm", "collectives ring\n", "1:13: 'collectives' is one of: nccl direct"},
      {"fraction above 1", "gemm.efficiency 1.5\n", "1:17: 'gemm.efficiency' wants a fraction in (0, 1]"},
      {"zero fraction", "memory.efficiency 0\n", "1:19: 'memory.efficiency' wants a fraction"},
      {"unit on a fraction", "gemm.efficiency 0.5 GB\n", "1:21: 'GB' is not a unit of 'gemm.efficiency'"},
      {"trailing text", "name t\nintra.latency 3 us later\n", "2:20: unexpected text"},
      {"two words", "name big cluster\n", "1:10: 'name' is one word"},
      {"bad name", "device a/b\n", "1:8: 'device' wants a name"},
      {"NUL", "name t\nde\0vice x\n", "2:3: a NUL byte"},
      {"missing", "name t\n", "'device' is missing"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    size_t len = strlen(bad[k].text);
    if (strcmp(bad[k].what, "NUL") == 0) len = 17;
    loom_cluster c;
    loom_status st = loom_cluster_parse(ctx, bad[k].text, len, &c);
    CHECK(st == LOOM_STATUS_PARSE);
    bool ok = strstr(loom_ctx_error(ctx), bad[k].want) != NULL;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  %s: got '%s', want '%s'\n", bad[k].what, loom_ctx_error(ctx), bad[k].want);
  }
  /* consistency no single line shows */
  char text[1024];
  snprintf(text, sizeof text, "%.*s", (int)(strstr(good, "inter.kind") - good), good);
  loom_cluster c;
  CHECK(loom_cluster_parse(ctx, text, strlen(text), &c) == LOOM_STATUS_PARSE);
  CHECK(strstr(loom_ctx_error(ctx), "nodes 3 needs an inter-node link"));
  snprintf(text, sizeof text, "%.*s", (int)(strstr(good, "inter.bandwidth") - good), good);
  CHECK(loom_cluster_parse(ctx, text, strlen(text), &c) == LOOM_STATUS_PARSE);
  CHECK(strstr(loom_ctx_error(ctx), "needs inter.kind, inter.bandwidth (> 0), inter.latency"));
  snprintf(text, sizeof text, "%s", good);
  char *zero = strstr(text, "node.devices 4");
  zero[13] = '0';
  CHECK(loom_cluster_parse(ctx, text, strlen(text), &c) == LOOM_STATUS_PARSE);
  CHECK(strstr(loom_ctx_error(ctx), "'node.devices' must be positive"));
  /* a file: the path in front, nothing but regular files */
  CHECK(loom_cluster_load(ctx, "/nonexistent/cluster.txt", &c) != LOOM_STATUS_OK);
  CHECK(strstr(loom_ctx_error(ctx), "/nonexistent/cluster.txt"));
  CHECK(loom_cluster_load(ctx, "/dev/null", &c) != LOOM_STATUS_OK);
}

static void test_this_machine(void) {
  loom_machine m;
  loom_machine_default(&m);
  m.cores = 4;
  m.triad_gbps = 20;
  m.comm = (loom_comm_model){2e-6, 8e9, true, 0, 0};
  loom_cluster c;
  loom_cluster_this_machine(&m, 50, 40, 16e9, &c);
  c.attention_efficiency = 0.375; /* what the bench fits from a measured step */
  /* a device is one core: its sgemm rate, its share of the bandwidth and memory */
  CHECK(c.devices_per_node == 4 && c.max_nodes == 1 && !c.inter.kind[0]);
  CHECK(near(c.flops[LOOM_PRECISION_f32], 50e9) && near(c.memory_bandwidth_Bps, 5e9));
  CHECK(near(c.memory_bytes, 4e9) && near(c.intra.latency_s, 2e-6) && near(c.intra.bandwidth_Bps, 8e9));
  CHECK(strcmp(c.intra.kind, "mpi-shm") == 0);
  loom_strbuf b = {0};
  loom_cluster_write(&c, &b);
  char *text = loom_strbuf_take(&b);
  loom_cluster d;
  CHECK_OK(ctx, loom_cluster_parse(ctx, text, strlen(text), &d));
  CHECK(d.devices_per_node == 4 && near(d.flops[LOOM_PRECISION_f32], 50e9));
  /* measured: a large GEMM's rate is flops.f32, the triad is the bandwidth */
  CHECK(d.gemm_efficiency == 1 && d.gemm_half_dim == 40 && d.memory_efficiency == 1);
  CHECK(strcmp(d.collectives, "direct") == 0);
  CHECK(strstr(text, "gemm.efficiency   1\n") && strstr(text, "gemm.half_dim     40\n"));
  CHECK(strstr(text, "attn.efficiency   0.375\n") && d.attention_efficiency == 0.375);
  free(text);
  /* 8 ranks on its 4 cores: each gets half a core */
  loom_cluster_time_shared(&c, 8, &d);
  CHECK(d.devices_per_node == 8 && near(d.flops[LOOM_PRECISION_f32], 25e9));
  CHECK(near(d.memory_bandwidth_Bps, 2.5e9) && near(d.intra.bandwidth_Bps, 8e9));
  CHECK(strcmp(d.name, "this-machine-4c-x8") == 0);
  d = c;
  loom_cluster_time_shared(&d, 8, &d); /* in place */
  CHECK(strcmp(d.name, "this-machine-4c-x8") == 0 && near(d.flops[LOOM_PRECISION_f32], 25e9));
  loom_cluster_time_shared(&c, 3, &d);
  CHECK(d.devices_per_node == 4 && near(d.flops[LOOM_PRECISION_f32], 50e9));
}

int main(void) {
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  test_shipped();
  test_units_and_round_trip();
  test_errors();
  test_this_machine();
  loom_ctx_free(ctx);
  return loom_test_finish("test_cluster");
}

/*
 * A cluster description: the hardware a plan is simulated or searched on
 * (docs/CLUSTER.md). Devices are alike; nodes hold node.devices of them,
 * joined by the intra-node link (NVLink, PCIe, shared memory) and to other
 * nodes by inter.nics network cards (InfiniBand, Ethernet). A small text
 * file, one `key value [unit]` per line:
 *
 *   name              dgx-a100-80gb-hdr
 *   device            a100-sxm4-80gb
 *   flops.f32         19.5 TFLOP/s      # dense, per device
 *   flops.tf32        156 TFLOP/s
 *   flops.bf16        312 TFLOP/s
 *   memory.bandwidth  2039 GB/s
 *   memory.capacity   80 GB
 *   node.devices      8
 *   intra.kind        nvlink
 *   intra.bandwidth   300 GB/s          # per device, one direction
 *   intra.latency     3 us
 *   inter.kind        infiniband
 *   inter.bandwidth   200 Gb/s          # per NIC, one direction
 *   inter.latency     5 us
 *   inter.nics        8                 # per node
 *
 * Errors are "PATH:LINE:COL: message" like the text IR's. Shipped files:
 * clusters/ (this machine's is written by `loom cluster --this-machine`).
 */
#ifndef LOOM_PERF_CLUSTER_H
#define LOOM_PERF_CLUSTER_H

#include "core/strbuf.h"
#include "perf/machine.h"

/* The precisions a device's dense FLOP rate is given for. */
#define LOOM_PRECISION_LIST(X) X(f32) X(tf32) X(bf16) X(fp8)
typedef enum loom_precision {
#define LOOM_PRECISION_ENUM(p) LOOM_PRECISION_##p,
  LOOM_PRECISION_LIST(LOOM_PRECISION_ENUM)
#undef LOOM_PRECISION_ENUM
  LOOM_PRECISION_COUNT
} loom_precision;
const char *loom_precision_name(loom_precision p);

#define LOOM_CLUSTER_NAME_MAX 64
#define LOOM_CLUSTER_MAX_FILE ((size_t)1 << 20)

typedef struct loom_cluster_link {
  char kind[LOOM_CLUSTER_NAME_MAX]; /* "nvlink", "infiniband", "shm", ... ("" : none) */
  double bandwidth_Bps;             /* one direction: per device (intra), per NIC (inter) */
  double latency_s;                 /* per message */
  int32_t nics;                     /* inter only: NICs per node */
} loom_cluster_link;

typedef struct loom_cluster {
  char name[LOOM_CLUSTER_NAME_MAX];
  char device[LOOM_CLUSTER_NAME_MAX];
  double flops[LOOM_PRECISION_COUNT]; /* dense FLOP/s per device; 0: not offered */
  double memory_bandwidth_Bps;
  double memory_bytes; /* capacity per device */
  double kernel_launch_s; /* fixed cost of one kernel; 0 if not given */
  /* The device's efficiency model (0: the simulator's defaults): the
   * fraction of flops.* a large GEMM reaches, the smallest GEMM dimension
   * at which it reaches half of that, and the fraction of
   * memory.bandwidth a streaming kernel reaches. */
  double gemm_efficiency;
  int32_t gemm_half_dim;
  double memory_efficiency;
  /* the fraction of flops.* fused attention kernels reach (0: the GEMM
   * efficiency; a CPU's flash kernels run well below its GEMMs) */
  double attention_efficiency;
  /* ranks sharing cores (loom_sim_options.cores): the fraction of a core
   * a rank takes while it polls for its peers (0: none) */
  double wait_share;
  /* ranks sharing cores: the fraction of their fair share of a core that
   * processes taking turns on it get (switching, caches refilled; 0: 1),
   * at two processes a core; in between, in proportion */
  double shared_efficiency;
  /* ranks polling MPI on time-shared cores (loom_measure_turns): one
   * pause of a polling wait, and the wait for a turn on a core of a
   * collective's member that is off one (0: none; docs/SIMULATOR.md) */
  double wait_period_s, wait_turn_s;
  /* the rate of a collective's own copies and reductions on a device
   * (Loom's direct collectives; 0: the memory bandwidth's) */
  double comm_copy_Bps;
  int32_t devices_per_node;
  /* the collectives' algorithms: "nccl" (rings, trees, hierarchical
   * across nodes; the default) or "direct" (Loom's own over MPI) */
  char collectives[LOOM_CLUSTER_NAME_MAX];
  int32_t max_nodes;       /* 0: as many as a plan asks for */
  loom_cluster_link intra; /* required */
  loom_cluster_link inter; /* kind "" when the cluster is one node */
} loom_cluster;

/* Parses len bytes of cluster text; errors are LOOM_STATUS_PARSE with
 * "LINE:COL: message". */
loom_status loom_cluster_parse(loom_ctx *ctx, const char *text, size_t len, loom_cluster *out);
/* loom_cluster_parse of a file; errors are "PATH:LINE:COL: message". */
loom_status loom_cluster_load(loom_ctx *ctx, const char *path, loom_cluster *out);
/* Appends c in the file grammar, each number in the largest decimal unit
 * not above it, to 6 significant digits: parsing the text gives c back to
 * that precision (check b->oom at the end). */
void loom_cluster_write(const loom_cluster *c, loom_strbuf *b);

/* This machine as a cluster of one node whose devices are its cores (one
 * MPI rank of one thread each, as `mpirun -np N loom train --plan` runs
 * them): per device the single-thread sgemm rate (flops.f32), the
 * all-core triad bandwidth and the memory shared out evenly; the intra
 * link is the MPI comm model the machine profile keeps (perf/profile.h).
 * m: a measured machine (perf/measure.h); single_sgemm_gflops: the
 * one-thread sgemm rate (gemm.efficiency 1 here: the caller measures
 * what a training step's GEMMs reach of it) and gemm_half_dim the
 * simulator's H for a skinny GEMM; memory_bytes: physical memory. */
void loom_cluster_this_machine(const loom_machine *m, double single_sgemm_gflops,
                               int32_t gemm_half_dim, double memory_bytes, loom_cluster *out);

/* c with `ranks` devices per node time-sharing its node.devices (ranks
 * processes on a machine's cores, as `mpirun --oversubscribe` runs them):
 * when ranks exceed the devices, each rank gets devices / ranks of one
 * device's FLOP rate and memory bandwidth. */
void loom_cluster_time_shared(const loom_cluster *c, int32_t ranks, loom_cluster *out);

#endif

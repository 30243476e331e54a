#include "runtime/cpu/gemm_restride.h"

#include "core/clock.h"
#include "perf/profile.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Strides that are a multiple of RESTRIDE_BAD_BYTES are harmful; RESTRIDE_PAD
 * floats more make them odd multiples of 64 bytes, spread over the sets. */
#define RESTRIDE_BAD_BYTES 1024
#define RESTRIDE_PAD 16
/* Restriding is used where the probe's gain reaches this (copying B costs
 * a few percent of a product; where the copy path does not thrash, the
 * probe reads about 1.0). */
#define RESTRIDE_MIN_GAIN 1.1

int64_t loom_gemm_restride_ld(int64_t ld) {
  return ld > 0 && (ld * (int64_t)sizeof(float)) % RESTRIDE_BAD_BYTES == 0 ? ld + RESTRIDE_PAD : 0;
}

/* The probe: one core, C[256, 512] = A[256, 512] B[512, 512] with B's rows
 * PROBE_LD floats (4 KiB) apart and then PROBE_LD + RESTRIDE_PAD, best
 * of PROBE_RUNS by CPU time; the gain is the first time over the second. */
#define PROBE_M 256
#define PROBE_N 512
#define PROBE_K 512
#define PROBE_LD 1024
#define PROBE_RUNS 3

static double probe_gain(void) {
  const int64_t ld_pad = PROBE_LD + RESTRIDE_PAD;
  float *a = aligned_alloc(64, sizeof(float) * PROBE_M * PROBE_K);
  float *b = aligned_alloc(64, sizeof(float) * PROBE_K * ld_pad);
  float *c = aligned_alloc(64, sizeof(float) * PROBE_M * PROBE_N);
  double gain = 1.0;
  if (a && b && c) {
    for (int64_t i = 0; i < PROBE_M * PROBE_K; i++) a[i] = (float)(i % 5) * 0.25f;
    for (int64_t i = 0; i < PROBE_K * ld_pad; i++) b[i] = (float)(i % 7) * 0.125f;
    int prev = omp_get_max_threads();
    omp_set_num_threads(1); /* oneDNN on this thread only */
    double best[2] = {1e30, 1e30};
    bool ok = true;
    for (int32_t run = 0; run <= PROBE_RUNS && ok; run++) /* run 0 warms up */
      for (int32_t pad = 0; pad < 2 && ok; pad++) {
        double t0 = loom_thread_cpu_s();
        ok = dnnl_sgemm('N', 'N', PROBE_M, PROBE_N, PROBE_K, 1.0f, a, PROBE_K, b,
                        pad ? ld_pad : PROBE_LD, 0.0f, c, PROBE_N) == dnnl_success;
        if (run > 0) best[pad] = fmin(best[pad], loom_thread_cpu_s() - t0);
      }
    omp_set_num_threads(prev);
    if (ok && best[1] > 0) gain = round(best[0] / best[1] * 20) / 20; /* steps of 0.05 */
  }
  free(a);
  free(b);
  free(c);
  return gain;
}

static bool pays;

static void decide(void) {
  const char *env = getenv("LOOM_GEMM_RESTRIDE");
  if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0)) {
    pays = env[0] == '1';
    return;
  }
  double gain = 0;
  if (!loom_profile_get("gemm_restride_gain", &gain) || !(gain > 0)) {
    gain = probe_gain();
    loom_profile_put("gemm_restride_gain", gain);
  }
  pays = gain >= RESTRIDE_MIN_GAIN;
}

bool loom_gemm_restride_pays(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, decide);
  return pays;
}

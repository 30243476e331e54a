/*
 * Running `loom train` under mpirun from a benchmark (harness.h): this
 * executable's own path, the command line, and the trainer's tokens/s.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double loom_bench_train_tok_s(const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[512];
  double tps = -1, steady = -1;
  while (fgets(line, sizeof line, p)) {
    const char *q = strstr(line, "final loss");
    const char *comma = q ? strrchr(line, ',') : NULL;
    if (comma) tps = strtod(comma + 1, NULL);
    /* "step N/M loss L lr R T tok/s": a line after step 1 covers the steps
     * since the last one logged, so the warm-up step is not in it */
    long long done = 0, of = 0;
    double loss = 0, lr = 0, rate = 0;
    if (sscanf(line, "step %lld/%lld loss %lf lr %lf %lf tok/s", &done, &of, &loss, &lr, &rate) ==
            5 &&
        done > 1)
      steady = rate;
  }
  int rc = pclose(p);
  return rc != 0 ? -1 : steady > 0 ? steady : tps;
}

bool loom_bench_mpi_exe(char *exe, size_t size) {
  ssize_t n = readlink("/proc/self/exe", exe, size - 1);
  if (n <= 0 || system("command -v mpirun >/dev/null 2>&1") != 0) return false;
  exe[n] = '\0';
  return true;
}

void loom_bench_mpirun_cmd(char *cmd, size_t size, int32_t np, const char *exe, const char *flags,
                           const char *plan, const char *extra) {
  snprintf(cmd, size,
           "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
           "--oversubscribe -np %d '%s' %s --plan %s %s 2>&1",
           (int)np, exe, flags, plan, extra);
}

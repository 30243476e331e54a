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
  double tps = -1;
  while (fgets(line, sizeof line, p)) {
    const char *q = strstr(line, "final loss");
    const char *comma = q ? strrchr(line, ',') : NULL;
    if (comma) tps = strtod(comma + 1, NULL);
  }
  int rc = pclose(p);
  return rc == 0 ? tps : -1;
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

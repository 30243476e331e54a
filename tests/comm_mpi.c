/* The MPI communicator under mpirun (tests/CMakeLists.txt: -np 2 and 4):
 * the same checks as the in-process test (comm_checks.c), on processes.
 * Exits 77 (a ctest skip) with a message when MPI or mpirun is missing.
 * `--die` / `--abort`: rank 1 exits mid-job / calls loom_comm_abort while
 * the others wait in a barrier with a 60 s timeout; the test
 * (test_comm_mpi_die, _abort) checks that the job ends non-zero well
 * before that. */
#include "comm_checks.h"
#include "common.h"

#include "core/clock.h"

#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if ((argc > 1 && strcmp(argv[1], "--skip") == 0) || !loom_comm_mpi_available()) {
    printf("comm_mpi: skipped: %s\n", loom_comm_mpi_available()
                                          ? "mpirun not found"
                                          : "Loom was built without MPI (scripts/install-deps.sh)");
    return 77;
  }
  loom_ctx *ctx = NULL;
  loom_comm *c = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  CHECK_OK(ctx, loom_comm_mpi_new(ctx, &c));
  if (!c) return loom_test_finish("comm_mpi");
  if (argc > 1 && (strcmp(argv[1], "--die") == 0 || strcmp(argv[1], "--abort") == 0)) {
    CHECK_OK(ctx, loom_comm_set_timeout(c, ctx, 60));
    CHECK_OK(ctx, loom_comm_barrier(c, ctx));
    /* Every rank ends without its exit handlers: rank 1 by _exit or
     * MPI_Abort, the others killed by mpirun (SIGTERM, and SIGKILL a
     * moment later on a loaded machine), so none keeps its test cache. */
    loom_test_remove_cache();
    if (c->rank == 1) {
      if (strcmp(argv[1], "--die") == 0) _exit(3); /* no finalize, no goodbye */
      loom_comm_abort(c, "rank 1 found a different plan");
    }
    loom_status s = loom_comm_barrier(c, ctx); /* never completes */
    printf("comm_mpi rank %d: barrier returned %s: %s\n", (int)c->rank, loom_status_name(s),
           loom_ctx_error(ctx));
    loom_comm_free(c);
    loom_ctx_free(ctx);
    return 0;
  }
  int failures = comm_check_all(c, ctx, &loom_test_checks);
  loom_test_failures += failures;
  /* Every rank's verdict, so that rank 0 reports the job's. */
  int64_t bad = failures;
  CHECK_OK(ctx, loom_comm_all_reduce(c, ctx, &bad, 1, LOOM_DTYPE_I64, LOOM_COMM_SUM));
  if (c->rank == 0) printf("comm_mpi: %d ranks, failures on all ranks: %lld\n", (int)c->size,
                           (long long)bad);
  CHECK(bad == 0);
  /* A receive from a rank that never sends ends within the timeout with a
   * message naming the peer (MPI_Test loop + cancel). */
  if (c->size >= 2) {
    CHECK_OK(ctx, loom_comm_set_timeout(c, ctx, 0.3));
    if (c->rank == 1) {
      float x[2];
      double t0 = loom_now_s();
      CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_comm_recv(c, ctx, x, 2, LOOM_DTYPE_F32, 0, 9));
      double dt = loom_now_s() - t0;
      CHECK(dt >= 0.29 && dt < 3.0);
      CHECK(strstr(loom_ctx_error(ctx), "recv from rank 0") != NULL);
      printf("comm_mpi: timeout after %.2f s: %s\n", dt, loom_ctx_error(ctx));
    }
    CHECK_OK(ctx, loom_comm_set_timeout(c, ctx, 30));
    CHECK_OK(ctx, loom_comm_barrier(c, ctx));
  }
  int rank = c->rank;
  loom_comm_free(c);
  loom_ctx_free(ctx);
  char name[32];
  snprintf(name, sizeof name, "comm_mpi rank %d", rank);
  return loom_test_finish(name);
}

/*
 * Runs after every other test (a ctest fixture's cleanup,
 * tests/CMakeLists.txt): no test left its private kernel cache behind.
 * Each is a folder loom-test-cache-PID-XXXXXX under the build's tests/tmp
 * (common.c); one whose process is gone is a leftover, reported and
 * removed. A live one belongs to a test still running (a concurrent
 * ctest, or scripts/test_times.py, which ignores fixtures) and is kept.
 * A test that timed out (SIGKILL) leaves one: it failed already.
 * First, the removal on SIGTERM itself: a child (this program again,
 * idle) is sent one, and its folder is gone.
 */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The owner's pid in a cache folder's name, or 0 if it is not one. */
static long owner_pid(const char *name) {
  static const char prefix[] = "loom-test-cache-";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return 0;
  char *end = NULL;
  long pid = strtol(name + sizeof prefix - 1, &end, 10);
  return end && *end == '-' && pid > 0 ? pid : 0;
}

static bool alive(long pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

#ifdef LOOM_TEST_TMP
/* True if a cache folder of process pid exists. */
static bool has_cache(long pid) {
  DIR *d = opendir(LOOM_TEST_TMP);
  bool found = false;
  struct dirent *e;
  while (d && !found && (e = readdir(d))) found = owner_pid(e->d_name) == pid;
  if (d) closedir(d);
  return found;
}

/* A child of this program killed by SIGTERM leaves no cache. */
static void test_sigterm(const char *self) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    execl(self, self, "--idle", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  CHECK(pid > 0);
  if (pid <= 0) return;
  char ready = 0; /* the child is in main: its constructor is done */
  CHECK(read(fds[0], &ready, 1) == 1 && ready == 'r');
  close(fds[0]);
  CHECK(has_cache((long)pid));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  CHECK(!has_cache((long)pid));
}
#endif

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--idle") == 0) { /* test_sigterm's child */
    fputs("r", stdout);
    fflush(stdout);
    for (;;) pause();
  }
  /* the name check itself */
  CHECK(owner_pid("loom-test-cache-1234-AbC123") == 1234);
  CHECK(owner_pid("loom-test-cache-AbC123") == 0 && owner_pid("loom-jit-1234-x") == 0);
  CHECK(alive((long)getpid()));
#ifdef LOOM_TEST_TMP
  test_sigterm(argv[0]);
  DIR *d = opendir(LOOM_TEST_TMP);
  CHECK(d != NULL); /* common.c made it for this very process */
  int mine = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    long pid = owner_pid(e->d_name);
    if (pid == (long)getpid()) mine++;
    if (pid == 0 || alive(pid)) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", LOOM_TEST_TMP, e->d_name);
    fprintf(stderr, "test_tmp_left: %s was left behind (process %ld is gone); removed\n", path,
            pid);
    loom_test_remove_tree(path);
    CHECK(!"a test left its kernel cache behind");
  }
  if (d) closedir(d);
  CHECK(mine == 1);
#endif
  return loom_test_finish("test_tmp_left");
}

#include "common.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int loom_test_failures = 0;
int loom_test_checks = 0;

int loom_test_finish(const char *name) {
  printf("%s: %d passed, %d failed\n", name, loom_test_checks - loom_test_failures,
         loom_test_failures);
  return loom_test_failures ? 1 : 0;
}

double loom_test_uniform(loom_test_rng *r, double lo, double hi) {
  uint64_t x = r->s ? r->s : 0x9e3779b97f4a7c15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  r->s = x;
  return lo + (hi - lo) * (double)(x >> 11) / 9007199254740992.0;
}

void loom_test_remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        loom_test_remove_tree(p);
      else
        unlink(p);
    }
    closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* Every test program gets a private kernel cache (XDG_CACHE_HOME),
 * created before main and removed at exit, so tests never read or write
 * the user's cache, and a stale or foreign entry there cannot change a
 * result. Only the process that made it removes it (not a forked child). */
static char test_cache[512];
static pid_t test_cache_owner;

static void remove_test_cache(void) {
  if (test_cache[0] && getpid() == test_cache_owner) loom_test_remove_tree(test_cache);
}

__attribute__((constructor)) static void make_test_cache(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(test_cache, sizeof test_cache, "%s/loom-test-cache-XXXXXX",
           tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(test_cache)) {
    test_cache[0] = '\0';
    return;
  }
  test_cache_owner = getpid();
  setenv("XDG_CACHE_HOME", test_cache, 1);
  atexit(remove_test_cache);
}

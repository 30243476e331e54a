#include "common.h"

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

/* Replays fuzz inputs without libFuzzer: feeds every file of the given
 * directories (and files) to the target's LLVMFuzzerTestOneInput, once
 * each, in name order. Linked with one fuzz_*.c by the normal compiler,
 * it is the ctest `fuzz_NAME` over tests/fuzz/corpus/NAME: seeds and
 * every crasher ever found stay fixed. A property failure traps (the
 * target calls __builtin_trap), so the test fails on the file it names. */
#define _DEFAULT_SOURCE /* DT_DIR */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  size_t cap = 1 << 12, n = 0, got;
  uint8_t *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return 1;
  }
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  /* a copy of exactly n bytes, as libFuzzer passes: overreads are caught */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return 1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file directly in dir; returns the count, or -1. */
static int replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: cannot open directory %s\n", dir);
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      char **nn = realloc(names, sizeof *names * (cap = cap ? 2 * cap : 64));
      if (!nn) break;
      names = nn;
    }
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (!names[n]) break;
    snprintf(names[n++], len, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp_names);
  int count = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      bad += replay_file(names[i]);
      count++;
    }
    free(names[i]);
  }
  free(names);
  return bad ? -1 : count;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      return 1;
    }
    int k = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? -1 : 1);
    if (k < 0) return 1;
    total += k;
  }
  if (total == 0) {
    fprintf(stderr, "replay: no inputs\n");
    return 1;
  }
  printf("replay: %d inputs, no failures\n", total);
  return 0;
}

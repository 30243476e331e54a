// libFuzzer target over the .npy reader (loom_tensor_load_npy). The reader
// works on files (it checks the data size against the file's size), so
// each input is written to one private temporary file (in $TMPDIR, else
// /dev/shm) and loaded from there. Properties: no crash or sanitizer
// report on any bytes; a rejected input leaves a message naming the file;
// an accepted one is a tensor whose data is the file's last
// numel * dtype-size bytes (bools as 0/1). Built by `make fuzz` (clang,
// libFuzzer); replayed over tests/fuzz/corpus/npy by `make test`
// (tests/fuzz/replay.c).
#include "loom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static loom_ctx *ctx;
static char path[64];

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_npy: %s: %s\n", what, detail);
  __builtin_trap();
}

static void cleanup(void) {
  if (path[0]) unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
    /* memory-backed if there is one: a file per input is the slow part */
    const char *dir = getenv("TMPDIR");
    if (!dir || strlen(dir) >= 32) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/loom_fuzz_npy_XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) fail("mkstemp", path);
    close(fd);
    atexit(cleanup);
  }
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) fail("cannot write", path);
  loom_tensor *t = NULL;
  loom_status st = loom_tensor_load_npy(ctx, path, &t);
  if (st != LOOM_STATUS_OK) {
    if (t) fail("a failed load returned a tensor", loom_ctx_error(ctx));
    if (st != LOOM_STATUS_OUT_OF_MEMORY && !strstr(loom_ctx_error(ctx), path))
      fail("error does not name the file", loom_ctx_error(ctx));
    return 0;
  }
  size_t nb = (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
  if (nb > size) fail("tensor larger than the file", "");
  const uint8_t *want = data + size - nb, *got = loom_tensor_data(t);
  for (size_t i = 0; i < nb; i++) {
    uint8_t w = loom_tensor_dtype(t) == LOOM_DTYPE_BOOL ? want[i] != 0 : want[i];
    if (got[i] != w) fail("tensor data differs from the file's", "");
  }
  loom_tensor_free(t);
  return 0;
}

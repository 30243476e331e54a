/* The run-time compiler and its content-addressed cache: SHA-256 known
 * answers, compile + call, cache hits, corrupt and mismatched entries
 * rebuilt, compiler errors, a missing compiler, an unusable cache dir. */
#include "common.h"

#include "runtime/jit.h"
#include "core/sha256.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static loom_ctx *ctx;
static char cache_root[256]; /* XDG_CACHE_HOME for this test */

static void hex32(const uint8_t d[32], char out[65]) {
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_sha256(void) {
  uint8_t d[32];
  char h[65];
  loom_sha256("", 0, d);
  hex32(d, h);
  CHECK(strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
  loom_sha256("abc", 3, d);
  hex32(d, h);
  CHECK(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  loom_sha256(m, strlen(m), d);
  hex32(d, h);
  CHECK(strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
  /* a million 'a', fed in uneven pieces through the streaming interface */
  loom_sha256_state s;
  loom_sha256_init(&s);
  char block[1000];
  memset(block, 'a', sizeof block);
  size_t left = 1000000, step = 1;
  while (left) {
    size_t take = step < left ? step : left;
    loom_sha256_update(&s, block, take);
    left -= take;
    step = step % 977 + 13; /* at most 989 <= sizeof block */
  }
  loom_sha256_final(&s, d);
  hex32(d, h);
  CHECK(strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

static const char *src_add =
    "#include <omp.h>\n"
    "int loom_test_add(int a, int b) { return a + b; }\n"
    "long loom_test_sum(int n, int nt) {\n"
    "  long s = 0;\n"
    "#pragma omp parallel for reduction(+ : s) num_threads(nt)\n"
    "  for (int i = 0; i < n; i++) s += i;\n"
    "  return s;\n"
    "}\n";

typedef int (*add_fn)(int, int);
typedef long (*sum_fn)(int, int);

static void entry_path(const char *key, const char *ext, char *out, size_t n) {
  snprintf(out, n, "%s/loom/%s.%s", cache_root, key, ext);
}

/* Loads src_add and checks that it runs; returns the info. */
static loom_jit_info load_and_call(const char *src) {
  loom_jit_info info;
  memset(&info, 0, sizeof info);
  loom_jit_module *m = NULL;
  CHECK_OK(ctx, loom_jit_load_ex(ctx, src, &m, &info));
  if (!m) return info;
  add_fn add = (add_fn)loom_jit_symbol(m, "loom_test_add");
  sum_fn sum = (sum_fn)loom_jit_symbol(m, "loom_test_sum");
  CHECK(add && sum);
  if (add) CHECK(add(40, 2) == 42);
  if (sum) CHECK(sum(1000, 3) == 499500);
  CHECK(loom_jit_symbol(m, "no_such_symbol") == NULL);
  const char *k = loom_jit_symbol(m, "loom_module_key");
  CHECK(k && strcmp(k, info.key) == 0);
  CHECK(strcmp(loom_jit_module_key(m), info.key) == 0);
  loom_jit_free(m);
  return info;
}

static void test_compile_and_cache(void) {
  loom_jit_info a = load_and_call(src_add);
  CHECK(!a.cache_hit && !a.rebuilt && !a.private_dir);
  CHECK(strlen(a.key) == 64);
  char so[512], c[512], dir[512];
  entry_path(a.key, "so", so, sizeof so);
  entry_path(a.key, "c", c, sizeof c);
  snprintf(dir, sizeof dir, "%s/loom", cache_root);
  struct stat st;
  CHECK(stat(so, &st) == 0 && st.st_size > 100);
  CHECK(stat(c, &st) == 0);
  CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700);

  /* the same source again: a hit with the same key */
  loom_jit_info b = load_and_call(src_add);
  CHECK(b.cache_hit && !b.rebuilt && b.compile_seconds == 0.0);
  CHECK(strcmp(a.key, b.key) == 0);

  /* loom_jit_load's plain interface */
  bool hit = false;
  loom_jit_module *m = NULL;
  CHECK_OK(ctx, loom_jit_load(ctx, src_add, &m, &hit));
  CHECK(hit && m);
  loom_jit_free(m);
  loom_jit_free(NULL);

  /* another source gets another key */
  char other[1024];
  snprintf(other, sizeof other, "%s/* another */\n", src_add);
  loom_jit_info o = load_and_call(other);
  CHECK(!o.cache_hit && strcmp(o.key, a.key) != 0);
}

/* Overwrites bytes in the middle of a file. */
static void scribble(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return;
  int fd = open(path, O_WRONLY);
  CHECK(fd >= 0);
  if (fd < 0) return;
  char junk[64];
  memset(junk, 0x5a, sizeof junk);
  CHECK(pwrite(fd, junk, sizeof junk, st.st_size / 2) == (ssize_t)sizeof junk);
  close(fd);
}

static void test_corrupt_entries(void) {
  loom_jit_info a = load_and_call(src_add); /* present from before: a hit */
  CHECK(a.cache_hit);
  char so[512];
  entry_path(a.key, "so", so, sizeof so);

  scribble(so);
  loom_jit_info b = load_and_call(src_add);
  CHECK(!b.cache_hit && b.rebuilt);

  struct stat st;
  CHECK(stat(so, &st) == 0);
  CHECK(truncate(so, st.st_size / 3) == 0);
  loom_jit_info c = load_and_call(src_add);
  CHECK(!c.cache_hit && c.rebuilt);

  CHECK(truncate(so, 0) == 0);
  loom_jit_info d = load_and_call(src_add);
  CHECK(!d.cache_hit && d.rebuilt);

  /* and after each rebuild the entry is good again */
  loom_jit_info e = load_and_call(src_add);
  CHECK(e.cache_hit && !e.rebuilt);
}

static bool copy_file(const char *from, const char *to, size_t drop_tail, const void *tail,
                      size_t tail_n) {
  FILE *f = fopen(from, "rb");
  if (!f) return false;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  if (n < drop_tail || n - drop_tail + tail_n > sizeof buf) return false;
  n -= drop_tail;
  if (tail_n) memcpy(buf + n, tail, tail_n);
  n += tail_n;
  f = fopen(to, "wb");
  if (!f) return false;
  bool ok = fwrite(buf, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static void test_key_mismatch(void) {
  char src_b[1024];
  snprintf(src_b, sizeof src_b, "%s/* b */\n", src_add);
  loom_jit_info a = load_and_call(src_add);
  loom_jit_info b = load_and_call(src_b);
  char so_a[512], so_b[512];
  entry_path(a.key, "so", so_a, sizeof so_a);
  entry_path(b.key, "so", so_b, sizeof so_b);

  /* A's entry under B's name: the trailer names A's key */
  CHECK(copy_file(so_a, so_b, 0, NULL, 0));
  loom_jit_info b2 = load_and_call(src_b);
  CHECK(!b2.cache_hit && b2.rebuilt);

  /* A's code with a consistent trailer for B's key: only the exported
   * loom_module_key can tell, and does */
  FILE *f = fopen(so_a, "rb");
  static char buf[1 << 20];
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  CHECK(n > 72);
  if (n <= 72) return;
  uint8_t tail[72], keyb[32];
  memcpy(tail, "LOOMJIT1", 8);
  loom_sha256(buf, n - 72, tail + 8);
  for (int i = 0; i < 32; i++) {
    unsigned v;
    sscanf(b.key + 2 * i, "%2x", &v);
    keyb[i] = (uint8_t)v;
  }
  memcpy(tail + 40, keyb, 32);
  CHECK(copy_file(so_a, so_b, 72, tail, sizeof tail));
  loom_jit_info b3 = load_and_call(src_b);
  CHECK(!b3.cache_hit && b3.rebuilt);
  loom_jit_info b4 = load_and_call(src_b);
  CHECK(b4.cache_hit);
}

static void test_compiler_errors(void) {
  loom_jit_module *m = NULL;
  const char *bad = "int loom_broken(void) { return 1 +; }\n";
  CHECK_STATUS(ctx, LOOM_STATUS_INTERNAL, loom_jit_load(ctx, bad, &m, NULL));
  CHECK(m == NULL);
  const char *msg = loom_ctx_error(ctx);
  CHECK(strstr(msg, "C compiler failed") != NULL);
  CHECK(strstr(msg, "error") != NULL);
  CHECK(strstr(msg, "loom_broken") != NULL || strstr(msg, ":1:") != NULL);
  CHECK(strstr(msg, ".tmp-") == NULL); /* shown against the kept source's name */

  setenv("LOOM_CC", "/nonexistent/cc", 1);
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_jit_load(ctx, src_add, &m, NULL));
  CHECK(strstr(loom_ctx_error(ctx), "no C compiler") != NULL);
  CHECK(strstr(loom_ctx_error(ctx), "/nonexistent/cc") != NULL);
  CHECK(m == NULL);
  setenv("LOOM_CC", "/bin/false", 1); /* exists, but is no compiler */
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_jit_load(ctx, src_add, &m, NULL));
  unsetenv("LOOM_CC");

  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_jit_load(ctx, NULL, &m, NULL));
}

static void test_private_dir(void) {
  char saved[256];
  snprintf(saved, sizeof saved, "%s", getenv("XDG_CACHE_HOME"));
  setenv("XDG_CACHE_HOME", "/dev/null", 1); /* /dev/null/loom cannot exist */
  loom_jit_info a = load_and_call(src_add);
  CHECK(a.private_dir && !a.cache_hit);
  setenv("XDG_CACHE_HOME", saved, 1);
}

/* Several threads building the same new entry at once all succeed. */
static void test_concurrent(void) {
  char src[1024];
  snprintf(src, sizeof src, "%s/* concurrent */\n", src_add);
  int ok = 0;
#pragma omp parallel for num_threads(3) reduction(+ : ok)
  for (int i = 0; i < 3; i++) {
    loom_ctx *c = NULL;
    loom_jit_module *m = NULL;
    if (loom_ctx_new(&c) == LOOM_STATUS_OK && loom_jit_load(c, src, &m, NULL) == LOOM_STATUS_OK) {
      add_fn add = (add_fn)loom_jit_symbol(m, "loom_test_add");
      ok += add && add(1, 2) == 3;
    }
    loom_jit_free(m);
    loom_ctx_free(c);
  }
  CHECK(ok == 3);
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      remove_tree(p);
    }
    closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(cache_root, sizeof cache_root, "%s/loom-test-jit-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(cache_root)) return 1;
  setenv("XDG_CACHE_HOME", cache_root, 1);
  unsetenv("LOOM_CC");

  test_sha256();
  test_compile_and_cache();
  test_corrupt_entries();
  test_key_mismatch();
  test_compiler_errors();
  test_private_dir();
  test_concurrent();

  remove_tree(cache_root);
  loom_ctx_free(ctx);
  return loom_test_finish("test_jit");
}

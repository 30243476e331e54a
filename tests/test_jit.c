/* The run-time compiler and its content-addressed cache: SHA-256 known
 * answers, compile + call, cache hits, corrupt and mismatched entries
 * rebuilt, compiler errors, a missing compiler, an unusable cache dir;
 * the key (CPU identity, the argv as run, -O1 above LOOM_CC_O1_ABOVE); what other users could plant
 * (foreign or shared directories and entries, symlinks) is never loaded;
 * FIFO entries, compilers that hang or write nothing. Everything happens
 * in temporary directories, never in the user's cache. */
#include "common.h"

#include "runtime/jit.h"
#include "core/cpu_id.h"
#include "core/sha256.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <time.h>
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

/* ---- the key ------------------------------------------------------------ */

/* The key carries the CPU identity: code built with -march=native must not
 * be loaded on another CPU from a shared cache. */
static void test_key_has_cpu(void) {
  const char *cpu = loom_cpu_identity();
  CHECK(cpu && strlen(cpu) > 8);
  printf("cpu identity: %s\n", cpu);
  loom_jit_info a = load_and_call(src_add);
  char here[65] = "", same[65] = "", other[65] = "";
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, NULL, here));
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, cpu, same));
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, "x86 GenuineIntel | some other CPU", other));
  CHECK(strcmp(here, a.key) == 0); /* what the loader uses */
  CHECK(strcmp(same, a.key) == 0);
  CHECK(strlen(other) == 64 && strcmp(other, a.key) != 0);
}

/* Writes an executable script. */
static bool write_script(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fputs(text, f);
  return fclose(f) == 0 && chmod(path, 0755) == 0;
}

static bool file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, needle) != NULL;
}

/* The flags reported are the flags passed (one argv, hashed as run). */
static void test_argv_as_run(void) {
  char script[512], log[512], text[1024];
  snprintf(script, sizeof script, "%s/logcc", cache_root);
  snprintf(log, sizeof log, "%s/logcc.log", cache_root);
  snprintf(text, sizeof text,
           "#!/bin/sh\n"
           "echo \"$*\" >> '%s'\n"
           "exec cc \"$@\"\n",
           log);
  CHECK(write_script(script, text));
  setenv("LOOM_CC", script, 1);
  loom_jit_info a = load_and_call(src_add);
  CHECK(!a.cache_hit);
  char plain[65] = "";
  unsetenv("LOOM_CC");
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, NULL, plain));
  CHECK(strcmp(plain, a.key) != 0); /* another compiler command, another key */
  CHECK(file_contains(log, loom_jit_flags()));
  CHECK(file_contains(log, " -lm"));
  remove(script);
  remove(log);
}

/* LOOM_CC_O1_ABOVE: a source longer than the limit compiles at -O1 (the
 * argv, and so the key, say so) and still runs; one at the limit keeps
 * -O3; a malformed limit is an error that names the variable. */
static void test_o1_above(void) {
  char script[512], log[512], text[1024], limit[32];
  snprintf(script, sizeof script, "%s/optcc", cache_root);
  snprintf(log, sizeof log, "%s/optcc.log", cache_root);
  snprintf(text, sizeof text,
           "#!/bin/sh\n"
           "echo \"$*\" >> '%s'\n"
           "exec cc \"$@\"\n",
           log);
  CHECK(write_script(script, text));
  size_t n = strlen(src_add);
  char plain[65] = "", at[65] = "", above[65] = "";
  unsetenv("LOOM_CC_O1_ABOVE");
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, NULL, plain));
  snprintf(limit, sizeof limit, "%zu", n);
  setenv("LOOM_CC_O1_ABOVE", limit, 1);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, NULL, at));
  CHECK(strcmp(at, plain) == 0);
  snprintf(limit, sizeof limit, "%zu", n - 1);
  setenv("LOOM_CC_O1_ABOVE", limit, 1);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src_add, NULL, above));
  CHECK(strcmp(above, plain) != 0);
  setenv("LOOM_CC", script, 1);
  loom_jit_info a = load_and_call(src_add);
  CHECK(!a.cache_hit);
  unsetenv("LOOM_CC");
  CHECK(file_contains(log, "-O1 -march=native "));
  CHECK(!file_contains(log, "-O3"));
  const char *bad[] = {"many", "-1", "12k", "99999999999999999999999"};
  for (int i = 0; i < 4; i++) {
    setenv("LOOM_CC_O1_ABOVE", bad[i], 1);
    CHECK(loom_jit_key_hex(ctx, src_add, NULL, above) == LOOM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(loom_ctx_error(ctx), "LOOM_CC_O1_ABOVE") != NULL);
  }
  unsetenv("LOOM_CC_O1_ABOVE");
  remove(script);
  remove(log);
}

/* A graph with a kernel to compile, for the session-level checks. */
static const char *const small_graph = "input %x : f32[4]\n"
                                       "%y : f32[4] = tanh(%x)\n"
                                       "%z : f32[4] = mul(%y, %y)\n"
                                       "output z = %z\n";

/* ---- what others could plant -------------------------------------------- */

/* A shared object that, loaded, would run: its constructor creates marker
 * and its loom_test_add subtracts. It exports the right key and carries a
 * valid trailer (the checksum is forgeable: only ownership protects). */
static bool build_planted(const char *so_path, const char *key_hex, const char *marker) {
  char c_path[600], cmd[2048];
  snprintf(c_path, sizeof c_path, "%s.c", so_path);
  FILE *f = fopen(c_path, "w");
  if (!f) return false;
  fprintf(f,
          "#include <stdio.h>\n"
          "__attribute__((constructor)) static void planted(void) {\n"
          "  FILE *f = fopen(\"%s\", \"w\");\n"
          "  if (f) fclose(f);\n"
          "}\n"
          "int loom_test_add(int a, int b) { return a - b; }\n"
          "long loom_test_sum(int n, int nt) { (void)n; (void)nt; return -1; }\n"
          "const char loom_module_key[] = \"%s\";\n",
          marker, key_hex);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -o '%s.tmp' '%s'", so_path, c_path);
  bool ok = system(cmd) == 0;
  remove(c_path);
  if (!ok) return false;
  char tmp[620];
  snprintf(tmp, sizeof tmp, "%s.tmp", so_path);
  f = fopen(tmp, "rb");
  static char buf[1 << 20];
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  remove(tmp);
  if (n == 0 || n + 72 > sizeof buf) return false;
  uint8_t tail[72];
  memcpy(tail, "LOOMJIT1", 8);
  loom_sha256(buf, n, tail + 8);
  for (int i = 0; i < 32; i++) {
    unsigned v = 0;
    sscanf(key_hex + 2 * i, "%2x", &v);
    tail[40 + i] = (uint8_t)v;
  }
  memcpy(buf + n, tail, sizeof tail);
  f = fopen(so_path, "wb");
  if (!f) return false;
  ok = fwrite(buf, 1, n + 72, f) == n + 72;
  return fclose(f) == 0 && chmod(so_path, 0600) == 0 && ok;
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Loads `src` with the cache at root/loom; checks that the planted code
 * did not run and that the real code did. */
static loom_jit_info load_unplanted(const char *root, const char *src, const char *marker) {
  char saved[256];
  snprintf(saved, sizeof saved, "%s", getenv("XDG_CACHE_HOME"));
  setenv("XDG_CACHE_HOME", root, 1);
  loom_jit_info info = load_and_call(src); /* checks add(40, 2) == 42 */
  setenv("XDG_CACHE_HOME", saved, 1);
  CHECK(!exists(marker));
  if (info.warning[0]) printf("warning: %s\n", info.warning);
  return info;
}

/* Makes root/loom with the given mode (and owner, when uid >= 0). */
static void make_cache(const char *root, mode_t mode, int uid) {
  char dir[600];
  mkdir(root, 0700);
  snprintf(dir, sizeof dir, "%s/loom", root);
  mkdir(dir, 0700);
  CHECK(chmod(dir, mode) == 0);
  if (uid >= 0) CHECK(chown(dir, (uid_t)uid, (gid_t)-1) == 0);
}

static void test_planted_entries(void) {
  char marker[512], so[1024], src[1024], key[65];
  snprintf(marker, sizeof marker, "%s/planted-code-ran", cache_root);

  /* an entry group and others may write, in our own directory */
  snprintf(src, sizeof src, "%s/* plant 1 */\n", src_add);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src, NULL, key));
  entry_path(key, "so", so, sizeof so);
  CHECK(build_planted(so, key, marker) && chmod(so, 0666) == 0);
  loom_jit_info a = load_unplanted(cache_root, src, marker);
  CHECK(a.rebuilt && !a.cache_hit && strstr(a.warning, "writable by group or others"));
  loom_jit_info a2 = load_unplanted(cache_root, src, marker); /* replaced by ours */
  CHECK(a2.cache_hit && a2.warning[0] == '\0');

  /* a symlink entry is not followed (its target is ours and valid) */
  char target[512];
  snprintf(src, sizeof src, "%s/* plant 2 */\n", src_add);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src, NULL, key));
  entry_path(key, "so", so, sizeof so);
  snprintf(target, sizeof target, "%s/elsewhere.so", cache_root);
  CHECK(build_planted(target, key, marker) && symlink(target, so) == 0);
  loom_jit_info b = load_unplanted(cache_root, src, marker);
  CHECK(b.rebuilt && strstr(b.warning, "symbolic link"));
  CHECK(exists(target)); /* the link was removed, not what it pointed to */

  /* a directory group and others may write: not used at all */
  char root[512];
  snprintf(root, sizeof root, "%s/shared", cache_root);
  make_cache(root, 0777, -1);
  snprintf(src, sizeof src, "%s/* plant 3 */\n", src_add);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src, NULL, key));
  snprintf(so, sizeof so, "%s/loom/%s.so", root, key);
  CHECK(build_planted(so, key, marker));
  loom_jit_info c = load_unplanted(root, src, marker);
  CHECK(c.private_dir && !c.cache_hit && strstr(c.warning, "not used") &&
        strstr(c.warning, "group or others may write"));
  char c_entry[1100];
  snprintf(c_entry, sizeof c_entry, "%s/loom/%s.c", root, key);
  CHECK(!exists(c_entry)); /* nothing written there either */
  /* and a session says so */
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, small_graph, &g));
  setenv("XDG_CACHE_HOME", root, 1);
  loom_session *sess = NULL;
  if (g) CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &sess));
  setenv("XDG_CACHE_HOME", cache_root, 1);
  CHECK(sess && strstr(loom_session_warning(sess), "not used") != NULL);
  loom_session_free(sess);
  loom_graph_free(g);

  /* a parent another user may change (writable, not sticky) */
  snprintf(root, sizeof root, "%s/open-parent", cache_root);
  make_cache(root, 0700, -1);
  CHECK(chmod(root, 0777) == 0);
  loom_jit_info d = load_unplanted(root, src, marker);
  CHECK(d.private_dir && strstr(d.warning, "its parent"));

  if (geteuid() != 0) {
    printf("not root: directories and entries owned by another user not tested\n");
    return;
  }
  /* as root: an entry owned by another user, in our directory */
  snprintf(src, sizeof src, "%s/* plant 4 */\n", src_add);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src, NULL, key));
  entry_path(key, "so", so, sizeof so);
  CHECK(build_planted(so, key, marker) && chown(so, 65534, 65534) == 0);
  loom_jit_info e = load_unplanted(cache_root, src, marker);
  CHECK(e.rebuilt && strstr(e.warning, "owned by uid 65534"));

  /* as root: a directory owned by another user (mode 0755), with a valid
   * entry in it */
  snprintf(root, sizeof root, "%s/foreign", cache_root);
  make_cache(root, 0755, -1);
  snprintf(so, sizeof so, "%s/loom/%s.so", root, key);
  CHECK(build_planted(so, key, marker));
  CHECK(chown(so, 65534, 65534) == 0);
  make_cache(root, 0755, 65534);
  loom_jit_info f = load_unplanted(root, src, marker);
  CHECK(f.private_dir && !f.cache_hit && strstr(f.warning, "owned by uid 65534"));
}

/* A FIFO in place of an entry: neither blocks nor is trusted. */
static void test_fifo_entry(void) {
  char src[1024], key[65], so[512];
  snprintf(src, sizeof src, "%s/* fifo */\n", src_add);
  CHECK_OK(ctx, loom_jit_key_hex(ctx, src, NULL, key));
  entry_path(key, "so", so, sizeof so);
  CHECK(mkfifo(so, 0600) == 0);
  alarm(120); /* a regression blocks in open: fail instead of hanging */
  loom_jit_info a = load_and_call(src);
  alarm(0);
  CHECK(a.rebuilt && strstr(a.warning, "not a regular file"));
  loom_jit_info b = load_and_call(src);
  CHECK(b.cache_hit);
}

/* ---- compilers that hang or write nothing ------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The process whose id is in pidfile has exited (or is a zombie) within
 * a few seconds. */
static bool process_gone(const char *pidfile) {
  FILE *f = fopen(pidfile, "r");
  long pid = 0;
  if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 0) {
    if (f) fclose(f);
    return false;
  }
  fclose(f);
  for (int i = 0; i < 300; i++) {
    if (kill((pid_t)pid, 0) != 0) return true;
    char path[64], state = '?';
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *st = fopen(path, "r");
    if (st) {
      if (fscanf(st, "%*d (%*[^)]) %c", &state) != 1) state = '?';
      fclose(st);
    }
    if (state == 'Z') return true;
    nanosleep(&(struct timespec){0, 10000000L}, NULL);
  }
  return false;
}

static void test_bad_compilers(void) {
  loom_jit_module *m = NULL;
  char src[1024];
  snprintf(src, sizeof src, "%s/* bad compilers */\n", src_add);

  /* never exits (and its child neither): killed after LOOM_CC_TIMEOUT */
  char script[512], pidfile[512], text[1200];
  snprintf(script, sizeof script, "%s/slowcc", cache_root);
  snprintf(pidfile, sizeof pidfile, "%s/slowcc.pid", cache_root);
  snprintf(text, sizeof text,
           "#!/bin/sh\n"
           "if [ \"$1\" = --version ]; then echo slow-cc 1.0; exit 0; fi\n"
           "sleep 60 &\n"
           "echo $! > '%s'\n"
           "wait\n",
           pidfile);
  CHECK(write_script(script, text));
  setenv("LOOM_CC", script, 1);
  setenv("LOOM_CC_TIMEOUT", "1", 1);
  double t0 = now_s();
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_jit_load(ctx, src, &m, NULL));
  double took = now_s() - t0;
  CHECK(m == NULL && took < 20);
  CHECK(strstr(loom_ctx_error(ctx), "did not finish within 1 s") != NULL);
  CHECK(strstr(loom_ctx_error(ctx), "killed") != NULL);
  printf("hanging compiler stopped after %.2f s: %s\n", took, loom_ctx_error(ctx));
  CHECK(process_gone(pidfile)); /* its child was killed too (process group) */
  setenv("LOOM_CC_TIMEOUT", "soon", 1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_jit_load(ctx, src, &m, NULL));
  CHECK(strstr(loom_ctx_error(ctx), "LOOM_CC_TIMEOUT") != NULL);
  unsetenv("LOOM_CC_TIMEOUT");

  /* exits 0 and writes nothing */
  setenv("LOOM_CC", "/bin/true", 1);
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, loom_jit_load(ctx, src, &m, NULL));
  CHECK(m == NULL && strstr(loom_ctx_error(ctx), "wrote no shared object") != NULL);
  printf("/bin/true: %s\n", loom_ctx_error(ctx));

  /* a session runs the graph eagerly instead, with a warning, and right */
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, small_graph, &g));
  const char *compilers[2] = {"/bin/true", script};
  const char *reasons[2] = {"wrote no shared object", "did not finish within 1 s"};
  for (int c = 0; c < 2 && g; c++) {
    setenv("LOOM_CC", compilers[c], 1);
    setenv("LOOM_CC_TIMEOUT", "1", 1);
    loom_session *s = NULL;
    CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
    if (!s) continue;
    const char *w = loom_session_warning(s);
    CHECK(strstr(w, "eager") != NULL && strstr(w, reasons[c]) != NULL);
    loom_session_stats st;
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.n_kernels == 0);
    float xs[4] = {0.f, 0.5f, -1.f, 2.f};
    int64_t shape[1] = {4};
    loom_tensor *x = NULL, *z = NULL;
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 1, shape, xs, &x));
    CHECK_OK(ctx, loom_session_run(s, 1, (const loom_tensor *const *)&x, 1, &z));
    if (z) {
      const float *zv = loom_tensor_data(z);
      for (int i = 0; i < 4; i++) CHECK(fabs(zv[i] - tanh(xs[i]) * tanh(xs[i])) < 1e-6);
    }
    loom_tensor_free(z);
    loom_tensor_free(x);
    loom_session_free(s);
  }
  loom_graph_free(g);
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_TIMEOUT");
  remove(script);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(cache_root, sizeof cache_root, "%s/loom-test-jit-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(cache_root)) return 1;
  setenv("XDG_CACHE_HOME", cache_root, 1);
  unsetenv("LOOM_CC");
  unsetenv("LOOM_CC_O1_ABOVE"); /* the suite's (tests/CMakeLists.txt) */

  test_sha256();
  test_compile_and_cache();
  test_corrupt_entries();
  test_key_mismatch();
  test_compiler_errors();
  test_private_dir();
  test_concurrent();
  test_key_has_cpu();
  test_argv_as_run();
  test_o1_above();
  test_planted_entries();
  test_fifo_entry();
  test_bad_compilers();

  loom_test_remove_tree(cache_root);
  loom_ctx_free(ctx);
  return loom_test_finish("test_jit");
}

/*
 * Run-time compilation and the content-addressed kernel cache (jit.h).
 */
#include "runtime/jit.h"
#include "core/clock.h"
#include "core/sha256.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* x86: 512-bit vectors where the CPU has them (measured faster for the
 * double-precision lanes of generated kernels); a no-op on AVX2 CPUs. */
#if defined(__x86_64__) || defined(__i386__)
#define JIT_X86_FLAG " -mprefer-vector-width=512"
#else
#define JIT_X86_FLAG ""
#endif
#define JIT_FLAGS                                                                      \
  "-O3 -march=native -fopenmp -fPIC -shared -std=c11 -ffp-contract=off -fno-trapping-math " \
  "-fno-math-errno"                                                                        \
  JIT_X86_FLAG
static const char *const jit_flag_list[] = {"-O3",      "-march=native", "-fopenmp",
                                            "-fPIC",    "-shared",       "-std=c11",
                                            "-ffp-contract=off", "-fno-trapping-math",
                                            "-fno-math-errno",
#if defined(__x86_64__) || defined(__i386__)
                                            "-mprefer-vector-width=512"
#endif
};
#define JIT_N_FLAGS ((int)(sizeof jit_flag_list / sizeof jit_flag_list[0]))
#define JIT_MAX_WORDS 16
#define JIT_MSG_MAX 2048 /* compiler output kept for the error message */
#define TRAILER_MAGIC "LOOMJIT1"
#define TRAILER_BYTES (8 + 32 + 32)

const char *loom_jit_flags(void) { return JIT_FLAGS; }

/* Copies src into dst[n], truncating (no format-truncation warnings). */
static void scopy(char *dst, size_t n, const char *src) {
  size_t l = strlen(src);
  if (l >= n) l = n - 1;
  memcpy(dst, src, l);
  dst[l] = '\0';
}

/* ---- SHA-256 (FIPS 180-4) ----------------------------------------------- */


static void to_hex(const uint8_t d[32], char hex[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    hex[2 * i] = digits[d[i] >> 4];
    hex[2 * i + 1] = digits[d[i] & 15];
  }
  hex[64] = '\0';
}

/* ---- processes ---------------------------------------------------------- */

/* The compiler command: words of $LOOM_CC, $CC or "cc". */
typedef struct jit_cc {
  char buf[1024];
  char *words[JIT_MAX_WORDS];
  int n;
  const char *from; /* "LOOM_CC", "CC" or "default" */
} jit_cc;

static bool cc_parse(jit_cc *cc) {
  const char *v = getenv("LOOM_CC");
  cc->from = "LOOM_CC";
  if (!v || !v[0]) {
    v = getenv("CC");
    cc->from = "CC";
  }
  if (!v || !v[0]) {
    v = "cc";
    cc->from = "default";
  }
  scopy(cc->buf, sizeof cc->buf, v);
  cc->n = 0;
  for (char *p = cc->buf; *p;) {
    while (*p == ' ' || *p == '\t') *p++ = '\0';
    if (!*p) break;
    if (cc->n == JIT_MAX_WORDS - 1) return false;
    cc->words[cc->n++] = p;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  cc->words[cc->n] = NULL;
  return cc->n > 0;
}

/* Runs argv (PATH lookup, no shell) with stdout and stderr captured into
 * out (first cap-1 bytes, the rest drained). Returns 0 and the exit status
 * in *status (128+signal if killed), or an errno if it could not start. */
static int run_capture(char *const argv[], char *out, size_t cap, int *status) {
  int fds[2];
  if (pipe(fds) != 0) return errno;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return err;
  }
  size_t len = 0;
  char tmp[4096];
  for (;;) {
    ssize_t r = read(fds[0], tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t take = LOOM_MIN((size_t)r, cap - 1 - len);
    memcpy(out + len, tmp, take);
    len += take;
  }
  out[len] = '\0';
  close(fds[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 255;
  return 0;
}

/* The compiler's identity (first line of --version), memoised per process
 * and compiler command: asking costs a process spawn per load otherwise. */
static pthread_mutex_t ident_lock = PTHREAD_MUTEX_INITIALIZER;
static char ident_cmd[1024], ident_line[256];

static loom_status cc_identity(loom_ctx *ctx, jit_cc *cc, const char *cmd, char *line,
                               size_t n) {
  pthread_mutex_lock(&ident_lock);
  bool known = ident_line[0] && strcmp(ident_cmd, cmd) == 0;
  if (known) scopy(line, n, ident_line);
  pthread_mutex_unlock(&ident_lock);
  if (known) return LOOM_STATUS_OK;

  char *argv[JIT_MAX_WORDS + 1];
  for (int i = 0; i < cc->n; i++) argv[i] = cc->words[i];
  argv[cc->n] = "--version";
  argv[cc->n + 1] = NULL;
  char out[1024];
  int status = 0;
  int err = run_capture(argv, out, sizeof out, &status);
  if (err != 0 || status == 127)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s%s%s): %s; set LOOM_CC or CC to a C compiler",
                      strcmp(cc->from, "default") ? cc->from : "",
                      strcmp(cc->from, "default") ? "=" : "", cmd,
                      err ? strerror(err) : "command not found");
  if (status != 0)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s): '%s --version' exited with status %d", cmd, cmd,
                      status);
  out[strcspn(out, "\r\n")] = '\0';
  if (!out[0]) scopy(out, sizeof out, "(no version line)");
  scopy(line, n, out);
  pthread_mutex_lock(&ident_lock);
  scopy(ident_cmd, sizeof ident_cmd, cmd);
  scopy(ident_line, sizeof ident_line, out);
  pthread_mutex_unlock(&ident_lock);
  return LOOM_STATUS_OK;
}

/* ---- files -------------------------------------------------------------- */

char *loom_jit_cache_dir(void) {
  const char *x = getenv("XDG_CACHE_HOME");
  const char *base, *sub;
  if (x && x[0] == '/') { /* the XDG spec ignores relative paths */
    base = x;
    sub = "loom";
  } else {
    base = getenv("HOME");
    sub = ".cache/loom";
    if (!base || !base[0]) return NULL;
  }
  size_t n = strlen(base) + strlen(sub) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", base, sub);
  return p;
}

/* mkdir -p with mode 0700 for what it creates; true if dir is usable. */
static bool make_dirs(const char *dir) {
  char path[4096];
  if (strlen(dir) >= sizeof path) return false;
  scopy(path, sizeof path, dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK | X_OK) == 0;
}

/* Reads a whole file (malloc'ed); NULL on error. */
static uint8_t *read_file(const char *path, size_t *n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  struct stat st;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0) {
    size_t size = (size_t)st.st_size, got = 0;
    buf = malloc(size ? size : 1);
    while (buf && got < size) {
      ssize_t r = read(fd, buf + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (buf && got != size) {
      free(buf);
      buf = NULL;
    }
    *n = got;
  }
  close(fd);
  return buf;
}

static bool write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Checks an entry's trailer against its contents and the key. */
static bool entry_valid(const char *path, const uint8_t key[32], const char **why) {
  size_t n = 0;
  uint8_t *buf = read_file(path, &n);
  if (!buf) {
    *why = "unreadable";
    return false;
  }
  bool ok = false;
  if (n < TRAILER_BYTES + 64) {
    *why = "truncated";
  } else {
    const uint8_t *t = buf + n - TRAILER_BYTES;
    uint8_t d[32];
    loom_sha256(buf, n - TRAILER_BYTES, d);
    if (memcmp(t, TRAILER_MAGIC, 8) != 0)
      *why = "no trailer (truncated or overwritten)";
    else if (memcmp(t + 40, key, 32) != 0)
      *why = "built for another key";
    else if (memcmp(t + 8, d, 32) != 0)
      *why = "contents do not match their checksum";
    else
      ok = true;
  }
  free(buf);
  return ok;
}

/* Appends the trailer to a freshly built shared object. */
static bool add_trailer(const char *path, const uint8_t key[32]) {
  size_t n = 0;
  uint8_t *buf = read_file(path, &n);
  if (!buf) return false;
  uint8_t t[TRAILER_BYTES];
  memcpy(t, TRAILER_MAGIC, 8);
  loom_sha256(buf, n, t + 8);
  memcpy(t + 40, key, 32);
  free(buf);
  int fd = open(path, O_WRONLY | O_APPEND);
  if (fd < 0) return false;
  bool ok = write_all(fd, t, sizeof t);
  return close(fd) == 0 && ok;
}

/* ---- modules ------------------------------------------------------------ */

struct loom_jit_module {
  void *handle;
  char key[65];
};

void *loom_jit_symbol(loom_jit_module *m, const char *name) {
  return m && name ? dlsym(m->handle, name) : NULL;
}

const char *loom_jit_module_key(const loom_jit_module *m) { return m ? m->key : ""; }

void loom_jit_free(loom_jit_module *m) {
  if (!m) return;
  if (m->handle) dlclose(m->handle);
  free(m);
}

/* Keeps the OpenMP runtime a module brought in loaded for good: its idle
 * worker threads outlive every parallel region, so unloading it with the
 * last module (when the host process does not link it itself) would pull
 * their code from under them. The extra reference is never dropped. */
static void pin_openmp_runtime(void) {
  static const char *const names[] = {"libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so"};
  static bool pinned[sizeof names / sizeof names[0]];
  pthread_mutex_lock(&ident_lock);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!pinned[i] && dlopen(names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) pinned[i] = true;
  pthread_mutex_unlock(&ident_lock);
}

/* dlopen + the exported key check. */
static void *open_checked(const char *path, const char *hex, char *why, size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, n, "dlopen failed: %s", e ? e : "unknown error");
    return NULL;
  }
  pin_openmp_runtime();
  const char *k = dlsym(h, "loom_module_key");
  if (!k || strcmp(k, hex) != 0) {
    scopy(why, n, k ? "its loom_module_key does not match" : "no loom_module_key");
    dlclose(h);
    return NULL;
  }
  return h;
}

/* Copies s into out replacing every `from` by `to`. */
static void replace_all(const char *s, const char *from, const char *to, char *out, size_t n) {
  size_t len = 0, fl = strlen(from);
  while (*s && len + 1 < n) {
    if (fl && strncmp(s, from, fl) == 0) {
      len += (size_t)snprintf(out + len, n - len, "%s", to);
      if (len >= n) len = n - 1;
      s += fl;
    } else {
      out[len++] = *s++;
    }
  }
  out[len] = '\0';
}

/* Unique temporary names in dir: pid plus a process-wide counter. */
static atomic_uint jit_tmp_counter;

typedef struct jit_job {
  loom_ctx *ctx;
  jit_cc *cc;
  const char *cmd;
  const char *dir;
  char hex[65];
  uint8_t key[32];
  const char *source; /* the final source (with loom_module_key) */
  bool keep_source;   /* rename the source to KEY.c (cache) or delete it */
} jit_job;

/* Writes the source, compiles it to KEY.so (trailer added) atomically. */
static loom_status build(jit_job *j, const char *so_path, double *seconds) {
  loom_ctx *ctx = j->ctx;
  char tmp_c[4200], tmp_so[4200], final_c[4200];
  unsigned id = atomic_fetch_add(&jit_tmp_counter, 1u);
  snprintf(tmp_c, sizeof tmp_c, "%s/.tmp-%.16s-%ld-%u.c", j->dir, j->hex, (long)getpid(), id);
  snprintf(tmp_so, sizeof tmp_so, "%s/.tmp-%.16s-%ld-%u.so", j->dir, j->hex, (long)getpid(), id);
  snprintf(final_c, sizeof final_c, "%s/%s.c", j->dir, j->hex);

  int fd = open(tmp_c, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", tmp_c, strerror(errno));
  bool ok = write_all(fd, j->source, strlen(j->source));
  if (close(fd) != 0 || !ok) {
    unlink(tmp_c);
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", tmp_c, strerror(errno));
  }

  char *argv[JIT_MAX_WORDS + JIT_N_FLAGS + 8];
  int a = 0;
  for (int i = 0; i < j->cc->n; i++) argv[a++] = j->cc->words[i];
  for (int i = 0; i < JIT_N_FLAGS; i++) argv[a++] = (char *)jit_flag_list[i];
  argv[a++] = "-o";
  argv[a++] = tmp_so;
  argv[a++] = tmp_c;
  argv[a++] = "-lm";
  argv[a] = NULL;
  char *out = malloc(JIT_MSG_MAX);
  if (!out) {
    unlink(tmp_c);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  int status = 0;
  double t0 = loom_now_s();
  int err = run_capture(argv, out, JIT_MSG_MAX, &status);
  *seconds = loom_now_s() - t0;
  const char *final_name = j->keep_source ? final_c : "(deleted)";
  if (j->keep_source)
    rename(tmp_c, final_c);
  else
    unlink(tmp_c);

  loom_status st = LOOM_STATUS_OK;
  if (err != 0) {
    st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no C compiler (tried %s): %s", j->cmd,
                    strerror(err));
  } else if (status != 0) {
    /* Show the message against the kept file's name, not the temporary. */
    char *msg = malloc(JIT_MSG_MAX);
    if (msg) {
      char base[80];
      snprintf(base, sizeof base, "%s.c", j->hex);
      replace_all(out, tmp_c, base, msg, JIT_MSG_MAX);
    }
    st = loom_error(ctx, LOOM_STATUS_INTERNAL,
                    "C compiler failed ('%s' exited with status %d; source: %s):\n%s", j->cmd,
                    status, final_name, msg ? msg : out);
    free(msg);
  } else if (!add_trailer(tmp_so, j->key) || rename(tmp_so, so_path) != 0) {
    st = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", so_path, strerror(errno));
  }
  if (st != LOOM_STATUS_OK) unlink(tmp_so);
  free(out);
  return st;
}

/* Builds in a private temporary dir, loads, and removes the files. */
static loom_status load_private(jit_job *j, void **handle, double *seconds) {
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/loom-jit-XXXXXX", tmpdir && tmpdir[0] ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(dir, sizeof dir, "/tmp/loom-jit-XXXXXX");
    if (!mkdtemp(dir))
      return loom_error(j->ctx, LOOM_STATUS_IO,
                        "no usable cache directory and no temporary directory: %s",
                        strerror(errno));
  }
  j->dir = dir;
  j->keep_source = false;
  char so_path[4200], why[512];
  snprintf(so_path, sizeof so_path, "%s/%s.so", dir, j->hex);
  loom_status st = build(j, so_path, seconds);
  if (st == LOOM_STATUS_OK) {
    *handle = open_checked(so_path, j->hex, why, sizeof why);
    if (!*handle)
      st = loom_error(j->ctx, LOOM_STATUS_INTERNAL, "cannot load the compiled module: %s", why);
  }
  unlink(so_path);
  rmdir(dir);
  return st;
}

loom_status loom_jit_load_ex(loom_ctx *ctx, const char *source, loom_jit_module **out,
                             loom_jit_info *info) {
  loom_jit_info dummy;
  if (!info) info = &dummy;
  memset(info, 0, sizeof *info);
  if (!source || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_jit_load: NULL argument");
  *out = NULL;

  jit_cc cc;
  if (!cc_parse(&cc))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s): cannot parse the compiler command",
                      cc.from);
  char cmd[1024] = "";
  for (int i = 0; i < cc.n; i++) {
    size_t l = strlen(cmd);
    snprintf(cmd + l, sizeof cmd - l, "%s%s", i ? " " : "", cc.words[i]);
  }
  char ident[256];
  LOOM_TRY(cc_identity(ctx, &cc, cmd, ident, sizeof ident));

  jit_job j = {.ctx = ctx, .cc = &cc, .cmd = cmd};
  loom_sha256_state s;
  loom_sha256_init(&s);
  static const char tag[] = "loom-jit-1";
  loom_sha256_update(&s, tag, sizeof tag);
  loom_sha256_update(&s, cmd, strlen(cmd) + 1);
  loom_sha256_update(&s, ident, strlen(ident) + 1);
  loom_sha256_update(&s, JIT_FLAGS, sizeof JIT_FLAGS);
  loom_sha256_update(&s, source, strlen(source));
  loom_sha256_final(&s, j.key);
  to_hex(j.key, j.hex);
  memcpy(info->key, j.hex, sizeof j.hex);

  static const char key_fmt[] =
      "%s\n/* The cache key, checked after loading (src/runtime/jit.h). */\n"
      "const char loom_module_key[] = \"%s\";\n";
  size_t n = strlen(source) + sizeof key_fmt + 64;
  char *full = malloc(n);
  loom_jit_module *m = calloc(1, sizeof *m);
  if (!full || !m) {
    free(full);
    free(m);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  snprintf(full, n, key_fmt, source, j.hex);
  j.source = full;
  memcpy(m->key, j.hex, sizeof j.hex);

  loom_status st = LOOM_STATUS_OK;
  char *dir = loom_jit_cache_dir();
  if (!dir || !make_dirs(dir)) {
    info->private_dir = true;
    st = load_private(&j, &m->handle, &info->compile_seconds);
  } else {
    j.dir = dir;
    j.keep_source = true;
    char so_path[4200], why[512];
    snprintf(so_path, sizeof so_path, "%s/%s.so", dir, j.hex);
    const char *bad = NULL;
    if (access(so_path, F_OK) == 0) {
      if (entry_valid(so_path, j.key, &bad)) {
        m->handle = open_checked(so_path, j.hex, why, sizeof why);
        if (m->handle)
          info->cache_hit = true;
        else
          bad = why;
      }
      if (bad) {
        unlink(so_path); /* corrupt or mismatched: rebuild below */
        info->rebuilt = true;
      }
    }
    if (!m->handle) {
      st = build(&j, so_path, &info->compile_seconds);
      if (st == LOOM_STATUS_OK) {
        m->handle = open_checked(so_path, j.hex, why, sizeof why);
        if (!m->handle)
          st = loom_error(ctx, LOOM_STATUS_INTERNAL, "cannot load %s: %s", so_path, why);
      } else if (st == LOOM_STATUS_IO) { /* a full or read-only cache: build aside */
        loom_error_clear(ctx);
        info->private_dir = true;
        st = load_private(&j, &m->handle, &info->compile_seconds);
      }
    }
  }
  free(dir);
  free(full);
  if (st != LOOM_STATUS_OK) {
    loom_jit_free(m);
    return st;
  }
  *out = m;
  return LOOM_STATUS_OK;
}

loom_status loom_jit_load(loom_ctx *ctx, const char *source, loom_jit_module **out,
                          bool *cache_hit) {
  loom_jit_info info;
  loom_status st = loom_jit_load_ex(ctx, source, out, &info);
  if (cache_hit) *cache_hit = st == LOOM_STATUS_OK && info.cache_hit;
  return st;
}

/*
 * Run-time compilation and the content-addressed kernel cache (jit.h):
 * the key, building an entry, and loading it. The compiler process is in
 * jit_cc.c, the directory and entry checks in jit_cache.c.
 */
#include "runtime/jit.h"
#include "core/cpu_id.h"
#include "runtime/jit_internal.h"
#include "core/clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *loom_jit_flags(void) { return jit_flags_string(); }

static void to_hex(const uint8_t d[32], char hex[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    hex[2 * i] = digits[d[i] >> 4];
    hex[2 * i + 1] = digits[d[i] & 15];
  }
  hex[64] = '\0';
}

char *loom_jit_cache_dir(void) {
  /* the kernels alone elsewhere (the machine profile stays in the XDG
   * directory): e.g. one cache the test programs share */
  const char *k = getenv("LOOM_KERNEL_CACHE");
  if (k && k[0] == '/') {
    char *p = malloc(strlen(k) + 1);
    if (p) memcpy(p, k, strlen(k) + 1);
    return p;
  }
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

/* ---- the key ------------------------------------------------------------ */

/* What a compile depends on: the compiler's argv (placeholders for the
 * file names), its --version output, the CPU identity (-march=native) and
 * the source. */
static void compute_key(const jit_argv *a, const char *version, const char *cpu,
                        const char *source, uint8_t key[32]) {
  loom_sha256_state s;
  loom_sha256_init(&s);
  static const char tag[] = "loom-jit-2";
  loom_sha256_update(&s, tag, sizeof tag);
  jit_argv_hash(a, &s);
  loom_sha256_update(&s, version, strlen(version) + 1);
  loom_sha256_update(&s, cpu, strlen(cpu) + 1);
  loom_sha256_update(&s, source, strlen(source));
  loom_sha256_final(&s, key);
}

/* The compiler of this environment: command, argv, timeout, version. */
typedef struct jit_compiler {
  jit_cc cc;
  jit_argv argv;
  double timeout_s;
  char version[JIT_VERSION_MAX];
} jit_compiler;

/* The compiler for source: its argv (the level for the source's size). */
static loom_status compiler_find(loom_ctx *ctx, const char *source, jit_compiler *c) {
  if (!jit_cc_parse(&c->cc))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s): cannot parse the compiler command", c->cc.from);
  jit_argv_make(&c->argv, &c->cc);
  LOOM_TRY(jit_argv_opt_level(ctx, &c->argv, strlen(source)));
  LOOM_TRY(jit_timeout(ctx, &c->timeout_s));
  return jit_cc_version(ctx, &c->cc, c->timeout_s, c->version, sizeof c->version);
}

loom_status loom_jit_key_hex(loom_ctx *ctx, const char *source, const char *cpu,
                             char hex[65]) {
  if (!source || !hex)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_jit_key_hex: NULL argument");
  jit_compiler c;
  LOOM_TRY(compiler_find(ctx, source, &c));
  uint8_t key[32];
  compute_key(&c.argv, c.version, cpu ? cpu : loom_cpu_identity(), source, key);
  to_hex(key, hex);
  return LOOM_STATUS_OK;
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
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;

static void pin_openmp_runtime(void) {
  static const char *const names[] = {"libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so"};
  static bool pinned[sizeof names / sizeof names[0]];
  pthread_mutex_lock(&pin_lock);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!pinned[i] && dlopen(names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) pinned[i] = true;
  pthread_mutex_unlock(&pin_lock);
}

/* dlopen of checked bytes + the exported key check. */
static void *open_checked(const jit_dir *d, const uint8_t *data, size_t n, const char *hex,
                          char *why, size_t why_n) {
  void *h = jit_dlopen_bytes(d, data, n, why, why_n);
  if (!h) return NULL;
  pin_openmp_runtime();
  const char *k = dlsym(h, "loom_module_key");
  if (!k || strcmp(k, hex) != 0) {
    jit_scopy(why, why_n, k ? "its loom_module_key does not match" : "no loom_module_key");
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

typedef struct jit_job {
  loom_ctx *ctx;
  jit_compiler *c;
  char hex[65];
  uint8_t key[32];
  const char *source; /* the final source (with loom_module_key) */
} jit_job;

/* Compiles the source in d. In the cache (not a temporary dir) the source
 * is kept as KEY.c and the result, trailer appended, renamed to KEY.so.
 * *so holds the result's bytes (malloc'ed) for loading. */
static loom_status build(jit_job *j, const jit_dir *d, uint8_t **so, size_t *so_n,
                         double *seconds) {
  loom_ctx *ctx = j->ctx;
  const char *cmd = j->c->cc.cmd;
  *so = NULL;
  *so_n = 0;
  char tmp_c[128], tmp_so[128], final_c[80], final_so[80];
  jit_tmp_name(tmp_c, sizeof tmp_c, "tmp", j->hex, "c");
  jit_tmp_name(tmp_so, sizeof tmp_so, "tmp", j->hex, "so");
  snprintf(final_c, sizeof final_c, "%s.c", j->hex);
  snprintf(final_so, sizeof final_so, "%s.so", j->hex);

  if (!jit_file_create(d, tmp_c, j->source, strlen(j->source), "", 0))
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write %s/%s: %s", d->path, tmp_c,
                      strerror(errno));
  char out_path[4300], src_path[4300];
  snprintf(out_path, sizeof out_path, "%s/%s", d->path, tmp_so);
  snprintf(src_path, sizeof src_path, "%s/%s", d->path, tmp_c);
  jit_argv a = j->c->argv;
  a.argv[a.out_slot] = out_path;
  a.argv[a.src_slot] = src_path;
  char *out = malloc(JIT_MSG_MAX);
  if (!out) {
    unlinkat(d->fd, tmp_c, 0);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
  }
  int status = 0;
  bool timed_out = false;
  double t0 = loom_now_s();
  int err = jit_run(a.argv, j->c->timeout_s, out, JIT_MSG_MAX, &status, &timed_out);
  *seconds = loom_now_s() - t0;
  const char *final_name = d->temporary ? "(deleted)" : final_c;
  if (d->temporary || renameat(d->fd, tmp_c, d->fd, final_c) != 0) unlinkat(d->fd, tmp_c, 0);

  loom_status st = LOOM_STATUS_OK;
  char why[256] = "";
  if (err != 0) {
    st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "no C compiler (tried %s): %s", cmd,
                    strerror(err));
  } else if (timed_out) {
    st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                    "C compiler '%s' did not finish within %g s (LOOM_CC_TIMEOUT) and was killed",
                    cmd, j->c->timeout_s);
  } else if (status != 0) {
    /* Show the message against the kept file's name, not the temporary. */
    char *msg = malloc(JIT_MSG_MAX);
    if (msg) replace_all(out, src_path, final_c, msg, JIT_MSG_MAX);
    st = loom_error(ctx, LOOM_STATUS_INTERNAL,
                    "C compiler failed ('%s' exited with status %d; source: %s):\n%s", cmd,
                    status, final_name, msg ? msg : out);
    free(msg);
  } else {
    jit_entry_state es = jit_entry_read(d, tmp_so, NULL, so, so_n, why, sizeof why);
    if (es == JIT_ENTRY_ABSENT || (es == JIT_ENTRY_OK && *so_n == 0))
      st = loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "'%s' exited with status 0 but wrote no shared object (is it a C "
                      "compiler?)",
                      cmd);
    else if (es != JIT_ENTRY_OK)
      st = loom_error(ctx, LOOM_STATUS_IO, "the compiled module %s/%s is %s", d->path, tmp_so,
                      why);
  }
  unlinkat(d->fd, tmp_so, 0);
  if (st == LOOM_STATUS_OK && !d->temporary) {
    uint8_t t[JIT_TRAILER_BYTES];
    jit_trailer(*so, *so_n, j->key, t);
    char tmp_entry[128];
    jit_tmp_name(tmp_entry, sizeof tmp_entry, "tmp", j->hex, "so");
    if (!jit_entry_write(d, tmp_entry, final_so, *so, *so_n, t, sizeof t))
      st = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s/%s: %s", d->path, final_so,
                      strerror(errno));
  }
  if (st != LOOM_STATUS_OK) {
    free(*so);
    *so = NULL;
  }
  free(out);
  return st;
}

/* Builds in d and loads the result. */
static loom_status build_and_load(jit_job *j, const jit_dir *d, void **handle,
                                  double *seconds) {
  uint8_t *so = NULL;
  size_t n = 0;
  LOOM_TRY(build(j, d, &so, &n, seconds));
  char why[512];
  *handle = open_checked(d, so, n, j->hex, why, sizeof why);
  free(so);
  if (!*handle)
    return loom_error(j->ctx, LOOM_STATUS_INTERNAL, "cannot load the compiled module: %s", why);
  return LOOM_STATUS_OK;
}

/* Builds in a private temporary directory, loads, and removes it. */
static loom_status load_private(jit_job *j, void **handle, double *seconds) {
  jit_dir d;
  LOOM_TRY(jit_dir_open_private(j->ctx, &d));
  loom_status st = build_and_load(j, &d, handle, seconds);
  jit_dir_close(&d);
  return st;
}

/* Says what the user should know (truncated to fit). */
static void set_warning(loom_jit_info *info, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_warning(loom_jit_info *info, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(info->warning, sizeof info->warning, fmt, ap);
  va_end(ap);
}

/* A hit in d: checked entry, loaded. Anything wrong with it removes it
 * (info->rebuilt; a warning when it was unsafe) and returns NULL. */
static void *load_entry(jit_job *j, const jit_dir *d, loom_jit_info *info) {
  char name[80], why[512] = "";
  snprintf(name, sizeof name, "%s.so", j->hex);
  uint8_t *data = NULL;
  size_t n = 0;
  jit_entry_state es = jit_entry_read(d, name, j->key, &data, &n, why, sizeof why);
  if (es == JIT_ENTRY_ABSENT) return NULL;
  void *h = NULL;
  if (es == JIT_ENTRY_OK) h = open_checked(d, data, n, j->hex, why, sizeof why);
  free(data);
  if (h) {
    info->cache_hit = true;
    return h;
  }
  if (es == JIT_ENTRY_UNSAFE)
    set_warning(info,
             "kernel cache entry %s/%s was %s: not loaded, rebuilt", d->path, name, why);
  unlinkat(d->fd, name, 0); /* the entry itself, never what a link points to */
  info->rebuilt = true;
  return NULL;
}

loom_status loom_jit_load_ex(loom_ctx *ctx, const char *source, loom_jit_module **out,
                             loom_jit_info *info) {
  loom_jit_info dummy;
  if (!info) info = &dummy;
  memset(info, 0, sizeof *info);
  if (!source || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "loom_jit_load: NULL argument");
  *out = NULL;

  jit_compiler c;
  LOOM_TRY(compiler_find(ctx, source, &c));
  jit_job j = {.ctx = ctx, .c = &c};
  compute_key(&c.argv, c.version, loom_cpu_identity(), source, j.key);
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
  char why[512] = "";
  jit_dir d;
  if (!dir || !jit_dir_open_cache(&d, dir, why, sizeof why)) {
    if (dir)
      set_warning(info,
               "kernel cache %s not used: %s; compiled in a private temporary directory", dir,
               why);
    info->private_dir = true;
    st = load_private(&j, &m->handle, &info->compile_seconds);
  } else {
    m->handle = load_entry(&j, &d, info);
    if (!m->handle) {
      st = build_and_load(&j, &d, &m->handle, &info->compile_seconds);
      if (st == LOOM_STATUS_IO) { /* a full or read-only cache: build aside */
        loom_error_clear(ctx);
        info->private_dir = true;
        st = load_private(&j, &m->handle, &info->compile_seconds);
      }
    }
    jit_dir_close(&d);
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

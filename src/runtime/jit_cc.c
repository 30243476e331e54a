/*
 * The compiler process (jit_internal.h): the command, the one argv a module
 * is compiled with, running it with a timeout, and its identity.
 */
#include "runtime/jit_internal.h"
#include "core/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void jit_scopy(char *dst, size_t n, const char *src) {
  size_t l = strlen(src);
  if (l >= n) l = n - 1;
  memcpy(dst, src, l);
  dst[l] = '\0';
}

/* The flags, written once (jit.h says why each is there); the level first
 * (jit_argv_opt_level replaces it). */
static const char *const jit_flags[] = {
    "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11", "-ffp-contract=off",
    "-fno-trapping-math", "-fno-math-errno",
#if defined(__x86_64__) || defined(__i386__)
    /* 512-bit vectors where the CPU has them (measured faster for the
     * double-precision lanes of generated kernels); a no-op on AVX2 CPUs. */
    "-mprefer-vector-width=512",
#endif
};
#define JIT_N_FLAGS ((int)(sizeof jit_flags / sizeof jit_flags[0]))
_Static_assert(JIT_MAX_WORDS + JIT_N_FLAGS + 4 <= JIT_MAX_ARGV, "JIT_MAX_ARGV too small");

static const char out_placeholder[] = "<output>", src_placeholder[] = "<source>";

bool jit_cc_parse(jit_cc *cc) {
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
  jit_scopy(cc->buf, sizeof cc->buf, v);
  cc->n = 0;
  cc->cmd[0] = '\0';
  for (char *p = cc->buf; *p;) {
    while (*p == ' ' || *p == '\t') *p++ = '\0';
    if (!*p) break;
    if (cc->n == JIT_MAX_WORDS - 1) return false;
    cc->words[cc->n++] = p;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  cc->words[cc->n] = NULL;
  for (int i = 0; i < cc->n; i++) {
    size_t l = strlen(cc->cmd);
    snprintf(cc->cmd + l, sizeof cc->cmd - l, "%s%s", i ? " " : "", cc->words[i]);
  }
  return cc->n > 0;
}

void jit_argv_make(jit_argv *a, const jit_cc *cc) {
  int n = 0;
  for (int i = 0; i < cc->n; i++) a->argv[n++] = cc->words[i];
  a->opt_slot = n; /* jit_flags[0] */
  for (int i = 0; i < JIT_N_FLAGS; i++) a->argv[n++] = (char *)jit_flags[i];
  a->argv[n++] = "-o";
  a->out_slot = n;
  a->argv[n++] = (char *)out_placeholder;
  a->src_slot = n;
  a->argv[n++] = (char *)src_placeholder;
  a->argv[n++] = "-lm";
  a->argv[n] = NULL;
  a->argc = n;
}

loom_status jit_argv_opt_level(loom_ctx *ctx, jit_argv *a, size_t source_bytes) {
  const char *v = getenv("LOOM_CC_O1_ABOVE");
  if (!v || !v[0]) return LOOM_STATUS_OK;
  char *end = NULL;
  errno = 0;
  unsigned long long limit = strtoull(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || v[0] == '-')
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "LOOM_CC_O1_ABOVE='%s': expected a number of bytes", v);
  if (source_bytes > limit) a->argv[a->opt_slot] = "-O1";
  return LOOM_STATUS_OK;
}

void jit_argv_hash(const jit_argv *a, loom_sha256_state *s) {
  loom_sha256_update(s, &a->argc, sizeof a->argc);
  for (int i = 0; i < a->argc; i++) {
    const char *w = i == a->out_slot   ? out_placeholder
                    : i == a->src_slot ? src_placeholder
                                       : a->argv[i];
    loom_sha256_update(s, w, strlen(w) + 1);
  }
}

static char flags_string[512];
static pthread_once_t flags_once = PTHREAD_ONCE_INIT;

static void join_flags(void) {
  for (int i = 0; i < JIT_N_FLAGS; i++) {
    size_t l = strlen(flags_string);
    snprintf(flags_string + l, sizeof flags_string - l, "%s%s", i ? " " : "", jit_flags[i]);
  }
}

const char *jit_flags_string(void) {
  pthread_once(&flags_once, join_flags);
  return flags_string;
}

loom_status jit_timeout(loom_ctx *ctx, double *seconds) {
  *seconds = JIT_DEFAULT_TIMEOUT_S;
  const char *v = getenv("LOOM_CC_TIMEOUT");
  if (!v || !v[0]) return LOOM_STATUS_OK;
  char *end = NULL;
  double t = strtod(v, &end);
  if (end == v || *end != '\0' || !isfinite(t) || t <= 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "LOOM_CC_TIMEOUT='%s': expected a number of seconds > 0", v);
  *seconds = t;
  return LOOM_STATUS_OK;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int jit_run(char *const argv[], double timeout_s, char *out, size_t cap, int *status,
            bool *timed_out) {
  *timed_out = false;
  int fds[2];
  if (pipe(fds) != 0) return errno;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  /* Its own process group, so a timeout kills what it started too (the
   * compiler's cc1, as, ld; a script's children). */
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return err;
  }
  double deadline = loom_now_s() + timeout_s;
  size_t len = 0;
  char tmp[4096];
  bool open_pipe = true;
  int ws = 0;
  for (;;) {
    double left = deadline - loom_now_s();
    if (left <= 0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      *timed_out = true;
      while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (open_pipe) {
      struct pollfd p = {.fd = fds[0], .events = POLLIN};
      double ms = ceil(left * 1000.0);
      int r = poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
      if (r < 0 && errno != EINTR) open_pipe = false;
      if (r <= 0) continue;
      ssize_t got = read(fds[0], tmp, sizeof tmp);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        open_pipe = false;
        continue;
      }
      size_t take = LOOM_MIN((size_t)got, cap - 1 - len);
      memcpy(out + len, tmp, take);
      len += take;
      continue;
    }
    /* Output closed: wait for the exit, still against the deadline. */
    pid_t w = waitpid(pid, &ws, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      close(fds[0]);
      return errno;
    }
    sleep_ms(5);
  }
  out[len] = '\0';
  close(fds[0]);
  *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 255;
  return 0;
}

/* The compiler's identity, memoised per process and command: asking costs
 * a process spawn per load otherwise. */
static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
static char version_cmd[1024], version_text[JIT_VERSION_MAX];

loom_status jit_cc_version(loom_ctx *ctx, const jit_cc *cc, double timeout_s, char *out,
                           size_t n) {
  pthread_mutex_lock(&version_lock);
  bool known = version_text[0] && strcmp(version_cmd, cc->cmd) == 0;
  if (known) jit_scopy(out, n, version_text);
  pthread_mutex_unlock(&version_lock);
  if (known) return LOOM_STATUS_OK;

  char *argv[JIT_MAX_WORDS + 1];
  for (int i = 0; i < cc->n; i++) argv[i] = cc->words[i];
  argv[cc->n] = "--version";
  argv[cc->n + 1] = NULL;
  char text[JIT_VERSION_MAX];
  int status = 0;
  bool timed_out = false;
  int err = jit_run(argv, timeout_s, text, sizeof text, &status, &timed_out);
  bool named = strcmp(cc->from, "default") != 0;
  if (err != 0 || status == 127)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s%s%s): %s; set LOOM_CC or CC to a C compiler",
                      named ? cc->from : "", named ? "=" : "", cc->cmd,
                      err ? strerror(err) : "command not found");
  if (timed_out)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s): '%s --version' did not finish within %g s "
                      "(LOOM_CC_TIMEOUT) and was killed",
                      cc->cmd, cc->cmd, timeout_s);
  if (status != 0)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "no C compiler (tried %s): '%s --version' exited with status %d",
                      cc->cmd, cc->cmd, status);
  if (!text[0]) jit_scopy(text, sizeof text, "(no version output)");
  jit_scopy(out, n, text);
  pthread_mutex_lock(&version_lock);
  jit_scopy(version_cmd, sizeof version_cmd, cc->cmd);
  jit_scopy(version_text, sizeof version_text, text);
  pthread_mutex_unlock(&version_lock);
  return LOOM_STATUS_OK;
}

#include "cli_render.h"

#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A picture larger than this is refused: a graph of a million nodes is
 * better read as DOT. */
#define MAX_PICTURE_BYTES ((size_t)256 << 20)

bool loom_cli_have_graphviz(void) {
  const char *path = getenv("PATH");
  if (!path) return false;
  char buf[PATH_MAX];
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && n + 5 < sizeof buf) {
      memcpy(buf, p, n);
      memcpy(buf + n, "/dot", 5);
      if (access(buf, X_OK) == 0) return true;
    }
    p += n;
    if (*p == ':') p++;
  }
  return false;
}

/* Runs `dot -T<format> dot_file`, its standard output into *out. */
static loom_status run_dot(loom_ctx *ctx, const char *format, const char *dot_file, char **out,
                           size_t *len) {
  int fds[2];
  if (pipe(fds) != 0)
    return loom_error(ctx, LOOM_STATUS_IO, "rendering: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return loom_error(ctx, LOOM_STATUS_IO, "rendering: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    char type[16];
    snprintf(type, sizeof type, "-T%s", format);
    execlp("dot", "dot", type, dot_file, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  bool too_big = false;
  for (ssize_t r; buf;) {
    if (n == cap) {
      if (cap >= MAX_PICTURE_BYTES) {
        too_big = true;
        break;
      }
      char *grown = realloc(buf, cap * 2);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown, cap *= 2;
    }
    r = read(fds[0], buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fds[0]);
  int status = 0;
  if (too_big) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!buf) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "rendering: out of memory");
  if (too_big || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || n == 0) {
    free(buf);
    if (too_big)
      return loom_error(ctx, LOOM_STATUS_IO, "rendering: the picture is over %zu MiB",
                        MAX_PICTURE_BYTES >> 20);
    return loom_error(ctx, LOOM_STATUS_IO, "Graphviz's dot -T%s failed (exit status %d)", format,
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  *out = buf;
  *len = n;
  return LOOM_STATUS_OK;
}

loom_status loom_cli_render_dot(loom_ctx *ctx, const char *dot_text, const char *format,
                                const char *path, unsigned flags) {
  if (!loom_cli_have_graphviz())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "rendering %s needs Graphviz's 'dot' program, which is not installed "
                      "(Debian: apt-get install graphviz); --dot FILE writes the graph as DOT "
                      "text without it",
                      format);
  LOOM_TRY(loom_file_check_output(ctx, path, flags));
  const char *dir = getenv("TMPDIR");
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/loom-dot-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(tmp);
  if (fd < 0)
    return loom_error(ctx, LOOM_STATUS_IO, "rendering: temporary file: %s", strerror(errno));
  size_t len = strlen(dot_text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, dot_text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  close(fd);
  char *picture = NULL;
  size_t n = 0;
  loom_status st = done == len
                       ? run_dot(ctx, format, tmp, &picture, &n)
                       : loom_error(ctx, LOOM_STATUS_IO, "rendering: writing %s failed", tmp);
  unlink(tmp);
  if (!st) st = loom_file_write_atomic(ctx, path, picture, n, flags);
  free(picture);
  return st;
}

#include "core/file.h"

#include "core/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- names --------------------------------------------------------------- */

/* Length of the UTF-8 sequence at s (1..4), or 0 if it is not one. C1
 * controls (U+0080..U+009F) count as not UTF-8: terminals obey them too. */
static int utf8_len(const unsigned char *s) {
  int n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (s[0] > 0xf4) return 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0) return 0;
  if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
  if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
  return n;
}

static bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

static const char *escape(const char *s, char *buf, size_t cap, bool keep_lines) {
  size_t k = 0;
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    bool layout = keep_lines && (*p == '\n' || *p == '\t');
    int n = *p < 0x80 ? (is_control(*p) && !layout ? 0 : 1) : utf8_len(p);
    if (n == 0) {
      if (k + 5 > cap) break;
      static const char hex[] = "0123456789abcdef";
      buf[k++] = '\\';
      buf[k++] = 'x';
      buf[k++] = hex[*p >> 4];
      buf[k++] = hex[*p & 15];
      p++;
    } else {
      if (k + (size_t)n + 1 > cap) break;
      memcpy(buf + k, p, (size_t)n);
      k += (size_t)n;
      p += n;
    }
  }
  buf[k] = '\0';
  return buf;
}

const char *loom_escape(const char *s, char *buf, size_t cap) { return escape(s, buf, cap, false); }

const char *loom_escape_message(const char *s, char *buf, size_t cap) {
  return escape(s, buf, cap, true);
}

bool loom_has_control_bytes(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (is_control(*p) || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0)) return true;
  return false;
}

/* ---- checking an output -------------------------------------------------- */

/* The directory part of path ("." when there is none). */
static char *dir_of(loom_ctx *ctx, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return loom_strdup(ctx, ".");
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = loom_malloc(ctx, n + 1);
  if (d) {
    memcpy(d, path, n);
    d[n] = '\0';
  }
  return d;
}

static const char *kind_of(mode_t m) {
  return S_ISLNK(m)    ? "a symbolic link"
         : S_ISDIR(m)  ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

/* The target's half of the check: absent, or a regular writable file that
 * may be replaced. *exists and *mode describe what is there. */
static loom_status check_target(loom_ctx *ctx, const char *path, unsigned flags, bool *exists,
                                mode_t *mode) {
  struct stat st;
  *exists = false;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return LOOM_STATUS_OK;
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", path, strerror(errno));
  }
  *exists = true;
  *mode = st.st_mode;
  if (!S_ISREG(st.st_mode))
    return loom_error(ctx, LOOM_STATUS_IO,
                      "%s is %s; Loom writes only regular files and will not replace it", path,
                      kind_of(st.st_mode));
  if (!(flags & LOOM_FILE_REPLACE))
    return loom_error(ctx, LOOM_STATUS_IO, "%s already exists%s", path,
                      flags & LOOM_FILE_HINT_FORCE ? " (use --force to overwrite)" : "");
  /* no write bit at all says "keep this", even to root */
  if ((st.st_mode & 0222) == 0 || access(path, W_OK) != 0)
    return loom_error(ctx, LOOM_STATUS_IO, "%s is read-only; Loom does not replace it", path);
  return LOOM_STATUS_OK;
}

loom_status loom_file_check_output(loom_ctx *ctx, const char *path, unsigned flags) {
  if (!path || !*path) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no output file name");
  if (loom_has_control_bytes(path))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "output file name '%s' holds control bytes; refused", path);
  size_t n = strlen(path);
  if (path[n - 1] == '/')
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s names a directory, not a file", path);
  char *dir = dir_of(ctx, path);
  if (!dir) return LOOM_STATUS_OUT_OF_MEMORY;
  struct stat st;
  loom_status s = LOOM_STATUS_OK;
  if (stat(dir, &st) != 0)
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: directory %s: %s", path, dir,
                   strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s is not a directory", path, dir);
  else if (access(dir, W_OK | X_OK) != 0)
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: directory %s is not writable (%s)", path,
                   dir, strerror(errno));
  free(dir);
  bool exists;
  mode_t mode;
  if (!s) s = check_target(ctx, path, flags, &exists, &mode);
  return s;
}

/* The directory of path, stat'ed, and its last name: where a file that
 * does not exist yet will be (so "a" and "./a" are one file). */
static bool where(const char *path, struct stat *dir, const char **base) {
  const char *slash = strrchr(path, '/');
  *base = slash ? slash + 1 : path;
  char *d = dir_of(NULL, path);
  bool ok = d && stat(d, dir) == 0;
  free(d);
  return ok;
}

bool loom_file_same(const char *a, const char *b) {
  if (!a || !b) return false;
  if (strcmp(a, b) == 0) return true;
  struct stat sa, sb;
  bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  const char *na, *nb;
  return where(a, &sa, &na) && where(b, &sb, &nb) && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino && strcmp(na, nb) == 0;
}

/* ---- writing ------------------------------------------------------------- */

/* A name no other writer will pick: pid, a counter and the clock. */
static void temp_name(char *tmp, size_t cap, const char *path, int attempt) {
  static _Atomic unsigned counter;
  uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(loom_now_s() * 1e9) ^
               ((uint64_t)++counter << 40) ^ (uint64_t)attempt * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  snprintf(tmp, cap, "%s.tmp.%012llx", path, (unsigned long long)(x & 0xffffffffffffull));
}

void loom_file_abort(loom_file_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  if (w->tmp) unlink(w->tmp);
  free(w->tmp);
  free(w->path);
  memset(w, 0, sizeof *w);
}

loom_status loom_file_begin(loom_ctx *ctx, const char *path, unsigned flags, loom_file_writer *w) {
  if (!w) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "file_begin: no writer");
  memset(w, 0, sizeof *w);
  LOOM_TRY(loom_file_check_output(ctx, path, flags));
  bool exists;
  mode_t mode = 0;
  LOOM_TRY(check_target(ctx, path, flags, &exists, &mode));
  size_t cap = strlen(path) + 24;
  w->path = loom_strdup(ctx, path);
  w->tmp = loom_malloc(ctx, cap);
  w->flags = flags;
  if (!w->path || !w->tmp) {
    loom_file_abort(w);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  /* A new file gets 0666 less the umask from the kernel; a replaced one
   * keeps its permissions, and is private until then. */
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    temp_name(w->tmp, cap, path, attempt);
    fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, exists ? 0600 : 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  int err = errno;
  if (fd < 0) {
    free(w->tmp); /* nothing was created */
    w->tmp = NULL;
  } else if ((exists && fchmod(fd, mode & 0777) != 0) || !(w->f = fdopen(fd, "wb"))) {
    err = errno;
    close(fd);
  }
  if (!w->f) {
    loom_file_abort(w);
    return loom_error(ctx, LOOM_STATUS_IO, "cannot create a temporary file beside %s: %s", path,
                      strerror(err));
  }
  return LOOM_STATUS_OK;
}

static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd); /* some filesystems refuse a directory fsync: nothing to do then */
    close(fd);
  }
}

loom_status loom_file_commit(loom_ctx *ctx, loom_file_writer *w) {
  if (!w || !w->f) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "file_commit: not begun");
  loom_status s = LOOM_STATUS_OK;
  /* the data must be on disk before the rename makes it the file */
  if (fflush(w->f) != 0 || ferror(w->f) || fsync(fileno(w->f)) != 0)
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", w->path, strerror(errno));
  if (fclose(w->f) != 0 && !s)
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", w->path, strerror(errno));
  w->f = NULL;
  /* again: something may have appeared at the target while we wrote */
  bool exists;
  mode_t mode;
  if (!s) s = check_target(ctx, w->path, w->flags, &exists, &mode);
  if (!s && rename(w->tmp, w->path) != 0)
    s = loom_error(ctx, LOOM_STATUS_IO, "cannot rename %s to %s: %s", w->tmp, w->path,
                   strerror(errno));
  if (!s) {
    sync_dir(w->path);
    free(w->tmp);
    w->tmp = NULL;
  }
  loom_file_abort(w);
  return s;
}

loom_status loom_file_write_atomic(loom_ctx *ctx, const char *path, const void *bytes, size_t n,
                                   unsigned flags) {
  loom_file_writer w;
  LOOM_TRY(loom_file_begin(ctx, path, flags, &w));
  if (n && fwrite(bytes, 1, n, w.f) != n) {
    int err = errno;
    loom_file_abort(&w);
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write %s: %s", path, strerror(err));
  }
  return loom_file_commit(ctx, &w);
}

/* ---- reading ------------------------------------------------------------- */

/* Opens a regular file without blocking (O_NONBLOCK: a FIFO's open would
 * wait for a writer); *size is its size. */
static int open_regular(loom_ctx *ctx, const char *path, off_t *size) {
  if (!path) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no file name"), -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return loom_error(ctx, LOOM_STATUS_IO, "%s: %s", path, strerror(errno)), -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    bool stat_ok = fstat(fd, &st) == 0;
    close(fd);
    if (stat_ok)
      loom_error(ctx, LOOM_STATUS_IO, "%s is %s; Loom reads only regular files", path,
                 kind_of(st.st_mode));
    else
      loom_error(ctx, LOOM_STATUS_IO, "%s: %s", path, strerror(err));
    return -1;
  }
  /* back to blocking reads (harmless for a regular file, but plain) */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = st.st_size;
  return fd;
}

FILE *loom_file_open_read(loom_ctx *ctx, const char *path) {
  off_t size;
  int fd = open_regular(ctx, path, &size);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    loom_error(ctx, LOOM_STATUS_IO, "%s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

loom_status loom_file_read(loom_ctx *ctx, const char *path, size_t max, char **buf, size_t *len) {
  if (!buf || !len) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "file_read: NULL out");
  *buf = NULL;
  *len = 0;
  off_t size;
  int fd = open_regular(ctx, path, &size);
  if (fd < 0) return ctx ? ctx->last : LOOM_STATUS_IO;
  if ((uint64_t)size > max) {
    close(fd);
    return loom_error(ctx, LOOM_STATUS_IO, "%s: %lld bytes is over the limit of %zu bytes", path,
                      (long long)size, max);
  }
  /* read to the end, but never past max + 1 bytes: the file may grow meanwhile */
  size_t cap = (size_t)size + 1 <= max ? (size_t)size + 1 : max + 1, n = 0;
  char *p = loom_malloc(ctx, cap + 1);
  loom_status s = p ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  while (!s) {
    if (n == cap) {
      if (cap > max) break;
      size_t nc = cap > max / 2 ? max + 1 : cap * 2;
      char *q = loom_realloc(ctx, p, nc + 1);
      if (!q) {
        s = LOOM_STATUS_OUT_OF_MEMORY;
        break;
      }
      p = q;
      cap = nc;
    }
    ssize_t got = read(fd, p + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) s = loom_error(ctx, LOOM_STATUS_IO, "%s: %s", path, strerror(errno));
    if (got <= 0) break;
    n += (size_t)got;
  }
  close(fd);
  if (!s && n > max)
    s = loom_error(ctx, LOOM_STATUS_IO, "%s: over the limit of %zu bytes", path, max);
  if (s) {
    free(p);
    return s;
  }
  p[n] = '\0';
  *buf = p;
  *len = n;
  return LOOM_STATUS_OK;
}

loom_status loom_file_error_at(loom_ctx *ctx, loom_status st, const char *path) {
  char msg[LOOM_ERROR_MAX];
  snprintf(msg, sizeof msg, "%s", loom_ctx_error(ctx));
  bool at = msg[0] >= '0' && msg[0] <= '9';
  return loom_error(ctx, st, "%s:%s%s", path, at ? "" : " ", msg);
}

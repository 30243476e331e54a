/*
 * The cache directory and its entries (jit_internal.h). What keeps planted
 * code out is ownership and permissions, checked here: the trailer's
 * checksum is a plain SHA-256 of public inputs that anyone can recompute,
 * so it only catches corruption (a truncated or overwritten file).
 */
#define _XOPEN_SOURCE 700 /* realpath, S_ISVTX */
#include "runtime/jit_internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JIT_ENTRY_MAX ((off_t)1 << 30)

static atomic_uint jit_tmp_counter;

void jit_tmp_name(char *out, size_t n, const char *prefix, const char *hex, const char *ext) {
  unsigned id = atomic_fetch_add(&jit_tmp_counter, 1u);
  snprintf(out, n, ".%s-%.16s-%ld-%u.%s", prefix, hex, (long)getpid(), id, ext);
}

/* mkdir -p; what it creates gets mode 0700. */
static bool make_dirs(const char *dir) {
  char path[4096];
  if (strlen(dir) >= sizeof path) return false;
  jit_scopy(path, sizeof path, dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(path, 0700) == 0 || errno == EEXIST;
}

/* A directory another user could change: owned by neither us nor root, or
 * writable by group or others without the sticky bit (which would let
 * them rename what is inside). */
static bool dir_foreign(const struct stat *st) {
  bool owner_ok = st->st_uid == geteuid() || st->st_uid == 0;
  bool shared = (st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX);
  return !owner_ok || shared;
}

/* Every directory above `resolved` (a realpath) is one nobody else can
 * change: else they could swap the cache directory under us. */
static bool parents_safe(const char *resolved, char *why, size_t n) {
  char path[4096];
  jit_scopy(path, sizeof path, resolved);
  for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
    if (slash == path) slash[1] = '\0'; /* the root directory */
    else *slash = '\0';
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
      snprintf(why, n, "cannot check its parent %s", path);
      return false;
    }
    if (dir_foreign(&st)) {
      snprintf(why, n, "its parent %s may be changed by another user (owner uid %u, mode %03o)",
               path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
      return false;
    }
    if (slash == path) break;
  }
  return true;
}

/* Opens resolved as d after checking it and its parents. */
static bool open_checked_dir(jit_dir *d, const char *resolved, char *why, size_t n) {
  if (!parents_safe(resolved, why, n)) return false;
  int fd = open(resolved, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(why, n, "cannot open it: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  if (st.st_uid != geteuid()) {
    snprintf(why, n, "it is owned by uid %u, not by you (uid %u)", (unsigned)st.st_uid,
             (unsigned)geteuid());
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, n, "group or others may write to it (mode %03o)",
             (unsigned)(st.st_mode & 07777));
  } else {
    d->fd = fd;
    jit_scopy(d->path, sizeof d->path, resolved);
    return true;
  }
  close(fd);
  return false;
}

bool jit_dir_open_cache(jit_dir *d, const char *dir, char *why, size_t n) {
  memset(d, 0, sizeof *d);
  d->fd = -1;
  if (!make_dirs(dir)) {
    snprintf(why, n, "cannot create it: %s", strerror(errno));
    return false;
  }
  char resolved[PATH_MAX];
  if (!realpath(dir, resolved)) {
    snprintf(why, n, "cannot resolve it: %s", strerror(errno));
    return false;
  }
  return open_checked_dir(d, resolved, why, n);
}

loom_status jit_dir_open_private(loom_ctx *ctx, jit_dir *d) {
  memset(d, 0, sizeof *d);
  d->fd = -1;
  const char *tmpdir = getenv("TMPDIR");
  const char *bases[2] = {tmpdir && tmpdir[0] ? tmpdir : "/tmp", "/tmp"};
  char why[512] = "";
  for (int i = 0; i < 2; i++) {
    char dir[4096], resolved[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/loom-jit-XXXXXX", bases[i]);
    if (!mkdtemp(dir)) {
      snprintf(why, sizeof why, "%.400s: %s", dir, strerror(errno));
      continue;
    }
    if (realpath(dir, resolved) && open_checked_dir(d, resolved, why, sizeof why)) {
      d->temporary = true;
      return LOOM_STATUS_OK;
    }
    rmdir(dir);
  }
  /* UNSUPPORTED: nowhere safe to compile, so the backend runs eagerly */
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                    "no usable cache directory and no safe temporary directory (%s)", why);
}

void jit_dir_close(jit_dir *d) {
  if (d->fd < 0) return;
  if (d->temporary) { /* remove whatever the compiler left, then the directory */
    int fd2 = dup(d->fd);
    DIR *dd = fd2 >= 0 ? fdopendir(fd2) : NULL;
    if (dd) {
      struct dirent *e;
      while ((e = readdir(dd)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(d->fd, e->d_name, 0);
      closedir(dd);
    } else if (fd2 >= 0) {
      close(fd2);
    }
    rmdir(d->path);
  }
  close(d->fd);
  d->fd = -1;
}

void jit_trailer(const uint8_t *data, size_t n, const uint8_t key[32],
                 uint8_t out[JIT_TRAILER_BYTES]) {
  memcpy(out, JIT_TRAILER_MAGIC, 8);
  loom_sha256(data, n, out + 8);
  memcpy(out + 40, key, 32);
}

jit_entry_state jit_entry_read(const jit_dir *d, const char *name, const uint8_t key[32],
                               uint8_t **data, size_t *n, char *why, size_t why_n) {
  *data = NULL;
  *n = 0;
  int fd = openat(d->fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return JIT_ENTRY_ABSENT;
    if (errno == ELOOP) {
      jit_scopy(why, why_n, "a symbolic link");
      return JIT_ENTRY_UNSAFE;
    }
    if (errno == ENXIO) {
      jit_scopy(why, why_n, "not a regular file");
      return JIT_ENTRY_UNSAFE;
    }
    snprintf(why, why_n, "unreadable: %s", strerror(errno));
    return JIT_ENTRY_CORRUPT;
  }
  jit_entry_state state = JIT_ENTRY_UNSAFE;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, why_n, "unreadable: %s", strerror(errno));
    state = JIT_ENTRY_CORRUPT;
  } else if (!S_ISREG(st.st_mode)) {
    jit_scopy(why, why_n, "not a regular file");
  } else if (st.st_uid != geteuid()) {
    snprintf(why, why_n, "owned by uid %u, not by you", (unsigned)st.st_uid);
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, why_n, "writable by group or others (mode %03o)",
             (unsigned)(st.st_mode & 07777));
  } else if (st.st_size > JIT_ENTRY_MAX) {
    jit_scopy(why, why_n, "larger than 1 GiB");
    state = JIT_ENTRY_CORRUPT;
  } else {
    state = JIT_ENTRY_CORRUPT;
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(size ? size : 1);
    while (buf && got < size) {
      ssize_t r = read(fd, buf + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (!buf || got != size) {
      jit_scopy(why, why_n, buf ? "changed while read" : "out of memory");
      free(buf);
    } else if (!key) {
      state = JIT_ENTRY_OK;
    } else if (size < JIT_TRAILER_BYTES + 64) {
      jit_scopy(why, why_n, "truncated");
    } else {
      const uint8_t *t = buf + size - JIT_TRAILER_BYTES;
      uint8_t want[JIT_TRAILER_BYTES];
      jit_trailer(buf, size - JIT_TRAILER_BYTES, key, want);
      if (memcmp(t, JIT_TRAILER_MAGIC, 8) != 0)
        jit_scopy(why, why_n, "no trailer (truncated or overwritten)");
      else if (memcmp(t + 40, key, 32) != 0)
        jit_scopy(why, why_n, "built for another key");
      else if (memcmp(t + 8, want + 8, 32) != 0)
        jit_scopy(why, why_n, "contents do not match their checksum");
      else
        state = JIT_ENTRY_OK;
    }
    if (state == JIT_ENTRY_OK) {
      *data = buf;
      *n = size;
    } else {
      free(buf);
    }
  }
  close(fd);
  return state;
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

bool jit_file_create(const jit_dir *d, const char *tmp_name, const void *data, size_t n,
                      const void *tail, size_t tail_n) {
  int fd = openat(d->fd, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write_all(fd, data, n) && write_all(fd, tail, tail_n);
  if (close(fd) != 0) ok = false;
  if (!ok) unlinkat(d->fd, tmp_name, 0);
  return ok;
}

bool jit_entry_write(const jit_dir *d, const char *tmp_name, const char *name,
                     const void *data, size_t n, const void *tail, size_t tail_n) {
  if (!jit_file_create(d, tmp_name, data, n, tail, tail_n)) return false;
  if (renameat(d->fd, tmp_name, d->fd, name) == 0) return true;
  int e = errno;
  unlinkat(d->fd, tmp_name, 0);
  errno = e;
  return false;
}

void *jit_dlopen_bytes(const jit_dir *d, const uint8_t *data, size_t n, char *why,
                       size_t why_n) {
  char name[128], path[4300];
  jit_tmp_name(name, sizeof name, "load", "module", "so");
  if (!jit_file_create(d, name, data, n, "", 0)) {
    snprintf(why, why_n, "cannot write a private copy in %s: %s", d->path, strerror(errno));
    return NULL;
  }
  snprintf(path, sizeof path, "%s/%s", d->path, name);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, why_n, "dlopen failed: %s", e ? e : "unknown error");
  }
  unlinkat(d->fd, name, 0);
  return h;
}

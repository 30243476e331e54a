/*
 * The machine profile file (profile.h): read whole, edited in memory,
 * written back through core/file.h's atomic writer.
 */
#include "perf/profile.h"

#include "core/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROFILE_MAX_BYTES 16384
#define KEY_MAX 64

bool loom_profile_path(char *buf, size_t n) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[3072];
  if (xdg && xdg[0] == '/')
    snprintf(dir, sizeof dir, "%s/loom", xdg);
  else if (home && home[0] == '/')
    snprintf(dir, sizeof dir, "%s/.cache/loom", home);
  else
    return false;
  const char *policy = getenv("OMP_WAIT_POLICY");
  char tag[16] = "";
  if (policy && *policy) {
    size_t k = 0;
    tag[k++] = '-';
    for (const char *c = policy; *c && k + 1 < sizeof tag; c++)
      if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')) tag[k++] = (char)(*c | 0x20);
    tag[k] = '\0';
  }
  int w = snprintf(buf, n, "%s/machine-%d%s.txt", dir, (int)(cores > 0 ? cores : 1), tag);
  return w > 0 && (size_t)w < n;
}

static bool valid_key(const char *key) {
  size_t n = 0;
  for (; key[n]; n++)
    if (!((key[n] >= 'a' && key[n] <= 'z') || (key[n] >= '0' && key[n] <= '9') || key[n] == '_'))
      return false;
  return n > 0 && n < KEY_MAX;
}

/* The format line that opens every file of this version. */
static int version_line(char *buf, size_t n) {
  return snprintf(buf, n, "profile_version %d\n", LOOM_PROFILE_VERSION);
}

/* The file's text after its version line (NUL-terminated, at most
 * PROFILE_MAX_BYTES), or "" when it is missing or of another version. */
static void read_text(const char *path, char *text) {
  text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t got = fread(text, 1, PROFILE_MAX_BYTES - 1, f);
  fclose(f);
  text[got] = '\0';
  char head[64];
  int hn = version_line(head, sizeof head);
  if (strncmp(text, head, (size_t)hn) != 0) {
    text[0] = '\0'; /* stale: measured some other way */
    return;
  }
  memmove(text, text + hn, got - (size_t)hn + 1);
}

/* True if the line at `line` is key's ("key value"). */
static bool is_key_line(const char *line, const char *key) {
  size_t k = strlen(key);
  return strncmp(line, key, k) == 0 && line[k] == ' ';
}

/* The line of text holding key (its start), or NULL. */
static const char *find_line(const char *text, const char *key) {
  for (const char *line = text; *line;) {
    if (is_key_line(line, key)) return line;
    const char *nl = strchr(line, '\n');
    if (!nl) break;
    line = nl + 1;
  }
  return NULL;
}

/* key + suffix into buf; false if it is not a valid key. */
static bool full_key(char buf[KEY_MAX], const char *key, const char *suffix) {
  if (!key || !suffix) return false;
  int w = snprintf(buf, KEY_MAX, "%s%s", key, suffix);
  return w > 0 && w < KEY_MAX && valid_key(buf);
}

bool loom_profile_get_all(const char *const *keys, int n, const char *suffix, double *values) {
  char path[4096];
  if (!keys || !values || n <= 0 || !loom_profile_path(path, sizeof path)) return false;
  char *text = malloc(PROFILE_MAX_BYTES);
  if (!text) return false;
  read_text(path, text);
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    char key[KEY_MAX];
    const char *line = full_key(key, keys[i], suffix) ? find_line(text, key) : NULL;
    ok = line != NULL;
    if (ok) {
      const char *num = line + strlen(key) + 1;
      char *end = NULL;
      double v = strtod(num, &end);
      ok = end != num && isfinite(v);
      if (ok) values[i] = v;
    }
  }
  free(text);
  return ok;
}

bool loom_profile_get(const char *key, double *value) {
  return loom_profile_get_all(&key, 1, "", value);
}

static void make_dirs_above(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(dir, 0700);
      *p = '/';
    }
}

/* True if line (len bytes) is one of the n keys' lines. */
static bool replaced(const char *line, size_t len, char (*keys)[KEY_MAX], int n) {
  for (int i = 0; i < n; i++) {
    size_t k = strlen(keys[i]);
    if (len > k && strncmp(line, keys[i], k) == 0 && line[k] == ' ') return true;
  }
  return false;
}

void loom_profile_put_all(const char *const *keys, int n, const char *suffix,
                          const double *values) {
  char path[4096];
  enum { MAX_PUT = 32 };
  if (!keys || !values || n <= 0 || n > MAX_PUT || !loom_profile_path(path, sizeof path)) return;
  char full[MAX_PUT][KEY_MAX];
  for (int i = 0; i < n; i++)
    if (!full_key(full[i], keys[i], suffix) || !isfinite(values[i]) ||
        strcmp(full[i], "profile_version") == 0)
      return;
  char *text = malloc(PROFILE_MAX_BYTES), *out = malloc(PROFILE_MAX_BYTES + MAX_PUT * 96);
  if (text && out) {
    read_text(path, text);
    /* the version, every other well-formed line as it was, then these keys' */
    size_t o = (size_t)version_line(out, 64);
    for (const char *line = text; *line;) {
      const char *nl = strchr(line, '\n');
      size_t len = nl ? (size_t)(nl - line) : strlen(line);
      if (!replaced(line, len, full, n) && len > 0 && len < 200 &&
          o + len + 1 < PROFILE_MAX_BYTES) {
        memcpy(out + o, line, len);
        o += len;
        out[o++] = '\n';
      }
      if (!nl) break;
      line = nl + 1;
    }
    for (int i = 0; i < n; i++) o += (size_t)snprintf(out + o, 96, "%s %.17g\n", full[i], values[i]);
    make_dirs_above(path);
    (void)loom_file_write_atomic(NULL, path, out, o, LOOM_FILE_REPLACE);
  }
  free(text);
  free(out);
}

void loom_profile_put(const char *key, double value) {
  loom_profile_put_all(&key, 1, "", &value);
}

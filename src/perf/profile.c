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

static bool profile_path(char *buf, size_t n) {
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

/* The file's text (NUL-terminated, at most PROFILE_MAX_BYTES), or "". */
static void read_text(const char *path, char *text) {
  text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t got = fread(text, 1, PROFILE_MAX_BYTES - 1, f);
  fclose(f);
  text[got] = '\0';
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

bool loom_profile_get(const char *key, double *value) {
  char path[4096];
  if (!key || !valid_key(key) || !profile_path(path, sizeof path)) return false;
  char *text = malloc(PROFILE_MAX_BYTES);
  if (!text) return false;
  read_text(path, text);
  const char *line = find_line(text, key);
  bool ok = false;
  if (line) {
    char *end = NULL;
    double v = strtod(line + strlen(key) + 1, &end);
    ok = end != line + strlen(key) + 1 && isfinite(v);
    if (ok) *value = v;
  }
  free(text);
  return ok;
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

void loom_profile_put(const char *key, double value) {
  char path[4096];
  if (!key || !valid_key(key) || !isfinite(value) || !profile_path(path, sizeof path))
    return;
  char *text = malloc(PROFILE_MAX_BYTES), *out = malloc(PROFILE_MAX_BYTES + 128);
  if (text && out) {
    read_text(path, text);
    /* every other well-formed line as it was, then this key's */
    size_t n = 0;
    for (const char *line = text; *line;) {
      const char *nl = strchr(line, '\n');
      size_t len = nl ? (size_t)(nl - line) : strlen(line);
      if (!is_key_line(line, key) && len > 0 && len < 200 && n + len + 1 < PROFILE_MAX_BYTES) {
        memcpy(out + n, line, len);
        n += len;
        out[n++] = '\n';
      }
      if (!nl) break;
      line = nl + 1;
    }
    n += (size_t)snprintf(out + n, 128, "%s %.17g\n", key, value);
    make_dirs_above(path);
    (void)loom_file_write_atomic(NULL, path, out, n, LOOM_FILE_REPLACE);
  }
  free(text);
  free(out);
}

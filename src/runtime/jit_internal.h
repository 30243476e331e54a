/*
 * Pieces of the run-time compiler shared by jit.c (keys, loading),
 * jit_cc.c (the compiler process) and jit_cache.c (the cache directory and
 * its entries). Not part of the interface: see jit.h.
 */
#ifndef LOOM_RUNTIME_JIT_INTERNAL_H
#define LOOM_RUNTIME_JIT_INTERNAL_H

#include "core/ctx.h"
#include "core/sha256.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JIT_MAX_WORDS 16   /* words of the compiler command */
#define JIT_MAX_ARGV 40    /* the whole compiler argv */
#define JIT_MSG_MAX 2048   /* compiler output kept for the error message */
#define JIT_VERSION_MAX 1024

/* Copies src into dst[n], truncating. */
void jit_scopy(char *dst, size_t n, const char *src);

/* ---- the compiler (jit_cc.c) --------------------------------------------- */

/* The compiler command: words of $LOOM_CC, $CC or "cc". */
typedef struct jit_cc {
  char buf[1024];
  char *words[JIT_MAX_WORDS];
  int n;
  const char *from; /* "LOOM_CC", "CC" or "default" */
  char cmd[1024];   /* the words joined by blanks, for messages */
} jit_cc;

/* Parses the compiler command; false if it is empty or has too many words. */
bool jit_cc_parse(jit_cc *cc);

/* The one argv a module is compiled with: the compiler's words, the flags,
 * "-o" OUT SRC "-lm". The cache key hashes exactly this array (with the two
 * file names as fixed placeholders), so what is hashed is what runs. */
typedef struct jit_argv {
  char *argv[JIT_MAX_ARGV + 1]; /* NULL-terminated */
  int argc;
  int out_slot, src_slot; /* indices of the output and source file names */
  int opt_slot;           /* index of the optimisation level (-O3) */
} jit_argv;
void jit_argv_make(jit_argv *a, const jit_cc *cc);
/* For a source of source_bytes: -O1 instead of -O3 where it is longer than
 * $LOOM_CC_O1_ABOVE bytes (unset or empty: never). A test suite's option:
 * a huge unfused program compiles in about half the CPU time, and its
 * kernels compute the same values more slowly (no flag that changes a
 * value depends on the level). INVALID_ARGUMENT on a malformed value. */
loom_status jit_argv_opt_level(loom_ctx *ctx, jit_argv *a, size_t source_bytes);
/* Feeds the argv (placeholders in the file slots) into a key. */
void jit_argv_hash(const jit_argv *a, loom_sha256_state *s);
/* The flags alone, joined by blanks (static; for reports and docs). */
const char *jit_flags_string(void);

/* The compile timeout: $LOOM_CC_TIMEOUT seconds (> 0), default 300. */
#define JIT_DEFAULT_TIMEOUT_S 300.0
loom_status jit_timeout(loom_ctx *ctx, double *seconds);

/* Runs argv (PATH lookup, no shell) in its own process group with stdout
 * and stderr captured into out (first cap-1 bytes). After timeout_s the
 * whole group is killed and *timed_out set. Returns 0 with the exit status
 * in *status (128+signal if killed), or an errno if it could not start. */
int jit_run(char *const argv[], double timeout_s, char *out, size_t cap, int *status,
            bool *timed_out);

/* The compiler's --version output (memoised per command); UNSUPPORTED when
 * it cannot be run. */
loom_status jit_cc_version(loom_ctx *ctx, const jit_cc *cc, double timeout_s, char *out,
                           size_t n);

/* ---- the cache (jit_cache.c) -------------------------------------------- */

#define JIT_TRAILER_MAGIC "LOOMJIT1"
#define JIT_TRAILER_BYTES (8 + 32 + 32)

/* A directory entries live in: a checked, open directory. */
typedef struct jit_dir {
  int fd;          /* O_DIRECTORY, close-on-exec */
  char path[4096]; /* its resolved path (what the compiler is given) */
  bool temporary;  /* a private mkdtemp directory, removed when closed */
} jit_dir;

/* Opens the cache directory dir, creating it and missing parents with mode
 * 0700. Refuses (false, reason in why) a directory that is not ours or that
 * group or others may write, and one reached through a directory another
 * user may change (writable by others without the sticky bit, or owned by
 * neither us nor root). */
bool jit_dir_open_cache(jit_dir *d, const char *dir, char *why, size_t n);
/* A fresh private directory (mkdtemp, 0700) under $TMPDIR or /tmp, with
 * the same checks; UNSUPPORTED when neither is safe. */
loom_status jit_dir_open_private(loom_ctx *ctx, jit_dir *d);
/* Closes (and for a temporary directory removes) d. */
void jit_dir_close(jit_dir *d);

/* What reading an entry found. */
typedef enum jit_entry_state {
  JIT_ENTRY_ABSENT,  /* no such file */
  JIT_ENTRY_OK,      /* read, and its trailer matches the key */
  JIT_ENTRY_CORRUPT, /* ours, but truncated or built for another key */
  JIT_ENTRY_UNSAFE,  /* a symlink, not a regular file, not ours, or writable
                        by others: never read */
} jit_entry_state;

/* Reads entry `name` of d through one descriptor opened with O_NOFOLLOW |
 * O_NONBLOCK (a FIFO does not block): a regular file we own that group and
 * others cannot write, at most 1 GiB. With key, also checks the trailer
 * (checksum over the contents, and the key). *data (malloc'ed) holds the
 * whole file on OK. */
jit_entry_state jit_entry_read(const jit_dir *d, const char *name, const uint8_t key[32],
                               uint8_t **data, size_t *n, char *why, size_t why_n);
/* Creates name in d (O_EXCL | O_NOFOLLOW, 0600: never an existing file,
 * never through a link) holding data then tail. */
bool jit_file_create(const jit_dir *d, const char *name, const void *data, size_t n,
                     const void *tail, size_t tail_n);
/* jit_file_create(tmp_name) renamed to name. */
bool jit_entry_write(const jit_dir *d, const char *tmp_name, const char *name,
                     const void *data, size_t n, const void *tail, size_t tail_n);
/* The trailer of data for key. */
void jit_trailer(const uint8_t *data, size_t n, const uint8_t key[32],
                 uint8_t out[JIT_TRAILER_BYTES]);

/* dlopen of exactly these (already checked) bytes: written to a private
 * file of d (O_EXCL, 0600) that is removed once loaded, so nothing can
 * change between the check and the load. (Not /proc/self/fd/N: glibc
 * matches an already loaded object by that name, and descriptor numbers
 * are reused, so a second module could get the first one's handle; a
 * unique name per load avoids it, and needs no /proc.) NULL with a reason
 * on failure. */
void *jit_dlopen_bytes(const jit_dir *d, const uint8_t *data, size_t n, char *why,
                       size_t why_n);

/* A unique name in d: ".PREFIX-KEY16-PID-N.EXT". */
void jit_tmp_name(char *out, size_t n, const char *prefix, const char *hex, const char *ext);

#endif

/*
 * Files the user names: reading them with a cap, checking an output can be
 * written before the work that produces it starts, and writing it safely.
 *
 * Every user file Loom writes (checkpoints, .npy outputs, traces) goes
 * through loom_file_begin/commit: the bytes go to a fresh temporary file in
 * the target's directory, created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW,
 * a random name, so two writers and a planted symlink cannot meet), synced,
 * and renamed over the target; the directory is synced after. Only a
 * regular file is ever replaced: a symlink, device, FIFO or directory at
 * the target is an error naming it, and so is a read-only file (even when
 * replacing is allowed: read-only says "keep this").
 */
#ifndef LOOM_CORE_FILE_H
#define LOOM_CORE_FILE_H

#include "core/ctx.h"

#include <stdio.h>

enum {
  /* an existing regular, writable file at the target may be replaced */
  LOOM_FILE_REPLACE = 1u << 0,
  /* the command line's message for an existing target: "... already
   * exists (use --force to overwrite)" */
  LOOM_FILE_HINT_FORCE = 1u << 1,
};

/* Checks that path can be written with these flags, without touching it:
 * the name holds no control bytes, its directory exists and is writable,
 * and the target is absent or (with LOOM_FILE_REPLACE) a writable regular
 * file. An existing target without LOOM_FILE_REPLACE fails with a message
 * ending "already exists". */
loom_status loom_file_check_output(loom_ctx *ctx, const char *path, unsigned flags);

/* True when a and b name the same file: the same path; both existing with
 * the same device and inode; or neither existing, with the same name in
 * the same directory (by device and inode: "a" and "./a"). */
bool loom_file_same(const char *a, const char *b);

/* One file being written: write to f, then commit or abort. */
typedef struct loom_file_writer {
  FILE *f;
  char *path, *tmp;
  unsigned flags;
} loom_file_writer;

/* Checks path (loom_file_check_output) and opens its temporary file. */
loom_status loom_file_begin(loom_ctx *ctx, const char *path, unsigned flags, loom_file_writer *w);
/* Flushes, syncs and renames the temporary file over the target (after
 * checking the target again); on failure the temporary file is removed.
 * Either way w is finished. */
loom_status loom_file_commit(loom_ctx *ctx, loom_file_writer *w);
/* Removes the temporary file (safe on a writer that failed to begin). */
void loom_file_abort(loom_file_writer *w);

/* The whole of bytes[0..n) as path, through begin/commit. */
loom_status loom_file_write_atomic(loom_ctx *ctx, const char *path, const void *bytes, size_t n,
                                   unsigned flags);

/* Reads the regular file at path whole into *buf (malloc'd, NUL-terminated,
 * free() it), refusing anything else (a FIFO or device is refused before a
 * byte is read, and opening does not block) and files over max bytes. */
loom_status loom_file_read(loom_ctx *ctx, const char *path, size_t max, char **buf, size_t *len);

/* Puts path in front of ctx's message about the contents of that file:
 * "PATH:LINE:COL: ..." (the form editors and compilers use) when the
 * message starts with a position, else "PATH: ...". Returns st. */
loom_status loom_file_error_at(loom_ctx *ctx, loom_status st, const char *path);

/* Opens path for reading as loom_file_read does (regular files only, no
 * blocking open); NULL with an error on ctx. */
FILE *loom_file_open_read(loom_ctx *ctx, const char *path);

/* Copies s into buf (cap bytes, cap >= 1) with control bytes, DEL, C1
 * controls and bytes that are not UTF-8 written as \xHH, so a name from a
 * file cannot drive the terminal; truncated to fit. Returns buf. Every
 * name the command line prints passes through it. */
const char *loom_escape(const char *s, char *buf, size_t cap);
/* As loom_escape but keeping '\n' and '\t' (messages may span lines, such
 * as a compiler's output); what loom_error applies to every message. */
const char *loom_escape_message(const char *s, char *buf, size_t cap);
/* True when s holds a control byte (C0, DEL, or a C1 control in UTF-8):
 * such a name is refused as a file name. */
bool loom_has_control_bytes(const char *s);

#endif

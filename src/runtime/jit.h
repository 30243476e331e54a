/*
 * Run-time compilation of generated C: the system C compiler turns a
 * translation unit into a shared object, which is loaded with dlopen.
 *
 * Compiler: $LOOM_CC, else $CC, else "cc" (split on blanks, so "ccache gcc"
 * works; run with posix_spawnp, never through a shell, in its own process
 * group). Flags (written once, in jit_cc.c):
 *   -O3 -march=native -fopenmp -fPIC -shared -std=c11 -ffp-contract=off
 *   -fno-trapping-math -fno-math-errno (and -mprefer-vector-width=512 on
 *   x86).
 * -ffp-contract=off keeps a*b+c two roundings: generated kernels promise
 * results that do not depend on whether the compiler fuses into an FMA
 * (they call fma() where they mean one). -fno-trapping-math and
 * -fno-math-errno change no value (Loom never enables FP traps nor reads
 * errno); they let gcc if-convert a select of a division and inline sqrt
 * as one instruction, either of which otherwise stops vectorisation.
 * Timeout: a compile (and the compiler's --version) that runs longer than
 * $LOOM_CC_TIMEOUT seconds (default 300) is killed, with its process group.
 * No compiler, a compiler that times out, and one that exits 0 but writes
 * no shared object (LOOM_CC=/bin/true) are UNSUPPORTED: the cpu backend
 * then runs the graph eagerly with a warning. A compiler that reports an
 * error is INTERNAL, with its message.
 *
 * Cache (content addressed): $XDG_CACHE_HOME/loom, else $HOME/.cache/loom;
 * what is missing of that path is created with mode 0700.
 * key = SHA-256 of (the exact argv the compiler is run with, its file names
 * as placeholders; the compiler's --version output; the CPU identity
 * (core/cpu_id.h: the code is built with -march=native); the source).
 * Entries:
 *   KEY.c   the source as compiled (for people to read)
 *   KEY.so  the shared object, followed by a trailer:
 *           "LOOMJIT1" | SHA-256 of the bytes before the trailer | the key
 *           (32 raw bytes each)
 * Every module also exports `const char loom_module_key[]` (the key in
 * hex), added to the source here.
 *
 * Who may plant code: the trailer's checksum is a plain SHA-256 of public
 * inputs, so anyone can forge it; it only catches corruption. What keeps
 * other users' code out is ownership and permissions:
 * - the directory must be ours and not writable by group or others, and
 *   every directory above it owned by us or root and not writable by group
 *   or others unless sticky; otherwise the cache is not used (the module is
 *   built in a private temporary directory) and the load reports a warning;
 * - an entry is opened with O_NOFOLLOW | O_NONBLOCK (a symlink is not
 *   followed, a FIFO does not block) and must be a regular file we own that
 *   group and others cannot write; otherwise it is not loaded, removed and
 *   rebuilt, with a warning;
 * - it is read through that descriptor and its trailer checked before
 *   anything of it runs, and dlopen loads exactly the checked bytes (a
 *   private 0600 copy in the same directory, removed once loaded), so
 *   nothing can change between the check and the load.
 * A corrupt entry (trailer, failed dlopen, wrong exported key) is deleted
 * and rebuilt. Files are written to unique temporary names (O_EXCL) in the
 * same directory and renamed into place, so concurrent processes never see
 * half-written entries. If the cache directory cannot be written, the
 * module is built in a private temporary directory that is removed once
 * the module is loaded. Entries are never evicted (delete the directory to
 * reclaim it).
 *
 * The OpenMP runtime a module links (libgomp, libomp) is kept loaded after
 * the module is freed: its idle worker threads outlive every parallel
 * region, and a host that does not link OpenMP itself would otherwise
 * unload it under them.
 */
#ifndef LOOM_RUNTIME_JIT_H
#define LOOM_RUNTIME_JIT_H

#include "core/ctx.h"

typedef struct loom_jit_module loom_jit_module;

/* What a load did. */
typedef struct loom_jit_info {
  bool cache_hit;   /* loaded from the cache, nothing compiled */
  bool rebuilt;     /* a corrupt or mismatched entry was deleted and rebuilt */
  bool private_dir; /* the cache was unusable: built in a temporary dir */
  double compile_seconds; /* time spent in the compiler (0 on a hit) */
  char key[65];     /* the cache key, hex */
  /* Non-empty when the cache was bypassed or an unsafe entry was replaced
   * (a directory or entry another user could write): say it to the user. */
  char warning[400];
} loom_jit_info;

/* Compiles (or finds in the cache) `source` and loads it. Errors: no
 * compiler, a compiler that times out or writes nothing -> UNSUPPORTED;
 * compiler failure -> INTERNAL with its message. */
loom_status loom_jit_load(loom_ctx *ctx, const char *source,
                          loom_jit_module **out, bool *cache_hit);
/* loom_jit_load with a full report (info may be NULL). */
loom_status loom_jit_load_ex(loom_ctx *ctx, const char *source,
                             loom_jit_module **out, loom_jit_info *info);
/* The address of an exported symbol, NULL if absent. */
void *loom_jit_symbol(loom_jit_module *m, const char *name);
/* The module's cache key (hex). */
const char *loom_jit_module_key(const loom_jit_module *m);
/* Unloads a module (dlclose); NULL is fine. */
void loom_jit_free(loom_jit_module *m);

/* The cache directory in use for this environment (malloc'ed; NULL when
 * no HOME or XDG_CACHE_HOME is set): $LOOM_KERNEL_CACHE where it is an
 * absolute path, else $XDG_CACHE_HOME/loom, else ~/.cache/loom. */
char *loom_jit_cache_dir(void);
/* The key loom_jit_load gives `source` with this environment's compiler
 * and the CPU identity `cpu` (NULL: this CPU's, loom_cpu_identity()). */
loom_status loom_jit_key_hex(loom_ctx *ctx, const char *source, const char *cpu,
                             char hex[65]);
/* The compiler flags (for reports and docs). */
const char *loom_jit_flags(void);

#endif

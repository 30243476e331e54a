/*
 * Training checkpoints as safetensors files: the parameters by name, the
 * AdamW moments ("adam.m.NAME", "adam.v.NAME"), and in __metadata__ the
 * step count and the whole training configuration (model shape, schedule,
 * seed), so loading resumes the run exactly where it stopped.
 */
#ifndef LOOM_TRAIN_CHECKPOINT_H
#define LOOM_TRAIN_CHECKPOINT_H

#include "io/safetensors.h"
#include "train/trainer.h"

/* Writes t's state to path (safely, core/file.h: a fresh temporary file,
 * synced and renamed over a regular file only; a read-only file is kept),
 * with the SHA-256 of the data in the metadata, which loading checks. */
loom_status loom_checkpoint_save(loom_trainer *t, const char *path);

/* Reads a checkpoint's configuration (from its metadata) into cfg; the
 * fields not stored (threads, backend) are left as they are. *st keeps the
 * file for loom_checkpoint_restore (free with loom_safetensors_free). */
loom_status loom_checkpoint_read(loom_ctx *ctx, const char *path, loom_train_config *cfg,
                                 loom_safetensors **st);

/* Copies the state of st into t after checking that every tensor is there
 * with t's dtype and shape (and nothing else is). */
loom_status loom_checkpoint_restore(loom_trainer *t, const loom_safetensors *st);

#endif

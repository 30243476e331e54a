/* `loom train`: trains the GPT of model/gpt.h on Loom's arithmetic corpus. */
#ifndef LOOM_TRAIN_TRAIN_CLI_H
#define LOOM_TRAIN_TRAIN_CLI_H

/* Runs `loom train` (argv[0] is "train"). Returns the exit code: 0 ok,
 * 1 failure (message on stderr), 2 usage error (usage on stderr). */
int loom_train_main(int argc, char **argv);

#endif

/* The command line's ONNX part (docs/ONNX.md): `loom onnx-test DIR`, and
 * run, show, compile and bench given a .onnx model. */
#ifndef LOOM_CLI_ONNX_H
#define LOOM_CLI_ONNX_H

#include <stdbool.h>

/* True when a command's arguments name a .onnx file (argv[0] the command). */
bool loom_cli_onnx_wants(int argc, char **argv);
/* argv[0] is the command: onnx-test, run, show, compile or bench. */
int loom_cli_onnx_main(int argc, char **argv);

#endif

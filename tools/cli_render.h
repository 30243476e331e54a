/* Pictures for the command line: Graphviz DOT rendered to SVG or PNG by
 * Graphviz's own `dot` program when it is installed. */
#ifndef LOOM_TOOLS_CLI_RENDER_H
#define LOOM_TOOLS_CLI_RENDER_H

#include "core/ctx.h"

/* True when Graphviz's `dot` is on PATH. */
bool loom_cli_have_graphviz(void);

/* Renders dot_text as format ("svg" or "png") into path, written safely
 * (core/file.h) with flags. A missing Graphviz, or `dot` failing, is an
 * error naming it; path is not touched then. */
loom_status loom_cli_render_dot(loom_ctx *ctx, const char *dot_text, const char *format,
                                const char *path, unsigned flags);

#endif

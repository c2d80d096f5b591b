/* cli/cli.h: the one entry point from the subcommands (cli/main.c) into
 * the REPL (cli/repl.c). Everything else the two share is the pipeline
 * (cli/pipeline.h); neither calls into the other beyond this.
 *
 *   cli_opts o = {...};   // parsed by `tfg repl`'s options
 *   return cli_repl(&o);
 */
#ifndef TFG_CLI_H
#define TFG_CLI_H

#include "cli/pipeline.h"

/* `tfg repl [FILE]` with parsed options: reads, evaluates and runs inputs
 * until the end of its input; returns the process exit code. */
int cli_repl(const cli_opts *o);

#endif

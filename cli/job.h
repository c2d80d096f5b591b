/* cli/job.h: under mpirun, what every rank must mean before any of them
 * trains: the options, each train's settings, the loads and data, the
 * all-reduces, and the graph node by node (the program as written, then
 * the nodes the compile added). Ranks that build different programs
 * would each apply their own update to the gradients all of them sum,
 * while rank 0 logged and checkpointed one model; they are refused.
 *
 *   tfg_strbuf written = {0};
 *   int32_t nwritten = p->graph->nnodes;
 *   if (tfg_mpi_size() > 1) cli_job_program(&written, p);   // before the compile rewrites nodes
 *   cli_compile(o, p, d, &c);
 *   int rc = cli_same_job(o, p, &c, nwritten, &written);     // 0, or EXIT_USAGE on every rank
 */
#ifndef TFG_CLI_JOB_H
#define TFG_CLI_JOB_H

#include <stdint.h>

#include "base/strbuf.h"
#include "cli/pipeline.h"

/* Appends the program's graph as the interpreter built it, a line per
 * node (op, dtype and shape, inputs, name, pin, attrs, a constant's
 * values by hash), to *t. */
void cli_job_program(tfg_strbuf *t, const tfg_program *p);

/* Outside mpirun (one rank): 0. Else compares this rank's job (o, p, the
 * compile c, and written: cli_job_program's text of the nodes below
 * nwritten) with every other rank's by hash (runtime/mpi.h
 * tfg_mpi_same): 0, or EXIT_USAGE on every rank after the differing rank
 * names its first differing line on stderr. */
int cli_same_job(const cli_opts *o, const tfg_program *p, const cli_compiled *c, int32_t nwritten,
                 const tfg_strbuf *written);

#endif

/* cli/predict.h: `tfg plan --predict`: each train's predicted step time
 * (compiler/predict.h) on the run's devices, host devices measured first
 * (runtime/calibrate.h), and for mirrored() the scaling over 1..N
 * replicas of the same kind, the global batch fixed.
 *
 *   int rc = cli_predict(&o, prog, src, ast, &io, diag);   // after the program is built
 */
#ifndef TFG_CLI_PREDICT_H
#define TFG_CLI_PREDICT_H

#include "cli/pipeline.h"

/* Compiles p (built from ast in src with io) for o's devices and prints
 * each train's prediction on stdout. The scaling table builds the
 * program again from ast for 1..N devices. Returns 0 or the exit code. */
int cli_predict(const cli_opts *o, tfg_program *p, const tfg_source *src, const tfg_ast *ast,
                const tfg_interp_opts *io, tfg_diag *d);

#endif

/* runtime/train_log.h: a train's `log = "run.csv"` file, one row per
 * logged step (LANGUAGE.md section 6: step, loss, metrics, lr, rows/s,
 * seconds).
 *
 *   tfg_train_log *l = tfg_train_log_new("run.csv", &at, "step,loss,lr", resumed_after);
 *   if (tfg_train_log_row(l, "10,2.31,0.001", d) != TFG_OK) ...;  // exit 3: the rows are the run's output
 *   tfg_train_log_close(l, d);
 *
 * Nothing is written before the first row: a run that fails first (a
 * damaged checkpoint, a bad feed) leaves the previous log as it was. The
 * first row makes the file whole (base/file.h: header, kept rows and that
 * row in a temporary renamed over the target, through a symlink, never
 * over a device, FIFO or folder); later rows are appended one write each,
 * so a reader (tfg plot during a run) sees whole rows. A run that resumes
 * from a checkpoint of step S keeps the previous log's rows up to S (when
 * its header is the same) and drops the later ones, which it logs again,
 * as TensorBoard's purge_step does. */
#ifndef TFG_TRAIN_LOG_H
#define TFG_TRAIN_LOG_H

#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"

typedef struct tfg_train_log tfg_train_log;

/* A log for path (at: the `log` setting, for messages), its header line
 * without the newline. resume: the step the run resumes after (0: a fresh
 * run). Opens nothing. */
tfg_train_log *tfg_train_log_new(const char *path, const tfg_loc *at, const char *header, int64_t resume);

/* Writes one row (without the newline). TFG_OK, or TFG_ERR_IO after an
 * error naming the file and why (a full disk, a file size limit): the log
 * is the run's output, so a run that cannot write it fails (exit 3). */
tfg_status tfg_train_log_row(tfg_train_log *l, const char *row, tfg_diag *d);

/* Syncs and closes the file (if a row made it) and frees l; TFG_ERR_IO
 * after an error if the last rows could not be made durable. NULL is
 * allowed. */
tfg_status tfg_train_log_close(tfg_train_log *l, tfg_diag *d);

#endif

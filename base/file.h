/* base/file.h: opening the files a user names (sources, data, checkpoints)
 * so that a careless path can never hang or surprise tfg, and moving
 * whole blocks through a descriptor.
 *
 *   struct stat st;
 *   const char *why;
 *   int fd = tfg_file_open_regular(path, &st, &why);
 *   if (fd < 0) report("cannot open '%s': %s", path, why);
 *   int err = tfg_file_read_all(fd, buf, len);    // 0, an errno value, or -1: the file ended
 *
 * Files tfg writes (checkpoints, traces, plots, logs) go through
 * tfg_file_out: the bytes go to a temporary beside the target, which is
 * synced and renamed over it, so the target is either the old file or the
 * whole new one; a symlink is written through (its target is replaced), and
 * a target that exists but is not a regular file (a device, a FIFO, a
 * folder) is refused, never replaced:
 *
 *   tfg_file_out o;
 *   if (tfg_file_out_begin(&o, path, TFG_FILE_OUT_UNIQUE, &why) != 0) report("cannot write '%s': %s", path, why);
 *   tfg_file_out_write(&o, data, len);                 // as often as needed
 *   if (tfg_file_out_commit(&o) != 0) report("cannot write '%s': %s '%s': %s", path, o.step, o.failed, strerror(o.err));
 *   tfg_file_out_end(&o);
 */
#ifndef TFG_FILE_H
#define TFG_FILE_H

#include <stdint.h>
#include <sys/stat.h>

/* Opens path for reading if it is a regular file: returns a descriptor
 * (close-on-exec, blocking) and its fstat in *st. Otherwise returns -1
 * and sets *why to what is wrong, in words for a message ("No such file
 * or directory", "Is a directory", "it is a FIFO (named pipe), not a
 * regular file", ...). The open itself never blocks (O_NONBLOCK: a FIFO
 * would wait for a writer), and devices such as /dev/zero, which never
 * end, are refused like FIFOs. */
int tfg_file_open_regular(const char *path, struct stat *st, const char **why);

/* The last part of path, after its last '/' ("nn.tfg" of
 * "stdlib/nn.tfg"): how plans and explanations name a source. */
const char *tfg_path_base(const char *path);

/* The folder holding path, in a new string the caller frees: "out/m.st"
 * -> "out", "m.st" -> ".", "/m.st" -> "/". */
char *tfg_path_folder(const char *path);

/* Reads exactly len bytes from fd into buf, retrying short reads and
 * EINTR, in calls of at most 1 GiB (Linux moves at most ~2 GB per call).
 * Returns 0, an errno value, or -1 when the file ended first. */
int tfg_file_read_all(int fd, void *buf, uint64_t len);

/* Writes all len bytes of buf to fd, retrying short writes and EINTR, in
 * calls of at most 1 GiB. Returns 0 or an errno value (EIO for a write
 * that makes no progress and gives no reason: we do not spin). */
int tfg_file_write_all(int fd, const void *buf, uint64_t len);

/* Where a write of path puts its bytes: path itself, or, through a chain
 * of symlinks (at most 40), the file the last one names (which need not
 * exist yet: a dangling link is written through, as the shell's `>` does).
 * Returns the target (the caller frees it), or NULL with *why set: a
 * target that exists and is not a regular file ("it is a character
 * device, not a regular file", "Is a directory", ...), a symlink loop. */
char *tfg_file_out_target(const char *path, const char **why);

/* A write in progress: open with tfg_file_out_begin, then write, then
 * commit (or discard). After a failed write or commit, step says what
 * failed ("writing", "syncing", "renaming", ...), failed names the file it
 * failed on, and err is the errno value. */
typedef struct tfg_file_out {
  char *target; /* the file replaced at commit (path through its symlinks) */
  char *tmp;    /* the temporary beside it */
  int fd;
  int err;
  const char *step;
  const char *failed;
} tfg_file_out;

/* How tfg_file_out_begin names its temporary beside the target:
 * TFG_FILE_OUT_UNIQUE "<target>.tmp.<pid>.<n>", new per call (O_EXCL), so
 * threads of one process may write one path at once; TFG_FILE_OUT_PER_PID
 * "<target>.tmp.<pid>", reused (truncated) if a killed process of the same
 * pid left it, so a writer can find and remove dead writers' temporaries
 * by their pid (checkpoints); threads of one process must then not write
 * the same path at once. Both open with O_NOFOLLOW: never through a
 * symlink planted under the temporary's name. */
typedef enum { TFG_FILE_OUT_UNIQUE, TFG_FILE_OUT_PER_PID } tfg_file_out_naming;

/* Resolves path (tfg_file_out_target) and creates the temporary beside its
 * target. Returns 0, or -1 with *why set (and nothing to free or remove). */
int tfg_file_out_begin(tfg_file_out *o, const char *path, tfg_file_out_naming naming, const char **why);

/* Appends len bytes to the temporary. Returns 0 or an errno value (also
 * kept in o->err; later writes then do nothing and commit fails). */
int tfg_file_out_write(tfg_file_out *o, const void *buf, uint64_t len);

/* Syncs and closes the temporary, checks that the target is still absent
 * or a regular file, renames the temporary over it and syncs the folder,
 * so the new file survives a crash. Returns 0, or an errno value with
 * o->step and o->failed set (the target is left as it was unless only the
 * folder's sync failed). Call tfg_file_out_end after it, once any message
 * is written (o->failed may point into o). */
int tfg_file_out_commit(tfg_file_out *o);

/* Removes the temporary (if still there) and frees o's memory: after a
 * commit, or instead of one. */
void tfg_file_out_end(tfg_file_out *o);

/* Whether a and b are the same file (device and inode; a path that does
 * not exist is no file, so it equals none). */
int tfg_file_same(const char *a, const char *b);

#endif

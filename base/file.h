/* base/file.h: opening the files a user names (sources, data, checkpoints)
 * so that a careless path can never hang or surprise tfg, and moving
 * whole blocks through a descriptor.
 *
 *   struct stat st;
 *   const char *why;
 *   int fd = tfg_file_open_regular(path, &st, &why);
 *   if (fd < 0) report("cannot open '%s': %s", path, why);
 *   int err = tfg_file_read_all(fd, buf, len);    // 0, an errno value, or -1: the file ended
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

/* Reads exactly len bytes from fd into buf, retrying short reads and
 * EINTR, in calls of at most 1 GiB (Linux moves at most ~2 GB per call).
 * Returns 0, an errno value, or -1 when the file ended first. */
int tfg_file_read_all(int fd, void *buf, uint64_t len);

/* Writes all len bytes of buf to fd, retrying short writes and EINTR, in
 * calls of at most 1 GiB. Returns 0 or an errno value (EIO for a write
 * that makes no progress and gives no reason: we do not spin). */
int tfg_file_write_all(int fd, const void *buf, uint64_t len);

#endif

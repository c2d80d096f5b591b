/* base/file.h: opening the files a user names (sources, data, checkpoints)
 * so that a careless path can never hang or surprise tfg.
 *
 *   struct stat st;
 *   const char *why;
 *   int fd = tfg_file_open_regular(path, &st, &why);
 *   if (fd < 0) report("cannot open '%s': %s", path, why);
 */
#ifndef TFG_FILE_H
#define TFG_FILE_H

#include <sys/stat.h>

/* Opens path for reading if it is a regular file: returns a descriptor
 * (close-on-exec, blocking) and its fstat in *st. Otherwise returns -1
 * and sets *why to what is wrong, in words for a message ("No such file
 * or directory", "Is a directory", "it is a FIFO (named pipe), not a
 * regular file", ...). The open itself never blocks (O_NONBLOCK: a FIFO
 * would wait for a writer), and devices such as /dev/zero, which never
 * end, are refused like FIFOs. */
int tfg_file_open_regular(const char *path, struct stat *st, const char **why);

#endif

/* base/file.c: opening user-named files without blocking, and whole-block
 * reads and writes (base/file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* What a file that is not regular is, for a message. */
static const char *file_kind(mode_t m) {
  return S_ISDIR(m)    ? strerror(EISDIR)
         : S_ISFIFO(m) ? "it is a FIFO (named pipe), not a regular file"
         : S_ISCHR(m)  ? "it is a character device, not a regular file"
         : S_ISBLK(m)  ? "it is a block device, not a regular file"
         : S_ISSOCK(m) ? "it is a socket, not a regular file"
                       : "it is not a regular file";
}

int tfg_file_open_regular(const char *path, struct stat *st, const char **why) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = strerror(errno);
    return -1;
  }
  if (fstat(fd, st) != 0) {
    *why = strerror(errno);
    close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *why = file_kind(st->st_mode);
    close(fd);
    return -1;
  }
  /* A regular file never blocks; reads are ordinary from here. */
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

/* Largest single read() or write(): Linux moves at most ~2 GB per call. */
#define FILE_IO_CHUNK ((size_t)1 << 30)

int tfg_file_read_all(int fd, void *buf, uint64_t len) {
  char *q = buf;
  while (len > 0) {
    size_t chunk = len > FILE_IO_CHUNK ? FILE_IO_CHUNK : (size_t)len;
    ssize_t r = read(fd, q, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return -1;
    q += r;
    len -= (uint64_t)r;
  }
  return 0;
}

int tfg_file_write_all(int fd, const void *buf, uint64_t len) {
  const char *p = buf;
  while (len > 0) {
    size_t chunk = len > FILE_IO_CHUNK ? FILE_IO_CHUNK : (size_t)len;
    ssize_t w = write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO; /* no progress and no reason: do not spin */
    p += w;
    len -= (uint64_t)w;
  }
  return 0;
}

const char *tfg_path_base(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

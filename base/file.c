/* base/file.c: opening user-named files without blocking, whole-block
 * reads and writes, and writing a file whole through a synced temporary
 * (base/file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"

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

/* ---- writing a file whole --------------------------------------------------------- */

char *tfg_path_folder(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  TFG_ASSERT(dir != NULL);
  return dir;
}

char *tfg_file_out_target(const char *path, const char **why) {
  char *p = strdup(path);
  TFG_ASSERT(p != NULL);
  for (int hops = 0;; hops++) {
    struct stat st;
    if (lstat(p, &st) != 0) return p; /* nothing there yet (or unreadable: the create says why) */
    if (S_ISREG(st.st_mode)) return p;
    if (!S_ISLNK(st.st_mode)) {
      *why = file_kind(st.st_mode);
      free(p);
      return NULL;
    }
    if (hops == 40) {
      *why = strerror(ELOOP);
      free(p);
      return NULL;
    }
    /* Follow the link by hand, so that a dangling one still names the file
     * to create (realpath would fail on it). */
    char link[4096];
    ssize_t n = readlink(p, link, sizeof link - 1);
    if (n < 0 || (size_t)n >= sizeof link - 1) {
      *why = n < 0 ? strerror(errno) : strerror(ENAMETOOLONG);
      free(p);
      return NULL;
    }
    link[n] = '\0';
    char *next;
    if (link[0] == '/') {
      next = strdup(link);
    } else { /* relative to the link's own folder */
      char *dir = tfg_path_folder(p);
      size_t len = strlen(dir) + 1 + (size_t)n + 1;
      next = malloc(len);
      TFG_ASSERT(next != NULL);
      snprintf(next, len, "%s/%s", dir, link);
      free(dir);
    }
    TFG_ASSERT(next != NULL);
    free(p);
    p = next;
  }
}

int tfg_file_out_begin(tfg_file_out *o, const char *path, tfg_file_out_naming naming, const char **why) {
  static atomic_uint counter; /* threads of one process writing one path get their own temporaries */
  memset(o, 0, sizeof *o);
  o->fd = -1;
  o->target = tfg_file_out_target(path, why);
  if (!o->target) return -1;
  size_t len = strlen(o->target) + 48;
  o->tmp = malloc(len);
  TFG_ASSERT(o->tmp != NULL);
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
  switch (naming) {
  case TFG_FILE_OUT_UNIQUE:
    snprintf(o->tmp, len, "%s.tmp.%ld.%u", o->target, (long)getpid(), atomic_fetch_add(&counter, 1));
    flags |= O_EXCL;
    break;
  case TFG_FILE_OUT_PER_PID:
    snprintf(o->tmp, len, "%s.tmp.%ld", o->target, (long)getpid());
    flags |= O_TRUNC;
    break;
  }
  o->fd = open(o->tmp, flags, 0666);
  if (o->fd < 0) {
    *why = strerror(errno);
    free(o->tmp);
    free(o->target);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return -1;
  }
  return 0;
}

int tfg_file_out_write(tfg_file_out *o, const void *buf, uint64_t len) {
  if (o->err) return o->err;
  o->err = tfg_file_write_all(o->fd, buf, len);
  if (o->err) {
    o->step = "writing";
    o->failed = o->tmp;
  }
  return o->err;
}

/* Makes a rename in dir durable. Returns 0 or an errno value; EINVAL (a
 * file system that cannot sync folders) counts as done. */
static int sync_folder(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
  close(fd);
  return err;
}

int tfg_file_out_commit(tfg_file_out *o) {
  TFG_ASSERT(o->fd >= 0);
  /* Every byte on disk before the name points at it: without the fsync a
   * crash after the rename could leave an empty or torn file. */
  if (!o->err && fsync(o->fd) != 0) {
    o->err = errno;
    o->step = "syncing";
    o->failed = o->tmp;
  }
  if (close(o->fd) != 0 && !o->err) { /* NFS reports some write errors only here */
    o->err = errno;
    o->step = "closing";
    o->failed = o->tmp;
  }
  o->fd = -1;
  if (o->err) return o->err;
  /* The target may have changed since begin: rename never replaces what is
   * not a regular file (a device or FIFO put there meanwhile stays). */
  struct stat st;
  if (lstat(o->target, &st) == 0 && !S_ISREG(st.st_mode)) {
    o->err = S_ISDIR(st.st_mode) ? EISDIR : EEXIST;
    o->step = "replacing";
    o->failed = o->target;
    return o->err;
  }
  if (rename(o->tmp, o->target) != 0) {
    o->err = errno;
    o->step = "renaming";
    o->failed = o->tmp;
    return o->err;
  }
  free(o->tmp);
  o->tmp = NULL; /* renamed: nothing to remove */
  /* The rename survives a power cut only once the folder is synced: the
   * caller asked for a durable file, so a failure here is an error too. */
  char *dir = tfg_path_folder(o->target);
  int err = sync_folder(dir);
  free(dir);
  if (err) {
    o->err = err;
    o->step = "syncing the folder of";
    o->failed = o->target;
  }
  return o->err;
}

void tfg_file_out_end(tfg_file_out *o) {
  if (o->fd >= 0) close(o->fd);
  if (o->tmp) unlink(o->tmp);
  free(o->tmp);
  free(o->target);
  memset(o, 0, sizeof *o);
  o->fd = -1;
}

int tfg_file_same(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* io/reader.c: data files read through zlib, plain or .gz (io/reader.h). */
#include "io/reader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/assert.h"
#include "base/file.h"

#define READER_LINE_CHUNK 65536

/* We open the descriptor ourselves so that a missing file reports errno
 * exactly (gzopen may clobber it). Only regular files are read: a FIFO
 * would block until a writer came (the open is non-blocking so that even
 * it cannot hang), and a device like /dev/zero never ends. */
tfg_status tfg_reader_open(tfg_reader *r, tfg_diag *d, const tfg_loc *loc, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->d = d;
  r->loc = loc;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  gzFile gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
  if (!gz) {
    if (fd >= 0) { /* zlib could not allocate its state */
      close(fd);
      why = strerror(ENOMEM);
    }
    tfg_diag_error(d, loc, "cannot open '%s': %s", path, why);
    return TFG_ERR_IO;
  }
  gzbuffer(gz, 256 * 1024); /* fewer system calls than zlib's 8 KB */
  r->gz = gz;
  return TFG_OK;
}

void tfg_reader_close(tfg_reader *r) {
  if (r->gz) gzclose_r(r->gz);
  free(r->buf);
  r->gz = NULL;
  r->buf = NULL;
}

/* Reports the zlib (or system) error that stopped a read. */
static void read_error(tfg_reader *r) {
  int errnum = Z_OK;
  const char *msg = gzerror(r->gz, &errnum);
  if (errnum == Z_ERRNO) {
    msg = strerror(errno);
  } else if (errnum == Z_BUF_ERROR) {
    msg = "unexpected end of compressed data";
  } else if (msg && strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) {
    msg = strstr(msg, ": ") + 2; /* zlib prefixes "<fd:N>: " for gzdopen files */
  }
  tfg_diag_error(r->d, r->loc, "cannot read '%s': %s", r->path,
                 msg && *msg ? msg : "read error");
}

int64_t tfg_reader_read(tfg_reader *r, void *buf, size_t n) {
  gzFile gz = r->gz;
  size_t got = 0;
  while (got < n) {
    size_t want = n - got;
    unsigned chunk = want > (1u << 30) ? (1u << 30) : (unsigned)want;
    int k = gzread(gz, (char *)buf + got, chunk);
    if (k < 0) {
      read_error(r);
      return -1;
    }
    if (k == 0) {
      int errnum = Z_OK;
      gzerror(gz, &errnum);
      if (errnum != Z_OK) {
        read_error(r);
        return -1;
      }
      break;
    }
    got += (size_t)k;
  }
  return (int64_t)got;
}

int tfg_reader_getline(tfg_reader *r, tfg_strbuf *line) {
  tfg_strbuf_clear(line);
  if (!r->buf) {
    r->buf = malloc(READER_LINE_CHUNK);
    TFG_ASSERT(r->buf != NULL);
  }
  bool any = false;
  for (;;) {
    if (r->pos == r->len) {
      if (r->eof) return any ? 1 : 0;
      int64_t k = tfg_reader_read(r, r->buf, READER_LINE_CHUNK);
      if (k < 0) return -1;
      r->pos = 0;
      r->len = (size_t)k;
      if (k < READER_LINE_CHUNK) r->eof = true;
      continue;
    }
    char *start = r->buf + r->pos;
    char *nl = memchr(start, '\n', r->len - r->pos);
    size_t n = nl ? (size_t)(nl - start) : r->len - r->pos;
    if (line->len + n > TFG_READER_MAX_LINE) return -2;
    tfg_strbuf_putn(line, start, n);
    any = true;
    r->pos += n + (nl != NULL);
    if (nl) return 1;
  }
}

tfg_status tfg_reader_payload(tfg_reader *r, uint64_t n, void **out) {
  *out = NULL;
  size_t cap = n < (1u << 20) ? (size_t)n : (size_t)1 << 20;
  char *buf = malloc(cap ? cap : 1);
  if (!buf) goto oom;
  uint64_t got = 0;
  for (;;) {
    int64_t k = tfg_reader_read(r, buf + got, cap - (size_t)got);
    if (k < 0) {
      free(buf);
      return TFG_ERR_IO;
    }
    got += (uint64_t)k;
    if (got < cap || got == n) break;
    /* Full and more expected: grow (doubling, capped at n). */
    size_t ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    if (ncap > n) ncap = (size_t)n;
    char *nb = realloc(buf, ncap);
    if (!nb) {
      free(buf);
      goto oom;
    }
    buf = nb;
    cap = ncap;
  }
  if (got < n) {
    free(buf);
    tfg_diag_error(r->d, r->loc, "'%s' is truncated: expected %llu bytes of data, found %llu",
                   r->path, (unsigned long long)n, (unsigned long long)got);
    return TFG_ERR_IO;
  }
  *out = buf;
  return TFG_OK;
oom:
  tfg_diag_error(r->d, r->loc, "out of memory reading '%s' (%llu bytes)", r->path,
                 (unsigned long long)n);
  return TFG_ERR_NOMEM;
}

bool tfg_reader_numel(const int64_t *dims, int rank, size_t esz, uint64_t *numel) {
  uint64_t m = 1;
  for (int i = 0; i < rank; i++) {
    uint64_t dm = (uint64_t)dims[i];
    if (dm && m > (uint64_t)INT64_MAX / esz / dm) return false;
    m *= dm;
  }
  *numel = m;
  return true;
}

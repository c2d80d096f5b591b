/* runtime/train_log.c: the CSV log of a train (runtime/train_log.h). */
#include "runtime/train_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/strbuf.h"

struct tfg_train_log {
  char *path;
  tfg_loc at;
  char *header;
  int64_t resume;
  int fd; /* -1 until the first row */
  tfg_strbuf line;
};

tfg_train_log *tfg_train_log_new(const char *path, const tfg_loc *at, const char *header, int64_t resume) {
  tfg_train_log *l = calloc(1, sizeof *l);
  TFG_ASSERT(l != NULL);
  l->path = strdup(path);
  l->header = strdup(header);
  TFG_ASSERT(l->path && l->header);
  l->at = *at;
  l->resume = resume;
  l->fd = -1;
  return l;
}

static tfg_status write_error(tfg_train_log *l, tfg_diag *d, const char *step, const char *file, int err) {
  if (step)
    tfg_diag_error(d, &l->at, "cannot write log '%s': %s '%s': %s", l->path, step, file, strerror(err));
  else
    tfg_diag_error(d, &l->at, "cannot write log '%s': %s", l->path, strerror(err));
  return TFG_ERR_IO;
}

/* Appends to b the rows of the previous log at path up to step l->resume,
 * if its first line is l->header; nothing otherwise (no file, another
 * train's columns, not a regular file: the new log starts fresh). */
static void kept_rows(const tfg_train_log *l, tfg_strbuf *b) {
  if (l->resume <= 0) return;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(l->path, &st, &why);
  if (fd < 0) return;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, f);
  bool same = n > 0 && (size_t)n == strlen(l->header) + 1 && strncmp(line, l->header, (size_t)n - 1) == 0;
  while (same && (n = getline(&line, &cap, f)) > 0) {
    char *end;
    errno = 0;
    long long step = strtoll(line, &end, 10);
    if (errno || end == line || *end != ',' || line[n - 1] != '\n') break; /* a cut last row ends the kept part */
    if (step > l->resume) break;
    tfg_strbuf_putn(b, line, (size_t)n);
  }
  free(line);
  fclose(f);
}

/* The first row: header, kept rows and row, written whole; then the file
 * is opened for the rows that follow. */
static tfg_status log_create(tfg_train_log *l, const char *row, tfg_diag *d) {
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "%s\n", l->header);
  kept_rows(l, &b);
  tfg_strbuf_printf(&b, "%s\n", row);
  tfg_file_out o;
  const char *why = NULL;
  tfg_status st = TFG_OK;
  if (tfg_file_out_begin(&o, l->path, TFG_FILE_OUT_UNIQUE, &why) != 0) {
    tfg_diag_error(d, &l->at, "cannot write log '%s': %s", l->path, why);
    st = TFG_ERR_IO;
  } else {
    tfg_file_out_write(&o, b.data, b.len);
    if (tfg_file_out_commit(&o) != 0) st = write_error(l, d, o.step, o.failed, o.err);
    /* O_NOFOLLOW on the target itself (the symlinks were followed to it):
     * what was just renamed there, not something swapped in since. */
    if (st == TFG_OK && (l->fd = open(o.target, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)) < 0)
      st = write_error(l, d, "opening", o.target, errno);
    tfg_file_out_end(&o);
  }
  tfg_strbuf_free(&b);
  return st;
}

tfg_status tfg_train_log_row(tfg_train_log *l, const char *row, tfg_diag *d) {
  if (l->fd < 0) return log_create(l, row, d);
  tfg_strbuf_clear(&l->line);
  tfg_strbuf_printf(&l->line, "%s\n", row);
  int err = tfg_file_write_all(l->fd, l->line.data, l->line.len); /* one write: readers see whole rows */
  return err ? write_error(l, d, NULL, NULL, err) : TFG_OK;
}

tfg_status tfg_train_log_close(tfg_train_log *l, tfg_diag *d) {
  if (!l) return TFG_OK;
  tfg_status st = TFG_OK;
  if (l->fd >= 0) {
    /* EINVAL: a file system that cannot sync; NFS reports some write errors
     * only at close. */
    if (fsync(l->fd) != 0 && errno != EINVAL) st = write_error(l, d, NULL, NULL, errno);
    if (close(l->fd) != 0 && st == TFG_OK) st = write_error(l, d, NULL, NULL, errno);
  }
  tfg_strbuf_free(&l->line);
  free(l->path);
  free(l->header);
  free(l);
  return st;
}

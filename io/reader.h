/* io/reader.h: reading a data file (csv, npy, idx; plain or .gz) whose
 * every error is reported once, at the data statement, naming the file.
 *
 *   tfg_reader r;
 *   if (tfg_reader_open(&r, d, loc, "train-images-idx3-ubyte.gz") != TFG_OK) return TFG_ERR_IO;
 *   unsigned char magic[4];
 *   int64_t got = tfg_reader_read(&r, magic, 4);   // -1: error reported
 *   void *data;
 *   tfg_status st = tfg_reader_payload(&r, nbytes, &data); // exactly nbytes, or an error
 *   tfg_reader_close(&r);
 *
 * Every file goes through zlib (gzdopen/gzread), which passes plain files
 * through untouched, so "x.csv", "x.csv.gz", "x.npy.gz" and
 * "train-images-idx3-ubyte.gz" all read the same way. Only regular files
 * are read (base/file.h): a FIFO, a device or a directory is refused by
 * name, and opening never blocks. Memory grows with the data actually
 * read, never with what a header claims: an npy or idx header announcing
 * terabytes costs nothing unless the bytes are there. */
#ifndef TFG_READER_H
#define TFG_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "base/strbuf.h"

/* Longest text line accepted (~50 million csv columns): past it the file
 * is surely not text (or is /dev/zero), and we stop before memory runs
 * out. */
#define TFG_READER_MAX_LINE (256u * 1024u * 1024u)

/* An open input file; errors are reported at loc naming path. The fields
 * are the reader's own. */
struct gzFile_s; /* zlib's gzFile, without zlib.h */

typedef struct tfg_reader {
  struct gzFile_s *gz;
  const char *path;
  tfg_diag *d;
  const tfg_loc *loc;
  /* Line reading (tfg_reader_getline) only: */
  char *buf;
  size_t pos, len;
  bool eof;
} tfg_reader;

/* Opens path for reading: TFG_OK, or TFG_ERR_IO after "cannot open
 * 'PATH': WHY" (a missing file reports errno exactly). path and loc must
 * outlive the reader. */
tfg_status tfg_reader_open(tfg_reader *r, tfg_diag *d, const tfg_loc *loc, const char *path);
/* Closes r; safe on a reader whose open failed. */
void tfg_reader_close(tfg_reader *r);

/* Reads up to n bytes into buf: returns how many (fewer only at the end
 * of the file), or -1 after reporting an error (including a truncated or
 * corrupt .gz). */
int64_t tfg_reader_read(tfg_reader *r, void *buf, size_t n);

/* Reads the next line, without its '\n', into line (cleared first).
 * Returns 1 for a line, 0 at the end of the file, -1 after a reported
 * error, -2 for a line longer than TFG_READER_MAX_LINE (not reported: the
 * caller knows the line number). A last line without '\n' still counts.
 * Do not mix with tfg_reader_read. */
int tfg_reader_getline(tfg_reader *r, tfg_strbuf *line);

/* Reads exactly n bytes of array data into a new block (*out, the caller
 * frees). The block grows as bytes arrive instead of being sized from the
 * header, so a lying header cannot make us allocate what the file does
 * not hold. TFG_OK; TFG_ERR_IO for a read error or a file with fewer than
 * n bytes left ("'PATH' is truncated: ..."); TFG_ERR_NOMEM. */
tfg_status tfg_reader_payload(tfg_reader *r, uint64_t n, void **out);

/* The element count of the rank dimensions dims of a file's header, into
 * *numel: false when numel x esz would pass INT64_MAX (the header is
 * untrusted; the caller reports it in its format's words). Once a
 * dimension is 0 the count stays 0, so later dimensions cannot overflow. */
bool tfg_reader_numel(const int64_t *dims, int rank, size_t esz, uint64_t *numel);

#endif

/* io/idx.c: the IDX reader (io/idx.h). */
#include "io/idx.h"

#include <stddef.h>

#include "base/assert.h"
#include "io/reader.h"

tfg_status tfg_idx_read(tfg_diag *d, const tfg_loc *loc, const char *path, int want_dims,
                        const char *kind, int64_t *dims, void **data) {
  TFG_ASSERT(d && path && kind && dims && data && want_dims >= 1 && want_dims <= 3);
  *data = NULL;
  tfg_reader f;
  tfg_status st = tfg_reader_open(&f, d, loc, path);
  if (st != TFG_OK) return st;
  unsigned char hdr[16];
  size_t hlen = 4 + 4 * (size_t)want_dims;
  uint32_t want = 0x800u | (uint32_t)want_dims;
  int64_t r = tfg_reader_read(&f, hdr, 4);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  uint32_t magic = r < 4 ? 0 : (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                                   (uint32_t)hdr[2] << 8 | hdr[3];
  if (r < 4 || hdr[0] != 0 || hdr[1] != 0) {
    tfg_diag_error(d, loc, "'%s' is not an IDX file (bad magic number)", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (hdr[2] != 0x08) {
    tfg_diag_error(d, loc, "'%s': IDX element type 0x%02x is not supported (only unsigned bytes, "
                   "0x08)", path, hdr[2]);
    st = TFG_ERR_IO;
    goto done;
  }
  if (magic != want) {
    tfg_diag_error(d, loc, "'%s' is not an IDX %s file: magic 0x%08x, expected 0x%08x (%d "
                   "dimension%s)", path, kind, magic, want, want_dims, want_dims == 1 ? "" : "s");
    st = TFG_ERR_IO;
    goto done;
  }
  r = tfg_reader_read(&f, hdr + 4, hlen - 4);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  if ((size_t)r < hlen - 4) {
    tfg_diag_error(d, loc, "'%s' is truncated inside its IDX header", path);
    st = TFG_ERR_IO;
    goto done;
  }
  for (int i = 0; i < want_dims; i++) {
    const unsigned char *p = hdr + 4 + 4 * i;
    dims[i] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
  }
  uint64_t numel;
  if (!tfg_reader_numel(dims, want_dims, 1, &numel)) {
    tfg_diag_error(d, loc, "'%s': the dimensions in the IDX header are too large", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (dims[0] == 0) {
    tfg_diag_error(d, loc, "'%s' has no rows (its count is 0)", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (numel > SIZE_MAX) {
    tfg_diag_error(d, loc, "out of memory reading '%s'", path);
    st = TFG_ERR_NOMEM;
    goto done;
  }
  st = tfg_reader_payload(&f, numel, data);
done:
  tfg_reader_close(&f);
  return st;
}

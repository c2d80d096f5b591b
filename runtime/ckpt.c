/* runtime/ckpt.c: checkpoints in the safetensors format: an atomic writer
 * and a strict, bounded reader (runtime/ckpt.h).
 *
 * The format (huggingface/safetensors): an 8-byte little-endian length N,
 * N bytes of UTF-8 JSON holding one object, then the byte buffer; each
 * tensor's data_offsets [BEGIN, END) count from the buffer's first byte.
 *
 * Writing. Where the format leaves a choice we make the reference
 * writer's (safetensors/src/tensor.rs, serde_json), so our files are
 * byte-identical to its for the same tensors in the same order:
 *   - compact JSON, no spaces; "__metadata__" comes first, and only when
 *     there is metadata (nmeta > 0), its members in the caller's order;
 *   - then the tensors in the caller's order, each as
 *     {"dtype":"F32","shape":[2,3],"data_offsets":[BEGIN,END]}, their data
 *     back to back (the format allows no gaps);
 *   - strings escaped as serde_json does (base/json.h, the writer every
 *     JSON of tfg shares): \" \\ \b \f \n \r \t, other bytes below
 *     0x20 as \u00xx (lower-case hex), everything else raw UTF-8;
 *   - the JSON padded with spaces to a multiple of 8 bytes, so the buffer
 *     starts 8-aligned in the file.
 * The reference sorts tensors by alignment, then name; we keep the
 * caller's order (it is the program's order), so a tensor after an
 * odd-sized f16 may sit at an odd offset. The reader copies every tensor
 * into its own block, so loaded data is always aligned.
 *
 * Saving is atomic (write a temporary file beside the target, fsync,
 * rename, fsync the folder): a crash or kill -9 leaves the old file or the
 * new one. What it can leave is the temporary "<path>.tmp.<pid>" of the
 * killed process: the next save of the same path removes it once no live
 * process has that pid (remove_stale_temps). A writer in another pid
 * namespace (a container sharing the folder) looks dead to us, so two
 * containers must not save the same checkpoint.
 *
 * Reading is strict: a checkpoint restores a run, so anything we do not
 * understand exactly is refused rather than guessed at.
 *   - N is at most 100 MB (the reference's limit) and must lie within the
 *     file. The file is read with read() (no mmap: a file truncated under
 *     us is an error, not a SIGBUS), each tensor into its own block.
 *   - The JSON is parsed straight into the schema: the top level is one
 *     object whose members are "__metadata__" (an object of strings) or
 *     tensors (objects with exactly dtype, shape and data_offsets, in any
 *     order; the reference would ignore other fields, but no writer makes
 *     them and a typo like "data_offset" should not pass silently). The
 *     header's order of tensors need not be their order in the data. Any
 *     JSON whitespace may separate tokens and follow the object (writers
 *     pad with spaces). Strings must be valid UTF-8; escapes include
 *     \uXXXX with surrogate pairs; \u0000 is refused (names are C
 *     strings). Numbers must be non-negative integers below 2^63, with no
 *     fraction or exponent; true, false and null fit nowhere. Since the
 *     parser follows the schema it never nests deeper than three levels
 *     (header, tensor, shape): a deeper value is a schema error at the
 *     third, so no input can make it recurse or allocate per JSON token;
 *     memory grows with the tensors it records.
 *   - A key twice (a tensor, "__metadata__", a metadata key, a field of a
 *     tensor) is an error.
 *   - Every tensor has END >= BEGIN and END - BEGIN = numel x dtype size,
 *     and the tensors sorted by offset tile the buffer exactly: no
 *     overlap, no hole, nothing after the last one (the reference refuses
 *     holes and trailing bytes too: unindexed bytes would let one file be
 *     two things at once).
 * Every failure records exactly one error naming the file, and the tensor
 * or key when there is one; header errors also give the byte offset in
 * the file. Names read from a file are shown with control and invisible
 * characters escaped, so a hostile name cannot garble the terminal.
 * Statuses: TFG_ERR_IO for a file that cannot be opened, read or written,
 * TFG_ERR_DATA for a malformed one, TFG_ERR_NOMEM when the tensors do not
 * fit in host memory. */
#include "runtime/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "base/utf8.h"

/* The reference reader's limit on N: a larger header is surely not a
 * checkpoint, and we refuse it before allocating anything. */
#define CKPT_MAX_HEADER 100000000u
/* Code points of a name shown in a message before it is cut with "...". */
#define CKPT_SHOW_MAX 64
/* Largest single read() or write(): Linux moves at most ~2 GB per call. */
#define CKPT_IO_CHUNK ((size_t)1 << 30)

static const char *const dtype_names[TFG_DTYPE_COUNT] = {
    [TFG_DTYPE_F32] = "F32", [TFG_DTYPE_F64] = "F64", [TFG_DTYPE_F16] = "F16",
    [TFG_DTYPE_BF16] = "BF16", [TFG_DTYPE_I32] = "I32", [TFG_DTYPE_I64] = "I64",
    [TFG_DTYPE_BOOL] = "BOOL",
};

const char *tfg_ckpt_dtype_name(tfg_dtype t) {
  TFG_ASSERT((unsigned)t < TFG_DTYPE_COUNT);
  return dtype_names[t];
}

struct tfg_ckpt {
  tfg_ckpt_entry *e; /* header order; names and data are owned */
  int n, cap;
  int *by_name;        /* indices of e sorted by name: find is a binary search */
  tfg_ckpt_meta *meta; /* header order; keys and values are owned */
  int nmeta, metacap;
  int *meta_by_key; /* indices of meta sorted by key */
};

/* ---- shared helpers ----------------------------------------------------- */

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    if (len == 0) return false;
    i += (size_t)len;
  }
  return true;
}

/* numel x element size of a shape, or -1 when it does not fit in int64
 * (a malformed file; in memory no tensor is that big). A zero dimension
 * makes it 0 whatever the others are. */
static int64_t shape_bytes(tfg_dtype t, const tfg_shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->dim[i] == 0) return 0;
  int64_t n = (int64_t)tfg_dtype_size(t);
  for (int i = 0; i < s->rank; i++) {
    if (s->dim[i] < 0 || n > INT64_MAX / s->dim[i]) return -1;
    n *= s->dim[i];
  }
  return n;
}

/* A name from a file as messages show it: at most CKPT_SHOW_MAX code
 * points, controls and invisible characters (tfg_utf8_is_unsafe) written
 * as \uXXXX. The caller frees it. */
static char *shown(const char *s) {
  tfg_strbuf b = {0};
  tfg_strbuf_putn(&b, "", 0);
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  int count = 0;
  for (size_t i = 0; i < n; count++) {
    if (count == CKPT_SHOW_MAX) {
      tfg_strbuf_puts(&b, "...");
      break;
    }
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    if (len == 0) {
      tfg_strbuf_printf(&b, "\\x%02x", p[i]);
      i++;
    } else {
      if (tfg_utf8_is_unsafe(cp))
        tfg_strbuf_printf(&b, "\\u%04x", (unsigned)cp);
      else
        tfg_strbuf_putn(&b, s + i, (size_t)len);
      i += (size_t)len;
    }
  }
  return tfg_strbuf_take(&b);
}

/* ---- writing ------------------------------------------------------------ */

/* Asserts the caller's side of tfg_ckpt_save's contract: strings present
 * and valid UTF-8 (the header is UTF-8 JSON), tensor names unique and not
 * "__metadata__", metadata keys unique, dtypes and shapes valid, data
 * present for every non-empty tensor. Breaking it is a bug in tfg, and a
 * file written anyway would be one no reader accepts. */
static void check_save_args(const tfg_ckpt_entry *e, int n, const tfg_ckpt_meta *meta,
                            int nmeta) {
  TFG_ASSERT(n >= 0 && nmeta >= 0 && (n == 0 || e) && (nmeta == 0 || meta));
  int most = n > nmeta ? n : nmeta;
  const char **v = malloc(sizeof *v * (size_t)(most ? most : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < n; i++) {
    TFG_ASSERT(e[i].name != NULL && utf8_valid(e[i].name));
    TFG_ASSERT(strcmp(e[i].name, "__metadata__") != 0);
    TFG_ASSERT((unsigned)e[i].dtype < TFG_DTYPE_COUNT);
    TFG_ASSERT(e[i].shape.rank >= 0 && e[i].shape.rank <= TFG_MAX_RANK);
    int64_t bytes = shape_bytes(e[i].dtype, &e[i].shape);
    TFG_ASSERT(bytes >= 0);
    TFG_ASSERT(bytes == 0 || e[i].data != NULL);
    v[i] = e[i].name;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
  for (int i = 1; i < n; i++) TFG_ASSERT(strcmp(v[i - 1], v[i]) != 0); /* names are unique */
  for (int i = 0; i < nmeta; i++) {
    TFG_ASSERT(meta[i].key != NULL && utf8_valid(meta[i].key));
    TFG_ASSERT(meta[i].value != NULL && utf8_valid(meta[i].value));
    v[i] = meta[i].key;
  }
  qsort(v, (size_t)nmeta, sizeof *v, cmp_str_ptr);
  for (int i = 1; i < nmeta; i++) TFG_ASSERT(strcmp(v[i - 1], v[i]) != 0); /* keys are unique */
  free(v);
}

/* Builds the 8-byte length and the padded JSON header into b. */
static void build_header(tfg_strbuf *b, const tfg_ckpt_entry *e, int n,
                             const tfg_ckpt_meta *meta, int nmeta) {
  tfg_strbuf_putn(b, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
  tfg_strbuf_putc(b, '{');
  if (nmeta > 0) {
    tfg_strbuf_puts(b, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) tfg_strbuf_putc(b, ',');
      tfg_json_put_string(b, meta[i].key);
      tfg_strbuf_putc(b, ':');
      tfg_json_put_string(b, meta[i].value);
    }
    tfg_strbuf_putc(b, '}');
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (i || nmeta > 0) tfg_strbuf_putc(b, ',');
    tfg_json_put_string(b, e[i].name);
    tfg_strbuf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[e[i].dtype]);
    for (int k = 0; k < e[i].shape.rank; k++)
      tfg_strbuf_printf(b, "%s%lld", k ? "," : "", (long long)e[i].shape.dim[k]);
    uint64_t bytes = (uint64_t)shape_bytes(e[i].dtype, &e[i].shape);
    TFG_ASSERT(off + bytes >= off);
    tfg_strbuf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + bytes));
    off += bytes;
  }
  tfg_strbuf_putc(b, '}');
  while ((b->len - 8) % 8) tfg_strbuf_putc(b, ' ');
  uint64_t len = b->len - 8;
  for (int i = 0; i < 8; i++) b->data[i] = (char)(unsigned char)(len >> (8 * i));
}

/* Writes all len bytes, retrying short writes and EINTR. Returns 0 or an
 * errno value. */
static int write_all(int fd, const void *buf, uint64_t len) {
  const char *p = buf;
  while (len > 0) {
    size_t chunk = len > CKPT_IO_CHUNK ? CKPT_IO_CHUNK : (size_t)len;
    ssize_t w = write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO; /* no progress and no reason: do not spin */
    p += w;
    len -= (uint64_t)w;
  }
  return 0;
}

/* The folder holding path, for the fsync that makes the rename durable:
 * "out/m.st" -> "out", "m.st" -> ".", "/m.st" -> "/". The caller frees. */
static char *folder_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                   : strndup(path, (size_t)(slash - path));
  TFG_ASSERT(dir != NULL);
  return dir;
}

/* Makes the rename of a file in dir durable. Returns 0 or an errno value;
 * EINVAL (a file system that cannot sync folders) counts as done. */
static int sync_folder(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
  close(fd);
  return err;
}

static tfg_status save_error(tfg_diag *d, const tfg_loc *loc, const char *path, const char *step,
                             const char *file, int err) {
  tfg_diag_error(d, loc, "cannot save checkpoint '%s': %s '%s': %s", path, step, file,
                 strerror(err));
  return TFG_ERR_IO;
}

/* Writes the header and the tensors to fd (open on tmp), syncs and
 * closes it, then renames tmp over path. On any failure tmp is removed
 * and one error is recorded: the target is untouched until the rename,
 * which replaces it in one step. */
static tfg_status write_and_rename(tfg_diag *d, const tfg_loc *loc, const char *path,
                                  const char *tmp, int fd, const tfg_strbuf *hdr,
                                  const tfg_ckpt_entry *e, int n) {
  const char *step = "writing";
  int err = write_all(fd, hdr->data, hdr->len);
  for (int i = 0; i < n && !err; i++)
    err = write_all(fd, e[i].data, (uint64_t)shape_bytes(e[i].dtype, &e[i].shape));
  /* Every byte must be on disk before the name points at it: without the
   * fsync a crash after the rename could leave an empty or torn file. */
  if (!err && fsync(fd) != 0) {
    err = errno;
    step = "syncing";
  }
  if (close(fd) != 0 && !err) { /* NFS reports some write errors only here */
    err = errno;
    step = "closing";
  }
  if (!err && rename(tmp, path) != 0) {
    err = errno;
    step = "renaming";
  }
  if (!err) return TFG_OK;
  unlink(tmp);
  return save_error(d, loc, path, step, tmp, err);
}

/* Removes the temporaries "<path>.tmp.<pid>" that writers killed mid-save
 * (kill -9, a crash) left beside path: those whose pid names no live
 * process (kill(pid, 0) fails with ESRCH). A live pid is another writer
 * saving path right now, or a process that took a dead writer's pid:
 * its file is left alone either way, as is our own (reused below). Best
 * effort: what cannot be listed or removed stays, and the save goes on. */
static void remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t blen = strlen(base);
  char *dir = folder_of(path);
  DIR *dp = opendir(dir);
  free(dir);
  if (!dp) return;
  for (struct dirent *de; (de = readdir(dp)) != NULL;) {
    const char *name = de->d_name;
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) continue;
    const char *digits = name + blen + 5;
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 9 || digits[nd] != '\0' || digits[0] == '0') continue; /* not our pattern */
    pid_t pid = (pid_t)strtol(digits, NULL, 10);
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(dp), name, 0);
  }
  closedir(dp);
}

tfg_status tfg_ckpt_save(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt_entry *e,
                         int n, const tfg_ckpt_meta *meta, int nmeta) {
  TFG_ASSERT(path != NULL);
  check_save_args(e, n, meta, nmeta);
  remove_stale_temps(path);
  tfg_strbuf hdr = {0};
  build_header(&hdr, e, n, meta, nmeta);

  /* In the target's folder: rename is atomic only within a file system.
   * The pid keeps processes saving the same path apart (threads of one
   * process must not save the same path at once); O_TRUNC reuses what a
   * killed process of the same pid left; O_NOFOLLOW refuses a symlink
   * planted under the temporary's name. */
  tfg_strbuf tmpb = {0};
  tfg_strbuf_printf(&tmpb, "%s.tmp.%ld", path, (long)getpid());
  char *tmp = tfg_strbuf_take(&tmpb);
  tfg_status st;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0)
    st = save_error(d, loc, path, "creating", tmp, errno);
  else
    st = write_and_rename(d, loc, path, tmp, fd, &hdr, e, n);
  if (st == TFG_OK) {
    /* The rename itself survives a power cut only once the folder is
     * synced. If that fails the new file is in place but not durable:
     * still an error, the caller asked for a durable checkpoint. */
    char *dir = folder_of(path);
    int err = sync_folder(dir);
    if (err) st = save_error(d, loc, path, "syncing its folder", dir, err);
    free(dir);
  }
  free(tmp);
  tfg_strbuf_free(&hdr);
  return st;
}

/* ---- the header parser -------------------------------------------------- */

typedef struct ckpt_span {
  int64_t begin, end;
  size_t key_at; /* header offset of the tensor's key, for messages */
} ckpt_span;

typedef struct hdr_parser {
  tfg_diag *d;
  const tfg_loc *loc;
  const char *path;
  const unsigned char *s; /* the header, s[len] == '\0' */
  size_t len, pos;
  tfg_strbuf str; /* the string just read, unescaped */
  tfg_strbuf ctx; /* "tensor 'x': " while inside a tensor, else empty */
  tfg_ckpt *c;
  ckpt_span *span; /* parallel to c->e */
  size_t *meta_at; /* parallel to c->meta: header offsets of the keys */
} hdr_parser;

/* Records the header's one error: the file, the byte offset in the file
 * (the header starts at byte 8), the tensor being read, and what is
 * wrong. Always returns false, for `return bad(...)`. */
static bool bad(hdr_parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(hdr_parser *p, size_t at, const char *fmt, ...) {
  tfg_strbuf m = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&m, fmt, ap);
  va_end(ap);
  tfg_diag_error(p->d, p->loc, "'%s': malformed safetensors header at byte %zu: %s%s", p->path,
                 at + 8, p->ctx.data ? p->ctx.data : "", m.data);
  tfg_strbuf_free(&m);
  return false;
}

static bool at_literal(const hdr_parser *p, const char *lit) {
  size_t n = strlen(lit);
  return p->len - p->pos >= n && memcmp(p->s + p->pos, lit, n) == 0;
}

/* What the text at pos is, for "expected X, found Y"; buf holds 16. */
static const char *found(const hdr_parser *p, char *buf) {
  if (p->pos >= p->len) return "the end of the header";
  unsigned char c = p->s[p->pos];
  switch (c) {
  case '{': return "an object";
  case '[': return "an array";
  case '"': return "a string";
  default: break;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return "a number";
  if (at_literal(p, "true") || at_literal(p, "false")) return "a boolean";
  if (at_literal(p, "null")) return "null";
  if (c > 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", c);
  else
    snprintf(buf, 16, "byte 0x%02x", c);
  return buf;
}
#define FOUND(p) found((p), (char[16]){0})

static void skip_ws(hdr_parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static bool hex4(hdr_parser *p, uint32_t *v) {
  if (p->len - p->pos < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char c = p->s[p->pos + (size_t)i];
    int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (x < 0) return false;
    *v = *v << 4 | (uint32_t)x;
  }
  p->pos += 4;
  return true;
}

static void put_utf8(tfg_strbuf *b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
  }
  tfg_strbuf_putn(b, u, n);
}

/* One \-escape at pos (the backslash), appended to p->str unescaped. */
static bool parse_escape(hdr_parser *p, size_t start) {
  size_t at = p->pos;
  if (p->len - p->pos < 2) return bad(p, start, "unterminated string");
  unsigned char e = p->s[p->pos + 1];
  p->pos += 2;
  switch (e) {
  case '"': case '\\': case '/': tfg_strbuf_putc(&p->str, (char)e); return true;
  case 'b': tfg_strbuf_putc(&p->str, '\b'); return true;
  case 'f': tfg_strbuf_putc(&p->str, '\f'); return true;
  case 'n': tfg_strbuf_putc(&p->str, '\n'); return true;
  case 'r': tfg_strbuf_putc(&p->str, '\r'); return true;
  case 't': tfg_strbuf_putc(&p->str, '\t'); return true;
  case 'u': break;
  default:
    if (e > 0x20 && e < 0x7f) return bad(p, at, "invalid escape '\\%c' in a string", e);
    return bad(p, at, "invalid escape (backslash, byte 0x%02x) in a string", e);
  }
  uint32_t cp, lo;
  if (!hex4(p, &cp)) return bad(p, at, "\\u must be followed by four hex digits");
  if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
    if (!at_literal(p, "\\u"))
      return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
    p->pos += 2;
    if (!hex4(p, &lo)) return bad(p, p->pos - 2, "\\u must be followed by four hex digits");
    if (lo < 0xDC00 || lo > 0xDFFF)
      return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
  }
  if (cp == 0) return bad(p, at, "\\u0000 is not supported in names and metadata");
  put_utf8(&p->str, cp);
  return true;
}

/* A JSON string at pos (the opening quote) into p->str, unescaped. */
static bool parse_string(hdr_parser *p) {
  size_t start = p->pos++;
  tfg_strbuf_clear(&p->str);
  tfg_strbuf_putn(&p->str, "", 0); /* p->str.data is a string even for "" */
  for (;;) {
    size_t run = p->pos; /* copy plain ASCII in one go */
    while (p->pos < p->len && p->s[p->pos] >= 0x20 && p->s[p->pos] < 0x80 &&
           p->s[p->pos] != '"' && p->s[p->pos] != '\\')
      p->pos++;
    tfg_strbuf_putn(&p->str, (const char *)p->s + run, p->pos - run);
    if (p->pos >= p->len) return bad(p, start, "unterminated string");
    unsigned char c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      return true;
    }
    if (c == '\\') {
      if (!parse_escape(p, start)) return false;
    } else if (c < 0x20) {
      return bad(p, p->pos, "control character 0x%02x in a string (JSON needs it escaped)", c);
    } else {
      uint32_t cp;
      int n = tfg_utf8_decode(p->s + p->pos, p->len - p->pos, &cp);
      if (n == 0) return bad(p, p->pos, "invalid UTF-8 (byte 0x%02x) in a string", c);
      tfg_strbuf_putn(&p->str, (const char *)p->s + p->pos, (size_t)n);
      p->pos += (size_t)n;
    }
  }
}

/* A non-negative integer below 2^63 (what names it in messages). */
static bool parse_uint(hdr_parser *p, const char *what, int64_t *v) {
  skip_ws(p);
  size_t at = p->pos;
  if (at < p->len && p->s[at] == '-' && at + 1 < p->len && p->s[at + 1] >= '0' &&
      p->s[at + 1] <= '9')
    return bad(p, at, "%s must not be negative", what);
  if (at >= p->len || p->s[at] < '0' || p->s[at] > '9')
    return bad(p, at, "expected %s (an integer), found %s", what, FOUND(p));
  if (p->s[at] == '0' && at + 1 < p->len && p->s[at + 1] >= '0' && p->s[at + 1] <= '9')
    return bad(p, at, "a number with a leading zero is not JSON");
  int64_t x = 0;
  while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
    int digit = p->s[p->pos] - '0';
    if (x > (INT64_MAX - digit) / 10) return bad(p, at, "%s is too large", what);
    x = x * 10 + digit;
    p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
    return bad(p, at, "%s must be an integer, without a fraction or an exponent", what);
  *v = x;
  return true;
}

/* The next key of an object whose '{' (first) or previous member was just
 * read. Returns 1 with the key in p->str and the ':' consumed, 0 at the
 * closing '}', -1 after an error. *key_at is the key's offset. */
static int next_key(hdr_parser *p, bool first, size_t *key_at) {
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}' && first) {
    p->pos++;
    return 0;
  }
  if (!first) {
    if (p->pos < p->len && p->s[p->pos] == '}') {
      p->pos++;
      return 0;
    }
    if (p->pos >= p->len || p->s[p->pos] != ',') {
      bad(p, p->pos, "expected ',' or '}' after a member, found %s", FOUND(p));
      return -1;
    }
    p->pos++;
    skip_ws(p);
  }
  if (p->pos >= p->len || p->s[p->pos] != '"') {
    bad(p, p->pos, "expected a key (a string)%s, found %s", first ? " or '}'" : "", FOUND(p));
    return -1;
  }
  *key_at = p->pos;
  if (!parse_string(p)) return -1;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ':') {
    bad(p, p->pos, "expected ':' after a key, found %s", FOUND(p));
    return -1;
  }
  p->pos++;
  skip_ws(p);
  return 1;
}

static char *xstrdup(const char *s) {
  char *t = strdup(s);
  TFG_ASSERT(t != NULL);
  return t;
}

/* "__metadata__": an object of strings. */
static bool parse_meta(hdr_parser *p) {
  tfg_ckpt *c = p->c;
  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "__metadata__ must be an object of strings, found %s", FOUND(p));
  p->pos++;
  size_t key_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &key_at);
    if (k <= 0) return k == 0;
    char *key = xstrdup(p->str.data);
    if (p->pos >= p->len || p->s[p->pos] != '"') {
      char *k_shown = shown(key);
      bad(p, p->pos, "the value of metadata key '%s' must be a string, found %s", k_shown,
          FOUND(p));
      free(k_shown);
      free(key);
      return false;
    }
    if (!parse_string(p)) {
      free(key);
      return false;
    }
    if (c->nmeta == c->metacap) {
      TFG_ASSERT(c->metacap < INT_MAX / 2);
      c->metacap = c->metacap ? 2 * c->metacap : 8;
      c->meta = realloc(c->meta, sizeof *c->meta * (size_t)c->metacap);
      p->meta_at = realloc(p->meta_at, sizeof *p->meta_at * (size_t)c->metacap);
      TFG_ASSERT(c->meta && p->meta_at);
    }
    p->meta_at[c->nmeta] = key_at;
    c->meta[c->nmeta++] = (tfg_ckpt_meta){key, xstrdup(p->str.data)};
  }
}

enum { FIELD_DTYPE, FIELD_SHAPE, FIELD_OFFSETS, FIELD_COUNT };
static const char *const field_names[FIELD_COUNT] = {"dtype", "shape", "data_offsets"};

static bool parse_dtype(hdr_parser *p, tfg_ckpt_entry *t) {
  if (p->pos >= p->len || p->s[p->pos] != '"')
    return bad(p, p->pos, "dtype must be a string, found %s", FOUND(p));
  size_t at = p->pos;
  if (!parse_string(p)) return false;
  for (int i = 0; i < TFG_DTYPE_COUNT; i++) {
    if (strcmp(p->str.data, dtype_names[i]) == 0) {
      t->dtype = (tfg_dtype)i;
      return true;
    }
  }
  char *s = shown(p->str.data);
  bad(p, at, "dtype '%s' is not supported (tfg reads F32, F64, F16, BF16, I32, I64 and BOOL)", s);
  free(s);
  return false;
}

static bool parse_shape(hdr_parser *p, tfg_ckpt_entry *t) {
  if (p->pos >= p->len || p->s[p->pos] != '[')
    return bad(p, p->pos, "shape must be an array of integers, found %s", FOUND(p));
  p->pos++;
  skip_ws(p);
  t->shape.rank = 0;
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
    return true;
  }
  for (;;) {
    if (t->shape.rank == TFG_MAX_RANK)
      return bad(p, p->pos, "shape has more than %d dimensions, tfg's limit", TFG_MAX_RANK);
    if (!parse_uint(p, "a shape dimension", &t->shape.dim[t->shape.rank])) return false;
    t->shape.rank++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
      p->pos++;
      return true;
    }
    if (p->pos >= p->len || p->s[p->pos] != ',')
      return bad(p, p->pos, "expected ',' or ']' in shape, found %s", FOUND(p));
    p->pos++;
  }
}

static bool parse_offsets(hdr_parser *p, ckpt_span *sp) {
  if (p->pos >= p->len || p->s[p->pos] != '[')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END], found %s", FOUND(p));
  p->pos++;
  if (!parse_uint(p, "the begin offset", &sp->begin)) return false;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ',')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END]: expected ',', found %s", FOUND(p));
  p->pos++;
  if (!parse_uint(p, "the end offset", &sp->end)) return false;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ']')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END]: expected ']', found %s", FOUND(p));
  p->pos++;
  return true;
}

/* A tensor whose key (in p->str) starts at key_at: appends it to c with
 * its span. */
static bool parse_tensor(hdr_parser *p, size_t key_at) {
  tfg_ckpt *c = p->c;
  if (c->n == c->cap) {
    TFG_ASSERT(c->cap < INT_MAX / 2);
    c->cap = c->cap ? 2 * c->cap : 16;
    c->e = realloc(c->e, sizeof *c->e * (size_t)c->cap);
    p->span = realloc(p->span, sizeof *p->span * (size_t)c->cap);
    TFG_ASSERT(c->e && p->span);
  }
  /* Appended first, so that c owns the name on every path. */
  tfg_ckpt_entry *t = &c->e[c->n];
  ckpt_span *sp = &p->span[c->n];
  c->n++;
  memset(t, 0, sizeof *t);
  t->name = xstrdup(p->str.data);
  sp->begin = sp->end = 0;
  sp->key_at = key_at;
  char *name = shown(t->name);
  tfg_strbuf_printf(&p->ctx, "tensor '%s': ", name);
  free(name);

  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "expected an object with dtype, shape and data_offsets, found %s",
               FOUND(p));
  p->pos++;
  bool have[FIELD_COUNT] = {false};
  size_t field_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &field_at);
    if (k < 0) return false;
    if (k == 0) break;
    int f = 0;
    while (f < FIELD_COUNT && strcmp(p->str.data, field_names[f]) != 0) f++;
    if (f == FIELD_COUNT) {
      char *s = shown(p->str.data);
      bad(p, field_at, "unknown field '%s' (a tensor has dtype, shape and data_offsets)", s);
      free(s);
      return false;
    }
    if (have[f]) return bad(p, field_at, "field '%s' appears twice", field_names[f]);
    have[f] = true;
    bool ok = f == FIELD_DTYPE ? parse_dtype(p, t)
            : f == FIELD_SHAPE ? parse_shape(p, t)
                               : parse_offsets(p, sp);
    if (!ok) return false;
  }
  for (int f = 0; f < FIELD_COUNT; f++)
    if (!have[f]) return bad(p, key_at, "missing field '%s'", field_names[f]);
  tfg_strbuf_clear(&p->ctx);
  return true;
}

static bool parse_header(hdr_parser *p) {
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "expected '{' (the header is one JSON object), found %s", FOUND(p));
  p->pos++;
  bool seen_meta = false;
  size_t key_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &key_at);
    if (k < 0) return false;
    if (k == 0) break;
    if (strcmp(p->str.data, "__metadata__") == 0) {
      if (seen_meta) return bad(p, key_at, "'__metadata__' appears twice");
      seen_meta = true;
      if (!parse_meta(p)) return false;
    } else if (!parse_tensor(p, key_at)) {
      return false;
    }
  }
  skip_ws(p);
  if (p->pos < p->len)
    return bad(p, p->pos, "expected only whitespace after the header object, found %s",
               FOUND(p));
  return true;
}

/* ---- checks after parsing ----------------------------------------------- */

typedef struct named_at {
  const char *name;
  size_t at; /* header offset of the key */
  int index;
} named_at;

static int cmp_named_at(const void *a, const void *b) {
  const named_at *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : x->at < y->at ? -1 : x->at > y->at;
}

/* Sorts v (n keys with their header offsets) by name, stores the sorted
 * order of their indices in *index (for binary search; the caller frees
 * it), and reports the first repeated key in file order. */
static bool sort_unique(hdr_parser *p, const char *what, named_at *v, int n, int **index) {
  *index = malloc(sizeof **index * (size_t)(n ? n : 1));
  TFG_ASSERT(*index != NULL);
  qsort(v, (size_t)n, sizeof *v, cmp_named_at);
  int dup = -1; /* position in v of the earliest second occurrence */
  for (int i = 0; i < n; i++) {
    (*index)[i] = v[i].index;
    if (i && strcmp(v[i - 1].name, v[i].name) == 0 && (dup < 0 || v[i].at < v[dup].at)) dup = i;
  }
  if (dup < 0) return true;
  char *s = shown(v[dup].name);
  bad(p, v[dup].at, "%s '%s' appears twice", what, s);
  free(s);
  return false;
}

static bool check_unique(hdr_parser *p) {
  tfg_ckpt *c = p->c;
  int most = c->n > c->nmeta ? c->n : c->nmeta;
  named_at *v = malloc(sizeof *v * (size_t)(most ? most : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < c->n; i++) v[i] = (named_at){c->e[i].name, p->span[i].key_at, i};
  bool ok = sort_unique(p, "tensor", v, c->n, &c->by_name);
  for (int i = 0; ok && i < c->nmeta; i++) v[i] = (named_at){c->meta[i].key, p->meta_at[i], i};
  ok = ok && sort_unique(p, "metadata key", v, c->nmeta, &c->meta_by_key);
  free(v);
  return ok;
}

static bool tensor_error(hdr_parser *p, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool tensor_error(hdr_parser *p, int i, const char *fmt, ...) {
  tfg_strbuf m = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&m, fmt, ap);
  va_end(ap);
  char *s = shown(p->c->e[i].name);
  tfg_diag_error(p->d, p->loc, "'%s': tensor '%s': %s", p->path, s, m.data);
  free(s);
  tfg_strbuf_free(&m);
  return false;
}

static void format_shape(tfg_strbuf *b, const tfg_ckpt_entry *t) {
  tfg_strbuf_printf(b, "%s [", dtype_names[t->dtype]);
  for (int k = 0; k < t->shape.rank; k++)
    tfg_strbuf_printf(b, "%s%lld", k ? ", " : "", (long long)t->shape.dim[k]);
  tfg_strbuf_putc(b, ']');
}

typedef struct span_at {
  int64_t begin, end;
  int index;
} span_at;

static int cmp_span_at(const void *a, const void *b) {
  const span_at *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->index - y->index;
}

/* Checks each tensor's span against its dtype and shape and the data
 * size, then that the spans tile [0, datalen) exactly. Fills order with
 * the tensors sorted by offset (the order their bytes are read in). */
static bool check_spans(hdr_parser *p, uint64_t datalen, int *order) {
  tfg_ckpt *c = p->c;
  for (int i = 0; i < c->n; i++) {
    const ckpt_span *sp = &p->span[i];
    const tfg_ckpt_entry *t = &c->e[i];
    long long b = (long long)sp->begin, e = (long long)sp->end;
    if (sp->end < sp->begin)
      return tensor_error(p, i, "data_offsets [%lld, %lld] end before they begin", b, e);
    int64_t need = shape_bytes(t->dtype, &t->shape);
    if (need != sp->end - sp->begin) {
      tfg_strbuf s = {0};
      format_shape(&s, t);
      if (need < 0)
        tensor_error(p, i, "%s is too large for any file", s.data);
      else
        tensor_error(p, i, "data_offsets [%lld, %lld] hold %lld bytes, but %s needs %lld", b, e,
                     e - b, s.data, (long long)need);
      tfg_strbuf_free(&s);
      return false;
    }
    if ((uint64_t)sp->end > datalen)
      return tensor_error(p, i,
                          "data_offsets [%lld, %lld] run past the end of the file (the data "
                          "after the header holds %llu bytes)",
                          b, e, (unsigned long long)datalen);
  }
  span_at *v = malloc(sizeof *v * (size_t)(c->n ? c->n : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < c->n; i++) v[i] = (span_at){p->span[i].begin, p->span[i].end, i};
  qsort(v, (size_t)c->n, sizeof *v, cmp_span_at);
  for (int k = 0; k < c->n; k++) order[k] = v[k].index;
  free(v);
  int64_t covered = 0; /* the buffer is tiled up to here */
  for (int k = 0; k < c->n; k++) {
    int i = order[k];
    const ckpt_span *sp = &p->span[i];
    if (sp->begin < covered) {
      int j = order[k - 1];
      char *other = shown(c->e[j].name);
      tensor_error(p, i, "data_offsets [%lld, %lld] overlap those of tensor '%s' [%lld, %lld]",
                   (long long)sp->begin, (long long)sp->end, other,
                   (long long)p->span[j].begin, (long long)p->span[j].end);
      free(other);
      return false;
    }
    if (sp->begin > covered)
      return tensor_error(p, i,
                          "bytes [%lld, %lld) before it belong to no tensor (the format "
                          "allows no holes in the data)",
                          (long long)covered, (long long)sp->begin);
    covered = sp->end;
  }
  if ((uint64_t)covered != datalen) {
    tfg_diag_error(p->d, p->loc,
                   "'%s': the last %llu bytes of the file belong to no tensor (the format "
                   "allows no bytes after the last tensor)",
                   p->path, (unsigned long long)(datalen - (uint64_t)covered));
    return false;
  }
  return true;
}

/* ---- reading ------------------------------------------------------------ */

/* Reads exactly len bytes. Returns 0, an errno value, or -1 when the file
 * ended first (it shrank under us: its size was checked). */
static int read_all(int fd, void *buf, uint64_t len) {
  char *q = buf;
  while (len > 0) {
    size_t chunk = len > CKPT_IO_CHUNK ? CKPT_IO_CHUNK : (size_t)len;
    ssize_t r = read(fd, q, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return -1;
    q += r;
    len -= (uint64_t)r;
  }
  return 0;
}

static tfg_status read_error(tfg_diag *d, const tfg_loc *loc, const char *path, int err) {
  if (err < 0)
    tfg_diag_error(d, loc, "cannot read checkpoint '%s': the file shrank while being read", path);
  else
    tfg_diag_error(d, loc, "cannot read checkpoint '%s': %s", path, strerror(err));
  return TFG_ERR_IO;
}

static tfg_status load_fd(tfg_diag *d, const tfg_loc *loc, const char *path, int fd,
                          uint64_t size, tfg_ckpt *c) {
  if (size < 8) {
    tfg_diag_error(d, loc,
                   "'%s' is not a safetensors file: it has %llu bytes, too few for the 8-byte "
                   "header length",
                   path, (unsigned long long)size);
    return TFG_ERR_DATA;
  }
  unsigned char len8[8];
  int err = read_all(fd, len8, 8);
  if (err) return read_error(d, loc, path, err);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > CKPT_MAX_HEADER) {
    tfg_diag_error(d, loc,
                   "'%s': the header length is %llu bytes, over the format's limit of 100 MB "
                   "(is this a safetensors file?)",
                   path, (unsigned long long)hlen);
    return TFG_ERR_DATA;
  }
  if (hlen > size - 8) {
    tfg_diag_error(d, loc,
                   "'%s': the header length (%llu bytes) points past the end of the file "
                   "(%llu bytes)",
                   path, (unsigned long long)hlen, (unsigned long long)size);
    return TFG_ERR_DATA;
  }
  unsigned char *text = malloc((size_t)hlen + 1);
  if (!text) {
    tfg_diag_error(d, loc, "out of memory reading the header of '%s'", path);
    return TFG_ERR_NOMEM;
  }
  err = read_all(fd, text, hlen);
  if (err) {
    free(text);
    return read_error(d, loc, path, err);
  }
  text[hlen] = '\0';

  hdr_parser p = {.d = d, .loc = loc, .path = path, .s = text, .len = (size_t)hlen, .c = c};
  int *order = NULL;
  bool ok = parse_header(&p);
  free(text);
  tfg_strbuf_clear(&p.ctx);
  ok = ok && check_unique(&p);
  if (ok) {
    order = malloc(sizeof *order * (size_t)(c->n ? c->n : 1));
    TFG_ASSERT(order != NULL);
    ok = check_spans(&p, size - 8 - hlen, order);
  }
  tfg_strbuf_free(&p.str);
  tfg_strbuf_free(&p.ctx);
  free(p.span);
  free(p.meta_at);
  if (!ok) {
    free(order);
    return TFG_ERR_DATA;
  }

  /* The spans tile the data, so reading them in offset order reads the
   * rest of the file front to back. Each tensor gets its own block:
   * malloc's alignment suits every dtype, whatever the file's offsets. */
  tfg_status st = TFG_OK;
  for (int k = 0; k < c->n && st == TFG_OK; k++) {
    tfg_ckpt_entry *t = &c->e[order[k]];
    uint64_t bytes = (uint64_t)shape_bytes(t->dtype, &t->shape);
    void *data = bytes <= SIZE_MAX ? malloc(bytes ? (size_t)bytes : 1) : NULL;
    if (!data) {
      char *s = shown(t->name);
      tfg_diag_error(d, loc, "out of memory reading '%s': tensor '%s' needs %llu bytes", path, s,
                     (unsigned long long)bytes);
      free(s);
      st = TFG_ERR_NOMEM;
      break;
    }
    t->data = data;
    err = read_all(fd, data, bytes);
    if (err) st = read_error(d, loc, path, err);
  }
  free(order);
  return st;
}

tfg_status tfg_ckpt_load(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_ckpt **out) {
  TFG_ASSERT(path != NULL && out != NULL);
  *out = NULL;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  if (fd < 0) {
    tfg_diag_error(d, loc, "cannot open checkpoint '%s': %s", path, why);
    return TFG_ERR_IO;
  }
  tfg_ckpt *c = calloc(1, sizeof *c);
  TFG_ASSERT(c != NULL);
  tfg_status s = load_fd(d, loc, path, fd, (uint64_t)st.st_size, c);
  close(fd);
  if (s != TFG_OK) {
    tfg_ckpt_free(c);
    return s;
  }
  *out = c;
  return TFG_OK;
}

/* ---- resuming a run ----------------------------------------------------- */

/* The "step" metadata sv as the step to resume at: decimal digits, at
 * most INT64_MAX. Records an error saying what is wrong otherwise. */
static bool parse_step(tfg_diag *d, const tfg_loc *loc, const char *path, const char *sv,
                       int64_t *step) {
  const char *digits = sv + (sv[0] == '-');
  size_t nd = strspn(digits, "0123456789");
  const char *why = NULL;
  long long v = 0;
  if (nd == 0 || digits[nd] != '\0') {
    why = "is not a whole number";
  } else if (digits != sv && strspn(digits, "0") != nd) {
    why = "is negative (a step counts from 0)";
  } else {
    errno = 0;
    v = strtoll(digits, NULL, 10);
    if (errno == ERANGE) why = "is out of range (the largest step is 2^63 - 1)";
  }
  if (why) {
    char *s = shown(sv);
    tfg_diag_error(d, loc, "checkpoint %s: its step '%s' %s", path, s, why);
    free(s);
    return false;
  }
  *step = v;
  return true;
}

/* What a tensor of the checkpoint is to the run being resumed. */
enum { ROLE_NONE, ROLE_PARAM, ROLE_STATE };

/* Whether tensor j of c, which restores nothing, is named "PARAM:SLOT"
 * for a param the run restored from c: optimizer state, if not the run's. */
static bool is_param_state(const tfg_ckpt *c, const unsigned char *role, int j) {
  const char *name = c->e[j].name, *colon = strrchr(name, ':');
  if (!colon) return false;
  char *param = strndup(name, (size_t)(colon - name));
  TFG_ASSERT(param != NULL);
  int k = tfg_ckpt_find(c, param);
  free(param);
  return k >= 0 && role[k] == ROLE_PARAM;
}

/* Records the error for tensor j of c, which the run has no use for. */
static void extra_tensor(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt *c,
                         const unsigned char *role, int j, const char *optimizer) {
  char *s = shown(c->e[j].name);
  if (is_param_state(c, role, j))
    tfg_diag_error(d, loc,
                   "checkpoint %s has tensor '%s', optimizer state that this run's %s does not "
                   "keep",
                   path, s, optimizer);
  else
    tfg_diag_error(d, loc,
                   "checkpoint %s has tensor '%s', which is neither a param of this program nor "
                   "its optimizer state",
                   path, s);
  free(s);
  tfg_diag_help(d, "a checkpoint resumes the run that wrote it; to start over, move the file "
                   "away or name another checkpoint");
}

tfg_status tfg_ckpt_match(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt *c,
                          const tfg_ckpt_entry *want, int n, int nparams, const char *optimizer,
                          int *at, int64_t *step) {
  TFG_ASSERT(c && path && optimizer && step && nparams >= 0 && nparams <= n &&
             (n == 0 || (want && at)));
  *step = 0;
  const char *saved = tfg_ckpt_meta_get(c, "optimizer");
  bool other = saved && strcmp(saved, optimizer) != 0; /* c's state is not ours to use */
  unsigned char *role = calloc((size_t)c->n + 1, 1);
  TFG_ASSERT(role != NULL);
  int found = 0, missing = -1; /* state tensors found; the first one missing */
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    bool is_state = i >= nparams;
    at[i] = other && is_state ? -1 : tfg_ckpt_find(c, want[i].name);
    if (at[i] < 0) {
      if (!is_state) {
        tfg_diag_error(d, loc, "checkpoint %s has no tensor '%s' for the param of that name", path,
                       want[i].name);
        ok = false;
      } else if (missing < 0) {
        missing = i;
      }
      continue;
    }
    const tfg_ckpt_entry *t = &c->e[at[i]];
    if (t->dtype != want[i].dtype || !tfg_shape_eq(&t->shape, &want[i].shape)) {
      tfg_strbuf w = {0}, g = {0};
      tfg_shape_format(&w, want[i].dtype, &want[i].shape);
      tfg_shape_format(&g, t->dtype, &t->shape);
      tfg_diag_error(d, loc, "checkpoint %s: '%s' is %s but the program's is %s", path,
                     want[i].name, g.data, w.data);
      tfg_strbuf_free(&w);
      tfg_strbuf_free(&g);
      ok = false;
    }
    role[at[i]] = is_state ? ROLE_STATE : ROLE_PARAM;
    found += is_state;
  }
  if (ok && found > 0 && missing >= 0) {
    tfg_diag_error(d, loc, "checkpoint %s has no tensor '%s' for the optimizer state of that name",
                   path, want[missing].name);
    tfg_diag_note(d, NULL, "it holds %d of the %d optimizer state tensors; only a file with none "
                           "(params only) starts the optimizer state fresh",
                  found, n - nparams);
    ok = false;
  }
  for (int j = 0; j < c->n && ok; j++) /* header order: the first extra key a reader sees */
    if (role[j] == ROLE_NONE && !(other && is_param_state(c, role, j))) {
      extra_tensor(d, loc, path, c, role, j, optimizer);
      ok = false;
    }
  if (ok && other) {
    char *s = shown(saved);
    tfg_diag_warning(d, loc,
                     "checkpoint %s was saved by optimizer %s, not this run's %s: its params "
                     "are restored, its optimizer state is not, and training starts at step 0",
                     path, s, optimizer);
    free(s);
  }
  const char *sv = tfg_ckpt_meta_get(c, "step");
  if (ok && !other && found == n - nparams && sv) ok = parse_step(d, loc, path, sv, step);
  free(role);
  return ok ? TFG_OK : TFG_ERR_DATA;
}

void tfg_ckpt_free(tfg_ckpt *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    free((char *)c->e[i].name);
    free((void *)c->e[i].data);
  }
  for (int i = 0; i < c->nmeta; i++) {
    free((char *)c->meta[i].key);
    free((char *)c->meta[i].value);
  }
  free(c->e);
  free(c->by_name);
  free(c->meta);
  free(c->meta_by_key);
  free(c);
}

int tfg_ckpt_count(const tfg_ckpt *c) {
  TFG_ASSERT(c != NULL);
  return c->n;
}

int tfg_ckpt_find(const tfg_ckpt *c, const char *name) {
  TFG_ASSERT(c != NULL && name != NULL);
  int lo = 0, hi = c->n; /* binary search of by_name in [lo, hi) */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int r = strcmp(c->e[c->by_name[mid]].name, name);
    if (r == 0) return c->by_name[mid];
    if (r < 0) lo = mid + 1; else hi = mid;
  }
  return -1;
}

const tfg_ckpt_entry *tfg_ckpt_entry_at(const tfg_ckpt *c, int i) {
  TFG_ASSERT(c != NULL && i >= 0 && i < c->n);
  return &c->e[i];
}

const char *tfg_ckpt_meta_get(const tfg_ckpt *c, const char *key) {
  TFG_ASSERT(c != NULL && key != NULL);
  int lo = 0, hi = c->nmeta;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int r = strcmp(c->meta[c->meta_by_key[mid]].key, key);
    if (r == 0) return c->meta[c->meta_by_key[mid]].value;
    if (r < 0) lo = mid + 1; else hi = mid;
  }
  return NULL;
}

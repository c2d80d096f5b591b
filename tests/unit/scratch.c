/* tests/unit/scratch.c: the helpers of tests/unit/scratch.h. */
#include "tests/unit/scratch.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char scratch_dir[64];

void scratch_make(void) {
  strcpy(scratch_dir, "/tmp/tfg-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(scratch_dir));
}

/* Removes dir's files and, depth levels down, its folders' files. */
static void remove_tree(const char *dir, int depth) {
  DIR *dh = opendir(dir);
  if (dh) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(dh)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (unlink(p) != 0 && depth > 0) remove_tree(p, depth - 1);
    }
    closedir(dh);
  }
  rmdir(dir);
}

void scratch_remove(void) { remove_tree(scratch_dir, 1); }

const char *scratch_path(const char *name) {
  static char bufs[8][256];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", scratch_dir, name);
  return b;
}

const char *scratch_write(const char *name, const void *data, size_t len) {
  const char *p = scratch_path(name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
  return p;
}

char *scratch_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  s[n] = 0;
  if (len) *len = (size_t)n;
  return s;
}

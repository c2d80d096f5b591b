/* tests/unit/scratch.h: the scratch folder of the running test case, for
 * suites whose fixtures are files.
 *
 *   tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
 *   const char *p = scratch_write("x.csv", "1,2\n", 4);
 *   char *text = scratch_read(p, NULL);
 *
 * The fixture is unchecked so that its teardown runs in the parent
 * process: the folder goes even when a failing test's child exits early. */
#ifndef TFG_TEST_SCRATCH_H
#define TFG_TEST_SCRATCH_H

#include <stddef.h>

/* The folder's path, set by scratch_make. */
extern char scratch_dir[64];

/* Makes a fresh folder under /tmp (a failed check if it cannot). */
void scratch_make(void);
/* Removes the folder, its files and its subfolders' files (one level of
 * subfolders is as deep as the suites go). */
void scratch_remove(void);
/* scratch_dir/name, in one of 8 rotating buffers (several may be live). */
const char *scratch_path(const char *name);
/* Writes len bytes to scratch_dir/name and returns its path. */
const char *scratch_write(const char *name, const void *data, size_t len);
/* The whole file at path (one scratch_path gave, or any other), with a
 * NUL after it (caller frees); its length in *len when len is not NULL.
 * A file that cannot be read is a failed check. */
char *scratch_read(const char *path, size_t *len);

#endif

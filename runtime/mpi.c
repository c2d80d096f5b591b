/* runtime/mpi.c: joining an mpirun job, and the start-up check that every
 * rank means the same job (runtime/mpi.h). The only file that includes
 * mpi.h, and only in a build with MPI (TFG_BUILD_MPI). */
#include "runtime/mpi.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

#if TFG_BUILD_MPI
#include <mpi.h>
#endif

bool tfg_mpi_launched(void) {
  const char *n = getenv("OMPI_COMM_WORLD_SIZE");
  return (n && *n) || getenv("PMIX_RANK") != NULL;
}

/* The job as this process sees it. */
static struct {
  bool started;
  int rank, size, local_rank;
} job = {.size = 1};

int tfg_mpi_rank(void) { return job.rank; }
int tfg_mpi_size(void) { return job.size; }
int tfg_mpi_local_rank(void) { return job.local_rank; }

#if TFG_BUILD_MPI

/* MPI's words for an error code. */
static void mpi_error(tfg_strbuf *why, const char *call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = snprintf(text, sizeof text, "error %d", code);
  tfg_strbuf_printf(why, "%s failed: %.*s", call, len, text);
}

tfg_status tfg_mpi_start(tfg_strbuf *why) {
  if (job.started || !tfg_mpi_launched()) return TFG_OK;
  int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) {
    mpi_error(why, "MPI_Init_thread", rc);
    return TFG_ERR_DEVICE;
  }
  job.started = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  /* the local rank: this rank's place among the ranks of its machine */
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, job.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &job.local_rank);
    MPI_Comm_free(&local);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    tfg_strbuf_printf(why, "this MPI library gives threads level %d, tfg needs MPI_THREAD_SERIALIZED", provided);
    return TFG_ERR_DEVICE;
  }
  return TFG_OK;
}

void tfg_mpi_stop(void) {
  if (!job.started) return;
  MPI_Finalize();
  job.started = false;
}

void tfg_mpi_describe(tfg_strbuf *out) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  /* Open MPI's first words: "Open MPI v4.1.4, package: ..." */
  int name = 0;
  while (name < len && lib[name] != ',' && lib[name] != '\n') name++;
  tfg_strbuf_printf(out, "mpi: on (%.*s), ", name, lib);
  if (job.started) tfg_strbuf_printf(out, "rank %d of %d", job.rank, job.size);
  else tfg_strbuf_puts(out, "not started by mpirun");
}

/* FNV-1a, 64 bits: equal texts, equal hashes; a difference is then found
 * line by line on the ranks whose hash differs. */
static uint64_t text_hash(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

tfg_status tfg_mpi_same(const char *what, const char *text, tfg_strbuf *err) {
  if (!job.started || job.size < 2) return TFG_OK;
  uint64_t mine = text_hash(text);
  uint64_t *all = malloc(sizeof *all * (size_t)job.size);
  TFG_ASSERT(all != NULL);
  int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    free(all);
    mpi_error(err, "MPI_Allgather", rc);
    return TFG_ERR_DEVICE;
  }
  int ndiff = 0;
  for (int r = 1; r < job.size; r++) ndiff += all[r] != all[0];
  if (ndiff == 0) {
    free(all);
    return TFG_OK;
  }
  /* Rank 0's text to every rank, so that each that differs can say where. */
  unsigned long long len = job.rank == 0 ? (unsigned long long)strlen(text) : 0;
  MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  char *first = malloc((size_t)len + 1);
  TFG_ASSERT(first != NULL);
  if (job.rank == 0) memcpy(first, text, (size_t)len);
  MPI_Bcast(first, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
  first[len] = '\0';
  tfg_strbuf_printf(err, "the ranks do not build the same %s: rank", what);
  for (int r = 1, said = 0; r < job.size; r++)
    if (all[r] != all[0]) tfg_strbuf_printf(err, "%s %d", said++ ? "," : ndiff > 1 ? "s" : "", r);
  tfg_strbuf_printf(err, " differ%s from rank 0 (different programs, --set values or devices)", ndiff > 1 ? "" : "s");
  if (all[job.rank] != all[0]) {
    tfg_strbuf la = {0}, lb = {0};
    int line = tfg_mpi_first_difference(first, text, &la, &lb);
    if (line > 0)
      tfg_strbuf_printf(err, "; here, rank %d, line %d of it is '%s' where rank 0 has '%s'", job.rank, line,
                        lb.data ? lb.data : "", la.data ? la.data : "");
    tfg_strbuf_free(&la);
    tfg_strbuf_free(&lb);
  }
  free(first);
  free(all);
  return TFG_ERR_USAGE;
}

#else /* a build without MPI */

tfg_status tfg_mpi_start(tfg_strbuf *why) {
  if (!tfg_mpi_launched()) return TFG_OK;
  tfg_strbuf_puts(why, "mpirun started this tfg, but this build has no MPI (build where mpicc is: make deps installs "
                       "Open MPI)");
  return TFG_ERR_DEVICE;
}

void tfg_mpi_stop(void) {}

void tfg_mpi_describe(tfg_strbuf *out) { tfg_strbuf_puts(out, "mpi: off (this build has no MPI)"); }

tfg_status tfg_mpi_same(const char *what, const char *text, tfg_strbuf *err) {
  (void)what;
  (void)text;
  (void)err;
  return TFG_OK;
}

#endif

/* The line [s, end of line) into *out. */
static void line_of(const char *s, tfg_strbuf *out) {
  size_t n = strcspn(s, "\n");
  tfg_strbuf_putn(out, s, n);
}

int tfg_mpi_first_difference(const char *a, const char *b, tfg_strbuf *la, tfg_strbuf *lb) {
  int line = 1;
  const char *sa = a, *sb = b; /* the current line's starts */
  for (;; a++, b++) {
    if (*a != *b) {
      line_of(sa, la);
      line_of(sb, lb);
      return line;
    }
    if (*a == '\0') return 0;
    if (*a == '\n') {
      line++;
      sa = a + 1;
      sb = b + 1;
    }
  }
}

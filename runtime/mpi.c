/* runtime/mpi.c: joining an mpirun job, and the start-up check that every
 * rank means the same job (runtime/mpi.h). The only file that includes
 * mpi.h, and only in a build with MPI (TFG_BUILD_MPI). */
#include "runtime/mpi.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/kernel.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/event.h"

#if TFG_BUILD_MPI
#include <mpi.h>
#endif

/* The launcher's variables, read here beside MPI_Init (which reads them
 * too) rather than in cli/: with kernels/nvrtc.c's CUDA_HOME, the only
 * getenv below cli/ (docs/architecture.md, tests/layers.py). */
bool tfg_mpi_launched(void) {
  const char *n = getenv("OMPI_COMM_WORLD_SIZE");
  return (n && *n) || getenv("PMIX_RANK") != NULL;
}

/* The job as this process sees it. */
static struct {
  bool started;
  int rank, size, local_rank, local_size;
} job = {.size = 1, .local_size = 1};

int tfg_mpi_rank(void) { return job.rank; }
int tfg_mpi_size(void) { return job.size; }
int tfg_mpi_local_rank(void) { return job.local_rank; }
int tfg_mpi_local_size(void) { return job.local_size; }

#if TFG_BUILD_MPI

/* MPI's words for an error code. */
static void mpi_error(tfg_strbuf *why, const char *call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = snprintf(text, sizeof text, "error %d", code);
  tfg_strbuf_printf(why, "%s failed: %.*s", call, len, text);
}

/* ---- point to point: a pipeline's stages on different ranks --------------------- */

/* Sends and receives travel on a communicator of their own, so that no
 * collective's message ever matches one. A send copies its bytes and
 * posts MPI_Isend, so that the sender's device goes on (a stage sends an
 * activation and computes the next micro-batch); the copies are freed
 * once tfg_mpi_flush has waited for every posted send. A receive blocks
 * its device until the bytes are in: the order each rank lists its
 * sends and receives is one order of the whole job's graph, in which
 * every send comes before its receive, so a rank waiting for a message
 * waits for one that its sender will post (compiler/ranks.h). */
static struct {
  MPI_Comm comm;
  int64_t tag_ub;
  pthread_mutex_t mu;
  int n, cap;
  MPI_Request *req;
  void **buf;
} p2p = {.comm = MPI_COMM_NULL, .mu = PTHREAD_MUTEX_INITIALIZER};

static void p2p_start(void) {
  MPI_Comm_dup(MPI_COMM_WORLD, &p2p.comm);
  MPI_Comm_set_errhandler(p2p.comm, MPI_ERRORS_RETURN);
  void *v = NULL;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
  p2p.tag_ub = flag && v ? *(int *)v : 32767; /* the standard's least */
}

static void p2p_stop(void) {
  tfg_mpi_flush();
  if (p2p.comm != MPI_COMM_NULL) MPI_Comm_free(&p2p.comm);
  free(p2p.req);
  free(p2p.buf);
  p2p.req = NULL;
  p2p.buf = NULL;
  p2p.cap = 0;
}

/* Whether a message of n bytes under tag fits MPI's int count and tags;
 * else the reason in *err. */
static bool p2p_fits(int64_t tag, size_t n, tfg_strbuf *err) {
  if (n > (size_t)INT32_MAX) {
    tfg_strbuf_printf(err, "a value of %zu bytes is more than one message carries (2 GiB)", n);
    return false;
  }
  if (tag < 0 || tag > p2p.tag_ub) {
    tfg_strbuf_printf(err, "message %lld is past this MPI's highest tag, %lld", (long long)tag, (long long)p2p.tag_ub);
    return false;
  }
  return true;
}

static tfg_status p2p_send(int peer, int64_t tag, const void *data, size_t n, tfg_strbuf *err) {
  if (!p2p_fits(tag, n, err)) return TFG_ERR_DEVICE;
  void *copy = malloc(n ? n : 1);
  TFG_ASSERT(copy != NULL);
  if (n) memcpy(copy, data, n);
  pthread_mutex_lock(&p2p.mu);
  if (p2p.n == p2p.cap) {
    p2p.cap = p2p.cap ? 2 * p2p.cap : 64;
    p2p.req = realloc(p2p.req, sizeof *p2p.req * (size_t)p2p.cap);
    p2p.buf = realloc(p2p.buf, sizeof *p2p.buf * (size_t)p2p.cap);
    TFG_ASSERT(p2p.req && p2p.buf);
  }
  int rc = MPI_Isend(copy, (int)n, MPI_BYTE, peer, (int)tag, p2p.comm, &p2p.req[p2p.n]);
  if (rc == MPI_SUCCESS) p2p.buf[p2p.n++] = copy;
  pthread_mutex_unlock(&p2p.mu);
  if (rc == MPI_SUCCESS) return TFG_OK;
  free(copy);
  mpi_error(err, "MPI_Isend", rc);
  return TFG_ERR_DEVICE;
}

static tfg_status p2p_recv(int peer, int64_t tag, void *data, size_t n, tfg_strbuf *err) {
  if (!p2p_fits(tag, n, err)) return TFG_ERR_DEVICE;
  MPI_Status status;
  int rc = MPI_Recv(data, (int)n, MPI_BYTE, peer, (int)tag, p2p.comm, &status), got = 0;
  if (rc != MPI_SUCCESS) {
    mpi_error(err, "MPI_Recv", rc);
    return TFG_ERR_DEVICE;
  }
  MPI_Get_count(&status, MPI_BYTE, &got);
  if ((size_t)got != n) {
    tfg_strbuf_printf(err, "rank %d sent %d bytes as message %lld, %zu were expected", peer, got, (long long)tag, n);
    return TFG_ERR_DEVICE;
  }
  return TFG_OK;
}

static const tfg_transport p2p_transport = {.send = p2p_send, .recv = p2p_recv};

const tfg_transport *tfg_mpi_transport(void) { return job.started && job.size > 1 ? &p2p_transport : NULL; }

void tfg_mpi_flush(void) {
  pthread_mutex_lock(&p2p.mu);
  if (p2p.n) MPI_Waitall(p2p.n, p2p.req, MPI_STATUSES_IGNORE);
  for (int i = 0; i < p2p.n; i++) free(p2p.buf[i]);
  p2p.n = 0;
  pthread_mutex_unlock(&p2p.mu);
}

void tfg_mpi_bcast_from(int root, void *buf, size_t n) {
  if (!job.started || job.size < 2) return;
  for (size_t at = 0; at < n;) { /* in pieces an int counts */
    size_t k = n - at < (size_t)INT32_MAX ? n - at : (size_t)INT32_MAX;
    MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
    at += k;
  }
}

tfg_status tfg_mpi_start(tfg_strbuf *why) {
  if (job.started || !tfg_mpi_launched()) return TFG_OK;
  int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
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
    MPI_Comm_size(local, &job.local_size);
    MPI_Comm_free(&local);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    tfg_strbuf_printf(why, "this MPI library gives threads level %d, tfg needs MPI_THREAD_MULTIPLE (its collectives "
                           "run on the devices' threads)", provided);
    return TFG_ERR_DEVICE;
  }
  p2p_start();
  return TFG_OK;
}

static void progress_stop(void);

void tfg_mpi_stop(void) {
  if (!job.started) return;
  progress_stop();
  p2p_stop();
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

void tfg_mpi_mean(double *v, int n) {
  if (!job.started || job.size < 2 || n <= 0) return;
  int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  TFG_ASSERT(rc == MPI_SUCCESS); /* a failed rank ends the job under mpirun (runtime/mpi.h) */
  for (int i = 0; i < n; i++) v[i] /= job.size;
}

void tfg_mpi_abort(int code) {
  if (job.started && job.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

void tfg_mpi_gather(const char *text, tfg_strbuf *all) {
  if (!job.started || job.size < 2) {
    tfg_strbuf_printf(all, "rank 0:\n%s", text);
    return;
  }
  char host[MPI_MAX_PROCESSOR_NAME + 1] = "";
  int hlen = 0;
  if (MPI_Get_processor_name(host, &hlen) != MPI_SUCCESS) hlen = 0;
  host[hlen] = '\0';
  tfg_strbuf mine = {0};
  tfg_strbuf_printf(&mine, "rank %d (%s):\n%s", job.rank, hlen ? host : "?", text);
  int len = (int)mine.len, *lens = NULL, *offs = NULL;
  char *buf = NULL;
  if (job.rank == 0) {
    lens = calloc((size_t)job.size, sizeof *lens);
    offs = calloc((size_t)job.size, sizeof *offs);
    TFG_ASSERT(lens && offs);
  }
  int rc = MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  TFG_ASSERT(rc == MPI_SUCCESS); /* a failed rank ends the job under mpirun */
  int total = 0;
  for (int r = 0; job.rank == 0 && r < job.size; r++) offs[r] = total, total += lens[r];
  if (job.rank == 0) {
    buf = malloc((size_t)total + 1);
    TFG_ASSERT(buf != NULL);
  }
  rc = MPI_Gatherv(mine.data ? mine.data : "", len, MPI_CHAR, buf, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD);
  TFG_ASSERT(rc == MPI_SUCCESS);
  if (job.rank == 0) {
    for (int r = 0; r < job.size; r++)
      tfg_strbuf_printf(all, "%s%.*s", r ? "\n" : "", lens[r], buf + offs[r]);
  }
  free(buf);
  free(lens);
  free(offs);
  tfg_strbuf_free(&mine);
}

bool tfg_mpi_bcast(void *buf, size_t n, bool ok) {
  if (!job.started || job.size < 2) return ok;
  int flag = ok;
  if (MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS || !flag) return false;
  return MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS;
}

/* ---- the leaders' step across processes ------------------------------------------ */

/* Non-blocking, so that the backward pass goes on beside it (as DDP's
 * buckets overlap it): a call queues on the leader's stream a kernel that
 * posts MPI_Iallreduce for each segment and hands the requests to the
 * progress thread, then a wait on the collective's event. The host
 * worker never sleeps on a wait (runtime/event.h): it serves the
 * device's other streams meanwhile. The progress thread waits for the
 * requests (MPI_THREAD_MULTIPLE), scales the sums, and completes the
 * event, which releases the stream. Jobs complete in the order they were
 * posted; a post that fails completes the event at once with the
 * failure, so no stream waits for a collective that never started.
 * One ctx (and node, an ALLREDUCE for the trace) serves every call. */
typedef struct mpi_coll {
  MPI_Comm comm;
  tfg_backend *b;
  tfg_stream *s;
  tfg_event *done; /* completed by the progress thread, one generation per call */
  tfg_kernel_ctx ctx;
  tfg_node node;
} mpi_coll;

/* One call's work, queued on the stream as a kernel's input (self.data is
 * the job); the progress thread frees it. */
typedef enum mpi_kind { MPI_JOB_ALLREDUCE, MPI_JOB_REDUCE_SCATTER, MPI_JOB_ALL_GATHER } mpi_kind;

typedef struct mpi_job {
  MPI_Comm comm;
  mpi_kind kind;
  int nseg;
  tfg_dtype dt;
  double scale;
  void **bufs;
  size_t *counts;
  tfg_event *done;
  uint64_t gen;        /* the generation of done the stream waits for */
  MPI_Request *reqs;   /* posted by the kernel */
  int nreqs;
  tfg_tensor self;
  struct mpi_job *next;
} mpi_job;

static void job_free(mpi_job *j) {
  tfg_event_unref(j->done);
  free(j->bufs);
  free(j->counts);
  free(j->reqs);
  free(j);
}

/* ---- the progress thread ---- */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mpi_job *head, *tail;
  bool running, quit;
  pthread_t thread;
} progress = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Waits for a job's requests, scales its sums, completes its event. */
static void job_finish(mpi_job *j) {
  tfg_status st = TFG_OK;
  tfg_strbuf why = {0};
  int rc = MPI_Waitall(j->nreqs, j->reqs, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) {
    tfg_strbuf_puts(&why, "a collective across the job's processes: ");
    mpi_error(&why, "MPI_Waitall", rc);
    st = TFG_ERR_DEVICE;
  }
  size_t es = tfg_dtype_size(j->dt);
  for (int k = 0; k < j->nseg && st == TFG_OK && j->kind != MPI_JOB_ALL_GATHER; k++) {
    /* in place, MPI puts this process's reduced piece first: to its place */
    size_t lo = 0, n = j->counts[k], per = j->counts[k] / (size_t)job.size;
    if (j->kind == MPI_JOB_REDUCE_SCATTER) {
      lo = (size_t)job.rank * per, n = per;
      memmove((char *)j->bufs[k] + lo * es, j->bufs[k], per * es);
    }
    if (j->scale == 1.0) continue;
    if (j->dt == TFG_DTYPE_F64)
      for (size_t i = lo; i < lo + n; i++) ((double *)j->bufs[k])[i] *= j->scale;
    else
      for (size_t i = lo; i < lo + n; i++) ((float *)j->bufs[k])[i] *= (float)j->scale;
  }
  tfg_event_complete(j->done, j->gen, st, why.data);
  tfg_strbuf_free(&why);
  job_free(j);
}

static void *progress_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&progress.mu);
  for (;;) {
    while (!progress.head && !progress.quit) pthread_cond_wait(&progress.cv, &progress.mu);
    mpi_job *j = progress.head;
    if (!j) break; /* quit, and nothing left */
    progress.head = j->next;
    if (!progress.head) progress.tail = NULL;
    pthread_mutex_unlock(&progress.mu);
    job_finish(j);
    pthread_mutex_lock(&progress.mu);
  }
  pthread_mutex_unlock(&progress.mu);
  return NULL;
}

static void progress_push(mpi_job *j) {
  pthread_mutex_lock(&progress.mu);
  if (!progress.running) {
    TFG_ASSERT(pthread_create(&progress.thread, NULL, progress_main, NULL) == 0);
    progress.running = true;
  }
  j->next = NULL;
  if (progress.tail) progress.tail->next = j;
  else progress.head = j;
  progress.tail = j;
  pthread_cond_signal(&progress.cv);
  pthread_mutex_unlock(&progress.mu);
}

/* Ends the progress thread once its jobs are done (before MPI_Finalize). */
static void progress_stop(void) {
  pthread_mutex_lock(&progress.mu);
  bool running = progress.running;
  progress.quit = true;
  pthread_cond_signal(&progress.cv);
  pthread_mutex_unlock(&progress.mu);
  if (running) pthread_join(progress.thread, NULL);
  progress.running = false;
}

/* Posts job j's call on n elements at p (a segment, or a piece of one
 * for an all-reduce) in place; MPI's return code. */
static int mpi_post(mpi_job *j, void *p, size_t n, MPI_Datatype type) {
  MPI_Request *r = &j->reqs[j->nreqs];
  size_t per = n / (size_t)job.size; /* a segment's piece, for the other two */
  switch (j->kind) {
  case MPI_JOB_ALLREDUCE: return MPI_Iallreduce(MPI_IN_PLACE, p, (int)n, type, MPI_SUM, j->comm, r);
  case MPI_JOB_REDUCE_SCATTER: return MPI_Ireduce_scatter_block(MPI_IN_PLACE, p, (int)per, type, MPI_SUM, j->comm, r);
  case MPI_JOB_ALL_GATHER:
    return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, (int)(per * tfg_dtype_size(j->dt)), MPI_BYTE, j->comm,
                          r);
  }
  return MPI_ERR_OTHER;
}

/* Runs on the leader's stream: posts each segment's collective over the
 * processes in place (MPI counts are ints: a segment past 2^31 elements
 * in pieces) and hands the job to the progress thread. */
static tfg_status mpi_post_kernel(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  (void)out;
  mpi_job *j = in[0].data;
  MPI_Datatype type = j->dt == TFG_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
  int cap = 0;
  for (int k = 0; k < j->nseg; k++) cap += (int)(j->counts[k] / (size_t)INT32_MAX) + 1;
  j->reqs = malloc(sizeof *j->reqs * (size_t)(cap + 1));
  TFG_ASSERT(j->reqs != NULL);
  static const char *const calls[] = {"MPI_Iallreduce", "MPI_Ireduce_scatter_block", "MPI_Iallgather"};
  size_t es = tfg_dtype_size(j->dt);
  for (int k = 0; k < j->nseg; k++) {
    /* an all-reduce in pieces of at most 2^31 - 1 elements; the others one
     * call a segment (an int counts a piece's bytes: checked when queued) */
    size_t step = j->kind == MPI_JOB_ALLREDUCE ? (size_t)INT32_MAX : j->counts[k];
    for (size_t done = 0; done < j->counts[k]; done += step) {
      size_t n = j->counts[k] - done < step ? j->counts[k] - done : step;
      int rc = mpi_post(j, (char *)j->bufs[k] + done * es, n, type);
      if (rc != MPI_SUCCESS) {
        tfg_strbuf why = {0};
        mpi_error(&why, calls[j->kind], rc);
        tfg_status st = tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "a collective across the job's processes: %s", why.data);
        /* the requests posted so far still run; their sums are not used */
        MPI_Waitall(j->nreqs, j->reqs, MPI_STATUSES_IGNORE);
        tfg_event_complete(j->done, j->gen, st, why.data);
        tfg_strbuf_free(&why);
        job_free(j);
        return st;
      }
      j->nreqs++;
    }
  }
  progress_push(j);
  return TFG_OK;
}

static const char *mpi_name(tfg_coll *c) {
  (void)c;
  return "mpi";
}

/* Queues a job of kind on the leader's stream, then the wait for it. */
static void mpi_queue(tfg_coll *c, mpi_kind kind, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                      double scale) {
  mpi_coll *m = c->ctx;
  TFG_ASSERT(kind == MPI_JOB_ALL_GATHER || dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64);
  for (int k = 0; kind != MPI_JOB_ALLREDUCE && k < nseg; k++) /* one message a piece: an int counts it */
    TFG_ASSERT(counts[k] % (size_t)job.size == 0 && counts[k] / (size_t)job.size * tfg_dtype_size(dt) <= INT32_MAX);
  mpi_job *j = calloc(1, sizeof *j);
  TFG_ASSERT(j != NULL);
  j->kind = kind;
  j->comm = m->comm;
  j->nseg = nseg;
  j->dt = dt;
  j->scale = scale;
  j->bufs = malloc(sizeof *j->bufs * (size_t)(nseg + 1));
  j->counts = malloc(sizeof *j->counts * (size_t)(nseg + 1));
  TFG_ASSERT(j->bufs && j->counts);
  for (int k = 0; k < nseg; k++) {
    j->bufs[k] = bufs[k];
    j->counts[k] = counts[k];
  }
  j->done = tfg_event_ref(m->done);
  j->gen = tfg_event_issue(m->done, -1); /* the generation the wait below waits for */
  j->self.data = j;
  tfg_backend_launch(m->b, m->s, mpi_post_kernel, &m->ctx, &m->node, &j->self, NULL);
  tfg_backend_event_wait(m->b, m->s, m->done);
}

static void mpi_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                 double scale) {
  mpi_queue(c, MPI_JOB_ALLREDUCE, bufs, counts, nseg, dt, scale);
}

static void mpi_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                          tfg_coll_op op) {
  mpi_allreduce_scaled(c, bufs, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / job.size : 1.0);
}

static void mpi_reduce_scatter(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                               double scale) {
  mpi_queue(c, MPI_JOB_REDUCE_SCATTER, bufs, counts, nseg, dt, scale);
}

static void mpi_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  mpi_queue(c, MPI_JOB_ALL_GATHER, bufs, counts, nseg, dt, 1.0);
}

static void mpi_free(tfg_coll *c) {
  if (!c) return;
  mpi_coll *m = c->ctx;
  /* the executor frees its collectives once the streams are done; the
   * communicator goes with MPI_Finalize */
  tfg_strbuf_free(&m->ctx.err);
  tfg_event_unref(m->done);
  if (job.started) MPI_Comm_free(&m->comm); /* its calls are done: the streams ran them */
  free(m);
  free(c);
}

static const tfg_coll_i mpi_i = {.name = mpi_name, .allreduce = mpi_allreduce, .allreduce_scaled = mpi_allreduce_scaled,
                                  .reduce_scatter = mpi_reduce_scatter, .all_gather = mpi_all_gather, .free = mpi_free};

/* The leaders' step: one rank (this process's leader) among the job's
 * processes. */
static tfg_coll *mpi_coll_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  TFG_ASSERT(nranks == 1);
  if (!job.started) {
    tfg_strbuf_puts(why, "an all-reduce across processes outside an mpirun job");
    return NULL;
  }
  mpi_coll *m = calloc(1, sizeof *m);
  TFG_ASSERT(m != NULL);
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  if (rc != MPI_SUCCESS) {
    mpi_error(why, "MPI_Comm_dup", rc);
    free(m);
    return NULL;
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  m->b = b[0];
  m->s = s[0];
  m->node.op = TFG_OP_ALLREDUCE;
  m->done = tfg_event_new();
  tfg_coll *c = tfg_coll_new(&mpi_i, 1, m);
  c->processes = job.size;
  c->process = job.rank;
  return c;
}

tfg_coll *tfg_mpi_job_coll_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  for (int r = 0; r < nranks; r++)
    if (!tfg_backend_is_host(b[r])) {
      tfg_strbuf_printf(why, "%s is not a host device: across the processes of an mpirun job, this version reduces "
                             "host devices only (CUDA devices need NCCL's bootstrap over MPI)",
                        tfg_backend_device(b[r])->name);
      return NULL;
    }
  int *group = calloc((size_t)nranks, sizeof *group); /* this process's ranks: one group */
  TFG_ASSERT(group != NULL);
  tfg_coll *c = tfg_coll_hier_outer_new(nranks, b, s, group, mpi_coll_new, why);
  free(group);
  return c;
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

void tfg_mpi_mean(double *v, int n) {
  (void)v;
  (void)n;
}

bool tfg_mpi_bcast(void *buf, size_t n, bool ok) {
  (void)buf;
  (void)n;
  return ok;
}

void tfg_mpi_gather(const char *text, tfg_strbuf *all) { tfg_strbuf_printf(all, "rank 0:\n%s", text); }

const tfg_transport *tfg_mpi_transport(void) { return NULL; }

void tfg_mpi_flush(void) {}

void tfg_mpi_bcast_from(int root, void *buf, size_t n) {
  (void)root;
  (void)buf;
  (void)n;
}

void tfg_mpi_abort(int code) { (void)code; }

struct tfg_coll *tfg_mpi_job_coll_new(int nranks, struct tfg_backend *const *b, struct tfg_stream *const *s,
                                      tfg_strbuf *why) {
  (void)nranks;
  (void)b;
  (void)s;
  tfg_strbuf_puts(why, "this build has no MPI");
  return NULL;
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

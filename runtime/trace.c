/* runtime/trace.c: the run trace of runtime/trace.h: slices collected
 * from any thread under one mutex, written as Chrome Trace Event Format
 * JSON (the object form, which Perfetto and chrome://tracing both load).
 *
 * Storage. A run records a slice per operation, so a long run has
 * millions of slices with a few dozen distinct names ("matmul", "copy",
 * "wait"...). Names and categories are therefore interned: each distinct
 * string is copied once into a table (an open-addressing hash set), and a
 * slice holds two indices into it, which keeps a slice at 32 bytes and an
 * append free of allocation once the table has its names.
 *
 * Writing. The whole document is built in memory under the mutex (so a
 * slice added meanwhile is either in it or not, never half), then written
 * to "<path>.tmp.<pid>.<n>" beside the target, synced, and renamed over
 * it, and the folder synced: a crash leaves the old file or the new one,
 * never a torn one (as runtime/ckpt.c saves checkpoints). Slices are
 * sorted by start time, then track, so the file reads in time order and
 * is deterministic for given slices. Every track that has a slice or a
 * name gets "M" events: process_name / thread_name (the name given with
 * tfg_trace_name, or "device PID" / "stream TID" when none was) and
 * process_sort_index = pid / thread_sort_index = tid, so viewers list
 * devices in index order and each device's streams in creation order
 * rather than by first appearance. Strings are written by base/json.h:
 * bytes that are not valid UTF-8 become U+FFFD, since a JSON parser
 * rejects them and a single bad name must not make the whole trace
 * unreadable. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/grow.h"
#include "base/json.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "runtime/trace.h"

typedef struct trace_slice {
  int pid, tid;
  uint32_t name, cat; /* indices into the string table */
  uint32_t label;     /* its index, or NO_LABEL */
  double t0, t1;      /* tfg_trace_now seconds */
} trace_slice;

#define NO_LABEL UINT32_MAX

/* A table of launch labels (tfg_trace_label_nodes). */
typedef struct trace_labels {
  const tfg_node *nodes;
  int32_t n;
  const char *const *labels;
} trace_labels;

typedef struct trace_track_name {
  int pid, tid;
  char *process, *thread; /* NULL: not given */
} trace_track_name;

struct tfg_trace {
  pthread_mutex_t mu; /* guards everything below; taken by write too */
  double created;     /* tfg_trace_now at tfg_trace_new: ts 0 */
  trace_slice *slices;
  size_t nslices, slices_cap;
  trace_track_name *names;
  size_t nnames, names_cap;
  /* Interned strings: strs[i] is string i; set is a hash set of indices
   * + 1 (0: empty slot), its size a power of two kept at most half full. */
  char **strs;
  size_t nstrs, strs_cap;
  uint32_t *set;
  size_t set_cap;
  trace_labels *tables; /* set outside runs, read by the workers during them */
  size_t ntables, tables_cap;
};

double tfg_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

tfg_trace *tfg_trace_new(void) {
  tfg_trace *t = calloc(1, sizeof *t);
  TFG_ASSERT(t != NULL);
  pthread_mutex_init(&t->mu, NULL);
  t->created = tfg_trace_now();
  return t;
}

void tfg_trace_free(tfg_trace *t) {
  if (!t) return;
  for (size_t i = 0; i < t->nstrs; i++) free(t->strs[i]);
  for (size_t i = 0; i < t->nnames; i++) {
    free(t->names[i].process);
    free(t->names[i].thread);
  }
  void *arrays[] = {t->strs, t->set, t->slices, t->names, t->tables};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static char *dup_str(const char *s) {
  char *d = strdup(s);
  TFG_ASSERT(d != NULL);
  return d;
}

/* ---- the string table -------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Under t->mu: places string index i (already in strs) into the set. */
static void set_insert(tfg_trace *t, uint32_t i) {
  size_t mask = t->set_cap - 1;
  for (size_t k = hash_str(t->strs[i]) & mask;; k = (k + 1) & mask) {
    if (!t->set[k]) {
      t->set[k] = i + 1;
      return;
    }
  }
}

/* Under t->mu: the index of s in the table, copying it in when new. */
static uint32_t intern(tfg_trace *t, const char *s) {
  if (t->set_cap) {
    size_t mask = t->set_cap - 1;
    for (size_t k = hash_str(s) & mask; t->set[k]; k = (k + 1) & mask)
      if (strcmp(t->strs[t->set[k] - 1], s) == 0) return t->set[k] - 1;
  }
  TFG_ASSERT(t->nstrs < UINT32_MAX - 1);
  TFG_GROW(t->strs, t->nstrs, t->strs_cap, 16);
  uint32_t i = (uint32_t)t->nstrs;
  t->strs[t->nstrs++] = dup_str(s);
  if (2 * t->nstrs > t->set_cap) { /* rehash at half full: probes stay short */
    free(t->set);
    t->set_cap = t->set_cap ? 2 * t->set_cap : 64;
    t->set = calloc(t->set_cap, sizeof *t->set);
    TFG_ASSERT(t->set != NULL);
    for (uint32_t j = 0; j < t->nstrs; j++) set_insert(t, j);
  } else {
    set_insert(t, i);
  }
  return i;
}

/* ---- recording ------------------------------------------------------------------ */

/* A later call for the same track replaces the names it gives; a NULL
 * name leaves that one as it was (so a caller may name only a thread). */
void tfg_trace_name(tfg_trace *t, int pid, int tid, const char *process, const char *thread) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  trace_track_name *n = NULL;
  for (size_t i = 0; i < t->nnames; i++)
    if (t->names[i].pid == pid && t->names[i].tid == tid) n = &t->names[i];
  if (!n) {
    TFG_GROW(t->names, t->nnames, t->names_cap, 8);
    n = &t->names[t->nnames++];
    *n = (trace_track_name){.pid = pid, .tid = tid};
  }
  if (process) {
    free(n->process);
    n->process = dup_str(process);
  }
  if (thread) {
    free(n->thread);
    n->thread = dup_str(thread);
  }
  pthread_mutex_unlock(&t->mu);
}

void tfg_trace_add_labeled(tfg_trace *t, int pid, int tid, const char *name, const char *label, const char *cat, double t0,
                      double t1) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  TFG_GROW(t->slices, t->nslices, t->slices_cap, 1024);
  trace_slice *s = &t->slices[t->nslices++];
  s->pid = pid;
  s->tid = tid;
  s->name = intern(t, name ? name : "");
  s->cat = intern(t, cat ? cat : "");
  s->label = label ? intern(t, label) : NO_LABEL;
  s->t0 = t0;
  s->t1 = t1;
  pthread_mutex_unlock(&t->mu);
}

void tfg_trace_add(tfg_trace *t, int pid, int tid, const char *name, const char *cat, double t0, double t1) {
  tfg_trace_add_labeled(t, pid, tid, name, NULL, cat, t0, t1);
}

void tfg_trace_label_nodes(tfg_trace *t, const tfg_node *nodes, int32_t n, const char *const *labels) {
  if (!t) return;
  TFG_GROW(t->tables, t->ntables, t->tables_cap, 4);
  t->tables[t->ntables++] = (trace_labels){nodes, n, labels};
}

void tfg_trace_unlabel_nodes(tfg_trace *t, const tfg_node *nodes) {
  for (size_t i = 0; t && i < t->ntables; i++)
    if (t->tables[i].nodes == nodes) t->tables[i--] = t->tables[--t->ntables];
}

const char *tfg_trace_label_of(const tfg_trace *t, const tfg_node *node) {
  for (size_t i = 0; t && node && i < t->ntables; i++) {
    const trace_labels *tb = &t->tables[i];
    uintptr_t at = (uintptr_t)node, lo = (uintptr_t)tb->nodes; /* pointers into other arrays compare as integers */
    if (at >= lo && at < lo + (uintptr_t)tb->n * sizeof *node) return tb->labels[(at - lo) / sizeof *node];
  }
  return NULL;
}

void tfg_trace_add_launch(tfg_trace *t, int pid, int tid, const tfg_node *node, double t0, double t1) {
  tfg_trace_add_labeled(t, pid, tid, node ? tfg_op_get(node->op)->name : "kernel", tfg_trace_label_of(t, node), "op", t0,
                        t1);
}

/* ---- writing --------------------------------------------------------------------- */

static int cmp_slice(const void *a, const void *b) {
  const trace_slice *x = a, *y = b;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return (x->t1 > y->t1) - (x->t1 < y->t1); /* the enclosing slice first */
}

typedef struct track {
  int pid, tid;
  const char *process, *thread; /* NULL: not named */
} track;

static int cmp_track(const void *a, const void *b) {
  const track *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return (x->tid > y->tid) - (x->tid < y->tid);
}

/* Under t->mu: every track with a slice or a name, sorted by (pid, tid),
 * one entry each, carrying the names given. The caller frees. */
static track *collect_tracks(const tfg_trace *t, size_t *ntracks) {
  size_t n = t->nnames + t->nslices, k = 0;
  track *tr = malloc((n ? n : 1) * sizeof *tr);
  TFG_ASSERT(tr != NULL);
  for (size_t i = 0; i < t->nnames; i++)
    tr[k++] = (track){t->names[i].pid, t->names[i].tid, t->names[i].process, t->names[i].thread};
  for (size_t i = 0; i < t->nslices; i++) tr[k++] = (track){t->slices[i].pid, t->slices[i].tid, NULL, NULL};
  /* qsort is not stable, so merge duplicates by taking any name given. */
  qsort(tr, k, sizeof *tr, cmp_track);
  size_t m = 0;
  for (size_t i = 0; i < k; i++) {
    if (m && tr[m - 1].pid == tr[i].pid && tr[m - 1].tid == tr[i].tid) {
      if (!tr[m - 1].process) tr[m - 1].process = tr[i].process;
      if (!tr[m - 1].thread) tr[m - 1].thread = tr[i].thread;
      continue;
    }
    tr[m++] = tr[i];
  }
  *ntracks = m;
  return tr;
}

/* Microseconds since the trace's creation: the unit of ts and dur. */
static double usec(const tfg_trace *t, double when) { return (when - t->created) * 1e6; }

/* Under t->mu: the JSON document into *b. */
static void render(const tfg_trace *t, tfg_strbuf *b) {
  size_t ntracks;
  track *tr = collect_tracks(t, &ntracks);
  tfg_strbuf_puts(b, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  const char *sep = "\n";
  tfg_strbuf name = {0};
  for (size_t i = 0; i < ntracks; i++) {
    /* A process's name and sort index go once, with its first track; one
     * name per process, so the first track that gives one names it. */
    if (i == 0 || tr[i].pid != tr[i - 1].pid) {
      const char *process = NULL;
      for (size_t j = i; j < ntracks && tr[j].pid == tr[i].pid && !process; j++) process = tr[j].process;
      tfg_strbuf_clear(&name);
      if (process)
        tfg_strbuf_puts(&name, process);
      else
        tfg_strbuf_printf(&name, "device %d", tr[i].pid);
      tfg_strbuf_printf(b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", sep,
                        tr[i].pid);
      tfg_json_put_string(b, name.data);
      tfg_strbuf_puts(b, "}}");
      sep = ",\n";
      tfg_strbuf_printf(b, "%s{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                           "\"args\":{\"sort_index\":%d}}", sep, tr[i].pid, tr[i].pid);
    }
    tfg_strbuf_clear(&name);
    if (tr[i].thread)
      tfg_strbuf_puts(&name, tr[i].thread);
    else
      tfg_strbuf_printf(&name, "stream %d", tr[i].tid);
    tfg_strbuf_printf(b, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", sep,
                      tr[i].pid, tr[i].tid);
    tfg_json_put_string(b, name.data);
    tfg_strbuf_puts(b, "}}");
    tfg_strbuf_printf(b, "%s{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                         "\"args\":{\"sort_index\":%d}}", sep, tr[i].pid, tr[i].tid, tr[i].tid);
  }
  tfg_strbuf_free(&name);
  free(tr);

  trace_slice *sl = NULL;
  if (t->nslices) {
    sl = malloc(t->nslices * sizeof *sl);
    TFG_ASSERT(sl != NULL);
    memcpy(sl, t->slices, t->nslices * sizeof *sl);
    qsort(sl, t->nslices, sizeof *sl, cmp_slice);
  }
  for (size_t i = 0; i < t->nslices; i++) {
    double ts = usec(t, sl[i].t0), dur = usec(t, sl[i].t1) - ts;
    if (dur < 0) dur = 0; /* a slice given backwards: keep it, as an instant */
    tfg_strbuf_printf(b, "%s{\"name\":", sep);
    if (sl[i].label != NO_LABEL) { /* "fwd s1 m3 matmul" */
      tfg_strbuf lab = {0};
      tfg_strbuf_printf(&lab, "%s %s", t->strs[sl[i].label], t->strs[sl[i].name]);
      tfg_json_put_string(b, lab.data);
      tfg_strbuf_free(&lab);
    } else {
      tfg_json_put_string(b, t->strs[sl[i].name]);
    }
    tfg_strbuf_puts(b, ",\"cat\":");
    tfg_json_put_string(b, t->strs[sl[i].cat]);
    tfg_strbuf_printf(b, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", sl[i].pid, sl[i].tid, ts,
                      dur);
    sep = ",\n";
  }
  free(sl);
  tfg_strbuf_puts(b, "\n]}\n");
}

tfg_status tfg_trace_write(const tfg_trace *t, const char *path, tfg_strbuf *err) {
  TFG_ASSERT(t != NULL && path != NULL);
  tfg_strbuf doc = {0};
  /* t is const to the caller (writing does not change the trace); the
   * mutex is the one part a reader must still take. */
  pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu;
  pthread_mutex_lock(mu);
  render(t, &doc);
  pthread_mutex_unlock(mu);

  /* Whole or not at all, through a symlink, never over a device or FIFO
   * (base/file.h); a temporary per call, so threads may write one path. */
  tfg_status st = TFG_OK;
  tfg_file_out o;
  const char *why = NULL;
  if (tfg_file_out_begin(&o, path, TFG_FILE_OUT_UNIQUE, &why) != 0) {
    if (err) tfg_strbuf_printf(err, "cannot write trace '%s': %s", path, why);
    st = TFG_ERR_IO;
  } else {
    tfg_file_out_write(&o, doc.data, doc.len);
    if (tfg_file_out_commit(&o) != 0) {
      if (err) tfg_strbuf_printf(err, "cannot write trace '%s': %s '%s': %s", path, o.step, o.failed, strerror(o.err));
      st = TFG_ERR_IO;
    }
    tfg_file_out_end(&o);
  }
  tfg_strbuf_free(&doc);
  return st;
}

typedef struct prof_row {
  uint32_t name, cat;
  int64_t calls;
  double total;
} prof_row;

static int prof_cmp(const void *a, const void *b) {
  const prof_row *x = a, *y = b;
  return (x->total < y->total) - (x->total > y->total);
}

void tfg_trace_profile(tfg_trace *t, tfg_strbuf *out) {
  pthread_mutex_lock(&t->mu);
  /* one row per (name, category): the string table indexes both */
  prof_row *rows = NULL;
  size_t nrows = 0, cap = 0;
  for (size_t i = 0; i < t->nslices; i++) {
    const trace_slice *sl = &t->slices[i];
    size_t r = 0;
    while (r < nrows && (rows[r].name != sl->name || rows[r].cat != sl->cat)) r++;
    if (r == nrows) {
      TFG_GROW(rows, nrows, cap, 64);
      rows[nrows++] = (prof_row){.name = sl->name, .cat = sl->cat};
    }
    rows[r].calls++;
    rows[r].total += sl->t1 - sl->t0;
  }
  if (nrows > 1) qsort(rows, nrows, sizeof *rows, prof_cmp);
  tfg_strbuf_printf(out, "%-24s %-10s %8s %12s %12s %7s\n", "name", "category", "calls", "total ms", "mean us", "share");
  for (size_t r = 0; r < nrows; r++) {
    double cat_total = 0;
    for (size_t q = 0; q < nrows; q++)
      if (rows[q].cat == rows[r].cat) cat_total += rows[q].total;
    tfg_strbuf_printf(out, "%-24s %-10s %8lld %12.3f %12.1f %6.1f%%\n", t->strs[rows[r].name], t->strs[rows[r].cat],
                      (long long)rows[r].calls, 1e3 * rows[r].total, 1e6 * rows[r].total / (double)rows[r].calls,
                      cat_total > 0 ? 100 * rows[r].total / cat_total : 0.0);
  }
  free(rows);
  pthread_mutex_unlock(&t->mu);
}

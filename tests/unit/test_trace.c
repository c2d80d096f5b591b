/* tests/unit/test_trace.c: the run trace (runtime/trace.c) and the host
 * backend's tracing (set_trace in runtime/backend_host.c).
 *
 * A trace written with slices from several threads at once is read back
 * and checked three ways: a strict JSON parser in C (the whole grammar,
 * so a missing comma or a raw control character fails), exact text of
 * the events we expect (the writer's format is fixed: a slice is
 * {"name":...,"cat":...,"ph":"X","pid":P,"tid":T,"ts":...,"dur":...}),
 * and, when python3 is on the machine, json.load plus checks of the
 * decoded values (names with quotes, backslashes, control characters and
 * invalid UTF-8 round-trip; every slice counted; metadata per track;
 * slices in time order). Writes that fail (a missing folder, a target
 * that is a folder) return TFG_ERR_IO with the path and the reason and
 * leave no temporary behind. The backend test runs kernels, the three
 * copies, a reduction and a wait that blocks on two host devices and
 * checks each slice's name, category, process and thread. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/trace.h"
#include "tests/unit/scratch.h"
#include "tests/unit/unit.h"

/* ---- a strict JSON checker ------------------------------------------------------ */

typedef struct jp {
  const char *p, *end;
  int depth;
} jp;

static bool j_value(jp *j);

static void j_ws(jp *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static bool j_lit(jp *j, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return false;
  j->p += n;
  return true;
}

static bool j_string(jp *j) {
  if (j->p >= j->end || *j->p != '"') return false;
  for (j->p++; j->p < j->end; j->p++) {
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      return true;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
      if (++j->p >= j->end) return false;
      if (*j->p == 'u') {
        for (int i = 0; i < 4; i++)
          if (++j->p >= j->end || !strchr("0123456789abcdefABCDEF", *j->p) || !*j->p) return false;
      } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
        return false;
      }
    }
  }
  return false;
}

static bool j_digits(jp *j) {
  const char *s = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  return j->p > s;
}

static bool j_number(jp *j) {
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p < j->end && *j->p == '0')
    j->p++;
  else if (!j_digits(j))
    return false;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (!j_digits(j)) return false;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (!j_digits(j)) return false;
  }
  return true;
}

/* '{' members '}' or '[' values ']' (close is the closing bracket). */
static bool j_container(jp *j, bool object) {
  char close = object ? '}' : ']';
  if (++j->depth > 64) return false;
  j->p++;
  j_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    j->depth--;
    return true;
  }
  for (;;) {
    j_ws(j);
    if (object) {
      if (!j_string(j)) return false;
      j_ws(j);
      if (j->p >= j->end || *j->p++ != ':') return false;
    }
    if (!j_value(j)) return false;
    j_ws(j);
    if (j->p >= j->end) return false;
    char c = *j->p++;
    if (c == close) break;
    if (c != ',') return false;
  }
  j->depth--;
  return true;
}

static bool j_value(jp *j) {
  j_ws(j);
  if (j->p >= j->end) return false;
  switch (*j->p) {
  case '{': return j_container(j, true);
  case '[': return j_container(j, false);
  case '"': return j_string(j);
  case 't': return j_lit(j, "true");
  case 'f': return j_lit(j, "false");
  case 'n': return j_lit(j, "null");
  default: return j_number(j);
  }
}

/* Whether text[0..len) is exactly one JSON value (and whitespace). */
static bool json_valid(const char *text, size_t len) {
  jp j = {text, text + len, 0};
  if (!j_value(&j)) return false;
  j_ws(&j);
  return j.p == j.end;
}

/* ---- helpers ------------------------------------------------------------------------ */

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* Entries of dir other than . and .., their names joined in *names. */
static int dir_entries(const char *dir, tfg_strbuf *names) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    tfg_strbuf_printf(names, "%s ", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

/* Runs python3 -c script with args (NULL-terminated, at most 8); returns
 * its exit status, or -1 when there is no python3 (the check is skipped). */
static int run_python(const char *script, const char *const *args) {
  char py[512];
  if (!test_find_python(py, sizeof py)) return -1;
  const char *argv[12] = {py, "-c", script};
  int n = 3;
  for (; args[n - 3] && n < 11; n++) argv[n] = args[n - 3];
  argv[n] = NULL;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execv(py, (char *const *)argv);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* A fresh folder of the test's own inside the scratch folder (the
 * fixture's folder is shared by the test case's tests), for tests that
 * list what a write left behind. */
static const char *own_folder(const char *name) {
  const char *dir = scratch_path(name);
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  return dir;
}

/* ---- the trace file ------------------------------------------------------------------ */

enum { NTHREADS = 4, PER_THREAD = 2000 };

typedef struct adder {
  tfg_trace *t;
  int k;
} adder;

static void *add_slices(void *arg) {
  adder *a = arg;
  char name[32];
  for (int i = 0; i < PER_THREAD; i++) {
    snprintf(name, sizeof name, "op%d", i % 10);
    double t0 = tfg_trace_now();
    tfg_trace_add(a->t, 1 + a->k % 2, a->k, name, i % 3 ? "op" : "copy", t0, t0 + 1e-6);
  }
  return NULL;
}

/* Decodes the file and checks it: argv = path, expected slice count,
 * the tricky name (as the script must decode it), the expected process
 * name of pid 1. */
static const char check_script[] =
    "import json, sys\n"
    "path, nx, tricky, p1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]\n"
    "with open(path, encoding='utf-8') as f: d = json.load(f)\n"
    "assert d['displayTimeUnit'] == 'ms'\n"
    "ev = d['traceEvents']\n"
    "xs = [e for e in ev if e['ph'] == 'X']\n"
    "ms = [e for e in ev if e['ph'] == 'M']\n"
    "assert len(xs) == nx, (len(xs), nx)\n"
    "assert all(e['ts'] >= 0 and e['dur'] >= 0 for e in xs)\n"
    "assert [e['ts'] for e in xs] == sorted(e['ts'] for e in xs)\n"
    "names = {e['name'] for e in xs}\n"
    "assert tricky in names, sorted(names)\n"
    "assert 'bad\\ufffdbyte' in names, sorted(names)\n"
    "tracks = {(e['pid'], e['tid']) for e in xs}\n"
    "for p, t in tracks:\n"
    "  assert any(m['name'] == 'thread_name' and (m['pid'], m['tid']) == (p, t) for m in ms), (p, t)\n"
    "  assert any(m['name'] == 'thread_sort_index' and (m['pid'], m['tid']) == (p, t)\n"
    "             and m['args']['sort_index'] == t for m in ms), (p, t)\n"
    "  assert any(m['name'] == 'process_sort_index' and m['pid'] == p and m['args']['sort_index'] == p\n"
    "             for m in ms), p\n"
    "pn = [m['args']['name'] for m in ms if m['name'] == 'process_name' and m['pid'] == 1]\n"
    "assert pn == [p1], pn\n";

START_TEST(trace_threads_and_escaping) {
  tfg_trace *t = tfg_trace_new();
  tfg_trace_name(t, 1, 0, "gpu:0 \"main\"", "compute");
  tfg_trace_name(t, 1, 2, NULL, "copies"); /* a thread only: the process keeps its name */
  tfg_trace_name(t, 2, 1, "gpu:1", NULL);
  tfg_trace_name(t, 2, 1, "gpu:1 renamed", "collective"); /* a later name replaces */
  pthread_t th[NTHREADS];
  adder a[NTHREADS];
  for (int k = 0; k < NTHREADS; k++) {
    a[k] = (adder){t, k};
    ck_assert_int_eq(pthread_create(&th[k], NULL, add_slices, &a[k]), 0);
  }
  /* Meanwhile, from this thread: names that need escaping. */
  const char tricky[] = "q\"uo\\te\n\t\x01/end";
  double now = tfg_trace_now();
  tfg_trace_add(t, 1, 0, tricky, "op", now, now + 0.001);  /* 1000 us */
  tfg_trace_add(t, 3, 5, "bad\xff" "byte", "we\"ird", now, now); /* not UTF-8; an unnamed track */
  tfg_trace_add(t, 3, 5, "backwards", "op", now, now - 1);      /* kept with dur 0 */
  for (int k = 0; k < NTHREADS; k++) ck_assert_int_eq(pthread_join(th[k], NULL), 0);
  const int nx = NTHREADS * PER_THREAD + 3;

  const char *dir = own_folder("threads");
  char path[512];
  snprintf(path, sizeof path, "%s/run.json", dir);
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_trace_write(t, path, &err), TFG_OK);
  ck_assert_uint_eq(err.len, 0);
  /* Written again over itself: a replace, not an error. */
  ck_assert_int_eq(tfg_trace_write(t, path, &err), TFG_OK);
  tfg_strbuf names = {0};
  ck_assert_int_eq(dir_entries(dir, &names), 1); /* no temporaries left */
  tfg_strbuf_free(&names);

  size_t len;
  char *text = scratch_read(path, &len);
  ck_assert_msg(json_valid(text, len), "not JSON:\n%.2000s", text);
  ck_assert_int_eq(count_of(text, "\"ph\":\"X\""), nx);
  int op3 = 0;
  for (int i = 0; i < PER_THREAD; i++) op3 += i % 10 == 3 && i % 3 != 0;
  ck_assert_int_eq(count_of(text, "\"name\":\"op3\",\"cat\":\"op\""), NTHREADS * op3);
  /* Escapes, exactly. */
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"q\\\"uo\\\\te\\n\\t\\u0001/end\","
                                     "\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":0,"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"bad\\ufffdbyte\",\"cat\":\"we\\\"ird\""));
  ck_assert_ptr_nonnull(strstr(text, ",\"dur\":1000.000}"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"backwards\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":3,\"tid\":5,"));
  /* Metadata: given names, defaults for unnamed tracks, sort indices. */
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
                                     "\"args\":{\"name\":\"gpu:0 \\\"main\\\"\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"pid\":2,\"tid\":0,\"args\":{\"name\":\"gpu:1 renamed\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"pid\":3,\"tid\":0,\"args\":{\"name\":\"device 3\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,"
                                     "\"args\":{\"name\":\"copies\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"pid\":2,\"tid\":1,\"args\":{\"name\":\"collective\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":3,\"tid\":5,"
                                     "\"args\":{\"name\":\"stream 5\"}}"));
  ck_assert_ptr_nonnull(strstr(text, "\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":2,\"tid\":3,"
                                     "\"args\":{\"sort_index\":3}}"));
  ck_assert_int_eq(count_of(text, "\"name\":\"process_name\""), 3);
  ck_assert_int_eq(count_of(text, "\"name\":\"process_sort_index\""), 3);
  /* Tracks: (1,0) (1,2) named, (2,1) named; slices on (1,0) (2,1) (1,2)
   * (2,3) (3,5): five tracks in all. */
  ck_assert_int_eq(count_of(text, "\"name\":\"thread_name\""), 5);
  ck_assert_int_eq(count_of(text, "\"name\":\"thread_sort_index\""), 5);

  char nxs[16];
  snprintf(nxs, sizeof nxs, "%d", nx);
  const char *args[] = {path, nxs, tricky, "gpu:0 \"main\"", NULL};
  int rc = run_python(check_script, args);
  ck_assert_msg(rc == 0 || rc == -1, "python3's check of %s failed (exit %d)", path, rc);
  free(text);
  tfg_strbuf_free(&err);
  tfg_trace_free(t);
}
END_TEST

START_TEST(trace_empty) {
  tfg_trace *t = tfg_trace_new();
  const char *path = scratch_path("empty.json");
  ck_assert_int_eq(tfg_trace_write(t, path, NULL), TFG_OK);
  size_t len;
  char *text = scratch_read(path, &len);
  ck_assert(json_valid(text, len));
  ck_assert_ptr_nonnull(strstr(text, "\"traceEvents\":["));
  free(text);
  tfg_trace_free(t);
  tfg_trace_free(NULL);
}
END_TEST

START_TEST(trace_write_errors) {
  tfg_trace *t = tfg_trace_new();
  tfg_trace_add(t, 1, 0, "x", "op", 0, 1);
  const char *dir = own_folder("errors");
  char missing[512], folder[512];
  /* A folder that does not exist. */
  snprintf(missing, sizeof missing, "%s/no/such/run.json", dir);
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_trace_write(t, missing, &err), TFG_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.data, missing));
  ck_assert_ptr_nonnull(strstr(err.data, "No such file or directory"));
  tfg_strbuf names = {0};
  ck_assert_int_eq(dir_entries(dir, &names), 0);
  /* A target that is a folder: refused before anything is written
   * (base/file.h), so no temporary is left. */
  snprintf(folder, sizeof folder, "%s/adir", dir);
  ck_assert_int_eq(mkdir(folder, 0777), 0);
  tfg_strbuf_clear(&err);
  ck_assert_int_eq(tfg_trace_write(t, folder, &err), TFG_ERR_IO);
  ck_assert_ptr_nonnull(strstr(err.data, "Is a directory"));
  tfg_strbuf_clear(&names);
  ck_assert_int_eq(dir_entries(dir, &names), 1);
  ck_assert_str_eq(names.data, "adir ");
  tfg_strbuf_clear(&names);
  ck_assert_int_eq(dir_entries(folder, &names), 0);
  /* No message buffer: only the status. */
  ck_assert_int_eq(tfg_trace_write(t, missing, NULL), TFG_ERR_IO);
  /* scratch_remove goes one folder deep: this one is ours to remove. */
  ck_assert_int_eq(rmdir(folder), 0);
  tfg_strbuf_free(&names);
  tfg_strbuf_free(&err);
  tfg_trace_free(t);
}
END_TEST

/* ---- the host backend's slices --------------------------------------------------------- */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  bool open;
} gate;

/* Blocks until the gate in in[0].data opens. */
static tfg_status gate_kernel(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)ctx;
  (void)node;
  (void)out;
  gate *g = in[0].data;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cond, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return TFG_OK;
}

static tfg_status nop_kernel(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)ctx;
  (void)node;
  (void)in;
  (void)out;
  return TFG_OK;
}

static void sync_ok(tfg_backend *b, tfg_stream *s) {
  tfg_strbuf err = {0};
  tfg_status st = tfg_backend_synchronize(b, s, &err);
  ck_assert_msg(st == TFG_OK, "synchronize: %s", err.data ? err.data : "");
  tfg_strbuf_free(&err);
}

/* The "dur" of the first slice whose text starts with prefix, or -1. */
static double dur_of(const char *text, const char *prefix) {
  const char *p = strstr(text, prefix);
  if (!p) return -1;
  p = strstr(p, "\"dur\":");
  return p ? atof(p + 6) : -1;
}

START_TEST(backend_slices) {
  tfg_diag *diag = tfg_diag_new();
  tfg_devices *ds;
  ck_assert_int_eq(tfg_devices_parse(diag, "host*2:64M", &ds), TFG_OK);
  const tfg_device *d0 = tfg_devices_gpu(ds, 0), *d1 = tfg_devices_gpu(ds, 1);
  ck_assert_int_eq(d0->index, 1);
  ck_assert_int_eq(d1->index, 2);
  tfg_backend *a = tfg_backend_host_new(d0), *b = tfg_backend_host_new(d1);
  /* Stream ids are the creation order, not the position among live ones. */
  tfg_stream *gone = tfg_backend_stream_create(a);
  tfg_stream *sa1 = tfg_backend_stream_create(a);
  tfg_backend_stream_free(a, gone);
  tfg_stream *sa2 = tfg_backend_stream_create(a), *sb = tfg_backend_stream_create(b);
  tfg_trace *t = tfg_trace_new();
  tfg_backend_set_trace(a, t);
  tfg_backend_set_trace(b, t);

  gate g = {.open = false};
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cond, NULL);
  tfg_kernel_ctx kctx = {0};
  tfg_node mm = {0};
  mm.op = TFG_OP_MATMUL;
  tfg_tensor gin = {.data = &g}, out = {0};
  float host[64], da[64], db[64], back[64];
  for (int i = 0; i < 64; i++) host[i] = (float)i, db[i] = 1;
  tfg_event *e = tfg_backend_event_create(a);

  tfg_backend_launch(a, sa1, gate_kernel, &kctx, &mm, &gin, &out);   /* "matmul", held until opened */
  tfg_backend_copy_from_host(a, sa1, da, host, sizeof da);           /* "h2d" */
  tfg_backend_event_record(a, sa1, e);                               /* no slice */
  tfg_backend_copy_to_host(a, sa2, back, host, sizeof back);         /* "d2h" on stream 2 */
  tfg_backend_event_wait(b, sb, e);                                  /* blocks: "wait" */
  tfg_backend_copy_peer(b, sb, db, a, da, sizeof db);                /* "copy" */
  tfg_backend_reduce_peer(b, sb, db, a, da, 64, TFG_DTYPE_F32, 1.0); /* "reduce" */
  /* Keep the gate shut a while, so b's worker finds its wait blocked:
   * long enough for it to be scheduled even on a loaded machine (at 50
   * ms, two cores running a parallel build missed it). */
  struct timespec ts = {0, 400 * 1000 * 1000};
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&g.mu);
  g.open = true;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.mu);
  sync_ok(a, sa1);
  sync_ok(a, sa2);
  sync_ok(b, sb);
  for (int i = 0; i < 64; i++) ck_assert_float_eq(db[i], 2.0f * (float)i);
  /* A wait on an event already done does not block: no slice. */
  tfg_backend_event_wait(b, sb, e);
  sync_ok(b, sb);
  /* Tracing off: nothing more is recorded; the trace may go at once. */
  tfg_backend_set_trace(a, NULL);
  tfg_backend_set_trace(b, NULL);
  tfg_backend_launch(a, sa1, nop_kernel, &kctx, &mm, &gin, &out);
  tfg_backend_copy_peer(b, sb, db, a, da, sizeof db);
  sync_ok(a, sa1);
  sync_ok(b, sb);

  const char *path = scratch_path("backend.json");
  ck_assert_int_eq(tfg_trace_write(t, path, NULL), TFG_OK);
  tfg_trace_free(t);
  size_t len;
  char *text = scratch_read(path, &len);
  ck_assert(json_valid(text, len));
  ck_assert_int_eq(count_of(text, "\"ph\":\"X\""), 6);
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"matmul\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":1,"));
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"h2d\",\"cat\":\"copy\",\"ph\":\"X\",\"pid\":1,\"tid\":1,"));
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"d2h\",\"cat\":\"copy\",\"ph\":\"X\",\"pid\":1,\"tid\":2,"));
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"X\",\"pid\":2,\"tid\":0,"));
  ck_assert_ptr_nonnull(strstr(text, "{\"name\":\"reduce\",\"cat\":\"collective\",\"ph\":\"X\",\"pid\":2,\"tid\":0,"));
  const char *wait = "{\"name\":\"wait\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":2,\"tid\":0,";
  ck_assert_int_eq(count_of(text, "\"name\":\"wait\""), 1);
  /* The gate was shut 50 ms after the wait was queued: the blocked time
   * is most of that (a loose bound, for a loaded machine). */
  double wd = dur_of(text, wait), md = dur_of(text, "{\"name\":\"matmul\"");
  ck_assert_msg(wd >= 5000, "wait slice of %.3f us", wd);
  ck_assert_msg(md >= 5000, "matmul slice of %.3f us", md);
  free(text);

  tfg_backend_event_free(a, e);
  tfg_backend_destroy(a);
  tfg_backend_destroy(b);
  tfg_strbuf_free(&kctx.err);
  pthread_mutex_destroy(&g.mu);
  pthread_cond_destroy(&g.cond);
  tfg_devices_free(ds);
  tfg_diag_free(diag);
}
END_TEST

/* ---- the JSON string writer every JSON file shares (base/json.h) ------- */

/* tfg_json_put_stringn(s[0..n)) is exactly want. */
static void expect_json(const char *s, size_t n, const char *want) {
  tfg_strbuf b = {0};
  tfg_json_put_stringn(&b, s, n);
  ck_assert_msg(b.data && strcmp(b.data, want) == 0, "got %s, want %s", b.data ? b.data : "(nothing)", want);
  tfg_strbuf_free(&b);
}
#define EXPECT_JSON(lit, want) expect_json(lit, sizeof lit - 1, want)

/* serde_json's escapes (a checkpoint header must be byte-identical to the
 * reference writer's), valid UTF-8 raw, and one \ufffd per byte that is
 * not part of valid UTF-8 (place --json wrote such bytes raw: invalid
 * JSON). */
START_TEST(json_strings) {
  EXPECT_JSON("", "\"\"");
  EXPECT_JSON("h.w", "\"h.w\"");
  EXPECT_JSON("q\"\\/", "\"q\\\"\\\\/\"");
  EXPECT_JSON("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
  EXPECT_JSON("\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\""); /* DEL is not a JSON control */
  EXPECT_JSON("a\0b", "\"a\\u0000b\"");
  EXPECT_JSON("\xc3\xbc\xe2\x82\xac\xf0\x9f\x99\x82\xe2\x80\xa8", "\"\xc3\xbc\xe2\x82\xac\xf0\x9f\x99\x82\xe2\x80\xa8\"");
  EXPECT_JSON("bad\xffname", "\"bad\\ufffdname\"");
  EXPECT_JSON("\xc3", "\"\\ufffd\"");                         /* cut short */
  EXPECT_JSON("\xc0\xaf", "\"\\ufffd\\ufffd\"");             /* overlong '/' */
  EXPECT_JSON("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");  /* a surrogate */
  EXPECT_JSON("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* past U+10FFFF */
  EXPECT_JSON("\xe2\x82\"", "\"\\ufffd\\ufffd\\\"\""); /* a quote inside a broken sequence */
  tfg_strbuf b = {0};
  tfg_json_put_string(&b, "x\n");
  tfg_json_put_string(&b, "\xfe");
  ck_assert_str_eq(b.data, "\"x\\n\"\"\\ufffd\"");
  tfg_strbuf_free(&b);
}
END_TEST

Suite *suite_trace(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, trace_threads_and_escaping);
  tcase_add_test(tc, trace_empty);
  tcase_add_test(tc, trace_write_errors);
  tcase_add_test(tc, backend_slices);
  suite_add_tcase(s, tc);
  tc = tcase_create("json");
  tcase_add_test(tc, json_strings);
  suite_add_tcase(s, tc);
  return s;
}

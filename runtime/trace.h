/* runtime/trace.h: a Chrome/Perfetto trace of a run (--trace FILE.json):
 * one process per device, one track (thread) per stream, a slice per
 * operation (kernels, copies, collectives, waits).
 *
 *   tfg_trace *t = tfg_trace_new();
 *   tfg_trace_name(t, 1, 0, "gpu:0", "compute");   // device 1, stream 0
 *   double t0 = tfg_trace_now();
 *   ... tfg_trace_add(t, 1, 0, "matmul", "op", t0, tfg_trace_now());  // any thread
 *   tfg_trace_write(t, "run.json", &err);          // atomically
 *   tfg_trace_free(t);
 *
 * The file is the Trace Event Format's JSON object form
 * ({"traceEvents": [...], "displayTimeUnit": "ms"}): "X" (complete)
 * events with ts and dur in microseconds from the trace's creation, and
 * "M" (metadata) events naming processes and threads. */
#ifndef TFG_TRACE_H
#define TFG_TRACE_H

#include <stdint.h>

#include "base/status.h"
#include "base/strbuf.h"

typedef struct tfg_trace tfg_trace;

tfg_trace *tfg_trace_new(void);
void tfg_trace_free(tfg_trace *t);
/* Seconds on the monotonic clock. */
double tfg_trace_now(void);
/* Names process pid (a device) and its thread tid (a stream). A NULL
 * name leaves that one as it was; a later call replaces earlier names.
 * Tracks never named are written as "device PID" and "stream TID". */
void tfg_trace_name(tfg_trace *t, int pid, int tid, const char *process, const char *thread);
/* Adds a slice [t0, t1] (tfg_trace_now seconds) on track (pid, tid).
 * name and cat are copied. Safe from any thread. */
void tfg_trace_add(tfg_trace *t, int pid, int tid, const char *name, const char *cat, double t0, double t1);

/* Launch labels: what a launch of a node did in a schedule ("fwd s1 m3":
 * a pipeline's forward of micro-batch 3 on stage 1), written before its
 * op's name ("fwd s1 m3 matmul"), so a 1F1B staircase reads in Perfetto.
 * tfg_trace_label_nodes gives labels[i] (NULL: none) to nodes[i] for i <
 * n (a graph's nodes, or an executor's fused ones); the arrays are the
 * caller's, read while launches are added, until tfg_trace_unlabel_nodes
 * (nodes) or the trace's end. Set both outside a run. */
struct tfg_node;
void tfg_trace_label_nodes(tfg_trace *t, const struct tfg_node *nodes, int32_t n, const char *const *labels);
void tfg_trace_unlabel_nodes(tfg_trace *t, const struct tfg_node *nodes);
/* The label of node (NULL: none). */
const char *tfg_trace_label_of(const tfg_trace *t, const struct tfg_node *node);
/* tfg_trace_add with the label to write before name (NULL: none). */
void tfg_trace_add_labeled(tfg_trace *t, int pid, int tid, const char *name, const char *label, const char *cat,
                           double t0, double t1);
/* tfg_trace_add of a kernel launch of node (NULL: an anonymous kernel):
 * named by its op, labelled by its label (category "op"). Safe from any
 * thread. */
void tfg_trace_add_launch(tfg_trace *t, int pid, int tid, const struct tfg_node *node, double t0, double t1);
/* Writes the trace to path through a temporary file and a rename.
 * Returns TFG_OK or TFG_ERR_IO with the reason in *err. */
tfg_status tfg_trace_write(const tfg_trace *t, const char *path, tfg_strbuf *err);
/* tfg run --profile: the slices grouped by name, all devices together,
 * as a table into out (torch.profiler's key_averages().table()): per
 * name its category, calls, total and mean time and share of the total
 * of its category, by total time, longest first. */
void tfg_trace_profile(tfg_trace *t, tfg_strbuf *out);

#endif

/* compiler/place.h: the placer: which device runs each op, and why.
 *
 *   tfg_placement *pl;
 *   if (tfg_place(graph, devices, steps, nsteps, NULL, NULL, diag, &pl) == TFG_OK) {
 *     int dev = tfg_placement_device(pl, node_id);
 *     const tfg_place_record *why = tfg_placement_record(pl, node_id);
 *     tfg_place_explain(pl, &text);        // `tfg place --explain`
 *     tfg_place_json(pl, &text);           // `tfg place --json`
 *     tfg_place_dot(pl, &text);            // `tfg place --dot`
 *     tfg_placement_free(pl);
 *   }
 *
 * Every op's device is decided by one of five numbered passes, which
 * records its cause (tfg_place_cause) on the op; the renderers print those
 * records. What each pass decides, and in what order: compiler/place.c.
 * A program is placed, planned and validated by the compile driver
 * (compiler/compile.h), which also places again when activations do not
 * fit. */
#ifndef TFG_PLACE_H
#define TFG_PLACE_H

#include "base/strbuf.h"
#include "compiler/autodiff.h"
#include "ir/device.h"
#include "ir/graph.h"

/* The pass that decided an op (its number is the value). */
typedef enum tfg_place_cause {
  TFG_CAUSE_PIN = 1,   /* pass 1: a pin names the device */
  TFG_CAUSE_COLOCATE,  /* pass 2: with its param (a member of its group, or its gradient), or
                        * beside the first op that reads it */
  TFG_CAUSE_MEMORY,    /* pass 3: the device it would finish first on had no room */
  TFG_CAUSE_COST,      /* pass 4: it finishes first there */
  TFG_CAUSE_FALLBACK,  /* pass 5: nothing else decided it (and tfg_place_on) */
  TFG_CAUSE_REMOVED,   /* no pass: a graph pass removed it before placement (constant folding
                        * computed it at compile time, simplification merged it into an
                        * equal op, or the layout pass folded a transpose into the matmuls
                        * that read it); it never runs. Its device is the CPU, where folding ran */
} tfg_place_cause;

/* Why one op is where it is. */
typedef struct tfg_place_record {
  int device;
  tfg_place_cause cause;
  tfg_loc pin;           /* PIN: the annotation */
  tfg_node_id with;      /* COLOCATE: the param, or the op that reads this one */
  bool grad;             /* COLOCATE: it computes with's gradient (no member of its group) */
  int runner_up;         /* COST, MEMORY: the second-best device with room, or -1 */
  int full;              /* COST: the fastest device passed over for want of room, or -1 */
  double est, runner_est; /* COST, MEMORY: estimated finish time (s) on the winner and the runner-up */
  int refused;           /* MEMORY: the preferred device that had no room */
  int64_t need, avail;   /* MEMORY: bytes the group needs, bytes free there */
  int64_t copies;        /* MEMORY: of need, the params and state it would copy in from other devices */
  int64_t reserved;      /* MEMORY: bytes kept there for activations */
  uint8_t by;            /* REMOVED: the pass's mark (TFG_FOLD_REMOVED/_CONST: constant folding,
                          * _SIMPLIFIED: simplification, _LAYOUT: the layout pass; compiler/fold.h) */
} tfg_place_record;

typedef struct tfg_placement tfg_placement;

/* Places every node of g on ds. steps[0..nsteps) (may be NULL) are the
 * program's training steps, whose params, updates and state are kept
 * together. reserve (may be NULL) keeps that many bytes of each device
 * free of params for activations (the compile driver's fit loop sets it).
 * removed (may be NULL) is the graph passes' marks (compiler/fold.h): the
 * nodes they removed are recorded as such (cause REMOVED), weigh on no
 * device and count in no total.
 * Returns TFG_OK with *out the caller's to free, or TFG_ERR_PLACE with a
 * located error and *out NULL (a pin to a device that does not exist;
 * pinned params that do not fit; params no device has room for). */
tfg_status tfg_place(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                     const int64_t *reserve, const uint8_t *removed, tfg_diag *d, tfg_placement **out);

/* Every node on one device, pins ignored (cause FALLBACK): how a graph
 * runs when nothing asks for devices (unit tests, benchmarks). Totals
 * are not computed. */
tfg_placement *tfg_place_on(const tfg_graph *g, const tfg_devices *ds, int device);
void tfg_placement_free(tfg_placement *pl);

int tfg_placement_device(const tfg_placement *pl, tfg_node_id id);
const tfg_place_record *tfg_placement_record(const tfg_placement *pl, tfg_node_id id);

/* Per-device totals for one step, the table at the end of explain. */
typedef struct tfg_place_totals {
  int ops;
  double flops;
  int64_t param_bytes;  /* params and optimizer state */
  int64_t peak_bytes;   /* planned peak: persistent bytes plus the activation peak of a liveness walk */
  int64_t bytes_in, bytes_out; /* crossing devices per step (once per tensor per destination) */
} tfg_place_totals;
tfg_place_totals tfg_placement_totals(const tfg_placement *pl, int device);

/* The placement as text, appended to out, rendered from the records
 * (nothing is decided again): explain (`tfg place --explain`: a line per
 * run of ops decided alike, repeated blocks folded, then the totals),
 * JSON (every op with its record, the devices, the totals) and DOT (a
 * cluster per device; an edge between devices red). */
void tfg_place_explain(const tfg_placement *pl, tfg_strbuf *out);
void tfg_place_json(const tfg_placement *pl, tfg_strbuf *out);
void tfg_place_dot(const tfg_placement *pl, tfg_strbuf *out);

#endif

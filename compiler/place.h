/* compiler/place.h: the placer: which device runs each op, and why.
 *
 *   tfg_placement *pl;
 *   if (tfg_place(graph, devices, &steps, diag, &pl) == TFG_OK) {
 *     int dev = tfg_placement_device(pl, node_id);
 *     tfg_place_explain(pl, &text);        // `tfg place --explain`
 *     tfg_place_json(pl, &text);           // `tfg place --json`
 *     tfg_place_dot(pl, &text);            // `tfg place --dot`
 *     tfg_placement_free(pl);
 *   }
 *
 * Numbered passes, each deciding some ops and recording its cause on every
 * op it decides (as ggml's scheduler records SET_CAUSE); explain renders
 * those records and never recomputes them:
 *   1. pins: `@DEVICE` and `with DEVICE` (validated: the device exists);
 *   2. colocation: a param with its gradient, optimizer update and state;
 *      an op with no inputs (a constant, an input, a param) with the first
 *      op that reads it;
 *   3. memory: an op whose group (a param with its state) would not fit the
 *      device the cost model prefers goes to the best device with room;
 *   4. cost: every other op goes to the device where it would finish
 *      earliest, counting compute (FLOPs / the device's rate, bytes / its
 *      memory bandwidth) and transfers of inputs from other devices (bytes
 *      / link bandwidth): a chain stays together, parallel work spreads;
 *   5. fallback: what nothing decided (a constant nobody reads) goes to
 *      the first device the program could use. */
#ifndef TFG_PLACE_H
#define TFG_PLACE_H

#include "base/strbuf.h"
#include "compiler/autodiff.h"
#include "ir/device.h"
#include "ir/graph.h"

typedef enum tfg_place_cause {
  TFG_CAUSE_PIN = 1,   /* pass 1 */
  TFG_CAUSE_COLOCATE,  /* pass 2 */
  TFG_CAUSE_MEMORY,    /* pass 3 */
  TFG_CAUSE_COST,      /* pass 4 */
  TFG_CAUSE_FALLBACK,  /* pass 5 */
} tfg_place_cause;

/* Why one op is where it is. */
typedef struct tfg_place_record {
  int device;
  tfg_place_cause cause;
  tfg_loc pin;           /* PIN: the annotation */
  tfg_node_id with;      /* COLOCATE: the param, or the op that reads this one */
  int runner_up;         /* COST, MEMORY: the second-best device with room, or -1 */
  int full;              /* COST: the fastest device passed over for want of room, or -1 */
  double est, runner_est; /* COST: estimated finish time (s) on the winner and the runner-up */
  int refused;           /* MEMORY: the preferred device that had no room */
  int64_t need, avail;   /* MEMORY: bytes the group needs, bytes free there */
  int64_t reserved;      /* MEMORY: bytes kept there for activations */
} tfg_place_record;

typedef struct tfg_placement tfg_placement;

/* Places every node of g on ds. steps (may be NULL) are the program's
 * training steps, whose params, updates and state are kept together.
 * reserve (may be NULL) keeps that many bytes of each device free of
 * params for activations. Returns TFG_OK, or TFG_ERR_PLACE with a located
 * error (a pin to a device that does not exist; pinned params that do not
 * fit). */
tfg_status tfg_place(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                     const int64_t *reserve, tfg_diag *d, tfg_placement **out);

/* Places with pass 3 counting activations too: places, plans (measuring
 * each device's peak), and where a device's peak passes its capacity,
 * reserves the difference for activations and places again (a few times
 * at most). The result is the first placement whose plan fits, else the
 * last one (its plan then reports the shortage). */
tfg_status tfg_place_fit(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                         tfg_diag *d, tfg_placement **out);
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

void tfg_place_explain(const tfg_placement *pl, tfg_strbuf *out);
void tfg_place_json(const tfg_placement *pl, tfg_strbuf *out);
void tfg_place_dot(const tfg_placement *pl, tfg_strbuf *out);

#endif

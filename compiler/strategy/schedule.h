/* compiler/strategy/schedule.h: a pipeline's schedule (LANGUAGE.md 6.1:
 * gpipe, 1f1b, interleaved) as the order of the step's nodes.
 *
 *   tfg_pipe pp = {.kind = TFG_SCHEDULE_1F1B, .devices = P, .chunks = 1, .micro = M};
 *   double f[V], b[V];                 // each stage's forward and backward time
 *   double *start = malloc(sizeof *start * 2 * V * M);
 *   double end = tfg_pipe_times(&pp, f, b, start);
 *
 * The planner builds every device's list of steps in one sweep in graph
 * order (compiler/plan.h), and the memory plan's liveness falls out of
 * those lists. So a schedule is not run-time logic: it is an order of the
 * graph. Each node of a pipelined step belongs to a unit, the forward or
 * the backward of one micro-batch on one stage; each device runs its
 * units in the schedule's order (tfg_pipe_unit, as Megatron-LM's
 * schedules.py orders them); tfg_pipe_times replays that order with each
 * unit's predicted time, every unit starting once its device is free and
 * its inputs exist (the forward of the stage before, the backward of the
 * stage after); and the strategy sorts the nodes by their unit's start
 * (compiler/strategy/parallel.c). A unit starts after every unit it
 * reads has ended, so the sort is topological, and each device's
 * projection of it is its schedule: the plan interleaves forwards and
 * backwards as 1F1B does, and its static memory holds exactly the
 * activations the schedule keeps in flight (gpipe: all M micro-batches
 * on every stage; 1f1b: at most P - s on stage s). */
#ifndef TFG_STRATEGY_SCHEDULE_H
#define TFG_STRATEGY_SCHEDULE_H

#include <stdbool.h>

#include "ir/program.h"

/* The stages of p (V). */
static inline int tfg_pipe_stages(const tfg_pipe *p) { return p->devices * p->chunks; }

/* The k-th unit (0 <= k < 2 v M) device d runs under p's schedule: a
 * forward (*fwd) or backward of micro-batch *micro on stage *stage. */
void tfg_pipe_unit(const tfg_pipe *p, int d, int k, bool *fwd, int *stage, int *micro);

/* Replays p's schedule with stage s's forward taking fwd[s] and its
 * backward bwd[s] (both > 0): start[s * M + m] gets when the forward of
 * micro-batch m on stage s starts, start[V * M + s * M + m] when its
 * backward does. Returns when the last unit ends. */
double tfg_pipe_times(const tfg_pipe *p, const double *fwd, const double *bwd, double *start);

/* The cut of N ops (a pipeline's forward ops in program order) into V
 * stages of consecutive ops, each at least one, that minimises the
 * slowest stage: stage [i, j) costs w[i] + ... + w[j - 1] plus send[j - 1]
 * (what it sends on; nothing for the last). pin[k] >= 0 puts op k in that
 * stage; mem[k] is what op k adds to its stage's memory, which must stay
 * within cap[s] (stage s's device). first[s] gets stage s's first op.
 * Among equal cuts, each stage ends as late as it can. Returns false
 * when no cut meets the pins and the memory. O(V N log N) when the
 * best prefixes grow with their length, as they do unless pins or memory
 * say otherwise (then that stage's search is the exact O(N^2) one). */
bool tfg_pipe_cut(int N, int V, const double *w, const double *send, const double *mem, const double *cap,
                  const int *pin, int *first);

/* --trace's label of a unit of pipeline p (tfg_train_step.pipe_unit's
 * code: a forward s M + m, a backward V M + s M + m) into buf of n
 * bytes: "fwd s1 m3", "bwd s0 m7". */
void tfg_pipe_label(const tfg_pipe *p, int32_t unit, char *buf, size_t n);

#endif

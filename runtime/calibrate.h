/* runtime/calibrate.h: the host's costs as `tfg plan --predict` needs
 * them (compiler/predict.h), measured on this machine in a fraction of a
 * second: what a matrix product and an elementwise kernel do on one
 * thread, what a copy moves, and what one op costs a host device's
 * worker beyond its kernel.
 *
 *   tfg_host_costs h;
 *   tfg_calibrate_host(threads, &h);   // threads: --threads, 0: the default
 *
 * Each rate and overhead is the best of several tries (the least
 * disturbed by whatever else the machine runs), after a warm-up; each of
 * the plan's kernels the median of its runs (its usual time, as a step
 * sees it). */
#ifndef TFG_CALIBRATE_H
#define TFG_CALIBRATE_H

#include "compiler/predict.h"

/* Measures the host's costs into *out; threads as a run's --threads (0:
 * OpenBLAS's start-up count, as a run without --threads). */
void tfg_calibrate_host(int threads, tfg_host_costs *out);

/* Times the CPU kernel of every launch on the plan's host devices (and
 * cpu:0) on filled inputs of its shapes (floats 1/64, integers 0), on
 * the threads t gives the device, with as many copies at once as the
 * cores hold: t->kernel_s (allocated here, per node) gets the median of
 * a few runs, -1 for what was not timed (inputs, other devices, a kernel
 * that failed). Launches alike (op, shapes, attributes) are timed once. */
void tfg_calibrate_kernels(const tfg_plan *p, tfg_cost_table *t);

#endif

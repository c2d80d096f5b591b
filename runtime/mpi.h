/* runtime/mpi.h: the processes of one job started by mpirun (Open MPI;
 * CLI.md "Many processes and machines"): each is a rank of the job, and
 * this module is where tfg meets MPI.
 *
 *   tfg_strbuf why = {0};
 *   if (tfg_mpi_start(&why) != TFG_OK) ... // why: MPI would not start
 *   if (tfg_mpi_size() > 1 && tfg_mpi_same("collective schedule", text, &err) != TFG_OK) ...
 *   tfg_mpi_stop();
 *
 * A tfg that mpirun did not start never calls MPI (it runs as one
 * process, rank 0 of 1), so a build with MPI behaves as one without it
 * outside mpirun. In a build without MPI (make MPI=0, or no mpicc), every
 * function below answers as rank 0 of 1, and a process mpirun started is
 * told, once, that this build cannot join the job. */
#ifndef TFG_RUNTIME_MPI_H
#define TFG_RUNTIME_MPI_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "base/strbuf.h"

/* Whether a launcher started this process as a rank of a job: Open MPI's
 * mpirun sets OMPI_COMM_WORLD_SIZE, a PMIx launcher PMIX_RANK. */
bool tfg_mpi_launched(void);

/* Joins the job when launched (MPI_Init_thread with MPI_THREAD_MULTIPLE:
 * the collectives run on the devices' worker threads), errors returned rather than
 * aborting (MPI_ERRORS_RETURN); nothing otherwise. TFG_OK, or
 * TFG_ERR_DEVICE with the reason in *why (MPI failed to start, or this
 * build has no MPI). Once per process; tfg_mpi_stop leaves the job. */
tfg_status tfg_mpi_start(tfg_strbuf *why);
void tfg_mpi_stop(void);

/* This process's rank in the job and the job's size (0 and 1 outside a
 * job); its rank among the ranks of its machine and their number (0 and
 * 1 outside a job). */
int tfg_mpi_rank(void);
int tfg_mpi_size(void);
int tfg_mpi_local_rank(void);
int tfg_mpi_local_size(void);

/* `tfg version`'s line, without the newline: "mpi: on (Open MPI
 * v4.1.4), rank R of N", "mpi: on (Open MPI v4.1.4), not started by
 * mpirun", or "mpi: off (this build has no MPI)". */
void tfg_mpi_describe(tfg_strbuf *out);

/* The start-up check that every rank means the same job: what
 * ("collective schedule") is text on every rank, compared through a
 * 64-bit hash each rank gathers from all. TFG_OK when every rank's is
 * rank 0's; otherwise, on every rank, TFG_ERR_USAGE with *err naming the
 * ranks that differ and, on those ranks, the first line where theirs
 * differs from rank 0's (both lines quoted). A collective: every rank
 * must call it. Outside a job, TFG_OK. */
tfg_status tfg_mpi_same(const char *what, const char *text, tfg_strbuf *err);

/* v[0..n) replaced by its mean over the job's processes (each rank's
 * value weighing alike: the mean of its replicas' means, all ranks having
 * as many); nothing outside a job. A collective: every rank calls it, in
 * the same order (the train loop's logged values and evaluations). */
void tfg_mpi_mean(double *v, int n);

/* Every rank's text to rank 0, appended to *all there in rank order,
 * each after a line "rank K (HOST):" (its machine's name), the ranks
 * apart by an empty line; the other ranks get nothing. Outside a job,
 * "rank 0:" and text. A collective: every rank calls it (`tfg devices`,
 * `place` and `plan` showing the whole job). */
void tfg_mpi_gather(const char *text, tfg_strbuf *all);

/* Ends the whole job with exit status code (MPI_Abort: mpirun stops
 * every other rank and names this one): what a rank that fails alone
 * does, so that no other rank waits forever for it in a collective. Does
 * not return in a job of several ranks; nothing otherwise. */
void tfg_mpi_abort(int code);

/* Rank 0's bytes buf[0..n) to every rank, when ok is true on rank 0; a
 * rank 0 that could not make them passes ok false and every rank returns
 * false (so no rank waits for a collective the others will not join).
 * Outside a job: ok. A collective: every rank calls it. */
bool tfg_mpi_bcast(void *buf, size_t n, bool ok);

/* Rank root's bytes buf[0..n) to every rank (MPI_Bcast): a value one
 * rank computed that every rank returns (runtime/session.h, a job
 * spanning ranks). A collective. Outside a job: nothing. */
void tfg_mpi_bcast_from(int root, void *buf, size_t n);

/* The job's point-to-point transport for the SEND and RECV kernels
 * (kernels/kernel.h): sends posted without waiting (on a communicator of
 * their own), receives that wait. NULL outside a job of two ranks or
 * more. tfg_mpi_flush waits for every send posted so far and frees its
 * copy: the end of a run, whose receivers all post theirs in the same
 * run. */
struct tfg_transport;
const struct tfg_transport *tfg_mpi_transport(void);
void tfg_mpi_flush(void);

/* The all-reduce of a group of this process's nranks devices in an
 * mpirun job (runtime/collective.h): the hierarchical all-reduce, this
 * process's ranks one group (tfg_coll_hier_outer_new), its leaders' step
 * MPI_Iallreduce (sum) among the job's processes, posted on the leader's
 * stream, which then waits for it as for an event (a progress thread
 * waits for MPI and completes the event), so that the device's worker
 * serves its other streams meanwhile; a mean is over every rank of every
 * process. Every
 * process makes its collectives in the same order (the executor makes
 * them in plan order, and tfg_mpi_same checked the plans alike), and each
 * gets a communicator of its own, so the all-reduces of two never meet.
 * Host memory only, f32 or f64. NULL with *why when a device is not a
 * host device (CUDA devices across processes need NCCL's bootstrap over
 * MPI, which this version does not have), or MPI fails, or outside a
 * job. */
struct tfg_coll;
struct tfg_backend;
struct tfg_stream;
struct tfg_coll *tfg_mpi_job_coll_new(int nranks, struct tfg_backend *const *b, struct tfg_stream *const *s,
                                      tfg_strbuf *why);

/* The first line where a and b differ, 1-based, into *line, and the two
 * lines (without their newlines) into *la and *lb; 0 when they are equal.
 * What tfg_mpi_same reports, apart for its tests. */
int tfg_mpi_first_difference(const char *a, const char *b, tfg_strbuf *la, tfg_strbuf *lb);

#endif

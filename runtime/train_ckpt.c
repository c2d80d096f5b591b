/* runtime/train_ckpt.c: a train's checkpoints: the step's params, their
 * optimizer state and an f16 grad scaler's state saved (rank 0 for the
 * job) and restored, and replicas synced from replica 0
 * (runtime/train_impl.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "compiler/plan.h"
#include "io/data.h"
#include "ir/ops.h"
#include "runtime/ckpt.h"
#include "runtime/mpi.h"
#include "runtime/train_impl.h"


/* The persistent tensors of a step, its params then their state, in a
 * new array (caller frees: ckpt_entries_free) of *count entries, each
 * with a host buffer of its own: filled from the session when read. */
/* ZeRO's state j as a checkpoint holds it: whole, the shape of its
 * param, the replicas' pieces in order without their padding
 * (tfg_train_step state_shards). read: from the session into data (a
 * collective under mpirun: each piece from the rank that holds it);
 * else data into this process's pieces (the padding zero). */
static void zero_state(tfg_session *s, const tfg_program *p, const tfg_train_step *st, int j, void *data, bool read) {
  const tfg_node *whole = &p->graph->nodes[st->state_param[j]];
  size_t es = tfg_dtype_size(whole->dtype), numel = (size_t)tfg_shape_numel(&whole->shape);
  size_t per = (size_t)tfg_shape_numel(&p->graph->nodes[st->state_shards[j * st->local_shards]].shape);
  char *buf = calloc(per + 1, es);
  TFG_ASSERT(buf != NULL);
  for (int q = 0; q < st->nshards; q++) {
    int r = q - st->shard_first; /* this process's replica r, when it holds piece q */
    bool here = r >= 0 && r < st->local_shards;
    size_t at = (size_t)q * per, mine = at >= numel ? 0 : numel - at < per ? numel - at : per;
    if (read) {
      if (here) tfg_session_read(s, st->state_shards[j * st->local_shards + r], buf);
      tfg_mpi_bcast_from(q / st->local_shards, buf, per * es); /* the rank that holds it (nothing outside a job) */
      memcpy((char *)data + at * es, buf, mine * es);
    } else if (here) {
      memset(buf, 0, per * es);
      memcpy(buf, (const char *)data + at * es, mine * es);
      tfg_session_write(s, st->state_shards[j * st->local_shards + r], buf);
    }
  }
  free(buf);
}

static tfg_ckpt_entry *ckpt_entries(tfg_session *s, const tfg_program *p, const tfg_train_step *st, int *count,
                                    bool read) {
  tfg_ckpt_entry *e = malloc(sizeof *e * (size_t)(st->nparams + st->nstates + 1));
  TFG_ASSERT(e != NULL);
  int n = 0;
  for (int i = 0; i < st->nparams + st->nstates; i++) {
    tfg_node_id id = i < st->nparams ? st->params[i] : st->states[i - st->nparams];
    const tfg_node *nd = &p->graph->nodes[id];
    /* ZeRO's state: whole, as its param (its name the state's) */
    const tfg_node *like = i >= st->nparams && st->zero ? &p->graph->nodes[st->state_param[i - st->nparams]] : nd;
    void *data = malloc((size_t)tfg_node_bytes(like) + 1);
    TFG_ASSERT(data != NULL);
    if (read && like != nd) zero_state(s, p, st, i - st->nparams, data, true);
    else if (read) tfg_session_read(s, id, data);
    e[n++] = (tfg_ckpt_entry){nd->name, like->dtype, like->shape, data};
  }
  *count = n;
  return e;
}

static void ckpt_entries_free(tfg_ckpt_entry *e, int n) {
  for (int i = 0; i < n; i++) free((void *)e[i].data);
  free(e);
}

/* The node of entry i of ckpt_entries. */
tfg_node_id train_entry_node(const tfg_train_step *st, int i) {
  return i < st->nparams ? st->params[i] : st->states[i - st->nparams];
}

/* Copies replica 0's params and state into every mirror (after
 * initialization and after a restore): replicas start equal. */
void train_sync_mirrors(tfg_session *s, const tfg_program *p, const tfg_train_step *st) {
  for (int i = 0; i < st->nmirrors; i++) {
    const tfg_node *nd = &p->graph->nodes[st->mirror_src[i]];
    void *v = malloc((size_t)tfg_node_bytes(nd) + 1);
    TFG_ASSERT(v != NULL);
    tfg_session_read(s, st->mirror_src[i], v);
    tfg_session_write(s, st->mirror_dst[i], v);
    free(v);
  }
}

/* precision = f16: a grad scaler's state in a checkpoint, as metadata
 * beside the step (PyTorch keeps GradScaler.state_dict() apart from the
 * model's and the optimizer's too): its scale, its count of good steps in
 * a row and of skipped steps (compiler/autodiff.h tfg_amp), each f32
 * written with 9 significant digits, which read back to the same bits. */
static const char *const scaler_keys[3] = {"grad_scaler.scale", "grad_scaler.growth_tracker", "grad_scaler.skipped"};

/* The scaler state node k (0: scale, 1: tracker, 2: skipped) of replica r. */
static tfg_node_id scaler_state(const tfg_program *p, const tfg_train_step *st, int r, int k) {
  const tfg_node *u = &p->graph->nodes[st->scalers[r]];
  return u->inputs[k == 0 ? 0 : k + 1]; /* AMP_UPDATE (scale, finite, tracker, skipped) */
}

tfg_status train_save(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c, int64_t step,
                       tfg_diag *d) {
  /* Under mpirun, rank 0 writes for the job; every rank resumes from it.
   * A pipeline across ranks has its tensors on several, and so has ZeRO
   * its state's pieces: every rank reads (a collective: each value from
   * its rank, runtime/session.h, zero_state). */
  if (tfg_mpi_rank() != 0 && st->ranks <= 1 && !(st->zero && tfg_mpi_size() > 1)) return TFG_OK;
  int n;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n, true);
  char stepbuf[32], scaler[3][32];
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  tfg_ckpt_meta meta[6] = {{"step", stepbuf}, {"optimizer", st->optimizer}, {"format", "tfg " TFG_VERSION}};
  int nmeta = 3;
  for (int k = 0; k < 3 && st->nscalers > 0; k++) { /* replica 0's: every replica's moves alike */
    float v;
    tfg_session_read(s, scaler_state(p, st, 0, k), &v);
    snprintf(scaler[k], sizeof scaler[k], "%.9g", (double)v);
    meta[nmeta++] = (tfg_ckpt_meta){scaler_keys[k], scaler[k]};
  }
  tfg_status r = tfg_mpi_rank() == 0 ? tfg_ckpt_save(d, &c->loc, c->checkpoint, e, n, meta, nmeta) : TFG_OK;
  ckpt_entries_free(e, n);
  return r;
}

/* After a restore of checkpoint k at *step: the grad scaler's state from
 * its metadata into every replica's, when the run has a scaler and the
 * file a state (a file without one, from an f32 run or PyTorch, leaves the
 * scaler fresh). The three keys come together and must agree with each
 * other and with the step, as a file tfg saved does: the scale a finite
 * number above 0, the counts whole numbers with skipped <= step and good
 * steps in a row <= step - skipped. Anything else (a key missing, no step,
 * more steps skipped than taken) is an error: a scaler resumed from it
 * would skip steps it should not, or fail later. */
static tfg_status restore_scaler(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                                 const tfg_ckpt *k, int64_t step, tfg_diag *d) {
  int present = 0;
  for (int q = 0; q < 3; q++) present += tfg_ckpt_meta_get(k, scaler_keys[q]) != NULL;
  if (st->nscalers == 0 || present == 0) return TFG_OK;
  if (!tfg_ckpt_meta_get(k, "step")) {
    tfg_diag_error(d, &c->loc, "checkpoint %s: has a grad scaler's state but no step metadata", c->checkpoint);
    return TFG_ERR_DATA;
  }
  if (step == 0) return TFG_OK; /* the optimizer state starts fresh (tfg_ckpt_match): so does the scaler */
  float v[3];
  for (int q = 0; q < 3; q++) {
    const char *text = tfg_ckpt_meta_get(k, scaler_keys[q]);
    char *end = NULL;
    double x = text ? strtod(text, &end) : NAN;
    bool ok = text && end != text && *end == '\0' && isfinite(x) && (float)x == x &&
              (q == 0 ? x > 0 : x >= 0 && x == floor(x));
    if (!ok) {
      tfg_diag_error(d, &c->loc, "checkpoint %s: metadata %s is '%s', not %s", c->checkpoint, scaler_keys[q],
                     text ? text : "(missing)", q == 0 ? "a positive number" : "a whole number from 0");
      if (!text) tfg_diag_help(d, "a grad scaler's state is its three keys together, as tfg saves them");
      return TFG_ERR_DATA;
    }
    v[q] = (float)x;
  }
  if ((double)v[2] > (double)step || (double)v[1] > (double)step - (double)v[2]) {
    tfg_diag_error(d, &c->loc,
                   "checkpoint %s: its grad scaler skipped %.0f steps with %.0f good ones in a row, "
                   "more than its %" PRId64 " steps allow",
                   c->checkpoint, (double)v[2], (double)v[1], step);
    tfg_diag_help(d, "skipped steps are at most the step, and good steps in a row at most step - skipped");
    return TFG_ERR_DATA;
  }
  for (int r = 0; r < st->nscalers; r++)
    for (int q = 0; q < 3; q++) tfg_session_write(s, scaler_state(p, st, r, q), &v[q]);
  return TFG_OK;
}

/* Restores params and optimizer state from c->checkpoint when it exists;
 * *step is the step to resume at. What a file must hold, and when the
 * optimizer state starts fresh (at step 0), is tfg_ckpt_match's. */
tfg_status train_restore(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                          int64_t *step, tfg_diag *d, FILE *log) {
  *step = 0;
  if (access(c->checkpoint, F_OK) != 0) return TFG_OK;
  tfg_ckpt *k = NULL;
  tfg_status r = tfg_ckpt_load(d, &c->loc, c->checkpoint, &k);
  if (r != TFG_OK) return r;
  int n;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n, false);
  int *at = malloc(sizeof *at * (size_t)(n + 1));
  TFG_ASSERT(at != NULL);
  r = tfg_ckpt_match(d, &c->loc, c->checkpoint, k, e, n, st->nparams, st->optimizer, at, step);
  if (r == TFG_OK) r = restore_scaler(s, p, st, c, k, *step, d);
  int restored = 0;
  for (int i = 0; i < n && r == TFG_OK; i++) {
    if (at[i] < 0) continue;
    if (st->zero && i >= st->nparams) /* ZeRO's: each replica its piece */
      zero_state(s, p, st, i - st->nparams, (void *)tfg_ckpt_entry_at(k, at[i])->data, false);
    else
      tfg_session_write(s, train_entry_node(st, i), tfg_ckpt_entry_at(k, at[i])->data);
    restored++;
  }
  if (r == TFG_OK)
    if (log) /* NULL: --quiet */
      fprintf(log, "restored %s: %d tensors%s, step %" PRId64 "\n", c->checkpoint, restored,
            restored < n ? ", optimizer state fresh" : "", *step);
  free(at);
  ckpt_entries_free(e, n);
  tfg_ckpt_free(k);
  return r;
}


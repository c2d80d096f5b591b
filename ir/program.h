/* ir/program.h: the program the interpreter (lang/interp.h) produces and
 * every later stage reads: the graph, its params and inputs, and the
 * actions to run afterwards (print, train), in program order, and the
 * files its load statements set params from before them.
 *
 * A train action carries its settings decoded once, where they are
 * written, into a typed tfg_train_config: the optimizer with every
 * hyperparameter resolved, the strategy with its device arguments as
 * plain data, the counts, the checkpoint path, the metrics. No later
 * stage looks a setting up by name or reads a language value.
 *
 *   const tfg_program *p = tfg_interp_program(in);
 *   for (int i = 0; i < p->nactions; i++) {
 *     const tfg_action *a = &p->actions[i];
 *     if (a->kind != TFG_ACTION_TRAIN) continue;
 *     const tfg_train_config *c = &a->config;
 *     // c->optimizer.kind, c->optimizer.lr, c->strategy.name, c->steps ...
 *   }
 *
 * Adding a train setting is a field here and a row in the interpreter's
 * table of settings (lang/interp_train.c), which checks and decodes it. */
#ifndef TFG_PROGRAM_H
#define TFG_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"
#include "ir/graph.h"

/* A dataset loaded by the interpreter (io/data.h); the program only
 * points at it. */
struct tfg_dataset;

/* The part of a dataset an input reads. */
typedef enum tfg_split { TFG_SPLIT_TRAIN, TFG_SPLIT_TEST } tfg_split;

/* ---- print -------------------------------------------------------------------- */

/* One entry of a print action. */
typedef struct tfg_print_item {
  const char *text; /* the expression's source text */
  tfg_loc loc;
  bool is_tensor;
  tfg_node_id node; /* is_tensor: the tensor to fetch */
  const char *value; /* otherwise: the build-time value, rendered */
} tfg_print_item;

/* ---- load ---------------------------------------------------------------------- */

/* A `load "file.safetensors"` statement (LANGUAGE.md section 6): the
 * params it sets are read from the file once, after the program is built
 * and before its first action; loads apply in program order, a later one
 * overriding an earlier. The interpreter checks the file against the
 * params (header only) before anything runs; the run reads it in full and
 * checks it again (io/safetensors.h, tfg_safetensors_match). */
typedef struct tfg_load {
  const char *path; /* a file path from the working directory (the program's folder applied) */
  tfg_loc loc;      /* the statement, where its errors point */
  bool strict;      /* every param in the file and every tensor a param (default); else both skipped */
} tfg_load;

/* ---- train: the optimizer ----------------------------------------------------- */

typedef enum tfg_optimizer_kind {
  TFG_OPTIMIZER_SGD,
  TFG_OPTIMIZER_ADAM,
  TFG_OPTIMIZER_ADAMW,
} tfg_optimizer_kind;

/* "sgd", "adam", "adamw": as a program writes it and a checkpoint records it. */
const char *tfg_optimizer_name(tfg_optimizer_kind k);

/* An optimizer with every hyperparameter given or defaulted (the
 * defaults are those of sgd/adam/adamw's signatures, torch.optim's), each
 * checked in its range where it was written. */
typedef struct tfg_optimizer_config {
  tfg_optimizer_kind kind;
  double lr;
  double weight_decay; /* L2 for sgd and adam, decoupled for adamw */
  double momentum;     /* sgd */
  bool nesterov;       /* sgd */
  double b1, b2, eps;  /* adam, adamw */
} tfg_optimizer_config;

/* ---- train: the learning-rate schedule ------------------------------------------- */

/* lr_schedule = ...: the lr at step s (0-based) is lr x factor(s), as
 * LANGUAGE.md section 6 defines (kernels/optim_math.h computes it). */
typedef enum tfg_lr_kind { TFG_LR_CONSTANT, TFG_LR_LINEAR, TFG_LR_COSINE, TFG_LR_STEP } tfg_lr_kind;

typedef struct tfg_lr_schedule {
  tfg_lr_kind kind;
  double warmup, total, min; /* linear, cosine */
  double every, gamma;       /* step */
} tfg_lr_schedule;

/* ---- train: the strategy ------------------------------------------------------ */

typedef enum tfg_devarg_kind {
  TFG_DEVARG_NONE,   /* not given (or its default none) */
  TFG_DEVARG_DEVICE,
  TFG_DEVARG_LIST,
  TFG_DEVARG_INT,
  TFG_DEVARG_OTHER,  /* another value, kept only as words for a message */
} tfg_devarg_kind;

/* An argument of a strategy as the program wrote it: a device, an int,
 * a list of arguments (mirrored's groups are lists of lists), or another
 * value, kept only as words for a message. The strategy's module
 * (compiler/strategy/) checks it (a device a replica can run on, named
 * once, groups of one size, a count in range) and reports what is
 * wrong, where. */
typedef struct tfg_devarg {
  tfg_devarg_kind kind;
  tfg_devspec dev;                /* DEVICE, with its location */
  int64_t i;                      /* INT */
  tfg_loc loc;                    /* INT, LIST, OTHER: the value (DEVICE: dev.loc) */
  const char *what;               /* OTHER: what it is ("an int", "a string") */
  int32_t n;                      /* LIST: its items */
  const struct tfg_devarg *items;
} tfg_devarg;

/* A train action's `strategy = NAME(ARGS)` as plain data: the
 * constructor's name, which compiler/strategy/registry.c maps to the
 * module that reads it, and every argument of its signature
 * (lang/builtins.c) in signature order, defaults filled in. Nothing
 * below the strategy modules reads an argument by a strategy's name, so
 * a new strategy adds no field here. */
typedef struct tfg_strategy_config {
  const char *name;   /* "single" (the default), "mirrored", ... */
  tfg_loc loc;        /* the value (mirrored(...)); the train statement without one */
  tfg_loc at;         /* the setting `strategy = ...`; {0} without one */
  int nargs;
  const char *const *arg_names;
  const tfg_devarg *args;
  /* mirrored() and mirrored(gpu:*) (devices not given, or gpu:*): every
   * GPU entry of the run, which the compile driver counts once it has
   * the devices (compiler/compile.h) and writes here; 0 before (tfg
   * check): one replica. */
  int gpus;
  /* The processes of the mpirun job, each with those GPUs (1 outside
   * one; written with gpus): parallel(...) spreads over all of them. */
  int ranks;
} tfg_strategy_config;

/* The argument called name of c: a NONE argument when c has none. */
const tfg_devarg *tfg_strategy_config_arg(const tfg_strategy_config *c, const char *name);

/* schedule = ...: the order in which a pipeline's stages run their
 * micro-batches' forward and backward steps (LANGUAGE.md 6.1;
 * compiler/strategy/schedule.h). */
typedef enum tfg_schedule_kind {
  TFG_SCHEDULE_1F1B,        /* the default: PipeDream-Flush */
  TFG_SCHEDULE_GPIPE,       /* every forward, then every backward */
  TFG_SCHEDULE_INTERLEAVED, /* Megatron-LM's interleaved 1F1B over `chunks` stages per device */
} tfg_schedule_kind;

typedef struct tfg_schedule {
  tfg_schedule_kind kind;
  int chunks;               /* interleaved: stages per device (v, at least 2); else 1 */
  tfg_loc at;               /* the setting `schedule = ...`; {0} without one */
} tfg_schedule;

/* A pipeline as a schedule sees it: `devices` devices (P) per replica,
 * each holding `chunks` stages (v; 1 but for interleaved), so V = v P
 * stages, stage s on the replica's device s % P, and `micro`
 * micro-batches (M) per step. All zero: no pipeline. */
typedef struct tfg_pipe {
  tfg_schedule_kind kind;
  int devices, chunks, micro;
} tfg_pipe;

/* ---- train: the whole configuration ------------------------------------------- */

/* A train statement's settings (LANGUAGE.md section 6), decoded and
 * checked by the interpreter. A count not given is 0 (every given count
 * is at least 1, the seed at least 0); exactly one of steps and epochs is
 * given. */
typedef struct tfg_train_config {
  tfg_optimizer_config optimizer;
  tfg_lr_schedule lr_schedule; /* constant unless given */
  double clip_grad_norm;       /* 0: no clipping; else the largest global gradient norm */
  tfg_dtype precision;         /* precision = ...: F32 (the default), BF16 or F16 (compiler/autocast.h) */
  tfg_loc precision_at;        /* the setting; {0} without one */
  int accumulate;              /* micro-batches per optimizer step (0 or 1: one) */
  tfg_loc accumulate_at;       /* the setting `accumulate = ...`; {0} without one */
  int zero;                    /* zero = 1 | 2: ZeRO over the data-parallel replicas (0: none) */
  tfg_loc zero_at;             /* the setting; {0} without one */
  int nrecompute;              /* recompute = ["block"]: calls of these fns are replayed for the */
  const char *const *recompute; /* backward, their activations not kept (compiler/recompute.h) */
  bool recompute_auto;         /* recompute = "auto": the calls chosen so that the plan fits */
  tfg_loc recompute_at;        /* the setting; {0} without one */
  int nno_decay;               /* no_decay = [...]: params whose names match one of these */
  const char *const *no_decay; /* fnmatch patterns ("*.b") get no weight decay */
  tfg_strategy_config strategy;
  int micro_batches;           /* a pipeline's micro-batches per step (0: not given) */
  tfg_loc micro_batches_at;    /* the setting; {0} without one */
  tfg_schedule schedule;       /* 1f1b unless given */
  int64_t steps;            /* 0: given as epochs */
  int64_t epochs;           /* 0: given as steps */
  int64_t log_every;        /* 0: not given: tfg_train_config_log_every's default */
  int64_t eval_every;       /* 0: evaluate at the end only */
  int64_t checkpoint_every; /* 0: save at the end only */
  int64_t seed;
  const char *checkpoint;   /* NULL: none; else a file path from the working directory */
  const char *log;          /* NULL: none; else the CSV file of the logged steps (a path likewise) */
  tfg_loc log_at;           /* the setting `log = ...` */
  tfg_loc checkpoint_at;    /* the setting `checkpoint = ...` */
  int nmetrics;
  const tfg_node_id *metrics; /* float scalars, reported with the loss */
  const char *const *metric_names; /* each metric's source text, as progress lines, the log's
                                    * header and tfg plot name it (NULL: its op's name) */
} tfg_train_config;

/* The cadence of a train's progress lines over `steps` steps: log_every
 * when given, else a tenth of the steps (at least 1). */
int64_t tfg_train_config_log_every(const tfg_train_config *c, int64_t steps);

/* ---- the program ---------------------------------------------------------------- */

typedef enum tfg_action_kind { TFG_ACTION_PRINT, TFG_ACTION_TRAIN } tfg_action_kind;

typedef struct tfg_action {
  tfg_action_kind kind;
  tfg_loc loc;
  int nitems; /* print */
  tfg_print_item *items;
  tfg_node_id loss;        /* train */
  tfg_train_config config; /* train */
} tfg_action;

/* An input fed from a dataset column: batches of node's first dimension. */
typedef struct tfg_feed {
  tfg_node_id node;
  const struct tfg_dataset *ds; /* NULL: fed by --feed, else an error at run */
  const char *ds_path;          /* for messages */
  int col;
  tfg_split split;
} tfg_feed;

/* A call of a program fn (not a builtin), in the order the calls began:
 * the nodes it built carry its number (tfg_node.call: its index + 1), or
 * a nested call's, whose parent it is. */
typedef struct tfg_call {
  const char *fn;   /* the fn's name as defined ("block") */
  int32_t parent;   /* the call it was made in (as tfg_node.call), 0: none */
  tfg_loc loc;      /* the call expression */
} tfg_call;

typedef struct tfg_program {
  tfg_graph *graph;
  tfg_call *calls;     /* every call of a program fn, in the order they began */
  int32_t ncalls;
  tfg_action *actions;
  int nactions;
  tfg_node_id *params; /* every PARAM node, in creation order */
  int nparams;
  tfg_feed *feeds;     /* every INPUT node, in creation order */
  int nfeeds;
  tfg_load *loads;     /* every load statement, in program order */
  int nloads;
} tfg_program;

#endif

/* ir/graph.h: the graph IR: dtypes, shapes, nodes, the graph.
 *
 * The interpreter (lang/interp.c) builds a graph by adding nodes in
 * program order, so node ids are a topological order: every input of a
 * node has a smaller id. Shapes are static. Every node remembers the
 * source span that built it and the device annotation in force, so any
 * later stage (placer, planner, runtime) can point at the user's text.
 *
 *   tfg_graph *g = tfg_graph_new();
 *   tfg_node_id x = tfg_graph_add(g, TFG_OP_INPUT, NULL, 0, &loc);
 *   tfg_node *n = tfg_graph_node(g, x);          // fill dtype, shape, attrs
 *   ...
 *   tfg_graph_free(g);
 */
#ifndef TFG_GRAPH_H
#define TFG_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "ir/op_list.h"

typedef enum tfg_dtype {
  TFG_DTYPE_F32,
  TFG_DTYPE_F64,
  TFG_DTYPE_F16,
  TFG_DTYPE_BF16,
  TFG_DTYPE_I32,
  TFG_DTYPE_I64,
  TFG_DTYPE_BOOL, /* one byte per element, 0 or 1 */
  TFG_DTYPE_COUNT
} tfg_dtype;

size_t tfg_dtype_size(tfg_dtype t);
const char *tfg_dtype_name(tfg_dtype t); /* "f32" */
/* The article that reads before the name: "an" f32, "a" bool. */
const char *tfg_dtype_article(tfg_dtype t);
bool tfg_dtype_is_float(tfg_dtype t);    /* f32 f64 f16 bf16 */
bool tfg_dtype_is_int(tfg_dtype t);      /* i32 i64 */
/* The dtype named s ("f32"), or -1. */
int tfg_dtype_from_name(const char *s);

#define TFG_MAX_RANK 8

/* A static shape; rank 0 is a scalar. Row-major (C order) everywhere. */
typedef struct tfg_shape {
  int rank;
  int64_t dim[TFG_MAX_RANK];
} tfg_shape;

int64_t tfg_shape_numel(const tfg_shape *s);
/* Largest element count of a tensor: 2 PiB of f64, so byte counts of a
 * tensor, and sums of thousands of them (per-device totals), stay far from
 * int64 overflow. Shapes past it are refused where they are built. */
#define TFG_MAX_ELEMENTS ((int64_t)1 << 48)
/* Whether a tensor of shape s is within TFG_MAX_ELEMENTS. */
bool tfg_shape_fits(const tfg_shape *s);
bool tfg_shape_eq(const tfg_shape *a, const tfg_shape *b);
/* Appends "f32[128,64]" style text for dtype t and shape s. */
struct tfg_strbuf;
void tfg_shape_format(struct tfg_strbuf *b, tfg_dtype t, const tfg_shape *s);

/* Which device an annotation asks for (LANGUAGE.md section 2). */
typedef enum tfg_devkind {
  TFG_DEV_NONE, /* no annotation: the placer chooses */
  TFG_DEV_CPU,
  TFG_DEV_GPU,
  TFG_DEV_GPU_ANY, /* gpu:* : any GPU, the placer chooses which */
} tfg_devkind;

/* The highest N of a cpu:N or gpu:N (LANGUAGE.md leaves it open): far
 * past any machine's devices, low enough that counts formed from it fit
 * an int anywhere. */
#define TFG_MAX_DEVICE_INDEX 65535

typedef struct tfg_devspec {
  tfg_devkind kind;
  int64_t index; /* cpu:N / gpu:N */
  tfg_loc loc;   /* the annotation (@ or with) that asked for it */
} tfg_devspec;

/* Initializers (LANGUAGE.md section 5), for params and for TFG_OP_INIT. */
typedef enum tfg_init_kind {
  TFG_INIT_ZEROS,
  TFG_INIT_ONES,
  TFG_INIT_FULL,    /* attrs.value */
  TFG_INIT_NORMAL,  /* attrs.a = mean, attrs.b = std */
  TFG_INIT_UNIFORM, /* attrs.a = lo, attrs.b = hi */
  TFG_INIT_GLOROT,  /* uniform(+-sqrt(6 / (fan_in + fan_out))) */
  TFG_INIT_HE,      /* normal(0, sqrt(2 / fan_in)) */
} tfg_init_kind;

/* Op attributes: one bag for every op; the comment on each TFG_OP_* in
 * ir/ops.h says which fields it uses. Axes are already normalized
 * (non-negative, within rank) when a node is built. */
/* The slot of tfg_attrs.views and view_perm that is the output (0..3: inputs). */
enum { TFG_VIEW_OUT = 4 };

typedef struct tfg_attrs {
  int64_t axis;
  int64_t start, end;      /* slice: [start, end) along axis */
  int64_t key;             /* ALLREDUCE: the key its replicas' nodes share (replica 0's node id when
                            * made; unique per gradient, so two trains never share one) */
  int64_t offset;          /* DROPOUT, DROPOUT_GRAD: where the mask's counter starts (a mirrored
                            * replica's place in the global batch, so replicas draw apart) */
  uint32_t axes;           /* reductions: bit i set = input axis i reduced */
  bool keepdims;
  bool transpose_a, transpose_b;
  bool causal;             /* attention: key j > query i masked out */
  int64_t stride[2];       /* conv2d, pools: rows, cols */
  int64_t pad[4];          /* conv2d: top, bottom, left, right */
  int64_t size[2];         /* pools: window rows, cols */
  int perm[TFG_MAX_RANK];  /* transpose: output axis i is input axis perm[i] */
  tfg_dtype dtype;         /* cast: the target */
  tfg_init_kind init;      /* INIT, PARAM */
  double value;            /* full(v); dropout rate; layer_norm eps */
  double a, b;             /* normal: mean, std; uniform: lo, hi */
  uint64_t seed;           /* initializers, dropout */
  bool seeded;             /* the program gave the seed (else derived from the name) */
  int64_t n;               /* one_hot: depth */
  const void *data;        /* CONST: the values, dtype and shape of the node */
  /* Raw arguments as the program gave them, before the shape rule
   * normalizes them into the fields above: an int, a list of ints or
   * none for `axis`, `perm` and `shape`; the padding mode of conv2d. */
  int64_t iv[TFG_MAX_RANK];
  int niv;
  bool iv_none;
  int pad_mode;            /* TFG_PAD_* */
  /* MATMUL, ATTENTION, ATTENTION_PROBS, ATTENTION_GRAD, set by the layout pass only
   * (compiler/layout.h): with bit k (an input) of views set, input k is
   * read as transpose(inputs[k], perm = view_perm[k]); with bit
   * TFG_VIEW_OUT, the result is stored as transpose(result, perm =
   * view_perm[TFG_VIEW_OUT]), which is then the node's shape
   * (ir/matmul_view.h). */
  uint8_t views;
  int8_t view_perm[TFG_VIEW_OUT + 1][TFG_MAX_RANK];
  struct {                 /* SGD_UPDATE, ADAM_UPDATE: torch.optim's arguments */
    double lr, momentum, dampening, beta1, beta2, eps, weight_decay;
    bool nesterov, decoupled; /* decoupled: AdamW's weight decay */
    int lr_kind;              /* the lr's schedule (ir/program.h tfg_lr_kind; 0: constant) */
    double warmup, total, min, every, gamma;
  } opt;
} tfg_attrs;

enum { TFG_PAD_EXPLICIT, TFG_PAD_SAME, TFG_PAD_VALID };

/* ATTENTION_GRAD's attrs.axis: the input whose gradient it gives, or all
 * three side by side in each row ([..., T, hd + hd + hdv], Tq = Tk),
 * which autodiff makes for self-attention. */
typedef enum tfg_attention_part {
  TFG_ATTENTION_GRAD_Q,
  TFG_ATTENTION_GRAD_K,
  TFG_ATTENTION_GRAD_V,
  TFG_ATTENTION_GRAD_PACKED,
} tfg_attention_part;

typedef int32_t tfg_node_id;

typedef struct tfg_node {
  tfg_op_id op;
  tfg_dtype dtype; /* of the output */
  tfg_shape shape; /* of the output */
  int ninputs;
  const tfg_node_id *inputs;
  tfg_attrs attrs;
  const char *name; /* PARAM: dotted path (checkpoint key); INPUT: its name; else NULL */
  tfg_loc loc;      /* the source expression that built the node */
  tfg_devspec pin;  /* the device annotation in force when it was built */
  /* The innermost call of a program fn that built it: the program's
   * calls[call - 1] (ir/program.h); 0: built outside every call. Copies of
   * a node keep it. */
  int32_t call;
  /* Activation recompute (compiler/recompute.h): nonzero while a train
   * step is built for a node its backward replays rather than keeps (the
   * recomputed call, as `call`); replay marks a node made by such a
   * replay, which CSE never merges with the forward's own. */
  int32_t recompute;
  bool replay;
  /* Made for the backward (autodiff's gradients and the step's arithmetic
   * on them, the all-reduces): what the memory plan counts as gradients
   * (compiler/plan.h tfg_plan_memory_of); a replay is an activation. */
  bool backward;
} tfg_node;

/* The bytes of node n's value (its shape times its dtype's size). */
int64_t tfg_node_bytes(const tfg_node *n);

typedef struct tfg_graph {
  tfg_arena arena; /* node inputs, names, constant payloads */
  tfg_node *nodes;
  int32_t nnodes, cap;
} tfg_graph;

tfg_graph *tfg_graph_new(void);
void tfg_graph_free(tfg_graph *g);
/* Adds a node (inputs copied) with the given op, inputs and location;
 * dtype, shape and attrs are zero for the caller to fill. Returns its id. */
tfg_node_id tfg_graph_add(tfg_graph *g, tfg_op_id op, const tfg_node_id *inputs, int ninputs,
                          const tfg_loc *loc);
static inline tfg_node *tfg_graph_node(tfg_graph *g, tfg_node_id id) { return &g->nodes[id]; }
/* Removes every node with id >= n (the REPL undoes a rejected input). */
void tfg_graph_truncate(tfg_graph *g, int32_t n);
/* Renumbers the nodes from `from` on: the node that was order[k] gets id
 * from + k, and every input follows it. order is a permutation of
 * [from, nnodes) that keeps the ids a topological order (asserted). map
 * (room for nnodes) gets each node's new id by its old one (itself below
 * from), for the caller's own ids. A pipeline's schedule is such an
 * order (compiler/strategy/schedule.h). */
void tfg_graph_reorder(tfg_graph *g, int32_t from, const tfg_node_id *order, tfg_node_id *map);

#endif

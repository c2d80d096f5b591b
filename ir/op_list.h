/* ir/op_list.h: every op tfg has, by id, with the name and signature a
 * program calls it by, and the attrs it reads. A node names its op by
 * this id (ir/graph.h); what each op means to the pipeline (shape rule,
 * cost) is its row in the registry (ir/ops.h), which is above the graph
 * because its rules read nodes.
 *
 * The elementwise ops with a formula have a line each in one of three
 * lists below, and everything that must stay in step with them is
 * generated from those lines: their ids and names (TFG_OPS), their rows
 * in ir/ops.c, the formula dispatch in kernels/elementwise_math.h, the
 * CPU and CUDA loops and kernels and their registration, the fused
 * chains' interpreters and the NVRTC source (through the row's formula).
 * Adding one is its line here, its formula in kernels/elementwise_math.h
 * and its gradient rule in compiler/autodiff.c (docs/architecture.md).
 *
 * Each list passes an argument A through to every line, so a list can
 * be expanded inside a macro that needs a value of its own in each line
 * (a dtype suffix, TFG_OPS's X):
 *
 *   #define CASE(S, ID, formula, ints, flops, cheap) \
 *     case TFG_OP_##ID: return tfg_em_##formula##_##S(x);
 *   switch (op) { TFG_OPS_UNARY(CASE, f32) default: ... }
 *
 * The columns:
 *   U(A, ID, formula, ints, flops, cheap): y = formula(x), element by
 *     element: tfg_em_<formula>_f32 and _f64 in kernels/elementwise_math.h
 *     (and _i32, _i64 where ints is 1: the op takes integers too);
 *   B(A, ID, formula, sig, ints, flops, cheap): z = formula(x, y),
 *     broadcasting, the same functions of two arguments; sig the op's
 *     signature;
 *   C(A, ID, formula, oper): x oper y, broadcasting, into bools; any
 *     dtype, bool too (no function: the C operator is exact);
 * flops: per element, for the cost model (1: one IEEE operation or a
 *   select; 4: a call to the math library);
 * cheap: 1 when the op is memory-bound (one fast IEEE operation): the
 *   CPU splits it into larger chunks than a division or a library call.
 * ints, flops and cheap are plain digits (0 or 1, 1 or 4, 0 or 1): code
 * uses them as values and also pastes them in the preprocessor
 * (TFG_OPS_IF(ints, ...), ir/ops.c's flops_out##flops). */
#ifndef TFG_OP_LIST_H
#define TFG_OP_LIST_H

#define TFG_OPS_UNARY(U, A)                                                            \
  U(A, NEG, neg, 1, 1, 1)                                                              \
  U(A, EXP, exp, 0, 4, 0)                                                              \
  U(A, LOG, log, 0, 4, 0)                                                              \
  U(A, SQRT, sqrt, 0, 4, 0)                                                            \
  U(A, RSQRT, rsqrt, 0, 4, 0)                                                          \
  U(A, ABS, abs, 1, 1, 1)                                                              \
  U(A, RELU, relu, 1, 1, 1)                                                            \
  U(A, GELU, gelu, 0, 4, 0) /* exact: x * (1 + erf(x / sqrt 2)) / 2, as PyTorch */     \
  U(A, TANH, tanh, 0, 4, 0)                                                            \
  U(A, SIGMOID, sigmoid, 0, 4, 0)

#define TFG_OPS_BINARY(B, A)                                                           \
  B(A, ADD, add, "a, b", 1, 1, 1)                                                      \
  B(A, SUB, sub, "a, b", 1, 1, 1)                                                      \
  B(A, MUL, mul, "a, b", 1, 1, 1)                                                      \
  B(A, DIV, div, "a, b", 1, 1, 0) /* integers: toward zero; a zero divisor fails */    \
  B(A, POW, pow, "x, p", 0, 4, 0)                                                      \
  B(A, MAXIMUM, maximum, "a, b", 1, 1, 1)                                              \
  B(A, MINIMUM, minimum, "a, b", 1, 1, 1)

#define TFG_OPS_COMPARE(C, A)                                                          \
  C(A, EQUAL, equal, ==)                                                               \
  C(A, GREATER, greater, >)

/* TFG_OPS_IF(c, ...): the text when c is the digit 1, nothing when 0;
 * for the 0/1 columns above, where a line must generate code for some
 * ops only (the i32 and i64 functions exist where ints is 1). */
#define TFG_OPS_IF(c, ...) TFG_OPS_IF_##c(__VA_ARGS__)
#define TFG_OPS_IF_0(...)
#define TFG_OPS_IF_1(...) __VA_ARGS__

/* The lines of the three lists as TFG_OPS entries. */
#define TFG_OPS_UNARY_ENTRY_(X, ID, formula, ints, flops, cheap) X(ID, #formula, "x")
#define TFG_OPS_BINARY_ENTRY_(X, ID, formula, sig, ints, flops, cheap) X(ID, #formula, sig)
#define TFG_OPS_COMPARE_ENTRY_(X, ID, formula, oper) X(ID, #formula, "a, b") /* output bool */

/* X(ID, name, signature): the signature is a tfg parameter list; the
 * interpreter binds a call's arguments against it. "" = not callable by
 * name (built by statements, operators or other builtins). */
#define TFG_OPS(X)                                                                      \
  /* sources */                                                                         \
  X(CONST, "const", "")         /* attrs.data: the values */                            \
  X(PARAM, "param", "")         /* name; attrs.init, value, a, b, seed: its initializer */ \
  X(INPUT, "input", "")         /* name: fed per step */                                \
  X(INIT, "init", "")           /* attrs.init, value, a, b, seed: filled on the device */ \
  X(STATE, "state", "")         /* name: optimizer state of a param; starts at zero, persists */ \
  /* elementwise, one input: TFG_OPS_UNARY */                                         \
  TFG_OPS_UNARY(TFG_OPS_UNARY_ENTRY_, X)                                                \
  X(CAST, "cast", "x, dtype")   /* attrs.dtype; float to int truncates toward zero */   \
  /* elementwise, two inputs, broadcasting: TFG_OPS_BINARY, TFG_OPS_COMPARE */         \
  TFG_OPS_BINARY(TFG_OPS_BINARY_ENTRY_, X)                                              \
  TFG_OPS_COMPARE(TFG_OPS_COMPARE_ENTRY_, X)                                            \
  X(WHERE, "where", "c, a, b")  /* c bool; all three broadcast */                       \
  /* linear algebra */                                                                  \
  X(MATMUL, "matmul", "a, b, transpose_a = false, transpose_b = false")                 \
  /* attrs.transpose_a/b; 2-D, or batched over leading dims (broadcast) */              \
  /* reductions: attrs.axes (bit mask of input axes), keepdims */                       \
  X(SUM, "sum", "x, axis = none, keepdims = false")                                     \
  X(MEAN, "mean", "x, axis = none, keepdims = false")                                   \
  X(MAX, "max", "x, axis = none, keepdims = false")                                     \
  X(ARGMAX, "argmax", "x, axis = -1") /* attrs.axis; output i32; first maximum wins */  \
  /* shape: the output is a rearrangement of the input's values */                      \
  X(RESHAPE, "reshape", "x, shape")   /* output shape is the node's shape */            \
  X(FLATTEN, "flatten", "x")          /* [d0, d1 * ... * dn] */                         \
  X(TRANSPOSE, "transpose", "x, perm = none") /* attrs.perm */                         \
  X(CONCAT, "concat", "xs, axis = 0") /* n inputs; attrs.axis */                        \
  X(SLICE, "slice", "x, axis, start, end") /* attrs.axis, start, end (end exclusive) */ \
  X(BROADCAST, "broadcast", "x, shape") /* NumPy broadcast to the node's shape */       \
  /* neural network */                                                                  \
  X(SOFTMAX, "softmax", "x, axis = -1")         /* attrs.axis */                        \
  X(LOG_SOFTMAX, "log_softmax", "x, axis = -1") /* attrs.axis */                        \
  X(CROSS_ENTROPY, "cross_entropy", "logits, labels")                                   \
  /* logits f[N, C], labels i32/i64 [N] in [0, C): mean over N of -log_softmax; scalar */ \
  X(MSE, "mse", "a, b")           /* mean((a - b)^2) over all elements; scalar */       \
  X(CONV2D, "conv2d", "x, w, stride = 1, padding = \"same\"")                          \
  /* x [N, C, H, W], w [O, C, KH, KW] -> [N, O, OH, OW]; attrs.stride, pad (zeros) */   \
  X(MAX_POOL, "max_pool", "x, size, stride = none")                                    \
  X(AVG_POOL, "avg_pool", "x, size, stride = none")                                    \
  /* x [N, C, H, W]; attrs.size, stride; no padding (windows inside the input) */       \
  X(LAYER_NORM, "layer_norm", "x, gamma, beta, eps = 1e-5")                            \
  /* over the last axis; gamma, beta [D]; attrs.value = eps; biased variance */         \
  X(ATTENTION, "attention", "q, k, v, causal = false, scale = none")                   \
  /* q [..., Tq, hd], k [..., Tk, hd], v [..., Tk, hdv] -> [..., Tq, hdv]:              \
   * softmax(q k^T scale (+ causal mask: key j > query i)) v; attrs.causal, value =     \
   * scale (the shape rule puts 1 / sqrt(hd) for none) */                               \
  X(DROPOUT, "dropout", "x, rate, seed = none")                                           \
  /* attrs.value = rate, seed, offset (the mask's first element index); identity unless training; kept values scaled 1/(1-rate) */ \
  X(EMBEDDING, "embedding", "table, ids") /* table [V, D], ids int [...] -> [..., D] */ \
  X(ONE_HOT, "one_hot", "ids, n")   /* ids int [...] -> f32 [..., n]; attrs.n */        \
  X(ACCURACY, "accuracy", "logits, labels")                                            \
  /* logits [N, C], labels int [N]: fraction with argmax == label; f32 scalar */        \
  /* gradients (built by compiler/autodiff.c; dy is the output's gradient) */           \
  X(RELU_GRAD, "relu_grad", "")      /* (x, dy) -> dy where x > 0, else 0 */             \
  X(GELU_GRAD, "gelu_grad", "")      /* (x, dy) -> dy * d gelu(x)/dx (exact form) */     \
  X(CROSS_ENTROPY_GRAD, "cross_entropy_grad", "")                                       \
  /* (logits [N, C], labels [N], dy scalar) -> (softmax(logits) - onehot(labels)) * dy / N */ \
  X(LAYER_NORM_GRAD, "layer_norm_grad", "")                                             \
  /* (x, gamma, dy) -> dx of layer_norm over the last axis; attrs.value = eps */        \
  X(CONV2D_GRAD_INPUT, "conv2d_grad_input", "")                                         \
  /* (dy [N, O, OH, OW], w [O, C, KH, KW]) -> dx, the node's shape [N, C, H, W]; conv attrs */ \
  X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight", "")                                       \
  /* (x [N, C, H, W], dy [N, O, OH, OW]) -> dw, the node's shape [O, C, KH, KW]; conv attrs */ \
  X(MAX_POOL_GRAD, "max_pool_grad", "")                                                 \
  /* (x, dy) -> dx: each window's dy goes to its first maximum; pool attrs */           \
  X(AVG_POOL_GRAD, "avg_pool_grad", "")                                                 \
  /* (dy) -> dx, the node's shape: dy / window size spread over each window */         \
  X(ATTENTION_PROBS, "attention_probs", "")                                             \
  /* (q, k) -> [..., Tq, Tk]: attention's softmax(q k^T scale + mask), for its gradient; \
   * attention's attrs */                                                               \
  X(ATTENTION_GRAD, "attention_grad", "")                                               \
  /* (q, k, v, dy [..., Tq, hdv]) -> attention's gradient for input attrs.axis (0 q, 1 k, \
   * 2 v), its shape, or 3: all three side by side [..., T, hd + hd + hdv] (Tq = Tk);    \
   * the forward's causal and scale; fused: no Tq x Tk tensor */                         \
  X(EMBEDDING_GRAD, "embedding_grad", "")                                               \
  /* (ids [...], dy [..., D]) -> dtable [attrs.n, D]: rows scatter-added */             \
  /* optimizer updates: in place on param and state; the output is an empty marker */   \
  X(SGD_UPDATE, "sgd_update", "")                                                       \
  /* (param, grad, momentum_buf): torch.optim.SGD; attrs.opt */                         \
  X(ADAM_UPDATE, "adam_update", "")                                                     \
  /* (param, grad, m, v): torch.optim.Adam, or AdamW when attrs.opt.decoupled; step from ctx */ \
  X(GRAD_ACCUMULATE, "grad_accumulate", "")                                             \
  /* (acc, grad): acc <- grad when attrs.value is 0, acc + grad when 1, in place: the \
   * micro-batches of `accumulate = k` (compiler/autodiff.h) */                         \
  X(AMP_UPDATE, "amp_update", "")                                                       \
  /* (scale, finite, growth_tracker, skipped): GradScaler.update() in place on the \
   * f32 scalars 0, 2 and 3, finite a bool scalar (precision = f16) */                \
  /* collectives (compiler/strategy.c adds them; the planner groups them into buckets) */ \
  X(ALLREDUCE, "allreduce", "")                                                         \
  /* (grad) -> the mean of grad over the attrs.n nodes of its group, which share the \
     key attrs.key (one per replica, each on its replica's device); the CPU kernel \
     is the group of one: a copy */                                                     \
  X(REDUCE_SCATTER, "reduce_scatter", "")                                               \
  /* (grad) -> grad's shape: piece r of its elements (one equal piece per node of the    \
     group that shares attrs.key, attrs.n of them in device order, and per process's     \
     group under mpirun) the mean of that piece over them; the other pieces unspecified  \
     (ZeRO's gradients). The CPU kernel is the group of one: a copy */                   \
  X(ALL_GATHER, "all_gather", "")                                                       \
  /* (piece) -> [attrs.end]: the pieces of every node of the group that shares attrs.key \
     (attrs.n of them, in device order) side by side, of every process's group under    \
     mpirun, rank-major (ZeRO's params); a group of one: a copy */                       \
  X(SEND, "send", "")                                                                   \
  /* (x) -> nothing (bool[0]): x's value to rank attrs.n of the mpirun job, message \
     attrs.key; (RECV) () -> the value rank attrs.n sent as message attrs.key, its \
     dtype and shape set where made. A pipeline's stages on different ranks meet \
     through these (compiler/ranks.h); host memory, through the job's transport */   \
  X(RECV, "recv", "")                                                                   \
  /* fusion (the executor builds these from the plan's chains, compiler/plan.h) */      \
  X(FUSED, "fused", "")                                                                 \
  /* (the chain's external inputs) -> its last op's value; attrs.data: the chain's \
     program, a tfg_fused_prog (ir/fused.h); dtype and shape of the last op */

typedef enum tfg_op_id {
#define TFG_OP_ENUM(id, name, sig) TFG_OP_##id,
  TFG_OPS(TFG_OP_ENUM)
#undef TFG_OP_ENUM
  TFG_OP_COUNT
} tfg_op_id;

#endif

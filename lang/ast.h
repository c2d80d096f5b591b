/* lang/ast.h: the abstract syntax tree of a .tfg program.
 *
 * The parser (lang/parser.y) builds it; the interpreter (lang/interp.c)
 * gives it meaning. Every node carries the span of source it came from, so
 * any later stage can point at the user's text. Nodes live in an arena and
 * die with it; nothing in a tree is freed on its own.
 *
 *   tfg_ast *prog;
 *   if (tfg_parse(src, diag, &arena, &prog) == TFG_OK) {
 *     tfg_strbuf out = {0};
 *     tfg_ast_dump(prog, &out);        // what `tfg check --ast` prints
 *   }
 *
 * One node type serves every kind (as in PHP's zend_ast): a kind, a span,
 * up to three fixed children a/b/c, a list of children, and scalar fields.
 * The comment on each kind says which fields it uses. */
#ifndef TFG_AST_H
#define TFG_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"

/* Deepest expression nesting accepted. Left-recursive chains (1+1+...)
 * are not bounded by the parser stack, and every later stage walks trees
 * recursively, so the limit is checked as nodes are built. */
#define TFG_AST_MAX_DEPTH 1000
/* Largest syntax tree built (the arena's bytes): about 100 bytes of tree
 * per byte of the densest source, so every file up to 10 MB fits. */
#define TFG_AST_MAX_BYTES (1536u << 20)

typedef enum tfg_ast_kind {
  /* statements */
  TFG_AST_BLOCK,     /* list: statements (the program is a BLOCK) */
  TFG_AST_IMPORT,    /* str: module name or path; op: 1 when str is a path; name: alias or NULL */
  TFG_AST_LET,       /* name = a */
  TFG_AST_ASSIGN,    /* name = a (same meaning as LET; kept apart for printing) */
  TFG_AST_PARAM,     /* name: a (TYPE) = b (initializer or NULL) */
  TFG_AST_INPUT,     /* name: a (TYPE) from b (source or NULL) */
  TFG_AST_DATA,      /* name = a */
  TFG_AST_FN,        /* name; list: parameters (NAME or KWARG with default); a: BLOCK */
  TFG_AST_RETURN,    /* a: value or NULL */
  TFG_AST_AT,        /* @a b: device annotation a on statement b */
  TFG_AST_WITH,      /* with a (device) b (BLOCK) */
  TFG_AST_SCOPE,     /* scope name a (BLOCK) */
  TFG_AST_FOR,       /* for name in a: b (BLOCK) */
  TFG_AST_IF,        /* if a: b (BLOCK) else c (BLOCK, IF or NULL) */
  TFG_AST_PRINT,     /* list: expressions */
  TFG_AST_TRAIN,     /* train a (loss); list: KWARG settings */
  TFG_AST_LOAD,      /* load a (STRING: the file); list: KWARG settings */
  TFG_AST_EXPR_STMT, /* a: an expression evaluated for its effect (or shown, in the REPL) */
  /* expressions */
  TFG_AST_INT,       /* ival */
  TFG_AST_FLOAT,     /* fval */
  TFG_AST_STRING,    /* str, len: the decoded value */
  TFG_AST_BOOL,      /* ival: 0 or 1 */
  TFG_AST_NONE,
  TFG_AST_NAME,      /* name */
  TFG_AST_DEVICE,    /* op: tfg_ast_device; a: index (INT, or any expression for `gpu:(e)`)
                        or NULL; ival: 1 for `gpu:*` */
  TFG_AST_LIST,      /* list: items */
  TFG_AST_CALL,      /* a: callee; list: arguments (expressions, then KWARGs) */
  TFG_AST_MEMBER,    /* a.name */
  TFG_AST_INDEX,     /* a[b] */
  TFG_AST_UNARY,     /* op a */
  TFG_AST_BINARY,    /* a op b */
  TFG_AST_RANGE,     /* a..b */
  /* parts */
  TFG_AST_KWARG,     /* name = a: keyword argument, parameter default, train setting */
  TFG_AST_TYPE,      /* name: dtype; list: dimension expressions */
} tfg_ast_kind;

typedef enum tfg_ast_op {
  TFG_AST_OP_ADD, TFG_AST_OP_SUB, TFG_AST_OP_MUL, TFG_AST_OP_DIV, TFG_AST_OP_MOD,
  TFG_AST_OP_EQ, TFG_AST_OP_NE, TFG_AST_OP_LT, TFG_AST_OP_LE, TFG_AST_OP_GT, TFG_AST_OP_GE,
  TFG_AST_OP_AND, TFG_AST_OP_OR,
  TFG_AST_OP_NEG, TFG_AST_OP_NOT,
} tfg_ast_op;

typedef enum tfg_ast_device { TFG_AST_DEVICE_CPU, TFG_AST_DEVICE_GPU } tfg_ast_device;

typedef struct tfg_ast tfg_ast;

typedef struct tfg_ast_list {
  tfg_ast *head, *tail;
  uint32_t n;
} tfg_ast_list;

struct tfg_ast {
  tfg_ast_kind kind;
  int op;
  uint32_t depth; /* 1 for a leaf; bounded by TFG_AST_MAX_DEPTH */
  tfg_loc loc;
  const char *name;
  const char *str;
  uint32_t len;
  int64_t ival;
  double fval;
  tfg_ast *a, *b, *c;
  tfg_ast_list list;
  tfg_ast *next; /* next sibling in the list that holds this node */
};

/* Where nodes are allocated and depth errors reported. */
typedef struct tfg_ast_ctx {
  tfg_arena *arena;
  tfg_diag *diag;
  bool too_big; /* TFG_AST_MAX_BYTES was passed (reported once) */
} tfg_ast_ctx;

/* A node of kind with children a, b, c (each may be NULL). Returns NULL,
 * after reporting an error at loc, when the result would be nested deeper
 * than TFG_AST_MAX_DEPTH. */
tfg_ast *tfg_ast_new(tfg_ast_ctx *ctx, tfg_ast_kind kind, tfg_loc loc, tfg_ast *a, tfg_ast *b,
                     tfg_ast *c);
/* Appends item to node's list (updating the node's depth and span end).
 * Returns false, after reporting, when the depth limit is exceeded. */
bool tfg_ast_push(tfg_ast_ctx *ctx, tfg_ast *node, tfg_ast *item);

/* The loc covering both a and b (a before b, same source). */
tfg_loc tfg_loc_join(tfg_loc a, tfg_loc b);

const char *tfg_ast_kind_name(tfg_ast_kind k);
/* Source spelling of an operator: "+", "&&", "!" ... */
const char *tfg_ast_op_str(tfg_ast_op op);

/* Appends the tree as S-expressions, one statement a line prefixed with
 * its line:col, nested blocks indented: the `tfg check --ast` format
 * documented in README.md. */
void tfg_ast_dump(const tfg_ast *node, tfg_strbuf *out);

#endif

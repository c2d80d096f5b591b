/* lang/ast.c: building syntax trees and printing them back. */
#include "lang/ast.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

static bool too_deep(tfg_ast_ctx *ctx, tfg_loc loc, uint32_t depth) {
  if (depth <= TFG_AST_MAX_DEPTH) return false;
  tfg_diag_error(ctx->diag, &loc, "nesting is too deep (more than %d levels)",
                 TFG_AST_MAX_DEPTH);
  tfg_diag_help(ctx->diag, "split the expression with `let` bindings");
  return true;
}

tfg_ast *tfg_ast_new(tfg_ast_ctx *ctx, tfg_ast_kind kind, tfg_loc loc, tfg_ast *a, tfg_ast *b,
                     tfg_ast *c) {
  uint32_t depth = 0;
  if (a && a->depth > depth) depth = a->depth;
  if (b && b->depth > depth) depth = b->depth;
  /* An `else if` chain is a sequence, not nesting: the else branch does
   * not count a level (the parser's stack bounds the chain's length). */
  uint32_t cdepth = c ? (kind == TFG_AST_IF && c->kind == TFG_AST_IF ? c->depth - 1 : c->depth) : 0;
  if (cdepth > depth) depth = cdepth;
  if (too_deep(ctx, loc, depth + 1)) return NULL;
  if (ctx->arena->total > TFG_AST_MAX_BYTES) {
    /* A program this large is not one a person wrote; stop before the
     * host runs out of memory. */
    if (!ctx->too_big) tfg_diag_error(ctx->diag, &loc, "the program is too large (its syntax tree passed %u MiB)",
                                      TFG_AST_MAX_BYTES >> 20);
    ctx->too_big = true;
    return NULL;
  }
  tfg_ast *n = tfg_arena_alloc(ctx->arena, sizeof *n);
  n->kind = kind;
  n->loc = loc;
  n->depth = depth + 1;
  n->a = a;
  n->b = b;
  n->c = c;
  return n;
}

bool tfg_ast_push(tfg_ast_ctx *ctx, tfg_ast *node, tfg_ast *item) {
  TFG_ASSERT(item->next == NULL);
  /* A block's statements were each checked when built; a block is as deep
   * as its deepest statement (statements in a row do not nest), and a
   * push into it never fails, so one deep statement cannot end the parse. */
  if (node->kind == TFG_AST_BLOCK) {
    if (item->depth > node->depth) node->depth = item->depth;
  } else if (item->depth + 1 > node->depth) {
    if (too_deep(ctx, item->loc, item->depth + 1)) return false;
    node->depth = item->depth + 1;
  }
  if (node->list.tail) node->list.tail->next = item;
  else node->list.head = item;
  node->list.tail = item;
  node->list.n++;
  return true;
}

tfg_loc tfg_loc_join(tfg_loc a, tfg_loc b) {
  if (a.src != b.src || b.off + b.len < a.off) return a;
  a.len = b.off + b.len - a.off;
  return a;
}

/* names[k] of a table of n, or "?" for a k past its end or without a name. */
static const char *name_in(const char *const *names, size_t n, unsigned k) {
  return k < n && names[k] ? names[k] : "?";
}

const char *tfg_ast_kind_name(tfg_ast_kind k) {
  static const char *const names[] = {
      [TFG_AST_BLOCK] = "block",     [TFG_AST_IMPORT] = "import", [TFG_AST_LET] = "let",
      [TFG_AST_ASSIGN] = "assign",   [TFG_AST_PARAM] = "param",   [TFG_AST_INPUT] = "input",
      [TFG_AST_DATA] = "data",       [TFG_AST_FN] = "fn",         [TFG_AST_RETURN] = "return",
      [TFG_AST_AT] = "@",            [TFG_AST_WITH] = "with",     [TFG_AST_SCOPE] = "scope",
      [TFG_AST_FOR] = "for",         [TFG_AST_IF] = "if",         [TFG_AST_PRINT] = "print",
      [TFG_AST_TRAIN] = "train",     [TFG_AST_LOAD] = "load",     [TFG_AST_EXPR_STMT] = "expr",
      [TFG_AST_INT] = "int",
      [TFG_AST_FLOAT] = "float",     [TFG_AST_STRING] = "string", [TFG_AST_BOOL] = "bool",
      [TFG_AST_NONE] = "none",       [TFG_AST_NAME] = "name",     [TFG_AST_DEVICE] = "device",
      [TFG_AST_LIST] = "list",       [TFG_AST_CALL] = "call",     [TFG_AST_MEMBER] = "member",
      [TFG_AST_INDEX] = "index",     [TFG_AST_UNARY] = "unary",   [TFG_AST_BINARY] = "binary",
      [TFG_AST_RANGE] = "range",     [TFG_AST_KWARG] = "kwarg",   [TFG_AST_TYPE] = "type",
  };
  return name_in(names, sizeof names / sizeof names[0], (unsigned)k);
}

const char *tfg_ast_op_str(tfg_ast_op op) {
  /* Grouped as the enum is: arithmetic, equality, order, logic, unary. */
  static const char *const ops[] = {
      [TFG_AST_OP_ADD] = "+", [TFG_AST_OP_SUB] = "-", [TFG_AST_OP_MUL] = "*", [TFG_AST_OP_DIV] = "/",
      [TFG_AST_OP_MOD] = "%",
      [TFG_AST_OP_EQ] = "==", [TFG_AST_OP_NE] = "!=",
      [TFG_AST_OP_LT] = "<", [TFG_AST_OP_LE] = "<=", [TFG_AST_OP_GT] = ">", [TFG_AST_OP_GE] = ">=",
      [TFG_AST_OP_AND] = "&&", [TFG_AST_OP_OR] = "||",
      [TFG_AST_OP_NEG] = "-", [TFG_AST_OP_NOT] = "!",
  };
  return name_in(ops, sizeof ops / sizeof ops[0], (unsigned)op);
}

/* ---- dump ------------------------------------------------------------- */

/* The shortest %g form that reads back to the same double, always with a
 * '.' or an exponent so a float never prints like an int. */
static void dump_float(double v, tfg_strbuf *out) {
  char buf[40];
  if (isinf(v)) { tfg_strbuf_puts(out, v > 0 ? "inf" : "-inf"); return; }
  if (isnan(v)) { tfg_strbuf_puts(out, "nan"); return; } /* never "-nan"; NumPy's spelling */
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  tfg_strbuf_puts(out, buf);
  if (!strpbrk(buf, ".en")) tfg_strbuf_puts(out, ".0");
}

static void dump_string(const char *s, uint32_t len, tfg_strbuf *out) {
  tfg_strbuf_putc(out, '"');
  for (uint32_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
    case '"': tfg_strbuf_puts(out, "\\\""); break;
    case '\\': tfg_strbuf_puts(out, "\\\\"); break;
    case '\n': tfg_strbuf_puts(out, "\\n"); break;
    case '\t': tfg_strbuf_puts(out, "\\t"); break;
    default:
      if (c < 0x20 || c == 0x7F) tfg_strbuf_printf(out, "\\x%02x", c);
      else tfg_strbuf_putc(out, (char)c);
    }
  }
  tfg_strbuf_putc(out, '"');
}

static void dump_expr(const tfg_ast *n, tfg_strbuf *out);

static void dump_list(const tfg_ast *first, tfg_strbuf *out) {
  for (const tfg_ast *it = first; it; it = it->next) {
    tfg_strbuf_putc(out, ' ');
    dump_expr(it, out);
  }
}

/* The items of a list one space apart, in brackets: "[1 2 3]". */
static void dump_bracketed(const tfg_ast *first, tfg_strbuf *out) {
  tfg_strbuf_putc(out, '[');
  for (const tfg_ast *it = first; it; it = it->next) {
    if (it != first) tfg_strbuf_putc(out, ' ');
    dump_expr(it, out);
  }
  tfg_strbuf_putc(out, ']');
}

/* Ends a form whose head the caller wrote ("(index"): each operand that
 * is there after a space, then ")". */
static void dump_operands(const tfg_ast *a, const tfg_ast *b, tfg_strbuf *out) {
  const tfg_ast *operand[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    if (!operand[i]) continue;
    tfg_strbuf_putc(out, ' ');
    dump_expr(operand[i], out);
  }
  tfg_strbuf_putc(out, ')');
}

static void dump_expr(const tfg_ast *n, tfg_strbuf *out) {
  switch (n->kind) {
  case TFG_AST_INT: tfg_strbuf_printf(out, "%" PRId64, n->ival); break;
  case TFG_AST_FLOAT: dump_float(n->fval, out); break;
  case TFG_AST_STRING: dump_string(n->str, n->len, out); break;
  case TFG_AST_BOOL: tfg_strbuf_puts(out, n->ival ? "true" : "false"); break;
  case TFG_AST_NONE: tfg_strbuf_puts(out, "none"); break;
  case TFG_AST_NAME: tfg_strbuf_puts(out, n->name); break;
  case TFG_AST_DEVICE:
    tfg_strbuf_puts(out, n->op == TFG_AST_DEVICE_GPU ? "gpu" : "cpu");
    if (n->ival) tfg_strbuf_puts(out, ":*");
    else if (n->a && n->a->kind == TFG_AST_INT) tfg_strbuf_printf(out, ":%" PRId64, n->a->ival);
    else if (n->a && n->a->kind == TFG_AST_NAME) tfg_strbuf_printf(out, ":(%s)", n->a->name);
    else if (n->a) {
      tfg_strbuf_putc(out, ':'); /* an S-expression brings its own parentheses */
      dump_expr(n->a, out);
    }
    break;
  case TFG_AST_LIST: dump_bracketed(n->list.head, out); break;
  case TFG_AST_CALL:
    tfg_strbuf_puts(out, "(call ");
    dump_expr(n->a, out);
    dump_list(n->list.head, out);
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_MEMBER:
    tfg_strbuf_puts(out, "(. ");
    dump_expr(n->a, out);
    tfg_strbuf_printf(out, " %s)", n->name);
    break;
  case TFG_AST_INDEX:
    tfg_strbuf_puts(out, "(index");
    dump_operands(n->a, n->b, out);
    break;
  case TFG_AST_UNARY:
    tfg_strbuf_printf(out, "(%s", tfg_ast_op_str(n->op));
    dump_operands(n->a, NULL, out);
    break;
  case TFG_AST_BINARY:
  case TFG_AST_RANGE:
    tfg_strbuf_printf(out, "(%s", n->kind == TFG_AST_RANGE ? ".." : tfg_ast_op_str(n->op));
    dump_operands(n->a, n->b, out);
    break;
  case TFG_AST_KWARG:
    tfg_strbuf_printf(out, "(%s =", n->name);
    dump_operands(n->a, NULL, out);
    break;
  case TFG_AST_TYPE:
    tfg_strbuf_puts(out, n->name);
    dump_bracketed(n->list.head, out);
    break;
  default:
    tfg_strbuf_printf(out, "<%s>", tfg_ast_kind_name(n->kind));
    break;
  }
}

static void dump_stmt(const tfg_ast *n, int indent, tfg_strbuf *out);
static void dump_stmt_body(const tfg_ast *n, int indent, tfg_strbuf *out);

static void dump_prefix(const tfg_loc *loc, int indent, tfg_strbuf *out) {
  char pos[32] = "";
  if (loc) snprintf(pos, sizeof pos, "%u:%u", loc->line, tfg_loc_display_col(loc));
  tfg_strbuf_printf(out, "%-7s %*s", pos, indent * 2, "");
}

/* Statements of a block, one a line, then the caller's ")" goes on the
 * last line (Lisp style) so the output stays compact. */
static void dump_block(const tfg_ast *block, int indent, tfg_strbuf *out) {
  for (const tfg_ast *s = block->list.head; s; s = s->next) {
    tfg_strbuf_putc(out, '\n');
    dump_stmt(s, indent, out);
  }
}

/* The block that ends a form (fn, with, for, scope), then the form's ")". */
static void dump_body(const tfg_ast *block, int indent, tfg_strbuf *out) {
  dump_block(block, indent, out);
  tfg_strbuf_putc(out, ')');
}

static void dump_stmt_body(const tfg_ast *n, int indent, tfg_strbuf *out) {
  switch (n->kind) {
  case TFG_AST_IMPORT:
    tfg_strbuf_puts(out, "(import ");
    if (n->op) dump_string(n->str, n->len, out);
    else tfg_strbuf_puts(out, n->str);
    if (n->name) tfg_strbuf_printf(out, " as %s", n->name);
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_LET:
  case TFG_AST_ASSIGN:
  case TFG_AST_DATA:
  case TFG_AST_RETURN:
  case TFG_AST_EXPR_STMT:
    /* "(let x a)", "(return a)", "(return)": a return and an expression
     * statement have no name, a bare return no value. */
    tfg_strbuf_printf(out, "(%s", tfg_ast_kind_name(n->kind));
    if (n->name) tfg_strbuf_printf(out, " %s", n->name);
    dump_operands(n->a, NULL, out);
    break;
  case TFG_AST_PARAM:
  case TFG_AST_INPUT:
    tfg_strbuf_printf(out, "(%s %s ", tfg_ast_kind_name(n->kind), n->name);
    dump_expr(n->a, out);
    if (n->b) {
      tfg_strbuf_puts(out, n->kind == TFG_AST_INPUT ? " from " : " ");
      dump_expr(n->b, out);
    }
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_FN:
    tfg_strbuf_printf(out, "(fn %s ", n->name);
    dump_bracketed(n->list.head, out);
    dump_body(n->a, indent + 1, out);
    break;
  case TFG_AST_AT:
    tfg_strbuf_puts(out, "(@ ");
    dump_expr(n->a, out);
    tfg_strbuf_putc(out, ' ');
    dump_stmt_body(n->b, indent, out);
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_WITH:
  case TFG_AST_FOR:
    tfg_strbuf_printf(out, "(%s ", tfg_ast_kind_name(n->kind));
    if (n->kind == TFG_AST_FOR) tfg_strbuf_printf(out, "%s ", n->name);
    dump_expr(n->a, out);
    dump_body(n->b, indent + 1, out);
    break;
  case TFG_AST_SCOPE:
    tfg_strbuf_printf(out, "(scope %s", n->name);
    dump_body(n->a, indent + 1, out);
    break;
  case TFG_AST_IF:
    tfg_strbuf_puts(out, "(if ");
    dump_expr(n->a, out);
    dump_block(n->b, indent + 1, out);
    if (n->c) {
      tfg_strbuf_putc(out, '\n');
      dump_prefix(NULL, indent, out);
      tfg_strbuf_puts(out, "else");
      if (n->c->kind == TFG_AST_IF) {
        tfg_strbuf_putc(out, '\n');
        dump_stmt(n->c, indent + 1, out);
      } else {
        dump_block(n->c, indent + 1, out);
      }
    }
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_PRINT:
    tfg_strbuf_puts(out, "(print");
    dump_list(n->list.head, out);
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_AST_TRAIN:
  case TFG_AST_LOAD:
    tfg_strbuf_printf(out, "(%s ", tfg_ast_kind_name(n->kind));
    dump_expr(n->a, out);
    for (const tfg_ast *s = n->list.head; s; s = s->next) {
      tfg_strbuf_putc(out, '\n');
      dump_prefix(&s->loc, indent + 1, out);
      dump_expr(s, out);
    }
    tfg_strbuf_putc(out, ')');
    break;
  default:
    dump_expr(n, out);
    break;
  }
}

static void dump_stmt(const tfg_ast *n, int indent, tfg_strbuf *out) {
  dump_prefix(&n->loc, indent, out);
  dump_stmt_body(n, indent, out);
}

void tfg_ast_dump(const tfg_ast *node, tfg_strbuf *out) {
  if (node->kind == TFG_AST_BLOCK) {
    for (const tfg_ast *s = node->list.head; s; s = s->next) {
      dump_stmt(s, 0, out);
      tfg_strbuf_putc(out, '\n');
    }
  } else {
    dump_stmt(node, 0, out);
    tfg_strbuf_putc(out, '\n');
  }
}

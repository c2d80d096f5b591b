/* lang/parse.h: source text to syntax tree.
 *
 *   tfg_arena arena; tfg_arena_init(&arena);
 *   tfg_ast *prog;
 *   tfg_status st = tfg_parse(src, diag, &arena, &prog, NULL);
 *   // st == TFG_OK: prog is the program (a TFG_AST_BLOCK)
 *   // st == TFG_ERR_SYNTAX: every error found is in diag
 *
 * The grammar is lang/parser.y (Bison, LALR(1) with LAC). Independent
 * errors in separate statements are all reported: the parser resumes at
 * the next statement after each one. */
#ifndef TFG_PARSE_H
#define TFG_PARSE_H

#include <stdbool.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/status.h"
#include "lang/ast.h"

/* Parses src into *out (nodes in arena). Returns TFG_OK, or
 * TFG_ERR_SYNTAX with *out NULL and the errors in diag. When at_eof is
 * not NULL it is set to whether the first error was at the end of the
 * input: the text is unfinished rather than wrong (the REPL then asks for
 * a continuation line). */
tfg_status tfg_parse(const tfg_source *src, tfg_diag *diag, tfg_arena *arena, tfg_ast **out,
                     bool *at_eof);

#endif

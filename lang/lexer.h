/* lang/lexer.h: the tfg lexer (generated from lang/lexer.re by re2c).
 *
 *   tfg_lexer lx;
 *   tfg_lexer_init(&lx, src, diag, arena);
 *   tfg_token t;
 *   while (tfg_lexer_next(&lx, &t) != TFG_TOK_END) ...
 *   tfg_lexer_free(&lx);
 *
 * Token kinds are the Bison token numbers (TFG_TOK_*, lang/parser.y).
 * Newlines are tokens (they end statements) except inside ( ) and [ ],
 * and except before `else`, so `}` newline `else` continues an `if`.
 * Lexical errors are reported to the diagnostics sink; the lexer then
 * recovers with a token the parser can use (an unterminated string is
 * still a string) so one mistake gives one message. */
#ifndef TFG_LEXER_H
#define TFG_LEXER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"

typedef struct tfg_token {
  int kind;     /* TFG_TOK_* */
  tfg_loc loc;
  const char *s; /* IDENT: the name; STRING: the decoded value (arena) */
  uint32_t len;  /* length of s */
  int64_t i;     /* INT: value; closers: 1 if the lexer matched an opener */
  double f;      /* FLOAT: value */
  bool bol;      /* first token on its line */
} tfg_token;

/* An open bracket still waiting for its closer. */
/* Open brackets the lexer tracks, as deep as the parser's stack. */
#define TFG_LEX_MAX_OPEN 10000

typedef struct tfg_lex_open {
  char c; /* '(' '[' '{' */
  tfg_loc loc;
} tfg_lex_open;

typedef struct tfg_lexer {
  const tfg_source *src;
  tfg_diag *diag;
  tfg_arena *arena;
  const unsigned char *cur, *tok, *lim, *marker;
  uint32_t line;                  /* line of cur, 1-based */
  const unsigned char *line_start; /* first byte of that line */
  uint32_t last_line;             /* line of the previous token */
  tfg_lex_open *open;
  uint32_t nopen, capopen;
  uint32_t stmt_errors; /* lexical errors since the last statement end */
  bool after_sep;       /* the previous token ended a statement */
  bool stopped;         /* too deeply nested: the rest of the input is not scanned */
  tfg_lex_open dropped; /* the last token, a '}', closed this unclosed ( or [ too */
  bool has_dropped;
  const unsigned char *else_scan_end; /* the last look-ahead for `else` stopped here */
  bool else_scan_result;              /* ... and found it */
  tfg_strbuf sbuf;      /* scratch for decoding strings */
} tfg_lexer;

void tfg_lexer_init(tfg_lexer *lx, const tfg_source *src, tfg_diag *diag, tfg_arena *arena);
void tfg_lexer_free(tfg_lexer *lx);
/* Scans the next token into *t and returns its kind. After the error
 * limit of diag is reached it returns TFG_TOK_END. */
int tfg_lexer_next(tfg_lexer *lx, tfg_token *t);
/* The innermost open bracket, or NULL. */
const tfg_lex_open *tfg_lexer_innermost(const tfg_lexer *lx);
/* Called by the parser after a syntax error at token la. When la sits on a
 * later line than an unclosed ( or [, or la is a '{' (which never stands
 * inside them), the opener was almost surely never closed: forget it, so
 * newlines end statements again and recovery resumes at the next line
 * instead of swallowing the rest of the file. */
void tfg_lexer_recover(tfg_lexer *lx, const tfg_token *la);
/* Spelling of a token kind for messages: "'('", "keyword 'let'", "end of file". */
const char *tfg_token_kind_str(int kind);

#endif

/* lang/lexer.re: the tfg lexer, a re2c specification (LANGUAGE.md section 1).
 *
 * The scanner works on a NUL-terminated buffer with the sentinel method:
 * no rule repeats over \x00, so the terminating NUL stops every rule, and
 * the one rule that matches \x00 tells the end of input from a stray NUL
 * byte by its position. Line and column are tracked as newlines are
 * crossed; the only tokens that cross them are newlines themselves. */
#include "lang/lexer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/utf8.h"
#include "parser.tab.h"

void tfg_lexer_init(tfg_lexer *lx, const tfg_source *src, tfg_diag *diag, tfg_arena *arena) {
  memset(lx, 0, sizeof *lx);
  lx->src = src;
  lx->diag = diag;
  lx->arena = arena;
  lx->cur = (const unsigned char *)src->text;
  lx->lim = lx->cur + src->len;
  lx->line = 1 + src->line_base; /* continued numbering: base/diag.h */
  lx->line_start = lx->cur;
  /* A UTF-8 byte order mark says nothing in UTF-8: skip it (columns still
   * count it, as editors show it zero-width but present). */
  if (src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0) lx->cur += 3;
}

void tfg_lexer_free(tfg_lexer *lx) {
  free(lx->open);
  tfg_strbuf_free(&lx->sbuf);
  lx->open = NULL;
  lx->nopen = lx->capopen = 0;
}

const tfg_lex_open *tfg_lexer_innermost(const tfg_lexer *lx) {
  return lx->nopen ? &lx->open[lx->nopen - 1] : NULL;
}

static tfg_loc lex_loc(const tfg_lexer *lx, const unsigned char *from, const unsigned char *to) {
  tfg_loc l;
  l.src = lx->src;
  l.off = (uint32_t)(from - (const unsigned char *)lx->src->text);
  l.len = (uint32_t)(to - from);
  l.line = lx->line;
  l.col = (uint32_t)(from - lx->line_start) + 1;
  return l;
}

/* Reports a lexical error over [from, to). Errors that change the token
 * stream (a skipped byte, a string cut at the end of the line) also bump
 * stmt_errors, so the parser does not pile a syntax error on them. */
static void lex_error_at(tfg_lexer *lx, const unsigned char *from, const unsigned char *to,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void lex_error_at(tfg_lexer *lx, const unsigned char *from, const unsigned char *to,
                         const char *fmt, ...) {
  tfg_loc l = lex_loc(lx, from, to);
  tfg_strbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  tfg_diag_error(lx->diag, &l, "%s", b.data);
  tfg_strbuf_free(&b);
}

/* Width and suffix for quoting the current token in a message: long
 * tokens are cut at 32 bytes so a 10 MB "number" gives a short message. */
#define TOK_QUOTE_MAX 32
#define TOK_QUOTE(lx)                                                                   \
  (int)((lx)->cur - (lx)->tok > TOK_QUOTE_MAX ? TOK_QUOTE_MAX : (lx)->cur - (lx)->tok), \
      (const char *)(lx)->tok, ((lx)->cur - (lx)->tok > TOK_QUOTE_MAX ? "..." : "")

static void push_open(tfg_lexer *lx, char c, tfg_loc loc) {
  /* Deeper than the parser's stack can go: say so and end the input (the
   * parser may be discarding tokens in recovery and never overflow). */
  if (lx->nopen >= TFG_LEX_MAX_OPEN) {
    if (!lx->stopped) tfg_diag_error(lx->diag, &loc, "brackets are nested too deeply (more than %d open)", TFG_LEX_MAX_OPEN);
    lx->stopped = true;
    return;
  }
  if (lx->nopen == lx->capopen) {
    lx->capopen = lx->capopen ? lx->capopen * 2 : 16;
    lx->open = realloc(lx->open, sizeof *lx->open * lx->capopen);
    TFG_ASSERT(lx->open != NULL);
  }
  lx->open[lx->nopen].c = c;
  lx->open[lx->nopen].loc = loc;
  lx->nopen++;
}

/* Pops the innermost opener when it is the one c closes and returns
 * whether it matched. A '}' also closes every ( and [ left open inside
 * its block (braces never stand inside them), so a missing ')' does not
 * join the lines after the block. A stray closer leaves the stack alone;
 * the parser reports it. */
static bool pop_open(tfg_lexer *lx, char c) {
  char want = c == ')' ? '(' : c == ']' ? '[' : '{';
  if (lx->nopen && lx->open[lx->nopen - 1].c == want) {
    lx->nopen--;
    return true;
  }
  if (c == '}') {
    uint32_t k = lx->nopen;
    while (k && lx->open[k - 1].c != '{') k--;
    if (k) {
      /* Remember the innermost bracket dropped, for the parser's message. */
      lx->dropped = lx->open[lx->nopen - 1];
      lx->has_dropped = true;
      lx->nopen = k - 1; /* the ( and [ above it, and the { itself */
      return true;
    }
  }
  return false;
}

void tfg_lexer_recover(tfg_lexer *lx, const tfg_token *la) {
  if (la->kind == TFG_TOK_LBRACE && lx->nopen) {
    /* No '{' can stand inside ( or [: the brackets below it were never
     * closed. Drop them so the block's newlines end statements. */
    uint32_t top = lx->nopen - 1, k = top;
    while (k > 0 && lx->open[k - 1].c != '{') k--;
    lx->open[k] = lx->open[top];
    lx->nopen = k + 1;
    return;
  }
  if (la->kind == TFG_TOK_RPAREN || la->kind == TFG_TOK_RBRACKET) {
    /* A mismatched closer, like ']' for '(': take it as closing that. */
    if (!la->i && lx->nopen && lx->open[lx->nopen - 1].c != '{') lx->nopen--;
    return;
  }
  if (la->kind == TFG_TOK_RBRACE) return;
  while (lx->nopen && lx->open[lx->nopen - 1].c != '{' &&
         lx->open[lx->nopen - 1].loc.line < la->loc.line)
    lx->nopen--;
}

/* True when the next token after whitespace, comments and newlines is the
 * keyword `else` (so the newline before it does not end the `if`). *end is
 * set to where that token starts. */
static bool next_is_else(const unsigned char *p, const unsigned char **end) {
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    if (*p != '#') break;
    while (*p && *p != '\n') p++;
  }
  *end = p;
  /* Byte by byte: the && stops at the terminating NUL, memcmp would not. */
  if (!(p[0] == 'e' && p[1] == 'l' && p[2] == 's' && p[3] == 'e')) return false;
  unsigned char c = p[4];
  return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_');
}

/* Validates the UTF-8 of a comment's bytes [from, to). */
static void check_comment(tfg_lexer *lx, const unsigned char *from, const unsigned char *to) {
  for (const unsigned char *p = from; p < to;) {
    uint32_t cp;
    int n = tfg_utf8_decode(p, (size_t)(to - p), &cp);
    if (n == 0) {
      lex_error_at(lx, p, p + 1, "invalid UTF-8 byte 0x%02X in a comment", *p);
      n = 1;
    }
    p += n;
  }
}

/* Common look-alikes typed by editors and word processors. */
static const char *confusable(uint32_t cp) {
  switch (cp) {
  case 0x2212: case 0x2013: case 0x2014: return "'-'";
  case 0x00D7: return "'*'";
  case 0x00F7: case 0x2215: return "'/'";
  case 0x201C: case 0x201D: return "'\"'";
  case 0x2018: case 0x2019: return "'\"' (strings use double quotes)";
  case 0x00A0: case 0x2009: case 0x200B: return "a plain space";
  case 0x2264: return "'<='";
  case 0x2265: return "'>='";
  case 0x2260: return "'!='";
  }
  return NULL;
}

/* A byte no token starts with: a control character, a stray ASCII
 * symbol, a non-ASCII character, or invalid UTF-8. */
static void stray(tfg_lexer *lx) {
  const unsigned char *p = lx->tok;
  lx->stmt_errors++; /* the byte is skipped: the statement reads differently */
  uint32_t cp;
  int n = tfg_utf8_decode(p, (size_t)(lx->lim - p), &cp);
  if (n == 0) {
    lex_error_at(lx, p, p + 1, "invalid UTF-8 byte 0x%02X", *p);
    lx->cur = p + 1;
    return;
  }
  lx->cur = p + n;
  if (cp == 0) {
    lex_error_at(lx, p, p + 1, "unexpected NUL byte");
  } else if (cp < 0x20 || cp == 0x7F) {
    lex_error_at(lx, p, p + 1, "unexpected control character U+%04" PRIX32, cp);
  } else if (cp < 0x80) {
    lex_error_at(lx, p, p + 1, "unexpected character '%c'", (char)cp);
    switch (cp) {
    case '\'': tfg_diag_help(lx->diag, "strings use double quotes: \"...\""); break;
    case '&': tfg_diag_help(lx->diag, "the logical and is '&&'"); break;
    case '|': tfg_diag_help(lx->diag, "the logical or is '||'"); break;
    case '^': tfg_diag_help(lx->diag, "there is no power operator; use pow(x, p)"); break;
    case '~': tfg_diag_help(lx->diag, "the logical not is '!'; on tensors, compare with equal(x, 0)"); break;
    default: break;
    }
  } else if (tfg_utf8_is_unsafe(cp)) {
    /* Invisible or direction-changing: name it, never print it. */
    lex_error_at(lx, p, p + n, "unexpected character U+%04" PRIX32, cp);
  } else {
    lex_error_at(lx, p, p + n, "unexpected character U+%04" PRIX32 " '%.*s'", cp, n,
                 (const char *)p);
    const char *c = confusable(cp);
    if (c) tfg_diag_help(lx->diag, "did you mean %s?", c);
  }
}

/* Scans a string body after the opening quote at lx->tok; decodes into
 * t->s. Stops at the closing quote, or before a newline or the end of the
 * file (unterminated: reported, and the string ends there). */
static void lex_string(tfg_lexer *lx, tfg_token *t) {
  const unsigned char *open = lx->tok;
  tfg_strbuf_clear(&lx->sbuf);
  for (;;) {
    const unsigned char *start = lx->cur;
    /*!re2c
      re2c:define:YYCTYPE = "unsigned char";
      re2c:define:YYCURSOR = "lx->cur";
      re2c:define:YYMARKER = "lx->marker";
      re2c:yyfill:enable = 0;
      re2c:indent:top = 2;

      ["]       { break; }
      "\\\""    { tfg_strbuf_putc(&lx->sbuf, '"'); continue; }
      "\\\\"    { tfg_strbuf_putc(&lx->sbuf, '\\'); continue; }
      "\\n"     { tfg_strbuf_putc(&lx->sbuf, '\n'); continue; }
      "\\t"     { tfg_strbuf_putc(&lx->sbuf, '\t'); continue; }
      "\\" / [\n\x00] {
        continue; /* the newline or end is reported as unterminated below */
      }
      "\\" / "\r\n" { continue; /* CRLF: reported as unterminated below */ }
      "\\" {
        uint32_t cp;
        int n = tfg_utf8_decode(lx->cur, (size_t)(lx->lim - lx->cur), &cp);
        if (n == 0) n = 1;
        if (n == 1 && (cp < 0x20 || cp >= 0x7F))
          lex_error_at(lx, start, lx->cur + n, "unknown escape sequence '\\' followed by byte 0x%02X", *lx->cur);
        else if (n > 1 && tfg_utf8_is_unsafe(cp))
          lex_error_at(lx, start, lx->cur + n, "unknown escape sequence '\\' followed by U+%04" PRIX32, cp);
        else
          lex_error_at(lx, start, lx->cur + n, "unknown escape sequence '\\%.*s'", n, (const char *)lx->cur);
        tfg_diag_help(lx->diag, "the escapes are \\\" \\\\ \\n and \\t");
        lx->cur += n;
        continue;
      }
      [\n] | [\x00] {
        if (lx->cur[-1] == 0 && lx->cur - 1 < lx->lim) {
          lex_error_at(lx, start, lx->cur, "NUL byte in a string");
          continue;
        }
        lx->cur--; /* leave the newline (or the end) for the next token */
        if (lx->cur > start && lx->cur[-1] == '\r') lx->cur--; /* CRLF: the \r is not string */
        lex_error_at(lx, open, lx->cur, "unterminated string");
        lx->stmt_errors++;
        tfg_diag_help(lx->diag, "close it with '\"' on the same line; write \\n for a newline");
        break;
      }
      [\x80-\xff] {
        uint32_t cp;
        int n = tfg_utf8_decode(start, (size_t)(lx->lim - start), &cp);
        if (n == 0) {
          lex_error_at(lx, start, start + 1, "invalid UTF-8 byte 0x%02X in a string", *start);
          continue;
        }
        tfg_strbuf_putn(&lx->sbuf, (const char *)start, (size_t)n);
        lx->cur = start + n;
        continue;
      }
      * { tfg_strbuf_putc(&lx->sbuf, (char)*start); continue; }
    */
  }
  t->s = tfg_arena_strndup(lx->arena, lx->sbuf.data ? lx->sbuf.data : "", lx->sbuf.len);
  t->len = (uint32_t)lx->sbuf.len;
}

static void lex_int(tfg_lexer *lx, tfg_token *t) {
  int64_t v = 0;
  for (const unsigned char *p = lx->tok; p < lx->cur; p++) {
    int d = *p - '0';
    if (v > (INT64_MAX - d) / 10) {
      lex_error_at(lx, lx->tok, lx->cur, "integer literal is too large (the largest is %" PRId64 ")",
                   INT64_MAX);
      v = 0;
      break;
    }
    v = v * 10 + d;
  }
  t->i = v;
  /* "1." is not a float (LANGUAGE.md: digits on both sides of '.'), but
   * "0..4" is a range: only a '.' that starts neither '..' nor a member. */
  if (lx->cur[0] == '.' && lx->cur[1] != '.' &&
      !((lx->cur[1] >= 'a' && lx->cur[1] <= 'z') || (lx->cur[1] >= 'A' && lx->cur[1] <= 'Z') ||
        lx->cur[1] == '_')) {
    lx->cur++;
    lex_error_at(lx, lx->tok, lx->cur, "a float needs digits after '.'");
    lx->cur--; /* quote the digits only */
    tfg_diag_help(lx->diag, "write %.*s%s.0", TOK_QUOTE(lx));
    lx->cur++;
  }
}

static void lex_float(tfg_lexer *lx, tfg_token *t) {
  char buf[128];
  size_t n = (size_t)(lx->cur - lx->tok);
  if (n >= sizeof buf) {
    /* Longer mantissas add nothing a double can hold; strtod on a heap
     * copy keeps the value exact anyway. */
    char *p = tfg_arena_strndup(lx->arena, (const char *)lx->tok, n);
    errno = 0;
    t->f = strtod(p, NULL);
  } else {
    memcpy(buf, lx->tok, n);
    buf[n] = '\0';
    errno = 0;
    t->f = strtod(buf, NULL);
  }
  if (errno == ERANGE && (t->f > 1.0 || t->f < -1.0)) {
    lex_error_at(lx, lx->tok, lx->cur, "float literal is out of range");
    t->f = 0;
  }
}

const char *tfg_token_kind_str(int kind) {
  switch (kind) {
  case TFG_TOK_END: return "end of file";
  case TFG_TOK_NEWLINE: return "end of line";
  case TFG_TOK_IDENT: return "a name";
  case TFG_TOK_INT: return "an integer";
  case TFG_TOK_FLOAT: return "a float";
  case TFG_TOK_STRING: return "a string";
  case TFG_TOK_IMPORT: return "keyword 'import'";
  case TFG_TOK_AS: return "keyword 'as'";
  case TFG_TOK_LET: return "keyword 'let'";
  case TFG_TOK_FN: return "keyword 'fn'";
  case TFG_TOK_RETURN: return "keyword 'return'";
  case TFG_TOK_PARAM: return "keyword 'param'";
  case TFG_TOK_INPUT: return "keyword 'input'";
  case TFG_TOK_FROM: return "keyword 'from'";
  case TFG_TOK_DATA: return "keyword 'data'";
  case TFG_TOK_WITH: return "keyword 'with'";
  case TFG_TOK_SCOPE: return "keyword 'scope'";
  case TFG_TOK_FOR: return "keyword 'for'";
  case TFG_TOK_IN: return "keyword 'in'";
  case TFG_TOK_IF: return "keyword 'if'";
  case TFG_TOK_ELSE: return "keyword 'else'";
  case TFG_TOK_TRAIN: return "keyword 'train'";
  case TFG_TOK_PRINT: return "keyword 'print'";
  case TFG_TOK_TRUE: return "keyword 'true'";
  case TFG_TOK_FALSE: return "keyword 'false'";
  case TFG_TOK_NONE: return "keyword 'none'";
  case TFG_TOK_CPU: return "keyword 'cpu'";
  case TFG_TOK_GPU: return "keyword 'gpu'";
  case TFG_TOK_LOAD: return "keyword 'load'";
  case TFG_TOK_PLUS: return "'+'";
  case TFG_TOK_MINUS: return "'-'";
  case TFG_TOK_STAR: return "'*'";
  case TFG_TOK_SLASH: return "'/'";
  case TFG_TOK_PERCENT: return "'%'";
  case TFG_TOK_EQEQ: return "'=='";
  case TFG_TOK_NE: return "'!='";
  case TFG_TOK_LT: return "'<'";
  case TFG_TOK_LE: return "'<='";
  case TFG_TOK_GT: return "'>'";
  case TFG_TOK_GE: return "'>='";
  case TFG_TOK_ANDAND: return "'&&'";
  case TFG_TOK_OROR: return "'||'";
  case TFG_TOK_BANG: return "'!'";
  case TFG_TOK_ASSIGN: return "'='";
  case TFG_TOK_DOT: return "'.'";
  case TFG_TOK_DOTDOT: return "'..'";
  case TFG_TOK_COMMA: return "','";
  case TFG_TOK_COLON: return "':'";
  case TFG_TOK_AT: return "'@'";
  case TFG_TOK_LPAREN: return "'('";
  case TFG_TOK_RPAREN: return "')'";
  case TFG_TOK_LBRACKET: return "'['";
  case TFG_TOK_RBRACKET: return "']'";
  case TFG_TOK_LBRACE: return "'{'";
  case TFG_TOK_RBRACE: return "'}'";
  case TFG_TOK_SEMI: return "';'";
  }
  return "a token";
}

/* The name just scanned. */
static int lex_ident(tfg_lexer *lx, tfg_token *t) {
  t->s = tfg_arena_strndup(lx->arena, (const char *)lx->tok, (size_t)(lx->cur - lx->tok));
  t->len = (uint32_t)(lx->cur - lx->tok);
  return TFG_TOK_IDENT;
}

/* Whether a string starts at p, after blanks on the same line. `load` is
 * a keyword only there (a load statement), so a program may still name a
 * value `load`: a name followed by a string is never valid otherwise. */
static bool next_is_string(const unsigned char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return *p == '"';
}

/* The scanner proper: one token per call, skipping whitespace, comments
 * and suppressed newlines. */
static int lex_scan(tfg_lexer *lx, tfg_token *t) {
  for (;;) {
    if (tfg_diag_limit_reached(lx->diag) || lx->stopped) return TFG_TOK_END; /* stop scanning junk */
    lx->tok = lx->cur;
    /*!re2c
      re2c:define:YYCTYPE = "unsigned char";
      re2c:define:YYCURSOR = "lx->cur";
      re2c:define:YYMARKER = "lx->marker";
      re2c:yyfill:enable = 0;
      re2c:indent:top = 2;

      dig = [0-9];
      idch = [A-Za-z0-9_];
      exp = [eE] [+-]? dig+;

      [\x00] {
        if (lx->tok >= lx->lim) { lx->cur = lx->tok; return TFG_TOK_END; }
        stray(lx);
        continue;
      }
      [ \t\r]+ { continue; }
      "#" [^\n\x00]* {
        check_comment(lx, lx->tok + 1, lx->cur);
        /* A NUL does not end a comment: report it and go on to the newline. */
        while (*lx->cur == 0 && lx->cur < lx->lim) {
          lex_error_at(lx, lx->cur, lx->cur + 1, "NUL byte in a comment");
          const unsigned char *from = ++lx->cur;
          while (*lx->cur != '\n' && *lx->cur != 0) lx->cur++;
          check_comment(lx, from, lx->cur);
        }
        continue;
      }
      "\n" {
        tfg_loc nl = lex_loc(lx, lx->tok, lx->cur); /* on the line it ends */
        lx->line++;
        lx->line_start = lx->cur;
        const tfg_lex_open *o = tfg_lexer_innermost(lx);
        if (o && o->c != '{') continue;   /* implicit line joining in ( ) and [ ] */
        /* One look-ahead serves a whole run of blank and comment lines:
         * each of them leads to the same next token. */
        if (lx->cur >= lx->else_scan_end) {
          lx->else_scan_result = next_is_else(lx->cur, &lx->else_scan_end);
        }
        if (lx->else_scan_result) continue;
        t->loc = nl;
        return TFG_TOK_NEWLINE;
      }

      "import" { return TFG_TOK_IMPORT; }
      "as"     { return TFG_TOK_AS; }
      "let"    { return TFG_TOK_LET; }
      "fn"     { return TFG_TOK_FN; }
      "return" { return TFG_TOK_RETURN; }
      "param"  { return TFG_TOK_PARAM; }
      "input"  { return TFG_TOK_INPUT; }
      "from"   { return TFG_TOK_FROM; }
      "data"   { return TFG_TOK_DATA; }
      "with"   { return TFG_TOK_WITH; }
      "scope"  { return TFG_TOK_SCOPE; }
      "for"    { return TFG_TOK_FOR; }
      "in"     { return TFG_TOK_IN; }
      "if"     { return TFG_TOK_IF; }
      "else"   { return TFG_TOK_ELSE; }
      "train"  { return TFG_TOK_TRAIN; }
      "print"  { return TFG_TOK_PRINT; }
      "true"   { return TFG_TOK_TRUE; }
      "false"  { return TFG_TOK_FALSE; }
      "none"   { return TFG_TOK_NONE; }
      "cpu"    { return TFG_TOK_CPU; }
      "gpu"    { return TFG_TOK_GPU; }
      "load" { return next_is_string(lx->cur) ? TFG_TOK_LOAD : lex_ident(lx, t); }

      [A-Za-z_] idch* { return lex_ident(lx, t); }
      /* the 1F1B pipeline schedule (LANGUAGE.md 6.1: schedule = 1f1b), the
       * one name that starts with a digit; first among rules of its length */
      "1f1b" { return lex_ident(lx, t); }

      dig+ { lex_int(lx, t); return TFG_TOK_INT; }
      dig+ "." dig+ exp? | dig+ exp { lex_float(lx, t); return TFG_TOK_FLOAT; }
      dig+ ("." dig+)? [eE] [+-]? {
        lex_error_at(lx, lx->tok, lx->cur, "the exponent of '%.*s%s' has no digits",
                     TOK_QUOTE(lx));
        tfg_diag_help(lx->diag, "write it like 1e-3 or 2.5e4");
        t->f = 0;
        return TFG_TOK_FLOAT;
      }
      dig idch* ("." idch+)* {
        lex_error_at(lx, lx->tok, lx->cur, "invalid number '%.*s%s'", TOK_QUOTE(lx));
        tfg_diag_help(lx->diag, "numbers are decimal: 42, 1.5, 1e-3");
        t->i = 0;
        return TFG_TOK_INT;
      }
      "." dig+ exp? {
        lex_error_at(lx, lx->tok, lx->cur, "a float needs digits before '.'");
        tfg_diag_help(lx->diag, "write 0%.*s%s", TOK_QUOTE(lx));
        lex_float(lx, t);
        return TFG_TOK_FLOAT;
      }

      ["] { lex_string(lx, t); return TFG_TOK_STRING; }

      "+"  { return TFG_TOK_PLUS; }
      "-"  { return TFG_TOK_MINUS; }
      "*"  { return TFG_TOK_STAR; }
      "/"  { return TFG_TOK_SLASH; }
      "%"  { return TFG_TOK_PERCENT; }
      "==" { return TFG_TOK_EQEQ; }
      "!=" { return TFG_TOK_NE; }
      "<"  { return TFG_TOK_LT; }
      "<=" { return TFG_TOK_LE; }
      ">"  { return TFG_TOK_GT; }
      ">=" { return TFG_TOK_GE; }
      "&&" { return TFG_TOK_ANDAND; }
      "||" { return TFG_TOK_OROR; }
      "!"  { return TFG_TOK_BANG; }
      "="  { return TFG_TOK_ASSIGN; }
      "."  { return TFG_TOK_DOT; }
      ".." { return TFG_TOK_DOTDOT; }
      ","  { return TFG_TOK_COMMA; }
      ":"  { return TFG_TOK_COLON; }
      "@"  { return TFG_TOK_AT; }
      ";"  { return TFG_TOK_SEMI; }
      "("  { push_open(lx, '(', lex_loc(lx, lx->tok, lx->cur)); return TFG_TOK_LPAREN; }
      "["  { push_open(lx, '[', lex_loc(lx, lx->tok, lx->cur)); return TFG_TOK_LBRACKET; }
      "{"  { push_open(lx, '{', lex_loc(lx, lx->tok, lx->cur)); return TFG_TOK_LBRACE; }
      ")"  { t->i = pop_open(lx, ')'); return TFG_TOK_RPAREN; }
      "]"  { t->i = pop_open(lx, ']'); return TFG_TOK_RBRACKET; }
      "}"  { t->i = pop_open(lx, '}'); return TFG_TOK_RBRACE; }

      * { stray(lx); continue; }
    */
  }
}

int tfg_lexer_next(tfg_lexer *lx, tfg_token *t) {
  memset(t, 0, sizeof *t);
  if (tfg_diag_limit_reached(lx->diag) || lx->stopped) {
    /* Past the error limit: end the parse now instead of scanning on. */
    t->kind = TFG_TOK_END;
    t->loc = lex_loc(lx, lx->cur, lx->cur);
    return t->kind;
  }
  if (lx->after_sep) lx->stmt_errors = 0; /* a new statement starts */
  lx->has_dropped = false;
  lx->after_sep = false;
  t->kind = lex_scan(lx, t);
  if (t->kind == TFG_TOK_END) {
    /* Point just after the last text, not at an empty line after the
     * final newlines: "found end of file" then sits where text is missing. */
    uint32_t off = lx->src->len;
    while (off && lx->src->text[off - 1] && strchr(" \t\r\n", lx->src->text[off - 1])) off--;
    t->loc = tfg_source_loc(lx->src, off, 0);
  } else if (t->kind != TFG_TOK_NEWLINE) {
    t->loc = lex_loc(lx, lx->tok, lx->cur);
  }
  t->bol = t->loc.line != lx->last_line;
  lx->last_line = t->loc.line;
  /* Reset on the token after the separator: a syntax error whose
   * lookahead is the separator itself still belongs to this statement. */
  lx->after_sep = t->kind == TFG_TOK_NEWLINE || t->kind == TFG_TOK_SEMI;
  return t->kind;
}

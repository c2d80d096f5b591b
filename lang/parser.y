/* lang/parser.y: the tfg grammar (LANGUAGE.md sections 1-4 and 6).
 *
 * Actions only build nodes (lang/ast.h); meaning lives in lang/interp.c.
 * A node constructor returns NULL past the nesting limit, after reporting;
 * CHECK then turns that into ordinary error recovery.
 *
 * Recovery: `stmts: stmts error sep` resumes at the next statement, and
 * `body: stmts error` lets a block's '}' close the block even after an
 * error inside it, so one mistake costs one message. Syntax errors are
 * worded by tfg_parse_report (below) from the expected-token set that
 * LAC computes exactly. */
%require "3.8"
%define api.pure full
%define api.prefix {tfg_yy}
%define api.token.prefix {TFG_TOK_}
%define api.location.type {tfg_loc}
%define parse.error custom
%define parse.lac full
%define lr.default-reduction accepting
%locations
%expect 0
%param {tfg_parser *P}

%code requires {
#include "lang/ast.h"
#include "lang/lexer.h"

typedef struct tfg_parser {
  tfg_lexer lex;
  tfg_ast_ctx ast;
  tfg_diag *diag;
  const tfg_source *src;
  tfg_token la;   /* the last token scanned: the lookahead at an error */
  tfg_token prev; /* the token before it */
  tfg_token prev2; /* and the one before that */
  tfg_ast *result;
  int nsyntax;    /* syntax errors reported */
  size_t errors_before; /* errors in the sink when the parse began */
  bool first_error_at_eof;
  /* The '{' of the latest `load "f" {` block (where it opens: offset in
   * src), so a bad statement in it is said to be in a load block, not a
   * train block: the two share the settings grammar. */
  uint32_t load_brace;
  bool has_load_brace;
} tfg_parser;
}

%code {
#include <stdlib.h>
#include <string.h>

#include "lang/parse.h"

/* Deepest parser stack: bounds right-nested input ((((...)))) long
 * before memory does; past it the program is "nested too deeply". */
#define YYMAXDEPTH 10000

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                    \
  do {                                                                 \
    if (N) {                                                           \
      (Cur) = tfg_loc_join(YYRHSLOC(Rhs, 1), YYRHSLOC(Rhs, N));        \
    } else {                                                           \
      (Cur) = YYRHSLOC(Rhs, 0);                                        \
      (Cur).off += (Cur).len;                                          \
      (Cur).col += (Cur).len;                                          \
      (Cur).len = 0;                                                   \
    }                                                                  \
  } while (0)

#define NODE(kind, loc, a, b, c) tfg_ast_new(&P->ast, TFG_AST_##kind, loc, a, b, c)
#define CHECK(x) do { if (!(x)) YYERROR; } while (0)

static int tfg_yylex(TFG_YYSTYPE *val, tfg_loc *loc, tfg_parser *P);
static void tfg_yyerror(tfg_loc *loc, tfg_parser *P, const char *msg);

/* A node named by an identifier token. */
static tfg_ast *named(tfg_parser *P, tfg_ast_kind kind, tfg_loc loc, tfg_token name,
                      tfg_ast *a, tfg_ast *b, tfg_ast *c) {
  tfg_ast *n = tfg_ast_new(&P->ast, kind, loc, a, b, c);
  if (n) n->name = name.s;
  return n;
}

/* The token of reserved word w used as a name (a keyword argument's). */
static tfg_token word(tfg_loc loc, const char *w) {
  return (tfg_token){.kind = TFG_TOK_IDENT, .loc = loc, .s = w, .len = (uint32_t)strlen(w)};
}

/* Moves the items of a temporary LIST node into n's list. */
static tfg_ast *adopt(tfg_ast *n, tfg_ast *list) {
  if (!n) return NULL;
  n->list = list->list;
  if (list->depth + 1 > n->depth) n->depth = list->depth + 1;
  return n;
}
}

%union {
  tfg_token tok;
  tfg_ast *node;
  int op;
}

%token END 0 "end of file"
%token <tok> IDENT "name" INT "integer" FLOAT "float" STRING "string"
%token IMPORT "import" AS "as" LET "let" FN "fn" RETURN "return" PARAM "param"
       INPUT "input" FROM "from" DATA "data" WITH "with" SCOPE "scope" FOR "for"
       IN "in" IF "if" ELSE "else" TRAIN "train" PRINT "print" TRUE "true"
       FALSE "false" NONE "none" CPU "cpu" GPU "gpu"
%token LOAD "load" /* a keyword only before a string (lang/lexer.re): not reserved */
%token PLUS "+" MINUS "-" STAR "*" SLASH "/" PERCENT "%" EQEQ "==" NE "!="
       LT "<" LE "<=" GT ">" GE ">=" ANDAND "&&" OROR "||" BANG "!" ASSIGN "="
       DOT "." DOTDOT ".." COMMA "," COLON ":" AT "@" LPAREN "(" RPAREN ")"
       LBRACKET "[" RBRACKET "]" LBRACE "{" RBRACE "}" SEMI ";" NEWLINE "end of line"

%type <node> body stmts stmt simple_stmt compound_stmt if_stmt block annot_dev
%type <node> params param_list param type dims dim_list settings train_body setting
%type <node> expr range_expr or_expr and_expr cmp_expr add_expr mul_expr unary postfix
%type <node> primary device dev_index args arg_list arg items item_list print_list string
%type <op> cmp_op mul_op add_op
%type <tok> reserved

%initial-action { @$ = tfg_source_loc(P->src, 0, 0); }

%%

program: body { P->result = $1; } ;

body:
    stmts
  | stmts stmt      { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $2)); }
  | stmts error     { $$ = $1; }
  ;

stmts:
    %empty          { $$ = NODE(BLOCK, @$, NULL, NULL, NULL); CHECK($$); }
  | stmts sep
  | stmts stmt sep  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $2)); }
  | stmts error sep { $$ = $1; yyerrok; }
  ;

sep: NEWLINE | ";" ;

stmt:
    simple_stmt
  | compound_stmt
  | error block        { $$ = $2; } /* a broken header: still parse the block, so
                                       its '}' does not end the enclosing one */
  | "@" annot_dev stmt { $$ = NODE(AT, @$, $2, $3, NULL); CHECK($$); }
  ;

annot_dev:
    device
  | IDENT              { $$ = named(P, TFG_AST_NAME, @1, $1, NULL, NULL, NULL); CHECK($$); }
  | "(" expr ")"       { $$ = $2; }
  ;

simple_stmt:
    "import" IDENT     { $$ = NODE(IMPORT, @$, NULL, NULL, NULL); CHECK($$); $$->str = $2.s; $$->len = $2.len; }
  | "import" IDENT "as" IDENT
                       { $$ = named(P, TFG_AST_IMPORT, @$, $4, NULL, NULL, NULL); CHECK($$); $$->str = $2.s; $$->len = $2.len; }
  | "import" STRING    { $$ = NODE(IMPORT, @$, NULL, NULL, NULL); CHECK($$); $$->str = $2.s; $$->len = $2.len; $$->op = 1; }
  | "import" STRING "as" IDENT
                       { $$ = named(P, TFG_AST_IMPORT, @$, $4, NULL, NULL, NULL); CHECK($$); $$->str = $2.s; $$->len = $2.len; $$->op = 1; }
  | "let" IDENT "=" expr       { $$ = named(P, TFG_AST_LET, @$, $2, $4, NULL, NULL); CHECK($$); }
  | IDENT "=" expr             { $$ = named(P, TFG_AST_ASSIGN, @$, $1, $3, NULL, NULL); CHECK($$); }
  | "param" IDENT ":" type     { $$ = named(P, TFG_AST_PARAM, @$, $2, $4, NULL, NULL); CHECK($$); }
  | "param" IDENT ":" type "=" expr
                               { $$ = named(P, TFG_AST_PARAM, @$, $2, $4, $6, NULL); CHECK($$); }
  | "input" IDENT ":" type     { $$ = named(P, TFG_AST_INPUT, @$, $2, $4, NULL, NULL); CHECK($$); }
  | "input" IDENT ":" type "from" expr
                               { $$ = named(P, TFG_AST_INPUT, @$, $2, $4, $6, NULL); CHECK($$); }
  | "data" IDENT "=" expr      { $$ = named(P, TFG_AST_DATA, @$, $2, $4, NULL, NULL); CHECK($$); }
  | "return"                   { $$ = NODE(RETURN, @$, NULL, NULL, NULL); CHECK($$); }
  | "return" expr              { $$ = NODE(RETURN, @$, $2, NULL, NULL); CHECK($$); }
  | "print" print_list         { $$ = $2; $$->kind = TFG_AST_PRINT; $$->loc = @$; }
  | "load" string              { $$ = NODE(LOAD, @$, $2, NULL, NULL); CHECK($$); }
  | expr                       { $$ = NODE(EXPR_STMT, @$, $1, NULL, NULL); CHECK($$); }
  ;

print_list:
    expr                { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); CHECK(tfg_ast_push(&P->ast, $$, $1)); }
  | print_list "," expr { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $3)); }
  ;

compound_stmt:
    "fn" IDENT "(" params ")" block
                          { $$ = adopt(named(P, TFG_AST_FN, @$, $2, $6, NULL, NULL), $4); CHECK($$); }
  | "with" expr block     { $$ = NODE(WITH, @$, $2, $3, NULL); CHECK($$); }
  | "scope" IDENT block   { $$ = named(P, TFG_AST_SCOPE, @$, $2, $3, NULL, NULL); CHECK($$); }
  | "for" IDENT "in" expr block
                          { $$ = named(P, TFG_AST_FOR, @$, $2, $4, $5, NULL); CHECK($$); }
  | if_stmt
  | "train" expr "{" train_body "}"
                          { $$ = adopt(NODE(TRAIN, @$, $2, NULL, NULL), $4); CHECK($$); }
  | "load" string "{" train_body "}"
                          { $$ = adopt(NODE(LOAD, @$, $2, NULL, NULL), $4); CHECK($$); }
  ;

if_stmt:
    "if" expr block               { $$ = NODE(IF, @$, $2, $3, NULL); CHECK($$); }
  /* A broken condition: keep the blocks and their else, so one typo in
   * the condition is one error (not one per else). */
  | "if" error block              { $$ = $3; }
  | "if" error block "else" block { $$ = $3; }
  | "if" error block "else" if_stmt { $$ = $3; }
  | "if" expr block "else" block  { $$ = NODE(IF, @$, $2, $3, $5); CHECK($$); }
  | "if" expr block "else" if_stmt
                                  { $$ = NODE(IF, @$, $2, $3, $5); CHECK($$); }
  ;

block: "{" body "}" { $$ = $2; $$->loc = @$; } ;

params:
    %empty            { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); }
  | param_list
  | param_list ","
  ;

param_list:
    param                 { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); CHECK(tfg_ast_push(&P->ast, $$, $1)); }
  | param_list "," param  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $3)); }
  ;

param:
    IDENT           { $$ = named(P, TFG_AST_NAME, @$, $1, NULL, NULL, NULL); CHECK($$); }
  | IDENT "=" expr  { $$ = named(P, TFG_AST_KWARG, @$, $1, $3, NULL, NULL); CHECK($$); }
  | reserved "=" expr { $$ = named(P, TFG_AST_KWARG, @$, $1, $3, NULL, NULL); CHECK($$); }
  ;

type: IDENT "[" dims "]" { $$ = $3; $$->kind = TFG_AST_TYPE; $$->name = $1.s; $$->loc = @$; } ;

dims:
    %empty          { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); }
  | dim_list
  | dim_list ","
  ;

dim_list:
    expr               { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); CHECK(tfg_ast_push(&P->ast, $$, $1)); }
  | dim_list "," expr  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $3)); }
  ;

train_body:
    settings
  | settings setting  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $2)); }
  | settings error    { $$ = $1; }
  ;

settings:
    %empty                 { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); }
  | settings sep
  | settings setting sep   { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $2)); }
  | settings error sep     { $$ = $1; yyerrok; }
  ;

setting: IDENT "=" expr { $$ = named(P, TFG_AST_KWARG, @$, $1, $3, NULL, NULL); CHECK($$); } ;

expr: range_expr ;

range_expr:
    or_expr
  | or_expr ".." or_expr  { $$ = NODE(RANGE, @$, $1, $3, NULL); CHECK($$); }
  ;

or_expr:
    and_expr
  | or_expr "||" and_expr { $$ = NODE(BINARY, @$, $1, $3, NULL); CHECK($$); $$->op = TFG_AST_OP_OR; }
  ;

and_expr:
    cmp_expr
  | and_expr "&&" cmp_expr { $$ = NODE(BINARY, @$, $1, $3, NULL); CHECK($$); $$->op = TFG_AST_OP_AND; }
  ;

cmp_expr:
    add_expr
  | cmp_expr cmp_op add_expr { $$ = NODE(BINARY, @$, $1, $3, NULL); CHECK($$); $$->op = $2; }
  ;

cmp_op:
    "==" { $$ = TFG_AST_OP_EQ; } | "!=" { $$ = TFG_AST_OP_NE; }
  | "<"  { $$ = TFG_AST_OP_LT; } | "<=" { $$ = TFG_AST_OP_LE; }
  | ">"  { $$ = TFG_AST_OP_GT; } | ">=" { $$ = TFG_AST_OP_GE; }
  ;

add_expr:
    mul_expr
  | add_expr add_op mul_expr { $$ = NODE(BINARY, @$, $1, $3, NULL); CHECK($$); $$->op = $2; }
  ;

add_op: "+" { $$ = TFG_AST_OP_ADD; } | "-" { $$ = TFG_AST_OP_SUB; } ;

mul_expr:
    unary
  | mul_expr mul_op unary { $$ = NODE(BINARY, @$, $1, $3, NULL); CHECK($$); $$->op = $2; }
  ;

mul_op: "*" { $$ = TFG_AST_OP_MUL; } | "/" { $$ = TFG_AST_OP_DIV; } | "%" { $$ = TFG_AST_OP_MOD; } ;

unary:
    postfix
  | "-" unary { $$ = NODE(UNARY, @$, $2, NULL, NULL); CHECK($$); $$->op = TFG_AST_OP_NEG; }
  | "!" unary { $$ = NODE(UNARY, @$, $2, NULL, NULL); CHECK($$); $$->op = TFG_AST_OP_NOT; }
  ;

postfix:
    primary
  | postfix "(" args ")"   { $$ = adopt(NODE(CALL, @$, $1, NULL, NULL), $3); CHECK($$); }
  | postfix "." IDENT      { $$ = named(P, TFG_AST_MEMBER, @$, $3, $1, NULL, NULL); CHECK($$); }
  | postfix "[" expr "]"   { $$ = NODE(INDEX, @$, $1, $3, NULL); CHECK($$); }
  ;

primary:
    INT      { $$ = NODE(INT, @$, NULL, NULL, NULL); CHECK($$); $$->ival = $1.i; }
  | FLOAT    { $$ = NODE(FLOAT, @$, NULL, NULL, NULL); CHECK($$); $$->fval = $1.f; }
  | string
  | "true"   { $$ = NODE(BOOL, @$, NULL, NULL, NULL); CHECK($$); $$->ival = 1; }
  | "false"  { $$ = NODE(BOOL, @$, NULL, NULL, NULL); CHECK($$); }
  | "none"   { $$ = NODE(NONE, @$, NULL, NULL, NULL); CHECK($$); }
  | IDENT    { $$ = named(P, TFG_AST_NAME, @$, $1, NULL, NULL, NULL); CHECK($$); }
  | device
  | "[" items "]"  { $$ = $2; $$->loc = @$; }
  | "(" expr ")"   { $$ = $2; }
  ;

string: STRING { $$ = NODE(STRING, @$, NULL, NULL, NULL); CHECK($$); $$->str = $1.s; $$->len = $1.len; } ;

device:
    "cpu"                { $$ = NODE(DEVICE, @$, NULL, NULL, NULL); CHECK($$); $$->op = TFG_AST_DEVICE_CPU; }
  | "cpu" ":" dev_index  { $$ = $3; $$->loc = @$; $$->op = TFG_AST_DEVICE_CPU; }
  | "gpu" ":" dev_index  { $$ = $3; $$->loc = @$; $$->op = TFG_AST_DEVICE_GPU; }
  ;

dev_index:
    INT           { tfg_ast *i = NODE(INT, @1, NULL, NULL, NULL); CHECK(i); i->ival = $1.i;
                    $$ = NODE(DEVICE, @$, i, NULL, NULL); CHECK($$); }
  | "*"           { $$ = NODE(DEVICE, @$, NULL, NULL, NULL); CHECK($$); $$->ival = 1; }
  | "(" expr ")"  { $$ = NODE(DEVICE, @$, $2, NULL, NULL); CHECK($$); }
  ;

args:
    %empty          { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); }
  | arg_list
  | arg_list ","
  ;

arg_list:
    arg               { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); CHECK(tfg_ast_push(&P->ast, $$, $1)); }
  | arg_list "," arg  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $3)); }
  ;

arg:
    expr
  | IDENT "=" expr  { $$ = named(P, TFG_AST_KWARG, @$, $1, $3, NULL, NULL); CHECK($$); }
  | reserved "=" expr { $$ = named(P, TFG_AST_KWARG, @$, $1, $3, NULL, NULL); CHECK($$); }
  ;

/* A keyword argument's name (and a parameter's with a default, as the
 * builtins' signatures declare them) may be a reserved word that cannot
 * start an expression (LANGUAGE.md 6.1: parallel(data = 2, ...)). */
reserved:
    "data"   { $$ = word(@$, "data"); }
  | "param"  { $$ = word(@$, "param"); }
  | "input"  { $$ = word(@$, "input"); }
  | "train"  { $$ = word(@$, "train"); }
  | "print"  { $$ = word(@$, "print"); }
  | "scope"  { $$ = word(@$, "scope"); }
  | "with"   { $$ = word(@$, "with"); }
  | "from"   { $$ = word(@$, "from"); }
  ;

items:
    %empty          { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); }
  | item_list
  | item_list ","
  ;

item_list:
    expr                { $$ = NODE(LIST, @$, NULL, NULL, NULL); CHECK($$); CHECK(tfg_ast_push(&P->ast, $$, $1)); }
  | item_list "," expr  { $$ = $1; CHECK(tfg_ast_push(&P->ast, $$, $3)); }
  ;

%%

static int tfg_yylex(TFG_YYSTYPE *val, tfg_loc *loc, tfg_parser *P) {
  P->prev2 = P->prev;
  P->prev = P->la;
  int kind = tfg_lexer_next(&P->lex, &P->la);
  if (kind == TFG_TOK_LBRACE && P->prev.kind == TFG_TOK_STRING && P->prev2.kind == TFG_TOK_LOAD) {
    P->load_brace = P->la.loc.off; /* LOAD is a token only before a string: this is a load block */
    P->has_load_brace = true;
  }
  val->tok = P->la;
  *loc = P->la.loc;
  return kind;
}

/* Bison calls this only for "memory exhausted": the parser stack passed
 * YYMAXDEPTH, i.e. brackets or blocks nested absurdly deep. */
static void tfg_yyerror(tfg_loc *loc, tfg_parser *P, const char *msg) {
  (void)msg;
  tfg_diag_error(P->diag, loc, "nesting is too deep (the parser stack passed %d entries)",
                 YYMAXDEPTH);
  P->nsyntax++;
}

/* ---- syntax error messages ------------------------------------------- */

typedef struct tokset {
  bool has[YYNTOKENS];
} tokset;

static const yysymbol_kind_t expr_start[] = {
    YYSYMBOL_INT,   YYSYMBOL_FLOAT, YYSYMBOL_STRING, YYSYMBOL_TRUE,     YYSYMBOL_FALSE,
    YYSYMBOL_NONE,  YYSYMBOL_IDENT, YYSYMBOL_CPU,    YYSYMBOL_GPU,      YYSYMBOL_LBRACKET,
    YYSYMBOL_LPAREN, YYSYMBOL_MINUS, YYSYMBOL_BANG,
};
static const yysymbol_kind_t stmt_start[] = {
    YYSYMBOL_IMPORT, YYSYMBOL_LET,   YYSYMBOL_PARAM, YYSYMBOL_INPUT, YYSYMBOL_DATA,
    YYSYMBOL_FN,     YYSYMBOL_RETURN, YYSYMBOL_WITH, YYSYMBOL_SCOPE, YYSYMBOL_FOR,
    YYSYMBOL_IF,     YYSYMBOL_TRAIN, YYSYMBOL_PRINT, YYSYMBOL_AT,
};
/* Tokens that continue an expression: true after any complete operand,
 * so listing them would bury the useful alternatives. */
static const yysymbol_kind_t continuations[] = {
    YYSYMBOL_PLUS, YYSYMBOL_MINUS, YYSYMBOL_STAR,  YYSYMBOL_SLASH, YYSYMBOL_PERCENT,
    YYSYMBOL_EQEQ, YYSYMBOL_NE,    YYSYMBOL_LT,    YYSYMBOL_LE,    YYSYMBOL_GT,
    YYSYMBOL_GE,   YYSYMBOL_ANDAND, YYSYMBOL_OROR, YYSYMBOL_DOT,   YYSYMBOL_DOTDOT,
    YYSYMBOL_LPAREN, YYSYMBOL_LBRACKET,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool has_all(const tokset *s, const yysymbol_kind_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!s->has[v[i]]) return false;
  return true;
}

/* The reserved words a keyword argument's name may be (the rule
 * `reserved`): wherever they fit as names, a name fits too, and "a
 * name" says it for them. */
static const yysymbol_kind_t reserved_names[] = {
    YYSYMBOL_DATA, YYSYMBOL_PARAM, YYSYMBOL_INPUT, YYSYMBOL_TRAIN,
    YYSYMBOL_PRINT, YYSYMBOL_SCOPE, YYSYMBOL_WITH, YYSYMBOL_FROM,
};

static void drop(tokset *s, const yysymbol_kind_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) s->has[v[i]] = false;
}

/* "'('" for punctuation and keywords, "a name" for classes. */
static const char *sym_str(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_YYEOF: return "end of file";
  case YYSYMBOL_IDENT: return "a name";
  case YYSYMBOL_INT: return "an integer";
  case YYSYMBOL_FLOAT: return "a float";
  case YYSYMBOL_STRING: return "a string";
  case YYSYMBOL_NEWLINE: return "end of line";
  default: break;
  }
  /* Bison gives the alias without its quotes: "(" as (, "in" as in. */
  static char buf[YYNTOKENS][16];
  snprintf(buf[k], sizeof buf[k], "'%s'", yysymbol_name(k));
  return buf[k];
}

/* What the lookahead is, for "found ...": with its text where that helps. */
static void describe_found(const tfg_token *t, tfg_strbuf *b) {
  switch (t->kind) {
  case TFG_TOK_IDENT: tfg_strbuf_printf(b, "name `%.*s`", (int)(t->len > 40 ? 40 : t->len), t->s); break;
  case TFG_TOK_INT:
  case TFG_TOK_FLOAT: {
    int n = (int)(t->loc.len > 40 ? 40 : t->loc.len);
    tfg_strbuf_printf(b, "%s `%.*s`", t->kind == TFG_TOK_INT ? "integer" : "float", n,
                      t->loc.src->text + t->loc.off);
    break;
  }
  case TFG_TOK_STRING: tfg_strbuf_puts(b, "a string"); break;
  default: tfg_strbuf_puts(b, tfg_token_kind_str(t->kind)); break;
  }
}

static char closer_of(char open) { return open == '(' ? ')' : open == '[' ? ']' : '}'; }

static yysymbol_kind_t closer_sym(char open) {
  return open == '(' ? YYSYMBOL_RPAREN : open == '[' ? YYSYMBOL_RBRACKET : YYSYMBOL_RBRACE;
}

static bool is_keyword(int kind) { return kind >= TFG_TOK_IMPORT && kind <= TFG_TOK_GPU; }

/* Words "after X" for the token before the lookahead, when it is a
 * keyword or punctuation (names and literals would only repeat the code). */
static void after_prev(const tfg_parser *P, tfg_strbuf *b) {
  int k = P->prev.kind;
  if (k == TFG_TOK_END || k == TFG_TOK_NEWLINE || k == TFG_TOK_SEMI || k == TFG_TOK_IDENT ||
      k == TFG_TOK_INT || k == TFG_TOK_FLOAT || k == TFG_TOK_STRING)
    return;
  tfg_strbuf_printf(b, " after %s", tfg_token_kind_str(k));
}

static const char at_help[] = "a device annotation is '@', a device, then a statement: @gpu:0 h = relu(x)";

static void tfg_parse_report(tfg_parser *P, const yypcontext_t *ctx) {
  const tfg_token *la = &P->la;
  tfg_loc loc = *yypcontext_location(ctx);
  /* Unfinished rather than wrong: the first error of all is the end of
   * the input. A lexical error before it (an unterminated string, a stray
   * byte) is wrong whatever follows, so more input would not help. */
  if (P->nsyntax == 0)
    P->first_error_at_eof = la->kind == TFG_TOK_END && !P->lex.stopped &&
                            tfg_diag_error_count(P->diag) == P->errors_before &&
                            !tfg_diag_limit_reached(P->diag);
  P->nsyntax++;

  /* A lexical error in this statement was already reported; a syntax
   * error on top of it would only be noise. */
  if (P->lex.stmt_errors) {
    tfg_lexer_recover(&P->lex, la);
    return;
  }

  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
  tokset s = {0};
  for (int i = 0; i < n; i++) s.has[exp[i]] = true;

  tfg_strbuf msg = {0}, found = {0};
  describe_found(la, &found);
  const tfg_lex_open *open = tfg_lexer_innermost(&P->lex);
  bool is_closer = la->kind == TFG_TOK_RPAREN || la->kind == TFG_TOK_RBRACKET ||
                   la->kind == TFG_TOK_RBRACE;
  const char *help = NULL;
  tfg_loc note_loc;
  bool note = false, reserved_help = false;
  bool want_expr = has_all(&s, expr_start, COUNT(expr_start));
  bool want_stmt = want_expr && has_all(&s, stmt_start, COUNT(stmt_start));
  bool could_compare = s.has[YYSYMBOL_EQEQ]; /* for "did you mean '=='?" */
  /* After a complete operand every binary operator may follow; those
   * alternatives would bury the useful ones. */
  if (s.has[YYSYMBOL_PLUS] && s.has[YYSYMBOL_STAR] && s.has[YYSYMBOL_EQEQ])
    drop(&s, continuations, COUNT(continuations));
  if (s.has[YYSYMBOL_IDENT] && !want_stmt) drop(&s, reserved_names, COUNT(reserved_names));

  if (la->kind == TFG_TOK_RBRACE && P->lex.has_dropped) {
    /* The '}' closed its block over a ( or [ left open inside it. */
    const tfg_lex_open *o = &P->lex.dropped;
    tfg_strbuf_printf(&msg, "expected '%c' to close '%c' at %u:%u, found '}'", closer_of(o->c), o->c, o->loc.line,
                      tfg_loc_display_col(&o->loc));
    if (o->loc.line != loc.line) {
      note_loc = o->loc;
      note = true;
      open = o;
    }
  } else if (is_closer && !la->i && !(open && open->c != '{')) {
    /* No ( or [ open: a closer with nothing to close (a mismatched one,
     * like ']' for '(', falls to the next branch). */
    tfg_strbuf_printf(&msg, "unmatched %s", tfg_token_kind_str(la->kind));
    help = "delete it, or add the opening bracket it was meant to close";
  } else if (open && s.has[closer_sym(open->c)] &&
      (!want_expr || la->kind == TFG_TOK_END || la->bol) &&
      !(open->c == '{' && s.has[YYSYMBOL_IDENT] && !want_stmt)) {
    /* An opener waits for its closer, the closer would fit here, and
     * nothing else that fits is more likely. */
    char c = closer_of(open->c);
    bool comma = s.has[YYSYMBOL_COMMA] && open->c != '{';
    tfg_strbuf_printf(&msg, "expected %s'%c' to close '%c' at %u:%u, found %s",
                      comma ? "',' or " : "", c, open->c, open->loc.line,
                      tfg_loc_display_col(&open->loc), found.data);
    if (open->loc.line != loc.line) {
      note_loc = open->loc;
      note = true;
    }
  } else if (la->kind == TFG_TOK_ELSE) {
    tfg_strbuf_puts(&msg, "'else' without a matching 'if'");
    help = "'else' follows the '}' of an if block, on the same line or the next";
  } else if (P->prev.kind == TFG_TOK_AT) {
    tfg_strbuf_printf(&msg, "expected a device after '@', found %s", found.data);
    help = at_help;
  } else if (want_stmt && P->prev2.kind == TFG_TOK_AT && P->prev.kind == TFG_TOK_IDENT &&
             la->kind != TFG_TOK_NEWLINE && la->kind != TFG_TOK_SEMI && la->kind != TFG_TOK_END) {
    /* `@ h = 1`: the name was taken for the device and the statement
     * lost its start; the device is what is missing. (`@d` alone on a
     * line is a statement missing instead.) */
    loc = P->prev.loc;
    tfg_strbuf_puts(&msg, "expected a device after '@'");
    help = at_help;
  } else if (want_stmt) {
    tfg_strbuf_printf(&msg, "expected a statement, found %s", found.data);
  } else if (open && open->c == '{' && s.has[YYSYMBOL_IDENT] && s.has[closer_sym('{')]) {
    /* Only a train or load block takes names but not statements. */
    tfg_strbuf_printf(&msg, "expected a setting 'name = value' or '}', found %s", found.data);
    help = P->has_load_brace && open->loc.off == P->load_brace && open->loc.src == P->src
               ? "a load block holds settings only, such as: strict = false"
               : "a train block holds settings only, such as: steps = 100";
  } else if (s.has[YYSYMBOL_NEWLINE] && la->kind != TFG_TOK_NEWLINE) {
    tfg_strbuf_printf(&msg, "expected end of statement, found %s", found.data);
    /* `load path`: `load` before anything but a string is a name. */
    bool after_load = P->prev.kind == TFG_TOK_IDENT && P->prev.bol && P->prev.len == 4 &&
                      !memcmp(P->prev.s, "load", 4);
    help = la->kind == TFG_TOK_ASSIGN ? "only a name can be assigned: name = expression"
           : after_load ? "a load statement names its file with a string: load \"model.safetensors\""
                        : "put each statement on its own line, or separate them with ';'";
  } else if (want_expr) {
    tfg_strbuf_puts(&msg, "expected an expression");
    after_prev(P, &msg);
    tfg_strbuf_printf(&msg, ", found %s", found.data);
    if (la->kind == TFG_TOK_STAR && P->prev.kind == TFG_TOK_STAR)
      help = "there is no '**'; use pow(x, p)";
  } else {
    const char *names[4];
    int k = 0, total = 0;
    for (int i = 0; i < YYNTOKENS; i++)
      if (s.has[i] && i != YYSYMBOL_YYerror && i != YYSYMBOL_YYUNDEF) {
        if (k < 4) names[k++] = sym_str((yysymbol_kind_t)i);
        total++;
      }
    if (total == 0 || total > 4) {
      tfg_strbuf_printf(&msg, "unexpected %s", found.data);
    } else {
      tfg_strbuf_puts(&msg, "expected ");
      for (int i = 0; i < k; i++)
        tfg_strbuf_printf(&msg, "%s%s", i == 0 ? "" : i == k - 1 ? " or " : ", ", names[i]);
      after_prev(P, &msg);
      tfg_strbuf_printf(&msg, ", found %s", found.data);
    }
    if (total == 1 && s.has[YYSYMBOL_IDENT] && la->kind == TFG_TOK_TRAIN && P->prev.kind == TFG_TOK_DOT)
      help = "a dataset's own columns are its train split: write d.x, not d.train.x";
    else if (total == 1 && s.has[YYSYMBOL_IDENT] && is_keyword(la->kind)) reserved_help = true;
    else if (la->kind == TFG_TOK_DOTDOT) help = "ranges do not chain: a range is start..end";
    else if (la->kind == TFG_TOK_ASSIGN && could_compare) help = "did you mean '=='?";
    else if (total == 1 && s.has[YYSYMBOL_LBRACKET] && P->prev.kind == TFG_TOK_IDENT)
      help = "a type is a dtype with its dimensions in brackets: f32[64, 10]; a scalar is f32[]";
    else if (s.has[YYSYMBOL_COLON] && (P->prev.kind == TFG_TOK_GPU || P->prev.kind == TFG_TOK_CPU))
      help = "write a device as gpu:0, gpu:(i + 1), gpu:* or cpu";
    else if (P->prev.kind == TFG_TOK_COLON && s.has[YYSYMBOL_STAR])
      help = "a device index is an integer, '*' (any GPU) or an expression in parentheses: gpu:(i + 1)";
  }

  tfg_diag_error(P->diag, &loc, "%s", msg.data);
  if (note) tfg_diag_note(P->diag, &note_loc, "'%c' opened here", open->c);
  if (reserved_help)
    tfg_diag_help(P->diag, "'%.*s' is a reserved word; choose another name", (int)la->loc.len,
                  la->loc.src->text + la->loc.off);
  else if (help)
    tfg_diag_help(P->diag, "%s", help);
  tfg_strbuf_free(&msg);
  tfg_strbuf_free(&found);
  tfg_lexer_recover(&P->lex, la);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, tfg_parser *P) {
  tfg_parse_report(P, ctx);
  return 0;
}

tfg_status tfg_parse(const tfg_source *src, tfg_diag *diag, tfg_arena *arena, tfg_ast **out,
                     bool *at_eof) {
  tfg_parser P;
  memset(&P, 0, sizeof P);
  P.src = src;
  P.diag = diag;
  P.ast.arena = arena;
  P.ast.diag = diag;
  tfg_lexer_init(&P.lex, src, diag, arena);
  size_t errors_before = tfg_diag_error_count(diag);
  P.errors_before = errors_before;
  int rc = tfg_yyparse(&P);
  tfg_lexer_free(&P.lex);
  bool failed = rc != 0 || P.nsyntax > 0 || tfg_diag_error_count(diag) > errors_before ||
                tfg_diag_limit_reached(diag);
  if (at_eof) *at_eof = failed && P.first_error_at_eof;
  *out = failed ? NULL : P.result;
  return failed ? TFG_ERR_SYNTAX : TFG_OK;
}

/* lang/interp_names.c: names in the interpreter: scopes (bindings and
 * their look-up, with "did you mean" suggestions) and the dotted paths
 * that name params (LANGUAGE.md section 3), each unique in the program. */
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "lang/interp_impl.h"

/* ---- scopes ------------------------------------------------------------------- */

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

void tfg_env_init(tfg_env *e, tfg_env *parent, int32_t nheads) {
  memset(e, 0, sizeof *e);
  e->parent = parent;
  e->nheads = nheads;
  e->heads = malloc(sizeof *e->heads * (size_t)nheads);
  TFG_ASSERT(e->heads != NULL);
  for (int32_t i = 0; i < nheads; i++) e->heads[i] = -1;
}

void tfg_env_free(tfg_env *e) {
  free(e->entries);
  free(e->heads);
  memset(e, 0, sizeof *e);
}

/* Binds name to v. A name bound since the scope's floor is overwritten
 * in place (see tfg_env), so rebinding in a loop takes no memory. */
void tfg_env_bind(tfg_env *e, const char *name, tfg_value v) {
  uint32_t b = hash_name(name) % (uint32_t)e->nheads;
  for (int32_t i = e->heads[b]; i >= e->floor; i = e->entries[i].prev)
    if (strcmp(e->entries[i].name, name) == 0) {
      e->entries[i].value = v;
      return;
    }
  TFG_GROW(e->entries, e->n, e->cap, 16);
  e->entries[e->n] = (env_entry){name, v, e->heads[b]};
  e->heads[b] = e->n++;
}

/* Undoes every binding made since the scope had n entries. */
void tfg_env_truncate(tfg_env *e, int32_t n) {
  while (e->n > n) {
    env_entry *x = &e->entries[--e->n];
    e->heads[hash_name(x->name) % (uint32_t)e->nheads] = x->prev;
  }
  if (e->floor > n) e->floor = n;
}

void tfg_interp_bind_root(tfg_interp *I, const char *name, tfg_value v) { tfg_env_bind(&I->root, name, v); }

tfg_value *tfg_env_find_local(tfg_env *e, const char *name) {
  /* Chains hold every name of the bucket; compare until ours. */
  for (int32_t i = e->heads[hash_name(name) % (uint32_t)e->nheads]; i >= 0; i = e->entries[i].prev)
    if (strcmp(e->entries[i].name, name) == 0) return &e->entries[i].value;
  return NULL;
}

tfg_value *tfg_env_find(tfg_env *e, const char *name) {
  for (; e; e = e->parent) {
    tfg_value *v = tfg_env_find_local(e, name);
    if (v) return v;
  }
  return NULL;
}

/* Levenshtein distance, capped: for "did you mean" suggestions. */
int tfg_interp_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 99;
  int row[41];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* The visible name closest to name, if close enough to be a typo. */
const char *tfg_interp_suggest(tfg_env *e, const char *name) {
  const char *best = NULL;
  int bestd = (int)strlen(name) / 3 + 1;
  if (bestd > 3) bestd = 3;
  for (; e; e = e->parent)
    for (int32_t i = e->n - 1; i >= 0; i--) {
      int d = tfg_interp_edit_distance(name, e->entries[i].name);
      if (d < bestd || (d == bestd && !best)) {
        if (d <= bestd && d > 0) {
          best = e->entries[i].name;
          bestd = d;
        }
      }
    }
  return best;
}

/* ---- paths of params --------------------------------------------------------------- */

/* The taken paths are kept in order (so a failed statement can drop its
 * own) and indexed by a hash table: a program with 100,000 params names
 * them in linear time. */
static bool is_taken(tfg_interp *I, const char *p) {
  if (!I->taken_slots) return false;
  uint32_t mask = (uint32_t)I->taken_slots - 1;
  for (uint32_t h = hash_name(p) & mask;; h = (h + 1) & mask) {
    int32_t e = I->taken_index[h];
    if (e == 0) return false;
    if (strcmp(I->taken[e - 1], p) == 0) return true;
  }
}

static void index_taken(tfg_interp *I, int32_t i) {
  uint32_t mask = (uint32_t)I->taken_slots - 1;
  uint32_t h = hash_name(I->taken[i]) & mask;
  while (I->taken_index[h]) h = (h + 1) & mask;
  I->taken_index[h] = i + 1;
}

/* Rebuilds the index for the first ntaken entries (after growth or a
 * rollback). */
static void reindex_taken(tfg_interp *I) {
  int32_t slots = 64;
  while (slots < 2 * (I->ntaken + 1)) slots *= 2;
  free(I->taken_index);
  I->taken_index = calloc((size_t)slots, sizeof *I->taken_index);
  TFG_ASSERT(I->taken_index != NULL);
  I->taken_slots = slots;
  for (int32_t i = 0; i < I->ntaken; i++) index_taken(I, i);
}

static void take(tfg_interp *I, const char *p) {
  TFG_GROW(I->taken, I->ntaken, I->captaken, 8);
  I->taken[I->ntaken++] = (char *)p;
  if (2 * I->ntaken > I->taken_slots) reindex_taken(I);
  else index_taken(I, I->ntaken - 1);
}

/* The suffix hint slot of a path (open addressing; grows at half full). */
static int32_t *suffix_slot(tfg_interp *I, const char *path) {
  if (2 * (I->nsuffix + 1) > I->suffix_slots) {
    int32_t old = I->suffix_slots;
    const char **ok = I->suffix_key;
    int32_t *on = I->suffix_next;
    I->suffix_slots = old ? old * 2 : 64;
    I->suffix_key = calloc((size_t)I->suffix_slots, sizeof *I->suffix_key);
    I->suffix_next = calloc((size_t)I->suffix_slots, sizeof *I->suffix_next);
    TFG_ASSERT(I->suffix_key && I->suffix_next);
    for (int32_t i = 0; i < old; i++)
      if (ok[i]) {
        uint32_t m = (uint32_t)I->suffix_slots - 1, h = hash_name(ok[i]) & m;
        while (I->suffix_key[h]) h = (h + 1) & m;
        I->suffix_key[h] = ok[i];
        I->suffix_next[h] = on[i];
      }
    free(ok);
    free(on);
  }
  uint32_t m = (uint32_t)I->suffix_slots - 1, h = hash_name(path) & m;
  while (I->suffix_key[h] && strcmp(I->suffix_key[h], path) != 0) h = (h + 1) & m;
  if (!I->suffix_key[h]) {
    I->suffix_key[h] = tfg_interp_strdup(I, path, strlen(path)); /* path may be scratch text */
    I->suffix_next[h] = 1;
    I->nsuffix++;
  }
  return &I->suffix_next[h];
}

static void clear_suffixes(tfg_interp *I) {
  if (I->suffix_slots) memset(I->suffix_key, 0, sizeof *I->suffix_key * (size_t)I->suffix_slots);
  I->nsuffix = 0;
}

/* The first of base, base_1, base_2, ... (base a full path) not taken:
 * base itself, or a copy in the session arena. */
static const char *first_free(tfg_interp *I, const char *base) {
  if (!is_taken(I, base)) return base;
  int32_t *next = suffix_slot(I, base);
  tfg_strbuf b = {0};
  for (;; (*next)++) {
    tfg_strbuf_clear(&b);
    tfg_strbuf_printf(&b, "%s_%d", base, *next);
    if (!is_taken(I, b.data)) break;
  }
  const char *got = tfg_interp_strdup(I, b.data, b.len);
  tfg_strbuf_free(&b);
  return got;
}

/* "a.b.c" from the naming path plus last, in I->scratch (valid until
 * its next use): every fn call joins a path, and most are never kept. */
static const char *join_path(tfg_interp *I, const char *last) {
  tfg_strbuf *b = &I->scratch;
  tfg_strbuf_clear(b);
  for (int i = 0; i < I->depth; i++) {
    tfg_strbuf_puts(b, I->path[i]);
    tfg_strbuf_putc(b, '.');
  }
  tfg_strbuf_puts(b, last);
  return b->data ? b->data : "";
}

/* The first of c, c_1, c_2, ... not yet used at this point of the path. */
static const char *unique_component(tfg_interp *I, const char *c) {
  const char *full = join_path(I, c);
  const char *got = first_free(I, full);
  if (got == full) return c;
  /* got is full with a suffix: the component is c with the same suffix. */
  size_t prefix = strlen(full) - strlen(c);
  return got + prefix;
}

void tfg_interp_push_component(tfg_interp *I, const char *c, const tfg_loc *loc) {
  if (I->depth == (int)(sizeof I->path / sizeof I->path[0]))
    tfg_interp_fail(I, TFG_ERR_LIMIT, loc, "calls and scopes are nested too deeply");
  const char *unique = unique_component(I, c); /* reads the path as it is now */
  I->path[I->depth++] = unique;
}

/* Records a param path and every prefix of it as taken. */
void tfg_interp_take_path(tfg_interp *I, const char *full) {
  for (const char *p = full; (p = strchr(p, '.')); p++) {
    const char *prefix = tfg_interp_strdup(I, full, (size_t)(p - full));
    if (!is_taken(I, prefix)) take(I, prefix);
  }
  take(I, full);
}

const char *tfg_interp_param_path(tfg_interp *I, const char *name) {
  const char *full = first_free(I, join_path(I, name));
  if (full == I->scratch.data) full = tfg_interp_strdup(I, full, I->scratch.len);
  return full;
}

void tfg_interp_untake(tfg_interp *I, int32_t n) {
  if (I->ntaken <= n) return;
  I->ntaken = n;
  reindex_taken(I);
  clear_suffixes(I);
}

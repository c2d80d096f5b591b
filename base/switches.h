/* base/switches.h: the A/B switches: what a benchmark or a test turns
 * off (or on) to compare tfg with and without one of its choices.
 *
 *   tfg_switches sw = {0};                         // every default
 *   tfg_switches off = {.no_opt = true};           // TFG_OPT=0
 *   tfg_compile_opts co = {..., .sw = sw};         // passed down by value
 *
 * Plain data: zero is the default of every field, so an options struct
 * that does not mention its switches gets tfg's normal behaviour. Users
 * set them with TFG_* environment variables (docs/cli.md), which only
 * cli/switches.c reads (cli_switches_from_env); the code below cli/ gets
 * them in the option structs it is given (tfg_compile_opts), never from
 * the environment (docs/architecture.md). */
#ifndef TFG_SWITCHES_H
#define TFG_SWITCHES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tfg_switches {
  /* graph passes (compiler/) */
  bool no_opt;            /* TFG_OPT=0: no optimization pass: folding, CSE and simplification, the layout
                           * pass, views, autodiff's shape-only rewrites (docs/plan.md) */
  bool no_layout;         /* TFG_LAYOUT=0: with the others on, no transpose folded into a matmul or attention */
  bool no_attention_grad; /* TFG_ATTENTION_GRAD=0: attention's gradient through its probabilities, not the
                           * fused ATTENTION_GRAD op */
  bool no_fuse;           /* TFG_FUSE=0: no chain of elementwise ops fused into one kernel */
} tfg_switches;

#endif

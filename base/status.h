/* base/status.h: the status codes every tfg library function returns.
 *
 * Library code never exits; it returns one of these and leaves the
 * human-readable story in a diagnostics sink (base/diag.h). The CLI maps
 * statuses to the exit codes of CLI.md with tfg_status_exit_code(). */
#ifndef TFG_STATUS_H
#define TFG_STATUS_H

typedef enum tfg_status {
  TFG_OK = 0,
  TFG_ERR_SYNTAX,   /* lexical or grammatical error in a program */
  TFG_ERR_NAME,     /* unknown name, wrong argument, wrong kind of value */
  TFG_ERR_ARITH,    /* build-time arithmetic failed: division by zero, integer overflow */
  TFG_ERR_SHAPE,    /* shape or dtype mismatch */
  TFG_ERR_DATA,     /* a data file the program names is missing or malformed */
  TFG_ERR_PLACE,    /* impossible placement */
  TFG_ERR_OOM,      /* memory that cannot fit */
  TFG_ERR_DEVICE,   /* a device or driver failed */
  TFG_ERR_IO,       /* a file could not be read or written */
  TFG_ERR_NUMERIC,  /* bad values at run time: NaN/Inf, an index or label out of range */
  TFG_ERR_USAGE,    /* bad command-line usage */
  TFG_ERR_LIMIT,    /* an input exceeds a documented limit (nesting, size) */
  TFG_ERR_NOMEM,    /* the host allocator failed */
  TFG_ERR_INTERRUPTED, /* the user interrupted it (Ctrl-C): exit 130 */
} tfg_status;

/* Short lower-case name of a status ("syntax error"); never NULL. */
const char *tfg_status_str(tfg_status s);

/* The process exit code CLI.md assigns to a status: 0 ok, 1 program error,
 * 2 usage, 3 runtime failure. */
int tfg_status_exit_code(tfg_status s);

#endif

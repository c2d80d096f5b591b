/* base/status.c: names and exit codes for tfg_status. */
#include "base/status.h"

const char *tfg_status_str(tfg_status s) {
  switch (s) {
  case TFG_OK: return "ok";
  case TFG_ERR_SYNTAX: return "syntax error";
  case TFG_ERR_NAME: return "name error";
  case TFG_ERR_ARITH: return "arithmetic error";
  case TFG_ERR_SHAPE: return "shape error";
  case TFG_ERR_DATA: return "data error";
  case TFG_ERR_PLACE: return "placement error";
  case TFG_ERR_OOM: return "out of memory";
  case TFG_ERR_DEVICE: return "device error";
  case TFG_ERR_IO: return "i/o error";
  case TFG_ERR_NUMERIC: return "numeric error";
  case TFG_ERR_USAGE: return "usage error";
  case TFG_ERR_LIMIT: return "limit exceeded";
  case TFG_ERR_NOMEM: return "host memory exhausted";
  case TFG_ERR_INTERRUPTED: return "interrupted";
  }
  return "unknown status";
}

int tfg_status_exit_code(tfg_status s) {
  switch (s) {
  case TFG_OK: return 0;
  case TFG_ERR_SYNTAX: case TFG_ERR_NAME: case TFG_ERR_ARITH: case TFG_ERR_SHAPE:
  case TFG_ERR_DATA: case TFG_ERR_PLACE: case TFG_ERR_LIMIT:
    return 1; /* the program is wrong: diagnostics say where */
  case TFG_ERR_USAGE: return 2;
  case TFG_ERR_INTERRUPTED: return 130; /* as a shell reports a process ended by SIGINT */
  case TFG_ERR_OOM: case TFG_ERR_DEVICE: case TFG_ERR_IO:
  case TFG_ERR_NUMERIC: case TFG_ERR_NOMEM:
    return 3;
  }
  return 3;
}

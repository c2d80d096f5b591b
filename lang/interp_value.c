/* lang/interp_value.c: the interpreter's build-time values: making them,
 * naming their kinds for messages, and rendering them as the REPL and
 * print show them. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/interp_impl.h"

tfg_value tfg_val_int(int64_t i) { return (tfg_value){.kind = TFG_V_INT, .u.i = i}; }
tfg_value tfg_val_float(double f) { return (tfg_value){.kind = TFG_V_FLOAT, .u.f = f}; }
tfg_value tfg_val_tensor(tfg_node_id id) { return (tfg_value){.kind = TFG_V_TENSOR, .u.tensor = id}; }

const char *tfg_vkind_name(tfg_vkind k) {
  switch (k) {
  case TFG_V_NONE: return "none";
  case TFG_V_BOOL: return "a bool";
  case TFG_V_INT: return "an integer";
  case TFG_V_FLOAT: return "a float";
  case TFG_V_STRING: return "a string";
  case TFG_V_LIST: return "a list";
  case TFG_V_RANGE: return "a range";
  case TFG_V_DTYPE: return "a dtype";
  case TFG_V_DEVICE: return "a device";
  case TFG_V_TENSOR: return "a tensor";
  case TFG_V_FN: return "a function";
  case TFG_V_BUILTIN: return "a builtin function";
  case TFG_V_MODULE: return "a module";
  case TFG_V_DATASET: return "a dataset";
  case TFG_V_COLUMN: return "a dataset column";
  case TFG_V_RECORD: return "a configuration";
  case TFG_V_INIT: return "an initializer";
  }
  return "a value";
}

double tfg_interp_shown(double x) { return isnan(x) ? fabs(x) : x; }

void tfg_interp_check_finite(tfg_interp *I, double x, const char *what, const tfg_loc *loc) {
  if (isnan(x)) tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be a number, got NaN", what);
  if (isinf(x))
    tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be a finite number, got %s", what, x > 0 ? "inf" : "-inf");
}

const char *tfg_interp_strdup(tfg_interp *I, const char *s, size_t n) {
  return tfg_arena_strndup(&I->arena, s, n);
}

static void format_devspec(const tfg_devspec *d, tfg_strbuf *out) {
  switch (d->kind) {
  case TFG_DEV_NONE: tfg_strbuf_puts(out, "none"); break;
  case TFG_DEV_CPU: tfg_strbuf_printf(out, "cpu:%" PRId64, d->index); break;
  case TFG_DEV_GPU: tfg_strbuf_printf(out, "gpu:%" PRId64, d->index); break;
  case TFG_DEV_GPU_ANY: tfg_strbuf_puts(out, "gpu:*"); break;
  }
}

void tfg_value_format(const tfg_value *v, const tfg_graph *g, tfg_strbuf *out) {
  switch (v->kind) {
  case TFG_V_NONE: tfg_strbuf_puts(out, "none"); break;
  case TFG_V_BOOL: tfg_strbuf_puts(out, v->u.b ? "true" : "false"); break;
  case TFG_V_INT: tfg_strbuf_printf(out, "%" PRId64, v->u.i); break;
  case TFG_V_FLOAT: {
    char buf[40];
    if (isnan(v->u.f)) { /* "nan", as NumPy prints it: never glibc's "-nan" (no NaN equals itself below) */
      tfg_strbuf_puts(out, "nan");
      break;
    }
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, sizeof buf, "%.*g", prec, v->u.f);
      if (strtod(buf, NULL) == v->u.f) break;
    }
    tfg_strbuf_puts(out, buf);
    if (!strpbrk(buf, ".eni")) tfg_strbuf_puts(out, ".0");
    break;
  }
  case TFG_V_STRING: tfg_strbuf_printf(out, "\"%.*s\"", (int)v->u.str.len, v->u.str.s); break;
  case TFG_V_LIST:
    tfg_strbuf_putc(out, '[');
    for (int32_t i = 0; i < v->u.list.n; i++) {
      if (i) tfg_strbuf_puts(out, ", ");
      tfg_value_format(&v->u.list.items[i], g, out);
    }
    tfg_strbuf_putc(out, ']');
    break;
  case TFG_V_RANGE: tfg_strbuf_printf(out, "%" PRId64 "..%" PRId64, v->u.range.lo, v->u.range.hi); break;
  case TFG_V_DTYPE: tfg_strbuf_puts(out, tfg_dtype_name(v->u.dtype)); break;
  case TFG_V_DEVICE: format_devspec(&v->u.dev, out); break;
  case TFG_V_TENSOR: {
    const tfg_node *n = &g->nodes[v->u.tensor];
    tfg_strbuf_puts(out, "tensor ");
    tfg_shape_format(out, n->dtype, &n->shape);
    break;
  }
  case TFG_V_FN: tfg_strbuf_printf(out, "fn %s", v->u.fn->def->name); break;
  case TFG_V_BUILTIN: tfg_strbuf_printf(out, "builtin %s", v->u.builtin->name); break;
  case TFG_V_MODULE: tfg_strbuf_printf(out, "module %s", v->u.module->name); break;
  case TFG_V_DATASET:
    tfg_strbuf_printf(out, "dataset \"%s\"%s", v->u.dataset.ds->path,
                      v->u.dataset.whole ? "" : v->u.dataset.split == TFG_SPLIT_TEST ? " (test)" : " (train)");
    break;
  case TFG_V_COLUMN: {
    const tfg_dataset *ds = v->u.column.ds->ds;
    tfg_shape rs = tfg_data_row_shape(ds, v->u.column.col);
    tfg_strbuf_printf(out, "column %s: %lld rows of %s[", tfg_data_column_name(ds, v->u.column.col),
                      (long long)tfg_data_rows(ds, v->u.column.split),
                      tfg_data_type_name(tfg_data_column_type(ds, v->u.column.col)));
    for (int i = 0; i < rs.rank; i++) tfg_strbuf_printf(out, "%s%lld", i ? "," : "", (long long)rs.dim[i]);
    tfg_strbuf_putc(out, ']');
    break;
  }
  case TFG_V_RECORD: {
    const tfg_record *r = v->u.record;
    tfg_strbuf_printf(out, "%s(", r->name);
    for (int i = 0; i < r->nargs; i++) {
      tfg_strbuf_printf(out, "%s%s = ", i ? ", " : "", r->arg_names[i]);
      tfg_value_format(&r->args[i], g, out);
    }
    tfg_strbuf_putc(out, ')');
    break;
  }
  case TFG_V_INIT: tfg_strbuf_puts(out, "initializer"); break;
  }
}

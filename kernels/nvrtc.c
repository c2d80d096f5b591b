/* kernels/nvrtc.c: NVRTC through dlopen, and the PTX disk cache
 * (contract: kernels/nvrtc.h). */
#include "kernels/nvrtc.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/fused_codegen.h"

/* NVRTC's entry points, as nvrtc.h declares them (nvrtcProgram is an
 * opaque pointer, nvrtcResult an int; NVRTC_SUCCESS is 0). */
typedef struct nvrtc_prog *nvrtc_prog;
static struct {
  int (*create)(nvrtc_prog *, const char *, const char *, int, const char *const *, const char *const *);
  int (*compile)(nvrtc_prog, int, const char *const *);
  int (*ptx_size)(nvrtc_prog, size_t *);
  int (*ptx)(nvrtc_prog, char *);
  int (*log_size)(nvrtc_prog, size_t *);
  int (*log)(nvrtc_prog, char *);
  int (*destroy)(nvrtc_prog *);
  const char *(*error)(int);
  bool ok;
  char why[256];
} nv;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  /* the toolkit's library by its names, then where a toolkit usually is */
  static const char *const libs[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                     "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib/libnvrtc.so"};
  void *h = NULL;
  char path[1024];
  /* CUDA_HOME: where the toolkit is, the toolkit's own variable (nvcc's,
   * the Makefile's); with runtime/mpi.c's launcher variables, the only
   * getenv below cli/ (docs/architecture.md, tests/layers.py) */
  const char *home = getenv("CUDA_HOME");
  if (home && snprintf(path, sizeof path, "%s/lib64/libnvrtc.so", home) < (int)sizeof path)
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; !h && i < sizeof libs / sizeof libs[0]; i++) h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(nv.why, sizeof nv.why, "NVRTC is not available (libnvrtc.so not found: %s)", dlerror());
    return;
  }
  /* dlsym returns an object pointer; POSIX guarantees it converts to a
   * function pointer, which memcpy says without a cast ISO C rejects */
#define SYM(field, name)                                                       \
  do {                                                                         \
    void *s_ = dlsym(h, name);                                                 \
    if (!s_) {                                                                 \
      snprintf(nv.why, sizeof nv.why, "libnvrtc has no %s", name);             \
      return;                                                                  \
    }                                                                          \
    memcpy(&nv.field, &s_, sizeof s_);                                         \
  } while (0)
  SYM(create, "nvrtcCreateProgram");
  SYM(compile, "nvrtcCompileProgram");
  SYM(ptx_size, "nvrtcGetPTXSize");
  SYM(ptx, "nvrtcGetPTX");
  SYM(log_size, "nvrtcGetProgramLogSize");
  SYM(log, "nvrtcGetProgramLog");
  SYM(destroy, "nvrtcDestroyProgram");
  SYM(error, "nvrtcGetErrorString");
#undef SYM
  nv.ok = true;
}

bool tfg_nvrtc_available(void) {
  pthread_once(&once, load);
  return nv.ok;
}

/* The kernels/ folder of cache, made if missing (its parents too), into
 * dir; false when there is none to be had (cache NULL or empty). */
static bool cache_dir(const char *cache, char *dir, size_t cap) {
  if (!cache || !*cache) return false;
  int n = snprintf(dir, cap, "%s/kernels", cache);
  if (n < 0 || (size_t)n >= cap) return false;
  for (char *s = dir + 1; *s; s++) { /* mkdir -p */
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return false;
    *s = '/';
  }
  return mkdir(dir, 0755) == 0 || errno == EEXIST;
}

static bool read_file(const char *path, tfg_strbuf *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char buf[8192];
  size_t got;
  tfg_strbuf_clear(out);
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) tfg_strbuf_putn(out, buf, got);
  bool ok = !ferror(f) && out->len > 0;
  fclose(f);
  return ok;
}

/* Writes text to path through a temporary name and a rename. */
static void write_file(const char *path, const char *text, size_t len) {
  char tmp[1100];
  if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) return;
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  bool ok = fwrite(text, 1, len, f) == len;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) remove(tmp);
}

tfg_status tfg_nvrtc_ptx(const char *src, const char *arch, int nheaders, const char *const *names,
                         const char *const *texts, const char *cache, tfg_strbuf *ptx, tfg_strbuf *log,
                         bool *cached) {
  if (cached) *cached = false;
  char dir[1024], path[1100];
  bool have_dir = cache_dir(cache, dir, sizeof dir);
  if (have_dir) {
    snprintf(path, sizeof path, "%s/%016" PRIx64 ".ptx", dir, tfg_fused_source_hash(src, arch));
    if (read_file(path, ptx)) {
      if (cached) *cached = true;
      return TFG_OK;
    }
  }
  if (!tfg_nvrtc_available()) {
    tfg_strbuf_puts(log, nv.why);
    return TFG_ERR_DEVICE;
  }
  nvrtc_prog p = NULL;
  int r = nv.create(&p, src, "tfg_fused.cu", nheaders, texts, names);
  if (r != 0) {
    tfg_strbuf_printf(log, "nvrtcCreateProgram: %s", nv.error(r));
    return TFG_ERR_DEVICE;
  }
  char opt_arch[64];
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
  const char *opts[] = {opt_arch, "--std=c++17"};
  r = nv.compile(p, 2, opts);
  size_t n = 0;
  if (r != 0) {
    if (nv.log_size(p, &n) == 0 && n > 1) {
      char *text = malloc(n);
      if (text && nv.log(p, text) == 0) tfg_strbuf_printf(log, "NVRTC: %s", text);
      free(text);
    } else {
      tfg_strbuf_printf(log, "nvrtcCompileProgram: %s", nv.error(r));
    }
    nv.destroy(&p);
    return TFG_ERR_DEVICE;
  }
  tfg_status st = TFG_OK;
  char *text = NULL;
  if (nv.ptx_size(p, &n) != 0 || !(text = malloc(n + 1)) || nv.ptx(p, text) != 0) {
    tfg_strbuf_puts(log, "NVRTC: the PTX could not be read back");
    st = TFG_ERR_DEVICE;
  } else {
    text[n] = '\0';
    size_t len = strlen(text);
    tfg_strbuf_clear(ptx);
    tfg_strbuf_putn(ptx, text, len);
    if (have_dir) write_file(path, text, len);
  }
  free(text);
  nv.destroy(&p);
  return st;
}

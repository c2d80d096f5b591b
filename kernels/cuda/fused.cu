/* kernels/cuda/fused.cu: the FUSED op on a CUDA device: a chain of
 * elementwise ops (kernels/fused.h) in one kernel, the GPU twin of
 * kernels/cpu/fused.c.
 *
 * One grid-stride loop over the output: each thread loads the chain's
 * inputs at its element (element 0 of a scalar input, the repeating
 * element of a broadcast one), runs the ops in
 * order and stores the last result, so a chain of k ops reads its inputs
 * and writes its output once where k separate kernels would write and
 * read k - 1 intermediates through global memory. The program travels by
 * value as a kernel parameter (constant memory, the same for every
 * thread: the switch on each op does not diverge), with the input
 * pointers beside it. Operands are looked up by index in a small
 * per-thread array (inputs, then results): it may live in local memory,
 * which the L1 cache serves.
 *
 * The formulas are kernels/elementwise_math.h's, as on the CPU, in the
 * output's dtype: device arithmetic there is unfused (_rn intrinsics) so
 * a * b + c across two ops rounds twice as the ops do one at a time; the
 * transcendentals are CUDA's (within its ulp bounds of glibc's). */
#include "kernels/cuda/common.cuh"

#include <mutex>
#include <unordered_map>

#include "kernels/elementwise_math.h"
#include "kernels/fused.h"
extern "C" {
#include "kernels/fused_codegen.h"
#include "kernels/nvrtc.h"
}

/* The device addresses of a chain's inputs, by value beside the program. */
typedef struct fused_inputs {
  const void *p[TFG_FUSED_MAX_INPUTS];
} fused_inputs;

/* out[i] for i in [0, n): the program p over inputs in. */
template <typename T>
static __global__ void fused_kernel(tfg_fused_prog p, fused_inputs in, T *out, int64_t n) {
  TFG_CUDA_LOOP(i, n) {
    T v[TFG_FUSED_MAX_INPUTS + TFG_FUSED_MAX_OPS];
#pragma unroll
    for (int k = 0; k < TFG_FUSED_MAX_INPUTS; k++)
      if (k < p.ninputs) v[k] = ((const T *)in.p[k])[p.len[k] == n ? i : p.len[k] == 1 ? 0 : i / p.div[k] % p.len[k]];
    for (int s = 0; s < p.nops; s++) {
      const tfg_fused_op o = p.ops[s];
      /* binary when it has a second operand (b >= 0); BROADCAST passes its operand through */
      v[TFG_FUSED_MAX_INPUTS + s] = o.b >= 0                       ? tfg_em_binary(o.op, v[o.a], v[o.b])
                                    : o.op == TFG_OP_BROADCAST ? v[o.a]
                                                               : tfg_em_unary(o.op, v[o.a]);
    }
    out[i] = v[TFG_FUSED_MAX_INPUTS + p.nops - 1];
  }
}

/* ---- generated kernels (TFG_NVRTC=1) ---------------------------------------------
 * On a backend made with the switch nvrtc (TFG_NVRTC=1: tfg_cuda_ctx.nvrtc)
 * a chain runs as a kernel of its own: its source
 * (kernels/fused_codegen.h) compiled by NVRTC to PTX for the device's
 * architecture (kernels/nvrtc.h, cached on disk), loaded once per
 * process with cudaLibraryLoadData (context-independent: one load serves
 * every device of that architecture), launched with cudaLaunchKernel:
 * tfg_fused_v when the inputs read whole and the output are 16-byte
 * aligned, else tfg_fused_s. Anything that fails (no NVRTC, a compile
 * or load error) leaves that chain to the interpreted kernel above, for
 * good. Off unless asked for: compiled here, not yet run on a GPU. */

namespace {

struct generated {
  bool ok = false;
  cudaLibrary_t lib = nullptr;
  cudaKernel_t v = nullptr, s = nullptr;
};

std::mutex gen_mutex;
std::unordered_map<uint64_t, generated> gen_cache; /* by program, size, dtype and architecture */

/* The generated kernels of p over n elements of dt on the current
 * device, compiled (or read from NVRTC's cache folder, cache: may be
 * NULL) and loaded on first use; ok false when they cannot be. */
const generated &generated_for(const tfg_fused_prog *p, tfg_dtype dt, int64_t n, const char *cache) {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  char arch[32];
  snprintf(arch, sizeof arch, "compute_%d%d", major, minor);
  uint64_t key = 0xcbf29ce484222325ull;
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < sizeof *p; i++) key = (key ^ b[i]) * 0x100000001b3ull;
  key = (key ^ (uint64_t)n) * 0x100000001b3ull;
  key = (key ^ (uint64_t)dt) * 0x100000001b3ull;
  key = (key ^ (uint64_t)(major * 100 + minor)) * 0x100000001b3ull;
  std::lock_guard<std::mutex> lock(gen_mutex);
  auto it = gen_cache.find(key);
  if (it != gen_cache.end()) return it->second;
  generated &g = gen_cache[key];
  tfg_strbuf src = {0}, ptx = {0}, log = {0};
  const char *const *names, *const *texts;
  int nh;
  tfg_fused_headers(&names, &texts, &nh);
  if (tfg_fused_codegen(p, dt, n, &src) &&
      tfg_nvrtc_ptx(src.data, arch, nh, names, texts, cache, &ptx, &log, NULL) == TFG_OK &&
      cudaLibraryLoadData(&g.lib, ptx.data, nullptr, nullptr, 0, nullptr, nullptr, 0) == cudaSuccess &&
      cudaLibraryGetKernel(&g.v, g.lib, "tfg_fused_v") == cudaSuccess &&
      cudaLibraryGetKernel(&g.s, g.lib, "tfg_fused_s") == cudaSuccess)
    g.ok = true;
  else
    (void)cudaGetLastError(); /* a failed load leaves no sticky error for the launches after */
  tfg_strbuf_free(&src);
  tfg_strbuf_free(&ptx);
  tfg_strbuf_free(&log);
  return g;
}

/* Launches p's generated kernel over out; false when there is none (the
 * caller runs the interpreted one). */
bool launch_generated(tfg_kernel_ctx *ctx, const tfg_fused_prog *p, const tfg_tensor *in, tfg_tensor *out,
                      int64_t n, tfg_status *st) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  const generated &g = generated_for(p, out->dtype, n, cx->nvrtc_cache);
  if (!g.ok) return false;
  const void *ptr[TFG_FUSED_MAX_INPUTS + 1];
  void *args[TFG_FUSED_MAX_INPUTS + 1];
  bool aligned = ((uintptr_t)out->data % 16) == 0;
  for (int k = 0; k < p->ninputs; k++) {
    ptr[k] = in[k].data;
    args[k] = &ptr[k];
    if (p->len[k] == n) aligned = aligned && ((uintptr_t)in[k].data % 16) == 0;
  }
  ptr[p->ninputs] = out->data;
  args[p->ninputs] = &ptr[p->ninputs];
  int64_t lanes = out->dtype == TFG_DTYPE_F32 ? 4 : 2, work = aligned ? (n + lanes - 1) / lanes : n;
  cudaError_t e = cudaLaunchKernel((const void *)(aligned ? g.v : g.s), dim3(tfg_cuda_blocks(cx, work, TFG_CUDA_THREADS)),
                                   dim3(TFG_CUDA_THREADS), args, 0, cx->stream);
  *st = e == cudaSuccess ? TFG_OK : tfg_cuda_fail_call(ctx, "cudaLaunchKernel(fused)", cudaGetErrorString(e), __FILE__, __LINE__);
  return true;
}

} /* namespace */

/* FUSED: node->attrs.data is a tfg_fused_prog over node->ninputs inputs,
 * f32 or f64 like the output, each of its element count, one element or
 * broadcast (tfg_fused_at's index). The CPU kernel's checks and messages
 * (tfg_fused_check_tensors, "on the GPU" for "on the CPU"). */
static tfg_status fused(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  tfg_status st = tfg_fused_check_tensors(ctx, node, in, out, "GPU");
  if (st != TFG_OK) return st;
  const tfg_fused_prog *p = (const tfg_fused_prog *)node->attrs.data;
  int64_t n = tfg_shape_numel(&out->shape);
  fused_inputs ins = {};
  for (int k = 0; k < p->ninputs; k++) ins.p[k] = in[k].data;
  if (n == 0) return TFG_OK;
  if (tfg_cuda_of(ctx)->nvrtc && launch_generated(ctx, p, in, out, n, &st)) return st;
  if (out->dtype == TFG_DTYPE_F32) return TFG_CUDA_LAUNCH(ctx, n, fused_kernel<float>, *p, ins, (float *)out->data, n);
  return TFG_CUDA_LAUNCH(ctx, n, fused_kernel<double>, *p, ins, (double *)out->data, n);
}

extern "C" void tfg_cuda_register_fused(tfg_kernel_fn *table) { table[TFG_OP_FUSED] = fused; }

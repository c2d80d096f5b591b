/* tests/emu/cuda_emu.h: just enough of CUDA to run a kernel's source on
 * the CPU, for tests of device code on machines without a GPU.
 *
 *   #include "tests/emu/cuda_emu.h"
 *   #include "kernels/cuda/attention_device.cuh"     // device code, no runtime calls
 *   emu_launch(blocks, threads, smem_bytes, [&] { my_kernel(args...); });
 *
 * Each block runs as `threads` real threads (std::thread), one block
 * after another; __syncthreads is a barrier of the block's threads,
 * __syncwarp one of the warp's 32, and __shfl_xor_sync exchanges through
 * a per-warp slot array between two warp barriers, so a kernel that skips
 * a barrier races (ThreadSanitizer sees it) or reads a stale value.
 * Shared memory (TFG_CUDA_SHARED) is `smem_bytes` of heap filled with
 * NaN, so a read of a slot the kernel never wrote shows in its results.
 * Full warps only (threads a multiple of 32), every lane in each shuffle
 * (the kernels under test use full masks). Not a simulator of timing,
 * memory models or anything else. */
#ifndef TFG_TESTS_EMU_CUDA_EMU_H
#define TFG_TESTS_EMU_CUDA_EMU_H

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#define __global__
#define __host__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
/* the dynamic shared memory of the running block */
#define TFG_CUDA_SHARED(T, name) T *name = (T *)emu_smem

struct emu_dim3 {
  unsigned x;
};
inline thread_local emu_dim3 threadIdx, blockIdx;
inline emu_dim3 blockDim, gridDim;

/* The running block's barriers and shuffle slots. */
struct emu_block {
  std::barrier<> *all;
  std::vector<std::barrier<> *> warp;
  std::vector<double> slot; /* 32 per warp */
};
inline thread_local emu_block *emu_blk;
inline thread_local void *emu_smem;

inline void __syncthreads() { emu_blk->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_blk->warp[threadIdx.x / 32]->arrive_and_wait(); }

template <class T>
inline T __shfl_xor_sync(unsigned, T x, int mask) {
  unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  emu_blk->slot[w * 32 + l] = (double)x;
  __syncwarp();
  T r = (T)emu_blk->slot[w * 32 + (l ^ (unsigned)mask)];
  __syncwarp(); /* everyone has read before the next exchange writes */
  return r;
}

/* Runs kernel() as a grid of `blocks` blocks of `threads` threads. */
template <class F>
void emu_launch(unsigned blocks, unsigned threads, size_t smem, F kernel) {
  gridDim.x = blocks;
  blockDim.x = threads;
  for (unsigned b = 0; b < blocks; b++) {
    std::vector<float> mem(smem / sizeof(float) + 1, NAN);
    std::barrier<> all((std::ptrdiff_t)threads);
    emu_block blk{&all, {}, std::vector<double>(threads)};
    for (unsigned w = 0; w < threads / 32; w++) blk.warp.push_back(new std::barrier<>(32));
    std::vector<std::thread> th;
    for (unsigned t = 0; t < threads; t++)
      th.emplace_back([&, t] {
        threadIdx.x = t;
        blockIdx.x = b;
        emu_blk = &blk;
        emu_smem = mem.data();
        kernel();
      });
    for (auto &x : th) x.join();
    for (auto *w : blk.warp) delete w;
  }
}

#endif

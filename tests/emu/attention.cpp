/* tests/emu/attention.cpp: the tiled CUDA attention kernels
 * (kernels/cuda/attention_tiled.cuh) run on the CPU through
 * tests/emu/cuda_emu.h, against attention and its gradient computed in
 * double, on machines without a GPU (tests/run.sh runs it; on a GPU the
 * conformance suite checks the same kernels against the CPU's).
 *
 * Per case: the forward output, the row statistics, dq, dk and dv each
 * into its own tensor, and the three again side by side in one packed
 * tensor (the op's attrs.axis 3: each part through the output's row view
 * from its column), every element within 1e-4 (1 + |want|) of the double
 * reference: the kernels sum in f32 over at most a few hundred terms of
 * size below 1 (inputs in [-1, 1), probabilities, scale 0.3), about 1e-6
 * of error, and a wrong index or a missed barrier is off by O(1) or NaN
 * (outputs start as NaN, shared memory is NaN-filled). Cases: causal and
 * full, Tq below, equal to and above Tk, rows not a multiple of the
 * block's 8, key tiles of 32 cut short, no keys, no queries, head sizes
 * 1 to 128 odd and even, and a grid smaller than the blocks (the
 * kernels' grid-stride loop).
 *
 *   make build/tests/emu/attention && build/tests/emu/attention */
#include "tests/emu/cuda_emu.h"

#include <algorithm>
#include <cstdio>

#include "kernels/cuda/attention_tiled.cuh"

using namespace tfg_att;

namespace {

struct shape {
  long long b, tq, tk;
  int hd, hdv;
  bool causal;
  unsigned grid;
};

const shape CASES[] = {
    {2, 37, 45, 128, 128, true, 3}, {3, 13, 13, 33, 7, false, 2}, {2, 70, 40, 31, 63, true, 5},
    {1, 100, 64, 127, 1, true, 4},  {2, 0, 5, 16, 16, true, 2},   {2, 5, 0, 16, 16, true, 2},
    {1, 64, 100, 64, 64, true, 9}, {2, 40, 40, 1, 1, true, 3},  {1, 33, 33, 64, 64, false, 1},
};

/* A row-major [b, t, d] tensor as a rows view, from column `col` of
 * rows `ld` wide (ld = d unless packed). */
tfg_rows_view rows(long long b, long long t, long long ld) {
  tfg_rows_view v = {};
  v.nbatch = 1;
  v.dim[0] = b;
  v.step[0] = t * ld;
  v.ld = ld;
  return v;
}

std::vector<float> random(long long n, unsigned &seed) {
  std::vector<float> x((size_t)n);
  for (auto &e : x) {
    seed = seed * 1664525u + 1013904223u;
    e = (float)((double)(seed >> 8) / (double)(1u << 24) * 2 - 1);
  }
  return x;
}

int failures;

void check(const char *what, const shape &c, float got, double want) {
  if (std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want))) return;
  if (failures++ < 10)
    std::printf("FAIL emu attention b=%lld tq=%lld tk=%lld hd=%d hdv=%d causal=%d: %s = %.9g, want %.9g\n", c.b,
                c.tq, c.tk, c.hd, c.hdv, c.causal, what, got, want);
}

void run_case(const shape &c) {
  const float scale = 0.3f;
  unsigned seed = 12345u + (unsigned)(c.tq * 7 + c.tk * 3 + c.hd);
  long long b = c.b, tq = c.tq, tk = c.tk;
  int hd = c.hd, hdv = c.hdv;
  std::vector<float> q = random(b * tq * hd, seed), k = random(b * tk * hd, seed), v = random(b * tk * hdv, seed),
                     dy = random(b * tq * hdv, seed);
  std::vector<float> o((size_t)(b * tq * hdv), NAN), dq((size_t)(b * tq * hd), NAN), dk((size_t)(b * tk * hd), NAN),
      dv((size_t)(b * tk * hdv), NAN);
  long long w = 2 * hd + hdv; /* the packed row (Tq = Tk only) */
  std::vector<float> pk((size_t)(tq == tk ? b * tq * w : 0), NAN);
  std::vector<double> st((size_t)(2 * b * tq + 2), NAN);
  tiles t = {rows(b, tq, hd), rows(b, tk, hd), rows(b, tk, hdv), rows(b, tq, hdv), rows(b, tq, hdv)};
  long long qblocks = b * ((tq + ROWS - 1) / ROWS), kblocks = b * ((tk + ROWS - 1) / ROWS);
  size_t smem = tiled_smem(hd, hdv, hd, hdv);
  const float *Q = q.data(), *K = k.data(), *V = v.data(), *DY = dy.data();
  double *ST = st.data();
  auto grads = [&](float *gq, float *gk, float *gv, long long ld) {
    tiles tq_ = t, tk_ = t, tv_ = t;
    tq_.o = rows(b, tq, ld ? ld : hd);
    tk_.o = rows(b, tk, ld ? ld : hd);
    tv_.o = rows(b, tk, ld ? ld : hdv);
    if (qblocks)
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_q_tiled(Q, K, V, DY, gq, tq_, ST, tq, tk, hd, hdv, scale, c.causal, qblocks);
      });
    if (kblocks) {
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_kv_tiled<true>(Q, K, V, DY, gk, tk_, ST, tq, tk, hd, hdv, scale, c.causal, kblocks);
      });
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_kv_tiled<false>(Q, K, V, DY, gv, tv_, ST, tq, tk, hd, hdv, scale, c.causal, kblocks);
      });
    }
  };
  if (qblocks) {
    float *O = o.data();
    emu_launch(c.grid, ROWS * WARP, tiled_smem(hd, hdv, hd, 0), [&] {
      attention_tiled(Q, K, V, O, t, tq, tk, hd, hdv, scale, c.causal, qblocks);
    });
    emu_launch(c.grid, ROWS * WARP, smem, [&] {
      attention_grad_stats_tiled(Q, K, V, DY, t, ST, tq, tk, hd, hdv, scale, c.causal, true, qblocks);
    });
  }
  grads(dq.data(), dk.data(), dv.data(), 0);
  if (tq == tk) grads(pk.data(), pk.data() + hd, pk.data() + 2 * hd, w);

  for (long long m = 0; m < b; m++) { /* the reference, in double */
    std::vector<double> p((size_t)(tq * tk), 0), ds((size_t)(tq * tk), 0);
    for (long long i = 0; i < tq; i++) {
      long long vis = c.causal ? std::min(i + 1, tk) : tk;
      std::vector<double> s((size_t)tk);
      double mx = -INFINITY, l = 0, d = 0;
      for (long long j = 0; j < vis; j++) {
        double a = 0;
        for (int e = 0; e < hd; e++) a += (double)q[(m * tq + i) * hd + e] * k[(m * tk + j) * hd + e];
        s[j] = a * scale;
        mx = std::max(mx, s[j]);
      }
      for (long long j = 0; j < vis; j++) l += std::exp(s[j] - mx);
      std::vector<double> dp((size_t)tk);
      for (long long j = 0; j < vis; j++) {
        p[i * tk + j] = std::exp(s[j] - mx) / l;
        double a = 0;
        for (int e = 0; e < hdv; e++) a += (double)dy[(m * tq + i) * hdv + e] * v[(m * tk + j) * hdv + e];
        dp[j] = a;
        d += p[i * tk + j] * a;
      }
      for (long long j = 0; j < vis; j++) ds[i * tk + j] = p[i * tk + j] * (dp[j] - d) * scale;
    }
    for (long long i = 0; i < tq; i++) {
      for (int e = 0; e < hdv; e++) {
        double a = 0;
        for (long long j = 0; j < tk; j++) a += p[i * tk + j] * v[(m * tk + j) * hdv + e];
        check("o", c, o[(m * tq + i) * hdv + e], a);
      }
      for (int e = 0; e < hd; e++) {
        double a = 0;
        for (long long j = 0; j < tk; j++) a += ds[i * tk + j] * k[(m * tk + j) * hd + e];
        check("dq", c, dq[(m * tq + i) * hd + e], a);
        if (tq == tk) check("packed dq", c, pk[(m * tq + i) * w + e], a);
      }
    }
    for (long long j = 0; j < tk; j++) {
      for (int e = 0; e < hd; e++) {
        double a = 0;
        for (long long i = 0; i < tq; i++) a += ds[i * tk + j] * q[(m * tq + i) * hd + e];
        check("dk", c, dk[(m * tk + j) * hd + e], a);
        if (tq == tk) check("packed dk", c, pk[(m * tk + j) * w + hd + e], a);
      }
      for (int e = 0; e < hdv; e++) {
        double a = 0;
        for (long long i = 0; i < tq; i++) a += p[i * tk + j] * dy[(m * tq + i) * hdv + e];
        check("dv", c, dv[(m * tk + j) * hdv + e], a);
        if (tq == tk) check("packed dv", c, pk[(m * tk + j) * w + 2 * hd + e], a);
      }
    }
  }
}

} // namespace

int main() {
  int n = 0;
  for (const shape &c : CASES) {
    run_case(c);
    n++;
  }
  std::printf("emu attention: %d cases, %s\n", n, failures ? "FAILED" : "all within 1e-4 of the double reference");
  return failures ? 1 : 0;
}

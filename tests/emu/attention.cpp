/* tests/emu/attention.cpp: the CUDA attention kernels
 * (kernels/cuda/attention_device.cuh) run on the CPU through
 * tests/emu/cuda_emu.h, against attention and its gradient computed in
 * double, on machines without a GPU (tests/run.sh runs it; on a GPU the
 * conformance suite checks the same kernels against the CPU's).
 *
 * Per case: the forward output, the gradient's row statistics, dq, dk
 * and dv each into its own tensor, and (Tq = Tk) the three again side by
 * side in one packed tensor (the op's attrs.axis 3: each part through the
 * output's row view from its column); by the tiled kernels (f32) and,
 * on the cases up to 200 query-key pairs, by the reference ones (a warp
 * per row, in f32 and f64). Every element
 * within 1e-4 (1 + |want|) of the double reference for f32 (sums of at
 * most a few hundred terms of size below 1: inputs in [-1, 1),
 * probabilities, scale 0.3; about 1e-6 of error) and 1e-12 (1 + |want|)
 * for f64; a wrong index or a missed barrier is off by O(1) or NaN
 * (outputs start as NaN, shared memory is NaN-filled). Cases: causal and
 * full, Tq below, equal to and above Tk, rows not a multiple of the tiled
 * block's 8, tiles of 32 cut short, no keys, no queries, head sizes 1 to
 * 128 odd and even (and 300, past one reference pass of 256 dims), and
 * grids smaller than the work (the kernels' grid-stride loops).
 *
 *   make build/tests/emu/attention && build/tests/emu/attention */
#include "tests/emu/cuda_emu.h"

#include <algorithm>
#include <cstdio>

#include "kernels/cuda/attention_device.cuh"

using namespace tfg_att;

namespace {

struct shape {
  long long b, tq, tk;
  int hd, hdv;
  bool causal;
  unsigned grid; /* blocks launched: the kernels loop over the rest */
};

const shape CASES[] = {
    {2, 37, 45, 128, 128, true, 3}, {3, 13, 13, 33, 7, false, 2}, {2, 70, 40, 31, 63, true, 5},
    {1, 100, 64, 127, 1, true, 4},  {2, 0, 5, 16, 16, true, 2},   {2, 5, 0, 16, 16, true, 2},
    {1, 64, 100, 64, 64, true, 9},  {2, 40, 40, 1, 1, true, 3},   {1, 33, 33, 64, 64, false, 1},
};

/* the reference kernels only: a head size past one pass of WARP * SLICE dims */
const shape WIDE = {1, 9, 9, 300, 260, true, 2};

const float SCALE = 0.3f;

/* A row-major [b, t, ld] tensor as a rows view. */
tfg_rows_view rows(long long b, long long t, long long ld) {
  tfg_rows_view v = {};
  v.nbatch = 1;
  v.dim[0] = b;
  v.step[0] = t * ld;
  v.ld = ld;
  return v;
}

/* The inputs (q, k, v, dy) and the double reference (o, dq, dk, dv). */
struct problem {
  shape c;
  std::vector<float> q, k, v, dy;
  std::vector<double> o, dq, dk, dv;
};

std::vector<float> random(long long n, unsigned &seed) {
  std::vector<float> x((size_t)n);
  for (auto &e : x) {
    seed = seed * 1664525u + 1013904223u;
    e = (float)((double)(seed >> 8) / (double)(1u << 24) * 2 - 1);
  }
  return x;
}

problem make(const shape &c) {
  problem p{c, {}, {}, {}, {}, {}, {}, {}, {}};
  unsigned seed = 12345u + (unsigned)(c.tq * 7 + c.tk * 3 + c.hd);
  long long b = c.b, tq = c.tq, tk = c.tk;
  int hd = c.hd, hdv = c.hdv;
  p.q = random(b * tq * hd, seed), p.k = random(b * tk * hd, seed), p.v = random(b * tk * hdv, seed);
  p.dy = random(b * tq * hdv, seed);
  p.o.assign((size_t)(b * tq * hdv), 0), p.dq.assign((size_t)(b * tq * hd), 0);
  p.dk.assign((size_t)(b * tk * hd), 0), p.dv.assign((size_t)(b * tk * hdv), 0);
  for (long long m = 0; m < b; m++) {
    std::vector<double> pr((size_t)(tq * tk), 0), ds((size_t)(tq * tk), 0);
    for (long long i = 0; i < tq; i++) {
      long long vis = c.causal ? std::min(i + 1, tk) : tk;
      std::vector<double> s((size_t)tk), dp((size_t)tk);
      double mx = -INFINITY, l = 0, d = 0;
      for (long long j = 0; j < vis; j++) {
        double a = 0;
        for (int e = 0; e < hd; e++) a += (double)p.q[(m * tq + i) * hd + e] * p.k[(m * tk + j) * hd + e];
        s[j] = a * SCALE;
        mx = std::max(mx, s[j]);
      }
      for (long long j = 0; j < vis; j++) l += std::exp(s[j] - mx);
      for (long long j = 0; j < vis; j++) {
        pr[i * tk + j] = std::exp(s[j] - mx) / l;
        double a = 0;
        for (int e = 0; e < hdv; e++) a += (double)p.dy[(m * tq + i) * hdv + e] * p.v[(m * tk + j) * hdv + e];
        dp[j] = a;
        d += pr[i * tk + j] * a;
      }
      for (long long j = 0; j < vis; j++) ds[i * tk + j] = pr[i * tk + j] * (dp[j] - d) * SCALE;
    }
    for (long long i = 0; i < tq; i++)
      for (long long j = 0; j < tk; j++) {
        for (int e = 0; e < hdv; e++) p.o[(m * tq + i) * hdv + e] += pr[i * tk + j] * p.v[(m * tk + j) * hdv + e];
        for (int e = 0; e < hd; e++) {
          p.dq[(m * tq + i) * hd + e] += ds[i * tk + j] * p.k[(m * tk + j) * hd + e];
          p.dk[(m * tk + j) * hd + e] += ds[i * tk + j] * p.q[(m * tq + i) * hd + e];
        }
        for (int e = 0; e < hdv; e++) p.dv[(m * tk + j) * hdv + e] += pr[i * tk + j] * p.dy[(m * tq + i) * hdv + e];
      }
  }
  return p;
}

int failures, checked;

/* got (rows of `width` values, each `ld` apart from column `col`) against want. */
template <typename T>
void check(const char *what, const problem &p, const std::vector<T> &got, const std::vector<double> &want,
           long long width, long long ld, long long col, double tol) {
  for (size_t r = 0; width && r < want.size() / (size_t)width; r++)
    for (long long e = 0; e < width; e++) {
      double g = (double)got[r * (size_t)ld + (size_t)(col + e)], w = want[r * (size_t)width + (size_t)e];
      checked++;
      if (std::fabs(g - w) <= tol * (1 + std::fabs(w))) continue;
      if (failures++ < 10)
        std::printf("FAIL emu attention b=%lld tq=%lld tk=%lld hd=%d hdv=%d causal=%d: %s[%zu][%lld] = %.17g, want "
                    "%.17g\n",
                    p.c.b, p.c.tq, p.c.tk, p.c.hd, p.c.hdv, p.c.causal, what, r, e, g, w);
    }
}

template <typename T>
std::vector<T> as(const std::vector<float> &x) {
  return std::vector<T>(x.begin(), x.end());
}

/* The tiled kernels (f32). */
void run_tiled(const problem &p) {
  const shape &c = p.c;
  long long b = c.b, tq = c.tq, tk = c.tk;
  int hd = c.hd, hdv = c.hdv;
  long long w = 2 * hd + hdv; /* the packed row */
  std::vector<float> o((size_t)(b * tq * hdv), NAN), dq((size_t)(b * tq * hd), NAN), dk((size_t)(b * tk * hd), NAN),
      dv((size_t)(b * tk * hdv), NAN), pk((size_t)(tq == tk ? b * tq * w : 0), NAN);
  std::vector<double> st((size_t)(2 * b * tq + 2), NAN);
  att_views t = {rows(b, tq, hd), rows(b, tk, hd), rows(b, tk, hdv), rows(b, tq, hdv), rows(b, tq, hdv)};
  long long qblocks = b * ((tq + ROWS - 1) / ROWS), kblocks = b * ((tk + ROWS - 1) / ROWS);
  size_t smem = tiled_smem(hd, hdv, hd, hdv);
  const float *Q = p.q.data(), *K = p.k.data(), *V = p.v.data(), *DY = p.dy.data();
  double *ST = st.data();
  auto grads = [&](float *gq, float *gk, float *gv, long long ld) {
    att_views tq_ = t, tk_ = t, tv_ = t;
    tq_.o = rows(b, tq, ld ? ld : hd);
    tk_.o = rows(b, tk, ld ? ld : hd);
    tv_.o = rows(b, tk, ld ? ld : hdv);
    if (qblocks)
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_q_tiled(Q, K, V, DY, gq, tq_, ST, tq, tk, hd, hdv, SCALE, c.causal, qblocks);
      });
    if (kblocks) {
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_kv_tiled<true>(Q, K, V, DY, gk, tk_, ST, tq, tk, hd, hdv, SCALE, c.causal, kblocks);
      });
      emu_launch(c.grid, ROWS * WARP, smem, [&] {
        attention_grad_kv_tiled<false>(Q, K, V, DY, gv, tv_, ST, tq, tk, hd, hdv, SCALE, c.causal, kblocks);
      });
    }
  };
  if (qblocks) {
    float *O = o.data();
    emu_launch(c.grid, ROWS * WARP, tiled_smem(hd, hdv, hd, 0), [&] {
      attention_tiled(Q, K, V, O, t, tq, tk, hd, hdv, SCALE, c.causal, qblocks);
    });
    emu_launch(c.grid, ROWS * WARP, smem, [&] {
      attention_grad_stats_tiled(Q, K, V, DY, t, ST, tq, tk, hd, hdv, SCALE, c.causal, true, qblocks);
    });
  }
  grads(dq.data(), dk.data(), dv.data(), 0);
  check("tiled o", p, o, p.o, hdv, hdv, 0, 1e-4);
  check("tiled dq", p, dq, p.dq, hd, hd, 0, 1e-4);
  check("tiled dk", p, dk, p.dk, hd, hd, 0, 1e-4);
  check("tiled dv", p, dv, p.dv, hdv, hdv, 0, 1e-4);
  if (tq != tk) return;
  grads(pk.data(), pk.data() + hd, pk.data() + 2 * hd, w);
  check("tiled packed dq", p, pk, p.dq, hd, w, 0, 1e-4);
  check("tiled packed dk", p, pk, p.dk, hd, w, hd, 1e-4);
  check("tiled packed dv", p, pk, p.dv, hdv, w, 2 * hd, 1e-4);
}

/* The reference kernels, a warp per row, in T. */
template <typename T>
void run_reference(const problem &p, double tol) {
  const shape &c = p.c;
  long long b = c.b, tq = c.tq, tk = c.tk;
  int hd = c.hd, hdv = c.hdv;
  std::vector<T> q = as<T>(p.q), k = as<T>(p.k), v = as<T>(p.v), dy = as<T>(p.dy);
  std::vector<T> o((size_t)(b * tq * hdv), (T)NAN), dq((size_t)(b * tq * hd), (T)NAN),
      dk((size_t)(b * tk * hd), (T)NAN), dv((size_t)(b * tk * hdv), (T)NAN);
  std::vector<double> st((size_t)(2 * b * tq + 2), NAN);
  att_views fw = {rows(b, tq, hd), rows(b, tk, hd), rows(b, tk, hdv), rows(b, tq, hdv), rows(b, tq, hdv)};
  att_views gq = {rows(b, tq, hd), rows(b, tk, hd), rows(b, tk, hdv), rows(b, tq, hdv), rows(b, tq, hd)};
  att_views gk = gq, gv = gq;
  gk.o = rows(b, tk, hd);
  gv.o = rows(b, tk, hdv);
  const T *Q = q.data(), *K = k.data(), *V = v.data(), *DY = dy.data();
  T sc = (T)SCALE;
  double *ST = st.data();
  long long qrows = b * tq, krows = b * tk;
  unsigned threads = 256; /* 8 warps: 8 rows per block per round of the grid */
  if (qrows) {
    T *O = o.data(), *DQ = dq.data();
    emu_launch(c.grid, threads, 0, [&] { attention_rows<T>(Q, K, V, O, fw, qrows, tq, tk, hd, hdv, sc, c.causal); });
    emu_launch(c.grid, threads, 0,
               [&] { attention_grad_stats<T>(Q, K, V, DY, gq, ST, qrows, tq, tk, hd, hdv, sc, c.causal, true); });
    emu_launch(c.grid, threads, 0,
               [&] { attention_grad_q<T>(Q, K, V, DY, DQ, gq, ST, qrows, tq, tk, hd, hdv, sc, c.causal); });
  }
  if (krows) {
    T *DK = dk.data(), *DV = dv.data();
    emu_launch(c.grid, threads, 0,
               [&] { attention_grad_kv<T, true>(Q, K, V, DY, DK, gk, ST, krows, tq, tk, hd, hdv, sc, c.causal); });
    emu_launch(c.grid, threads, 0,
               [&] { attention_grad_kv<T, false>(Q, K, V, DY, DV, gv, ST, krows, tq, tk, hd, hdv, sc, c.causal); });
  }
  const char *f64 = sizeof(T) == 8 ? "reference f64" : "reference f32";
  std::string n[4] = {std::string(f64) + " o", std::string(f64) + " dq", std::string(f64) + " dk",
                      std::string(f64) + " dv"};
  check(n[0].c_str(), p, o, p.o, hdv, hdv, 0, tol);
  check(n[1].c_str(), p, dq, p.dq, hd, hd, 0, tol);
  check(n[2].c_str(), p, dk, p.dk, hd, hd, 0, tol);
  check(n[3].c_str(), p, dv, p.dv, hdv, hdv, 0, tol);
}

} // namespace

int main() {
  int n = 0;
  for (const shape &c : CASES) {
    problem p = make(c);
    run_tiled(p);
    if (c.tq * c.tk <= 200) { /* the small ones: emulated shuffles make a warp per row slow */
      run_reference<float>(p, 1e-4);
      run_reference<double>(p, 1e-12);
    }
    n++;
  }
  problem wide = make(WIDE);
  run_reference<float>(wide, 1e-4);
  run_reference<double>(wide, 1e-12);
  std::printf("emu attention: %d cases, %d values, %s\n", n + 1, checked,
              failures ? "FAILED" : "each within its tolerance of the double reference");
  return failures ? 1 : 0;
}

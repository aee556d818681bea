// The screening kernel at the paper's widths (d_K = 16, d_V = 64, compiled as
// constants): forward against a dense reference written from the spec (MiPE; position
// ROPE with and without YaRN), backward against central differences, fp32 against fp64,
// and workspace reuse. (The model tests use tiny widths, which take the kernel's generic
// path.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/cpu/gate.h"
#include "kernels/cpu/mipe.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/screening.h"
#include "tests/kernels/isa_test.h"

// Counts operator new calls while g_counting is set (for the no-allocation test).
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* operator new(std::size_t n) {
  if (g_counting) ++g_allocations;
  if (void* p = std::malloc(n > 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace multiscreen::kernels::cpu {
namespace {

constexpr int64_t kDk = 16, kDv = 64;

template <typename Real>
struct Problem {
  ScreeningShape shape;
  std::vector<TileScalars> tiles;
  std::vector<Real> P;
  std::vector<Real> U, qt, kt, vb, qn, kn, vn, h;
  std::vector<Real> gate;  // ScreeningSaved::gate: [B, tiles, T, 2·d_v]
  bool keep_gate = true;   // false: saved.gate null (the backward recomputes the gate)
  std::vector<Real> dP;
  std::vector<TileScalarGrads> grads;

  Problem(int64_t B, int64_t T, std::vector<TileScalars> tile_scalars, uint64_t seed) : tiles(tile_scalars) {
    shape.batch = B;
    shape.seq = T;
    shape.tiles = static_cast<int64_t>(tiles.size());
    shape.d_k = kDk;
    shape.d_v = kDv;
    shape.pos0 = 5;
    shape.w_th = 16;
    const int64_t rows = B * T, C = shape.p_cols(), nt = shape.tiles;
    P.resize(rows * nt * C);
    // Queries and keys share a direction per tile, so that similarities spread over
    // [−1, 1] and Trim accepts a real fraction of the pairs; values and gates random.
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0, 1);
    for (int64_t t = 0; t < nt; ++t) {
      std::vector<double> u(kDk);
      for (double& x : u) x = normal(rng);
      for (int64_t i = 0; i < rows; ++i) {
        Real* row = P.data() + i * nt * C + t * C;
        for (int64_t c = 0; c < 2 * kDk; ++c) row[c] = static_cast<Real>(u[c % kDk] + 0.6 * normal(rng));
        for (int64_t c = 2 * kDk; c < C; ++c) row[c] = static_cast<Real>(normal(rng));
      }
    }
    U.resize(rows * nt * kDv);
    qt.resize(rows * nt * kDk);
    kt.resize(rows * nt * kDk);
    vb.resize(rows * nt * kDv);
    qn.resize(rows * nt);
    kn.resize(rows * nt);
    vn.resize(rows * nt);
    h.resize(rows * nt * kDv);
    gate.resize(rows * nt * 2 * kDv);
    dP.resize(P.size());
    grads.resize(nt);
  }
  ScreeningSaved<Real> saved() {
    return {qt.data(), kt.data(), vb.data(), qn.data(), kn.data(), vn.data(), h.data(),
            keep_gate ? gate.data() : nullptr};
  }
  void Forward(ScreeningWorkspace<Real>* ws = nullptr) {
    ScreeningForward(shape, P.data(), tiles.data(), saved(), U.data(), ws);
  }
  void Backward(const std::vector<Real>& dU, ScreeningWorkspace<Real>* ws = nullptr) {
    ScreeningBackward(shape, P.data(), tiles.data(), saved(), dU.data(), dP.data(), grads.data(), ws);
  }
};

// Windows below T with MiPE on (w < w_th = 16), above w_th without it, and infinite
// (inference expansion); acceptance widths from strict to loose.
std::vector<TileScalars> SomeTiles() {
  const double inf = std::numeric_limits<double>::infinity();
  return {{3.7, 0.55, 0.8, 3.7}, {11.3, 0.9, 1.3, 11.3}, {21.6, 0.35, 0.6, 21.6}, {inf, 0.75, 1.1, 40.0}};
}

std::vector<double> Unit(const double* x, int64_t d, double* norm) {
  double sq = 0;
  for (int64_t c = 0; c < d; ++c) sq += x[c] * x[c];
  *norm = std::sqrt(sq);
  std::vector<double> y(x, x + d);
  for (double& v : y) v /= std::max(*norm, 1e-12);
  return y;
}

// Spec step 6 for position ROPE as docs/ablations.md defines it, in fp64: the pairs
// (c, c + d/2) of the unit z turned by pos · freq[c].
void RopeTurn(std::vector<double>* z, double pos, const std::vector<double>& freq) {
  const int64_t half = static_cast<int64_t>(z->size()) / 2;
  for (int64_t c = 0; c < half; ++c) {
    const double a = (*z)[c], b = (*z)[c + half], phi = pos * freq[c];
    (*z)[c] = a * std::cos(phi) - b * std::sin(phi);
    (*z)[c + half] = a * std::sin(phi) + b * std::cos(phi);
  }
}

// Spec steps 5–13 written out densely (every j ≤ i visited), in fp64. Position MIPE, or
// ROPE with the frequencies `rope_freq` [d_K/2] (the caller's: θ_p, or YaRN's θ'_p).
std::vector<double> DenseReference(const Problem<double>& p, const std::vector<double>& rope_freq = {}) {
  const ScreeningShape& s = p.shape;
  const int64_t T = s.seq, nt = s.tiles, C = s.p_cols();
  std::vector<double> U(s.batch * T * nt * kDv);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < nt; ++t) {
      const TileScalars& tile = p.tiles[t];
      double rate, rate_dw, norm;
      MipeRate(tile.mipe_w, s.w_th, &rate, &rate_dw);
      std::vector<std::vector<double>> q(T), k(T), v(T);
      for (int64_t i = 0; i < T; ++i) {
        const double* row = p.P.data() + (b * T + i) * nt * C + t * C;
        q[i] = Unit(row, kDk, &norm);
        k[i] = Unit(row + kDk, kDk, &norm);
        v[i] = Unit(row + 2 * kDk, kDv, &norm);
        if (s.position == PositionKind::kRope) {
          RopeTurn(&q[i], double(s.pos0 + i), rope_freq);
          RopeTurn(&k[i], double(s.pos0 + i), rope_freq);
          continue;
        }
        const double phi = double(s.pos0 + i) * rate;
        for (auto* z : {&q[i], &k[i]}) {
          const double z0 = (*z)[0], z1 = (*z)[1];
          (*z)[0] = z0 * std::cos(phi) - z1 * std::sin(phi);
          (*z)[1] = z0 * std::sin(phi) + z1 * std::cos(phi);
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> h(kDv, 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const double d = double(i - j);
          if (!std::isinf(tile.w) && d >= tile.w) continue;
          const double m = std::isinf(tile.w) ? 1.0 : 0.5 * (std::cos(std::numbers::pi * d / tile.w) + 1.0);
          double sim = 0;
          for (int64_t c = 0; c < kDk; ++c) sim += q[i][c] * k[j][c];
          const double a = std::max(1.0 - (1.0 - sim) / tile.r, 0.0);
          for (int64_t c = 0; c < kDv; ++c) h[c] += a * a * m * v[j][c];
        }
        double n2 = 0;
        for (double x : h) n2 += x * x;
        const double n = std::sqrt(n2), f = n > 0 ? std::tanh(n) / n : 1.0;
        const double* g = p.P.data() + (b * T + i) * nt * C + t * C + 2 * kDk + kDv;
        for (int64_t c = 0; c < kDv; ++c) {
          const double gate = std::tanh(g[c] / (1.0 + std::exp(-g[c])));
          U[(b * T + i) * nt * kDv + t * kDv + c] = tile.scale * h[c] * f * gate;
        }
      }
    }
  }
  return U;
}

// The kernels' tests run on every instruction-set path (each has its own vector width).
class ScreeningKernelTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(ScreeningKernelTest);

TEST_P(ScreeningKernelTest, FixedWidthForwardMatchesADenseReference) {
  Problem<double> p(2, 40, SomeTiles(), 1);
  p.Forward();
  const std::vector<double> want = DenseReference(p);
  double max_abs = 0;
  for (double x : want) max_abs = std::max(max_abs, std::abs(x));
  ASSERT_GT(max_abs, 0.05);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(p.U[i], want[i], 1e-12) << i;
}

// Position ROPE with YaRN at inference (issue 30; docs/ablations.md): q̃ and k̃ turned by
// the NTK-by-parts θ'_p of kernels/cpu/rope.h (F = 4, L = 256: at d_K = 16 pair 0 turns
// 41 times in L and keeps θ_0, pairs 1–3 are on the ramp, 4–7 are interpolated, θ_p/4), no
// temperature (Trim compares the plain cosine with 1 − r). Saved q̃, k̃ at a few positions
// and every output against the definition in fp64; YaRN really moves the output.
TEST_P(ScreeningKernelTest, RopeWithYarnTurnsByTheScaledFrequenciesAndNothingElse) {
  const RopeScaling yarn{4.0, 256.0};
  std::vector<double> freq(kDk / 2), plain(kDk / 2);
  RopeFrequencies(kDk, yarn, freq.data());
  for (int64_t c = 0; c < kDk / 2; ++c) plain[c] = std::pow(10000.0, -2.0 * double(c) / double(kDk));
  EXPECT_EQ(freq[0], plain[0]);                        // γ = 1: kept
  EXPECT_DOUBLE_EQ(freq[kDk / 2 - 1], plain[kDk / 2 - 1] / 4);  // γ = 0: interpolated
  Problem<double> p(2, 40, SomeTiles(), 11);
  p.shape.position = PositionKind::kRope;
  p.shape.pos0 = 300;  // past L, where YaRN matters
  p.shape.rope_scaling = yarn;
  p.Forward();
  const int64_t nt = p.shape.tiles, C = p.shape.p_cols(), T = p.shape.seq;
  for (int64_t b : {0, 1}) {
    for (int64_t t : {0, 3}) {
      for (int64_t i : {0, 17, 39}) {
        const double* row = p.P.data() + (b * T + i) * nt * C + t * C;
        double norm;
        std::vector<double> q = Unit(row, kDk, &norm), k = Unit(row + kDk, kDk, &norm);
        RopeTurn(&q, double(p.shape.pos0 + i), freq);
        RopeTurn(&k, double(p.shape.pos0 + i), freq);
        const int64_t saved = ((b * nt + t) * T + i) * kDk;
        for (int64_t c = 0; c < kDk; ++c) {
          ASSERT_NEAR(p.qt[saved + c], q[c], 1e-14) << b << "," << t << "," << i << "," << c;
          ASSERT_NEAR(p.kt[saved + c], k[c], 1e-14) << b << "," << t << "," << i << "," << c;
        }
      }
    }
  }
  const std::vector<double> want = DenseReference(p, freq), unscaled = DenseReference(p, plain);
  double max_abs = 0, worst = 0, moved = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(want[i]));
    worst = std::max(worst, std::abs(p.U[i] - want[i]));
    moved = std::max(moved, std::abs(want[i] - unscaled[i]));
  }
  ASSERT_GT(max_abs, 0.05);
  EXPECT_LT(worst, 1e-12);
  EXPECT_GT(moved, 1e-2);  // the scaled frequencies really change what Trim accepts
}

// F = 1 is plain RoPE bit for bit (whatever L), and plain RoPE is θ_p = 10000^(−2p/d_K).
TEST_P(ScreeningKernelTest, RopeWithYarnFactorOneIsPlainRopeBitForBit) {
  Problem<double> plain(2, 40, SomeTiles(), 12), one(2, 40, SomeTiles(), 12);
  for (auto* p : {&plain, &one}) {
    p->shape.position = PositionKind::kRope;
    p->shape.pos0 = 300;
  }
  one.shape.rope_scaling = RopeScaling{1.0, 256.0};
  plain.Forward();
  one.Forward();
  EXPECT_EQ(one.U, plain.U);
  EXPECT_EQ(one.qt, plain.qt);
  EXPECT_EQ(one.kt, plain.kt);
  std::vector<double> theta(kDk / 2);
  for (int64_t c = 0; c < kDk / 2; ++c) theta[c] = std::pow(10000.0, -2.0 * double(c) / double(kDk));
  const std::vector<double> want = DenseReference(plain, theta);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(plain.U[i], want[i], 1e-12) << i;
}

double Objective(Problem<double>& p, const std::vector<double>& R) {
  p.Forward();
  double sum = 0;
  for (size_t i = 0; i < R.size(); ++i) sum += R[i] * p.U[i];
  return sum;
}

TEST_P(ScreeningKernelTest, FixedWidthBackwardMatchesCentralDifferences) {
  Problem<double> p(1, 24, SomeTiles(), 2);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> R(p.U.size());
  for (double& x : R) x = normal(rng);
  p.Forward();
  p.Backward(R);
  const double eps = 1e-6;
  // Every column kind (q, k, v, g) of every tile, at a spread of rows.
  const int64_t C = p.shape.p_cols(), ld = p.shape.tiles * C;
  for (int64_t row : {0, 3, 11, 23}) {
    for (int64_t col = 0; col < ld; col += 5) {
      double& x = p.P[row * ld + col];
      const double keep = x;
      x = keep + eps;
      const double up = Objective(p, R);
      x = keep - eps;
      const double down = Objective(p, R);
      x = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(p.dP[row * ld + col], fd, 1e-6 * std::max(1.0, std::abs(fd))) << row << "," << col;
    }
  }
  // The tile scalars: w (Softmask and MiPE together), r and the output scale.
  for (int64_t t = 0; t < p.shape.tiles; ++t) {
    TileScalars& tile = p.tiles[t];
    const TileScalars keep = tile;
    auto diff = [&](auto set) {
      set(eps);
      const double up = Objective(p, R);
      tile = keep;
      set(-eps);
      const double down = Objective(p, R);
      tile = keep;
      return (up - down) / (2 * eps);
    };
    const double fd_r = diff([&](double e) { tile.r = keep.r + e; });
    const double fd_scale = diff([&](double e) { tile.scale = keep.scale + e; });
    EXPECT_NEAR(p.grads[t].r, fd_r, 1e-6 * std::max(1.0, std::abs(fd_r))) << t;
    EXPECT_NEAR(p.grads[t].scale, fd_scale, 1e-6 * std::max(1.0, std::abs(fd_scale))) << t;
    if (!std::isinf(keep.w)) {
      const double fd_w = diff([&](double e) {
        tile.w = keep.w + e;
        tile.mipe_w = keep.mipe_w + e;
      });
      EXPECT_NEAR(p.grads[t].w, fd_w, 1e-6 * std::max(1.0, std::abs(fd_w))) << t;
    }
  }
}

// One problem through the fp64 and the fp32 kernels: the same fp32-representable inputs
// and output gradient, tiles starting at absolute position pos0.
struct Fp32AndFp64 {
  Problem<double> p64{2, 64, SomeTiles(), 4};
  Problem<float> p32{2, 64, SomeTiles(), 4};
  explicit Fp32AndFp64(int64_t pos0) {
    p64.shape.pos0 = p32.shape.pos0 = pos0;
    for (size_t i = 0; i < p64.P.size(); ++i) p64.P[i] = p32.P[i];
    std::mt19937_64 rng(5);
    std::normal_distribution<double> normal(0, 1);
    std::vector<double> R64(p64.U.size());
    for (double& x : R64) x = static_cast<float>(normal(rng));
    const std::vector<float> R32(R64.begin(), R64.end());
    p64.Forward();
    p64.Backward(R64);
    p32.Forward();
    p32.Backward(R32);
  }
};

TEST_P(ScreeningKernelTest, Fp32FixedWidthPathAgreesWithFp64) {
  const Fp32AndFp64 both(0);
  const Problem<double>& p64 = both.p64;
  const Problem<float>& p32 = both.p32;
  auto rel = [](const auto& a, const std::vector<double>& b) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      diff += (a[i] - b[i]) * (a[i] - b[i]);
      norm += b[i] * b[i];
    }
    return std::sqrt(diff / norm);
  };
  EXPECT_LT(rel(p32.U, p64.U), 1e-5);
  EXPECT_LT(rel(p32.dP, p64.dP), 1e-4);
  for (int64_t t = 0; t < p64.shape.tiles; ++t) {
    EXPECT_NEAR(p32.grads[t].r, p64.grads[t].r, 1e-4 * std::max(1.0, std::abs(p64.grads[t].r))) << t;
    EXPECT_NEAR(p32.grads[t].w, p64.grads[t].w, 1e-4 * std::max(1.0, std::abs(p64.grads[t].w))) << t;
  }
}

TEST_P(ScreeningKernelTest, Fp32RateGradientAgreesWithFp64FarFromPositionZero) {
  // ∂L/∂w through MiPE's angle φ = pos · rate depends on relative positions only. Summed
  // per row as pos_i (q̃_i × ∂L/∂q̃_i) over queries plus pos_j (…) over keys, its two
  // halves grow with pos and cancel: in fp32 at pos0 = 70000 that left ∂L/∂w 1e-3 off
  // (measured before the pair-by-pair sum). At pos0 = 5 and 70000, ∂L/∂w of every tile
  // within 1e-5 relative of fp64's.
  for (const int64_t pos0 : {int64_t{5}, int64_t{70000}}) {
    const Fp32AndFp64 both(pos0);
    const Problem<double>& p64 = both.p64;
    const Problem<float>& p32 = both.p32;
    for (int64_t t = 0; t < p64.shape.tiles; ++t) {
      const double ref = p64.grads[t].w, got = p32.grads[t].w;
      std::fprintf(stderr, "pos0 %lld tile %lld: dw fp32 %.9g fp64 %.9g, relative %.3g\n",
                   static_cast<long long>(pos0), static_cast<long long>(t), got, ref,
                   ref == 0 ? std::abs(got) : std::abs(got - ref) / std::abs(ref));
      EXPECT_NEAR(got, ref, 1e-5 * std::abs(ref)) << "pos0 " << pos0 << ", tile " << t;
    }
  }
}

// The forward keeps ĝ = tanh(SiLU(g)) and dĝ/dg per token (ScreeningSaved::gate; the other
// tests run with it, the central differences above through it): its values against the
// formulas in fp64, and the backward from them against the backward that recomputes the
// gate from g (saved.gate null), fp32 and fp64, on every path.
template <typename Real>
void CheckSavedGate(double gate_tol, double same_tol) {
  Problem<Real> kept(2, 40, SomeTiles(), 9), recomputed(2, 40, SomeTiles(), 9);
  recomputed.keep_gate = false;
  // Gate inputs at the edges of the gate's ranges (the clamps of both exps, SiLU's
  // minimum at g = −1.2785, tanh's switch at x = 0.625) in the first rows of every tile, so
  // that they run through the vector loops of each path.
  const std::vector<double> edges = {-1e30, -100, -88.8, -88.6, -87.4, -87.3, -20, -1.2785, -0.5, -1e-20, 0, 1e-20,
                                     0.3, 0.8, 0.9, 0.95, 1, 3, 20, 44.5, 87.4, 88.8, 100, 1e30};
  for (Problem<Real>* p : {&kept, &recomputed}) {
    const int64_t C = p->shape.p_cols(), ld = p->shape.tiles * C;
    for (int64_t t = 0; t < p->shape.tiles; ++t) {
      for (size_t e = 0; e < edges.size(); ++e) {
        p->P[(e / kDv) * ld + t * C + 2 * kDk + kDv + e % kDv] = static_cast<Real>(edges[e]);
        p->P[(3 + e / 16) * ld + t * C + 2 * kDk + kDv + 16 * (e % 4) + e % 3] = static_cast<Real>(edges[e]);
      }
    }
  }
  std::mt19937_64 rng(10);
  std::normal_distribution<double> normal(0, 1);
  std::vector<Real> dU(kept.U.size());
  for (Real& x : dU) x = static_cast<Real>(normal(rng));
  kept.Forward();
  kept.Backward(dU);
  recomputed.Forward();
  recomputed.Backward(dU);
  const ScreeningShape& s = kept.shape;
  const int64_t T = s.seq, nt = s.tiles, C = s.p_cols();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < nt; ++t) {
      for (int64_t i = 0; i < T; ++i) {
        const Real* saved = kept.gate.data() + ((b * nt + t) * T + i) * 2 * kDv;
        for (int64_t c = 0; c < kDv; ++c) {
          const double g = kept.P[(b * T + i) * nt * C + t * C + 2 * kDk + kDv + c];
          const double sig = 1 / (1 + std::exp(-g)), gate = std::tanh(g * sig);
          const double dgate = (1 - gate * gate) * sig * (1 + g * (1 - sig));
          ASSERT_NEAR(saved[c], gate, gate_tol) << b << "," << t << "," << i << "," << c;
          ASSERT_NEAR(saved[kDv + c], dgate, gate_tol) << b << "," << t << "," << i << "," << c;
        }
      }
    }
  }
  EXPECT_EQ(kept.U, recomputed.U);
  for (size_t i = 0; i < kept.dP.size(); ++i) {
    ASSERT_NEAR(kept.dP[i], recomputed.dP[i], same_tol * std::max(1.0, std::abs(double(recomputed.dP[i])))) << i;
  }
  for (int64_t t = 0; t < nt; ++t) {
    EXPECT_NEAR(kept.grads[t].scale, recomputed.grads[t].scale, same_tol * std::max(1.0, std::abs(recomputed.grads[t].scale)));
    EXPECT_NEAR(kept.grads[t].r, recomputed.grads[t].r, same_tol * std::max(1.0, std::abs(recomputed.grads[t].r)));
    EXPECT_NEAR(kept.grads[t].w, recomputed.grads[t].w, same_tol * std::max(1.0, std::abs(recomputed.grads[t].w)));
  }
}

TEST_P(ScreeningKernelTest, TheSavedGateIsTheGateAndTheBackwardFromItMatchesTheRecomputedOne) {
  CheckSavedGate<double>(1e-15, 1e-14);
  CheckSavedGate<float>(4e-7, 1e-6);
}

// The fp32 gate (ExpFast and TanhFast composed) against tanh(SiLU(g)) in fp64 at the
// edges, ±∞ and NaN included (scalar code here; the vector loops in CheckSavedGate).
TEST(GateTest, Fp32GateFollowsTanhOfSiluAtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float g : {-inf, -1e30f, -100.f, -88.8f, -87.4f, -87.3f, -20.f, -1.2785f, -0.5f, -1e-20f, 0.f, -0.f,
                        1e-20f, 0.3f, 0.8f, 0.95f, 1.f, 3.f, 20.f, 44.5f, 87.4f, 88.8f, 100.f, 1e30f, inf}) {
    const double gd = g, sig = 1 / (1 + std::exp(-gd));
    const double want = std::isinf(gd) ? (gd > 0 ? 1.0 : -1.0) : std::tanh(gd * sig);
    float gate, derivative;
    GateForwardAndDerivative(g, &gate, &derivative);
    EXPECT_NEAR(gate, want, 2e-7) << g;  // |ĝ| ≤ 1: about 3 ulp near 1
    EXPECT_EQ(GateForward(g), gate) << g;
    if (std::isfinite(g)) {
      const double want_d = (1 - want * want) * sig * (1 + gd * (1 - sig));
      EXPECT_NEAR(derivative, want_d, 4e-7 * std::max(1.0, std::abs(want_d))) << g;
      EXPECT_EQ(GateDerivative(g), derivative) << g;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float gate, derivative;
  GateForwardAndDerivative(nan, &gate, &derivative);
  EXPECT_TRUE(std::isnan(gate));
  EXPECT_TRUE(std::isnan(derivative));
  EXPECT_TRUE(std::isnan(GateForward(-nan)));
}

TEST_P(ScreeningKernelTest, AReusedWorkspaceGivesTheResultsOfAFreshOne) {
  ScreeningWorkspace<float> ws;
  Problem<float> big(2, 50, SomeTiles(), 6);
  std::vector<float> dU_big(big.U.size(), 0.5f);
  big.Forward(&ws);
  big.Backward(dU_big, &ws);
  // A smaller call through the same (now larger) workspace, against a fresh one.
  std::vector<TileScalars> tiles = SomeTiles();
  tiles.resize(3);
  Problem<float> reused(1, 30, tiles, 7), fresh(1, 30, tiles, 7);
  std::vector<float> dU(reused.U.size(), -0.25f);
  reused.Forward(&ws);
  reused.Backward(dU, &ws);
  fresh.Forward();
  fresh.Backward(dU);
  EXPECT_EQ(reused.U, fresh.U);
  EXPECT_EQ(reused.dP, fresh.dP);
  for (int64_t t = 0; t < 3; ++t) {
    EXPECT_EQ(reused.grads[t].w, fresh.grads[t].w);
    EXPECT_EQ(reused.grads[t].r, fresh.grads[t].r);
  }
}

TEST_P(ScreeningKernelTest, ASizedWorkspaceMakesTheKernelsAllocateNothing) {
  ScreeningWorkspace<float> ws;
  Problem<float> p(2, 96, SomeTiles(), 8);
  std::vector<float> dU(p.U.size(), 0.5f);
  p.Forward(&ws);
  p.Backward(dU, &ws);
  g_allocations = 0;
  g_counting = true;
  p.Forward(&ws);
  p.Backward(dU, &ws);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace multiscreen::kernels::cpu

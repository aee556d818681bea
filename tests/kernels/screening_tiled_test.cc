// The tiled tensor-core screening forward and backward (kernels/cuda/screening_tiled.h)
// against the simple CUDA kernel (kernels/cuda/screening.h), their fp32 oracle: same
// inputs, every output compared (saved q̃, k̃, v̄ and norms bit for bit; h and U row by
// row within 1e-2 relative, bf16 operands; ∂L/∂q, ∂L/∂k, ∂L/∂v row by row within 1e-2,
// ∂L/∂g bit for bit, the tile gradients within 1e-2 of the CPU's fp64 ones; rows the
// simple kernel zeroes exactly zero; the backward bit-identical between two runs).
// Lengths that are no multiple of any block, windows 1 ≤ w < T, w ≥ T and w = ∞,
// acceptance widths near 0 and 1, a tile whose every pair Trim rejects, several tiles and
// sequences; and the simple kernel's tile gradients against the fp64 CPU's near and far
// (pos0 = 70000) from position 0. Label cuda: on the emulated device
// (with its race, bounds and initialization checks) in CI; on a GPU in scripts/gpu_check;
// skipped, visibly, elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/buffer.h"
#include "kernels/cpu/screening.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/screening.h"
#include "kernels/cuda/screening_tiled.h"
#include "kernels/device_array.h"
#include "tests/cuda/cuda_test.h"

namespace multiscreen {
namespace {

using kernels::ScreeningShape;
using kernels::TileScalarGrads;
using kernels::TileScalars;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTolerance = 1e-2;  // bf16 operands, fp32 accumulation (issue 29)

using ScreeningTiledTest = CudaTest;  // skips, saying so, where no CUDA device is visible

// A tile as the test names it: window, acceptance width, output scale.
struct Tile {
  double w, r, scale;
};

// One layer call. clustered: each tile's q and k rows are one of three directions plus
// 5 % noise, so that similarities crowd near 1 and a small r still accepts pairs.
struct Problem {
  ScreeningShape shape;
  std::vector<TileScalars> tiles;
  std::vector<float> P;
  Problem(int64_t B, int64_t T, const std::vector<Tile>& ts, bool clustered, uint64_t seed, int64_t pos0 = 3) {
    const int64_t nt = static_cast<int64_t>(ts.size());
    shape = {B, T, nt, 16, 64, pos0, 256.0};
    for (const Tile& t : ts) tiles.push_back({t.w, t.r, t.scale, std::isinf(t.w) ? 300.0 : t.w});
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    const int64_t C = shape.p_cols();
    P.resize(B * T * nt * C);
    for (float& x : P) x = n(rng);
    if (!clustered) return;
    std::vector<float> centre(nt * 3 * 16);
    for (float& x : centre) x = n(rng);
    std::uniform_int_distribution<int> pick(0, 2);
    for (int64_t row = 0; row < B * T; ++row) {
      for (int64_t t = 0; t < nt; ++t) {
        for (int part = 0; part < 2; ++part) {  // q, then k
          const float* c = &centre[(t * 3 + pick(rng)) * 16];
          float* dst = &P[row * nt * C + t * C + 16 * part];
          for (int x = 0; x < 16; ++x) dst[x] = c[x] + 0.05f * n(rng);
        }
      }
    }
  }
};

// P's elements as bf16 bits, rounded to nearest even (exact where P holds bf16 values).
std::vector<uint16_t> Bf16Bits(const std::vector<float>& P) {
  std::vector<uint16_t> bits(P.size());
  for (size_t e = 0; e < P.size(); ++e) {
    const __nv_bfloat16 h = __float2bfloat16_rn(P[e]);
    std::memcpy(&bits[e], &h, 2);
  }
  return bits;
}

// P (bf16 bits) on the device, in `arrays16`; null-free.
const uint16_t* UploadBf16(const std::vector<float>& P, std::vector<DeviceArray<uint16_t>>* arrays16) {
  const std::vector<uint16_t> bits = Bf16Bits(P);
  arrays16->emplace_back(Device::kCuda);
  arrays16->back().Resize(bits.size());
  EXPECT_EQ(cudaMemcpy(arrays16->back().data(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  return arrays16->back().data();
}

// p with P rounded to bf16 (the values a GEMM with a bf16 D leaves).
Problem RoundedToBf16(Problem p) {
  for (float& x : p.P) x = __bfloat162float(__float2bfloat16_rn(x));
  return p;
}

// The bit-identity tests' tally: the elements of `got` whose bits differ from `ref`'s (the
// sizes are expected equal; the shorter is compared), and, where `nonzero` is given, ref's
// nonzero elements added to it (a test of zeros proves little).
int64_t DifferingElements(const std::vector<float>& got, const std::vector<float>& ref, int64_t* nonzero = nullptr) {
  EXPECT_EQ(got.size(), ref.size());
  int64_t n = 0;
  for (size_t e = 0; e < std::min(got.size(), ref.size()); ++e) {
    n += std::memcmp(&got[e], &ref[e], sizeof(float)) != 0;
    if (nonzero != nullptr) *nonzero += ref[e] != 0.f;
  }
  return n;
}

// What one forward writes: U and every saved buffer, on the host.
struct Outputs {
  std::vector<float> U, q_tilde, k_tilde, v_bar, q_norm, k_norm, v_norm, h;
};

// kTiled*TwoLaunches: the tiled forward's two-launch form (the simple kernel's normalize
// pass, then the aggregate kernel on the saved rows), which the one-launch form replaced.
// kTiledBf16P: the tiled forward reading P as bf16 (P rounded to nearest even on upload).
enum class Kernel { kSimple, kTiled, kTiledPlainBf16, kTiledTwoLaunches, kTiledPlainBf16TwoLaunches, kTiledBf16P };

Outputs RunForward(const Problem& p, Kernel kernel) {
  const ScreeningShape& s = p.shape;
  const int64_t rows = s.batch * s.seq * s.tiles;
  std::vector<DeviceArray<float>> arrays;
  auto array = [&](int64_t n) {
    arrays.emplace_back(Device::kCuda);
    arrays.back().Resize(n);
    return arrays.back().data();
  };
  arrays.reserve(9);
  float* P = array(p.P.size());
  float* U = array(rows * s.d_v);
  const kernels::ScreeningSaved<float> saved{array(rows * s.d_k), array(rows * s.d_k), array(rows * s.d_v),
                                             array(rows),         array(rows),         array(rows),
                                             array(rows * s.d_v)};
  EXPECT_EQ(cudaMemcpy(P, p.P.data(), p.P.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<DeviceArray<uint16_t>> arrays16;
  kernels::cuda::ScreeningScratch scratch;
  switch (kernel) {
    case Kernel::kTiledBf16P:
      kernels::cuda::ScreeningTiledForwardBf16P(s, UploadBf16(p.P, &arrays16), p.tiles.data(), saved, U, &scratch,
                                                nullptr);
      break;
    case Kernel::kSimple:
      kernels::cuda::ScreeningForward(s, P, p.tiles.data(), saved, U, &scratch, nullptr);
      break;
    case Kernel::kTiled:
      kernels::cuda::ScreeningTiledForward(s, P, p.tiles.data(), saved, U, &scratch, nullptr);
      break;
    case Kernel::kTiledPlainBf16:
      kernels::cuda::ScreeningTiledForwardPlainBf16Similarity(s, P, p.tiles.data(), saved, U, &scratch, nullptr);
      break;
    case Kernel::kTiledTwoLaunches:
      kernels::cuda::ScreeningTiledForwardTwoLaunches(s, P, p.tiles.data(), saved, U, &scratch, nullptr);
      break;
    case Kernel::kTiledPlainBf16TwoLaunches:
      kernels::cuda::ScreeningTiledForwardPlainBf16SimilarityTwoLaunches(s, P, p.tiles.data(), saved, U, &scratch,
                                                                         nullptr);
      break;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto host = [](const float* d, int64_t n) {
    std::vector<float> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  };
  return {host(U, rows * s.d_v),          host(saved.q_tilde, rows * s.d_k), host(saved.k_tilde, rows * s.d_k),
          host(saved.v_bar, rows * s.d_v), host(saved.q_norm, rows),          host(saved.k_norm, rows),
          host(saved.v_norm, rows),        host(saved.h, rows * s.d_v)};
}

// Rows (one token of one tile, d_v values) compared with the simple kernel as the op
// tests compare (tests/cuda/cuda_test.h): the worst over rows of ‖got − ref‖ / ‖ref‖,
// with ‖ref‖ floored at 1e-3 · the tile's largest row norm. The floor: a row whose only
// accepted pair is barely accepted (a = 1 − (1 − s)/r of 1e-4, say) carries α = a² ~
// 1e-8, and its relative error 2 δs/(r a) is unbounded as a → 0 at any precision of s,
// while its absolute error stays ~1e-10 of the tile's outputs. Rows that are zero in
// ref (every pair rejected) must be zero in got.
struct RowErrors {
  double worst = 0;
  int64_t rows = 0, zero_rows = 0, zero_mismatch = 0, floored = 0;
};

// tile_of(row) names the tile of row `row`.
template <typename TileOf>
RowErrors CompareRows(const std::vector<float>& ref, const std::vector<float>& got, int64_t d, int64_t tiles,
                      TileOf tile_of) {
  const int64_t rows = static_cast<int64_t>(ref.size()) / d;
  std::vector<double> norm(rows, 0.0), error(rows, 0.0), tile_scale(tiles, 0.0);
  std::vector<bool> got_zero(rows, true);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      const double x = ref[r * d + c], y = got[r * d + c];
      norm[r] += x * x;
      error[r] += (y - x) * (y - x);
      got_zero[r] = got_zero[r] && y == 0;
    }
    norm[r] = std::sqrt(norm[r]);
    error[r] = std::sqrt(error[r]);
    tile_scale[tile_of(r)] = std::max(tile_scale[tile_of(r)], norm[r]);
  }
  RowErrors e;
  for (int64_t r = 0; r < rows; ++r) {
    ++e.rows;
    if (norm[r] == 0) {
      ++e.zero_rows;
      e.zero_mismatch += !got_zero[r];
      continue;
    }
    const double floor = 1e-3 * tile_scale[tile_of(r)];
    e.floored += norm[r] < floor;
    e.worst = std::max(e.worst, std::isnan(error[r]) ? kInf : error[r] / std::max(norm[r], floor));
  }
  return e;
}

// U: rows b·T + i with the tiles side by side; h (saved): rows (b, tile, i).
RowErrors CompareU(const ScreeningShape& s, const std::vector<float>& ref, const std::vector<float>& got) {
  return CompareRows(ref, got, s.d_v, s.tiles, [&](int64_t r) { return r % s.tiles; });
}
RowErrors CompareH(const ScreeningShape& s, const std::vector<float>& ref, const std::vector<float>& got) {
  return CompareRows(ref, got, s.d_v, s.tiles, [&](int64_t r) { return (r / s.seq) % s.tiles; });
}

// Runs both kernels and checks every output; returns the worst row error of U and h. (The
// tiled forward writes no saved q̃, k̃, v̄ or norms: its backward recomputes them from P.)
// expect_accepted: some pair is accepted (else the comparison proves little).
double ExpectTiledMatchesSimple(const Problem& p, const std::string& what, bool expect_accepted = true) {
  const Outputs ref = RunForward(p, Kernel::kSimple), got = RunForward(p, Kernel::kTiled);
  // Rows of U are tokens b·T + i with the tiles side by side; of h, (b, tile, i).
  const RowErrors u = CompareU(p.shape, ref.U, got.U), h = CompareH(p.shape, ref.h, got.h);
  std::fprintf(stderr, "%-40s U: worst row error %.3g (%lld rows, %lld zero, %lld floored)  h: %.3g\n",
               what.c_str(), u.worst, static_cast<long long>(u.rows), static_cast<long long>(u.zero_rows),
               static_cast<long long>(u.floored), h.worst);
  EXPECT_LE(u.worst, kTolerance) << what;
  EXPECT_LE(h.worst, kTolerance) << what;
  EXPECT_EQ(u.zero_mismatch, 0) << what << ": rows the simple kernel zeroes are not zero";
  EXPECT_EQ(h.zero_mismatch, 0) << what;
  if (expect_accepted) EXPECT_LT(u.zero_rows, u.rows) << what << ": nothing was accepted, the comparison proves little";
  return std::max(u.worst, h.worst);
}

// The length grid of the forward and backward tests: random and clustered q, k; T = 1,
// 17, 65, 100, 130; two sequences of seven tiles, w = 1, 1.5, 3.5, 40, 50, T + 7, ∞.
// `check(problem, what, expect_accepted)` compares one problem and returns its worst
// error; the worst over the grid is returned.
double WorstOverTheLengthGrid(const std::function<double(const Problem&, const std::string&, bool)>& check) {
  double worst = 0;
  for (bool clustered : {false, true}) {
    for (int64_t T : {1, 17, 65, 100, 130}) {
      const std::vector<Tile> tiles = {
          {1.0, 0.6, 0.7}, {1.5, 0.9, 1.0}, {3.5, 0.7, 1.3},    {40.0, 0.3, 0.9},
          {50.0, 0.9, 1.0}, {double(T + 7), 0.9, 1.1}, {kInf, 0.5, 0.8}};
      const Problem p(2, T, tiles, clustered, 100 + T);
      const std::string what = std::string(clustered ? "clustered, " : "random, ") + "T = " + std::to_string(T);
      worst = std::max(worst, check(p, what, /*expect_accepted=*/clustered || T > 1));
    }
  }
  return worst;
}

TEST_F(ScreeningTiledTest, MatchesTheSimpleKernelAtLengthsNoBlockDivides) {
  // w = 1 (one key), 1.5, 3.5, 40 and 50 (1 < w < T for most T; MiPE on; 1.5 and 50
  // reach 2 and 50 keys, ≡ 2 mod 16, so a warp's first query reaches exactly one key,
  // the last, of an earlier 16-key step: a warp skip off by one shows), T + 7 (w ≥ T;
  // MiPE on, w < w_th), ∞ (plain causal, MiPE off). T = 65: a last block of one query.
  // Random q, k (most pairs rejected) and clustered ones (most accepted; T = 1 has its
  // one pair accepted in some tiles).
  const double worst = WorstOverTheLengthGrid(ExpectTiledMatchesSimple);
  std::fprintf(stderr, "worst row error over the lengths: %.3g\n", worst);
}

TEST_F(ScreeningTiledTest, MatchesTheSimpleKernelPastSeveralKeyBlocks) {
  // T = 300: five query blocks; w = 40 and 70 start their key walk past block 0, so a
  // range off by one block shows; w = 200 spans several blocks; pos0 far out (MiPE).
  const std::vector<Tile> tiles = {{40.0, 0.4, 1.0}, {70.0, 0.8, 0.6}, {200.0, 0.5, 1.2}};
  const Problem p(1, 300, tiles, /*clustered=*/false, 7, /*pos0=*/70000);
  ExpectTiledMatchesSimple(p, "T = 300, w = 40, 70, 200");
}

TEST_F(ScreeningTiledTest, MatchesTheSimpleKernelAtAcceptanceWidthsNearZeroAndOne) {
  // Clustered q, k: similarities crowd near 1, so r = 0.02 accepts some pairs and
  // rejects others (Trim's slope 2a/r = 100: the similarity must be fp32-accurate).
  const std::vector<Tile> tiles = {{kInf, 0.02, 1.0}, {50.0, 0.02, 0.5}, {kInf, 0.999, 1.0}, {9.0, 0.999, 2.0}};
  for (int64_t T : {17, 130}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 200 + T);
    ExpectTiledMatchesSimple(p, "r = 0.02, 0.999; T = " + std::to_string(T));
  }
}

TEST_F(ScreeningTiledTest, ATileWhoseEveryPairIsRejectedOutputsZero) {
  // Tile 0: r = 1e-3 with random q, k (no similarity above 0.999): Trim rejects every
  // pair, so h = 0 and U = 0 for every token, in both kernels. Tile 1 accepts some.
  const std::vector<Tile> tiles = {{kInf, 1e-3, 1.0}, {20.0, 0.6, 1.0}};
  const Problem p(2, 100, tiles, /*clustered=*/false, 11);
  const Outputs ref = RunForward(p, Kernel::kSimple), got = RunForward(p, Kernel::kTiled);
  const int64_t nt = 2, dv = 64;
  int64_t nonzero_ref = 0, nonzero_got = 0, nonzero_other = 0;
  for (int64_t row = 0; row < 2 * 100; ++row) {
    for (int64_t c = 0; c < dv; ++c) {
      nonzero_ref += ref.U[row * nt * dv + c] != 0.f;
      nonzero_got += got.U[row * nt * dv + c] != 0.f;
      nonzero_other += got.U[row * nt * dv + dv + c] != 0.f;
    }
  }
  EXPECT_EQ(nonzero_ref, 0) << "the simple kernel accepted a pair: the case does not test rejection";
  EXPECT_EQ(nonzero_got, 0);
  EXPECT_GT(nonzero_other, 0);
  ExpectTiledMatchesSimple(p, "every pair of tile 0 rejected");
}

TEST_F(ScreeningTiledTest, PlainBf16SimilarityMissesTheToleranceWhereTheSplitMeetsIt) {
  // What the hi/lo split of q̃, k̃ buys: with one plain bf16 product for q̃·k̃ᵀ the
  // similarity is off by up to ~1e-3, and Trim's slope 2a/r turns that into α off by
  // 2 δs/(r a): tens of % at r = 0.02, and also at r = 0.5 for rows whose pairs have a
  // small a. The split kernel meets the tolerance on the same inputs.
  for (const double r : {0.02, 0.5}) {
    const Problem p(1, 130, {{kInf, r, 1.0}, {40.0, r, 1.0}}, /*clustered=*/r < 0.1, 5);
    const Outputs ref = RunForward(p, Kernel::kSimple), plain = RunForward(p, Kernel::kTiledPlainBf16),
                  split = RunForward(p, Kernel::kTiled);
    const double plain_error = CompareU(p.shape, ref.U, plain.U).worst,
                 split_error = CompareU(p.shape, ref.U, split.U).worst;
    std::fprintf(stderr, "r = %g: worst row error of U, plain bf16 similarity %.3g, hi/lo split %.3g\n", r,
                 plain_error, split_error);
    EXPECT_GT(plain_error, kTolerance) << "r = " << r;
    EXPECT_LE(split_error, kTolerance) << "r = " << r;
  }
}

TEST_F(ScreeningTiledTest, ForwardFusedIsBitIdenticalToTheTwoLaunchForm) {
  // The one-launch forward normalizes the P rows it loads with NormalizeKernel's row
  // arithmetic (screening_rows.cuh): U and h are the two-launch form's bit for bit, for both
  // similarity products (it writes no other saved array: the tiled backward recomputes q̃, k̃,
  // v̄ from P, BackwardFromPIsBitIdenticalToTheSavedRowForm). Far pos0 (MiPE rotations of every angle),
  // T = 37 (one block, cut short) and 300 (several blocks each way), B = 2, windows inside
  // and past a block, w = ∞ (no rotation), r small and near 1.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 23 + T, /*pos0=*/70000);
    for (const bool split : {true, false}) {
      const Outputs fused = RunForward(p, split ? Kernel::kTiled : Kernel::kTiledPlainBf16),
                    two = RunForward(p, split ? Kernel::kTiledTwoLaunches : Kernel::kTiledPlainBf16TwoLaunches);
      const std::string what = "T = " + std::to_string(T) + (split ? ", split" : ", plain bf16");
      // (name, fused form's array, two-launch form's array)
      using Arrays = std::pair<const std::vector<float>*, const std::vector<float>*>;
      const std::vector<std::pair<const char*, Arrays>> arrays = {{"U", {&fused.U, &two.U}}, {"h", {&fused.h, &two.h}}};
      for (const auto& [name, pair] : arrays) {
        const std::vector<float>& got = *pair.first;
        const std::vector<float>& ref = *pair.second;
        ASSERT_EQ(got.size(), ref.size()) << what << ", " << name;
        int64_t nonzero = 0;
        EXPECT_EQ(DifferingElements(got, ref, &nonzero), 0) << what << ": elements of " << name << " differ";
        EXPECT_GT(nonzero, int64_t(got.size() / 2)) << what << ": " << name << " mostly zero, the test proves little";
      }
    }
  }
}

// ---- Backward ----------------------------------------------------------------------

// What one backward writes: dP (q, k, v and g columns of every tile) and the tiles'
// gradients of w, r and scale.
struct Gradients {
  std::vector<float> dP;
  std::vector<uint16_t> dP16;  // kTiledBf16PDP: dP's bf16 bits as the kernels wrote them (dP empty)
  std::vector<float> dh;  // scratch ∂L/∂h [B, tiles, T, d_v] as the backward left it
  std::vector<TileScalarGrads> grads;
};

// ∂L/∂U of a problem: normal, seeded.
std::vector<float> MakeDU(const Problem& p, uint64_t seed = 1) {
  std::vector<float> dU(p.shape.batch * p.shape.seq * p.shape.tiles * p.shape.d_v);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (float& x : dU) x = n(rng);
  return dU;
}

// The tile gradients of the CPU's fp64 forward and backward on the same P and dU: the
// reference of ∂L/∂w, ∂L/∂r, ∂L/∂scale, whose fp32 sums can cancel (MiPE's ∂L/∂rate).
std::vector<TileScalarGrads> Fp64TileGrads(const Problem& p) {
  const ScreeningShape& s = p.shape;
  const int64_t rows = s.batch * s.seq * s.tiles;
  const std::vector<double> P(p.P.begin(), p.P.end());
  const std::vector<float> dU32 = MakeDU(p);
  const std::vector<double> dU(dU32.begin(), dU32.end());
  std::vector<double> U(rows * s.d_v), dP(P.size()), qt(rows * s.d_k), kt(rows * s.d_k), vb(rows * s.d_v), qn(rows),
      kn(rows), vn(rows), h(rows * s.d_v);
  const kernels::ScreeningSaved<double> saved{qt.data(), kt.data(), vb.data(), qn.data(),
                                              kn.data(), vn.data(), h.data()};
  std::vector<TileScalarGrads> grads(s.tiles);
  kernels::cpu::ScreeningForward(s, P.data(), p.tiles.data(), saved, U.data());
  kernels::cpu::ScreeningBackward(s, P.data(), p.tiles.data(), saved, dU.data(), dP.data(), grads.data());
  return grads;
}

// Which backward RunBackward runs: the simple kernels, the tiled one (three launches: the
// output pass in the query pass's prologue, the rows finished in the window passes'
// epilogues, q̃, k̃, v̄ recomputed from P), its form reading the saved q̃, k̃, v̄ and norms,
// its four-launch form (the simple kernel's output pass first) or its five-launch form (that,
// and the rows finished by the simple kernel's NormalizeBackwardKernel).
// kTiledBf16P: kTiled reading P as bf16 (rounded to nearest even on upload); kTiledBf16PDP:
// that, writing dP in bf16 (into Gradients::dP16, preset to 0xffff, a NaN, so that an element
// left unwritten shows).
enum class Backward {
  kSimple, kTiled, kTiledSavedRows, kTiledFourLaunches, kTiledFiveLaunches, kTiledBf16P, kTiledBf16PDP
};

// The simple forward (its saved buffers are the backward's input), then `which` backward
// of MakeDU's dU on the same inputs. For kTiled the saved q̃, k̃, v̄ and norms are overwritten
// with NaN after the forward: the tiled backward reads only saved h, so a read of those shows
// as NaN in dP (every kTiled test checks that).
Gradients RunBackward(const Problem& p, Backward which) {
  const ScreeningShape& s = p.shape;
  const int64_t rows = s.batch * s.seq * s.tiles;
  std::vector<DeviceArray<float>> arrays;
  auto array = [&](int64_t n) {
    arrays.emplace_back(Device::kCuda);
    arrays.back().Resize(n);
    return arrays.back().data();
  };
  arrays.reserve(11);
  float* P = array(p.P.size());
  float* U = array(rows * s.d_v);
  float* dU = array(rows * s.d_v);
  float* dP = array(p.P.size());
  const kernels::ScreeningSaved<float> saved{array(rows * s.d_k), array(rows * s.d_k), array(rows * s.d_v),
                                             array(rows),         array(rows),         array(rows),
                                             array(rows * s.d_v)};
  const std::vector<float> host_dU = MakeDU(p);
  EXPECT_EQ(cudaMemcpy(P, p.P.data(), p.P.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dU, host_dU.data(), host_dU.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  kernels::cuda::ScreeningScratch scratch;
  kernels::cuda::ScreeningForward(s, P, p.tiles.data(), saved, U, &scratch, nullptr);
  Gradients out;
  out.grads.resize(s.tiles);
  std::vector<DeviceArray<uint16_t>> arrays16;
  DeviceArray<uint16_t> dP16(Device::kCuda);
  if (which == Backward::kTiled || which == Backward::kTiledBf16P || which == Backward::kTiledBf16PDP) {
    const std::pair<float*, int64_t> unread[] = {{saved.q_tilde, rows * s.d_k}, {saved.k_tilde, rows * s.d_k},
                                                 {saved.v_bar, rows * s.d_v},   {saved.q_norm, rows},
                                                 {saved.k_norm, rows},          {saved.v_norm, rows}};
    for (const auto& [a, n] : unread) EXPECT_EQ(cudaMemset(a, 0xff, n * sizeof(float)), cudaSuccess);  // NaN
    if (which == Backward::kTiled) {
      kernels::cuda::ScreeningTiledBackward(s, P, p.tiles.data(), saved, dU, dP, out.grads.data(), &scratch, nullptr);
    } else if (which == Backward::kTiledBf16P) {
      kernels::cuda::ScreeningTiledBackwardBf16P(s, UploadBf16(p.P, &arrays16), p.tiles.data(), saved, dU, dP,
                                                 out.grads.data(), &scratch, nullptr);
    } else {
      dP16.Resize(p.P.size());
      EXPECT_EQ(cudaMemset(dP16.data(), 0xff, dP16.size() * 2), cudaSuccess);
      kernels::cuda::ScreeningTiledBackwardBf16PDP(s, UploadBf16(p.P, &arrays16), p.tiles.data(), saved, dU,
                                                   dP16.data(), out.grads.data(), &scratch, nullptr);
    }
  } else if (which == Backward::kTiledSavedRows) {
    kernels::cuda::ScreeningTiledBackwardSavedRows(s, P, p.tiles.data(), saved, dU, dP, out.grads.data(), &scratch,
                                                   nullptr);
  } else if (which == Backward::kTiledFourLaunches) {
    kernels::cuda::ScreeningTiledBackwardFourLaunches(s, P, p.tiles.data(), saved, dU, dP, out.grads.data(), &scratch,
                                                      nullptr);
  } else if (which == Backward::kTiledFiveLaunches) {
    kernels::cuda::ScreeningTiledBackwardFiveLaunches(s, P, p.tiles.data(), saved, dU, dP, out.grads.data(), &scratch,
                                                      nullptr);
  } else {
    kernels::cuda::ScreeningBackward(s, P, p.tiles.data(), saved, dU, dP, out.grads.data(), &scratch, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (which == Backward::kTiledBf16PDP) {
    out.dP16.resize(dP16.size());
    EXPECT_EQ(cudaMemcpy(out.dP16.data(), dP16.data(), dP16.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    out.dP.resize(p.P.size());
    EXPECT_EQ(cudaMemcpy(out.dP.data(), dP, out.dP.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  out.dh.resize(scratch.dh.size());
  EXPECT_EQ(cudaMemcpy(out.dh.data(), scratch.dh.data(), out.dh.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

// Columns [c0, c0 + d) of every tile's block of dP, as rows (token, tile).
std::vector<float> Columns(const ScreeningShape& s, const std::vector<float>& dP, int64_t c0, int64_t d) {
  const int64_t C = s.p_cols();
  std::vector<float> out;
  out.reserve(s.batch * s.seq * s.tiles * d);
  for (int64_t row = 0; row < s.batch * s.seq * s.tiles; ++row) {
    out.insert(out.end(), dP.begin() + row * C + c0, dP.begin() + row * C + c0 + d);
  }
  return out;
}

// Relative error of a tile scalar's gradient against the fp64 one: |got − ref| /
// max(|ref|, 1e-9). The floor: a gradient that is zero in exact arithmetic (∂L/∂w of
// w = 1, whose one key sits at d = 0) comes out ~1e-16 in fp64 and exactly 0 from either
// CUDA kernel (∂L/∂rate summed pair by pair: (i − j) = 0).
double ScalarError(double ref, double got) {
  if (ref == got) return 0;
  return std::isnan(got) ? kInf : std::abs(got - ref) / std::max(std::abs(ref), 1e-9);
}

// Both backwards on the same forward: ∂L/∂q, ∂L/∂k, ∂L/∂v row by row within 1e-2 (rows
// the simple kernel zeroes exactly zero), ∂L/∂g bit for bit (the same output pass), each
// tile's ∂L/∂w, ∂L/∂r, ∂L/∂scale within 1e-2 relative. Returns the worst error.
double ExpectTiledBackwardMatchesSimple(const Problem& p, const std::string& what, bool expect_accepted = true) {
  const ScreeningShape& s = p.shape;
  const Gradients ref = RunBackward(p, Backward::kSimple), got = RunBackward(p, Backward::kTiled);
  auto tile_of = [&](int64_t r) { return r % s.tiles; };
  struct Part {
    const char* name;
    int64_t c0, d;
  };
  double worst = 0;
  std::string line;
  int64_t zero_rows = 0, rows = 0;
  for (const Part& part : {Part{"dq", 0, s.d_k}, Part{"dk", s.d_k, s.d_k}, Part{"dv", 2 * s.d_k, s.d_v}}) {
    const RowErrors e = CompareRows(Columns(s, ref.dP, part.c0, part.d), Columns(s, got.dP, part.c0, part.d), part.d,
                                    s.tiles, tile_of);
    line += std::string(" ") + part.name + " " + std::to_string(e.worst).substr(0, 8);
    EXPECT_LE(e.worst, kTolerance) << what << ": " << part.name;
    EXPECT_EQ(e.zero_mismatch, 0) << what << ": " << part.name << " rows the simple kernel zeroes are not zero";
    worst = std::max(worst, e.worst);
    zero_rows += e.zero_rows;
    rows += e.rows;
  }
  EXPECT_EQ(Columns(s, got.dP, 2 * s.d_k + s.d_v, s.d_v), Columns(s, ref.dP, 2 * s.d_k + s.d_v, s.d_v)) << what;
  const std::vector<TileScalarGrads> exact = Fp64TileGrads(p);
  double worst_scalar = 0, worst_simple = 0;
  for (int64_t t = 0; t < s.tiles; ++t) {
    const TileScalarGrads& x = exact[t];
    const TileScalarGrads& g = got.grads[t];
    const TileScalarGrads& r = ref.grads[t];
    const double ew = ScalarError(x.w, g.w), er = ScalarError(x.r, g.r), es = ScalarError(x.scale, g.scale);
    EXPECT_LE(ew, kTolerance) << what << ", tile " << t << ": dw " << g.w << " vs " << x.w << " (simple " << r.w << ")";
    EXPECT_LE(er, kTolerance) << what << ", tile " << t << ": dr " << g.r << " vs " << x.r << " (simple " << r.r << ")";
    EXPECT_LE(es, kTolerance) << what << ", tile " << t << ": dscale " << g.scale << " vs " << x.scale;
    worst_scalar = std::max({worst_scalar, ew, er, es});
    worst_simple = std::max({worst_simple, ScalarError(x.w, r.w), ScalarError(x.r, r.r), ScalarError(x.scale, r.scale)});
  }
  std::fprintf(stderr, "%-40s backward worst row error:%s  tile scalars %.3g (the simple kernel's %.3g)\n",
               what.c_str(), line.c_str(), worst_scalar, worst_simple);
  if (expect_accepted) EXPECT_LT(zero_rows, rows) << what << ": no gradient flowed, the comparison proves little";
  return std::max(worst, worst_scalar);
}

TEST_F(ScreeningTiledTest, BackwardMatchesTheSimpleKernelAtLengthsNoBlockDivides) {
  // The forward test's lengths and windows (see there): T = 1 … 130, w = 1 … ∞, random
  // and clustered q, k, two sequences of seven tiles.
  const double worst = WorstOverTheLengthGrid(ExpectTiledBackwardMatchesSimple);
  std::fprintf(stderr, "backward: worst error over the lengths: %.3g\n", worst);
}

TEST_F(ScreeningTiledTest, BackwardMatchesTheSimpleKernelPastSeveralKeyBlocks) {
  // T = 300: five blocks of queries and of keys; w = 40, 70 and 200 make the key pass's
  // query walk end inside a later block; pos0 far out (MiPE's rate gradient).
  const std::vector<Tile> tiles = {{40.0, 0.4, 1.0}, {70.0, 0.8, 0.6}, {200.0, 0.5, 1.2}};
  const Problem p(1, 300, tiles, /*clustered=*/false, 7, /*pos0=*/70000);
  ExpectTiledBackwardMatchesSimple(p, "T = 300, w = 40, 70, 200");
}

TEST_F(ScreeningTiledTest, TheSimpleKernelsWindowGradientMatchesFp64NearAndFarFromPositionZero) {
  // The simple kernel's ∂L/∂w, whose MiPE part (φ = pos · rate) depends on relative
  // positions only, against the CPU's fp64: summed per row, pos_i (q̃_i × ∂L/∂q̃_i) over
  // queries plus pos_j (…) over keys, its halves grew with pos0 and cancelled, 3.7e-3 off
  // at pos0 = 70000; summed pair by pair as the tiled kernel's, (i − j)(q̃_i[0] k̃_j[1] −
  // q̃_i[1] k̃_j[0]), it is as exact far out as near 0. The tiles of the test above (MiPE on
  // at w = 40, 70, 200 < w_th = 256); ∂L/∂w, ∂L/∂r, ∂L/∂scale within 1e-4 relative.
  const std::vector<Tile> tiles = {{40.0, 0.4, 1.0}, {70.0, 0.8, 0.6}, {200.0, 0.5, 1.2}};
  for (const int64_t pos0 : {int64_t{3}, int64_t{70000}}) {
    const Problem p(1, 300, tiles, /*clustered=*/false, 7, pos0);
    const Gradients simple = RunBackward(p, Backward::kSimple);
    const std::vector<TileScalarGrads> exact = Fp64TileGrads(p);
    for (int64_t t = 0; t < p.shape.tiles; ++t) {
      const TileScalarGrads& x = exact[t];
      const TileScalarGrads& g = simple.grads[t];
      std::fprintf(stderr, "pos0 = %lld, tile %lld: dw %.9g (fp64 %.9g, relative %.3g), dr %.3g, dscale %.3g\n",
                   static_cast<long long>(pos0), static_cast<long long>(t), g.w, x.w, ScalarError(x.w, g.w),
                   ScalarError(x.r, g.r), ScalarError(x.scale, g.scale));
      EXPECT_LE(ScalarError(x.w, g.w), 1e-4) << "pos0 " << pos0 << ", tile " << t << ": dw " << g.w << " vs " << x.w;
      EXPECT_LE(ScalarError(x.r, g.r), 1e-4) << "pos0 " << pos0 << ", tile " << t;
      EXPECT_LE(ScalarError(x.scale, g.scale), 1e-4) << "pos0 " << pos0 << ", tile " << t;
    }
  }
}

TEST_F(ScreeningTiledTest, BackwardMatchesTheSimpleKernelAtAcceptanceWidthsNearZeroAndOne) {
  const std::vector<Tile> tiles = {{kInf, 0.02, 1.0}, {50.0, 0.02, 0.5}, {kInf, 0.999, 1.0}, {9.0, 0.999, 2.0}};
  for (int64_t T : {17, 130}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 200 + T);
    ExpectTiledBackwardMatchesSimple(p, "r = 0.02, 0.999; T = " + std::to_string(T));
  }
}

TEST_F(ScreeningTiledTest, BackwardOfATileWhoseEveryPairIsRejectedIsZeroWhereTheSimpleOnesIs) {
  // Tile 0 rejects every pair (see the forward's test): no gradient reaches its q, k, v,
  // w or r, in either kernel; tile 1 accepts some.
  const std::vector<Tile> tiles = {{kInf, 1e-3, 1.0}, {20.0, 0.6, 1.0}};
  const Problem p(2, 100, tiles, /*clustered=*/false, 11);
  const Gradients ref = RunBackward(p, Backward::kSimple), got = RunBackward(p, Backward::kTiled);
  const int64_t C = p.shape.p_cols();
  int64_t nonzero_ref = 0, nonzero_got = 0, nonzero_other = 0;
  for (int64_t row = 0; row < 2 * 100; ++row) {
    for (int64_t c = 0; c < 2 * 16 + 64; ++c) {
      nonzero_ref += ref.dP[row * 2 * C + c] != 0.f;
      nonzero_got += got.dP[row * 2 * C + c] != 0.f;
      nonzero_other += got.dP[row * 2 * C + C + c] != 0.f;
    }
  }
  EXPECT_EQ(nonzero_ref, 0) << "the simple kernel passed a gradient: the case does not test rejection";
  EXPECT_EQ(nonzero_got, 0);
  EXPECT_GT(nonzero_other, 0);
  EXPECT_EQ(got.grads[0].w, 0.0);
  EXPECT_EQ(got.grads[0].r, 0.0);
  ExpectTiledBackwardMatchesSimple(p, "every pair of tile 0 rejected");
}

TEST_F(ScreeningTiledTest, BackwardIsBitIdenticalBetweenRuns) {
  // No float atomics: per-block partial sums reduced in a fixed order. B = 2, three
  // tiles, T = 300 (several blocks each way).
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.9, 1.1}};
  const Problem p(2, 300, tiles, /*clustered=*/true, 13);
  const Gradients first = RunBackward(p, Backward::kTiled), second = RunBackward(p, Backward::kTiled);
  ASSERT_EQ(first.dP.size(), second.dP.size());
  EXPECT_EQ(std::memcmp(first.dP.data(), second.dP.data(), first.dP.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(first.grads.data(), second.grads.data(), first.grads.size() * sizeof(TileScalarGrads)), 0);
}

TEST_F(ScreeningTiledTest, BackwardWithFusedEpiloguesIsBitIdenticalToTheFiveLaunchForm) {
  // The query and key passes' epilogues run NormalizeBackwardKernel's row arithmetic on
  // the same fp32 rows: dP (every column) and the tile gradients are the five-launch
  // form's bit for bit. Far pos0 (MiPE rotations of every angle), T = 300 (several blocks
  // each way, a last block cut short), B = 2, windows inside and past a block, r small.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 17 + T, /*pos0=*/70000);
    const Gradients fused = RunBackward(p, Backward::kTiled), five = RunBackward(p, Backward::kTiledFiveLaunches);
    ASSERT_EQ(fused.dP.size(), five.dP.size());
    int64_t nonzero = 0;
    EXPECT_EQ(DifferingElements(fused.dP, five.dP, &nonzero), 0) << "T = " << T << ": elements of dP differ";
    EXPECT_GT(nonzero, int64_t(fused.dP.size() / 2)) << "T = " << T << ": too little gradient flowed to prove much";
    EXPECT_EQ(std::memcmp(fused.grads.data(), five.grads.data(), fused.grads.size() * sizeof(TileScalarGrads)), 0)
        << "T = " << T;
  }
}

TEST_F(ScreeningTiledTest, BackwardWithFusedOutputPassIsBitIdenticalToTheFourLaunchForm) {
  // The query pass's prologue runs OutputBackwardKernel's row arithmetic (screening_rows.cuh)
  // on the same inputs and stages its ∂L/∂h from registers as the four-launch form stages the
  // rows it read back: dP (every column, the g columns the prologue's), scratch ∂L/∂h (the key
  // pass's input) and the tile gradients (the scale parts the prologue's) are the four-launch
  // form's bit for bit. Shapes as the five-launch test's: T = 37 (one block cut short) and 300.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 17 + T, /*pos0=*/70000);
    const Gradients fused = RunBackward(p, Backward::kTiled), four = RunBackward(p, Backward::kTiledFourLaunches);
    ASSERT_EQ(fused.dP.size(), four.dP.size());
    ASSERT_EQ(fused.dh.size(), four.dh.size());
    ASSERT_EQ(four.dh.size(), size_t(p.shape.batch * p.shape.tiles * T * p.shape.d_v));
    int64_t nonzero_dh = 0;
    EXPECT_EQ(DifferingElements(fused.dP, four.dP), 0) << "T = " << T << ": elements of dP differ";
    EXPECT_EQ(DifferingElements(fused.dh, four.dh, &nonzero_dh), 0)
        << "T = " << T << ": elements of scratch ∂L/∂h differ";
    EXPECT_GT(nonzero_dh, int64_t(four.dh.size() * 9 / 10)) << "T = " << T << ": ∂L/∂h mostly zero proves little";
    EXPECT_EQ(std::memcmp(fused.grads.data(), four.grads.data(), fused.grads.size() * sizeof(TileScalarGrads)), 0)
        << "T = " << T;
    for (size_t t = 0; t < tiles.size(); ++t) EXPECT_NE(four.grads[t].scale, 0.0) << "tile " << t;
  }
}

TEST_F(ScreeningTiledTest, BackwardFromPIsBitIdenticalToTheSavedRowForm) {
  // The query and key passes recompute q̃, k̃, v̄ and their norms from P's q, k, v columns with
  // the forward's row arithmetic (screening_rows.cuh: UnitRotateRow, RowNorm, UnitFactor), the
  // MiPE rate term's fp32 q̃_i[0..1], k̃_j[0..1] from the staged rows' padding: dP (every
  // column), scratch ∂L/∂h and the tile gradients are the saved-row form's bit for bit, the
  // saved rows being NaN for the recomputing form (RunBackward). Bit identity shown on the
  // emulated device. Shapes as the five-launch test's: T = 37 (one block cut short) and 300
  // (several blocks each way), B = 2, pos0 = 70000, windows inside and past a block, w = ∞.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p(2, T, tiles, /*clustered=*/true, 17 + T, /*pos0=*/70000);
    const Gradients fromP = RunBackward(p, Backward::kTiled), saved = RunBackward(p, Backward::kTiledSavedRows);
    ASSERT_EQ(fromP.dP.size(), saved.dP.size());
    ASSERT_EQ(fromP.dh.size(), saved.dh.size());
    const int64_t C = p.shape.p_cols();
    // Differing elements per column group (q, k, v, g), then of ∂L/∂h.
    int64_t differing[4] = {0, 0, 0, 0}, nonzero = 0;
    for (size_t e = 0; e < fromP.dP.size(); ++e) {
      const int64_t c = int64_t(e) % C;
      const int group = c < p.shape.d_k ? 0 : c < 2 * p.shape.d_k ? 1 : c < 2 * p.shape.d_k + p.shape.d_v ? 2 : 3;
      differing[group] += std::memcmp(&fromP.dP[e], &saved.dP[e], sizeof(float)) != 0;
      nonzero += saved.dP[e] != 0.f;
    }
    const char* names[4] = {"q", "k", "v", "g"};
    for (int group = 0; group < 4; ++group) {
      EXPECT_EQ(differing[group], 0) << "T = " << T << ": elements of dP's " << names[group] << " columns differ";
    }
    EXPECT_EQ(DifferingElements(fromP.dh, saved.dh), 0) << "T = " << T << ": elements of scratch ∂L/∂h differ";
    EXPECT_GT(nonzero, int64_t(saved.dP.size() / 2)) << "T = " << T << ": too little gradient flowed to prove much";
    for (size_t t = 0; t < tiles.size(); ++t) {
      const TileScalarGrads &a = fromP.grads[t], &b = saved.grads[t];
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0)
          << "T = " << T << ", tile " << t << ": dw " << a.w << " vs " << b.w << ", dr " << a.r << " vs " << b.r
          << ", dscale " << a.scale << " vs " << b.scale;
    }
  }
}

TEST_F(ScreeningTiledTest, Bf16PIsTheFp32PathOnTheRoundedPBitForBit) {
  // Issue 42: the CUDA table's bf16 GEMM writes P in bf16, and the tiled kernels read it so
  // (LoadRow4, RowValue): widening a bf16 value is exact, so on P rounded to bf16 (what the
  // fp32 path's RoundToCompute leaves) U, h, dP (every column), scratch ∂L/∂h and the tile
  // gradients equal the fp32-P kernels' bit for bit. Shapes as the fused-form tests': T = 37
  // (one block cut short) and 300 (several blocks each way), B = 2, pos0 = 70000, windows
  // inside and past a block, w = ∞, r small and near 1.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p = RoundedToBf16(Problem(2, T, tiles, /*clustered=*/true, 31 + T, /*pos0=*/70000));
    const Outputs wide = RunForward(p, Kernel::kTiled), narrow = RunForward(p, Kernel::kTiledBf16P);
    int64_t nonzero_u = 0, nonzero_h = 0, nonzero_dp = 0, nonzero_dh = 0;
    EXPECT_EQ(DifferingElements(narrow.U, wide.U, &nonzero_u), 0) << "T = " << T << ": elements of U differ";
    EXPECT_EQ(DifferingElements(narrow.h, wide.h, &nonzero_h), 0) << "T = " << T << ": elements of h differ";
    EXPECT_GT(nonzero_u, int64_t(wide.U.size() / 2)) << "T = " << T << ": U mostly zero proves little";
    const Gradients gw = RunBackward(p, Backward::kTiled), gn = RunBackward(p, Backward::kTiledBf16P);
    EXPECT_EQ(DifferingElements(gn.dP, gw.dP, &nonzero_dp), 0) << "T = " << T << ": elements of dP differ";
    EXPECT_EQ(DifferingElements(gn.dh, gw.dh, &nonzero_dh), 0) << "T = " << T << ": elements of scratch ∂L/∂h differ";
    EXPECT_GT(nonzero_dp, int64_t(gw.dP.size() / 2)) << "T = " << T << ": too little gradient flowed to prove much";
    ASSERT_EQ(gn.grads.size(), gw.grads.size());
    EXPECT_EQ(std::memcmp(gn.grads.data(), gw.grads.data(), gw.grads.size() * sizeof(TileScalarGrads)), 0)
        << "T = " << T;
  }
}

TEST_F(ScreeningTiledTest, Bf16UOperandIsTheFp32UPackRoundedBitForBit) {
  // Issue 42: on the CUDA table's bf16 tiled path the forward's epilogue writes U as W_O's
  // bf16 GEMM operand itself (ScreeningForwardOperand: ScreeningTiledForwardBf16PU). Against
  // the same table with that off (screening_u_operand = false: ScreeningForward's fp32 U, then
  // PackRounded's RoundPackKernel) the operand's bf16 bits and h are equal bit for bit, and the
  // fp32 U is left as it was (only the operand is read after the call). Shapes as the bf16-P
  // test's: T = 37 and 300, B = 2, pos0 = 70000, four windows.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  KernelOptions options{.precision = Precision::kBf16, .screening_kernel = ScreeningKernel::kTiled};
  auto fused = kernels::cuda::MakeCudaKernelTable(options);
  options.screening_u_operand = false;
  auto packed = kernels::cuda::MakeCudaKernelTable(options);
  ASSERT_TRUE(fused.ok() && packed.ok()) << fused.status() << " " << packed.status();
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    Problem p = RoundedToBf16(Problem(2, T, tiles, /*clustered=*/true, 41 + T, /*pos0=*/70000));
    p.shape.p_bf16 = true;
    const ScreeningShape& s = p.shape;
    const int64_t rows = s.batch * s.seq * s.tiles, n = rows * s.d_v;
    std::vector<DeviceArray<uint16_t>> arrays16;
    const float* P16 = reinterpret_cast<const float*>(UploadBf16(p.P, &arrays16));  // the table's P when p_bf16
    struct Run {
      std::vector<float> U, h;
      std::vector<uint16_t> op;
      bool values_null = false;
    };
    auto run = [&](kernels::KernelTable<float>& table) {
      std::vector<DeviceArray<float>> arrays;
      auto array = [&](int64_t count) {
        arrays.emplace_back(Device::kCuda);
        arrays.back().Resize(count);
        EXPECT_EQ(cudaMemset(arrays.back().data(), 0x7f, count * sizeof(float)), cudaSuccess);  // 3.4e38: unwritten
        return arrays.back().data();
      };
      arrays.reserve(8);
      float* U = array(n);
      const kernels::ScreeningSaved<float> saved{array(rows * s.d_k), array(rows * s.d_k), array(rows * s.d_v),
                                                 array(rows),         array(rows),         array(rows),
                                                 array(rows * s.d_v)};
      kernels::PackedOperand<float> u_op;
      table.ScreeningForwardOperand(Precision::kBf16, s, P16, p.tiles.data(), saved, U, &u_op);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      Run r{std::vector<float>(n), std::vector<float>(n), std::vector<uint16_t>(n), u_op.values == nullptr};
      EXPECT_EQ(u_op.precision, Precision::kBf16);
      EXPECT_EQ(u_op.size, n);
      EXPECT_EQ(u_op.half.size(), n);
      EXPECT_EQ(cudaMemcpy(r.U.data(), U, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(r.h.data(), saved.h, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(r.op.data(), u_op.half.data(), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      return r;
    };
    const Run want = run(**packed), got = run(**fused);
    int64_t differ = 0, nonzero = 0, nonzero_h = 0;
    for (int64_t e = 0; e < n; ++e) {
      differ += got.op[e] != want.op[e];
      nonzero += (want.op[e] & 0x7fff) != 0;
    }
    EXPECT_EQ(differ, 0) << "T = " << T << ": elements of U's bf16 operand differ";
    EXPECT_GT(nonzero, n / 2) << "T = " << T << ": U mostly zero proves little";
    EXPECT_EQ(DifferingElements(got.h, want.h, &nonzero_h), 0) << "T = " << T << ": elements of h differ";
    // The reference's fp32 U holds the operand's values (PackRounded rounds it in place); the
    // fused table's is untouched.
    int64_t widened = 0, untouched = 0;
    for (int64_t e = 0; e < n; ++e) {
      const uint32_t bits = uint32_t(want.op[e]) << 16;
      widened += std::memcmp(&want.U[e], &bits, 4) == 0;
      uint32_t fill;
      std::memcpy(&fill, &got.U[e], 4);
      untouched += fill == 0x7f7f7f7fu;
    }
    EXPECT_EQ(widened, n) << "T = " << T;
    EXPECT_EQ(untouched, n) << "T = " << T << ": the fused path wrote the fp32 U";
    EXPECT_TRUE(got.values_null);
  }
}

TEST_F(ScreeningTiledTest, Bf16DPIsTheFp32DPRoundedToNearestEvenBitForBit) {
  // Issue 42: on the CUDA table's bf16 path the query and key passes write ∂L/∂P straight as
  // the projections' bf16 GEMM operand (ScreeningTiledBackwardBf16PDP), rounding each fp32
  // value once as they store it (RowStore): every element's bits are those of the fp32-dP
  // kernel's value rounded to nearest even (what the pack of the fp32 ∂L/∂P made, PackAsGemm;
  // model_cuda_test checks that pack in a whole step), and scratch ∂L/∂h and the tile
  // gradients are the same bits. dP16 starts as NaN (0xffff), so an element the passes leave
  // unwritten differs. Shapes as Bf16PIsTheFp32PathOnTheRoundedPBitForBit's.
  const std::vector<Tile> tiles = {{40.0, 0.5, 1.0}, {kInf, 0.7, 0.8}, {130.0, 0.02, 1.1}, {9.0, 0.999, 2.0}};
  for (const int64_t T : {int64_t{37}, int64_t{300}}) {
    const Problem p = RoundedToBf16(Problem(2, T, tiles, /*clustered=*/true, 31 + T, /*pos0=*/70000));
    const Gradients wide = RunBackward(p, Backward::kTiledBf16P), narrow = RunBackward(p, Backward::kTiledBf16PDP);
    const std::vector<uint16_t> ref = Bf16Bits(wide.dP);
    ASSERT_EQ(narrow.dP16.size(), ref.size());
    int64_t differ = 0, nonzero = 0, first = -1;
    for (size_t e = 0; e < ref.size(); ++e) {
      const bool d = narrow.dP16[e] != ref[e];
      if (d && first < 0) first = int64_t(e);
      differ += d;
      nonzero += (ref[e] & 0x7fff) != 0;
    }
    EXPECT_EQ(differ, 0) << "T = " << T << ": elements of bf16 dP differ from the rounded fp32 dP (first at "
                         << first << " of " << ref.size() << ")";
    EXPECT_GT(nonzero, int64_t(ref.size() / 2)) << "T = " << T << ": too little gradient flowed to prove much";
    int64_t nonzero_dh = 0;
    EXPECT_EQ(DifferingElements(narrow.dh, wide.dh, &nonzero_dh), 0) << "T = " << T << ": scratch ∂L/∂h differs";
    EXPECT_GT(nonzero_dh, int64_t(wide.dh.size() / 2)) << "T = " << T;
    ASSERT_EQ(narrow.grads.size(), wide.grads.size());
    EXPECT_EQ(std::memcmp(narrow.grads.data(), wide.grads.data(), wide.grads.size() * sizeof(TileScalarGrads)), 0)
        << "T = " << T << ": the tile gradients differ";
  }
}

}  // namespace
}  // namespace multiscreen

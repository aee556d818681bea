// The tiled tensor-core softmax attention (kernels/cuda/attention_tiled.h) against the
// simple CUDA kernel (kernels/cuda/attention.h, its fp32 oracle) and the CPU's fp64
// kernel (kernels/cpu/attention.h) on the same fp32 inputs: o and lse of the forward,
// dq, dk, dv and d_scale of the backward, each kernel's backward after its own forward
// (as the model runs them). Rows of o, dq, dk, dv within 1e-2 relative (‖Δ‖/‖ref‖ per
// row of d_h, small rows floored: WorstRowErrorPerHead), lse within 1e-2 absolute
// (p = e^{z − lse} within 1 %), d_scale within 1e-2 relative per head. Lengths that are
// no multiple of the 64-row blocks (1, 37, 64, 65, 130, 200), two sequences, heads whose
// scales make the softmax typical (1/√d_h), peaked (1: scores of standard deviation 8)
// and flat (0.005). RoPE fused (a RopeTable; plain and YaRN) against the simple kernel on
// turned copies and the CPU's fp64 RoPE then attention, dq and dk turned back. What the
// hi/lo split buys over plain bf16; both passes bit-identical between runs; other kinds
// and widths the simple kernel's results bit for bit; what selects the kernel. Label cuda: on the emulated device (race, bounds, initialization
// and barrier checks) in CI; on a GPU in scripts/gpu_check; skipped, visibly, elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/cuda_transformer_kernels.h"
#include "kernels/cuda/rope.h"
#include "kernels/device_array.h"
#include "tests/cuda/cuda_test.h"

namespace multiscreen {
namespace {

using kernels::cpu::AttentionShape;
using kernels::cuda::AttentionOperands;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTolerance = 1e-2;  // bf16 operands, fp32 accumulation (issue 29)

using AttentionTiledTest = CudaTest;  // skips, saying so, where no CUDA device is visible

// The three heads' scales: typical (1/√d_h), peaked, flat.
const std::vector<double> kScales = {0.125, 1.0, 0.005};

// One attention call's inputs: q, k, v, ∂L/∂o standard normal, seeded; with `rope`, q and
// k are the unturned rows of an attention of RoPE(q), RoPE(k) with these frequencies.
struct Problem {
  AttentionShape shape;
  std::vector<double> scale;
  Floats q, k, v, d_o;
  std::optional<kernels::cpu::RopeScaling> rope;
  Problem(int64_t B, int64_t T, std::vector<double> scales, uint64_t seed, int64_t d_h = 64,
          AttentionKind kind = AttentionKind::kSoftmax)
      : scale(std::move(scales)) {
    const int64_t H = static_cast<int64_t>(scale.size());
    shape = {B, T, H, d_h, kind};
    const int64_t n = B * T * H * d_h;
    q = Random(n, seed);
    k = Random(n, seed + 1);
    v = Random(n, seed + 2);
    d_o = Random(n, seed + 3);
  }
  int64_t size() const { return shape.batch * shape.seq * shape.heads * shape.d_h; }
  int64_t rows() const { return shape.batch * shape.seq * shape.heads; }
};

enum class Kernel { kSimple, kTiled, kTiledPlain };

// What a forward and the backward after it write.
struct Outputs {
  Floats o, dq, dk, dv;
  std::vector<double> lse, d_scale;
};

// The kernel's forward, then (with backward) its backward on the forward's o and lse.
Outputs RunAttention(const Problem& p, Kernel kernel, bool backward = true) {
  const int64_t n = p.size();
  std::vector<DeviceArray<float>> arrays;
  arrays.reserve(8);
  auto array = [&](const Floats* host) {
    arrays.emplace_back(Device::kCuda);
    arrays.back().Resize(n);
    if (host != nullptr) arrays.back().CopyFromHost(host->data());
    return arrays.back().data();
  };
  float *q = array(&p.q), *k = array(&p.k), *v = array(&p.v), *d_o = array(&p.d_o), *o = array(nullptr),
        *dq = array(nullptr), *dk = array(nullptr), *dv = array(nullptr);
  kernels::cuda::AttentionScratch scratch;
  Outputs out;
  out.lse.resize(p.rows());
  out.d_scale.resize(p.shape.heads);
  const AttentionOperands operands = kernel == Kernel::kTiledPlain ? AttentionOperands::kPlain : AttentionOperands::kSplit;
  // RoPE: the tiled kernels fuse it (a RopeTable); the simple one attends over turned
  // copies, and its dq, dk are turned back after, as the CUDA Transformer kernels do.
  const AttentionShape& s = p.shape;
  const int64_t ld = s.heads * s.d_h;
  DeviceArray<float> table(Device::kCuda), q_turned(Device::kCuda), k_turned(Device::kCuda);
  const float* rope = nullptr;
  const float *q_in = q, *k_in = k;
  if (p.rope && kernel == Kernel::kSimple) {
    q_turned.Resize(n);
    k_turned.Resize(n);
    kernels::cuda::RopePair(q, k, q_turned.data(), k_turned.data(), ld, s.batch, s.seq, s.heads, s.d_h, false,
                            nullptr, *p.rope);
    q_in = q_turned.data();
    k_in = k_turned.data();
  } else if (p.rope) {
    table.Resize(s.seq * s.d_h);
    kernels::cuda::RopeTable(table.data(), s.seq, s.d_h, nullptr, *p.rope);
    rope = table.data();
  }
  if (kernel == Kernel::kSimple) {
    kernels::cuda::AttentionForward(s, q_in, k_in, v, p.scale.data(), o, out.lse.data(), &scratch, nullptr);
  } else {
    kernels::cuda::AttentionTiledForward(s, q_in, k_in, v, p.scale.data(), o, out.lse.data(), &scratch, nullptr,
                                         operands, rope);
  }
  if (backward) {
    if (kernel == Kernel::kSimple) {
      kernels::cuda::AttentionBackward(s, q_in, k_in, v, o, out.lse.data(), d_o, p.scale.data(), dq, dk, dv,
                                       out.d_scale.data(), &scratch, nullptr);
      if (p.rope) {
        kernels::cuda::RopePair(dq, dk, dq, dk, ld, s.batch, s.seq, s.heads, s.d_h, true, nullptr, *p.rope);
      }
    } else {
      kernels::cuda::AttentionTiledBackward(s, q_in, k_in, v, o, out.lse.data(), d_o, p.scale.data(), dq, dk, dv,
                                            out.d_scale.data(), &scratch, nullptr, operands, rope);
    }
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.o = arrays[4].ToHost();
  if (backward) {
    out.dq = arrays[5].ToHost();
    out.dk = arrays[6].ToHost();
    out.dv = arrays[7].ToHost();
  }
  return out;
}

// The CPU's fp64 forward and backward on the same inputs (RoPE: q and k turned in fp64
// first, dq and dk turned back after).
struct Exact {
  std::vector<double> o, dq, dk, dv, lse, d_scale;
};
Exact RunCpu(const Problem& p) {
  auto wide = [](const Floats& x) { return std::vector<double>(x.begin(), x.end()); };
  std::vector<double> q = wide(p.q), k = wide(p.k);
  const std::vector<double> v = wide(p.v), d_o = wide(p.d_o);
  const AttentionShape& s = p.shape;
  const int64_t ld = s.heads * s.d_h;
  if (p.rope) {
    kernels::cpu::Rope(q.data(), ld, s.batch, s.seq, s.heads, s.d_h, false, 0, *p.rope);
    kernels::cpu::Rope(k.data(), ld, s.batch, s.seq, s.heads, s.d_h, false, 0, *p.rope);
  }
  Exact e;
  e.o.resize(p.size());
  e.dq.resize(p.size());
  e.dk.resize(p.size());
  e.dv.resize(p.size());
  e.lse.resize(p.rows());
  e.d_scale.resize(p.shape.heads);
  kernels::cpu::AttentionForward<double>(p.shape, q.data(), k.data(), v.data(), p.scale.data(), e.o.data(),
                                         e.lse.data());
  kernels::cpu::AttentionBackward<double>(p.shape, q.data(), k.data(), v.data(), e.o.data(), e.lse.data(),
                                          d_o.data(), p.scale.data(), e.dq.data(), e.dk.data(), e.dv.data(),
                                          e.d_scale.data());
  if (p.rope) {
    kernels::cpu::Rope(e.dq.data(), ld, s.batch, s.seq, s.heads, s.d_h, true, 0, *p.rope);
    kernels::cpu::Rope(e.dk.data(), ld, s.batch, s.seq, s.heads, s.d_h, true, 0, *p.rope);
  }
  return e;
}

// The worst over rows (one token of one head, d_h values) of ‖got − ref‖/‖ref‖, per head
// (the three scales differ in kind), with ‖ref‖ floored at `floor` · the head's largest
// row norm; infinity for a NaN. The floors: o and ∂v rows are weighted sums with weights
// p ≥ 0 and are held relative to themselves down to 1e-3 of the head's largest row.
// ∂q and ∂k rows are sums of ds = p (dp − D), and in a head whose softmax is nearly
// one-hot a row's ds is a difference of dp and D that agree to 4 or 5 digits (measured:
// 1 − p = 4e-5, dp − D = 1.5e-4 of dp ≈ −4.9): computed from split bf16 operands (about 17
// bits) and D from the forward's o, such a row of ∂q (2e-5 of the head's largest) is off
// by ~1e-5 of the head's largest, while the simple kernel sums in fp64. So ∂q and ∂k rows
// are floored at 1e-2 of the head's largest: rows below it are held to 1e-4 of it.
template <typename Ref>
std::vector<double> WorstRowErrorPerHead(const AttentionShape& s, const std::vector<Ref>& ref, const Floats& got,
                                         double floor) {
  const int64_t rows = s.batch * s.seq;
  std::vector<double> norm(rows * s.heads), error(rows * s.heads), largest(s.heads, 0.0), worst(s.heads, 0.0);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t h = 0; h < s.heads; ++h) {
      double n = 0, e = 0;
      for (int64_t c = 0; c < s.d_h; ++c) {
        const int64_t x = row * s.heads * s.d_h + h * s.d_h + c;
        n += double(ref[x]) * double(ref[x]);
        e += (double(got[x]) - double(ref[x])) * (double(got[x]) - double(ref[x]));
      }
      norm[row * s.heads + h] = std::sqrt(n);
      error[row * s.heads + h] = std::sqrt(e);
      largest[h] = std::max(largest[h], std::sqrt(n));
    }
  }
  for (int64_t r = 0; r < rows * s.heads; ++r) {
    const int64_t h = r % s.heads;
    const double e = std::isnan(error[r]) ? kInf : error[r] / std::max(norm[r], floor * largest[h]);
    worst[h] = std::max(worst[h], e);
  }
  return worst;
}

// The worst |got − ref| of lse per head (rows [B, heads, T]): p = e^{z − lse} within that
// fraction.
std::vector<double> WorstLseErrorPerHead(const AttentionShape& s, const std::vector<double>& ref,
                                         const std::vector<double>& got) {
  std::vector<double> worst(s.heads, 0.0);
  for (int64_t r = 0; r < static_cast<int64_t>(ref.size()); ++r) {
    const int64_t h = (r / s.seq) % s.heads;
    const double e = std::abs(got[r] - ref[r]);
    worst[h] = std::max(worst[h], std::isnan(e) ? kInf : e);
  }
  return worst;
}

// |got − ref| / |ref| per head.
std::vector<double> ScalarErrorPerHead(const std::vector<double>& ref, const std::vector<double>& got) {
  std::vector<double> e;
  for (size_t h = 0; h < ref.size(); ++h) {
    e.push_back(std::isnan(got[h]) ? kInf : std::abs(got[h] - ref[h]) / std::abs(ref[h]));
  }
  return e;
}

double Max(const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); }

// "a/b/c": one error per head.
std::string PerHead(const std::vector<double>& x) {
  std::string out;
  char buf[32];
  for (double e : x) {
    std::snprintf(buf, sizeof(buf), "%s%.2g", out.empty() ? "" : "/", e);
    out += buf;
  }
  return out;
}

// Every output of `kernel` against the simple kernel's and the CPU's fp64 ones: the
// worst error of each, per head (see WorstRowErrorPerHead, WorstLseErrorPerHead).
struct Errors {
  const char* name;
  std::vector<double> simple, fp64;
  double worst() const { return std::max(Max(simple), Max(fp64)); }
};
std::vector<Errors> Compare(const Problem& p, Kernel kernel) {
  const AttentionShape& s = p.shape;
  const Outputs ref = RunAttention(p, Kernel::kSimple), got = RunAttention(p, kernel);
  const Exact exact = RunCpu(p);
  return {
      {"o", WorstRowErrorPerHead(s, ref.o, got.o, 1e-3), WorstRowErrorPerHead(s, exact.o, got.o, 1e-3)},
      {"lse", WorstLseErrorPerHead(s, ref.lse, got.lse), WorstLseErrorPerHead(s, exact.lse, got.lse)},
      {"dq", WorstRowErrorPerHead(s, ref.dq, got.dq, 1e-2), WorstRowErrorPerHead(s, exact.dq, got.dq, 1e-2)},
      {"dk", WorstRowErrorPerHead(s, ref.dk, got.dk, 1e-2), WorstRowErrorPerHead(s, exact.dk, got.dk, 1e-2)},
      {"dv", WorstRowErrorPerHead(s, ref.dv, got.dv, 1e-3), WorstRowErrorPerHead(s, exact.dv, got.dv, 1e-3)},
      {"d_scale", ScalarErrorPerHead(ref.d_scale, got.d_scale), ScalarErrorPerHead(exact.d_scale, got.d_scale)},
  };
}

void Print(const std::string& what, const std::vector<Errors>& errors) {
  std::string line;
  for (const Errors& e : errors) {
    line += std::string("  ") + e.name + " " + PerHead(e.simple) + " (fp64 " + PerHead(e.fp64) + ")";
  }
  std::fprintf(stderr, "%-16s%s\n", what.c_str(), line.c_str());
}

// The tiled kernel against the simple one and the CPU's fp64 one, every error within
// kTolerance; returns the worst.
double ExpectTiledMatches(const Problem& p, const std::string& what) {
  const std::vector<Errors> errors = Compare(p, Kernel::kTiled);
  Print(what, errors);
  double worst = 0;
  for (const Errors& e : errors) {
    EXPECT_LE(Max(e.simple), kTolerance) << what << ": " << e.name << " against the simple kernel";
    EXPECT_LE(Max(e.fp64), kTolerance) << what << ": " << e.name << " against the CPU's fp64";
    worst = std::max(worst, e.worst());
  }
  return worst;
}

TEST_F(AttentionTiledTest, MatchesTheSimpleKernelAndTheCpuAtLengthsNoBlockDivides) {
  // T = 37 (one ragged block), 64 (one whole block), 65 (a second block of one query:
  // the key pass's last key block and the forward's last query block both hold one row),
  // 130; B = 2; three heads: typical, peaked, flat softmax.
  double worst = 0;
  for (int64_t T : {37, 64, 65, 130}) {
    worst = std::max(worst, ExpectTiledMatches(Problem(2, T, kScales, 100 + T), "T = " + std::to_string(T)));
  }
  std::fprintf(stderr, "worst error over the lengths: %.3g\n", worst);
}

TEST_F(AttentionTiledTest, MatchesTheSimpleKernelPastSeveralBlocks) {
  // T = 200: four blocks of queries and of keys (the last of 8), so the forward and the
  // query pass walk up to four key blocks (rescaling o three times) and the key pass up
  // to four query blocks; one sequence, two heads.
  ExpectTiledMatches(Problem(1, 200, {0.125, 0.5}, 7), "T = 200");
}

// With RoPE fused: the tiled kernels turn q and k as they stage them (a RopeTable) and dq,
// dk back in their epilogues; the simple kernel attends over turned copies (RopePair) and
// its dq, dk are turned back after; the CPU turns in fp64. Lengths no block divides (the
// last block's rows past T read no table row: T = 37, 65, 70, 130, 200), B = 2, the three
// kinds of head; plain RoPE (T = 37, 65, 200) and YaRN (F = 4 over L = 48 at T = 130, so
// that positions past L turn by interpolated frequencies; F = 16 over L = 16 at T = 70,
// most pairs interpolated). Every error within 1e-2, as without RoPE.
TEST_F(AttentionTiledTest, WithRopeFusedMatchesTheSimpleKernelOnTurnedCopiesAndTheCpu) {
  struct Case {
    kernels::cpu::RopeScaling rope;
    int64_t T;
  };
  double worst = 0;
  for (const Case c : {Case{{}, 37}, Case{{}, 65}, Case{{}, 200}, Case{{4.0, 48.0}, 130}, Case{{16.0, 16.0}, 70}}) {
    Problem p(2, c.T, kScales, 300 + c.T);
    p.rope = c.rope;
    const std::string what = "RoPE F = " + std::to_string(int(c.rope.factor)) + ", T = " + std::to_string(c.T);
    worst = std::max(worst, ExpectTiledMatches(p, what));
  }
  std::fprintf(stderr, "with RoPE fused: worst error %.3g\n", worst);
}

TEST_F(AttentionTiledTest, WithRopeFusedEqualsTheTiledKernelOnTurnedCopies) {
  // The fused turn is cuda::Rope's fp32 arithmetic on the same fp32 table values, and the
  // turn back of dq, dk the inverse Rope's: every output of the fused kernel equals the
  // unfused tiled kernel's on Rope's turned copies (dq, dk turned back by Rope), within
  // 1e-6 relative (on the emulated device bit for bit; a GPU compiler may contract the
  // two kernels' products into FMAs differently); T = 130, YaRN F = 4.
  Problem fused(2, 130, kScales, 17);
  fused.rope = kernels::cpu::RopeScaling{4.0, 48.0};
  Problem copies = fused;
  copies.rope.reset();
  const AttentionShape& s = fused.shape;
  const int64_t ld = s.heads * s.d_h, n = fused.size();
  for (Floats* x : {&copies.q, &copies.k}) {  // turned on the device, as the unfused path
    DeviceArray<float> a(Device::kCuda);
    a.Resize(n);
    a.CopyFromHost(x->data());
    kernels::cuda::Rope(a.data(), ld, s.batch, s.seq, s.heads, s.d_h, false, nullptr, *fused.rope);
    *x = a.ToHost();
  }
  const Outputs got = RunAttention(fused, Kernel::kTiled), ref = RunAttention(copies, Kernel::kTiled);
  Floats dq = ref.dq, dk = ref.dk;
  DeviceArray<float> a(Device::kCuda);
  a.Resize(n);
  for (Floats* x : {&dq, &dk}) {
    a.CopyFromHost(x->data());
    kernels::cuda::Rope(a.data(), ld, s.batch, s.seq, s.heads, s.d_h, true, nullptr, *fused.rope);
    *x = a.ToHost();
  }
  const double errors[] = {RelativeError(got.o, ref.o), RelativeError(got.lse, ref.lse),
                           RelativeError(got.dq, dq),   RelativeError(got.dk, dk),
                           RelativeError(got.dv, ref.dv), RelativeError(got.d_scale, ref.d_scale)};
  for (double e : errors) EXPECT_LE(e, 1e-6);
  std::fprintf(stderr, "fused against turned copies: o %.3g, lse %.3g, dq %.3g, dk %.3g, dv %.3g, d_scale %.3g\n",
               errors[0], errors[1], errors[2], errors[3], errors[4], errors[5]);
}

TEST_F(AttentionTiledTest, ASingleKeyGivesItsValueAndPassesNoGradientToQueryKeyOrScale) {
  // T = 1: p = 1 whatever the score, so o = v, lse = z, ∂v = ∂o, and ds = dp − D = 0:
  // ∂q, ∂k and ∂scale are 0 in exact arithmetic (and in the CPU's fp64); here what the
  // split bf16 products leave of dp − D, held to 1e-5 of ‖∂o‖‖v‖ (the size of dp): ∂q
  // within 1e-5 · scale‖∂o‖‖v‖‖k‖, ∂k the same with ‖q‖, ∂scale 1e-5 · Σ_b ‖∂o‖‖v‖|q·k|.
  const Problem p(2, 1, kScales, 3);
  const AttentionShape& s = p.shape;
  const Outputs got = RunAttention(p, Kernel::kTiled);
  const Exact exact = RunCpu(p);
  EXPECT_LE(Max(WorstRowErrorPerHead(s, exact.o, got.o, 0)), 1e-5);
  EXPECT_LE(Max(WorstLseErrorPerHead(s, exact.lse, got.lse)), 1e-4);
  EXPECT_LE(Max(WorstRowErrorPerHead(s, exact.dv, got.dv, 0)), 1e-2);
  auto dot = [&](const Floats& x, const Floats& y, int64_t b, int64_t h) {  // rows (b, h): T = 1
    double sum = 0;
    const int64_t row = (b * s.heads + h) * s.d_h;
    for (int64_t c = 0; c < s.d_h; ++c) sum += double(x[row + c]) * y[row + c];
    return sum;
  };
  auto norm = [&](const Floats& x, int64_t b, int64_t h) { return std::sqrt(dot(x, x, b, h)); };
  double worst = 0;
  for (int64_t h = 0; h < s.heads; ++h) {
    double bound_scale = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      const double qk = dot(p.q, p.k, b, h);
      const double dp = norm(p.d_o, b, h) * norm(p.v, b, h);
      EXPECT_LE(norm(got.dq, b, h), 1e-5 * p.scale[h] * dp * norm(p.k, b, h)) << "b " << b << " h " << h;
      EXPECT_LE(norm(got.dk, b, h), 1e-5 * p.scale[h] * dp * norm(p.q, b, h)) << "b " << b << " h " << h;
      worst = std::max({worst, norm(got.dq, b, h) / (p.scale[h] * dp * norm(p.k, b, h)),
                        norm(got.dk, b, h) / (p.scale[h] * dp * norm(p.q, b, h))});
      bound_scale += dp * std::abs(qk);
    }
    EXPECT_LE(std::abs(got.d_scale[h]), 1e-5 * bound_scale) << "h " << h;
    worst = std::max(worst, std::abs(got.d_scale[h]) / bound_scale);
  }
  std::fprintf(stderr, "T = 1: dq, dk, d_scale at most %.3g of their bounds' scale (exactly 0 in fp64)\n", worst);
}

TEST_F(AttentionTiledTest, PlainBf16OperandsMissTheToleranceWhereTheSplitMeetsIt) {
  // What the hi/lo split buys (attention_tiled.h): with FlashAttention-2's plain bf16
  // operands every output misses 1e-2 on these inputs: the peaked head's scores are off
  // by ~1e-2 (|s| ≈ 30 from 8-bit q and k), so o and lse (and ∂v through p); and ds =
  // p (dp − D) does not sum to 0 over a row where dp and D nearly agree, so ∂q, ∂k and
  // d_scale by more. The split kernel meets the tolerance on the same inputs.
  const Problem p(2, 130, kScales, 230);
  const std::vector<Errors> plain = Compare(p, Kernel::kTiledPlain), split = Compare(p, Kernel::kTiled);
  Print("plain bf16", plain);
  Print("hi/lo split", split);
  for (size_t x = 0; x < plain.size(); ++x) {
    EXPECT_LE(split[x].worst(), kTolerance) << split[x].name;
    EXPECT_GT(plain[x].worst(), kTolerance) << plain[x].name;
  }
}

TEST_F(AttentionTiledTest, ForwardAndBackwardAreBitIdenticalBetweenRuns) {
  // No float atomics: every output has one owner, and d_scale sums per-query parts in a
  // fixed order. B = 2, two heads, T = 200 (several blocks each way); without and with
  // RoPE fused.
  for (const bool rope : {false, true}) {
    SCOPED_TRACE(rope ? "RoPE fused" : "no RoPE");
    Problem p(2, 200, {0.125, 1.0}, 13);
    if (rope) p.rope = kernels::cpu::RopeScaling{};
    const Outputs first = RunAttention(p, Kernel::kTiled), second = RunAttention(p, Kernel::kTiled);
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    EXPECT_TRUE(same(first.o, second.o));
    EXPECT_TRUE(same(first.lse, second.lse));
    EXPECT_TRUE(same(first.dq, second.dq));
    EXPECT_TRUE(same(first.dk, second.dk));
    EXPECT_TRUE(same(first.dv, second.dv));
    EXPECT_TRUE(same(first.d_scale, second.d_scale));
  }
}

TEST_F(AttentionTiledTest, OtherKindsAndWidthsAreTheSimpleKernelsResults) {
  // d_h = 32 (softmax) and softmax1, SSMax at d_h = 64: the simple kernel runs, whole,
  // so the results are its own bit for bit.
  const std::vector<Problem> problems = {Problem(2, 70, {0.2, 0.3}, 17, 32),
                                         Problem(1, 70, {0.125, 0.3}, 19, 64, AttentionKind::kSoftmax1),
                                         Problem(1, 70, {0.125, 0.3}, 23, 64, AttentionKind::kSsmax)};
  for (const Problem& p : problems) {
    SCOPED_TRACE(::testing::Message() << "d_h " << p.shape.d_h << ", kind " << int(p.shape.kind));
    const Outputs tiled = RunAttention(p, Kernel::kTiled), simple = RunAttention(p, Kernel::kSimple);
    EXPECT_EQ(tiled.o, simple.o);
    EXPECT_EQ(tiled.lse, simple.lse);
    EXPECT_EQ(tiled.dq, simple.dq);
    EXPECT_EQ(tiled.dk, simple.dk);
    EXPECT_EQ(tiled.dv, simple.dv);
    EXPECT_EQ(tiled.d_scale, simple.d_scale);
  }
}

// What the CUDA Transformer kernels run (MakeCudaTransformerKernels): auto is the tiled
// kernel under bf16 and the simple one under fp32 and fp16, bit for bit.
TEST_F(AttentionTiledTest, TheTransformerKernelsRunTheTiledKernelUnderBf16AndTheSimpleOneOtherwise) {
  unsetenv("MULTISCREEN_ATTENTION_KERNEL");
  const Problem p(2, 70, {0.125, 1.0}, 29);
  const Outputs tiled = RunAttention(p, Kernel::kTiled, false), simple = RunAttention(p, Kernel::kSimple, false);
  ASSERT_NE(tiled.o, simple.o);
  for (Precision precision : {Precision::kBf16, Precision::kFp32, Precision::kFp16}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    KernelOptions options;
    options.precision = precision;
    auto tk = kernels::cuda::MakeCudaTransformerKernels(options);
    ASSERT_TRUE(tk.ok()) << tk.status();
    DeviceArray<float> q(Device::kCuda), k(Device::kCuda), v(Device::kCuda), o(Device::kCuda);
    for (auto [array, host] : {std::pair{&q, &p.q}, {&k, &p.k}, {&v, &p.v}}) {
      array->Resize(p.size());
      array->CopyFromHost(host->data());
    }
    o.Resize(p.size());
    std::vector<double> lse(p.rows());
    (*tk)->AttentionForward(p.shape, q.data(), k.data(), v.data(), p.scale.data(), o.data(), lse.data());
    EXPECT_EQ(o.ToHost(), precision == Precision::kBf16 ? tiled.o : simple.o);
  }
}

// MULTISCREEN_ATTENTION_KERNEL overrides auto (and only auto); another value is refused,
// by TiledAttention and so by the factory. No device needed.
TEST(TiledAttentionSelection, TheEnvironmentVariableOverridesAuto) {
  KernelOptions bf16;
  bf16.precision = Precision::kBf16;
  KernelOptions fp32;
  auto tiled = [](const KernelOptions& o) { return *kernels::cuda::TiledAttention(o); };
  unsetenv("MULTISCREEN_ATTENTION_KERNEL");
  EXPECT_TRUE(tiled(bf16));
  EXPECT_FALSE(tiled(fp32));
  setenv("MULTISCREEN_ATTENTION_KERNEL", "simple", 1);
  EXPECT_FALSE(tiled(bf16));
  setenv("MULTISCREEN_ATTENTION_KERNEL", "Tiled", 1);
  EXPECT_TRUE(tiled(fp32));
  KernelOptions pinned = fp32;
  pinned.attention_kernel = AttentionKernel::kSimple;
  EXPECT_FALSE(tiled(pinned));
  setenv("MULTISCREEN_SCREENING_KERNEL", "simple", 1);  // the screening's variable is not the attention's
  EXPECT_TRUE(tiled(fp32));
  unsetenv("MULTISCREEN_SCREENING_KERNEL");
  setenv("MULTISCREEN_ATTENTION_KERNEL", "fast", 1);
  const auto bad = kernels::cuda::TiledAttention(bf16);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "MULTISCREEN_ATTENTION_KERNEL=fast: expected auto, simple or tiled");
  const auto factory = kernels::cuda::MakeCudaTransformerKernels(bf16);
  ASSERT_FALSE(factory.ok());
  EXPECT_EQ(factory.status().message(), bad.status().message());
  unsetenv("MULTISCREEN_ATTENTION_KERNEL");
}

}  // namespace
}  // namespace multiscreen

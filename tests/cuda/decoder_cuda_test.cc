// Decoding on the device (issue 29) against the CPU, the oracle: the decoding caches of
// kernels/decode_cache.h (screening's ring buffers and growing caches; the Transformer's
// KV cache and every attention mechanism) step by step on random projections, and the
// decoders of model/decoder.h (the same orchestration over the CUDA table and caches)
// token by token on tiny models — logits in fp32 within 1e-5 relative at every step, in
// bf16 against the CPU's bf16 decoder within 1e-2 (and measurably not fp32). Multiscreen
// with finite windows whose ring buffers wrap, windows expanded to w = ∞, MiPE, RoPE (with
// YaRN), NoPE, no gate, no TanhNorm; the Transformer with softmax, softmax1, SSMax,
// sigmoid, entmax 1.5, QKNorm, SIO and attention SCREENING. Greedy decoding with the
// device's argmax generates the tokens the host's argmax over downloaded logits did (Ψ = 8,
// transformer_8m; fp32, bf16; CPU and device), and on the emulated device a token costs 4
// bytes to the host instead of 4·V. A prompt fed in chunks (Decoder::Feed) and decode-path
// losses (Decoder::Losses) against token-by-token Steps. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#ifdef MULTISCREEN_CUDA_EMULATED
#include "cuda_emulator/emulator.h"
#endif
#include "kernels/cpu/attention_cache.h"
#include "kernels/cpu/screening_cache.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/screening_decode.h"
#include "kernels/decode_cache.h"
#include "kernels/device_array.h"
#include "model/decode.h"
#include "model/decoder.h"
#include "model/param_layout.h"
#include "tests/cuda/cuda_test.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using kernels::PositionKind;

// A device copy of a host array (kept by the caller).
DeviceArray<float> OnDevice(const Floats& host) {
  DeviceArray<float> a(Device::kCuda);
  a.Resize(static_cast<int64_t>(host.size()));
  a.CopyFromHost(host.data());
  return a;
}

// ---- the screening cache alone -------------------------------------------------------

struct ScreeningCase {
  PositionKind position;
  bool output_gate, tanh_norm;
  int64_t d_k, d_v, keys_per_block;
  double yarn_factor = 1.0;
};

std::string ScreeningCaseName(const ::testing::TestParamInfo<ScreeningCase>& info) {
  const ScreeningCase& c = info.param;
  return std::string(kernels::PositionKindName(c.position)) + (c.output_gate ? "" : "_NoGate") +
         (c.tanh_norm ? "" : "_NoTanhNorm") + "_dk" + std::to_string(c.d_k) + "_dv" + std::to_string(c.d_v) +
         "_block" + std::to_string(c.keys_per_block) + (c.yarn_factor != 1.0 ? "_Yarn" : "");
}

void PrintTo(const ScreeningCase& c, std::ostream* os) {
  *os << kernels::PositionKindName(c.position) << (c.output_gate ? "" : " no gate") << (c.tanh_norm ? "" : " no TanhNorm")
      << " d_K " << c.d_k << " d_V " << c.d_v << ", " << c.keys_per_block << " keys per block, YaRN " << c.yarn_factor;
}

class ScreeningCacheCudaTest : public CudaTest, public ::testing::WithParamInterface<ScreeningCase> {};

#ifdef MULTISCREEN_CUDA_EMULATED
// The screening cache's kernel launches on the emulated device so far.
uint64_t ScreenDecodeLaunches() {
  uint64_t n = 0;
  for (const auto& [name, tally] : msemu::WorkTallies()) n += name.find("ScreenDecode") != std::string::npos ? tally.calls : 0;
  return n;
}
#endif

// Windows below the run's length (whose rings wrap: ⌈1.5⌉ = 2 slots up to ⌈9.2⌉ = 10), one
// exactly integral, one longer than the run (never wraps) and two expanded (w = ∞, one
// with MiPE from its learned w = 12 < w_th, one past w_th without). Acceptance widths from
// strict to loose, so that Trim rejects a real share of the pairs.
std::vector<kernels::TileScalars> Tiles() {
  const double inf = std::numeric_limits<double>::infinity();
  const double w[] = {1.5, 3.0, 4.7, 9.2, 60.0, inf, inf};
  const double mipe_w[] = {1.5, 3.0, 4.7, 9.2, 60.0, 12.0, 40.0};
  const double r[] = {0.9, 0.6, 0.75, 0.5, 0.85, 0.7, 0.95};
  std::vector<kernels::TileScalars> tiles(7);
  for (int t = 0; t < 7; ++t) tiles[t] = {w[t], r[t], 0.5 + 0.25 * t, mipe_w[t]};
  return tiles;
}

TEST_P(ScreeningCacheCudaTest, EveryStepEqualsTheCpusCache) {
  const ScreeningCase& c = GetParam();
  kernels::ScreeningShape shape;
  shape.tiles = 7;
  shape.d_k = c.d_k;
  shape.d_v = c.d_v;
  shape.w_th = 16;
  shape.position = c.position;
  shape.output_gate = c.output_gate;
  shape.tanh_norm = c.tanh_norm;
  shape.rope_scaling = {c.yarn_factor, 8.0};
  const auto tiles = Tiles();
  kernels::cpu::CpuScreeningCache<float> cpu(shape, tiles);
  auto gpu = kernels::cuda::MakeCudaScreeningCache(shape, tiles, c.keys_per_block);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t T = 80, C = shape.p_cols(), n_p = shape.tiles * C, n_u = shape.tiles * c.d_v;
  DeviceArray<float> u_dev(Device::kCuda);
  u_dev.Resize(n_u);
  double worst = 0;
  int64_t nonzero = 0;
  Floats all_p, all_u, device_u;  // every step's P, the CPU's U and the device's, for StepRows below
  for (int64_t pos = 0; pos < T; ++pos) {
    // Keys near one another (a shared direction plus noise), so that many pairs pass Trim.
    Floats p = Random(n_p, 100 + pos, 0.6f);
    const Floats common = Random(C, 7, 1.f);
    for (int64_t t = 0; t < shape.tiles; ++t) {
      for (int64_t x = 0; x < 2 * c.d_k; ++x) p[t * C + x] += common[x % c.d_k];
    }
    Floats want(n_u);
    cpu.Step(p.data(), pos, want.data());
    all_p.insert(all_p.end(), p.begin(), p.end());
    all_u.insert(all_u.end(), want.begin(), want.end());
    const DeviceArray<float> p_dev = OnDevice(p);
    (*gpu)->Step(p_dev.data(), pos, u_dev.data());
    const Floats got = u_dev.ToHost();
    device_u.insert(device_u.end(), got.begin(), got.end());
    const double err = RelativeError(got, want);
    worst = std::max(worst, err);
    ASSERT_LE(err, 1e-5) << "position " << pos;
    for (float v : want) nonzero += v != 0.f;
  }
  for (int64_t t = 0; t < shape.tiles; ++t) EXPECT_EQ((*gpu)->CachedKeys(t, T), cpu.CachedKeys(t, T));
  EXPECT_LT((*gpu)->CachedKeys(0, T), T);  // a ring that wrapped
  EXPECT_EQ((*gpu)->CachedKeys(5, T), T);  // w = ∞ keeps every key
  EXPECT_GT(nonzero, T * n_u / 2) << "Trim rejected nearly every pair: the test would prove little";
  std::printf("worst relative error of U over %lld steps: %.3g\n", static_cast<long long>(T), worst);
  // The CPU's StepRows (units in parallel) in chunks of 7 rows: Step's U, bit for bit.
  kernels::cpu::CpuScreeningCache<float> rows(shape, tiles);
  Floats u_rows(T * n_u);
  for (int64_t pos = 0; pos < T; pos += 7) {
    rows.StepRows(all_p.data() + pos * n_p, n_p, std::min<int64_t>(7, T - pos), pos, u_rows.data() + pos * n_u, n_u);
  }
  EXPECT_EQ(u_rows, all_u);
  // The device's StepRows (a chunk's keys cached first, then its rows' queries in one
  // launch) against its own Steps above, bit for bit: chunks of 1, 7 and 72 rows (past the
  // 64 of one launch set), rings that wrap inside a chunk.
  const DeviceArray<float> all_p_dev = OnDevice(all_p);
  DeviceArray<float> all_u_dev(Device::kCuda);
  all_u_dev.Resize(T * n_u);
  for (int64_t chunk : {1, 7, 72}) {
    auto chunked = kernels::cuda::MakeCudaScreeningCache(shape, tiles, c.keys_per_block);
#ifdef MULTISCREEN_CUDA_EMULATED
    const uint64_t launches = ScreenDecodeLaunches();
#endif
    for (int64_t pos = 0; pos < T; pos += chunk) {
      (*chunked)->StepRows(all_p_dev.data() + pos * n_p, n_p, std::min(chunk, T - pos), pos,
                           all_u_dev.data() + pos * n_u, n_u);
    }
    EXPECT_EQ(all_u_dev.ToHost(), device_u) << "chunks of " << chunk << " rows";
#ifdef MULTISCREEN_CUDA_EMULATED
    // Two launches a row alone; three a chunk of up to 64 rows: 80 rows in chunks of 7 are
    // 11 chunks of 7 and one of 3; in chunks of 72, 64 + 8 and then 8.
    const uint64_t expected = chunk == 1 ? 2 * T : chunk == 7 ? 3 * 12 : 3 * 3;
    EXPECT_EQ(ScreenDecodeLaunches() - launches, expected) << "chunks of " << chunk << " rows";
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ScreeningCacheCudaTest,
    ::testing::Values(ScreeningCase{PositionKind::kMipe, true, true, 8, 16, 1024},
                      ScreeningCase{PositionKind::kMipe, true, true, 8, 16, 3},   // several key blocks per unit
                      ScreeningCase{PositionKind::kRope, false, true, 8, 16, 4, 4.0},
                      ScreeningCase{PositionKind::kNope, true, false, 8, 16, 5},
                      ScreeningCase{PositionKind::kMipe, true, true, 16, 64, 7},
                      ScreeningCase{PositionKind::kRope, true, false, 6, 200, 1024}),  // d_v past a block's threads
    ScreeningCaseName);

// ---- the Transformer's attention cache alone ------------------------------------------

struct AttentionCase {
  AttentionKind kind;
  bool qk_norm;
  int64_t d_h;
  double yarn_factor = 1.0;
};

std::string AttentionCaseName(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return std::string(AttentionKindName(c.kind)) + (c.qk_norm ? "_QkNorm" : "") + "_dh" + std::to_string(c.d_h) +
         (c.yarn_factor != 1.0 ? "_Yarn" : "");
}

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << AttentionKindName(c.kind) << (c.qk_norm ? " QKNorm" : "") << " d_h " << c.d_h << ", YaRN " << c.yarn_factor;
}

class AttentionCacheCudaTest : public CudaTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionCacheCudaTest, EveryStepEqualsTheCpusCache) {
  const AttentionCase& c = GetParam();
  kernels::AttentionCacheShape shape;
  shape.heads = 3;
  shape.d_h = c.d_h;
  shape.kind = c.kind;
  shape.qk_norm = c.qk_norm;
  shape.rope_scaling = {c.yarn_factor, 16.0};
  shape.scale = {0.9, 1.6, 2.5};  // peaked weights: far from uniform, entmax's support partial
  kernels::cpu::CpuAttentionCache<float> cpu(shape);
  auto gpu = kernels::cuda::MakeCudaAttentionCache(shape);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t T = 70, dl = shape.heads * c.d_h;  // 70 > the cache's first 64 rows: it grows
  DeviceArray<float> o_dev(Device::kCuda);
  o_dev.Resize(dl);
  double worst = 0;
  Floats all_qkv, all_o, device_o;  // every step's qkv, the CPU's o and the device's, for StepRows below
  for (int64_t pos = 0; pos < T; ++pos) {
    const Floats qkv = Random(3 * dl, 300 + pos, c.qk_norm ? 1.f : 0.5f);
    Floats want(dl);
    cpu.Step(qkv.data(), pos, want.data());
    all_qkv.insert(all_qkv.end(), qkv.begin(), qkv.end());
    all_o.insert(all_o.end(), want.begin(), want.end());
    const DeviceArray<float> qkv_dev = OnDevice(qkv);
    (*gpu)->Step(qkv_dev.data(), pos, o_dev.data());
    const Floats got = o_dev.ToHost();
    device_o.insert(device_o.end(), got.begin(), got.end());
    const double err = RelativeError(got, want);
    worst = std::max(worst, err);
    ASSERT_LE(err, 1e-5) << "position " << pos;
  }
  std::printf("worst relative error of o over %lld steps: %.3g\n", static_cast<long long>(T), worst);
  // The CPU's StepRows ((row, head) pairs in parallel) in chunks of 9 rows: Step's o, bit
  // for bit.
  kernels::cpu::CpuAttentionCache<float> rows(shape);
  Floats o_rows(T * dl);
  for (int64_t pos = 0; pos < T; pos += 9) {
    rows.StepRows(all_qkv.data() + pos * 3 * dl, 3 * dl, std::min<int64_t>(9, T - pos), pos, o_rows.data() + pos * dl,
                  dl);
  }
  EXPECT_EQ(o_rows, all_o);
  // The device's StepRows (the rows' keys stored, then their outputs) against its own
  // Steps above, bit for bit, in chunks of 9 and 70 rows (past the 64 of one launch pair;
  // entmax, slow on the emulated device, in chunks of 70 only).
  const DeviceArray<float> all_qkv_dev = OnDevice(all_qkv);
  DeviceArray<float> all_o_dev(Device::kCuda);
  all_o_dev.Resize(T * dl);
  for (int64_t chunk : {9, 70}) {
    if (c.kind == AttentionKind::kEntmax15 && chunk != 70) continue;
    auto chunked = kernels::cuda::MakeCudaAttentionCache(shape);
    for (int64_t pos = 0; pos < T; pos += chunk) {
      (*chunked)->StepRows(all_qkv_dev.data() + pos * 3 * dl, 3 * dl, std::min(chunk, T - pos), pos,
                           all_o_dev.data() + pos * dl, dl);
    }
    EXPECT_EQ(all_o_dev.ToHost(), device_o) << "chunks of " << chunk << " rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, AttentionCacheCudaTest,
                         ::testing::Values(AttentionCase{AttentionKind::kSoftmax, false, 8},
                                           AttentionCase{AttentionKind::kSoftmax, true, 64, 4.0},
                                           AttentionCase{AttentionKind::kSoftmax1, false, 8},
                                           AttentionCase{AttentionKind::kSsmax, true, 8},
                                           AttentionCase{AttentionKind::kSigmoid, false, 8},
                                           AttentionCase{AttentionKind::kEntmax15, false, 40}),
                         AttentionCaseName);

TEST(DecodeCacheFactoryTest, RefusesWhatTheKernelsDoNotTake) {
  kernels::ScreeningShape shape;
  shape.tiles = 1;
  shape.d_k = 65;
  shape.d_v = 16;
  EXPECT_FALSE(kernels::cuda::MakeCudaScreeningCache(shape, {kernels::TileScalars{}}).ok());
  kernels::AttentionCacheShape attention;
  attention.heads = 1;
  attention.d_h = 7;  // odd: no RoPE pairs
  attention.scale = {1.0};
  EXPECT_FALSE(kernels::cuda::MakeCudaAttentionCache(attention).ok());
  attention.d_h = 8;
  attention.kind = AttentionKind::kScreening;
  EXPECT_FALSE(kernels::cuda::MakeCudaAttentionCache(attention).ok());
  // fp64 has no CUDA caches.
  EXPECT_FALSE(MakeAttentionCache<double>(Device::kCuda, attention).ok());
}

// ---- the decoders, token by token ----------------------------------------------------

struct DecoderCase {
  const char* model;
  bool expand_windows = true;
  PositionKind position = PositionKind::kMipe;
  bool output_gate = true, tanh_norm = true;
  double yarn_factor = 1.0;
  AttentionKind attention = AttentionKind::kSoftmax;  // the Transformer's
  bool qk_norm = false, sio = false, pl_norm = false;  // the Transformer's switches
  std::string name;
};

void PrintTo(const DecoderCase& c, std::ostream* os) { *os << c.name; }

ModelDims DimsOf(const DecoderCase& c) {
  ModelDims d = testing::TinyDims(c.model, !std::string(c.model).starts_with("tiny_transformer") || c.pl_norm);
  if (d.transformer()) {
    d.attention = c.attention;
    d.qk_norm = c.qk_norm;
    d.sio = c.sio;
  } else {
    d.position = c.position;
    d.output_gate = c.output_gate;
    d.tanh_norm = c.tanh_norm;
  }
  return d;
}

Floats ParamsOf(const ModelDims& dims, uint64_t seed) {
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  return dims.transformer() ? testing::PerturbedTransformerParams<float>(layout, seed)
                            : testing::WellConditionedParams<float>(layout, seed);
}

InferenceOptions OptionsOf(const DecoderCase& c) {
  InferenceOptions o;
  o.expand_windows = c.expand_windows;
  o.train_len = 8;  // tiles with w > 8 become infinite when expanding
  o.yarn_factor = c.yarn_factor;
  return o;
}

// The logits of every step of `tokens` from a decoder on `device` in `precision`.
std::vector<Floats> DecodeAll(const ModelDims& dims, const Floats& params, const InferenceOptions& options,
                              Device device, Precision precision, const std::vector<int32_t>& tokens,
                              std::vector<int64_t>* cached_keys = nullptr) {
  DeviceArray<float> p(device);
  p.Resize(static_cast<int64_t>(params.size()));
  p.CopyFromHost(params.data());
  ModelOptions placement;
  placement.device = device;
  placement.precision = precision;
  auto decoder = MakeDecoder<float>(dims, p.data(), options, placement);
  std::vector<Floats> out;
  for (int32_t id : tokens) {
    out.emplace_back(dims.vocab);
    decoder->Step(id, out.back().data());
  }
  if (cached_keys != nullptr && !dims.transformer()) {
    const auto& session = dynamic_cast<const DecodeSession<float>&>(*decoder);
    for (int64_t l = 0; l < dims.n_layers; ++l) {
      for (int64_t t = 0; t < dims.n_heads; ++t) cached_keys->push_back(session.CachedKeys(l, t));
    }
  }
  return out;
}

class DecoderCudaTest : public CudaTest, public ::testing::WithParamInterface<DecoderCase> {};

TEST_P(DecoderCudaTest, EveryTokensLogitsEqualTheCpuDecodersInFp32) {
  const DecoderCase& c = GetParam();
  const ModelDims dims = DimsOf(c);
  const Floats params = ParamsOf(dims, 61);
  const InferenceOptions options = OptionsOf(c);
  const int64_t T = 36;
  const std::vector<int32_t> tokens = testing::RandomTokens(dims.vocab, T, 62);
  std::vector<int64_t> keys_cpu, keys_gpu;
  const auto want = DecodeAll(dims, params, options, Device::kCpu, Precision::kFp32, tokens, &keys_cpu);
  const auto got = DecodeAll(dims, params, options, Device::kCuda, Precision::kFp32, tokens, &keys_gpu);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double err = RelativeError(got[t], want[t]);
    worst = std::max(worst, err);
    ASSERT_LE(err, 1e-5) << "token " << t;
  }
  EXPECT_GT(worst, 0) << "the device computed them: some bits differ";
  EXPECT_EQ(keys_gpu, keys_cpu);
  if (!dims.transformer()) {  // some tiles decode from a ring that wrapped; expanded ones hold every key
    int ring = 0, all = 0;
    for (int64_t k : keys_gpu) ring += k < T, all += k == T;
    EXPECT_GT(ring, 0);
    if (c.expand_windows) EXPECT_GT(all, 0);
  }
  std::printf("%s: worst relative error of the logits over %lld tokens, cuda vs cpu: %.3g\n", c.name.c_str(),
              static_cast<long long>(T), worst);
}

const DecoderCase kDecoderCases[] = {
    {"tiny_psi4", true, PositionKind::kMipe, true, true, 1.0, {}, false, false, false, "Psi4_Expand_Mipe"},
    {"tiny_psi4", false, PositionKind::kMipe, true, true, 1.0, {}, false, false, false, "Psi4_AsLearned_Mipe"},
    {"tiny_psi4", true, PositionKind::kRope, false, true, 4.0, {}, false, false, false, "Psi4_Expand_Rope_NoGate_Yarn"},
    {"tiny_psi4", false, PositionKind::kNope, true, false, 1.0, {}, false, false, false, "Psi4_AsLearned_Nope_NoTanh"},
    {"tiny_tiled", false, PositionKind::kMipe, true, true, 1.0, {}, false, false, false, "Tiled_AsLearned_Mipe"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kSoftmax, false, false, false, "Transformer"},
    {"tiny_transformer", true, {}, true, true, 3.0, AttentionKind::kSoftmax, true, true, true,
     "Transformer_QkNorm_Sio_PlNorm_Yarn"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kSoftmax1, false, false, false, "Transformer_Softmax1"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kSsmax, true, true, false, "Transformer_Ssmax"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kSigmoid, false, false, false, "Transformer_Sigmoid"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kEntmax15, false, false, false,
     "Transformer_Entmax15"},
    {"tiny_transformer", true, {}, true, true, 1.0, AttentionKind::kScreening, false, true, true,
     "Transformer_Screening"},
};

INSTANTIATE_TEST_SUITE_P(Models, DecoderCudaTest, ::testing::ValuesIn(kDecoderCases),
                         [](const auto& info) { return info.param.name; });

// bf16 on the device is the CPU decoder's bf16 (the same rounded operands) to bf16's
// precision, and bf16 did happen: the logits are not fp32's.
TEST_F(CudaTest, Bf16DecodingOnTheDeviceFollowsTheCpusBf16) {
  for (const DecoderCase& c : {kDecoderCases[0], kDecoderCases[4], kDecoderCases[6]}) {
    const ModelDims dims = DimsOf(c);
    const Floats params = ParamsOf(dims, 71);
    const InferenceOptions options = OptionsOf(c);
    const std::vector<int32_t> tokens = testing::RandomTokens(dims.vocab, 24, 72);
    const auto cpu16 = DecodeAll(dims, params, options, Device::kCpu, Precision::kBf16, tokens);
    const auto gpu16 = DecodeAll(dims, params, options, Device::kCuda, Precision::kBf16, tokens);
    const auto gpu32 = DecodeAll(dims, params, options, Device::kCuda, Precision::kFp32, tokens);
    double worst = 0, moved = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      worst = std::max(worst, RelativeError(gpu16[t], cpu16[t]));
      moved = std::max(moved, RelativeError(gpu16[t], gpu32[t]));
    }
    std::printf("%s: bf16 cuda vs cpu %.3g, bf16 vs fp32 on cuda %.3g\n", c.name.c_str(), worst, moved);
    EXPECT_LE(worst, 1e-2) << c.name;
    EXPECT_GT(moved, 1e-5) << c.name << ": bf16 did not round anything";
  }
}

// Greedy decoding as it was before the argmax moved to the device (issue 29): every
// token's logits downloaded, std::max_element on the host (the lowest id on ties).
std::vector<int32_t> HostArgmaxGreedy(Decoder<float>& decoder, const std::vector<int32_t>& prompt, int64_t max_new,
                                      int64_t vocab) {
  Floats logits(vocab);
  for (int32_t id : prompt) decoder.Step(id, logits.data());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < max_new) decoder.Step(out.back(), logits.data());
  }
  return out;
}

// A decoder with its own copy of the parameters, which it reads at every step. (One copy
// shared by two decoders, replaced when the second was made, left the first reading freed
// memory: CI's emulated run saw tiny_transformer's CPU logits at 1e28.)
struct DecoderWithParams {
  std::unique_ptr<DeviceArray<float>> params;
  std::unique_ptr<Decoder<float>> decoder;
  Decoder<float>* operator->() const { return decoder.get(); }
  Decoder<float>& operator*() const { return *decoder; }
};

// The decoder of dims over `params` (host) on `device` in `precision`.
DecoderWithParams DecoderOn(const ModelDims& dims, const Floats& params, Device device, Precision precision) {
  DecoderWithParams d;
  d.params = std::make_unique<DeviceArray<float>>(device);
  d.params->Resize(static_cast<int64_t>(params.size()));
  d.params->CopyFromHost(params.data());
  ModelOptions placement;
  placement.device = device;
  placement.precision = precision;
  InferenceOptions options;
  options.train_len = 8;
  d.decoder = MakeDecoder<float>(dims, d.params->data(), options, placement);
  return d;
}

// GreedyContinuation (Decoder::Argmax: on the device, one int a token) generates the
// tokens the host's argmax over downloaded logits generated, for a tiny Multiscreen and
// Transformer, fp32 and bf16, on the CPU and the device, from two prompts. (Multiscreen's
// continuations soon repeat one token at these parameters; the prompts make them differ.
// The kernel itself is checked at GPT-2's vocabulary in cuda_test; Ψ = 8 and
// transformer_8m here took 64 s, emulated.)
TEST_F(CudaTest, GreedyTokensAreThoseOfTheHostArgmaxAsBefore) {
  for (const char* model : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(model);
    const Floats params = ParamsOf(dims, 91);
    for (Device device : {Device::kCpu, Device::kCuda}) {
      for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
        const std::string what = std::string(model) + (device == Device::kCpu ? " cpu " : " cuda ") +
                                 (precision == Precision::kFp32 ? "fp32" : "bf16");
        std::set<int32_t> distinct;
        for (uint64_t seed : {92, 95}) {
          const std::vector<int32_t> prompt = testing::RandomTokens(dims.vocab, 5, seed);
          auto before = DecoderOn(dims, params, device, precision);
          const std::vector<int32_t> want = HostArgmaxGreedy(*before, prompt, 8, dims.vocab);
          auto after = DecoderOn(dims, params, device, precision);
          EXPECT_EQ(GreedyContinuation(*after, prompt, 8), want) << what;
          distinct.insert(want.begin(), want.end());
          if (seed != 92) continue;
          // on_token sees each token as chosen and stops the continuation where it says.
          std::vector<int32_t> seen;
          auto stopped = DecoderOn(dims, params, device, precision);
          const std::vector<int32_t> part = GreedyContinuation(*stopped, prompt, 8, [&](int32_t id) {
            seen.push_back(id);
            return seen.size() < 4;
          });
          EXPECT_EQ(part, std::vector<int32_t>(want.begin(), want.begin() + 4)) << what;
          EXPECT_EQ(seen, part) << what;
        }
        std::printf("%s: %zu distinct tokens of 16\n", what.c_str(), distinct.size());
        EXPECT_GT(distinct.size(), 1u) << what << ": degenerate continuations";
      }
    }
  }
}

#ifdef MULTISCREEN_CUDA_EMULATED
// The bytes copies moved to the host on the emulated device so far.
uint64_t BytesToHost() {
  uint64_t bytes = 0;
  for (const auto& [name, tally] : msemu::WorkTallies()) bytes += tally.bytes_to_host;
  return bytes;
}
// The cuBLAS(Lt) products the emulated device ran so far.
uint64_t CublasProducts() {
  uint64_t n = 0;
  for (const auto& [name, tally] : msemu::WorkTallies()) n += name.starts_with("cublas") ? tally.calls : 0;
  return n;
}
#endif

// Feed (a prompt token whose successor is given) is Step without the head: the logits
// after fed tokens and a Step are bit for bit those of Steps throughout, on the CPU and
// the device, fp32 and bf16, for both families. On the emulated device a fed token makes
// its layers' cuBLAS products alone, a Step those and the head's over the vocabulary.
TEST_F(CudaTest, FeedIsStepWithoutTheHead) {
  for (const char* model : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(model);
    const Floats params = ParamsOf(dims, 97);
    const std::vector<int32_t> prompt = testing::RandomTokens(dims.vocab, 9, 98);
    for (Device device : {Device::kCpu, Device::kCuda}) {
      for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
        SCOPED_TRACE(::testing::Message() << model << (device == Device::kCpu ? " cpu " : " cuda ")
                                        << (precision == Precision::kFp32 ? "fp32" : "bf16"));
        auto stepped = DecoderOn(dims, params, device, precision);
        auto fed = DecoderOn(dims, params, device, precision);
        Floats want(dims.vocab), got(dims.vocab);
        for (int32_t id : prompt) stepped->Step(id, want.data());
        for (size_t i = 0; i + 1 < prompt.size(); ++i) fed->Feed(prompt[i]);
        fed->Step(prompt.back(), got.data());
        EXPECT_EQ(got, want);
        EXPECT_EQ(fed->position(), stepped->position());
        EXPECT_EQ(fed->Argmax(), stepped->Argmax());
#ifdef MULTISCREEN_CUDA_EMULATED
        if (device == Device::kCuda) {
          const uint64_t p0 = CublasProducts();
          fed->Feed(prompt[0]);
          const uint64_t p1 = CublasProducts();
          fed->Step(prompt[1], nullptr);
          const uint64_t p2 = CublasProducts();
          // Per layer: W_cat and W_O (the Transformer: W_QKV, W_O, [W_gate; W_up], W_down).
          const uint64_t per_layer = dims.transformer() ? 4 : 2;
          EXPECT_EQ(p1 - p0, per_layer * dims.n_layers);
          EXPECT_EQ(p2 - p1, per_layer * dims.n_layers + 1);
        }
#endif
      }
    }
  }
}

// A prompt fed in one Feed (chunks of feed_rows() rows through each layer's GEMMs; 8
// here, so that a few tokens cross two chunk boundaries, the emulated device's Steps being
// slow: the CPU test model_test covers the default 256) leaves
// the session where feeding it token by token does: the next Step's logits within 1e-5
// relative in fp32 (the CPU's BLAS, a GPU's cuBLASLt, may sum a GEMM's m rows in another
// order than one row's), in bf16 within 1e-2, and bit for bit on the emulated device,
// whose cuBLASLt sums each output in k order. On the emulated device a chunk of rows makes one product
// per weight and layer where token by token made one per token.
TEST_F(CudaTest, APromptFedInChunksIsFedTokenByToken) {
  constexpr int64_t R = 8;
  for (const char* model : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(model);
    const Floats params = ParamsOf(dims, 99);
    const std::vector<int32_t> prompt = testing::RandomTokens(dims.vocab, R + 9, 100);
    const int64_t fed_tokens = R + 8;  // two chunks: R rows, then 8
    for (Device device : {Device::kCpu, Device::kCuda}) {
      for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
        SCOPED_TRACE(::testing::Message() << model << (device == Device::kCpu ? " cpu " : " cuda ")
                                        << (precision == Precision::kFp32 ? "fp32" : "bf16"));
        auto single = DecoderOn(dims, params, device, precision);
        auto chunked = DecoderOn(dims, params, device, precision);
        chunked->set_feed_rows(R);
        Floats want(dims.vocab), got(dims.vocab);
        for (int64_t i = 0; i < fed_tokens; ++i) single->Feed(prompt[i]);
        single->Step(prompt.back(), want.data());
#ifdef MULTISCREEN_CUDA_EMULATED
        const uint64_t p0 = CublasProducts();
#endif
        chunked->Feed(prompt.data(), fed_tokens);
#ifdef MULTISCREEN_CUDA_EMULATED
        if (device == Device::kCuda) {
          const uint64_t per_layer = dims.transformer() ? 4 : 2;  // as in FeedIsStepWithoutTheHead
          EXPECT_EQ(CublasProducts() - p0, 2 * per_layer * dims.n_layers);
        }
#endif
        ASSERT_EQ(chunked->position(), fed_tokens);
        chunked->Step(prompt.back(), got.data());
#ifdef MULTISCREEN_CUDA_EMULATED
        const bool exact = device == Device::kCuda;
#else
        const bool exact = false;  // a GPU's cuBLASLt may pick another algorithm for m rows
#endif
        if (exact) {
          EXPECT_EQ(got, want);
        } else {
          const double tolerance = precision == Precision::kFp32 ? 1e-5 : 1e-2;
          double diff = 0, scale = 0;
          for (int64_t v = 0; v < dims.vocab; ++v) {
            diff = std::max(diff, double(std::abs(got[v] - want[v])));
            scale = std::max(scale, double(std::abs(want[v])));
          }
          EXPECT_LE(diff, tolerance * scale);
        }
        EXPECT_EQ(chunked->Argmax(), single->Argmax());
      }
    }
  }
}

// Decoder::Losses (eval ppl's decode path) on the device: each token's loss at its
// successor from the chunks' batched heads equals the log-softmax of the Steps' downloaded
// logits (within 1e-6 relative: float losses, double sums in another order), fp32 and
// bf16, both families, over two chunks; on the emulated device what crosses to the host is
// 3 doubles a scored token (its max, sum and target logit), not its V logits.
TEST_F(CudaTest, LossesOnTheDeviceAreTheLogSoftmaxOfTheStepsLogits) {
  constexpr int64_t R = 8;  // chunks of 8 rows, as above
  for (const char* model : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(model);
    const Floats params = ParamsOf(dims, 101);
    const std::vector<int32_t> ids = testing::RandomTokens(dims.vocab, R + 5, 102);
    const int64_t n = static_cast<int64_t>(ids.size());
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(::testing::Message() << model << (precision == Precision::kFp32 ? " fp32" : " bf16"));
      auto stepped = DecoderOn(dims, params, Device::kCuda, precision);
      std::vector<double> want(n - 1);
      Floats logits(dims.vocab);
      for (int64_t i = 0; i + 1 < n; ++i) {
        stepped->Step(ids[i], logits.data());
        const double m = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float z : logits) sum += std::exp(double(z) - m);
        want[i] = m + std::log(sum) - logits[ids[i + 1]];
      }
      auto scored = DecoderOn(dims, params, Device::kCuda, precision);
      scored->set_feed_rows(R);
      Floats losses(n - 1, -1.f);
#ifdef MULTISCREEN_CUDA_EMULATED
      const uint64_t b0 = BytesToHost();
#endif
      scored->Losses(ids.data(), n, losses.data());
#ifdef MULTISCREEN_CUDA_EMULATED
      EXPECT_EQ(BytesToHost() - b0, uint64_t(3 * sizeof(double)) * uint64_t(n - 1));
#endif
      double worst = 0;
      for (int64_t i = 0; i + 1 < n; ++i) worst = std::max(worst, std::abs(losses[i] - want[i]) / want[i]);
      std::printf("%s %s: worst relative loss difference %.3g\n", model, precision == Precision::kFp32 ? "fp32" : "bf16", worst);
      EXPECT_LE(worst, 1e-6);
    }
  }
}

#ifdef MULTISCREEN_CUDA_EMULATED

// A greedy token costs 4 bytes to the host (its id) instead of its V logits (for Ψ = 8 at
// V = 50,257: 4 bytes where the host's argmax downloaded 201,028; tiny models here, as
// the count does not depend on the size: Ψ = 8 and transformer_8m took 31 s, emulated).
TEST_F(CudaTest, AGreedyTokenCopiesFourBytesToTheHostInsteadOfTheLogits) {
  for (const char* model : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(model);
    const Floats params = ParamsOf(dims, 93);
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      auto decoder = DecoderOn(dims, params, Device::kCuda, precision);
      Floats logits(dims.vocab);
      decoder->Step(1, nullptr);
      const uint64_t b0 = BytesToHost();
      const int32_t next = decoder->Argmax();  // the greedy choice: one int32 back
      decoder->Step(next, nullptr);            // the next token: nothing back
      const uint64_t b1 = BytesToHost();
      decoder->Step(2, logits.data());  // as the host's argmax took it: the logits
      const uint64_t b2 = BytesToHost();
      std::printf("%s %s: a greedy token copies %llu bytes to the host; with its logits %llu\n", model,
                  precision == Precision::kFp32 ? "fp32" : "bf16", static_cast<unsigned long long>(b1 - b0),
                  static_cast<unsigned long long>(b2 - b1));
      EXPECT_EQ(b1 - b0, 4u) << model;
      EXPECT_EQ(b2 - b1, uint64_t(4 * dims.vocab)) << model;
      // A continuation of 6 tokens from a prompt of 3: 6 ids, nothing else.
      auto fresh = DecoderOn(dims, params, Device::kCuda, precision);
      const uint64_t b3 = BytesToHost();
      EXPECT_EQ(GreedyContinuation(*fresh, {5, 6, 7}, 6).size(), 6u);
      EXPECT_EQ(BytesToHost() - b3, 6u * 4u) << model;
    }
  }
}

// What one decoded token ran on the emulated device (cuda_emulator/emulator.h's tally):
// kernel launches and cuBLAS products, copies, and the threads of the GEMMs' 16-bit
// packing kernel (one thread per element converted, up to a block's 256).
struct TokenWork {
  uint64_t launches = 0, copies = 0, packed = 0;
};

TokenWork Tally() {
  TokenWork w;
  for (const auto& [name, tally] : msemu::WorkTallies()) {
    if (tally.kind == msemu::WorkKind::kCopy) w.copies += tally.calls;
    if (tally.kind == msemu::WorkKind::kKernel || tally.kind == msemu::WorkKind::kLibrary) w.launches += tally.calls;
    if (name.find("PackKernel") != std::string::npos) w.packed += tally.threads;
  }
  return w;
}

// The work of the third token a fresh decoder on the device takes (the first two make
// the GEMM plans and the caches' first blocks).
TokenWork WorkOfAToken(const ModelDims& dims, const Floats& params, const InferenceOptions& options,
                       Precision precision) {
  DeviceArray<float> p(Device::kCuda);
  p.Resize(static_cast<int64_t>(params.size()));
  p.CopyFromHost(params.data());
  ModelOptions placement;
  placement.device = Device::kCuda;
  placement.precision = precision;
  auto decoder = MakeDecoder<float>(dims, p.data(), options, placement);
  Floats logits(dims.vocab);
  decoder->Step(1, logits.data());
  decoder->Step(2, logits.data());
  const TokenWork before = Tally();
  decoder->Step(3, logits.data());
  const TokenWork after = Tally();
  return {after.launches - before.launches, after.copies - before.copies, after.packed - before.packed};
}

// Under bf16 a token's GEMMs read weights packed once by the session: each GEMM converts
// its activation row alone (one packing launch of ⌈k/256⌉ blocks), and the launches beyond
// fp32's are those packings and Multiscreen's rounding of P, no more. Before the weights
// were packed once, every token converted every weight matrix again.
TEST_F(CudaTest, Bf16DecodingConvertsActivationsOnlyAndLaunchesOnePackingPerGemm) {
  auto blocks = [](int64_t k) { return uint64_t((k + 255) / 256 * 256); };  // threads packing a [1, k] row
  for (const DecoderCase& c : {kDecoderCases[0], kDecoderCases[6], kDecoderCases[11]}) {
    const ModelDims dims = DimsOf(c);
    const Floats params = ParamsOf(dims, 81);
    const InferenceOptions options = OptionsOf(c);
    const TokenWork fp32 = WorkOfAToken(dims, params, options, Precision::kFp32);
    const TokenWork bf16 = WorkOfAToken(dims, params, options, Precision::kBf16);
    const int64_t L = dims.n_layers, dE = dims.d_e;
    // Each GEMM's activation row: Multiscreen's x (W_cat), U (W_O); the Transformer's a
    // (W_QKV), o (W_O), a (W_gate; W_up), the SwiGLU hidden row (W_down); the head's y.
    const uint64_t gemms = (dims.transformer() ? 4 : 2) * L + 1;
    const uint64_t packed = dims.transformer()
                                ? L * (3 * blocks(dE) + blocks(dims.d_ff())) + blocks(dE)
                                : L * (blocks(dE) + blocks(dims.n_heads * dims.d_v)) + blocks(dE);
    const uint64_t rounded = dims.transformer() ? 0 : L;  // Multiscreen's P, as the forward rounds it
    std::printf("%s: a token launches %llu (fp32) and %llu (bf16), copies %llu and %llu; bf16 converts %llu elements\n",
                c.name.c_str(), static_cast<unsigned long long>(fp32.launches),
                static_cast<unsigned long long>(bf16.launches), static_cast<unsigned long long>(fp32.copies),
                static_cast<unsigned long long>(bf16.copies), static_cast<unsigned long long>(bf16.packed));
    EXPECT_EQ(bf16.launches, fp32.launches + gemms + rounded) << c.name;
    EXPECT_EQ(bf16.copies, fp32.copies) << c.name;
    EXPECT_EQ(fp32.packed, 0u) << c.name;
    EXPECT_EQ(bf16.packed, packed) << c.name;
  }
}
#endif  // MULTISCREEN_CUDA_EMULATED

}  // namespace
}  // namespace multiscreen

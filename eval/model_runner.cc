#include "eval/model_runner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/rms_norm.h"
#include "model/decoder.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace multiscreen::eval {

absl::StatusOr<RunnerDevice> ParseRunnerDevice(const std::string* device, const std::string* precision,
                                               const char* command) {
  RunnerDevice d;
  const std::string dev = device != nullptr ? absl::AsciiStrToLower(*device) : "cpu";
  if (dev == "cuda") {
    d.device = Device::kCuda;
  } else if (dev != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device=", dev, ": expected cpu or cuda (", command, "'s default: cpu)"));
  }
  const std::string prec = precision != nullptr ? absl::AsciiStrToLower(*precision) : "fp32";
  if (prec == "bf16") {
    d.precision = Precision::kBf16;
  } else if (prec != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision=", prec, ": expected fp32 or bf16 (", command, "'s default: fp32)"));
  }
  return d;
}

absl::Status CheckRunnerDevice(const RunnerDevice& device) {
  if (device.device == Device::kCpu) return absl::OkStatus();
  auto table = MakeKernelTable<float>(device.device);
  if (table.ok()) return absl::OkStatus();
  return absl::Status(table.status().code(),
                      absl::StrCat("--device=", DeviceName(device.device), ": ", table.status().message()));
}

namespace {

ModelOptions StageOptions(const RunnerDevice& device) {
  ModelOptions o;
  o.device = device.device;
  o.precision = device.precision;
  o.forward_only = true;  // no gradient buffers (the same bits)
  return o;
}

}  // namespace

ModelRunner::ModelRunner(const Weights& weights, const InferenceOptions& options, RunnerDevice device)
    : weights_(weights),
      options_(options),
      device_(device),
      model_(MakeModelStage<float>(weights.dims, ShardSpec::Full(weights.dims), StageOptions(device))),
      params_(device.device),
      x_(device.device) {
  if (device.device == Device::kCpu) return;
  ops_ = KernelTableFor<float>(StageOptions(device));
  params_.Resize(static_cast<int64_t>(weights.params.size()));
  params_.CopyFromHost(weights.params.data());
}

void ModelRunner::Forward(const int32_t* ids, int64_t n) {
  const float* params = Params();
  model_->BeginStep(params);
  x_.Resize(n * dims().d_e);
  model_->Embed(params, ids, n, x_.data());
  model_->LayersForward(params, 1, n, x_.data(), &options_);
  last_n_ = n;
  last_token_ = -1;
}

void ModelRunner::TokenLossesFull(const int32_t* ids, int64_t n, float* losses) {
  const int64_t T = n - 1;
  Forward(ids, T);
  targets_.assign(ids + 1, ids + n);
  // The per-token losses come back to host memory (on a device: complete on return).
  model_->HeadLoss(Params(), x_.data(), targets_.data(), T, nullptr, nullptr, 1.0, losses);
}

void ModelRunner::TokenLossesDecode(const int32_t* ids, int64_t n, float* losses) {
  auto session = MakeDecoder<float>(dims(), Params(), options_, StageOptions(device_));
  session->Losses(ids, n, losses);
}

std::vector<int32_t> ModelRunner::Greedy(const std::vector<int32_t>& prompt, int64_t max_new,
                                         const OnToken& on_token) {
  auto session = MakeDecoder<float>(dims(), Params(), options_, StageOptions(device_));
  return GreedyContinuation(*session, prompt, max_new, on_token);
}

int32_t ModelRunner::Prefill(const int32_t* ids, int64_t n, bool first_token) {
  Forward(ids, n);
  const int64_t dE = dims().d_e;
  if (device_.device == Device::kCpu) {
    last_token_ = HostArgmax(x_.data() + (n - 1) * dE);
    return last_token_;
  }
  // The head over the last row on the device: its V logits and their log-sum-exp (the
  // target is immaterial; the loss is not looked at).
  const int32_t target = 0;
  float loss = 0;
  model_->HeadLoss(Params(), x_.data() + (n - 1) * dE, &target, 1, nullptr, nullptr, 1.0, &loss);
  ops_->Synchronize();
  return first_token ? LastToken() : -1;
}

int32_t ModelRunner::LastToken() {
  if (last_token_ >= 0 || last_n_ == 0) return last_token_;
  const int64_t dE = dims().d_e;
  if (device_.device == Device::kCpu) {
    last_token_ = HostArgmax(x_.data() + (last_n_ - 1) * dE);
  } else {
    row_.resize(dE);
    ops_->Download(x_.data() + (last_n_ - 1) * dE, dE, row_.data());
    last_token_ = HostArgmax(row_.data());
  }
  return last_token_;
}

void ModelRunner::Synchronize() {
  if (ops_ != nullptr) ops_->Synchronize();
}

int32_t ModelRunner::HostArgmax(const float* x) const {
  const ModelDims& d = dims();
  const int64_t dE = d.d_e;
  const float* params = weights_.params.data();
  // The last position's logits (spec step 14): z_v = e^{s_F} · (x/‖x‖) · W_E[v]/‖W_E[v]‖;
  // for the Transformer e^{s_F} and the unit rows of W_E only with sio, and RMSNorm(x)
  // without gain in place of x/‖x‖ unless pl_norm.
  const ParamLayout& layout = model_->layout();
  const float* w_e = params + layout.Find("embed/W_E")->buffer_offset;
  const bool unit_table = !d.transformer() || d.sio;
  double x_scale = 1.0;
  if (d.pl_norm) {
    double x_norm = 0;
    for (int64_t c = 0; c < dE; ++c) x_norm += double(x[c]) * x[c];
    x_scale = 1.0 / std::max(std::sqrt(x_norm), 1e-12);
  } else if (d.transformer()) {
    float rstd;
    std::vector<float> y(dE);
    kernels::cpu::RmsNormForward(x, static_cast<const float*>(nullptr), y.data(), &rstd, 1, dE);
    x_scale = rstd;
  }
  const ParamEntry* s_f = layout.Find("head/s_F");
  const double scale = (s_f != nullptr ? std::exp(double(params[s_f->buffer_offset])) : 1.0) * x_scale;
  int32_t best = 0;
  double best_z = -INFINITY;
  for (int64_t v = 0; v < d.vocab; ++v) {
    const float* row = w_e + v * dE;
    double dot = 0, norm = 0;
    for (int64_t c = 0; c < dE; ++c) dot += double(x[c]) * row[c], norm += double(row[c]) * row[c];
    const double z = scale * dot / (unit_table ? std::max(std::sqrt(norm), 1e-12) : 1.0);
    if (z > best_z) best_z = z, best = static_cast<int32_t>(v);
  }
  return best;
}

namespace {

// The estimates are computed in double: a length near INT64_MAX (--seq_len=9223372036854775807)
// saturates to INT64_MAX bytes, which no memory holds, instead of wrapping to a small number.
int64_t SaturatedBytes(double bytes) {
  return bytes >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

}  // namespace

int64_t ModelRunner::FullPassBytes(int64_t n) const {
  const ModelDims& d = dims();
  double floats;
  if (d.transformer()) {
    // Per layer: x_in, xn1, qkv, q, k, v, o, x_mid, xn2 (11 d_E), gu and h (3 d_ff), two rstd.
    const double per_layer = 11.0 * d.d_e + 3.0 * d.d_ff() + 2;
    floats = double(n) * (d.n_layers * per_layer + 4.0 * d.d_e) + 2.0 * 512 * d.vocab + 2.0 * d.vocab * d.d_e;
  } else {
    const double C = 2.0 * d.d_k + 2.0 * d.d_v;
    // Per layer: x_in, P, U, q̃, k̃, v̄, h and three norms (LayersForward keeps them all).
    const double per_layer = d.d_e + d.n_heads * (C + 3.0 * d.d_v + 2.0 * d.d_k + 3);
    floats = double(n) * (d.n_layers * per_layer + 4.0 * d.d_e) + 2.0 * 512 * d.vocab + 2.0 * d.vocab * d.d_e;
  }
  if (device_.device != Device::kCpu) {
    // On the device besides the resident parameters: BeginStep's packed copies of the
    // layers' weights (about the parameters once) and, under bf16, Ē's rounded copy, the
    // GEMMs' 16-bit copies of both (KernelTable::PackRounded: half a float each), each
    // layer's 16-bit GEMM activations (Multiscreen x and U; the Transformer's two RMSNorm
    // outputs, o and h) and the head's y.
    floats += double(weights_.params.size());
    if (device_.precision != Precision::kFp32) {
      const double gemm_inputs =
          d.transformer() ? 2.0 * d.d_e + d.n_heads * d.d_k + d.d_ff() : d.d_e + double(d.n_heads) * d.d_v;
      floats += 1.5 * double(d.vocab) * d.d_e + 0.5 * double(weights_.params.size()) +
                0.5 * double(n) * (d.n_layers * gemm_inputs + d.d_e);
    }
  }
  return SaturatedBytes(floats * 4);
}

int64_t ModelRunner::DecodeBytes(int64_t n) const {
  const ModelDims& d = dims();
  const bool on_device = device_.device != Device::kCpu;
  double cache = 0, fixed = 0;  // floats: the caches; the packed weights, the table, a chunk's rows and logits
  const double rows = double(std::min(n, Decoder<float>::kFeedRows));
  if (d.transformer()) {
    // Keys and values of every token in every layer, the packed W_QKV, the table; a chunk's
    // x, a, o, [q | k | v], [gate | up], hidden and rstd.
    cache = 2.0 * double(n) * d.n_layers * d.d_e;
    fixed = 3.0 * d.n_layers * d.d_e * d.d_e + double(d.vocab) * d.d_e + rows * (6.0 * d.d_e + 3.0 * d.d_ff() + 1 + d.vocab);
  } else {
    const ParamLayout& layout = model_->layout();
    double slots = 0;
    for (int64_t l = 0; l < d.n_layers; ++l) {
      for (const auto& t : MapTileScalars(layout, weights_.params.data(), l, &options_)) {
        // A device's ring keeps kDecodeRows − 1 slots beyond the window (StepRows' chunks).
        const double ring = std::ceil(double(t.w)) + (on_device ? kernels::kDecodeRows - 1 : 0);
        slots += std::isinf(t.w) ? double(n) : std::min(double(n), ring);
      }
    }
    cache = slots * (d.d_k + d.d_v + 3);
    // Ē; a chunk's x, P, U and logits.
    const double p_cols = 2.0 * d.d_k + (d.output_gate ? 2 : 1) * d.d_v;
    fixed = double(d.vocab) * d.d_e + rows * (d.d_e + d.n_heads * (p_cols + d.d_v) + d.vocab);
  }
  // On a device the cache buffers grow by doubling (up to twice what they hold), and the
  // session's packed (under bf16, rounded) copies of the weights are about the parameters once.
  if (on_device) cache *= 2, fixed += double(weights_.params.size());
  return SaturatedBytes((cache + fixed) * 4);
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

int64_t DeviceFreeBytes() {
#ifdef MULTISCREEN_HAVE_CUDA
  size_t free_bytes = 0, total = 0;
  if (CudaAvailable() && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) return static_cast<int64_t>(free_bytes);
#endif
  return 0;
}

}  // namespace multiscreen::eval

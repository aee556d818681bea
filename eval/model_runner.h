// The model as the evaluations use it, through its public API only, for either family
// (Multiscreen, or the Transformer baseline of issue 18): per-token losses of a window
// (the model stage's inference forward — BeginStep, Embed, LayersForward with
// Multiscreen's inference window rule, HeadLoss — or the decoding cache, token by token),
// greedy continuation, and the prefill of time to first token; memory estimates for
// refusing contexts that do not fit.
//
// Where it runs (RunnerDevice, eval's and generate's --device and --precision): the full
// forward and the decoding cache (model/decoder.h) on the CPU or on a CUDA device, in fp32
// or with bf16 GEMM operands (and on the device, at d_K = 16 and d_V = 64, the full
// forward's tiled screening kernels: kernels/kernel_table.h). Parameters are uploaded
// once, at construction; token ids, logits and losses stay in host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/weights_file.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "kernels/precision_name.h"
#include "model/decoder.h"
#include "model/model_stage.h"
#include "model/tile_weights.h"

namespace multiscreen::eval {

// Where the full forward runs and in which precision (eval --device, --precision).
struct RunnerDevice {
  Device device = Device::kCpu;
  Precision precision = Precision::kFp32;  // kFp32 or kBf16
};

// "fp32" | "bf16" | "fp16" (kernels/precision_name.h).
using ::multiscreen::PrecisionName;

// The device and precision an inference command's --device and --precision name (null:
// the flag was not given: cpu, fp32, whatever train's --device default is): cpu or cuda
// (case-insensitive), fp32 or bf16. Errors (one line naming the flag and `command`'s
// default, e.g. "--device=tpu: expected cpu or cuda (eval's default: cpu)").
absl::StatusOr<RunnerDevice> ParseRunnerDevice(const std::string* device, const std::string* precision,
                                               const char* command);

// Whether this build and machine can run `device` (always on the CPU). Errors: the kernel
// table factory's (no CUDA kernels in this build, no device visible, a driver too old),
// as "--device=cuda: <why>".
absl::Status CheckRunnerDevice(const RunnerDevice& device);

class ModelRunner {
 public:
  // `weights` must outlive the runner. A device that CheckRunnerDevice refuses is fatal
  // here (one line naming --device): check it first.
  ModelRunner(const Weights& weights, const InferenceOptions& options, RunnerDevice device = {});

  const ModelDims& dims() const { return weights_.dims; }
  const InferenceOptions& options() const { return options_; }
  const RunnerDevice& device() const { return device_; }

  // losses[i] = −log p(ids[i+1] | ids[0..i]) for i < n − 1, in nats, from one forward pass
  // over the n − 1 inputs (with the window rule; equal to `forward`'s token_losses under
  // as-learned windows), on the runner's device.
  void TokenLossesFull(const int32_t* ids, int64_t n, float* losses);
  // The same from the decoding cache (Decoder::Losses: the layers' GEMMs and the head over
  // chunks of Decoder::kFeedRows tokens, the caches stepped a token at a time; memory: the
  // caches and a chunk, not T × rows), on the runner's device (each token's log-sum-exp
  // and target logit brought to the host, not its logits).
  void TokenLossesDecode(const int32_t* ids, int64_t n, float* losses);

  // Greedy continuation of `prompt` by `max_new` tokens (the argmax, the lowest id on
  // ties, taken on the runner's device: one int32 a token crosses) with the decoding cache
  // on the runner's device: the tokens `multiscreen generate` prints for the same prompt
  // and device. on_token: GreedyContinuation's (each token as chosen; false stops there).
  std::vector<int32_t> Greedy(const std::vector<int32_t>& prompt, int64_t max_new, const OnToken& on_token = nullptr);

  // Time-to-first-token work: the inference forward over ids [n] (batch 1) and the head
  // over the last position, complete on return (a device synchronized). On the CPU the
  // head is the argmax over the logits in double, which is returned. On a device the head
  // (logits and log-sum-exp of the last row) runs there; with first_token the argmax is
  // then taken on the host as LastToken does, else −1 is returned and the timed work is
  // the device's alone.
  int32_t Prefill(const int32_t* ids, int64_t n, bool first_token = true);
  // The argmax of the last position's logits of the last Prefill, from its final hidden
  // row, in double on the host.
  int32_t LastToken();
  // Waits for the device's work issued so far (nothing on the CPU): for timers.
  void Synchronize();

  // Estimated peak bytes of TokenLossesFull / Prefill over n tokens on the runner's device
  // (activations of every layer, the head's chunk, Ē; on a device also the packed copies
  // of the weights BeginStep makes — the uploaded parameters are resident already, so
  // compare it with DeviceFreeBytes read after construction), and of TokenLossesDecode /
  // Greedy over n tokens on the runner's device (the caches: Multiscreen ⌈w⌉ keys per
  // finite-window tile, n per infinite one; the Transformer n keys and values per layer;
  // on a device twice that, as its buffers grow by doubling, with kDecodeRows − 1 more
  // slots a finite window's ring, and the packed weights; the
  // activations of a prompt chunk's Decoder::kFeedRows rows). Both saturate at INT64_MAX bytes rather than overflow.
  int64_t FullPassBytes(int64_t n) const;
  int64_t DecodeBytes(int64_t n) const;

 private:
  // BeginStep, Embed and LayersForward over ids [n]: x_ holds the final hidden rows.
  void Forward(const int32_t* ids, int64_t n);
  // The argmax over the vocabulary of e^{s_F} · PLNorm(x) · Ē (the model's head), in double.
  int32_t HostArgmax(const float* x) const;
  const float* Params() const { return device_.device == Device::kCpu ? weights_.params.data() : params_.data(); }

  const Weights& weights_;
  InferenceOptions options_;
  RunnerDevice device_;
  std::unique_ptr<ModelStage<float>> model_;
  std::unique_ptr<kernels::KernelTable<float>> ops_;  // a device's transfers and Synchronize; null on the CPU
  DeviceArray<float> params_, x_;                      // params_: the device's copy (empty on the CPU)
  std::vector<float> row_;  // a device's last hidden row, downloaded for LastToken
  std::vector<int32_t> targets_;
  int64_t last_n_ = 0;      // rows of x_ from the last forward
  int32_t last_token_ = -1;  // LastToken's value once taken
};

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t AvailableMemoryBytes();

// Free memory of the current CUDA device (cudaMemGetInfo) in bytes; 0 when unknown (a
// build without CUDA, no device).
int64_t DeviceFreeBytes();

}  // namespace multiscreen::eval

// The CUDA Transformer kernels (cuda_transformer_kernels.h): one call per op into the
// op families, on the process's table stream (table_stream.h), with their scratch. The attention's host
// arrays (scale, lse, d_scale) are copied inside attention.cu and attention_tiled.cu.
// The attention's RoPE: fused into the tiled kernel where it takes the call (a table of
// cosines and sines made once per length and scaling, no pass over q or k); elsewhere
// (the simple kernel, or a call the tiled one does not take) turned copies of q and k,
// one RopePair launch, before the kernel, and dq, dk turned back in place after.
#include "kernels/cuda/cuda_transformer_kernels.h"

#include <cuda_runtime.h>

#include <initializer_list>
#include <tuple>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/device_check.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/table_stream.h"

namespace multiscreen::kernels::cuda {
namespace {

class CudaTransformerKernels final : public TransformerKernels<float> {
 public:
  CudaTransformerKernels(cudaStream_t stream, bool tiled_attention)
      : stream_(stream), tiled_attention_(tiled_attention) {}
  ~CudaTransformerKernels() override { cudaStreamSynchronize(stream_); }

  Device device() const override { return Device::kCuda; }
  void RmsNormForward(const float* x, const float* gain, float* y, float* rstd, int64_t rows, int64_t d) override {
    cuda::RmsNormForward(x, gain, y, rstd, rows, d, stream_);
  }
  void RmsNormBackward(const float* x, const float* gain, const float* rstd, const float* dy, float* dx, float* dgain,
                       int64_t rows, int64_t d, bool accumulate) override {
    cuda::RmsNormBackward(x, gain, rstd, dy, dx, dgain, rows, d, accumulate, &rms_norm_, stream_);
  }
  void AttentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                        const double* scale, float* o, double* lse, const cpu::RopeScaling* rope) override {
    const bool fused = rope != nullptr && Fuses(shape, {q, k, v, o});
    if (rope != nullptr && !fused) Turn(shape, &q, &k, *rope);
    if (tiled_attention_) {  // simple where it must
      cuda::AttentionTiledForward(shape, q, k, v, scale, o, lse, &attention_, stream_, AttentionOperands::kSplit,
                                  fused ? RopeTableFor(shape, *rope) : nullptr);
    } else {
      cuda::AttentionForward(shape, q, k, v, scale, o, lse, &attention_, stream_);
    }
  }
  void AttentionBackward(const AttentionShape& shape, const float* q, const float* k, const float* v, const float* o,
                         const double* lse, const float* d_o, const double* scale, float* dq, float* dk, float* dv,
                         double* d_scale, const cpu::RopeScaling* rope) override {
    const bool fused = rope != nullptr && Fuses(shape, {q, k, v, d_o, dq, dk, dv});
    if (rope != nullptr && !fused) Turn(shape, &q, &k, *rope);
    if (tiled_attention_) {
      cuda::AttentionTiledBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, &attention_, stream_,
                                   AttentionOperands::kSplit, fused ? RopeTableFor(shape, *rope) : nullptr);
    } else {
      cuda::AttentionBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, &attention_, stream_);
    }
    if (rope != nullptr && !fused) {  // ∂L/∂q = RoPE(·)ᵀ ∂L/∂q̃, likewise k
      cuda::RopePair(dq, dk, dq, dk, shape.heads * shape.d_h, shape.batch, shape.seq, shape.heads, shape.d_h,
                     /*inverse=*/true, stream_, *rope);
    }
  }
  void SwiGluForward(const float* gu, float* h, int64_t rows, int64_t f) override {
    cuda::SwiGluForward(gu, h, rows, f, stream_);
  }
  void SwiGluBackward(const float* gu, const float* dh, float* dgu, int64_t rows, int64_t f) override {
    cuda::SwiGluBackward(gu, dh, dgu, rows, f, stream_);
  }

 private:
  // Whether the tiled kernel runs this call, with RoPE fused (its table 16-byte aligned,
  // as DeviceArray's allocations are).
  bool Fuses(const AttentionShape& shape, std::initializer_list<const float*> arrays) const {
    return tiled_attention_ && shape.seq > 0 && cuda::AttentionTiledTakes(shape, arrays);
  }
  // A RopeTable of at least positions 0 … T − 1 for `scaling`: the last call's, unless
  // the width or scaling differs or it is shorter (one launch then; none in a training run
  // of one length).
  const float* RopeTableFor(const AttentionShape& shape, const cpu::RopeScaling& scaling) {
    const auto key = std::make_tuple(shape.d_h, scaling.factor, scaling.original_len, scaling.alpha, scaling.beta,
                                     scaling.ramp);
    if (rope_rows_ < shape.seq || key != rope_key_) {
      rope_table_.Resize(shape.seq * shape.d_h);
      cuda::RopeTable(rope_table_.data(), shape.seq, shape.d_h, stream_, scaling);
      rope_rows_ = shape.seq;
      rope_key_ = key;
    }
    return rope_table_.data();
  }
  // *q, *k pointed at turned copies RoPE(q), RoPE(k) (one launch).
  void Turn(const AttentionShape& shape, const float** q, const float** k, const cpu::RopeScaling& scaling) {
    const int64_t ld = shape.heads * shape.d_h, n = shape.batch * shape.seq * ld;
    q_turned_.Resize(n);
    k_turned_.Resize(n);
    cuda::RopePair(*q, *k, q_turned_.data(), k_turned_.data(), ld, shape.batch, shape.seq, shape.heads, shape.d_h,
                   /*inverse=*/false, stream_, scaling);
    *q = q_turned_.data();
    *k = k_turned_.data();
  }

  cudaStream_t stream_;
  bool tiled_attention_;  // AttentionTiledForward/Backward, else the simple kernels
  RmsNormScratch rms_norm_;
  AttentionScratch attention_;
  DeviceArray<float> rope_table_{Device::kCuda};  // [rope_rows_, d_h]: RopeTable of rope_key_
  int64_t rope_rows_ = 0;
  std::tuple<int64_t, double, double, double, double, cpu::YarnRamp> rope_key_;  // d_h, the scaling
  DeviceArray<float> q_turned_{Device::kCuda}, k_turned_{Device::kCuda};   // the unfused RoPE's copies
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerKernels<float>>> MakeCudaTransformerKernels(const KernelOptions& options) {
  absl::StatusOr<bool> tiled = TiledAttention(options);
  if (!tiled.ok()) return tiled.status();
  if (absl::Status usable = CheckCudaDevice(); !usable.ok()) return usable;
  // The table stream, as the kernel table's (cuda_kernel_table.cu says why).
  return std::unique_ptr<TransformerKernels<float>>(new CudaTransformerKernels(TableStream(), *tiled));
}

}  // namespace multiscreen::kernels::cuda

// The CUDA Transformer kernels (cuda_transformer_kernels.h): one call per op into the
// op families, on the legacy default stream, with their scratch. The attention's host
// arrays (scale, lse, d_scale) are copied inside attention.cu and attention_tiled.cu.
#include "kernels/cuda/cuda_transformer_kernels.h"

#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/device_check.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

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
  void Rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse,
            const cpu::RopeScaling& scaling) override {
    cuda::Rope(x, ld, B, T, heads, d_h, inverse, stream_, scaling);
  }
  void AttentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                        const double* scale, float* o, double* lse) override {
    if (tiled_attention_) {
      cuda::AttentionTiledForward(shape, q, k, v, scale, o, lse, &attention_, stream_);  // simple where it must
    } else {
      cuda::AttentionForward(shape, q, k, v, scale, o, lse, &attention_, stream_);
    }
  }
  void AttentionBackward(const AttentionShape& shape, const float* q, const float* k, const float* v, const float* o,
                         const double* lse, const float* d_o, const double* scale, float* dq, float* dk, float* dv,
                         double* d_scale) override {
    if (tiled_attention_) {
      cuda::AttentionTiledBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, &attention_, stream_);
    } else {
      cuda::AttentionBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, &attention_, stream_);
    }
  }
  void SwiGluForward(const float* gu, float* h, int64_t rows, int64_t f) override {
    cuda::SwiGluForward(gu, h, rows, f, stream_);
  }
  void SwiGluBackward(const float* gu, const float* dh, float* dgu, int64_t rows, int64_t f) override {
    cuda::SwiGluBackward(gu, dh, dgu, rows, f, stream_);
  }

 private:
  cudaStream_t stream_;
  bool tiled_attention_;  // AttentionTiledForward/Backward, else the simple kernels
  RmsNormScratch rms_norm_;
  AttentionScratch attention_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerKernels<float>>> MakeCudaTransformerKernels(const KernelOptions& options) {
  absl::StatusOr<bool> tiled = TiledAttention(options);
  if (!tiled.ok()) return tiled.status();
  if (absl::Status usable = CheckCudaDevice(); !usable.ok()) return usable;
  // The legacy default stream, as the kernel table's (cuda_kernel_table.cu says why).
  return std::unique_ptr<TransformerKernels<float>>(new CudaTransformerKernels(cudaStreamLegacy, *tiled));
}

}  // namespace multiscreen::kernels::cuda

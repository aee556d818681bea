// General matrix multiply on a CUDA device through cuBLASLt, the twin of
// kernels/cpu/gemm.h (row-major C = alpha · op(A) · op(B) + beta · C), and the
// transposed move-add beside it. Row-major operands are handed to the column-major
// library as their transposes: C[m, n]ᵀ = op(B)ᵀ op(A)ᵀ, so A and B swap places and
// m and n swap, with the same strides.
//   kFp32: fp32 operands, CUBLAS_COMPUTE_32F (exact fp32 products, no TF32).
//   kBf16 / kFp16: A and B converted, in one launch, into packed 16-bit scratch copies (exact where
//   the caller rounded them; round to nearest even otherwise), fp32 accumulation and
//   fp32 C, alpha and beta as given; or (RunPackedB) B packed once beforehand (Pack: the
//   decoders' weights) and A alone converted per call; or (RunPacked) both packed
//   beforehand (the training step's weights, activations and gradients, each once).
// Matmul descriptors, layouts and the chosen algorithm are cached per shape, stride
// and pointer alignment; a shape with no cuBLASLt heuristic (or k = 0) runs
// cublasSgemm on the fp32 operands instead. Failures are fatal (check.h).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

class GemmRunner {
 public:
  // Loads cuBLAS(Lt) if no runner did yet (LoadCublas), creates the cuBLASLt and cuBLAS
  // handles and the workspace for `stream`.
  // Errors: LoadCublas's; handle creation failure (with cuBLAS's status string).
  static absl::StatusOr<std::unique_ptr<GemmRunner>> Create(cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // C[m, n] = alpha · op(A) · op(B) + beta · C, row-major: op(A) is [m, k] (A stored
  // [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when trans_b); lda, ldb,
  // ldc are the stored row strides in elements. All pointers on the device.
  void Run(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
  // Run under kBf16 or kFp16 with both operands already in that 16-bit format (a16, b16,
  // made by Pack or PackRounded; lda, ldb their row strides): the product of the same
  // values Run computes on their fp32 values. Converts nothing; where cuBLASLt has no
  // algorithm for the shape, both are widened back to fp32 (exactly) for cublasSgemm.
  void RunPacked(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a16, int64_t lda, const uint16_t* b16, int64_t ldb, float beta, float* c,
                 int64_t ldc);
  // RunPacked with beta = 0 and C in the operands' 16-bit format (c16, row stride ldc): cuBLASLt
  // stores the fp32 result rounded once to nearest even (a bf16 D under CUBLAS_COMPUTE_32F);
  // where it has no algorithm, RunPacked's fp32 product into scratch, then packed (ldc must
  // equal n there). The same values as RunPacked followed by RoundTo, in one product.
  void RunPackedTo16(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t* a16, int64_t lda, const uint16_t* b16, int64_t ldb, uint16_t* c16, int64_t ldc);
  // RunPacked with A fp32, converted alone (one launch, A's elements): the decoders' rows.
  void RunPackedB(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const uint16_t* b16, int64_t ldb, float beta, float* c, int64_t ldc);
  // dst [n] = src [n] in `precision`'s 16-bit format (kBf16 or kFp16), rounded to nearest
  // even as Run's packing rounds: an operand for RunPacked, made once. One launch.
  void Pack(Precision precision, const float* src, int64_t n, uint16_t* dst);
  // Pack that also rounds x in place to the 16-bit format's values (RoundTo), in the same
  // launch: an activation that a later kernel reads in fp32 as well.
  void PackRounded(Precision precision, float* x, int64_t n, uint16_t* dst);

 private:
  // What a cached plan depends on: precision, transposes, sizes, strides, alignments, C 16-bit.
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, bool>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // the column-major A', B', C
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
    std::string name;  // "cublasLtMatmul NxMxK op(A)=.. op(B)=.. bf16,bf16->f32": the product as reported (kernel_times.h)
  };

  GemmRunner(const CublasLibrary& cublas, cudaStream_t stream, cublasLtHandle_t lt, cublasHandle_t blas);
  // "FN NxMxK op(A)=.. op(B)=.. T,T->OUT" of the row-major product m×n×k (kernel_times.h).
  static std::string ProductName(const char* fn, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                 const char* type, const char* out_type);
  // out16: C and D in the operands' 16-bit type (RunPackedTo16), else fp32.
  Plan& PlanFor(const Key& key, Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                int64_t lda, int64_t ldb, int64_t ldc, int align_a, int align_b, int align_c, bool out16);
  // The plan's product on operands as the library reads them (a and b swapped into its
  // column-major view), with the plan's algorithm or, where it has none, the library's
  // choice; false when the plan's algorithm refuses the call (then dropped from the plan).
  bool Matmul(Plan& plan, float alpha, const void* a, const void* b, float beta, void* c);
  // The [rows, cols] block of src (row stride ld) packed into dst (compact), one launch.
  void Pack(Precision precision, const float* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst);
  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

  const CublasLibrary& cublas_;  // cublas_library.h: loaded by Create
  cudaStream_t stream_;
  cublasLtHandle_t lt_;
  cublasHandle_t blas_;
  DeviceArray<uint8_t> workspace_{Device::kCuda};
  DeviceArray<uint16_t> a16_{Device::kCuda}, b16_{Device::kCuda};  // packed 16-bit operand copies
  DeviceArray<float> a32_{Device::kCuda}, b32_{Device::kCuda};      // RunPacked's widened fallback operands
  DeviceArray<float> c32_{Device::kCuda};                           // RunPackedTo16's fallback fp32 product
  std::map<Key, Plan> plans_;
};

// b[j, i] += a[i, j], then a[i, j] = 0, for a [rows, cols] (row stride lda) and
// b [cols, rows] (ldb): 32×32 tiles through shared memory, each element owned by one
// thread (kernels/cpu/gemm.h's MoveAddTransposed).
void MoveAddTransposed(float* a, int64_t rows, int64_t cols, int64_t lda, float* b, int64_t ldb, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda

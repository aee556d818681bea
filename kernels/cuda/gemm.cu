// cuBLASLt GEMM with a cached plan per shape, and the transposed move-add (gemm.h).
#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;  // cuBLAS's recommendation for Hopper

// Largest power of two (≤ 256) dividing the address: what cuBLASLt may assume.
int Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// A [rows, cols] block of src (row stride ld) and the packed 16-bit copy it becomes.
struct PackOperand {
  const float* src;
  int64_t ld, rows, cols;
  void* dst;
};

// dst[r, c] = 16-bit(src[r, c]) for both operands of a GEMM in one launch: one
// grid-stride walk over a's elements, then b's.
template <typename Half>
__global__ void PackKernel(PackOperand a, PackOperand b) {
  const int64_t na = a.rows * a.cols, n = na + b.rows * b.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const PackOperand& o = i < na ? a : b;
    const int64_t j = i < na ? i : i - na;
    StoreHalf(o.src[(j / o.cols) * o.ld + j % o.cols], static_cast<Half*>(o.dst) + j);
  }
}

// x[i] rounded in place to the 16-bit format and that value's bits into dst[i].
template <typename Half>
__global__ void RoundPackKernel(float* x, int64_t n, Half* dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    StoreHalf(x[i], dst + i);
    x[i] = static_cast<float>(dst[i]);
  }
}

// dst[r, c] = fp32(src16[r·ld + c]) for a [rows, cols] block (exact: every 16-bit value is an fp32 one).
template <typename Half>
__global__ void WidenKernel(const Half* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<float>(src[(i / cols) * ld + i % cols]);
  }
}

// The [rows, cols] block of a 16-bit operand (row stride ld) widened into *dst (compact).
float* Widen(Precision precision, const uint16_t* src, int64_t ld, int64_t rows, int64_t cols,
             DeviceArray<float>* dst, cudaStream_t stream) {
  dst->Resize(rows * cols);
  if (rows * cols == 0) return dst->data();
  if (precision == Precision::kBf16) {
    Launch<WidenKernel<__nv_bfloat16>>(BlocksFor(rows * cols), kThreads, 0, stream,
                                       reinterpret_cast<const __nv_bfloat16*>(src), ld, rows, cols, dst->data());
  } else {
    Launch<WidenKernel<__half>>(BlocksFor(rows * cols), kThreads, 0, stream, reinterpret_cast<const __half*>(src),
                                ld, rows, cols, dst->data());
  }
  MS_CUDA_CHECK_LAUNCH("Gemm");
  return dst->data();
}

// The 16-bit copies of a and b (b may be empty: rows 0), one launch.
void Pack(Precision precision, const PackOperand& a, const PackOperand& b, cudaStream_t stream) {
  const unsigned blocks = BlocksFor(a.rows * a.cols + b.rows * b.cols);
  if (precision == Precision::kBf16) {
    Launch<PackKernel<__nv_bfloat16>>(blocks, kThreads, 0, stream, a, b);
  } else {
    Launch<PackKernel<__half>>(blocks, kThreads, 0, stream, a, b);
  }
  MS_CUDA_CHECK_LAUNCH("Gemm");
}

// Packs the [rows, cols] blocks of a and b into *a16 and *b16 (grown as needed), one
// launch; returns the packed copies.
std::pair<const void*, const void*> PackPair(Precision precision, const float* a, int64_t lda, int64_t rows_a,
                                             int64_t cols_a, const float* b, int64_t ldb, int64_t rows_b,
                                             int64_t cols_b, DeviceArray<uint16_t>* a16, DeviceArray<uint16_t>* b16,
                                             cudaStream_t stream) {
  a16->Resize(rows_a * cols_a);
  b16->Resize(rows_b * cols_b);
  Pack(precision, {a, lda, rows_a, cols_a, a16->data()}, {b, ldb, rows_b, cols_b, b16->data()}, stream);
  return {a16->data(), b16->data()};
}

constexpr int kTile = 32, kTileRows = 8;

// One 32×32 tile of a per block: read rows of a (coalesced), write rows of b.
__global__ void MoveAddTransposedKernel(float* a, int64_t rows, int64_t cols, int64_t lda, float* b, int64_t ldb) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t i0 = int64_t(blockIdx.y) * kTile, j0 = int64_t(blockIdx.x) * kTile;
  for (int y = threadIdx.y; y < kTile; y += kTileRows) {
    const int64_t i = i0 + y, j = j0 + threadIdx.x;
    if (i < rows && j < cols) {
      tile[y][threadIdx.x] = a[i * lda + j];
      a[i * lda + j] = 0.f;
    }
  }
  __syncthreads();
  for (int y = threadIdx.y; y < kTile; y += kTileRows) {
    const int64_t j = j0 + y, i = i0 + threadIdx.x;
    if (i < rows && j < cols) b[j * ldb + i] += tile[threadIdx.x][y];
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Create(cudaStream_t stream) {
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  if (!library.ok()) return library.status();
  const CublasLibrary& cublas = **library;
  cublasLtHandle_t lt = nullptr;
  if (const cublasStatus_t s = cublas.cublasLtCreate(&lt); s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cuBLASLt handle creation failed: ", cublas.cublasGetStatusString(s)));
  }
  cublasHandle_t blas = nullptr;
  if (const cublasStatus_t s = cublas.cublasCreate(&blas); s != CUBLAS_STATUS_SUCCESS) {
    cublas.cublasLtDestroy(lt);
    return absl::InternalError(absl::StrCat("cuBLAS handle creation failed: ", cublas.cublasGetStatusString(s)));
  }
  cublasStatus_t s = cublas.cublasSetStream(blas, stream);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublas.cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);  // no TF32
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublas.cublasDestroy(blas);
    cublas.cublasLtDestroy(lt);
    return absl::InternalError(absl::StrCat("cuBLAS handle setup failed: ", cublas.cublasGetStatusString(s)));
  }
  std::unique_ptr<GemmRunner> runner(new GemmRunner(cublas, stream, lt, blas));
  runner->workspace_.Resize(kWorkspaceBytes);
  return runner;
}

GemmRunner::GemmRunner(const CublasLibrary& cublas, cudaStream_t stream, cublasLtHandle_t lt, cublasHandle_t blas)
    : cublas_(cublas), stream_(stream), lt_(lt), blas_(blas) {}

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) {
    cublas_.cublasLtMatrixLayoutDestroy(plan.a);
    cublas_.cublasLtMatrixLayoutDestroy(plan.b);
    cublas_.cublasLtMatrixLayoutDestroy(plan.c);
    cublas_.cublasLtMatmulDescDestroy(plan.desc);
  }
  cublas_.cublasDestroy(blas_);
  cublas_.cublasLtDestroy(lt_);
}

GemmRunner::Plan& GemmRunner::PlanFor(const Key& key, Precision precision, bool trans_a, bool trans_b, int64_t m,
                                      int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int align_a,
                                      int align_b, int align_c, bool out16) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  const char* op = "Gemm";
  Plan& plan = plans_[key];
  const cudaDataType_t ab_type =
      precision == Precision::kFp32 ? CUDA_R_32F : (precision == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F);
  const char* type_name =
      precision == Precision::kFp32 ? "f32" : (precision == Precision::kBf16 ? "bf16" : "f16");
  plan.name = ProductName("cublasLtMatmul", trans_a, trans_b, m, n, k, type_name, out16 ? type_name : "f32");
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: A' = B (op trans_b), B' = A (op trans_a), C' = Cᵀ [n, m].
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MS_CUBLAS_CHECK(op,
                  cublas_.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  MS_CUBLAS_CHECK(op,
                  cublas_.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored shapes: B is [k, n] row-major ([n, k] when trans_b) = column-major [n, k] ([k, n]).
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatrixLayoutCreate(&plan.a, ab_type, trans_b ? k : n, trans_b ? n : k, ldb));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatrixLayoutCreate(&plan.b, ab_type, trans_a ? m : k, trans_a ? k : m, lda));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatrixLayoutCreate(&plan.c, out16 ? ab_type : CUDA_R_32F, n, m, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t align_a_prime = align_b, align_b_prime = align_a, align_c_prime = align_c;
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                   &workspace, sizeof(workspace)));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                   &align_a_prime, sizeof(align_a_prime)));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                   &align_b_prime, sizeof(align_b_prime)));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                   &align_c_prime, sizeof(align_c_prime)));
  MS_CUBLAS_CHECK(op, cublas_.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                   &align_c_prime, sizeof(align_c_prime)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublas_.cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  cublas_.cublasLtMatmulPreferenceDestroy(pref);
  // No heuristic (NOT_SUPPORTED or none found) is not an error: Run falls back to cublasSgemm.
  if (s == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = result.algo;
    plan.has_algo = true;
  } else if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
    FatalCudaError(op, cublas_.cublasGetStatusString(s));
  }
  return plan;
}

std::string GemmRunner::ProductName(const char* fn, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                    const char* type, const char* out_type) {
  // The library's column-major view (A' = B, B' = A, C' = Cᵀ), as the emulated cuBLAS names it.
  return absl::StrFormat("%s %dx%dx%d op(A)=%s op(B)=%s %s,%s->%s", fn, n, m, k, trans_b ? "T" : "N",
                         trans_a ? "T" : "N", type, type, out_type);
}

void GemmRunner::Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const bool timed = KernelTimesOn();
  if (timed) KernelTimesBegin(stream_);
  MS_CUBLAS_CHECK("Gemm", cublas_.cublasSgemm_64(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                                                 &beta, c, ldc));
  if (timed) {
    KernelTimesEnd(absl::StrFormat("%s beta=%g", ProductName("cublasSgemm", trans_a, trans_b, m, n, k, "f32", "f32"),
                                   beta),
                   stream_);
  }
}

bool GemmRunner::Matmul(Plan& plan, float alpha, const void* a, const void* b, float beta, void* c) {
  const bool timed = KernelTimesOn();
  if (timed) KernelTimesBegin(stream_);
  const cublasStatus_t s =
      cublas_.cublasLtMatmul(lt_, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c, c, plan.c,
                             plan.has_algo ? &plan.algo : nullptr, workspace_.data(), kWorkspaceBytes, stream_);
  if (timed) KernelTimesEnd(absl::StrFormat("%s beta=%g", plan.name, beta), stream_);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED && plan.has_algo) {  // the algorithm refuses this call after all: never again
    plan.has_algo = false;
    return false;
  }
  MS_CUBLAS_CHECK("Gemm", s);
  return true;
}

void GemmRunner::Run(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const bool half = precision != Precision::kFp32;
  // Operands as the library reads them: the caller's fp32, or packed 16-bit copies.
  const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
  const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
  const int64_t lda_used = half ? cols_a : lda, ldb_used = half ? cols_b : ldb;
  const int align_a = half ? 256 : Alignment(a), align_b = half ? 256 : Alignment(b), align_c = Alignment(c);
  const Key key{static_cast<int>(precision), trans_a, trans_b, m, n, k, lda_used, ldb_used, ldc,
                align_a, align_b, align_c, false};
  Plan& plan =
      PlanFor(key, precision, trans_a, trans_b, m, n, k, lda_used, ldb_used, ldc, align_a, align_b, align_c, false);
  if (!plan.has_algo) return Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const void* a_used = a;
  const void* b_used = b;
  if (half) {
    std::tie(a_used, b_used) =
        PackPair(precision, a, lda, rows_a, cols_a, b, ldb, rows_b, cols_b, &a16_, &b16_, stream_);
  }
  if (!Matmul(plan, alpha, a_used, b_used, beta, c)) {
    Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

void GemmRunner::RunPacked(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const uint16_t* a16, int64_t lda, const uint16_t* b16, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
  const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
  const int align_a = Alignment(a16), align_b = Alignment(b16), align_c = Alignment(c);
  if (k > 0) {
    const Key key{static_cast<int>(precision), trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c,
                  false};
    Plan& plan = PlanFor(key, precision, trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, false);
    if (plan.has_algo && Matmul(plan, alpha, a16, b16, beta, c)) return;
  }
  // No algorithm for the shape (or k = 0: C = beta · C): the same values in fp32.
  const float* a = Widen(precision, a16, lda, rows_a, cols_a, &a32_, stream_);
  const float* b = Widen(precision, b16, ldb, rows_b, cols_b, &b32_, stream_);
  Sgemm(trans_a, trans_b, m, n, k, alpha, a, std::max<int64_t>(cols_a, 1), b, std::max<int64_t>(cols_b, 1), beta, c,
        ldc);
}

void GemmRunner::RunPackedTo16(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const uint16_t* a16, int64_t lda, const uint16_t* b16, int64_t ldb,
                               uint16_t* c16, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const int align_a = Alignment(a16), align_b = Alignment(b16), align_c = Alignment(c16);
  if (k > 0) {
    const Key key{static_cast<int>(precision), trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c,
                  true};
    Plan& plan = PlanFor(key, precision, trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, true);
    if (plan.has_algo && Matmul(plan, alpha, a16, b16, 0.f, c16)) return;
  }
  // No algorithm for a 16-bit D: the fp32 product (RunPacked's), then rounded into c16 as
  // the library rounds D (nearest even).
  if (ldc != n) FatalCudaError("Gemm", "RunPackedTo16 without a cuBLASLt algorithm needs a compact C (ldc == n)");
  c32_.Resize(m * n);
  RunPacked(precision, trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, 0.f, c32_.data(), n);
  Pack(precision, c32_.data(), m * n, c16);
}

void GemmRunner::RunPackedB(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const uint16_t* b16, int64_t ldb, float beta,
                            float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
  a16_.Resize(rows_a * cols_a);
  Pack(precision, a, lda, rows_a, cols_a, a16_.data());
  RunPacked(precision, trans_a, trans_b, m, n, k, alpha, a16_.data(), cols_a, b16, ldb, beta, c, ldc);
}

void GemmRunner::Pack(Precision precision, const float* src, int64_t n, uint16_t* dst) {
  Pack(precision, src, n, 1, n, dst);
}

void GemmRunner::Pack(Precision precision, const float* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst) {
  if (rows * cols <= 0) return;
  cuda::Pack(precision, {src, ld, rows, cols, dst}, {nullptr, 0, 0, 1, nullptr}, stream_);
}

void GemmRunner::PackRounded(Precision precision, float* x, int64_t n, uint16_t* dst) {
  if (n <= 0) return;
  if (precision == Precision::kBf16) {
    Launch<RoundPackKernel<__nv_bfloat16>>(BlocksFor(n), kThreads, 0, stream_, x, n,
                                           reinterpret_cast<__nv_bfloat16*>(dst));
  } else {
    Launch<RoundPackKernel<__half>>(BlocksFor(n), kThreads, 0, stream_, x, n, reinterpret_cast<__half*>(dst));
  }
  MS_CUDA_CHECK_LAUNCH("Gemm");
}

void MoveAddTransposed(float* a, int64_t rows, int64_t cols, int64_t lda, float* b, int64_t ldb, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  Launch<MoveAddTransposedKernel>(grid, dim3(kTile, kTileRows), 0, stream, a, rows, cols, lda, b, ldb);
  MS_CUDA_CHECK_LAUNCH("MoveAddTransposed");
}

}  // namespace multiscreen::kernels::cuda

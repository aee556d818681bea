// The emulated cuBLAS and cuBLASLt (cuda_emulator/cublas.cc) against plain loops in
// double precision written out here: the column-major layouts, transposes, leading
// dimensions, alpha and beta, 16-bit operands, the documented status codes, and the
// checker reports; last, kernels/cuda/gemm.cu's exact call sequence for a row-major
// product, which is what the project relies on.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_emulator/emulator.h"

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// ---- Host matrices and the reference -----------------------------------------------------

// A column-major host matrix: element (i, j) at data[i + j·ld]; padding rows hold NaN.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> data;

  Matrix(int64_t r, int64_t c, int64_t l) : rows(r), cols(c), ld(l), data(l * c, kNan) {}
  float operator()(int64_t i, int64_t j) const { return data[i + j * ld]; }
  float& operator()(int64_t i, int64_t j) { return data[i + j * ld]; }
};

// rows × cols with leading dimension ld, elements uniform in [-1, 1] from `seed`.
Matrix RandomMatrix(int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  Matrix m(rows, cols, ld);
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) m(i, j) = uniform(rng);
  }
  return m;
}

uint16_t ToBits(float x, cudaDataType_t type) {
  uint16_t bits;
  if (type == CUDA_R_16BF) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    std::memcpy(&bits, &h, 2);
  } else {
    const __half h = __float2half_rn(x);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

// x as the 16-bit type holds it (round to nearest even), back in fp32.
float Rounded(float x, cudaDataType_t type) {
  return type == CUDA_R_16BF ? __bfloat162float(__float2bfloat16_rn(x)) : __half2float(__float2half_rn(x));
}

Matrix RoundedMatrix(const Matrix& m, cudaDataType_t type) {
  Matrix r = m;
  for (int64_t j = 0; j < m.cols; ++j) {
    for (int64_t i = 0; i < m.rows; ++i) r(i, j) = Rounded(m(i, j), type);
  }
  return r;
}

// alpha · op(A) · op(B) + beta · C in double, m × n column-major (ld m), with the bound
// |alpha| Σ|op(A)(i,p)·op(B)(p,j)| + |beta·C(i,j)| that scales each element's tolerance.
struct Reference {
  int64_t m = 0, n = 0;
  std::vector<double> value, scale;
};

Reference ColumnMajorReference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                               const Matrix& a, const Matrix& b, double beta, const Matrix* c) {
  Reference ref{m, n, std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0, bound = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double a_ip = trans_a ? a(p, i) : a(i, p);  // op(A) is m × k
        const double b_pj = trans_b ? b(j, p) : b(p, j);  // op(B) is k × n
        sum += a_ip * b_pj;
        bound += std::abs(a_ip * b_pj);
      }
      double value = alpha * sum, scale = std::abs(alpha) * bound;
      if (beta != 0) {
        value += beta * (*c)(i, j);
        scale += std::abs(beta * (*c)(i, j));
      }
      ref.value[i + j * m] = value;
      ref.scale[i + j * m] = scale;
    }
  }
  return ref;
}

// Every element of got within rel · scale (+ a floor for exact zeros) of the reference;
// reports the first that is not.
void ExpectNearReference(const Matrix& got, const Reference& ref, double rel) {
  ASSERT_EQ(got.rows, ref.m);
  ASSERT_EQ(got.cols, ref.n);
  for (int64_t j = 0; j < ref.n; ++j) {
    for (int64_t i = 0; i < ref.m; ++i) {
      const double want = ref.value[i + j * ref.m], tol = rel * ref.scale[i + j * ref.m] + 1e-12;
      if (!(std::abs(got(i, j) - want) <= tol)) {
        ADD_FAILURE() << "element (" << i << ", " << j << "): got " << got(i, j) << ", want " << want << " ± " << tol;
        return;
      }
    }
  }
}

// ---- Device memory -------------------------------------------------------------------------

// Device memory for one test, freed with the object; its bytes start never written.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : p_(msemu::DeviceAllocate(bytes)) { EXPECT_NE(p_, nullptr); }
  ~DeviceBuffer() { msemu::DeviceFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  float* f32() const { return static_cast<float*>(p_); }

 private:
  void* p_;
};

size_t ElementSize(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }
size_t Bytes(const Matrix& m, cudaDataType_t type) { return m.ld * m.cols * ElementSize(type); }

// Copies the elements of m (not its padding) to dst as `type` and marks them written; the
// padding stays as allocated (never written, NaN bytes).
void Upload(const Matrix& m, cudaDataType_t type, void* dst) {
  char* base = static_cast<char*>(dst);
  const size_t es = ElementSize(type);
  for (int64_t j = 0; j < m.cols; ++j) {
    for (int64_t i = 0; i < m.rows; ++i) {
      char* at = base + (i + j * m.ld) * es;
      if (type == CUDA_R_32F) {
        std::memcpy(at, &m.data[i + j * m.ld], 4);
      } else {
        const uint16_t bits = ToBits(m(i, j), type);
        std::memcpy(at, &bits, 2);
      }
    }
    msemu::MarkInitialized(base + j * m.ld * es, m.rows * es);
  }
}

// The fp32 rows × cols matrix (leading dimension ld) at src.
Matrix Download(const void* src, int64_t rows, int64_t cols, int64_t ld) {
  Matrix m(rows, cols, ld);
  std::memcpy(m.data.data(), src, ld * cols * sizeof(float));
  return m;
}

// True when the padding rows of a rows × cols fp32 matrix at p still hold the bytes the
// allocation started with (0xff).
bool PaddingUntouched(const void* p, int64_t rows, int64_t cols, int64_t ld) {
  const uint8_t* bytes = static_cast<const uint8_t*>(p);
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t byte = rows * 4; byte < ld * 4; ++byte) {
      if (bytes[j * ld * 4 + byte] != 0xff) return false;
    }
  }
  return true;
}

bool AnyReportContains(const msemu::ScopedCapture& capture, const std::string& a, const std::string& b = "") {
  for (const std::string& line : capture.reports()) {
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) return true;
  }
  return false;
}

std::string AllReports(const msemu::ScopedCapture& capture) {
  std::string all;
  for (const std::string& line : capture.reports()) all += line + "\n";
  return all;
}

// ---- cuBLASLt plans ------------------------------------------------------------------------

struct LayoutSpec {
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

// A matmul descriptor (TRANSA, TRANSB set) and the layouts of A, B, C and D, destroyed
// with the object.
class LtPlan {
 public:
  LtPlan(cublasOperation_t trans_a, cublasOperation_t trans_b, LayoutSpec a, LayoutSpec b, LayoutSpec c, LayoutSpec d,
         cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&this->a, a.type, a.rows, a.cols, a.ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&this->b, b.type, b.rows, b.cols, b.ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&this->c, c.type, c.rows, c.cols, c.ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&this->d, d.type, d.rows, d.cols, d.ld), CUBLAS_STATUS_SUCCESS);
  }
  ~LtPlan() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
};

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

class CublasLtTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasLtDestroy(lt_), CUBLAS_STATUS_SUCCESS); }

  // The heuristic's algorithm for `plan`, with every operand's alignment promised as `align`.
  cublasStatus_t Heuristic(const LtPlan& plan, uint32_t align, cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c, plan.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(found, 1);
      EXPECT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
      *algo = result.algo;
    }
    return s;
  }

  // cublasLtMatmul on `plan` without workspace, on the legacy default stream.
  cublasStatus_t Matmul(const LtPlan& plan, float alpha, const void* a, const void* b, float beta, const void* c,
                        void* d, const cublasLtMatmulAlgo_t* algo = nullptr) {
    return cublasLtMatmul(lt_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, d, plan.d, algo, nullptr, 0,
                          nullptr);
  }

  // One product D = alpha·op(A)·op(B) + beta·C, out of place, through the heuristic's
  // algorithm, every leading dimension `pad` (D's pad + 1) beyond its rows: D against the
  // reference (within rel · the element's bound, on the 16-bit-rounded operands when
  // reference_on_rounded), D's padding untouched, no reports.
  void CheckLtProduct(cudaDataType_t ab_type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      float beta, int64_t pad, double rel, bool reference_on_rounded);

  cublasLtHandle_t lt_ = nullptr;
};

void CublasLtTest::CheckLtProduct(cudaDataType_t ab_type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                  float alpha, float beta, int64_t pad, double rel, bool reference_on_rounded) {
  SCOPED_TRACE(std::string("trans_a ") + (trans_a ? "T" : "N") + ", trans_b " + (trans_b ? "T" : "N"));
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const Matrix a = RandomMatrix(a_rows, a_cols, a_rows + pad, 1);
  const Matrix b = RandomMatrix(b_rows, b_cols, b_rows + pad, 2);
  const Matrix c = RandomMatrix(m, n, m + pad, 3);
  DeviceBuffer da(Bytes(a, ab_type)), db(Bytes(b, ab_type)), dc(Bytes(c, CUDA_R_32F)), dd((m + pad + 1) * n * 4);
  Upload(a, ab_type, da.get());
  Upload(b, ab_type, db.get());
  Upload(c, CUDA_R_32F, dc.get());
  const LtPlan plan(Op(trans_a), Op(trans_b), {ab_type, a_rows, a_cols, a.ld}, {ab_type, b_rows, b_cols, b.ld},
                    {CUDA_R_32F, m, n, c.ld}, {CUDA_R_32F, m, n, m + pad + 1});
  cublasLtMatmulAlgo_t algo{};
  ASSERT_EQ(Heuristic(plan, 256, &algo), CUBLAS_STATUS_SUCCESS);
  msemu::ScopedCapture capture;
  ASSERT_EQ(Matmul(plan, alpha, da.get(), db.get(), beta, dc.get(), dd.get(), &algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  const Matrix ra = reference_on_rounded ? RoundedMatrix(a, ab_type) : a;
  const Matrix rb = reference_on_rounded ? RoundedMatrix(b, ab_type) : b;
  ExpectNearReference(Download(dd.get(), m, n, m + pad + 1),
                      ColumnMajorReference(trans_a, trans_b, m, n, k, alpha, ra, rb, beta, &c), rel);
  EXPECT_TRUE(PaddingUntouched(dd.get(), m, n, m + pad + 1));
  EXPECT_EQ(msemu::FirstUninitialized(dd.get(), m * 4), -1);  // D's first column marked written
}

TEST_F(CublasLtTest, EveryTransposeCombinationMatchesTheReference) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CheckLtProduct(CUDA_R_32F, trans_a, trans_b, 6, 5, 4, 1.5f, -0.75f, 0, 1e-5, false);
    }
  }
}

TEST_F(CublasLtTest, LeadingDimensionsLargerThanRowsSkipTheNeverWrittenPadding) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CheckLtProduct(CUDA_R_32F, trans_a, trans_b, 7, 3, 9, 1.f, 1.f, 5, 1e-5, false);
    }
  }
}

TEST_F(CublasLtTest, Bf16OperandsAreWidenedExactly) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CheckLtProduct(CUDA_R_16BF, trans_a, trans_b, 6, 5, 16, 0.5f, 2.f, 2, 1e-5, true);
    }
  }
}

TEST_F(CublasLtTest, Bf16ProductIsWithinOnePercentOfTheFp32One) {
  CheckLtProduct(CUDA_R_16BF, false, true, 8, 8, 32, 1.f, 0.f, 0, 1e-2, false);
}

TEST_F(CublasLtTest, Fp16OperandsAreWidenedExactly) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CheckLtProduct(CUDA_R_16F, trans_a, trans_b, 4, 7, 10, -1.f, 0.25f, 1, 1e-5, true);
    }
  }
  CheckLtProduct(CUDA_R_16F, true, false, 8, 8, 32, 1.f, 0.f, 0, 2e-3, false);
}

TEST_F(CublasLtTest, BetaZeroDoesNotReadC) {
  const int64_t m = 4, n = 3, k = 5;
  const Matrix a = RandomMatrix(m, k, m, 4), b = RandomMatrix(k, n, k, 5);
  Matrix c(m, n, m);  // NaN everywhere
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(Bytes(c, CUDA_R_32F)), dd(m * n * 4);
  Upload(a, CUDA_R_32F, da.get());
  Upload(b, CUDA_R_32F, db.get());
  Upload(c, CUDA_R_32F, dc.get());
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  msemu::ScopedCapture capture;
  // Out of place with NaN in C, then in place on D, never written: neither C is read.
  ASSERT_EQ(Matmul(plan, 2.f, da.get(), db.get(), 0.f, dc.get(), dd.get()), CUBLAS_STATUS_SUCCESS);
  const Reference ref = ColumnMajorReference(false, false, m, n, k, 2.0, a, b, 0.0, nullptr);
  ExpectNearReference(Download(dd.get(), m, n, m), ref, 1e-5);
  DeviceBuffer fresh(m * n * 4);
  ASSERT_EQ(Matmul(plan, 2.f, da.get(), db.get(), 0.f, fresh.get(), fresh.get()), CUBLAS_STATUS_SUCCESS);
  ExpectNearReference(Download(fresh.get(), m, n, m), ref, 1e-5);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
}

TEST_F(CublasLtTest, InPlaceCAliasingDAccumulates) {
  const int64_t m = 5, n = 6, k = 3, ld = 7;
  const Matrix a = RandomMatrix(k, m, k, 6), b = RandomMatrix(n, k, n, 7), c = RandomMatrix(m, n, ld, 8);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(Bytes(c, CUDA_R_32F));
  Upload(a, CUDA_R_32F, da.get());
  Upload(b, CUDA_R_32F, db.get());
  Upload(c, CUDA_R_32F, dc.get());
  const LtPlan plan(CUBLAS_OP_T, CUBLAS_OP_T, {CUDA_R_32F, k, m, k}, {CUDA_R_32F, n, k, n}, {CUDA_R_32F, m, n, ld},
                    {CUDA_R_32F, m, n, ld});
  ASSERT_EQ(Matmul(plan, 1.f, da.get(), db.get(), 1.f, dc.get(), dc.get()), CUBLAS_STATUS_SUCCESS);
  ExpectNearReference(Download(dc.get(), m, n, ld), ColumnMajorReference(true, true, m, n, k, 1.0, a, b, 1.0, &c),
                      1e-5);
}

TEST_F(CublasLtTest, OutOfPlaceCMayHaveItsOwnLeadingDimension) {
  const int64_t m = 3, n = 4, k = 2;
  const Matrix a = RandomMatrix(m, k, m, 9), b = RandomMatrix(k, n, k, 10), c = RandomMatrix(m, n, 8, 11);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(Bytes(c, CUDA_R_32F)), dd(m * n * 4);
  Upload(a, CUDA_R_32F, da.get());
  Upload(b, CUDA_R_32F, db.get());
  Upload(c, CUDA_R_32F, dc.get());
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, 8},
                    {CUDA_R_32F, m, n, m});
  ASSERT_EQ(Matmul(plan, 1.f, da.get(), db.get(), -1.f, dc.get(), dd.get()), CUBLAS_STATUS_SUCCESS);
  ExpectNearReference(Download(dd.get(), m, n, m), ColumnMajorReference(false, false, m, n, k, 1.0, a, b, -1.0, &c),
                      1e-5);
}

TEST_F(CublasLtTest, LeadingDimensionBelowRowsIsInvalidValue) {
  DeviceBuffer buf(4096);
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 3}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 4, 2, 4},
                    {CUDA_R_32F, 4, 2, 4});
  cublasLtMatmulAlgo_t algo{};
  EXPECT_EQ(Heuristic(plan, 256, &algo), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Matmul(plan, 1.f, buf.f32(), buf.f32() + 256, 0.f, buf.f32() + 512, buf.f32() + 512),
            CUBLAS_STATUS_INVALID_VALUE);
  const LtPlan bad_d(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 4, 2, 4},
                     {CUDA_R_32F, 4, 2, 2});
  EXPECT_EQ(Heuristic(bad_d, 256, &algo), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(CublasLtTest, TransCOtherThanNIsInvalidValue) {
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int32_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSC, &t, sizeof(t)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSC, &n, sizeof(n)), CUBLAS_STATUS_SUCCESS);
  // A size other than the attribute's int32_t, and a null buffer.
  const int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

TEST_F(CublasLtTest, InconsistentShapesAreInvalidValue) {
  DeviceBuffer buf(4096);
  float* p = buf.f32();
  cublasLtMatmulAlgo_t algo{};
  // op(A) is 4 × 3 but op(B) has 2 rows.
  const LtPlan k_mismatch(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 4, 2, 4},
                          {CUDA_R_32F, 4, 2, 4});
  EXPECT_EQ(Heuristic(k_mismatch, 256, &algo), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Matmul(k_mismatch, 1.f, p, p + 256, 0.f, p + 512, p + 512), CUBLAS_STATUS_INVALID_VALUE);
  // C has other columns than D.
  const LtPlan c_mismatch(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 4, 3, 4},
                          {CUDA_R_32F, 4, 2, 4});
  EXPECT_EQ(Heuristic(c_mismatch, 256, &algo), CUBLAS_STATUS_INVALID_VALUE);
  // In place (C == D) with C's layout other than D's.
  const LtPlan in_place(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 4, 2, 5},
                        {CUDA_R_32F, 4, 2, 4});
  EXPECT_EQ(Matmul(in_place, 1.f, p, p + 256, 1.f, p + 512, p + 512), CUBLAS_STATUS_INVALID_VALUE);
}

// A 16-bit C and D (A and B of their type, CUBLAS_COMPUTE_32F): D is the fp32 product's
// alpha·AB + beta·C rounded once to nearest even, bit for bit what the fp32-D call gives
// rounded on the host; C read as its 16-bit values; D's padding and the bytes past its
// 2-byte elements untouched; only D's elements marked written.
TEST_F(CublasLtTest, SixteenBitOutputIsTheFp32ResultRoundedOnce) {
  for (cudaDataType_t type : {CUDA_R_16BF, CUDA_R_16F}) {
    for (float beta : {0.f, 0.5f}) {
      SCOPED_TRACE(std::string(type == CUDA_R_16BF ? "bf16" : "fp16") + " beta " + std::to_string(beta));
      const int64_t m = 9, n = 5, k = 24, ld_d = m + 3;
      const Matrix a = RandomMatrix(m, k, m, 11), b = RandomMatrix(k, n, k, 12);
      const Matrix c = RoundedMatrix(RandomMatrix(m, n, ld_d, 13), type);
      DeviceBuffer da(Bytes(a, type)), db(Bytes(b, type)), dc16(Bytes(c, type)), dc32(Bytes(c, CUDA_R_32F));
      DeviceBuffer d16(ld_d * n * 2), d32(ld_d * n * 4);
      Upload(a, type, da.get());
      Upload(b, type, db.get());
      Upload(c, type, dc16.get());
      Upload(c, CUDA_R_32F, dc32.get());
      const LtPlan wide(CUBLAS_OP_N, CUBLAS_OP_N, {type, m, k, m}, {type, k, n, k}, {CUDA_R_32F, m, n, ld_d},
                        {CUDA_R_32F, m, n, ld_d});
      const LtPlan narrow(CUBLAS_OP_N, CUBLAS_OP_N, {type, m, k, m}, {type, k, n, k}, {type, m, n, ld_d},
                          {type, m, n, ld_d});
      cublasLtMatmulAlgo_t algo{};
      ASSERT_EQ(Heuristic(narrow, 256, &algo), CUBLAS_STATUS_SUCCESS);
      msemu::ScopedCapture capture;
      ASSERT_EQ(Matmul(wide, 1.25f, da.get(), db.get(), beta, dc32.get(), d32.get()), CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(Matmul(narrow, 1.25f, da.get(), db.get(), beta, dc16.get(), d16.get(), &algo), CUBLAS_STATUS_SUCCESS);
      EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
      const Matrix want = Download(d32.get(), m, n, ld_d);
      const uint8_t* got = static_cast<const uint8_t*>(d16.get());
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          uint16_t bits;
          std::memcpy(&bits, got + (i + j * ld_d) * 2, 2);
          EXPECT_EQ(bits, ToBits(want(i, j), type)) << "element (" << i << ", " << j << ")";
        }
        for (int64_t byte = m * 2; byte < ld_d * 2; ++byte) EXPECT_EQ(got[j * ld_d * 2 + byte], 0xff);
        EXPECT_EQ(msemu::FirstUninitialized(got + j * ld_d * 2, m * 2), -1);
      }
      EXPECT_EQ(msemu::FirstUninitialized(got + m * 2, (ld_d - m) * 2), 0);  // padding never written
    }
  }
}

TEST_F(CublasLtTest, MixedOrUnsupportedTypesAreNotSupported) {
  DeviceBuffer buf(4096);
  float* p = buf.f32();
  cublasLtMatmulAlgo_t algo{};
  const LtPlan mixed(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_16BF, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 4, 2, 4},
                     {CUDA_R_32F, 4, 2, 4});
  EXPECT_EQ(Heuristic(mixed, 256, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(Matmul(mixed, 1.f, p, p + 256, 0.f, p + 512, p + 512), CUBLAS_STATUS_NOT_SUPPORTED);
  // A 16-bit D needs A and B of its type (cuBLASLt's table for CUBLAS_COMPUTE_32F), and C of D's.
  const LtPlan fp32_in_bf16_out(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3},
                                {CUDA_R_16BF, 4, 2, 4}, {CUDA_R_16BF, 4, 2, 4});
  EXPECT_EQ(Heuristic(fp32_in_bf16_out, 256, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
  const LtPlan bf16_in_fp16_out(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_16BF, 4, 3, 4}, {CUDA_R_16BF, 3, 2, 3},
                                {CUDA_R_16F, 4, 2, 4}, {CUDA_R_16F, 4, 2, 4});
  EXPECT_EQ(Heuristic(bf16_in_fp16_out, 256, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
  const LtPlan c_not_d(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_16BF, 4, 3, 4}, {CUDA_R_16BF, 3, 2, 3},
                       {CUDA_R_32F, 4, 2, 4}, {CUDA_R_16BF, 4, 2, 4});
  EXPECT_EQ(Heuristic(c_not_d, 256, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
  const LtPlan tf32_compute(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, 4, 3, 4}, {CUDA_R_32F, 3, 2, 3},
                            {CUDA_R_32F, 4, 2, 4}, {CUDA_R_32F, 4, 2, 4}, CUBLAS_COMPUTE_32F_FAST_TF32);
  EXPECT_EQ(Heuristic(tf32_compute, 256, &algo), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasLtTest, PointerLessAlignedThanThePreferencePromisedIsNotSupported) {
  const int64_t m = 4, n = 2, k = 3;
  const Matrix a = RandomMatrix(m, k, m, 12), b = RandomMatrix(k, n, k, 13);
  DeviceBuffer da(4 + Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dd(m * n * 4);
  float* a_at_4 = da.f32() + 1;  // 4-byte aligned only
  Upload(a, CUDA_R_32F, a_at_4);
  Upload(b, CUDA_R_32F, db.get());
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  cublasLtMatmulAlgo_t promised_256{}, promised_4{};
  ASSERT_EQ(Heuristic(plan, 256, &promised_256), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Heuristic(plan, 4, &promised_4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Matmul(plan, 1.f, a_at_4, db.get(), 0.f, dd.get(), dd.get(), &promised_256), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(msemu::FirstUninitialized(dd.get(), m * n * 4), 0);  // nothing written
  const Reference ref = ColumnMajorReference(false, false, m, n, k, 1.0, a, b, 0.0, nullptr);
  ASSERT_EQ(Matmul(plan, 1.f, a_at_4, db.get(), 0.f, dd.get(), dd.get(), &promised_4), CUBLAS_STATUS_SUCCESS);
  ExpectNearReference(Download(dd.get(), m, n, m), ref, 1e-5);
  // No algorithm: the library picks one that fits the pointers.
  ASSERT_EQ(Matmul(plan, 1.f, a_at_4, db.get(), 0.f, dd.get(), dd.get(), nullptr), CUBLAS_STATUS_SUCCESS);
  ExpectNearReference(Download(dd.get(), m, n, m), ref, 1e-5);
}

TEST_F(CublasLtTest, HostPointerAsOperandIsReported) {
  const int64_t m = 4, n = 2, k = 3;
  const Matrix a = RandomMatrix(m, k, m, 14), b = RandomMatrix(k, n, k, 15);
  DeviceBuffer db(Bytes(b, CUDA_R_32F)), dd(m * n * 4);
  Upload(b, CUDA_R_32F, db.get());
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  msemu::ScopedCapture capture;
  EXPECT_EQ(Matmul(plan, 1.f, a.data.data(), db.get(), 0.f, dd.get(), dd.get()), CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_TRUE(AnyReportContains(capture, "cublasLtMatmul", "operand A")) << AllReports(capture);
  EXPECT_FALSE(AnyReportContains(capture, "operand B")) << AllReports(capture);
  EXPECT_EQ(msemu::FirstUninitialized(dd.get(), m * n * 4), 0);  // D not written
}

TEST_F(CublasLtTest, OperandReachingPastItsAllocationIsReported) {
  const int64_t m = 4, n = 3, k = 3, ldb = 8;  // B spans (3 − 1)·8 + 3 = 19 floats
  const Matrix a = RandomMatrix(m, k, m, 16);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(18 * 4), dd(m * n * 4);
  Upload(a, CUDA_R_32F, da.get());
  msemu::MarkInitialized(db.get(), 18 * 4);
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, ldb}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  msemu::ScopedCapture capture;
  EXPECT_EQ(Matmul(plan, 1.f, da.get(), db.get(), 0.f, dd.get(), dd.get()), CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_TRUE(AnyReportContains(capture, "cublasLtMatmul", "operand B")) << AllReports(capture);
}

TEST_F(CublasLtTest, ReadingNeverWrittenInputIsReported) {
  const int64_t m = 4, n = 3, k = 2;
  const Matrix a = RandomMatrix(m, k, m, 17), b = RandomMatrix(k, n, k, 18);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(m * n * 4), dd(m * n * 4);
  Upload(a, CUDA_R_32F, da.get());
  msemu::MarkInitialized(db.get(), k * 4);  // B's first column only
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  {
    msemu::ScopedCapture capture;
    Matmul(plan, 1.f, da.get(), db.get(), 0.f, dd.get(), dd.get());
    EXPECT_TRUE(AnyReportContains(capture, "operand B", "column 1")) << AllReports(capture);
    EXPECT_FALSE(AnyReportContains(capture, "operand A")) << AllReports(capture);
  }
  Upload(b, CUDA_R_32F, db.get());
  {
    msemu::ScopedCapture capture;  // beta ≠ 0 reads C, never written
    Matmul(plan, 1.f, da.get(), db.get(), 1.f, dc.get(), dd.get());
    EXPECT_TRUE(AnyReportContains(capture, "operand C", "never written")) << AllReports(capture);
  }
}

TEST_F(CublasLtTest, WorkspaceMustBeDeviceMemoryOfTheGivenSize) {
  const int64_t m = 2, n = 2, k = 2;
  DeviceBuffer buf(4096);
  msemu::MarkInitialized(buf.get(), 4096);
  float* p = buf.f32();
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  const float one = 1.f, zero = 0.f;
  EXPECT_EQ(cublasLtMatmul(lt_, plan.desc, &one, p, plan.a, p + 64, plan.b, &zero, p + 128, plan.c, p + 128, plan.d,
                           nullptr, nullptr, 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  alignas(256) uint8_t host_workspace[1024];
  msemu::ScopedCapture capture;
  EXPECT_EQ(cublasLtMatmul(lt_, plan.desc, &one, p, plan.a, p + 64, plan.b, &zero, p + 128, plan.c, p + 128, plan.d,
                           nullptr, host_workspace, sizeof(host_workspace), nullptr),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_TRUE(AnyReportContains(capture, "cublasLtMatmul", "workspace")) << AllReports(capture);
  DeviceBuffer workspace(1024);
  EXPECT_EQ(cublasLtMatmul(lt_, plan.desc, &one, p, plan.a, p + 64, plan.b, &zero, p + 128, plan.c, p + 128, plan.d,
                           nullptr, workspace.get(), 1024, nullptr),
            CUBLAS_STATUS_SUCCESS);
}

TEST_F(CublasLtTest, MatmulRunsAfterTheWorkQueuedOnItsStream) {
  const int64_t m = 3, n = 2, k = 4;
  const Matrix a = RandomMatrix(m, k, m, 19), b = RandomMatrix(k, n, k, 20);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dd(m * n * 4);
  Upload(b, CUDA_R_32F, db.get());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  msemu::Enqueue(stream, [&] {  // A is written by earlier work on the stream, late
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Upload(a, CUDA_R_32F, da.get());
  });
  const LtPlan plan(CUBLAS_OP_N, CUBLAS_OP_N, {CUDA_R_32F, m, k, m}, {CUDA_R_32F, k, n, k}, {CUDA_R_32F, m, n, m},
                    {CUDA_R_32F, m, n, m});
  msemu::ScopedCapture capture;
  const float one = 1.f, zero = 0.f;
  ASSERT_EQ(cublasLtMatmul(lt_, plan.desc, &one, da.get(), plan.a, db.get(), plan.b, &zero, dd.get(), plan.c, dd.get(),
                           plan.d, nullptr, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  ExpectNearReference(Download(dd.get(), m, n, m), ColumnMajorReference(false, false, m, n, k, 1.0, a, b, 0.0, nullptr),
                      1e-5);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(CublasLtTest, UsingADestroyedDescriptorIsReported) {
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
  msemu::ScopedCapture capture;
  const int32_t t = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_TRUE(AnyReportContains(capture, "cublasLtMatmulDescSetAttribute", "not a live one")) << AllReports(capture);
}

// ---- cuBLAS --------------------------------------------------------------------------------

class CublasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&blas_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasDestroy(blas_), CUBLAS_STATUS_SUCCESS); }
  cublasHandle_t blas_ = nullptr;
};

TEST_F(CublasTest, SgemmEveryTransposeCombinationMatchesTheReference) {
  const int64_t m = 5, n = 4, k = 6, pad = 3;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (trans_a ? "T" : "N") + ", trans_b " + (trans_b ? "T" : "N"));
      const Matrix a = RandomMatrix(trans_a ? k : m, trans_a ? m : k, (trans_a ? k : m) + pad, 21);
      const Matrix b = RandomMatrix(trans_b ? n : k, trans_b ? k : n, (trans_b ? n : k) + pad, 22);
      const Matrix c = RandomMatrix(m, n, m + pad, 23);
      DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(Bytes(c, CUDA_R_32F));
      Upload(a, CUDA_R_32F, da.get());
      Upload(b, CUDA_R_32F, db.get());
      Upload(c, CUDA_R_32F, dc.get());
      const float alpha = 0.75f, beta = -2.f;
      msemu::ScopedCapture capture;
      ASSERT_EQ(cublasSgemm_64(blas_, Op(trans_a), Op(trans_b), m, n, k, &alpha, da.f32(), a.ld, db.f32(), b.ld, &beta,
                               dc.f32(), c.ld),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
      ExpectNearReference(Download(dc.get(), m, n, c.ld),
                          ColumnMajorReference(trans_a, trans_b, m, n, k, alpha, a, b, beta, &c), 1e-5);
      EXPECT_TRUE(PaddingUntouched(dc.get(), m, n, c.ld));
    }
  }
}

TEST_F(CublasTest, SgemmWithKZeroScalesCWithoutReadingAOrB) {
  const int64_t m = 3, n = 2;
  const Matrix c = RandomMatrix(m, n, m, 24);
  DeviceBuffer da(64), db(64), dc(Bytes(c, CUDA_R_32F));  // A and B never written
  Upload(c, CUDA_R_32F, dc.get());
  const float alpha = 1.f, beta = 3.f;
  msemu::ScopedCapture capture;
  ASSERT_EQ(
      cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, &alpha, da.f32(), m, db.f32(), 1, &beta, dc.f32(), m),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  const Matrix got = Download(dc.get(), m, n, m);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) EXPECT_FLOAT_EQ(got(i, j), 3.f * c(i, j)) << i << ", " << j;
  }
  // beta = 0: C = 0, its NaNs not read.
  Matrix nan_c(m, n, m);
  Upload(nan_c, CUDA_R_32F, dc.get());
  const float zero = 0.f;
  ASSERT_EQ(
      cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, &alpha, da.f32(), m, db.f32(), 1, &zero, dc.f32(), m),
      CUBLAS_STATUS_SUCCESS);
  const Matrix zeros = Download(dc.get(), m, n, m);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) EXPECT_EQ(zeros(i, j), 0.f) << i << ", " << j;
  }
}

TEST_F(CublasTest, SgemmBetaZeroDoesNotReadC) {
  const int64_t m = 4, n = 3, k = 2;
  const Matrix a = RandomMatrix(m, k, m, 25), b = RandomMatrix(k, n, k, 26);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(m * n * 4);  // C: NaN bytes, never written
  Upload(a, CUDA_R_32F, da.get());
  Upload(b, CUDA_R_32F, db.get());
  const float alpha = -1.f, beta = 0.f;
  msemu::ScopedCapture capture;
  ASSERT_EQ(
      cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.f32(), m, db.f32(), k, &beta, dc.f32(), m),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  ExpectNearReference(Download(dc.get(), m, n, m),
                      ColumnMajorReference(false, false, m, n, k, -1.0, a, b, 0.0, nullptr), 1e-5);
  EXPECT_EQ(msemu::FirstUninitialized(dc.get(), m * n * 4), -1);
}

TEST_F(CublasTest, SgemmReadingNeverWrittenCWithBetaIsReported) {
  const int64_t m = 2, n = 2, k = 2;
  const Matrix a = RandomMatrix(m, k, m, 27), b = RandomMatrix(k, n, k, 28);
  DeviceBuffer da(Bytes(a, CUDA_R_32F)), db(Bytes(b, CUDA_R_32F)), dc(m * n * 4);
  Upload(a, CUDA_R_32F, da.get());
  Upload(b, CUDA_R_32F, db.get());
  const float alpha = 1.f, beta = 1.f;
  msemu::ScopedCapture capture;
  cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.f32(), m, db.f32(), k, &beta, dc.f32(), m);
  EXPECT_TRUE(AnyReportContains(capture, "cublasSgemm", "operand C")) << AllReports(capture);
}

TEST_F(CublasTest, SgemmInvalidArgumentsAreInvalidValue) {
  DeviceBuffer buf(4096);
  msemu::MarkInitialized(buf.get(), 4096);
  const float* a = buf.f32();
  const float* b = buf.f32() + 256;
  float* c = buf.f32() + 512;
  const float one = 1.f;
  struct Case {
    const char* what;
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
  };
  const Case cases[] = {
      {"m < 0", CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, 2, 2, 2},
      {"k < 0", CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, -1, 2, 2, 2},
      {"lda < m for N", CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, 3, 3, 4},
      {"lda < k for T", CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 5, 4, 5, 2},
      {"ldb < k for N", CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 5, 2, 4, 2},
      {"ldb < n for T", CUBLAS_OP_N, CUBLAS_OP_T, 2, 6, 1, 2, 5, 2},
      {"ldc < m", CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, 4, 2, 3},
      {"lda 0 for m 0", CUBLAS_OP_N, CUBLAS_OP_N, 0, 2, 2, 0, 2, 1},
      {"transa out of range", static_cast<cublasOperation_t>(7), CUBLAS_OP_N, 2, 2, 2, 2, 2, 2},
  };
  for (const Case& c_ : cases) {
    EXPECT_EQ(cublasSgemm_64(blas_, c_.ta, c_.tb, c_.m, c_.n, c_.k, &one, a, c_.lda, b, c_.ldb, &one, c, c_.ldc),
              CUBLAS_STATUS_INVALID_VALUE)
        << c_.what;
  }
  EXPECT_EQ(cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, nullptr, a, 2, b, 2, &one, c, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &one, nullptr, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  // The boundary itself is valid: lda = m, ldb = k, ldc = m.
  EXPECT_EQ(cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, &one, a, 4, b, 3, &one, c, 4),
            CUBLAS_STATUS_SUCCESS);
}

TEST_F(CublasTest, SgemmAlphaZeroDoesNotReadAOrB) {
  const int64_t m = 2, n = 3, k = 4;
  const Matrix c = RandomMatrix(m, n, m, 29);
  DeviceBuffer da(m * k * 4), db(k * n * 4), dc(Bytes(c, CUDA_R_32F));  // A, B: NaN, never written
  Upload(c, CUDA_R_32F, dc.get());
  const float alpha = 0.f, beta = 0.5f;
  msemu::ScopedCapture capture;
  ASSERT_EQ(
      cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.f32(), m, db.f32(), k, &beta, dc.f32(), m),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  const Matrix got = Download(dc.get(), m, n, m);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) EXPECT_FLOAT_EQ(got(i, j), 0.5f * c(i, j));
  }
}

TEST_F(CublasTest, HostPointerAsSgemmOperandIsReported) {
  const Matrix a = RandomMatrix(2, 2, 2, 30);
  DeviceBuffer db(16), dc(16);
  msemu::MarkInitialized(db.get(), 16);
  const float one = 1.f, zero = 0.f;
  msemu::ScopedCapture capture;
  EXPECT_EQ(
      cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.data.data(), 2, db.f32(), 2, &zero, dc.f32(), 2),
      CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_TRUE(AnyReportContains(capture, "cublasSgemm", "operand A")) << AllReports(capture);
}

TEST_F(CublasTest, Tf32MathModeRoundsOperandsAndDefaultMathDoesNot) {
  DeviceBuffer buf(64);
  const float a = 1.f + 1.f / 4096, b = 1.f, one = 1.f, zero = 0.f;  // a needs 12 mantissa bits
  std::memcpy(buf.f32(), &a, 4);
  std::memcpy(buf.f32() + 1, &b, 4);
  msemu::MarkInitialized(buf.get(), 8);
  ASSERT_EQ(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, buf.f32(), 1, buf.f32() + 1, 1, &zero,
                           buf.f32() + 2, 1),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(buf.f32()[2], a);
  ASSERT_EQ(cublasSetMathMode(blas_, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSgemm_64(blas_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, buf.f32(), 1, buf.f32() + 1, 1, &zero,
                           buf.f32() + 2, 1),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(buf.f32()[2], 1.f);
  EXPECT_EQ(cublasSetMathMode(blas_, static_cast<cublasMath_t>(7)), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(CublasTest, StatusStringsDescribeEachStatus) {
  const std::string success = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  const std::string invalid = cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE);
  const std::string unsupported = cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_FALSE(success.empty());
  EXPECT_NE(success, invalid);
  EXPECT_NE(invalid, unsupported);
  EXPECT_NE(std::string(cublasGetStatusString(static_cast<cublasStatus_t>(12345))), success);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

// ---- kernels/cuda/gemm.cu's call sequence ------------------------------------------------------

enum class Precision { kFp32, kBf16, kFp16 };

// Largest power of two (≤ 256) dividing the address (gemm.cu's Alignment).
int Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// Row-major host matrix: element (r, c) at data[r·ld + c].
struct RowMajor {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> data;
  float operator()(int64_t r, int64_t c) const { return data[r * ld + c]; }
};

RowMajor RandomRowMajor(int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  const Matrix m = RandomMatrix(cols, rows, ld, seed);  // the same numbers, read the other way
  return RowMajor{rows, cols, ld, m.data};
}

// C[m, n] = alpha · op(A) · op(B) + beta · C, row-major, the way kernels/cpu/gemm.h states
// it: op(A)(i, p) = A[p, i] when trans_a, op(B)(p, j) = B[j, p] when trans_b; the 16-bit
// precisions see A and B rounded.
std::vector<double> RowMajorReference(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      double alpha, const RowMajor& a, const RowMajor& b, double beta,
                                      const RowMajor& c, std::vector<double>* scale) {
  auto round = [precision](float x) -> double {
    if (precision == Precision::kBf16) return Rounded(x, CUDA_R_16BF);
    if (precision == Precision::kFp16) return Rounded(x, CUDA_R_16F);
    return x;
  };
  std::vector<double> out(m * n);
  scale->assign(m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, bound = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double a_ip = round(trans_a ? a(p, i) : a(i, p));
        const double b_pj = round(trans_b ? b(j, p) : b(p, j));
        sum += a_ip * b_pj;
        bound += std::abs(a_ip * b_pj);
      }
      out[i * n + j] = alpha * sum + beta * c(i, j);
      (*scale)[i * n + j] = std::abs(alpha) * bound + std::abs(beta * c(i, j));
    }
  }
  return out;
}

// Packs the [rows, cols] block of a row-major matrix into 16-bit device memory, densely
// (gemm.cu's Pack, done here on the host).
void Pack16(const RowMajor& src, cudaDataType_t type, void* dst) {
  std::vector<uint16_t> packed(src.rows * src.cols);
  for (int64_t r = 0; r < src.rows; ++r) {
    for (int64_t c = 0; c < src.cols; ++c) packed[r * src.cols + c] = ToBits(src(r, c), type);
  }
  std::memcpy(dst, packed.data(), packed.size() * 2);
  msemu::MarkInitialized(dst, packed.size() * 2);
}

// gemm.cu's GemmRunner::Create + PlanFor + Run, step for step, for one row-major product
// whose shape has a cuBLASLt heuristic; returns the matmul's status.
cublasStatus_t RunLikeGemmRunner(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                 float alpha, const RowMajor& a_host, const float* a, int64_t lda,
                                 const RowMajor& b_host, const float* b, int64_t ldb, float beta, float* c,
                                 int64_t ldc) {
  constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetStream(blas, stream), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer workspace(kWorkspaceBytes);

  // Run: the operands as the library reads them.
  const bool half = precision != Precision::kFp32;
  const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
  const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
  const int64_t lda_used = half ? cols_a : lda, ldb_used = half ? cols_b : ldb;
  const int align_a = half ? 256 : Alignment(a), align_b = half ? 256 : Alignment(b), align_c = Alignment(c);

  // PlanFor.
  const cudaDataType_t ab_type =
      precision == Precision::kFp32 ? CUDA_R_32F : (precision == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F);
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, ab_type, trans_b ? k : n, trans_b ? n : k, ldb_used),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, ab_type, trans_a ? m : k, trans_a ? k : m, lda_used),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, ldc), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint64_t workspace_bytes = kWorkspaceBytes;
  const uint32_t align_a_prime = align_b, align_b_prime = align_a, align_c_prime = align_c;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                 sizeof(workspace_bytes)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a_prime,
                                                 sizeof(align_a_prime)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b_prime,
                                                 sizeof(align_b_prime)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c_prime,
                                                 sizeof(align_c_prime)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c_prime,
                                                 sizeof(align_c_prime)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &result, &found), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  cublasLtMatmulPreferenceDestroy(pref);

  // Run: pack the 16-bit copies, then the matmul with A and B swapped.
  const void* a_used = a;
  const void* b_used = b;
  DeviceBuffer a16(rows_a * cols_a * 2 + 2), b16(rows_b * cols_b * 2 + 2);
  if (half) {
    Pack16(a_host, ab_type, a16.get());
    Pack16(b_host, ab_type, b16.get());
    a_used = a16.get();
    b_used = b16.get();
  }
  const cublasStatus_t s = cublasLtMatmul(lt, desc, &alpha, b_used, la, a_used, lb, &beta, c, lc, c, lc, &result.algo,
                                          workspace.get(), kWorkspaceBytes, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  // ~GemmRunner.
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasDestroy(blas);
  cublasLtDestroy(lt);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  return s;
}

TEST(GemmRunnerSequenceTest, RowMajorProductMatchesTheRowMajorReference) {
  const int64_t m = 5, n = 7, k = 6;
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(std::string("precision ") + std::to_string(static_cast<int>(precision)) + ", trans_a " +
                     (trans_a ? "T" : "N") + ", trans_b " + (trans_b ? "T" : "N"));
        // Stored shapes and row strides wider than the rows.
        const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
        const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
        const RowMajor a = RandomRowMajor(rows_a, cols_a, cols_a + 3, 31);
        const RowMajor b = RandomRowMajor(rows_b, cols_b, cols_b + 1, 32);
        const RowMajor c = RandomRowMajor(m, n, n + 2, 33);
        DeviceBuffer da(a.data.size() * 4), db(b.data.size() * 4), dc(c.data.size() * 4);
        for (auto [host, dev] : {std::pair{&a, &da}, std::pair{&b, &db}, std::pair{&c, &dc}}) {
          for (int64_t r = 0; r < host->rows; ++r) {
            std::memcpy(dev->f32() + r * host->ld, host->data.data() + r * host->ld, host->cols * 4);
            msemu::MarkInitialized(dev->f32() + r * host->ld, host->cols * 4);
          }
        }
        const float alpha = 1.25f, beta = -0.5f;
        msemu::ScopedCapture capture;
        ASSERT_EQ(RunLikeGemmRunner(precision, trans_a, trans_b, m, n, k, alpha, a, da.f32(), a.ld, b, db.f32(), b.ld,
                                    beta, dc.f32(), c.ld),
                  CUBLAS_STATUS_SUCCESS);
        EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
        std::vector<double> scale;
        const std::vector<double> want =
            RowMajorReference(precision, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, &scale);
        const float* got = dc.f32();
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_NEAR(got[i * c.ld + j], want[i * n + j], 1e-5 * scale[i * n + j] + 1e-12) << i << ", " << j;
          }
          for (int64_t j = n; j < c.ld; ++j) {  // the row padding of C is not touched
            ASSERT_TRUE(std::isnan(got[i * c.ld + j])) << "padding " << i << ", " << j;
          }
        }
      }
    }
  }
}

TEST(GemmRunnerSequenceTest, MisalignedFp32OperandsGetAMatchingAlgorithm) {
  // A starts 4 bytes into its allocation: gemm.cu promises 4-byte alignment for it.
  const int64_t m = 3, n = 4, k = 5;
  const RowMajor a = RandomRowMajor(m, k, k, 34), b = RandomRowMajor(k, n, n, 35), c = RandomRowMajor(m, n, n, 36);
  DeviceBuffer da(4 + a.data.size() * 4), db(b.data.size() * 4), dc(c.data.size() * 4);
  float* a_at_4 = da.f32() + 1;
  std::memcpy(a_at_4, a.data.data(), a.data.size() * 4);
  msemu::MarkInitialized(a_at_4, a.data.size() * 4);
  std::memcpy(db.f32(), b.data.data(), b.data.size() * 4);
  msemu::MarkInitialized(db.f32(), b.data.size() * 4);
  std::memcpy(dc.f32(), c.data.data(), c.data.size() * 4);
  msemu::MarkInitialized(dc.f32(), c.data.size() * 4);
  ASSERT_EQ(
      RunLikeGemmRunner(Precision::kFp32, false, false, m, n, k, 1.f, a, a_at_4, k, b, db.f32(), n, 1.f, dc.f32(), n),
      CUBLAS_STATUS_SUCCESS);
  std::vector<double> scale;
  const std::vector<double> want =
      RowMajorReference(Precision::kFp32, false, false, m, n, k, 1.0, a, b, 1.0, c, &scale);
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(dc.f32()[i], want[i], 1e-5 * scale[i] + 1e-12) << i;
}

TEST(GemmRunnerSequenceTest, SgemmFallbackMatchesTheRowMajorReference) {
  // GemmRunner::Sgemm: transposes and operands swapped, m and n swapped, the row strides as lds.
  const int64_t m = 4, n = 3;
  for (int64_t k : {int64_t{0}, int64_t{5}}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(std::string("k ") + std::to_string(k) + ", trans_a " + (trans_a ? "T" : "N") + ", trans_b " +
                     (trans_b ? "T" : "N"));
        const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
        const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
        const RowMajor a = RandomRowMajor(rows_a, cols_a, cols_a + 2, 37);
        const RowMajor b = RandomRowMajor(rows_b, cols_b, cols_b + 2, 38);
        const RowMajor c = RandomRowMajor(m, n, n + 1, 39);
        DeviceBuffer da(a.data.size() * 4 + 4), db(b.data.size() * 4 + 4), dc(c.data.size() * 4);
        std::memcpy(da.f32(), a.data.data(), a.data.size() * 4);
        msemu::MarkInitialized(da.f32(), a.data.size() * 4);
        std::memcpy(db.f32(), b.data.data(), b.data.size() * 4);
        msemu::MarkInitialized(db.f32(), b.data.size() * 4);
        std::memcpy(dc.f32(), c.data.data(), c.data.size() * 4);
        msemu::MarkInitialized(dc.f32(), c.data.size() * 4);
        cublasHandle_t blas = nullptr;
        ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
        const float alpha = 2.f, beta = 0.5f;
        msemu::ScopedCapture capture;
        ASSERT_EQ(cublasSgemm_64(blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                 k, &alpha, db.f32(), b.ld, da.f32(), a.ld, &beta, dc.f32(), c.ld),
                  CUBLAS_STATUS_SUCCESS);
        EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
        EXPECT_EQ(cublasDestroy(blas), CUBLAS_STATUS_SUCCESS);
        std::vector<double> scale;
        const std::vector<double> want =
            RowMajorReference(Precision::kFp32, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, &scale);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_NEAR(dc.f32()[i * c.ld + j], want[i * n + j], 1e-5 * scale[i * n + j] + 1e-12) << i << ", " << j;
          }
        }
      }
    }
  }
}

}  // namespace

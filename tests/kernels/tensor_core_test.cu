// The tensor-core primitives of kernels/cuda/tensor_core.cuh against plain matrix
// products on the host: mma.sync m16n8k16 bf16 with fragments loaded by the PTX ISA's
// documented layout (written out below, independently of the emulator), ldmatrix (x4 and
// .trans) against its documented thread-to-row and fragment layout, and cp.async →
// ldmatrix → mma, the path of a tiled kernel. Label cuda: on the emulated device the
// twins (cuda_emulator/tensor_core.cc) run; under nvcc the instructions themselves, on a
// GPU (skipped, visibly, without one).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"

namespace multiscreen::kernels::cuda {
namespace {

// ---- The documented layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type"): row and column of element i of lane `lane`'s fragment -----------------

struct Position {
  int row, col;
};

// A (16×16, row-major): a0..a7, two per register.
__host__ __device__ inline Position APosition(int lane, int i) {
  const int group = lane >> 2, thread_in_group = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
  const int col = thread_in_group * 2 + (i & 1) + (i >= 4 ? 8 : 0);
  return {row, col};
}
// B (16×8, k × n): b0..b3, two per register.
__host__ __device__ inline Position BPosition(int lane, int i) {
  const int group = lane >> 2, thread_in_group = lane % 4;
  return {thread_in_group * 2 + (i & 1) + (i >= 2 ? 8 : 0), group};
}
// C and D (16×8): c0..c3.
__host__ __device__ inline Position CPosition(int lane, int i) {
  const int group = lane >> 2, thread_in_group = lane % 4;
  return {i < 2 ? group : group + 8, thread_in_group * 2 + (i & 1)};
}

// ---- Kernels ----------------------------------------------------------------------

// One m16n8k16 per warp, two warps per block: problem p = 2 · block + warp has A at
// a + 256p (16×16 row-major bf16), B at b + 128p (16×8, b[k·8 + n]), C and D at 128p
// (16×8 row-major fp32). Fragments are gathered from global memory by the layout above.
__global__ void MmaKernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int lane = threadIdx.x % 32, p = blockIdx.x * 2 + threadIdx.x / 32;
  a += 256 * p;
  b += 128 * p;
  c += 128 * p;
  d += 128 * p;
  uint32_t a_frag[4] = {0, 0, 0, 0}, b_frag[2] = {0, 0};
  float c_frag[4], d_frag[4];
  for (int i = 0; i < 8; ++i) {
    const Position at = APosition(lane, i);
    a_frag[i / 2] |= uint32_t(a[at.row * 16 + at.col]) << (16 * (i & 1));
  }
  for (int i = 0; i < 4; ++i) {
    const Position at = BPosition(lane, i);
    b_frag[i / 2] |= uint32_t(b[at.row * 8 + at.col]) << (16 * (i & 1));
  }
  for (int i = 0; i < 4; ++i) c_frag[i] = c[CPosition(lane, i).row * 8 + CPosition(lane, i).col];
  MmaM16N8K16Bf16(d_frag, a_frag, b_frag, c_frag);
  for (int i = 0; i < 4; ++i) d[CPosition(lane, i).row * 8 + CPosition(lane, i).col] = d_frag[i];
}

// 32 rows of 8 b16 values in shared memory, row r holding RowValue(r, j) in column j, at
// a stride of 16 values; lane L names row Permuted(L), so the rows of each matrix are not
// contiguous. out[4L + m] = r[m] of lane L.
__host__ __device__ inline int Permuted(int lane) { return (lane * 7 + 3) % 32; }
__host__ __device__ inline uint16_t RowValue(int row, int col) { return uint16_t(0x100 * (row + 1) + col); }

template <bool kTrans>
__global__ void LdmatrixKernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t rows[32][16];
  const int lane = threadIdx.x;
  for (int j = 0; j < 8; ++j) rows[lane][j] = RowValue(lane, j);
  __syncthreads();
  uint32_t r[4];
  if (kTrans) {
    LdmatrixX4Trans(r, &rows[Permuted(lane)][0]);
  } else {
    LdmatrixX4(r, &rows[Permuted(lane)][0]);
  }
  for (int m = 0; m < 4; ++m) out[4 * lane + m] = r[m];
}

// D = X·Y + C for X, Y 16×16 bf16 (row-major; Y is k × n) and C, D 16×16 fp32, by one
// warp: cp.async of X and Y into padded shared tiles, ldmatrix of X's A fragment and
// ldmatrix.trans of Y's two B fragments, two m16n8k16.
__global__ void TileKernel(const uint16_t* x, const uint16_t* y, const float* c, float* d) {
  constexpr int kStride = 24;  // 48-byte rows: 16-byte aligned, not 32-byte
  __shared__ __align__(16) uint16_t xs[16 * kStride];
  __shared__ __align__(16) uint16_t ys[16 * kStride];
  const int lane = threadIdx.x;
  const int row = lane / 2, half = 8 * (lane % 2);  // 32 chunks of 16 bytes per tile
  CpAsync16(&xs[row * kStride + half], x + row * 16 + half);
  CpAsync16(&ys[row * kStride + half], y + row * 16 + half);
  CpAsyncCommitGroup();
  CpAsyncWaitGroup<0>();
  __syncthreads();
  uint32_t a[4], b[4];
  LdmatrixX4(a, &xs[(lane % 16) * kStride + 8 * (lane / 16)]);
  LdmatrixX4Trans(b, &ys[(lane % 16) * kStride + 8 * (lane / 16)]);
  for (int tile = 0; tile < 2; ++tile) {
    float c_frag[4], d_frag[4];
    for (int i = 0; i < 4; ++i) c_frag[i] = c[CPosition(lane, i).row * 16 + 8 * tile + CPosition(lane, i).col];
    MmaM16N8K16Bf16(d_frag, a, &b[2 * tile], c_frag);
    for (int i = 0; i < 4; ++i) d[CPosition(lane, i).row * 16 + 8 * tile + CPosition(lane, i).col] = d_frag[i];
  }
}

// ---- Host side ----------------------------------------------------------------------

class TensorCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      std::fprintf(stderr, "\n*** SKIPPED: no CUDA device visible; CUDA kernels were compiled but not run ***\n\n");
      GTEST_SKIP() << "no CUDA device visible";
    }
  }
  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
  }
  template <typename T>
  T* Device(const std::vector<T>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    allocations_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> Host(const T* p, size_t n) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  std::vector<void*> allocations_;
};

// bf16 bits of x, rounded to nearest even (x finite).
uint16_t ToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}
double FromBf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> v(n);
  for (uint16_t& h : v) h = ToBf16(u(rng));
  return v;
}
std::vector<float> RandomFloats(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Checks got = C + A·B for A m × k (row-major), B k × n (row-major), C m × n, within
// `tolerance` of Σ|terms| (the scale of an fp32 sum's rounding, whatever its order).
// Returns the largest |got − ref| / Σ|terms| seen.
double ExpectProduct(const std::vector<float>& got, const uint16_t* a, const uint16_t* b, const float* c, int m, int n,
                     int k, double tolerance, const char* what) {
  double worst = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = c[i * n + j], scale = std::abs(c[i * n + j]);
      for (int p = 0; p < k; ++p) {
        const double term = FromBf16(a[i * k + p]) * FromBf16(b[p * n + j]);
        ref += term;
        scale += std::abs(term);
      }
      const double error = std::abs(got[i * n + j] - ref) / scale;
      worst = std::max(worst, error);
      EXPECT_LE(error, tolerance) << what << " D[" << i << "][" << j << "] = " << got[i * n + j] << ", expected "
                                  << ref;
    }
  }
  return worst;
}

// The fragment layouts as the PTX ISA's figures draw them, for a few lanes: what the
// layout functions above (the tests' statement of the documentation) must give.
TEST(TensorCoreLayout, FragmentPositionsMatchThePtxFigures) {
  // Lane 0: a0 a1 at row 0 cols 0 1, a2 a3 row 8, a4 a5 row 0 cols 8 9, a6 a7 row 8 cols 8 9.
  const Position lane0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(APosition(0, i).row, lane0[i].row) << i;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(APosition(0, i).col, lane0[i].col) << i;
  // Lane 31 (groupID 7, threadID_in_group 3): a7 at row 15 col 15; b3 at row 15 col 7;
  // c3 at row 15 col 7.
  EXPECT_EQ(APosition(31, 7).row, 15);
  EXPECT_EQ(APosition(31, 7).col, 15);
  EXPECT_EQ(BPosition(31, 3).row, 15);
  EXPECT_EQ(BPosition(31, 3).col, 7);
  EXPECT_EQ(CPosition(31, 3).row, 15);
  EXPECT_EQ(CPosition(31, 3).col, 7);
  // Lane 6 (groupID 1, threadID_in_group 2): b0 b1 at rows 4 5 col 1, b2 b3 rows 12 13.
  EXPECT_EQ(BPosition(6, 0).row, 4);
  EXPECT_EQ(BPosition(6, 1).row, 5);
  EXPECT_EQ(BPosition(6, 2).row, 12);
  EXPECT_EQ(BPosition(6, 3).row, 13);
  EXPECT_EQ(BPosition(6, 0).col, 1);
  // Each layout covers its matrix exactly once.
  std::vector<int> a_seen(256), b_seen(128), c_seen(128);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) ++a_seen[APosition(lane, i).row * 16 + APosition(lane, i).col];
    for (int i = 0; i < 4; ++i) ++b_seen[BPosition(lane, i).row * 8 + BPosition(lane, i).col];
    for (int i = 0; i < 4; ++i) ++c_seen[CPosition(lane, i).row * 8 + CPosition(lane, i).col];
  }
  for (int v : a_seen) EXPECT_EQ(v, 1);
  for (int v : b_seen) EXPECT_EQ(v, 1);
  for (int v : c_seen) EXPECT_EQ(v, 1);
}

TEST_F(TensorCoreTest, MmaM16N8K16Bf16IsTheProductOfItsDocumentedFragments) {
  constexpr int kProblems = 16;  // 8 blocks of two warps
  std::mt19937_64 rng(29);
  const std::vector<uint16_t> a = RandomBf16(256 * kProblems, rng), b = RandomBf16(128 * kProblems, rng);
  const std::vector<float> c = RandomFloats(128 * kProblems, rng);
  float* d = Device(std::vector<float>(128 * kProblems, 0.f));
  Launch<MmaKernel>(kProblems / 2, 64, 0, nullptr, Device(a), Device(b), Device(c), d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = Host(d, 128 * kProblems);
  double worst = 0;
  for (int p = 0; p < kProblems; ++p) {
    const std::vector<float> one(got.begin() + 128 * p, got.begin() + 128 * (p + 1));
    worst = std::max(worst, ExpectProduct(one, &a[256 * p], &b[128 * p], &c[128 * p], 16, 8, 16, 1e-6, "mma"));
  }
  std::printf("mma m16n8k16: largest |D - ref| / sum|terms| = %.3g over %d products\n", worst, kProblems);
}

// The rows lane-named (Permuted), as ldmatrix's documentation lays them out: r[m] of lane
// L holds elements (L/4, 2(L%4)) and (L/4, 2(L%4)+1) of matrix m, whose row i is the row
// lane 8m + i named; with .trans, elements (2(L%4), L/4) and (2(L%4)+1, L/4).
template <bool kTrans>
void ExpectLdmatrixLayout(const std::vector<uint32_t>& got) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < 4; ++m) {
      auto element = [&](int i, int j) { return RowValue(Permuted(8 * m + i), j); };
      const int i = lane / 4, j = 2 * (lane % 4);
      const uint32_t lo = kTrans ? element(j, i) : element(i, j), hi = kTrans ? element(j + 1, i) : element(i, j + 1);
      EXPECT_EQ(got[4 * lane + m], lo | hi << 16) << "lane " << lane << " r[" << m << "]" << (kTrans ? " .trans" : "");
    }
  }
}

TEST_F(TensorCoreTest, LdmatrixX4FollowsTheDocumentedRowAddressesAndFragments) {
  uint32_t* out = Device(std::vector<uint32_t>(128, 0));
  Launch<LdmatrixKernel<false>>(1, 32, 0, nullptr, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ExpectLdmatrixLayout<false>(Host(out, 128));
}

TEST_F(TensorCoreTest, LdmatrixX4TransGivesTheTransposedFragments) {
  uint32_t* out = Device(std::vector<uint32_t>(128, 0));
  Launch<LdmatrixKernel<true>>(1, 32, 0, nullptr, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ExpectLdmatrixLayout<true>(Host(out, 128));
}

TEST_F(TensorCoreTest, CpAsyncLdmatrixAndMmaComputeATile) {
  std::mt19937_64 rng(30);
  const std::vector<uint16_t> x = RandomBf16(256, rng), y = RandomBf16(256, rng);
  const std::vector<float> c = RandomFloats(256, rng);
  float* d = Device(std::vector<float>(256, 0.f));
  Launch<TileKernel>(1, 32, 0, nullptr, Device(x), Device(y), Device(c), d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const double worst = ExpectProduct(Host(d, 256), x.data(), y.data(), c.data(), 16, 16, 16, 1e-6, "tile");
  std::printf("cp.async + ldmatrix + mma 16x16x16: largest |D - ref| / sum|terms| = %.3g\n", worst);
}

}  // namespace
}  // namespace multiscreen::kernels::cuda

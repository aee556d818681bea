// The CPU kernel table's own ops (kernels/cpu/cpu_kernel_table.h) against their
// definitions in kernels/kernel_table.h, written out as element loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernel_table.h"

namespace multiscreen::kernels::cpu {
namespace {

// A batch of 2-D blocks: count blocks [rows, cols], block b at src + b·src_stride (row
// stride ld_src) and at dst + b·dst_stride (row stride ld_dst).
struct Batch {
  int64_t rows, cols, count, ld_src, src_stride, ld_dst, dst_stride;
  // Elements src and dst must hold.
  int64_t SrcSize() const { return (count - 1) * src_stride + (rows - 1) * ld_src + cols; }
  int64_t DstSize() const { return (count - 1) * dst_stride + (rows - 1) * ld_dst + cols; }
};

// Odd shapes, ld > cols on both sides, count 1 and many; the blocks interleave in dst
// (dst_stride < ld_dst) as a layer's tiles do in the packed projections, and in src too.
const Batch kBatches[] = {
    {7, 9, 1, 40, 0, 25, 0},        // one block between two strides
    {1, 1, 1, 1, 0, 1, 0},          // one element
    {5, 3, 11, 4, 21, 77, 7},       // 11 blocks side by side, each 3 of a tile's 7 columns
    {13, 5, 6, 5, 65, 84, 14},      // PackProjections' shape: [tiles, d_E, w] → [d_E, tiles·C]
    {13, 5, 6, 84, 14, 5, 65},      // and UnpackProjections's, its reverse
    {3, 17, 4, 20, 3, 17, 51},      // source blocks overlapping (only destinations may not)
};

template <typename Real>
std::vector<Real> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Real> x(n);
  for (Real& v : x) v = static_cast<Real>(normal(rng));
  return x;
}

// dst after the batched copy (add = false) or add (add = true), element by element.
template <typename Real>
std::vector<Real> Reference(const Batch& s, const std::vector<Real>& src, std::vector<Real> dst, bool add) {
  for (int64_t b = 0; b < s.count; ++b) {
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        const Real x = src[b * s.src_stride + r * s.ld_src + c];
        Real& y = dst[b * s.dst_stride + r * s.ld_dst + c];
        y = add ? y + x : x;
      }
    }
  }
  return dst;
}

template <typename Real>
void ExpectBatchedOpsMatchTheirDefinition() {
  CpuKernelTable<Real> table;
  uint64_t seed = 1;
  for (const Batch& s : kBatches) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " count " << s.count);
    const std::vector<Real> src = Random<Real>(s.SrcSize(), seed++);
    const std::vector<Real> before = Random<Real>(s.DstSize() + 3, seed++);  // 3 past the last block stay
    std::vector<Real> dst = before;
    table.Copy2DBatched(src.data(), s.ld_src, s.src_stride, s.rows, s.cols, s.count, dst.data(), s.ld_dst,
                        s.dst_stride);
    EXPECT_EQ(dst, Reference(s, src, before, false));
    dst = before;
    table.Add2DBatched(src.data(), s.ld_src, s.src_stride, s.rows, s.cols, s.count, dst.data(), s.ld_dst,
                       s.dst_stride);
    EXPECT_EQ(dst, Reference(s, src, before, true));
    // The loop of single blocks it replaces, bit for bit.
    std::vector<Real> looped = before;
    dst = before;
    for (int64_t b = 0; b < s.count; ++b) {
      table.Add2D(src.data() + b * s.src_stride, s.ld_src, s.rows, s.cols, looped.data() + b * s.dst_stride,
                  s.ld_dst);
    }
    table.Add2DBatched(src.data(), s.ld_src, s.src_stride, s.rows, s.cols, s.count, dst.data(), s.ld_dst,
                       s.dst_stride);
    EXPECT_EQ(dst, looped);
  }
}

TEST(CpuKernelTableTest, BatchedCopyAndAddOfBlocksMatchTheirElementLoops) {
  ExpectBatchedOpsMatchTheirDefinition<float>();
  ExpectBatchedOpsMatchTheirDefinition<double>();
}

// GemmPacked is Gemm on operands the caller rounded, bit for bit (padded strides, both
// transposes, every precision): with A rounded as read (kRounded, the decoders') or read
// as Gemm reads it (kAsGemm, the training step's: under kFp16 as given, so the product
// differs from kRounded's; under kBf16 rounded, as a device converts it); PackOperand reads a B that already holds the
// precision's values in place instead of copying it, and a repack reuses its copy.
TEST(CpuKernelTableTest, GemmPackedIsGemmOnRoundedOperandsBitForBit) {
  CpuKernelTable<float> table;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float& v : x) v = uniform(rng);
    return x;
  };
  const int64_t m = 9, n = 70, k = 37;
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    const std::vector<float> a = random((ta ? k : m) * lda), b = random((tb ? n : k) * ldb), c = random(m * ldc);
    for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      SCOPED_TRACE(testing::Message() << "trans " << ta << tb << ", precision " << int(precision));
      std::vector<float> ra = a, rb = b, want = c, got = c, want_as_given = c, got_as_given = c;
      table.RoundTo(precision, ra.data(), static_cast<int64_t>(ra.size()));
      table.RoundTo(precision, rb.data(), static_cast<int64_t>(rb.size()));
      table.Gemm(precision, ta, tb, m, n, k, 0.75f, ra.data(), lda, rb.data(), ldb, 0.5f, want.data(), ldc);
      table.Gemm(precision, ta, tb, m, n, k, 0.75f, a.data(), lda, rb.data(), ldb, 0.5f, want_as_given.data(), ldc);
      PackedOperand<float> packed, packed_rounded;
      table.PackOperand(precision, b.data(), static_cast<int64_t>(b.size()), &packed);
      table.PackOperand(precision, rb.data(), static_cast<int64_t>(rb.size()), &packed_rounded);
      table.GemmPacked(ta, tb, m, n, k, 0.75f, a.data(), lda, PackedGemmA::kRounded, packed, ldb, 0.5f, got.data(),
                       ldc);
      table.GemmPacked(ta, tb, m, n, k, 0.75f, a.data(), lda, PackedGemmA::kAsGemm, packed, ldb, 0.5f,
                       got_as_given.data(), ldc);
      EXPECT_EQ(got, want);
      EXPECT_EQ(got_as_given, want_as_given);
      EXPECT_NE(got, c);
      // kAsGemm reads A as Gemm does: as given under kFp16 (the caller rounds), rounded under
      // kBf16 (as a device converts it).
      EXPECT_EQ(got_as_given == got, precision != Precision::kFp16);
      EXPECT_EQ(packed_rounded.values, rb.data());  // already rounded: read in place
      EXPECT_EQ(packed.values == b.data(), precision == Precision::kFp32);
      const float* copy = packed.values;
      table.PackOperand(precision, b.data(), static_cast<int64_t>(b.size()), &packed);
      EXPECT_EQ(packed.values, copy);  // repacked into the same memory
    }
  }
}

// HeadLoss with no lse/target_logit arrays keeps the loss in the table: TakeHeadLoss returns
// 0 + each call's HeadMeanLoss, as a caller summing the host statistics gets, bit for bit;
// the gradients are those of the call with arrays; a take restarts the sum.
TEST(CpuKernelTableTest, HeadLossKeptInTheTableSumsAsTheCallerWould) {
  CpuKernelTable<float> table;
  const int64_t rows = 37, V = 101, d_e = 16;
  const std::vector<float> e_bar = Random<float>(V * d_e, 3);
  std::vector<int64_t> target(rows);
  for (int64_t r = 0; r < rows; ++r) target[r] = r % 5 == 2 ? -1 : (r * 13) % V;
  table.PrepareHead(e_bar.data(), V, d_e);
  double want = 0;
  std::vector<float> dy_want, dy_got, de_want(V * d_e, 0.f), de_got(V * d_e, 0.f);
  for (int call = 0; call < 2; ++call) {
    const std::vector<float> y = Random<float>(rows * d_e, 10 + call);
    HeadLossArgs<float> args;
    args.y = y.data();
    args.e_bar = e_bar.data();
    args.rows = rows;
    args.vocab = V;
    args.d_e = d_e;
    args.scale = 1.5f;
    args.shift = std::nan("");
    args.target = target.data();
    args.coef = 1.f / rows;
    std::vector<double> lse(rows), tl(rows, 0.0);
    args.lse = lse.data();
    args.target_logit = tl.data();
    dy_want.assign(rows * d_e, 0.f);
    args.dy = dy_want.data();
    args.d_e_bar = de_want.data();
    table.HeadLoss(args);
    want += HeadMeanLoss(lse.data(), tl.data(), rows);
    args.lse = args.target_logit = nullptr;
    dy_got.assign(rows * d_e, 0.f);
    args.dy = dy_got.data();
    args.d_e_bar = de_got.data();
    table.HeadLoss(args);
    EXPECT_EQ(dy_got, dy_want);
  }
  EXPECT_EQ(de_got, de_want);
  EXPECT_GT(want, 0.0);
  EXPECT_EQ(table.TakeHeadLoss(), want);
  EXPECT_EQ(table.TakeHeadLoss(), 0.0);
}

TEST(CpuKernelTableTest, BatchedCopyOfNoBlocksOrEmptyBlocksWritesNothing) {
  CpuKernelTable<float> table;
  const std::vector<float> src(16, 1.f), before(16, 2.f);
  std::vector<float> dst = before;
  table.Copy2DBatched(src.data(), 4, 4, 4, 4, 0, dst.data(), 4, 4);
  table.Add2DBatched(src.data(), 4, 4, 0, 4, 3, dst.data(), 4, 4);
  table.Add2DBatched(src.data(), 4, 4, 4, 0, 3, dst.data(), 4, 4);
  EXPECT_EQ(dst, before);
}

}  // namespace
}  // namespace multiscreen::kernels::cpu

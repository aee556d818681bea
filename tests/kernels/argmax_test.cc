// kernels/cpu/argmax.h: the argmax order — the lowest index of the largest value, the
// first NaN if any, ±inf and ±0 as values — against std::max_element (what greedy decoding
// took before) where there is no NaN, and the order's independence of the visiting order.
#include "kernels/cpu/argmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace multiscreen::kernels::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t Of(const std::vector<float>& x) { return Argmax(x.data(), static_cast<int64_t>(x.size())); }

TEST(ArgmaxTest, TakesTheLowestIndexOfTheLargestValue) {
  EXPECT_EQ(Of({1, 3, 2}), 1);
  EXPECT_EQ(Of({1, 3, 3, 2, 3}), 1);               // ties: the lowest index
  EXPECT_EQ(Of({2, 2, 2}), 0);
  EXPECT_EQ(Of({-kInf, -kInf}), 0);                // all −inf: the first
  EXPECT_EQ(Of({1, kInf, 5, kInf}), 1);            // +inf is a value
  EXPECT_EQ(Of({-0.0f, 0.0f}), 0);                 // −0 = +0: a tie
  EXPECT_EQ(Of({-1, 0.0f, -0.0f}), 1);
  EXPECT_EQ(Of({7}), 0);
  EXPECT_EQ(Argmax<float>(nullptr, 0), -1);        // nothing to pick
}

TEST(ArgmaxTest, TheFirstNanWinsAsInNumpyAndTorch) {
  EXPECT_EQ(Of({1, kNan, 5, kNan}), 1);
  EXPECT_EQ(Of({kInf, 2, kNan}), 2);
  EXPECT_EQ(Of({kNan, 9}), 0);
  EXPECT_EQ(Of({kNan, kNan}), 0);
  const std::vector<double> d = {1.0, std::nan(""), 3.0};
  EXPECT_EQ(Argmax(d.data(), 3), 1);
}

// Where there is no NaN, the argmax is std::max_element's (greedy decoding's before the
// device argmax), on random logits with many ties (values on a coarse grid).
TEST(ArgmaxTest, EqualsMaxElementWithoutNan) {
  std::mt19937 rng(5);
  for (int64_t n : {1, 2, 31, 1000, 1025, 50257}) {
    std::uniform_int_distribution<int> grid(-20, 20);
    std::vector<float> x(n);
    for (float& v : x) v = 0.25f * grid(rng);
    EXPECT_EQ(Of(x), std::max_element(x.begin(), x.end()) - x.begin()) << n;
  }
}

// ArgmaxBefore is a strict total order on the indices: any visiting order (here the
// reverse, and a tree of pairs as a device's block takes it) finds the same first index.
TEST(ArgmaxTest, AnyReductionOrderFindsTheSameIndex) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> grid(0, 3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(37);
    for (float& v : x) v = grid(rng) == 0 && trial % 3 == 0 ? kNan : float(grid(rng));
    const int64_t want = Of(x);
    int64_t backward = int64_t(x.size()) - 1;
    for (int64_t i = backward - 1; i >= 0; --i) {
      if (ArgmaxBefore(x[i], i, x[backward], backward)) backward = i;
    }
    std::vector<int64_t> idx(x.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t(i);
    while (idx.size() > 1) {
      std::vector<int64_t> next;
      for (size_t i = 0; i + 1 < idx.size(); i += 2) {
        next.push_back(ArgmaxBefore(x[idx[i + 1]], idx[i + 1], x[idx[i]], idx[i]) ? idx[i + 1] : idx[i]);
      }
      if (idx.size() % 2 == 1) next.push_back(idx.back());
      idx = next;
    }
    EXPECT_EQ(backward, want);
    EXPECT_EQ(idx[0], want);
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cpu

// eval/python_random.h against values CPython 3.11 printed for the same calls
// (python3 -c "import random; r = random.Random(123); ...").
#include "eval/python_random.h"

#include <gtest/gtest.h>

#include <numeric>

namespace multiscreen::eval {
namespace {

TEST(PythonRandomTest, GetRandBitsMatchesCPythonForSmallAndWideSeeds) {
  PythonRandom r(123);
  EXPECT_EQ(r.GetRandBits(32), 224899942u);
  EXPECT_EQ(r.GetRandBits(32), 1149664691u);
  EXPECT_EQ(r.GetRandBits(32), 374463918u);
  EXPECT_EQ(PythonRandom(0).GetRandBits(32), 3626764237u);
  PythonRandom wide(uint64_t{1} << 40 | 5);  // a two-word init_by_array key
  EXPECT_EQ(wide.GetRandBits(32), 2166296868u);
  EXPECT_EQ(wide.GetRandBits(40), 294277936956u);
  EXPECT_EQ(wide.GetRandBits(64), 17077747508935831298u);
}

TEST(PythonRandomTest, RandomIsTheSame53BitDouble) {
  PythonRandom r(123);
  EXPECT_EQ(r.Random(), 0.052363598850944326);
  EXPECT_EQ(r.Random(), 0.08718667752263232);
}

TEST(PythonRandomTest, SampleOfALargeRangeTakesTheSetBranch) {
  PythonRandom r(123);
  const std::vector<int64_t> expected = {154907, 380679, 191421, 906309, 527023, 379501, 212931, 979234, 140007,
                                         497540, 662248, 689633, 448334, 457352, 993477, 154422, 267418, 241618,
                                         453597, 688211, 450010, 835775, 357072, 271732, 101751, 557468};
  EXPECT_EQ(r.SampleRange(100000, 1000000, 26), expected);
}

TEST(PythonRandomTest, SampleOfASmallRangeTakesThePoolBranch) {
  PythonRandom r(123);
  EXPECT_EQ(r.SampleRange(0, 50, 10), (std::vector<int64_t>{3, 17, 5, 26, 48, 6, 2, 24, 34, 35}));
}

TEST(PythonRandomTest, ShuffleChoicesAndRandrangeMatchCPython) {
  PythonRandom r(123);
  std::vector<int> x(10);
  std::iota(x.begin(), x.end(), 0);
  r.Shuffle(x);
  EXPECT_EQ(x, (std::vector<int>{8, 7, 5, 9, 2, 3, 6, 1, 4, 0}));
  PythonRandom c(123);
  EXPECT_EQ(c.Choices({0, 1, 2, 4, 8}, 10), (std::vector<int64_t>{1, 2, 3, 2, 4, 1, 4, 3, 4, 2}));
  PythonRandom k(123);
  EXPECT_EQ(k.RandRange(10000, 100000), 16863);
  EXPECT_EQ(k.RandRange(10000, 100000), 45084);
  EXPECT_EQ(k.RandRange(10000, 100000), 21427);
}

}  // namespace
}  // namespace multiscreen::eval

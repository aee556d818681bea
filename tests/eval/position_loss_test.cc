// eval/position_loss.h: averages, the ±10 % smoothing window, the flat-or-not verdict; and
// eval/passkey.h, eval/task_dump.h.
#include "eval/position_loss.h"

#include <gtest/gtest.h>

#include "eval/passkey.h"
#include "eval/task_dump.h"

namespace multiscreen::eval {
namespace {

TEST(PositionLossTest, MeanIsPerPositionOverDocuments) {
  PositionLoss p(3);
  const float a[] = {1, 2, 3}, b[] = {3, 4, 5};
  p.Add(a);
  p.Add(b);
  EXPECT_EQ(p.documents(), 2);
  EXPECT_EQ(p.Mean(), (std::vector<double>{2, 3, 4}));
}

TEST(PositionLossTest, SmoothingAveragesPositionsWithinTenPercent) {
  PositionLoss p(30);
  std::vector<float> losses(30);
  for (int i = 0; i < 30; ++i) losses[i] = static_cast<float>(i + 1);  // loss = position
  p.Add(losses.data());
  const auto s = p.Smoothed();
  EXPECT_DOUBLE_EQ(s[0], 1.0);   // position 1: [0.9, 1.1] → {1}
  EXPECT_DOUBLE_EQ(s[9], 10.0);  // position 10: [9, 11] → mean 10
  EXPECT_DOUBLE_EQ(s[19], 20.0); // position 20: [18, 22]
  EXPECT_DOUBLE_EQ(s[29], 28.5); // position 30: [27, 33] clipped to [27, 30]
}

TEST(PositionLossTest, VerdictComparesPastTheTrainingLengthWithTheHalfBefore) {
  std::vector<double> flat(100, 5.0), rising(100, 5.0);
  for (int p = 51; p <= 100; ++p) rising[p - 1] = 6.0;
  EXPECT_TRUE(PastTrainingLength(flat, 50).flat);
  const FlatVerdict v = PastTrainingLength(rising, 50);
  EXPECT_TRUE(v.applicable);
  EXPECT_FALSE(v.flat);
  EXPECT_DOUBLE_EQ(v.after - v.before, 1.0);
  EXPECT_EQ(v.line.rfind("not flat", 0), 0u) << v.line;
  EXPECT_FALSE(PastTrainingLength(flat, 100).applicable);
}

TEST(PasskeyTest, PromptHoldsTheKeyAtItsDepthWithinTheTokenBudget) {
  auto words = [](const std::string& s) {  // a stand-in tokenizer: one token per space-separated piece
    int64_t n = 1;
    for (char c : s) n += c == ' ';
    return n;
  };
  auto instances = PasskeyInstances(400, 0.5, 3, 123, words);
  ASSERT_TRUE(instances.ok()) << instances.status();
  ASSERT_EQ(instances->size(), 3u);
  // random.Random(123).randrange(10000, 100000) → 16863, 45084, 21427 (CPython).
  EXPECT_EQ((*instances)[0].answer, "16863");
  EXPECT_EQ((*instances)[1].answer, "45084");
  for (const auto& inst : *instances) {
    EXPECT_LE(words(inst.prompt), 400);
    const size_t key = inst.prompt.find("The pass key is " + inst.answer + ".");
    ASSERT_NE(key, std::string::npos);
    EXPECT_NEAR(double(key) / inst.prompt.size(), 0.5, 0.05);
    EXPECT_EQ(inst.prompt.substr(inst.prompt.size() - 15), "The pass key is");
  }
  EXPECT_FALSE(PasskeyInstances(20, 0.5, 1, 123, words).ok());
}

TEST(PasskeyTest, OnlyTheExactDigitsAfterSpacesScore) {
  EXPECT_TRUE(PasskeyCorrect(" 16863. Remember", "16863"));
  EXPECT_TRUE(PasskeyCorrect("16863", "16863"));
  EXPECT_FALSE(PasskeyCorrect(" 168631", "16863"));
  EXPECT_FALSE(PasskeyCorrect(" 1686", "16863"));
  EXPECT_FALSE(PasskeyCorrect("x16863", "16863"));
}

TEST(TaskDumpTest, EscapesAsPythonJsonDumps) {
  // json.dumps({"prompt": "a\"b\\\n\t\x01é😀\x7f", "answer": "12"})
  EXPECT_EQ(TaskLine("a\"b\\\n\t\x01\xc3\xa9\xf0\x9f\x98\x80\x7f", "12"),
            "{\"prompt\": \"a\\\"b\\\\\\n\\t\\u0001\\u00e9\\ud83d\\ude00\\u007f\", \"answer\": \"12\"}\n");
}

}  // namespace
}  // namespace multiscreen::eval

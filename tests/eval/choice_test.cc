// Zero-shot multiple choice (eval/choice.h): each format's prompts from hand-made lines,
// errors naming file:line and the field, and the scoring through fake models whose
// log-likelihoods are fixed by hand (one nat per token; a loss that depends on the target
// token), so that acc, acc_norm and the per-choice sums are known without the code under
// test. The real model's sums are checked end to end in choice_cli_test.py.
#include "eval/choice.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace multiscreen::eval {
namespace {

class ChoiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Gpt2Tokenizer::Load(std::string(MS_SOURCE_DIR) + "/data_cache/gpt2");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(*t).release();
  }
  static void TearDownTestSuite() { delete tok_; }
  static ChoiceItem Parse(ChoiceFormat f, const std::string& line) {
    auto item = ParseChoiceLine(f, line, "t.jsonl:1");
    EXPECT_TRUE(item.ok()) << item.status();
    return item.ok() ? *item : ChoiceItem{};
  }
  static std::string Error(ChoiceFormat f, const std::string& line) {
    auto item = ParseChoiceLine(f, line, "t.jsonl:7");
    EXPECT_FALSE(item.ok());
    return item.ok() ? "" : std::string(item.status().message());
  }
  static std::vector<int32_t> Ids(const std::string& text) { return *tok_->Encode(text); }
  static inline Gpt2Tokenizer* tok_ = nullptr;
  static constexpr int32_t kEos = 50256;
};

// Every target token costs one nat: ll = −(continuation tokens).
void OneNatPerToken(const int32_t*, int64_t n, float* losses) {
  for (int64_t i = 0; i + 1 < n; ++i) losses[i] = 1.0f;
}

TEST_F(ChoiceTest, HellaSwagPromptIsLmEvalsWithTitleAndBracketsCleaned) {
  const ChoiceItem item = Parse(ChoiceFormat::kHellaSwag,
                                R"({"activity_label": "Home and Garden", "ctx_a": "[header] How to grow basil [title] Pick a sunny spot.",)"
                                R"( "ctx_b": "then THE pot", "endings": ["[step] Water it daily.", "b", "c", "d"], "label": "2"})");
  ASSERT_EQ(item.contexts.size(), 4u);
  EXPECT_EQ(item.contexts[0], "Home and Garden: How to grow basil. Pick a sunny spot. Then the pot");
  EXPECT_EQ(item.choices[0], " Water it daily.");  // the bracket goes, the space before it stays (as lm-eval)
  EXPECT_EQ(item.continuations[0], "  Water it daily.");
  EXPECT_EQ(item.continuations[3], " d");
  EXPECT_EQ(item.gold, 2);
  // `ctx` whole when ctx_a is absent; no prefix without activity_label.
  const ChoiceItem ctx = Parse(ChoiceFormat::kHellaSwag, R"({"ctx": "A man sits.", "endings": ["a","b","c","d"], "label": 0})");
  EXPECT_EQ(ctx.contexts[1], "A man sits.");
}

TEST_F(ChoiceTest, HellaSwagPreprocessKeepsBracketsAcrossANewlineAndHalvesSpacesOnce) {
  EXPECT_EQ(HellaSwagPreprocess("  a [x] b  "), "a b");
  EXPECT_EQ(HellaSwagPreprocess("a [x\ny] b"), "a [x\ny] b");
  EXPECT_EQ(HellaSwagPreprocess("a    b"), "a  b");  // Python's replace("  ", " "): one pass
  EXPECT_EQ(HellaSwagPreprocess("Fix it [title] Now [step] go"), "Fix it. Now go");
}

// Python's str.strip() strips Unicode whitespace too: U+00A0 (C2 A0), U+3000 (E3 80 80),
// U+2009 (E2 80 89); "é" (C3 A9) and U+2019 (E2 80 99) are kept.
TEST_F(ChoiceTest, StrippingIsPythonsUnicodeWhitespace) {
  EXPECT_EQ(HellaSwagPreprocess("\xC2\xA0 caf\xC3\xA9\xE3\x80\x80\xE2\x80\x89"), "caf\xC3\xA9");
  EXPECT_EQ(HellaSwagPreprocess("\xE2\x80\x99x\xE2\x80\x99"), "\xE2\x80\x99x\xE2\x80\x99");
  EXPECT_EQ(HellaSwagPreprocess("\xC2\xA0\xE3\x80\x80"), "");
  const ChoiceItem item = Parse(ChoiceFormat::kWinoGrande,
                                "{\"sentence\": \"a _ b\\u00a0\", \"option1\": \"x\", \"option2\": \"y\", \"answer\": 1}");
  EXPECT_EQ(item.continuations[0], " b");
}

TEST_F(ChoiceTest, PiqaPromptIsQuestionAnswer) {
  const ChoiceItem item = Parse(ChoiceFormat::kPiqa, R"({"goal": "Open a jar", "sol1": "a", "sol2": "twist the lid off", "label": 1})");
  EXPECT_EQ(item.contexts[0], "Question: Open a jar\nAnswer:");
  EXPECT_EQ(item.continuations[1], " twist the lid off");
  EXPECT_EQ(item.gold, 1);
}

TEST_F(ChoiceTest, ArcGoldIsTheChoiceLabelledAnswerKeyWithDigitsForLetters) {
  const ChoiceItem ai2 = Parse(ChoiceFormat::kArc,
                               R"({"id": "x", "question": {"stem": "Which is a gas?", "choices": [{"text": "ice", "label": "A"},)"
                               R"( {"text": "steam", "label": "B"}, {"text": "rock", "label": "C"}]}, "answerKey": "B"})");
  EXPECT_EQ(ai2.contexts[2], "Question: Which is a gas?\nAnswer:");
  EXPECT_EQ(ai2.continuations[1], " steam");
  EXPECT_EQ(ai2.gold, 1);
  const ChoiceItem digits = Parse(ChoiceFormat::kArc,
                                  R"({"question": {"stem": "Q", "choices": [{"text": "x", "label": "1"}, {"text": "y", "label": "2"},)"
                                  R"( {"text": "z", "label": "3"}]}, "answerKey": "3"})");
  EXPECT_EQ(digits.gold, 2);
  const ChoiceItem mixed = Parse(ChoiceFormat::kArc,
                                 R"({"question": {"stem": "Q", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]},)"
                                 R"( "answerKey": "2"})");
  EXPECT_EQ(mixed.gold, 1);
  const ChoiceItem hf = Parse(ChoiceFormat::kArc,
                              R"({"question": "Q?", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "A"})");
  EXPECT_EQ(hf.contexts[0], "Question: Q?\nAnswer:");
  EXPECT_EQ(hf.gold, 0);
  // Two choices labelled as answerKey: the first is gold (lm-eval's list.index).
  const ChoiceItem twice = Parse(ChoiceFormat::kArc,
                                 R"({"question": "Q?", "choices": {"text": ["x", "y", "z"], "label": ["A", "B", "B"]},)"
                                 R"( "answerKey": "B"})");
  EXPECT_EQ(twice.gold, 1);
}

// ctx_b is capitalized as Python's str.capitalize(): Unicode-aware, the rest lower-cased
// ("CAFÉ" → "café"; an ASCII-only capitalize left "cafÉ").
TEST_F(ChoiceTest, HellaSwagCapitalizesCtxBAsPython) {
  const ChoiceItem item = Parse(ChoiceFormat::kHellaSwag,
                                "{\"ctx_a\": \"Two friends walk in.\", \"ctx_b\": \"they sit in the CAF\\u00c9 \\u00c9T\\u00c9\","
                                " \"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": 0}");
  EXPECT_EQ(item.contexts[0], "Two friends walk in. They sit in the caf\xC3\xA9 \xC3\xA9t\xC3\xA9");
  const ChoiceItem sharp = Parse(ChoiceFormat::kHellaSwag,
                                 "{\"ctx_a\": \"x\", \"ctx_b\": \"\\u00dfE\", \"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": 0}");
  EXPECT_EQ(sharp.contexts[0], "x Sse");  // ß title-cases to "Ss"
}

// An empty choice (PIQA's sol2 "", a HellaSwag ending that is only "[substeps]", a
// WinoGrande sentence that ends at the blank) is scored as lm-eval scores it: the
// continuation " ", length 0.
TEST_F(ChoiceTest, AnEmptyChoiceIsTheContinuationOfOneSpace) {
  const ChoiceItem piqa = Parse(ChoiceFormat::kPiqa, R"({"goal": "g", "sol1": "a", "sol2": "", "label": 0})");
  ASSERT_EQ(piqa.choices.size(), 2u);
  EXPECT_EQ(piqa.choices[1], "");
  EXPECT_EQ(piqa.continuations[1], " ");
  const ChoiceItem hella = Parse(ChoiceFormat::kHellaSwag, R"({"ctx": "c", "endings": ["a", " [substeps] ", "c", "d"], "label": 0})");
  ASSERT_EQ(hella.choices.size(), 4u);
  EXPECT_EQ(hella.choices[1], "");
  EXPECT_EQ(hella.continuations[1], " ");
  const ChoiceItem wino = Parse(ChoiceFormat::kWinoGrande, R"({"sentence": "It was _", "option1": "a", "option2": "b", "answer": 2})");
  ASSERT_EQ(wino.choices.size(), 2u);
  EXPECT_EQ(wino.contexts[1], "It was b");
  EXPECT_EQ(wino.continuations[0], " ");
  EXPECT_EQ(wino.choices[0], "");
}

// One nat per token: the empty choice's " " is one token, the fewest, so acc picks it;
// ll / len is −1 / 0 = −inf (numpy's), so acc_norm never does.
TEST_F(ChoiceTest, AccNormNeverPicksAnEmptyChoice) {
  const ChoiceItem item = Parse(ChoiceFormat::kPiqa, R"({"goal": "Open a jar", "sol1": "twist it", "sol2": "", "label": 0})");
  auto s = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 64, OneNatPerToken);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->loglik, (std::vector<double>{-2, -1}));
  EXPECT_EQ(s->tokens, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(s->chars, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(s->pred, 1);
  EXPECT_EQ(s->pred_norm, 0);
  // numpy's argmax: every value −inf gives the first; a NaN (0 / 0) is taken first.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ArgMax({-inf, -inf}), 0);
  EXPECT_EQ(ArgMax({-1, nan, 0}), 1);
}

// With one choice every answer is right: such an item is refused, not scored as correct.
TEST_F(ChoiceTest, AnItemWithFewerThanTwoChoicesIsRefused) {
  EXPECT_EQ(Error(ChoiceFormat::kArc, R"({"question": {"stem": "Q", "choices": [{"text": "x", "label": "A"}]}, "answerKey": "A"})"),
            "t.jsonl:7: 1 choice: an item needs 2 or more (with one, acc counts it correct whatever the model says)");
  EXPECT_EQ(Error(ChoiceFormat::kArc, R"({"question": "Q", "choices": {"text": ["x"], "label": ["A"]}, "answerKey": "A"})"),
            "t.jsonl:7: 1 choice: an item needs 2 or more (with one, acc counts it correct whatever the model says)");
}

TEST_F(ChoiceTest, WinoGrandeIsPartialScoringOfTheTextAfterTheBlank) {
  const ChoiceItem item = Parse(ChoiceFormat::kWinoGrande,
                                R"({"sentence": "Sarah was a better surgeon than Maria so _ always got the harder cases.",)"
                                R"( "option1": "Sarah", "option2": "Maria", "answer": "2"})");
  ASSERT_EQ(item.contexts.size(), 2u);
  EXPECT_EQ(item.contexts[0], "Sarah was a better surgeon than Maria so Sarah");
  EXPECT_EQ(item.contexts[1], "Sarah was a better surgeon than Maria so Maria");
  EXPECT_EQ(item.continuations[0], " always got the harder cases.");
  EXPECT_EQ(item.continuations[1], " always got the harder cases.");
  EXPECT_EQ(item.gold, 1);
}

TEST_F(ChoiceTest, MalformedLinesNameFileLineAndField) {
  EXPECT_EQ(Error(ChoiceFormat::kPiqa, R"({"goal": "g", "sol1": "a", "label": 0})"),
            "t.jsonl:7: field \"sol2\": expected a string (missing)");
  EXPECT_EQ(Error(ChoiceFormat::kPiqa, R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 2})"),
            "t.jsonl:7: field \"label\": expected an integer in [0, 1] (or its digits as a string), got 2");
  EXPECT_EQ(Error(ChoiceFormat::kHellaSwag, R"({"ctx": "c", "endings": ["a", "b"], "label": 0})"),
            "t.jsonl:7: field \"endings\": expected an array of 4 strings");
  EXPECT_EQ(Error(ChoiceFormat::kArc, R"({"question": {"stem": "Q", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]},)"
                                      R"( "answerKey": "C"})"),
            "t.jsonl:7: field \"answerKey\": expected one of the choices' labels, got \"C\"");
  EXPECT_EQ(Error(ChoiceFormat::kWinoGrande, R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})"),
            "t.jsonl:7: field \"sentence\": expected a string with a \"_\" (the blank)");
  EXPECT_EQ(Error(ChoiceFormat::kWinoGrande, R"({"sentence": "x _ y", "option1": "a", "option2": "b", "answer": 3})"),
            "t.jsonl:7: field \"answer\": expected an integer in [1, 2] (or its digits as a string), got 3");
  EXPECT_EQ(Error(ChoiceFormat::kPiqa, "[1, 2]"), "t.jsonl:7: not a JSON object");
  EXPECT_EQ(Error(ChoiceFormat::kPiqa, "{\"goal\": ").rfind("t.jsonl:7: not valid JSON (parse error at line 1, column 10: ", 0), 0u)
      << Error(ChoiceFormat::kPiqa, "{\"goal\": ");
  EXPECT_NE(Error(ChoiceFormat::kPiqa, "{\"goal\": \"\\ud800\"}").find("not valid JSON (parse error"), std::string::npos);
  EXPECT_NE(Error(ChoiceFormat::kPiqa, "{\"goal\": \"\xff\"}").find("not valid JSON (parse error"), std::string::npos);
  // nlohmann's out_of_range exception (not a parse_error) is a line like the others.
  EXPECT_EQ(Error(ChoiceFormat::kPiqa, R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 1e999})"),
            "t.jsonl:7: not valid JSON (number overflow parsing '1e999')");
  EXPECT_FALSE(ParseChoiceFormat("mmlu").ok());
}

// One nat per token: acc picks the fewest continuation tokens, acc_norm the most characters
// per nat. " a" is 1 token and 1 character, " twist the lid off" 4 tokens (GPT-2: " twist",
// " the", " lid", " off") and 17 characters: ll = −1, −4; ll/len = −1, −0.235.
TEST_F(ChoiceTest, AccAndAccNormDifferByTheLengthNormalisation) {
  const ChoiceItem item = Parse(ChoiceFormat::kPiqa, R"({"goal": "Open a jar", "sol1": "a", "sol2": "twist the lid off", "label": 1})");
  auto s = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 64, OneNatPerToken);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->loglik, (std::vector<double>{-1, -4}));  // the context's 8 tokens are not in the sum
  EXPECT_EQ(s->tokens, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(s->chars, (std::vector<int64_t>{1, 17}));  // characters of the choice, without the leading space
  EXPECT_EQ(s->pred, 0);
  EXPECT_EQ(s->pred_norm, 1);
  EXPECT_FALSE(s->truncated);
  const ChoiceSummary sum = SummarizeChoices({item}, {*s});
  EXPECT_EQ(sum.acc, 0.0);
  EXPECT_EQ(sum.acc_norm, 1.0);
}

// A loss that depends on the target token, (id mod 100)/10: the sum is over exactly the
// continuation's targets, each once. " twist the lid off" = 14528 262 19789 572:
// losses 2.8, 6.2, 8.9, 7.2 → ll = −25.1.
TEST_F(ChoiceTest, TheSumCoversExactlyTheContinuationsTargets) {
  ASSERT_EQ(Ids(" twist the lid off"), (std::vector<int32_t>{14528, 262, 19789, 572}));
  auto by_target = [](const int32_t* ids, int64_t n, float* losses) {
    for (int64_t i = 0; i + 1 < n; ++i) losses[i] = static_cast<float>(ids[i + 1] % 100) / 10.0f;
  };
  const ChoiceItem item = Parse(ChoiceFormat::kPiqa, R"({"goal": "Open a jar", "sol1": "a", "sol2": "twist the lid off", "label": 1})");
  auto s = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 64, by_target);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(s->loglik[1], -25.1, 1e-5);
  EXPECT_NEAR(s->loglik[0], -5.7, 1e-6);  // " a" = 257
}

TEST_F(ChoiceTest, LongContextsLoseTokensFromTheLeft) {
  const ChoiceItem item = Parse(ChoiceFormat::kPiqa, R"({"goal": "Open a jar", "sol1": "a", "sol2": "twist the lid off", "label": 1})");
  std::vector<std::vector<int32_t>> seen;
  auto record = [&](const int32_t* ids, int64_t n, float* losses) {
    seen.emplace_back(ids, ids + n);
    OneNatPerToken(ids, n, losses);
  };
  auto s = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 5, record);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->truncated);
  EXPECT_EQ(s->loglik, (std::vector<double>{-1, -4}));
  // Question: Open a jar\nAnswer: = 24361 25 4946 257 17379 198 33706 25; max_len + 1 = 6 tokens kept.
  EXPECT_EQ(seen[0], (std::vector<int32_t>{257, 17379, 198, 33706, 25, 257}));
  EXPECT_EQ(seen[1], (std::vector<int32_t>{33706, 25, 14528, 262, 19789, 572}));
  // A continuation longer than the window leaves nothing to condition on: refused.
  auto refused = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 3, record);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "t.jsonl:1: choice 1: the continuation has 4 tokens, more than the 3 positions of --seq_len");
  EXPECT_EQ(SummarizeChoices({item}, {*s}).truncated, 1);
}

TEST_F(ChoiceTest, TrailingContextSpaceMovesToTheContinuationAndAnEmptyContextIsEos) {
  std::vector<std::vector<int32_t>> seen;
  auto record = [&](const int32_t* ids, int64_t n, float* losses) {
    seen.emplace_back(ids, ids + n);
    OneNatPerToken(ids, n, losses);
  };
  ChoiceItem item;
  item.contexts = {"Answer: ", ""};
  item.continuations = {"yes", " a"};
  item.choices = {"yes", "a"};
  item.gold = 0;
  auto s = ScoreChoiceItem(item, "t.jsonl:1", *tok_, kEos, 64, record);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(seen[0], (std::vector<int32_t>{33706, 25, 3763}));  // "Answer:" + " yes"
  EXPECT_EQ(s->tokens[0], 1);
  EXPECT_EQ(seen[1], (std::vector<int32_t>{kEos, 257}));
}

TEST_F(ChoiceTest, CharactersAreUnicodeCharactersNotBytes) {
  EXPECT_EQ(Utf8Chars("café"), 4);
  EXPECT_EQ(Utf8Chars(""), 0);
  EXPECT_EQ(ArgMax({-2, -1, -1}), 1);  // ties go to the first, as numpy's argmax
}

// lm-eval's stderr of a mean of 0/1 scores: √(p(1 − p)/(n − 1)); 3 of 4 → √(0.1875/3) = 0.25.
TEST_F(ChoiceTest, SummaryStderrIsTheSampleStandardErrorOfTheMean) {
  std::vector<ChoiceItem> items(4);
  std::vector<ChoiceScore> scores(4);
  for (int i = 0; i < 4; ++i) {
    items[i].gold = 0;
    scores[i].pred = i == 3 ? 1 : 0;
    scores[i].pred_norm = i == 0 ? 0 : 1;
  }
  const ChoiceSummary s = SummarizeChoices(items, scores);
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.acc, 0.75);
  EXPECT_DOUBLE_EQ(s.acc_stderr, 0.25);
  EXPECT_DOUBLE_EQ(s.acc_norm, 0.25);
  EXPECT_DOUBLE_EQ(s.acc_norm_stderr, 0.25);
  EXPECT_TRUE(std::isnan(SummarizeChoices({items[0]}, {scores[0]}).acc_stderr));
}

}  // namespace
}  // namespace multiscreen::eval

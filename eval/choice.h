// Zero-shot multiple choice (issue 30; the paper's Table 1: HellaSwag, PIQA, ARC-Easy,
// ARC-Challenge, WinoGrande), scored as lm-evaluation-harness scores it: every candidate
// is a (context, continuation) pair, its score the continuation's log-likelihood
//   ll_c = Σ_{t ∈ continuation} log p(x_t | x_<t)          (nats, natural log)
// given the context; acc takes argmax_c ll_c, acc_norm argmax_c ll_c / len(choice_c), with
// len the number of Unicode characters of the choice text (lm-eval's
// `completion_len = len(choice)` on a Python str; bytes for ASCII text), ties to the first
// (numpy's argmax). An empty choice has length 0: ll / 0 is −inf in numpy, so acc_norm
// never picks it (unless every choice is empty, or ll is exactly 0: NaN, which numpy's
// argmax takes first). The model is a callback (the per-token losses of one sequence), so
// that this file reads, prompts and scores without a model; cli/eval_choice.cc runs it
// with eval::ModelRunner.
//
// The benchmarks' published JSONL fields, one item per line (blank lines skipped):
//   hellaswag  (rowanz/hellaswag): `activity_label`, `ctx_a`, `ctx_b`, `endings` [4],
//              `label` (int or digit string). Context = preprocess(activity_label + ": " +
//              ctx_a + " " + Capitalize(ctx_b)), choices = preprocess(ending), as lm-eval's
//              hellaswag task; without `ctx_a`, `ctx` is used whole; without
//              `activity_label` no "label: " prefix. preprocess: strip surrounding
//              whitespace (Python's str.strip(): U+00A0, U+3000 and the rest too),
//              " [title]" → ". ", every "[…]" (no newline inside) removed,
//              then "  " → " " (one pass, as Python's str.replace). Capitalize is Python's
//              str.capitalize, Unicode-aware (eval/python_case.h: the first character
//              title-cased, the rest lower-cased, CPython's case data).
//   piqa       (ybisk/piqa): `goal`, `sol1`, `sol2`, and `label` 0|1 in the same line (the
//              published train/valid files keep labels in a separate .lst: join them into
//              the JSONL, as the Hugging Face copy has them). Context "Question: " + goal +
//              "\nAnswer:", choices sol1, sol2.
//   arc        (allenai ARC-V1-Feb2018 *.jsonl): `question` {`stem`, `choices`
//              [{`text`, `label`}]}, `answerKey`; also the Hugging Face layout (`question`
//              a string, `choices` {`text`: [...], `label`: [...]}). Context "Question: " +
//              stem + "\nAnswer:", choices the texts; gold the first choice whose label equals
//              answerKey (lm-eval's list.index), where "1"…"5" and "A"…"E" name the same choice (some ARC items
//              number their choices).
//   winogrande (allenai winogrande *.jsonl): `sentence` with a "_" (the first is the blank), `option1`,
//              `option2`, `answer` "1"|"2". Partial scoring (lm-eval's, after Trinh & Le
//              2018): candidate k's context is the sentence before "_" with option k in its
//              place, the continuation the rest after "_" (whitespace stripped), the same
//              for both; so acc_norm equals acc here (lm-eval reports acc only).
// The continuation is " " + choice (lm-eval's target delimiter). Tokenization follows
// lm-eval's pair rule: whitespace at the end of the context moves to the front of the
// continuation; context + continuation is encoded whole, and the continuation's tokens
// are those past the context's own encoding. An empty context is one EOS token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/gpt2_tokenizer.h"

namespace multiscreen::eval {

enum class ChoiceFormat { kHellaSwag, kPiqa, kArc, kWinoGrande };

// "hellaswag" | "piqa" | "arc" | "winogrande"; anything else is an error naming --format.
absl::StatusOr<ChoiceFormat> ParseChoiceFormat(std::string_view name);
const char* ChoiceFormatName(ChoiceFormat format);

// One item: for candidate k, contexts[k] and continuations[k] (with its leading " "),
// choices[k] the text whose length normalizes acc_norm; gold in [0, K).
struct ChoiceItem {
  int64_t line = 0;  // 1-based line of the file
  std::vector<std::string> contexts, continuations, choices;
  int64_t gold = -1;
};

// lm-eval's HellaSwag text clean-up (above).
std::string HellaSwagPreprocess(std::string_view text);

// One JSONL line of `format`. `where` is "FILE:LINE", the prefix of every error, which
// names the missing or malformed field ("FILE:3: field \"endings\": expected an array of
// 4 strings"), an invalid JSON line (nlohmann's reason without its tag: a syntax error,
// invalid UTF-8, "number overflow parsing '1e999'"), a label out of range, an item with
// fewer than 2 choices. An empty choice text (a PIQA sol2 of "", a HellaSwag ending that
// is only "[substeps]", a WinoGrande sentence that ends at the blank) is an item like any
// other, as lm-eval scores it: its continuation is " ", its length 0.
absl::StatusOr<ChoiceItem> ParseChoiceLine(ChoiceFormat format, std::string_view line, const std::string& where);

// Every item of `path` (blank lines skipped), plain or compressed (.gz, .zst: read as
// prepare reads them, data/byte_source.h). Errors: the file cannot be read (or is corrupt
// compressed data), no item, and ParseChoiceLine's, naming "path:line".
absl::StatusOr<std::vector<ChoiceItem>> ReadChoiceFile(const std::string& path, ChoiceFormat format);

// Unicode characters of UTF-8 `s` (bytes that are not continuation bytes 10xxxxxx).
int64_t Utf8Chars(std::string_view s);

// losses[i] = −log p(ids[i+1] | ids[0..i]) in nats for i < n − 1 (ModelRunner::TokenLossesFull).
using TokenLossFn = std::function<void(const int32_t* ids, int64_t n, float* losses)>;

struct ChoiceScore {
  std::vector<double> loglik;   // [K] ll_k in nats
  std::vector<int64_t> tokens;  // [K] continuation tokens
  std::vector<int64_t> chars;   // [K] len(choice_k) in characters
  int64_t pred = -1, pred_norm = -1;
  bool truncated = false;  // some candidate's context was cut on the left (below)
};

// Scores `item`: per candidate the pair is encoded (rule above) and the sequence
// context + continuation, at most max_len + 1 tokens (max_len positions of input; longer
// ones lose context tokens from the left, as lm-eval truncates to its max_length), goes
// through `losses` once. Errors ("WHERE: choice k: …", WHERE the item's file:line): a
// continuation with no token, or more than max_len tokens (nothing of the context would
// be left), and the tokenizer's (invalid UTF-8).
absl::StatusOr<ChoiceScore> ScoreChoiceItem(const ChoiceItem& item, const std::string& where, const Gpt2Tokenizer& tok,
                                            int32_t eos, int64_t max_len, const TokenLossFn& losses);

// First index of the largest value, or of the first NaN (numpy's argmax).
int64_t ArgMax(const std::vector<double>& v);

// acc and acc_norm over n items with their standard errors, lm-eval's: the sample standard
// deviation over √n, √(p(1 − p)/(n − 1)) for a mean p of 0/1 scores (NaN for n < 2).
struct ChoiceSummary {
  int64_t n = 0, correct = 0, correct_norm = 0, truncated = 0;
  double acc = 0, acc_norm = 0, acc_stderr = 0, acc_norm_stderr = 0;
};
ChoiceSummary SummarizeChoices(const std::vector<ChoiceItem>& items, const std::vector<ChoiceScore>& scores);

}  // namespace multiscreen::eval

// Zero-shot multiple choice: reading the benchmarks' JSONL, the prompts, the scoring
// (eval/choice.h says what and from where).
#include "eval/choice.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "data/byte_source.h"
#include "eval/python_case.h"
#include "nlohmann/json.hpp"

namespace multiscreen::eval {
namespace {

using json = nlohmann::json;

absl::Status FieldError(const std::string& where, std::string_view field, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": field \"", std::string(field), "\": expected ", std::string(expected)));
}

absl::StatusOr<std::string> StringField(const json& j, std::string_view field, const std::string& where) {
  auto it = j.find(std::string(field));
  if (it == j.end() || !it->is_string()) return FieldError(where, field, it == j.end() ? "a string (missing)" : "a string");
  return it->get<std::string>();
}

// A label given as a JSON integer or a string of digits (the Hugging Face copies write "3").
absl::StatusOr<int64_t> IndexField(const json& j, std::string_view field, const std::string& where, int64_t lo, int64_t hi) {
  auto it = j.find(std::string(field));
  const std::string expected = absl::StrCat("an integer in [", lo, ", ", hi, "] (or its digits as a string)");
  if (it == j.end()) return FieldError(where, field, absl::StrCat(expected, " (missing)"));
  int64_t v = std::numeric_limits<int64_t>::min();
  if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else if (it->is_string()) {
    const std::string s = it->get<std::string>();
    if (!s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos) v = std::stoll(s);
  }
  if (v < lo || v > hi) return FieldError(where, field, absl::StrCat(expected, ", got ", it->dump()));
  return v;
}

// Python's str.isspace() for one code point: ASCII \t…\r, \x1c…\x1f and space, and the
// Unicode whitespace U+0085, U+00A0, U+1680, U+2000…U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000.
bool IsPythonSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The UTF-8 sequence of s[i, i + n) as a whitespace code point, n its bytes; 0 if it is not one.
size_t SpaceAt(std::string_view s, size_t i) {
  const unsigned char b = s[i];
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : 0;  // whitespace needs at most 3 bytes
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : (b & 0x0F);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char t = s[i + k];
    if ((t & 0xC0) != 0x80) return 0;
    c = (c << 6) | (t & 0x3F);
  }
  return IsPythonSpace(c) ? n : 0;
}

// Bytes of s after Python's str.rstrip() (whitespace as str.isspace(), over UTF-8).
size_t RStripEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 3 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (SpaceAt(s, start) != end - start) break;
    end = start;
  }
  return end;
}

// Python's str.strip(): Unicode whitespace (U+00A0, U+3000, …) too, as lm-eval's Python.
std::string_view StripWhitespace(std::string_view s) {
  size_t first = 0;
  while (first < s.size()) {
    const size_t n = SpaceAt(s, first);
    if (n == 0) break;
    first += n;
  }
  return s.substr(first, RStripEnd(s.substr(first)));
}

// A candidate with the continuation " " + choice.
void AddCandidate(ChoiceItem* item, std::string context, std::string choice) {
  item->contexts.push_back(std::move(context));
  item->continuations.push_back(" " + choice);
  item->choices.push_back(std::move(choice));
}

absl::Status ParseHellaSwag(const json& j, const std::string& where, ChoiceItem* item) {
  std::string ctx;
  if (j.contains("ctx_a")) {
    auto a = StringField(j, "ctx_a", where);
    if (!a.ok()) return a.status();
    auto b = StringField(j, "ctx_b", where);
    if (!b.ok()) return b.status();
    ctx = *a + " " + PythonCapitalize(*b);
  } else {
    auto c = StringField(j, "ctx", where);
    if (!c.ok()) return FieldError(where, "ctx_a", "a string (missing; nor is there a string \"ctx\")");
    ctx = *c;
  }
  if (j.contains("activity_label")) {
    auto label = StringField(j, "activity_label", where);
    if (!label.ok()) return label.status();
    ctx = *label + ": " + ctx;
  }
  const std::string context = HellaSwagPreprocess(ctx);
  auto endings = j.find("endings");
  if (endings == j.end() || !endings->is_array() || endings->size() != 4) {
    return FieldError(where, "endings", "an array of 4 strings");
  }
  for (const json& e : *endings) {
    if (!e.is_string()) return FieldError(where, "endings", "an array of 4 strings");
    AddCandidate(item, context, HellaSwagPreprocess(e.get<std::string>()));
  }
  auto gold = IndexField(j, "label", where, 0, 3);
  if (!gold.ok()) return gold.status();
  item->gold = *gold;
  return absl::OkStatus();
}

absl::Status ParsePiqa(const json& j, const std::string& where, ChoiceItem* item) {
  auto goal = StringField(j, "goal", where);
  if (!goal.ok()) return goal.status();
  const std::string context = "Question: " + *goal + "\nAnswer:";
  for (const char* field : {"sol1", "sol2"}) {
    auto sol = StringField(j, field, where);
    if (!sol.ok()) return sol.status();
    AddCandidate(item, context, *sol);
  }
  auto gold = IndexField(j, "label", where, 0, 1);
  if (!gold.ok()) return gold.status();
  item->gold = *gold;
  return absl::OkStatus();
}

// "1"…"5" → "A"…"E" (ARC numbers some items' choices instead of lettering them).
std::string ArcKey(std::string key) {
  if (key.size() == 1 && key[0] >= '1' && key[0] <= '5') key[0] = static_cast<char>('A' + (key[0] - '1'));
  return key;
}

absl::Status ParseArc(const json& j, const std::string& where, ChoiceItem* item) {
  auto q = j.find("question");
  if (q == j.end()) return FieldError(where, "question", "an object with \"stem\" and \"choices\" (missing)");
  std::string stem;
  std::vector<std::string> texts, labels;
  if (q->is_object()) {  // AI2's files
    auto s = StringField(*q, "stem", where);
    if (!s.ok()) return FieldError(where, "question.stem", "a string");
    stem = *s;
    auto choices = q->find("choices");
    if (choices == q->end() || !choices->is_array() || choices->empty()) {
      return FieldError(where, "question.choices", "a non-empty array of {\"text\", \"label\"}");
    }
    for (const json& c : *choices) {
      if (!c.is_object() || !c.contains("text") || !c["text"].is_string() || !c.contains("label") || !c["label"].is_string()) {
        return FieldError(where, "question.choices", "a non-empty array of {\"text\", \"label\"} (strings)");
      }
      texts.push_back(c["text"].get<std::string>());
      labels.push_back(c["label"].get<std::string>());
    }
  } else if (q->is_string()) {  // the Hugging Face layout
    stem = q->get<std::string>();
    auto choices = j.find("choices");
    const char* expected = "an object {\"text\": [strings], \"label\": [strings]} of equal non-zero lengths";
    if (choices == j.end() || !choices->is_object()) return FieldError(where, "choices", expected);
    auto t = choices->find("text"), l = choices->find("label");
    if (t == choices->end() || l == choices->end() || !t->is_array() || !l->is_array() || t->size() != l->size() ||
        t->empty()) {
      return FieldError(where, "choices", expected);
    }
    for (size_t i = 0; i < t->size(); ++i) {
      if (!(*t)[i].is_string() || !(*l)[i].is_string()) return FieldError(where, "choices", expected);
      texts.push_back((*t)[i].get<std::string>());
      labels.push_back((*l)[i].get<std::string>());
    }
  } else {
    return FieldError(where, "question", "an object with \"stem\" and \"choices\", or a string");
  }
  auto key = StringField(j, "answerKey", where);
  if (!key.ok()) return key.status();
  const std::string context = "Question: " + stem + "\nAnswer:";
  for (size_t i = 0; i < texts.size(); ++i) {
    AddCandidate(item, context, texts[i]);
    // The first choice so labelled, as lm-eval's list.index.
    if (item->gold < 0 && ArcKey(labels[i]) == ArcKey(*key)) item->gold = static_cast<int64_t>(i);
  }
  if (item->gold < 0) return FieldError(where, "answerKey", absl::StrCat("one of the choices' labels, got \"", *key, "\""));
  return absl::OkStatus();
}

absl::Status ParseWinoGrande(const json& j, const std::string& where, ChoiceItem* item) {
  auto sentence = StringField(j, "sentence", where);
  if (!sentence.ok()) return sentence.status();
  const size_t blank = sentence->find('_');
  if (blank == std::string::npos) return FieldError(where, "sentence", "a string with a \"_\" (the blank)");
  const std::string rest(StripWhitespace(std::string_view(*sentence).substr(blank + 1)));
  for (const char* field : {"option1", "option2"}) {
    auto option = StringField(j, field, where);
    if (!option.ok()) return option.status();
    item->contexts.push_back(sentence->substr(0, blank) + *option);
    item->continuations.push_back(" " + rest);
    item->choices.push_back(rest);
  }
  auto gold = IndexField(j, "answer", where, 1, 2);
  if (!gold.ok()) return gold.status();
  item->gold = *gold - 1;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChoiceFormat> ParseChoiceFormat(std::string_view name) {
  if (name == "hellaswag") return ChoiceFormat::kHellaSwag;
  if (name == "piqa") return ChoiceFormat::kPiqa;
  if (name == "arc") return ChoiceFormat::kArc;
  if (name == "winogrande") return ChoiceFormat::kWinoGrande;
  return absl::InvalidArgumentError(absl::StrCat("--format=", std::string(name), ": expected hellaswag, piqa, arc or winogrande"));
}

const char* ChoiceFormatName(ChoiceFormat format) {
  switch (format) {
    case ChoiceFormat::kHellaSwag: return "hellaswag";
    case ChoiceFormat::kPiqa: return "piqa";
    case ChoiceFormat::kArc: return "arc";
    case ChoiceFormat::kWinoGrande: return "winogrande";
  }
  return "?";
}

std::string HellaSwagPreprocess(std::string_view text) {
  std::string s = absl::StrReplaceAll(std::string(StripWhitespace(text)), {{" [title]", ". "}});
  // re.sub(r"\[.*?\]", "", s): "." matches anything but a newline.
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return absl::StrReplaceAll(out, {{"  ", " "}});
}

absl::StatusOr<ChoiceItem> ParseChoiceLine(ChoiceFormat format, std::string_view line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at …" (or out_of_range.406,
    // "number overflow parsing '1e999'"): keep what follows the tag.
    std::string_view what = e.what();
    if (const size_t tag = what.find("] "); tag != std::string_view::npos) what.remove_prefix(tag + 2);
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON (", std::string(what), ")"));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  ChoiceItem item;
  absl::Status s;
  switch (format) {
    case ChoiceFormat::kHellaSwag: s = ParseHellaSwag(j, where, &item); break;
    case ChoiceFormat::kPiqa: s = ParsePiqa(j, where, &item); break;
    case ChoiceFormat::kArc: s = ParseArc(j, where, &item); break;
    case ChoiceFormat::kWinoGrande: s = ParseWinoGrande(j, where, &item); break;
  }
  if (!s.ok()) return s;
  // With one candidate every answer is right (an ARC item with one choice scored 100 %).
  if (item.choices.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", item.choices.size(),
                                                   " choice: an item needs 2 or more (with one, acc counts it correct "
                                                   "whatever the model says)"));
  }
  return item;
}

absl::StatusOr<std::vector<ChoiceItem>> ReadChoiceFile(const std::string& path, ChoiceFormat format) {
  auto lines = LineReader::Open(path);
  if (!lines.ok()) return absl::Status(lines.status().code(), absl::StrCat("--task=", lines.status().message()));
  std::vector<ChoiceItem> items;
  std::string line;
  while (true) {
    auto more = lines->Next(&line);
    if (!more.ok()) return absl::Status(more.status().code(), absl::StrCat("--task=", more.status().message()));
    if (!*more) break;
    const int64_t n = lines->line_number();
    if (StripWhitespace(line).empty()) continue;
    auto item = ParseChoiceLine(format, line, absl::StrCat(path, ":", n));
    if (!item.ok()) return item.status();
    item->line = n;
    items.push_back(std::move(*item));
  }
  if (items.empty()) return absl::InvalidArgumentError(absl::StrCat("--task=", path, ": no items"));
  return items;
}

int64_t Utf8Chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

int64_t ArgMax(const std::vector<double>& v) {
  int64_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return static_cast<int64_t>(i);  // numpy: the first NaN is the maximum
    if (v[i] > v[best]) best = static_cast<int64_t>(i);
  }
  return v.empty() ? -1 : best;
}

absl::StatusOr<ChoiceScore> ScoreChoiceItem(const ChoiceItem& item, const std::string& where, const Gpt2Tokenizer& tok,
                                            int32_t eos, int64_t max_len, const TokenLossFn& losses) {
  ChoiceScore score;
  const size_t K = item.contexts.size();
  std::vector<int32_t> seq;
  std::vector<float> loss;
  std::vector<double> normed(K);
  for (size_t k = 0; k < K; ++k) {
    // lm-eval's pair rule: trailing whitespace of the context belongs to the continuation.
    std::string context = item.contexts[k], continuation = item.continuations[k];
    const size_t cut = RStripEnd(context);  // lm-eval: len(context) - len(context.rstrip())
    continuation = context.substr(cut) + continuation;
    context.resize(cut);
    std::vector<int32_t> ctx_ids, whole;
    if (context.empty()) {
      ctx_ids = {eos};
      whole = ctx_ids;
      if (auto s = tok.Encode(continuation, &whole); !s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": choice ", k, ": ", s.message()));
    } else {
      if (auto s = tok.Encode(context, &ctx_ids); !s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": choice ", k, ": ", s.message()));
      if (auto s = tok.Encode(context + continuation, &whole); !s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": choice ", k, ": ", s.message()));
    }
    const int64_t n_ctx = static_cast<int64_t>(ctx_ids.size());
    const int64_t n_cont = static_cast<int64_t>(whole.size()) - n_ctx;
    if (n_cont < 1) return absl::InvalidArgumentError(absl::StrCat(where, ": choice ", k, ": the continuation has no token"));
    if (n_cont > max_len) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": choice ", k, ": the continuation has ", n_cont,
                                                     " tokens, more than the ", max_len, " positions of --seq_len"));
    }
    // Left truncation to max_len + 1 tokens (max_len input positions).
    const int64_t size = static_cast<int64_t>(whole.size());
    const int64_t drop = size - 1 > max_len ? size - 1 - max_len : 0;  // not max_len + 1: it may be INT64_MAX
    score.truncated |= drop > 0;
    seq.assign(whole.begin() + drop, whole.end());
    const int64_t n = static_cast<int64_t>(seq.size());
    loss.assign(n - 1, 0.0f);
    losses(seq.data(), n, loss.data());
    // Targets n − n_cont … n − 1 are the continuation; loss[i] predicts seq[i + 1].
    double ll = 0;
    for (int64_t i = n - n_cont - 1; i < n - 1; ++i) ll -= loss[i];
    score.loglik.push_back(ll);
    score.tokens.push_back(n_cont);
    score.chars.push_back(Utf8Chars(item.choices[k]));
    // lm-eval's ll / len(choice) in numpy: an empty choice gives −inf (NaN for ll = 0).
    normed[k] = ll / static_cast<double>(score.chars.back());
  }
  score.pred = ArgMax(score.loglik);
  score.pred_norm = ArgMax(normed);
  return score;
}

ChoiceSummary SummarizeChoices(const std::vector<ChoiceItem>& items, const std::vector<ChoiceScore>& scores) {
  ChoiceSummary s;
  s.n = static_cast<int64_t>(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    s.correct += scores[i].pred == items[i].gold;
    s.correct_norm += scores[i].pred_norm == items[i].gold;
    s.truncated += scores[i].truncated;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto stderr_of = [&](double p) { return s.n < 2 ? nan : std::sqrt(p * (1 - p) / double(s.n - 1)); };
  s.acc = s.n ? double(s.correct) / s.n : nan;
  s.acc_norm = s.n ? double(s.correct_norm) / s.n : nan;
  s.acc_stderr = stderr_of(s.acc);
  s.acc_norm_stderr = stderr_of(s.acc_norm);
  return s;
}

}  // namespace multiscreen::eval

// Passkey retrieval (spec "Evaluations"; the task of Mohtashami & Jaggi, "Landmark
// Attention", 2023): a 5-digit key sentence hidden at a relative depth in repeated filler
// sentences, the question at the end; the model answers greedily, exact match scores.
//
//   <intro> <filler × a> <key sentence> <filler × b> <question>     answer: " 12345"
//
// a + b filler units are as many as keep the prompt within n_tokens GPT-2 tokens (counted
// unit by unit); a = int((a + b) · depth). Keys come from PythonRandom(seed).randrange(10000,
// 100000), one per instance in turn, so instance i is the same for every n_trials > i.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen::eval {

struct PasskeyInstance {
  std::string prompt;  // ends with "The pass key is"
  std::string answer;  // the 5 digits (the model's continuation should be " " + answer)
};

// Error (naming --length) when n_tokens cannot hold the intro, the key, the question and
// one filler unit.
absl::StatusOr<std::vector<PasskeyInstance>> PasskeyInstances(
    int64_t n_tokens, double depth, int64_t n_trials, uint64_t seed,
    const std::function<int64_t(const std::string&)>& token_count);

// Whether a greedy continuation answers `answer`: after leading spaces, the answer's
// digits, not followed by another digit.
bool PasskeyCorrect(const std::string& continuation, const std::string& answer);

}  // namespace multiscreen::eval

// What a command reading a model learns of the run that trained it, from the run directory
// rather than the current directory: the tokenizer and the training length. `train` records
// them in <run_dir>/data.json (RecordRunData in cli/train_command.cc); runs from before that
// file have run.json's seq_len.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/gpt2_tokenizer.h"

namespace multiscreen::cli {

// The run directory of --checkpoint (a run directory or one of its checkpoints/step_N): the
// first of dir, dir/.., dir/../.. holding data.json or run.json; "" when none does or
// `checkpoint` is empty (--weights).
std::string RunDirOf(const std::string& checkpoint);

// The tokenizer: --tokenizer when given (`given`: GivenFlags); else the run's recorded one;
// else --tokenizer's default (data_cache/gpt2) in the current directory; else the source
// tree's data_cache/gpt2 (beside ConfigDir()). Errors name each place tried.
absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadRunTokenizer(const std::vector<std::string>& given,
                                                                const std::string& run_dir);

// The longest training sequence length: --train_len when given; else data.json's
// max_seq_len, else run.json's seq_len; else --train_len's default. `source` says which.
int64_t RunTrainLen(const std::vector<std::string>& given, const std::string& run_dir, std::string* source);

}  // namespace multiscreen::cli

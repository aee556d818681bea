// Token ids against a model's vocabulary (token_ids.h).
#include "trainer/token_ids.h"

#include "absl/strings/str_cat.h"

namespace multiscreen {

absl::Status CheckTokenIds(const Batch& batch, int64_t vocab, const std::string& model, const char* split,
                           const std::function<std::string(int64_t, int64_t)>& locate) {
  const int64_t width = batch.seq_len + 1;
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    const int32_t id = batch.tokens[i];
    if (id >= 0 && id < vocab) continue;
    // A version-2 shard's uint32 id past 2^31 - 1 reads as a negative int32: say the file's value.
    const uint32_t held = static_cast<uint32_t>(id);
    return absl::InvalidArgumentError(absl::StrCat(
        locate(int64_t(i) / width, int64_t(i) % width), ": ", split, " window ",
        batch.first_sample + int64_t(i) / width, " holds token id ", held, ", outside the vocabulary V = ", vocab,
        " of model ", model, " (shards made with another tokenizer?)"));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen

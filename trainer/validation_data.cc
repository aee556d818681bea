// The held-out windows of a run's validation passes (validation_data.h).
#include "trainer/validation_data.h"

#include "absl/strings/str_cat.h"
#include "trainer/token_ids.h"

namespace multiscreen {

ValidationOptions RunValidationOptions(const config::RunConfig& run, int dp, int dp_rank) {
  ValidationOptions vo;
  vo.seq_len = run.seq_len();
  vo.micro_batch = run.micro_batch();
  vo.dp_rank = dp_rank;
  vo.dp_size = dp;
  vo.exact = run.eval().windows() > 0;
  const int64_t batches = (run.eval().batches() + dp - 1) / dp * dp;
  vo.windows = vo.exact ? run.eval().windows() : batches * run.micro_batch();
  return vo;
}

absl::StatusOr<std::vector<ValidationSource>> OpenValidation(const config::RunConfig& run,
                                                             const std::vector<LoaderSource>& val_sources,
                                                             std::shared_ptr<const TokenStream> val, int dp,
                                                             int dp_rank) {
  std::vector<LoaderSource> sources = val_sources;
  const bool named = !sources.empty();
  if (!named && val != nullptr) sources.push_back({"", 1, std::move(val)});
  const ValidationOptions options = RunValidationOptions(run, dp, dp_rank);
  std::vector<ValidationSource> out;
  for (const LoaderSource& v : sources) {
    auto loader = ValidationLoader::Create(v.stream, options);
    if (!loader.ok()) {
      if (!named) return loader.status();
      return absl::Status(loader.status().code(),
                          absl::StrCat("validation source ", v.name, ": ", loader.status().message()));
    }
    out.push_back({v.name, v.weight > 0 ? v.weight : 1.0, std::move(*loader)});
  }
  return out;
}

absl::Status CheckValidationTokenIds(const std::vector<ValidationSource>& sources, int64_t vocab,
                                     const std::string& model) {
  for (const ValidationSource& v : sources) {
    const ValidationLoader& loader = *v.loader;
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const Batch batch = loader.Get(b);
      auto s = CheckTokenIds(batch, vocab, model, "validation", [&](int64_t row, int64_t col) {
        return loader.stream().Locate((batch.first_sample + row) * batch.seq_len + col);
      });
      if (!s.ok()) {
        if (v.name.empty()) return s;
        return absl::Status(s.code(), absl::StrCat("validation source ", v.name, ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace multiscreen

#include "trainer/run_data.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "data/loader.h"

namespace multiscreen {
namespace {

TokenFormat FormatOf(config::TokenFormat f) {
  switch (f) {
    case config::LLMC: return TokenFormat::kLlmc;
    case config::MEGATRON: return TokenFormat::kMegatron;
    case config::RAW_UINT16: return TokenFormat::kRawUint16;
    default: return TokenFormat::kAuto;
  }
}

// The files of `paths` as one stream of at least `min_tokens` tokens (a window: seq_len + 1).
absl::StatusOr<std::shared_ptr<const TokenStream>> OpenSplit(const std::vector<std::string>& paths,
                                                             const std::string& split, TokenFormat format,
                                                             int64_t min_tokens) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    auto found = ListShards(p, split, format);
    if (!found.ok()) return found.status();
    files.insert(files.end(), found->begin(), found->end());
  }
  auto stream = TokenStream::Open(files, min_tokens, format);
  if (!stream.ok()) return stream.status();
  return std::shared_ptr<const TokenStream>(std::move(*stream));
}

bool IsMetricsKey(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

// Opens `list` (data.sources or data.val_sources, named `field`) as loader sources.
absl::StatusOr<std::vector<LoaderSource>> OpenSources(
    const google::protobuf::RepeatedPtrField<config::DataSource>& list, const std::string& field,
    const std::string& split, const RunSource& where, int64_t min_tokens) {
  std::vector<LoaderSource> out;
  std::set<std::string> names;
  double sum = 0;
  for (int k = 0; k < list.size(); ++k) {
    const config::DataSource& s = list[k];
    const std::string at = where.Name(absl::StrCat(field, "[", k, "]"));
    const std::string name = s.name().empty() ? absl::StrCat("source", k) : s.name();
    if (!IsMetricsKey(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".name: \"", name, "\" (expected letters, digits, '_', '-' or '.': a metrics key)"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".name: \"", name, "\" names two sources"));
    }
    if (!std::isfinite(s.weight()) || s.weight() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, " (", name, "): weight ", s.weight(), " (expected a finite number >= 0)"));
    }
    if (s.paths().empty()) return absl::InvalidArgumentError(absl::StrCat(at, " (", name, "): no paths"));
    sum += s.weight();
    auto stream = OpenSplit({s.paths().begin(), s.paths().end()}, split, FormatOf(s.format()), min_tokens);
    if (!stream.ok()) {
      return absl::Status(stream.status().code(), absl::StrCat("data source ", name, ": ", stream.status().message()));
    }
    out.push_back({name, s.weight(), *stream});
  }
  if (split == "train" && !(sum > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where.Name(field), ": the weights of the ", list.size(), " sources sum to 0 (expected > 0)"));
  }
  return out;
}

}  // namespace

absl::StatusOr<Trainer::Sources> OpenRunData(const config::RunConfig& run, const RunSource& source, bool logger) {
  const config::DataConfig& data = run.data();
  Trainer::Sources sources;
  if (!data.sources().empty() && !data.train_shards().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source.Name("data.sources"),
                                                   ": set together with data.train_shards (give one or the other)"));
  }
  if (!data.val_sources().empty() && !data.val_shard().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source.Name("data.val_sources"),
                                                   ": set together with data.val_shard (give one or the other)"));
  }
  if (!data.sources().empty() && data.format() != config::FORMAT_AUTO) {
    return absl::InvalidArgumentError(absl::StrCat(source.Name("data.format"),
                                                   ": applies to data.train_shards (--data); a mixture's sources "
                                                   "each give their own format"));
  }
  const TokenFormat format = FormatOf(data.format());
  const int64_t window = run.seq_len() + 1;  // a training source must hold one window
  if (!data.sources().empty()) {
    auto mixture = OpenSources(data.sources(), "data.sources", "train", source, window);
    if (!mixture.ok()) return mixture.status();
    sources.mixture = std::move(*mixture);
  } else {
    auto train = OpenSplit({data.train_shards().begin(), data.train_shards().end()}, "train", format, window);
    if (!train.ok()) return train.status();
    sources.train = *train;
  }
  if (!data.val_sources().empty()) {
    auto val = OpenSources(data.val_sources(), "data.val_sources", "val", source, 1);
    if (!val.ok()) return val.status();
    sources.val_sources = std::move(*val);
  } else if (!data.val_shard().empty()) {
    auto val = OpenSplit({data.val_shard()}, "val", format, 1);
    if (val.ok()) {
      sources.val = *val;
    } else if (std::filesystem::is_directory(data.val_shard()) && absl::IsNotFound(val.status())) {
      // prepare --val_tokens=0 leaves no held-out shard: train without validation.
      if (logger) LogWarning("no validation shard in ", data.val_shard(), ": validation is off");
    } else {
      return val.status();
    }
  }
  return sources;
}

}  // namespace multiscreen

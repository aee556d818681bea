#include "cli/run_data.h"

#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/flags.h"
#include "common/config.h"
#include "nlohmann/json.hpp"

ABSL_DECLARE_FLAG(int64_t, train_len);

namespace multiscreen::cli {
namespace {
namespace fs = std::filesystem;

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json();
  return nlohmann::json::parse(in, nullptr, false);
}
}  // namespace

std::string RunDirOf(const std::string& checkpoint) {
  if (checkpoint.empty()) return "";
  std::error_code ec;
  fs::path p = fs::absolute(checkpoint, ec).lexically_normal();
  if (p.has_filename() == false) p = p.parent_path();
  for (int up = 0; up < 3 && !p.empty(); ++up, p = p.parent_path()) {
    if (fs::is_regular_file(p / "data.json", ec) || fs::is_regular_file(p / "run.json", ec)) return p.string();
    if (p == p.root_path()) break;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadRunTokenizer(const std::vector<std::string>& given,
                                                                const std::string& run_dir) {
  if (Given(given, "tokenizer")) return Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer));
  if (!run_dir.empty()) {
    const nlohmann::json data = ReadJson(fs::path(run_dir) / "data.json");
    if (data.is_object() && data.contains("tokenizer_dir") && data["tokenizer_dir"].is_string()) {
      auto tok = Gpt2Tokenizer::Load(data["tokenizer_dir"].get<std::string>());
      if (!tok.ok()) {
        return absl::Status(tok.status().code(), absl::StrCat("the tokenizer recorded in ", run_dir, "/data.json: ",
                                                              tok.status().message(), " (give --tokenizer=DIR)"));
      }
      return tok;
    }
  }
  std::vector<std::string> tried;
  for (const std::string& dir : {absl::GetFlag(FLAGS_tokenizer), (fs::path(ConfigDir()).parent_path() / "data_cache/gpt2").string()}) {
    tried.push_back(dir);
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return Gpt2Tokenizer::Load(dir);
  }
  return absl::NotFoundError(absl::StrCat("no tokenizer: none recorded for the run", run_dir.empty() ? "" : " in " + run_dir + "/data.json",
                                          " and none at ", absl::StrJoin(tried, " or "), "; give --tokenizer=DIR"));
}

int64_t RunTrainLen(const std::vector<std::string>& given, const std::string& run_dir, std::string* source) {
  if (Given(given, "train_len")) {
    *source = "--train_len";
    return absl::GetFlag(FLAGS_train_len);
  }
  if (!run_dir.empty()) {
    const nlohmann::json data = ReadJson(fs::path(run_dir) / "data.json");
    if (data.is_object() && data.contains("max_seq_len") && data["max_seq_len"].is_number_integer() &&
        data["max_seq_len"].get<int64_t>() >= 1) {
      *source = run_dir + "/data.json";
      return data["max_seq_len"].get<int64_t>();
    }
    const nlohmann::json run = ReadJson(fs::path(run_dir) / "run.json");
    if (run.is_object() && run.contains("seq_len") && run["seq_len"].is_number_integer() && run["seq_len"].get<int64_t>() >= 1) {
      *source = run_dir + "/run.json";
      return run["seq_len"].get<int64_t>();
    }
  }
  *source = "the default (nothing recorded beside the weights; give --train_len)";
  return absl::GetFlag(FLAGS_train_len);
}

}  // namespace multiscreen::cli

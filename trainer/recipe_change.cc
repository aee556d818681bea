#include "trainer/recipe_change.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace multiscreen {

nlohmann::json RecipeOf(const config::RunConfig& run) {
  const config::OptimizerConfig& o = run.optimizer();
  const config::ScheduleConfig& s = run.schedule();
  const config::RunConfig::Precision precision =
      run.precision() == config::RunConfig::PRECISION_UNSPECIFIED ? config::RunConfig::FP32 : run.precision();
  const config::ScheduleConfig::Kind kind =
      s.kind() == config::ScheduleConfig::KIND_UNSPECIFIED ? config::ScheduleConfig::WARMUP_CONSTANT : s.kind();
  return {{"optimizer.lr", o.lr()},
          {"precision", absl::AsciiStrToLower(config::RunConfig::Precision_Name(precision))},
          {"optimizer.beta1", o.beta1()},
          {"optimizer.beta2", o.beta2()},
          {"optimizer.eps", o.eps()},
          {"optimizer.weight_decay", o.weight_decay()},
          {"optimizer.decay_scalars", o.decay_scalars()},
          {"optimizer.grad_clip", o.grad_clip()},
          {"schedule.kind", config::ScheduleConfig::Kind_Name(kind)},
          {"schedule.warmup_steps", s.warmup_steps()},
          {"schedule.min_lr_ratio", s.min_lr_ratio()},
          {"schedule.decay_fraction", s.decay_fraction()}};
}

std::vector<std::string> RecipeChanges(const nlohmann::json& started, const nlohmann::json& now,
                                       const std::string& run_json) {
  std::vector<std::string> out;
  if (!started.is_object()) return out;
  // The values as a user writes them: strings unquoted.
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (const auto& [key, value] : now.items()) {
    if (!started.contains(key) || started[key] == value) continue;
    const std::string name = key == "optimizer.lr" ? "--lr" : key == "precision" ? "--precision" : key;
    out.push_back(absl::StrCat(name, " is now ", text(value), "; the run started with ", text(started[key]), " (",
                               run_json, "): its trajectory changes here"));
  }
  return out;
}

}  // namespace multiscreen

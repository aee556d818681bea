// The diverged verdict from metrics.jsonl (divergence.h).
#include "launch/divergence.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

// A loss field: nullopt when absent, NaN when null or not a number.
std::optional<double> LossField(const nlohmann::json& row, const char* key) {
  if (!row.contains(key)) return std::nullopt;
  const nlohmann::json& v = row[key];
  return v.is_number() ? v.get<double>() : std::nan("");
}

struct Row {
  int64_t step = 0;
  bool validation = false;
  double loss = 0;
};

}  // namespace

DivergenceVerdict JudgeDivergence(std::istream& metrics, int64_t warmup_steps) {
  // The standing rows, in order (a resume drops the rows past its step).
  std::vector<Row> rows;
  std::string line;
  while (std::getline(metrics, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("resumed_from") && j["resumed_from"].is_number_integer()) {
      const int64_t from = j["resumed_from"].get<int64_t>();
      while (!rows.empty() && rows.back().step > from) rows.pop_back();
      continue;
    }
    if (!j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (const auto loss = LossField(j, "loss")) rows.push_back({step, false, *loss});
    if (const auto val = LossField(j, "val_loss")) rows.push_back({step, true, *val});
  }
  DivergenceVerdict v;
  bool have_initial = false;
  for (const Row& r : rows) {
    if (!r.validation) {
      v.last_step = r.step;
      if (!have_initial) {
        have_initial = true;
        v.initial_loss = r.loss;
      }
    }
    if (v.diverged) continue;
    const char* what = r.validation ? "validation loss" : "loss";
    if (!std::isfinite(r.loss)) {
      v.diverged = true;
      v.step = r.step;
      v.reason = absl::StrFormat("non-finite %s at step %d", what, r.step);
    } else if (!r.validation && r.step > warmup_steps && have_initial && std::isfinite(v.initial_loss) &&
               r.loss > v.initial_loss) {
      v.diverged = true;
      v.step = r.step;
      v.reason = absl::StrFormat("loss %.4f at step %d exceeds the initial %.4f after the %d-step warmup", r.loss, r.step,
                                 v.initial_loss, warmup_steps);
    }
  }
  return v;
}

DivergenceVerdict ReadDivergence(const std::string& path, int64_t warmup_steps) {
  std::ifstream in(path);
  if (!in) return {};
  return JudgeDivergence(in, warmup_steps);
}

}  // namespace multiscreen

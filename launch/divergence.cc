// The diverged verdict from metrics.jsonl (divergence.h).
#include "launch/divergence.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
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
  std::deque<const Row*> window;  // the last kDivergenceWindow training rows
  double window_sum = 0;
  // The lowest full-window mean so far, and the steps it spans.
  double best = std::numeric_limits<double>::infinity();
  int64_t best_first = 0, best_last = 0;
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
      continue;
    }
    if (r.validation) continue;
    window.push_back(&r);
    window_sum += r.loss;
    if (window.size() > size_t(kDivergenceWindow)) {
      window_sum -= window.front()->loss;
      window.pop_front();
    }
    if (window.size() < size_t(kDivergenceWindow)) continue;
    const double mean = window_sum / kDivergenceWindow;
    const bool initial_is_lower = v.initial_loss < best;
    const double reference = initial_is_lower ? v.initial_loss : best;
    const double margin = std::max(kDivergenceMargin * std::abs(v.initial_loss),
                                   std::isfinite(best) ? kDivergenceProgressShare * (v.initial_loss - best) : 0.0);
    if (r.step > warmup_steps && std::isfinite(v.initial_loss) && mean > reference + margin) {
      v.diverged = true;
      v.step = r.step;
      const std::string where = initial_is_lower
                                    ? absl::StrFormat("the first step's loss %.4f", v.initial_loss)
                                    : absl::StrFormat("the lowest earlier mean %.4f (steps %d-%d)", best, best_first,
                                                      best_last);
      v.reason = absl::StrFormat(
          "mean loss %.4f over steps %d-%d is %.4f above %s, more than the margin %.4f (after the %d-step warmup)",
          mean, window.front()->step, r.step, mean - reference, where, margin, warmup_steps);
      continue;
    }
    if (mean < best) {
      best = mean;
      best_first = window.front()->step;
      best_last = r.step;
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

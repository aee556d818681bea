#include "eval/position_loss.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace multiscreen::eval {

void PositionLoss::Add(const float* losses) {
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += losses[i];
  ++documents_;
}

std::vector<double> PositionLoss::Mean() const {
  std::vector<double> mean(sum_.size());
  for (size_t i = 0; i < sum_.size(); ++i) mean[i] = documents_ ? sum_[i] / documents_ : 0.0;
  return mean;
}

std::vector<double> PositionLoss::Smoothed() const {
  const std::vector<double> mean = Mean();
  const auto n = static_cast<int64_t>(mean.size());
  std::vector<double> prefix(n + 1, 0.0);  // prefix[p] = Σ mean over positions 1..p
  for (int64_t p = 1; p <= n; ++p) prefix[p] = prefix[p - 1] + mean[p - 1];
  std::vector<double> out(n);
  for (int64_t p = 1; p <= n; ++p) {
    const int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(0.9 * p - 1e-9)));
    const int64_t hi = std::min<int64_t>(n, static_cast<int64_t>(std::floor(1.1 * p + 1e-9)));
    out[p - 1] = (prefix[hi] - prefix[lo - 1]) / static_cast<double>(hi - lo + 1);
  }
  return out;
}

FlatVerdict PastTrainingLength(const std::vector<double>& smoothed, int64_t train_len, double tolerance) {
  FlatVerdict v;
  const auto n = static_cast<int64_t>(smoothed.size());
  if (train_len < 2 || n <= train_len) {
    v.line = absl::StrFormat("no verdict: --seq_len=%d does not reach past the training length %d", n, train_len);
    return v;
  }
  v.applicable = true;
  auto mean = [&](int64_t lo, int64_t hi) {  // 1-based positions (lo, hi]
    double s = 0;
    for (int64_t p = lo + 1; p <= hi; ++p) s += smoothed[p - 1];
    return s / static_cast<double>(hi - lo);
  };
  v.before = mean(train_len / 2, train_len);
  v.after = mean(train_len, n);
  v.flat = v.after <= v.before + tolerance;
  v.line = absl::StrFormat(
      "%s: mean loss %.3f nats at positions %d-%d (past the training length %d) vs %.3f at %d-%d (%+.3f; flat = within "
      "%+.2f)",
      v.flat ? "flat" : "not flat", v.after, train_len + 1, n, train_len, v.before, train_len / 2 + 1, train_len,
      v.after - v.before, tolerance);
  return v;
}

}  // namespace multiscreen::eval

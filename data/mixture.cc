#include "data/mixture.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace multiscreen {

absl::StatusOr<MixtureSchedule> MixtureSchedule::Create(const std::vector<double>& weights,
                                                        const std::vector<std::string>& names) {
  if (weights.empty()) return absl::InvalidArgumentError("a mixture needs at least one source");
  auto label = [&](size_t k) {
    return k < names.size() && !names[k].empty() ? absl::StrCat("source ", k, " (", names[k], ")")
                                                 : absl::StrCat("source ", k);
  };
  double sum = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    if (!std::isfinite(weights[k])) {
      return absl::InvalidArgumentError(absl::StrCat(label(k), ": weight ", weights[k], " is not finite"));
    }
    if (weights[k] < 0) return absl::InvalidArgumentError(absl::StrCat(label(k), ": weight ", weights[k], " is negative"));
    sum += weights[k];
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", weights.size(), " source weights sum to ", sum,
                                                   " (expected a positive, finite sum)"));
  }
  const size_t K = weights.size();
  std::vector<double> p(K);
  for (size_t k = 0; k < K; ++k) p[k] = weights[k] / sum;
  // The smallest block in which every share is a whole number of samples.
  int64_t B = kMaxBlock;
  for (int64_t b = 1; b <= kMaxBlock; ++b) {
    bool exact = true;
    for (size_t k = 0; k < K && exact; ++k) exact = std::abs(p[k] * double(b) - std::round(p[k] * double(b))) <= 1e-9;
    if (exact) {
      B = b;
      break;
    }
  }
  // Largest remainder: floors, then the leftover samples to the largest fractions.
  MixtureSchedule m;
  m.quota_.resize(K);
  std::vector<double> frac(K);
  int64_t given = 0;
  for (size_t k = 0; k < K; ++k) {
    const double exact = p[k] * double(B);
    // Within 1e-9 of an integer counts as that integer (0.3 * 10 is 2.9999999999999996).
    const double rounded = std::round(exact);
    const double v = std::abs(exact - rounded) <= 1e-9 ? rounded : exact;
    m.quota_[k] = static_cast<int64_t>(std::floor(v));
    frac[k] = v - std::floor(v);
    given += m.quota_[k];
  }
  std::vector<size_t> order(K);
  for (size_t k = 0; k < K; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t i = 0; given < B; ++i, ++given) ++m.quota_[order[i % K]];
  // Megatron's greedy interleave of the block.
  m.source_.resize(static_cast<size_t>(B));
  m.rank_.resize(static_cast<size_t>(B));
  m.prefix_.assign(K, std::vector<int64_t>(static_cast<size_t>(B) + 1, 0));
  std::vector<int64_t> taken(K, 0);
  for (int64_t j = 0; j < B; ++j) {
    int best = -1;
    double best_error = 0;
    for (size_t k = 0; k < K; ++k) {
      if (m.quota_[k] == 0 || taken[k] == m.quota_[k]) continue;
      // In integers: q_k * (j + 1) - B * taken_k, scaled by B from Megatron's error.
      const double error = double(m.quota_[k]) * double(j + 1) - double(B) * double(taken[k]);
      if (best < 0 || error > best_error) {
        best = static_cast<int>(k);
        best_error = error;
      }
    }
    m.source_[j] = best;
    m.rank_[j] = taken[best]++;
    for (size_t k = 0; k < K; ++k) m.prefix_[k][j + 1] = taken[k];
  }
  return m;
}

MixtureSchedule::Pick MixtureSchedule::Source(int64_t sample) const {
  const int64_t B = block();
  const int64_t b = sample / B, j = sample % B;
  const int k = source_[j];
  return {k, b * quota_[k] + rank_[j]};
}

int64_t MixtureSchedule::CountBefore(int k, int64_t n) const {
  const int64_t B = block();
  return (n / B) * quota_[k] + prefix_[k][n % B];
}

}  // namespace multiscreen

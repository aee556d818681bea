// Position-dependent loss (spec "Evaluations"): per-position next-token loss averaged over
// documents, then over a ±10 % window of positions. Position p = 1..N is the p-th predicted
// token of a window (the loss of token p given tokens 0..p−1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multiscreen::eval {

class PositionLoss {
 public:
  explicit PositionLoss(int64_t seq_len) : sum_(seq_len, 0.0) {}
  // Adds one document's losses [seq_len] (nats).
  void Add(const float* losses);
  // Restores a partial sum (--resume): sums [seq_len] over `documents` documents.
  void Restore(std::vector<double> sums, int64_t documents) { sum_ = std::move(sums), documents_ = documents; }

  int64_t seq_len() const { return static_cast<int64_t>(sum_.size()); }
  int64_t documents() const { return documents_; }
  const std::vector<double>& sums() const { return sum_; }
  // Mean loss per position [seq_len].
  std::vector<double> Mean() const;
  // Mean over positions q with 0.9·p ≤ q ≤ 1.1·p (1-based, inside [1, seq_len]) of Mean().
  std::vector<double> Smoothed() const;

 private:
  std::vector<double> sum_;
  int64_t documents_ = 0;
};

// Whether the loss stays flat past the training length: the mean smoothed loss over
// positions (T, N] against (T/2, T]. Flat when it rises by at most `tolerance` nats.
struct FlatVerdict {
  bool applicable = false;  // N > T and T ≥ 2
  bool flat = false;
  double before = 0, after = 0;  // mean losses of (T/2, T] and (T, N]
  std::string line;             // one line for the console
};
FlatVerdict PastTrainingLength(const std::vector<double>& smoothed, int64_t train_len, double tolerance = 0.05);

}  // namespace multiscreen::eval

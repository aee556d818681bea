// The model as the evaluations use it, through its public API only, for either family
// (Multiscreen, or the Transformer baseline of issue 18): per-token losses of a window
// (the model stage's inference forward — BeginStep, Embed, LayersForward with
// Multiscreen's inference window rule, HeadLoss — or the decoding cache, token by token),
// greedy continuation with the family's decoder (model/decoder.h: the same tokens as
// `multiscreen generate`), and the prefill of time to first token. CPU, fp32. Memory
// estimates for refusing contexts that do not fit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoint/weights_file.h"
#include "model/model_stage.h"
#include "model/tile_weights.h"

namespace multiscreen::eval {

class ModelRunner {
 public:
  // `weights` must outlive the runner.
  ModelRunner(const Weights& weights, const InferenceOptions& options);

  const ModelDims& dims() const { return weights_.dims; }
  const InferenceOptions& options() const { return options_; }

  // losses[i] = −log p(ids[i+1] | ids[0..i]) for i < n − 1, in nats, from one forward pass
  // over the n − 1 inputs (with the window rule; equal to `forward`'s token_losses under
  // as-learned windows).
  void TokenLossesFull(const int32_t* ids, int64_t n, float* losses);
  // The same from the decoding cache, one token at a time (memory: the caches, not T × rows).
  void TokenLossesDecode(const int32_t* ids, int64_t n, float* losses);

  // Greedy continuation of `prompt` by `max_new` tokens with the decoding cache: the tokens
  // `multiscreen generate` prints for the same prompt.
  std::vector<int32_t> Greedy(const std::vector<int32_t>& prompt, int64_t max_new);

  // Time-to-first-token work: the inference forward over ids [n] (batch 1) and the logits
  // of the last position; returns the argmax token.
  int32_t Prefill(const int32_t* ids, int64_t n);

  // Estimated peak bytes of TokenLossesFull / Prefill over n tokens (activations of every
  // layer, the head's chunk, Ē), and of TokenLossesDecode / Greedy over n tokens (the caches:
  // Multiscreen ⌈w⌉ keys per finite-window tile, n per infinite one; the Transformer n
  // keys and values per layer). Both saturate at INT64_MAX bytes rather than overflow.
  int64_t FullPassBytes(int64_t n) const;
  int64_t DecodeBytes(int64_t n) const;

 private:
  const Weights& weights_;
  InferenceOptions options_;
  std::unique_ptr<ModelStage<float>> model_;
  std::vector<float> x_, losses_;
  std::vector<int32_t> targets_;
};

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t AvailableMemoryBytes();

}  // namespace multiscreen::eval

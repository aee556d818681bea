// The Transformer baseline's attention mechanism (issue 30; the paper's controlled
// comparison, Tables 7–8): the one switch that picks how a query's scores become its
// weights. The definitions and their sources are in kernels/cpu/attention.h; each backend
// has one switch over this enum in its score → weight map and in its backward
// (kernels/cpu/attention.cc, kernels/cuda/attention.cu). Header-only: ModelDims
// (common/config.h) holds one, the kernels read it from AttentionShape.
#pragma once

#include <string_view>

namespace multiscreen {

// Values match config.proto's ModelConfig.Attention (SOFTMAX = 1, ...).
enum class AttentionKind {
  kSoftmax = 1,    // softmax (today's baseline)
  kSoftmax1 = 2,   // softmax + 1 in the denominator (Miller 2023)
  kSsmax = 3,      // Scalable-Softmax (Nakanishi 2025): scores times s_h·log n_i
  kSigmoid = 4,    // sigmoid attention with bias −log n (Ramapuram et al. 2024; SigmoidBias below)
  kEntmax15 = 5,   // 1.5-entmax (Peters et al. 2019)
  // The screening unit (spec steps 5–11, the paper's Table 7 last row) in place of the
  // head's attention: not a score → weight map, so the attention kernels never see it;
  // model/transformer.h runs the screening kernels instead (per head: unit q, k, v, MiPE,
  // Trim · Softmask with a learned s_w, s_r, TanhNorm; no gate, no RoPE).
  kScreening = 6,
};

// "softmax", "softmax1", "ssmax", "sigmoid", "entmax15", "screening" (the lower-case enum names).
inline const char* AttentionKindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSoftmax: return "softmax";
    case AttentionKind::kSoftmax1: return "softmax1";
    case AttentionKind::kSsmax: return "ssmax";
    case AttentionKind::kSigmoid: return "sigmoid";
    case AttentionKind::kEntmax15: return "entmax15";
    case AttentionKind::kScreening: return "screening";
  }
  return "unknown";
}

// The kind named `name` (AttentionKindName's spelling); false if none.
inline bool ParseAttentionKind(std::string_view name, AttentionKind* kind) {
  for (AttentionKind k : {AttentionKind::kSoftmax, AttentionKind::kSoftmax1, AttentionKind::kSsmax,
                          AttentionKind::kSigmoid, AttentionKind::kEntmax15, AttentionKind::kScreening}) {
    if (name == AttentionKindName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

// Sigmoid attention's bias b = −log n (kernels/cpu/attention.h; docs/attention.md). Values
// match config.proto's ModelConfig.SigmoidBias.
enum class SigmoidBias {
  // Ramapuram et al.'s form: one n for every query, the training length at training (and
  // at evaluation unless --sigmoid_bias_length says otherwise). The default.
  kTrainLength = 1,
  // n_i = i + 1, the keys query i sees (this code's form before issue 43).
  kPerQuery = 2,
};

// "train_length" or "per_query".
inline const char* SigmoidBiasName(SigmoidBias bias) {
  return bias == SigmoidBias::kPerQuery ? "per_query" : "train_length";
}

// The form named `name` (SigmoidBiasName's spelling); false if none.
inline bool ParseSigmoidBias(std::string_view name, SigmoidBias* bias) {
  for (SigmoidBias b : {SigmoidBias::kTrainLength, SigmoidBias::kPerQuery}) {
    if (name == SigmoidBiasName(b)) {
      *bias = b;
      return true;
    }
  }
  return false;
}

}  // namespace multiscreen

// The parameter layout of one shard of a model (Multiscreen, or the Transformer
// baseline when dims.family says so): which tensors it holds, under their logical names (DESIGN "Checkpoints"), with global shapes,
// the slice it owns, and where each lives in the shard's flat buffer.
// With the full ranges it is the whole model; params counts come from here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"

namespace multiscreen {

// The part of the model one rank computes: layers [layer_begin, layer_end),
// tiles [tile_begin, tile_end) of each of them, and vocabulary rows
// [vocab_begin, vocab_end) of the tied table. `embed` holds s_E (the first
// pipeline stage), `head` holds s_F (the last); W_E rows live where either is.
struct ShardSpec {
  int64_t layer_begin = 0, layer_end = 0;
  int64_t tile_begin = 0, tile_end = 0;
  int64_t vocab_begin = 0, vocab_end = 0;
  bool embed = true;
  bool head = true;

  // The whole model on one rank.
  static ShardSpec Full(const ModelDims& dims);
  // Model-parallel rank (tp_rank, pp_rank) of a tp × pp split (SplitRange):
  // tiles and vocabulary rows over tp, layers over pp; stage 0 embeds, the
  // last stage holds the head.
  static ShardSpec ForRank(const ModelDims& dims, int64_t tp, int64_t pp, int64_t tp_rank, int64_t pp_rank);
  int64_t layers() const { return layer_end - layer_begin; }
  int64_t tiles() const { return tile_end - tile_begin; }
  int64_t vocab() const { return vocab_end - vocab_begin; }
};

// [begin, end) of part i when n items are split into `parts` contiguous runs,
// the first n mod parts runs one longer.
std::pair<int64_t, int64_t> SplitRange(int64_t n, int64_t parts, int64_t i);

// What a tensor is, for initialization (spec "Parameters and initialization")
// and for optimizer grouping (scalars may be exempt from weight decay).
// The Transformer (spec "Transformer baseline") reuses W_E, s_E, s_F (SIO), W_Q, W_K,
// W_V, W_O and adds the RMSNorm gains, the SwiGLU matrices and the QKNorm scales.
enum class ParamKind {
  kW_E, kS_E, kS_F, kW_Q, kW_K, kW_V, kW_G, kW_O, kS_w, kS_r, kS_O,
  kGain,                       // Transformer: attn_norm, ffn_norm [d_E] (replicated over tp)
  kW_gate, kW_up, kW_down,     // Transformer: SwiGLU [d_ff, d_E], one row per hidden unit
  kS_QK,                       // Transformer (qk_norm): log attention scale per head
  kS_SS,                       // Transformer (attention: SSMAX): SSMax's s per head (scores × s·log n)
};

// Whether every tp rank holds the whole tensor (s_E, s_F, the Transformer's RMSNorm
// gains) rather than a slice of it.
inline bool ReplicatedOverTp(ParamKind kind) {
  return kind == ParamKind::kS_E || kind == ParamKind::kS_F || kind == ParamKind::kGain;
}

struct ParamEntry {
  std::string name;                   // e.g. "layers/003/W_Q"
  ParamKind kind;
  int64_t layer = -1;                 // global layer index, or −1
  std::vector<int64_t> global_shape;  // e.g. [N_H, d_E, d_K]
  std::vector<int64_t> offset;        // start of the owned slice, per dimension
  std::vector<int64_t> shape;         // owned slice, per dimension
  int64_t buffer_offset = 0;          // first element in the flat buffer
  int64_t size() const;               // elements owned
  int64_t global_size() const;
  bool is_scalar() const;             // s_* parameters
  bool is_gain() const { return kind == ParamKind::kGain; }  // RMSNorm gains (no weight decay)
};

class ParamLayout {
 public:
  ParamLayout(const ModelDims& dims, const ShardSpec& shard);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  int64_t size() const { return size_; }  // elements in the flat buffer
  // The entry called `name`, or null.
  const ParamEntry* Find(const std::string& name) const;
  // Index of layer `layer`'s first tensor in entries(). Multiscreen: W_Q, W_K, W_V,
  // W_G, W_O, s_w, s_r, s_O. Transformer: attn_norm, W_Q, W_K, W_V, W_O, [s_QK,] [s_SS,]
  // ffn_norm, W_gate, W_up, W_down (TransformerSlot).
  int64_t LayerEntry(int64_t layer) const;
  // Tensors per layer (Multiscreen 8, 7 without the output gate; the Transformer's 9, plus
  // one with qk_norm, one with SSMax).
  int64_t EntriesPerLayer() const;
  // Multiscreen: index in entries() of layer `layer`'s tensor `slot`, counted in the
  // gated order W_Q, W_K, W_V, W_G, W_O, s_w, s_r, s_O (model/tile_weights.h LayerTensor).
  // With output_gate off W_G is absent (−1) and the later slots sit one earlier.
  int64_t MultiscreenEntry(int64_t layer, int slot) const;
  const ModelDims& dims() const { return dims_; }
  const ShardSpec& shard() const { return shard_; }

  // "layers/007/" style prefix.
  static std::string LayerPrefix(int64_t layer);

 private:
  void Add(std::string name, ParamKind kind, int64_t layer, std::vector<int64_t> global_shape,
           int64_t split_begin, int64_t split_end);
  ModelDims dims_;
  ShardSpec shard_;
  std::vector<ParamEntry> entries_;
  int64_t size_ = 0;
};

// Parameter counts of the whole model, from the full layout.
struct ParamCounts {
  int64_t total = 0;
  int64_t non_embedding = 0;  // everything but W_E
  int64_t embedding = 0;      // W_E
  int64_t embed_head_scalars = 0;  // s_E, s_F
  int64_t tile_matrices = 0;  // W_Q, W_K, W_V, W_G, W_O over all layers (Transformer: W_Q, W_K, W_V, W_O)
  int64_t tile_scalars = 0;   // s_w, s_r, s_O over all layers (Transformer: s_QK, s_SS)
  int64_t norm_gains = 0;     // Transformer: attn_norm, ffn_norm over all layers
  int64_t ffn_matrices = 0;   // Transformer: W_gate, W_up, W_down over all layers
};
ParamCounts CountParams(const ModelDims& dims);

}  // namespace multiscreen

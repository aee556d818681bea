#include "model/param_layout.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace multiscreen {

ShardSpec ShardSpec::Full(const ModelDims& dims) {
  ShardSpec s;
  s.layer_end = dims.n_layers;
  s.tile_end = dims.n_heads;
  s.vocab_end = dims.vocab;
  return s;
}

std::pair<int64_t, int64_t> SplitRange(int64_t n, int64_t parts, int64_t i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

ShardSpec ShardSpec::ForRank(const ModelDims& dims, int64_t tp, int64_t pp, int64_t tp_rank, int64_t pp_rank) {
  ShardSpec s;
  std::tie(s.layer_begin, s.layer_end) = SplitRange(dims.n_layers, pp, pp_rank);
  std::tie(s.tile_begin, s.tile_end) = SplitRange(dims.n_heads, tp, tp_rank);
  std::tie(s.vocab_begin, s.vocab_end) = SplitRange(dims.vocab, tp, tp_rank);
  s.embed = pp_rank == 0;
  s.head = pp_rank == pp - 1;
  return s;
}

int64_t ParamEntry::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ParamEntry::global_size() const {
  int64_t n = 1;
  for (int64_t d : global_shape) n *= d;
  return n;
}

bool ParamEntry::is_scalar() const {
  switch (kind) {
    case ParamKind::kS_E: case ParamKind::kS_F: case ParamKind::kS_w: case ParamKind::kS_r:
    case ParamKind::kS_O: case ParamKind::kS_QK: case ParamKind::kS_SS:
      return true;
    default:
      return false;
  }
}

std::string ParamLayout::LayerPrefix(int64_t layer) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "layers/%03lld/", static_cast<long long>(layer));
  return buf;
}

void ParamLayout::Add(std::string name, ParamKind kind, int64_t layer, std::vector<int64_t> global_shape,
                      int64_t split_begin, int64_t split_end) {
  ParamEntry e;
  e.name = std::move(name);
  e.kind = kind;
  e.layer = layer;
  e.global_shape = std::move(global_shape);
  e.offset.assign(e.global_shape.size(), 0);
  e.shape = e.global_shape;
  if (!e.global_shape.empty()) {  // the first dimension (tiles or vocabulary rows) is split
    e.offset[0] = split_begin;
    e.shape[0] = split_end - split_begin;
  }
  e.buffer_offset = size_;
  size_ += e.size();
  entries_.push_back(std::move(e));
}

ParamLayout::ParamLayout(const ModelDims& dims, const ShardSpec& shard) : dims_(dims), shard_(shard) {
  const int64_t V = dims.vocab, dE = dims.d_e, dK = dims.d_k, dV = dims.d_v, NH = dims.n_heads;
  if (shard.embed || shard.head) {
    Add("embed/W_E", ParamKind::kW_E, -1, {V, dE}, shard.vocab_begin, shard.vocab_end);
  }
  const bool scales = !dims.transformer() || dims.sio;  // s_E, s_F: Multiscreen's, or SIO's
  if (shard.embed && scales) Add("embed/s_E", ParamKind::kS_E, -1, {}, 0, 0);
  if (shard.head && scales) Add("head/s_F", ParamKind::kS_F, -1, {}, 0, 0);
  const int64_t h0 = shard.tile_begin, h1 = shard.tile_end;
  if (dims.transformer()) {
    // Heads split over tp like tiles; the SwiGLU width in the same proportion; gains whole.
    const int64_t dh = dims.d_e / NH, F = dims.d_ff();
    const int64_t f0 = h0 * F / NH, f1 = h1 * F / NH;
    for (int64_t l = shard.layer_begin; l < shard.layer_end; ++l) {
      const std::string p = LayerPrefix(l);
      Add(p + "attn_norm", ParamKind::kGain, l, {dE}, 0, dE);
      Add(p + "W_Q", ParamKind::kW_Q, l, {NH, dE, dh}, h0, h1);
      Add(p + "W_K", ParamKind::kW_K, l, {NH, dE, dh}, h0, h1);
      Add(p + "W_V", ParamKind::kW_V, l, {NH, dE, dh}, h0, h1);
      Add(p + "W_O", ParamKind::kW_O, l, {NH, dh, dE}, h0, h1);
      if (dims.qk_norm) Add(p + "s_QK", ParamKind::kS_QK, l, {NH}, h0, h1);
      if (dims.attention == AttentionKind::kSsmax) Add(p + "s_SS", ParamKind::kS_SS, l, {NH}, h0, h1);
      if (dims.attention == AttentionKind::kScreening) {  // each head's window and acceptance width
        Add(p + "s_w", ParamKind::kS_w, l, {NH}, h0, h1);
        Add(p + "s_r", ParamKind::kS_r, l, {NH}, h0, h1);
      }
      Add(p + "ffn_norm", ParamKind::kGain, l, {dE}, 0, dE);
      Add(p + "W_gate", ParamKind::kW_gate, l, {F, dE}, f0, f1);
      Add(p + "W_up", ParamKind::kW_up, l, {F, dE}, f0, f1);
      Add(p + "W_down", ParamKind::kW_down, l, {F, dE}, f0, f1);
    }
    return;
  }
  for (int64_t l = shard.layer_begin; l < shard.layer_end; ++l) {
    const std::string p = LayerPrefix(l);
    Add(p + "W_Q", ParamKind::kW_Q, l, {NH, dE, dK}, h0, h1);
    Add(p + "W_K", ParamKind::kW_K, l, {NH, dE, dK}, h0, h1);
    Add(p + "W_V", ParamKind::kW_V, l, {NH, dE, dV}, h0, h1);
    if (dims.output_gate) Add(p + "W_G", ParamKind::kW_G, l, {NH, dE, dV}, h0, h1);  // none: issue 30's ablation
    Add(p + "W_O", ParamKind::kW_O, l, {NH, dV, dE}, h0, h1);
    Add(p + "s_w", ParamKind::kS_w, l, {NH}, h0, h1);
    Add(p + "s_r", ParamKind::kS_r, l, {NH}, h0, h1);
    Add(p + "s_O", ParamKind::kS_O, l, {NH}, h0, h1);
  }
}

const ParamEntry* ParamLayout::Find(const std::string& name) const {
  for (const ParamEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

int64_t ParamLayout::EntriesPerLayer() const {
  if (!dims_.transformer()) return dims_.output_gate ? 8 : 7;
  return 9 + (dims_.qk_norm ? 1 : 0) + (dims_.attention == AttentionKind::kSsmax ? 1 : 0) +
         (dims_.attention == AttentionKind::kScreening ? 2 : 0);
}

int64_t ParamLayout::LayerEntry(int64_t layer) const {
  const bool scales = !dims_.transformer() || dims_.sio;
  const int64_t first = (shard_.embed || shard_.head ? 1 : 0) + (shard_.embed && scales ? 1 : 0) +
                        (shard_.head && scales ? 1 : 0);
  return first + (layer - shard_.layer_begin) * EntriesPerLayer();
}

int64_t ParamLayout::MultiscreenEntry(int64_t layer, int slot) const {
  constexpr int kGateSlot = 3;  // W_G in W_Q, W_K, W_V, W_G, W_O, s_w, s_r, s_O
  if (dims_.output_gate || slot < kGateSlot) return LayerEntry(layer) + slot;
  return slot == kGateSlot ? -1 : LayerEntry(layer) + slot - 1;
}

ParamCounts CountParams(const ModelDims& dims) {
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  ParamCounts c;
  for (const ParamEntry& e : layout.entries()) {
    const int64_t n = e.global_size();
    c.total += n;
    switch (e.kind) {
      case ParamKind::kW_E: c.embedding += n; break;
      case ParamKind::kS_E: case ParamKind::kS_F: c.embed_head_scalars += n; break;
      case ParamKind::kS_w: case ParamKind::kS_r: case ParamKind::kS_O: case ParamKind::kS_QK:
      case ParamKind::kS_SS: c.tile_scalars += n; break;
      case ParamKind::kGain: c.norm_gains += n; break;
      case ParamKind::kW_gate: case ParamKind::kW_up: case ParamKind::kW_down: c.ffn_matrices += n; break;
      default: c.tile_matrices += n; break;
    }
  }
  c.non_embedding = c.total - c.embedding;
  return c;
}

}  // namespace multiscreen

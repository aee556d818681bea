#include "model/tile_weights.h"

#include <cmath>
#include <limits>

namespace multiscreen {

template <typename Real>
void PackProjections(const ParamLayout& layout, const Real* params, int64_t layer, std::vector<Real>* w_cat) {
  const ModelDims& d = layout.dims();
  const int64_t nt = layout.shard().tiles(), dE = d.d_e, ldw = nt * (2 * d.d_k + 2 * d.d_v);
  const int64_t widths[4] = {d.d_k, d.d_k, d.d_v, d.d_v};
  const int64_t first = layout.LayerEntry(layer);
  w_cat->resize(dE * ldw);
  int64_t col = 0;
  for (int64_t t = 0; t < nt; ++t) {
    for (int part = 0; part < 4; ++part) {
      const int64_t w = widths[part];
      const Real* src = params + layout.entries()[first + part].buffer_offset + t * dE * w;
      for (int64_t e = 0; e < dE; ++e) std::copy(src + e * w, src + (e + 1) * w, w_cat->data() + e * ldw + col);
      col += w;
    }
  }
}

template <typename Real>
void UnpackProjectionsAdd(const ParamLayout& layout, const Real* d_w_cat, int64_t layer, Real* grads) {
  const ModelDims& d = layout.dims();
  const int64_t nt = layout.shard().tiles(), dE = d.d_e, ldw = nt * (2 * d.d_k + 2 * d.d_v);
  const int64_t widths[4] = {d.d_k, d.d_k, d.d_v, d.d_v};
  const int64_t first = layout.LayerEntry(layer);
  int64_t col = 0;
  for (int64_t t = 0; t < nt; ++t) {
    for (int part = 0; part < 4; ++part) {
      const int64_t w = widths[part];
      Real* dst = grads + layout.entries()[first + part].buffer_offset + t * dE * w;
      for (int64_t e = 0; e < dE; ++e) {
        const Real* src = d_w_cat + e * ldw + col;
        for (int64_t c = 0; c < w; ++c) dst[e * w + c] += src[c];
      }
      col += w;
    }
  }
}

template <typename Real>
std::vector<kernels::cpu::TileScalars> MapTileScalars(const ParamLayout& layout, const Real* params, int64_t layer,
                                                      const InferenceOptions* inference) {
  const auto& entries = layout.entries();
  const int64_t first = layout.LayerEntry(layer);
  const Real* s_w = params + entries[first + kSw].buffer_offset;
  const Real* s_r = params + entries[first + kSr].buffer_offset;
  const Real* s_o = params + entries[first + kSO].buffer_offset;
  std::vector<kernels::cpu::TileScalars> tiles(layout.shard().tiles());
  for (size_t t = 0; t < tiles.size(); ++t) {
    const double w = std::exp(double(s_w[t])) + 1.0;
    tiles[t].w = w;
    tiles[t].mipe_w = w;
    tiles[t].r = 1.0 / (1.0 + std::exp(-double(s_r[t])));
    tiles[t].scale = std::exp(double(s_o[t]));
    if (inference != nullptr && inference->expand_windows && w > double(inference->train_len)) {
      tiles[t].w = std::numeric_limits<double>::infinity();
    }
  }
  return tiles;
}

#define MS_INSTANTIATE(Real)                                                                                    \
  template void PackProjections<Real>(const ParamLayout&, const Real*, int64_t, std::vector<Real>*);            \
  template void UnpackProjectionsAdd<Real>(const ParamLayout&, const Real*, int64_t, Real*);                    \
  template std::vector<kernels::cpu::TileScalars> MapTileScalars<Real>(const ParamLayout&, const Real*, int64_t, \
                                                                       const InferenceOptions*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen

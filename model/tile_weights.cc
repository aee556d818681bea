#include "model/tile_weights.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace multiscreen {
namespace {

// Calls f(part, tile, column of w_cat) for each of the [d_E, width] blocks of a layer's
// packed projections, in column order; width = widths[part].
template <typename F>
void ForEachProjectionBlock(const ParamLayout& layout, F&& f) {
  for (int64_t t = 0, col = 0; t < layout.shard().tiles(); ++t) {
    for (int part = 0; part < (layout.dims().output_gate ? 4 : 3); ++part) {  // no W_G without the gate
      f(part, t, col);
      col += part < 2 ? layout.dims().d_k : layout.dims().d_v;
    }
  }
}

int64_t PackedColumns(const ParamLayout& layout) {
  return layout.shard().tiles() * (2 * layout.dims().d_k + (layout.dims().output_gate ? 2 : 1) * layout.dims().d_v);
}

int64_t PartWidth(const ParamLayout& layout, int part) { return part < 2 ? layout.dims().d_k : layout.dims().d_v; }

}  // namespace

template <typename Real>
void PackProjections(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* params, int64_t layer,
                     DeviceArray<Real>* w_cat) {
  const int64_t dE = layout.dims().d_e, ldw = PackedColumns(layout);
  w_cat->Resize(dE * ldw);
  ForEachProjectionBlock(layout, [&](int part, int64_t t, int64_t col) {
    const int64_t w = PartWidth(layout, part);
    ops.Copy2D(params + layout.entries()[layout.MultiscreenEntry(layer, part)].buffer_offset + t * dE * w, w, dE, w, w_cat->data() + col, ldw);
  });
}

template <typename Real>
void UnpackProjectionsAdd(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* d_w_cat,
                          int64_t layer, Real* grads) {
  const int64_t dE = layout.dims().d_e, ldw = PackedColumns(layout);
  ForEachProjectionBlock(layout, [&](int part, int64_t t, int64_t col) {
    const int64_t w = PartWidth(layout, part);
    ops.Add2D(d_w_cat + col, ldw, dE, w, grads + layout.entries()[layout.MultiscreenEntry(layer, part)].buffer_offset + t * dE * w, w);
  });
}

template <typename Real>
std::vector<kernels::TileScalars> MapTileScalars(const Real* s_w, const Real* s_r, const Real* s_o, int64_t n,
                                                 const InferenceOptions* inference) {
  std::vector<kernels::TileScalars> tiles(n);
  for (int64_t t = 0; t < n; ++t) {
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

template <typename Real>
std::vector<kernels::TileScalars> MapTileScalars(const ParamLayout& layout, const Real* params, int64_t layer,
                                                 const InferenceOptions* inference) {
  const auto& entries = layout.entries();
  auto at = [&](LayerTensor slot) { return params + entries[layout.MultiscreenEntry(layer, slot)].buffer_offset; };
  return MapTileScalars(at(kSw), at(kSr), at(kSO), layout.shard().tiles(), inference);
}

#define MS_INSTANTIATE(Real)                                                                                         \
  template void PackProjections<Real>(kernels::KernelTable<Real>&, const ParamLayout&, const Real*, int64_t,         \
                                      DeviceArray<Real>*);                                                           \
  template void UnpackProjectionsAdd<Real>(kernels::KernelTable<Real>&, const ParamLayout&, const Real*, int64_t,    \
                                           Real*);                                                                   \
  template std::vector<kernels::TileScalars> MapTileScalars<Real>(const Real*, const Real*, const Real*, int64_t,    \
                                                                  const InferenceOptions*);                          \
  template std::vector<kernels::TileScalars> MapTileScalars<Real>(const ParamLayout&, const Real*, int64_t,          \
                                                                  const InferenceOptions*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen

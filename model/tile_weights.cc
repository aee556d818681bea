#include "model/tile_weights.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace multiscreen {

kernels::ScreeningShape MultiscreenShape(const ModelDims& dims, int64_t tiles, int64_t B, int64_t T,
                                         const InferenceOptions* inference) {
  kernels::ScreeningShape s;
  s.batch = B;
  s.seq = T;
  s.tiles = tiles;
  s.d_k = dims.d_k;
  s.d_v = dims.d_v;
  s.w_th = dims.w_th;
  s.tanh_norm = dims.tanh_norm;
  s.position = dims.position;
  s.output_gate = dims.output_gate;
  if (inference != nullptr && dims.position == kernels::PositionKind::kRope) {
    s.rope_scaling = YarnScalingOf(*inference);
  }
  return s;
}

kernels::cpu::RopeScaling YarnScalingOf(const InferenceOptions& inference) {
  kernels::cpu::RopeScaling s;
  s.factor = inference.yarn_factor;
  s.original_len = double(inference.train_len);
  s.ramp = inference.yarn_ramp;
  return s;
}

int64_t SigmoidBiasLength(const ModelDims& dims, const InferenceOptions* inference, int64_t T) {
  if (dims.attention != AttentionKind::kSigmoid || dims.sigmoid_bias == SigmoidBias::kPerQuery) return 0;
  if (inference == nullptr) return T;
  return inference->sigmoid_bias_length > 0 ? inference->sigmoid_bias_length : inference->train_len;
}

kernels::ScreeningShape TransformerScreeningShape(const ModelDims& dims, int64_t heads, int64_t B, int64_t T) {
  kernels::ScreeningShape s;
  s.batch = B;
  s.seq = T;
  s.tiles = heads;
  s.d_k = s.d_v = dims.d_k;
  s.w_th = dims.w_th;
  s.tanh_norm = true;
  s.position = kernels::PositionKind::kMipe;
  s.output_gate = false;
  return s;
}
namespace {

// Columns of one tile in w_cat: [W_Q | W_K | W_V | W_G] (no W_G without the gate).
int64_t TileColumns(const ModelDims& d) { return 2 * d.d_k + (d.output_gate ? 2 : 1) * d.d_v; }

// Calls f(part, width, first column of the part's block in tile 0) for each part of a
// tile's columns; tile t's block of that part starts t·TileColumns further right.
template <typename F>
void ForEachProjectionPart(const ModelDims& d, F&& f) {
  int64_t col = 0;
  for (int part = 0; part < (d.output_gate ? 4 : 3); ++part) {
    const int64_t width = part < 2 ? d.d_k : d.d_v;
    f(part, width, col);
    col += width;
  }
}

// A job per part (Copy2DJobs'): the tiles' [d_E, width] blocks of W_part [tiles, d_E,
// width] (tile stride d_E·width) into w_cat's columns (tile stride TileColumns), w_cat
// resized; returns the jobs' number.
template <typename Real>
int ProjectionJobs(const ParamLayout& layout, const Real* params, int64_t layer, DeviceArray<Real>* w_cat,
                   kernels::Copy2DJob<Real>* jobs) {
  const ModelDims& d = layout.dims();
  const int64_t dE = d.d_e, nt = layout.shard().tiles(), C = TileColumns(d), ldw = nt * C;
  w_cat->Resize(dE * ldw);
  int n = 0;
  ForEachProjectionPart(d, [&](int part, int64_t w, int64_t col) {
    const Real* src = params + layout.entries()[layout.MultiscreenEntry(layer, part)].buffer_offset;
    jobs[n++] = {src, w, dE * w, dE, w, nt, w_cat->data() + col, ldw, C};
  });
  return n;
}

}  // namespace

// One launch for all parts (Copy2DJobs).
template <typename Real>
void PackProjections(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* params, int64_t layer,
                     DeviceArray<Real>* w_cat) {
  kernels::Copy2DJob<Real> jobs[kernels::kMaxCopy2DJobs];
  const int n = ProjectionJobs(layout, params, layer, w_cat, jobs);
  ops.Copy2DJobs(jobs, n, /*accumulate=*/false);
}

// The same jobs and the rounding in one call (KernelTable::PackJobsRounded).
template <typename Real>
void PackProjectionsRounded(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* params,
                            int64_t layer, Precision precision, DeviceArray<Real>* w_cat,
                            kernels::PackedOperand<Real>* out) {
  kernels::Copy2DJob<Real> jobs[kernels::kMaxCopy2DJobs];
  const int n = ProjectionJobs(layout, params, layer, w_cat, jobs);
  ops.PackJobsRounded(precision, jobs, n, w_cat->data(), w_cat->size(), out);
}

// The reverse of PackProjections' jobs, added or written: one launch.
template <typename Real>
void UnpackProjections(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* d_w_cat,
                       int64_t layer, Real* grads, bool accumulate) {
  const ModelDims& d = layout.dims();
  const int64_t dE = d.d_e, nt = layout.shard().tiles(), C = TileColumns(d), ldw = nt * C;
  kernels::Copy2DJob<Real> jobs[kernels::kMaxCopy2DJobs];
  int n = 0;
  ForEachProjectionPart(d, [&](int part, int64_t w, int64_t col) {
    Real* dst = grads + layout.entries()[layout.MultiscreenEntry(layer, part)].buffer_offset;
    jobs[n++] = {d_w_cat + col, ldw, C, dE, w, nt, dst, w, dE * w};
  });
  ops.Copy2DJobs(jobs, n, accumulate);
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
  template void PackProjectionsRounded<Real>(kernels::KernelTable<Real>&, const ParamLayout&, const Real*, int64_t,  \
                                             Precision, DeviceArray<Real>*, kernels::PackedOperand<Real>*);          \
  template void UnpackProjections<Real>(kernels::KernelTable<Real>&, const ParamLayout&, const Real*, int64_t,       \
                                        Real*, bool);                                                                \
  template std::vector<kernels::TileScalars> MapTileScalars<Real>(const Real*, const Real*, const Real*, int64_t,    \
                                                                  const InferenceOptions*);                          \
  template std::vector<kernels::TileScalars> MapTileScalars<Real>(const ParamLayout&, const Real*, int64_t,          \
                                                                  const InferenceOptions*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen

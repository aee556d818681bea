#include "model/decode.h"

#include <cmath>

#include "kernels/cpu/cpu_kernel_table.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/screening.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen {

namespace k = kernels::cpu;

template <typename Real>
DecodeSession<Real>::DecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options)
    : layout_(dims, ShardSpec::Full(dims)), params_(params) {
  // Position ROPE: YaRN's frequencies at inference (Multiscreen::LayersForward's rule).
  if (dims.position == kernels::PositionKind::kRope) rope_scaling_ = {options.yarn_factor, double(options.train_len)};
  const int64_t V = dims.vocab, dE = dims.d_e;
  e_bar_.resize(V * dE);
  k::UnitRowsForward(params + layout_.Find("embed/W_E")->buffer_offset, dE, e_bar_.data(), dE,
                     static_cast<Real*>(nullptr), V, dE);
  caches_.resize(dims.n_layers);
  kernels::cpu::CpuKernelTable<Real> cpu;  // decoding runs on the CPU
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    w_cat_.emplace_back(Device::kCpu);
    PackProjections(cpu, layout_, params, l, &w_cat_[l]);
    for (const kernels::TileScalars& t : MapTileScalars(layout_, params, l, &options)) {
      caches_[l].emplace_back(t, dims.d_k, dims.d_v);
    }
  }
}

template <typename Real>
int64_t DecodeSession<Real>::CachedKeys(int64_t layer, int64_t tile) const {
  return caches_[layer][tile].CachedKeys(position_);
}

template <typename Real>
void DecodeSession<Real>::Step(int32_t token, Real* logits) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, dK = d.d_k, dV = d.d_v, NH = d.n_heads, C = 2 * dK + (d.output_gate ? 2 : 1) * dV;
  const int64_t pos = position_;
  std::vector<Real> x(dE), p(NH * C), u(NH * dV), h(dV), norm(1);
  const Real s_e = params_[layout_.Find("embed/s_E")->buffer_offset];
  const Real* e_row = e_bar_.data() + static_cast<int64_t>(token) * dE;
  for (int64_t c = 0; c < dE; ++c) x[c] = static_cast<Real>(std::exp(double(s_e))) * e_row[c];
  for (int64_t l = 0; l < d.n_layers; ++l) {
    k::Gemm<Real>(false, false, 1, NH * C, dE, 1, x.data(), dE, w_cat_[l].data(), NH * C, 0, p.data(), NH * C);
    for (int64_t t = 0; t < NH; ++t) {
      ScreeningTileCache<Real>& c = caches_[l][t];
      const Real* pt = p.data() + t * C;  // [q | k | v | g] of tile t
      c.Step(pt, pt + dK, pt + 2 * dK, pos, d.position, d.w_th, rope_scaling_, h.data());
      k::TileOutputRow(h.data(), d.output_gate ? pt + 2 * dK + dV : nullptr, static_cast<Real>(c.scalars().scale), dV,
                       d.tanh_norm, u.data() + t * dV);
    }
    const Real* w_o = params_ + layout_.entries()[layout_.MultiscreenEntry(l, kWO)].buffer_offset;
    k::Gemm<Real>(false, false, 1, dE, NH * dV, 1, u.data(), NH * dV, w_o, dE, 1, x.data(), dE);
  }
  if (d.pl_norm) k::UnitRowsForward(x.data(), dE, x.data(), dE, norm.data(), 1, dE);
  const Real s_f = params_[layout_.Find("head/s_F")->buffer_offset];
  k::Gemm<Real>(false, true, 1, d.vocab, dE, static_cast<Real>(std::exp(double(s_f))), x.data(), dE, e_bar_.data(),
                dE, 0, logits, d.vocab);
  ++position_;
}

template class DecodeSession<float>;
template class DecodeSession<double>;

}  // namespace multiscreen

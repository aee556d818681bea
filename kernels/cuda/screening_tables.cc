// Per-tile tables of the CUDA screening kernels, on the host (screening_tables.h).
#include "kernels/cuda/screening_tables.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/mipe.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmask.h"

namespace multiscreen::kernels::cuda {

void FillScreeningTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningHostTables* out) {
  const int64_t nt = shape.tiles;
  const bool mipe = shape.position == PositionKind::kMipe;
  out->params.resize(nt);
  out->rate_dw.resize(nt);
  out->mask_ld = 1;
  for (int64_t t = 0; t < nt; ++t) {
    ScreeningTileParams& p = out->params[t];
    p.w = static_cast<float>(tiles[t].w);
    p.r = static_cast<float>(tiles[t].r);
    p.scale = static_cast<float>(tiles[t].scale);
    p.keys = cpu::SoftmaskKeys(tiles[t].w, shape.seq);
    cpu::MipeRate(tiles[t].mipe_w, shape.w_th, &p.rate, &out->rate_dw[t]);
    if (!mipe) p.rate = out->rate_dw[t] = 0;  // NOPE, ROPE: no MiPE angle and no w-gradient through it
    out->mask_ld = std::max(out->mask_ld, p.keys);
  }
  out->rope_freq.clear();
  if (shape.position == PositionKind::kRope) {
    out->rope_freq.resize(shape.d_k / 2);
    cpu::RopeFrequencies(shape.d_k, shape.rope_scaling, out->rope_freq.data());
  }
  const int64_t ld = out->mask_ld;
  out->mask.assign(nt * ld, 0.f);
  out->dmask.assign(nt * ld, 0.f);
  for (int64_t t = 0; t < nt; ++t) {
    cpu::SoftmaskTable(tiles[t].w, out->params[t].keys, out->mask.data() + t * ld, out->dmask.data() + t * ld);
  }
  out->chain.resize(nt * kChain);
  for (int64_t t = 0; t < nt; ++t) {
    double* c = out->chain.data() + t * kChain;
    c[kChainRateDw] = out->rate_dw[t];
    c[kChainWMinus1] = tiles[t].w - 1.0;
    c[kChainInfiniteW] = std::isinf(tiles[t].w) ? 1 : 0;
    c[kChainR] = tiles[t].r;
    c[kChainOneMinusR] = 1.0 - tiles[t].r;
    c[kChainScale] = tiles[t].scale;
  }
}

}  // namespace multiscreen::kernels::cuda

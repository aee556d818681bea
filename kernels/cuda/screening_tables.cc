// Per-tile tables of the CUDA screening kernels, on the host (screening_tables.h).
#include "kernels/cuda/screening_tables.h"

#include <algorithm>

#include "kernels/cpu/mipe.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmask.h"

namespace multiscreen::kernels::cuda {

void FillScreeningTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningScratch* scratch) {
  const int64_t nt = shape.tiles;
  scratch->host_params.resize(nt);
  scratch->host_rate_dw.resize(nt);
  scratch->mask_ld = 1;
  for (int64_t t = 0; t < nt; ++t) {
    ScreeningTileParams& p = scratch->host_params[t];
    p.w = static_cast<float>(tiles[t].w);
    p.r = static_cast<float>(tiles[t].r);
    p.scale = static_cast<float>(tiles[t].scale);
    p.keys = cpu::SoftmaskKeys(tiles[t].w, shape.seq);
    cpu::MipeRate(tiles[t].mipe_w, shape.w_th, &p.rate, &scratch->host_rate_dw[t]);
    scratch->mask_ld = std::max(scratch->mask_ld, p.keys);
  }
  scratch->host_rope_freq.clear();
  if (shape.position == PositionKind::kRope) {
    scratch->host_rope_freq.resize(shape.d_k / 2);
    cpu::RopeFrequencies(shape.d_k, shape.rope_scaling, scratch->host_rope_freq.data());
  }
  const int64_t ld = scratch->mask_ld;
  scratch->host_mask.assign(nt * ld, 0.f);
  scratch->host_dmask.assign(nt * ld, 0.f);
  for (int64_t t = 0; t < nt; ++t) {
    cpu::SoftmaskTable(tiles[t].w, scratch->host_params[t].keys, scratch->host_mask.data() + t * ld,
                       scratch->host_dmask.data() + t * ld);
  }
}

}  // namespace multiscreen::kernels::cuda

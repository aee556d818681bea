// The host half of the CUDA screening kernels (kernels/cuda/screening.h): each tile's
// mapped scalars, MiPE rate and Softmask tables, made with the CPU kernel's own
// functions (kernels/cpu/softmask.h, kernels/cpu/mipe.h) so that both devices use the
// same numbers. A C++ file, not CUDA: those headers are C++20.
#pragma once

#include "kernels/cuda/screening.h"

namespace multiscreen::kernels::cuda {

// Fills scratch->host_params [tiles], host_rate_dw [tiles] (dc/dw of the MiPE rate),
// mask_ld (the most keys of any tile, ≥ 1) and host_mask / host_dmask
// [tiles, mask_ld]: m(d) and ∂m/∂w(d) at index d < keys, zero beyond; for position ROPE
// host_rope_freq [d_k/2], pair p's frequency (cpu::RopeFrequencies with
// shape.rope_scaling: YaRN's θ'_p at inference), empty for MIPE and NOPE.
void FillScreeningTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningScratch* scratch);

}  // namespace multiscreen::kernels::cuda

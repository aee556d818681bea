// Initialization (spec "Parameters and initialization"), seeded, and a pure
// function of (seed, parameter name, global element index): any parallel
// layout initializes exactly the same model.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/param_layout.h"

namespace multiscreen {

// A standard normal draw from a counter-based generator keyed by (seed, name, index).
double InitNormal(uint64_t seed, std::string_view name, int64_t index);

// Fills the layout's flat buffer: normal matrices with the spec's std, and the
// scalars s_E = 0, s_F = log √d_E, s_w = log(w_th)·h/(N_H − 1) for global tile h,
// s_r = 0, s_O = log(1/√(N_H·N_L)). The Transformer: N(0, 0.02) matrices with W_O and
// W_down over √(2 N_L), unit gains, s_E = 0, s_F = log √d_E, s_QK = log √d_head,
// SSMax's s_SS = 1.
template <typename Real>
void InitParams(const ParamLayout& layout, uint64_t seed, Real* params);

// Elements [first, first + n) of tensor e in global row-major order (first is
// a global element index, whatever slice e itself owns), exactly as
// InitParams gives them: the streamed writers (issue 20) produce any block of
// any tensor without the rest of the model. dims is the whole model's.
template <typename Real>
void InitValues(const ModelDims& dims, const ParamEntry& e, uint64_t seed, int64_t first, int64_t n, Real* out);


}  // namespace multiscreen

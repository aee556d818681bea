// Rotary position embedding (RoPE, θ = 10,000; spec "Transformer baseline") in the
// half-split convention (GPT-NeoX, Hugging Face LLaMA): within each head of width
// d_h, coordinate p < d_h/2 pairs with p + d_h/2 and the pair turns by the angle
//   φ(t, p) = t · θ^(−2p/d_h)
// for the token at position t (0-based within its sequence):
//   (a, b) ← (a cos φ − b sin φ, a sin φ + b cos φ).
// Angles in fp64 whatever Real is.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

inline constexpr double kRopeTheta = 10000.0;

// x: [B·T, heads·d_h] in place, row stride ld (≥ heads·d_h); row b·T + t is position
// pos0 + t (pos0 > 0: decoding with a KV cache, one new token at its absolute position).
// inverse: turn by −φ (the backward: the rotation's transpose applied to a gradient).
// d_h must be even.
template <typename Real>
void Rope(Real* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, int64_t pos0 = 0);

}  // namespace multiscreen::kernels::cpu

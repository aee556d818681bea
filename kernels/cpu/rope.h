// Rotary position embedding (RoPE, θ = 10,000; spec "Transformer baseline") in the
// half-split convention (GPT-NeoX, Hugging Face LLaMA): within each head of width
// d_h, coordinate p < d_h/2 pairs with p + d_h/2 and the pair turns by the angle
//   φ(t, p) = t · θ_p,   θ_p = θ^(−2p/d_h)
// for the token at position t (0-based within its sequence):
//   (a, b) ← (a cos φ − b sin φ, a sin φ + b cos φ).
// Angles in fp64 whatever Real is.
//
// YaRN at inference (Peng et al. 2023, "YaRN: Efficient Context Window Extension of
// Large Language Models", arXiv:2309.00071): a model trained on L tokens, run on about
// F·L, F > 1 the scale factor s of the paper.
//  - §3.2 "NTK-by-parts" interpolation: pair p has wavelength λ_p = 2π/θ_p and turns
//    r_p = L/λ_p times over the training length; with the ramp
//      γ(r) = 0 for r < α,  1 for r > β,  (r − α)/(β − α) between  (α = 1, β = 32: LLaMA's)
//    its frequency becomes  θ'_p = (1 − γ(r_p)) · θ_p/F + γ(r_p) · θ_p:
//    pairs that turn fewer than α times in L are interpolated (positions divided by F,
//    as Position Interpolation), those that turn more than β times are left alone.
//    That is the paper's equation (γ linear in r: YarnRamp::kPaper, the default). The
//    authors' code (jquesnelle/yarn find_correction_range, linear_ramp_mask; Hugging Face
//    transformers' _compute_yarn_parameters) ramps linearly in the pair index instead, from
//    the pair that turns β times to the one that turns α times, with the bounds rounded
//    outward (YarnRamp::kCode):
//      p(ρ) = d_h · ln(L/(2π ρ)) / (2 ln θ)   (the pair index that turns ρ times in L),
//      lo = max(⌊p(β)⌋, 0),  hi = min(⌈p(α)⌉, d_h − 1)  (hi += 0.001 when lo = hi),
//      γ_p = 1 − clamp((p − lo)/(hi − lo), 0, 1).
//    Both leave the pairs outside [lo, hi] as the paper does; between, they differ (at
//    d_h 64, L 4096, F 4: 12 of 32 frequencies by more than 1 %, at most by a factor 1.73).
//  - §3.4 YaRN: the attention logits are divided by a temperature t with
//    √(1/t) = 0.1 ln F + 1, i.e. multiplied by (0.1 ln F + 1)² (YarnLogitScale), which
//    the Transformer folds into its per-head attention scale.
// F = 1 is plain RoPE, bit for bit (the scaled formula is not evaluated).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

inline constexpr double kRopeTheta = 10000.0;

// Which ramp γ YaRN's NTK-by-parts uses (above).
enum class YarnRamp {
  kPaper,  // linear in r_p, the paper's equation (the default)
  kCode,   // linear in the pair index with floor/ceil bounds, the authors' code
};

// "paper" or "code".
inline const char* YarnRampName(YarnRamp ramp) { return ramp == YarnRamp::kCode ? "code" : "paper"; }

// YaRN's parameters (above); the default is plain RoPE.
struct RopeScaling {
  double factor = 1.0;        // F ≥ 1
  double original_len = 0.0;  // L, the training length in tokens (used when F > 1)
  double alpha = 1.0, beta = 32.0;
  YarnRamp ramp = YarnRamp::kPaper;
  bool active() const { return factor != 1.0; }
};

// θ'_p (θ_p when !scaling.active()) of pair p < d_h/2, radians per position: the one
// definition, which the Transformer's RoPE and Multiscreen's position ROPE
// (kernels/cpu/mipe.h ScreeningRopeTable) both use.
double RopeFrequency(int64_t p, int64_t d_h, const RopeScaling& scaling);

// YarnRamp::kCode's bounds lo, hi of the pair index (above; hi already widened by 0.001
// when lo = hi), so that γ_p = 1 − clamp((p − lo)/(hi − lo), 0, 1). The CUDA kernels take
// them from here.
void YarnCodeRampBounds(int64_t d_h, const RopeScaling& scaling, double* lo, double* hi);

// freq[p] = RopeFrequency(p, d_h, scaling) for p < d_h/2.
void RopeFrequencies(int64_t d_h, const RopeScaling& scaling, double* freq);

// YaRN's factor on the attention logits, (0.1 ln F + 1)² (1 for F = 1).
double YarnLogitScale(double factor);

// x: [B·T, heads·d_h] in place, row stride ld (≥ heads·d_h); row b·T + t is position
// pos0 + t (pos0 > 0: decoding with a KV cache, one new token at its absolute position).
// inverse: turn by −φ (the backward: the rotation's transpose applied to a gradient).
// d_h must be even. `scaling`: YaRN's frequencies (RopeFrequencies).
template <typename Real>
void Rope(Real* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, int64_t pos0 = 0,
          const RopeScaling& scaling = {});

}  // namespace multiscreen::kernels::cpu

// RoPE (spec "Transformer baseline") on a CUDA device, the twin of kernels/cpu/rope.h:
// half-split pairs (p, p + d_h/2) of each head turned by φ(t, p) = t · θ_p,
// θ_p = θ^(−2p/d_h), θ = 10,000, t the position within its sequence; with YaRN's
// scaling (cpu::RopeScaling, F > 1) θ'_p = (1 − γ(r_p)) θ_p/F + γ(r_p) θ_p, the same
// NTK-by-parts ramp (either YarnRamp) as cpu::RopeFrequencies. The frequency, angle, its cosine and sine
// are computed in fp64 from the exact integer position, as the CPU's, then rounded to
// fp32 for the rotation. One thread per pair. Pointers are device pointers; launches on
// `stream`; failures are fatal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/rope.h"

namespace multiscreen::kernels::cuda {

// x: [B·T, heads·d_h] in place, row stride ld (≥ heads·d_h); row b·T + t is position t.
// inverse: turn by −φ (the backward). d_h must be even.
void Rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, cudaStream_t stream,
          const cpu::RopeScaling& scaling = {});

// Two arrays of that layout in one launch (q and k, or their gradients): q_out = RoPE(q),
// k_out = RoPE(k) (inverse: by −φ), each out of place or in place (q_out = q); the
// columns past heads·d_h of the outputs are not written.
void RopePair(const float* q, const float* k, float* q_out, float* k_out, int64_t ld, int64_t B, int64_t T,
              int64_t heads, int64_t d_h, bool inverse, cudaStream_t stream, const cpu::RopeScaling& scaling = {});

// The cosines and sines of positions 0 … T − 1 as the rotations above use them, for a
// kernel that turns rows as it loads them (attention_tiled.h): table [T, d_h] fp32, row t
// holding (cos φ(t, p), sin φ(t, p)) at columns 2p, 2p + 1 for p < d_h/2, the same fp32
// values Rope multiplies by. d_h must be even.
void RopeTable(float* table, int64_t T, int64_t d_h, cudaStream_t stream, const cpu::RopeScaling& scaling = {});

}  // namespace multiscreen::kernels::cuda

// Device functions of screening's steps 5–6 on one token's row, forward and backward,
// shared by the simple kernels (screening.cu) and the tiled kernels (screening_tiled.cu):
// the forward's unit norm and MiPE rotation (NormalizeKernel and the tiled kernels' row
// loads: the tiled forward and backward passes compute from P the q̃, k̃, v̄ and norms that
// NormalizeKernel saves, bit for bit, and save none) and the backward's (the
// tiled backward's epilogues finish ∂L/∂q̃, ∂L/∂k̃, ∂L/∂v̄ into ∂L/∂P as
// NormalizeBackwardKernel does), with the same fp32/fp64 arithmetic, bit for bit: the
// MiPE angle's cos and sin, the ROPE turn, the unit norm and rotation of cpu::UnitRow
// and cpu::MipeRotate, and the backward of cpu::NormalizeRotateBackwardRow. Also the
// backward of steps 13–11 on one token's row (OutputBackwardKernel and the tiled query
// pass's prologue, so both write the same ∂L/∂h, ∂L/∂g and scale part).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/device_math.cuh"

namespace multiscreen::kernels::cuda {

// cpu::kUnitNormFloor (that header is not included: OpenMP pragmas): ‖x‖ below it is
// clamped by spec step 5's unit norm.
constexpr float kScreeningUnitFloor = 1e-12f;

// An element of P as fp32: itself, or a bf16 one widened (exact). The row functions below
// read P through it, so that the tiled kernels take P in fp32 or in bf16 (the CUDA table's
// bf16 path: its GEMM writes P in bf16) with the same arithmetic on the same values.
__device__ inline float RowValue(float x) { return x; }
__device__ inline float RowValue(__nv_bfloat16 x) { return __bfloat162float(x); }

// A value of ∂L/∂P stored to its element: itself (fp32), or rounded once to nearest even
// into bf16 (StoreHalf: the bits gemm.h's packing makes of the fp32 value). The backward row
// functions below write ∂L/∂P through it, so that the tiled backward writes ∂L/∂P in fp32 or
// straight as the projections' bf16 GEMM operand (the CUDA table's bf16 path; issue 42) from
// the same fp32 arithmetic.
__device__ inline void RowStore(float x, float* dst) { *dst = x; }
__device__ inline void RowStore(float x, __nv_bfloat16* dst) { StoreHalf(x, dst); }

// cos and sin of token `pos`'s MiPE angle pos · rate (c = 1, sn = 0 when rate = 0), fp64.
__device__ inline void MipeCosSin(double rate, double pos, double* c, double* sn) {
  *c = 1;
  *sn = 0;
  if (rate != 0) {
    *c = cos(pos * rate);
    *sn = sin(pos * rate);
  }
}

// ---- Forward: spec steps 5–6 -----------------------------------------------------

// ‖x‖ of one row x [D] (D = 0: d_rt), the squares summed in fp32 in column order (as cpu::UnitRow).
template <int D, typename T = float>
__device__ inline float RowNorm(const T* x, int d_rt) {
  const int d = D > 0 ? D : d_rt;
  float sq = 0.f;
  #pragma unroll
  for (int c = 0; c < d; ++c) {
    const float v = RowValue(x[c]);
    sq += v * v;
  }
  return sqrtf(sq);
}

// Spec step 5's factor 1 / max(‖x‖, floor): a row's unit vector is x · UnitFactor(‖x‖).
__device__ inline float UnitFactor(float norm) {
  return 1.f / (norm < kScreeningUnitFloor ? kScreeningUnitFloor : norm);
}

// Spec step 6 on one row: coordinates (0, 1) of z turned by the MiPE angle φ (cos φ = c,
// sin φ = s, MipeCosSin), in fp64, in place.
__device__ inline void RotateRow(float* z, double c, double s) {
  const double z0 = z[0], z1 = z[1];
  z[0] = static_cast<float>(z0 * c - z1 * s);
  z[1] = static_cast<float>(z0 * s + z1 * c);
}

// Steps 5–6 on one q or k row: z [D] = x [D] / max(‖x‖, floor) (any memory spaces), then,
// when rotate, RotateRow by (c, s). Returns ‖x‖ (saved for the backward). D = 0: d_rt.
template <int D, typename T = float>
__device__ inline float UnitRotateRow(const T* x, float* z, bool rotate, double c, double s, int d_rt) {
  const int d = D > 0 ? D : d_rt;
  const float n = RowNorm<D>(x, d);
  const float inv = UnitFactor(n);
  #pragma unroll
  for (int i = 0; i < d; ++i) z[i] = RowValue(x[i]) * inv;
  if (rotate) RotateRow(z, c, s);
  return n;
}

// ---- Backward: spec steps 6–5 -----------------------------------------------------

// Position ROPE (kernels/screening_types.h, cpu::RopeRotateRows): the pairs (p, p + d/2) of z
// turned by sign · pos · freq[p] in fp64 (freq: [d/2] on the device; sign −1: the transpose,
// for the backward).
__device__ inline void RopeTurnRow(float* z, int d, double pos, double sign, const double* freq) {
  const int half = d / 2;
  for (int p = 0; p < half; ++p) {
    const double phi = sign * pos * freq[p];
    const double c = cos(phi), sn = sin(phi), a = z[p], b = z[p + half];
    z[p] = static_cast<float>(a * c - b * sn);
    z[p + half] = static_cast<float>(a * sn + b * c);
  }
}

// Backward of the unit norm (step 5) then the MiPE rotation (step 6) for one row
// (cpu::NormalizeRotateBackwardRow): z [d] the saved z̃ (read), norm its ‖x‖ (saved),
// dz [d] ∂L/∂z̃ (read, then overwritten: any memory space, e.g. a CTA's shared staging
// row), rotate with the angle's cos c and sin s (MipeCosSin), dx [d] = ∂L/∂x (written, each
// element once, through RowStore: DX float or __nv_bfloat16). D: the width as a constant
// (0: d_rt). ∂L/∂rate is the window pass's, pair by pair.
template <int D, typename DX = float>
__device__ inline void NormalizeRotateBackwardRow(const float* z, float norm, float* dz, bool rotate, double c,
                                                  double s, DX* dx, int d_rt) {
  const int d = D > 0 ? D : d_rt;
  float y0 = z[0], y1 = d > 1 ? z[1] : 0.f;
  if (rotate) {
    const double g0 = dz[0], g1 = dz[1];
    dz[0] = static_cast<float>(g0 * c + g1 * s);
    dz[1] = static_cast<float>(-g0 * s + g1 * c);
    y0 = static_cast<float>(double(z[0]) * c + double(z[1]) * s);  // z̄ = R(−φ) z̃
    y1 = static_cast<float>(-double(z[0]) * s + double(z[1]) * c);
  }
  const bool clamped = !(norm > kScreeningUnitFloor);
  const float inv = 1.f / (clamped ? kScreeningUnitFloor : norm);
  float dot = 0.f;
  if (!clamped) {
    dot = y0 * dz[0] + (d > 1 ? y1 * dz[1] : 0.f);
    for (int i = 2; i < d; ++i) dot += z[i] * dz[i];
  }
  RowStore((dz[0] - y0 * dot) * inv, &dx[0]);
  if (d > 1) RowStore((dz[1] - y1 * dot) * inv, &dx[1]);
  for (int i = 2; i < d; ++i) RowStore((dz[i] - z[i] * dot) * inv, &dx[i]);
}

// One token's q̃ or k̃ row finished into ∂L/∂P's d columns at dP_cols (written): the
// unit-norm and MiPE backward above, then, for position ROPE (rope_freq non-null), the
// turn back by −pos (the unit-norm backward runs in the turned frame; a rotation keeps
// dots). dz, c, s as NormalizeRotateBackwardRow's (dz overwritten). DX: dP_cols' element,
// float or __nv_bfloat16 (then D > 0 and each column is the fp32 one rounded once, RowStore).
template <int D, typename DX = float>
__device__ inline void FinishKeyOrQueryRowBackward(const float* z, float norm, float* dz, bool rotate, double c,
                                                   double s, double pos, const double* rope_freq, DX* dP_cols,
                                                   int d_rt) {
  if constexpr (std::is_same_v<DX, float>) {
    NormalizeRotateBackwardRow<D>(z, norm, dz, rotate, c, s, dP_cols, d_rt);
    if (rope_freq != nullptr) RopeTurnRow(dP_cols, D > 0 ? D : d_rt, pos, -1.0, rope_freq);
  } else {
    static_assert(D > 0, "a 16-bit ∂L/∂P row is finished at a constant width");
    if (rope_freq == nullptr) return NormalizeRotateBackwardRow<D>(z, norm, dz, rotate, c, s, dP_cols, D);
    float row[D];  // the turn reads the fp32 row back: rounded after it
    NormalizeRotateBackwardRow<D>(z, norm, dz, rotate, c, s, row, D);
    RopeTurnRow(row, D, pos, -1.0, rope_freq);
    #pragma unroll
    for (int i = 0; i < D; ++i) RowStore(row[i], &dP_cols[i]);
  }
}

// ---- Backward: spec steps 13–11 ---------------------------------------------------

// One token's output backward (output scale and gate, steps 13–12; TanhNorm, step 11), the
// arithmetic of cpu::ScreeningBackward's output part: h [D] the saved h_i, g [D] the token's
// gate columns of P (read only when gate), dU [D] ∂L/∂U_i's tile columns, scale = e^{s_O}
// (any memory spaces, read). Writes dg [D] = ∂L/∂g (when gate; any memory space; DG float or
// __nv_bfloat16, each element once through RowStore) and
// dh [D] = ∂L/∂h_i (a local array: ∂L/∂TanhNorm(h) first, then ∂L/∂h in place). Returns
// the token's part of ∂L/∂scale, Σ_c ∂L/∂U_c · TanhNorm(h)_c · gate_c in fp64 (column order).
// tanh_norm false: identity in place of TanhNorm. D: the width as a constant (0: d_rt).
template <int D, typename G = float, typename DG = float>
__device__ inline double OutputRowBackward(const float* h, const G* g, const float* dU, float scale,
                                           bool tanh_norm, bool gate, DG* dg, float* dh, int d_rt) {
  const int d = D > 0 ? D : d_rt;
  float sq = 0.f;
  #pragma unroll
  for (int c = 0; c < d; ++c) sq += h[c] * h[c];
  float f = 1.f, f_dn = 0.f;  // identity when the switch is off
  if (tanh_norm) TanhNormScale(sqrtf(sq), &f, &f_dn);
  double row_scale = 0;
  float dot = 0.f;
  #pragma unroll
  for (int c = 0; c < d; ++c) {
    float gv = 1.f, gate_dg = 0.f;  // output_gate off: no gate and no dg columns
    if (gate) GateForwardAndDerivative(RowValue(g[c]), &gv, &gate_dg);
    const float tn = h[c] * f;
    row_scale += static_cast<double>(dU[c]) * tn * gv;
    dh[c] = scale * dU[c] * gv;
    if (gate) RowStore(scale * dU[c] * tn * gate_dg, &dg[c]);
    dot += h[c] * dh[c];
  }
  #pragma unroll
  for (int c = 0; c < d; ++c) dh[c] = f * dh[c] + f_dn * dot * h[c];
  return row_scale;
}

}  // namespace multiscreen::kernels::cuda

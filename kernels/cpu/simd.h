// Helpers for the CPU kernels' hot loops: vector values of a path's width (kernels/cpu/isa.h
// says how a kernel body is compiled for each path), and exp/tanh written so that the
// compiler vectorizes them (`#pragma omp simd` loops) or runs them on those vectors.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {

// Bytes of Real as one value (GCC/Clang vector extension): 16 (SSE2), 32 (AVX2) or 64
// (AVX-512). Keep such values inside one path's function (their calling convention
// differs between targets).
template <typename Real, int Bytes>
struct VecOf;
#define MS_VEC_OF(T, N)                                  \
  template <>                                            \
  struct VecOf<T, N> {                                   \
    typedef T type __attribute__((vector_size(N)));      \
  };
MS_VEC_OF(float, 16)
MS_VEC_OF(float, 32)
MS_VEC_OF(float, 64)
MS_VEC_OF(double, 16)
MS_VEC_OF(double, 32)
MS_VEC_OF(double, 64)
MS_VEC_OF(int32_t, 16)
MS_VEC_OF(int32_t, 32)
MS_VEC_OF(int32_t, 64)
#undef MS_VEC_OF

// A Target's vector of Real (one register of its path).
template <typename Target, typename Real>
using Vec = typename VecOf<Real, Target::kVecBytes>::type;
// Lanes of a Target's vector of Real.
template <typename Target, typename Real>
inline constexpr int kLanes = Target::kVecBytes / int(sizeof(Real));

// The sum of a vector's lanes as a tree of halves down to 16 bytes, then in lane order.
// The order depends on the width, so paths differ in the last bits.
template <typename Real, int Bytes>
MS_ALWAYS_INLINE Real HorizontalSum(typename VecOf<Real, Bytes>::type v) {
  if constexpr (Bytes > 16) {
    typedef typename VecOf<Real, Bytes / 2>::type Half;
    Half lo, hi;
    std::memcpy(&lo, &v, Bytes / 2);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + Bytes / 2, Bytes / 2);
    return HorizontalSum<Real, Bytes / 2>(lo + hi);
  } else {
    Real r = v[0];
    for (int l = 1; l < Bytes / int(sizeof(Real)); ++l) r += v[l];
    return r;
  }
}
// HorizontalSum of a Target's vector.
template <typename Target, typename Real>
MS_ALWAYS_INLINE Real HorizontalSum(Vec<Target, Real> v) {
  return HorizontalSum<Real, Target::kVecBytes>(v);
}

// The core of ExpFast on an argument already inside [−87.34, 88.7] (Cephes expf:
// x = n ln2 + r, |r| ≤ ln2/2, a degree-6 polynomial for e^r, then 2^n through the
// exponent bits). F: float or a vector of floats; I: int32 of the same shape.
template <typename F, typename I>
MS_ALWAYS_INLINE F ExpCore(F xc) {
  constexpr float kMagic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const F t = xc * 1.44269504088896341f + kMagic;
  const I n = std::bit_cast<I>(t) - std::bit_cast<int32_t>(kMagic);
  const F nf = t - kMagic;
  F r = xc - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  return std::bit_cast<F>(std::bit_cast<I>(p) + (n << 23));
}

// e^x in fp32 without a library call (ExpCore); within 2 ulp of expf (1 ulp
// measured). Inputs below ln(FLT_MIN) ≈ −87.34 give 0, above 88.7 give e^88.7;
// NaN stays NaN. The fp64 overload is std::exp.
inline float ExpFast(float x) {
  const float xc = x < -87.33654f ? -87.33654f : (x > 88.7f ? 88.7f : x);
  const float e = ExpCore<float, int32_t>(xc);
  return x == x ? (x < -87.33654f ? 0.0f : e) : x;
}
inline double ExpFast(double x) { return std::exp(x); }

// ExpFast on each lane of a Target's vector (fp32: the same steps in vector registers;
// fp64: std::exp lane by lane). NaN lanes stay NaN. kInRange: the caller guarantees every
// lane is NaN or inside [−87.33, 88.7], so the clamps are skipped (a third of the work).
template <typename Target, typename Real, bool kInRange = false>
MS_ALWAYS_INLINE Vec<Target, Real> ExpFastVec(Vec<Target, Real> x) {
  typedef Vec<Target, Real> V;
  if constexpr (sizeof(Real) == 8) {
    V e;
    for (int l = 0; l < kLanes<Target, Real>; ++l) e[l] = std::exp(x[l]);
    return e;
  } else {
    typedef typename VecOf<int32_t, Target::kVecBytes>::type I;
    const V lo = V{} - 87.33654f, hi = V{} + 88.7f;
    V xc = x;
    if constexpr (!kInRange) xc = x < lo ? lo : (x > hi ? hi : x);
    const V e = ExpCore<V, I>(xc);
    if constexpr (kInRange) return x == x ? e : x;
    return x == x ? (x < lo ? V{} : e) : x;
  }
}

// tanh in fp32 (Cephes tanhf: an odd polynomial below |x| = 0.625, 1 − 2/(e^{2|x|} + 1)
// above); within 1 ulp of tanh measured. The fp64 overload is std::tanh.
inline float TanhFast(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float big = 1.0f - 2.0f / (ExpFast(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : (x < 0 ? -big : big);
}
inline double TanhFast(double x) { return std::tanh(x); }

}  // namespace multiscreen::kernels::cpu

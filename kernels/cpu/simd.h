// Helpers for the CPU kernels' hot loops: dispatch to the machine's vector width, and
// exp/tanh written so that the compiler vectorizes them (`#pragma omp simd` loops).
//
// A default build targets baseline x86-64 (SSE2), since CI machines differ. Functions
// marked MS_SIMD_CLONES are compiled three times — baseline, x86-64-v3 (AVX2 + FMA)
// and x86-64-v4 (AVX-512) — and the loader picks the best one for the CPU it runs on
// (GCC function multiversioning). With -DMULTISCREEN_NATIVE=ON the whole build uses
// -march=native instead and the clones are dropped. Results may differ in the last
// bits between machines (FMA contraction, vector reduction order); on one machine
// they are deterministic.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MULTISCREEN_NATIVE) && !defined(__CUDACC__)
#define MS_SIMD_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define MS_SIMD_CLONES
#endif

namespace multiscreen::kernels::cpu {

// 64 bytes of Real as one value (GCC/Clang vector extension): one AVX-512 register,
// or two AVX2 or four SSE registers, whichever clone runs. Keep such values inside
// one function (passing them by value across clones changes the ABI).
template <typename Real>
struct Vec64;
template <>
struct Vec64<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct Vec64<double> {
  typedef double type __attribute__((vector_size(64)));
};

// The sum of a Vec64's lanes as a tree of halves (log2 of the lanes in dependent adds).
template <typename Real>
__attribute__((always_inline)) inline Real HorizontalSum(typename Vec64<Real>::type v) {
  typedef Real V32 __attribute__((vector_size(32)));
  typedef Real V16 __attribute__((vector_size(16)));
  V32 lo, hi;
  std::memcpy(&lo, &v, 32);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + 32, 32);
  const V32 s32 = lo + hi;
  V16 a, b;
  std::memcpy(&a, &s32, 16);
  std::memcpy(&b, reinterpret_cast<const char*>(&s32) + 16, 16);
  const V16 s16 = a + b;
  Real r = s16[0];
  for (int l = 1; l < int(16 / sizeof(Real)); ++l) r += s16[l];
  return r;
}

// The core of ExpFast on an argument already inside [−87.34, 88.7] (Cephes expf:
// x = n ln2 + r, |r| ≤ ln2/2, a degree-6 polynomial for e^r, then 2^n through the
// exponent bits). F: float or a vector of floats; I: int32 of the same shape.
template <typename F, typename I>
__attribute__((always_inline)) inline F ExpCore(F xc) {
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

// ExpFast on each lane of a Vec64 (fp32: the same steps in vector registers; fp64:
// std::exp lane by lane). NaN lanes stay NaN. kInRange: the caller guarantees every
// lane is NaN or inside [−87.33, 88.7], so the clamps are skipped (a third of the work).
template <typename Real, bool kInRange = false>
__attribute__((always_inline)) inline typename Vec64<Real>::type ExpFastVec(typename Vec64<Real>::type x) {
  typedef typename Vec64<Real>::type V;
  if constexpr (sizeof(Real) == 8) {
    V e;
    for (int l = 0; l < 8; ++l) e[l] = std::exp(x[l]);
    return e;
  } else {
    typedef int32_t I __attribute__((vector_size(64)));
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

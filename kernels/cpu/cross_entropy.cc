#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {
namespace {

// Each row kernel is a body per instruction-set path (isa.h), run through IsaDispatch.

// max_v z[v] (NaNs are skipped here and surface in the sum).
template <typename Real>
struct RowMax {
  template <typename Target>
  MS_ALWAYS_INLINE static Real Run(const Real* z, int64_t V) {
    Real mx = -std::numeric_limits<Real>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) mx = z[v] > mx ? z[v] : mx;
    return mx;
  }
};

// Σ_v exp(z[v] − mx): exp in Real (fp32 exp is ample for probabilities), the sum in fp64.
template <typename Real>
struct RowSumExp {
  template <typename Target>
  MS_ALWAYS_INLINE static double Run(const Real* z, int64_t V, Real mx) {
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += static_cast<double>(ExpFast(z[v] - mx));
    return sum;
  }
};

// A numerator as RowExpSum stores it: itself (Out = Real), or its bf16 bits (Out = uint16_t).
template <typename Out, typename Real>
MS_ALWAYS_INLINE Out StoredAs(Real e) {
  if constexpr (std::is_same_v<Out, Real>) {
    return e;
  } else {
    static_assert(std::is_same_v<Out, uint16_t> && std::is_same_v<Real, float>);
    return FloatToBf16(e);
  }
}

// out[v] ← exp(z[v] − mx) (as StoredAs<Out>; out may be z itself); returns Σ_v of the
// unrounded exponentials (in fp64).
template <typename Real, typename Out>
struct RowExpSum {
  template <typename Target>
  MS_ALWAYS_INLINE static double Run(const Real* z, int64_t V, Real mx, Out* out) {
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) {
      const Real e = ExpFast(z[v] - mx);
      out[v] = StoredAs<Out>(e);
      sum += static_cast<double>(e);
    }
    return sum;
  }
};

// SoftmaxNumerators with the numerators written to out [rows, V] (row stride ld_out; out
// may be z, ld_out = ld) as StoredAs<Out>.
template <typename Real, typename Out>
void Numerators(const Real* z, int64_t ld, int64_t rows, int64_t V, double shift, const int64_t* target,
                double* lse, double* target_logit, double* row_scale, Out* out, int64_t ld_out) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const Real* zr = z + r * ld;
    const Real m = std::isnan(shift) ? IsaDispatch<RowMax<Real>>(zr, V) : static_cast<Real>(shift);
    target_logit[r] = target[r] >= 0 ? static_cast<double>(zr[target[r]]) : 0.0;
    const double sum = IsaDispatch<RowExpSum<Real, Out>>(zr, V, m, out + r * ld_out);
    lse[r] = static_cast<double>(m) + std::log(sum);
    row_scale[r] = 1.0 / sum;
  }
}

// z[v] ← exp(z[v] − l) · c.
template <typename Real>
struct RowSoftmaxScaled {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(Real* z, int64_t V, Real l, Real c) {
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) z[v] = ExpFast(z[v] - l) * c;
  }
};

}  // namespace

template <typename Real>
void SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const Real* zr = z + r * ld;
    const Real mx = IsaDispatch<RowMax<Real>>(zr, V);
    row_max[r] = mx;
    row_sum[r] = IsaDispatch<RowSumExp<Real>>(zr, V, mx);
  }
}

template <typename Real>
void CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse,
                      const int64_t* target, const Real* coef) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    Real* zr = z + r * ld;
    IsaDispatch<RowSoftmaxScaled<Real>>(zr, V, static_cast<Real>(lse[r]), coef[r]);
    if (target[r] >= 0) zr[target[r]] -= coef[r];
  }
}

template <typename Real>
void SoftmaxNumerators(Real* z, int64_t ld, int64_t rows, int64_t V, double shift, const int64_t* target,
                       double* lse, double* target_logit, double* row_scale) {
  Numerators(z, ld, rows, V, shift, target, lse, target_logit, row_scale, z, ld);
}

void SoftmaxNumeratorsBf16(const float* z, int64_t ld, int64_t rows, int64_t V, double shift, const int64_t* target,
                           double* lse, double* target_logit, double* row_scale, uint16_t* z16, int64_t ld16) {
  Numerators(z, ld, rows, V, shift, target, lse, target_logit, row_scale, z16, ld16);
}

#define MS_INSTANTIATE(Real)                                                                              \
  template void SoftmaxStats<Real>(const Real*, int64_t, int64_t, int64_t, double*, double*);             \
  template void CrossEntropyGrad<Real>(Real*, int64_t, int64_t, int64_t, const double*, const int64_t*,   \
                                       const Real*);                                                      \
  template void SoftmaxNumerators<Real>(Real*, int64_t, int64_t, int64_t, double, const int64_t*, double*, \
                                        double*, double*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen::kernels::cpu

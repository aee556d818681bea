#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>

namespace multiscreen::kernels::cpu {

template <typename Real>
void SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const Real* zr = z + r * ld;
    Real mx = -std::numeric_limits<Real>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, zr[v]);
    // exp in Real (fp32 exp is ample for probabilities), the sum in fp64.
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(zr[v] - mx);
    row_max[r] = mx;
    row_sum[r] = sum;
  }
}

template <typename Real>
void CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse,
                      const int64_t* target, const Real* coef) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    Real* zr = z + r * ld;
    const Real l = static_cast<Real>(lse[r]);
    for (int64_t v = 0; v < V; ++v) zr[v] = std::exp(zr[v] - l) * coef[r];
    if (target[r] >= 0) zr[target[r]] -= coef[r];
  }
}

template void SoftmaxStats<float>(const float*, int64_t, int64_t, int64_t, double*, double*);
template void SoftmaxStats<double>(const double*, int64_t, int64_t, int64_t, double*, double*);
template void CrossEntropyGrad<float>(float*, int64_t, int64_t, int64_t, const double*, const int64_t*, const float*);
template void CrossEntropyGrad<double>(double*, int64_t, int64_t, int64_t, const double*, const int64_t*, const double*);

}  // namespace multiscreen::kernels::cpu

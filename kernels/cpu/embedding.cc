#include "kernels/cpu/embedding.h"

#include <algorithm>

namespace multiscreen::kernels::cpu {

template <typename Real>
void EmbeddingForward(const Real* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids,
                      int64_t count, Real scale, Real* out) {
  for (int64_t n = 0; n < count; ++n) {
    Real* row = out + n * d;
    const int64_t id = ids[n];
    if (id < v0 || id >= v1) {
      std::fill(row, row + d, Real(0));
      continue;
    }
    const Real* src = table + (id - v0) * d;
    for (int64_t c = 0; c < d; ++c) row[c] = scale * src[c];
  }
}

template <typename Real>
void EmbeddingBackward(const Real* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1,
                       int64_t d, Real scale, Real* dtable) {
  for (int64_t n = 0; n < count; ++n) {
    const int64_t id = ids[n];
    if (id < v0 || id >= v1) continue;
    Real* dst = dtable + (id - v0) * d;
    const Real* src = dout + n * d;
    for (int64_t c = 0; c < d; ++c) dst[c] += scale * src[c];
  }
}

template void EmbeddingForward<float>(const float*, int64_t, int64_t, int64_t, const int32_t*, int64_t, float, float*);
template void EmbeddingForward<double>(const double*, int64_t, int64_t, int64_t, const int32_t*, int64_t, double, double*);
template void EmbeddingBackward<float>(const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float, float*);
template void EmbeddingBackward<double>(const double*, const int32_t*, int64_t, int64_t, int64_t, int64_t, double, double*);

}  // namespace multiscreen::kernels::cpu

#include "kernels/cpu/argmax.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
int64_t Argmax(const Real* x, int64_t n) {
  if (n <= 0) return -1;
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (ArgmaxBefore(x[i], i, x[best], best)) best = i;
  }
  return best;
}

template int64_t Argmax<float>(const float*, int64_t);
template int64_t Argmax<double>(const double*, int64_t);

}  // namespace multiscreen::kernels::cpu

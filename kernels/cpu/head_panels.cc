#include "kernels/cpu/head_panels.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {
namespace {

template <typename Real>
using Vec = typename Vec64<Real>::type;
template <typename Real>
inline constexpr int kLanes = 64 / sizeof(Real);
// Vectors per panel row: 2 for fp32, 4 for fp64.
template <typename Real>
inline constexpr int kPanelVecs = kHeadPanel / kLanes<Real>;

template <typename Real>
__attribute__((always_inline)) inline Vec<Real> Load(const Real* p) {
  Vec<Real> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename Real>
__attribute__((always_inline)) inline void Store(Real* p, Vec<Real> v) {
  std::memcpy(p, &v, sizeof(v));
}

std::atomic<bool> force_narrow{false};

// 32 vector registers (AVX-512): tiles of 16 accumulators; otherwise a quarter of that.
inline bool WideVectors() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool wide = __builtin_cpu_supports("avx512f");
  return wide && !force_narrow.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// ---- HeadNumerators: MR rows × one panel, accumulated over d_E --------------------------
template <typename Real, int MR>
__attribute__((always_inline)) inline void NumeratorsTile(const Real* y, int64_t d_e, const Real* panel, Real scale,
                                                          Real shift, const Real* keep, Real* z, double* row_sum) {
  constexpr int NV = kPanelVecs<Real>;
  Vec<Real> acc[MR][NV] = {};
  for (int64_t k = 0; k < d_e; ++k) {
    Vec<Real> b[NV];
    for (int c = 0; c < NV; ++c) b[c] = Load(panel + k * kHeadPanel + c * kLanes<Real>);
    for (int i = 0; i < MR; ++i) {
      const Real a = y[i * d_e + k];
      for (int c = 0; c < NV; ++c) acc[i][c] += a * b[c];
    }
  }
  for (int i = 0; i < MR; ++i) {
    Vec<Real> sum = {};
    for (int c = 0; c < NV; ++c) {
      Vec<Real> e = ExpFastVec<Real, true>(acc[i][c] * scale - shift);  // in [−2.01 · shift, 0]
      if (keep != nullptr) e *= Load(keep + c * kLanes<Real>);  // columns past V
      Store(z + i * kHeadPanel + c * kLanes<Real>, e);
      sum += e;
    }
    row_sum[i] += static_cast<double>(HorizontalSum<Real>(sum));
  }
}

template <typename Real, int MR>
__attribute__((always_inline)) inline void Numerators(const Real* y, int64_t rows, int64_t d_e, const Real* panels,
                                                      int64_t p0, int64_t p1, int64_t V, Real scale, Real shift,
                                                      Real* z_p, double* row_sum) {
  Real keep[kHeadPanel];
  for (int64_t p = p0; p < p1; ++p) {
    const Real* panel = panels + p * d_e * kHeadPanel;
    Real* z = z_p + (p - p0) * rows * kHeadPanel;
    const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
    for (int64_t c = 0; c < kHeadPanel; ++c) keep[c] = c < valid ? Real(1) : Real(0);
    const Real* mask = valid < kHeadPanel ? keep : nullptr;
    int64_t r = 0;
    for (; r + MR <= rows; r += MR) {
      NumeratorsTile<Real, MR>(y + r * d_e, d_e, panel, scale, shift, mask, z + r * kHeadPanel, row_sum + r);
    }
    for (; r < rows; ++r) {
      NumeratorsTile<Real, 1>(y + r * d_e, d_e, panel, scale, shift, mask, z + r * kHeadPanel, row_sum + r);
    }
  }
}

// ---- HeadNumeratorsEBar: MR rows × NJ vectors of d_E, accumulated over the columns ----
template <typename Real, int MR, int NJ>
__attribute__((always_inline)) inline void EBarTile(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar,
                                                    int64_t p0, int64_t p1, int64_t V, int64_t j0, Real* dy) {
  Vec<Real> acc[MR][NJ] = {};
  for (int64_t p = p0; p < p1; ++p) {
    const Real* z = z_p + (p - p0) * rows * kHeadPanel;
    const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
    const Real* e = e_bar + p * kHeadPanel * d_e + j0;
    for (int64_t c = 0; c < valid; ++c) {
      Vec<Real> b[NJ];
      for (int j = 0; j < NJ; ++j) b[j] = Load(e + c * d_e + j * kLanes<Real>);
      for (int i = 0; i < MR; ++i) {
        const Real a = z[i * kHeadPanel + c];
        for (int j = 0; j < NJ; ++j) acc[i][j] += a * b[j];
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NJ; ++j) Store(dy + i * d_e + j0 + j * kLanes<Real>, acc[i][j]);
  }
}

template <typename Real, int MR, int NJ>
__attribute__((always_inline)) inline void NumeratorsEBar(const Real* z_p, int64_t rows, int64_t d_e,
                                                          const Real* e_bar, int64_t p0, int64_t p1, int64_t V,
                                                          Real* dy) {
  for (int64_t j0 = 0; j0 < d_e; j0 += NJ * kLanes<Real>) {
    int64_t r = 0;
    for (; r + MR <= rows; r += MR) {
      EBarTile<Real, MR, NJ>(z_p + r * kHeadPanel, rows, d_e, e_bar, p0, p1, V, j0, dy + r * d_e);
    }
    for (; r < rows; ++r) EBarTile<Real, 1, NJ>(z_p + r * kHeadPanel, rows, d_e, e_bar, p0, p1, V, j0, dy + r * d_e);
  }
}

// ---- HeadPanelsGradAdd: MJ of d_E's columns × one panel, accumulated over the rows ----
template <typename Real, int MJ>
__attribute__((always_inline)) inline void GradAdd(const Real* y_s, int64_t rows, int64_t d_e, const Real* z_p,
                                                   int64_t p0, int64_t p1, Real* d_panels) {
  constexpr int NV = kPanelVecs<Real>;
  for (int64_t p = p0; p < p1; ++p) {
    const Real* z = z_p + (p - p0) * rows * kHeadPanel;
    for (int64_t j0 = 0; j0 < d_e; j0 += MJ) {
      Real* out = d_panels + (p * d_e + j0) * kHeadPanel;
      Vec<Real> acc[MJ][NV];
      for (int i = 0; i < MJ; ++i) {
        for (int c = 0; c < NV; ++c) acc[i][c] = Load(out + i * kHeadPanel + c * kLanes<Real>);
      }
      for (int64_t r = 0; r < rows; ++r) {
        Vec<Real> b[NV];
        for (int c = 0; c < NV; ++c) b[c] = Load(z + r * kHeadPanel + c * kLanes<Real>);
        for (int i = 0; i < MJ; ++i) {
          const Real a = y_s[r * d_e + j0 + i];
          for (int c = 0; c < NV; ++c) acc[i][c] += a * b[c];
        }
      }
      for (int i = 0; i < MJ; ++i) {
        for (int c = 0; c < NV; ++c) Store(out + i * kHeadPanel + c * kLanes<Real>, acc[i][c]);
      }
    }
  }
}

}  // namespace

void HeadPanelsForceNarrowTiles(bool narrow) { force_narrow.store(narrow); }

template <typename Real>
bool HeadPanelsSupport(int64_t d_e) {
  return d_e > 0 && d_e % kLanes<Real> == 0;
}

template <typename Real>
void PackHeadPanels(const Real* e_bar, int64_t V, int64_t d_e, Real* panels) {
  const int64_t np = HeadPanelCount(V);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < np; ++p) {
    Real* panel = panels + p * d_e * kHeadPanel;
    const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
    for (int64_t j = 0; j < d_e; ++j) {
      for (int64_t c = 0; c < kHeadPanel; ++c) {
        panel[j * kHeadPanel + c] = c < valid ? e_bar[(p * kHeadPanel + c) * d_e + j] : Real(0);
      }
    }
  }
}

template <typename Real>
MS_SIMD_CLONES void HeadNumerators(const Real* y, int64_t rows, int64_t d_e, const Real* panels, int64_t p0,
                                   int64_t p1, int64_t V, Real scale, Real shift, Real* z_p, double* row_sum) {
  constexpr int NV = kPanelVecs<Real>;
  if (WideVectors()) {
    Numerators<Real, 16 / NV>(y, rows, d_e, panels, p0, p1, V, scale, shift, z_p, row_sum);
  } else {
    Numerators<Real, 4 / NV>(y, rows, d_e, panels, p0, p1, V, scale, shift, z_p, row_sum);
  }
}

template <typename Real>
MS_SIMD_CLONES void HeadNumeratorsEBar(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0,
                                       int64_t p1, int64_t V, Real* dy) {
  const int64_t vecs = d_e / kLanes<Real>;
  if (WideVectors() && vecs % 4 == 0) {
    NumeratorsEBar<Real, 6, 4>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
  } else if (vecs % 2 == 0) {
    NumeratorsEBar<Real, 2, 2>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
  } else {
    NumeratorsEBar<Real, 2, 1>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
  }
}

template <typename Real>
MS_SIMD_CLONES void HeadPanelsGradAdd(const Real* y_s, int64_t rows, int64_t d_e, const Real* z_p, int64_t p0,
                                      int64_t p1, Real* d_panels) {
  constexpr int NV = kPanelVecs<Real>;
  if (WideVectors()) {
    GradAdd<Real, 32 / NV>(y_s, rows, d_e, z_p, p0, p1, d_panels);
  } else {
    GradAdd<Real, 8 / NV>(y_s, rows, d_e, z_p, p0, p1, d_panels);
  }
}

template <typename Real>
void UnpackHeadPanelsAdd(Real* d_panels, int64_t V, int64_t d_e, Real* d_e_bar) {
  const int64_t np = HeadPanelCount(V);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < np; ++p) {
    Real* panel = d_panels + p * d_e * kHeadPanel;
    const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
    for (int64_t c = 0; c < valid; ++c) {
      Real* row = d_e_bar + (p * kHeadPanel + c) * d_e;
      for (int64_t j = 0; j < d_e; ++j) row[j] += panel[j * kHeadPanel + c];
    }
    std::fill(panel, panel + d_e * kHeadPanel, Real(0));
  }
}

#define MS_INSTANTIATE(Real)                                                                                   \
  template bool HeadPanelsSupport<Real>(int64_t);                                                              \
  template void PackHeadPanels<Real>(const Real*, int64_t, int64_t, Real*);                                    \
  template void HeadNumerators<Real>(const Real*, int64_t, int64_t, const Real*, int64_t, int64_t, int64_t, Real, \
                                     Real, Real*, double*);                                                    \
  template void HeadNumeratorsEBar<Real>(const Real*, int64_t, int64_t, const Real*, int64_t, int64_t, int64_t,  \
                                         Real*);                                                               \
  template void HeadPanelsGradAdd<Real>(const Real*, int64_t, int64_t, const Real*, int64_t, int64_t, Real*);  \
  template void UnpackHeadPanelsAdd<Real>(Real*, int64_t, int64_t, Real*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen::kernels::cpu

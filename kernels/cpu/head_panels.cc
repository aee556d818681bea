#include "kernels/cpu/head_panels.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {
namespace {

// Vectors per panel row of a Target: 2 for fp32 on AVX-512, 4 on AVX2, 8 on SSE2.
template <typename Target, typename Real>
inline constexpr int kPanelVecs = kHeadPanel / kLanes<Target, Real>;

template <typename Target, typename Real>
MS_ALWAYS_INLINE Vec<Target, Real> Load(const Real* p) {
  Vec<Target, Real> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename Target, typename Real>
MS_ALWAYS_INLINE void Store(Real* p, Vec<Target, Real> v) {
  std::memcpy(p, &v, sizeof(v));
}

// Register tiles per target, in vectors of the target (R registers): 12 accumulators where
// R = 16 (AVX2, SSE2: the 6 × 2 shape of a Haswell SGEMM kernel, leaving registers for
// the loads and a broadcast), 16 to 32 where R = 32 (AVX-512, measured best:
// docs/performance.md). Each kernel takes a tile of CV vectors of a panel's 32 columns.
//   HeadNumerators      kNumRows rows × kCols vectors, accumulated over d_E;
//   HeadNumeratorsEBar  kEBarRows rows × kEBarVecs vectors of d_E, over the columns;
//   HeadPanelsGradAdd   kGradCols of d_E's columns × kCols vectors, over the rows.
template <typename Target, typename Real>
struct Tiles {
  static constexpr bool kWide = Target::kVecRegs >= 32;
  static constexpr int kCols = 2;
  static_assert(kPanelVecs<Target, Real> % kCols == 0);
  static constexpr int kNumRows = kWide ? 8 : 6;
  static constexpr int kEBarRows = 6;
  static constexpr int kEBarVecs = kWide ? 4 : 2;
  static constexpr int kGradCols = kWide ? 16 : 6;
};

// ---- HeadNumerators: MR rows × CV vectors of one panel, accumulated over d_E ------------
template <typename Target, typename Real, int MR, int CV>
MS_ALWAYS_INLINE void NumeratorsTile(const Real* y, int64_t d_e, const Real* panel, Real scale, Real shift,
                                     const Real* keep, Real* z, double* row_sum) {
  constexpr int L = kLanes<Target, Real>;
  Vec<Target, Real> acc[MR][CV] = {};
  for (int64_t k = 0; k < d_e; ++k) {
    Vec<Target, Real> b[CV];
    for (int c = 0; c < CV; ++c) b[c] = Load<Target>(panel + k * kHeadPanel + c * L);
    for (int i = 0; i < MR; ++i) {
      const Real a = y[i * d_e + k];
      for (int c = 0; c < CV; ++c) acc[i][c] += a * b[c];
    }
  }
  for (int i = 0; i < MR; ++i) {
    Vec<Target, Real> sum = {};
    for (int c = 0; c < CV; ++c) {
      // In [−2.01 · shift, 0] (HeadNumerators' contract).
      Vec<Target, Real> e = ExpFastVec<Target, Real, true>(acc[i][c] * scale - shift);
      if (keep != nullptr) e *= Load<Target>(keep + c * L);  // columns past V
      Store<Target>(z + i * kHeadPanel + c * L, e);
      sum += e;
    }
    row_sum[i] += static_cast<double>(HorizontalSum<Target, Real>(sum));
  }
}

template <typename Real>
struct NumeratorsKernel {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Real* y, int64_t rows, int64_t d_e, const Real* panels, int64_t p0,
                                   int64_t p1, int64_t V, Real scale, Real shift, Real* z_p, double* row_sum) {
    constexpr int MR = Tiles<Target, Real>::kNumRows, CV = Tiles<Target, Real>::kCols;
    constexpr int L = kLanes<Target, Real>;
    alignas(64) Real keep[kHeadPanel];
    for (int64_t p = p0; p < p1; ++p) {
      const Real* panel = panels + p * d_e * kHeadPanel;
      Real* z = z_p + (p - p0) * rows * kHeadPanel;
      const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
      for (int64_t c = 0; c < kHeadPanel; ++c) keep[c] = c < valid ? Real(1) : Real(0);
      for (int64_t c0 = 0; c0 < kHeadPanel; c0 += CV * L) {
        const Real* mask = valid < kHeadPanel ? keep + c0 : nullptr;
        int64_t r = 0;
        for (; r + MR <= rows; r += MR) {
          NumeratorsTile<Target, Real, MR, CV>(y + r * d_e, d_e, panel + c0, scale, shift, mask,
                                               z + r * kHeadPanel + c0, row_sum + r);
        }
        for (; r < rows; ++r) {
          NumeratorsTile<Target, Real, 1, CV>(y + r * d_e, d_e, panel + c0, scale, shift, mask,
                                              z + r * kHeadPanel + c0, row_sum + r);
        }
      }
    }
  }
};

// ---- HeadNumeratorsEBar: MR rows × NJ vectors of d_E, accumulated over the columns ----
template <typename Target, typename Real, int MR, int NJ>
MS_ALWAYS_INLINE void EBarTile(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0,
                               int64_t p1, int64_t V, int64_t j0, Real* dy) {
  constexpr int L = kLanes<Target, Real>;
  Vec<Target, Real> acc[MR][NJ] = {};
  for (int64_t p = p0; p < p1; ++p) {
    const Real* z = z_p + (p - p0) * rows * kHeadPanel;
    const int64_t valid = std::min(kHeadPanel, V - p * kHeadPanel);
    const Real* e = e_bar + p * kHeadPanel * d_e + j0;
    for (int64_t c = 0; c < valid; ++c) {
      Vec<Target, Real> b[NJ];
      for (int j = 0; j < NJ; ++j) b[j] = Load<Target>(e + c * d_e + j * L);
      for (int i = 0; i < MR; ++i) {
        const Real a = z[i * kHeadPanel + c];
        for (int j = 0; j < NJ; ++j) acc[i][j] += a * b[j];
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NJ; ++j) Store<Target>(dy + i * d_e + j0 + j * L, acc[i][j]);
  }
}

template <typename Target, typename Real, int MR, int NJ>
MS_ALWAYS_INLINE void NumeratorsEBar(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0,
                                     int64_t p1, int64_t V, Real* dy) {
  for (int64_t j0 = 0; j0 < d_e; j0 += NJ * kLanes<Target, Real>) {
    int64_t r = 0;
    for (; r + MR <= rows; r += MR) {
      EBarTile<Target, Real, MR, NJ>(z_p + r * kHeadPanel, rows, d_e, e_bar, p0, p1, V, j0, dy + r * d_e);
    }
    for (; r < rows; ++r) {
      EBarTile<Target, Real, 1, NJ>(z_p + r * kHeadPanel, rows, d_e, e_bar, p0, p1, V, j0, dy + r * d_e);
    }
  }
}

template <typename Real>
struct NumeratorsEBarKernel {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0,
                                   int64_t p1, int64_t V, Real* dy) {
    using T = Tiles<Target, Real>;
    const int64_t vecs = d_e / kLanes<Target, Real>;
    if (vecs % T::kEBarVecs == 0) {
      NumeratorsEBar<Target, Real, T::kEBarRows, T::kEBarVecs>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
    } else if (vecs % 2 == 0) {
      NumeratorsEBar<Target, Real, T::kEBarRows, 2>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
    } else {
      NumeratorsEBar<Target, Real, T::kEBarRows, 1>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
    }
  }
};

// ---- HeadPanelsGradAdd: MJ of d_E's columns × CV vectors of a panel, over the rows ----
template <typename Target, typename Real, int MJ, int CV>
MS_ALWAYS_INLINE void GradAddTile(const Real* y_s, int64_t rows, int64_t d_e, const Real* z, int64_t j0,
                                  Real* out) {
  constexpr int L = kLanes<Target, Real>;
  Vec<Target, Real> acc[MJ][CV];
  for (int i = 0; i < MJ; ++i) {
    for (int c = 0; c < CV; ++c) acc[i][c] = Load<Target>(out + i * kHeadPanel + c * L);
  }
  for (int64_t r = 0; r < rows; ++r) {
    Vec<Target, Real> b[CV];
    for (int c = 0; c < CV; ++c) b[c] = Load<Target>(z + r * kHeadPanel + c * L);
    for (int i = 0; i < MJ; ++i) {
      const Real a = y_s[r * d_e + j0 + i];
      for (int c = 0; c < CV; ++c) acc[i][c] += a * b[c];
    }
  }
  for (int i = 0; i < MJ; ++i) {
    for (int c = 0; c < CV; ++c) Store<Target>(out + i * kHeadPanel + c * L, acc[i][c]);
  }
}

template <typename Real>
struct GradAddKernel {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Real* y_s, int64_t rows, int64_t d_e, const Real* z_p, int64_t p0,
                                   int64_t p1, Real* d_panels) {
    constexpr int MJ = Tiles<Target, Real>::kGradCols, CV = Tiles<Target, Real>::kCols;
    constexpr int L = kLanes<Target, Real>;
    for (int64_t p = p0; p < p1; ++p) {
      const Real* z = z_p + (p - p0) * rows * kHeadPanel;
      for (int64_t c0 = 0; c0 < kHeadPanel; c0 += CV * L) {
        Real* out = d_panels + p * d_e * kHeadPanel + c0;
        int64_t j0 = 0;
        for (; j0 + MJ <= d_e; j0 += MJ) {
          GradAddTile<Target, Real, MJ, CV>(y_s, rows, d_e, z + c0, j0, out + j0 * kHeadPanel);
        }
        for (; j0 + 2 <= d_e; j0 += 2) {
          GradAddTile<Target, Real, 2, CV>(y_s, rows, d_e, z + c0, j0, out + j0 * kHeadPanel);
        }
        for (; j0 < d_e; ++j0) GradAddTile<Target, Real, 1, CV>(y_s, rows, d_e, z + c0, j0, out + j0 * kHeadPanel);
      }
    }
  }
};

}  // namespace

template <typename Real>
bool HeadPanelsSupport(int64_t d_e) {
  return d_e > 0 && d_e % (64 / int64_t(sizeof(Real))) == 0;
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
void HeadNumerators(const Real* y, int64_t rows, int64_t d_e, const Real* panels, int64_t p0, int64_t p1, int64_t V,
                    Real scale, Real shift, Real* z_p, double* row_sum) {
  IsaDispatch<NumeratorsKernel<Real>>(y, rows, d_e, panels, p0, p1, V, scale, shift, z_p, row_sum);
}

template <typename Real>
void HeadNumeratorsEBar(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0, int64_t p1,
                        int64_t V, Real* dy) {
  IsaDispatch<NumeratorsEBarKernel<Real>>(z_p, rows, d_e, e_bar, p0, p1, V, dy);
}

template <typename Real>
void HeadPanelsGradAdd(const Real* y_s, int64_t rows, int64_t d_e, const Real* z_p, int64_t p0, int64_t p1,
                       Real* d_panels) {
  IsaDispatch<GradAddKernel<Real>>(y_s, rows, d_e, z_p, p0, p1, d_panels);
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

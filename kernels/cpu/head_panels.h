// The vocabulary head's three contractions for a head whose softmax shift is known before
// the logits (spec steps 14–15 with PLNorm: |z| ≤ e^{s_F}), written for d_E of a few
// dozen and a vocabulary of tens of thousands, where a general GEMM spends its time
// packing and zeroing. Ē is packed once per step into panels of kHeadPanel vocabulary
// columns, Ē_p [⌈V/32⌉][d_E][32]; the softmax numerators of a chunk of rows are kept in
// the same panels, z_p [panel][rows][32], so that each kernel streams them contiguously:
//   HeadNumerators      z = exp(e^{s_F} · y Ēᵀ − shift), and the row sums   (forward)
//   HeadNumeratorsEBar  z Ē over a range of panels                          (→ ∂L/∂y)
//   HeadPanelsGradAdd   ∂Ē_p += y_sᵀ z                                      (→ ∂L/∂Ē)
// Each is serial: the caller splits panels among threads. Each runs the active
// instruction-set path (kernels/cpu/isa.h), with register tiles sized for its vectors.
// Model code reaches these through Multiscreen::HeadLoss.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// Vocabulary columns per panel.
inline constexpr int64_t kHeadPanel = 32;

// Panels covering V columns.
inline int64_t HeadPanelCount(int64_t V) { return (V + kHeadPanel - 1) / kHeadPanel; }

// Whether the panel kernels take this d_E: a whole number of 64-byte vectors of Real
// (16 floats, 8 doubles), on every path alike. Other widths use the general GEMM path.
template <typename Real>
bool HeadPanelsSupport(int64_t d_e);

// Packs Ē [V, d_E] (row-major) into panels [HeadPanelCount(V)][d_E][32]; the columns past
// V in the last panel are zero. Threaded over panels.
template <typename Real>
void PackHeadPanels(const Real* e_bar, int64_t V, int64_t d_e, Real* panels);

// Softmax numerators of rows [0, rows) on panels [p0, p1):
//   z_p[p − p0][r][c] = exp(scale · y_r · Ē_v − shift),  v = 32p + c  (0 where v ≥ V),
// and row_sum[r] += Σ of row r's numerators over these panels (fp64, in panel order).
//   y: [rows, d_E];  panels: PackHeadPanels' output;  z_p: [(p1 − p0)][rows][32] written.
// The caller guarantees |scale · y_r · Ē_v| ≤ shift < 43 (PLNorm: |z| ≤ scale, and the
// shift 1.01 · scale below 39), so that every exponent lies in [−87, 0].
template <typename Real>
void HeadNumerators(const Real* y, int64_t rows, int64_t d_e, const Real* panels, int64_t p0, int64_t p1,
                    int64_t V, Real scale, Real shift, Real* z_p, double* row_sum);

// dy[r, :] = Σ_{v in panels [p0, p1), v < V} z_p[p − p0][r][v − 32p] · Ē[v, :]
// (written, not accumulated).   z_p: as HeadNumerators wrote it;  e_bar: Ē [V, d_E];
// dy: [rows, d_E].
template <typename Real>
void HeadNumeratorsEBar(const Real* z_p, int64_t rows, int64_t d_e, const Real* e_bar, int64_t p0, int64_t p1,
                        int64_t V, Real* dy);

// d_panels[p][j][c] += Σ_r y_s[r, j] · z_p[p − p0][r][c] for p in [p0, p1): the gradient
// of Ē in panel layout (UnpackHeadPanelsAdd moves it into [V, d_E]).
//   y_s: [rows, d_E] (the row coefficients folded in);  d_panels: as PackHeadPanels' output.
template <typename Real>
void HeadPanelsGradAdd(const Real* y_s, int64_t rows, int64_t d_e, const Real* z_p, int64_t p0, int64_t p1,
                       Real* d_panels);

// d_e_bar[v, j] += d_panels[v / 32][j][v % 32] for v < V, and zeroes d_panels (all of it,
// padding included), so that it is ready for the next step. Threaded over panels.
template <typename Real>
void UnpackHeadPanelsAdd(Real* d_panels, int64_t V, int64_t d_e, Real* d_e_bar);

}  // namespace multiscreen::kernels::cpu

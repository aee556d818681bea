#include "kernels/cpu/head_loss.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/head_panels.h"

namespace multiscreen::kernels::cpu {

namespace {

// Vocabulary entries per product of the backward contractions (ZTimesEBar, AddZtTimesYs).
constexpr int64_t kBackwardVocabBlock = 4096;
// d_E's columns per thread's range of the targets' one-hot part of ∂Ē (one 64-byte line of fp32).
constexpr int64_t kOneHotColumns = 16;

// The head's two backward contractions over the vocabulary as products over blocks of
// kBackwardVocabBlock entries, in order: `gemm` is Gemm<Real> or GemmBf16 (z, Ē and y_s then
// bf16 bits). As single products over V = 50,257 they ran at 46–52 % (dy, k = V) and 63–66 %
// (∂Ēᵀ, n = V) of the avx512 fp32 peak on oneDNN; in blocks of 4096, 78–81 % and 78 %
// (tests/kernels/head_bench.cc, Ψ = 16's head, 2 threads, AMD EPYC Zen 5). OpenBLAS (the
// avx2 path) runs both at 83–90 % of the avx2 peak either way. ∂Ē's product writes ∂Ē's
// rows of the block directly (m = the block, A = z transposed), so no ∂Ēᵀ buffer is zeroed,
// filled and moved (docs/performance.md, "∂Ē written directly").
//   ZTimesEBar:  dy [rc, d_e] = z [rc, V] · Ē [V, d_e]      (row strides V, d_e; dy written)
//   AddZtTimesYs: ∂Ē [V, d_e] += z [rc, V]ᵀ · y_s [rc, d_e]  (row strides V, d_e; ∂Ē added to)
template <typename T, typename Real, typename GemmFn>
void ZTimesEBar(GemmFn gemm, int64_t rc, int64_t V, int64_t d_e, const T* z, const T* e_bar, Real* dy) {
  for (int64_t v0 = 0; v0 < V; v0 += kBackwardVocabBlock) {
    gemm(false, false, rc, d_e, std::min(kBackwardVocabBlock, V - v0), Real(1), z + v0, V, e_bar + v0 * d_e, d_e,
         Real(v0 == 0 ? 0 : 1), dy, d_e);
  }
}
template <typename T, typename Real, typename GemmFn>
void AddZtTimesYs(GemmFn gemm, int64_t rc, int64_t V, int64_t d_e, const T* z, const T* y_s, Real* d_e_bar) {
  for (int64_t v0 = 0; v0 < V; v0 += kBackwardVocabBlock) {
    gemm(true, false, std::min(kBackwardVocabBlock, V - v0), d_e, rc, Real(1), z + v0, V, y_s, d_e, Real(1),
         d_e_bar + v0 * d_e, d_e);
  }
}

}  // namespace

template <typename Real>
bool HeadPanelsServe(HeadPath path, int64_t d_e) {
  return path == HeadPath::kPanels && HeadPanelsSupport<Real>(d_e);
}
template bool HeadPanelsServe<float>(HeadPath, int64_t);
template bool HeadPanelsServe<double>(HeadPath, int64_t);

template <typename Real>
void FusedHead<Real>::Prepare(const Real* e_bar, int64_t vocab, int64_t d_e) {
  // A bf16 head runs whole rows (Run): no panels to pack.
  packed_ = PanelsAllowed(d_e) && !(std::is_same_v<Real, float> && options_.precision == Precision::kBf16);
  if (!packed_) return;
  e_bar_panels_.resize(HeadPanelCount(vocab) * d_e * kHeadPanel);
  PackHeadPanels(e_bar, vocab, d_e, e_bar_panels_.data());
}

template <typename Real>
void FusedHead<Real>::Run(const HeadLossArgs<Real>& a) {
  const int64_t n = a.rows, V = a.vocab, dE = a.d_e;
  // Under kBf16 whole rows, the products on bf16 operands: Ē's bf16 copy where they run on
  // the CPU's bf16 dot products, else fp32 products of the operands rounded to bf16.
  const bool bf16 = std::is_same_v<Real, float> && a.precision == Precision::kBf16;
  const uint16_t* e16 = nullptr;
  if (bf16 && a.e_bar_packed != nullptr && a.e_bar_packed->half.size() == V * dE && Bf16GemmAvailable()) {
    e16 = a.e_bar_packed->half.data();
  }
  const bool panels = !bf16 && !std::isnan(a.shift) && packed_ && PanelsAllowed(dE);
  const int64_t chunk = std::min(std::max<int64_t>(1, options_.head_chunk_rows), n);
  z_.resize(chunk * (panels ? HeadPanelCount(V) * kHeadPanel : V));
  // ∂Ē is gathered in Ē's panels, in a buffer that is all zeros between calls, and moved
  // into d_e_bar at the end; on whole rows it is added to d_e_bar directly.
  if (a.dy != nullptr && panels) d_e_bar_panels_.resize(e_bar_panels_.size());
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rc = std::min(chunk, n - r0);
    if (a.dy != nullptr) {
      FusedChunk(a, r0, rc, panels, bf16, e16);
    } else if (panels) {  // the loss alone
      PanelSoftmax(a, r0, rc, nullptr);
    } else {  // the loss alone, its statistics made exactly as FusedChunk makes them (same shift)
      Real* z = z_.data();
      row_scale_.resize(rc);
      Logits(a, r0, rc, e16, z);
      SoftmaxNumerators(z, V, rc, V, a.shift, a.target + r0, a.lse + r0, a.target_logit + r0, row_scale_.data());
    }
  }
  if (a.dy != nullptr && panels) UnpackHeadPanelsAdd(d_e_bar_panels_.data(), V, dE, a.d_e_bar);
}

template <typename Real>
void FusedHead<Real>::Logits(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, const uint16_t* e16, Real* z) {
  const int64_t dE = a.d_e, V = a.vocab;
  if constexpr (std::is_same_v<Real, float>) {
    if (e16 != nullptr) {
      y16_.resize(rc * dE);
      ToBf16(a.y + r0 * dE, rc * dE, y16_.data(), nullptr);
      return GemmBf16(false, true, rc, V, dE, a.scale, y16_.data(), dE, e16, dE, 0, z, V);
    }
  }
  Gemm<Real>(false, true, rc, V, dE, a.scale, a.y + r0 * dE, dE, a.e_bar, dE, 0, z, V);
}

template <typename Real>
void FusedHead<Real>::FusedChunk(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, bool panels, bool bf16,
                                 const uint16_t* e16) {
  // The softmax's numerators z ← exp(z − m) replace the logits; the softmax's 1/Σ_v and
  // the loss's coefficient c are folded into the backward contractions' small operands,
  // and the targets' one-hot part of ∂L/∂z = c (softmax − onehot) is added apart:
  //   dĒ += e^{s_F} (c/Σ ⊙ y)ᵀ z − one-hot,   dy = c/Σ ⊙ e^{s_F} z Ē − one-hot.
  const int64_t dE = a.d_e, V = a.vocab;
  const int64_t* target = a.target + r0;
  const Real* y = a.y + r0 * dE;
  const Real* e_bar = a.e_bar;
  const Real scale = a.scale;
  Real* z = z_.data();
  Real* dy = a.dy + r0 * dE;
  row_scale_.resize(rc);
  y_scaled_.resize(rc * dE);
  const int64_t np = HeadPanelCount(V);
  if (!panels) {
    // The logits whole (GEMM), then the softmax with the fixed shift or each row's max.
    Logits(a, r0, rc, e16, z);
    if constexpr (std::is_same_v<Real, float>) {
      if (e16 != nullptr) {  // the numerators in bf16 (made in the exp pass), read by both backward products
        z16_.resize(rc * V);
        SoftmaxNumeratorsBf16(z, V, rc, V, a.shift, target, a.lse + r0, a.target_logit + r0, row_scale_.data(),
                              z16_.data(), V);
        ZTimesEBar(GemmBf16, rc, V, dE, z16_.data(), e16, dy);
      }
    }
    if (e16 == nullptr) {
      SoftmaxNumerators(z, V, rc, V, a.shift, target, a.lse + r0, a.target_logit + r0, row_scale_.data());
      if constexpr (std::is_same_v<Real, float>) {
        if (bf16) RoundToBf16(z, rc * V);
      }
      ZTimesEBar(Gemm<Real>, rc, V, dE, z, e_bar, dy);
    }
  } else {
    PanelSoftmax(a, r0, rc, dy);
  }
  // c e^{s_F}/Σ_r, then the one-hot part: each row on its own, so the threads take rows.
  const Real c_target = scale * a.coef;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rc; ++r) {
    const Real c = static_cast<Real>(double(scale) * double(a.coef) * row_scale_[r]);
    for (int64_t j = 0; j < dE; ++j) {
      y_scaled_[r * dE + j] = c * y[r * dE + j];
      dy[r * dE + j] *= c;
    }
    if (target[r] < 0) continue;
    const Real* e_t = e_bar + target[r] * dE;
    for (int64_t j = 0; j < dE; ++j) dy[r * dE + j] -= c_target * e_t[j];
  }
  // ∂Ē's one-hot part: rows may share a target, so the threads take ranges of d_E's columns
  // and each adds its rows in row order (the serial loop's bits, whatever the threads).
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < dE; j0 += kOneHotColumns) {
    const int64_t j1 = std::min(dE, j0 + kOneHotColumns);
    for (int64_t r = 0; r < rc; ++r) {
      if (target[r] < 0) continue;
      Real* de_t = a.d_e_bar + target[r] * dE;
      for (int64_t j = j0; j < j1; ++j) de_t[j] -= c_target * y[r * dE + j];
    }
  }
  if (panels) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < np; ++p) {
      HeadPanelsGradAdd(y_scaled_.data(), rc, dE, z + p * rc * kHeadPanel, p, p + 1, d_e_bar_panels_.data());
    }
  } else if (e16 != nullptr) {
    if constexpr (std::is_same_v<Real, float>) {
      y16_.resize(rc * dE);
      ToBf16(y_scaled_.data(), rc * dE, y16_.data(), nullptr);
      AddZtTimesYs(GemmBf16, rc, V, dE, z16_.data(), y16_.data(), a.d_e_bar);
    }
  } else {
    if constexpr (std::is_same_v<Real, float>) {
      if (bf16) RoundToBf16(y_scaled_.data(), rc * dE);
    }
    AddZtTimesYs(Gemm<Real>, rc, V, dE, z, y_scaled_.data(), a.d_e_bar);
  }
}

template <typename Real>
void FusedHead<Real>::PanelSoftmax(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, Real* dy) {
  // A fixed shift needs no pass over whole rows first, so the vocabulary goes in blocks
  // of panels, each thread on its own, while a block is in cache: its numerators, their
  // row sums and (for gradients) its part of z Ē. Blocks are summed in order, whatever
  // the threads.
  const int64_t dE = a.d_e, V = a.vocab, np = HeadPanelCount(V);
  const int64_t* target = a.target + r0;
  const Real* y = a.y + r0 * dE;
  const Real* e_bar = a.e_bar;
  const double shift = a.shift;
  Real* z = z_.data();
  const int64_t block = std::max<int64_t>(1, options_.head_vocab_block);  // whole panels, at least one
  const int64_t per_block = block / kHeadPanel + (block % kHeadPanel != 0);
  const int64_t nb = (np + per_block - 1) / per_block;
  block_sum_.assign(nb * rc, 0.0);
  block_dy_.resize(dy != nullptr ? nb * rc * dE : 0);
  row_scale_.resize(rc);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nb; ++blk) {
    const int64_t p0 = blk * per_block, p1 = std::min(np, p0 + per_block);
    Real* z_block = z + p0 * rc * kHeadPanel;
    HeadNumerators(y, rc, dE, e_bar_panels_.data(), p0, p1, V, a.scale, static_cast<Real>(shift), z_block,
                   block_sum_.data() + blk * rc);
    if (dy != nullptr) HeadNumeratorsEBar(z_block, rc, dE, e_bar, p0, p1, V, block_dy_.data() + blk * rc * dE);
  }
  // Each row's statistics on their own (its blocks' sums in block order): the threads take rows.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rc; ++r) {
    double sum = 0;
    for (int64_t blk = 0; blk < nb; ++blk) sum += block_sum_[blk * rc + r];
    a.lse[r0 + r] = shift + std::log(sum);
    row_scale_[r] = 1.0 / sum;
    a.target_logit[r0 + r] = 0.0;
    if (target[r] < 0) continue;
    double dot = 0;
    for (int64_t j = 0; j < dE; ++j) dot += double(y[r * dE + j]) * double(e_bar[target[r] * dE + j]);
    a.target_logit[r0 + r] = double(a.scale) * dot;
  }
  if (dy == nullptr) return;
  // dy = Σ_blk block_dy[blk], every element summed from 0 in block order (the serial sum's
  // bits, whatever the threads), threads taking ranges of elements: at Ψ = 16's head the
  // parts are 99 blocks × 512 rows × 256 (52 MB a chunk), which one thread summed alone.
  const int64_t n = rc * dE;
  constexpr int64_t kRange = 256;  // 1 KB of fp32 per part and range
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += kRange) {
    const int64_t i1 = std::min(n, i0 + kRange);
    std::fill(dy + i0, dy + i1, Real(0));
    for (int64_t blk = 0; blk < nb; ++blk) {
      const Real* part = block_dy_.data() + blk * n;
      for (int64_t i = i0; i < i1; ++i) dy[i] += part[i];
    }
  }
}

template class FusedHead<float>;
template class FusedHead<double>;

}  // namespace multiscreen::kernels::cpu

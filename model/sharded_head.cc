#include "model/sharded_head.h"

#include <algorithm>
#include <cmath>

namespace multiscreen {

template <typename Real>
void ShardedHeadLoss(kernels::KernelTable<Real>& ops, Communicator& tp, const kernels::HeadLossArgs<Real>& a,
                     int64_t chunk_rows, ShardedHeadBuffers<Real>* hb) {
  const int64_t n = a.rows, dE = a.d_e, Vl = a.vocab;
  const int64_t chunk = std::min(std::max<int64_t>(1, chunk_rows), n);
  hb->z.Resize(chunk * Vl);
  hb->row_max.resize(n);
  hb->row_sum.resize(n);
  std::fill(a.target_logit, a.target_logit + n, 0.0);
  Real* z = hb->z.data();
  // C = scale · A · op(Ē): Ē packed once (a.e_bar_packed), else converted per product.
  auto times_e_bar = [&](bool trans_b, int64_t m, int64_t n, int64_t k, const Real* A, int64_t lda, Real* c,
                         int64_t ldc) {
    if (a.e_bar_packed != nullptr) {
      ops.GemmPacked(false, trans_b, m, n, k, a.scale, A, lda, kernels::PackedGemmA::kAsGemm, *a.e_bar_packed, dE, 0,
                     c, ldc);
    } else {
      ops.Gemm(a.precision, false, trans_b, m, n, k, a.scale, A, lda, a.e_bar, dE, 0, c, ldc);
    }
  };
  // Logits of rows [r0, r0 + rc): z = scale · y Ēᵀ on the local vocabulary.
  auto logits = [&](int64_t r0, int64_t rc) { times_e_bar(true, rc, Vl, dE, a.y + r0 * dE, dE, z, Vl); };
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rc = std::min(chunk, n - r0);
    logits(r0, rc);
    ops.SoftmaxStats(z, Vl, rc, Vl, hb->row_max.data() + r0, hb->row_sum.data() + r0);
    ops.TargetLogits(z, Vl, rc, a.target + r0, a.target_logit + r0);
  }
  // Vocabulary-parallel softmax: global max, then the rescaled sums, then the target logit.
  std::vector<double> global_max = hb->row_max;
  tp.AllReduce(global_max.data(), n, ReduceOp::kMax);
  for (int64_t r = 0; r < n; ++r) hb->row_sum[r] *= std::exp(hb->row_max[r] - global_max[r]);
  tp.AllReduce(hb->row_sum.data(), n, ReduceOp::kSum);
  tp.AllReduce(a.target_logit, n, ReduceOp::kSum);
  for (int64_t r = 0; r < n; ++r) a.lse[r] = global_max[r] + std::log(hb->row_sum[r]);
  if (a.dy == nullptr) return;
  // With z holding ∂L/∂z/scale: dĒ += scale · zᵀ y, dy = scale · z Ē. dĒ is gathered
  // transposed, dĒᵀ [d_E, V] = scale · yᵀ z (BLAS runs this shape faster), in a buffer
  // that is all zeros between calls, and moved into d_e_bar once at the end.
  hb->d_e_bar_t.Resize(dE * Vl);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rc = std::min(chunk, n - r0);
    logits(r0, rc);
    ops.CrossEntropyGrad(z, Vl, rc, Vl, a.lse + r0, a.target + r0, a.coef);
    ops.Gemm(a.precision, true, false, dE, Vl, rc, a.scale, a.y + r0 * dE, dE, z, Vl, 1, hb->d_e_bar_t.data(), Vl);
    times_e_bar(false, rc, dE, Vl, z, Vl, a.dy + r0 * dE, dE);
  }
  ops.MoveAddTransposed(hb->d_e_bar_t.data(), dE, Vl, Vl, a.d_e_bar, dE);
}

template void ShardedHeadLoss<float>(kernels::KernelTable<float>&, Communicator&, const kernels::HeadLossArgs<float>&,
                                     int64_t, ShardedHeadBuffers<float>*);
template void ShardedHeadLoss<double>(kernels::KernelTable<double>&, Communicator&,
                                      const kernels::HeadLossArgs<double>&, int64_t, ShardedHeadBuffers<double>*);

}  // namespace multiscreen

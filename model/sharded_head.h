// The vocabulary-parallel tied head (tp > 1), shared by both model families: each tp
// rank holds rows [vocab_begin, vocab_end) of the tied table, computes its logits in
// chunks of rows, and the softmax is completed by three all-reduces over the tp group
// (the row max, the rescaled sums, the target logit), as Megatron-LM's
// vocab-parallel cross-entropy (Shoeybi et al. 2019, §3). Issue 7 (Multiscreen), issue 18
// (the Transformer baseline).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

// Buffers kept between steps: the logits chunk, the gathered transposed table gradient,
// and per-row softmax statistics (host).
template <typename Real>
struct ShardedHeadBuffers {
  explicit ShardedHeadBuffers(Device d) : z(d), d_e_bar_t(d) {}
  DeviceArray<Real> z, d_e_bar_t;
  std::vector<double> row_max, row_sum;
};

// The head's loss and gradients from args as the single-rank head takes them
// (kernels::HeadLossArgs), with args.e_bar, args.vocab and args.target this rank's: its
// rows [vocab_begin, vocab_end) of the table, their count, and each target's local row
// (−1 where another rank holds it). args.shift is unused (the row max is always
// taken). lse and target_logit come out global and identical on every rank; dy is this
// rank's part of ∂L/∂y (the caller all-reduces it); d_e_bar gets this rank's rows'
// gradient. Logits are computed chunk_rows rows at a time ([chunk_rows, vocab] is the
// largest block). The products with Ē read args.e_bar_packed where given (as Gemm would
// read e_bar, bit for bit), else e_bar.
template <typename Real>
void ShardedHeadLoss(kernels::KernelTable<Real>& ops, Communicator& tp, const kernels::HeadLossArgs<Real>& args,
                     int64_t chunk_rows, ShardedHeadBuffers<Real>* buffers);

}  // namespace multiscreen

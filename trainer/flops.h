// Model FLOPs per token, for tokens/s → GFLOP/s → MFU (DESIGN "Precision",
// issue 5). Counts multiply-adds as 2 FLOPs, per token of a sequence of T:
//   projections  2·d_E·(2d_K + 2d_V)   per tile and layer
//   W_O          2·d_V·d_E             per tile and layer
//   screening    2·(d_K + d_V)·P_h     per tile and layer, where P_h is the mean
//                number of key pairs inside the tile's window per query:
//                P_h = (1/T)·Σ_{i<T} min(⌈w_h⌉, i + 1)  (only in-window pairs count)
//   head         2·d_E·V
// The Transformer baseline: 8 d_E² + 6 d_E d_ff + 2 d_E (T + 1) per layer (`windows`
// ignored) plus the head.
// A training step costs 3× the forward (forward, and the backward's two GEMMs
// per forward GEMM); element-wise work is not counted.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

// Forward FLOPs per token. `windows` holds w for every tile of every layer
// (N_L·N_H values); empty means every window covers the whole sequence.
double ForwardFlopsPerToken(const ModelDims& dims, int64_t T, const std::vector<double>& windows);

// The windows w = e^{s_w} + 1 of every tile of every layer at initialization
// (s_w = log(w_th)·h/(N_H − 1), the same in every layer), N_L·N_H values.
std::vector<double> InitialWindows(const ModelDims& dims);

// Training FLOPs per token = 3 × forward.
inline double TrainingFlopsPerToken(const ModelDims& dims, int64_t T, const std::vector<double>& windows) {
  return 3.0 * ForwardFlopsPerToken(dims, T, windows);
}

}  // namespace multiscreen

namespace multiscreen {

// The machine's single-precision GEMM rate in GFLOP/s, measured through the
// BLAS library on n×n×n products for about `seconds`, the best of 5 trials
// (the MFU denominator on CPUs; on a loaded machine it still reads low, so MFU
// reads high).
double MeasureSgemmGflops(int64_t n = 512, double seconds = 0.3);

// The best rate of `ops`'s Gemm in `precision` on its own device, in GFLOP/s (the MFU
// denominator of a GPU: its GEMM rate in the step's precision, as the BLAS's SGEMM rate is
// a CPU's). Square n × n × n products on operands packed once (KernelTable::PackOperand,
// GemmBothPacked: as the training step's GEMMs read theirs, so a device's rate is its
// products' alone, not their operands' conversion), n = 256, 512, … up to max_n, each size repeated
// (synchronized per product) for about `seconds`; the sizes stop growing once the next
// size's one product (8× this one's) would take longer than `seconds`, so a slow device
// (the emulated one: cuda_emulator/) is not held for minutes. *best_n (may be null): the size that gave the best rate.
double MeasureGemmGflops(kernels::KernelTable<float>& ops, Precision precision, int64_t max_n, double seconds,
                         int64_t* best_n = nullptr);

}  // namespace multiscreen

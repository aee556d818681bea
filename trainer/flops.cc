#include "trainer/flops.h"

#include <algorithm>
#include <cmath>

namespace multiscreen {

std::vector<double> InitialWindows(const ModelDims& d) {
  std::vector<double> w;
  for (int64_t l = 0; l < d.n_layers; ++l) {
    for (int64_t h = 0; h < d.n_heads; ++h) {
      const double s_w = d.n_heads > 1 ? std::log(d.w_th) * double(h) / double(d.n_heads - 1) : 0.0;
      w.push_back(std::exp(s_w) + 1.0);
    }
  }
  return w;
}

double ForwardFlopsPerToken(const ModelDims& d, int64_t T, const std::vector<double>& windows) {
  if (d.transformer()) {
    // Per layer: q, k, v, o 8 d_E², SwiGLU 6 d_E d_ff, causal attention 2·2 d_E (T + 1)/2
    // (scores and the weighted sum over the (T + 1)/2 keys a query sees on average); head 2 d_E V.
    const double dE = double(d.d_e);
    return double(d.n_layers) * (8.0 * dE * dE + 6.0 * dE * double(d.d_ff()) + 2.0 * dE * (double(T) + 1)) +
           2.0 * dE * double(d.vocab);
  }
  const double tiles = double(d.n_layers) * double(d.n_heads);
  double flops = tiles * (2.0 * d.d_e * (2 * d.d_k + (d.output_gate ? 2 : 1) * d.d_v) + 2.0 * d.d_v * d.d_e) + 2.0 * d.d_e * d.vocab;
  const int64_t n = windows.empty() ? int64_t(tiles) : int64_t(windows.size());
  for (int64_t t = 0; t < n; ++t) {
    const double keys = windows.empty() || std::isinf(windows[t]) ? double(T) : std::ceil(windows[t]);
    // Σ_{i<T} min(keys, i + 1) / T
    const double k = std::min(keys, double(T));
    const double pairs = (k * (k + 1) / 2 + (double(T) - k) * k) / double(T);
    flops += 2.0 * (d.d_k + d.d_v) * pairs;
  }
  return flops;
}

}  // namespace multiscreen

#include <chrono>

#include "kernels/cpu/gemm.h"
#include "kernels/device_array.h"

namespace multiscreen {

double MeasureSgemmGflops(int64_t n, double seconds) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.f);
  kernels::cpu::Gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);  // warm-up
  // The best of several short trials: on a shared machine the slowest trials
  // measure the neighbours, not the BLAS.
  constexpr int kTrials = 5;
  double best = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    int64_t reps = 0;
    double elapsed = 0;
    do {
      kernels::cpu::Gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      ++reps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < seconds / kTrials);
    best = std::max(best, 2.0 * double(n) * n * n * reps / elapsed / 1e9);
  }
  return best;
}

double MeasureGemmGflops(kernels::KernelTable<float>& ops, Precision precision, int64_t max_n, double seconds,
                         int64_t* best_n) {
  using Clock = std::chrono::steady_clock;
  double best = 0;
  for (int64_t n = 256; n <= max_n; n *= 2) {
    DeviceArray<float> a(ops.device()), b(ops.device()), c(ops.device());
    for (DeviceArray<float>* m : {&a, &b, &c}) m->Resize(n * n);
    ops.Fill(a.data(), n * n, 0.5f);
    ops.Fill(b.data(), n * n, 0.25f);
    kernels::PackedOperand<float> pa, pb;
    ops.PackOperand(precision, a.data(), n * n, &pa);
    ops.PackOperand(precision, b.data(), n * n, &pb);
    ops.GemmBothPacked(false, false, n, n, n, 1.f, pa, n, pb, n, 0.f, c.data(), n);  // warm-up
    ops.Synchronize();
    const auto start = Clock::now();
    int64_t reps = 0;
    double elapsed = 0;
    do {
      ops.GemmBothPacked(false, false, n, n, n, 1.f, pa, n, pb, n, 0.f, c.data(), n);
      ops.Synchronize();
      ++reps;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < seconds);
    const double rate = 2.0 * double(n) * n * n * reps / elapsed / 1e9;
    if (rate > best) {
      best = rate;
      if (best_n != nullptr) *best_n = n;
    }
    if (8 * elapsed / double(reps) > seconds) break;  // the next size's one product would take longer than `seconds`
  }
  return best;
}

}  // namespace multiscreen

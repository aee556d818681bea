// The CPU's vocabulary head (kernels/cpu/head_loss.h) at Ψ = 16's shapes (issue 44):
// T = 1024 rows, d_E = 256, V = 50,257, the loss and both gradients, as a step runs it;
// whole (fp32 on each head path the kernels table offers, and the bf16 head), then the fp32
// whole-row path's parts one by one (its three products, whole and in the vocabulary blocks
// the head uses, the softmax pass, ∂Ēᵀ's move), each against the path's fp32
// multiply-add peak (kernels/cpu/fma_peak.h). Rates are FLOPs over the process's CPU time
// per thread (CLOCK_PROCESS_CPUTIME_ID / threads), the best of 3 trials: time the machine's
// neighbours take is not counted, time a thread spends waiting with OMP_WAIT_POLICY=active is.
//
// Run (docs/performance.md has the table and the exact command):
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 build/tests/head_bench avx512
// argv[1]: avx512 | avx2 — the kernels' path (kernels/cpu/isa.h SetIsaCap), the peak's too;
// argv[2], argv[3] (optional): KernelOptions' head_chunk_rows and head_vocab_block.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/fma_peak.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/head_loss.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/process_cpu_clock.h"

namespace {

using namespace multiscreen;
using namespace multiscreen::kernels::cpu;

constexpr int64_t kRows = 1024, kDe = 256, kVocab = 50257;

// Best CPU seconds per thread of one call of fn over 3 trials (after one untimed call).
template <typename Fn>
double Seconds(int threads, Fn fn) {
  fn();
  double best = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    const double t0 = multiscreen::test::ProcessCpuSeconds();
    fn();
    best = std::min(best, (multiscreen::test::ProcessCpuSeconds() - t0) / threads);
  }
  return best;
}

void Row(const char* name, double flops, double seconds, double peak) {
  const double gflops = flops / seconds / 1e9;
  std::printf("%-34s %9.1f ms %8.1f GFLOP/s %5.0f %%\n", name, 1e3 * seconds, gflops, 100 * gflops / peak);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "avx512";
  if (auto s = SetIsaCap(path); !s.ok()) {
    std::fprintf(stderr, "head_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const int threads = omp_get_max_threads();
  const HardwarePeak peak = MeasureHardwarePeak(ActiveIsa(), 0.3);
  std::printf("# head at T=%lld d_E=%lld V=%lld, %s path, %d threads, CPU %s; fp32 peak %.1f GFLOP/s\n",
              (long long)kRows, (long long)kDe, (long long)kVocab, IsaName(ActiveIsa()), threads, CpuModel().c_str(),
              peak.fp32_gflops);

  // PLNorm's unit rows (|y| = |Ē_v| = 1, so |z| ≤ e^{s_F}) and the fixed shift the model uses.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto unit_rows = [&](int64_t rows) {
    std::vector<float> m(rows * kDe);
    for (int64_t r = 0; r < rows; ++r) {
      double norm = 0;
      for (int64_t j = 0; j < kDe; ++j) norm += double(m[r * kDe + j] = normal(rng)) * m[r * kDe + j];
      for (int64_t j = 0; j < kDe; ++j) m[r * kDe + j] /= float(std::sqrt(norm));
    }
    return m;
  };
  const std::vector<float> y = unit_rows(kRows), e_bar = unit_rows(kVocab);
  std::vector<int64_t> target(kRows);
  for (int64_t r = 0; r < kRows; ++r) target[r] = (r * 7919) % kVocab;
  std::vector<double> lse(kRows), target_logit(kRows);
  std::vector<float> dy(kRows * kDe), d_e_bar(kVocab * kDe, 0.f);
  const float scale = 16.f;  // e^{s_F} at s_F = log √d_E

  kernels::HeadLossArgs<float> a;
  a.y = y.data();
  a.e_bar = e_bar.data();
  a.rows = kRows;
  a.vocab = kVocab;
  a.d_e = kDe;
  a.scale = scale;
  a.shift = 1.01 * scale;
  a.target = target.data();
  a.coef = 1.f / kRows;
  a.lse = lse.data();
  a.target_logit = target_logit.data();
  a.dy = dy.data();
  a.d_e_bar = d_e_bar.data();

  const double product = 2.0 * kRows * kVocab * kDe;  // one of the head's three products
  for (HeadPath head_path : {HeadPath::kPanels, HeadPath::kBlas}) {
    KernelOptions options;
    options.head_path = head_path;
    if (argc > 2) options.head_chunk_rows = std::atoll(argv[2]);
    if (argc > 3) options.head_vocab_block = std::atoll(argv[3]);
    FusedHead<float> head(options);
    const double s = Seconds(threads, [&] {
      head.Prepare(e_bar.data(), kVocab, kDe);
      head.Run(a);
    });
    Row(head_path == HeadPath::kPanels ? "head, panels (3 products)" : "head, whole rows (3 products)", 3 * product,
        s, peak.fp32_gflops);
  }

  // The bf16 head (whole rows, the three products on the CPU's bf16 dot products where it has
  // them), against the same fp32 peak: Ē's bf16 copy made once, as a step packs it.
  kernels::PackedOperand<float> e16;
  e16.precision = Precision::kBf16;
  e16.size = kVocab * kDe;
  e16.half.Resize(kVocab * kDe);
  ToBf16(e_bar.data(), kVocab * kDe, e16.half.data(), nullptr);
  {
    KernelOptions options;
    options.precision = Precision::kBf16;
    FusedHead<float> head(options);
    kernels::HeadLossArgs<float> b = a;
    b.precision = Precision::kBf16;
    b.e_bar_packed = &e16;
    Row(Bf16GemmAvailable() ? "head, bf16 (bf16 dot products)" : "head, bf16 (rounded fp32 products)", 3 * product,
        Seconds(threads, [&] {
          head.Prepare(e_bar.data(), kVocab, kDe);
          head.Run(b);
        }),
        peak.fp32_gflops);
  }

  // The whole-row path's parts, one chunk of KernelOptions' default rows at a time.
  const int64_t chunk = KernelOptions{}.head_chunk_rows, chunks = kRows / chunk;
  std::vector<float> z(chunk * kVocab), d_e_bar_t(kDe * kVocab, 0.f);
  std::vector<double> row_scale(chunk);
  Row("logits z = y E^T", product,
      chunks * Seconds(threads, [&] { Gemm<float>(false, true, chunk, kVocab, kDe, scale, y.data(), kDe, e_bar.data(), kDe, 0, z.data(), kVocab); }),
      peak.fp32_gflops);
  // The softmax pass rewrites z with its numerators: time it on logits made again each time.
  const double logits_and_softmax = Seconds(threads, [&] {
    Gemm<float>(false, true, chunk, kVocab, kDe, scale, y.data(), kDe, e_bar.data(), kDe, 0, z.data(), kVocab);
    SoftmaxNumerators(z.data(), kVocab, chunk, kVocab, a.shift, target.data(), lse.data(), target_logit.data(),
                      row_scale.data());
  });
  const double logits = Seconds(threads, [&] {
    Gemm<float>(false, true, chunk, kVocab, kDe, scale, y.data(), kDe, e_bar.data(), kDe, 0, z.data(), kVocab);
  });
  std::printf("%-34s %9.1f ms\n", "softmax numerators (exp pass)", 1e3 * chunks * (logits_and_softmax - logits));
  Row("dy = z E", product,
      chunks * Seconds(threads, [&] { Gemm<float>(false, false, chunk, kDe, kVocab, 1, z.data(), kVocab, e_bar.data(), kDe, 0, dy.data(), kDe); }),
      peak.fp32_gflops);
  std::vector<float> dy_t(kDe * chunk);
  Row("dy^T = E^T z^T (then transposed)", product,
      chunks * Seconds(threads, [&] { Gemm<float>(true, true, kDe, chunk, kVocab, 1, e_bar.data(), kDe, z.data(), kVocab, 0, dy_t.data(), chunk); }),
      peak.fp32_gflops);
  constexpr int64_t kBlock = 4096;
  Row("dy = z E, vocabulary in 4096s", product,
      chunks * Seconds(threads, [&] {
        for (int64_t v0 = 0; v0 < kVocab; v0 += kBlock) {
          Gemm<float>(false, false, chunk, kDe, std::min(kBlock, kVocab - v0), 1, z.data() + v0, kVocab,
                      e_bar.data() + v0 * kDe, kDe, v0 == 0 ? 0 : 1, dy.data(), kDe);
        }
      }),
      peak.fp32_gflops);
  Row("dE^T += y_s^T z", product,
      chunks * Seconds(threads, [&] { Gemm<float>(true, false, kDe, kVocab, chunk, 1, y.data(), kDe, z.data(), kVocab, 1, d_e_bar_t.data(), kVocab); }),
      peak.fp32_gflops);
  Row("dE^T += y_s^T z, vocabulary in 4096s", product,
      chunks * Seconds(threads, [&] {
        for (int64_t v0 = 0; v0 < kVocab; v0 += kBlock) {
          Gemm<float>(true, false, kDe, std::min(kBlock, kVocab - v0), chunk, 1, y.data(), kDe, z.data() + v0, kVocab, 1,
                      d_e_bar_t.data() + v0, kVocab);
        }
      }),
      peak.fp32_gflops);
  Row("dE += z^T y_s (untransposed)", product,
      chunks * Seconds(threads, [&] { Gemm<float>(true, false, kVocab, kDe, chunk, 1, z.data(), kVocab, y.data(), kDe, 1, d_e_bar.data(), kDe); }),
      peak.fp32_gflops);
  Row("dE += z^T y_s, vocabulary in 4096s", product,
      chunks * Seconds(threads, [&] {
        for (int64_t v0 = 0; v0 < kVocab; v0 += kBlock) {
          Gemm<float>(true, false, std::min(kBlock, kVocab - v0), kDe, chunk, 1, z.data() + v0, kVocab, y.data(), kDe,
                      1, d_e_bar.data() + v0 * kDe, kDe);
        }
      }),
      peak.fp32_gflops);
  std::printf("%-34s %9.1f ms\n", "move dE^T into dE",
              1e3 * Seconds(threads, [&] { MoveAddTransposed(d_e_bar_t.data(), kDe, kVocab, kVocab, d_e_bar.data(), kDe); }));
  return 0;
}

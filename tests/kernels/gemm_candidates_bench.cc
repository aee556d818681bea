// The step's GEMMs on the candidate libraries (issue 44 item 2): OpenBLAS as the process
// loaded it (OPENBLAS_CORETYPE as the environment sets it) and oneDNN's fp32 matmul, on
// the exact shapes of a Ψ = 16 step (T = 1024, B = 1) and of transformer_45m's, with the
// hardware's fp32 multiply-add peak of the path beside them (kernels/cpu/fma_peak.h).
// Rates are FLOPs over the process's CPU time per thread (CLOCK_PROCESS_CPUTIME_ID /
// threads), the best of 5 trials: time the machine's neighbours take is not counted.
//
// Run (docs/performance.md has the table and the exact commands), once per OpenBLAS core
// type, since OpenBLAS reads OPENBLAS_CORETYPE when it loads:
//   OMP_NUM_THREADS=2 build/tests/gemm_candidates_bench avx512
//   env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=2 build/tests/gemm_candidates_bench avx512
// argv[1]: avx512 | avx2 — caps oneDNN (dnnl::set_max_cpu_isa) and names the peak's path.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/fma_peak.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "tests/kernels/process_cpu_clock.h"

extern "C" char* openblas_get_corename();
extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
  float beta;
};

// Ψ = 16 (d_E 256, 16 tiles, C = 160, d_V 64), T = 1024, B = 1: rows 1024.
// transformer_45m (d_E 512, d_ff 1365), T = 1024, B = 1.
const Shape kShapes[] = {
    {"psi16 P = x W_cat", false, false, 1024, 2560, 256, 0},
    {"psi16 dW_cat = x^T dP", true, false, 256, 2560, 1024, 0},
    {"psi16 dx += dP W_cat^T", false, true, 1024, 256, 2560, 1},
    {"psi16 x += U W_O", false, false, 1024, 256, 1024, 1},
    {"psi16 dU = dD W_O^T", false, true, 1024, 1024, 256, 0},
    {"psi16 dW_O += U^T dD", true, false, 1024, 256, 1024, 1},
    {"t45m qkv = x W_qkv", false, false, 1024, 1536, 512, 0},
    {"t45m gu = x W_gu^T", false, true, 1024, 2730, 512, 0},
    {"t45m x += h W_down^T", false, true, 1024, 512, 1365, 1},
    {"t45m dW_gu += dgu^T x", true, false, 2730, 512, 1024, 1},
    {"t45m da = dgu W_gu", false, false, 1024, 512, 2730, 0},
    {"t45m dW_qkv = x^T dqkv", true, false, 512, 1536, 1024, 0},
};

// Best GFLOP/s of fn over 5 trials of ~0.06 s of CPU time per thread.
template <typename Fn>
double Rate(const Shape& s, int threads, Fn fn) {
  fn();
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double t0 = multiscreen::test::ProcessCpuSeconds();
    int reps = 0;
    double per_thread = 0;
    do {
      fn();
      ++reps;
      per_thread = (multiscreen::test::ProcessCpuSeconds() - t0) / threads;
    } while (per_thread < 0.06);
    best = std::max(best, 2.0 * double(s.m) * s.n * s.k * reps / per_thread / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace multiscreen::kernels::cpu;
  const std::string path = argc > 1 ? argv[1] : "avx512";
  const Isa isa = path == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
  dnnl::set_max_cpu_isa(isa == Isa::kAvx2 ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::avx512_core_bf16);
  const int threads = omp_get_max_threads();
  openblas_set_num_threads(threads);
  const HardwarePeak peak = MeasureHardwarePeak(isa, 0.3);
  std::printf("# %s path, %d threads; OpenBLAS core %s; fp32 peak %.1f GFLOP/s\n", IsaName(isa), threads,
              openblas_get_corename(), peak.fp32_gflops);
  std::printf("%-24s %5s %5s %5s  %12s %12s\n", "GEMM", "m", "n", "k", "OpenBLAS %pk", "oneDNN %pk");
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  for (const Shape& s : kShapes) {
    std::vector<float> a(s.m * s.k, 0.01f), b(s.k * s.n, 0.02f), c(s.m * s.n, 0.f);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    const double blas = Rate(s, threads, [&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                  1.f, a.data(), lda, b.data(), ldb, s.beta, c.data(), ldc);
    });
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    const md a_md({s.m, s.k}, dt::f32, s.ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const md b_md({s.k, s.n}, dt::f32, s.tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const md c_md({s.m, s.n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (s.beta != 0) {
      dnnl::post_ops po;
      po.append_sum(s.beta);
      attr.set_post_ops(po);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    const dnnl::matmul mm(pd);
    dnnl::memory am(a_md, engine, a.data()), bm(b_md, engine, b.data()), cm(c_md, engine, c.data());
    const double dnn = Rate(s, threads, [&] {
      mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      stream.wait();
    });
    std::printf("%-24s %5lld %5lld %5lld  %6.1f %4.0f%% %6.1f %4.0f%%   (%s)\n", s.name, (long long)s.m,
                (long long)s.n, (long long)s.k, blas, 100 * blas / peak.fp32_gflops, dnn,
                100 * dnn / peak.fp32_gflops, pd.impl_info_str());
  }
  return 0;
}

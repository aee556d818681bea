#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace multiscreen::kernels::cpu {

namespace {

class OnednnMatmuls {
 public:
  // The process's one instance (never destroyed: no exit-order issue), or null where
  // oneDNN has no CPU engine.
  static OnednnMatmuls* Get() {
    static OnednnMatmuls* matmuls = [] {
      try {
        return new OnednnMatmuls;
      } catch (const dnnl::error&) {
        return static_cast<OnednnMatmuls*>(nullptr);
      }
    }();
    return matmuls;
  }

  // The primitive of this product for the current OpenMP thread count (oneDNN plans a product's
  // threading when it makes the primitive), made on first use; nullopt where oneDNN refuses it.
  // A handle (a copy shares the primitive): the cache may be cleared while it runs.
  std::optional<dnnl::matmul> Find(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           bool scaled, int64_t lda, int64_t ldb, bool accumulate, int64_t ldc) {
    const Key key{type, trans_a, trans_b, accumulate, scaled, omp_get_max_threads(), m, n, k, lda, ldb, ldc};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxShapes) cache_.clear();
      std::optional<dnnl::matmul> made;
      try {  // oneDNN's C++ API throws dnnl::error; nothing leaves this file
        made = Make(key);
      } catch (const dnnl::error&) {
      }
      it = cache_.emplace(key, std::move(made)).first;
    }
    return it->second;
  }

  // C = alpha · op(A) op(B) (+ C) by `matmul` (Find's, for these sizes); false if oneDNN throws.
  bool Execute(const dnnl::matmul& matmul, MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float* c,
               int64_t ldc) {
    try {
      using dims = dnnl::memory::dims;
      const auto dt = DataType(type);
      dnnl::memory a_mem(Desc(m, k, lda, trans_a, dt), engine_, const_cast<void*>(a));
      dnnl::memory b_mem(Desc(k, n, ldb, trans_b, dt), engine_, const_cast<void*>(b));
      dnnl::memory c_mem(dnnl::memory::desc(dims{m, n}, dnnl::memory::data_type::f32, dims{ldc, 1}), engine_, c);
      dnnl::stream stream(engine_);
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
      if (alpha != 1.f) {
        args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES,
                     dnnl::memory(dnnl::memory::desc(dims{1}, dnnl::memory::data_type::f32, dims{1}), engine_, &alpha));
      }
      matmul.execute(stream, args);
      stream.wait();
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

 private:
  struct Key {
    MatmulOperands type;
    bool trans_a, trans_b, accumulate;
    bool scaled;  // alpha ≠ 1: an output scale given at each call (s_F's e^{s_F} changes every step)
    int threads;  // omp_get_max_threads() when made: the threading oneDNN planned
    int64_t m, n, k, lda, ldb, ldc;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& x) const {
      size_t h = size_t(x.trans_a) | size_t(x.trans_b) << 1 | size_t(x.accumulate) << 2 | size_t(x.type) << 3;
      h |= size_t(x.scaled) << 5;
      for (int64_t v : {int64_t(x.threads), x.m, x.n, x.k, x.lda, x.ldb, x.ldc}) h = h * 1000003u ^ size_t(v);
      return h;
    }
  };
  static constexpr size_t kMaxShapes = 512;

  OnednnMatmuls() : engine_(dnnl::engine::kind::cpu, 0) {}

  static dnnl::memory::data_type DataType(MatmulOperands type) {
    return type == MatmulOperands::kBf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  }

  // The [rows, cols] operand stored row-major with row stride ld, or its transpose stored so.
  static dnnl::memory::desc Desc(int64_t rows, int64_t cols, int64_t ld, bool trans, dnnl::memory::data_type dt) {
    using dims = dnnl::memory::dims;
    return dnnl::memory::desc(dims{rows, cols}, dt, trans ? dims{1, ld} : dims{ld, 1});
  }

  dnnl::matmul Make(const Key& x) const {
    dnnl::primitive_attr attr;
    if (x.scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});  // C = alpha · AB (+ C)
    if (x.accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.f);
      attr.set_post_ops(sum);
    }
    using dims = dnnl::memory::dims;
    const auto dt = DataType(x.type);
    const dnnl::memory::desc c(dims{x.m, x.n}, dnnl::memory::data_type::f32, dims{x.ldc, 1});
    const dnnl::matmul::desc desc(Desc(x.m, x.k, x.lda, x.trans_a, dt), Desc(x.k, x.n, x.ldb, x.trans_b, dt), c);
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine_));
  }

  dnnl::engine engine_;
  std::mutex mu_;
  std::unordered_map<Key, std::optional<dnnl::matmul>, KeyHash> cache_;  // nullopt: refused
};

// oneDNN plans a product for omp_get_max_threads() threads and each thread of its region
// computes its planned share of C: a region that gets fewer threads (a call inside another
// region, OMP_DYNAMIC, OMP_THREAD_LIMIT below the count) left the missing threads' shares
// unwritten (the fresh-eyes pass: tiny_psi4's bf16 loss 5.125 for 5.336 under
// OMP_THREAD_LIMIT=1). While it lives, the calling thread's count is the team a region
// started here gets (1 inside a region; at most the thread limit) and dynamic teams are off,
// so that the plan and the team agree; the settings are restored after.
class PlannedTeam {
 public:
  PlannedTeam() : threads_(omp_get_max_threads()), dynamic_(omp_get_dynamic()) {
    const int team = omp_in_parallel() ? 1 : std::min(threads_, omp_get_thread_limit());
    if (dynamic_) omp_set_dynamic(0);
    if (team != threads_) omp_set_num_threads(team);
  }
  ~PlannedTeam() {
    if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
    if (dynamic_) omp_set_dynamic(dynamic_);
  }
  PlannedTeam(const PlannedTeam&) = delete;
  PlannedTeam& operator=(const PlannedTeam&) = delete;

 private:
  int threads_, dynamic_;
};

}  // namespace

bool OnednnMatmul(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  OnednnMatmuls* matmuls = OnednnMatmuls::Get();
  if (matmuls == nullptr || k <= 0) return false;
  const PlannedTeam team;
  // A long weight-gradient reduction in chunks along k, added into the sum in order. The scale
  // applied once to the whole sum where the chunks would each round their scaled part, and where
  // oneDNN's own scaling follows the thread count (onednn_matmul.h): the sum (in C, or beside it
  // where C is added to), then C = alpha · sum (+ C). Every chunk's primitive is found before
  // the first runs, so that a refused one leaves C as it was.
  const int64_t chunk = trans_a && k >= kOnednnSplitK ? kOnednnKChunk : k;
  const int64_t chunks = (k + chunk - 1) / chunk;
  const bool scale_after = alpha != 1.f && (chunks > 1 || (type == MatmulOperands::kF32 && !accumulate) ||
                                            m * n <= kOnednnSmallC);
  std::vector<float> beside(scale_after && accumulate ? m * n : 0);
  float* out = beside.empty() ? c : beside.data();
  const int64_t ld_out = beside.empty() ? ldc : n;
  const float run_alpha = scale_after ? 1.f : alpha;
  auto find = [&](int64_t i) {
    return matmuls->Find(type, trans_a, trans_b, m, n, std::min(chunk, k - i * chunk), run_alpha != 1.f, lda, ldb,
                         (accumulate && out == c) || i > 0, ld_out);
  };
  // The first chunk's, a middle one's and the last one's (one and the same for a single chunk).
  const std::optional<dnnl::matmul> first = find(0), middle = find(std::min<int64_t>(1, chunks - 1)),
                                    last = find(chunks - 1);
  if (!first || !middle || !last) return false;
  const size_t bytes = type == MatmulOperands::kBf16 ? 2 : 4;
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t k0 = i * chunk;
    // op(A)'s columns k0 … (A stored [k, m]: its rows), op(B)'s rows k0 … (B stored [n, k]: its columns).
    const char* a_i = static_cast<const char*>(a) + bytes * (trans_a ? k0 * lda : k0);
    const char* b_i = static_cast<const char*>(b) + bytes * (trans_b ? k0 : k0 * ldb);
    const dnnl::matmul& matmul = i == 0 ? *first : i == chunks - 1 ? *last : *middle;
    if (!matmuls->Execute(matmul, type, trans_a, trans_b, m, n, std::min(chunk, k - k0), run_alpha, a_i, lda, b_i,
                          ldb, out, ld_out)) {
      if (i == 0) return false;  // as a refused product: the caller computes it another way
      // Earlier chunks are in C: no other way can finish it.
      std::fprintf(stderr, "oneDNN failed on chunk %lld of a %lldx%lldx%lld product after running the others\n",
                   static_cast<long long>(i), static_cast<long long>(m), static_cast<long long>(n),
                   static_cast<long long>(k));
      std::abort();
    }
  }
  if (scale_after) {
#pragma omp parallel for schedule(static) if (m * n > (1 << 16))
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (out == c) {
        for (int64_t j = 0; j < n; ++j) row[j] *= alpha;
      } else {
        const float* from = out + i * ld_out;
        for (int64_t j = 0; j < n; ++j) row[j] += alpha * from[j];
      }
    }
  }
  return true;
}

}  // namespace multiscreen::kernels::cpu

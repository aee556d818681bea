#include "kernels/cpu/onednn_matmul.h"

#include <mutex>
#include <unordered_map>

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

  bool Run(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
    const Key key{type, trans_a, trans_b, accumulate, alpha != 1.f, m, n, k, lda, ldb, ldc};
    try {  // oneDNN's C++ API throws dnnl::error; nothing leaves this file
      dnnl::matmul matmul;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = cache_.find(key);
        if (it == cache_.end()) {
          if (cache_.size() >= kMaxShapes) cache_.clear();
          it = cache_.emplace(key, Make(key)).first;
        }
        matmul = it->second;
      }
      using dims = dnnl::memory::dims;
      const auto dt = DataType(type);
      dnnl::memory a_mem(Desc(m, k, lda, trans_a, dt), engine_, const_cast<void*>(a));
      dnnl::memory b_mem(Desc(k, n, ldb, trans_b, dt), engine_, const_cast<void*>(b));
      dnnl::memory c_mem(dnnl::memory::desc(dims{m, n}, dnnl::memory::data_type::f32, dims{ldc, 1}), engine_, c);
      dnnl::stream stream(engine_);
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
      if (key.scaled) {
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
    int64_t m, n, k, lda, ldb, ldc;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& x) const {
      size_t h = size_t(x.trans_a) | size_t(x.trans_b) << 1 | size_t(x.accumulate) << 2 | size_t(x.type) << 3;
      h |= size_t(x.scaled) << 5;
      for (int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldc}) h = h * 1000003u ^ size_t(v);
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
  std::unordered_map<Key, dnnl::matmul, KeyHash> cache_;
};

}  // namespace

bool OnednnMatmul(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  OnednnMatmuls* matmuls = OnednnMatmuls::Get();
  return matmuls != nullptr && k > 0 &&
         matmuls->Run(type, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, accumulate, c, ldc);
}

}  // namespace multiscreen::kernels::cpu

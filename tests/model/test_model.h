// Shared fixtures for model tests: tiny models with perturbed scalars, so that
// windows are shorter than the test sequences, Trim rejects a real fraction of
// pairs, and MiPE is on in some tiles and off in others; Transformer parameters moved
// off their init.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "common/config.h"
#include "model/init.h"
#include "model/param_layout.h"

namespace multiscreen::testing {

inline ModelDims TinyDims(const char* name = "tiny_psi2", bool pl_norm = true) {
  auto dims = LoadModel(name);
  ModelDims d = *dims;
  d.pl_norm = pl_norm;
  return d;
}

// Initialized parameters with scalars perturbed deterministically:
// windows w in [1.5, 2·w_th] (some below T, some past w_th), s_r in [−1, 2],
// s_O, s_E, s_F moved by up to ±0.5.
template <typename Real>
std::vector<Real> PerturbedParams(const ParamLayout& layout, uint64_t seed) {
  std::vector<Real> p(layout.size());
  InitParams(layout, seed, p.data());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double w_th = layout.dims().w_th;
  for (const ParamEntry& e : layout.entries()) {
    Real* v = p.data() + e.buffer_offset;
    for (int64_t i = 0; i < e.size(); ++i) {
      switch (e.kind) {
        case ParamKind::kS_w: v[i] = static_cast<Real>(std::log(0.5 + unit(rng) * (2 * w_th - 0.5))); break;
        case ParamKind::kS_r: v[i] = static_cast<Real>(-1.0 + 3.0 * unit(rng)); break;
        case ParamKind::kS_O: case ParamKind::kS_E: case ParamKind::kS_F: v[i] += static_cast<Real>(unit(rng) - 0.5); break;
        default: break;
      }
    }
  }
  return p;
}

// PerturbedParams with every s_O raised by 3: the layers' output then weighs against the
// unit-length embedding instead of being ~1% of it, so the loss is not nearly invariant
// to the embedding scale and ∂L/∂s_E is not a tiny difference of large terms (which
// fp32 rounding moves by ~1e-4 relative in any summation order, and more at Ψ = 4:
// comparisons of two fp32 implementations need this).
template <typename Real>
std::vector<Real> WellConditionedParams(const ParamLayout& layout, uint64_t seed) {
  std::vector<Real> p = PerturbedParams<Real>(layout, seed);
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind != ParamKind::kS_O) continue;
    for (int64_t i = 0; i < e.size(); ++i) p[e.buffer_offset + i] += 3;
  }
  return p;
}

// A Transformer's parameters initialized, then moved off the init so that attention is
// far from uniform, SwiGLU far from linear and gains and scales are not 1: matrices
// ×12, gains in [0.5, 1.5], scalars ±0.4.
template <typename Real>
std::vector<Real> PerturbedTransformerParams(const ParamLayout& layout, uint64_t seed) {
  std::vector<Real> p(layout.size());
  InitParams(layout, seed, p.data());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (const ParamEntry& e : layout.entries()) {
    Real* v = p.data() + e.buffer_offset;
    for (int64_t i = 0; i < e.size(); ++i) {
      if (e.is_gain()) v[i] = static_cast<Real>(v[i] * (0.5 + unit(rng)));
      else if (e.is_scalar()) v[i] = static_cast<Real>(v[i] + 0.8 * (unit(rng) - 0.5));
      else v[i] = static_cast<Real>(v[i] * 12);
    }
  }
  return p;
}

// B sequences of T + 1 uniformly random tokens.
inline std::vector<int32_t> RandomTokens(int64_t vocab, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(count);
  for (auto& x : t) x = id(rng);
  return t;
}

}  // namespace multiscreen::testing

#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace multiscreen {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A uniform in (0, 1] from 53 random bits.
double Uniform(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

// The generator's key of tensor `name` under `seed`, and the normal at `index` of a key.
uint64_t InitKey(uint64_t seed, std::string_view name) { return SplitMix64(seed ^ SplitMix64(Fnv1a(name))); }

double NormalAt(uint64_t key, int64_t index) {
  const double u1 = Uniform(SplitMix64(key + 2 * static_cast<uint64_t>(index)));
  const double u2 = Uniform(SplitMix64(key + 2 * static_cast<uint64_t>(index) + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// out[i] = std_dev · InitNormal(seed, name, first + i), the key computed once.
template <typename Real>
void FillNormal(uint64_t seed, const std::string& name, double std_dev, int64_t first, int64_t n, Real* out) {
  const uint64_t key = InitKey(seed, name);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Real>(std_dev * NormalAt(key, first + i));
}

}  // namespace

double InitNormal(uint64_t seed, std::string_view name, int64_t index) { return NormalAt(InitKey(seed, name), index); }

template <typename Real>
void InitValues(const ModelDims& d, const ParamEntry& e, uint64_t seed, int64_t first, int64_t n, Real* out) {
  double std_dev = 0;
  switch (e.kind) {  // the screening scalars, a Multiscreen tile's or a screening head's alike
    case ParamKind::kS_w:
      for (int64_t i = 0; i < n; ++i) {
        const int64_t h = first + i;  // the global tile (head)
        out[i] = d.n_heads > 1 ? static_cast<Real>(std::log(d.w_th) * double(h) / double(d.n_heads - 1)) : Real(0);
      }
      return;
    case ParamKind::kS_r: std::fill(out, out + n, Real(0)); return;
    default: break;
  }
  if (d.transformer()) {
    // Spec "Transformer baseline": N(0, 0.02), residual output projections (W_O,
    // W_down) over √(2 N_L); gains 1; SIO as Multiscreen (s_E = 0, s_F = log √d_E);
    // QKNorm's scale e^{s_QK} = √d_head, the plain attention's 1/√d_head times d_head.
    switch (e.kind) {
      case ParamKind::kGain: std::fill(out, out + n, Real(1)); return;
      case ParamKind::kS_E: std::fill(out, out + n, Real(0)); return;
      case ParamKind::kS_F: std::fill(out, out + n, static_cast<Real>(std::log(std::sqrt(double(d.d_e))))); return;
      case ParamKind::kS_QK: std::fill(out, out + n, static_cast<Real>(std::log(std::sqrt(double(d.d_k))))); return;
      // SSMax's s = 1: the scores' multiplier starts at log n, SSMax's own base-n form
      // n^{s z} (docs/attention.md says why not a length-matched value).
      case ParamKind::kS_SS: std::fill(out, out + n, Real(1)); return;
      case ParamKind::kW_O: case ParamKind::kW_down: std_dev = 0.02 / std::sqrt(2.0 * double(d.n_layers)); break;
      default: std_dev = 0.02; break;
    }
    FillNormal(seed, e.name, std_dev, first, n, out);
    return;
  }
  switch (e.kind) {
    case ParamKind::kW_E: std_dev = 0.1 / std::sqrt(double(d.d_e)); break;
    case ParamKind::kW_Q: case ParamKind::kW_K: std_dev = 0.1 / std::sqrt(double(d.d_k)); break;
    case ParamKind::kW_V: std_dev = 0.1 / std::sqrt(double(d.d_v)); break;
    case ParamKind::kW_G: std_dev = 0.1; break;
    case ParamKind::kW_O: std_dev = 0.1 / std::sqrt(double(d.d_e)); break;
    case ParamKind::kS_E: std::fill(out, out + n, Real(0)); return;
    case ParamKind::kS_F: std::fill(out, out + n, static_cast<Real>(std::log(std::sqrt(double(d.d_e))))); return;
    case ParamKind::kS_O:
      std::fill(out, out + n, static_cast<Real>(std::log(1.0 / std::sqrt(double(d.n_heads * d.n_layers)))));
      return;
    default:  // the Transformer's kinds (handled above)
      return;
  }
  FillNormal(seed, e.name, std_dev, first, n, out);
}

template <typename Real>
void InitParams(const ParamLayout& layout, uint64_t seed, Real* params) {
  for (const ParamEntry& e : layout.entries()) {
    const int64_t n = e.size();
    // Elements are local slices of dimension 0: global index = offset[0]·inner + local index.
    const int64_t inner = e.shape.empty() || e.shape[0] == 0 ? 0 : n / e.shape[0];
    const int64_t first = e.offset.empty() ? 0 : e.offset[0] * inner;
    InitValues(layout.dims(), e, seed, first, n, params + e.buffer_offset);
  }
}

template void InitParams<float>(const ParamLayout&, uint64_t, float*);
template void InitParams<double>(const ParamLayout&, uint64_t, double*);
template void InitValues<float>(const ModelDims&, const ParamEntry&, uint64_t, int64_t, int64_t, float*);
template void InitValues<double>(const ModelDims&, const ParamEntry&, uint64_t, int64_t, int64_t, double*);

}  // namespace multiscreen

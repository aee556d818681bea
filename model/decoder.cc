#include "model/decoder.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/decode_cache.h"
#include "model/decode.h"
#include "model/transformer_decode.h"

namespace multiscreen {

template <typename Real>
std::unique_ptr<Decoder<Real>> MakeDecoder(const ModelDims& dims, const Real* params, const InferenceOptions& options,
                                           const ModelOptions& placement) {
  if (dims.transformer()) return std::make_unique<TransformerDecodeSession<Real>>(dims, params, options, placement);
  return std::make_unique<DecodeSession<Real>>(dims, params, options, placement);
}

template <typename Real>
std::vector<int32_t> GreedyContinuation(Decoder<Real>& decoder, const std::vector<int32_t>& prompt, int64_t max_new,
                                        const OnToken& on_token) {
  for (size_t i = 0; i + 1 < prompt.size(); ++i) decoder.Feed(prompt[i]);
  decoder.Step(prompt.back(), nullptr);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    out.push_back(decoder.Argmax());
    if (on_token && !on_token(out.back())) break;
    if (i + 1 < max_new) decoder.Step(out.back(), nullptr);
  }
  return out;
}

void CheckLogitsReady(bool ready) {
  if (ready) return;
  std::fprintf(stderr, "multiscreen: internal error: Decoder::Argmax without the logits of a Step\n");
  std::abort();
}

template <typename Real>
const Real* GemmOperand(kernels::KernelTable<Real>& ops, Precision precision, const Real* src, int64_t n,
                        DeviceArray<Real>* store) {
  if (precision == Precision::kFp32) return src;
  store->Resize(n);
  ops.Copy(src, n, store->data());
  ops.RoundTo(precision, store->data(), n);
  return store->data();
}

template <typename Real>
std::unique_ptr<kernels::ScreeningCache<Real>> ScreeningCacheFor(Device device, const kernels::ScreeningShape& shape,
                                                                 const std::vector<kernels::TileScalars>& tiles) {
  auto cache = MakeScreeningCache<Real>(device, shape, tiles);
  if (!cache.ok()) FatalModelError("--device=" + DeviceName(device) + ": " + std::string(cache.status().message()));
  return std::move(*cache);
}

template <typename Real>
std::unique_ptr<kernels::AttentionCache<Real>> AttentionCacheFor(Device device,
                                                                 const kernels::AttentionCacheShape& shape) {
  auto cache = MakeAttentionCache<Real>(device, shape);
  if (!cache.ok()) FatalModelError("--device=" + DeviceName(device) + ": " + std::string(cache.status().message()));
  return std::move(*cache);
}

#define MS_INSTANTIATE(Real)                                                                                        \
  template std::unique_ptr<Decoder<Real>> MakeDecoder<Real>(const ModelDims&, const Real*, const InferenceOptions&, \
                                                            const ModelOptions&);                                   \
  template std::vector<int32_t> GreedyContinuation<Real>(Decoder<Real>&, const std::vector<int32_t>&, int64_t,      \
                                                         const OnToken&);                                           \
  template const Real* GemmOperand<Real>(kernels::KernelTable<Real>&, Precision, const Real*, int64_t,             \
                                         DeviceArray<Real>*);                                                       \
  template std::unique_ptr<kernels::ScreeningCache<Real>> ScreeningCacheFor<Real>(                                 \
      Device, const kernels::ScreeningShape&, const std::vector<kernels::TileScalars>&);                            \
  template std::unique_ptr<kernels::AttentionCache<Real>> AttentionCacheFor<Real>(Device,                          \
                                                                                  const kernels::AttentionCacheShape&);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen

#include "model/decoder.h"

#include <algorithm>

#include "model/decode.h"
#include "model/transformer_decode.h"

namespace multiscreen {

template <typename Real>
std::unique_ptr<Decoder<Real>> MakeDecoder(const ModelDims& dims, const Real* params, const InferenceOptions& options) {
  if (dims.transformer()) return std::make_unique<TransformerDecodeSession<Real>>(dims, params, options);
  return std::make_unique<DecodeSession<Real>>(dims, params, options);
}

template <typename Real>
std::vector<int32_t> GreedyContinuation(Decoder<Real>& decoder, const std::vector<int32_t>& prompt, int64_t max_new,
                                        int64_t vocab) {
  std::vector<Real> logits(vocab);
  for (int32_t id : prompt) decoder.Step(id, logits.data());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < max_new) decoder.Step(out.back(), logits.data());
  }
  return out;
}

template std::vector<int32_t> GreedyContinuation<float>(Decoder<float>&, const std::vector<int32_t>&, int64_t, int64_t);
template std::vector<int32_t> GreedyContinuation<double>(Decoder<double>&, const std::vector<int32_t>&, int64_t,
                                                         int64_t);
template std::unique_ptr<Decoder<float>> MakeDecoder<float>(const ModelDims&, const float*, const InferenceOptions&);
template std::unique_ptr<Decoder<double>> MakeDecoder<double>(const ModelDims&, const double*,
                                                              const InferenceOptions&);

}  // namespace multiscreen

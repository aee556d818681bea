// Token-by-token greedy decoding with a cache, for either model family (spec
// "Inference"; issue 18 for the Transformer's KV cache): the interface `generate` and
// `eval` use, and the factory that picks the family's session (model/decode.h for
// Multiscreen, model/transformer_decode.h for the Transformer baseline). On the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "model/tile_weights.h"

namespace multiscreen {

template <typename Real>
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Feeds the token at absolute position position(); writes logits [V] for the next
  // token, equal (to rounding) to the last row of the whole model's forward over the
  // tokens fed so far.
  virtual void Step(int32_t token, Real* logits) = 0;
  virtual int64_t position() const = 0;
};

// The decoder of dims.family over `params` (the full layout's buffer, ShardSpec::Full,
// read during the session). `options` is Multiscreen's window rule (the Transformer
// has no windows and ignores it).
template <typename Real>
std::unique_ptr<Decoder<Real>> MakeDecoder(const ModelDims& dims, const Real* params, const InferenceOptions& options);

// Greedy continuation: feeds `prompt` (non-empty) to a fresh decoder, then `max_new`
// times the argmax of the logits (the lowest id on ties); returns those tokens. What
// `multiscreen generate` prints and eval's abcdigits/passkey score.
template <typename Real>
std::vector<int32_t> GreedyContinuation(Decoder<Real>& decoder, const std::vector<int32_t>& prompt, int64_t max_new,
                                        int64_t vocab);

}  // namespace multiscreen

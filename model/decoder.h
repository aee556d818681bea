// Token-by-token greedy decoding with a cache, for either model family (spec
// "Inference"; issue 18 for the Transformer's KV cache): the interface `generate` and
// `eval` use, and the factory that picks the family's session (model/decode.h for
// Multiscreen, model/transformer_decode.h for the Transformer baseline). Each session is
// written once over a kernel table and the per-layer decoding caches of
// kernels/decode_cache.h, so it decodes on the CPU (the default, any Real) or on a CUDA
// device (ModelOptions::device, float; issue 29) with the same orchestration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/config.h"
#include "kernels/decode_cache.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "model/model_stage.h"
#include "model/tile_weights.h"

namespace multiscreen {

template <typename Real>
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Feeds the token at absolute position position(); writes logits [V] (host) for the
  // next token, equal (to rounding) to the last row of the whole model's forward over
  // the tokens fed so far. logits null: they stay where the session runs (for Argmax;
  // nothing crosses from a device).
  virtual void Step(int32_t token, Real* logits) = 0;
  // Feeds the token at position() as Step does but computes no logits (the head's
  // product over the vocabulary, most of a small model's token): a prompt token whose
  // successor is given. The layers' results and caches are Step's, bit for bit.
  virtual void Feed(int32_t token) = 0;
  // The next token's greedy choice from the last Step's logits: their argmax in
  // kernels/cpu/argmax.h's order (the lowest id on ties, the first NaN if any), taken
  // where the session runs (KernelTable::Argmax: from a device one int32 crosses). Only
  // after a Step (after a Feed or none: a caller's bug, fatal).
  virtual int32_t Argmax() = 0;
  virtual int64_t position() const = 0;
};

// The decoder of dims.family over `params` (the full layout's buffer, ShardSpec::Full,
// on placement.device, read during the session). `options` is the inference window rule
// and YaRN (the Transformer has no windows). placement: the device and precision the
// session computes in (device and precision of ModelOptions; the rest does not apply):
// fp32, or bf16 with the forward's rule that GEMM operands hold bf16 values. A device
// without kernels is fatal (one line naming --device): check it first.
template <typename Real>
std::unique_ptr<Decoder<Real>> MakeDecoder(const ModelDims& dims, const Real* params, const InferenceOptions& options,
                                           const ModelOptions& placement = {});

// Called with each greedy token as soon as it is chosen, before the next is decoded;
// false stops the continuation there (generate's streaming and its SIGINT).
using OnToken = std::function<bool(int32_t token)>;

// Greedy continuation: feeds `prompt` (non-empty; Feed, and Step for its last token) to a
// fresh decoder, then up to `max_new`
// times Decoder::Argmax (the lowest id on ties) and feeds it back; returns those tokens,
// fewer when on_token (if given) returned false on the last of them. What `multiscreen
// generate` prints and eval's abcdigits/passkey score. No logits cross to the host.
template <typename Real>
std::vector<int32_t> GreedyContinuation(Decoder<Real>& decoder, const std::vector<int32_t>& prompt, int64_t max_new,
                                        const OnToken& on_token = nullptr);

// `src` [n] (on ops' device) in `precision`'s values: src itself in fp32, else its copy
// in `store` rounded to the precision (the forward's rule: GEMM operands hold the compute
// precision). A weight that is read other than as a GEMM's packed operand (the
// Transformer's embedding table, which the token's gather reads); the GEMMs' weights are
// KernelTable::PackOperand's.
template <typename Real>
const Real* GemmOperand(kernels::KernelTable<Real>& ops, Precision precision, const Real* src, int64_t n,
                        DeviceArray<Real>* store);

// The sessions' Argmax guard: fatal (a caller's bug) unless the last token fed came with
// its logits (Step, not Feed).
void CheckLogitsReady(bool ready);

// The decoding caches of `device` (kernels/decode_cache.h), fatal (one line naming
// --device) where the factories refuse: for the sessions' constructors.
template <typename Real>
std::unique_ptr<kernels::ScreeningCache<Real>> ScreeningCacheFor(Device device, const kernels::ScreeningShape& shape,
                                                                 const std::vector<kernels::TileScalars>& tiles);
template <typename Real>
std::unique_ptr<kernels::AttentionCache<Real>> AttentionCacheFor(Device device,
                                                                 const kernels::AttentionCacheShape& shape);

}  // namespace multiscreen

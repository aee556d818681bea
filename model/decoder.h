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

// A decoding session: the orchestration of a token's (or a chunk's) rows through the
// head, written here once over the family's two operations (FeedRows: the layers and
// their caches; HeadRows: the logits of fed rows). The kernel table, the logits array and
// V are the base's, set by the family's constructor through the protected constructor.
template <typename Real>
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Feeds the token at absolute position position(); writes logits [V] (host) for the
  // next token, equal (to rounding) to the last row of the whole model's forward over
  // the tokens fed so far. logits null: they stay where the session runs (for Argmax;
  // nothing crosses from a device).
  void Step(int32_t token, Real* logits);
  // Feeds tokens [n] (host ids) at positions position() … position() + n − 1 as n Steps
  // would, but computes no logits (the head's product over the vocabulary, most of a
  // small model's token): prompt tokens whose successors are given. The layers take the
  // tokens in chunks of up to feed_rows() rows: each GEMM (the projections, W_O; the
  // Transformer's FFN) multiplies a chunk's rows at once — a long prompt runs at the
  // device's GEMM rate, not as one GEMV per token and layer — while each layer's cache
  // takes the chunk's tokens in order (StepRows of kernels/decode_cache.h), so memory is
  // bounded by the chunk whatever n is. n = 1: the layers' results and caches are Step's,
  // bit for bit; n > 1: equal to n single Feeds up to the products' summation order
  // (bit for bit where the GEMM sums each output in k order whatever m is, as the
  // emulated device's). n = 0 does nothing.
  void Feed(const int32_t* tokens, int64_t n);
  void Feed(int32_t token) { Feed(&token, 1); }
  // Feeds tokens [n] as Feed does and writes losses [n − 1] (host, nats): losses[i] =
  // −log p(tokens[i + 1] | tokens[0..i]), the log-softmax of token i's logits at its
  // successor (eval ppl's decode path: memory the caches and a chunk, not T × activations).
  // Each chunk's logits [rows, V] come from one GEMM, and their log-sum-exp and target
  // logits are taken where the session runs (KernelTable::SoftmaxStats, TargetLogits: 24
  // bytes a token cross from a device instead of 4·V). Equal to Step's logits' losses up
  // to the products' summation order. Argmax after it is a caller's bug (no Step).
  void Losses(const int32_t* tokens, int64_t n, float* losses);
  // Rows of Feed's and Losses' chunks (kFeedRows unless set): 256 tokens make the
  // products of a Ψ = 16 … 32 layer GEMM-shaped (d_E ≥ 256) while a chunk's activations
  // stay a few MB (its logits 256 · V floats: 51 MB at GPT-2's V). Any rows ≥ 1 give the
  // same results up to the products' summation order (bench decode --feed_rows; tests
  // cross chunk boundaries with a few tokens). Fatal below 1 (a caller's bug).
  static constexpr int64_t kFeedRows = 256;
  void set_feed_rows(int64_t rows);
  int64_t feed_rows() const { return feed_rows_; }
  // The next token's greedy choice from the last Step's logits: their argmax in
  // kernels/cpu/argmax.h's order (the lowest id on ties, the first NaN if any), taken
  // where the session runs (KernelTable::Argmax: from a device one int32 crosses). Only
  // after a Step (after a Feed, Losses or none: a caller's bug, fatal).
  int32_t Argmax();
  virtual int64_t position() const = 0;

 protected:
  // The session's kernel table, KernelTableFor(placement) (fatal, one line naming
  // --device, for a device without kernels), and its logits array on placement.device,
  // empty until LogitsRows sizes it; `vocab` is V, the logits' columns.
  Decoder(const ModelOptions& placement, int64_t vocab);
  // The family's layers over tokens [rows] (1 ≤ rows ≤ feed_rows()) at position() …:
  // embedding, every layer (its GEMMs over the rows, its cache through them in order),
  // leaving the final hidden rows for HeadRows; advances position() by rows.
  virtual void FeedRows(const int32_t* tokens, int64_t rows) = 0;
  // The logits [rows, V] of the last FeedRows' first `rows` rows into LogitsRows(rows).
  virtual void HeadRows(int64_t rows) = 0;
  kernels::KernelTable<Real>& ops() { return *ops_; }
  int64_t vocab() const { return vocab_; }
  // The logits array resized to [rows, V] (rows ≥ 1) on the session's device, for
  // HeadRows to write: grows as DeviceArray::Resize does, never shrinks its allocation.
  Real* LogitsRows(int64_t rows) {
    logits_.Resize(rows * vocab_);
    return logits_.data();
  }
  // The logits array as the last HeadRows left it (row 0 first).
  const Real* logits() const { return logits_.data(); }

 private:
  std::unique_ptr<kernels::KernelTable<Real>> ops_;  // declared before logits_: outlives it
  DeviceArray<Real> logits_;
  int64_t vocab_;
  int64_t feed_rows_ = kFeedRows;
  bool logits_ready_ = false;  // logits() hold the last token's (a Step, not a Feed)
  std::vector<int64_t> targets_;  // Losses' targets of a chunk
  std::vector<double> row_max_, row_sum_, target_logit_;
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

// Greedy continuation: feeds `prompt` (non-empty; one Feed of all its tokens but the last
// — chunked GEMMs — and Step for its last token) to a fresh decoder, then up to `max_new`
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

// The decoding caches of `device` (kernels/decode_cache.h), fatal (one line naming
// --device) where the factories refuse: for the sessions' constructors.
template <typename Real>
std::unique_ptr<kernels::ScreeningCache<Real>> ScreeningCacheFor(Device device, const kernels::ScreeningShape& shape,
                                                                 const std::vector<kernels::TileScalars>& tiles);
template <typename Real>
std::unique_ptr<kernels::AttentionCache<Real>> AttentionCacheFor(Device device,
                                                                 const kernels::AttentionCacheShape& shape);

}  // namespace multiscreen

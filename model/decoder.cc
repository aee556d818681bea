#include "model/decoder.h"

#include <algorithm>
#include <cmath>
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
  decoder.Feed(prompt.data(), static_cast<int64_t>(prompt.size()) - 1);
  decoder.Step(prompt.back(), nullptr);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    out.push_back(decoder.Argmax());
    if (on_token && !on_token(out.back())) break;
    if (i + 1 < max_new) decoder.Step(out.back(), nullptr);
  }
  return out;
}

template <typename Real>
Decoder<Real>::Decoder(const ModelOptions& placement, int64_t vocab)
    : ops_(KernelTableFor<Real>(placement)), logits_(placement.device), vocab_(vocab) {}

template <typename Real>
void Decoder<Real>::Step(int32_t token, Real* logits) {
  FeedRows(&token, 1);
  HeadRows(1);
  if (logits != nullptr) ops().Download(this->logits(), vocab(), logits);
  logits_ready_ = true;
}

template <typename Real>
void Decoder<Real>::Feed(const int32_t* tokens, int64_t n) {
  for (int64_t first = 0; first < n; first += feed_rows_) {
    FeedRows(tokens + first, std::min(feed_rows_, n - first));
    logits_ready_ = false;
  }
}

template <typename Real>
void Decoder<Real>::Losses(const int32_t* tokens, int64_t n, float* losses) {
  const int64_t V = vocab();
  for (int64_t first = 0; first < n; first += feed_rows_) {
    const int64_t rows = std::min(feed_rows_, n - first);
    FeedRows(tokens + first, rows);
    logits_ready_ = false;
    // Row r's target is the next token; the sequence's last token has none.
    const int64_t scored = std::min(rows, n - 1 - first);
    if (scored <= 0) break;
    HeadRows(scored);
    targets_.assign(tokens + first + 1, tokens + first + 1 + scored);
    row_max_.resize(scored);
    row_sum_.resize(scored);
    target_logit_.resize(scored);
    ops().SoftmaxStats(logits(), V, scored, V, row_max_.data(), row_sum_.data());
    ops().TargetLogits(logits(), V, scored, targets_.data(), target_logit_.data());
    for (int64_t r = 0; r < scored; ++r) {
      losses[first + r] = static_cast<float>(row_max_[r] + std::log(row_sum_[r]) - target_logit_[r]);
    }
  }
}

template <typename Real>
void Decoder<Real>::set_feed_rows(int64_t rows) {
  if (rows < 1) {
    std::fprintf(stderr, "multiscreen: internal error: Decoder::set_feed_rows(%lld)\n", static_cast<long long>(rows));
    std::abort();
  }
  feed_rows_ = rows;
}

template <typename Real>
int32_t Decoder<Real>::Argmax() {
  if (!logits_ready_) {
    std::fprintf(stderr, "multiscreen: internal error: Decoder::Argmax without the logits of a Step\n");
    std::abort();
  }
  return static_cast<int32_t>(ops().Argmax(logits(), vocab()));
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

template class Decoder<float>;
template class Decoder<double>;

}  // namespace multiscreen

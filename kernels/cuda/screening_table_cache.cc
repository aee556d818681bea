// The CUDA screening kernels' tables kept on the device (screening_table_cache.h).
#include "kernels/cuda/screening_table_cache.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int64_t kAlign = 256;  // each section's start, as cudaMalloc aligns an allocation

int64_t Aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of an entry's sections: params, mask, dmask, chain, rope_freq, end.
struct Layout {
  int64_t params, mask, dmask, chain, rope_freq, end;
};

Layout LayoutOf(int64_t tiles, int64_t mask_ld, int64_t rope_pairs) {
  Layout l{};
  l.params = 0;
  l.mask = Aligned(tiles * int64_t(sizeof(ScreeningTileParams)));
  l.dmask = l.mask + Aligned(tiles * mask_ld * int64_t(sizeof(float)));
  l.chain = l.dmask + Aligned(tiles * mask_ld * int64_t(sizeof(float)));
  l.rope_freq = l.chain + Aligned(tiles * kChain * int64_t(sizeof(double)));
  l.end = l.rope_freq + Aligned(rope_pairs * int64_t(sizeof(double)));
  return l;
}

template <typename T>
void Append(std::vector<unsigned char>* key, T value) {
  const size_t at = key->size();
  key->resize(at + sizeof(T));
  std::memcpy(key->data() + at, &value, sizeof(T));
}

}  // namespace

int64_t ScreeningTablesDeviceBytes(int64_t tiles, int64_t mask_ld, int64_t rope_pairs) {
  return LayoutOf(tiles, mask_ld, rope_pairs).end;
}

std::vector<unsigned char> ScreeningTableKey(const ScreeningShape& shape, const TileScalars* tiles) {
  std::vector<unsigned char> key;
  key.reserve(64 + 32 * static_cast<size_t>(shape.tiles));
  Append(&key, shape.tiles);
  Append(&key, shape.seq);
  Append(&key, shape.d_k);
  Append(&key, shape.w_th);
  Append(&key, static_cast<int32_t>(shape.position));
  if (shape.position == PositionKind::kRope) {
    const cpu::RopeScaling& s = shape.rope_scaling;
    Append(&key, s.factor);
    Append(&key, s.original_len);
    Append(&key, s.alpha);
    Append(&key, s.beta);
    Append(&key, static_cast<int32_t>(s.ramp));
  }
  for (int64_t t = 0; t < shape.tiles; ++t) {
    Append(&key, tiles[t].w);
    Append(&key, tiles[t].r);
    Append(&key, tiles[t].scale);
    Append(&key, tiles[t].mipe_w);
  }
  return key;
}

struct ScreeningTableCache::Entry {
  Entry() {
    MS_CUDA_CHECK("ScreeningTableCache", cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
  }
  ~Entry() {
    cudaEventDestroy(uploaded);
    if (pinned != nullptr) cudaFreeHost(pinned);
  }
  // Before the pinned buffer is written again: the last copy out of it must be done.
  // Free in practice: an entry is recycled in a later step (or after
  // kMaxScreeningTableEntries others), long after its copy, which ran before the kernels
  // of the step that used it, and those were waited for (the step's loss and norm reads).
  void WaitForUpload(const char* op) {
    if (!in_flight) return;
    const cudaError_t done = cudaEventQuery(uploaded);
    if (done == cudaErrorNotReady) {
      MS_CUDA_CHECK(op, cudaEventSynchronize(uploaded));
    } else {
      MS_CUDA_CHECK(op, done);
    }
    in_flight = false;
  }

  std::vector<unsigned char> key;
  bool stale = false;
  uint64_t last_use = 0;
  unsigned char* pinned = nullptr;  // cudaMallocHost, pinned_bytes
  int64_t pinned_bytes = 0;
  DeviceArray<double> device{Device::kCuda};  // the sections (Layout), in 8-byte words
  cudaEvent_t uploaded = nullptr;             // recorded after the copy out of `pinned`
  bool in_flight = false;                     // `uploaded` recorded since the last wait
  ScreeningTables tables;
};

ScreeningTableCache::ScreeningTableCache() = default;
ScreeningTableCache::~ScreeningTableCache() = default;

void ScreeningTableCache::MarkStale() {
  for (auto& e : entries_) e->stale = true;
}

int64_t ScreeningTableCache::device_bytes() const {
  int64_t bytes = 0;
  for (const auto& e : entries_) bytes += e->device.size() * int64_t(sizeof(double));
  return bytes;
}

ScreeningTableCache::Entry* ScreeningTableCache::Recyclable() {
  for (auto& e : entries_) {
    if (e->stale) return e.get();
  }
  if (entries() < kMaxScreeningTableEntries) return nullptr;
  return std::min_element(entries_.begin(), entries_.end(),
                          [](const auto& a, const auto& b) { return a->last_use < b->last_use; })
      ->get();
}

const ScreeningTables& ScreeningTableCache::Get(const char* op, const ScreeningShape& shape, const TileScalars* tiles,
                                                cudaStream_t stream) {
  ++clock_;
  std::vector<unsigned char> key = ScreeningTableKey(shape, tiles);
  for (auto& e : entries_) {
    if (e->key == key) {  // byte for byte
      e->stale = false;
      e->last_use = clock_;
      return e->tables;
    }
  }
  FillScreeningTables(shape, tiles, &host_);
  const int64_t nt = shape.tiles, ld = host_.mask_ld, pairs = static_cast<int64_t>(host_.rope_freq.size());
  const Layout l = LayoutOf(nt, ld, pairs);
  Entry* e = Recyclable();
  if (e == nullptr) {
    entries_.push_back(std::make_unique<Entry>());
    e = entries_.back().get();
  }
  e->WaitForUpload(op);
  if (e->pinned_bytes < l.end) {
    if (e->pinned != nullptr) MS_CUDA_CHECK(op, cudaFreeHost(e->pinned));
    e->pinned = nullptr;
    MS_CUDA_CHECK(op, cudaMallocHost(reinterpret_cast<void**>(&e->pinned), static_cast<size_t>(l.end)));
    e->pinned_bytes = l.end;
  }
  std::memset(e->pinned, 0, static_cast<size_t>(l.end));  // the alignment gaps too: no stale host bytes uploaded
  std::memcpy(e->pinned + l.params, host_.params.data(), nt * sizeof(ScreeningTileParams));
  std::memcpy(e->pinned + l.mask, host_.mask.data(), nt * ld * sizeof(float));
  std::memcpy(e->pinned + l.dmask, host_.dmask.data(), nt * ld * sizeof(float));
  std::memcpy(e->pinned + l.chain, host_.chain.data(), nt * kChain * sizeof(double));
  if (pairs > 0) std::memcpy(e->pinned + l.rope_freq, host_.rope_freq.data(), pairs * sizeof(double));
  // Reuse within the capacity; a growth reallocates without copying the old tables.
  // Stream order keeps the copy after the kernels that read the recycled tables.
  e->device.Resize(0);
  e->device.Resize(l.end / int64_t(sizeof(double)));
  auto* dev = reinterpret_cast<unsigned char*>(e->device.data());
  MS_CUDA_CHECK(op, cudaMemcpyAsync(dev, e->pinned, static_cast<size_t>(l.end), cudaMemcpyHostToDevice, stream));
  MS_CUDA_CHECK(op, cudaEventRecord(e->uploaded, stream));
  e->in_flight = true;
  ScreeningTables& t = e->tables;
  t.params = reinterpret_cast<const ScreeningTileParams*>(dev + l.params);
  t.mask = reinterpret_cast<const float*>(dev + l.mask);
  t.dmask = reinterpret_cast<const float*>(dev + l.dmask);
  t.chain = reinterpret_cast<const double*>(dev + l.chain);
  t.rope_freq = pairs > 0 ? reinterpret_cast<const double*>(dev + l.rope_freq) : nullptr;
  t.mask_ld = ld;
  t.rate_dw = host_.rate_dw;
  e->key = std::move(key);
  e->stale = false;
  e->last_use = clock_;
  ++uploads_;
  return t;
}

}  // namespace multiscreen::kernels::cuda

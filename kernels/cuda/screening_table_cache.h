// The CUDA screening kernels' per-tile tables on the device (screening_tables.h), kept
// between calls and uploaded once per distinct content: a layer's forward and backward of
// every micro-batch in an optimizer step read one upload (the tiles' scalars are fixed
// within a step, Multiscreen::BeginStep), and a hit copies nothing, so the calls that hit
// can be captured into a CUDA graph. A miss fills the tables on the host into the entry's
// pinned buffer (cudaMallocHost: the copy is a true async DMA, not a staged pageable copy
// that may synchronize with the stream) and uploads them with one cudaMemcpyAsync.
// Bounded: MarkStale (KernelTable::BeginScreeningStep, once per step) lets a later miss
// recycle an entry, so a training step holds at most one entry per distinct layer table;
// code that never marks them (inference) keeps one per distinct table seen, at most
// kMaxScreeningTableEntries (then the least recently used is recycled).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/screening_tables.h"
#include "kernels/device_array.h"
#include "kernels/screening_types.h"

namespace multiscreen::kernels::cuda {

inline constexpr int64_t kMaxScreeningTableEntries = 256;

// Device views of one entry's tables (valid until the cache's next Get or MarkStale
// recycles it; every screening call gets them anew).
struct ScreeningTables {
  const ScreeningTileParams* params = nullptr;  // [tiles]
  const float* mask = nullptr;                  // [tiles, mask_ld] m(d)
  const float* dmask = nullptr;                 // [tiles, mask_ld] ∂m/∂w(d)
  const double* chain = nullptr;                // [tiles, kChain] chain-rule factors
  const double* rope_freq = nullptr;            // position ROPE: [d_k/2] θ'_p; null otherwise
  int64_t mask_ld = 1;
  std::vector<double> rate_dw;                  // host [tiles]: dc/dw of the MiPE rate (host-gradient reduction)
};

// The bytes the tables of (shape, tiles) occupy on the device in one entry (each section
// 256-byte aligned): params, mask, dmask, chain, rope_freq. tools/plan_memory.py's
// "screening tables" term is this formula.
int64_t ScreeningTablesDeviceBytes(int64_t tiles, int64_t mask_ld, int64_t rope_pairs);

// The exact inputs of FillScreeningTables as bytes: shape.tiles, seq, d_k, w_th, position,
// rope_scaling (ROPE only) and every tile's w, r, scale, mipe_w. Entries match by
// comparing these bytes, not a hash.
std::vector<unsigned char> ScreeningTableKey(const ScreeningShape& shape, const TileScalars* tiles);

class ScreeningTableCache {
 public:
  ScreeningTableCache();
  ScreeningTableCache(const ScreeningTableCache&) = delete;
  ScreeningTableCache& operator=(const ScreeningTableCache&) = delete;
  ~ScreeningTableCache();

  // The tables of (shape, tiles [shape.tiles], host): an entry's on a hit (nothing
  // copied), else filled and uploaded on `stream` (one cudaMemcpyAsync from pinned memory)
  // into a stale entry, grown as needed, or a new one. Failures are fatal (check.h), named by `op`.
  const ScreeningTables& Get(const char* op, const ScreeningShape& shape, const TileScalars* tiles,
                             cudaStream_t stream);
  // Every entry may be recycled by the next miss (once per optimizer step; a later Get with
  // an entry's content still hits it).
  void MarkStale();

  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t uploads() const { return uploads_; }  // misses so far
  // Device bytes the entries hold (their capacities).
  int64_t device_bytes() const;

 private:
  struct Entry;
  Entry* Recyclable();
  std::vector<std::unique_ptr<Entry>> entries_;
  ScreeningHostTables host_;  // FillScreeningTables's output, copied into the entry's pinned buffer
  int64_t uploads_ = 0;
  uint64_t clock_ = 0;  // Get calls, for least-recently-used recycling
};

}  // namespace multiscreen::kernels::cuda

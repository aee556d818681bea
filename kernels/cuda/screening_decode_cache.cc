// The host half of screening's CUDA decoding cache (screening_decode.h): the units'
// buffers and tables, grown and uploaded here, the kernels launched by ScreenDecodeStep.
// A C++ file, not CUDA: the CPU's softmask.h and mipe.h, which make the tables, are C++20.
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/mipe.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmask.h"
#include "kernels/cuda/screening_decode.h"
#include "kernels/cuda/table_stream.h"
#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {
namespace {

// Slots a growing buffer starts with.
constexpr int64_t kFirstSlots = 64;

class CudaScreeningCache final : public ScreeningCache<float> {
 public:
  CudaScreeningCache(const ScreeningShape& shape, const std::vector<TileScalars>& tiles, int64_t keys_per_block)
      : shape_(shape), slots_(tiles.size(), 0), host_units_(tiles.size()) {
    dims_.tiles = shape.tiles;
    dims_.p_cols = shape.p_cols();
    dims_.keys_per_block = keys_per_block;
    dims_.d_k = static_cast<int>(shape.d_k);
    dims_.d_v = static_cast<int>(shape.d_v);
    dims_.tanh_norm = shape.tanh_norm;
    dims_.gate = shape.output_gate;
    if (shape.position == PositionKind::kRope) {
      std::vector<double> freq(shape.d_k / 2);
      cpu::RopeFrequencies(shape.d_k, shape.rope_scaling, freq.data());
      rope_freq_.Resize(static_cast<int64_t>(freq.size()));
      rope_freq_.CopyFromHost(freq.data());
      dims_.rope_freq = rope_freq_.data();
    }
    for (size_t t = 0; t < tiles.size(); ++t) {
      ScreenDecodeUnit& u = host_units_[t];
      u.r = static_cast<float>(tiles[t].r);
      u.scale = static_cast<float>(tiles[t].scale);
      double rate_dw;
      if (shape.position == PositionKind::kMipe) cpu::MipeRate(tiles[t].mipe_w, shape.w_th, &u.rate, &rate_dw);
      k_.emplace_back(Device::kCuda);
      v_.emplace_back(Device::kCuda);
      mask_.emplace_back(Device::kCuda);
      if (std::isinf(tiles[t].w)) continue;
      u.cap = static_cast<int64_t>(std::ceil(tiles[t].w));
      u.ring = u.cap + kDecodeRows - 1;  // a chunk's new keys spare the keys its first row reads
      std::vector<float> m(u.cap), dm(u.cap);
      cpu::SoftmaskTable(tiles[t].w, u.cap, m.data(), dm.data());
      mask_[t].Resize(u.cap);
      mask_[t].CopyFromHost(m.data());
      u.mask = mask_[t].data();
    }
  }

  void Step(const float* P, int64_t pos, float* U) override {
    Prepare(pos, 1);
    ScreenDecodeRows(dims_, P, dims_.tiles * dims_.p_cols, 1, units_.data(), pos, partial_.data(), U,
                     dims_.tiles * shape_.d_v, TableStream());
  }

  void StepRows(const float* P, int64_t ldp, int64_t rows, int64_t pos0, float* U, int64_t ldu) override {
    for (int64_t first = 0; first < rows; first += kDecodeRows) {
      const int64_t n = std::min(kDecodeRows, rows - first);
      Prepare(pos0 + first, n);
      ScreenDecodeRows(dims_, P + first * ldp, ldp, n, units_.data(), pos0 + first, partial_.data(), U + first * ldu,
                       ldu, TableStream());
    }
  }
  int64_t CachedKeys(int64_t tile, int64_t steps) const override {
    const int64_t cap = host_units_[tile].cap;
    return cap == 0 ? steps : std::min(steps, cap);
  }

 private:
  // Before `rows` tokens from pos0: each unit's buffers hold the slots of their positions
  // (grown by doubling, to the ring's size at most), the launches' key blocks cover the
  // last row's keys, and the partial sums have room for every row.
  void Prepare(int64_t pos0, int64_t rows) {
    const int64_t last = pos0 + rows - 1;
    bool moved = false;
    int64_t most_keys = 1;
    for (size_t t = 0; t < host_units_.size(); ++t) {
      ScreenDecodeUnit& u = host_units_[t];
      most_keys = std::max(most_keys, u.cap == 0 ? last + 1 : std::min(last + 1, u.cap));
      const int64_t needed = u.cap == 0 ? last + 1 : std::min(last + 1, u.ring);
      if (needed <= slots_[t]) continue;
      int64_t slots = std::max({needed, 2 * slots_[t], kFirstSlots});
      if (u.cap != 0) slots = std::min(slots, u.ring);
      k_[t].Resize(slots * shape_.d_k);  // keeps the slots held so far
      v_[t].Resize(slots * shape_.d_v);
      slots_[t] = slots;
      u.k = k_[t].data();
      u.v = v_[t].data();
      moved = true;
    }
    if (moved) {
      units_.Resize(static_cast<int64_t>(host_units_.size()));
      units_.CopyFromHost(host_units_.data());
    }
    dims_.blocks = (most_keys + dims_.keys_per_block - 1) / dims_.keys_per_block;
    partial_.Resize(rows * dims_.tiles * dims_.blocks * shape_.d_v);
  }

  ScreeningShape shape_;
  ScreenDecodeDims dims_;
  std::vector<int64_t> slots_;                      // [tiles]: slots each unit's buffers hold
  std::vector<ScreenDecodeUnit> host_units_;        // [tiles]
  std::vector<DeviceArray<float>> k_, v_, mask_;    // [tiles]
  DeviceArray<ScreenDecodeUnit> units_{Device::kCuda};
  DeviceArray<double> rope_freq_{Device::kCuda};
  DeviceArray<float> partial_{Device::kCuda};
};

}  // namespace

absl::StatusOr<std::unique_ptr<ScreeningCache<float>>> MakeCudaScreeningCache(const ScreeningShape& shape,
                                                                              const std::vector<TileScalars>& tiles,
                                                                              int64_t keys_per_block) {
  if (shape.d_k < 2 || shape.d_k > 64 || shape.d_v < 1 || shape.d_v > 256) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA screening decode: d_K = ", shape.d_k, ", d_V = ", shape.d_v,
                                                   " outside 2 ≤ d_K ≤ 64, 1 ≤ d_V ≤ 256"));
  }
  if (static_cast<int64_t>(tiles.size()) != shape.tiles || keys_per_block < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA screening decode: ", tiles.size(), " tile scalars for ",
                                                   shape.tiles, " tiles, ", keys_per_block, " keys per block"));
  }
  return std::unique_ptr<ScreeningCache<float>>(new CudaScreeningCache(shape, tiles, keys_per_block));
}

}  // namespace multiscreen::kernels::cuda

#include "checkpoint/streamed_read.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/h5_file.h"
#include "checkpoint/weights_file.h"
#include "common/crc32c.h"
#include "common/status.h"

namespace multiscreen {
namespace {

// Rows and elements per row of a tensor of `shape` (a scalar is one row of one).
std::pair<int64_t, int64_t> RowsAndInner(const std::vector<int64_t>& shape) {
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
  return {shape.empty() ? 1 : shape[0], inner};
}

}  // namespace

absl::StatusOr<StreamedWeights> OpenWeightsFileStreamed(const std::string& path, int64_t block_bytes) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<H5Reader> in, H5Reader::Open(path));
  StreamedWeights r;
  MS_ASSIGN_OR_RETURN(r.dims, ReadModelDims(*in));
  auto layout = std::make_shared<ParamLayout>(r.dims, ShardSpec::Full(r.dims));
  MS_RETURN_IF_ERROR(CheckWeightsFileDatasets(*in, *layout));
  r.verify = [in, layout, path, block_bytes]() -> absl::Status {
    const ParamLayout& full = *layout;
    for (const ParamEntry& e : full.entries()) MS_RETURN_IF_ERROR(CheckDatasetHolds(*in, e.name, e.global_shape));
    MS_ASSIGN_OR_RETURN(const int64_t stored, StoredParamsCrc(*in));
    // The checksum covers the parameters in the full layout's buffer order.
    Crc32cStream crc;
    std::vector<float> block;
    for (const ParamEntry& e : full.entries()) {
      const auto [rows, inner] = RowsAndInner(e.global_shape);
      const int64_t step = BlockRows(inner, block_bytes);
      for (int64_t row = 0; row < rows; row += step) {
        const int64_t n = std::min(step, rows - row);
        block.resize(n * inner);
        MS_RETURN_IF_ERROR(in->ReadRows(e.name, row, n, block.data()));
        if (auto s = CheckFinite(block.data(), n * inner, path, e.name); !s.ok()) {
          return absl::DataLossError(absl::StrCat(s.message(), " of rows [", row, ", ", row + n, ")"));
        }
        crc.Update(block.data(), block.size() * sizeof(float));
      }
    }
    if (stored >= 0 && stored != int64_t{crc.value()}) {
      return absl::DataLossError(absl::StrCat(path, ": the parameters fail their CRC-32C (stored ", stored, ", computed ",
                                              crc.value(),
                                              "): the file is corrupted, or was edited without deleting that attribute"));
    }
    return absl::OkStatus();
  };
  r.source = [in, layout, path](const std::string& name, int64_t first, int64_t n, float* out) -> absl::Status {
    const ParamEntry* e = layout->Find(name);
    if (e == nullptr || first < 0 || n < 0 || first + n > e->global_size()) {
      return absl::InternalError(absl::StrCat(path, ": no elements [", first, ", ", first + n, ") of ", name));
    }
    const int64_t inner = RowsAndInner(e->global_shape).second;
    const int64_t row0 = first / inner, row1 = (first + n + inner - 1) / inner;
    if (row0 * inner == first && row1 * inner == first + n) return in->ReadRows(name, row0, row1 - row0, out);
    std::vector<float> scratch((row1 - row0) * inner);
    MS_RETURN_IF_ERROR(in->ReadRows(name, row0, row1 - row0, scratch.data()));
    std::copy(scratch.begin() + (first - row0 * inner), scratch.begin() + (first - row0 * inner) + n, out);
    return absl::OkStatus();
  };
  return r;
}

template <typename Real>
absl::Status FillShardParams(const TensorSource& source, const ParamLayout& layout, int64_t block_bytes,
                             Real* params) {
  std::vector<float> block;
  for (const ParamEntry& e : layout.entries()) {
    const auto [rows, inner] = RowsAndInner(e.shape);
    const int64_t row_offset = e.offset.empty() ? 0 : e.offset[0];
    const int64_t step = BlockRows(inner, block_bytes);
    for (int64_t row = 0; row < rows; row += step) {
      const int64_t n = std::min(step, rows - row) * inner;
      Real* out = params + e.buffer_offset + row * inner;
      if constexpr (std::is_same_v<Real, float>) {
        MS_RETURN_IF_ERROR(source(e.name, (row_offset + row) * inner, n, out));
      } else {
        block.resize(n);
        MS_RETURN_IF_ERROR(source(e.name, (row_offset + row) * inner, n, block.data()));
        std::copy(block.begin(), block.end(), out);
      }
    }
  }
  return absl::OkStatus();
}

template absl::Status FillShardParams<float>(const TensorSource&, const ParamLayout&, int64_t, float*);
template absl::Status FillShardParams<double>(const TensorSource&, const ParamLayout&, int64_t, double*);

}  // namespace multiscreen

#include "checkpoint/streamed_write.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/h5_file.h"
#include "checkpoint/weights_file.h"
#include "common/crc32c.h"
#include "common/status.h"
#include "model/init.h"
#include "model/param_layout.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kMomentPrefixes[] = {"adam_m/", "adam_v/"};

// The parameter name of `name` (adam_m/X and adam_v/X are X's moments), and
// whether it is a moment.
std::pair<std::string, bool> ParamName(const std::string& name) {
  for (const char* prefix : kMomentPrefixes) {
    if (name.rfind(prefix, 0) == 0) return {name.substr(std::strlen(prefix)), true};
  }
  return {name, false};
}

bool AllZeroBits(const float* data, int64_t n) {
  // +0.0 only: −0.0 is written (its bits are not the fill value's).
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  const int64_t size = n * int64_t(sizeof(float));
  for (int64_t i = 0; i < size; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

// Writes one dataset of `shape` whose element 0 is global element `first` of
// tensor `name`, block by block from source: the CRC-32C of its data (and of
// `total`, when given, over the same bytes). Blocks of zero bits are skipped
// when skip_zero_blocks. `cancelled` true before a block: CANCELLED.
absl::StatusOr<uint32_t> WriteDatasetStreamed(H5Writer& out, const std::string& dataset, const std::string& tensor,
                                              const std::vector<int64_t>& shape, int64_t first,
                                              const TensorSource& source, int64_t block_bytes, bool skip_zero_blocks,
                                              std::vector<float>& buffer, Crc32cStream* total,
                                              const std::function<bool()>& cancelled) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
  // Blocks of equal rows: HDF5 allocates the last chunk whole, so a short last
  // block would waste up to a block of disk per dataset.
  const int64_t blocks = (rows + BlockRows(inner, block_bytes) - 1) / BlockRows(inner, block_bytes);
  const int64_t block_rows = std::max<int64_t>(1, (rows + blocks - 1) / std::max<int64_t>(1, blocks));
  MS_RETURN_IF_ERROR(out.CreateRows(dataset, shape, block_rows));
  Crc32cStream crc;
  for (int64_t r = 0; r < rows; r += block_rows) {
    const int64_t n_rows = std::min(block_rows, rows - r);
    const int64_t n = n_rows * inner;
    if (n == 0) continue;
    if (cancelled && cancelled()) return absl::CancelledError(absl::StrCat(dataset, ": interrupted"));
    if (int64_t(buffer.size()) < n) buffer.resize(n);
    MS_RETURN_IF_ERROR(source(tensor, first + r * inner, n, buffer.data()));
    crc.Update(buffer.data(), n * sizeof(float));
    if (total != nullptr) total->Update(buffer.data(), n * sizeof(float));
    if (skip_zero_blocks && !shape.empty() && AllZeroBits(buffer.data(), n)) continue;
    MS_RETURN_IF_ERROR(out.WriteRows(dataset, r, n_rows, buffer.data()));
  }
  return crc.value();
}

// The global element of a slice dataset's element 0 (offset[0] rows of the
// tensor's inner size), or a piece's flat_offset.
int64_t FirstElement(const ExpectedDataset& d) {
  if (d.flat_offset >= 0) return d.flat_offset;
  int64_t inner = 1;
  for (size_t i = 1; i < d.shape.size(); ++i) inner *= d.shape[i];
  return (d.offset.empty() ? 0 : d.offset[0]) * inner;
}

// One file of a checkpoint: its root attributes, then each dataset.
absl::StatusOr<json> WriteCheckpointFile(const std::string& path, const std::string& name, const ExpectedFile& datasets,
                                         const CheckpointMeta& meta, const TensorSource& source, int64_t block_bytes,
                                         std::vector<float>& buffer, const std::function<bool()>& cancelled) {
  MS_ASSIGN_OR_RETURN(auto out, H5Writer::Create(path));
  long long pp = 0, tp = 0, dp = 0;
  if (std::sscanf(name.c_str(), "optim_pp%lld_tp%lld_dp%lld.h5", &pp, &tp, &dp) == 3) {
    const int64_t p = pp, t = tp, d = dp;
    // DataParallel's split: dp rank d owns flat elements [d·S, (d+1)·S) ∩ [0, size), S = ⌈size/dp⌉.
    const ParamLayout l(meta.dims, ShardSpec::ForRank(meta.dims, meta.layout.tp, meta.layout.pp, t, p));
    const int64_t per_rank = (l.size() + meta.layout.dp - 1) / meta.layout.dp;
    const int64_t begin = std::min(l.size(), d * per_rank), end = std::min(l.size(), begin + per_rank);
    MS_RETURN_IF_ERROR(out->WriteAttribute("format", std::string("multiscreen-checkpoint-optimizer")));
    MS_RETURN_IF_ERROR(out->WriteAttribute("flat_begin", begin));
    MS_RETURN_IF_ERROR(out->WriteAttribute("flat_end", end));
  } else {
    std::sscanf(name.c_str(), "shard_pp%lld_tp%lld.h5", &pp, &tp);
    MS_RETURN_IF_ERROR(out->WriteAttribute("format", std::string("multiscreen-checkpoint-shard")));
    MS_RETURN_IF_ERROR(out->WriteAttribute("pp_rank", int64_t(pp)));
    MS_RETURN_IF_ERROR(out->WriteAttribute("tp_rank", int64_t(tp)));
  }
  json sums = json::object();
  for (const auto& [dataset, where] : datasets) {
    MS_ASSIGN_OR_RETURN(const uint32_t crc,
                        WriteDatasetStreamed(*out, dataset, dataset, where.shape, FirstElement(where), source,
                                             block_bytes, /*skip_zero_blocks=*/true, buffer, nullptr, cancelled));
    if (where.flat_offset >= 0) {
      MS_RETURN_IF_ERROR(out->WriteDatasetAttributes(
          dataset, {{"global_shape", where.global_shape}, {"flat_offset", {where.flat_offset}}}));
    } else {
      MS_RETURN_IF_ERROR(
          out->WriteDatasetAttributes(dataset, {{"global_shape", where.global_shape}, {"offset", where.offset}}));
    }
    sums[dataset] = crc;
  }
  MS_RETURN_IF_ERROR(out->Commit(cancelled));
  return json{{"bytes", static_cast<int64_t>(fs::file_size(path))}, {"datasets", sums}};
}

// The consolidated weights file, as WriteWeightsStreamed says; any CANCELLED as it came.
absl::Status WriteWeightsFile(const std::string& path, const ModelDims& dims, const TensorSource& source,
                              int64_t block_bytes, const std::function<bool()>& cancelled) {
  MS_ASSIGN_OR_RETURN(auto out, H5Writer::Create(path));
  MS_RETURN_IF_ERROR(WriteModelDims(*out, dims));
  const ParamLayout full(dims, ShardSpec::Full(dims));
  Crc32cStream total;  // params_crc32c: all parameters in ParamLayout order
  std::vector<float> buffer;
  for (const ParamEntry& e : full.entries()) {
    MS_RETURN_IF_ERROR(WriteDatasetStreamed(*out, e.name, e.name, e.global_shape, 0, source, block_bytes,
                                            /*skip_zero_blocks=*/false, buffer, &total, cancelled)
                           .status());
  }
  MS_RETURN_IF_ERROR(out->WriteAttribute("params_crc32c", int64_t{total.value()}));
  return out->Commit(cancelled);
}  // the writer, destroyed uncommitted, removes its temporary

// What an interrupted writer returns: `temporary` is gone by the time it is read.
absl::Status Interrupted(const std::string& target, const std::string& temporary) {
  return absl::CancelledError(absl::StrCat(target, ": interrupted; the unfinished ", temporary,
                                           " removed, nothing written in its place"));
}

// Where each range of a tensor lives in a checkpoint's files.
struct Holding {
  size_t file = 0;
  int64_t begin = 0, count = 0, inner = 1;
};

}  // namespace

int64_t BlockRows(int64_t inner, int64_t block_bytes) {
  return std::max<int64_t>(1, block_bytes / std::max<int64_t>(1, inner * int64_t(sizeof(float))));
}

TensorSource InitSource(const ModelDims& dims, uint64_t seed, int threads) {
  auto full = std::make_shared<ParamLayout>(dims, ShardSpec::Full(dims));
  threads = std::max(1, threads);
  return [dims, seed, threads, full](const std::string& name, int64_t first, int64_t n, float* out) -> absl::Status {
    const auto [param, moment] = ParamName(name);
    const ParamEntry* e = full->Find(param);
    if (e == nullptr) return absl::InternalError(absl::StrCat("init: no tensor ", param, " in ", dims.name));
    if (first < 0 || n < 0 || first + n > e->global_size()) {
      return absl::InternalError(absl::StrCat("init: elements [", first, ", ", first + n, ") outside ", name));
    }
    if (moment) {  // Adam's moments start at 0
      std::fill(out, out + n, 0.0f);
      return absl::OkStatus();
    }
    // Each element is a pure function of (seed, name, index): any split of the
    // range over threads gives the same bits.
    const int64_t parts = std::min<int64_t>(threads, std::max<int64_t>(1, n / 65536));
    if (parts <= 1) {
      InitValues(dims, *e, seed, first, n, out);
      return absl::OkStatus();
    }
    std::vector<std::thread> workers;
    for (int64_t i = 0; i < parts; ++i) {
      const auto [lo, hi] = SplitRange(n, parts, i);
      workers.emplace_back([&, lo = lo, hi = hi] { InitValues(dims, *e, seed, first + lo, hi - lo, out + lo); });
    }
    for (std::thread& w : workers) w.join();
    return absl::OkStatus();
  };
}

absl::StatusOr<TensorSource> CheckpointSource(const CheckpointRef& ckpt) {
  auto files = std::make_shared<std::vector<std::shared_ptr<H5Reader>>>();
  auto index = std::make_shared<std::map<std::string, std::vector<Holding>>>();
  for (const auto& [file, record] : ckpt.manifest["files"].items()) {
    MS_ASSIGN_OR_RETURN(auto reader, CheckpointFile(ckpt, file));
    for (const auto& [name, crc] : record["datasets"].items()) {
      MS_ASSIGN_OR_RETURN(const auto shape, reader->Shape(name));
      Holding h{files->size(), 0, shape.empty() ? 1 : shape[0], 1};
      for (size_t d = 1; d < shape.size(); ++d) h.inner *= shape[d];
      h.count *= h.inner;
      if (auto flat = reader->ReadDatasetAttribute(name, "flat_offset"); flat.ok() && flat->size() == 1) {
        h.begin = (*flat)[0];
      } else {
        MS_ASSIGN_OR_RETURN(const auto offset, reader->ReadDatasetAttribute(name, "offset"));
        h.begin = (offset.empty() ? 0 : offset[0]) * h.inner;
      }
      (*index)[name].push_back(h);
    }
    files->push_back(std::move(reader));
  }
  auto scratch = std::make_shared<std::vector<float>>();
  const std::string dir = ckpt.dir;
  return TensorSource([files, index, scratch, dir](const std::string& name, int64_t first, int64_t n,
                                                   float* out) -> absl::Status {
    const auto it = index->find(name);
    if (it == index->end()) return absl::DataLossError(absl::StrCat(dir, ": no file holds ", name));
    // Replicas (W_E on the first and last stage, scalars on every tp rank)
    // hold the same range: each distinct range is read once. The layout's
    // ranges are disjoint otherwise (OpenCheckpoint checked every offset).
    std::set<std::pair<int64_t, int64_t>> used;
    int64_t covered = 0;
    for (const Holding& h : it->second) {
      const int64_t lo = std::max(first, h.begin), hi = std::min(first + n, h.begin + h.count);
      if (lo >= hi || !used.insert({h.begin, h.count}).second) continue;
      const int64_t row0 = (lo - h.begin) / h.inner, row1 = (hi - h.begin + h.inner - 1) / h.inner;
      const int64_t elements = (row1 - row0) * h.inner;
      if (int64_t(scratch->size()) < elements) scratch->resize(elements);
      MS_RETURN_IF_ERROR((*files)[h.file]->ReadRows(name, row0, row1 - row0, scratch->data()));
      const int64_t skip = lo - (h.begin + row0 * h.inner);
      std::copy(scratch->data() + skip, scratch->data() + skip + (hi - lo), out + (lo - first));
      covered += hi - lo;
    }
    if (covered != n) {
      return absl::DataLossError(absl::StrCat(dir, ": ", name, " covers ", covered, " of the ", n,
                                              " elements [", first, ", ", first + n, ") needed"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> WriteCheckpointStreamed(const std::string& run_dir, const CheckpointMeta& meta,
                                                    const TensorSource& source, int64_t block_bytes,
                                                    const std::function<bool()>& cancelled) {
  MS_ASSIGN_OR_RETURN(const std::string tmp, BeginCheckpoint(run_dir, meta.step));
  int64_t bytes = 0;
  for (const ShardPlan& p : PlanCheckpoint(meta.dims, meta.layout)) bytes += p.weight_bytes + p.moment_bytes;
  json files = json::object();
  std::vector<float> buffer;
  for (const auto& [name, datasets] : ExpectedContents(meta.dims, meta.layout)) {
    auto record =
        WriteCheckpointFile((fs::path(tmp) / name).string(), name, datasets, meta, source, block_bytes, buffer, cancelled);
    if (absl::IsCancelled(record.status()) || (record.ok() && cancelled && cancelled())) {
      return AbandonCheckpoint(tmp, Interrupted(run_dir, tmp), bytes);
    }
    if (!record.ok()) return AbandonCheckpoint(tmp, record.status(), bytes);
    files[name] = *std::move(record);
  }
  auto dir = CommitCheckpoint(run_dir, tmp, meta, files, /*keep_last=*/1, /*keep_every=*/0);
  if (!dir.ok() && fs::exists(tmp)) return AbandonCheckpoint(tmp, dir.status(), bytes);
  return dir;
}

absl::Status WriteWeightsStreamed(const std::string& path, const ModelDims& dims, const TensorSource& source,
                                  int64_t block_bytes, const std::function<bool()>& cancelled) {
  const absl::Status status = WriteWeightsFile(path, dims, source, block_bytes, cancelled);
  return absl::IsCancelled(status) ? Interrupted(path, path + ".tmp") : status;
}

}  // namespace multiscreen

#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <chrono>
#include <thread>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "checkpoint/h5_file.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/status.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kManifest[] = "manifest.json";
constexpr char kLatest[] = "latest";
constexpr char kUnverified[] = "unverified";

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return WriteError(path, "cannot open for fsync", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return WriteError(path, "fsync failed", err);
  return absl::OkStatus();
}

// Writes `text` to `path` atomically (temporary file, fsync, rename, fsync dir).
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) return WriteError(tmp, "cannot create", errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0;
  const int err = errno;
  std::fclose(out);
  if (!written) {
    std::remove(tmp.c_str());
    return WriteError(tmp, "write failed", err);
  }
  MS_RETURN_IF_ERROR(FsyncPath(tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return WriteError(path, "rename failed", errno);
  return FsyncPath(fs::path(path).parent_path().string());
}

json DimsToJson(const ModelDims& d) {
  return {{"name", d.name}, {"n_layers", d.n_layers}, {"n_heads", d.n_heads}, {"d_e", d.d_e},
          {"d_k", d.d_k},   {"d_v", d.d_v},           {"vocab", d.vocab},     {"w_th", d.w_th},
          {"pl_norm", d.pl_norm}, {"eos_token", d.eos_token}, {"family", FamilyName(d.family)},
          {"qk_norm", d.qk_norm}, {"sio", d.sio}, {"tanh_norm", d.tanh_norm},
          {"attention", AttentionKindName(d.attention)}, {"position", kernels::PositionKindName(d.position)},
          {"output_gate", d.output_gate}, {"sigmoid_bias", SigmoidBiasName(d.sigmoid_bias)}};
}

json MetaToJson(const CheckpointMeta& m) {
  json j = {{"format", "multiscreen-checkpoint"},
          {"format_version", 1},
          {"step", m.step},
          {"samples", m.samples},
          {"tokens", m.tokens},
          {"lr_schedule", {{"step", m.step}}},
          {"optimizer", {{"adam_step", m.adam_step}}},
          {"loss_scaler", {{"scale", m.loss_scale}, {"good_steps", m.loss_scale_good_steps}, {"skipped", m.loss_scale_skipped}}},
          {"nonfinite_in_a_row", m.nonfinite_in_a_row},
          // Initialization and data windows are pure functions of (seed, index):
          // the seed and the samples counter are the whole random state.
          {"rng", {{"seed", m.seed}, {"data_samples_consumed", m.samples}}},
          {"layout", {{"tp", m.layout.tp}, {"pp", m.layout.pp}, {"dp", m.layout.dp}, {"zero", m.layout.zero}}},
          {"model", DimsToJson(m.dims)},
          {"build", {{"version", ThisBuild().version}, {"commit", ThisBuild().commit}}}};
  if (m.data.is_object()) j["data"] = m.data;
  return j;
}

// The manifest's fields, read with their JSON types checked: every error is
// one line naming the manifest and the field ("model.vocab is a string,
// expected an integer").
class ManifestFields {
 public:
  // `prefix` names `root` within the manifest ("files.shard_pp0_tp0.h5.").
  ManifestFields(const json& root, std::string path, std::string prefix = "")
      : root_(root), path_(std::move(path)), prefix_(std::move(prefix)) {}

  absl::Status Error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": field ", prefix_, field, " ", what));
  }
  // The value at a dotted path ("loss_scaler.scale").
  absl::StatusOr<const json*> Get(const std::string& field) const {
    const json* at = &root_;
    for (const std::string& key : std::vector<std::string>(absl::StrSplit(field, '.'))) {
      if (!at->is_object()) return Error(field, "cannot be read: its parent is not an object");
      const auto it = at->find(key);
      if (it == at->end()) return Error(field, "is missing");
      at = &*it;
    }
    return at;
  }
  absl::StatusOr<const json*> Typed(const std::string& field, bool ok_type(const json&), const char* expected) const {
    MS_ASSIGN_OR_RETURN(const json* v, Get(field));
    if (!ok_type(*v)) return Error(field, absl::StrCat("is ", Describe(*v), ", expected ", expected));
    return v;
  }
  // An integer (not a float, string or bool) in [lo, hi].
  absl::StatusOr<int64_t> Int(const std::string& field, int64_t lo, int64_t hi) const {
    MS_ASSIGN_OR_RETURN(const json* v, Typed(field, [](const json& j) { return j.is_number_integer(); }, "an integer"));
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
      return Error(field, absl::StrCat("= ", v->dump(), " is outside [", lo, ", ", hi, "]"));
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return Error(field, absl::StrCat("= ", x, " is outside [", lo, ", ", hi, "]"));
    return x;
  }
  // A finite number (integer or float) > 0.
  absl::StatusOr<double> Positive(const std::string& field) const {
    MS_ASSIGN_OR_RETURN(const json* v, Typed(field, [](const json& j) { return j.is_number(); }, "a number"));
    const double x = v->get<double>();
    if (!std::isfinite(x) || !(x > 0)) return Error(field, absl::StrCat("= ", x, " must be finite and positive"));
    return x;
  }
  absl::StatusOr<std::string> String(const std::string& field) const {
    MS_ASSIGN_OR_RETURN(const json* v, Typed(field, [](const json& j) { return j.is_string(); }, "a string"));
    return v->get<std::string>();
  }
  absl::StatusOr<bool> Bool(const std::string& field) const {
    MS_ASSIGN_OR_RETURN(const json* v, Typed(field, [](const json& j) { return j.is_boolean(); }, "true or false"));
    return v->get<bool>();
  }
  absl::StatusOr<const json*> Object(const std::string& field) const {
    return Typed(field, [](const json& j) { return j.is_object(); }, "an object");
  }

  static std::string Describe(const json& v) {
    switch (v.type()) {
      case json::value_t::number_float: return absl::StrCat("the float ", v.dump());
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::null: return "null";
      case json::value_t::array: return "an array";
      case json::value_t::object: return "an object";
      default: return absl::StrCat("the number ", v.dump());
    }
  }

 private:
  const json& root_;
  std::string path_, prefix_;
};

// Counters in a manifest: 2^50 samples is far past any corpus (and leaves the
// loader room to count on); tokens are samples × seq_len.
constexpr int64_t kMaxCount = int64_t{1} << 50;
constexpr int64_t kMaxTokens = int64_t{1} << 62;
constexpr int kFormatVersion = 1;
// Far above the largest layout's manifest (psi64 at tp = 8, pp = 8: about 4 MB).
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;

}  // namespace

absl::StatusOr<CheckpointMeta> ValidateManifest(const json& j, const std::string& path) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  const ManifestFields f(j, path);
  MS_ASSIGN_OR_RETURN(const std::string format, f.String("format"));
  if (format != "multiscreen-checkpoint") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a multiscreen checkpoint manifest (format \"", format,
                                                   "\")"));
  }
  MS_ASSIGN_OR_RETURN(const int64_t version, f.Int("format_version", 0, INT64_MAX));
  if (version != kFormatVersion) {
    return f.Error("format_version", absl::StrCat("= ", version, " is not one this build reads (", kFormatVersion, ")"));
  }
  CheckpointMeta m;
  // The model first: the layout is checked against it.
  ModelDims& d = m.dims;
  MS_RETURN_IF_ERROR(f.Object("model").status());
  MS_ASSIGN_OR_RETURN(d.name, f.String("model.name"));
  // Wide bounds here (type and sign); CheckModelDims says which size is wrong.
  MS_ASSIGN_OR_RETURN(d.n_layers, f.Int("model.n_layers", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.n_heads, f.Int("model.n_heads", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.d_e, f.Int("model.d_e", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.d_k, f.Int("model.d_k", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.d_v, f.Int("model.d_v", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.vocab, f.Int("model.vocab", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(d.w_th, f.Positive("model.w_th"));
  MS_ASSIGN_OR_RETURN(d.pl_norm, f.Bool("model.pl_norm"));
  MS_ASSIGN_OR_RETURN(d.eos_token, f.Int("model.eos_token", INT64_MIN, INT64_MAX));
  // The family and the Transformer's switches (absent in manifests written before them: Multiscreen).
  if (j["model"].contains("family")) {
    MS_ASSIGN_OR_RETURN(const std::string family, f.String("model.family"));
    if (family != "multiscreen" && family != "transformer") {
      return f.Error("model.family", absl::StrCat("= \"", family, "\" is not multiscreen or transformer"));
    }
    d.family = family == "transformer" ? ModelFamily::kTransformer : ModelFamily::kMultiscreen;
    MS_ASSIGN_OR_RETURN(d.qk_norm, f.Bool("model.qk_norm"));
    MS_ASSIGN_OR_RETURN(d.sio, f.Bool("model.sio"));
  }
  // The tanh_norm switch (absent in manifests written before it: on).
  if (j["model"].contains("tanh_norm")) {
    MS_ASSIGN_OR_RETURN(d.tanh_norm, f.Bool("model.tanh_norm"));
  }
  // Multiscreen's position and output_gate switches (absent in manifests written before them:
  // MiPE, gate on).
  if (j["model"].contains("position")) {
    MS_ASSIGN_OR_RETURN(const std::string position, f.String("model.position"));
    if (!kernels::ParsePositionKind(position, &d.position)) {
      return f.Error("model.position", absl::StrCat("= \"", position, "\" is not mipe, nope or rope"));
    }
  }
  if (j["model"].contains("output_gate")) {
    MS_ASSIGN_OR_RETURN(d.output_gate, f.Bool("model.output_gate"));
  }
  // The attention mechanism (absent in manifests written before it: softmax).
  if (j["model"].contains("attention")) {
    MS_ASSIGN_OR_RETURN(const std::string attention, f.String("model.attention"));
    if (!ParseAttentionKind(attention, &d.attention)) {
      return f.Error("model.attention",
                     absl::StrCat("= \"", attention, "\" is not softmax, softmax1, ssmax, sigmoid, entmax15 or screening"));
    }
  }
  // Sigmoid attention's bias (absent in manifests written before it: a sigmoid model was
  // trained with the per-query form then).
  if (j["model"].contains("sigmoid_bias")) {
    MS_ASSIGN_OR_RETURN(const std::string bias, f.String("model.sigmoid_bias"));
    if (!ParseSigmoidBias(bias, &d.sigmoid_bias)) {
      return f.Error("model.sigmoid_bias", absl::StrCat("= \"", bias, "\" is not train_length or per_query"));
    }
  } else if (d.attention == AttentionKind::kSigmoid) {
    d.sigmoid_bias = SigmoidBias::kPerQuery;
  }
  MS_RETURN_IF_ERROR(CheckModelDims(d, path, "model."));
  MS_RETURN_IF_ERROR(f.Object("layout").status());
  MS_ASSIGN_OR_RETURN(m.layout.tp, f.Int("layout.tp", 1, d.n_heads));
  MS_ASSIGN_OR_RETURN(m.layout.pp, f.Int("layout.pp", 1, d.n_layers));
  MS_ASSIGN_OR_RETURN(m.layout.dp, f.Int("layout.dp", 1, int64_t{1} << 20));
  MS_ASSIGN_OR_RETURN(m.layout.zero, f.Int("layout.zero", 0, 1));
  if (d.n_heads % m.layout.tp != 0) {
    return f.Error("layout.tp", absl::StrCat("= ", m.layout.tp, " does not divide model.n_heads = ", d.n_heads));
  }
  if (d.n_layers % m.layout.pp != 0) {
    return f.Error("layout.pp", absl::StrCat("= ", m.layout.pp, " does not divide model.n_layers = ", d.n_layers));
  }
  // Run state.
  MS_ASSIGN_OR_RETURN(m.step, f.Int("step", 0, kMaxCount));
  MS_ASSIGN_OR_RETURN(m.samples, f.Int("samples", 0, kMaxCount));
  MS_ASSIGN_OR_RETURN(m.tokens, f.Int("tokens", 0, kMaxTokens));
  MS_ASSIGN_OR_RETURN(const int64_t schedule_step, f.Int("lr_schedule.step", 0, kMaxCount));
  if (schedule_step != m.step) {
    return f.Error("lr_schedule.step", absl::StrCat("= ", schedule_step, " differs from step = ", m.step));
  }
  MS_ASSIGN_OR_RETURN(m.adam_step, f.Int("optimizer.adam_step", 0, m.step));
  MS_ASSIGN_OR_RETURN(m.loss_scale, f.Positive("loss_scaler.scale"));
  MS_ASSIGN_OR_RETURN(m.loss_scale_good_steps, f.Int("loss_scaler.good_steps", 0, m.step));
  MS_ASSIGN_OR_RETURN(m.loss_scale_skipped, f.Int("loss_scaler.skipped", 0, m.step));
  MS_ASSIGN_OR_RETURN(m.nonfinite_in_a_row, f.Int("nonfinite_in_a_row", 0, m.step));
  MS_ASSIGN_OR_RETURN(m.seed, f.Int("rng.seed", INT64_MIN, INT64_MAX));
  MS_ASSIGN_OR_RETURN(const int64_t consumed, f.Int("rng.data_samples_consumed", 0, kMaxCount));
  if (consumed != m.samples) {
    return f.Error("rng.data_samples_consumed", absl::StrCat("= ", consumed, " differs from samples = ", m.samples));
  }
  if (j.contains("build")) {  // absent before it was recorded
    MS_ASSIGN_OR_RETURN(m.build.version, f.String("build.version"));
    MS_ASSIGN_OR_RETURN(m.build.commit, f.String("build.commit"));
    for (const auto& [field, text] : {std::pair{"build.version", &m.build.version}, std::pair{"build.commit", &m.build.commit}}) {
      if (!IsPrintableModelName(*text)) return f.Error(field, "is not a line of at most 256 printable characters");
    }
  }
  if (j.contains("data")) {  // absent before it was recorded
    MS_ASSIGN_OR_RETURN(const json* data, f.Object("data"));
    for (const auto& [name, source] : data->items()) {
      const bool valid = source.is_object() && source.contains("tokens") && source["tokens"].is_number_integer() &&
                         source["tokens"].get<int64_t>() >= 0 && source.contains("fingerprint") &&
                         source["fingerprint"].is_string();
      if (!valid) return f.Error(absl::StrCat("data[\"", name, "\"]"), "is not {\"tokens\": N, \"fingerprint\": \"...\"}");
    }
    m.data = *data;
  }
  return m;
}

namespace {

}  // namespace

std::map<std::string, ExpectedFile> ExpectedContents(const ModelDims& dims, const ParallelLayout& layout) {
  std::map<std::string, ExpectedFile> files;
  for (int64_t p = 0; p < layout.pp; ++p) {
    for (int64_t t = 0; t < layout.tp; ++t) {
      const ParamLayout l(dims, ShardSpec::ForRank(dims, layout.tp, layout.pp, t, p));
      ExpectedFile& shard = files[ShardFileName(p, t)];
      for (const ParamEntry& e : l.entries()) {
        const ExpectedDataset slice{e.shape, e.global_shape, e.offset};
        shard.emplace_back(e.name, slice);
        if (layout.zero == 0) {
          shard.emplace_back("adam_m/" + e.name, slice);
          shard.emplace_back("adam_v/" + e.name, slice);
        }
      }
      if (layout.zero == 0) continue;
      // DataParallel's split: dp rank d owns flat elements [d·S, (d+1)·S) ∩ [0, size), S = ⌈size/dp⌉.
      const int64_t per_rank = (l.size() + layout.dp - 1) / layout.dp;
      for (int64_t dp = 0; dp < layout.dp; ++dp) {
        ExpectedFile& piece = files[OptimizerFileName(p, t, dp)];
        const int64_t begin = std::min(l.size(), dp * per_rank), end = std::min(l.size(), begin + per_rank);
        for (const ParamEntry& e : l.entries()) {
          const int64_t lo = std::max(begin, e.buffer_offset), hi = std::min(end, e.buffer_offset + e.size());
          if (lo >= hi) continue;
          const int64_t rows = e.shape.empty() ? 1 : e.shape[0];
          const int64_t inner = rows == 0 ? 0 : e.size() / rows;
          const int64_t flat = (e.offset.empty() ? 0 : e.offset[0]) * inner + (lo - e.buffer_offset);
          const ExpectedDataset run{{hi - lo}, e.global_shape, {}, flat};
          piece.emplace_back("adam_m/" + e.name, run);
          piece.emplace_back("adam_v/" + e.name, run);
        }
      }
    }
  }
  return files;
}

namespace {

// The manifest's "files" against what its model and layout write: the same
// files, each with the same datasets and a checksum for each. Before anything
// is enumerated from the layout, its file count is checked against the
// manifest's (bounded by the manifest's size).
absl::Status CheckFileRecords(const json& manifest, const CheckpointMeta& m, const std::string& path,
                              std::map<std::string, ExpectedFile>* expected) {
  const ManifestFields f(manifest, path);
  MS_ASSIGN_OR_RETURN(const json* files, f.Object("files"));
  const double want_files = double(m.layout.tp) * double(m.layout.pp) * (1.0 + (m.layout.zero ? double(m.layout.dp) : 0.0));
  if (double(files->size()) != want_files) {
    return f.Error("files", absl::StrCat("lists ", files->size(), " files, the layout (tp=", m.layout.tp, " pp=",
                                         m.layout.pp, " dp=", m.layout.dp, " zero=", m.layout.zero, ") writes ",
                                         want_files));
  }
  *expected = ExpectedContents(m.dims, m.layout);
  for (const auto& [file, datasets] : *expected) {
    if (!files->contains(file)) return f.Error(absl::StrCat("files.", file), "is missing (the layout writes it)");
    const json& record = (*files)[file];
    const std::string field = absl::StrCat("files.", file);
    if (!record.is_object() || record.size() != 2) {
      return f.Error(field, absl::StrCat("is ", ManifestFields::Describe(record),
                                         ", expected {\"bytes\": int, \"datasets\": {name: crc32c}}"));
    }
    const ManifestFields r(record, path, field + ".");
    MS_RETURN_IF_ERROR(r.Int("bytes", 0, kMaxTokens).status());
    MS_ASSIGN_OR_RETURN(const json* sums, r.Object("datasets"));
    for (const auto& [name, want] : datasets) {
      if (!sums->contains(name)) return r.Error("datasets", absl::StrCat("has no checksum for ", name));
    }
    std::set<std::string> written;
    for (const auto& [name, want] : datasets) written.insert(name);
    for (const auto& [name, crc] : sums->items()) {
      if (!written.contains(name)) {
        return r.Error("datasets", absl::StrCat("lists ", name, ", which the layout does not write there"));
      }
      if (!crc.is_number_integer() || (crc.is_number_unsigned() ? crc.get<uint64_t>() > 0xffffffffu : true)) {
        return r.Error(absl::StrCat("datasets.", name),
                       absl::StrCat("is ", ManifestFields::Describe(crc), ", expected a CRC-32C (0 to 2^32 - 1)"));
      }
    }
  }
  return absl::OkStatus();
}

// One checkpoint file's datasets against what the manifest's layout puts
// there (shape, global_shape, offset or flat_offset, float storage fully
// written), and its root attribute `format`; headers only, no data read.
absl::Status CheckFileContents(const H5Reader& in, const ExpectedFile& datasets, bool optimizer) {
  const std::string want_format = optimizer ? "multiscreen-checkpoint-optimizer" : "multiscreen-checkpoint-shard";
  auto format = in.ReadStringAttribute("format");
  if (!format.ok() || *format != want_format) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.path(), ": not a checkpoint ", optimizer ? "optimizer piece" : "shard", " (root attribute format != \"",
                     want_format, "\")"));
  }
  auto text = [](const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); };
  for (const auto& [name, want] : datasets) {
    MS_RETURN_IF_ERROR(CheckDatasetHolds(in, name, want.shape, /*allow_zero_fill=*/true));
    MS_ASSIGN_OR_RETURN(const auto global_shape, in.ReadDatasetAttribute(name, "global_shape"));
    if (global_shape != want.global_shape) {
      return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " has global_shape ",
                                                     text(global_shape), ", the manifest's model says ",
                                                     text(want.global_shape)));
    }
    if (want.flat_offset >= 0) {
      MS_ASSIGN_OR_RETURN(const auto flat, in.ReadDatasetAttribute(name, "flat_offset"));
      if (flat != std::vector<int64_t>{want.flat_offset}) {
        return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " has flat_offset ", text(flat),
                                                       ", the manifest's layout says ", want.flat_offset));
      }
    } else {
      MS_ASSIGN_OR_RETURN(const auto offset, in.ReadDatasetAttribute(name, "offset"));
      if (offset != want.offset) {
        return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " has offset ", text(offset),
                                                       ", the manifest's layout says ", text(want.offset)));
      }
    }
  }
  return absl::OkStatus();
}

// Reads dataset `name` of `file` in chunks of rows (at most kChunkBytes each, so
// memory stays bounded whatever the tensor), handing each chunk to on_rows
// (first row, row count, data) and returning the CRC-32C of the whole. A
// dataset that passes its checksum but holds NaN or ±inf is refused after it
// (DataLoss naming file, dataset and element): a run cannot go on from it.
constexpr int64_t kChunkBytes = int64_t{16} << 20;

absl::StatusOr<uint32_t> StreamDataset(const H5Reader& file, const std::string& name, uint32_t expected_crc,
                                       const std::function<void(int64_t, int64_t, const float*)>& on_rows) {
  MS_ASSIGN_OR_RETURN(const auto shape, file.Shape(name));
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, inner * 4));
  std::vector<float> buffer(std::min(rows, chunk_rows) * inner);
  Crc32cStream crc;
  int64_t nonfinite = -1;  // first non-finite element
  float nonfinite_value = 0;
  for (int64_t r = 0; r < rows; r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r);
    MS_RETURN_IF_ERROR(file.ReadRows(name, r, n, buffer.data()));
    crc.Update(buffer.data(), n * inner * sizeof(float));
    for (int64_t i = 0; i < n * inner && nonfinite < 0; ++i) {
      if (!std::isfinite(buffer[i])) {
        nonfinite = r * inner + i;
        nonfinite_value = buffer[i];
      }
    }
    on_rows(r, n, buffer.data());
  }
  if (crc.value() != expected_crc) {
    return absl::DataLossError(absl::StrCat(file.path(), ": dataset ", name, " fails its checksum (corrupted)"));
  }
  if (nonfinite >= 0) {
    return absl::DataLossError(absl::StrCat(file.path(), ": dataset ", name, " holds a non-finite value (",
                                            nonfinite_value, ") at element ", nonfinite));
  }
  return crc.value();
}

// Step of a "step_NNNNNNNN" directory name, or −1.
int64_t StepOf(const std::string& name) {
  long long step = -1;
  if (std::sscanf(name.c_str(), "step_%lld", &step) != 1 || name != StepDirName(step)) return -1;
  return step;
}

// Steps of every step_* directory of ckpt_root (complete or not), ascending.
std::vector<int64_t> StepDirs(const std::string& ckpt_root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_root, ec)) {
    const int64_t s = StepOf(e.path().filename().string());
    if (s >= 0 && e.is_directory(ec)) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<int64_t> CompleteSteps(const std::string& ckpt_root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_root, ec)) {
    const int64_t s = StepOf(e.path().filename().string());
    if (s >= 0 && fs::exists(e.path() / kManifest)) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Removes the step directory `dir` unless a reader (eval, export, …) holds it: that one
// stays until a later save. The lock file goes with the directory (removed while still
// locked).
void RemoveUnlessRead(const fs::path& dir) {
  auto lock = FileLock::Acquire(ReaderLockPath(dir.string()), "reader", FileLock::OnRelease::kRemoveFile);
  if (absl::IsFailedPrecondition(lock.status())) return;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

void Prune(const std::string& ckpt_root, int64_t newest, int64_t keep_last, int64_t keep_every) {
  const std::vector<int64_t> steps = CompleteSteps(ckpt_root);
  const int64_t n = static_cast<int64_t>(steps.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = steps[i];
    const bool recent = i >= n - std::max<int64_t>(keep_last, 1);
    const bool milestone = keep_every > 0 && s % keep_every == 0;
    if (recent || milestone || s == newest) continue;
    RemoveUnlessRead(fs::path(ckpt_root) / StepDirName(s));
  }
  // What killed saves and prunes leave: a step directory older than the newest with no
  // manifest (a prune stopped after deleting it, or one cut short by hand), never a
  // checkpoint again and never pruned above, so its bytes would stay; and the reader lock
  // files of step directories that are gone.
  const std::vector<int64_t> complete = CompleteSteps(ckpt_root);
  for (const int64_t s : StepDirs(ckpt_root)) {
    if (s < newest && !std::binary_search(complete.begin(), complete.end(), s)) {
      RemoveUnlessRead(fs::path(ckpt_root) / StepDirName(s));
    }
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".reading-", 0) != 0 || StepOf(name.substr(9)) < 0) continue;
    if (fs::exists(fs::path(ckpt_root) / name.substr(9))) continue;
    // Removed on release unless a reader still holds it.
    (void)FileLock::Acquire(e.path().string(), "reader", FileLock::OnRelease::kRemoveFile);
  }
}

// The entries' element counts of dims under layout, per shard file.
template <typename F>
void ForEachShard(const ModelDims& dims, const ParallelLayout& layout, F&& f) {
  for (int64_t p = 0; p < layout.pp; ++p) {
    for (int64_t t = 0; t < layout.tp; ++t) f(p, t, ParamLayout(dims, ShardSpec::ForRank(dims, layout.tp, layout.pp, t, p)));
  }
}

}  // namespace

std::string ShardFileName(int64_t pp_rank, int64_t tp_rank) {
  return absl::StrCat("shard_pp", pp_rank, "_tp", tp_rank, ".h5");
}

std::string OptimizerFileName(int64_t pp_rank, int64_t tp_rank, int64_t dp_rank) {
  return absl::StrCat("optim_pp", pp_rank, "_tp", tp_rank, "_dp", dp_rank, ".h5");
}

std::vector<std::string> CheckpointFiles(const ParallelLayout& layout) {
  std::vector<std::string> files;
  for (int64_t p = 0; p < layout.pp; ++p) {
    for (int64_t t = 0; t < layout.tp; ++t) {
      files.push_back(ShardFileName(p, t));
      if (layout.zero == 0) continue;
      for (int64_t d = 0; d < layout.dp; ++d) files.push_back(OptimizerFileName(p, t, d));
    }
  }
  return files;
}

std::string StepDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }

std::string TempCheckpointDir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / (".tmp-" + StepDirName(step))).string();
}

absl::StatusOr<std::string> BeginCheckpoint(const std::string& run_dir, int64_t step) {
  const fs::path tmp = TempCheckpointDir(run_dir, step);
  std::error_code ec;
  fs::remove_all(tmp, ec);  // a leftover of a crash mid-write
  fs::create_directories(tmp, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(tmp.string(), ": cannot create: ", ec.message()));
  return tmp.string();
}

absl::StatusOr<json> WriteShard(const std::string& tmp_dir, const ShardTensors& shard) {
  const std::string path = (fs::path(tmp_dir) / ShardFileName(shard.pp_rank, shard.tp_rank)).string();
  MS_ASSIGN_OR_RETURN(auto out, H5Writer::Create(path));
  MS_RETURN_IF_ERROR(out->WriteAttribute("format", std::string("multiscreen-checkpoint-shard")));
  MS_RETURN_IF_ERROR(out->WriteAttribute("pp_rank", shard.pp_rank));
  MS_RETURN_IF_ERROR(out->WriteAttribute("tp_rank", shard.tp_rank));
  json datasets = json::object();
  auto write = [&](const std::string& name, const ParamEntry& e, const float* base) -> absl::Status {
    const float* data = base + e.buffer_offset;
    MS_RETURN_IF_ERROR(out->WriteSlice(name, e.shape, e.global_shape, e.offset, data));
    datasets[name] = Crc32c(data, e.size() * sizeof(float));
    return absl::OkStatus();
  };
  for (const ParamEntry& e : shard.layout->entries()) {
    MS_RETURN_IF_ERROR(write(e.name, e, shard.params));
    if (shard.adam_m != nullptr) MS_RETURN_IF_ERROR(write("adam_m/" + e.name, e, shard.adam_m));
    if (shard.adam_v != nullptr) MS_RETURN_IF_ERROR(write("adam_v/" + e.name, e, shard.adam_v));
  }
  MS_RETURN_IF_ERROR(out->Commit());
  return json{{"bytes", static_cast<int64_t>(fs::file_size(path))}, {"datasets", datasets}};
}

absl::StatusOr<json> WriteOptimizerPiece(const std::string& tmp_dir, const OptimizerPiece& piece) {
  const std::string path =
      (fs::path(tmp_dir) / OptimizerFileName(piece.pp_rank, piece.tp_rank, piece.dp_rank)).string();
  MS_ASSIGN_OR_RETURN(auto out, H5Writer::Create(path));
  MS_RETURN_IF_ERROR(out->WriteAttribute("format", std::string("multiscreen-checkpoint-optimizer")));
  MS_RETURN_IF_ERROR(out->WriteAttribute("flat_begin", piece.begin));
  MS_RETURN_IF_ERROR(out->WriteAttribute("flat_end", piece.end));
  json datasets = json::object();
  for (const ParamEntry& e : piece.layout->entries()) {
    // The part of this entry inside [begin, end), as a run of its global elements.
    const int64_t lo = std::max(piece.begin, e.buffer_offset), hi = std::min(piece.end, e.buffer_offset + e.size());
    if (lo >= hi) continue;
    const int64_t rows = e.shape.empty() ? 1 : e.shape[0];
    const int64_t inner = rows == 0 ? 0 : e.size() / rows;
    const int64_t flat_offset = (e.offset.empty() ? 0 : e.offset[0]) * inner + (lo - e.buffer_offset);
    for (const auto& [prefix, base] : {std::pair{"adam_m/", piece.adam_m}, std::pair{"adam_v/", piece.adam_v}}) {
      const float* data = base + (lo - piece.begin);
      MS_RETURN_IF_ERROR(out->WritePiece(prefix + e.name, hi - lo, e.global_shape, flat_offset, data));
      datasets[prefix + e.name] = Crc32c(data, (hi - lo) * sizeof(float));
    }
  }
  MS_RETURN_IF_ERROR(out->Commit());
  return json{{"bytes", static_cast<int64_t>(fs::file_size(path))}, {"datasets", datasets}};
}

absl::Status WriteFileRecord(const std::string& tmp_dir, const std::string& file, const json& record) {
  return WriteFileAtomically((fs::path(tmp_dir) / (file + ".json")).string(), record.dump());
}

absl::StatusOr<json> ReadFileRecords(const std::string& tmp_dir, const std::vector<std::string>& names) {
  json files = json::object();
  for (const std::string& name : names) {
    const fs::path path = fs::path(tmp_dir) / (name + ".json");
    std::ifstream in(path);
    if (!in) return absl::DataLossError(absl::StrCat(path.string(), ": missing (", name, " was not written)"));
    files[name] = json::parse(in, nullptr, false);
    if (files[name].is_discarded()) return absl::DataLossError(absl::StrCat(path.string(), ": not valid JSON"));
    in.close();
    std::error_code ec;
    fs::remove(path, ec);
  }
  return files;
}

absl::StatusOr<std::string> CommitCheckpoint(const std::string& run_dir, const std::string& tmp_dir,
                                             const CheckpointMeta& meta, const json& files, int64_t keep_last,
                                             int64_t keep_every) {
  json manifest = MetaToJson(meta);
  manifest["files"] = files;
  MS_RETURN_IF_ERROR(WriteFileAtomically((fs::path(tmp_dir) / kManifest).string(), manifest.dump(1)));
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = root / StepDirName(meta.step);
  std::error_code ec;
  if (fs::exists(final_dir)) {
    // Re-saving the same step (e.g. a signal right after a periodic save):
    // move the old one aside first, and drop it only once the new one is in place.
    const fs::path old = root / (".old-" + StepDirName(meta.step));
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return absl::DataLossError(absl::StrCat(final_dir.string(), ": cannot move aside: ", ec.message()));
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) return absl::DataLossError(absl::StrCat(final_dir.string(), ": rename failed: ", ec.message()));
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) return absl::DataLossError(absl::StrCat(final_dir.string(), ": rename failed: ", ec.message()));
  }
  MS_RETURN_IF_ERROR(FsyncPath(root.string()));
  MS_RETURN_IF_ERROR(WriteFileAtomically((root / kLatest).string(), StepDirName(meta.step) + "\n"));
  Prune(root.string(), meta.step, keep_last, keep_every);
  return final_dir.string();
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& run_dir, const CheckpointMeta& meta,
                                           const std::vector<ShardTensors>& shards, int64_t keep_last,
                                           int64_t keep_every) {
  MS_ASSIGN_OR_RETURN(const std::string tmp, BeginCheckpoint(run_dir, meta.step));
  json files = json::object();
  int64_t bytes = 0;
  for (const ShardTensors& s : shards) {
    bytes += s.layout->size() * int64_t(sizeof(float)) * (s.adam_m != nullptr ? 3 : 1);
  }
  for (const ShardTensors& s : shards) {
    auto record = WriteShard(tmp, s);
    if (!record.ok()) return AbandonCheckpoint(tmp, record.status(), bytes);
    files[ShardFileName(s.pp_rank, s.tp_rank)] = *std::move(record);
  }
  auto dir = CommitCheckpoint(run_dir, tmp, meta, files, keep_last, keep_every);
  if (!dir.ok() && fs::exists(tmp)) return AbandonCheckpoint(tmp, dir.status(), bytes);
  return dir;
}

absl::Status AbandonCheckpoint(const std::string& tmp_dir, const absl::Status& error, int64_t bytes_needed) {
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  if (!absl::IsResourceExhausted(error)) return error;
  const std::string root = fs::path(tmp_dir).parent_path().string();
  return absl::Status(error.code(), absl::StrCat(error.message(), "; the checkpoint needs about ", bytes_needed,
                                                 " bytes, ", FreeBytes(root), " are free in ", root,
                                                 " with the partial one removed"));
}

std::string ReaderLockPath(const std::string& dir) {
  const fs::path path = fs::path(dir).lexically_normal();
  const fs::path name = path.has_filename() ? path.filename() : path.parent_path().filename();
  const fs::path parent = path.has_filename() ? path.parent_path() : path.parent_path().parent_path();
  if (StepOf(name.string()) < 0 || parent.filename() != "checkpoints") return "";
  return (parent / (".reading-" + name.string())).string();
}

namespace {

// The reader's shared lock on checkpoint `dir` (ReaderLockPath), taken before anything
// of it is read; null where no lock applies or the file cannot be made (a read-only
// directory: nothing prunes it). Pruned before the lock was had: null (the lock file
// made for it goes with the lock, FileLock::AcquireShared).
std::shared_ptr<const FileLock> LockForReading(const std::string& dir) {
  const std::string path = ReaderLockPath(dir);
  if (path.empty()) return nullptr;
  auto lock = FileLock::AcquireShared(path);
  std::error_code ec;
  if (!lock.ok() || !fs::exists(fs::path(dir) / kManifest, ec)) return nullptr;
  return std::make_shared<const FileLock>(*std::move(lock));
}

}  // namespace

absl::StatusOr<CheckpointRef> OpenCheckpoint(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": missing (incomplete checkpoint)"));
  // A FIFO or /dev/zero in its place would be read forever.
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, ": not a regular file of at most ", kMaxManifestBytes, " bytes"));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  CheckpointRef ref;
  ref.dir = dir;
  ref.manifest = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (ref.manifest.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not valid JSON"));
  MS_ASSIGN_OR_RETURN(ref.meta, ValidateManifest(ref.manifest, path));
  // A step_N directory holds step N (not a copy of another step or run).
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  if (const int64_t named = StepOf(name.empty() ? fs::path(dir).lexically_normal().parent_path().filename().string() : name);
      named >= 0 && named != ref.meta.step) {
    return absl::DataLossError(absl::StrCat(path, ": field step = ", ref.meta.step, " but the directory is ",
                                            StepDirName(named), " (copied from another checkpoint?)"));
  }
  std::map<std::string, ExpectedFile> expected;
  MS_RETURN_IF_ERROR(CheckFileRecords(ref.manifest, ref.meta, path, &expected));
  // Every file there, of its recorded size, together big enough to hold the
  // model the manifest describes, and holding its datasets as the layout says.
  double total_bytes = 0;
  for (const auto& [name, datasets] : expected) {
    const fs::path file = fs::path(dir) / name;
    std::error_code ec;
    const fs::file_status status = fs::status(file, ec);
    if (!fs::exists(status)) return absl::DataLossError(absl::StrCat(file.string(), ": missing"));
    if (!fs::is_regular_file(status)) {  // a FIFO or a link to a device: never opened
      return absl::DataLossError(absl::StrCat(file.string(), ": not a regular file"));
    }
    const auto size = fs::file_size(file, ec);
    if (ec) return absl::DataLossError(absl::StrCat(file.string(), ": ", ec.message()));
    const int64_t recorded = ref.manifest["files"][name]["bytes"].get<int64_t>();
    if (static_cast<int64_t>(size) != recorded) {
      return absl::DataLossError(
          absl::StrCat(file.string(), ": ", size, " bytes, the manifest says ", recorded, " (truncated?)"));
    }
    total_bytes += double(size);
  }
  if (4 * ModelParamCount(ref.meta.dims) > total_bytes) {
    return absl::DataLossError(absl::StrCat(path, ": its model needs ", 4 * ModelParamCount(ref.meta.dims),
                                            " bytes of parameters, more than its files' ", total_bytes));
  }
  auto open_files = std::make_shared<std::map<std::string, std::shared_ptr<H5Reader>>>();
  for (const auto& [name, datasets] : expected) {
    MS_ASSIGN_OR_RETURN(std::shared_ptr<H5Reader> file, H5Reader::Open((fs::path(dir) / name).string()));
    const bool optimizer = name.rfind("optim_", 0) == 0;
    MS_RETURN_IF_ERROR(CheckFileContents(*file, datasets, optimizer));
    // The optimizer pieces (one per dp rank under ZeRO-1: thousands at scale) are not
    // held: only resume and reshard read them.
    if (!optimizer) (*open_files)[name] = std::move(file);
  }
  ref.open_files = std::move(open_files);
  return ref;
}

absl::StatusOr<std::shared_ptr<H5Reader>> CheckpointFile(const CheckpointRef& ckpt, const std::string& name) {
  if (ckpt.open_files != nullptr) {
    if (const auto it = ckpt.open_files->find(name); it != ckpt.open_files->end()) return it->second;
  }
  MS_ASSIGN_OR_RETURN(std::shared_ptr<H5Reader> file, H5Reader::Open((fs::path(ckpt.dir) / name).string()));
  return file;
}

absl::StatusOr<CheckpointRef> FindLatestCheckpoint(const std::string& run_dir, bool lock_for_reading) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  // A run still training prunes its checkpoints (keep_last) while a reader (eval,
  // forward, generate) goes through them: a checkpoint whose directory is gone after it
  // failed to verify was removed, not corrupt, so the listing is read again.
  constexpr int kScans = 20;
  for (int scan = 0; scan < kScans; ++scan) {
    if (scan > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Newest first, every step_* directory (one without a manifest fails as
    // incomplete); `latest` is only a pointer for people and tools.
    const std::vector<int64_t> steps = StepDirs(root.string());
    std::vector<std::string> failures;  // "step_N: first problem [(and K more)]"
    bool removed = false;
    for (auto it = steps.rbegin(); it != steps.rend() && !removed; ++it) {
      const std::string dir = (root / StepDirName(*it)).string();
      std::vector<std::string> problems;
      auto reading = lock_for_reading ? LockForReading(dir) : nullptr;
      auto ref = OpenCheckpoint(dir);
      if (ref.ok()) {
        problems = VerifyCheckpoint(*ref);
        if (problems.empty()) {
          for (const std::string& f : failures) LogWarning("skipping checkpoint ", root.string(), "/", f);
          ref->reading = std::move(reading);
          return ref;
        }
      } else {
        problems.emplace_back(ref.status().message());
      }
      // Gone, or being removed (files first) because a newer one was committed.
      std::error_code ec;
      const std::vector<int64_t> now = StepDirs(root.string());
      if (!fs::exists(dir, ec) || (!now.empty() && now.back() > steps.back())) {
        removed = true;
        break;
      }
      std::string failure =
          absl::StrCat(StepDirName(*it), ": ", absl::StrReplaceAll(problems.front(), {{dir + "/", ""}}));
      if (problems.size() > 1) absl::StrAppend(&failure, " (and ", problems.size() - 1, " more)");
      failures.push_back(std::move(failure));
    }
    if (removed) continue;
    if (failures.empty()) return absl::NotFoundError(absl::StrCat(root.string(), ": no checkpoint"));
    return absl::DataLossError(absl::StrCat(root.string(), ": ", failures.size(),
                                            failures.size() == 1 ? " checkpoint found, it does not verify: "
                                                                 : " checkpoints found, none verifies: ",
                                            absl::StrJoin(failures, "; ")));
  }
  return absl::UnavailableError(absl::StrCat(root.string(), ": checkpoints were removed while being read ", kScans,
                                             " times in a row (a run still training replaces them: checkpoint.keep_last); "
                                             "copy one first, or read a weights file from `ckpt export`"));
}

absl::StatusOr<std::vector<std::string>> SetAsideCheckpoints(const std::string& run_dir, int64_t after_step) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path aside = root / kUnverified;
  std::vector<std::string> moved;
  std::error_code ec;
  for (const int64_t step : StepDirs(root.string())) {
    if (step <= after_step) continue;
    fs::create_directories(aside, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(aside.string(), ": cannot create: ", ec.message()));
    // Never over another: step_N, then step_N.1, step_N.2, ...
    fs::path to = aside / StepDirName(step);
    for (int n = 1; fs::exists(to); ++n) to = aside / absl::StrCat(StepDirName(step), ".", n);
    fs::rename(root / StepDirName(step), to, ec);
    if (ec) {
      return absl::DataLossError(
          absl::StrCat((root / StepDirName(step)).string(), ": cannot move to ", to.string(), ": ", ec.message()));
    }
    moved.push_back(to.string());
  }
  if (moved.empty()) return moved;
  // `latest` names the newest checkpoint left, if any.
  const std::vector<int64_t> left = CompleteSteps(root.string());
  if (left.empty()) {
    fs::remove(root / kLatest, ec);
  } else {
    MS_RETURN_IF_ERROR(WriteFileAtomically((root / kLatest).string(), StepDirName(left.back()) + "\n"));
  }
  MS_RETURN_IF_ERROR(FsyncPath(root.string()));
  return moved;
}

std::vector<std::string> VerifyCheckpoint(const CheckpointRef& ckpt, bool weights_only) {
  std::vector<std::string> problems;
  for (const auto& [file, record] : ckpt.manifest["files"].items()) {
    if (weights_only && file.rfind("optim_", 0) == 0) continue;
    auto in = CheckpointFile(ckpt, file);
    if (!in.ok()) {
      problems.push_back(std::string(in.status().message()));
      continue;
    }
    for (const auto& [name, crc] : record["datasets"].items()) {
      if (weights_only && name.rfind("adam_", 0) == 0) continue;
      auto got = StreamDataset(**in, name, crc.get<uint32_t>(), [](int64_t, int64_t, const float*) {});
      if (!got.ok()) problems.push_back(std::string(got.status().message()));
    }
  }
  return problems;
}

absl::Status LoadShard(const CheckpointRef& ckpt, const ParamLayout& target, float* params, float* adam_m,
                       float* adam_v, std::pair<int64_t, int64_t> moment_range) {
  const ModelDims& saved = ckpt.meta.dims;
  const ModelDims& want = target.dims();
  if (const std::vector<std::string> differ = ModelDifferences(saved, want, "the checkpoint", "the model being loaded");
      !differ.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(ckpt.dir, ": checkpoint of model '", saved.name,
                                                   "' does not match the model being loaded ('", want.name, "'): ",
                                                   absl::StrJoin(differ, "; ")));
  }
  if (moment_range.second < 0) moment_range.second = target.size();
  std::vector<std::shared_ptr<H5Reader>> files;
  std::vector<std::string> names;
  for (const auto& [file, record] : ckpt.manifest["files"].items()) {
    MS_ASSIGN_OR_RETURN(auto r, CheckpointFile(ckpt, file));
    files.push_back(std::move(r));
    names.push_back(file);
  }
  // Everything is placed by global row-major element index: a row slice with
  // offset[0] = o covers [o·inner, (o + rows)·inner); a ZeRO-1 piece covers
  // [flat_offset, flat_offset + count). `want` is the run of global elements
  // wanted, written to out[0, want_end − want_begin).
  auto load = [&](const std::string& name, int64_t want_begin, int64_t want_end, float* out) -> absl::Status {
    const int64_t wanted = want_end - want_begin;
    if (wanted <= 0) return absl::OkStatus();
    // Replicated data (W_E on the first and last stage, scalars on every tp
    // rank) appears in several files: the first file that holds an element wins.
    std::vector<bool> covered(wanted, false);
    int64_t n_covered = 0;
    for (size_t f = 0; f < files.size() && n_covered < wanted; ++f) {
      if (!files[f]->Has(name)) continue;
      MS_ASSIGN_OR_RETURN(const auto shape, files[f]->Shape(name));
      int64_t inner = 1;
      for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
      const int64_t count = (shape.empty() ? 1 : shape[0]) * inner;
      int64_t have_begin;
      if (auto flat = files[f]->ReadDatasetAttribute(name, "flat_offset"); flat.ok() && flat->size() == 1) {
        have_begin = (*flat)[0];
      } else {
        MS_ASSIGN_OR_RETURN(const auto offset, files[f]->ReadDatasetAttribute(name, "offset"));
        have_begin = (offset.empty() ? 0 : offset[0]) * inner;
      }
      const int64_t begin = std::max(want_begin, have_begin), end = std::min(want_end, have_begin + count);
      bool needed = false;
      for (int64_t g = begin; g < end && !needed; ++g) needed = !covered[g - want_begin];
      if (!needed) continue;
      // Stream the dataset (bounded memory), copying the elements still
      // missing, and check its checksum before trusting them.
      std::vector<std::pair<int64_t, int64_t>> copied;  // [first, last) global runs
      const json& record = ckpt.manifest["files"][names[f]]["datasets"];
      if (!record.contains(name)) {
        return absl::DataLossError(absl::StrCat(files[f]->path(), ": dataset ", name, " has no checksum in the manifest"));
      }
      auto crc = StreamDataset(*files[f], name, record[name].get<uint32_t>(),
                               [&](int64_t first_row, int64_t rows, const float* data) {
        const int64_t chunk_begin = have_begin + first_row * inner;
        const int64_t lo = std::max(chunk_begin, begin), hi = std::min(chunk_begin + rows * inner, end);
        for (int64_t g = lo; g < hi; ++g) {
          if (!covered[g - want_begin]) out[g - want_begin] = data[g - chunk_begin];
        }
        if (lo < hi) copied.push_back({lo, hi});
      });
      if (!crc.ok()) return crc.status();
      for (const auto& [lo, hi] : copied) {
        for (int64_t g = lo; g < hi; ++g) {
          if (!covered[g - want_begin]) {
            covered[g - want_begin] = true;
            ++n_covered;
          }
        }
      }
    }
    if (n_covered != wanted) {
      return absl::DataLossError(absl::StrCat(ckpt.dir, ": ", name, " covers ", n_covered, " of the ", wanted,
                                              " elements needed"));
    }
    return absl::OkStatus();
  };
  for (const ParamEntry& e : target.entries()) {
    const int64_t rows = e.shape.empty() ? 1 : e.shape[0];
    const int64_t inner = rows == 0 ? 0 : e.size() / rows;
    const int64_t first = (e.offset.empty() ? 0 : e.offset[0]) * inner;  // global index of the slice's element 0
    MS_RETURN_IF_ERROR(load(e.name, first, first + e.size(), params + e.buffer_offset));
    // The moments only for this entry's part of moment_range.
    const int64_t lo = std::max(moment_range.first, e.buffer_offset);
    const int64_t hi = std::min(moment_range.second, e.buffer_offset + e.size());
    if (lo >= hi) continue;
    const int64_t g0 = first + (lo - e.buffer_offset), g1 = first + (hi - e.buffer_offset);
    if (adam_m != nullptr) MS_RETURN_IF_ERROR(load("adam_m/" + e.name, g0, g1, adam_m + (lo - moment_range.first)));
    if (adam_v != nullptr) MS_RETURN_IF_ERROR(load("adam_v/" + e.name, g0, g1, adam_v + (lo - moment_range.first)));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointRef> OpenCheckpointOrRun(const std::string& path, bool lock_for_reading) {
  if (fs::exists(fs::path(path) / kManifest)) {
    auto reading = lock_for_reading ? LockForReading(path) : nullptr;
    auto ref = OpenCheckpoint(path);
    if (ref.ok()) ref->reading = std::move(reading);
    return ref;
  }
  if (fs::exists(fs::path(path) / "checkpoints")) return FindLatestCheckpoint(path, lock_for_reading);
  std::error_code ec;
  if (!ReaderLockPath(path).empty() && !fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint (a run still training removes its older "
                                            "checkpoints: checkpoint.keep_last); give the run directory to read "
                                            "its newest"));
  }
  return absl::NotFoundError(
      absl::StrCat(path, ": neither a checkpoint (no manifest.json) nor a run directory (no checkpoints/)"));
}

absl::StatusOr<Weights> ConsolidatedWeights(const CheckpointRef& ckpt) {
  Weights w;
  w.dims = ckpt.meta.dims;
  const ParamLayout full(w.dims, ShardSpec::Full(w.dims));
  w.params.resize(full.size());
  MS_RETURN_IF_ERROR(LoadShard(ckpt, full, w.params.data(), nullptr, nullptr));
  return w;
}

std::vector<ShardPlan> PlanCheckpoint(const ModelDims& dims, const ParallelLayout& layout) {
  std::vector<ShardPlan> plan;
  ForEachShard(dims, layout, [&](int64_t p, int64_t t, const ParamLayout& l) {
    plan.push_back({ShardFileName(p, t), p, t, l.size() * int64_t(sizeof(float)), 2 * l.size() * int64_t(sizeof(float))});
  });
  return plan;
}

}  // namespace multiscreen

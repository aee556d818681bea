#include "checkpoint/weights_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crc32c.h"
#include "common/status.h"

namespace multiscreen {

absl::Status WriteModelDims(H5Writer& out, const ModelDims& d) {
  MS_RETURN_IF_ERROR(out.WriteAttribute("format", std::string("multiscreen-weights")));
  MS_RETURN_IF_ERROR(out.WriteAttribute("format_version", int64_t{1}));
  MS_RETURN_IF_ERROR(out.WriteAttribute("name", d.name));
  MS_RETURN_IF_ERROR(out.WriteAttribute("n_layers", d.n_layers));
  MS_RETURN_IF_ERROR(out.WriteAttribute("n_heads", d.n_heads));
  MS_RETURN_IF_ERROR(out.WriteAttribute("d_e", d.d_e));
  MS_RETURN_IF_ERROR(out.WriteAttribute("d_k", d.d_k));
  MS_RETURN_IF_ERROR(out.WriteAttribute("d_v", d.d_v));
  MS_RETURN_IF_ERROR(out.WriteAttribute("vocab", d.vocab));
  MS_RETURN_IF_ERROR(out.WriteAttribute("w_th", d.w_th));
  MS_RETURN_IF_ERROR(out.WriteAttribute("pl_norm", int64_t{d.pl_norm ? 1 : 0}));
  MS_RETURN_IF_ERROR(out.WriteAttribute("eos_token", d.eos_token));
  MS_RETURN_IF_ERROR(out.WriteAttribute("family", std::string(FamilyName(d.family))));
  // The family's own switches only: a Transformer file with position = mipe (or a
  // Multiscreen one with attention = softmax) invites a converter to misread it.
  if (d.transformer()) {
    MS_RETURN_IF_ERROR(out.WriteAttribute("qk_norm", int64_t{d.qk_norm ? 1 : 0}));
    MS_RETURN_IF_ERROR(out.WriteAttribute("sio", int64_t{d.sio ? 1 : 0}));
    MS_RETURN_IF_ERROR(out.WriteAttribute("attention", std::string(AttentionKindName(d.attention))));
    MS_RETURN_IF_ERROR(out.WriteAttribute("sigmoid_bias", std::string(SigmoidBiasName(d.sigmoid_bias))));
  } else {
    MS_RETURN_IF_ERROR(out.WriteAttribute("tanh_norm", int64_t{d.tanh_norm ? 1 : 0}));
    MS_RETURN_IF_ERROR(out.WriteAttribute("position", std::string(kernels::PositionKindName(d.position))));
    MS_RETURN_IF_ERROR(out.WriteAttribute("output_gate", int64_t{d.output_gate ? 1 : 0}));
  }
  return absl::OkStatus();
}

namespace {

using Generations = std::vector<std::vector<const char*>>;

// The switches a family does not have (written with their defaults by files before
// issue 43, which wrote every switch whatever the family).
const std::vector<const char*>& ForeignSwitches(ModelFamily family) {
  static const std::vector<const char*> of_transformer = {"tanh_norm", "position", "output_gate"};
  static const std::vector<const char*> of_multiscreen = {"qk_norm", "sio", "attention", "sigmoid_bias"};
  return family == ModelFamily::kTransformer ? of_transformer : of_multiscreen;
}

// The root attributes a weights file has: WriteModelDims's and the checksum.
constexpr const char* kRootAttributes[] = {
    "format", "format_version", "name",      "n_layers",  "n_heads",   "d_e",      "d_k",
    "d_v",    "vocab",          "w_th",      "pl_norm",   "eos_token", "family",   "qk_norm",
    "sio",    "tanh_norm",      "attention", "position",  "output_gate", "sigmoid_bias", "params_crc32c"};

// The switch attributes in the order files gained them. A file written before one lacks
// it and every later one (and reads as their defaults); a file that has one has every
// earlier one and the rest of its group, so a missing one was deleted. Files written
// since issue 43 hold their family's switches only: for them the generations are these
// less the other family's switches (FileGenerations).
const Generations& SwitchGenerations() {
  static const Generations generations = {
      {"family", "qk_norm", "sio"}, {"tanh_norm"}, {"attention"}, {"position", "output_gate"}, {"sigmoid_bias"}};
  return generations;
}

// The generations a file is checked against: every switch for a file that holds one of
// the other family's (written before issue 43), else the family's own.
Generations FileGenerations(const H5Reader& in, const std::function<bool(const char*)>& has) {
  auto family = in.ReadStringAttribute("family");
  const ModelFamily f = family.ok() && *family == "transformer" ? ModelFamily::kTransformer : ModelFamily::kMultiscreen;
  const std::vector<const char*>& foreign = ForeignSwitches(f);
  if (std::any_of(foreign.begin(), foreign.end(), has)) return SwitchGenerations();
  Generations own;
  for (const auto& group : SwitchGenerations()) {
    std::vector<const char*> kept;
    for (const char* a : group) {
      if (std::find(foreign.begin(), foreign.end(), std::string_view(a)) == foreign.end()) kept.push_back(a);
    }
    if (!kept.empty()) own.push_back(kept);
  }
  return own;
}

// Refuses a root attribute a weights file does not have, and a switch attribute missing
// from a file that has a later one (FileGenerations).
absl::Status CheckRootAttributeNames(const H5Reader& in) {
  const std::vector<std::string> names = in.RootAttributeNames();
  const std::function<bool(const char*)> has = [&](const char* a) {
    return std::find(names.begin(), names.end(), a) != names.end();
  };
  for (const std::string& name : names) {
    if (std::none_of(std::begin(kRootAttributes), std::end(kRootAttributes), [&](const char* a) { return name == a; })) {
      return absl::InvalidArgumentError(absl::StrCat(in.path(), ": root attribute ", name,
                                                     " is not one a weights file has (",
                                                     absl::StrJoin(kRootAttributes, ", "), ")"));
    }
  }
  const Generations generations = FileGenerations(in, has);
  for (size_t g = 0; g < generations.size(); ++g) {
    for (const char* missing : generations[g]) {
      if (has(missing)) continue;
      // The first attribute of this group or a later one that the file has.
      for (size_t later = g; later < generations.size(); ++later) {
        for (const char* present : generations[later]) {
          if (!has(present)) continue;
          return absl::InvalidArgumentError(absl::StrCat(
              in.path(), ": root attribute ", missing, " is missing, though ", present, ", which files gained ",
              later == g ? "with" : "after", " it, is present: the file was edited (a weights file keeps every "
              "model attribute it was written with)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelDims> ReadModelDims(const H5Reader& in) {
  auto format = in.ReadStringAttribute("format");
  if (!format.ok() || *format != "multiscreen-weights") {
    return absl::InvalidArgumentError(
        absl::StrCat(in.path(), ": not a multiscreen weights file (root attribute format != \"multiscreen-weights\")"));
  }
  MS_RETURN_IF_ERROR(CheckRootAttributeNames(in));
  MS_ASSIGN_OR_RETURN(const int64_t version, in.ReadIntAttribute("format_version"));
  if (version != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.path(), ": format_version ", version, " is not one this build reads (1)"));
  }
  ModelDims d;
  MS_ASSIGN_OR_RETURN(d.name, in.ReadStringAttribute("name"));
  MS_ASSIGN_OR_RETURN(d.n_layers, in.ReadIntAttribute("n_layers"));
  MS_ASSIGN_OR_RETURN(d.n_heads, in.ReadIntAttribute("n_heads"));
  MS_ASSIGN_OR_RETURN(d.d_e, in.ReadIntAttribute("d_e"));
  MS_ASSIGN_OR_RETURN(d.d_k, in.ReadIntAttribute("d_k"));
  MS_ASSIGN_OR_RETURN(d.d_v, in.ReadIntAttribute("d_v"));
  MS_ASSIGN_OR_RETURN(d.vocab, in.ReadIntAttribute("vocab"));
  MS_ASSIGN_OR_RETURN(d.w_th, in.ReadDoubleAttribute("w_th"));
  MS_ASSIGN_OR_RETURN(const int64_t pl_norm, in.ReadIntAttribute("pl_norm"));
  d.pl_norm = pl_norm != 0;
  MS_ASSIGN_OR_RETURN(d.eos_token, in.ReadIntAttribute("eos_token"));
  // Every switch is absent from files written before it (they read as its default) and
  // from files of the other family written since issue 43; CheckRootAttributeNames has
  // refused one deleted. A switch of the other family that a file holds (written before
  // issue 43) must hold its default: CheckModelDims.
  // The family (absent in files written before it: Multiscreen).
  if (auto family = in.ReadStringAttribute("family"); family.ok()) {
    if (*family != "multiscreen" && *family != "transformer") {
      return absl::InvalidArgumentError(
          absl::StrCat(in.path(), ": root attribute family = \"", *family, "\" is not multiscreen or transformer"));
    }
    d.family = *family == "transformer" ? ModelFamily::kTransformer : ModelFamily::kMultiscreen;
  } else if (!absl::IsNotFound(family.status())) {
    return family.status();
  }
  // The Transformer's qk_norm and sio (default off).
  for (auto [name, value] : {std::pair{"qk_norm", &d.qk_norm}, std::pair{"sio", &d.sio}}) {
    if (auto flag = in.ReadIntAttribute(name); flag.ok()) {
      *value = *flag != 0;
    } else if (!absl::IsNotFound(flag.status())) {
      return flag.status();
    }
  }
  // Multiscreen's tanh_norm (default on).
  if (auto tanh_norm = in.ReadIntAttribute("tanh_norm"); tanh_norm.ok()) {
    d.tanh_norm = *tanh_norm != 0;
  } else if (!absl::IsNotFound(tanh_norm.status())) {
    return tanh_norm.status();
  }
  // The Transformer's attention mechanism (default softmax).
  if (auto attention = in.ReadStringAttribute("attention"); attention.ok()) {
    if (!ParseAttentionKind(*attention, &d.attention)) {
      return absl::InvalidArgumentError(absl::StrCat(in.path(), ": root attribute attention = \"", *attention,
                                                     "\" is not softmax, softmax1, ssmax, sigmoid, entmax15 or screening"));
    }
  } else if (!absl::IsNotFound(attention.status())) {
    return attention.status();
  }
  // Multiscreen's position and output_gate (default MiPE, gate on).
  if (auto position = in.ReadStringAttribute("position"); position.ok()) {
    if (!kernels::ParsePositionKind(*position, &d.position)) {
      return absl::InvalidArgumentError(
          absl::StrCat(in.path(), ": root attribute position = \"", *position, "\" is not mipe, nope or rope"));
    }
  } else if (!absl::IsNotFound(position.status())) {
    return position.status();
  }
  if (auto output_gate = in.ReadIntAttribute("output_gate"); output_gate.ok()) {
    d.output_gate = *output_gate != 0;
  } else if (!absl::IsNotFound(output_gate.status())) {
    return output_gate.status();
  }
  // Sigmoid attention's bias (absent in files written before it: a sigmoid model was trained
  // with the per-query form then).
  if (auto bias = in.ReadStringAttribute("sigmoid_bias"); bias.ok()) {
    if (!ParseSigmoidBias(*bias, &d.sigmoid_bias)) {
      return absl::InvalidArgumentError(
          absl::StrCat(in.path(), ": root attribute sigmoid_bias = \"", *bias, "\" is not train_length or per_query"));
    }
  } else if (absl::IsNotFound(bias.status())) {
    if (d.attention == AttentionKind::kSigmoid) d.sigmoid_bias = SigmoidBias::kPerQuery;
  } else {
    return bias.status();
  }
  MS_RETURN_IF_ERROR(CheckModelDims(d, in.path(), ""));
  // Re-check the sizes as a config would be checked.
  config::ModelConfig m;
  m.set_name(d.name);
  m.set_n_layers(d.n_layers);
  m.set_n_heads(d.n_heads);
  m.set_d_e(d.d_e);
  m.set_vocab(d.vocab);
  if (d.transformer()) {
    m.set_family(config::ModelConfig::TRANSFORMER);
    m.set_qk_norm(d.qk_norm);
    m.set_sio(d.sio);
    m.set_attention(config::ModelConfig::Attention(static_cast<int>(d.attention)));
    // Set for a sigmoid model, and for any that says per_query (which ResolveModel refuses).
    if (d.attention == AttentionKind::kSigmoid || d.sigmoid_bias != SigmoidBias::kTrainLength) {
      m.set_sigmoid_bias(config::ModelConfig::SigmoidBias(static_cast<int>(d.sigmoid_bias)));
    }
  } else {
    m.set_d_k(d.d_k);
    m.set_d_v(d.d_v);
    m.set_w_th(d.w_th);
    m.set_tanh_norm(d.tanh_norm);
    m.set_position(config::ModelConfig::Position(static_cast<int>(d.position)));
    m.set_output_gate(d.output_gate);
  }
  m.set_pl_norm(d.pl_norm);
  m.set_eos_token(d.eos_token);
  return ResolveModel(m, in.path());
}

absl::Status WriteWeightsFile(const std::string& path, const ParamLayout& full, const float* params) {
  MS_ASSIGN_OR_RETURN(auto out, H5Writer::Create(path));
  MS_RETURN_IF_ERROR(WriteModelDims(*out, full.dims()));
  for (const ParamEntry& e : full.entries()) {
    MS_RETURN_IF_ERROR(out->Write(e.name, e.global_shape, params + e.buffer_offset));
  }
  MS_RETURN_IF_ERROR(out->WriteAttribute("params_crc32c", int64_t{Crc32c(params, full.size() * sizeof(float))}));
  return out->Commit();
}

absl::StatusOr<int64_t> StoredParamsCrc(const H5Reader& in) {
  // A checksum retyped (a string, a float) is not a missing one.
  auto crc = in.ReadIntAttribute("params_crc32c");
  if (absl::IsNotFound(crc.status())) return -1;
  if (!crc.ok()) return crc.status();
  if (*crc < 0 || *crc > 0xffffffffLL) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.path(), ": attribute params_crc32c is ", *crc, ", not a CRC-32C (expected 0 to 2^32 - 1)"));
  }
  return *crc;
}

absl::Status CheckWeightsFileDatasets(const H5Reader& in, const ParamLayout& full) {
  for (const std::string& name : in.DatasetNames()) {
    if (full.Find(name) != nullptr) continue;
    const ModelDims& d = full.dims();
    const std::string switches =
        d.transformer() ? absl::StrCat("attention ", AttentionKindName(d.attention))
                        : absl::StrCat("position ", kernels::PositionKindName(d.position), ", output_gate ",
                                       d.output_gate ? "true" : "false");
    return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " is not a parameter of model ",
                                                   d.name, " (family ", FamilyName(d.family), ", ", switches,
                                                   ", as the root attributes say)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Weights> ReadWeightsFile(const std::string& path) {
  MS_ASSIGN_OR_RETURN(auto in, H5Reader::Open(path));
  Weights w;
  MS_ASSIGN_OR_RETURN(w.dims, ReadModelDims(*in));
  // The sizes are bounded; the parameters must also fit in the file before a
  // buffer is sized from them.
  std::error_code ec;
  const double file_bytes = double(std::filesystem::file_size(path, ec));
  if (ec || 4 * ModelParamCount(w.dims) > file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": its model sizes need ", 4 * ModelParamCount(w.dims),
                                                   " bytes of parameters, more than the file's ", file_bytes));
  }
  const ParamLayout layout(w.dims, ShardSpec::Full(w.dims));
  MS_RETURN_IF_ERROR(CheckWeightsFileDatasets(*in, layout));
  for (const ParamEntry& e : layout.entries()) MS_RETURN_IF_ERROR(CheckDatasetHolds(*in, e.name, e.global_shape));
  MS_ASSIGN_OR_RETURN(const int64_t stored, StoredParamsCrc(*in));
  w.params.resize(layout.size());
  for (const ParamEntry& e : layout.entries()) {
    MS_ASSIGN_OR_RETURN(std::vector<float> data, in->ReadFloat(e.name, e.global_shape));
    MS_RETURN_IF_ERROR(CheckFinite(data.data(), int64_t(data.size()), path, e.name));
    std::copy(data.begin(), data.end(), w.params.begin() + e.buffer_offset);
  }
  // Files written before the checksum existed have no params_crc32c; they load unchecked.
  if (stored >= 0) {
    const int64_t computed = Crc32c(w.params.data(), w.params.size() * sizeof(float));
    if (stored != computed) {
      return absl::DataLossError(absl::StrCat(path, ": the parameters fail their CRC-32C (stored ", stored,
                                              ", computed ", computed,
                                              "): the file is corrupted, or was edited without deleting that attribute"));
    }
  }
  return w;
}

absl::Status CheckModelDims(const ModelDims& d, const std::string& source, const std::string& field) {
  const struct {
    const char* name;
    int64_t value, lo, hi;
  } sizes[] = {{"n_layers", d.n_layers, 1, int64_t{1} << 16}, {"n_heads", d.n_heads, 1, int64_t{1} << 16},
               {"d_e", d.d_e, 1, int64_t{1} << 20},           {"d_k", d.d_k, 2, int64_t{1} << 20},
               {"d_v", d.d_v, 1, int64_t{1} << 20},           {"vocab", d.vocab, 1, (int64_t{1} << 31) - 1}};
  for (const auto& s : sizes) {
    if (s.value < s.lo || s.value > s.hi) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, s.name, " = ", s.value,
                                                     " is outside [", s.lo, ", ", s.hi, "]"));
    }
  }
  // The name ends up in messages and file names: one short printable line.
  if (!IsPrintableModelName(d.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", field, "name is not a line of at most 256 printable characters"));
  }
  if (!std::isfinite(d.w_th) || !(d.w_th > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, "w_th = ", d.w_th, " must be finite and positive"));
  }
  if (d.eos_token < 0 || d.eos_token >= d.vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", field, "eos_token = ", d.eos_token, " is not a token id below vocab = ", d.vocab));
  }
  // The families' own constraints (what ResolveModel enforces for model files): the
  // Transformer's head width is d_e / n_heads, a whole number, even for RoPE (at least 2
  // for screening's MiPE), and the kernels size their buffers from d_k; its switches do not
  // exist for Multiscreen.
  if (d.transformer()) {
    const bool rope_pairs = d.attention != AttentionKind::kScreening;
    if (d.d_e % d.n_heads != 0 || (rope_pairs && (d.d_e / d.n_heads) % 2 != 0) || d.d_k != d.d_e / d.n_heads) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, "d_k = ", d.d_k,
                                                     " is not the Transformer's head width d_e / n_heads = ", d.d_e,
                                                     " / ", d.n_heads,
                                                     rope_pairs ? " (a whole, even number)" : " (a whole number)"));
    }
    // What model files cannot set for a Transformer: its MiPE threshold (screening heads)
    // is the default, d_v its head width (a weights file's were ignored when edited).
    if (d.w_th != ModelDims().w_th) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, "w_th = ", d.w_th, ": a Transformer's is ",
                                                     ModelDims().w_th, " (model files cannot set it)"));
    }
    if (d.d_v != d.d_k) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, "d_v = ", d.d_v,
                                                     ": a Transformer's is its head width d_k = ", d.d_k));
    }
    if (!d.tanh_norm) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", field, "tanh_norm = false is a Multiscreen switch, not the Transformer's"));
    }
    if (d.position != kernels::PositionKind::kMipe || !d.output_gate) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", field,
                                                     d.output_gate ? "position" : "output_gate = false",
                                                     " is a Multiscreen switch, not the Transformer's"));
    }
  } else if (d.qk_norm || d.sio) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", field, d.qk_norm ? "qk_norm" : "sio", " is a Transformer switch, not Multiscreen's"));
  } else if (d.attention != AttentionKind::kSoftmax) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, "attention = ", AttentionKindName(d.attention),
                                                   " is a Transformer switch, not Multiscreen's"));
  }
  return absl::OkStatus();
}

absl::Status CheckDatasetHolds(const H5Reader& in, const std::string& name, const std::vector<int64_t>& shape,
                               bool allow_zero_fill) {
  MS_ASSIGN_OR_RETURN(const H5Reader::DatasetInfo info, in.Describe(name));
  auto text = [](const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); };
  if (info.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " has shape ", text(info.shape),
                                                   ", expected ", text(shape)));
  }
  if (!info.is_float) {
    return absl::InvalidArgumentError(absl::StrCat(in.path(), ": dataset ", name, " is not floating point"));
  }
  // Unallocated chunks read as fill values: every element must be stored.
  // (Compressed datasets, which this project never writes, fail here too.)
  const double needed = double(info.elements) * double(info.type_bytes);
  if (double(info.storage_bytes) < needed && !(allow_zero_fill && info.zero_fill && info.filters == 0)) {
    return absl::DataLossError(absl::StrCat(in.path(), ": dataset ", name, " stores ", info.storage_bytes,
                                            " bytes of the ", needed, " its shape needs",
                                            info.filters > 0 ? " (compressed: not supported)" : " (never written)"));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(const float* data, int64_t n, const std::string& path, const std::string& dataset) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) {
      return absl::DataLossError(absl::StrCat(path, ": dataset ", dataset, " holds a non-finite value (", data[i],
                                              ") at element ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace multiscreen

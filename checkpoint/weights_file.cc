#include "checkpoint/weights_file.h"

#include "absl/strings/str_cat.h"
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
  return absl::OkStatus();
}

absl::StatusOr<ModelDims> ReadModelDims(const H5Reader& in) {
  auto format = in.ReadStringAttribute("format");
  if (!format.ok() || *format != "multiscreen-weights") {
    return absl::InvalidArgumentError(
        absl::StrCat(in.path(), ": not a multiscreen weights file (root attribute format != \"multiscreen-weights\")"));
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
  // Re-check the sizes as a config would be checked.
  config::ModelConfig m;
  m.set_name(d.name);
  m.set_n_layers(d.n_layers);
  m.set_n_heads(d.n_heads);
  m.set_d_e(d.d_e);
  m.set_d_k(d.d_k);
  m.set_d_v(d.d_v);
  m.set_vocab(d.vocab);
  m.set_w_th(d.w_th);
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

absl::StatusOr<Weights> ReadWeightsFile(const std::string& path) {
  MS_ASSIGN_OR_RETURN(auto in, H5Reader::Open(path));
  Weights w;
  MS_ASSIGN_OR_RETURN(w.dims, ReadModelDims(*in));
  const ParamLayout layout(w.dims, ShardSpec::Full(w.dims));
  w.params.resize(layout.size());
  for (const ParamEntry& e : layout.entries()) {
    MS_ASSIGN_OR_RETURN(std::vector<float> data, in->ReadFloat(e.name, e.global_shape));
    std::copy(data.begin(), data.end(), w.params.begin() + e.buffer_offset);
  }
  // Files written before the checksum existed have no params_crc32c; they load unchecked.
  if (auto stored = in->ReadIntAttribute("params_crc32c"); stored.ok()) {
    const int64_t computed = Crc32c(w.params.data(), w.params.size() * sizeof(float));
    if (*stored != computed) {
      return absl::DataLossError(absl::StrCat(path, ": the parameters fail their CRC-32C (stored ", *stored,
                                              ", computed ", computed,
                                              "): the file is corrupted, or was edited without deleting that attribute"));
    }
  }
  return w;
}

}  // namespace multiscreen

#include "common/config.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/decimal.h"
#include "common/input_file.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

#ifndef MULTISCREEN_SOURCE_CONFIG_DIR
#define MULTISCREEN_SOURCE_CONFIG_DIR "configs"
#endif

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

class CollectFirstError : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectFirstError(std::string path) : path_(std::move(path)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(path_, ":", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string path_;
  std::string first_;
};

absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

}  // namespace

std::string ConfigDir() {
  if (const char* env = std::getenv("MULTISCREEN_CONFIG_DIR"); env != nullptr && *env != '\0') {
    // Without trailing slashes, so that its parent (the source tree: tools/, data_cache/)
    // is the directory above, whether the variable says `configs` or `configs/`.
    std::string dir = env;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir;
  }
  return MULTISCREEN_SOURCE_CONFIG_DIR;
}

absl::Status ParseTextFile(const std::string& path, google::protobuf::Message* message) {
  auto text = ReadRegularFile(path, "text-format config file", kMaxConfigFileBytes);
  if (!text.ok()) return text.status();
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors(path);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, message)) {
    return absl::InvalidArgumentError(errors.first().empty() ? absl::StrCat(path, ": parse error")
                                                             : errors.first());
  }
  return absl::OkStatus();
}

absl::StatusOr<config::ModelConfig> LoadModelConfig(const std::string& name_or_path) {
  std::string path(name_or_path);
  const bool is_path = path.find('/') != std::string::npos || path.ends_with(".textproto");
  if (!is_path) {
    const fs::path models = fs::path(ConfigDir()) / "models";
    path = (models / (path + ".textproto")).string();
    if (!fs::exists(path)) {
      std::error_code ec;
      if (!fs::is_directory(models, ec)) {
        const char* env = std::getenv("MULTISCREEN_CONFIG_DIR");
        return absl::NotFoundError(absl::StrCat(
            "--model: unknown model '", name_or_path, "': the model directory ", models.string(), " does not exist",
            env != nullptr && *env != '\0' ? " (MULTISCREEN_CONFIG_DIR names its parent)" : ""));
      }
      std::vector<std::string> known;
      for (const auto& entry : fs::directory_iterator(models, ec)) {
        if (entry.path().extension() == ".textproto") known.push_back(entry.path().stem().string());
      }
      std::sort(known.begin(), known.end());
      return absl::NotFoundError(absl::StrCat("--model: unknown model '", name_or_path, "' (no ", path,
                                              "; known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  config::ModelConfig model;
  if (absl::Status s = ParseTextFile(path, &model); !s.ok()) return s;
  if (model.name().empty()) model.set_name(fs::path(path).stem().string());
  return model;
}

bool IsPrintableModelName(const std::string& name) {
  return name.size() <= 256 &&
         std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

const char* FamilyName(ModelFamily family) {
  return family == ModelFamily::kTransformer ? "transformer" : "multiscreen";
}

std::vector<ModelField> ModelFields(const ModelDims& d) {
  const bool t = d.transformer(), screening = d.attention == AttentionKind::kScreening;
  auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
  // w_th in its shortest exact form (two thresholds that differ never print alike).
  char w_th[32];
  const auto end = std::to_chars(w_th, w_th + sizeof(w_th), d.w_th).ptr;
  return {{"family", FamilyName(d.family), true},
          {"n_layers", absl::StrCat(d.n_layers), true},
          {"n_heads", absl::StrCat(d.n_heads), true},
          {"d_e", absl::StrCat(d.d_e), true},
          {"d_k", absl::StrCat(d.d_k), true},
          {"d_v", absl::StrCat(d.d_v), !t},
          {"vocab", absl::StrCat(d.vocab), true},
          {"w_th", std::string(w_th, end), !t || screening},
          {"pl_norm", flag(d.pl_norm), true},
          {"qk_norm", flag(d.qk_norm), t},
          {"sio", flag(d.sio), t},
          {"tanh_norm", flag(d.tanh_norm), !t},
          {"attention", AttentionKindName(d.attention), t},
          {"position", kernels::PositionKindName(d.position), !t},
          {"output_gate", flag(d.output_gate), !t},
          {"sigmoid_bias", SigmoidBiasName(d.sigmoid_bias), t && d.attention == AttentionKind::kSigmoid}};
}

std::vector<std::string> ModelDifferences(const ModelDims& a, const ModelDims& b, const std::string& a_label,
                                          const std::string& b_label) {
  const std::vector<ModelField> fa = ModelFields(a), fb = ModelFields(b);
  std::vector<std::string> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    if (fa[i].value == fb[i].value) continue;
    out.push_back(absl::StrCat(fa[i].name, " = ", fa[i].value, " in ", a_label, ", ", fb[i].value, " in ", b_label));
  }
  return out;
}

double ModelParamCount(const ModelDims& d) {
  if (d.transformer()) {
    // W_E; per layer W_Q, W_K, W_V, W_O [d_E, d_E] in heads, W_gate, W_up, W_down
    // [⌊8d_E/3⌋, d_E], two RMSNorm gains [d_E]; s_QK per head (qk_norm); s_SS per head
    // (SSMax); s_w, s_r per head (screening); s_E, s_F (sio).
    const double dE = double(d.d_e), f = double(d.d_ff());
    return double(d.vocab) * dE + (d.sio ? 2 : 0) +
           double(d.n_layers) * (4 * dE * dE + 3 * dE * f + 2 * dE + (d.qk_norm ? double(d.n_heads) : 0) +
                                 (d.attention == AttentionKind::kSsmax ? double(d.n_heads) : 0) +
                                 (d.attention == AttentionKind::kScreening ? 2.0 * double(d.n_heads) : 0));
  }
  // W_E and s_E, s_F; per layer and tile W_Q, W_K [d_E, d_K], W_V, W_G [d_E, d_V] (no
  // W_G with output_gate off), W_O [d_V, d_E] and s_w, s_r, s_O.
  const double value_mats = d.output_gate ? 3.0 : 2.0;
  return double(d.vocab) * double(d.d_e) + 2 +
         double(d.n_layers) * double(d.n_heads) *
             (double(d.d_e) * (2.0 * double(d.d_k) + value_mats * double(d.d_v)) + 3);
}

absl::StatusOr<ModelDims> ResolveModel(const config::ModelConfig& m, const std::string& source) {
  if (!config::ModelConfig::Family_IsValid(m.family())) {
    return Invalid(source, absl::StrCat("family = ", m.family(),
                                        " is not a known value (MULTISCREEN = 1, TRANSFORMER = 2)"));
  }
  const bool transformer = m.family() == config::ModelConfig::TRANSFORMER;
  if (transformer) {
    for (const auto& [field, set] : {std::pair{"d_k", m.has_d_k()}, std::pair{"d_v", m.has_d_v()},
                                     std::pair{"w_th", m.has_w_th()}}) {
      if (set) return Invalid(source, absl::StrCat(field, " is a Multiscreen field; a TRANSFORMER's head width is d_e / n_heads"));
    }
    if (m.has_tanh_norm()) return Invalid(source, "tanh_norm is a Multiscreen switch; a TRANSFORMER has no TanhNorm");
    if (m.has_position()) {
      return Invalid(source, "position is a Multiscreen switch; a TRANSFORMER uses RoPE (attention: SCREENING, MiPE)");
    }
    if (m.has_output_gate()) return Invalid(source, "output_gate is a Multiscreen switch; a TRANSFORMER has no tile gate");
    if (!config::ModelConfig::Attention_IsValid(m.attention())) {
      return Invalid(source, absl::StrCat("attention = ", m.attention(),
                                          " is not a known value (SOFTMAX, SOFTMAX1, SSMAX, SIGMOID, ENTMAX15, SCREENING)"));
    }
  } else {
    if (m.has_attention()) {
      return Invalid(source, "attention is a Transformer switch (family: TRANSFORMER); Multiscreen screens");
    }
    if (m.has_sigmoid_bias()) {
      return Invalid(source, "sigmoid_bias is a Transformer switch (family: TRANSFORMER, attention: SIGMOID)");
    }
    if (!config::ModelConfig::Position_IsValid(m.position())) {
      return Invalid(source, absl::StrCat("position = ", m.position(), " is not a known value (MIPE, NOPE, ROPE)"));
    }
    for (const auto& [field, set] : {std::pair{"qk_norm", m.has_qk_norm()}, std::pair{"sio", m.has_sio()}}) {
      if (set) return Invalid(source, absl::StrCat(field, " is a Transformer switch (family: TRANSFORMER)"));
    }
  }
  ModelDims d;
  if (transformer) {
    d.family = ModelFamily::kTransformer;
    d.pl_norm = false;  // the plain baseline ends in an RMSNorm
    d.qk_norm = m.qk_norm();
    d.sio = m.sio();
    if (m.attention() != config::ModelConfig::ATTENTION_UNSPECIFIED) d.attention = AttentionKind(m.attention());
    if (m.has_sigmoid_bias()) {
      if (d.attention != AttentionKind::kSigmoid) {
        return Invalid(source, absl::StrCat("sigmoid_bias applies to attention: SIGMOID only (attention is ",
                                            AttentionKindName(d.attention), ")"));
      }
      if (!config::ModelConfig::SigmoidBias_IsValid(m.sigmoid_bias())) {
        return Invalid(source, absl::StrCat("sigmoid_bias = ", m.sigmoid_bias(),
                                            " is not a known value (TRAIN_LENGTH, PER_QUERY)"));
      }
      if (m.sigmoid_bias() == config::ModelConfig::PER_QUERY) d.sigmoid_bias = SigmoidBias::kPerQuery;
    }
    if (d.attention == AttentionKind::kScreening && d.qk_norm) {
      return Invalid(source, "qk_norm does not apply to attention: SCREENING (screening makes q and k unit length itself)");
    }
  }
  d.name = m.name();
  if (!IsPrintableModelName(d.name)) return Invalid(source, "name is not a line of at most 256 printable characters");
  if (m.has_psi()) {
    if (m.psi() <= 0 || m.psi() > 4096) {
      return Invalid(source, absl::StrCat("psi = ", m.psi(), " must be in [1, 4096]"));
    }
    d.n_layers = d.n_heads = m.psi();
    d.d_e = m.psi() * m.psi();
  }
  if (m.has_n_layers()) d.n_layers = m.n_layers();
  if (m.has_n_heads()) d.n_heads = m.n_heads();
  if (m.has_d_e()) d.d_e = m.d_e();
  if (m.has_d_k()) d.d_k = m.d_k();
  if (m.has_d_v()) d.d_v = m.d_v();
  if (m.has_vocab()) d.vocab = m.vocab();
  if (m.has_w_th()) d.w_th = m.w_th();
  if (m.has_pl_norm()) d.pl_norm = m.pl_norm();
  if (m.has_tanh_norm()) d.tanh_norm = m.tanh_norm();
  if (m.position() != config::ModelConfig::POSITION_UNSPECIFIED) d.position = kernels::PositionKind(m.position());
  if (m.has_output_gate()) d.output_gate = m.output_gate();
  if (m.has_eos_token()) d.eos_token = m.eos_token();
  const std::pair<const char*, int64_t> sizes[] = {{"n_layers", d.n_layers}, {"n_heads", d.n_heads},
                                                   {"d_e", d.d_e},           {"d_v", d.d_v},
                                                   {"vocab", d.vocab}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0) {
      return Invalid(source, absl::StrCat(field, " = ", value, " must be positive (set psi or ", field, ")"));
    }
    if (value > kMaxModelSize && std::string_view(field) != "vocab") {
      return Invalid(source, absl::StrCat(field, " = ", value, " is more than ", kMaxModelSize));
    }
  }
  if (transformer) {
    if (d.attention == AttentionKind::kScreening) {  // MiPE turns coordinates 0 and 1: a width ≥ 2
      if (d.d_e % d.n_heads != 0 || d.d_e / d.n_heads < 2) {
        return Invalid(source, absl::StrCat("d_e = ", d.d_e, " must be n_heads = ", d.n_heads,
                                            " times a head width of at least 2 (screening's MiPE turns coordinates 0 and 1)"));
      }
    } else if (d.d_e % d.n_heads != 0 || (d.d_e / d.n_heads) % 2 != 0) {
      return Invalid(source, absl::StrCat("d_e = ", d.d_e, " must be n_heads = ", d.n_heads,
                                          " times an even head width (RoPE rotates pairs)"));
    }
    if (d.d_ff() < 1) return Invalid(source, absl::StrCat("d_e = ", d.d_e, " gives no SwiGLU width (floor(8 d_e / 3) = 0)"));
    d.d_k = d.d_v = d.d_e / d.n_heads;
  }
  if (d.d_k < 2) return Invalid(source, absl::StrCat("d_k = ", d.d_k, " must be at least 2 (MiPE rotates coordinates 0 and 1)"));
  if (d.position == kernels::PositionKind::kRope && d.d_k % 2 != 0) {
    return Invalid(source, absl::StrCat("d_k = ", d.d_k, " must be even for position: ROPE (it turns pairs p, p + d_k/2)"));
  }
  if (d.d_k > kMaxModelSize) return Invalid(source, absl::StrCat("d_k = ", d.d_k, " is more than ", kMaxModelSize));
  if (d.vocab < 2) {  // one token: nothing to predict (softmax over one logit is 1)
    return Invalid(source, absl::StrCat("vocab = ", d.vocab, " must be at least 2"));
  }
  if (d.vocab > INT32_MAX) {
    return Invalid(source, absl::StrCat("vocab = ", d.vocab, " is more than 2^31 - 1 (token ids are int32)"));
  }
  const double params = ModelParamCount(d);
  if (params > kMaxModelParams) {
    return Invalid(source, absl::StrCat("the sizes (N_L = ", d.n_layers, ", N_H = ", d.n_heads, ", d_E = ", d.d_e,
                                        ", d_K = ", d.d_k, ", d_V = ", d.d_v, ", V = ", d.vocab, ") make ",
                                        absl::StrFormat("%.3g", params), " parameters, more than ",
                                        absl::StrFormat("%.0g", kMaxModelParams)));
  }
  if (!(d.w_th > 0) || !std::isfinite(d.w_th)) {
    return Invalid(source, absl::StrCat("w_th = ", d.w_th, " must be finite and positive"));
  }
  if (d.eos_token < 0 || d.eos_token >= d.vocab) {
    d.eos_token = d.vocab - 1;  // tiny vocabularies: EOS is the last id
  }
  return d;
}

absl::StatusOr<ModelDims> LoadModel(const std::string& name_or_path) {
  auto model = LoadModelConfig(name_or_path);
  if (!model.ok()) return model.status();
  return ResolveModel(*model, name_or_path);
}

absl::StatusOr<config::RunConfig> LoadRunConfig(const std::string& path) {
  config::RunConfig run;
  if (absl::Status s = ParseTextFile(path, &run); !s.ok()) return s;
  return run;
}

void ApplyRunDefaults(config::RunConfig* r) {
  if (r->grad_accum() == 0) r->set_grad_accum(1);
  auto* par = r->mutable_parallel();
  if (par->tp() == 0) par->set_tp(1);
  if (par->pp() == 0) par->set_pp(1);
  auto* o = r->mutable_optimizer();
  if (!o->has_lr()) o->set_lr(0.0625);
  if (!o->has_beta1()) o->set_beta1(0.9);
  if (!o->has_beta2()) o->set_beta2(0.95);
  if (!o->has_eps()) o->set_eps(1e-8);
  if (r->eval().batches() == 0 && r->eval().windows() == 0) r->mutable_eval()->set_batches(4);
  if (r->checkpoint().keep_last() == 0) r->mutable_checkpoint()->set_keep_last(3);
  if (r->logging().console_every() == 0) r->mutable_logging()->set_console_every(1);
  if (r->max_nonfinite_steps() == 0) r->set_max_nonfinite_steps(10);
  if (r->initial_loss_scale() == 0) r->set_initial_loss_scale(65536.0);
}

std::string RunSource::Name(const std::string& field) const {
  if (auto it = flags.find(field); it != flags.end()) return absl::StrCat("--", it->second, " (", field, ")");
  return file.empty() ? field : absl::StrCat(file, ": ", field);
}

int64_t RunMemoryLowerBound(const ModelDims& d, int64_t tp, int64_t pp, int64_t tokens, int64_t step_tokens) {
  // Kept per token and layer (model/multiscreen.h, LayerActivations): the layer's input
  // [d_E], and per local tile P [2 d_K + 2 d_V], U, v̄, h [d_V each], q̃, k̃ [d_K each]
  // and three norms; plus a few residual-width buffers per token for the whole model.
  const double tiles = double(d.n_heads) / double(std::max<int64_t>(1, tp));
  const double layers = double(d.n_layers) / double(std::max<int64_t>(1, pp));
  // The Transformer keeps per layer about 12 d_E (inputs, norms, q, k, v, attention
  // output) and 4 d_ff (gate, up, SwiGLU output) per token, over the tp ranks.
  const double per_token =
      d.transformer()
          ? layers * (12.0 * double(d.d_e) + 4.0 * double(d.d_ff())) / double(std::max<int64_t>(1, tp)) + 4.0 * double(d.d_e)
          : layers * (double(d.d_e) + tiles * double(4 * d.d_k + 5 * d.d_v + 3)) + 4.0 * double(d.d_e);
  // The loader keeps up to four batches of int32 tokens (two prefetched, one being
  // made, one in use); the rank's parameters and gradients are fp32 (its AdamW moments
  // too, but ZeRO-1 spreads those over the dp ranks, unknown here).
  const double bytes = 4.0 * per_token * double(tokens) + 16.0 * double(step_tokens) +
                       8.0 * ModelParamCount(d) / double(std::max<int64_t>(1, tp) * std::max<int64_t>(1, pp));
  return bytes >= 9e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return INT64_MAX;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page);
}

namespace {

// "x must be finite and in [lo, hi]" as a check.
bool InRange(double x, double lo, double hi) { return std::isfinite(x) && x >= lo && x <= hi; }

}  // namespace

absl::Status ValidateRun(const config::RunConfig& r, const ModelDims& d, const RunSource& source) {
  auto bad = [&](const std::string& field, const auto&... why) {
    return absl::InvalidArgumentError(absl::StrCat(source.Name(field), ": ", why...));
  };
  // Enums first: proto3's text format keeps numbers it does not know.
  if (!config::RunConfig::Precision_IsValid(r.precision())) {
    return bad("precision", r.precision(), " is not a known value (FP32 = 1, BF16 = 2, FP16 = 3)");
  }
  if (!config::ScheduleConfig::Kind_IsValid(r.schedule().kind())) {
    return bad("schedule.kind", r.schedule().kind(),
               " is not a known value (WARMUP_CONSTANT = 1, WARMUP_COSINE = 2, WARMUP_STABLE_DECAY = 3)");
  }
  // Sizes: positive, small enough to index with int32 and to fit this machine.
  if (r.steps() <= 0) return bad("steps", r.steps(), " must be positive (--steps or steps in --config)");
  if (r.micro_batch() <= 0) return bad("micro_batch", r.micro_batch(), " must be positive");
  if (r.grad_accum() <= 0) return bad("grad_accum", r.grad_accum(), " must be positive (0 in a run file: 1)");
  if (r.seq_len() <= 0) return bad("seq_len", r.seq_len(), " must be positive");
  const double micro_tokens = double(r.micro_batch()) * double(r.seq_len() + 1);
  if (micro_tokens > double(kMaxBatchTokens)) {
    return bad("micro_batch", r.micro_batch(), " sequences of seq_len + 1 = ", r.seq_len() + 1, " tokens are ",
               absl::StrFormat("%.4g", micro_tokens), " tokens per micro-batch, more than 2^31 - 1");
  }
  const double step_tokens = micro_tokens * double(r.grad_accum());
  if (step_tokens > double(kMaxBatchTokens)) {
    return bad("grad_accum", r.grad_accum(), " micro-batches of ", static_cast<int64_t>(micro_tokens), " tokens are ",
               absl::StrFormat("%.4g", step_tokens), " tokens per step and rank, more than 2^31 - 1");
  }
  if (double(r.steps()) * step_tokens > 1e15) {
    return bad("steps", r.steps(), " steps of ", static_cast<int64_t>(step_tokens),
               " tokens are more than 10^15 tokens per rank");
  }
  const int64_t tp = r.parallel().tp() == 0 ? 1 : r.parallel().tp();
  const int64_t pp = r.parallel().pp() == 0 ? 1 : r.parallel().pp();
  if (tp < 1 || d.n_heads % tp != 0) return bad("parallel.tp", "tp = ", tp, " does not divide N_H = ", d.n_heads);
  if (pp < 1 || d.n_layers % pp != 0) return bad("parallel.pp", "pp = ", pp, " does not divide N_L = ", d.n_layers);
  if (r.parallel().zero() != 0 && r.parallel().zero() != 1) return bad("parallel.zero", r.parallel().zero(), " must be 0 or 1");
  if (const std::string& o = r.parallel().dp_overlap(); !o.empty() && o != "on" && o != "off") {
    return bad("parallel.dp_overlap", "\"", o, "\" must be on or off");
  }
  if (!InRange(r.parallel().dp_bucket_mb(), 0, 1 << 20)) {
    return bad("parallel.dp_bucket_mb", r.parallel().dp_bucket_mb(), " must be in [0, 2^20] MiB (0: 16)");
  }
  if (const double t = r.parallel().collective_timeout_s(); !InRange(t, 0, 1e7) || (t > 0 && t < 1)) {
    return bad("parallel.collective_timeout_s", PlainDecimal(t),
               " must be 0 (600) or in [1, 10^7] s (a healthy collective can take longer than a second; 10^7 s is "
               "116 days)");
  }
  const int64_t memory = PhysicalMemoryBytes();
  const int64_t need = RunMemoryLowerBound(d, tp, pp, r.micro_batch() * r.seq_len(),
                                           static_cast<int64_t>(step_tokens));
  if (need > memory) {
    return bad("micro_batch", r.micro_batch(), " x seq_len ", r.seq_len(), " (x grad_accum ", r.grad_accum(),
               ") needs at least ", ByteSize(need), " per process for model ", d.name, ", more than the ",
               ByteSize(memory), " of memory this machine has");
  }
  // The optimizer: every value finite, in the range where AdamW is defined.
  const auto& o = r.optimizer();
  if (!InRange(o.lr(), 0, 1)) return bad("optimizer.lr", o.lr(), " must be in [0, 1] (the paper's peak is 2^-4)");
  if (!InRange(o.beta1(), 0, 1) || o.beta1() == 1) return bad("optimizer.beta1", o.beta1(), " must be in [0, 1)");
  if (!InRange(o.beta2(), 0, 1) || o.beta2() == 1) return bad("optimizer.beta2", o.beta2(), " must be in [0, 1)");
  if (!InRange(o.eps(), 0, 1) || o.eps() == 0) return bad("optimizer.eps", o.eps(), " must be in (0, 1] (default 1e-8)");
  if (!InRange(o.weight_decay(), 0, 1e30) || o.lr() * o.weight_decay() > 1) {
    return bad("optimizer.weight_decay", o.weight_decay(), " must be finite, >= 0 and at most 1 / lr = ",
               o.lr() > 0 ? 1 / o.lr() : 0, " (decoupled decay scales weights by 1 - lr * weight_decay)");
  }
  if (!InRange(o.grad_clip(), 0, 1e30)) return bad("optimizer.grad_clip", o.grad_clip(), " must be finite and >= 0 (0 = off)");
  const auto& sc = r.schedule();
  if (sc.warmup_steps() < 0 || sc.warmup_steps() > (int64_t{1} << 40)) {
    return bad("schedule.warmup_steps", sc.warmup_steps(), " must be in [0, 2^40]");
  }
  if (!InRange(sc.min_lr_ratio(), 0, 1)) return bad("schedule.min_lr_ratio", sc.min_lr_ratio(), " must be in [0, 1]");
  if (!InRange(sc.decay_fraction(), 0, 1)) {
    return bad("schedule.decay_fraction", sc.decay_fraction(), " must be in [0, 1]");
  }
  if (r.checkpoint().every() < 0) return bad("checkpoint.every", r.checkpoint().every(), " is negative");
  if (r.checkpoint().keep_last() < 0) return bad("checkpoint.keep_last", r.checkpoint().keep_last(), " is negative");
  if (r.checkpoint().keep_every() < 0) return bad("checkpoint.keep_every", r.checkpoint().keep_every(), " is negative");
  // Retention keeps the saved steps that are multiples of keep_every: with saves every
  // `every` steps, only multiples of both ever are (issue 31: 25 with saves every 10
  // never matched).
  if (const int64_t e = r.checkpoint().every(), k = r.checkpoint().keep_every(); e > 0 && k > 0 && k % e != 0) {
    return bad("checkpoint.keep_every", k, " is not a multiple of checkpoint.every = ", e,
               ": only saved steps are kept, so it would keep every ", std::lcm(k, e), "-th step");
  }
  if (r.eval().every() < 0) return bad("eval.every", r.eval().every(), " is negative");
  if (r.eval().batches() < 0 || r.eval().batches() > kMaxEvalBatches) {
    return bad("eval.batches", r.eval().batches(), " must be in [0, 2^20] (micro-batches per validation pass)");
  }
  if (r.eval().windows() < 0 || r.eval().windows() > kMaxEvalBatches * 64) {
    return bad("eval.windows", r.eval().windows(), " must be in [0, 2^26] (held-out windows per validation pass)");
  }
  if (r.eval().windows() > 0 && r.eval().batches() > 0) {
    return bad("eval.windows", r.eval().windows(), " and eval.batches = ", r.eval().batches(),
               " are both set: set one (windows: the same windows under every layout)");
  }
  if (r.logging().console_every() < 0) return bad("logging.console_every", r.logging().console_every(), " is negative");
  if (r.max_nonfinite_steps() < 0) return bad("max_nonfinite_steps", r.max_nonfinite_steps(), " is negative");
  if (!InRange(r.initial_loss_scale(), 0, 0x1p64) || r.initial_loss_scale() == 0) {
    return bad("initial_loss_scale", r.initial_loss_scale(), " must be in (0, 2^64] (default 65536)");
  }
  return absl::OkStatus();
}

}  // namespace multiscreen

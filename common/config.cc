#include "common/config.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
    return env;
  }
  return MULTISCREEN_SOURCE_CONFIG_DIR;
}

absl::Status ParseTextFile(const std::string& path, google::protobuf::Message* message) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors(path);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), message)) {
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
      std::vector<std::string> known;
      std::error_code ec;
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

absl::StatusOr<ModelDims> ResolveModel(const config::ModelConfig& m, const std::string& source) {
  if (m.family() == config::ModelConfig::TRANSFORMER) {
    return Invalid(source, "family TRANSFORMER is not supported yet (only MULTISCREEN)");
  }
  ModelDims d;
  d.name = m.name();
  if (m.has_psi()) {
    if (m.psi() <= 0) return Invalid(source, absl::StrCat("psi = ", m.psi(), " must be positive"));
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
  if (m.has_eos_token()) d.eos_token = m.eos_token();
  const std::pair<const char*, int64_t> sizes[] = {{"n_layers", d.n_layers}, {"n_heads", d.n_heads},
                                                   {"d_e", d.d_e},           {"d_v", d.d_v},
                                                   {"vocab", d.vocab}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0) {
      return Invalid(source, absl::StrCat(field, " = ", value, " must be positive (set psi or ", field, ")"));
    }
  }
  if (d.d_k < 2) return Invalid(source, absl::StrCat("d_k = ", d.d_k, " must be at least 2 (MiPE rotates coordinates 0 and 1)"));
  if (!(d.w_th > 0)) return Invalid(source, absl::StrCat("w_th = ", d.w_th, " must be positive"));
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
  if (r->eval().batches() == 0) r->mutable_eval()->set_batches(4);
  if (r->checkpoint().keep_last() == 0) r->mutable_checkpoint()->set_keep_last(3);
  if (r->logging().console_every() == 0) r->mutable_logging()->set_console_every(1);
  if (r->max_nonfinite_steps() == 0) r->set_max_nonfinite_steps(10);
  if (r->initial_loss_scale() == 0) r->set_initial_loss_scale(65536.0);
}

absl::Status ValidateRun(const config::RunConfig& r, const ModelDims& d) {
  auto bad = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (r.steps() <= 0) return bad("steps", absl::StrCat(r.steps(), " must be positive (--steps or steps in --config)"));
  if (r.micro_batch() <= 0) return bad("micro_batch", absl::StrCat(r.micro_batch(), " must be positive"));
  if (r.grad_accum() < 0) return bad("grad_accum", absl::StrCat(r.grad_accum(), " is negative"));
  if (r.seq_len() <= 0) return bad("seq_len", absl::StrCat(r.seq_len(), " must be positive"));
  const auto& o = r.optimizer();
  if (!(o.lr() >= 0) || std::isinf(o.lr())) return bad("optimizer.lr", absl::StrCat(o.lr(), " must be finite and >= 0"));
  if (!(o.beta1() >= 0 && o.beta1() < 1)) return bad("optimizer.beta1", absl::StrCat(o.beta1(), " must be in [0, 1)"));
  if (!(o.beta2() >= 0 && o.beta2() < 1)) return bad("optimizer.beta2", absl::StrCat(o.beta2(), " must be in [0, 1)"));
  if (!(o.eps() >= 0)) return bad("optimizer.eps", absl::StrCat(o.eps(), " must be >= 0"));
  if (!(o.weight_decay() >= 0)) return bad("optimizer.weight_decay", absl::StrCat(o.weight_decay(), " must be >= 0"));
  if (!(o.grad_clip() >= 0)) return bad("optimizer.grad_clip", absl::StrCat(o.grad_clip(), " must be >= 0 (0 = off)"));
  if (r.schedule().warmup_steps() < 0) return bad("schedule.warmup_steps", "is negative");
  const int64_t tp = r.parallel().tp() == 0 ? 1 : r.parallel().tp();
  const int64_t pp = r.parallel().pp() == 0 ? 1 : r.parallel().pp();
  if (tp < 1 || d.n_heads % tp != 0) {
    return bad("parallel.tp", absl::StrCat("tp = ", tp, " does not divide N_H = ", d.n_heads));
  }
  if (pp < 1 || d.n_layers % pp != 0) {
    return bad("parallel.pp", absl::StrCat("pp = ", pp, " does not divide N_L = ", d.n_layers));
  }
  if (r.parallel().zero() != 0 && r.parallel().zero() != 1) {
    return bad("parallel.zero", absl::StrCat(r.parallel().zero(), " must be 0 or 1"));
  }
  if (r.checkpoint().every() < 0) return bad("checkpoint.every", "is negative");
  if (r.checkpoint().keep_last() < 0) return bad("checkpoint.keep_last", "is negative");
  if (r.checkpoint().keep_every() < 0) return bad("checkpoint.keep_every", "is negative");
  if (r.eval().every() < 0) return bad("eval.every", "is negative");
  if (r.eval().batches() < 0) return bad("eval.batches", "is negative");
  if (r.max_nonfinite_steps() < 0) return bad("max_nonfinite_steps", "is negative");
  if (r.initial_loss_scale() < 0) return bad("initial_loss_scale", "is negative");
  return absl::OkStatus();
}

}  // namespace multiscreen

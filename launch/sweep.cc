// The sweep file: loading, checks, expansion into runs (sweep.h).
#include "launch/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/input_file.h"
#include "common/log.h"
#include "common/status.h"
#include "common/text_file.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "launch/divergence.h"
#include "model/param_layout.h"
#include "nlohmann/json.hpp"
#include "trainer/flops.h"
#include "trainer/run_data.h"
#include "trainer/validation_data.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

struct AxisModel {
  config::ModelConfig config;
  std::string name;    // for run names
  std::string source;  // for messages: "F: psi[2]"
  std::vector<double> lrs;  // an arm's own lrs (empty: the sweep's lr axis)
  const config::OptimizerConfig* optimizer = nullptr;  // an arm's optimizer fields ...
  const google::protobuf::TextFormat::ParseInfoTree* optimizer_written = nullptr;  // ... and which its text wrote
};

// A name that is safe as a directory name: letters, digits, '.', '-', '_' kept, the rest '_'.
std::string FileName(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return out.empty() ? "_" : out;
}

// The models of the sweep: psi, models, model_files, then arms. `written` is the parser's
// record of the sweep file (for the fields an arm's optimizer writes).
absl::StatusOr<std::vector<AxisModel>> ModelAxis(const config::SweepConfig& sweep, const std::string& file,
                                                 const google::protobuf::TextFormat::ParseInfoTree& written) {
  std::vector<AxisModel> models;
  for (int i = 0; i < sweep.psi_size(); ++i) {
    config::ModelConfig m = sweep.psi_template();
    m.clear_n_layers();
    m.clear_n_heads();
    m.clear_d_e();
    m.set_psi(sweep.psi(i));
    const std::string name = absl::StrCat(m.name().empty() ? "psi" : m.name() + "_psi", sweep.psi(i));
    m.set_name(name);
    models.push_back({m, name, absl::StrCat(file, ": psi[", i, "] = ", sweep.psi(i)), {}, nullptr, nullptr});
  }
  for (int i = 0; i < sweep.models_size(); ++i) {
    const config::ModelConfig& m = sweep.models(i);
    models.push_back({m, m.name().empty() ? absl::StrCat("model", i) : m.name(), absl::StrCat(file, ": models[", i, "]"), {}, nullptr, nullptr});
  }
  for (int i = 0; i < sweep.model_files_size(); ++i) {
    auto m = LoadModelConfig(sweep.model_files(i));
    if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": model_files[", i, "]: ", m.status().message()));
    const std::string name = m->name().empty() ? fs::path(sweep.model_files(i)).stem().string() : m->name();
    models.push_back({*m, name, absl::StrCat(file, ": model_files[", i, "] (", sweep.model_files(i), ")"), {}, nullptr, nullptr});
  }
  const google::protobuf::FieldDescriptor* arms_field = sweep.GetDescriptor()->FindFieldByName("arms");
  for (int i = 0; i < sweep.arms_size(); ++i) {
    const config::SweepArm& arm = sweep.arms(i);
    const std::string where = absl::StrCat(file, ": arms[", i, "]");
    if (arm.model_file().empty() == !arm.has_model()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": give exactly one of model_file and model"));
    }
    if (arm.optimizer().has_lr()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": optimizer.lr is not taken here; give the arm's lr list"));
    }
    AxisModel m;
    if (!arm.model_file().empty()) {
      auto loaded = LoadModelConfig(arm.model_file());
      if (!loaded.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ".model_file: ", loaded.status().message()));
      m.config = *loaded;
      m.name = loaded->name().empty() ? fs::path(arm.model_file()).stem().string() : loaded->name();
      m.source = absl::StrCat(where, " (", arm.model_file(), ")");
    } else {
      m.config = arm.model();
      m.name = arm.model().name().empty() ? absl::StrCat("arm", i) : arm.model().name();
      m.source = where;
    }
    m.lrs.assign(arm.lr().begin(), arm.lr().end());
    m.optimizer = &arm.optimizer();
    if (const auto* tree = written.GetTreeForNested(arms_field, i)) {
      m.optimizer_written = tree->GetTreeForNested(arm.GetDescriptor()->FindFieldByName("optimizer"), -1);
    }
    models.push_back(std::move(m));
  }
  if (models.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": the model axis is empty (give psi, models, model_files or arms)"));
  }
  return models;
}

// Merges into `dst` the fields of `src` that its text wrote (`tree`, the parser's record of
// where each field was), so that a value equal to the proto3 default — `tensorboard: false`
// over a base file's `true` — overrides too, which Message::MergeFrom cannot tell from an
// absent field. Written singular fields replace dst's, nested messages merge field by
// field, repeated fields append (as MergeFrom).
void MergeWrittenFields(const google::protobuf::Message& src, const google::protobuf::TextFormat::ParseInfoTree& tree,
                        google::protobuf::Message* dst) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = src.GetDescriptor();
  const google::protobuf::Reflection* r = src.GetReflection();
  std::unique_ptr<google::protobuf::Message> copy(src.New());
  copy->CopyFrom(src);
  std::vector<const FieldDescriptor*> replaced;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (tree.GetLocation(f, f->is_repeated() ? 0 : -1).line < 0) continue;  // not written
    if (f->is_repeated()) {
      std::unique_ptr<google::protobuf::Message> only(src.New());
      only->GetReflection()->SwapFields(only.get(), copy.get(), {f});
      dst->MergeFrom(*only);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      const google::protobuf::TextFormat::ParseInfoTree* nested = tree.GetTreeForNested(f, -1);
      google::protobuf::Message* into = dst->GetReflection()->MutableMessage(dst, f);
      if (nested != nullptr) {
        MergeWrittenFields(r->GetMessage(src, f), *nested, into);
      } else {
        into->MergeFrom(r->GetMessage(src, f));
      }
    } else {
      replaced.push_back(f);
    }
  }
  dst->GetReflection()->SwapFields(copy.get(), dst, replaced);
}

// The schedules whose lr at step s does not depend on the run's length.
bool LengthFreeSchedule(const config::ScheduleConfig& s) {
  return s.kind() == config::ScheduleConfig::KIND_UNSPECIFIED || s.kind() == config::ScheduleConfig::WARMUP_CONSTANT;
}

}  // namespace

absl::StatusOr<Sweep> LoadSweep(const std::string& path) {
  config::SweepConfig sc;
  if (absl::Status s = ParseTextFile(path, &sc); !s.ok()) return s;
  // Again with the record of which fields the text wrote, for base_config (it parsed once).
  google::protobuf::TextFormat::ParseInfoTree written;
  {
    auto text = ReadRegularFile(path, "sweep file", kMaxConfigFileBytes);
    if (!text.ok()) return text.status();
    google::protobuf::TextFormat::Parser parser;
    parser.WriteLocationsTo(&written);
    config::SweepConfig again;
    if (!parser.ParseFromString(*text, &again)) return absl::InvalidArgumentError(absl::StrCat(path, ": parse error"));
  }
  Sweep sweep;
  sweep.file = path;
  std::error_code ec;

  // The base run.
  config::RunConfig base;
  if (!sc.base().empty()) {
    // Relative to the current directory, as root, data and model_files (sweep.h).
    auto parsed = LoadRunConfig(sc.base());
    if (!parsed.ok()) {
      // A relative base that is missing: say where it was looked for, and, for a file written
      // for the old rule (relative to the sweep file), the path to give.
      const fs::path beside = (fs::path(path).parent_path() / sc.base()).lexically_normal();
      const bool missing = fs::path(sc.base()).is_relative() && !fs::exists(sc.base(), ec);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": base: ", parsed.status().message(),
          missing ? absl::StrCat(" (relative paths in a sweep file are relative to the current directory, ",
                                 fs::current_path(ec).string(),
                                 fs::is_regular_file(beside, ec)
                                     ? absl::StrCat("; relative to the sweep file's directory this is ", beside.string())
                                     : "",
                                 ")")
                  : ""));
    }
    base = *parsed;
  }
  if (const auto* tree = written.GetTreeForNested(sc.GetDescriptor()->FindFieldByName("base_config"), -1)) {
    MergeWrittenFields(sc.base_config(), *tree, &base);
  }
  base.clear_model();
  base.clear_model_config();
  base.clear_run_dir();
  if (!sc.data().empty()) {
    const std::string data = fs::absolute(sc.data(), ec).lexically_normal().string();
    // Where it was looked for: relative paths are relative to the current directory (run
    // from outside the repository, configs/sweeps' data_cache/shards is not there).
    if (!fs::exists(data, ec)) {
      const fs::path beside = (fs::path(path).parent_path() / sc.data()).lexically_normal();
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": data: ", data, " does not exist",
          fs::path(sc.data()).is_relative()
              ? absl::StrCat(" (relative paths in a sweep file are relative to the current directory, ",
                             fs::current_path(ec).string(),
                             fs::exists(beside, ec) ? absl::StrCat("; relative to the sweep file's directory this is ",
                                                                   beside.string())
                                                    : "",
                             ")")
              : ""));
    }
    // data replaces the base run's data, validation included.
    if (!fs::is_directory(data, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": data: ", data,
                                                     " is a file, not a directory with val_*.bin: no validation data "
                                                     "(the fit reads validation losses)"));
    }
    config::DataConfig* d = base.mutable_data();
    d->clear_sources();
    d->clear_val_sources();
    d->clear_train_shards();
    d->add_train_shards(data);
    d->set_val_shard(data);
  }
  if (base.data().val_shard().empty() && base.data().val_sources_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no validation data (the fit reads validation losses): set data to a directory with val_*.bin, "
              "or data.val_shard / data.val_sources in the base run"));
  }
  ApplyRunDefaults(&base);

  // The root.
  if (sc.root().empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": root is empty (the directory of the runs)"));
  sweep.root = fs::absolute(sc.root(), ec).lexically_normal().string();

  // Axes.
  auto models = ModelAxis(sc, path, written);
  if (!models.ok()) return models.status();
  if (sc.tokens_size() == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": the token axis is empty (give tokens)"));
  std::vector<double> lrs(sc.lr().begin(), sc.lr().end());
  if (lrs.empty()) lrs.push_back(base.optimizer().lr());
  std::vector<int64_t> seeds(sc.seeds().begin(), sc.seeds().end());
  if (seeds.empty()) seeds.push_back(base.seed());
  for (size_t i = 0; i < lrs.size(); ++i) {
    if (!(lrs[i] > 0 && lrs[i] <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: lr[%d] = %g is outside (0, 1]", path, i, lrs[i]));
    }
    // Run names carry the lr as %g: two lrs that print alike would share a directory.
    for (size_t j = 0; j < i; ++j) {
      if (absl::StrFormat("%g", lrs[j]) == absl::StrFormat("%g", lrs[i])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: lr[%d] = %.17g repeats lr[%d] = %.17g%s", path, i, lrs[i], j, lrs[j],
            lrs[i] == lrs[j] ? "" : absl::StrFormat(" to the 6 digits of run names (both %g)", lrs[i])));
      }
    }
  }
  for (int i = 0; i < sc.seeds_size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (sc.seeds(i) == sc.seeds(j)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": seeds[", i, "] = ", sc.seeds(i), " repeats seeds[", j, "]"));
      }
    }
  }
  for (int i = 0; i < sc.psi_size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (sc.psi(i) == sc.psi(j)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": psi[", i, "] = ", sc.psi(i), " repeats psi[", j, "]"));
      }
    }
  }
  for (const AxisModel& m : *models) {
    for (size_t i = 0; i < m.lrs.size(); ++i) {
      if (!(m.lrs[i] > 0 && m.lrs[i] <= 1)) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: lr[%d] = %g is outside (0, 1]", m.source, i, m.lrs[i]));
      }
    }
  }

  // Budgets in whole steps.
  if (base.micro_batch() < 1 || base.seq_len() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the base run needs micro_batch and seq_len"));
  }
  sweep.step_tokens = base.micro_batch() * std::max<int64_t>(1, base.grad_accum()) * base.seq_len();
  std::map<int64_t, int64_t> steps_of;  // steps -> the budget that asked for them
  for (int i = 0; i < sc.tokens_size(); ++i) {
    const int64_t t = sc.tokens(i);
    if (t < sweep.step_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokens[", i, "] = ", t, " is smaller than one step (micro_batch·grad_accum·seq_len = ",
                                                     sweep.step_tokens, " tokens)"));
    }
    if (t % sweep.step_tokens != 0) {
      const int64_t below = t / sweep.step_tokens * sweep.step_tokens;
      // The whole number of steps above may not fit an int64 (a budget near 2^63).
      const std::string above = below <= INT64_MAX - sweep.step_tokens ? absl::StrCat(" or ", below + sweep.step_tokens) : "";
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokens[", i, "] = ", t, " is not a whole number of steps of ",
                                                     sweep.step_tokens, " tokens (micro_batch·grad_accum·seq_len): give ",
                                                     below, above));
    }
    const int64_t steps = t / sweep.step_tokens;
    if (auto [it, fresh] = steps_of.emplace(steps, t); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokens[", i, "] = ", t, " and ", it->second, " both come to ", steps,
                                                     " steps of ", sweep.step_tokens, " tokens"));
    }
  }
  std::vector<SweepBudget> budgets;
  for (const auto& [steps, t] : steps_of) budgets.push_back({steps, steps * sweep.step_tokens});

  // Budget mode.
  switch (sc.budget_mode()) {
    case config::SweepConfig::BUDGET_MODE_AUTO: sweep.one_run_per_model = LengthFreeSchedule(base.schedule()); break;
    case config::SweepConfig::ONE_RUN_PER_MODEL:
      if (!LengthFreeSchedule(base.schedule())) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": budget_mode ONE_RUN_PER_MODEL needs a WARMUP_CONSTANT schedule (the lr of a cosine or "
                  "stable-decay run depends on its length); use ONE_RUN_PER_BUDGET"));
      }
      sweep.one_run_per_model = true;
      break;
    case config::SweepConfig::ONE_RUN_PER_BUDGET: sweep.one_run_per_model = false; break;
    default: return absl::InvalidArgumentError(absl::StrCat(path, ": budget_mode = ", sc.budget_mode(), " is not a known mode"));
  }

  // The grid.
  std::set<std::string> names;
  for (const AxisModel& m : *models) {
    auto dims = ResolveModel(m.config, m.source);
    if (!dims.ok()) return dims.status();
    const ParamCounts counts = CountParams(*dims);
    const std::vector<std::vector<SweepBudget>> groups =
        sweep.one_run_per_model ? std::vector<std::vector<SweepBudget>>{budgets} : [&] {
          std::vector<std::vector<SweepBudget>> g;
          for (const SweepBudget& b : budgets) g.push_back({b});
          return g;
        }();
    for (double lr : m.lrs.empty() ? lrs : m.lrs) {
      for (int64_t seed : seeds) {
        for (const std::vector<SweepBudget>& group : groups) {
          SweepRun r;
          r.model = m.name;
          r.dims = *dims;
          r.params = counts.total;
          r.non_embedding_params = counts.non_embedding;
          r.budgets = group;
          r.name = FileName(absl::StrCat(m.name, sweep.one_run_per_model ? "" : absl::StrCat("_t", group[0].tokens),
                                         absl::StrFormat("_lr%g", lr), "_s", seed));
          if (!names.insert(r.name).second) {
            return absl::InvalidArgumentError(absl::StrCat(path, ": two runs are named ", r.name, " (", m.source,
                                                           "): give the models distinct names"));
          }
          r.dir = (fs::path(sweep.root) / r.name).string();
          r.run = base;
          if (m.optimizer != nullptr) {
            if (m.optimizer_written != nullptr) {
              MergeWrittenFields(*m.optimizer, *m.optimizer_written, r.run.mutable_optimizer());
            } else {
              r.run.mutable_optimizer()->MergeFrom(*m.optimizer);
            }
          }
          *r.run.mutable_model_config() = m.config;
          r.run.mutable_optimizer()->set_lr(lr);
          r.run.set_seed(seed);
          r.run.set_steps(group.back().steps);
          int64_t every = 0;
          for (const SweepBudget& b : group) every = std::gcd(every, b.steps);
          // Validation at every budget's step (and the run's last); a kept cadence of the base if it divides.
          if (base.eval().every() > 0 && every % base.eval().every() == 0) every = base.eval().every();
          r.run.mutable_eval()->set_every(every);
          sweep.checkpoint_every_from_budgets = base.checkpoint().every() <= 0;
          if (sweep.checkpoint_every_from_budgets) r.run.mutable_checkpoint()->set_every(every);
          r.run.set_run_dir(r.dir);
          r.flops_per_token = TrainingFlopsPerToken(*dims, base.seq_len(), InitialWindows(*dims));
          RunSource source;
          source.file = absl::StrCat(path, " (run ", r.name, ")");
          if (absl::Status s = ValidateRun(r.run, *dims, source); !s.ok()) return s;
          sweep.runs.push_back(std::move(r));
        }
      }
    }
  }
  return sweep;
}

absl::Status CheckSweepData(const Sweep& sweep) {
  if (sweep.runs.empty()) return absl::OkStatus();
  // Every run validates over the same held-out windows (the data, seq_len, micro_batch and
  // eval settings come from the base run alone): the first stands for all.
  const config::RunConfig& run = sweep.runs.front().run;
  RunSource source;
  source.file = sweep.file;
  auto data = OpenRunData(run, source, /*logger=*/false);
  if (!data.ok()) return absl::Status(data.status().code(), absl::StrCat(sweep.file, ": data: ", data.status().message()));
  if (data->val == nullptr && data->val_sources.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(sweep.file, ": data: ", run.data().val_shard(),
                                                   " holds no val_*.bin: no validation data (the fit reads validation losses)"));
  }
  auto opened = OpenValidation(run, data->val_sources, data->val, /*dp=*/1, /*dp_rank=*/0);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat(sweep.file, ": every run's trainer would refuse its validation data at start: ",
                                     opened.status().message()));
  }
  // The trainer scans those windows against its model's vocabulary at start: the model
  // with the smallest V refuses whatever any model would.
  const SweepRun* smallest = &sweep.runs.front();
  for (const SweepRun& r : sweep.runs) {
    if (r.dims.vocab < smallest->dims.vocab) smallest = &r;
  }
  if (auto s = CheckValidationTokenIds(*opened, smallest->dims.vocab, smallest->dims.name); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(sweep.file, ": run ", smallest->name,
                                               "'s trainer would refuse its validation data at start: ", s.message()));
  }
  return absl::OkStatus();
}

std::string RunConfigText(const SweepRun& run) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(run.run, &text);
  return absl::StrCat("# Written by `multiscreen sweep` for run ", run.name, "; do not edit (the sweep file is the source).\n", text);
}

namespace {

// Whether the run file `have` (the text of an existing run.textproto) is `r`'s run but for
// the fields that one-run-per-model budgets set (WriteRunFiles); "" when it is, else why not.
std::string BudgetOnlyDifference(const Sweep& sweep, const SweepRun& r, const std::string& have) {
  if (!sweep.one_run_per_model) return "the sweep file changed";
  config::RunConfig old_run;
  if (!google::protobuf::TextFormat::ParseFromString(have, &old_run)) return "it does not parse";
  config::RunConfig a = old_run, b = r.run;
  for (config::RunConfig* c : {&a, &b}) {
    c->clear_steps();
    c->mutable_eval()->clear_every();
    if (sweep.checkpoint_every_from_budgets) c->mutable_checkpoint()->clear_every();
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(a, b)) return "the sweep file changed more than its token budgets";
  const int64_t every = old_run.eval().every();
  for (const SweepBudget& budget : r.budgets) {
    if (budget.steps < old_run.steps() && (every <= 0 || budget.steps % every != 0)) {
      return absl::StrCat("the budget of ", budget.tokens, " tokens (step ", budget.steps, ") lies within the run's old ",
                          old_run.steps(), " steps but off its validation cadence (every ", every,
                          " steps): the run may have passed it without a validation loss");
    }
  }
  return "";
}

}  // namespace

absl::Status CheckRootOwner(const Sweep& sweep) {
  const fs::path manifest = fs::path(sweep.root) / "sweep.json";
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return absl::OkStatus();
  std::ifstream in(manifest);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("sweep") || !j["sweep"].is_string()) return absl::OkStatus();  // rewritten below
  const std::string mine = fs::absolute(sweep.file).lexically_normal().string();
  const std::string owner = j["sweep"].get<std::string>();
  if (owner == mine) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "root ", sweep.root, " holds the runs of another sweep, ", owner, " (", manifest.string(), "): give ", sweep.file,
      " a root of its own (if ", owner, " is this file before it moved, remove ", manifest.string(), ")"));
}

absl::Status WriteRunFiles(const Sweep& sweep) {
  MS_RETURN_IF_ERROR(CheckRootOwner(sweep));
  for (const SweepRun& r : sweep.runs) {
    std::error_code ec;
    fs::create_directories(r.dir, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(r.dir, ": cannot create: ", ec.message()));
    const std::string file = (fs::path(r.dir) / "run.textproto").string();
    const std::string text = RunConfigText(r);
    if (fs::exists(file, ec)) {
      std::ifstream in(file);
      std::stringstream have;
      have << in.rdbuf();
      if (have.str() == text) continue;
      if (const std::string why = BudgetOnlyDifference(sweep, r, have.str()); !why.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(file, ": differs from what ", sweep.file, " now asks for this run (",
                                                          why, "); move the run directory away to redo it"));
      }
      LogInfo("run ", r.name, ": the token budgets changed; ", file, " now trains to step ", r.run.steps());
    }
    if (absl::Status s = WriteTextFile(file, text); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string SourcePath(const std::string& relative) { return (fs::path(MULTISCREEN_SOURCE_DIR) / relative).string(); }

absl::Status WriteManifest(const Sweep& sweep) {
  MS_RETURN_IF_ERROR(CheckRootOwner(sweep));
  nlohmann::json runs = nlohmann::json::array();
  for (const SweepRun& r : sweep.runs) {
    nlohmann::json budgets = nlohmann::json::array();
    for (const SweepBudget& b : r.budgets) budgets.push_back({{"steps", b.steps}, {"tokens", b.tokens}});
    // The diverged verdict as the run's metrics stand now (`sweep fit` leaves such runs out).
    const DivergenceVerdict verdict =
        ReadDivergence((fs::path(r.dir) / "metrics.jsonl").string(), r.run.schedule().warmup_steps());
    runs.push_back({{"name", r.name},
                    {"dir", r.dir},
                    {"diverged", verdict.diverged},
                    {"diverged_step", verdict.diverged ? nlohmann::json(verdict.step) : nlohmann::json(nullptr)},
                    {"family", FamilyName(r.dims.family)},
                    {"model", r.model},
                    {"params", r.params},
                    {"non_embedding_params", r.non_embedding_params},
                    {"flops_per_token", r.flops_per_token},
                    {"lr", r.run.optimizer().lr()},
                    {"weight_decay", r.run.optimizer().weight_decay()},
                    {"grad_clip", r.run.optimizer().grad_clip()},
                    {"warmup_steps", r.run.schedule().warmup_steps()},
                    {"seed", r.run.seed()},
                    {"steps", r.run.steps()},
                    {"budgets", budgets}});
  }
  const nlohmann::json j = {{"sweep", fs::absolute(sweep.file).lexically_normal().string()},
                            {"root", sweep.root},
                            {"budget_mode", sweep.one_run_per_model ? "one_run_per_model" : "one_run_per_budget"},
                            {"step_tokens", sweep.step_tokens},
                            {"runs", runs}};
  std::error_code ec;
  fs::create_directories(sweep.root, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(sweep.root, ": cannot create: ", ec.message()));
  return WriteTextFile((fs::path(sweep.root) / "sweep.json").string(), j.dump(1) + "\n");
}

}  // namespace multiscreen

// LoadSweep (launch/sweep.h): how the sweep file's inline base_config lands on the base
// run file's fields (issue 17).
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "launch/sweep.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A fresh directory <TempDir>/<name> with data/ holding a train and a validation shard
// (llm.c header + 600 tokens below 97), as LoadSweep's checks need.
fs::path FreshDirWithData(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  for (const char* file : {"train_000000.bin", "val_000000.bin"}) {
    std::ofstream f(dir / "data" / file, std::ios::binary);
    int32_t header[256] = {20240520, 1, 600};
    f.write(reinterpret_cast<const char*>(header), sizeof(header));
    for (int i = 0; i < 600; ++i) {
      const uint16_t t = static_cast<uint16_t>(i % 97);
      f.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  return dir;
}

// The committed study configs/studies/<name>/sweep.textproto with its data and root moved
// into `dir` (FreshDirWithData's), written to dir/sweep.textproto: that path, or "" after
// a test failure naming what was missing.
std::string RelocatedStudy(const std::string& name, const fs::path& dir) {
  const char* configs = std::getenv("MULTISCREEN_CONFIG_DIR");
  if (configs == nullptr) {
    ADD_FAILURE() << "MULTISCREEN_CONFIG_DIR is not set";
    return "";
  }
  std::ifstream in(fs::path(configs) / "studies" / name / "sweep.textproto");
  if (!in) {
    ADD_FAILURE() << "configs/studies/" << name << "/sweep.textproto";
    return "";
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string study = text.str();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"data: \"data_cache/shards\"", "data: \"" + (dir / "data").string() + "\""},
           {"root: \"runs/studies/" + name + "\"", "root: \"" + (dir / "root").string() + "\""}}) {
    const size_t at = study.find(from);
    if (at == std::string::npos) {
      ADD_FAILURE() << from;
      return "";
    }
    study.replace(at, from.size(), to);
  }
  Write(dir / "sweep.textproto", study);
  return (dir / "sweep.textproto").string();
}

// Every field the inline base_config writes wins over the base file's, including values
// equal to the proto3 default (false, 0), which Message::MergeFrom would drop; fields it
// does not write keep the base file's; repeated fields append.
TEST(SweepConfigTest, InlineBaseConfigOverridesTheBaseFileFieldByFieldDefaultsIncluded) {
  const fs::path dir = FreshDirWithData("sweep_config_test");
  Write(dir / "base.textproto",
        "micro_batch: 4 seq_len: 16 precision: FP32 optimizer { lr: 0.01 weight_decay: 0.1 grad_clip: 1.0 }\n"
        "schedule { kind: WARMUP_CONSTANT warmup_steps: 5 }\n"
        "logging { tensorboard: true console_every: 7 }\n");
  Write(dir / "sweep.textproto",
        "base: \"" + (dir / "base.textproto").string() + "\"\n"
        "base_config { optimizer { weight_decay: 0 } logging { tensorboard: false } micro_batch: 2 }\n"
        "data: \"" + (dir / "data").string() + "\"\n"
        "psi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n"
        "tokens: 640\nroot: \"" + (dir / "root").string() + "\"\n");
  auto sweep = LoadSweep((dir / "sweep.textproto").string());
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(sweep->runs.size(), 1u);
  const config::RunConfig& run = sweep->runs[0].run;
  EXPECT_FALSE(run.logging().tensorboard());         // false over true
  EXPECT_EQ(run.optimizer().weight_decay(), 0.0);    // 0 over 0.1
  EXPECT_EQ(run.micro_batch(), 2);                   // a plain override
  EXPECT_EQ(run.logging().console_every(), 7);       // unwritten: the base file's
  EXPECT_EQ(run.optimizer().grad_clip(), 1.0);       // unwritten sibling: the base file's
  EXPECT_EQ(run.seq_len(), 16);
  fs::remove_all(dir);
}

// Two sweep files with one root would rewrite each other's run files and sweep.json: the
// second is refused in one line naming both, the first keeps working, and a root whose
// sweep.json is not ours to read (garbage) is rewritten.
TEST(SweepConfigTest, ARootBelongsToOneSweepFile) {
  const fs::path dir = FreshDirWithData("sweep_config_root_owner");
  for (const char* name : {"a.textproto", "b.textproto"}) {
    Write(dir / name,
          "base_config { micro_batch: 2 seq_len: 16 precision: FP32 optimizer { lr: 0.01 } }\n"
          "data: \"" + (dir / "data").string() + "\"\n"
          "psi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n"
          "tokens: 640\nroot: \"" + (dir / "root").string() + "\"\n");
  }
  auto a = LoadSweep((dir / "a.textproto").string());
  auto b = LoadSweep((dir / "b.textproto").string());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(WriteManifest(*a).ok());
  ASSERT_TRUE(WriteRunFiles(*a).ok());
  for (const absl::Status& s : {WriteManifest(*b), WriteRunFiles(*b), CheckRootOwner(*b)}) {
    ASSERT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("holds the runs of another sweep, " + (dir / "a.textproto").string()), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("give " + (dir / "b.textproto").string() + " a root of its own"), std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(CheckRootOwner(*a).ok());
  EXPECT_TRUE(WriteManifest(*a).ok());
  Write(dir / "root" / "sweep.json", "not json");
  EXPECT_TRUE(WriteManifest(*b).ok());  // nobody's root: b's now
  EXPECT_FALSE(CheckRootOwner(*a).ok());
  fs::remove_all(dir);
}

// Arms (issue 18): each model with its own lrs and optimizer fields; an arm's written
// optimizer fields replace the base run's (0 too), unwritten ones keep the base's; models
// of the other axes take the sweep's lr axis and the base optimizer.
TEST(SweepConfigTest, ArmsCarryTheirOwnLrsAndOptimizerFields) {
  const fs::path dir = FreshDirWithData("sweep_config_arms");
  Write(dir / "sweep.textproto",
        "base_config { micro_batch: 4 seq_len: 16 precision: FP32 optimizer { weight_decay: 0.1 grad_clip: 1.0 beta2: 0.95 }\n"
        "  schedule { kind: WARMUP_CONSTANT warmup_steps: 5 } }\n"
        "data: \"" + (dir / "data").string() + "\"\n"
        "lr: [0.01, 0.02]\n"
        "psi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n"
        "arms { model { name: \"ms\" psi: 2 d_k: 8 d_v: 16 vocab: 97 w_th: 16 } lr: [0.25, 0.5, 1.0]\n"
        "       optimizer { weight_decay: 0 grad_clip: 0 } }\n"
        "arms { model_file: \"tiny_transformer_train\" lr: 0.0625 optimizer { beta2: 0.99 } }\n"
        "tokens: 640\nroot: \"" + (dir / "root").string() + "\"\n");
  auto sweep = LoadSweep((dir / "sweep.textproto").string());
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  std::vector<std::string> names;
  for (const SweepRun& r : sweep->runs) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"psi2_lr0.01_s0", "psi2_lr0.02_s0", "ms_lr0.25_s0", "ms_lr0.5_s0", "ms_lr1_s0",
                                             "tiny_transformer_train_lr0.0625_s0"}));
  ASSERT_EQ(sweep->runs.size(), 6u);
  const config::OptimizerConfig& psi = sweep->runs[0].run.optimizer();
  EXPECT_EQ(psi.weight_decay(), 0.1);
  EXPECT_EQ(psi.grad_clip(), 1.0);
  const config::OptimizerConfig& ms = sweep->runs[3].run.optimizer();
  EXPECT_EQ(ms.lr(), 0.5);
  EXPECT_EQ(ms.weight_decay(), 0.0);  // 0 over 0.1
  EXPECT_EQ(ms.grad_clip(), 0.0);
  EXPECT_EQ(ms.beta2(), 0.95);        // unwritten: the base's
  const config::OptimizerConfig& tf = sweep->runs[5].run.optimizer();
  EXPECT_EQ(tf.lr(), 0.0625);
  EXPECT_EQ(tf.beta2(), 0.99);
  EXPECT_EQ(tf.weight_decay(), 0.1);
  EXPECT_EQ(sweep->runs[5].run.model_config().family(), config::ModelConfig::TRANSFORMER);
  fs::remove_all(dir);
}

// Bad arms are refused in one line naming the arm.
TEST(SweepConfigTest, BadArmsAreRefusedNamingTheArm) {
  const fs::path dir = FreshDirWithData("sweep_config_bad_arms");
  const std::string head = "base_config { micro_batch: 4 seq_len: 16 }\ndata: \"" + (dir / "data").string() +
                           "\"\ntokens: 640\nroot: \"" + (dir / "root").string() + "\"\n";
  const std::string model = "model { psi: 2 d_k: 8 d_v: 16 vocab: 97 w_th: 16 }";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"arms { lr: 0.1 }", "arms[0]: give exactly one of model_file and model"},
      {"arms { " + model + " model_file: \"tiny_psi2\" }", "arms[0]: give exactly one of model_file and model"},
      {"arms { " + model + " optimizer { lr: 0.1 } }", "arms[0]: optimizer.lr is not taken here"},
      {"arms { " + model + " lr: 2 }", "arms[0]: lr[0] = 2 is outside (0, 1]"},
      {"arms { " + model + " }\narms { model_file: \"no_such_model\" }", "arms[1].model_file: "},
      {"arms { model { name: \"x\" psi: 2 vocab: 97 } lr: 0.1 }\narms { model { name: \"x\" psi: 3 vocab: 97 } lr: 0.1 }",
       "two runs are named x_lr0.1_s0"},
  };
  for (const auto& [arms, message] : cases) {
    Write(dir / "sweep.textproto", head + arms + "\n");
    auto sweep = LoadSweep((dir / "sweep.textproto").string());
    ASSERT_FALSE(sweep.ok()) << arms;
    EXPECT_NE(std::string(sweep.status().message()).find(message), std::string::npos) << sweep.status();
    EXPECT_NE(std::string(sweep.status().message()).find((dir / "sweep.textproto").string()), std::string::npos);
  }
  fs::remove_all(dir);
}

// A budget that is not a whole number of steps is refused with the two nearest that are;
// near 2^63 only the one below exists (the one above overflowed to a negative number).
TEST(SweepConfigTest, ABudgetOffTheStepGridNamesTheNearestWholeBudgets) {
  const fs::path dir = FreshDirWithData("sweep_config_budget_grid");
  const std::string head = "base_config { micro_batch: 4 seq_len: 16 }\ndata: \"" + (dir / "data").string() +
                           "\"\npsi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\nroot: \"" +
                           (dir / "root").string() + "\"\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tokens: 650", "tokens[0] = 650 is not a whole number of steps of 64 tokens (micro_batch·grad_accum·seq_len): "
                      "give 640 or 704"},
      {"tokens: 9223372036854775807",
       "tokens[0] = 9223372036854775807 is not a whole number of steps of 64 tokens (micro_batch·grad_accum·seq_len): "
       "give 9223372036854775744"},
  };
  for (const auto& [tokens, message] : cases) {
    Write(dir / "sweep.textproto", head + tokens + "\n");
    auto sweep = LoadSweep((dir / "sweep.textproto").string());
    ASSERT_FALSE(sweep.ok()) << tokens;
    const std::string got(sweep.status().message());
    EXPECT_NE(got.find(message), std::string::npos) << got;
    EXPECT_EQ(got.find("-9223372036854775808"), std::string::npos) << got;
  }
  fs::remove_all(dir);
}

// The committed Multiscreen ablation study (configs/studies/multiscreen_ablations, issue 30;
// docs/ablations.md) expands to its four runs: one recipe, the standard model and its NOPE,
// ROPE and capacity-matched gateless variants, all with Ψ = 6's 290,414 non-embedding
// parameters. Its data is swapped for synthetic shards (only the path is checked here).
TEST(SweepConfigTest, TheMultiscreenAblationStudyExpandsToItsMatchedRuns) {
  const fs::path dir = FreshDirWithData("sweep_config_ablations");
  const std::string path = RelocatedStudy("multiscreen_ablations", dir);
  ASSERT_FALSE(path.empty());
  auto sweep = LoadSweep(path);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(sweep->runs.size(), 4u);
  std::map<std::string, std::pair<kernels::PositionKind, bool>> seen;
  for (const SweepRun& r : sweep->runs) {
    seen[r.model] = {r.dims.position, r.dims.output_gate};
    EXPECT_EQ(r.non_embedding_params, 290414) << r.name;
    EXPECT_EQ(r.run.steps(), 3000) << r.name;
    EXPECT_EQ(r.run.optimizer().lr(), 1.0 / 64) << r.name;
    EXPECT_EQ(r.run.optimizer().weight_decay(), 0.0) << r.name;
    EXPECT_EQ(r.dims.d_v, r.dims.output_gate ? 64 : 96) << r.name;
  }
  const std::map<std::string, std::pair<kernels::PositionKind, bool>> want = {
      {"mipe", {kernels::PositionKind::kMipe, true}},
      {"nope", {kernels::PositionKind::kNope, true}},
      {"rope", {kernels::PositionKind::kRope, true}},
      {"nogate", {kernels::PositionKind::kMipe, false}}};
  EXPECT_EQ(seen, want);
  fs::remove_all(dir);
}

// The committed stability study (configs/studies/lr_stability/sweep.textproto) expands to
// its 20 runs: each family over 2^-10 … 2^-4 with its recipe, Table 6's five switch rows
// at 2^-4, and the plain Transformer at 2^-4 without weight decay or clipping; models of near-equal non-embedding size. Its data is swapped for
// synthetic shards of a vocabulary below 97 (only the path is checked here).
TEST(SweepConfigTest, TheStabilityStudyExpandsToItsRuns) {
  const fs::path dir = FreshDirWithData("sweep_config_study");
  const std::string path = RelocatedStudy("lr_stability", dir);
  ASSERT_FALSE(path.empty());
  auto sweep = LoadSweep(path);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(sweep->runs.size(), 20u);
  const std::vector<double> lrs = {1.0 / 1024, 1.0 / 512, 1.0 / 256, 1.0 / 128, 1.0 / 64, 1.0 / 32, 1.0 / 16};
  std::map<std::string, std::vector<double>> lrs_of;
  for (const SweepRun& r : sweep->runs) {
    lrs_of[r.model].push_back(r.run.optimizer().lr());
    EXPECT_EQ(r.run.steps(), 300) << r.name;
    EXPECT_EQ(r.run.seq_len(), 128) << r.name;
    EXPECT_EQ(r.run.schedule().warmup_steps(), 30) << r.name;
    EXPECT_EQ(r.run.precision(), config::RunConfig::FP32) << r.name;
    const bool transformer = r.dims.family == ModelFamily::kTransformer && r.model != "transformer_no_wd_clip";
    EXPECT_EQ(r.run.optimizer().weight_decay(), transformer ? 0.1 : 0.0) << r.name;
    EXPECT_EQ(r.run.optimizer().grad_clip(), transformer ? 1.0 : 0.0) << r.name;
    // The switches' learned scalars: SIO's s_E and s_F (2), QKNorm's s_QK per head and layer (4 · 6).
    const std::map<std::string, int64_t> non_embedding = {
        {"multiscreen_psi6", 290414},   {"transformer", 294912},     {"transformer_plnorm", 294912},
        {"transformer_no_wd_clip", 294912},
        {"transformer_sio", 294914},    {"transformer_sio_no_plnorm", 294914},
        {"transformer_qknorm", 294936}, {"transformer_qknorm_sio", 294938}};
    EXPECT_EQ(r.non_embedding_params, non_embedding.at(r.model)) << r.name;
  }
  EXPECT_EQ(lrs_of["multiscreen_psi6"], lrs);
  EXPECT_EQ(lrs_of["transformer"], lrs);
  // Table 6's rows: name -> (qk_norm, sio, pl_norm); "SIO" includes PLNorm.
  const std::map<std::string, std::array<bool, 3>> rows = {
      {"transformer", {false, false, false}},       {"transformer_sio", {false, true, true}},
      {"transformer_plnorm", {false, false, true}}, {"transformer_sio_no_plnorm", {false, true, false}},
      {"transformer_qknorm", {true, false, false}}, {"transformer_qknorm_sio", {true, true, true}},
      {"transformer_no_wd_clip", {false, false, false}}};
  for (const auto& [name, switches] : rows) {
    if (name != "transformer") EXPECT_EQ(lrs_of[name], std::vector<double>{1.0 / 16}) << name;
    for (const SweepRun& r : sweep->runs) {
      if (r.model != name) continue;
      const config::ModelConfig& m = r.run.model_config();
      EXPECT_EQ((std::array<bool, 3>{m.qk_norm(), m.sio(), m.pl_norm()}), switches) << name;
    }
  }
  EXPECT_EQ(lrs_of.size(), 8u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace multiscreen

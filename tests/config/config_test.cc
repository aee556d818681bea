// Loading and checking configuration files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/config.h"

namespace multiscreen {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(ConfigTest, PsiSetsLayersTilesAndWidth) {
  auto dims = LoadModel("psi16");
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->n_layers, 16);
  EXPECT_EQ(dims->n_heads, 16);
  EXPECT_EQ(dims->d_e, 256);
  EXPECT_EQ(dims->d_k, 16);
  EXPECT_EQ(dims->d_v, 64);
  EXPECT_EQ(dims->vocab, 50257);
  EXPECT_EQ(dims->w_th, 256);
  EXPECT_TRUE(dims->pl_norm);
}

TEST(ConfigTest, UnknownModelNameListsTheKnownOnes) {
  auto dims = LoadModel("psi9");
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.status().message().find("unknown model 'psi9'"), std::string::npos) << dims.status();
  EXPECT_NE(dims.status().message().find("psi8"), std::string::npos) << dims.status();
}

TEST(ConfigTest, MalformedFileReportsLineAndColumn) {
  const std::string path = WriteTemp("bad_model.textproto", "name: \"x\"\npsi: 8\nd_k: [oops\n");
  auto dims = LoadModel(path);
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.status().message().find(path + ":3:"), std::string::npos) << dims.status();
}

TEST(ConfigTest, UnknownFieldIsAParseErrorWithItsLine) {
  const std::string path = WriteTemp("unknown_field.textproto", "psi: 8\nwidth: 3\n");
  auto dims = LoadModel(path);
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.status().message().find(path + ":2:"), std::string::npos) << dims.status();
}

TEST(ConfigTest, MissingSizesNameTheField) {
  const std::string path = WriteTemp("no_sizes.textproto", "name: \"empty\"\n");
  auto dims = LoadModel(path);
  ASSERT_FALSE(dims.ok());
  EXPECT_NE(dims.status().message().find("n_layers"), std::string::npos) << dims.status();
}

config::RunConfig ValidRun() {
  config::RunConfig run;
  run.set_steps(10);
  run.set_micro_batch(2);
  run.set_seq_len(64);
  run.mutable_optimizer()->set_lr(0.0625);
  run.mutable_optimizer()->set_beta1(0.9);
  run.mutable_optimizer()->set_beta2(0.95);
  return run;
}

TEST(ConfigTest, ValidRunPasses) {
  auto dims = LoadModel("psi8");
  ASSERT_TRUE(dims.ok());
  config::RunConfig run = ValidRun();
  run.mutable_parallel()->set_tp(4);
  run.mutable_parallel()->set_pp(2);
  EXPECT_TRUE(ValidateRun(run, *dims).ok()) << ValidateRun(run, *dims);
}

TEST(ConfigTest, TpNotDividingTilesIsRefusedByField) {
  auto dims = LoadModel("psi8");
  config::RunConfig run = ValidRun();
  run.mutable_parallel()->set_tp(3);
  const absl::Status s = ValidateRun(run, *dims);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parallel.tp"), std::string::npos) << s;
  EXPECT_NE(s.message().find("N_H = 8"), std::string::npos) << s;
}

TEST(ConfigTest, PpNotDividingLayersIsRefusedByField) {
  auto dims = LoadModel("psi8");
  config::RunConfig run = ValidRun();
  run.mutable_parallel()->set_pp(3);
  const absl::Status s = ValidateRun(run, *dims);
  EXPECT_NE(s.message().find("parallel.pp"), std::string::npos) << s;
}

TEST(ConfigTest, NegativeLearningRateIsRefusedByField) {
  auto dims = LoadModel("psi8");
  config::RunConfig run = ValidRun();
  run.mutable_optimizer()->set_lr(-1);
  const absl::Status s = ValidateRun(run, *dims);
  EXPECT_NE(s.message().find("optimizer.lr"), std::string::npos) << s;
}

TEST(ConfigTest, RunFileParsesEveryModelFileShipped) {
  for (const char* name : {"psi8", "psi16", "psi32", "psi48", "psi64", "tiny_psi2", "tiny_psi4"}) {
    auto dims = LoadModel(name);
    EXPECT_TRUE(dims.ok()) << name << ": " << dims.status();
  }
}

}  // namespace
}  // namespace multiscreen

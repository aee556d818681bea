// What the ranks of a job compare at start-up (trainer/run_agreement.h): every field of the
// resolved model and every leaf of the run file after flags, named; one model or run
// directory spelled two ways compares equal (issue 43 §1). The collective itself is
// tested under mpirun (tests/parallel/run_agreement_test.py).
#include "trainer/run_agreement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "common/config.h"

namespace multiscreen {
namespace {

std::map<std::string, std::string> AsMap(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::map<std::string, std::string> m;
  for (const auto& [name, value] : fields) EXPECT_TRUE(m.emplace(name, value).second) << "twice: " << name;
  return m;
}

ModelDims TinyModel() {
  config::ModelConfig m;
  m.set_name("tiny");
  m.set_psi(4);
  m.set_d_k(8);
  m.set_d_v(16);
  m.set_vocab(97);
  m.set_w_th(16);
  auto dims = ResolveModel(m, "test");
  EXPECT_TRUE(dims.ok()) << dims.status();
  return *dims;
}

TEST(RunAgreementFieldsTest, EveryFieldOfTheModelFileIsCompared) {
  // A field added to ModelConfig that the agreement does not compare lets two nodes train
  // different models: psi alone resolves into n_layers, n_heads and d_e.
  const auto fields = AsMap(ModelAgreementFields(TinyModel()));
  const google::protobuf::Descriptor* d = config::ModelConfig::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name = d->field(i)->name();
    if (name == "psi") continue;
    EXPECT_TRUE(fields.count("the model's " + name)) << "ModelConfig." << name << " is not compared";
  }
  EXPECT_EQ(fields.at("the model's n_layers"), "4");
  EXPECT_EQ(fields.at("the model's d_e"), "16");
  EXPECT_EQ(fields.at("the model's position"), "mipe");
  EXPECT_EQ(fields.at("the model's tanh_norm"), "true");
}

TEST(RunAgreementFieldsTest, EachSwitchOfTheModelShowsAsItsOwnField) {
  const auto base = AsMap(ModelAgreementFields(TinyModel()));
  auto changed = [&](auto edit) {
    ModelDims d = TinyModel();
    edit(d);
    std::vector<std::string> differ;
    for (const auto& [name, value] : AsMap(ModelAgreementFields(d))) {
      if (base.at(name) != value) differ.push_back(name + " = " + value);
    }
    return differ;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(changed([](ModelDims& d) { d.position = kernels::PositionKind::kRope; }), V{"the model's position = rope"});
  EXPECT_EQ(changed([](ModelDims& d) { d.tanh_norm = false; }), V{"the model's tanh_norm = false"});
  EXPECT_EQ(changed([](ModelDims& d) { d.pl_norm = false; }), V{"the model's pl_norm = false"});
  EXPECT_EQ(changed([](ModelDims& d) { d.output_gate = false; }), V{"the model's output_gate = false"});
  EXPECT_EQ(changed([](ModelDims& d) { d.eos_token = 3; }), V{"the model's eos_token = 3"});
  EXPECT_EQ(changed([](ModelDims& d) { d.w_th = 16.5; }), V{"the model's w_th = 16.5"});
}

TEST(RunAgreementFieldsTest, TheRunFileIsComparedLeafByLeafWithoutTheModelsSpelling) {
  config::RunConfig run;
  run.set_model("tiny_psi4");
  run.mutable_optimizer()->set_lr(0.001);
  run.set_steps(20);
  run.mutable_data()->add_train_shards("/node-local/shards");
  run.mutable_logging()->set_console_every(5);
  const auto fields = AsMap(RunConfigFields(run));
  EXPECT_EQ(fields.at("optimizer.lr"), "0.001");
  EXPECT_EQ(fields.at("optimizer.beta1"), "(unset)");
  EXPECT_EQ(fields.at("steps"), "20");
  EXPECT_EQ(fields.at("parallel.collective_timeout_s"), "0");
  // Compared as the model they resolve to (ModelAgreementFields), and by the data as opened.
  for (const char* gone : {"model", "model_config.psi", "data.train_shards", "logging.console_every"}) {
    EXPECT_FALSE(fields.count(gone)) << gone;
  }
}

TEST(RunAgreementFieldsTest, OneRunDirectorySpelledTwoWaysIsOneValue) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("run_agreement_fields_test_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "runs");
  fs::create_directory_symlink(tmp / "runs", tmp / "link");
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp);
  auto run_dir = [](const std::string& dir) {
    config::RunConfig run;
    run.set_run_dir(dir);
    return AsMap(RunConfigFields(run)).at("run_dir");
  };
  const std::string absolute = (fs::canonical(tmp) / "runs" / "r").string();
  EXPECT_EQ(run_dir("runs/r"), absolute);
  EXPECT_EQ(run_dir("./runs/../runs/r"), absolute);
  EXPECT_EQ(run_dir(absolute), absolute);
  EXPECT_EQ(run_dir("link/r"), absolute);  // a symlink to the same directory
  EXPECT_NE(run_dir("runs/s"), absolute);
  // Where no part of the path exists yet (a run directory train creates).
  EXPECT_EQ(run_dir("new/../new/r"), (fs::canonical(tmp) / "new" / "r").string());
  fs::current_path(cwd);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace multiscreen

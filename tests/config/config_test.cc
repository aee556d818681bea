// Loading and checking configuration files.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

TEST(ConfigTest, AMissingConfigDirectoryIsNamedNotAnEmptyList) {
  const char* before = std::getenv("MULTISCREEN_CONFIG_DIR");
  const std::string saved = before != nullptr ? before : "";
  setenv("MULTISCREEN_CONFIG_DIR", "/nonexistent/configs", 1);
  auto dims = LoadModel("psi8");
  if (before != nullptr) {
    setenv("MULTISCREEN_CONFIG_DIR", saved.c_str(), 1);
  } else {
    unsetenv("MULTISCREEN_CONFIG_DIR");
  }
  ASSERT_FALSE(dims.ok());
  EXPECT_EQ(std::string(dims.status().message()),
            "--model: unknown model 'psi8': the model directory /nonexistent/configs/models does not exist "
            "(MULTISCREEN_CONFIG_DIR names its parent)");
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
  ApplyRunDefaults(&run);
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

TEST(ConfigTest, EvalWindowsReplaceTheDefaultBatchesAndRefuseBothOrOutOfRange) {
  auto dims = LoadModel("psi8");
  config::RunConfig run;  // eval.windows alone: no default eval.batches beside it
  run.set_steps(10);
  run.set_micro_batch(2);
  run.set_seq_len(64);
  run.mutable_eval()->set_windows(64);
  ApplyRunDefaults(&run);
  EXPECT_EQ(run.eval().batches(), 0);
  EXPECT_TRUE(ValidateRun(run, *dims).ok()) << ValidateRun(run, *dims);
  run.mutable_eval()->set_batches(3);
  EXPECT_NE(ValidateRun(run, *dims).message().find("eval.windows: 64 and eval.batches = 3 are both set"),
            std::string::npos)
      << ValidateRun(run, *dims);
  run.mutable_eval()->clear_batches();
  run.mutable_eval()->set_windows(-1);
  EXPECT_NE(ValidateRun(run, *dims).message().find("eval.windows"), std::string::npos) << ValidateRun(run, *dims);
  run.mutable_eval()->set_windows(int64_t{1} << 27);
  EXPECT_NE(ValidateRun(run, *dims).message().find("must be in [0, 2^26]"), std::string::npos)
      << ValidateRun(run, *dims);
}

TEST(ConfigTest, DpOverlapAndBucketSizeAreCheckedByField) {
  auto dims = LoadModel("psi8");
  config::RunConfig run = ValidRun();
  for (const char* ok : {"", "on", "off"}) {
    run.mutable_parallel()->set_dp_overlap(ok);
    EXPECT_TRUE(ValidateRun(run, *dims).ok()) << ok << ": " << ValidateRun(run, *dims);
  }
  run.mutable_parallel()->set_dp_overlap("yes");
  absl::Status s = ValidateRun(run, *dims);
  EXPECT_NE(s.message().find("parallel.dp_overlap: \"yes\" must be on or off"), std::string::npos) << s;
  run.mutable_parallel()->set_dp_overlap("on");
  run.mutable_parallel()->set_dp_bucket_mb(-0.5);
  s = ValidateRun(run, *dims);
  EXPECT_NE(s.message().find("parallel.dp_bucket_mb"), std::string::npos) << s;
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


// A run file like tiny_test.textproto, each line of `edit` replacing the line of the
// same field (or added), loaded, defaulted and validated as `train` does; returns the
// error message after the file name, or "ok".
std::string RunFileError(const std::string& edit, const RunSource& flags = {}) {
  std::vector<std::string> lines = {"model: \"tiny_psi4\"", "steps: 40", "seed: 1", "micro_batch: 4",
                                    "grad_accum: 2", "seq_len: 32", "precision: FP32", "optimizer { lr: 0.0625 }",
                                    "schedule { kind: WARMUP_CONSTANT warmup_steps: 4 }",
                                    "eval { every: 10 batches: 2 }"};
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(edit, '\n', absl::SkipEmpty()))) {
    const std::string field = line.substr(0, line.find_first_of(" :"));
    auto same = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.substr(0, l.find_first_of(" :")) == field;
    });
    if (same != lines.end()) {
      *same = line;
    } else {
      lines.push_back(line);
    }
  }
  const std::string path =
      WriteTemp(absl::StrCat("run_", ::getpid(), ".textproto"), absl::StrJoin(lines, "\n") + "\n");
  auto run = LoadRunConfig(path);
  if (!run.ok()) return std::string(run.status().message());
  ApplyRunDefaults(&*run);
  auto dims = LoadModel(run->model());
  if (!dims.ok()) return std::string(dims.status().message());
  RunSource source = flags;
  source.file = path;
  const absl::Status s = ValidateRun(*run, *dims, source);
  const std::string message = s.ok() ? "ok" : std::string(s.message());
  return message.rfind(path + ": ", 0) == 0 ? message.substr(path.size() + 2) : message;
}

TEST(RunValidationTest, ATinyRunLikeTinyTestPasses) { EXPECT_EQ(RunFileError(""), "ok"); }

TEST(RunValidationTest, ValuesThatMakeTheLossNaNAreRefusedNamingTheField) {
  EXPECT_EQ(RunFileError("optimizer { lr: 1e308 }"), "optimizer.lr: 1e+308 must be in [0, 1] (the paper's peak is 2^-4)");
  EXPECT_EQ(RunFileError("optimizer { lr: nan }"), "optimizer.lr: nan must be in [0, 1] (the paper's peak is 2^-4)");
  EXPECT_EQ(RunFileError("optimizer { eps: 0 }"), "optimizer.eps: 0 must be in (0, 1] (default 1e-8)");
  EXPECT_EQ(RunFileError("optimizer { lr: 0.0625 eps: -1 }"), "optimizer.eps: -1 must be in (0, 1] (default 1e-8)");
  EXPECT_EQ(RunFileError("optimizer { weight_decay: inf }"),
            "optimizer.weight_decay: inf must be finite, >= 0 and at most 1 / lr = 16 (decoupled decay scales weights "
            "by 1 - lr * weight_decay)");
  EXPECT_EQ(RunFileError("optimizer { weight_decay: 20 }").substr(0, 29), "optimizer.weight_decay: 20 mu");
  EXPECT_EQ(RunFileError("optimizer { weight_decay: 16 }"), "ok");
  EXPECT_EQ(RunFileError("optimizer { beta2: 1 }"), "optimizer.beta2: 1 must be in [0, 1)");
  EXPECT_EQ(RunFileError("optimizer { grad_clip: inf }"), "optimizer.grad_clip: inf must be finite and >= 0 (0 = off)");
  EXPECT_EQ(RunFileError("schedule { min_lr_ratio: nan }"), "schedule.min_lr_ratio: nan must be in [0, 1]");
  EXPECT_EQ(RunFileError("schedule { kind: WARMUP_STABLE_DECAY decay_fraction: 2 }"),
            "schedule.decay_fraction: 2 must be in [0, 1]");
  EXPECT_EQ(RunFileError("initial_loss_scale: inf"), "initial_loss_scale: inf must be in (0, 2^64] (default 65536)");
}

TEST(RunValidationTest, UnknownEnumNumbersAreRefused) {
  // proto3's text format accepts a number that names no value.
  EXPECT_EQ(RunFileError("precision: 99"), "precision: 99 is not a known value (FP32 = 1, BF16 = 2, FP16 = 3)");
  EXPECT_EQ(RunFileError("schedule { kind: 99 }"),
            "schedule.kind: 99 is not a known value (WARMUP_CONSTANT = 1, WARMUP_COSINE = 2, WARMUP_STABLE_DECAY = 3)");
}

TEST(RunValidationTest, SizesAreBoundedBeforeAnythingIsAllocated) {
  EXPECT_EQ(RunFileError("micro_batch: 1000000000000"),
            "micro_batch: 1000000000000 sequences of seq_len + 1 = 33 tokens are 3.3e+13 tokens per micro-batch, more "
            "than 2^31 - 1");
  EXPECT_EQ(RunFileError("grad_accum: 1000000000000"),
            "grad_accum: 1000000000000 micro-batches of 132 tokens are 1.32e+14 tokens per step and rank, more than "
            "2^31 - 1");
  EXPECT_EQ(RunFileError("seq_len: 1000000000000"),
            "micro_batch: 4 sequences of seq_len + 1 = 1000000000001 tokens are 4e+12 tokens per micro-batch, more "
            "than 2^31 - 1");
  // Within 2^31 - 1 but not within any machine's memory: refused by what it needs.
  const std::string memory = RunFileError("micro_batch: 60000000\ngrad_accum: 1");
  EXPECT_EQ(memory.rfind("micro_batch: 60000000 x seq_len 32 (x grad_accum 1) needs at least ", 0), 0u) << memory;
  EXPECT_NE(memory.find(" per process for model tiny_psi4, more than the "), std::string::npos) << memory;
  EXPECT_EQ(RunFileError("eval { batches: 1000000000000 }"),
            "eval.batches: 1000000000000 must be in [0, 2^20] (micro-batches per validation pass)");
  EXPECT_EQ(RunFileError("micro_batch: -1"), "micro_batch: -1 must be positive");
  EXPECT_EQ(RunFileError("logging { console_every: -1 }"), "logging.console_every: -1 is negative");
}

TEST(RunValidationTest, AKeepEveryThatNoSavedStepMatchesIsRefused) {
  EXPECT_EQ(RunFileError("checkpoint { every: 10 keep_every: 25 }"),
            "checkpoint.keep_every: 25 is not a multiple of checkpoint.every = 10: only saved steps are kept, so it "
            "would keep every 50-th step");
  EXPECT_EQ(RunFileError("checkpoint { every: 10 keep_every: 30 }"), "ok");
  EXPECT_EQ(RunFileError("checkpoint { every: 0 keep_every: 25 }"), "ok");  // saves only at the end
}

TEST(RunValidationTest, AFieldSetByAFlagIsNamedByTheFlag) {
  RunSource flags;
  flags.flags["optimizer.lr"] = "lr";
  // The flag's value is not applied here (RunFileError only loads the file): what
  // matters is whom the message names.
  EXPECT_EQ(RunFileError("optimizer { lr: 2 }", flags),
            "--lr (optimizer.lr): 2 must be in [0, 1] (the paper's peak is 2^-4)");
}

TEST(ModelValidationTest, ModelFieldsAreCheckedAgainstTheSchema) {
  auto error = [](const std::string& text) {
    const std::string path = WriteTemp(absl::StrCat("model_", ::getpid(), ".textproto"), text);
    auto dims = LoadModel(path);
    const std::string message = dims.ok() ? "ok" : std::string(dims.status().message());
    return message.rfind(path + ": ", 0) == 0 ? message.substr(path.size() + 2) : message;
  };
  EXPECT_EQ(error("psi: 2 w_th: inf"), "w_th = inf must be finite and positive");
  EXPECT_EQ(error("psi: 2 w_th: nan"), "w_th = nan must be finite and positive");
  EXPECT_EQ(error("psi: 2 family: 99"), "family = 99 is not a known value (MULTISCREEN = 1, TRANSFORMER = 2)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 4 d_e: 12"),
            "d_e = 12 must be n_heads = 4 times an even head width (RoPE rotates pairs)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 w_th: 4"),
            "w_th is a Multiscreen field; a TRANSFORMER's head width is d_e / n_heads");
  EXPECT_EQ(error("psi: 2 sio: true"), "sio is a Transformer switch (family: TRANSFORMER)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 qk_norm: true sio: true"), "ok");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 tanh_norm: false"),
            "tanh_norm is a Multiscreen switch; a TRANSFORMER has no TanhNorm");
  EXPECT_EQ(error("psi: 2 tanh_norm: false"), "ok");
  // Issue 30's Multiscreen ablation switches: a Transformer refuses them; ROPE needs even d_k.
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 position: NOPE"),
            "position is a Multiscreen switch; a TRANSFORMER uses RoPE (attention: SCREENING, MiPE)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 output_gate: false"),
            "output_gate is a Multiscreen switch; a TRANSFORMER has no tile gate");
  EXPECT_EQ(error("psi: 2 position: 7"), "position = 7 is not a known value (MIPE, NOPE, ROPE)");
  EXPECT_EQ(error("psi: 2 d_k: 5 position: ROPE"),
            "d_k = 5 must be even for position: ROPE (it turns pairs p, p + d_k/2)");
  for (const char* kind : {"MIPE", "NOPE", "ROPE"}) {
    EXPECT_EQ(error(absl::StrCat("psi: 2 position: ", kind)), "ok") << kind;
  }
  EXPECT_EQ(error("psi: 2 d_k: 5 position: NOPE output_gate: false"), "ok");
  // Issue 30's attention switch: the Transformer's, each known value; Multiscreen refuses it.
  EXPECT_EQ(error("psi: 2 attention: SOFTMAX"), "attention is a Transformer switch (family: TRANSFORMER); Multiscreen screens");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 attention: 9"),
            "attention = 9 is not a known value (SOFTMAX, SOFTMAX1, SSMAX, SIGMOID, ENTMAX15, SCREENING)");
  // Screening needs no RoPE pairs: an odd head width of at least 2 is a model.
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 6 attention: SCREENING"), "ok");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 6"),
            "d_e = 6 must be n_heads = 2 times an even head width (RoPE rotates pairs)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 4 d_e: 4 attention: SCREENING"),
            "d_e = 4 must be n_heads = 4 times a head width of at least 2 (screening's MiPE turns coordinates 0 and 1)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 attention: SCREENING qk_norm: true"),
            "qk_norm does not apply to attention: SCREENING (screening makes q and k unit length itself)");
  for (const char* kind : {"SOFTMAX", "SOFTMAX1", "SSMAX", "SIGMOID", "ENTMAX15", "SCREENING"}) {
    EXPECT_EQ(error(absl::StrCat("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 attention: ", kind)), "ok") << kind;
  }
  // Issue 43's sigmoid_bias: attention SIGMOID's alone; TRAIN_LENGTH by default.
  const std::string sigmoid = "family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 attention: SIGMOID";
  EXPECT_EQ(error(sigmoid + " sigmoid_bias: PER_QUERY"), "ok");
  EXPECT_EQ(error(sigmoid + " sigmoid_bias: TRAIN_LENGTH"), "ok");
  EXPECT_EQ(error(sigmoid + " sigmoid_bias: 7"), "sigmoid_bias = 7 is not a known value (TRAIN_LENGTH, PER_QUERY)");
  EXPECT_EQ(error("family: TRANSFORMER n_layers: 2 n_heads: 2 d_e: 8 sigmoid_bias: PER_QUERY"),
            "sigmoid_bias applies to attention: SIGMOID only (attention is softmax)");
  EXPECT_EQ(error("psi: 2 sigmoid_bias: TRAIN_LENGTH"),
            "sigmoid_bias is a Transformer switch (family: TRANSFORMER, attention: SIGMOID)");
  {
    const std::string path = WriteTemp(absl::StrCat("sigmoid_", ::getpid(), ".textproto"), sigmoid);
    EXPECT_EQ(LoadModel(path)->sigmoid_bias, SigmoidBias::kTrainLength);
    const std::string per_query =
        WriteTemp(absl::StrCat("sigmoid_pq_", ::getpid(), ".textproto"), sigmoid + " sigmoid_bias: PER_QUERY");
    const ModelDims a = *LoadModel(path), b = *LoadModel(per_query);
    EXPECT_EQ(b.sigmoid_bias, SigmoidBias::kPerQuery);
    EXPECT_EQ(ModelDifferences(a, b, "a", "b"),
              std::vector<std::string>{"sigmoid_bias = train_length in a, per_query in b"});
  }
  // The name goes into logs, manifests and one-line errors: checkpoints refuse such a name,
  // so training must not start with it.
  EXPECT_EQ(error("name: \"a\\nb\" psi: 2"), "name is not a line of at most 256 printable characters");
  EXPECT_EQ(error(absl::StrCat("name: \"", std::string(300, 'x'), "\" psi: 2")),
            "name is not a line of at most 256 printable characters");
  EXPECT_EQ(error("psi: 1000000000000"), "psi = 1000000000000 must be in [1, 4096]");
  EXPECT_EQ(error("psi: 2 d_e: 100000000"), "d_e = 100000000 is more than 16777216");
  EXPECT_EQ(error("psi: 2 vocab: 1"), "vocab = 1 must be at least 2");
  EXPECT_EQ(error("psi: 2 vocab: 3000000000"), "vocab = 3000000000 is more than 2^31 - 1 (token ids are int32)");
  EXPECT_EQ(error("psi: 2 d_e: 16777216 vocab: 1000000"),
            "the sizes (N_L = 2, N_H = 2, d_E = 16777216, d_K = 16, d_V = 64, V = 1000000) make 1.68e+13 "
            "parameters, more than 1e+12");
  EXPECT_EQ(error("psi: 2"), "ok");
}

TEST(ModelValidationTest, AttentionIsSoftmaxUnlessSetAndSsmaxAddsOneScalarPerHeadAndLayer) {
  const std::string plain = WriteTemp(absl::StrCat("attn_plain_", ::getpid(), ".textproto"),
                                      "family: TRANSFORMER n_layers: 3 n_heads: 2 d_e: 8 vocab: 10");
  const std::string ssmax = WriteTemp(absl::StrCat("attn_ssmax_", ::getpid(), ".textproto"),
                                      "family: TRANSFORMER n_layers: 3 n_heads: 2 d_e: 8 vocab: 10 attention: SSMAX");
  const std::string entmax = WriteTemp(absl::StrCat("attn_entmax_", ::getpid(), ".textproto"),
                                       "family: TRANSFORMER n_layers: 3 n_heads: 2 d_e: 8 vocab: 10 attention: ENTMAX15");
  ASSERT_TRUE(LoadModel(plain).ok() && LoadModel(ssmax).ok() && LoadModel(entmax).ok());
  EXPECT_EQ(LoadModel(plain)->attention, AttentionKind::kSoftmax);
  EXPECT_EQ(LoadModel(ssmax)->attention, AttentionKind::kSsmax);
  EXPECT_EQ(LoadModel(entmax)->attention, AttentionKind::kEntmax15);
  // s_SS: N_L · N_H = 6 more parameters; entmax (like the others) none; screening's s_w, s_r 12.
  EXPECT_EQ(ModelParamCount(*LoadModel(ssmax)) - ModelParamCount(*LoadModel(plain)), 6.0);
  EXPECT_EQ(ModelParamCount(*LoadModel(entmax)), ModelParamCount(*LoadModel(plain)));
  ModelDims screening = *LoadModel(plain);
  screening.attention = AttentionKind::kScreening;
  EXPECT_EQ(ModelParamCount(screening) - ModelParamCount(*LoadModel(plain)), 12.0);
}

TEST(ModelValidationTest, TanhNormIsOnUnlessTheModelFileTurnsItOff) {
  const std::string on = WriteTemp(absl::StrCat("tanh_on_", ::getpid(), ".textproto"), "psi: 2");
  const std::string off = WriteTemp(absl::StrCat("tanh_off_", ::getpid(), ".textproto"), "psi: 2 tanh_norm: false");
  ASSERT_TRUE(LoadModel(on).ok());
  ASSERT_TRUE(LoadModel(off).ok());
  EXPECT_TRUE(LoadModel(on)->tanh_norm);
  EXPECT_FALSE(LoadModel(off)->tanh_norm);
}

TEST(ModelValidationTest, PositionIsMipeAndTheGateOnUnlessTheModelFileSaysOtherwise) {
  const std::string plain = WriteTemp(absl::StrCat("pos_plain_", ::getpid(), ".textproto"), "psi: 2");
  const std::string rope = WriteTemp(absl::StrCat("pos_rope_", ::getpid(), ".textproto"), "psi: 2 position: ROPE");
  const std::string nope = WriteTemp(absl::StrCat("pos_nope_", ::getpid(), ".textproto"),
                                     "psi: 2 position: NOPE output_gate: false");
  ASSERT_TRUE(LoadModel(plain).ok() && LoadModel(rope).ok() && LoadModel(nope).ok());
  EXPECT_EQ(LoadModel(plain)->position, kernels::PositionKind::kMipe);
  EXPECT_TRUE(LoadModel(plain)->output_gate);
  EXPECT_EQ(LoadModel(rope)->position, kernels::PositionKind::kRope);
  EXPECT_EQ(LoadModel(nope)->position, kernels::PositionKind::kNope);
  EXPECT_FALSE(LoadModel(nope)->output_gate);
  // Without the gate W_G's N_L · N_H · d_E · d_V = 2 · 2 · 4 · 64 parameters go.
  EXPECT_EQ(ModelParamCount(*LoadModel(plain)) - ModelParamCount(*LoadModel(nope)), 2.0 * 2 * 4 * 64);
}

TEST(ModelValidationTest, ConfigFilesThatAreNotRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = (std::filesystem::temp_directory_path() / absl::StrCat("fifo_", ::getpid(), ".textproto")).string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(LoadRunConfig(fifo).status().message(),
            fifo + ": is a FIFO (named pipe), not a regular file (expected a text-format config file)");
  std::filesystem::remove(fifo);
  EXPECT_EQ(LoadModel("/dev/zero").status().message(),
            "/dev/zero: is a character device, not a regular file (expected a text-format config file)");
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(LoadRunConfig(dir).status().message(),
            dir + ": is a directory, not a regular file (expected a text-format config file)");
}

}  // namespace
}  // namespace multiscreen

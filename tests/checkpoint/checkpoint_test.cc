// Sharded checkpoints: round trips across layouts, corruption and truncation
// detected by name, partial checkpoints ignored, pruning, checkpoints that all
// fail to verify, setting them aside, file systems without flock, and the 4B plan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include <hdf5.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/h5_file.h"
#include "checkpoint/read_retry.h"
#include "checkpoint/streamed_write.h"
#include "checkpoint/weights_file.h"
#include "model/init.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ms_ckpt_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

ModelDims Dims(const char* name) { return *LoadModel(name); }

// Saves a model initialized with `seed` under (tp, pp), moments set to
// recognizable functions of the parameters.
std::string SaveUnder(const std::string& run_dir, const ModelDims& dims, int64_t tp, int64_t pp, int64_t step,
                      uint64_t seed = 5, int64_t keep_last = 3, int64_t keep_every = 0) {
  CheckpointMeta meta;
  meta.step = step;
  meta.samples = 10 * step;
  meta.dims = dims;
  meta.layout = {tp, pp, 1, 0};
  std::vector<ParamLayout> layouts;
  std::vector<std::vector<float>> p, m, v;
  for (int64_t r = 0; r < pp; ++r) {
    for (int64_t t = 0; t < tp; ++t) {
      layouts.emplace_back(dims, ShardSpec::ForRank(dims, tp, pp, t, r));
      p.emplace_back(layouts.back().size());
      InitParams(layouts.back(), seed, p.back().data());
      m.emplace_back(p.back());
      v.emplace_back(p.back());
      for (auto& x : m.back()) x *= 2;
      for (auto& x : v.back()) x = x * x;
    }
  }
  std::vector<ShardTensors> shards;
  for (size_t i = 0; i < layouts.size(); ++i) {
    shards.push_back({&layouts[i], p[i].data(), m[i].data(), v[i].data(), int64_t(i) / tp, int64_t(i) % tp});
  }
  auto dir = SaveCheckpoint(run_dir, meta, shards, keep_last, keep_every);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

void ExpectLoadsExactly(const std::string& run_dir, const ModelDims& dims, int64_t tp, int64_t pp) {
  auto ckpt = FindLatestCheckpoint(run_dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (int64_t r = 0; r < pp; ++r) {
    for (int64_t t = 0; t < tp; ++t) {
      const ParamLayout layout(dims, ShardSpec::ForRank(dims, tp, pp, t, r));
      std::vector<float> want(layout.size()), p(layout.size()), m(layout.size()), v(layout.size());
      InitParams(layout, 5, want.data());
      const absl::Status loaded = LoadShard(*ckpt, layout, p.data(), m.data(), v.data());
      ASSERT_TRUE(loaded.ok()) << loaded;
      for (int64_t i = 0; i < layout.size(); ++i) {
        ASSERT_EQ(p[i], want[i]) << "tp" << t << " pp" << r << " element " << i;
        ASSERT_EQ(m[i], 2 * want[i]);
        ASSERT_EQ(v[i], want[i] * want[i]);
      }
    }
  }
}

TEST(CheckpointTest, AnyLayoutLoadsWhatAnyOtherSaved) {
  const ModelDims dims = Dims("tiny_psi4");
  const std::pair<int64_t, int64_t> layouts[] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 4}};
  for (auto [tp, pp] : layouts) {
    const std::string run = FreshDir("reshard");
    SaveUnder(run, dims, tp, pp, 7);
    for (auto [tp2, pp2] : layouts) ExpectLoadsExactly(run, dims, tp2, pp2);
  }
}

TEST(CheckpointTest, ZeroOnePiecesLoadUnderAnyLayoutAndAnyOwnedRange) {
  const ModelDims dims = Dims("tiny_psi4");
  const std::string run = FreshDir("zero");
  // Save tp=2, pp=1, dp=3 under ZeRO-1: weights in the shard files, the moments
  // in three optimizer pieces per shard, cut at ⌈size/3⌉ across tensor boundaries.
  const int64_t tp = 2, dp = 3;
  CheckpointMeta meta;
  meta.step = 3;
  meta.dims = dims;
  meta.layout = {tp, 1, dp, 1};
  auto tmp = BeginCheckpoint(run, 3);
  ASSERT_TRUE(tmp.ok());
  std::vector<std::string> files;
  nlohmann::json records = nlohmann::json::object();
  for (int64_t t = 0; t < tp; ++t) {
    const ParamLayout layout(dims, ShardSpec::ForRank(dims, tp, 1, t, 0));
    std::vector<float> p(layout.size()), m(layout.size()), v(layout.size());
    InitParams(layout, 5, p.data());
    for (int64_t i = 0; i < layout.size(); ++i) {
      m[i] = 2 * p[i];
      v[i] = p[i] * p[i];
    }
    auto rec = WriteShard(*tmp, {&layout, p.data(), nullptr, nullptr, 0, t});
    ASSERT_TRUE(rec.ok()) << rec.status();
    records[ShardFileName(0, t)] = *rec;
    const int64_t per = (layout.size() + dp - 1) / dp;
    for (int64_t d = 0; d < dp; ++d) {
      const int64_t b = std::min(layout.size(), d * per), e = std::min(layout.size(), (d + 1) * per);
      auto piece = WriteOptimizerPiece(*tmp, {&layout, b, e, m.data() + b, v.data() + b, 0, t, d});
      ASSERT_TRUE(piece.ok()) << piece.status();
      records[OptimizerFileName(0, t, d)] = *piece;
    }
  }
  ASSERT_EQ(records.size(), CheckpointFiles(meta.layout).size());
  ASSERT_TRUE(CommitCheckpoint(run, *tmp, meta, records, 3, 0).ok());
  // Whole shards under other layouts, and a ZeRO-1 share of one.
  ExpectLoadsExactly(run, dims, 1, 1);
  ExpectLoadsExactly(run, dims, 4, 2);
  auto ckpt = FindLatestCheckpoint(run);
  ASSERT_TRUE(ckpt.ok());
  const ParamLayout full(dims, ShardSpec::Full(dims));
  std::vector<float> want(full.size()), p(full.size());
  InitParams(full, 5, want.data());
  const int64_t b = full.size() / 3, e = 2 * full.size() / 3 + 7;
  std::vector<float> m(e - b), v(e - b);
  ASSERT_TRUE(LoadShard(*ckpt, full, p.data(), m.data(), v.data(), {b, e}).ok());
  for (int64_t i = b; i < e; ++i) {
    ASSERT_EQ(m[i - b], 2 * want[i]) << i;
    ASSERT_EQ(v[i - b], want[i] * want[i]) << i;
  }
}

TEST(CheckpointTest, Psi16RoundTripsUnderSeveralLayouts) {
  const ModelDims dims = Dims("psi16");
  const std::string run = FreshDir("psi16");
  SaveUnder(run, dims, 2, 2, 1);
  ExpectLoadsExactly(run, dims, 1, 1);
  ExpectLoadsExactly(run, dims, 4, 1);
}

TEST(CheckpointTest, CorruptedDatasetIsNamedAndTheRunFallsBack) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("corrupt");
  SaveUnder(run, dims, 1, 1, 5);
  const std::string newest = SaveUnder(run, dims, 1, 1, 10);
  const std::string shard = newest + "/" + ShardFileName(0, 0);
  // Flip bytes inside W_E's stored values (found through HDF5), not its metadata.
  haddr_t offset;
  {
    const hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t set = H5Dopen2(file, "embed/W_E", H5P_DEFAULT);
    offset = H5Dget_offset(set);
    H5Dclose(set);
    H5Fclose(file);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset + 40);
    char bytes[16];
    f.read(bytes, 16);
    for (char& b : bytes) b ^= 0x5a;
    f.seekp(offset + 40);
    f.write(bytes, 16);
  }
  auto opened = OpenCheckpoint(newest);
  ASSERT_TRUE(opened.ok());
  const auto problems = VerifyCheckpoint(*opened);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find(shard), std::string::npos) << problems.front();
  EXPECT_NE(problems.front().find("dataset embed/W_E fails its checksum"), std::string::npos) << problems.front();
  auto latest = FindLatestCheckpoint(run);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->meta.step, 5);
}

TEST(CheckpointTest, TruncatedFileIsRefusedWithItsName) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("truncated");
  SaveUnder(run, dims, 1, 1, 3);
  const std::string newest = SaveUnder(run, dims, 1, 1, 6);
  const std::string shard = newest + "/" + ShardFileName(0, 0);
  fs::resize_file(shard, fs::file_size(shard) / 2);
  auto opened = OpenCheckpoint(newest);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(shard), std::string::npos) << opened.status();
  EXPECT_NE(opened.status().message().find("truncated"), std::string::npos) << opened.status();
  EXPECT_EQ(FindLatestCheckpoint(run)->meta.step, 3);
}

TEST(CheckpointTest, APartialCheckpointNeverReplacesAGoodOne) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("partial");
  SaveUnder(run, dims, 1, 1, 4);
  // A crash mid-write leaves a temporary directory and no manifest.
  auto tmp = BeginCheckpoint(run, 8);
  ASSERT_TRUE(tmp.ok());
  std::ofstream(*tmp + "/" + ShardFileName(0, 0)) << "half";
  auto latest = FindLatestCheckpoint(run);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->meta.step, 4);
  // A step directory without a manifest is not a checkpoint either.
  fs::create_directories(run + "/checkpoints/step_00000009");
  EXPECT_EQ(FindLatestCheckpoint(run)->meta.step, 4);
}

TEST(CheckpointTest, KeepsTheLastKAndEveryNth) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("prune");
  for (int64_t step = 1; step <= 9; ++step) SaveUnder(run, dims, 1, 1, step, 5, /*keep_last=*/2, /*keep_every=*/4);
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
    if (e.is_directory()) kept.push_back(e.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"step_00000004", "step_00000008", "step_00000009"}));
}

TEST(CheckpointTest, ASaveRemovesWhatKilledSavesAndPrunesLeft) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("leftovers");
  SaveUnder(run, dims, 1, 1, 3);
  // A prune killed after deleting step 2's manifest leaves its directory (and a shard's
  // bytes); a reader killed after its checkpoint went leaves its lock file.
  fs::create_directories(run + "/checkpoints/step_00000002");
  std::ofstream(run + "/checkpoints/step_00000002/" + ShardFileName(0, 0)) << "bytes no save will reclaim";
  std::ofstream(run + "/checkpoints/.reading-step_00000001") << "";
  // A newer directory without a manifest is not touched (nothing older than the save is).
  fs::create_directories(run + "/checkpoints/step_00000009");
  SaveUnder(run, dims, 1, 1, 4);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"latest", "step_00000003", "step_00000004", "step_00000009"}));
}

// Every file under `dir` with its bytes, by relative path.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    files[fs::relative(e.path(), dir).string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

TEST(CheckpointTest, CheckpointsThatAllFailToVerifyAreOneErrorNamingEach) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("none_verifies");
  SaveUnder(run, dims, 1, 2, 5);
  SaveUnder(run, dims, 1, 2, 10);
  // The second stage's shard is gone from both (a node without the mount that held it).
  for (const char* step : {"step_00000005", "step_00000010"}) {
    fs::remove(run + "/checkpoints/" + step + "/" + ShardFileName(1, 0));
  }
  const auto before = Snapshot(run);
  auto found = FindLatestCheckpoint(run);
  ASSERT_FALSE(found.ok());
  EXPECT_TRUE(absl::IsDataLoss(found.status())) << found.status();
  EXPECT_EQ(std::string(found.status().message()),
            run + "/checkpoints: 2 checkpoints found, none verifies: step_00000010: shard_pp1_tp0.h5: missing; "
                  "step_00000005: shard_pp1_tp0.h5: missing");
  EXPECT_EQ(Snapshot(run), before);
  // A run without any checkpoint is another matter: NotFound.
  EXPECT_TRUE(absl::IsNotFound(FindLatestCheckpoint(FreshDir("no_checkpoints")).status()));
}

TEST(CheckpointTest, CheckpointsSetAsideKeepTheirBytesAndAreNeverOverwrittenOrPruned) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("set_aside");
  for (int64_t step = 1; step <= 3; ++step) SaveUnder(run, dims, 1, 1, step);
  const std::string root = run + "/checkpoints";
  const auto newer = Snapshot(root + "/step_00000003");
  auto moved = SetAsideCheckpoints(run, 1);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, (std::vector<std::string>{root + "/unverified/step_00000002", root + "/unverified/step_00000003"}));
  EXPECT_EQ(Snapshot(root + "/unverified/step_00000003"), newer);
  std::ifstream latest(root + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_00000001");
  EXPECT_EQ(FindLatestCheckpoint(run)->meta.step, 1);
  // The same step set aside again gets a suffix instead of replacing the first.
  SaveUnder(run, dims, 1, 1, 3);
  moved = SetAsideCheckpoints(run, 2);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, (std::vector<std::string>{root + "/unverified/step_00000003.1"}));
  EXPECT_EQ(Snapshot(root + "/unverified/step_00000003"), newer);
  // Retention keeps one checkpoint and leaves unverified/ alone.
  const auto aside = Snapshot(root + "/unverified");
  for (int64_t step = 4; step <= 6; ++step) SaveUnder(run, dims, 1, 1, step, 5, /*keep_last=*/1);
  EXPECT_EQ(Snapshot(root + "/unverified"), aside);
  EXPECT_FALSE(fs::exists(root + "/step_00000005"));
  EXPECT_TRUE(fs::exists(root + "/step_00000006"));
  // With every checkpoint set aside, `latest` goes too.
  ASSERT_TRUE(SetAsideCheckpoints(run, -1).ok());
  EXPECT_FALSE(fs::exists(root + "/latest"));
  EXPECT_TRUE(fs::exists(root + "/unverified/step_00000006"));
  EXPECT_TRUE(absl::IsNotFound(FindLatestCheckpoint(run).status()));
}

// Run by ctest under tests/checkpoint/no_flock.c (flock() fails with ENOSYS, as
// on Lustre without -o flock or NFS nolock): as checkpoint_without_flock, and as
// checkpoint_without_flock_strict with HDF5_USE_FILE_LOCKING=TRUE, which
// overrides our best-effort locking and shows what HDF5 1.10 does by default.
TEST(CheckpointTest, SavesAndLoadsWhereTheFileSystemRefusesFlock) {
  const fs::path probe = fs::temp_directory_path() / ("ms_ckpt_flock_probe_" + std::to_string(::getpid()));
  std::ofstream(probe) << "x";
  const int fd = ::open(probe.c_str(), O_RDONLY);
  const int rc = ::flock(fd, LOCK_SH | LOCK_NB);
  const int err = errno;
  ::close(fd);
  fs::remove(probe);
  if (rc == 0) GTEST_SKIP() << "flock works here; ctest runs this test under the no_flock shim";
  ASSERT_EQ(err, ENOSYS);
  const ModelDims dims = Dims("tiny_psi2");
  const char* env = std::getenv("HDF5_USE_FILE_LOCKING");
  const bool strict = env != nullptr && std::string(env) == "TRUE";
  const std::string run = FreshDir(strict ? "no_flock_strict" : "no_flock");
  if (strict) {
    CheckpointMeta meta;
    meta.step = 1;
    meta.dims = dims;
    const ParamLayout layout(dims, ShardSpec::Full(dims));
    std::vector<float> p(layout.size());
    auto saved = SaveCheckpoint(run, meta, {{&layout, p.data(), nullptr, nullptr, 0, 0}}, 3, 0);
    ASSERT_FALSE(saved.ok());
    EXPECT_NE(saved.status().message().find("shard_pp0_tp0.h5: cannot create HDF5 file"), std::string::npos)
        << saved.status();
    EXPECT_FALSE(fs::exists(TempCheckpointDir(run, 1)));
    return;
  }
  SaveUnder(run, dims, 2, 1, 1);
  ExpectLoadsExactly(run, dims, 1, 1);
}

// ValidateManifest's message for `manifest` with one edit, or "OK".
std::string ManifestError(nlohmann::json manifest, const std::function<void(nlohmann::json&)>& edit) {
  edit(manifest);
  auto meta = ValidateManifest(manifest, "m.json");
  return meta.ok() ? "OK" : std::string(meta.status().message());
}

TEST(CheckpointTest, ManifestFieldsAreTypeCheckedAndBoundedByName) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("manifest_schema");
  auto ckpt = OpenCheckpoint(SaveUnder(run, dims, 1, 1, 5));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const nlohmann::json& m = ckpt->manifest;
  EXPECT_EQ(ManifestError(m, [](auto&) {}), "OK");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["model"]["vocab"] = -1; }),
            "m.json: model.vocab = -1 is outside [1, 2147483647]");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["model"]["d_k"] = 0; }), "m.json: model.d_k = 0 is outside [2, 1048576]");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["model"]["w_th"] = "8"; }),
            "m.json: field model.w_th is a string, expected a number");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["step"] = 5.0; }), "m.json: field step is the float 5.0, expected an integer");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["samples"] = INT64_MAX; }),
            "m.json: field samples = 9223372036854775807 is outside [0, 1125899906842624]");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["optimizer"]["adam_step"] = 6; }),
            "m.json: field optimizer.adam_step = 6 is outside [0, 5]");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["layout"]["tp"] = 3; }), "m.json: field layout.tp = 3 is outside [1, 2]");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["format_version"] = 2; }),
            "m.json: field format_version = 2 is not one this build reads (1)");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["loss_scaler"].erase("scale"); }),
            "m.json: field loss_scaler.scale is missing");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["rng"]["data_samples_consumed"] = 49; }),
            "m.json: field rng.data_samples_consumed = 49 differs from samples = 50");
  // The training data's record: optional (older manifests), typed when present.
  const nlohmann::json data = {{"train", {{"tokens", 30000}, {"fingerprint", "0badcafe"}}}};
  EXPECT_EQ(ManifestError(m, [&](auto& j) { j["data"] = data; }), "OK");
  auto with_data = m;
  with_data["data"] = data;
  EXPECT_EQ(ValidateManifest(with_data, "m.json")->data, data);
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["data"] = 3; }), "m.json: field data is the number 3, expected an object");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["data"] = {{"web", {{"tokens", -1}, {"fingerprint", "x"}}}}; }),
            "m.json: field data[\"web\"] is not {\"tokens\": N, \"fingerprint\": \"...\"}");
}

TEST(CheckpointTest, ATransformerManifestHoldsTheThresholdAndValueWidthItUses) {
  // Model files cannot set a Transformer's w_th (its screening heads' MiPE threshold) or
  // d_v; an edited manifest set them (ckpt inspect printed w_th=16), as CheckModelDims
  // now refuses for weights files and manifests alike.
  const ModelDims dims = Dims("tiny_transformer_screening");
  const std::string run = FreshDir("manifest_transformer");
  auto ckpt = OpenCheckpoint(SaveUnder(run, dims, 1, 1, 2));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const nlohmann::json& m = ckpt->manifest;
  EXPECT_EQ(ManifestError(m, [](auto&) {}), "OK");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["model"]["w_th"] = 16; }),
            "m.json: model.w_th = 16: a Transformer's is 256 (model files cannot set it)");
  EXPECT_EQ(ManifestError(m, [](auto& j) { j["model"]["d_v"] = 7; }),
            "m.json: model.d_v = 7: a Transformer's is its head width d_k = 4");
}

TEST(CheckpointTest, FilesAndDatasetsMustBeWhatTheLayoutWrites) {
  const ModelDims dims = Dims("tiny_psi2");
  const std::string run = FreshDir("manifest_files");
  const std::string dir = SaveUnder(run, dims, 2, 1, 5);
  const std::string path = dir + "/manifest.json";
  auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(path);
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    edit(j);
    std::ofstream(path) << j.dump();
  };
  auto error = [&] {
    auto opened = OpenCheckpoint(dir);
    return opened.ok() ? std::string("OK") : std::string(opened.status().message());
  };
  ASSERT_EQ(error(), "OK");
  // tp = 1 in the manifest while the files are of tp = 2.
  rewrite([](auto& j) { j["layout"]["tp"] = 1; });
  EXPECT_EQ(error(), path + ": field files lists 2 files, the layout (tp=1 pp=1 dp=1 zero=0) writes 1");
  rewrite([](auto& j) {
    j["layout"]["tp"] = 2;
    j["files"]["shard_pp0_tp1.h5"]["datasets"].erase("layers/001/W_O");
  });
  EXPECT_EQ(error(), path + ": field files.shard_pp0_tp1.h5.datasets has no checksum for layers/001/W_O");
  rewrite([](auto& j) { j["files"]["shard_pp0_tp1.h5"]["datasets"]["layers/001/W_O"] = -3; });
  EXPECT_EQ(error(), path + ": field files.shard_pp0_tp1.h5.datasets.layers/001/W_O is the number -3, expected a "
                            "CRC-32C (0 to 2^32 - 1)");
}

TEST(CheckpointTest, ALoadIntoAnotherModelNamesTheFieldsThatDifferWithBothValues) {
  // A resume under other model flags: the message names what differs, not every field
  // that might (it listed all fifteen whatever differed).
  const ModelDims saved = Dims("tiny_transformer");
  const std::string run = FreshDir("other_model");
  SaveUnder(run, saved, 1, 1, 3);
  auto ckpt = FindLatestCheckpoint(run);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto load_error = [&](const ModelDims& want) {
    const ParamLayout layout(want, ShardSpec::Full(want));
    std::vector<float> p(layout.size()), m(layout.size()), v(layout.size());
    const absl::Status s = LoadShard(*ckpt, layout, p.data(), m.data(), v.data());
    return s.ok() ? std::string("OK") : std::string(s.message());
  };
  ModelDims screening = saved;
  screening.name = "tiny_transformer_screening";
  screening.attention = AttentionKind::kScreening;
  EXPECT_EQ(load_error(screening), ckpt->dir + ": checkpoint of model 'tiny_transformer' does not match the model being "
                                               "loaded ('tiny_transformer_screening'): attention = softmax in the "
                                               "checkpoint, screening in the model being loaded");
  ModelDims two = saved;
  two.qk_norm = true;
  two.d_e = 16;
  two.d_k = 8;
  EXPECT_EQ(load_error(two), ckpt->dir + ": checkpoint of model 'tiny_transformer' does not match the model being "
                                         "loaded ('tiny_transformer'): d_e = 8 in the checkpoint, 16 in the model being "
                                         "loaded; d_k = 4 in the checkpoint, 8 in the model being loaded; qk_norm = false "
                                         "in the checkpoint, true in the model being loaded");
  EXPECT_EQ(load_error(saved), "OK");
}

TEST(CheckpointTest, ThePlanForTheFourBillionModelAddsUp) {
  const ModelDims dims = Dims("psi64");
  const auto plan = PlanCheckpoint(dims, {8, 8, 1, 0});
  ASSERT_EQ(plan.size(), 64u);
  // Each tp rank of each stage: 8 layers × 8 tiles × (d_E(2d_K + 3d_V) + 3) elements;
  // stage 0 and 7 add their vocabulary rows of W_E (50257 = 8·6282 + 1: tp rank 0
  // holds one more) and s_E / s_F.
  const int64_t tiles = 8 * 8 * (4096LL * (2 * 16 + 3 * 64) + 3);
  int64_t total = 0;
  for (int64_t p = 0; p < 8; ++p) {
    for (int64_t t = 0; t < 8; ++t) {
      int64_t elements = tiles;
      const int64_t rows = t == 0 ? 6283 : 6282;
      if (p == 0 || p == 7) elements += rows * 4096 + 1;
      EXPECT_EQ(plan[p * 8 + t].weight_bytes, 4 * elements) << plan[p * 8 + t].file;
      EXPECT_EQ(plan[p * 8 + t].moment_bytes, 8 * elements);
      total += elements;
    }
  }
  // The paper's 3,963,961,346 parameters, plus the tied W_E held by both the
  // first and the last stage, plus s_E/s_F replicated on the 8 tp ranks.
  EXPECT_EQ(total, 3963961346LL + 50257LL * 4096 + 14);
  EXPECT_EQ(plan[0].weight_bytes, 4 * (tiles + 6283LL * 4096 + 1));
}

// --- Streamed writers (issue 20) ---------------------------------------------

// Every dataset of every file of two checkpoints read back: the same values,
// bit for bit, and the same global_shape and offset / flat_offset attributes.
void ExpectSameDatasets(const CheckpointRef& a, const CheckpointRef& b) {
  ASSERT_EQ(a.manifest["files"].size(), b.manifest["files"].size());
  for (const auto& [file, record] : a.manifest["files"].items()) {
    auto ra = H5Reader::Open((fs::path(a.dir) / file).string());
    auto rb = H5Reader::Open((fs::path(b.dir) / file).string());
    ASSERT_TRUE(ra.ok() && rb.ok()) << file;
    for (const auto& [name, crc] : record["datasets"].items()) {
      auto shape = (*ra)->Shape(name);
      ASSERT_TRUE(shape.ok()) << name;
      ASSERT_EQ(*shape, *(*rb)->Shape(name)) << file << " " << name;
      int64_t n = 1;
      for (int64_t d : *shape) n *= d;
      std::vector<float> va(n), vb(n);
      const int64_t rows = shape->empty() ? 1 : (*shape)[0];
      ASSERT_TRUE((*ra)->ReadRows(name, 0, rows, va.data()).ok());
      ASSERT_TRUE((*rb)->ReadRows(name, 0, rows, vb.data()).ok());
      ASSERT_EQ(0, std::memcmp(va.data(), vb.data(), n * sizeof(float))) << file << " " << name;
      for (const char* attr : {"global_shape", "offset", "flat_offset"}) {
        auto x = (*ra)->ReadDatasetAttribute(name, attr), y = (*rb)->ReadDatasetAttribute(name, attr);
        ASSERT_EQ(x.ok(), y.ok()) << name << "@" << attr;
        if (x.ok()) ASSERT_EQ(*x, *y) << name << "@" << attr;
      }
    }
  }
}

// The manifest without the files' byte counts (the streamed files leave zero blocks unwritten).
nlohmann::json WithoutBytes(nlohmann::json manifest) {
  for (auto& [file, record] : manifest["files"].items()) record.erase("bytes");
  return manifest;
}

int64_t StoredBytes(const CheckpointRef& c) {
  int64_t total = 0;
  for (const auto& [file, record] : c.manifest["files"].items()) total += record["bytes"].get<int64_t>();
  return total;
}

TEST(StreamedWriteTest, InitValuesAreTheSpecsDrawsOfInitNormal) {
  // Independently of InitParams (which InitValues also serves): std · InitNormal(seed, name, index).
  const ModelDims dims = Dims("psi16");
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const ParamEntry& wq = *full.Find("layers/003/W_Q");
  const ParamEntry& we = *full.Find("embed/W_E");
  std::vector<float> got(1000);
  InitValues(dims, wq, 42, 12345, 1000, got.data());
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(0.1 / std::sqrt(double(dims.d_k)) * InitNormal(42, wq.name, 12345 + i)));
  }
  InitValues(dims, we, 42, 7, 1000, got.data());
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(0.1 / std::sqrt(double(dims.d_e)) * InitNormal(42, we.name, 7 + i)));
  }
}

TEST(StreamedWriteTest, StreamedInitIsTheInMemoryInitBitForBit) {
  // Ψ = 16 whole, through the weights-file reader; blocks of 1 MiB cut every large tensor.
  const ModelDims dims = Dims("psi16");
  const std::string dir = FreshDir("streamed_init16");
  const std::string path = dir + "/w.h5";
  ASSERT_TRUE(WriteWeightsStreamed(path, dims, InitSource(dims, 11, 2), int64_t{1} << 20).ok());
  auto w = ReadWeightsFile(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ParamLayout full(dims, ShardSpec::Full(dims));
  std::vector<float> want(full.size());
  InitParams(full, 11, want.data());
  ASSERT_EQ(w->params.size(), want.size());
  ASSERT_EQ(0, std::memcmp(w->params.data(), want.data(), want.size() * sizeof(float)));
  fs::remove_all(dir);
}

TEST(StreamedWriteTest, StreamedInitOfPsi32IsTheInMemoryInitLayerByLayer) {
  // Ψ = 32 (286 M parameters): the file against InitParams of pipeline stages of a
  // tp = 2, pp = 32 split (one layer, half its tiles at a time): every 8th layer and
  // the last, with W_E and the scalars (CI time: the whole file is streamed either way).
  const ModelDims dims = Dims("psi32");
  const std::string dir = FreshDir("streamed_init32");
  const std::string path = dir + "/w.h5";
  ASSERT_TRUE(WriteWeightsStreamed(path, dims, InitSource(dims, 3, 2), int64_t{64} << 20).ok());
  auto in = H5Reader::Open(path);
  ASSERT_TRUE(in.ok());
  for (int64_t p : {int64_t{0}, int64_t{8}, int64_t{16}, int64_t{24}, dims.n_layers - 1}) {
    for (int64_t t = 0; t < 2; ++t) {
      const ParamLayout layout(dims, ShardSpec::ForRank(dims, 2, dims.n_layers, t, p));
      std::vector<float> want(layout.size()), got;
      InitParams(layout, 3, want.data());
      for (const ParamEntry& e : layout.entries()) {
        got.resize(e.size());
        const int64_t rows = e.shape.empty() ? 1 : e.shape[0];
        ASSERT_TRUE((*in)->ReadRows(e.name, e.offset.empty() ? 0 : e.offset[0], rows, got.data()).ok()) << e.name;
        ASSERT_EQ(0, std::memcmp(got.data(), want.data() + e.buffer_offset, e.size() * sizeof(float))) << e.name;
      }
    }
  }
  fs::remove_all(dir);
}

// What train saves at step 0 under a layout (Trainer::SaveCheckpointNow: every
// rank's InitParams, zero moments; the shards, or under ZeRO-1 the shards and
// each dp rank's optimizer piece) against the streamed `ckpt init`.
void ExpectCkptInitIsTheStepZeroSave(const ModelDims& dims, const ParallelLayout& layout) {
  CheckpointMeta meta;
  meta.seed = 9;
  meta.dims = dims;
  meta.layout = layout;
  const std::string train_run = FreshDir("step0_train"), init_run = FreshDir("step0_init");
  auto tmp = BeginCheckpoint(train_run, 0);
  ASSERT_TRUE(tmp.ok());
  nlohmann::json records = nlohmann::json::object();
  for (int64_t p = 0; p < layout.pp; ++p) {
    for (int64_t t = 0; t < layout.tp; ++t) {
      const ParamLayout l(dims, ShardSpec::ForRank(dims, layout.tp, layout.pp, t, p));
      std::vector<float> params(l.size()), zeros(l.size(), 0.0f);
      InitParams(l, 9, params.data());
      const bool zero = layout.zero == 1;
      auto rec = WriteShard(*tmp, {&l, params.data(), zero ? nullptr : zeros.data(), zero ? nullptr : zeros.data(), p, t});
      ASSERT_TRUE(rec.ok()) << rec.status();
      records[ShardFileName(p, t)] = *rec;
      if (!zero) continue;
      const int64_t per = (l.size() + layout.dp - 1) / layout.dp;
      for (int64_t d = 0; d < layout.dp; ++d) {
        const int64_t b = std::min(l.size(), d * per), e = std::min(l.size(), b + per);
        auto piece = WriteOptimizerPiece(*tmp, {&l, b, e, zeros.data(), zeros.data(), p, t, d});
        ASSERT_TRUE(piece.ok()) << piece.status();
        records[OptimizerFileName(p, t, d)] = *piece;
      }
    }
  }
  ASSERT_TRUE(CommitCheckpoint(train_run, *tmp, meta, records, 1, 0).ok());
  auto streamed = WriteCheckpointStreamed(init_run, meta, InitSource(dims, 9, 2), int64_t{1} << 20);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  auto a = FindLatestCheckpoint(train_run), b = FindLatestCheckpoint(init_run);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();  // opens and verifies every checksum
  EXPECT_EQ(WithoutBytes(a->manifest), WithoutBytes(b->manifest));
  ExpectSameDatasets(*a, *b);
  // The zero moments took no disk: the streamed checkpoint is about the weights' size
  // (for a model whose tensors outweigh HDF5's headers).
  int64_t weights = 0;
  for (const ShardPlan& s : PlanCheckpoint(dims, layout)) weights += s.weight_bytes;
  if (weights < (int64_t{10} << 20)) return;
  EXPECT_LT(StoredBytes(*b), weights + weights / 20);
  EXPECT_GT(StoredBytes(*a), 2 * weights);
}

TEST(StreamedWriteTest, CkptInitIsWhatTrainSavesAtStepZero) {
  ExpectCkptInitIsTheStepZeroSave(Dims("psi16"), {2, 2, 1, 0});
  ExpectCkptInitIsTheStepZeroSave(Dims("tiny_psi4"), {2, 2, 3, 1});
}

// Streams checkpoint `from` into a new run directory under `layout`.
std::string Reshard(const std::string& from_run, const std::string& name, const ParallelLayout& layout) {
  auto ckpt = FindLatestCheckpoint(from_run);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto source = CheckpointSource(*ckpt);
  EXPECT_TRUE(source.ok()) << source.status();
  CheckpointMeta meta = ckpt->meta;
  meta.layout = layout;
  const std::string run = FreshDir(name);
  fs::remove_all(run);
  auto dir = WriteCheckpointStreamed(run, meta, *source, int64_t{1} << 20);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return run;
}

// forward --no_grad on a run that is still training with keep_last 1: the checkpoint it
// opened is pruned before it verifies it. The failure says so, not "corrupt".
TEST(StreamedWriteTest, AVerifyOfACheckpointRemovedUnderItSaysItWasRemoved) {
  const ModelDims dims = Dims("tiny_psi4");
  CheckpointMeta meta;
  meta.seed = 3;
  meta.dims = dims;
  meta.layout = {1, 1, 1, 0};
  const std::string run = FreshDir("vanished");
  ASSERT_TRUE(WriteCheckpointStreamed(run, meta, InitSource(dims, 3, 1), int64_t{1} << 20).ok());
  auto ckpt = FindLatestCheckpoint(run);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const absl::Status other = absl::DataLossError("a checksum differs");
  EXPECT_EQ(ExplainVanished(*ckpt, other), other);  // still there: the error stands as it was
  EXPECT_TRUE(ExplainVanished(*ckpt, absl::OkStatus()).ok());
  fs::remove_all(ckpt->dir);
  ckpt->open_files = nullptr;  // removed before its files were opened (the ref holds them since issue 43)
  const std::vector<std::string> problems = VerifyCheckpoint(*ckpt, /*weights_only=*/true);
  ASSERT_FALSE(problems.empty());
  const absl::Status said = ExplainVanished(*ckpt, absl::DataLossError(problems.front()));
  EXPECT_TRUE(absl::IsFailedPrecondition(said)) << said;
  EXPECT_THAT(std::string(said.message()),
              ::testing::HasSubstr(ckpt->dir + ": the checkpoint was removed while it was being read"));
  EXPECT_THAT(std::string(said.message()), ::testing::HasSubstr(problems.front()));
}

// VerifyCheckpoint's (weights only) first problem as a DataLoss error; OK when none.
absl::Status CheckVerifies(const CheckpointRef& ckpt) {
  const std::vector<std::string> problems = VerifyCheckpoint(ckpt, /*weights_only=*/true);
  return problems.empty() ? absl::OkStatus() : absl::DataLossError(problems.front());
}

TEST(StreamedWriteTest, AReadThatLostItsCheckpointToPruningStartsOverOnTheNewest) {
  // A run with checkpoints at steps 10 and 20; the first read is of step 20, which the
  // "run" prunes under it: the read starts over and succeeds on what is newest then.
  const ModelDims dims = Dims("tiny_psi4");
  const std::string run = FreshDir("read_retrying");
  fs::create_directories(run + "/checkpoints");
  // The writer keeps one checkpoint per run: each is written alone and copied in.
  auto add_checkpoint = [&](int64_t step) {
    CheckpointMeta meta;
    meta.seed = 3;
    meta.step = step;
    meta.dims = dims;
    meta.layout = {1, 1, 1, 0};
    const std::string alone = FreshDir("read_retrying_one");
    auto dir = WriteCheckpointStreamed(alone, meta, InitSource(dims, 3, 1), int64_t{1} << 20);
    ASSERT_TRUE(dir.ok()) << dir.status();
    fs::copy(*dir, fs::path(run) / "checkpoints" / fs::path(*dir).filename(), fs::copy_options::recursive);
  };
  add_checkpoint(10);
  add_checkpoint(20);
  std::vector<int64_t> steps_read;
  // Removed before the read opened its files (a ref holds them open since issue 43: a
  // removal after that is no loss, below).
  auto unopened = [](CheckpointRef ckpt) {
    ckpt.open_files = nullptr;
    return ckpt;
  };
  auto prune_first = [&](const CheckpointRef& ckpt) {
    steps_read.push_back(ckpt.meta.step);
    if (steps_read.size() > 1) return CheckVerifies(ckpt);
    fs::remove_all(ckpt.dir);
    return CheckVerifies(unopened(ckpt));
  };
  auto got = ReadCheckpointRetrying(run, prune_first);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->meta.step, 10);
  EXPECT_EQ(steps_read, (std::vector<int64_t>{20, 10}));
  // A failure of a checkpoint still there is the read's own, after one attempt.
  steps_read.clear();
  const absl::Status corrupt = absl::DataLossError("a checksum differs");
  auto failed = ReadCheckpointRetrying(run, [&](const CheckpointRef& ckpt) {
    steps_read.push_back(ckpt.meta.step);
    return corrupt;
  });
  EXPECT_EQ(failed.status(), corrupt);
  EXPECT_EQ(steps_read.size(), 1u);
  // Pruned under every attempt: after `attempts` it says so.
  add_checkpoint(30);
  add_checkpoint(40);
  steps_read.clear();
  auto lost = ReadCheckpointRetrying(
      run,
      [&](const CheckpointRef& ckpt) {
        steps_read.push_back(ckpt.meta.step);
        fs::remove_all(ckpt.dir);
        return CheckVerifies(unopened(ckpt));
      },
      /*attempts=*/2);
  EXPECT_TRUE(absl::IsFailedPrecondition(lost.status())) << lost.status();
  EXPECT_THAT(std::string(lost.status().message()), ::testing::HasSubstr("removed while it was being read"));
  EXPECT_EQ(steps_read, (std::vector<int64_t>{40, 30}));
}

// Issue 43: `ckpt export` and `ckpt inspect` on a live run with keep_last: 1 lost their
// checkpoint to the pruning where the reader's lock cannot be had (a file system without
// flock): 2 of 40 failed here. What a ref opened it keeps reading after the removal.
TEST(StreamedWriteTest, ACheckpointRemovedAfterItWasOpenedStillVerifiesAndReads) {
  const ModelDims dims = Dims("tiny_psi4");
  CheckpointMeta meta;
  meta.seed = 3;
  meta.dims = dims;
  meta.layout = {2, 2, 1, 0};
  const std::string run = FreshDir("removed_after_open");
  ASSERT_TRUE(WriteCheckpointStreamed(run, meta, InitSource(dims, 3, 1), int64_t{1} << 20).ok());
  auto ckpt = FindLatestCheckpoint(run);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto before = ConsolidatedWeights(*ckpt);
  ASSERT_TRUE(before.ok()) << before.status();
  fs::remove_all(ckpt->dir);
  EXPECT_EQ(VerifyCheckpoint(*ckpt, /*weights_only=*/true), std::vector<std::string>{});
  auto after = ConsolidatedWeights(*ckpt);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->params, before->params);
  auto source = CheckpointSource(*ckpt);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<float> w_e(8);
  ASSERT_TRUE((*source)("embed/W_E", 0, 8, w_e.data()).ok());
  EXPECT_EQ(w_e, std::vector<float>(before->params.begin(), before->params.begin() + 8));
}

TEST(StreamedWriteTest, ACheckpointBeingReadIsKeptUntilItsReaderIsDone) {
  // keep_last 1 (the streamed writer's): step 10, read by another command, outlives the
  // save of step 20, and goes with the save after its reader let it go.
  const ModelDims dims = Dims("tiny_psi4");
  const std::string run = FreshDir("reader_lock");
  auto save = [&](int64_t step) {
    CheckpointMeta meta;
    meta.seed = 3;
    meta.step = step;
    meta.dims = dims;
    meta.layout = {1, 1, 1, 0};
    ASSERT_TRUE(WriteCheckpointStreamed(run, meta, InitSource(dims, 3, 1), int64_t{1} << 20).ok());
  };
  auto exists = [&](const char* name) { return fs::exists(fs::path(run) / "checkpoints" / name); };
  save(10);
  auto reader = OpenCheckpointOrRun(run, /*lock_for_reading=*/true);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_NE(reader->reading, nullptr);
  EXPECT_TRUE(exists(".reading-step_00000010"));
  save(20);
  EXPECT_TRUE(exists("step_00000010"));  // held
  EXPECT_TRUE(exists("step_00000020"));
  auto run_own = OpenCheckpointOrRun(run);  // the run's own open takes no lock
  ASSERT_TRUE(run_own.ok());
  EXPECT_EQ(run_own->reading, nullptr);
  reader = absl::NotFoundError("released");
  save(30);
  EXPECT_FALSE(exists("step_00000010"));
  EXPECT_FALSE(exists("step_00000020"));
  EXPECT_TRUE(exists("step_00000030"));
  EXPECT_FALSE(exists(".reading-step_00000010"));  // the pruner's lock file went with it
  EXPECT_EQ(ReaderLockPath(run + "/checkpoints/step_00000030/"), run + "/checkpoints/.reading-step_00000030");
  EXPECT_EQ(ReaderLockPath(run), "");  // not a checkpoint of a run: nothing prunes it
  // A step directory given by name that the run has pruned says so.
  auto pruned = OpenCheckpointOrRun(run + "/checkpoints/step_00000010");
  EXPECT_TRUE(absl::IsNotFound(pruned.status())) << pruned.status();
  EXPECT_THAT(std::string(pruned.status().message()), ::testing::HasSubstr("no such checkpoint"));
}

TEST(StreamedWriteTest, ReshardRoundTripsAreBitExactMomentsIncluded) {
  // Ψ = 16 with moments 2p and p² (not zeros): tp2·pp2 → tp4·pp1 → tp1·pp1 loads
  // exactly, and back to tp2·pp2 is the original, file by file, dataset by dataset.
  const ModelDims dims = Dims("psi16");
  const std::string run = FreshDir("reshard_src");
  SaveUnder(run, dims, 2, 2, 4);
  const std::string r41 = Reshard(run, "reshard_41", {4, 1, 1, 0});
  const std::string r11 = Reshard(r41, "reshard_11", {1, 1, 1, 0});
  ExpectLoadsExactly(r11, dims, 1, 1);
  const std::string back = Reshard(r11, "reshard_back", {2, 2, 1, 0});
  auto a = FindLatestCheckpoint(run), b = FindLatestCheckpoint(back);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(WithoutBytes(a->manifest), WithoutBytes(b->manifest));
  ExpectSameDatasets(*a, *b);
  // Through ZeRO-1 optimizer pieces (tp1·pp2, dp 3) and back (a small model: the
  // pieces cut tensors at ⌈size/3⌉ boundaries whatever the size).
  const ModelDims tiny = Dims("tiny_psi4");
  const std::string small = FreshDir("reshard_small");
  SaveUnder(small, tiny, 2, 2, 4);
  const std::string z = Reshard(small, "reshard_zero", {1, 2, 3, 1});
  ExpectLoadsExactly(z, tiny, 4, 1);
  const std::string zback = Reshard(z, "reshard_zero_back", {2, 2, 1, 0});
  auto c = FindLatestCheckpoint(small), d = FindLatestCheckpoint(zback);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(WithoutBytes(c->manifest), WithoutBytes(d->manifest));
  ExpectSameDatasets(*c, *d);
}

TEST(StreamedWriteTest, UnwrittenZeroBlocksReadAsWrittenZerosAndNegativeZeroIsKept) {
  // Moments of +0.0 in some blocks, −0.0 in others: only the +0.0 blocks go unwritten,
  // and both load with their sign bit and pass their checksums.
  const ModelDims dims = Dims("tiny_psi4");
  CheckpointMeta meta;
  meta.dims = dims;
  meta.layout = {1, 1, 1, 0};
  const TensorSource init = InitSource(dims, 1, 1);
  const TensorSource source = [&](const std::string& name, int64_t first, int64_t n, float* out) {
    if (name.rfind("adam_v/", 0) == 0) {
      std::fill(out, out + n, -0.0f);
      return absl::OkStatus();
    }
    return init(name, first, n, out);
  };
  const std::string run = FreshDir("signed_zero");
  fs::remove_all(run);
  ASSERT_TRUE(WriteCheckpointStreamed(run, meta, source, int64_t{1} << 20).ok());
  auto ckpt = FindLatestCheckpoint(run);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const ParamLayout full(dims, ShardSpec::Full(dims));
  std::vector<float> p(full.size()), m(full.size(), 1.0f), v(full.size(), 1.0f);
  ASSERT_TRUE(LoadShard(*ckpt, full, p.data(), m.data(), v.data()).ok());
  for (int64_t i = 0; i < full.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(m[i]), 0u) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), 0x80000000u) << i;
  }
  auto in = H5Reader::Open(ckpt->dir + "/" + ShardFileName(0, 0));
  ASSERT_TRUE(in.ok());
  const std::string name = "adam_m/" + full.entries().front().name;
  EXPECT_EQ((*in)->Describe(name)->storage_bytes, 0);
  EXPECT_GT((*in)->Describe("adam_v/" + full.entries().front().name)->storage_bytes, 0);
  // A weights file does not accept what a checkpoint (with its checksums) does.
  EXPECT_FALSE(CheckDatasetHolds(**in, name, *(*in)->Shape(name)).ok());
  EXPECT_TRUE(CheckDatasetHolds(**in, name, *(*in)->Shape(name), /*allow_zero_fill=*/true).ok());
}

}  // namespace
}  // namespace multiscreen

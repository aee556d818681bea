// LoadSweep (launch/sweep.h): how the sweep file's inline base_config lands on the base
// run file's fields (issue 17).
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "launch/sweep.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Every field the inline base_config writes wins over the base file's, including values
// equal to the proto3 default (false, 0), which Message::MergeFrom would drop; fields it
// does not write keep the base file's; repeated fields append.
TEST(SweepConfigTest, InlineBaseConfigOverridesTheBaseFileFieldByFieldDefaultsIncluded) {
  const fs::path dir = fs::path(::testing::TempDir()) / "sweep_config_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  // A validation shard must exist for LoadSweep's checks: llm.c header + 600 tokens.
  for (const char* name : {"train_000000.bin", "val_000000.bin"}) {
    std::ofstream f(dir / "data" / name, std::ios::binary);
    int32_t header[256] = {20240520, 1, 600};
    f.write(reinterpret_cast<const char*>(header), sizeof(header));
    for (int i = 0; i < 600; ++i) {
      const uint16_t t = static_cast<uint16_t>(i % 97);
      f.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
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

}  // namespace
}  // namespace multiscreen

// The groups' transport chosen at start-up (parallel/comm_choice.h, issue 15): MPI on
// the CPU, NCCL with a GPU per rank, the staged MPI path for ranks that share a GPU or a
// build without NCCL, and one-line refusals of a forced choice that cannot work.
#include <gtest/gtest.h>

#include "parallel/comm_choice.h"

namespace multiscreen {
namespace {

CommEnvironment Gpu(int local_ranks, int gpus, bool nccl = true) {
  return CommEnvironment{Device::kCuda, nccl, local_ranks, gpus};
}

TEST(CommChoiceTest, AutoIsMpiOnTheCpuWhateverTheNodeHas) {
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, CommEnvironment{Device::kCpu, true, 4, 8}), CommKind::kMpi);
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, CommEnvironment{Device::kCpu, false, 8, 0}), CommKind::kMpi);
}

TEST(CommChoiceTest, AutoIsNcclWithAGpuPerRankAndStagedWhenRanksShareOne) {
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, Gpu(8, 8)), CommKind::kNccl);
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, Gpu(2, 8)), CommKind::kNccl);
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, Gpu(4, 1)), CommKind::kStaged);
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, Gpu(9, 8)), CommKind::kStaged);
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, Gpu(2, 2, /*nccl=*/false)), CommKind::kStaged);
}

// Ranks that each see only their own GPU (--gpus-per-task=1, CUDA_VISIBLE_DEVICES per
// rank): one visible device each, but distinct PCI bus ids across the node.
TEST(CommChoiceTest, AutoIsNcclWhenTheNodesRanksBoundDistinctGpusWhateverEachSees) {
  CommEnvironment own = Gpu(4, 1);
  own.node_gpus = 4;
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, own), CommKind::kNccl);
  EXPECT_EQ(*ChooseCommKind(CommKind::kNccl, own), CommKind::kNccl);
  // Enough visible GPUs, but two ranks bound the same one: NCCL would refuse it.
  CommEnvironment shared = Gpu(4, 8);
  shared.node_gpus = 3;
  EXPECT_EQ(*ChooseCommKind(CommKind::kAuto, shared), CommKind::kStaged);
  const auto forced = ChooseCommKind(CommKind::kNccl, shared);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("4 ranks on this node share 3"), std::string::npos) << forced.status();
}

TEST(CommChoiceTest, MpiOnAGpuIsTheStagedPathAndStagedRunsAnywhere) {
  EXPECT_EQ(*ChooseCommKind(CommKind::kMpi, Gpu(2, 2)), CommKind::kStaged);
  EXPECT_EQ(*ChooseCommKind(CommKind::kMpi, CommEnvironment{}), CommKind::kMpi);
  EXPECT_EQ(*ChooseCommKind(CommKind::kStaged, CommEnvironment{}), CommKind::kStaged);
  EXPECT_EQ(*ChooseCommKind(CommKind::kStaged, Gpu(2, 2)), CommKind::kStaged);
}

TEST(CommChoiceTest, ForcedNcclThatCannotWorkIsRefusedNamingTheFlag) {
  EXPECT_EQ(*ChooseCommKind(CommKind::kNccl, Gpu(2, 2)), CommKind::kNccl);
  for (const CommEnvironment& env : {CommEnvironment{}, Gpu(4, 1), Gpu(2, 2, false), Gpu(1, 0)}) {
    const auto kind = ChooseCommKind(CommKind::kNccl, env);
    ASSERT_FALSE(kind.ok());
    EXPECT_EQ(kind.status().message().substr(0, 12), "--comm=nccl:") << kind.status();
  }
  EXPECT_NE(ChooseCommKind(CommKind::kNccl, Gpu(4, 1)).status().message().find("4 ranks on this node share 1"),
            std::string::npos);
}

TEST(CommChoiceTest, TheFlagParsesItsFourNamesAndRefusesOthers) {
  for (CommKind k : {CommKind::kAuto, CommKind::kMpi, CommKind::kStaged, CommKind::kNccl}) {
    EXPECT_EQ(*ParseCommKind(CommKindName(k)), k);
  }
  EXPECT_EQ(*ParseCommKind("NCCL"), CommKind::kNccl);
  const auto bad = ParseCommKind("gloo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--comm=gloo: expected auto, mpi, staged or nccl");
}

}  // namespace
}  // namespace multiscreen

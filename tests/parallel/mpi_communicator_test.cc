// MpiCommunicator, ProcessGrid and DataParallel under mpirun (any number of
// ranks; registered with 3 and 4): every collective against values each rank
// can compute alone.
#include <gtest/gtest.h>

#include <mpi.h>

#include <numeric>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"

namespace multiscreen {
namespace {

std::unique_ptr<MpiCommunicator> World() { return MpiCommunicator::Duplicate(MPI_COMM_WORLD); }

// A value only (rank, index) determines.
float ValueOf(int rank, int64_t i) { return static_cast<float>(rank * 1000 + i % 997) * 0.5f; }

TEST(MpiCommunicatorTest, AllReduceSumsAndMaxesFloatsAndDoubles) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  std::vector<float> f(5);
  std::vector<double> d(5);
  for (int i = 0; i < 5; ++i) {
    f[i] = ValueOf(r, i);
    d[i] = -ValueOf(r, i) * 1e-3;
  }
  std::vector<float> fmax = f;
  c->AllReduce(f.data(), 5, ReduceOp::kSum);
  c->AllReduce(fmax.data(), 5, ReduceOp::kMax);
  c->AllReduce(d.data(), 5, ReduceOp::kSum);
  for (int i = 0; i < 5; ++i) {
    float sum = 0;
    double dsum = 0;
    for (int k = 0; k < n; ++k) {
      sum += ValueOf(k, i);
      dsum -= ValueOf(k, i) * 1e-3;
    }
    EXPECT_FLOAT_EQ(f[i], sum);
    EXPECT_FLOAT_EQ(fmax[i], ValueOf(n - 1, i));
    EXPECT_DOUBLE_EQ(d[i], dsum);
  }
}

TEST(MpiCommunicatorTest, ReduceScatterGivesEachRankTheSumOfItsBlockInPlaceOrNot) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  const int64_t count = 7;
  std::vector<float> send(n * count), recv(count);
  for (int64_t i = 0; i < n * count; ++i) send[i] = ValueOf(r, i);
  std::vector<float> in_place = send;
  c->ReduceScatter(send.data(), recv.data(), count, ReduceOp::kSum);
  c->ReduceScatter(in_place.data(), in_place.data() + r * count, count, ReduceOp::kSum);
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int k = 0; k < n; ++k) sum += ValueOf(k, r * count + i);
    EXPECT_FLOAT_EQ(recv[i], sum) << i;
    EXPECT_FLOAT_EQ(in_place[r * count + i], sum) << i;
  }
}

TEST(MpiCommunicatorTest, AllGatherPutsRankKsBlockAtK) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  const int64_t count = 4;
  std::vector<float> mine(count), all(n * count), in_place(n * count, -1.0f);
  for (int64_t i = 0; i < count; ++i) mine[i] = in_place[r * count + i] = ValueOf(r, i);
  c->AllGather(mine.data(), all.data(), count);
  c->AllGather(in_place.data() + r * count, in_place.data(), count);
  for (int k = 0; k < n; ++k) {
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(all[k * count + i], ValueOf(k, i));
      EXPECT_EQ(in_place[k * count + i], ValueOf(k, i));
    }
  }
}

TEST(MpiCommunicatorTest, BroadcastCopiesTheRootsBytes) {
  auto c = World();
  const int root = c->size() - 1;
  struct Id {
    char bytes[128];
  } id{};
  if (c->rank() == root) {
    for (int i = 0; i < 128; ++i) id.bytes[i] = static_cast<char>(i * 7 + 3);
  }
  c->Broadcast(&id, sizeof(id), root);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(id.bytes[i], static_cast<char>(i * 7 + 3));
  double x = c->rank() == root ? 2.5 : 0.0;
  c->Broadcast(&x, 1, root);
  EXPECT_EQ(x, 2.5);
}

TEST(MpiCommunicatorTest, SendRecvAroundTheRingDeliversInOrder) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Large enough to leave MPI's eager protocol: a naive Send-then-Recv ring would deadlock.
  const int64_t count = 1 << 18;
  std::vector<float> send(count), recv(count);
  for (int64_t i = 0; i < count; ++i) send[i] = ValueOf(r, i);
  c->SendRecv(send.data(), count, next, recv.data(), count, prev);
  for (int64_t i = 0; i < count; i += 4099) EXPECT_EQ(recv[i], ValueOf(prev, i));
  // Plain Send/Recv between pairs (even sends first), two messages in order.
  if (n >= 2 && r < n - n % 2) {
    const int peer = r ^ 1;
    float a[3] = {float(r), 1, 2}, b[1] = {float(r) + 10}, got_a[3], got_b[1];
    if (r % 2 == 0) {
      c->Send(a, 3, peer);
      c->Send(b, 1, peer);
      c->Recv(got_a, 3, peer);
      c->Recv(got_b, 1, peer);
    } else {
      c->Recv(got_a, 3, peer);
      c->Recv(got_b, 1, peer);
      c->Send(a, 3, peer);
      c->Send(b, 1, peer);
    }
    EXPECT_EQ(got_a[0], float(peer));
    EXPECT_EQ(got_b[0], float(peer) + 10);
  }
  c->Barrier();
}

// Every (tp, pp) that divides the world: coordinates, group sizes and members.
TEST(ProcessGridTest, EveryFactorizationGivesGroupsOfTheRightRanks) {
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; tp * pp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      auto grid = ProcessGrid::Create(tp, pp);
      ASSERT_TRUE(grid.ok()) << grid.status();
      ProcessGrid& g = **grid;
      const GridShape s = g.shape();
      EXPECT_EQ(s.dp, world / (tp * pp));
      EXPECT_EQ(GridRank(s, g.coord()), me);
      EXPECT_EQ(g.tp().rank(), g.coord().tp);
      EXPECT_EQ(g.pp().rank(), g.coord().pp);
      EXPECT_EQ(g.dp().rank(), g.coord().dp);
      EXPECT_EQ(g.tp().size(), tp);
      EXPECT_EQ(g.pp().size(), pp);
      EXPECT_EQ(g.dp().size(), s.dp);
      EXPECT_GE(g.local_rank(), 0);
      EXPECT_LT(g.local_rank(), g.local_size());
      // Summing world ranks over a group names its members.
      auto members_sum = [&](Communicator& c, auto coord_of_member) {
        double x = me;
        c.AllReduce(&x, 1, ReduceOp::kSum);
        double expected = 0;
        for (int k = 0; k < c.size(); ++k) expected += GridRank(s, coord_of_member(k));
        return std::make_pair(x, expected);
      };
      const GridCoord c0 = g.coord();
      auto [tp_sum, tp_expected] = members_sum(g.tp(), [&](int k) { return GridCoord{k, c0.pp, c0.dp}; });
      auto [pp_sum, pp_expected] = members_sum(g.pp(), [&](int k) { return GridCoord{c0.tp, k, c0.dp}; });
      auto [dp_sum, dp_expected] = members_sum(g.dp(), [&](int k) { return GridCoord{c0.tp, c0.pp, k}; });
      EXPECT_EQ(tp_sum, tp_expected) << "tp " << tp << " pp " << pp;
      EXPECT_EQ(pp_sum, pp_expected) << "tp " << tp << " pp " << pp;
      EXPECT_EQ(dp_sum, dp_expected) << "tp " << tp << " pp " << pp;
      const bool in_embed = pp > 1 && (g.first_stage() || g.last_stage());
      EXPECT_EQ(g.embed() != nullptr, in_embed);
      if (in_embed && g.embed() != nullptr) {
        auto [e_sum, e_expected] = members_sum(*g.embed(), [&](int k) {
          return GridCoord{c0.tp, k == 0 ? 0 : pp - 1, c0.dp};
        });
        EXPECT_EQ(g.embed()->size(), 2);
        EXPECT_EQ(g.embed()->rank(), g.first_stage() ? 0 : 1);
        EXPECT_EQ(e_sum, e_expected);
      }
    }
  }
}

TEST(ProcessGridTest, ALayoutThatDoesNotDivideTheJobIsRefusedNamingTheFlags) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto grid = ProcessGrid::Create(world + 1, 1);
  ASSERT_FALSE(grid.ok());
  EXPECT_NE(grid.status().message().find("does not divide the " + std::to_string(world) + " ranks"),
            std::string::npos)
      << grid.status();
  EXPECT_NE(grid.status().message().find("--tp=" + std::to_string(world + 1)), std::string::npos);
}

// ZeRO-1: reduce-scatter then all-gather of the shards equals the plain
// all-reduce, for sizes that do not divide dp and buckets smaller than a shard.
TEST(DataParallelTest, ZeroOneRoundTripEqualsThePlainAllReduce) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  for (int64_t size : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{4097}}) {
    for (int64_t bucket : {int64_t{3}, int64_t{64}, int64_t{1} << 22}) {
      std::vector<float> grads(size);
      for (int64_t i = 0; i < size; ++i) grads[i] = ValueOf(r, i) * (i % 3 == 0 ? -1.0f : 1.0f);
      std::vector<float> plain = grads, sharded = grads;
      DataParallel all_reduce(c.get(), size, DataParallelOptions{false, bucket});
      DataParallel zero(c.get(), size, DataParallelOptions{true, bucket});
      all_reduce.ReduceGradients(plain.data());
      zero.ReduceGradients(sharded.data());
      const auto [begin, end] = zero.OwnedRange();
      int64_t mismatches = 0;
      for (int64_t i = begin; i < end; ++i) mismatches += sharded[i] != plain[i];
      EXPECT_EQ(mismatches, 0) << "size " << size << " bucket " << bucket;
      // The optimizer would update its shard here; the all-gather brings everyone's.
      for (int64_t i = 0; i < size; ++i) {
        if (i < begin || i >= end) sharded[i] = -12345.0f;
      }
      zero.AllGatherParams(sharded.data());
      EXPECT_EQ(sharded, plain) << "size " << size << " bucket " << bucket;
      // The shards tile the buffer.
      int64_t covered = 0;
      for (int k = 0; k < n; ++k) covered += zero.ShardRange(k).second - zero.ShardRange(k).first;
      EXPECT_EQ(covered, size);
    }
  }
}

// A sum, not a mean: the step weighs each micro-batch by 1/(M·dp) before the backward
// (parallel/step.cc), so that fp16 overflows alike under every dp.
TEST(DataParallelTest, PlainAndZeroOneReductionsAreTheSumOverRanks) {
  auto c = World();
  const int n = c->size(), r = c->rank();
  const float sum = n * (n - 1) / 2.0f;  // Σ_r r
  for (bool zero1 : {false, true}) {
    std::vector<float> g = {float(r), 2.0f * r, 1.0f};
    DataParallel dp(c.get(), 3, DataParallelOptions{zero1, 2});
    dp.ReduceGradients(g.data());
    const std::vector<float> want = {sum, 2 * sum, float(n)};
    const auto [begin, end] = zero1 ? dp.OwnedRange() : std::pair<int64_t, int64_t>{0, 3};
    for (int64_t i = begin; i < end; ++i) EXPECT_EQ(g[i], want[i]) << "zero1 " << zero1 << " element " << i;
  }
}

}  // namespace
}  // namespace multiscreen

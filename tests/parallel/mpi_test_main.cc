// main() for GoogleTest executables run under mpirun: initializes MPI, lets
// rank 0 print the usual report and the other ranks only their failures (each
// line tagged with the rank), and makes every rank exit non-zero when any rank
// failed. Tests must make the same collective calls on every rank whatever
// their assertions find (use EXPECT_*, or ASSERT_* only after the last
// collective), or a failure on one rank would hang the others.
// Without an MPI launcher in the environment it runs as a plain single process.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "parallel/fatal.h"
#include "parallel/mpi_session.h"
#include "tests/parallel/mpi_test_env.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  multiscreen::testing::ParseTestFlags(argc, argv);
  if (!multiscreen::testing::LaunchedByMpi()) return RUN_ALL_TESTS();
  auto session = multiscreen::MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (rank == 0 && failed) std::fprintf(stderr, "some rank failed a test (see [rank N] lines)\n");
  session->reset();
  return failed;
}

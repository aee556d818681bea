// Helpers for tests run under mpirun: whether an MPI launcher started us, and
// the layout flags (--tp=, --pp=) a registered test passes on its command line, and
// --staged / --device=cuda (the step's groups staged through host memory, the step on
// the GPU: parallel/staged_communicator.h, issue 15).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace multiscreen::testing {

// True under mpirun/mpiexec (Open MPI, MPICH, Intel MPI) or srun with PMI/PMIx.
inline bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

struct TestFlags {
  int tp = 1, pp = 1;
  bool staged = false;  // ProcessGrid::UseStepDevice(device, CommKind::kStaged)
  bool nccl = false;    // ProcessGrid::UseStepDevice(device, CommKind::kNccl) (--comm=nccl)
  bool cuda = false;    // the step on the GPU (--device=cuda)
};

inline TestFlags& Flags() {
  static TestFlags flags;
  return flags;
}

// Reads --tp=N, --pp=N, --staged, --comm=nccl and --device=cuda (what InitGoogleTest left in argv).
inline void ParseTestFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tp=", 5) == 0) Flags().tp = std::atoi(argv[i] + 5);
    if (std::strncmp(argv[i], "--pp=", 5) == 0) Flags().pp = std::atoi(argv[i] + 5);
    if (std::strcmp(argv[i], "--staged") == 0) Flags().staged = true;
    if (std::strcmp(argv[i], "--comm=nccl") == 0) Flags().nccl = true;
    if (std::strcmp(argv[i], "--device=cuda") == 0) Flags().cuda = true;
  }
}

}  // namespace multiscreen::testing

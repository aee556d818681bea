// Helpers for tests run under mpirun: whether an MPI launcher started us, and
// the layout flags (--tp=, --pp=) a registered test passes on its command line.
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
};

inline TestFlags& Flags() {
  static TestFlags flags;
  return flags;
}

// Reads --tp=N and --pp=N (what InitGoogleTest left in argv).
inline void ParseTestFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tp=", 5) == 0) Flags().tp = std::atoi(argv[i] + 5);
    if (std::strncmp(argv[i], "--pp=", 5) == 0) Flags().pp = std::atoi(argv[i] + 5);
  }
}

}  // namespace multiscreen::testing

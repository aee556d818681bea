#include "parallel/mpi_session.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"

namespace multiscreen {

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::FailedPreconditionError("MpiSession::Init: MPI is already initialized");
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Init_thread failed with code ", rc));
  MS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  InstallFatalTerminateHandler();
  std::unique_ptr<MpiSession> session(new MpiSession());
  session->watchdog_ = PeerWatchdog::Start(MPI_COMM_WORLD);
  return session;
}

int MpiSession::world_size() const {
  int size = 0;
  MS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

void MpiSession::StartCollectiveWatchdog(CollectiveTimeout timeout) {
  collective_watchdog_ = CollectiveWatchdog::Start(MPI_COMM_WORLD, timeout);
  if (collective_watchdog_ != nullptr) progress::SetWatchdogLimit(timeout.seconds * timeout.long_factor);
}

MpiSession::~MpiSession() {
  collective_watchdog_.reset();
  progress::SetWatchdogLimit(0);
  watchdog_.reset();  // after MPI_Finalize's fence, peers may exit
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace multiscreen

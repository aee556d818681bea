#include "parallel/mpi_session.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"
#include "parallel/progress.h"
#include "parallel/start_up_exchange.h"

namespace multiscreen {

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv, CollectiveTimeout timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::FailedPreconditionError("MpiSession::Init: MPI is already initialized");
  progress::Self();  // the beacon, in its start-up phase from here
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Init_thread failed with code ", rc));
  MS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  InstallFatalTerminateHandler();
  std::unique_ptr<MpiSession> session(new MpiSession());
  StartUpExchange start = ExchangeAtStartUp(MPI_COMM_WORLD, timeout);
  int rank = 0;
  MS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  session->watchdog_ = PeerWatchdog::Start(rank, start.ids);
  session->collective_watchdog_ = CollectiveWatchdog::Start(start.comm, std::move(start.ids), timeout);
  session->SetCollectiveTimeout(timeout);
  return session;
}

int MpiSession::world_size() const {
  int size = 0;
  MS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

void MpiSession::SetCollectiveTimeout(CollectiveTimeout timeout) {
  if (collective_watchdog_ == nullptr) return;
  collective_watchdog_->SetTimeout(timeout);
  progress::SetWatchdogLimit(timeout.seconds * timeout.long_factor);
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

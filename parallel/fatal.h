// Bringing a multi-process job down on purpose: one rank that fails (an MPI or
// NCCL error, a timeout, a Status it cannot recover from) must end every rank
// promptly, with its rank and the reason on stderr, instead of leaving the
// others waiting in a collective forever. With MPI initialized this is
// MPI_Abort(MPI_COMM_WORLD); without it, the process alone exits.
#pragma once

#include <string>
#include <string_view>

#include <mpi.h>

#include "absl/status/status.h"

namespace multiscreen {

// Prints "multiscreen: fatal on rank R of N (host, <context>): <reason>" to
// stderr and aborts the whole job with exit code 1. Never returns.
[[noreturn]] void FatalError(std::string_view reason);

// FatalError(status.message()) when !status.ok(); for main() and for the
// training loop on errors that only some ranks see.
void AbortJobIfError(const absl::Status& status);

// Extra words for FatalError's message on this process, e.g. the grid
// coordinates "dp 1, pp 0, tp 1" (ProcessGrid sets them).
void SetFatalContext(std::string context);

// Makes std::terminate (an uncaught exception) go through FatalError.
void InstallFatalTerminateHandler();

// The failure path of MS_MPI_CHECK: names the call, MPI's error string, file:line.
[[noreturn]] void MpiCallFailed(const char* call, int code, const char* file, int line);

}  // namespace multiscreen

// Checks an MPI return code: anything but MPI_SUCCESS ends the job with the
// rank, the call and MPI's message (communicators use MPI_ERRORS_RETURN so that
// errors come back here rather than through MPI's own handler).
#define MS_MPI_CHECK(call)                                                                 \
  do {                                                                                     \
    const int ms_mpi_rc_ = (call);                                                         \
    if (ms_mpi_rc_ != MPI_SUCCESS) ::multiscreen::MpiCallFailed(#call, ms_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

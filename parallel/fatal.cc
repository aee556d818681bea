#include "parallel/fatal.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace multiscreen {
namespace {

std::mutex& ContextMutex() {
  static std::mutex m;
  return m;
}
std::string& Context() {
  static std::string context;
  return context;
}

bool MpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

void SetFatalContext(std::string context) {
  std::lock_guard<std::mutex> lock(ContextMutex());
  Context() = std::move(context);
}

[[noreturn]] void FatalError(std::string_view reason) {
  // One line per process: a second thread that fails meanwhile (the peer watchdog and a
  // communicator seeing the same dead rank) waits for the first to end the process.
  static std::atomic_flag entered = ATOMIC_FLAG_INIT;
  if (entered.test_and_set()) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::string where = "single process";
  if (MpiActive()) {
    int rank = -1, size = 0, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    where = absl::StrCat("rank ", rank, " of ", size, " (", host);
    {
      std::lock_guard<std::mutex> lock(ContextMutex());
      if (!Context().empty()) absl::StrAppend(&where, ", ", Context());
    }
    where += ")";
  }
  const std::string line = absl::StrCat("multiscreen: fatal on ", where, ": ", std::string(reason), "\n");
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  if (MpiActive()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void AbortJobIfError(const absl::Status& status) {
  if (!status.ok()) FatalError(status.ToString());
}

void InstallFatalTerminateHandler() {
  std::set_terminate([] {
    std::string what = "std::terminate";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        what = absl::StrCat("uncaught exception: ", ex.what());
      } catch (...) {
        what = "uncaught exception of unknown type";
      }
    }
    FatalError(what);
  });
}

[[noreturn]] void MpiCallFailed(const char* call, int code, const char* file, int line) {
  char message[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, message, &len) != MPI_SUCCESS) std::snprintf(message, sizeof(message), "code %d", code);
  FatalError(absl::StrCat(call, " failed: ", message, " (", file, ":", line, ")"));
}

}  // namespace multiscreen

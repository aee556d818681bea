// The device time of each kernel launch and cuBLAS(Lt) product, by name, for `bench train
// --op_times` (issue 42 part 4: the first GPU run says where the performance model is
// wrong). While recording is on, Launch (launch.h) and GemmRunner's library calls record a
// CUDA event on their stream before and after the call; Stop waits for the last one and
// sums cudaEventElapsedTime per name. Names are the ones the emulated device's work tally
// uses (kernel_name.h; GemmRunner spells a product as the emulated cuBLAS does), so
// tools/perf_model.py --measured attributes them to the model's ops with the same regular
// expressions as --counted. Off, a launch costs one relaxed atomic load.
//
// What an event pair measures: from the stream reaching the first event to it reaching the
// second — the call's own device time when the queue runs ahead of the host (as in a
// training step); a launch the device waits for (the host behind) adds its launch gap.
// Events on one stream do not serialize anything; the host is not made to wait until Stop.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace multiscreen::kernels::cuda {

namespace internal {
inline std::atomic<bool> kernel_times_on{false};
}  // namespace internal

// True between KernelTimesStart and KernelTimesStop.
inline bool KernelTimesOn() { return internal::kernel_times_on.load(std::memory_order_relaxed); }

// Starts recording (dropping anything recorded before). Calls are paired Begin/End in the
// order they come, so they must come from one host thread at a time (the step's).
inline void KernelTimesStart();

// Called around each recorded call when KernelTimesOn(): Begin before it, End after it
// with its reported name, on the call's stream.
inline void KernelTimesBegin(cudaStream_t stream);
inline void KernelTimesEnd(const std::string& name, cudaStream_t stream);

struct KernelTime {
  std::string name;
  int64_t calls = 0;
  double ms = 0;  // summed device time of its calls, milliseconds
};

// Stops recording, waits for the recorded events and returns the time per name (sorted by
// name). Errors: a CUDA error of an event (named).
inline absl::StatusOr<std::vector<KernelTime>> KernelTimesStop();

// ---- definitions (header-only: every file that launches a kernel includes launch.h) ----

namespace internal {

struct Recorded {
  std::string name;
  cudaEvent_t start = nullptr, end = nullptr;
};

struct State {
  std::mutex mu;
  std::vector<Recorded> calls;   // in the order they were recorded; the last may lack its end
  std::vector<cudaEvent_t> pool;  // events of earlier recordings, reused
};

inline State& Global() {
  static State* state = new State;  // never destroyed: a launch at exit may still look
  return *state;
}

inline cudaEvent_t Take(State& s) {
  if (!s.pool.empty()) {
    cudaEvent_t e = s.pool.back();
    s.pool.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
}

}  // namespace internal

inline void KernelTimesStart() {
  internal::State& s = internal::Global();
  std::lock_guard<std::mutex> lock(s.mu);
  for (internal::Recorded& r : s.calls) {
    if (r.start != nullptr) s.pool.push_back(r.start);
    if (r.end != nullptr) s.pool.push_back(r.end);
  }
  s.calls.clear();
  internal::kernel_times_on.store(true, std::memory_order_relaxed);
}

inline void KernelTimesBegin(cudaStream_t stream) {
  internal::State& s = internal::Global();
  std::lock_guard<std::mutex> lock(s.mu);
  internal::Recorded r;
  r.start = internal::Take(s);
  if (r.start != nullptr) cudaEventRecord(r.start, stream);
  s.calls.push_back(std::move(r));
}

inline void KernelTimesEnd(const std::string& name, cudaStream_t stream) {
  internal::State& s = internal::Global();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.calls.empty() || s.calls.back().end != nullptr) return;  // recording started between Begin and End
  internal::Recorded& r = s.calls.back();
  r.name = name;
  r.end = internal::Take(s);
  if (r.end != nullptr) cudaEventRecord(r.end, stream);
}

inline absl::StatusOr<std::vector<KernelTime>> KernelTimesStop() {
  internal::kernel_times_on.store(false, std::memory_order_relaxed);
  internal::State& s = internal::Global();
  std::lock_guard<std::mutex> lock(s.mu);
  std::map<std::string, KernelTime> by_name;
  for (const internal::Recorded& r : s.calls) {
    if (r.start == nullptr || r.end == nullptr) {
      return absl::InternalError(absl::StrCat("op times: no CUDA event for a call of ", r.name,
                                              " (cudaEventCreate failed)"));
    }
    if (cudaError_t e = cudaEventSynchronize(r.end); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("op times: cudaEventSynchronize after ", r.name, ": ",
                                              cudaGetErrorString(e)));
    }
    float ms = 0;
    if (cudaError_t e = cudaEventElapsedTime(&ms, r.start, r.end); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("op times: cudaEventElapsedTime of ", r.name, ": ",
                                              cudaGetErrorString(e)));
    }
    KernelTime& t = by_name[r.name];
    t.name = r.name;
    t.calls += 1;
    t.ms += ms;
  }
  std::vector<KernelTime> out;
  out.reserve(by_name.size());
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  return out;
}

}  // namespace multiscreen::kernels::cuda

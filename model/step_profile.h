// Wall time of a training step, split by phase, for `multiscreen bench train`, and the calling
// thread's CPU time in each phase (CLOCK_THREAD_CPUTIME_ID: on a shared machine, what its
// neighbours took from this thread left out; OpenMP workers' time is not in it).
// The model adds to a StepProfile when ModelOptions::profile points at one;
// with a null profile a PhaseTimer reads no clock, so the step costs the same.
// On a GPU the kernels run asynchronously: a profile whose `synchronize` is set (bench sets
// the step's kernel table's Synchronize) waits for the device at each phase's start and end,
// so that a phase's time is its kernels' and not their launches'. That serializes the step:
// the step total of a profiled GPU step is an upper bound of an unprofiled one.
#pragma once

#include <time.h>

#include <chrono>
#include <functional>

namespace multiscreen {

struct StepProfile {
  enum Phase {
    kEmbed,              // BeginStep (Ē, packed weights), Embed, EmbedBackward, EndStep
    kProjections,        // P = x·[W_Q|W_K|W_V|W_G] and its two backward GEMMs (Transformer: RMSNorm,
                         // x·[W_Q|W_K|W_V] and its backward GEMMs)
    kScreeningForward,   // the fused screening kernel, forward
    kScreeningBackward,  // its backward (relevance recomputed)
    kOutputGemm,         // Δ = U·W_O, its two backward GEMMs, the residual adds (Transformer: o·W_O)
    kHead,               // PLNorm, logits, cross-entropy and their backward (chunked)
    kOptimizer,          // AdamW (timed by the caller, which owns the optimizer)
    kAttention,          // Transformer: RoPE, QK norm, causal attention, forward and backward
    kFfn,                // Transformer: the SwiGLU block (RMSNorm, GEMMs, SwiGLU), forward and backward
    kPhases
  };
  static constexpr const char* kNames[kPhases] = {"embed",     "projections_gemm", "screening_forward",
                                                  "screening_backward", "w_o_gemm", "head_loss",
                                                  "optimizer", "attention",        "ffn"};

  double seconds[kPhases] = {};
  double thread_cpu_seconds[kPhases] = {};  // the calling thread's CPU time in each phase
  std::function<void()> synchronize;  // waits for the device's queued work; empty on the CPU
  void Clear() {
    for (double& s : seconds) s = 0;
    for (double& s : thread_cpu_seconds) s = 0;
  }
};

// Adds the time from construction to destruction to profile->seconds[phase] (each end
// after profile->synchronize(), when set); does nothing at all when profile is null.
class PhaseTimer {
 public:
  PhaseTimer(StepProfile* profile, StepProfile::Phase phase) : profile_(profile), phase_(phase) {
    if (profile_ == nullptr) return;
    if (profile_->synchronize) profile_->synchronize();
    start_ = std::chrono::steady_clock::now();
    cpu_start_ = ThreadCpu();
  }
  ~PhaseTimer() {
    if (profile_ != nullptr) {
      if (profile_->synchronize) profile_->synchronize();
      profile_->seconds[phase_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      profile_->thread_cpu_seconds[phase_] += ThreadCpu() - cpu_start_;
    }
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  StepProfile* profile_;
  StepProfile::Phase phase_;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;

  static double ThreadCpu() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
};

}  // namespace multiscreen

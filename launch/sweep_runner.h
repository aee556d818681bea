// Running a sweep's runs on this machine, and reading where each run stands (issue 17,
// `sweep run --local`, `sweep status`). Each run is an ordinary `multiscreen train
// --config=<dir>/run.textproto` child process; what makes a re-run skip finished runs
// and resume interrupted ones is the run directory protocol itself (status.json,
// checkpoints/latest). A run being trained holds an flock on <dir>/sweep.lock (the
// child inherits it), so two runners never train one run and `status` can tell a live
// run from one whose runner was killed.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "launch/divergence.h"
#include "launch/sweep.h"

namespace multiscreen {

enum class RunState {
  kDone,         // status.json "finished" at the run's last step
  kDiverged,     // not running, and its metrics say it diverged (divergence.h): finished or stopped, it is final
  kRunning,      // a process holds <dir>/sweep.lock
  kFailed,       // the last attempt ended without finishing: <dir>/sweep_failed.json says why
  kInterrupted,  // stopped or killed with a checkpoint: the next `sweep run` resumes it
  kPending,      // never started (or started and killed before its first checkpoint)
};

struct RunStatus {
  RunState state = RunState::kPending;
  int64_t step = 0;    // the last step in metrics.jsonl (0: none)
  std::string detail;  // failed: the reason; interrupted: the checkpoint's step
};

// "done", "diverged", "running", "failed", "interrupted" or "pending".
const char* RunStateName(RunState state);

// Where `run` stands, from its directory (reads files; never blocks on the lock). A run
// that is not running and whose metrics.jsonl shows divergence (JudgeDivergence with the
// run's warmup) is kDiverged, whatever else its directory says; detail: the reason.
RunStatus ReadRunStatus(const SweepRun& run);

struct LocalOptions {
  int jobs = 1;        // runs at once
  int threads = 1;     // OpenMP threads per run (the cores divided among the jobs)
  std::string binary;  // the multiscreen executable the runs are started with
};

// Trains every run of `sweep` that is neither done nor diverged, `jobs` at a time, each
// child with `threads` threads, its output appended to <dir>/train.log. Writes the run
// files first (WriteRunFiles). A child whose metrics show divergence (the trainer stops at
// a non-finite loss) is a finished outcome, not a failure; any other child that dies on
// its own (non-zero exit, a signal) marks its run failed (<dir>/sweep_failed.json with the
// reason); the others go on either way. One that exits with an error before training a step
// (metrics.jsonl did not grow: the trainer refused its run file, data or directory) is
// "refused at start", retryable false in sweep_failed.json: the same start meets the same
// refusal, and the runner says so instead of offering a retry;
// SIGINT/SIGTERM to the runner are passed to the children, which stop with a
// checkpoint, and no further run starts. The children die with the runner
// (PR_SET_PDEATHSIG), so a killed runner leaves no orphan holding a lock.
// Errors: a run file that cannot be written; after all runs, "K of N runs failed" (how many
// of them were refused at start, and a retry offered only for the others).
absl::Status RunLocal(const Sweep& sweep, const LocalOptions& options);

}  // namespace multiscreen

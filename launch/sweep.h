// A scaling-law sweep (issue 17): the grid of a SweepConfig file expanded into
// ordinary run directories, one complete RunConfig each. Knows nothing about how the
// runs are started (sweep_runner.h: locally; sweep_slurm.h: a Slurm job array) or
// fitted (tools/sweep_fit.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config.h"
#include "configs/config.pb.h"

namespace multiscreen {

// One token budget served by a run: the requested tokens rounded down to whole steps.
struct SweepBudget {
  int64_t steps = 0;   // optimizer steps at which the budget is reached
  int64_t tokens = 0;  // steps · tokens per step (what the run really trains on)
};

// One run directory of the sweep.
struct SweepRun {
  std::string name;           // from the coordinates, e.g. "psi4_lr0.0625_s1"
  std::string dir;            // <root>/<name>, absolute
  config::RunConfig run;      // complete: inline model, steps, eval/checkpoint cadence, run_dir
  ModelDims dims;
  std::string model;          // the model's name on the axis, e.g. "psi4"
  int64_t params = 0;         // total parameters (model/param_layout.h)
  int64_t non_embedding_params = 0;
  double flops_per_token = 0; // training FLOPs per token (trainer/flops.h, windows at init)
  std::vector<SweepBudget> budgets;  // ascending; the last is the run's length
};

struct Sweep {
  std::string file;           // the sweep file as given
  std::string root;           // absolute
  bool one_run_per_model = false;  // cheap budgets: several budgets from one run
  bool checkpoint_every_from_budgets = false;  // the base run sets no checkpoint cadence: the eval cadence
  int64_t step_tokens = 0;    // micro_batch · grad_accum · seq_len
  std::vector<SweepRun> runs;
};

// Reads, checks and expands a sweep file. Every relative path in it (`base`, `data`,
// `root`, `model_files`) is relative to the current directory, as `train`'s --config,
// --data and --run_dir and the paths inside run files are; `root` and `data` are made
// absolute here, so the run files and sweep.json hold absolute paths. The run file
// `base` is read, `base_config` merged over it. Every point is checked as `train`
// would check it (ValidateRun), so a bad grid is refused before any run starts.
// Errors (one line, naming the file and field): an empty model or token axis, a model
// that does not resolve or whose N_H / N_L the run's tp / pp does not divide, a budget
// smaller than one step or not a whole number of steps (the two nearest that are are
// named), two budgets of the same step count, a value repeated on the lr (to the %g of
// run names), seed or psi axis (named), ONE_RUN_PER_MODEL with a
// schedule whose lr depends on the run's length, no validation data (a `data` that does
// not exist is named with the absolute path looked for and the current directory; one
// that is a file has no val_*.bin), duplicate run names.
absl::StatusOr<Sweep> LoadSweep(const std::string& path);

// Opens the sweep's data as each run's trainer will (trainer/run_data.h) and its held-out
// windows with the trainer's own check (trainer/validation_data.h) at dp = 1 (each run is
// one process): `sweep plan` and `sweep run` call it, so that data every run's trainer
// would refuse at start (fewer held-out windows than eval.windows, none at all, a token id
// past the vocabulary of a model of the grid: the trainer's scan, run with the smallest V)
// is refused before any run starts, in one line naming the sweep file, the shards and the
// numbers (for a token id: the run, the file and token, the id and V).
// (LoadSweep does not open the data: `status`, `fit` and `report` read finished runs.)
absl::Status CheckSweepData(const Sweep& sweep);

// The run file of `run` in text format (what <dir>/run.textproto holds).
std::string RunConfigText(const SweepRun& run);

// Writes <dir>/run.textproto for every run (creating the directories), each through a
// temporary and a rename. A run.textproto already there with other contents is refused
// (the sweep file changed under finished or running work): errors name the file. One
// exception: with one run per model, a run file that differs only in what the token
// budgets set (steps, eval.every, and checkpoint.every where the base run gives none) is
// rewritten, so that dropping or adding a budget resumes the runs (a longer run continues
// from its checkpoint; a finished, longer one is done) — unless a new budget's step lies
// within the old run's length off its old validation cadence, where the run may already
// have passed it without a validation loss.
absl::Status WriteRunFiles(const Sweep& sweep);

// Refuses a root whose sweep.json names another sweep file (two sweeps sharing a root
// would rewrite each other's run files and manifest): FailedPrecondition naming both.
// A root without a readable sweep.json belongs to no sweep yet. WriteRunFiles and
// WriteManifest check it first.
absl::Status CheckRootOwner(const Sweep& sweep);

// `relative` (e.g. "tools/sweep_fit.py") inside the source tree this binary was built from.
std::string SourcePath(const std::string& relative);

// Writes <root>/sweep.json (through a temporary and a rename): the runs with their
// coordinates, parameter counts, FLOPs per token, budgets and the diverged verdict as
// the run directories stand when it is written, for tools/sweep_fit.py.
absl::Status WriteManifest(const Sweep& sweep);

}  // namespace multiscreen

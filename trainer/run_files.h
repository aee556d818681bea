// The names a training run keeps in its directory: what marks a directory as a run's
// (Trainer::Create says when a --run_dir holds files but none of these), and which files
// other commands must never write over (CheckOutputPath refuses them as outputs).
#pragma once

#include <string_view>

namespace multiscreen {

// The files of a run directory: the trainer's (run.json, metrics.jsonl, status.json,
// data.json, .lock) and what a sweep's runner writes there before the run starts
// (run.textproto, train.log: launch/sweep_runner.cc).
inline constexpr std::string_view kRunFiles[] = {"run.json", "metrics.jsonl", "status.json",  "data.json",
                                                 ".lock",    "run.textproto", "train.log"};

// The directories of a run directory: checkpoints/ and TensorBoard's tb/.
inline constexpr std::string_view kRunDirectories[] = {"checkpoints", "tb"};

}  // namespace multiscreen

// Every rank of a job trains the same run (issue 31 §1): at start-up the ranks compare
// what each resolved — the run file after its flags, the model, the layout, the device
// and each data source's token count and fingerprint — so that a node-local run file, a
// different flag on one rank (MPMD launch lines), or another file at the "same" path
// ends the job in one line instead of a hang at the first collective of unequal length
// or replicas that silently train different runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/config.h"
#include "configs/config.pb.h"
#include "kernels/communicator.h"

namespace multiscreen {

// (name, value) pairs a run's ranks must agree on: every leaf field of the RunConfig after
// its flags, named by its path in the run file ("optimizer.lr", "steps"; a repeated field
// as a whole), its value in text format ("(unset)" for an optional field not set). Not
// compared as spelled: `run_dir` is compared as it resolves (absolute, symlinks resolved:
// "runs/r" and its absolute path are one directory); `model` and `model_config` are
// compared as the model they resolve to (ModelAgreementFields: "tiny_psi4" and
// configs/models/tiny_psi4.textproto are one model, two node-local files that differ in
// `position:` are not); `logging` (rank 0 logs) and `data`, whose paths may differ between
// nodes holding the same files, are left to the caller, which compares the data as opened
// (tokens and fingerprints).
std::vector<std::pair<std::string, std::string>> RunConfigFields(const config::RunConfig& run);

// (name, value) pairs of every field of the resolved model (common/config.h ModelDims):
// its name, each of ModelFields (family, sizes and every switch: position, tanh_norm,
// pl_norm, output_gate, attention, ...) and eos_token, each named "the model's <field>".
std::vector<std::pair<std::string, std::string>> ModelAgreementFields(const ModelDims& dims);

// A collective over `world`: OK when every rank passed the same fields (names and
// values, compared by a 52-bit FNV-1a hash each); otherwise, on every rank, the same
// error naming the first field that differs and two ranks' values: "ranks disagree on
// steps: rank 0 has 10, rank 1 has 20 (...)".
absl::Status AgreeOnRun(Communicator& world, const std::vector<std::pair<std::string, std::string>>& fields);

// A collective over `world`: OK when no rank's `mine` failed; otherwise, on every rank,
// the lowest failing rank's error (code and message), so that every rank stops alike
// and one reports it. `name_rank`: prefixed "rank R of N: " when not every rank failed,
// for an error a rank met on its own (a flag, the run file, the data on one node: issue
// 31 §6), not for one that one rank decides for all.
absl::Status AgreeOnError(Communicator& world, const absl::Status& mine, bool name_rank);

}  // namespace multiscreen

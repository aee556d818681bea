// The C++ side of the planner (issue 45; tools/plan.py, tools/plan_fit.py over
// tools/plan_memory.py): the model's sizes as the planner reads them (`plan`), and
// `train`'s up-front check that its layout fits the device, with the plan's per-rank
// breakdown and the nearest layouts that fit. The memory model itself is the Python one,
// the same code `multiscreen plan` prints and plan_memory_emulated_test holds to the
// emulated device's allocations: no second estimate in C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config.h"
#include "nlohmann/json.hpp"

namespace multiscreen::cli {

// The model's sizes and switches as tools/plan.py's --dims reads them (and `plan --json`
// prints under "dims"): name, family, n_layers, n_heads, d_e, d_k, d_v, vocab, w_th,
// position, output_gate, attention, qk_norm, sio, pl_norm.
nlohmann::json PlanDims(const ModelDims& dims);

// --device_memory, as train and plan read it: bytes (K, M, G, T suffixes are powers of
// 1024: 80GiB), 0 when not given. Errors, one line naming the flag: not such a size
// (ParseByteSize), or below 1 byte.
absl::StatusOr<int64_t> DeviceMemoryFlag();

// One rank's layout of a training run, as `train` resolved it.
struct TrainLayout {
  int64_t tp = 1, pp = 1, dp = 1, zero = 0, micro_batch = 1, grad_accum = 1, seq_len = 1;
  std::string precision = "bf16";  // fp32 | bf16 | fp16
  int64_t gpus_per_node = 1;       // ranks on one node (tp lies within one)
};

// What CheckLayoutFits found. `status`: OK when the layout's modelled peak per rank is at
// most `device_bytes`, or when the planner could not be run (then `warning` says why);
// else ResourceExhausted, one line: "<device>: tp=1 pp=1 dp=2 zero=0 --micro_batch=64
// --grad_accum=1 --seq_len=2048 of tiny_psi4 (bf16) needs a modelled N bytes (x GiB) per
// rank, more than the device's M bytes (y GiB, <source>); nearest layouts that fit:
// --micro_batch=2 --grad_accum=32 (z GiB); ... (`multiscreen plan` ranks them ...)", or
// where no layout of these ranks and this batch fits, that and what to change. `breakdown`: the plan's
// lines, term by term (bytes and what each holds), for the log before that line.
struct FitVerdict {
  absl::Status status;
  std::vector<std::string> breakdown;
  std::string warning;
};

// Runs tools/plan_fit.py for `layout` of `dims` against `device_bytes` (named by
// `device`, "cuda:0 (NVIDIA H100 80GB HBM3)", and `source`, "--device_memory" or
// "cudaMemGetInfo's total"). Every figure is modelled (tools/plan_memory.py).
FitVerdict CheckLayoutFits(const ModelDims& dims, const TrainLayout& layout, int64_t device_bytes,
                           const std::string& device, const std::string& source);

}  // namespace multiscreen::cli

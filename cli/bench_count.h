// `bench train --count`: what one training step runs on the emulated device
// (cuda_emulator/emulator.h's work tally), per kernel name and per cuBLAS(Lt) product
// shape, with totals: launches, threads, global-memory bytes read and written (32-byte
// sectors, once per call), GEMM m·n·k, mma.sync / ldmatrix / cp.async, host
// synchronizations and bytes copied between host and device. Only the emulated build
// (MULTISCREEN_CUDA=EMULATED) can count; elsewhere CanCountDeviceWork() is false.
// docs/emulated_device.md ("Counting what the code does") says what is counted and how.
#pragma once

#include "nlohmann/json.hpp"

namespace multiscreen::cli {

// True in the emulated build.
bool CanCountDeviceWork();

// Turns the emulator's sector counting on and snapshots its tally (call before the step).
void BeginDeviceCount();

// The work since BeginDeviceCount, and turns counting off: {"granularity_bytes": 32,
// "ops": [{"name", "kind" (kernel | library | copy | memset | sync), "calls", "threads",
// "bytes_read", "bytes_written", "gemm_mnk", "gemm_flops" (2·m·n·k), "mma", "mma_flops"
// (4096 per m16n8k16), "ldmatrix", "cp_async", "syncs", "bytes_to_host",
// "bytes_to_device"}, ...] in kind then name order, "totals": the same fields summed}.
// Outside the emulated build: an empty object.
nlohmann::json EndDeviceCount();

// Prints `counted` (EndDeviceCount's) as a text table, one row per op and a totals row.
void PrintDeviceCount(const nlohmann::json& counted);

}  // namespace multiscreen::cli

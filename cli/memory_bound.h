// The --memory bound of the streamed checkpoint tools (issue 20: `init`, `forward --no_grad`,
// `ckpt init`, `ckpt reshard`, `ckpt export`), their disk check, and the
// peak-memory line they end with.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, memory);

namespace multiscreen::cli {

// --memory in bytes: a number with an optional binary suffix (K, M, G, T, with
// or without "iB"; "1G" = 2^30), at least 64 MiB. Errors name the flag. Also records
// the process's resident memory at that moment (its code and libraries), over which
// the bound counts: call it before the command's work.
absl::StatusOr<int64_t> MemoryBoundBytes();

// The block (bytes of one buffer) a streamed writer uses under `bound`: a
// sixteenth of it (two buffers, HDF5's caches and the program itself fit
// well inside), between 1 MiB and 16 MiB: the loaders read datasets 16 MiB at
// a time, and an HDF5 chunk larger than that is read whole for each part (the
// Ψ = 64 run with 64 MiB chunks read W_E about four times over while verifying).
int64_t BlockBytes(int64_t bound);

// Refuses, up front, to write `needed` bytes where the file system holding
// `dir` (or its nearest existing parent) has less free: "<dir>: needs N bytes
// (x GiB), only M (y GiB) are free"; where no file can be created there (/proc, /sys, a
// read-only directory), that is the error: "<dir>: /proc is not a writable directory (...)".
absl::Status CheckFreeDisk(const std::string& dir, int64_t needed);

// Logs "<command>: peak resident memory X MiB (VmHWM), bound Y MiB, over the Z MiB the
// program held at start-up" (X = VmHWM − Z), as a warning when X went past the bound
// (the output is complete either way).
void ReportPeakMemory(const char* command, int64_t bound);

}  // namespace multiscreen::cli

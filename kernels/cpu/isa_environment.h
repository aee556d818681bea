// MULTISCREEN_ISA checked before the kernels' first use reads it (kernels/cpu/isa.h's
// ActiveIsa), so that a bad value is a command's user error (issue 43). Apart from
// isa.h, which every kernel includes, so that this check's arrival rebuilt none of them.
#pragma once

#include "absl/status/status.h"

namespace multiscreen::kernels::cpu {

// MULTISCREEN_ISA as ActiveIsa's first use will read it, without ending the process: OK
// when unset, empty or a path this CPU runs; else "MULTISCREEN_ISA=<value, escaped>: <why>"
// (ActiveIsa itself ends the process on it, with exit 2, for a program that did not
// check). Commands check it first (cli ApplyIsaFlag): one line, exit 1, said once by
// rank 0 under a launcher. Defined in isa.cc.
absl::Status CheckIsaEnvironment();

}  // namespace multiscreen::kernels::cpu

// Peak resident memory of this process, for commands that report it (bench,
// the streamed checkpoint tools of issue 20).
#pragma once

#include <cstdint>

namespace multiscreen {

// Bytes: VmHWM of /proc/self/status (getrusage's ru_maxrss would carry over the
// peak of a parent that forked and exec'ed us), else ru_maxrss.
int64_t PeakResidentBytes();

}  // namespace multiscreen

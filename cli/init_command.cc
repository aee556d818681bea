// `multiscreen init --model=NAME --seed=S --out=FILE.h5 [--memory=1G]`: writes the
// initialized model (spec "Parameters and initialization") as a consolidated weights
// file, streamed (issue 20): each block of each tensor generated on every core,
// written and reused, so that memory is bounded by --memory, not by the model.
// SIGINT / SIGTERM (trainer/stop_signal.h, as in prepare) stop it between blocks, the
// partial FILE.h5.tmp removed and an existing FILE.h5 left as it was (exit 1).
#include <algorithm>
#include <thread>

#include "absl/flags/flag.h"
#include "checkpoint/streamed_write.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/memory_bound.h"
#include "common/log.h"
#include "model/param_layout.h"
#include "trainer/stop_signal.h"

namespace multiscreen::cli {

int InitCommand(int argc, char** argv) {
  if (auto s = ParseFlags(argc, argv, "multiscreen init --model=psi8 --seed=S --out=FILE.h5 [--memory=1G]",
                          {"model", "seed", "out", "memory"});
      !s.ok()) {
    return Fail("init", s);
  }
  // One process: under `mpirun -n 2` every rank wrote the same --out.
  if (int rc = RefuseSeveralProcesses("init"); rc != 0) return rc;
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("init", absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputFile("out", out, {}); !s.ok()) return Fail("init", s);
  auto bound = MemoryBoundBytes();
  if (!bound.ok()) return Fail("init", bound.status());
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("init", dims.status());
  const int64_t params = CountParams(*dims).total;
  if (auto s = CheckFreeDisk(out, 4 * params); !s.ok()) return Fail("init", s);
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  InstallStopHandlers();  // before the temporary exists; until then a signal ends init the default way
  if (auto s = WriteWeightsStreamed(out, *dims, InitSource(*dims, uint64_t(absl::GetFlag(FLAGS_seed)), threads),
                                    BlockBytes(*bound), [] { return StopRequested(); });
      !s.ok()) {
    return Fail("init", s);
  }
  LogInfo("wrote ", out, ": ", dims->name, ", ", params, " parameters");
  ReportPeakMemory("init", *bound);
  return 0;
}

}  // namespace multiscreen::cli

// `multiscreen init --model=NAME --seed=S --out=FILE.h5`: writes the initialized
// model (spec "Parameters and initialization") as a consolidated weights file.
#include <vector>

#include "absl/flags/flag.h"
#include "checkpoint/weights_file.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/log.h"
#include "model/init.h"

namespace multiscreen::cli {

int InitCommand(int argc, char** argv) {
  if (auto s = ParseFlags(argc, argv, "multiscreen init --model=psi8 --seed=S --out=FILE.h5", {"model", "seed", "out"}); !s.ok()) {
    return Fail("init", s);
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("init", absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputPath("out", out, {}); !s.ok()) return Fail("init", s);
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("init", dims.status());
  const ParamLayout layout(*dims, ShardSpec::Full(*dims));
  std::vector<float> params(layout.size());
  InitParams(layout, static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)), params.data());
  if (auto s = WriteWeightsFile(out, layout, params.data()); !s.ok()) return Fail("init", s);
  LogInfo("wrote ", out, ": ", dims->name, ", ", layout.size(), " parameters");
  return 0;
}

}  // namespace multiscreen::cli

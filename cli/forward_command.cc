// `multiscreen forward --weights=FILE.h5 --tokens=FILE.bin --micro_batch=B
// --seq_len=T --out=OUT.h5 [--precision=fp32|bf16|fp64 --device=cpu|cuda|auto]`: the parity hook for
// reference implementations. Reads the first B·(T+1) tokens (sequence b is
// tokens [b(T+1), (b+1)(T+1))) and writes `loss` (scalar), `token_losses`
// [B, T] and `grad/<name>` (gradient of the mean loss) for every parameter.
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/weights_file.h"
#include "cli/weights_source.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "data/token_file.h"
#include "kernels/host_staging.h"
#include "model/model_stage.h"

ABSL_FLAG(std::string, weights, "", "consolidated weights file (.h5) from init or ckpt export");
ABSL_FLAG(std::string, checkpoint, "", "a checkpoint directory or a run directory (its latest checkpoint)");
ABSL_FLAG(std::string, tokens, "", "llm.c token file (.bin)");

namespace multiscreen::cli {
namespace {

template <typename Real>
absl::Status Run(const Weights& w, const std::vector<int32_t>& tokens, int64_t B, int64_t T, Precision precision,
                 Device device, const std::string& out_path) {
  ModelOptions options;
  options.precision = precision;
  options.device = device;
  auto staging = HostStaging<Real>::Create(device);
  if (!staging.ok()) return staging.status();
  const std::unique_ptr<ModelStage<Real>> stage = MakeModelStage<Real>(w.dims, ShardSpec::Full(w.dims), options);
  ModelStage<Real>& model = *stage;
  const ParamLayout& layout = model.layout();
  std::vector<Real> params(w.params.begin(), w.params.end()), grads(layout.size(), Real(0)), token_losses(B * T);
  const double loss = model.ForwardBackward(staging->In(params.data(), layout.size()), tokens.data(), B, T,
                                            staging->GradientsFor(grads.data(), layout.size()), token_losses.data());
  staging->AddOut(grads.data());
  auto out = H5Writer::Create(out_path);
  if (!out.ok()) return out.status();
  H5Writer& h5 = **out;
  if (auto s = h5.Write("loss", {}, &loss); !s.ok()) return s;
  if (auto s = h5.Write("token_losses", {B, T}, token_losses.data()); !s.ok()) return s;
  for (const ParamEntry& e : layout.entries()) {
    if (auto s = h5.Write("grad/" + e.name, e.global_shape, grads.data() + e.buffer_offset); !s.ok()) return s;
  }
  return h5.Commit();
}

}  // namespace

int ForwardCommand(int argc, char** argv) {
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen forward (--weights=FILE.h5 | --checkpoint=DIR) --tokens=FILE.bin --micro_batch=B --seq_len=T "
                          "--out=OUT.h5 [--precision=fp32|bf16|fp64 --device=cpu|cuda|auto]",
                          {"weights", "checkpoint", "tokens", "micro_batch", "seq_len", "precision", "out", "device"});
      !s.ok()) {
    return Fail("forward", s);
  }
  const std::string weights_path = absl::GetFlag(FLAGS_weights), tokens_path = absl::GetFlag(FLAGS_tokens);
  const std::string out = absl::GetFlag(FLAGS_out), precision = absl::AsciiStrToLower(absl::GetFlag(FLAGS_precision));
  const int64_t B = absl::GetFlag(FLAGS_micro_batch), T = absl::GetFlag(FLAGS_seq_len);
  if (tokens_path.empty()) return Fail("forward", absl::InvalidArgumentError("--tokens: a token .bin file is required"));
  if (out.empty()) return Fail("forward", absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputPath("out", out, {weights_path, tokens_path}); !s.ok()) return Fail("forward", s);
  if (B <= 0) return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--micro_batch=", B, " must be positive")));
  if (T <= 0) return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--seq_len=", T, " must be positive")));
  if (precision != "fp32" && precision != "bf16" && precision != "fp64") {
    return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--precision=", precision, ": expected fp32, bf16 or fp64")));
  }
  auto device = ResolveDevice(precision == "fp64", true);
  if (!device.ok()) return Fail("forward", device.status());
  auto weights = LoadWeights(weights_path, absl::GetFlag(FLAGS_checkpoint));
  if (!weights.ok()) return Fail("forward", weights.status());
  // B·(T + 1) tokens index int32 arrays; the file's header bounds them further.
  if (double(B) * (double(T) + 1) > double(INT32_MAX)) {
    return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--micro_batch=", B, " --seq_len=", T, ": ",
                                                                   "more than 2^31 - 1 tokens")));
  }
  // Every id read is checked against the model's vocabulary (a version-2 id past
  // 2^31 - 1 would be negative as int32).
  auto tokens = ReadTokenFile(tokens_path, B * (T + 1), weights->dims.vocab);
  if (!tokens.ok()) return Fail("forward", tokens.status());
  const absl::Status s = precision == "fp64"
                             ? Run<double>(*weights, *tokens, B, T, Precision::kFp32, *device, out)
                             : Run<float>(*weights, *tokens, B, T,
                                          precision == "bf16" ? Precision::kBf16 : Precision::kFp32, *device, out);
  if (!s.ok()) return Fail("forward", s);
  return 0;
}

}  // namespace multiscreen::cli

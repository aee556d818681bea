#include "cli/planner.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/flags.h"
#include "cli/python_tool.h"
#include "kernels/attention_kind.h"
#include "kernels/screening_types.h"

ABSL_FLAG(std::string, device_memory, "",
          "bytes of each GPU (K, M, G, T suffixes are powers of 1024: 80GiB): train --device=cuda checks its layout "
          "against it up front (empty: the device's own total, cudaMemGetInfo); plan takes it in place of --gpu's "
          "memory");

namespace multiscreen::cli {
namespace {

std::string Gib(int64_t bytes) { return absl::StrFormat("%.2f GiB", double(bytes) / double(int64_t{1} << 30)); }

// The flags that take `layout` to `other` (dp follows from tp and pp): "--tp=2 --grad_accum=4".
std::string FlagsTo(const TrainLayout& layout, const nlohmann::ordered_json& other) {
  std::vector<std::string> flags;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"tp", layout.tp},
                                    {"pp", layout.pp},
                                    {"zero", layout.zero},
                                    {"micro_batch", layout.micro_batch},
                                    {"grad_accum", layout.grad_accum}}) {
    if (other.at(name).get<int64_t>() != value) flags.push_back(absl::StrCat("--", name, "=", other.at(name).get<int64_t>()));
  }
  return absl::StrJoin(flags, " ");
}

}  // namespace

absl::StatusOr<int64_t> DeviceMemoryFlag() {
  const std::string text = absl::GetFlag(FLAGS_device_memory);
  if (text.empty()) return 0;
  absl::StatusOr<int64_t> bytes = ParseByteSize("device_memory", text);
  if (bytes.ok() && *bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--device_memory=", text, " must be at least 1 byte"));
  }
  return bytes;
}

nlohmann::json PlanDims(const ModelDims& dims) {
  return {{"name", dims.name},
          {"family", dims.transformer() ? "TRANSFORMER" : "MULTISCREEN"},
          {"n_layers", dims.n_layers},
          {"n_heads", dims.n_heads},
          {"d_e", dims.d_e},
          {"d_k", dims.d_k},
          {"d_v", dims.d_v},
          {"vocab", dims.vocab},
          {"w_th", dims.w_th},
          {"position", kernels::PositionKindName(dims.position)},
          {"output_gate", dims.output_gate},
          {"attention", AttentionKindName(dims.attention)},
          {"qk_norm", dims.qk_norm},
          {"sio", dims.sio},
          {"pl_norm", dims.pl_norm}};
}

FitVerdict CheckLayoutFits(const ModelDims& dims, const TrainLayout& layout, int64_t device_bytes,
                           const std::string& device, const std::string& source) {
  FitVerdict verdict;
  const std::string unchecked = "the layout's device memory was not checked up front: ";
  auto script = PythonToolPath("plan_fit.py", "the planner's fit check");
  if (!script.ok()) {
    verdict.warning = absl::StrCat(unchecked, script.status().message());
    return verdict;
  }
  std::string out;
  auto status = RunPythonTool(*script,
                              {"--dims=" + PlanDims(dims).dump(), absl::StrCat("--tp=", layout.tp),
                               absl::StrCat("--pp=", layout.pp), absl::StrCat("--dp=", layout.dp),
                               absl::StrCat("--zero=", layout.zero), absl::StrCat("--micro_batch=", layout.micro_batch),
                               absl::StrCat("--grad_accum=", layout.grad_accum), absl::StrCat("--seq_len=", layout.seq_len),
                               "--precision=" + layout.precision, absl::StrCat("--device_memory=", device_bytes),
                               absl::StrCat("--gpus_per_node=", layout.gpus_per_node)},
                              &out);
  if (!status.ok() || *status != 0) {
    verdict.warning = absl::StrCat(unchecked, status.ok() ? absl::StrCat(*script, " exited ", *status)
                                                          : std::string(status.status().message()));
    return verdict;
  }
  // ordered: the breakdown in the plan's order of terms
  const nlohmann::ordered_json fit = nlohmann::ordered_json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!fit.is_object() || !fit.contains("fits") || !fit.contains("nearest")) {
    verdict.warning = absl::StrCat(unchecked, *script, " printed no verdict");
    return verdict;
  }
  const int64_t need = fit.at("peak_bytes_per_rank").get<int64_t>();
  const int64_t slots = fit.at("slots").get<int64_t>();
  verdict.breakdown.push_back(absl::StrCat("modelled device memory per rank of pipeline stage ", fit.at("stage").get<int64_t>(),
                                           " (", slots, " micro-batch", slots == 1 ? "" : "es", " in flight; "
                                           "tools/plan_memory.py):"));
  for (const auto& [term, bytes] : fit.at("breakdown").items()) {
    verdict.breakdown.push_back(absl::StrFormat("  %-17s %10.2f MiB  %s", term, bytes.get<double>() / double(1 << 20),
                                                fit.at("terms").value(term, std::string())));
  }
  verdict.breakdown.push_back(absl::StrFormat("  %-17s %10.2f MiB  of %.2f MiB (%s)", "total", double(need) / double(1 << 20),
                                              double(device_bytes) / double(1 << 20), source));
  if (fit.at("fits").get<bool>()) return verdict;
  std::vector<std::string> nearest;
  for (const nlohmann::ordered_json& other : fit.at("nearest")) {
    nearest.push_back(absl::StrCat(FlagsTo(layout, other), " (", Gib(other.at("peak_bytes_per_rank").get<int64_t>()), ")"));
  }
  const std::string advice =
      nearest.empty() ? absl::StrCat("no layout of ", layout.tp * layout.pp * layout.dp,
                                     layout.tp * layout.pp * layout.dp == 1 ? " rank" : " ranks",
                                     " and this batch fits: lower --seq_len, or run on more GPUs (`multiscreen plan` "
                                     "ranks the layouts of a job)")
                      : absl::StrCat("nearest layouts that fit: ", absl::StrJoin(nearest, "; "),
                                     " (`multiscreen plan` ranks them by modelled step time)");
  verdict.status = absl::ResourceExhaustedError(absl::StrCat(
      device, ": tp=", layout.tp, " pp=", layout.pp, " dp=", layout.dp, " zero=", layout.zero, " --micro_batch=",
      layout.micro_batch, " --grad_accum=", layout.grad_accum, " --seq_len=", layout.seq_len, " of ", dims.name, " (",
      layout.precision, ") needs a modelled ", need, " bytes (", Gib(need), ") per rank, more than the device's ",
      device_bytes, " bytes (", Gib(device_bytes), ", ", source, "); ", advice));
  return verdict;
}

}  // namespace multiscreen::cli

#include "cli/device.h"

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/kernel_table.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

ABSL_FLAG(std::string, device, "auto",
          "cpu | cuda | auto: where the step computes (auto: cuda when this build has it and a GPU is visible); eval: "
          "cpu | cuda (cpu when not given)");

ABSL_FLAG(double, peak_tflops, 0,
          "train, bench train: the peak rate MFU is taken against, TFLOP/s per process (a datasheet's dense peak, "
          "e.g. 989 for an H100 SXM in bf16); 0: measured at start (a CPU's SGEMM rate, a GPU's GEMM rate in the "
          "step's precision)");

namespace multiscreen::cli {

absl::StatusOr<double> PeakTflops() {
  const double v = absl::GetFlag(FLAGS_peak_tflops);
  // Below 1 GFLOP/s no machine this trains on: such a value is a unit mistake, and near
  // the smallest doubles MFU overflows to inf (metrics.jsonl's null).
  if (v != 0 && !(v >= 1e-3 && v <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peak_tflops=", v, ": must be 0 (measured) or a rate in [0.001, 1e6] TFLOP/s per process"));
  }
  return v;
}

absl::StatusOr<std::string> BindDevice(int local_rank) {
#ifdef MULTISCREEN_HAVE_CUDA
  int count = 0;
  if (CudaAvailable() && cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    const int device = local_rank % count;
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaSetDevice(", device, ") for local rank ", local_rank, ": ",
                                              cudaGetErrorString(e)));
    }
    cudaDeviceProp prop{};
    const bool named = cudaGetDeviceProperties(&prop, device) == cudaSuccess;
    return absl::StrCat("cuda:", device, named ? absl::StrCat(" (", prop.name, ")") : "");
  }
#endif
  (void)local_rank;
  return std::string("cpu");
}

absl::StatusOr<Device> ResolveDevice(bool fp64) {
  const std::string name = absl::AsciiStrToLower(absl::GetFlag(FLAGS_device));
  if (name == "cpu") return Device::kCpu;
  if (name != "cuda" && name != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("--device=", name, ": expected cpu, cuda or auto"));
  }
  absl::Status why = absl::OkStatus();
  if (fp64) {
    why = absl::InvalidArgumentError("the GPU path computes in fp32 with bf16/fp16 operands; fp64 runs on the CPU");
  } else {
    why = MakeKernelTable<float>(Device::kCuda).status();
  }
  if (why.ok()) return Device::kCuda;
  if (name == "auto") return Device::kCpu;
  return absl::Status(why.code(), absl::StrCat("--device=cuda: ", why.message()));
}

}  // namespace multiscreen::cli

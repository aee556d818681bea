// The start-up checks of the CUDA factories (device_check.h).
#include "kernels/cuda/device_check.h"

#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace multiscreen::kernels::cuda {
namespace {

// "major.minor" of a CUDA version number (1000·major + 10·minor).
std::string VersionName(int version) { return absl::StrCat(version / 1000, ".", (version % 1000) / 10); }

}  // namespace

absl::Status CheckCudaDevice() {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    return absl::FailedPreconditionError("no CUDA device is visible: no CUDA driver is loaded");
  }
  if (const cudaError_t e = cudaRuntimeGetVersion(&runtime); e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read the CUDA runtime version: ", cudaGetErrorString(e)));
  }
  if (driver < runtime) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver is too old: it supports CUDA ", VersionName(driver), ", this build's runtime is CUDA ",
        VersionName(runtime), " (", cudaGetErrorString(cudaErrorInsufficientDriver), ")"));
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device is visible (cudaGetDeviceCount: ", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", ")"));
  }
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("cannot use the current CUDA device: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen::kernels::cuda

// cuBLAS(Lt) loaded on first use (kernels/cuda/cublas_library.h): every entry point the GEMM
// runner calls resolves, the table is loaded once, and host-side calls through it work
// without a device (so this runs, not skips, where no GPU is visible: the nvcc build
// dlopens the toolkit's libraries, the emulated build holds the emulator's functions).
// The programs that do not make a GEMM runner never load cuBLAS: cublas_not_linked_test
// (tests/CMakeLists.txt) reads the binaries' needed libraries.
#include "kernels/cuda/cublas_library.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace multiscreen::kernels::cuda {
namespace {

TEST(CublasLibraryTest, EveryEntryPointResolvesOnceAndWorksWithoutADevice) {
  const absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  ASSERT_TRUE(library.ok()) << library.status();
#define MS_EXPECT_RESOLVED(symbol) EXPECT_NE((*library)->symbol, nullptr) << #symbol;
  MS_CUBLASLT_ENTRY_POINTS(MS_EXPECT_RESOLVED)
  MS_CUBLAS_ENTRY_POINTS(MS_EXPECT_RESOLVED)
#undef MS_EXPECT_RESOLVED
  const absl::StatusOr<const CublasLibrary*> again = LoadCublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *library);
  EXPECT_EQ(&Cublas(), *library);

  const CublasLibrary& cublas = Cublas();
  const std::string success = cublas.cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  const std::string unsupported = cublas.cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_FALSE(success.empty());
  EXPECT_NE(success, unsupported);
  // A matrix layout is a host-side object: made and destroyed through the table.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublas.cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(layout, nullptr);
  EXPECT_EQ(cublas.cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
}  // namespace multiscreen::kernels::cuda

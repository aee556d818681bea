// cuBLAS and cuBLASLt, loaded when the first GEMM runner (gemm.h) is made instead of when
// a program starts. Loading libcublasLt runs ~0.4 s of its static initialisers (perf:
// 41 % of `multiscreen --version`'s 0.55 s in libcublasLt, the rest mostly its page
// faults); linked, every process paid it: each CPU-only command and each of the test
// suite's ~500 test processes. Only programs that build a CUDA kernel table now do.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace multiscreen::kernels::cuda {

// X(symbol): each cuBLAS(Lt) entry point the GEMM runner calls, by its exported name (the
// cublas_v2.h macros map cublasCreate to cublasCreate_v2, cublasSgemm_64 to cublasSgemm_v2_64).
#define MS_CUBLASLT_ENTRY_POINTS(X)                                                                \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)          \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                              \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)
#define MS_CUBLAS_ENTRY_POINTS(X)                                                                  \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasGetStatusString) X(cublasSetMathMode)            \
  X(cublasSetStream_v2) X(cublasSgemm_v2_64)

// The entry points as function pointers of exactly the headers' types, each field named
// as its symbol: `library.cublasLtMatmul(...)`, `library.cublasCreate(&h)` (macro above).
struct CublasLibrary {
#define MS_CUBLAS_FIELD(symbol) decltype(&::symbol) symbol = nullptr;
  MS_CUBLASLT_ENTRY_POINTS(MS_CUBLAS_FIELD)
  MS_CUBLAS_ENTRY_POINTS(MS_CUBLAS_FIELD)
#undef MS_CUBLAS_FIELD
};

// The entry points, loaded on the first call (thread-safe; later calls return the same
// table or the same error). The nvcc build dlopens libcublasLt.so.N and libcublas.so.N
// (N: the toolkit's major version at build time) by name (LD_LIBRARY_PATH, the program's
// run path), then from the toolkit's library directory; the emulated build's table holds
// the emulator's functions (cuda_emulator/cublas.cc) and loads nothing.
// Errors: FailedPrecondition naming the library or symbol and dlopen's/dlsym's message.
absl::StatusOr<const CublasLibrary*> LoadCublas();

// The table, for call sites that run after a GemmRunner exists (whose creation required
// LoadCublas() to succeed). Loads it if needed; exits with LoadCublas()'s error on one
// line if it cannot be loaded.
const CublasLibrary& Cublas();

}  // namespace multiscreen::kernels::cuda

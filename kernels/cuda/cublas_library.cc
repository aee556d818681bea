// Loading cuBLAS(Lt) on first use (cublas_library.h).
#include "kernels/cuda/cublas_library.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifndef MULTISCREEN_CUDA_EMULATED
#include <dlfcn.h>
#endif

namespace multiscreen::kernels::cuda {
namespace {

#ifdef MULTISCREEN_CUDA_EMULATED

absl::StatusOr<CublasLibrary> Open() {
  CublasLibrary library;
#define MS_CUBLAS_LINKED(symbol) library.symbol = &::symbol;
  MS_CUBLASLT_ENTRY_POINTS(MS_CUBLAS_LINKED)
  MS_CUBLAS_ENTRY_POINTS(MS_CUBLAS_LINKED)
#undef MS_CUBLAS_LINKED
  return library;
}

#else

// dlopen's handle of `soname`: by name first, then from `directory`. Never closed (the
// library lives as long as the process, as a linked one would).
absl::StatusOr<void*> OpenShared(const char* soname, const char* directory) {
  if (void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string by_name = dlerror();
  const std::string path = absl::StrCat(directory, "/", soname);
  if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  return absl::FailedPreconditionError(absl::StrCat("cannot load ", soname, " (the CUDA toolkit's cuBLAS, needed by ",
                                                    "--device=cuda): ", by_name, "; ", dlerror()));
}

template <typename F>
absl::Status Resolve(void* handle, const char* soname, const char* symbol, F& f) {
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat(soname, " has no ", symbol, ": ", error != nullptr ? error : "null address"));
  }
  f = reinterpret_cast<F>(address);
  return absl::OkStatus();
}

absl::StatusOr<CublasLibrary> Open() {
  CublasLibrary library;
  // Lt first: libcublas needs it.
  absl::StatusOr<void*> lt = OpenShared(MS_CUBLASLT_SONAME, MS_CUDA_LIBRARY_DIR);
  if (!lt.ok()) return lt.status();
  absl::StatusOr<void*> blas = OpenShared(MS_CUBLAS_SONAME, MS_CUDA_LIBRARY_DIR);
  if (!blas.ok()) return blas.status();
  absl::Status status;
#define MS_CUBLAS_RESOLVE(handle, soname, symbol) \
  if (status.ok()) status = Resolve(handle, soname, #symbol, library.symbol);
#define MS_CUBLASLT_DLSYM(symbol) MS_CUBLAS_RESOLVE(*lt, MS_CUBLASLT_SONAME, symbol)
#define MS_CUBLAS_DLSYM(symbol) MS_CUBLAS_RESOLVE(*blas, MS_CUBLAS_SONAME, symbol)
  MS_CUBLASLT_ENTRY_POINTS(MS_CUBLASLT_DLSYM)
  MS_CUBLAS_ENTRY_POINTS(MS_CUBLAS_DLSYM)
#undef MS_CUBLAS_DLSYM
#undef MS_CUBLASLT_DLSYM
#undef MS_CUBLAS_RESOLVE
  if (!status.ok()) return status;
  return library;
}

#endif

const absl::StatusOr<CublasLibrary>& Loaded() {
  static const absl::StatusOr<CublasLibrary> loaded = Open();
  return loaded;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  const absl::StatusOr<CublasLibrary>& loaded = Loaded();
  if (!loaded.ok()) return loaded.status();
  return &*loaded;
}

const CublasLibrary& Cublas() {
  const absl::StatusOr<CublasLibrary>& loaded = Loaded();
  if (!loaded.ok()) {
    std::fprintf(stderr, "multiscreen: fatal: %s\n",
                 std::string(loaded.status().message()).c_str());
    std::exit(1);
  }
  return *loaded;
}

}  // namespace multiscreen::kernels::cuda

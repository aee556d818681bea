// The fixture of the CUDA tests: they skip, visibly, where no device is visible
// (the kernels are still compiled there).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/buffer.h"

namespace multiscreen {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) {
      std::fprintf(stderr, "\n*** SKIPPED: no CUDA device visible; CUDA kernels were compiled but not run ***\n\n");
      GTEST_SKIP() << "no CUDA device visible";
    }
  }
};

}  // namespace multiscreen

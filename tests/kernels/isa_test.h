// The fixture of tests that run a kernel on every instruction-set path (kernels/cpu/isa.h):
// each test runs once per path with the kernels capped to it, and skips, visibly, on a
// path this CPU lacks or above the cap MULTISCREEN_ISA sets for the run.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {

class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = ActiveIsa();
    // The paths up to the cap this process started with (MULTISCREEN_ISA, else the CPU's best).
    static const Isa cap = ActiveIsa();
    if (static_cast<int>(GetParam()) > static_cast<int>(cap)) {
      std::fprintf(stderr, "\n*** SKIPPED: the %s path is above this run's cap, %s (CPU's best: %s) ***\n\n",
                   IsaName(GetParam()), IsaName(cap), IsaName(CpuIsa()));
      GTEST_SKIP() << IsaName(GetParam()) << " is above the cap " << IsaName(cap);
    }
    ASSERT_TRUE(SetIsaCap(GetParam()).ok());
  }
  void TearDown() override { ASSERT_TRUE(SetIsaCap(saved_).ok()); }

 private:
  Isa saved_ = Isa::kGeneric;
};

inline std::string IsaTestName(const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); }

// Instantiates the TEST_Ps of Fixture (an IsaTest) once per path.
#define MS_INSTANTIATE_ON_EVERY_ISA(Fixture)                                                              \
  INSTANTIATE_TEST_SUITE_P(EveryIsa, Fixture,                                                            \
                           ::testing::Values(::multiscreen::kernels::cpu::Isa::kGeneric,                  \
                                             ::multiscreen::kernels::cpu::Isa::kAvx2,                     \
                                             ::multiscreen::kernels::cpu::Isa::kAvx512),                  \
                           ::multiscreen::kernels::cpu::IsaTestName)

}  // namespace multiscreen::kernels::cpu

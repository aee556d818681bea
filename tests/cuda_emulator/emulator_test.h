// What the emulator's planted-bug tests share: a fixture whose TearDown resets the
// device (a planted fault leaves a sticky error, as on a GPU), device/host copies, and
// the look-ups into a ScopedCapture's reports.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"

namespace msemu_test {

class EmulatorTest : public ::testing::Test {
 protected:
  void TearDown() override { cudaDeviceReset(); }
  // A cudaMalloc'ed copy of `host` (freed by the reset).
  template <typename T>
  T* DeviceCopy(const std::vector<T>& host) {
    T* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
  template <typename T>
  std::vector<T> HostCopy(const T* p, size_t n) {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

// True when one report contains every part.
inline bool Reported(const msemu::ScopedCapture& capture, const std::vector<std::string>& parts) {
  for (const std::string& line : capture.reports()) {
    bool all = true;
    for (const std::string& part : parts) all = all && line.find(part) != std::string::npos;
    if (all) return true;
  }
  return false;
}

// Every report, a line each (for failure messages).
inline std::string AllReports(const msemu::ScopedCapture& capture) {
  std::string all;
  for (const std::string& line : capture.reports()) all += line + "\n";
  return all;
}

}  // namespace msemu_test

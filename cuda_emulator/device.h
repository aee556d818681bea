// What device code sees on the emulated device (MULTISCREEN_CUDA=EMULATED): the build
// force-includes this header into every CUDA source compiled by the host compiler
// (cuda_emulator/CMakeLists.txt), before the toolkit's own headers. It supplies what
// nvcc would: the qualifiers, the built-in variables (threadIdx, blockIdx, blockDim,
// gridDim, warpSize), __syncthreads, the warp collectives (__shfl*_sync, __ballot_sync,
// __any_sync, __all_sync, __syncwarp), atomics, the device-only math intrinsics, and
// msemu::Launch, which kernels/cuda/launch.h calls in place of <<<>>>.
//
// Execution model (scheduler.cc): a launch runs its blocks one after another on the
// calling host thread; a block's threads are fibers switched at __syncthreads and at
// warp collectives, so a warp's lanes meet there in lockstep. Static __shared__
// variables are thread_local statics: one copy per host thread, used by one block at a
// time. Every load and store of this translation unit goes through checks.cc.
#pragma once

// Ours, before the toolkit's host_defines.h (which keeps a definition it finds).
#define __shared__ static thread_local
#define __launch_bounds__(...)

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/kernel_name.h"  // the one spelling of a launch's name (its tally and its timing)

namespace msemu {

// The calling emulated thread's built-in variables (scheduler.cc).
uint3 ThreadIdx();
uint3 BlockIdx();
dim3 BlockDim();
dim3 GridDim();

// __syncthreads: every thread of the block must arrive, at the same call site ("file:line").
void SyncThreads(const char* site);

// The warp collectives, one rendezvous of the lanes named in `mask` (every one of them
// must call the same collective with the same mask). kCombine: one computed by a function
// of every lane's operands (the tensor-core twins, internal.h's CombineInWarp).
enum class WarpOp { kShfl, kShflUp, kShflDown, kShflXor, kBallot, kSync, kCombine };
uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
unsigned ActiveMask();

// Dynamic shared memory of the running block (the launch's shared_bytes).
void* DynamicShared();

// One launch of `entry(params)` per thread of grid × block (scheduler.cc). `name` is
// the kernel's name for reports; `kernel` identifies it for cudaFuncSetAttribute. The
// launch's configuration is checked as the device checks it; errors are returned as
// cudaGetLastError would give them. On a stream being captured (graph.cc) the launch is
// recorded instead, with its parameters copied by `copy_params` (params_bytes long).
cudaError_t LaunchKernel(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, void (*entry)(const void* params), const void* params,
                         std::shared_ptr<const void> (*copy_params)(const void* params), size_t params_bytes);
// Called by each thread's entry once it holds its own copy of the parameters: checks
// (checks.cc) apply from here on.
void BeginThread();

namespace detail {

template <typename Tuple>
std::shared_ptr<const void> CopyParams(const void* params) {
  return std::make_shared<const Tuple>(*static_cast<const Tuple*>(params));
}

template <typename Tuple, auto Kernel>
void Entry(const void* params) {
  Tuple local = *static_cast<const Tuple*>(params);  // the thread's own copy, on its stack
  BeginThread();
  std::apply(Kernel, local);
}

template <auto Kernel, typename... P, typename... Args>
cudaError_t Launch(void (*)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  // The kernel's name and its source file: kernels of different files may share a name
  // in their anonymous namespaces (ForwardKernel), and the work tally counts by name.
  static const std::string name = multiscreen::kernels::cuda::ReportedKernelName(__PRETTY_FUNCTION__, __BASE_FILE__);
  using Tuple = std::tuple<std::decay_t<P>...>;
  const Tuple params(std::forward<Args>(args)...);
  return LaunchKernel(name.c_str(), reinterpret_cast<const void*>(Kernel), grid, block, shared_bytes, stream,
                      &Entry<Tuple, Kernel>, &params, &CopyParams<Tuple>, sizeof(Tuple));
}

template <typename T>
uint64_t Bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp collectives move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace detail

// Kernel<<<grid, block, shared_bytes, stream>>>(args...) on the emulated device.
template <auto Kernel, typename... Args>
cudaError_t Launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  return detail::Launch<Kernel>(Kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace msemu

#define threadIdx (::msemu::ThreadIdx())
#define blockIdx (::msemu::BlockIdx())
#define blockDim (::msemu::BlockDim())
#define gridDim (::msemu::GridDim())
inline constexpr int warpSize = 32;

// A macro, so that each call site is told apart ("file:line"): one barrier met at two
// sites is a report.
#define MSEMU_STRING2(x) #x
#define MSEMU_STRING(x) MSEMU_STRING2(x)
#define __syncthreads() ::msemu::SyncThreads(__FILE__ ":" MSEMU_STRING(__LINE__))
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::msemu::WarpCollective(::msemu::WarpOp::kSync, mask, 0, 0, 32);
}
inline unsigned __activemask() { return ::msemu::ActiveMask(); }

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return ::msemu::detail::FromBits<T>(
      ::msemu::WarpCollective(::msemu::WarpOp::kShfl, mask, ::msemu::detail::Bits(var), src_lane, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::msemu::detail::FromBits<T>(::msemu::WarpCollective(::msemu::WarpOp::kShflUp, mask,
                                                              ::msemu::detail::Bits(var), int(delta), width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::msemu::detail::FromBits<T>(::msemu::WarpCollective(::msemu::WarpOp::kShflDown, mask,
                                                              ::msemu::detail::Bits(var), int(delta), width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ::msemu::detail::FromBits<T>(
      ::msemu::WarpCollective(::msemu::WarpOp::kShflXor, mask, ::msemu::detail::Bits(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::msemu::WarpCollective(::msemu::WarpOp::kBallot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) { return (__ballot_sync(mask, predicate) & mask) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return (__ballot_sync(mask, predicate) & mask) == mask; }

// Atomics: read-modify-write of one address, returning the old value (scheduler.cc).
int atomicAdd(int* address, int value);
unsigned atomicAdd(unsigned* address, unsigned value);
unsigned long long atomicAdd(unsigned long long* address, unsigned long long value);
float atomicAdd(float* address, float value);
double atomicAdd(double* address, double value);
int atomicMax(int* address, int value);
int atomicMin(int* address, int value);
int atomicCAS(int* address, int compare, int value);
unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value);
int atomicExch(int* address, int value);
// __threadfence (PTX membar.gl, fence.sc.gpu): orders the calling thread's memory
// accesses device-wide, e.g. a block's partial result before the atomic count that
// announces it. A launch's blocks run one after another on one host thread here, so an
// earlier block's writes are already seen; a fence of the host thread is all it takes.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Device-only math intrinsics (their accurate host equivalents).
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// Round-to-nearest arithmetic that nvcc never contracts into an fma (nor does the host
// compiler across a call).
float __fadd_rn(float a, float b);
float __fsub_rn(float a, float b);
float __fmul_rn(float a, float b);
float __fdiv_rn(float a, float b);
float __fsqrt_rn(float a);
double __dadd_rn(double a, double b);
double __dsub_rn(double a, double b);
double __dmul_rn(double a, double b);
double __ddiv_rn(double a, double b);
double __dsqrt_rn(double a);

// Reinterpretations of a value's bits.
inline unsigned __float_as_uint(float x) { return ::msemu::detail::FromBits<unsigned>(::msemu::detail::Bits(x)); }
inline float __uint_as_float(unsigned x) { return ::msemu::detail::FromBits<float>(::msemu::detail::Bits(x)); }
inline int __float_as_int(float x) { return ::msemu::detail::FromBits<int>(::msemu::detail::Bits(x)); }
inline float __int_as_float(int x) { return ::msemu::detail::FromBits<float>(::msemu::detail::Bits(x)); }
inline long long __double_as_longlong(double x) {
  return ::msemu::detail::FromBits<long long>(::msemu::detail::Bits(x));
}
inline double __longlong_as_double(long long x) { return ::msemu::detail::FromBits<double>(::msemu::detail::Bits(x)); }

// Tensor-core primitives for tiled kernels (sm_80 and later), each executed by a whole
// warp: under nvcc the PTX instruction itself (inline asm); in the emulated build
// (MULTISCREEN_CUDA_EMULATED) its twin in cuda_emulator/tensor_core.cc, a warp collective
// that assembles the operands from the 32 lanes' fragments by the PTX ISA's documented
// layouts, so that fragment indexing is proven on the emulated device before a GPU runs
// it. Every lane of the warp must call them together (a missing lane is reported there).
//
// Fragments, with g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group), from PTX
// ISA "Matrix Fragments for mma.m16n8k16 with floating point type"; two bf16 per
// register, the element listed first in the low 16 bits:
//   A (16×16, row-major)  a[0] = A[g][2t], A[g][2t+1]        a[1] = A[g+8][2t], A[g+8][2t+1]
//                         a[2] = A[g][2t+8], A[g][2t+9]      a[3] = A[g+8][2t+8], A[g+8][2t+9]
//   B (16×8, k × n)       b[0] = B[2t][g], B[2t+1][g]        b[1] = B[2t+8][g], B[2t+9][g]
//   C, D (16×8, fp32)     [0] = C[g][2t]  [1] = C[g][2t+1]  [2] = C[g+8][2t]  [3] = C[g+8][2t+1]
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef MULTISCREEN_CUDA_EMULATED
#include "cuda_emulator/tensor_core.h"
#endif

namespace multiscreen::kernels::cuda {

// d = A·B + c, A 16×16 bf16, B 16×8 bf16, c and d 16×8 fp32, fp32 accumulation
// (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32). d may alias c.
__device__ inline void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::MmaM16N8K16Bf16(d, a, b, c);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// Four 8×8 b16 matrices from shared memory (ldmatrix.sync.aligned.m8n8.x4.shared.b16):
// lane L passes the address of row L % 8 of matrix L / 8 (16 bytes, 16-byte aligned; the
// rows need not be contiguous), and gets in r[m] row L / 4, columns 2·(L % 4) and +1 of
// matrix m (the lower column in the low half). So for a row-major 16×16 tile X, lane L
// naming &X[L % 16][8 · (L / 16)] gets exactly the A fragment of MmaM16N8K16Bf16.
__device__ inline void LdmatrixX4(uint32_t r[4], const void* shared_row) {
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::LdmatrixX4(r, shared_row, false);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// LdmatrixX4 of the transposed matrices (….x4.trans.shared.b16): r[m] of lane L holds
// rows 2·(L % 4) and +1 of column L / 4 of matrix m as stored. So for a row-major k × n
// tile Y (16×16), lane L naming &Y[L % 16][8 · (L / 16)] gets the B fragments of
// MmaM16N8K16Bf16 for columns 0–7 (r[0], r[1]) and 8–15 (r[2], r[3]).
__device__ inline void LdmatrixX4Trans(uint32_t r[4], const void* shared_row) {
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::LdmatrixX4(r, shared_row, true);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

// 16 bytes from global to shared memory, both 16-byte aligned, without passing through
// registers (cp.async.cg.shared.global); complete once a CpAsyncWaitGroup that covers
// its group returns. The emulated twin copies at once (a missing wait is not detected).
__device__ inline void CpAsync16(void* shared_destination, const void* global_source) {
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::CpAsync16(shared_destination, global_source);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" : : "r"(address), "l"(global_source) : "memory");
#endif
}

// Closes the group of this thread's CpAsync16 calls issued since the last commit.
__device__ inline void CpAsyncCommitGroup() {
#ifndef MULTISCREEN_CUDA_EMULATED
  asm volatile("cp.async.commit_group;\n" : : : "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight
// (0: all). Other threads' copies need a __syncthreads after it to be seen.
template <int kPending>
__device__ inline void CpAsyncWaitGroup() {
#ifndef MULTISCREEN_CUDA_EMULATED
  asm volatile("cp.async.wait_group %0;\n" : : "n"(kPending) : "memory");
#endif
}

}  // namespace multiscreen::kernels::cuda

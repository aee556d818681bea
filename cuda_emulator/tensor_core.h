// The emulated twins of the tensor-core instructions that kernels/cuda/tensor_core.cuh
// wraps (MULTISCREEN_CUDA=EMULATED; tensor_core.cc). Each is a warp collective of all 32
// lanes, as the instruction is (.sync.aligned): a lane that does not take part is a
// report, like a lane missing from __shfl_sync. The operands are assembled from the
// lanes' fragments by the PTX ISA's documented layouts, so that a kernel whose fragments
// are wrong gets a wrong result here as it would on the GPU.
#pragma once

#include <cstdint>

namespace msemu {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = A·B + c over the warp's
// fragments, fp32 accumulation (kernels/cuda/tensor_core.cuh gives the layout).
void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lane L names row L % 8 of matrix
// L / 8; each row (16 bytes) is read as the naming lane's own load, through the checks of
// every kernel load (bounds, initialization, races), and must be 16-byte aligned shared
// memory.
void LdmatrixX4(uint32_t r[4], const void* row, bool trans);

// cp.async.cg.shared.global (16 bytes), cp.async.commit_group, cp.async.wait_group n: the
// copy is made at once (a read of global and a write of shared memory, each checked as
// the calling lane's); commit and wait order nothing further.
void CpAsync16(void* shared_destination, const void* global_source);

}  // namespace msemu

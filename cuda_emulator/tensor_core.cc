// The tensor-core twins (tensor_core.h): warp collectives (scheduler.cc's CombineInWarp)
// whose combine step assembles the matrices from the 32 lanes' fragments by the PTX
// ISA's layouts ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "Warp-level matrix load instruction: ldmatrix"), computes, and hands each lane its
// fragment of the result. Memory operands are read and written by the lane that names
// them, through the same hooks as every load and store of kernel code (checks.cc), before
// the rendezvous; the combine step itself touches only the lanes' posted copies.
#include "cuda_emulator/tensor_core.h"

#include <cstring>
#include <string>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

// checks.cc: the checks every 16-byte load and store of kernel code goes through
// (bounds, initialization, shared-memory races; an illegal address ends the thread).
extern "C" void __tsan_read16(void* p);
extern "C" void __tsan_write16(void* p);

namespace msemu {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;

float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}
// Element `half` (0: the low 16 bits) of a register holding two bf16.
float Bf16Of(uint32_t reg, int half) { return Bf16ToFloat(uint16_t(reg >> (16 * half))); }

// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 -----------------------------

struct MmaLane {
  uint32_t a[4], b[2];
  float c[4], d[4];
};

void CombineMma(void* const lanes[32]) {
  if (t_counts != nullptr) ++t_counts->mma;  // once per warp instruction
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane& l = *static_cast<const MmaLane*>(lanes[lane]);
    const int group = lane >> 2, thread_in_group = lane % 4;  // groupID, threadID_in_group
    // A: a_i, i = 0..7, two per register, low half first.
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
      const int col = thread_in_group * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = Bf16Of(l.a[i / 2], i & 1);
    }
    // B (column-major): b_i, i = 0..3.
    for (int i = 0; i < 4; ++i) {
      const int row = thread_in_group * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      B[row][group] = Bf16Of(l.b[i / 2], i & 1);
    }
    // C: c_i, i = 0..3.
    for (int i = 0; i < 4; ++i) C[i < 2 ? group : group + 8][thread_in_group * 2 + (i & 1)] = l.c[i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    MmaLane& l = *static_cast<MmaLane*>(lanes[lane]);
    const int group = lane >> 2, thread_in_group = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? group : group + 8, col = thread_in_group * 2 + (i & 1);
      // fp32 accumulation in k order (each bf16 product is exact in fp32); the hardware's
      // order and internal rounding of the 16-term sum may differ by a few ulps.
      float sum = C[row][col];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      l.d[i] = sum;
    }
  }
}

// ---- ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 ----------------------------------

struct LdmatrixLane {
  uint16_t row[8];  // the row this lane named, as it read it
  uint32_t r[4];
};

// Element (i, j) of matrix m: row i was named by lane 8m + i.
uint16_t MatrixElement(void* const lanes[32], int m, int i, int j) {
  return static_cast<const LdmatrixLane*>(lanes[8 * m + i])->row[j];
}

// Lane L gets, in r[m], row L / 4 and columns 2·(L % 4), +1 of matrix m (the low half
// the lower column); with .trans, the same of the transposed matrix.
template <bool kTrans>
void CombineLdmatrix(void* const lanes[32]) {
  if (t_counts != nullptr) ++t_counts->ldmatrix;  // once per warp instruction
  for (int lane = 0; lane < 32; ++lane) {
    LdmatrixLane& l = *static_cast<LdmatrixLane*>(lanes[lane]);
    const int i = lane / 4, j = 2 * (lane % 4);
    for (int m = 0; m < 4; ++m) {
      const uint16_t lo = kTrans ? MatrixElement(lanes, m, j, i) : MatrixElement(lanes, m, i, j);
      const uint16_t hi = kTrans ? MatrixElement(lanes, m, j + 1, i) : MatrixElement(lanes, m, i, j + 1);
      l.r[m] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
}

// Whether [a, a + bytes) lies in the running block's shared memory (static __shared__
// variables are thread_local statics: the host thread's static TLS; dynamic shared
// memory is the block's buffer).
bool InSharedMemory(uintptr_t a, size_t bytes) {
  static thread_local uintptr_t tls_lo = 0, tls_hi = 0;
  if (tls_hi == 0) StaticTlsRange(&tls_lo, &tls_hi);
  if (a >= tls_lo && a + bytes <= tls_hi) return true;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t_block->dynamic_shared);
  return lo != 0 && a >= lo && a + bytes <= lo + t_block->dynamic_bytes;
}

// A 16-byte operand of `instruction` at p: reported, and the thread ended, when it is not
// 16-byte aligned (cudaErrorMisalignedAddress, as on a GPU) or, for `shared`, not shared
// memory (the instruction's .shared state space; the GPU's behaviour is undefined).
void CheckOperand(const char* instruction, const char* operand, const void* p, bool shared) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a % 16 != 0) {
    Report(Format("cuda emulator: misaligned %s: %s: %s %#zx is not 16-byte aligned", instruction, WhereNow().c_str(),
                  operand, size_t(a)));
    KillThread(cudaErrorMisalignedAddress);
  }
  if (shared && !InSharedMemory(a, 16)) {
    Report(Format("cuda emulator: %s outside shared memory: %s: %s %#zx is %s, not shared memory", instruction,
                  WhereNow().c_str(), operand, size_t(a), DescribeAddress(a).c_str()));
    KillThread(cudaErrorIllegalAddress);
  }
}

}  // namespace

void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  MmaLane lane;
  std::memcpy(lane.a, a, sizeof(lane.a));
  std::memcpy(lane.b, b, sizeof(lane.b));
  std::memcpy(lane.c, c, sizeof(lane.c));
  CombineInWarp("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", &CombineMma, kFullWarp, &lane);
  std::memcpy(d, lane.d, sizeof(lane.d));
}

void LdmatrixX4(uint32_t r[4], const void* row, bool trans) {
  const char* name =
      trans ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" : "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
  // The checked read first: an address past dynamic shared memory, in freed or host
  // memory, is named by it; then the state space.
  if ((reinterpret_cast<uintptr_t>(row) % 16) == 0) __tsan_read16(const_cast<void*>(row));
  CheckOperand(name, "row address", row, true);
  LdmatrixLane lane;
  std::memcpy(lane.row, row, sizeof(lane.row));
  CombineInWarp(name, trans ? &CombineLdmatrix<true> : &CombineLdmatrix<false>, kFullWarp, &lane);
  std::memcpy(r, lane.r, sizeof(lane.r));
}

void CpAsync16(void* shared_destination, const void* global_source) {
  constexpr const char* kName = "cp.async.cg.shared.global";
  if (t_counts != nullptr) ++t_counts->cp_async;  // once per thread
  CheckOperand(kName, "source", global_source, false);
  __tsan_read16(const_cast<void*>(global_source));  // bounds and initialization; host memory ends the thread
  if (FindAllocation(global_source) == nullptr) {
    Report(Format("cuda emulator: %s outside global memory: %s: source %#zx is not device memory", kName,
                  WhereNow().c_str(), size_t(reinterpret_cast<uintptr_t>(global_source))));
    KillThread(cudaErrorIllegalAddress);
  }
  CheckOperand(kName, "destination", shared_destination, true);
  __tsan_write16(shared_destination);
  std::memcpy(shared_destination, global_source, 16);
}

}  // namespace msemu

// Screening forward, tiled on tensor cores (issue 29): the same op, inputs, outputs and
// layouts as kernels/cuda/screening.h's ScreeningForward (spec steps 5–13), computed
// flash-style per (sequence, tile) with mma.sync m16n8k16 bf16 → fp32
// (kernels/cuda/tensor_core.cuh). The simple kernel stays the fp32 path and the oracle
// (tests/kernels/screening_tiled_test.cc). Forward and backward. The CUDA kernel table
// runs these under --precision=bf16 and the simple kernels under fp32 and fp16
// (KernelOptions::precision and screening_kernel; the environment variable
// MULTISCREEN_SCREENING_KERNEL=auto|simple|tiled overrides auto: TiledScreening in
// kernels/cuda/cuda_kernel_table.h); tests/cuda/model_cuda_test.cc and
// tests/cuda_emulator/train_emulated_test.py hold the model and 20 training steps on them
// against the simple kernels. Not yet measured on a GPU (docs/performance.md).
//
// One launch (the tile tables uploaded first, ScreeningUploadTables):
//   Steps 5–6 fused into the aggregate kernel's row loads: the CTA reads P's q rows of its
//      query block and, per key block it walks, P's k and v rows, and normalizes them
//      itself (unit length; q̃, k̃ MiPE-rotated in fp64) with the simple kernel's own row
//      arithmetic (kernels/cuda/screening_rows.cuh, which NormalizeKernel calls too) before
//      staging them as bf16. It writes no saved q̃, k̃, v̄ or norms (of `saved` only h): the
//      backward recomputes them from P (below). A key block is normalized again by each CTA
//      that walks it (an fp64 cos and sin per k row, v̄'s norm per v row), which reads P's k
//      and v columns where the two-launch form read saved k̃, v̄ (the same 80 floats a row);
//      what goes is the separate pass's read of P's q, k, v, the saved rows' write and
//      read-back, and a launch. The two-launch form (the simple kernel's normalize pass, then
//      the aggregate kernel on the saved rows: ScreeningTiledForwardTwoLaunches, which does
//      write them) gives U and h bit for bit as the one-launch form (tested on the emulated
//      device).
//   Aggregate (steps 7–13): a CTA of 4 warps per (64-query block, tile, sequence).
//      Each warp owns 16 queries. The CTA walks only the 64-key blocks its Softmask
//      window reaches, [max(0, q0 − keys + 1), q_last] (block-sparse over the causal
//      band: O(T·w) work and reads; w ≥ T and w = ∞ walk the whole causal triangle),
//      staging k̃ and v̄ as bf16 in shared memory. Per 16-key step of a block, a warp
//      whose 16 queries cannot reach those keys skips it; otherwise
//        s = q̃·k̃ᵀ (step 7) on tensor cores, d_K = 16 being one k-step, with q̃ and k̃
//            split into bf16 hi + lo parts (three products: q_hi·k_hi + q_hi·k_lo +
//            q_lo·k_hi), so that s is fp32-accurate (~1e-6): Trim's ∂α/∂s = 2a/r
//            amplifies an error of s by 1/r, and with plain bf16 operands (s off by
//            up to ~1e-3) the test measured rows of U off by 62 % at r = 0.02 and
//            36 % at r = 0.5 (rows whose pairs have a small a);
//        α·m = Trim(s)² · Softmask (steps 8–9) on the accumulator fragments, in
//            registers, zero outside the window [i − keys + 1, i] and past T;
//        h += (α·m)·v̄ (step 10) on tensor cores (α·m rounded to bf16, d_V = 64 as four
//            16-column pairs of n-tiles), skipped when Trim and the mask reject every
//            pair of the warp's 16×16 step (a warp vote): the exact rejection turned
//            into saved work.
//      Epilogue in registers: ‖h_i‖ by a 4-lane shuffle sum, TanhNorm (step 11), the
//      gate tanh(SiLU(g)) (step 12) and e^{s_O} (step 13, before W_O), h into saved.h
//      and U, as the simple kernel writes them (fp32).
//   Occupancy designed for: 4 CTAs (16 warps) per SM on sm_80 and sm_90. A CTA is 128
//   threads with 21,504 bytes of static shared memory (q̃ hi/lo 64×16, k̃ hi/lo 64×16,
//   v̄ 64×64, bf16, rows padded to 48 and 144 bytes: 16-byte multiples, not 32-byte
//   ones, so ldmatrix's eight rows fall in distinct banks) and __launch_bounds__(128, 4)
//   caps registers at 128 per thread (ptxas, CUDA 13, the one-launch form: 124 on sm_90,
//   126 on sm_80 since it writes no saved rows (126, 127 before), no spills, 40 bytes of
//   stack for the fp64 cos and sin; the two-launch
//   form's kernel 128 and 127), so the register file allows exactly 4 CTAs; shared memory
//   (unchanged by the fusion) would allow 7 (sm_80) or 10 (sm_90). Staging is plain loads
//   from fp32 P (normalized and rounded to bf16 on the way), one buffer, no cp.async
//   pipeline yet.
//   P in fp32 or in bf16 (issue 42): under --precision=bf16 the CUDA kernel table has cuBLASLt
//   write P in bf16 (KernelTable::ScreeningProjection; ScreeningShape::p_bf16 says so) and runs
//   the *Bf16P entry points below, whose row loads widen it (exact): the values P held in fp32
//   after RoundTo, so U, h, dP and the gradients are bit for bit those of fp32 P rounded to bf16
//   (tested on the emulated device), with P's bytes read halved and no rounding pass.
//   U in bf16 too (issue 42): the CUDA table under bf16 has this forward store U as W_O's
//   bf16 GEMM operand (KernelTable::ScreeningForwardOperand, ScreeningTiledForwardBf16PU),
//   each value rounded once to nearest even in the epilogue (the bits PackRounded made of the
//   fp32 U), so the fp32 U and PackRounded's pass go; h stays fp32. Its backward writes ∂L/∂P
//   in bf16 too (ScreeningTiledBackwardBf16PDP, the table's ScreeningBackwardToOperand): the
//   epilogues' fp32 values rounded once as they are stored, the bf16 GEMM operand the
//   projections' products read, with no fp32 ∂L/∂P and no pack pass.
// Widths other than d_K = 16, d_V = 64 take ScreeningForward (the simple kernel).
//
// Backward (ScreeningTiledBackward), three launches, nothing [T, w] stored. Neither pass reads
// the saved q̃, k̃, v̄ or norms (the forward writes none): each recomputes the rows it stages
// from P's q, k, v columns with the forward's row arithmetic (screening_rows.cuh: the q rows
// of the query pass's own block by threads 64–127 beside the prologue's output rows, each
// walked key block's k and v rows as the forward's; the key pass's own k and v rows and each
// walked query block's q rows), and the epilogues recompute their rows' q̃, k̃, v̄ and norms
// the same way. The MiPE rate term's fp32 q̃_i[0..1] and k̃_j[0..1] sit in the staged rows'
// padding (columns 16–19 of a 24-column bf16 row, which ldmatrix never reads) rather than in
// global memory. So the values are the saved rows' bit for bit, and dP, ∂L/∂h and the tile
// gradients equal those of the form that read the saved rows (ScreeningTiledBackwardSavedRows,
// tested on the emulated device with the saved rows NaN for the recomputing form). Bytes: P's
// q, k, v columns read (96 values a row) where the saved rows and norms were (99 fp32): equal
// in fp32 P, half in bf16 P (the CUDA table's bf16 path, below); the forward's writes of them go.
//   1. Query pass: a CTA of 4 warps per (64-query block, tile, sequence). Prologue: the
//      output pass for the CTA's own 64 rows (each (query block, tile, sequence) has one
//      CTA), one row per thread of threads 0–63: steps 13–11 backward from saved h, P's g
//      columns and ∂U (kernels/cuda/screening_rows.cuh's OutputRowBackward, the arithmetic
//      of the simple kernel's OutputBackwardKernel) to ∂L/∂h, written to scratch dh (the key
//      pass reads it) and staged hi/lo from registers (no read-back), ∂L/∂g into dP, the
//      scale parts. Then, walking the
//      forward's key blocks; per 16×16 step whose pairs the window reaches, s (split),
//      a = Trim base and the window recomputed in registers, the step skipped when no
//      pair is accepted (warp vote), then ∂L/∂(αm) = ∂L/∂h·v̄ᵀ, ∂L/∂s = ∂L/∂(αm) m a 2/r,
//      ∂L/∂q̃ += ∂L/∂s·k̃ on tensor cores; per query, partials of ∂L/∂r, of ∂L/∂w
//      through Softmask and of ∂L/∂rate (MiPE) pair by pair (fp32 over a step's pairs,
//      fp64 across steps), Σ_j ∂L/∂s_ij (i − j)
//      (q̃_i[0] k̃_j[1] − q̃_i[1] k̃_j[0]), as the simple kernel's: in exact arithmetic the
//      per-row sums over q̃ and k̃, whose halves grow with pos0 and cancel (at pos0 = 70000
//      those left ∂L/∂w 3.7e-3 off the fp64 CPU's; the pair sum 6.6e-6).
//      Epilogue: the CTA's finished ∂L/∂q̃ rows staged as fp32 in shared memory (dh_hi's
//      bytes, after a barrier), then one lane per query applies MiPE's and the unit norm's
//      backward (steps 6, 5; kernels/cuda/screening_rows.cuh) and writes dP's q columns.
//   2. Key pass: a CTA per (64-key block, tile, sequence), walking the query blocks
//      [k0, k_last + keys − 1] ∩ [0, T) in ascending order; sᵀ, the pairs and ∂L/∂(αm)ᵀ =
//      v̄·∂L/∂hᵀ recomputed, ∂L/∂v̄ += (αm)ᵀ ∂L/∂h and ∂L/∂k̃ += ∂L/∂sᵀ q̃ on tensor cores.
//      Epilogue as the query pass's: ∂L/∂k̃ rows staged in v_hi's bytes, ∂L/∂v̄ rows in
//      dh_hi's and dh_lo's, one lane per key writes dP's k and v columns.
//   3. The simple kernel's fixed-order reduction of the per-token partials
//      (ScreeningBackwardReduce). No atomics: every sum has one order, so two runs are
//      bit-identical (tested).
//   The prologue runs OutputBackwardKernel's arithmetic on the same inputs, so dP, dh and the
//   gradients are bit for bit those of the four-launch form (the simple kernel's output pass
//   first, the query pass staging dh from memory: ScreeningTiledBackwardFourLaunches, tested
//   on the emulated device), without dh's read-back (d_v floats per token and tile) and a
//   launch. The epilogues run the arithmetic of the simple kernel's NormalizeBackwardKernel on the
//   same fp32 rows, so dP and the gradients are bit for bit those of the five-launch form
//   (the window passes writing ∂L/∂q̃, ∂L/∂k̃, ∂L/∂v̄ to scratch, that kernel finishing
//   them: ScreeningTiledBackwardFiveLaunches, tested on the emulated device), without the
//   scratch arrays' write and read-back (2·(2·d_K + d_V) floats per token and tile).
//   Products and their operands (bf16 hi + lo = the fp32 value to ~2^-16, three mma per
//   product, lo·lo dropped):
//     s = q̃·k̃ᵀ                   split × split (the forward's reason: Trim's 1/r);
//     ∂L/∂(αm) = ∂L/∂h·v̄ᵀ         split × split: with plain bf16 the test measured rows
//                                 of ∂L/∂q off by up to 12 % and of ∂L/∂k by 59 % (the
//                                 error reaches ∂L/∂s through 1/r and survives the unit
//                                 norm's projection, which removes the large part along q̃);
//     ∂L/∂q̃ = ∂L/∂s·k̃, ∂L/∂k̃ = ∂L/∂sᵀ·q̃   split × split (the same projection);
//     ∂L/∂v̄ = (αm)ᵀ·∂L/∂h        plain bf16 × plain bf16 (as the forward's α·v̄).
//   Measured worst on the emulated device (tests/kernels/screening_tiled_test.cc, same
//   shape grid as the forward's, rows compared as there): rows of ∂L/∂q within 2.8e-3 of
//   the simple kernel, of ∂L/∂k and ∂L/∂v within 5.1e-3, ∂L/∂g bit for bit (the same
//   pass), ∂L/∂w, ∂L/∂r, ∂L/∂scale within 1.1e-3 of the CPU's fp64 ones (relative, floor
//   1e-9); rows the simple kernel zeroes are zero.
//   Occupancy designed for: 3 CTAs (12 warps) per SM. Each backward CTA has 49,152 bytes
//   of static shared memory (q̃, k̃ hi/lo 64×16 and v̄, ∂L/∂h hi/lo 64×64, bf16, rows
//   padded as the forward's), which allows 3 CTAs on sm_80 (164 KB) and 4 on sm_90;
//   __launch_bounds__(128, 3) caps registers at 168. ptxas (CUDA 13, tools/ptxas_usage.py):
//   query pass 168 registers on sm_90 and sm_80 with the output prologue and the epilogue (at
//   the cap; 156 / 146 without the prologue: the four-launch form), key pass 150 and 142 with
//   its epilogue (148 / 139 without: the five-launch form); no spills; 40 bytes of stack (the
//   epilogues' fp64 cos and sin, as NormalizeBackwardKernel's). Those are the saved-row forms'
//   (ScreeningTiledBackwardSavedRows' kernels keep them); recomputing from P (2026-12-07):
//   query pass 168 on sm_90 and 167 on sm_80, key pass 150 and 149, no spills, 40 bytes of stack.
//   Not yet measured on a GPU.
// Step loops (all three kernels): Trim's a by a multiply with −1/r (TrimNegReciprocal, once
// per tile), positions as 32-bit integers (T < 2^27; longer sequences run the simple
// kernels); the Softmask tables read once per distinct d of a lane's step (LaneTable: 6 of
// its 8 pairs' d), each pair by selects rather than a branch, the step's body compiled
// apart for interior steps (StepPairs), bf16 pairs packed by one cvt.rn.bf16x2.f32.
// `tools/ptxas_usage.py --step-loops` counts their PTX (docs/performance.md).
// Inputs and outputs as ScreeningForward: P [B·T, tiles·p_cols()] device, read; tiles
// [tiles] host; U [B·T, tiles·d_v] device, written; saved.h written, the other buffers of
// `saved` untouched (the two-launch forms write them all).
// Precision: bf16 operands (α·m and v̄ rounded once each), fp32 accumulation; U and h
// within 1e-2 of the simple kernel, row by row, ‖got − ref‖/‖ref‖ (measured worst
// 5.4e-3 on the emulated device; tests/kernels/screening_tiled_test.cc). Rows every
// pair of which Trim rejects are exactly zero, as in the simple kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/screening.h"
#include "kernels/screening_types.h"

namespace multiscreen::kernels::cuda {

void ScreeningTiledForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                           const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                           cudaStream_t stream);

// Whether the tiled kernels take `shape` (d_K = 16, d_V = 64, MiPE, the output gate,
// T < 2^27); the others run the simple kernels, which read fp32 P.
bool ScreeningTiledShape(const ScreeningShape& shape);

// ScreeningTiledForward and ScreeningTiledBackward on P in bf16 (P16: the bits of
// [B·T, tiles·p_cols()] bf16 values, row-major, as a GEMM with a bf16 D writes them; issue 42):
// the same arithmetic on the same values, so U, h, dP and the gradients are those of the fp32
// calls on P rounded to bf16, bit for bit; P's bytes read halve. For a shape
// ScreeningTiledShape takes only (otherwise fatal: the simple kernels read fp32 P).
void ScreeningTiledForwardBf16P(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                                cudaStream_t stream);
void ScreeningTiledBackwardBf16P(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                 const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                 TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);
// ScreeningTiledBackwardBf16P writing ∂L/∂P in bf16 (dP16: [B·T, tiles·p_cols()] bf16 bits,
// row-major, every element written; issue 42): the query pass's prologue and epilogue and the
// key pass's epilogue round each fp32 value they would write once to nearest even, so dP16
// holds the bits a pack of ScreeningTiledBackwardBf16P's fp32 dP into bf16 makes (gemm.h's
// Pack, PackAsGemm under bf16), bit for bit, and the tile gradients are the same: the
// projections' bf16 GEMM operand without the fp32 ∂L/∂P and the pass over it. ∂L/∂P's
// bytes written halve. For a shape ScreeningTiledShape takes only (otherwise fatal).
void ScreeningTiledBackwardBf16PDP(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                   const ScreeningSaved<float>& saved, const float* dU, uint16_t* dP16,
                                   TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);

// ScreeningTiledForwardBf16P writing U in bf16 (U16: [B·T, tiles·d_V] bf16 bits, row-major,
// W_O's GEMM operand as KernelTable::PackRounded holds it; issue 42): each U value is the
// fp32 one ScreeningTiledForwardBf16P writes, rounded once to nearest even, so U16 holds the
// bits PackRounded(kBf16) makes of that fp32 U (tested on the emulated device), h is the same,
// and neither the fp32 U nor PackRounded's pass over it (read, rounded write-back, bf16 write)
// is needed. For a shape ScreeningTiledShape takes only (otherwise fatal).
void ScreeningTiledForwardBf16PU(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                 const ScreeningSaved<float>& saved, uint16_t* U16, ScreeningScratch* scratch,
                                 cudaStream_t stream);

// As ScreeningTiledForward with q̃·k̃ᵀ from plain bf16 operands (one product, not three):
// for the tests' measurement of what the split buys; not for the model.
void ScreeningTiledForwardPlainBf16Similarity(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                              const ScreeningSaved<float>& saved, float* U,
                                              ScreeningScratch* scratch, cudaStream_t stream);

// The two-launch forms of the two above (the simple kernel's normalize pass, then the
// aggregate kernel staging the saved rows): what the one-launch forward replaced, kept for
// tests/kernels/screening_tiled_test.cc's bit-identity test; not for the model.
void ScreeningTiledForwardTwoLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                      const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                                      cudaStream_t stream);
void ScreeningTiledForwardPlainBf16SimilarityTwoLaunches(const ScreeningShape& shape, const float* P,
                                                         const TileScalars* tiles, const ScreeningSaved<float>& saved,
                                                         float* U, ScreeningScratch* scratch, cudaStream_t stream);

// Backward (see the header comment above): the same arguments, outputs and errors as
// ScreeningBackward. Of saved only h is read (as the forward wrote it); dU [B·T, tiles·d_v] device, read;
// dP [B·T, tiles·p_cols()] device, written; grads as ScreeningBackward's (host: waits).
void ScreeningTiledBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                            const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                            ScreeningScratch* scratch, cudaStream_t stream);

// As ScreeningTiledBackward in its earlier form reading the saved q̃, k̃, v̄ and norms (which the
// simple forward, ScreeningTiledForwardTwoLaunches or ScreeningNormalize must have written),
// where ScreeningTiledBackward recomputes them from P. For the tests' bit-for-bit check; not
// for the model.
void ScreeningTiledBackwardSavedRows(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                     const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                     TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);

// As ScreeningTiledBackward in its earlier four-launch form: the simple kernel's output pass
// (ScreeningBackwardBegin) writes scratch dh, dP's g columns and the scale parts first, and the
// query pass stages dh from memory. For the tests' bit-for-bit check of the fused prologue;
// not for the model.
void ScreeningTiledBackwardFourLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                        const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                        TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);

// As ScreeningTiledBackward in its earlier five-launch form: the window passes write
// ∂L/∂q̃, ∂L/∂k̃, ∂L/∂v̄ to scratch d_q, d_k, d_v and ScreeningBackwardFinish's
// NormalizeBackwardKernel finishes them into dP. For the tests' bit-for-bit check of the
// fused epilogues; not for the model.
void ScreeningTiledBackwardFiveLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                        const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                        TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda

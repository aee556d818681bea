// Causal softmax attention tiled on tensor cores (issue 29): the Transformer baseline's
// attention (kernels/cpu/attention.h, AttentionKind::kSoftmax) flash-style, after
// FlashAttention-2, on mma.sync m16n8k16 bf16 → fp32 (kernels/cuda/tensor_core.cuh). The
// same op, arguments, layouts and outputs as kernels/cuda/attention.h's AttentionForward
// and AttentionBackward (o; lse [B, heads, T] fp64 host, the same lse_i = log Σ_j e^{z_ij};
// dq, dk, dv written; d_scale [heads] fp64 host; the per-head scale; the same scratch), so
// either runs where the other does; the simple kernel stays the oracle
// (tests/cuda/attention_tiled_test.cc). Other kinds (softmax1, SSMax, sigmoid, entmax),
// d_h ≠ 64, arrays not 16-byte aligned and more than 65,535 sequences or heads take the
// simple kernel, whole (AttentionTiledTakes says which). The CUDA Transformer kernels run
// it by TiledAttention (kernels/cuda/cuda_kernel_table.h): under --precision=bf16, or by
// MULTISCREEN_ATTENTION_KERNEL=auto|simple|tiled.
//
// RoPE fused (the Transformer's; kernels/cpu/rope.h): given a table of the positions'
// cosines and sines (cuda::RopeTable, YaRN's frequencies included), q and k are the
// unturned rows and are turned on their way to shared memory, (a, b) ← (a cos φ − b sin φ,
// a sin φ + b cos φ) for the pairs (p, p + 32), in fp32 as cuda::Rope, before the bf16
// split; the backward turns ∂L/∂q̃ and ∂L/∂k̃ back by the transpose in its epilogues (the
// pair's two columns sit in n-tiles n and n + 4 of one lane), so it writes the gradients
// of the unturned q and k. No turned copy of q or k is written, and no RoPE pass runs:
// the model's two RoPE launches of the forward and two of the backward per layer go
// (kernels/cuda/cuda_transformer_kernels.cu). A call the tiled kernels do not take cannot
// have a table (fatal): the caller turns q and k itself and runs this without.
//
// Forward, one launch: a CTA of 4 warps per (64-query block, head, sequence); warp w owns
// 16 queries, whose q (turned, with RoPE) it holds as A fragments. The CTA walks the key blocks k0 = 0, 64,
// …, q0 only (causal block skipping; the diagonal block last and the only one masked, on
// which a warp also skips the 16-key groups past its last query). Per block: s = q·kᵀ on
// tensor cores (16 × 64 per warp, eight n-tiles, four k-steps of d_h), scaled by
// scale·log2 e; the running row max m and sum l in fp32 (the online softmax, base 2); o
// rescaled; o += p·v on tensor cores. The epilogue divides by l (the row's four lanes
// summed in a fixed order) and writes o and lse_i = (m + log2 l)·ln 2.
//
// Backward, three launches, nothing [T, T] stored, no atomics:
//   1. Query pass, a CTA per (64-query block, head, sequence) as the forward's, q and ∂L/∂o
//      held as A fragments. First D_i = ∂L/∂o_i · o_i of its rows (fp64, into the scratch
//      for the key pass). Then the forward's key blocks by 16-key steps: s and
//      p = 2^(s·scale·log2 e − lse_i·log2 e) recomputed (0 past the diagonal),
//      dp = ∂L/∂o·vᵀ, ds = p (dp − D_i) (= ∂L/∂z), ∂L/∂q += ds·k on tensor cores, and per
//      query Σ_j ds_ij (q_i·k_j) (fp32 per step, fp64 across steps, the row's four lanes
//      in a fixed order) into the per-query parts.
//   2. Key pass, a CTA per (64-key block, head, sequence), k and v held as A fragments,
//      walking the query blocks q0 = k0, k0 + 64, … < T by 16-query steps (lse and D of
//      the block staged in shared memory): sᵀ, pᵀ, dpᵀ, dsᵀ recomputed, ∂L/∂v += pᵀ·∂L/∂o
//      and ∂L/∂k += dsᵀ·q on tensor cores.
//   3. The simple kernel's fixed-order Σ of the parts into d_scale (AttentionBackwardFinish,
//      after AttentionBackwardBegin's uploads of scale and lse).
//   s, p and dp are computed in both passes: FlashAttention-2 computes them once and adds
//   ∂L/∂q with float atomics, whose order varies; here every output has one owner and two
//   runs are bit-identical (tested), for 7 products per 16 × 16 pair instead of 5.
//
// Precision (AttentionOperands): bf16 operands, fp32 accumulation. kSplit, the kernel the
// table runs, enters q and k in q·kᵀ, p and v in p·v, and ∂L/∂o and v in ∂L/∂o·vᵀ as bf16
// hi + lo parts (three products each, lo·lo dropped: about 17 bits, ~1e-5), ds, p, q, k
// and ∂L/∂o rounded once to bf16 in ∂q, ∂k, ∂v. Why (measured, attention_tiled_test):
//   - s: with plain bf16 q and k a peaked head (scores of standard deviation 8) has s off
//     by ~1e-2 of |s| ≈ 30: rows of o off by 3.3 %, lse by 0.057;
//   - p·v and ∂L/∂o·vᵀ: ds = p (dp − D) must sum to 0 over a row, which needs D_i = Σ_j
//     p_ij dp_ij as the kernel computes dp. D_i from o (as FlashAttention-2 forms it) and dp
//     from plain bf16 operands disagree by ~2^-9 |∂o||v|, and where dp and D nearly agree
//     (nearly one-hot rows; the first query, whose one key has p = 1 and ds = 0 exactly)
//     that is all of ds: rows of ∂q off by up to 43 %, of ∂k by 31 %, d_scale by 6 %. With
//     p, v and ∂L/∂o split, o = Σ p v and dp agree with D to ~1e-5.
//   The plain variant (kPlain: one product each, FlashAttention-2's arithmetic) is kept for
//   the tests' measurement of this and for timing on a GPU; not for the model. The split
//   makes 3× the tensor-core instructions of plain bf16 (forward 48 mma per 16 × 16 pair,
//   backward 120, against 16 and 40): whether the kernel is bound by them only a GPU says.
//   Measured worst on the emulated device against the simple kernel (and the CPU's fp64,
//   the same to the digits shown) over T = 1, 37, 64, 65, 130, 200, typical, peaked and
//   flat heads: rows of o 6.6e-5, lse 1.4e-4 (absolute), rows of ∂q 4.3e-3, ∂k 4.1e-3, ∂v
//   4.4e-3 (rows of ∂q, ∂k below 1 % of their head's largest held to 1e-4 of it: see
//   the test), d_scale 1.4e-3 relative. With RoPE fused (T = 37, 65, 70, 130, 200; plain
//   and YaRN F = 4, 16): o 8.2e-5, lse 1.4e-4, ∂q 4.7e-3, ∂k 4.5e-3, ∂v 4.3e-3, d_scale
//   2.0e-3; and bit for bit the unfused tiled kernel's on cuda::Rope's turned copies.
//
// Launch configuration, designed for 3 CTAs (12 warps) per SM on sm_80 and sm_90: 128
// threads per CTA, grid (⌈T/64⌉, heads, B); static shared memory only, bf16 rows of 64
// padded to 72 (144 bytes, so ldmatrix's eight rows fall in distinct banks): the forward
// and the query pass stage k and v (hi, lo: 36,864 bytes; q and ∂L/∂o are staged through
// the same buffers first), the key pass q and ∂L/∂o (hi, lo) and the block's lse and D
// (37,376 bytes); 3 CTAs use 112 KB of sm_90's 228 (sm_80's 164). __launch_bounds__(128, 3):
// ≤ 168 registers. ptxas (CUDA 13, tools/ptxas_usage.py), kSplit: forward 168 registers on
// sm_90 (156 on sm_80), query pass 165 (164), key pass 168 on sm_90; on sm_80 the key pass,
// which holds k and v (hi, lo) and ∂k, ∂v through its walk, spilled 16 bytes at 168 and is
// bounded to 2 CTAs there (206 registers). With RoPE fused (a template instance of each
// kernel, so the kernels without it are unchanged): forward 159 (157), query pass 166
// (162); the key pass needs 206 on sm_90 (207 on sm_80) and is bounded to 2 CTAs on both
// (at 168 it spilled 20–40 bytes in every arrangement tried: attention_tiled.cu). No
// spills, no stack. The fp32 inputs are converted to bf16 on their way to shared memory
// (plain loads, one buffer, no cp.async pipeline). Not yet measured on a GPU
// (docs/performance.md), nor whether the fused key pass's 8 warps per SM cost more than
// the two RoPE passes over q and k they save.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"

namespace multiscreen::kernels::cuda {

// The operands of the tensor-core products: kSplit, q·kᵀ, p·v and ∂L/∂o·vᵀ from bf16 hi +
// lo parts (see above; the default, what the model runs); kPlain, every product one bf16
// product, FlashAttention-2's arithmetic (for the tests' measurement and GPU timing).
enum class AttentionOperands { kSplit, kPlain };

// Whether the tiled kernels take a call of `shape` on these device arrays (every array
// of the call, and the RoPE table if any): softmax, d_h = 64, every array 16-byte aligned
// (float4 loads), at most 65,535 sequences and heads. Otherwise the calls below run the
// simple kernel, whole.
bool AttentionTiledTakes(const cpu::AttentionShape& shape, std::initializer_list<const float*> arrays);

// As AttentionForward (attention.h): o written; lse [B, heads, T] host written; waits.
// rope: null, or cuda::RopeTable's [≥ T, 64] table of positions 0 … T − 1 (the call must
// be one AttentionTiledTakes accepts, else fatal): o and lse of RoPE(q), RoPE(k).
void AttentionTiledForward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                           const double* scale, float* o, double* lse, AttentionScratch* scratch, cudaStream_t stream,
                           AttentionOperands operands = AttentionOperands::kSplit, const float* rope = nullptr);

// As AttentionBackward (attention.h): dq, dk, dv written; d_scale [heads] host written;
// o and lse the forward's (either kernel's); waits. rope: as the forward's; dq and dk are
// then the gradients of the unturned q and k.
void AttentionTiledBackward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                            const float* o, const double* lse, const float* d_o, const double* scale, float* dq,
                            float* dk, float* dv, double* d_scale, AttentionScratch* scratch, cudaStream_t stream,
                            AttentionOperands operands = AttentionOperands::kSplit, const float* rope = nullptr);

}  // namespace multiscreen::kernels::cuda

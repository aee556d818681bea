#!/usr/bin/python3
"""A performance model on paper (issue 29): one bf16 training step of Multiscreen and of
the FlashAttention-2 Transformer of matched size on one GPU, op by op as
model/multiscreen.cc and model/transformer.cc run them, with each op's FLOPs, HBM bytes
and roofline time; the step's time, tokens/s and MFU; and the prefill time (model-side
time to first token) of both at long context. A model, not a measurement: every figure
follows from the constants below and the flags (docs/performance.md "A performance model
of the GPU step" states and justifies each).

Per op:  time = max(executed FLOPs / (eff · peak), HBM bytes / (bw_eff · HBM bandwidth)
                    [, issue slots / (issue_eff · warp-instruction rate)])
  eff = --gemm-eff for cuBLASLt GEMMs, --fa2-eff for FlashAttention-2, --mma-eff for the
  tiled screening kernels (mma.sync, as FA-2); screening also has an instruction-issue
  bound (its per-pair Trim/Softmask work runs on the CUDA cores).
Bytes are compulsory traffic: each operand read once and each result written once, in
the dtype the issue-29 design stores it (bf16 GEMM operands and activations, fp32
residual stream, gradients, masters and AdamW moments); a tile's k̃ and v̄ (≤ 1 MB at
T = 4096) are assumed to stay in L2 between the query blocks that read them.
Model FLOPs (the MFU numerator) follow trainer/flops.h, which `bench train` prints: 2 per
multiply-add, 3 × forward for a training step, screening pairs inside the Softmask window
only, the Transformer's causal attention at (T + 1)/2 keys per query.

--counted=FILE (the JSON of `bench train --device=cuda --count --json`, emulated build):
the model of that run's model, T and B, op by op beside what the emulated device counted
for the kernels and cuBLASLt products each op names (Op.kernels).
--measured=FILE (the JSON of `bench train --device=cuda --op_times --json`, on a GPU): each
op's modelled time beside the device time CUDA events measured for the same kernels and
products (issue 42 part 4: where the model is wrong), with the hardware flags given.

Run: /usr/bin/python3 tools/perf_model.py [--psi=16,32] [--seq=4096] [--peak-tflops=989]
     [--hbm-tbs=3.35] [--ttft-seq=100000] [--json] (--help lists every constant)
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import plan_memory  # the head's ∂Z groups (HEAD_GROUP_BYTES): the same code, not a copy

# ---- the paper's architecture (/work/shared/spec/MULTISCREEN.md) -------------------
VOCAB = 50257
D_K, D_V = 16, 64
W_TH = 256.0
# The Transformer baselines of the spec's table (paper Table 4): layers, heads, d.
TRANSFORMERS = {"8m": (6, 4, 128), "45m": (6, 8, 512), "353m": (24, 16, 1024), "1.3b": (24, 16, 2048)}
# Multiscreen Ψ and the Transformer the paper compares it with: the scaling pairs of Tables
# 3 and 4 (4M/8M, 28M/45M, 286M/353M, 1.3B/1.3B; Fig. 17 pits 286M against 353M, Fig. 8(d)
# 1.3B against 1.3B). Ψ = 64 (4B) has no baseline in the paper.
MATCHED = {8: "8m", 16: "45m", 32: "353m", 48: "1.3b"}

# ---- the tiled screening kernels (kernels/cuda/screening_tiled.cu) ----------------
# A warp owns 16 queries (16 keys in the key pass) and runs the 16×16 steps its window
# reaches. mma.sync m16n8k16 per step, counted in the PTX (nvcc 13 -O2 -ptx, sm_90):
# forward 14 (s = q̃·k̃ᵀ with bf16 hi + lo operands: 6; (α·m)·v̄: 8); the backward's query
# pass 36 and key pass 44 (s recomputed, hi/lo splits where Trim or the unit norms
# amplify errors).
MMA_FLOPS = 2 * 16 * 8 * 16
MMAS_PER_STEP = {"forward": 14, "query": 36, "key": 44}
# Warp instructions issued per step, SASS estimated from the PTX of the step loops
# (`tools/ptxas_usage.py --step-loops`, nvcc 13 -O2, sm_90): the instructions of the step
# loop's longest trip (every data-dependent branch taken the longer way; an if/else counts
# one arm): forward 203, query pass 358 without its MiPE rate arm (ISSUE_MIPE_RATE) plus its
# inner loop (∂L/∂(αm), unrolled by 2) once more, 40, key pass 345 plus its inner loop
# (likewise) once more, 40; plus 8 per div.rn.f32 (none since the step loops multiply by
# 1/r: they had 8 each, a reciprocal, two FMAs and a range check in SASS) plus one per 64-bit
# integer operation (2, 5, 2: 32-bit positions in the step loops; they had 44, 56, 39). The forward
# adds (514 − 440)/4 = 18 for its own rows' unit norm and MiPE rotation since it normalizes
# the P rows it loads (2026-12-06): the loop over key blocks around the step loop grew from
# 440 to 514 PTX instructions, once per key block a warp visits, spread over the block's 4
# steps (an estimate: a warp runs the k rows' half or the v rows' half of that code, the v
# rows' scaling loop 4 times). All three passes' interior steps (every pair inside the window:
# interior_steps) skip the per-pair window test, and ISSUE_PER_INTERIOR_STEP counts their
# longest trip through that arm (the kernel marks it with a PTX comment): forward 143, query
# pass 293 + 40 (without the rate arm), key pass 286 + 40 (2026-12-06: the Softmask tables read once per distinct
# d, 6 per lane and table, not once per pair; selects, not a branch per pair; the step's body
# specialized per arm; cvt.rn.bf16x2.f32 packing; the MiPE rate term once per step under one
# warp-uniform branch, counted for the MiPE tiles' steps only; both backward passes'
# ∂L/∂(αm) loops unrolled by 2 (the key pass's had 4 trips of 24). Before: forward 214 / 173,
# query 500 / 457, key 379 + 72 / 327 + 72). Those earlier figures count the bf16
# conversions (cvt.rn.bf16.f32, cvt.f32.bf16), which cuda_bf16.hpp's inline asm puts on braced lines that --step-loops dropped until
# 2026-12-06: it had counted 206 / 165, 468 / 425, 339 / 287. History: until 2026-12-06 the model
# took the loop's static count, which adds both arms of the query pass's `rotate` branch (the
# MiPE rate term per pair, compiled with and without the rotation): query pass 631 (494 on
# its longest trip); then the window test 0 <= d < keys as one unsigned compare (query 479,
# key 319 on every step); then the interior arm (boundary steps 468 and 339). Before 32-bit
# positions, 1/r and fp32 per-step sums in the query pass (it had 314 f64 instructions per
# step): 324, 888, 513 (static). An estimate: no cuobjdump here to count the SASS itself.
# 2026-12-07 (issue 42: the backward passes recompute q̃, k̃, v̄ from P, the MiPE rate term's
# k̃_j[0..1] read from shared memory instead of global): --step-loops, nvcc 13, sm_90, on the
# recompiled kernels: forward 195 / 137 (its step loop's source unchanged: the compile moved),
# query pass 376 / 272 without the rate arm, 13 / 3 64-bit integer operations on the longest
# trip / interior trip (5 before), key pass 348 / 285; before: 203 / 143, 358 / 293, 345 / 286.
# The backward's work per key or query block outside the step loop (the rows' staging, now
# their normalization: one row per thread, fp64 cos and sin where rate ≠ 0) is not charged, as
# before; its longest trip shrank (query pass 1121 − 423 → 717 − 424, key pass 1058 − 345 →
# 999 − 348 PTX instructions: the fp32 staging loops' 64-bit addressing went).
ISSUE_PER_STEP = {"forward": 195 + (514 - 440) // 4 + 2, "query": 376 + 40 + 13, "key": 348 + 40 + 2}
ISSUE_PER_INTERIOR_STEP = {"forward": 137 + (514 - 440) // 4 + 2, "query": 272 + 40 + 3, "key": 285 + 40 + 2}
# The query pass's MiPE rate arm (∂L/∂rate: four k̃ row loads, the pairs' (i − j)·(q̃ × k̃) terms,
# two fp64 sums), which only the warps of tiles with w < w_th run (rate ≠ 0; warp-uniform): the
# longest trip with it less the longest trip without it (--step-loops prints both), (other
# steps, interior steps): 424 − 376 and 325 − 272 (423 − 358 and 363 − 293 when the k̃ heads
# came from global memory).
ISSUE_MIPE_RATE = {"query": (424 - 376, 325 - 272)}

# ---- the Transformer's tiled attention (kernels/cuda/attention_tiled.h) -------------
# Under bf16 the attention of head width 64 runs the tiled kernels with RoPE fused: q and k
# are turned on their way to shared memory from a [T, 64] fp32 table of the positions'
# cosines and sines (read once by the forward and once by each backward pass), and ∂q, ∂k
# turned back in the backward's epilogues, so no RoPE pass runs. At other head widths the
# attention op turns copies of q and k before the kernel (the forward: one pass; the
# backward: one before it and one over ∂q, ∂k after).
FUSED_ROPE_HEAD = 64

# ---- the widths the code stores screening's arrays in (model/multiscreen.cc, CUDA table) ----
# P = x_in·W_cat: on the bf16 path of the tiled kernels the CUDA table's ScreeningProjection
# has cuBLASLt write it in bf16 (a bf16 D, fp32 compute) and the tiled kernels read its q, k,
# v and g columns as bf16 (ScreeningTiledForwardBf16P, ScreeningTiledBackwardBf16P). Before
# (2026-12-07) the GEMM wrote fp32 P, one more pass rounded it to bf16 in place
# (RoundToCompute: RoundKernel read and wrote it, fp32) and the kernels read fp32: P_BYTES = 4,
# P_ROUND_PASS = True; the simple kernels and the CPU still do so. U and ∂U are
# fp32 too (the forward's output and the ∂U GEMM's C); U goes to its bf16 GEMM operand by a
# pass (PackRounded: RoundPackKernel reads U, writes it back rounded and its bf16 copy); ∂P went
# by another (PackAsGemm: PackKernel read ∂P, wrote the bf16 copy) until the passes wrote it
# in bf16 (DP_BYTES below). Until 2026-12-07 the
# model charged P, U and ∂U as bf16 and none of those three passes (issue 42 part 1: the
# counted bytes showed P 0.69 against 0.36 MB, the forward 1.18 against 0.72, the query
# pass 1.80 against 1.22, the key pass 0.98 against 0.79 at tiny_tiled, T = 256).
# U likewise (2026-12-07, issue 42): the CUDA table's ScreeningForwardOperand has the tiled
# forward's epilogue write U as W_O's bf16 GEMM operand itself (each value rounded once to
# nearest even: the bits PackRounded made), so U is written in bf16 and no pass packs it.
# Before: U_BYTES = 4 and U_PACK_PASS = True (RoundPackKernel read the fp32 U, wrote it back
# rounded and wrote its bf16 copy); the simple kernels and the CPU still do so.
P_BYTES = 2             # P's element as the GEMM writes it and the tiled screening kernels read it
P_ROUND_PASS = False    # P rounded in place after its GEMM (read and written at P_BYTES)
U_BYTES = 2             # U as the forward writes it (W_O's GEMM operand)
U_PACK_PASS = False     # U packed into its bf16 operand after the forward (read, written back, bf16 written)
DU_BYTES = 4            # ∂U as its GEMM writes it
# ∂P: on the same bf16 tiled path the query and key passes write it straight as the
# projections' bf16 GEMM operand (KernelTable::ScreeningBackwardToOperand,
# ScreeningTiledBackwardBf16PDP), each value rounded once as it is stored. Before
# (2026-12-07) they wrote fp32 ∂P and a pass packed it into bf16 (PackAsGemm: PackKernel read
# 4 and wrote 2 bytes an element): DP_BYTES = 4, DP_PACK_PASS = True; the simple kernels, fp32,
# fp16 and the CPU still do so.
DP_BYTES = 2            # ∂P's element as the query and key passes write it
DP_PACK_PASS = False    # ∂P packed into its bf16 GEMM operand by a pass of its own


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--psi", default="16,32", help="Multiscreen sizes to model, comma-separated: any Ψ >= 2 (a matched Transformer row\n"
                        "for 8, 16, 32 and 48)")
    p.add_argument("--seq", type=int, default=4096, help="training sequence length T")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per step B")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 tensor-core peak (H100 SXM: 989)")
    p.add_argument("--hbm-tbs", type=float, default=3.35, help="HBM bandwidth in TB/s (H100 SXM: 3.35)")
    p.add_argument("--sms", type=int, default=132, help="streaming multiprocessors (H100 SXM: 132)")
    p.add_argument("--clock-ghz", type=float, default=1.83,
                   help="SM clock of the peak figure (989 TFLOP/s = 132 SMs x 4096 FLOP/clk x 1.83 GHz)")
    p.add_argument("--gemm-eff", type=float, default=0.70, help="fraction of peak a cuBLASLt bf16 GEMM reaches")
    p.add_argument("--bw-eff", type=float, default=0.80, help="fraction of HBM bandwidth a streaming kernel reaches")
    p.add_argument("--fa2-eff", type=float, default=0.35,
                   help="fraction of peak FlashAttention-2 reaches on H100, forward and backward")
    p.add_argument("--mma-eff", type=float, default=0.35,
                   help="fraction of peak the tiled screening kernels' mma.sync reach (as FA-2's)")
    p.add_argument("--issue-eff", type=float, default=0.70,
                   help="fraction of the warp-instruction issue rate (4 per SM and clock) screening reaches")
    p.add_argument("--issue-scale", type=float, default=1.0,
                   help="scales the screening kernels' instructions per step (ISSUE_PER_STEP)")
    p.add_argument("--launch-us", type=float, default=2.0, help="device time lost per kernel launch (µs)")
    p.add_argument("--sync-us", type=float, default=10.0, help="time lost per host synchronization (µs)")
    # The per-node cost of a replayed CUDA graph: the one measured figure found (docs/performance.md,
    # "Every micro-batch as one CUDA graph"), github.com/ahrefs/ocannl/issues/488 (2026-07-30): a
    # chain of N no-op kernels stream-captured and replayed costs ~15 µs fixed plus ~0.58 µs per
    # node (N = 8 to 117, median of 200; RTX 5070 Ti Laptop, sm_120, CUDA 13.3, WSL2). Not an
    # H100's: scripts/gpu_check's graph_probe stage measures it there.
    p.add_argument("--graph-node-us", type=float, default=GRAPH_NODE_US_CITED,
                   help="device time per kernel or product replayed as a node of a CUDA graph (µs; default: the "
                        "cited 0.58, measured on an RTX 5070 Ti Laptop, not an H100): each step's table adds the "
                        "overhead of the step and of a micro-batch run as bench train --graphs runs them (their "
                        "launches graph nodes but the embedding scatter's, plus one graph launch per micro-batch)")
    p.add_argument("--head-chunk-rows", type=int, default=512, help="rows of logits per head chunk (kHeadChunkRows)")
    p.add_argument("--long-fraction", type=float, default=0.125,
                   help="'trained' windows: fraction of tiles whose w exceeds T (the rest log-uniform in [2, T])")
    p.add_argument("--ttft-seq", type=int, default=100000, help="prefill length of the time-to-first-token model")
    p.add_argument("--ttft-psi", default="32,48", help="Ψ of the TTFT table, each against its matched Transformer: 8, 16, 32 or 48")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    p.add_argument("--counted", metavar="FILE",
                   help="the JSON of `multiscreen bench train --device=cuda --count --json` (the emulated build): the\n"
                        "model's launches, bytes and FLOPs per op of that model, T and B beside the counted ones")
    p.add_argument("--measured", metavar="FILE",
                   help="the JSON of `multiscreen bench train --device=cuda --op_times --json`: each op's modelled\n"
                        "time beside the device time measured for its kernels and products")
    p.add_argument("--config-dir", default=None,
                   help="where --counted and --measured find the model's textproto (default: configs/models beside "
                        "this tool)")
    args = p.parse_args(argv)
    try:
        args.psi = [int(x) for x in args.psi.split(",")]
        args.ttft_psi = [int(x) for x in args.ttft_psi.split(",")]
    except ValueError:
        p.error("--psi and --ttft-psi take comma-separated integers, e.g. --psi=16,32")
    def flag(name):
        return "--" + name.replace("_", "-")

    for name in ("peak_tflops", "hbm_tbs", "clock_ghz", "gemm_eff", "bw_eff", "fa2_eff", "mma_eff", "issue_eff",
                 "issue_scale", "launch_us", "sync_us", "long_fraction"):
        if not math.isfinite(getattr(args, name)):
            p.error(f"{flag(name)} must be a finite number, got {getattr(args, name)}")
    for name in ("seq", "micro_batch", "peak_tflops", "hbm_tbs", "sms", "clock_ghz", "head_chunk_rows", "ttft_seq"):
        if getattr(args, name) <= 0:
            p.error(f"{flag(name)} must be positive, got {getattr(args, name)}")
    for name in ("gemm_eff", "bw_eff", "fa2_eff", "mma_eff", "issue_eff"):
        if not 0 < getattr(args, name) <= 1:
            p.error(f"{flag(name)} is a fraction of a peak: it must lie in (0, 1], got {getattr(args, name)}")
    if args.graph_node_us is not None and not (math.isfinite(args.graph_node_us) and args.graph_node_us >= 0):
        p.error(f"--graph-node-us must be a finite number >= 0, got {args.graph_node_us}")
    for name in ("issue_scale", "launch_us", "sync_us"):
        if getattr(args, name) < 0:
            p.error(f"{flag(name)} must not be negative, got {getattr(args, name)}")
    if not 0 <= args.long_fraction <= 1:
        p.error(f"--long-fraction must lie in [0, 1], got {args.long_fraction}")
    for psi in args.psi + args.ttft_psi:
        if psi < 2:
            p.error(f"--psi: Ψ must be at least 2, got {psi}")
    for psi in args.ttft_psi:
        if psi not in MATCHED:
            p.error(f"--ttft-psi={psi}: no matched Transformer for Ψ = {psi} (the TTFT table has 8, 16, 32 and 48)")
    return args


# µs per replayed graph node, cited above (parse_args' --graph-node-us).
GRAPH_NODE_US_CITED = 0.58


class Hardware:
    """The device's constants and the achievable fractions, from the flags."""

    def __init__(self, a):
        self.peak = a.peak_tflops * 1e12          # FLOP/s
        self.bw = a.hbm_tbs * 1e12                # bytes/s
        self.issue_rate = a.sms * 4 * a.clock_ghz * 1e9  # warp instructions/s
        self.gemm_eff, self.bw_eff, self.fa2_eff = a.gemm_eff, a.bw_eff, a.fa2_eff
        self.mma_eff, self.issue_eff = a.mma_eff, a.issue_eff
        self.launch_s, self.sync_s = a.launch_us * 1e-6, a.sync_us * 1e-6
        graph_node_us = getattr(a, "graph_node_us", None)
        self.graph_node_s = None if graph_node_us is None else graph_node_us * 1e-6


class Op:
    """One op of the step: `calls` launches of it per step, each with `flops` executed
    tensor-core FLOPs, `bytes` of HBM traffic and `issue` warp instructions (screening
    only). kind: gemm | mem | fa2 | screen. once: run once per optimizer step however many
    micro-batches it accumulates (BeginStep, EndStep, the optimizer)."""

    def __init__(self, name, kind, calls, flops=0.0, nbytes=0.0, issue=0.0, launches=1, once=False, kernels=()):
        self.name, self.kind, self.calls, self.once = name, kind, calls, once
        self.kernels = kernels  # regular expressions of the counted names (bench train --count) it runs as
        self.flops, self.bytes, self.issue, self.launches = float(flops), float(nbytes), float(issue), launches

    def time(self, hw):
        """Seconds per call and what bounds it."""
        eff = {"gemm": hw.gemm_eff, "fa2": hw.fa2_eff, "screen": hw.mma_eff, "mem": 1.0}[self.kind]
        bounds = {"tensor": self.flops / (eff * hw.peak), "HBM": self.bytes / (hw.bw_eff * hw.bw),
                  "issue": self.issue / (hw.issue_eff * hw.issue_rate)}
        bound = max(bounds, key=bounds.get)
        return bounds[bound], bound


# ---- windows and the work of the tiled screening kernel ----------------------------

def fp32(x):
    """x rounded to the nearest fp32, as the parameters are stored."""
    return struct.unpack("f", struct.pack("f", x))[0]


def initial_windows(n_l, n_h):
    """w = e^{s_w} + 1 with s_w = log(w_th)·h/(N_H − 1), the same in every layer (spec), from
    s_w as stored (fp32), as `bench train` takes them: ⌈w⌉ of the widest tile is 258, not 257."""
    return [math.exp(fp32(math.log(W_TH) * h / (n_h - 1))) + 1.0 for _ in range(n_l) for h in range(n_h)]


def trained_windows(n_l, n_h, seq, long_fraction):
    """An assumed trained distribution: round(long_fraction·N) tiles with w = ∞ (learned w
    beyond T: the whole causal triangle in training, w = ∞ under the inference rule), the
    rest at the quantiles of a log-uniform distribution on [2, T]."""
    n = n_l * n_h
    n_long = round(long_fraction * n)
    rest = n - n_long
    return [math.inf] * n_long + [2.0 * (seq / 2.0) ** ((i + 0.5) / rest) for i in range(rest)]


def keys_of(w, seq):
    """Keys the Softmask reaches: min(⌈w⌉, T)."""
    return seq if math.isinf(w) else min(math.ceil(w), seq)


def window_pairs(keys, seq):
    """In-window (query, key) pairs of one (sequence, tile): Σ_{i<T} min(keys, i + 1)."""
    k = min(keys, seq)
    return k * (k + 1) / 2 + (seq - k) * k


def warp_steps(keys, seq):
    """16×16 steps the tiled kernel's warps run for one (sequence, tile): the warp of queries
    16a … 16a + 15 runs the key steps 16m with max(0, a − K) ≤ m ≤ a, K = ⌊(keys + 14)/16⌋
    (screening_tiled.cu's skip test), so min(a, K) + 1 steps."""
    a_count = -(-seq // 16)
    k = (keys + 14) // 16
    if a_count - 1 <= k:
        return a_count * (a_count - 1) // 2 + a_count
    return k * (k + 1) // 2 + (a_count - 1 - k) * k + a_count


def interior_steps(keys, seq):
    """Of warp_steps, those whose 256 pairs all lie inside the window (screening_tiled.cu's
    `interior` steps, which skip the per-pair window test): the warp of queries 16a … 16a + 15,
    all below T, and the key step 16m with m ≤ a − 1 and 16(a − m) + 15 < keys, so
    min(a, ⌊(keys − 16)/16⌋) of them (none when keys < 32)."""
    far, warps = max(0, (keys - 16) // 16), seq // 16  # Σ_{a < warps} min(a, far), closed form
    if warps - 1 <= far:
        return warps * (warps - 1) // 2
    return far * (far + 1) // 2 + (warps - 1 - far) * far


def screening_work(windows, seq):
    """Σ over tiles of (in-window pairs, warp steps, interior warp steps), for one sequence,
    and the warp steps and interior warp steps of the MiPE tiles among them (w < w_th: rate
    ≠ 0, so the query pass's warps run its rate arm, ISSUE_MIPE_RATE)."""
    pairs = steps = interior = mipe_steps = mipe_interior = 0
    cache = {}
    for w in windows:
        keys = keys_of(w, seq)
        if keys not in cache:
            cache[keys] = (window_pairs(keys, seq), warp_steps(keys, seq), interior_steps(keys, seq))
        p, s, i = cache[keys]
        pairs += p
        steps += s
        interior += i
        if w < W_TH:
            mipe_steps += s
            mipe_interior += i
    return pairs, steps, interior, mipe_steps, mipe_interior


# ---- Multiscreen -------------------------------------------------------------------

def multiscreen_params(psi, d_e=None):
    """total = V·d_E + N_L·N_H·(d_E·(2d_K + 3d_V) + 3) + 2 (spec), and the matrices alone;
    d_E = Ψ² unless given."""
    d = d_e or psi * psi
    tiles = psi * psi
    matrices = VOCAB * d + tiles * d * (2 * D_K + 3 * D_V)
    return {"total": matrices + tiles * 3 + 2, "matrices": matrices}


def multiscreen_model_flops(psi, seq, windows, d_e=None, tiles=None):
    """Training model FLOPs per token, trainer/flops.h: 3 × (projections, W_O, head, in-window pairs).
    d_E = Ψ² and N_L·N_H = Ψ² tiles unless given (a model whose sizes are not Ψ's)."""
    d, tiles = d_e or psi * psi, tiles or psi * psi
    per_token = tiles * (2 * d * (2 * D_K + 2 * D_V) + 2 * D_V * d) + 2 * d * VOCAB
    pairs = screening_work(windows, seq)[0]
    return 3 * (per_token + 2 * (D_K + D_V) * pairs / seq)


def gemm(m, n, k, a=None, b=None):
    """A regular expression of the counted name of a cuBLASLt product m×n×k (cuBLAS's
    column-major terms, as the emulator names it), op(A) and op(B) when given."""
    ops = (f" op\\(A\\)={a}" if a else r" op\(A\)=.") + (f" op\\(B\\)={b}" if b else "")
    return rf"^cublasLt\w* {m}x{n}x{k}{ops}"


def kernel(name, source, args=None):
    """A regular expression of a counted kernel name: the kernel of a source file, with the
    template arguments `args` (e.g. "true") when given, else any."""
    targs = rf"<{re.escape(args)}>" if args is not None else r"(<[^(]*>)?"
    return rf"(^|::){name}{targs} \({re.escape(source)}\)$"


def name_kernels(ops, table):
    """Sets each op's counted names (Op.kernels) from {op name: [regular expressions]}."""
    for op in ops:
        op.kernels = table.get(op.name, ())
    return ops


def head_ops(n, d, chunk_rows, train, vocab=None):
    """The fused chunked head of kernels/cuda/cross_entropy.h after the final norm: logits in
    chunks of chunk_rows rows (fp32), softmax statistics, ∂z → bf16 kept in a ∂Z group of
    whole chunks (plan_memory.head_group_rows: all n rows while n·V·2 bytes fit the head's
    512 MiB budget), then per group dy = ∂Z·Ē and ∂Ē += ∂Zᵀ·Y, one product each: the fp32 ∂Ē
    read and written once per group (it was once per chunk). vocab: the rows of Ē this rank
    holds (a tp shard's; default VOCAB)."""
    VOCAB = vocab or globals()["VOCAB"]
    chunks = -(-n // chunk_rows)
    group = plan_memory.head_group_rows(n, VOCAB, 2, chunk_rows)
    groups = -(-n // group)
    nv = n * VOCAB
    ops = [Op("logits z = e^{s_F}·y·Ēᵀ (GEMM, fp32 out)", "gemm", 1, 2 * n * VOCAB * d,
              n * d * 2 + chunks * VOCAB * d * 2 + nv * 4, launches=chunks),
           Op("softmax statistics (log Σ exp, target logit)", "mem", 1, 0, nv * 4, launches=chunks)]
    if train:
        ops += [Op("∂z = coef·(softmax − onehot) → bf16", "mem", 1, 0, nv * (4 + 2), launches=chunks),
                Op("dy = ∂Z·Ē (GEMM per ∂Z group)", "gemm", 1, 2 * n * VOCAB * d,
                   nv * 2 + groups * VOCAB * d * 2 + n * d * 4, launches=groups),
                Op("∂Ē += ∂Zᵀ·Y (GEMM, fp32 accumulate per ∂Z group)", "gemm", 1, 2 * n * VOCAB * d,
                   nv * 2 + n * d * 2 + groups * VOCAB * d * 4 * 2, launches=groups)]
    # cuBLAS's column-major shapes of each size of chunk and group (the last may be shorter)
    chunk_sizes = sorted({min(chunk_rows, n - r0) for r0 in range(0, n, chunk_rows)})
    group_sizes = sorted({min(group, n - g0) for g0 in range(0, n, group)})
    name_kernels(ops, {
        "logits z = e^{s_F}·y·Ēᵀ (GEMM, fp32 out)": [gemm(VOCAB, r, d, "T") for r in chunk_sizes],
        "softmax statistics (log Σ exp, target logit)": [kernel("HeadRowKernel", "cross_entropy.cu")],
        "dy = ∂Z·Ē (GEMM per ∂Z group)": [gemm(d, r, VOCAB, "N", "N") for r in group_sizes],
        "∂Ē += ∂Zᵀ·Y (GEMM, fp32 accumulate per ∂Z group)": [gemm(d, VOCAB, r, "N", "T") for r in group_sizes]})
    return ops, chunks


def multiscreen_ops(psi, seq, batch, windows, chunk_rows, issue_scale, train=True, last_row_head=False, d_e=None,
                    shard=None):
    """The ops of one step (train) or one forward (prefill), with per-step call counts.
    issue_scale scales ISSUE_PER_STEP (0: the screening kernels are bound by their
    mma.sync alone, as FA-2 is by its own measured efficiency).
    shard: one rank's part of a tp × pp layout (tools/plan.py), a dict of `layers` and
    `tiles` (the local ones; `windows` then lists the local tiles' windows), `vocab` (its
    rows of Ē), `embed` and `head` (whether it embeds, owns the head) and `params` (the
    elements its optimizer updates); None: the whole model on one rank. The tp and pp
    communication is not an op here: tools/plan.py adds it."""
    n_l = n_h = psi
    VOCAB, embed, head, params = globals()["VOCAB"], True, True, None
    if shard is not None:
        n_l, n_h, VOCAB = shard["layers"], shard["tiles"], shard["vocab"]
        embed, head, params = shard["embed"], shard["head"], shard["params"]
    d = d_e or psi * psi
    n = batch * seq
    C = 2 * D_K + 2 * D_V           # P's columns per tile: q, k, v, g
    pd, vd = n_h * C, n_h * D_V     # P's and U's widths
    pairs, steps, interior, mipe_steps, mipe_interior = screening_work(windows, seq)
    # per layer, summed over its tiles (windows differ between layers in the trained set)
    steps_l, pairs_l, interior_l = batch * steps / n_l, batch * pairs / n_l, batch * interior / n_l
    mipe_l, mipe_interior_l = batch * mipe_steps / n_l, batch * mipe_interior / n_l
    nt = n * n_h                    # (token, tile) rows of a layer
    ops = []
    if embed or head:
        ops.append(Op("Ē = unit rows of W_E → bf16 (BeginStep)", "mem", 1, 0, VOCAB * d * (4 + 2) + VOCAB * 4, once=True))
    # W_Q, W_K, W_V, W_G [tiles, d, width] into the interleaved columns of W_cat, and W_O,
    # from the fp32 parameters straight into their bf16 GEMM operands: one launch for the
    # four parts, one for W_O (KernelTable::PackJobsRounded), fp32 read once, bf16 written.
    ops.append(Op("pack W_cat, W_O from the parameters into bf16 (BeginStep)", "mem", n_l, 0,
                  (d * pd + vd * d) * (4 + 2), launches=2, once=True))
    if embed:
        ops.append(Op("x⁰ = e^{s_E}·Ē[t] (gather)", "mem", 1, 0, n * d * (2 + 4)))
    ops.append(Op("x_in = bf16(x)", "mem", n_l, 0, n * d * (4 + 2)))
    ops.append(Op("P = x_in·W_cat (GEMM)", "gemm", n_l, 2 * n * d * pd, n * d * 2 + d * pd * 2 + n * pd * P_BYTES))
    if P_ROUND_PASS:
        # RoundKernel's count also holds the head's bf16 y (one launch, n·d·8 bytes), which the
        # PLNorm op models as part of its own write: this op's counted row is that much higher.
        ops.append(Op("P rounded to bf16 in place (RoundToCompute)", "mem", n_l, 0, n * pd * P_BYTES * 2,
                      kernels=[kernel("RoundKernel", "elementwise.cu")]))
    def tiled(name, mmas, nbytes):
        issue = (steps_l - interior_l) * ISSUE_PER_STEP[mmas] + interior_l * ISSUE_PER_INTERIOR_STEP[mmas]
        rate_other, rate_interior = ISSUE_MIPE_RATE.get(mmas, (0, 0))
        issue += (mipe_l - mipe_interior_l) * rate_other + mipe_interior_l * rate_interior
        return Op(name, "screen", n_l, steps_l * MMAS_PER_STEP[mmas] * MMA_FLOPS, nbytes, issue * issue_scale)
    # screening's own arrays are fp32 as the kernels keep them (saved h; ∂h); per (token,
    # tile): P's q, k, v (96) and g (64) columns at P_BYTES, h 64 fp32, U 64 at U_BYTES
    # (bf16 since 2026-12-07: the GEMM operand itself; 4 before).
    # One launch (issue 42): the aggregate kernel normalizes and rotates the P rows it loads
    # (steps 5–6): P's q, k, v and g columns read (bf16), h and U written. Nothing else is
    # saved: the backward's passes recompute q̃, k̃, v̄ from P's columns as the forward does
    # (screening_tiled.h). Before, the forward also wrote each row's saved q̃, k̃, v̄ (fp32) and
    # 3 norms, (32 + 64 + 3) · 4 bytes per (token, tile), which the backward read back; before
    # that a separate normalize pass read P's q, k, v and wrote the saved rows, which the
    # aggregate pass read back: (32 + 64) · 4 bytes per (token, tile) and a launch per layer more.
    ops.append(tiled("screening forward, tiled (steps 5–13, normalize fused)", "forward",
                     nt * (96 * P_BYTES + 64 * P_BYTES + 64 * 4 + 64 * U_BYTES)))
    if U_PACK_PASS:
        # U rounded in place and packed into bf16 for W_O's GEMM (PackRounded: RoundPackKernel,
        # whose counted row also holds x_in's and BeginStep's Ē's packs, n·d·10 per layer and
        # V·d·10 bytes, 3 launches, which the model has inside the x_in and Ē ops).
        ops.append(Op("U → bf16 operand (PackRounded)", "mem", n_l, 0, n * vd * (U_BYTES * 2 + 2),
                      kernels=[kernel("RoundPackKernel", "gemm.cu")]))
    ops.append(Op("x += U·W_O (GEMM, β = 1 into fp32 x)", "gemm", n_l, 2 * n * vd * d,
                  n * vd * 2 + vd * d * 2 + n * d * 4 * 2))
    # The host waits (counted on the emulated device, docs/performance.md): once in BeginStep
    # for the scalars the screening kernels' tile tables are built from (s_E, s_F, every
    # layer's s_w, s_r, s_O: one DownloadRanges), and, on the rank with the head, once for the
    # loss: in training the loss summed on the device over the step's micro-batches, read once
    # per optimizer step (ModelStage::TakeLoss); without training after the head's last chunk
    # (every row's log Σ exp and target logit, read on the host).
    syncs = 1
    if head:
        ops.append(Op("PLNorm y = x/‖x‖ → fp32 and bf16", "mem", 1, 0, (1 if last_row_head else n) * d * (4 + 4 + 2)))
        head_part, chunks = head_ops(1 if last_row_head else n, d, chunk_rows, train, VOCAB)
        ops += head_part
        syncs += 1
    if train:
        if head:
            # The micro-batch's loss added to a device sum (ModelStage::HeadLossDeferred): one
            # thread reads every row's log Σ exp and target logit in the host's order, so the
            # loss keeps the host sum's bits (latency-bound on a GPU: rows dependent fp64 adds).
            ops.append(Op("loss summed on the device (one thread, rows in order)", "mem", 1, 0, n * 8 * 2 + 8,
                          kernels=[kernel("MeanLossKernel", "cross_entropy.cu")]))
            ops.append(Op("PLNorm backward", "mem", 1, 0, n * d * 4 * 3))
            # ∂s_F = Σ y·∂y: one launch, its last block adding the sum into the gradient
            # (KernelTable::DotAddInto; ∂s_E's dot, in the scatter op below, is the same kernel)
            ops.append(Op("∂s_F = Σ y·∂y (one-launch dot)", "mem", 1, 0, n * d * 4 * 2))
        ops.append(Op("bf16(∂x) for the layer's GEMMs", "mem", n_l, 0, n * d * (4 + 2)))
        ops.append(Op("∂U = ∂x·W_Oᵀ (GEMM)", "gemm", n_l, 2 * n * d * vd, n * d * 2 + vd * d * 2 + n * vd * DU_BYTES))
        # The step's first backward writes the layers' matrix gradients (β = 0, a copy:
        # Multiscreen::ZeroGradientsBeforeStep); later micro-batches add (β = 1, read back:
        # vd·d·4 more bytes here, d·pd·4 in the unpack), which "accumulating" leaves out.
        ops.append(Op("∂W_O = Uᵀ·∂x (GEMM, fp32, β = 0)", "gemm", n_l, 2 * n * d * vd,
                      n * vd * 2 + n * d * 2 + vd * d * 4))
        # The query pass runs the output pass (steps 13–11 backward) in its prologue for its own
        # rows (screening_tiled.h): it reads P's g columns, ∂U and the saved h (bf16, bf16,
        # fp32), writes ∂h (fp32, for the key pass) and ∂P's g columns, and stages its ∂h from
        # registers, where a separate pass wrote ∂h and the query pass read it back (64·4
        # bytes per (token, tile) and a launch per layer more; issue 42 part 2).
        # The query and key passes finish their rows in their epilogues (the unit-norm and
        # MiPE backward, screening_tiled.h) and write ∂P's q (k and v) columns in fp32, where
        # a separate pass read ∂q̃, ∂k̃, ∂v̄ back from scratch with q̃, k̃, v̄ (issue 42 part 2).
        # Both recompute q̃, k̃, v̄ and their norms from P's q, k, v columns (96 · P_BYTES bytes
        # per (token, tile)) as the forward does, where they read the forward's saved rows (fp32)
        # and norms: 32 · 4 + 64 · 4 + 1 · 4 (query pass) and 32 · 4 + 64 · 4 + 2 · 4 (key pass).
        # ∂P's g, q (k, v) columns at DP_BYTES; the per-token parts are kScreeningParts = 4
        # fp64 (scale, r, w, rate: kernels/cuda/screening.h; the model had 5 until 2026-12-07).
        ops.append(tiled("screening backward, tiled query pass (gate, TanhNorm → ∂h, ∂g; ∂q̃ → ∂P, ∂r, ∂w parts)",
                         "query", nt * (64 * P_BYTES + 64 * DU_BYTES + 64 * 4 + 64 * 4 + 64 * DP_BYTES
                                        + 96 * P_BYTES + 16 * DP_BYTES + 4 * 8)))
        ops.append(tiled("screening backward, tiled key pass (∂k̃, ∂v̄ → ∂P)", "key",
                         nt * (96 * P_BYTES + 64 * 4 + 16 * DP_BYTES + 64 * DP_BYTES)))
        # the sums per (sequence, tile) of the per-token parts (4 fp64), then ∂s_w, ∂s_r,
        # ∂s_O from them on the device
        ops.append(Op("screening backward: tile-scalar sums", "mem", n_l, 0, nt * 4 * 8, launches=2))
        if DP_PACK_PASS:
            # ∂P (fp32) into its bf16 GEMM operand (PackAsGemm: PackKernel, counted with the
            # other packs under x_in's op: no kernel named here).
            ops.append(Op("bf16(∂P) for the projections' GEMMs", "mem", n_l, 0, n * pd * (DP_BYTES + 2)))
        ops.append(Op("∂W_cat = x_inᵀ·∂P (GEMM, fp32)", "gemm", n_l, 2 * n * d * pd,
                      n * d * 2 + n * pd * 2 + d * pd * 4))
        # ∂W_cat written into the four gradients: one launch (KernelTable::Copy2DJobs)
        ops.append(Op("unpack ∂W_cat into the gradients", "mem", n_l, 0, d * pd * 4 * 2))
        ops.append(Op("∂x += ∂P·W_catᵀ (GEMM, β = 1)", "gemm", n_l, 2 * n * pd * d,
                      n * pd * 2 + d * pd * 2 + n * d * 4 * 2))
        if embed:
            ops.append(Op("∂Ē[t] += e^{s_E}·∂x⁰ (scatter) and ∂s_E", "mem", 1, 0,
                          n * d * (4 + 4 + 4) + n * d * (2 + 4 + 4), launches=3))
        if embed or head:
            ops.append(Op("∂W_E = unit-rows backward (EndStep)", "mem", 1, 0, VOCAB * d * 4 * 3, once=True))
        if params is None:
            params = multiscreen_params(psi, d_e)["total"]
        # What no backward writes first: s_E, s_F and every layer's s_w, s_r, s_O, in one
        # launch from a zero scalar (the counted Copy2DJobsKernel<false> it shares with the
        # unpack is matched to the unpack, the op before: this one counts none).
        ops.append(Op("zero ∂s_E, ∂s_F and the tile scalars' gradients", "mem", 1, 0,
                      ((1 if embed else 0) + (1 if head else 0) + 3 * n_h * n_l) * 4 + 4, once=True))
        ops.append(Op("AdamW (fp32 master, m, v)", "mem", 1, 0, params * 28, once=True))
        # ... and once at the step's end, for the gradient norm the trainer reads (clipping,
        # the metrics, the loss scale's check); `bench train` waits there for its timer.
        # The tile-scalar gradients and ∂s_E, ∂s_F stay on the device (issue 42 part 2).
        syncs += 1
    name_kernels([op for op in ops if not op.kernels], {
        "Ē = unit rows of W_E → bf16 (BeginStep)": [kernel("ForwardKernel", "unit_rows.cu")],
        "pack W_cat, W_O from the parameters into bf16 (BeginStep)": [
            kernel("Copy2DJobsRoundPackKernel", "elementwise.cu", "__nv_bfloat16")],
        "x⁰ = e^{s_E}·Ē[t] (gather)": [kernel("GatherKernel", "embedding.cu")],
        # x_in's pack is PackRounded's RoundPackKernel (its counted row also holds BeginStep's Ē;
        # U's op names it while U_PACK_PASS); PackKernel is ∂x's and ∂P's packs (PackAsGemm)
        "x_in = bf16(x)": [kernel("PackKernel", "gemm.cu")]
                          + ([] if U_PACK_PASS else [kernel("RoundPackKernel", "gemm.cu")]),
        "P = x_in·W_cat (GEMM)": [gemm(pd, n, d, "N", "N")],
        # the simple kernels' forward (fp32, fp16 and other widths) is two: normalize, aggregate
        "screening forward, tiled (steps 5–13, normalize fused)": [
            kernel("TiledAggregateKernel", "screening_tiled.cu"), kernel("NormalizeKernel", "screening.cu"),
            kernel("AggregateKernel", "screening.cu")],
        "x += U·W_O (GEMM, β = 1 into fp32 x)": [gemm(d, n, vd, "N", "N")],
        "∂U = ∂x·W_Oᵀ (GEMM)": [gemm(vd, n, d, "T", "N")],
        "∂W_O = Uᵀ·∂x (GEMM, fp32, β = 0)": [gemm(d, vd, n, "N", "T")],
        # the simple kernels' backward (fp32, fp16 and other widths) runs the output pass apart
        "screening backward, tiled query pass (gate, TanhNorm → ∂h, ∂g; ∂q̃ → ∂P, ∂r, ∂w parts)": [
            kernel("TiledQueryBackwardKernel", "screening_tiled.cu"), kernel("OutputBackwardKernel", "screening.cu"),
            kernel("QueryBackwardKernel", "screening.cu")],
        "screening backward, tiled key pass (∂k̃, ∂v̄ → ∂P)": [kernel("TiledKeyBackwardKernel", "screening_tiled.cu"),
                                                        kernel("KeyBackwardKernel", "screening.cu")],
        "screening backward: tile-scalar sums": [kernel("ReducePartsKernel", "screening.cu"),
                                                 kernel("TileScalarParamGradsKernel", "screening.cu")],
        "∂W_cat = x_inᵀ·∂P (GEMM, fp32)": [gemm(pd, d, n, "N", "T")],
        "unpack ∂W_cat into the gradients": [kernel("Copy2DJobsKernel", "elementwise.cu")],
        "∂x += ∂P·W_catᵀ (GEMM, β = 1)": [gemm(d, n, pd, "T", "N")],
        "∂Ē[t] += e^{s_E}·∂x⁰ (scatter) and ∂s_E": [kernel("ScatterKernel", "embedding.cu")],
        "∂W_E = unit-rows backward (EndStep)": [kernel("BackwardKernel", "unit_rows.cu")],
        # both dot products' launches (∂s_F's and ∂s_E's: one kernel name) count here
        "∂s_F = Σ y·∂y (one-launch dot)": [kernel("ReduceKernel", "elementwise.cu")],
        "AdamW (fp32 master, m, v)": [kernel("AdamWKernel", "adamw.cu")]})
    return ops, syncs, pairs, steps


# ---- the Transformer baseline ------------------------------------------------------

def transformer_dims(name):
    n_l, n_h, d = TRANSFORMERS[name]
    return n_l, n_h, d, (8 * d) // 3


def transformer_params(name):
    """V·d + N_L·(4d² + 3·d·⌊8d/3⌋ + 2d) (spec)."""
    n_l, _, d, f = transformer_dims(name)
    return {"total": VOCAB * d + n_l * (4 * d * d + 3 * d * f + 2 * d), "matrices": VOCAB * d + n_l * (4 * d * d + 3 * d * f)}


def transformer_model_flops(name, seq):
    """Training model FLOPs per token, trainer/flops.h: 3 × (8d² + 6·d·d_ff + 2d(T + 1)) per layer + 2dV."""
    n_l, _, d, f = transformer_dims(name)
    return 3 * (n_l * (8 * d * d + 6 * d * f + 2 * d * (seq + 1)) + 2 * d * VOCAB)


def transformer_ops(name, seq, batch, chunk_rows, train=True, last_row_head=False, shard=None):
    """LLaMA-style pre-norm layers as model/transformer.cc runs them, FlashAttention-2 for
    the attention (causal; FLOPs as the FA papers count them: forward 4·T²·d_head·H/2,
    backward 2.5 × forward), RoPE fused into it at head width FUSED_ROPE_HEAD, else passes
    over copies of q and k (and ∂q, ∂k).
    shard: one rank's part of a tp × pp layout (tools/plan.py), as multiscreen_ops takes it
    (`tiles` the local heads; the local hidden units follow them, F·heads/N_H); None: the whole
    model on one rank. The tp and pp communication is not an op here."""
    n_l, n_h, d, f = transformer_dims(name)
    d_h = d // n_h
    VOCAB, embed, head, params = globals()["VOCAB"], True, True, transformer_params(name)["total"]
    h_l, f_l = n_h, f
    if shard is not None:
        n_l, h_l, VOCAB = shard["layers"], shard["tiles"], shard["vocab"]
        f_l = h_l * f // n_h
        embed, head, params = shard["embed"], shard["head"], shard["params"]
    d_l = h_l * d_h                 # the local heads' width (d on one rank)
    n = batch * seq
    fa_fwd = batch * 4 * seq * seq * d_l / 2
    fused = d_h == FUSED_ROPE_HEAD
    table = seq * FUSED_ROPE_HEAD * 4 if fused else 0  # the cos/sin table the fused kernels read
    rope = ", RoPE fused" if fused else ""
    rope_pass = [] if fused else [Op("RoPE on copies of q, k", "mem", n_l, 0, n * 2 * d_l * (2 + 2))]
    ops = [Op("W_E fp32 → bf16 (BeginStep)", "mem", 1, 0, VOCAB * d * (4 + 2), once=True)] if embed or head else []
    ops += [Op("layer weights fp32 → bf16 (BeginStep)", "mem", n_l, 0, (4 * d * d_l + 3 * d * f_l) * (4 + 2), launches=4,
               once=True)]
    if embed:
        ops.append(Op("x⁰ = W_E[t] (gather)", "mem", 1, 0, n * d * (2 + 4)))
    ops += [Op("RMSNorm → bf16 (×2 per layer)", "mem", 2 * n_l, 0, n * d * (4 + 2)),
            Op("qkv = a·W_qkv (GEMM)", "gemm", n_l, 2 * n * d * 3 * d_l, n * d * 2 + 3 * d_l * d * 2 + n * 3 * d_l * 2),
            *rope_pass,
            Op(f"FlashAttention-2 forward (causal{rope})", "fa2", n_l, fa_fwd, n * 4 * d_l * 2 + n * h_l * 4 + table),
            Op("x += o·W_O (GEMM, β = 1)", "gemm", n_l, 2 * n * d_l * d, n * d_l * 2 + d * d_l * 2 + n * d * 4 * 2),
            Op("[gate|up] = a·W_gu (GEMM)", "gemm", n_l, 2 * n * d * 2 * f_l, n * d * 2 + 2 * f_l * d * 2 + n * 2 * f_l * 2),
            Op("SwiGLU", "mem", n_l, 0, n * (2 * f_l * 2 + f_l * 2)),
            Op("x += h·W_down (GEMM, β = 1)", "gemm", n_l, 2 * n * f_l * d, n * f_l * 2 + f_l * d * 2 + n * d * 4 * 2)]
    syncs = 0
    if head:
        ops.append(Op("final RMSNorm → fp32 and bf16", "mem", 1, 0, (1 if last_row_head else n) * d * (4 + 4 + 2)))
        head_part, chunks = head_ops(1 if last_row_head else n, d, chunk_rows, train, VOCAB)
        ops += head_part
        syncs = chunks
    if train:
        if head:
            ops.append(Op("final RMSNorm backward", "mem", 1, 0, n * d * 4 * 3))
        ops += [Op("bf16(∂x) for the GEMMs (×2 per layer)", "mem", 2 * n_l, 0, n * d * (4 + 2)),
                Op("∂h = ∂x·W_downᵀ; ∂W_down += hᵀ·∂x (GEMMs)", "gemm", n_l, 2 * 2 * n * f_l * d,
                   n * d * 2 * 2 + f_l * d * 2 + n * f_l * 2 * 2 + f_l * d * 4 * 2, launches=2),
                Op("SwiGLU backward", "mem", n_l, 0, n * (2 * f_l * 2 + f_l * 2 + 2 * f_l * 2)),
                Op("∂a = ∂gu·W_guᵀ; ∂W_gu += ∂guᵀ·a (GEMMs)", "gemm", n_l, 2 * 2 * n * 2 * f_l * d,
                   n * 2 * f_l * 2 * 2 + 2 * f_l * d * 2 + n * d * 2 * 2 + 2 * f_l * d * 4 * 2, launches=2),
                Op("RMSNorm backward (×2 per layer)", "mem", 2 * n_l, 0, n * d * 4 * 4),
                Op("∂o = ∂x·W_Oᵀ; ∂W_O += oᵀ·∂x (GEMMs)", "gemm", n_l, 2 * 2 * n * d * d_l,
                   n * d * 2 * 2 + n * d_l * 2 * 2 + d * d_l * 2 + d * d_l * 4 * 2, launches=2),
                *rope_pass,
                Op(f"FlashAttention-2 backward (causal{rope})", "fa2", n_l, 2.5 * fa_fwd,
                   n * d_l * 2 * 5 + n * h_l * 4 + n * d_l * 4 * 2 + n * 3 * d_l * 2 + 2 * table, launches=3),
                *[Op("RoPE backward on ∂q, ∂k", "mem", n_l, 0, n * 2 * d_l * (2 + 2)) for _ in rope_pass],
                Op("∂a = ∂qkv·W_qkvᵀ; ∂W_qkv += aᵀ·∂qkv (GEMMs)", "gemm", n_l, 2 * 2 * n * 3 * d_l * d,
                   n * 3 * d_l * 2 * 2 + 3 * d_l * d * 2 + n * d * 2 * 2 + 3 * d_l * d * 4 * 2, launches=2)]
        if embed:
            ops.append(Op("∂W_E[t] += ∂x⁰ (scatter)", "mem", 1, 0, n * d * (4 + 4 + 4)))
        ops += [Op("zero the gradients", "mem", 1, 0, params * 4, once=True),
                Op("AdamW (fp32 master, m, v)", "mem", 1, 0, params * 28, once=True)]
    name_kernels([op for op in ops if not op.kernels], {
        "W_E fp32 → bf16 (BeginStep)": [kernel("RoundPackKernel", "gemm.cu")],
        "x⁰ = W_E[t] (gather)": [kernel("GatherKernel", "embedding.cu")],
        "RMSNorm → bf16 (×2 per layer)": [kernel("ForwardKernel", "rms_norm.cu")],
        "qkv = a·W_qkv (GEMM)": [gemm(3 * d, n, d, "N", "N")],
        f"FlashAttention-2 forward (causal{rope})": [kernel("AttentionTiledForwardKernel", "attention_tiled.cu"),
                                                     kernel("ForwardKernel", "attention.cu")],
        "x += o·W_O (GEMM, β = 1)": [gemm(d, n, d, "N", "N")],
        "[gate|up] = a·W_gu (GEMM)": [gemm(2 * f, n, d)],
        "SwiGLU": [kernel("ForwardKernel", "swiglu.cu")],
        "x += h·W_down (GEMM, β = 1)": [gemm(d, n, f, "N", "N")],
        "final RMSNorm → fp32 and bf16": [],
        "RoPE on copies of q, k": [kernel("RopeKernel", "rope.cu")],
        "∂h = ∂x·W_downᵀ; ∂W_down += hᵀ·∂x (GEMMs)": [gemm(f, n, d), gemm(d, f, n)],
        "SwiGLU backward": [kernel("BackwardKernel", "swiglu.cu")],
        "∂a = ∂gu·W_guᵀ; ∂W_gu += ∂guᵀ·a (GEMMs)": [gemm(d, n, 2 * f), gemm(d, 2 * f, n)],
        "RMSNorm backward (×2 per layer)": [kernel("BackwardKernel", "rms_norm.cu"),
                                            kernel("GainPartialKernel", "rms_norm.cu"),
                                            kernel("GainSumKernel", "rms_norm.cu")],
        "∂o = ∂x·W_Oᵀ; ∂W_O += oᵀ·∂x (GEMMs)": [gemm(d, n, d, "T", "N"), gemm(d, d, n, "N", "T")],
        f"FlashAttention-2 backward (causal{rope})": [
            kernel("AttentionTiledQueryBackwardKernel", "attention_tiled.cu"),
            kernel("AttentionTiledKeyBackwardKernel", "attention_tiled.cu"), kernel("DeltaKernel", "attention.cu"),
            kernel("QueryGradKernel", "attention.cu"), kernel("KeyValueGradKernel", "attention.cu"),
            kernel("ScaleGradKernel", "attention.cu")],
        "∂a = ∂qkv·W_qkvᵀ; ∂W_qkv += aᵀ·∂qkv (GEMMs)": [gemm(d, n, 3 * d), gemm(3 * d, d, n)],
        "∂W_E[t] += ∂x⁰ (scatter)": [kernel("ScatterKernel", "embedding.cu")],
        "zero the gradients": [kernel("FillKernel", "elementwise.cu")],
        "AdamW (fp32 master, m, v)": [kernel("AdamWKernel", "adamw.cu")]})
    return ops, syncs


# ---- totals and tables -------------------------------------------------------------

def totals(ops, syncs, hw):
    """Step seconds: Σ calls·(roofline time + launch gap) + host syncs."""
    rows, t, once = [], 0.0, 0.0
    launches = 0
    for op in ops:
        per_call, bound = op.time(hw)
        total = op.calls * per_call
        launches += op.calls * op.launches
        t += total
        once += total if op.once else 0.0
        rows.append({"op": op.name, "calls": op.calls, "gflop": op.calls * op.flops / 1e9,
                     "mb": op.calls * op.bytes / 1e6, "bound": bound, "ms": total * 1e3})
    overhead = launches * hw.launch_s + syncs * hw.sync_s
    return rows, t, overhead, launches, once


# The ops whose launch `bench train --graphs` leaves outside the graph (kernels/cuda/embedding.h:
# the scatter's grid and CSR depend on the ids), each with how many of its launches stay direct.
UNCAPTURED_LAUNCHES = {"∂Ē[t] += e^{s_E}·∂x⁰ (scatter) and ∂s_E": 1}


def graphed_launches(ops):
    """(graph nodes, launches left outside) of one micro-batch run as `bench train --graphs`
    runs it: its ops' launches (all but the once-per-step ops) as nodes of one graph, but the
    embedding scatter's; the cudaGraphLaunch itself not included."""
    launches = sum(op.calls * op.launches for op in ops if not op.once)
    direct = sum(op.calls * UNCAPTURED_LAUNCHES.get(op.name, 0) for op in ops if not op.once)
    return launches - direct, direct


def graphed_micro_overhead(ops, hw):
    """Launch overhead of one micro-batch run as `bench train --graphs` runs it (seconds): its
    graph nodes at hw.graph_node_s each, the scatter's launch and the cudaGraphLaunch at
    hw.launch_s each; no host wait (the step's waits are once per step). The host's capture and
    cudaGraphExecUpdate (once per step and graph) are not charged: they run while the device
    works through the micro-batch before."""
    nodes, direct = graphed_launches(ops)
    return nodes * hw.graph_node_s + (direct + 1) * hw.launch_s


def step_report(kind, label, ops, syncs, model_flops_per_token, tokens, hw):
    rows, busy, overhead, launches, once = totals(ops, syncs, hw)
    step = busy + overhead
    micro = step - once  # a micro-batch's share when many accumulate into one optimizer step
    model_flops = model_flops_per_token * tokens
    return {"model": label, "kind": kind, "ops": rows, "busy_ms": busy * 1e3, "overhead_ms": overhead * 1e3,
            "launches": launches, "syncs": syncs, "step_ms": step * 1e3, "tokens_per_s": tokens / step,
            "model_flops_per_token": model_flops_per_token, "model_tflop": model_flops / 1e12,
            "executed_tflop": sum(r["gflop"] for r in rows) / 1e3, "mfu": model_flops / (step * hw.peak),
            "micro_ms": micro * 1e3, "mfu_accumulating": model_flops / (micro * hw.peak),
            **graphed_report(ops, syncs, step, micro, model_flops, launches, hw)}


def graphed_report(ops, syncs, step, micro, model_flops, launches, hw):
    """With a node cost (--graph-node-us): the step (one micro-batch, G = 1) and an accumulated
    micro-batch as `bench train --graphs` runs them, the micro-batch one graph: the step keeps
    its once-per-step launches and waits; a micro-batch leaves them out, as "accumulating" does."""
    if hw.graph_node_s is None or kind_has_no_graph(ops):
        return {}
    once_launches = sum(op.calls * op.launches for op in ops if op.once)
    eager = (launches - once_launches) * hw.launch_s  # the micro-batch's launches, uncaptured
    graphed = graphed_micro_overhead(ops, hw)
    micro_graphed = micro - eager + graphed  # the step's waits and once-per-step launches stay, as in micro
    step_overhead = launches * hw.launch_s + syncs * hw.sync_s
    step_overhead_graphed = once_launches * hw.launch_s + graphed + syncs * hw.sync_s
    step_graphed = step - step_overhead + step_overhead_graphed
    return {"graph_node_us": hw.graph_node_s * 1e6, "micro_overhead_ms": eager * 1e3,
            "micro_overhead_graphed_ms": graphed * 1e3, "micro_ms_graphed": micro_graphed * 1e3,
            "mfu_accumulating_graphed": model_flops / (micro_graphed * hw.peak),
            "overhead_graphed_ms": step_overhead_graphed * 1e3, "step_ms_graphed": step_graphed * 1e3,
            "mfu_graphed": model_flops / (step_graphed * hw.peak)}


def kind_has_no_graph(ops):
    """The Transformer's step (no scatter op of Multiscreen's) runs uncaptured (bench train --graphs)."""
    return not any(op.name in UNCAPTURED_LAUNCHES for op in ops)


def print_step(r):
    print(f"\n### {r['model']}\n")
    print("| op | calls | GFLOP (executed) | HBM MB | bound | modelled ms | measured ms |")
    print("|---|---|---|---|---|---|---|")
    for o in r["ops"]:
        print(f"| {o['op']} | {o['calls']} | {o['gflop']:,.1f} | {o['mb']:,.1f} | {o['bound']} | "
              f"{o['ms']:.3f} | |")
    print(f"| launch gaps ({r['launches']} launches) and host syncs ({r['syncs']}) | | | | | {r['overhead_ms']:.3f} | |")
    print(f"| **step** | | {r['executed_tflop'] * 1e3:,.0f} | | | **{r['step_ms']:.2f}** | |")
    print(f"\nmodel FLOPs {r['model_tflop']:.3f} TFLOP/step ({r['model_flops_per_token']:.4g} per token), "
          f"{r['tokens_per_s']:,.0f} tokens/s, **MFU {100 * r['mfu']:.1f} %**; without the once-per-step ops "
          f"(many micro-batches per optimizer step) {r['micro_ms']:.2f} ms, MFU {100 * r['mfu_accumulating']:.1f} %")
    if "micro_ms_graphed" in r:
        source = ("cited: RTX 5070 Ti Laptop, not H100" if abs(r["graph_node_us"] - GRAPH_NODE_US_CITED) < 1e-9
                  else "as given")
        print(f"\nwith every micro-batch as one CUDA graph (bench train --graphs) at {r['graph_node_us']:g} µs per "
              f"node ({source}; --graph-node-us): launch gaps and syncs per step "
              f"{r['overhead_ms']:.3f} → {r['overhead_graphed_ms']:.3f} ms, step {r['step_ms_graphed']:.2f} ms, "
              f"MFU {100 * r['mfu_graphed']:.1f} %; per accumulated micro-batch {r['micro_overhead_ms']:.3f} → "
              f"{r['micro_overhead_graphed_ms']:.3f} ms, {r['micro_ms_graphed']:.2f} ms, "
              f"MFU accumulating {100 * r['mfu_accumulating_graphed']:.1f} %")


def ttft(psi, seq, windows, chunk_rows, issue_scale, hw):
    """Prefill (one forward, B = 1, logits of the last token only) of Multiscreen Ψ:
    (seconds, the screening part)."""
    ops, syncs, _, _ = multiscreen_ops(psi, seq, 1, windows, chunk_rows, issue_scale, train=False,
                                       last_row_head=True)
    _, busy, overhead, _, _ = totals(ops, syncs, hw)
    return busy + overhead, sum(op.calls * op.time(hw)[0] for op in ops if op.kind == "screen")


def transformer_ttft(name, seq, chunk_rows, hw):
    """The same for the Transformer: (seconds, the FlashAttention-2 part)."""
    ops, syncs = transformer_ops(name, seq, 1, chunk_rows, train=False, last_row_head=True)
    _, busy, overhead, _, _ = totals(ops, syncs, hw)
    return busy + overhead, sum(op.calls * op.time(hw)[0] for op in ops if op.kind == "fa2")


# ---- the model beside the emulated device's counts (--counted) ------------------------

def read_model_config(name, config_dir):
    """The architecture fields of configs/models/NAME.textproto (top-level `key: value` lines)."""
    path = os.path.join(config_dir, name + ".textproto")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise SystemExit(f"perf_model.py: model {name!r}: cannot read {path}: {e.strerror}")
    fields = {}
    for line in text.splitlines():
        m = re.match(r"\s*([a-z_]+)\s*:\s*\"?([^\"#]+?)\"?\s*(#.*)?$", line)
        if m:
            fields[m.group(1)] = m.group(2)
    return fields


def use_architecture(vocab, d_k, d_v, w_th):
    """Sets the architecture constants the op functions read (the paper's by default)."""
    global VOCAB, D_K, D_V, W_TH
    VOCAB, D_K, D_V, W_TH = vocab, d_k, d_v, w_th


def model_ops_for(counted, config_dir):
    """The model's ops, host synchronizations and label for the model, T, B and head chunk of a
    `bench train --count --json` result."""
    cfg = read_model_config(counted["model"], config_dir)
    seq, batch, chunk = counted["seq_len"], counted["micro_batch"], counted["head_chunk_rows"]
    vocab = int(cfg["vocab"])
    if cfg.get("family", "MULTISCREEN") == "TRANSFORMER":
        n_l, n_h, d = int(cfg["n_layers"]), int(cfg["n_heads"]), int(cfg["d_e"])
        use_architecture(vocab, D_K, D_V, W_TH)
        TRANSFORMERS[counted["model"]] = (n_l, n_h, d)
        ops, syncs = transformer_ops(counted["model"], seq, batch, chunk)
        return ops, syncs
    psi = int(cfg["psi"])
    d_e = int(cfg.get("d_e", psi * psi))
    use_architecture(vocab, int(cfg.get("d_k", 16)), int(cfg.get("d_v", 64)), float(cfg.get("w_th", 256)))
    ops, syncs, _, _ = multiscreen_ops(psi, seq, batch, initial_windows(psi, psi), chunk, 1.0, d_e=d_e)
    return ops, syncs


def compare_counted(counted, ops, syncs):
    """Rows of (model op, its launches/bytes/FLOPs, the counted ones of the kernels and
    products it names), then the counted rows no op names, and the totals."""
    rows = [dict(r, op=None) for r in counted["counted"]["ops"]]
    out = []
    for op in ops:
        mine = [r for r in rows if r["op"] is None and any(re.search(k, r["name"]) for k in op.kernels)]
        for r in mine:
            r["op"] = op.name
        out.append({"op": op.name, "model_launches": op.calls * op.launches, "model_bytes": op.calls * op.bytes,
                    "model_flops": op.calls * op.flops,
                    "counted_launches": sum(r["calls"] for r in mine if r["kind"] in ("kernel", "library", "memset")),
                    "counted_bytes": sum(r["bytes_read"] + r["bytes_written"] for r in mine),
                    "counted_flops": sum(r["gemm_flops"] + r["mma_flops"] for r in mine),
                    "kernels": sorted(r["name"] for r in mine)})
    unmatched = [r for r in rows if r["op"] is None and r["kind"] in ("kernel", "library", "memset")]
    totals = counted["counted"]["totals"]
    c = {"ops": out, "unmatched": unmatched, "model_syncs": syncs, "counted_syncs": totals["syncs"],
         "model_launches": sum(o["model_launches"] for o in out),
         "counted_launches": sum(r["calls"] for r in rows if r["kind"] in ("kernel", "library", "memset"))}
    if counted.get("graphs"):
        # bench train --graphs (G = 1): the micro-batch's launches as nodes of one graph, the rest
        # (the once-per-step ops', the scatter's) launched by the host, and one cudaGraphLaunch.
        nodes, _ = graphed_launches(ops)
        counted_nodes = sum(r["graph_nodes"] for r in rows if r["kind"] in ("kernel", "library", "memset"))
        c.update(model_graph_nodes=nodes, counted_graph_nodes=counted_nodes,
                 model_direct_launches=c["model_launches"] - nodes,
                 counted_direct_launches=c["counted_launches"] - counted_nodes, model_graph_launches=1,
                 counted_graph_launches=sum(r["calls"] for r in rows if r["name"] == "cudaGraphLaunch"))
    return c


def print_counted(c, label):
    print(f"### {label}: the model beside the emulated device's counts (one step)\n")
    print("| op | launches (model) | launches (counted) | MB (model) | MB (counted) | GFLOP (model) | GFLOP (counted) |")
    print("|---|---|---|---|---|---|---|")
    for o in c["ops"]:
        print(f"| {o['op']} | {o['model_launches']:g} | {o['counted_launches']} | {o['model_bytes'] / 1e6:.4f} | "
              f"{o['counted_bytes'] / 1e6:.4f} | {o['model_flops'] / 1e9:.4f} | {o['counted_flops'] / 1e9:.4f} |")
    for r in c["unmatched"]:
        print(f"| (not in the model) {r['name']} | — | {r['calls']} | — | {(r['bytes_read'] + r['bytes_written']) / 1e6:.4f} "
              f"| — | {(r['gemm_flops'] + r['mma_flops']) / 1e9:.4f} |")
    print(f"| **launches** | {c['model_launches']:g} | {c['counted_launches']} | | | | |")
    if "model_graph_nodes" in c:
        print(f"| of them graph nodes (--graphs) | {c['model_graph_nodes']:g} | {c['counted_graph_nodes']} | | | | |")
        print(f"| of them launched by the host | {c['model_direct_launches']:g} | {c['counted_direct_launches']} "
              "| | | | |")
        print(f"| **graph launches** | {c['model_graph_launches']} | {c['counted_graph_launches']} | | | | |")
    print(f"| **host synchronizations** | {c['model_syncs']} | {c['counted_syncs']} | | | | |")


def compare_measured(bench, ops, syncs, hw):
    """Rows of (model op, modelled ms, measured ms: the summed device time of the kernels and
    products it names, None when none ran), then the timed rows no op names, and the totals:
    the ops' modelled busy time beside the measured kernels' sum, the modelled launch and
    synchronization overhead (not measured by events)."""
    rows = [dict(r, op=None) for r in bench["op_times"]["ops"]]
    out = []
    for op in ops:
        mine = [r for r in rows if r["op"] is None and any(re.search(k, r["name"]) for k in op.kernels)]
        for r in mine:
            r["op"] = op.name
        modelled = op.calls * op.time(hw)[0] * 1e3
        measured = sum(r["ms"] for r in mine) if mine else None
        out.append({"op": op.name, "modelled_ms": modelled, "measured_ms": measured,
                    "measured_over_modelled": measured / modelled if measured is not None and modelled > 0 else None,
                    "calls": sum(r["calls"] for r in mine), "kernels": sorted(r["name"] for r in mine)})
    _, busy, overhead, launches, _ = totals(ops, syncs, hw)
    return {"ops": out, "unmatched": [r for r in rows if r["op"] is None], "modelled_busy_ms": busy * 1e3,
            "measured_ms": bench["op_times"]["total_ms"], "modelled_overhead_ms": overhead * 1e3,
            "model_launches": launches, "measured_calls": sum(r["calls"] for r in rows)}


def print_measured(c, label):
    print(f"### {label}: the model beside the device's time (CUDA events around each call, one step)\n")
    print("| op | modelled ms | measured ms | measured / modelled |")
    print("|---|---|---|---|")
    for o in c["ops"]:
        measured = "—" if o["measured_ms"] is None else f"{o['measured_ms']:.3f}"
        ratio = "—" if o["measured_over_modelled"] is None else f"{o['measured_over_modelled']:.2f}×"
        print(f"| {o['op']} | {o['modelled_ms']:.3f} | {measured} | {ratio} |")
    for r in c["unmatched"]:
        print(f"| (not in the model) {r['name']} | — | {r['ms']:.3f} | — |")
    ratio = c["measured_ms"] / c["modelled_busy_ms"] if c["modelled_busy_ms"] > 0 else float("nan")
    print(f"| **kernels and products** | {c['modelled_busy_ms']:.3f} | {c['measured_ms']:.3f} | {ratio:.2f}× |")
    print(f"| launch gaps ({c['model_launches']} launches) and host syncs (modelled, not timed by events) | "
          f"{c['modelled_overhead_ms']:.3f} | | |")


def read_bench_json(path, flag, field, how):
    """The last JSON object of a `bench train --json` output file that holds `field`."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        raise SystemExit(f"perf_model.py {flag}={path}: cannot read: {e.strerror}")
    found = None
    for line in text.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if isinstance(v, dict) and field in v:
            found = v
    if found is None:
        try:
            v = json.loads(text)
            found = v if isinstance(v, dict) and field in v else None
        except ValueError:
            pass
    if found is None:
        raise SystemExit(f"perf_model.py {flag}={path}: no JSON object with {field!r} (the output of {how})")
    return found


def beside_model(a, run, compare, print_table, label_tail=""):
    """--counted and --measured: the model's ops for `run`'s model, T, B and head chunk (a
    `bench train --json` result), compare(ops, syncs) beside them, printed as JSON or by
    print_table(result, label); the result."""
    config_dir = a.config_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models")
    ops, syncs = model_ops_for(run, config_dir)
    c = compare(ops, syncs)
    if a.json:
        json.dump(c, sys.stdout, indent=1, ensure_ascii=False)
        print()
    else:
        print_table(c, f"{run['model']}, T = {run['seq_len']}, B = {run['micro_batch']}, {run['precision']}{label_tail}")
    return c


def one_micro_batch(bench, flag, what):
    """Refuses, in one line, a bench JSON of more than one micro-batch a step: the model's
    ops are one micro-batch's (and the step's once-per-step ops), so a step of G of them,
    captured as graphs or not, would sit beside a model of a G-th of its work."""
    g = bench.get("grad_accum", 1)
    if g != 1:
        raise SystemExit(f"perf_model.py {flag}: {what} with --grad_accum={g}{' and --graphs' if bench.get('graphs') else ''}"
                         f": the model is of one micro-batch a step; run bench train with --grad_accum=1")


def main(argv=None):
    a = parse_args(argv)
    if a.measured is not None:
        how = "`multiscreen bench train --device=cuda --op_times --json`"
        bench = read_bench_json(a.measured, "--measured", "op_times", how)
        times = bench["op_times"]
        rows_ok = isinstance(times, dict) and isinstance(times.get("ops"), list) and all(
            isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("calls"), int)
            and isinstance(r.get("ms"), (int, float)) and r["calls"] >= 0 and r["ms"] >= 0 for r in times["ops"])
        fields_ok = all(isinstance(bench.get(k), str) for k in ("model", "precision")) and all(
            isinstance(bench.get(k), int) and bench[k] > 0 for k in ("seq_len", "micro_batch", "head_chunk_rows"))
        if not (rows_ok and fields_ok and isinstance(times.get("total_ms"), (int, float))):
            raise SystemExit(f"perf_model.py --measured={a.measured}: not the output of {how} (its op_times rows, "
                             "model, precision, seq_len, micro_batch or head_chunk_rows are missing or malformed)")
        one_micro_batch(bench, f"--measured={a.measured}", "timed")
        return beside_model(a, bench, lambda ops, syncs: compare_measured(bench, ops, syncs, Hardware(a)),
                            print_measured, f", {bench.get('device', 'device')}")
    if a.counted is not None:
        try:
            counted = json.load(open(a.counted, encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SystemExit(f"perf_model.py --counted={a.counted}: not a readable JSON file: {e}")
        if "counted" not in counted:
            raise SystemExit(f"perf_model.py --counted={a.counted}: no 'counted' object (the output of "
                             "`multiscreen bench train --device=cuda --count --json` in the emulated build)")
        one_micro_batch(counted, f"--counted={a.counted}", "counted")
        return beside_model(a, counted, lambda ops, syncs: compare_counted(counted, ops, syncs), print_counted)
    hw = Hardware(a)
    out = {"constants": vars(a), "steps": [], "ttft": []}
    tokens = a.seq * a.micro_batch
    variants = {"as written": a.issue_scale, "as efficient as FA-2": 0.0}
    for psi in a.psi:
        n_l = n_h = psi
        sets = {"init": initial_windows(n_l, n_h),
                "trained (assumed)": trained_windows(n_l, n_h, a.seq, a.long_fraction),
                "every w ≥ T": [math.inf] * (n_l * n_h)}
        for wname, windows in sets.items():
            for vname, issue in variants.items():
                ops, syncs, pairs, steps = multiscreen_ops(psi, a.seq, a.micro_batch, windows, a.head_chunk_rows, issue)
                r = step_report("multiscreen", f"Multiscreen Ψ = {psi}, windows {wname}, screening {vname}", ops,
                                syncs, multiscreen_model_flops(psi, a.seq, windows), tokens, hw)
                r.update(psi=psi, windows=wname, screening=vname, params=multiscreen_params(psi)["total"],
                         pairs_per_token_tile=pairs / a.seq / (n_l * n_h),
                         computed_pairs_per_token_tile=steps * 256 / a.seq / (n_l * n_h))
                out["steps"].append(r)
        if psi in MATCHED:
            name = MATCHED[psi]
            ops, syncs = transformer_ops(name, a.seq, a.micro_batch, a.head_chunk_rows)
            r = step_report("transformer", f"Transformer {name} (FlashAttention-2), matched to Ψ = {psi}", ops, syncs,
                            transformer_model_flops(name, a.seq), tokens, hw)
            r.update(psi=psi, params=transformer_params(name)["total"])
            out["steps"].append(r)
    fractions = sorted({0.0, 1 / 16, a.long_fraction, 1 / 6, 1 / 4, 1 / 2, 1.0})
    for psi in a.ttft_psi:
        if psi not in MATCHED:
            continue
        t, t_attn = transformer_ttft(MATCHED[psi], a.ttft_seq, a.head_chunk_rows, hw)
        for f in fractions:
            windows = trained_windows(psi, psi, 4096, f)  # windows learned at T = 4096; w > T → ∞ at inference
            m, m_screen = ttft(psi, a.ttft_seq, windows, a.head_chunk_rows, a.issue_scale, hw)
            lean, lean_screen = ttft(psi, a.ttft_seq, windows, a.head_chunk_rows, 0.0, hw)
            out["ttft"].append({"psi": psi, "transformer": MATCHED[psi], "long_fraction": f, "multiscreen_s": m,
                                "screening_s": m_screen, "lean_s": lean, "lean_screening_s": lean_screen,
                                "transformer_s": t, "attention_s": t_attn, "ratio": t / m, "lean_ratio": t / lean})
    if a.json:
        json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
        print()
        return out
    print(f"Model (not a measurement): peak {a.peak_tflops:g} TFLOP/s bf16, HBM {a.hbm_tbs:g} TB/s; GEMMs at "
          f"{a.gemm_eff:.0%} of peak, streaming kernels at {a.bw_eff:.0%} of HBM, FA-2 and screening's mma.sync at "
          f"{a.fa2_eff:.0%} / {a.mma_eff:.0%} of peak, instruction issue at {a.issue_eff:.0%}; "
          f"T = {a.seq}, B = {a.micro_batch}")
    print("\n| model | windows | screening kernel | params | in-window pairs / query | computed pairs / query | "
          "step ms | tokens/s | model TFLOP | MFU | MFU, accumulating | measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["steps"]:
        ms = r["kind"] == "multiscreen"
        pairs = f"{r['pairs_per_token_tile']:,.0f}" if ms else "—"
        computed = f"{r['computed_pairs_per_token_tile']:,.0f}" if ms else "—"
        label = f"Ψ = {r['psi']}" if ms else f"Transformer {MATCHED[r['psi']]}"
        print(f"| {label} | {r['windows'] if ms else 'causal'} | {r['screening'] if ms else 'FA-2'} | "
              f"{r['params'] / 1e6:,.1f}M | {pairs} | {computed} | {r['step_ms']:.2f} | {r['tokens_per_s']:,.0f} | "
              f"{r['model_tflop']:.3f} | {100 * r['mfu']:.1f} % | {100 * r['mfu_accumulating']:.1f} % | |")
    for r in out["steps"]:
        if r["kind"] == "transformer" or (r["windows"] != "every w ≥ T" and r["screening"] == "as written"):
            print_step(r)
    print(f"\n### Prefill of {a.ttft_seq:,} tokens (model-side TTFT), B = 1, windows learned at T = 4096, "
          "w > 4096 → ∞ (the inference rule)\n")
    print("| Ψ vs Transformer | tiles with w = ∞ | Multiscreen s, as written (screening) | "
          "Multiscreen s, as efficient as FA-2 (screening) | Transformer s (FA-2) | ratio, as written | "
          "ratio, as efficient as FA-2 | measured |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out["ttft"]:
        print(f"| {r['psi']} vs {r['transformer']} | {100 * r['long_fraction']:.1f} % | {r['multiscreen_s']:.3f} "
              f"({r['screening_s']:.3f}) | {r['lean_s']:.3f} ({r['lean_screening_s']:.3f}) | "
              f"{r['transformer_s']:.3f} ({r['attention_s']:.3f}) | {r['ratio']:.2f}× | {r['lean_ratio']:.2f}× | |")
    return out


if __name__ == "__main__":
    main()

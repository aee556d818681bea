#!/usr/bin/python3
"""The planner of `multiscreen plan` (issue 45; tools/plan.py, tools/plan_memory.py): each
memory term of a tiny model equals the bytes of the arrays the CUDA step allocates, counted
by hand from their shapes; the step's compute is perf_model.py's own (a whole-model shard,
two pipeline stages adding up to the whole); tp's all-reduces counted by hand; the ranking
behaves in the obvious cases (tp = 1 has no tp communication, more GPUs in dp with the same
per-rank work do not lower tokens/s, 1F1B's bubble, layouts that fit first by step time).
tests/cli/plan_cli_test.py checks the command.

Run: /usr/bin/python3 tests/tools/plan_test.py
"""
import json
import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import perf_model  # noqa: E402
import plan  # noqa: E402
import plan_memory  # noqa: E402
import plan_fit  # noqa: E402

# configs/models/tiny_psi4.textproto: N_L = N_H = 4, d_E = 16, d_K = 8, d_V = 16, V = 97, w_th 16.
TINY = {"name": "tiny_psi4", "family": "MULTISCREEN", "n_layers": 4, "n_heads": 4, "d_e": 16, "d_k": 8, "d_v": 16,
        "vocab": 97, "w_th": 16.0, "output_gate": True}
# configs/models/tiny_transformer.textproto: N_L = N_H = 2, d_E = 8 (d_h 4), d_ff = 21, V = 37.
TINY_T = {"name": "tiny_transformer", "family": "TRANSFORMER", "n_layers": 2, "n_heads": 2, "d_e": 8, "d_k": 4, "d_v": 4,
          "vocab": 37, "attention": "softmax", "qk_norm": False, "sio": False, "pl_norm": False}
T353M = {"name": "transformer_353m", "family": "TRANSFORMER", "n_layers": 24, "n_heads": 16, "d_e": 1024, "d_k": 64,
         "d_v": 64, "vocab": 50257, "attention": "softmax", "qk_norm": False, "sio": False, "pl_norm": False}
PSI32 = {"name": "psi32", "family": "MULTISCREEN", "n_layers": 32, "n_heads": 32, "d_e": 1024, "d_k": 16, "d_v": 64,
         "vocab": 50257, "w_th": 256.0, "output_gate": True}


def plan_of(dims, *flags):
    return plan.plan(plan.parse_args([f"--dims={json.dumps(dims)}", *flags]))


class MemoryTest(unittest.TestCase):
    def test_each_term_of_a_tiny_model_equals_its_arrays_counted_by_hand(self):
        # T = 8, micro_batch 2: rows = 16; one rank; bf16. C = 2·8 + 2·16 = 48 columns of P per tile.
        t, facts = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 1, 0, "bf16", 0)
        P = 97 * 16 + 2 + 4 * 4 * (16 * (2 * 8 + 3 * 16) + 3)  # W_E, s_E, s_F, per tile W_Q W_K W_V W_G W_O + 3
        self.assertEqual(facts["params"], P)
        self.assertEqual(P, 17986)
        self.assertEqual(facts["slots"], 1)
        self.assertEqual(t["weights"], 4 * 17986)
        self.assertEqual(t["gradients"], 4 * 17986 + 4 * 97 * 16)  # + ∂Ē
        self.assertEqual(t["adam_moments"], (4 + 4 + 1) * 17986)  # m, v, decay mask
        w_layer = 16 * 4 * 48 + 4 * 16 * 16  # W_cat [16, 4·48], W_O [4·16, 16]
        self.assertEqual(t["compute_copies"], 4 * 4 * w_layer + 4 * 97 * 16 * 2 + 4 * 97)  # + Ē, Ē rounded, norms
        self.assertEqual(t["bf16_copies"], 2 * (4 * w_layer + 97 * 16))
        # per layer: x_in 16·16; P 16·4·48; U, v̄, h 3·16·4·16; q̃, k̃ 2·16·4·8; norms 3·16·4 (fp32); x_in, U in 16 bits
        per_layer = 4 * (16 * 16 + 16 * 4 * 48 + 3 * 16 * 4 * 16 + 2 * 16 * 4 * 8 + 3 * 16 * 4) + 2 * (16 * 16 + 16 * 4 * 16)
        self.assertEqual(per_layer, 33024)
        self.assertEqual(t["activations"], 4 * per_layer + 2 * 4 * 16 * 16)  # + the stage's x, ∂x
        # ∂U [16, 4·16], ∂P [16, 4·48], ∂W_cat [16, 4·48]; ∂Δ, ∂P in 16 bits; the embedding's x⁰
        self.assertEqual(t["backward_buffers"],
                         4 * 16 * 4 * 16 + 4 * 16 * 4 * 48 + 4 * 16 * 4 * 48 + 2 * (16 * 16 + 16 * 4 * 48) + 4 * 16 * 16)
        # y, y rounded, ∂y [16, 16], ‖y‖; logits chunk [16, 97]; y and the chunk's gradient in 16 bits; 3 row stats
        self.assertEqual(t["head"], 4 * 16 * 16 * 3 + 4 * 16 + 4 * 16 * 97 + 2 * (16 * 16 + 16 * 97) + 3 * 8 * 16)
        # two kernel tables (the slot's, the trainer's); screening ∂h [16·4, 16], 4 parts and their sums
        # (double) (no kernel keeps ∂q̃ ∂k̃ ∂v̄); the screening tables of each of the 4 layers: params [4],
        # masks [4, 8] twice, chain factors [4, 6], each 256-byte aligned; the embedding's ids [16],
        # touched rows, offsets (≤ 16 + 1), positions [16]
        screening = 4 * 16 * 4 * 16 + 8 * 16 * 4 * 4 + 8 * 2 * 4 * 4 + 4 * 4 * 256
        embedding = 4 * 16 + 4 * 16 + 8 * 17 + 8 * 16
        self.assertEqual(t["workspaces"], 2 * ((32 << 20) + 1025 * 8) + screening + embedding)
        self.assertEqual(t["nccl_buffers"], 0)

    def test_bench_holds_one_rank_without_the_decay_mask_nccl_or_the_context(self):
        rank, _ = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 1, 0, "bf16", 0)
        bench = plan_memory.bench_memory(TINY, 8, 2, "bf16")
        self.assertEqual(sum(rank.values()) - sum(bench.values()), 17986 + (512 << 20))

    def test_each_term_of_a_tiny_transformer_equals_its_arrays_counted_by_hand(self):
        # T = 8, micro_batch 2: rows = 16; one rank; bf16; d_l = 2·4 = 8, F_l = 21.
        t, facts = plan_memory.stage_memory(TINY_T, 8, 2, 1, 1, 1, 1, 0, "bf16", 0)
        self.assertEqual(facts["params"], 1848)  # `multiscreen params --model=tiny_transformer`'s total
        w_layer = 8 * (3 * 8) + 8 * 8 + 2 * 21 * 8 + 21 * 8  # W_qkv, W_O, W_gu, W_down
        self.assertEqual(t["compute_copies"], 4 * 2 * w_layer + 4 * 37 * 8 * 2)  # + the table and its rounded copy
        self.assertEqual(t["bf16_copies"], 2 * (2 * w_layer + 37 * 8))
        # per layer: x_in, xn1, x_mid, xn2 [16, 8]; rstd1, rstd2; qkv [16, 24], q, k, v, o [16, 8]; gu [16, 42],
        # h [16, 21] (fp32); xn1, o, xn2, h in 16 bits
        per_layer = (4 * (4 * 16 * 8 + 2 * 16 + 16 * 24 + 4 * 16 * 8 + 16 * 42 + 16 * 21)
                     + 2 * (16 * 8 + 16 * 8 + 16 * 8 + 16 * 21))
        self.assertEqual(t["activations"], 2 * per_layer + 2 * 4 * 16 * 8)
        # ∂h, ∂gu, ∂a, ∂o, ∂q ∂k ∂v, ∂qkv [16, ·]; ∂W_qkv [8, 24]; ∂out, ∂gu, ∂qkv in 16 bits
        self.assertEqual(t["backward_buffers"], 4 * 16 * (21 + 42 + 8 + 8 + 3 * 8 + 24) + 4 * 8 * 24
                         + 2 * 16 * (8 + 42 + 24))
        # two tables; the attention's scales [2] and lse, delta, parts [2·2·8] (double), the turned q, k (d_h 4:
        # not the fused kernel), the gains' partial sums [1 chunk, 8] (double); the embedding's scratch
        attention = 8 * (2 * 2 + 3 * 2 * 2 * 8) + 2 * 4 * 16 * 8 + 8 * 8
        embedding = 4 * 16 + 4 * 16 + 8 * 17 + 8 * 16
        self.assertEqual(t["workspaces"], 2 * ((32 << 20) + 1025 * 8) + attention + embedding)
        self.assertIn("W_qkv", plan_memory.terms_of(TINY_T)["compute_copies"])

    def test_fp32_keeps_no_16_bit_copies(self):
        bf16, _ = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 1, 0, "bf16", 0)
        fp32, _ = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 1, 0, "fp32", 0)
        self.assertEqual(fp32["bf16_copies"], 0)
        self.assertEqual(bf16["activations"] - fp32["activations"], 4 * 2 * (16 * 16 + 16 * 4 * 16))
        self.assertEqual(bf16["compute_copies"] - fp32["compute_copies"], 4 * 97 * 16)  # Ē rounded

    def test_the_tiled_kernels_keep_no_scratch_beyond_the_simple_ones(self):
        # configs/models/tiny_tiled.textproto: d_K 16, d_V 64 (the tiled kernels' sizes); Ψ = 2, d_E 16.
        # The tiled backward's query and key passes finish ∂q̃ ∂k̃ ∂v̄ in their epilogues: no
        # [rows·tiles, 2 d_K + d_V] scratch (4 · 256 · 2 · 96 bytes here before), as the simple
        # kernels (fp32, and RoPE under bf16) keep none.
        tiled = dict(TINY, name="tiny_tiled", n_layers=2, n_heads=2, d_k=16, d_v=64, w_th=32.0)
        bf16, _ = plan_memory.stage_memory(tiled, 64, 4, 1, 1, 1, 1, 0, "bf16", 0)
        fp32, _ = plan_memory.stage_memory(tiled, 64, 4, 1, 1, 1, 1, 0, "fp32", 0)
        self.assertEqual(bf16["workspaces"], fp32["workspaces"])
        rope, _ = plan_memory.stage_memory(dict(tiled, position="rope"), 64, 4, 1, 1, 1, 1, 0, "bf16", 0)
        # RoPE's frequencies [d_K/2] double in each layer's screening tables, a 256-byte section of their own.
        self.assertEqual(rope["workspaces"], fp32["workspaces"] + 2 * 256)

    def test_the_tiled_bf16_path_holds_no_fp32_gradient_of_p(self):
        # The tiled query and key passes write ∂P as its bf16 GEMM operand under bf16
        # (KernelTable::ScreeningBackwardToOperand): no fp32 ∂P [rows, nt·C] (4 · 256 · 2 · 160
        # bytes here); fp32, and bf16 on the simple kernels (RoPE), keep it.
        tiled = dict(TINY, name="tiny_tiled", n_layers=2, n_heads=2, d_k=16, d_v=64, w_th=32.0)
        rows, nt, C, d_e = 4 * 64, 2, 2 * 16 + 2 * 64, 16
        bf16, _ = plan_memory.stage_memory(tiled, 64, 4, 1, 1, 1, 1, 0, "bf16", 0)
        fp32, _ = plan_memory.stage_memory(tiled, 64, 4, 1, 1, 1, 1, 0, "fp32", 0)
        rope, _ = plan_memory.stage_memory(dict(tiled, position="rope"), 64, 4, 1, 1, 1, 1, 0, "bf16", 0)
        self.assertEqual(bf16["backward_buffers"], fp32["backward_buffers"] - 4 * rows * nt * C + 2 * rows * (d_e + nt * C))
        self.assertEqual(rope["backward_buffers"], bf16["backward_buffers"] + 4 * rows * nt * C)

    def test_the_first_stage_keeps_a_model_per_micro_batch_in_flight(self):
        # pp = 2, grad_accum 4: stage 0 holds min(2, 4) = 2 instances, the last stage one.
        first, f0 = plan_memory.stage_memory(TINY, 8, 2, 4, 2, 2, 1, 0, "bf16", 0)
        last, f1 = plan_memory.stage_memory(TINY, 8, 2, 4, 2, 2, 1, 0, "bf16", 1)
        self.assertEqual((f0["slots"], f1["slots"]), (2, 1))
        self.assertEqual((f0["tiles"], f0["layers"], f0["vocab_rows"]), (2, 2, 49))
        per_layer = 4 * 16 * (16 + 2 * (48 + 3 * 16 + 2 * 8 + 3)) + 2 * 16 * (16 + 2 * 16)
        self.assertEqual(first["activations"], 2 * (2 * per_layer + 2 * 4 * 16 * 16))
        self.assertEqual(last["activations"], 2 * per_layer + 2 * 4 * 16 * 16)
        # tp > 1: z [16, 49], Ēᵀ's gradient [16, 49], the chunk's statistics and targets, its products' 16-bit operands
        self.assertEqual(last["head"], 4 * 16 * 16 * 3 + 4 * 16 + 4 * 16 * 49 + 4 * 16 * 49 + 24 * 16 + 2 * 2 * 16 * 49)
        self.assertEqual(first["nccl_buffers"], 3 * plan_memory.NCCL_BYTES_PER_COMM)  # tp, pp, W_E pair (no dp)
        self.assertEqual(plan_memory.rank_memory(TINY, 8, 2, 4, 2, 2, 1, 0, "bf16")["stage"], 0)

    def test_zero1_spreads_the_moments_over_dp(self):
        plain, _ = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 4, 0, "bf16", 0)
        zero, _ = plan_memory.stage_memory(TINY, 8, 2, 1, 1, 1, 4, 1, "bf16", 0)
        self.assertEqual(plain["adam_moments"], 9 * 17986)
        self.assertEqual(zero["adam_moments"], 9 * 4497)  # ⌈17986/4⌉
        self.assertEqual(zero["workspaces"] - plain["workspaces"], 4 * 4 * 4497)  # the bucket scratch [dp, shard]

    def test_the_heads_gradient_rows_are_one_group_within_512_mib_and_whole_chunks_beyond(self):
        # kernels/cuda/cross_entropy.h kHeadGroupBytes: Ψ = 32, V = 50,257, T = 4096. B = 1: 4096 rows of
        # bf16 gradient (412 MB) in one group; B = 2: 8192 rows (824 MB) in groups of 10 chunks (5120 rows,
        # 515 MB); fp32 (4 bytes, the logits in the group's rows): 5 chunks (2560 rows).
        V, d = 50257, 1024
        self.assertEqual(plan_memory.head_group_rows(4096, V, 2), 4096)
        self.assertEqual(plan_memory.head_group_rows(8192, V, 2), 5120)
        self.assertEqual(plan_memory.head_group_rows(8192, V, 4), 2560)
        self.assertEqual(plan_memory.head_group_rows(8192, V, 2, group_bytes=1), 512)  # at least one chunk
        for micro_batch, precision, group in ((1, "bf16", 4096), (2, "bf16", 5120), (2, "fp32", 2560)):
            with self.subTest(micro_batch=micro_batch, precision=precision):
                t, _ = plan_memory.stage_memory(PSI32, 4096, micro_batch, 1, 1, 1, 1, 0, precision, 0)
                rows = 4096 * micro_batch
                # y (and its rounded copy under bf16), ∂y, ‖y‖, 3 row statistics (double); under bf16 the
                # logits chunk [512, V] fp32, y and the ∂Z group 16-bit; under fp32 the group fp32 alone
                own = 4 * rows * d * (3 if precision == "bf16" else 2) + 4 * rows + 3 * 8 * rows
                arrays = 4 * 512 * V + 2 * (rows * d + group * V) if precision == "bf16" else 4 * group * V
                self.assertEqual(t["head"], own + arrays)


class TimeTest(unittest.TestCase):
    def test_one_rank_computes_what_perf_model_gives_the_whole_model(self):
        perf_model.use_architecture(50257, 16, 64, 256.0)
        windows = perf_model.initial_windows(32, 32)
        hw = perf_model.Hardware(perf_model.parse_args([]))
        lay = {"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": 1, "grad_accum": 1}
        micro, once = plan.stage_compute(PSI32, 4096, lay, 0, windows, hw, 512)
        ops, syncs, _, _ = perf_model.multiscreen_ops(32, 4096, 1, windows, 512, 1.0)
        r = perf_model.step_report("multiscreen", "", ops, syncs, 1.0, 4096, hw)
        self.assertAlmostEqual(1e3 * micro, r["micro_ms"], places=9)
        self.assertAlmostEqual(1e3 * (micro + once), r["step_ms"], places=9)

    def test_two_pipeline_stages_compute_what_the_whole_model_does_per_micro_batch(self):
        # Layers split 16 + 16; the embedding's ops on the first stage only, the head's on the
        # last; Ē and ∂W_E (once per step) on both, so the per-micro-batch work adds up exactly.
        perf_model.use_architecture(50257, 16, 64, 256.0)
        hw = perf_model.Hardware(perf_model.parse_args([]))

        def micro(shard, layers):
            ops, syncs, _, _ = perf_model.multiscreen_ops(32, 4096, 1, perf_model.initial_windows(layers, 32), 512, 1.0,
                                                          shard=shard)
            _, busy, overhead, _, once = perf_model.totals(ops, syncs, hw)
            return busy + overhead - once
        whole = micro(None, 32)
        half = {"layers": 16, "tiles": 32, "vocab": 50257, "params": 1}
        first = micro(dict(half, embed=True, head=False), 16)
        last = micro(dict(half, embed=False, head=True), 16)
        # perf_model counts the once-per-step ops' launch gaps in each micro-batch's overhead: both
        # stages launch Ē, ∂W_E, the gradients' zeroing and AdamW once, four launches more; and
        # each stage waits for the host in BeginStep and at the step's end, two waits more.
        self.assertAlmostEqual(first + last, whole + 4 * hw.launch_s + 2 * hw.sync_s, delta=1e-12 * whole)
        self.assertLess(first, last)  # the head is the larger end

    def test_two_transformer_stages_compute_what_the_whole_model_does_per_micro_batch(self):
        perf_model.use_architecture(50257, 16, 64, 256.0)
        hw = perf_model.Hardware(perf_model.parse_args([]))

        def micro(shard):
            ops, syncs = perf_model.transformer_ops("353m", 4096, 1, 512, shard=shard)
            _, busy, overhead, _, once = perf_model.totals(ops, syncs, hw)
            return busy + overhead - once
        half = {"layers": 12, "tiles": 16, "vocab": 50257, "params": 1}
        first, last = micro(dict(half, embed=True, head=False)), micro(dict(half, embed=False, head=True))
        # Both ends launch the table's packing, the gradients' zeroing and AdamW: three launch gaps more.
        self.assertAlmostEqual(first + last, micro(None) + 3 * 2e-6, delta=1e-12 * micro(None))

    def test_a_transformers_tp_all_reduces_are_four_per_layer_and_the_ends(self):
        p = plan_of(T353M, "--gpus=8")
        r = next(r for r in p["layouts"] if (r["tp"], r["pp"], r["dp"], r["zero"], r["micro_batch"]) == (2, 1, 4, 0, 1))
        alpha, bw = 10e-6, 360e9
        per_micro = (4 * 24 + 1 + 1) * (alpha + 4 * 4096 * 1024 / bw) + 3 * (alpha + 8 * 4096 / bw)
        self.assertAlmostEqual(r["time_ms"]["tp_ms"], 1e3 * r["grad_accum"] * per_micro, places=6)
        self.assertIsNone(p["windows"])

    def test_tp_all_reduces_are_two_per_layer_and_the_ends(self):
        # tp = 2 in a node: per micro-batch of 4096 rows, 2·32 layer all-reduces, the embedding
        # and its recomputation, ∂y: 67 of [4096, 1024] fp32; the head's 3 row statistics (double).
        p = plan_of(PSI32, "--gpus=8")
        r = next(r for r in p["layouts"] if (r["tp"], r["pp"], r["dp"], r["zero"], r["micro_batch"]) == (2, 1, 4, 0, 1))
        alpha, bw = 10e-6, 360e9
        per_micro = 67 * (alpha + 4 * 4096 * 1024 / bw) + 3 * (alpha + 8 * 4096 / bw)
        self.assertAlmostEqual(r["time_ms"]["tp_ms"], 1e3 * r["grad_accum"] * per_micro, places=6)

    def test_tp_1_has_no_tp_communication_and_tp_2_has(self):
        p = plan_of(PSI32, "--gpus=8")
        for r in p["layouts"]:
            if r["tp"] == 1:
                self.assertEqual(r["time_ms"]["tp_ms"], 0.0)
            else:
                self.assertGreater(r["time_ms"]["tp_ms"], 0.0)
        self.assertTrue(any(r["tp"] > 1 for r in p["layouts"]))

    def test_more_gpus_in_dp_with_the_same_work_per_rank_do_not_lower_tokens_per_s(self):
        def pick(gpus):
            p = plan_of(PSI32, f"--gpus={gpus}", f"--global_batch={4096 * 16 * gpus}", "--gpus_per_node=8")
            return next(r for r in p["layouts"]
                        if (r["tp"], r["pp"], r["zero"], r["micro_batch"], r["grad_accum"]) == (1, 1, 0, 2, 8))
        rates = [pick(g)["tokens_per_s"] for g in (1, 2, 8, 16, 64)]
        steps = [pick(g)["step_ms"] for g in (1, 2, 8, 16, 64)]
        self.assertEqual(rates, sorted(rates))
        self.assertEqual(steps, sorted(steps))  # the reduction grows (and leaves NVLink past 8)
        self.assertLess(rates[1], 2 * rates[0])

    def test_the_1f1b_bubble_is_pp_minus_1_slots(self):
        p = plan_of(PSI32, "--gpus=8")
        r = next(r for r in p["layouts"] if (r["tp"], r["pp"], r["dp"], r["micro_batch"]) == (1, 4, 2, 4))
        self.assertAlmostEqual(r["bubble_fraction"], 3 / (r["grad_accum"] + 3))
        t = r["time_ms"]
        # grad_accum + pp − 1 slots of the slowest stage, then the once-per-step ops and the reduction
        self.assertAlmostEqual(t["step_ms"], (r["grad_accum"] + 3) * t["slot_ms"] + t["once_ms"] + t["dp_ms"])
        self.assertGreater(t["pp_ms"], 3 * t["slot_ms"])  # the bubble and the sends

    def test_a_group_is_on_nvlink_only_when_all_its_ranks_share_a_node(self):
        # (the link was chosen by span, tp·pp ≤ gpus_per_node: tp1 pp3 dp8 on nodes of 8 has
        # replica 2 on ranks 6–8, across nodes 0 and 1, and was modelled on NVLink)
        self.assertEqual(plan.group_links(1, 3, 8, 8), {"tp": "nvlink", "pp": "infiniband", "embed": "infiniband",
                                                        "dp": "infiniband"})
        self.assertEqual(plan.group_links(1, 2, 12, 8)["pp"], "nvlink")  # pairs (0, 1), (2, 3), ... never straddle
        self.assertEqual(plan.group_links(1, 4, 2, 8), {"tp": "nvlink", "pp": "nvlink", "embed": "nvlink", "dp": "nvlink"})
        self.assertEqual(plan.group_links(2, 2, 4, 8)["dp"], "infiniband")  # ranks 0, 4, 8, 12
        self.assertEqual(plan.group_links(4, 1, 2, 6)["tp"], "infiniband")  # ranks 4–7 on nodes 0 and 1
        psi48 = dict(PSI32, name="psi48", n_layers=48, n_heads=48, d_e=1536)
        p = plan_of(psi48, "--gpus=24", f"--global_batch={4096 * 48}")
        r = next(r for r in p["layouts"] if (r["tp"], r["pp"], r["dp"], r["zero"], r["micro_batch"]) == (1, 3, 8, 0, 1))
        self.assertEqual(r["links"]["pp"], "infiniband")
        alpha, bw = plan.GPUS["h100"].ib
        send = alpha + 4 * 4096 * 1536 / bw  # x of one micro-batch, fp32, over InfiniBand
        t = r["time_ms"]
        self.assertAlmostEqual(t["pp_ms"], 2 * t["slot_ms"] + 1e3 * r["grad_accum"] * 2 * send, places=6)

    def test_layouts_that_fit_come_first_by_step_time(self):
        p = plan_of(PSI32, "--gpus=8")
        fits = [r["fits"] for r in p["layouts"]]
        self.assertEqual(fits, sorted(fits, reverse=True))
        times = [r["step_ms"] for r in p["layouts"] if r["fits"]]
        self.assertEqual(times, sorted(times))
        for r in p["layouts"]:
            self.assertEqual(r["fits"], r["peak_bytes_per_rank"] <= p["device_memory_bytes"])
            self.assertEqual(r["peak_bytes_per_rank"], sum(r["memory"]["breakdown"].values()))



class FitTest(unittest.TestCase):
    """tools/plan_fit.py, train's up-front check: the verdict is rank_memory's, and the
    nearest layouts that fit keep the ranks and the batch, fewest changes first."""

    def fit(self, *flags):
        return plan_fit.fit(plan_fit.parse_args([f"--dims={json.dumps(PSI32)}", "--seq_len=4096", *flags]))

    def test_the_verdict_is_the_plans_memory_of_the_layout(self):
        mem = plan_memory.rank_memory(PSI32, 4096, 4, 8, 1, 2, 4, 0, "bf16")
        for device, fits in ((mem["bytes"], True), (mem["bytes"] - 1, False)):
            f = self.fit("--pp=2", "--dp=4", "--micro_batch=4", "--grad_accum=8", f"--device_memory={device}")
            self.assertEqual((f["fits"], f["peak_bytes_per_rank"], f["breakdown"]), (fits, mem["bytes"], mem["breakdown"]))

    def test_the_nearest_layouts_keep_ranks_and_batch_and_change_the_least(self):
        cur = {"tp": 1, "pp": 1, "dp": 8, "zero": 0, "micro_batch": 16, "grad_accum": 1}
        device = plan_memory.rank_memory(PSI32, 4096, 8, 2, 1, 1, 8, 0, "bf16")["bytes"]  # micro_batch 8 fits
        f = self.fit("--dp=8", "--micro_batch=16", "--grad_accum=1", f"--device_memory={device}")
        self.assertFalse(f["fits"])
        self.assertEqual(len(f["nearest"]), 3)
        changes = []
        for lay in f["nearest"]:
            self.assertEqual(lay["tp"] * lay["pp"] * lay["dp"], 8)
            self.assertEqual(lay["dp"] * lay["micro_batch"] * lay["grad_accum"], 128)
            self.assertLessEqual(lay["peak_bytes_per_rank"], device)
            self.assertEqual(lay["peak_bytes_per_rank"],
                             plan_memory.rank_memory(PSI32, 4096, lay["micro_batch"], lay["grad_accum"], lay["tp"],
                                                     lay["pp"], lay["dp"], lay["zero"], "bf16")["bytes"])
            changes.append(plan_fit.distance(lay, cur))
        self.assertEqual(changes, sorted(changes))
        # halving micro_batch (one change) fits: it comes before anything that changes two fields
        self.assertEqual(f["nearest"][0]["micro_batch"], 8, f["nearest"])
        self.assertEqual(changes[0], (1, 1.0))

    def test_a_layout_that_fits_still_lists_its_neighbours_and_zero_1_counts_as_a_change(self):
        f = self.fit("--dp=8", "--micro_batch=1", "--grad_accum=16", "--device_memory=1000000000000")
        self.assertTrue(f["fits"])
        self.assertIn({"tp": 1, "pp": 1, "dp": 8, "zero": 1, "micro_batch": 1, "grad_accum": 16},
                      [{k: lay[k] for k in plan_fit.FIELDS} for lay in f["nearest"]])


if __name__ == "__main__":
    unittest.main()

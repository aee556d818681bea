#!/usr/bin/python3
"""tools/perf_model.py (docs/performance.md's GPU performance model) against the code it
models: its model FLOPs per token equal what `multiscreen bench train` counts
(trainer/flops.h) for a Multiscreen model and a Transformer; its GEMMs add up to 6·N·T
with N the matrix parameters `multiscreen params` reports; its count of the tiled screening
kernel's 16×16 steps and of in-window pairs equals a walk of the kernel's own loops; the
Transformer's RoPE fused into its attention at head width 64 (no RoPE pass, the table read),
passes over copies of q and k at other widths.

Run: /usr/bin/python3 tests/tools/perf_model_test.py --multiscreen=build/multiscreen
     (with MULTISCREEN_CONFIG_DIR pointing at configs/)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import perf_model  # noqa: E402

MULTISCREEN = None


def run_json(*args):
    r = subprocess.run([MULTISCREEN, *args, "--json"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"multiscreen {' '.join(args)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def gemm_flops(ops):
    return sum(op.calls * op.flops for op in ops if op.kind == "gemm")


class PerfModelTest(unittest.TestCase):
    def test_flags_out_of_range_are_refused_in_one_line(self):
        for args, message in ((["--fa2-eff=nan"], "--fa2-eff must be a finite number, got nan"),
                              (["--sync-us=nan"], "--sync-us must be a finite number, got nan"),
                              (["--launch-us=-5"], "--launch-us must not be negative, got -5.0"),
                              (["--gemm-eff=5"], "--gemm-eff is a fraction of a peak: it must lie in (0, 1], got 5.0"),
                              (["--ttft-psi=64"], "--ttft-psi=64: no matched Transformer for Ψ = 64"),
                              (["--graph-node-us=-1"], "--graph-node-us must be a finite number >= 0, got -1.0")):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "perf_model.py"), *args], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr.strip().splitlines()[-1])
        # Any Ψ >= 2 is modelled (the help says so); only the matched Transformer needs a table.
        self.assertEqual(perf_model.parse_args(["--psi=7"]).psi, [7])

    def test_counts_and_times_of_several_micro_batches_are_refused_in_one_line(self):
        # The model is one micro-batch a step: a --grad_accum=2 count or timing (uncaptured or
        # --graphs) would sit beside a model of half its work.
        import tempfile
        for flag, key in (("--counted", "counted"), ("--measured", "op_times")):
            for graphs in (False, True):
                with self.subTest(flag=flag, graphs=graphs), tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                    json.dump({key: {"ops": [], "totals": {"syncs": 0}, "total_ms": 0.0}, "model": "tiny_tiled",
                               "precision": "bf16", "seq_len": 256, "micro_batch": 1, "head_chunk_rows": 512,
                               "grad_accum": 2, "graphs": graphs}, f)
                    f.flush()
                    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "perf_model.py"), f"{flag}={f.name}"],
                                       capture_output=True, text=True, timeout=60)
                    self.assertNotEqual(r.returncode, 0)
                    last = r.stderr.strip().splitlines()[-1]
                    self.assertIn(f"with --grad_accum=2{' and --graphs' if graphs else ''}: the model is of one "
                                  "micro-batch a step", last)

    def test_a_graphed_micro_batch_launches_its_nodes_the_scatter_and_the_graph(self):
        # bench train --graphs: a later micro-batch's launches (the once-per-step ops' apart) run
        # as graph nodes, but the embedding scatter's, plus one cudaGraphLaunch. At a node cost
        # equal to a launch's the overhead is the eager one plus that one launch; at 0, two launches.
        ops, _, _, _ = perf_model.multiscreen_ops(32, 4096, 1, perf_model.initial_windows(32, 32), 512, 1.0)
        micro = sum(op.calls * op.launches for op in ops if not op.once)
        self.assertGreater(micro, 400)
        for node_us, expected in ((2.0, (micro + 1) * 2e-6), (0.0, 2 * 2e-6), (1.0, (micro - 1) * 1e-6 + 2 * 2e-6)):
            with self.subTest(node_us=node_us):
                hw = perf_model.Hardware(perf_model.parse_args([f"--graph-node-us={node_us}"]))
                self.assertAlmostEqual(perf_model.graphed_micro_overhead(ops, hw), expected, delta=1e-12)
        # By default the cited node cost (0.58 µs): the step at G = 1 runs its micro-batch as one
        # graph too, keeping the once-per-step launches and the waits.
        hw = perf_model.Hardware(perf_model.parse_args([]))
        self.assertEqual(hw.graph_node_s, 0.58e-6)
        r = perf_model.step_report("multiscreen", "x", ops, 3, 1.0, 4096, hw)
        once = sum(op.calls * op.launches for op in ops if op.once)
        self.assertAlmostEqual(r["overhead_graphed_ms"] * 1e-3,
                               once * 2e-6 + perf_model.graphed_micro_overhead(ops, hw) + 3 * 10e-6, delta=1e-12)
        self.assertAlmostEqual(r["step_ms"] - r["step_ms_graphed"], r["overhead_ms"] - r["overhead_graphed_ms"],
                               delta=1e-9)
        self.assertAlmostEqual(r["micro_overhead_graphed_ms"] * 1e-3, (micro - 1) * 0.58e-6 + 2 * 2e-6, delta=1e-12)

    def test_model_flops_equal_bench_train(self):
        for model, psi, T in (("psi8", 8, 300), ("psi16", 16, 64)):
            bench = run_json("bench", "train", f"--model={model}", f"--seq_len={T}", "--micro_batch=1", "--steps=1",
                             "--warmup=0", "--threads=1")
            ours = perf_model.multiscreen_model_flops(psi, T, perf_model.initial_windows(psi, psi))
            self.assertAlmostEqual(ours / bench["flops_per_token"], 1.0, places=9, msg=model)
        bench = run_json("bench", "train", "--model=transformer_8m", "--seq_len=64", "--micro_batch=1", "--steps=1",
                         "--warmup=0", "--threads=1")
        self.assertAlmostEqual(perf_model.transformer_model_flops("8m", 64) / bench["flops_per_token"], 1.0, places=9)

    def test_gemms_add_up_to_six_n_t(self):
        T = 4096
        for psi in (16, 32):
            p = run_json("params", f"--model=psi{psi}")
            n_matrices = p["tile_matrices"] + p["embedding"]  # the head multiplies by Ē, V·d_E
            ops, _, _, _ = perf_model.multiscreen_ops(psi, T, 1, perf_model.initial_windows(psi, psi), 512, 1.0)
            self.assertEqual(gemm_flops(ops), 6 * n_matrices * T, f"psi{psi}")
            self.assertLess(abs(gemm_flops(ops) / (6 * p["total"] * T) - 1), 0.01)
            self.assertEqual(perf_model.multiscreen_params(psi)["total"], p["total"])
        for name, model in (("45m", "transformer_45m"), ("353m", "transformer_353m")):
            p = run_json("params", f"--model={model}")
            ops, _ = perf_model.transformer_ops(name, T, 1, 512)
            self.assertEqual(gemm_flops(ops), 6 * (p["total"] - p["norm_gains"]) * T, name)
            self.assertEqual(perf_model.transformer_params(name)["total"], p["total"])

    def test_rope_is_fused_into_the_attention_at_head_width_64_and_passes_elsewhere(self):
        # kernels/cuda/attention_tiled.h under bf16: at d_head = 64 (45m, 353m) no RoPE pass
        # runs and the attention reads the [T, 64] fp32 cos/sin table (forward once, backward
        # once per pass); at d_head = 128 (1.3b) the op turns copies of q and k, one pass in
        # the forward, one before the backward and one over ∂q, ∂k after it.
        T = 4096
        for name in ("45m", "353m"):
            n_l, n_h, d, _ = perf_model.transformer_dims(name)
            self.assertEqual(d // n_h, perf_model.FUSED_ROPE_HEAD, name)
            ops, _ = perf_model.transformer_ops(name, T, 1, 512)
            self.assertEqual([op.name for op in ops if "RoPE" in op.name],
                             ["FlashAttention-2 forward (causal, RoPE fused)",
                              "FlashAttention-2 backward (causal, RoPE fused)"], name)
            attn = {op.name.split()[1]: op for op in ops if op.kind == "fa2"}
            self.assertEqual(attn["forward"].bytes, T * 4 * d * 2 + T * n_h * 4 + T * 64 * 4, name)
            self.assertEqual(attn["backward"].bytes, T * d * 2 * 5 + T * n_h * 4 + T * d * 4 * 2 + T * 3 * d * 2
                             + 2 * T * 64 * 4, name)
        n_l, _, d, _ = perf_model.transformer_dims("1.3b")
        for train, passes in ((True, 3), (False, 1)):
            ops, _ = perf_model.transformer_ops("1.3b", T, 1, 512, train=train)
            rope = [op for op in ops if op.kind == "mem" and "RoPE" in op.name]
            self.assertEqual(sum(op.calls for op in rope), passes * n_l, f"train={train}")
            self.assertTrue(all(op.bytes == T * 2 * d * 4 for op in rope))
            self.assertFalse(any("fused" in op.name for op in ops))

    def test_warp_steps_and_pairs_equal_a_walk_of_the_kernel(self):
        # screening_tiled.cu: a CTA per 64 queries walks 64-key blocks from
        # ⌊max(0, q0 − keys + 1)/64⌋·64 to its last query; a warp (16 queries) runs a 16-key
        # step unless it is past T or no pair of it lies in 0 ≤ i − j < keys.
        for T in (1, 17, 64, 100, 300):
            for keys in sorted({1, 2, 3, 16, 17, 31, 32, 33, 40, 48, 49, 64, 65, 200, T}):
                keys = min(keys, T)
                steps = pairs = interior = 0
                for q0 in range(0, T, 64):
                    q_last = min(q0 + 64, T) - 1
                    j_first = max(0, q0 - keys + 1)
                    for k0 in range(j_first // 64 * 64, q_last + 1, 64):
                        for warp in range(4):
                            qw = q0 + 16 * warp
                            for step in range(4):
                                kj = k0 + 16 * step
                                if qw >= T or kj > qw + 15 or kj + 15 < qw - keys + 1:
                                    continue
                                steps += 1
                                # the query pass's `interior` test: every pair in the window
                                if qw + 15 < T and kj + 15 <= qw and qw + 15 - kj < keys:
                                    interior += 1
                                    self.assertTrue(all(0 <= i - j < keys for i in range(qw, qw + 16)
                                                        for j in range(kj, kj + 16)))
                # The key pass: a CTA per 64 keys walks the query blocks from k0 to its last
                # key + keys − 1; its interior steps are the same 16×16 blocks.
                key_interior = 0
                for k0 in range(0, T, 64):
                    k_last = min(k0 + 64, T) - 1
                    for q0 in range(k0, min(k_last + keys - 1, T - 1) + 1, 64):
                        for warp in range(4):
                            kw = k0 + 16 * warp
                            for step in range(4):
                                qi = q0 + 16 * step
                                if kw >= T or qi + 15 < kw or qi > kw + 15 + keys - 1:
                                    continue
                                key_interior += qi + 15 < T and qi >= kw + 15 and qi + 15 - kw < keys
                self.assertEqual(perf_model.interior_steps(keys, T), interior, f"T={T} keys={keys}")
                self.assertEqual(key_interior, interior, f"T={T} keys={keys}")
                for i in range(T):
                    pairs += sum(1 for j in range(T) if 0 <= i - j < keys)
                self.assertEqual(perf_model.warp_steps(keys, T), steps, f"T={T} keys={keys}")
                self.assertEqual(perf_model.window_pairs(keys, T), pairs, f"T={T} keys={keys}")

    def test_the_query_pass_counts_the_mipe_rate_arm_on_mipe_tiles_only(self):
        # MiPE's rate is γ(w)·π/w with γ(w) = 0 at w ≥ w_th (spec step 6): the query pass runs
        # its rate arm for the tiles below w_th, 2, 100 and 255.9 here, and no others.
        T, mipe = 1024, [2.0, 100.0, 255.9]
        windows = mipe + [perf_model.W_TH, 300.0, math.inf]
        _, steps, interior, mipe_steps, mipe_interior = perf_model.screening_work(windows, T)
        self.assertEqual(mipe_steps, sum(perf_model.warp_steps(perf_model.keys_of(w, T), T) for w in mipe))
        self.assertEqual(mipe_interior, sum(perf_model.interior_steps(perf_model.keys_of(w, T), T) for w in mipe))
        self.assertGreater(mipe_interior, 0)

        def query_issue(ws):
            ops, _, _, _ = perf_model.multiscreen_ops(4, T, 1, ws, 512, 1.0)
            query, = [op for op in ops if "query pass" in op.name]
            return query.issue * query.calls

        other, inner = perf_model.ISSUE_MIPE_RATE["query"]
        for w in windows:
            keys = perf_model.keys_of(w, T)
            base = ((perf_model.warp_steps(keys, T) - perf_model.interior_steps(keys, T)) * perf_model.ISSUE_PER_STEP["query"]
                    + perf_model.interior_steps(keys, T) * perf_model.ISSUE_PER_INTERIOR_STEP["query"])
            rate = ((perf_model.warp_steps(keys, T) - perf_model.interior_steps(keys, T)) * other
                    + perf_model.interior_steps(keys, T) * inner) if w in mipe else 0
            self.assertAlmostEqual(query_issue([w] * 16), 16 * (base + rate), delta=1e-6 * (base + rate), msg=f"w={w}")

    def test_the_tiled_screening_ops_move_p_columns_not_saved_rows(self):
        # Issue 42: the tiled backward recomputes q̃, k̃, v̄ from P's q, k, v columns, so no op
        # writes or reads the saved fp32 rows and norms. Per (token, tile), at the widths the
        # code stores (P, U, ∂U, ∂P: P_BYTES, U_BYTES, DU_BYTES, DP_BYTES): forward P's q, k, v, g
        # (160), h (64 fp32) and U (64); query pass P's g, ∂U and h in, ∂h and ∂P's g out
        # (64 fp32 each), P's q, k, v in, ∂P's q (16 fp32) and 4 fp64 parts out; key pass P's
        # q, k, v and ∂h in, ∂P's k (16) and v (64 fp32) out: 1,152, 1,760 and 960 bytes, the
        # emulated device's counts at tiny_tiled (bench_count_test's BYTES_AGREE). Before
        # (2026-12-07) the model took P, U and ∂U as bf16 and 5 parts: 704, 1,192 and 768; with
        # the saved rows 1,100, 1,388 and 968. P in bf16 (the GEMM's bf16 D, the kernels' bf16
        # reads, 2026-12-07): 832, 1,440 and 768, where fp32 P gave 1,152, 1,760 and 960. U in
        # bf16 (the forward writes W_O's operand itself, 2026-12-07): the forward 832 → 704. ∂P in
        # bf16 (the passes write the projections' bf16 operand, 2026-12-07): ∂P's g, q (k, v)
        # columns at 2 bytes, the query pass 1,440 → 1,280 and the key pass 768 → 608.
        T, psi = 4096, 32
        ops, _, _, _ = perf_model.multiscreen_ops(psi, T, 1, perf_model.initial_windows(psi, psi), 512, 1.0)
        per_row = {op.name.split(" (")[0]: op.bytes / (T * psi) for op in ops if op.kind == "screen"}
        self.assertEqual((perf_model.P_BYTES, perf_model.U_BYTES, perf_model.DU_BYTES, perf_model.DP_BYTES),
                         (2, 2, 4, 2))
        self.assertEqual(per_row, {
            "screening forward, tiled": 704,
            "screening backward, tiled query pass": 1280,
            "screening backward, tiled key pass": 608})
        # P's GEMM writes bf16 P (no rounding pass), the forward U's bf16 operand (no packing
        # pass, U_PACK_PASS False), the passes ∂P's (no pack pass, DP_PACK_PASS False).
        by_name = {op.name: op for op in ops}
        n, pd = T, psi * (2 * 16 + 2 * 64)
        self.assertEqual(by_name["P = x_in·W_cat (GEMM)"].bytes, n * psi * psi * 2 + psi * psi * pd * 2 + n * pd * 2)
        self.assertNotIn("P rounded to bf16 in place (RoundToCompute)", by_name)
        self.assertFalse(perf_model.U_PACK_PASS)
        self.assertNotIn("U → bf16 operand (PackRounded)", by_name)
        self.assertNotIn("bf16(∂P) for the projections' GEMMs", by_name)
        self.assertFalse(perf_model.DP_PACK_PASS)

    def test_initial_windows_span_two_to_w_th_plus_one(self):
        w = perf_model.initial_windows(4, 16)
        self.assertEqual(len(w), 64)
        self.assertAlmostEqual(min(w), 2.0)
        self.assertAlmostEqual(max(w), perf_model.W_TH + 1, delta=1e-4)
        self.assertEqual(perf_model.keys_of(math.inf, 4096), 4096)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    args, rest = parser.parse_known_args()
    MULTISCREEN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0], *rest])

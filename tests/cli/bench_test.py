#!/usr/bin/python3
"""End-to-end checks of `multiscreen bench`: the shape of `bench train --json`,
`bench screening --json` and `bench decode --json` on a tiny model, the text output, and one-line errors.
(Only the shape and the arithmetic between fields are checked: speeds depend on
the machine.)

Run: /usr/bin/python3 tests/cli/bench_test.py --multiscreen=build/multiscreen
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None

PHASES = ("embed", "projections_gemm", "screening_forward", "screening_backward", "w_o_gemm",
          "head_loss", "optimizer", "attention", "ffn", "other")


def run(*args):
    return subprocess.run([BIN, "bench", *args], capture_output=True, text=True, timeout=300)


class BenchTest(OneLineErrors):
    def test_train_json_has_speed_mfu_memory_and_a_breakdown(self):
        r = run("train", "--model=tiny_psi2", "--seq_len=16", "--micro_batch=2", "--steps=3", "--warmup=1",
                "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["model"], "tiny_psi2")
        self.assertEqual((j["seq_len"], j["micro_batch"], j["steps"], j["warmup"]), (16, 2, 3, 1))
        self.assertEqual(len(j["step_seconds_all"]), 3)
        self.assertGreater(j["step_seconds"], 0)
        self.assertAlmostEqual(j["tokens_per_s"], 32 / j["step_seconds"], delta=1e-6 * j["tokens_per_s"])
        self.assertAlmostEqual(j["gflops"], j["flops_per_token"] * j["tokens_per_s"] / 1e9,
                               delta=1e-6 * j["gflops"])
        self.assertGreater(j["sgemm_gflops"], 0)
        self.assertAlmostEqual(j["mfu"], j["gflops"] / j["sgemm_gflops"], delta=1e-9)
        self.assertGreater(j["peak_rss_bytes"], 1 << 20)
        self.assertTrue(math.isfinite(j["loss_first"]) and math.isfinite(j["loss_last"]))
        b = j["breakdown_seconds"]
        self.assertEqual(set(b), set(PHASES))
        self.assertTrue(all(v >= 0 for v in b.values()), b)
        self.assertGreater(b["head_loss"], 0)
        self.assertGreater(b["screening_forward"], 0)
        # Phase medians are taken separately, so their sum only roughly matches the step.
        self.assertLess(sum(b.values()), 1.5 * j["step_seconds"] + 1e-3)

    def test_train_breakdown_on_the_threads_cpu_clock_adds_up_to_the_step(self):
        # One step: the phases on the calling thread's CPU clock, and "other" (what they leave),
        # sum to step_thread_cpu_seconds; each phase's CPU time is within its wall time.
        r = run("train", "--model=tiny_psi2", "--seq_len=16", "--micro_batch=2", "--steps=1", "--warmup=1",
                "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        b, c = j["breakdown_seconds"], j["breakdown_thread_cpu_seconds"]
        self.assertEqual(set(c), set(PHASES))
        self.assertGreater(c["head_loss"], 0)
        self.assertAlmostEqual(sum(c.values()), j["step_thread_cpu_seconds"], delta=1e-6)
        for phase in PHASES[:-1]:
            self.assertLessEqual(c[phase], b[phase] + 1e-6, phase)

    def test_train_json_has_the_hardware_peak_of_the_path_it_ran(self):
        # Issue 44: the fp32 multiply-add peak of the kernels' path (kernels/cpu/fma_peak.h) on
        # the step's threads, and MFU against it beside the SGEMM-relative figure.
        for isa in ("generic", None):
            args = ["train", "--model=tiny_psi2", "--seq_len=16", "--micro_batch=1", "--steps=1", "--warmup=0",
                    "--threads=1", "--json"] + ([f"--isa={isa}"] if isa else [])
            r = run(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual(j["hw_peak_isa"], j["isa"])
            if isa:
                self.assertEqual(j["isa"], isa)
            self.assertEqual(j["hw_peak_threads"], 1)
            self.assertGreater(j["hw_peak_gflops"], 0)
            self.assertGreater(j["cpu_ghz"], 0.5)
            self.assertAlmostEqual(j["mfu_hw"] * j["hw_peak_gflops"], j["gflops"], delta=1e-6 * j["gflops"])
            self.assertAlmostEqual(j["mfu"] * j["sgemm_gflops"], j["gflops"], delta=1e-6 * j["gflops"])
            # The step on the calling thread's CPU clock: never longer than on the wall clock.
            self.assertGreater(j["step_thread_cpu_seconds"], 0)
            self.assertLessEqual(j["step_thread_cpu_seconds"], j["step_seconds"] * 1.001 + 1e-4)
            cpu_gflops = j["flops_per_token"] * 16 / j["step_thread_cpu_seconds"] / 1e9
            self.assertAlmostEqual(j["mfu_hw_thread_cpu"] * j["hw_peak_gflops"], cpu_gflops, delta=1e-6 * cpu_gflops)
            # One core's fp32 FLOPs a cycle: 4 lanes (SSE2) to 16 (AVX-512), x 2 (multiply-add)
            # x 1 or 2 pipes.
            per_cycle = j["hw_peak_gflops"] / j["cpu_ghz"]
            self.assertGreater(per_cycle, 0.75 * 8, j)
            self.assertLess(per_cycle, 1.25 * 64, j)
            if j["isa"] != "avx512":
                self.assertIsNone(j["hw_peak_bf16_gflops"])  # vdpbf16ps is measured on the avx512 path only

    def test_train_runs_the_transformer_with_its_own_phases_and_flops(self):
        # Issue 18: the Transformer baseline through the same bench (tokens/s, MFU, phases).
        r = run("train", "--model=tiny_transformer_train", "--seq_len=32", "--micro_batch=2", "--steps=2",
                "--warmup=1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["model"], "tiny_transformer_train")
        self.assertEqual(j["head_path"], "blas")
        self.assertAlmostEqual(j["tokens_per_s"], 64 / j["step_seconds"], delta=1e-6 * j["tokens_per_s"])
        # trainer/flops.h's Transformer count at T = 32: 6 per weight of the layers and the
        # head (4 d^2 + 3 d d_ff per layer, V d for the tied head) plus the causal attention's
        # 2 x 2 (T + 1)/2 d per layer (QK^T and PV), times 3 for forward + backward.
        d, ff, layers, vocab, T = 32, 85, 2, 97, 32
        forward = 2 * (layers * (4 * d * d + 3 * d * ff) + vocab * d) + layers * 4 * d * (T + 1) / 2
        self.assertAlmostEqual(j["flops_per_token"], 3 * forward, delta=0.02 * 3 * forward)
        self.assertAlmostEqual(j["mfu"], j["gflops"] / j["sgemm_gflops"], delta=1e-9)
        self.assertTrue(math.isfinite(j["loss_first"]))
        # A random-token loss starts near log V.
        self.assertLess(abs(j["loss_first"] - math.log(vocab)), 1.0)
        b = j["breakdown_seconds"]
        self.assertEqual(set(b), set(PHASES))
        for phase in ("attention", "ffn", "projections_gemm", "w_o_gemm", "head_loss"):
            self.assertGreater(b[phase], 0, phase)
        self.assertEqual(b["screening_forward"], 0)
        self.assertEqual(b["screening_backward"], 0)

    def test_train_text_names_the_targets(self):
        r = run("train", "--model=tiny_psi2", "--seq_len=8", "--micro_batch=1", "--steps=1", "--warmup=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("tokens/s", "GFLOP/s", "MFU", "hardware peak", "MFU (hardware)", "peak RSS",
                     "screening_backward", "optimizer"):
            self.assertIn(word, r.stdout)

    def test_fp64_and_bf16_steps_run(self):
        for precision in ("fp64", "bf16"):
            r = run("train", "--model=tiny_psi2", "--seq_len=8", "--micro_batch=1", "--steps=1", "--warmup=0",
                    f"--precision={precision}", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["precision"], precision)

    def test_mfu_divides_by_the_peak_of_the_steps_precision(self):
        # Issue 44 (fresh-eyes finding 7): fp64 against half the fp32 multiply-add peak (half
        # the lanes), a bf16 step against the bf16 dot-product peak, each named.
        for precision in ("fp32", "fp64", "bf16"):
            r = run("train", "--model=tiny_psi2", "--seq_len=16", "--micro_batch=1", "--steps=1", "--warmup=0",
                    "--threads=1", f"--precision={precision}", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertAlmostEqual(j["mfu_hw"] * j["hw_peak_gflops"], j["gflops"], delta=1e-6 * j["gflops"])
            bf16_step = precision == "bf16" and j["hw_peak_bf16_gflops"] is not None
            want = "fp64" if precision == "fp64" else "bf16" if bf16_step else "fp32"
            self.assertEqual(j["hw_peak_precision"], want, j)
            self.assertEqual(j["step_precision"], "fp32" if precision == "bf16" and not bf16_step else precision)
            ratio = {"fp32": 1.0, "fp64": 0.5,
                     "bf16": (j["hw_peak_bf16_gflops"] or 0) / j["hw_peak_fp32_gflops"]}[want]
            self.assertAlmostEqual(j["hw_peak_gflops"], ratio * j["hw_peak_fp32_gflops"], delta=1e-9 * j["hw_peak_gflops"])

    def test_bf16_on_a_path_without_bf16_dot_products_runs_fp32_and_says_so_once(self):
        # Issue 44: a CPU path without AVX512_BF16 (avx2, generic) runs the fp32 step under
        # --precision=bf16: the same loss as fp32 bit for bit, one line on stderr.
        for isa in ("generic", "avx2"):
            got = {}
            for precision in ("fp32", "bf16"):
                r = run("train", "--model=tiny_psi2", "--seq_len=16", "--micro_batch=1", "--steps=2", "--warmup=0",
                        "--threads=1", f"--isa={isa}", f"--precision={precision}", "--json")
                if r.returncode != 0 and isa == "avx2" and "avx2" in r.stderr:
                    self.skipTest("this CPU has no avx2 path")
                self.assertEqual(r.returncode, 0, r.stderr)
                got[precision] = (json.loads(r.stdout), r.stderr)
            j, err = got["bf16"]
            self.assertEqual((j["isa"], j["precision"], j["step_precision"]), (isa, "bf16", "fp32"))
            self.assertEqual(j["loss_last"], got["fp32"][0]["loss_last"])
            notices = [line for line in err.splitlines() if "bf16 dot products" in line]
            self.assertEqual(len(notices), 1, err)
            self.assertIn(f"{isa} path", notices[0])
            self.assertIn("runs in fp32", notices[0])

    def test_a_step_is_the_same_bits_on_any_thread_count(self):
        # Resume on another machine is bit-exact only if the step's bits do not follow --threads:
        # tiny_psi2 at T = 2048, B = 2 has weight gradients of k = 4096 rows and a small C, whose
        # reduction oneDNN split over the threads on the avx512 path (fp32: the second loss and
        # gradient norm differed on 1, 2 and 3 threads) until kernels/cpu/onednn_matmul.h cut
        # it into fixed chunks. The CPU's own path (avx512 here) in fp32 and bf16, and avx2.
        for isa, precision in ((None, "fp32"), (None, "bf16"), ("avx2", "fp32")):
            got = {}
            for threads in (1, 2, 3):
                r = run("train", "--model=tiny_psi2", "--seq_len=2048", "--micro_batch=2", "--steps=2", "--warmup=0",
                        f"--threads={threads}", f"--precision={precision}", "--json",
                        *([f"--isa={isa}"] if isa else []))
                if r.returncode != 0 and isa == "avx2" and "avx2" in r.stderr:
                    self.skipTest("this CPU has no avx2 path")
                self.assertEqual(r.returncode, 0, r.stderr)
                j = json.loads(r.stdout)
                got[threads] = (j["losses"], j["grad_norms"])
            for threads in (2, 3):
                self.assertEqual(got[threads], got[1], f"{isa or j['isa']} {precision}: {threads} threads against 1")

    def test_screening_json_counts_the_pairs_in_the_window(self):
        r = run("screening", "--T=64", "--w=8", "--tiles=2", "--micro_batch=2", "--min_seconds=0.01", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual((j["T"], j["keys"], j["tiles"], j["d_k"], j["d_v"]), (64, 8, 2, 16, 64))
        # Σ_i min(8, i + 1) / T: 1 + 2 + … + 8, then 8 for the other 56 queries.
        self.assertAlmostEqual(j["pairs_per_token"], (36 + 56 * 8) / 64)
        self.assertTrue(0 <= j["accepted_fraction"] <= 1)
        self.assertGreater(j["forward_ns_per_tile_token"], 0)
        self.assertGreater(j["backward_ns_per_tile_token"], 0)
        self.assertGreater(j["forward_thread_cpu_seconds"], 0)
        self.assertGreater(j["backward_thread_cpu_seconds"], 0)

    def test_decode_feeds_the_prompt_both_ways_to_the_same_first_token(self):
        # bench decode: the prompt token by token and in chunks of --feed_rows (20 tokens in
        # chunks of 8 cross two chunk boundaries), both families; the same greedy token.
        for model in ("tiny_psi4", "tiny_transformer"):
            r = run("decode", f"--model={model}", "--prompt_tokens=20", "--feed_rows=8", "--new_tokens=4", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual((j["model"], j["device"], j["precision"]), (model, "cpu", "fp32"))
            self.assertEqual((j["prompt_tokens"], j["feed_rows"], j["new_tokens"]), (20, 8, 4))
            self.assertTrue(j["first_token_agrees"], j)
            self.assertAlmostEqual(j["chunked_speedup"],
                                   j["first_token_seconds_token_by_token"] / j["first_token_seconds_chunked"])
            self.assertAlmostEqual(j["decode_tokens_per_second"], 4 / j["decode_seconds"])
        text = run("decode", "--model=tiny_psi4", "--prompt_tokens=5", "--new_tokens=2")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, r"prompt fed in 256-token chunks .* \(\d+\.\d\dx\)")
        for flag in ("--prompt_tokens=0", "--new_tokens=-1", "--feed_rows=0", "--precision=fp8", "--device=tpu",
                     "--precision=bf16"):
            self.assert_one_line_error(run("decode", "--model=tiny_psi4", flag), flag.split("=")[0])
        # --model beside the weights it would not describe (a fresh-eyes report: the weights' model ran).
        self.assert_one_line_error(run("decode", "--model=psi64", "--weights=/nonexistent.h5"), "--model=psi64",
                                   "--weights", "give one")

    def test_train_help_shows_the_defaults_it_runs_with(self):
        # Field report: `bench train --help` said --steps (default: 0) and --seq_len (default: 0)
        # while bench ran 10 steps of 256 tokens.
        shown = dict(re.findall(r"^  --(steps|seq_len)  .*\(default: (\d+)\)$", run("train", "--help").stdout, re.M))
        self.assertEqual(shown, {"steps": "10", "seq_len": "256"})
        r = run("train", "--model=tiny_psi2", "--micro_batch=1", "--warmup=0", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual((j["steps"], j["seq_len"]), (int(shown["steps"]), int(shown["seq_len"])))

    def test_bad_input_is_one_line(self):
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--micro_batch=0"), "--micro_batch")
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--precision=fp8"), "--precision")
        self.assert_one_line_error(run("screening", "--w=0.5"), "--w")
        self.assert_one_line_error(run("screening", "--r=2"), "--r")
        self.assert_one_line_error(run("nonsense"), "train", "screening")
        # Given sizes are checked, not replaced by defaults; products past 2^31 are refused before they overflow.
        for flag in ("--seq_len=0", "--steps=-3", "--head_chunk_rows=0", "--head_vocab_block=-1"):
            self.assert_one_line_error(run("train", "--model=tiny_psi2", flag), flag)
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--seq_len=4611686018427387904"), "above 2^31")
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--lr=nan"), "--lr=nan")
        self.assert_one_line_error(run("screening", "--T=100000", "--micro_batch=100000"), "above 2^31")
        # Sizes train refuses for memory at once (issue 31: bench grew to 6 GB until killed).
        self.assert_one_line_error(run("train", "--model=psi8", "--seq_len=1000000", "--micro_batch=64"),
                                   "--micro_batch=64 x --seq_len=1000000 needs at least", "of memory this machine has")

    def test_every_instruction_set_path_and_head_path_is_named_and_runs(self):
        # tiny_psi4's d_E = 16 (one 64-byte vector) takes the panel head; each path this
        # CPU runs (--isa), and the BLAS head, must train to the same losses up to rounding.
        best = None
        losses = {}
        for isa in ("generic", "avx2", "avx512"):
            for head in ("panels", "blas"):
                r = run("train", "--model=tiny_psi4", "--seq_len=16", "--micro_batch=2", "--steps=2", "--warmup=0",
                        f"--isa={isa}", f"--head_path={head}", "--json")
                if r.returncode != 0:
                    self.assertIn("this CPU cannot run the", r.stderr)  # a path the CPU lacks: one line
                    self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                    continue
                j = json.loads(r.stdout)
                self.assertEqual((j["isa"], j["head_path"]), (isa, head))
                self.assertIn(j["cpu_best_isa"], ("generic", "avx2", "avx512"))
                self.assertTrue(j["cpu"])
                best = j["cpu_best_isa"]
                losses[(isa, head)] = j["loss_last"]
        self.assertIn(("generic", "panels"), losses)
        ref = losses[("generic", "blas")]
        for key, loss in losses.items():
            self.assertAlmostEqual(loss, ref, delta=1e-4 * abs(ref), msg=key)
        if best == "avx512":
            self.assertEqual(len(losses), 6)
        # tiny_psi2's d_E = 8 is not a whole vector: its head is BLAS whatever was asked.
        r = run("train", "--model=tiny_psi2", "--seq_len=8", "--steps=1", "--warmup=0", "--json")
        self.assertEqual(json.loads(r.stdout)["head_path"], "blas")

    def test_compare_paths_prints_every_path_beside_blas(self):
        r = run("train", "--model=tiny_psi4", "--seq_len=16", "--micro_batch=1", "--steps=1", "--warmup=0",
                "--compare_paths", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        paths = [(p["isa"], p["head_path"]) for p in j["paths"]]
        self.assertIn(("generic", "blas"), paths)
        self.assertIn(("generic", "panels"), paths)
        self.assertIn((j["cpu_best_isa"], "panels"), paths)
        for p in j["paths"]:
            self.assertGreater(p["step_seconds"], 0)
            if p["head_path"] == "blas":
                self.assertAlmostEqual(p["blas_over_this"], 1.0)
        self.assertEqual({p["step_precision"] for p in j["paths"]}, {"fp32"})
        # bf16: the rows of paths without bf16 dot products say they computed in fp32 (they did
        # not say so: a fresh-eyes finding); generic never has them.
        r = run("train", "--model=tiny_psi4", "--seq_len=16", "--micro_batch=1", "--steps=1", "--warmup=0",
                "--compare_paths", "--precision=bf16", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        ran = {p["isa"]: p["step_precision"] for p in json.loads(r.stdout)["paths"]}
        self.assertEqual(ran["generic"], "fp32")
        self.assertEqual(ran.get("avx2", "fp32"), "fp32")
        r = run("train", "--model=tiny_psi4", "--seq_len=16", "--steps=1", "--warmup=0", "--compare_paths")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("vs blas", r.stdout)
        self.assertIn("computes", r.stdout)
        for flag in ("--isa=avx2", "--head_path=blas"):  # the comparison runs them all
            self.assert_one_line_error(run("train", "--model=tiny_psi4", "--compare_paths", flag), flag.split("=")[0])

    def test_a_bad_instruction_set_path_is_one_line(self):
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--isa=avx9"), "--isa=avx9")
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--head_path=gpu"), "--head_path=gpu")
        r = subprocess.run([BIN, "bench", "train", "--model=tiny_psi2", "--steps=1", "--warmup=0"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, MULTISCREEN_ISA="sse9"))
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("MULTISCREEN_ISA=sse9", r.stderr)
        r = subprocess.run([BIN, "bench", "screening", "--T=64", "--min_seconds=0.01"], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, MULTISCREEN_ISA="avx2\nx"))  # still one line
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_count_needs_the_emulated_device(self):
        # Only the emulated build counts what the device runs (tests/cuda_emulator/bench_count_test.py).
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--device=cpu", "--count"),
                                   "--count counts what the emulated device runs", "cmake --preset emulated")

    def test_another_subcommands_flag_is_refused(self):
        self.assert_one_line_error(run("train", "--model=tiny_psi2", "--T=64"), "--T is not a flag of this command")
        self.assert_one_line_error(run("screening", "--seq_len=64"), "--seq_len is not a flag of this command")

    def test_flags_from_a_flagfile_count_as_given(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "flags")
            with open(path, "w") as f:
                f.write("--model=tiny_psi2\n--seq_len=7\n--steps=2\n")
            r = run("train", f"--flagfile={path}", "--warmup=0", "--micro_batch", "3", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual((j["seq_len"], j["steps"], j["micro_batch"]), (7, 2, 3))
            with open(path, "w") as f:
                f.write("--T=64\n")
            self.assert_one_line_error(run("train", "--model=tiny_psi2", f"--flagfile={path}"), "--T is not a flag")

    def test_huge_head_blocks_and_an_infinite_window_run(self):
        r = run("train", "--model=tiny_psi4", "--seq_len=8", "--micro_batch=1", "--steps=1", "--warmup=0",
                "--head_vocab_block=9223372036854775807", "--head_chunk_rows=9223372036854775807", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(math.isfinite(json.loads(r.stdout)["loss_first"]))
        for w, keys in (("inf", 16), ("1e300", 16)):
            r = run("screening", "--T=16", f"--w={w}", "--tiles=1", "--min_seconds=0.01", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["keys"], keys)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)

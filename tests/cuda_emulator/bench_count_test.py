#!/usr/bin/python3
"""`multiscreen bench train --device=cuda --count` on the emulated device
(MULTISCREEN_CUDA=EMULATED): the table of what one training step runs, per kernel and
cuBLAS product. Its GEMMs' m·n·k add up to 3·T·B·N (2·m·n·k FLOPs: 6·N·T, N the matrix
parameters) for tiny_psi4 in fp32 and tiny_tiled in bf16; the tiled path's step counts
mma.sync and the simple one none; host synchronizations and copies show; --count on the CPU
is refused in one line.

Run: /usr/bin/python3 tests/cuda_emulator/bench_count_test.py --multiscreen=build-emulated/multiscreen --source=.
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

BIN = SRC = None


def bench(*args):
    return subprocess.run([BIN, "bench", "train", "--seq_len=256", "--micro_batch=1", *args], capture_output=True,
                          text=True, timeout=600)


def counted(model, precision):
    r = bench(f"--model={model}", f"--precision={precision}", "--device=cuda", "--count", "--json")
    if r.returncode != 0:
        raise AssertionError(f"bench train --count --model={model} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def matrix_params(model):
    """V·d_E + N_L·N_H·d_E·(2d_K + 3d_V) of a Multiscreen config (the GEMMs' weights)."""
    cfg = {}
    with open(os.path.join(SRC, "configs", "models", model + ".textproto")) as f:
        for line in f:
            if ":" in line and not line.lstrip().startswith("#"):
                k, v = line.split(":", 1)
                cfg[k.strip()] = v.strip().strip('"')
    psi = int(cfg["psi"])
    d, dk, dv, vocab = int(cfg.get("d_e", psi * psi)), int(cfg["d_k"]), int(cfg["d_v"]), int(cfg["vocab"])
    return vocab * d + psi * psi * d * (2 * dk + 3 * dv)


class BenchCountTest(unittest.TestCase):
    def test_gemms_add_up_to_six_n_t_and_the_table_has_every_kind(self):
        for model, precision, tiled in (("tiny_psi4", "fp32", False), ("tiny_tiled", "bf16", True)):
            with self.subTest(model=model):
                j = counted(model, precision)
                c = j["counted"]
                self.assertEqual(c["granularity_bytes"], 32)
                t = c["totals"]
                self.assertEqual(t["gemm_mnk"], 3 * 256 * matrix_params(model))
                self.assertEqual(t["gemm_flops"], 2 * t["gemm_mnk"])
                ops = c["ops"]
                self.assertEqual(t["calls"], sum(r["calls"] for r in ops))
                kinds = {r["kind"] for r in ops}
                self.assertTrue({"kernel", "library", "copy", "sync"} <= kinds, kinds)
                gemms = [r for r in ops if r["kind"] == "library"]
                self.assertTrue(all(r["name"].startswith("cublasLtMatmul ") for r in gemms), gemms)
                # Every kernel and product touches memory; syncs are the step's own (no profile syncs).
                for r in ops:
                    if r["kind"] in ("kernel", "library"):
                        self.assertGreater(r["bytes_read"] + r["bytes_written"], 0, r["name"])
                self.assertGreater(t["syncs"], 0)
                self.assertEqual(t["syncs"], sum(r["calls"] for r in ops if r["kind"] == "sync"))
                mma = sum(r["mma"] for r in ops if "Tiled" in r["name"])
                self.assertEqual(mma > 0, tiled)
                self.assertEqual(t["mma"], mma)
                self.assertGreater(t["bytes_to_device"], 0)  # the tokens, at least
                self.assertEqual(j["steps"], 1)
                self.assertEqual(j["warmup"], 1)

    def test_the_text_table_has_a_row_per_op_and_totals(self):
        r = bench("--model=tiny_psi4", "--device=cuda", "--count")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("counted on the emulated device", r.stdout)
        self.assertIn("AdamWKernel (adamw.cu)", r.stdout)
        self.assertRegex(r.stdout, r"\n +\d+ +\d+ +\d+ +\d+ +13774848 .* total\n")  # 3·T·N, tiny_psi4

    def test_count_on_the_cpu_is_refused_in_one_line(self):
        r = bench("--model=tiny_psi4", "--device=cpu", "--count")
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("--count counts the device's work: add --device=cuda", lines[0])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    a, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(a.multiscreen), os.path.abspath(a.source)
    unittest.main(argv=[sys.argv[0], *rest])

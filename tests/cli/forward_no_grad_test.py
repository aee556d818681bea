#!/usr/bin/python3
"""`forward --no_grad` (issue 20: the model read one stage at a time) against today's
`forward`: the same `loss` and `token_losses`, bit for bit, in fp32, bf16 and fp64,
from a weights file and from a sharded checkpoint (tp=2 x pp=2) of a trained tiny
model, and from Psi = 16's initialization (weights file, and `ckpt init` tp2.pp2);
peak memory under --memory (VmHWM, as logged) and below the gradient forward's, up to
the longest --seq_len the bound's estimate lets through; one line for bad input (a bound too small, --memory without --no_grad, a corrupted file)
with no output written.

Run: /usr/bin/python3 tests/cli/forward_no_grad_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase  # noqa: E402

BIN = SRC = None


def peak_mib(stderr):
    m = re.search(r"peak resident memory ([0-9.]+) MiB \(VmHWM\), bound ([0-9.]+) MiB", stderr)
    assert m, stderr
    return float(m.group(1)), float(m.group(2))


def losses(path):
    """(loss, token_losses) as stored, and whether gradients are there."""
    with h5py.File(path, "r") as f:
        return f["loss"][()], f["token_losses"][()], "grad" in f


class ForwardNoGradTest(SyntheticCorpusCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokens = os.path.join(cls.data, "val_000000.bin")

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def run_ok(self, *args):
        r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, OMP_NUM_THREADS="2"))
        if r.returncode != 0:
            raise AssertionError(f"multiscreen {' '.join(args)} failed:\n{r.stderr[-3000:]}")
        return r

    def refused(self, *args, says):
        r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(says, r.stderr)

    def assert_same_bits(self, want, got):
        (wl, wt, wg), (gl, gt, gg) = losses(want), losses(got)
        self.assertTrue(wg, want)
        self.assertFalse(gg, got)  # --no_grad writes no gradients
        self.assertEqual(wt.shape, gt.shape)
        self.assertEqual(wt.dtype, gt.dtype)
        self.assertEqual(np.float64(wl).tobytes(), np.float64(gl).tobytes(), (wl, gl))
        self.assertTrue(np.array_equal(wt.view(np.uint8), gt.view(np.uint8)), np.max(np.abs(wt - gt)))

    def forward(self, out, source, *flags):
        return self.run_ok("forward", source, f"--tokens={self.tokens}", f"--out={self.path(out)}", *flags)

    def test_trained_tiny_model_from_weights_and_a_tp2_pp2_checkpoint(self):
        run = self.path("run")
        self.run_ok("train", f"--config={SRC}/configs/train/tiny_test.textproto", f"--data={self.data}",
                    f"--run_dir={run}", "--steps=3", "--grad_accum=1")
        sharded = self.path("tp2pp2")
        self.run_ok("ckpt", "reshard", f"--checkpoint={run}", "--tp=2", "--pp=2", f"--out={sharded}")
        weights = self.path("tiny.h5")
        self.run_ok("ckpt", "export", f"--checkpoint={run}", f"--out={weights}")
        for precision in ("fp32", "bf16", "fp64"):
            for B, T in ((2, 32), (1, 77)):
                with self.subTest(precision=precision, B=B, T=T):
                    shape = [f"--micro_batch={B}", f"--seq_len={T}", f"--precision={precision}"]
                    tag = f"{precision}_{B}_{T}"
                    self.forward(f"grad_{tag}.h5", f"--weights={weights}", *shape)
                    self.forward(f"w_{tag}.h5", f"--weights={weights}", "--no_grad", *shape)
                    self.forward(f"c_{tag}.h5", f"--checkpoint={sharded}", "--no_grad", *shape)
                    self.assert_same_bits(self.path(f"grad_{tag}.h5"), self.path(f"w_{tag}.h5"))
                    self.assert_same_bits(self.path(f"grad_{tag}.h5"), self.path(f"c_{tag}.h5"))
                    loss, token_losses, _ = losses(self.path(f"w_{tag}.h5"))
                    self.assertTrue(np.isfinite(loss) and 0 < loss < 10, loss)
                    self.assertAlmostEqual(float(loss), float(np.mean(token_losses.astype(np.float64))), places=5)

    def test_psi16_in_bounded_memory_from_init_and_ckpt_init(self):
        weights = self.path("psi16.h5")
        self.run_ok("init", "--model=psi16", "--seed=3", f"--out={weights}")
        sharded = self.path("psi16_tp2pp2")
        self.run_ok("ckpt", "init", "--model=psi16", "--seed=3", "--tp=2", "--pp=2", f"--out={sharded}")
        shape = ["--micro_batch=1", "--seq_len=48"]
        self.forward("psi16_grad.h5", f"--weights={weights}", *shape)
        r = self.forward("psi16_w.h5", f"--weights={weights}", "--no_grad", "--memory=256M", *shape)
        peak, bound = peak_mib(r.stderr)
        self.assertEqual(bound, 256.0)
        # Psi = 16 holds 110 MB of weights; the gradient forward holds them twice with
        # their gradients (over 330 MB), --no_grad its largest stage: W_E, Ē and the
        # head's panels (3 x 51 MB).
        self.assertLess(peak, 256.0, r.stderr)
        r = self.forward("psi16_c.h5", f"--checkpoint={sharded}", "--no_grad", "--memory=256M", *shape)
        self.assertLess(peak_mib(r.stderr)[0], 256.0, r.stderr)
        self.assert_same_bits(self.path("psi16_grad.h5"), self.path("psi16_w.h5"))
        self.assert_same_bits(self.path("psi16_grad.h5"), self.path("psi16_c.h5"))
        # A bound below the estimate is refused before the weights are read.
        out = self.path("never.h5")
        self.refused("forward", f"--weights={weights}", f"--tokens={self.tokens}", f"--out={out}", "--no_grad",
                     "--memory=64M", *shape, says="--memory=64M: --no_grad of psi16 at --micro_batch=1 --seq_len=48 "
                     "needs about")
        self.assertFalse(os.path.exists(out))

    def test_every_seq_len_the_estimate_lets_through_stays_under_the_bound(self):
        # A field report: psi8 at --seq_len=140 passed --memory=64M (the stages' estimate,
        # 63.8 MiB) and peaked at 71.7 MiB. The longest --seq_len not refused is found by
        # bisection; every run along the way stays under the bound.
        weights = self.path("psi8.h5")
        self.run_ok("init", "--model=psi8", "--seed=3", f"--out={weights}")
        lo, hi = 0, 512  # lo: known to run (0: none yet), hi: known refused
        r = subprocess.run([BIN, "forward", f"--weights={weights}", f"--tokens={self.tokens}",
                            f"--out={self.path('psi8_512.h5')}", "--no_grad", "--memory=64M", "--micro_batch=1",
                            "--seq_len=512"], capture_output=True, text=True, timeout=300)
        self.assertIn("--memory=64M: --no_grad of psi8 at --micro_batch=1 --seq_len=512 needs about", r.stderr)
        while hi - lo > 1:
            T = (lo + hi) // 2
            r = subprocess.run([BIN, "forward", f"--weights={weights}", f"--tokens={self.tokens}",
                                f"--out={self.path(f'psi8_{T}.h5')}", "--no_grad", "--memory=64M", "--micro_batch=1",
                                f"--seq_len={T}"], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, OMP_NUM_THREADS="2"))
            if r.returncode != 0:
                self.assertIn(f"--seq_len={T} needs about", r.stderr)
                hi = T
                continue
            peak, bound = peak_mib(r.stderr)
            self.assertEqual(bound, 64.0)
            self.assertLessEqual(peak, bound, f"--seq_len={T}: {r.stderr}")
            lo = T
        self.assertGreater(lo, 0, "psi8 ran at no --seq_len under --memory=64M")

    def test_the_estimate_bounds_the_peak_at_every_thread_count(self):
        # A field report: psi8 at --micro_batch=16 --seq_len=512 --memory=1G peaked at
        # 167.3 MiB with 8 OpenMP threads, over its 165.3 MiB estimate (OpenBLAS packs each
        # thread's share of the rows in that thread's own buffer, which stays resident).
        weights = self.path("psi8_threads.h5")
        self.run_ok("init", "--model=psi8", "--seed=3", f"--out={weights}")
        for threads in ("1", "4", "8"):
            with self.subTest(threads=threads):
                r = subprocess.run([BIN, "forward", f"--weights={weights}", f"--tokens={self.tokens}",
                                    f"--out={self.path(f'psi8_t{threads}.h5')}", "--no_grad", "--memory=1G",
                                    "--micro_batch=16", "--seq_len=512"], capture_output=True, text=True,
                                   timeout=300, env=dict(os.environ, OMP_NUM_THREADS=threads))
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                m = re.search(r"estimate ([0-9.]+) MiB for ([0-9]+) threads", r.stderr)
                self.assertTrue(m, r.stderr)
                self.assertEqual(m.group(2), threads)
                peak, _ = peak_mib(r.stderr)
                self.assertLessEqual(peak, float(m.group(1)), f"OMP_NUM_THREADS={threads}: {r.stderr}")

    def test_compare_export_tool(self):
        """tools/compare_export.py (used on the Psi = 64 export): identical, then one flipped sign found."""
        sharded = self.path("cmp_tp2pp2")
        self.run_ok("ckpt", "init", "--model=tiny_psi4", "--seed=9", "--tp=2", "--pp=2", f"--out={sharded}")
        weights = self.path("cmp.h5")
        self.run_ok("ckpt", "export", f"--checkpoint={sharded}", f"--out={weights}")
        tool = [sys.executable, os.path.join(SRC, "tools", "compare_export.py"), f"--weights={weights}",
                f"--checkpoint={sharded}"]
        r = subprocess.run(tool, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # 35 tensors; W_E on both stages, s_E/s_F on both tp ranks: 72 shard datasets.
        self.assertIn("compared 72 shard datasets", r.stdout)
        self.assertIn("identical", r.stdout)
        with h5py.File(weights, "r+") as f:
            f["layers/002/W_Q"][3, 1, 1] *= -1
            f["head/s_F"][()] = -f["head/s_F"][()] if f["head/s_F"][()] != 0 else -0.0
        r = subprocess.run(tool, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("layers/002/W_Q: shard_pp1_tp1.h5 differs at row 3", r.stdout)
        self.assertIn("head/s_F: shard_pp1_tp0.h5 differs at row 0", r.stdout)
        self.assertIn("3 mismatches", r.stdout)  # s_F on both tp ranks of the last stage, W_Q once

    def test_bad_input_is_one_line_and_writes_nothing(self):
        weights = self.path("psi4.h5")
        self.run_ok("init", "--model=tiny_psi4", "--seed=5", f"--out={weights}")
        out = self.path("bad.h5")
        shape = ["--micro_batch=1", "--seq_len=16"]
        self.refused("forward", f"--weights={weights}", f"--tokens={self.tokens}", f"--out={out}", "--memory=1G",
                     *shape, says="--memory bounds forward --no_grad only")
        self.refused("forward", f"--weights={weights}", f"--tokens={self.tokens}", f"--out={out}", "--no_grad",
                     "--memory=12", *shape, says="--memory=12")
        # One value of the last layer changed: the file's params_crc32c no longer holds.
        corrupt = self.path("corrupt.h5")
        with open(weights, "rb") as src, open(corrupt, "wb") as dst:
            dst.write(src.read())
        with h5py.File(corrupt, "r+") as f:
            f["layers/003/W_O"][0, 0, 0] += 1.0
        self.refused("forward", f"--weights={corrupt}", f"--tokens={self.tokens}", f"--out={out}", "--no_grad",
                     *shape, says="the parameters fail their CRC-32C")
        with h5py.File(corrupt, "r+") as f:
            f["layers/003/W_O"][0, 0, 0] = np.nan
        self.refused("forward", f"--weights={corrupt}", f"--tokens={self.tokens}", f"--out={out}", "--no_grad",
                     *shape, says="dataset layers/003/W_O holds a non-finite value")
        self.refused("forward", f"--weights={weights}", f"--checkpoint={self.path('x')}", f"--tokens={self.tokens}",
                     f"--out={out}", "--no_grad", *shape, says="give exactly one of --weights=FILE.h5 and --checkpoint=DIR")
        self.assertFalse(os.path.exists(out))


def main():
    global BIN, SRC
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args, rest = parser.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""fp16 dynamic loss scaling decides alike under every layout (ctest label mpi): the same
global batch, started at a loss scale that overflows for the first steps and then passes
the overflow threshold, skips and applies the same steps, with the same loss scale after
each, on one process (grad_accum 2·M) and under dp = 2 (grad_accum M, with and without
ZeRO-1), pp = 2 and tp = 2; the applied updates agree as the fp32 layouts do.

Before the step weighed each micro-batch by 1/(M·dp) (parallel/step.cc), dp = 2 ran its
backward at twice one process's scale and skipped step 4 (loss scale 7.63e6) that one
process applied (seen: dp2 and dp2_zero1 failed, pp2 and tp2 passed).

Run: /usr/bin/python3 tests/parallel/train_fp16_layouts_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase  # noqa: E402

BIN = SRC = MPIRUN = None
# tiny_test's global batch 16 = grad_accum 4 x micro_batch 4 on one process. From this scale
# steps 1 to 3 overflow in fp16 (the scale halves to 7.63e6) and step 4 on applies: the
# threshold lies between, where a layout that ran its backward at another scale decides
# otherwise (measured on the synthetic corpus, seed 1).
INITIAL_SCALE = 6.103515625e7  # 1e12 / 2^14
LR = 2 ** -6  # train_layouts_test's: the layouts stay within 1e-5 of one process
TOL = 1e-5    # relative, per logged loss of an applied step (train_layouts_test's)
STEPS = 6


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [m for m in map(json.loads, f) if "loss" in m]


class TrainFp16LayoutsTest(SyntheticCorpusCase):
    def fp16_config(self):
        cfg = os.path.join(self.tmp.name, "fp16.textproto")
        with open(self.config) as f, open(cfg, "w") as g:
            g.write(f.read().replace("precision: FP32", "precision: FP16") +
                    f"initial_loss_scale: {INITIAL_SCALE!r}\nmax_nonfinite_steps: 10\n")
        return cfg

    def train(self, name, np, *flags):
        run_dir = os.path.join(self.tmp.name, name)
        cmd = [BIN, "train", f"--config={self.fp16_config()}", f"--data={self.data}", f"--run_dir={run_dir}",
               f"--lr={LR}", f"--steps={STEPS}", "--eval_every=100", *flags]
        if np > 1:
            cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(np), *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        return rows(run_dir)

    def test_every_layout_skips_and_applies_the_steps_one_process_does(self):
        want = self.train("single", 1, "--grad_accum=4")
        decisions = [(m["step"], m["skipped"], m["loss_scale"]) for m in want]
        # The test needs both sides of the threshold: skipped steps, then applied ones.
        self.assertTrue(want[0]["skipped"], decisions)
        self.assertFalse(want[-1]["skipped"], decisions)
        for name, np, flags in [("dp2", 2, ["--grad_accum=2"]),
                                ("dp2_zero1", 2, ["--grad_accum=2", "--zero=1"]),
                                ("pp2", 2, ["--pp=2", "--grad_accum=4"]),
                                ("tp2", 2, ["--tp=2", "--grad_accum=4"])]:
            with self.subTest(name):
                got = self.train(name, np, *flags)
                self.assertEqual([(m["step"], m["skipped"], m["loss_scale"]) for m in got], decisions)
                for a, b in zip(want, got):
                    self.assertLessEqual(abs(a["loss"] - b["loss"]), TOL * abs(a["loss"]), f"step {a['step']}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
